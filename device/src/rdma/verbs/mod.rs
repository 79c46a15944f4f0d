//! The verbs commands of a function's RDMA engine (docs/hardware-interface.md §7.4): each
//! checks its request, changes [`RdmaState`] and answers with a body, or refuses with a
//! status and syndrome (§6.7) and changes nothing.
//!
//! [`RdmaState::execute`] dispatches an opcode to its handler; here are the objects
//! every other command builds on (the EQ, PDs, CQs) and what creating anything costs
//! (the quota, doorbell slots). The handlers of each kind of object are in the files
//! beside: `qp.rs`, `mkeys.rs` (regions, indirect and pattern keys, control queues, the
//! DMA key and fast-registration MRs),
//! `mw.rs` (memory windows), `srq.rs`, `shared_sq.rs`, `mcast.rs` (multicast groups).

mod kernel_keys;
mod mcast;
mod mkeys;
mod mw;
mod qp;
mod shared_sq;
mod srq;

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::doorbell::{self, slot_offset, SLOTS};
use rnic_abi::regs::NO_VECTOR;
use rnic_abi::verbs::{
    CreateCqReq, CreateCqResp, CreateEqReq, CreateEqResp, DoorbellSlot, ObjectReq, ObjectResp,
    ResizeCqReq,
};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::cq::{CompletionQueue, EventQueue, ResizeError};
use super::env::Env;
use super::error::VerbsError;
use super::mkey::pages::{PageListError, PagedBuffer};
use super::{Pd, RdmaState, SlotOwner};
use crate::resources::Resource;

pub(super) fn decode<T: FromBytes + KnownLayout + Immutable>(body: &[u8]) -> Result<T, VerbsError> {
    T::read_from_bytes(body).map_err(|_| VerbsError::new(Status::BadParam, body.len() as u32))
}

pub(super) fn reply<T: IntoBytes + Immutable>(value: &T) -> Vec<u8> {
    value.as_bytes().to_vec()
}

/// Checks `ACCESS_*` flags of a memory key: flags of `known` only (`ACCESS_ALL`, and for
/// a region also `ACCESS_MW_BIND`), and as ibverbs, remote write or atomic access needs
/// local write too.
pub(super) fn check_mr_access(access: u32, known: u32) -> Result<(), VerbsError> {
    if !super::mkey::valid_access(access, known) {
        return Err(VerbsError::new(Status::BadParam, access));
    }
    Ok(())
}

pub(super) fn page_list_error(e: PageListError) -> VerbsError {
    match e {
        PageListError::Unmapped => VerbsError::new(Status::DmaError, 0),
        PageListError::Invalid | PageListError::TooSmall => VerbsError::new(Status::BadParam, 0),
    }
}

impl RdmaState {
    /// Executes an RDMA command: the body of its reply, or why it was refused.
    pub fn execute(
        &mut self,
        opcode: Opcode,
        body: &[u8],
        env: &Env,
    ) -> Result<Vec<u8>, VerbsError> {
        match opcode {
            Opcode::CreateEq => self.create_eq(body, env),
            Opcode::DestroyEq => self.destroy_eq(body),
            Opcode::AllocPd => self.alloc_pd(body),
            Opcode::DeallocPd => self.dealloc_pd(body),
            Opcode::RegMr => self.reg_mr(body, env),
            Opcode::DeregMr => self.dereg_mr(body),
            Opcode::CreateIndirectKey => self.create_indirect_key(body),
            Opcode::CreatePatternKey => self.create_pattern_key(body),
            Opcode::AllocMw => self.alloc_mw(body),
            Opcode::DeallocMw => self.dealloc_mw(body),
            Opcode::RegDmaMr => self.reg_dma_mr(body),
            Opcode::AllocFastRegMr => self.alloc_fast_reg_mr(body),
            Opcode::CreateCq => self.create_cq(body, env),
            Opcode::DestroyCq => self.destroy_cq(body),
            Opcode::ResizeCq => self.resize_cq(body, env),
            Opcode::CreateQp => self.create_qp(body, env),
            Opcode::ModifyQp => self.modify_qp(body, env),
            Opcode::QueryQp => self.query_qp(body),
            Opcode::DestroyQp => self.destroy_qp(body, env),
            Opcode::AdoptQp => self.adopt_qp(body, env),
            Opcode::CreateSqWindow => self.create_sq_window(body, env),
            Opcode::AttachMcast => self.attach_mcast(body),
            Opcode::DetachMcast => self.detach_mcast(body),
            Opcode::CreateSrq => self.create_srq(body, env),
            Opcode::ModifySrq => self.modify_srq(body),
            Opcode::ResizeSrq => self.resize_srq(body, env),
            Opcode::QuerySrq => self.query_srq(body),
            Opcode::DestroySrq => self.destroy_srq(body),
            Opcode::SetDcKey => self.set_dc_key(body),
            Opcode::CreateCtrlq => self.create_ctrlq(body, env),
            Opcode::DestroyCtrlq => self.destroy_ctrlq(body),
            Opcode::ReserveMkeys => self.reserve_mkeys(body),
            Opcode::CreateSharedSq => self.create_shared_sq(body, env),
            Opcode::DestroySharedSq => self.destroy_shared_sq(body),
            // Admin commands never reach a function's RDMA engine (commands::execute
            // refuses them); the rest are not RDMA commands.
            _ => Err(VerbsError::new(Status::Internal, 0)),
        }
    }

