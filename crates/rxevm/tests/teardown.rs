//! Teardown: `rxevm hold` is killed with SIGKILL while its guest runs; no qemu process, network
//! namespace or tap may survive it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The inode of every network namespace some process is in.
fn live_netns() -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter_map(|e| std::fs::metadata(e.path().join("ns/net")).ok().map(|m| m.ino()))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn named_netns() -> String {
    String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout)
        .into_owned()
}

#[test]
fn killing_the_harness_leaves_no_qemu_namespace_or_tap() {
    rxevm::check_host().expect("the rxe harness's prerequisites (scripts/deps.sh installs them)");
    let named_before = named_netns();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rxevm"))
        .arg("hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let qemu: u32 = line
        .trim()
        .strip_prefix("READY ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("rxevm hold said {line:?}"));
    // The guest is up: qemu runs in its own network namespace, which holds the tap.
    let ns = std::fs::metadata(format!("/proc/{qemu}/ns/net")).unwrap().ino();
    let ours = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    assert_ne!(ns, ours);
    let links = Command::new("nsenter")
        .arg(format!("--net=/proc/{qemu}/ns/net"))
        .args(["ip", "-o", "link", "show", "rxetap0"])
        .output()
        .unwrap();
    assert!(links.status.success(), "no tap in the guest's namespace");
    assert!(live_netns().contains(&ns));

    // Kill the harness mid-run, with no chance to clean up.
    let harness = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{qemu}")).exists() {
        assert!(Instant::now() < deadline, "qemu (pid {qemu}) outlived the harness");
        std::thread::sleep(Duration::from_millis(50));
    }
    // With its last process gone, the namespace (and the tap in it) is gone.
    assert!(!live_netns().contains(&ns), "the guest's network namespace outlived the harness");
    assert_eq!(named_netns(), named_before, "a named network namespace was left behind");
    // Its qemu's command line names the harness's work folder, run-<harness pid>-N.
    let pattern = format!("qemu-system-x86_64.*/run-{harness}-");
    let strays = Command::new("pgrep").args(["-f", &pattern]).output().unwrap();
    assert!(strays.stdout.is_empty(), "stray qemu: {}", String::from_utf8_lossy(&strays.stdout));
    // The dead harness's work folder is swept by the next boot.
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rxevm-cache");
    let mine = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten().any(|e| {
                    e.file_name().to_string_lossy().starts_with(&format!("run-{harness}-"))
                })
            })
            .unwrap_or(false)
    };
    if std::env::var_os("PODNET_RXEVM_CACHE").is_none() && mine(&cache) {
        let vm = rxevm::Vm::boot(&rxevm::Config::default()).unwrap();
        assert!(!mine(&cache), "the killed harness's work folder survived the next boot");
        drop(vm);
    }
}
