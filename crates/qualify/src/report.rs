//! What a run found, and the reports people and CI systems read: `report.json`, `junit.xml`
//! and a self-contained `report.html` with SVG charts.
//!
//! `report.json`:
//! ```json
//! { "plan": "…", "started_unix": 1764490000, "seconds": 41.2,
//!   "summary": { "passed": 40, "failed": 1, "skipped": 3 },
//!   "checks": [ { "name": "perf/write-bw/65536B/soft:127.0.1.1<->soft:127.0.1.2/bandwidth",
//!                 "status": "pass", "measured": 2871.4, "threshold": ">= 574.2 (0.2 x calibration 2871.0)",
//!                 "unit": "MB/s", "detail": "…", "seconds": 0.4 } ],
//!   "devices": [...], "pairs": [ { "a": "…", "b": "…", "status": "pass" } ],  (a == b: the
//!                                      device with itself, a check with `on = "devices"`)
//!   "bandwidth": [ { "pair", "test", "size", "mb_per_s" } ],
//!   "latency": [ { "pair", "test", "size", "min", "median", "p99", "p99_9" } ] }
//! ```
//! `status` is `pass`, `fail` or `skipped`; `measured` and `threshold` may be null (a check
//! that is a fact, not a figure).

use std::fmt::Write as _;

use serde::Serialize;

/// A check's outcome. Ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within its threshold.
    Pass,
    /// Could not run here; `detail` says why.
    Skipped,
    /// Outside its threshold, or it failed to run.
    Fail,
}

impl Status {
    /// `pass`, `skipped`, `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skipped => "skipped",
            Status::Fail => "fail",
        }
    }
}

/// One check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// Its name: `host/…`, `device/<dev>/…`, `perf/<test>/<size>B/<a><-><b>/<figure>`,
    /// `integrity/<a><-><b>`.
    pub name: String,
    /// The outcome.
    pub status: Status,
    /// What was measured.
    pub measured: Option<f64>,
    /// What it was held to (`>= 574.2 (0.2 x calibration 2871.0)`).
    pub threshold: Option<String>,
    /// The unit of `measured`.
    pub unit: String,
    /// More: the device, the reason for a skip, the error.
    pub detail: String,
    /// How long it took.
    pub seconds: f64,
}

impl Check {
    /// A check that could not run here.
    pub fn skipped(name: &str, why: &str) -> Check {
        Check {
            name: name.to_string(),
            status: Status::Skipped,
            measured: None,
            threshold: None,
            unit: String::new(),
            detail: why.to_string(),
            seconds: 0.0,
        }
    }

    /// `measured unit (threshold)`, or what there is of it.
    pub fn figure(&self) -> String {
        let mut s = match self.measured {
            Some(m) => format!("{} {}", fmt_num(m), self.unit),
            None => String::new(),
        };
        if let Some(t) = &self.threshold {
            let _ = write!(s, "{}{t}", if s.is_empty() { "" } else { ", want " });
        }
        s.trim().to_string()
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// A bandwidth figure for the charts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BwPoint {
    /// `a<->b`.
    pub pair: String,
    /// The test.
    pub test: String,
    /// Message size.
    pub size: u64,
    /// Average bandwidth, MB/s.
    pub mb_per_s: f64,
}

/// A latency figure for the charts (µs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatPoint {
    /// `a<->b`.
    pub pair: String,
    /// The test.
    pub test: String,
    /// Message size.
    pub size: u64,
    /// Minimum.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

/// A pair's worst outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairResult {
    /// The server side.
    pub a: String,
    /// The client side.
    pub b: String,
    /// The worst of its checks.
    pub status: Status,
}

/// Counts by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

