//! The kernel's memory keys (`rnic_abi::fast_reg`, docs/hardware-interface.md §16): a
//! PD's DMA key, whose translation is the identity, and fast-registration MRs, which a
//! `REG_MR` work request registers ([`register`]) when the requester reaches it.
//!
//! Both live in the function's MR table ([`super::mr::MrTable`]) beside the regions:
//! their keys are MR keys and they count against the same quota.

use rnic_abi::fast_reg::FastRegWqe;
use rnic_abi::verbs::{send_flags, PageList, ACCESS_REG_MR};
use rnic_abi::PAGE_SIZE;
use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::mr::{Mr, MrTable, Runs};
use super::pages::{page_addresses, PageListError, PagedBuffer};

/// A PD's DMA key: byte `a` is device address `a`, for any `a` the function's DMA
/// reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaKey {
    /// Protection domain.
    pub pdn: u32,
    /// `ACCESS_*` flags: local write, and the remote rights asked for.
    pub access: u32,
}

impl DmaKey {
    /// The device-address run of `[addr, addr + len)` through the DMA key, or `None` if
    /// the range wraps around. The access itself checks that the function's DMA
    /// reaches it.
    pub fn runs(addr: u64, len: u64) -> Option<Runs<'static>> {
        addr.checked_add(len)?;
        let len = usize::try_from(len).ok()?;
        Some(Runs::Identity(
            (len > 0).then_some((GuestAddress(addr), len)),
        ))
    }
}

/// A fast-registration MR's slot, from `ALLOC_FAST_REG_MR` to `DEREG_MR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastRegSlot {
    /// Protection domain.
    pub pdn: u32,
    /// Pages a registration may have.
    pub max_pages: u32,
}

/// Why a REG_MR WQE failed (its completion: `LOC_QP_OP_ERR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastRegError {
    /// The QP is not an RC or UC QP.
    QpType,
    /// SGEs, flags other than `SIGNALED` and `FENCE`, or reserved bytes not 0.
    Malformed,
    /// The key's index is not a fast-registration MR of the QP's PD.
    NotFastReg,
    /// The MR is valid: it must be invalidated first.
    NotFree,
    /// No pages, or more than the MR's `max_pages`.
    PageCount,
    /// A page size other than 4 KiB.
    PageShift,
    /// A page address not 4 KiB aligned.
    Misaligned,
    /// The page list is not in the function's DMA-mapped memory.
    PageListUnreadable,
    /// `iova % 4096 + length` is beyond the pages, or `iova + length` wraps.
    Length,
    /// Unknown access flags, or remote write or atomic without local write.
    Access,
}

