//! `podnet tune`: the run-time settings doctor's checks find wrong, changed to a profile's
//! values — only by `apply`, with every original value written to a state file before the
//! first change, a failed change rolling the whole apply back, and `restore` putting back
//! what the state file holds.
//!
//! What it changes (each only where it differs): every CPU's cpufreq governor
//! (`performance`), turbo (on), automatic NUMA balancing (off), transparent huge pages (`madvise`; the
//! latency profile only), the IRQs of the RDMA devices' PCI functions and of the netdevs
//! under them (onto the device's NUMA-local CPUs), the RX and TX rings of the RoCE netdevs
//! (their maximum; the throughput profile only, through `ethtool -G`), and on a host with
//! several RDMA netdevs each one's `rp_filter` (2, loose), `arp_ignore` (1) and
//! `arp_announce` (2).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Source;
use crate::checks::{cpulist, rdma_devices, rdma_netdevs, rings};

/// The setting at `path` set to `value`: a file written, or a ring resized with `ethtool -G`
/// (in a recorded tree, the recorded `ethtool -g` answer rewritten as the kernel would show
/// it, so that a tree can be tuned and restored like a host).
fn set(src: &Source, path: &str, value: &str) -> std::io::Result<()> {
    let Some((nd, ring)) = path.strip_prefix("ethtool/").and_then(|p| p.split_once('/')) else {
        return src.write(path, value);
    };
    let which = ring.strip_suffix("-ring").unwrap_or(ring);
    if src.is_live() {
        return src.run(&["ethtool", "-G", nd, which, value]);
    }
    let rec = format!("cmd/ethtool-g-{nd}");
    let text = src.read(&rec).ok_or(std::io::ErrorKind::NotFound)?;
    let key = format!("{}:", which.to_ascii_uppercase());
    let (head, current) =
        text.split_once("Current hardware settings:").ok_or(std::io::ErrorKind::InvalidData)?;
    let mut done = false;
    let current: Vec<String> = current
        .split('\n')
        .map(|l| match l.strip_prefix(&key) {
            Some(v) if !done => {
                done = true;
                let pad: String = v.chars().take_while(|c| c.is_whitespace()).collect();
                format!("{key}{pad}{value}")
            }
            _ => l.to_string(),
        })
        .collect();
    if !done {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    src.write(&rec, &format!("{head}Current hardware settings:{}", current.join("\n")))
}

/// What a profile tunes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Latency-bound traffic (small messages, busy polling).
    Latency,
    /// Bandwidth-bound traffic.
    Throughput,
}

/// One setting to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The file (`sys/devices/system/cpu/cpu0/cpufreq/scaling_governor`), or a netdev's ring
    /// (`ethtool/ens1f0np0/rx-ring`: set with `ethtool -G`).
    pub path: String,
    /// Its value now.
    pub from: String,
    /// The profile's value.
    pub to: String,
    /// Why.
    pub why: String,
}

/// A setting `apply` changed: its value before the first apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The file.
    pub path: String,
    /// Its value before podnet changed it.
    pub original: String,
}

/// The state file: what to put back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// In the order changed.
    pub saved: Vec<Saved>,
}

/// Why tune failed.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A change was refused; everything this apply changed was put back.
    #[error("{path}: cannot write {value:?}: {err}; rolled back {rolled} change(s) of this apply")]
    Refused {
        /// The file.
        path: String,
        /// What was written.
        value: String,
        /// The kernel's answer.
        err: std::io::Error,
        /// Changes put back.
        rolled: usize,
    },
    /// Settings could not be put back; the state file keeps them.
    #[error("{0} setting(s) could not be restored ({1}); the state file keeps them")]
    NotRestored(usize, String),
    /// The state file could not be read or written.
    #[error("{0}: {1}")]
    State(String, String),
}

/// The value a file shows: the selected word of a `a [b] c` list, else the text.
fn shown(v: &str) -> String {
    match (v.find('['), v.find(']')) {
        (Some(a), Some(b)) if a < b => v[a + 1..b].to_string(),
        _ => v.trim().to_string(),
    }
}

