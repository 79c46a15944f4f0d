//! The doorbell BAR ([`crate::pci::DOORBELL_BAR`]).
//!
//! The BAR is an array of 4 KiB pages backed by memory that the device shares with the
//! VMM, which maps it straight into the guest: a doorbell write is an ordinary store, with
//! no message to the device. The device therefore has to look for doorbells. While it has
//! work it polls them; before it goes idle it sets [`NOTIFY_REQUEST`] in the pages it
//! watches, looks once more, and sleeps. A driver that rings a doorbell then reads
//! [`NOTIFY_REQUEST`] of that page (a full fence between the two) and, only if it is
//! non-zero, writes the page number to the trapped [`crate::regs::DOORBELL_KICK`]
//! register, which wakes the device. This is virtio's notification suppression moved into
//! the doorbell page, where the driver reads it without a round trip.

/// Offset, in every doorbell page, of the device's request to be kicked (u32, written by
/// the device, read by the driver): non-zero means "I may be asleep: kick me".
pub const NOTIFY_REQUEST: u64 = 0x000;
/// Offset, in doorbell page 0, of the command queue doorbell (u32): the driver writes the
/// available ring's `idx` after it published commands.
pub const CMDQ_DOORBELL: u64 = 0x040;
/// Offset, in doorbell page 0, of the admin queue doorbell (u32), used as
/// [`CMDQ_DOORBELL`] is (kick with page 0).
pub const ADMINQ_DOORBELL: u64 = 0x044;
/// Offset, in doorbell page 0, of the function's reset count (u32, written by the device,
/// read by the driver; since ABI 1.6): how many times the function was reset since rnicd
/// started, by any trigger (its driver's `DEVICE_CONTROL.RESET`, FLR, the VMM's
/// DEVICE_RESET, the PF's `RESET_VF` or VF disable, the VMM going away). Every reset
/// zeroes the rest of the BAR and writes the new count here, so a driver that remembers
/// the count after its own reset sees, with one load and no message, that someone else
/// reset the function under it.
pub const RESET_COUNT: u64 = 0x048;
/// Offset, in every doorbell page, of the rung-slot bitmap: [`SLOTS`] bits, bit `i` being
/// bit `i % 8` of byte `i / 8` (so any word width reads it the same on little-endian
/// machines). After writing any queue's doorbell slot, the driver sets the slot's bit (an
/// atomic OR; a plain read-modify-write is also safe, because the device only ever clears
/// bits and re-reads the slots); the device takes the bits (an atomic swap with 0) and
/// looks only at the slots whose bits were set, so finding work costs the same however
/// many queues sit idle.
pub const RUNG_BITMAP: u64 = 0x080;
/// Offset of the first doorbell slot in every page. Slot `i` is the 8 bytes at
/// `SLOTS_BASE + 8 * i`; the device assigns slots when it creates the queue they serve.
pub const SLOTS_BASE: u64 = 0x100;
/// Size of a doorbell slot.
pub const SLOT_SIZE: u64 = 8;
/// Doorbell slots per page.
pub const SLOTS: u32 = ((crate::PAGE_SIZE - SLOTS_BASE) / SLOT_SIZE) as u32;

/// Byte offset in the doorbell BAR of slot `slot` of page `page`.
pub const fn slot_offset(page: u32, slot: u32) -> u64 {
    page as u64 * crate::PAGE_SIZE + SLOTS_BASE + slot as u64 * SLOT_SIZE
}

/// Number of doorbell pages of every function.
pub const PAGES: u32 = 16;
/// Size of the doorbell BAR.
pub const BAR_SIZE: u64 = PAGES as u64 * crate::PAGE_SIZE;
