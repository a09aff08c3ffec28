//! Runs a plan: host checks, device checks, a calibration, each device's (with itself) and
//! every pair's performance checks, the integrity run.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use perf::exchange::Role;
use perf::session::{self, Options, Outcome, PerfTest, Quiet, Row};
use providers::{ContextOptions, Progress};
use verbs::Context;

use crate::check::{Measurement, Threshold};
use crate::plan::{PerfCheck, Plan};
use crate::report::{BwPoint, Check, LatPoint, PairResult, Report, Status};

/// Where a run reports its progress.
pub trait RunProgress {
    /// A check is starting.
    fn starting(&mut self, what: &str);
    /// A check ended.
    fn done(&mut self, check: &Check);
    /// A performance check measured: its test, the measuring (client) side's device, the
    /// other side's, and what the client got (for `--publish`).
    fn measured(&mut self, _test: &str, _device: &str, _peer: &str, _outcome: &Outcome) {}
    /// Something the run set aside and the operator should know (a stray answer from a rank).
    fn note(&mut self, _what: &str) {}
}

/// A progress sink that ignores everything.
#[derive(Debug, Default)]
pub struct Silent;
impl RunProgress for Silent {
    fn starting(&mut self, _: &str) {}
    fn done(&mut self, _: &Check) {}
}

struct Run<'a> {
    report: Report,
    progress: &'a mut dyn RunProgress,
}

impl Run<'_> {
    fn push(&mut self, c: Check) {
        self.progress.done(&c);
        self.report.checks.push(c);
    }
}

