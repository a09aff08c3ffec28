//! Qualification plans: what to check, on which devices, against which thresholds.
//!
//! ```toml
//! name = "rack 12, RoCE"
//! devices = ["mlx5_0", "mlx5_1"]        # the configuration matrix: devices, and
//! pairs = "all"                          # every pair of them (or [["mlx5_0", "mlx5_1"]])
//! retries = 1                            # a figure outside its threshold is measured once
//!                                        # more before the check fails (0: never)
//!
//! [host]
//! cpu_governor = "performance"           # every CPU's cpufreq governor
//! nic_numa_node = true                   # each RDMA device's PCI function has a NUMA node
//! min_netdev_mtu = 4200                  # the netdevs under RoCE ports
//! doctor = ["error", "irq-affinity"]     # podnet doctor finds none of these (kinds, or
//!                                        # "error": any of error severity)
//!
//! [device]
//! port_active = true
//! roce_v2_gid = true
//! min_speed_gbps = 200
//! min_active_mtu = 4096
//!
//! [[perf]]                               # one per test
//! test = "write-bw"
//! on = "both"                            # every pair (the default, "pairs"), and every
//!                                        # device with itself ("devices")
//! sizes = [4096, 65536]
//! iters = 5000
//! min_bw_mb_per_s = 20000                # absolute, or
//! min_bw_vs_calibration = 0.8            # relative to the calibration run, same size
//!
//! [[perf]]
//! test = "send-lat"
//! sizes = [2]
//! max_median_us_vs_calibration = 1.5
//! max_p99_9_us = 50
//!
//! [integrity]                            # SEND with every byte checked, on every pair
//! seconds = 10
//! ```
//!
//! The calibration is each perf entry run first on the first pair (and, for `on` devices,
//! on the first device with itself: like is compared with like); relative thresholds
//! multiply its figure, so a plan can ask "every pair within 20 % of the best-known one"
//! without knowing the hardware. Unknown keys and bad values are errors naming the file,
//! line and key.

use std::path::Path;

use serde::Deserialize;

/// A plan that cannot be used: the file could not be read, or a line of it is not valid.
pub type PlanError = config::FileError;

/// Which pairs of devices to measure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Pairs {
    /// `"all"`: every unordered pair, in order.
    All(String),
    /// The pairs named.
    List(Vec<[String; 2]>),
}

/// Host checks.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostChecks {
    /// Every CPU's cpufreq governor must be this.
    pub cpu_governor: Option<String>,
    /// Each RDMA device's PCI function must report a NUMA node.
    #[serde(default)]
    pub nic_numa_node: bool,
    /// The netdevs under RoCE ports must have at least this MTU.
    pub min_netdev_mtu: Option<u32>,
    /// `podnet doctor`'s findings that must not be found, by kind (`pcie-link`,
    /// `pcie-aer`, `irq-affinity`, `log:nic-firmware-health`, … — `doctor::KINDS`), or
    /// `error` for any of error severity: a check each.
    #[serde(default)]
    pub doctor: Vec<String>,
}

/// Device checks, on every device of the plan.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceChecks {
    /// Port 1 is ACTIVE.
    #[serde(default)]
    pub port_active: bool,
    /// Port 1 has a RoCE v2 GID.
    #[serde(default)]
    pub roce_v2_gid: bool,
    /// Link speed at least this (Gb/s).
    pub min_speed_gbps: Option<f64>,
    /// Link width exactly this (`4X`).
    pub width: Option<String>,
    /// Active MTU at least this.
    pub min_active_mtu: Option<u32>,
}

/// Where a performance check runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Between the two devices of every pair (the default).
    #[default]
    Pairs,
    /// On every device with itself: both ends of the connection on one device (loopback
    /// through the device, as `ib_write_bw -d mlx5_0` against itself measures it).
    Devices,
    /// Both.
    Both,
}

impl Scope {
    /// Whether the check runs on pairs.
    pub fn on_pairs(self) -> bool {
        matches!(self, Scope::Pairs | Scope::Both)
    }

    /// Whether the check runs on each device alone.
    pub fn on_devices(self) -> bool {
        matches!(self, Scope::Devices | Scope::Both)
    }
}

