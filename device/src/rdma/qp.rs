//! Queue pairs: attributes and the state machine of `ibv_modify_qp`.
//!
//! The transport state a QP carries while it moves data lives with the stages that use it
//! ([`super::requester`], [`super::responder`]); this file is the control path.

use rnic_abi::verbs::{
    attr, mtu_bytes, QpAttr, QpState, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};

use super::requester::RequesterState;
use super::responder::ResponderState;
use super::wqe::{QpCaps, WorkQueue};
use crate::fabric::frame::Endpoint;

/// A reliable-connected queue pair.
#[derive(Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Protection domain.
    pub pdn: u32,
    /// CQ of send completions.
    pub send_cqn: u32,
    /// CQ of receive completions.
    pub recv_cqn: u32,
    /// Every send WR completes as if signaled.
    pub sq_sig_all: bool,
    /// Current state.
    pub state: QpState,
    /// Current attributes.
    pub attr: QpAttr,
    /// Creation limits.
    pub caps: QpCaps,
    /// Send queue.
    pub sq: WorkQueue,
    /// Receive queue.
    pub rq: WorkQueue,
    /// The send doorbell's (page, slot), for the rung bitmap.
    pub sq_slot: (u32, u32),
    /// Requester and completer state.
    pub req: RequesterState,
    /// Responder state.
    pub resp: ResponderState,
    /// The address (the GID's IP and the MAC) the QP was created with, while it lives on
    /// another function after `MIGRATE_QP`: its frames keep this source, and the switch
    /// steers frames for (this IP, this QPN) to the function that holds it now. `None`
    /// while it lives where it was created (its function's own address).
    pub home: Option<Endpoint>,
}

/// Why a modify was refused, with the `Status` it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModifyError {
    /// The transition is not allowed from the current state (or CUR_STATE disagrees).
    BadTransition,
    /// A required attribute is missing, a given one is not allowed for the transition, or
    /// a value is out of range. The payload is the offending attribute mask bit.
    BadAttr(u32),
}

const INIT_REQUIRED: u32 = attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS;
const RTR_REQUIRED: u32 = attr::AV
    | attr::PATH_MTU
    | attr::DEST_QPN
    | attr::RQ_PSN
    | attr::MAX_DEST_RD_ATOMIC
    | attr::MIN_RNR_TIMER;
const RTS_REQUIRED: u32 =
    attr::SQ_PSN | attr::TIMEOUT | attr::RETRY_CNT | attr::RNR_RETRY | attr::MAX_QP_RD_ATOMIC;

/// (required, optional) attributes of a transition, as the IB spec's QP state table gives
/// them for RC, or `None` if the transition is not allowed.
pub fn transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState::*;
    let common = attr::CUR_STATE;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (INIT_REQUIRED, 0),
        (Init, Init) => (0, INIT_REQUIRED),
        (Init, Rtr) => (RTR_REQUIRED, attr::ACCESS_FLAGS | attr::PKEY_INDEX),
        (Rtr, Rts) => (
            RTS_REQUIRED,
            common | attr::ACCESS_FLAGS | attr::MIN_RNR_TIMER,
        ),
        (Rts, Rts) | (Sqe, Rts) => (0, common | attr::ACCESS_FLAGS | attr::MIN_RNR_TIMER),
        (Rts, Sqd) => (0, attr::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => (0, common | attr::ACCESS_FLAGS | attr::MIN_RNR_TIMER),
        (Sqd, Sqd) => (
            0,
            attr::ACCESS_FLAGS
                | attr::MIN_RNR_TIMER
                | attr::TIMEOUT
                | attr::RETRY_CNT
                | attr::RNR_RETRY
                | attr::MAX_QP_RD_ATOMIC
                | attr::MAX_DEST_RD_ATOMIC
                | attr::AV
                | attr::PATH_MTU,
        ),
        _ => return None,
    })
}

/// Checks a modify against the QP's state and the device limit on outstanding READs and
/// atomics; returns the target state.
pub fn check_modify(
    current: QpState,
    mask: u32,
    a: &QpAttr,
    max_rd_atom: u32,
) -> Result<QpState, ModifyError> {
    check_modify_with(transition, current, mask, a, max_rd_atom)
}

