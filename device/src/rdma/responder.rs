//! The responder: executes incoming requests in PSN order and answers them. SENDs land in
//! receive WQEs, WRITEs in registered memory, READs and atomics are answered from it; a
//! request with no receive posted gets an RNR NAK; duplicates are acknowledged again,
//! duplicate READs answered again from memory and duplicate atomics from the saved
//! result, never applied twice.
//!
//! Acknowledgements are coalesced: a SEND or WRITE packet that asks for one (AckReq), ends
//! a message, or is the [`ACK_INTERVAL`]th since the last one, and every duplicate SEND or
//! WRITE packet, makes an ACK due, and [`flush_ack`] sends one ACK for the latest PSN
//! executed once the frames that arrived together are handled. NAKs go at once.

use std::sync::atomic::{AtomicU64, Ordering};

use rnic_abi::ud::{GRH_LEN, UD_MAX_PAYLOAD};
use rnic_abi::verbs::{
    event, flush, wc, wc_flags, Cqe, QpState, WcStatus, ACCESS_FLUSH_GLOBAL,
    ACCESS_FLUSH_PERSISTENT, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use vm_memory::GuestMemoryBackend;

use super::drops::{self, Drop};
use super::env::Env;
use super::mkey::Access;
use super::qp::{mtu, Inbound, Qp, Resource};
use super::requester::ACK_INTERVAL;
use super::requester::{append_from_memory, scatter_gather};
use super::wire::Wire;
use super::RdmaState;
use crate::fabric::held::{Held, Payload};
use crate::fabric::train::Run;
use crate::roce::hdr::{
    nak, Aeth, AtomicAckEth, Bth, Headers, AETH_CREDIT_INVALID, DEFAULT_PKEY, ETH_HEADER_LEN,
    IPV4_HEADER_LEN,
};
use crate::roce::opcode as op;
use crate::roce::opcode::opcode_info;
use crate::roce::parse::Packet;
use crate::roce::psn;

/// A responder-side failure: the NAK code to send and, where a receive WQE was consumed,
/// the status its completion reports.
struct Failure {
    nak: u8,
    recv_status: WcStatus,
}

fn fail(nak: u8, recv_status: WcStatus) -> Failure {
    Failure { nak, recv_status }
}

fn reply_bth(qp: &Qp, opcode: u8, p: u32) -> Bth {
    Bth {
        opcode,
        pkey: DEFAULT_PKEY,
        dest_qp: qp.attr.dest_qp_num,
        psn: p,
        ..Bth::default()
    }
}

fn send_ack(qp: &mut Qp, wire: &mut Wire, p: u32, aeth: Aeth) {
    qp.resp.unacked = 0;
    let hdrs = Headers {
        bth: reply_bth(qp, op::RC_ACKNOWLEDGE, p),
        aeth: Some(aeth.with_msn(qp.resp.msn)),
        ..Headers::default()
    };
    wire.send(qp, &hdrs, &[]);
}

/// Sends the ACK that is due, if any: one for every run of packets executed together.
pub fn flush_ack(qp: &mut Qp, wire: &mut Wire) {
    let Some(p) = qp.resp.ack_due.take() else {
        return;
    };
    // A QP that failed meanwhile has said so with a NAK.
    if matches!(
        qp.state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    ) {
        send_ack(qp, wire, p, Aeth::ack(AETH_CREDIT_INVALID));
    }
}

/// Handles a request packet for `qp`. A request ahead of the expected PSN, or a duplicate
/// READ or atomic no longer remembered, is not executed: `Err(drops::Drop::Psn)`.
pub fn on_request(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), drops::Drop> {
    let bth = pkt.hdrs.bth;
    if qp.state == QpState::Rtr && !qp.resp.established {
        qp.resp.established = true;
        rdma.post_event(env, event::COMM_EST, qp.qpn);
    }
    let d = psn::diff(bth.psn, qp.resp.epsn);
    if d < 0 {
        return duplicate(rdma, qp, pkt, env, wire);
    }
    if d > 0 {
        // A gap: say once where we are, and drop until the requester goes back there.
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            let epsn = qp.resp.epsn;
            send_ack(qp, wire, epsn, Aeth::nak(nak::PSN_SEQ_ERROR));
        }
        return Err(drops::Drop::Psn);
    }
    qp.resp.nak_sent = false;
    if super::ctrlq::remote_key_pending(&rdma.mrs, qp.pdn, &pkt.hdrs) {
        // The memory is still being registered through a control queue: not ready, as a
        // missing receive is (nothing consumed, the PSN stays expected).
        rdma.counters.rnr_naks_sent += 1;
        send_ack(qp, wire, bth.psn, Aeth::rnr_nak(qp.attr.min_rnr_timer));
        return Ok(());
    }
    answer(rdma, qp, pkt, payload, 1, env, wire);
    Ok(())
}

