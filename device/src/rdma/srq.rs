//! Shared receive queues (`rnic_abi::srq`): one receive ring that many RC QPs of a PD
//! take their receives from, in posting order, whichever QP a message arrives on.
//!
//! The responder asks [`super::RdmaState::next_recv`] for a QP's next receive and
//! [`super::RdmaState::take_recv`] to consume it; both go to the QP's own receive queue or to
//! its SRQ, so the transport stages do not care which it is. Which QP uses which SRQ is
//! kept here ([`SrqTable`]), not in the QP.

use std::collections::BTreeMap;

use rnic_abi::cmd::Status;
use rnic_abi::srq::MAX_SRQN;

use super::env::Env;
use super::error::VerbsError;
use super::qp::Qp;
use super::wqe::{read_recv, QpCaps, RecvOp, WorkQueue, WqeError};

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// Protection domain.
    pub pdn: u32,
    /// The ring, its doorbell slot and how far the device took it.
    pub wq: WorkQueue,
    /// SGEs per WQE (as `max_recv_sge`).
    pub caps: QpCaps,
    /// The armed limit, 0 when disarmed.
    pub limit: u32,
}

/// The SRQs of one function and the QPs that use them.
#[derive(Debug, Default)]
pub struct SrqTable {
    pub(super) srqs: BTreeMap<u32, Srq>,
    /// QP number -> SRQ number.
    pub(super) attached: BTreeMap<u32, u32>,
    next: u32,
}

impl SrqTable {
    /// The SRQ QP `qpn` takes its receives from, if any.
    pub fn of(&self, qpn: u32) -> Option<u32> {
        self.attached.get(&qpn).copied()
    }

    /// SRQ `srqn`, or the `NOT_FOUND` response.
    pub(super) fn get(&self, srqn: u32) -> Result<&Srq, VerbsError> {
        self.srqs
            .get(&srqn)
            .ok_or(VerbsError::new(Status::NotFound, srqn))
    }

    pub(super) fn get_mut(&mut self, srqn: u32) -> Result<&mut Srq, VerbsError> {
        self.srqs
            .get_mut(&srqn)
            .ok_or(VerbsError::new(Status::NotFound, srqn))
    }

    /// QPs that use SRQ `srqn`.
    pub fn users(&self, srqn: u32) -> usize {
        self.attached.values().filter(|&&s| s == srqn).count()
    }

    /// SRQs of `pdn`.
    pub fn count_in_pd(&self, pdn: u32) -> usize {
        self.srqs.values().filter(|s| s.pdn == pdn).count()
    }

    /// QP `qpn` is gone.
    pub fn detach(&mut self, qpn: u32) {
        self.attached.remove(&qpn);
    }

    /// An unused SRQ number: they count up through 1 ..= [`MAX_SRQN`], skipping those in use.
    pub(super) fn free_number(&mut self) -> Option<u32> {
        (0..MAX_SRQN).find_map(|_| {
            self.next = if self.next >= MAX_SRQN {
                1
            } else {
                self.next + 1
            };
            (!self.srqs.contains_key(&self.next)).then_some(self.next)
        })
    }
}

/// WQEs posted to `wq` and not yet taken, by its doorbell.
pub(super) fn outstanding(wq: &WorkQueue, env: &Env) -> u32 {
    let posted = env.doorbells.read32(wq.slot).unwrap_or(wq.taken);
    posted.wrapping_sub(wq.taken)
}

impl SrqTable {
    /// The receive WQE the next message on `qp` would take, from its SRQ or its own
    /// receive queue; `None` if none is posted (the responder answers RNR).
    pub fn next_recv(&self, qp: &Qp, env: &Env) -> Option<Result<RecvOp, WqeError>> {
        let (wq, caps) = match self.of(qp.qpn) {
            Some(srqn) => {
                let srq = self.srqs.get(&srqn)?;
                (&srq.wq, &srq.caps)
            }
            None => (&qp.rq, &qp.caps),
        };
        (outstanding(wq, env) != 0).then(|| read_recv(wq, caps, env.r, wq.taken))
    }

    /// Consumes the WQE [`SrqTable::next_recv`] returned. On an SRQ whose limit is armed
    /// and which now holds fewer WQEs than the limit, disarms the limit and returns the
    /// SRQ's number: `SRQ_LIMIT_REACHED` is due.
    pub fn take_recv(&mut self, qp: &mut Qp, env: &Env) -> Option<u32> {
        let Some(srqn) = self.of(qp.qpn) else {
            qp.rq.taken = qp.rq.taken.wrapping_add(1);
            return None;
        };
        let srq = self.srqs.get_mut(&srqn)?;
        srq.wq.taken = srq.wq.taken.wrapping_add(1);
        if srq.limit != 0 && outstanding(&srq.wq, env) < srq.limit {
            srq.limit = 0;
            return Some(srqn);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srq_numbers_skip_those_in_use_and_wrap() {
        let mut t = SrqTable::default();
        assert_eq!(t.free_number(), Some(1));
        t.next = MAX_SRQN - 1;
        assert_eq!(t.free_number(), Some(MAX_SRQN));
        assert_eq!(t.free_number(), Some(1));
    }

    #[test]
    fn attachments_are_counted_per_srq() {
        let mut t = SrqTable::default();
        t.attached.insert(0x11, 1);
        t.attached.insert(0x12, 1);
        t.attached.insert(0x13, 2);
        assert_eq!((t.users(1), t.users(2), t.users(3)), (2, 1, 0));
        t.detach(0x11);
        assert_eq!(t.users(1), 1);
        assert_eq!(t.of(0x13), Some(2));
        assert_eq!(t.of(0x11), None);
    }
}
