//! The completer: the requester's side of what comes back — ACKs, NAKs, READ responses and
//! atomic ACKs — and the completions they allow.

use std::collections::VecDeque;

use std::time::Duration;

use wire::ext::{NakCode, Syndrome};
use wire::{Operation, Psn, Qpn, roce};

use verbs::{Counters, QpState, SendOp, WcStatus, WorkCompletion};

use crate::memory::Memory;
use crate::time::Instant;

use super::*;

impl<M: Memory> Endpoint<M> {
    /// The requester's side: ACKs, NAKs, READ responses and atomic ACKs. Only responses for a
    /// PSN this requester sent and has not had acknowledged (`0 <= behind < sent`) get here:
    /// `handle_datagram` drops the rest before their ICRC (`plausible_psn`).
    pub(super) fn on_response(&mut self, now: Instant, qpn: Qpn, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let psn = pkt.bth().psn();
        let behind = psn.diff(qp.req.una);
        let rto = retransmit_timeout(qp.attr.timeout);
        match pkt.opcode().operation() {
            Some(Operation::Acknowledge) => {
                let Some(aeth) = pkt.aeth() else { return };
                let syndrome = aeth.syndrome();
                match syndrome {
                    Syndrome::RnrNak(_) => self.dev.counters.rcvd_rnr_err += 1,
                    Syndrome::Nak(NakCode::PsnSequenceError) => self.dev.counters.rcvd_seq_err += 1,
                    _ => {}
                }
                let nak = match syndrome {
                    Syndrome::Ack(_) => {
                        Self::ack_through(
                            &mut self.dev.cqs,
                            &mut self.dev.counters,
                            qp,
                            psn,
                            now,
                            rto,
                        );
                        return;
                    }
                    Syndrome::Reserved(_) => return,
                    nak => nak,
                };
                // A NAK acknowledges every PSN before its own.
                let before = psn.add(0xff_ffff);
                Self::ack_through(&mut self.dev.cqs, &mut self.dev.counters, qp, before, now, rto);
                match nak {
                    Syndrome::RnrNak(t) => {
                        if qp.req.rnr_left == 0 {
                            self.dev.counters.retry_rnr_exceeded_err += 1;
                            Self::fail_head(&mut self.dev.cqs, qp, WcStatus::RnrRetryExcErr);
                            return;
                        }
                        if qp.req.rnr_left != 7 {
                            qp.req.rnr_left -= 1;
                        }
                        Self::rewind(&mut self.dev.counters, qp, psn);
                        qp.req.rnr_until = Some(now + t.duration());
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        if qp.req.retry_left == 0 {
                            self.dev.counters.retry_exceeded_err += 1;
                            Self::fail_head(&mut self.dev.cqs, qp, WcStatus::RetryExcErr);
                            return;
                        }
                        qp.req.retry_left -= 1;
                        // Its packets were lost: resending as many at once could lose them
                        // again.
                        qp.req.shrink_send_window(self.cfg.send_window);
                        Self::rewind(&mut self.dev.counters, qp, psn);
                    }
                    Syndrome::Nak(code) => {
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            _ => WcStatus::RemOpErr,
                        };
                        Self::fail_head(&mut self.dev.cqs, qp, status);
                    }
                    Syndrome::Ack(_) | Syndrome::Reserved(_) => {}
                }
            }
            Some(Operation::AtomicAcknowledge) => {
                let Some(ack) = pkt.atomic_ack_eth() else { return };
                let Some(w) = qp.req.sq.front() else { return };
                let atomic =
                    matches!(w.wr.op, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. });
                if atomic && behind > 0 {
                    // A later atomic's response: the responder executed ours and its response
                    // was lost (an implied NAK). Ask again now; it returns the saved result.
                    let una = qp.req.una;
                    Self::rewind(&mut self.dev.counters, qp, una);
                    return;
                }
                if !atomic || psn != w.first_psn || behind != 0 {
                    self.dev.counters.dropped_out_of_window += 1;
                    return;
                }
                // The original value lands in the local buffer in host order.
                let orig = ack.orig.to_ne_bytes();
                if scatter(&self.dev.mrs, &mut self.dev.mem, &w.wr.sgl, 0, &orig).is_err() {
                    Self::fail_head(&mut self.dev.cqs, qp, WcStatus::LocProtErr);
                    return;
                }
                Self::complete_head(&mut self.dev.cqs, &mut self.dev.counters, qp, 8);
                qp.req.una = psn.add(1);
                Self::progress(qp, now, rto);
            }
            _ => {
                // READ responses, in order.
                let mtu = qp.mtu();
                let Some(w) = qp.req.sq.front() else { return };
                if !matches!(w.wr.op, SendOp::Read { .. }) {
                    return;
                }
                if behind > 0
                    || psn.diff(w.first_psn) < 0
                    || psn.diff(w.first_psn) >= w.npkts as i32
                {
                    // A gap: a response was lost. Ask again from the first missing one, with
                    // half the READ window — once for that PSN in an eighth of the
                    // retransmit timeout: the rest of the burst that follows is dropped
                    // without asking again, or each of its packets would ask for the
                    // remainder again into the same overrun.
                    self.dev.counters.dropped_out_of_window += 1;
                    let una = qp.req.una;
                    let asked = qp.req.gap_asked.is_some_and(|(p, at)| {
                        p == una && rto.is_none_or(|d| now.saturating_since(at) < d / 8)
                    });
                    if !asked {
                        qp.req.gap_asked = Some((una, now));
                        qp.req.shrink_read_window(mtu, self.cfg.read_window_qp);
                        Self::rewind(&mut self.dev.counters, qp, una);
                    }
                    return;
                }
                let k = psn.diff(w.first_psn) as u64;
                let data = pkt.payload();
                let expect = (w.len - (k * mtu).min(w.len)).min(mtu) as usize;
                if data.len() != expect {
                    Self::fail_head(&mut self.dev.cqs, qp, WcStatus::BadRespErr);
                    return;
                }
                if scatter(&self.dev.mrs, &mut self.dev.mem, &w.wr.sgl, k * mtu, data).is_err() {
                    Self::fail_head(&mut self.dev.cqs, qp, WcStatus::LocProtErr);
                    return;
                }
                qp.req.grow_read_window(mtu, self.cfg.read_window_qp);
                let Some(w) = qp.req.sq.front_mut() else { return };
                w.done_bytes += data.len() as u64;
                let last = k as u32 == w.npkts - 1;
                let total = w.len as u32;
                qp.req.una = psn.add(1);
                if last {
                    Self::complete_head(&mut self.dev.cqs, &mut self.dev.counters, qp, total);
                }
                Self::progress(qp, now, rto);
            }
        }
    }

    /// Forward progress: retries are refilled and the timer restarted.
    pub(super) fn progress(qp: &mut QueuePair, now: Instant, rto: Option<Duration>) {
        qp.req.retry_left = qp.attr.retry_cnt;
        qp.req.rnr_left = qp.attr.rnr_retry;
        qp.req.timer = if qp.req.outstanding() { rto.map(|d| now + d) } else { None };
    }

    pub(super) fn complete_head(
        cqs: &mut [VecDeque<WorkCompletion>],
        counters: &mut Counters,
        qp: &mut QueuePair,
        byte_len: u32,
    ) {
        if let Some(w) = qp.req.sq.pop_front() {
            counters.rdma_sends += 1;
            if w.wr.signaled {
                cqs[qp.send_cq.0 as usize].push_back(wc(
                    qp,
                    w.wr.wr_id,
                    WcStatus::Success,
                    w.wr.op.wc_opcode(),
                    byte_len,
                ));
            }
        }
    }

    /// An acknowledgement of every PSN up to and including `p`.
    pub(super) fn ack_through(
        cqs: &mut [VecDeque<WorkCompletion>],
        counters: &mut Counters,
        qp: &mut QueuePair,
        p: Psn,
        now: Instant,
        rto: Option<Duration>,
    ) {
        if p.diff(qp.req.una) < 0 {
            return;
        }
        let mut advanced = false;
        while let Some(w) = qp.req.sq.front() {
            if w.is_read_or_atomic() {
                if p.diff(w.first_psn) >= 0 && qp.req.next_psn.diff(qp.req.una) > 0 {
                    // The responder is past a READ/atomic whose response we lack: an implied
                    // NAK. Ask again from the first missing response.
                    let una = qp.req.una;
                    Self::rewind(counters, qp, una);
                }
                break;
            }
            if p.diff(w.last_psn()) >= 0 {
                let next = w.last_psn().add(1);
                Self::complete_head(cqs, counters, qp, 0);
                qp.req.una = next;
                advanced = true;
            } else {
                if p.diff(qp.req.una) >= 0 {
                    qp.req.una = p.add(1);
                    advanced = true;
                }
                break;
            }
        }
        if qp.req.sq.is_empty() {
            qp.req.una = qp.req.next_psn;
        }
        if advanced {
            Self::progress(qp, now, rto);
        }
    }
}
