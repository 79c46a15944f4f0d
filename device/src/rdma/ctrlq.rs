//! Control queues: memory registration pipelined with the work that uses it
//! ([`rnic_abi::ctrlq`]).
//!
//! `RESERVE_MKEYS` hands out keys in the pending state ([`super::mkey::mr::MrTable::reserve`]);
//! a control WQE registers memory under one. Control WQEs run in posting order, each
//! reported on the queue's CQ. The requester holds a send WQE whose local SGE names a
//! pending key ([`waits_for_key`]), so a WRITE posted right behind (or even before) its
//! registration goes out once the registration ran, and fails with `LOC_PROT_ERR` if the
//! registration failed.

use std::collections::BTreeMap;

use super::mkey::mr::MrTable;
use super::mkey::{Access, KeyError};
use super::wqe::SendOp;
use super::wqe::WorkQueue;
use crate::roce::hdr::Headers;

/// Control queues one function may have.
pub(super) const MAX_CTRLQS: usize = 16;

/// Control WQEs one queue runs per engine pass, so that a long batch of registrations
/// does not hold up the data path.
pub(super) const BUDGET: u32 = 16;

/// A control queue.
#[derive(Debug)]
pub struct Ctrlq {
    pub(super) wq: WorkQueue,
    pub(super) cqn: u32,
}

/// The control queues of a function.
#[derive(Debug, Default)]
pub struct CtrlqTable {
    pub(super) queues: BTreeMap<u32, Ctrlq>,
}

impl CtrlqTable {
    pub(super) fn free_number(&self) -> Option<u32> {
        (1..=MAX_CTRLQS as u32).find(|n| !self.queues.contains_key(n))
    }
}

/// Whether `op` must wait: one of its local SGEs names a key whose registration is still
/// queued on a control queue.
pub fn waits_for_key(op: &SendOp, mrs: &MrTable) -> bool {
    op.inline.is_none() && op.sges.iter().any(|s| mrs.is_pending(s.lkey))
}

/// Whether a request with `hdrs` must wait: the rkey of its RETH or AtomicETH is a key of
/// `pdn` whose registration is still queued on a control queue. The responder answers it
/// with an RNR NAK, and the requester asks again after its RNR timer.
pub fn remote_key_pending(mrs: &MrTable, pdn: u32, hdrs: &Headers) -> bool {
    let rkey = match (hdrs.reth, hdrs.atomic) {
        // A zero-length READ or WRITE names no memory (IB C9-88): it never waits.
        (Some(reth), _) if reth.dma_len != 0 => reth.rkey,
        (_, Some(atomic)) => atomic.rkey,
        _ => return false,
    };
    matches!(
        mrs.check(rkey, pdn, Access::LocalRead, 0, 0),
        Err(KeyError::Pending)
    )
}
