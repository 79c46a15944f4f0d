//! Send WQEs by MMIO (`rnic_abi::mmio`): a QP's window in its doorbell page, from which
//! the device takes a WQE instead of reading it from the send ring.
//!
//! The window is made of doorbell slots set aside for the QP (`CREATE_SQ_WINDOW`, in
//! [`super::verbs`]). Whoever reads a send WQE ([`super::wqe::read_send`]: the
//! requester's fetch and the flush of a QP in error) asks the window first ([`holds`]),
//! by the WQE's send-queue index, so a WQE is read from exactly one place and the order
//! of the queue is the order of the indexes, whichever way each WQE came
//! (docs/hardware-interface.md §7.6).

use rnic_abi::doorbell::SLOT_SIZE;
use rnic_abi::mmio::{
    WINDOW_EMPTY, WINDOW_FULL, WINDOW_INDEX, WINDOW_SIZE, WINDOW_STATE, WINDOW_WQE, WINDOW_WQE_MAX,
};

use crate::doorbell::DoorbellBar;

/// Doorbell slots a window takes.
pub const WINDOW_SLOTS: u32 = WINDOW_SIZE / SLOT_SIZE as u32;

/// The most bytes a WQE in a window may take.
pub const WQE_ROOM: u32 = WINDOW_WQE_MAX;

/// Whether the window at byte `w` of the doorbell BAR holds send WQE `index`.
pub fn holds(db: &DoorbellBar, w: u64, index: u32) -> bool {
    // The state is written last by the driver, so its acquire load orders the rest.
    db.read32(w + WINDOW_STATE) == Some(WINDOW_FULL) && db.read32(w + WINDOW_INDEX) == Some(index)
}

/// Reads bytes `[offset, offset + buf.len())` of the WQE in the window at `w`; false if
/// they are beyond [`WQE_ROOM`].
pub fn read(db: &DoorbellBar, w: u64, offset: u64, buf: &mut [u8]) -> bool {
    offset + buf.len() as u64 <= u64::from(WINDOW_WQE_MAX)
        && db.read_bytes(w + WINDOW_WQE + offset, buf)
}

/// Empties the window at `w`: the driver may write its next WQE there.
pub fn release(db: &DoorbellBar, w: u64) {
    db.write32(w + WINDOW_STATE, WINDOW_EMPTY);
}
