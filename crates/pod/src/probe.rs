//! RDMA path probing, R-Pingmesh style, sans-IO: which peers each rail probes (its ToR-mesh —
//! every device under its ToR — and one device of every other ToR of its rail, rotating),
//! from which UDP source port (rotating over [`ProbeConfig::ports`], so every ECMP path
//! between two ToRs is walked), small probes every period and a near-MTU one per rail every
//! period to the next target in turn; the probe and reply format; round trips with the
//! responder's time taken out ((T4 − T1) − (T3 − T2)); and each path's window of outcomes,
//! summarised as the [`Report`] the host broadcasts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use topology::{Dev, Pod};

/// The probe format's magic (`PDPB`).
const MAGIC: u32 = 0x5044_5042;
/// Bytes of a probe's header: magic 4, kind 1, flags 1, host 2, src rail 1, dst rail 1,
/// port 2, seq 8, t1 8, t2 8, t3 8, qpn 4, address 16, the prober's cookie 8, then
/// [`TAG_LEN`] bytes of the pod's tag over the [`SIGNED`] bytes before it (zero in a pod
/// without a secret).
pub const HEADER: usize = 88;
/// The bytes of a probe the pod's tag covers.
pub const SIGNED: usize = 72;
/// Bytes of the tag.
pub const TAG_LEN: usize = HEADER - SIGNED;

/// How the prober runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeConfig {
    /// A round of probes this often.
    pub period: Duration,
    /// A probe unanswered this long is lost.
    pub timeout: Duration,
    /// UDP source ports each path is probed over, in turn.
    pub ports: usize,
    /// Bytes of a small probe.
    pub small: usize,
    /// Bytes of a near-MTU probe (the path MTU); 0: none.
    pub large: usize,
    /// How far back a path's outcomes are judged.
    pub window: Duration,
    /// How far back each rail's small probes are counted for the pod's per-component loss
    /// test ([`Report::horizon`]): long enough to gather the probes that tell 1 % loss on
    /// a cable from the background.
    pub horizon: Duration,
    /// Other ToRs each rail probes per round, at most (in turn when its rail has more),
    /// while something is wrong (see [`Prober::set_alert`]): the probes per host stay
    /// bounded as a pod grows.
    pub max_inter_tor: usize,
    /// Other ToRs each rail probes per round while the pod is healthy (in turn): a healthy
    /// pod is watched at a fraction of the cost, and the first loss seen anywhere brings
    /// every ToR back into each round to locate it (the peers a host has traffic for are
    /// probed every round regardless, see [`Prober::set_hot`]).
    pub calm_inter_tor: usize,
    /// Small probes each rail sends per round, at least: a rail with fewer targets in the
    /// round probes them again, over a rotation of ports of its own, until it has sent this
    /// many. These count for the horizon only (the pod's per-component tests,
    /// [`crate::cable`], [`crate::uplink`]), not in the path's window, whose verdicts keep
    /// their meaning. The per-component tests' power is the probes a rail sends: 1 % loss
    /// one way on a cable loses 1 % of its round trips, and at 100 a second (10 a round)
    /// the cables' test names it within the 30 s horizon in about 19 draws of 20 (see
    /// [`crate::cable`]). A pod of many hosts per ToR or of many ToRs sends more than this
    /// anyway and none of these.
    pub min_small: usize,
}

impl Default for ProbeConfig {
    fn default() -> ProbeConfig {
        ProbeConfig {
            period: Duration::from_millis(100),
            timeout: Duration::from_millis(300),
            ports: 16,
            small: HEADER,
            large: 4096,
            window: Duration::from_secs(5),
            horizon: Duration::from_secs(30),
            max_inter_tor: 16,
            calm_inter_tor: 1,
            min_small: 10,
        }
    }
}

impl ProbeConfig {
    /// The `i`-th UDP source port of the rotation.
    pub fn port(&self, i: usize) -> u16 {
        // Spread over the RoCEv2 range, away from the ports connections compute.
        0xF000 + (i % self.ports.max(1)) as u16 * 7
    }
}

/// A probe or a reply as it travels in a UD SEND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// A reply (else a probe).
    pub reply: bool,
    /// A near-MTU probe.
    pub large: bool,
    /// The prober's host.
    pub host: u16,
    /// The prober's rail.
    pub src_rail: u8,
    /// The rail probed.
    pub dst_rail: u8,
    /// The UDP source port the probe left from (the reply leaves from it too).
    pub port: u16,
    /// The prober's sequence number.
    pub seq: u64,
    /// When the probe left (prober's clock, ns).
    pub t1: u64,
    /// When the responder took it (its clock, ns).
    pub t2: u64,
    /// When the responder answered (its clock, ns).
    pub t3: u64,
    /// The prober's UD QPN.
    pub qpn: u32,
    /// The prober's device address.
    pub addr: IpAddr,
    /// The prober's cookie for this probe (a keyed hash of its sequence number that only
    /// the prober can make): a reply that does not echo it answers no probe of its.
    pub cookie: u64,
}

impl Packet {
    /// Writes the packet into the first [`HEADER`] bytes of `buf`; `None` if it is shorter.
    pub fn write(&self, buf: &mut [u8]) -> Option<()> {
        let b = buf.get_mut(..HEADER)?;
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4] = u8::from(self.reply) + 1;
        b[5] = u8::from(self.large);
        b[6..8].copy_from_slice(&self.host.to_be_bytes());
        b[8] = self.src_rail;
        b[9] = self.dst_rail;
        b[10..12].copy_from_slice(&self.port.to_be_bytes());
        b[12..20].copy_from_slice(&self.seq.to_be_bytes());
        b[20..28].copy_from_slice(&self.t1.to_be_bytes());
        b[28..36].copy_from_slice(&self.t2.to_be_bytes());
        b[36..44].copy_from_slice(&self.t3.to_be_bytes());
        b[44..48].copy_from_slice(&self.qpn.to_be_bytes());
        let a = match self.addr {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        b[48..64].copy_from_slice(&a.octets());
        b[64..72].copy_from_slice(&self.cookie.to_be_bytes());
        b[SIGNED..HEADER].fill(0);
        Some(())
    }

    /// Reads a packet; `None` if it is not one.
    pub fn read(b: &[u8]) -> Option<Packet> {
        let b = b.get(..HEADER)?;
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
        if u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != MAGIC || !(1..=2).contains(&b[4]) {
            return None;
        }
        let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&b[48..64]).ok()?);
        Some(Packet {
            reply: b[4] == 2,
            large: b[5] & 1 != 0,
            host: u16::from_be_bytes([b[6], b[7]]),
            src_rail: b[8],
            dst_rail: b[9],
            port: u16::from_be_bytes([b[10], b[11]]),
            seq: u64_at(12),
            t1: u64_at(20),
            t2: u64_at(28),
            t3: u64_at(36),
            qpn: u32::from_be_bytes([b[44], b[45], b[46], b[47]]),
            addr: v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            cookie: u64_at(64),
        })
    }

    /// The reply to this probe, stamped with the responder's times.
    pub fn answer(&self, t2: u64, t3: u64) -> Packet {
        Packet { reply: true, t2, t3, ..*self }
    }
}

/// A probe to send: from which rail, to which device, from which UDP source port, the
/// packet and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The rail it leaves from.
    pub rail: usize,
    /// The device probed.
    pub dst: Dev,
    /// The UDP source port.
    pub port: u16,
    /// Bytes to send (at least [`HEADER`]).
    pub len: usize,
    /// The packet.
    pub packet: Packet,
}

/// A reply that came back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answered {
    /// The rail probed from.
    pub rail: usize,
    /// The device probed.
    pub dst: Dev,
    /// The UDP source port.
    pub port: u16,
    /// A near-MTU probe.
    pub large: bool,
    /// The network's round trip: (T4 − T1) − (T3 − T2).
    pub rtt: Duration,
    /// The responder's time (T3 − T2).
    pub responder: Duration,
}

/// What became of one probe.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Outcome {
    at: Instant,
    port: u16,
    large: bool,
    rtt: Option<Duration>,
}

/// One path: a rail of this host to a device of another.
#[derive(Debug, Clone, Default)]
pub struct PathStats {
    /// Probes sent, small and large.
    pub sent: [u64; 2],
    /// Probes lost, small and large.
    pub lost: [u64; 2],
    recent: VecDeque<Outcome>,
    /// Small probes judged and lost, per second of the horizon (seconds since the epoch).
    buckets: VecDeque<(u64, u32, u32)>,
    /// The small probes of the horizon to another ToR whose spines are known (see
    /// [`Prober::set_routes`]): (second since the epoch, the two spines its round trip
    /// crossed, the lower first, lost).
    crossings: VecDeque<(u64, [u8; 2], bool)>,
    /// Small probes lost among `recent`.
    recent_small_lost: usize,
    /// Probes answered after their timeout (queued behind traffic), since the start.
    pub late: u64,
    /// The last firm split of the small probes' losses by port: a path that fails for some
    /// ECMP hashes stays split while its losses are in the window (once healed, its ports
    /// answer again and the split would dissolve into plain loss).
    sticky: Option<PortSplit>,
}

/// How a path's losses fall over its UDP source ports, in the window. A probe lost is sent
/// again on its port in the next round (and again while it is lost): a port whose loss
/// repeats is a dead ECMP path; one whose later probe is answered lost a packet at random.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSplit {
    /// Ports whose last two probes were both lost.
    pub lost: Vec<u16>,
    /// Ports that answered since the path's first loss and lost nothing in the window.
    pub carried: Vec<u16>,
    /// Ports whose loss was followed by an answer: losses at random, not by ECMP path.
    pub flaky: usize,
    /// Every lost port lost its last [`PORT_DEAD_AFTER`] probes: a dead ECMP path beyond
    /// two losses in a row at random (what a split must show to outlast its losses).
    pub firm: bool,
}

impl PortSplit {
    /// Losses that repeat on some ports, others that carry, none that came and went: the
    /// path fails for some ECMP hashes only.
    pub fn is_split(&self) -> bool {
        !self.lost.is_empty() && !self.carried.is_empty() && self.flaky == 0
    }
}

/// Probes lost in a row on one port before a split is firm (see [`PortSplit::firm`]).
pub const PORT_DEAD_AFTER: usize = 5;

/// A path's state, judged over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathState {
    /// Every probe answered, or losses below the thresholds.
    Ok,
    /// Near-MTU probes lost while small ones pass (an MTU mismatch on the path, or a link
    /// that drops only large frames).
    LargeLost,
    /// Some probes lost (at least [`LOSSY_MIN`] and [`LOSSY_SHARE`] of them).
    Lossy,
    /// The last [`DEAD_AFTER`] small probes were all lost, and no port carries.
    Dead,
}

/// A path is dead once this many small probes in a row are lost.
pub const DEAD_AFTER: usize = 3;
/// A path is lossy with at least this many small probes lost in the window …
pub const LOSSY_MIN: usize = 3;
/// … and at least this share of them.
pub const LOSSY_SHARE: f64 = 0.02;
/// Near-MTU probes lost (in the window) before a path is `large-lost`.
pub const LARGE_MIN: usize = 2;

