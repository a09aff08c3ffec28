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
    fn note(&mut self, what: &str) {
        let line = format!("podnet qualify: {what}");
        self.bar.suspend(|| eprintln!("{line}"));
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

/// The progress bar (on a terminal, unless `--json`): `template` with `{pos}` checks.
fn bar(args: &QualifyArgs, template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() && !args.json {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Writes the reports and prints the summary (or report.json); exit 1 if a check failed.
fn finish(args: &QualifyArgs, report: &mut qualify::report::Report) -> anyhow::Result<ExitCode> {
    let summary = report.summarize();
    let dir = match &args.report_dir {
        Some(d) => d.clone(),
        None => PathBuf::from(format!("podnet-qualify-{}", stamp(report.started_unix))),
    };
    qualify::write_reports(report, &dir)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", report.json())?;
    } else {
        write!(out, "{}", report.text())?;
        writeln!(out, "reports: {}/report.html, report.json, junit.xml", dir.display())?;
    }
    Ok(if summary.failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Runs `podnet qualify`.
pub(crate) fn run(args: &QualifyArgs) -> anyhow::Result<ExitCode> {
    if args.print_plan {
        let text = match &args.world.hostfile {
            Some(f) => {
                anyhow::ensure!((1..=64).contains(&args.rails), "--rails: 1 to 64");
                let hosts = rendezvous::world::read_hostfile(f)?;
                qualify::plan::pod_template(&hosts, args.rails, args.hosts_per_tor)
            }
            None => DEFAULT_PLAN.to_string(),
        };
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let plan = match &args.plan {
        Some(p) => Plan::load(p)?,
        None => Plan::parse(DEFAULT_PLAN, "the built-in plan")?,
    };
    if plan.pod.is_some() {
        return pod(args, &plan);
    }
    let bar = bar(args, "{spinner} [{elapsed}] {pos} checks — {msg}");
    let mut progress = Bar { bar, failed: 0, records: Vec::new() };
    let mut report = qualify::run::run(&plan, &args.sysfs_root, &mut progress);
    progress.bar.finish_and_clear();
    if let Some(dir) = &args.publish.publish {
        for r in &progress.records {
            telemetry::bench::publish(dir, r)?;
        }
    }
    finish(args, &mut report)
}

/// A pod plan: this rank joins the others; rank 0 runs the plan and writes the reports, the
/// others serve and measure for it.
fn pod(args: &QualifyArgs, plan: &Plan) -> anyhow::Result<ExitCode> {
    let Some(pod) = &plan.pod else { anyhow::bail!("not a pod plan") };
    let t = super::world::timeouts(&args.world)?;
    let world = super::world::resolve(&args.world)?;
    let secret = super::world::secret(&args.world)?;
    anyhow::ensure!(
        world.size as usize == pod.hosts.len(),
        "the run has {} ranks ({:?}) and the plan {} hosts: one rank per host",
        world.size,
        world.launcher,
        pod.hosts.len()
    );
    // Which host of the plan this rank plays: its host name's, if the plan names it once,
    // else its rank's; rank 0 checks that every host is played once.
    let me = rendezvous::world::hostname();
    let place = qualify::podrun::place(pod, world.rank, &me);
    let host = &pod.hosts[place];
    let mut facts =
        qualify::podrun::host_facts(&args.sysfs_root, world.rank, &host.name, &host.rails);
    for (d, rail) in facts.devices.iter_mut().zip(&host.rails) {
        let opts = providers::ContextOptions {
            progress: providers::Progress::Event,
            ..Default::default()
        };
        match providers::open(&rail.device, &opts) {
            Ok(c) => drop(c),
            Err(e) => d.error = Some(format!("cannot open {}: {e}", rail.device)),
        }
    }
    let bar = bar(args, "{spinner} [{elapsed}] rank {prefix} {pos} checks — {msg}");
    bar.set_prefix(format!("{}/{} ({})", world.rank, world.size, host.name));
    bar.set_message(format!("meeting at {}", world.coordinator));
    let info = serde_json::to_value(qualify::podrun::RankInfo { facts })?;
    let session = match rendezvous::bootstrap::join(&world, &me, info, &t, secret.as_ref()) {
        Ok(s) => s,
        // Rank 0 reports the hosts that never came, as suspects, rather than nothing.
        Err(e @ rendezvous::bootstrap::BootstrapError::NotJoined { .. }) if world.rank == 0 => {
            bar.finish_and_clear();
            let missing = match &e {
                rendezvous::bootstrap::BootstrapError::NotJoined { missing, .. } => missing.clone(),
                _ => Vec::new(),
            };
            eprintln!("podnet: {e}");
            let mut report = qualify::podrun::not_joined_report(plan, &missing, &e.to_string());
            return finish(args, &mut report);
        }
        Err(e) => return Err(e.into()),
    };
    bar.set_message(if world.rank == 0 { "running the plan" } else { "serving rank 0" });
    let mut progress = Bar { bar, failed: 0, records: Vec::new() };
    let outcome = qualify::podrun::run(plan, session, &args.sysfs_root, &mut progress);
    progress.bar.finish_and_clear();
    let mut report = match outcome? {
        qualify::podrun::PodRun::Followed(verdict) => {
            println!("rank {} ({}): followed rank 0 to the end: {verdict}", world.rank, host.name);
            return Ok(ExitCode::SUCCESS);
        }
        qualify::podrun::PodRun::Report(r) => *r,
    };
    finish(args, &mut report)
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
