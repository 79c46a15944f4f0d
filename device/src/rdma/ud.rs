//! Unreliable datagram QPs (`rnic_abi::ud`): single-packet SENDs addressed per work
//! request, with a DETH, no acknowledgements and no retries.
//!
//! A UD QP is an ordinary [`Qp`] (its send queue, receive queue or SRQ, its CQs and its
//! state) that this module marks as UD and gives a Q_Key. Its send side replaces the
//! requester ([`run_send`]): each WQE becomes one packet and is done once sent, and the
//! completer retires it as any other. Its receive side is the responder's, as in rxe's
//! `rxe_resp.c` ([`super::responder::on_datagram`]).

use std::collections::BTreeMap;

use rnic_abi::ud::{ModifyQpQkey, UdSendWqe, QKEY_USE_OWN, UD_MAX_PAYLOAD};
use rnic_abi::verbs::{attr, send_flags, wr, ModifyQpReq, QpState, WcStatus};
use zerocopy::{FromBytes, IntoBytes};

use super::env::Env;
use super::error::VerbsError;
use super::qp::Qp;
use super::requester::{self, gather};
use super::wire::{Route, Wire};
use super::wqe::OpState;
use super::wqe::SendOp;
use crate::roce::hdr::{Bth, Deth, Headers, DEFAULT_PKEY};
use crate::roce::opcode as op;
use crate::roce::psn;
use rnic_abi::cmd::Status;

/// The UD QPs of a function and their Q_Keys.
#[derive(Debug, Default)]
pub struct UdTable {
    qkeys: BTreeMap<u32, u32>,
}

impl UdTable {
    /// The Q_Key of QP `qpn` if it is a UD QP.
    pub fn qkey(&self, qpn: u32) -> Option<u32> {
        self.qkeys.get(&qpn).copied()
    }

    /// QP `qpn` is a UD QP (Q_Key 0 until MODIFY_QP sets one).
    pub fn add(&mut self, qpn: u32) {
        self.qkeys.insert(qpn, 0);
    }

    /// QP `qpn` is gone.
    pub fn remove(&mut self, qpn: u32) {
        self.qkeys.remove(&qpn);
    }

    /// Records the Q_Key a modify of UD QP `qpn` set.
    pub fn set_qkey(&mut self, qpn: u32, qkey: u32) {
        if let Some(q) = self.qkeys.get_mut(&qpn) {
            *q = qkey;
        }
    }
}

/// (required, optional) attributes of a UD QP's transition, as the IB spec's QP state
/// table gives them for UD, or `None` if the transition is not allowed.
pub fn transition(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState::*;
    let init = attr::PKEY_INDEX | attr::PORT | attr::QKEY;
    let later = attr::CUR_STATE | attr::QKEY;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (init, 0),
        (Init, Init) => (0, init),
        (Init, Rtr) => (0, attr::PKEY_INDEX | attr::QKEY),
        (Rtr, Rts) => (attr::SQ_PSN, later),
        (Rts, Rts) | (Sqe, Rts) | (Sqd, Rts) => (0, later),
        (Rts, Sqd) => (0, attr::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (0, attr::PKEY_INDEX | attr::QKEY),
        _ => return None,
    })
}

/// Splits a `MODIFY_QP` body into the `ModifyQpReq` and the Q_Key that follows it when
/// the mask has `QKEY` (and only then).
pub fn split_modify(body: &[u8]) -> Result<(&[u8], Option<u32>), VerbsError> {
    let base = size_of::<ModifyQpReq>();
    let Some((req, ext)) = body.split_at_checked(base) else {
        return Ok((body, None));
    };
    let mask = u32::from_le_bytes(req[4..8].try_into().unwrap_or_default());
    if mask & attr::QKEY == 0 {
        return Ok((body, None));
    }
    let q = ModifyQpQkey::read_from_bytes(ext)
        .ok()
        .filter(|q| q.reserved == 0)
        .ok_or(VerbsError::new(Status::BadParam, body.len() as u32))?;
    Ok((req, Some(q.qkey)))
}

/// Takes new WQEs of UD QP `qp` and sends each as one packet; returns whether anything
/// happened. Every WQE is done once its packet is built: UD has no acknowledgement.
pub fn run_send(
    qp: &mut Qp,
    mrs: &super::mkey::mr::MrTable,
    env: &Env,
    wire: &mut Wire,
    own_qkey: u32,
) -> bool {
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
        return false;
    }
    let mut progress = requester::fetch(qp, env);
    // In SQD nothing new starts; in ERR `fetch` flushed what came.
    if qp.state != QpState::Rts {
        return progress;
    }
    for i in 0..qp.req.ops.len() {
        if qp.req.ops[i].state != OpState::Queued {
            continue;
        }
        let op = qp.req.ops[i].op.clone();
        let status = send_datagram(qp, &op, mrs, env, wire, own_qkey);
        qp.req.ops[i].fail(status);
        progress = true;
        if status != WcStatus::Success {
            // The completer moves the QP to ERR when it retires this one.
            break;
        }
    }
    progress
}