impl PathStats {
    /// Forgets its horizon: its per-second counts and its crossings.
    fn clear_horizon(&mut self) {
        self.buckets.clear();
        self.crossings.clear();
    }

    /// Its crossings over the horizon: (the two spines, judged, lost, the second of the
    /// last loss) per pair of spines.
    fn crossings(&self) -> Vec<([u8; 2], u32, u32, Option<u64>)> {
        let mut by: BTreeMap<[u8; 2], (u32, u32, Option<u64>)> = BTreeMap::new();
        for (sec, spines, lost) in &self.crossings {
            let e = by.entry(*spines).or_default();
            e.0 += 1;
            e.1 += u32::from(*lost);
            if *lost {
                e.2 = e.2.max(Some(*sec));
            }
        }
        by.into_iter().map(|(s, (n, k, at))| (s, n, k, at)).collect()
    }

    /// The second (since the epoch) of its last small probe lost in the horizon.
    fn last_lost(&self) -> Option<u64> {
        self.buckets.iter().rev().find(|b| b.2 > 0).map(|b| b.0)
    }

    /// Small probes judged in the seconds after `sec` (all of the horizon's: `None`).
    fn judged_after(&self, sec: Option<u64>) -> u32 {
        self.buckets.iter().filter(|b| sec.is_none_or(|s| b.0 > s)).map(|b| b.1).sum()
    }

    /// Its last [`DEAD_AFTER`] small probes were all lost (and it has sent that many).
    fn last_small_lost(&self) -> bool {
        let last = self.recent.iter().rev().filter(|o| !o.large).take(DEAD_AFTER);
        last.clone().count() == DEAD_AFTER && last.into_iter().all(|o| o.rtt.is_none())
    }

    /// The state over the window, and the ports whose last outcome was a loss (small
    /// probes, near-MTU ones) and those whose last outcome was answered.
    pub fn judge(&self) -> Judged {
        let small: Vec<&Outcome> = self.recent.iter().filter(|o| !o.large).collect();
        let large: Vec<&Outcome> = self.recent.iter().filter(|o| o.large).collect();
        let lost_small = small.iter().filter(|o| o.rtt.is_none()).count();
        // A near-MTU probe lost while small ones were lost too (within a second) says
        // nothing of frame sizes; near-MTU losses followed by answers have recovered.
        let small_lost_at: Vec<Instant> =
            small.iter().filter(|o| o.rtt.is_none()).map(|o| o.at).collect();
        let near_small_loss = |t: Instant| {
            small_lost_at
                .iter()
                .any(|s| s.max(&t).duration_since(*s.min(&t)) <= Duration::from_secs(1))
        };
        let large_lost_at: Vec<Instant> = large
            .iter()
            .filter(|o| o.rtt.is_none() && !near_small_loss(o.at))
            .map(|o| o.at)
            .collect();
        let large_recovered = large_lost_at.iter().max().is_some_and(|l| {
            let after: Vec<&&Outcome> = large.iter().filter(|o| o.at > *l).collect();
            after.len() >= 3 && after.iter().all(|o| o.rtt.is_some())
        });
        let lost_large = if large_recovered { 0 } else { large_lost_at.len() };
        let now_split = if lost_small > 0 { self.split(false) } else { PortSplit::default() };
        // Not while some ports carry: a path split by port retries its lost ports every
        // round, and their losses alone can fill the last few outcomes.
        let dead = self.last_small_lost() && now_split.carried.is_empty();
        let lossy =
            lost_small >= LOSSY_MIN && lost_small as f64 >= LOSSY_SHARE * small.len().max(1) as f64;
        let state = if dead {
            PathState::Dead
        } else if lossy {
            PathState::Lossy
        } else if lost_large >= LARGE_MIN && lost_small == 0 {
            // Only on a path whose small probes all passed: near-MTU probes lost where some
            // small ones are too (a lossy link) are that loss, not a size limit.
            PathState::LargeLost
        } else {
            PathState::Ok
        };
        // Answering without a loss since when (small probes).
        let last_loss = small_lost_at.iter().max().copied();
        let clean_since = small
            .iter()
            .filter(|o| o.rtt.is_some() && last_loss.is_none_or(|l| o.at > l))
            .map(|o| o.at)
            .min();
        let mut rtts: Vec<Duration> = small.iter().filter_map(|o| o.rtt).collect();
        rtts.sort();
        Judged {
            state,
            small: (small.len() as u32, lost_small as u32),
            large: (large.len() as u32, lost_large as u32),
            // How losses fall over the ports: only where there are losses (most paths have
            // none, and a split of none is empty).
            ports: {
                // A firm split stays while its losses are in the window, as long as they all
                // fell on its lost ports (they answer again once healed); a loss anywhere
                // else is loss at random, and the split was not one.
                let only_on_split_ports = |st: &PortSplit| {
                    small.iter().filter(|o| o.rtt.is_none()).all(|o| st.lost.contains(&o.port))
                };
                match &self.sticky {
                    Some(st) if !now_split.is_split() && lossy && only_on_split_ports(st) => {
                        st.clone()
                    }
                    _ => now_split,
                }
            },
            large_ports: if large.iter().any(|o| o.rtt.is_none()) {
                self.split(true)
            } else {
                PortSplit::default()
            },
            rtt_p50: rtts.get(rtts.len() / 2).copied(),
            clean_since,
        }
    }

    /// How the losses of small (or near-MTU) probes fall over the ports, over the window. A
    /// port carries only if it answered since the path's first loss in the window and lost
    /// nothing in it (a path that died has ports whose last answer came before, and they
    /// carry nothing now); a port whose loss was followed by an answer lost at random.
    pub fn split(&self, large: bool) -> PortSplit {
        let since =
            self.recent.iter().filter(|o| o.large == large && o.rtt.is_none()).map(|o| o.at).min();
        // Per port: its outcomes in the window, oldest first (answered or not), and when it
        // last answered.
        let mut by_port: BTreeMap<u16, (Vec<bool>, Option<Instant>)> = BTreeMap::new();
        for o in self.recent.iter().filter(|o| o.large == large) {
            let e = by_port.entry(o.port).or_default();
            e.0.push(o.rtt.is_some());
            if o.rtt.is_some() {
                e.1 = Some(o.at);
            }
        }
        let mut out = PortSplit { firm: true, ..PortSplit::default() };
        for (port, (h, answered_at)) in &by_port {
            let run = h.iter().rev().take_while(|a| !**a).count();
            let came_back = h.iter().skip_while(|a| **a).any(|a| *a);
            if run >= 2 {
                out.lost.push(*port);
                out.firm &= run >= PORT_DEAD_AFTER;
            } else if came_back {
                out.flaky += 1;
            } else if run == 0 && since.is_none_or(|s| answered_at.is_some_and(|t| t > s)) {
                out.carried.push(*port);
            }
            // Else one loss not confirmed yet (its retry is on the way), or only answers
            // from before the losses began.
        }
        out.firm &= !out.lost.is_empty();
        out
    }
}

/// A path judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// Its state.
    pub state: PathState,
    /// Small probes in the window: (judged, lost).
    pub small: (u32, u32),
    /// Near-MTU probes in the window: (judged, lost).
    pub large: (u32, u32),
    /// How the small probes' losses fall over the ports.
    pub ports: PortSplit,
    /// How the near-MTU probes' losses fall over the ports.
    pub large_ports: PortSplit,
    /// The median round trip of the small probes answered.
    pub rtt_p50: Option<Duration>,
    /// Since when every small probe has been answered (the first answer after the last
    /// loss in the window; `None`: none answered since).
    pub clean_since: Option<Instant>,
}

/// A path of this host's, judged (see [`Prober::judge_all`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedPath {
    /// (this host's rail, the device probed).
    pub key: (usize, Dev),
    /// Its judgement over the window.
    pub judged: Judged,
    /// Probes sent since the start, small and near-MTU.
    pub sent: [u64; 2],
    /// Probes lost since the start, small and near-MTU.
    pub lost: [u64; 2],
    /// Small probes (judged, lost) over the horizon.
    pub horizon: (u32, u32),
    /// The second (since the prober's epoch) of its last small probe lost in the horizon.
    pub last_lost: Option<u64>,
    /// Small probes (the two spines crossed, judged, lost, the second of the last loss)
    /// over the horizon, per pair of spines, where the path leads to another ToR and its
    /// routes are known.
    pub crossings: Vec<([u8; 2], u32, u32, Option<u64>)>,
}

/// One path in a host's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathReport {
    /// This host's rail.
    pub rail: u8,
    /// The device probed: host …
    pub host: u16,
    /// … and rail.
    pub dst_rail: u8,
    /// The state.
    pub state: PathState,
    /// Small probes (judged, lost) in the window.
    pub small: (u32, u32),
    /// Near-MTU probes (judged, lost) in the window.
    pub large: (u32, u32),
    /// A failing path whose losses fall on some UDP source ports only (an ECMP path): those
    /// ports (empty when the losses are not split by port).
    pub lost_ports: Vec<u16>,
    /// … and the ports that carried.
    pub ok_ports: Vec<u16>,
    /// A `large-lost` path split by port: the ports whose near-MTU probes were lost …
    pub lost_large_ports: Vec<u16>,
    /// … and those whose near-MTU probes were answered.
    pub ok_large_ports: Vec<u16>,
    /// Median network round trip, µs (0: none answered).
    pub rtt_p50_us: u32,
}

/// How a host's monitoring loop ran over the last window: late wake-ups mean its CPU is
/// starved, and what its probes (and its answers to others') show is not the network's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LoopHealth {
    /// The membership's local health multiplier (0: its timers ran on time).
    pub local_health: u32,
    /// The latest the loop woke, ms.
    pub worst_lag_ms: u32,
    /// The share of its wake-ups that came [`LATE_MS`] or more late, %.
    pub late_pct: u8,
}

/// The first point of the grid `last + k × period` (k ≥ 1) after `now`.
pub fn next_on_grid(last: Instant, period: Duration, now: Instant) -> Instant {
    let next = last + period;
    if next > now || period.is_zero() {
        return next;
    }
    let behind = now.duration_since(next).as_nanos() / period.as_nanos();
    let k = u32::try_from(behind + 1).unwrap_or(u32::MAX);
    next.checked_add(period.saturating_mul(k)).unwrap_or(now + period)
}

/// A wake-up this late (ms) is a late one.
pub const LATE_MS: u32 = 25;
/// A loop with this share (%) of late wake-ups is starved. An idle host's loop is late
/// 0 % of the time on a loaded 2-core machine; one sharing its cgroup's 20 % of a core with
/// two busy loops, 15-27 % (BENCHMARKS.md).
pub const STARVED_LATE_PCT: u8 = 10;

