//! podnet's RDMA verbs API: devices, contexts, protection domains, memory regions, completion
//! queues and channels, queue pairs (RC, UC, UD), shared receive queues and asynchronous
//! events — the objects and the vocabulary of `libibverbs`, with Rust ownership.
//!
//! ```
//! # fn demo(ctx: verbs::Context) -> verbs::Result<()> {
//! use verbs::Access;
//! // `ctx` from a provider: `providers::open("soft:127.0.0.1", &Default::default())`
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! println!("rkey {:#x} at {:#x}", mr.rkey(), mr.addr());
//! # Ok(())
//! # }
//! ```
//!
//! Every object holds its context alive; dropping an object destroys it on the device.
//! Registered memory belongs to its [`MemoryRegion`]: work requests name it by key and address
//! (as verbs do), and a provider checks every access against its region table, so a work
//! request that outlives its region fails with a protection error instead of touching freed
//! memory. `unsafe` lives only in providers.
//!
//! Providers implement [`Provider`], each in its own crate: `soft` (a userspace RoCEv2 device
//! over UDP sockets, on any Linux host) and `rdmacore` (real devices through libibverbs).
//! `providers::open` opens a device by its [`DeviceName`] with whichever is built in; this
//! crate knows none of them.

mod counters;
mod device;
mod ids;
mod memory;
mod provider;
mod qp_attr;
mod wr;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use counters::Counters;
pub use device::{DeviceName, Progress, ROCE_PORT};
pub use ids::{CqId, SrqId};
pub use memory::{Access, MrId, MrInfo, PdId};
pub use provider::{Handle, Provider};
pub use qp_attr::{MAX_INLINE_DATA, ModifyQp, Mtu, Path, QpAttr, QpCaps, QpState, QpType};
pub use wire::{Psn, QKey, Qpn, RKey};
pub use wr::{RecvWr, SendOp, SendWr, Sge, Sgl, UdDest, WcOpcode, WcStatus, WorkCompletion};

/// Why a verb failed. [`Error::kind`] says it in words any caller can match, whichever
/// provider answered; the variants carry the details.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device name could not be understood.
    #[error("bad device name {name:?}: {why}")]
    BadDeviceName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The device could not be opened.
    #[error("cannot open {device}: {source}")]
    Open {
        /// The device.
        device: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The device refused the verb: a QP in the wrong state, a full queue, an unknown or
    /// busy object, a malformed work request or attribute.
    #[error("{reason}")]
    Refused {
        /// Why, as callers match it.
        kind: ErrorKind,
        /// What the device said.
        reason: String,
    },
    /// A memory access fell outside its region.
    #[error("{len} bytes at offset {offset} lie outside the {region_len}-byte region")]
    OutOfBounds {
        /// Offset in the region.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Length of the region.
        region_len: usize,
    },
    /// The object belongs to another context.
    #[error("the {0} belongs to another device context")]
    ForeignObject(&'static str),
    /// A GID index beyond the table.
    #[error("GID index {index} is not in the table of {device} ({len} entries)")]
    NoGid {
        /// The device.
        device: String,
        /// The index asked for.
        index: usize,
        /// The table's length.
        len: usize,
    },
    /// The provider does not support the operation.
    #[error("{device} does not support {what}")]
    Unsupported {
        /// The device.
        device: String,
        /// What it lacks.
        what: &'static str,
    },
    /// podnet was built without the rdma-core provider.
    #[error(
        "this podnet was built without the rdma-core provider (--no-default-features); rebuild \
         with the default features (needs cmake and libclang-dev) to use RDMA devices"
    )]
    NotBuilt,
    /// libibverbs could not be loaded.
    #[error(
        "libibverbs.so.1 (rdma-core) could not be loaded, so no RDMA device can be opened; \
         install libibverbs1 and the device's provider (ibverbs-providers)"
    )]
    NoLibibverbs,
    /// No RDMA device (of that name) was found.
    #[error("{}", no_device_message(wanted.as_deref(), found, why))]
    NoRdmaDevice {
        /// The device asked for (`None`: any).
        wanted: Option<String>,
        /// The devices libibverbs found.
        found: Vec<String>,
        /// What libibverbs said, if it failed.
        why: String,
    },
    /// A libibverbs call failed.
    #[error("{device}: {verb} failed: {source}")]
    Call {
        /// The device.
        device: String,
        /// The verb (`ibv_create_qp`, …).
        verb: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An I/O error of the provider.
    #[error("{device}: {source}")]
    Io {
        /// The device.
        device: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What kind of failure an [`Error`] is: what a caller can act on, the same for every
/// provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A name, argument, attribute or work request is malformed or out of range (`EINVAL`).
    InvalidArgument,
    /// The object's state does not allow the verb: a QP not yet in RTS, a transition the
    /// state machine forbids.
    InvalidState,
    /// The object, device or table entry does not exist (`ENOENT`, `ENODEV`).
    NotFound,
    /// The object is still in use: a protection domain with regions or QPs (`EBUSY`).
    Busy,
    /// A queue is full or a resource exhausted (`ENOMEM`).
    ResourceExhausted,
    /// A memory access outside its region, or without the right to it.
    Protection,
    /// The device or provider cannot do it (`EOPNOTSUPP`).
    Unsupported,
    /// The provider is not here: not built in, or libibverbs missing.
    Unavailable,
    /// An operating-system or library call failed otherwise.
    Io,
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::BadDeviceName { .. } | Error::ForeignObject(_) => ErrorKind::InvalidArgument,
            Error::Refused { kind, .. } => *kind,
            Error::OutOfBounds { .. } => ErrorKind::Protection,
            Error::NoGid { .. } | Error::NoRdmaDevice { .. } => ErrorKind::NotFound,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::NotBuilt | Error::NoLibibverbs => ErrorKind::Unavailable,
            Error::Open { source, .. } | Error::Call { source, .. } | Error::Io { source, .. } => {
                kind_of_errno(source.raw_os_error())
            }
        }
    }

    /// A verb the device refused.
    pub fn refused(kind: ErrorKind, reason: impl Into<String>) -> Error {
        Error::Refused { kind, reason: reason.into() }
    }

    /// The object a verb named does not exist (`what`: `QP 0x11`, `CQ 3`).
    pub fn no_such(what: impl fmt::Display) -> Error {
        Error::refused(ErrorKind::NotFound, format!("no {what}"))
    }

    /// A verb the QP's state does not allow.
    pub fn bad_state(qpn: Qpn, state: QpState, verb: &str) -> Error {
        Error::refused(
            ErrorKind::InvalidState,
            format!("QP {qpn} is {state:?}, which does not allow {verb}"),
        )
    }
}

