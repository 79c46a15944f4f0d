//! The commands of memory keys (docs/hardware-interface.md §7.4): regions (`REG_MR`,
//! `DEREG_MR`), indirect and pattern keys ([`crate::rdma::mkey::indirect`]), keys reserved
//! for registration later (`RESERVE_MKEYS`), and the control queues that register them
//! from WQEs ([`crate::rdma::ctrlq`]).

use rnic_abi::cmd::Status;
use rnic_abi::ctrlq::{
    ctrl_op, CreateCtrlqReq, CreateCtrlqResp, CtrlWqe, ReserveMkeysReq, ReserveMkeysResp,
    CTRLQ_CQE_QPN_BIT, CTRL_WQE_STRIDE, MAX_RESERVE,
};
use rnic_abi::doorbell::slot_offset;
use rnic_abi::mkey::{
    CreateIndirectKeyReq, CreatePatternKeyReq, KEY_ONE_SHOT_READ, MAX_INDIRECT_ENTRIES,
    MAX_PATTERN_REPEAT,
};
use rnic_abi::verbs::{
    wc, Cqe, DoorbellSlot, ObjectReq, RegMrReq, RegMrResp, Sge, WcStatus, ACCESS_ALL,
    ACCESS_LOCAL_WRITE, ACCESS_REG_MR, ACCESS_REMOTE_READ,
};
use zerocopy::{FromBytes, FromZeros};

use super::{check_mr_access, decode, page_list_error, reply};
use crate::rdma::ctrlq::{Ctrlq, BUDGET};
use crate::rdma::env::Env;
use crate::rdma::error::VerbsError;
use crate::rdma::mkey::indirect::{Grant, IndirectKey, IndirectTable, Layout};
use crate::rdma::mkey::mr::{Mr, MrTable};
use crate::rdma::mkey::pages::PagedBuffer;
use crate::rdma::mkey::{Access, KeyError};
use crate::rdma::wqe::WorkQueue;
use crate::rdma::{RdmaState, SlotOwner};
use crate::resources::Resource;

/// Checks that `key` is a valid direct key of `pdn` covering `[addr, addr + len)`.
fn check_target(
    mrs: &MrTable,
    pdn: u32,
    key: u32,
    addr: u64,
    len: u64,
    index: u32,
) -> Result<(), VerbsError> {
    if IndirectTable::owns(key) || len == 0 {
        return Err(VerbsError::new(Status::BadParam, index));
    }
    mrs.check(key, pdn, Access::LocalRead, addr, len)
        .map(drop)
        .map_err(|e| match e {
            KeyError::NoSuchKey => VerbsError::new(Status::NotFound, key),
            _ => VerbsError::new(Status::BadParam, index),
        })
}

impl RdmaState {
    /// Checks a registration and loads its pages, charging them: the region it describes.
    pub(super) fn load_region(&self, req: &RegMrReq, env: &Env) -> Result<Mr, VerbsError> {
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        check_mr_access(req.access, ACCESS_REG_MR)?;
        if req.length > self.limits.max_mr_size || req.iova.checked_add(req.length).is_none() {
            return Err(VerbsError::new(Status::BadParam, 0));
        }
        if req.pages.count > self.limits.max_mr_pages {
            return Err(VerbsError::new(Status::NoResources, req.pages.count));
        }
        let mem = if req.access & ACCESS_LOCAL_WRITE != 0 {
            env.w
        } else {
            env.r
        };
        let offset = req.iova % rnic_abi::PAGE_SIZE;
        let buffer =
            PagedBuffer::load(&req.pages, offset, req.length, mem).map_err(page_list_error)?;
        self.charge(Resource::MrPages, buffer.page_count() as u64)?;
        Ok(Mr {
            pdn: req.pdn,
            access: req.access,
            iova: req.iova,
            buffer,
            valid: true,
        })
    }

