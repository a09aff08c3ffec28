//! How the pod monitor's traffic grows with the pod: the sans-IO cores simulated for pods of
//! 16 to 1,000 hosts (2 rails, 16 hosts per ToR, 100 ms probe period), in virtual time — no
//! sockets, so the figures are the protocol's, not this machine's. Per host: the membership
//! datagrams (SWIM probes, gossip, and the path reports every host broadcasts when they
//! change, when a host comes up and every 30 s — the measured window holds no periodic
//! republish), the RDMA probes of a healthy pod and their answers, and how long a dead host
//! takes to be declared down everywhere.
//!
//! `cargo bench -p podnet-pod --bench scale` (or `-- 16 64` for some sizes only).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pod::member::{Health, Id, Membership, Timeouts};
use pod::probe::{HEADER, LoopHealth, ProbeConfig, Prober};
use topology::Pod;

/// Frame overhead of a UDP datagram on Ethernet/IPv4 (membership), and of a RoCEv2 UD SEND
/// (Ethernet, IPv4, UDP, BTH, DETH, ICRC).
const UDP_OVERHEAD: usize = 42;
const ROCE_UD_OVERHEAD: usize = 58;

fn pod_of(hosts: usize, rails: usize, per: usize) -> Pod {
    let hosts: Vec<serde_json::Value> = (0..hosts)
        .map(|i| {
            let rails: Vec<serde_json::Value> = (0..rails)
                .map(|r| {
                    serde_json::json!({
                        "device": format!("soft:10.{}.{}.{}", r + 1, i / 250, i % 250 + 1),
                        "tor": format!("rack{}-rail{r}", i / per),
                    })
                })
                .collect();
            serde_json::json!({"name": format!("h{i}"), "rails": rails})
        })
        .collect();
    serde_json::from_value(serde_json::json!({"pairs": "rail-aligned", "hosts": hosts}))
        .expect("a pod")
}

fn id(h: usize) -> Id {
    Id {
        host: h as u16,
        incarnation: 1,
        boot: 1,
        addrs: vec![
            std::net::SocketAddr::from(([10, 1, (h / 250) as u8, (h % 250 + 1) as u8], 7946)),
            std::net::SocketAddr::from(([10, 2, (h / 250) as u8, (h % 250 + 1) as u8], 7946)),
        ],
        qpns: vec![0x100 + h as u32, 0x200 + h as u32],
    }
}

struct Figures {
    report_bytes: usize,
    members_bps: f64,
    probe_small_bps: f64,
    probe_large_bps: f64,
    detect: Option<Duration>,
}

