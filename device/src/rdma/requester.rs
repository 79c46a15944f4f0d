//! The requester: takes send WQEs from the send queue and sends their request packets.
//!
//! Each WQE becomes an [`Op`] that stays in [`super::qp::RequesterState::ops`], in
//! send-queue order, until the completer retires it. PSNs are given when an op is first sent and kept for
//! every resend, so that go-back-N (after a NAK, an RNR NAK or a timeout) regenerates
//! exactly the packets that were sent before, from the driver's memory.
//!
//! At most [`SEND_WINDOW`] PSNs are unacknowledged at once; the requester asks for an
//! acknowledgement on the last packet of every message, every [`ACK_INTERVAL`] packets
//! of a long one, and on the packet that fills the window, and goes on as acknowledgements
//! open the window again. Go-back-N resends from the first unacknowledged PSN.

use std::time::Instant;

use rnic_abi::fast_reg::FastRegWqe;
use rnic_abi::mw::BindMwWqe;
use rnic_abi::verbs::{send_flags, wr, QpState, SendWqe, WcStatus};
use zerocopy::{FromBytes, IntoBytes};

use super::answers::Answers;
use super::env::Env;
use super::mkey::fast_reg::{self, FastRegError};
use super::mkey::mr::MrTable;
use super::mkey::mw::BindError;
use super::mkey::Access;
use super::qp::{mtu, Qp};
use super::wire::Wire;
use super::wqe::{Op, OpState, SendOp, WqeError};
use crate::fabric::held::Held;
use crate::roce::hdr::{AtomicEth, Bth, Headers, Reth, DEFAULT_PKEY};
use crate::roce::opcode as op;
use crate::roce::psn;

/// PSNs a QP's requester keeps sent and unacknowledged at most (a READ counts the PSNs
/// of its responses). Bounds what a loss costs (go-back-N resends at most this many
/// packets) and what a burst asks of the network's buffers.
pub const SEND_WINDOW: u32 = 128;

/// The requester sets AckReq at least every this many packets of a long message, and the
/// responder acknowledges at least every this many packets it executes, so that the
/// window opens again before it is full.
pub const ACK_INTERVAL: u32 = 32;

/// The PSNs that may go out: an RC QP's [`SEND_WINDOW`] from the first unacknowledged,
/// or a UC QP's budget for a turn ([`super::uc::TURN_PACKETS`]).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    start: u32,
    size: u32,
}

impl Window {
    /// `size` PSNs from `start` on.
    pub fn from(start: u32, size: u32) -> Self {
        Self { start, size }
    }

    /// Whether PSN `p` may go out.
    pub fn open(self, p: u32) -> bool {
        psn::diff(p, self.start) < self.size as i32
    }
}

/// Packets a SEND or WRITE of `len` bytes takes at `mtu`.
pub(super) fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1).min(u64::from(u32::MAX)) as u32
}

