//! The RDMA engine of one function, in the manner of Linux rxe: the state of its objects
//! ([`RdmaState`]: EQ, PDs, MRs, CQs, QPs, SRQs, ...) and the code that turns that state
//! into frames and frames into state (docs/hardware-interface.md §7, and
//! docs/architecture.md for one RDMA WRITE through these files).
//!
//! From what the function calls down to what everything uses:
//! - [`verbs`]: the commands that create, change and destroy objects;
//! - [`turn`]: one turn of the engine: what arrived, the QPs with work, timers;
//! - [`recv`]: the receive checks, and the dispatch of a frame's packets to the
//!   [`responder`] (requests) or the [`completer`] (acknowledgements and responses);
//!   [`handover`] moves a QP to another function;
//! - this module: the state, and what every stage does to it: post a completion or an
//!   event, take a receive, put a QP in the error state;
//! - [`requester`]: turns send WQEs into request packets ([`dc`], [`uc`] and [`ud`] for
//!   those transports); [`wire`] turns packets of a QP into frames;
//! - the objects: [`qp`] (a QP and its transport state), [`wqe`] (work queues and their
//!   entries; [`mmio`] windows), [`cq`] (completion and event queues), [`mkey`] (memory
//!   keys), [`srq`], [`shared_sq`], [`ctrlq`], [`session`], [`sched`], [`answers`],
//!   [`mcast`] (multicast groups);
//!   [`drops`] (why a frame is dropped), [`env`](mod@env) (the memory work runs against),
//!   [`error`] (why a command is refused).

pub mod answers;
pub mod completer;
pub mod cq;
pub mod ctrlq;
pub mod dc;
pub mod drops;
pub mod env;
pub mod error;
pub mod handover;
pub mod mcast;
pub mod mkey;
pub mod mmio;
pub mod qp;
pub mod recv;
pub mod requester;
pub mod responder;
pub mod restrack;
pub mod sched;
pub mod session;
pub mod shared_sq;
pub mod srq;
pub mod turn;
pub mod uc;
pub mod ud;
pub mod verbs;
pub mod wire;
pub mod wqe;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use rnic_abi::cmd::Limits;
use rnic_abi::doorbell;
use rnic_abi::regs::NO_VECTOR;
use rnic_abi::verbs::{event, Cqe, QpState, WcStatus};

use crate::identity::FunctionId;
use crate::resources::ResourcePool;
use cq::{CompletionQueue, EventQueue, Posted};
use env::Env;
use mkey::mr::MrTable;
use qp::{Flushed, Qp};
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
    /// An Ethernet queue (datasheet §15), by the number [`RdmaState::alloc_eth_slot`] was
    /// given.
    Eth(u32),
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
    /// The multicast groups its UD QPs joined.
    mcast: mcast::McastTable,
    uc: uc::UcTable,
    dc: dc::DcTable,
    ctrlqs: ctrlq::CtrlqTable,
    shared_sqs: shared_sq::SharedSqTable,
    /// The sessions (UDP source ports) the PF gave the function.
    pub sessions: session::Sessions,
    /// The source addresses its QPs choose from (`SET_GID`), which a reset empties.
    pub gids: crate::gid_table::GidTable,
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
            mcast: Default::default(),
            uc: Default::default(),
            dc: Default::default(),
            ctrlqs: Default::default(),
            shared_sqs: Default::default(),
            sessions: Default::default(),
            gids: Default::default(),
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

    /// Posts an async event to the EQ.
    pub fn post_event(&mut self, env: &Env, event_type: u8, object: u32) {
        if let Some((_, eq)) = &mut self.eq {
            if eq.post(env.w, env.doorbells, event_type, object) {
                self.eq_signal = true;
            }
        }
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
