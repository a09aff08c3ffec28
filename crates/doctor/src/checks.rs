//! The checks of the host's configuration: CPU and memory, PCIe, and the netdevs under the
//! RDMA devices. Each reads through [`Source`] and adds [`Finding`]s; a file a host does not
//! have is not a finding (a VM has no cpufreq, a virtual device no PCIe link).

use host::LinkLayer;

use crate::{Finding, Severity, Source};

/// An RDMA device as doctor sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaDevice {
    /// `mlx5_0`, `rxe0`.
    pub name: String,
    /// Its PCI function (`0000:3b:00.0`), where it has one.
    pub pci: Option<String>,
    /// Its ports: (number, link layer, netdev).
    pub ports: Vec<(u32, LinkLayer, Option<String>)>,
}

impl RdmaDevice {
    fn label(&self) -> String {
        match &self.pci {
            Some(p) => format!("{} ({p})", self.name),
            None => self.name.clone(),
        }
    }
}

/// The kernel's RDMA devices (`sys/class/infiniband`), read by `host`'s reader through the
/// source (so that a recording holds what was read).
pub fn rdma_devices(src: &Source) -> Vec<RdmaDevice> {
    host::rdma_devices_in(&src.sysfs(), host::Detail::Brief)
        .into_iter()
        .map(|d| RdmaDevice {
            ports: d
                .ports
                .iter()
                .map(|p| (u32::from(p.port), p.link_layer, p.netdev.clone()))
                .collect(),
            name: d.name,
            pci: d.pci,
        })
        .collect()
}

/// What should match across hosts: the kernel's release, each RDMA device's firmware and
/// board, and its driver's version where the module gives one.
pub fn versions(
    src: &Source,
    devices: &[RdmaDevice],
) -> std::collections::BTreeMap<String, String> {
    let mut v = std::collections::BTreeMap::new();
    if let Some(k) = src.read("proc/sys/kernel/osrelease") {
        v.insert("kernel".to_string(), k);
    }
    for d in devices {
        let base = format!("sys/class/infiniband/{}", d.name);
        if let Some(fw) = src.read(&format!("{base}/fw_ver")) {
            v.insert(format!("{} firmware", d.name), fw);
        }
        if let Some(b) = src.read(&format!("{base}/board_id")) {
            v.insert(format!("{} board", d.name), b);
        }
        let driver = src
            .read(&format!("{base}/device/uevent"))
            .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DRIVER=").map(str::to_string)));
        if let Some(drv) = driver
            && let Some(ver) = src.read(&format!("sys/module/{drv}/version"))
        {
            v.insert(format!("{drv} driver"), ver);
        }
    }
    v
}

/// The ports of one adapter (PCI functions of one bus and device: a dual-port ConnectX's
/// `.0` and `.1`) run one firmware image: when they report different versions, an update
/// was applied to one function and the adapter not reset since (or a port came back from a
/// recovery on another image) — the ports then behave differently under the same load.
pub fn adapters(src: &Source, devices: &[RdmaDevice], out: &mut Vec<Finding>) {
    let mut by_adapter: std::collections::BTreeMap<String, Vec<(String, String)>> =
        std::collections::BTreeMap::new();
    for d in devices {
        let Some(pci) = &d.pci else { continue };
        let Some((adapter, _function)) = pci.rsplit_once('.') else { continue };
        if let Some(fw) = src.read(&format!("sys/class/infiniband/{}/fw_ver", d.name)) {
            by_adapter.entry(adapter.to_string()).or_default().push((d.name.clone(), fw));
        }
    }
    for (adapter, ports) in by_adapter {
        let first = &ports[0].1;
        if ports.iter().all(|(_, fw)| fw == first) {
            continue;
        }
        let list: Vec<String> = ports.iter().map(|(n, fw)| format!("{n} {fw}")).collect();
        out.push(Finding {
            severity: Severity::Warning,
            kind: "firmware-mismatch".into(),
            component: format!("adapter {adapter}"),
            seen: format!("the ports of one adapter run different firmware: {}", list.join(", ")),
            why: "one adapter runs one image: a port on another version was updated without \
                  the adapter being reset (or recovered onto another image), and the two ports \
                  behave differently under the same load"
                .into(),
            fix: format!(
                "mlxfwreset -d {adapter}.0 reset (or reboot) to run the flashed image on every port"
            ),
            evidence: ports
                .iter()
                .map(|(n, fw)| format!("sys/class/infiniband/{n}/fw_ver: {fw}"))
                .collect(),
        });
    }
}

/// With several RDMA netdevs, each one's IPv4 address needs a rule that routes what leaves
/// from it out of its own netdev (`ip rule add from ADDR table N`): else replies and
/// connections from one rail leave through whichever netdev the main table picks.
fn source_routing(src: &Source, netdevs: &[(String, String)], out: &mut Vec<Finding>) {
    use std::net::Ipv4Addr;
    if netdevs.len() < 2 {
        return;
    }
    let (Some(addrs), Some(rules)) = (
        src.command("ip-addr.json", &["ip", "-j", "-4", "addr", "show"]),
        src.command("ip-rule.json", &["ip", "-j", "rule", "show"]),
    ) else {
        return;
    };
    let (Ok(addrs), Ok(rules)) = (
        serde_json::from_str::<serde_json::Value>(&addrs),
        serde_json::from_str::<serde_json::Value>(&rules),
    ) else {
        return;
    };
    // The rules' sources: (network, prefix length).
    let froms: Vec<(Ipv4Addr, u32)> = rules
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((r["src"].as_str()?.parse().ok()?, r["srclen"].as_u64().unwrap_or(32) as u32))
        })
        .collect();
    let covered = |a: Ipv4Addr| {
        froms.iter().any(|(n, len)| {
            let mask = if *len == 0 { 0 } else { u32::MAX << (32 - len.min(&32)) };
            u32::from(a) & mask == u32::from(*n) & mask
        })
    };
    for (nd, dev) in netdevs {
        let mine: Vec<Ipv4Addr> = addrs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["ifname"].as_str() == Some(nd))
            .flat_map(|i| i["addr_info"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a["local"].as_str()?.parse().ok())
            .collect();
        let bare: Vec<String> =
            mine.iter().filter(|a| !covered(**a)).map(ToString::to_string).collect();
        if !bare.is_empty() {
            out.push(Finding {
                severity: Severity::Warning,
                kind: "source-routing".into(),
                component: format!("{dev} ({nd})"),
                seen: format!("no `ip rule` routes traffic from {} (one of several RDMA netdevs)", bare.join(", ")),
                why: "with several NICs, what leaves from one rail's address takes whichever netdev the main table picks: RoCE connections and their ARP cross rails or fail".into(),
                fix: format!("ip route add <its subnet> dev {nd} table 10N; ip rule add from {} table 10N", bare[0]),
                evidence: vec![format!("ip -j rule show: no rule from {}", bare.join(", "))],
            });
        }
    }
}

/// The netdevs under the RDMA devices' ports, each once, in device order: (netdev, its RDMA
/// device, whether the port is RoCE — Ethernet link layer).
pub fn rdma_netdevs(devices: &[RdmaDevice]) -> Vec<(String, String, bool)> {
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for d in devices {
        for (_, ll, nd) in &d.ports {
            if let Some(nd) = nd
                && !out.iter().any(|(n, _, _)| n == nd)
            {
                out.push((nd.clone(), d.name.clone(), *ll == LinkLayer::Ethernet));
            }
        }
    }
    out
}

