//! Shared send queues: one send ring feeding many RC QPs, completing in posting order
//! ([`rnic_abi::shared_sq`]).
//!
//! The device takes each WQE of a shared queue and appends it to the requester queue of
//! the QP it names ([`SharedSqTable::take`]), marked with where it came from
//! ([`SharedRef`]); the QP sends it like its own. When the QP retires or flushes it, the
//! completion comes back here ([`SharedSqTable::finish`]) and waits in the queue's
//! reorder window until every WQE posted before it finished too, so the shared queue's CQ
//! sees completions in posting order however fast each connection is.

use std::collections::{BTreeMap, VecDeque};

use rnic_abi::shared_sq::{SharedSendHeader, SHARED_SQ_CQE_QPN_BIT};
use rnic_abi::verbs::{Cqe, QpState, WcStatus};
use zerocopy::FromBytes;

use super::env::Env;
use super::qp::Qp;
use super::ud::UdTable;
use super::wqe::{decode_send, Op, OpState, QpCaps, SendOp, SharedRef, WorkQueue, WqeError};

/// Shared send queues one function may have.
pub(super) const MAX_SHARED_SQS: usize = 64;

/// A finished WQE waiting for those posted before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Finished {
    cqe: Cqe,
    signaled: bool,
}

/// A shared send queue.
#[derive(Debug)]
pub struct SharedSq {
    pub(super) generation: u64,
    pub(super) pdn: u32,
    pub(super) wq: WorkQueue,
    pub(super) caps: QpCaps,
    pub(super) cqn: u32,
    /// Entry `retired + i` is `window[i]`: taken, and finished or not.
    pub(super) window: VecDeque<Option<Finished>>,
    /// Entries completed (in order) in all.
    pub(super) retired: u32,
}

/// The shared send queues of a function.
#[derive(Debug, Default)]
pub struct SharedSqTable {
    pub(super) queues: BTreeMap<u32, SharedSq>,
    /// Queues created in all: the next one's generation.
    pub(super) created: u64,
}

/// What taking one entry came to.
pub enum Taken {
    /// Handed to the QP.
    Queued(u32, Box<Op>),
    /// Finished at once (a bad WQE or QP): the entry, and the QPN, `wr_id` and status
    /// of its completion.
    Refused(SharedRef, u32, u64, WcStatus),
    /// The QP's requester queue is full: try again later.
    Wait,
}

impl SharedSqTable {
    /// Whether shared send queue `ssqn` has an entry posted and room in its reorder
    /// window to take it.
    pub fn has_work(&self, ssqn: u32, env: &Env) -> bool {
        self.queues.get(&ssqn).is_some_and(|q| {
            let posted = env.doorbells.read32(q.wq.slot).unwrap_or(q.wq.taken);
            posted != q.wq.taken && (q.window.len() as u32) < q.wq.entries
        })
    }

    /// Takes the next entry of shared send queue `ssqn` (which has one, see
    /// [`SharedSqTable::has_work`]) for the QP it names, one of `qps` (`ud` says which
    /// are UD QPs, which take none).
    pub fn take(
        &mut self,
        ssqn: u32,
        env: &Env,
        qps: &BTreeMap<u32, Box<Qp>>,
        ud: &UdTable,
    ) -> Taken {
        let q = &self.queues[&ssqn];
        let index = q.wq.taken;
        let at = q.wq.entry_offset(index);
        let from = SharedRef {
            ssqn,
            generation: q.generation,
            index,
        };
        // The header and the WQE's wr_id, for a completion even of a WQE that is refused.
        let mut head = [0u8; 24];
        let op = if q.wq.ring.read(env.r, at, &mut head) {
            decode_send(
                |offset, buf| q.wq.ring.read(env.r, at + 16 + offset, buf),
                &q.caps,
                q.wq.stride - 16,
            )
        } else {
            Err(WqeError::Unreachable)
        };
        let header = SharedSendHeader::read_from_bytes(&head[..16]).unwrap_or_default();
        let wr_id = u64::from_le_bytes(head[16..].try_into().expect("8 bytes"));
        let qpn = header.qpn;
        let refuse = |status| Taken::Refused(from, qpn, wr_id, status);
        let target = qps
            .get(&qpn)
            .filter(|qp| qp.pdn == q.pdn && ud.qkey(qpn).is_none() && qp.state != QpState::Reset);
        let outcome = match (op, target) {
            (Err(WqeError::Unreachable), _) => refuse(WcStatus::LocProtErr),
            (Err(_), _) | (_, None) => refuse(WcStatus::LocQpOpErr),
            (Ok(_), _) if header.reserved != [0; 3] => refuse(WcStatus::LocQpOpErr),
            (Ok(_), Some(qp)) if qp.state == QpState::Err => refuse(WcStatus::WrFlushErr),
            (Ok(_), Some(qp)) if !matches!(qp.state, QpState::Rts | QpState::Sqd) => {
                refuse(WcStatus::LocQpOpErr)
            }
            (Ok(_), Some(qp)) if qp.req.ops.len() as u32 >= qp.sq.entries => Taken::Wait,
            (Ok(op), Some(_)) => Taken::Queued(qpn, Box::new(shared_op(op, from))),
        };
        if !matches!(outcome, Taken::Wait) {
            let q = self.queues.get_mut(&ssqn).expect("looked up above");
            q.wq.taken = q.wq.taken.wrapping_add(1);
            q.window.push_back(None);
        }
        outcome
    }

    /// Records that the op from `from` finished with `cqe` (of the QP that carried it):
    /// the shared queue's CQ and the completions that are now due on it, in order, if
    /// any (those signaled, and every error).
    pub fn finish(&mut self, from: SharedRef, cqe: Cqe, signaled: bool) -> Option<(u32, Vec<Cqe>)> {
        // A queue destroyed since (its number perhaps reused): the completion goes nowhere.
        let q = self
            .queues
            .get_mut(&from.ssqn)
            .filter(|q| q.generation == from.generation)?;
        let at = from.index.wrapping_sub(q.retired) as usize;
        let Some(slot) = q.window.get_mut(at) else {
            log::warn!(
                "shared SQ {}: completion of entry {} outside its window",
                from.ssqn,
                from.index
            );
            return None;
        };
        *slot = Some(Finished {
            cqe: Cqe {
                qp_num: SHARED_SQ_CQE_QPN_BIT | from.ssqn,
                src_qp: cqe.qp_num,
                ..cqe
            },
            signaled,
        });
        let mut due = Vec::new();
        while let Some(Some(f)) = q.window.front() {
            if f.signaled || f.cqe.status != WcStatus::Success as u8 {
                due.push(f.cqe);
            }
            q.window.pop_front();
            q.retired = q.retired.wrapping_add(1);
        }
        Some((q.cqn, due))
    }
}

/// A requester op for `op`, the shared send queue entry `from`.
fn shared_op(op: SendOp, from: SharedRef) -> Op {
    Op {
        index: from.index,
        op,
        first_psn: 0,
        npsn: 0,
        next_pkt: 0,
        state: OpState::Queued,
        status: WcStatus::Success,
        answers: Default::default(),
        holds_rd_atomic: false,
        assigned: false,
        shared: Some(from),
        session_port: None,
    }
}
