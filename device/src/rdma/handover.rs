//! The per-function half of `MIGRATE_QP` (docs/hardware-interface.md, "Connection
//! migration"): what a QP takes with it when it leaves a function, the checks that it can
//! leave and arrive, and the moves themselves. [`crate::migrate`] runs both halves under
//! the two functions' locks, after every check of both (and of their DMA mappings and
//! quotas) passed, so a migration either happens whole or changes nothing.
//!
//! What moves: the QP (number, attributes, transport state, timers, its rings' producer
//! indexes), its PD with every MR registered in it (keys unchanged, since the remote peer
//! holds them), and the CQs it uses unless the command names CQs of the destination.
//! What is renumbered: the PD and the CQs (numbers are per function), and every doorbell
//! slot (doorbell pages are per function).

use std::collections::BTreeMap;

use rnic_abi::cmd::Status;
use rnic_abi::doorbell::{self, slot_offset, SLOTS};
use rnic_abi::migration::{AdoptQpReq, AdoptQpResp, MigrateQpResp};
use rnic_abi::verbs::{event, DoorbellSlot, ACCESS_LOCAL_WRITE};

use super::cq::CompletionQueue;
use super::env::Env;
use super::error::VerbsError;
use super::mkey::mr::Mr;
use super::qp::Qp;
use super::recv::Refused;
use super::verbs::{decode, reply};
use super::{Pd, RdmaState, SlotOwner};
use crate::fabric::frame::{Endpoint, Frame};
use crate::roce::parse::Packet;

/// Where one direction's completions (send or receive) go after the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqTarget {
    /// The QP's CQ of the source moves along; the number is the source's.
    Move(u32),
    /// An existing CQ of the destination, by the destination's number.
    Join(u32),
}

/// What a departure takes along, as [`RdmaState::plan_departure`] found it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The QP.
    pub qpn: u32,
    /// Its PD on the source.
    pub pdn: u32,
    /// Keys of the MRs of the PD.
    pub mr_keys: Vec<u32>,
    /// Pages those MRs cover, in all.
    pub mr_pages: u64,
    /// Send completions.
    pub send: CqTarget,
    /// Receive completions.
    pub recv: CqTarget,
    /// CQs of the source that move (source numbers, no repeats).
    pub moving_cqs: Vec<u32>,
    /// Every page the destination must reach exactly as the source does: (device
    /// address, whether the device writes it).
    pub pages: Vec<(u64, bool)>,
    /// The address the QP speaks as: where it was created.
    pub home: Endpoint,
}

/// What left the source, on its way to the destination.
#[derive(Debug)]
pub struct Departed {
    qp: Qp,
    mrs: Vec<(u32, Mr)>,
    /// (source number, CQ, consumer index, arm word) of each CQ that moves.
    cqs: Vec<(u32, CompletionQueue, u32, u32)>,
    /// The driver's producer indexes as the source's doorbell slots held them.
    sq_pi: u32,
    rq_pi: u32,
}

/// The first number from `*next` on that is not `taken` (0 is never one), advancing
/// `*next` past it as the creating commands do.
fn fresh(next: &mut u32, taken: impl Fn(u32) -> bool) -> u32 {
    let mut n = *next;
    while taken(n) {
        n = n.wrapping_add(1).max(1);
    }
    *next = n.wrapping_add(1).max(1);
    n
}

fn busy(what: u32) -> VerbsError {
    VerbsError::new(Status::Busy, what)
}

