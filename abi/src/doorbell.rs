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

/// Number of doorbell pages of every function.
pub const PAGES: u32 = 16;
/// Size of the doorbell BAR.
pub const BAR_SIZE: u64 = PAGES as u64 * crate::PAGE_SIZE;