impl LoopHealth {
    /// Whether the loop was starved: its membership timers ran late, or a tenth of its
    /// wake-ups did (one late wake-up on a busy host is not starvation).
    pub fn starved(&self) -> bool {
        self.local_health >= 2 || self.late_pct >= STARVED_LATE_PCT
    }
}

/// What a host broadcasts: its paths and its own health.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Report {
    /// The host.
    pub host: u16,
    /// How its own loop ran.
    pub host_loop: LoopHealth,
    /// Its paths.
    pub paths: Vec<PathReport>,
    /// Its rails that lost a small probe over the horizon, with their counts: what the
    /// pod's per-component loss test reads (empty in a pod that loses nothing, so that a
    /// calm pod's reports stay the same bytes).
    pub horizon: Vec<RailLoss>,
    /// Where [`Report::horizon`] is not empty and the routes are known: its small probes to
    /// other ToRs over the horizon by the spines they crossed, what the pod's per-link loss
    /// test reads ([`crate::uplink`]).
    pub crossings: Vec<Crossings>,
}

/// A rail's small probes to the devices under one other ToR over the horizon whose round
/// trip crossed the same two spines (out through one, back through the other; the same one
/// twice where both ways hash onto it): every one of them crossed the rail's ToR's links to
/// those spines and the other ToR's.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Crossings {
    /// This host's rail.
    pub rail: u8,
    /// The other ToR: its index in [`topology::Pod::tors`].
    pub tor: u16,
    /// The two spines, the lower first.
    pub spines: [u8; 2],
    /// Small probes judged …
    pub judged: u32,
    /// … and lost.
    pub lost: u32,
    /// Whole seconds since the last of them lost (at most the horizon's) …
    pub quiet: u16,
    /// … and how many crossed since (in the seconds after its second).
    pub since: u32,
}

/// A report lists at most this many [`Crossings`] (those that lost most, then the most
/// judged): 3 other ToRs × 10 pairs of 4 spines × 2 rails fit.
pub const CROSSINGS_LISTED: usize = 64;

/// One rail's small probes over the horizon ([`ProbeConfig::horizon`]), where it lost any.
/// Counts of probes judged are rounded to [`HORIZON_STEP`] (they grow every round; a
/// report changes when a loss does, or every few seconds).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RailLoss {
    /// This host's rail.
    pub rail: u8,
    /// Small probes judged (answered or lost) from it, to every device it probes.
    pub judged: u32,
    /// … and lost.
    pub lost: u32,
    /// The paths that lost any, most lost first (at most [`HORIZON_PATHS`]): (host, rail,
    /// judged, lost).
    pub paths: Vec<(u16, u8, u32, u32)>,
    /// Whole seconds since its last small probe lost (at most the horizon's) …
    pub quiet: u16,
    /// … and the small probes judged since (in the seconds after its second; rounded down
    /// to [`HORIZON_STEP`]): what tells a component that healed from one still losing
    /// ([`crate::cable::healed`]).
    pub since: u32,
}

/// [`RailLoss`] counts of probes judged are rounded to this many.
pub const HORIZON_STEP: u32 = 16;
/// A [`RailLoss`] lists at most this many paths.
pub const HORIZON_PATHS: usize = 8;

/// Whole seconds from `last` (a loss's second) to `now`, at most `horizon` (none lost: the
/// horizon).
fn quiet_since(last: Option<u64>, now: u64, horizon: u64) -> u16 {
    let q = last.map_or(horizon, |l| now.saturating_sub(l).min(horizon));
    u16::try_from(q).unwrap_or(u16::MAX)
}

/// The `ok` paths from one rail of a host to one rail of others: a bitmap of the hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct OkSet {
    rail: u8,
    dst_rail: u8,
    first: u16,
    bits: Vec<u8>,
}

/// A report as broadcast: `ok` paths as bitmaps, the others in full (as many as fit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Wire {
    host: u16,
    host_loop: LoopHealth,
    ok: Vec<OkSet>,
    bad: Vec<PathReport>,
    /// Failing paths left out to fit a membership datagram.
    truncated: u32,
    /// The report's [`Report::horizon`].
    horizon: Vec<RailLoss>,
    /// The report's [`Report::crossings`].
    crossings: Vec<Crossings>,
}

/// The most bytes a report takes on the wire (it rides in a membership datagram).
pub const REPORT_BYTES: usize = 900;
/// UDP source ports listed per path and kind, at most.
const PORTS_LISTED: usize = 8;

impl Report {
    /// The report's bytes: `ok` paths as a bitmap of hosts per rail pair, failing paths in
    /// full (dead first, then lossy, then large-lost; each with at most 8 ports per list) as
    /// far as [`REPORT_BYTES`] allows — the rest counted, not sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut ok: BTreeMap<(u8, u8), Vec<u16>> = BTreeMap::new();
        let mut bad: Vec<PathReport> = Vec::new();
        for p in &self.paths {
            if p.state == PathState::Ok {
                ok.entry((p.rail, p.dst_rail)).or_default().push(p.host);
            } else {
                let cap = |v: &Vec<u16>| v.iter().copied().take(PORTS_LISTED).collect();
                bad.push(PathReport {
                    lost_ports: cap(&p.lost_ports),
                    ok_ports: cap(&p.ok_ports),
                    lost_large_ports: cap(&p.lost_large_ports),
                    ok_large_ports: cap(&p.ok_large_ports),
                    ..p.clone()
                });
            }
        }
        bad.sort_by_key(|p| std::cmp::Reverse(p.state));
        let ok: Vec<OkSet> = ok
            .into_iter()
            .map(|((rail, dst_rail), hosts)| {
                let first = hosts.iter().copied().min().unwrap_or(0);
                let last = hosts.iter().copied().max().unwrap_or(0);
                let mut bits = vec![0u8; usize::from(last - first) / 8 + 1];
                for h in hosts {
                    let i = usize::from(h - first);
                    bits[i / 8] |= 1 << (i % 8);
                }
                OkSet { rail, dst_rail, first, bits }
            })
            .collect();
        let mut w = Wire {
            host: self.host,
            host_loop: self.host_loop,
            ok,
            bad,
            truncated: 0,
            horizon: self.horizon.clone(),
            crossings: self.crossings.clone(),
        };
        loop {
            let b = postcard::to_allocvec(&w).unwrap_or_default();
            if b.len() <= REPORT_BYTES || w.bad.is_empty() {
                return b;
            }
            w.bad.pop();
            w.truncated += 1;
        }
    }

    /// A report from its bytes.
    pub fn decode(b: &[u8]) -> Option<Report> {
        let w: Wire = postcard::from_bytes(b).ok()?;
        let mut paths = w.bad;
        for set in w.ok {
            for (i, byte) in set.bits.iter().enumerate() {
                for k in 0..8 {
                    if byte & (1 << k) != 0 {
                        paths.push(PathReport {
                            rail: set.rail,
                            host: set.first + (i * 8 + k) as u16,
                            dst_rail: set.dst_rail,
                            state: PathState::Ok,
                            small: (0, 0),
                            large: (0, 0),
                            lost_ports: vec![],
                            ok_ports: vec![],
                            lost_large_ports: vec![],
                            ok_large_ports: vec![],
                            rtt_p50_us: 0,
                        });
                    }
                }
            }
        }
        Some(Report {
            host: w.host,
            host_loop: w.host_loop,
            paths,
            horizon: w.horizon,
            crossings: w.crossings,
        })
    }
}

/// A rail's own address and probe QP: where a probe's reply goes.
#[derive(Debug, Clone, Copy)]
struct ReplyTo {
    addr: IpAddr,
    qpn: u32,
}

#[derive(Clone, Copy)]
struct Pending {
    rail: usize,
    dst: Dev,
    port: u16,
    large: bool,
    sent: Instant,
    /// One of the round's extra probes ([`ProbeConfig::min_small`]): counted in the
    /// horizon only.
    horizon_only: bool,
}

/// This host's prober.
pub struct Prober {
    me: usize,
    cfg: ProbeConfig,
    epoch: Instant,
    seq: u64,
    /// The key of the probes' cookies (random per process).
    cookies: std::hash::RandomState,
    round: u64,
    next_round: Instant,
    pending: HashMap<u64, Pending>,
    paths: BTreeMap<(usize, Dev), PathStats>,
    /// Per rail: its ToR-mesh peers and, per other ToR of its rail, that ToR's devices.
    targets: Vec<(Vec<Dev>, Vec<Vec<Dev>>)>,
    /// Hosts not probed (down).
    skip: Vec<usize>,
    /// Hosts this host has traffic for: their devices are probed every round.
    hot: Vec<usize>,
    /// Something is wrong somewhere: every other ToR in each round.
    alert: bool,
    /// The round each device was last sent a near-MTU probe from each rail: the round's
    /// near-MTU probe goes to the one of its targets that waited longest (a turn through
    /// the round's targets fell into step with the other ToRs' turn and left a device out).
    large_last: HashMap<(usize, Dev), u64>,
    /// The next port of each path's rotation (small, near-MTU; the extra probes of
    /// [`ProbeConfig::min_small`] turn through a rotation of their own, so that the window's
    /// probes still go over every port in turn).
    cursor: HashMap<(usize, Dev, bool), usize>,
    /// The next port of each path's rotation of extra probes.
    extra_cursor: HashMap<(usize, Dev), usize>,
    /// Probes lost since [`Prober::take_lost`].
    lost: Vec<Lost>,
    /// Probes lost, to send again on their port next round: (rail, device, port, large).
    retry: Vec<(usize, Dev, u16, bool)>,
    /// The second (since the epoch) the horizon's buckets were last pruned.
    pruned_at: u64,
    /// The two spines (the lower first) each probe to another ToR crosses, by (rail, device
    /// probed, UDP source port), where the routes are known ([`Prober::set_routes`]).
    spines: HashMap<(usize, Dev, u16), [u8; 2]>,
    /// Each device's ToR: its index in [`topology::Pod::tors`].
    tor_of: HashMap<Dev, u16>,
    /// Probes timed out within [`LATE_FOR`]: an answer that still comes was queued behind
    /// traffic (congestion), not lost (see [`Prober::on_reply`]).
    expired: HashMap<u64, Pending>,
}

/// How long a probe that timed out may still be answered: its loss is then taken back.
pub const LATE_FOR: Duration = Duration::from_secs(5);

/// A probe that timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// The rail probed from.
    pub rail: usize,
    /// The device probed.
    pub dst: Dev,
    /// The UDP source port.
    pub port: u16,
    /// A near-MTU probe.
    pub large: bool,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober").field("me", &self.me).field("round", &self.round).finish()
    }
}

/// The device address a pod rail names (`soft:10.1.0.1`, `soft:[fd00::1]`,
/// `soft:10.1.0.1:4791`), if it names one.
pub fn rail_addr(pod: &Pod, d: Dev) -> Option<IpAddr> {
    pod.rail(d).soft_ip()
}