/// Handles a request packet for UC QP `qp` ([`super::uc`]): executed as the RC request
/// of the same operation when it is the expected PSN of a message in sequence; else, or
/// if it cannot be executed (a bad rkey, too small a receive, none posted), it is dropped
/// with the rest of its message, and a receive the message took is kept for the next
/// one. A first packet starts a new message whatever the PSN before it. Nothing is ever
/// answered.
pub fn on_uc_request(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), drops::Drop> {
    let bth = pkt.hdrs.bth;
    if qp.state == QpState::Rtr && !qp.resp.established {
        qp.resp.established = true;
        rdma.post_event(env, event::COMM_EST, qp.qpn);
    }
    let first = opcode_info(bth.opcode).is_some_and(|i| i.is_first());
    if first {
        // Whatever the last message left unfinished is lost with it.
        abandon_uc_message(qp);
        qp.resp.epsn = bth.psn;
        qp.resp.dropping = false;
    } else if qp.resp.dropping || psn::diff(bth.psn, qp.resp.epsn) != 0 {
        abandon_uc_message(qp);
        qp.resp.dropping = true;
        return Err(drops::Drop::Psn);
    }
    let rc = Packet {
        hdrs: Headers {
            bth: Bth {
                opcode: op::rc_equivalent(bth.opcode),
                ..bth
            },
            ..pkt.hdrs
        },
        ..*pkt
    };
    let executed = execute(rdma, qp, &rc, payload, 1, env, wire, true);
    // UC acknowledges nothing.
    qp.resp.ack_due = None;
    qp.resp.unacked = 0;
    match executed {
        Ok(Some(())) => Ok(()),
        Ok(None) => {
            qp.resp.dropping = true;
            Err(drops::Drop::NoReceive)
        }
        Err(_) => {
            abandon_uc_message(qp);
            qp.resp.dropping = true;
            Err(drops::Drop::Refused)
        }
    }
}

/// Drops the UC message in progress: a SEND's receive is kept, unfinished and without a
/// completion, for the next SEND to fill from its start.
fn abandon_uc_message(qp: &mut Qp) {
    if let Some(Inbound::Send { recv, .. }) = qp.resp.cur.take() {
        qp.resp.spare = Some(recv);
    }
}

/// Whether `qp` takes `run` (the MIDDLE packets of a train) as one: it expects the
/// run's first PSN, is in the middle of a message of the run's kind, and the run's
/// packets are its MTU long. Executing them one by one would then do the same.
pub fn takes_run(qp: &Qp, run: &Run) -> bool {
    let opcode = run.packet.hdrs.bth.opcode;
    let kind = match qp.resp.cur {
        Some(Inbound::Send { .. }) => op::RC_SEND_MIDDLE,
        Some(Inbound::Write { .. }) => op::RC_RDMA_WRITE_MIDDLE,
        None => return false,
    };
    opcode == kind
        && psn::diff(run.packet.hdrs.bth.psn, qp.resp.epsn) == 0
        && run.is_mtu_long(mtu(&qp.attr))
}

/// Executes a run that [`takes_run`] said `qp` takes, as its packets one by one would
/// be. A failure is answered as if at the run's first packet (the same message, so the
/// same completions; the bytes of the run before the failing packet may or may not have
/// been placed, which a failed message leaves undefined anyway).
pub fn on_run(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    run: Run,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), drops::Drop> {
    qp.resp.nak_sent = false;
    answer(rdma, qp, &run.packet, run.payload, run.count, env, wire);
    Ok(())
}

