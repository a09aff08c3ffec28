//! Work requests: classic `ibv_post_send`/`ibv_post_recv`, the prepared fast path, and the translation of podnet's work requests into libibverbs'.

use super::*;

impl<T> Clone for Raw<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Raw<T> {}

impl<T> std::fmt::Debug for Raw<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

// SAFETY: libibverbs objects may be used from any thread (rdma-core documents its verbs as
// thread-safe); the pointer is only dereferenced while the provider's tables hold it.
unsafe impl<T> Send for Raw<T> {}

// SAFETY: as above.
unsafe impl<T> Sync for Raw<T> {}

impl Drop for Region {
    fn drop(&mut self) {
        // Deregister first (the table held the only reference): the device may touch the
        // pages until then.
        drop(self.mr.take());
        if let Some((p, len)) = self.map.take() {
            // SAFETY: `p` and `len` are what `mmap` returned for this region, and with the
            // registration gone neither the device nor the provider uses them any more.
            unsafe { libc::munmap(p.ptr().cast(), len) };
        }
    }
}

impl Drop for RdmaCoreDevice {
    fn drop(&mut self) {
        // Every verbs object holds the device, so by now the objects are gone; whatever a
        // leaked handle left behind is destroyed in dependency order before sideway
        // deallocates the PDs and closes the device.
        let t = self.tables.get_mut().unwrap_or_else(PoisonError::into_inner);
        for (_, q) in t.qps.drain() {
            destroy_qp_entry(q);
        }
        for (_, s) in t.srqs.drain() {
            // SAFETY: no QP uses the SRQ any more (all destroyed above).
            unsafe { sys::ibv_destroy_srq(s.ptr()) };
        }
        for (_, c) in t.cqs.drain() {
            // SAFETY: no QP uses the CQ any more.
            unsafe { sys::ibv_destroy_cq(c.ptr()) };
        }
        for (_, ch) in t.channels.drain() {
            // SAFETY: no CQ uses the channel any more.
            unsafe { sys::ibv_destroy_comp_channel(ch.ptr()) };
        }
        t.mrs.clear();
        t.pds.clear();
    }
}

impl FastPath for RdmaCoreDevice {
    fn mr_handle(&self, lkey: u32) -> Handle {
        let t = read_tables(&self.tables);
        // A dma-buf region has no host mapping: no handle, and its accesses say so.
        self.host_bytes(&t, lkey).map_or(Handle::NONE, |(p, _)| Handle::new(p as usize))
    }

    fn mr_mapping(&self, h: Handle) -> Option<*mut u8> {
        (h != Handle::NONE).then_some(h.get() as *mut u8)
    }

    fn post_errno(&self, verb: &'static str, rc: i32) -> Error {
        self.errno(if verb == "post_recv" { "ibv_post_recv" } else { "ibv_post_send" }, rc)
    }

