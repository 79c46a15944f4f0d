//! The RDMA engine of one function: its objects (EQ, PDs, MRs, CQs, QPs), the commands
//! that create them, and the transport stages that move data between QPs as RoCEv2
//! packets, in the manner of Linux rxe:
//!
//! - [`requester`]: turns send WQEs into request packets;
//! - [`responder`]: executes incoming requests and answers them;
//! - [`completer`]: matches acknowledgements and responses to requests, retries, and
//!   completes send WQEs;
//! - [`recv`]: validates every incoming packet and hands it to the responder or completer;
//! - [`switch`]: carries packets between the functions of one device.

pub mod answers;
pub mod completer;
pub mod cq;
pub mod ctrlq;
pub mod dc;
pub mod handover;
pub mod indirect;
pub mod mmio;
pub mod mr;
pub mod pages;
pub mod qp;
pub mod recv;
pub mod requester;
pub mod responder;
pub mod sched;
pub mod session;
pub mod shared_sq;
pub mod srq;
pub mod ud;
pub mod wire;
pub mod wqe;

use std::collections::BTreeMap;
use std::time::Instant;

use rnic_abi::cmd::{Limits, Opcode, Status};
use rnic_abi::doorbell::{self, slot_offset, SLOTS};
use rnic_abi::regs::NO_VECTOR;
use rnic_abi::verbs::{
    event, rq_stride, sq_stride, Cqe, CreateCqReq, CreateCqResp, CreateEqReq, CreateEqResp,
    CreateQpReq, CreateQpResp, DoorbellSlot, ModifyQpReq, ObjectReq, ObjectResp, QpAttr, QpState,
    QueryQpResp, RegMrReq, RegMrResp, ACCESS_ALL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_WRITE, QPT_RC,
};
use vm_memory::GuestMemoryMmap;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::commands::Response;
use crate::doorbell::DoorbellBar;
use crate::fabric::frame::Frame;
use crate::fabric::held::Payload;
use crate::fabric::train::Run;
use crate::identity::FunctionId;
use crate::resources::{Resource, ResourcePool};
use cq::{CompletionQueue, EventQueue, Posted};
use mr::{Mr, MrTable};
use pages::{PageListError, PagedBuffer};
use qp::{Qp, QpCaps, WorkQueue};

/// The DMA views and doorbells a piece of RDMA work runs against.
pub struct Env<'a> {
    /// Memory the device may read (a snapshot: a train's payload may hold on to it, see
    /// [`crate::fabric::held`]).
    pub r: &'a crate::dma::MemorySnapshot,
    /// Memory the device may write.
    pub w: &'a GuestMemoryMmap,
    /// The function's doorbell BAR.
    pub doorbells: &'a DoorbellBar,
}

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
    pub drops: recv::DropCounters,
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
    dc: dc::DcTable,
    ctrlqs: ctrlq::CtrlqTable,
    shared_sqs: shared_sq::SharedSqTable,
    /// The sessions (UDP source ports) the PF gave the function.
    pub sessions: session::Sessions,
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
    /// The drops explained so far (see [`recv::explain`]).
    explained: recv::Explained,
}

use rnic_abi::verbs::FIRST_QPN;

fn decode<T: FromBytes + KnownLayout + Immutable>(body: &[u8]) -> Result<T, Response> {
    T::read_from_bytes(body).map_err(|_| Response::error(Status::BadParam, body.len() as u32))
}

fn reply<T: IntoBytes + Immutable>(value: &T) -> Response {
    Response::ok(value.as_bytes().to_vec())
}

/// Checks `ACCESS_*` flags of a memory key: known flags only, and as ibverbs, remote write
/// or atomic access needs local write too.
fn check_mr_access(access: u32) -> Result<(), Response> {
    let needs_local_write = access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0;
    if access & !ACCESS_ALL != 0 || (needs_local_write && access & ACCESS_LOCAL_WRITE == 0) {
        return Err(Response::error(Status::BadParam, access));
    }
    Ok(())
}

