//! Memory regions: host memory, dma-buf and GPU memory, and the copies in and out of them.

use super::*;

/// What the endpoint knows of a registration: its keys (the remote key only with a remote
/// right), its range and rights.
pub(crate) fn mr_info(mr: &SwMr, pd: PdId, addr: u64, len: usize, access: Access) -> MrInfo {
    MrInfo {
        id: MrId(mr.lkey()),
        pd,
        addr,
        len: len as u64,
        access,
        lkey: mr.lkey(),
        rkey: if access.0 & !Access::LOCAL_WRITE.0 != 0 { mr.rkey() } else { 0 },
    }
}

/// The kernel modules that let `ibv_reg_mr` take a GPU's address (GPUDirect RDMA without
/// dma-buf): NVIDIA's current one and the older Mellanox one.
pub(crate) const PEER_MEMORY: &[&str] = &["nvidia_peermem", "nv_peer_mem"];

/// Registered memory: this provider's own allocation (page-aligned, zeroed, unmapped after
/// deregistration) or a dma-buf (no host mapping).
#[derive(Debug)]
pub(crate) struct Region {
    /// The registration: the table holds its only reference.
    pub(crate) mr: Option<Arc<SwMr>>,
    /// The mapping, for host-memory regions.
    pub(crate) map: Option<(Raw<u8>, usize)>,
    /// Device (GPU) memory registered through its dma-buf or a peer-memory module: the
    /// region's bytes are copied through it.
    pub(crate) device: Option<Arc<dyn verbs::DeviceMemory>>,
}

impl Region {
    /// The host bytes of the region, if it has any.
    fn bytes(&self) -> Option<(*mut u8, usize)> {
        self.map.map(|(p, len)| (p.ptr(), len))
    }
}