/// A performance check: one perf test on every pair, every device, or both.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerfCheck {
    /// The test (`write-bw`, `send-lat`, …).
    pub test: String,
    /// Where it runs: `"pairs"` (default), `"devices"` or `"both"`.
    #[serde(default)]
    pub on: Scope,
    /// Message sizes.
    #[serde(default)]
    pub sizes: Vec<usize>,
    /// Messages per size.
    pub iters: Option<u64>,
    /// Seconds per size instead of a count (perf's `-D`): a measurement that cannot run
    /// away on a lossy path.
    pub seconds: Option<f64>,
    /// Bandwidth at least this (MB/s, perftest's 2^20).
    pub min_bw_mb_per_s: Option<f64>,
    /// Bandwidth at least this share of the calibration's.
    pub min_bw_vs_calibration: Option<f64>,
    /// Median latency at most this (µs).
    pub max_median_us: Option<f64>,
    /// Median latency at most this multiple of the calibration's.
    pub max_median_us_vs_calibration: Option<f64>,
    /// 99.9th percentile latency at most this (µs).
    pub max_p99_9_us: Option<f64>,
    /// 99.9th percentile at most this multiple of the calibration's.
    pub max_p99_9_us_vs_calibration: Option<f64>,
    /// A pod: bandwidth at least this share of the link rate (the port's, or `pod.link_gbps`
    /// for a soft device).
    pub min_bw_vs_line_rate: Option<f64>,
    /// A pod: bandwidth at least this share of the median of the pairs of its kind (same
    /// test, size, and same-ToR or cross-ToR), so one bad pair cannot move the bar.
    pub min_bw_vs_pod_median: Option<f64>,
    /// A pod: median latency at most this multiple of the median of the pairs of its kind.
    pub max_median_us_vs_pod_median: Option<f64>,
    /// 99.9th percentile at most this multiple of the same pair's own median.
    pub max_p99_9_us_vs_median: Option<f64>,
}

/// The integrity run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Integrity {
    /// Seconds per pair.
    pub seconds: f64,
    /// Message size.
    #[serde(default = "default_integrity_size")]
    pub size: usize,
}

fn default_integrity_size() -> usize {
    65536
}

/// A qualification plan.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// What it qualifies.
    pub name: String,
    /// The devices (`soft:<IP>` or RDMA device names); a pod plan lists them per host.
    #[serde(default)]
    pub devices: Vec<String>,
    /// The pod: hosts, their rails and ToRs, across hosts (rank 0 runs the plan).
    pub pod: Option<topology::Pod>,
    /// Which pairs to measure.
    #[serde(default = "all_pairs")]
    pub pairs: Pairs,
    /// Host checks.
    #[serde(default)]
    pub host: HostChecks,
    /// Device checks.
    #[serde(default)]
    pub device: DeviceChecks,
    /// Performance checks.
    #[serde(default)]
    pub perf: Vec<PerfCheck>,
    /// The integrity run.
    pub integrity: Option<Integrity>,
    /// GPU memory per device: a device named here (`"mlx5_0" = 0`, `"soft:127.0.1.1" = 0`)
    /// runs every measurement and the integrity run from that CUDA GPU's memory, and its
    /// report gains `gpu/<device>`: the GPU, and its PCIe distance and NUMA node against
    /// the device's.
    #[serde(default)]
    pub gpus: std::collections::BTreeMap<String, u32>,
    /// How often a performance figure outside its threshold is measured again before the
    /// check fails (0 or 1; default 1: one slow run on a busy host is noise).
    #[serde(default = "one")]
    pub retries: u32,
}

fn one() -> u32 {
    1
}

fn all_pairs() -> Pairs {
    Pairs::All("all".into())
}

/// The built-in plan: four soft devices on loopback addresses, every device's and every
/// pair's WRITE bandwidth at two sizes and SEND latency, one after another, within generous shares of a calibration
/// run (so a busy CI machine does not fail it; the p99.9 tail against a 100 ms ceiling, as
/// a shared machine's scheduler owns it), and a short integrity run on every pair.
pub const DEFAULT_PLAN: &str = r#"name = "default: 4 soft devices on loopback"
devices = ["soft:127.0.1.1", "soft:127.0.1.2", "soft:127.0.1.3", "soft:127.0.1.4"]
pairs = "all"

