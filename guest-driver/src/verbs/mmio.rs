//! Send WQEs by MMIO ([`rnic_abi::mmio`]): a WQE written into the QP's window in the
//! doorbell BAR, which the device takes without reading the send ring.

use std::sync::atomic::{fence, Ordering};

use rnic_abi::cmd::Opcode;
use rnic_abi::doorbell::PAGES;
use rnic_abi::mmio::{
    SqWindowResp, WINDOW_EMPTY, WINDOW_FULL, WINDOW_INDEX, WINDOW_SIZE, WINDOW_STATE, WINDOW_WQE,
    WINDOW_WQE_MAX,
};
use rnic_abi::regs;
use rnic_abi::verbs::ObjectReq;
use zerocopy::IntoBytes;

use super::qp::encode_send_wqe;
use super::{Qp, SendWr};
use crate::error::{Error, Result};
use crate::transport::Transport;

/// Writes `wqe`, send-queue index `index`, into the window at BAR offset `window` if the
/// device emptied it; returns whether it did. The caller holds the send queue's lock and
/// rings the doorbell after.
pub(super) fn write_window(t: &dyn Transport, window: u64, index: u32, wqe: &[u8]) -> bool {
    let db = t.doorbells();
    if wqe.len() > WINDOW_WQE_MAX as usize || db.read32(window + WINDOW_STATE) != WINDOW_EMPTY {
        return false;
    }
    // The BAR takes 32-bit stores: the WQE in words (its tail padded with zeros).
    for (i, chunk) in wqe.chunks(4).enumerate() {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        db.write32(window + WINDOW_WQE + 4 * i as u64, u32::from_le_bytes(word));
    }
    // The WQE before its index, the index before the state that hands it over.
    fence(Ordering::Release);
    db.write32(window + WINDOW_INDEX, index);
    fence(Ordering::Release);
    db.write32(window + WINDOW_STATE, WINDOW_FULL);
    true
}

impl Qp {
    /// Asks the device for the QP's MMIO window (`CREATE_SQ_WINDOW`), so that
    /// [`Qp::post_send_mmio`] can write WQEs straight into the doorbell BAR.
    pub fn enable_wqe_mmio(&self) -> Result<()> {
        let ctx = self.pd_ctx();
        if ctx.attr.caps & regs::CAP_WQE_MMIO == 0 {
            return Err(Error::Unsupported(
                "WQEs by MMIO: the device does not report CAP_WQE_MMIO (an rnicd older than ABI 1.3?)",
            ));
        }
        let req = ObjectReq {
            handle: self.qp_num(),
            reserved: 0,
        };
        let resp: SqWindowResp = ctx.command(Opcode::CreateSqWindow, req.as_bytes())?;
        let at = u64::from(resp.page) * rnic_abi::PAGE_SIZE + u64::from(resp.offset);
        let bar = ctx.transport().doorbells().len() as u64;
        if resp.page >= PAGES
            || resp.size != WINDOW_SIZE
            || u64::from(resp.offset) + u64::from(WINDOW_SIZE) > rnic_abi::PAGE_SIZE
            || at + u64::from(WINDOW_SIZE) > bar
        {
            return Err(Error::Device(format!(
                "the device placed the MMIO window at {:#x} ({} bytes), outside the doorbell BAR",
                at, resp.size
            )));
        }
        // Set once: a second call fails on the device (BUSY) before it gets here.
        let _ = self.sq_window.set(at);
        Ok(())
    }

    /// Posts one send WR, writing its WQE into the MMIO window (so the device does not read
    /// it from memory) when the window is free and the WQE fits it (at most 8 SGEs or 128
    /// bytes of inline data), and to the ring otherwise. Returns whether it went by MMIO.
    /// Either way it keeps its place in the send queue's order.
    pub fn post_send_mmio(&self, wr: &SendWr) -> Result<bool> {
        let Some(&window) = self.sq_window.get() else {
            return Err(super::invalid(format!(
                "post_send_mmio on QP {:#x}: call enable_wqe_mmio first",
                self.qp_num()
            )));
        };
        let wqe = encode_send_wqe(wr, &self.caps())?;
        self.post_encoded_sends(std::slice::from_ref(wr), &[wqe], Some(window))
    }
}