fn kind_of_errno(errno: Option<i32>) -> ErrorKind {
    match errno {
        Some(libc::EINVAL) => ErrorKind::InvalidArgument,
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => ErrorKind::NotFound,
        Some(libc::EBUSY) => ErrorKind::Busy,
        Some(libc::ENOMEM | libc::ENOSPC | libc::EAGAIN) => ErrorKind::ResourceExhausted,
        Some(libc::EOPNOTSUPP | libc::ENOSYS) => ErrorKind::Unsupported,
        Some(libc::EPERM | libc::EACCES | libc::EFAULT) => ErrorKind::Protection,
        _ => ErrorKind::Io,
    }
}

fn no_device_message(wanted: Option<&str>, found: &[String], why: &str) -> String {
    let mut m = match wanted {
        Some(w) => format!("no RDMA device named {w:?}"),
        None => "no RDMA device found".to_string(),
    };
    if found.is_empty() {
        m.push_str(" (libibverbs lists none");
        if !why.is_empty() {
            m.push_str(": ");
            m.push_str(why);
        }
        m.push_str("; `podnet devices` shows what this host has)");
    } else {
        m.push_str(&format!(" (libibverbs lists {})", found.join(", ")));
    }
    m
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The state of a port (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// IBV_PORT_DOWN.
    Down,
    /// IBV_PORT_INIT.
    Init,
    /// IBV_PORT_ACTIVE.
    Active,
}

/// A GID's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// RoCE v1 (GRH over Ethernet).
    RoceV1,
    /// RoCE v2 (UDP/IP).
    RoceV2,
    /// InfiniBand.
    Ib,
}

/// A 16-byte global identifier; RoCE v2 GIDs are IPv6 addresses, IPv4 ones mapped as
/// `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 addresses are mapped).
    pub fn from_ip(ip: std::net::IpAddr) -> Gid {
        match ip {
            std::net::IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            std::net::IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address of a RoCE v2 GID (`None` for the zero GID).
    pub fn to_ip(self) -> Option<std::net::IpAddr> {
        let v6 = std::net::Ipv6Addr::from(self.0);
        if v6.is_unspecified() {
            return None;
        }
        Some(match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(v6),
        })
    }

    /// Whether every byte is zero.
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Gid {
    /// `fe80:0000:…` as `ibv_devinfo -v` prints GIDs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index (what `-g` selects).
    pub index: usize,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
}

/// A port's attributes (`ibv_port_attr`, the fields RoCE tools use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// The largest MTU the port supports.
    pub max_mtu: Mtu,
    /// The MTU in use on the link.
    pub active_mtu: Mtu,
    /// The LID (0 on RoCE).
    pub lid: u16,
    /// The link layer: `"Ethernet"` for RoCE.
    pub link_layer: &'static str,
}

/// An asynchronous event (`ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// IBV_EVENT_QP_FATAL: the QP went to the error state on its own.
    QpFatal(Qpn),
    /// IBV_EVENT_SRQ_LIMIT_REACHED.
    SrqLimitReached(SrqId),
    /// IBV_EVENT_PORT_ACTIVE: the port works again.
    PortActive,
    /// IBV_EVENT_PORT_ERR: the port stopped working (the device's network is unreachable).
    PortErr,
}

