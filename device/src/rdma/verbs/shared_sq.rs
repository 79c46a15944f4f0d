//! The shared send queue commands (`rnic_abi::shared_sq`): `CREATE_SHARED_SQ`,
//! `DESTROY_SHARED_SQ`.

use std::collections::VecDeque;

use rnic_abi::cmd::Status;
use rnic_abi::doorbell::slot_offset;
use rnic_abi::shared_sq::{shared_sq_stride, CreateSharedSqReq, CreateSharedSqResp};
use rnic_abi::verbs::{DoorbellSlot, ObjectReq};

use super::{decode, page_list_error, reply};
use crate::rdma::env::Env;
use crate::rdma::error::VerbsError;
use crate::rdma::mkey::pages::PagedBuffer;
use crate::rdma::shared_sq::{SharedSq, MAX_SHARED_SQS};
use crate::rdma::wqe::{QpCaps, WorkQueue};
use crate::rdma::{RdmaState, SlotOwner};

impl RdmaState {
    /// `CREATE_SHARED_SQ`.
    pub(super) fn create_shared_sq(
        &mut self,
        body: &[u8],
        env: &Env,
    ) -> Result<Vec<u8>, VerbsError> {
        let req: CreateSharedSqReq = decode(body)?;
        let n = req.entries;
        if n == 0 || !n.is_power_of_two() || n > self.limits.max_qp_wr {
            return Err(VerbsError::new(Status::BadParam, n));
        }
        if req.max_send_sge > self.limits.max_sge {
            return Err(VerbsError::new(Status::BadParam, req.max_send_sge));
        }
        if req.max_inline_data > self.limits.max_inline_data {
            return Err(VerbsError::new(Status::BadParam, req.max_inline_data));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        if !self.cqs.contains_key(&req.cqn) {
            return Err(VerbsError::new(Status::NotFound, req.cqn));
        }
        let stride = shared_sq_stride(req.max_send_sge, req.max_inline_data);
        let ring = PagedBuffer::load(&req.ring, 0, u64::from(n) * u64::from(stride), env.r)
            .map_err(page_list_error)?;
        let ssqn = (1..=MAX_SHARED_SQS as u32)
            .find(|s| !self.shared_sqs.queues.contains_key(s))
            .ok_or(VerbsError::new(Status::NoResources, 0))?;
        let (page, slot) = self.alloc_slot(req.doorbell_page, SlotOwner::SharedSq(ssqn))?;
        env.doorbells.write32(slot_offset(page, slot), 0);
        if let Some(cq) = self.cqs.get_mut(&req.cqn) {
            cq.users += 1;
        }
        if let Some(pd) = self.pds.get_mut(&req.pdn) {
            pd.users += 1;
        }
        self.shared_sqs.created += 1;
        let q = SharedSq {
            generation: self.shared_sqs.created,
            pdn: req.pdn,
            wq: WorkQueue::new(ring, n, stride, slot_offset(page, slot)),
            caps: QpCaps {
                max_send_sge: req.max_send_sge,
                max_recv_sge: 0,
                max_inline_data: req.max_inline_data,
            },
            cqn: req.cqn,
            window: VecDeque::new(),
            retired: 0,
        };
        self.shared_sqs.queues.insert(ssqn, q);
        Ok(reply(&CreateSharedSqResp {
            ssqn,
            reserved: 0,
            doorbell: DoorbellSlot { page, slot },
        }))
    }

    /// `DESTROY_SHARED_SQ`. WQEs its QPs still hold run on; their completions go nowhere.
    pub(super) fn destroy_shared_sq(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let q = self
            .shared_sqs
            .queues
            .remove(&req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
        if let Some(cq) = self.cqs.get_mut(&q.cqn) {
            cq.users = cq.users.saturating_sub(1);
        }
        if let Some(pd) = self.pds.get_mut(&q.pdn) {
            pd.users = pd.users.saturating_sub(1);
        }
        self.free_slots_of(SlotOwner::SharedSq(req.handle));
        Ok(Vec::new())
    }
}
