//! User verbs through an operating system's RDMA core (ABI 1.9; datasheet §17): what
//! rnic's kernel driver (`rnic.ko`) and its rdma-core provider (`librnic-rdmav34.so`)
//! exchange in the driver data (`udata`) of ib_uverbs commands. The device sees none of
//! these structures; it sees the commands the kernel driver builds from them.
//!
//! The split is the one of every RDMA NIC: the kernel owns the command queue, the event
//! queue and the interrupts; each process (each `ibv_context`, a *user context*) gets one
//! doorbell page of its own and the user kick page ([`crate::regs::USER_KICK_PAGE`]),
//! mapped into it with `mmap` on the context's command file at the offsets
//! [`AllocUcontextResp`] gives. Its CQ and QP rings are its own memory, pinned by the kernel
//! and named to the device by page lists; its WQEs, CQEs and doorbells are the ones of
//! [`crate::verbs`], written and read by the process directly. Memory regions are
//! registered by the kernel from the process's virtual addresses (`ib_umem`).
//!
//! A user context's objects all sit on its doorbell page, so no process can ring another
//! process's queues; keys are checked against the QP's PD by the device, and PDs are per
//! context, so no process can reach another's memory.
//!
//! Every structure is little-endian, 8-byte aligned, with explicit reserved fields that
//! must be 0. A kernel takes a request shorter than the structure (older provider) as
//! zero-extended and writes only as much of a response as the provider asked for.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The uverbs ABI version of rnic's kernel driver (`ib_device_ops::uverbs_abi_ver`): the
/// provider accepts exactly this (`match_min_abi_version` = `match_max_abi_version`).
pub const UVERBS_ABI_VERSION: u32 = 1;

/// The provider's name: the driver file is `/etc/libibverbs.d/rnic.driver` (`driver
/// rnic`), the plug-in `librnic-rdmav34.so` in libibverbs' provider directory.
pub const PROVIDER_NAME: &str = "rnic";

/// Bytes the provider maps at [`AllocUcontextResp::doorbell_offset`] and at
/// [`AllocUcontextResp::kick_offset`]: one page each.
pub const MMAP_LEN: u64 = crate::PAGE_SIZE;

/// `ALLOC_UCONTEXT` (`ibv_get_context`) response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AllocUcontextResp {
    /// The device's `ABI_VERSION` register (major << 16 | minor).
    pub abi_version: u32,
    /// The context's doorbell page: the page number every object of the context is
    /// created on, and what the provider writes to [`crate::regs::USER_KICK`].
    pub doorbell_page: u32,
    /// `mmap` offset (bytes, on the context's command fd) of the context's doorbell page.
    pub doorbell_offset: u64,
    /// `mmap` offset of the user kick page.
    pub kick_offset: u64,
    /// The device's capabilities (`CAPS_HI << 32 | CAPS_LO`).
    pub caps: u64,
}

/// `ALLOC_PD` response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AllocPdResp {
    /// The device's PD number.
    pub pdn: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `CREATE_CQ` request data: the ring, in the process's memory.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateCqReq {
    /// Virtual address of the ring: 4 KiB aligned, `entries * size_of::<verbs::Cqe>()`
    /// bytes, zeroed, readable and writable.
    pub ring_va: u64,
    /// Entries: a power of two, at least 2 and at least the `cqe` asked for, at most the
    /// device's `max_cqe`.
    pub entries: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `RESIZE_CQ` request data (ABI 1.10, `regs::CAP_RESIZE_CQ`): the CQ's new ring, in the
/// process's memory. The kernel moves the CQ there (the device's `RESIZE_CQ`, which
/// copies the completions not polled yet to their indexes in it) and unpins the old ring,
/// which the process may then free; its consumer index stays. No response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ResizeCqReq {
    /// Virtual address of the new ring: 4 KiB aligned, `entries * size_of::<verbs::Cqe>()`
    /// bytes, zeroed, readable and writable.
    pub ring_va: u64,
    /// Entries: a power of two, at least 2, at least the `cqe` asked for and the
    /// completions not polled yet, at most the device's `max_cqe`.
    pub entries: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `CREATE_CQ` response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateCqResp {
    /// The CQ number (the `qp_num`s of its CQEs name QPs, not this).
    pub cqn: u32,
    /// Entries of the ring (the request's).
    pub entries: u32,
    /// The CQ's doorbell slot in the context's doorbell page (consumer index at +0, arm
    /// word at +4: [`crate::verbs::CreateCqResp`]).
    pub doorbell_slot: u32,
    /// Must be ignored.
    pub reserved: u32,
}

