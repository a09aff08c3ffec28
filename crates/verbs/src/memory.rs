//! Protection domains and memory regions as the verbs name them: access rights, keys.

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

/// Memory a provider does not allocate: a GPU's buffer, read and written through its
/// driver's copy engine, registered with [`crate::ProtectionDomain::reg_device_mr`]. The
/// soft provider copies through it as it places and gathers payloads; a NIC's provider
/// registers its dma-buf.
pub trait DeviceMemory: Send + Sync + fmt::Debug {
    /// The address its first byte is named by: work requests and peers use it as they use
    /// a host region's (a GPU's unified virtual address).
    fn addr(&self) -> u64;
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `out.len()` bytes at `offset` out of it (the caller checked the range).
    fn read(&self, offset: usize, out: &mut [u8]) -> std::io::Result<()>;
    /// Copies `data` into it at `offset` (the caller checked the range). It may be staged
    /// (a batch of contiguous writes copied at once): visible to [`DeviceMemory::read`] at
    /// once, in the device's memory itself after [`DeviceMemory::flush`].
    fn write(&self, offset: usize, data: &[u8]) -> std::io::Result<()>;
    /// Copies what [`DeviceMemory::write`] staged into the device's memory, and forgets what
    /// reads fetched ahead. A provider calls it before it hands out completions: what a
    /// completion reports is in the device, and the application may change the memory next.
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    /// A dma-buf of the whole buffer, for a NIC's driver (`ibv_reg_dmabuf_mr`); an error
    /// where the memory cannot export one (says why).
    fn dmabuf(&self) -> std::io::Result<std::os::fd::OwnedFd>;
    /// What it is, for messages: `GPU 0 (0000:3c:00.0)`.
    fn describe(&self) -> String;
}
