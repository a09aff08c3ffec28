//! The requester: what goes out of the send queue — segmentation, PSNs, AckReq, the
//! retransmit and RNR timers, go-back-N.

use wire::bth;
use wire::ext::{AtomicEth, Deth, ImmDt, Reth};
use wire::{Opcode, Operation, Psn, Qpn, Transport, roce};

use verbs::{Counters, QpState, QpType, SendOp, WcStatus};

use crate::memory::Memory;
use crate::time::Instant;

use super::*;

impl<M: Memory> Endpoint<M> {
    /// The next packet to send, if any: control packets first, then each QP's responder
    /// output and requester packets, round-robin.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        // QPs that waited for the device's READ or send window: some of it came back.
        if !self.dev.cqs.read_waiters.is_empty()
            && self.dev.cqs.read_inflight < self.cfg.read_window
        {
            for qpn in std::mem::take(&mut self.dev.cqs.read_waiters) {
                self.mark(qpn);
            }
        }
        if !self.dev.cqs.send_waiters.is_empty()
            && self.dev.cqs.send_inflight < self.cfg.send_window_device
        {
            for qpn in std::mem::take(&mut self.dev.cqs.send_waiters) {
                self.mark(qpn);
            }
        }
        if let Some(t) = self.ctrl.pop_front() {
            self.dev.counters.sent_pkts += 1;
            return Some(t);
        }
        // Each QP in the queue gets one chance per call; one that sent goes to the back
        // (round-robin), one with nothing to send leaves until something concerns it again.
        for _ in 0..self.active.len() {
            let qpn = self.active.pop_front()?;
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            qp.queued = false;
            // A plain ACK lets one request of its QP go first: when both leave in one batch
            // (a reply posted right after a receive completed), the peer takes the request —
            // what its application waits for — before the ACK, not after it. Once only, so
            // a stream of requests never holds an ACK back for more than one packet.
            let ack_first = qp.resp.ack_waited
                || !matches!(
                    qp.resp.resp_out.front(),
                    Some(RespOut::Ack { syndrome: ACK_SYNDROME, .. })
                );
            let (t, ack_waited) = if ack_first {
                (self.next_response(qpn).or_else(|| self.next_request(qpn, now)), false)
            } else {
                match self.next_request(qpn, now) {
                    Some(t) => (Some(t), true),
                    None => (self.next_response(qpn), false),
                }
            };
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.resp.ack_waited = ack_waited;
            }
            if let Some(t) = t {
                self.mark(qpn);
                self.dev.counters.sent_pkts += 1;
                return Some(t);
            }
        }
        None
    }

    pub(super) fn next_request(&mut self, qpn: Qpn, now: Instant) -> Option<Transmit> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.state != QpState::Rts
            || qp.req.rnr_until.is_some()
            || qp.req.next_psn == qp.req.post_psn
        {
            return None;
        }
        let mtu = qp.mtu();
        let (i, d) = qp.req.wqe_of_next_psn()?;
        let w = &qp.req.sq[i];
        let retransmit = qp.req.next_psn.diff(qp.req.resend_until) < 0;
        // An RC SEND or WRITE packet goes out only inside the QP's send window (an ACK
        // reopens it: the QP is marked when one arrives) and the device's, unless the QP has
        // nothing in flight (it waits to be marked when the device's opens).
        let is_read_or_atomic = w.is_read_or_atomic();
        if qp.qp_type == QpType::Rc && !is_read_or_atomic {
            let out = qp.req.next_psn.diff(qp.req.una);
            if out >= qp.req.send_window as i32 {
                return None;
            }
            if out > 0 && self.dev.cqs.send_inflight >= self.cfg.send_window_device {
                if !self.dev.cqs.send_waiters.contains(&qpn) {
                    self.dev.cqs.send_waiters.push(qpn);
                }
                return None;
            }
        }
        // A new READ or atomic request goes out only while fewer than max_rd_atomic are
        // unanswered (the responder keeps that many for replays); one asked again is a
        // replay, with the bounds it first had, so that it is one the responder keeps.
        let mut resend_end = None;
        if is_read_or_atomic {
            let una = qp.req.una;
            while qp.req.rd_out.front().is_some_and(|end| una.diff(*end) >= 0) {
                qp.req.rd_out.pop_front();
            }
            if retransmit {
                resend_end =
                    qp.req.rd_out.iter().find(|end| end.diff(qp.req.next_psn) > 0).copied();
            } else if qp.req.rd_out.len() >= usize::from(qp.attr.max_rd_atomic.max(1)) {
                return None;
            }
        }
        let psn = qp.req.next_psn;
        let (dest_ip, dest_qpn) = match (qp.qp_type, w.wr.ud, qp.attr.dest) {
            (QpType::Ud, Some(ud), _) => (ud.ip, ud.qpn),
            (_, _, Some(p)) => (p.ip, p.qpn),
            _ => return None,
        };
        let transport = transport_of(qp.qp_type);
        let is_read = matches!(w.wr.op, SendOp::Read { .. });
        let mut b = bth::Repr::new(Opcode::new(transport, Operation::SendFirst), dest_qpn, psn);
        let mut gather_at = None;
        let mut consumed = 1u32;
        let mut last_of_wqe = false;
        let signaled = w.wr.signaled;
        let mut r;
        match w.wr.op {
            SendOp::Send
            | SendOp::SendWithImm(_)
            | SendOp::Write { .. }
            | SendOp::WriteWithImm { .. } => {
                let (repr, last, at) = data_packet(qp, w, d, mtu, b);
                (r, last_of_wqe, gather_at) = (repr, last, Some(at));
            }
            SendOp::Read { remote_addr, rkey } => {
                // As much of the rest as the QP's and the device's READ windows allow; asked
                // again, what was asked first (those responses are counted already).
                let n = match resend_end {
                    Some(end) => (end.diff(psn).max(1) as u32).min(w.npkts - d),
                    None => read_credit(qp, &self.dev.cqs, &self.cfg, w.npkts - d),
                };
                if n == 0 {
                    if !self.dev.cqs.read_waiters.contains(&qpn) {
                        self.dev.cqs.read_waiters.push(qpn);
                    }
                    return None;
                }
                let off = u64::from(d) * mtu;
                b.opcode = Opcode::new(Transport::Rc, Operation::RdmaReadRequest);
                r = roce::Repr::new(b);
                let rest = w.len - off.min(w.len);
                r.reth = Some(Reth {
                    va: remote_addr + off,
                    rkey,
                    dma_len: rest.min(u64::from(n) * mtu) as u32,
                });
                consumed = n;
            }
            SendOp::CompareSwap { remote_addr, rkey, compare, swap } => {
                b.opcode = Opcode::new(Transport::Rc, Operation::CompareSwap);
                r = roce::Repr::new(b);
                r.atomic_eth = Some(AtomicEth { va: remote_addr, rkey, swap_add: swap, compare });
            }
            SendOp::FetchAdd { remote_addr, rkey, add } => {
                b.opcode = Opcode::new(Transport::Rc, Operation::FetchAdd);
                r = roce::Repr::new(b);
                r.atomic_eth = Some(AtomicEth { va: remote_addr, rkey, swap_add: add, compare: 0 });
            }
        }
        if qp.qp_type == QpType::Rc {
            qp.req.packets_since_ackreq += 1;
            // During a go-back-N restart every packet asks for an ACK: any one that returns
            // proves progress, so a lost ACK does not cost a retry.
            // Twice a send window at least, and the packet that fills it: else a window
            // smaller than ack_req_every would wait for the retransmit timer to learn it was
            // received.
            let every = self.cfg.ack_req_every.min((qp.req.send_window / 2).max(1));
            // The packet that fills the QP's window or the device's: the QPs that wait
            // behind it learn of its ACK, not of the retransmit timer.
            let fills = psn.diff(qp.req.una) + 1 >= qp.req.send_window as i32
                || (!is_read_or_atomic
                    && self.dev.cqs.send_inflight + mtu >= self.cfg.send_window_device);
            // The end of a message asks for an ACK when the application will look for its
            // completion (a signaled WQE), and at least every UNSIGNALED_ACK_EVERY messages:
            // an unsignaled message's ACK only frees its slot, which the next ACK does as
            // well (ACKs are cumulative), so a latency loop that signals one send in 16 costs
            // its peer one ACK in 16, not one per message.
            let end_asks =
                last_of_wqe && (signaled || qp.req.wqes_since_ackreq + 1 >= UNSIGNALED_ACK_EVERY);
            if last_of_wqe {
                qp.req.wqes_since_ackreq += 1;
            }
            if is_read_or_atomic
                || end_asks
                || retransmit
                || fills
                || qp.req.packets_since_ackreq >= every
            {
                r.bth.ack_req = true;
                qp.req.packets_since_ackreq = 0;
                qp.req.wqes_since_ackreq = 0;
            }
        }
        let t = match gather_at {
            None => packet(&mut self.bufs, qp, dest_ip, &r, &[])?,
            Some((off, chunk)) => {
                let (mrs, mem, wqe) = (&self.dev.mrs, &self.dev.mem, &qp.req.sq[i]);
                let t =
                    packet_with(&mut self.bufs, qp, dest_ip, &r, chunk, |buf| match &wqe.inline {
                        Some(data) => {
                            let at = off as usize;
                            match data.get(at..at + buf.len()) {
                                Some(src) => {
                                    buf.copy_from_slice(src);
                                    true
                                }
                                None => false,
                            }
                        }
                        None => gather(mrs, mem, &wqe.wr.sgl, off, buf),
                    });
                match t {
                    Some(t) => t,
                    None => {
                        // A local key, bound or region that is gone: the WQE fails here.
                        let wqe = qp.req.sq.remove(i)?;
                        self.dev.cqs[qp.send_cq.0 as usize].push_back(wc(
                            qp,
                            wqe.wr.wr_id,
                            WcStatus::LocProtErr,
                            wqe.wr.op.wc_opcode(),
                            0,
                        ));
                        Self::flush(&mut self.dev.cqs, qp);
                        return None;
                    }
                }
            }
        };
        // A UD datagram leaves from the port its address handle's flow label gives (a probe
        // walking ECMP paths), or the QP's own.
        let mut t = t;
        if let (QpType::Ud, Some(ud)) = (qp.qp_type, w.wr.ud)
            && ud.flow_label & 0xf_ffff != 0
        {
            t.src_port = wire::udp_source_port(ud.flow_label, qp.qpn, Qpn::new(0));
        }
        qp.req.next_psn = psn.add(consumed);
        if is_read_or_atomic && resend_end.is_none() {
            qp.req.rd_out.push_back(qp.req.next_psn);
        }
        if is_read && qp.req.next_psn.diff(qp.req.read_end) > 0 {
            qp.req.read_end = qp.req.next_psn;
        }
        if qp.qp_type == QpType::Rc {
            self.dev.cqs.account(&mut qp.req, mtu);
        }
        if retransmit {
            self.dev.counters.retransmitted_pkts += 1;
        }
        match qp.qp_type {
            QpType::Rc => {
                if qp.req.timer.is_none() {
                    qp.req.timer = retransmit_timeout(qp.attr.timeout).map(|d| now + d);
                }
            }
            _ => {
                // Unreliable: a WQE is done once its last packet is out.
                if last_of_wqe {
                    let wqe = qp.req.sq.remove(i)?;
                    qp.req.una = qp.req.next_psn;
                    self.dev.counters.rdma_sends += 1;
                    if wqe.wr.signaled {
                        self.dev.cqs[qp.send_cq.0 as usize].push_back(wc(
                            qp,
                            wqe.wr.wr_id,
                            WcStatus::Success,
                            wqe.wr.op.wc_opcode(),
                            0,
                        ));
                    }
                }
            }
        }
        Some(t)
    }

    /// Lets timers run: retransmission (go-back-N from the oldest unacknowledged PSN, or
    /// RETRY_EXC_ERR when the retries are spent), the end of RNR waits, and the responder's
    /// unasked ACK after a resend.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qp in self.qps.values_mut() {
            let mut fired = false;
            if qp.req.rnr_until.is_some_and(|t| t <= now) {
                qp.req.rnr_until = None;
                fired = true;
            }
            if Self::on_reack_timer(&mut self.dev.counters, qp, now) {
                fired = true;
            }
            if fired && !qp.queued {
                qp.queued = true;
                self.active.push_back(qp.qpn);
            }
            let Some(t) = qp.req.timer else { continue };
            if t > now {
                continue;
            }
            if !qp.queued {
                qp.queued = true;
                self.active.push_back(qp.qpn);
            }
            qp.req.timer = None;
            if qp.state != QpState::Rts && qp.state != QpState::Sqd || !qp.req.outstanding() {
                continue;
            }
            self.dev.counters.local_ack_timeout_err += 1;
            if qp.req.retry_left == 0 {
                self.dev.counters.retry_exceeded_err += 1;
                Self::fail_head(&mut self.dev.cqs, qp, WcStatus::RetryExcErr);
                continue;
            }
            qp.req.retry_left -= 1;
            // Silence for a whole timeout: READ responses asked for were lost, and asking
            // for as much again at once could lose them again.
            if qp.req.read_inflight > 0 {
                qp.req.shrink_read_window(qp.mtu(), self.cfg.read_window_qp);
            }
            qp.req.shrink_send_window(self.cfg.send_window);
            let una = qp.req.una;
            Self::rewind(&mut self.dev.counters, qp, una);
            let mtu = qp.mtu();
            self.dev.cqs.account(&mut qp.req, mtu);
        }
    }

    /// Restarts sending at `psn` (go-back-N).
    pub(super) fn rewind(counters: &mut Counters, qp: &mut QueuePair, psn: Psn) {
        counters.completer_retry_err += 1;
        if qp.req.next_psn.diff(qp.req.resend_until) > 0 {
            qp.req.resend_until = qp.req.next_psn;
        }
        qp.req.next_psn = psn;
        qp.req.packets_since_ackreq = 0;
        qp.req.timer = None;
    }

    /// Completes the oldest send WQE with `status` and moves the QP to the error state.
    pub(super) fn fail_head(cqs: &mut CqTable, qp: &mut QueuePair, status: WcStatus) {
        if let Some(w) = qp.req.sq.pop_front() {
            cqs[qp.send_cq.0 as usize].push_back(wc(
                qp,
                w.wr.wr_id,
                status,
                w.wr.op.wc_opcode(),
                0,
            ));
        }
        Self::flush(cqs, qp);
    }
}

