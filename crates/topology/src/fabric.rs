//! The pod: its hosts, their rails (one device each, a plane per rail) and each rail's ToR,
//! the `[pod]` table of a plan that describes them, and the rounds' settings.
//!
//!
//! ```toml
//! [pod]
//! pairs = "rail-aligned"     # all | same-tor | cross-tor | rail-aligned | sampled
//! peers_per_tor = 2          # sampled: each device against this many under its own ToR
//!                            # and this many under other ToRs
//! link_gbps = 0.2            # a soft device's nominal link rate (RDMA devices: the port's)
//! # spines = 2               # spines every ToR links to (ECMP paths per cross-ToR pair)
//! # spine_link_gbps = 0.1    # a ToR-spine link's rate, where the fabric is oversubscribed
//!                            # (a cross-ToR pair is judged against the slower of its host
//!                            # links and one spine link; unset: non-blocking)
//! source_ports = 4           # each cross-ToR pair probed over this many UDP source ports
//! progress = "event"         # the soft devices' progress: busy (default) or event
//! stall_seconds = 5          # no completion for this long: the measurement fails
//! qp_timeout = 14            # the RC ACK timeout code (4.096 us x 2^n)
//! # tx_depth = 8             # operations in flight per QP of the bandwidth tests
//!
//! [[pod.hosts]]
//! name = "node01"
//! rails = [ { device = "mlx5_0", tor = "rack1-rail0" }, { device = "mlx5_1", tor = "rack1-rail1" } ]
//!
//! [pod.bisection]            # half the hosts to the other half at once
//! size = 65536
//! min_vs_line_rate = 0.5     # aggregate >= 0.5 x what the flows could carry
//! qps = 4                    # QPs per flow, each its own ECMP hash
//!
//! [pod.incast]               # per ToR: senders elsewhere to one device under it at once
//! senders = 4
//! max_unfairness = 0.5       # every sender within 50 % of the fair share
//! max_retransmitted = 0.25   # retransmitted packets per packet sent, at most
//! qps = 4                    # QPs per sender, each its own ECMP hash
//! ```
//!
//! Rank k of the run plays `hosts[k]` (or the host of its host name when every host name
//! of the plan is a rank's).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::pairs::PairSet;

/// A link of the fabric.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Link {
    /// A device's cable to its ToR (its rail's host–ToR link).
    HostTor(Dev),
    /// A ToR's link to a spine (`None`: the spine is not known, the plan names no spines).
    TorSpine {
        /// The ToR.
        tor: String,
        /// The spine's index.
        spine: Option<usize>,
    },
}

/// A rail of a host: its device and the ToR its port is cabled to.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rail {
    /// The device (`mlx5_0`, `soft:10.1.0.1`).
    pub device: String,
    /// The ToR (any name; rails with the same name share the switch).
    pub tor: String,
}

impl Rail {
    /// The device's name, parsed (a validated pod's always parses).
    pub fn device_name(&self) -> Result<verbs::DeviceName, verbs::Error> {
        verbs::DeviceName::parse(&self.device)
    }

    /// The address of a soft device (`soft:10.1.0.1`, `soft:[fd00::1]`, `soft:IP:port`);
    /// `None` for an RDMA device, whose address is its port's GID.
    pub fn soft_ip(&self) -> Option<std::net::IpAddr> {
        self.device_name().ok()?.soft_ip()
    }
}

/// A host of the pod.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Its name in the reports (its host name, where ranks are matched by name).
    pub name: String,
    /// Its rails, in rail order.
    pub rails: Vec<Rail>,
}

/// The bisection round.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Bisection {
    /// Message size.
    #[serde(default = "default_size")]
    pub size: usize,
    /// Seconds of traffic.
    #[serde(default = "default_seconds")]
    pub seconds: f64,
    /// The aggregate must reach this share of what the flows could carry at once (each
    /// flow's line rate; across an oversubscribed fabric, no more than a ToR's uplinks).
    #[serde(default = "default_bisection_share")]
    pub min_vs_line_rate: f64,
    /// QPs per flow, each its own UDP source port and so its own ECMP hash (a flow of one
    /// QP may share a spine link with another: the aggregate would judge the hash).
    #[serde(default = "default_qps")]
    pub qps: usize,
}

