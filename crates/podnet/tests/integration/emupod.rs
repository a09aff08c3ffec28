//! The emulated pod (`scripts/emupod.sh`): 4 hosts × 2 rails under 4 ToRs and 2 spines, podnet
//! across it, and each knob failing the way a fabric fails — a rail taken down fails that
//! rail's traffic and not the other's (nothing heals in the kernel), a lossy link drops RoCE,
//! a smaller MTU drops large frames silently, a frozen host fails its peers' RDMA, a killed one
//! leaves nothing running, ECMP over the spines spreads a host pair's QPs by their UDP source
//! ports, and the pod is gone after `down`.

use std::process::{Command, Output};

pub(crate) fn script() -> String {
    format!("{}/../../scripts/emupod.sh", env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn emupod(args: &[&str]) -> Output {
    Command::new("bash").arg(script()).args(args).output().expect("bash runs")
}

/// Takes the pod down however the test ends.
pub(crate) struct Pod(pub(crate) String);

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = emupod(&["down", &self.0]);
    }
}

/// podnet pingpong from host `from` to host `to` on `rail`: the client's exit status and last
/// line.
fn pingpong(pod: &str, from: u32, to: u32, rail: u32) -> (i32, String) {
    pingpong_with(pod, from, to, rail, "-n 20")
}

fn pingpong_with(pod: &str, from: u32, to: u32, rail: u32, args: &str) -> (i32, String) {
    let p = env!("CARGO_BIN_EXE_podnet");
    let (a, b) = (format!("10.{}.{from}.1", rail + 1), format!("10.{}.{to}.1", rail + 1));
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "E={s}; $E exec {pod} {to} {p} pingpong -d soft:{b} {args} --timeout 3 >/dev/null 2>&1 & \
             sleep 0.4; $E exec {pod} {from} {p} pingpong -d soft:{a} {args} --timeout 3 {b} 2>&1; \
             rc=$?; wait; exit $rc",
            s = script()
        ))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    (o.status.code().unwrap_or(-1), out.lines().last().unwrap_or("").to_string())
}

/// Packets the ToR `tor` sent to each spine.
fn to_spines(pod: &str, tor: u32) -> Vec<u64> {
    (0..2)
        .map(|j| {
            let o = Command::new("ip")
                .args(["-n", &format!("{pod}-t{tor}"), "-s", "link", "show", &format!("s{j}")])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("TX:"));
            lines
                .nth(1)
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
                .unwrap()
        })
        .collect()
}

#[test]
fn an_emulated_pod_fails_the_way_a_fabric_fails() {
    let name = format!("ep{}", std::process::id() % 100_000);
    let up = emupod(&["up", &name, "4", "2", "2", "2", "200mbit"]);
    let pod = Pod(name.clone());
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    // Across ToRs on both rails (host 0 is under ToRs 0-1, host 3 under ToRs 2-3).
    for rail in [0, 1] {
        let (rc, last) = pingpong(&pod.0, 0, 3, rail);
        assert_eq!(rc, 0, "rail {rail}: {last}");
    }
    // Eight QPs from host 0 to host 3 on rail 0 leave ToR 0 over both spines.
    let before = to_spines(&name, 0);
    let p = env!("CARGO_BIN_EXE_podnet");
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "E={s}; $E exec {name} 3 {p} perf write-bw -q 8 -n 100 -s 16384 -d soft:10.1.3.1 --timeout 20 >/dev/null 2>&1 & \
             sleep 0.4; $E exec {name} 0 {p} perf write-bw -q 8 -n 100 -s 16384 -d soft:10.1.0.1 --timeout 20 10.1.3.1; \
             rc=$?; wait; exit $rc",
            s = script()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = to_spines(&name, 0);
    let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // 8 × 100 × 4 packets; each spine carries at least one QP's.
    assert!(sent.iter().all(|n| *n >= 300), "packets to the spines: {sent:?}");
    // Rail 0 of host 3 down: rail 0 fails, rail 1 still works (no rerouting by the kernel).
    assert!(emupod(&["link", &name, "h3r0", "down"]).status.success());
    let (rc, last) = pingpong(&name, 0, 3, 0);
    assert_ne!(rc, 0, "a dead rail carried traffic: {last}");
    assert_eq!(pingpong(&name, 0, 3, 1).0, 0, "the other rail");
    assert!(emupod(&["link", &name, "h3r0", "up"]).status.success());
    assert_eq!(pingpong(&name, 0, 3, 0).0, 0, "the rail up again");
    // All RoCE lost on the link: the side channel connects, the RDMA traffic fails.
    assert!(emupod(&["link", &name, "h3r0", "loss", "100"]).status.success());
    let (rc, last) = pingpong(&name, 0, 3, 0);
    assert_eq!(rc, 1, "{last}");
    assert!(last.contains("RetryExcErr"), "{last}");
    assert!(emupod(&["link", &name, "h3r0", "loss", "0"]).status.success());
    assert_eq!(pingpong(&name, 0, 3, 0).0, 0, "no loss again");
    // A link with a smaller MTU drops larger frames silently (no ICMP, no EMSGSIZE): a
    // 4096-byte path MTU fails, 1024 passes.
    assert!(emupod(&["link", &name, "h3r0", "mtu", "1500"]).status.success());
    let (rc, last) = pingpong_with(&name, 0, 3, 0, "-n 20 -s 4096 -m 4096");
    assert_eq!(rc, 1, "{last}");
    assert!(last.contains("RetryExcErr"), "{last}");
    assert_eq!(pingpong_with(&name, 0, 3, 0, "-n 20 -s 4096 -m 1024").0, 0);
    assert!(emupod(&["link", &name, "h3r0", "mtu", "9000"]).status.success());
    // A host frozen mid-run: its peer's RDMA fails within the transport's retries; the host
    // killed: nothing of it is left running.
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "E={s}; $E exec {name} 3 {p} pingpong -d soft:10.1.3.1 -n 100000000 -s 64 --timeout 5 >/dev/null 2>&1 & \
             sleep 0.4; $E exec {name} 0 {p} pingpong -d soft:10.1.0.1 -n 100000000 -s 64 --timeout 5 10.1.3.1 2>&1 & c=$!; \
             sleep 1; $E host {name} 3 freeze; s=$(date +%s%N); wait $c; rc=$?; \
             echo \"rc=$rc after $(( ($(date +%s%N) - s) / 1000000 )) ms\"; \
             $E host {name} 3 thaw; $E host {name} 3 kill; sleep 0.3; echo \"left $(ip netns pids {name}-h3 | wc -l)\"",
            s = script()
        ))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("RetryExcErr") && out.contains("rc=1 after"), "{out}");
    let ms: u64 =
        out.split("rc=1 after ").nth(1).and_then(|x| x.split(' ').next()).unwrap().parse().unwrap();
    assert!(ms < 6000, "{out}");
    assert!(out.contains("left 0"), "{out}");
    // Bad input is refused.
    assert_eq!(emupod(&["link", &name, "h9r0", "down"]).status.code(), Some(2));
    assert_eq!(emupod(&["up", &name]).status.code(), Some(2), "a second pod of one name");
    drop(pod);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(!left.lines().any(|l| l.starts_with(&format!("{name}-"))), "{left}");
}
