//! `podnet agent`: RDMA telemetry served to Prometheus, or each port's health once.

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use telemetry::expose::Scrape;
use telemetry::health::{self, PortHealth, State, Thresholds};
use telemetry::prometheus_client::metrics::family::Family;
use telemetry::prometheus_client::metrics::gauge::Gauge;
use telemetry::rates::Tracker;
use telemetry::sample::{Roots, Snapshot};
use telemetry::sampler::Sampler;

use crate::cli::AgentArgs;

struct Agent {
    sampler: Sampler,
    /// The host's PCIe and kernel-log health, read through doctor.
    host: HostHealth,
    bench_dir: std::path::PathBuf,
    probe: Option<super::probe::Probe>,
    pod: Option<super::pod::Monitor>,
    thresholds: Thresholds,
    epoch: Instant,
    tracker: Mutex<Tracker>,
}

impl Agent {
    fn extra(&self) -> Option<&dyn telemetry::expose::Extra> {
        Some(self)
    }

    /// A sample with the published benchmarks: what /metrics serves.
    fn scrape(&self) -> Scrape {
        let (mut snap, health) = self.sample();
        let (bench, errors) = telemetry::bench::read_dir(&self.bench_dir);
        snap.errors.extend(errors);
        Scrape { snap, health, bench }
    }

    /// Takes a sample, feeds the rates, judges the ports.
    fn sample(&self) -> (Snapshot, Vec<PortHealth>) {
        let mut snap = self.sampler.collect();
        if let Some(p) = &self.probe {
            p.run_burst();
            snap.ports.extend(p.ports());
        }
        let t = self.epoch.elapsed().as_secs_f64();
        let mut tr = self.tracker.lock().unwrap_or_else(PoisonError::into_inner);
        health::observe(&mut tr, &snap, t);
        let keep = 2.0 * tr.window() + 60.0;
        tr.prune(t - keep);
        let h = health::evaluate(&snap, &tr, &self.thresholds);
        (snap, h)
    }
}

impl telemetry::expose::Extra for Agent {
    fn register(&self, registry: &mut telemetry::prometheus_client::registry::Registry) {
        if let Some(p) = &self.probe {
            p.register(registry);
        }
        if let Some(p) = &self.pod {
            p.register(registry);
        }
        self.host.register(registry);
    }
}

/// The host's PCIe links, AER counters, physical layer and recognised kernel-log events,
/// read through doctor's [`doctor::Source`] at each scrape (the kernel log and `ethtool`'s
/// answers at most every 30 s: reading a module's EEPROM takes tens of milliseconds).
struct HostHealth {
    src: doctor::Source,
    log: Mutex<Option<(Instant, Option<doctor::LogReport>)>>,
    phy: Mutex<Option<(Instant, PhyRead)>>,
}

/// A metric family's labels, and the families of integer and of float gauges.
type Labels = Vec<(String, String)>;
type F64 = Gauge<f64, std::sync::atomic::AtomicU64>;
type Ints = Family<Labels, Gauge>;
type Floats = Family<Labels, F64>;

/// Each RoCE netdev's physical layer: (netdev, its RDMA device, what ethtool said).
type PhyRead = Vec<(String, String, doctor::phy::Phy)>;

/// `cache`'s value, read again by `read` when it is older than 30 s.
fn cached<T: Clone>(cache: &Mutex<Option<(Instant, T)>>, read: impl FnOnce() -> T) -> T {
    let mut g = cache.lock().unwrap_or_else(PoisonError::into_inner);
    match g.as_ref() {
        Some((t, v)) if t.elapsed() < Duration::from_secs(30) => v.clone(),
        _ => {
            let v = read();
            *g = Some((Instant::now(), v.clone()));
            v
        }
    }
}

