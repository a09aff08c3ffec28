//! A queue pair's state: what is common, the requester's send queue and PSNs, the
//! responder's receive queue and replay resources.

use std::collections::VecDeque;

use std::net::IpAddr;

use wire::{Psn, Qpn};

use verbs::{
    MrInfo, PdId, QpAttr, QpCaps, QpState, QpType, RecvWr, SendOp, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};

use crate::time::Instant;

use super::*;

#[derive(Debug, Clone)]
pub(super) struct SendWqe {
    pub(super) wr: SendWr,
    /// Numbers WQEs in posting order (the QP's `wqe_seq` when posted).
    pub(super) seq: u64,
    pub(super) first_psn: Psn,
    pub(super) npkts: u32,
    pub(super) len: u64,
    /// READ: response bytes received so far.
    pub(super) done_bytes: u64,
    /// An inline send's payload, copied when it was posted.
    pub(super) inline: Option<Box<[u8]>>,
}

impl SendWqe {
    pub(super) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
    pub(super) fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.wr.op,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
}

/// A message the responder is in the middle of.
#[derive(Debug, Clone)]
pub(super) enum InMsg {
    Send { recv: RecvWr, offset: u64, imm: Option<u32> },
    Write { mr: MrInfo, offset: u64, remaining: u64, total: u64 },
}

/// What the responder sends, in order.
#[derive(Debug, Clone)]
pub(super) enum RespOut {
    Ack { psn: Psn, syndrome: u8, msn: u32 },
    Read { first_psn: Psn, mr: MrInfo, offset: u64, len: u64, next: u32, msn: u32 },
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// A READ or atomic the responder remembers, for duplicates.
#[derive(Debug, Clone, Copy)]
pub(super) enum Resource {
    Read { psn: Psn, npkts: u32, mr: MrInfo, offset: u64, len: u64 },
    Atomic { psn: Psn, orig: u64 },
}

/// A queue pair: what both its sides read (type, state, attributes, CQs, SRQ), the
/// requester's state and the responder's.
#[derive(Debug)]
pub(super) struct QueuePair {
    pub(super) qpn: Qpn,
    pub(super) qp_type: QpType,
    pub(super) state: QpState,
    pub(super) pd: PdId,
    pub(super) send_cq: CqId,
    pub(super) recv_cq: CqId,
    pub(super) caps: QpCaps,
    pub(super) attr: QpAttr,
    /// Whether the QP is in the endpoint's queue of QPs that may have something to send.
    pub(super) queued: bool,
    /// The shared receive queue its receives come from, if any.
    pub(super) srq: Option<SrqId>,
    /// The send queue and what has been sent of it.
    pub(super) req: Requester,
    /// The receive queue and what arrives for it.
    pub(super) resp: Responder,
}

/// A QP's requester: its send queue, PSNs and timers.
#[derive(Debug, Default)]
pub(super) struct Requester {
    pub(super) sq: VecDeque<SendWqe>,
    /// The `seq` the next posted WQE gets.
    pub(super) wqe_seq: u64,
    /// The `seq` of the WQE the last request packet came from: where the next one most
    /// likely comes from too (a hint, checked before use).
    pub(super) cursor: u64,
    /// PSN the next posted WQE starts at.
    pub(super) post_psn: Psn,
    /// PSN of the next packet to send.
    pub(super) next_psn: Psn,
    /// Oldest unacknowledged PSN.
    pub(super) una: Psn,
    pub(super) packets_since_ackreq: u32,
    /// Messages ended without AckReq since the last packet that had it.
    pub(super) wqes_since_ackreq: u32,
    pub(super) retry_left: u8,
    pub(super) rnr_left: u8,
    pub(super) timer: Option<Instant>,
    pub(super) rnr_until: Option<Instant>,
    /// Packets below this PSN were sent before (a restart is under way).
    pub(super) resend_until: Psn,
    /// The end (the PSN after the last) of each READ or atomic request sent whose
    /// responses are not all in: at most `max_rd_atomic`.
    pub(super) rd_out: VecDeque<Psn>,
    /// The PSN after the last READ response asked for.
    pub(super) read_end: Psn,
    /// READ response bytes that may still come: the PSNs from the oldest unacknowledged to
    /// `read_end`, in MTUs (responses asked for twice, after a loss, are counted once: they
    /// are the same PSNs).
    pub(super) read_inflight: u64,
    /// The oldest unacknowledged PSN when a gap in READ responses last asked again, and
    /// when: a gap asks again once per PSN and an eighth of the retransmit timeout, not once
    /// per response that follows it.
    pub(super) gap_asked: Option<(Psn, Instant)>,
    /// The most READ response bytes it may have asked for and not received: halved on a
    /// loss, grown by about an MTU per window received, up to the endpoint's
    /// `read_window_qp`.
    pub(super) read_window: u64,
    /// Packets it may have sent and not had acknowledged (RC SEND and WRITE).
    pub(super) send_window: u32,
    /// Its SEND and WRITE bytes counted in the device's `send_inflight`.
    pub(super) send_inflight: u64,
    /// Packets acknowledged towards the next step of `send_window`.
    pub(super) send_acked: u32,
}

/// The smallest send window a loss leaves (packets): a whole 64 KiB message at a 1024-byte
/// MTU, and rxe's ACK interval. Smaller, a lossy path (not an overrun one) stalls on every
/// lost ACK until the retransmit timer, and each timer costs a retry.
pub(super) const SEND_WINDOW_MIN: u32 = 64;

impl Requester {
    /// The WQE the next PSN belongs to, and the packet's place in it: nearly always the one
    /// the last packet came from or the next (a deep send queue would make a search cost a
    /// packet dearly); else searched from the newest. The cursor moves to it.
    #[inline]
    pub(super) fn wqe_of_next_psn(&mut self) -> Option<(usize, u32)> {
        let holds = |i: usize| {
            let w = self.sq.get(i)?;
            let d = self.next_psn.diff(w.first_psn);
            (d >= 0 && (d as u32) < w.npkts).then_some((i, d as u32))
        };
        let guess = self.sq.front().map_or(0, |f| self.cursor.wrapping_sub(f.seq) as usize);
        let found = holds(guess).or_else(|| holds(guess.wrapping_add(1))).or_else(|| {
            let newest = self.sq.iter().rposition(|w| self.next_psn.diff(w.first_psn) >= 0)?;
            holds(newest)
        });
        let (i, d) = found?;
        self.cursor = self.sq[i].seq;
        Some((i, d))
    }

