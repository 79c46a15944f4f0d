//! Control queues ([`rnic_abi::ctrlq`]): memory registration that returns at once.
//!
//! [`CtrlQueue::post_reg_mr`] takes a pending key (reserved in batches with
//! `RESERVE_MKEYS`), posts the registration and returns the [`Mr`] before the device ran
//! it: work requests may name the MR right away, and the device holds them until the
//! registration ran. Each registration completes on the queue's CQ with
//! [`super::WcOpcode::RegMr`].

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_abi::cmd::Opcode;
use rnic_abi::ctrlq::{
    ctrl_op, CreateCtrlqReq, CreateCtrlqResp, CtrlWqe, ReserveMkeysReq, ReserveMkeysResp,
    CTRLQ_CQE_QPN_BIT, CTRL_WQE_STRIDE, MAX_RESERVE,
};
use rnic_abi::regs;
use rnic_abi::verbs::DoorbellSlot;
use zerocopy::IntoBytes;

use super::cq::CqInner;
use super::mr::PdInner;
use super::qp::{QpTrack, RqState};
use super::ring::{self, covered_pages, Doorbells, PageListBuf, Ring};
use super::{Cq, Mr, Pd, DOORBELL_PAGE};
use crate::error::{Error, Result};
use crate::transport::DmaBuffer;

/// What the logs call a control queue.
const CTRLQ: &str = "control queue";

/// A control queue of a PD. Destroyed on drop; WQEs it had not run yet are dropped.
pub struct CtrlQueue {
    pd: Arc<PdInner>,
    _cq: Arc<CqInner>,
    ctrlqn: u32,
    slot: DoorbellSlot,
    /// Freed only after DESTROY_CTRLQ succeeded.
    ring: ManuallyDrop<Ring>,
    /// Posted and completed WQEs; the CQ credits it.
    count: Arc<Mutex<RqState>>,
    /// Keys reserved and not yet used.
    spare_keys: Mutex<Vec<u32>>,
}

impl std::fmt::Debug for CtrlQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtrlQueue")
            .field("ctrlqn", &self.ctrlqn)
            .field("entries", &self.ring.entries())
            .finish_non_exhaustive()
    }
}

impl Pd {
    /// Creates a control queue of at least `entries` entries whose registrations complete
    /// on `cq`.
    pub fn create_ctrl_queue(&self, entries: u32, cq: &Cq) -> Result<CtrlQueue> {
        let ctx = self.inner.ctx();
        if ctx.attr.caps & regs::CAP_PIPELINED_REG == 0 {
            return Err(Error::Unsupported(
                "control queues: the device does not report CAP_PIPELINED_REG (an rnicd older than ABI 1.4?)",
            ));
        }
        let entries = ring::ring_entries(entries, 1)?;
        let t = ctx.transport();
        let ring = Ring::new(t, entries, CTRL_WQE_STRIDE, ctx.list_kinds())?;
        let req = CreateCtrlqReq {
            entries,
            cqn: cq.cqn(),
            doorbell_page: DOORBELL_PAGE,
            reserved: 0,
            ring: ring.page_list(),
        };
        let resp: CreateCtrlqResp = ctx.command(Opcode::CreateCtrlq, req.as_bytes())?;
        let slot = match Doorbells::check_slot(t, resp.doorbell) {
            Ok(s) if resp.ctrlqn & CTRLQ_CQE_QPN_BIT == 0 => s,
            Ok(_) => {
                let _ = ctx.destroy_or_leak(Opcode::DestroyCtrlq, resp.ctrlqn, CTRLQ, ring);
                return Err(Error::Device(format!(
                    "the device numbered a control queue {:#x}",
                    resp.ctrlqn
                )));
            }
            Err(e) => {
                let _ = ctx.destroy_or_leak(Opcode::DestroyCtrlq, resp.ctrlqn, CTRLQ, ring);
                return Err(e);
            }
        };
        let count = Arc::new(Mutex::new(RqState {
            entries,
            ..RqState::default()
        }));
        ctx.qps().insert(
            CTRLQ_CQE_QPN_BIT | resp.ctrlqn,
            Arc::new(QpTrack::counting(
                CTRLQ_CQE_QPN_BIT | resp.ctrlqn,
                cq.cqn(),
                count.clone(),
            )),
        );
        Ok(CtrlQueue {
            pd: self.inner.clone(),
            _cq: cq.inner.clone(),
            ctrlqn: resp.ctrlqn,
            slot,
            ring: ManuallyDrop::new(ring),
            count,
            spare_keys: Mutex::new(Vec::new()),
        })
    }
}