/// Runs REG_MR WQE `wqe` of a QP of `pdn` (`rc_or_uc`: whether the QP is an RC or UC
/// QP): checks it as `rnic_abi::fast_reg` says, reads its page list from `mem`, and makes
/// the MR valid under the WQE's key. On failure nothing changes.
pub fn register(
    mrs: &mut MrTable,
    wqe: &FastRegWqe,
    (pdn, rc_or_uc): (u32, bool),
    mem: &GuestMemoryMmap,
) -> Result<(), FastRegError> {
    if !rc_or_uc {
        return Err(FastRegError::QpType);
    }
    let flags = send_flags::SIGNALED | send_flags::FENCE;
    if wqe.num_sge != 0 || wqe.flags & !flags != 0 || wqe.reserved != [0; 16] {
        return Err(FastRegError::Malformed);
    }
    let slot = mrs.fast_reg_target(wqe.key, pdn)?;
    if wqe.page_count == 0 || wqe.page_count > slot.max_pages {
        return Err(FastRegError::PageCount);
    }
    if u32::from(wqe.page_shift) != PAGE_SIZE.trailing_zeros() {
        return Err(FastRegError::PageShift);
    }
    if !super::valid_access(wqe.access, ACCESS_REG_MR) {
        return Err(FastRegError::Access);
    }
    if wqe.iova.checked_add(wqe.length).is_none() {
        return Err(FastRegError::Length);
    }
    // At most MAX_FAST_REG_PAGES entries: one bounded read.
    let pages = page_addresses(&PageList::flat(wqe.page_list, wqe.page_count), mem).map_err(
        |e| match e {
            PageListError::Unmapped => FastRegError::PageListUnreadable,
            PageListError::Invalid | PageListError::TooSmall => FastRegError::Misaligned,
        },
    )?;
    let buffer = PagedBuffer::on_pages(pages, wqe.iova % PAGE_SIZE, wqe.length)
        .map_err(|_| FastRegError::Length)?;
    mrs.fast_register(
        wqe.key,
        Mr {
            pdn,
            access: wqe.access,
            iova: wqe.iova,
            buffer,
            valid: true,
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::mkey::{Access, KeyError};
    use rnic_abi::verbs::{wr, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE};
    use vm_memory::Bytes;

    /// 64 KiB of memory at 0x10000 with a page list at 0x10000 naming 0x12000 and
    /// 0x14000, a table with a fast-registration MR of PD 1 for 2 pages, and a WQE
    /// registering 0x1800 bytes at iova 0x7000_0800 under tag 5.
    fn world() -> (GuestMemoryMmap, MrTable, FastRegWqe) {
        let m = GuestMemoryMmap::from_ranges(&[(GuestAddress(0x10000), 0x10000)]).unwrap();
        m.write_slice(&0x12000u64.to_le_bytes(), GuestAddress(0x10000))
            .unwrap();
        m.write_slice(&0x14000u64.to_le_bytes(), GuestAddress(0x10008))
            .unwrap();
        // And a misaligned page address after them.
        m.write_slice(&0x12001u64.to_le_bytes(), GuestAddress(0x10010))
            .unwrap();
        let mut t = MrTable::new(4);
        let key = t
            .insert_fast_reg(FastRegSlot {
                pdn: 1,
                max_pages: 2,
            })
            .unwrap();
        assert_eq!(key & 0xff, 0, "tag 0");
        assert_ne!(key, 0, "never key 0");
        let wqe = FastRegWqe {
            opcode: wr::REG_MR,
            page_shift: 12,
            key: key | 5,
            iova: 0x7000_0800,
            access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
            page_count: 2,
            page_list: 0x10000,
            length: 0x1800,
            ..FastRegWqe::default()
        };
        (m, t, wqe)
    }

    #[test]
    fn a_registration_maps_the_pages_until_invalidated() {
        let (m, mut t, wqe) = world();
        let check = |t: &MrTable, key| {
            t.check(key, 1, Access::RemoteWrite, 0x7000_0f00, 0x200)
                .map(|r| r.collect::<Vec<_>>())
        };
        assert_eq!(check(&t, wqe.key), Err(KeyError::NoSuchKey), "free");
        register(&mut t, &wqe, (1, true), &m).unwrap();
        assert_eq!(
            check(&t, wqe.key).unwrap(),
            [
                (GuestAddress(0x12f00), 0x100),
                (GuestAddress(0x14000), 0x100)
            ]
        );
        assert_eq!(
            register(&mut t, &wqe, (1, true), &m),
            Err(FastRegError::NotFree)
        );
        t.invalidate(wqe.key, 1).unwrap();
        assert_eq!(check(&t, wqe.key), Err(KeyError::NoSuchKey));
        let again = FastRegWqe {
            key: wqe.key + 1,
            ..wqe
        };
        register(&mut t, &again, (1, true), &m).unwrap();
        assert_eq!(check(&t, wqe.key), Err(KeyError::NoSuchKey), "old tag");
        assert!(check(&t, again.key).is_ok());
        assert_eq!(t.count_in_pd(1), 1);
        assert!(t.remove_fast_reg(wqe.key).is_some(), "any tag names it");
        assert_eq!(t.count_in_pd(1), 0);
    }

    #[test]
    fn every_failure_changes_nothing() {
        let (m, mut t, wqe) = world();
        let ordinary = t
            .insert(Mr {
                pdn: 1,
                access: 0,
                iova: 0,
                buffer: PagedBuffer::default(),
                valid: true,
            })
            .unwrap();
        let cases = [
            (FastRegWqe { num_sge: 1, ..wqe }, FastRegError::Malformed),
            (
                FastRegWqe {
                    flags: send_flags::INLINE,
                    ..wqe
                },
                FastRegError::Malformed,
            ),
            (
                FastRegWqe {
                    key: ordinary,
                    ..wqe
                },
                FastRegError::NotFastReg,
            ),
            (
                FastRegWqe {
                    page_count: 3,
                    ..wqe
                },
                FastRegError::PageCount,
            ),
            (
                FastRegWqe {
                    page_count: 0,
                    ..wqe
                },
                FastRegError::PageCount,
            ),
            (
                FastRegWqe {
                    page_shift: 13,
                    ..wqe
                },
                FastRegError::PageShift,
            ),
            (
                FastRegWqe {
                    page_list: 0x10010,
                    page_count: 1,
                    length: 0x100,
                    ..wqe
                },
                FastRegError::Misaligned,
            ),
            (
                FastRegWqe {
                    page_list: 0xfff8,
                    ..wqe
                },
                FastRegError::PageListUnreadable,
            ),
            (
                FastRegWqe {
                    length: 0x2801,
                    ..wqe
                },
                FastRegError::Length,
            ),
            (
                FastRegWqe {
                    iova: u64::MAX - 4,
                    ..wqe
                },
                FastRegError::Length,
            ),
            (
                FastRegWqe {
                    access: ACCESS_REMOTE_WRITE,
                    ..wqe
                },
                FastRegError::Access,
            ),
            (
                FastRegWqe {
                    access: 1 << 20,
                    ..wqe
                },
                FastRegError::Access,
            ),
        ];
        for (bad, why) in cases {
            assert_eq!(register(&mut t, &bad, (1, true), &m), Err(why), "{bad:?}");
            assert!(t.get(bad.key).is_none() || bad.key == ordinary);
        }
        assert_eq!(
            register(&mut t, &wqe, (2, true), &m),
            Err(FastRegError::NotFastReg)
        );
        assert_eq!(
            register(&mut t, &wqe, (1, false), &m),
            Err(FastRegError::QpType)
        );
        register(&mut t, &wqe, (1, true), &m).unwrap();
    }

    #[test]
    fn the_dma_key_is_the_identity_and_cannot_be_invalidated() {
        let mut t = MrTable::new(4);
        let key = t
            .insert_dma(DmaKey {
                pdn: 1,
                access: ACCESS_LOCAL_WRITE,
            })
            .unwrap();
        let runs: Vec<_> = t
            .check(key, 1, Access::LocalWrite, 0x1234_5678, 0x10)
            .unwrap()
            .collect();
        assert_eq!(runs, [(GuestAddress(0x1234_5678), 0x10)]);
        assert_eq!(t.check(key, 1, Access::LocalRead, 0, 0).unwrap().count(), 0);
        assert_eq!(
            t.check(key, 1, Access::RemoteRead, 0, 1).map(drop),
            Err(KeyError::NoAccess)
        );
        assert_eq!(
            t.check(key, 2, Access::LocalRead, 0, 1).map(drop),
            Err(KeyError::OtherPd)
        );
        assert_eq!(
            t.check(key, 1, Access::LocalRead, u64::MAX, 2).map(drop),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(t.invalidate(key, 1), Err(KeyError::NoAccess));
        assert_eq!(t.kernel_keys_in_pd(1), 1);
        assert!(t.remove_dma(key));
        assert_eq!(
            t.check(key, 1, Access::LocalRead, 0, 1).map(drop),
            Err(KeyError::NoSuchKey)
        );
    }
}
