//! `podnet tune check|apply|restore`.

use std::io::Write;
use std::process::ExitCode;

use doctor::Source;
use doctor::tune::{self, Profile, TuneError};
use serde_json::json;

use crate::cli::{TuneArgs, TuneCommand, TuneProfile};

/// Runs `podnet tune`.
pub(crate) fn run(cmd: &TuneCommand) -> anyhow::Result<ExitCode> {
    let (TuneCommand::Check(a) | TuneCommand::Apply(a) | TuneCommand::Restore(a)) = cmd;
    let src = match &a.root {
        Some(dir) => Source::recorded(dir)?,
        None => Source::live(),
    };
    let profile = match a.profile {
        TuneProfile::Latency => Profile::Latency,
        TuneProfile::Throughput => Profile::Throughput,
    };
    let mut out = std::io::stdout().lock();
    match cmd {
        TuneCommand::Check(_) => {
            let changes = tune::plan(&src, profile);
            if a.json {
                writeln!(out, "{}", json!({ "profile": profile, "changes": changes }))?;
            } else if changes.is_empty() {
                writeln!(out, "podnet tune check: nothing to change for the {} profile", word(a))?;
            } else {
                writeln!(out, "podnet tune apply --profile {} would change:", word(a))?;
                for c in &changes {
                    writeln!(out, "  {}: {} -> {} ({})", c.path, c.from, c.to, c.why)?;
                }
            }
            Ok(if changes.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        TuneCommand::Apply(_) => match tune::apply(&src, profile, &a.state) {
            Ok(changes) => {
                if a.json {
                    writeln!(out, "{}", json!({ "applied": changes, "state": a.state }))?;
                } else {
                    for c in &changes {
                        writeln!(out, "  {}: {} -> {}", c.path, c.from, c.to)?;
                    }
                    writeln!(
                        out,
                        "podnet tune: {} change(s) for the {} profile; originals in {} (podnet tune restore)",
                        changes.len(),
                        word(a),
                        a.state.display()
                    )?;
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e @ TuneError::Refused { .. }) => {
                eprintln!("podnet tune: {e}");
                Ok(ExitCode::from(1))
            }
            Err(e) => Err(e.into()),
        },
        TuneCommand::Restore(_) => {
            let done = tune::restore(&src, &a.state)?;
            if a.json {
                writeln!(out, "{}", json!({ "restored": done }))?;
            } else {
                for s in &done {
                    writeln!(out, "  {}: {}", s.path, s.original)?;
                }
                writeln!(out, "podnet tune: {} setting(s) restored", done.len())?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn word(a: &TuneArgs) -> &'static str {
    match a.profile {
        TuneProfile::Latency => "latency",
        TuneProfile::Throughput => "throughput",
    }
}