/// Executes the expected request of `count` packets (see [`execute`]) and answers a
/// failure: a NAK, the receive WQE's completion, the event, the error state.
fn answer(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    count: u32,
    env: &Env,
    wire: &mut Wire,
) {
    let bth = pkt.hdrs.bth;
    match execute(rdma, qp, pkt, payload, count, env, wire, false) {
        Ok(Some(())) => {}
        // RNR: nothing was consumed and the PSN stays expected.
        Ok(None) => {}
        Err(f) => {
            send_ack(qp, wire, bth.psn, Aeth::nak(f.nak));
            if let Some(Inbound::Send { recv, .. }) = qp.resp.cur.take() {
                let cqe = Cqe {
                    wr_id: recv.wr_id,
                    qp_num: qp.qpn,
                    opcode: wc::RECV,
                    status: f.recv_status as u8,
                    ..Cqe::default()
                };
                rdma.complete(qp.recv_cqn, cqe, env);
            }
            // What the requester did wrong has an event of its own; a failure of the
            // responder's own (a receive or completion it could not write) is told by
            // the QP_FATAL of entering the error state alone.
            let event = match f.nak {
                nak::REMOTE_ACCESS_ERROR => Some(event::QP_ACCESS_ERR),
                nak::REMOTE_OPERATIONAL_ERROR => None,
                _ => Some(event::QP_REQ_ERR),
            };
            if let Some(event) = event {
                rdma.post_event(env, event, qp.qpn);
            }
            rdma.enter_error(qp, env);
        }
    }
}

