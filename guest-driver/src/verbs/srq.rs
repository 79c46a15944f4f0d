//! Shared receive queues ([`rnic_abi::srq`]): one receive queue for many QPs.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_abi::cmd::Opcode;
use rnic_abi::regs;
use rnic_abi::srq::{
    srq_attr, CreateSrqReq, CreateSrqResp, ModifySrqReq, QuerySrqResp, ResizeSrqReq, MAX_SRQN,
};
use rnic_abi::verbs::{rq_stride, DoorbellSlot, ObjectReq};
use zerocopy::IntoBytes;

use super::mr::PdInner;
use super::qp::{encode_recv_wqe, post_recv_wqes, QpCaps, RqState};
use super::ring::{self, Doorbells, Ring};
use super::{Pd, RecvWr, DOORBELL_PAGE};
use crate::error::{Error, Result};

/// What the logs call an SRQ.
const SRQ: &str = "shared receive queue";

/// A shared receive queue. QPs made with [`Pd::create_qp_with_srq`] take their receives
/// from it, in the order they were posted, whichever QP a message arrives on. Destroyed on
/// drop, after the last such QP (they hold it).
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

/// What the SRQ's QPs keep alive and share.
pub(crate) struct SrqInner {
    pd: Arc<PdInner>,
    srqn: u32,
    max_sge: u32,
    slot: DoorbellSlot,
    /// The ring (another after a resize); freed only after DESTROY_SRQ succeeded. Locked
    /// after `rq`.
    ring: Mutex<ManuallyDrop<Ring>>,
    /// Posted and completed receives; every QP on the SRQ credits it.
    pub(crate) rq: Arc<Mutex<RqState>>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &self.inner.srqn)
            .field("max_wr", &self.inner.ring().entries())
            .field("max_sge", &self.inner.max_sge)
            .finish()
    }
}

impl Pd {
    /// Creates an SRQ of at least `max_wr` entries (rounded up to a power of two) of
    /// `max_sge` SGEs each, with limit `srq_limit` (0: disarmed; see
    /// [`Srq::set_limit`]).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, srq_limit: u32) -> Result<Srq> {
        let ctx = self.inner.ctx();
        if ctx.attr.caps & regs::CAP_SRQ == 0 {
            return Err(Error::Unsupported(
                "shared receive queues: the device does not report CAP_SRQ (an rnicd older than ABI 1.3?)",
            ));
        }
        let entries = ring::ring_entries(max_wr, 1)?;
        let t = ctx.transport();
        let ring = Ring::new(t, entries, rq_stride(max_sge), ctx.list_kinds())?;
        let req = CreateSrqReq {
            pdn: self.pdn(),
            entries,
            max_sge,
            srq_limit,
            doorbell_page: DOORBELL_PAGE,
            reserved: 0,
            ring: ring.page_list(),
        };
        let resp: CreateSrqResp = ctx.command(Opcode::CreateSrq, req.as_bytes())?;
        let slot = Doorbells::check_slot(t, resp.doorbell).and_then(|slot| {
            if resp.srqn == 0 || resp.srqn > MAX_SRQN {
                return Err(Error::Device(format!(
                    "the device numbered an SRQ {:#x}, outside 1..={MAX_SRQN:#x}",
                    resp.srqn
                )));
            }
            Ok(slot)
        });
        let slot = match slot {
            Ok(s) => s,
            Err(e) => {
                let _ = ctx.destroy_or_leak(Opcode::DestroySrq, resp.srqn, SRQ, ring);
                return Err(e);
            }
        };
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: self.inner.clone(),
                srqn: resp.srqn,
                max_sge,
                slot,
                ring: Mutex::new(ManuallyDrop::new(ring)),
                rq: Arc::new(Mutex::new(RqState {
                    entries,
                    ..RqState::default()
                })),
            }),
        })
    }
}

impl SrqInner {
    pub(crate) fn srqn(&self) -> u32 {
        self.srqn
    }

    fn rq(&self) -> MutexGuard<'_, RqState> {
        self.rq.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ring(&self) -> MutexGuard<'_, ManuallyDrop<Ring>> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Srq {
    /// The SRQ's number.
    pub fn srqn(&self) -> u32 {
        self.inner.srqn
    }