    /// Charges `n` of `r` to the function's quota, or fails with `NoResources`.
    pub(super) fn charge(&self, r: Resource, n: u64) -> Result<(), VerbsError> {
        self.pool
            .charge(self.member, r, n)
            .map_err(|status| VerbsError::new(status, r.index()))
    }

    /// Gives `n` of `r` back to the function's quota.
    pub(super) fn release(&self, r: Resource, n: u64) {
        self.pool.release(self.member, r, n);
    }

    /// A free doorbell slot in `page` for `owner`, charging the page if it is the first
    /// slot taken in it.
    pub(super) fn alloc_slot(
        &mut self,
        page: u32,
        owner: SlotOwner,
    ) -> Result<(u32, u32), VerbsError> {
        if page >= doorbell::PAGES {
            return Err(VerbsError::new(Status::BadParam, page));
        }
        // The quota's doorbell pages are pages 0..n of the BAR.
        if page >= self.pool.quota(self.member).doorbell_pages {
            return Err(VerbsError::new(Status::NoResources, page));
        }
        let slot = (0..SLOTS)
            .find(|s| !self.slots.contains_key(&(page, *s)))
            .ok_or(VerbsError::new(Status::NoResources, page))?;
        if !self.page_in_use(page) {
            self.charge(Resource::DoorbellPages, 1)?;
        }
        self.slots.insert((page, slot), owner);
        if matches!(owner, SlotOwner::Sq(_) | SlotOwner::Rq(_)) {
            self.queue_slots_in_page[page as usize] += 1;
        }
        Ok((page, slot))
    }

    /// A doorbell slot of page `page` for Ethernet queue `id` (datasheet §15): the
    /// function's slots are one space, whoever uses them. Returns (page, slot).
    pub fn alloc_eth_slot(&mut self, page: u32, id: u32) -> Result<(u32, u32), VerbsError> {
        self.alloc_slot(page, SlotOwner::Eth(id))
    }

    /// Frees the slot of Ethernet queue `id`.
    pub fn free_eth_slot(&mut self, id: u32) {
        self.free_slots_of(SlotOwner::Eth(id));
    }

    /// Whether any slot of doorbell page `page` is taken.
    pub(super) fn page_in_use(&self, page: u32) -> bool {
        self.slots
            .range((page, 0)..=(page, u32::MAX))
            .next()
            .is_some()
    }

