//! `podnet burnin --resilient --pod PLAN`: the burn-in's patterns over pod channels — every
//! host joins the pod (membership, probes, routes), sends each peer its pattern's messages
//! (a seeded pattern in each, checked where it lands) over reliable ordered channels that
//! fail over along the route table, and goes on through a failure: a host that dies has its
//! messages reported undeliverable by sequence number; among the survivors every message
//! must arrive once, in order, undamaged. At the end each host tells each peer how many
//! messages it sent it (in order, after the last), so each receiver checks its count.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use burnin::pattern::Pattern;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use perf::engine::pattern;
use pod::agent::{MAX_MESSAGE, PodAgent};
use serde_json::json;

use crate::cli::BurninArgs;

/// A message's header: kind 1 (0 data, 1 done), src 2, dst 2, pad 3, count 8 (done: the
/// messages sent).
const HEAD: usize = 16;

fn header(kind: u8, src: usize, dst: usize, count: u64) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[0] = kind;
    h[1..3].copy_from_slice(&(src as u16).to_be_bytes());
    h[3..5].copy_from_slice(&(dst as u16).to_be_bytes());
    h[8..16].copy_from_slice(&count.to_be_bytes());
    h
}

fn seed(src: usize, dst: usize) -> u64 {
    0x7265_7369_6c69_656e ^ ((src as u64) << 16) ^ dst as u64
}

