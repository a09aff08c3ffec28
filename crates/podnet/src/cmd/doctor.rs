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
    let mismatches = doctor::compare(&reports);
    let mut out = std::io::stdout().lock();
    if args.json {
        let hosts: Vec<serde_json::Value> = reports
            .iter()
            .map(|(h, r)| {
                serde_json::json!({
                    "host": h,
                    "errors": r.errors(),
                    "warnings": r.findings.iter().filter(|f| f.severity == Severity::Warning).count(),
                    "versions": r.versions,
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
        write!(out, "{:<w$}  {:>6}", "host", "errors")?;
        for k in &keys {
            write!(out, "  {k}")?;
        }
        writeln!(out)?;
        for (h, r) in &reports {
            write!(out, "{h:<w$}  {:>6}", r.errors())?;
            for k in &keys {
                let v = r.versions.get(*k).map_or("-", String::as_str);
                let odd = mismatches
                    .iter()
                    .any(|f| &f.component == h && f.seen.starts_with(&format!("{k} ")));
                write!(out, "  {}{v}", if odd { "*" } else { "" })?;
            }
            writeln!(out)?;
        }
        for f in &mismatches {
            writeln!(out, "\nWARNING  {:<24} {}: {}", f.kind, f.component, f.seen)?;
            writeln!(out, "         fix: {}", f.fix)?;
        }
        writeln!(
            out,
            "\n{} hosts, {} version mismatches (* above), {} errors in all (podnet doctor --root DIR for each host's)",
            reports.len(),
            mismatches.len(),
            reports.iter().map(|(_, r)| r.errors()).sum::<usize>()
        )?;
    }
    let errors = reports.iter().any(|(_, r)| r.errors() > 0);
    Ok(if errors || !mismatches.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
