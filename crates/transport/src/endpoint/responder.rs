//! The responder: requests that arrive (RC, UC, UD) — PSN checks, placement into memory,
//! ACK/NAK and RNR, READ and atomic replay — and the responses it sends.

use wire::bth;
use wire::ext::{Aeth, AtomicAckEth, NakCode, Syndrome};
use wire::icrc::PseudoHeader;
use wire::{Opcode, Operation, Psn, Qpn, Transport, roce};

use verbs::{Access, WcOpcode, WcStatus};

use crate::memory::Memory;

use super::*;

impl<M: Memory> Endpoint<M> {
    pub(super) fn next_response(&mut self, qpn: Qpn) -> Option<Transmit> {
        let qp = self.qps.get_mut(&qpn)?;
        let dest = qp.attr.dest?;
        let front = qp.resp.resp_out.front_mut()?;
        match front {
            RespOut::Ack { psn, syndrome, msn } => {
                let mut r = roce::Repr::new(bth::Repr::new(RC_ACKNOWLEDGE, dest.qpn, *psn));
                r.aeth = Some(Aeth { syndrome: *syndrome, msn: *msn & 0xff_ffff });
                qp.resp.resp_out.pop_front();
                packet(&mut self.bufs, qp, dest.ip, &r, &[])
            }
            RespOut::Atomic { psn, orig, msn } => {
                let mut r = roce::Repr::new(bth::Repr::new(RC_ATOMIC_ACKNOWLEDGE, dest.qpn, *psn));
                r.aeth = Some(Aeth { syndrome: ACK_SYNDROME, msn: *msn & 0xff_ffff });
                r.atomic_ack_eth = Some(AtomicAckEth { orig: *orig });
                qp.resp.resp_out.pop_front();
                packet(&mut self.bufs, qp, dest.ip, &r, &[])
            }
            RespOut::Read { first_psn, mr, offset, len, next, msn } => {
                let mtu = u64::from(qp.attr.path_mtu.bytes());
                let npkts = (len.div_ceil(mtu)).max(1) as u32;
                let k = *next;
                let off = u64::from(k) * mtu;
                let chunk = (*len - off.min(*len)).min(mtu) as usize;
                let op = match (npkts, k) {
                    (1, _) => Operation::RdmaReadResponseOnly,
                    (_, 0) => Operation::RdmaReadResponseFirst,
                    (n, k) if k == n - 1 => Operation::RdmaReadResponseLast,
                    _ => Operation::RdmaReadResponseMiddle,
                };
                let opcode = Opcode::new(Transport::Rc, op);
                let mut r = roce::Repr::new(bth::Repr::new(opcode, dest.qpn, first_psn.add(k)));
                if op != Operation::RdmaReadResponseMiddle {
                    r.aeth = Some(Aeth { syndrome: ACK_SYNDROME, msn: *msn & 0xff_ffff });
                }
                let (id, at) = (mr.id, *offset + off);
                *next += 1;
                if *next >= npkts {
                    qp.resp.resp_out.pop_front();
                }
                let mem = &self.dev.mem;
                packet_with(&mut self.bufs, qp, dest.ip, &r, chunk, |buf| {
                    mem.read(id, at, buf).is_ok()
                })
            }
        }
    }
}

/// What a request packet is, from its operation bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Req {
    Send { first: bool, last: bool, imm: bool },
    Write { first: bool, last: bool, imm: bool },
    Read,
    Atomic,
}

