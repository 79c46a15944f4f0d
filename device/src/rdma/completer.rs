//! The completer: matches acknowledgements and responses to the requester's ops, places
//! READ and atomic results, retries on timeouts and NAKs, and completes send WQEs in
//! send-queue order: exactly one completion per signaled WQE, and one per WQE of any kind
//! that fails or is flushed.

use std::time::Instant;

use rnic_abi::verbs::{wr, Cqe, WcStatus};
use vm_memory::Bytes;

use super::answers::Taken;
use super::drops;
use super::env::Env;
use super::mkey::Access;
use super::qp::{mtu, Qp};
use super::requester::scatter_gather;
use super::wqe::{send_completion, OpState};
use super::RdmaState;
use crate::fabric::held::Payload;
use crate::fabric::train::Run;
use crate::roce::hdr::{nak, rnr_delay, AethKind};
use crate::roce::opcode as op;
use crate::roce::parse::Packet;
use crate::roce::psn;

/// Answers that arrive this many PSNs past a missing READ response or atomic ACK mean it
/// was lost, not overtaken: a network reorders by a packet or two if at all, and the
/// responder sends its answers in PSN order. The READ or atomic is then asked again at
/// once, for what is missing, instead of waiting for the retransmission timer.
const REORDER_TOLERANCE: i32 = 3;

/// Handles a response packet (ACK, NAK, READ response, atomic ACK) for `qp`. A response
/// to a PSN never sent is dropped: it cannot be genuine, and would acknowledge requests
/// that never reached the responder.
pub fn on_response(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    env: &Env,
    now: Instant,
) -> Result<(), drops::Drop> {
    let p = pkt.hdrs.bth.psn;
    let opcode = pkt.hdrs.bth.opcode;
    qp.req.was_sent(p)?;
    let mut progress = false;
    if let Some(aeth) = pkt.hdrs.aeth {
        match aeth.kind() {
            AethKind::Ack { .. } if opcode == op::RC_ACKNOWLEDGE => {
                progress |= acknowledge(qp, p);
            }
            AethKind::RnrNak { timer: code } => {
                let Some(i) = qp.req.ops.iter().position(|o| o.contains(p)) else {
                    return Ok(());
                };
                acknowledge(qp, psn::add(p, 0xFF_FFFF));
                if qp.attr.rnr_retry != 7 {
                    if qp.req.rnr_left == 0 {
                        qp.req.ops[i].fail(WcStatus::RnrRetryExcErr);
                        retire(rdma, qp, env, now);
                        return Ok(());
                    }
                    qp.req.rnr_left -= 1;
                }
                qp.req.rnr_until = Some(now + rnr_delay(code));
                log::debug!("qp {:#x}: RNR NAK for PSN {p:#x}, code {code}", qp.qpn);
                qp.req.go_back_to(p);
                qp.req.timer = None;
                return Ok(());
            }
            AethKind::Nak { code } => {
                log::debug!("qp {:#x}: NAK {code} for PSN {p:#x}", qp.qpn);
                let acked = acknowledge(qp, psn::add(p, 0xFF_FFFF));
                if code == nak::PSN_SEQ_ERROR {
                    qp.req.go_back_to(p);
                    // Only what it acknowledged is progress. The packets behind one that
                    // drew an RNR NAK draw this NAK too: it must not give the requester
                    // back the RNR (or transport) retries it is counting down.
                    progress |= acked;
                } else if let Some(i) = qp.req.ops.iter().position(|o| o.contains(p)) {
                    let status = match code {
                        nak::REMOTE_ACCESS_ERROR => WcStatus::RemAccessErr,
                        nak::REMOTE_OPERATIONAL_ERROR => WcStatus::RemOpErr,
                        _ => WcStatus::RemInvReqErr,
                    };
                    qp.req.ops[i].fail(status);
                    progress = true;
                } else {
                    progress |= acked;
                }
            }
            _ => {}
        }
    }
    match opcode {
        op::RC_RDMA_READ_RESPONSE_FIRST
        | op::RC_RDMA_READ_RESPONSE_MIDDLE
        | op::RC_RDMA_READ_RESPONSE_LAST
        | op::RC_RDMA_READ_RESPONSE_ONLY => {
            if opcode == op::RC_RDMA_READ_RESPONSE_ONLY && payload.is_empty() {
                if let Some(i) = flush_or_atomic_write_op(qp, p) {
                    // Its answer: done, and every earlier PSN acknowledged with it.
                    qp.req.ops[i].state = OpState::Done;
                    acknowledge(qp, p);
                    progress = true;
                }
            }
            progress |= read_response(rdma, qp, pkt, payload, 1, env);
        }
        op::RC_ATOMIC_ACKNOWLEDGE => progress |= atomic_ack(rdma, qp, pkt, env),
        _ => {}
    }
    ask_again_if_lost(qp, p);
    if progress {
        progressed(rdma, qp, env, now);
    }
    Ok(())
}