/// Takes new WQEs, then sends what may be sent. Returns whether anything happened.
/// `rc`: the QP is an RC QP (a DC initiator's requester runs here too, and takes no
/// REG_MR WQEs).
pub fn run(
    qp: &mut Qp,
    mrs: &mut MrTable,
    env: &Env,
    wire: &mut Wire,
    now: Instant,
    retransmits: &mut u64,
    rc: bool,
) -> bool {
    // The send queue is read from RTS on (and flushed in ERR). WQEs announced in RESET,
    // INIT or RTR are posted against the rules (ibverbs refuses such posts): they are
    // not taken now, and entering RTS skips them, so they never run.
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
        return false;
    }
    let mut progress = fetch(qp, env);
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return progress;
    }
    if qp.req.rnr_until.is_some_and(|t| now < t) {
        return progress;
    }
    qp.req.rnr_until = None;
    if let Some(from) = qp.req.resend_from.take() {
        // Never what was acknowledged since (a late NAK, or an ACK after the timeout).
        let una = qp.req.una();
        rewind(qp, if psn::diff(from, una) < 0 { una } else { from });
        *retransmits += 1;
        progress = true;
    }
    if let Some(first) = qp.req.ask_again.take() {
        // Only while it waits (a go-back-N just now queued it whole, or it is done).
        let waiting = qp.req.ops.iter().position(|o| {
            o.assigned && o.is_rd_atomic() && o.first_psn == first && o.state == OpState::Sent
        });
        if let Some(i) = waiting {
            if let Err(status) = ask(qp, i, mrs, wire) {
                qp.req.ops[i].fail(status);
            }
            *retransmits += 1;
            progress = true;
        }
    }
    let mtu = mtu(&qp.attr);
    let max_rd_atomic = u32::from(qp.attr.max_rd_atomic).max(1);
    // Nothing is acknowledged while the requester runs: the window's start stays put.
    let window = Window::from(qp.req.una(), SEND_WINDOW);
    for i in 0..qp.req.ops.len() {
        let o = &qp.req.ops[i];
        if o.state != OpState::Queued {
            continue;
        }
        let opcode = o.op.wqe.opcode;
        if !o.assigned && !qp.req.admit.admits(&o.op) {
            break;
        }
        if qp.state == QpState::Sqd && !o.assigned {
            // Draining: what has not started waits for the return to RTS.
            break;
        }
        // The fence holds an op's first transmission only. A resend (after go-back-N)
        // already passed it, and READs and atomics behind it may hold slots now that
        // cannot come back before it completes: waiting for them would wait forever.
        if o.op.wqe.flags & send_flags::FENCE != 0
            && !o.assigned
            && qp.req.rd_atomic_outstanding > 0
            && !o.holds_rd_atomic
        {
            break;
        }
        if o.is_rd_atomic() && !o.holds_rd_atomic && qp.req.rd_atomic_outstanding >= max_rd_atomic {
            break;
        }
        let next = if o.assigned {
            psn::add(o.first_psn, o.next_pkt)
        } else {
            qp.req.next_psn
        };
        if !window.open(next) {
            break;
        }
        // Its memory is still being registered through a control queue, or it names
        // sessions and was taken after the engine chose them: the send queue waits (in
        // order) for the registration, or the engine's next pass.
        if !o.assigned
            && (super::ctrlq::waits_for_key(&o.op, mrs) || super::session::needs_session(o))
        {
            break;
        }
        if local_operation(qp, i, mrs, env, rc) {
            progress = true;
            if qp.req.ops[i].status != WcStatus::Success {
                // A failed one stops the QP: nothing after it may go out.
                break;
            }
            continue;
        }
        if !qp.req.ops[i].assigned {
            let o = &mut qp.req.ops[i];
            o.npsn = match opcode {
                wr::ATOMIC_CMP_AND_SWP
                | wr::ATOMIC_FETCH_AND_ADD
                | wr::FLUSH
                | wr::ATOMIC_WRITE => 1,
                _ => packets(o.op.length(), mtu),
            };
            o.first_psn = qp.req.next_psn;
            o.assigned = true;
            qp.req.next_psn = psn::add(qp.req.next_psn, o.npsn);
        }
        if qp.req.ops[i].is_rd_atomic() && !qp.req.ops[i].holds_rd_atomic {
            qp.req.ops[i].holds_rd_atomic = true;
            qp.req.rd_atomic_outstanding += 1;
        }
        wire.src_port = qp.req.ops[i]
            .session_port
            .filter(|&p| p != super::session::OWN_PORT);
        progress |= send_op(qp, i, mrs, env, wire, mtu, window, false);
        wire.src_port = None;
        if qp.req.ops[i].state != OpState::Sent {
            // A local error (nothing after it may go out), or the window is full.
            break;
        }
    }
    if progress && qp.req.timer.is_none() {
        qp.req.rearm(&qp.attr, now);
    }
    progress
}

/// Runs op `i` of `qp` if it is a local operation (LOCAL_INV, BIND_MW, REG_MR): it
/// changes a key of the function's and sends nothing, so it is done at once, in
/// send-queue order, with its status (a failed one then stops the QP, as any failed WR).
/// `connected`: the QP is an RC or UC QP, which alone take REG_MR WQEs. Returns whether
/// it was one.
pub(super) fn local_operation(
    qp: &mut Qp,
    i: usize,
    mrs: &mut MrTable,
    env: &Env,
    connected: bool,
) -> bool {
    let w = &qp.req.ops[i].op.wqe;
    let status = match w.opcode {
        wr::REG_MR => {
            let reg = FastRegWqe::read_from_bytes(w.as_bytes())
                .map_err(|_| FastRegError::Malformed)
                .and_then(|f| fast_reg::register(mrs, &f, (qp.pdn, connected), env.r));
            match reg {
                Ok(()) => WcStatus::Success,
                Err(e) => {
                    log::debug!("qp {:#x}: REG_MR: {e:?}", qp.qpn);
                    WcStatus::LocQpOpErr
                }
            }
        }
        wr::LOCAL_INV => match mrs.invalidate(w.imm_or_inv, qp.pdn) {
            Ok(()) => WcStatus::Success,
            Err(e) => {
                log::debug!("qp {:#x}: LOCAL_INV of {:#x}: {e:?}", qp.qpn, w.imm_or_inv);
                WcStatus::LocQpOpErr
            }
        },
        wr::BIND_MW => {
            let inline = w.flags & send_flags::INLINE != 0;
            let bind = BindMwWqe::read_from_bytes(w.as_bytes())
                .map_err(|_| BindError::Malformed)
                .and_then(|b| mrs.bind_mw(&b, (qp.pdn, qp.qpn), inline));
            match bind {
                Ok(()) => WcStatus::Success,
                Err(e) => {
                    log::debug!("qp {:#x}: BIND_MW of {:#x}: {e:?}", qp.qpn, w.imm_or_inv);
                    WcStatus::MwBindErr
                }
            }
        }
        _ => return false,
    };
    qp.req.ops[i].fail(status);
    true
}