impl HostHealth {
    fn register(&self, r: &mut telemetry::prometheus_client::registry::Registry) {
        let devices = doctor::checks::rdma_devices(&self.src);
        let (speed, max_speed): (Family<Labels, F64>, Family<Labels, F64>) = Default::default();
        let (width, max_width): (Family<Labels, Gauge>, Family<Labels, Gauge>) = Default::default();
        let aer: Family<Labels, Gauge> = Family::default();
        for f in doctor::checks::pci_functions(&self.src, &devices) {
            let l = vec![
                ("device".to_string(), f.device.clone()),
                ("pci".to_string(), f.pci.clone().unwrap_or_default()),
            ];
            if let Some(k) = doctor::checks::pcie_link(&self.src, &f.dir) {
                for (fam, v) in [(&speed, k.speed), (&max_speed, k.max_speed)] {
                    if let Some(v) = v {
                        fam.get_or_create(&l).set(v);
                    }
                }
                for (fam, v) in [(&width, k.width), (&max_width, k.max_width)] {
                    if let Some(v) = v {
                        fam.get_or_create(&l).set(i64::from(v));
                    }
                }
            }
            for a in doctor::checks::aer_totals(&self.src, &f.dir) {
                let mut l = l.clone();
                l.push(("severity".into(), a.kind.into()));
                aer.get_or_create(&l).set(i64::try_from(a.n).unwrap_or(i64::MAX));
            }
        }
        r.register(
            "podnet_pcie_link_speed_gts",
            "PCIe link speed now, GT/s, of each RDMA device's and GPU's PCI function",
            speed,
        );
        r.register(
            "podnet_pcie_link_max_speed_gts",
            "PCIe link speed the function and its slot are capable of, GT/s",
            max_speed,
        );
        r.register("podnet_pcie_link_width", "PCIe link width now, lanes", width);
        r.register(
            "podnet_pcie_link_max_width",
            "PCIe link width the function is capable of, lanes",
            max_width,
        );
        r.register("podnet_pcie_aer_errors", "AER errors the function reported since boot, by severity (correctable, nonfatal, fatal)", aer);
        self.register_phy(r, &devices);
        let log = cached(&self.log, || self.src.kernel_log().map(|l| doctor::kmsg::recognise(&l)));
        if let Some(log) = log {
            let ev: Family<Labels, Gauge> = Family::default();
            for e in &log.events {
                ev.get_or_create(&vec![
                    ("kind".into(), e.kind.clone()),
                    ("device".into(), e.device.clone()),
                    ("severity".into(), e.severity.word().into()),
                ])
                .set(i64::try_from(e.count).unwrap_or(i64::MAX));
            }
            r.register(
                "podnet_kernel_log_events",
                "Kernel log lines doctor recognises (PCIe limited, AER, NIC firmware health, failed commands, module events, TX timeouts, error CQEs, link down) in the kernel's ring buffer, by kind and device",
                ev,
            );
            let un: Family<Labels, Gauge> = Family::default();
            for u in &log.unrecognised {
                un.get_or_create(&vec![("source".into(), u.source.clone())])
                    .set(i64::try_from(u.count).unwrap_or(i64::MAX));
            }
            r.register(
                "podnet_kernel_log_unrecognised_lines",
                "Kernel log lines of the RDMA drivers (mlx5, bnxt, irdma) and AER that no pattern recognises, by source",
                un,
            );
        }
    }

