//! The Dynamically Connected transport (`rnic_abi::dc`): one DC initiator (DCI) reaches
//! many DC targets (DCTs), one connection at a time.
//!
//! Both are ordinary [`Qp`]s that this module marks. A DCI runs the RC requester and
//! completer unchanged; this module only decides which WQEs the requester may start
//! (`RequesterState::admit`) and points the QP's address vector at the target of the
//! connection. Between targets it runs a handshake of its own: `DC_CONNECT` (the DCT
//! checks the DC access key, takes the DCI's PSN as its expected PSN and ACKs) and,
//! once everything sent is acknowledged, `DC_DISCONNECT` (ACKed too). Handshake packets
//! take one PSN of the DCI's stream each and are resent on the local ACK timeout like any
//! request; their answers never reach the completer.
//!
//! A DCT runs the RC responder unchanged, answering the DCI it is bound to; a connect
//! from another DCI while it is bound is answered with an RNR NAK (retry later).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rnic_abi::cmd::Status;
use rnic_abi::dc::DcSendWqe;
use rnic_abi::gid::mapped;
use rnic_abi::verbs::{QpState, WcStatus};
use zerocopy::{FromBytes, IntoBytes};

use super::drops::Drop;
use super::env::Env;
use super::error::VerbsError;
use super::mkey::mr::MrTable;
use super::qp::{Admit, Qp, RequesterState, ResponderState};
use super::requester;
use super::wire::{Route, Wire};
use super::wqe::OpState;
use crate::roce::hdr::{nak, rnr_delay, Aeth, AethKind, Bth, Dceth, Headers, DEFAULT_PKEY};
use crate::roce::opcode as op;
use crate::roce::parse::Packet;
use crate::roce::psn;

/// The RNR timer code a busy DCT answers with (0.64 ms, IB table 45 code 3... see
/// [`rnr_delay`]).
const BUSY_RNR_TIMER: u8 = 3;
/// The handshake timeout of a DCI whose `timeout` attribute is 0 (no RC timer).
const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(50);

/// Where a DCI WQE goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// DCT number.
    pub dctn: u32,
    /// The target's IPv4 address.
    pub ip: [u8; 4],
    /// The DC access key presented.
    pub key: u64,
}

impl Target {
    /// The 16 bytes a WQE for this target carries (`SendWqe::reserved1`).
    fn tag(self) -> [u8; 16] {
        let mut t = [0u8; 16];
        t[..4].copy_from_slice(&self.dctn.to_le_bytes());
        t[4..8].copy_from_slice(&self.ip);
        t[8..].copy_from_slice(&self.key.to_le_bytes());
        t
    }

    /// The target a DCI WQE names.
    pub fn of(op: &super::wqe::SendOp) -> Self {
        let wqe = DcSendWqe::read_from_bytes(op.wqe.as_bytes()).unwrap_or_default();
        Target {
            dctn: wqe.dctn,
            ip: wqe.dest_ip,
            key: wqe.dc_key,
        }
    }
}

/// A handshake packet in flight.
#[derive(Debug, Clone, Copy)]
struct Handshake {
    target: Target,
    psn: u32,
    deadline: Instant,
    tries_left: u8,
}

/// Where a DCI's connection is.
#[derive(Debug, Clone, Copy)]
enum Link {
    Idle,
    Connecting(Handshake),
    Connected(Target),
    Disconnecting(Handshake),
}

/// The DCI a DCT is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Peer {
    ip: [u8; 4],
    dci: u32,
    connect_psn: u32,
}

#[derive(Debug)]
enum Role {
    Dci(Link),
    Dct { key: u64, peer: Option<Peer> },
}

/// The DC QPs of a function.
#[derive(Debug, Default)]
pub struct DcTable {
    roles: BTreeMap<u32, Role>,
}

impl DcTable {
    /// QP `qpn` is a DCI.
    pub fn add_dci(&mut self, qpn: u32) {
        self.roles.insert(qpn, Role::Dci(Link::Idle));
    }

    /// QP `qpn` is a DCT (key 0 until `SET_DC_KEY`).
    pub fn add_dct(&mut self, qpn: u32) {
        self.roles.insert(qpn, Role::Dct { key: 0, peer: None });
    }

