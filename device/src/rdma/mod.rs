//! The RDMA engine of one function: its objects (EQ, PDs, MRs, CQs, QPs), the commands
//! that create them, and the transport stages that move data between QPs as RoCEv2
//! packets, in the manner of Linux rxe:
//!
//! - [`requester`]: turns send WQEs into request packets;
//! - [`responder`]: executes incoming requests and answers them;
//! - [`completer`]: matches acknowledgements and responses to requests, retries, and
//!   completes send WQEs;
//! - [`recv`]: validates every incoming packet and hands it to the responder or completer;
//! - [`switch`]: carries packets between the functions of one device.

pub mod answers;
pub mod completer;
pub mod cq;
pub mod ctrlq;
pub mod dc;
pub mod drops;
pub mod env;
pub mod error;
pub mod handover;
pub mod mkey;
pub mod mmio;
pub mod qp;
pub mod recv;
pub mod requester;
pub mod responder;
pub mod sched;
pub mod session;
pub mod shared_sq;
pub mod srq;
pub mod ud;
pub mod verbs;
pub mod wire;
pub mod wqe;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use rnic_abi::cmd::Limits;
use rnic_abi::doorbell::{self, SLOTS};
use rnic_abi::regs::NO_VECTOR;
use rnic_abi::verbs::{event, Cqe, QpState, WcStatus};

use crate::doorbell::DoorbellBar;
use crate::fabric::frame::Frame;
use crate::fabric::held::Payload;
use crate::fabric::train::Run;
use crate::identity::FunctionId;
use crate::resources::ResourcePool;
use cq::{CompletionQueue, EventQueue, Posted};
use env::Env;
use mkey::mr::MrTable;
use qp::{Flushed, Qp};
use shared_sq::Taken;
use wqe::{send_completion, Op, RecvOp, SharedRef, WqeError};

/// Counters of the function's RDMA engine.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent.
    pub tx_packets: u64,
    /// Packets received and accepted.
    pub rx_packets: u64,
    /// Packets received and dropped: by the receive checks or the PSN window (by reason
    /// in `drops`), or because Bus Master Enable was clear.
    pub rx_dropped: u64,
    /// Request packets sent again (timeouts, NAKs, RNR).
    pub retransmits: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// The frames of `rx_dropped` that the transport dropped, by reason.
    pub drops: drops::DropCounters,
}

/// A protection domain: only a count of what uses it.
#[derive(Debug, Default)]
struct Pd {
    users: usize,
}

/// Who owns a doorbell slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotOwner {
    Eq,
    Cq(u32),
    Sq(u32),
    Rq(u32),
    Srq(u32),
    Window(u32),
    Ctrlq(u32),
    SharedSq(u32),
}

/// All RDMA objects of one function.
#[derive(Debug)]
pub struct RdmaState {
    limits: Limits,
    eq: Option<(u32, EventQueue)>,
    pds: BTreeMap<u32, Pd>,
    mrs: MrTable,
    cqs: BTreeMap<u32, CompletionQueue>,
    qps: BTreeMap<u32, Box<Qp>>,
    srqs: srq::SrqTable,
    ud: ud::UdTable,
    dc: dc::DcTable,
    ctrlqs: ctrlq::CtrlqTable,
    shared_sqs: shared_sq::SharedSqTable,
    /// The sessions (UDP source ports) the PF gave the function.
    pub sessions: session::Sessions,
    slots: BTreeMap<(u32, u32), SlotOwner>,
    /// Send and receive queue slots in each doorbell page: the pages whose rung bitmaps
    /// the engine reads, found without walking every slot.
    queue_slots_in_page: [u32; doorbell::PAGES as usize],
    /// QPs that need a turn without a doorbell (queued work, armed timers).
    schedule: sched::Schedule,
    next_pdn: u32,
    next_cqn: u32,
    next_qpn: u32,
    /// Counters.
    pub counters: Counters,
    /// An event was posted: the EQ's vector is due.
    pub eq_signal: bool,
    /// Where the function's objects are charged (see [`crate::resources`]), and which
    /// function of the pool this is.
    pool: std::sync::Arc<ResourcePool>,
    member: usize,
    /// QPNs of QPs that migrated away from this function (`MIGRATE_QP`) and whose frames
    /// the switch still steers to where they went: never handed to a new QP here.
    departed: std::collections::BTreeSet<u32>,
    /// Which function this is, for its warnings.
    function: FunctionId,
    /// The drops explained so far (see [`drops::explain`]).
    explained: drops::Explained,
}