/// Executes the expected request: one packet, or `count` MIDDLE packets of a train's
/// run taken together, whose payload is `payload` (the packet's, or the run's).
/// `Ok(None)` means RNR (nothing consumed), which `uc` (a UC QP's request, under the RC
/// opcode of the same operation) does not answer.
#[allow(clippy::too_many_arguments)]
fn execute(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    count: u32,
    env: &Env,
    wire: &mut Wire,
    uc: bool,
) -> Result<Option<()>, Failure> {
    let bth = pkt.hdrs.bth;
    let opcode = bth.opcode;
    let info = opcode_info(opcode).ok_or(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr))?;
    match opcode {
        op::RC_RDMA_READ_REQUEST => return read_request(rdma, qp, pkt, env, wire).map(Some),
        op::RC_COMPARE_SWAP | op::RC_FETCH_ADD => {
            return atomic(rdma, qp, pkt, env, wire).map(Some)
        }
        op::RC_FLUSH | op::RC_ATOMIC_WRITE => {
            // RC only, and never inside another message.
            if uc || qp.resp.cur.is_some() {
                return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
            }
            return flush_or_atomic_write(rdma, qp, pkt, payload, env, wire).map(Some);
        }
        _ => {}
    }
    let is_send = matches!(
        opcode,
        op::RC_SEND_FIRST
            ..=op::RC_SEND_ONLY_WITH_IMMEDIATE
                | op::RC_SEND_LAST_WITH_INVALIDATE
                | op::RC_SEND_ONLY_WITH_INVALIDATE
    );
    let first = matches!(
        opcode,
        op::RC_SEND_FIRST
            | op::RC_SEND_ONLY
            | op::RC_SEND_ONLY_WITH_IMMEDIATE
            | op::RC_SEND_ONLY_WITH_INVALIDATE
            | op::RC_RDMA_WRITE_FIRST
            | op::RC_RDMA_WRITE_ONLY
            | op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
    );
    let last = !matches!(
        opcode,
        op::RC_SEND_FIRST | op::RC_SEND_MIDDLE | op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_MIDDLE
    );
    let mtu = u64::from(mtu(&qp.attr)) * u64::from(count);
    // The sequence of opcodes within a message must hold together.
    match (&qp.resp.cur, first) {
        (Some(_), true) | (None, false) => {
            return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr))
        }
        (Some(Inbound::Send { .. }), false) if !is_send => {
            return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr))
        }
        (Some(Inbound::Write { .. }), false) if is_send => {
            return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr))
        }
        _ => {}
    }
    // Every packet but the last of a message is exactly one MTU long (a run: `count`).
    let len = payload.len() as u64;
    if (!last && len != mtu) || len > mtu {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocLenErr));
    }
    let takes_recv = is_send || info.has_immediate();
    if first && is_send || (last && takes_recv && !is_send && opcode != op::RC_RDMA_WRITE_LAST) {
        // A SEND starts, or a WRITE with immediate ends: both need a receive WQE.
        // From the QP's receive queue or its SRQ (or the one a dropped UC SEND left).
        let spare = qp.resp.spare.take();
        let from_queue = spare.is_none();
        let recv = match spare {
            Some(recv) => recv,
            None => {
                let Some(recv) = rdma.next_recv(qp, env) else {
                    if !uc {
                        rdma.counters.rnr_naks_sent += 1;
                        send_ack(qp, wire, bth.psn, Aeth::rnr_nak(qp.attr.min_rnr_timer));
                    }
                    return Ok(None);
                };
                recv.map_err(|_| fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr))?
            }
        };
        if is_send {
            if from_queue {
                rdma.take_recv(qp, env);
            }
            qp.resp.cur = Some(Inbound::Send { recv, offset: 0 });
        } else {
            // WRITE with immediate: the data went (or goes) to memory; the WQE only
            // reports it.
            let byte_len = match &qp.resp.cur {
                Some(Inbound::Write { len, .. }) => *len,
                _ => pkt.hdrs.reth.map_or(0, |r| u64::from(r.dma_len)),
            };
            if let Some(Inbound::Write { .. }) | None = &qp.resp.cur {
                if let Err(f) = place_write(rdma, qp, pkt, payload, env) {
                    if !from_queue {
                        qp.resp.spare = Some(recv);
                    }
                    return Err(f);
                }
            }
            // Taken only once the data is placed: a refused WRITE leaves the receive
            // posted, to be flushed with the rest, instead of consuming it without a
            // completion.
            if from_queue {
                rdma.take_recv(qp, env);
            }
            qp.resp.cur = None;
            let cqe = Cqe {
                wr_id: recv.wr_id,
                byte_len: byte_len as u32,
                imm_or_inv: pkt.hdrs.imm.map_or(0, u32::from_le_bytes),
                qp_num: qp.qpn,
                src_qp: qp.attr.dest_qp_num,
                opcode: wc::RECV_RDMA_WITH_IMM,
                status: WcStatus::Success as u8,
                wc_flags: wc_flags::WITH_IMM
                    | if bth.solicited {
                        wc_flags::SOLICITED
                    } else {
                        0
                    },
                ..Cqe::default()
            };
            // A message whose completion cannot be written (the CQ overran) is not
            // acknowledged: the requester gets REM_OP_ERR.
            if !rdma.complete(qp.recv_cqn, cqe, env) {
                return Err(fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr));
            }
            finish_message(qp, pkt);
            return Ok(Some(()));
        }
    }
    if is_send {
        place_send(rdma, qp, payload, env)?;
        if last {
            let Some(Inbound::Send { recv, offset }) = qp.resp.cur.take() else {
                return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
            };
            let mut flags = if bth.solicited {
                wc_flags::SOLICITED
            } else {
                0
            };
            let mut imm_or_inv = 0;
            if let Some(imm) = pkt.hdrs.imm {
                flags |= wc_flags::WITH_IMM;
                imm_or_inv = u32::from_le_bytes(imm);
            }
            if let Some(rkey) = pkt.hdrs.ieth {
                if rdma.mrs.invalidate_remote(rkey, qp.pdn, qp.qpn).is_err() {
                    qp.resp.cur = Some(Inbound::Send { recv, offset });
                    return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
                }
                flags |= wc_flags::WITH_INV;
                imm_or_inv = rkey;
            }
            let cqe = Cqe {
                wr_id: recv.wr_id,
                byte_len: offset as u32,
                imm_or_inv,
                qp_num: qp.qpn,
                src_qp: qp.attr.dest_qp_num,
                opcode: wc::RECV,
                status: WcStatus::Success as u8,
                wc_flags: flags,
                ..Cqe::default()
            };
            if !rdma.complete(qp.recv_cqn, cqe, env) {
                return Err(fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr));
            }
        }
    } else {
        place_write(rdma, qp, pkt, payload, env)?;
        if last {
            qp.resp.cur = None;
        }
    }
    if last {
        finish_message(qp, pkt);
    } else {
        qp.resp.epsn = psn::add(qp.resp.epsn, count);
        qp.resp.unacked += count;
        if bth.ack_req || qp.resp.unacked >= ACK_INTERVAL {
            qp.resp.ack_due = Some(psn::add(bth.psn, count - 1));
        }
    }
    Ok(Some(()))
}

