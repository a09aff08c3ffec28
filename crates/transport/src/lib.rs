//! The InfiniBand transport for RoCEv2 — RC, UC and UD queue pairs — as a deterministic state
//! machine: no sockets, no threads, no clock, no `unsafe`.
//!
//! An [`Endpoint`] is one RDMA device's transport: its memory regions, queue pairs and
//! completion queues. A driver feeds it received UDP payloads with
//! [`Endpoint::handle_datagram`], tells it the time with [`Endpoint::handle_timeout`], sends
//! what [`Endpoint::poll_transmit`] returns, and sleeps until [`Endpoint::poll_timeout`].
//! Applications post work with [`Endpoint::post_send`] / [`Endpoint::post_recv`] and reap
//! [`WorkCompletion`]s with [`Endpoint::poll_completion`]. Memory is touched only through the
//! [`Memory`] trait the provider implements, after the endpoint has checked keys, bounds,
//! access flags and protection domains.
//!
//! Behaviour follows the IBTA specification and, where the specification leaves room, Linux's
//! rxe (`docs/rxe-reference.md`); where rxe departs from IBTA (it treats `retry_cnt` 7 as
//! infinite), podnet follows IBTA.

mod counters;
mod endpoint;
mod memory;
mod qp;
mod time;
mod wr;

pub use counters::Counters;
pub use endpoint::{CqId, Endpoint, EndpointConfig, Error, Event, RecvMeta, SrqId, Transmit};
pub use memory::{Access, Memory, MemoryError, MrId, MrInfo, PdId, VecMemory};
pub use qp::{
    MAX_INLINE_DATA, ModifyQp, Mtu, Path, QpAttr, QpCaps, QpState, QpType, TransitionError,
};
pub use time::Instant;
pub use wire::{Psn, QKey, Qpn, RKey};
pub use wr::{RecvWr, SendOp, SendWr, Sge, Sgl, UdDest, WcOpcode, WcStatus, WorkCompletion};