/// `0-3,8,10-11` → the CPUs.
pub fn cpulist(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    out.extend(a..=b.min(a.saturating_add(65_536)));
                }
            }
            None => out.extend(part.trim().parse::<u32>().ok()),
        }
    }
    out
}

/// CPU and memory settings.
pub fn cpu(src: &Source, out: &mut Vec<Finding>) {
    let cpus: Vec<String> = src
        .list("sys/devices/system/cpu")
        .into_iter()
        .filter(|n| n.strip_prefix("cpu").is_some_and(|i| i.parse::<u32>().is_ok()))
        .collect();
    let govs: Vec<(String, String)> = cpus
        .iter()
        .filter_map(|c| {
            Some((
                c.clone(),
                src.read(&format!("sys/devices/system/cpu/{c}/cpufreq/scaling_governor"))?,
            ))
        })
        .collect();
    let slow: Vec<&(String, String)> = govs.iter().filter(|(_, g)| g != "performance").collect();
    if let Some((c0, g0)) = slow.first() {
        out.push(Finding {
            severity: Severity::Warning,
            kind: "cpu-governor".into(),
            component: "cpu".into(),
            seen: format!("governor {g0} on {} of {} CPUs", slow.len(), govs.len()),
            why: "a CPU that lowers its clock between bursts adds microseconds to every completion it polls and posts fewer work requests per second".into(),
            fix: "cpupower frequency-set -g performance".into(),
            evidence: vec![format!("sys/devices/system/cpu/{c0}/cpufreq/scaling_governor = {g0}")],
        });
    }
    if src.read("proc/sys/kernel/numa_balancing").is_some_and(|v| v != "0") {
        out.push(Finding {
            severity: Severity::Warning,
            kind: "numa-balancing".into(),
            component: "memory".into(),
            seen: "automatic NUMA balancing is on".into(),
            why: "the kernel unmaps pages now and then to sample who touches them: hinting faults and page migrations on the CPUs that drive the NIC, latency jitter".into(),
            fix: "sysctl -w kernel.numa_balancing=0".into(),
            evidence: vec!["proc/sys/kernel/numa_balancing = 1".into()],
        });
    }
    if let Some(thp) = src.read("sys/kernel/mm/transparent_hugepage/enabled")
        && thp.contains("[always]")
    {
        out.push(Finding {
            severity: Severity::Info,
            kind: "thp".into(),
            component: "memory".into(),
            seen: "transparent huge pages: always".into(),
            why: "khugepaged's compaction can stall a process for milliseconds; latency-bound RDMA hosts often set madvise".into(),
            fix: "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled".into(),
            evidence: vec![format!("sys/kernel/mm/transparent_hugepage/enabled = {thp}")],
        });
    }
    // Turbo off: the generic cpufreq knob (boost 0) or intel_pstate's (no_turbo 1).
    let boost = [
        ("sys/devices/system/cpu/cpufreq/boost", "0"),
        ("sys/devices/system/cpu/intel_pstate/no_turbo", "1"),
    ]
    .into_iter()
    .find_map(|(f, off)| (src.read(f).as_deref() == Some(off)).then(|| format!("{f} = {off}")));
    if let Some(ev) = boost {
        out.push(Finding {
            severity: Severity::Info,
            kind: "cpu-boost-off".into(),
            component: "cpu".into(),
            seen: "turbo (boost) is off".into(),
            why: "a polling thread runs at base clock: lower message rates and longer busy-poll latency (some sites turn it off for steadier timing: a choice, said here)".into(),
            fix: "echo 1 > /sys/devices/system/cpu/cpufreq/boost (intel_pstate: echo 0 > /sys/devices/system/cpu/intel_pstate/no_turbo)".into(),
            evidence: vec![ev],
        });
    }
    // Deep idle states: the deepest one cpu0 may enter, and what waking from it costs.
    let idle = "sys/devices/system/cpu/cpu0/cpuidle";
    let deepest = src
        .list(idle)
        .into_iter()
        .filter(|s| s.starts_with("state"))
        .filter_map(|s| {
            let disabled = src.read(&format!("{idle}/{s}/disable")).as_deref() == Some("1");
            let lat = src.read_u64(&format!("{idle}/{s}/latency"))?;
            (!disabled).then(|| (lat, src.read(&format!("{idle}/{s}/name")).unwrap_or(s)))
        })
        .max();
    let limited = src.read("proc/cmdline").is_some_and(|c| {
        c.split_whitespace().any(|w| {
            w.starts_with("intel_idle.max_cstate=")
                || w.starts_with("processor.max_cstate=")
                || w == "idle=poll"
        })
    });
    if let Some((lat, name)) = deepest
        && lat > 20
        && !limited
    {
        out.push(Finding {
            severity: Severity::Info,
            kind: "c-states".into(),
            component: "cpu".into(),
            seen: format!("CPUs may sleep in {name}, {lat} µs to wake"),
            why: "an interrupt-driven completion (event mode) waits for its CPU to wake: deep idle states add their exit latency to every such message".into(),
            fix: "for latency: intel_idle.max_cstate=1 on the kernel command line, or hold /dev/cpu_dma_latency at 0 while the job runs (tuned's latency-performance profile)".into(),
            evidence: vec![format!("{idle}/*: the deepest enabled state {name}, latency {lat} µs")],
        });
    }
    if src.read("sys/devices/system/cpu/smt/active").as_deref() == Some("1") {
        out.push(Finding {
            severity: Severity::Info,
            kind: "smt".into(),
            component: "cpu".into(),
            seen: "SMT (hyper-threading) is on".into(),
            why: "a polling thread shares its core with its sibling: pin latency-critical pollers to cores whose sibling is idle".into(),
            fix: "—".into(),
            evidence: vec!["sys/devices/system/cpu/smt/active = 1".into()],
        });
    }
    if let Some(cmdline) = src.read("proc/cmdline") {
        let set: Vec<&str> = cmdline
            .split_whitespace()
            .filter(|w| {
                [
                    "isolcpus=",
                    "nohz_full=",
                    "intel_idle.max_cstate=",
                    "processor.max_cstate=",
                    "iommu=",
                    "intel_iommu=",
                    "amd_iommu=",
                ]
                .iter()
                .any(|k| w.starts_with(k))
            })
            .collect();
        if !set.is_empty() {
            out.push(Finding {
                severity: Severity::Info,
                kind: "kernel-cmdline".into(),
                component: "kernel".into(),
                seen: set.join(" "),
                why: "CPU isolation, C-state limits and the IOMMU mode shape RDMA latency and peer-to-peer DMA: pin pollers to the isolated CPUs".into(),
                fix: "—".into(),
                evidence: vec![format!("proc/cmdline = {cmdline}")],
            });
        }
    }
}

/// `16.0 GT/s PCIe` → 16.0.
fn gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

/// A PCI function doctor looks at: an RDMA device's or a GPU's.
#[derive(Debug, Clone, PartialEq)]
pub struct PciFunction {
    /// How findings name it: `mlx5_0 (0000:3b:00.0)`, `GPU 0000:5e:00.0`.
    pub label: String,
    /// The RDMA device (`mlx5_0`), or `gpu`.
    pub device: String,
    /// Its PCI address, where known.
    pub pci: Option<String>,
    /// Its sysfs folder (`sys/class/infiniband/mlx5_0/device`).
    pub dir: String,
}

