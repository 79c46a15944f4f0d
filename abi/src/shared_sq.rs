//! Shared send queues (ABI 1.4, [`crate::regs::CAP_SHARED_SQ`]).
//!
//! A shared send queue is a send ring of a PD, with its own doorbell slot and CQ, whose
//! WQEs each name the RC QP (of the same PD, in RTS) that carries them: one queue feeds
//! many connections. Each entry is a [`SharedSendHeader`] followed by a send WQE exactly
//! as a QP's send queue holds it ([`crate::verbs::SendWqe`] and its SGEs or inline data),
//! [`shared_sq_stride`] bytes apart.
//!
//! The device hands the WQEs to their QPs in posting order; each QP sends its share in
//! that order, interleaved with its own send queue's WQEs as they were taken. Completions
//! go to the shared queue's CQ **in posting order**, whichever QP finishes first: a WQE
//! done on a fast connection waits for the WQEs posted before it on slower ones. A
//! completion has `qp_num` = [`SHARED_SQ_CQE_QPN_BIT`] | the queue's number and `src_qp`
//! = the QP that carried the message. An unsignaled WQE that succeeds has no completion
//! (as in a QP's send queue); an error always has one.
//!
//! The doorbell works as a QP's send doorbell: the count of WQEs posted in all, then the
//! slot's bit in `RUNG_BITMAP`, then the kick protocol.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::verbs::{sq_stride, DoorbellSlot, PageList};

/// Set in a shared send queue's completion's `qp_num` above the queue's number (QP
/// numbers have 24 bits).
pub const SHARED_SQ_CQE_QPN_BIT: u32 = 1 << 30;

/// Bytes between entries of a shared send queue of `max_send_sge` SGEs and
/// `max_inline_data` inline bytes: the header, then the send WQE's stride.
pub const fn shared_sq_stride(max_send_sge: u32, max_inline_data: u32) -> u32 {
    let stride = sq_stride(max_send_sge, max_inline_data);
    if stride > u32::MAX - 16 {
        return u32::MAX;
    }
    16 + stride
}

/// `CREATE_SHARED_SQ` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateSharedSqReq {
    /// Protection domain: of the queue and of every QP its WQEs name.
    pub pdn: u32,
    /// Entries: a power of two, at most `max_qp_wr`.
    pub entries: u32,
    /// SGEs per WQE, at most `max_sge`.
    pub max_send_sge: u32,
    /// Inline bytes per WQE, at most `max_inline_data`.
    pub max_inline_data: u32,
    /// The CQ of the queue's completions.
    pub cqn: u32,
    /// Doorbell page for the queue's slot.
    pub doorbell_page: u32,
    /// The ring: `entries * shared_sq_stride(max_send_sge, max_inline_data)` bytes.
    pub ring: PageList,
}

/// `CREATE_SHARED_SQ` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateSharedSqResp {
    /// Shared send queue number, from 1.
    pub ssqn: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The queue's doorbell slot (u32 at +0: WQEs posted in all).
    pub doorbell: DoorbellSlot,
}

/// The first 16 bytes of a shared send queue's entry; the send WQE follows.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SharedSendHeader {
    /// The RC QP that carries the WQE.
    pub qpn: u32,
    /// Must be 0.
    pub reserved: [u32; 3],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes() {
        assert_eq!(size_of::<CreateSharedSqReq>(), 40);
        assert_eq!(size_of::<CreateSharedSqResp>(), 16);
        assert_eq!(size_of::<SharedSendHeader>(), 16);
        assert_eq!(shared_sq_stride(1, 0), 16 + 128);
    }
}