/// What `apply` would change on the host `src` reads.
pub fn plan(src: &Source, profile: Profile) -> Vec<Change> {
    let mut out = Vec::new();
    let want = |out: &mut Vec<Change>, path: String, to: &str, why: &str| {
        if let Some(v) = src.read(&path) {
            let from = shown(&v);
            if from != to {
                out.push(Change { path, from, to: to.into(), why: why.into() });
            }
        }
    };
    for c in src.list("sys/devices/system/cpu") {
        if c.strip_prefix("cpu").is_some_and(|i| i.parse::<u32>().is_ok()) {
            want(
                &mut out,
                format!("sys/devices/system/cpu/{c}/cpufreq/scaling_governor"),
                "performance",
                "the clock stays up between bursts",
            );
        }
    }
    want(
        &mut out,
        "proc/sys/kernel/numa_balancing".into(),
        "0",
        "no NUMA hinting faults or page migrations",
    );
    for (f, on) in [
        ("sys/devices/system/cpu/cpufreq/boost", "1"),
        ("sys/devices/system/cpu/intel_pstate/no_turbo", "0"),
    ] {
        want(&mut out, f.into(), on, "turbo on: pollers run above base clock");
    }
    if profile == Profile::Latency {
        want(
            &mut out,
            "sys/kernel/mm/transparent_hugepage/enabled".into(),
            "madvise",
            "no compaction stalls outside regions that ask for huge pages",
        );
    }
    let devices = rdma_devices(src);
    // IRQs onto the NUMA-local CPUs: of each RDMA device's PCI function, and of the PCI
    // function under each RDMA netdev (a RoCE device's netdev shares it, or is its own).
    let mut funcs: Vec<String> = devices
        .iter()
        .filter(|d| d.pci.is_some())
        .map(|d| format!("sys/class/infiniband/{}/device", d.name))
        .collect();
    let netdevs: Vec<String> = {
        let mut v: Vec<String> = rdma_netdevs(&devices).into_iter().map(|n| n.0).collect();
        v.sort();
        v
    };
    funcs.extend(netdevs.iter().map(|nd| format!("sys/class/net/{nd}/device")));
    let mut seen_irqs = Vec::new();
    for f in funcs {
        let Some(local) = src.read(&format!("{f}/local_cpulist")) else { continue };
        let local_cpus = cpulist(&local);
        for irq in src.list(&format!("{f}/msi_irqs")) {
            if seen_irqs.contains(&irq) {
                continue;
            }
            seen_irqs.push(irq.clone());
            let path = format!("proc/irq/{irq}/smp_affinity_list");
            if let Some(now) = src.read(&path)
                && !cpulist(&now).iter().all(|c| local_cpus.contains(c))
            {
                out.push(Change {
                    path,
                    from: now,
                    to: local.clone(),
                    why: "completions handled on the NIC's NUMA node".into(),
                });
            }
        }
    }
    if profile == Profile::Throughput {
        for (nd, _, _) in rdma_netdevs(&devices) {
            for (ring, cur, max) in rings(src, &nd).into_iter().filter(|(_, c, m)| c < m) {
                out.push(Change {
                    path: format!("ethtool/{nd}/{}-ring", ring.to_ascii_lowercase()),
                    from: cur.to_string(),
                    to: max.to_string(),
                    why: "the netdev's own IP traffic (bootstrap, storage, the control plane) rides out bursts".into(),
                });
            }
        }
    }
    if netdevs.len() >= 2 {
        for nd in &netdevs {
            // Strict reverse-path filtering (1) becomes loose (2); off (0) stays off.
            if src.read_u64(&format!("proc/sys/net/ipv4/conf/{nd}/rp_filter")) == Some(1) {
                want(
                    &mut out,
                    format!("proc/sys/net/ipv4/conf/{nd}/rp_filter"),
                    "2",
                    "loose reverse-path filtering: each rail's traffic is taken",
                );
            }
            for (key, to, why) in [
                ("arp_ignore", "1", "each NIC answers ARP only for its own addresses"),
                ("arp_announce", "2", "ARP requests carry the sending NIC's own address"),
            ] {
                want(&mut out, format!("proc/sys/net/ipv4/conf/{nd}/{key}"), to, why);
            }
        }
        // conf/all is the floor of rp_filter (the kernel applies the larger): strict there
        // would undo the loose setting of each netdev.
        if src.read_u64("proc/sys/net/ipv4/conf/all/rp_filter") == Some(1) {
            want(
                &mut out,
                "proc/sys/net/ipv4/conf/all/rp_filter".into(),
                "2",
                "strict on all undoes loose per netdev",
            );
        }
    }
    out
}

fn load(state: &Path) -> Result<State, TuneError> {
    match std::fs::read(state) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| TuneError::State(state.display().to_string(), e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(TuneError::State(state.display().to_string(), e.to_string())),
    }
}

