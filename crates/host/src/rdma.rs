//! The kernel's RDMA devices, read from sysfs (`class/infiniband`) the way `ibv_devinfo` and
//! `ibdev2netdev` show them, without libibverbs.
//!
//! sysfs holds every port attribute `ibv_devinfo` prints but the MTUs. On RoCE the kernel
//! derives the active MTU from the netdev's (`iboe_get_mtu`: the netdev MTU less the RoCEv2
//! headers a packet can carry — IPv6 40, UDP 8, BTH 12, XRC 4, atomic 28, ICRC 4 — rounded
//! down to an IB MTU), so [`active_mtu_for`] does the same: 1500 gives 1024, 9000 gives 4096.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use crate::port::{Gid, GidEntry, GidType, LinkLayer, PhysState, PortState};
use crate::read;
use crate::sysfs::SysFs;

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PortInfo {
    /// Port number (from 1).
    pub port: u8,
    /// Logical state (`None`: unreadable).
    pub state: Option<PortState>,
    /// Physical state (`None`: unreadable).
    pub phys_state: Option<PhysState>,
    /// The rate line as sysfs gives it, e.g. `100 Gb/sec (4X EDR)`.
    pub rate: String,
    /// Link speed in Gb/s, from the rate line.
    pub speed_gbps: Option<f64>,
    /// Link width (`1X`, `4X`, …), from the rate line.
    pub width: Option<String>,
    /// Ethernet (RoCE) or InfiniBand.
    pub link_layer: LinkLayer,
    /// The netdev under a RoCE port.
    pub netdev: Option<String>,
    /// The active MTU: derived from the netdev's on RoCE (see the module docs).
    pub active_mtu: Option<u32>,
    /// The GID table (non-zero entries).
    pub gids: Vec<GidEntry>,
}

impl PortInfo {
    /// How many of its GIDs are RoCE v2.
    pub fn roce_v2_gids(&self) -> usize {
        self.gids.iter().filter(|g| g.gid_type == GidType::RoceV2).count()
    }
}

/// An RDMA device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// Its name (`mlx5_0`, `rxe0`, `soft:10.0.0.1`).
    pub name: String,
    /// The provider: the kernel driver (`mlx5_core`, …), `rxe`, `siw`, or `soft`.
    pub provider: String,
    /// Its PCI function (`0000:3b:00.0`), where it has one.
    pub pci: Option<String>,
    /// Node GUID, as sysfs prints it.
    pub node_guid: Option<String>,
    /// Firmware version.
    pub fw_ver: Option<String>,
    /// Its ports.
    pub ports: Vec<PortInfo>,
}

/// `100 Gb/sec (4X EDR)` → (100.0, `4X`).
fn parse_rate(rate: &str) -> (Option<f64>, Option<String>) {
    let speed = rate.split_whitespace().next().and_then(|x| x.parse().ok());
    let width = rate
        .split_once('(')
        .and_then(|(_, r)| r.split_whitespace().next())
        .map(|w| w.trim_end_matches(')').to_string());
    (speed, width)
}

/// The active RoCE MTU in bytes (an IB MTU: 256 … 4096) the kernel derives from a netdev
/// MTU; `None` when not even 256 bytes fit.
pub fn active_mtu_for(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| *m <= room)
}

/// The sysfs folder of the RDMA device `name` under `sys` (`sys/class/infiniband/<name>`):
/// the one place the class's path is spelled.
pub fn device_dir(sys: &Path, name: &str) -> PathBuf {
    sys.join("class/infiniband").join(name)
}

/// The NUMA node of the RDMA device `name`'s PCI function (`device/numa_node`): `Some(-1)`
/// when the firmware reports none, `None` for a device without a PCI function (rxe, siw).
pub fn numa_node(sys: &Path, name: &str) -> Option<i64> {
    read(&device_dir(sys, name).join("device/numa_node"))?.parse().ok()
}

/// How much of a device to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Everything [`DeviceInfo`] holds, GID tables included.
    Full,
    /// Without the GID tables and active MTUs (a port's netdev from its first GID's): what a
    /// diagnosis of the host needs, at a few files a port.
    Brief,
}

/// The kernel's RDMA devices under `sys` (normally `/sys`), sorted by name. A host without
/// any (or without sysfs) has none.
pub fn rdma_devices(sys: &Path) -> Vec<DeviceInfo> {
    rdma_devices_in(&sys, Detail::Full)
}

/// The kernel's RDMA devices in the sysfs tree `fs`, sorted by name, read to `detail`: the
/// one reader of RDMA devices (doctor reads through its own view of the tree).
pub fn rdma_devices_in(fs: &dyn SysFs, detail: Detail) -> Vec<DeviceInfo> {
    fs.list(CLASS).into_iter().map(|n| device(fs, n, detail)).collect()
}

/// The RDMA device `name` under `sys`, if there is one.
pub fn rdma_device(sys: &Path, name: &str) -> Option<DeviceInfo> {
    device_dir(sys, name).is_dir().then(|| device(&sys, name.to_string(), Detail::Full))
}

/// The provider of the RDMA device `name` under `sys` ([`DeviceInfo::provider`]), from its
/// driver link alone: without the ports and GID tables [`rdma_device`] reads.
pub fn rdma_provider(sys: &Path, name: &str) -> Option<String> {
    let dir = format!("{CLASS}/{name}");
    device_dir(sys, name)
        .is_dir()
        .then(|| provider(&sys, &dir, name, (&sys).read(&format!("{dir}/parent")).is_some()))
}

/// Where RDMA devices are, under the sysfs root.
const CLASS: &str = "class/infiniband";

