//! Subcommands.

mod agent;
mod burnin;
mod capture;
mod devices;
mod perf;
mod pingpong;
mod probe;
mod qualify;

use std::process::ExitCode;

use anyhow::bail;
use verbs::{Context, ContextOptions};

use crate::cli::{CaptureCommand, Cli, Command, DeviceArgs, ProviderKind};

/// Opens the device `-d` and `--provider` name.
pub(crate) fn open_device(dev: &DeviceArgs, opts: &ContextOptions) -> anyhow::Result<Context> {
    let name = dev.ib_dev.as_deref();
    let soft_name = name.is_none_or(|n| n.starts_with("soft"));
    let provider =
        dev.provider.unwrap_or(if soft_name { ProviderKind::Soft } else { ProviderKind::RdmaCore });
    Ok(match provider {
        ProviderKind::Soft if !soft_name => {
            bail!(
                "--provider soft drives soft devices (soft, soft:<IP>), not {:?}",
                name.unwrap_or("")
            )
        }
        ProviderKind::Soft => Context::open(name.unwrap_or("soft"), opts)?,
        ProviderKind::RdmaCore if name.is_some() && soft_name => {
            bail!(
                "{:?} is a soft device; --provider rdma-core opens RDMA devices (`podnet devices`)",
                name.unwrap_or("")
            )
        }
        ProviderKind::RdmaCore => Context::rdma_core(name, opts)?,
    })
}

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Capture(CaptureCommand::Decode(args)) => capture::decode(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Devices(args) => devices::run(&args),
        Command::Agent(args) => agent::run(&args),
        Command::Qualify(args) => qualify::run(&args),
        Command::Burnin(args) => burnin::run(&args),
    }
}
