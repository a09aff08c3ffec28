//! Protection domains (`ibv_pd`) and what is created in them.

use std::fmt;
use std::sync::Arc;

use crate::*;

/// A protection domain (`ibv_pd`): memory regions and QPs of one PD cannot reach another's.
///
/// Its regions, QPs and SRQs keep it: the device frees it (`ibv_dealloc_pd`) when the last of
/// them and this handle are gone, so dropping the handle first is never an error.
/// [`ProtectionDomain::dealloc`] frees it now, or says what keeps it.
pub struct ProtectionDomain {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) fast: Option<Arc<dyn FastPath>>,
    pub(crate) id: PdId,
    pub(crate) life: Arc<PdLife>,
}

/// A protection domain's hold on the device, shared by everything in it.
pub(crate) struct PdLife {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) id: PdId,
    /// Freed already, by [`ProtectionDomain::dealloc`].
    pub(crate) freed: bool,
}

impl Drop for PdLife {
    fn drop(&mut self) {
        // Nothing is left in it (each object held this), so the device frees it; a device
        // that cannot has lost it already.
        if !self.freed {
            let _ = self.dev.dealloc_pd(self.id);
        }
    }
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ProtectionDomain").field(&self.id.0).finish()
    }
}

impl ProtectionDomain {
    /// Frees the protection domain now (`ibv_dealloc_pd`). [`ErrorKind::Busy`] while memory
    /// regions, QPs or SRQs are in it: it is then freed when the last of them is dropped.
    pub fn dealloc(self) -> Result<()> {
        let ProtectionDomain { id, life, .. } = self;
        match Arc::try_unwrap(life) {
            Ok(mut life) => {
                let r = life.dev.dealloc_pd(id);
                life.freed = r.is_ok();
                r
            }
            Err(held) => Err(Error::refused(
                ErrorKind::Busy,
                format!(
                    "protection domain {} still has {} memory regions, QPs or SRQs; it is \
                     freed with the last",
                    id.0,
                    Arc::strong_count(&held) - 1
                ),
            )),
        }
    }

    /// Allocates `len` zeroed bytes and registers them with `access` rights. The region gets a
    /// local key and, with any remote right, a random remote key.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        let info = self.dev.reg_mr(self.id, len, access)?;
        Ok(self.region(info))
    }

    /// Registers `len` bytes at `offset` of the dma-buf `fd` (GPU memory, exported by its
    /// driver), seen by the device at `iova` (`ibv_reg_dmabuf_mr`). The region has no host
    /// mapping: [`MemoryRegion::read`] and [`MemoryRegion::write`] fail with
    /// [`Error::Unsupported`]. A device that cannot register dma-bufs (the soft provider, rxe)
    /// answers [`Error::Unsupported`] naming itself.
    pub fn reg_dmabuf_mr(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion> {
        use std::os::fd::AsRawFd;
        let info = self.dev.reg_dmabuf_mr(self.id, fd.as_raw_fd(), offset, len, iova, access)?;
        Ok(self.region(info))
    }

    /// Registers `mem` (a GPU buffer, [`crate::DeviceMemory`]) with `access` rights: peers
    /// and work requests name it by `mem.addr()`; [`MemoryRegion::read`] and
    /// [`MemoryRegion::write`] copy through it (a GPU's copy engine). The soft provider places
    /// and gathers payloads through it; the rdma-core provider registers its dma-buf. A
    /// provider that cannot answers [`Error::Unsupported`] naming what is missing.
    pub fn reg_device_mr(
        &self,
        mem: Arc<dyn crate::DeviceMemory>,
        access: Access,
    ) -> Result<MemoryRegion> {
        let info = self.dev.reg_device_mr(self.id, mem, access)?;
        Ok(self.region(info))
    }

    /// The region the provider registered as `info`, in this PD.
    fn region(&self, info: MrInfo) -> MemoryRegion {
        MemoryRegion {
            h: self.fast.as_ref().map_or(Handle::NONE, |f| f.mr_handle(info.lkey)),
            fast: self.fast.clone(),
            dev: self.dev.clone(),
            info,
            _pd: self.life.clone(),
        }
    }

    /// A queue pair (`ibv_create_qp`), in the RESET state.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<QueuePair> {
        for (cq, what) in [(init.send_cq, "send CQ"), (init.recv_cq, "receive CQ")] {
            if !Arc::ptr_eq(&cq.dev, &self.dev) {
                return Err(Error::ForeignObject(what));
            }
        }
        let srq = match init.srq {
            Some(s) if !Arc::ptr_eq(&s.dev, &self.dev) => {
                return Err(Error::ForeignObject("SRQ"));
            }
            s => s.map(|s| s.id),
        };
        let spec = QpSpec {
            pd: self.id,
            qp_type: init.qp_type,
            send_cq: init.send_cq.id,
            recv_cq: init.recv_cq.id,
            caps: init.caps,
            srq,
        };
        let qpn = self.dev.create_qp(&spec)?;
        let h = self.fast.as_ref().map_or(Handle::NONE, |f| f.qp_handle(qpn));
        Ok(QueuePair {
            dev: self.dev.clone(),
            fast: self.fast.clone(),
            qpn,
            qp_type: init.qp_type,
            h,
            _pd: self.life.clone(),
        })
    }

    /// A shared receive queue of `max_wr` receives (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32) -> Result<SharedReceiveQueue> {
        Ok(SharedReceiveQueue {
            dev: self.dev.clone(),
            id: self.dev.create_srq(self.id, max_wr)?,
            _pd: self.life.clone(),
        })
    }
}
