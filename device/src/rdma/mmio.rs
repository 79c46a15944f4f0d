//! Send WQEs by MMIO (`rnic_abi::mmio`): a QP's window in its doorbell page, from which
//! the device takes a WQE instead of reading it from the send ring.
//!
//! The window is made of doorbell slots set aside for the QP. Whoever reads a send WQE
//! ([`read_send`]: the requester's fetch and the flush of a QP in error) asks the window
//! first, by the WQE's send-queue index, so a WQE is read from exactly one place and the
//! order of the queue is the order of the indexes, whichever way each WQE came.

use rnic_abi::cmd::Status;
use rnic_abi::doorbell::{slot_offset, SLOTS, SLOT_SIZE};
use rnic_abi::mmio::{
    SqWindowResp, WINDOW_EMPTY, WINDOW_FULL, WINDOW_INDEX, WINDOW_SIZE, WINDOW_STATE, WINDOW_WQE,
    WINDOW_WQE_MAX,
};
use rnic_abi::verbs::ObjectReq;

use super::qp::{QpCaps, WorkQueue};
use super::wqe::{decode_send, SendOp, WqeError};
use super::{decode, reply, Env, RdmaState, SlotOwner};
use crate::commands::Response;

/// Doorbell slots a window takes.
const WINDOW_SLOTS: u32 = WINDOW_SIZE / SLOT_SIZE as u32;

/// Reads send WQE `index` of `sq`: from its window if the window holds that WQE (and
/// frees the window), from the ring otherwise.
pub fn read_send(sq: &WorkQueue, caps: &QpCaps, env: &Env, index: u32) -> Result<SendOp, WqeError> {
    if let Some(w) = sq.window {
        let db = env.doorbells;
        // The state is written last by the driver, so its acquire load orders the rest.
        if db.read32(w + WINDOW_STATE) == Some(WINDOW_FULL)
            && db.read32(w + WINDOW_INDEX) == Some(index)
        {
            let op = decode_send(
                |offset, buf| {
                    offset + buf.len() as u64 <= u64::from(WINDOW_WQE_MAX)
                        && db.read_bytes(w + WINDOW_WQE + offset, buf)
                },
                caps,
                WINDOW_WQE_MAX,
            );
            db.write32(w + WINDOW_STATE, WINDOW_EMPTY);
            return op;
        }
    }
    super::wqe::read_send(sq, caps, env.r, index)
}

impl RdmaState {
    /// `CREATE_SQ_WINDOW`: sets aside a window of slots in the page of the QP's send
    /// doorbell.
    pub(super) fn create_sq_window(
        &mut self,
        body: &[u8],
        env: &Env,
    ) -> Result<Response, Response> {
        let req: ObjectReq = decode(body)?;
        let qpn = req.handle;
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(Response::error(Status::NotFound, qpn))?;
        if qp.sq.window.is_some() {
            return Err(Response::error(Status::Busy, qpn));
        }
        let page = qp.sq_slot.0;
        // An aligned run of free slots (the page is already charged: the QP's doorbells
        // are in it).
        let first = (0..SLOTS / WINDOW_SLOTS)
            .map(|i| i * WINDOW_SLOTS)
            .find(|&s| (s..s + WINDOW_SLOTS).all(|t| !self.slots.contains_key(&(page, t))))
            .ok_or(Response::error(Status::NoResources, page))?;
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
}