/// Takes the WQEs the driver posted since the last look.
pub(super) fn fetch(qp: &mut Qp, env: &Env) -> bool {
    let posted = env.doorbells.read32(qp.sq.slot).unwrap_or(qp.sq.taken);
    let mut any = false;
    while qp.sq.taken != posted && (qp.req.ops.len() as u32) < qp.sq.entries {
        let index = qp.sq.taken;
        qp.sq.taken = qp.sq.taken.wrapping_add(1);
        any = true;
        let (op, status) = match super::wqe::read_send(&qp.sq, &qp.caps, env, index) {
            Ok(op) => (op, WcStatus::Success),
            Err(e) => {
                log::debug!("qp {:#x}: send WQE {index} unreadable: {e:?}", qp.qpn);
                (
                    SendOp::unreadable(e),
                    if e == WqeError::Unreachable {
                        WcStatus::LocProtErr
                    } else {
                        WcStatus::LocQpOpErr
                    },
                )
            }
        };
        let state = if qp.state == QpState::Err {
            // Posted to a QP in error: flushed, like everything else in it.
            OpState::Done
        } else if status != WcStatus::Success {
            OpState::Done
        } else {
            OpState::Queued
        };
        let status = if qp.state == QpState::Err {
            WcStatus::WrFlushErr
        } else {
            status
        };
        qp.req.ops.push_back(Op {
            index,
            op,
            first_psn: 0,
            npsn: 0,
            next_pkt: 0,
            state,
            status,
            answers: Answers::default(),
            holds_rd_atomic: false,
            assigned: false,
            shared: None,
            session_port: None,
        });
    }
    any
}

/// Puts every op from PSN `from` on back in the queue, to be sent again from there.
fn rewind(qp: &mut Qp, from: u32) {
    for o in qp.req.ops.iter_mut() {
        // Done is done: what was acknowledged or answered is never asked for again.
        if !o.assigned || o.state == OpState::Done {
            continue;
        }
        // A READ's request goes again for the responses still missing (see `ask`): what
        // arrived stays placed, whether before `from` or after a gap.
        if o.contains(from) {
            o.state = OpState::Queued;
            o.next_pkt = if o.is_rd_atomic() {
                0
            } else {
                from.wrapping_sub(o.first_psn) & 0xFF_FFFF
            };
        } else if psn::diff(o.first_psn, from) > 0 && o.state != OpState::Done {
            o.state = OpState::Queued;
            o.next_pkt = 0;
        }
    }
}