pub(super) fn classify(operation: Option<Operation>) -> Option<Req> {
    use Operation::*;
    Some(match operation? {
        SendFirst => Req::Send { first: true, last: false, imm: false },
        SendMiddle => Req::Send { first: false, last: false, imm: false },
        SendLast | SendLastWithInvalidate => Req::Send { first: false, last: true, imm: false },
        SendLastWithImmediate => Req::Send { first: false, last: true, imm: true },
        SendOnly | SendOnlyWithInvalidate => Req::Send { first: true, last: true, imm: false },
        SendOnlyWithImmediate => Req::Send { first: true, last: true, imm: true },
        RdmaWriteFirst => Req::Write { first: true, last: false, imm: false },
        RdmaWriteMiddle => Req::Write { first: false, last: false, imm: false },
        RdmaWriteLast => Req::Write { first: false, last: true, imm: false },
        RdmaWriteLastWithImmediate => Req::Write { first: false, last: true, imm: true },
        RdmaWriteOnly => Req::Write { first: true, last: true, imm: false },
        RdmaWriteOnlyWithImmediate => Req::Write { first: true, last: true, imm: true },
        RdmaReadRequest => Req::Read,
        CompareSwap | FetchAdd => Req::Atomic,
        _ => return None,
    })
}

/// How a request ended at the responder.
pub(super) enum Outcome {
    /// Processed; the PSN advances.
    Done,
    /// No receive posted: RNR NAK, the PSN stays.
    Rnr,
    /// A class C/D error: NAK with this code and the QP goes to the error state.
    Nak(NakCode),
}

impl<M: Memory> Endpoint<M> {
    pub(super) fn queue_ack(qp: &mut QueuePair, psn: Psn) {
        let msn = qp.resp.msn;
        if let Some(RespOut::Ack { psn: p, syndrome: ACK_SYNDROME, msn: m }) =
            qp.resp.resp_out.back_mut()
        {
            // ACKs are cumulative: the later PSN of the two covers the other.
            if psn.diff(*p) > 0 {
                *p = psn;
                *m = msn;
            }
            return;
        }
        qp.resp.resp_out.push_back(RespOut::Ack { psn, syndrome: ACK_SYNDROME, msn });
    }

