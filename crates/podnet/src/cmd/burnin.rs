//! `podnet burnin`: this rank's part of a multi-host burn-in.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use burnin::pattern::Pattern;
use burnin::run::{End, Live, Plan};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use providers::{ContextOptions, Progress};
use qualify::check::{Measurement, Threshold};
use qualify::report::Report;
use rendezvous::bootstrap::BootstrapError;

use crate::cli::BurninArgs;

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "?".into(), |h| h.trim().to_string())
}

/// Runs `podnet burnin`.
pub(crate) fn run(args: &BurninArgs) -> anyhow::Result<ExitCode> {
    if args.resilient {
        return super::resilient::run(args);
    }
    let plan = plan_of(args)?;
    let seconds = plan.seconds;
    let t = super::world::timeouts(&args.world)?;
    let world = super::world::resolve(&args.world)?;
    let secret = super::world::secret(&args.world)?;
    let opts = ContextOptions { progress: Progress::Event, ..Default::default() };
    let ctx = providers::open(&args.ib_dev, &opts)?;
    let host = hostname();
    let info = serde_json::json!({ "ip": ctx.ip().to_string(), "port": args.port, "device": ctx.device_name() });
    let started = Instant::now();
    let title = format!("burn-in, rank {} of {}", world.rank, world.size);
    let session = match rendezvous::bootstrap::join(&world, &host, info, &t, secret.as_ref()) {
        Ok(s) => s,
        Err(
            e @ (BootstrapError::NotJoined { .. }
            | BootstrapError::Lost(_)
            | BootstrapError::Unreachable { .. }),
        ) => {
            eprintln!("podnet burnin: rank {}: {e}", world.rank);
            if let Some(dir) = &args.report_dir {
                let lost = lost_check("burnin/join", &e.to_string());
                write_reports(dir, &title, vec![lost], started.elapsed())?;
            }
            return Ok(ExitCode::from(1));
        }
        Err(e) => bail!(e),
    };
    let live = Arc::new(Live::default());
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() && !args.json {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] rank {prefix} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_prefix(format!("{}/{}", world.rank, world.size));
    let ticker = {
        let (bar, live) = (bar.clone(), live.clone());
        std::thread::spawn(move || {
            let mut last = (Instant::now(), 0u64);
            while !bar.is_finished() {
                std::thread::sleep(Duration::from_millis(500));
                let b = live.bytes.load(Ordering::Relaxed);
                let dt = last.0.elapsed().as_secs_f64().max(1e-3);
                let mbps = (b - last.1) as f64 / dt / (1 << 20) as f64;
                last = (Instant::now(), b);
                bar.set_message(format!(
                    "{mbps:.0} MB/s sent, {} messages, {} damaged",
                    live.messages.load(Ordering::Relaxed),
                    live.errors.load(Ordering::Relaxed)
                ));
                bar.tick();
            }
        })
    };
    let result = burnin::run::run(&session, &ctx, &plan, args.port, &live);
    bar.finish_and_clear();
    let _ = ticker.join();
    let edges = match result {
        Ok(e) => e,
        Err(f) => {
            eprintln!("podnet burnin: rank {}: stopping: {f}", world.rank);
            if let Some(dir) = &args.report_dir {
                // The lost rank is the failed check; what this rank measured stopped with it.
                let lost = match session.failure() {
                    Some(l) => lost_rank_check(&l),
                    None => lost_check("burnin/run", &f.to_string()),
                };
                let checks = vec![lost, silence_check(&session)];
                write_reports(dir, &title, checks, started.elapsed())?;
            }
            return Ok(ExitCode::from(1));
        }
    };
    let ok = edges.iter().all(|e| e.ok());
    let mut out = std::io::stdout().lock();
    for e in edges.iter().filter(|e| !e.ok()) {
        let what = match (&e.error, &e.first_damage) {
            (Some(err), _) => format!("failed: {err}"),
            (None, Some(d)) => {
                format!("{} of {} messages damaged; first: {d}", e.damaged, e.messages)
            }
            (None, None) => "no message arrived".to_string(),
        };
        eprintln!(
            "podnet burnin: rank {}: {} rank {} -> rank {} (peer {}): {what}",
            world.rank, e.pattern, e.src, e.dst, e.peer_host
        );
    }
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "rank": world.rank,
                "world_size": world.size,
                "ok": ok,
                "seconds": started.elapsed().as_secs_f64(),
                "longest_silence_ms": session.longest_silence().as_secs_f64() * 1e3,
                "edges": edges,
            })
        )?;
    } else {
        print_edges(&mut out, &edges)?;
    }
    // Every rank's verdict, through rank 0: one rank's damage fails them all.
    let silence_ms = session.longest_silence().as_secs_f64() * 1e3;
    let silence = silence_check(&session);
    let verdict = session.finish(ok);
    if let Some(dir) = &args.report_dir {
        let mut r = Report::new(&title);
        for e in &edges {
            r.checks.push(edge_check(e, seconds));
        }
        r.checks.push(silence);
        // A rank lost at the end, or another rank's failure, fails this report too.
        match &verdict {
            Err(BootstrapError::Lost(l)) => r.checks.push(lost_rank_check(l)),
            Err(e) => r.checks.push(lost_check("burnin/verdict", &e.to_string())),
            Ok(()) => {}
        }
        write_reports(dir, &title, r.checks, started.elapsed())?;
    }
    match verdict {
        Ok(()) if ok => {
            if !args.json {
                writeln!(
                    out,
                    "rank {}: clean — {} edges, {:.1} s; longest heartbeat silence {:.0} ms",
                    world.rank,
                    edges.len(),
                    started.elapsed().as_secs_f64(),
                    silence_ms
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Ok(()) => Ok(ExitCode::from(1)),
        Err(e) => {
            eprintln!("podnet burnin: rank {}: {e}", world.rank);
            Ok(ExitCode::from(1))
        }
    }
}

/// The burn-in's plan from the flags: patterns, sizes, duration, count, QPs, memory.
fn plan_of(args: &BurninArgs) -> anyhow::Result<Plan> {
    let patterns: Vec<Pattern> = if args.patterns == "all" {
        Pattern::ALL.to_vec()
    } else {
        args.patterns
            .split(',')
            .map(|p| {
                Pattern::from_name(p.trim()).ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown pattern {p:?} (all-to-all, ring, pipeline, incast, bisection, all)"
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let sizes: Vec<usize> = args
        .sizes
        .split(',')
        .map(|s| s.trim().parse::<usize>().ok().filter(|n| (1..=1 << 26).contains(n)))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--sizes {:?}: comma-separated sizes between 1 and 2^26 bytes",
                args.sizes
            )
        })?;
    let seconds = super::world::secs("--duration", args.duration)?.as_secs_f64();
    ensure!((1..=64).contains(&args.qps), "--qps must be between 1 and 64");
    ensure!(args.count != Some(0), "--count must be at least 1");
    let memory = memory_placement(&args.memory)?;
    Ok(Plan {
        patterns,
        extreme: args.extreme,
        sizes,
        seconds,
        count: args.count,
        qps: args.qps,
        memory,
    })
}

/// One line per edge: its pattern, ranks, end, verdict and figures.
fn print_edges(out: &mut impl Write, edges: &[burnin::run::EdgeResult]) -> anyhow::Result<()> {
    for e in edges {
        let mut parts = Vec::new();
        if e.end == End::Sender {
            match (e.latency.is_empty(), e.mb_per_s) {
                (false, _) => parts.push(latency_text(e)),
                (true, Some(m)) => parts.push(format!("{m:.1} MB/s")),
                (true, None) => {}
            }
        }
        if e.checks {
            parts.push(format!(
                "{} messages, {} bytes checked, {} damaged",
                e.messages, e.bytes, e.damaged
            ));
        }
        let figure = match (parts.is_empty(), e.end) {
            (false, _) => parts.join("; "),
            (true, End::Receiver) => "the target: the initiator checks the bytes".into(),
            (true, End::Sender) => "-".into(),
        };
        writeln!(
            out,
            "{:<10} {:>3} -> {:<3} {:<8} {:<4} {figure}",
            e.pattern,
            e.src,
            e.dst,
            match e.end {
                End::Sender => "sender",
                End::Receiver => "receiver",
            },
            if e.ok() { "ok" } else { "FAIL" }
        )?;
    }
    Ok(())
}

/// The report's check of one edge: the burn-in's verdict, with the figure it rests on.
fn edge_check(e: &burnin::run::EdgeResult, seconds: f64) -> qualify::report::Check {
    let name = format!(
        "burnin/{}/{}->{}/{}",
        e.pattern,
        e.src,
        e.dst,
        match (e.checks, e.latency.is_empty()) {
            (true, _) => "integrity",
            (false, false) => "latency",
            (false, true) => "bandwidth",
        }
    );
    let took = Duration::from_secs_f64(seconds);
    // The burn-in judged each edge (every byte checked at the receiver): the report
    // carries that verdict, with the figure it rests on.
    let m = Measurement::new(&name).took(took);
    let damaged =
        |m: Measurement| m.figure(e.damaged as f64, "damaged messages").threshold_text("= 0");
    match (e.checks, e.ok()) {
        (false, true) => match (e.latency.last(), e.mb_per_s) {
            (Some(l), _) => m.figure(l.p99_9_us, "µs p99.9"),
            (None, Some(v)) => m.figure(v, "MB/s"),
            (None, None) => m,
        }
        .detail(if e.latency.is_empty() {
            format!("peer {}", e.peer_host)
        } else {
            format!("peer {}: {}", e.peer_host, latency_text(e))
        })
        .judge(None),
        (true, true) => damaged(m)
            .want(Threshold::AtMost(0.0))
            .detail(format!("{} messages checked", e.messages))
            .judge(None),
        (_, false) => damaged(m)
            .want(Threshold::Unset(
                e.error
                    .as_deref()
                    .or(e.first_damage.as_deref())
                    .unwrap_or("no message arrived")
                    .to_string(),
            ))
            .judge(None),
    }
}

/// A check that failed because a rank was lost (or never joined): `why` is what happened.
fn lost_check(name: &str, why: &str) -> qualify::report::Check {
    Measurement::new(name).want(Threshold::Unset(why.to_string())).judge(None)
}

/// The check of a rank that was lost: named by rank and host, failed with why.
fn lost_rank_check(l: &rendezvous::bootstrap::Failure) -> qualify::report::Check {
    lost_check(&format!("burnin/rank {} ({})", l.rank, l.host), &l.reason)
}

/// The longest silence heard from a peer, beside the --dead-after it must stay under: how
/// much margin the run had (heartbeats come late when every core is busy with traffic).
fn silence_check(session: &rendezvous::bootstrap::Session) -> qualify::report::Check {
    let t = session.timeouts();
    Measurement::new("burnin/heartbeat")
        .figure(session.longest_silence().as_secs_f64() * 1e3, "ms longest silence")
        .detail(format!(
            "heartbeats every {:.1} s; a peer silent for {:.1} s is lost",
            t.heartbeat.as_secs_f64(),
            t.dead_after.as_secs_f64()
        ))
        .judge(None)
}

/// Writes report.json, junit.xml and report.html to `dir`.
fn write_reports(
    dir: &std::path::Path,
    title: &str,
    checks: Vec<qualify::report::Check>,
    took: Duration,
) -> anyhow::Result<()> {
    let mut r = Report::new(title);
    r.checks = checks;
    r.seconds = took.as_secs_f64();
    r.summarize();
    Ok(qualify::write_reports(&r, dir)?)
}

/// `--memory host|cuda[:GPU]`, the GPU asked for at once (a host without it says so before
/// it meets the others).
pub(crate) fn memory_placement(spec: &str) -> anyhow::Result<perf::session::Placement> {
    let gpu = match spec.split_once(':') {
        None if spec == "host" => return Ok(perf::session::Placement::Host),
        None if spec == "cuda" => 0,
        Some(("cuda", n)) => n.parse::<u32>().map_err(|_| {
            anyhow::anyhow!("--memory {spec}: the GPU is a CUDA ordinal (cuda:0, cuda:1, …)")
        })?,
        _ => bail!("--memory {spec}: host, cuda or cuda:GPU"),
    };
    gpu::Gpu::open(gpu).map_err(|e| anyhow::anyhow!("--memory {spec}: {e}"))?;
    Ok(perf::session::Placement::Cuda { gpu, dmabuf: false })
}

/// A latency stream's sizes: `4096 B p50 12.1 p99 40.2 p99.9 88.0 µs; …`.
fn latency_text(e: &burnin::run::EdgeResult) -> String {
    e.latency
        .iter()
        .map(|l| {
            format!(
                "{} B p50 {:.1} p99 {:.1} p99.9 {:.1} µs",
                l.size, l.p50_us, l.p99_us, l.p99_9_us
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