/// Sends op `i` from its `next_pkt`, as far as the window allows; returns whether it
/// sent anything (or failed: that too is news for the completer). `uc`: the QP is a UC
/// QP ([`super::uc`]): its packets carry the UC opcodes and never ask for an ACK.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_op(
    qp: &mut Qp,
    i: usize,
    mrs: &MrTable,
    env: &Env,
    wire: &mut Wire,
    mtu: u32,
    window: Window,
    uc: bool,
) -> bool {
    let o = qp.req.ops[i].clone();
    let w = &o.op.wqe;
    let solicited = w.flags & send_flags::SOLICITED != 0;
    let bth = |opcode: u8, p: u32, ack_req: bool, solicited: bool| Bth {
        opcode,
        solicited,
        pkey: DEFAULT_PKEY,
        dest_qp: qp.attr.dest_qp_num,
        ack_req,
        psn: p,
        ..Bth::default()
    };
    match w.opcode {
        wr::RDMA_READ
        | wr::ATOMIC_CMP_AND_SWP
        | wr::ATOMIC_FETCH_AND_ADD
        | wr::FLUSH
        | wr::ATOMIC_WRITE => {
            if let Err(status) = ask(qp, i, mrs, wire) {
                qp.req.ops[i].fail(status);
                return true;
            }
        }
        _ => {
            let total = o.op.length();
            let is_write = matches!(w.opcode, wr::RDMA_WRITE | wr::RDMA_WRITE_WITH_IMM);
            // Asked for at the end, now and then, and when the window closes, so that an
            // acknowledgement always comes to open it again.
            // UC asks for none: nothing answers.
            let ack_req = |pkt: u32| {
                let p = psn::add(o.first_psn, pkt);
                !uc && (pkt + 1 == o.npsn
                    || (pkt + 1).is_multiple_of(ACK_INTERVAL)
                    || !window.open(psn::add(p, 1)))
            };
            let headers = |pkt: u32| {
                let first = pkt == 0;
                let last = pkt + 1 == o.npsn;
                let transport = if uc { op::UC_TRANSPORT } else { 0 };
                let opcode = request_opcode(w.opcode, first, last) | transport;
                let p = psn::add(o.first_psn, pkt);
                let mut hdrs = Headers {
                    bth: bth(opcode, p, ack_req(pkt), solicited && last),
                    ..Headers::default()
                };
                if is_write && first {
                    hdrs.reth = Some(Reth {
                        va: w.remote_addr,
                        rkey: w.rkey,
                        dma_len: total.min(u64::from(u32::MAX)) as u32,
                    });
                }
                if last && matches!(w.opcode, wr::SEND_WITH_IMM | wr::RDMA_WRITE_WITH_IMM) {
                    hdrs.imm = Some(w.imm_or_inv.to_le_bytes());
                }
                if last && w.opcode == wr::SEND_WITH_INV {
                    hdrs.ieth = Some(w.imm_or_inv);
                }
                hdrs
            };
            // Up to a train's worth of packets in one frame when the peer is a function
            // of this process; a train ends at the first packet that asks for an ACK.
            let max_train = wire.max_train(qp, mtu);
            let mut pkt = o.next_pkt;
            while pkt < o.npsn {
                if !window.open(psn::add(o.first_psn, pkt)) {
                    qp.req.ops[i].next_pkt = pkt;
                    return pkt > o.next_pkt;
                }
                let mut count = 1;
                while count < max_train && pkt + count < o.npsn && !ack_req(pkt + count - 1) {
                    count += 1;
                }
                let offset = u64::from(pkt) * u64::from(mtu);
                let len = (total - offset.min(total)).min(u64::from(mtu) * u64::from(count));
                let hdrs = headers(pkt);
                // The payload is gathered straight into the frame.
                let op = &qp.req.ops[i].op;
                let fill = |frame: &mut Vec<u8>| gather(op, qp.pdn, mrs, env, offset, len, frame);
                // Or, for a train's middle, left in memory for the receiver to copy.
                let hold = op
                    .inline
                    .is_none()
                    .then_some(|| hold(op, qp.pdn, mrs, env, offset, len));
                let last = || headers(pkt + count - 1);
                let gathered = wire.send_packets(qp, &hdrs, last, count, mtu, len, fill, hold);
                if let Err(status) = gathered {
                    qp.req.ops[i].fail(status);
                    return true;
                }
                pkt += count;
                qp.req.sent_upto(psn::add(o.first_psn, pkt));
            }
        }
    }
    if o.is_rd_atomic() {
        qp.req.sent_upto(psn::add(o.first_psn, o.npsn));
    }
    let o = &mut qp.req.ops[i];
    o.next_pkt = o.npsn;
    o.state = OpState::Sent;
    true
}