/// Ends a SEND or WRITE message: the MSN counts it, and an ACK of its last packet is due.
fn finish_message(qp: &mut Qp, pkt: &Packet) {
    qp.resp.msn = (qp.resp.msn + 1) & 0xFF_FFFF;
    qp.resp.epsn = psn::add(pkt.hdrs.bth.psn, 1);
    qp.resp.unacked += 1;
    qp.resp.ack_due = Some(pkt.hdrs.bth.psn);
}

fn place_send(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    payload: Payload,
    env: &Env,
) -> Result<(), Failure> {
    let Some(Inbound::Send { recv, offset }) = &mut qp.resp.cur else {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
    };
    let len = payload.len() as u64;
    if *offset + len > recv.capacity() {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocLenErr));
    }
    scatter_gather(
        &recv.sges,
        qp.pdn,
        &rdma.mrs,
        Access::LocalWrite,
        *offset,
        len,
        |at, addr, n| payload.write_to(at, n, env.w, addr),
    )
    .map_err(|s| {
        if s == WcStatus::LocLenErr {
            fail(nak::INVALID_REQUEST, WcStatus::LocLenErr)
        } else {
            fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocProtErr)
        }
    })?;
    *offset += len;
    Ok(())
}

fn place_write(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    env: &Env,
) -> Result<(), Failure> {
    if let Some(reth) = pkt.hdrs.reth {
        qp.resp.cur = Some(Inbound::Write {
            va: reth.va,
            rkey: reth.rkey,
            len: u64::from(reth.dma_len),
            offset: 0,
        });
    }
    // Decided before the message state is borrowed, reported after the length check.
    let allowed = qp_allows(qp, ACCESS_REMOTE_WRITE);
    let Some(Inbound::Write {
        va,
        rkey,
        len,
        offset,
    }) = &mut qp.resp.cur
    else {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
    };
    let n = payload.len() as u64;
    if *offset + n > *len {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
    }
    allowed?;
    // A zero-length WRITE places nothing and, as IB C9-88 says, needs no valid address
    // or rkey.
    if *len == 0 {
        return Ok(());
    }
    // The whole announced range is checked on the first packet: a WRITE that would go
    // out of bounds changes no byte.
    let check_len = if *offset == 0 { *len } else { n };
    let runs = rdma
        .mrs
        .check_remote(
            *rkey,
            (qp.pdn, qp.qpn),
            Access::RemoteWrite,
            va.wrapping_add(*offset),
            check_len,
        )
        .map_err(|_| fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr))?;
    let mut done = 0usize;
    for (addr, run) in runs {
        if done >= payload.len() {
            break;
        }
        let k = run.min(payload.len() - done);
        if !payload.write_to(done, k, env.w, addr) {
            return Err(fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr));
        }
        done += k;
    }
    *offset += n;
    Ok(())
}

/// Whether the QP lets remote peers do `access` (its `qp_access_flags`); if not, the
/// request is answered with a remote access error whatever the key would have allowed.
fn qp_allows(qp: &Qp, access: u32) -> Result<(), Failure> {
    if qp.attr.qp_access_flags & access == 0 {
        return Err(fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr));
    }
    Ok(())
}

/// The extended header (RETH, AtomicETH) a READ or atomic request must carry, if the QP
/// lets remote peers do `access`. Both requests are checked the same way and in the same
/// order: without the header the request is invalid; with it, [`qp_allows`] decides.
fn header_if_allowed<H>(header: Option<H>, qp: &Qp, access: u32) -> Result<H, Failure> {
    let header = header.ok_or(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr))?;
    qp_allows(qp, access)?;
    Ok(header)
}

