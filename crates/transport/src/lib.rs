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

#![forbid(unsafe_code)]

mod endpoint;
mod errors;
mod memory;
mod qp;
mod time;

pub use endpoint::{
    Endpoint, EndpointConfig, Error, Event, FIRST_QPN, MAX_QPN, RecvMeta, Transmit,
};
pub use memory::{Memory, MemoryError, VecMemory};
pub use qp::TransitionError;
pub use time::Instant;
// The verbs vocabulary the engine speaks, for its users' convenience.
pub use verbs::{
    Access, Counters, CqId, MAX_INLINE_DATA, ModifyQp, MrId, MrInfo, Mtu, Path, PdId, Psn, QKey,
    QpAttr, QpCaps, QpState, QpType, Qpn, RKey, RecvWr, SendOp, SendWr, Sge, Sgl, SrqId, UdDest,
    WcOpcode, WcStatus, WorkCompletion,
};
