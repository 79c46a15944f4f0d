//! Queue pairs (docs/hardware-interface.md §7.8): what a QP is and carries, as rxe's
//! `struct rxe_qp`: its attributes and the state machine of `ibv_modify_qp`, the
//! transport state of its requester ([`RequesterState`]) and responder
//! ([`ResponderState`]), which the stages ([`super::requester`], [`super::responder`],
//! [`super::completer`]) move on, and the transition to the error state that any of them
//! may take ([`Qp::set_error`], [`Qp::flush_queues`]; rxe's `rxe_qp_error()`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rnic_abi::verbs::{
    attr, mtu_bytes, wc, Cqe, QpAttr, QpState, WcStatus, ACCESS_FLUSH, ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};

use super::drops::Drop;
use super::env::Env;
use super::wqe::{
    read_recv, read_send, send_completion, Op, OpState, QpCaps, RecvOp, SendOp, SharedRef,
    WorkQueue,
};
use crate::fabric::frame::Endpoint;
use crate::roce::psn;

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

impl Qp {
    /// Moves the QP to the error state by itself (not by a modify); returns whether it
    /// was not there yet, and so whether the driver is due a `QP_FATAL` event. With
    /// [`Qp::flush_queues`], rxe's `rxe_qp_error()`; [`super::RdmaState::enter_error`]
    /// does both.
    pub fn set_error(&mut self) -> bool {
        if self.state == QpState::Err {
            return false;
        }
        self.state = QpState::Err;
        self.attr.qp_state = QpState::Err as u8;
        true
    }

    /// Completes everything still in the QP's queues with `WR_FLUSH_ERR`, in order,
    /// handing each completion to `complete`: ops the requester holds, send WQEs not yet
    /// taken, a receive in progress and, unless the QP takes its receives from an SRQ
    /// (`on_srq`), every posted receive.
    pub fn flush_queues(&mut self, env: &Env, on_srq: bool, mut complete: impl FnMut(Flushed)) {
        let posted = env.doorbells.read32(self.sq.slot).unwrap_or(self.sq.taken);
        while self.sq.taken != posted && (self.req.ops.len() as u32) < self.sq.entries {
            let index = self.sq.taken;
            self.sq.taken = self.sq.taken.wrapping_add(1);
            let op = read_send(&self.sq, &self.caps, env, index).unwrap_or_else(SendOp::unreadable);
            self.req.ops.push_back(Op {
                index,
                op,
                first_psn: 0,
                npsn: 0,
                next_pkt: 0,
                state: OpState::Done,
                status: WcStatus::WrFlushErr,
                answers: Default::default(),
                holds_rd_atomic: false,
                assigned: false,
                shared: None,
                session_port: None,
            });
        }
        for o in self.req.ops.iter_mut() {
            if o.status == WcStatus::Success || o.state != OpState::Done {
                o.state = OpState::Done;
                o.status = WcStatus::WrFlushErr;
            }
        }
        self.req.rd_atomic_outstanding = 0;
        self.req.timer = None;
        self.req.resend_from = None;
        self.req.ask_again = None;
        while let Some(o) = self.req.ops.pop_front() {
            let cqe = Cqe {
                wr_id: o.op.wqe.wr_id,
                qp_num: self.qpn,
                opcode: send_completion(o.op.wqe.opcode),
                status: o.status as u8,
                ..Cqe::default()
            };
            complete(match o.shared {
                Some(from) => Flushed::Shared(from, cqe),
                None => Flushed::Cq(self.send_cqn, cqe),
            });
        }
        // A receive in progress (a SEND cut short: it was taken, and completes now), then
        // every posted receive; an SRQ's belong to its other QPs too, and stay.
        let in_progress = match self.resp.cur.take() {
            Some(Inbound::Send { recv, .. }) => Some(recv),
            _ => None,
        };
        // (A UC QP's spare receive was taken too.)
        for recv in in_progress.into_iter().chain(self.resp.spare.take()) {
            let cqe = Cqe {
                wr_id: recv.wr_id,
                qp_num: self.qpn,
                opcode: wc::RECV,
                status: WcStatus::WrFlushErr as u8,
                ..Cqe::default()
            };
            complete(Flushed::Cq(self.recv_cqn, cqe));
        }
        if on_srq {
            return;
        }
        let posted = env.doorbells.read32(self.rq.slot).unwrap_or(self.rq.taken);
        while self.rq.taken != posted {
            let index = self.rq.taken;
            self.rq.taken = self.rq.taken.wrapping_add(1);
            let wr_id = read_recv(&self.rq, &self.caps, env.r, index)
                .map_or_else(|e| e.wr_id(), |r| r.wr_id);
            let cqe = Cqe {
                wr_id,
                qp_num: self.qpn,
                opcode: wc::RECV,
                status: WcStatus::WrFlushErr as u8,
                ..Cqe::default()
            };
            complete(Flushed::Cq(self.recv_cqn, cqe));
        }
    }
}

