//! The pod watching itself (`podnet agent --pod`) on an emulated pod (scripts/emupod.sh: 8
//! hosts × 2 rails, 2 hosts per ToR, 8 ToRs, 2 spines, 100 Mbit/s links), an agent on every
//! host: each fault is injected into a pod whose every member is alive and every path
//! answering, and host 0's `podnet pod status --json` must name it — the component and the
//! kind — within its target, with no other fault of error severity named meanwhile, and
//! clear once the fault is removed (the healed paths answer again):
//! - a host killed, and a host frozen (its cgroup): `host-down` in < 1 s (SWIM at a 100 ms
//!   probe period), by every other host;
//! - a host's rail link taken down: `rail` of that device;
//! - a ToR dropping 5 % of RoCE packets at each port: `tor`;
//! - a ToR–spine link's MTU lowered so that only near-MTU frames vanish: `mtu` on that ToR's
//!   spine links;
//! - a spine that forwards nothing (its links up): `spine`;
//! - two busy loops in a host's cgroup held to 20 % of a core: `host-cpu` (a warning) and no
//!   network fault.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::emupod::{Pod, emupod, script};

const HOSTS: usize = 8;

/// An emulated pod with an agent watching it on every host.
struct Watched {
    pod: Pod,
    agents: Vec<Option<Child>>,
    plan: tempfile::TempDir,
}

fn podnet() -> &'static str {
    env!("CARGO_BIN_EXE_podnet")
}