/// How a context is opened.
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    /// Busy-poll or event-driven.
    pub progress: Progress,
    /// How a soft device on an IPv4 address receives (ignored elsewhere).
    pub ipv4_receive: Ipv4Receive,
    /// Whether a soft device on an IPv6 address uses UDP segmentation offload (ignored
    /// elsewhere).
    pub udp_offload: UdpOffload,
    /// Soft devices: a fault to inject, for tests of what must catch it.
    pub fault: FaultInjection,
    /// rdma-core devices: the GID whose address is the device's ([`Context::ip`]) and the
    /// source GID of its packets (`-x`); `None`: the first RoCE v2 GID, IPv4 first.
    pub gid_index: Option<usize>,
}

/// A fault a soft device injects, for tests: the burn-in's integrity checks must catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultInjection {
    /// Flip one byte of every `n`-th payload the transport places into memory — after its
    /// ICRC was verified, so no transport check can see it and the application gets damaged
    /// data (what a flaky PCIe link or a memory fault past the NIC does). `None`: never.
    pub corrupt_every: Option<u64>,
}

/// UDP segmentation offload for a soft device: one `sendmsg` carries a run of equal-sized
/// datagrams to one peer (`UDP_SEGMENT`) and one receive takes a run back (`UDP_GRO`), so
/// the kernel's per-datagram costs are paid once per run. IPv6 only: the IPv4 receive path
/// is a raw socket (for the Identification the ICRC covers), which sees runs unsegmented on
/// loopback. With it the device sends UDP checksums, which GSO requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpOffload {
    /// On IPv6 addresses, when the kernel accepts `UDP_GRO`.
    #[default]
    Auto,
    /// Never: one datagram per message, zero IPv6 UDP checksums as rxe sends.
    Off,
}

/// How a soft device receives IPv4 RoCE datagrams, whose ICRC covers the IP Identification
/// that a UDP socket does not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ipv4Receive {
    /// A raw socket when the process may open one (`CAP_NET_RAW`), else the UDP socket.
    #[default]
    Auto,
    /// A raw IPv4 socket: the real IP header, a full 32-bit ICRC check.
    Raw,
    /// The UDP socket, the Identification recovered from the ICRC: a 16-bit check, every
    /// packet counted in `icrc_unverified`.
    Udp,
}

/// An open device: the root of every other verbs object (`ibv_context`).
#[derive(Clone)]
pub struct Context {
    dev: Arc<dyn Provider>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("device", &self.dev.device_name()).finish()
    }
}

impl Context {
    /// Wraps a provider's device: how a provider hands out a context.
    pub fn from_provider(dev: Arc<dyn Provider>) -> Context {
        Context { dev }
    }

    /// The device's name (`soft:127.0.0.1`).
    pub fn device_name(&self) -> String {
        self.dev.device_name()
    }

    /// The provider's name (`soft`).
    pub fn provider_name(&self) -> &'static str {
        self.dev.provider_name()
    }

    /// Whether polling a CQ is what moves the device's packets (a busy-polled soft device):
    /// then a side that waits for its peer should keep polling. Real devices work alone.
    pub fn driven_by_polling(&self) -> bool {
        self.dev.driven_by_polling()
    }

    /// The device's IP address (RoCE).
    pub fn ip(&self) -> std::net::IpAddr {
        self.dev.ip()
    }

    /// The port's attributes (`ibv_query_port`; RoCE devices here have one port, 1).
    pub fn query_port(&self) -> PortAttr {
        self.dev.port_attr()
    }

    /// The index of the GID the device's address ([`Context::ip`]) comes from: the one its
    /// packets are sent from.
    pub fn gid_index(&self) -> usize {
        self.dev.gid_index()
    }

    /// The port's GID table.
    pub fn gid_table(&self) -> Vec<GidEntry> {
        self.dev.gid_table()
    }

    /// The GID at `index` (`ibv_query_gid`).
    pub fn query_gid(&self, index: usize) -> Result<GidEntry> {
        let t = self.gid_table();
        t.iter().find(|g| g.index == index).copied().ok_or(Error::NoGid {
            device: self.device_name(),
            index,
            len: t.len(),
        })
    }

    /// A new protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let id = self.dev.alloc_pd()?;
        let life = Arc::new(PdLife { dev: self.dev.clone(), id, freed: false });
        Ok(ProtectionDomain { dev: self.dev.clone(), id, life })
    }

    /// A completion channel: a place to block until a CQ armed with
    /// [`CompletionQueue::req_notify`] gets a completion.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        Ok(CompletionChannel { dev: self.dev.clone(), id: self.dev.create_channel()? })
    }

    /// A completion queue of at least `cqe` entries, reporting to `channel` if given.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        if let Some(ch) = channel
            && !Arc::ptr_eq(&ch.dev, &self.dev)
        {
            return Err(Error::ForeignObject("completion channel"));
        }
        let id = self.dev.create_cq(cqe, channel.map(|c| c.id))?;
        Ok(CompletionQueue { h: self.dev.cq_handle(id), dev: self.dev.clone(), id })
    }

    /// The next asynchronous event, waiting up to `timeout` (`None`: forever).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.dev.get_async_event(timeout)
    }

    /// The device's transport counters (named as rxe's `hw_counters` where they overlap).
    pub fn counters(&self) -> Counters {
        self.dev.counters()
    }
}

