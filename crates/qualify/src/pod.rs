//! The pod a plan qualifies, without I/O: its hosts, their rails (one device each) and each
//! rail's ToR; the pair sets measured across it; the rounds that measure disjoint pairs at
//! once; and the attribution of failed pairs to a suspect component.
//!
//! ```toml
//! [pod]
//! pairs = "rail-aligned"     # all | same-tor | cross-tor | rail-aligned | sampled
//! peers_per_tor = 2          # sampled: each device against this many under its own ToR
//!                            # and this many under other ToRs
//! link_gbps = 0.2            # a soft device's nominal link rate (RDMA devices: the port's)
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
//! min_vs_line_rate = 0.5     # aggregate >= 0.5 x flows x link rate
//!
//! [pod.incast]               # per ToR: senders elsewhere to one device under it at once
//! senders = 4
//! max_unfairness = 0.5       # every sender within 50 % of the fair share
//! max_retransmitted = 0.25   # retransmitted packets per packet sent, at most
//! ```
//!
//! Rank k of the run plays `hosts[k]` (or the host of its host name when every host name
//! of the plan is a rank's).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Which pairs of devices a pod run measures (always devices on two different hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairSet {
    /// Every pair of devices on different hosts.
    All,
    /// Pairs under the same ToR.
    SameTor,
    /// Pairs under different ToRs.
    CrossTor,
    /// Rail i to rail i across hosts: the paths collectives use.
    #[default]
    RailAligned,
    /// Each device against `peers_per_tor` devices under its own ToR and as many under other
    /// ToRs (each under another): O(N.k) pairs, coverage reported.
    Sampled,
}

impl PairSet {
    /// The plan's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PairSet::All => "all",
            PairSet::SameTor => "same-tor",
            PairSet::CrossTor => "cross-tor",
            PairSet::RailAligned => "rail-aligned",
            PairSet::Sampled => "sampled",
        }
    }
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
    /// The aggregate must reach this share of flows × link rate.
    #[serde(default = "default_bisection_share")]
    pub min_vs_line_rate: f64,
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
        let mut names = BTreeSet::new();
        let mut devices = BTreeSet::new();
        for h in &self.hosts {
            if !names.insert(h.name.as_str()) {
                return Err(("name", format!("`pod.hosts`: host {:?} is listed twice", h.name)));
            }
            if h.rails.is_empty() {
                return Err(("rails", format!("`pod.hosts`: host {:?} has no rail", h.name)));
            }
            let mut mine = BTreeSet::new();
            for r in &h.rails {
                if let Err(verbs::Error::BadDeviceName { why, .. }) =
                    verbs::DeviceName::parse(&r.device)
                {
                    return Err(("device", format!("{:?} is not a device name: {why}", r.device)));
                }
                if !mine.insert(r.device.as_str()) {
                    return Err((
                        "device",
                        format!("host {:?} lists device {:?} twice", h.name, r.device),
                    ));
                }
                // A soft device is an address: one host's address cannot be another's.
                if r.device.starts_with("soft:") && !devices.insert(r.device.as_str()) {
                    return Err(("device", format!("{:?} is on two hosts", r.device)));
                }
            }
        }
        if let Some(g) = self.link_gbps
            && !(g.is_finite() && g > 0.0)
        {
            return Err(("link_gbps", format!("`pod.link_gbps` = {g}: a positive rate")));
        }
        if self.pairs == PairSet::Sampled && self.peers_per_tor == 0 {
            return Err(("peers_per_tor", "`pod.peers_per_tor` must be at least 1".into()));
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
        }
        if let Some(i) = &self.incast {
            share("max_unfairness", i.max_unfairness)?;
            share("max_retransmitted", i.max_retransmitted)?;
            share("seconds", i.seconds)?;
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
        for d in self.devices() {
            let t = &self.rail(d).tor;
            match out.iter_mut().find(|(n, _)| n == t) {
                Some((_, v)) => v.push(d),
                None => out.push((t.clone(), vec![d])),
            }
        }
        out
    }

    /// The pairs of the plan's set, each (lower host, higher host), in order.
    pub fn pairs(&self) -> Vec<(Dev, Dev)> {
        let devs = self.devices();
        let mut out = Vec::new();
        if self.pairs == PairSet::Sampled {
            // k peers under the device's own ToR and k under other ToRs (each under another
            // one, in a seeded order): O(N.k) pairs, every device and, over a pod, most ToR
            // pairs covered (the report counts them).
            let mut set = BTreeSet::new();
            for &d in &devs {
                let mut near: Vec<Dev> = devs
                    .iter()
                    .copied()
                    .filter(|p| p.host != d.host && self.same_tor(*p, d))
                    .collect();
                near.sort_by_key(|p| mix(self.seed, d, *p));
                let mut far: Vec<Dev> = devs
                    .iter()
                    .copied()
                    .filter(|p| p.host != d.host && !self.same_tor(*p, d))
                    .collect();
                far.sort_by_key(|p| mix(self.seed, d, *p));
                let mut tors = BTreeSet::new();
                let far = far.into_iter().filter(|p| tors.insert(self.rail(*p).tor.clone()));
                for p in
                    near.into_iter().take(self.peers_per_tor).chain(far.take(self.peers_per_tor))
                {
                    set.insert(if d.host < p.host { (d, p) } else { (p, d) });
                }
            }
            return set.into_iter().collect();
        }
        for (i, &a) in devs.iter().enumerate() {
            for &b in &devs[i + 1..] {
                if a.host == b.host {
                    continue;
                }
                let keep = match self.pairs {
                    PairSet::All => true,
                    PairSet::SameTor => self.same_tor(a, b),
                    PairSet::CrossTor => !self.same_tor(a, b),
                    PairSet::RailAligned => a.rail == b.rail,
                    PairSet::Sampled => unreachable!("handled above"),
                };
                if keep {
                    out.push((a, b));
                }
            }
        }
        out
    }

    /// Every possible pair across hosts (what `all` measures): the denominator of coverage.
    pub fn all_pairs(&self) -> usize {
        let n: Vec<usize> = self.hosts.iter().map(|h| h.rails.len()).collect();
        let total: usize = n.iter().sum();
        (total * total - n.iter().map(|k| k * k).sum::<usize>()) / 2
    }
}

