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

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use hdrhistogram::Histogram;
use serde::Serialize;
use wire::ext::{NakCode, Syndrome};
use wire::{Opcode, Operation, Psn, Transport};

use crate::Record;

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
/// Goodput buckets per flow; past this the bucket doubles.
const MAX_BUCKETS: usize = 256;
/// Evidence frames kept per finding.
const MAX_EVIDENCE: usize = 8;
/// Marks kept per flow for the timeline (each kind).
const MAX_MARKS: usize = 512;
/// PSN samples kept per flow for the timeline.
const MAX_SAMPLES: usize = 2048;

/// A flow's identity: one direction to one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    src: IpAddr,
    dst: IpAddr,
    dest_qp: u32,
    /// UD's source QP (from the DETH); 0 otherwise.
    src_qp: u32,
}

/// What made a go-back-N burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Nak,
    Rnr,
    Timeout,
}

#[derive(Debug, Clone, Copy)]
struct Gap {
    start: Psn,
    len: u32,
    opened_ns: u64,
    /// PSNs of it still missing.
    missing: u32,
    /// Its PSNs lost again: resends of them that never showed.
    again: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    psn: u32,
    ts: u64,
    ip_id: Option<u16>,
    valid: bool,
}

#[derive(Debug, Clone, Copy)]
struct Remote {
    psn: Psn,
    ts: u64,
    frame: u64,
    op: Opcode,
    rkey: u32,
    va: u64,
    len: u32,
}

/// Per-opcode counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpcodeCount {
    /// Packets.
    pub packets: u64,
    /// Messages (first or only packets).
    pub messages: u64,
    /// Payload bytes.
    pub bytes: u64,
}

/// Latency statistics, microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

fn latency(h: &Option<Box<Histogram<u64>>>) -> Option<Latency> {
    let h = h.as_ref()?;
    let us = |ns: u64| ns as f64 / 1000.0;
    Some(Latency {
        count: h.len(),
        min_us: us(h.min()),
        p50_us: us(h.value_at_quantile(0.5)),
        p99_us: us(h.value_at_quantile(0.99)),
        max_us: us(h.max()),
    })
}

fn sample(h: &mut Option<Box<Histogram<u64>>>, ns: u64) {
    let h = h.get_or_insert_with(|| {
        Box::new(Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid bounds"))
    });
    let _ = h.record(ns.max(1));
}

/// A mark on a flow's timeline.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Mark {
    /// Seconds since the capture's first frame.
    pub t: f64,
    /// The PSN it concerns.
    pub psn: u32,
    /// The frame.
    pub frame: u64,
}

#[derive(Debug, Default)]
struct Flow {
    key: Option<FlowKey>,
    transport: Option<Transport>,
    udp_src_port: u16,
    peer: Option<usize>,
    packets: u64,
    bytes: u64,
    first_frame: u64,
    last_frame: u64,
    first_ns: u64,
    last_ns: u64,
    opcodes: std::collections::BTreeMap<u8, OpcodeCount>,
    // Requests.
    requests: u64,
    first_psn: Option<Psn>,
    next: Option<Psn>,
    read_skip: u32,
    mtu_guess: u32,
    gaps: VecDeque<Gap>,
    gaps_untracked: u64,
    gap_count: u64,
    gap_packets: u64,
    max_gap: u32,
    lost_before: u64,
    lost_after: u64,
    capture_missed: u64,
    out_of_order: u64,
    duplicates: u64,
    resent: u64,
    bursts: u64,
    burst_triggers: [u64; 3],
    in_burst: bool,
    burst_start: Option<Psn>,
    /// The PSN the burst's next resend should carry (a skip is a resend lost on the way).
    burst_next: Psn,
    /// Bursts from the same unacknowledged PSN, with no ACK between: the requester's retries.
    bursts_at_head: u32,
    burst_high: Psn,
    burst_len: u64,
    max_burst: u64,
    /// The NAK or RNR NAK seen since the last burst, and the PSN it asked for.
    pending: Option<(Trigger, Psn)>,
    /// The newest IPv4 Identification of this flow's requests, and how many of them came
    /// with a newer one than the one before (a sender that numbers its packets in order:
    /// rxe, Linux's stack; not podnet's soft device, which sends 0): an older one on a late
    /// packet marks it as the original, not a resend.
    newest_id: Option<u16>,
    ids_rising: u64,
    /// PSNs lately counted lost because a resend filled them: a late original of one of
    /// them shows the loss was reordering.
    filled: VecDeque<Psn>,
    /// PSNs lately seen out of order: the responder may NAK one (it came after the next),
    /// which is reordering, not loss after the capture point.
    late: VecDeque<Psn>,
    /// The PSN of the last RNR NAK, until an ACK moves past it: the sequence-error NAKs
    /// that follow for the packets behind it are its echo, not loss.
    rnr_psn: Option<Psn>,
    nak_since_progress: bool,
    last_request_ns: u64,
    last_request_frame: u64,
    ring: Vec<Slot>,
    remote: VecDeque<Remote>,
    goodput: Vec<u64>,
    bucket_ns: u64,
    // What came back for the requests (counted on the requests' flow).
    acks: u64,
    acked_packets: u64,
    last_acked: Option<Psn>,
    naks: [u64; 5],
    nak_frames: [Vec<u64>; 5],
    access_evidence: Vec<String>,
    rnr: u64,
    rnr_timers: std::collections::BTreeSet<u8>,
    rnr_first_ns: u64,
    rnr_last_ns: u64,
    rnr_frames: Vec<u64>,
    ack_latency: Option<Box<Histogram<u64>>>,
    read_latency: Option<Box<Histogram<u64>>>,
    atomic_latency: Option<Box<Histogram<u64>>>,
    read_responses: u64,
    // Marks on this flow's packets.
    ce: u64,
    ce_frames: Vec<u64>,
    ect: u64,
    cnps: u64,
    cnp_first_ns: u64,
    cnp_last_ns: u64,
    icrc_bad: u64,
    icrc_frames: Vec<u64>,
    // The timeline.
    samples: Vec<(u64, u32)>,
    sample_every: u64,
    marks_loss: Vec<Mark>,
    marks_resend: Vec<Mark>,
    marks_nak: Vec<Mark>,
    marks_cnp: Vec<Mark>,
}

/// Remembers `psn` among the last [`MAX_GAPS`].
fn push_recent(v: &mut VecDeque<Psn>, psn: Psn) {
    if v.len() >= MAX_GAPS {
        v.pop_front();
    }
    v.push_back(psn);
}

fn push_capped<T>(v: &mut Vec<T>, x: T, cap: usize) {
    if v.len() < cap {
        v.push(x);
    }
}

impl Flow {
    fn new(key: FlowKey, udp_src_port: u16) -> Flow {
        Flow {
            key: Some(key),
            udp_src_port,
            ring: vec![Slot::default(); RING],
            bucket_ns: 1_000_000,
            sample_every: 1,
            ..Flow::default()
        }
    }

