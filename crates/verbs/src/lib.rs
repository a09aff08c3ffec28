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
//! println!("rkey {:#x} at {:#x}", mr.rkey().0, mr.addr());
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

mod context;
mod counters;
mod cq;
mod device;
mod error;
mod ids;
mod memory;
mod mr;
mod pd;
mod port;
mod prepared;
mod provider;
mod qp;
mod qp_attr;
mod srq;
mod wr;

pub use context::Context;
pub use counters::Counters;
pub use cq::{CompletionChannel, CompletionQueue, empty_wc};
pub use device::{DeviceAttr, DeviceName, ProviderKind, ROCE_PORT};
pub use error::{Error, ErrorKind, Result};
pub use ids::{CqId, SrqId};
pub use memory::{Access, DeviceMemory, MrId, MrInfo, PdId};
pub use mr::{MappedByte, MemoryRegion};
pub use pd::ProtectionDomain;
pub use port::{AsyncEvent, Gid, GidEntry, GidType, LinkLayer, PhysState, PortAttr, PortState};
pub use prepared::{DirectPost, PostFailure, Prepared, PreparedRaw, PreparedRecv, PreparedSend};
pub use provider::{FastPath, Handle, Provider};
pub use qp::{Connect, QpInit, QpSpec, QueuePair};
pub use qp_attr::{MAX_INLINE_DATA, ModifyQp, Mtu, Path, QpAttr, QpCaps, QpState, QpType};
pub use srq::SharedReceiveQueue;
pub use wire::{Psn, QKey, Qpn, RKey};
pub use wr::{RecvWr, SendOp, SendWr, Sge, Sgl, UdDest, WcOpcode, WcStatus, WorkCompletion};
