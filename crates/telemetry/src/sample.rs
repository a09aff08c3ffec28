//! One scrape of a host: every RDMA port's attributes and counters, the netdevs under them
//! (statistics, ethtool statistics, PFC per priority), and every source that failed.
//!
//! Sources, under a root that stands for `/sys` (`--sysfs-root`):
//! - `class/infiniband/<dev>/ports/<n>/{counters,hw_counters}/*` and the port attributes;
//! - `class/net/<netdev>/{operstate,mtu,statistics/*}`;
//! - ethtool statistics and DCB PFC data, which sysfs does not hold: on a live host from the
//!   `SIOCETHTOOL` ioctl and `dcb pfc show`; in a recorded tree from the fixture files
//!   `podnet/ethtool/<netdev>` (what `ethtool -S <netdev>` prints) and `podnet/dcb/<netdev>`
//!   (what `dcb pfc show dev <netdev>` prints) — see `docs/metrics.md`.
//!
//! A file that cannot be read, holds `N/A (no PMA)` or no number, or a folder that is missing,
//! becomes a [`SourceError`] naming it; the rest of the scrape goes on.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use host::PortInfo;

/// Where a scrape reads from.
#[derive(Debug, Clone)]
pub struct Roots {
    /// Stands for `/sys`.
    pub sys: PathBuf,
    /// Stands for `/proc` (`net/dev`, for netdevs whose sysfs statistics are missing).
    pub proc: PathBuf,
    /// Ask the kernel for ethtool statistics and run `dcb` when the fixture files are absent
    /// (a live host); off for a recorded tree.
    pub live: bool,
}

impl Roots {
    /// The live host.
    pub fn host() -> Roots {
        Roots { sys: host::default_root(), proc: PathBuf::from("/proc"), live: true }
    }
}

/// A source that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// What kind of source: `counters`, `hw_counters`, `port`, `netdev`, `ethtool`, `dcb`.
    pub source: &'static str,
    /// The device (RDMA device or netdev).
    pub device: String,
    /// The port, for RDMA sources.
    pub port: Option<u8>,
    /// The file or folder, relative to the root.
    pub path: String,
    /// What went wrong.
    pub error: String,
}

/// One RDMA port: what sysfs says of it ([`PortInfo`]) and its counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortSample {
    /// The device (`mlx5_0`).
    pub device: String,
    /// The driver (`mlx5_core`, `rxe`, `bnxt_en`, …) as sysfs names it.
    pub driver: String,
    /// The port: number, state, rate, link layer, netdev, active MTU, GIDs.
    pub info: PortInfo,
    /// `counters/*` (the IB PMA port counters).
    pub counters: BTreeMap<String, u64>,
    /// `hw_counters/*` (the driver's).
    pub hw_counters: BTreeMap<String, u64>,
}

/// PFC of one priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pfc {
    /// PFC enabled for the priority (DCB).
    pub enabled: Option<bool>,
    /// Pause frames received.
    pub rx_pause: Option<u64>,
    /// Pause frames sent.
    pub tx_pause: Option<u64>,
    /// Time paused by the peer, microseconds.
    pub rx_pause_duration_us: Option<u64>,
    /// Time this side paused the peer, microseconds.
    pub tx_pause_duration_us: Option<u64>,
}

/// A netdev under an RDMA port.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetdevSample {
    /// Its name.
    pub name: String,
    /// `operstate` is `up`.
    pub oper_up: Option<bool>,
    /// MTU.
    pub mtu: Option<u32>,
    /// `statistics/*`.
    pub stats: BTreeMap<String, u64>,
    /// ethtool statistics.
    pub ethtool: BTreeMap<String, u64>,
    /// PFC per priority (0–7).
    pub pfc: BTreeMap<u8, Pfc>,
}

/// One scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every RDMA port, by device and port.
    pub ports: Vec<PortSample>,
    /// The netdevs under them, by name.
    pub netdevs: BTreeMap<String, NetdevSample>,
    /// What failed.
    pub errors: Vec<SourceError>,
    /// Sources that did not answer in time, served from an earlier sample (the agent's
    /// [`crate::sampler`]; empty from [`collect`]).
    pub stale: Vec<Stale>,
}