/// [`check_modify`] with the state table `transition` of another QP type (UD, see
/// `super::ud`).
pub fn check_modify_with(
    transition: fn(QpState, QpState) -> Option<(u32, u32)>,
    current: QpState,
    mask: u32,
    a: &QpAttr,
    max_rd_atom: u32,
) -> Result<QpState, ModifyError> {
    let target = if mask & attr::STATE != 0 {
        QpState::from_u8(a.qp_state).ok_or(ModifyError::BadAttr(attr::STATE))?
    } else {
        current
    };
    if mask & attr::CUR_STATE != 0 && QpState::from_u8(a.cur_qp_state) != Some(current) {
        return Err(ModifyError::BadTransition);
    }
    let (required, optional) = transition(current, target).ok_or(ModifyError::BadTransition)?;
    let given = mask & !attr::STATE;
    if let Some(bit) = first_bit(required & !given) {
        return Err(ModifyError::BadAttr(bit));
    }
    if let Some(bit) = first_bit(given & !(required | optional)) {
        // To RESET or ERR anything goes and is ignored, as ibverbs providers do.
        if !matches!(target, QpState::Reset | QpState::Err) {
            return Err(ModifyError::BadAttr(bit));
        }
    }
    let bad = |bit: u32, ok: bool| {
        if given & bit != 0 && !ok {
            Err(ModifyError::BadAttr(bit))
        } else {
            Ok(())
        }
    };
    bad(attr::PKEY_INDEX, a.pkey_index == 0)?;
    bad(attr::PORT, a.port_num == 1)?;
    bad(
        attr::ACCESS_FLAGS,
        a.qp_access_flags
            & !(ACCESS_LOCAL_WRITE
                | ACCESS_REMOTE_WRITE
                | ACCESS_REMOTE_READ
                | ACCESS_REMOTE_ATOMIC)
            == 0,
    )?;
    bad(attr::PATH_MTU, mtu_bytes(a.path_mtu).is_some())?;
    bad(attr::DEST_QPN, a.dest_qp_num <= 0xFF_FFFF)?;
    bad(attr::RQ_PSN, a.rq_psn <= 0xFF_FFFF)?;
    bad(attr::SQ_PSN, a.sq_psn <= 0xFF_FFFF)?;
    bad(attr::TIMEOUT, a.timeout <= 31)?;
    bad(attr::RETRY_CNT, a.retry_cnt <= 7)?;
    bad(attr::RNR_RETRY, a.rnr_retry <= 7)?;
    bad(attr::MIN_RNR_TIMER, a.min_rnr_timer <= 31)?;
    bad(
        attr::MAX_QP_RD_ATOMIC,
        u32::from(a.max_rd_atomic) <= max_rd_atom,
    )?;
    bad(
        attr::MAX_DEST_RD_ATOMIC,
        u32::from(a.max_dest_rd_atomic) <= max_rd_atom,
    )?;
    // The address vector: IPv4-mapped GIDs only (RoCEv2 over IPv4), source GID index 0.
    bad(
        attr::AV,
        a.sgid_index == 0 && a.dgid[..10] == [0; 10] && a.dgid[10..12] == [0xff, 0xff],
    )?;
    Ok(target)
}