fn simulate(n: usize) -> Figures {
    let pod = pod_of(n, 2, 16);
    let t0 = Instant::now();
    // Each host's broadcast report with every path probed and ok (a healthy pod).
    let cfg = ProbeConfig::default();
    let mut reports = Vec::new();
    // Probes per round, small and near-MTU, on average (host 0's).
    let mut per_round = (0.0, 0.0);
    for h in 0..n {
        let mut p = Prober::new(&pod, h, cfg, t0);
        // Enough rounds for the rotation to visit every other ToR.
        let mut now = t0;
        let rounds = ((n / 16) / cfg.calm_inter_tor + 2) * 4;
        let mut sent = (0usize, 0usize);
        for _ in 0..rounds {
            for o in p.poll(now, &[pod::probe::NO_ADDR; 2], &[1, 2]) {
                if o.packet.large {
                    sent.1 += 1;
                } else {
                    sent.0 += 1;
                }
                p.on_reply(&o.packet.answer(0, 0), now + Duration::from_micros(20));
            }
            now += cfg.period;
        }
        if h == 0 {
            per_round = (sent.0 as f64 / rounds as f64, sent.1 as f64 / rounds as f64);
        }
        reports.push(p.broadcast(LoopHealth::default()).encode());
    }
    let report_bytes = reports[0].len();
    // Membership in virtual time.
    let step = Duration::from_millis(if n >= 256 { 2 } else { 1 });
    let mut ms: Vec<Membership> =
        (0..n).map(|h| Membership::new(id(h), n, Timeouts::default(), h as u64, t0)).collect();
    for (h, m) in ms.iter_mut().enumerate() {
        // Seeds: a few hosts, as a large pod's agents would join through.
        let seeds: Vec<Id> = (0..n.min(8)).filter(|&o| o != h).map(id).collect();
        let _ = m.join(&seeds, t0);
    }
    let mut flight: BTreeMap<(Instant, u64), (usize, Vec<u8>)> = BTreeMap::new();
    let mut seq = 0u64;
    let mut now = t0;
    let mut sent_bytes = 0usize;
    let warm = Duration::from_secs(4);
    let measure = Duration::from_secs(6);
    let mut published = vec![t0 - Duration::from_secs(60); n];
    let dead = n / 2;
    let mut died_at = None;
    let mut down_everywhere = None;
    let end = warm + measure + Duration::from_secs(3);
    while now.duration_since(t0) < end {
        now += step;
        let since = now.duration_since(t0);
        if since >= warm + measure && died_at.is_none() {
            died_at = Some(now);
        }
        while let Some((&(at, s), _)) = flight.first_key_value() {
            if at > now {
                break;
            }
            let Some((to, data)) = flight.remove(&(at, s)) else { break };
            if died_at.is_some() && to == dead {
                continue;
            }
            let _ = ms[to].handle_datagram(&data, now);
        }
        for h in 0..n {
            if died_at.is_some() && h == dead {
                continue;
            }
            if now.duration_since(published[h]) >= pod::agent::REPUBLISH {
                let _ = ms[h].publish(reports[h].clone());
                published[h] = now;
            }
            let _ = ms[h].handle_timeouts(now);
            while let Some((to, data)) = ms[h].poll_transmit() {
                if since >= warm && since < warm + measure {
                    // A copy per rail.
                    sent_bytes += 2 * (data.len() + UDP_OVERHEAD);
                }
                seq += 1;
                flight
                    .insert((now + Duration::from_micros(100), seq), (usize::from(to.host), data));
            }
        }
        if let Some(d) = died_at
            && down_everywhere.is_none()
            && (0..n).filter(|&h| h != dead).all(|h| {
                ms[h].members().get(&(dead as u16)).is_some_and(|m| m.health == Health::Down)
            })
        {
            down_everywhere = Some(now.duration_since(d));
        }
    }
    let members_bps = sent_bytes as f64 * 8.0 / measure.as_secs_f64() / n as f64;
    let rounds = 1.0 / cfg.period.as_secs_f64();
    // A probe and its answer: this host sends its probes and answers as many.
    let probe_small_bps = 2.0 * per_round.0 * rounds * (HEADER + ROCE_UD_OVERHEAD) as f64 * 8.0;
    let probe_large_bps = per_round.1 * rounds * (cfg.large + ROCE_UD_OVERHEAD) as f64 * 8.0
        + per_round.1 * rounds * (HEADER + ROCE_UD_OVERHEAD) as f64 * 8.0;
    Figures { report_bytes, members_bps, probe_small_bps, probe_large_bps, detect: down_everywhere }
}

fn main() {
    let sizes: Vec<usize> = {
        let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        if args.is_empty() { vec![16, 64, 256, 1000] } else { args }
    };
    println!(
        "| hosts | report bytes | membership, per host | small probes + answers, per host | near-MTU probes + answers, per host | a dead host down everywhere after |"
    );
    println!("|---|---|---|---|---|---|");
    for n in sizes {
        let wall = Instant::now();
        let f = simulate(n);
        println!(
            "| {n} | {} | {:.3} Mbit/s | {:.3} Mbit/s | {:.2} Mbit/s | {} |",
            f.report_bytes,
            f.members_bps / 1e6,
            f.probe_small_bps / 1e6,
            f.probe_large_bps / 1e6,
            f.detect.map_or("not within 3 s".into(), |d| format!("{:.2} s", d.as_secs_f64()))
        );
        eprintln!("({n} hosts simulated in {:.1} s)", wall.elapsed().as_secs_f64());
    }
}
