//! From a flow's counts, a reported direction and its findings.

use wire::{Opcode, Psn, Transport};

use super::flow::*;
use super::text::nak_name;
use super::*;

impl Analyzer {
    pub(super) fn direction(&self, fi: usize, start: u64, end: u64) -> Direction {
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

    pub(super) fn findings_for(
        &self,
        id: usize,
        d: &Direction,
        fi: usize,
        cnps: u64,
        out: &mut Vec<Finding>,
    ) {
        let f = &self.flows[fi];
        let qp = format!("QP {:#x} on {}", d.dest_qp, d.dst);
        let mut e = Emit { out, connection: id, flow: d.title() };
        failures(f, d, &qp, &mut e);
        troubles(f, d, &qp, cnps, &mut e);
    }
}

/// Where a flow's findings go, each under its connection and flow.
struct Emit<'a> {
    out: &'a mut Vec<Finding>,
    connection: usize,
    flow: String,
}

impl Emit<'_> {
    fn add(
        &mut self,
        severity: Severity,
        kind: &'static str,
        count: u64,
        summary: String,
        cause: String,
        frames: Vec<u64>,
    ) {
        self.out.push(Finding {
            severity,
            kind,
            connection: self.connection,
            flow: self.flow.clone(),
            summary,
            cause,
            count,
            frames,
        });
    }
}

/// The errors: requests the responder refused or never answered, packets corrupted.
fn failures(f: &Flow, d: &Direction, qp: &str, e: &mut Emit<'_>) {
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
            e.add(
                Severity::Error,
                kind,
                f.naks[i],
                format!(
                    "{} NAK {}: {}",
                    f.naks[i],
                    nak_name(i),
                    f.access_evidence.first().cloned().unwrap_or_default()
                ),
                cause.replace("{qp}", qp),
                f.nak_frames[i].clone(),
            );
        }
    }
    if let Some(u) = &d.unanswered {
        e.add(
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
        e.add(
            Severity::Error,
            "icrc",
            d.icrc_failures,
            format!("{} packets with a bad ICRC", d.icrc_failures),
            "corrupted on the path (a bad cable, optic or port; or a NIC that rewrote the packet after computing its ICRC)".into(),
            f.icrc_frames.clone(),
        );
    }
}

/// The warnings and notes: resends, losses on either side of the capture point, RNR,
/// congestion, what the capture itself missed, reordering, duplicates.
fn troubles(f: &Flow, d: &Direction, qp: &str, cnps: u64, e: &mut Emit<'_>) {
    let losses = d.psn.lost_before_capture + d.psn.lost_after_capture;
    // Go-back-N resends about a window per loss; a storm is when the resends eat a
    // tenth of the requests or more.
    if d.psn.resent >= 100 && d.psn.resent * 10 >= d.requests {
        e.add(
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
        e.add(
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
        e.add(
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
        e.add(
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
        e.add(
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
        e.add(
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
        e.add(
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
    if d.psn.burst_after_timeout > 0 && d.psn.lost_before_capture == 0 && d.unanswered.is_none() {
        e.add(
            Severity::Warning,
            "timeout-resends",
            d.psn.burst_after_timeout,
            format!("{} resend bursts after the requester's timeout, with no loss seen here", d.psn.burst_after_timeout),
            "the ACKs came late or were lost on the way back (or the ACK timeout is shorter than the path's round trip)".into(),
            f.marks_resend.iter().take(MAX_EVIDENCE).map(|m| m.frame).collect(),
        );
    }
    if d.psn.out_of_order > 0 {
        e.add(
            Severity::Info,
            "out-of-order",
            d.psn.out_of_order,
            format!("{} packets arrived out of order", d.psn.out_of_order),
            "reordering on the path (flows split across ECMP paths, or a mirror that merges ports)"
                .into(),
            Vec::new(),
        );
    }
    if d.psn.duplicates > 0 {
        e.add(
            Severity::Info,
            "duplicates",
            d.psn.duplicates,
            format!("{} packets seen twice (same PSN and IP Identification)", d.psn.duplicates),
            "duplicated on the path or by the capture (a mirror of both ports of a link)".into(),
            Vec::new(),
        );
    }
}