/// The incast round, one per ToR.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Incast {
    /// Senders per incast (devices of the receiver's rail on other hosts).
    #[serde(default = "default_senders")]
    pub senders: usize,
    /// Message size.
    #[serde(default = "default_size")]
    pub size: usize,
    /// Seconds of traffic.
    #[serde(default = "default_seconds")]
    pub seconds: f64,
    /// Every sender's bandwidth within this share of the fair share (total / senders).
    #[serde(default = "default_unfairness")]
    pub max_unfairness: f64,
    /// Retransmitted packets per packet sent, at most, for every sender.
    #[serde(default = "default_retransmitted")]
    pub max_retransmitted: f64,
    /// QPs per sender, each its own UDP source port and so its own ECMP hash, sharing the
    /// sender's operations in flight (two senders under one ToR hashed onto one spine link
    /// would judge the hash).
    #[serde(default = "default_qps")]
    pub qps: usize,
}

fn default_size() -> usize {
    65536
}
fn default_seconds() -> f64 {
    2.0
}
fn default_bisection_share() -> f64 {
    0.5
}
fn default_qps() -> usize {
    4
}
fn default_senders() -> usize {
    4
}
fn default_unfairness() -> f64 {
    0.5
}
fn default_retransmitted() -> f64 {
    0.25
}
fn default_peers() -> usize {
    2
}
fn default_ports() -> usize {
    4
}
fn default_stall() -> f64 {
    5.0
}
fn default_qp_timeout() -> u8 {
    14
}
fn default_seed() -> u64 {
    1
}

/// How the devices of a pod run make progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PodProgress {
    /// A polling thread per device (perf's way: the lowest latency).
    #[default]
    Busy,
    /// Progress on events (many emulated hosts on few cores).
    Event,
}

/// `[pod]`: the pod a plan qualifies across hosts.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Pod {
    /// Which pairs to measure.
    #[serde(default)]
    pub pairs: PairSet,
    /// Sampled pairs: peers per ToR for each device.
    #[serde(default = "default_peers")]
    pub peers_per_tor: usize,
    /// Sampled pairs: the seed of the choice (the same seed, the same pairs).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The nominal link rate of a soft device, Gb/s (RDMA devices: their port's rate).
    pub link_gbps: Option<f64>,
    /// UDP source ports each cross-ToR pair is probed over (0: none), to find a spine path
    /// that fails for some ECMP hashes only.
    #[serde(default = "default_ports")]
    pub source_ports: usize,
    /// The spines every ToR links to, where the plan says (a cross-ToR pair has one ECMP
    /// path through each); unknown otherwise.
    #[serde(default)]
    pub spines: Option<usize>,
    /// A ToR–spine link's rate, Gb/s, where it is below a host link's (an oversubscribed
    /// fabric): one flow across the spines crosses one such link, so a cross-ToR pair's line
    /// rate is the slower of its host links and this. Unset: the fabric is non-blocking.
    #[serde(default)]
    pub spine_link_gbps: Option<f64>,
    /// Which spine a flow crosses, where the fabric can say (an ECMP hash calculator, the
    /// switches' own answer, `scripts/emupod.sh route NAME`): a command, run by rank 0
    /// through `sh -c`, that reads lines `SRC DST SPORT` (a RoCEv2 flow's IP addresses and
    /// UDP source port) on its standard input and writes for each a line with the index of
    /// the spine the flow crosses (0-based) or `-`. With it qualify chooses each cross-ToR
    /// pair's probe ports to cross every spine both ways and names the ToR–spine link or the
    /// spine that failed probes share; without it, the ToR pairs whose probes split.
    #[serde(default)]
    pub route: Option<String>,
    /// The devices' progress.
    #[serde(default)]
    pub progress: PodProgress,
    /// Seconds without a completion before a measurement fails (a dead path).
    #[serde(default = "default_stall")]
    pub stall_seconds: f64,
    /// The RC ACK timeout code, 4.096 µs × 2^n (perftest's `-u`, default 14: 67 ms). Links
    /// far slower than a NIC's (an emulated pod's) queue for longer than that under incast,
    /// and every queued packet would be sent again: give them a longer one.
    #[serde(default = "default_qp_timeout")]
    pub qp_timeout: u8,
    /// Operations in flight per QP of the bandwidth tests (perf's `-t`; default perftest's
    /// 128). On links far slower than a NIC's, 128 × 64 KiB queue for longer than the ACK
    /// timeout: a smaller depth keeps the link as busy.
    pub tx_depth: Option<usize>,
    /// The bisection round.
    pub bisection: Option<Bisection>,
    /// The incast rounds.
    pub incast: Option<Incast>,
    /// The hosts.
    pub hosts: Vec<Host>,
}