fn read_request(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), Failure> {
    let reth = header_if_allowed(pkt.hdrs.reth, qp, ACCESS_REMOTE_READ)?;
    // A zero-length READ needs no valid address or rkey (IB C9-88).
    if reth.dma_len != 0 {
        rdma.mrs
            .check_remote(
                reth.rkey,
                (qp.pdn, qp.qpn),
                Access::RemoteRead,
                reth.va,
                u64::from(reth.dma_len),
            )
            .map_err(|_| fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr))?;
        // A one-shot READ grant ends with this READ (its responses may still be resent).
        rdma.mrs.indirect.spend(reth.rkey);
    }
    let mtu = mtu(&qp.attr);
    let npsn = u64::from(reth.dma_len).div_ceil(u64::from(mtu)).max(1) as u32;
    let p = pkt.hdrs.bth.psn;
    remember(
        qp,
        Resource::Read {
            first_psn: p,
            npsn,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
        },
    );
    send_read_responses(
        rdma,
        qp,
        env,
        wire,
        p,
        npsn,
        reth.va,
        reth.rkey,
        reth.dma_len,
        0,
    )?;
    qp.resp.msn = (qp.resp.msn + 1) & 0xFF_FFFF;
    qp.resp.epsn = psn::add(p, npsn);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn send_read_responses(
    rdma: &RdmaState,
    qp: &Qp,
    env: &Env,
    wire: &mut Wire,
    first_psn: u32,
    npsn: u32,
    va: u64,
    rkey: u32,
    len: u32,
    from: u32,
) -> Result<(), Failure> {
    let mtu = mtu(&qp.attr);
    let headers = |i: u32| {
        let opcode = match (i == 0, i + 1 == npsn) {
            (true, true) => op::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => op::RC_RDMA_READ_RESPONSE_FIRST,
            (false, true) => op::RC_RDMA_READ_RESPONSE_LAST,
            (false, false) => op::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let aeth = (opcode != op::RC_RDMA_READ_RESPONSE_MIDDLE)
            .then(|| Aeth::ack(AETH_CREDIT_INVALID).with_msn(qp.resp.msn));
        Headers {
            bth: reply_bth(qp, opcode, psn::add(first_psn, i)),
            aeth,
            ..Headers::default()
        }
    };
    // To a function of this process, the responses go as trains (see `crate::fabric::train`).
    let max_train = wire.max_train(qp, mtu);
    let mut i = from;
    while i < npsn {
        let count = max_train.min(npsn - i);
        let offset = u64::from(i) * u64::from(mtu);
        let n =
            (u64::from(len) - offset.min(u64::from(len))).min(u64::from(mtu) * u64::from(count));
        // The payload is checked, then read from memory straight into the frame or, for
        // a train's middle, left there for the requester's side to copy.
        let runs = || {
            rdma.mrs
                .check_remote(
                    rkey,
                    (qp.pdn, qp.qpn),
                    Access::ReadResponse,
                    va.wrapping_add(offset),
                    n,
                )
                .map_err(|_| fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr))
        };
        let unmapped = || fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr);
        let fill = |frame: &mut Vec<u8>| {
            if n == 0 {
                // The single empty response of a zero-length READ (C9-88: no key check).
                return Ok(());
            }
            for (addr, run) in runs()? {
                if !append_from_memory(env.r, addr, run, frame) {
                    return Err(unmapped());
                }
            }
            Ok(())
        };
        let hold = || {
            let mut held = Held::new(env.r.clone());
            for (addr, run) in runs()? {
                if !held.push(addr, run) {
                    return Err(unmapped());
                }
            }
            Ok(held)
        };
        let last = || headers(i + count - 1);
        wire.send_packets(qp, &headers(i), last, count, mtu, n, fill, Some(hold))?;
        i += count;
    }
    Ok(())
}

fn atomic(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), Failure> {
    let a = header_if_allowed(pkt.hdrs.atomic, qp, ACCESS_REMOTE_ATOMIC)?;
    if a.va % 8 != 0 {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
    }
    let runs = rdma
        .mrs
        .check_remote(a.rkey, (qp.pdn, qp.qpn), Access::RemoteAtomic, a.va, 8)
        .map_err(|_| fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr))?;
    let orig = on_word(runs, env, |cell| {
        if pkt.hdrs.bth.opcode == op::RC_COMPARE_SWAP {
            match cell.compare_exchange(a.compare, a.swap_add, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        } else {
            cell.fetch_add(a.swap_add, Ordering::SeqCst)
        }
    })?;
    let p = pkt.hdrs.bth.psn;
    remember(qp, Resource::Atomic { psn: p, orig });
    qp.resp.msn = (qp.resp.msn + 1) & 0xFF_FFFF;
    qp.resp.epsn = psn::add(p, 1);
    send_atomic_ack(qp, wire, p, orig);
    Ok(())
}