impl Prober {
    /// The prober of host `me` in `pod`.
    pub fn new(pod: &Pod, me: usize, cfg: ProbeConfig, now: Instant) -> Prober {
        let rails = pod.hosts.get(me).map_or(0, |h| h.rails.len());
        let tors = pod.tors();
        let tor_of = tors
            .iter()
            .enumerate()
            .flat_map(|(i, (_, ds))| ds.iter().map(move |d| (*d, i as u16)))
            .collect();
        let targets = (0..rails)
            .map(|r| {
                let mine = Dev { host: me, rail: r };
                let tor = &pod.rail(mine).tor;
                let mesh: Vec<Dev> = pod
                    .devices()
                    .into_iter()
                    .filter(|d| d.host != me && &pod.rail(*d).tor == tor)
                    .collect();
                // Other ToRs with devices of this rail: those devices (rail-aligned, as a
                // pod's collectives run; a ToR of other rails only is not this rail's).
                let others: Vec<Vec<Dev>> = tors
                    .iter()
                    .filter(|(t, _)| t != tor)
                    .map(|(_, ds)| {
                        ds.iter().copied().filter(|d| d.rail == r && d.host != me).collect()
                    })
                    .filter(|v: &Vec<Dev>| !v.is_empty())
                    .collect();
                (mesh, others)
            })
            .collect();
        Prober {
            me,
            cfg,
            epoch: now,
            seq: 0,
            cookies: std::hash::RandomState::new(),
            round: 0,
            next_round: now,
            pending: HashMap::new(),
            paths: BTreeMap::new(),
            targets,
            skip: Vec::new(),
            hot: Vec::new(),
            alert: false,
            large_last: HashMap::new(),
            cursor: HashMap::new(),
            extra_cursor: HashMap::new(),
            lost: Vec::new(),
            retry: Vec::new(),
            pruned_at: 0,
            spines: HashMap::new(),
            tor_of,
            expired: HashMap::new(),
        }
    }

    /// The spines each pair's probes cross from each port (the plan's route command's
    /// answers): this host's small probes to other ToRs are then counted by the spines they
    /// crossed ([`Report::crossings`]).
    pub fn set_routes(&mut self, routes: &topology::route::Routes) {
        self.spines = routes
            .iter()
            .filter_map(|(((a, b), port), s)| {
                let (mine, other) = match (a.host == self.me, b.host == self.me) {
                    (true, false) => (*a, *b),
                    (false, true) => (*b, *a),
                    _ => return None,
                };
                let (lo, hi) = (s[0].min(s[1]), s[0].max(s[1]));
                Some(((mine.rail, other, *port), [u8::try_from(lo).ok()?, u8::try_from(hi).ok()?]))
            })
            .collect();
    }

    /// The configuration.
    pub fn config(&self) -> &ProbeConfig {
        &self.cfg
    }

