//! The rnic hardware interface: everything the device and a driver must agree on.
//!
//! This crate is the single source of truth for the programmer's model that
//! `docs/hardware-interface.md` describes: PCI identity and config-space layout ([`pci`]),
//! the BAR0 register file ([`regs`]), the doorbell BAR ([`doorbell`]), the command queue
//! with its commands ([`cmd`]), and the RDMA objects, work queues and completions
//! ([`verbs`], with the path MTU table [`verbs::mtu`]). The device (`rnicd`) and the guest
//! driver both depend on it, so they cannot disagree about an offset or a layout. So do the
//! tools, the tests and libibverbs, which also share from here the text form of a GID
//! ([`gid`]) and the seeded random generator ([`rng`]).
//!
//! All multi-byte fields are little-endian, as on PCIe. The structures here use native
//! integers, so the crate only builds for little-endian targets.

#![no_std]
#![deny(missing_docs)]

#[cfg(not(target_endian = "little"))]
compile_error!("rnic-abi lays structures out in native order and requires a little-endian target");

pub mod admin;
pub mod cmd;
pub mod ctrlq;
pub mod dc;
pub mod doorbell;
pub mod eth;
pub mod fast_reg;
pub mod gid;
pub mod migration;
pub mod mkey;
pub mod mmio;
pub mod mw;
pub mod pci;
pub mod regs;
pub mod rng;
pub mod session;
pub mod shared_sq;
pub mod srq;
pub mod ud;
pub mod uverbs;
pub mod verbs;
pub mod vfio_user;

/// Major version of this interface. A driver refuses a device whose major differs.
pub const ABI_MAJOR: u16 = 1;
/// Minor version: grows with backwards-compatible additions (new commands, new registers).
pub const ABI_MINOR: u16 = 11;

/// The ABI version as the [`regs::ABI_VERSION`] register reports it: major in bits 31:16.
pub const fn abi_version() -> u32 {
    (ABI_MAJOR as u32) << 16 | ABI_MINOR as u32
}

/// Size of a page as the device counts them (doorbell pages, DMA pages).
pub const PAGE_SIZE: u64 = 4096;