/// The RDMA devices' PCI functions and the GPUs (display or 3D controllers of NVIDIA and AMD).
pub fn pci_functions(src: &Source, devices: &[RdmaDevice]) -> Vec<PciFunction> {
    let mut funcs: Vec<PciFunction> = devices
        .iter()
        .map(|d| PciFunction {
            label: d.label(),
            device: d.name.clone(),
            pci: d.pci.clone(),
            dir: format!("sys/class/infiniband/{}/device", d.name),
        })
        .collect();
    for f in src.list("sys/bus/pci/devices") {
        let p = format!("sys/bus/pci/devices/{f}");
        let class = src.read(&format!("{p}/class")).unwrap_or_default();
        let vendor = src.read(&format!("{p}/vendor")).unwrap_or_default();
        if host::pci::gpu_vendor(&class, &vendor).is_some() {
            funcs.push(PciFunction {
                label: format!("GPU {f}"),
                device: "gpu".into(),
                pci: Some(f),
                dir: p,
            });
        }
    }
    funcs
}

/// A PCIe link: its speed (GT/s) and width now and at most.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieLink {
    /// GT/s now (`None`: sysfs says `Unknown`, a link down).
    pub speed: Option<f64>,
    /// GT/s at most.
    pub max_speed: Option<f64>,
    /// Lanes now.
    pub width: Option<u32>,
    /// Lanes at most.
    pub max_width: Option<u32>,
    /// The four files as sysfs words them (`8.0 GT/s PCIe`, …): speed, max speed, width,
    /// max width.
    pub text: [String; 4],
}

impl PcieLink {
    /// Slower or narrower than the function can do.
    pub fn degraded(&self) -> bool {
        let below = |a: Option<f64>, b: Option<f64>| a.zip(b).is_some_and(|(a, b)| a < b);
        below(self.speed, self.max_speed)
            || below(self.width.map(f64::from), self.max_width.map(f64::from))
    }
}

/// The link of the PCI function in sysfs folder `dir`; `None` without one (a virtual device).
pub fn pcie_link(src: &Source, dir: &str) -> Option<PcieLink> {
    let r = |f: &str| src.read(&format!("{dir}/{f}"));
    let text = [
        r("current_link_speed")?,
        r("max_link_speed")?,
        r("current_link_width")?,
        r("max_link_width")?,
    ];
    Some(PcieLink {
        speed: gts(&text[0]),
        max_speed: gts(&text[1]),
        width: text[2].parse().ok(),
        max_width: text[3].parse().ok(),
        text,
    })
}

/// One AER file's count since boot.
#[derive(Debug, Clone, PartialEq)]
pub struct AerTotal {
    /// `fatal`, `nonfatal` or `correctable` (the file is `aer_dev_<kind>`).
    pub kind: &'static str,
    /// The file's total line (`TOTAL_ERR_COR`).
    pub total_key: &'static str,
    /// Its total.
    pub n: u64,
    /// The lines of its counters that are not 0 (`RxErr 12`).
    pub named: Vec<String>,
}

/// The AER error counts since boot of the PCI function in `dir`, for each file the kernel
/// has.
pub fn aer_totals(src: &Source, dir: &str) -> Vec<AerTotal> {
    [
        ("fatal", "TOTAL_ERR_FATAL"),
        ("nonfatal", "TOTAL_ERR_NONFATAL"),
        ("correctable", "TOTAL_ERR_COR"),
    ]
    .into_iter()
    .filter_map(|(kind, total_key)| {
        let text = src.read(&format!("{dir}/aer_dev_{kind}"))?;
        let n = text.lines().find_map(|l| l.strip_prefix(total_key)?.trim().parse().ok())?;
        let named = text
            .lines()
            .filter(|l| !l.starts_with("TOTAL_"))
            .filter(|l| l.split_whitespace().last().is_some_and(|v| v != "0"))
            .map(str::to_string)
            .collect();
        Some(AerTotal { kind, total_key, n, named })
    })
    .collect()
}

/// Seconds since boot (`proc/uptime`), where the host says.
fn uptime(src: &Source) -> Option<f64> {
    src.read("proc/uptime")
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .filter(|u| *u > 0.0)
}

/// `, 0.62 an hour since boot` for a count since boot; empty without the uptime.
fn since_boot(n: u64, uptime: Option<f64>) -> String {
    uptime.map(|u| format!(", {:.2} an hour since boot", n as f64 * 3600.0 / u)).unwrap_or_default()
}

/// A PCIe function's payload sizes from its config space: (Max_Payload_Size supported,
/// Max_Payload_Size set, Max_Read_Request_Size set), in bytes (PCIe capability: Device
/// Capabilities bits 2:0, Device Control bits 7:5 and 14:12, each 128 << value).
pub fn payload_sizes(config: &[u8]) -> Option<(u32, u32, u32)> {
    let u16_at = |o: usize| Some(u16::from_le_bytes([*config.get(o)?, *config.get(o + 1)?]));
    // Status bit 4: a capabilities list.
    if u16_at(0x06)? & 0x10 == 0 {
        return None;
    }
    let mut ptr = usize::from(*config.get(0x34)? & 0xfc);
    for _ in 0..48 {
        if ptr < 0x40 {
            return None;
        }
        let (id, next) = (*config.get(ptr)?, *config.get(ptr + 1)?);
        if id == 0x10 {
            let cap = u16_at(ptr + 4)?;
            let ctl = u16_at(ptr + 8)?;
            let size = |v: u16| 128u32 << (v & 7).min(5);
            return Some((size(cap), size(ctl >> 5), size(ctl >> 12)));
        }
        ptr = usize::from(next & 0xfc);
    }
    None
}

/// The ACS Control register of a function from its config space (the extended capability
/// 0x000D past offset 0x100, so the whole 4 KiB: root reads it, others see 64 bytes).
pub fn acs_control(config: &[u8]) -> Option<u16> {
    let u32_at = |o: usize| {
        Some(u32::from_le_bytes([
            *config.get(o)?,
            *config.get(o + 1)?,
            *config.get(o + 2)?,
            *config.get(o + 3)?,
        ]))
    };
    let mut ptr = 0x100;
    for _ in 0..64 {
        let h = u32_at(ptr)?;
        if h == 0 || h == u32::MAX {
            return None;
        }
        if h & 0xffff == 0x000d {
            return Some(u16::from_le_bytes([*config.get(ptr + 6)?, *config.get(ptr + 7)?]));
        }
        ptr = (h >> 20) as usize & 0xffc;
        if ptr < 0x100 {
            return None;
        }
    }
    None
}

/// Each PCI function's place in the hierarchy: BDF → the BDFs from its root port down to
/// itself, from `ls -l /sys/bus/pci/devices` (the links into `/sys/devices/pci…`; recorded
/// as `cmd/pci-devices`, or written by hand).
pub fn pci_paths(src: &Source) -> std::collections::BTreeMap<String, Vec<String>> {
    let text = src.command("pci-devices", &["ls", "-l", "/sys/bus/pci/devices"]);
    text.iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| {
            let (head, target) = l.split_once(" -> ")?;
            let name = head.split_whitespace().last()?.to_string();
            let path: Vec<String> =
                target.split('/').filter(|c| host::pci::is_bdf(c)).map(str::to_string).collect();
            path.last().is_some_and(|p| *p == name).then_some((name, path))
        })
        .collect()
}

