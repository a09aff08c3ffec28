//! Across frames: connections, PSN gaps, retransmissions, NAKs, RNR, congestion marks and
//! CNPs, latencies — and from them, findings. Sans-IO: [`Analyzer::record`] takes decoded
//! records in capture order, [`Analyzer::finish`] hands back the [`Report`]. Memory grows
//! with the number of flows (a fixed amount each), not with the number of frames.
//!
//! A *flow* is one direction between two QPs: the packets from one address to one
//! destination QP (and, for UD, from one source QP). An RC connection is two flows, paired
//! when the responses of one (ACKs, READ responses, atomic ACKs) carry PSNs of the other's
//! requests. Each flow carries its QP's requests and its QP's responses to the peer's
//! requests; what this module reports about a flow's *requests* includes what came back for
//! them on the paired flow.
//!
//! How a PSN that goes backwards is read: the capture saw the PSN before, or a gap was open
//! there. A copy with the IPv4 Identification of the first is a network duplicate; a PSN in
//! an open gap that comes back before any NAK or RNR NAK and within the reorder window is
//! out-of-order arrival; anything else is a resend, and consecutive resends are one go-back-N
//! burst, triggered by the NAK or RNR NAK seen before it, or else by the requester's timeout.
//! A gap that the responder acknowledges without it ever showing up was lost by the capture
//! point, not by the network. Resends lost on the way are gaps in the burst (the burst starts
//! where the NAK or RNR NAK asked, or after a timeout at the first unacknowledged PSN).
//!
//! A late packet whose IPv4 Identification is older than the newest of its flow (where the
//! sender numbers its packets in order, as rxe and Linux's stack do) is an original that was
//! overtaken, not a resend: reordering, even after the NAK and the resends it set off; a loss
//! counted when its resend came first is taken back. Reordering tangled with the go-back-N
//! bursts it sets off is still partly counted as loss.
//!
//! What a capture cannot show is not counted: a lost packet whose resend is the next thing
//! the capture sees (the last packet before a go-back-N restart looks like its first send),
//! or the first resends of a timeout's burst lost after an ACK the capture saw but the
//! requester never got (the capture cannot know where that burst began). The simulator's
//! tests count the losses a capture can show and check the analyzer finds exactly those.

mod findings;
mod flow;
mod ingest;
mod report;
mod text;

use std::collections::HashMap;
use std::net::IpAddr;

use wire::Transport;

use crate::Record;

use flow::{Flow, FlowKey};
pub use report::*;
pub use text::seconds;

/// What the analyzer assumes about the capture.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// A request still unacknowledged this long before the capture's last frame is
    /// reported as unanswered (retry exhaustion).
    pub grace_ns: u64,
    /// A PSN that fills a gap within this long of the gap opening, with no NAK between, is
    /// out-of-order arrival rather than a resend.
    pub reorder_ns: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config { grace_ns: 100_000_000, reorder_ns: 500_000 }
    }
}

/// Open gaps kept per flow; more are counted but not tracked one by one.
const MAX_GAPS: usize = 64;
/// Requests remembered per flow (their time and IP ID), by PSN modulo this.
const RING: usize = 1024;
/// Requests with an RETH or AtomicETH remembered per flow (READ and atomic latency, the
/// evidence for an access error).
const MAX_REMOTE: usize = 256;
/// Flows tracked, at most: the records of flows beyond are counted, not analyzed.
pub const MAX_FLOWS: usize = 250_000;
/// Unpaired flows a response flow is matched against, at most (the latest).
const MAX_PAIR_CANDIDATES: usize = 1024;
/// Goodput buckets per flow; past this the bucket doubles.
const MAX_BUCKETS: usize = 256;
/// Evidence frames kept per finding.
const MAX_EVIDENCE: usize = 8;
/// Marks kept per flow for the timeline (each kind).
const MAX_MARKS: usize = 512;
/// PSN samples kept per flow for the timeline.
const MAX_SAMPLES: usize = 2048;

/// The analyzer: feed it records in capture order.
#[derive(Debug)]
pub struct Analyzer {
    cfg: Config,
    flows: Vec<Flow>,
    index: HashMap<FlowKey, usize>,
    last: Option<(FlowKey, usize)>,
    frames: u64,
    roce: u64,
    undecodable: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    /// Unpaired flows by (source, destination), in the order they came.
    by_ends: HashMap<(IpAddr, IpAddr), std::collections::BTreeSet<usize>>,
    /// Records of flows past [`MAX_FLOWS`], not analyzed.
    untracked: u64,
    /// Frames whose timestamp went back before an earlier frame's (taken as that time).
    backwards: u64,
}