impl Watched {
    /// Brings up the pod, starts the agents and waits for every member alive and every path
    /// answering.
    fn up(tag: &str) -> Watched {
        let name = format!("w{tag}{}", std::process::id() % 10_000);
        let up = emupod(&["up", &name, &HOSTS.to_string(), "2", "2", "2", "100mbit"]);
        let pod = Pod(name.clone());
        assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
        let hosts = emupod(&["plan", &name]);
        let plan = tempfile::tempdir().unwrap();
        let text = format!(
            "name = \"watched\"\n[pod]\npairs = \"rail-aligned\"\n{}",
            String::from_utf8_lossy(&hosts.stdout)
        );
        std::fs::write(plan.path().join("pod.toml"), text).unwrap();
        let mut w = Watched { pod, agents: (0..HOSTS).map(|_| None).collect(), plan };
        for h in 0..HOSTS {
            w.start(h);
        }
        let t0 = Instant::now();
        loop {
            let v = w.status(0);
            let alive = v.as_ref().is_some_and(|v| {
                v["members"].as_array().unwrap().iter().all(|m| m["health"] == "alive")
            });
            let paths = v.as_ref().map_or(0, |v| v["paths"]["ok"].as_u64().unwrap_or(0));
            if alive && paths == 112 && v.as_ref().unwrap()["findings"] == Value::Array(vec![]) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the pod did not settle: {}",
                v.map_or("no status".into(), |v| v.to_string())
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        w
    }

    fn name(&self) -> &str {
        &self.pod.0
    }

    /// Starts (or restarts) host `h`'s agent.
    fn start(&mut self, h: usize) {
        let c = Command::new("bash")
            .arg(script())
            .args(["exec", self.name(), &h.to_string(), podnet(), "agent", "--pod"])
            .arg(self.plan.path().join("pod.toml"))
            .args(["--pod-host", &format!("h{h}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.agents[h] = Some(c);
    }

    /// Host `h`'s view (`podnet pod status --json`), if its agent answers.
    fn status(&self, h: usize) -> Option<Value> {
        let o = Command::new("ip")
            .args(["netns", "exec", &format!("{}-h{h}", self.name()), podnet()])
            .args(["pod", "status", "--json", "--timeout", "2"])
            .output()
            .unwrap();
        serde_json::from_slice(&o.stdout).ok()
    }

    fn inject(&self, args: &[&str]) {
        let mut a = vec![args[0], self.name()];
        a.extend(&args[1..]);
        let o = emupod(&a);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// Polls host `observer` until a finding of `kind` whose component starts with
    /// `component` is shown; the time it took. Fails after `limit`, or when another finding
    /// of error severity is shown meanwhile, unless it names a device in `within` (the
    /// fault's own devices: a lossy ToR's evidence reaches its pairs and devices before the
    /// ToR).
    fn expect(&self, observer: usize, kind: &str, component: &str, limit: Duration) -> Duration {
        self.expect_within(observer, kind, component, limit, &[])
    }

    fn expect_within(
        &self,
        observer: usize,
        kind: &str,
        component: &str,
        limit: Duration,
        within: &[&str],
    ) -> Duration {
        let t0 = Instant::now();
        let mut last = Value::Null;
        while t0.elapsed() < limit {
            if let Some(v) = self.status(observer) {
                let fs = v["findings"].as_array().unwrap().clone();
                let hit = fs.iter().any(|f| {
                    f["kind"] == kind && f["component"].as_str().unwrap().starts_with(component)
                });
                for f in &fs {
                    let c = f["component"].as_str().unwrap();
                    let mine = (f["kind"] == kind && c.starts_with(component))
                        || within.iter().any(|d| c.contains(d));
                    assert!(
                        mine || f["severity"] != "error",
                        "while waiting for {kind} {component}, another fault was named: {f}"
                    );
                }
                if hit {
                    return t0.elapsed();
                }
                last = v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{kind} {component} not named within {limit:?}; findings {} paths {}",
            last["findings"], last["paths"]
        );
    }

    /// Waits until host `observer` shows no finding and every member alive; the time.
    fn cleared(&self, observer: usize) -> Duration {
        let t0 = Instant::now();
        loop {
            let v = self.status(observer);
            if let Some(v) = &v
                && v["findings"] == Value::Array(vec![])
                && v["members"].as_array().unwrap().iter().all(|m| m["health"] == "alive")
                && v["paths"]["ok"] == v["paths"]["paths"]
            {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the pod did not heal: {}",
                v.map_or("no status".into(), |v| v.to_string())
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// When every other host declared `h` down, in s after `t0_ms` (Unix ms).
    fn down_after(&self, h: usize, t0_ms: u64) -> Vec<f64> {
        (0..HOSTS)
            .filter(|&o| o != h)
            .map(|o| {
                // Host 0 saw it; another may see it a few ms later: ask for up to 2 s (the
                // time is the event's own).
                let asked = std::time::Instant::now();
                loop {
                    let v = self.status(o).expect("a live agent answers");
                    let seen = v["events"].as_array().unwrap().iter().find(|e| {
                        e["text"] == format!("h{h} down") && e["unix_ms"].as_u64() >= Some(t0_ms)
                    });
                    if let Some(e) = seen {
                        return (e["unix_ms"].as_u64().unwrap() - t0_ms) as f64 / 1000.0;
                    }
                    assert!(
                        asked.elapsed() < Duration::from_secs(2),
                        "host {o} did not see h{h} down: {}",
                        v["events"]
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .collect()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for c in self.agents.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A host that dies, or freezes, is down at every other host within a second, and back
/// (a new incarnation) once it runs again.
fn dropout(tag: &str, how: &str) {
    let mut w = Watched::up(tag);
    let t0 = unix_ms();
    w.inject(&["host", "5", how]);
    w.expect(0, "host-down", "h5", Duration::from_secs(3));
    let times = w.down_after(5, t0);
    let worst = times.iter().copied().fold(0.0, f64::max);
    eprintln!("h5 {how}: down at the others after {times:?} s");
    assert!(worst < 1.0, "a dropout took {worst} s to detect: {times:?}");
    if how == "kill" {
        w.start(5);
    } else {
        w.inject(&["host", "5", "thaw"]);
    }
    eprintln!("healed in {:?}", w.cleared(0));
}

#[test]
fn pod_watch_a_killed_host_is_down_everywhere_within_a_second() {
    dropout("k", "kill");
}

#[test]
fn pod_watch_a_frozen_host_is_down_everywhere_within_a_second() {
    dropout("f", "freeze");
}

/// Injects `fault`, expects `kind component` at host 0 within `limit`, heals with `heal`.
fn located(tag: &str, fault: &[&str], heal: &[&str], kind: &str, component: &str, limit: u64) {
    located_within(tag, fault, heal, kind, component, limit, &[]);
}

fn located_within(
    tag: &str,
    fault: &[&str],
    heal: &[&str],
    kind: &str,
    component: &str,
    limit: u64,
    within: &[&str],
) {
    let w = Watched::up(tag);
    w.inject(fault);
    let t = w.expect_within(0, kind, component, Duration::from_secs(limit), within);
    eprintln!("{fault:?}: {kind} {component} named after {t:?}");
    // The same verdict at a host far from the fault.
    w.expect(7, kind, component, Duration::from_secs(2));
    w.inject(heal);
    eprintln!("healed in {:?}", w.cleared(0));
}

#[test]
fn pod_watch_a_rail_link_down_is_that_rail() {
    located("r", &["link", "h2r0", "down"], &["link", "h2r0", "up"], "rail", "h2.r0", 4);
}

#[test]
fn pod_watch_a_lossy_tor_is_that_tor() {
    // Its devices: h2.r1 and h3.r1.
    located_within(
        "t",
        &["tor", "3", "loss", "5"],
        &["tor", "3", "loss", "0"],
        "tor",
        "t3",
        10,
        &["h2.r1", "h3.r1"],
    );
}

#[test]
fn pod_watch_a_smaller_mtu_on_a_spine_link_is_an_mtu_on_that_tors_spine_links() {
    located(
        "m",
        &["link", "t2s1", "mtu", "1500"],
        &["link", "t2s1", "mtu", "4200"],
        "mtu",
        "the spine links of t2",
        6,
    );
}

#[test]
fn pod_watch_a_dead_spine_is_a_spine() {
    located("s", &["spine", "1", "down"], &["spine", "1", "up"], "spine", "a spine", 5);
}

#[test]
fn pod_watch_a_starved_host_is_not_a_network_fault() {
    let w = Watched::up("c");
    w.inject(&["host", "6", "cpu", "20"]);
    let mut hogs: Vec<Child> = (0..2)
        .map(|_| {
            Command::new("bash")
                .arg(script())
                .args(["exec", w.name(), "6", "sh", "-c", "while :; do :; done"])
                .spawn()
                .unwrap()
        })
        .collect();
    // Named as the host's CPU (a warning), and for 10 s no error finding anywhere.
    w.expect(0, "host-cpu", "h6", Duration::from_secs(8));
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        for h in [0, 6] {
            if let Some(v) = w.status(h) {
                for f in v["findings"].as_array().unwrap() {
                    assert_ne!(f["severity"], "error", "host {h} named a fault: {f}");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // `emupod exec` execs into the loop: the child is the loop.
    for c in &mut hogs {
        let _ = c.kill();
        let _ = c.wait();
    }
    w.inject(&["host", "6", "cpu", "100"]);
    eprintln!("healed in {:?}", w.cleared(0));
}