/// Executes an RDMA FLUSH or ATOMIC WRITE (datasheet §14.14) as rxe does, and answers it
/// with an empty READ RESPONSE ONLY.
///
/// A FLUSH needs, for each bit of its placement type, the matching `ACCESS_FLUSH_*` flag
/// on the QP and on the region its R_Key names, over the range its RETH gives (selectivity
/// level RANGE) or the whole region (level MR, whose address and length are ignored).
/// There is nothing to write back: what the responder placed is in guest memory already,
/// visible to the guest's CPUs; the fence orders it before the answer. An ATOMIC WRITE
/// needs remote write access to its 8 bytes, which must be 8-aligned (else an invalid
/// request, as rxe's misaligned atomic): they are stored at once, after every earlier
/// request's bytes.
fn flush_or_atomic_write(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), Failure> {
    let invalid = || fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr);
    let refused = |_| fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr);
    let reth = pkt.hdrs.reth.ok_or_else(invalid)?;
    let who = (qp.pdn, qp.qpn);
    if pkt.hdrs.bth.opcode == op::RC_FLUSH {
        let feth = pkt.hdrs.feth.ok_or_else(invalid)?;
        let ptype = flush::ptype(feth);
        let mut need = 0;
        if ptype & flush::GLOBAL != 0 {
            need |= ACCESS_FLUSH_GLOBAL;
        }
        if ptype & flush::PERSISTENT != 0 {
            need |= ACCESS_FLUSH_PERSISTENT;
        }
        if qp.attr.qp_access_flags & need != need {
            return Err(fail(nak::REMOTE_ACCESS_ERROR, WcStatus::LocQpOpErr));
        }
        let (va, len) = if flush::level(feth) == flush::MR {
            (rdma.mrs.region_start(reth.rkey).unwrap_or(reth.va), 0)
        } else {
            (reth.va, u64::from(reth.dma_len))
        };
        rdma.mrs
            .check_remote(reth.rkey, who, Access::Flush(need), va, len)
            .map_err(refused)?;
        std::sync::atomic::fence(Ordering::SeqCst);
    } else {
        qp_allows(qp, ACCESS_REMOTE_WRITE)?;
        let runs = rdma
            .mrs
            .check_remote(reth.rkey, who, Access::RemoteWrite, reth.va, 8)
            .map_err(refused)?;
        // Exactly 8 bytes (IBA oA19-28), 8-aligned (A19.4.2).
        if reth.dma_len != 8 || payload.len() != 8 || reth.va % 8 != 0 {
            return Err(invalid());
        }
        let mut value = Vec::with_capacity(8);
        if !payload.append_to(&mut value) {
            return Err(fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr));
        }
        let value: [u8; 8] = value.try_into().map_err(|_| invalid())?;
        // The bytes land in the order they came: native order both ways.
        on_word(runs, env, |cell| {
            cell.store(u64::from_ne_bytes(value), Ordering::Release)
        })?;
    }
    let p = pkt.hdrs.bth.psn;
    remember(qp, Resource::Answered { psn: p });
    qp.resp.msn = (qp.resp.msn + 1) & 0xFF_FFFF;
    qp.resp.epsn = psn::add(p, 1);
    send_empty_read_response(qp, wire, p);
    Ok(())
}

/// The answer to a FLUSH or ATOMIC WRITE: a READ RESPONSE ONLY with an ACK and no
/// payload, as rxe's `send_read_response_ack`.
fn send_empty_read_response(qp: &Qp, wire: &mut Wire, p: u32) {
    let hdrs = Headers {
        bth: reply_bth(qp, op::RC_RDMA_READ_RESPONSE_ONLY, p),
        aeth: Some(Aeth::ack(AETH_CREDIT_INVALID).with_msn(qp.resp.msn)),
        ..Headers::default()
    };
    wire.send(qp, &hdrs, &[]);
}

