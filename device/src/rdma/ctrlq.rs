//! Control queues: memory registration pipelined with the work that uses it
//! ([`rnic_abi::ctrlq`]).
//!
//! `RESERVE_MKEYS` hands out keys in the pending state ([`super::mr::MrTable::reserve`]);
//! a control WQE registers memory under one. Control WQEs run in posting order, each
//! reported on the queue's CQ. The requester holds a send WQE whose local SGE names a
//! pending key ([`waits_for_key`]), so a WRITE posted right behind (or even before) its
//! registration goes out once the registration ran, and fails with `LOC_PROT_ERR` if the
//! registration failed.

use std::collections::BTreeMap;

use rnic_abi::cmd::Status;
use rnic_abi::ctrlq::{
    ctrl_op, CreateCtrlqReq, CreateCtrlqResp, CtrlWqe, ReserveMkeysReq, ReserveMkeysResp,
    CTRLQ_CQE_QPN_BIT, CTRL_WQE_STRIDE, MAX_RESERVE,
};
use rnic_abi::doorbell::slot_offset;
use rnic_abi::verbs::{wc, Cqe, DoorbellSlot, ObjectReq, RegMrReq, WcStatus};
use zerocopy::FromZeros;

use super::mr::{Access, KeyError, MrTable};
use super::pages::PagedBuffer;
use super::qp::WorkQueue;
use super::wqe::SendOp;
use super::{decode, page_list_error, reply, Env, RdmaState, SlotOwner};
use crate::commands::Response;
use crate::resources::Resource;
use crate::roce::packet::Headers;

/// Control queues one function may have.
const MAX_CTRLQS: usize = 16;

/// Control WQEs one queue runs per engine pass, so that a long batch of registrations
/// does not hold up the data path.
const BUDGET: u32 = 16;

/// A control queue.
#[derive(Debug)]
pub struct Ctrlq {
    wq: WorkQueue,
    cqn: u32,
}

/// The control queues of a function.
#[derive(Debug, Default)]
pub struct CtrlqTable {
    queues: BTreeMap<u32, Ctrlq>,
}

