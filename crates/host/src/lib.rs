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
pub mod port;
pub mod rdma;

use std::path::{Path, PathBuf};

pub use net::{LocalAddr, local_addrs, netdev_mtu};
pub use port::{Gid, GidEntry, GidType, LinkLayer, PhysState, PortState};
pub use rdma::{
    DeviceInfo, PortInfo, active_mtu_for, numa_node, rdma_device, rdma_devices, rdma_provider,
};

/// `/sys`: the live host's sysfs.
pub fn default_root() -> PathBuf {
    PathBuf::from("/sys")
}

/// A sysfs file's contents, trimmed; `None` when it cannot be read or is empty.
pub fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}
