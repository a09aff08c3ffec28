//! The rdma-core provider: real RDMA devices (mlx5, rxe, …) through libibverbs.
//!
//! `sideway` finds and opens devices and owns protection domains and memory registrations
//! (plain and dma-buf); the objects sideway does not cover the way podnet needs them — CQs on
//! a completion channel, UD QPs and their address handles, SRQs, classic `ibv_post_send` work
//! requests, asynchronous events — are made through sideway's own `rdma-mummy-sys` layer, each
//! behind this module's safe [`Provider`] methods. libibverbs is loaded at run time (the
//! `rdma-mummy-sys` shim `dlopen`s `libibverbs.so.1`), so a podnet built with this provider
//! starts on a host without rdma-core and says so when asked to open a device.
//!
//! Objects are named by the ids the verbs API already uses: a CQ by a counter, a QP by its
//! QP number, an SRQ by a counter, a region by its local key. The tables are behind a
//! read-write lock: posting and polling take it shared, creating and destroying exclusively,
//! so no object is destroyed while another thread uses it.

mod convert;
mod cq;
mod device;
mod mr;
mod pd;
mod post;
mod provider;
mod qp;
mod srq;

use std::collections::HashMap;

use std::io;

use std::mem::MaybeUninit;

use std::net::IpAddr;

use std::os::fd::RawFd;

use std::path::{Path, PathBuf};

use std::ptr::{self, NonNull};

use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use std::time::Duration;

use rdma_mummy_sys as sys;

use sideway::ibverbs::AccessFlags;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};

use sideway::ibverbs::device_context::DeviceContext;

use sideway::ibverbs::memory_region::MemoryRegion as SwMr;

use sideway::ibverbs::protection_domain::ProtectionDomain as SwPd;

use smallvec::SmallVec;

use verbs::{
    Access, Counters, CqId, ModifyQp, MrId, MrInfo, PdId, QKey, QpAttr, QpState, QpType, Qpn,
    RecvWr, SendOp, SendWr, SrqId, UdDest, WcOpcode, WcStatus, WorkCompletion,
};

use verbs::{
    AsyncEvent, DeviceAttr, Error, ErrorKind, FastPath, Gid, GidEntry, GidType, Handle, LinkLayer,
    Mtu, PhysState, PortAttr, PortState, PostFailure, PreparedRaw, PreparedRecv, PreparedSend,
    Provider, Psn, QpSpec, Result,
};

use convert::*;
use cq::*;
use mr::*;
use post::*;
use qp::*;

/// The port every RoCE device here is driven on.
const PORT: u8 = 1;

/// The RDMA devices libibverbs sees, by name.
pub fn device_names() -> Result<Vec<String>> {
    let list = device_list(None)?;
    Ok(list.iter().map(|d| d.name()).collect())
}

fn device_list(wanted: Option<&str>) -> Result<DeviceList> {
    DeviceList::new().map_err(|e| {
        let wanted = wanted.map(str::to_string);
        let sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) = e.0 else {
            return Error::NoRdmaDevice { wanted, found: Vec::new(), why: e.to_string() };
        };
        match io.raw_os_error() {
            // The shim answers EOPNOTSUPP when it could not dlopen libibverbs.so.1.
            Some(libc::EOPNOTSUPP) => Error::NoLibibverbs,
            // libibverbs answers ENOSYS when the kernel has no RDMA support at all.
            Some(libc::ENOSYS) => Error::NoRdmaDevice {
                wanted,
                found: Vec::new(),
                why: "this kernel has no RDMA support loaded (ENOSYS)".into(),
            },
            _ => Error::NoRdmaDevice { wanted, found: Vec::new(), why: io.to_string() },
        }
    })
}

/// A raw libibverbs object pointer that may cross threads: libibverbs objects are
/// thread-safe (every verb may be called from any thread), and this provider's lock keeps an
/// object alive while any thread uses it.
struct Raw<T>(NonNull<T>);

impl<T> Raw<T> {
    fn new(p: *mut T) -> Option<Raw<T>> {
        NonNull::new(p).map(Raw)
    }

    fn ptr(self) -> *mut T {
        self.0.as_ptr()
    }
}

/// The maps posting and polling look into: a fast hash (the keys are ours or the device's,
/// not an attacker's), not SipHash.
type Map<V> = HashMap<u32, V, foldhash::fast::FixedState>;

#[derive(Debug, Default)]
struct Tables {
    next_id: u32,
    pds: Map<Arc<SwPd>>,
    mrs: Map<Region>,
    channels: Map<Raw<sys::ibv_comp_channel>>,
    cqs: Map<Raw<sys::ibv_cq>>,
    srqs: Map<Raw<sys::ibv_srq>>,
    qps: Map<QpEntry>,
}

impl Tables {
    /// The protection domain `pd`.
    fn pd(&self, pd: PdId) -> Result<Arc<SwPd>> {
        self.pds
            .get(&pd.0)
            .cloned()
            .ok_or(Error::no_such(format_args!("protection domain {:?}", pd)))
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }
}

/// An RDMA device opened through libibverbs.
#[derive(Debug)]
pub struct RdmaCoreDevice {
    /// The sysfs the device's files are read under (`host::default_root()`).
    sysfs: PathBuf,
    name: String,
    /// The GID the device's address comes from.
    gid: GidEntry,
    gids: Vec<GidEntry>,
    tables: RwLock<Tables>,
    ctx_raw: Raw<sys::ibv_context>,
    /// Owned by sideway; dropped last (`ibv_close_device`).
    ctx: Arc<DeviceContext>,
}

fn read_tables(t: &RwLock<Tables>) -> RwLockReadGuard<'_, Tables> {
    t.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_tables(t: &RwLock<Tables>) -> RwLockWriteGuard<'_, Tables> {
    t.write().unwrap_or_else(PoisonError::into_inner)
}
