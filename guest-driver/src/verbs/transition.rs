//! The attributes of a QP's state changes, as ibverbs programs set them
//! (`ibv_rc_pingpong`, `ibv_uc_pingpong`): what [`super::Qp::modify`] takes for each
//! transition of an RC or a UC QP (docs/hardware-interface.md §7.8, §14.13).

use rnic_abi::verbs::{attr, QpAttr, QpState};

/// Attributes for RESET -> INIT, as ibv_rc_pingpong sets them: port 1, P_Key index 0,
/// and the remote accesses (`ACCESS_REMOTE_*`) the QP allows.
pub fn init_attr(access: u32) -> (QpAttr, u32) {
    let a = QpAttr {
        qp_state: QpState::Init as u8,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    (
        a,
        attr::STATE | attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS,
    )
}

/// Attributes for INIT -> RTR: the remote QP and its GID, the first PSN expected, the path
/// MTU ([`rnic_abi::verbs::mtu`]), the READs and atomics accepted at once, and the RNR NAK timer code.
/// The address vector uses source GID 0, traffic class 0 and a hop limit (TTL) of 64.
pub fn rtr_attr(
    dest_qpn: u32,
    dgid: [u8; 16],
    rq_psn: u32,
    path_mtu: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
) -> (QpAttr, u32) {
    let a = QpAttr {
        qp_state: QpState::Rtr as u8,
        path_mtu,
        dest_qp_num: dest_qpn,
        rq_psn,
        max_dest_rd_atomic,
        min_rnr_timer,
        dgid,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        port_num: 1,
        ..QpAttr::default()
    };
    (
        a,
        attr::STATE
            | attr::AV
            | attr::PATH_MTU
            | attr::DEST_QPN
            | attr::RQ_PSN
            | attr::MAX_DEST_RD_ATOMIC
            | attr::MIN_RNR_TIMER,
    )
}

/// Attributes for RTR -> RTS: the first PSN sent, the ACK timeout code, the transport and
/// RNR retry counts (7 RNR retries: forever), and the READs and atomics in flight at once.
pub fn rts_attr(
    sq_psn: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    max_rd_atomic: u8,
) -> (QpAttr, u32) {
    let a = QpAttr {
        qp_state: QpState::Rts as u8,
        sq_psn,
        timeout,
        retry_cnt,
        rnr_retry,
        max_rd_atomic,
        ..QpAttr::default()
    };
    (
        a,
        attr::STATE
            | attr::TIMEOUT
            | attr::RETRY_CNT
            | attr::RNR_RETRY
            | attr::SQ_PSN
            | attr::MAX_QP_RD_ATOMIC,
    )
}

/// Attributes for INIT -> RTR of a UC QP, as ibv_uc_pingpong sets them: the remote QP
/// and its GID, the first PSN expected and the path MTU ([`rnic_abi::verbs::mtu`]); UC has no READs,
/// atomics or RNR NAKs, so none of RC's responder attributes.
pub fn uc_rtr_attr(dest_qpn: u32, dgid: [u8; 16], rq_psn: u32, path_mtu: u8) -> (QpAttr, u32) {
    let (a, m) = rtr_attr(dest_qpn, dgid, rq_psn, path_mtu, 0, 0);
    (a, m & !(attr::MAX_DEST_RD_ATOMIC | attr::MIN_RNR_TIMER))
}

/// Attributes for RTR -> RTS of a UC QP: the first PSN sent, and nothing of RC's
/// timers and retries.
pub fn uc_rts_attr(sq_psn: u32) -> (QpAttr, u32) {
    let a = QpAttr {
        qp_state: QpState::Rts as u8,
        sq_psn,
        ..QpAttr::default()
    };
    (a, attr::STATE | attr::SQ_PSN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::mtu;

    #[test]
    fn pingpong_attributes_and_masks() {
        let (a, m) = init_attr(rnic_abi::verbs::ACCESS_REMOTE_WRITE);
        assert_eq!(a.qp_state, QpState::Init as u8);
        assert_eq!((a.port_num, a.pkey_index), (1, 0));
        assert_eq!(a.qp_access_flags, rnic_abi::verbs::ACCESS_REMOTE_WRITE);
        assert_eq!(m, 0x1 | 0x8 | 0x10 | 0x20);

        let gid = [7u8; 16];
        let (a, m) = rtr_attr(0x123, gid, 0x456, mtu::MTU_1024, 1, 12);
        assert_eq!(a.qp_state, QpState::Rtr as u8);
        assert_eq!((a.dest_qp_num, a.rq_psn), (0x123, 0x456));
        assert_eq!(
            (a.path_mtu, a.max_dest_rd_atomic, a.min_rnr_timer),
            (3, 1, 12)
        );
        assert_eq!(a.dgid, gid);
        assert_eq!(rnic_abi::verbs::mtu_bytes(a.path_mtu), Some(1024));
        // IBV_QP_STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC |
        // MIN_RNR_TIMER, as ibv_rc_pingpong passes.
        assert_eq!(
            m,
            0x1 | 0x80 | 0x100 | 0x10_0000 | 0x1000 | 0x2_0000 | 0x8000
        );

        let (a, m) = rts_attr(0x789, 14, 7, 7, 1);
        assert_eq!(a.qp_state, QpState::Rts as u8);
        assert_eq!(a.sq_psn, 0x789);
        assert_eq!(
            (a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic),
            (14, 7, 7, 1)
        );
        assert_eq!(m, 0x1 | 0x200 | 0x400 | 0x800 | 0x1_0000 | 0x2000);
    }

    #[test]
    fn uc_attributes_leave_out_rcs_own() {
        let (a, m) = uc_rtr_attr(0x12, [1; 16], 0x34, mtu::MTU_4096);
        assert_eq!((a.dest_qp_num, a.rq_psn, a.path_mtu), (0x12, 0x34, 5));
        // IBV_QP_STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN, as ibv_uc_pingpong passes.
        assert_eq!(m, 0x1 | 0x80 | 0x100 | 0x10_0000 | 0x1000);
        let (a, m) = uc_rts_attr(0x56);
        assert_eq!((a.qp_state, a.sq_psn), (QpState::Rts as u8, 0x56));
        assert_eq!(m, 0x1 | 0x1_0000);
    }
}
