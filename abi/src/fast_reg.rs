//! Kernel memory keys (ABI 1.8, [`crate::regs::CAP_FAST_REG`]): the DMA key and
//! fast-registration MRs, the two kinds of key an operating system's RDMA core gives its
//! in-kernel users (the Linux kernel's `pd->local_dma_lkey` and `IB_MR_TYPE_MEM_REG` MRs
//! with `IB_WR_REG_MR`, which nvme-rdma and rpcrdma need). Datasheet §16.
//!
//! - **The DMA key** (`REG_DMA_MR`, [`RegDmaMrReq`]): a key of a PD whose address space
//!   is the function's device address space itself: byte `a` of the key is device
//!   address `a`, for any `a` the function's DMA reaches (the IBTA's *reserved L_Key*).
//!   Every access is still checked against what the VMM mapped for the function, as
//!   every DMA of the device is; nothing else bounds it. A driver gives it only to code
//!   it trusts with all of its memory (an OS kernel, never a user process). Its rights
//!   are [`crate::verbs::ACCESS_LOCAL_WRITE`] and, if asked for, the remote ones (Linux's
//!   `IB_PD_UNSAFE_GLOBAL_RKEY`). `DEREG_MR` destroys it; nothing invalidates it
//!   (`LOCAL_INV` and SEND with invalidate of it fail).
//! - **A fast-registration MR** (`ALLOC_FAST_REG_MR`, [`AllocFastRegMrReq`]) is an MR
//!   slot of a PD with room for `max_pages` pages and no memory: it starts *free*, its key
//!   grants nothing. A send WQE with opcode [`crate::verbs::wr::REG_MR`], laid out as
//!   [`FastRegWqe`], registers memory under it in send-queue order, as the requester
//!   reaches it, and completes with [`crate::verbs::wc::REG_MR`]. The MR is then *valid*
//!   under the WQE's key until LOCAL_INV or SEND with invalidate of that key frees it
//!   again. Work requests posted after the REG_MR WQE on the same QP may use the key.
//!
//! **Keys.** A fast-registration MR's key is an MR key (`index << 8 | tag`). The index is
//! fixed from `ALLOC_FAST_REG_MR` to `DEREG_MR`; the tag (the low byte) is the
//! consumer's, chosen by each REG_MR WQE ([`FastRegWqe::key`], Linux's
//! `ib_update_fast_reg_key`), so a peer that kept the key of an earlier registration is
//! refused. `DEREG_MR` takes any key of the index (its tag does not count, as
//! `DEALLOC_MW`'s), valid or free.
//!
//! **A REG_MR WQE fails** (completion status `LOC_QP_OP_ERR`, the QP to the error state,
//! as rxe) when its key's index is not a fast-registration MR of the QP's PD, the MR is
//! not free, `page_count` exceeds its `max_pages`, `page_shift` is not 12, a page address
//! is not 4 KiB aligned, the page list cannot be read, `iova % 4096 + length` exceeds
//! `page_count` pages, the access flags are not a valid combination (remote write or
//! atomic without local write), or the QP is not RC or UC. The pages themselves are not
//! checked then: an access that meets one the function's DMA does not reach fails, as
//! every DMA of the device does.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Most pages one fast-registration MR may hold (`ib_device_attr.max_fast_reg_page_list_len`).
pub const MAX_FAST_REG_PAGES: u32 = 512;

/// `REG_DMA_MR` (0x0126) request. Response: [`crate::verbs::RegMrResp`] (lkey and rkey
/// are the same key).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegDmaMrReq {
    /// Protection domain of the key.
    pub pdn: u32,
    /// `ACCESS_*` flags: [`crate::verbs::ACCESS_LOCAL_WRITE`], optionally with remote
    /// write, read and atomic access.
    pub access: u32,
}

/// `ALLOC_FAST_REG_MR` (0x0127) request. Response: [`crate::verbs::RegMrResp`]: the MR's
/// key with tag 0, free.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AllocFastRegMrReq {
    /// Protection domain of the MR.
    pub pdn: u32,
    /// Pages the MR can hold: 1 ..= [`MAX_FAST_REG_PAGES`].
    pub max_pages: u32,
}

/// A REG_MR send WQE: [`crate::verbs::SendWqe`]'s 64 bytes with the registration where
/// the RDMA and atomic fields are. `num_sge` must be 0; `flags` may have `SIGNALED` and
/// `FENCE`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct FastRegWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// [`crate::verbs::wr::REG_MR`].
    pub opcode: u8,
    /// `send_flags`.
    pub flags: u8,
    /// Must be 0.
    pub num_sge: u8,
    /// log2 of the page size of the page list: 12 (4 KiB) is the only one.
    pub page_shift: u8,
    /// The key to register under: the MR's index with a new tag in the low byte.
    pub key: u32,
    /// The address the region is known by in work requests and remote keys.
    pub iova: u64,
    /// `ACCESS_*` flags of the registration.
    pub access: u32,
    /// Pages in the page list: 1 ..= the MR's `max_pages`.
    pub page_count: u32,
    /// Device address of the page list: `page_count` little-endian u64 page addresses,
    /// read when the WQE runs. Byte `iova` is byte `iova % 4096` of the first page.
    pub page_list: u64,
    /// Length of the region in bytes.
    pub length: u64,
    /// Must be 0.
    pub reserved: [u8; 16],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::SendWqe;
    use core::mem::offset_of;

    #[test]
    fn the_fast_reg_wqe_overlays_the_send_wqe() {
        assert_eq!(size_of::<FastRegWqe>(), size_of::<SendWqe>());
        assert_eq!(offset_of!(FastRegWqe, opcode), offset_of!(SendWqe, opcode));
        assert_eq!(offset_of!(FastRegWqe, flags), offset_of!(SendWqe, flags));
        assert_eq!(
            offset_of!(FastRegWqe, num_sge),
            offset_of!(SendWqe, num_sge)
        );
        assert_eq!(offset_of!(FastRegWqe, key), 12);
        assert_eq!(offset_of!(FastRegWqe, page_list), 32);
        assert_eq!(size_of::<RegDmaMrReq>(), 8);
        assert_eq!(size_of::<AllocFastRegMrReq>(), 8);
    }
}
