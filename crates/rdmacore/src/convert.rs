//! Conversions between the verbs vocabulary and libibverbs' numbers.

use super::*;

pub(crate) fn mtu_from_ibv(m: u32) -> Mtu {
    match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

pub(crate) fn mtu_to_ibv(m: Mtu) -> u32 {
    match m {
        Mtu::Mtu256 => 1,
        Mtu::Mtu512 => 2,
        Mtu::Mtu1024 => 3,
        Mtu::Mtu2048 => 4,
        Mtu::Mtu4096 => 5,
    }
}

pub(crate) fn state_to_ibv(s: QpState) -> u32 {
    use sys::ibv_qp_state::*;
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Err => IBV_QPS_ERR,
    }
}

#[inline]
pub(crate) fn state_from_ibv(s: u32) -> QpState {
    use sys::ibv_qp_state::*;
    match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        // SQE (send queue error) and anything newer: the QP no longer sends.
        _ => QpState::Err,
    }
}

// Both conversions run for every completion polled. A compare for the common case and a
// table load keep them free of the jump tables a `match` over many values compiles to: an
// indirect jump is a hash lookup under QEMU's TCG, where the rxe tests run (BENCHMARKS.md,
// "Hot paths", H3).
#[inline]
pub(crate) fn status_from_ibv(s: u32) -> WcStatus {
    use sys::ibv_wc_status::*;
    if s == IBV_WC_SUCCESS {
        return WcStatus::Success;
    }
    match s {
        IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        IBV_WC_BAD_RESP_ERR => WcStatus::BadRespErr,
        IBV_WC_LOC_ACCESS_ERR => WcStatus::LocAccessErr,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        IBV_WC_REM_OP_ERR => WcStatus::RemOpErr,
        IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        IBV_WC_FATAL_ERR => WcStatus::FatalErr,
        IBV_WC_GENERAL_ERR => WcStatus::GeneralErr,
        other => WcStatus::Other(other),
    }
}

#[inline]
pub(crate) fn opcode_from_ibv(o: u32) -> WcOpcode {
    use sys::ibv_wc_opcode::*;
    // Send-side opcodes by value (IBV_WC_SEND 0 … IBV_WC_FETCH_ADD 4, IBV_WC_BIND_MW 5).
    const SEND_SIDE: [WcOpcode; 6] = [
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::CompSwap,
        WcOpcode::FetchAdd,
        WcOpcode::Send,
    ];
    if o == IBV_WC_RECV {
        WcOpcode::Recv
    } else if o == IBV_WC_RECV_RDMA_WITH_IMM {
        WcOpcode::RecvRdmaWithImm
    } else {
        // The undefined opcode of some error completions reads as a SEND.
        SEND_SIDE.get(o as usize).copied().unwrap_or(WcOpcode::Send)
    }
}

pub(crate) fn access_flags(a: Access) -> AccessFlags {
    let mut f = AccessFlags::none();
    for (ours, theirs) in [
        (Access::LOCAL_WRITE, AccessFlags::LocalWrite),
        (Access::REMOTE_WRITE, AccessFlags::RemoteWrite),
        (Access::REMOTE_READ, AccessFlags::RemoteRead),
        (Access::REMOTE_ATOMIC, AccessFlags::RemoteAtomic),
    ] {
        if a.contains(ours) {
            f |= theirs;
        }
    }
    f
}
