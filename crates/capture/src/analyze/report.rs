//! What the analyzer reports: connections, their directions, findings.

use std::net::IpAddr;

use serde::Serialize;

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
    /// RoCEv2 packets of flows past the flows tracked ([`super::MAX_FLOWS`]): counted, not
    /// analyzed.
    pub untracked: u64,
    /// Frames whose timestamp went back before an earlier frame's (a clock step in the
    /// capture): each taken at the latest time seen.
    pub clock_steps_back: u64,
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