/// Copies the attributes `mask` names from `a` into `current`.
pub fn apply(current: &mut QpAttr, mask: u32, a: &QpAttr) {
    let has = |bit| mask & bit != 0;
    if has(attr::PKEY_INDEX) {
        current.pkey_index = a.pkey_index;
    }
    if has(attr::PORT) {
        current.port_num = a.port_num;
    }
    if has(attr::ACCESS_FLAGS) {
        current.qp_access_flags = a.qp_access_flags;
    }
    if has(attr::AV) {
        current.dgid = a.dgid;
        current.sgid_index = a.sgid_index;
        current.hop_limit = a.hop_limit;
        current.traffic_class = a.traffic_class;
        current.flow_label = a.flow_label;
    }
    if has(attr::PATH_MTU) {
        current.path_mtu = a.path_mtu;
    }
    if has(attr::DEST_QPN) {
        current.dest_qp_num = a.dest_qp_num;
    }
    if has(attr::RQ_PSN) {
        current.rq_psn = a.rq_psn;
    }
    if has(attr::SQ_PSN) {
        current.sq_psn = a.sq_psn;
    }
    if has(attr::TIMEOUT) {
        current.timeout = a.timeout;
    }
    if has(attr::RETRY_CNT) {
        current.retry_cnt = a.retry_cnt;
    }
    if has(attr::RNR_RETRY) {
        current.rnr_retry = a.rnr_retry;
    }
    if has(attr::MIN_RNR_TIMER) {
        current.min_rnr_timer = a.min_rnr_timer;
    }
    if has(attr::MAX_QP_RD_ATOMIC) {
        current.max_rd_atomic = a.max_rd_atomic;
    }
    if has(attr::MAX_DEST_RD_ATOMIC) {
        current.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
}

fn first_bit(bits: u32) -> Option<u32> {
    (bits != 0).then(|| 1 << bits.trailing_zeros())
}

/// The path MTU of a QP in bytes (1024 until it is set).
pub fn mtu(a: &QpAttr) -> u32 {
    mtu_bytes(a.path_mtu).unwrap_or(1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

    fn to(state: QpState) -> QpAttr {
        QpAttr {
            qp_state: state as u8,
            port_num: 1,
            path_mtu: 3,
            dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
            ..QpAttr::default()
        }
    }

    #[test]
    fn the_rc_path_reset_init_rtr_rts() {
        let m = attr::STATE | INIT_REQUIRED;
        assert_eq!(check_modify(Reset, m, &to(Init), 16), Ok(Init));
        assert_eq!(
            check_modify(Init, attr::STATE | RTR_REQUIRED, &to(Rtr), 16),
            Ok(Rtr)
        );
        assert_eq!(
            check_modify(Rtr, attr::STATE | RTS_REQUIRED, &to(Rts), 16),
            Ok(Rts)
        );
    }

    #[test]
    fn missing_and_extra_attributes_are_named() {
        assert_eq!(
            check_modify(
                Reset,
                attr::STATE | attr::PORT | attr::PKEY_INDEX,
                &to(Init),
                16
            ),
            Err(ModifyError::BadAttr(attr::ACCESS_FLAGS))
        );
        assert_eq!(
            check_modify(
                Reset,
                attr::STATE | INIT_REQUIRED | attr::SQ_PSN,
                &to(Init),
                16
            ),
            Err(ModifyError::BadAttr(attr::SQ_PSN))
        );
    }

    #[test]
    fn illegal_transitions_and_values_are_refused() {
        assert_eq!(
            check_modify(Reset, attr::STATE | RTR_REQUIRED, &to(Rtr), 16),
            Err(ModifyError::BadTransition)
        );
        assert_eq!(
            check_modify(Init, attr::STATE | RTS_REQUIRED, &to(Rts), 16),
            Err(ModifyError::BadTransition)
        );
        let mut a = to(Rts);
        a.retry_cnt = 8;
        assert_eq!(
            check_modify(Rtr, attr::STATE | RTS_REQUIRED, &a, 16),
            Err(ModifyError::BadAttr(attr::RETRY_CNT))
        );
        let mut a = to(Rtr);
        a.path_mtu = 6;
        assert_eq!(
            check_modify(Init, attr::STATE | RTR_REQUIRED, &a, 16),
            Err(ModifyError::BadAttr(attr::PATH_MTU))
        );
        let mut a = to(Rtr);
        a.max_dest_rd_atomic = 17;
        assert_eq!(
            check_modify(Init, attr::STATE | RTR_REQUIRED, &a, 16),
            Err(ModifyError::BadAttr(attr::MAX_DEST_RD_ATOMIC))
        );
        let mut a = to(Rtr);
        a.dgid = [1; 16];
        assert_eq!(
            check_modify(Init, attr::STATE | RTR_REQUIRED, &a, 16),
            Err(ModifyError::BadAttr(attr::AV))
        );
        let mut a = to(Rts);
        a.cur_qp_state = Init as u8;
        assert_eq!(
            check_modify(Rts, attr::STATE | attr::CUR_STATE, &a, 16),
            Err(ModifyError::BadTransition)
        );
    }

    #[test]
    fn any_state_may_go_to_reset_or_error() {
        for s in [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err] {
            assert_eq!(
                check_modify(s, attr::STATE, &to(QpState::Err), 16),
                Ok(QpState::Err)
            );
            assert_eq!(check_modify(s, attr::STATE, &to(Reset), 16), Ok(Reset));
        }
    }
}