/// A protection domain (`ibv_pd`): memory regions and QPs of one PD cannot reach another's.
///
/// Its regions, QPs and SRQs keep it: the device frees it (`ibv_dealloc_pd`) when the last of
/// them and this handle are gone, so dropping the handle first is never an error.
/// [`ProtectionDomain::dealloc`] frees it now, or says what keeps it.
pub struct ProtectionDomain {
    dev: Arc<dyn Provider>,
    id: PdId,
    life: Arc<PdLife>,
}

/// A protection domain's hold on the device, shared by everything in it.
struct PdLife {
    dev: Arc<dyn Provider>,
    id: PdId,
    /// Freed already, by [`ProtectionDomain::dealloc`].
    freed: bool,
}

impl Drop for PdLife {
    fn drop(&mut self) {
        // Nothing is left in it (each object held this), so the device frees it; a device
        // that cannot has lost it already.
        if !self.freed {
            let _ = self.dev.dealloc_pd(self.id);
        }
    }
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ProtectionDomain").field(&self.id.0).finish()
    }
}

impl ProtectionDomain {
    /// Frees the protection domain now (`ibv_dealloc_pd`). [`ErrorKind::Busy`] while memory
    /// regions, QPs or SRQs are in it: it is then freed when the last of them is dropped.
    pub fn dealloc(self) -> Result<()> {
        let ProtectionDomain { id, life, .. } = self;
        match Arc::try_unwrap(life) {
            Ok(mut life) => {
                let r = life.dev.dealloc_pd(id);
                life.freed = r.is_ok();
                r
            }
            Err(held) => Err(Error::refused(
                ErrorKind::Busy,
                format!(
                    "protection domain {} still has {} memory regions, QPs or SRQs; it is \
                     freed with the last",
                    id.0,
                    Arc::strong_count(&held) - 1
                ),
            )),
        }
    }

    /// Allocates `len` zeroed bytes and registers them with `access` rights. The region gets a
    /// local key and, with any remote right, a random remote key.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        let info = self.dev.reg_mr(self.id, len, access)?;
        Ok(MemoryRegion {
            h: self.dev.mr_handle(info.lkey),
            dev: self.dev.clone(),
            info,
            _pd: self.life.clone(),
        })
    }

    /// Registers `len` bytes at `offset` of the dma-buf `fd` (GPU memory, exported by its
    /// driver), seen by the device at `iova` (`ibv_reg_dmabuf_mr`). The region has no host
    /// mapping: [`MemoryRegion::read`] and [`MemoryRegion::write`] fail with
    /// [`Error::Unsupported`]. A device that cannot register dma-bufs (the soft provider, rxe)
    /// answers [`Error::Unsupported`] naming itself.
    pub fn reg_dmabuf_mr(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion> {
        use std::os::fd::AsRawFd;
        let info = self.dev.reg_dmabuf_mr(self.id, fd.as_raw_fd(), offset, len, iova, access)?;
        Ok(MemoryRegion {
            h: self.dev.mr_handle(info.lkey),
            dev: self.dev.clone(),
            info,
            _pd: self.life.clone(),
        })
    }

    /// A queue pair (`ibv_create_qp`), in the RESET state.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<QueuePair> {
        for (cq, what) in [(init.send_cq, "send CQ"), (init.recv_cq, "receive CQ")] {
            if !Arc::ptr_eq(&cq.dev, &self.dev) {
                return Err(Error::ForeignObject(what));
            }
        }
        let srq = match init.srq {
            Some(s) if !Arc::ptr_eq(&s.dev, &self.dev) => {
                return Err(Error::ForeignObject("SRQ"));
            }
            s => s.map(|s| s.id),
        };
        let spec = QpSpec {
            pd: self.id,
            qp_type: init.qp_type,
            send_cq: init.send_cq.id,
            recv_cq: init.recv_cq.id,
            caps: init.caps,
            srq,
        };
        let qpn = self.dev.create_qp(&spec)?;
        let h = self.dev.qp_handle(qpn);
        Ok(QueuePair {
            dev: self.dev.clone(),
            qpn,
            qp_type: init.qp_type,
            h,
            _pd: self.life.clone(),
        })
    }

    /// A shared receive queue of `max_wr` receives (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32) -> Result<SharedReceiveQueue> {
        Ok(SharedReceiveQueue {
            dev: self.dev.clone(),
            id: self.dev.create_srq(self.id, max_wr)?,
            _pd: self.life.clone(),
        })
    }
}

/// What a provider needs to create a QP.
#[derive(Debug, Clone, Copy)]
pub struct QpSpec {
    /// Its protection domain.
    pub pd: PdId,
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: CqId,
    /// Where receive completions go.
    pub recv_cq: CqId,
    /// Queue depths.
    pub caps: QpCaps,
    /// Its shared receive queue.
    pub srq: Option<SrqId>,
}

