//! Pipelined memory registration through a control queue (ABI 1.4,
//! [`crate::regs::CAP_PIPELINED_REG`]).
//!
//! A control queue is a ring of [`CtrlWqe`]s with its own doorbell slot and a CQ. The
//! driver first reserves memory keys with `RESERVE_MKEYS` (a command, one round trip for
//! up to [`MAX_RESERVE`] keys): a reserved key is *pending*. Registering memory under a
//! pending key is then a control WQE ([`ctrl_op::REG_MR`]) that the driver posts and
//! forgets: it may post work requests naming the key at once.
//!
//! The device runs control WQEs in posting order and reports each on the control queue's
//! CQ (opcode [`crate::verbs::wc::REG_MR`], `qp_num` = [`CTRLQ_CQE_QPN_BIT`] | the queue's number,
//! `imm_or_inv` = the key). A send WQE whose local SGE names a pending key waits, and the
//! QP's send queue with it, until the registration ran; if it failed, the key stays
//! unusable and the WQE fails with `LOC_PROT_ERR` as for any key that does not exist.
//! A key is pending until a registration succeeds or `DEREG_MR` releases it.
//!
//! The doorbell works as a send queue's: the driver writes the count of WQEs posted in
//! all to the slot, then sets the slot's bit in `RUNG_BITMAP` (and kicks if asked).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::verbs::{DoorbellSlot, PageList};

/// Bytes between control WQEs in the ring.
pub const CTRL_WQE_STRIDE: u32 = 64;

/// Most keys one `RESERVE_MKEYS` hands out.
pub const MAX_RESERVE: u32 = 32;

/// Set in a control completion's `qp_num` above the queue's number: QP numbers are 24
/// bits, so a control completion is never taken for a QP's.
pub const CTRLQ_CQE_QPN_BIT: u32 = 1 << 31;

/// Control WQE operations ([`CtrlWqe::opcode`]).
pub mod ctrl_op {
    /// Register memory under a pending key.
    pub const REG_MR: u8 = 1;
}

/// `CREATE_CTRLQ` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateCtrlqReq {
    /// Entries: a power of two, at most `max_qp_wr`.
    pub entries: u32,
    /// The CQ that takes the control WQEs' completions.
    pub cqn: u32,
    /// Doorbell page for the queue's slot.
    pub doorbell_page: u32,
    /// Must be 0.
    pub reserved: u32,
    /// The ring: `entries * CTRL_WQE_STRIDE` bytes.
    pub ring: PageList,
}

/// `CREATE_CTRLQ` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateCtrlqResp {
    /// Control queue number, from 1.
    pub ctrlqn: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The queue's doorbell slot (u32 at +0: WQEs posted in all).
    pub doorbell: DoorbellSlot,
}

/// `RESERVE_MKEYS` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ReserveMkeysReq {
    /// Protection domain of the keys.
    pub pdn: u32,
    /// Keys wanted, 1 ..= [`MAX_RESERVE`].
    pub count: u32,
}

/// `RESERVE_MKEYS` response: `count` keys follow it, little-endian u32s, in a response of
/// `8 + 4 * MAX_RESERVE` bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ReserveMkeysResp {
    /// Keys reserved (all that were asked for: the command reserves all or none).
    pub count: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The keys; the first `count` are valid.
    pub keys: [u32; MAX_RESERVE as usize],
}

/// A control WQE.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CtrlWqe {
    /// Reported in the completion.
    pub wr_id: u64,
    /// A [`ctrl_op`].
    pub opcode: u8,
    /// Must be 0.
    pub flags: u8,
    /// Must be 0.
    pub reserved: u16,
    /// The pending key to register under (lkey and rkey).
    pub key: u32,
    /// `ACCESS_*` flags.
    pub access: u32,
    /// Must be 0.
    pub reserved2: u32,
    /// Address of the first byte in work requests.
    pub iova: u64,
    /// Bytes.
    pub length: u64,
    /// The pages (as `REG_MR`'s).
    pub pages: PageList,
    /// Must be 0.
    pub reserved3: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes() {
        assert_eq!(size_of::<CreateCtrlqReq>(), 32);
        assert_eq!(size_of::<CreateCtrlqResp>(), 16);
        assert_eq!(size_of::<ReserveMkeysReq>(), 8);
        assert_eq!(size_of::<ReserveMkeysResp>(), 8 + 4 * MAX_RESERVE as usize);
        assert_eq!(size_of::<CtrlWqe>(), CTRL_WQE_STRIDE as usize);
    }
}
