//! `podnet burnin --resilient --pod PLAN`: the flags, joining the pod, the progress bar and
//! the output around the resilient burn-in (`burnin::resilient`: the patterns over the pod
//! agent's channels, through a failure).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use burnin::pattern::Pattern;
use burnin::resilient::{self, HEAD, Plan};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pod::agent::{MAX_MESSAGE, PodAgent};
use serde_json::json;

use crate::cli::BurninArgs;

/// Runs this host's part.
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
    let secret = super::world::secret(&args.world)?;
    let cfg = super::pod::agent_config(plan, &args.pod_opts, secret.as_ref())?;
    let me = cfg.me;
    let names: Vec<String> = cfg.pod.hosts.iter().map(|h| h.name.clone()).collect();
    let agent = PodAgent::start(cfg, std::sync::Arc::new(pod::agent::NoObserver))
        .context("cannot join the pod")?;
    let started = Instant::now();
    while !agent.all_alive() {
        ensure!(started.elapsed() < join, "the pod's hosts did not all join within {join:?}");
        std::thread::sleep(Duration::from_millis(50));
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
    let plan = Plan { me, names: names.clone(), patterns, size, seconds, rate };
    let outcome = resilient::run(&agent, &plan, &mut |t| {
        bar.set_message(format!(
            "{} messages sent, {} received, {} undeliverable",
            t.sent, t.received, t.undeliverable
        ));
        bar.tick();
    })?;
    bar.finish_and_clear();
    let status = agent.status();
    let (counters, relayed) = agent.channel_counters();
    let v = json!({
        "host": names[me],
        "size": size,
        "seconds": outcome.elapsed.as_secs_f64(),
        "ok": outcome.ok,
        "peers": outcome.peers,
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
        let down = &outcome.down;
        writeln!(
            out,
            "{}: {} — {} messages of {size} bytes sent, {} received and checked; {} route changes; down: {}",
            names[me],
            if outcome.ok { "every message among the survivors arrived once" } else { "FAILED" },
            outcome.totals.sent,
            outcome.totals.received,
            agent.route_events().len(),
            if down.is_empty() {
                "none".to_string()
            } else {
                down.iter().map(|d| names[*d].clone()).collect::<Vec<_>>().join(", ")
            }
        )?;
        for p in &outcome.peers {
            if p.undeliverable_count != 0 || !p.every_message_once {
                writeln!(out, "  {}", serde_json::to_string(p)?)?;
            }
        }
    }
    agent.stop();
    Ok(if outcome.ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