    /// The physical layer's series: FEC mode and block counters, PHY error counters, the
    /// cable module's temperature (and its warning threshold), receive power and power mode.
    fn register_phy(
        &self,
        r: &mut telemetry::prometheus_client::registry::Registry,
        devices: &[doctor::checks::RdmaDevice],
    ) {
        let phys = cached(&self.phy, || {
            doctor::checks::rdma_netdevs(devices)
                .into_iter()
                .filter(|(_, _, roce)| *roce)
                .map(|(nd, dev, _)| {
                    let p = doctor::phy::read(&self.src, &nd);
                    (nd, dev, p)
                })
                .collect()
        });
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let (fec, corrected, uncorrectable) = (Ints::default(), Ints::default(), Ints::default());
        let (phy_errors, low_power) = (Ints::default(), Ints::default());
        let (temp, temp_warn, rx_power) = (Floats::default(), Floats::default(), Floats::default());
        for (nd, dev, p) in &phys {
            let l = vec![("device".to_string(), dev.clone()), ("netdev".to_string(), nd.clone())];
            let with = |k: &str, v: String| {
                let mut l = l.clone();
                l.push((k.to_string(), v));
                l
            };
            if let Some(m) = &p.fec {
                fec.get_or_create(&with("mode", m.clone())).set(1);
            }
            if let Some(n) = p.fec_corrected {
                corrected.get_or_create(&l).set(int(n));
            }
            if let Some(n) = p.fec_uncorrectable {
                uncorrectable.get_or_create(&l).set(int(n));
            }
            for (key, n) in &p.counters {
                phy_errors.get_or_create(&with("counter", (*key).to_string())).set(int(*n));
            }
            if let Some(t) = p.module_temp {
                temp.get_or_create(&l).set(t);
            }
            if let Some(t) = p.module_temp_warn {
                temp_warn.get_or_create(&l).set(t);
            }
            for (i, mw) in p.rx_power_mw.iter().enumerate() {
                rx_power.get_or_create(&with("lane", (i + 1).to_string())).set(10.0 * mw.log10());
            }
            if let Some(m) = &p.power_mode {
                low_power.get_or_create(&l).set(i64::from(m == "low"));
            }
        }
        r.register(
            "podnet_nic_fec_active",
            "The FEC encoding the RoCE netdev's link runs (1 for its mode: RS, BaseR, Off)",
            fec,
        );
        r.register(
            "podnet_nic_fec_corrected_blocks",
            "FEC blocks the PHY corrected (ethtool -I --show-fec)",
            corrected,
        );
        r.register(
            "podnet_nic_fec_uncorrectable_blocks",
            "FEC blocks the PHY could not correct: each a frame lost on the wire",
            uncorrectable,
        );
        r.register("podnet_nic_phy_errors", "The PHY's error counters from ethtool -S (mlx5: rx_pcs_symbol_err_phy, rx_crc_errors_phy, link_down_events_phy)", phy_errors);
        r.register(
            "podnet_nic_module_temperature_celsius",
            "The cable module's temperature (ethtool -m)",
            temp,
        );
        r.register(
            "podnet_nic_module_temperature_warning_celsius",
            "The cable module's own high-temperature warning threshold",
            temp_warn,
        );
        r.register(
            "podnet_nic_module_rx_power_dbm",
            "The cable module's receive power per lane, dBm",
            rx_power,
        );
        r.register(
            "podnet_nic_module_low_power",
            "1 when the cable module is in low power mode (its laser off)",
            low_power,
        );
    }
}