/// A completion [`Qp::flush_queues`] owes.
#[derive(Debug, Clone, Copy)]
pub enum Flushed {
    /// On CQ `cqn`.
    Cq(u32, Cqe),
    /// On the shared send queue the op came from (signaled, as every error is).
    Shared(SharedRef, Cqe),
}

/// Requester and completer state of a QP.
#[derive(Debug, Default)]
pub struct RequesterState {
    /// PSN of the next new packet.
    pub next_psn: u32,
    /// Request retransmissions since the QP was created (timeouts, NAKs, RNR): the
    /// control socket's `res qp` shows them.
    pub retransmits: u64,
    /// The PSN after the highest one acknowledged (by an ACK, a NAK or a response).
    pub acked_end: u32,
    /// The PSN after the highest one ever sent (a READ's responses included).
    pub sent_end: u32,
    /// Ops taken from the send queue and not yet completed, in order.
    pub ops: VecDeque<Op>,
    /// READs and atomics sent and not yet completed (their slots come back in order,
    /// when they retire: see `completer::retire`).
    pub rd_atomic_outstanding: u32,
    /// Transport retries left before `RETRY_EXC_ERR`.
    pub retry_left: u8,
    /// RNR retries left before `RNR_RETRY_EXC_ERR` (unused when `rnr_retry` is 7).
    pub rnr_left: u8,
    /// When the retransmission timer fires.
    pub timer: Option<Instant>,
    /// After an RNR NAK: do not resend before this.
    pub rnr_until: Option<Instant>,
    /// Go-back-N point waiting to be resent.
    pub resend_from: Option<u32>,
    /// A READ or atomic (by its first PSN) whose answer went missing while later ones
    /// came: its request goes again, for what is missing, with nothing behind it.
    pub ask_again: Option<u32>,
    /// The PSN of the missing answer last asked for again, so that the answers still on
    /// their way behind the gap do not ask for it once more.
    pub asked_again: Option<u32>,
    /// In SQD: the drain was reported (SQ_DRAINED posted).
    pub drained_reported: bool,
    /// Which WQEs may start (a DCI's: those of the connected target, see [`super::dc`]).
    pub admit: Admit,
}

/// Which WQEs the requester may start; the first one it may not holds back the rest.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Every WQE.
    #[default]
    All,
    /// None.
    Nothing,
    /// Those whose last 16 bytes (`SendWqe::reserved1`, a DCI's target) are these.
    Only([u8; 16]),
}

impl Admit {
    pub(super) fn admits(self, op: &SendOp) -> bool {
        match self {
            Admit::All => true,
            Admit::Nothing => false,
            Admit::Only(tag) => op.wqe.reserved1 == tag,
        }
    }
}

impl RequesterState {
    /// Whether any op has started and not finished (what SQD waits for).
    pub fn in_flight(&self) -> bool {
        self.ops
            .iter()
            .any(|o| o.assigned && o.state != OpState::Done)
    }
}

impl RequesterState {
    /// Starts the requester when the QP enters RTS.
    pub fn start(&mut self, sq_psn: u32, a: &QpAttr) {
        self.next_psn = sq_psn & 0xFF_FFFF;
        self.acked_end = self.next_psn;
        self.sent_end = self.next_psn;
        self.retry_left = a.retry_cnt;
        self.rnr_left = a.rnr_retry;
    }

    /// The local ACK timeout of `a`: 4.096 µs * 2^timeout, or none for 0.
    pub fn timeout(a: &QpAttr) -> Option<Duration> {
        (a.timeout != 0).then(|| Duration::from_nanos(4096u64 << a.timeout.min(31)))
    }

    /// The first PSN not yet acknowledged. A READ or atomic still waiting for (part of)
    /// its answer holds it back even if later PSNs were acknowledged: its answer went
    /// missing, and the timer must ask for it again.
    pub fn una(&self) -> u32 {
        // Every READ or atomic that was sent holds a slot until it retires: with none
        // held, none waits (and the ops need no walk, on every packet that arrives).
        if self.rd_atomic_outstanding == 0 {
            return self.acked_end;
        }
        let waiting = self
            .ops
            .iter()
            .find(|o| o.assigned && o.is_rd_atomic() && o.state != OpState::Done)
            .map(|o| psn::add(o.first_psn, o.answers.first_missing()));
        match waiting {
            Some(w) if psn::diff(self.acked_end, w) > 0 => w,
            _ => self.acked_end,
        }
    }

