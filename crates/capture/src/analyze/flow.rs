//! A flow: one direction to one QP — its requests, the responses to its peer's, and what
//! the analyzer keeps of them.

use std::collections::VecDeque;
use std::net::IpAddr;

use hdrhistogram::Histogram;
use wire::{Opcode, Psn, Transport};

use super::*;

/// A flow's identity: one direction to one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct FlowKey {
    pub(super) src: IpAddr,
    pub(super) dst: IpAddr,
    pub(super) dest_qp: u32,
    /// UD's source QP (from the DETH); 0 otherwise.
    pub(super) src_qp: u32,
}

/// What made a go-back-N burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    Nak,
    Rnr,
    Timeout,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Gap {
    pub(super) start: Psn,
    pub(super) len: u32,
    pub(super) opened_ns: u64,
    /// PSNs of it still missing.
    pub(super) missing: u32,
    /// Its PSNs lost again: resends of them that never showed.
    pub(super) again: u32,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slot {
    pub(super) psn: u32,
    pub(super) ts: u64,
    pub(super) ip_id: Option<u16>,
    pub(super) valid: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Remote {
    pub(super) psn: Psn,
    pub(super) ts: u64,
    pub(super) frame: u64,
    pub(super) op: Opcode,
    pub(super) rkey: u32,
    pub(super) va: u64,
    pub(super) len: u32,
}

pub(super) fn latency(h: &Option<Box<Histogram<u64>>>) -> Option<Latency> {
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

pub(super) fn sample(h: &mut Option<Box<Histogram<u64>>>, ns: u64) {
    let h = h.get_or_insert_with(|| {
        Box::new(Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid bounds"))
    });
    let _ = h.record(ns.max(1));
}

#[derive(Debug, Default)]
pub(super) struct Flow {
    pub(super) key: Option<FlowKey>,
    pub(super) transport: Option<Transport>,
    pub(super) udp_src_port: u16,
    pub(super) peer: Option<usize>,
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) first_frame: u64,
    pub(super) last_frame: u64,
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
    pub(super) opcodes: std::collections::BTreeMap<u8, OpcodeCount>,
    // Requests.
    pub(super) requests: u64,
    pub(super) first_psn: Option<Psn>,
    pub(super) next: Option<Psn>,
    pub(super) read_skip: u32,
    pub(super) mtu_guess: u32,
    pub(super) gaps: VecDeque<Gap>,
    pub(super) gaps_untracked: u64,
    pub(super) gap_count: u64,
    pub(super) gap_packets: u64,
    pub(super) max_gap: u32,
    pub(super) lost_before: u64,
    pub(super) lost_after: u64,
    pub(super) capture_missed: u64,
    pub(super) out_of_order: u64,
    pub(super) duplicates: u64,
    pub(super) resent: u64,
    pub(super) bursts: u64,
    pub(super) burst_triggers: [u64; 3],
    pub(super) in_burst: bool,
    pub(super) burst_start: Option<Psn>,
    /// The PSN the burst's next resend should carry (a skip is a resend lost on the way).
    pub(super) burst_next: Psn,
    /// Bursts from the same unacknowledged PSN, with no ACK between: the requester's retries.
    pub(super) bursts_at_head: u32,
    pub(super) burst_high: Psn,
    pub(super) burst_len: u64,
    pub(super) max_burst: u64,
    /// The NAK or RNR NAK seen since the last burst, and the PSN it asked for.
    pub(super) pending: Option<(Trigger, Psn)>,
    /// The newest IPv4 Identification of this flow's requests, and how many of them came
    /// with a newer one than the one before (a sender that numbers its packets in order:
    /// rxe, Linux's stack; not podnet's soft device, which sends 0): an older one on a late
    /// packet marks it as the original, not a resend.
    pub(super) newest_id: Option<u16>,
    pub(super) ids_rising: u64,
    /// PSNs lately counted lost because a resend filled them: a late original of one of
    /// them shows the loss was reordering.
    pub(super) filled: VecDeque<Psn>,
    /// PSNs lately seen out of order: the responder may NAK one (it came after the next),
    /// which is reordering, not loss after the capture point.
    pub(super) late: VecDeque<Psn>,
    /// The PSN of the last RNR NAK, until an ACK moves past it: the sequence-error NAKs
    /// that follow for the packets behind it are its echo, not loss.
    pub(super) rnr_psn: Option<Psn>,
    pub(super) nak_since_progress: bool,
    pub(super) last_request_ns: u64,
    pub(super) last_request_frame: u64,
    pub(super) ring: Vec<Slot>,
    pub(super) remote: VecDeque<Remote>,
    pub(super) goodput: Vec<u64>,
    pub(super) bucket_ns: u64,
    // What came back for the requests (counted on the requests' flow).
    pub(super) acks: u64,
    pub(super) acked_packets: u64,
    pub(super) last_acked: Option<Psn>,
    pub(super) naks: [u64; 5],
    pub(super) nak_frames: [Vec<u64>; 5],
    pub(super) access_evidence: Vec<String>,
    pub(super) rnr: u64,
    pub(super) rnr_timers: std::collections::BTreeSet<u8>,
    pub(super) rnr_first_ns: u64,
    pub(super) rnr_last_ns: u64,
    pub(super) rnr_frames: Vec<u64>,
    pub(super) ack_latency: Option<Box<Histogram<u64>>>,
    pub(super) read_latency: Option<Box<Histogram<u64>>>,
    pub(super) atomic_latency: Option<Box<Histogram<u64>>>,
    pub(super) read_responses: u64,
    // Marks on this flow's packets.
    pub(super) ce: u64,
    pub(super) ce_frames: Vec<u64>,
    pub(super) ect: u64,
    pub(super) cnps: u64,
    pub(super) cnp_first_ns: u64,
    pub(super) cnp_last_ns: u64,
    pub(super) icrc_bad: u64,
    pub(super) icrc_frames: Vec<u64>,
    // The timeline.
    pub(super) samples: Vec<(u64, u32)>,
    pub(super) sample_every: u64,
    pub(super) marks_loss: Vec<Mark>,
    pub(super) marks_resend: Vec<Mark>,
    pub(super) marks_nak: Vec<Mark>,
    pub(super) marks_cnp: Vec<Mark>,
}

/// Remembers `psn` among the last [`MAX_GAPS`].
pub(super) fn push_recent(v: &mut VecDeque<Psn>, psn: Psn) {
    if v.len() >= MAX_GAPS {
        v.pop_front();
    }
    v.push_back(psn);
}

pub(super) fn push_capped<T>(v: &mut Vec<T>, x: T, cap: usize) {
    if v.len() < cap {
        v.push(x);
    }
}

impl Flow {
    pub(super) fn new(key: FlowKey, udp_src_port: u16) -> Flow {
        Flow {
            key: Some(key),
            udp_src_port,
            ring: Vec::new(),
            bucket_ns: 1_000_000,
            sample_every: 1,
            ..Flow::default()
        }
    }

    /// Whether `psn` is among the requests seen: at or after the first and before the next.
    pub(super) fn seen_range(&self, psn: Psn) -> bool {
        match (self.first_psn, self.next) {
            (Some(f), Some(n)) => psn.diff(f) >= 0 && psn.diff(n) < 0,
            _ => false,
        }
    }

    /// Records PSNs `start` .. `start + len` as missing here, seen at `ts`.
    pub(super) fn open_gap(&mut self, start: Psn, len: u32, ts: u64, mark: Mark) {
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
    pub(super) fn lost_in_burst(&mut self, start: Psn, len: u32, ts: u64, mark: Mark) {
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
    pub(super) fn acknowledge(&mut self, psn: Psn) -> u64 {
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
    pub(super) fn answerable(&self, psn: Psn) -> bool {
        match (self.first_psn, self.next) {
            (Some(f), Some(n)) => psn.diff(f) >= -(1 << 16) && psn.diff(n) < 0,
            _ => false,
        }
    }

    pub(super) fn in_gap(&self, psn: Psn) -> Option<usize> {
        self.gaps.iter().position(|g| {
            let d = psn.diff(g.start);
            d >= 0 && (d as u32) < g.len
        })
    }

    /// The ring's slot for `psn` (empty where the ring is still smaller than the PSNs it
    /// would need: a flow's memory grows with its requests, up to [`RING`] slots).
    pub(super) fn slot(&self, psn: u32) -> Slot {
        match self.ring.len() {
            0 => Slot::default(),
            n => self.ring[psn as usize % n],
        }
    }

    /// Keeps `s` in the ring at its PSN, growing the ring (doubling, re-placing what it
    /// holds) while the flow's requests outnumber its slots.
    pub(super) fn set_slot(&mut self, s: Slot) {
        let want = (self.requests as usize).next_power_of_two().clamp(8, RING);
        if self.ring.len() < want {
            let mut grown = vec![Slot::default(); want];
            for old in self.ring.iter().filter(|o| o.valid) {
                grown[old.psn as usize % want] = *old;
            }
            self.ring = grown;
        }
        let n = self.ring.len();
        self.ring[s.psn as usize % n] = s;
    }

    pub(super) fn add_goodput(&mut self, rel_ns: u64, bytes: u64) {
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

    pub(super) fn add_sample(&mut self, rel_ns: u64, psn: u32) {
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
