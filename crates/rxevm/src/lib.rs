//! Linux Soft-RoCE as podnet's reference peer: a QEMU guest harness for tests.
//!
//! This host's kernel has no RDMA, so Linux's own `rdma_rxe`, with rdma-core's and perftest's
//! tools, runs in a QEMU guest (TCG): Debian's 6.1 kernel, booted in a few seconds with the
//! host's root filesystem shared read-only over 9p (so host-built binaries run in the guest)
//! and a tmpfs overlay on top. A read-write 9p share carries jobs in and results out.
//!
//! - [`Vm::boot`] prepares the kernel (downloaded once into a cache), builds the initramfs and
//!   starts qemu inside a fresh, *unnamed* network namespace that holds the tap to the guest's
//!   virtio NIC. qemu gets `PR_SET_PDEATHSIG = SIGKILL`, so if the test process dies for any
//!   reason — failure, panic, timeout, `kill -9` — qemu dies, and with its last process the
//!   namespace and the tap vanish. Nothing is left to clean up by hand.
//! - [`Vm::run`] and [`Vm::spawn`] run shell jobs in the guest (as root) and collect their
//!   output; [`Vm::host_command`] and [`Vm::in_host_netns`] run host-side processes and
//!   sockets on the tap's side of the wire at the same time.
//! - [`Vm::setup_rxe`] brings up rxe on a veth pair inside the guest (with policy routing so
//!   traffic between the two devices really crosses the veth) and on the virtio NIC.
//!
//! Host packages needed (`scripts/deps.sh` installs them): qemu-system-x86, busybox-static,
//! rdma-core, ibverbs-utils, ibverbs-providers, perftest, rdmacm-utils, iproute2, tcpdump,
//! nftables, kmod, cpio, xz-utils, util-linux (unshare, nsenter). Root is required.

mod kernel;
pub mod record;
mod vm;

pub use kernel::Kernel;
pub use vm::{
    Config, GUEST_IP4, GUEST_IP6, GuestJob, HOST_IP4, HOST_IP6, JobOutput, NFT_TABLE, RxeDev,
    RxeSetup, Vm,
};

use std::path::PathBuf;

/// What went wrong with the guest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A prerequisite is missing on the host.
    #[error("{0}")]
    Missing(String),
    /// The kernel package could not be resolved, downloaded or unpacked.
    #[error("kernel: {0}")]
    Kernel(String),
    /// The guest did not come up.
    #[error("guest did not boot within {secs} s; guest console:\n{console}")]
    Boot {
        /// The boot timeout.
        secs: u64,
        /// The tail of the serial console.
        console: String,
    },
    /// qemu exited.
    #[error("qemu exited ({status}); guest console:\n{console}")]
    QemuExited {
        /// Its exit status.
        status: String,
        /// The tail of the serial console.
        console: String,
    },
    /// A guest job did not finish in time.
    #[error("guest job `{name}` timed out after {secs} s; its output so far:\n{output}")]
    Timeout {
        /// The job's name.
        name: String,
        /// Its timeout.
        secs: u64,
        /// What it printed.
        output: String,
    },
    /// A guest job failed.
    #[error("guest job `{name}` exited {rc}; its output:\n{output}")]
    JobFailed {
        /// The job's name.
        name: String,
        /// Its exit status.
        rc: i32,
        /// What it printed.
        output: String,
    },
    /// A host command failed.
    #[error("`{cmd}` failed: {detail}")]
    Command {
        /// The command.
        cmd: String,
        /// What went wrong.
        detail: String,
    },
    /// I/O on the host.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}

/// Runs a host command to completion; its stdout on success.
fn sh(cmd: &mut std::process::Command) -> Result<String> {
    let desc = format!("{cmd:?}");
    let out =
        cmd.output().map_err(|e| Error::Command { cmd: desc.clone(), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: desc,
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Checks that the host has what the harness needs, naming what is missing.
pub fn check_host() -> Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(Error::Missing(
            "the rxe guest harness needs root (network namespaces, taps)".into(),
        ));
    }
    let tools = [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("busybox", "busybox-static"),
        ("ibv_rc_pingpong", "ibverbs-utils"),
        ("ib_send_bw", "perftest"),
        ("rdma", "iproute2"),
        ("tcpdump", "tcpdump"),
        ("nft", "nftables"),
        ("depmod", "kmod"),
        ("cpio", "cpio"),
        ("xz", "xz-utils"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
    ];
    let missing: Vec<String> = tools
        .iter()
        .filter(|(bin, _)| !which(bin))
        .map(|(bin, pkg)| format!("{bin} (Debian package {pkg})"))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Missing(format!(
            "the rxe guest harness needs {}; scripts/deps.sh installs them",
            missing.join(", ")
        )));
    }
    Ok(())
}

fn which(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
                .any(|d| d.join(bin).is_file())
        })
        .unwrap_or(false)
}