    /// `REG_MR`: a region of the PD, under a new key.
    pub(super) fn reg_mr(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: RegMrReq = decode(body)?;
        let mr = self.load_region(&req, env)?;
        let pages = mr.buffer.page_count() as u64;
        if let Err(e) = self.charge(Resource::Mr, 1) {
            self.release(Resource::MrPages, pages);
            return Err(e);
        }
        let Some(key) = self.mrs.insert(mr) else {
            self.release(Resource::MrPages, pages);
            self.release(Resource::Mr, 1);
            return Err(VerbsError::new(Status::NoResources, Resource::Mr.index()));
        };
        Ok(reply(&RegMrResp {
            lkey: key,
            rkey: key,
        }))
    }

    /// `DEREG_MR`: of a region, an indirect or pattern key, or a reserved key.
    pub(super) fn dereg_mr(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        if IndirectTable::owns(req.handle) {
            return self.destroy_indirect_key(req.handle);
        }
        // An indirect or pattern key names it: that key must go first.
        if self.mrs.indirect.references(req.handle) {
            return Err(VerbsError::new(Status::Busy, req.handle));
        }
        if self.dereg_kernel_key(req.handle)? {
            return Ok(Vec::new());
        }
        // A reserved key without a region (pending or failed): release the reservation;
        // WRs waiting for it fail with an access error.
        if self.mrs.unreserve(req.handle) {
            self.release(Resource::Mr, 1);
            return Ok(Vec::new());
        }
        // A memory window is bound to it: as the IB spec and rxe, the windows go first
        // (they may be invalidated, bound elsewhere, or deallocated). In-flight WRs that
        // still name the key fail with an access error.
        if self.mrs.windows.bound_to(req.handle) {
            return Err(VerbsError::new(Status::Busy, req.handle));
        }
        let mr = self
            .mrs
            .remove(req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
        self.release(Resource::MrPages, mr.buffer.page_count() as u64);
        self.release(Resource::Mr, 1);
        Ok(Vec::new())
    }

    /// `CREATE_INDIRECT_KEY`.
    pub(super) fn create_indirect_key(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let head = size_of::<CreateIndirectKeyReq>();
        let req: CreateIndirectKeyReq = decode(body.get(..head).unwrap_or(body))?;
        let n = req.num_entries;
        if n == 0 || n > MAX_INDIRECT_ENTRIES {
            return Err(VerbsError::new(Status::BadParam, n));
        }
        // A one-shot grant is for remote READ only.
        let grant = match req.flags {
            0 => Grant::Lasting,
            KEY_ONE_SHOT_READ if req.access == ACCESS_REMOTE_READ => Grant::OneShot,
            _ => return Err(VerbsError::new(Status::BadParam, req.flags)),
        };
        let entries = <[Sge]>::ref_from_bytes(&body[head..])
            .ok()
            .filter(|e| e.len() == n as usize)
            .ok_or(VerbsError::new(Status::BadParam, body.len() as u32))?;
        self.check_key_header(req.pdn, req.access)?;
        let mut list = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let len = u64::from(e.length);
            check_target(&self.mrs, req.pdn, e.lkey, e.addr, len, i as u32)?;
            list.push((e.lkey, e.addr, len));
        }
        self.add_indirect_key(req.pdn, req.access, Layout::List(list), grant)
    }

    /// `CREATE_PATTERN_KEY`.
    pub(super) fn create_pattern_key(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: CreatePatternKeyReq = decode(body)?;
        let (byte_count, repeat) = (u64::from(req.byte_count), u64::from(req.repeat));
        if byte_count == 0
            || repeat == 0
            || req.repeat > MAX_PATTERN_REPEAT
            || req.stride < byte_count
            || req.reserved != 0
        {
            return Err(VerbsError::new(Status::BadParam, 0));
        }
        self.check_key_header(req.pdn, req.access)?;
        // The blocks' span: from the first block's start to the last one's end.
        let span = req
            .stride
            .checked_mul(repeat - 1)
            .and_then(|s| s.checked_add(byte_count))
            .ok_or(VerbsError::new(Status::BadParam, 0))?;
        check_target(&self.mrs, req.pdn, req.base_key, req.base_addr, span, 0)?;
        let layout = Layout::Pattern {
            base_key: req.base_key,
            base_addr: req.base_addr,
            byte_count,
            stride: req.stride,
            repeat,
        };
        self.add_indirect_key(req.pdn, req.access, layout, Grant::Lasting)
    }

