//! A device's port: its state, attributes, GID table, and the asynchronous events it raises.

use std::fmt;

use crate::*;

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