[host]
min_netdev_mtu = 1500

[device]
port_active = true
roce_v2_gid = true
min_active_mtu = 1024

[[perf]]
test = "write-bw"
on = "both"
sizes = [4096, 65536]
iters = 5000
min_bw_vs_calibration = 0.2

[[perf]]
test = "send-lat"
on = "both"
sizes = [2]
iters = 2000
max_median_us_vs_calibration = 5.0
# The tail on a shared machine is the scheduler's (a preempted poller costs milliseconds):
# an absolute ceiling that catches stalls, not time slices.
max_p99_9_us = 100000

[integrity]
seconds = 1
size = 65536
"#;

/// A pod plan's template for `hosts` (a hostfile's, in its order): `rails` rails per host
/// (devices `mlx5_0`, `mlx5_1`, …), a ToR per rack of `per_tor` hosts and rail, every pair
/// of the same rail across hosts, and thresholds against the link rate and the pod's median.
pub fn pod_template(hosts: &[String], rails: usize, per_tor: usize) -> String {
    use std::fmt::Write as _;
    let mut t = format!(
        r#"name = "pod of {n} hosts"

[pod]
pairs = "rail-aligned"      # all | same-tor | cross-tor | rail-aligned | sampled
# peers_per_tor = 2         # sampled: peers under the own ToR, and as many elsewhere
# link_gbps = 100           # a soft device's nominal rate (RDMA devices: the port's)
source_ports = 4            # each cross-ToR pair probed over this many UDP source ports
# route = "CMD"             # which spine a flow crosses (lines SRC DST SPORT in, a spine's
                            # index out): probes cross every spine, suspects name one
stall_seconds = 5

[pod.bisection]
seconds = 2
min_vs_line_rate = 0.5

[pod.incast]
senders = 4
seconds = 2

# The thresholds: chosen on the emulated pod of a 2-core VM (BENCHMARKS.md): no false
# failure in 10 clean runs, a link at half its peers' rate fails. Tighten them on hardware.
[[perf]]
test = "write-bw"
sizes = [4096, 65536, 1048576]
seconds = 1
min_bw_vs_line_rate = 0.5
min_bw_vs_pod_median = 0.75

[[perf]]
test = "send-lat"
sizes = [2]
seconds = 1
max_median_us_vs_pod_median = 5.0
max_p99_9_us_vs_median = 400
"#,
        n = hosts.len()
    );
    let per_tor = per_tor.max(1);
    for (i, h) in hosts.iter().enumerate() {
        let rails: Vec<String> = (0..rails.max(1))
            .map(|r| format!("{{ device = \"mlx5_{r}\", tor = \"rack{}-rail{r}\" }}", i / per_tor))
            .collect();
        let _ = write!(t, "\n[[pod.hosts]]\nname = {h:?}\nrails = [{}]\n", rails.join(", "));
    }
    t
}

