//! Where PCI functions sit: a function's path through the PCI hierarchy (its root complex,
//! the bridges down to it), its NUMA node, the GPUs of a host, and how far a GPU is from a
//! NIC in the words `nvidia-smi topo -m` uses (PIX, PXB, PHB, NODE, SYS) — what decides
//! whether GPUDirect RDMA between them runs at the NIC's speed.

use std::path::Path;

use crate::read;

/// Whether `s` is a PCI function's address as sysfs writes it (`0000:3b:00.0`).
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The path of the PCI function `dev` (a sysfs link to it: `bus/pci/devices/BDF`,
/// `class/infiniband/mlx5_0/device`) under `sys`: its root complex (`pci0000:3a`), then each
/// bridge's address and the function's own, from the link's target
/// (`devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0`). `None` where the link is not there.
pub fn path_of(sys: &Path, dev: &Path) -> Option<Vec<String>> {
    let real = std::fs::canonicalize(sys.join(dev)).ok()?;
    let root = std::fs::canonicalize(sys).ok()?;
    let rel = real.strip_prefix(root.join("devices")).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|c| c.starts_with("pci") || is_bdf(c))
        .collect();
    (parts.len() >= 2 && parts[0].starts_with("pci") && parts.iter().skip(1).all(|c| is_bdf(c)))
        .then_some(parts)
}

/// How far apart two PCI functions are, nearest first (as `nvidia-smi topo -m` names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Distance {
    /// Through at most one PCIe switch (its downstream ports).
    Pix,
    /// Through several PCIe bridges, not the host bridge.
    Pxb,
    /// Through the host bridge (the CPU's root complex), one NUMA node.
    Phb,
    /// Across root complexes within one NUMA node.
    Node,
    /// Across NUMA nodes (the inter-socket link).
    Sys,
}

impl Distance {
    /// `PIX`, `PXB`, `PHB`, `NODE`, `SYS`.
    pub fn name(self) -> &'static str {
        match self {
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::Phb => "PHB",
            Distance::Node => "NODE",
            Distance::Sys => "SYS",
        }
    }

    /// What it means for peer-to-peer traffic between the two.
    pub fn meaning(self) -> &'static str {
        match self {
            Distance::Pix => "one PCIe switch between them: peer-to-peer stays in the switch",
            Distance::Pxb => {
                "several PCIe bridges, no host bridge: peer-to-peer stays below the CPU"
            }
            Distance::Phb => "through the CPU's host bridge: peer-to-peer crosses the root complex",
            Distance::Node => "different root complexes of one NUMA node",
            Distance::Sys => "different NUMA nodes: every transfer crosses the inter-socket link",
        }
    }
}

/// The distance between functions at paths `a` and `b` ([`path_of`]) on NUMA nodes
/// `numa_a` and `numa_b`.
pub fn distance(a: &[String], b: &[String], numa_a: Option<i64>, numa_b: Option<i64>) -> Distance {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    match common {
        0 if numa_a.is_some() && numa_a == numa_b => Distance::Node,
        0 => Distance::Sys,
        // One root complex, different root ports.
        1 => Distance::Phb,
        _ => {
            // Bridges below the common one on each side (the functions themselves not
            // counted): one downstream port each is one switch.
            let below = |p: &[String]| p.len().saturating_sub(common + 1);
            if below(a) <= 1 && below(b) <= 1 { Distance::Pix } else { Distance::Pxb }
        }
    }
}

/// The vendor of a GPU's PCI function from its `class` and `vendor` files (a display or 3D
/// controller of NVIDIA or AMD): `nvidia`, `amd`; `None` for any other function.
pub fn gpu_vendor(class: &str, vendor: &str) -> Option<&'static str> {
    if !(class.starts_with("0x0302") || class.starts_with("0x0300")) {
        return None;
    }
    match vendor {
        "0x10de" => Some("nvidia"),
        "0x1002" => Some("amd"),
        _ => None,
    }
}

/// Where a PCI function sits, through a sysfs link to it (`bus/pci/devices/BDF`,
/// `class/infiniband/mlx5_0/device`) under `sys`: its path ([`path_of`]) and its NUMA node
/// (`None`: not reported, or -1).
pub fn place_of(sys: &Path, link: &Path) -> (Option<Vec<String>>, Option<i64>) {
    let numa = read(&sys.join(link).join("numa_node"))
        .and_then(|n| n.parse().ok())
        .filter(|n: &i64| *n >= 0);
    (path_of(sys, link), numa)
}

/// A GPU's PCI function.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFunction {
    /// Its address (`0000:3c:00.0`).
    pub pci: String,
    /// `nvidia`, `amd`.
    pub vendor: &'static str,
    /// Its NUMA node (`None`: not reported, or -1).
    pub numa_node: Option<i64>,
    /// Its path ([`path_of`]).
    pub path: Option<Vec<String>>,
}

/// The GPUs under `sys` ([`gpu_vendor`]), by address.
pub fn gpus(sys: &Path) -> Vec<GpuFunction> {
    let dir = sys.join("bus/pci/devices");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter_map(|f| {
            let p = dir.join(&f);
            let vendor = gpu_vendor(&read(&p.join("class"))?, &read(&p.join("vendor"))?)?;
            let (path, numa_node) = place_of(sys, &Path::new("bus/pci/devices").join(&f));
            Some(GpuFunction { pci: f, vendor, numa_node, path })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('/').map(str::to_string).collect()
    }

    #[test]
    fn distances_read_as_nvidia_smi_names_them() {
        let nic = p("pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0/0000:3b:00.0");
        let gpu_same_switch = p("pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:01.0/0000:3c:00.0");
        let gpu_two_switches = p(
            "pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:02.0/0000:3d:00.0/0000:3e:00.0/0000:3f:00.0",
        );
        let gpu_other_port = p("pci0000:38/0000:38:01.0/0000:40:00.0");
        let gpu_other_root = p("pci0000:5d/0000:5d:00.0/0000:5e:00.0");
        assert_eq!(distance(&nic, &gpu_same_switch, Some(0), Some(0)), Distance::Pix);
        assert_eq!(distance(&nic, &gpu_two_switches, Some(0), Some(0)), Distance::Pxb);
        assert_eq!(distance(&nic, &gpu_other_port, Some(0), Some(0)), Distance::Phb);
        assert_eq!(distance(&nic, &gpu_other_root, Some(0), Some(0)), Distance::Node);
        assert_eq!(distance(&nic, &gpu_other_root, Some(0), Some(1)), Distance::Sys);
        assert_eq!(distance(&nic, &gpu_other_root, None, None), Distance::Sys);
        assert!(Distance::Pix < Distance::Sys);
    }
}