    /// QP `qpn` is gone.
    pub fn remove(&mut self, qpn: u32) {
        self.roles.remove(&qpn);
    }

    /// Whether `qpn` is a DCI.
    pub fn is_dci(&self, qpn: u32) -> bool {
        matches!(self.roles.get(&qpn), Some(Role::Dci(_)))
    }

    /// Whether `qpn` is a DCT.
    pub fn is_dct(&self, qpn: u32) -> bool {
        matches!(self.roles.get(&qpn), Some(Role::Dct { .. }))
    }

    /// Gives DCT `qpn`, which is in RESET if `in_reset`, the access key `key`
    /// (`SET_DC_KEY`): `BAD_STATE` out of RESET, `NOT_FOUND` if `qpn` is no DCT.
    pub fn set_key(&mut self, qpn: u32, key: u64, in_reset: bool) -> Result<(), VerbsError> {
        match self.roles.get_mut(&qpn) {
            Some(Role::Dct { key: k, .. }) if in_reset => {
                *k = key;
                Ok(())
            }
            Some(Role::Dct { .. }) => Err(VerbsError::new(Status::BadState, qpn)),
            _ => Err(VerbsError::new(Status::NotFound, qpn)),
        }
    }
}

fn route(qp: &Qp, ip: [u8; 4], dest_qpn: u32) -> Route {
    Route {
        dgid: mapped(ip),
        dest_qpn,
        ..Route::of(qp)
    }
}

fn handshake_timeout(qp: &Qp) -> Duration {
    RequesterState::timeout(&qp.attr).unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT)
}

fn send_handshake(qp: &Qp, wire: &mut Wire, opcode: u8, h: &Handshake) {
    let hdrs = Headers {
        bth: Bth {
            opcode,
            pkey: DEFAULT_PKEY,
            dest_qp: h.target.dctn,
            ack_req: true,
            psn: h.psn,
            ..Bth::default()
        },
        dceth: Some(Dceth {
            dc_key: h.target.key,
            dci_qpn: qp.qpn,
        }),
        ..Headers::default()
    };
    wire.send_to(qp, &route(qp, h.target.ip, h.target.dctn), &hdrs, &[]);
}

/// The target of the first WQE not yet started.
fn first_new(qp: &Qp) -> Option<Target> {
    qp.req
        .ops
        .iter()
        .find(|o| !o.assigned && o.state == OpState::Queued)
        .map(|o| Target::of(&o.op))
}

/// Fails the first WQE not yet started (the one a handshake was for) with `status`.
fn fail_head(qp: &mut Qp, status: WcStatus) {
    if let Some(o) = qp
        .req
        .ops
        .iter_mut()
        .find(|o| !o.assigned && o.state == OpState::Queued)
    {
        o.fail(status);
    }
}

/// Continues the DCI's stream after handshake PSN `p`.
fn resume_after(qp: &mut Qp, p: u32) {
    let next = psn::add(p, 1);
    qp.req.next_psn = next;
    qp.req.acked_end = next;
    qp.req.sent_end = next;
    qp.req.retry_left = qp.attr.retry_cnt;
    qp.req.rnr_left = qp.attr.rnr_retry;
    // The handshake's deadline: the requester arms its own timer for what it sends next.
    qp.req.timer = None;
}