impl Plan {
    /// Reads a plan file.
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        Plan::parse(&config::read(path)?, &path.display().to_string())
    }

    /// Parses a plan (`path` names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<Plan, PlanError> {
        let file = config::TomlFile::new(path, text);
        let plan: Plan = file.parse()?;
        let invalid = |key: &str, message| file.invalid_at(key, message);
        if let Some(pod) = &plan.pod {
            if !plan.devices.is_empty() {
                return Err(invalid(
                    "devices",
                    "a pod plan lists its devices as its hosts' rails, not in `devices`".into(),
                ));
            }
            pod.validate().map_err(|(key, why)| invalid(key, why))?;
            // What a pod run does not do yet is an error, not a silence.
            let unsupported = [
                (
                    "integrity",
                    plan.integrity.is_some(),
                    "the integrity run (podnet burnin checks every byte across hosts)",
                ),
                ("host", plan.host != HostChecks::default(), "host checks"),
                (
                    "device",
                    plan.device != DeviceChecks::default(),
                    "device checks beyond opening each device",
                ),
                (
                    "pairs",
                    plan.pairs != all_pairs(),
                    "a top-level `pairs` (the pod's is `pod.pairs`)",
                ),
                (
                    "on",
                    plan.perf.iter().any(|p| p.on != Scope::Pairs),
                    "`perf.on` other than \"pairs\"",
                ),
            ];
            if let Some((key, _, what)) = unsupported.iter().find(|u| u.1) {
                return Err(invalid(key, format!("a pod plan does not run {what} yet")));
            }
        } else if plan.devices.is_empty() {
            return Err(invalid("devices", "`devices` lists no device".into()));
        }
        if let Some(k) =
            plan.host.doctor.iter().find(|k| *k != "error" && !doctor::KINDS.contains(&k.as_str()))
        {
            return Err(invalid(
                "doctor",
                format!(
                    "`host.doctor`: {k:?} is not a kind of doctor finding (\"error\", or one of {})",
                    doctor::KINDS.join(", ")
                ),
            ));
        }
        for (i, d) in plan.devices.iter().enumerate() {
            if let Err(verbs::Error::BadDeviceName { why, .. }) = verbs::DeviceName::parse(d) {
                return Err(invalid(
                    "devices",
                    format!("`devices`: {d:?} is not a device name: {why}"),
                ));
            }
            // A device listed twice would pair with itself and be measured as a pair once
            // too few: say so rather than drop a check.
            if plan.devices[..i].contains(d) {
                return Err(invalid("devices", format!("`devices`: {d:?} is listed twice")));
            }
        }
        if let Some(d) = plan.gpus.keys().find(|d| !plan.devices.contains(d)) {
            return Err(invalid("gpus", format!("`gpus`: {d:?} is not in `devices`")));
        }
        if plan.pod.is_some() && !plan.gpus.is_empty() {
            return Err(invalid("gpus", "a pod plan does not run GPU memory yet (podnet burnin --memory cuda does, across hosts)".into()));
        }
        match &plan.pairs {
            Pairs::All(s) if s != "all" => {
                return Err(invalid(
                    "pairs",
                    format!("`pairs` = {s:?}: \"all\" or a list of [a, b]"),
                ));
            }
            Pairs::List(l) => {
                for [a, b] in l {
                    for d in [a, b] {
                        if !plan.devices.contains(d) {
                            return Err(invalid(
                                "pairs",
                                format!("`pairs`: {d:?} is not in `devices`"),
                            ));
                        }
                    }
                    if a == b {
                        return Err(invalid(
                            "pairs",
                            format!("`pairs`: [{a:?}, {b:?}] pairs a device with itself"),
                        ));
                    }
                }
            }
            _ => {}
        }
        for p in &plan.perf {
            check_perf(&file, plan.pod.is_some(), p)?;
        }
        // The work the plan asks for, before any of it starts: a measurement is one test at
        // one size on one pair-direction.
        let per_pair: usize = plan.perf.iter().map(|p| p.sizes.len().max(1)).sum();
        let pairs = match &plan.pod {
            Some(pod) => pod.pair_count(),
            None => match &plan.pairs {
                Pairs::All(_) => plan.devices.len() * plan.devices.len().saturating_sub(1) / 2,
                Pairs::List(l) => l.len(),
            },
        };
        let measurements = pairs.saturating_mul(2).saturating_mul(per_pair);
        if measurements > MAX_MEASUREMENTS {
            return Err(invalid(
                if plan.pod.is_some() { "pairs" } else { "devices" },
                format!(
                    "{measurements} measurements ({pairs} pairs, both ways, × {per_pair} \
                     test sizes): more than a run finishes (at most {MAX_MEASUREMENTS}); \
                     measure fewer sizes, or sample the pairs (`pod.pairs = \"sampled\"`)"
                ),
            ));
        }
        if plan.retries > 1 {
            return Err(invalid("retries", format!("`retries` = {}: 0 or 1", plan.retries)));
        }
        if let Some(i) = &plan.integrity
            && !(i.seconds.is_finite() && i.seconds > 0.0 && i.seconds <= 86_400.0)
        {
            return Err(invalid(
                "seconds",
                format!("`integrity.seconds` = {}: between 0 and 86400", i.seconds),
            ));
        }
        // A size of 0 would check no byte and pass; one past the largest region fails only
        // once the run has started.
        if let Some(i) = &plan.integrity
            && !(1..=1 << 30).contains(&i.size)
        {
            return Err(invalid(
                "size",
                format!("`integrity.size` = {}: between 1 and 2^30 bytes", i.size),
            ));
        }
        Ok(plan)
    }

    /// The pairs to measure, in order.
    pub fn pairs(&self) -> Vec<(String, String)> {
        match &self.pairs {
            Pairs::All(_) => {
                let d = &self.devices;
                (0..d.len())
                    .flat_map(|i| (i + 1..d.len()).map(move |j| (d[i].clone(), d[j].clone())))
                    .collect()
            }
            Pairs::List(l) => l.iter().map(|[a, b]| (a.clone(), b.clone())).collect(),
        }
    }
}

