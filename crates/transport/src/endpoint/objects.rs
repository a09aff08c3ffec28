//! The verbs: protection domains, memory regions, CQs, SRQs, QPs and their state machine,
//! posting work requests.

use std::collections::VecDeque;

use wire::Qpn;

use verbs::{
    Access, ModifyQp, MrId, MrInfo, PdId, QpAttr, QpCaps, QpState, QpType, RecvWr, SendOp, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};

use crate::memory::Memory;
use crate::qp;

use super::*;

impl<M: Memory> Endpoint<M> {
    /// A new protection domain; refused once [`EndpointConfig::max_pd`] exist.
    pub fn alloc_pd(&mut self) -> Result<PdId, Error> {
        if self.pds.len() >= self.cfg.max_pd as usize {
            return Err(Error::Exhausted { what: "protection domains", max: self.cfg.max_pd });
        }
        // Ids are not reused (a stale id names nothing), and never 0.
        self.next_pd = self.next_pd.checked_add(1).unwrap_or(1);
        while self.next_pd == 0 || self.pds.contains(&self.next_pd) {
            self.next_pd = self.next_pd.wrapping_add(1);
        }
        self.pds.insert(self.next_pd);
        Ok(PdId(self.next_pd))
    }

    /// Frees a protection domain (`ibv_dealloc_pd`); refused while a memory region, QP or
    /// shared receive queue is in it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), Error> {
        if !self.pds.contains(&pd.0) {
            return Err(Error::NoPd(pd));
        }
        let in_use = self.dev.mrs.by_lkey.values().any(|m| m.pd == pd)
            || self.qps.values().any(|q| q.pd == pd)
            || self.dev.cqs.srqs.iter().flatten().any(|s| s.pd == pd);
        if in_use {
            return Err(Error::PdInUse(pd));
        }
        self.pds.remove(&pd.0);
        Ok(())
    }

    /// How many protection domains are allocated.
    pub fn pd_count(&self) -> usize {
        self.pds.len()
    }

    /// A new completion queue.
    pub fn create_cq(&mut self) -> CqId {
        self.dev.cqs.queues.push(VecDeque::new());
        CqId(self.dev.cqs.len() as u32 - 1)
    }

    pub(super) fn next_key(&mut self) -> u32 {
        // splitmix64 over the seed: unguessable when the seed is.
        loop {
            self.key_state = self.key_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.key_state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let k = (z ^ (z >> 31)) as u32;
            if k != 0 && !self.dev.mrs.by_rkey.contains_key(&k) {
                return k;
            }
        }
    }

    /// Registers `len` bytes of the provider's buffer `id` at virtual address `addr`.
    pub fn register_mr(
        &mut self,
        pd: PdId,
        id: MrId,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, Error> {
        if !self.pds.contains(&pd.0) {
            return Err(Error::NoPd(pd));
        }
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Error::InvalidMr("zero length or address overflow"));
        }
        let lkey = self.next_lkey;
        self.next_lkey += 1;
        let remote = Access(
            access.0 & (Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0),
        );
        let rkey = if remote.0 != 0 { self.next_key() } else { 0 };
        let mr = MrInfo { id, pd, addr, len, access, lkey, rkey };
        self.dev.mrs.insert(mr);
        Ok(mr)
    }

    /// The region with local key `lkey`.
    pub fn mr(&self, lkey: u32) -> Option<&MrInfo> {
        self.dev.mrs.by_lkey.get(&lkey)
    }

    /// Deregisters a region; later accesses with its keys fail.
    pub fn deregister_mr(&mut self, lkey: u32) -> Option<MrInfo> {
        self.dev.mrs.remove(lkey)
    }

    /// Creates a QP in the RESET state.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        qp_type: QpType,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
    ) -> Result<Qpn, Error> {
        self.create_qp_with_srq(pd, qp_type, send_cq, recv_cq, caps, None)
    }

    /// Creates a QP in the RESET state whose receives come from the shared receive queue
    /// `srq` (when given); such a QP refuses [`Endpoint::post_recv`].
    pub fn create_qp_with_srq(
        &mut self,
        pd: PdId,
        qp_type: QpType,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
        srq: Option<SrqId>,
    ) -> Result<Qpn, Error> {
        if !self.pds.contains(&pd.0) {
            return Err(Error::NoPd(pd));
        }
        if let Some(id) = srq {
            match self.dev.cqs.srq(id) {
                Some(s) if s.pd == pd => {}
                Some(_) => return Err(Error::InvalidWr("the SRQ belongs to another PD")),
                None => return Err(Error::NoSrq(id)),
            }
        }
        for cq in [send_cq, recv_cq] {
            if cq.0 as usize >= self.dev.cqs.len() {
                return Err(Error::NoCq(cq));
            }
        }
        if caps.max_inline_data > verbs::MAX_INLINE_DATA {
            return Err(Error::CapTooLarge {
                what: "max_inline_data",
                asked: caps.max_inline_data,
                max: verbs::MAX_INLINE_DATA,
            });
        }
        // The next free QPN, wrapping within 24 bits past the special QPs.
        let qpn = loop {
            let q = Qpn::new(self.next_qpn);
            self.next_qpn = if self.next_qpn >= MAX_QPN { FIRST_QPN } else { self.next_qpn + 1 };
            if !self.qps.contains_key(&q) {
                break q;
            }
        };
        let attr = QpAttr::default();
        self.qps.insert(
            qpn,
            QueuePair {
                qpn,
                qp_type,
                state: QpState::Reset,
                pd,
                send_cq,
                recv_cq,
                caps,
                attr,
                queued: false,
                srq,
                req: Requester::default(),
                resp: Responder::default(),
            },
        );
        Ok(qpn)
    }

    /// Destroys a QP; its outstanding work is dropped without completions.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Error> {
        let mut qp = self.qps.remove(&qpn).ok_or(Error::NoQp(qpn))?;
        Self::return_to_srq(&mut self.dev.cqs, &mut qp);
        self.dev.cqs.release(&mut qp.req);
        self.dev.cqs.read_waiters.retain(|q| *q != qpn);
        self.dev.cqs.send_waiters.retain(|q| *q != qpn);
        Ok(())
    }

    /// Gives the receives a QP took from its SRQ (and has not begun to fill) back to the SRQ.
    pub(super) fn return_to_srq(cqs: &mut CqTable, qp: &mut QueuePair) {
        let Some(srq) = qp.srq.and_then(|id| cqs.srq_mut(id)) else { return };
        if let Some(InMsg::Send { recv, .. }) = qp.resp.in_msg.take() {
            qp.resp.rq.push_front(recv);
        }
        while let Some(r) = qp.resp.rq.pop_back() {
            srq.rq.push_front(r);
        }
    }

    /// Queue pairs that exist.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// Shared receive queues that exist.
    pub fn srq_count(&self) -> usize {
        self.dev.cqs.srqs.iter().filter(|s| s.is_some()).count()
    }

    /// A new shared receive queue in `pd` holding up to `max_wr` receives.
    pub fn create_srq(&mut self, pd: PdId, max_wr: u32) -> Result<SrqId, Error> {
        if !self.pds.contains(&pd.0) {
            return Err(Error::NoPd(pd));
        }
        self.dev.cqs.srqs.push(Some(Srq { pd, rq: VecDeque::new(), max_wr, limit: 0 }));
        Ok(SrqId(self.dev.cqs.srqs.len() as u32 - 1))
    }

    /// Destroys a shared receive queue; refused while a QP uses it.
    pub fn destroy_srq(&mut self, id: SrqId) -> Result<(), Error> {
        if self.qps.values().any(|q| q.srq == Some(id)) {
            return Err(Error::InvalidWr("the SRQ is still used by a QP"));
        }
        let slot = self.dev.cqs.srqs.get_mut(id.0 as usize).ok_or(Error::NoSrq(id))?;
        slot.take().map(|_| ()).ok_or(Error::NoSrq(id))
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when fewer than `limit`
    /// receives remain, [`Event::SrqLimitReached`] is raised once and the limit disarms.
    pub fn arm_srq_limit(&mut self, id: SrqId, limit: u32) -> Result<(), Error> {
        let srq = self.dev.cqs.srq_mut(id).ok_or(Error::NoSrq(id))?;
        srq.limit = limit;
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv(&mut self, id: SrqId, wr: RecvWr) -> Result<(), Error> {
        let srq = self.dev.cqs.srq(id).ok_or(Error::NoSrq(id))?;
        if srq.rq.len() >= srq.max_wr as usize {
            return Err(Error::QueueFull("shared receive"));
        }
        if !self.dev.mrs.check_sgl(srq.pd, &wr.sgl, true) {
            return Err(Error::InvalidWr(
                "a receive buffer's key, bounds, PD or LOCAL_WRITE right is wrong",
            ));
        }
        if let Some(srq) = self.dev.cqs.srq_mut(id) {
            srq.rq.push_back(wr);
        }
        Ok(())
    }

    /// The number of receives waiting in a shared receive queue.
    pub fn srq_len(&self, id: SrqId) -> Option<usize> {
        self.dev.cqs.srq(id).map(|s| s.rq.len())
    }

    /// The number of completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.dev.cqs.queues.get(cq.0 as usize).map_or(0, VecDeque::len)
    }

    /// The next asynchronous event (a QP that failed, an SRQ below its limit).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.dev.cqs.events.pop_front()
    }

    /// A QP's state and attributes.
    ///
    /// Once the QP is ready to receive, `rq_psn` is the PSN its responder expects next and
    /// `sq_psn` the PSN its requester sends next, as rxe and mlx5 report them: how far the
    /// two sides of a UC or RC connection got.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr), Error> {
        let q = self.qps.get(&qpn).ok_or(Error::NoQp(qpn))?;
        let mut attr = q.attr;
        if matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            attr.rq_psn = q.resp.epsn;
        }
        if matches!(q.state, QpState::Rts | QpState::Sqd) {
            attr.sq_psn = q.req.next_psn;
        }
        Ok((q.state, attr))
    }

    /// Changes a QP's state and attributes (`ibv_modify_qp`).
    pub fn modify_qp(&mut self, qpn: Qpn, m: &ModifyQp) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoQp(qpn))?;
        let to = qp::check_transition(qp.qp_type, qp.state, m)?;
        qp::apply(&mut qp.attr, m);
        let from = qp.state;
        qp.state = to;
        match to {
            QpState::Reset => {
                Self::return_to_srq(&mut self.dev.cqs, qp);
                qp.req.sq.clear();
                qp.resp.rq.clear();
                qp.resp.resp_out.clear();
                qp.resp.resources.clear();
                qp.resp.in_msg = None;
                qp.req.timer = None;
                qp.req.rnr_until = None;
                qp.req.rd_out.clear();
                self.dev.cqs.release(&mut qp.req);
            }
            QpState::Rtr if from == QpState::Init => {
                qp.resp.epsn = qp.attr.rq_psn;
                qp.resp.msn = 0;
                qp.resp.nak_sent = false;
            }
            QpState::Rts if from == QpState::Rtr => {
                let p = qp.attr.sq_psn;
                qp.req.post_psn = p;
                qp.req.next_psn = p;
                qp.req.una = p;
                qp.req.resend_until = p;
                qp.req.retry_left = qp.attr.retry_cnt;
                qp.req.rnr_left = qp.attr.rnr_retry;
                qp.req.read_window = self.cfg.read_window_qp.min(self.cfg.read_window);
                qp.req.read_end = p;
                qp.req.gap_asked = None;
                qp.req.send_window = self.cfg.send_window.max(1);
                qp.req.send_acked = 0;
            }
            QpState::Err => {
                Self::flush(&mut self.dev.cqs, qp);
            }
            _ => {}
        }
        self.mark(qpn);
        Ok(())
    }

    /// Completes everything outstanding on `qp` with WR_FLUSH_ERR.
    pub(super) fn flush(cqs: &mut CqTable, qp: &mut QueuePair) {
        if qp.state != QpState::Err {
            // Not asked for by modify_qp: the QP failed on its own.
            cqs.events.push_back(Event::QpFatal(qp.qpn));
        }
        Self::return_to_srq(cqs, qp);
        cqs.release(&mut qp.req);
        qp.req.rd_out.clear();
        qp.state = QpState::Err;
        qp.req.timer = None;
        qp.req.rnr_until = None;
        qp.resp.resp_out.clear();
        for w in qp.req.sq.drain(..) {
            cqs[qp.send_cq.0 as usize].push_back(WorkCompletion {
                wr_id: w.wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: w.wr.op.wc_opcode(),
                byte_len: 0,
                imm: None,
                qp_num: qp.qpn,
                src_qp: None,
                grh: false,
            });
        }
        if let Some(InMsg::Send { recv, .. }) = qp.resp.in_msg.take() {
            qp.resp.rq.push_front(recv);
        }
        for r in qp.resp.rq.drain(..) {
            cqs[qp.recv_cq.0 as usize].push_back(WorkCompletion {
                wr_id: r.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm: None,
                qp_num: qp.qpn,
                src_qp: None,
                grh: false,
            });
        }
    }

    /// Posts a send work request.
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoQp(qpn))?;
        let op_name = match wr.op {
            SendOp::Send => "SEND",
            SendOp::SendWithImm(_) => "SEND_WITH_IMM",
            SendOp::Write { .. } => "RDMA_WRITE",
            SendOp::WriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::Read { .. } => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        };
        let allowed = match qp.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.op,
                SendOp::Send
                    | SendOp::SendWithImm(_)
                    | SendOp::Write { .. }
                    | SendOp::WriteWithImm { .. }
            ),
            QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)),
        };
        if !allowed {
            return Err(Error::OpNotSupported { op: op_name, qp_type: qp.qp_type });
        }
        let len = wr.len();
        match qp.qp_type {
            QpType::Ud => {
                if wr.ud.is_none() {
                    return Err(Error::InvalidWr("a UD send needs a destination"));
                }
                if len > qp.mtu() {
                    return Err(Error::TooLong { len, max: qp.mtu() });
                }
            }
            _ if len > 1 << 31 => return Err(Error::TooLong { len, max: 1 << 31 }),
            _ => {}
        }
        let atomic = matches!(wr.op, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. });
        if atomic && len != 8 {
            return Err(Error::InvalidWr("an atomic needs exactly 8 bytes of local buffer"));
        }
        if wr.inline {
            if matches!(wr.op, SendOp::Read { .. }) || atomic {
                return Err(Error::InvalidWr("only SEND and WRITE carry their payload inline"));
            }
            if len > u64::from(qp.caps.max_inline_data) {
                return Err(Error::TooLong { len, max: u64::from(qp.caps.max_inline_data) });
            }
        }
        match qp.state {
            QpState::Rts | QpState::Sqd => {}
            QpState::Err => {
                self.dev.cqs[qp.send_cq.0 as usize].push_back(WorkCompletion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: wr.op.wc_opcode(),
                    byte_len: 0,
                    imm: None,
                    qp_num: qpn,
                    src_qp: None,
                    grh: false,
                });
                return Ok(());
            }
            s => return Err(Error::BadState { qpn, state: s, verb: "post_send" }),
        }
        if qp.req.sq.len() >= qp.caps.max_send_wr as usize {
            return Err(Error::QueueFull("send"));
        }
        let local_write = matches!(wr.op, SendOp::Read { .. }) || atomic;
        if !self.dev.mrs.check_sgl(qp.pd, &wr.sgl, local_write) {
            // The HCA finds the bad key when it executes the WR: a local protection error,
            // and the QP goes to the error state.
            let wc = WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::LocProtErr,
                opcode: wr.op.wc_opcode(),
                byte_len: 0,
                imm: None,
                qp_num: qpn,
                src_qp: None,
                grh: false,
            };
            self.dev.cqs[qp.send_cq.0 as usize].push_back(wc);
            Self::flush(&mut self.dev.cqs, qp);
            return Ok(());
        }
        // Inline: the payload is taken now; the buffer is the application's again.
        let inline = if wr.inline {
            let mut data = vec![0u8; len as usize];
            if !gather(&self.dev.mrs, &self.dev.mem, &wr.sgl, 0, &mut data) {
                return Err(Error::InvalidWr("an inline payload could not be read"));
            }
            Some(data.into_boxed_slice())
        } else {
            None
        };
        let npkts = match wr.op {
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ if qp.qp_type == QpType::Ud => 1,
            _ => qp.npkts(len),
        };
        let first_psn = qp.req.post_psn;
        qp.req.post_psn = first_psn.add(npkts);
        let seq = qp.req.wqe_seq;
        qp.req.wqe_seq += 1;
        qp.req.sq.push_back(SendWqe { wr, seq, first_psn, npkts, len, done_bytes: 0, inline });
        self.mark(qpn);
        Ok(())
    }

    /// Posts a receive work request.
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoQp(qpn))?;
        if qp.srq.is_some() {
            return Err(Error::InvalidWr("the QP takes its receives from an SRQ"));
        }
        match qp.state {
            QpState::Reset => {
                return Err(Error::BadState { qpn, state: qp.state, verb: "post_recv" });
            }
            QpState::Err => {
                self.dev.cqs[qp.recv_cq.0 as usize].push_back(WorkCompletion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp_num: qpn,
                    src_qp: None,
                    grh: false,
                });
                return Ok(());
            }
            _ => {}
        }
        if qp.resp.rq.len() >= qp.caps.max_recv_wr as usize {
            return Err(Error::QueueFull("receive"));
        }
        if !self.dev.mrs.check_sgl(qp.pd, &wr.sgl, true) {
            return Err(Error::InvalidWr(
                "a receive buffer's key, bounds, PD or LOCAL_WRITE right is wrong",
            ));
        }
        qp.resp.rq.push_back(wr);
        Ok(())
    }
}