/// `CREATE_QP` request data: the rings, in the process's memory. The WQE formats and
/// strides are the device's: `verbs::sq_stride(cap.max_send_sge, cap.max_inline_data)` and
/// `verbs::rq_stride(cap.max_recv_sge)` of the capabilities in the command itself. A QP
/// created with an SRQ (RC only) has no receive ring: `rq_entries` and `rq_va` are 0, and
/// the kernel ignores `max_recv_wr` and `max_recv_sge` (it grants 0 of each).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateQpReq {
    /// Virtual address of the send ring: 4 KiB aligned, `sq_entries * sq_stride` bytes.
    pub sq_va: u64,
    /// Virtual address of the receive ring: 4 KiB aligned, `rq_entries * rq_stride`
    /// bytes; 0 when `rq_entries` is 0.
    pub rq_va: u64,
    /// Send-queue entries: a power of two, at least `cap.max_send_wr`.
    pub sq_entries: u32,
    /// Receive-queue entries: a power of two, at least `cap.max_recv_wr`.
    pub rq_entries: u32,
}

/// `CREATE_QP` response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateQpResp {
    /// The QP number.
    pub qpn: u32,
    /// The send doorbell slot in the context's doorbell page.
    pub sq_slot: u32,
    /// The receive doorbell slot in the context's doorbell page.
    pub rq_slot: u32,
    /// The send ring's stride in bytes (what the kernel computed; the provider checks it
    /// against its own).
    pub sq_stride: u32,
    /// The receive ring's stride in bytes.
    pub rq_stride: u32,
    /// Bytes of inline data a send WQE holds.
    pub max_inline_data: u32,
}

/// `CREATE_SRQ` request data: the ring, in the process's memory (a shared receive queue,
/// [`crate::srq`]; only with [`crate::regs::CAP_SRQ`]). Its WQEs are receive WQEs of
/// stride `verbs::rq_stride(attr.max_sge)` of the `max_sge` in the command itself; its
/// limit is the command's `srq_limit`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateSrqReq {
    /// Virtual address of the ring: 4 KiB aligned, `entries * rq_stride(max_sge)` bytes.
    pub ring_va: u64,
    /// Entries: a power of two, at least 2 and at least the `max_wr` asked for, at most the
    /// device's `max_qp_wr`.
    pub entries: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `MODIFY_SRQ` request data with `IBV_SRQ_MAX_WR` (ABI 1.11, `regs::CAP_RESIZE_SRQ`): the
/// SRQ's new ring, in the process's memory. The kernel moves the SRQ there (the device's
/// `RESIZE_SRQ`, which copies the receives posted and not taken yet to their indexes in
/// it) and unpins the old ring, which the process may then free; its producer index stays.
/// A `MODIFY_SRQ` without `IBV_SRQ_MAX_WR` carries no request data. No response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ResizeSrqReq {
    /// Virtual address of the new ring: 4 KiB aligned, `entries * rq_stride(max_sge)`
    /// bytes (the SRQ's stride), readable and writable.
    pub ring_va: u64,
    /// Entries: a power of two, at least 2 and at least the `max_wr` asked for, above the
    /// armed limit and the receives posted and not taken, at most the device's
    /// `max_qp_wr`.
    pub entries: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `CREATE_SRQ` response data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateSrqResp {
    /// The SRQ number (1 ..= [`crate::srq::MAX_SRQN`]).
    pub srqn: u32,
    /// The SRQ's doorbell slot in the context's doorbell page (u32 at +0: WQEs posted in
    /// all, rung as a receive queue's).
    pub doorbell_slot: u32,
    /// The ring's stride in bytes (what the kernel computed; the provider checks it against
    /// its own).
    pub stride: u32,
    /// Must be ignored.
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_multiples_of_eight() {
        assert_eq!(size_of::<AllocUcontextResp>(), 32);
        assert_eq!(size_of::<AllocPdResp>(), 8);
        assert_eq!(size_of::<CreateCqReq>(), 16);
        assert_eq!(size_of::<CreateCqResp>(), 16);
        assert_eq!(size_of::<CreateQpReq>(), 24);
        assert_eq!(size_of::<CreateQpResp>(), 24);
        assert_eq!(size_of::<CreateSrqReq>(), 16);
        assert_eq!(size_of::<CreateSrqResp>(), 16);
        assert_eq!(size_of::<ResizeSrqReq>(), 16);
    }
}