/// After an answer with PSN `p`: if the oldest READ or atomic still waiting misses an
/// answer that `p` has overtaken by [`REORDER_TOLERANCE`], the requester asks for it
/// again (once per missing PSN: the answers behind the gap that are still on their way
/// must not ask again, and a repeat that is lost too is the timer's).
fn ask_again_if_lost(qp: &mut Qp, p: u32) {
    if qp.req.rd_atomic_outstanding == 0 {
        return;
    }
    let oldest = qp
        .req
        .ops
        .iter()
        .find(|o| o.assigned && o.is_rd_atomic() && o.state != OpState::Done);
    let Some(o) = oldest.filter(|o| o.state == OpState::Sent) else {
        return;
    };
    let missing = psn::add(o.first_psn, o.answers.first_missing());
    if psn::diff(p, missing) >= REORDER_TOLERANCE && qp.req.asked_again != Some(missing) {
        qp.req.asked_again = Some(missing);
        qp.req.ask_again = Some(o.first_psn);
    }
}

/// The answers are coming: the retry counts start over, the timer restarts, and what is
/// done completes.
fn progressed(rdma: &mut RdmaState, qp: &mut Qp, env: &Env, now: Instant) {
    qp.req.retry_left = qp.attr.retry_cnt;
    qp.req.rnr_left = qp.attr.rnr_retry;
    qp.req.timer = None;
    retire(rdma, qp, env, now);
    qp.req.rearm(&qp.attr, now);
}

/// Whether `qp` takes `run` (READ RESPONSE MIDDLE packets of a train) as one: they are
/// the responses its READ expects next, all of it sent and MTU-long. Placing them one by
/// one would then do the same.
pub fn takes_run(qp: &Qp, run: &Run) -> bool {
    let first = run.packet.hdrs.bth.psn;
    let last = psn::add(first, run.count - 1);
    run.packet.hdrs.bth.opcode == op::RC_RDMA_READ_RESPONSE_MIDDLE
        && run.is_mtu_long(mtu(&qp.attr))
        && qp.req.was_sent(last).is_ok()
        && reading(qp, first).is_some_and(|i| qp.req.ops[i].contains(last))
}

/// Places a run that [`takes_run`] said `qp` takes, as its packets one by one would be.
pub fn on_run(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    run: Run,
    env: &Env,
    now: Instant,
) -> Result<(), drops::Drop> {
    let last = psn::add(run.packet.hdrs.bth.psn, run.count - 1);
    let placed = read_response(rdma, qp, &run.packet, run.payload, run.count, env);
    ask_again_if_lost(qp, last);
    if placed {
        progressed(rdma, qp, env, now);
    }
    Ok(())
}

/// The READ waiting for responses that PSN `p` falls in (sent, or queued to be asked
/// again: a response still on its way from before is as good as one asked for again).
fn read_op(qp: &Qp, p: u32) -> Option<usize> {
    qp.req
        .ops
        .iter()
        .position(|o| o.op.wqe.opcode == wr::RDMA_READ && o.state != OpState::Done && o.contains(p))
}