/// Sends the request of READ or atomic op `i`: a READ asks for the responses from its
/// first missing one on (the whole READ the first time), at the address and for the
/// length that remain, with that response's PSN, as the InfiniBand spec has a requester
/// resume a READ; an atomic asks again with its own PSN (the responder answers a repeat
/// from what it kept, never executing it twice). So do a FLUSH and an ATOMIC WRITE
/// ([`flush_or_atomic_write`]).
fn ask(qp: &Qp, i: usize, mrs: &MrTable, wire: &mut Wire) -> Result<(), WcStatus> {
    let o = &qp.req.ops[i];
    let w = &o.op.wqe;
    if matches!(w.opcode, wr::FLUSH | wr::ATOMIC_WRITE) {
        flush_or_atomic_write(qp, w, o.first_psn, wire);
        return Ok(());
    }
    // Where the answer will land must be writable before we ask for it.
    if w.opcode != wr::RDMA_READ && o.op.length() < 8 {
        return Err(WcStatus::LocLenErr);
    }
    check_local(&o.op, qp.pdn, mrs, Access::LocalWrite)?;
    let bth = |opcode: u8, p: u32| Bth {
        opcode,
        pkey: DEFAULT_PKEY,
        dest_qp: qp.attr.dest_qp_num,
        ack_req: true,
        psn: p,
        ..Bth::default()
    };
    let hdrs = if w.opcode == wr::RDMA_READ {
        let skip = o.answers.first_missing();
        let done = (u64::from(skip) * u64::from(mtu(&qp.attr))).min(o.op.length());
        Headers {
            bth: bth(op::RC_RDMA_READ_REQUEST, psn::add(o.first_psn, skip)),
            reth: Some(Reth {
                va: w.remote_addr.wrapping_add(done),
                rkey: w.rkey,
                dma_len: (o.op.length() - done).min(u64::from(u32::MAX)) as u32,
            }),
            ..Headers::default()
        }
    } else {
        let (opcode, swap_add, compare) = if w.opcode == wr::ATOMIC_CMP_AND_SWP {
            (op::RC_COMPARE_SWAP, w.swap, w.compare_add)
        } else {
            (op::RC_FETCH_ADD, w.compare_add, 0)
        };
        Headers {
            bth: bth(opcode, o.first_psn),
            atomic: Some(AtomicEth {
                va: w.remote_addr,
                rkey: w.rkey,
                swap_add,
                compare,
            }),
            ..Headers::default()
        }
    };
    wire.send(qp, &hdrs, &[]);
    Ok(())
}

/// Sends the one packet of a FLUSH or ATOMIC WRITE WQE `w` with PSN `p`, as rxe builds
/// it (datasheet §14.14). A FLUSH: the FETH (the WQE's word) and a RETH of the range (its
/// length's low 32 bits), no payload. An ATOMIC WRITE: a RETH of the 8 bytes at
/// `remote_addr` and those 8 bytes, in the order the application gave them. Both ask for
/// an acknowledgement, which comes as an empty READ response.
fn flush_or_atomic_write(qp: &Qp, w: &SendWqe, p: u32, wire: &mut Wire) {
    let flush = w.opcode == wr::FLUSH;
    let hdrs = Headers {
        bth: Bth {
            opcode: if flush {
                op::RC_FLUSH
            } else {
                op::RC_ATOMIC_WRITE
            },
            pkey: DEFAULT_PKEY,
            dest_qp: qp.attr.dest_qp_num,
            ack_req: true,
            psn: p,
            ..Bth::default()
        },
        reth: Some(Reth {
            va: w.remote_addr,
            rkey: w.rkey,
            dma_len: if flush { w.compare_add as u32 } else { 8 },
        }),
        feth: flush.then_some(w.imm_or_inv),
        ..Headers::default()
    };
    let value = w.compare_add.to_le_bytes();
    wire.send(qp, &hdrs, if flush { &[] } else { &value });
}

/// The request opcode of packet (first, last) of a SEND or WRITE work request.
pub(super) fn request_opcode(wr_opcode: u8, first: bool, last: bool) -> u8 {
    let send = matches!(wr_opcode, wr::SEND | wr::SEND_WITH_IMM | wr::SEND_WITH_INV);
    match (send, first, last) {
        (true, true, false) => op::RC_SEND_FIRST,
        (true, false, false) => op::RC_SEND_MIDDLE,
        (false, true, false) => op::RC_RDMA_WRITE_FIRST,
        (false, false, false) => op::RC_RDMA_WRITE_MIDDLE,
        (_, first, true) => match (wr_opcode, first) {
            (wr::SEND, true) => op::RC_SEND_ONLY,
            (wr::SEND, false) => op::RC_SEND_LAST,
            (wr::SEND_WITH_IMM, true) => op::RC_SEND_ONLY_WITH_IMMEDIATE,
            (wr::SEND_WITH_IMM, false) => op::RC_SEND_LAST_WITH_IMMEDIATE,
            (wr::SEND_WITH_INV, true) => op::RC_SEND_ONLY_WITH_INVALIDATE,
            (wr::SEND_WITH_INV, false) => op::RC_SEND_LAST_WITH_INVALIDATE,
            (wr::RDMA_WRITE_WITH_IMM, true) => op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            (wr::RDMA_WRITE_WITH_IMM, false) => op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            (_, true) => op::RC_RDMA_WRITE_ONLY,
            (_, false) => op::RC_RDMA_WRITE_LAST,
        },
    }
}