    /// Whether a PSN sent is not yet acknowledged.
    pub fn unacked(&self) -> bool {
        psn::diff(self.sent_end, self.una()) > 0
    }

    /// Whether `p` was ever sent, so that an answer to it can be genuine.
    pub fn was_sent(&self, p: u32) -> Result<(), Drop> {
        if psn::diff(p, self.sent_end) < 0 {
            Ok(())
        } else {
            Err(Drop::Psn)
        }
    }

    /// Records that every PSN before `p` is acknowledged; returns whether that is news.
    pub fn acked_before(&mut self, p: u32) -> bool {
        let news = psn::diff(p, self.acked_end) > 0;
        if news {
            self.acked_end = p;
        }
        news
    }

    pub(super) fn sent_upto(&mut self, end: u32) {
        if psn::diff(end, self.sent_end) > 0 {
            self.sent_end = end;
        }
    }

    /// (Re)arms the retransmission timer if anything waits for an answer.
    pub fn rearm(&mut self, a: &QpAttr, now: Instant) {
        self.timer = if self.unacked() {
            Self::timeout(a).map(|t| now + t)
        } else {
            None
        };
    }

    /// Schedules a resend from `p` (keeping the earliest point).
    pub fn go_back_to(&mut self, p: u32) {
        self.resend_from = Some(match self.resend_from {
            Some(q) if psn::diff(q, p) < 0 => q,
            _ => p,
        });
    }
}

/// A message in progress across several packets.
#[derive(Debug, Clone)]
pub enum Inbound {
    /// A SEND filling receive WQE `recv`.
    Send {
        /// The receive WQE.
        recv: RecvOp,
        /// Bytes placed so far.
        offset: u64,
    },
    /// A WRITE.
    Write {
        /// Address of the next byte.
        va: u64,
        /// The rkey.
        rkey: u32,
        /// Bytes the RETH announced.
        len: u64,
        /// Bytes placed so far.
        offset: u64,
    },
}

/// What a duplicate READ or atomic is answered from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Resource {
    Read {
        first_psn: u32,
        npsn: u32,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: u32,
        orig: u64,
    },
    /// A FLUSH or ATOMIC WRITE executed at `psn`: a repeat is answered with an empty READ
    /// response again, never executed twice (rxe's replay).
    Answered {
        psn: u32,
    },
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub struct ResponderState {
    /// PSN expected next.
    pub epsn: u32,
    /// Messages completed (24 bits).
    pub msn: u32,
    /// A multi-packet message in progress.
    pub cur: Option<Inbound>,
    /// A PSN-sequence NAK was sent and the expected PSN has not arrived since.
    pub(super) nak_sent: bool,
    /// Answers kept for duplicate READs and atomics, oldest first.
    pub(super) resources: VecDeque<Resource>,
    /// The first request arrived (COMM_EST was reported).
    pub(super) established: bool,
    /// An ACK is due for this PSN (see [`super::responder::flush_ack`]).
    pub(super) ack_due: Option<u32>,
    /// Packets executed since the last ACK was sent.
    pub(super) unacked: u32,
    /// UC: a receive WQE taken for a SEND that was dropped; the next SEND fills it
    /// instead of taking another ([`super::responder::on_uc_request`]).
    pub(super) spare: Option<RecvOp>,
    /// UC: the message in progress lost a packet or was refused; the rest of it is
    /// dropped, up to the first packet of the next.
    pub(super) dropping: bool,
}

impl ResponderState {
    /// Starts the responder when the QP enters RTR.
    pub fn start(&mut self, rq_psn: u32) {
        self.epsn = rq_psn & 0xFF_FFFF;
    }
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
                | ACCESS_REMOTE_ATOMIC
                | ACCESS_FLUSH)
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
    // The address vector: IPv4-mapped GIDs only (RoCEv2 over IPv4), a source within the
    // GID table (whether its entry holds an IPv4 address is the function's to say).
    bad(
        attr::AV,
        u32::from(a.sgid_index) < rnic_abi::gid::GID_TABLE_LEN
            && rnic_abi::gid::ipv4(&a.dgid).is_some(),
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
        let mut a = to(Rtr);
        a.sgid_index = rnic_abi::gid::GID_TABLE_LEN as u8;
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