    /// ns on this prober's clock.
    pub fn stamp(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// Stops probing `hosts` (declared down) and forgets their paths; probes the others.
    pub fn set_down(&mut self, hosts: &[usize]) {
        self.skip = hosts.to_vec();
        self.paths.retain(|(_, d), _| !hosts.contains(&d.host));
        self.pending.retain(|_, p| !hosts.contains(&p.dst.host));
    }

    /// When the first round was due: rounds fall on `epoch + k × period`.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Whether something is wrong in the pod (a loss on one of this host's paths, or a
    /// failing path in another host's report): while it is, each rail probes up to
    /// [`ProbeConfig::max_inter_tor`] other ToRs per round, else
    /// [`ProbeConfig::calm_inter_tor`].
    pub fn set_alert(&mut self, alert: bool) {
        self.alert = alert;
    }

    /// Whether any path of this host's lost a probe within the window.
    pub fn any_loss(&self) -> bool {
        self.paths.values().any(|st| st.recent.iter().any(|o| o.rtt.is_none()))
    }

    /// Probes the devices of `hosts` every round (the peers this host has traffic for: a
    /// route moves off a failed path as soon as this host's own probes see it), besides the
    /// other ToRs' devices in turn.
    pub fn set_hot(&mut self, hosts: &[usize]) {
        self.hot = hosts.to_vec();
    }

    /// This round's targets of rail `r`.
    fn round_targets(&self, r: usize) -> Vec<Dev> {
        let (mesh, others) = &self.targets[r];
        let k = self.round as usize;
        let mut out: Vec<Dev> = mesh.clone();
        let per = if self.alert { self.cfg.max_inter_tor } else { self.cfg.calm_inter_tor };
        let take = per.max(1).min(others.len());
        // This round's ToRs (all of them in a small pod), and a device of each in turn.
        let first = if others.is_empty() { 0 } else { (k * take) % others.len() };
        let turn = if others.is_empty() { 0 } else { (k * take) / others.len() };
        out.extend((0..take).map(|i| {
            let ds = &others[(first + i) % others.len()];
            ds[(turn + (first + i) / others.len()) % ds.len()]
        }));
        for d in others.iter().flatten() {
            if self.hot.contains(&d.host) && !out.contains(d) {
                out.push(*d);
            }
        }
        out.retain(|d| !self.skip.contains(&d.host));
        out
    }

    /// When [`Prober::poll`] has work next.
    pub fn next_deadline(&self) -> Instant {
        let expiry = self.pending.values().map(|p| p.sent + self.cfg.timeout).min();
        expiry.map_or(self.next_round, |e| e.min(self.next_round))
    }

    /// Expires probes unanswered past the timeout and, when a round is due, returns its
    /// probes. Take every reply that arrived before calling this.
    pub fn poll(&mut self, now: Instant, my_addrs: &[IpAddr], my_qpns: &[u32]) -> Vec<Outgoing> {
        let timeout = self.cfg.timeout;
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.sent) >= timeout)
            .map(|(s, _)| *s)
            .collect();
        for s in expired {
            if let Some(p) = self.pending.remove(&s) {
                self.record(p, None, now);
                self.expired.insert(s, p);
            }
        }
        self.expired.retain(|_, p| now.saturating_duration_since(p.sent) < LATE_FOR);
        let mut out = Vec::new();
        if now < self.next_round {
            return out;
        }
        // Rounds stay on their grid (every host's is the same, see `PodAgent::start`): a
        // round late by more than a period is skipped, not made up in a burst.
        self.next_round = next_on_grid(self.next_round, self.cfg.period, now);
        let sec = now.saturating_duration_since(self.epoch).as_secs();
        if sec != self.pruned_at {
            self.pruned_at = sec;
            let oldest = sec.saturating_sub(self.cfg.horizon.as_secs());
            for st in self.paths.values_mut() {
                while st.buckets.front().is_some_and(|b| b.0 < oldest) {
                    st.buckets.pop_front();
                }
                while st.crossings.front().is_some_and(|c| c.0 < oldest) {
                    st.crossings.pop_front();
                }
                // A dead path's losses are its verdict's: once healed, the horizon starts
                // afresh rather than naming its cable for the 30 s its losses would stay.
                if st.last_small_lost() {
                    st.clear_horizon();
                }
            }
        }
        for (r, d, port, large) in std::mem::take(&mut self.retry) {
            let (Some(&addr), Some(&qpn)) = (my_addrs.get(r), my_qpns.get(r)) else { continue };
            if !self.skip.contains(&d.host) {
                out.push(self.probe_on(now, r, d, port, large, ReplyTo { addr, qpn }));
            }
        }
        for r in 0..self.targets.len() {
            let (Some(&addr), Some(&qpn)) = (my_addrs.get(r), my_qpns.get(r)) else { continue };
            let ts = self.round_targets(r);
            for d in &ts {
                out.push(self.probe(now, r, *d, false, ReplyTo { addr, qpn }));
            }
            // The probe budget: the round's targets again, for the horizon only (none when
            // the round has none: every peer down).
            let budget = if ts.is_empty() { 0 } else { self.cfg.min_small.max(ts.len()) };
            for i in ts.len()..budget {
                out.push(self.extra_probe(now, r, ts[i % ts.len()], ReplyTo { addr, qpn }));
            }
            // Near-MTU probes: in a healthy pod each rail's every fourth round (two rails in
            // turn: one every other round), in every round while something is wrong.
            let large_round = self.alert || (self.round as usize + 2 * r).is_multiple_of(4);
            if self.cfg.large > HEADER && !ts.is_empty() && large_round {
                let last = |d: &Dev| self.large_last.get(&(r, *d)).map_or(-1, |k| *k as i64);
                let d = *ts.iter().min_by_key(|d| last(d)).unwrap_or(&ts[0]);
                self.large_last.insert((r, d), self.round);
                out.push(self.probe(now, r, d, true, ReplyTo { addr, qpn }));
            }
        }
        self.round += 1;
        out
    }

    /// A probe of `dst` from `rail`, from the next port of the path's rotation.
    fn probe(&mut self, now: Instant, rail: usize, dst: Dev, large: bool, me: ReplyTo) -> Outgoing {
        let c = self.cursor.entry((rail, dst, large)).or_insert(0);
        let port = self.cfg.port(*c);
        *c += 1;
        self.probe_on(now, rail, dst, port, large, me)
    }

    /// One of the round's extra small probes of `dst` ([`ProbeConfig::min_small`]), from the
    /// next port of its own rotation: counted in the horizon only.
    fn extra_probe(&mut self, now: Instant, rail: usize, dst: Dev, me: ReplyTo) -> Outgoing {
        let c = self.extra_cursor.entry((rail, dst)).or_insert(0);
        // Half a rotation from the window's first port.
        let port = self.cfg.port(*c + self.cfg.ports / 2);
        *c += 1;
        let o = self.probe_on(now, rail, dst, port, false, me);
        if let Some(p) = self.pending.get_mut(&o.packet.seq) {
            p.horizon_only = true;
        }
        o
    }

    /// A probe of `dst` from `rail` on UDP source port `port`.
    fn probe_on(
        &mut self,
        now: Instant,
        rail: usize,
        dst: Dev,
        port: u16,
        large: bool,
        me: ReplyTo,
    ) -> Outgoing {
        self.seq += 1;
        let seq = self.seq;
        self.pending
            .insert(seq, Pending { rail, dst, port, large, sent: now, horizon_only: false });
        let st = self.paths.entry((rail, dst)).or_default();
        st.sent[usize::from(large)] += 1;
        Outgoing {
            rail,
            dst,
            port,
            len: if large { self.cfg.large } else { self.cfg.small.max(HEADER) },
            packet: Packet {
                reply: false,
                large,
                host: self.me as u16,
                src_rail: rail as u8,
                dst_rail: dst.rail as u8,
                port,
                seq,
                t1: self.stamp(now),
                t2: 0,
                t3: 0,
                qpn: me.qpn,
                addr: me.addr,
                cookie: self.cookie(seq),
            },
        }
    }

    /// Probe `seq`'s cookie.
    fn cookie(&self, seq: u64) -> u64 {
        use std::hash::BuildHasher;
        self.cookies.hash_one(seq)
    }

    /// A reply arrived at `now`; the answered probe, if it was one of ours still waiting.
    /// A reply to a probe that timed out less than [`LATE_FOR`] ago takes its loss back: it
    /// was queued behind traffic, not lost (congestion is not a fault) — the path's window
    /// and the horizon count it answered.
    pub fn on_reply(&mut self, p: &Packet, now: Instant) -> Option<Answered> {
        if !p.reply || usize::from(p.host) != self.me || p.cookie != self.cookie(p.seq) {
            return None;
        }
        if let Some(late) = self.expired.remove(&p.seq) {
            self.answered_late(&late, now);
            return None;
        }
        let pend = self.pending.remove(&p.seq)?;
        let t4 = self.stamp(now);
        let total = t4.saturating_sub(p.t1);
        let responder = p.t3.saturating_sub(p.t2);
        let rtt = Duration::from_nanos(total.saturating_sub(responder));
        let a = Answered {
            rail: pend.rail,
            dst: pend.dst,
            port: pend.port,
            large: pend.large,
            rtt,
            responder: Duration::from_nanos(responder),
        };
        self.record(pend, Some(rtt), now);
        Some(a)
    }

    /// A probe [`Prober::poll`] returned that could not be sent (no QPN known for the peer
    /// yet, no send buffer free): forgotten, not counted as lost.
    pub fn unsent(&mut self, seq: u64) {
        if let Some(p) = self.pending.remove(&seq)
            && let Some(st) = self.paths.get_mut(&(p.rail, p.dst))
        {
            st.sent[usize::from(p.large)] -= 1;
        }
    }

    /// Forgets every path's horizon: this host's loop was starved, and what its probes
    /// lost meanwhile is its CPU's, not a cable's.
    pub fn forget_horizon(&mut self) {
        for st in self.paths.values_mut() {
            st.clear_horizon();
        }
    }

    /// Probe `p`, counted lost at its timeout, was answered at `now`.
    fn answered_late(&mut self, p: &Pending, now: Instant) {
        let sec = p.sent.saturating_duration_since(self.epoch).as_secs();
        let spines = self.spines.get(&(p.rail, p.dst, p.port)).copied();
        let Some(st) = self.paths.get_mut(&(p.rail, p.dst)) else { return };
        st.late += 1;
        let rtt = now.saturating_duration_since(p.sent);
        if let Some(o) = st
            .recent
            .iter_mut()
            .find(|o| o.at == p.sent && o.port == p.port && o.large == p.large && o.rtt.is_none())
        {
            o.rtt = Some(rtt);
            st.recent_small_lost -= usize::from(!p.large);
        }
        if p.large {
            return;
        }
        if let Some(b) = st.buckets.iter_mut().find(|b| b.0 == sec && b.2 > 0) {
            b.2 -= 1;
        }
        if let Some(c) = st.crossings.iter_mut().find(|c| c.0 == sec && c.2 && Some(c.1) == spines)
        {
            c.2 = false;
        }
    }

    /// Takes the probes that timed out since the last call.
    pub fn take_lost(&mut self) -> Vec<Lost> {
        std::mem::take(&mut self.lost)
    }

    fn record(&mut self, p: Pending, rtt: Option<Duration>, now: Instant) {
        let st = self.paths.entry((p.rail, p.dst)).or_default();
        if rtt.is_none() {
            st.lost[usize::from(p.large)] += 1;
            self.lost.push(Lost { rail: p.rail, dst: p.dst, port: p.port, large: p.large });
        }
        if !p.large && rtt.is_some() {
            // The first answer after a dead stretch: the outage's losses, before and around
            // its verdict, are the verdict's, not a cable's that loses at random.
            if st.last_small_lost() {
                st.clear_horizon();
            }
        }
        if !p.large {
            let sec = p.sent.saturating_duration_since(self.epoch).as_secs();
            match st.buckets.back_mut() {
                Some(b) if b.0 == sec => {
                    b.1 += 1;
                    b.2 += u32::from(rtt.is_none());
                }
                _ => st.buckets.push_back((sec, 1, u32::from(rtt.is_none()))),
            }
            if let Some(spines) = self.spines.get(&(p.rail, p.dst, p.port)) {
                st.crossings.push_back((sec, *spines, rtt.is_none()));
            }
        }
        if p.horizon_only {
            return;
        }
        let horizon = now.checked_sub(self.cfg.window).unwrap_or(self.epoch);
        st.recent.push_back(Outcome { at: p.sent, port: p.port, large: p.large, rtt });
        st.recent_small_lost += usize::from(!p.large && rtt.is_none());
        // Only a path with small losses in its window can split (most have none).
        if !p.large && st.recent_small_lost > 0 {
            let sp = st.split(false);
            if sp.is_split() && sp.firm {
                st.sticky = Some(sp);
            }
        }
        let key = (p.rail, p.dst, p.port, p.large);
        // Sent again on the same port next round: a loss that repeats is the port's path. One
        // probe in flight or waiting per port: every lost probe sent again, and its retry
        // again while lost, grew by a chain each round on a port that stays dead (a
        // near-MTU probe over a smaller MTU: 65 of 4 KB a second on a path at 15 s, and the
        // fabric's small probes lost behind them).
        let again = rtt.is_none()
            && !self.retry.contains(&key)
            && !self
                .pending
                .values()
                .any(|q| (q.rail, q.dst, q.port, q.large) == key && !q.horizon_only);
        if again {
            self.retry.push(key);
        }
        while let Some(o) = st.recent.front().filter(|o| o.at < horizon) {
            st.recent_small_lost -= usize::from(!o.large && o.rtt.is_none());
            st.recent.pop_front();
        }
    }

    /// The paths probed: ((rail, device), stats).
    pub fn paths(&self) -> impl Iterator<Item = (&(usize, Dev), &PathStats)> {
        self.paths.iter()
    }

    /// Every path judged once, with its counters: what a report, the routes and a status
    /// are all made from (judging walks each path's window; do it once per report).
    pub fn judge_all(&self) -> Vec<JudgedPath> {
        self.paths
            .iter()
            .map(|(k, st)| JudgedPath {
                key: *k,
                judged: st.judge(),
                sent: st.sent,
                lost: st.lost,
                horizon: st.buckets.iter().fold((0, 0), |(n, k), b| (n + b.1, k + b.2)),
                last_lost: st.last_lost(),
                crossings: st.crossings(),
            })
            .collect()
    }

    /// What this host broadcasts: its report with the figures of `ok` paths left out, so
    /// that a pod where nothing changes broadcasts the same bytes (and need not, but every
    /// few seconds).
    pub fn broadcast(&self, host_loop: LoopHealth) -> Report {
        self.broadcast_of(&self.judge_all(), host_loop)
    }

    /// [`Prober::broadcast`] from paths already judged.
    pub fn broadcast_of(&self, judged: &[JudgedPath], host_loop: LoopHealth) -> Report {
        let mut r = self.report_of(judged, host_loop);
        for p in r.paths.iter_mut().filter(|p| p.state == PathState::Ok) {
            p.small = (0, 0);
            p.large = (0, 0);
            p.rtt_p50_us = 0;
        }
        // The loop's figures only matter once it is starved.
        if !r.host_loop.starved() {
            r.host_loop = LoopHealth::default();
        }
        r
    }

    /// This host's report of its paths (ports listed for paths that are not `ok`).
    pub fn report(&self, host_loop: LoopHealth) -> Report {
        self.report_of(&self.judge_all(), host_loop)
    }

    /// [`Prober::report`] from paths already judged.
    pub fn report_of(&self, judged: &[JudgedPath], host_loop: LoopHealth) -> Report {
        let paths = judged
            .iter()
            .map(|JudgedPath { key: (rail, d), judged: j, .. }| {
                let cap = |v: &[u16]| v.iter().copied().take(16).collect::<Vec<u16>>();
                let (lost, ok) = match j.state {
                    PathState::Dead => (cap(&j.ports.lost), vec![]),
                    PathState::Lossy if j.ports.is_split() => {
                        (cap(&j.ports.lost), cap(&j.ports.carried))
                    }
                    _ => (vec![], vec![]),
                };
                let (lost_large, ok_large) = match j.state {
                    PathState::LargeLost if j.large_ports.is_split() => {
                        (cap(&j.large_ports.lost), cap(&j.large_ports.carried))
                    }
                    _ => (vec![], vec![]),
                };
                PathReport {
                    rail: *rail as u8,
                    host: d.host as u16,
                    dst_rail: d.rail as u8,
                    state: j.state,
                    small: j.small,
                    large: j.large,
                    lost_ports: lost,
                    ok_ports: ok,
                    lost_large_ports: lost_large,
                    ok_large_ports: ok_large,
                    rtt_p50_us: j.rtt_p50.map_or(0, |d| d.as_micros().min(u32::MAX as u128) as u32),
                }
            })
            .collect();
        let horizon = self.horizon_of(judged);
        let crossings = if horizon.is_empty() { vec![] } else { self.crossings_of(judged) };
        Report { host: self.me as u16, host_loop, paths, horizon, crossings }
    }

    /// Each rail's [`RailLoss`] from its paths judged, for the rails that lost any.
    fn horizon_of(&self, judged: &[JudgedPath]) -> Vec<RailLoss> {
        let round = |n: u32| (n + HORIZON_STEP / 2) / HORIZON_STEP * HORIZON_STEP;
        let mut rails: BTreeMap<usize, (RailLoss, Option<u64>)> = BTreeMap::new();
        for jp in judged {
            let (rail, d) = jp.key;
            let (r, last) = rails
                .entry(rail)
                .or_insert_with(|| (RailLoss { rail: rail as u8, ..RailLoss::default() }, None));
            r.judged += jp.horizon.0;
            r.lost += jp.horizon.1;
            *last = (*last).max(jp.last_lost);
            if jp.horizon.1 > 0 {
                r.paths.push((d.host as u16, d.rail as u8, round(jp.horizon.0), jp.horizon.1));
            }
        }
        let horizon = self.cfg.horizon.as_secs();
        rails
            .into_values()
            .filter(|(r, _)| r.lost > 0)
            .map(|(mut r, last)| {
                r.quiet = quiet_since(last, self.pruned_at, horizon);
                let rail = usize::from(r.rail);
                let since: u32 = self
                    .paths
                    .iter()
                    .filter(|(k, _)| k.0 == rail)
                    .map(|(_, st)| st.judged_after(last))
                    .sum();
                r.since = since / HORIZON_STEP * HORIZON_STEP;
                r.judged = round(r.judged);
                r.paths.sort_by_key(|p| (std::cmp::Reverse(p.3), p.0, p.1));
                r.paths.truncate(HORIZON_PATHS);
                r
            })
            .collect()
    }

    /// [`Report::crossings`] from paths already judged: per rail, other ToR and pair of
    /// spines.
    fn crossings_of(&self, judged: &[JudgedPath]) -> Vec<Crossings> {
        // (judged, lost, the second of the last loss) per (rail, other ToR, spines).
        type Tally = (u32, u32, Option<u64>);
        let mut by: BTreeMap<(u8, u16, [u8; 2]), Tally> = BTreeMap::new();
        for jp in judged {
            let (rail, d) = jp.key;
            let Some(&tor) = self.tor_of.get(&d) else { continue };
            for &(spines, n, k, at) in &jp.crossings {
                let e = by.entry((rail as u8, tor, spines)).or_default();
                e.0 += n;
                e.1 += k;
                e.2 = e.2.max(at);
            }
        }
        // The probes of each class since its last loss: one pass over the paths' crossings.
        let mut since: BTreeMap<(u8, u16, [u8; 2]), u32> = BTreeMap::new();
        for ((rail, d), st) in &self.paths {
            let Some(&tor) = self.tor_of.get(d) else { continue };
            for &(sec, spines, _) in &st.crossings {
                let key = (*rail as u8, tor, spines);
                if by.get(&key).is_some_and(|t| t.2.is_none_or(|last| sec > last)) {
                    *since.entry(key).or_default() += 1;
                }
            }
        }
        let horizon = self.cfg.horizon.as_secs();
        let mut out: Vec<Crossings> = by
            .into_iter()
            .map(|(key @ (rail, tor, spines), (judged, lost, at))| Crossings {
                rail,
                tor,
                spines,
                judged,
                lost,
                quiet: quiet_since(at, self.pruned_at, horizon),
                since: since.get(&key).copied().unwrap_or(0),
            })
            .collect();
        out.sort_by_key(|c| (std::cmp::Reverse(c.lost), std::cmp::Reverse(c.judged)));
        out.truncate(CROSSINGS_LISTED);
        out.sort_by_key(|c| (c.rail, c.tor, c.spines));
        out
    }

    /// How many probes this host sends per round, small and near-MTU (in a healthy pod a
    /// rail's near-MTU probe goes every fourth round, the rails in turn: at most this many).
    pub fn per_round(&self) -> (usize, usize) {
        let small: usize = (0..self.targets.len())
            .map(|r| match self.round_targets(r).len() {
                0 => 0,
                n => n.max(self.cfg.min_small),
            })
            .sum();
        let rails = self.targets.len();
        let large = match (self.cfg.large > HEADER, self.alert) {
            (false, _) => 0,
            (true, true) => rails,
            (true, false) => rails.div_ceil(4),
        };
        (small, large)
    }
}

