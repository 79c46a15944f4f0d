//! Memory windows (ABI 1.6, [`crate::regs::CAP_MW`]).
//!
//! A memory window is an rkey of a protection domain that grants remote access to a range
//! of one memory region, with rights of its own: the region's owner hands the window's
//! rkey to a peer instead of the region's, and takes the access back by binding the
//! window elsewhere or invalidating it, without touching the region.
//!
//! `ALLOC_MW` ([`AllocMwReq`]) creates a window of type 1 or 2 with no memory; `DEALLOC_MW`
//! (`verbs::ObjectReq` with the window's key) frees it. A **bind** gives it memory: a
//! send WQE with opcode `wr::BIND_MW`, laid out as [`BindMwWqe`], which the device
//! executes in send-queue order when the requester reaches it, and completes (`wc::BIND_MW`)
//! like any WR. Both types are bound so (ibverbs' `ibv_bind_mw` of a type 1 window posts
//! such a WQE too); they differ in what binds and invalidates them:
//!
//! - **Type 1**: bound any number of times, each bind replacing the last; a bind with
//!   length 0 unbinds. It grants access through any QP of its PD, and cannot be
//!   invalidated (LOCAL_INV or SEND with invalidate of its key fail).
//! - **Type 2** (IBTA type 2B): bound only while free (after `ALLOC_MW`, or once
//!   invalidated), through a QP of its PD, with a length of at least 1; it then grants
//!   access only to requests arriving on that QP, until LOCAL_INV or SEND with invalidate
//!   of its key frees it again. It may be zero-based ([`crate::verbs::ACCESS_ZERO_BASED`]).
//!
//! **Keys.** A window's key is `MW_KEY_BIT | index << 8 | tag`: the index is the window's
//! slot, fixed from `ALLOC_MW` to `DEALLOC_MW`; the tag (the low byte) is the consumer's,
//! set by each bind ([`BindMwWqe::new_key`], ibverbs' `ibv_inc_rkey`), so a peer that
//! kept the key of an earlier bind is refused. MR keys and indirect keys never have
//! [`MW_KEY_BIT`] set. A window's key is an rkey only: as an lkey it is refused as a key
//! that does not exist.
//!
//! **Access through a window** needs, besides what an MR key needs (§7.9 of the
//! datasheet: the QP's own access flags), that the window is bound, of the QP's PD, of
//! that QP (type 2), that its rights include the operation, that the range lies inside
//! the window, and that the region it is bound to is still valid. The region needs
//! `ACCESS_MW_BIND` to be bound to; its own remote rights do not matter (the window's
//! do), but a window with remote write or atomic rights needs a region with local write.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Set in every memory window key; clear in MR keys and indirect keys.
pub const MW_KEY_BIT: u32 = 1 << 30;

/// Most windows a function has at once: their index is 22 bits wide.
pub const MAX_MW_INDEX: u32 = 1 << 22;

/// [`AllocMwReq::mw_type`]: a type 1 window (`IBV_MW_TYPE_1`).
pub const MW_TYPE_1: u8 = 1;
/// [`AllocMwReq::mw_type`]: a type 2 window (`IBV_MW_TYPE_2`; rnic's are type 2B).
pub const MW_TYPE_2: u8 = 2;

/// The access rights a bind may give a window: remote write, read and atomics, and
/// [`crate::verbs::ACCESS_ZERO_BASED`] (type 2 only).
pub const MW_ACCESS_ALL: u32 = crate::verbs::ACCESS_REMOTE_WRITE
    | crate::verbs::ACCESS_REMOTE_READ
    | crate::verbs::ACCESS_REMOTE_ATOMIC
    | crate::verbs::ACCESS_ZERO_BASED;

/// `ALLOC_MW` (0x0124) request. Response: [`AllocMwResp`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AllocMwReq {
    /// Protection domain of the window.
    pub pdn: u32,
    /// [`MW_TYPE_1`] or [`MW_TYPE_2`].
    pub mw_type: u8,
    /// Must be 0.
    pub reserved: [u8; 3],
}

