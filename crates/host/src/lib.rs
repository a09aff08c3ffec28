//! What podnet reads from a host — the kernel's RDMA devices, their ports and GID tables, the
//! netdevs and IP addresses under them, CPU frequency governors, NUMA nodes — from sysfs and
//! procfs under a root that stands for `/sys` (or `/proc`): the live host's, or a tree recorded
//! from another host (`testdata/telemetry/*/sys`), so every reader is tested on real trees.
//!
//! A leaf crate: no podnet crate below it. Device discovery in `verbs`, telemetry and
//! qualify's host checks read the host through it. A missing or unreadable file is an absent
//! value (`None`, an empty list), never an error: hosts differ in what they expose.

pub mod cpu;
pub mod net;
pub mod pci;
pub mod port;
pub mod rdma;
pub mod sysfs;

use std::path::{Path, PathBuf};

pub use net::{LocalAddr, local_addrs, netdev_mtu};
pub use port::{Gid, GidEntry, GidType, LinkLayer, PhysState, PortState};
pub use rdma::{
    Detail, DeviceInfo, PortInfo, active_mtu_for, device_dir, numa_node, rdma_device, rdma_devices,
    rdma_devices_in, rdma_provider,
};
pub use sysfs::SysFs;

/// `/sys`: the live host's sysfs.
pub fn default_root() -> PathBuf {
    PathBuf::from("/sys")
}

/// The most a sysfs attribute holds (one page).
pub const ATTR_MAX: usize = 4096;

/// A sysfs file's contents, trimmed; `None` when it cannot be read or is empty.
pub fn read(p: &Path) -> Option<String> {
    read_capped(p, ATTR_MAX).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The text of the regular file at `p`, at most `cap` bytes, or why not. What is not a
/// regular file is refused without a read — a FIFO (opened non-blocking: a FIFO nobody
/// writes would block the open), a device such as `/dev/zero` behind a link — and a file
/// past `cap` is refused after reading `cap + 1` bytes, never read to its end.
pub fn read_capped(p: &Path, cap: usize) -> std::io::Result<String> {
    read_open_capped(open_regular(p)?, cap)
}

/// The regular file at `p`, opened for reading, non-blocking; what is not a regular file (a
/// FIFO — the non-blocking open does not wait for a writer —, a device such as `/dev/zero`
/// behind a link, a folder) is refused without a read.
pub fn open_regular(p: &Path) -> std::io::Result<std::fs::File> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(p)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        let what = if t.is_dir() { "a folder" } else { "not a regular file" };
        return Err(Error::new(ErrorKind::InvalidData, format!("{what} where a file should be")));
    }
    Ok(f)
}

/// At most `cap` bytes of a file already open non-blocking, or why not: no `fstat` (a
/// scrape reads thousands of counters), so what bounds a FIFO is the non-blocking read (it
/// answers at once, empty or `EAGAIN`) and what bounds a device or an endless file is the cap.
pub fn read_open_capped(mut f: std::fs::File, cap: usize) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    // One read takes a whole sysfs attribute (it hands it all to the first read); only a
    // first read that fills the buffer is followed by more, up to the cap.
    let mut buf = [0u8; 128];
    let n = f.read(&mut buf)?;
    let mut v = buf[..n].to_vec();
    if n == buf.len() {
        f.take((cap + 1).saturating_sub(n) as u64).read_to_end(&mut v)?;
    }
    if v.len() > cap {
        return Err(Error::new(ErrorKind::InvalidData, format!("larger than {cap} bytes")));
    }
    String::from_utf8(v).map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8"))
}