/// Runs `plan` on this host (`sys` stands for `/sys`).
pub fn run(plan: &Plan, sys: &Path, progress: &mut dyn RunProgress) -> Report {
    let t0 = Instant::now();
    let mut r = Run { report: Report::new(&plan.name), progress };
    host_checks(plan, sys, &mut r);
    // Device checks open each device in turn, without a busy progress thread, and close it:
    // a plan of a thousand devices holds one open at a time.
    let opened: Vec<bool> =
        plan.devices.iter().map(|d| device_checks(plan, sys, d, &mut r)).collect();
    // A measurement opens its two devices (busy-polled, as perf runs) for as long as it runs:
    // one pair at a time.
    let ctx_of = |name: &str| -> Option<Context> {
        let i = plan.devices.iter().position(|d| d == name)?;
        let opts = ContextOptions { progress: Progress::Busy, ..Default::default() };
        if opened[i] { providers::open(name, &opts).ok() } else { None }
    };
    let open_pair = |a: &str, b: &str| -> Option<(Context, Option<Context>)> {
        let ca = ctx_of(a)?;
        if a == b { Some((ca, None)) } else { Some((ca, Some(ctx_of(b)?))) }
    };
    let pairs = plan.pairs();
    // Calibration, before the matrix: each perf entry on the first pair, and on the first
    // device with itself when it runs on devices, so that like is compared with like (a
    // loopback through one device shares that device's work between both ends).
    let first_pair = pairs.first().map(|(a, b)| (a.as_str(), b.as_str()));
    let first_device = plan.devices.first().map(|d| (d.as_str(), d.as_str()));
    let mut calibrate = |pc: &PerfCheck, ends: Option<(&str, &str)>, what: &str| {
        let (ca, cb) = open_pair(ends?.0, ends?.1)?;
        r.progress.starting(&format!("calibration {} ({what})", pc.test));
        run_pair(&ca, cb.as_ref().unwrap_or(&ca), &options(pc), &plan.gpus)
            .map(|(o, _)| o.rows)
            .ok()
    };
    let mut calibration: Vec<(Vec<Row>, Vec<Row>)> = Vec::new();
    for pc in &plan.perf {
        let on_pairs =
            if pc.on.on_pairs() { calibrate(pc, first_pair, "first pair") } else { None };
        let on_devices =
            if pc.on.on_devices() { calibrate(pc, first_device, "first device") } else { None };
        calibration.push((on_pairs.unwrap_or_default(), on_devices.unwrap_or_default()));
    }
    // Each device with itself first (the loopback through one device), then every pair.
    let targets = plan
        .devices
        .iter()
        .filter(|_| plan.perf.iter().any(|pc| pc.on.on_devices()))
        .map(|d| (d, d))
        .chain(pairs.iter().map(|(a, b)| (a, b)));
    for (a, b) in targets {
        let alone = a == b;
        let pair = if alone { a.clone() } else { format!("{a}<->{b}") };
        let mut pair_status = Status::Pass;
        let measures =
            plan.perf.iter().any(|pc| if alone { pc.on.on_devices() } else { pc.on.on_pairs() })
                || (plan.integrity.is_some() && !alone);
        let ends = if measures { open_pair(a, b) } else { None };
        let ends = ends.as_ref().map(|(ca, cb)| (ca, cb.as_ref().unwrap_or(ca)));
        for (k, pc) in plan.perf.iter().enumerate() {
            if (alone && !pc.on.on_devices()) || (!alone && !pc.on.on_pairs()) {
                continue;
            }
            let base = format!("perf/{}/{pair}", pc.test);
            let Some((ca, cb)) = ends else {
                let why = if alone {
                    "the device could not be opened"
                } else {
                    "a device of the pair could not be opened"
                };
                r.push(Check::skipped(&base, why));
                pair_status = pair_status.max(Status::Skipped);
                continue;
            };
            let cal = if alone { &calibration[k].1 } else { &calibration[k].0 };
            let status = perf_check(&mut r, plan, pc, &pair, (ca, cb), cal);
            pair_status = pair_status.max(status);
        }
        if let Some(i) = plan.integrity.as_ref().filter(|_| !alone) {
            let name = format!("integrity/{pair}");
            let started = Instant::now();
            if let Some((ca, cb)) = ends {
                r.progress.starting(&name);
                let mut o = Options::new(PerfTest::SendBw);
                o.sizes = vec![i.size];
                o.duration = Some(Duration::from_secs_f64(i.seconds));
                o.validate = true;
                let c = match run_pair(ca, cb, &o, &plan.gpus) {
                    Ok((cli, srv)) => {
                        let mut v = cli.validation.unwrap_or_default();
                        v.merge(&srv.validation.unwrap_or_default());
                        let detail = format!(
                            "{} messages, {} bytes checked, {} damaged{}",
                            v.messages,
                            v.bytes,
                            v.errors,
                            v.first_error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                        );
                        // Nothing checked is no proof: it fails as a damaged run would.
                        let threshold = if v.messages > 0 {
                            Threshold::AtMost(0.0)
                        } else {
                            Threshold::Unset(format!("{detail}: no message was checked"))
                        };
                        Measurement::new(&name)
                            .figure(v.errors as f64, "damaged messages")
                            .want(threshold)
                            .threshold_text("= 0")
                            .detail(detail)
                            .took(started.elapsed())
                            .judge(None)
                    }
                    Err(e) => failed(&name, e, started.elapsed()),
                };
                pair_status = pair_status.max(c.status);
                r.push(c);
            } else {
                r.push(Check::skipped(&name, "a device of the pair could not be opened"));
            }
        }
        r.report.pairs.push(PairResult { a: a.clone(), b: b.clone(), status: pair_status });
    }
    r.report.devices = plan.devices.clone();
    r.report.seconds = t0.elapsed().as_secs_f64();
    r.report
}