/// A run's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The plan's name.
    pub plan: String,
    /// When the run started (seconds since the epoch).
    pub started_unix: u64,
    /// How long it took.
    pub seconds: f64,
    /// Counts.
    pub summary: Summary,
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// The devices.
    pub devices: Vec<String>,
    /// Each pair's outcome.
    pub pairs: Vec<PairResult>,
    /// Bandwidth figures.
    pub bandwidth: Vec<BwPoint>,
    /// Latency figures.
    pub latency: Vec<LatPoint>,
    /// A pod run: what the failures point at, most certain first.
    pub suspects: Vec<topology::Suspect>,
    /// A pod run: each host and its devices.
    pub hosts: Vec<HostFacts>,
    /// A pod run: each round, its pairs, traffic and wall time.
    pub rounds: Vec<RoundReport>,
    /// A pod run: the pair-directions that failed beside other flows on a ToR's spine links
    /// and passed apart from them — collisions of the schedule, not faults.
    pub contention: Vec<Contention>,
    /// A pod run: the pair matrices.
    pub matrices: Vec<Matrix>,
    /// A pod run: the pair set and its coverage.
    pub pod: Option<PodSummary>,
}

/// A device of a host, as the reports show it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DeviceFacts {
    /// Its rail.
    pub rail: usize,
    /// Its name.
    pub device: String,
    /// Its ToR.
    pub tor: String,
    /// The provider (kernel driver, `rxe`, `soft`).
    pub provider: String,
    /// The NIC model (`hca_type`, or the PCI IDs), or what a soft device runs on.
    pub model: String,
    /// The netdev under port 1 and its driver.
    pub netdev: String,
    /// Firmware version.
    pub firmware: String,
    /// PCIe link: `16.0 GT/s PCIe x16` (current), or none.
    pub pcie: String,
    /// Port 1's rate, Gb/s.
    pub link_gbps: Option<f64>,
    /// Why it could not be opened on its host.
    pub error: Option<String>,
}

/// A host of a pod run.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct HostFacts {
    /// Its rank.
    pub rank: u32,
    /// Its name in the plan.
    pub name: String,
    /// Its host name.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// podnet's version.
    pub version: String,
    /// Its devices, by rail.
    pub devices: Vec<DeviceFacts>,
}

/// A pair-direction that failed beside other flows on a ToR's spine links, and passed
/// measured again with no other pair on them: an ECMP collision of the schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contention {
    /// The flow: `h0.r0->h4.r0`.
    pub flow: String,
    /// The flows of its phase that shared a ToR's spine links with it.
    pub beside: Vec<String>,
    /// Which: `t0's spine links`.
    pub links: String,
    /// Its failed checks in the first run, with their figures.
    pub first: Vec<String>,
    /// The same checks measured apart.
    pub apart: Vec<String>,
}

/// A round of a pod run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundReport {
    /// `pairs 3`, `bisection`, `incast rack1-rail0`.
    pub name: String,
    /// Its pairs or flows.
    pub pairs: Vec<String>,
    /// Packets the measuring devices sent.
    pub packets: u64,
    /// Wall time.
    pub seconds: f64,
}

/// A pair matrix: rows send (or ask), columns receive (or answer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matrix {
    /// What it shows.
    pub title: String,
    /// The unit.
    pub unit: String,
    /// Whether more is better (bandwidth) or less (latency).
    pub higher_is_better: bool,
    /// Row and column names.
    pub devices: Vec<String>,
    /// `cells[row][column]`; `None` where the pair was not measured.
    pub cells: Vec<Vec<Option<f64>>>,
    /// The median of the cells.
    pub median: Option<f64>,
    /// Each cell's ratio to the median of the cells of its kind (same ToR, or across the
    /// spines): what the colour shows.
    pub ratios: Vec<Vec<Option<f64>>>,
}

/// A pod run's pair set and coverage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodSummary {
    /// The set (`rail-aligned`, …).
    pub pair_set: String,
    /// Pairs measured.
    pub pairs: usize,
    /// Pairs `all` would measure.
    pub all_pairs: usize,
    /// `pairs / all_pairs`.
    pub coverage: f64,
    /// Devices in a measured pair.
    pub devices_covered: usize,
    /// Devices of the pod.
    pub devices: usize,
}