fn save(state: &Path, s: &State) -> Result<(), TuneError> {
    let err = |e: String| TuneError::State(state.display().to_string(), e);
    if let Some(d) = state.parent() {
        std::fs::create_dir_all(d).map_err(|e| err(e.to_string()))?;
    }
    let tmp = state.with_extension("tmp");
    let text = serde_json::to_string_pretty(s).map_err(|e| err(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(|e| err(e.to_string()))?;
    std::fs::rename(&tmp, state).map_err(|e| err(e.to_string()))
}

/// Applies `profile`: the state file first (the original of every setting about to change,
/// kept from an earlier apply where it holds one), then each change; a change the kernel
/// refuses puts back every change of this apply and the state file as it was. Returns the
/// changes made.
pub fn apply(src: &Source, profile: Profile, state: &Path) -> Result<Vec<Change>, TuneError> {
    let changes = plan(src, profile);
    let before = load(state)?;
    let existed = state.exists();
    let mut next = before.clone();
    for c in &changes {
        if !next.saved.iter().any(|s| s.path == c.path) {
            next.saved.push(Saved { path: c.path.clone(), original: c.from.clone() });
        }
    }
    if !changes.is_empty() {
        save(state, &next)?;
    }
    for (i, c) in changes.iter().enumerate() {
        if let Err(err) = set(src, &c.path, &c.to) {
            // Back, newest first, to what each was before this apply.
            for d in changes[..i].iter().rev() {
                let _ = set(src, &d.path, &d.from);
            }
            if existed {
                save(state, &before)?;
            } else {
                let _ = std::fs::remove_file(state);
            }
            return Err(TuneError::Refused {
                path: c.path.clone(),
                value: c.to.clone(),
                err,
                rolled: i,
            });
        }
    }
    Ok(changes)
}

/// Puts back what the state file holds, newest change first, and removes it; what cannot be
/// put back stays in it.
pub fn restore(src: &Source, state: &Path) -> Result<Vec<Saved>, TuneError> {
    let s = load(state)?;
    let mut failed = Vec::new();
    let mut done = Vec::new();
    for saved in s.saved.iter().rev() {
        match set(src, &saved.path, &saved.original) {
            Ok(()) => done.push(saved.clone()),
            Err(e) => failed.push((saved.clone(), e)),
        }
    }
    if failed.is_empty() {
        if state.exists() {
            std::fs::remove_file(state)
                .map_err(|e| TuneError::State(state.display().to_string(), e.to_string()))?;
        }
        return Ok(done);
    }
    let what =
        failed.iter().map(|(s, e)| format!("{}: {e}", s.path)).collect::<Vec<_>>().join("; ");
    let n = failed.len();
    save(state, &State { saved: failed.into_iter().rev().map(|(s, _)| s).collect() })?;
    Err(TuneError::NotRestored(n, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of a fixture tree to change.
    fn copy(name: &str) -> std::path::PathBuf {
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/doctor").join(name);
        let to = std::env::temp_dir().join(format!(
            "podnet-tune-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&to);
        let ok = std::process::Command::new("cp").arg("-r").arg(&from).arg(&to).status().unwrap();
        assert!(ok.success());
        to
    }

    /// Every file of a tree and its text.
    fn snapshot(root: &Path) -> Vec<(String, String)> {
        let out =
            std::process::Command::new("find").arg(root).arg("-type").arg("f").output().unwrap();
        let mut v: Vec<(String, String)> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|p| !p.ends_with(".json"))
            // As the kernel shows a `a [b] c` choice, whatever was written to select b.
            .map(|p| (p.to_string(), shown(&std::fs::read_to_string(p).unwrap_or_default())))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn apply_twice_then_restore_leaves_every_value_as_it_was() {
        let root = copy("mlx5-problems");
        let state = root.join("podnet-tune.json");
        let src = Source::recorded(&root).unwrap();
        let before = snapshot(&root);
        let planned = plan(&src, Profile::Latency);
        let paths: Vec<&str> = planned.iter().map(|c| c.path.as_str()).collect();
        assert!(
            paths.contains(&"sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            "{paths:?}"
        );
        assert!(paths.contains(&"proc/irq/120/smp_affinity_list"), "{paths:?}");
        assert!(paths.contains(&"proc/sys/net/ipv4/conf/ens1f1np1/arp_announce"), "{paths:?}");
        assert!(
            !paths.contains(&"sys/devices/system/cpu/cpu2/cpufreq/scaling_governor"),
            "already performance"
        );
        let n = apply(&src, Profile::Latency, &state).unwrap().len();
        assert_eq!(n, planned.len());
        // Applied: doctor finds none of what tune fixes, and nothing is left to plan.
        assert!(plan(&src, Profile::Latency).is_empty());
        let r = crate::diagnose(&src);
        for k in [
            "cpu-boost-off",
            "cpu-governor",
            "numa-balancing",
            "thp",
            "irq-affinity",
            "rp-filter",
            "arp-ignore",
            "arp-announce",
        ] {
            assert!(!r.findings.iter().any(|f| f.kind == k), "{k} still found");
        }
        // Again: nothing to change, and the originals stay in the state file.
        assert!(apply(&src, Profile::Latency, &state).unwrap().is_empty());
        let saved = load(&state).unwrap();
        assert_eq!(saved.saved.len(), n);
        assert!(saved.saved.iter().any(|s| s.original == "powersave"));
        assert_eq!(restore(&src, &state).unwrap().len(), n);
        assert!(!state.exists());
        let after = snapshot(&root);
        let diff: Vec<_> = after.iter().filter(|f| !before.contains(f)).collect();
        assert!(diff.is_empty(), "not as it was: {diff:?}");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The throughput profile also sizes the RoCE netdevs' rings to their maximum (in a tree:
    /// the recorded `ethtool -g` answer, rewritten as the kernel would show it); restore puts
    /// them back byte for byte.
    #[test]
    fn the_throughput_profile_sizes_rings_and_restore_puts_them_back() {
        let root = copy("mlx5-problems");
        let state = root.join("podnet-tune.json");
        let src = Source::recorded(&root).unwrap();
        let before = snapshot(&root);
        let rec = std::fs::read(root.join("cmd/ethtool-g-ens1f0np0")).unwrap();
        assert_eq!(rings(&src, "ens1f0np0"), [("RX", 1024, 8192), ("TX", 1024, 8192)]);
        let planned = plan(&src, Profile::Throughput);
        let ring: Vec<_> = planned.iter().filter(|c| c.path.starts_with("ethtool/")).collect();
        assert_eq!(ring.len(), 2, "{planned:#?}");
        assert_eq!(
            (ring[0].path.as_str(), ring[0].from.as_str(), ring[0].to.as_str()),
            ("ethtool/ens1f0np0/rx-ring", "1024", "8192")
        );
        assert!(!plan(&src, Profile::Latency).iter().any(|c| c.path.starts_with("ethtool/")));
        apply(&src, Profile::Throughput, &state).unwrap();
        assert_eq!(rings(&src, "ens1f0np0"), [("RX", 8192, 8192), ("TX", 8192, 8192)]);
        assert!(!crate::diagnose(&src).findings.iter().any(|f| f.kind == "ring-size"));
        restore(&src, &state).unwrap();
        assert_eq!(std::fs::read(root.join("cmd/ethtool-g-ens1f0np0")).unwrap(), rec);
        let after = snapshot(&root);
        let diff: Vec<_> = after.iter().filter(|f| !before.contains(f)).collect();
        assert!(diff.is_empty(), "not as it was: {diff:?}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_refused_change_rolls_the_apply_back() {
        let root = copy("mlx5-problems");
        let state = root.join("podnet-tune.json");
        let src = Source::recorded(&root).unwrap();
        let before = snapshot(&root);
        // The last planned file refuses writes: it is the kernel's /proc/version (readable,
        // and any write to it is refused, even root's — as a managed IRQ's affinity or a
        // locked sysctl refuses one). Nothing real is changed: the write never happens.
        let last = "proc/sys/net/ipv4/conf/ens1f1np1/arp_announce".to_string();
        let p = root.join(&last);
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/proc/version", &p).unwrap();
        let planned = plan(&src, Profile::Throughput);
        let at = planned.iter().position(|c| c.path == last).expect("planned");
        assert!(at > 3, "changes before it to roll back: {at}");
        let e = apply(&src, Profile::Throughput, &state).unwrap_err();
        assert!(matches!(e, TuneError::Refused { ref path, .. } if *path == last), "{e}");
        assert!(e.to_string().contains("rolled back"), "{e}");
        assert!(!state.exists(), "no state file left by a rolled-back apply");
        let after: Vec<(String, String)> =
            snapshot(&root).into_iter().filter(|(f, _)| !f.contains(&last)).collect();
        let before: Vec<(String, String)> =
            before.into_iter().filter(|(f, _)| !f.contains(&last)).collect();
        let diff: Vec<_> = after.iter().filter(|f| !before.contains(f)).collect();
        assert!(diff.is_empty(), "not as it was: {diff:?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