    /// Frees the slots of `owner`, and the doorbell pages left with none.
    pub(super) fn free_slots_of(&mut self, owner: SlotOwner) {
        let pages: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, o)| **o == owner)
            .map(|((p, _), _)| *p)
            .collect();
        self.slots.retain(|_, o| *o != owner);
        for &page in &pages {
            if matches!(owner, SlotOwner::Sq(_) | SlotOwner::Rq(_)) {
                self.queue_slots_in_page[page as usize] -= 1;
            }
        }
        for page in pages {
            if !self.page_in_use(page) {
                self.release(Resource::DoorbellPages, 1);
            }
        }
    }

    /// `CREATE_EQ`: the function's one event queue.
    pub(super) fn create_eq(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: CreateEqReq = decode(body)?;
        if self.eq.is_some() {
            return Err(VerbsError::new(Status::BadState, 0));
        }
        if req.entries < 2
            || !req.entries.is_power_of_two()
            || req.entries > self.limits.max_cqe
            || req.reserved != 0
        {
            return Err(VerbsError::new(Status::BadParam, req.entries));
        }
        if req.vector != NO_VECTOR && req.vector >= self.limits.msix_vectors {
            return Err(VerbsError::new(Status::BadParam, req.vector));
        }
        let ring = PagedBuffer::load(&req.ring, 0, u64::from(req.entries) * 16, env.w)
            .map_err(page_list_error)?;
        let (page, slot) = self.alloc_slot(req.doorbell_page, SlotOwner::Eq)?;
        env.doorbells.write32(slot_offset(page, slot), 0);
        let eqn = 1;
        self.eq = Some((
            eqn,
            EventQueue::new(ring, req.entries, slot_offset(page, slot), req.vector),
        ));
        Ok(reply(&CreateEqResp {
            eqn,
            reserved: 0,
            doorbell: DoorbellSlot { page, slot },
        }))
    }

    /// `DESTROY_EQ`.
    pub(super) fn destroy_eq(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        match &self.eq {
            Some((eqn, _)) if *eqn == req.handle => {
                self.eq = None;
                self.free_slots_of(SlotOwner::Eq);
                Ok(Vec::new())
            }
            _ => Err(VerbsError::new(Status::NotFound, req.handle)),
        }
    }

    /// `ALLOC_PD`.
    pub(super) fn alloc_pd(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        if !body.is_empty() {
            return Err(VerbsError::new(Status::BadParam, 0));
        }
        self.charge(Resource::Pd, 1)?;
        let pdn = self.next_pdn;
        self.next_pdn = self.next_pdn.wrapping_add(1).max(1);
        self.pds.insert(pdn, Pd::default());
        Ok(reply(&ObjectResp {
            handle: pdn,
            reserved: 0,
        }))
    }

    /// `DEALLOC_PD`: only of a PD that nothing uses.
    pub(super) fn dealloc_pd(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let pd = self
            .pds
            .get(&req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
        if pd.users > 0
            || self.mrs.count_in_pd(req.handle) > 0
            || self.srqs.count_in_pd(req.handle) > 0
        {
            return Err(VerbsError::new(Status::Busy, req.handle));
        }
        self.pds.remove(&req.handle);
        self.release(Resource::Pd, 1);
        Ok(Vec::new())
    }

    /// `CREATE_CQ`.
    pub(super) fn create_cq(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: CreateCqReq = decode(body)?;
        if req.entries < 2 || !req.entries.is_power_of_two() || req.entries > self.limits.max_cqe {
            return Err(VerbsError::new(Status::BadParam, req.entries));
        }
        let ring = PagedBuffer::load(&req.ring, 0, u64::from(req.entries) * 32, env.w)
            .map_err(page_list_error)?;
        let cqn = self.next_cqn;
        self.charge(Resource::Cq, 1)?;
        let (page, slot) = self
            .alloc_slot(req.doorbell_page, SlotOwner::Cq(cqn))
            .inspect_err(|_| self.release(Resource::Cq, 1))?;
        self.next_cqn = self.next_cqn.wrapping_add(1).max(1);
        let at = slot_offset(page, slot);
        env.doorbells.write32(at, 0);
        env.doorbells.write32(at + 4, 0);
        self.cqs
            .insert(cqn, CompletionQueue::new(ring, req.entries, at));
        Ok(reply(&CreateCqResp {
            cqn,
            reserved: 0,
            doorbell: DoorbellSlot { page, slot },
        }))
    }

    /// `RESIZE_CQ`: the CQ moves to a new ring with its unconsumed completions.
    pub(super) fn resize_cq(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: ResizeCqReq = decode(body)?;
        let cq = self
            .cqs
            .get_mut(&req.cqn)
            .ok_or(VerbsError::new(Status::NotFound, req.cqn))?;
        if req.entries < 2 || !req.entries.is_power_of_two() || req.entries > self.limits.max_cqe {
            return Err(VerbsError::new(Status::BadParam, req.entries));
        }
        let ring = PagedBuffer::load(&req.ring, 0, u64::from(req.entries) * 32, env.w)
            .map_err(page_list_error)?;
        let consumed = env.doorbells.read32(cq.slot()).unwrap_or(0);
        cq.resize(ring, req.entries, consumed, env.w)
            .map_err(|e| match e {
                ResizeError::InError => VerbsError::new(Status::BadState, req.cqn),
                ResizeError::TooSmall | ResizeError::Unreachable => {
                    VerbsError::new(Status::BadParam, req.entries)
                }
            })?;
        Ok(Vec::new())
    }

    /// `DESTROY_CQ`: only of a CQ that nothing uses.
    pub(super) fn destroy_cq(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let cq = self
            .cqs
            .get(&req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
        if cq.users > 0 {
            return Err(VerbsError::new(Status::Busy, req.handle));
        }
        self.cqs.remove(&req.handle);
        self.free_slots_of(SlotOwner::Cq(req.handle));
        self.release(Resource::Cq, 1);
        Ok(Vec::new())
    }
}