/// The facts of device `device` (rail `rail`, under `tor`) read from sysfs (`sys`); a soft
/// device's from the interface of its address.
pub fn device_facts(sys: &std::path::Path, rail: usize, device: &str, tor: &str) -> DeviceFacts {
    let read = |p: std::path::PathBuf| {
        std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
    };
    let mut f = DeviceFacts {
        rail,
        device: device.to_string(),
        tor: tor.to_string(),
        provider: String::new(),
        model: String::new(),
        netdev: String::new(),
        firmware: String::new(),
        pcie: String::new(),
        link_gbps: None,
        error: None,
    };
    let netdev_driver = |nd: &str| {
        std::fs::read_link(sys.join("class/net").join(nd).join("device/driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| {
                // A virtual netdev has no device: its kind from uevent (DEVTYPE), else "virtual".
                let ue = read(sys.join("class/net").join(nd).join("uevent"));
                ue.lines()
                    .find_map(|l| l.strip_prefix("DEVTYPE=").map(str::to_string))
                    .unwrap_or_else(|| "virtual".into())
            })
    };
    if let Some(ip) = verbs::DeviceName::parse(device).ok().and_then(|n| n.soft_ip()) {
        f.provider = "soft".into();
        f.model = "podnet soft RoCEv2 (userspace, UDP sockets)".into();
        if let Some(a) =
            host::local_addrs(sys).ok().and_then(|v| v.into_iter().find(|a| a.ip == ip))
        {
            f.netdev = format!("{} ({})", a.netdev, netdev_driver(&a.netdev));
        }
        return f;
    }
    let Some(info) = host::rdma_device(sys, device) else {
        f.error = Some(format!("{device} is not an RDMA device of this host"));
        return f;
    };
    let dev = sys.join("class/infiniband").join(device).join("device");
    f.provider = info.provider.clone();
    f.firmware = info.fw_ver.clone().unwrap_or_default();
    let hca = read(sys.join("class/infiniband").join(device).join("hca_type"));
    f.model = if hca.is_empty() {
        format!("PCI {}:{}", read(dev.join("vendor")), read(dev.join("device")))
    } else {
        hca
    };
    let (speed, width) =
        (read(dev.join("current_link_speed")), read(dev.join("current_link_width")));
    if !speed.is_empty() {
        let (ms, mw) = (read(dev.join("max_link_speed")), read(dev.join("max_link_width")));
        f.pcie = format!("{speed} x{width} (capable of {ms} x{mw})");
    }
    if let Some(p) = info.ports.iter().find(|p| p.port == 1) {
        f.link_gbps = p.speed_gbps;
        if let Some(nd) = &p.netdev {
            f.netdev = format!("{nd} ({})", netdev_driver(nd));
        }
    }
    f
}