/// Runs `podnet agent`.
pub(crate) fn run(args: &AgentArgs) -> anyhow::Result<ExitCode> {
    let thresholds = match &args.thresholds {
        Some(p) => Thresholds::load(p)?,
        None => Thresholds::default(),
    };
    let interval = args.interval.unwrap_or(if args.once || args.print { 2.0 } else { 5.0 });
    if !(interval.is_finite() && interval > 0.0 && interval <= 3600.0) {
        bail!("--interval must be a number of seconds between 0 and 3600, not {interval}");
    }
    let deadline = args.sample_deadline;
    if !(deadline.is_finite() && deadline > 0.0 && deadline <= 60.0) {
        bail!("--sample-deadline must be a number of seconds between 0 and 60, not {deadline}");
    }
    let roots = match &args.sysfs_root {
        Some(dir) => {
            super::check_sysfs_root(dir)?;
            Roots { sys: dir.clone(), proc: args.procfs_root.clone(), live: false }
        }
        None => Roots { proc: args.procfs_root.clone(), ..Roots::host() },
    };
    let probe = if args.probe {
        Some(super::probe::Probe::start().context("cannot start the probe's soft devices")?)
    } else {
        None
    };
    let pod = super::pod::Monitor::start(args)?;
    let host = HostHealth {
        src: doctor::Source::for_roots(&roots.sys, &roots.proc),
        log: Mutex::new(None),
        phy: Mutex::new(None),
    };
    let agent = Arc::new(Agent {
        host,
        sampler: Sampler::new(roots, Duration::from_secs_f64(deadline)),
        bench_dir: args.bench_dir.clone(),
        probe,
        pod,
        tracker: Mutex::new(Tracker::new(thresholds.window_seconds)),
        thresholds,
        epoch: Instant::now(),
    });
    if args.once {
        return once(&agent, args, interval);
    }
    if args.print {
        agent.sample();
        std::thread::sleep(Duration::from_secs_f64(interval));
        let om = telemetry::expose::render(Arc::new(agent.scrape()), agent.extra());
        std::io::stdout().lock().write_all(telemetry::expose::to_text_format(&om).as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    serve(agent, args, interval)
}

fn once(agent: &Agent, args: &AgentArgs, interval: f64) -> anyhow::Result<ExitCode> {
    agent.sample();
    std::thread::sleep(Duration::from_secs_f64(interval));
    let (snap, health) = agent.sample();
    let mut out = std::io::stdout().lock();
    if args.json {
        let errors: Vec<serde_json::Value> = snap
            .errors
            .iter()
            .map(|e| {
                serde_json::json!({
                    "source": e.source, "device": e.device, "port": e.port,
                    "path": e.path, "error": e.error,
                })
            })
            .collect();
        let v = serde_json::json!({
            "interval_seconds": interval,
            "ports": health,
            "source_errors": errors,
        });
        writeln!(out, "{v}")?;
    } else {
        print_table(&mut out, &snap, &health)?;
    }
    let all_ok = health.iter().all(|h| h.state == State::Ok);
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_table(
    out: &mut impl Write,
    snap: &Snapshot,
    health: &[PortHealth],
) -> std::io::Result<()> {
    if health.is_empty() {
        writeln!(out, "no RDMA ports (nothing under class/infiniband)")?;
    } else {
        let w = health.iter().map(|h| h.device.len()).max().unwrap_or(6).max(6);
        writeln!(out, "{:<w$}  port  {:<10}  {:<8}  why", "device", "netdev", "health")?;
        for h in health {
            let why = if h.reasons.is_empty() { "-".to_string() } else { h.reasons.join("; ") };
            writeln!(
                out,
                "{:<w$}  {:<4}  {:<10}  {:<8}  {why}",
                h.device,
                h.port,
                h.netdev.as_deref().unwrap_or("-"),
                h.state.as_str()
            )?;
        }
    }
    for e in &snap.errors {
        writeln!(out, "source error: {}: {} ({})", e.path, e.error, e.source)?;
    }
    Ok(())
}

fn serve(agent: Arc<Agent>, args: &AgentArgs, interval: f64) -> anyhow::Result<ExitCode> {
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    listener.set_nonblocking(true).context("cannot make the listening socket non-blocking")?;
    eprintln!(
        "podnet agent: serving http://{}/metrics (sampling every {interval} s, health window {} s)",
        args.listen, agent.thresholds.window_seconds
    );
    let sampler = agent.clone();
    std::thread::Builder::new()
        .name("sampler".into())
        .spawn(move || {
            loop {
                sampler.sample();
                // A pod monitor whose loop died serves a status that no longer moves: say
                // so and exit, for the supervisor (systemd, the DaemonSet) to restart it.
                let ended = sampler.pod.as_ref().map(|m| m.ended_threads()).unwrap_or_default();
                if !ended.is_empty() {
                    eprintln!(
                        "podnet agent: the pod monitor's {} thread ended (its panic is above); \
                         exiting",
                        ended.join(", ")
                    );
                    std::process::exit(70);
                }
                std::thread::sleep(Duration::from_secs_f64(interval));
            }
        })
        .context("cannot start the sampler thread")?;
    telemetry::serve::serve(listener, agent).context("cannot start the HTTP server")?;
    Ok(ExitCode::SUCCESS)
}

impl telemetry::serve::Pages for Agent {
    fn metrics(&self) -> String {
        telemetry::expose::render(Arc::new(self.scrape()), self.extra())
    }

    fn health(&self) -> String {
        let (_, health) = self.sample();
        serde_json::json!({ "ports": health }).to_string()
    }

    fn pod(&self) -> Option<Result<String, String>> {
        let m = self.pod.as_ref()?;
        Some(serde_json::to_string(&m.status()).map_err(|e| e.to_string()))
    }
}
