//! Shared receive queues (`rnic_abi::srq`): one receive ring that many RC QPs of a PD
//! take their receives from, in posting order, whichever QP a message arrives on.
//!
//! The responder asks [`RdmaState::next_recv`] for a QP's next receive and
//! [`RdmaState::take_recv`] to consume it; both go to the QP's own receive queue or to
//! its SRQ, so the transport stages do not care which it is. Which QP uses which SRQ is
//! kept here ([`SrqTable`]), not in the QP.

use std::collections::BTreeMap;

use rnic_abi::cmd::Status;
use rnic_abi::doorbell::slot_offset;
use rnic_abi::srq::{srq_attr, CreateSrqReq, CreateSrqResp, ModifySrqReq, QuerySrqResp, MAX_SRQN};
use rnic_abi::verbs::{event, rq_stride, CreateQpReq, DoorbellSlot, ObjectReq};

use super::pages::PagedBuffer;
use super::qp::{Qp, QpCaps, WorkQueue};
use super::wqe::{read_recv, RecvOp, WqeError};
use super::{decode, page_list_error, reply, Env, RdmaState, SlotOwner};
use crate::commands::Response;

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
    srqs: BTreeMap<u32, Srq>,
    /// QP number -> SRQ number.
    attached: BTreeMap<u32, u32>,
    next: u32,
}

impl SrqTable {
    /// The SRQ QP `qpn` takes its receives from, if any.
    pub fn of(&self, qpn: u32) -> Option<u32> {
        self.attached.get(&qpn).copied()
    }

    /// SRQ `srqn`, or the `NOT_FOUND` response.
    fn get(&self, srqn: u32) -> Result<&Srq, Response> {
        self.srqs
            .get(&srqn)
            .ok_or(Response::error(Status::NotFound, srqn))
    }

