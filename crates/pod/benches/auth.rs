//! What authenticating the pod's datagrams costs (issue 43): a sealed membership datagram's
//! seal and open, and a probe's tag and check, in ns each; then the CPU of a three-host pod's
//! agents (in this process, soft devices on loopback addresses, the default 100 ms rounds)
//! over the same seconds without a secret and with one, rounds run alternately.
//!
//! `cargo bench -p podnet-pod --bench auth` (or `-- SECONDS ROUNDS`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pod::agent::{AgentConfig, NoObserver, PodAgent};
use pod::probe::{HEADER, SIGNED};
use pod::seal::{PodKey, Purpose, Sealer, unix_us};

/// Median ns per call of `f` over 5 runs of `n`.
fn per_call(n: u32, mut f: impl FnMut()) -> f64 {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

/// This process's CPU time (user + system).
fn cpu() -> Duration {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let t =
        |v: nix::sys::time::TimeVal| Duration::new(v.tv_sec() as u64, (v.tv_usec() as u32) * 1000);
    t(u.user_time()) + t(u.system_time())
}

fn plan(net: u8) -> topology::Pod {
    let hosts: Vec<serde_json::Value> = (1..=3u8)
        .map(|i| {
            let ip = IpAddr::from([127, 78, net, i]);
            serde_json::json!({"name": format!("h{i}"), "rails": [{"device": format!("soft:{ip}"), "tor": "tor0"}]})
        })
        .collect();
    serde_json::from_value(serde_json::json!({"pairs": "rail-aligned", "hosts": hosts})).unwrap()
}

/// CPU seconds per second of the three agents over `secs`, once the pod has formed, and the
/// membership bytes host 0 sent meanwhile.
fn pod_cpu(net: u8, key: Option<PodKey>, secs: u64) -> (f64, u64) {
    let pod = plan(net);
    let agents: Vec<PodAgent> = (0..3)
        .map(|me| {
            let mut cfg = AgentConfig::new(pod.clone(), me);
            cfg.control_port = 18946;
            cfg.key = key.clone();
            PodAgent::start(cfg, Arc::new(NoObserver)).expect("an agent")
        })
        .collect();
    while !agents.iter().all(PodAgent::all_alive) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (c0, b0, t0) = (cpu(), agents[0].status().cost.control_bytes, Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, b1) = (cpu(), agents[0].status().cost.control_bytes);
    let r = ((c1 - c0).as_secs_f64() / t0.elapsed().as_secs_f64(), b1 - b0);
    for a in agents {
        a.stop();
    }
    r
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let secs = args.first().copied().unwrap_or(10);
    let rounds = args.get(1).copied().unwrap_or(3);
    let key = PodKey::new([7; 32]);
    println!("| operation | ns |\n|---|---|");
    for len in [300usize, 1000] {
        let mut a = Sealer::new(Purpose::Membership, Some(&key), 0, 2);
        let mut b = Sealer::new(Purpose::Membership, Some(&key), 1, 2);
        let body = vec![0x5a; len];
        let mut now = unix_us();
        let ns = per_call(100_000, || {
            now += 1;
            let f = a.seal(&body, now);
            std::hint::black_box(b.open(&f, now).is_ok());
        });
        println!("| seal + open, {len}-byte membership datagram | {ns:.0} |");
        let mut plain = Sealer::new(Purpose::Membership, None, 0, 2);
        let mut plain_b = Sealer::new(Purpose::Membership, None, 1, 2);
        let ns = per_call(100_000, || {
            now += 1;
            let f = plain.seal(&body, now);
            std::hint::black_box(plain_b.open(&f, now).is_ok());
        });
        println!("| the same, no secret (framing and replay check only) | {ns:.0} |");
    }
    let k = key.key(Purpose::Probe);
    let mut head = [0x33u8; HEADER];
    let ns = per_call(100_000, || {
        let t = k.tag(&[&head[..SIGNED]]);
        head[SIGNED..].copy_from_slice(&t);
        std::hint::black_box(k.verify(&[&head[..SIGNED]], &head[SIGNED..]));
    });
    println!("| a probe's tag + check ({HEADER} bytes) | {ns:.0} |");
    println!(
        "\n| round | pod CPU, no secret (cores) | with the secret (cores) | host 0 membership bytes, no secret / secret |"
    );
    println!("|---|---|---|---|");
    for round in 0..rounds {
        let net = 10 + 2 * round as u8;
        let (plain, pb) = pod_cpu(net, None, secs);
        let (keyed, kb) = pod_cpu(net + 1, Some(key.clone()), secs);
        println!("| {} | {plain:.3} | {keyed:.3} | {pb} / {kb} |", round + 1);
    }
}