/// How many response packets of a READ wanting `want` more the QP may ask for now: what its
/// own READ window and the device's leave, in MTUs. Not less than a sixteenth of its window
/// (or all it wants) unless nothing at all is in flight: small READ requests cost the
/// responder a resource each, so the requester waits for room instead of dribbling.
fn read_credit(qp: &QueuePair, cqs: &CqTable, cfg: &EndpointConfig, want: u32) -> u32 {
    let mtu = qp.mtu();
    let qp_room = qp.req.read_window.saturating_sub(qp.req.read_inflight);
    let dev_room = cfg.read_window.saturating_sub(cqs.read_inflight);
    let n = (qp_room.min(dev_room) / mtu).min(u64::from(want)) as u32;
    let floor = ((qp.req.read_window / mtu / 16).max(1) as u32).min(want);
    if n >= floor {
        n
    } else if qp.req.read_inflight == 0 && cqs.read_inflight == 0 {
        // A window below an MTU still lets one packet through.
        1
    } else {
        0
    }
}

/// Unsignaled messages sent in a row without asking for an ACK, at most: their slots in the
/// send queue come back with the next ACK.
const UNSIGNALED_ACK_EVERY: u32 = 16;

/// Packet `d` of a SEND or WRITE WQE `w` on `qp`, from header `b`: its opcode (only, first,
/// middle or last; with immediate), the RETH on the first of a WRITE, the immediate on the
/// last, the DETH on UD; whether it is the WQE's last; and where in the message its payload
/// starts and how long it is.
#[inline]
fn data_packet(
    qp: &QueuePair,
    w: &SendWqe,
    d: u32,
    mtu: u64,
    mut b: bth::Repr,
) -> (roce::Repr, bool, (u64, usize)) {
    let off = u64::from(d) * mtu;
    let chunk = (w.len - off.min(w.len)).min(mtu) as usize;
    let first = d == 0;
    let last = d == w.npkts - 1;
    let imm = match w.wr.op {
        SendOp::SendWithImm(i) | SendOp::WriteWithImm { imm: i, .. } => Some(i),
        _ => None,
    };
    let write = matches!(w.wr.op, SendOp::Write { .. } | SendOp::WriteWithImm { .. });
    use Operation::*;
    let op = match (write, first, last, imm.is_some()) {
        (false, true, true, false) => SendOnly,
        (false, true, true, true) => SendOnlyWithImmediate,
        (false, true, false, _) => SendFirst,
        (false, false, false, _) => SendMiddle,
        (false, false, true, false) => SendLast,
        (false, false, true, true) => SendLastWithImmediate,
        (true, true, true, false) => RdmaWriteOnly,
        (true, true, true, true) => RdmaWriteOnlyWithImmediate,
        (true, true, false, _) => RdmaWriteFirst,
        (true, false, false, _) => RdmaWriteMiddle,
        (true, false, true, false) => RdmaWriteLast,
        (true, false, true, true) => RdmaWriteLastWithImmediate,
    };
    b.opcode = Opcode::new(transport_of(qp.qp_type), op);
    b.solicited = last && w.wr.solicited;
    let mut r = roce::Repr::new(b);
    if let (
        true,
        SendOp::Write { remote_addr, rkey } | SendOp::WriteWithImm { remote_addr, rkey, .. },
    ) = (first, w.wr.op)
    {
        r.reth = Some(Reth { va: remote_addr, rkey, dma_len: w.len as u32 });
    }
    if last {
        r.immdt = imm.map(|value| ImmDt { value });
    }
    if let (QpType::Ud, Some(ud)) = (qp.qp_type, w.wr.ud) {
        let qkey = if ud.qkey.0 & 0x8000_0000 != 0 { qp.attr.qkey } else { ud.qkey };
        r.deth = Some(Deth { qkey, src_qp: qp.qpn });
    }
    (r, last, (off, chunk))
}