/// A device of the pod: (host index, rail index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dev {
    /// The host's index in the plan (its rank, unless matched by name).
    pub host: usize,
    /// The rail.
    pub rail: usize,
}

impl Pod {
    /// Checks the pod: (the key to blame, why) on error.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.hosts.len() < 2 {
            return Err(("hosts", "a pod has at least 2 hosts ([[pod.hosts]])".into()));
        }
        if self.route.as_deref().is_some_and(|r| r.trim().is_empty()) {
            return Err(("route", "`pod.route` is empty: a command, or leave it out".into()));
        }
        let mut names = BTreeSet::new();
        let mut devices = BTreeSet::new();
        for h in &self.hosts {
            if !names.insert(h.name.as_str()) {
                return Err(("name", format!("`pod.hosts`: host {:?} is listed twice", h.name)));
            }
            if h.rails.is_empty() {
                return Err(("rails", format!("`pod.hosts`: host {:?} has no rail", h.name)));
            }
            let mut mine = std::collections::HashSet::new();
            for r in &h.rails {
                let name = match r.device_name() {
                    Ok(n) => n,
                    Err(verbs::Error::BadDeviceName { why, .. }) => {
                        return Err((
                            "device",
                            format!("{:?} is not a device name: {why}", r.device),
                        ));
                    }
                    Err(e) => return Err(("device", format!("{:?}: {e}", r.device))),
                };
                if !mine.insert(name.clone()) {
                    return Err((
                        "device",
                        format!("host {:?} lists device {:?} twice", h.name, r.device),
                    ));
                }
                // A soft device is an address: one host's address cannot be another's.
                if let Some(ip) = name.soft_ip()
                    && !devices.insert(ip)
                {
                    return Err(("device", format!("{:?} is on two hosts", r.device)));
                }
            }
        }
        if let Some(g) = self.link_gbps
            && !(g.is_finite() && g > 0.0)
        {
            return Err(("link_gbps", format!("`pod.link_gbps` = {g}: a positive rate")));
        }
        if let Some(g) = self.spine_link_gbps
            && !(g.is_finite() && g > 0.0)
        {
            return Err((
                "spine_link_gbps",
                format!("`pod.spine_link_gbps` = {g}: a positive rate"),
            ));
        }
        if self.pairs == PairSet::Sampled && self.peers_per_tor == 0 {
            return Err(("peers_per_tor", "`pod.peers_per_tor` must be at least 1".into()));
        }
        if self.spines.is_some_and(|n| !(1..=64).contains(&n)) {
            return Err(("spines", "`pod.spines`: 1 to 64".into()));
        }
        if self.source_ports > 64 {
            return Err(("source_ports", "`pod.source_ports`: at most 64".into()));
        }
        if self.tx_depth.is_some_and(|d| !(1..=4096).contains(&d)) {
            return Err(("tx_depth", "`pod.tx_depth`: 1 to 4096".into()));
        }
        if !(1..=31).contains(&self.qp_timeout) {
            return Err(("qp_timeout", "`pod.qp_timeout`: 1 to 31".into()));
        }
        if !(self.stall_seconds.is_finite() && self.stall_seconds > 0.0) {
            return Err(("stall_seconds", "`pod.stall_seconds` must be positive".into()));
        }
        let share = |k, v: f64| {
            if v.is_finite() && v > 0.0 { Ok(()) } else { Err((k, format!("`{k}` = {v}: > 0"))) }
        };
        if let Some(b) = &self.bisection {
            share("min_vs_line_rate", b.min_vs_line_rate)?;
            share("seconds", b.seconds)?;
            if !(1..=64).contains(&b.qps) {
                return Err(("qps", "`pod.bisection.qps`: 1 to 64".into()));
            }
        }
        if let Some(i) = &self.incast {
            share("max_unfairness", i.max_unfairness)?;
            share("max_retransmitted", i.max_retransmitted)?;
            share("seconds", i.seconds)?;
            if !(1..=64).contains(&i.qps) {
                return Err(("qps", "`pod.incast.qps`: 1 to 64".into()));
            }
            if i.senders == 0 {
                return Err(("senders", "`pod.incast.senders` must be at least 1".into()));
            }
        }
        Ok(())
    }

    /// Every device, host by host, rail by rail.
    pub fn devices(&self) -> Vec<Dev> {
        self.hosts
            .iter()
            .enumerate()
            .flat_map(|(h, host)| (0..host.rails.len()).map(move |r| Dev { host: h, rail: r }))
            .collect()
    }

    /// The rail of `d`.
    pub fn rail(&self, d: Dev) -> &Rail {
        &self.hosts[d.host].rails[d.rail]
    }

    /// `d`'s name in reports: `<host>.r<rail>`.
    pub fn name(&self, d: Dev) -> String {
        format!("{}.r{}", self.hosts[d.host].name, d.rail)
    }

    /// Whether `a` and `b` hang under one ToR.
    pub fn same_tor(&self, a: Dev, b: Dev) -> bool {
        self.rail(a).tor == self.rail(b).tor
    }

    /// The ToRs, in order of first appearance, with their devices.
    pub fn tors(&self) -> Vec<(String, Vec<Dev>)> {
        let mut out: Vec<(String, Vec<Dev>)> = Vec::new();
        // Each ToR's place in `out` (a pod of thousands of devices under hundreds of ToRs).
        let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for d in self.devices() {
            let t = &self.rail(d).tor;
            match at.get(t.as_str()) {
                Some(&i) => out[i].1.push(d),
                None => {
                    at.insert(t.as_str(), out.len());
                    out.push((t.clone(), vec![d]));
                }
            }
        }
        out
    }

    /// The links of ToR `tor` to the spines: one per spine, or one whose spine is unknown.
    pub fn spine_links(&self, tor: &str) -> Vec<Link> {
        match self.spines {
            Some(n) => (0..n).map(|k| Link::TorSpine { tor: tor.into(), spine: Some(k) }).collect(),
            None => vec![Link::TorSpine { tor: tor.into(), spine: None }],
        }
    }

    /// The ECMP paths between devices `a` and `b`, each the links a packet between them
    /// crosses: under one ToR a single path (each device's cable); across ToRs one per spine
    /// (a's cable, a's ToR to the spine, the spine to b's ToR, b's cable), or a single one
    /// through an unknown spine.
    pub fn ecmp_paths(&self, a: Dev, b: Dev) -> Vec<Vec<Link>> {
        let (ta, tb) = (&self.rail(a).tor, &self.rail(b).tor);
        if ta == tb {
            return vec![vec![Link::HostTor(a), Link::HostTor(b)]];
        }
        let spines: Vec<Option<usize>> = match self.spines {
            Some(n) => (0..n).map(Some).collect(),
            None => vec![None],
        };
        spines
            .into_iter()
            .map(|spine| {
                vec![
                    Link::HostTor(a),
                    Link::TorSpine { tor: ta.clone(), spine },
                    Link::TorSpine { tor: tb.clone(), spine },
                    Link::HostTor(b),
                ]
            })
            .collect()
    }
}