    /// Whether `psn` is among the requests seen: at or after the first and before the next.
    fn seen_range(&self, psn: Psn) -> bool {
        match (self.first_psn, self.next) {
            (Some(f), Some(n)) => psn.diff(f) >= 0 && psn.diff(n) < 0,
            _ => false,
        }
    }

    /// Records PSNs `start` .. `start + len` as missing here, seen at `ts`.
    fn open_gap(&mut self, start: Psn, len: u32, ts: u64, mark: Mark) {
        self.gap_count += 1;
        self.gap_packets += u64::from(len);
        self.max_gap = self.max_gap.max(len);
        if self.gaps.len() < MAX_GAPS {
            self.gaps.push_back(Gap { start, len, opened_ns: ts, missing: len, again: 0 });
        } else {
            self.gaps_untracked += 1;
        }
        push_capped(&mut self.marks_loss, Mark { psn: start.get(), ..mark }, MAX_MARKS);
    }

    /// Records PSNs `start` .. `start + len` as lost on the way here during a resend burst:
    /// those already missing count as lost again, the others open gaps.
    fn lost_in_burst(&mut self, start: Psn, len: u32, ts: u64, mark: Mark) {
        let mut run: Option<(Psn, u32)> = None;
        for k in 0..len {
            let p = start.add(k);
            if self.last_acked.is_some_and(|a| p.diff(a) <= 0) {
                // The responder had it already (a spurious resend): it will not be asked
                // for again, and it was lost all the same.
                self.lost_before += 1;
                self.gap_packets += 1;
                if let Some((s, n)) = run.take() {
                    self.open_gap(s, n, ts, mark);
                }
            } else if let Some(g) = self.in_gap(p) {
                self.gaps[g].again += 1;
                self.gap_packets += 1;
                if let Some((s, n)) = run.take() {
                    self.open_gap(s, n, ts, mark);
                }
            } else {
                run = Some(run.map_or((p, 1), |(s, n)| (s, n + 1)));
            }
        }
        if let Some((s, n)) = run {
            self.open_gap(s, n, ts, mark);
        }
    }

    /// The responder has every request up to `psn`: advances the last acknowledged PSN
    /// (returning by how many), and gaps it covers were missed by the capture, not lost.
    fn acknowledge(&mut self, psn: Psn) -> u64 {
        let newly = match (self.last_acked, self.first_psn) {
            (Some(a), _) => psn.diff(a).max(0) as u64,
            (None, Some(p)) => (psn.diff(p) + 1).max(0) as u64,
            (None, None) => 0,
        };
        if newly > 0 {
            self.last_acked = Some(psn);
            self.bursts_at_head = 0;
            if self.rnr_psn.is_some_and(|r| psn.diff(r) >= 0) {
                self.rnr_psn = None;
            }
        }
        let mut k = 0;
        while k < self.gaps.len() {
            let g = self.gaps[k];
            if psn.diff(g.start.add(g.len - 1)) >= 0 {
                self.capture_missed += u64::from(g.missing);
                self.lost_before += u64::from(g.again);
                self.gaps.remove(k);
            } else {
                k += 1;
            }
        }
        newly
    }

    /// Whether a response at `psn` can answer these requests: among them, or a little
    /// before the first the capture saw (a request sent before the capture began).
    fn answerable(&self, psn: Psn) -> bool {
        match (self.first_psn, self.next) {
            (Some(f), Some(n)) => psn.diff(f) >= -(1 << 16) && psn.diff(n) < 0,
            _ => false,
        }
    }

    fn in_gap(&self, psn: Psn) -> Option<usize> {
        self.gaps.iter().position(|g| {
            let d = psn.diff(g.start);
            d >= 0 && (d as u32) < g.len
        })
    }

    fn add_goodput(&mut self, rel_ns: u64, bytes: u64) {
        let mut i = (rel_ns / self.bucket_ns) as usize;
        while i >= MAX_BUCKETS {
            // Halve the resolution: merge pairs.
            let merged: Vec<u64> = self.goodput.chunks(2).map(|c| c.iter().sum()).collect();
            self.goodput = merged;
            self.bucket_ns *= 2;
            i = (rel_ns / self.bucket_ns) as usize;
        }
        if self.goodput.len() <= i {
            self.goodput.resize(i + 1, 0);
        }
        self.goodput[i] += bytes;
    }

    fn add_sample(&mut self, rel_ns: u64, psn: u32) {
        if !self.requests.is_multiple_of(self.sample_every) {
            return;
        }
        if self.samples.len() >= MAX_SAMPLES {
            // Keep every other one, and sample half as often from now.
            let kept: Vec<(u64, u32)> = self.samples.iter().copied().step_by(2).collect();
            self.samples = kept;
            self.sample_every *= 2;
        }
        self.samples.push((rel_ns, psn));
    }
}

/// One direction of a connection, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct Direction {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination QP.
    pub dest_qp: u32,
    /// UD's source QP, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_qp: Option<u32>,
    /// The UDP source port of its first packet.
    pub udp_src_port: u16,
    /// Packets, and their payload bytes.
    pub packets: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Frame numbers of its first and last packet.
    pub frames: [u64; 2],
    /// Seconds (since the capture's first frame) of its first and last packet.
    pub seconds: [f64; 2],
    /// Counts by opcode name.
    pub opcodes: std::collections::BTreeMap<String, OpcodeCount>,
    /// Request packets (not responses, not CNPs).
    pub requests: u64,
    /// Request PSNs: gaps, losses, resends.
    pub psn: PsnStats,
    /// What the peer answered to these requests.
    pub answers: Answers,
    /// Congestion marks on these packets and the CNPs that came back for them.
    pub congestion: Congestion,
    /// Packets whose ICRC failed.
    pub icrc_failures: u64,
    /// Goodput (first transmissions' payload) over time.
    pub goodput: Goodput,
    /// Requests still unanswered at the end of the capture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unanswered: Option<Unanswered>,
    /// For the timeline: (seconds, PSN) of requests, sampled.
    #[serde(skip)]
    pub samples: Vec<(f64, u32)>,
    /// For the timeline: losses, resends, NAKs, CNPs.
    #[serde(skip)]
    pub marks: [Vec<Mark>; 4],
}

impl Direction {
    /// `src > dst QP 0x…` (and the source QP, for UD).
    pub fn title(&self) -> String {
        let from = self.src_qp.map_or(String::new(), |q| format!(" (from QP {q:#x})"));
        format!("{} > {} QP {:#x}{from}", self.src, self.dst, self.dest_qp)
    }
}