use rnic_abi::verbs::FIRST_QPN;

impl RdmaState {
    /// No objects, and `limits` to enforce, with a pool of its own whose quota is the
    /// object counts of `limits`, DMA unbounded (the PF alone, as in unit tests).
    pub fn new(limits: Limits) -> Self {
        let share = rnic_abi::admin::Quota {
            qps: limits.max_qp,
            cqs: limits.max_cq,
            mrs: limits.max_mr,
            pds: limits.max_pd,
            mr_pages: u32::MAX,
            doorbell_pages: limits.doorbell_pages,
            dma_windows: u32::MAX,
            dma_pages: u32::MAX,
        };
        let pool = std::sync::Arc::new(ResourcePool::new(1, share));
        Self::with_pool(FunctionId::Pf, limits, pool, 0)
    }

    /// The objects of `function`, none yet; `limits` to enforce on each object, and the
    /// quota of function `member` of `pool` on how many of them there are.
    pub fn with_pool(
        function: FunctionId,
        limits: Limits,
        pool: std::sync::Arc<ResourcePool>,
        member: usize,
    ) -> Self {
        Self {
            limits,
            eq: None,
            pds: BTreeMap::new(),
            // The quota bounds the count; the table only grows as far as it is used.
            mrs: MrTable::new(pool.totals().mrs as usize),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: Default::default(),
            ud: Default::default(),
            dc: Default::default(),
            ctrlqs: Default::default(),
            shared_sqs: Default::default(),
            sessions: Default::default(),
            slots: BTreeMap::new(),
            queue_slots_in_page: [0; doorbell::PAGES as usize],
            schedule: sched::Schedule::default(),
            next_pdn: 1,
            next_cqn: 1,
            next_qpn: FIRST_QPN,
            counters: Counters::default(),
            eq_signal: false,
            pool,
            member,
            departed: Default::default(),
            function,
            explained: Default::default(),
        }
    }

    /// The EQ's MSI-X vector, if it has one.
    pub fn eq_vector(&self) -> Option<u16> {
        self.eq
            .as_ref()
            .and_then(|(_, eq)| u16::try_from(eq.vector).ok())
            .filter(|&v| u32::from(v) != NO_VECTOR)
    }

    /// The SRQ QP `qpn` takes its receives from, if any.
    pub fn srq_of(&self, qpn: u32) -> Option<u32> {
        self.srqs.of(qpn)
    }

    /// The receive WQE the next message on `qp` would take, from its SRQ or its own
    /// receive queue; `None` if none is posted (the responder answers RNR).
    pub fn next_recv(&self, qp: &Qp, env: &Env) -> Option<Result<RecvOp, WqeError>> {
        self.srqs.next_recv(qp, env)
    }

    /// Consumes the WQE [`RdmaState::next_recv`] returned. On an SRQ, posts
    /// `SRQ_LIMIT_REACHED` (once per arming) when fewer than the limit are left.
    pub fn take_recv(&mut self, qp: &mut Qp, env: &Env) {
        if let Some(srqn) = self.srqs.take_recv(qp, env) {
            self.post_event(env, event::SRQ_LIMIT_REACHED, srqn);
        }
    }

    /// Moves `qp` to the error state by itself (not by a modify), tells the driver with
    /// `QP_FATAL`, and flushes its queues (see [`Qp::set_error`]).
    pub fn enter_error(&mut self, qp: &mut Qp, env: &Env) {
        if qp.set_error() {
            self.post_event(env, event::QP_FATAL, qp.qpn);
        }
        self.flush_queues(qp, env);
    }

