//! Unreliable connected QPs (`rnic_abi::verbs::QPT_UC`, docs/hardware-interface.md
//! §14.13): RC's SENDs and WRITEs, with and without immediate, under the UC opcodes, with
//! no acknowledgement, no retry and no READ or atomic.
//!
//! A UC QP is an ordinary [`Qp`] that this module marks as UC. Its send side
//! ([`run_send`]) is the requester's, packets built as for RC but with UC opcodes and no
//! AckReq: a message is done once its last packet is sent, and the completer retires it
//! as any other. Its receive side is the responder's
//! ([`super::responder::on_uc_request`]), which drops what it cannot take without a word
//! to the sender, as rxe's `rxe_resp.c` does for UC.

use std::collections::BTreeSet;

use rnic_abi::verbs::{attr, wr, QpState, WcStatus};

use super::env::Env;
use super::mkey::mr::MrTable;
use super::qp::{mtu, Qp};
use super::requester::{self, Window};
use super::wire::Wire;
use super::wqe::OpState;
use crate::roce::psn;

/// Packets a UC QP sends in one turn of the engine at most, as an RC QP's window bounds
/// its own: a long message goes out over several turns, and other QPs get theirs between.
pub const TURN_PACKETS: u32 = requester::SEND_WINDOW;

/// The UC QPs of a function.
#[derive(Debug, Default)]
pub struct UcTable {
    qps: BTreeSet<u32>,
}

impl UcTable {
    /// Whether QP `qpn` is a UC QP.
    pub fn contains(&self, qpn: u32) -> bool {
        self.qps.contains(&qpn)
    }

    /// QP `qpn` is a UC QP.
    pub fn add(&mut self, qpn: u32) {
        self.qps.insert(qpn);
    }

    /// QP `qpn` is gone.
    pub fn remove(&mut self, qpn: u32) {
        self.qps.remove(&qpn);
    }
}

/// (required, optional) attributes of a UC QP's transition, as the IB spec's QP state
/// table gives them for UC, or `None` if the transition is not allowed. The RC
/// attributes of reliability (timeout, retries, READ and atomic depths, RNR timer) are
/// not among them.
pub fn transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState::*;
    let init = attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS;
    let rtr = attr::AV | attr::PATH_MTU | attr::DEST_QPN | attr::RQ_PSN;
    let later = attr::CUR_STATE | attr::ACCESS_FLAGS;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (init, 0),
        (Init, Init) => (0, init),
        (Init, Rtr) => (rtr, attr::ACCESS_FLAGS | attr::PKEY_INDEX),
        (Rtr, Rts) => (attr::SQ_PSN, later),
        (Rts, Rts) | (Sqe, Rts) | (Sqd, Rts) => (0, later),
        (Rts, Sqd) => (0, attr::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (0, attr::ACCESS_FLAGS | attr::AV | attr::PATH_MTU),
        _ => return None,
    })
}

