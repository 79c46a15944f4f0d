//! Indirect and pattern memory keys (ABI 1.3, [`crate::regs::CAP_INDIRECT_MKEY`] and
//! [`crate::regs::CAP_PATTERN_MKEY`]).
//!
//! Both are keys of a protection domain that name no memory of their own: they map their
//! address range onto ranges of ordinary MR keys ("direct keys"), and work wherever an MR
//! key does: in a local SGE (lkey), and as the rkey of an incoming RDMA WRITE, READ or
//! atomic. Their range starts at address 0 (they are zero-based).
//!
//! - An **indirect key** is a list of `(direct key, address, length)` entries laid back to
//!   back: byte `o` of the key is byte `o - (lengths of the entries before)` of the entry
//!   it falls in.
//! - A **pattern key** repeats one block of a direct key with a period: byte `o` of the
//!   key is byte `base_addr + (o / byte_count) * stride + o % byte_count` of `base_key`,
//!   for `o < byte_count * repeat`.
//!
//! Every access through such a key is checked twice, and needs both: against the key's
//! own access flags, PD, validity and length, and, for each range it reaches, against the
//! direct key's (its PD, access flags, validity and bounds). A refused access touches no
//! byte of any range. `DEREG_MR` destroys either kind of key; `DEREG_MR` of a direct key
//! that a key of this module names fails with `BUSY`.
//!
//! Keys of this module have bit 31 set ([`INDIRECT_KEY_BIT`]); MR keys never do.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Set in every indirect or pattern key, clear in every MR key.
pub const INDIRECT_KEY_BIT: u32 = 1 << 31;

/// [`CreateIndirectKeyReq::flags`]: a one-shot READ grant ([`crate::regs::CAP_ONE_SHOT_READ`]).
/// The key's `access` must be `ACCESS_REMOTE_READ` alone. The first RDMA READ that reaches
/// the responder through it consumes the grant: later READs through it fail with a remote
/// access error (the requester's `REM_ACCESS_ERR`), while the responder may still resend
/// the responses of that one READ (a requester's retry after a lost response).
pub const KEY_ONE_SHOT_READ: u32 = 1 << 0;

/// Most entries one indirect key may have.
pub const MAX_INDIRECT_ENTRIES: u32 = 256;

/// Most blocks one pattern key may have: bounds the ranges one access through it reaches
/// (and so the work a single remote request can ask of the device).
pub const MAX_PATTERN_REPEAT: u32 = 1 << 16;

/// `CREATE_INDIRECT_KEY` request: this fixed part, then `num_entries`
/// [`crate::verbs::Sge`] entries (`addr` in the direct key's address space, `length` > 0,
/// `lkey` a direct key of the same PD). Response: [`crate::verbs::RegMrResp`] (lkey and
/// rkey are the same key).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateIndirectKeyReq {
    /// Protection domain of the key and of every entry's key.
    pub pdn: u32,
    /// `ACCESS_*` flags of the key (as `REG_MR` accepts them).
    pub access: u32,
    /// Number of entries: 1 ..= [`MAX_INDIRECT_ENTRIES`].
    pub num_entries: u32,
    /// [`KEY_ONE_SHOT_READ`] or 0 (ABI 1.3; other bits must be 0).
    pub flags: u32,
}

/// `CREATE_PATTERN_KEY` request. Response: [`crate::verbs::RegMrResp`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreatePatternKeyReq {
    /// Protection domain of the key and of `base_key`.
    pub pdn: u32,
    /// `ACCESS_*` flags of the key (as `REG_MR` accepts them).
    pub access: u32,
    /// Address (in `base_key`'s space) of the first block.
    pub base_addr: u64,
    /// A direct key of the same PD.
    pub base_key: u32,
    /// Bytes of each block, at least 1.
    pub byte_count: u32,
    /// Bytes from one block's start to the next's, at least `byte_count`.
    pub stride: u64,
    /// Number of blocks, 1 ..= [`MAX_PATTERN_REPEAT`]. The key is `byte_count * repeat`
    /// bytes long; the blocks must lie inside `base_key`'s region.
    pub repeat: u32,
    /// Must be 0.
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes() {
        assert_eq!(size_of::<CreateIndirectKeyReq>(), 16);
        assert_eq!(size_of::<CreatePatternKeyReq>(), 40);
    }
}
