//! `podnet doctor`: why a host or NIC underperforms, from the live host or a recording.

use std::io::Write;
use std::process::ExitCode;

use doctor::{Severity, Source};

use crate::cli::DoctorArgs;

/// Runs `podnet doctor`.
pub(crate) fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    if !args.compare.is_empty() {
        return compare(args);
    }
    let mut src = match &args.root {
        Some(dir) => Source::recorded(dir)?,
        None => Source::live(),
    };
    if let Some(dir) = &args.record {
        src = src.recording_into(dir)?;
    }
    if args.world.given() {
        return pod(args, &src);
    }
    let report = doctor::diagnose(&src);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let devs = if report.devices.is_empty() {
            "no RDMA devices".to_string()
        } else {
            format!("RDMA devices {}", report.devices.join(", "))
        };
        let log = match &report.log {
            Some(l) => format!("kernel log: {} lines read", l.lines),
            None if src.is_live() => "kernel log: not read (/dev/kmsg needs root)".into(),
            None => "kernel log: not recorded (no kmsg)".into(),
        };
        let host = report.host.as_deref().unwrap_or("this host");
        writeln!(out, "podnet doctor: {host}: {devs}; {log}")?;
        if !report.versions.is_empty() {
            let v: Vec<String> = report.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(out, "versions: {}", v.join("; "))?;
        }
        for f in &report.findings {
            writeln!(out)?;
            writeln!(
                out,
                "{:<8} {:<24} {}: {}",
                f.severity.word().to_uppercase(),
                f.kind,
                f.component,
                f.seen
            )?;
            writeln!(out, "         why: {}", f.why)?;
            if f.fix != "—" {
                writeln!(out, "         fix: {}", f.fix)?;
            }
            for e in &f.evidence {
                writeln!(out, "         evidence: {e}")?;
            }
        }
        let n = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
        writeln!(out)?;
        writeln!(
            out,
            "{} errors, {} warnings, {} notes{}",
            n(Severity::Error),
            n(Severity::Warning),
            n(Severity::Info),
            args.record
                .as_ref()
                .map(|d| format!("; everything read is recorded in {}", d.display()))
                .unwrap_or_default()
        )?;
    }
    Ok(if report.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `podnet doctor --compare DIR…`: several recorded hosts side by side.
fn compare(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut reports = Vec::new();
    for dir in &args.compare {
        let r = doctor::diagnose(&Source::recorded(dir)?);
        let name = r.host.clone().unwrap_or_else(|| dir.display().to_string());
        reports.push((name, r));
    }
    side_by_side(args.json, &reports, "podnet doctor --root DIR for each host's")
}

/// Hosts' reports side by side: each host's error and warning counts and versions, the
/// versions a host does not share with most (`*`), and each host's errors; `more` says where
/// the rest of a host's report is. Exit 1 when a host has an error or a version differs.
fn side_by_side(
    json: bool,
    reports: &[(String, doctor::Report)],
    more: &str,
) -> anyhow::Result<ExitCode> {
    let mismatches = doctor::compare(reports);
    let mut out = std::io::stdout().lock();
    if json {
        let hosts: Vec<serde_json::Value> = reports
            .iter()
            .map(|(h, r)| {
                serde_json::json!({
                    "host": h,
                    "errors": r.errors(),
                    "warnings": r.count(Severity::Warning),
                    "versions": r.versions,
                    "findings": r.findings,
                })
            })
            .collect();
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({ "hosts": hosts, "findings": mismatches }),
        )?;
        writeln!(out)?;
    } else {
        let mut keys: Vec<&String> = reports.iter().flat_map(|(_, r)| r.versions.keys()).collect();
        keys.sort();
        keys.dedup();
        let w = reports.iter().map(|(h, _)| h.len()).max().unwrap_or(4).max(4);
        // Each version's column as wide as its name or its widest value (with a `*`).
        let kw: Vec<usize> = keys
            .iter()
            .map(|k| {
                let v = reports.iter().filter_map(|(_, r)| r.versions.get(*k)).map(String::len);
                v.max().unwrap_or(1).saturating_add(1).max(k.len())
            })
            .collect();
        let mut line = format!("{:<w$}  {:>6}  {:>8}", "host", "errors", "warnings");
        for (k, kw) in keys.iter().zip(&kw) {
            line += &format!("  {k:<kw$}");
        }
        writeln!(out, "{}", line.trim_end())?;
        for (h, r) in reports {
            let mut line = format!("{h:<w$}  {:>6}  {:>8}", r.errors(), r.count(Severity::Warning));
            for (k, kw) in keys.iter().zip(&kw) {
                let v = r.versions.get(*k).map_or("-", String::as_str);
                let odd = mismatches
                    .iter()
                    .any(|f| &f.component == h && f.seen.starts_with(&format!("{k} ")));
                let cell = format!("{}{v}", if odd { "*" } else { "" });
                line += &format!("  {cell:<kw$}");
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        for f in &mismatches {
            writeln!(out, "\nWARNING  {:<24} {}: {}", f.kind, f.component, f.seen)?;
            writeln!(out, "         fix: {}", f.fix)?;
        }
        for (h, r) in reports {
            for f in r.findings.iter().filter(|f| f.severity == Severity::Error) {
                writeln!(out, "\nERROR    {:<24} {h}: {}: {}", f.kind, f.component, f.seen)?;
                if f.fix != "—" {
                    writeln!(out, "         fix: {}", f.fix)?;
                }
            }
        }
        writeln!(
            out,
            "\n{} hosts, {} version mismatches (* above), {} errors in all ({more})",
            reports.len(),
            mismatches.len(),
            reports.iter().map(|(_, r)| r.errors()).sum::<usize>()
        )?;
    }
    let errors = reports.iter().any(|(_, r)| r.errors() > 0);
    Ok(if errors || !mismatches.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `podnet doctor --hostfile FILE` (or another launcher): every rank diagnoses its own host
/// and sends the report to rank 0, which prints them side by side.
fn pod(args: &DoctorArgs, src: &Source) -> anyhow::Result<ExitCode> {
    let t = super::world::timeouts(&args.world)?;
    let world = super::world::resolve(&args.world)?;
    let secret = super::world::secret(&args.world)?;
    let report = doctor::diagnose(src);
    let me = rendezvous::world::hostname();
    let name = report.host.clone().unwrap_or_else(|| me.clone());
    let info = serde_json::json!({ "host": name });
    eprintln!(
        "podnet doctor: rank {} of {} ({name}): {} errors, {} warnings; meeting at {}",
        world.rank,
        world.size,
        report.errors(),
        report.count(Severity::Warning),
        world.coordinator
    );
    let session = rendezvous::bootstrap::join(&world, &me, info, &t, secret.as_ref())?;
    if world.rank != 0 {
        // Room for the message's envelope under the line limit.
        let sent = report.fit(rendezvous::bootstrap::LINE_LIMIT - 1024);
        session.send(0, serde_json::to_value(&sent)?)?;
        session.finish(true)?;
        println!(
            "rank {} ({name}): report sent to rank 0 ({} errors, {} warnings here)",
            world.rank,
            report.errors(),
            report.count(Severity::Warning)
        );
        return Ok(if report.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS });
    }
    let n = world.size as usize;
    let mut got: Vec<Option<doctor::Report>> = vec![None; n];
    got[0] = Some(report);
    let until = std::time::Instant::now() + t.join.max(std::time::Duration::from_secs(60));
    while got.iter().any(Option::is_none) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let missing = || {
            got.iter()
                .enumerate()
                .filter(|(_, r)| r.is_none())
                .map(|(i, _)| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        anyhow::ensure!(!left.is_zero(), "no report came from rank {} in time", missing());
        if let Some((rank, body)) = session.recv(left)? {
            let r: doctor::Report = serde_json::from_value(body).map_err(|e| {
                anyhow::anyhow!("rank {rank} sent a report podnet cannot read: {e}")
            })?;
            if let Some(slot) = got.get_mut(rank as usize) {
                *slot = Some(r);
            }
        }
    }
    session.finish(true)?;
    let roster = &session.roster;
    let reports: Vec<(String, doctor::Report)> = got
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let r = r?;
            let host = r
                .host
                .clone()
                .or_else(|| roster.iter().find(|m| m.rank as usize == i).map(|m| m.host.clone()))
                .unwrap_or_default();
            Some((format!("{host} (rank {i})"), r))
        })
        .collect();
    side_by_side(args.json, &reports, "podnet doctor on a host for its whole report")
}