/// One performance check on `pair` (a device's name, or `a<->b`), server `ends.0`, client
/// `ends.1`: its checks pushed, its figures kept for the charts; its worst status.
fn perf_check(
    r: &mut Run<'_>,
    plan: &Plan,
    pc: &PerfCheck,
    pair: &str,
    (ca, cb): (&Context, &Context),
    calibration: &[Row],
) -> Status {
    let started = Instant::now();
    let base = format!("perf/{}/{pair}", pc.test);
    r.progress.starting(&base);
    let mut status = Status::Pass;
    let mut outcome = run_pair(ca, cb, &options(pc), &plan.gpus);
    // A figure outside its threshold is measured once more before it fails: one slow run on
    // a busy host is noise, two in a row are the pair. Both are reported.
    let mut note = None;
    if let Ok((out, _)) = &outcome {
        let failed: Vec<String> = out
            .rows
            .iter()
            .flat_map(|row| judge(pc, pair, row, calibration, started.elapsed()))
            .filter(|c| c.status == Status::Fail)
            .map(|c| {
                format!("{} {}", c.measured.map(|m| format!("{m:.2}")).unwrap_or_default(), c.unit)
            })
            .collect();
        if plan.retries > 0 && !failed.is_empty() {
            r.progress.starting(&format!("{base} (again)"));
            if let Ok(again) = run_pair(ca, cb, &options(pc), &plan.gpus) {
                note = Some(format!("measured twice; the first run gave {}", failed.join(", ")));
                outcome = Ok(again);
            }
        }
    }
    match outcome {
        Ok((out, _)) => {
            r.progress.measured(&pc.test, &cb.device_name(), &ca.device_name(), &out);
            for row in &out.rows {
                for mut c in judge(pc, pair, row, calibration, started.elapsed()) {
                    if let Some(note) = &note {
                        c.detail = format!("{}; {note}", c.detail);
                    }
                    status = status.max(c.status);
                    r.push(c);
                }
                match row {
                    Row::Bw(b) => r.report.bandwidth.push(BwPoint {
                        pair: pair.to_string(),
                        test: pc.test.clone(),
                        size: b.size,
                        mb_per_s: b.bw_avg,
                    }),
                    Row::Lat(l) => r.report.latency.push(LatPoint {
                        pair: pair.to_string(),
                        test: pc.test.clone(),
                        size: l.size,
                        min: l.t_min,
                        median: l.t_typical,
                        p99: l.p99,
                        p99_9: l.p99_9,
                    }),
                }
            }
        }
        Err(e) => {
            status = Status::Fail;
            r.push(failed(&base, e, started.elapsed()));
        }
    }
    status
}

fn options(pc: &PerfCheck) -> Options {
    let t = PerfTest::from_name(&pc.test).unwrap_or(PerfTest::WriteBw);
    let mut o = Options::new(t);
    if !pc.sizes.is_empty() {
        o.sizes = pc.sizes.clone();
    }
    if let Some(n) = pc.iters {
        o.iters = n;
    }
    o.duration = pc.seconds.map(Duration::from_secs_f64);
    o.stall = Duration::from_secs(10);
    o.wait = Some(Duration::from_secs(60));
    o
}

/// Runs one test between `a` (server) and `b` (client) in two threads: (client's outcome,
/// server's).
fn run_pair(
    a: &Context,
    b: &Context,
    o: &Options,
    gpus: &std::collections::BTreeMap<String, u32>,
) -> Result<(Outcome, Outcome), String> {
    // Each side's buffers where the plan puts them: its GPU's memory, or the host's.
    let place = |c: &Context| {
        gpus.get(&c.device_name()).map_or(perf::session::Placement::Host, |g| {
            perf::session::Placement::Cuda { gpu: *g, dmabuf: false }
        })
    };
    // Each side sends the GID its address comes from (index 0 is a link-local one on RoCE).
    let (oa, ob) = (
        Options { gid_index: a.gid_index(), memory: place(a), ..o.clone() },
        Options { gid_index: b.gid_index(), memory: place(b), ..o.clone() },
    );
    let (o_a, o_b) = (&oa, &ob);
    let listener =
        TcpListener::bind((a.ip(), 0)).map_err(|e| format!("cannot listen on {}: {e}", a.ip()))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    std::thread::scope(|s| {
        let srv = s.spawn(|| -> Result<Outcome, String> {
            let (sock, peer) = listener.accept().map_err(|e| e.to_string())?;
            session::run(a, o_a, Role::Server, &sock, peer.ip(), false, &mut Quiet)
                .map_err(|e| e.to_string())
        });
        let cli = TcpStream::connect(addr).map_err(|e| e.to_string()).and_then(|sock| {
            session::run(b, o_b, Role::Client, &sock, a.ip(), false, &mut Quiet)
                .map_err(|e| e.to_string())
        });
        let srv = srv.join().map_err(|_| "the server side panicked".to_string())?;
        Ok((cli?, srv?))
    })
}

fn calibration_for(rows: &[Row], size: u64) -> Option<&Row> {
    rows.iter().find(|r| match r {
        Row::Bw(b) => b.size == size,
        Row::Lat(l) => l.size == size,
    })
}

