//! The terminal summary.

use super::*;

pub(super) fn nak_name(i: usize) -> &'static str {
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
        if self.untracked > 0 {
            let _ = writeln!(
                o,
                "{} RoCEv2 packets of flows past the first {} were counted, not analyzed",
                self.untracked,
                super::MAX_FLOWS
            );
        }
        if self.clock_steps_back > 0 {
            let _ = writeln!(
                o,
                "{} frames' timestamps went back in time (the capture's clock stepped): each was \
                 taken at the latest time before it",
                self.clock_steps_back
            );
        }
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
                let span = d.seconds[1] - d.seconds[0];
                if gp.iter().any(|&x| x > 0.0) && span * 1e3 < d.goodput.bucket_ms {
                    // Shorter than one bucket (a packet or a burst): no rate to speak of.
                    let _ = writeln!(
                        o,
                        "    goodput: {} bytes within {} (shorter than a {} ms bucket: no rate)",
                        d.bytes,
                        seconds(span.max(0.0)),
                        d.goodput.bucket_ms
                    );
                } else if gp.iter().any(|&x| x > 0.0) {
                    let peak = gp.iter().copied().fold(0.0, f64::max);
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
