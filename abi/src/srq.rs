//! Shared receive queues (ABI 1.3, [`crate::regs::CAP_SRQ`]).
//!
//! An SRQ is a receive ring of its own, with its own doorbell slot, that any number of RC
//! QPs of its PD take their receives from: a QP created with
//! [`crate::verbs::CreateQpReq::srqn`] non-zero has no receive queue of its own. Each
//! incoming SEND (or RDMA WRITE with immediate) takes the SRQ's next receive WQE, in the
//! order they were posted, whichever QP it arrives on; the completion goes to that QP's
//! receive CQ with that QP's number. An empty SRQ answers with an RNR NAK.
//!
//! The doorbell works as a QP's receive doorbell: the driver writes the count of WQEs it
//! posted in all to the slot, then sets the slot's bit in `RUNG_BITMAP`. WQEs have the
//! receive WQE format ([`crate::verbs::RecvWqe`] + SGEs, stride
//! [`crate::verbs::rq_stride`]`(max_sge)`).
//!
//! The limit: while `srq_limit` is non-zero, the device posts
//! [`crate::verbs::event::SRQ_LIMIT_REACHED`] (object = SRQ number) when it takes a WQE
//! that leaves fewer than `srq_limit` posted and not yet taken, and sets the limit to 0
//! (disarmed) until `MODIFY_SRQ` arms it again, as ibverbs defines it.
//!
//! A QP on an SRQ that enters the error state flushes only the receive it had taken (a
//! message in progress); the SRQ's WQEs stay for the other QPs.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::verbs::{DoorbellSlot, PageList};

/// Largest SRQ number: QPs name their SRQ in a 16-bit field.
pub const MAX_SRQN: u32 = 0xFFFF;

/// `MODIFY_SRQ` attribute mask bits, as `enum ibv_srq_attr_mask`.
pub mod srq_attr {
    /// `max_wr`: `MODIFY_SRQ` refuses it (`BAD_PARAM`); resizing is `RESIZE_SRQ`
    /// ([`super::ResizeSrqReq`], ABI 1.11), which needs the new ring.
    pub const MAX_WR: u32 = 1 << 0;
    /// `srq_limit`.
    pub const LIMIT: u32 = 1 << 1;
}

/// `CREATE_SRQ` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateSrqReq {
    /// Protection domain (of the SRQ and of every QP that uses it).
    pub pdn: u32,
    /// Entries: a power of two, at most `max_qp_wr`.
    pub entries: u32,
    /// SGEs per receive WQE, at most `max_sge`.
    pub max_sge: u32,
    /// Initial limit (0: disarmed); less than `entries`.
    pub srq_limit: u32,
    /// Doorbell page for the SRQ's slot.
    pub doorbell_page: u32,
    /// Must be 0.
    pub reserved: u32,
    /// The ring: `entries * rq_stride(max_sge)` bytes.
    pub ring: PageList,
}

/// `CREATE_SRQ` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateSrqResp {
    /// SRQ number, 1 ..= [`MAX_SRQN`].
    pub srqn: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The SRQ's doorbell slot (u32 at +0: WQEs posted in all).
    pub doorbell: DoorbellSlot,
}

/// `MODIFY_SRQ` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ModifySrqReq {
    /// The SRQ.
    pub srqn: u32,
    /// [`srq_attr`] bits.
    pub attr_mask: u32,
    /// New size (with [`srq_attr::MAX_WR`]; refused: `RESIZE_SRQ` resizes).
    pub max_wr: u32,
    /// New limit (with [`srq_attr::LIMIT`]): 0 disarms, otherwise less than the entries.
    pub srq_limit: u32,
}

/// `RESIZE_SRQ` request (ABI 1.11, [`crate::regs::CAP_RESIZE_SRQ`]): the SRQ's new ring,
/// of the SRQ's stride (`rq_stride(max_sge)` of `CREATE_SRQ`). The device copies the
/// receive WQEs the driver posted (the count in the SRQ's doorbell slot) and the device has
/// not taken into the new ring, each at its free-running index modulo the new size, and
/// reads only the new ring from then on. Indexes keep counting: the driver keeps its
/// producer index and writes the new ring from it, modulo the new size. WQEs the device
/// took already (a message in progress) are not read again. The armed limit stays.
/// `BAD_PARAM` (syndrome `entries`) for a size that is not a power of two in
/// 1 ..= `max_qp_wr`, not above the armed limit, or smaller than the WQEs posted and not
/// taken (or a posted count more than the old ring holds); on any refusal the SRQ keeps its
/// ring.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ResizeSrqReq {
    /// The new ring: `entries * rq_stride(max_sge)` bytes, which the device writes.
    pub ring: PageList,
    /// Its entries: a power of two.
    pub entries: u32,
    /// The SRQ.
    pub srqn: u32,
}

/// `QUERY_SRQ` response (request: `verbs::ObjectReq` with the SRQ number).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QuerySrqResp {
    /// Entries.
    pub max_wr: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// The current limit (0 once the limit event fired).
    pub srq_limit: u32,
    /// WQEs the device has taken, in all.
    pub consumed: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes() {
        assert_eq!(size_of::<CreateSrqReq>(), 40);
        assert_eq!(size_of::<CreateSrqResp>(), 16);
        assert_eq!(size_of::<ModifySrqReq>(), 16);
        assert_eq!(size_of::<QuerySrqResp>(), 16);
        assert_eq!(size_of::<ResizeSrqReq>(), 24);
    }
}
