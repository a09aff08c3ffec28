//! The interface every provider implements.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    Access, Counters, CqId, ModifyQp, MrInfo, PdId, QpAttr, QpState, Qpn, RecvWr, SendWr, SrqId,
    WorkCompletion,
};

use crate::{
    AsyncEvent, DeviceAttr, Error, GidEntry, PortAttr, PreparedRaw, PreparedRecv, PreparedSend,
    QpSpec, Result,
};

/// A provider's direct reference to one of its objects (for rdma-core, the libibverbs
/// pointer), for the hot paths: posting, polling and region access then need no lookup by
/// id. [`Handle::NONE`] where a provider has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Handle(usize);

impl Handle {
    /// No direct reference: the id is looked up.
    pub const NONE: Handle = Handle(0);

    /// A handle holding `v` (a provider's pointer or index).
    pub fn new(v: usize) -> Handle {
        Handle(v)
    }

    /// What the provider put in it.
    pub fn get(self) -> usize {
        self.0
    }
}

/// A device as a provider drives it: one safe method per verb. The public types
/// ([`crate::Context`] and friends) call these methods; objects are named by the ids the
/// provider hands out. The hot paths are apart, in [`FastPath`].
pub trait Provider: Send + Sync + fmt::Debug {
    /// The device's name (`soft:127.0.0.1`, `mlx5_0`).
    fn device_name(&self) -> String;
    /// Which provider this is.
    fn provider_kind(&self) -> crate::ProviderKind;
    /// The device's IP address.
    fn ip(&self) -> std::net::IpAddr;
    /// Port 1's attributes.
    fn port_attr(&self) -> PortAttr;
    /// The device's limits (`ibv_query_device`).
    fn query_device(&self) -> Result<DeviceAttr>;
    /// The index of the GID [`Provider::ip`] comes from.
    fn gid_index(&self) -> usize {
        0
    }
    /// Port 1's GID table.
    fn gid_table(&self) -> Vec<GidEntry>;
    /// Allocates a protection domain.
    fn alloc_pd(&self) -> Result<PdId>;
    /// Frees a protection domain (`ibv_dealloc_pd`); [`crate::ErrorKind::Busy`] while a
    /// region, QP or SRQ is in it.
    fn dealloc_pd(&self, pd: PdId) -> Result<()>;
    /// Allocates `len` zeroed bytes and registers them.
    fn reg_mr(&self, pd: PdId, len: usize, access: Access) -> Result<MrInfo>;
    /// Registers a dma-buf (`ibv_reg_dmabuf_mr`); devices that cannot answer
    /// [`crate::Error::Unsupported`].
    fn reg_dmabuf_mr(
        &self,
        pd: PdId,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MrInfo> {
        let _ = (pd, fd, offset, len, iova, access);
        Err(crate::Error::Unsupported {
            device: self.device_name(),
            what: "dma-buf memory registration (ibv_reg_dmabuf_mr)",
        })
    }
    /// Registers memory the provider does not own (a GPU buffer): the region's address is
    /// `mem.addr()`, its bytes are read and written through `mem`. Providers that cannot
    /// answer [`crate::Error::Unsupported`] naming what is missing.
    fn reg_device_mr(
        &self,
        pd: PdId,
        mem: std::sync::Arc<dyn crate::DeviceMemory>,
        access: Access,
    ) -> Result<MrInfo> {
        let _ = (pd, mem, access);
        Err(crate::Error::Unsupported {
            device: self.device_name(),
            what: "device (GPU) memory registration",
        })
    }
    /// Deregisters a region and frees its memory.
    fn dereg_mr(&self, lkey: u32);
    /// Copies bytes out of a region (bounds already checked).
    fn mr_read(&self, lkey: u32, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Copies bytes into a region (bounds already checked).
    fn mr_write(&self, lkey: u32, offset: usize, data: &[u8]) -> Result<()>;
    /// Reads the byte at `offset` (bounds already checked) up to `spins` times until it is
    /// `want`; whether it was. A provider whose application threads move its packets (a
    /// busy-polled soft device) receives between reads, as a CQ poll does.
    fn mr_watch_byte(&self, lkey: u32, offset: usize, want: u8, spins: u32) -> Result<bool> {
        let mut b = [0u8; 1];
        for _ in 0..spins {
            self.mr_read(lkey, offset, &mut b)?;
            if b[0] == want {
                return Ok(true);
            }
        }
        Ok(false)
    }
    /// Creates a completion channel.
    fn create_channel(&self) -> Result<u32>;
    /// Creates a CQ, reporting to `channel`.
    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> Result<CqId>;
    /// Destroys a CQ.
    fn destroy_cq(&self, cq: CqId);
    /// Moves completions into `out`; returns how many.
    fn poll_cq(&self, cq: CqId, out: &mut [WorkCompletion]) -> usize;
    /// Arms a CQ for one channel event.
    fn req_notify_cq(&self, cq: CqId) -> Result<()>;
    /// Waits for a channel event.
    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> Option<CqId>;
    /// Creates a shared receive queue.
    fn create_srq(&self, pd: PdId, max_wr: u32) -> Result<SrqId>;
    /// Destroys a shared receive queue.
    fn destroy_srq(&self, srq: SrqId);
    /// Posts receives to a shared receive queue.
    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<()>;
    /// Arms a shared receive queue's limit event.
    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()>;
    /// Creates a QP.
    fn create_qp(&self, spec: &QpSpec) -> Result<Qpn>;
    /// Modifies a QP.
    fn modify_qp(&self, qpn: Qpn, attr: &ModifyQp) -> Result<()>;
    /// Queries a QP.
    fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr)>;
    /// Destroys a QP.
    fn destroy_qp(&self, qpn: Qpn);
    /// Posts send work requests.
    fn post_send(&self, qpn: Qpn, wrs: &[SendWr]) -> Result<()>;
    /// Posts receive work requests.
    fn post_recv(&self, qpn: Qpn, wrs: &[RecvWr]) -> Result<()>;
    /// Waits for an asynchronous event.
    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent>;
    /// The device's counters.
    fn counters(&self) -> Counters;
    /// The provider's hot paths, if it has them: every object the API creates afterwards
    /// keeps them, with its own [`Handle`], and posts, polls and touches its memory through
    /// them instead of the methods above.
    fn fast_path(self: Arc<Self>) -> Option<Arc<dyn FastPath>> {
        None
    }
}

/// A provider's hot paths, apart from [`Provider`]: posting, polling and region access through
/// the provider's direct reference to each object (its [`Handle`], for rdma-core the
/// libibverbs pointer), with no lookup by id, prepared requests in the provider's own form, and
/// a region's mapping. Optional ([`Provider::fast_path`]): without it every verb goes through
/// the [`Provider`] method of the same name. Why these exist: BENCHMARKS.md, "Hot paths".
pub trait FastPath: Send + Sync {
    /// The direct reference to a QP.
    fn qp_handle(&self, qpn: Qpn) -> Handle;
    /// The direct reference to a CQ.
    fn cq_handle(&self, cq: CqId) -> Handle;
    /// The direct reference to a region's host memory.
    fn mr_handle(&self, lkey: u32) -> Handle;
    /// Where the region behind handle `h` lies in this process's memory, for
    /// [`crate::MemoryRegion::mapped_byte`]; `None` where the provider does not map it there.
    fn mr_mapping(&self, h: Handle) -> Option<*mut u8> {
        let _ = h;
        None
    }
    /// The error for a post of `verb` (`post_send`, `post_recv`) that the provider's verb
    /// refused with error number `rc` ([`crate::PostFailure::Errno`]).
    fn post_errno(&self, verb: &'static str, rc: i32) -> Error;
    /// [`Provider::post_send`] through the QP's handle.
    ///
    /// # Safety
    /// `h` is what [`FastPath::qp_handle`] gave for `qpn`, and the QP has not been destroyed
    /// (its owner is alive and not dropping).
    unsafe fn post_send(&self, qpn: Qpn, h: Handle, wrs: &[SendWr]) -> Result<()>;
    /// [`Provider::post_recv`] through the QP's handle.
    ///
    /// # Safety
    /// As for [`FastPath::post_send`].
    unsafe fn post_recv(&self, qpn: Qpn, h: Handle, wrs: &[RecvWr]) -> Result<()>;
    /// [`Provider::poll_cq`] through the CQ's handle.
    ///
    /// # Safety
    /// `h` is what [`FastPath::cq_handle`] gave for `cq`, and the CQ has not been destroyed.
    unsafe fn poll_cq(&self, cq: CqId, h: Handle, out: &mut [WorkCompletion]) -> usize;
    /// [`Provider::mr_read`] through the region's handle.
    ///
    /// # Safety
    /// `h` is what [`FastPath::mr_handle`] gave for `lkey`, the region is registered, and
    /// `offset + out.len()` lies within it.
    unsafe fn mr_read(&self, lkey: u32, h: Handle, offset: usize, out: &mut [u8]) -> Result<()>;
    /// [`Provider::mr_write`] through the region's handle.
    ///
    /// # Safety
    /// As for [`FastPath::mr_read`].
    unsafe fn mr_write(&self, lkey: u32, h: Handle, offset: usize, data: &[u8]) -> Result<()>;
    /// Reads the byte at `offset` up to `spins` times until it is `want` (a WRITE-latency
    /// side waiting for its peer's counter); whether it was.
    ///
    /// # Safety
    /// As for [`FastPath::mr_read`], `offset` within the region.
    unsafe fn mr_watch_byte(
        &self,
        lkey: u32,
        h: Handle,
        offset: usize,
        want: u8,
        spins: u32,
    ) -> Result<bool>;
    /// A send work request in this provider's own form, for [`FastPath::post_prepared_send`];
    /// `None` where it keeps none (the request is then posted as it is).
    fn prepare_send(&self, wr: &SendWr) -> Result<Option<PreparedRaw>> {
        let _ = wr;
        Ok(None)
    }
    /// A receive work request in this provider's own form, as [`FastPath::prepare_send`].
    fn prepare_recv(&self, wr: &RecvWr) -> Result<Option<PreparedRaw>> {
        let _ = wr;
        Ok(None)
    }
    /// Posts a prepared send on the QP `qpn` (through its handle): its own form where it has
    /// one, with the request's current id and signaled flag.
    ///
    /// # Safety
    /// As for [`FastPath::post_send`].
    unsafe fn post_prepared_send(&self, qpn: Qpn, h: Handle, p: &mut PreparedSend) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.post_send(qpn, h, std::slice::from_ref(p.wr())) }
    }
    /// Posts a prepared receive on the QP `qpn`, as [`FastPath::post_prepared_send`].
    ///
    /// # Safety
    /// As for [`FastPath::post_send`].
    unsafe fn post_prepared_recv(&self, qpn: Qpn, h: Handle, p: &mut PreparedRecv) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.post_recv(qpn, h, std::slice::from_ref(p.wr())) }
    }
}
