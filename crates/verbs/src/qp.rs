//! Queue pairs (`ibv_qp`): creation, connection, posting.

use std::fmt;
use std::sync::Arc;

use crate::pd::PdLife;
use crate::*;

/// What a provider needs to create a QP.
#[derive(Debug, Clone, Copy)]
pub struct QpSpec {
    /// Its protection domain.
    pub pd: PdId,
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: CqId,
    /// Where receive completions go.
    pub recv_cq: CqId,
    /// Queue depths.
    pub caps: QpCaps,
    /// Its shared receive queue.
    pub srq: Option<SrqId>,
}

/// The attributes of a new QP (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: &'a CompletionQueue,
    /// Where receive completions go.
    pub recv_cq: &'a CompletionQueue,
    /// Queue depths.
    pub caps: QpCaps,
    /// Take receives from this SRQ instead of the QP's own receive queue.
    pub srq: Option<&'a SharedReceiveQueue>,
}

impl<'a> QpInit<'a> {
    /// A QP of `qp_type` with one CQ for both directions and default depths.
    pub fn new(qp_type: QpType, cq: &'a CompletionQueue) -> QpInit<'a> {
        QpInit { qp_type, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), srq: None }
    }
}

/// The attributes [`QueuePair::connect`] sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The peer's address and QP number.
    pub remote: Path,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// The peer's first PSN (what this QP expects).
    pub rq_psn: Psn,
    /// This QP's first PSN.
    pub sq_psn: Psn,
    /// RC: the local ACK timeout, 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// RC: retries after a timeout or sequence error (7 means 7, per IBTA).
    pub retry_cnt: u8,
    /// RC: retries after an RNR NAK (7: forever).
    pub rnr_retry: u8,
    /// RC: the RNR NAK timer code the responder sends.
    pub min_rnr_timer: u8,
    /// RC: READs and atomics this QP has outstanding.
    pub max_rd_atomic: u8,
    /// RC: READs and atomics this QP accepts at once.
    pub max_dest_rd_atomic: u8,
    /// The IP traffic class (DSCP and ECN) of its packets; `None` keeps the default.
    pub traffic_class: Option<u8>,
}

impl Connect {
    /// ibv_rc_pingpong's attributes towards `remote`: MTU 1024, timeout 14 (67 ms),
    /// retry_cnt 7, rnr_retry 7, min_rnr_timer 12, one outstanding READ or atomic each way.
    pub fn new(remote: Path, sq_psn: Psn, rq_psn: Psn) -> Connect {
        Connect {
            remote,
            path_mtu: Mtu::Mtu1024,
            rq_psn,
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            traffic_class: None,
        }
    }
}

/// A queue pair (`ibv_qp`).
pub struct QueuePair {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) qpn: Qpn,
    pub(crate) qp_type: QpType,
    /// The provider's hot paths and its direct reference to the QP.
    pub(crate) fast: Option<Arc<dyn FastPath>>,
    pub(crate) h: Handle,
    /// Its protection domain, freed after it.
    pub(crate) _pd: Arc<PdLife>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair").field("qpn", &self.qpn).field("type", &self.qp_type).finish()
    }
}

impl QueuePair {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Changes state and attributes (`ibv_modify_qp`).
    pub fn modify(&self, attr: &ModifyQp) -> Result<()> {
        self.dev.modify_qp(self.qpn, attr)
    }

    /// Brings a QP in the INIT state to RTS towards `c.remote` (`ibv_modify_qp` to RTR, then
    /// to RTS, with the attributes each transition needs for the QP's type). A UD QP takes
    /// only `sq_psn` from `c`, and `path_mtu` as the largest message it sends.
    pub fn connect(&self, c: &Connect) -> Result<()> {
        let ud = self.qp_type == QpType::Ud;
        let rc = self.qp_type == QpType::Rc;
        let rtr = ModifyQp {
            state: Some(QpState::Rtr),
            // UD: the largest message (a UD message is one packet), as a port's MTU is.
            path_mtu: Some(c.path_mtu),
            dest: (!ud).then_some(c.remote),
            rq_psn: (!ud).then_some(c.rq_psn),
            max_dest_rd_atomic: rc.then_some(c.max_dest_rd_atomic),
            min_rnr_timer: rc.then_some(c.min_rnr_timer),
            traffic_class: c.traffic_class,
            ..Default::default()
        };
        self.modify(&rtr)?;
        let rts = ModifyQp {
            state: Some(QpState::Rts),
            sq_psn: Some(c.sq_psn),
            timeout: rc.then_some(c.timeout),
            retry_cnt: rc.then_some(c.retry_cnt),
            rnr_retry: rc.then_some(c.rnr_retry),
            max_rd_atomic: rc.then_some(c.max_rd_atomic),
            ..Default::default()
        };
        self.modify(&rts)
    }

    /// The state and attributes (`ibv_query_qp`).
    pub fn query(&self) -> Result<(QpState, QpAttr)> {
        self.dev.query_qp(self.qpn)
    }

    /// Posts a send work request (`ibv_post_send`); the device starts sending at once.
    #[inline]
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post_send_batch(std::slice::from_ref(&wr))
    }

    /// Posts several send work requests with one doorbell.
    #[inline]
    pub fn post_send_batch(&self, wrs: &[SendWr]) -> Result<()> {
        match &self.fast {
            // SAFETY: the handle is this QP's, which only `self`'s drop destroys.
            Some(f) => unsafe { f.post_send(self.qpn, self.h, wrs) },
            None => self.dev.post_send(self.qpn, wrs),
        }
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_batch(std::slice::from_ref(&wr))
    }

    /// Posts several receive work requests.
    #[inline]
    pub fn post_recv_batch(&self, wrs: &[RecvWr]) -> Result<()> {
        match &self.fast {
            // SAFETY: as in `post_send_batch`.
            Some(f) => unsafe { f.post_recv(self.qpn, self.h, wrs) },
            None => self.dev.post_recv(self.qpn, wrs),
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.dev.destroy_qp(self.qpn);
    }
}