    /// Flushes `qp`'s queues ([`Qp::flush_queues`]), posting the completions.
    pub fn flush_queues(&mut self, qp: &mut Qp, env: &Env) {
        let on_srq = self.srq_of(qp.qpn).is_some();
        qp.flush_queues(env, on_srq, |f| match f {
            Flushed::Cq(cqn, cqe) => {
                self.complete(cqn, cqe, env);
            }
            Flushed::Shared(from, cqe) => self.finish_shared(from, cqe, true, env),
        });
    }

    /// Records that the op from shared send queue entry `from` finished with `cqe` (of
    /// the QP that carried it), and posts, in order, the completions of the shared queue
    /// that are due ([`shared_sq::SharedSqTable::finish`]).
    pub fn finish_shared(&mut self, from: SharedRef, cqe: Cqe, signaled: bool, env: &Env) {
        if let Some((cqn, due)) = self.shared_sqs.finish(from, cqe, signaled) {
            for cqe in due {
                self.complete(cqn, cqe, env);
            }
        }
    }

    /// Finishes with `WR_FLUSH_ERR` the shared queues' ops `ops` held (a QP reset or
    /// destroyed, whose ops go without completions of their own).
    pub fn abandon_shared(&mut self, ops: &VecDeque<Op>, qpn: u32, env: &Env) {
        for o in ops {
            if let Some(from) = o.shared {
                let cqe = Cqe {
                    wr_id: o.op.wqe.wr_id,
                    qp_num: qpn,
                    opcode: send_completion(o.op.wqe.opcode),
                    status: WcStatus::WrFlushErr as u8,
                    ..Cqe::default()
                };
                self.finish_shared(from, cqe, true, env);
            }
        }
    }

    /// Hands the WQEs posted to shared send queues since the last look to their QPs.
    /// Returns whether anything was taken.
    fn run_shared_sqs(&mut self, env: &Env) -> bool {
        let mut progress = false;
        let numbers: Vec<u32> = self.shared_sqs.queues.keys().copied().collect();
        for ssqn in numbers {
            while self.shared_sqs.has_work(ssqn, env) {
                match self.shared_sqs.take(ssqn, env, &self.qps, &self.ud) {
                    Taken::Wait => break,
                    Taken::Queued(qpn, op) => {
                        if let Some(qp) = self.qps.get_mut(&qpn) {
                            qp.req.ops.push_back(*op);
                        }
                        // The QP has work now: the engine's schedule must give it a turn.
                        self.reschedule(qpn);
                    }
                    Taken::Refused(from, qpn, wr_id, status) => {
                        let cqe = Cqe {
                            wr_id,
                            qp_num: qpn,
                            status: status as u8,
                            ..Cqe::default()
                        };
                        self.finish_shared(from, cqe, true, env);
                    }
                }
                progress = true;
            }
        }
        progress
    }

    /// Posts an async event to the EQ.
    pub fn post_event(&mut self, env: &Env, event_type: u8, object: u32) {
        if let Some((_, eq)) = &mut self.eq {
            if eq.post(env.w, env.doorbells, event_type, object) {
                self.eq_signal = true;
            }
        }
    }

    /// The QP numbers whose send or receive doorbells were rung since the last look,
    /// taking the rung bits (the device only ever clears them).
    pub fn rung_send_queues(&self, doorbells: &DoorbellBar) -> Vec<u32> {
        let mut rung = Vec::new();
        let pages = (0..doorbell::PAGES).filter(|&p| self.queue_slots_in_page[p as usize] > 0);
        for page in pages {
            let base = u64::from(page) * rnic_abi::PAGE_SIZE + doorbell::RUNG_BITMAP;
            for word in 0..SLOTS.div_ceil(32) {
                let at = base + u64::from(word) * 4;
                if doorbells.read32(at).unwrap_or(0) == 0 {
                    continue;
                }
                let bits = doorbells.swap32(at, 0).unwrap_or(0);
                for bit in 0..32 {
                    if bits & (1 << bit) != 0 {
                        if let Some(SlotOwner::Sq(qpn) | SlotOwner::Rq(qpn)) =
                            self.slots.get(&(page, word * 32 + bit))
                        {
                            rung.push(*qpn);
                        }
                    }
                }
            }
        }
        rung
    }