/// The FLUSH or ATOMIC WRITE waiting for its answer (an empty READ RESPONSE ONLY) at PSN
/// `p`.
fn flush_or_atomic_write_op(qp: &Qp, p: u32) -> Option<usize> {
    qp.req.ops.iter().position(|o| {
        matches!(o.op.wqe.opcode, wr::FLUSH | wr::ATOMIC_WRITE)
            && o.assigned
            && o.state != OpState::Done
            && o.first_psn == p
    })
}

/// The READ that the response with PSN `p` belongs to, if it is the one it expects next.
fn reading(qp: &Qp, p: u32) -> Option<usize> {
    let i = read_op(qp, p)?;
    let o = &qp.req.ops[i];
    (psn::add(o.first_psn, o.answers.first_missing()) == p).then_some(i)
}

/// Acknowledges every PSN up to `p`: the window moves on, and every SEND and WRITE that
/// ends there is done (also one queued for a resend: its packets all arrived after all).
/// READs and atomics are done only by their responses. Returns whether that was news.
fn acknowledge(qp: &mut Qp, p: u32) -> bool {
    let mut any = qp.req.acked_before(psn::add(p, 1));
    for o in qp.req.ops.iter_mut() {
        // Ops get their PSNs in queue order: the first one that starts after `p` ends
        // the walk (a READ response acknowledges per packet, with up to a whole send
        // queue of ops behind it).
        if o.assigned && psn::diff(o.first_psn, p) > 0 {
            break;
        }
        if o.assigned
            && o.state != OpState::Done
            && !o.is_rd_atomic()
            && psn::diff(o.last_psn(), p) <= 0
        {
            o.state = OpState::Done;
            any = true;
        }
    }
    any
}

/// Places a READ response: one packet, or `count` MIDDLE packets of a train's run, whose
/// payload is `payload`. A response after a gap is placed too (its PSN says where): the
/// READ is asked again only for what is missing ([`ask_again_if_lost`], the timer), and
/// responses to packets placed before are skipped.
fn read_response(
    rdma: &mut RdmaState,
    qp: &mut Qp,
    pkt: &Packet,
    payload: Payload,
    count: u32,
    env: &Env,
) -> bool {
    let p = pkt.hdrs.bth.psn;
    let Some(i) = read_op(qp, p) else {
        return false;
    };
    let o = &mut qp.req.ops[i];
    let k = p.wrapping_sub(o.first_psn) & 0xFF_FFFF;
    if o.answers.take(k, count) == Taken::Repeat {
        return false;
    }
    let offset = u64::from(k) * u64::from(mtu(&qp.attr));
    let placed = scatter_gather(
        &o.op.sges,
        qp.pdn,
        &rdma.mrs,
        Access::LocalWrite,
        offset,
        payload.len() as u64,
        |at, addr, n| payload.write_to(at, n, env.w, addr),
    );
    if let Err(status) = placed {
        o.state = OpState::Done;
        o.status = if status == WcStatus::LocLenErr {
            WcStatus::LocLenErr
        } else {
            WcStatus::LocAccessErr
        };
    } else if o.answers.complete(o.npsn) {
        o.state = OpState::Done;
    }
    // Every earlier PSN is implicitly acknowledged by a READ response, and so is this one.
    acknowledge(qp, psn::add(p, count - 1));
    true
}

fn atomic_ack(rdma: &mut RdmaState, qp: &mut Qp, pkt: &Packet, env: &Env) -> bool {
    let p = pkt.hdrs.bth.psn;
    let Some(i) = qp.req.ops.iter().position(|o| {
        o.is_rd_atomic()
            && o.op.wqe.opcode != wr::RDMA_READ
            && o.assigned
            && o.state != OpState::Done
            && o.first_psn == p
    }) else {
        return false;
    };
    let Some(ack) = pkt.hdrs.atomic_ack else {
        return false;
    };
    let o = &mut qp.req.ops[i];
    let bytes = ack.orig.to_le_bytes();
    let placed = scatter_gather(
        &o.op.sges,
        qp.pdn,
        &rdma.mrs,
        Access::LocalWrite,
        0,
        8,
        |at, addr, n| env.w.write_slice(&bytes[at..at + n], addr).is_ok(),
    );
    o.state = OpState::Done;
    if placed.is_err() {
        o.status = WcStatus::LocAccessErr;
    }
    acknowledge(qp, p);
    true
}