    fn get_mut(&mut self, srqn: u32) -> Result<&mut Srq, Response> {
        self.srqs
            .get_mut(&srqn)
            .ok_or(Response::error(Status::NotFound, srqn))
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
    fn free_number(&mut self) -> Option<u32> {
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
fn outstanding(wq: &WorkQueue, env: &Env) -> u32 {
    let posted = env.doorbells.read32(wq.slot).unwrap_or(wq.taken);
    posted.wrapping_sub(wq.taken)
}

impl RdmaState {
    /// `CREATE_SRQ`.
    pub(super) fn create_srq(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        let req: CreateSrqReq = decode(body)?;
        let n = req.entries;
        if n == 0 || !n.is_power_of_two() || n > self.limits.max_qp_wr || req.reserved != 0 {
            return Err(Response::error(Status::BadParam, n));
        }
        if req.max_sge == 0 || req.max_sge > self.limits.max_sge {
            return Err(Response::error(Status::BadParam, req.max_sge));
        }
        if req.srq_limit >= n {
            return Err(Response::error(Status::BadParam, req.srq_limit));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(Response::error(Status::NotFound, req.pdn));
        }
        let stride = rq_stride(req.max_sge);
        let ring = PagedBuffer::load(&req.ring, 0, u64::from(n) * u64::from(stride), env.r)
            .map_err(page_list_error)?;
        let srqn = self
            .srqs
            .free_number()
            .ok_or(Response::error(Status::NoResources, 0))?;
        let (page, slot) = self.alloc_slot(req.doorbell_page, SlotOwner::Srq(srqn))?;
        env.doorbells.write32(slot_offset(page, slot), 0);
        let srq = Srq {
            pdn: req.pdn,
            wq: WorkQueue::new(ring, n, stride, slot_offset(page, slot)),
            caps: QpCaps {
                max_send_sge: 0,
                max_recv_sge: req.max_sge,
                max_inline_data: 0,
            },
            limit: req.srq_limit,
        };
        self.srqs.srqs.insert(srqn, srq);
        Ok(reply(&CreateSrqResp {
            srqn,
            reserved: 0,
            doorbell: DoorbellSlot { page, slot },
        }))
    }

    /// `MODIFY_SRQ`: arms or disarms the limit.
    pub(super) fn modify_srq(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ModifySrqReq = decode(body)?;
        let srq = self.srqs.get_mut(req.srqn)?;
        // Resizing is not supported; nothing else is known.
        if req.attr_mask & !srq_attr::LIMIT != 0 {
            return Err(Response::error(Status::BadParam, req.attr_mask));
        }
        if req.attr_mask & srq_attr::LIMIT != 0 {
            if req.srq_limit >= srq.wq.entries {
                return Err(Response::error(Status::BadParam, req.srq_limit));
            }
            srq.limit = req.srq_limit;
        }
        Ok(Response::ok(Vec::new()))
    }

    /// `QUERY_SRQ`.
    pub(super) fn query_srq(&self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let srq = self.srqs.get(req.handle)?;
        Ok(reply(&QuerySrqResp {
            max_wr: srq.wq.entries,
            max_sge: srq.caps.max_recv_sge,
            srq_limit: srq.limit,
            consumed: srq.wq.taken,
        }))
    }

    /// `DESTROY_SRQ`: refused while a QP uses it.
    pub(super) fn destroy_srq(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        self.srqs.get(req.handle)?;
        if self.srqs.users(req.handle) > 0 {
            return Err(Response::error(Status::Busy, req.handle));
        }
        self.srqs.srqs.remove(&req.handle);
        self.free_slots_of(SlotOwner::Srq(req.handle));
        Ok(Response::ok(Vec::new()))
    }

    /// `CREATE_QP` with an SRQ: the SRQ must exist in the QP's PD, and the QP must ask for
    /// no receive queue of its own.
    pub(super) fn check_qp_srq(&self, req: &CreateQpReq) -> Result<(), Response> {
        let srqn = u32::from(req.srqn);
        let srq = self.srqs.get(srqn)?;
        if srq.pdn != req.pdn {
            return Err(Response::error(Status::BadParam, srqn));
        }
        if req.rq_entries != 0 || req.max_recv_sge != 0 || req.rq.count != 0 {
            return Err(Response::error(Status::BadParam, req.rq_entries));
        }
        Ok(())
    }

    /// The SRQ QP `qpn` takes its receives from, if any.
    pub fn srq_of(&self, qpn: u32) -> Option<u32> {
        self.srqs.of(qpn)
    }

    /// QP `qpn` takes its receives from SRQ `srqn` from now on.
    pub(super) fn attach_srq(&mut self, qpn: u32, srqn: u32) {
        self.srqs.attached.insert(qpn, srqn);
    }

    /// The receive WQE the next message on `qp` would take, from its SRQ or its own
    /// receive queue; `None` if none is posted (the responder answers RNR).
    pub fn next_recv(&self, qp: &Qp, env: &Env) -> Option<Result<RecvOp, WqeError>> {
        let (wq, caps) = match self.srqs.of(qp.qpn) {
            Some(srqn) => {
                let srq = self.srqs.srqs.get(&srqn)?;
                (&srq.wq, &srq.caps)
            }
            None => (&qp.rq, &qp.caps),
        };
        (outstanding(wq, env) != 0).then(|| read_recv(wq, caps, env.r, wq.taken))
    }

    /// Consumes the WQE [`RdmaState::next_recv`] returned. On an SRQ, posts
    /// `SRQ_LIMIT_REACHED` (once per arming) when fewer than the limit are left.
    pub fn take_recv(&mut self, qp: &mut Qp, env: &Env) {
        let Some(srqn) = self.srqs.of(qp.qpn) else {
            qp.rq.taken = qp.rq.taken.wrapping_add(1);
            return;
        };
        let Some(srq) = self.srqs.srqs.get_mut(&srqn) else {
            return;
        };
        srq.wq.taken = srq.wq.taken.wrapping_add(1);
        if srq.limit != 0 && outstanding(&srq.wq, env) < srq.limit {
            srq.limit = 0;
            self.post_event(env, event::SRQ_LIMIT_REACHED, srqn);
        }
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
