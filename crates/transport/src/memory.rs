//! Memory regions and the provider's memory.
//!
//! The endpoint keeps the table of registered regions (keys, protection domain, virtual
//! address range, access flags) and checks every local and remote access against it. Only
//! then does it call the provider's [`Memory`] with the region's id and an offset into it, so
//! the provider's copy routines can stay small and the transport has no `unsafe`.

use verbs::MrId;

/// Why the provider could not touch its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The region is unknown to the provider.
    #[error("unknown memory region {0:?}")]
    UnknownRegion(MrId),
    /// The access falls outside the buffer.
    #[error("access outside the buffer")]
    OutOfBounds,
    /// The buffer is device (GPU) memory and its driver failed the copy.
    #[error("the device memory's driver failed a copy")]
    Device,
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