/// Advances a DCI's connection and gates its requester. Returns whether it sent anything.
fn step(link: &mut Link, qp: &mut Qp, wire: &mut Wire, now: Instant) -> bool {
    let start = |qp: &mut Qp, target: Target, opcode: u8, wire: &mut Wire| {
        let h = Handshake {
            target,
            psn: qp.req.next_psn,
            deadline: now + handshake_timeout(qp),
            tries_left: qp.attr.retry_cnt,
        };
        if opcode == op::DC_CONNECT {
            // Answers from the target pass the source check from now on, and the
            // requester's packets go there.
            qp.attr.dgid = mapped(target.ip);
            qp.attr.dest_qp_num = target.dctn;
        }
        send_handshake(qp, wire, opcode, &h);
        h
    };
    match *link {
        Link::Idle => {
            let Some(target) = first_new(qp) else {
                return false;
            };
            qp.req.admit = Admit::Nothing;
            *link = Link::Connecting(start(qp, target, op::DC_CONNECT, wire));
            true
        }
        Link::Connected(current) => {
            // The requester starts WQEs for this target in order and stops at the first
            // one for another. The DCI moves on when that one is next and everything
            // started is done and acknowledged; later WQEs for this target wait for
            // the next connection to it.
            let next = first_new(qp).filter(|t| *t != current);
            let started = qp
                .req
                .ops
                .iter()
                .any(|o| o.assigned && o.state != OpState::Done);
            if next.is_none() || started || qp.req.unacked() {
                qp.req.admit = Admit::Only(current.tag());
                return false;
            }
            qp.req.admit = Admit::Nothing;
            *link = Link::Disconnecting(start(qp, current, op::DC_DISCONNECT, wire));
            true
        }
        Link::Connecting(mut h) | Link::Disconnecting(mut h) => {
            let connecting = matches!(link, Link::Connecting(_));
            qp.req.admit = Admit::Nothing;
            // Wake the engine when the handshake is due (the completer ignores a timer
            // with nothing unacknowledged).
            qp.req.timer = Some(h.deadline);
            if now < h.deadline {
                return false;
            }
            if h.tries_left == 0 {
                log::debug!("dci {:#x}: no answer from DCT {:#x}", qp.qpn, h.target.dctn);
                fail_head(qp, WcStatus::RetryExcErr);
                *link = Link::Idle;
                return true;
            }
            h.tries_left -= 1;
            h.deadline = now + handshake_timeout(qp);
            qp.req.timer = Some(h.deadline);
            let opcode = if connecting {
                op::DC_CONNECT
            } else {
                op::DC_DISCONNECT
            };
            send_handshake(qp, wire, opcode, &h);
            *link = if connecting {
                Link::Connecting(h)
            } else {
                Link::Disconnecting(h)
            };
            true
        }
    }
}

/// Answers a DCT's handshake packet with an AETH of PSN `p` to the DCI that sent it.
fn answer(qp: &Qp, wire: &mut Wire, pkt: &Packet, dci: u32, aeth: Aeth) {
    let hdrs = Headers {
        bth: Bth {
            opcode: op::RC_ACKNOWLEDGE,
            pkey: DEFAULT_PKEY,
            dest_qp: dci,
            psn: pkt.hdrs.bth.psn,
            ..Bth::default()
        },
        aeth: Some(aeth),
        ..Headers::default()
    };
    wire.send_to(qp, &route(qp, pkt.src_ip, dci), &hdrs, &[]);
}

/// The send side of DC QP `qp`: a DCI's requester behind its connection, or a DCT's
/// send queue, which fails every WQE posted to it (a DCT only receives).
pub fn run(
    table: &mut DcTable,
    qp: &mut Qp,
    mrs: &mut MrTable,
    env: &Env,
    wire: &mut Wire,
    now: Instant,
    retransmits: &mut u64,
) -> bool {
    let Some(role) = table.roles.get_mut(&qp.qpn) else {
        return false;
    };
    let Role::Dci(link) = role else {
        let fetched = requester::fetch(qp, env);
        for o in qp.req.ops.iter_mut().filter(|o| o.state == OpState::Queued) {
            o.fail(WcStatus::LocQpOpErr);
        }
        return fetched;
    };
    let mut progress = false;
    if matches!(qp.state, QpState::Rts | QpState::Sqd) {
        progress |= requester::fetch(qp, env);
        progress |= step(link, qp, wire, now);
    }
    progress | requester::run(qp, mrs, env, wire, now, retransmits, false)
}

/// What [`DcTable::receive`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DcPacket {
    /// Took it.
    Taken,
    /// Took a DCT's refusal of the DCI's connection: the DCI's first WQE failed, and
    /// completes now (the caller retires it).
    Refused,
}

