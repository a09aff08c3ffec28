//! Registered memory regions (`ibv_mr`) and the memory they own.

use std::fmt;
use std::sync::Arc;

use crate::pd::PdLife;
use crate::*;

/// A registered memory region (`ibv_mr`) and the memory it owns.
pub struct MemoryRegion {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) info: MrInfo,
    /// The provider's hot paths and its direct reference to the region's memory.
    pub(crate) fast: Option<Arc<dyn FastPath>>,
    pub(crate) h: Handle,
    /// Its protection domain, freed after it (fields drop after `Drop::drop` deregisters).
    pub(crate) _pd: Arc<PdLife>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.info.addr))
            .field("len", &self.info.len)
            .field("lkey", &format_args!("{:#x}", self.info.lkey))
            .field("rkey", &format_args!("{:#x}", self.info.rkey))
            .field("access", &self.info.access)
            .finish()
    }
}

impl MemoryRegion {
    /// The virtual address of the first byte (what work requests and peers name).
    pub fn addr(&self) -> u64 {
        self.info.addr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.info.len as usize
    }

    /// Whether it is empty (never: zero-length regions are refused).
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.info.lkey
    }

    /// The remote key (0 without remote rights).
    pub fn rkey(&self) -> RKey {
        RKey(self.info.rkey)
    }

    /// Its access rights.
    pub fn access(&self) -> Access {
        self.info.access
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds { offset, len, region_len: self.len() }),
        }
    }

    /// A scatter/gather element for `len` bytes at `offset`, bounds-checked.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        self.check(offset, len)?;
        let length = u32::try_from(len).map_err(|_| Error::OutOfBounds {
            offset,
            len,
            region_len: self.len(),
        })?;
        Ok(Sge { addr: self.info.addr + offset as u64, length, lkey: self.info.lkey })
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    #[inline]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        match &self.fast {
            // SAFETY: the handle is this region's, which lives as long as `self`; the range
            // was checked against the region just above.
            Some(f) => unsafe { f.mr_read(self.info.lkey, self.h, offset, out) },
            None => self.dev.mr_read(self.info.lkey, offset, out),
        }
    }

    /// Reads the byte at `offset` up to `spins` times until it is `want`; whether it was.
    /// How a WRITE-latency side waits for its peer's write to land: a tight loop on the
    /// region's memory where the provider maps it (rdma-core), region reads otherwise (a
    /// busy-polled soft device receives between them, as a CQ poll does).
    #[inline]
    pub fn watch_byte(&self, offset: usize, want: u8, spins: u32) -> Result<bool> {
        self.check(offset, 1)?;
        if let Some(f) = &self.fast {
            // SAFETY: as in `read`.
            return unsafe { f.mr_watch_byte(self.info.lkey, self.h, offset, want, spins) };
        }
        self.dev.mr_watch_byte(self.info.lkey, offset, want, spins)
    }

    /// The byte at `offset`, to read and write in place where the provider maps the region's
    /// memory into this process (rdma-core's host memory); `None` where it does not (the soft
    /// provider's regions, dma-buf). What a WRITE-latency loop spins on and bumps.
    pub fn mapped_byte(&self, offset: usize) -> Result<Option<MappedByte<'_>>> {
        self.check(offset, 1)?;
        Ok(self.fast.as_ref().and_then(|f| f.mr_mapping(self.h)).map(|base| MappedByte {
            at: base.wrapping_add(offset),
            _region: std::marker::PhantomData,
        }))
    }

    /// Copies `data` into the region at `offset`.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        match &self.fast {
            // SAFETY: as in `read`.
            Some(f) => unsafe { f.mr_write(self.info.lkey, self.h, offset, data) },
            None => self.dev.mr_write(self.info.lkey, offset, data),
        }
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}

/// One byte of a registered region, read and written in place ([`MemoryRegion::mapped_byte`]):
/// a load or a store, no call, as perftest's `*poll_buf` and `*post_buf` — under TCG a call
/// and its return are each a lookup of translated code. The device may write it at any time;
/// each access is volatile.
pub struct MappedByte<'a> {
    pub(crate) at: *mut u8,
    pub(crate) _region: std::marker::PhantomData<&'a MemoryRegion>,
}

impl MappedByte<'_> {
    /// The byte now.
    #[inline(always)]
    pub fn load(&self) -> u8 {
        // SAFETY: `at` lies inside the region's mapping (checked at `mapped_byte`), which
        // lives as long as the region this borrows; volatile, since the device writes it
        // behind the compiler's back.
        unsafe { std::ptr::read_volatile(self.at) }
    }

    /// Sets the byte.
    #[inline(always)]
    pub fn store(&self, v: u8) {
        // SAFETY: as in `load`; the mapping is writable host memory.
        unsafe { std::ptr::write_volatile(self.at, v) }
    }
}

impl fmt::Debug for MappedByte<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MappedByte").field(&self.at).finish()
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.dev.dereg_mr(self.info.lkey);
    }
}