/// The attributes of a new QP (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: &'a CompletionQueue,
    /// Where receive completions go.
    pub recv_cq: &'a CompletionQueue,
    /// Queue depths.
    pub caps: QpCaps,
    /// Take receives from this SRQ instead of the QP's own receive queue.
    pub srq: Option<&'a SharedReceiveQueue>,
}

impl<'a> QpInit<'a> {
    /// A QP of `qp_type` with one CQ for both directions and default depths.
    pub fn new(qp_type: QpType, cq: &'a CompletionQueue) -> QpInit<'a> {
        QpInit { qp_type, send_cq: cq, recv_cq: cq, caps: QpCaps::default(), srq: None }
    }
}

/// The attributes [`QueuePair::connect`] sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The peer's address and QP number.
    pub remote: Path,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// The peer's first PSN (what this QP expects).
    pub rq_psn: Psn,
    /// This QP's first PSN.
    pub sq_psn: Psn,
    /// RC: the local ACK timeout, 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// RC: retries after a timeout or sequence error (7 means 7, per IBTA).
    pub retry_cnt: u8,
    /// RC: retries after an RNR NAK (7: forever).
    pub rnr_retry: u8,
    /// RC: the RNR NAK timer code the responder sends.
    pub min_rnr_timer: u8,
    /// RC: READs and atomics this QP has outstanding.
    pub max_rd_atomic: u8,
    /// RC: READs and atomics this QP accepts at once.
    pub max_dest_rd_atomic: u8,
    /// The IP traffic class (DSCP and ECN) of its packets; `None` keeps the default.
    pub traffic_class: Option<u8>,
}

impl Connect {
    /// ibv_rc_pingpong's attributes towards `remote`: MTU 1024, timeout 14 (67 ms),
    /// retry_cnt 7, rnr_retry 7, min_rnr_timer 12, one outstanding READ or atomic each way.
    pub fn new(remote: Path, sq_psn: Psn, rq_psn: Psn) -> Connect {
        Connect {
            remote,
            path_mtu: Mtu::Mtu1024,
            rq_psn,
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            traffic_class: None,
        }
    }
}

/// A registered memory region (`ibv_mr`) and the memory it owns.
pub struct MemoryRegion {
    dev: Arc<dyn Provider>,
    info: MrInfo,
    /// The provider's direct reference to the region's memory.
    h: Handle,
    /// Its protection domain, freed after it (fields drop after `Drop::drop` deregisters).
    _pd: Arc<PdLife>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.info.addr))
            .field("len", &self.info.len)
            .field("lkey", &format_args!("{:#x}", self.info.lkey))
            .field("rkey", &format_args!("{:#x}", self.info.rkey))
            .field("access", &self.info.access)
            .finish()
    }
}

impl MemoryRegion {
    /// The virtual address of the first byte (what work requests and peers name).
    pub fn addr(&self) -> u64 {
        self.info.addr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.info.len as usize
    }

    /// Whether it is empty (never: zero-length regions are refused).
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.info.lkey
    }

    /// The remote key (0 without remote rights).
    pub fn rkey(&self) -> RKey {
        RKey(self.info.rkey)
    }

    /// Its access rights.
    pub fn access(&self) -> Access {
        self.info.access
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds { offset, len, region_len: self.len() }),
        }
    }

    /// A scatter/gather element for `len` bytes at `offset`, bounds-checked.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        self.check(offset, len)?;
        let length = u32::try_from(len).map_err(|_| Error::OutOfBounds {
            offset,
            len,
            region_len: self.len(),
        })?;
        Ok(Sge { addr: self.info.addr + offset as u64, length, lkey: self.info.lkey })
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    #[inline]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        // SAFETY: the handle is this region's, which lives as long as `self`; the range was
        // checked against the region just above.
        unsafe { self.dev.mr_read_direct(self.info.lkey, self.h, offset, out) }
    }

    /// Reads the byte at `offset` up to `spins` times until it is `want`; whether it was.
    /// How a WRITE-latency side waits for its peer's write to land: a tight loop on the
    /// region's memory where the provider maps it (rdma-core), region reads otherwise.
    #[inline]
    pub fn watch_byte(&self, offset: usize, want: u8, spins: u32) -> Result<bool> {
        self.check(offset, 1)?;
        // SAFETY: as in `read`.
        unsafe { self.dev.mr_watch_byte_direct(self.info.lkey, self.h, offset, want, spins) }
    }

    /// The byte at `offset`, to read and write in place where the provider maps the region's
    /// memory into this process (rdma-core's host memory); `None` where it does not (the soft
    /// provider's regions, dma-buf). What a WRITE-latency loop spins on and bumps.
    pub fn mapped_byte(&self, offset: usize) -> Result<Option<MappedByte<'_>>> {
        self.check(offset, 1)?;
        Ok(self.dev.mr_mapping(self.h).map(|base| MappedByte {
            at: base.wrapping_add(offset),
            _region: std::marker::PhantomData,
        }))
    }

    /// Copies `data` into the region at `offset`.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: as in `read`.
        unsafe { self.dev.mr_write_direct(self.info.lkey, self.h, offset, data) }
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}

