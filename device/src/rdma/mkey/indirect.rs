//! Indirect and pattern memory keys (`rnic_abi::mkey`): keys that own no memory and map
//! their zero-based range onto ranges of MR keys.
//!
//! They live in their own table inside the [`super::mr::MrTable`], under keys with
//! [`INDIRECT_KEY_BIT`] set, so [`super::mr::MrTable::check`] resolves them wherever an MR key is
//! accepted: the requester's SGEs, the responder's rkeys, the completer's READ targets.
//! An access is checked against the key (validity, PD, access flags, length) and then,
//! range by range, against each direct key it reaches; the runs are only returned once
//! every range passed, so a refused access touches nothing.
//!
//! Entries name direct keys only: an indirect key never points to another, so a lookup
//! has one level and no cycle. A direct key that an entry names cannot be deregistered
//! (`BUSY`); invalidating it (LOCAL_INV, SEND with invalidate) makes the accesses that
//! reach it through the indirect key fail, as they would directly.

use std::collections::BTreeMap;

use rnic_abi::mkey::INDIRECT_KEY_BIT;
use vm_memory::GuestAddress;

use super::{admits, Access, KeyError};

/// How a key's range maps onto direct keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Entries back to back: `(direct key, address in its space, length)`.
    List(Vec<(u32, u64, u64)>),
    /// Block `i` (of `byte_count` bytes) is at `base_addr + i * stride` of `base_key`.
    Pattern {
        /// The direct key.
        base_key: u32,
        /// Where block 0 starts.
        base_addr: u64,
        /// Bytes per block.
        byte_count: u64,
        /// Bytes from one block's start to the next's.
        stride: u64,
        /// Blocks.
        repeat: u64,
    },
}

impl Layout {
    /// Bytes the key covers.
    pub fn length(&self) -> u64 {
        match self {
            Layout::List(entries) => entries.iter().map(|e| e.2).sum(),
            Layout::Pattern {
                byte_count, repeat, ..
            } => byte_count * repeat,
        }
    }

    /// Whether an entry names direct key `key`.
    pub fn names(&self, key: u32) -> bool {
        match self {
            Layout::List(entries) => entries.iter().any(|e| e.0 == key),
            Layout::Pattern { base_key, .. } => *base_key == key,
        }
    }

    /// Calls `f(direct key, address, length)` for each direct range that bytes
    /// `[offset, offset + len)` of the key reach, in order; the caller has checked that
    /// the bytes are inside the key.
    pub fn pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(u32, u64, u64) -> Result<(), KeyError>,
    ) -> Result<(), KeyError> {
        let end = offset + len;
        match self {
            Layout::List(entries) => {
                let mut start = 0u64;
                for &(key, addr, n) in entries {
                    let (lo, hi) = (offset.max(start), end.min(start + n));
                    if lo < hi {
                        f(key, addr + (lo - start), hi - lo)?;
                    }
                    start += n;
                    if start >= end {
                        break;
                    }
                }
            }
            Layout::Pattern {
                base_key,
                base_addr,
                byte_count,
                stride,
                ..
            } => {
                let mut at = offset;
                while at < end {
                    let (block, within) = (at / byte_count, at % byte_count);
                    let n = (byte_count - within).min(end - at);
                    f(*base_key, base_addr + block * stride + within, n)?;
                    at += n;
                }
            }
        }
        Ok(())
    }
}

/// An indirect or pattern key.
#[derive(Debug, Clone)]
pub struct IndirectKey {
    /// Protection domain.
    pub pdn: u32,
    /// `ACCESS_*` flags of the key itself.
    pub access: u32,
    /// Where its bytes are.
    pub layout: Layout,
    /// Cleared by LOCAL_INV or SEND with invalidate.
    pub valid: bool,
    /// Whether the key is a one-shot READ grant, and whether it was used.
    pub grant: Grant,
}

/// The one-shot READ state of a key (`rnic_abi::mkey::KEY_ONE_SHOT_READ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// An ordinary key.
    Lasting,
    /// A one-shot READ grant no READ has used yet.
    OneShot,
    /// A one-shot READ grant a READ used: only that READ's responses may still read.
    Spent,
}

/// The indirect and pattern keys of one function.
#[derive(Debug, Default)]
pub struct IndirectTable {
    pub(super) keys: BTreeMap<u32, IndirectKey>,
    /// The next key to try: counts up, so a destroyed key is not handed out again until
    /// 2^31 keys later.
    next: u32,
}