impl Analyzer {
    /// An analyzer with `cfg`.
    pub fn new(cfg: Config) -> Analyzer {
        Analyzer {
            cfg,
            flows: Vec::new(),
            index: HashMap::new(),
            last: None,
            frames: 0,
            roce: 0,
            undecodable: 0,
            first_ns: None,
            last_ns: 0,
            by_ends: HashMap::new(),
            untracked: 0,
            backwards: 0,
        }
    }

    /// Counts a frame read from the capture (RoCEv2 or not), at `ts_ns` if known.
    pub fn frame(&mut self, ts_ns: Option<u64>) {
        self.frames += 1;
        if let Some(t) = ts_ns {
            self.first_ns.get_or_insert(t);
            if t < self.last_ns {
                self.backwards += 1;
            }
            self.last_ns = self.last_ns.max(t);
        }
    }

    /// The flow of `key`, made if new; `None` past [`MAX_FLOWS`].
    fn flow(&mut self, key: FlowKey, sport: u16) -> Option<usize> {
        if let Some((k, i)) = self.last
            && k == key
        {
            return Some(i);
        }
        let n = self.flows.len();
        let i = match self.index.get(&key) {
            Some(i) => *i,
            None if n >= MAX_FLOWS => return None,
            None => {
                self.index.insert(key, n);
                self.flows.push(Flow::new(key, sport));
                self.by_ends.entry((key.src, key.dst)).or_default().insert(n);
                n
            }
        };
        self.last = Some((key, i));
        Some(i)
    }

    /// Takes every record of one decoded frame.
    pub fn decoded(&mut self, d: &crate::Decoded<'_>) {
        d.records().iter().for_each(|r| self.record(r));
    }

    /// The report.
    pub fn finish(mut self) -> Report {
        let start = self.first_ns.unwrap_or(0);
        let end = self.last_ns;
        // Flows never paired by a response: pair a lone flow with the one reverse flow of its
        // transport (UC, or RC with no response captured), for CNPs and the report — where
        // each is the only unpaired flow of its transport each way.
        let mut groups: HashMap<(IpAddr, IpAddr, Option<Transport>), Vec<usize>> = HashMap::new();
        for (i, f) in self.flows.iter().enumerate() {
            if f.peer.is_none()
                && f.transport != Some(Transport::Ud)
                && let Some(k) = f.key
            {
                groups.entry((k.src, k.dst, f.transport)).or_default().push(i);
            }
        }
        let mut lone: Vec<(usize, usize)> = Vec::new();
        for (&(src, dst, t), there) in &groups {
            if let ([a], Some([b])) =
                (there.as_slice(), groups.get(&(dst, src, t)).map(Vec::as_slice))
                && a < b
            {
                lone.push((*a, *b));
            }
        }
        for (a, b) in lone {
            self.link(a, b);
        }
        let mut order: Vec<usize> = (0..self.flows.len()).collect();
        order.sort_by_key(|&i| self.flows[i].first_frame);
        let mut connections = Vec::new();
        let mut done = vec![false; self.flows.len()];
        let mut findings = Vec::new();
        for &i in &order {
            if done[i] {
                continue;
            }
            done[i] = true;
            let mut dirs = vec![i];
            if let Some(p) = self.flows[i].peer {
                done[p] = true;
                dirs.push(p);
            }
            let id = connections.len() + 1;
            let transport = self.flows[i].transport.map_or("CNP", |t| t.prefix()).to_string();
            let directions: Vec<Direction> =
                dirs.iter().map(|&d| self.direction(d, start, end)).collect();
            for (d, &fi) in directions.iter().zip(&dirs) {
                // CNPs arrive on the reverse flow (addressed to this direction's sender).
                let cnps = self.flows[fi].peer.map_or(0, |p| self.flows[p].cnps);
                self.findings_for(id, d, fi, cnps, &mut findings);
            }
            connections.push(Connection { id, transport, directions });
        }
        findings.sort_by(|a: &Finding, b: &Finding| {
            a.severity.cmp(&b.severity).then(b.count.cmp(&a.count))
        });
        Report {
            frames: self.frames,
            roce: self.roce,
            undecodable: self.undecodable,
            duration_s: end.saturating_sub(start) as f64 / 1e9,
            untracked: self.untracked,
            clock_steps_back: self.backwards,
            connections,
            findings,
        }
    }
}