    /// A loss (a NAK, a timeout): half the send window, not below [`SEND_WINDOW_MIN`] (or
    /// `max`, the configured window, if smaller).
    pub(super) fn shrink_send_window(&mut self, max: u32) {
        self.send_window = (self.send_window / 2).max(SEND_WINDOW_MIN.min(max));
        self.send_acked = 0;
    }

    /// `n` more packets acknowledged: one more packet of window per window acknowledged, up
    /// to `max`.
    pub(super) fn grow_send_window(&mut self, n: u32, max: u32) {
        if self.send_window >= max {
            return;
        }
        self.send_acked = self.send_acked.saturating_add(n);
        while self.send_acked >= self.send_window && self.send_window < max {
            self.send_acked -= self.send_window;
            self.send_window += 1;
        }
    }

    /// A loss: half the READ window, not below 16 MTUs (or `max`, if less). Smaller, a
    /// lossy path would leave too few responses in flight for a gap to show a loss before
    /// the retransmit timer does, and each timer costs a retry.
    pub(super) fn shrink_read_window(&mut self, mtu: u64, max: u64) {
        self.read_window = (self.read_window / 2).max((16 * mtu).min(max));
    }

    /// A READ response came in order: the window grows by about an MTU per window's worth
    /// (additive increase).
    pub(super) fn grow_read_window(&mut self, mtu: u64, max_window: u64) {
        if self.read_window < max_window {
            let grow = (mtu * mtu / self.read_window.max(1)).max(1);
            self.read_window = (self.read_window + grow).min(max_window);
        }
    }

    /// Whether packets are sent and not yet acknowledged.
    pub(super) fn outstanding(&self) -> bool {
        self.una != self.next_psn
    }
}

/// A QP's responder: its receive queue, expected PSN, the message in progress, what it owes
/// the requester and the READ/atomic resources it keeps for duplicates.
#[derive(Debug, Default)]
pub(super) struct Responder {
    pub(super) rq: VecDeque<RecvWr>,
    pub(super) epsn: Psn,
    pub(super) msn: u32,
    pub(super) nak_sent: bool,
    pub(super) in_msg: Option<InMsg>,
    pub(super) resp_out: VecDeque<RespOut>,
    pub(super) resources: VecDeque<Resource>,
    pub(super) last_cnp: Option<Instant>,
    /// UD: the last PSN accepted from each (address, source QP), to drop duplicates.
    pub(super) ud_seen: HashMap<(IpAddr, Qpn), Psn>,
    /// A plain ACK waited once for a request of this QP to go first.
    pub(super) ack_waited: bool,
    /// The PSN of the last SEND/WRITE packet carried out, while no READ or atomic came
    /// after it: a PSN an ACK may name again at any time.
    pub(super) last_write_psn: Option<Psn>,
    /// After a duplicate SEND/WRITE: when to ACK `last_write_psn` again unasked, should the
    /// requester fall quiet, and how many times more (see `Responder::REACK_QUIET`).
    pub(super) reack: Option<(Instant, u8)>,
}

impl Responder {
    /// How long a requester that resent a message stays quiet before the responder ACKs
    /// its latest PSN again: longer than the gaps within one resend, shorter than rxe's
    /// 67 ms retransmit timeout.
    pub(super) const REACK_QUIET: Duration = Duration::from_millis(50);
    /// The wait before the second unasked ACK, should the first be lost.
    pub(super) const REACK_AGAIN: Duration = Duration::from_millis(400);
}

impl QueuePair {
    pub(super) fn mtu(&self) -> u64 {
        u64::from(self.attr.path_mtu.bytes())
    }
    pub(super) fn npkts(&self, len: u64) -> u32 {
        (len.div_ceil(self.mtu()).max(1)) as u32
    }
}

pub(super) fn wc(
    qp: &QueuePair,
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status,
        opcode,
        byte_len,
        imm: None,
        qp_num: qp.qpn,
        src_qp: None,
        grh: false,
    }
}