fn page_list_error(e: PageListError) -> Response {
    match e {
        PageListError::Unmapped => Response::error(Status::DmaError, 0),
        PageListError::Invalid | PageListError::TooSmall => Response::error(Status::BadParam, 0),
    }
}

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
            dc: Default::default(),
            ctrlqs: Default::default(),
            shared_sqs: Default::default(),
            sessions: Default::default(),
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

    /// Charges `n` of `r` to the function's quota, or fails with `NoResources`.
    fn charge(&self, r: Resource, n: u64) -> Result<(), Response> {
        self.pool
            .charge(self.member, r, n)
            .map_err(|status| Response::error(status, r.index()))
    }

    fn release(&self, r: Resource, n: u64) {
        self.pool.release(self.member, r, n);
    }

    /// The EQ's MSI-X vector, if it has one.
    pub fn eq_vector(&self) -> Option<u16> {
        self.eq
            .as_ref()
            .and_then(|(_, eq)| u16::try_from(eq.vector).ok())
            .filter(|&v| u32::from(v) != NO_VECTOR)
    }

    /// Executes an RDMA command.
    pub fn execute(&mut self, opcode: Opcode, body: &[u8], env: &Env) -> Response {
        let result = match opcode {
            Opcode::CreateEq => self.create_eq(body, env),
            Opcode::DestroyEq => self.destroy_eq(body),
            Opcode::AllocPd => self.alloc_pd(body),
            Opcode::DeallocPd => self.dealloc_pd(body),
            Opcode::RegMr => self.reg_mr(body, env),
            Opcode::DeregMr => self.dereg_mr(body),
            Opcode::CreateIndirectKey => self.create_indirect_key(body),
            Opcode::CreatePatternKey => self.create_pattern_key(body),
            Opcode::CreateCq => self.create_cq(body, env),
            Opcode::DestroyCq => self.destroy_cq(body),
            Opcode::CreateQp => self.create_qp(body, env),
            Opcode::ModifyQp => self.modify_qp(body, env),
            Opcode::QueryQp => self.query_qp(body),
            Opcode::DestroyQp => self.destroy_qp(body, env),
            Opcode::AdoptQp => self.adopt_qp(body, env),
            Opcode::CreateSqWindow => self.create_sq_window(body, env),
            Opcode::CreateSrq => self.create_srq(body, env),
            Opcode::ModifySrq => self.modify_srq(body),
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
            _ => Err(Response::error(Status::Internal, 0)),
        };
        result.unwrap_or_else(|e| e)
    }

    fn alloc_slot(&mut self, page: u32, owner: SlotOwner) -> Result<(u32, u32), Response> {
        if page >= doorbell::PAGES {
            return Err(Response::error(Status::BadParam, page));
        }
        // The quota's doorbell pages are pages 0..n of the BAR.
        if page >= self.pool.quota(self.member).doorbell_pages {
            return Err(Response::error(Status::NoResources, page));
        }
        let slot = (0..SLOTS)
            .find(|s| !self.slots.contains_key(&(page, *s)))
            .ok_or(Response::error(Status::NoResources, page))?;
        if !self.page_in_use(page) {
            self.charge(Resource::DoorbellPages, 1)?;
        }
        self.slots.insert((page, slot), owner);
        if matches!(owner, SlotOwner::Sq(_) | SlotOwner::Rq(_)) {
            self.queue_slots_in_page[page as usize] += 1;
        }
        Ok((page, slot))
    }

    fn page_in_use(&self, page: u32) -> bool {
        self.slots
            .range((page, 0)..=(page, u32::MAX))
            .next()
            .is_some()
    }

    fn free_slots_of(&mut self, owner: SlotOwner) {
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

    fn create_eq(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        let req: CreateEqReq = decode(body)?;
        if self.eq.is_some() {
            return Err(Response::error(Status::BadState, 0));
        }
        if req.entries < 2
            || !req.entries.is_power_of_two()
            || req.entries > self.limits.max_cqe
            || req.reserved != 0
        {
            return Err(Response::error(Status::BadParam, req.entries));
        }
        if req.vector != NO_VECTOR && req.vector >= self.limits.msix_vectors {
            return Err(Response::error(Status::BadParam, req.vector));
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

    fn destroy_eq(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        match &self.eq {
            Some((eqn, _)) if *eqn == req.handle => {
                self.eq = None;
                self.free_slots_of(SlotOwner::Eq);
                Ok(Response::ok(Vec::new()))
            }
            _ => Err(Response::error(Status::NotFound, req.handle)),
        }
    }

    fn alloc_pd(&mut self, body: &[u8]) -> Result<Response, Response> {
        if !body.is_empty() {
            return Err(Response::error(Status::BadParam, 0));
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

    fn dealloc_pd(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let pd = self
            .pds
            .get(&req.handle)
            .ok_or(Response::error(Status::NotFound, req.handle))?;
        if pd.users > 0
            || self.mrs.count_in_pd(req.handle) > 0
            || self.srqs.count_in_pd(req.handle) > 0
        {
            return Err(Response::error(Status::Busy, req.handle));
        }
        self.pds.remove(&req.handle);
        self.release(Resource::Pd, 1);
        Ok(Response::ok(Vec::new()))
    }

    /// Checks a registration and loads its pages, charging them: the region it describes.
    fn load_region(&self, req: &RegMrReq, env: &Env) -> Result<Mr, Response> {
        if !self.pds.contains_key(&req.pdn) {
            return Err(Response::error(Status::NotFound, req.pdn));
        }
        check_mr_access(req.access)?;
        if req.length > self.limits.max_mr_size || req.iova.checked_add(req.length).is_none() {
            return Err(Response::error(Status::BadParam, 0));
        }
        if req.pages.count > self.limits.max_mr_pages {
            return Err(Response::error(Status::NoResources, req.pages.count));
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

    fn reg_mr(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
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
            return Err(Response::error(Status::NoResources, Resource::Mr.index()));
        };
        Ok(reply(&RegMrResp {
            lkey: key,
            rkey: key,
        }))
    }

    fn dereg_mr(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        if indirect::IndirectTable::owns(req.handle) {
            return self.destroy_indirect_key(req.handle);
        }
        // An indirect or pattern key names it: that key must go first.
        if self.mrs.indirect.references(req.handle) {
            return Err(Response::error(Status::Busy, req.handle));
        }
        // A reserved key without a region (pending or failed): release the reservation;
        // WRs waiting for it fail with an access error.
        if self.mrs.unreserve(req.handle) {
            self.release(Resource::Mr, 1);
            return Ok(Response::ok(Vec::new()));
        }
        // rnic has no memory windows, the only thing that makes a deregistration wait in
        // the IB spec; in-flight WRs that still name the key fail with an access error.
        let mr = self
            .mrs
            .remove(req.handle)
            .ok_or(Response::error(Status::NotFound, req.handle))?;
        self.release(Resource::MrPages, mr.buffer.page_count() as u64);
        self.release(Resource::Mr, 1);
        Ok(Response::ok(Vec::new()))
    }

    fn create_cq(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        let req: CreateCqReq = decode(body)?;
        if req.entries < 2 || !req.entries.is_power_of_two() || req.entries > self.limits.max_cqe {
            return Err(Response::error(Status::BadParam, req.entries));
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

    fn destroy_cq(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let cq = self
            .cqs
            .get(&req.handle)
            .ok_or(Response::error(Status::NotFound, req.handle))?;
        if cq.users > 0 {
            return Err(Response::error(Status::Busy, req.handle));
        }
        self.cqs.remove(&req.handle);
        self.free_slots_of(SlotOwner::Cq(req.handle));
        self.release(Resource::Cq, 1);
        Ok(Response::ok(Vec::new()))
    }

    fn create_qp(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        let req: CreateQpReq = decode(body)?;
        let bad = |what: u32| Err(Response::error(Status::BadParam, what));
        let known = [
            QPT_RC,
            rnic_abi::ud::QPT_UD,
            rnic_abi::dc::QPT_DCI,
            rnic_abi::dc::QPT_DCT,
        ];
        if !known.contains(&req.qp_type) {
            return bad(u32::from(req.qp_type));
        }
        // On an SRQ the QP has no receive queue of its own (see `srq`).
        let own_rq = req.srqn == 0;
        if !own_rq {
            self.check_qp_srq(&req)?;
        }
        for n in std::iter::once(req.sq_entries).chain(own_rq.then_some(req.rq_entries)) {
            if n == 0 || !n.is_power_of_two() || n > self.limits.max_qp_wr {
                return bad(n);
            }
        }
        if req.max_send_sge > self.limits.max_sge
            || req.max_recv_sge > self.limits.max_sge
            || req.max_inline_data > self.limits.max_inline_data
        {
            return bad(req.max_send_sge.max(req.max_recv_sge));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(Response::error(Status::NotFound, req.pdn));
        }
        for cqn in [req.send_cqn, req.recv_cqn] {
            if !self.cqs.contains_key(&cqn) {
                return Err(Response::error(Status::NotFound, cqn));
            }
        }
        let sq_stride = sq_stride(req.max_send_sge, req.max_inline_data);
        let rq_stride = rq_stride(req.max_recv_sge);
        let sq_ring = PagedBuffer::load(
            &req.sq,
            0,
            u64::from(req.sq_entries) * u64::from(sq_stride),
            env.r,
        )
        .map_err(page_list_error)?;
        let rq_ring = if own_rq {
            PagedBuffer::load(
                &req.rq,
                0,
                u64::from(req.rq_entries) * u64::from(rq_stride),
                env.r,
            )
            .map_err(page_list_error)?
        } else {
            PagedBuffer::default()
        };
        // After a wrap, numbers still in use are skipped (there are fewer QPs than numbers).
        let next = |q: u32| if q >= 0xFF_FFFF { FIRST_QPN } else { q + 1 };
        let mut qpn = self.next_qpn;
        while self.qps.contains_key(&qpn) || self.departed.contains(&qpn) {
            qpn = next(qpn);
        }
        self.charge(Resource::Qp, 1)?;
        let sq_slot = self
            .alloc_slot(req.doorbell_page, SlotOwner::Sq(qpn))
            .inspect_err(|_| self.release(Resource::Qp, 1))?;
        let rq_slot = match self.alloc_slot(req.doorbell_page, SlotOwner::Rq(qpn)) {
            Ok(s) => s,
            Err(e) => {
                self.free_slots_of(SlotOwner::Sq(qpn));
                self.release(Resource::Qp, 1);
                return Err(e);
            }
        };
        self.next_qpn = next(qpn);
        for (page, slot) in [sq_slot, rq_slot] {
            env.doorbells.write32(slot_offset(page, slot), 0);
        }
        let work_queue = |ring, entries, stride, (page, slot)| {
            WorkQueue::new(ring, entries, stride, slot_offset(page, slot))
        };
        let qp = Qp {
            qpn,
            pdn: req.pdn,
            send_cqn: req.send_cqn,
            recv_cqn: req.recv_cqn,
            sq_sig_all: req.sq_sig_all != 0,
            state: QpState::Reset,
            attr: QpAttr::default(),
            caps: QpCaps {
                max_send_sge: req.max_send_sge,
                max_recv_sge: req.max_recv_sge,
                max_inline_data: req.max_inline_data,
            },
            sq: work_queue(sq_ring, req.sq_entries, sq_stride, sq_slot),
            // One (empty) entry on an SRQ: never read, but never a division by zero.
            rq: work_queue(rq_ring, req.rq_entries.max(1), rq_stride, rq_slot),
            sq_slot,
            req: Default::default(),
            resp: Default::default(),
            home: None,
        };
        for cqn in [req.send_cqn, req.recv_cqn] {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.users += 1;
            }
        }
        if let Some(pd) = self.pds.get_mut(&req.pdn) {
            pd.users += 1;
        }
        self.qps.insert(qpn, Box::new(qp));
        match req.qp_type {
            rnic_abi::ud::QPT_UD => self.ud.add(qpn),
            rnic_abi::dc::QPT_DCI => self.dc.add_dci(qpn),
            rnic_abi::dc::QPT_DCT => self.dc.add_dct(qpn),
            _ => {}
        }
        if !own_rq {
            self.attach_srq(qpn, u32::from(req.srqn));
        }
        Ok(reply(&CreateQpResp {
            qpn,
            reserved: 0,
            sq_doorbell: DoorbellSlot {
                page: sq_slot.0,
                slot: sq_slot.1,
            },
            rq_doorbell: DoorbellSlot {
                page: rq_slot.0,
                slot: rq_slot.1,
            },
        }))
    }

    fn modify_qp(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        // A UD QP's Q_Key follows the request (see `ud`).
        let (body, qkey) = ud::split_modify(body)?;
        let req: ModifyQpReq = decode(body)?;
        let is_ud = self.ud.qkey(req.qpn).is_some();
        let qp = self
            .qps
            .get_mut(&req.qpn)
            .ok_or(Response::error(Status::NotFound, req.qpn))?;
        let table = if is_ud {
            ud::transition
        } else {
            qp::transition
        };
        let target = qp::check_modify_with(
            table,
            qp.state,
            req.attr_mask,
            &req.attr,
            self.limits.max_qp_rd_atom,
        )
        .map_err(|e| match e {
            qp::ModifyError::BadTransition => Response::error(Status::BadState, qp.state as u32),
            qp::ModifyError::BadAttr(bit) => Response::error(Status::BadParam, bit),
        })?;
        qp::apply(&mut qp.attr, req.attr_mask, &req.attr);
        if let Some(qkey) = qkey {
            let qpn = req.qpn;
            self.set_qkey(qpn, qkey);
        }
        let Some(qp) = self.qps.get_mut(&req.qpn) else {
            return Err(Response::error(Status::Internal, req.qpn));
        };
        let from = qp.state;
        qp.state = target;
        qp.attr.qp_state = target as u8;
        match target {
            QpState::Reset => {
                // A WQE left in the MMIO window belongs to the numbering that ends here.
                if let Some(w) = qp.sq.window {
                    env.doorbells.write32(
                        w + rnic_abi::mmio::WINDOW_STATE,
                        rnic_abi::mmio::WINDOW_EMPTY,
                    );
                }
                qp.sq.taken = 0;
                qp.rq.taken = 0;
                let ops = std::mem::take(&mut qp.req.ops);
                qp.req = Default::default();
                qp.resp = Default::default();
                // Shared send queue entries it held complete there, flushed.
                let qpn = req.qpn;
                self.abandon_shared(&ops, qpn, env);
            }
            QpState::Rtr if from == QpState::Init => qp.resp.start(qp.attr.rq_psn),
            QpState::Rts if from == QpState::Rtr => {
                qp.req.start(qp.attr.sq_psn, &qp.attr);
                // The send queue starts where the driver's producer index is now: WQEs
                // announced before RTS are not work requests (see `requester::run`) and
                // never run.
                qp.sq.taken = env.doorbells.read32(qp.sq.slot).unwrap_or(qp.sq.taken);
            }
            QpState::Err if from != QpState::Err => {
                let qpn = req.qpn;
                self.flush_qp(qpn, env);
            }
            QpState::Sqd if from != QpState::Sqd => {
                qp.req.drained_reported = false;
                let qpn = req.qpn;
                self.report_drained(qpn, env);
            }
            _ => {}
        }
        // A reset clears the timers; RTS may find work queued.
        self.reschedule(req.qpn);
        Ok(Response::ok(Vec::new()))
    }

    fn query_qp(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let qp = self
            .qps
            .get(&req.handle)
            .ok_or(Response::error(Status::NotFound, req.handle))?;
        // As rxe reports them: the PSNs the transport is at, not the ones it started from.
        let mut attr = qp.attr;
        if matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            attr.sq_psn = qp.req.next_psn;
        }
        if matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            attr.rq_psn = qp.resp.epsn;
        }
        Ok(reply(&QueryQpResp {
            attr,
            sq_consumed: qp.sq.taken,
            rq_consumed: qp.rq.taken,
        }))
    }

    fn destroy_qp(&mut self, body: &[u8], env: &Env) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let qp = self
            .qps
            .remove(&req.handle)
            .ok_or(Response::error(Status::NotFound, req.handle))?;
        self.abandon_shared(&qp.req.ops, qp.qpn, env);
        for cqn in [qp.send_cqn, qp.recv_cqn] {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.users = cq.users.saturating_sub(1);
            }
        }
        if let Some(pd) = self.pds.get_mut(&qp.pdn) {
            pd.users = pd.users.saturating_sub(1);
        }
        self.free_slots_of(SlotOwner::Sq(qp.qpn));
        self.free_slots_of(SlotOwner::Rq(qp.qpn));
        self.free_slots_of(SlotOwner::Window(qp.qpn));
        self.srqs.detach(qp.qpn);
        self.ud.remove(qp.qpn);
        self.dc.remove(qp.qpn);
        self.schedule.forget(qp.qpn);
        self.release(Resource::Qp, 1);
        Ok(Response::ok(Vec::new()))
    }

    /// Posts an async event to the EQ.
    pub fn post_event(&mut self, env: &Env, event_type: u8, object: u32) {
        if let Some((_, eq)) = &mut self.eq {
            if eq.post(env.w, env.doorbells, event_type, object) {
                self.eq_signal = true;
            }
        }
    }

    /// The QP numbers whose send or receive doorbells were rung since the last look,
    /// taking the rung bits (the device only ever clears them).
    pub fn rung_send_queues(&self, doorbells: &DoorbellBar) -> Vec<u32> {
        let mut rung = Vec::new();
        let pages = (0..doorbell::PAGES).filter(|&p| self.queue_slots_in_page[p as usize] > 0);
        for page in pages {
            let base = u64::from(page) * rnic_abi::PAGE_SIZE + doorbell::RUNG_BITMAP;
            for word in 0..SLOTS.div_ceil(32) {
                let at = base + u64::from(word) * 4;
                if doorbells.read32(at).unwrap_or(0) == 0 {
                    continue;
                }
                let bits = doorbells.swap32(at, 0).unwrap_or(0);
                for bit in 0..32 {
                    if bits & (1 << bit) != 0 {
                        if let Some(SlotOwner::Sq(qpn) | SlotOwner::Rq(qpn)) =
                            self.slots.get(&(page, word * 32 + bit))
                        {
                            rung.push(*qpn);
                        }
                    }
                }
            }
        }
        rung
    }

    /// Flushes a QP's work: every send WQE not yet completed and every posted receive WQE
    /// completes with `WR_FLUSH_ERR`.
    pub fn flush_qp(&mut self, qpn: u32, env: &Env) {
        if let Some(mut qp) = self.qps.remove(&qpn) {
            completer::flush_queues(self, &mut qp, env);
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
                    || qp
                        .req
                        .ops
                        .iter()
                        .any(|o| o.state == requester::OpState::Queued);
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

    /// Does the RDMA work of the function: validates and dispatches `frames`, runs the
    /// requester of every QP whose send doorbell was rung or that has work pending, and
    /// fires due timers. Frames to send are left in `wire.out`. Returns whether anything
    /// happened.
    pub fn poll(
        &mut self,
        env: &Env,
        frames: impl IntoIterator<Item = Frame>,
        wire: &mut wire::Wire,
        now: Instant,
    ) -> bool {
        let mut progress = false;
        // The QPs that received frames: only they can owe an ACK.
        let mut received = Vec::new();
        for frame in frames {
            progress = true;
            self.deliver(&frame, env, wire, now, &mut received);
            wire.recycle(frame.bytes);
        }
        if progress {
            // One ACK for what arrived together (see `responder::flush_ack`).
            let before = wire.out.len();
            received.sort_unstable();
            received.dedup();
            for qpn in received {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    responder::flush_ack(qp, wire);
                }
            }
            self.counters.tx_packets += wire.packets_since(before);
        }
        // Shared send queues hand their WQEs to their QPs first, which then run below.
        progress |= self.run_shared_sqs(env);
        let mut runnable: Vec<u32> = self.rung_send_queues(env.doorbells);
        progress |= !runnable.is_empty();
        // QPs with queued ops (behind a fence or the READ window, or due a resend) and
        // QPs whose timer is due also get a turn.
        self.schedule.due(now, &mut runnable);
        runnable.sort_unstable();
        runnable.dedup();
        for qpn in runnable {
            let Some(mut qp) = self.qps.remove(&qpn) else {
                continue;
            };
            completer::on_timer(self, &mut qp, env, now);
            // Messages that name a session group get their session before their first
            // packet: take new WQEs now (the requester would take them itself, and hold
            // one it takes later until the next pass gives it its session).
            let sends = !matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr);
            if sends && self.ud.qkey(qpn).is_none() {
                if !self.sessions.ports().is_empty() {
                    requester::fetch(&mut qp, env);
                }
                self.sessions.assign(&mut qp.req.ops);
            }
            let before = wire.out.len();
            let mut retransmits = 0;
            let ran = match self.ud.qkey(qpn) {
                Some(qkey) => ud::run_send(&mut qp, &self.mrs, env, wire, qkey),
                None if self.dc.is_dci(qpn) || self.dc.is_dct(qpn) => dc::run(
                    &mut self.dc,
                    &mut qp,
                    &mut self.mrs,
                    env,
                    wire,
                    now,
                    &mut retransmits,
                ),
                None => requester::run(&mut qp, &mut self.mrs, env, wire, now, &mut retransmits),
            };
            self.counters.retransmits += retransmits;
            self.counters.tx_packets += wire.packets_since(before);
            completer::retire(self, &mut qp, env, now);
            if qp.state == QpState::Err {
                completer::flush_queues(self, &mut qp, env);
            }
            progress |= ran;
            self.qps.insert(qpn, qp);
            self.reschedule(qpn);
            self.report_drained(qpn, env);
        }
        // After the QPs: a WQE that found its key pending runs on the next pass.
        progress |= self.run_ctrlqs(env);
        progress
    }

    /// Validates `frame` and hands its packets (one, or a train's: see [`crate::fabric::train`]) to
    /// their QP's responder or completer, counting each packet received or dropped (by
    /// the checks, or by the transport's PSN window).
    fn deliver(
        &mut self,
        frame: &Frame,
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
        received: &mut Vec<u32>,
    ) {
        let parsed = match recv::parse(frame, &wire.local) {
            // Not addressed here: steered here for a QP that migrated in?
            Err(why) => self.parse_for_arrived(frame).unwrap_or(Err(why)),
            parsed => parsed,
        };
        let pkt = match parsed {
            Ok(pkt) => pkt,
            Err(recv::Refused::Drop(why)) => {
                log::trace!("frame dropped: {why:?}");
                self.count_drops(why, frame.packets());
                return;
            }
            Err(recv::Refused::Foreign(u)) => {
                let (qpn, opcode) = (u.bth.dest_qp, u.bth.opcode);
                let qp = self.qps.get(&qpn).map(|qp| &**qp);
                let why = qp.map_or(recv::Drop::UnknownQp, |_| recv::unsupported(opcode));
                log::trace!("qp {qpn:#x}: frame {opcode:#x} dropped: {why:?}");
                let dropped = self.dropped(qpn, qp, opcode, u.src_ip, 0);
                self.drop_explained(why, &dropped, frame.packets());
                return;
            }
        };
        let qpn = pkt.hdrs.bth.dest_qp;
        let Some(mut qp) = self.qps.remove(&qpn) else {
            let (opcode, len) = (pkt.hdrs.bth.opcode, pkt.payload.len());
            log::trace!("qp {qpn:#x}: frame {opcode:#x} dropped: UnknownQp");
            let dropped = self.dropped(qpn, None, opcode, pkt.src_ip, len);
            self.drop_explained(recv::Drop::UnknownQp, &dropped, frame.packets());
            return;
        };
        received.push(qpn);
        let before = wire.out.len();
        match frame.train.as_deref().map(|t| t.runs(pkt, &frame.bytes)) {
            None => self.take_packet(&mut qp, &pkt, &frame.bytes, env, wire, now),
            Some(Ok(runs)) => {
                for run in runs {
                    self.take_run(&mut qp, run, &frame.bytes, env, wire, now);
                }
            }
            Some(Err(why)) => {
                log::error!("qp {qpn:#x}: a train does not hold what it says: dropped");
                self.count_drops(why.into(), frame.packets());
            }
        }
        self.counters.tx_packets += wire.packets_since(before);
        self.qps.insert(qpn, qp);
        self.reschedule(qpn);
        self.report_drained(qpn, env);
    }

    /// Hands a run of a train's packets to `qp`'s transport: as one, if its responder or
    /// completer takes it so (see [`responder::takes_run`], [`completer::takes_run`]),
    /// else packet by packet. A single packet whose payload is held goes as a packet
    /// whose payload is copied from where it is held.
    fn take_run(
        &mut self,
        qp: &mut Qp,
        run: Run,
        frame: &[u8],
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
    ) {
        let plain_rc =
            || self.ud.qkey(qp.qpn).is_none() && !self.dc.is_dci(qp.qpn) && !self.dc.is_dct(qp.qpn);
        let request = recv::is_request(run.packet.hdrs.bth.opcode);
        let as_one = || {
            if request {
                responder::takes_run(qp, &run)
            } else {
                completer::takes_run(qp, &run)
            }
        };
        if run.count == 1 && run.is_held() && plain_rc() {
            let len = run.payload.len();
            let taken = self.take_rc(qp, &run.packet, run.payload, env, wire, now);
            self.count_taken(qp, &run.packet, (1, len), taken);
            return;
        }
        if run.count == 1 || !plain_rc() || !as_one() {
            // A held payload is read into a buffer first, as the sender used to.
            let mut buf = if run.is_held() {
                wire.spare.pop().unwrap_or_default()
            } else {
                Vec::new()
            };
            match run.in_bytes(&mut buf) {
                Some(run) => {
                    for pkt in run.packets() {
                        self.take_packet(qp, &pkt, frame, env, wire, now);
                    }
                }
                None => {
                    log::error!("qp {:#x}: a train's held payload cannot be read", qp.qpn);
                    self.count_drops(recv::Drop::Length, u64::from(run.count));
                }
            }
            if buf.capacity() > 0 {
                wire.recycle(buf);
            }
            return;
        }
        // The packets of a run differ only in PSN and payload: what the checks say of
        // the first, they say of all.
        let seg = run.payload.len() / run.count as usize;
        let taken = recv::check(qp, &run.packet, seg).and_then(|()| {
            if request {
                responder::on_run(self, qp, run, env, wire)
            } else {
                completer::on_run(self, qp, run, env, now)
            }
        });
        self.count_taken(qp, &run.packet, (run.count, seg), taken);
    }

    /// Hands one packet to `qp`'s transport and counts it received or dropped.
    fn take_packet(
        &mut self,
        qp: &mut Qp,
        pkt: &crate::roce::packet::Packet,
        frame: &[u8],
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
    ) {
        let checked = recv::check_transport(self.transport_of(qp.qpn), pkt.hdrs.bth.opcode);
        let taken = checked.and_then(|()| match self.ud.qkey(qp.qpn) {
            Some(qkey) => self.receive_datagram(qp, pkt, frame, env, qkey),
            None => match self.receive_dc(qp, pkt, env, wire, now) {
                Some(taken) => taken,
                None => self.take_rc(qp, pkt, Payload::Bytes(pkt.payload), env, wire, now),
            },
        });
        self.count_taken(qp, pkt, (1, pkt.payload.len()), taken);
    }

    /// Hands `pkt`, whose payload is `payload`, to the responder or the completer of
    /// `qp`, a QP of the RC transport.
    fn take_rc(
        &mut self,
        qp: &mut Qp,
        pkt: &crate::roce::packet::Packet,
        payload: Payload,
        env: &Env,
        wire: &mut wire::Wire,
        now: Instant,
    ) -> Result<(), recv::Drop> {
        recv::check(qp, pkt, payload.len())?;
        if recv::is_request(pkt.hdrs.bth.opcode) {
            responder::on_request(self, qp, pkt, payload, env, wire)
        } else {
            completer::on_response(self, qp, pkt, payload, env, now)
        }
    }

    /// Counts `count` packets from `pkt` on (one, or a run's) that `qp` took or
    /// dropped, each with `payload_len` bytes of payload.
    fn count_taken(
        &mut self,
        qp: &Qp,
        pkt: &crate::roce::packet::Packet,
        (count, payload_len): (u32, usize),
        taken: Result<(), recv::Drop>,
    ) {
        match taken {
            Ok(()) => self.counters.rx_packets += u64::from(count),
            Err(why) => {
                log::trace!(
                    "qp {:#x}: {count} packet(s) {:#x} from psn {} dropped: {why:?}",
                    qp.qpn,
                    pkt.hdrs.bth.opcode,
                    pkt.hdrs.bth.psn
                );
                let opcode = pkt.hdrs.bth.opcode;
                let dropped = self.dropped(qp.qpn, Some(qp), opcode, pkt.src_ip, payload_len);
                self.drop_explained(why, &dropped, u64::from(count));
            }
        }
    }

    /// Counts `packets` packets dropped for `why`.
    fn count_drops(&mut self, why: recv::Drop, packets: u64) {
        self.counters.rx_dropped += packets;
        self.counters.drops.count(why, packets);
    }

    /// Counts `packets` packets of `dropped` dropped for `why`, and if the user can act on
    /// the reason ([`recv::explainable`]) and this is its first drop for the QP, explains
    /// it at warn level; later ones are counted only.
    fn drop_explained(&mut self, why: recv::Drop, dropped: &recv::Dropped, packets: u64) {
        self.count_drops(why, packets);
        if !recv::explainable(why, dropped.opcode) {
            return;
        }
        let f = self.function;
        match self.explained.note(dropped.qpn, why) {
            recv::Verdict::Explain => {
                if let Some(text) = recv::explain(why, dropped) {
                    log::warn!("{f}: {text}");
                }
            }
            recv::Verdict::Suppress => log::warn!(
                "{f}: drops of {} QP and reason pairs explained: drops of further pairs are \
                 only counted (see the drop counters at exit; RUST_LOG=trace logs each)",
                recv::Explained::MAX
            ),
            recv::Verdict::Count => {}
        }
    }

    /// A drop of an `opcode` packet with `payload_len` bytes of payload from `src_ip` for
    /// QP `qpn`, which is `qp` if the function has it (a QP taking a packet is out of
    /// `qps`), as [`recv::explain`] describes it.
    fn dropped(
        &self,
        qpn: u32,
        qp: Option<&Qp>,
        opcode: u8,
        src_ip: [u8; 4],
        payload_len: usize,
    ) -> recv::Dropped {
        let transport = qp.map(|_| self.transport_of(qpn));
        let max_payload = match (qp, transport) {
            (_, Some(recv::QpTransport::Ud)) => rnic_abi::ud::UD_MAX_PAYLOAD,
            (Some(qp), _) => qp::mtu(&qp.attr),
            (None, _) => 0,
        };
        recv::Dropped {
            qpn,
            qp: transport,
            opcode,
            src_ip,
            payload_len,
            max_payload,
        }
    }

    /// The transport of QP `qpn`.
    fn transport_of(&self, qpn: u32) -> recv::QpTransport {
        if self.ud.qkey(qpn).is_some() {
            recv::QpTransport::Ud
        } else if self.dc.is_dci(qpn) {
            recv::QpTransport::DcInitiator
        } else if self.dc.is_dct(qpn) {
            recv::QpTransport::DcTarget
        } else {
            recv::QpTransport::Rc
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