/// A direction's request PSNs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PsnStats {
    /// Gaps (PSNs skipped forward).
    pub gaps: u64,
    /// PSNs in those gaps.
    pub gap_packets: u64,
    /// The largest gap.
    pub max_gap: u32,
    /// PSNs missing here and resent later: lost on the path before the capture point.
    pub lost_before_capture: u64,
    /// PSNs the capture saw that the responder NAKed as missing: lost after the capture
    /// point.
    pub lost_after_capture: u64,
    /// PSNs missing here that the responder acknowledged: the capture point missed them.
    pub capture_missed: u64,
    /// PSNs that filled a gap before any NAK, within the reorder window.
    pub out_of_order: u64,
    /// Network copies (same PSN and IPv4 Identification as a packet just seen).
    pub duplicates: u64,
    /// Packets resent (PSNs at or below the highest seen).
    pub resent: u64,
    /// Go-back-N bursts.
    pub bursts: u64,
    /// The largest burst, packets.
    pub max_burst: u64,
    /// What started the bursts: a NAK (PSN sequence error), an RNR NAK, the requester's
    /// timeout.
    pub burst_after_nak: u64,
    /// See [`PsnStats::burst_after_nak`].
    pub burst_after_rnr: u64,
    /// See [`PsnStats::burst_after_nak`].
    pub burst_after_timeout: u64,
}

/// What the peer answered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Answers {
    /// ACKs (including the AETH of READ responses and atomic ACKs).
    pub acks: u64,
    /// Request packets acknowledged per ACK.
    pub coalescing: f64,
    /// NAKs by code.
    pub naks: Naks,
    /// RNR NAKs.
    pub rnr_naks: u64,
    /// The RNR timers they asked for, ms.
    pub rnr_timer_ms: Vec<f64>,
    /// From the first RNR NAK to the last, ms.
    pub rnr_span_ms: f64,
    /// READ response packets.
    pub read_responses: u64,
    /// From a request packet to the ACK that covers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_latency: Option<Latency>,
    /// From a READ request to its first response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<Latency>,
    /// From an atomic request to its atomic ACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic_latency: Option<Latency>,
}

/// NAKs by code.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Naks {
    /// PSN sequence error.
    pub psn_sequence_error: u64,
    /// Invalid request.
    pub invalid_request: u64,
    /// Remote access error.
    pub remote_access_error: u64,
    /// Remote operational error.
    pub remote_operational_error: u64,
    /// Invalid RD request.
    pub invalid_rd_request: u64,
}

/// Congestion marks and notifications.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Congestion {
    /// Packets sent ECN-capable (ECT(0) or ECT(1)).
    pub ect: u64,
    /// Packets marked CE.
    pub ce: u64,
    /// CNPs sent back to this direction's sender.
    pub cnps: u64,
    /// CNPs per second, over their span.
    pub cnp_rate_per_s: f64,
}

/// Goodput over time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Goodput {
    /// Bucket width, ms.
    pub bucket_ms: f64,
    /// Mbit/s in each bucket, from the direction's first packet.
    pub mbit_s: Vec<f64>,
}

/// Requests unanswered at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Unanswered {
    /// The first unacknowledged PSN.
    pub from_psn: u32,
    /// The last request PSN.
    pub to_psn: u32,
    /// Seconds from the last request to the capture's end.
    pub silent_s: f64,
    /// The last request's frame.
    pub last_frame: u64,
}

/// A connection: an RC QP pair's two directions, or one flow alone (UC, UD, or a direction
/// whose peer the capture did not see).
#[derive(Debug, Clone, Serialize)]
pub struct Connection {
    /// 1-based, in order of first packet.
    pub id: usize,
    /// `RC`, `UC`, `UD`, …
    pub transport: String,
    /// One or two directions.
    pub directions: Vec<Direction>,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something failed: work requests completed in error, or data was corrupted.
    Error,
    /// Performance lost: losses, resends, RNR, congestion.
    Warning,
    /// Worth knowing.
    Info,
}

/// One thing that went wrong, with its evidence and probable cause.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Error, warning or info.
    pub severity: Severity,
    /// A stable name: `access-error`, `invalid-request`, `remote-operational-error`,
    /// `unanswered`, `icrc`, `loss`, `loss-after-capture`, `retransmission-storm`, `rnr`,
    /// `congestion`, `ce-without-cnp`, `capture-missed`, `timeout-resends`, `out-of-order`,
    /// `duplicates`.
    pub kind: &'static str,
    /// The connection (its id in the report).
    pub connection: usize,
    /// The requests' direction: `src > dst QP 0x…`.
    pub flow: String,
    /// What was seen.
    pub summary: String,
    /// The probable cause, in a pod engineer's words.
    pub cause: String,
    /// How many (packets, NAKs, …).
    pub count: u64,
    /// Frames that show it (the first few).
    pub frames: Vec<u64>,
}

