//! Every podnet verbs provider behind one open-by-name: a [`verbs::DeviceName`] decides which
//! provider opens a device — the soft provider (`soft`, `soft:<IP>[:<udp-port>]`) always, the
//! rdma-core provider (any other name: `mlx5_0`, `rxe0`) when the `rdma-core` feature is on,
//! else [`verbs::Error::NotBuilt`]. Tools open devices here and then speak only the verbs API.
//!
//! ```no_run
//! use verbs::Access;
//! let ctx = providers::open("soft:127.0.0.1", &providers::ContextOptions::default())?;
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! println!("rkey {:#x} at {:#x}", mr.rkey().0, mr.addr());
//! # Ok::<(), verbs::Error>(())
//! ```

#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::sync::Arc;

use verbs::{Context, DeviceName, Result};

pub use soft::{
    FaultInjection, Ipv4Receive, LIMITS as SOFT_LIMITS, Progress, UdpOffload, soft_devices,
};

/// How a device is opened: each provider's own knobs, in one place for the tools.
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    /// Soft devices: busy-poll or event-driven.
    pub progress: Progress,
    /// Soft devices on an IPv4 address: how they receive.
    pub ipv4_receive: Ipv4Receive,
    /// Soft devices on an IPv6 address: whether they use UDP segmentation offload.
    pub udp_offload: UdpOffload,
    /// Soft devices: a fault to inject, for tests of what must catch it.
    pub fault: FaultInjection,
    /// rdma-core devices: the GID whose address is the device's ([`Context::ip`]) and the
    /// source GID of its packets (`-x`); `None`: the first RoCE v2 GID, IPv4 first.
    pub gid_index: Option<usize>,
}

impl ContextOptions {
    /// The soft provider's part.
    pub fn soft(&self) -> soft::SoftOptions {
        #[allow(unused_mut)]
        let mut fault = self.fault;
        #[allow(unused_mut)]
        let mut receive_buffer = None;
        // Tests only (feature `fault-injection`, off in a release build): every tool's soft
        // device damages every N-th payload it places, after its ICRC check, so that each
        // data checker can be shown to catch it.
        #[cfg(feature = "fault-injection")]
        {
            let env = |k| std::env::var(k).ok().and_then(|v| v.parse().ok());
            if let Some(n) = env("PODNET_FAULT_CORRUPT_EVERY") {
                fault.corrupt_every = Some(n);
                eprintln!("podnet: FAULT INJECTION: every {n}th received payload damaged");
            }
            if let Some(n) = env("PODNET_FAULT_DROP_EVERY") {
                fault.drop_every = Some(n);
                eprintln!("podnet: FAULT INJECTION: every {n}th received payload not placed");
            }
            if let Some(n) = env("PODNET_FAULT_RCVBUF") {
                receive_buffer = Some(n as usize);
                eprintln!("podnet: FAULT INJECTION: receive buffer {n} bytes, as unprivileged");
            }
        }
        soft::SoftOptions {
            progress: self.progress,
            ipv4_receive: self.ipv4_receive,
            udp_offload: self.udp_offload,
            fault,
            receive_buffer,
            // Every tool's soft device records itself when asked (`capture record`'s help).
            capture: std::env::var_os("PODNET_CAPTURE").map(std::path::PathBuf::from),
        }
    }
}

/// Opens a device by name: `soft`, `soft:<IP>[:<udp-port>]` (see [`DeviceName`]), or the
/// name of an RDMA device (`mlx5_0`, `rxe0`) through the rdma-core provider.
pub fn open(name: &str, opts: &ContextOptions) -> Result<Context> {
    match DeviceName::parse(name)? {
        DeviceName::Soft { ip, port } => open_soft(ip, port, opts),
        DeviceName::SoftDefault => Ok(Context::from_provider(Arc::new(
            soft::SoftDevice::open_default_loopback(&opts.soft())?,
        ))),
        DeviceName::Rdma(name) => open_rdma_core(Some(&name), opts),
    }
}

/// Opens the soft device at `ip`, UDP port `port`.
pub fn open_soft(ip: IpAddr, port: u16, opts: &ContextOptions) -> Result<Context> {
    Ok(Context::from_provider(Arc::new(soft::SoftDevice::open(ip, port, &opts.soft())?)))
}

/// Opens an RDMA device through rdma-core (the first one when `name` is `None`).
pub fn open_rdma_core(name: Option<&str>, opts: &ContextOptions) -> Result<Context> {
    #[cfg(feature = "rdma-core")]
    {
        Ok(Context::from_provider(Arc::new(rdmacore::RdmaCoreDevice::open(name, opts.gid_index)?)))
    }
    #[cfg(not(feature = "rdma-core"))]
    {
        let _ = (name, opts);
        Err(verbs::Error::NotBuilt)
    }
}

/// The RDMA devices rdma-core's libibverbs lists.
pub fn rdma_core_devices() -> Result<Vec<String>> {
    #[cfg(feature = "rdma-core")]
    {
        rdmacore::device_names()
    }
    #[cfg(not(feature = "rdma-core"))]
    {
        Err(verbs::Error::NotBuilt)
    }
}