/// ACS redirecting peer-to-peer traffic between an RDMA NIC and a GPU under one PCIe switch:
/// each bridge below their common ancestor whose ACS Control has P2P Request or Completion
/// Redirect on sends GPUDirect RDMA's traffic up to the root complex (and its IOMMU).
pub fn acs(src: &Source, devices: &[RdmaDevice], out: &mut Vec<Finding>) {
    let funcs = pci_functions(src, devices);
    let gpus: Vec<&PciFunction> = funcs.iter().filter(|f| f.device == "gpu").collect();
    if gpus.is_empty() {
        return;
    }
    let paths = pci_paths(src);
    let mut seen: Vec<String> = Vec::new();
    for nic in funcs.iter().filter(|f| f.device != "gpu") {
        let Some(np) = nic.pci.as_ref().and_then(|p| paths.get(p)) else { continue };
        for gpu in &gpus {
            let Some(gp) = gpu.pci.as_ref().and_then(|p| paths.get(p)) else { continue };
            let common = np.iter().zip(gp).take_while(|(a, b)| a == b).count();
            if common == 0 {
                continue; // under different root ports: P2P crosses the root complex anyway
            }
            // The bridges each side enters the common switch through, and below.
            let below: Vec<&String> =
                np[common..np.len() - 1].iter().chain(&gp[common..gp.len() - 1]).collect();
            for b in below {
                if seen.contains(b) {
                    continue;
                }
                let cfg = format!("sys/bus/pci/devices/{b}/config");
                let Some(ctl) = src.read_bytes(&cfg).as_deref().and_then(acs_control) else {
                    continue;
                };
                if ctl & 0b1100 == 0 {
                    continue;
                }
                seen.push(b.clone());
                let on: Vec<&str> = [(2, "P2P Request Redirect"), (3, "P2P Completion Redirect")]
                    .iter()
                    .filter(|(bit, _)| ctl & (1 << bit) != 0)
                    .map(|(_, n)| *n)
                    .collect();
                out.push(Finding {
                    severity: Severity::Warning,
                    kind: "acs-redirect".into(),
                    component: format!("PCIe bridge {b}"),
                    seen: format!(
                        "ACS {} on, on the path between {} and GPU {}",
                        on.join(" and "),
                        nic.label,
                        gpu.pci.as_deref().unwrap_or("?")
                    ),
                    why: "the switch sends every peer-to-peer request up to the root complex instead of across to the GPU: GPUDirect RDMA loses most of its bandwidth, or fails where the IOMMU does not map the peer".into(),
                    fix: format!("setpci -s {b} ECAP_ACS+0x6.w=0000 (until reboot), or pci=disable_acs_redir={b} on the kernel command line, or ACS off in the BIOS"),
                    evidence: vec![format!("{cfg}: ACS Control 0x{ctl:04x}")],
                });
            }
        }
    }
}

/// The PCIe links and AER counters of the RDMA devices and GPUs.
pub fn pcie(src: &Source, devices: &[RdmaDevice], out: &mut Vec<Finding>) {
    let uptime = uptime(src);
    for PciFunction { label, device, dir: dev, .. } in pci_functions(src, devices) {
        // Config space (its first 64 bytes for anyone; the capabilities need root).
        if device != "gpu"
            && let Some((mps_cap, mps, mrrs)) =
                src.read_bytes(&format!("{dev}/config")).and_then(|c| payload_sizes(&c))
            && mrrs < 4096
        {
            out.push(Finding {
                severity: Severity::Info,
                kind: "pcie-mrrs".into(),
                component: label.clone(),
                seen: format!("MaxReadReq {mrrs} bytes (MaxPayload {mps} of {mps_cap})"),
                why: "the NIC fetches what it sends from host memory in reads of at most MaxReadReq bytes: small ones cost PCIe bandwidth on large messages; NVIDIA's guidance for ConnectX is 4096".into(),
                fix: "setpci -s <its address> CAP_EXP+8.w=5000:7000 (MaxReadReq 4096; not kept across reboots)".into(),
                evidence: vec![format!("{dev}/config: PCIe Device Control MaxReadReq {mrrs}, MaxPayload {mps}")],
            });
        }
        if let Some(k) = pcie_link(src, &dev)
            && k.degraded()
        {
            let [cs, ms, cw, mw] = &k.text;
            out.push(Finding {
                severity: Severity::Error,
                kind: "pcie-link".into(),
                component: label.clone(),
                seen: format!("PCIe link at {cs} x{cw}, capable of {ms} x{mw}"),
                why: "the link trained below the device's capability: every byte the NIC moves to or from memory (or the GPU) is capped at the link's bandwidth".into(),
                fix: "reseat the card or its riser; check the slot's width and the BIOS's bifurcation and link-speed settings; `lspci -vv` shows LnkCap/LnkSta".into(),
                evidence: vec![
                    format!("{dev}/current_link_speed = {cs}"),
                    format!("{dev}/max_link_speed = {ms}"),
                    format!("{dev}/current_link_width = {cw}"),
                    format!("{dev}/max_link_width = {mw}"),
                ],
            });
        }
        for AerTotal { kind, total_key, n, named } in aer_totals(src, &dev) {
            if n == 0 {
                continue;
            }
            let sev = if kind == "correctable" { Severity::Warning } else { Severity::Error };
            out.push(Finding {
                severity: sev,
                kind: "pcie-aer".into(),
                component: label.clone(),
                seen: format!("{n} {kind} PCIe errors{} ({})", since_boot(n, uptime), named.join(", ")),
                why: if sev == Severity::Error {
                    "uncorrectable PCIe errors lose transactions: the device may have been reset, and RDMA traffic through it failed".into()
                } else {
                    "corrected PCIe errors are link-level replays: a rising rate costs bandwidth and precedes uncorrectable ones".into()
                },
                fix: "reseat or replace the card or its riser if the count keeps rising; the kernel log's AER lines name the error".into(),
                evidence: vec![format!("{dev}/aer_dev_{kind}: {total_key} {n}")],
            });
        }
    }
}

/// The most of `conf/all/KEY` and `conf/NETDEV/KEY`: what the kernel applies for
/// rp_filter, arp_ignore and arp_announce.
fn conf(src: &Source, nd: &str, key: &str) -> Option<(u64, String)> {
    let all = src.read_u64(&format!("proc/sys/net/ipv4/conf/all/{key}"));
    let one = src.read_u64(&format!("proc/sys/net/ipv4/conf/{nd}/{key}"));
    let v = all.max(one)?;
    Some((
        v,
        format!("proc/sys/net/ipv4/conf/all/{key} = {}, conf/{nd}/{key} = {}", fmt(all), fmt(one)),
    ))
}