fn judge(pc: &PerfCheck, pair: &str, row: &Row, cal: &[Row], took: Duration) -> Vec<Check> {
    let mut out = Vec::new();
    let mut limit = |name: String,
                     measured: f64,
                     unit: &str,
                     abs: Option<f64>,
                     rel: Option<(f64, Option<f64>)>,
                     higher: bool| {
        let mut bound: Option<(f64, String)> = None;
        if let Some(a) = abs {
            bound = Some((a, format!("{} {a}", if higher { ">=" } else { "<=" })));
        }
        if let Some((factor, Some(c))) = rel {
            let v = factor * c;
            let tighter = match &bound {
                None => true,
                Some((b, _)) => {
                    if higher {
                        v > *b
                    } else {
                        v < *b
                    }
                }
            };
            if tighter {
                bound = Some((
                    v,
                    format!(
                        "{} {v:.2} ({factor} x calibration {c:.2})",
                        if higher { ">=" } else { "<=" }
                    ),
                ));
            }
        }
        let detail = if pair.contains("<->") {
            format!("{} {pair}", pc.test)
        } else {
            format!("{} {pair} with itself (loopback through the device)", pc.test)
        };
        let m = Measurement::new(&name).figure(measured, unit).took(took);
        let c = match bound {
            None if rel.is_some() => m.want(Threshold::Unset(
                "the calibration run produced no figure to compare with".into(),
            )),
            None => m.detail(format!("{detail}: measured, no threshold")),
            Some((b, text)) => m
                .want(if higher { Threshold::AtLeast(b) } else { Threshold::AtMost(b) })
                .threshold_text(text)
                .detail(detail),
        }
        .judge(None);
        out.push(c);
    };
    match row {
        Row::Bw(b) => {
            let cal = calibration_for(cal, b.size)
                .and_then(|r| if let Row::Bw(c) = r { Some(c.bw_avg) } else { None });
            limit(
                format!("perf/{}/{}B/{pair}/bandwidth", pc.test, b.size),
                b.bw_avg,
                "MB/s",
                pc.min_bw_mb_per_s,
                pc.min_bw_vs_calibration.map(|f| (f, cal)),
                true,
            );
        }
        Row::Lat(l) => {
            let cal = calibration_for(cal, l.size)
                .and_then(|r| if let Row::Lat(c) = r { Some(c) } else { None });
            limit(
                format!("perf/{}/{}B/{pair}/median", pc.test, l.size),
                l.t_typical,
                "us",
                pc.max_median_us,
                pc.max_median_us_vs_calibration.map(|f| (f, cal.map(|c| c.t_typical))),
                false,
            );
            limit(
                format!("perf/{}/{}B/{pair}/p99.9", pc.test, l.size),
                l.p99_9,
                "us",
                pc.max_p99_9_us,
                pc.max_p99_9_us_vs_calibration.map(|f| (f, cal.map(|c| c.p99_9))),
                false,
            );
        }
    }
    out
}