/// The whole analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Frames read (RoCEv2 or not).
    pub frames: u64,
    /// RoCEv2 packets analyzed.
    pub roce: u64,
    /// RoCEv2 packets without whole headers (cut by the capture, or malformed).
    pub undecodable: u64,
    /// From the first frame to the last, seconds (0 without timestamps).
    pub duration_s: f64,
    /// Every connection.
    pub connections: Vec<Connection>,
    /// What went wrong, worst first.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Whether a finding has error severity.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

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
        }
    }

    /// Counts a frame read from the capture (RoCEv2 or not), at `ts_ns` if known.
    pub fn frame(&mut self, ts_ns: Option<u64>) {
        self.frames += 1;
        if let Some(t) = ts_ns {
            self.first_ns.get_or_insert(t);
            self.last_ns = self.last_ns.max(t);
        }
    }

    fn flow(&mut self, key: FlowKey, sport: u16) -> usize {
        if let Some((k, i)) = self.last
            && k == key
        {
            return i;
        }
        let n = self.flows.len();
        let i = *self.index.entry(key).or_insert(n);
        if i == n {
            self.flows.push(Flow::new(key, sport));
        }
        self.last = Some((key, i));
        i
    }

    /// Takes every record of one decoded frame.
    pub fn decoded(&mut self, d: &crate::Decoded<'_>) {
        d.records().iter().for_each(|r| self.record(r));
    }

    /// Takes one RoCEv2 record.
    pub fn record(&mut self, r: &Record<'_>) {
        self.roce += 1;
        let Some(h) = &r.headers else {
            self.undecodable += 1;
            return;
        };
        let ts = r.ts_ns.unwrap_or(0);
        let rel = ts.saturating_sub(self.first_ns.unwrap_or(ts));
        let b = &h.bth;
        let op = b.opcode;
        let transport = op.info().map(|i| i.transport);
        let src_qp = match transport {
            Some(Transport::Ud) => h.deth.map_or(0, |d| d.src_qp.get()),
            _ => 0,
        };
        let key =
            FlowKey { src: r.edge.ip.src, dst: r.edge.ip.dst, dest_qp: b.dest_qp.get(), src_qp };
        let fi = self.flow(key, r.edge.udp.src_port);
        let payload = r.payload_len.unwrap_or(0) as u64;
        let f = &mut self.flows[fi];
        if f.transport.is_none() && op != Opcode::CNP {
            // A CNP may come first on a flow; its transport is the QP's traffic's.
            f.transport = transport;
        }
        f.packets += 1;
        f.bytes += payload;
        if f.first_frame == 0 {
            f.first_frame = r.frame;
            f.first_ns = ts;
        }
        f.last_frame = r.frame;
        f.last_ns = ts;
        let c = f.opcodes.entry(op.0).or_default();
        c.packets += 1;
        c.bytes += payload;
        let is_request = op.operation().is_some_and(|o| !o.is_response());
        if op.is_first_or_only() && !is_request {
            c.messages += 1;
        }
        match r.edge.ip.ecn() {
            3 => {
                f.ce += 1;
                push_capped(&mut f.ce_frames, r.frame, MAX_EVIDENCE);
            }
            1 | 2 => f.ect += 1,
            _ => {}
        }
        if r.icrc_ok == Some(false) {
            f.icrc_bad += 1;
            push_capped(&mut f.icrc_frames, r.frame, MAX_EVIDENCE);
            // Its headers may be what was corrupted: nothing more is read from it.
            return;
        }
        if op == Opcode::CNP {
            if f.cnps == 0 {
                f.cnp_first_ns = ts;
            }
            f.cnps += 1;
            f.cnp_last_ns = ts;
            let psn = b.psn.get();
            push_capped(
                &mut f.marks_cnp,
                Mark { t: rel as f64 / 1e9, psn, frame: r.frame },
                MAX_MARKS,
            );
            return;
        }
        match op.operation() {
            Some(o) if o.is_response() => self.response(fi, r, h, o, ts, rel),
            Some(o) => self.request(fi, r, h, o, ts, rel, payload),
            None => {}
        }
    }

    #[allow(clippy::too_many_arguments, reason = "one call site, the record's parts")]
    fn request(
        &mut self,
        fi: usize,
        r: &Record<'_>,
        h: &wire::roce::Repr,
        o: Operation,
        ts: u64,
        rel: u64,
        payload: u64,
    ) {
        let cfg = self.cfg;
        let f = &mut self.flows[fi];
        let psn = h.bth.psn;
        let ip_id = r.edge.ip.id;
        f.requests += 1;
        if let Some(id) = ip_id {
            match f.newest_id {
                Some(n) if (id.wrapping_sub(n) as i16) > 0 => {
                    f.ids_rising += 1;
                    f.newest_id = Some(id);
                }
                Some(_) => {}
                None => f.newest_id = Some(id),
            }
        }
        f.last_request_ns = ts;
        f.last_request_frame = r.frame;
        if matches!(
            o,
            Operation::RdmaWriteMiddle
                | Operation::SendMiddle
                | Operation::RdmaWriteFirst
                | Operation::SendFirst
        ) {
            f.mtu_guess = f.mtu_guess.max(payload as u32);
        }
        let mark = |frame| Mark { t: rel as f64 / 1e9, psn: psn.get(), frame };
        let slot = (psn.get() as usize) % RING;
        let mut fresh = true;
        match f.next {
            None => {
                f.first_psn = Some(psn);
                f.next = Some(psn.add(1));
            }
            Some(next) => {
                let d = psn.diff(next);
                if d >= 0 && d as u32 <= f.read_skip {
                    f.next = Some(psn.add(1));
                } else if d > 0 {
                    // Skipped forward: a gap.
                    f.open_gap(next, d as u32, ts, mark(r.frame));
                    f.next = Some(psn.add(1));
                } else {
                    // Backwards: a duplicate, an out-of-order arrival, or a resend.
                    let s = f.ring[slot];
                    if s.valid && s.psn == psn.get() && ip_id.is_some() && s.ip_id == ip_id {
                        f.duplicates += 1;
                        return;
                    }
                    fresh = false;
                    // An original overtaken on the way (its Identification older than the
                    // newest): reordering, whatever NAKs and resends came meanwhile.
                    let numbered = f.ids_rising * 10 >= f.requests * 9 && f.requests >= 8;
                    let late_original = numbered
                        && matches!((ip_id, f.newest_id), (Some(i), Some(n)) if (i.wrapping_sub(n) as i16) < 0);
                    if late_original {
                        f.out_of_order += 1;
                        push_recent(&mut f.late, psn);
                        if let Some(g) = f.in_gap(psn) {
                            let gp = &mut f.gaps[g];
                            gp.missing = gp.missing.saturating_sub(1);
                            if gp.missing == 0 {
                                f.lost_before += u64::from(gp.again);
                                f.gaps.remove(g);
                            }
                        } else if let Some(k) = f.filled.iter().position(|&p| p == psn) {
                            // Counted lost when its resend came first: it was not.
                            f.filled.remove(k);
                            f.lost_before = f.lost_before.saturating_sub(1);
                        }
                        f.ring[slot] = Slot { psn: psn.get(), ts, ip_id, valid: true };
                        return;
                    }
                    let gap = f.in_gap(psn);
                    let ooo = gap.is_some_and(|g| {
                        !f.nak_since_progress
                            && f.pending.is_none()
                            && !f.in_burst
                            && ts.saturating_sub(f.gaps[g].opened_ns) <= cfg.reorder_ns
                    });
                    if let Some(g) = gap {
                        let gp = &mut f.gaps[g];
                        gp.missing = gp.missing.saturating_sub(1);
                        if ooo {
                            f.out_of_order += 1;
                            push_recent(&mut f.late, psn);
                            fresh = true;
                        } else {
                            f.lost_before += 1;
                            push_recent(&mut f.filled, psn);
                        }
                        if f.gaps[g].missing == 0 {
                            f.lost_before += u64::from(f.gaps[g].again);
                            f.gaps.remove(g);
                        }
                    }
                    if !ooo {
                        if f.in_burst && psn.diff(f.burst_next) > 0 {
                            // Resends of the burst lost on the way here.
                            let n = psn.diff(f.burst_next) as u32;
                            f.lost_in_burst(f.burst_next, n, ts, mark(r.frame));
                        }
                        if !f.in_burst {
                            f.in_burst = true;
                            f.bursts += 1;
                            f.burst_len = 0;
                            f.burst_high = next.add(Psn::MASK); // next - 1
                            // Where go-back-N restarts: the PSN the NAK asked for, or
                            // after a timeout the first unacknowledged one.
                            let (t, from) = f.pending.take().unwrap_or((
                                Trigger::Timeout,
                                f.last_acked.map_or(psn, |a| a.add(1)),
                            ));
                            let skipped = psn.diff(from);
                            if skipped > 0 && skipped < 1 << 16 {
                                // The burst's first resends never showed.
                                f.lost_in_burst(from, skipped as u32, ts, mark(r.frame));
                            }
                            if f.burst_start == Some(psn) {
                                f.bursts_at_head += 1;
                            } else {
                                f.bursts_at_head = 1;
                            }
                            f.burst_start = Some(psn);
                            f.burst_triggers[t as usize] += 1;
                        }
                        f.resent += 1;
                        f.burst_next = psn.add(1);
                        f.burst_len += 1;
                        f.max_burst = f.max_burst.max(f.burst_len);
                        push_capped(&mut f.marks_resend, mark(r.frame), MAX_MARKS);
                    }
                }
                if f.in_burst && d >= 0 {
                    // Past the burst: its last resends, if they never showed, were lost.
                    let n = next.diff(f.burst_next);
                    let acked = f.last_acked.is_some_and(|a| a.diff(f.burst_next) >= 0);
                    if n > 0 && !acked {
                        f.lost_in_burst(f.burst_next, n as u32, ts, mark(r.frame));
                    }
                    f.in_burst = false;
                } else if f.in_burst && psn.diff(f.burst_high) >= 0 {
                    f.in_burst = false;
                }
                if fresh && d >= 0 {
                    f.nak_since_progress = false;
                }
            }
        }
        f.read_skip = 0;
        if o == Operation::RdmaReadRequest
            && let Some(reth) = h.reth
        {
            let mtu = if f.mtu_guess >= 256 { f.mtu_guess } else { 256 };
            f.read_skip = reth.dma_len.div_ceil(mtu).saturating_sub(1);
        }
        if h.reth.is_some() || h.atomic_eth.is_some() {
            if f.remote.len() >= MAX_REMOTE {
                f.remote.pop_front();
            }
            let (rkey, va, len) = match (h.reth, h.atomic_eth) {
                (Some(x), _) => (x.rkey.0, x.va, x.dma_len),
                (None, Some(a)) => (a.rkey.0, a.va, 8),
                _ => (0, 0, 0),
            };
            f.remote.push_back(Remote { psn, ts, frame: r.frame, op: h.bth.opcode, rkey, va, len });
        }
        f.ring[slot] = Slot { psn: psn.get(), ts, ip_id, valid: true };
        if fresh {
            // A message is counted once, not again for each resend of its first packet.
            if o.is_first_or_only()
                && let Some(c) = f.opcodes.get_mut(&h.bth.opcode.0)
            {
                c.messages += 1;
            }
            f.add_goodput(rel, payload);
            f.add_sample(rel, psn.get());
        }
    }

    /// Pairs flow `fi` (carrying responses at `psn`) with the reverse flow whose requests
    /// those are.
    fn pair(&mut self, fi: usize, psn: Psn) -> Option<usize> {
        if let Some(p) = self.flows[fi].peer {
            return Some(p);
        }
        let key = self.flows[fi].key?;
        let sport = self.flows[fi].udp_src_port;
        let best = self
            .unpaired(fi, (key.dst, key.src), Some(Transport::Rc))
            .filter(|&j| self.flows[j].answerable(psn))
            .min_by_key(|&j| {
                let g = &self.flows[j];
                (g.udp_src_port != sport, g.next.map_or(i32::MAX, |n| n.diff(psn).abs()))
            })?;
        self.link(fi, best);
        Some(best)
    }

    /// The flows other than `i`, not yet paired, from `src` to `dst` and of `transport`.
    fn unpaired(
        &self,
        i: usize,
        (src, dst): (IpAddr, IpAddr),
        transport: Option<Transport>,
    ) -> impl Iterator<Item = usize> + '_ {
        self.flows.iter().enumerate().filter_map(move |(j, g)| {
            let fits = j != i
                && g.peer.is_none()
                && g.transport == transport
                && g.key.is_some_and(|k| k.src == src && k.dst == dst);
            fits.then_some(j)
        })
    }

    /// Makes flows `a` and `b` the two directions of one connection.
    fn link(&mut self, a: usize, b: usize) {
        self.flows[a].peer = Some(b);
        self.flows[b].peer = Some(a);
    }

    fn response(
        &mut self,
        fi: usize,
        r: &Record<'_>,
        h: &wire::roce::Repr,
        o: Operation,
        ts: u64,
        rel: u64,
    ) {
        let psn = h.bth.psn;
        let Some(ri) = self.pair(fi, psn) else { return };
        let f = &mut self.flows[ri];
        let mark = Mark { t: rel as f64 / 1e9, psn: psn.get(), frame: r.frame };
        if matches!(o, Operation::RdmaReadResponseFirst | Operation::RdmaReadResponseOnly)
            && let Some(q) = f
                .remote
                .iter()
                .rev()
                .find(|q| q.psn == psn && q.op.operation() == Some(Operation::RdmaReadRequest))
        {
            sample(&mut f.read_latency, ts.saturating_sub(q.ts));
        }
        if matches!(
            o,
            Operation::RdmaReadResponseFirst
                | Operation::RdmaReadResponseMiddle
                | Operation::RdmaReadResponseLast
                | Operation::RdmaReadResponseOnly
        ) {
            f.read_responses += 1;
        }
        if o == Operation::AtomicAcknowledge
            && let Some(q) = f.remote.iter().rev().find(|q| q.psn == psn)
        {
            sample(&mut f.atomic_latency, ts.saturating_sub(q.ts));
        }
        let Some(aeth) = h.aeth else { return };
        match Syndrome::from_raw(aeth.syndrome) {
            Syndrome::Ack(_) => {
                f.acks += 1;
                let newly = f.acknowledge(psn);
                f.acked_packets += newly;
                if newly > 0 {
                    let s = f.ring[(psn.get() as usize) % RING];
                    if s.valid && s.psn == psn.get() && o == Operation::Acknowledge {
                        sample(&mut f.ack_latency, ts.saturating_sub(s.ts));
                    }
                }
            }
            Syndrome::RnrNak(t) => {
                if f.rnr == 0 {
                    f.rnr_first_ns = ts;
                }
                f.rnr += 1;
                f.rnr_last_ns = ts;
                f.rnr_timers.insert(t.0);
                push_capped(&mut f.rnr_frames, r.frame, MAX_EVIDENCE);
                f.pending = Some((Trigger::Rnr, psn));
                f.rnr_psn = Some(psn);
                // Everything before it was received.
                f.acknowledge(psn.add(Psn::MASK));
                f.nak_since_progress = true;
                push_capped(&mut f.marks_nak, mark, MAX_MARKS);
            }
            Syndrome::Nak(code) => {
                let i = match code {
                    NakCode::PsnSequenceError => 0,
                    NakCode::InvalidRequest => 1,
                    NakCode::RemoteAccessError => 2,
                    NakCode::RemoteOperationalError => 3,
                    NakCode::InvalidRdRequest | NakCode::Reserved(_) => 4,
                };
                f.naks[i] += 1;
                push_capped(&mut f.nak_frames[i], r.frame, MAX_EVIDENCE);
                push_capped(&mut f.marks_nak, mark, MAX_MARKS);
                if i == 0 {
                    // Asked for a PSN from before the capture's first: the responder never
                    // had it — missing here as much as a gap.
                    if let Some(first) = f.first_psn
                        && (-(1 << 16)..0).contains(&psn.diff(first))
                    {
                        f.open_gap(psn, first.diff(psn) as u32, ts, mark);
                        f.first_psn = Some(psn);
                    }
                    // The responder expects `psn`: if the capture saw it, it was lost after
                    // — unless the responder refused it with an RNR NAK (the packets behind
                    // it draw sequence errors until it is resent).
                    let after_rnr = f.rnr_psn == Some(psn);
                    let reordered = f.late.contains(&psn);
                    if f.seen_range(psn)
                        && f.in_gap(psn).is_none()
                        && !f.in_burst
                        && !after_rnr
                        && !reordered
                    {
                        f.lost_after += 1;
                    }
                    f.pending = Some((if after_rnr { Trigger::Rnr } else { Trigger::Nak }, psn));
                    f.nak_since_progress = true;
                    f.acknowledge(psn.add(Psn::MASK));
                } else if f.access_evidence.len() < MAX_EVIDENCE {
                    let what = match f
                        .remote
                        .iter()
                        .rev()
                        .find(|q| q.psn.diff(psn) <= 0 && psn.diff(q.psn) < 1 << 16)
                    {
                        Some(q) => format!(
                            "{} PSN {} R_Key {:#x} VA {:#x} length {} (frame {}) answered by NAK {} (frame {})",
                            q.op.name().unwrap_or("request"),
                            q.psn,
                            q.rkey,
                            q.va,
                            q.len,
                            q.frame,
                            nak_name(i),
                            r.frame
                        ),
                        None => format!(
                            "the request at PSN {psn} answered by NAK {} (frame {})",
                            nak_name(i),
                            r.frame
                        ),
                    };
                    f.access_evidence.push(what);
                }
            }
            Syndrome::Reserved(_) => {}
        }
    }

    /// The report.
    pub fn finish(mut self) -> Report {
        let start = self.first_ns.unwrap_or(0);
        let end = self.last_ns;
        // Flows never paired by a response: pair a lone flow with the one reverse flow of its
        // transport (UC, or RC with no response captured), for CNPs and the report.
        for i in 0..self.flows.len() {
            if self.flows[i].peer.is_some() {
                continue;
            }
            let Some(k) = self.flows[i].key else { continue };
            let t = self.flows[i].transport;
            if t == Some(Transport::Ud) {
                continue;
            }
            let back: Vec<usize> = self.unpaired(i, (k.dst, k.src), t).collect();
            let alongside = self.unpaired(i, (k.src, k.dst), t).next();
            if let ([only], None) = (back.as_slice(), alongside) {
                self.link(i, *only);
            }
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
            connections,
            findings,
        }
    }

    fn direction(&self, fi: usize, start: u64, end: u64) -> Direction {
        let f = &self.flows[fi];
        let k = f.key.expect("a flow has a key");
        let sec = |ns: u64| ns.saturating_sub(start) as f64 / 1e9;
        let cnp_from = f.peer.map(|p| &self.flows[p]);
        let cnps = cnp_from.map_or(0, |p| p.cnps);
        let cnp_span = cnp_from.map_or(0, |p| p.cnp_last_ns.saturating_sub(p.cnp_first_ns));
        let unanswered = match (f.transport, f.next, f.first_psn) {
            (Some(Transport::Rc), Some(next), Some(first)) if f.requests > 0 => {
                let last = next.add(Psn::MASK);
                let acked = f.last_acked.map_or(first.add(Psn::MASK), |a| a);
                let heard = f.peer.is_some_and(|p| self.flows[p].packets > 0) || f.resent > 0;
                let silent = end.saturating_sub(f.last_request_ns);
                // Silent for the grace window, or resent from the same PSN again and again.
                let gave_up = silent >= self.cfg.grace_ns || f.bursts_at_head >= 3;
                (last.diff(acked) > 0 && heard && gave_up).then(|| Unanswered {
                    from_psn: acked.add(1).get(),
                    to_psn: last.get(),
                    silent_s: silent as f64 / 1e9,
                    last_frame: f.last_request_frame,
                })
            }
            _ => None,
        };
        let bucket_ms = f.bucket_ns as f64 / 1e6;
        // Goodput buckets run from the capture's start; report from the flow's first packet.
        let skip = (f.first_ns.saturating_sub(start) / f.bucket_ns) as usize;
        Direction {
            src: k.src,
            dst: k.dst,
            dest_qp: k.dest_qp,
            src_qp: (f.transport == Some(Transport::Ud)).then_some(k.src_qp),
            udp_src_port: f.udp_src_port,
            packets: f.packets,
            bytes: f.bytes,
            frames: [f.first_frame, f.last_frame],
            seconds: [sec(f.first_ns), sec(f.last_ns)],
            opcodes: f
                .opcodes
                .iter()
                .map(|(o, c)| {
                    (Opcode(*o).name().map_or(format!("{o:#04x}"), str::to_string), c.clone())
                })
                .collect(),
            requests: f.requests,
            psn: PsnStats {
                gaps: f.gap_count,
                gap_packets: f.gap_packets,
                max_gap: f.max_gap,
                // Without ACKs (UC, UD) a gap is a loss: nothing resends it.
                lost_before_capture: if f.transport == Some(Transport::Rc) {
                    f.lost_before
                } else {
                    f.gap_packets
                },
                lost_after_capture: f.lost_after,
                capture_missed: f.capture_missed,
                out_of_order: f.out_of_order,
                duplicates: f.duplicates,
                resent: f.resent,
                bursts: f.bursts,
                max_burst: f.max_burst,
                burst_after_nak: f.burst_triggers[Trigger::Nak as usize],
                burst_after_rnr: f.burst_triggers[Trigger::Rnr as usize],
                burst_after_timeout: f.burst_triggers[Trigger::Timeout as usize],
            },
            answers: Answers {
                acks: f.acks,
                coalescing: if f.acks > 0 { f.acked_packets as f64 / f.acks as f64 } else { 0.0 },
                naks: Naks {
                    psn_sequence_error: f.naks[0],
                    invalid_request: f.naks[1],
                    remote_access_error: f.naks[2],
                    remote_operational_error: f.naks[3],
                    invalid_rd_request: f.naks[4],
                },
                rnr_naks: f.rnr,
                rnr_timer_ms: f
                    .rnr_timers
                    .iter()
                    .map(|&t| wire::ext::RnrTimer(t).duration().as_secs_f64() * 1e3)
                    .collect(),
                rnr_span_ms: f.rnr_last_ns.saturating_sub(f.rnr_first_ns) as f64 / 1e6,
                read_responses: f.read_responses,
                ack_latency: latency(&f.ack_latency),
                read_latency: latency(&f.read_latency),
                atomic_latency: latency(&f.atomic_latency),
            },
            congestion: Congestion {
                ect: f.ect,
                ce: f.ce,
                cnps,
                // Over the CNPs' own span, or the flow's when there is only one.
                cnp_rate_per_s: match (cnp_span, f.last_ns.saturating_sub(f.first_ns)) {
                    (0, 0) => 0.0,
                    (0, span) | (span, _) => cnps as f64 / (span as f64 / 1e9),
                },
            },
            icrc_failures: f.icrc_bad,
            goodput: Goodput {
                bucket_ms,
                mbit_s: f
                    .goodput
                    .iter()
                    .skip(skip)
                    .map(|&b| b as f64 * 8.0 / (f.bucket_ns as f64 / 1e9) / 1e6)
                    .collect(),
            },
            unanswered,
            samples: f.samples.iter().map(|&(t, p)| (t as f64 / 1e9, p)).collect(),
            marks: [
                f.marks_loss.clone(),
                f.marks_resend.clone(),
                f.marks_nak.clone(),
                self.flows[fi].peer.map_or_else(Vec::new, |p| self.flows[p].marks_cnp.clone()),
            ],
        }
    }

    #[expect(clippy::too_many_lines, reason = "to be split (issue 42)")]
    fn findings_for(&self, id: usize, d: &Direction, fi: usize, cnps: u64, out: &mut Vec<Finding>) {
        let f = &self.flows[fi];
        let flow = d.title();
        let qp = format!("QP {:#x} on {}", d.dest_qp, d.dst);
        let mut add =
            |severity, kind, count: u64, summary: String, cause: String, frames: Vec<u64>| {
                out.push(Finding {
                    severity,
                    kind,
                    connection: id,
                    flow: flow.clone(),
                    summary,
                    cause,
                    count,
                    frames,
                });
            };
        // The NAKs that fail a work request, and what each says about the responder.
        const FAILED: [(usize, &str, &str); 3] = [
            (
                2,
                "access-error",
                "access error (bad R_Key or bounds) — check the MR registration of {qp}: the R_Key, the address range and REMOTE_READ/WRITE/ATOMIC access the requester uses",
            ),
            (
                1,
                "invalid-request",
                "the responder {qp} refused the request as invalid: an opcode its QP does not allow (e.g. RDMA without the access flag), or a message longer than its receive buffer",
            ),
            (
                3,
                "remote-operational-error",
                "the responder {qp} failed to carry out the request (a local error on its side: its QP went to the error state)",
            ),
        ];
        for (i, kind, cause) in FAILED {
            if f.naks[i] > 0 {
                add(
                    Severity::Error,
                    kind,
                    f.naks[i],
                    format!(
                        "{} NAK {}: {}",
                        f.naks[i],
                        nak_name(i),
                        f.access_evidence.first().cloned().unwrap_or_default()
                    ),
                    cause.replace("{qp}", &qp),
                    f.nak_frames[i].clone(),
                );
            }
        }
        if let Some(u) = &d.unanswered {
            add(
                Severity::Error,
                "unanswered",
                u64::from(Psn::new(u.to_psn).diff(Psn::new(u.from_psn)).max(0) as u32 + 1),
                format!(
                    "requests PSN {}..={} never acknowledged; the last one (frame {}) {:.3} s before the capture ends{}",
                    u.from_psn,
                    u.to_psn,
                    u.last_frame,
                    u.silent_s,
                    if d.psn.resent > 0 {
                        format!(", after {} resends", d.psn.resent)
                    } else {
                        String::new()
                    }
                ),
                format!(
                    "the responder {qp} stopped answering (its host, its QP or the path is gone): the requester's retries run out (retry exhausted)"
                ),
                vec![u.last_frame],
            );
        }
        if d.icrc_failures > 0 {
            add(
                Severity::Error,
                "icrc",
                d.icrc_failures,
                format!("{} packets with a bad ICRC", d.icrc_failures),
                "corrupted on the path (a bad cable, optic or port; or a NIC that rewrote the packet after computing its ICRC)".into(),
                f.icrc_frames.clone(),
            );
        }
        let losses = d.psn.lost_before_capture + d.psn.lost_after_capture;
        // Go-back-N resends about a window per loss; a storm is when the resends eat a
        // tenth of the requests or more.
        if d.psn.resent >= 100 && d.psn.resent * 10 >= d.requests {
            add(
                Severity::Warning,
                "retransmission-storm",
                d.psn.resent,
                format!(
                    "retransmission storm: go-back-N resent {} packets ({:.0} % of the requests) for {} losses and {} RNR NAKs ({} bursts, the largest {})",
                    d.psn.resent,
                    d.psn.resent as f64 * 100.0 / d.requests as f64,
                    losses,
                    d.answers.rnr_naks,
                    d.psn.bursts,
                    d.psn.max_burst
                ),
                "every loss or RNR NAK costs a whole window resent: fix the cause (below) or lower the QP's outstanding window".into(),
                f.marks_resend.iter().take(MAX_EVIDENCE).map(|m| m.frame).collect(),
            );
        }
        if d.psn.lost_before_capture > 0 {
            add(
                Severity::Warning,
                "loss",
                d.psn.lost_before_capture,
                format!(
                    "lost packets on the path before this capture point: {} PSN gaps ({} packets, the largest {}) in the requests; {}",
                    d.psn.gaps,
                    d.psn.lost_before_capture,
                    d.psn.max_gap,
                    if f.transport == Some(Transport::Rc) {
                        format!(
                            "resent in {} bursts after a NAK, {} after a timeout",
                            d.psn.burst_after_nak, d.psn.burst_after_timeout
                        )
                    } else {
                        "nothing resends them on this transport: those messages are gone".into()
                    }
                ),
                "packets dropped between the sender and this capture point (congestion without PFC, a bad link, a switch buffer): look at the switch ports' discard counters and the NIC's out_of_sequence counter".into(),
                f.marks_loss.iter().take(MAX_EVIDENCE).map(|m| m.frame).collect(),
            );
        }
        if d.psn.lost_after_capture > 0 {
            add(
                Severity::Warning,
                "loss-after-capture",
                d.psn.lost_after_capture,
                format!(
                    "lost packets on the path after this capture point: the responder NAKed {} PSNs (sequence error) that this capture saw",
                    d.psn.lost_after_capture
                ),
                "packets dropped between this capture point and the responder".into(),
                f.nak_frames[0].clone(),
            );
        }
        if d.answers.rnr_naks > 0 {
            add(
                Severity::Warning,
                "rnr",
                d.answers.rnr_naks,
                format!(
                    "{} RNR NAKs over {:.1} ms (timer {:?} ms)",
                    d.answers.rnr_naks, d.answers.rnr_span_ms, d.answers.rnr_timer_ms
                ),
                format!(
                    "receiver not ready (RNR NAK, empty receive queue): {qp} had no receive posted when SENDs arrived — post receives earlier or deeper"
                ),
                f.rnr_frames.clone(),
            );
        }
        if d.congestion.ce > 0 && cnps > 0 {
            add(
                Severity::Warning,
                "congestion",
                d.congestion.ce,
                format!(
                    "{} packets CE-marked, {} CNPs back to the sender ({:.0}/s)",
                    d.congestion.ce, cnps, d.congestion.cnp_rate_per_s
                ),
                format!(
                    "congestion on the path to {}: switches marked CE and the receiver throttled the sender with CNPs (DCQCN)",
                    d.dst
                ),
                f.ce_frames.clone(),
            );
        } else if d.congestion.ce > 0 {
            add(
                Severity::Warning,
                "ce-without-cnp",
                d.congestion.ce,
                format!("{} packets CE-marked and no CNP answered them", d.congestion.ce),
                format!(
                    "CE seen, no CNP: the receiver {} does not send CNPs (no DCQCN notification point: Linux rxe sends none), so the sender is not throttled",
                    d.dst
                ),
                f.ce_frames.clone(),
            );
        }
        if d.psn.capture_missed > 0 {
            add(
                Severity::Warning,
                "capture-missed",
                d.psn.capture_missed,
                format!(
                    "{} packets absent from the capture were acknowledged by the responder",
                    d.psn.capture_missed
                ),
                "a capture point that missed packets (gaps the endpoints did not see): the capture's own drops (snap buffer, mirror rate limit), not the network".into(),
                f.marks_loss.iter().take(MAX_EVIDENCE).map(|m| m.frame).collect(),
            );
        }
        if d.psn.burst_after_timeout > 0 && d.psn.lost_before_capture == 0 && d.unanswered.is_none()
        {
            add(
                Severity::Warning,
                "timeout-resends",
                d.psn.burst_after_timeout,
                format!("{} resend bursts after the requester's timeout, with no loss seen here", d.psn.burst_after_timeout),
                "the ACKs came late or were lost on the way back (or the ACK timeout is shorter than the path's round trip)".into(),
                f.marks_resend.iter().take(MAX_EVIDENCE).map(|m| m.frame).collect(),
            );
        }
        if d.psn.out_of_order > 0 {
            add(
                Severity::Info,
                "out-of-order",
                d.psn.out_of_order,
                format!("{} packets arrived out of order", d.psn.out_of_order),
                "reordering on the path (flows split across ECMP paths, or a mirror that merges ports)".into(),
                Vec::new(),
            );
        }
        if d.psn.duplicates > 0 {
            add(
                Severity::Info,
                "duplicates",
                d.psn.duplicates,
                format!("{} packets seen twice (same PSN and IP Identification)", d.psn.duplicates),
                "duplicated on the path or by the capture (a mirror of both ports of a link)"
                    .into(),
                Vec::new(),
            );
        }
    }
}

