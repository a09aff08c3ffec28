//! `podnet qualify`: run a plan, print the summary, write the reports.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use qualify::plan::{DEFAULT_PLAN, Plan};
use qualify::report::{Check, Status};
use qualify::run::RunProgress;

use crate::cli::QualifyArgs;

struct Bar {
    bar: ProgressBar,
    failed: usize,
    /// What `--publish` leaves for the agent.
    records: Vec<telemetry::bench::Record>,
}

impl RunProgress for Bar {
    fn starting(&mut self, what: &str) {
        self.bar.set_message(what.to_string());
    }
    fn done(&mut self, c: &Check) {
        self.bar.inc(1);
        if c.status == Status::Fail {
            self.failed += 1;
            let line = format!("fail    {}  {}", c.name, c.figure());
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }
    fn measured(&mut self, test: &str, device: &str, peer: &str, out: &perf::session::Outcome) {
        self.records.extend(super::perf::bench_records(test, out, device, peer));
    }
}

/// `YYYYmmdd-HHMMSS` (UTC) of a Unix time.
fn stamp(unix: u64) -> String {
    let (days, secs) = ((unix / 86_400) as i64, unix % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Runs `podnet qualify`.
pub(crate) fn run(args: &QualifyArgs) -> anyhow::Result<ExitCode> {
    if args.print_plan {
        std::io::stdout().write_all(DEFAULT_PLAN.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let plan = match &args.plan {
        Some(p) => Plan::load(p)?,
        None => Plan::parse(DEFAULT_PLAN, "the built-in plan")?,
    };
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() && !args.json {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {pos} checks — {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut progress = Bar { bar, failed: 0, records: Vec::new() };
    let mut report = qualify::run::run(&plan, &args.sysfs_root, &mut progress);
    progress.bar.finish_and_clear();
    let summary = report.summarize();
    if let Some(dir) = &args.publish.publish {
        for r in &progress.records {
            telemetry::bench::publish(dir, r)?;
        }
    }
    let dir = match &args.report_dir {
        Some(d) => d.clone(),
        None => PathBuf::from(format!("podnet-qualify-{}", stamp(report.started_unix))),
    };
    qualify::write_reports(&report, &dir)?;
    let json = report.json();
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{json}")?;
    } else {
        write!(out, "{}", report.text())?;
        writeln!(out, "reports: {}/report.html, report.json, junit.xml", dir.display())?;
    }
    Ok(if summary.failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamps() {
        assert_eq!(super::stamp(0), "19700101-000000");
        assert_eq!(super::stamp(1_764_490_000), "20251130-080640");
        assert_eq!(super::stamp(951_782_400), "20000229-000000");
    }
}
