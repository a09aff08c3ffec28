//! Memory regions and the provider's memory.
//!
//! The endpoint keeps the table of registered regions (keys, protection domain, virtual
//! address range, access flags) and checks every local and remote access against it. Only
//! then does it call the provider's [`Memory`] with the region's id and an offset into it, so
//! the provider's copy routines can stay small and the transport has no `unsafe`.

use core::fmt;

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// A provider's name for a registered buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MrId(pub u32);

/// Access rights of a memory region (the `ibv_access_flags` values).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// The local HCA may write (receive buffers, READ and atomic results).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote RDMA READ.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);

    /// Whether every right in `other` is granted.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_set();
        for (a, n) in [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ] {
            if self.contains(a) {
                l.entry(&format_args!("{n}"));
            }
        }
        l.finish()
    }
}

/// A registered memory region as the endpoint knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrInfo {
    /// The provider's buffer.
    pub id: MrId,
    /// Its protection domain.
    pub pd: PdId,
    /// The virtual address of its first byte (what work requests and peers name).
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its access rights.
    pub access: Access,
    /// The local key.
    pub lkey: u32,
    /// The remote key (0 when no remote right is granted).
    pub rkey: u32,
}

impl MrInfo {
    /// The offset of `[addr, addr + len)` in the region, if the range lies inside it.
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        let off = addr.checked_sub(self.addr)?;
        let end = off.checked_add(len)?;
        (end <= self.len).then_some(off)
    }
}

/// Why the provider could not touch its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The region is unknown to the provider.
    #[error("unknown memory region {0:?}")]
    UnknownRegion(MrId),
    /// The access falls outside the buffer.
    #[error("access outside the buffer")]
    OutOfBounds,
}

/// The provider's registered memory. The endpoint calls it only for accesses it has checked
/// against the region table.
pub trait Memory {
    /// Copies `out.len()` bytes starting at `offset` of region `mr` into `out`.
    fn read(&self, mr: MrId, offset: u64, out: &mut [u8]) -> Result<(), MemoryError>;
    /// Copies `data` to `offset` of region `mr`.
    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<(), MemoryError>;
    /// 64-bit compare-and-swap at an 8-byte-aligned `offset`; returns the original value.
    fn compare_swap(
        &mut self,
        mr: MrId,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemoryError>;
    /// 64-bit fetch-and-add at an 8-byte-aligned `offset`; returns the original value.
    fn fetch_add(&mut self, mr: MrId, offset: u64, add: u64) -> Result<u64, MemoryError>;
}

/// Memory made of `Vec<u8>` buffers: for tests, simulations and examples. Atomics use host
/// byte order, as RDMA NICs do on the host's memory.
#[derive(Debug, Default, Clone)]
pub struct VecMemory {
    buffers: Vec<Vec<u8>>,
}

impl VecMemory {
    /// No buffers.
    pub fn new() -> VecMemory {
        VecMemory::default()
    }

    /// Adds a zeroed buffer of `len` bytes and returns its id.
    pub fn add(&mut self, len: usize) -> MrId {
        self.buffers.push(vec![0; len]);
        MrId(self.buffers.len() as u32 - 1)
    }

    /// A buffer's bytes.
    pub fn bytes(&self, mr: MrId) -> &[u8] {
        &self.buffers[mr.0 as usize]
    }

    /// A buffer's bytes, mutable.
    pub fn bytes_mut(&mut self, mr: MrId) -> &mut [u8] {
        &mut self.buffers[mr.0 as usize]
    }

    fn range(&self, mr: MrId, offset: u64, len: usize) -> Result<(usize, usize), MemoryError> {
        let buf = self.buffers.get(mr.0 as usize).ok_or(MemoryError::UnknownRegion(mr))?;
        let start = usize::try_from(offset).map_err(|_| MemoryError::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(MemoryError::OutOfBounds)?;
        if end > buf.len() {
            return Err(MemoryError::OutOfBounds);
        }
        Ok((start, end))
    }

    /// Replaces the 64-bit word at `offset` with `f` of it; returns the original value.
    fn update(
        &mut self,
        mr: MrId,
        offset: u64,
        f: impl FnOnce(u64) -> u64,
    ) -> Result<u64, MemoryError> {
        let (s, _) = self.range(mr, offset, 8)?;
        let w = &mut self.buffers[mr.0 as usize][s..s + 8];
        let orig = u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        w.copy_from_slice(&f(orig).to_ne_bytes());
        Ok(orig)
    }
}

impl Memory for VecMemory {
    fn read(&self, mr: MrId, offset: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        let (s, e) = self.range(mr, offset, out.len())?;
        out.copy_from_slice(&self.buffers[mr.0 as usize][s..e]);
        Ok(())
    }

    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let (s, e) = self.range(mr, offset, data.len())?;
        self.buffers[mr.0 as usize][s..e].copy_from_slice(data);
        Ok(())
    }

    fn compare_swap(
        &mut self,
        mr: MrId,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemoryError> {
        self.update(mr, offset, |v| if v == compare { swap } else { v })
    }

    fn fetch_add(&mut self, mr: MrId, offset: u64, add: u64) -> Result<u64, MemoryError> {
        self.update(mr, offset, |v| v.wrapping_add(add))
    }
}
