//! Queue pairs: creation, the state machine's transitions, queries, destruction.

use super::*;

#[derive(Debug)]
pub(crate) struct QpEntry {
    pub(crate) qp: Raw<sys::ibv_qp>,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdId,
    /// The traffic class of packets (and of UD address handles).
    pub(crate) traffic_class: u8,
    /// UD: address handles by destination.
    /// Address handles by (destination, flow label).
    pub(crate) ahs: Mutex<HashMap<(IpAddr, u32), Raw<sys::ibv_ah>>>,
}

pub(crate) fn destroy_qp_entry(q: QpEntry) {
    // SAFETY: the QP came out of the table (no other thread can reach it); its address
    // handles are destroyed after it, as libibverbs requires nothing of the order.
    unsafe { sys::ibv_destroy_qp(q.qp.ptr()) };
    for (_, ah) in q.ahs.into_inner().unwrap_or_else(PoisonError::into_inner) {
        // SAFETY: the AH was made by ibv_create_ah and its only user, the QP, is gone.
        unsafe { sys::ibv_destroy_ah(ah.ptr()) };
    }
}

impl RdmaCoreDevice {
    pub(crate) fn create_qp(&self, spec: &QpSpec) -> Result<Qpn> {
        let mut t = write_tables(&self.tables);
        let swpd = t
            .pds
            .get(&spec.pd.0)
            .ok_or(Error::no_such(format_args!("protection domain {:?}", spec.pd)))?
            .clone();
        let cq = |id: CqId| t.cqs.get(&id.0).map(|c| c.ptr()).ok_or(Error::ForeignObject("CQ"));
        let (send_cq, recv_cq) = (cq(spec.send_cq)?, cq(spec.recv_cq)?);
        let srq = match spec.srq {
            Some(s) => t.srqs.get(&s.0).ok_or(Error::ForeignObject("SRQ"))?.ptr(),
            None => ptr::null_mut(),
        };
        let mut init = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq,
            recv_cq,
            srq,
            cap: sys::ibv_qp_cap {
                max_send_wr: spec.caps.max_send_wr,
                max_recv_wr: if srq.is_null() { spec.caps.max_recv_wr } else { 0 },
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: spec.caps.max_inline_data,
            },
            qp_type: match spec.qp_type {
                QpType::Rc => sys::ibv_qp_type::IBV_QPT_RC,
                QpType::Uc => sys::ibv_qp_type::IBV_QPT_UC,
                QpType::Ud => sys::ibv_qp_type::IBV_QPT_UD,
            },
            sq_sig_all: 0,
        };
        // SAFETY: the PD, CQs and SRQ are alive (held in the table under the write lock).
        let qp = unsafe { sys::ibv_create_qp(swpd.pd().as_ptr(), &mut init) };
        let qp = Raw::new(qp)
            .ok_or_else(|| self.call_err("ibv_create_qp", io::Error::last_os_error()))?;
        // SAFETY: a QP libibverbs just created.
        let qpn = unsafe { (*qp.ptr()).qp_num };
        t.qps.insert(
            qpn,
            QpEntry {
                qp,
                qp_type: spec.qp_type,
                pd: spec.pd,
                traffic_class: QpAttr::default().traffic_class,
                ahs: Mutex::new(HashMap::new()),
            },
        );
        Ok(Qpn::new(qpn))
    }

    pub(crate) fn modify_qp(&self, qpn: Qpn, m: &ModifyQp) -> Result<()> {
        use sys::ibv_qp_attr_mask as k;
        let mut t = write_tables(&self.tables);
        let q = t.qps.get_mut(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        if let Some(tc) = m.traffic_class {
            q.traffic_class = tc;
        }
        let (qp, ty, tclass) = (q.qp, q.qp_type, q.traffic_class);
        // SAFETY: all-zero is a valid ibv_qp_attr (plain integers and pointers).
        let mut a: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut mask = 0u32;
        let ud = ty == QpType::Ud;
        if let Some(s) = m.state {
            a.qp_state = state_to_ibv(s);
            mask |= k::IBV_QP_STATE.0;
            if s == QpState::Init {
                a.pkey_index = 0;
                a.port_num = PORT;
                mask |= k::IBV_QP_PKEY_INDEX.0 | k::IBV_QP_PORT.0;
                if ud {
                    a.qkey = m.qkey.unwrap_or(QKey(0)).0;
                    mask |= k::IBV_QP_QKEY.0;
                } else {
                    a.qp_access_flags = m.access.map_or(0, |x| access_flags(x).bits() as u32);
                    mask |= k::IBV_QP_ACCESS_FLAGS.0;
                }
            }
        }
        if ud {
            if let Some(qk) = m.qkey {
                a.qkey = qk.0;
                mask |= k::IBV_QP_QKEY.0;
            }
        } else if let Some(acc) = m.access {
            a.qp_access_flags = access_flags(acc).bits() as u32;
            mask |= k::IBV_QP_ACCESS_FLAGS.0;
        }
        // A UD QP's path MTU is the port's: ibv_modify_qp takes none.
        if let (Some(mtu), false) = (m.path_mtu, ud) {
            a.path_mtu = mtu_to_ibv(mtu);
            mask |= k::IBV_QP_PATH_MTU.0;
        }
        if let (Some(d), false) = (m.dest, ud) {
            // On RoCEv2 the flow label sets the UDP source port (rdma_get_udp_sport).
            a.ah_attr = self.ah_attr(d.ip, d.flow_label, tclass);
            a.dest_qp_num = d.qpn.get();
            mask |= k::IBV_QP_AV.0 | k::IBV_QP_DEST_QPN.0;
        }
        if let (Some(p), false) = (m.rq_psn, ud) {
            a.rq_psn = p.get();
            mask |= k::IBV_QP_RQ_PSN.0;
        }
        if let Some(p) = m.sq_psn {
            a.sq_psn = p.get();
            mask |= k::IBV_QP_SQ_PSN.0;
        }
        let rc_only: [(Option<u8>, &mut u8, u32); 6] = [
            (m.timeout, &mut a.timeout, k::IBV_QP_TIMEOUT.0),
            (m.retry_cnt, &mut a.retry_cnt, k::IBV_QP_RETRY_CNT.0),
            (m.rnr_retry, &mut a.rnr_retry, k::IBV_QP_RNR_RETRY.0),
            (m.min_rnr_timer, &mut a.min_rnr_timer, k::IBV_QP_MIN_RNR_TIMER.0),
            (m.max_rd_atomic, &mut a.max_rd_atomic, k::IBV_QP_MAX_QP_RD_ATOMIC.0),
            (m.max_dest_rd_atomic, &mut a.max_dest_rd_atomic, k::IBV_QP_MAX_DEST_RD_ATOMIC.0),
        ];
        for (v, field, bit) in rc_only {
            if let (Some(v), QpType::Rc) = (v, ty) {
                *field = v;
                mask |= bit;
            }
        }
        // SAFETY: the QP is alive (write lock) and `a` holds every attribute `mask` names.
        let rc = unsafe { sys::ibv_modify_qp(qp.ptr(), &mut a, mask as i32) };
        if rc != 0 {
            // SAFETY: the QP is alive; libibverbs keeps `state` current.
            let from = state_from_ibv(unsafe { (*qp.ptr()).state });
            return Err(match (rc, m.state) {
                (libc::EINVAL, Some(to)) => Error::refused(
                    ErrorKind::InvalidState,
                    format!("invalid QP transition {from:?} -> {to:?}"),
                ),
                _ => self.errno("ibv_modify_qp", rc),
            });
        }
        Ok(())
    }

    pub(crate) fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr)> {
        let t = read_tables(&self.tables);
        let q = t.qps.get(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        // SAFETY: all-zero is a valid value of both attribute structs.
        let (mut a, mut init): (sys::ibv_qp_attr, sys::ibv_qp_init_attr) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        let mask = 0x3f_ffff;
        // SAFETY: the QP is alive and both structs are writable.
        let rc = unsafe { sys::ibv_query_qp(q.qp.ptr(), &mut a, mask, &mut init) };
        if rc != 0 {
            return Err(self.errno("ibv_query_qp", rc));
        }
        // SAFETY: the GID union is 16 plain bytes.
        let dgid = Gid(unsafe { a.ah_attr.grh.dgid.raw });
        let dest = (q.qp_type != QpType::Ud).then(|| dgid.to_ip()).flatten().map(|ip| {
            verbs::Path { ip, qpn: Qpn::new(a.dest_qp_num), flow_label: a.ah_attr.grh.flow_label }
        });
        let mut access = Access(0);
        for bit in
            [Access::LOCAL_WRITE, Access::REMOTE_WRITE, Access::REMOTE_READ, Access::REMOTE_ATOMIC]
        {
            if a.qp_access_flags & bit.0 != 0 {
                access = access | bit;
            }
        }
        let attr = QpAttr {
            path_mtu: mtu_from_ibv(a.path_mtu),
            dest,
            rq_psn: Psn::new(a.rq_psn),
            sq_psn: Psn::new(a.sq_psn),
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            qkey: QKey(a.qkey),
            traffic_class: a.ah_attr.grh.traffic_class,
            access,
        };
        Ok((state_from_ibv(a.qp_state), attr))
    }

    pub(crate) fn destroy_qp(&self, qpn: Qpn) {
        if let Some(q) = write_tables(&self.tables).qps.remove(&qpn.get()) {
            destroy_qp_entry(q);
        }
    }
}