/// Runs `f` on the guest word that `runs` (a checked key's runs for 8 bytes) names, as a
/// 64-bit atomic: the guest may touch it concurrently. The 8 bytes must be one run, 8-aligned
/// in host memory too (else an invalid request, as rxe's misaligned atomic).
fn on_word<R>(
    mut runs: impl Iterator<Item = (vm_memory::GuestAddress, usize)>,
    env: &Env,
    f: impl FnOnce(&AtomicU64) -> R,
) -> Result<R, Failure> {
    let (Some((addr, 8)), None) = (runs.next(), runs.next()) else {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
    };
    let slice = env
        .w
        .get_slice(addr, 8)
        .map_err(|_| fail(nak::REMOTE_OPERATIONAL_ERROR, WcStatus::LocQpOpErr))?;
    let guard = slice.ptr_guard_mut();
    let ptr = guard.as_ptr();
    if !(ptr as usize).is_multiple_of(8) {
        return Err(fail(nak::INVALID_REQUEST, WcStatus::LocQpOpErr));
    }
    // SAFETY: an 8-aligned pointer into guest memory mapped for as long as the slice
    // lives; the guest may touch it concurrently, which is why this is an atomic.
    let cell = unsafe { &*(ptr as *const AtomicU64) };
    Ok(f(cell))
}

fn send_atomic_ack(qp: &Qp, wire: &mut Wire, p: u32, orig: u64) {
    let hdrs = Headers {
        bth: reply_bth(qp, op::RC_ATOMIC_ACKNOWLEDGE, p),
        aeth: Some(Aeth::ack(AETH_CREDIT_INVALID).with_msn(qp.resp.msn)),
        atomic_ack: Some(AtomicAckEth { orig }),
        ..Headers::default()
    };
    wire.send(qp, &hdrs, &[]);
}

fn remember(qp: &mut Qp, r: Resource) {
    let keep = usize::from(qp.attr.max_dest_rd_atomic).max(1);
    while qp.resp.resources.len() >= keep {
        qp.resp.resources.pop_front();
    }
    qp.resp.resources.push_back(r);
}

/// A request whose PSN was already executed: acknowledge it again, or answer a READ or
/// atomic again from what was kept, never applying anything twice. One no longer kept is
/// dropped.
fn duplicate(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    env: &Env,
    wire: &mut Wire,
) -> Result<(), drops::Drop> {
    let p = pkt.hdrs.bth.psn;
    match pkt.hdrs.bth.opcode {
        op::RC_RDMA_READ_REQUEST => {
            let found = qp.resp.resources.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    first_psn,
                    npsn,
                    va,
                    rkey,
                    len,
                } if psn::diff(p, first_psn) >= 0
                    && psn::diff(p, psn::add(first_psn, npsn)) < 0 =>
                {
                    Some((first_psn, npsn, va, rkey, len))
                }
                _ => None,
            });
            let (first_psn, npsn, va, rkey, len) = found.ok_or(drops::Drop::Psn)?;
            let from = p.wrapping_sub(first_psn) & 0xFF_FFFF;
            // A key that fails now sends nothing: the requester's timer ends it.
            let _ = send_read_responses(rdma, qp, env, wire, first_psn, npsn, va, rkey, len, from);
        }
        op::RC_COMPARE_SWAP | op::RC_FETCH_ADD => {
            let orig = qp.resp.resources.iter().rev().find_map(|r| match *r {
                Resource::Atomic { psn, orig } if psn == p => Some(orig),
                _ => None,
            });
            send_atomic_ack(qp, wire, p, orig.ok_or(drops::Drop::Psn)?);
        }
        op::RC_FLUSH | op::RC_ATOMIC_WRITE => {
            let kept = qp
                .resp
                .resources
                .iter()
                .any(|r| matches!(*r, Resource::Answered { psn } if psn == p));
            if !kept {
                return Err(drops::Drop::Psn);
            }
            send_empty_read_response(qp, wire, p);
        }
        // Answered by the ACK owed for the batch: a go-back-N burst of duplicates draws
        // one ACK, not one each.
        _ => qp.resp.ack_due = Some(psn::add(qp.resp.epsn, 0xFF_FFFF)),
    }
    Ok(())
}

/// Delivers a UD packet (already parsed from `frame`) to UD QP `qp` ([`super::ud`]),
/// whose Q_Key is `own_qkey`: into its next receive, GRH first, or dropped and counted. A receive
/// that cannot take it completes with an error; the QP stays as it is (UD has no
/// connection to break).
pub fn on_datagram(
    rdma: &mut RdmaState,
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
    let recv = rdma.next_recv(qp, env).ok_or(Drop::NoReceive)?;
    rdma.take_recv(qp, env);
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
                    &rdma.mrs,
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
    rdma.complete(qp.recv_cqn, cqe, env);
    Ok(())
}
