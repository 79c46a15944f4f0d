//! The SRQ commands (docs/hardware-interface.md §7.4, `rnic_abi::srq`): `CREATE_SRQ`,
//! `MODIFY_SRQ`, `QUERY_SRQ`, `DESTROY_SRQ`, `RESIZE_SRQ`, and a QP's attachment to an SRQ at
//! `CREATE_QP`.

use rnic_abi::cmd::Status;
use rnic_abi::doorbell::slot_offset;
use rnic_abi::srq::{
    srq_attr, CreateSrqReq, CreateSrqResp, ModifySrqReq, QuerySrqResp, ResizeSrqReq,
};
use rnic_abi::verbs::{rq_stride, CreateQpReq, DoorbellSlot, ObjectReq};

use super::{decode, page_list_error, reply};
use crate::rdma::env::Env;
use crate::rdma::error::VerbsError;
use crate::rdma::mkey::pages::PagedBuffer;
use crate::rdma::srq::{ResizeError, Srq};
use crate::rdma::wqe::{QpCaps, WorkQueue};
use crate::rdma::{RdmaState, SlotOwner};

impl RdmaState {
    /// `CREATE_SRQ`.
    pub(super) fn create_srq(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: CreateSrqReq = decode(body)?;
        let n = req.entries;
        if n == 0 || !n.is_power_of_two() || n > self.limits.max_qp_wr || req.reserved != 0 {
            return Err(VerbsError::new(Status::BadParam, n));
        }
        if req.max_sge == 0 || req.max_sge > self.limits.max_sge {
            return Err(VerbsError::new(Status::BadParam, req.max_sge));
        }
        if req.srq_limit >= n {
            return Err(VerbsError::new(Status::BadParam, req.srq_limit));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        let stride = rq_stride(req.max_sge);
        let ring = PagedBuffer::load(&req.ring, 0, u64::from(n) * u64::from(stride), env.r)
            .map_err(page_list_error)?;
        let srqn = self
            .srqs
            .free_number()
            .ok_or(VerbsError::new(Status::NoResources, 0))?;
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
    pub(super) fn modify_srq(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ModifySrqReq = decode(body)?;
        let srq = self.srqs.get_mut(req.srqn)?;
        // Resizing is RESIZE_SRQ, with the new ring; nothing else is known.
        if req.attr_mask & !srq_attr::LIMIT != 0 {
            return Err(VerbsError::new(Status::BadParam, req.attr_mask));
        }
        if req.attr_mask & srq_attr::LIMIT != 0 {
            if req.srq_limit >= srq.wq.entries {
                return Err(VerbsError::new(Status::BadParam, req.srq_limit));
            }
            srq.limit = req.srq_limit;
        }
        Ok(Vec::new())
    }

    /// `RESIZE_SRQ`: the SRQ moves to a new ring with the WQEs posted and not taken.
    pub(super) fn resize_srq(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: ResizeSrqReq = decode(body)?;
        let max = self.limits.max_qp_wr;
        let srq = self.srqs.get_mut(req.srqn)?;
        let n = req.entries;
        // The armed limit stays: the new size must be above it, as at CREATE_SRQ.
        if n == 0 || !n.is_power_of_two() || n > max || srq.limit >= n {
            return Err(VerbsError::new(Status::BadParam, n));
        }
        let len = u64::from(n) * u64::from(srq.wq.stride);
        let ring = PagedBuffer::load(&req.ring, 0, len, env.w).map_err(page_list_error)?;
        let posted = env.doorbells.read32(srq.wq.slot).unwrap_or(srq.wq.taken);
        srq.resize(ring, n, posted, env.r, env.w)
            .map_err(|e| match e {
                ResizeError::TooSmall | ResizeError::Unreachable => {
                    VerbsError::new(Status::BadParam, n)
                }
            })?;
        Ok(Vec::new())
    }

    /// `QUERY_SRQ`.
    pub(super) fn query_srq(&self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
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
    pub(super) fn destroy_srq(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        self.srqs.get(req.handle)?;
        if self.srqs.users(req.handle) > 0 {
            return Err(VerbsError::new(Status::Busy, req.handle));
        }
        self.srqs.srqs.remove(&req.handle);
        self.free_slots_of(SlotOwner::Srq(req.handle));
        Ok(Vec::new())
    }

    /// `CREATE_QP` with an SRQ: the SRQ must exist in the QP's PD, and the QP must ask for
    /// no receive queue of its own.
    pub(super) fn check_qp_srq(&self, req: &CreateQpReq) -> Result<(), VerbsError> {
        let srqn = u32::from(req.srqn);
        let srq = self.srqs.get(srqn)?;
        if srq.pdn != req.pdn {
            return Err(VerbsError::new(Status::BadParam, srqn));
        }
        if req.rq_entries != 0 || req.max_recv_sge != 0 || req.rq.count != 0 {
            return Err(VerbsError::new(Status::BadParam, req.rq_entries));
        }
        Ok(())
    }

    /// QP `qpn` takes its receives from SRQ `srqn` from now on.
    pub(super) fn attach_srq(&mut self, qpn: u32, srqn: u32) {
        self.srqs.attached.insert(qpn, srqn);
    }
}