/// A source served from an earlier sample because its reader did not answer in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Stale {
    /// `device` (an RDMA device) or `netdev`.
    pub source: &'static str,
    /// Its name.
    pub device: String,
    /// How old the sample served is, seconds.
    pub age_seconds: f64,
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// Reads a counter file: a decimal number (some drivers pad it, some end it with a newline).
fn parse_counter(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.starts_with("N/A") {
        return Err(format!("not available: {t:?}"));
    }
    t.parse::<u64>().map_err(|_| format!("not a counter: {t:?}"))
}

/// Reads every file of a counter folder.
fn read_counters(
    root: &Path,
    dir: &Path,
    source: &'static str,
    device: &str,
    port: Option<u8>,
    errors: &mut Vec<SourceError>,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let err = |path: &Path, error: String| SourceError {
        source,
        device: device.to_string(),
        port,
        path: rel(root, path),
        error,
    };
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "missing".to_string()
            } else {
                e.to_string()
            };
            errors.push(err(dir, why));
            return out;
        }
    };
    // Every entry is read or named: a folder where a counter should be, or a name that is
    // not UTF-8 (no metric can carry it), is a source error, not silently skipped.
    let mut names: Vec<String> = Vec::new();
    for e in entries.filter_map(|e| e.ok()) {
        match e.file_name().into_string() {
            Ok(n) if e.file_type().is_ok_and(|t| t.is_dir()) => {
                errors.push(err(&dir.join(n), "a folder where a counter file should be".into()))
            }
            Ok(n) => names.push(n),
            Err(raw) => errors.push(err(
                &dir.join(raw.to_string_lossy().as_ref()),
                "a file name that is not UTF-8".into(),
            )),
        }
    }
    names.sort();
    // Each file is opened relative to the folder: a scrape reads thousands of them, and the
    // path walk of an absolute path is most of an open's cost.
    let folder = match fs::File::open(dir) {
        Ok(f) => f,
        Err(e) => {
            errors.push(err(dir, e.to_string()));
            return out;
        }
    };
    for name in names {
        // hw_counters/lifespan is a setting (the cache lifetime in ms), not a counter.
        if name == "lifespan" {
            continue;
        }
        let path = dir.join(&name);
        match read_small_at(&folder, &name) {
            Ok(text) => match parse_counter(&text) {
                Ok(v) => {
                    out.insert(name, v);
                }
                Err(e) => errors.push(err(&path, e)),
            },
            Err(e) => errors.push(err(&path, e.to_string())),
        }
    }
    out
}

/// The most a recorded ethtool or DCB fixture, or `/proc/net/dev`, is read to.
const FILE_MAX: usize = 1 << 20;

/// How counter files are opened: non-blocking, except under the fault hook
/// `PODNET_FAULT_BLOCKING_READS=1` (feature `fault-injection`), which opens them blocking so
/// that a FIFO stands for a sysfs read stalled in firmware — what the sampler's deadline is
/// for, and what a non-blocking flag cannot bound.
fn open_flags() -> libc::c_int {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC;
    #[cfg(feature = "fault-injection")]
    if std::env::var_os("PODNET_FAULT_BLOCKING_READS").is_some_and(|v| v == "1") {
        return flags;
    }
    flags | libc::O_NONBLOCK
}