fn nak_name(i: usize) -> &'static str {
    [
        "PSN sequence error",
        "invalid request",
        "remote access error",
        "remote operational error",
        "invalid RD request",
    ][i]
}

impl Report {
    /// The terminal summary: one block per connection, then the findings, worst first.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{} frames, {} RoCEv2 packets, {} connections over {}{}",
            self.frames,
            self.roce,
            self.connections.len(),
            seconds(self.duration_s),
            if self.undecodable > 0 {
                format!(" ({} packets cut short)", self.undecodable)
            } else {
                String::new()
            }
        );
        for c in &self.connections {
            let _ = writeln!(o, "\n#{} {}", c.id, c.transport);
            for d in &c.directions {
                let _ = writeln!(
                    o,
                    "  {}: {} packets, {} bytes, {} requests",
                    d.title(),
                    d.packets,
                    d.bytes,
                    d.requests
                );
                let ops: Vec<String> =
                    d.opcodes.iter().map(|(n, c)| format!("{n} {}", c.packets)).collect();
                let _ = writeln!(o, "    opcodes: {}", ops.join(", "));
                let p = &d.psn;
                if p.gaps
                    + p.resent
                    + p.duplicates
                    + p.out_of_order
                    + p.capture_missed
                    + p.lost_after_capture
                    > 0
                {
                    let _ = writeln!(
                        o,
                        "    psn: {} gaps ({} packets, max {}), lost {} before / {} after the capture point, {} missed by the capture, {} resent in {} bursts (max {}; after NAK {}, RNR {}, timeout {}), {} out of order, {} duplicates",
                        p.gaps,
                        p.gap_packets,
                        p.max_gap,
                        p.lost_before_capture,
                        p.lost_after_capture,
                        p.capture_missed,
                        p.resent,
                        p.bursts,
                        p.max_burst,
                        p.burst_after_nak,
                        p.burst_after_rnr,
                        p.burst_after_timeout,
                        p.out_of_order,
                        p.duplicates
                    );
                }
                let a = &d.answers;
                if a.acks > 0 || a.rnr_naks > 0 || a.read_responses > 0 {
                    let n = &a.naks;
                    let _ = writeln!(
                        o,
                        "    answers: {} ACKs ({:.1} packets each), NAKs: {} sequence, {} invalid, {} access, {} operational; {} RNR NAKs",
                        a.acks,
                        a.coalescing,
                        n.psn_sequence_error,
                        n.invalid_request,
                        n.remote_access_error,
                        n.remote_operational_error,
                        a.rnr_naks
                    );
                }
                for (what, l) in [
                    ("ACK", &a.ack_latency),
                    ("READ", &a.read_latency),
                    ("atomic", &a.atomic_latency),
                ] {
                    if let Some(l) = l {
                        let _ = writeln!(
                            o,
                            "    {what} latency: {} samples, min {:.1} / p50 {:.1} / p99 {:.1} / max {:.1} us",
                            l.count, l.min_us, l.p50_us, l.p99_us, l.max_us
                        );
                    }
                }
                let gp = &d.goodput.mbit_s;
                if gp.iter().any(|&x| x > 0.0) {
                    let peak = gp.iter().copied().fold(0.0, f64::max);
                    let span = (d.seconds[1] - d.seconds[0]).max(1e-9);
                    // First transmissions only: what the buckets hold.
                    let mean = gp.iter().sum::<f64>() * (d.goodput.bucket_ms / 1e3) / span;
                    let _ = writeln!(
                        o,
                        "    goodput: peak {peak:.1} Mbit/s ({} ms buckets), {mean:.1} Mbit/s over its {}",
                        d.goodput.bucket_ms,
                        seconds(span)
                    );
                }
                let g = &d.congestion;
                if g.ce + g.cnps > 0 {
                    let _ = writeln!(
                        o,
                        "    congestion: {} CE-marked of {} ECT, {} CNPs back ({:.0}/s)",
                        g.ce, g.ect, g.cnps, g.cnp_rate_per_s
                    );
                }
                if d.icrc_failures > 0 {
                    let _ = writeln!(o, "    ICRC failures: {}", d.icrc_failures);
                }
            }
        }
        let _ = writeln!(o);
        if self.findings.is_empty() {
            let _ = writeln!(o, "no findings");
        }
        // Three of a kind are shown; the rest of that kind are counted (--json has them all).
        let mut shown: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        let mut number = 0;
        for f in &self.findings {
            let n = shown.entry(f.kind).or_default();
            *n += 1;
            if *n > 3 {
                continue;
            }
            number += 1;
            let sev = match f.severity {
                Severity::Error => "ERROR",
                Severity::Warning => "WARN",
                Severity::Info => "info",
            };
            let _ = writeln!(
                o,
                "{number}. {sev} {} (#{} {}): {}",
                f.kind, f.connection, f.flow, f.summary
            );
            let _ = writeln!(o, "   cause: {}", f.cause);
            if !f.frames.is_empty() {
                let fr: Vec<String> = f.frames.iter().map(u64::to_string).collect();
                let _ = writeln!(o, "   frames: {}", fr.join(", "));
            }
        }
        for (kind, n) in shown.iter().filter(|(_, n)| **n > 3) {
            let _ = writeln!(
                o,
                "   … and {} more {kind} findings on other connections (--json lists them)",
                n - 3
            );
        }
        o
    }
}

/// A duration for people: s, ms or µs, whichever reads best.
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}
