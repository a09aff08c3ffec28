//! Queue pairs' types, states and attributes (`ibv_qp_attr`, `ibv_qp_cap`).

use std::net::IpAddr;

use wire::{Psn, QKey, Qpn};

use crate::memory::Access;

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// QP states (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created or reset.
    Reset,
    /// Initialized: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained: posted sends wait.
    Sqd,
    /// Error: everything outstanding is flushed.
    Err,
}

/// Path MTU (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }

    /// The MTU for a byte count, if it is one of the five.
    pub const fn from_bytes(n: u32) -> Option<Mtu> {
        match n {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
}

/// Where a connected QP sends: the remote device's address and QP, and the GRH flow label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// The remote address (the GID's IP).
    pub ip: IpAddr,
    /// The remote QP.
    pub qpn: Qpn,
    /// The GRH flow label (20 bits; `ibv_ah_attr.grh.flow_label`). On RoCEv2 it sets the UDP
    /// source port ([`wire::udp_source_port`]: soft devices, rxe and mlx5 alike); 0, the
    /// default, lets the port follow from both QPNs, so a host pair's connections spread over
    /// a fabric's ECMP paths.
    pub flow_label: u32,
}

impl Path {
    /// To `qpn` at `ip`, no flow label.
    pub fn new(ip: IpAddr, qpn: Qpn) -> Path {
        Path { ip, qpn, flow_label: 0 }
    }

    /// The same path with the flow label that gives the connection UDP source port `port`
    /// (0xC000–0xFFFF; a probe that walks ECMP paths picks each); `None` for a port below.
    pub fn with_udp_source_port(self, port: u16) -> Option<Path> {
        let flow_label = wire::flow_label_for_udp_source_port(port)?;
        Some(Path { flow_label, ..self })
    }
}

/// Queue depths of a QP, and how much a send may carry inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests outstanding at most.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at most.
    pub max_recv_wr: u32,
    /// The largest payload an inline send ([`crate::SendWr::inline`]) may carry, bytes.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps { max_send_wr: 128, max_recv_wr: 512, max_inline_data: 0 }
    }
}

/// The largest `max_inline_data` the software transport grants (rxe's limit is similar).
pub const MAX_INLINE_DATA: u32 = 1024;

/// A QP's attributes (`ibv_qp_attr`), as set by [`ModifyQp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Destination (RC, UC).
    pub dest: Option<Path>,
    /// Expected PSN of the first incoming request.
    pub rq_psn: Psn,
    /// PSN of the first outgoing packet.
    pub sq_psn: Psn,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0: wait forever).
    pub timeout: u8,
    /// Retries after a timeout or a PSN-sequence NAK (7 means 7, per IBTA).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (7 means forever).
    pub rnr_retry: u8,
    /// The RNR timer code this QP's responder sends (0–31).
    pub min_rnr_timer: u8,
    /// READs and atomics this requester keeps outstanding at most.
    pub max_rd_atomic: u8,
    /// READs and atomics this responder remembers (for duplicates) at most.
    pub max_dest_rd_atomic: u8,
    /// The Q_Key (UD).
    pub qkey: QKey,
    /// IP traffic class (DSCP and ECN bits) of outgoing packets; ECT(0) by default.
    pub traffic_class: u8,
    /// Remote access rights granted through this QP.
    pub access: Access,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            path_mtu: Mtu::Mtu1024,
            dest: None,
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            qkey: QKey(0),
            traffic_class: 0x02,
            access: Access::default(),
        }
    }
}

/// A state change with the attributes it sets (`ibv_modify_qp` with its mask: `None` leaves an
/// attribute as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModifyQp {
    /// The new state (`None`: stay, and only change attributes the current state allows).
    pub state: Option<QpState>,
    /// Path MTU.
    pub path_mtu: Option<Mtu>,
    /// Destination.
    pub dest: Option<Path>,
    /// Expected receive PSN.
    pub rq_psn: Option<Psn>,
    /// Send PSN.
    pub sq_psn: Option<Psn>,
    /// Local ACK timeout code.
    pub timeout: Option<u8>,
    /// Retry count.
    pub retry_cnt: Option<u8>,
    /// RNR retry count.
    pub rnr_retry: Option<u8>,
    /// Minimum RNR timer code.
    pub min_rnr_timer: Option<u8>,
    /// Outstanding READs/atomics as requester.
    pub max_rd_atomic: Option<u8>,
    /// Remembered READs/atomics as responder.
    pub max_dest_rd_atomic: Option<u8>,
    /// Q_Key.
    pub qkey: Option<QKey>,
    /// Traffic class.
    pub traffic_class: Option<u8>,
    /// Remote access rights.
    pub access: Option<Access>,
}