/// Reads a small file of an open folder: `openat` (non-blocking: a FIFO nobody writes does
/// not hang the scrape), at most a page, `close`.
fn read_small_at(folder: &fs::File, name: &str) -> std::io::Result<String> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let c = std::ffi::CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: `folder` is an open directory and `c` a NUL-terminated name; the result is
    // checked, and a valid descriptor is owned by the File below.
    let fd = unsafe { libc::openat(folder.as_raw_fd(), c.as_ptr(), open_flags()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let f = unsafe { fs::File::from_raw_fd(fd) };
    // A regular file of at most a page: not a FIFO, a device, or an endless file.
    host::read_open_capped(f, host::ATTR_MAX)
}

/// The RDMA devices under `roots` (`class/infiniband/*`), sorted; a name that is not UTF-8
/// (no device has one) is named in `errors`, not read.
pub fn list_devices(roots: &Roots, errors: &mut Vec<SourceError>) -> Vec<String> {
    let class = roots.sys.join("class/infiniband");
    let mut devices = Vec::new();
    for e in fs::read_dir(&class).into_iter().flatten().flatten() {
        match e.file_name().into_string() {
            Ok(name) => devices.push(name),
            Err(name) => errors.push(SourceError {
                source: "port",
                device: name.to_string_lossy().into_owned(),
                port: None,
                path: rel(&roots.sys, &e.path()).replace(char::REPLACEMENT_CHARACTER, "\u{fffd}"),
                error: "a device name that is not UTF-8".into(),
            }),
        }
    }
    devices.sort();
    devices
}

/// The netdevs under `ports`, by name.
pub fn netdevs_of(ports: &[PortSample]) -> std::collections::BTreeSet<String> {
    ports.iter().filter_map(|p| p.info.netdev.clone()).collect()
}

/// Takes one scrape under `roots`, waiting for every source however long it takes (the agent
/// samples with a deadline instead: [`crate::sampler`]). Devices are read in parallel (up to
/// 8 threads): a host with many ports has thousands of counter files.
pub fn collect(roots: &Roots) -> Snapshot {
    let mut snap = Snapshot::default();
    let devices = list_devices(roots, &mut snap.errors);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let per = devices.len().div_ceil(threads).max(1);
    let parts: Vec<(Vec<PortSample>, Vec<SourceError>)> = std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .chunks(per)
            .map(|chunk| {
                s.spawn(move || {
                    let (mut ports, mut errors) = (Vec::new(), Vec::new());
                    for dev in chunk {
                        let (p, e) = read_device(roots, dev);
                        ports.extend(p);
                        errors.extend(e);
                    }
                    (ports, errors)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for (ports, errors) in parts {
        snap.ports.extend(ports);
        snap.errors.extend(errors);
    }
    for nd in netdevs_of(&snap.ports) {
        let (s, errors) = read_netdev(roots, &nd);
        snap.errors.extend(errors);
        snap.netdevs.insert(nd, s);
    }
    snap
}

/// Reads one RDMA device: each port's attributes and counters, and what failed.
pub fn read_device(roots: &Roots, dev: &str) -> (Vec<PortSample>, Vec<SourceError>) {
    let (mut ports, mut errors) = (Vec::new(), Vec::new());
    device(roots, dev, &mut ports, &mut errors);
    (ports, errors)
}

/// Reads one netdev: operstate, MTU, statistics, ethtool statistics, PFC; and what failed.
pub fn read_netdev(roots: &Roots, name: &str) -> (NetdevSample, Vec<SourceError>) {
    let mut errors = Vec::new();
    let s = netdev(roots, name, &mut errors);
    (s, errors)
}

fn device(roots: &Roots, dev: &str, out: &mut Vec<PortSample>, errors: &mut Vec<SourceError>) {
    let root = &roots.sys;
    let ddir = root.join("class/infiniband").join(dev);
    let info = host::rdma_device(root, dev);
    let mut ports: Vec<u8> = match fs::read_dir(ddir.join("ports")) {
        Ok(d) => d
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str().and_then(|n| n.parse().ok());
                if n.is_none() {
                    errors.push(SourceError {
                        source: "port",
                        device: dev.to_string(),
                        port: None,
                        path: rel(root, &e.path()),
                        error: "not a port number".into(),
                    });
                }
                n
            })
            .collect(),
        Err(e) => {
            errors.push(SourceError {
                source: "port",
                device: dev.to_string(),
                port: None,
                path: rel(root, &ddir.join("ports")),
                error: e.to_string(),
            });
            return;
        }
    };
    ports.sort_unstable();
    for port in ports {
        let pdir = ddir.join("ports").join(port.to_string());
        let pinfo = info
            .as_ref()
            .and_then(|i| i.ports.iter().find(|p| p.port == port))
            .cloned()
            .unwrap_or_else(|| PortInfo { port, ..PortInfo::default() });
        // A state host could not read or parse is named, with why.
        let mut name_failure = |file: &str| {
            let path = pdir.join(file);
            let error = match host::read_capped(&path, host::ATTR_MAX) {
                Err(e) => e.to_string(),
                Ok(t) => format!("not a state: {:?}", t.trim()),
            };
            errors.push(SourceError {
                source: "port",
                device: dev.to_string(),
                port: Some(port),
                path: rel(root, &path),
                error,
            });
        };
        if pinfo.state.is_none() {
            name_failure("state");
        }
        if pinfo.phys_state.is_none() {
            name_failure("phys_state");
        }
        let counters =
            read_counters(root, &pdir.join("counters"), "counters", dev, Some(port), errors);
        let hw_counters =
            read_counters(root, &pdir.join("hw_counters"), "hw_counters", dev, Some(port), errors);
        out.push(PortSample {
            device: dev.to_string(),
            driver: info.as_ref().map(|i| i.provider.clone()).unwrap_or_default(),
            info: pinfo,
            counters,
            hw_counters,
        });
    }
}

fn netdev(roots: &Roots, name: &str, errors: &mut Vec<SourceError>) -> NetdevSample {
    let root = &roots.sys;
    let dir = root.join("class/net").join(name);
    let read = |f: &str| {
        host::read_capped(&dir.join(f), host::ATTR_MAX).ok().map(|s| s.trim().to_string())
    };
    let mut errs = Vec::new();
    let mut stats = read_counters(root, &dir.join("statistics"), "netdev", name, None, &mut errs);
    if stats.is_empty() {
        // /proc/net/dev has the main ones.
        if let Some(s) = proc_net_dev(&roots.proc, name) {
            stats = s;
            errs.clear();
        }
    }
    errors.extend(errs);
    let mut s = NetdevSample {
        name: name.to_string(),
        oper_up: read("operstate").map(|o| o == "up"),
        mtu: read("mtu").and_then(|m| m.parse().ok()),
        stats,
        ..Default::default()
    };
    // ethtool statistics: a recorded tree's fixture, else the kernel.
    let fixture = root.join("podnet/ethtool").join(name);
    if fixture.exists() {
        match host::read_capped(&fixture, FILE_MAX) {
            Ok(t) => s.ethtool = parse_ethtool(&t),
            Err(e) => errors.push(SourceError {
                source: "ethtool",
                device: name.into(),
                port: None,
                path: rel(root, &fixture),
                error: e.to_string(),
            }),
        }
    } else if roots.live {
        match crate::ethtool::stats(name) {
            Ok(v) => s.ethtool = v.into_iter().collect(),
            // Drivers without statistics (lo) answer EOPNOTSUPP: nothing to report.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => errors.push(SourceError {
                source: "ethtool",
                device: name.into(),
                port: None,
                path: format!("SIOCETHTOOL {name}"),
                error: e.to_string(),
            }),
        }
    }
    pfc_from_ethtool(&s.ethtool, &mut s.pfc);
    // DCB: a fixture, else `dcb pfc show` on a live host (absent or unsupported: no PFC).
    let dcb = root.join("podnet/dcb").join(name);
    let text = if dcb.exists() {
        host::read_capped(&dcb, FILE_MAX)
            .map_err(|e| {
                errors.push(SourceError {
                    source: "dcb",
                    device: name.into(),
                    port: None,
                    path: rel(root, &dcb),
                    error: e.to_string(),
                })
            })
            .ok()
    } else if roots.live {
        std::process::Command::new("dcb")
            .args(["pfc", "show", "dev", name])
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        None
    };
    if let Some(t) = text {
        pfc_from_dcb(&t, &mut s.pfc);
    }
    s
}

/// The `/proc/net/dev` line of `name`, with the statistics' sysfs names.
fn proc_net_dev(proc: &Path, name: &str) -> Option<BTreeMap<String, u64>> {
    const COLS: [&str; 16] = [
        "rx_bytes",
        "rx_packets",
        "rx_errors",
        "rx_dropped",
        "rx_fifo_errors",
        "rx_frame_errors",
        "rx_compressed",
        "multicast",
        "tx_bytes",
        "tx_packets",
        "tx_errors",
        "tx_dropped",
        "tx_fifo_errors",
        "collisions",
        "tx_carrier_errors",
        "tx_compressed",
    ];
    let text = host::read_capped(&proc.join("net/dev"), FILE_MAX).ok()?;
    let line = text.lines().find_map(|l| {
        let (n, rest) = l.split_once(':')?;
        (n.trim() == name).then_some(rest)
    })?;
    let vals: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    (vals.len() == COLS.len()).then(|| COLS.iter().map(|c| c.to_string()).zip(vals).collect())
}

/// `ethtool -S` output: `NIC statistics:` then `     name: value` lines.
pub fn parse_ethtool(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().rsplit_once(':')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Which priority and which PFC field an ethtool statistic is, for the drivers that name
/// them: mlx5 (`rx_prio3_pause`, `rx_prio3_pause_duration`), bnxt (`rx_pfc_ena_frames_pri3`),
/// ice/i40e (`rx_priority_3_xoff.nic`, `rx_priority_3_xoff`).
fn pfc_field(name: &str) -> Option<(u8, bool, bool)> {
    // (priority, rx, duration)
    let (dir_rx, rest) = if let Some(r) = name.strip_prefix("rx_") {
        (true, r)
    } else {
        (false, name.strip_prefix("tx_")?)
    };
    if let Some(r) = rest.strip_prefix("priority_") {
        let (n, tail) = r.split_once('_')?;
        let tail = tail.strip_suffix(".nic").unwrap_or(tail);
        return (tail == "xoff").then_some((n.parse().ok()?, dir_rx, false));
    }
    if let Some(r) = rest.strip_prefix("prio") {
        let (n, tail) = r.split_at(r.find(|c: char| !c.is_ascii_digit())?);
        let p = n.parse().ok()?;
        return match tail {
            "_pause" => Some((p, dir_rx, false)),
            "_pause_duration" => Some((p, dir_rx, true)),
            _ => None,
        };
    }
    if let Some(n) = rest.strip_prefix("pfc_ena_frames_pri") {
        return Some((n.parse().ok()?, dir_rx, false));
    }
    None
}

fn pfc_from_ethtool(stats: &BTreeMap<String, u64>, pfc: &mut BTreeMap<u8, Pfc>) {
    for (name, v) in stats {
        let Some((p, rx, duration)) = pfc_field(name) else { continue };
        if p > 7 {
            continue;
        }
        let e = pfc.entry(p).or_default();
        let slot = match (rx, duration) {
            (true, false) => &mut e.rx_pause,
            (false, false) => &mut e.tx_pause,
            (true, true) => &mut e.rx_pause_duration_us,
            (false, true) => &mut e.tx_pause_duration_us,
        };
        *slot = Some(*v);
    }
}

/// `dcb pfc show dev X`: `prio-pfc 0:off 1:on …`, `requests 0:12 …` (pause frames sent),
/// `indications 0:3 …` (pause frames received). Counts from ethtool win where both exist.
pub(crate) fn pfc_from_dcb(text: &str, pfc: &mut BTreeMap<u8, Pfc>) {
    let mut key = "";
    for tok in text.split_whitespace() {
        let Some((p, v)) = tok.split_once(':') else {
            key = tok;
            continue;
        };
        let Ok(p) = p.parse::<u8>() else { continue };
        if p > 7 {
            continue;
        }
        let e = pfc.entry(p).or_default();
        match key {
            "prio-pfc" => e.enabled = Some(v == "on"),
            "requests" => {
                e.tx_pause = e.tx_pause.or(v.parse().ok());
            }
            "indications" => {
                e.rx_pause = e.rx_pause.or(v.parse().ok());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_names_of_each_driver() {
        assert_eq!(pfc_field("rx_prio3_pause"), Some((3, true, false)));
        assert_eq!(pfc_field("tx_prio0_pause_duration"), Some((0, false, true)));
        assert_eq!(pfc_field("rx_prio3_pause_transition"), None);
        assert_eq!(pfc_field("rx_pfc_ena_frames_pri5"), Some((5, true, false)));
        assert_eq!(pfc_field("tx_priority_2_xoff.nic"), Some((2, false, false)));
        assert_eq!(pfc_field("rx_priority_2_xon.nic"), None);
        assert_eq!(pfc_field("rx_bytes"), None);
    }

    #[test]
    fn dcb_text() {
        let mut m = BTreeMap::new();
        pfc_from_dcb(
            "pfc-cap 8 macsec-bypass off delay 4096\nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n\
             requests 0:0 1:0 2:0 3:12 4:0 5:0 6:0 7:0\nindications 0:0 1:0 2:0 3:7 4:0 5:0 6:0 7:0\n",
            &mut m,
        );
        assert_eq!(
            m[&3],
            Pfc {
                enabled: Some(true),
                tx_pause: Some(12),
                rx_pause: Some(7),
                ..Default::default()
            }
        );
        assert_eq!(m[&0].enabled, Some(false));
    }

    #[test]
    fn counter_files() {
        assert_eq!(parse_counter("42\n"), Ok(42));
        assert!(parse_counter("N/A (no PMA)\n").unwrap_err().contains("N/A"));
        assert!(parse_counter("-1").is_err());
    }
}