/// One byte of a registered region, read and written in place ([`MemoryRegion::mapped_byte`]):
/// a load or a store, no call, as perftest's `*poll_buf` and `*post_buf` — under TCG a call
/// and its return are each a lookup of translated code. The device may write it at any time;
/// each access is volatile.
pub struct MappedByte<'a> {
    at: *mut u8,
    _region: std::marker::PhantomData<&'a MemoryRegion>,
}

impl MappedByte<'_> {
    /// The byte now.
    #[inline(always)]
    pub fn load(&self) -> u8 {
        // SAFETY: `at` lies inside the region's mapping (checked at `mapped_byte`), which
        // lives as long as the region this borrows; volatile, since the device writes it
        // behind the compiler's back.
        unsafe { std::ptr::read_volatile(self.at) }
    }

    /// Sets the byte.
    #[inline(always)]
    pub fn store(&self, v: u8) {
        // SAFETY: as in `load`; the mapping is writable host memory.
        unsafe { std::ptr::write_volatile(self.at, v) }
    }
}

impl fmt::Debug for MappedByte<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MappedByte").field(&self.at).finish()
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.dev.dereg_mr(self.info.lkey);
    }
}

/// A completion queue (`ibv_cq`).
pub struct CompletionQueue {
    dev: Arc<dyn Provider>,
    id: CqId,
    /// The provider's direct reference to the CQ.
    h: Handle,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CompletionQueue").field(&self.id.0).finish()
    }
}

impl CompletionQueue {
    /// The CQ's id (what [`CompletionChannel::get_cq_event`] returns).
    pub fn id(&self) -> CqId {
        self.id
    }

    /// Moves up to `out.len()` completions into `out` and returns how many (`ibv_poll_cq`).
    /// On a busy-poll context this also drives the device's I/O.
    #[inline]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        // SAFETY: the handle is this CQ's, which only `self`'s drop destroys.
        unsafe { self.dev.poll_cq_direct(self.id, self.h, out) }
    }

    /// Polls until one completion arrives or `timeout` passes.
    pub fn poll_one_blocking(&self, timeout: Duration) -> Option<WorkCompletion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut wc = [empty_wc()];
        loop {
            if self.poll(&mut wc) == 1 {
                return Some(wc[0]);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// Arms the CQ: its channel gets one event when the next completion arrives (or at once
    /// if completions are already waiting) (`ibv_req_notify_cq`).
    pub fn req_notify(&self) -> Result<()> {
        self.dev.req_notify_cq(self.id)
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.dev.destroy_cq(self.id);
    }
}

/// A zeroed completion, to size poll buffers.
pub const fn empty_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm: None,
        qp_num: Qpn::new(0),
        src_qp: None,
        grh: false,
    }
}

/// A completion channel (`ibv_comp_channel`).
pub struct CompletionChannel {
    dev: Arc<dyn Provider>,
    id: u32,
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CompletionChannel").field(&self.id).finish()
    }
}

impl CompletionChannel {
    /// Blocks (no spinning) until an armed CQ of this channel has a completion, or `timeout`
    /// passes; returns the CQ (`ibv_get_cq_event`). Re-arm the CQ before polling it empty.
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Option<CqId> {
        self.dev.get_cq_event(self.id, timeout)
    }
}

/// A queue pair (`ibv_qp`).
pub struct QueuePair {
    dev: Arc<dyn Provider>,
    qpn: Qpn,
    qp_type: QpType,
    /// The provider's direct reference to the QP.
    h: Handle,
    /// Its protection domain, freed after it.
    _pd: Arc<PdLife>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair").field("qpn", &self.qpn).field("type", &self.qp_type).finish()
    }
}

impl QueuePair {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Changes state and attributes (`ibv_modify_qp`).
    pub fn modify(&self, attr: &ModifyQp) -> Result<()> {
        self.dev.modify_qp(self.qpn, attr)
    }

    /// Brings a QP in the INIT state to RTS towards `c.remote` (`ibv_modify_qp` to RTR, then
    /// to RTS, with the attributes each transition needs for the QP's type). A UD QP takes
    /// only `sq_psn` from `c`, and `path_mtu` as the largest message it sends.
    pub fn connect(&self, c: &Connect) -> Result<()> {
        let ud = self.qp_type == QpType::Ud;
        let rc = self.qp_type == QpType::Rc;
        let rtr = ModifyQp {
            state: Some(QpState::Rtr),
            // UD: the largest message (a UD message is one packet), as a port's MTU is.
            path_mtu: Some(c.path_mtu),
            dest: (!ud).then_some(c.remote),
            rq_psn: (!ud).then_some(c.rq_psn),
            max_dest_rd_atomic: rc.then_some(c.max_dest_rd_atomic),
            min_rnr_timer: rc.then_some(c.min_rnr_timer),
            traffic_class: c.traffic_class,
            ..Default::default()
        };
        self.modify(&rtr)?;
        let rts = ModifyQp {
            state: Some(QpState::Rts),
            sq_psn: Some(c.sq_psn),
            timeout: rc.then_some(c.timeout),
            retry_cnt: rc.then_some(c.retry_cnt),
            rnr_retry: rc.then_some(c.rnr_retry),
            max_rd_atomic: rc.then_some(c.max_rd_atomic),
            ..Default::default()
        };
        self.modify(&rts)
    }