fn host_checks(plan: &Plan, sys: &Path, r: &mut Run<'_>) {
    let h = &plan.host;
    if !h.doctor.is_empty() {
        // The live host, or the tree `sys` stands in (its procfs beside it).
        let src =
            doctor::Source::for_roots(sys, &sys.parent().unwrap_or(Path::new("/")).join("proc"));
        let report = doctor::diagnose(&src);
        for kind in &h.doctor {
            let hits: Vec<&doctor::Finding> = report
                .findings
                .iter()
                .filter(|f| {
                    if kind == "error" {
                        f.severity == doctor::Severity::Error
                    } else {
                        f.kind == *kind
                    }
                })
                .collect();
            let what: Vec<String> = hits
                .iter()
                .map(|f| {
                    format!(
                        "{} {}: {} ({})",
                        f.kind,
                        f.component,
                        f.seen,
                        f.evidence.first().map_or("", String::as_str)
                    )
                })
                .collect();
            r.push(
                Measurement::new(format!("host/doctor/{kind}"))
                    .figure(hits.len() as f64, "findings")
                    .want(Threshold::AtMost(0.0))
                    .threshold_text("none")
                    .detail(format!("podnet doctor finds no {kind}"))
                    .on_fail(what.join("; "))
                    .judge(None),
            );
        }
    }
    if let Some(want) = &h.cpu_governor {
        let name = "host/cpu_governor";
        let govs = host::cpu::governors(sys);
        let c = if govs.is_empty() {
            Check::skipped(
                name,
                "no cpufreq here (no scaling_governor under devices/system/cpu): a VM or a container",
            )
        } else {
            let bad: Vec<String> =
                govs.iter().filter(|(_, g)| g != want).map(|(c, g)| format!("{c}={g}")).collect();
            Measurement::new(name)
                .figure((govs.len() - bad.len()) as f64, "CPUs")
                .want(Threshold::AtLeast(govs.len() as f64))
                .threshold_text(format!("= {} CPUs", govs.len()))
                .detail(format!("every CPU's governor is {want}"))
                .on_fail(format!("want {want}: {}", bad.join(", ")))
                .judge(None)
        };
        r.push(c);
    }
    let rdma = host::rdma_devices(sys);
    for d in &plan.devices {
        let name = verbs::DeviceName::parse(d).ok();
        let Some(info) = rdma.iter().find(|i| &i.name == d) else {
            let soft_ip = match name {
                Some(verbs::DeviceName::Soft { ip, .. }) => Some(Some(ip)),
                Some(verbs::DeviceName::SoftDefault) => Some(None),
                _ => None,
            };
            if h.nic_numa_node || h.min_netdev_mtu.is_some() {
                let what = if soft_ip.is_some() {
                    "a soft device has no PCI function"
                } else {
                    "not an RDMA device of this host"
                };
                if h.nic_numa_node {
                    r.push(Check::skipped(&format!("host/{d}/numa_node"), what));
                }
            }
            if let (Some(min), Some(ip)) = (h.min_netdev_mtu, soft_ip) {
                // A soft device's netdev is the interface of its address.
                let name = format!("host/{d}/netdev_mtu");
                let addr =
                    ip.and_then(|ip| host::local_addrs(sys).ok()?.into_iter().find(|a| a.ip == ip));
                // 127.0.0.0/8 is all on lo, though getifaddrs lists only 127.0.0.1.
                let lo = ip
                    .filter(|ip| ip.is_loopback())
                    .and_then(|_| Some(("lo".to_string(), host::netdev_mtu(sys, "lo")?)));
                r.push(match addr.and_then(|a| Some((a.netdev.clone(), a.mtu?))).or(lo) {
                    Some((nd, mtu)) => mtu_check(&name, &nd, mtu, min),
                    None => Check::skipped(
                        &name,
                        "its address is on no interface here, or the interface has no MTU",
                    ),
                });
            }
            continue;
        };
        if h.nic_numa_node {
            let name = format!("host/{d}/numa_node");
            r.push(match host::numa_node(sys, d) {
                Some(n) => Measurement::new(&name)
                    .figure(n as f64, "node")
                    .want(Threshold::AtLeast(0.0))
                    .detail(format!("{d} is on NUMA node {n}: pin its traffic there"))
                    .on_fail(
                        "the PCI function reports no NUMA node (-1): firmware/BIOS lost the locality",
                    )
                    .judge(None),
                None => Check::skipped(&name, "no device/numa_node (a virtual device)"),
            });
        }
        if let Some(min) = h.min_netdev_mtu {
            for p in &info.ports {
                let name = format!("host/{d}/{}/netdev_mtu", p.port);
                let mtu = p.netdev.as_ref().and_then(|n| host::netdev_mtu(sys, n));
                r.push(match (&p.netdev, mtu) {
                    (Some(nd), Some(m)) => mtu_check(&name, nd, m, min),
                    _ => Check::skipped(&name, "no netdev under the port (InfiniBand)"),
                });
            }
        }
    }
}

fn mtu_check(name: &str, nd: &str, mtu: u32, min: u32) -> Check {
    Measurement::new(name)
        .figure(f64::from(mtu), "bytes")
        .want(Threshold::AtLeast(f64::from(min)))
        .detail(format!("netdev {nd}"))
        .judge(None)
}

/// A check that could not measure: it failed with `error`.
fn failed(name: &str, error: impl Into<String>, took: Duration) -> Check {
    Measurement::new(name).want(Threshold::Unset(error.into())).took(took).judge(None)
}

