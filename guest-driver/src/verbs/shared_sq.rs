//! Shared send queues ([`rnic_abi::shared_sq`]): one send queue feeding many RC QPs,
//! completing in posting order.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use rnic_abi::cmd::Opcode;
use rnic_abi::regs;
use rnic_abi::shared_sq::{
    shared_sq_stride, CreateSharedSqReq, CreateSharedSqResp, SharedSendHeader,
    SHARED_SQ_CQE_QPN_BIT,
};
use rnic_abi::verbs::DoorbellSlot;
use zerocopy::IntoBytes;

use super::cq::CqInner;
use super::mr::PdInner;
use super::qp::{encode_send_wqe, QpTrack, SendSlot};
use super::ring::{self, Doorbells, Ring};
use super::{Cq, Pd, Qp, QpCaps, SendWr, DOORBELL_PAGE};
use crate::error::{Error, Result};

/// What the logs call a shared send queue.
const SHARED_SQ: &str = "shared send queue";

/// A shared send queue of a PD: [`SharedSq::post_send`] names, per work request, the RC
/// QP (of the same PD, in RTS) that carries it. Completions come on the queue's CQ in
/// posting order, with `qp_num` = [`SHARED_SQ_CQE_QPN_BIT`] | [`SharedSq::ssqn`] and
/// `src_qp` = the QP. Destroyed on drop.
pub struct SharedSq {
    pd: Arc<PdInner>,
    _cq: Arc<CqInner>,
    ssqn: u32,
    caps: QpCaps,
    slot: DoorbellSlot,
    /// Freed only after DESTROY_SHARED_SQ succeeded.
    ring: ManuallyDrop<Ring>,
    /// Posted and completed WRs; the CQ credits it.
    track: Arc<QpTrack>,
}

impl std::fmt::Debug for SharedSq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSq")
            .field("ssqn", &self.ssqn)
            .field("entries", &self.ring.entries())
            .finish_non_exhaustive()
    }
}

impl Pd {
    /// Creates a shared send queue of at least `entries` entries, each with up to
    /// `max_send_sge` SGEs or `max_inline_data` inline bytes, completing on `cq`.
    pub fn create_shared_sq(
        &self,
        entries: u32,
        max_send_sge: u32,
        max_inline_data: u32,
        cq: &Cq,
    ) -> Result<SharedSq> {
        let ctx = self.inner.ctx();
        if ctx.attr.caps & regs::CAP_SHARED_SQ == 0 {
            return Err(Error::Unsupported(
                "shared send queues: the device does not report CAP_SHARED_SQ (an rnicd older than ABI 1.4?)",
            ));
        }
        let entries = ring::ring_entries(entries, 1)?;
        let t = ctx.transport();
        let ring = Ring::new(
            t,
            entries,
            shared_sq_stride(max_send_sge, max_inline_data),
            ctx.list_kinds(),
        )?;
        let req = CreateSharedSqReq {
            pdn: self.pdn(),
            entries,
            max_send_sge,
            max_inline_data,
            cqn: cq.cqn(),
            doorbell_page: DOORBELL_PAGE,
            ring: ring.page_list(),
        };
        let resp: CreateSharedSqResp = ctx.command(Opcode::CreateSharedSq, req.as_bytes())?;
        let slot = match Doorbells::check_slot(t, resp.doorbell) {
            Ok(s) if resp.ssqn & SHARED_SQ_CQE_QPN_BIT == 0 && resp.ssqn != 0 => s,
            other => {
                let _ = ctx.destroy_or_leak(Opcode::DestroySharedSq, resp.ssqn, SHARED_SQ, ring);
                return Err(other.err().unwrap_or_else(|| {
                    Error::Device(format!(
                        "the device numbered a shared send queue {:#x}",
                        resp.ssqn
                    ))
                }));
            }
        };
        let id = SHARED_SQ_CQE_QPN_BIT | resp.ssqn;
        let track = Arc::new(QpTrack::sending(id, cq.cqn(), entries));
        ctx.qps().insert(id, track.clone());
        Ok(SharedSq {
            pd: self.inner.clone(),
            _cq: cq.inner.clone(),
            ssqn: resp.ssqn,
            caps: QpCaps {
                max_send_sge,
                max_inline_data,
                ..QpCaps::default()
            },
            slot,
            ring: ManuallyDrop::new(ring),
            track,
        })
    }
}

impl SharedSq {
    /// The queue's number.
    pub fn ssqn(&self) -> u32 {
        self.ssqn
    }

    /// WRs that can be posted now; completions polled from the CQ free slots.
    pub fn free_slots(&self) -> u32 {
        self.track.sq().free()
    }

    /// Posts `wr`, to be carried by `qp`, and rings the doorbell. Fails with an error
    /// [`super::is_queue_full`] recognises when the queue is full.
    pub fn post_send(&self, qp: &Qp, wr: &SendWr) -> Result<()> {
        let header = SharedSendHeader {
            qpn: qp.qp_num(),
            reserved: [0; 3],
        };
        let mut entry = header.as_bytes().to_vec();
        entry.extend(encode_send_wqe(wr, &self.caps)?);
        let ctx = self.pd.ctx();
        let mut sq = self.track.sq();
        if sq.free() == 0 {
            return Err(super::queue_full(format!(
                "post_send on shared send queue {}: all {} slots hold work requests",
                self.ssqn,
                sq.entries()
            )));
        }
        self.ring.buf().write(self.ring.offset(sq.posted()), &entry);
        sq.push(SendSlot {
            wr_id: wr.wr_id,
            signaled: wr.signaled,
        });
        // Rung under the lock: the doorbell values must reach the device in order.
        ctx.doorbells()
            .ring_queue(ctx.transport(), self.slot, sq.posted())?;
        Ok(())
    }
}

impl Drop for SharedSq {
    fn drop(&mut self) {
        let ctx = self.pd.ctx();
        ctx.qps().remove(&(SHARED_SQ_CQE_QPN_BIT | self.ssqn));
        // SAFETY: the ring is not used again: this is the last use of `self`.
        let ring = unsafe { ManuallyDrop::take(&mut self.ring) };
        let _ = ctx.destroy_or_leak(Opcode::DestroySharedSq, self.ssqn, SHARED_SQ, ring);
    }
}
