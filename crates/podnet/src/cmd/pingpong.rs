//! `podnet pingpong`: ibv_rc_pingpong's options and output around `perf::pingpong`, its
//! protocol on podnet's verbs.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use perf::pingpong::{self, Dest, Options, Session};
use providers::{ContextOptions, Progress};
use serde_json::json;
use verbs::Mtu;

use crate::cli::PingpongArgs;

/// Runs `podnet pingpong`.
pub(crate) fn run(args: &PingpongArgs) -> anyhow::Result<ExitCode> {
    ensure!(args.dev.ib_port == 1, "-i {}: the device has one port, 1", args.dev.ib_port);
    ensure!(args.iters > 0, "--iters must be at least 1");
    ensure!(args.rx_depth >= 2, "--rx-depth must be at least 2");
    let Some(path_mtu) = Mtu::from_bytes(args.mtu) else {
        bail!("--mtu must be 256, 512, 1024, 2048 or 4096, not {}", args.mtu);
    };
    let timeout = match args.timeout {
        Some(t) => Some(super::world::secs("--timeout", t)?),
        None => None,
    };
    let progress = if args.events { Progress::Event } else { Progress::Busy };
    let opts = ContextOptions { progress, gid_index: args.gid_idx, ..Default::default() };
    let ctx = super::open_device(&args.dev, &opts)?;
    // What the device takes, before anything is allocated.
    let lim = ctx.query_device()?;
    ensure!(
        args.rx_depth <= lim.max_qp_wr,
        "--rx-depth {}: {} takes at most {} work requests per queue",
        args.rx_depth,
        ctx.device_name(),
        lim.max_qp_wr
    );
    let ip = ctx.ip();
    let opts = Options {
        size: args.size as usize,
        iters: args.iters,
        rx_depth: args.rx_depth,
        path_mtu,
        events: args.events,
        timeout,
        verify: args.verify,
        chk: args.chk,
        client: args.server.is_some(),
        gid_index: args.gid_idx,
    };
    let mut s = Session::new(ctx, opts)?;
    let local = s.local();
    let connect = |remote: &Dest, peer| s.connect(remote, peer);
    let remote = match &args.server {
        Some(host) => pingpong::client_exchange(host, args.dev.port, &local, timeout, &connect)?,
        None => pingpong::server_exchange(ip, args.dev.port, &local, timeout, &connect)?,
    };
    if !args.json {
        writeln!(std::io::stdout(), "{}", local.line("local"))?;
        writeln!(std::io::stdout(), "{}", remote.line("remote"))?;
    }
    // A progress bar on stderr for runs that last: shown after 2 s, to a terminal only.
    let bar =
        ProgressBar::with_draw_target(Some(u64::from(args.iters)), ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} iters {per_sec} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let mut bar_shown = false;
    let outcome = s.run(&mut |received| {
        if !bar_shown && start.elapsed() > Duration::from_secs(2) && std::io::stderr().is_terminal()
        {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar_shown = true;
        }
        bar.set_position(u64::from(received));
    });
    bar.finish_and_clear();
    let o = match outcome {
        Ok(o) => o,
        Err(e @ pingpong::Error::Completion { .. }) => {
            eprintln!("podnet: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    report(args, &s, &local, &remote, &o)
}

/// The result: rc_pingpong's lines, or one JSON object.
fn report(
    args: &PingpongArgs,
    s: &Session,
    local: &Dest,
    remote: &Dest,
    o: &pingpong::Outcome,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for page in &o.invalid_pages {
        writeln!(out, "invalid data in page {page}")?;
    }
    let (usec, bytes, iters) = (o.usec, o.bytes, args.iters);
    let ctx = s.context();
    if args.json {
        let c: serde_json::Map<String, serde_json::Value> =
            ctx.counters().iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let dest = |d: &Dest| {
            json!({"lid": d.lid, "qpn": d.qpn, "psn": d.psn,
                   "gid": d.gid.to_ip().map(|i| i.to_string())})
        };
        let v = json!({
            "device": ctx.device_name(),
            "role": if args.server.is_some() { "client" } else { "server" },
            "local": dest(local),
            "remote": dest(remote),
            "size": args.size,
            "iters": iters,
            "bytes": bytes,
            "seconds": usec / 1e6,
            "mbit_per_sec": bytes as f64 * 8.0 / usec,
            "usec_per_iter": usec / f64::from(iters),
            "progress": if args.events { "event" } else { "busy" },
            "verify": args.verify.then(|| json!({
                "bytes_checked": o.verified,
                "ok": o.bad.is_none(),
                "error": o.bad,
            })),
            "counters": c,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
            usec / 1e6,
            bytes as f64 * 8.0 / usec
        )?;
        writeln!(
            out,
            "{iters} iters in {:.2} seconds = {:.2} usec/iter",
            usec / 1e6,
            usec / f64::from(iters)
        )?;
        if args.verify && o.bad.is_none() {
            writeln!(out, "verified {} bytes in {} messages", o.verified, o.received)?;
        }
    }
    if let Some(b) = &o.bad {
        eprintln!("podnet: --verify: {b}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
