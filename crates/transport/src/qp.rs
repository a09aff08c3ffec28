//! The verbs QP state machine: which transitions `ibv_modify_qp` allows and the attributes
//! each needs.

use verbs::{ModifyQp, QpAttr, QpState, QpType};

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
    use verbs::{Mtu, Path, Psn, Qpn};

    fn rtr_rc() -> ModifyQp {
        ModifyQp {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::Mtu1024),
            dest: Some(Path::new("10.0.0.2".parse().unwrap(), Qpn::new(0x11))),
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