impl IndirectTable {
    /// Whether `key` is an indirect or pattern key (rather than an MR key).
    pub fn owns(key: u32) -> bool {
        key & INDIRECT_KEY_BIT != 0
    }

    /// Adds `k`; returns its key.
    pub fn insert(&mut self, k: IndirectKey) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1);
            let key = INDIRECT_KEY_BIT | (self.next & !INDIRECT_KEY_BIT);
            // The low byte 0 is skipped, as MR keys skip tag 0.
            if key as u8 != 0 && !self.keys.contains_key(&key) {
                self.keys.insert(key, k);
                return key;
            }
        }
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: u32) -> Option<IndirectKey> {
        self.keys.remove(&key)
    }

    /// Whether a key of the table names direct key `key`.
    pub fn references(&self, key: u32) -> bool {
        self.keys.values().any(|k| k.layout.names(key))
    }

    /// Keys of `pdn`.
    pub fn count_in_pd(&self, pdn: u32) -> usize {
        self.keys.values().filter(|k| k.pdn == pdn).count()
    }

    /// A remote READ through `key` was accepted: a one-shot grant is spent now.
    pub fn spend(&mut self, key: u32) {
        if let Some(k) = self.keys.get_mut(&key) {
            if k.grant == Grant::OneShot {
                k.grant = Grant::Spent;
            }
        }
    }

    /// Invalidates `key` for `pdn`.
    pub fn invalidate(&mut self, key: u32, pdn: u32) -> Result<(), KeyError> {
        let k = self.keys.get_mut(&key).ok_or(KeyError::NoSuchKey)?;
        if k.pdn != pdn {
            return Err(KeyError::OtherPd);
        }
        k.valid = false;
        Ok(())
    }

    /// [`super::mr::MrTable::check`] for an indirect or pattern key: the key's own checks, then
    /// every direct range it reaches, which `direct(key, addr, len)` checks (the MR
    /// table's own check).
    pub fn check<R: IntoIterator<Item = (GuestAddress, usize)>>(
        &self,
        key: u32,
        pdn: u32,
        access: Access,
        addr: u64,
        len: u64,
        mut direct: impl FnMut(u32, u64, u64) -> Result<R, KeyError>,
    ) -> Result<Vec<(GuestAddress, usize)>, KeyError> {
        let k = self.keys.get(&key).ok_or(KeyError::NoSuchKey)?;
        admits(k.valid, k.pdn, k.access, pdn, access)?;
        if k.grant == Grant::Spent && access != Access::ReadResponse {
            return Err(KeyError::Invalidated);
        }
        if addr
            .checked_add(len)
            .is_none_or(|end| end > k.layout.length())
        {
            return Err(KeyError::OutOfRange);
        }
        let mut runs = Vec::new();
        k.layout.pieces(addr, len, |key, at, n| {
            // Entries name MR keys only (checked at creation): this does not recurse.
            runs.extend(direct(key, at, n)?);
            Ok(())
        })?;
        Ok(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(l: &Layout, offset: u64, len: u64) -> Vec<(u32, u64, u64)> {
        let mut out = Vec::new();
        l.pieces(offset, len, |k, a, n| {
            out.push((k, a, n));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn a_list_maps_its_range_back_to_back() {
        let l = Layout::List(vec![(7, 0x100, 10), (8, 0x500, 20), (7, 0x200, 5)]);
        assert_eq!(l.length(), 35);
        assert_eq!(
            pieces(&l, 0, 35),
            vec![(7, 0x100, 10), (8, 0x500, 20), (7, 0x200, 5)]
        );
        assert_eq!(pieces(&l, 8, 4), vec![(7, 0x108, 2), (8, 0x500, 2)]);
        assert_eq!(pieces(&l, 31, 4), vec![(7, 0x201, 4)]);
        assert!(l.names(8) && !l.names(9));
    }

    #[test]
    fn a_pattern_repeats_with_its_stride() {
        let l = Layout::Pattern {
            base_key: 3,
            base_addr: 0x1000,
            byte_count: 4,
            stride: 16,
            repeat: 3,
        };
        assert_eq!(l.length(), 12);
        assert_eq!(
            pieces(&l, 2, 8),
            vec![(3, 0x1002, 2), (3, 0x1010, 4), (3, 0x1020, 2)]
        );
    }
}