    /// The responder's timer: once a requester that resent a SEND/WRITE has fallen quiet,
    /// its latest PSN is ACKed again unasked (see `Responder::REACK_QUIET`). True when an ACK
    /// was queued.
    pub(super) fn on_reack_timer(
        counters: &mut Counters,
        qp: &mut QueuePair,
        now: Instant,
    ) -> bool {
        let Some((t, left)) = qp.resp.reack else { return false };
        if t > now {
            return false;
        }
        qp.resp.reack = (left > 1).then(|| (now + Responder::REACK_AGAIN, left - 1));
        let Some(psn) = qp.resp.last_write_psn else { return false };
        if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return false;
        }
        counters.unasked_acks += 1;
        Self::queue_ack(qp, psn);
        true
    }

    /// The RC responder.
    pub(super) fn on_rc_request(&mut self, now: Instant, qpn: Qpn, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        let b = pkt.bth();
        let psn = b.psn();
        let d = psn.diff(qp.resp.epsn);
        let Some(req) = classify(pkt.opcode().operation()) else {
            self.dev.counters.dropped_pkts += 1;
            return;
        };
        // The requester is not quiet yet: an unasked ACK waits for it to be.
        if let Some((at, _)) = &mut qp.resp.reack {
            *at = now + Responder::REACK_QUIET;
        }
        if d > 0 {
            // Ahead of the expected PSN: a packet was lost. NAK once per gap.
            self.dev.counters.out_of_seq_request += 1;
            if !qp.resp.nak_sent {
                qp.resp.nak_sent = true;
                self.dev.counters.sent_seq_err += 1;
                let msn = qp.resp.msn;
                qp.resp.resp_out.push_back(RespOut::Ack { psn: qp.resp.epsn, syndrome: 0x60, msn });
            }
            return;
        }
        if d < 0 {
            self.dev.counters.duplicate_request += 1;
            match req {
                Req::Read => {
                    let found = qp.resp.resources.iter().rev().find_map(|r| match *r {
                        Resource::Read { psn: p, npkts, mr, offset, len } => {
                            let k = psn.diff(p);
                            (k >= 0 && (k as u32) < npkts).then_some((p, mr, offset, len, k as u32))
                        }
                        _ => None,
                    });
                    if let Some((first_psn, mr, offset, len, next)) = found {
                        // The requester lost responses of this READ: the rest of a burst
                        // still going out would be lost on it too. Replay instead.
                        qp.resp.resp_out.retain(
                            |o| !matches!(o, RespOut::Read { first_psn: p, .. } if *p == first_psn),
                        );
                        let msn = qp.resp.msn;
                        qp.resp.resp_out.push_back(RespOut::Read {
                            first_psn,
                            mr,
                            offset,
                            len,
                            next,
                            msn,
                        });
                    }
                }
                Req::Atomic => {
                    let found = qp.resp.resources.iter().rev().find_map(|r| match *r {
                        Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                        _ => None,
                    });
                    if let Some(orig) = found {
                        let msn = qp.resp.msn;
                        qp.resp.resp_out.push_back(RespOut::Atomic { psn, orig, msn });
                    }
                }
                Req::Send { last, .. } | Req::Write { last, .. } => {
                    // Linux rxe's completer (6.1) stalls for good on a message it is
                    // resending when an ACK of the message's last PSN comes while it is
                    // still sending it: it takes that ACK as progress only and waits for
                    // another once the last packet is out. If that one is lost it has
                    // nothing unacknowledged left to retry and never re-arms its timer
                    // (docs/rxe-reference.md). So a duplicate is ACKed at its own PSN,
                    // never ahead of what the requester has sent again, and the ACK of a
                    // duplicate that ends a message goes twice: that is the one ACK such
                    // a requester still waits for. Both only ever follow a retransmission.
                    // And should both be lost, or the resent last packet itself, the
                    // latest PSN is ACKed again, unasked, once the requester falls quiet:
                    // any ACK at or past the message's last PSN completes it there.
                    qp.resp.reack = Some((now + Responder::REACK_QUIET, 2));
                    if b.ack_req() {
                        Self::queue_ack(qp, psn);
                        if last {
                            let msn = qp.resp.msn;
                            qp.resp.resp_out.push_back(RespOut::Ack {
                                psn,
                                syndrome: ACK_SYNDROME,
                                msn,
                            });
                        }
                    }
                }
            }
            return;
        }
        let outcome = Self::execute(&mut self.dev, qp, pkt, req, false);
        match outcome {
            Outcome::Done => {
                qp.resp.nak_sent = false;
                if matches!(req, Req::Read | Req::Atomic) {
                    // An ACK past a READ or atomic would complete it without its data.
                    qp.resp.last_write_psn = None;
                } else {
                    qp.resp.last_write_psn = Some(psn);
                    qp.resp.epsn = psn.add(1);
                    if b.ack_req() {
                        Self::queue_ack(qp, psn);
                    }
                }
            }
            Outcome::Rnr => {
                self.dev.counters.send_rnr_err += 1;
                let msn = qp.resp.msn;
                let syndrome = 0x20 | (qp.attr.min_rnr_timer & 0x1f);
                qp.resp.resp_out.push_back(RespOut::Ack { psn, syndrome, msn });
            }
            Outcome::Nak(code) => {
                self.dev.counters.sent_nak_err += 1;
                let Some(dest) = qp.attr.dest else { return };
                let mut r = roce::Repr::new(bth::Repr::new(RC_ACKNOWLEDGE, dest.qpn, psn));
                r.aeth = Some(Aeth {
                    syndrome: Syndrome::Nak(code).to_raw(),
                    msn: qp.resp.msn & 0xff_ffff,
                });
                if let Some(t) = packet(&mut self.bufs, qp, dest.ip, &r, &[]) {
                    self.ctrl.push_back(t);
                }
                Self::flush(&mut self.dev.cqs, qp);
            }
        }
    }

    /// Carries out one in-sequence request packet. `unreliable` (UC) drops instead of NAKing.
    pub(super) fn execute(
        dev: &mut Device<M>,
        qp: &mut QueuePair,
        pkt: &roce::Packet<&[u8]>,
        req: Req,
        unreliable: bool,
    ) -> Outcome {
        let Device { mem, mrs, cqs, counters } = dev;
        let mtu = qp.mtu() as usize;
        let data = pkt.payload();
        let psn = pkt.bth().psn();
        // Opcode sequence: a message in progress continues, else a new one starts.
        let continues = matches!(
            (&qp.resp.in_msg, req),
            (Some(InMsg::Send { .. }), Req::Send { first: false, .. })
                | (Some(InMsg::Write { .. }), Req::Write { first: false, .. })
        );
        let starts = qp.resp.in_msg.is_none()
            && matches!(
                req,
                Req::Send { first: true, .. }
                    | Req::Write { first: true, .. }
                    | Req::Read
                    | Req::Atomic
            );
        if !continues && !starts {
            return Outcome::Nak(NakCode::InvalidRequest);
        }
        // Payload sizes: FIRST and MIDDLE carry exactly the MTU, LAST 1..=MTU, ONLY 0..=MTU.
        let (first, last) = match req {
            Req::Send { first, last, .. } | Req::Write { first, last, .. } => (first, last),
            _ => (true, true),
        };
        let size_ok = match (first, last) {
            (true, true) => data.len() <= mtu,
            (_, false) => data.len() == mtu,
            (false, true) => !data.is_empty() && data.len() <= mtu,
        };
        if !size_ok {
            return Outcome::Nak(NakCode::InvalidRequest);
        }
        match req {
            Req::Send { first, last, imm } => {
                if first {
                    let Some(recv) = qp.resp.rq.pop_front() else { return Outcome::Rnr };
                    qp.resp.in_msg = Some(InMsg::Send { recv, offset: 0, imm: None });
                }
                let Some(InMsg::Send { recv, offset, imm: im }) = qp.resp.in_msg.as_mut() else {
                    return Outcome::Nak(NakCode::InvalidRequest);
                };
                if imm {
                    *im = pkt.immdt().map(|i| i.value);
                }
                if let Err(too_long) = scatter(mrs, mem, &recv.sgl, *offset, data) {
                    let status = if too_long { WcStatus::LocLenErr } else { WcStatus::LocProtErr };
                    let wr_id = recv.wr_id;
                    qp.resp.in_msg = None;
                    cqs[qp.recv_cq.0 as usize].push_back(wc(qp, wr_id, status, WcOpcode::Recv, 0));
                    return Outcome::Nak(NakCode::InvalidRequest);
                }
                *offset += data.len() as u64;
                if last {
                    let (wr_id, n, imm) = (recv.wr_id, *offset as u32, *im);
                    qp.resp.in_msg = None;
                    qp.resp.msn = qp.resp.msn.wrapping_add(1);
                    counters.rdma_recvs += 1;
                    let mut c = wc(qp, wr_id, WcStatus::Success, WcOpcode::Recv, n);
                    c.imm = imm;
                    cqs[qp.recv_cq.0 as usize].push_back(c);
                }
                Outcome::Done
            }
            Req::Write { first, last, imm } => {
                // A WRITE with immediate consumes a receive: look before touching anything.
                if imm && qp.resp.rq.is_empty() {
                    return Outcome::Rnr;
                }
                if first {
                    let Some(reth) = pkt.reth() else {
                        return Outcome::Nak(NakCode::InvalidRequest);
                    };
                    let total = u64::from(reth.dma_len);
                    let Some((mr, offset)) = mrs.target(
                        qp.pd,
                        reth.rkey,
                        reth.va,
                        total,
                        Access::REMOTE_WRITE,
                        qp.attr.access,
                    ) else {
                        return Outcome::Nak(NakCode::RemoteAccessError);
                    };
                    qp.resp.in_msg = Some(InMsg::Write { mr, offset, remaining: total, total });
                }
                let Some(InMsg::Write { mr, offset, remaining, total }) = qp.resp.in_msg.as_mut()
                else {
                    return Outcome::Nak(NakCode::InvalidRequest);
                };
                let n = data.len() as u64;
                if n > *remaining || (last && n != *remaining) {
                    qp.resp.in_msg = None;
                    return Outcome::Nak(NakCode::InvalidRequest);
                }
                if n > 0 && mem.write(mr.id, *offset, data).is_err() {
                    qp.resp.in_msg = None;
                    return Outcome::Nak(NakCode::RemoteOperationalError);
                }
                *offset += n;
                *remaining -= n;
                if last {
                    let total = *total as u32;
                    qp.resp.in_msg = None;
                    qp.resp.msn = qp.resp.msn.wrapping_add(1);
                    if imm && let Some(recv) = qp.resp.rq.pop_front() {
                        counters.rdma_recvs += 1;
                        let mut c =
                            wc(qp, recv.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, total);
                        c.imm = pkt.immdt().map(|i| i.value);
                        cqs[qp.recv_cq.0 as usize].push_back(c);
                    }
                }
                Outcome::Done
            }
            Req::Read if !unreliable => {
                let Some(reth) = pkt.reth() else { return Outcome::Nak(NakCode::InvalidRequest) };
                let len = u64::from(reth.dma_len);
                let Some((mr, offset)) =
                    mrs.target(qp.pd, reth.rkey, reth.va, len, Access::REMOTE_READ, qp.attr.access)
                else {
                    return Outcome::Nak(NakCode::RemoteAccessError);
                };
                let npkts = (len.div_ceil(mtu as u64)).max(1) as u32;
                Self::remember(qp, Resource::Read { psn, npkts, mr, offset, len });
                qp.resp.msn = qp.resp.msn.wrapping_add(1);
                let msn = qp.resp.msn;
                qp.resp.resp_out.push_back(RespOut::Read {
                    first_psn: psn,
                    mr,
                    offset,
                    len,
                    next: 0,
                    msn,
                });
                qp.resp.epsn = psn.add(npkts);
                Outcome::Done
            }
            Req::Atomic if !unreliable => {
                let Some(a) = pkt.atomic_eth() else {
                    return Outcome::Nak(NakCode::InvalidRequest);
                };
                if a.va % 8 != 0 {
                    return Outcome::Nak(NakCode::InvalidRequest);
                }
                let Some((mr, offset)) =
                    mrs.check_remote(qp.pd, a.rkey, a.va, 8, Access::REMOTE_ATOMIC, qp.attr.access)
                else {
                    return Outcome::Nak(NakCode::RemoteAccessError);
                };
                let r = if pkt.opcode().operation() == Some(Operation::CompareSwap) {
                    mem.compare_swap(mr.id, offset, a.compare, a.swap_add)
                } else {
                    mem.fetch_add(mr.id, offset, a.swap_add)
                };
                let Ok(orig) = r else { return Outcome::Nak(NakCode::RemoteOperationalError) };
                Self::remember(qp, Resource::Atomic { psn, orig });
                qp.resp.msn = qp.resp.msn.wrapping_add(1);
                let msn = qp.resp.msn;
                qp.resp.resp_out.push_back(RespOut::Atomic { psn, orig, msn });
                qp.resp.epsn = psn.add(1);
                Outcome::Done
            }
            _ => Outcome::Nak(NakCode::InvalidRequest),
        }
    }

    pub(super) fn remember(qp: &mut QueuePair, r: Resource) {
        while qp.resp.resources.len() >= usize::from(qp.attr.max_dest_rd_atomic.max(1)) {
            qp.resp.resources.pop_front();
        }
        qp.resp.resources.push_back(r);
    }

    /// The UC responder: no ACKs, no NAKs; a gap or an error drops the rest of the message.
    pub(super) fn on_uc_request(&mut self, qpn: Qpn, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        let psn = pkt.bth().psn();
        let Some(req) = classify(pkt.opcode().operation()) else {
            self.dev.counters.dropped_pkts += 1;
            return;
        };
        let starts = matches!(req, Req::Send { first: true, .. } | Req::Write { first: true, .. });
        if psn.diff(qp.resp.epsn) < 0 {
            // The duplicate region: UC never delivers a packet twice.
            self.dev.counters.duplicate_request += 1;
            return;
        }
        if psn != qp.resp.epsn || starts {
            // A new message, or a gap: whatever was in progress is abandoned (its receive is
            // reused, not completed).
            if psn != qp.resp.epsn {
                self.dev.counters.out_of_seq_request += 1;
            }
            if let Some(InMsg::Send { recv, .. }) = qp.resp.in_msg.take() {
                qp.resp.rq.push_front(recv);
            }
            if !starts {
                qp.resp.epsn = psn.add(1);
                self.dev.counters.dropped_pkts += 1;
                return;
            }
        }
        qp.resp.epsn = psn.add(1);
        match Self::execute(&mut self.dev, qp, pkt, req, true) {
            Outcome::Done => {}
            Outcome::Rnr => self.dev.counters.rcv_no_wqe += 1,
            Outcome::Nak(_) => {
                self.dev.counters.dropped_pkts += 1;
                if let Some(InMsg::Send { recv, .. }) = qp.resp.in_msg.take() {
                    qp.resp.rq.push_front(recv);
                }
            }
        }
    }

    /// The UD responder: Q_Key check, the 40-byte GRH area, then the payload.
    pub(super) fn on_ud_request(
        &mut self,
        qpn: Qpn,
        meta: &RecvMeta<'_>,
        pkt: &roce::Packet<&[u8]>,
    ) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        let Some(deth) = pkt.deth() else {
            self.dev.counters.dropped_pkts += 1;
            return;
        };
        if deth.qkey != qp.attr.qkey {
            self.dev.counters.qkey_violations += 1;
            return;
        }
        // IBTA does not ask a UD responder to look at PSNs, but a datagram the network
        // duplicated must not be delivered twice: accept only PSNs ahead of the last one from
        // the same sender (an older, reordered datagram is dropped, as UD may drop anything).
        let psn = pkt.bth().psn();
        let key = (meta.src, deth.src_qp);
        if qp.resp.ud_seen.get(&key).is_some_and(|last| psn.diff(*last) <= 0) {
            self.dev.counters.duplicate_request += 1;
            return;
        }
        let Some(recv) = qp.resp.rq.pop_front() else {
            self.dev.counters.rcv_no_wqe += 1;
            return;
        };
        qp.resp.ud_seen.insert(key, psn);
        let data = pkt.payload();
        // The GRH area: the real IP header when the driver has it, else one rebuilt from what
        // it knows (an IPv4 Identification is then unknown: 0). IPv4 fills its last 20 bytes.
        let mut grh = [0u8; 40];
        let built = PseudoHeader::between(meta.src, meta.dst, meta.src_port, meta.dst_port)
            .map(|h| h.for_payload(pkt.covered().len() + roce::ICRC_LEN));
        let ip = match (meta.ip_header, &built) {
            (Some(h), _) => h,
            (None, Some(b)) => b.ip_header(),
            (None, None) => &[],
        };
        match ip.first().map(|b| b >> 4) {
            Some(4) if ip.len() >= 20 => grh[20..40].copy_from_slice(&ip[..20]),
            Some(6) if ip.len() >= 40 => grh.copy_from_slice(&ip[..40]),
            _ => {}
        }
        let status = match scatter(&self.dev.mrs, &mut self.dev.mem, &recv.sgl, 0, &grh)
            .and_then(|()| scatter(&self.dev.mrs, &mut self.dev.mem, &recv.sgl, 40, data))
        {
            Ok(()) => WcStatus::Success,
            Err(true) => WcStatus::LocLenErr,
            Err(false) => WcStatus::LocProtErr,
        };
        self.dev.counters.rdma_recvs += 1;
        let mut c = wc(qp, recv.wr_id, status, WcOpcode::Recv, (40 + data.len()) as u32);
        if status == WcStatus::Success {
            c.imm = pkt.immdt().map(|i| i.value);
            c.src_qp = Some(deth.src_qp);
            c.grh = true;
        }
        self.dev.cqs[qp.recv_cq.0 as usize].push_back(c);
    }
}
