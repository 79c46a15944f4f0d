//! The QP commands (docs/hardware-interface.md §7.4, §7.8): `CREATE_QP`, `MODIFY_QP`,
//! `QUERY_QP`, `DESTROY_QP`, and what a QP may be given besides: an MMIO window for its
//! send WQEs (`CREATE_SQ_WINDOW`, [`crate::rdma::mmio`]) and a DC target's key
//! (`SET_DC_KEY`).

use rnic_abi::cmd::Status;
use rnic_abi::dc::SetDcKeyReq;
use rnic_abi::doorbell::{slot_offset, SLOTS};
use rnic_abi::mmio::{SqWindowResp, WINDOW_SIZE};
use rnic_abi::ud::{GSI_QPN, QPT_GSI};
use rnic_abi::verbs::{
    rq_stride, sq_stride, CreateQpReq, CreateQpResp, DoorbellSlot, ModifyQpReq, ObjectReq, QpAttr,
    QpState, QueryQpResp, FIRST_QPN, QPT_RC, QPT_UC,
};

use super::{decode, page_list_error, reply};
use crate::rdma::env::Env;
use crate::rdma::error::VerbsError;
use crate::rdma::mkey::pages::PagedBuffer;
use crate::rdma::mmio::{self, WINDOW_SLOTS};
use crate::rdma::qp::{self, Qp};
use crate::rdma::wqe::{QpCaps, WorkQueue};
use crate::rdma::{uc, ud, RdmaState, SlotOwner};
use crate::resources::Resource;

impl RdmaState {
    /// `CREATE_QP`: an RC, UC, UD or DC QP, or the function's GSI QP (a UD QP numbered
    /// [`GSI_QPN`]), its queues, and its doorbell slots.
    pub(super) fn create_qp(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: CreateQpReq = decode(body)?;
        let bad = |what: u32| Err(VerbsError::new(Status::BadParam, what));
        let known = [
            QPT_RC,
            QPT_UC,
            rnic_abi::ud::QPT_UD,
            QPT_GSI,
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
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        for cqn in [req.send_cqn, req.recv_cqn] {
            if !self.cqs.contains_key(&cqn) {
                return Err(VerbsError::new(Status::NotFound, cqn));
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
        let gsi = req.qp_type == QPT_GSI;
        // The GSI QP is QP 1 (below FIRST_QPN, so no other QP ever has it), once.
        if gsi && self.qps.contains_key(&GSI_QPN) {
            return Err(VerbsError::new(Status::Busy, GSI_QPN));
        }
        // After a wrap, numbers still in use are skipped (there are fewer QPs than numbers).
        let next = |q: u32| if q >= 0xFF_FFFF { FIRST_QPN } else { q + 1 };
        let mut qpn = if gsi { GSI_QPN } else { self.next_qpn };
        while !gsi && (self.qps.contains_key(&qpn) || self.departed.contains(&qpn)) {
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
        if !gsi {
            self.next_qpn = next(qpn);
        }
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
            rnic_abi::ud::QPT_UD | QPT_GSI => self.ud.add(qpn),
            QPT_UC => self.uc.add(qpn),
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

    /// `MODIFY_QP`: a transition of the QP's state machine ([`qp::check_modify_with`]), and
    /// what entering the new state starts or ends.
    pub(super) fn modify_qp(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        // A UD QP's Q_Key follows the request (see `ud`).
        let (body, qkey) = ud::split_modify(body)?;
        let req: ModifyQpReq = decode(body)?;
        let is_ud = self.ud.qkey(req.qpn).is_some();
        let qp = self
            .qps
            .get_mut(&req.qpn)
            .ok_or(VerbsError::new(Status::NotFound, req.qpn))?;
        let table = if is_ud {
            ud::transition
        } else if self.uc.contains(req.qpn) {
            uc::transition
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
            qp::ModifyError::BadTransition => VerbsError::new(Status::BadState, qp.state as u32),
            qp::ModifyError::BadAttr(bit) => VerbsError::new(Status::BadParam, bit),
        })?;
        // The source GID: an entry of the GID table that holds an IPv4 address.
        if req.attr_mask & rnic_abi::verbs::attr::AV != 0
            && !self.gids.is_source(req.attr.sgid_index)
        {
            return Err(VerbsError::new(Status::BadParam, rnic_abi::verbs::attr::AV));
        }
        qp::apply(&mut qp.attr, req.attr_mask, &req.attr);
        if let Some(qkey) = qkey {
            let qpn = req.qpn;
            self.ud.set_qkey(qpn, qkey);
        }
        let Some(qp) = self.qps.get_mut(&req.qpn) else {
            return Err(VerbsError::new(Status::Internal, req.qpn));
        };
        let from = qp.state;
        qp.state = target;
        qp.attr.qp_state = target as u8;
        match target {
            QpState::Reset => {
                // A WQE left in the MMIO window belongs to the numbering that ends here.
                if let Some(w) = qp.sq.window {
                    mmio::release(env.doorbells, w);
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
        Ok(Vec::new())
    }

    /// `QUERY_QP`.
    pub(super) fn query_qp(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let qp = self
            .qps
            .get(&req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
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

    /// `DESTROY_QP`: what the QP held of shared send queues completes there, flushed.
    pub(super) fn destroy_qp(&mut self, body: &[u8], env: &Env) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let qp = self
            .qps
            .remove(&req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
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
        self.mcast.remove_qp(qp.qpn);
        self.uc.remove(qp.qpn);
        self.dc.remove(qp.qpn);
        // No request arrives on it any more: the type 2 windows bound through it are free.
        self.mrs.windows.release_qp(qp.qpn);
        self.schedule.forget(qp.qpn);
        self.release(Resource::Qp, 1);
        Ok(Vec::new())
    }

    /// `CREATE_SQ_WINDOW`: sets aside a window of slots in the page of the QP's send
    /// doorbell.
    pub(super) fn create_sq_window(
        &mut self,
        body: &[u8],
        env: &Env,
    ) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        let qpn = req.handle;
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(VerbsError::new(Status::NotFound, qpn))?;
        if qp.sq.window.is_some() {
            return Err(VerbsError::new(Status::Busy, qpn));
        }
        let page = qp.sq_slot.0;
        // An aligned run of free slots (the page is already charged: the QP's doorbells
        // are in it).
        let first = (0..SLOTS / WINDOW_SLOTS)
            .map(|i| i * WINDOW_SLOTS)
            .find(|&s| (s..s + WINDOW_SLOTS).all(|t| !self.slots.contains_key(&(page, t))))
            .ok_or(VerbsError::new(Status::NoResources, page))?;
        for s in first..first + WINDOW_SLOTS {
            self.slots.insert((page, s), SlotOwner::Window(qpn));
        }
        let at = slot_offset(page, first);
        env.doorbells.write_bytes(at, &[0u8; WINDOW_SIZE as usize]);
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.sq.window = Some(at);
        }
        Ok(reply(&SqWindowResp {
            page,
            offset: (at % rnic_abi::PAGE_SIZE) as u32,
            size: WINDOW_SIZE,
            reserved: 0,
        }))
    }

    /// `SET_DC_KEY`: the access key of a DCT in RESET.
    pub(super) fn set_dc_key(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: SetDcKeyReq = decode(body)?;
        let in_reset = self
            .qps
            .get(&req.qpn)
            .is_some_and(|qp| qp.state == QpState::Reset);
        self.dc.set_key(req.qpn, req.dc_key, in_reset)?;
        Ok(Vec::new())
    }
}