/// Checks every SGE of `op` for `access` in `pdn`.
fn check_local(op: &SendOp, pdn: u32, mrs: &MrTable, access: Access) -> Result<(), WcStatus> {
    for s in &op.sges {
        mrs.check(s.lkey, pdn, access, s.addr, u64::from(s.length))
            .map_err(|_| WcStatus::LocProtErr)?;
    }
    Ok(())
}

/// Appends bytes `[offset, offset + len)` of the message, from its SGEs (or inline
/// data), to `out`.
pub fn gather(
    op: &SendOp,
    pdn: u32,
    mrs: &MrTable,
    env: &Env,
    offset: u64,
    len: u64,
    out: &mut Vec<u8>,
) -> Result<(), WcStatus> {
    if let Some(data) = &op.inline {
        let start = offset as usize;
        out.extend_from_slice(&data[start..start + len as usize]);
        return Ok(());
    }
    source_runs(op, pdn, mrs, offset, len, |addr, n| {
        append_from_memory(env.r, addr, n, out)
    })
}

/// Bytes `[offset, offset + len)` of the message, from its SGEs, checked as [`gather`]
/// checks them but left in memory (see [`crate::fabric::held`]).
fn hold(
    op: &SendOp,
    pdn: u32,
    mrs: &MrTable,
    env: &Env,
    offset: u64,
    len: u64,
) -> Result<Held, WcStatus> {
    let mut held = Held::new(env.r.clone());
    source_runs(op, pdn, mrs, offset, len, |addr, n| held.push(addr, n))?;
    Ok(held)
}

/// Calls `f` for the runs of device memory that hold bytes `[offset, offset + len)` of
/// the message, each SGE checked for local read.
fn source_runs(
    op: &SendOp,
    pdn: u32,
    mrs: &MrTable,
    offset: u64,
    len: u64,
    mut f: impl FnMut(vm_memory::GuestAddress, usize) -> bool,
) -> Result<(), WcStatus> {
    let sges = &op.sges;
    scatter_gather(sges, pdn, mrs, Access::LocalRead, offset, len, |_, a, n| {
        f(a, n)
    })
}

/// Appends `n` bytes of guest memory at `addr` to `out` (no zeroing first); false if
/// they are not all mapped.
pub fn append_from_memory(
    mem: &vm_memory::GuestMemoryMmap,
    addr: vm_memory::GuestAddress,
    n: usize,
    out: &mut Vec<u8>,
) -> bool {
    use vm_memory::Bytes;
    let before = out.len();
    if mem.write_all_volatile_to(addr, out, n).is_ok() {
        return true;
    }
    out.truncate(before);
    false
}

/// Walks the SGE bytes `[offset, offset + len)` of `sges`, checking each SGE for `access`,
/// and calls `f(position in the walk, device address, length)` for every run. Fails with
/// `LOC_PROT_ERR` on a key or DMA failure and `LOC_LEN_ERR` if the SGEs are too short.
pub fn scatter_gather(
    sges: &[rnic_abi::verbs::Sge],
    pdn: u32,
    mrs: &MrTable,
    access: Access,
    offset: u64,
    len: u64,
    mut f: impl FnMut(usize, vm_memory::GuestAddress, usize) -> bool,
) -> Result<(), WcStatus> {
    let mut skip = offset;
    let mut done = 0u64;
    for s in sges {
        if done == len {
            break;
        }
        let sge_len = u64::from(s.length);
        if skip >= sge_len {
            skip -= sge_len;
            continue;
        }
        let n = (sge_len - skip).min(len - done);
        let runs = mrs
            .check(s.lkey, pdn, access, s.addr.wrapping_add(skip), n)
            .map_err(|_| WcStatus::LocProtErr)?;
        for (addr, run) in runs {
            if !f(done as usize, addr, run) {
                return Err(WcStatus::LocProtErr);
            }
            done += run as u64;
        }
        skip = 0;
    }
    if done < len {
        return Err(WcStatus::LocLenErr);
    }
    Ok(())
}