/// Sizes one `[[perf]]` entry may sweep (perftest's `-a` sweep is 23).
pub const MAX_SIZES: usize = 64;
/// Measurements a plan may ask for in all (each test size on each pair-direction).
pub const MAX_MEASUREMENTS: usize = 200_000;

/// Checks one `[[perf]]` entry: a known test, thresholds that apply to it (and to a pod or
/// not), positive figures, sizes, iterations and durations in range.
fn check_perf(file: &config::TomlFile<'_>, pod: bool, p: &PerfCheck) -> Result<(), PlanError> {
    let invalid = |key: &str, message| file.invalid_at(key, message);
    let Some(t) = perf::session::PerfTest::from_name(&p.test) else {
        return Err(file.invalid(
            file.line_of_value("test", &p.test),
            format!("`perf.test` = {:?}: not a perf test (write-bw, send-lat, …)", p.test),
        ));
    };
    let bw_keys = [
        ("min_bw_mb_per_s", p.min_bw_mb_per_s),
        ("min_bw_vs_calibration", p.min_bw_vs_calibration),
        ("min_bw_vs_line_rate", p.min_bw_vs_line_rate),
        ("min_bw_vs_pod_median", p.min_bw_vs_pod_median),
    ];
    let lat_keys = [
        ("max_median_us", p.max_median_us),
        ("max_median_us_vs_calibration", p.max_median_us_vs_calibration),
        ("max_p99_9_us", p.max_p99_9_us),
        ("max_p99_9_us_vs_calibration", p.max_p99_9_us_vs_calibration),
        ("max_median_us_vs_pod_median", p.max_median_us_vs_pod_median),
        ("max_p99_9_us_vs_median", p.max_p99_9_us_vs_median),
    ];
    let pod_keys = [
        ("min_bw_vs_line_rate", p.min_bw_vs_line_rate),
        ("min_bw_vs_pod_median", p.min_bw_vs_pod_median),
        ("max_median_us_vs_pod_median", p.max_median_us_vs_pod_median),
    ];
    if !pod && let Some((k, _)) = pod_keys.iter().find(|(_, v)| v.is_some()) {
        return Err(invalid(k, format!("`perf.{k}` needs a pod (a [pod] section)")));
    }
    if pod
        && let Some((k, _)) = [
            ("min_bw_vs_calibration", p.min_bw_vs_calibration),
            ("max_median_us_vs_calibration", p.max_median_us_vs_calibration),
            ("max_p99_9_us_vs_calibration", p.max_p99_9_us_vs_calibration),
        ]
        .iter()
        .find(|(_, v)| v.is_some())
    {
        return Err(invalid(
            k,
            format!(
                "`perf.{k}`: a pod has no calibration pair; it is its own reference \
                     (`*_vs_pod_median`, `min_bw_vs_line_rate`)"
            ),
        ));
    }
    let (mine, other) =
        if t.is_bw() { (&bw_keys[..], &lat_keys[..]) } else { (&lat_keys[..], &bw_keys[..]) };
    for (k, v) in other {
        if v.is_some() {
            return Err(invalid(
                k,
                format!(
                    "`perf.{k}` does not apply to {} (a {} test)",
                    p.test,
                    if t.is_bw() { "bandwidth" } else { "latency" }
                ),
            ));
        }
    }
    for (k, v) in mine {
        if let Some(v) = v
            && !(v.is_finite() && *v > 0.0)
        {
            return Err(invalid(k, format!("`perf.{k}` = {v}: must be a positive number")));
        }
    }
    if p.sizes.iter().any(|s| *s == 0 || *s > 1 << 30) {
        return Err(invalid("sizes", "`perf.sizes`: each between 1 and 2^30 bytes".into()));
    }
    if p.sizes.len() > MAX_SIZES {
        return Err(invalid(
            "sizes",
            format!("`perf.sizes`: {} sizes, at most {MAX_SIZES} per test", p.sizes.len()),
        ));
    }
    if p.iters.is_some_and(|n| n > 1_000_000_000) {
        return Err(invalid("iters", "`perf.iters`: at most 10^9".into()));
    }
    if p.iters == Some(0) {
        return Err(invalid("iters", "`perf.iters` must be at least 1".into()));
    }
    if let Some(d) = p.seconds {
        if !(d.is_finite() && d > 0.0 && d <= 3600.0) {
            return Err(invalid("seconds", format!("`perf.seconds` = {d}: 0 to 3600")));
        }
        if p.iters.is_some() {
            return Err(invalid("seconds", "`perf.seconds` or `perf.iters`, not both".into()));
        }
    }
    Ok(())
}