impl CtrlQueue {
    /// The queue's number (completions carry it with [`CTRLQ_CQE_QPN_BIT`] set).
    pub fn ctrlqn(&self) -> u32 {
        self.ctrlqn
    }

    /// Entries free for new WQEs; completions polled from the CQ free them.
    pub fn free_slots(&self) -> u32 {
        self.count().free()
    }

    fn count(&self) -> MutexGuard<'_, RqState> {
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pending key of the PD: from the spare ones, or a fresh batch of
    /// [`MAX_RESERVE`]. The caller owns it: `DEREG_MR` releases it (an [`Mr`] does).
    pub fn reserve_key(&self) -> Result<u32> {
        let mut spare = self.spare_keys.lock().unwrap_or_else(|e| e.into_inner());
        if spare.is_empty() {
            let req = ReserveMkeysReq {
                pdn: self.pd.pdn(),
                count: MAX_RESERVE,
            };
            let resp: ReserveMkeysResp = self
                .pd
                .ctx()
                .command(Opcode::ReserveMkeys, req.as_bytes())?;
            let n = (resp.count as usize).min(resp.keys.len());
            spare.extend(resp.keys[..n].iter().rev());
        }
        spare
            .pop()
            .ok_or_else(|| Error::Device("RESERVE_MKEYS returned no keys".into()))
    }

    /// Registers `len` bytes of `buf` from `offset` for `access`, as [`Pd::reg_mr`], but
    /// returns as soon as the registration is posted: the MR's keys work at once, and
    /// work requests that reach them before the device registered the memory wait. The
    /// registration completes on the queue's CQ with `wr_id`.
    pub fn post_reg_mr(
        &self,
        buf: Arc<DmaBuffer>,
        offset: usize,
        len: usize,
        access: u32,
        wr_id: u64,
    ) -> Result<Mr> {
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > buf.len()) {
            return Err(super::invalid(format!(
                "post_reg_mr: {len} bytes at offset {offset} of a {}-byte buffer",
                buf.len()
            )));
        }
        let ctx = self.pd.ctx();
        let pages = PageListBuf::new(
            ctx.transport(),
            &buf.pages()[covered_pages(offset, len)],
            ctx.list_kinds(),
        )?;
        let key = self.reserve_key()?;
        let iova = buf.device_addr(offset);
        let wqe = CtrlWqe {
            wr_id,
            opcode: ctrl_op::REG_MR,
            key,
            access,
            iova,
            length: len as u64,
            pages: pages.list(),
            ..CtrlWqe::default()
        };
        // From here the MR owns the key: dropping it releases the key.
        let mr = Mr::from_parts(self.pd.clone(), buf, offset, len, iova, access, key, pages);
        self.post_raw(&wqe)?;
        Ok(mr)
    }

    /// Posts `wqe` as it is (for keys and page lists the caller manages).
    pub fn post_raw(&self, wqe: &CtrlWqe) -> Result<()> {
        let ctx = self.pd.ctx();
        let mut count = self.count();
        if count.free() == 0 {
            return Err(super::queue_full(format!(
                "control queue {}: {} registrations outstanding; poll its CQ",
                self.ctrlqn, count.entries
            )));
        }
        self.ring
            .buf()
            .write(self.ring.offset(count.posted), wqe.as_bytes());
        count.posted = count.posted.wrapping_add(1);
        ctx.doorbells()
            .ring_queue(ctx.transport(), self.slot, count.posted)?;
        Ok(())
    }
}

impl Drop for CtrlQueue {
    fn drop(&mut self) {
        let ctx = self.pd.ctx();
        ctx.qps().remove(&(CTRLQ_CQE_QPN_BIT | self.ctrlqn));
        let spare = std::mem::take(&mut *self.spare_keys.lock().unwrap_or_else(|e| e.into_inner()));
        for key in spare {
            let _ = ctx.destroy(Opcode::DeregMr, key, "reserved memory key");
        }
        // SAFETY: the ring is not used again: this is the last use of `self`.
        let ring = unsafe { ManuallyDrop::take(&mut self.ring) };
        let _ = ctx.destroy_or_leak(Opcode::DestroyCtrlq, self.ctrlqn, CTRLQ, ring);
    }
}
