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

/// Whether `path` is one of the settings [`plan`] changes: restore writes nothing else, so
/// a state file cannot point a write anywhere else (`../x`, an absolute path, a file under
/// `/etc`).
pub fn is_tunable(path: &str) -> bool {
    let name = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:@".contains(&b))
    };
    let number = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["sys", "devices", "system", "cpu", cpu, "cpufreq", "scaling_governor"] => {
            cpu.strip_prefix("cpu").is_some_and(number)
        }
        ["proc", "sys", "kernel", "numa_balancing"]
        | ["sys", "devices", "system", "cpu", "cpufreq", "boost"]
        | ["sys", "devices", "system", "cpu", "intel_pstate", "no_turbo"]
        | ["sys", "kernel", "mm", "transparent_hugepage", "enabled"] => true,
        ["proc", "irq", irq, "smp_affinity_list"] => number(irq),
        ["ethtool", nd, ring] => name(nd) && matches!(*ring, "rx-ring" | "tx-ring"),
        ["proc", "sys", "net", "ipv4", "conf", nd, key] => {
            name(nd) && matches!(*key, "rp_filter" | "arp_ignore" | "arp_announce")
        }
        _ => false,
    }
}

/// A value tune could have saved: a short line of text.
fn is_value(v: &str) -> bool {
    v.len() <= 256 && !v.contains(['\n', '\0'])
}

/// Refuses a state file another user could plant, replace or change: its folder must be
/// writable by its owner only (this user or root), and the file, if there, a regular file
/// (not a link) of this user or root, writable by its owner only.
fn check_place(state: &Path) -> Result<(), TuneError> {
    use std::os::unix::fs::MetadataExt;
    let err = |why: String| TuneError::State(state.display().to_string(), why);
    let me = crate::source::euid();
    let trusted = |uid: u32| uid == 0 || Some(uid) == me;
    let dir = match state.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    if let Ok(m) = std::fs::metadata(&dir)
        && (m.mode() & 0o022 != 0 || !trusted(m.uid()))
    {
        return Err(err(format!(
            "the state file's folder {} can be written by others (mode {:o}, owner {}): \
             whoever can write there decides what tune restores as root; give --state a \
             path in a folder only you can write (the default: /var/lib/podnet)",
            dir.display(),
            m.mode() & 0o7777,
            m.uid()
        )));
    }
    match std::fs::symlink_metadata(state) {
        Ok(m) if !m.file_type().is_file() => {
            Err(err("not a regular file (a link, or something else): refused".into()))
        }
        Ok(m) if m.mode() & 0o022 != 0 || !trusted(m.uid()) => Err(err(format!(
            "writable by others or owned by another user (mode {:o}, owner {}): refused",
            m.mode() & 0o7777,
            m.uid()
        ))),
        _ => Ok(()),
    }
}

fn load(state: &Path) -> Result<State, TuneError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    check_place(state)?;
    let err = |e: String| TuneError::State(state.display().to_string(), e);
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(state);
    let s: State = match f {
        Ok(f) => {
            let mut b = Vec::new();
            f.take(16 << 20).read_to_end(&mut b).map_err(|e| err(e.to_string()))?;
            serde_json::from_slice(&b).map_err(|e| err(e.to_string()))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
        Err(e) => return Err(err(e.to_string())),
    };
    // Only the settings tune changes, with values it could have read: a state file that
    // names anything else was not written by tune.
    if let Some(bad) = s.saved.iter().find(|x| !is_tunable(&x.path) || !is_value(&x.original)) {
        return Err(err(format!(
            "names {:?}, which is not a setting podnet tune changes (or a value it could have \
             saved): the file was not written by tune; nothing restored",
            bad.path
        )));
    }
    Ok(s)
}

/// Writes the state: a private temporary file (created, never opened through a link, mode
/// 0600) synced and renamed into place, in a folder made 0700 where tune creates it.
fn save(state: &Path, s: &State) -> Result<(), TuneError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let err = |e: String| TuneError::State(state.display().to_string(), e);
    if let Some(d) = state.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|e| err(e.to_string()))?;
    }
    check_place(state)?;
    let text = serde_json::to_string_pretty(s).map_err(|e| err(e.to_string()))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name =
        state.file_name().map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
    let tmp = state.with_file_name(format!(".{name}.{}.{stamp}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| err(format!("{}: {e}", tmp.display())))?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, state)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e.to_string()));
    }
    Ok(())
}

/// Applies `profile`: the state file first (the original of every setting about to change,
/// kept from an earlier apply where it holds one), then each change; a change the kernel
/// refuses puts back every change of this apply and the state file as it was. Returns the
/// changes made.
pub fn apply(src: &Source, profile: Profile, state: &Path) -> Result<Vec<Change>, TuneError> {
    let changes = plan(src, profile);
    let before = load(state)?;
    let existed = state.symlink_metadata().is_ok();
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

    #[test]
    fn every_setting_tune_plans_is_one_restore_will_write() {
        for tree in ["mlx5-problems", "clean", "clean-b", "rxe-guest", "vm-recorded"] {
            let root =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/doctor").join(tree);
            let src = Source::recorded(&root).unwrap();
            for profile in [Profile::Latency, Profile::Throughput] {
                for c in plan(&src, profile) {
                    assert!(is_tunable(&c.path), "{tree}: {}", c.path);
                }
            }
        }
    }

    #[test]
    fn restore_writes_nothing_but_the_settings_tune_makes() {
        let root = copy("mlx5-problems");
        let src = Source::recorded(&root).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let state = dir.path().join("state.json");
        for path in [
            "../victim".to_string(),
            victim.display().to_string(),
            "proc/sys/../../../victim".into(),
            "etc/passwd".into(),
            "proc/irq/1/../../../x".into(),
            "ethtool/../x/rx-ring".into(),
        ] {
            let s = State { saved: vec![Saved { path: path.clone(), original: "owned".into() }] };
            std::fs::write(&state, serde_json::to_string(&s).unwrap()).unwrap();
            let e = restore(&src, &state).unwrap_err();
            assert!(e.to_string().contains("not a setting podnet tune changes"), "{path}: {e}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!root.join("etc/passwd").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_state_file_others_could_plant_or_a_link_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = copy("mlx5-problems");
        let src = Source::recorded(&root).unwrap();
        let before = snapshot(&root);
        // A folder anyone can write (as /tmp): refused before anything changes.
        let open = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = apply(&src, Profile::Latency, &open.path().join("s.json")).unwrap_err();
        assert!(e.to_string().contains("can be written by others"), "{e}");
        assert_eq!(snapshot(&root), before, "nothing changed");
        // The state path a link planted to a file elsewhere: neither followed nor replaced.
        let mine = tempfile::tempdir().unwrap();
        let elsewhere = mine.path().join("elsewhere");
        std::fs::write(&elsewhere, "precious").unwrap();
        let state = mine.path().join("s.json");
        std::os::unix::fs::symlink(&elsewhere, &state).unwrap();
        let e = apply(&src, Profile::Latency, &state).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious");
        std::fs::remove_file(&state).unwrap();
        // A link planted where the old temporary file went: tune's own temporary file is
        // private and new each time, the link is never written through.
        std::os::unix::fs::symlink(&elsewhere, mine.path().join("s.tmp")).unwrap();
        apply(&src, Profile::Latency, &state).unwrap();
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o600);
        restore(&src, &state).unwrap();
        assert_eq!(snapshot(&root), before);
        let _ = std::fs::remove_dir_all(&root);
    }
}