    unsafe fn mr_read(&self, lkey: u32, h: Handle, offset: usize, out: &mut [u8]) -> Result<()> {
        if h == Handle::NONE {
            return Provider::mr_read(self, lkey, offset, out);
        }
        let src = (h.get() as *const u8).wrapping_add(offset);
        // SAFETY: `h` is the region's mapping and the range lies inside the region (the
        // caller's promise); the device may write concurrently, as with any RDMA buffer.
        unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    unsafe fn mr_watch_byte(
        &self,
        lkey: u32,
        h: Handle,
        offset: usize,
        want: u8,
        spins: u32,
    ) -> Result<bool> {
        if h == Handle::NONE {
            // No mapping to spin on: the looked-up reads, as mr_read and mr_write fall back.
            return Provider::mr_watch_byte(self, lkey, offset, want, spins);
        }
        let at = (h.get() as *const u8).wrapping_add(offset);
        // A loop of one load and one compare, as perftest's `while (*poll_buf != rcnt)`: under
        // TCG it runs as one translated block chained to itself, where a call per read leaves
        // it for a lookup at every return.
        for _ in 0..spins {
            // SAFETY: `h` is the region's mapping and `offset` lies inside it (the caller's
            // promise); volatile, since the device writes it behind the compiler's back.
            if unsafe { ptr::read_volatile(at) } == want {
                return Ok(true);
            }
        }
        Ok(false)
    }

    unsafe fn mr_write(&self, lkey: u32, h: Handle, offset: usize, data: &[u8]) -> Result<()> {
        if h == Handle::NONE {
            return Provider::mr_write(self, lkey, offset, data);
        }
        let dst = (h.get() as *mut u8).wrapping_add(offset);
        if let [b] = data {
            // SAFETY: as in `FastPath::mr_read` (a WRITE-latency side's counter byte).
            unsafe { ptr::write_volatile(dst, *b) };
            return Ok(());
        }
        // SAFETY: as in `FastPath::mr_read`.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn cq_handle(&self, cq: CqId) -> Handle {
        read_tables(&self.tables)
            .cqs
            .get(&cq.0)
            .map_or(Handle::NONE, |c| Handle::new(c.ptr() as usize))
    }

    unsafe fn poll_cq(&self, cq: CqId, h: Handle, out: &mut [WorkCompletion]) -> usize {
        if h == Handle::NONE {
            return Provider::poll_cq(self, cq, out);
        }
        // SAFETY: the caller vouches that `h` is the live CQ's pointer (cq_handle's).
        unsafe { poll_raw(h.get() as *mut sys::ibv_cq, out) }
    }

    fn qp_handle(&self, qpn: Qpn) -> Handle {
        read_tables(&self.tables)
            .qps
            .get(&qpn.get())
            .map_or(Handle::NONE, |q| Handle::new(q.qp.ptr() as usize))
    }

    unsafe fn post_send(&self, qpn: Qpn, h: Handle, wrs: &[SendWr]) -> Result<()> {
        let qp = h.get() as *mut sys::ibv_qp;
        // SAFETY: the caller vouches that `h` is the live QP's pointer (qp_handle's).
        if h == Handle::NONE || unsafe { (*qp).qp_type } == sys::ibv_qp_type::IBV_QPT_UD {
            // UD looks its address handles up in the table.
            return Provider::post_send(self, qpn, wrs);
        }
        // SAFETY: as above.
        unsafe { self.post_send_raw(qp, qpn, wrs, false, &no_ah) }
    }

    fn prepare_send(&self, wr: &SendWr) -> Result<Option<PreparedRaw>> {
        // UD sends look their address handles up at each post; long lists take the
        // general path.
        if wr.ud.is_some() || wr.sgl.len() > FEW_SGES {
            return Ok(None);
        }
        let mut r = Box::new(RawSend {
            wr: raw_send_wr(wr, false, &no_ah)?,
            sges: few_sges(&wr.sgl),
            flags: 0,
        });
        r.wr.num_sge = wr.sgl.len() as i32;
        // Points into the same box, which does not move.
        r.wr.sg_list = if wr.sgl.is_empty() { ptr::null_mut() } else { r.sges.as_mut_ptr() };
        r.flags = r.wr.send_flags & !sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        // SAFETY: `direct_post_send` takes a `RawSend` and this provider's QP handles.
        Ok(Some(unsafe { PreparedRaw::new(r, Some(direct_post_send)) }))
    }

    fn prepare_recv(&self, wr: &RecvWr) -> Result<Option<PreparedRaw>> {
        if wr.sgl.len() > FEW_SGES {
            return Ok(None);
        }
        let mut r = Box::new(RawRecv {
            wr: sys::ibv_recv_wr {
                wr_id: wr.wr_id,
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: wr.sgl.len() as i32,
            },
            sges: few_sges(&wr.sgl),
        });
        if !wr.sgl.is_empty() {
            // Points into the same box, which does not move.
            r.wr.sg_list = r.sges.as_mut_ptr();
        }
        // SAFETY: `direct_post_recv` takes a `RawRecv` and this provider's QP handles.
        Ok(Some(unsafe { PreparedRaw::new(r, Some(direct_post_recv)) }))
    }

    unsafe fn post_prepared_send(&self, qpn: Qpn, h: Handle, p: &mut PreparedSend) -> Result<()> {
        let (wr_id, signaled) = (p.wr().wr_id, p.wr().signaled);
        let raw = p.raw_mut().and_then(|b| b.form_mut::<RawSend>());
        let Some(r) = raw.filter(|_| h != Handle::NONE) else {
            // SAFETY: the caller's promise, passed on.
            return unsafe { FastPath::post_send(self, qpn, h, std::slice::from_ref(p.wr())) };
        };
        // SAFETY: `r` is a `RawSend`; the QP is alive (the caller's promise).
        unsafe { direct_post_send((r as *mut RawSend).cast(), h, wr_id, signaled) }
            .map_err(|f| f.into_error(self, qpn, "post_send"))
    }

    unsafe fn post_prepared_recv(&self, qpn: Qpn, h: Handle, p: &mut PreparedRecv) -> Result<()> {
        let wr_id = p.wr().wr_id;
        let raw = p.raw_mut().and_then(|b| b.form_mut::<RawRecv>());
        let Some(r) = raw.filter(|_| h != Handle::NONE) else {
            // SAFETY: the caller's promise, passed on.
            return unsafe { FastPath::post_recv(self, qpn, h, std::slice::from_ref(p.wr())) };
        };
        // SAFETY: `r` is a `RawRecv`; the QP is alive (the caller's promise).
        unsafe { direct_post_recv((r as *mut RawRecv).cast(), h, wr_id, false) }
            .map_err(|f| f.into_error(self, qpn, "post_recv"))
    }

    unsafe fn post_recv(&self, qpn: Qpn, h: Handle, wrs: &[RecvWr]) -> Result<()> {
        if h == Handle::NONE {
            return Provider::post_recv(self, qpn, wrs);
        }
        // SAFETY: the caller vouches that `h` is the live QP's pointer (qp_handle's).
        unsafe { self.post_recv_raw(h.get() as *mut sys::ibv_qp, qpn, wrs) }
    }
}

/// A prepared send as libibverbs takes it ([`Provider::prepare_send`]), its scatter list
/// beside it in the same box.
pub(crate) struct RawSend {
    pub(crate) wr: sys::ibv_send_wr,
    pub(crate) sges: [sys::ibv_sge; FEW_SGES],
    /// `wr.send_flags` without `IBV_SEND_SIGNALED` (each post sets that one).
    pub(crate) flags: u32,
}

// SAFETY: the only pointer in `wr` that is not null points into the same box (`sges`), which
// moves with it; nothing else refers to either.
unsafe impl Send for RawSend {}

/// A prepared receive as libibverbs takes it ([`Provider::prepare_recv`]).
pub(crate) struct RawRecv {
    pub(crate) wr: sys::ibv_recv_wr,
    pub(crate) sges: [sys::ibv_sge; FEW_SGES],
}

// SAFETY: as for `RawSend`.
unsafe impl Send for RawRecv {}

/// Scatter/gather elements a single posted WR carries on the stack (the fast path of
/// `post_send_raw`); more take the general path.
pub(crate) const FEW_SGES: usize = 4;

/// Up to [`FEW_SGES`] scatter/gather elements as libibverbs takes them, the rest zero.
#[inline]
pub(crate) fn few_sges(sgl: &verbs::Sgl) -> [sys::ibv_sge; FEW_SGES] {
    let mut sges = [sys::ibv_sge { addr: 0, length: 0, lkey: 0 }; FEW_SGES];
    for (d, s) in sges.iter_mut().zip(sgl) {
        *d = raw_sge(s);
    }
    sges
}

/// The state of a QP not yet ready to send (RESET, INIT, RTR), which refuses a send with the
/// state error the soft provider gives; `None` when it takes one.
///
/// # Safety
/// `qp` is a live QP.
#[inline]
pub(crate) unsafe fn refuses_sends(qp: *mut sys::ibv_qp) -> Option<QpState> {
    // SAFETY: the QP is alive (the caller's promise); libibverbs keeps `state` current.
    let state = state_from_ibv(unsafe { (*qp).state });
    matches!(state, QpState::Reset | QpState::Init | QpState::Rtr).then_some(state)
}

/// The state of a QP in RESET, which refuses a receive, as [`refuses_sends`].
///
/// # Safety
/// `qp` is a live QP.
#[inline]
pub(crate) unsafe fn refuses_receives(qp: *mut sys::ibv_qp) -> Option<QpState> {
    // SAFETY: the QP is alive (the caller's promise).
    let state = state_from_ibv(unsafe { (*qp).state });
    (state == QpState::Reset).then_some(state)
}

/// Refuses a send on a QP not yet ready to send ([`refuses_sends`]).
///
/// # Safety
/// `qp` is a live QP.
#[inline]
pub(crate) unsafe fn check_send_state(qp: *mut sys::ibv_qp, qpn: Qpn) -> Result<()> {
    // SAFETY: the caller's promise, passed on.
    match unsafe { refuses_sends(qp) } {
        Some(state) => Err(Error::bad_state(qpn, state, "post_send")),
        None => Ok(()),
    }
}

/// Refuses a receive on a QP in RESET ([`refuses_receives`]).
///
/// # Safety
/// `qp` is a live QP.
#[inline]
pub(crate) unsafe fn check_recv_state(qp: *mut sys::ibv_qp, qpn: Qpn) -> Result<()> {
    // SAFETY: the caller's promise, passed on.
    match unsafe { refuses_receives(qp) } {
        Some(state) => Err(Error::bad_state(qpn, state, "post_recv")),
        None => Ok(()),
    }
}

/// [`crate::DirectPost`] for a [`RawSend`]: its id and signaled flag set, one `ibv_post_send`.
///
/// # Safety
/// As for [`crate::DirectPost`]: `form` points at a `RawSend`, `qp` is a live QP's handle.
pub(crate) unsafe fn direct_post_send(
    form: *mut (),
    qp: Handle,
    wr_id: u64,
    signaled: bool,
) -> std::result::Result<(), PostFailure> {
    let qp = qp.get() as *mut sys::ibv_qp;
    // SAFETY: the QP is alive (the caller's promise).
    if let Some(state) = unsafe { refuses_sends(qp) } {
        return Err(PostFailure::State(state));
    }
    // SAFETY: `form` is a `RawSend`'s box, not otherwise borrowed during the call.
    let r = unsafe { &mut *form.cast::<RawSend>() };
    r.wr.wr_id = wr_id;
    r.wr.send_flags = r.flags | if signaled { sys::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
    let mut bad = ptr::null_mut();
    // SAFETY: the QP is alive; `r.wr` is a one-WR chain whose scatter list is `r.sges`, in the
    // same box (the device copies WQEs at post).
    let rc = unsafe { sys::ibv_post_send(qp, &mut r.wr, &mut bad) };
    if rc == 0 { Ok(()) } else { Err(PostFailure::Errno(rc)) }
}

/// [`crate::DirectPost`] for a [`RawRecv`]: its id set, one `ibv_post_recv`.
///
/// # Safety
/// As for [`direct_post_send`], `form` pointing at a `RawRecv`.
pub(crate) unsafe fn direct_post_recv(
    form: *mut (),
    qp: Handle,
    wr_id: u64,
    _signaled: bool,
) -> std::result::Result<(), PostFailure> {
    let qp = qp.get() as *mut sys::ibv_qp;
    // SAFETY: the QP is alive (the caller's promise).
    if let Some(state) = unsafe { refuses_receives(qp) } {
        return Err(PostFailure::State(state));
    }
    // SAFETY: `form` is a `RawRecv`'s box, not otherwise borrowed during the call.
    let r = unsafe { &mut *form.cast::<RawRecv>() };
    r.wr.wr_id = wr_id;
    let mut bad = ptr::null_mut();
    // SAFETY: the QP is alive; `r.wr` is a one-WR chain whose scatter list is `r.sges`, in the
    // same box.
    let rc = unsafe { sys::ibv_post_recv(qp, &mut r.wr, &mut bad) };
    if rc == 0 { Ok(()) } else { Err(PostFailure::Errno(rc)) }
}

/// The address-handle lookup of a QP that is not UD: a send that names a destination is
/// refused.
pub(crate) fn no_ah(_: &UdDest) -> Result<Raw<sys::ibv_ah>> {
    Err(Error::refused(ErrorKind::InvalidArgument, "invalid work request: not a UD QP"))
}

/// `wr` as libibverbs takes it, without its scatter list (`num_sge`, `sg_list`) or chain
/// link; `ud`: its destination's address handle comes from `ah`.
#[inline]
pub(crate) fn raw_send_wr(
    wr: &SendWr,
    ud: bool,
    ah: &dyn Fn(&UdDest) -> Result<Raw<sys::ibv_ah>>,
) -> Result<sys::ibv_send_wr> {
    // SAFETY: all-zero is a valid ibv_send_wr (integers, null pointers, unions of them).
    let mut r: sys::ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
    r.wr_id = wr.wr_id;
    r.send_flags = if wr.signaled { sys::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 }
        | if wr.solicited { sys::ibv_send_flags::IBV_SEND_SOLICITED.0 } else { 0 }
        | if wr.inline { sys::ibv_send_flags::IBV_SEND_INLINE.0 } else { 0 };
    use sys::ibv_wr_opcode::*;
    let rdma = |remote_addr: u64, rkey: verbs::RKey| sys::wr_t {
        rdma: sys::rdma_t { remote_addr, rkey: rkey.0 },
    };
    match wr.op {
        SendOp::Send => r.opcode = IBV_WR_SEND,
        SendOp::SendWithImm(imm) => {
            r.opcode = IBV_WR_SEND_WITH_IMM;
            r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        SendOp::Write { remote_addr, rkey } => {
            r.opcode = IBV_WR_RDMA_WRITE;
            r.wr = rdma(remote_addr, rkey);
        }
        SendOp::WriteWithImm { remote_addr, rkey, imm } => {
            r.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            r.wr = rdma(remote_addr, rkey);
            r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        SendOp::Read { remote_addr, rkey } => {
            r.opcode = IBV_WR_RDMA_READ;
            r.wr = rdma(remote_addr, rkey);
        }
        SendOp::CompareSwap { remote_addr, rkey, compare, swap } => {
            r.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
            r.wr = sys::wr_t {
                atomic: sys::atomic_t { remote_addr, compare_add: compare, swap, rkey: rkey.0 },
            };
        }
        SendOp::FetchAdd { remote_addr, rkey, add } => {
            r.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            r.wr = sys::wr_t {
                atomic: sys::atomic_t { remote_addr, compare_add: add, swap: 0, rkey: rkey.0 },
            };
        }
    }
    if ud {
        let d = wr.ud.ok_or(Error::refused(
            ErrorKind::InvalidArgument,
            concat!("invalid work request: ", "a UD send needs a destination"),
        ))?;
        let ah = ah(&d)?;
        r.wr = sys::wr_t {
            ud: sys::ud_t { ah: ah.ptr(), remote_qpn: d.qpn.get(), remote_qkey: d.qkey.0 },
        };
    }
    Ok(r)
}

/// Polls `cq` into `out`, converting each `ibv_wc`.
///
/// # Safety
/// `cq` is a live CQ of this process.
#[inline]
pub(crate) unsafe fn poll_raw(cq: *mut sys::ibv_cq, out: &mut [WorkCompletion]) -> usize {
    let mut raw = [MaybeUninit::<sys::ibv_wc>::uninit(); 32];
    let want = out.len().min(raw.len());
    // SAFETY: the caller's CQ is alive and `raw` has room for `want` entries.
    let n = unsafe { sys::ibv_poll_cq(cq, want as i32, raw.as_mut_ptr().cast()) };
    let n = usize::try_from(n).unwrap_or(0);
    for (o, r) in out.iter_mut().zip(&raw[..n]) {
        // SAFETY: ibv_poll_cq initialized the first `n` entries.
        let wc = unsafe { r.assume_init() };
        let with_imm = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
        // Only UD receives carry a GRH (RoCE always has one), and only they a source QP.
        let grh = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_GRH.0 != 0;
        let recv = wc.opcode & sys::ibv_wc_opcode::IBV_WC_RECV != 0;
        *o = WorkCompletion {
            wr_id: wc.wr_id,
            status: status_from_ibv(wc.status),
            opcode: opcode_from_ibv(wc.opcode),
            byte_len: wc.byte_len,
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate data.
            imm: with_imm
                .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
            qp_num: Qpn::new(wc.qp_num),
            src_qp: (grh && recv).then(|| Qpn::new(wc.src_qp)),
            grh,
        };
    }
    n
}

/// Every scatter/gather element of `sgls`, in order, as libibverbs takes them.
pub(crate) fn raw_sges<'a>(
    sgls: impl Iterator<Item = &'a verbs::Sgl>,
) -> SmallVec<[sys::ibv_sge; 4]> {
    sgls.flatten().map(raw_sge).collect()
}

/// One scatter/gather element as libibverbs takes it.
#[inline]
pub(crate) fn raw_sge(s: &verbs::Sge) -> sys::ibv_sge {
    sys::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey }
}

/// Builds the `ibv_recv_wr` chain of `wrs` and calls `post` with its head.
pub(crate) fn with_recv_wrs(
    wrs: &[RecvWr],
    post: impl FnOnce(*mut sys::ibv_recv_wr) -> Result<()>,
) -> Result<()> {
    if wrs.is_empty() {
        return Ok(());
    }
    let mut sges = raw_sges(wrs.iter().map(|w| &w.sgl));
    let mut raw: SmallVec<[sys::ibv_recv_wr; 4]> = SmallVec::with_capacity(wrs.len());
    let mut at = 0;
    for wr in wrs {
        let n = wr.sgl.len();
        raw.push(sys::ibv_recv_wr {
            wr_id: wr.wr_id,
            next: ptr::null_mut(),
            sg_list: if n == 0 { ptr::null_mut() } else { sges[at..].as_mut_ptr() },
            num_sge: n as i32,
        });
        at += n;
    }
    for i in 1..raw.len() {
        let next: *mut sys::ibv_recv_wr = &mut raw[i];
        raw[i - 1].next = next;
    }
    post(raw.as_mut_ptr())
}

impl RdmaCoreDevice {
    /// Posts `wrs` on the QP `qp` (`ud`: each needs an address handle, from `ah`).
    ///
    /// # Safety
    /// `qp` is a live QP of this device.
    pub(crate) unsafe fn post_send_raw(
        &self,
        qp: *mut sys::ibv_qp,
        qpn: Qpn,
        wrs: &[SendWr],
        ud: bool,
        ah: &dyn Fn(&UdDest) -> Result<Raw<sys::ibv_ah>>,
    ) -> Result<()> {
        // SAFETY: the QP is alive (the caller's promise).
        unsafe { check_send_state(qp, qpn)? };
        let mut bad = ptr::null_mut();
        // One WR of a few SGEs (every latency test's post) is built on the stack, without
        // the general path's vectors (BENCHMARKS.md, "Hot paths", H4).
        if let [wr] = wrs
            && wr.sgl.len() <= FEW_SGES
        {
            let mut sges = few_sges(&wr.sgl);
            let mut r = raw_send_wr(wr, ud, ah)?;
            r.num_sge = wr.sgl.len() as i32;
            r.sg_list = if wr.sgl.is_empty() { ptr::null_mut() } else { sges.as_mut_ptr() };
            // SAFETY: the QP is alive (the caller's promise); `r` is a one-WR chain whose
            // scatter list is `sges`, both alive until the call returns (the device copies
            // WQEs at post).
            let rc = unsafe { sys::ibv_post_send(qp, &mut r, &mut bad) };
            return if rc == 0 { Ok(()) } else { Err(self.errno("ibv_post_send", rc)) };
        }
        let mut sges = raw_sges(wrs.iter().map(|w| &w.sgl));
        let mut raw: SmallVec<[sys::ibv_send_wr; 1]> = SmallVec::with_capacity(wrs.len());
        let mut at = 0;
        for wr in wrs {
            let n = wr.sgl.len();
            let mut r = raw_send_wr(wr, ud, ah)?;
            r.num_sge = n as i32;
            // Points into `sges`, which is complete and no longer moves.
            r.sg_list = if n == 0 { ptr::null_mut() } else { sges[at..].as_mut_ptr() };
            at += n;
            raw.push(r);
        }
        for i in 1..raw.len() {
            let next: *mut sys::ibv_send_wr = &mut raw[i];
            raw[i - 1].next = next;
        }
        if raw.is_empty() {
            return Ok(());
        }
        // SAFETY: the QP is alive (the caller's promise); `raw` is a null-terminated chain
        // whose scatter lists point into `sges`, both alive until the call returns (the
        // device copies WQEs at post).
        let rc = unsafe { sys::ibv_post_send(qp, raw.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(self.errno("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Posts receives on the QP `qp`.
    ///
    /// # Safety
    /// `qp` is a live QP of this device.
    pub(crate) unsafe fn post_recv_raw(
        &self,
        qp: *mut sys::ibv_qp,
        qpn: Qpn,
        wrs: &[RecvWr],
    ) -> Result<()> {
        // SAFETY: the QP is alive (the caller's promise).
        unsafe { check_recv_state(qp, qpn)? };
        let post = |head| {
            let mut bad = ptr::null_mut();
            // SAFETY: the QP is alive and `head` is a valid, null-terminated chain.
            let rc = unsafe { sys::ibv_post_recv(qp, head, &mut bad) };
            if rc == 0 { Ok(()) } else { Err(self.errno("ibv_post_recv", rc)) }
        };
        // One receive of a few SGEs (a SEND-latency side reposts one per message) is built
        // on the stack, without the general path's vectors (BENCHMARKS.md, "Hot paths", H5).
        if let [wr] = wrs
            && wr.sgl.len() <= FEW_SGES
        {
            let mut sges = few_sges(&wr.sgl);
            let mut r = sys::ibv_recv_wr {
                wr_id: wr.wr_id,
                next: ptr::null_mut(),
                sg_list: if wr.sgl.is_empty() { ptr::null_mut() } else { sges.as_mut_ptr() },
                num_sge: wr.sgl.len() as i32,
            };
            return post(&mut r);
        }
        with_recv_wrs(wrs, post)
    }

    pub(crate) fn post_send(&self, qpn: Qpn, wrs: &[SendWr]) -> Result<()> {
        let t = read_tables(&self.tables);
        let q = t.qps.get(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        let ud = q.qp_type == QpType::Ud;
        // SAFETY: the QP is alive (read lock).
        unsafe {
            self.post_send_raw(q.qp.ptr(), qpn, wrs, ud, &|d| self.ah(&t, q, d.ip, d.flow_label))
        }
    }

    pub(crate) fn post_recv(&self, qpn: Qpn, wrs: &[RecvWr]) -> Result<()> {
        let t = read_tables(&self.tables);
        let q = t.qps.get(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        // SAFETY: the QP is alive (read lock).
        unsafe { self.post_recv_raw(q.qp.ptr(), qpn, wrs) }
    }
}
