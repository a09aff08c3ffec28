//! Work requests and work completions, in the verbs vocabulary.

use wire::{QKey, Qpn, RKey};

/// A scatter/gather element: `length` bytes at `addr` of the region with local key `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND (RC, UC, UD).
    Send,
    /// SEND with immediate data (RC, UC, UD).
    SendWithImm(u32),
    /// RDMA WRITE (RC, UC).
    Write {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: RKey,
    },
    /// RDMA WRITE with immediate data (RC, UC): consumes a receive at the responder.
    WriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: RKey,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ (RC): the scatter list receives the remote bytes.
    Read {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: RKey,
    },
    /// 64-bit compare-and-swap (RC); the scatter list (8 bytes) receives the original value.
    CompareSwap {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: RKey,
        /// Compared with the remote value.
        compare: u64,
        /// Stored when they are equal.
        swap: u64,
    },
    /// 64-bit fetch-and-add (RC); the scatter list (8 bytes) receives the original value.
    FetchAdd {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: RKey,
        /// Added to the remote value.
        add: u64,
    },
}

impl SendOp {
    /// The completion opcode of this operation.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// Where a UD send goes (an address handle and the remote QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// The remote device's address.
    pub ip: std::net::IpAddr,
    /// The remote QP.
    pub qpn: Qpn,
    /// The remote Q_Key; one with the high bit set means "use the QP's own Q_Key".
    pub qkey: QKey,
    /// The address handle's GRH flow label (20 bits; `ibv_ah_attr.grh.flow_label`). On
    /// RoCEv2 it sets the UDP source port (0: the device's own choice for the QP), so a probe
    /// can walk a fabric's ECMP paths datagram by datagram; receive stays on 4791.
    pub flow_label: u32,
}

impl UdDest {
    /// To `qpn` at `ip` with Q_Key `qkey`, from the port the device picks.
    pub const fn new(ip: std::net::IpAddr, qpn: Qpn, qkey: QKey) -> UdDest {
        UdDest { ip, qpn, qkey, flow_label: 0 }
    }

    /// The same destination sent from UDP source port `port` (`None` below 0xC000, the
    /// RoCEv2 source-port range): the flow label that gives it
    /// ([`wire::flow_label_for_udp_source_port`]).
    pub fn from_udp_source_port(self, port: u16) -> Option<UdDest> {
        let flow_label = wire::flow_label_for_udp_source_port(port)?;
        Some(UdDest { flow_label, ..self })
    }
}

/// A scatter/gather list: two elements inline (most work requests have one), more on the
/// heap — so posting does not allocate.
pub type Sgl = smallvec::SmallVec<[Sge; 2]>;

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers: the payload for SEND/WRITE, the destination for READ and atomics.
    pub sgl: Sgl,
    /// Produce a completion on success (errors always complete).
    pub signaled: bool,
    /// Set the solicited-event bit.
    pub solicited: bool,
    /// UD only: the destination.
    pub ud: Option<UdDest>,
    /// `IBV_SEND_INLINE`: the payload is copied when the request is posted, so its buffer
    /// may be reused as soon as the post returns (and a NIC need not fetch it by DMA). SEND
    /// and WRITE only, at most the QP's `max_inline_data` bytes. (A soft device still finds
    /// the bytes through the scatter list's keys; a real one ignores them.)
    pub inline: bool,
}

impl SendWr {
    /// A signaled work request with no scatter list.
    pub fn new(wr_id: u64, op: SendOp) -> SendWr {
        SendWr {
            wr_id,
            op,
            sgl: Sgl::new(),
            signaled: true,
            solicited: false,
            ud: None,
            inline: false,
        }
    }

    /// The same request, sent inline ([`SendWr::inline`]).
    #[must_use]
    pub fn inlined(mut self) -> SendWr {
        self.inline = true;
        self
    }

    /// Adds a scatter/gather element.
    #[must_use]
    pub fn sge(mut self, addr: u64, length: u32, lkey: u32) -> SendWr {
        self.sgl.push(Sge { addr, length, lkey });
        self
    }

    /// Total length of the scatter list.
    pub fn len(&self) -> u64 {
        self.sgl.iter().map(|s| u64::from(s.length)).sum()
    }

    /// Whether the scatter list is empty (or all zero-length).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the payload goes (for UD: the 40-byte GRH area first).
    pub sgl: Sgl,
}

impl RecvWr {
    /// A receive with no buffers (enough for a zero-byte SEND or a WRITE with immediate).
    pub fn new(wr_id: u64) -> RecvWr {
        RecvWr { wr_id, sgl: Sgl::new() }
    }

    /// Adds a scatter/gather element.
    #[must_use]
    pub fn sge(mut self, addr: u64, length: u32, lkey: u32) -> RecvWr {
        self.sgl.push(Sge { addr, length, lkey });
        self
    }
}

/// The status of a work completion (`ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS.
    Success,
    /// IBV_WC_LOC_LEN_ERR: a receive buffer was too small, or a send too long.
    LocLenErr,
    /// IBV_WC_LOC_QP_OP_ERR: an internal consistency error.
    LocQpOpErr,
    /// IBV_WC_LOC_PROT_ERR: a local key, bound or protection domain check failed.
    LocProtErr,
    /// IBV_WC_WR_FLUSH_ERR: the QP entered the error state before this work ran.
    WrFlushErr,
    /// IBV_WC_BAD_RESP_ERR: an unexpected response.
    BadRespErr,
    /// IBV_WC_REM_INV_REQ_ERR: the responder NAKed the request as invalid.
    RemInvReqErr,
    /// IBV_WC_REM_ACCESS_ERR: the responder NAKed a key, bound or access-right violation.
    RemAccessErr,
    /// IBV_WC_REM_OP_ERR: the responder could not complete the operation.
    RemOpErr,
    /// IBV_WC_RETRY_EXC_ERR: no response after `retry_cnt` retries.
    RetryExcErr,
    /// IBV_WC_RNR_RETRY_EXC_ERR: the responder had no receive posted, `rnr_retry` times.
    RnrRetryExcErr,
    /// IBV_WC_LOC_ACCESS_ERR: a local access violation (a device reports it; the soft
    /// provider's local checks give LOC_PROT_ERR).
    LocAccessErr,
    /// IBV_WC_FATAL_ERR: the device failed.
    FatalErr,
    /// IBV_WC_GENERAL_ERR: a device error of no other kind.
    GeneralErr,
    /// Another `ibv_wc_status` value, as the device reported it.
    Other(u32),
}

/// The opcode of a work completion (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND finished.
    Send,
    /// An RDMA WRITE finished.
    RdmaWrite,
    /// An RDMA READ finished.
    RdmaRead,
    /// A compare-and-swap finished.
    CompSwap,
    /// A fetch-and-add finished.
    FetchAdd,
    /// A SEND arrived.
    Recv,
    /// An RDMA WRITE with immediate data arrived.
    RecvRdmaWithImm,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Success or the error.
    pub status: WcStatus,
    /// What finished.
    pub opcode: WcOpcode,
    /// Bytes received (receives, READs; for UD including the 40-byte GRH area).
    pub byte_len: u32,
    /// Immediate data, for receives that carried it.
    pub imm: Option<u32>,
    /// The local QP.
    pub qp_num: Qpn,
    /// UD receives: the sender's QP.
    pub src_qp: Option<Qpn>,
    /// UD receives: the first 40 bytes of the buffer hold a GRH (or the IPv4 header in bytes
    /// 20–39).
    pub grh: bool,
}