#[derive(Default)]
struct PeerTally {
    sent: u64,
    received: u64,
    damaged: u64,
    duplicates: u64,
    gaps: u64,
    undeliverable: Vec<u64>,
    /// The count the peer said it sent this host (its `done`).
    told: Option<u64>,
    done_sent: bool,
    acked: u64,
    last_progress: Option<Instant>,
    max_stall: Duration,
    stall_at_ms: u64,
    next_seq: u64,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs this host's part.
#[expect(clippy::too_many_lines, reason = "to be split (issue 42)")]
pub(crate) fn run(args: &BurninArgs) -> anyhow::Result<ExitCode> {
    let Some(plan) = &args.pod else { bail!("--resilient runs over a pod: give --pod PLAN") };
    let size: usize = args
        .sizes
        .split(',')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .filter(|n| (HEAD..=MAX_MESSAGE).contains(n))
        .ok_or_else(|| {
            anyhow::anyhow!("--resilient: --sizes takes one size, {HEAD}-{MAX_MESSAGE} bytes (a channel message)")
        })?;
    let patterns: Vec<Pattern> = if args.patterns == "all" {
        vec![Pattern::from_name("all-to-all").context("all-to-all")?]
    } else {
        args.patterns
            .split(',')
            .map(|p| {
                Pattern::from_name(p.trim()).ok_or_else(|| anyhow::anyhow!("unknown pattern {p:?}"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    ensure!(
        !patterns.contains(&Pattern::KvCache),
        "--resilient carries SEND streams over the pod's channels: the kv-cache pattern's one-sided READs and WRITEs run without --resilient"
    );
    let seconds = super::world::secs("--duration", args.duration)?;
    ensure!(
        args.rate_mbit.is_finite() && args.rate_mbit >= 0.0,
        "--rate-mbit must be 0 (no limit) or a positive number of Mbit/s"
    );
    let rate = args.rate_mbit * 1e6 / 8.0; // bytes per second, 0: no limit
    let join = super::world::secs("--join-timeout", args.world.join_timeout)?;
    let cfg = super::pod::agent_config(plan, &args.pod_opts)?;
    let me = cfg.me;
    let n = cfg.pod.hosts.len();
    let names: Vec<String> = cfg.pod.hosts.iter().map(|h| h.name.clone()).collect();
    let agent = PodAgent::start(cfg, std::sync::Arc::new(pod::agent::NoObserver))
        .context("cannot join the pod")?;
    let started = Instant::now();
    while !agent.all_alive() {
        ensure!(started.elapsed() < join, "the pod's hosts did not all join within {join:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Who this host sends to, and who sends to it: the patterns' edges.
    let mut to: Vec<usize> = Vec::new();
    let mut from: Vec<usize> = Vec::new();
    for p in &patterns {
        for (a, b) in p.edges(n as u32) {
            let (a, b) = (a as usize, b as usize);
            if a == me && b != me && !to.contains(&b) {
                to.push(b);
            }
            if b == me && a != me && !from.contains(&a) {
                from.push(a);
            }
        }
    }
    let mut tally: BTreeMap<usize, PeerTally> = BTreeMap::new();
    for &p in to.iter().chain(&from) {
        tally.entry(p).or_default();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() && !args.json {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {prefix} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_prefix(names[me].clone());
    let t0 = Instant::now();
    let mut buf = vec![0u8; size];
    let mut last_tick = t0;
    let drain_limit = seconds + Duration::from_secs(15);
    // The hosts the membership has declared down.
    let down_hosts = |agent: &PodAgent| -> Vec<usize> {
        let s = agent.status();
        s.members
            .iter()
            .filter(|m| m.health == pod::member::Health::Down)
            .map(|m| m.index)
            .collect()
    };
    let mut spent = 0.0f64;
    let mut turn = 0usize;
    let mut dead_now: Vec<usize> = Vec::new();
    let mut dead_at = t0;
    loop {
        let now = Instant::now();
        let sending = now.duration_since(t0) < seconds;
        let budget = |spent: f64| {
            rate == 0.0 || spent + size as f64 <= rate * now.duration_since(t0).as_secs_f64()
        };
        if now.duration_since(dead_at) >= Duration::from_millis(200) {
            dead_at = now;
            dead_now = down_hosts(&agent);
        }
        // Send, a message per live peer in turn, while windows have room and the rate allows.
        let live: Vec<usize> = to.iter().copied().filter(|p| !dead_now.contains(p)).collect();
        let mut moved = sending;
        while moved && !live.is_empty() {
            moved = false;
            for k in 0..live.len() {
                let p = live[(turn + k) % live.len()];
                if agent.pending(p) >= pod::agent::WINDOW || !budget(spent) {
                    continue;
                }
                let t = tally.get_mut(&p).unwrap_or_else(|| unreachable!());
                spent += size as f64;
                buf[..HEAD].copy_from_slice(&header(0, me, p, t.sent));
                pattern::fill(seed(me, p), 0, t.sent, &mut buf[HEAD..]);
                agent.send(p, buf.clone())?;
                t.sent += 1;
                moved = true;
            }
        }
        turn += 1;
        for &p in &to {
            let t = tally.get_mut(&p).unwrap_or_else(|| unreachable!());
            if !sending && !t.done_sent && !dead_now.contains(&p) {
                let mut m = header(1, me, p, t.sent).to_vec();
                m.resize(HEAD, 0);
                agent.send(p, m)?;
                t.done_sent = true;
            }
            // Progress: acknowledged messages (sent, done included, less pending and lost).
            let pending = agent.pending(p) as u64;
            let acked = (t.sent + u64::from(t.done_sent))
                .saturating_sub(pending + t.undeliverable.len() as u64);
            if acked > t.acked || pending == 0 {
                t.acked = acked;
                t.last_progress = Some(now);
            } else if let Some(lp) = t.last_progress {
                let stall = now.duration_since(lp);
                if stall > t.max_stall {
                    t.max_stall = stall;
                    t.stall_at_ms = unix_ms();
                }
            } else {
                t.last_progress = Some(now);
            }
        }
        for u in agent.take_undeliverable() {
            if let Some(t) = tally.get_mut(&usize::from(u.peer)) {
                t.undeliverable.push(u.seq);
            }
        }
        // Receive and check.
        // A batch at most: sending must not starve while messages keep arriving.
        let mut batch = 0;
        while batch < 256
            && let Some(d) = agent.recv(Duration::from_millis(2))
        {
            batch += 1;
            let src = usize::from(d.peer);
            let t = tally.entry(src).or_default();
            let m = &d.payload;
            if m.len() < HEAD || usize::from(u16::from_be_bytes([m[1], m[2]])) != src {
                t.damaged += 1;
                continue;
            }
            if m[0] == 1 {
                t.told = Some(u64::from_be_bytes(m[8..16].try_into().unwrap_or_default()));
                continue;
            }
            let idx = u64::from_be_bytes(m[8..16].try_into().unwrap_or_default());
            match idx.cmp(&t.next_seq) {
                std::cmp::Ordering::Less => t.duplicates += 1,
                std::cmp::Ordering::Greater => {
                    t.gaps += idx - t.next_seq;
                    t.next_seq = idx + 1;
                }
                std::cmp::Ordering::Equal => t.next_seq += 1,
            }
            if pattern::check(seed(src, me), 0, idx, &m[HEAD..]).is_some() {
                t.damaged += 1;
            }
            t.received += 1;
        }
        if now.duration_since(last_tick) >= Duration::from_millis(500) {
            last_tick = now;
            let sent: u64 = tally.values().map(|t| t.sent).sum();
            let got: u64 = tally.values().map(|t| t.received).sum();
            let lost: usize = tally.values().map(|t| t.undeliverable.len()).sum();
            bar.set_message(format!("{sent} messages sent, {got} received, {lost} undeliverable"));
            bar.tick();
        }
        if !sending {
            // Done when every live peer has acknowledged everything and said what it sent.
            let settled = tally.iter().all(|(&p, t)| {
                let dead = dead_now.contains(&p);
                let out_done = !to.contains(&p) || agent.pending(p) == 0 || dead;
                let in_done = !from.contains(&p) || t.told.is_some() || dead;
                out_done && in_done
            });
            if settled || now.duration_since(t0) > drain_limit {
                break;
            }
        }
    }
    bar.finish_and_clear();
    // Whatever is still queued to a host that is down will never be delivered: say so.
    let dead = down_hosts(&agent);
    for &p in to.iter().filter(|p| dead.contains(p)) {
        agent.give_up(p);
    }
    for u in agent.take_undeliverable() {
        if let Some(t) = tally.get_mut(&usize::from(u.peer)) {
            t.undeliverable.push(u.seq);
        }
    }
    let status = agent.status();
    let mut ok = true;
    let mut peers = Vec::new();
    for (&p, t) in &tally {
        let is_dead = dead.contains(&p);
        let count_ok = match t.told {
            Some(c) => c == t.received,
            None => is_dead || !from.contains(&p),
        };
        let clean = t.damaged == 0 && t.duplicates == 0 && (t.gaps == 0 || is_dead) && count_ok;
        let lost_ok = t.undeliverable.is_empty() || is_dead;
        if !(clean && lost_ok) {
            ok = false;
        }
        peers.push(json!({
            "peer": names[p],
            "down": is_dead,
            "sent": t.sent,
            "received": t.received,
            "told": t.told,
            "damaged": t.damaged,
            "duplicates": t.duplicates,
            "gaps": t.gaps,
            "undeliverable": ranges(&t.undeliverable),
            "undeliverable_count": t.undeliverable.len(),
            "max_stall_ms": t.max_stall.as_millis() as u64,
            "max_stall_at_unix_ms": t.stall_at_ms,
            "every_message_once": clean,
        }));
    }
    let (counters, relayed) = agent.channel_counters();
    let v = json!({
        "host": names[me],
        "size": size,
        "seconds": t0.elapsed().as_secs_f64(),
        "ok": ok,
        "peers": peers,
        "route_events": agent.route_events(),
        "member_events": status.events.iter().filter(|e| e.kind == "member").collect::<Vec<_>>(),
        "finding_events": status.events.iter().filter(|e| e.kind.starts_with("finding")).collect::<Vec<_>>(),
        "findings": status.findings,
        "channels": counters,
        "relayed": relayed,
    });
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{v}")?;
    } else {
        let sent: u64 = tally.values().map(|t| t.sent).sum();
        let got: u64 = tally.values().map(|t| t.received).sum();
        writeln!(
            out,
            "{}: {} — {sent} messages of {size} bytes sent, {got} received and checked; {} route changes; down: {}",
            names[me],
            if ok { "every message among the survivors arrived once" } else { "FAILED" },
            agent.route_events().len(),
            if dead.is_empty() {
                "none".to_string()
            } else {
                dead.iter().map(|d| names[*d].clone()).collect::<Vec<_>>().join(", ")
            }
        )?;
        for p in &peers {
            if p["undeliverable_count"] != 0 || p["every_message_once"] == false {
                writeln!(out, "  {p}")?;
            }
        }
    }
    agent.stop();
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `1-5,9` from sorted numbers.
fn ranges(v: &[u64]) -> String {
    let mut v = v.to_vec();
    v.sort_unstable();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    out.join(",")
}