fn mix(seed: u64, a: Dev, b: Dev) -> u64 {
    // SplitMix64 over the inputs: a fixed, well-spread order.
    let mut z = seed
        ^ (a.host as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (a.rail as u64).rotate_left(17)
        ^ (b.host as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (b.rail as u64).rotate_left(41);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Splits `pairs` into rounds of disjoint pairs (no device, and no host pair, twice in a
/// round): the host pairs of a round-robin tournament (N hosts meet in N − 1 rounds, N even;
/// N rounds, N odd), each host pair's device pairs spread so that a device is in one pair per
/// round (rail r of one host with rail r + s of the other in sub-round s).
pub fn rounds(pod: &Pod, pairs: &[(Dev, Dev)]) -> Vec<Vec<(Dev, Dev)>> {
    let n = pod.hosts.len();
    let m = n + n % 2;
    let rails = pod.hosts.iter().map(|h| h.rails.len()).max().unwrap_or(1);
    let mut by_hosts: BTreeMap<(usize, usize), Vec<(Dev, Dev)>> = BTreeMap::new();
    for &(a, b) in pairs {
        let key = (a.host.min(b.host), a.host.max(b.host));
        by_hosts.entry(key).or_default().push((a, b));
    }
    let mut out = Vec::new();
    // The circle method: host 0 stays, the others turn.
    let mut ring: Vec<usize> = (0..m).collect();
    for _ in 0..m - 1 {
        let meet: Vec<(usize, usize)> = (0..m / 2)
            .map(|i| (ring[i], ring[m - 1 - i]))
            .filter(|(a, b)| *a < n && *b < n)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        for s in 0..rails {
            let round: Vec<(Dev, Dev)> = meet
                .iter()
                .filter_map(|k| by_hosts.get(k))
                .flatten()
                .copied()
                .filter(|(a, b)| {
                    let (lo, hi) = if a.host < b.host { (a, b) } else { (b, a) };
                    hi.rail == (lo.rail + s) % rails
                })
                .collect();
            if !round.is_empty() {
                out.push(round);
            }
        }
        ring[1..].rotate_right(1);
    }
    out
}

/// The bisection: host i of the first half with host i + N/2, every rail to the same rail.
pub fn bisection(pod: &Pod) -> Vec<(Dev, Dev)> {
    let n = pod.hosts.len();
    (0..n / 2)
        .flat_map(|i| {
            let j = i + n / 2;
            let rails = pod.hosts[i].rails.len().min(pod.hosts[j].rails.len());
            (0..rails).map(move |r| (Dev { host: i, rail: r }, Dev { host: j, rail: r }))
        })
        .collect()
}

/// The incasts: per ToR, its first device receives from up to `senders` devices of the same
/// rail on other hosts (under other ToRs first, so the traffic crosses the fabric).
pub fn incasts(pod: &Pod, senders: usize) -> Vec<(String, Dev, Vec<Dev>)> {
    let mut out = Vec::new();
    for (tor, under) in pod.tors() {
        let Some(&rx) = under.first() else { continue };
        let mut from: Vec<Dev> =
            pod.devices().into_iter().filter(|d| d.host != rx.host && d.rail == rx.rail).collect();
        from.sort_by_key(|d| (pod.same_tor(*d, rx), d.host));
        from.truncate(senders);
        if !from.is_empty() {
            out.push((tor, rx, from));
        }
    }
    out
}

/// What was measured of a pair (both directions together): whether it failed, the checks
/// that failed, and the probes over UDP source ports (port, whether it carried traffic).
#[derive(Debug, Clone, PartialEq)]
pub struct PairOutcome {
    /// The pair.
    pub pair: (Dev, Dev),
    /// Whether any check of the pair failed.
    pub failed: bool,
    /// The failed checks' names.
    pub failed_checks: Vec<String>,
    /// Probes over chosen source ports: (port, carried).
    pub ports: Vec<(u16, bool)>,
}

/// A component the failures point at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    /// `host`, `rail`, `tor`, `spine-path`, `link`, or `pod` (most of it failed: no one
    /// component stands out).
    pub kind: String,
    /// Which (`node03`, `node03.r1 (mlx5_1, ToR rack2-rail1)`, `rack2-rail1`,
    /// `rack1-rail0 <-> rack2-rail0`, `node01.r0 <-> node04.r0`).
    pub component: String,
    /// Failed pairs over measured pairs of the component: 1.0 when every one failed.
    pub confidence: f64,
    /// In words: what failed and what did not.
    pub evidence: String,
    /// The failed pairs it explains.
    pub pairs: Vec<String>,
    /// The failed checks among them (the first few).
    pub checks: Vec<String>,
}

/// A device is suspected when at least this share of its pairs failed (and two or more).
pub const DEVICE_SHARE: f64 = 0.75;

/// From the pairs measured, the suspects: hosts (every rail of a host suspected), ToRs
/// (every device under a ToR, on two or more hosts), rails (a device, its port or its cable),
/// spine paths (cross-ToR pairs where some source ports carried and others did not) and,
/// for a failed pair nothing else explains, the path between its two devices.
pub fn attribute(pod: &Pod, outcomes: &[PairOutcome]) -> Vec<Suspect> {
    let pname = |(a, b): (Dev, Dev)| format!("{} <-> {}", pod.name(a), pod.name(b));
    // A pair whose probes both carried and did not is a path (hash) failure, not a device's.
    // Under one ToR no spine is crossed: such a pair fails as its devices do.
    let split = |o: &PairOutcome| {
        !pod.same_tor(o.pair.0, o.pair.1)
            && o.ports.iter().any(|(_, ok)| *ok)
            && o.ports.iter().any(|(_, ok)| !*ok)
    };
    let failed = |o: &PairOutcome| o.failed || o.ports.iter().any(|(_, ok)| !*ok);
    // A pair's two ToRs, in order.
    let tors_of = |o: &PairOutcome| {
        let (ta, tb) = (&pod.rail(o.pair.0).tor, &pod.rail(o.pair.1).tor);
        if ta <= tb { (ta.clone(), tb.clone()) } else { (tb.clone(), ta.clone()) }
    };
    // Spine paths: per ToR pair, the pairs whose source ports split.
    let mut spine: BTreeMap<(String, String), Vec<&PairOutcome>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| split(o)) {
        spine.entry(tors_of(o)).or_default().push(o);
    }
    // One ToR in every ToR pair with path evidence (two or more, one of them split): its
    // spine links. Path evidence is a split, or failed pairs on more than one device (a
    // pair whose probes all hashed onto the dead path fails whole: one in eight with four
    // source ports and two spines). A lossy device splits and fails its own pairs too (a
    // probe lost on one source port): a ToR pair whose splits and failures all share one
    // device is that device's, not a path's. A ToR whose pairs under it fail too is lossy
    // or dead itself: not its spine links.
    let holds = |t: &String, k: &(String, String)| k.0 == *t || k.1 == *t;
    let one_device = |os: &[&PairOutcome]| {
        let Some(first) = os.first().map(|o| o.pair) else { return true };
        [first.0, first.1].into_iter().any(|d| os.iter().all(|o| o.pair.0 == d || o.pair.1 == d))
    };
    let mut whole: BTreeMap<(String, String), Vec<&PairOutcome>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| failed(o) && !split(o)) {
        let k = tors_of(o);
        if k.0 != k.1 {
            whole.entry(k).or_default().push(o);
        }
    }
    // ToRs whose own pairs (no spine crossed) fail: at fault themselves, or their devices.
    let lossy_tors: BTreeSet<&String> = outcomes
        .iter()
        .filter(|o| failed(o) && pod.same_tor(o.pair.0, o.pair.1))
        .map(|o| &pod.rail(o.pair.0).tor)
        .collect();
    let both = |k: &(String, String)| -> Vec<&PairOutcome> {
        spine.get(k).into_iter().chain(whole.get(k)).flatten().copied().collect()
    };
    let evidence: BTreeSet<&(String, String)> = spine
        .keys()
        .chain(whole.iter().filter(|(_, os)| !one_device(os)).map(|(k, _)| k))
        .collect();
    let tors: BTreeSet<&String> = spine.keys().flat_map(|(a, b)| [a, b]).collect();
    let common = tors
        .into_iter()
        .map(|t| {
            let off: Vec<&(String, String)> =
                evidence.iter().copied().filter(|k| !holds(t, k)).collect();
            (t, evidence.len() - off.len(), off)
        })
        .filter(|(t, _, _)| !lossy_tors.contains(*t))
        .filter(|(_, on, off)| *on >= 2 && off.iter().all(|k| one_device(&both(k))))
        .min_by_key(|(_, _, off)| off.len())
        .map(|(t, _, _)| t.clone());
    let mut not_path: BTreeSet<(Dev, Dev)> = BTreeSet::new();
    if let Some(t) = &common {
        spine.retain(|k, os| {
            let keep = holds(t, k);
            if !keep {
                not_path.extend(os.iter().map(|o| o.pair));
            }
            keep
        });
    }
    let by_path = |o: &PairOutcome| split(o) && !not_path.contains(&o.pair);
    // A failed cross-ToR pair between ToRs whose paths split (or touching the one ToR in all
    // of them): its default source port hashed onto the dead path, though its probes did not.
    let on_split_path = |o: &PairOutcome| {
        let (ta, tb) = tors_of(o);
        ta != tb
            && failed(o)
            && (spine.contains_key(&(ta.clone(), tb.clone()))
                || common.as_ref().is_some_and(|c| *c == ta || *c == tb))
    };
    let mut tally: BTreeMap<Dev, (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        // A pair that fails on some ECMP paths only says nothing of its devices.
        if by_path(o) || on_split_path(o) {
            continue;
        }
        for d in [o.pair.0, o.pair.1] {
            let t = tally.entry(d).or_default();
            t.0 += 1;
            if failed(o) {
                t.1 += 1;
            }
        }
    }
    let flagged: BTreeSet<Dev> = tally
        .iter()
        .filter(|(_, (n, f))| *f >= 2 && *f as f64 >= DEVICE_SHARE * *n as f64)
        .map(|(d, _)| *d)
        .collect();
    let share = |ds: &[Dev]| {
        let (n, f) =
            ds.iter().filter_map(|d| tally.get(d)).fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1));
        if n == 0 { 0.0 } else { f as f64 / n as f64 }
    };
    let explained_by =
        |o: &PairOutcome, ds: &[Dev]| ds.contains(&o.pair.0) || ds.contains(&o.pair.1);
    let evidence_of = |ds: &[Dev], what: &str| -> (Vec<String>, Vec<String>, String) {
        let mine: Vec<&PairOutcome> =
            outcomes.iter().filter(|o| explained_by(o, ds) && failed(o) && !by_path(o)).collect();
        let total = outcomes.iter().filter(|o| explained_by(o, ds)).count();
        let pairs: Vec<String> = mine.iter().map(|o| pname(o.pair)).collect();
        let checks: Vec<String> =
            mine.iter().flat_map(|o| o.failed_checks.iter().cloned()).take(6).collect();
        let text = format!("{} of the {total} pairs of {what} failed", mine.len());
        (pairs, checks, text)
    };
    let mut out = Vec::new();
    let mut covered: BTreeSet<Dev> = BTreeSet::new();
    // Most of the pod at fault is no component: the thresholds, the link rate the plan
    // assumes, or something every host shares.
    if flagged.len() >= 3 && 2 * flagged.len() > tally.len() {
        let all: Vec<Dev> = tally.keys().copied().collect();
        let (pairs, checks, text) = evidence_of(&all, "the pod");
        return vec![Suspect {
            kind: "pod".into(),
            component: format!("{} of {} devices", flagged.len(), tally.len()),
            confidence: share(&all),
            evidence: format!(
                "{text}: no one component stands out — the thresholds, the link rate the plan \
                 assumes, or what every host shares (load, configuration)"
            ),
            pairs,
            checks,
        }];
    }
    // Hosts: every rail of the host (two or more rails, else it is a rail).
    for (h, host) in pod.hosts.iter().enumerate() {
        let ds: Vec<Dev> = (0..host.rails.len()).map(|r| Dev { host: h, rail: r }).collect();
        if ds.len() >= 2 && ds.iter().all(|d| flagged.contains(d)) {
            let (pairs, checks, text) = evidence_of(&ds, &format!("its {} rails", ds.len()));
            out.push(Suspect {
                kind: "host".into(),
                component: host.name.clone(),
                confidence: share(&ds),
                evidence: format!(
                    "{text}: every rail of the host (its CPU, memory, PCIe, or the host itself)"
                ),
                pairs,
                checks,
            });
            covered.extend(ds);
        }
    }
    // ToRs: every device under it not explained yet, on two or more hosts.
    for (tor, under) in pod.tors() {
        let hosts: BTreeSet<usize> = under.iter().map(|d| d.host).collect();
        if hosts.len() >= 2 && under.iter().all(|d| flagged.contains(d) && !covered.contains(d)) {
            let (pairs, checks, text) =
                evidence_of(&under, &format!("the {} devices under it", under.len()));
            out.push(Suspect {
                kind: "tor".into(),
                component: tor.clone(),
                confidence: share(&under),
                evidence: format!("{text}; the devices of other ToRs passed among themselves"),
                pairs,
                checks,
            });
            covered.extend(under);
        }
    }
    // Rails: a device, its port or its cable.
    for &d in &flagged {
        if covered.contains(&d) {
            continue;
        }
        let (pairs, checks, text) = evidence_of(&[d], "the device");
        let r = pod.rail(d);
        out.push(Suspect {
            kind: "rail".into(),
            component: format!("{} ({}, ToR {})", pod.name(d), r.device, r.tor),
            confidence: share(&[d]),
            evidence: format!(
                "{text}, with peers that passed elsewhere: the NIC, its port or its cable to {}",
                r.tor
            ),
            pairs,
            checks,
        });
        covered.insert(d);
    }
    let spine_suspect = |component: String, os: &[&PairOutcome]| {
        let bad: usize = os.iter().map(|o| o.ports.iter().filter(|p| !p.1).count()).sum();
        let all: usize = os.iter().map(|o| o.ports.len()).sum();
        let ports: Vec<String> = os
            .iter()
            .filter(|o| by_path(o))
            .take(4)
            .map(|o| {
                let dead: Vec<String> =
                    o.ports.iter().filter(|p| !p.1).map(|p| p.0.to_string()).collect();
                format!("{}: ports {} did not carry", pname(o.pair), dead.join(", "))
            })
            .collect();
        let split = os.iter().filter(|o| by_path(o)).count();
        Suspect {
            kind: "spine-path".into(),
            component,
            // How many of the pairs it explains show the split themselves.
            confidence: if os.is_empty() { 0.0 } else { split as f64 / os.len() as f64 },
            evidence: format!(
                "{bad} of {all} source-port probes over {split} pair(s) carried nothing while the \
                 others carried, and {} more pair(s) failed on their own source port: a ToR-spine \
                 link or a spine, for the ECMP hashes that use it ({})",
                os.len() - split,
                ports.join("; ")
            ),
            pairs: os.iter().map(|o| pname(o.pair)).collect(),
            checks: os.iter().flat_map(|o| o.failed_checks.iter().cloned()).take(6).collect(),
        }
    };
    let all_covered: Vec<Dev> = covered.iter().copied().collect();
    // The failed pairs a spine suspect explains beyond those whose probes split.
    let also = |keep: &dyn Fn(&PairOutcome) -> bool| -> Vec<&PairOutcome> {
        outcomes
            .iter()
            .filter(|o| {
                !by_path(o) && on_split_path(o) && !explained_by(o, &all_covered) && keep(o)
            })
            .collect()
    };
    if let Some(t) = &common {
        let mut os: Vec<&PairOutcome> = spine.values().flatten().copied().collect();
        os.extend(also(&|_| true));
        out.push(spine_suspect(format!("the spine links of {t}"), &os));
    } else {
        for (k, os) in &spine {
            let mut os = os.clone();
            os.extend(also(&|o| tors_of(o) == *k));
            out.push(spine_suspect(format!("{} <-> {}", k.0, k.1), &os));
        }
    }
    // What is left: failed pairs no suspect explains.
    for o in outcomes {
        if failed(o) && !by_path(o) && !on_split_path(o) && !explained_by(o, &all_covered) {
            out.push(Suspect {
                kind: "link".into(),
                component: pname(o.pair),
                confidence: 1.0,
                evidence: "this pair failed while both devices passed with their other peers: the path between them".into(),
                pairs: vec![pname(o.pair)],
                checks: o.failed_checks.iter().take(6).cloned().collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hosts` hosts of `rails` rails, `per` hosts per ToR (ToR per rack and rail), as
    /// scripts/emupod.sh builds them.
    fn pod(hosts: usize, rails: usize, per: usize, set: PairSet) -> Pod {
        Pod {
            pairs: set,
            peers_per_tor: 1,
            seed: 1,
            link_gbps: Some(0.2),
            source_ports: 4,
            progress: PodProgress::Event,
            stall_seconds: 5.0,
            qp_timeout: 14,
            tx_depth: None,
            bisection: None,
            incast: None,
            hosts: (0..hosts)
                .map(|i| Host {
                    name: format!("h{i}"),
                    rails: (0..rails)
                        .map(|r| Rail {
                            device: format!("soft:10.{}.{i}.1", r + 1),
                            tor: format!("t{}", (i / per) * rails + r),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn pair_sets_and_their_sizes() {
        let p = pod(6, 2, 2, PairSet::All);
        assert_eq!(p.pairs().len(), 60);
        assert_eq!(p.all_pairs(), 60);
        let count = |s| Pod { pairs: s, ..p.clone() }.pairs().len();
        assert_eq!(count(PairSet::RailAligned), 30);
        // Same ToR: 3 racks x 2 rails, one pair of hosts each.
        assert_eq!(count(PairSet::SameTor), 6);
        assert_eq!(count(PairSet::CrossTor), 54);
        assert!(
            Pod { pairs: PairSet::SameTor, ..p.clone() }
                .pairs()
                .iter()
                .all(|(a, b)| p.same_tor(*a, *b))
        );
        // Sampled: O(N.k), not O(N^2), and every device is covered.
        let big = pod(64, 2, 4, PairSet::Sampled);
        let s = big.pairs();
        assert!(s.len() <= 128 * 2, "{}", s.len());
        assert!(s.len() * 30 < big.all_pairs(), "{} of {}", s.len(), big.all_pairs());
        let seen: BTreeSet<Dev> = s.iter().flat_map(|(a, b)| [*a, *b]).collect();
        assert_eq!(seen.len(), 128);
        assert_eq!(s, big.pairs(), "the same seed, the same pairs");
    }

    #[test]
    fn rounds_are_disjoint_and_cover_every_pair_once() {
        for (hosts, rails, set) in [
            (6, 2, PairSet::RailAligned),
            (5, 2, PairSet::All),
            (16, 2, PairSet::RailAligned),
            (7, 3, PairSet::CrossTor),
        ] {
            let p = pod(hosts, rails, 2, set);
            let pairs = p.pairs();
            let r = rounds(&p, &pairs);
            let mut all: Vec<(Dev, Dev)> = r.iter().flatten().copied().collect();
            all.sort();
            let mut want = pairs.clone();
            want.sort();
            assert_eq!(all, want, "{hosts}x{rails} {set:?}");
            for round in &r {
                let mut devs = BTreeSet::new();
                for (a, b) in round {
                    assert!(devs.insert(*a) && devs.insert(*b), "a device twice in a round");
                }
            }
            if set == PairSet::RailAligned {
                // N hosts in N - 1 rounds (N even), N (odd): the rails share a round.
                assert_eq!(r.len(), hosts - 1 + hosts % 2, "{hosts}x{rails}");
            }
        }
    }

    #[test]
    fn bisection_and_incast_shapes() {
        let p = pod(6, 2, 2, PairSet::RailAligned);
        let b = bisection(&p);
        assert_eq!(b.len(), 6);
        assert!(b.iter().all(|(a, c)| a.host < 3 && c.host >= 3 && a.rail == c.rail));
        let i = incasts(&p, 4);
        assert_eq!(i.len(), 6, "one per ToR");
        for (_, rx, from) in &i {
            assert_eq!(from.len(), 4);
            assert!(from.iter().all(|d| d.rail == rx.rail && d.host != rx.host));
            assert!(!p.same_tor(from[0], *rx), "senders from other ToRs first");
        }
    }

    fn outcome(p: &Pod, a: Dev, b: Dev, bad: &dyn Fn(Dev, Dev) -> bool) -> PairOutcome {
        let failed = bad(a, b);
        PairOutcome {
            pair: (a, b),
            failed,
            failed_checks: if failed { vec![format!("perf/{}", p.name(a))] } else { vec![] },
            ports: vec![],
        }
    }

    #[test]
    fn attribution_names_the_component_that_fails() {
        let p = pod(6, 2, 2, PairSet::All);
        let pairs = p.pairs();
        let run = |bad: &dyn Fn(Dev, Dev) -> bool| {
            let o: Vec<PairOutcome> = pairs.iter().map(|(a, b)| outcome(&p, *a, *b, bad)).collect();
            attribute(&p, &o)
        };
        let d = |h, r| Dev { host: h, rail: r };
        // A clean pod: nobody; a pod where everything fails: no one component.
        assert!(run(&|_, _| false).is_empty());
        let s = run(&|_, _| true);
        assert_eq!(
            (s.len(), s[0].kind.as_str(), s[0].component.as_str()),
            (1, "pod", "12 of 12 devices")
        );
        // One rail of h2: that rail, nothing else.
        let s = run(&|a, b| a == d(2, 1) || b == d(2, 1));
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].kind.as_str(), s[0].confidence), ("rail", 1.0));
        assert!(s[0].component.starts_with("h2.r1 (soft:10.2.2.1, ToR t3)"), "{}", s[0].component);
        // Both rails of h4: the host.
        let s = run(&|a, b| a.host == 4 || b.host == 4);
        assert_eq!((s.len(), s[0].kind.as_str(), s[0].component.as_str()), (1, "host", "h4"));
        // Every device under ToR t2 (rack 1, rail 0: hosts 2 and 3): the ToR.
        let under_t2 = |x: Dev| x.rail == 0 && (x.host == 2 || x.host == 3);
        let s = run(&|a, b| under_t2(a) ^ under_t2(b));
        assert_eq!(
            (s.len(), s[0].kind.as_str(), s[0].component.as_str()),
            (1, "tor", "t2"),
            "{s:?}"
        );
        // One pair alone: the link between them.
        let s = run(&|a, b| (a, b) == (d(0, 0), d(5, 1)));
        assert_eq!((s.len(), s[0].kind.as_str()), (1, "link"));
        // Source ports that split on cross-ToR pairs of one ToR: its spine links.
        let o: Vec<PairOutcome> = pairs
            .iter()
            .map(|&(a, b)| {
                let mut o = outcome(&p, a, b, &|_, _| false);
                if !p.same_tor(a, b) && (p.rail(a).tor == "t3" || p.rail(b).tor == "t3") {
                    o.ports = vec![(49152, true), (49153, false), (49154, true), (49155, false)];
                    o.failed = a.host == 0; // the default port hashed onto the dead path
                    if a.host == 1 {
                        // Every probe hashed onto a live spine, the default port did not.
                        o.ports = vec![(49152, true), (49154, true)];
                        o.failed = true;
                    }
                }
                o
            })
            .collect();
        let s = attribute(&p, &o);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(
            (s[0].kind.as_str(), s[0].component.as_str()),
            ("spine-path", "the spine links of t3")
        );
        assert!(s[0].evidence.contains("ports 49153, 49155 did not carry"), "{}", s[0].evidence);
        assert!(s[0].pairs.iter().any(|p| p.starts_with("h1.")), "the unsplit failures too");
        assert!(s[0].evidence.contains("more pair(s) failed on their own source port"));
    }

    /// A lossy ToR fails every pair of the devices under it, those under it among
    /// themselves too, and may split a pair's probes (one lost): that is the ToR, not its
    /// spine links (the agent's test of a lossy ToR saw "the spine links of t3").
    #[test]
    fn a_lossy_tor_is_the_tor_not_its_spine_links() {
        let p = pod(6, 2, 2, PairSet::RailAligned);
        let under = |d: Dev| p.rail(d).tor == "t3";
        let o: Vec<PairOutcome> = p
            .pairs()
            .iter()
            .map(|&(a, b)| {
                let mut o = outcome(&p, a, b, &|a, b| under(a) || under(b));
                if !p.same_tor(a, b) {
                    let lost = (a, b) == (Dev { host: 0, rail: 1 }, Dev { host: 3, rail: 1 });
                    o.ports = vec![(49152, true), (49153, !lost), (49154, true)];
                    if o.failed && !lost {
                        o.ports.iter_mut().for_each(|p| p.1 = false);
                    }
                }
                o
            })
            .collect();
        let s = attribute(&p, &o);
        let got: Vec<(&str, &str)> =
            s.iter().map(|x| (x.kind.as_str(), x.component.as_str())).collect();
        assert!(got.contains(&("tor", "t3")), "{s:#?}");
        assert!(!got.iter().any(|g| g.1 == "the spine links of t3"), "{s:#?}");
    }

    /// The emulated pod's cases (seen under load in CI): t1's spine link down splits the
    /// pairs crossing t1, and a lossy rail (h4.r1, under t5) loses a probe on one source
    /// port of a pair that does not cross t1. That split is the rail's, not a third spine
    /// path: t1's links and the rail are named, nothing else. And when every probe of the
    /// pairs from t1 to t5 hashed onto the dead link (they fail whole, no split), t1 is still
    /// the one ToR in every ToR pair with path evidence.
    #[test]
    fn a_lossy_rail_does_not_hide_behind_a_spine_split() {
        let p = pod(6, 2, 2, PairSet::RailAligned);
        let h4 = Dev { host: 4, rail: 1 };
        for t5_whole in [false, true] {
            let o: Vec<PairOutcome> = p
                .pairs()
                .iter()
                .map(|&(a, b)| {
                    let mut o = outcome(&p, a, b, &|a, b| a == h4 || b == h4);
                    let on = |d: Dev, t: &str| p.rail(d).tor == t;
                    if !p.same_tor(a, b) {
                        o.ports = vec![(49152, true), (49153, true), (49154, true), (49155, true)];
                        if on(a, "t1") ^ on(b, "t1") {
                            if t5_whole && (on(a, "t5") || on(b, "t5")) {
                                o.ports.iter_mut().for_each(|p| p.1 = false);
                                o.failed = true;
                            } else {
                                o.ports[1].1 = false;
                                o.ports[3].1 = false;
                                o.failed |= a.host == 0;
                            }
                        } else if (a, b) == (Dev { host: 3, rail: 1 }, h4) {
                            o.ports[2].1 = false; // a probe lost on the lossy rail
                        }
                    }
                    o
                })
                .collect();
            let s = attribute(&p, &o);
            let got: Vec<(&str, &str)> =
                s.iter().map(|x| (x.kind.as_str(), x.component.as_str())).collect();
            assert_eq!(got.len(), 2, "{t5_whole}: {s:#?}");
            assert_eq!(got[1], ("spine-path", "the spine links of t1"), "{s:#?}");
            assert_eq!(got[0].0, "rail", "{s:#?}");
            assert!(got[0].1.starts_with("h4.r1 "), "{s:#?}");
        }
    }
}
