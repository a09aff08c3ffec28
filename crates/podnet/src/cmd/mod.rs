//! Subcommands.

mod agent;
mod burnin;
mod capture;
mod devices;
mod doctor;
mod perf;
mod pingpong;
mod pod;
mod probe;
mod qualify;
mod resilient;
mod tune;
mod world;

use std::process::ExitCode;

use anyhow::bail;
use providers::ContextOptions;
use verbs::{Context, DeviceName};

use crate::cli::{CaptureCommand, Cli, Command, DeviceArgs, ProviderKind};

/// Opens the device `-d` and `--provider` name.
pub(crate) fn open_device(dev: &DeviceArgs, opts: &ContextOptions) -> anyhow::Result<Context> {
    let name = dev.ib_dev.as_deref().map(DeviceName::parse).transpose()?;
    let soft_name = name.as_ref().is_none_or(DeviceName::is_soft);
    let provider =
        dev.provider.unwrap_or(if soft_name { ProviderKind::Soft } else { ProviderKind::RdmaCore });
    Ok(match (provider, name) {
        (ProviderKind::Soft, Some(DeviceName::Rdma(n))) => {
            bail!("--provider soft drives soft devices (soft, soft:<IP>), not {n:?}")
        }
        (ProviderKind::Soft, n) => {
            providers::open(&n.map_or_else(|| "soft".into(), |n| n.to_string()), opts)?
        }
        (ProviderKind::RdmaCore, Some(DeviceName::Rdma(n))) => {
            providers::open_rdma_core(Some(&n), opts)?
        }
        (ProviderKind::RdmaCore, None) => providers::open_rdma_core(None, opts)?,
        (ProviderKind::RdmaCore, Some(soft)) => {
            bail!(
                "{:?} is a soft device; --provider rdma-core opens RDMA devices (`podnet devices`)",
                soft.to_string()
            )
        }
    })
}

/// A `--sysfs-root` must look like a copy of `/sys` (a `class/` folder), or the command says
/// so rather than report an empty host.
pub(crate) fn check_sysfs_root(dir: &std::path::Path) -> anyhow::Result<()> {
    if !dir.join("class").is_dir() {
        bail!("--sysfs-root {}: no class/ folder there (expected a copy of /sys)", dir.display());
    }
    Ok(())
}

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Capture(CaptureCommand::Decode(args)) => capture::decode(&args),
        Command::Capture(CaptureCommand::Analyze(args)) => capture::analyze(&args),
        Command::Capture(CaptureCommand::Record(args)) => capture::record(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Devices(args) => devices::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Tune(cmd) => tune::run(&cmd),
        Command::Agent(args) => agent::run(&args),
        Command::Qualify(args) => qualify::run(&args),
        Command::Burnin(args) => burnin::run(&args),
        Command::Pod(crate::cli::PodCommand::Status(args)) => pod::status(&args),
        Command::Pod(crate::cli::PodCommand::Shape(args)) => pod::shape(&args),
    }
}