/// The retransmission timer: resend from the first unacknowledged PSN, or give up.
pub fn on_timer(rdma: &mut RdmaState, qp: &mut Qp, env: &Env, now: Instant) {
    let Some(deadline) = qp.req.timer else { return };
    if now < deadline {
        return;
    }
    qp.req.timer = None;
    if !qp.req.unacked() {
        return;
    }
    let una = qp.req.una();
    if qp.req.retry_left == 0 {
        let waiting = |o: &&mut super::wqe::Op| o.assigned && o.state != OpState::Done;
        let oldest = qp
            .req
            .ops
            .iter_mut()
            .filter(waiting)
            .find(|o| o.contains(una));
        let oldest = match oldest {
            Some(o) => Some(o),
            None => qp.req.ops.iter_mut().find(|o| waiting(o)),
        };
        if let Some(o) = oldest {
            log::debug!("qp {:#x}: retries exhausted at PSN {una:#x}", qp.qpn);
            o.fail(WcStatus::RetryExcErr);
        }
        retire(rdma, qp, env, now);
        return;
    }
    qp.req.retry_left -= 1;
    log::debug!(
        "qp {:#x}: no answer in time, resending from PSN {una:#x} ({} retries left)",
        qp.qpn,
        qp.req.retry_left
    );
    qp.req.go_back_to(una);
}

/// Completes the ops at the head of the queue that are done, in order. An error moves
/// the QP to the error state and flushes everything behind it.
pub fn retire(rdma: &mut RdmaState, qp: &mut Qp, env: &Env, _now: Instant) {
    while qp.req.ops.front().is_some_and(|o| o.state == OpState::Done) {
        let Some(o) = qp.req.ops.pop_front() else {
            break;
        };
        // A READ or atomic gives its slot back only now, in send-queue order, never when
        // its answer comes: while an earlier one waits for a lost answer, it may be asked
        // again, and the responder answers a duplicate only from the answers it kept for
        // its last max_dest_rd_atomic requests. Had the later ones given their slots
        // back, more requests would have gone out, and pushed the earlier one's answer
        // out of that window: asked again, it would never be answered (RETRY_EXC_ERR).
        if o.holds_rd_atomic {
            qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        }
        let failed = o.status != WcStatus::Success;
        // A shared send queue's WQEs follow their own flag, not the QP's sq_sig_all.
        let signaled = o.op.signaled(qp.sq_sig_all && o.shared.is_none());
        if failed || signaled || o.shared.is_some() {
            let byte_len = match o.op.wqe.opcode {
                wr::RDMA_READ => o.op.length().min(u64::from(u32::MAX)) as u32,
                wr::ATOMIC_CMP_AND_SWP | wr::ATOMIC_FETCH_AND_ADD | wr::ATOMIC_WRITE => 8,
                // rxe reports the range's length.
                wr::FLUSH => o.op.wqe.compare_add.min(u64::from(u32::MAX)) as u32,
                _ => o.op.length().min(u64::from(u32::MAX)) as u32,
            };
            let cqe = Cqe {
                wr_id: o.op.wqe.wr_id,
                byte_len,
                qp_num: qp.qpn,
                opcode: send_completion(o.op.wqe.opcode),
                status: o.status as u8,
                ..Cqe::default()
            };
            if let Some(from) = o.shared {
                // In posting order on the shared send queue's CQ.
                rdma.finish_shared(from, cqe, signaled, env);
            } else if !rdma.complete(qp.send_cqn, cqe, env) {
                rdma.enter_error(qp, env);
                return;
            }
        }
        if failed && o.status != WcStatus::WrFlushErr {
            log::debug!(
                "qp {:#x}: WR {:#x} failed: {:?}",
                qp.qpn,
                o.op.wqe.wr_id,
                o.status
            );
            rdma.enter_error(qp, env);
            return;
        }
    }
}