impl RdmaCoreDevice {
    /// Registers a dma-buf (`ibv_reg_dmabuf_mr`): `len` bytes at `offset` of the buffer `fd`
    /// exports, seen by the device at `iova`.
    pub(crate) fn reg_dmabuf(
        &self,
        pd: PdId,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MrInfo> {
        let mut t = write_tables(&self.tables);
        let swpd = t.pd(pd)?;
        // SAFETY: the caller's `fd` is borrowed for the call; the kernel takes its own
        // reference to the dma-buf it names.
        let mr = unsafe { swpd.reg_dmabuf_mr(offset, len, iova, fd, access_flags(access)) };
        let mr = mr.map_err(|e| {
            let io = match e.0 {
                sideway::ibverbs::memory_region::RegisterMemoryRegionErrorKind::Ibverbs(io) => io,
                other => io::Error::other(other.to_string()),
            };
            match io.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT) => {
                    Error::Unsupported {
                        device: self.name.clone(),
                        what: "dma-buf memory registration (ibv_reg_dmabuf_mr)",
                    }
                }
                _ => self.call_err("ibv_reg_dmabuf_mr", io),
            }
        })?;
        let info = mr_info(&mr, pd, iova, len, access);
        t.mrs.insert(info.lkey, Region { mr: Some(mr), map: None, device: None });
        Ok(info)
    }

    /// A copy of `len` bytes at `offset` through a device region's memory, bounds checked.
    pub(crate) fn device_copy(
        &self,
        d: &Arc<dyn verbs::DeviceMemory>,
        offset: usize,
        len: usize,
        copy: impl FnOnce(&dyn verbs::DeviceMemory) -> io::Result<()>,
    ) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > d.len()) {
            return Err(Error::OutOfBounds { offset, len, region_len: d.len() });
        }
        copy(d.as_ref()).map_err(|e| self.call_err("a GPU copy", e))
    }

    pub(crate) fn host_bytes(&self, t: &Tables, lkey: u32) -> Result<(*mut u8, usize)> {
        let r = t.mrs.get(&lkey).ok_or(Error::refused(
            ErrorKind::InvalidArgument,
            concat!("invalid memory region: ", "unknown key"),
        ))?;
        r.bytes().ok_or(Error::Unsupported {
            device: self.name.clone(),
            what: "host access to a dma-buf region",
        })
    }

    pub(crate) fn reg_mr(&self, pd: PdId, len: usize, access: Access) -> Result<MrInfo> {
        if len == 0 {
            return Err(Error::refused(
                ErrorKind::InvalidArgument,
                concat!("invalid memory region: ", "zero length"),
            ));
        }
        let mut t = write_tables(&self.tables);
        let swpd = t.pd(pd)?;
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(self.call_err("mmap", io::Error::last_os_error()));
        }
        let map = (Raw::new(p.cast::<u8>()).expect("mmap never returns NULL on success"), len);
        // SAFETY: the mapping is `len` bytes, readable and writable, and lives until the
        // region is dropped, which deregisters it first.
        let mr = unsafe { swpd.reg_mr(p as usize, len, access_flags(access)) };
        let mr = match mr {
            Ok(mr) => mr,
            Err(e) => {
                // SAFETY: the mapping was made above and nothing else knows it.
                unsafe { libc::munmap(p, len) };
                return Err(self.call_err("ibv_reg_mr", io::Error::other(e.to_string())));
            }
        };
        let info = mr_info(&mr, pd, p as u64, len, access);
        t.mrs.insert(info.lkey, Region { mr: Some(mr), map: Some(map), device: None });
        Ok(info)
    }

    pub(crate) fn dereg_mr(&self, lkey: u32) {
        let r = write_tables(&self.tables).mrs.remove(&lkey);
        drop(r);
    }

    pub(crate) fn mr_read(&self, lkey: u32, offset: usize, out: &mut [u8]) -> Result<()> {
        let t = read_tables(&self.tables);
        if let Some(d) = t.mrs.get(&lkey).and_then(|r| r.device.clone()) {
            drop(t);
            // The NIC writes the GPU itself: nothing read ahead may be served.
            return self.device_copy(&d, offset, out.len(), |d| {
                d.flush()?;
                d.read(offset, out)
            });
        }
        let (p, len) = self.host_bytes(&t, lkey)?;
        if offset.checked_add(out.len()).is_none_or(|end| end > len) {
            return Err(Error::OutOfBounds { offset, len: out.len(), region_len: len });
        }
        // SAFETY: the range lies inside the live mapping (checked above; the read lock keeps
        // the region registered). The device may write concurrently, as with any RDMA buffer.
        unsafe { ptr::copy_nonoverlapping(p.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    pub(crate) fn mr_write(&self, lkey: u32, offset: usize, data: &[u8]) -> Result<()> {
        let t = read_tables(&self.tables);
        if let Some(d) = t.mrs.get(&lkey).and_then(|r| r.device.clone()) {
            drop(t);
            // The NIC reads the GPU's memory itself: nothing may stay staged.
            return self.device_copy(&d, offset, data.len(), |d| {
                d.write(offset, data)?;
                d.flush()
            });
        }
        let (p, len) = self.host_bytes(&t, lkey)?;
        if offset.checked_add(data.len()).is_none_or(|end| end > len) {
            return Err(Error::OutOfBounds { offset, len: data.len(), region_len: len });
        }
        // SAFETY: as in mr_read.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), p.add(offset), data.len()) };
        Ok(())
    }

    pub(crate) fn reg_device_mr(
        &self,
        pd: PdId,
        mem: Arc<dyn verbs::DeviceMemory>,
        access: Access,
    ) -> Result<MrInfo> {
        use std::os::fd::AsRawFd;
        let (addr, len) = (mem.addr(), mem.len());
        let info = match mem.dmabuf() {
            // The GPU exports its memory as a dma-buf: the NIC's driver maps its pages.
            Ok(fd) => self.reg_dmabuf(pd, fd.as_raw_fd(), 0, len, addr, access)?,
            // Else a peer-memory module lets ibv_reg_mr take the GPU's address itself.
            Err(_) if PEER_MEMORY.iter().any(|m| self.sysfs.join("module").join(m).exists()) => {
                let mut t = write_tables(&self.tables);
                let swpd = t.pd(pd)?;
                // SAFETY: `addr` is the GPU allocation `mem` keeps alive for as long as the
                // region holds it (the table's entry, dropped after deregistration); the
                // peer-memory module pins its pages for the device.
                let mr = unsafe { swpd.reg_mr(addr as usize, len, access_flags(access)) }
                    .map_err(|e| self.call_err("ibv_reg_mr", io::Error::other(e.to_string())))?;
                let info = mr_info(&mr, pd, addr, len, access);
                t.mrs.insert(info.lkey, Region { mr: Some(mr), map: None, device: None });
                info
            }
            Err(_) => {
                return Err(Error::Unsupported {
                    device: self.name.clone(),
                    what: "GPU memory registration: the GPU exports no dma-buf and no \
                           peer-memory module (nvidia_peermem) is loaded",
                });
            }
        };
        if let Some(r) = write_tables(&self.tables).mrs.get_mut(&info.lkey) {
            r.device = Some(mem);
        }
        Ok(info)
    }
}