impl Report {
    /// An empty report for `plan`.
    pub fn new(plan: &str) -> Report {
        Report {
            plan: plan.to_string(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            seconds: 0.0,
            summary: Summary::default(),
            checks: Vec::new(),
            devices: Vec::new(),
            pairs: Vec::new(),
            bandwidth: Vec::new(),
            latency: Vec::new(),
            suspects: Vec::new(),
            hosts: Vec::new(),
            rounds: Vec::new(),
            contention: Vec::new(),
            matrices: Vec::new(),
            pod: None,
        }
    }

    /// Counts the checks without keeping the counts.
    pub fn summary(&self) -> Summary {
        self.clone().summarize()
    }

    /// Counts the checks.
    pub fn summarize(&mut self) -> Summary {
        let mut s = Summary::default();
        for c in &self.checks {
            match c.status {
                Status::Pass => s.passed += 1,
                Status::Fail => s.failed += 1,
                Status::Skipped => s.skipped += 1,
            }
        }
        self.summary = s;
        s
    }

    /// `report.json`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// `junit.xml`: a test case per check; a failure carries the measured value and the
    /// threshold, a skip its reason.
    pub fn junit(&self) -> String {
        let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let s = self.summary;
        let _ = writeln!(
            x,
            "<testsuites name=\"podnet qualify\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            self.checks.len(),
            s.failed,
            s.skipped,
            self.seconds
        );
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\" time=\"{:.3}\">",
            esc(&self.plan),
            self.checks.len(),
            s.failed,
            s.skipped,
            self.seconds
        );
        for c in &self.checks {
            let class = c.name.split('/').next().unwrap_or("qualify");
            let _ = write!(
                x,
                "    <testcase classname=\"podnet.qualify.{}\" name=\"{}\" time=\"{:.3}\"",
                esc(class),
                esc(&c.name),
                c.seconds
            );
            match c.status {
                Status::Pass => {
                    let _ = writeln!(
                        x,
                        "><system-out>{}</system-out></testcase>",
                        esc(&format!("{} {}", c.figure(), c.detail))
                    );
                }
                Status::Fail => {
                    let msg = format!(
                        "{}: {}",
                        c.name,
                        if c.figure().is_empty() { c.detail.clone() } else { c.figure() }
                    );
                    let _ = writeln!(
                        x,
                        "><failure message=\"{}\" type=\"threshold\">{}</failure></testcase>",
                        esc(&msg),
                        esc(&c.detail)
                    );
                }
                Status::Skipped => {
                    let _ = writeln!(x, "><skipped message=\"{}\"/></testcase>", esc(&c.detail));
                }
            }
        }
        x.push_str("  </testsuite>\n</testsuites>\n");
        x
    }

    /// The terminal summary: a pod's suspects first; every check (a pod run: those that did
    /// not pass), then counts.
    pub fn text(&self) -> String {
        let mut t = String::new();
        if self.pod.is_some() {
            if self.suspects.is_empty() {
                let _ = writeln!(t, "suspects: none");
            }
            for (i, s) in self.suspects.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "suspect {}: {} {} (confidence {:.2})\n           {}",
                    i + 1,
                    s.kind,
                    s.component,
                    s.confidence,
                    s.evidence
                );
            }
            if let Some(p) = &self.pod {
                let _ = writeln!(
                    t,
                    "pairs: {} ({} of {} possible, {:.0} %; {} of {} devices)",
                    p.pair_set,
                    p.pairs,
                    p.all_pairs,
                    100.0 * p.coverage,
                    p.devices_covered,
                    p.devices
                );
            }
            for r in &self.rounds {
                let _ = writeln!(
                    t,
                    "round {:<24} {:>3} pairs  {:>9} packets  {:>6.1} s",
                    r.name,
                    r.pairs.len(),
                    r.packets,
                    r.seconds
                );
            }
            if !self.contention.is_empty() {
                let _ = writeln!(
                    t,
                    "contention: {} flow(s) failed beside others on a ToR's spine links and \
                     passed apart (ECMP collisions of the schedule, not faults)",
                    self.contention.len()
                );
                for c in &self.contention {
                    let _ = writeln!(
                        t,
                        "  {} beside {} over {}: {}; apart: {}",
                        c.flow,
                        c.beside.join(", "),
                        c.links,
                        c.first.join(", "),
                        c.apart.join(", ")
                    );
                }
            }
            let _ = writeln!(t);
        }
        let shown: Vec<&Check> =
            self.checks.iter().filter(|c| self.pod.is_none() || c.status != Status::Pass).collect();
        let w = shown.iter().map(|c| c.name.len()).max().unwrap_or(10).min(90);
        for c in shown {
            let _ = writeln!(t, "{:<7} {:<w$}  {}", c.status.as_str(), c.name, c.figure());
            if c.status != Status::Pass && !c.detail.is_empty() {
                let _ = writeln!(t, "{:<7} {:<w$}  {}", "", "", c.detail);
            }
        }
        let s = self.summary;
        let _ = writeln!(
            t,
            "\n{}: {} passed, {} failed, {} skipped in {:.1} s",
            self.plan, s.passed, s.failed, s.skipped, self.seconds
        );
        t
    }
}

/// Escapes XML/HTML text and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}