    /// The state and attributes (`ibv_query_qp`).
    pub fn query(&self) -> Result<(QpState, QpAttr)> {
        self.dev.query_qp(self.qpn)
    }

    /// Posts a send work request (`ibv_post_send`); the device starts sending at once.
    #[inline]
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post_send_batch(std::slice::from_ref(&wr))
    }

    /// Posts several send work requests with one doorbell.
    #[inline]
    pub fn post_send_batch(&self, wrs: &[SendWr]) -> Result<()> {
        // SAFETY: the handle is this QP's, which only `self`'s drop destroys.
        unsafe { self.dev.post_send_direct(self.qpn, self.h, wrs) }
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_batch(std::slice::from_ref(&wr))
    }

    /// Posts several receive work requests.
    #[inline]
    pub fn post_recv_batch(&self, wrs: &[RecvWr]) -> Result<()> {
        // SAFETY: as in `post_send_batch`.
        unsafe { self.dev.post_recv_direct(self.qpn, self.h, wrs) }
    }
}

/// A provider's own form of a prepared work request (for rdma-core, the libibverbs
/// `ibv_send_wr` or `ibv_recv_wr` with its scatter list), and where the provider has one, the
/// function that posts it directly.
pub struct PreparedRaw {
    form: Box<dyn std::any::Any + Send>,
    post: Option<DirectPost>,
    /// The QP it was prepared on: the only one [`DirectPost`] posts it on (another QP takes
    /// it through its provider's table, which looks at what the form is).
    qp: Handle,
}

/// How a provider posts its prepared form without a call through its method table: `form`
/// points at the form [`PreparedRaw::new`] boxed, `qp` is the QP's handle (never
/// [`Handle::NONE`]), with the request's current id and (for a send) signaled flag. A
/// failure comes back as [`PostFailure`] ([`PostFailure::into_error`] names it).
///
/// On a latency test's critical path each call through the table, and each look at a boxed
/// form's type, costs under TCG what a handful of instructions cost natively: posting this way,
/// with [`MappedByte`], took podnet's fastest WRITE-latency iteration on rxe in the guest from
/// 1.2 µs over perftest's to 0.35 µs (BENCHMARKS.md).
///
/// # Safety
/// `form` is the pointer [`PreparedRaw`] holds for this function's own form, and `qp` is a
/// live QP's handle from the provider that made both.
pub type DirectPost =
    unsafe fn(form: *mut (), qp: Handle, wr_id: u64, signaled: bool) -> Result<(), PostFailure>;

/// Why a [`DirectPost`] posted nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostFailure {
    /// The QP is in a state that takes no such request.
    State(QpState),
    /// The provider's verb failed with this error number.
    Errno(i32),
}

impl PostFailure {
    /// The error a post of `verb` (`post_send`, `post_recv`) on QP `qpn` of `dev` gives for
    /// this failure: the state error, as the soft provider's, or the provider's
    /// ([`Provider::post_errno`]).
    pub fn into_error(self, dev: &(impl Provider + ?Sized), qpn: Qpn, verb: &'static str) -> Error {
        match self {
            PostFailure::State(state) => Error::bad_state(qpn, state, verb),
            PostFailure::Errno(rc) => dev.post_errno(verb, rc),
        }
    }
}

impl PreparedRaw {
    /// A provider's form, with the function that posts it directly where there is one.
    ///
    /// # Safety
    /// `post`, if given, takes a pointer to a `T` as its form, and a handle of a live QP of the
    /// provider that returns this from [`Provider::prepare_send`] or
    /// [`Provider::prepare_recv`].
    pub unsafe fn new<T: std::any::Any + Send>(
        form: Box<T>,
        post: Option<DirectPost>,
    ) -> PreparedRaw {
        PreparedRaw { form, post, qp: Handle::NONE }
    }

    /// The form, if it is a `T`.
    pub fn form_mut<T: std::any::Any>(&mut self) -> Option<&mut T> {
        self.form.downcast_mut()
    }

    /// Posts through [`DirectPost`] on `qp`, where the provider gave one and `qp` is the
    /// handle of the QP it was prepared on; `None` otherwise.
    ///
    /// # Safety
    /// `qp` is [`Handle::NONE`] or a live QP's handle.
    #[inline]
    unsafe fn post_direct(
        &mut self,
        qp: Handle,
        wr_id: u64,
        signaled: bool,
    ) -> Option<Result<(), PostFailure>> {
        let post = self.post.filter(|_| qp != Handle::NONE && qp == self.qp)?;
        let form = (&mut *self.form as *mut dyn std::any::Any).cast::<()>();
        // SAFETY: `form` is this form's and `post` the function its provider gave with it
        // (`new`'s promise); `qp` is live (the caller's) and the QP it was prepared on, so
        // that provider's.
        Some(unsafe { post(form, qp, wr_id, signaled) })
    }
}

