//! Subcommands.

mod capture;
mod devices;
mod perf;
mod pingpong;

use std::process::ExitCode;

use crate::cli::{CaptureCommand, Cli, Command};

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Capture(CaptureCommand::Decode(args)) => capture::decode(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Devices(args) => devices::run(&args),
    }
}
