//! Unreliable datagram QPs (`rnic_abi::ud`): single-packet SENDs addressed per work
//! request, with a DETH, no acknowledgements and no retries.
//!
//! A UD QP is an ordinary [`Qp`] (its send queue, receive queue or SRQ, its CQs and its
//! state) that this module marks as UD and gives a Q_Key. Its send side replaces the
//! requester ([`run_send`]): each WQE becomes one packet and is done once sent, and the
//! completer retires it as any other. Its receive side replaces the responder
//! ([`RdmaState::receive_datagram`]).

use std::collections::BTreeMap;

use rnic_abi::ud::{ModifyQpQkey, UdSendWqe, GRH_LEN, QKEY_USE_OWN, UD_MAX_PAYLOAD};
use rnic_abi::verbs::{attr, send_flags, wc, wc_flags, wr, Cqe, ModifyQpReq, QpState, WcStatus};
use zerocopy::{FromBytes, IntoBytes};

use super::drops::Drop;
use super::env::Env;
use super::error::VerbsError;
use super::mkey::Access;
use super::qp::Qp;
use super::requester::{self, gather, scatter_gather};
use super::wire::{Route, Wire};
use super::wqe::OpState;
use super::wqe::SendOp;
use super::RdmaState;
use crate::roce::packet::{opcode as op, Bth, Deth, Headers, Packet, DEFAULT_PKEY};
use crate::roce::psn;
use rnic_abi::cmd::Status;

/// Bytes of an Ethernet header: the IPv4 header follows it in a frame.
const ETH_HEADER_LEN: usize = 14;
/// Bytes of the IPv4 header a UD receive gets in its GRH space.
const IPV4_HEADER_LEN: usize = 20;

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
    };
    wire.send_to(qp, &route, &hdrs, &payload);
    WcStatus::Success
}

impl RdmaState {
    /// Delivers a UD packet (already parsed from `frame`) to UD QP `qp`, whose Q_Key is
    /// `own_qkey`: into its next receive, GRH first, or dropped and counted. A receive
    /// that cannot take it completes with an error; the QP stays as it is (UD has no
    /// connection to break).
    pub fn receive_datagram(
        &mut self,
        qp: &mut Qp,
        pkt: &Packet,
        frame: &[u8],
        env: &Env,
        own_qkey: u32,
    ) -> Result<(), Drop> {
        let bth = &pkt.hdrs.bth;
        if bth.pkey != DEFAULT_PKEY {
            return Err(Drop::Pkey);
        }
        if !matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(Drop::State);
        }
        let deth = pkt.hdrs.deth.ok_or(Drop::Opcode)?;
        if deth.qkey != own_qkey {
            return Err(Drop::Qkey);
        }
        if pkt.payload.len() > UD_MAX_PAYLOAD as usize {
            return Err(Drop::TooLong);
        }
        let recv = self.next_recv(qp, env).ok_or(Drop::NoReceive)?;
        self.take_recv(qp, env);
        let mut cqe = Cqe {
            qp_num: qp.qpn,
            src_qp: deth.src_qp,
            opcode: wc::RECV,
            ..Cqe::default()
        };
        let status = match recv {
            Err(_) => WcStatus::LocQpOpErr,
            Ok(recv) => {
                cqe.wr_id = recv.wr_id;
                // The GRH space: 20 zero bytes, then the IPv4 header as it arrived.
                let mut data = vec![0u8; GRH_LEN as usize - IPV4_HEADER_LEN];
                data.extend_from_slice(
                    frame
                        .get(ETH_HEADER_LEN..ETH_HEADER_LEN + IPV4_HEADER_LEN)
                        .ok_or(Drop::Length)?,
                );
                data.extend_from_slice(pkt.payload);
                if data.len() as u64 > recv.capacity() {
                    WcStatus::LocLenErr
                } else {
                    let placed = scatter_gather(
                        &recv.sges,
                        qp.pdn,
                        &self.mrs,
                        Access::LocalWrite,
                        0,
                        data.len() as u64,
                        |at, addr, n| {
                            use vm_memory::Bytes;
                            env.w.write_slice(&data[at..at + n], addr).is_ok()
                        },
                    );
                    match placed {
                        Ok(()) => {
                            cqe.byte_len = data.len() as u32;
                            WcStatus::Success
                        }
                        Err(status) => status,
                    }
                }
            }
        };
        if status == WcStatus::Success {
            cqe.wc_flags = wc_flags::GRH
                | if bth.solicited {
                    wc_flags::SOLICITED
                } else {
                    0
                };
            if let Some(imm) = pkt.hdrs.imm {
                cqe.wc_flags |= wc_flags::WITH_IMM;
                cqe.imm_or_inv = u32::from_le_bytes(imm);
            }
        }
        cqe.status = status as u8;
        self.complete(qp.recv_cqn, cqe, env);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::qp::{self, ModifyError};
    use crate::roce::packet::{build, parse, Addressing};
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