impl DcTable {
    /// Takes the packets only DC QPs handle: a DCI's handshake answers and a DCT's
    /// handshakes. `None`: an ordinary RC packet, for the responder or completer.
    pub fn receive(
        &mut self,
        qp: &mut Qp,
        pkt: &Packet,
        wire: &mut Wire,
        now: Instant,
    ) -> Option<Result<DcPacket, Drop>> {
        let control = crate::roce::opcode::opcode_info(pkt.hdrs.bth.opcode)
            .is_some_and(|i| i.is_dc_control());
        let role = self.roles.get_mut(&qp.qpn)?;
        match role {
            Role::Dct { key, peer } => {
                if !control {
                    return None;
                }
                Some(on_handshake(qp, *key, peer, pkt, wire).map(|()| DcPacket::Taken))
            }
            Role::Dci(link) => {
                if control {
                    return Some(Err(Drop::Transport));
                }
                if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
                    return None;
                }
                let (Link::Connecting(h) | Link::Disconnecting(h)) = *link else {
                    return None;
                };
                if pkt.hdrs.bth.opcode != op::RC_ACKNOWLEDGE
                    || pkt.hdrs.bth.psn != h.psn
                    || pkt.src_ip != h.target.ip
                {
                    return None;
                }
                let connecting = matches!(link, Link::Connecting(_));
                let kind = pkt.hdrs.aeth.map(|a| a.kind());
                match kind {
                    Some(AethKind::Ack { .. }) => {
                        resume_after(qp, h.psn);
                        *link = if connecting {
                            Link::Connected(h.target)
                        } else {
                            Link::Idle
                        };
                    }
                    Some(AethKind::RnrNak { timer }) => {
                        // The DCT serves another DCI: ask again later, without limit.
                        let mut h = h;
                        h.deadline = now + rnr_delay(timer);
                        *link = if connecting {
                            Link::Connecting(h)
                        } else {
                            Link::Disconnecting(h)
                        };
                    }
                    Some(AethKind::Nak { code }) => {
                        let status = if code == nak::REMOTE_ACCESS_ERROR {
                            WcStatus::RemAccessErr
                        } else {
                            WcStatus::RemOpErr
                        };
                        log::debug!(
                            "dci {:#x}: DCT {:#x} refused the connection: {status:?}",
                            qp.qpn,
                            h.target.dctn
                        );
                        resume_after(qp, h.psn);
                        *link = Link::Idle;
                        fail_head(qp, status);
                        return Some(Ok(DcPacket::Refused));
                    }
                    _ => return Some(Err(Drop::Header)),
                }
                Some(Ok(DcPacket::Taken))
            }
        }
    }
}

/// A DCT's answer to `DC_CONNECT` or `DC_DISCONNECT`.
fn on_handshake(
    qp: &mut Qp,
    key: u64,
    peer: &mut Option<Peer>,
    pkt: &Packet,
    wire: &mut Wire,
) -> Result<(), Drop> {
    if !matches!(qp.state, QpState::Rtr | QpState::Rts) {
        return Err(Drop::State);
    }
    let dceth = pkt.hdrs.dceth.ok_or(Drop::Header)?;
    let dci = dceth.dci_qpn;
    if dceth.dc_key != key {
        answer(qp, wire, pkt, dci, Aeth::nak(nak::REMOTE_ACCESS_ERROR));
        return Err(Drop::DcKey);
    }
    let p = pkt.hdrs.bth.psn;
    let from = |q: &Peer| q.ip == pkt.src_ip && q.dci == dci;
    if pkt.hdrs.bth.opcode == op::DC_DISCONNECT {
        // A disconnect older than the connect (a late copy) leaves the binding alone.
        if peer
            .as_ref()
            .is_some_and(|q| from(q) && psn::diff(p, q.connect_psn) > 0)
        {
            *peer = None;
            // Stray packets of the old connection now fail the source check.
            qp.attr.dgid = mapped([0; 4]);
            qp.attr.dest_qp_num = 0;
        }
        answer(qp, wire, pkt, dci, Aeth::ack(0));
        return Ok(());
    }
    match peer {
        Some(q) if !from(q) => {
            answer(qp, wire, pkt, dci, Aeth::rnr_nak(BUSY_RNR_TIMER));
            return Ok(());
        }
        // The same connect again: its ACK went missing.
        Some(q) if q.connect_psn == p => {}
        _ => {
            *peer = Some(Peer {
                ip: pkt.src_ip,
                dci,
                connect_psn: p,
            });
            qp.attr.dgid = mapped(pkt.src_ip);
            qp.attr.dest_qp_num = dci;
            qp.resp = ResponderState::default();
            qp.resp.start(psn::add(p, 1));
        }
    }
    answer(qp, wire, pkt, dci, Aeth::ack(0));
    Ok(())
}