/// The checks of device `d`; whether it opened. No progress thread spins meanwhile (event
/// mode: nothing is sent), and the device is closed after.
fn device_checks(plan: &Plan, sys: &Path, d: &str, r: &mut Run<'_>) -> bool {
    let t = Instant::now();
    r.progress.starting(&format!("device/{d}"));
    let opts = ContextOptions { progress: Progress::Event, ..Default::default() };
    let ctx = match providers::open(d, &opts) {
        Ok(c) => {
            r.push(
                Measurement::new(format!("device/{d}/present"))
                    .detail(format!("opened ({} provider)", c.provider_name()))
                    .took(t.elapsed())
                    .judge(None),
            );
            c
        }
        Err(e) => {
            r.push(failed(&format!("device/{d}/present"), e.to_string(), t.elapsed()));
            return false;
        }
    };
    if let Some(&g) = plan.gpus.get(d) {
        gpu_check(sys, d, g, r);
    }
    let dc = &plan.device;
    let port = ctx.query_port();
    if dc.port_active {
        r.push(
            Measurement::new(format!("device/{d}/port_active"))
                .words(port.state.name())
                .want(Threshold::Is(verbs::PortState::Active.name().into()))
                .detail(format!("port 1 is {}", port.state))
                .judge(None),
        );
    }
    if dc.roce_v2_gid {
        let n = ctx.gid_table().iter().filter(|g| g.gid_type == verbs::GidType::RoceV2).count();
        r.push(
            Measurement::new(format!("device/{d}/roce_v2_gid"))
                .figure(n as f64, "GIDs")
                .want(Threshold::AtLeast(1.0))
                .detail("RoCE v2 GIDs on port 1")
                .on_fail("no RoCE v2 GID: the netdev has no IP address?")
                .judge(None),
        );
    }
    if let Some(min) = dc.min_active_mtu {
        r.push(
            Measurement::new(format!("device/{d}/active_mtu"))
                .figure(f64::from(port.active_mtu.bytes()), "bytes")
                .want(Threshold::AtLeast(f64::from(min)))
                .judge(None),
        );
    }
    if dc.min_speed_gbps.is_some() || dc.width.is_some() {
        let info = host::rdma_device(sys, d);
        let p = info.as_ref().and_then(|i| i.ports.iter().find(|p| p.port == 1));
        if let Some(min) = dc.min_speed_gbps {
            let name = format!("device/{d}/speed");
            r.push(match p.and_then(|p| p.speed_gbps) {
                Some(s) => Measurement::new(&name)
                    .figure(s, "Gb/s")
                    .want(Threshold::AtLeast(min))
                    .on_fail("the link came up slower than planned")
                    .judge(None),
                None => Check::skipped(&name, "no link rate (a soft device has none)"),
            });
        }
        if let Some(w) = &dc.width {
            let name = format!("device/{d}/width");
            r.push(match p.and_then(|p| p.width.clone()) {
                Some(x) => Measurement::new(&name)
                    .words(&x)
                    .want(Threshold::Is(w.clone()))
                    .detail(x.clone())
                    .on_fail(format!("width {x}"))
                    .judge(None),
                None => Check::skipped(&name, "no link width (a soft device has none)"),
            });
        }
    }
    true
}

/// `gpu/<device>`: the device's GPU opens, and where it sits against the device — the PCIe
/// distance (`nvidia-smi topo`'s words) and both NUMA nodes, from sysfs under `sys`.
fn gpu_check(sys: &Path, d: &str, ordinal: u32, r: &mut Run<'_>) {
    let t = Instant::now();
    let name = format!("gpu/{d}");
    let g = match gpu::Gpu::open(ordinal) {
        Ok(g) => g,
        Err(e) => {
            r.push(failed(&name, format!("GPU {ordinal}: {e}"), t.elapsed()));
            return;
        }
    };
    let (gpu_path, gpu_numa) =
        host::pci::place_of(sys, &Path::new("bus/pci/devices").join(g.pci_bus_id()));
    let (dev_path, dev_numa) =
        host::pci::place_of(sys, &Path::new("class/infiniband").join(d).join("device"));
    let numa = |n: Option<i64>| n.map_or_else(|| "-".into(), |n| n.to_string());
    let place = match (&gpu_path, &dev_path) {
        (Some(gp), Some(dp)) => {
            let dist = host::pci::distance(gp, dp, gpu_numa, dev_numa);
            format!("{} to {d} ({})", dist.name(), dist.meaning())
        }
        (_, None) => format!(
            "{d} has no PCI function: the soft provider copies through the GPU's copy engine"
        ),
        (None, _) => "the GPU's PCI function is not in sysfs".into(),
    };
    r.push(
        Measurement::new(name)
            .detail(format!(
                "GPU {ordinal} {} ({}), dma-buf {}; {place}; NUMA node {} (GPU) and {} ({d})",
                g.name(),
                g.pci_bus_id(),
                if g.dma_buf_supported() { "yes" } else { "no" },
                numa(gpu_numa),
                numa(dev_numa)
            ))
            .took(t.elapsed())
            .judge(None),
    );
}
