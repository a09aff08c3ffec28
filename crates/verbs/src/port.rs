//! A device's port: its state, attributes, GID table, and the asynchronous events it raises.

use crate::*;

pub use host::port::{Gid, GidEntry, GidType, LinkLayer, PhysState, PortState};

/// A port's attributes (`ibv_port_attr`, the fields RoCE tools use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Physical state (`None`: a code the IBTA does not define).
    pub phys_state: Option<PhysState>,
    /// The largest MTU the port supports.
    pub max_mtu: Mtu,
    /// The MTU in use on the link.
    pub active_mtu: Mtu,
    /// The LID (0 on RoCE).
    pub lid: u16,
    /// The link layer: Ethernet for RoCE.
    pub link_layer: LinkLayer,
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