/// Takes new WQEs of UC QP `qp` and sends them, at most [`TURN_PACKETS`] packets in this
/// turn; returns whether anything happened. A message is done once its last packet is
/// sent: UC has no acknowledgement.
pub fn run_send(qp: &mut Qp, mrs: &mut MrTable, env: &Env, wire: &mut Wire) -> bool {
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
        return false;
    }
    let mut progress = requester::fetch(qp, env);
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return progress;
    }
    let mtu = mtu(&qp.attr);
    // This turn's budget: the PSNs from the first one not yet sent.
    let window = Window::from(qp.req.sent_end, TURN_PACKETS);
    for i in 0..qp.req.ops.len() {
        let o = &qp.req.ops[i];
        if o.state != OpState::Queued {
            continue;
        }
        if qp.state == QpState::Sqd && !o.assigned {
            // Draining: what has not started waits for the return to RTS.
            break;
        }
        if !o.assigned && super::ctrlq::waits_for_key(&o.op, mrs) {
            break;
        }
        if requester::local_operation(qp, i, mrs, env, true) {
            progress = true;
            if qp.req.ops[i].status != WcStatus::Success {
                break;
            }
            continue;
        }
        let o = &mut qp.req.ops[i];
        let opcode = o.op.wqe.opcode;
        let sendable = matches!(
            opcode,
            wr::SEND | wr::SEND_WITH_IMM | wr::RDMA_WRITE | wr::RDMA_WRITE_WITH_IMM
        );
        if !sendable || o.op.length() > u64::from(u32::MAX) {
            // READs, atomics and SEND with invalidate are RC's only (the library refuses
            // them at post time); a message beyond 2^32 bytes has no RETH length.
            o.fail(WcStatus::LocQpOpErr);
            progress = true;
            break;
        }
        if !o.assigned {
            o.npsn = requester::packets(o.op.length(), mtu);
            o.first_psn = qp.req.next_psn;
            o.assigned = true;
            qp.req.next_psn = psn::add(qp.req.next_psn, o.npsn);
        }
        if !window.open(psn::add(o.first_psn, o.next_pkt)) {
            break;
        }
        wire.src_port = o.session_port.filter(|&p| p != super::session::OWN_PORT);
        progress |= requester::send_op(qp, i, mrs, env, wire, mtu, window, true);
        wire.src_port = None;
        let o = &mut qp.req.ops[i];
        match o.state {
            // Every packet is out: nothing comes back to wait for.
            OpState::Sent => o.fail(WcStatus::Success),
            // A local error: nothing after it may go out.
            OpState::Done => break,
            // The turn's budget is spent: the rest goes on the next turn.
            _ => break,
        }
    }
    // Nothing is ever unacknowledged: no timer, no resend.
    qp.req.acked_end = qp.req.sent_end;
    progress
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::qp::{self, ModifyError};
    use crate::roce::opcode as op;
    use rnic_abi::verbs::QpAttr;

    #[test]
    fn uc_transitions_take_the_connection_and_none_of_rcs_reliability() {
        use QpState::{Init, Reset, Rtr, Rts};
        let init = attr::STATE | attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS;
        let rtr = attr::STATE | attr::AV | attr::PATH_MTU | attr::DEST_QPN | attr::RQ_PSN;
        // (from, to, mask, outcome): what ibv_uc_pingpong and perftest -c UC ask.
        let cases = [
            (Reset, Init, init, Ok(Init)),
            (
                Reset,
                Init,
                init & !attr::ACCESS_FLAGS,
                Err(ModifyError::BadAttr(attr::ACCESS_FLAGS)),
            ),
            (Init, Rtr, rtr, Ok(Rtr)),
            (
                Init,
                Rtr,
                rtr & !attr::RQ_PSN,
                Err(ModifyError::BadAttr(attr::RQ_PSN)),
            ),
            (
                Init,
                Rtr,
                rtr | attr::MAX_DEST_RD_ATOMIC,
                Err(ModifyError::BadAttr(attr::MAX_DEST_RD_ATOMIC)),
            ),
            (
                Init,
                Rtr,
                rtr | attr::MIN_RNR_TIMER,
                Err(ModifyError::BadAttr(attr::MIN_RNR_TIMER)),
            ),
            (Rtr, Rts, attr::STATE | attr::SQ_PSN, Ok(Rts)),
            (
                Rtr,
                Rts,
                attr::STATE | attr::SQ_PSN | attr::TIMEOUT,
                Err(ModifyError::BadAttr(attr::TIMEOUT)),
            ),
            (
                Rtr,
                Rts,
                attr::STATE | attr::SQ_PSN | attr::RETRY_CNT,
                Err(ModifyError::BadAttr(attr::RETRY_CNT)),
            ),
        ];
        for (from, to, mask, outcome) in cases {
            let a = QpAttr {
                qp_state: to as u8,
                port_num: 1,
                path_mtu: 3,
                dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
                ..QpAttr::default()
            };
            let got = qp::check_modify_with(transition, from, mask, &a, 16);
            assert_eq!(got, outcome, "{from:?} -> {to:?} {mask:#x}");
        }
    }

    #[test]
    fn uc_packets_carry_rxes_uc_opcodes() {
        // (work request, first, last) -> the opcode rxe's UC requester puts on the wire.
        let cases = [
            (wr::SEND, true, true, op::UC_SEND_ONLY),
            (wr::SEND, true, false, op::UC_SEND_FIRST),
            (wr::SEND, false, false, op::UC_SEND_MIDDLE),
            (wr::SEND, false, true, op::UC_SEND_LAST),
            (
                wr::SEND_WITH_IMM,
                true,
                true,
                op::UC_SEND_ONLY_WITH_IMMEDIATE,
            ),
            (
                wr::SEND_WITH_IMM,
                false,
                true,
                op::UC_SEND_LAST_WITH_IMMEDIATE,
            ),
            (wr::RDMA_WRITE, true, true, op::UC_RDMA_WRITE_ONLY),
            (wr::RDMA_WRITE, true, false, op::UC_RDMA_WRITE_FIRST),
            (wr::RDMA_WRITE, false, false, op::UC_RDMA_WRITE_MIDDLE),
            (wr::RDMA_WRITE, false, true, op::UC_RDMA_WRITE_LAST),
            (
                wr::RDMA_WRITE_WITH_IMM,
                true,
                true,
                op::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            ),
            (
                wr::RDMA_WRITE_WITH_IMM,
                false,
                true,
                op::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            ),
        ];
        for (wr_opcode, first, last, want) in cases {
            let got = requester::request_opcode(wr_opcode, first, last) | op::UC_TRANSPORT;
            assert_eq!(got, want, "wr {wr_opcode} first {first} last {last}");
            assert!(op::opcode_info(got).is_some_and(|i| i.is_uc()));
        }
    }

    #[test]
    fn the_table_knows_its_uc_qps() {
        let mut t = UcTable::default();
        t.add(0x11);
        assert!(t.contains(0x11) && !t.contains(0x12));
        t.remove(0x11);
        assert!(!t.contains(0x11));
    }
}
