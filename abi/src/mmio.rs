//! Send WQEs by MMIO (ABI 1.3, [`crate::regs::CAP_WQE_MMIO`]).
//!
//! `CREATE_SQ_WINDOW` gives a QP a 256-byte window in the doorbell page of its send queue
//! (doorbell slots the device sets aside). Instead of writing a send WQE into the ring in
//! memory, the driver may write it into the window, with the WQE's send-queue index, and
//! then ring the send doorbell as usual. The device takes WQE `i` from the window when the
//! window holds `i`, and from the ring otherwise, so posts of both kinds keep one order:
//! the send queue's. It never reads the ring entry of a WQE it took from the window.
//!
//! Window layout (offsets from its start):
//!
//! - [`WINDOW_INDEX`]: u32, the send-queue index (free-running, as the doorbell counts)
//!   of the WQE in the window;
//! - [`WINDOW_STATE`]: u32, [`WINDOW_EMPTY`] or [`WINDOW_FULL`]. The driver writes the WQE,
//!   then the index, then `WINDOW_FULL` (each after the one before, release order), only
//!   when it reads `WINDOW_EMPTY`; the device sets `WINDOW_EMPTY` once it has copied the
//!   WQE out. When the window is full, the driver posts to the ring instead;
//! - [`WINDOW_WQE`]: the WQE, at most [`WINDOW_WQE_MAX`] bytes (the 64-byte fixed part and
//!   up to 8 SGEs or 128 bytes of inline data).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of a window.
pub const WINDOW_SIZE: u32 = 256;
/// Offset of the index word.
pub const WINDOW_INDEX: u64 = 0x00;
/// Offset of the state word.
pub const WINDOW_STATE: u64 = 0x04;
/// Offset of the WQE.
pub const WINDOW_WQE: u64 = 0x40;
/// Largest WQE a window holds.
pub const WINDOW_WQE_MAX: u32 = WINDOW_SIZE - WINDOW_WQE as u32;
/// [`WINDOW_STATE`]: the device took what was there; the driver may write.
pub const WINDOW_EMPTY: u32 = 0;
/// [`WINDOW_STATE`]: a WQE waits for the device.
pub const WINDOW_FULL: u32 = 1;

/// `CREATE_SQ_WINDOW` response (request: `verbs::ObjectReq` with the QPN).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SqWindowResp {
    /// Doorbell page of the window (the send doorbell's).
    pub page: u32,
    /// Byte offset of the window in that page (a multiple of [`WINDOW_SIZE`]).
    pub offset: u32,
    /// [`WINDOW_SIZE`].
    pub size: u32,
    /// Must be ignored.
    pub reserved: u32,
}