    /// The checks both commands make of the PD and the access flags.
    fn check_key_header(&self, pdn: u32, access: u32) -> Result<(), VerbsError> {
        if !self.pds.contains_key(&pdn) {
            return Err(VerbsError::new(Status::NotFound, pdn));
        }
        check_mr_access(access, ACCESS_ALL)
    }

    /// Adds an indirect or pattern key of `pdn` once its entries were checked.
    fn add_indirect_key(
        &mut self,
        pdn: u32,
        access: u32,
        layout: Layout,
        grant: Grant,
    ) -> Result<Vec<u8>, VerbsError> {
        if layout.length() > self.limits.max_mr_size {
            return Err(VerbsError::new(Status::BadParam, 0));
        }
        // An indirect key counts as an MR against the function's quota.
        self.charge(Resource::Mr, 1)?;
        let key = self.mrs.indirect.insert(IndirectKey {
            pdn,
            access,
            layout,
            valid: true,
            grant,
        });
        Ok(reply(&RegMrResp {
            lkey: key,
            rkey: key,
        }))
    }

    /// `DEREG_MR` of an indirect or pattern key.
    pub(super) fn destroy_indirect_key(&mut self, key: u32) -> Result<Vec<u8>, VerbsError> {
        self.mrs
            .indirect
            .remove(key)
            .ok_or(VerbsError::new(Status::NotFound, key))?;
        self.release(Resource::Mr, 1);
        Ok(Vec::new())
    }

    /// `RESERVE_MKEYS`.
    pub(super) fn reserve_mkeys(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ReserveMkeysReq = decode(body)?;
        if req.count == 0 || req.count > MAX_RESERVE {
            return Err(VerbsError::new(Status::BadParam, req.count));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        self.charge(Resource::Mr, u64::from(req.count))?;
        let Some(keys) = self.mrs.reserve(req.pdn, req.count as usize) else {
            self.release(Resource::Mr, u64::from(req.count));
            return Err(VerbsError::new(Status::NoResources, Resource::Mr.index()));
        };
        let mut resp = ReserveMkeysResp::new_zeroed();
        resp.count = req.count;
        resp.keys[..keys.len()].copy_from_slice(&keys);
        Ok(reply(&resp))
    }

    /// `CREATE_CTRLQ`.
    pub(super) fn create_ctrlq(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: CreateCtrlqReq = decode(body)?;
        let n = req.entries;
        if n == 0 || !n.is_power_of_two() || n > self.limits.max_qp_wr || req.reserved != 0 {
            return Err(VerbsError::new(Status::BadParam, n));
        }
        if !self.cqs.contains_key(&req.cqn) {
            return Err(VerbsError::new(Status::NotFound, req.cqn));
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
            .ok_or(VerbsError::new(Status::NoResources, 0))?;
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
    pub(super) fn destroy_ctrlq(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let q = self
            .ctrlqs
            .queues
            .remove(&req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
        if let Some(cq) = self.cqs.get_mut(&q.cqn) {
            cq.users -= 1;
        }
        self.free_slots_of(SlotOwner::Ctrlq(req.handle));
        Ok(Vec::new())
    }

    /// Runs what the control queues were given since the last look, up to [`BUDGET`] WQEs
    /// per queue. Returns whether anything ran.
    pub(in crate::rdma) fn run_ctrlqs(&mut self, env: &Env) -> bool {
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