impl CtrlqTable {
    fn free_number(&self) -> Option<u32> {
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

impl RdmaState {
    /// `CREATE_CTRLQ`.
    pub(super) fn create_ctrlq(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        let req: CreateCtrlqReq = decode(body)?;
        let n = req.entries;
        if n == 0 || !n.is_power_of_two() || n > self.limits.max_qp_wr || req.reserved != 0 {
            return Err(Response::error(Status::BadParam, n));
        }
        if !self.cqs.contains_key(&req.cqn) {
            return Err(Response::error(Status::NotFound, req.cqn));
        }
        let ring = PagedBuffer::load(
            &req.ring,
            0,
            u64::from(n) * u64::from(CTRL_WQE_STRIDE),
            env.r,
        )
        .map_err(page_list_error)?;
        let ctrlqn = self
            .ctrlqs
            .free_number()
            .ok_or(Response::error(Status::NoResources, 0))?;
        let (page, slot) = self.alloc_slot(req.doorbell_page, SlotOwner::Ctrlq(ctrlqn))?;
        env.doorbells.write32(slot_offset(page, slot), 0);
        if let Some(cq) = self.cqs.get_mut(&req.cqn) {
            cq.users += 1;
        }
        let wq = WorkQueue::new(ring, n, CTRL_WQE_STRIDE, slot_offset(page, slot));
        self.ctrlqs
            .queues
            .insert(ctrlqn, Ctrlq { wq, cqn: req.cqn });
        Ok(reply(&CreateCtrlqResp {
            ctrlqn,
            reserved: 0,
            doorbell: DoorbellSlot { page, slot },
        }))
    }

    /// `DESTROY_CTRLQ`: WQEs posted and not yet run are dropped, without completions.
    pub(super) fn destroy_ctrlq(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let q = self
            .ctrlqs
            .queues
            .remove(&req.handle)
            .ok_or(Response::error(Status::NotFound, req.handle))?;
        if let Some(cq) = self.cqs.get_mut(&q.cqn) {
            cq.users -= 1;
        }
        self.free_slots_of(SlotOwner::Ctrlq(req.handle));
        Ok(Response::ok(Vec::new()))
    }

    /// `RESERVE_MKEYS`.
    pub(super) fn reserve_mkeys(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ReserveMkeysReq = decode(body)?;
        if req.count == 0 || req.count > MAX_RESERVE {
            return Err(Response::error(Status::BadParam, req.count));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(Response::error(Status::NotFound, req.pdn));
        }
        self.charge(Resource::Mr, u64::from(req.count))?;
        let Some(keys) = self.mrs.reserve(req.pdn, req.count as usize) else {
            self.release(Resource::Mr, u64::from(req.count));
            return Err(Response::error(Status::NoResources, Resource::Mr.index()));
        };
        let mut resp = ReserveMkeysResp::new_zeroed();
        resp.count = req.count;
        resp.keys[..keys.len()].copy_from_slice(&keys);
        Ok(reply(&resp))
    }

    /// Runs what the control queues were given since the last look, up to [`BUDGET`] WQEs
    /// per queue. Returns whether anything ran.
    pub(super) fn run_ctrlqs(&mut self, env: &Env) -> bool {
        let mut progress = false;
        let numbers: Vec<u32> = self.ctrlqs.queues.keys().copied().collect();
        for ctrlqn in numbers {
            for _ in 0..BUDGET {
                let Some(q) = self.ctrlqs.queues.get_mut(&ctrlqn) else {
                    break;
                };
                let posted = env.doorbells.read32(q.wq.slot).unwrap_or(q.wq.taken);
                if posted == q.wq.taken {
                    break;
                }
                let at = q.wq.entry_offset(q.wq.taken);
                q.wq.taken = q.wq.taken.wrapping_add(1);
                let cqn = q.cqn;
                let mut wqe = CtrlWqe::new_zeroed();
                let (key, status) =
                    if q.wq
                        .ring
                        .read(env.r, at, zerocopy::IntoBytes::as_mut_bytes(&mut wqe))
                    {
                        (wqe.key, self.run_ctrl_wqe(&wqe, env))
                    } else {
                        (0, WcStatus::LocProtErr)
                    };
                let cqe = Cqe {
                    wr_id: wqe.wr_id,
                    byte_len: 0,
                    imm_or_inv: key,
                    qp_num: CTRLQ_CQE_QPN_BIT | ctrlqn,
                    src_qp: 0,
                    opcode: wc::REG_MR,
                    status: status as u8,
                    wc_flags: 0,
                    owner: 0,
                    vendor_err: 0,
                };
                self.complete(cqn, cqe, env);
                progress = true;
            }
        }
        progress
    }

    /// Runs one control WQE; the status of its completion.
    fn run_ctrl_wqe(&mut self, wqe: &CtrlWqe, env: &Env) -> WcStatus {
        if wqe.opcode != ctrl_op::REG_MR
            || wqe.flags != 0
            || wqe.reserved != 0
            || wqe.reserved2 != 0
            || wqe.reserved3 != 0
        {
            log::debug!("control WQE with opcode {} refused", wqe.opcode);
            return WcStatus::LocQpOpErr;
        }
        // Only a pending key takes a registration (not one that already has a region, nor
        // one whose registration failed).
        let Some(reservation) = self.mrs.reservation(wqe.key).filter(|r| !r.failed) else {
            log::debug!("control WQE names key {:#x}, which is not pending", wqe.key);
            return WcStatus::LocQpOpErr;
        };
        let req = RegMrReq {
            pdn: reservation.pdn,
            access: wqe.access,
            iova: wqe.iova,
            length: wqe.length,
            pages: wqe.pages,
        };
        match self.load_region(&req, env) {
            Ok(mr) => {
                self.mrs.fulfil(wqe.key, Some(mr));
                WcStatus::Success
            }
            Err(e) => {
                log::debug!(
                    "registration under key {:#x} failed ({:?}): the key fails its users",
                    wqe.key,
                    e.status
                );
                self.mrs.fulfil(wqe.key, None);
                WcStatus::LocProtErr
            }
        }
    }
}