/// A work request built once and posted many times ([`QueuePair::prepare_send`],
/// [`QueuePair::prepare_recv`]): a post may change only its id (and a send's signaled flag),
/// as perftest's latency loops change only those of their `ctx->wr`. The provider keeps it
/// in its own form, so a post skips the conversion (on rdma-core under TCG, ~120 of the
/// ~190 instructions podnet added to each `ibv_post_send`).
pub struct Prepared<W> {
    wr: W,
    raw: Option<PreparedRaw>,
}

/// A prepared send work request.
pub type PreparedSend = Prepared<SendWr>;

/// A prepared receive work request.
pub type PreparedRecv = Prepared<RecvWr>;

impl<W> Prepared<W> {
    /// The request as posted.
    pub fn wr(&self) -> &W {
        &self.wr
    }

    /// The provider's own form of it, if the provider made one ([`Provider::prepare_send`]).
    pub fn raw_mut(&mut self) -> Option<&mut PreparedRaw> {
        self.raw.as_mut()
    }
}

impl PreparedSend {
    /// Sets the id the next post's completion carries.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr.wr_id = wr_id;
    }

    /// Sets whether the next post asks for a completion.
    #[inline]
    pub fn set_signaled(&mut self, signaled: bool) {
        self.wr.signaled = signaled;
    }
}

impl PreparedRecv {
    /// Sets the id the next post's completion carries.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr.wr_id = wr_id;
    }
}

impl<W: fmt::Debug> fmt::Debug for Prepared<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("wr", &self.wr)
            .field("provider_form", &self.raw.is_some())
            .finish()
    }
}

impl QueuePair {
    /// Builds `wr` into the provider's form once, to be posted many times with
    /// [`QueuePair::post_prepared_send`].
    pub fn prepare_send(&self, wr: SendWr) -> Result<PreparedSend> {
        let mut raw = self.dev.prepare_send(&wr)?;
        if let Some(r) = &mut raw {
            r.qp = self.h;
        }
        Ok(PreparedSend { wr, raw })
    }

    /// Posts a prepared send, with its current id and signaled flag (`ibv_post_send`).
    #[inline]
    pub fn post_prepared_send(&self, p: &mut PreparedSend) -> Result<()> {
        let (wr_id, signaled) = (p.wr.wr_id, p.wr.signaled);
        if let Some(raw) = &mut p.raw
            // SAFETY: the handle is this QP's, which only `self`'s drop destroys.
            && let Some(r) = unsafe { raw.post_direct(self.h, wr_id, signaled) }
        {
            return r.map_err(|f| f.into_error(&*self.dev, self.qpn, "post_send"));
        }
        // SAFETY: as in `post_send_batch`.
        unsafe { self.dev.post_prepared_send(self.qpn, self.h, p) }
    }

    /// Builds `wr` into the provider's form once, to be posted many times with
    /// [`QueuePair::post_prepared_recv`].
    pub fn prepare_recv(&self, wr: RecvWr) -> Result<PreparedRecv> {
        let mut raw = self.dev.prepare_recv(&wr)?;
        if let Some(r) = &mut raw {
            r.qp = self.h;
        }
        Ok(PreparedRecv { wr, raw })
    }

    /// Posts a prepared receive, with its current id (`ibv_post_recv`).
    #[inline]
    pub fn post_prepared_recv(&self, p: &mut PreparedRecv) -> Result<()> {
        let wr_id = p.wr.wr_id;
        if let Some(raw) = &mut p.raw
            // SAFETY: as in `post_prepared_send`.
            && let Some(r) = unsafe { raw.post_direct(self.h, wr_id, false) }
        {
            return r.map_err(|f| f.into_error(&*self.dev, self.qpn, "post_recv"));
        }
        // SAFETY: as in `post_send_batch`.
        unsafe { self.dev.post_prepared_recv(self.qpn, self.h, p) }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.dev.destroy_qp(self.qpn);
    }
}

/// A shared receive queue (`ibv_srq`).
pub struct SharedReceiveQueue {
    dev: Arc<dyn Provider>,
    id: SrqId,
    /// Its protection domain, freed after it.
    _pd: Arc<PdLife>,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SharedReceiveQueue").field(&self.id.0).finish()
    }
}

impl SharedReceiveQueue {
    /// Posts a receive (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.dev.post_srq_recv(self.id, std::slice::from_ref(&wr))
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): one
    /// [`AsyncEvent::SrqLimitReached`] when fewer than `limit` receives remain.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.dev.arm_srq_limit(self.id, limit)
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        self.dev.destroy_srq(self.id);
    }
}