/// An address for tests and for devices that are not soft: unspecified.
pub const NO_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pod as pod;

    /// Rounds stay on their grid: a late round is followed by the next point of it, and one
    /// late by periods skips them (every host's grid is the same: made up off it, a host's
    /// rounds would drift apart from the pod's).
    #[test]
    fn rounds_stay_on_their_grid() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let p = ms(100);
        assert_eq!(next_on_grid(t0, p, t0 + ms(50)), t0 + ms(100));
        assert_eq!(next_on_grid(t0, p, t0 + ms(130)), t0 + ms(200));
        assert_eq!(next_on_grid(t0, p, t0 + ms(250)), t0 + ms(300));
        assert_eq!(next_on_grid(t0, p, t0 + ms(300)), t0 + ms(400));
    }

    /// Every form of a soft device name a plan may give — IPv4, IPv6 in brackets, with a UDP
    /// port — is a rail address the agent probes and announces (each was skipped silently,
    /// its rail never probed, when the name was cut at `soft:` by hand).
    #[test]
    fn every_soft_device_form_names_the_rail_address() {
        let mut p = pod(4, 2, 2);
        let forms = |i: usize, r: usize| match (i + r) % 4 {
            0 => (format!("soft:10.{r}.{i}.1"), format!("10.{r}.{i}.1")),
            1 => (format!("soft:[fd00::{r}:{i}]"), format!("fd00::{r}:{i}")),
            2 => (format!("soft:10.{r}.{i}.1:4791"), format!("10.{r}.{i}.1")),
            _ => (format!("soft:[fd00::{r}:{i}]:4791"), format!("fd00::{r}:{i}")),
        };
        for (i, h) in p.hosts.iter_mut().enumerate() {
            for (r, rail) in h.rails.iter_mut().enumerate() {
                rail.device = forms(i, r).0;
            }
        }
        p.validate().expect("a valid pod");
        for d in p.devices() {
            let want: IpAddr = forms(d.host, d.rail).1.parse().unwrap();
            assert_eq!(rail_addr(&p, d), Some(want), "{}", p.rail(d).device);
        }
        // An RDMA device has no soft address (its GID is its port's).
        p.hosts[0].rails[0].device = "mlx5_0".into();
        assert_eq!(rail_addr(&p, Dev { host: 0, rail: 0 }), None);
    }

    #[test]
    fn a_packet_reads_back_as_written() {
        let p = Packet {
            reply: false,
            large: true,
            host: 513,
            src_rail: 1,
            dst_rail: 3,
            port: 0xf00d,
            seq: u64::MAX - 5,
            t1: 12345678901,
            t2: 0,
            t3: 7,
            qpn: 0x00ab_cdef,
            addr: "10.2.7.1".parse().unwrap(),
            cookie: 0x1234_5678_9abc_def0,
        };
        let mut b = vec![0u8; 100];
        p.write(&mut b).unwrap();
        assert_eq!(Packet::read(&b), Some(p));
        let a = p.answer(10, 25);
        a.write(&mut b).unwrap();
        let back = Packet::read(&b).unwrap();
        assert!(back.reply && back.t2 == 10 && back.t3 == 25 && back.seq == p.seq);
        b[0] ^= 1;
        assert_eq!(Packet::read(&b), None, "a wrong magic is not a probe");
        assert_eq!(Packet::read(&b[..HEADER - 1]), None);
        let v6 = Packet { addr: "fd00::7".parse().unwrap(), ..p };
        v6.write(&mut b).unwrap();
        assert_eq!(Packet::read(&b).unwrap().addr, v6.addr);
    }

    #[test]
    fn each_rail_probes_its_tor_mesh_and_the_other_tors_of_its_rail_in_turn_from_rotating_ports() {
        let pod = pod(8, 2, 2);
        let t0 = Instant::now();
        // One probe per peer a round (no budget: see the test of it below).
        let cfg = ProbeConfig { min_small: 0, ..Default::default() };
        let mut p = Prober::new(&pod, 2, cfg, t0);
        let addrs = ["10.1.2.1".parse().unwrap(), "10.2.2.1".parse().unwrap()];
        let mut seen: BTreeMap<Dev, std::collections::BTreeSet<u16>> = BTreeMap::new();
        for k in 0..128 {
            let out = p.poll(t0 + p.cfg.period * k, &addrs, &[11, 12]);
            // Per rail: 1 ToR-mesh peer + 1 of the 3 other ToRs in turn (a healthy pod),
            // small; near-MTU: a rail's every fourth round, the rails in turn.
            assert_eq!(out.iter().filter(|o| !o.packet.large).count(), 4, "round {k}");
            assert_eq!(out.iter().filter(|o| o.packet.large).count(), usize::from(k % 2 == 0));
            for o in &out {
                assert_eq!(o.dst.rail, o.rail, "rail-aligned");
                assert_ne!(o.dst.host, 2);
                assert_eq!(o.packet.addr, addrs[o.rail]);
                seen.entry(o.dst).or_default().insert(o.port);
                let a = o.packet.answer(5, 5);
                p.on_reply(&a, t0 + p.cfg.period * k + Duration::from_micros(30)).unwrap();
            }
        }
        // Every other device is probed, over every port of the rotation.
        assert_eq!(seen.len(), 14);
        for (d, ports) in &seen {
            assert_eq!(ports.len(), 16, "{d:?}: {ports:?}");
        }
        assert_eq!(p.per_round(), (4, 1));
        assert!(p.report(LoopHealth::default()).paths.iter().all(|r| r.state == PathState::Ok));
        assert!(!p.any_loss());
        // Something wrong somewhere: every other ToR in each round, until it clears.
        p.set_alert(true);
        let out = p.poll(t0 + p.cfg.period * 128, &addrs, &[11, 12]);
        assert_eq!(out.iter().filter(|o| !o.packet.large).count(), 8);
        assert_eq!(out.iter().filter(|o| o.packet.large).count(), 2);
        assert_eq!(p.per_round(), (8, 2));
        p.set_alert(false);
        assert_eq!(p.per_round(), (4, 1));
        // A probe unanswered is a loss in the window.
        p.poll(t0 + p.cfg.period * 134, &addrs, &[11, 12]);
        assert!(p.any_loss());
    }

    #[test]
    fn the_peers_a_host_has_traffic_for_are_probed_every_round() {
        let pod = pod(16, 2, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { large: 0, min_small: 0, ..Default::default() };
        let mut p = Prober::new(&pod, 0, cfg, t0);
        let addrs = ["10.1.0.1".parse().unwrap(), "10.2.0.1".parse().unwrap()];
        let hot = [5, 12];
        p.set_hot(&hot);
        for k in 0..20 {
            let out = p.poll(t0 + p.cfg.period * k, &addrs, &[11, 12]);
            for h in hot {
                for r in 0..2 {
                    let hit = out.iter().filter(|o| o.dst == Dev { host: h, rail: r }).count();
                    assert_eq!(hit, 1, "round {k}: h{h}.r{r} probed once");
                }
            }
            // Besides: the ToR-mesh peer and another ToR per rail (it may be a hot one's).
            assert!((2 * 3..=2 * 4).contains(&out.len()), "round {k}: {}", out.len());
            for o in &out {
                p.on_reply(&o.packet.answer(5, 5), t0 + p.cfg.period * k).unwrap();
            }
        }
        // Without traffic, a peer of another ToR is probed only in its turn.
        p.set_hot(&[]);
        let out = p.poll(t0 + p.cfg.period * 20, &addrs, &[11, 12]);
        assert_eq!(out.len(), 2 * 2);
    }

    #[test]
    fn round_trips_leave_out_the_responders_time() {
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let mut p = Prober::new(&pod, 0, ProbeConfig { large: 0, ..Default::default() }, t0);
        let out = p.poll(t0, &[NO_ADDR], &[1]);
        let o = &out[0];
        // The responder held it 700 µs; the wire took 1 ms in all.
        let r = o.packet.answer(1_000_000, 1_700_000);
        let a = p.on_reply(&r, t0 + Duration::from_micros(1700)).unwrap();
        assert_eq!(a.rtt, Duration::from_micros(1000));
        assert_eq!(a.responder, Duration::from_micros(700));
        // Answered twice, or not ours: nothing.
        assert!(p.on_reply(&r, t0 + Duration::from_millis(2)).is_none());
        assert!(p.on_reply(&Packet { host: 3, ..r }, t0).is_none());
    }

    #[test]
    fn a_reply_without_the_probes_cookie_answers_nothing() {
        // A forged reply — a guessed sequence number, the right host — would otherwise hide
        // a dead path: the cookie is a keyed hash only the prober can make.
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let mut p = Prober::new(&pod, 0, ProbeConfig { large: 0, ..Default::default() }, t0);
        let out = p.poll(t0, &[NO_ADDR], &[1]);
        for o in &out {
            let r = o.packet.answer(1, 2);
            for cookie in [0, 1, r.cookie ^ 1, r.cookie.wrapping_add(1)] {
                assert!(p.on_reply(&Packet { cookie, ..r }, t0).is_none(), "{cookie:#x}");
            }
        }
        // The same sequence numbers with their cookies: answered.
        for o in &out {
            assert!(p.on_reply(&o.packet.answer(1, 2), t0).is_some());
        }
        // Another prober's cookies differ (a per-process key).
        let q = Prober::new(&pod, 0, ProbeConfig { large: 0, ..Default::default() }, t0);
        assert_ne!(q.cookie(1), p.cookie(1));
    }

    #[test]
    fn paths_turn_dead_lossy_or_large_lost_from_what_their_probes_met() {
        let pod = pod(4, 1, 4);
        let t0 = Instant::now();
        let cfg = ProbeConfig::default();
        let mut p = Prober::new(&pod, 0, cfg, t0);
        let mut now = t0;
        let mut n = 0u32;
        let even = |port: u16| ((port - 0xF000) / 7).is_multiple_of(2);
        // To h1: every small probe answered, near-MTU ones lost on even ports. To h2: every
        // 8th small probe lost. To h3: nothing comes back (dead).
        for _ in 0..40 {
            let out = p.poll(now, &[NO_ADDR], &[1]);
            for o in out {
                let lose = match o.dst.host {
                    1 => o.packet.large && even(o.port),
                    2 if !o.packet.large => {
                        n += 1;
                        n.is_multiple_of(8)
                    }
                    2 => false,
                    _ => true,
                };
                if !lose {
                    p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
                }
            }
            now += cfg.period;
        }
        p.poll(now + cfg.timeout, &[NO_ADDR], &[1]);
        let r = p.report(LoopHealth::default());
        let state = |h: u16| r.paths.iter().find(|x| x.host == h).unwrap().state;
        assert_eq!(state(1), PathState::LargeLost, "{r:?}");
        assert_eq!(state(2), PathState::Lossy);
        assert_eq!(state(3), PathState::Dead);
        let h1 = r.paths.iter().find(|x| x.host == 1).unwrap();
        assert!(!h1.lost_large_ports.is_empty() && !h1.ok_large_ports.is_empty(), "{h1:?}");
        assert!(h1.lost_large_ports.iter().all(|p| even(*p)));
        // Losses at random (the retry on the same port answered): not an ECMP path.
        let h2 = r.paths.iter().find(|x| x.host == 2).unwrap();
        assert!(h2.lost_ports.is_empty() && h2.ok_ports.is_empty(), "{h2:?}");
        // Encoded, it fits a membership datagram, and reads back (ok paths without figures).
        assert!(r.encode().len() <= REPORT_BYTES, "{}", r.encode().len());
        let back = Report::decode(&r.encode()).unwrap();
        let key = |p: &PathReport| (p.rail, p.host, p.dst_rail, p.state);
        let mut a: Vec<_> = r.paths.iter().map(key).collect();
        let mut b: Vec<_> = back.paths.iter().map(key).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        let dead = back.paths.iter().find(|p| p.host == 3).unwrap();
        assert_eq!(
            dead.lost_ports[..],
            r.paths.iter().find(|p| p.host == 3).unwrap().lost_ports[..8]
        );
    }

    /// A deterministic stream of uniform [0, 1) draws (splitmix64), for loss at random.
    fn draws(seed: u64) -> impl FnMut() -> f64 {
        let mut x = seed;
        move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as f64 / u64::MAX as f64
        }
    }

    /// Runs a prober at h0 of a 4-host pod (two ToRs) for `secs`, every ToR probed each round,
    /// its probes to h2 lost by `lose(port, now_s, draw)`; per round, h2's path as reported.
    fn run_path(
        secs: u32,
        seed: u64,
        mut lose: impl FnMut(u16, f64, f64) -> bool,
    ) -> Vec<(f64, PathState, Vec<u16>, Vec<u16>)> {
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { large: 0, ..Default::default() };
        let mut p = Prober::new(&pod, 0, cfg, t0);
        p.set_alert(true);
        let mut draw = draws(seed);
        let mut out = Vec::new();
        for k in 0..secs * 10 {
            let now = t0 + cfg.period * k;
            let s = now.duration_since(t0).as_secs_f64();
            for o in p.poll(now, &[NO_ADDR], &[1]) {
                if o.dst.host == 2 && lose(o.port, s, draw()) {
                    continue;
                }
                p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
            }
            let r = p.report(LoopHealth::default());
            let h2 = r.paths.iter().find(|x| x.host == 2).unwrap();
            out.push((s, h2.state, h2.lost_ports.clone(), h2.ok_ports.clone()));
        }
        out
    }

    /// The longest time a path was reported split by port (some ports lost, others carrying).
    fn longest_split(rounds: &[(f64, PathState, Vec<u16>, Vec<u16>)]) -> f64 {
        let (mut best, mut since) = (0.0f64, None);
        for (s, _, lost, ok) in rounds {
            if !lost.is_empty() && !ok.is_empty() {
                let t0 = *since.get_or_insert(*s);
                best = best.max(s - t0);
            } else {
                since = None;
            }
        }
        best
    }

    #[test]
    fn losses_at_random_are_not_an_ecmp_split() {
        // A lossy link (10 % and 20 % of probes, every port alike) for 20 s, 200 times each:
        // no path is reported split by port for as long as a partial finding settles (2 s),
        // or the pod would name a spine path for a lossy ToR. (Before the window's flaky
        // ports and firm splits: 9 of these 400 paths split for 2.0–4.4 s; after, in 4,000,
        // the longest split lasted 1.1 s.)
        for loss in [0.1, 0.2] {
            let (mut worst, mut lossy) = ((0.0, 0), 0);
            for seed in 0..200 {
                let rounds = run_path(20, seed, |_, _, d| d < loss);
                lossy += usize::from(rounds.iter().any(|r| r.1 == PathState::Lossy));
                let l = longest_split(&rounds);
                if l > worst.0 {
                    worst = (l, seed);
                }
            }
            assert!(lossy > 150, "{loss}: {lossy} of 200 runs ever lossy");
            assert!(worst.0 < 1.5, "{loss}: split for {:.1} s (seed {})", worst.0, worst.1);
        }
    }

    #[test]
    fn a_dead_ecmp_path_is_a_split_until_its_losses_leave_the_window() {
        // Every third port's path dead from 2 s to 10 s, the others clean.
        let dead = |port: u16| ((port - 0xF000) / 7).is_multiple_of(3);
        let rounds = run_path(20, 7, |port, s, _| (2.0..10.0).contains(&s) && dead(port));
        let split = |r: &(f64, PathState, Vec<u16>, Vec<u16>)| !r.2.is_empty() && !r.3.is_empty();
        let first = rounds.iter().find(|r| split(r)).expect("split").0;
        assert!(first < 3.5, "split after {first:.1} s");
        // From then on, split (every lost port a dead one) until the path is ok again: after
        // the heal, its losses stay in the window 5 s and are still the dead ports'.
        let ok = rounds.iter().find(|r| r.0 > first && r.1 == PathState::Ok).expect("ok").0;
        assert!((14.0..16.0).contains(&ok), "ok after {ok:.1} s");
        for r in rounds.iter().filter(|r| (first..ok).contains(&r.0)) {
            assert!(split(r), "{r:?}");
            assert!(r.2.iter().all(|p| dead(*p)) && r.3.iter().all(|p| !dead(*p)), "{r:?}");
        }
    }

    #[test]
    fn each_rail_counts_its_probes_over_the_horizon_and_reports_them_once_it_loses_one() {
        // h0 of 4 hosts (2 per ToR, one rail) probes for 55 s; every 25th probe to h3 is
        // lost in the first 20 s only.
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { large: 0, min_small: 0, ..Default::default() };
        let mut p = Prober::new(&pod, 0, cfg, t0);
        let mut to_h3 = 0;
        let mut horizons = Vec::new();
        for k in 0..550u32 {
            let now = t0 + cfg.period * k;
            for o in p.poll(now, &[NO_ADDR], &[1]) {
                if o.dst.host == 3 && k < 200 {
                    to_h3 += 1;
                    if to_h3 % 25 == 0 {
                        continue;
                    }
                }
                p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
            }
            if k % 50 == 49 {
                horizons.push(p.broadcast(LoopHealth::default()).horizon);
            }
        }
        // Lossy at 10 s and 20 s: the rail's count, and h3's path listed with its losses.
        for h in &horizons[1..4] {
            assert_eq!(h.len(), 1, "{h:?}");
            let r = &h[0];
            assert!(r.lost >= 1 && r.judged >= 150 && r.judged % HORIZON_STEP == 0, "{r:?}");
            assert_eq!(r.paths.len(), 1, "{r:?}");
            assert_eq!((r.paths[0].0, r.paths[0].3), (3, r.lost), "{r:?}");
        }
        // At 20 s, every loss of the 20 s is still in the horizon: one probe to h3 in 25.
        assert_eq!(horizons[3][0].lost, to_h3 / 25, "{:?}", horizons[3]);
        // Round trip through the wire.
        let r = p.broadcast(LoopHealth::default());
        assert_eq!(Report::decode(&r.encode()).unwrap().horizon, r.horizon);
        // 55 s in, the losses have left the 30 s horizon: nothing reported, and a pod that
        // loses nothing broadcasts the same bytes.
        assert_eq!(horizons.last().unwrap(), &Vec::<RailLoss>::new());
        let clean = Prober::new(&pod, 1, cfg, t0);
        assert!(clean.broadcast(LoopHealth::default()).horizon.is_empty());
    }

    #[test]
    fn a_rail_with_few_peers_sends_its_budget_and_the_extra_probes_count_in_the_horizon_only() {
        use std::collections::BTreeSet;
        // h0 of 4 hosts (2 per ToR): 2 peers a round (h1, and h2 or h3 in turn), 10 small
        // probes a round at the default budget. From 2 s for 1 s every extra probe to h3 is
        // lost, and one of its window's (not all: a dead path's losses are its verdict's,
        // its horizon restarts).
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { large: 0, ..Default::default() };
        assert_eq!(cfg.min_small, 10);
        let mut p = Prober::new(&pod, 0, cfg, t0);
        let mut ports: BTreeMap<Dev, BTreeSet<u16>> = BTreeMap::new();
        let mut window_ports: BTreeSet<u16> = BTreeSet::new();
        // To h3: (window probes, lost), (extra probes, lost); the last loss's round.
        let (mut window, mut extra, mut last) = ((0, 0), (0, 0), 0);
        for k in 0..50u32 {
            let now = t0 + cfg.period * k;
            let out = p.poll(now, &[NO_ADDR], &[1]);
            assert_eq!(p.per_round(), (10, 0));
            // Lost probes go again on their port next round (the window's, before the
            // round's), and the round's eight extra probes come last.
            let n = out.len();
            assert!(n >= 10, "round {k}: {out:?}");
            window_ports.insert(out[..n - 8].iter().rev().find(|o| o.dst.host == 1).unwrap().port);
            for (i, o) in out.into_iter().enumerate() {
                ports.entry(o.dst).or_default().insert(o.port);
                let lost = o.dst.host == 3 && (20..30).contains(&k) && (i >= n - 8 || k == 21);
                if o.dst.host == 3 {
                    let c = if i >= n - 8 { &mut extra } else { &mut window };
                    *c = (c.0 + 1, c.1 + u32::from(lost));
                }
                if lost {
                    last = k;
                } else {
                    p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
                }
            }
        }
        assert_eq!(window_ports.len(), cfg.ports, "{window_ports:?}");
        assert!(ports.values().all(|s| s.len() == cfg.ports), "{ports:?}");
        p.poll(t0 + cfg.period * 50, &[NO_ADDR], &[1]);
        let judged = p.judge_all();
        let path = |h: usize| judged.iter().find(|j| j.key.1.host == h).unwrap();
        // h1: one probe a round in its window (5 s), five a round in the horizon.
        assert_eq!(path(1).judged.small, (50, 0), "{:?}", path(1).judged);
        assert_eq!(path(1).horizon, (250, 0));
        // h3: its window saw its own probes only; the horizon the extra ones too.
        assert!(window.1 == 1 && extra.1 == 20, "{window:?} {extra:?}");
        assert_eq!(path(3).judged.small, window, "{:?}", path(3).judged);
        assert_eq!(path(3).horizon, (window.0 + extra.0, window.1 + extra.1));
        let r = p.broadcast(LoopHealth::default());
        assert_eq!(r.horizon[0].lost, window.1 + extra.1, "{:?}", r.horizon);
        // Its last loss in second 2, the report at 5 s: quiet for 3 whole seconds.
        assert_eq!(last, 29);
        assert_eq!(r.horizon[0].quiet, 3, "{:?}", r.horizon);
        // … and its probes judged since: the 200 of seconds 3 and 4, rounded down to 16.
        assert_eq!(r.horizon[0].since, 192, "{:?}", r.horizon);
        // No budget: one probe per peer a round.
        let mut q = Prober::new(&pod, 0, ProbeConfig { min_small: 0, ..cfg }, t0);
        assert_eq!(q.poll(t0, &[NO_ADDR], &[1]).len(), 2);
        // Every peer down: nothing to probe, no budget to spend.
        let mut q = Prober::new(&pod, 0, cfg, t0);
        q.set_down(&[1, 2, 3]);
        assert_eq!(q.poll(t0, &[NO_ADDR], &[1]).len(), 0);
        assert_eq!(q.per_round(), (0, 0));
    }

    #[test]
    fn near_mtu_probes_reach_every_peer_whatever_the_turn_of_other_tors() {
        // h3 of 4 hosts (2 per ToR): its round is h2 and h0 or h1 in turn; while something
        // is wrong a near-MTU probe goes every round. A turn through the round's targets fell
        // into step with the other ToR's turn: h0 (or h1) never had one, and an MTU limit on
        // h3's cable was named on two of its pairs, not on its cable.
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let mut p = Prober::new(&pod, 3, ProbeConfig::default(), t0);
        p.set_alert(true);
        let mut large: BTreeMap<usize, usize> = BTreeMap::new();
        for k in 0..40u32 {
            let now = t0 + p.cfg.period * k;
            for o in p.poll(now, &[NO_ADDR], &[1]) {
                if o.packet.large {
                    *large.entry(o.dst.host).or_default() += 1;
                }
                p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
            }
        }
        // 40 probes over 3 peers: each at least 10 (h2 is in every round, the others in
        // every other one).
        assert_eq!(large.values().sum::<usize>(), 40, "{large:?}");
        assert!(large.len() == 3 && large.values().all(|n| *n >= 10), "{large:?}");
    }

    #[test]
    fn a_port_that_stays_dead_is_probed_again_by_one_chain_not_one_more_each_round() {
        // h0 of 4 hosts probes for 20 s; every probe to h3 is lost (small and near-MTU, as
        // behind a smaller MTU or a dead link). Each lost probe goes again on its port, once
        // per port at a time: at most one retry per port, small and near-MTU, and the round's
        // own probes (15 in a round at most here; every lost probe and every lost retry sent
        // again, it was 68 a round by 20 s, and growing).
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { min_small: 0, ..Default::default() };
        let mut p = Prober::new(&pod, 0, cfg, t0);
        p.set_alert(true);
        let mut worst = 0;
        for k in 0..200u32 {
            let now = t0 + cfg.period * k;
            let out = p.poll(now, &[NO_ADDR], &[1]);
            let to_h3 = out.iter().filter(|o| o.dst.host == 3).count();
            if k >= 100 {
                worst = worst.max(to_h3);
            }
            for o in out.iter().filter(|o| o.dst.host != 3) {
                p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
            }
        }
        assert!(worst <= 2 * cfg.ports + 2, "{worst} probes to h3 in a round");
        assert!(worst >= 2, "{worst}: the lost ports are probed again");
    }

    #[test]
    fn a_probe_answered_after_its_timeout_was_queued_not_lost() {
        // h0 of 4 hosts probes for 2 s; every probe to h3 is answered 700 ms late (queued
        // behind a burn-in: past the 300 ms timeout, within LATE_FOR) until 1 s, then one
        // is answered 6 s late (gone: lost).
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { large: 0, min_small: 0, ..Default::default() };
        let mut p = Prober::new(&pod, 0, cfg, t0);
        let mut late: Vec<(Instant, Packet)> = Vec::new();
        let mut last = None;
        for k in 0..20u32 {
            let now = t0 + cfg.period * k;
            for (at, pk) in late.iter().filter(|(at, _)| *at <= now) {
                assert!(p.on_reply(pk, *at).is_none(), "a late answer is no round trip");
            }
            late.retain(|(at, _)| *at > now);
            for o in p.poll(now, &[NO_ADDR], &[1]) {
                let reply = o.packet.answer(0, 0);
                if o.dst.host != 3 {
                    p.on_reply(&reply, now + Duration::from_micros(50));
                } else if k < 10 {
                    late.push((now + Duration::from_millis(700), reply));
                } else {
                    last = Some(reply);
                }
            }
        }
        let now = t0 + cfg.period * 20 + Duration::from_millis(700);
        for (at, pk) in &late {
            p.on_reply(pk, *at);
        }
        p.poll(now, &[NO_ADDR], &[1]);
        let to_h3 = p.paths().find(|(k, _)| k.1.host == 3).map(|(_, st)| st.clone()).unwrap();
        assert!(to_h3.late >= 4, "{} answered late", to_h3.late);
        let lost_in_window = to_h3.judge().small.1;
        // Only the probes of the last second, never answered in time, are lost.
        assert!(
            lost_in_window >= 1 && u64::from(lost_in_window) == to_h3.lost[0] - to_h3.late,
            "{lost_in_window} lost in the window, {} timed out, {} answered late",
            to_h3.lost[0],
            to_h3.late
        );
        // 6 s on, the last probe's answer is past LATE_FOR: it stays lost.
        let then = now + LATE_FOR + Duration::from_secs(1);
        p.poll(then, &[NO_ADDR], &[1]);
        let before = p.paths().find(|(k, _)| k.1.host == 3).unwrap().1.late;
        p.on_reply(&last.unwrap(), then);
        assert_eq!(p.paths().find(|(k, _)| k.1.host == 3).unwrap().1.late, before);
    }

    #[test]
    fn probes_to_other_tors_are_counted_by_the_spines_they_crossed() {
        // h0 of 4 hosts (2 per ToR, one rail, two spines): from even ports a probe to h2 or
        // h3 goes out and back through spine 0, from odd ones out through 0 and back through
        // 1; after 5 s one in three probes of the odd ports to h3 is lost.
        let pod = pod(4, 1, 2);
        let t0 = Instant::now();
        let cfg = ProbeConfig { large: 0, ..Default::default() };
        let mut routes = topology::route::Routes::new();
        let h0 = Dev { host: 0, rail: 0 };
        for host in [2, 3] {
            for i in 0..cfg.ports {
                routes.insert(((h0, Dev { host, rail: 0 }), cfg.port(i)), [0, i % 2]);
            }
        }
        let mut p = Prober::new(&pod, 0, cfg, t0);
        p.set_routes(&routes);
        let (mut odd_to_h3, mut lost, mut last_lost, mut odd_after) = (0, 0, 0, 0);
        for k in 0..100u32 {
            let now = t0 + cfg.period * k;
            assert!(k > 50 || p.broadcast(LoopHealth::default()).crossings.is_empty());
            for o in p.poll(now, &[NO_ADDR], &[1]) {
                let odd = (usize::from(o.port) - 0xF000) / 7 % 2 == 1;
                if odd && o.dst.host >= 2 && k > last_lost {
                    odd_after += 1;
                }
                if (50..80).contains(&k) && o.dst.host == 3 && odd {
                    odd_to_h3 += 1;
                    if odd_to_h3 % 3 == 1 {
                        lost += 1;
                        (last_lost, odd_after) = (k, 0);
                        continue;
                    }
                }
                p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(50));
            }
        }
        // Probes lost after the last poll are not judged yet.
        p.poll(t0 + cfg.period * 100 + cfg.timeout, &[NO_ADDR], &[1]);
        let r = p.broadcast(LoopHealth::default());
        let c: Vec<([u8; 2], u32, u32, u32)> =
            r.crossings.iter().map(|c| (c.spines, c.judged, c.lost, c.since)).collect();
        assert_eq!(r.crossings.iter().map(|c| (c.rail, c.tor)).collect::<Vec<_>>(), [(0, 1); 2]);
        // 10 s of probes, one to ToR rack1 a round: half through spine 0 twice, none lost …
        assert_eq!(c[0].0, [0, 0]);
        assert_eq!(c[0].2, 0, "{c:?}");
        // … half out through 0, back through 1: those to h3 lost from 5 s on.
        assert_eq!(c[1].0, [0, 1]);
        assert!(c[1].2 == lost && lost >= 5, "{c:?}, {lost} lost");
        // Since the last loss: every probe of the class that lost nothing; of the other,
        // those after the second of its last loss (up to a second's ten rounds fewer).
        assert_eq!(c[0].3, c[0].1, "{c:?}");
        assert!(c[1].3 <= odd_after && c[1].3 + 10 >= odd_after && c[1].3 > 0, "{c:?} {odd_after}");
        assert!(c[0].1 + c[1].1 >= 100, "{c:?}");
        assert_eq!(Report::decode(&r.encode()).unwrap().crossings, r.crossings);
    }
}