/// The qualify plan for a pod of `shape` as `scripts/emupod.sh` builds it (`podnet pod
/// shape --plan`): the thresholds of testdata/qualify/emupod.toml (chosen from measurement
/// on emulated pods, BENCHMARKS.md), the pod's settings from its shape — the link rate, the
/// spines, a spine link's rate where it is oversubscribed, an ACK timeout for its slowest
/// link ([`topology::Shape::qp_timeout`]) — and its hosts; `route`, the plan's `pod.route`
/// where given.
pub fn for_shape(shape: &topology::Shape, route: Option<&str>) -> String {
    use std::fmt::Write as _;
    let pod = shape.pod();
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# An emulated pod drawn from seed {seed}: {racks} racks x {per} hosts, {rails} rail(s), \
         {spines} spines,\n# uplinks {uplink:?}, {rate} Mbit/s host links ({srate} Mbit/s \
         to each spine), MTU {mtu}.\n# scripts/emupod.sh up NAME {args}",
        seed = shape.seed,
        racks = shape.racks,
        per = shape.hosts_per_tor,
        rails = shape.rails,
        spines = shape.spines,
        uplink = shape.uplink,
        rate = shape.host_mbit,
        srate = shape.spine_link_mbit(),
        mtu = shape.mtu,
        args = shape.emupod_args().join(" ")
    );
    let _ = writeln!(t, "name = \"emulated pod (seed {})\"\n\n[pod]", shape.seed);
    let _ = writeln!(t, "pairs = \"{}\"\nseed = {}", pod.pairs.as_str(), pod.seed);
    if let Some(g) = pod.link_gbps {
        let _ = writeln!(t, "link_gbps = {g}");
    }
    if let Some(n) = pod.spines {
        let _ = writeln!(t, "spines = {n}");
    }
    if let Some(g) = pod.spine_link_gbps {
        let _ = writeln!(t, "spine_link_gbps = {g}");
    }
    let _ = writeln!(
        t,
        "progress = \"event\"\nsource_ports = {}\nstall_seconds = {}\nqp_timeout = {}",
        pod.source_ports, pod.stall_seconds, pod.qp_timeout
    );
    if let Some(d) = pod.tx_depth {
        let _ = writeln!(t, "tx_depth = {d}");
    }
    match route {
        Some(r) => {
            // A JSON string is a TOML basic string.
            let _ = writeln!(t, "route = {}", serde_json::Value::String(r.into()));
        }
        None => t.push_str(
            "# route = \"scripts/emupod.sh route NAME\"   # which spine a flow crosses: \
             spine-level suspects\n",
        ),
    }
    let _ = writeln!(
        t,
        "\n[pod.bisection]\nseconds = 1\nmin_vs_line_rate = 0.5\n\n[pod.incast]\nsenders = {}\n\
         seconds = 1\nmax_unfairness = 0.5\nmax_retransmitted = 0.25\n",
        topology::shape::INCAST_SENDERS
    );
    t.push_str(
        "[[perf]]\ntest = \"write-bw\"\nsizes = [65536]\nseconds = 0.5\nmin_bw_vs_line_rate = 0.85\n\
         min_bw_vs_pod_median = 0.75\n\n[[perf]]\ntest = \"send-lat\"\nsizes = [2]\nseconds = 0.3\n\
         max_median_us_vs_pod_median = 5.0\nmax_p99_9_us_vs_median = 400\n",
    );
    for h in &pod.hosts {
        let _ = write!(t, "\n[[pod.hosts]]\nname = \"{}\"\nrails = [", h.name);
        for (k, r) in h.rails.iter().enumerate() {
            let sep = if k > 0 { ", " } else { "" };
            let _ = write!(t, "{sep}{{ device = \"{}\", tor = \"{}\" }}", r.device, r.tor);
        }
        t.push_str("]\n");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shapes_plan_is_its_pod_with_the_emulated_pods_thresholds() {
        // The emulated pod's plan, with the hosts scripts/emupod.sh plan appends.
        let emu = format!(
            "{}\n[[pod.hosts]]\nname = \"h0\"\nrails = [{{ device = \"soft:10.1.0.1\", tor = \"t0\" }}]\n\
             [[pod.hosts]]\nname = \"h1\"\nrails = [{{ device = \"soft:10.1.1.1\", tor = \"t0\" }}]\n",
            include_str!("../../../testdata/qualify/emupod.toml")
        );
        let emu = Plan::parse(&emu, "emupod.toml").unwrap();
        for seed in 0..40 {
            let shape = topology::Shape::draw(seed);
            let text = for_shape(&shape, None);
            let plan = Plan::parse(&text, "shape.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
            let mut want = shape.pod();
            let pod = plan.pod.clone().unwrap();
            // What the shape does not decide is testdata/qualify/emupod.toml's.
            let emu_pod = emu.pod.clone().unwrap();
            want.bisection = emu_pod.bisection.clone();
            want.incast = emu_pod.incast.clone();
            assert_eq!(pod, want, "seed {seed}");
            assert_eq!(plan.perf, emu.perf, "seed {seed}: the thresholds drifted");
            assert_eq!(pod.validate(), Ok(()));
        }
        // The route command, quoted whatever it holds.
        let cmd = r#"/opt/x y/emupod.sh route "qa" \ now"#;
        let plan = Plan::parse(&for_shape(&topology::Shape::draw(3), Some(cmd)), "s.toml").unwrap();
        assert_eq!(plan.pod.unwrap().route.as_deref(), Some(cmd));
    }

    #[test]
    fn the_default_plan_parses() {
        let p = Plan::parse(DEFAULT_PLAN, "default").unwrap();
        assert_eq!(p.devices.len(), 4);
        assert_eq!(p.pairs().len(), 6);
        assert_eq!(p.perf.len(), 2);
        assert!(p.perf.iter().all(|c| c.on == Scope::Both));
        let one = "name = \"x\"\ndevices = [\"a\", \"b\"]\n[[perf]]\ntest = \"write-bw\"\n";
        let p = Plan::parse(one, "one").unwrap();
        assert_eq!(p.perf[0].on, Scope::Pairs, "pairs unless the plan says otherwise");
        assert!(p.perf[0].on.on_pairs() && !p.perf[0].on.on_devices());
    }

    #[test]
    fn a_pod_plan_from_a_hostfile_parses_and_its_errors_are_named() {
        let hosts: Vec<String> = (1..=4).map(|i| format!("node{i:02}")).collect();
        let text = pod_template(&hosts, 2, 2);
        let p = Plan::parse(&text, "pod.toml").unwrap();
        let pod = p.pod.as_ref().unwrap();
        assert_eq!((pod.hosts.len(), pod.hosts[3].rails[1].tor.as_str()), (4, "rack1-rail1"));
        assert_eq!(pod.pairs().len(), 12, "rail-aligned: 6 host pairs x 2 rails");
        let bad =
            |extra: &str| Plan::parse(&format!("{text}{extra}"), "p.toml").unwrap_err().to_string();
        assert!(
            bad("devices = [\"mlx5_0\"]\n").contains("unknown")
                || bad("devices = [\"mlx5_0\"]\n").contains("devices")
        );
        let two = "name = \"x\"\ndevices = [\"soft:127.0.0.1\", \"soft:127.0.0.2\"]\n";
        let e = Plan::parse(
            &format!("{two}[[perf]]\ntest = \"write-bw\"\nmin_bw_vs_pod_median = 0.8\n"),
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("needs a pod"), "{e}");
        let e = Plan::parse(
            &format!("{two}[[perf]]\ntest = \"write-bw\"\niters = 5\nseconds = 1\n"),
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not both"), "{e}");
        let one_host = "name = \"x\"\n[pod]\n[[pod.hosts]]\nname = \"a\"\nrails = [{ device = \"mlx5_0\", tor = \"t\" }]\n";
        let e = Plan::parse(one_host, "p.toml").unwrap_err().to_string();
        assert!(e.contains("at least 2 hosts"), "{e}");
        for extra in ["[integrity]\nseconds = 1\n", "[host]\nnic_numa_node = true\n"] {
            let e = bad(extra);
            assert!(e.contains("a pod plan does not run"), "{e}");
        }
        let e =
            Plan::parse(&text.replace("pairs = \"rail-aligned\"", "pairs = \"ring\""), "p.toml")
                .unwrap_err()
                .to_string();
        assert!(e.starts_with("p.toml:") && e.contains("ring"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let bad = |text: &str| Plan::parse(text, "p.toml").unwrap_err().to_string();
        let base = "name = \"x\"\ndevices = [\"soft:127.0.0.1\", \"soft:127.0.0.2\"]\n";
        let e = bad(&format!("{base}[device]\nport_actve = true\n"));
        assert!(e.starts_with("p.toml:4:") && e.contains("port_actve"), "{e}");
        let e = bad(&format!("{base}[[perf]]\ntest = \"write-bandwidth\"\n"));
        assert!(e.starts_with("p.toml:4:") && e.contains("write-bandwidth"), "{e}");
        let e = bad(&format!("{base}[[perf]]\ntest = \"send-lat\"\nmin_bw_mb_per_s = 5\n"));
        assert!(e.starts_with("p.toml:5:") && e.contains("min_bw_mb_per_s"), "{e}");
        let e = bad(&format!("{base}[[perf]]\ntest = \"write-bw\"\nmin_bw_vs_calibration = -1\n"));
        assert!(e.starts_with("p.toml:5:"), "{e}");
        let e = bad(&format!("{base}pairs = [[\"soft:127.0.0.1\", \"mlx5_0\"]]\n"));
        assert!(e.starts_with("p.toml:3:") && e.contains("mlx5_0"), "{e}");
        let e = bad("name = \"x\"\ndevices = []\n");
        assert!(e.starts_with("p.toml:2:"), "{e}");
        // Values that would check nothing, or fail only once running.
        let e = bad("name = \"x\"\ndevices = [\"soft:127.0.0.1\", \"soft:127.0.0.1\"]\n");
        assert!(e.starts_with("p.toml:2:") && e.contains("listed twice"), "{e}");
        for size in ["0", "1000000000000"] {
            let e = bad(&format!("{base}[integrity]\nseconds = 1\nsize = {size}\n"));
            assert!(e.starts_with("p.toml:5:") && e.contains("`integrity.size`"), "{e}");
        }
        let e = bad(&format!("{base}[integrity]\nseconds = \"ten\"\n"));
        assert!(
            e.starts_with("p.toml:4:") && e.contains("seconds") || e.contains("invalid type"),
            "{e}"
        );
    }

    #[test]
    fn a_plan_whose_work_is_absurd_is_refused_before_it_starts() {
        let sizes: Vec<String> = (1..=100_000).map(|i| i.to_string()).collect();
        let many = format!(
            "name = \"x\"\ndevices = [\"soft:127.0.0.1\", \"soft:127.0.0.2\"]\n[[perf]]\ntest = \"write-bw\"\nsizes = [{}]\n",
            sizes.join(", ")
        );
        let e = Plan::parse(&many, "many").unwrap_err().to_string();
        assert!(e.contains("100000 sizes, at most 64"), "{e}");
        let devices: Vec<String> =
            (0..1000).map(|i| format!("\"soft:127.0.{}.{}\"", 2 + i / 200, 1 + i % 200)).collect();
        let all = format!(
            "name = \"x\"\ndevices = [{}]\n[[perf]]\ntest = \"write-bw\"\nsizes = [4096, 65536]\n",
            devices.join(", ")
        );
        let e = Plan::parse(&all, "all").unwrap_err().to_string();
        assert!(
            e.contains("1998000 measurements") && e.contains("more than a run finishes"),
            "{e}"
        );
    }
}
