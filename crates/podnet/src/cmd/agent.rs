//! `podnet agent`: RDMA telemetry served to Prometheus, or each port's health once.

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use telemetry::expose::{Format, Scrape};
use telemetry::health::{self, PortHealth, State, Thresholds};
use telemetry::rates::Tracker;
use telemetry::sample::{self, Roots, Snapshot};

use crate::cli::AgentArgs;

struct Agent {
    roots: Roots,
    bench_dir: std::path::PathBuf,
    probe: Option<super::probe::Probe>,
    thresholds: Thresholds,
    epoch: Instant,
    tracker: Mutex<Tracker>,
}

impl Agent {
    fn extra(&self) -> Option<&dyn telemetry::expose::Extra> {
        self.probe.as_ref().map(|p| p as &dyn telemetry::expose::Extra)
    }

    /// A sample with the published benchmarks: what /metrics serves.
    fn scrape(&self) -> Scrape {
        let (mut snap, health) = self.sample();
        let (bench, errors) = telemetry::bench::read_dir(&self.bench_dir);
        snap.errors.extend(errors);
        Scrape { snap, health, bench }
    }

    /// Takes a sample, feeds the rates, judges the ports.
    fn sample(&self) -> (Snapshot, Vec<PortHealth>) {
        let mut snap = sample::collect(&self.roots);
        if let Some(p) = &self.probe {
            p.run_burst();
            snap.ports.extend(p.ports());
        }
        let t = self.epoch.elapsed().as_secs_f64();
        let mut tr = self.tracker.lock().unwrap_or_else(PoisonError::into_inner);
        health::observe(&mut tr, &snap, t);
        let keep = 2.0 * tr.window() + 60.0;
        tr.prune(t - keep);
        let h = health::evaluate(&snap, &tr, &self.thresholds);
        (snap, h)
    }
}

/// Runs `podnet agent`.
pub(crate) fn run(args: &AgentArgs) -> anyhow::Result<ExitCode> {
    let thresholds = match &args.thresholds {
        Some(p) => Thresholds::load(p)?,
        None => Thresholds::default(),
    };
    let interval = args.interval.unwrap_or(if args.once || args.print { 2.0 } else { 5.0 });
    if !(interval.is_finite() && interval > 0.0 && interval <= 3600.0) {
        bail!("--interval must be a number of seconds between 0 and 3600, not {interval}");
    }
    let roots = match &args.sysfs_root {
        Some(dir) => {
            super::check_sysfs_root(dir)?;
            Roots { sys: dir.clone(), proc: args.procfs_root.clone(), live: false }
        }
        None => Roots { proc: args.procfs_root.clone(), ..Roots::host() },
    };
    let probe = if args.probe {
        Some(super::probe::Probe::start().context("cannot start the probe's soft devices")?)
    } else {
        None
    };
    let agent = Arc::new(Agent {
        roots,
        bench_dir: args.bench_dir.clone(),
        probe,
        tracker: Mutex::new(Tracker::new(thresholds.window_seconds)),
        thresholds,
        epoch: Instant::now(),
    });
    if args.once {
        return once(&agent, args, interval);
    }
    if args.print {
        agent.sample();
        std::thread::sleep(Duration::from_secs_f64(interval));
        let om = telemetry::expose::render(Arc::new(agent.scrape()), agent.extra());
        std::io::stdout().lock().write_all(telemetry::expose::to_text_format(&om).as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    serve(agent, args, interval)
}

fn once(agent: &Agent, args: &AgentArgs, interval: f64) -> anyhow::Result<ExitCode> {
    agent.sample();
    std::thread::sleep(Duration::from_secs_f64(interval));
    let (snap, health) = agent.sample();
    let mut out = std::io::stdout().lock();
    if args.json {
        let errors: Vec<serde_json::Value> = snap
            .errors
            .iter()
            .map(|e| {
                serde_json::json!({
                    "source": e.source, "device": e.device, "port": e.port,
                    "path": e.path, "error": e.error,
                })
            })
            .collect();
        let v = serde_json::json!({
            "interval_seconds": interval,
            "ports": health,
            "source_errors": errors,
        });
        writeln!(out, "{v}")?;
    } else {
        print_table(&mut out, &snap, &health)?;
    }
    let all_ok = health.iter().all(|h| h.state == State::Ok);
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_table(
    out: &mut impl Write,
    snap: &Snapshot,
    health: &[PortHealth],
) -> std::io::Result<()> {
    if health.is_empty() {
        writeln!(out, "no RDMA ports (nothing under class/infiniband)")?;
    } else {
        let w = health.iter().map(|h| h.device.len()).max().unwrap_or(6).max(6);
        writeln!(out, "{:<w$}  port  {:<10}  {:<8}  why", "device", "netdev", "health")?;
        for h in health {
            let why = if h.reasons.is_empty() { "-".to_string() } else { h.reasons.join("; ") };
            writeln!(
                out,
                "{:<w$}  {:<4}  {:<10}  {:<8}  {why}",
                h.device,
                h.port,
                h.netdev.as_deref().unwrap_or("-"),
                h.state.as_str()
            )?;
        }
    }
    for e in &snap.errors {
        writeln!(out, "source error: {}: {} ({})", e.path, e.error, e.source)?;
    }
    Ok(())
}

fn serve(agent: Arc<Agent>, args: &AgentArgs, interval: f64) -> anyhow::Result<ExitCode> {
    let server = tiny_http::Server::http(args.listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    eprintln!(
        "podnet agent: serving http://{}/metrics (sampling every {interval} s, health window {} s)",
        args.listen, agent.thresholds.window_seconds
    );
    let sampler = agent.clone();
    std::thread::Builder::new()
        .name("sampler".into())
        .spawn(move || {
            loop {
                sampler.sample();
                std::thread::sleep(Duration::from_secs_f64(interval));
            }
        })
        .context("cannot start the sampler thread")?;
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("").to_string();
        let (status, ctype, body) = match (req.method(), path.as_str()) {
            (tiny_http::Method::Get, "/metrics") => {
                let accept = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Accept"))
                    .map(|h| h.value.as_str().to_string());
                let format = Format::negotiate(accept.as_deref());
                let om = telemetry::expose::render(Arc::new(agent.scrape()), agent.extra());
                let body = match format {
                    Format::OpenMetrics => om,
                    Format::Text => telemetry::expose::to_text_format(&om),
                };
                (200, format.content_type(), body)
            }
            (tiny_http::Method::Get, "/health") => {
                let (_, health) = agent.sample();
                (200, "application/json", serde_json::json!({ "ports": health }).to_string())
            }
            (tiny_http::Method::Get, "/") => (
                200,
                "text/plain; charset=utf-8",
                "podnet agent: /metrics (Prometheus), /health (JSON)\n".to_string(),
            ),
            _ => (404, "text/plain; charset=utf-8", "not found\n".to_string()),
        };
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes())
            .map_err(|()| anyhow::anyhow!("bad header"))?;
        let resp =
            tiny_http::Response::from_string(body).with_status_code(status).with_header(header);
        // A client that went away is its problem, not the agent's.
        let _ = req.respond(resp);
    }
    Ok(ExitCode::SUCCESS)
}
