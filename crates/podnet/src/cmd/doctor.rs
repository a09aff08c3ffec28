//! `podnet doctor`: why a host or NIC underperforms, from the live host or a recording.

use std::io::Write;
use std::process::ExitCode;

use doctor::{Severity, Source};

use crate::cli::DoctorArgs;

/// Runs `podnet doctor`.
pub(crate) fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
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
