//! Queue pairs: types, states, attributes and the verbs state machine.

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

/// Where a connected QP sends: the remote device's address and QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// The remote address (the GID's IP).
    pub ip: IpAddr,
    /// The remote QP.
    pub qpn: Qpn,
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

/// Why a state change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The verbs state machine has no such edge.
    #[error("invalid QP transition {from:?} -> {to:?}")]
    Invalid {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// The transition needs an attribute the request lacks.
    #[error("QP transition {from:?} -> {to:?} of a {qp_type:?} QP needs {attr}")]
    Missing {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
        /// The attribute.
        attr: &'static str,
    },
    /// An attribute value is out of range.
    #[error("{attr} = {value} is out of range ({range})")]
    Range {
        /// The attribute.
        attr: &'static str,
        /// The value.
        value: u32,
        /// The allowed range.
        range: &'static str,
    },
}

/// Checks a state change and the attributes it needs, as `ibv_modify_qp` does.
pub(crate) fn check_transition(
    qp_type: QpType,
    from: QpState,
    m: &ModifyQp,
) -> Result<QpState, TransitionError> {
    use QpState::{Init, Reset, Rtr, Rts, Sqd};
    let to = m.state.unwrap_or(from);
    let ok = matches!(
        (from, to),
        (_, Reset)
            | (_, QpState::Err)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Rts)
            | (Sqd, Sqd)
    );
    if !ok {
        return Err(TransitionError::Invalid { from, to });
    }
    let need = |present: bool, attr: &'static str| {
        if present { Ok(()) } else { Err(TransitionError::Missing { from, to, qp_type, attr }) }
    };
    match (from, to, qp_type) {
        (Reset, Init, QpType::Ud) => need(m.qkey.is_some(), "qkey")?,
        (Init, Rtr, QpType::Rc) => {
            need(m.path_mtu.is_some(), "path_mtu")?;
            need(m.dest.is_some(), "dest (ah_attr, dest_qp_num)")?;
            need(m.rq_psn.is_some(), "rq_psn")?;
            need(m.max_dest_rd_atomic.is_some(), "max_dest_rd_atomic")?;
            need(m.min_rnr_timer.is_some(), "min_rnr_timer")?;
        }
        (Init, Rtr, QpType::Uc) => {
            need(m.path_mtu.is_some(), "path_mtu")?;
            need(m.dest.is_some(), "dest (ah_attr, dest_qp_num)")?;
            need(m.rq_psn.is_some(), "rq_psn")?;
        }
        (Rtr, Rts, QpType::Rc) => {
            need(m.sq_psn.is_some(), "sq_psn")?;
            need(m.timeout.is_some(), "timeout")?;
            need(m.retry_cnt.is_some(), "retry_cnt")?;
            need(m.rnr_retry.is_some(), "rnr_retry")?;
            need(m.max_rd_atomic.is_some(), "max_rd_atomic")?;
        }
        (Rtr, Rts, _) => need(m.sq_psn.is_some(), "sq_psn")?,
        _ => {}
    }
    let range = |attr, v: Option<u8>, max: u8, text| match v {
        Some(v) if v > max => Err(TransitionError::Range { attr, value: v.into(), range: text }),
        _ => Ok(()),
    };
    range("timeout", m.timeout, 31, "0..=31")?;
    range("retry_cnt", m.retry_cnt, 7, "0..=7")?;
    range("rnr_retry", m.rnr_retry, 7, "0..=7")?;
    range("min_rnr_timer", m.min_rnr_timer, 31, "0..=31")?;
    if m.max_rd_atomic == Some(0) && qp_type == QpType::Rc {
        return Err(TransitionError::Range { attr: "max_rd_atomic", value: 0, range: "1..=255" });
    }
    Ok(to)
}

/// Applies the attributes of `m` to `a`.
pub(crate) fn apply(a: &mut QpAttr, m: &ModifyQp) {
    macro_rules! set {
        ($($f:ident),*) => { $(if let Some(v) = m.$f { a.$f = v; })* };
    }
    set!(
        path_mtu,
        rq_psn,
        sq_psn,
        timeout,
        retry_cnt,
        rnr_retry,
        min_rnr_timer,
        max_rd_atomic,
        max_dest_rd_atomic,
        qkey,
        traffic_class,
        access
    );
    if let Some(d) = m.dest {
        a.dest = Some(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtr_rc() -> ModifyQp {
        ModifyQp {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::Mtu1024),
            dest: Some(Path { ip: "10.0.0.2".parse().unwrap(), qpn: Qpn::new(0x11) }),
            rq_psn: Some(Psn::new(1)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..ModifyQp::default()
        }
    }

    #[test]
    fn the_state_machine_refuses_skips_and_missing_attributes() {
        use QpState::{Init, Reset, Rtr, Rts};
        let err_state = QpState::Err;
        let to = |s| ModifyQp { state: Some(s), ..ModifyQp::default() };
        assert!(check_transition(QpType::Rc, Reset, &to(Rts)).is_err());
        assert!(check_transition(QpType::Rc, Reset, &to(Rtr)).is_err());
        assert!(check_transition(QpType::Rc, Init, &to(Rts)).is_err());
        assert!(check_transition(QpType::Rc, err_state, &to(Rts)).is_err());
        assert_eq!(check_transition(QpType::Rc, Rts, &to(err_state)), Ok(err_state));
        assert_eq!(check_transition(QpType::Rc, err_state, &to(Reset)), Ok(Reset));
        assert_eq!(check_transition(QpType::Rc, Reset, &to(Init)), Ok(Init));
        assert!(matches!(
            check_transition(QpType::Ud, Reset, &to(Init)),
            Err(TransitionError::Missing { attr: "qkey", .. })
        ));
        assert!(matches!(
            check_transition(QpType::Rc, Init, &to(Rtr)),
            Err(TransitionError::Missing { attr: "path_mtu", .. })
        ));
        assert_eq!(check_transition(QpType::Rc, Init, &rtr_rc()), Ok(Rtr));
        assert_eq!(check_transition(QpType::Ud, Init, &to(Rtr)), Ok(Rtr));
        assert!(matches!(
            check_transition(QpType::Rc, Rtr, &to(Rts)),
            Err(TransitionError::Missing { attr: "sq_psn", .. })
        ));
        let bad = ModifyQp { retry_cnt: Some(8), ..rtr_rc() };
        assert!(matches!(
            check_transition(QpType::Rc, Init, &bad),
            Err(TransitionError::Range { .. })
        ));
    }
}