fn fmt(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// The netdevs under the RDMA devices: MTU, RoCE v2 GIDs, IRQ placement, and with several
/// RDMA netdevs the settings that keep each answering and sending on its own.
pub fn netdevs(src: &Source, devices: &[RdmaDevice], out: &mut Vec<Finding>) {
    for d in devices {
        for (port, ll, nd) in &d.ports {
            let roce = *ll == LinkLayer::Ethernet;
            if let Some(nd) = nd
                && roce
                && let Some(mtu) = src.read_u64(&format!("sys/class/net/{nd}/mtu"))
                && let active = host::active_mtu_for(mtu.min(u64::from(u32::MAX)) as u32)
                && active.is_none_or(|a| a < 4096)
            {
                let active = active.map_or("none".to_string(), |a| a.to_string());
                out.push(Finding {
                    severity: Severity::Info,
                    kind: "roce-mtu".into(),
                    component: format!("{} port {port} ({nd})", d.name),
                    seen: format!("netdev MTU {mtu}: RoCE active MTU {active}"),
                    why: "RoCE packets carry at most the active MTU: below 4096 a large message takes more packets, headers and completions (the whole path, switches included, must carry the jumbo frames)".into(),
                    fix: format!("ip link set {nd} mtu 9000 (and the switch ports)"),
                    evidence: vec![format!("sys/class/net/{nd}/mtu = {mtu}")],
                });
            }
            if roce {
                let base = format!("sys/class/infiniband/{}/ports/{port}", d.name);
                let types: Vec<String> = src
                    .list(&format!("{base}/gid_attrs/types"))
                    .into_iter()
                    .filter_map(|i| src.read(&format!("{base}/gid_attrs/types/{i}")))
                    .collect();
                if !types.is_empty() && !types.iter().any(|t| t.eq_ignore_ascii_case("RoCE v2")) {
                    out.push(Finding {
                        severity: Severity::Error,
                        kind: "roce-v2-gid".into(),
                        component: format!("{} port {port}", d.name),
                        seen: format!("no RoCE v2 GID among {} GIDs ({})", types.len(), types[0]),
                        why: "RoCE v2 (routable, UDP port 4791) needs a RoCE v2 GID: without one only RoCE v1 works, and not across an L3 fabric".into(),
                        fix: "give the netdev an IP address (the kernel adds its RoCE v2 GIDs); check `rdma link` and the netdev's state".into(),
                        evidence: vec![format!("{base}/gid_attrs/types/*: {}", types.join(", "))],
                    });
                }
            }
        }
        // IRQs off the NIC's NUMA-local CPUs.
        if d.pci.is_some() {
            let dev = format!("sys/class/infiniband/{}/device", d.name);
            if let Some(local) = src.read(&format!("{dev}/local_cpulist")) {
                let local = cpulist(&local);
                let mut far = Vec::new();
                let irqs = src.list(&format!("{dev}/msi_irqs"));
                for irq in &irqs {
                    if let Some(aff) = src.read(&format!("proc/irq/{irq}/smp_affinity_list")) {
                        let cpus = cpulist(&aff);
                        if !cpus.is_empty() && !cpus.iter().any(|c| local.contains(c)) {
                            far.push(format!("proc/irq/{irq}/smp_affinity_list = {aff}"));
                        }
                    }
                }
                if !far.is_empty() {
                    let numa = src.read(&format!("{dev}/numa_node")).unwrap_or_else(|| "?".into());
                    let mut ev = vec![format!(
                        "{dev}/local_cpulist = {}",
                        src.read(&format!("{dev}/local_cpulist")).unwrap_or_default()
                    )];
                    ev.extend(far.iter().take(4).cloned());
                    out.push(Finding {
                        severity: Severity::Warning,
                        kind: "irq-affinity".into(),
                        component: d.label(),
                        seen: format!("{} of {} IRQs on CPUs of another NUMA node (the NIC's is {numa})", far.len(), irqs.len()),
                        why: "a completion interrupt handled across the socket interconnect adds latency and memory traffic to every event-driven completion".into(),
                        fix: format!("pin its IRQs to CPUs of node {numa} (set_irq_affinity_cpulist.sh, or stop irqbalance and write proc/irq/N/smp_affinity_list)"),
                        evidence: ev,
                    });
                }
            }
        }
    }
    let rdma_netdevs = rdma_netdevs(devices);
    if rdma_netdevs.len() < 2 {
        return;
    }
    for (nd, _, _) in &rdma_netdevs {
        if let Some((v, ev)) = conf(src, nd, "rp_filter")
            && v == 1
        {
            out.push(Finding {
                severity: Severity::Warning,
                kind: "rp-filter".into(),
                component: nd.clone(),
                seen: "strict reverse-path filtering on a host with several RDMA netdevs".into(),
                why: "a packet that arrives on one NIC for an address the routing table would reach through another is dropped: RoCE traffic and its ARP fail on some rails".into(),
                fix: format!("sysctl -w net.ipv4.conf.{nd}.rp_filter=2 (loose) and net.ipv4.conf.all.rp_filter=2"),
                evidence: vec![ev],
            });
        }
        if let Some((v, ev)) = conf(src, nd, "arp_ignore")
            && v == 0
        {
            out.push(Finding {
                severity: Severity::Warning,
                kind: "arp-ignore".into(),
                component: nd.clone(),
                seen: "arp_ignore 0: every NIC answers ARP for every local address".into(),
                why: "with several NICs on one subnet a peer learns the wrong NIC's MAC for an address: RoCE traffic for one rail arrives on another".into(),
                fix: format!("sysctl -w net.ipv4.conf.{nd}.arp_ignore=1"),
                evidence: vec![ev],
            });
        }
        if let Some((v, ev)) = conf(src, nd, "arp_announce")
            && v != 2
        {
            out.push(Finding {
                severity: Severity::Warning,
                kind: "arp-announce".into(),
                component: nd.clone(),
                seen: format!("arp_announce {v}: ARP requests may carry another NIC's address"),
                why: "peers then map that address to this NIC's MAC: traffic for one rail lands on another".into(),
                fix: format!("sysctl -w net.ipv4.conf.{nd}.arp_announce=2"),
                evidence: vec![ev],
            });
        }
    }
}

/// The findings of one RDMA netdev's physical layer: FEC off at PAM4 speeds and its
/// uncorrectable blocks, the PHY's error counters, and the cable module's temperature,
/// receive power and power mode.
fn physical_layer(
    phy: &crate::phy::Phy,
    src: &Source,
    dev: &str,
    nd: &str,
    uptime: Option<f64>,
    out: &mut Vec<Finding>,
) {
    let component = format!("{dev} ({nd})");
    let speed = src.read_u64(&format!("sys/class/net/{nd}/speed"));
    if let Some(active) = &phy.fec
        && speed.is_some_and(|s| s >= 50_000 && s < u64::from(u32::MAX))
        && matches!(active.to_ascii_lowercase().as_str(), "off" | "none")
    {
        out.push(Finding {
            severity: Severity::Error,
            kind: "fec-off".into(),
            component: component.clone(),
            seen: format!("FEC {active} at {} Gb/s", speed.unwrap_or(0) / 1000),
            why: "links of 50 Gb/s per lane and up (PAM4) need RS-FEC: without it bit errors reach the packets and RoCE retransmits (or the switch port disagrees and the link flaps)".into(),
            fix: format!("ethtool --set-fec {nd} encoding rs (the switch port the same)"),
            evidence: vec![format!("ethtool --show-fec {nd}: Active FEC encoding: {active}"), format!("sys/class/net/{nd}/speed = {}", speed.unwrap_or(0))],
        });
    }
    if let Some(n) = phy.fec_uncorrectable.filter(|n| *n > 0) {
        out.push(Finding {
            severity: Severity::Warning,
            kind: "fec-uncorrectable".into(),
            component: component.clone(),
            seen: format!("{n} FEC blocks uncorrectable{}{}", since_boot(n, uptime), phy.fec_corrected.map(|c| format!(" ({c} corrected)")).unwrap_or_default()),
            why: "a block FEC could not correct is a frame lost on the wire: RoCE retransmits it (go-back-N), and a rising count precedes the link's failure".into(),
            fix: "clean or replace the cable or optic; compare the switch port's FEC counters for the same link".into(),
            evidence: vec![format!("ethtool -I --show-fec {nd}: uncorrectable_blocks: {n}")],
        });
    }
    for (key, n) in &phy.counters {
        let Some((_, kind, why)) = crate::phy::PHY_COUNTERS.iter().find(|c| c.0 == *key) else {
            continue;
        };
        if *n > 0 {
            out.push(Finding {
                severity: Severity::Warning,
                kind: (*kind).into(),
                component: component.clone(),
                seen: format!("{key} {n}{}", since_boot(*n, uptime)),
                why: (*why).into(),
                fix: "clean or replace the cable or optic; check the switch port's counters for the same link".into(),
                evidence: vec![format!("ethtool -S {nd}: {key}: {n}")],
            });
        }
    }
    // The module's temperature against its own thresholds (70 °C where it gives none).
    if let Some(t) = phy.module_temp {
        let warn = phy.module_temp_warn.unwrap_or(70.0);
        let alarm = phy.module_temp_alarm.unwrap_or(f64::INFINITY);
        if t >= warn {
            out.push(Finding {
                severity: if t >= alarm { Severity::Error } else { Severity::Warning },
                kind: "module-temperature".into(),
                component: component.clone(),
                seen: format!("cable module at {t:.1} °C (warning at {warn:.1} °C{})", if alarm.is_finite() { format!(", alarm at {alarm:.1} °C") } else { String::new() }),
                why: "a hot optic's laser degrades: bit errors rise, then the module shuts the link down".into(),
                fix: "check the airflow and fan speed at the NIC; replace the module if it stays hot".into(),
                evidence: vec![format!("ethtool -m {nd}: Module temperature : {t:.2} degrees C")],
            });
        }
    }
    // Receive power per lane against the module's own low thresholds.
    if let (Some(warn), alarm) = phy.rx_power_low {
        let low: Vec<(usize, f64)> =
            phy.rx_power_mw.iter().copied().enumerate().filter(|(_, p)| *p < warn).collect();
        if !low.is_empty() {
            let dbm = |mw: f64| 10.0 * mw.log10();
            let under_alarm = alarm.is_some_and(|a| low.iter().any(|(_, p)| *p < a));
            out.push(Finding {
                severity: if under_alarm { Severity::Error } else { Severity::Warning },
                kind: "module-rx-power".into(),
                component: component.clone(),
                seen: format!(
                    "receive power low on {} of {} lanes: {} (module's low warning {:.2} dBm{})",
                    low.len(),
                    phy.rx_power_mw.len(),
                    low.iter().map(|(i, p)| format!("lane {} {:.2} dBm", i + 1, dbm(*p))).collect::<Vec<_>>().join(", "),
                    dbm(warn),
                    alarm.map(|a| format!(", alarm {:.2} dBm", dbm(a))).unwrap_or_default()
                ),
                why: "too little light reaches the receiver: a dirty connector, a bent or broken fibre, or the far end's failing laser; bit errors and FEC's uncorrectable blocks follow".into(),
                fix: "clean both connectors (and the switch port's), reseat the optic; replace the cable if it stays low; compare the far end's transmit power".into(),
                evidence: low.iter().map(|(i, p)| format!("ethtool -m {nd}: Rcvr signal avg optical power(Channel {}) : {p:.4} mW", i + 1)).collect(),
            });
        }
    }
    if let Some(mode) = phy.power_mode.as_deref().filter(|m| *m == "low") {
        out.push(Finding {
            severity: Severity::Error,
            kind: "module-power-low".into(),
            component,
            seen: format!("the cable module is in {mode} power mode"),
            why: "a module in low power mode keeps its laser off: the link cannot come up (or the host's power policy put it there while the port was down)".into(),
            fix: format!("ethtool --set-module {nd} power-mode-policy high (or auto, with the port up)"),
            evidence: vec![format!("ethtool --show-module {nd}: power-mode: {mode}")],
        });
    }
}

/// Huge pages reserved for RDMA buffers (DPDK, NCCL, UCX and MPI use them where given):
/// every one of a size taken, or reserved only on NUMA nodes the RDMA devices are not on.
pub fn hugepages(src: &Source, devices: &[RdmaDevice], out: &mut Vec<Finding>) {
    let base = "sys/kernel/mm/hugepages";
    let nic_nodes: Vec<String> = devices
        .iter()
        .filter_map(|d| src.read(&format!("sys/class/infiniband/{}/device/numa_node", d.name)))
        .filter(|n| n != "-1")
        .collect();
    for size in src.list(base) {
        let Some(n) = src.read_u64(&format!("{base}/{size}/nr_hugepages")).filter(|n| *n > 0)
        else {
            continue;
        };
        let label = size.trim_start_matches("hugepages-");
        if let Some(free) = src.read_u64(&format!("{base}/{size}/free_hugepages"))
            && free == 0
        {
            out.push(Finding {
                severity: Severity::Warning,
                kind: "hugepages".into(),
                component: "memory".into(),
                seen: format!("all {n} huge pages of {label} are in use"),
                why: "a process that asks for huge pages now fails or falls back to 4 KiB pages: many more page-table and IOTLB entries for the NIC to walk when it registers and touches large buffers".into(),
                fix: format!("echo {} > /sys/kernel/mm/hugepages/{size}/nr_hugepages (or hugepages= on the kernel command line)", n * 2),
                evidence: vec![format!("{base}/{size}/nr_hugepages = {n}"), format!("{base}/{size}/free_hugepages = 0")],
            });
        }
        // Where they are: per NUMA node.
        let per_node: Vec<(String, u64)> = src
            .list("sys/devices/system/node")
            .into_iter()
            .filter_map(|node| {
                let id = node.strip_prefix("node")?.to_string();
                let k = src.read_u64(&format!(
                    "sys/devices/system/node/{node}/hugepages/{size}/nr_hugepages"
                ))?;
                Some((id, k))
            })
            .collect();
        let on_nic_node = per_node.iter().any(|(id, k)| *k > 0 && nic_nodes.contains(id));
        if !nic_nodes.is_empty() && per_node.len() > 1 && !on_nic_node {
            let mut nodes = nic_nodes.clone();
            nodes.sort();
            nodes.dedup();
            out.push(Finding {
                severity: Severity::Info,
                kind: "hugepages".into(),
                component: "memory".into(),
                seen: format!(
                    "huge pages of {label} only on node {} (the RDMA devices are on node {})",
                    per_node
                        .iter()
                        .filter(|(_, k)| *k > 0)
                        .map(|(id, k)| format!("{id} ({k})"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    nodes.join(", ")
                ),
                why:
                    "a buffer in them is far from the NIC: every DMA crosses the inter-socket link"
                        .into(),
                fix: format!(
                    "echo N > /sys/devices/system/node/node{}/hugepages/{size}/nr_hugepages",
                    nodes[0]
                ),
                evidence: per_node
                    .iter()
                    .map(|(id, k)| {
                        format!(
                            "sys/devices/system/node/node{id}/hugepages/{size}/nr_hugepages = {k}"
                        )
                    })
                    .collect(),
            });
        }
    }
}

/// The RX and TX rings of `nd` from `ethtool -g` (recorded as `cmd/ethtool-g-ND`): (ring,
/// its size now, its maximum), for each ring the driver gives both of.
pub fn rings(src: &Source, nd: &str) -> Vec<(&'static str, u64, u64)> {
    let Some(g) = src.command(&format!("ethtool-g-{nd}"), &["ethtool", "-g", nd]) else {
        return Vec::new();
    };
    // ethtool's netlink/rings.c: "Pre-set maximums:" and "Current hardware settings:", each
    // followed by "RX:\t\t8192"-style lines.
    let section = |title: &str| -> Vec<(String, u64)> {
        g.split(title)
            .nth(1)
            .map(|rest| {
                rest.lines()
                    .skip(1)
                    .take_while(|l| !l.trim_end().ends_with(':') || l.contains('\t'))
                    .filter_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        Some((k.trim().to_string(), v.trim().parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (max, cur) = (section("Pre-set maximums:"), section("Current hardware settings:"));
    ["RX", "TX"]
        .into_iter()
        .filter_map(|k| {
            let m = max.iter().find(|(n, _)| n == k)?.1;
            let c = cur.iter().find(|(n, _)| n == k)?.1;
            Some((k, c, m))
        })
        .collect()
}

/// The NIC side of the RoCE netdevs: ECN on the mlx5 priorities (sysfs `ecn/`), PFC
/// (`dcb`), ring sizes and the physical layer (`ethtool`), source routing, the IOMMU,
/// irqbalance, and the firmware health reporters (`devlink health`).
pub fn nic(src: &Source, devices: &[RdmaDevice], out: &mut Vec<Finding>) {
    let uptime = uptime(src);
    let netdevs: Vec<(String, String)> =
        rdma_netdevs(devices).into_iter().filter(|n| n.2).map(|(n, d, _)| (n, d)).collect();
    for (nd, dev) in &netdevs {
        // mlx5: ecn/roce_np/enable/<prio> (the notification point: marks CNPs back) and
        // ecn/roce_rp/enable/<prio> (the reaction point: slows down on CNPs).
        for side in ["roce_np", "roce_rp"] {
            let base = format!("sys/class/net/{nd}/ecn/{side}/enable");
            let prios: Vec<(String, String)> = src
                .list(&base)
                .into_iter()
                .filter_map(|p| Some((p.clone(), src.read(&format!("{base}/{p}"))?)))
                .collect();
            if !prios.is_empty() && prios.iter().all(|(_, v)| v == "0") {
                out.push(Finding {
                    severity: Severity::Warning,
                    kind: "ecn-off".into(),
                    component: format!("{dev} ({nd})"),
                    seen: format!("ECN ({side}) disabled on all {} priorities", prios.len()),
                    why: "without ECN (DCQCN) the NIC never slows down for a congested switch: PFC pauses spread and incast collapses throughput".into(),
                    fix: format!("for p in 0 1 2 3 4 5 6 7; do echo 1 > /sys/class/net/{nd}/ecn/{side}/enable/$p; done"),
                    evidence: vec![format!("{base}/*: {}", prios.iter().map(|(p, v)| format!("{p}={v}")).collect::<Vec<_>>().join(" "))],
                });
            }
        }
        // PFC per priority (`dcb pfc show`): lossless RoCE needs it on RoCE's priority;
        // without it and without ECN, nothing keeps a congested switch from dropping RoCE.
        let mut pfc_on: Option<Vec<String>> = None;
        if let Some(pfc) = src.command(&format!("dcb-pfc-{nd}"), &["dcb", "pfc", "show", "dev", nd])
            && let Some(line) = pfc.lines().find_map(|l| l.trim().strip_prefix("prio-pfc"))
        {
            let on: Vec<&str> = line
                .split_whitespace()
                .filter_map(|kv| kv.split_once(':').filter(|(_, v)| *v == "on").map(|(p, _)| p))
                .collect();
            pfc_on = Some(on.iter().map(|p| (*p).to_string()).collect());
            if on.is_empty() {
                let ecn_off = out
                    .iter()
                    .any(|f| f.kind == "ecn-off" && f.component == format!("{dev} ({nd})"));
                out.push(Finding {
                    severity: if ecn_off { Severity::Warning } else { Severity::Info },
                    kind: "pfc-off".into(),
                    component: format!("{dev} ({nd})"),
                    seen: format!("PFC off on every priority{}", if ecn_off { ", and ECN off too" } else { "" }),
                    why: "RoCE runs lossy here: a congested switch drops packets and RoCE retransmits (go-back-N); that is a design choice only with ECN (DCQCN) on, and the switch must agree".into(),
                    fix: format!("for lossless RoCE: dcb pfc set dev {nd} prio-pfc 3:on (RoCE's priority; the switch ports the same); for lossy RoCE keep ECN on"),
                    evidence: vec![format!("dcb pfc show dev {nd}: prio-pfc{line}")],
                });
            }
        }
        // DSCP trust: RoCE v2 packets are untagged IP; a port that classifies by PCP (the
        // default, until a DSCP mapping exists: `dcb app`'s dscp-prio entries switch mlx5 to
        // DSCP trust) puts them all in priority 0, whatever priority PFC protects.
        if let Some(pfc_on) = pfc_on
            && !pfc_on.is_empty()
            && let Some(app) =
                src.command(&format!("dcb-app-{nd}"), &["dcb", "app", "show", "dev", nd])
        {
            let mapped: Vec<&str> = app
                .lines()
                .filter_map(|l| l.trim().strip_prefix("dscp-prio"))
                .flat_map(str::split_whitespace)
                .filter_map(|kv| kv.rsplit_once(':').map(|(_, p)| p))
                .collect();
            let unmapped: Vec<&String> =
                pfc_on.iter().filter(|p| !mapped.contains(&p.as_str())).collect();
            if !unmapped.is_empty() {
                let list = unmapped.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ");
                out.push(Finding {
                    severity: Severity::Warning,
                    kind: "dscp-trust".into(),
                    component: format!("{dev} ({nd})"),
                    seen: if mapped.is_empty() {
                        format!("PFC on priority {list}, but no DSCP is mapped to a priority: the port trusts PCP")
                    } else {
                        format!("PFC on priority {list}, but no DSCP is mapped to it")
                    },
                    why: "RoCE v2 is untagged IP: without a DSCP-to-priority map its packets land in priority 0, which PFC does not protect, so they are dropped under congestion though PFC is on".into(),
                    fix: format!("dcb app add dev {nd} dscp-prio 26:{} (RoCE's DSCP; mlnx_qos -i {nd} --trust dscp on MLNX_OFED), the switch the same", unmapped[0]),
                    evidence: vec![format!("dcb app show dev {nd}: {}", if app.trim().is_empty() { "(nothing)" } else { app.trim() })],
                });
            }
        }
        let phy = crate::phy::read(src, nd);
        // Ring sizes (`ethtool -g`): what each ring is set to against its maximum.
        let small: Vec<String> = rings(src, nd)
            .iter()
            .filter(|(_, cur, max)| cur < max)
            .map(|(k, c, m)| format!("{k} {c} of {m}"))
            .collect();
        if !small.is_empty() {
            out.push(Finding {
                severity: Severity::Info,
                kind: "ring-size".into(),
                component: format!("{dev} ({nd})"),
                seen: format!("rings below their maximum: {}", small.join(", ")),
                why: "the netdev's rings carry its IP traffic (RDMA goes to the QPs, not through them): small rings drop bursts of the TCP beside it — collective bootstrap, storage, the control plane".into(),
                fix: format!("ethtool -G {nd} rx <max> tx <max>"),
                evidence: vec![format!("ethtool -g {nd}: {}", small.join(", "))],
            });
        }
        physical_layer(&phy, src, dev, nd, uptime, out);
    }
    source_routing(src, &netdevs, out);
    for d in devices.iter().filter(|d| d.pci.is_some()) {
        let f = format!("sys/class/infiniband/{}/device/iommu_group/type", d.name);
        if let Some(t) = src.read(&f)
            && t.starts_with("DMA")
        {
            out.push(Finding {
                severity: Severity::Info,
                kind: "iommu-translated".into(),
                component: d.label(),
                seen: format!("the IOMMU translates the device's DMA (domain type {t})"),
                why: "every DMA the NIC does is translated: IOTLB misses cost bandwidth with many memory regions and with GPU peer-to-peer; RDMA hosts usually run the IOMMU in passthrough".into(),
                fix: "add iommu=pt to the kernel command line (and intel_iommu=on / amd_iommu=on where the IOMMU is wanted for VFs)".into(),
                evidence: vec![format!("{f} = {t}")],
            });
        }
    }
    if devices.iter().any(|d| d.pci.is_some())
        && let Some(pids) = src.command("pgrep-irqbalance", &["pgrep", "-x", "irqbalance"])
        && !pids.trim().is_empty()
    {
        out.push(Finding {
            severity: Severity::Warning,
            kind: "irqbalance".into(),
            component: "irq".into(),
            seen: format!("irqbalance is running (pid {})", pids.split_whitespace().next().unwrap_or("?")),
            why: "irqbalance moves IRQs every few seconds: the NIC's completion interrupts leave the CPUs they were pinned to, and `podnet tune`'s placement does not last".into(),
            fix: "systemctl stop irqbalance && systemctl disable irqbalance (or ban the NIC's IRQs in its IRQBALANCE_BANNED_CPULIST)".into(),
            evidence: vec![format!("pgrep -x irqbalance: {}", pids.trim())],
        });
    }
    if devices.iter().any(|d| d.pci.is_some())
        && let Some(text) = src.command("devlink-health.json", &["devlink", "-j", "health", "show"])
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(h) = v.get("health").and_then(|h| h.as_object())
    {
        for (handle, reporters) in h {
            let label = devices
                .iter()
                .find(|d| d.pci.as_deref().is_some_and(|p| handle.contains(p)))
                .map_or(handle.clone(), RdmaDevice::label);
            for r in reporters.as_array().into_iter().flatten() {
                let name = r["reporter"].as_str().unwrap_or("?");
                let state = r["state"].as_str().unwrap_or("?");
                let errors = r["error"].as_u64().unwrap_or(0);
                let recovers = r["recover"].as_u64().unwrap_or(0);
                if state == "healthy" && errors == 0 {
                    continue;
                }
                out.push(Finding {
                    severity: if state == "healthy" { Severity::Warning } else { Severity::Error },
                    kind: "devlink-health".into(),
                    component: label.clone(),
                    seen: format!("health reporter {name}: {state}, {errors} errors, {recovers} recoveries"),
                    why: "the driver's health reporter saw the device fail (fw: firmware errors and asserts; fw_fatal: the firmware stopped; tx/rx: stuck queues) and recovered it, or could not".into(),
                    fix: format!("devlink health diagnose {handle} reporter {name}; devlink health dump show {handle} reporter {name} for the vendor"),
                    evidence: vec![format!("devlink health show: {handle} reporter {name} state {state} error {errors} recover {recovers}")],
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device's PCI address where its uevent says nothing of it (or is missing): from
    /// where its `device` link points, as sysfs lays a PCI function out. doctor's own reader
    /// took it from the uevent alone, and labelled such a device without its PCI function.
    #[test]
    fn a_device_without_a_uevent_still_has_its_pci_address() {
        let tree = tempfile::tempdir().unwrap();
        let sys = tree.path().join("sys");
        let function = sys.join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
        std::fs::create_dir_all(function.join("net/eth2")).unwrap();
        let dev = sys.join("class/infiniband/mlx5_0");
        std::fs::create_dir_all(dev.join("ports/1")).unwrap();
        std::fs::write(dev.join("ports/1/link_layer"), "Ethernet\n").unwrap();
        std::os::unix::fs::symlink(&function, dev.join("device")).unwrap();
        let src = Source::recorded(tree.path()).unwrap();
        let d = rdma_devices(&src);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].pci.as_deref(), Some("0000:3b:00.0"), "{d:?}");
        assert_eq!(d[0].ports, vec![(1, LinkLayer::Ethernet, Some("eth2".to_string()))]);
        assert_eq!(d[0].label(), "mlx5_0 (0000:3b:00.0)");
        // A uevent, where there is one, names it first.
        std::fs::write(function.join("uevent"), "DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:3b:00.1\n")
            .unwrap();
        assert_eq!(rdma_devices(&src)[0].pci.as_deref(), Some("0000:3b:00.1"));
    }

    #[test]
    fn acs_control_comes_from_the_extended_capability_list() {
        // 4 KiB with AER (0x0001) at 0x100 pointing at ACS (0x000d) at 0x148.
        let mut c = vec![0u8; 4096];
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | (2 << 16) | (0x148 << 20)).to_le_bytes());
        c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        c[0x14e..0x150].copy_from_slice(&0x001du16.to_le_bytes());
        assert_eq!(acs_control(&c), Some(0x001d));
        // No ACS in the list; the 64 bytes an unprivileged reader sees; an empty list.
        c[0x148..0x14c].copy_from_slice(&(0x0019u32 | (1 << 16)).to_le_bytes());
        assert_eq!(acs_control(&c), None);
        assert_eq!(acs_control(&c[..64]), None);
        assert_eq!(acs_control(&[0u8; 4096]), None);
    }

    #[test]
    fn payload_sizes_come_from_the_pcie_capability() {
        // A header with a capabilities list (status bit 4) at 0x40: power management (id 1),
        // then the PCIe capability (id 0x10) at 0x60 with DevCap MPS 256 (1), DevCtl MPS
        // 256 (1 << 5) and MRRS 512 (2 << 12).
        let mut c = vec![0u8; 256];
        c[0x06] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = 0x01;
        c[0x41] = 0x60;
        c[0x60] = 0x10;
        c[0x64] = 0x01;
        let ctl: u16 = (1 << 5) | (2 << 12);
        c[0x68..0x6a].copy_from_slice(&ctl.to_le_bytes());
        assert_eq!(payload_sizes(&c), Some((256, 256, 512)));
        // Without the list, or cut short (an unprivileged read gives 64 bytes): none.
        assert_eq!(payload_sizes(&c[..64]), None);
        c[0x06] = 0;
        assert_eq!(payload_sizes(&c), None);
    }

    #[test]
    fn cpulists_read_as_the_kernel_writes_them() {
        assert_eq!(cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(cpulist(""), Vec::<u32>::new());
        assert_eq!(cpulist("5"), vec![5]);
    }
}