impl RdmaState {
    /// Checks that QP `qpn` can leave this function and lists what it takes along.
    /// `send_cq`/`recv_cq` are the command's: 0 moves the QP's own CQ (only if no other
    /// QP uses it), anything else is a CQ of the destination.
    pub fn plan_departure(
        &self,
        qpn: u32,
        send_cq: u32,
        recv_cq: u32,
        own_address: Endpoint,
    ) -> Result<Plan, VerbsError> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::new(Status::NotFound, qpn))?;
        // The PD moves whole with its MRs, so nothing else of this function may use it.
        let pd = self
            .pds
            .get(&qp.pdn)
            .ok_or(VerbsError::new(Status::Internal, qp.pdn))?;
        // Indirect and pattern keys do not migrate (rnic 1.3): a PD that has them stays.
        // Nor do SRQs (a PD that has one stays), UD and DC QPs, MMIO windows and keys
        // reserved for a control queue (rnic 1.4), UC QPs and memory windows (rnic 1.6),
        // DMA keys and fast-registration MRs (rnic 1.8; the GSI QP is a UD QP), QPs that
        // send from an address the driver set in the GID table (rnic 1.10).
        if pd.users != 1
            || self.mrs.reserved_in_pd(qp.pdn) > 0
            || qp.req.ops.iter().any(|o| o.shared.is_some())
            || self.ud.qkey(qpn).is_some()
            || self.uc.contains(qpn)
            || self.dc.is_dci(qpn)
            || self.dc.is_dct(qpn)
            || qp.sq.window.is_some()
            || self.mrs.indirect.count_in_pd(qp.pdn) > 0
            || self.mrs.windows.count_in_pd(qp.pdn) > 0
            || self.mrs.kernel_keys_in_pd(qp.pdn) > 0
            || self.srqs.count_in_pd(qp.pdn) > 0
            || !self.gids.is_own(qp.attr.sgid_index)
        {
            return Err(busy(qp.pdn));
        }
        let target = |own: u32, named: u32| {
            if named == 0 {
                CqTarget::Move(own)
            } else {
                CqTarget::Join(named)
            }
        };
        let send = target(qp.send_cqn, send_cq);
        let recv = target(qp.recv_cqn, recv_cq);
        let mut moving_cqs = Vec::new();
        for t in [send, recv] {
            if let CqTarget::Move(cqn) = t {
                if !moving_cqs.contains(&cqn) {
                    moving_cqs.push(cqn);
                }
            }
        }
        let mut pages = Vec::new();
        for &cqn in &moving_cqs {
            let cq = self
                .cqs
                .get(&cqn)
                .ok_or(VerbsError::new(Status::Internal, cqn))?;
            // Only this QP may use a CQ that moves (it may use it for both directions).
            let uses = usize::from(qp.send_cqn == cqn) + usize::from(qp.recv_cqn == cqn);
            if cq.users != uses {
                return Err(busy(cqn));
            }
            pages.extend(cq.ring().pages().iter().map(|&p| (p, true)));
        }
        pages.extend(qp.sq.ring.pages().iter().map(|&p| (p, false)));
        pages.extend(qp.rq.ring.pages().iter().map(|&p| (p, false)));
        let mr_keys = self.mrs.keys_in_pd(qp.pdn);
        let mut mr_pages = 0;
        for &key in &mr_keys {
            let Some(mr) = self.mrs.get(key) else {
                continue;
            };
            let written = mr.access & ACCESS_LOCAL_WRITE != 0;
            mr_pages += mr.buffer.page_count() as u64;
            pages.extend(mr.buffer.pages().iter().map(|&p| (p, written)));
        }
        pages.sort_unstable();
        pages.dedup();
        Ok(Plan {
            qpn,
            pdn: qp.pdn,
            mr_keys,
            mr_pages,
            send,
            recv,
            moving_cqs,
            pages,
            home: qp.home.unwrap_or(own_address),
        })
    }

    /// Checks that what `plan` describes can arrive on this function, with the QP's and
    /// moving CQs' doorbells in `doorbell_page`.
    pub fn check_arrival(&self, plan: &Plan, doorbell_page: u32) -> Result<(), VerbsError> {
        if self.qps.contains_key(&plan.qpn) {
            return Err(busy(plan.qpn));
        }
        let l = &self.limits;
        let full = |have: usize, more: usize, max: u32| have + more > max as usize;
        if full(self.qps.len(), 1, l.max_qp) {
            return Err(VerbsError::new(Status::NoResources, l.max_qp));
        }
        if full(self.pds.len(), 1, l.max_pd) {
            return Err(VerbsError::new(Status::NoResources, l.max_pd));
        }
        if full(self.cqs.len(), plan.moving_cqs.len(), l.max_cq) {
            return Err(VerbsError::new(Status::NoResources, l.max_cq));
        }
        if full(self.mrs.len(), plan.mr_keys.len(), l.max_mr) {
            return Err(VerbsError::new(Status::NoResources, l.max_mr));
        }
        // MR keys are per function; the moving ones keep theirs, so they must be free.
        if let Some(&key) = plan.mr_keys.iter().find(|&&k| !self.mrs.can_take(k)) {
            return Err(busy(key));
        }
        for t in [plan.send, plan.recv] {
            if let CqTarget::Join(cqn) = t {
                match self.cqs.get(&cqn) {
                    None => return Err(VerbsError::new(Status::NotFound, cqn)),
                    Some(cq) if cq.error => return Err(VerbsError::new(Status::BadState, cqn)),
                    Some(_) => {}
                }
            }
        }
        if doorbell_page >= doorbell::PAGES {
            return Err(VerbsError::new(Status::BadParam, doorbell_page));
        }
        let used = self
            .slots
            .keys()
            .filter(|(page, _)| *page == doorbell_page)
            .count();
        if used + 2 + plan.moving_cqs.len() > SLOTS as usize {
            return Err(VerbsError::new(Status::NoResources, doorbell_page));
        }
        Ok(())
    }

    /// Whether `page` holds no slot yet (an arrival there starts using a doorbell page).
    pub fn doorbell_page_unused(&self, page: u32) -> bool {
        !self.slots.keys().any(|(p, _)| *p == page)
    }

    /// Takes the QP and what `plan` says moves with it out of this function and tells
    /// the driver with a `QP_DEPARTED` event. `plan` must come from
    /// [`RdmaState::plan_departure`] under the same lock.
    pub fn depart(&mut self, plan: &Plan, env: &Env) -> Option<Departed> {
        let qp = self.qps.remove(&plan.qpn)?;
        self.schedule.forget(plan.qpn);
        let sq_pi = env.doorbells.read32(qp.sq.slot).unwrap_or(qp.sq.taken);
        let rq_pi = env.doorbells.read32(qp.rq.slot).unwrap_or(qp.rq.taken);
        self.free_slots_of(SlotOwner::Sq(qp.qpn));
        self.free_slots_of(SlotOwner::Rq(qp.qpn));
        // A direction that joins a CQ of the destination stops using its CQ here.
        for (own, t) in [(qp.send_cqn, plan.send), (qp.recv_cqn, plan.recv)] {
            if matches!(t, CqTarget::Join(_)) && !plan.moving_cqs.contains(&own) {
                if let Some(cq) = self.cqs.get_mut(&own) {
                    cq.users = cq.users.saturating_sub(1);
                }
            }
        }
        let mut cqs = Vec::new();
        for &cqn in &plan.moving_cqs {
            if let Some(cq) = self.cqs.remove(&cqn) {
                let ci = env.doorbells.read32(cq.slot()).unwrap_or(0);
                let arm = env.doorbells.read32(cq.slot() + 4).unwrap_or(0);
                self.free_slots_of(SlotOwner::Cq(cqn));
                cqs.push((cqn, cq, ci, arm));
            }
        }
        self.pds.remove(&plan.pdn);
        let mrs = plan
            .mr_keys
            .iter()
            .filter_map(|&k| self.mrs.remove(k).map(|mr| (k, mr)))
            .collect();
        // Frames for the QP's address now go elsewhere; this function must not hand its
        // number to a new QP while they do.
        self.departed.insert(plan.qpn);
        self.post_event(env, event::QP_DEPARTED, plan.qpn);
        Some(Departed {
            qp: *qp,
            mrs,
            cqs,
            sq_pi,
            rq_pi,
        })
    }

    fn take_slot(&mut self, page: u32, owner: SlotOwner, env: &Env, words: [u32; 2]) -> u64 {
        // check_arrival made sure the page has room; a failure here would be a device
        // bug, and the queue would then have no slot, which only stalls it.
        let Ok((page, slot)) = self.alloc_slot(page, owner) else {
            log::error!("migration: no doorbell slot left in page {page} after the check");
            // The end of the BAR: reads and writes there (and a little beyond) do
            // nothing, and offsets computed from it cannot overflow.
            return env.doorbells.len() as u64;
        };
        let at = slot_offset(page, slot);
        env.doorbells.write32(at, words[0]);
        env.doorbells.write32(at + 4, words[1]);
        at
    }

    /// Installs a departed QP here, renumbering its PD and CQs and giving it doorbell
    /// slots in `doorbell_page`, and tells the driver with a `QP_ARRIVED` event. `plan`
    /// must have passed [`RdmaState::check_arrival`] under the same lock. `home` is the
    /// address the QP keeps speaking as, `None` if that is this function's own.
    pub fn arrive(
        &mut self,
        plan: &Plan,
        departed: Departed,
        doorbell_page: u32,
        home: Option<Endpoint>,
        env: &Env,
    ) -> MigrateQpResp {
        let Departed {
            mut qp,
            mrs,
            cqs,
            sq_pi,
            rq_pi,
        } = departed;
        let pdn = self.fresh_pdn();
        self.pds.insert(pdn, Pd { users: 1 });
        let mrs_moved = mrs.len() as u32;
        for (key, mut mr) in mrs {
            mr.pdn = pdn;
            if self.mrs.insert_at(key, mr).is_err() {
                log::error!("migration: MR key {key:#x} was taken after the check");
            }
        }
        let mut renumbered = BTreeMap::new();
        let cqs_moved = cqs.len() as u32;
        for (old, mut cq, ci, arm) in cqs {
            let cqn = self.fresh_cqn();
            let at = self.take_slot(doorbell_page, SlotOwner::Cq(cqn), env, [ci, arm]);
            cq.set_slot(at);
            cq.users = [plan.send, plan.recv]
                .iter()
                .filter(|t| **t == CqTarget::Move(old))
                .count();
            self.cqs.insert(cqn, cq);
            renumbered.insert(old, cqn);
        }
        let mut resolve = |t: CqTarget| match t {
            CqTarget::Move(old) => renumbered.get(&old).copied().unwrap_or(0),
            CqTarget::Join(cqn) => {
                if let Some(cq) = self.cqs.get_mut(&cqn) {
                    cq.users += 1;
                }
                cqn
            }
        };
        qp.send_cqn = resolve(plan.send);
        qp.recv_cqn = resolve(plan.recv);
        qp.pdn = pdn;
        qp.home = home;
        let qpn = qp.qpn;
        qp.sq.slot = self.take_slot(doorbell_page, SlotOwner::Sq(qpn), env, [sq_pi, 0]);
        qp.rq.slot = self.take_slot(doorbell_page, SlotOwner::Rq(qpn), env, [rq_pi, 0]);
        qp.sq_slot = self
            .slot_of(SlotOwner::Sq(qpn))
            .unwrap_or((doorbell_page, 0));
        // WQEs the driver announced on the source and the device had not taken yet are
        // work here: ring both queues once on the driver's behalf.
        for owner in [SlotOwner::Sq(qpn), SlotOwner::Rq(qpn)] {
            if let Some((page, slot)) = self.slot_of(owner) {
                let word = u64::from(page) * rnic_abi::PAGE_SIZE
                    + doorbell::RUNG_BITMAP
                    + u64::from(slot / 32) * 4;
                env.doorbells.or32(word, 1 << (slot % 32));
            }
        }
        let resp = MigrateQpResp {
            qpn,
            pdn,
            send_cq: qp.send_cqn,
            recv_cq: qp.recv_cqn,
            mrs_moved,
            cqs_moved,
            reserved: [0; 2],
        };
        self.departed.remove(&qpn);
        self.qps.insert(qpn, Box::new(qp));
        // Its timers and queued work came with it.
        self.reschedule(qpn);
        self.post_event(env, event::QP_ARRIVED, qpn);
        resp
    }

    fn fresh_pdn(&mut self) -> u32 {
        fresh(&mut self.next_pdn, |n| self.pds.contains_key(&n))
    }

    fn fresh_cqn(&mut self) -> u32 {
        fresh(&mut self.next_cqn, |n| self.cqs.contains_key(&n))
    }

    fn slot_of(&self, owner: SlotOwner) -> Option<(u32, u32)> {
        self.slots
            .iter()
            .find(|(_, o)| **o == owner)
            .map(|(at, _)| *at)
    }

    /// The numbers of QPs that migrated away from this function and whose frames the
    /// switch still steers elsewhere.
    pub fn departed_qpns(&self) -> std::collections::BTreeSet<u32> {
        self.departed.clone()
    }

    /// Keeps `qpns` from being handed to new QPs here (after a reset: the QPs that left
    /// still use them, at this function's address).
    pub fn reserve_departed(&mut self, qpns: std::collections::BTreeSet<u32>) {
        self.departed.extend(qpns);
    }

    /// `ADOPT_QP`: what the driver needs to keep using a QP that arrived here.
    pub(super) fn adopt_qp(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: AdoptQpReq = decode(body)?;
        if req.reserved != 0 {
            return Err(VerbsError::new(Status::BadParam, req.reserved));
        }
        // The GSI QP never migrates (it is a UD QP): it is its function's own.
        if req.qpn == rnic_abi::ud::GSI_QPN {
            return Err(VerbsError::new(Status::BadParam, req.qpn));
        }
        let qp = self
            .qps
            .get(&req.qpn)
            .ok_or(VerbsError::new(Status::NotFound, req.qpn))?;
        let slot = |owner| {
            let (page, slot) = self.slot_of(owner).unwrap_or_default();
            DoorbellSlot { page, slot }
        };
        Ok(reply(&AdoptQpResp {
            qpn: qp.qpn,
            pdn: qp.pdn,
            send_cq: qp.send_cqn,
            recv_cq: qp.recv_cqn,
            sq_doorbell: slot(SlotOwner::Sq(qp.qpn)),
            rq_doorbell: slot(SlotOwner::Rq(qp.qpn)),
            send_cq_doorbell: slot(SlotOwner::Cq(qp.send_cqn)),
            recv_cq_doorbell: slot(SlotOwner::Cq(qp.recv_cqn)),
            sq_size: qp.sq.entries,
            rq_size: qp.rq.entries,
            sq_pi: env.doorbells.read32(qp.sq.slot).unwrap_or(0),
            rq_pi: env.doorbells.read32(qp.rq.slot).unwrap_or(0),
            state: qp.state as u32,
            reserved: 0,
        }))
    }

    /// Parses a frame that is not addressed to this function: it is for a QP that
    /// migrated here if it is addressed to that QP's home address and names it (the
    /// switch steered it here). Then it is its packet, or one of an opcode the device
    /// does not take, refused for that QP.
    pub(super) fn parse_for_arrived<'a>(
        &self,
        frame: &'a Frame,
    ) -> Option<Result<Packet<'a>, Refused>> {
        self.qps.values().find_map(|qp| {
            match super::recv::parse(frame, &qp.home?, &Default::default()) {
                Ok(pkt) if pkt.hdrs.bth.dest_qp == qp.qpn => Some(Ok(pkt)),
                Err(Refused::Foreign(u)) if u.bth.dest_qp == qp.qpn => {
                    Some(Err(Refused::Foreign(u)))
                }
                _ => None,
            }
        })
    }
}