/// Sends one UD WQE; returns its completion status.
fn send_datagram(
    qp: &mut Qp,
    op: &SendOp,
    mrs: &super::mkey::mr::MrTable,
    env: &Env,
    wire: &mut Wire,
    own_qkey: u32,
) -> WcStatus {
    let Ok(ud) = UdSendWqe::read_from_bytes(op.wqe.as_bytes()) else {
        return WcStatus::LocQpOpErr;
    };
    // A migrated QP speaks as its home (a UD QP never migrates; this is the rule).
    if qp.home.is_none() && !wire.gids.is_source(ud.sgid_index) {
        return WcStatus::LocQpOpErr;
    }
    let opcode = match ud.opcode {
        wr::SEND => op::UD_SEND_ONLY,
        wr::SEND_WITH_IMM => op::UD_SEND_ONLY_WITH_IMMEDIATE,
        _ => return WcStatus::LocQpOpErr,
    };
    if ud.remote_qpn > 0xFF_FFFF {
        return WcStatus::LocQpOpErr;
    }
    let len = op.length();
    if len > u64::from(UD_MAX_PAYLOAD) {
        return WcStatus::LocLenErr;
    }
    let mut payload = Vec::with_capacity(len as usize);
    if let Err(status) = gather(op, qp.pdn, mrs, env, 0, len, &mut payload) {
        return status;
    }
    let qkey = if ud.remote_qkey & QKEY_USE_OWN != 0 {
        own_qkey
    } else {
        ud.remote_qkey
    };
    let p = qp.req.next_psn;
    qp.req.next_psn = psn::add(p, 1);
    let hdrs = Headers {
        bth: Bth {
            opcode,
            solicited: ud.flags & send_flags::SOLICITED != 0,
            pkey: DEFAULT_PKEY,
            dest_qp: ud.remote_qpn,
            psn: p,
            ..Bth::default()
        },
        deth: Some(Deth {
            qkey,
            src_qp: qp.qpn,
        }),
        imm: (opcode == op::UD_SEND_ONLY_WITH_IMMEDIATE).then_some(ud.imm.to_le_bytes()),
        ..Headers::default()
    };
    let route = Route {
        dgid: ud.dgid,
        hop_limit: ud.hop_limit,
        traffic_class: ud.traffic_class,
        flow_label: 0,
        dest_qpn: ud.remote_qpn,
        sgid_index: ud.sgid_index,
    };
    wire.send_to(qp, &route, &hdrs, &payload);
    WcStatus::Success
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::qp::{self, ModifyError};
    use crate::roce::build::{build, Addressing};
    use crate::roce::hdr::{ETH_HEADER_LEN, IPV4_HEADER_LEN};
    use crate::roce::parse::parse;
    use rnic_abi::verbs::QpAttr;

    #[test]
    fn ud_transitions_need_the_qkey_and_not_the_rc_attributes() {
        use QpState::{Init, Reset, Rtr, Rts};
        let base = attr::STATE | attr::PKEY_INDEX | attr::PORT;
        // (from, to, mask, outcome)
        let cases = [
            (Reset, Init, base, Err(ModifyError::BadAttr(attr::QKEY))),
            (Reset, Init, base | attr::QKEY, Ok(Init)),
            (Init, Rtr, attr::STATE, Ok(Rtr)),
            (
                Rtr,
                Rts,
                attr::STATE,
                Err(ModifyError::BadAttr(attr::SQ_PSN)),
            ),
            // RC attributes do not apply.
            (
                Rtr,
                Rts,
                attr::STATE | attr::SQ_PSN | attr::TIMEOUT,
                Err(ModifyError::BadAttr(attr::TIMEOUT)),
            ),
            (Rtr, Rts, attr::STATE | attr::SQ_PSN, Ok(Rts)),
        ];
        for (from, to, mask, outcome) in cases {
            let a = QpAttr {
                qp_state: to as u8,
                port_num: 1,
                ..QpAttr::default()
            };
            let got = qp::check_modify_with(transition, from, mask, &a, 16);
            assert_eq!(got, outcome, "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn the_qkey_follows_a_modify_that_names_it() {
        let req = ModifyQpReq {
            qpn: 0x11,
            attr_mask: attr::STATE | attr::QKEY,
            ..ModifyQpReq::default()
        };
        let mut body = req.as_bytes().to_vec();
        assert!(split_modify(&body).is_err(), "QKEY without the Q_Key");
        body.extend_from_slice(
            ModifyQpQkey {
                qkey: 0x1234,
                reserved: 0,
            }
            .as_bytes(),
        );
        let (base, qkey) = split_modify(&body).unwrap();
        assert_eq!((base.len(), qkey), (size_of::<ModifyQpReq>(), Some(0x1234)));
        let plain = ModifyQpReq {
            attr_mask: attr::STATE,
            ..req
        };
        assert_eq!(split_modify(plain.as_bytes()).unwrap().1, None);
    }

    #[test]
    fn a_ud_send_is_bth_deth_imm_as_rxe_lays_them_out() {
        let hdrs = Headers {
            bth: Bth::new(op::UD_SEND_ONLY_WITH_IMMEDIATE, 0x12, 0x345),
            deth: Some(Deth {
                qkey: 0x8001_0203,
                src_qp: 0x11,
            }),
            imm: Some([0xA, 0xB, 0xC, 0xD]),
            ..Headers::default()
        };
        let mut frame = Vec::new();
        build(&Addressing::default(), &hdrs, b"hi", &mut frame).unwrap();
        let bth = ETH_HEADER_LEN + IPV4_HEADER_LEN + 8;
        assert_eq!(frame[bth], 0x65);
        assert_eq!(
            &frame[bth + 12..bth + 24],
            &[0x80, 0x01, 0x02, 0x03, 0, 0, 0, 0x11, 0xA, 0xB, 0xC, 0xD]
        );
        assert_eq!(&frame[bth + 24..bth + 26], b"hi");
        let pkt = parse(&frame).unwrap();
        assert_eq!(pkt.hdrs.deth, hdrs.deth);
    }
}