    /// Receives that can be posted now; completions (on any of its QPs' CQs) free slots.
    pub fn free_slots(&self) -> u32 {
        self.inner.rq().free()
    }

    /// Posts one receive.
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        self.post_recv_list(std::slice::from_ref(wr))
    }

    /// Posts receives in order with one doorbell; all or nothing, as
    /// [`super::Qp::post_recv_list`].
    pub fn post_recv_list(&self, wrs: &[RecvWr]) -> Result<()> {
        let caps = QpCaps {
            max_recv_sge: self.inner.max_sge,
            ..QpCaps::default()
        };
        let wqes = wrs
            .iter()
            .map(|wr| encode_recv_wqe(wr, &caps))
            .collect::<Result<Vec<_>>>()?;
        let mut rq = self.inner.rq();
        let ring = self.inner.ring();
        post_recv_wqes(
            &self.inner.pd.ctx(),
            (&ring, self.inner.slot),
            &mut rq,
            &wqes,
            || format!("post_recv on SRQ {}", self.inner.srqn),
        )
    }

    /// Entries in the ring (the requested number rounded up; another after a resize).
    pub fn max_wr(&self) -> u32 {
        self.inner.ring().entries()
    }

    /// Moves the SRQ to a ring of `max_wr` entries (rounded up to a power of two), with
    /// the receives posted and not taken by the device yet (`RESIZE_SRQ`, ABI 1.11); the
    /// armed limit stays. Fails, changing nothing, when the device lacks
    /// `CAP_RESIZE_SRQ`, or the new size is not above the armed limit or cannot hold what
    /// is pending (`BAD_PARAM`).
    pub fn resize(&self, max_wr: u32) -> Result<()> {
        let inner = &*self.inner;
        let ctx = inner.pd.ctx();
        if ctx.attr.caps & regs::CAP_RESIZE_SRQ == 0 {
            return Err(Error::Unsupported(
                "resizing an SRQ: the device does not report CAP_RESIZE_SRQ (an rnicd older than ABI 1.11?)",
            ));
        }
        let entries = ring::ring_entries(max_wr, 1)?;
        let t = ctx.transport();
        let new = Ring::new(t, entries, rq_stride(inner.max_sge), ctx.list_kinds())?;
        // Held across the command: nothing is posted to either ring meanwhile.
        let mut rq = inner.rq();
        let mut ring = inner.ring();
        let req = ResizeSrqReq {
            ring: new.page_list(),
            entries,
            srqn: inner.srqn,
        };
        ctx.command_no_body(Opcode::ResizeSrq, req.as_bytes())?;
        // The device reads only the new ring now; the old one is free.
        let old = std::mem::replace(&mut *ring, ManuallyDrop::new(new));
        drop(ManuallyDrop::into_inner(old));
        rq.set_entries(entries);
        Ok(())
    }

    /// Arms the limit: when the device takes a receive that leaves fewer than `limit`
    /// posted, it posts [`super::AsyncEvent::SrqLimitReached`] and disarms it. 0 disarms.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        let req = ModifySrqReq {
            srqn: self.inner.srqn,
            attr_mask: srq_attr::LIMIT,
            max_wr: 0,
            srq_limit: limit,
        };
        self.inner
            .pd
            .ctx()
            .command_no_body(Opcode::ModifySrq, req.as_bytes())
    }

    /// QUERY_SRQ: size, SGEs, the current limit and the receives the device took.
    pub fn query(&self) -> Result<QuerySrqResp> {
        let req = ObjectReq {
            handle: self.inner.srqn,
            reserved: 0,
        };
        self.inner
            .pd
            .ctx()
            .command(Opcode::QuerySrq, req.as_bytes())
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let ring = self.ring.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the ring is not used again: this is the last use of `self`.
        let ring = unsafe { ManuallyDrop::take(ring) };
        let _ = self
            .pd
            .ctx()
            .destroy_or_leak(Opcode::DestroySrq, self.srqn, SRQ, ring);
    }
}