/// `ALLOC_MW` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AllocMwResp {
    /// The window's key: [`MW_KEY_BIT`], its index, and tag 0. It grants nothing until a
    /// bind.
    pub rkey: u32,
    /// Must be ignored.
    pub reserved: u32,
}

/// A `BIND_MW` send WQE (64 bytes): [`crate::verbs::SendWqe`]'s fixed part with the bind's
/// operands where the RDMA and atomic fields are. Nothing follows it: `num_sge` is 0 and
/// the `INLINE` flag is clear. `FENCE`, `SIGNALED` apply as to any WR.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct BindMwWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `wr::BIND_MW`.
    pub opcode: u8,
    /// `send_flags` (`FENCE`, `SIGNALED`).
    pub flags: u8,
    /// Must be 0.
    pub num_sge: u8,
    /// Must be 0.
    pub reserved0: u8,
    /// The window, by a key it had: its index bits name it (the tag may be any).
    pub mw_key: u32,
    /// Where the window starts, in the region's `iova` space (its first byte's address as
    /// the peer names it, unless zero-based).
    pub addr: u64,
    /// The window's key after the bind: the same index as `mw_key`, any tag.
    pub new_key: u32,
    /// The lkey of the region to bind to (of the window's PD, with `ACCESS_MW_BIND`);
    /// ignored by a type 1 unbind (`length` 0).
    pub mr_lkey: u32,
    /// Bytes of the window; 0 unbinds a type 1 window.
    pub length: u64,
    /// Rights: [`MW_ACCESS_ALL`] bits.
    pub access: u32,
    /// Must be 0.
    pub reserved1: u32,
    /// Must be 0.
    pub reserved2: [u8; 16],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes_and_offsets() {
        assert_eq!(size_of::<AllocMwReq>(), 8);
        assert_eq!(size_of::<AllocMwResp>(), 8);
        assert_eq!(size_of::<BindMwWqe>(), size_of::<crate::verbs::SendWqe>());
        let w = BindMwWqe {
            opcode: crate::verbs::wr::BIND_MW,
            mw_key: 0x0102_0304,
            addr: 0x1112_1314_1516_1718,
            new_key: 0x2122_2324,
            mr_lkey: 0x3132_3334,
            length: 0x4142_4344_4546_4748,
            access: 0x5152_5354,
            ..BindMwWqe::default()
        };
        let b = w.as_bytes();
        assert_eq!(b[8], 8);
        assert_eq!(&b[0x0C..0x10], &0x0102_0304u32.to_le_bytes());
        assert_eq!(&b[0x10..0x18], &0x1112_1314_1516_1718u64.to_le_bytes());
        assert_eq!(&b[0x18..0x1C], &0x2122_2324u32.to_le_bytes());
        assert_eq!(&b[0x1C..0x20], &0x3132_3334u32.to_le_bytes());
        assert_eq!(&b[0x20..0x28], &0x4142_4344_4546_4748u64.to_le_bytes());
        assert_eq!(&b[0x28..0x2C], &0x5152_5354u32.to_le_bytes());
        // Where a SendWqe has the key to invalidate, the remote address and key.
        let s = crate::verbs::SendWqe::read_from_bytes(b).unwrap();
        assert_eq!(
            (s.imm_or_inv, s.remote_addr, s.rkey),
            (w.mw_key, w.addr, w.new_key)
        );
    }

    #[test]
    fn window_keys_are_told_from_mr_and_indirect_keys() {
        assert_eq!(MW_KEY_BIT & crate::mkey::INDIRECT_KEY_BIT, 0);
        // The largest window index stays below bit 30.
        assert_eq!(((MAX_MW_INDEX - 1) << 8) & MW_KEY_BIT, 0);
    }
}
