//! The kernel's RDMA devices, read from sysfs (`class/infiniband`) the way `ibv_devinfo` and
//! `ibdev2netdev` show them, without libibverbs.
//!
//! sysfs holds every port attribute `ibv_devinfo` prints but the MTUs. On RoCE the kernel
//! derives the active MTU from the netdev's (`iboe_get_mtu`: the netdev MTU less the RoCEv2
//! headers a packet can carry — IPv6 40, UDP 8, BTH 12, XRC 4, atomic 28, ICRC 4 — rounded
//! down to an IB MTU), so [`active_mtu_for`] does the same: 1500 gives 1024, 9000 gives 4096.

use std::fs;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use crate::net::netdev_mtu;
use crate::port::{Gid, GidEntry, GidType, LinkLayer, PhysState, PortState};
use crate::read;

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

/// The kernel's RDMA devices under `sys` (normally `/sys`), sorted by name. A host without
/// any (or without sysfs) has none.
pub fn rdma_devices(sys: &Path) -> Vec<DeviceInfo> {
    let class = sys.join("class/infiniband");
    let mut names: Vec<String> = fs::read_dir(&class)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names.into_iter().map(|n| device(sys, &class.join(&n), n)).collect()
}

/// The RDMA device `name` under `sys`, if there is one.
pub fn rdma_device(sys: &Path, name: &str) -> Option<DeviceInfo> {
    let dir = device_dir(sys, name);
    dir.is_dir().then(|| device(sys, &dir, name.to_string()))
}

/// The provider of the RDMA device `name` under `sys` ([`DeviceInfo::provider`]), from its
/// driver link alone: without the ports and GID tables [`rdma_device`] reads.
pub fn rdma_provider(sys: &Path, name: &str) -> Option<String> {
    let dir = device_dir(sys, name);
    dir.is_dir().then(|| provider(&dir, name, read(&dir.join("parent")).is_some()))
}

fn provider(dir: &Path, name: &str, has_parent: bool) -> String {
    let driver = fs::read_link(dir.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
    match driver {
        Some(d) => d,
        None if has_parent && name.starts_with("siw") => "siw".into(),
        None if has_parent => "rxe".into(),
        None => "unknown".into(),
    }
}

fn device(sys: &Path, dir: &Path, name: String) -> DeviceInfo {
    let parent = read(&dir.join("parent"));
    let provider = provider(dir, &name, parent.is_some());
    let mut ports: Vec<u8> = fs::read_dir(dir.join("ports"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect::<Vec<u8>>())
        .unwrap_or_default();
    ports.sort_unstable();
    let ports = ports.into_iter().map(|p| port(sys, dir, p, parent.as_deref())).collect();
    DeviceInfo {
        name,
        provider,
        node_guid: read(&dir.join("node_guid")),
        fw_ver: read(&dir.join("fw_ver")),
        ports,
    }
}

fn port(sys: &Path, dir: &Path, n: u8, parent: Option<&str>) -> PortInfo {
    let p = dir.join("ports").join(n.to_string());
    let rate = read(&p.join("rate")).unwrap_or_default();
    let (speed_gbps, width) = parse_rate(&rate);
    let link_layer = LinkLayer::parse(&read(&p.join("link_layer")).unwrap_or_default());
    let mut idx: Vec<usize> = fs::read_dir(p.join("gids"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    idx.sort_unstable();
    let gids: Vec<GidEntry> = idx
        .into_iter()
        .filter_map(|i| {
            let gid: Ipv6Addr = read(&p.join("gids").join(i.to_string()))?.parse().ok()?;
            if gid.is_unspecified() {
                return None;
            }
            let t = read(&p.join("gid_attrs/types").join(i.to_string())).unwrap_or_default();
            let gid_type = GidType::parse(&t, link_layer);
            let netdev = read(&p.join("gid_attrs/ndevs").join(i.to_string()));
            Some(GidEntry { index: i, gid: Gid::from(gid), gid_type, netdev })
        })
        .collect();
    let netdev = parent
        .map(str::to_string)
        .or_else(|| gids.iter().find_map(|g| g.netdev.clone()))
        .or_else(|| {
            fs::read_dir(dir.join("device/net"))
                .ok()?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .next()
        });
    let active_mtu = (link_layer == LinkLayer::Ethernet)
        .then(|| netdev.as_deref().and_then(|d| netdev_mtu(sys, d)))
        .flatten()
        .and_then(active_mtu_for);
    PortInfo {
        port: n,
        state: read(&p.join("state")).and_then(|t| PortState::parse(&t)),
        phys_state: read(&p.join("phys_state")).and_then(|t| PhysState::parse(&t)),
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
