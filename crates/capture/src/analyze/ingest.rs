//! Ingest: each record in capture order, a request or a response on its flow.

use std::net::IpAddr;

use wire::ext::{NakCode, Syndrome};
use wire::{Opcode, Operation, Psn, Transport};

use super::flow::*;
use super::text::nak_name;
use super::*;

impl Analyzer {
    /// Takes one RoCEv2 record.
    pub fn record(&mut self, r: &Record<'_>) {
        self.roce += 1;
        let Some(h) = &r.headers else {
            self.undecodable += 1;
            return;
        };
        // Capture time never runs backwards here (a clock step is counted in `frame`).
        let ts = r.ts_ns.map_or(self.last_ns, |t| t.max(self.last_ns));
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
        let Some(fi) = self.flow(key, r.edge.udp.src_port) else {
            self.untracked += 1;
            return;
        };
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
            Some(o) => self.request(fi, r, h, o, (ts, rel), payload),
            None => {}
        }
    }

    /// A request on flow `fi`, captured at `ts` (`rel` after the capture's first frame),
    /// carrying `payload` bytes.
    pub(super) fn request(
        &mut self,
        fi: usize,
        r: &Record<'_>,
        h: &wire::roce::Repr,
        o: Operation,
        (ts, rel): (u64, u64),
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
                    let s = f.slot(psn.get());
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
                        f.set_slot(Slot { psn: psn.get(), ts, ip_id, valid: true });
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
        f.set_slot(Slot { psn: psn.get(), ts, ip_id, valid: true });
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
    pub(super) fn pair(&mut self, fi: usize, psn: Psn) -> Option<usize> {
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

    /// The flows other than `i`, not yet paired, from `src` to `dst` and of `transport`: the
    /// latest [`MAX_PAIR_CANDIDATES`] of them.
    pub(super) fn unpaired(
        &self,
        i: usize,
        (src, dst): (IpAddr, IpAddr),
        transport: Option<Transport>,
    ) -> impl Iterator<Item = usize> + '_ {
        let there = self.by_ends.get(&(src, dst));
        there.into_iter().flat_map(|s| s.iter().rev()).take(MAX_PAIR_CANDIDATES).copied().filter(
            move |&j| {
                let g = &self.flows[j];
                j != i && g.peer.is_none() && g.transport == transport
            },
        )
    }

    pub(super) fn link(&mut self, a: usize, b: usize) {
        self.flows[a].peer = Some(b);
        self.flows[b].peer = Some(a);
        // Paired flows are no one's candidates any more.
        for i in [a, b] {
            if let Some(k) = self.flows[i].key
                && let Some(v) = self.by_ends.get_mut(&(k.src, k.dst))
            {
                v.remove(&i);
            }
        }
    }

    pub(super) fn response(
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
                    let s = f.slot(psn.get());
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
}