    /// Flushes a QP's work: every send WQE not yet completed and every posted receive WQE
    /// completes with `WR_FLUSH_ERR`.
    pub fn flush_qp(&mut self, qpn: u32, env: &Env) {
        if let Some(mut qp) = self.qps.remove(&qpn) {
            self.flush_queues(&mut qp, env);
            self.qps.insert(qpn, qp);
        }
        self.reschedule(qpn);
    }

    /// Tells the schedule what QP `qpn` now waits for; called after every piece of work
    /// that may have queued ops, started a resend or armed or cleared a timer.
    pub(crate) fn reschedule(&mut self, qpn: u32) {
        match self.qps.get(&qpn) {
            Some(qp) => {
                let pending = qp.req.resend_from.is_some()
                    || qp.req.ask_again.is_some()
                    || qp.req.ops.iter().any(|o| o.state == wqe::OpState::Queued);
                let deadline = [qp.req.timer, qp.req.rnr_until].into_iter().flatten().min();
                self.schedule.update(qpn, pending, deadline);
            }
            None => self.schedule.forget(qpn),
        }
    }

    /// In SQD, once nothing is in flight: posts `SQ_DRAINED`, once per entry into SQD.
    fn report_drained(&mut self, qpn: u32, env: &Env) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if qp.state != QpState::Sqd || qp.req.drained_reported || qp.req.in_flight() {
            return;
        }
        qp.req.drained_reported = true;
        self.post_event(env, event::SQ_DRAINED, qpn);
    }

    /// Posts a completion to CQ `cqn`, and a completion event if the CQ was armed. Returns
    /// false if the CQ could not take it (overrun or unreachable): the CQ is then in error
    /// and the driver has been told with a `CQ_ERR` event.
    pub fn complete(&mut self, cqn: u32, cqe: Cqe, env: &Env) -> bool {
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            return false;
        };
        let was_error = cq.error;
        match cq.post(env.w, env.doorbells, cqe) {
            Posted::Written { event } => {
                if event {
                    self.post_event(env, event::EVENT_COMPLETION, cqn);
                }
                true
            }
            Posted::Overrun | Posted::Unreachable => {
                if !was_error {
                    log::warn!(
                        "CQ {cqn} overran or became unreachable: it takes no more completions"
                    );
                    self.post_event(env, event::CQ_ERR, cqn);
                }
                false
            }
        }
    }

    /// Does the RDMA work of the function: validates and dispatches `frames`, runs the
    /// requester of every QP whose send doorbell was rung or that has work pending, and
    /// fires due timers. Frames to send are left in `wire.out`. Returns whether anything
    /// happened.
    pub fn poll(
        &mut self,
        env: &Env,
        frames: impl IntoIterator<Item = Frame>,
        wire: &mut wire::Wire,
        now: Instant,
    ) -> bool {
        let mut progress = false;
        // The QPs that received frames: only they can owe an ACK.
        let mut received = Vec::new();
        for frame in frames {
            progress = true;
            self.deliver(&frame, env, wire, now, &mut received);
            wire.recycle(frame.bytes);
        }
        if progress {
            // One ACK for what arrived together (see `responder::flush_ack`).
            let before = wire.out.len();
            received.sort_unstable();
            received.dedup();
            for qpn in received {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    responder::flush_ack(qp, wire);
                }
            }
            self.counters.tx_packets += wire.packets_since(before);
        }
        // Shared send queues hand their WQEs to their QPs first, which then run below.
        progress |= self.run_shared_sqs(env);
        let mut runnable: Vec<u32> = self.rung_send_queues(env.doorbells);
        progress |= !runnable.is_empty();
        // QPs with queued ops (behind a fence or the READ window, or due a resend) and
        // QPs whose timer is due also get a turn.
        self.schedule.due(now, &mut runnable);
        runnable.sort_unstable();
        runnable.dedup();
        for qpn in runnable {
            let Some(mut qp) = self.qps.remove(&qpn) else {
                continue;
            };
            completer::on_timer(self, &mut qp, env, now);
            // Messages that name a session group get their session before their first
            // packet: take new WQEs now (the requester would take them itself, and hold
            // one it takes later until the next pass gives it its session).
            let sends = !matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr);
            if sends && self.ud.qkey(qpn).is_none() {
                if !self.sessions.ports().is_empty() {
                    requester::fetch(&mut qp, env);
                }
                self.sessions.assign(&mut qp.req.ops);
            }
            let before = wire.out.len();
            let mut retransmits = 0;
            let ran = match self.ud.qkey(qpn) {
                Some(qkey) => ud::run_send(&mut qp, &self.mrs, env, wire, qkey),
                None if self.dc.is_dci(qpn) || self.dc.is_dct(qpn) => dc::run(
                    &mut self.dc,
                    &mut qp,
                    &mut self.mrs,
                    env,
                    wire,
                    now,
                    &mut retransmits,
                ),
                None => requester::run(&mut qp, &mut self.mrs, env, wire, now, &mut retransmits),
            };
            self.counters.retransmits += retransmits;
            self.counters.tx_packets += wire.packets_since(before);
            completer::retire(self, &mut qp, env, now);
            if qp.state == QpState::Err {
                self.flush_queues(&mut qp, env);
            }
            progress |= ran;
            self.qps.insert(qpn, qp);
            self.reschedule(qpn);
            self.report_drained(qpn, env);
        }
        // After the QPs: a WQE that found its key pending runs on the next pass.
        progress |= self.run_ctrlqs(env);
        progress
    }

    /// Validates `frame` and hands its packets (one, or a train's: see [`crate::fabric::train`]) to
    /// their QP's responder or completer, counting each packet received or dropped (by
    /// the checks, or by the transport's PSN window).
    fn deliver(
        &mut self,
        frame: &Frame,
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
        received: &mut Vec<u32>,
    ) {
        let parsed = match recv::parse(frame, &wire.local) {
            // Not addressed here: steered here for a QP that migrated in?
            Err(why) => self.parse_for_arrived(frame).unwrap_or(Err(why)),
            parsed => parsed,
        };
        let pkt = match parsed {
            Ok(pkt) => pkt,
            Err(recv::Refused::Drop(why)) => {
                log::trace!("frame dropped: {why:?}");
                self.count_drops(why, frame.packets());
                return;
            }
            Err(recv::Refused::Foreign(u)) => {
                let (qpn, opcode) = (u.bth.dest_qp, u.bth.opcode);
                let qp = self.qps.get(&qpn).map(|qp| &**qp);
                let why = qp.map_or(drops::Drop::UnknownQp, |_| drops::unsupported(opcode));
                log::trace!("qp {qpn:#x}: frame {opcode:#x} dropped: {why:?}");
                let dropped = self.dropped(qpn, qp, opcode, u.src_ip, 0);
                self.drop_explained(why, &dropped, frame.packets());
                return;
            }
        };
        let qpn = pkt.hdrs.bth.dest_qp;
        let Some(mut qp) = self.qps.remove(&qpn) else {
            let (opcode, len) = (pkt.hdrs.bth.opcode, pkt.payload.len());
            log::trace!("qp {qpn:#x}: frame {opcode:#x} dropped: UnknownQp");
            let dropped = self.dropped(qpn, None, opcode, pkt.src_ip, len);
            self.drop_explained(drops::Drop::UnknownQp, &dropped, frame.packets());
            return;
        };
        received.push(qpn);
        let before = wire.out.len();
        match frame.train.as_deref().map(|t| t.runs(pkt, &frame.bytes)) {
            None => self.take_packet(&mut qp, &pkt, &frame.bytes, env, wire, now),
            Some(Ok(runs)) => {
                for run in runs {
                    self.take_run(&mut qp, run, &frame.bytes, env, wire, now);
                }
            }
            Some(Err(why)) => {
                log::error!("qp {qpn:#x}: a train does not hold what it says: dropped");
                self.count_drops(why.into(), frame.packets());
            }
        }
        self.counters.tx_packets += wire.packets_since(before);
        self.qps.insert(qpn, qp);
        self.reschedule(qpn);
        self.report_drained(qpn, env);
    }

    /// Hands a run of a train's packets to `qp`'s transport: as one, if its responder or
    /// completer takes it so (see [`responder::takes_run`], [`completer::takes_run`]),
    /// else packet by packet. A single packet whose payload is held goes as a packet
    /// whose payload is copied from where it is held.
    fn take_run(
        &mut self,
        qp: &mut Qp,
        run: Run,
        frame: &[u8],
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
    ) {
        let plain_rc =
            || self.ud.qkey(qp.qpn).is_none() && !self.dc.is_dci(qp.qpn) && !self.dc.is_dct(qp.qpn);
        let request = recv::is_request(run.packet.hdrs.bth.opcode);
        let as_one = || {
            if request {
                responder::takes_run(qp, &run)
            } else {
                completer::takes_run(qp, &run)
            }
        };
        if run.count == 1 && run.is_held() && plain_rc() {
            let len = run.payload.len();
            let taken = self.take_rc(qp, &run.packet, run.payload, env, wire, now);
            self.count_taken(qp, &run.packet, (1, len), taken);
            return;
        }
        if run.count == 1 || !plain_rc() || !as_one() {
            // A held payload is read into a buffer first, as the sender used to.
            let mut buf = if run.is_held() {
                wire.spare.pop().unwrap_or_default()
            } else {
                Vec::new()
            };
            match run.in_bytes(&mut buf) {
                Some(run) => {
                    for pkt in run.packets() {
                        self.take_packet(qp, &pkt, frame, env, wire, now);
                    }
                }
                None => {
                    log::error!("qp {:#x}: a train's held payload cannot be read", qp.qpn);
                    self.count_drops(drops::Drop::Length, u64::from(run.count));
                }
            }
            if buf.capacity() > 0 {
                wire.recycle(buf);
            }
            return;
        }
        // The packets of a run differ only in PSN and payload: what the checks say of
        // the first, they say of all.
        let seg = run.payload.len() / run.count as usize;
        let taken = recv::check(qp, &run.packet, seg).and_then(|()| {
            if request {
                responder::on_run(self, qp, run, env, wire)
            } else {
                completer::on_run(self, qp, run, env, now)
            }
        });
        self.count_taken(qp, &run.packet, (run.count, seg), taken);
    }

    /// Hands one packet to `qp`'s transport and counts it received or dropped.
    fn take_packet(
        &mut self,
        qp: &mut Qp,
        pkt: &crate::roce::packet::Packet,
        frame: &[u8],
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
    ) {
        let checked = recv::check_transport(self.transport_of(qp.qpn), pkt.hdrs.bth.opcode);
        let taken = checked.and_then(|()| match self.ud.qkey(qp.qpn) {
            Some(qkey) => responder::on_datagram(self, qp, pkt, frame, env, qkey),
            None => match self.dc.receive(qp, pkt, wire, now) {
                Some(Ok(dc::DcPacket::Taken)) => Ok(()),
                Some(Ok(dc::DcPacket::Refused)) => {
                    completer::retire(self, qp, env, now);
                    Ok(())
                }
                Some(Err(why)) => Err(why),
                None => self.take_rc(qp, pkt, Payload::Bytes(pkt.payload), env, wire, now),
            },
        });
        self.count_taken(qp, pkt, (1, pkt.payload.len()), taken);
    }

    /// Hands `pkt`, whose payload is `payload`, to the responder or the completer of
    /// `qp`, a QP of the RC transport.
    fn take_rc(
        &mut self,
        qp: &mut Qp,
        pkt: &crate::roce::packet::Packet,
        payload: Payload,
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
    ) -> Result<(), drops::Drop> {
        recv::check(qp, pkt, payload.len())?;
        if recv::is_request(pkt.hdrs.bth.opcode) {
            responder::on_request(self, qp, pkt, payload, env, wire)
        } else {
            completer::on_response(self, qp, pkt, payload, env, now)
        }
    }

    /// Counts `count` packets from `pkt` on (one, or a run's) that `qp` took or
    /// dropped, each with `payload_len` bytes of payload.
    fn count_taken(
        &mut self,
        qp: &Qp,
        pkt: &crate::roce::packet::Packet,
        (count, payload_len): (u32, usize),
        taken: Result<(), drops::Drop>,
    ) {
        match taken {
            Ok(()) => self.counters.rx_packets += u64::from(count),
            Err(why) => {
                log::trace!(
                    "qp {:#x}: {count} packet(s) {:#x} from psn {} dropped: {why:?}",
                    qp.qpn,
                    pkt.hdrs.bth.opcode,
                    pkt.hdrs.bth.psn
                );
                let opcode = pkt.hdrs.bth.opcode;
                let dropped = self.dropped(qp.qpn, Some(qp), opcode, pkt.src_ip, payload_len);
                self.drop_explained(why, &dropped, u64::from(count));
            }
        }
    }

    /// Counts `packets` packets dropped for `why`.
    fn count_drops(&mut self, why: drops::Drop, packets: u64) {
        self.counters.rx_dropped += packets;
        self.counters.drops.count(why, packets);
    }

    /// Counts `packets` packets of `dropped` dropped for `why`, and if the user can act on
    /// the reason ([`drops::explainable`]) and this is its first drop for the QP, explains
    /// it at warn level; later ones are counted only.
    fn drop_explained(&mut self, why: drops::Drop, dropped: &drops::Dropped, packets: u64) {
        self.count_drops(why, packets);
        if !drops::explainable(why, dropped.opcode) {
            return;
        }
        let f = self.function;
        match self.explained.note(dropped.qpn, why) {
            drops::Verdict::Explain => {
                if let Some(text) = drops::explain(why, dropped) {
                    log::warn!("{f}: {text}");
                }
            }
            drops::Verdict::Suppress => log::warn!(
                "{f}: drops of {} QP and reason pairs explained: drops of further pairs are \
                 only counted (see the drop counters at exit; RUST_LOG=trace logs each)",
                drops::Explained::MAX
            ),
            drops::Verdict::Count => {}
        }
    }

    /// A drop of an `opcode` packet with `payload_len` bytes of payload from `src_ip` for
    /// QP `qpn`, which is `qp` if the function has it (a QP taking a packet is out of
    /// `qps`), as [`drops::explain`] describes it.
    fn dropped(
        &self,
        qpn: u32,
        qp: Option<&Qp>,
        opcode: u8,
        src_ip: [u8; 4],
        payload_len: usize,
    ) -> drops::Dropped {
        let transport = qp.map(|_| self.transport_of(qpn));
        let max_payload = match (qp, transport) {
            (_, Some(drops::QpTransport::Ud)) => rnic_abi::ud::UD_MAX_PAYLOAD,
            (Some(qp), _) => qp::mtu(&qp.attr),
            (None, _) => 0,
        };
        drops::Dropped {
            qpn,
            qp: transport,
            opcode,
            src_ip,
            payload_len,
            max_payload,
        }
    }

    /// The transport of QP `qpn`.
    fn transport_of(&self, qpn: u32) -> drops::QpTransport {
        if self.ud.qkey(qpn).is_some() {
            drops::QpTransport::Ud
        } else if self.dc.is_dci(qpn) {
            drops::QpTransport::DcInitiator
        } else if self.dc.is_dct(qpn) {
            drops::QpTransport::DcTarget
        } else {
            drops::QpTransport::Rc
        }
    }

    /// The earliest moment a timer of any QP is due, for the engine's sleep.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.schedule.next_deadline()
    }

    /// The QP with `qpn`.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn).map(|qp| &**qp)
    }

    /// Whether a CQ exists (for tests and queries).
    pub fn has_cq(&self, cqn: u32) -> bool {
        self.cqs.contains_key(&cqn)
    }
}
