//! `podnet burnin --resilient` on an emulated pod (8 hosts × 2 rails, 2 per ToR, 2 spines,
//! 100 Mbit/s links): every host runs the all-to-all pattern over pod channels at 2 Mbit/s
//! (4 KiB messages, each a seeded pattern checked where it lands); 5 s in, one fault; 5 s
//! later (10 s for a lossy ToR, whose evidence builds slowly) it is removed (a killed host
//! stays dead, a frozen one is killed); 6 s more. Each fault is its
//! own test, and each checks, from every surviving host's report:
//! - among the survivors every message arrived once, in order, undamaged, and each peer's
//!   final count matches (nothing lost, nothing duplicated);
//! - a host that died: every survivor saw it down and reports what it could not deliver by
//!   sequence number;
//! - the fault was named — the kind and the component — within its target (host 0's events);
//! - route-around: no survivor's traffic to another survivor stalled 2 s or more;
//! - a fault that moved routes: the home path was taken again after it was removed.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::emupod::{Pod, emupod, script};

const HOSTS: usize = 8;

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// What a run left: each host's report (none for a host that died), when the fault went
/// in and when it was removed (Unix ms).
struct Run {
    reports: Vec<Option<Value>>,
    fault_ms: u64,
    heal_ms: u64,
}

/// Runs the burn-in on every host with `fault` injected 5 s in and `heal` `hold` s later,
/// for 6 s more.
fn run(tag: &str, fault: &[&str], heal: &[&str], victim: Option<usize>, hold: u64) -> Run {
    let name = format!("r{tag}{}", std::process::id() % 10_000);
    let up = emupod(&["up", &name, &HOSTS.to_string(), "2", "2", "2", "100mbit"]);
    let _pod = Pod(name.clone());
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("pod.toml");
    let hosts = emupod(&["plan", &name]);
    std::fs::write(
        &plan,
        format!(
            "name = \"r\"\n[pod]\npairs = \"rail-aligned\"\n{}",
            String::from_utf8_lossy(&hosts.stdout)
        ),
    )
    .unwrap();
    let children: Vec<_> = (0..HOSTS)
        .map(|h| {
            Command::new("bash")
                .arg(script())
                .args(["exec", &name, &h.to_string(), env!("CARGO_BIN_EXE_podnet"), "burnin"])
                .args(["--resilient", "--pod"])
                .arg(&plan)
                .args(["--pod-host", &format!("h{h}"), "--duration", &(11 + hold).to_string()])
                .args(["--sizes", "4096"])
                .args(["--rate-mbit", "2", "--json", "--join-timeout", "30"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let inject = |args: &[&str]| {
        let mut a = vec![args[0], name.as_str()];
        a.extend(&args[1..]);
        let o = emupod(&a);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    std::thread::sleep(Duration::from_secs(5));
    let fault_ms = unix_ms();
    inject(fault);
    std::thread::sleep(Duration::from_secs(hold));
    let heal_ms = unix_ms();
    inject(heal);
    let reports = children
        .into_iter()
        .enumerate()
        .map(|(h, c)| {
            let o = c.wait_with_output().unwrap();
            if victim == Some(h) {
                return None;
            }
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "host {h}: exit {:?}: {out} {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            );
            Some(
                serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("host {h}: {e}: {out}")),
            )
        })
        .collect();
    Run { reports, fault_ms, heal_ms }
}

impl Run {
    fn survivors(&self) -> impl Iterator<Item = &Value> {
        self.reports.iter().flatten()
    }

    /// Every message among the survivors arrived once; what went to `victim` is accounted.
    fn nothing_lost(&self, victim: Option<usize>) {
        let vname = victim.map(|v| format!("h{v}"));
        for r in self.survivors() {
            assert_eq!(r["ok"], true, "{}: {r}", r["host"]);
            for p in r["peers"].as_array().unwrap() {
                if Some(p["peer"].as_str().unwrap().to_string()) == vname {
                    assert_eq!(p["down"], true, "{} did not see the victim down: {p}", r["host"]);
                    continue;
                }
                assert_eq!(p["every_message_once"], true, "{}: {p}", r["host"]);
                assert_eq!(p["undeliverable_count"], 0, "{}: {p}", r["host"]);
                assert_eq!((p["duplicates"].as_u64(), p["gaps"].as_u64()), (Some(0), Some(0)));
                assert_eq!(p["told"], p["received"], "{}: {p}", r["host"]);
                assert!(
                    p["received"].as_u64().unwrap() > 20,
                    "{}: too little traffic: {p}",
                    r["host"]
                );
            }
        }
        if let Some(v) = &vname {
            // What the survivors sent it after it died is reported, by number.
            let lost: u64 = self
                .survivors()
                .flat_map(|r| r["peers"].as_array().unwrap().iter())
                .filter(|p| p["peer"] == v.as_str())
                .map(|p| p["undeliverable_count"].as_u64().unwrap())
                .sum();
            assert!(lost > 0, "no survivor reported a message to {v} undeliverable");
        }
    }

    /// Host 0 named `kind component…`; how long after the fault.
    fn named(&self, kind: &str, component: &str, limit: f64) -> f64 {
        let r = self.reports[0].as_ref().expect("host 0 survives");
        let t = r["finding_events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "finding")
            .filter(|e| e["text"].as_str().unwrap().starts_with(&format!("{kind}: {component}")))
            .map(|e| e["unix_ms"].as_u64().unwrap())
            .find(|t| *t >= self.fault_ms)
            .unwrap_or_else(|| panic!("{kind} {component} never named: {}", r["finding_events"]));
        let s = (t - self.fault_ms) as f64 / 1000.0;
        eprintln!("{kind} {component} named after {s:.2} s");
        assert!(s < limit, "{kind} {component} named after {s} s (target {limit} s)");
        s
    }

    /// The longest stall of traffic between survivors, ms.
    fn worst_stall(&self, victim: Option<usize>) -> u64 {
        let vname = victim.map(|v| format!("h{v}"));
        let worst = self
            .survivors()
            .flat_map(|r| r["peers"].as_array().unwrap().iter())
            .filter(|p| Some(p["peer"].as_str().unwrap().to_string()) != vname)
            .map(|p| p["max_stall_ms"].as_u64().unwrap())
            .max()
            .unwrap();
        eprintln!("longest stall between survivors: {worst} ms");
        assert!(worst < 2000, "traffic between survivors stalled {worst} ms");
        worst
    }

    /// Route changes after the fault, and whether home paths were taken back after the heal;
    /// a route that leaves home again after it was taken back (the healed path flapping)
    /// fails the test.
    fn routes(&self) -> (usize, bool) {
        let mut moved = 0;
        let mut first_back: Option<u64> = None;
        let mut flaps = Vec::new();
        for r in self.survivors() {
            // Peers whose home path this host took back after the heal.
            let mut home_again = std::collections::BTreeSet::new();
            for e in r["route_events"].as_array().unwrap() {
                let t = e["unix_ms"].as_u64().unwrap();
                if t >= self.fault_ms {
                    moved += 1;
                }
                if home_again.contains(&e["peer"].to_string()) {
                    flaps.push(format!("{} {e}", r["host"]));
                }
                if t >= self.heal_ms && e["why"] == "the home path answers again" {
                    first_back = Some(first_back.map_or(t, |b| b.min(t)));
                    home_again.insert(e["peer"].to_string());
                }
            }
        }
        let back =
            first_back.map(|t| format!("{:.2} s after the heal", (t - self.heal_ms) as f64 / 1e3));
        eprintln!(
            "{moved} route changes after the fault; home paths taken back: {}",
            back.as_deref().unwrap_or("never")
        );
        assert!(flaps.is_empty(), "routes left home again after the heal: {flaps:?}");
        (moved, first_back.is_some())
    }
}

#[test]
fn resilient_a_killed_host_is_reported_and_the_survivors_lose_nothing() {
    let r = run("k", &["host", "5", "kill"], &["host", "5", "kill"], Some(5), 5);
    r.nothing_lost(Some(5));
    r.named("host-down", "h5", 1.0);
    r.worst_stall(Some(5));
}

#[test]
fn resilient_a_frozen_host_is_reported_and_the_survivors_lose_nothing() {
    // Frozen, then killed (thawed, it would come back as the same life and lose nothing).
    let r = run("f", &["host", "5", "freeze"], &["host", "5", "kill"], Some(5), 5);
    r.nothing_lost(Some(5));
    r.named("host-down", "h5", 1.0);
    r.worst_stall(Some(5));
}

#[test]
fn resilient_a_rail_link_down_is_routed_around_and_back() {
    let r = run("r", &["link", "h2r0", "down"], &["link", "h2r0", "up"], None, 5);
    r.nothing_lost(None);
    r.named("rail", "h2.r0", 4.0);
    r.worst_stall(None);
    let (moved, back) = r.routes();
    assert!(moved > 0 && back, "routes: {moved} changes, home again: {back}");
}

#[test]
fn resilient_a_lossy_tor_loses_nothing() {
    let r = run("t", &["tor", "3", "loss", "5"], &["tor", "3", "loss", "0"], None, 10);
    r.nothing_lost(None);
    r.named("tor", "t3", 10.0);
    r.worst_stall(None);
}

#[test]
fn resilient_a_smaller_mtu_on_a_spine_link_loses_nothing() {
    let r = run("m", &["link", "t2s1", "mtu", "1500"], &["link", "t2s1", "mtu", "4200"], None, 5);
    r.nothing_lost(None);
    r.named("mtu", "the spine links of t2", 6.0);
    r.worst_stall(None);
}

#[test]
fn resilient_a_dead_spine_is_routed_around_and_back() {
    let r = run("s", &["spine", "1", "down"], &["spine", "1", "up"], None, 5);
    r.nothing_lost(None);
    r.named("spine", "a spine", 5.0);
    r.worst_stall(None);
    let (moved, back) = r.routes();
    assert!(moved > 0 && back, "routes: {moved} changes, home again: {back}");
}