fn provider(fs: &dyn SysFs, dir: &str, name: &str, has_parent: bool) -> String {
    match fs.link_name(&format!("{dir}/device/driver")) {
        Some(d) => d,
        None if has_parent && name.starts_with("siw") => "siw".into(),
        None if has_parent => "rxe".into(),
        None => "unknown".into(),
    }
}

/// A PCI address as sysfs names a function: `0000:3b:00.0`.
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The device's PCI function: the `PCI_SLOT_NAME` of its uevent, else where its `device`
/// link points; `None` for a device without one (rxe, siw).
fn pci_address(fs: &dyn SysFs, dir: &str) -> Option<String> {
    let from_uevent = fs
        .read(&format!("{dir}/device/uevent"))
        .and_then(|u| u.lines().find_map(|l| l.strip_prefix("PCI_SLOT_NAME=").map(str::to_string)));
    from_uevent.or_else(|| fs.link_name(&format!("{dir}/device")).filter(|n| is_pci_address(n)))
}

fn device(fs: &dyn SysFs, name: String, detail: Detail) -> DeviceInfo {
    let dir = format!("{CLASS}/{name}");
    let parent = fs.read(&format!("{dir}/parent"));
    let provider = provider(fs, &dir, &name, parent.is_some());
    let mut ports: Vec<u8> =
        fs.list(&format!("{dir}/ports")).iter().filter_map(|p| p.parse().ok()).collect();
    ports.sort_unstable();
    let ports = ports.into_iter().map(|p| port(fs, &dir, p, parent.as_deref(), detail)).collect();
    DeviceInfo {
        provider,
        pci: pci_address(fs, &dir),
        node_guid: fs.read(&format!("{dir}/node_guid")),
        fw_ver: fs.read(&format!("{dir}/fw_ver")),
        ports,
        name,
    }
}

/// The non-zero GIDs of port folder `p`.
fn gid_table(fs: &dyn SysFs, p: &str, link_layer: LinkLayer) -> Vec<GidEntry> {
    let mut idx: Vec<usize> =
        fs.list(&format!("{p}/gids")).iter().filter_map(|i| i.parse().ok()).collect();
    idx.sort_unstable();
    idx.into_iter()
        .filter_map(|i| {
            let gid: Ipv6Addr = fs.read(&format!("{p}/gids/{i}"))?.parse().ok()?;
            if gid.is_unspecified() {
                return None;
            }
            let t = fs.read(&format!("{p}/gid_attrs/types/{i}")).unwrap_or_default();
            let gid_type = GidType::parse(&t, link_layer);
            let netdev = fs.read(&format!("{p}/gid_attrs/ndevs/{i}"));
            Some(GidEntry { index: i, gid: Gid::from(gid), gid_type, netdev })
        })
        .collect()
}

fn port(fs: &dyn SysFs, dir: &str, n: u8, parent: Option<&str>, detail: Detail) -> PortInfo {
    let p = format!("{dir}/ports/{n}");
    let rate = fs.read(&format!("{p}/rate")).unwrap_or_default();
    let (speed_gbps, width) = parse_rate(&rate);
    let link_layer = LinkLayer::parse(&fs.read(&format!("{p}/link_layer")).unwrap_or_default());
    let gids = match detail {
        Detail::Full => gid_table(fs, &p, link_layer),
        Detail::Brief => Vec::new(),
    };
    let first_gid_netdev = || match detail {
        Detail::Full => gids.iter().find_map(|g| g.netdev.clone()),
        Detail::Brief => fs.read(&format!("{p}/gid_attrs/ndevs/0")),
    };
    let netdev = parent
        .map(str::to_string)
        .or_else(first_gid_netdev)
        .or_else(|| fs.list(&format!("{dir}/device/net")).into_iter().next());
    let active_mtu = (detail == Detail::Full && link_layer == LinkLayer::Ethernet)
        .then(|| netdev.as_deref().and_then(|d| fs.read(&format!("class/net/{d}/mtu"))))
        .flatten()
        .and_then(|m| m.parse().ok())
        .and_then(active_mtu_for);
    PortInfo {
        port: n,
        state: fs.read(&format!("{p}/state")).and_then(|t| PortState::parse(&t)),
        phys_state: fs.read(&format!("{p}/phys_state")).and_then(|t| PhysState::parse(&t)),
        rate,
        speed_gbps,
        width,
        link_layer,
        netdev,
        active_mtu,
        gids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_mtus_parse_as_the_kernel_prints_and_derives_them() {
        assert_eq!(parse_rate("100 Gb/sec (4X EDR)"), (Some(100.0), Some("4X".into())));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)"), (Some(2.5), Some("1X".into())));
        assert_eq!(parse_rate(""), (None, None));
        let m = active_mtu_for;
        assert_eq!(
            (m(1500), m(9000), m(65536), m(1100), m(300)),
            (Some(1024), Some(4096), Some(4096), Some(512), None)
        );
    }

    #[test]
    fn the_provider_alone_agrees_with_the_whole_device() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/telemetry");
        let mut seen = 0;
        for fixture in ["mlx5", "rxe", "bnxt_re", "broken"] {
            let sys = root.join(fixture).join("sys");
            for d in rdma_devices(&sys) {
                assert_eq!(rdma_provider(&sys, &d.name).as_deref(), Some(d.provider.as_str()));
                seen += 1;
            }
        }
        assert!(seen >= 6, "{seen} fixture devices");
        assert_eq!(rdma_provider(&root.join("rxe/sys"), "mlx5_0"), None);
        assert_eq!(numa_node(&root.join("rxe/sys"), "rxe0"), None, "rxe has no PCI function");
    }
}
