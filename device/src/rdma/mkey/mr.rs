//! Memory regions: the function's table of keys, and the check every access makes.
//!
//! A key is `index << 8 | tag`: the index names a slot in the function's MR table and the
//! tag changes each time the slot is registered again, so a key kept from an earlier
//! registration never matches the new one. Lookups are per function, so a VF can only
//! ever find its own regions, and a key of another PD fails like one that does not exist.

use vm_memory::GuestAddress;

use rnic_abi::mw::BindMwWqe;

use super::fast_reg::{DmaKey, FastRegError, FastRegSlot};
use super::indirect::IndirectTable;
use super::mw::{self, BindError, MwTable, Region};
use super::pages::{PageRuns, PagedBuffer};
use super::{admits, Access, KeyError};

/// Slots an MR table may have: MR keys leave bit 31 clear, for indirect keys
/// (`rnic_abi::mkey::INDIRECT_KEY_BIT`), and bit 30, for memory windows
/// (`rnic_abi::mw::MW_KEY_BIT`).
const MAX_SLOTS: usize = 1 << 22;

/// A registered region.
#[derive(Debug, Clone)]
pub struct Mr {
    /// Protection domain.
    pub pdn: u32,
    /// `ACCESS_*` flags.
    pub access: u32,
    /// First byte's address in work requests.
    pub iova: u64,
    /// Where the bytes are.
    pub buffer: PagedBuffer,
    /// Cleared by LOCAL_INV or SEND with invalidate: the key stops working.
    pub valid: bool,
}

/// A key reserved with `RESERVE_MKEYS` that holds no region (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// The protection domain the key was reserved in.
    pub pdn: u32,
    /// A registration under the key failed: accesses fail instead of waiting.
    pub failed: bool,
}

#[derive(Debug, Default)]
struct Slot {
    tag: u8,
    /// The region; of a fast-registration MR, its registration while it is valid.
    mr: Option<Mr>,
    /// Set while the slot is reserved and holds no region.
    reserved: Option<Reservation>,
    /// Set while the slot is a PD's DMA key ([`super::fast_reg`]).
    dma: Option<DmaKey>,
    /// Set from `ALLOC_FAST_REG_MR` to `DEREG_MR` ([`super::fast_reg`]).
    fast_reg: Option<FastRegSlot>,
}

impl Slot {
    fn is_free(&self) -> bool {
        self.mr.is_none()
            && self.reserved.is_none()
            && self.dma.is_none()
            && self.fast_reg.is_none()
    }

    /// The PD the slot is in use by, if it is.
    fn pdn(&self) -> Option<u32> {
        self.mr
            .as_ref()
            .map(|m| m.pdn)
            .or(self.reserved.map(|r| r.pdn))
            .or(self.dma.map(|d| d.pdn))
            .or(self.fast_reg.map(|f| f.pdn))
    }
}

/// The MR table of one function.
#[derive(Debug, Default)]
pub struct MrTable {
    slots: Vec<Slot>,
    limit: usize,
    /// The function's indirect and pattern keys, which map onto the regions here.
    pub indirect: IndirectTable,
    /// The function's memory windows, which are bound to regions here.
    pub windows: MwTable,
}

impl MrTable {
    /// A table that holds at most `limit` regions.
    pub fn new(limit: usize) -> Self {
        Self {
            slots: Vec::new(),
            limit,
            indirect: IndirectTable::default(),
            windows: MwTable::default(),
        }
    }

    /// Every region with its key, in key order.
    pub fn regions(&self) -> impl Iterator<Item = (u32, &Mr)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let key = (index as u32) << 8 | u32::from(slot.tag);
            slot.mr.as_ref().map(|mr| (key, mr))
        })
    }

    /// Registers `mr`; returns its key, or `None` when the table is full.
    pub fn insert(&mut self, mr: Mr) -> Option<u32> {
        let key = self.take_slot()?;
        self.slots[(key >> 8) as usize].mr = Some(mr);
        Some(key)
    }

    /// Reserves a slot under a fresh key (a new tag), or `None` when the table is full.
    fn take_slot(&mut self) -> Option<u32> {
        self.take_slot_from(0)
    }

    /// [`MrTable::take_slot`] among the slots from index `first` on.
    fn take_slot_from(&mut self, first: usize) -> Option<u32> {
        if self.slots.len() < first {
            self.slots.resize_with(first, Slot::default);
        }
        let free = self.slots.iter().skip(first).position(Slot::is_free);
        let index = match free.map(|i| i + first) {
            Some(i) => i,
            None if self.slots.len() < self.limit && self.slots.len() < MAX_SLOTS => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
            None => return None,
        };
        let slot = &mut self.slots[index];
        // Tag 0 is never handed out, so key 0 is never valid.
        slot.tag = slot.tag.wrapping_add(1).max(1);
        Some((index as u32) << 8 | u32::from(slot.tag))
    }

    /// Reserves `count` pending keys in `pdn`: all of them, or none when the table has
    /// too few free slots.
    pub fn reserve(&mut self, pdn: u32, count: usize) -> Option<Vec<u32>> {
        let mut keys = Vec::with_capacity(count);
        for _ in 0..count {
            let Some(key) = self.take_slot() else {
                for k in keys {
                    self.slots[(k >> 8) as usize].reserved = None;
                }
                return None;
            };
            self.slots[(key >> 8) as usize].reserved = Some(Reservation { pdn, failed: false });
            keys.push(key);
        }
        Some(keys)
    }

    /// The reservation of `key`, if it is reserved and holds no region.
    pub fn reservation(&self, key: u32) -> Option<Reservation> {
        let slot = self.slots.get((key >> 8) as usize)?;
        (slot.tag == key as u8).then_some(slot.reserved?)
    }

    /// Whether a local access with `key` must wait for a control-queue registration.
    pub fn is_pending(&self, key: u32) -> bool {
        self.reservation(key).is_some_and(|r| !r.failed)
    }

    /// Ends the reservation of `key` with `outcome`: the region registered under it, or
    /// `None` for a failed registration (the key stays reserved, and accesses fail).
    /// Returns false, changing nothing, unless `key` is reserved and not yet registered.
    pub fn fulfil(&mut self, key: u32, outcome: Option<Mr>) -> bool {
        let Some(slot) = self.slots.get_mut((key >> 8) as usize) else {
            return false;
        };
        if slot.tag != key as u8 || slot.reserved.is_none_or(|r| r.failed) {
            return false;
        }
        match outcome {
            Some(mr) => {
                slot.reserved = None;
                slot.mr = Some(mr);
            }
            None => {
                if let Some(r) = &mut slot.reserved {
                    r.failed = true;
                }
            }
        }
        true
    }

    /// The slot `key` names, if its tag is the key's.
    fn slot_mut(&mut self, key: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut((key >> 8) as usize)
            .filter(|s| s.tag == key as u8)
    }

    /// Releases the reservation of `key` (a pending or failed key); true if there was one.
    pub fn unreserve(&mut self, key: u32) -> bool {
        self.slot_mut(key)
            .and_then(|slot| slot.reserved.take())
            .is_some()
    }

    /// The region with `key`, whatever its state.
    pub fn get(&self, key: u32) -> Option<&Mr> {
        let slot = self.slots.get((key >> 8) as usize)?;
        (slot.tag == key as u8).then_some(slot.mr.as_ref()?)
    }

    /// Removes the region with `key`.
    pub fn remove(&mut self, key: u32) -> Option<Mr> {
        let slot = self.slots.get_mut((key >> 8) as usize)?;
        if slot.tag != key as u8 {
            return None;
        }
        slot.mr.take()
    }

    /// Invalidates `key` for `pdn` (LOCAL_INV); the key stops working until the region is
    /// registered again, or the window bound again.
    pub fn invalidate(&mut self, key: u32, pdn: u32) -> Result<(), KeyError> {
        self.invalidate_from(key, pdn, None)
    }

    /// [`MrTable::invalidate`] for a SEND with invalidate that arrived on QP `qpn`: a type
    /// 2 window must have been bound through it.
    pub fn invalidate_remote(&mut self, key: u32, pdn: u32, qpn: u32) -> Result<(), KeyError> {
        self.invalidate_from(key, pdn, Some(qpn))
    }

    fn invalidate_from(&mut self, key: u32, pdn: u32, qpn: Option<u32>) -> Result<(), KeyError> {
        if IndirectTable::owns(key) {
            return self.indirect.invalidate(key, pdn);
        }
        if mw::is_window_key(key) {
            return self.windows.invalidate(key, pdn, qpn);
        }
        let slot = self.slot_mut(key).ok_or(KeyError::NoSuchKey)?;
        if slot.dma.is_some() {
            // The DMA key is every kernel user's: nothing invalidates it.
            return Err(KeyError::NoAccess);
        }
        if let Some(f) = slot.fast_reg {
            if f.pdn != pdn {
                return Err(KeyError::OtherPd);
            }
            // A fast-registration MR is free again, for the next REG_MR WQE.
            slot.mr = None;
            return Ok(());
        }
        let mr = slot.mr.as_mut().ok_or(KeyError::NoSuchKey)?;
        if mr.pdn != pdn {
            return Err(KeyError::OtherPd);
        }
        mr.valid = false;
        Ok(())
    }

    /// The keys of the regions registered in `pdn`.
    pub fn keys_in_pd(&self, pdn: u32) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.mr.as_ref().is_some_and(|m| m.pdn == pdn))
            .map(|(i, s)| (i as u32) << 8 | u32::from(s.tag))
            .collect()
    }

    /// Whether `key` can be given to a region that keeps it ([`MrTable::insert_at`]): its
    /// slot holds no region. Key 0 never can.
    pub fn can_take(&self, key: u32) -> bool {
        key as u8 != 0
            && self
                .slots
                .get((key >> 8) as usize)
                .is_none_or(Slot::is_free)
    }

    /// Registers `mr` under `key`, a key it already had on another function (it moved
    /// here with `MIGRATE_QP`, and the remote peer holds the key). Fails, changing
    /// nothing, unless [`MrTable::can_take`] says yes; the table's limit is the caller's
    /// to check.
    pub fn insert_at(&mut self, key: u32, mr: Mr) -> Result<(), Mr> {
        let index = (key >> 8) as usize;
        if !self.can_take(key) || index >= MAX_SLOTS {
            return Err(mr);
        }
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, Slot::default);
        }
        let slot = &mut self.slots[index];
        slot.tag = key as u8;
        slot.mr = Some(mr);
        Ok(())
    }

    /// Regions, reserved keys, DMA keys, fast-registration MRs, indirect and pattern keys
    /// and memory windows of `pdn`.
    pub fn count_in_pd(&self, pdn: u32) -> usize {
        self.slots.iter().filter(|s| s.pdn() == Some(pdn)).count()
            + self.indirect.count_in_pd(pdn)
            + self.windows.count_in_pd(pdn)
    }

    /// Keys reserved in `pdn` that hold no region (pending or failed).
    pub fn reserved_in_pd(&self, pdn: u32) -> usize {
        self.slots
            .iter()
            .filter(|s| s.reserved.is_some_and(|r| r.pdn == pdn))
            .count()
    }

    /// Number of registered regions, DMA keys and fast-registration MRs.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.mr.is_some() || s.dma.is_some() || s.fast_reg.is_some())
            .count()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that `key` lets a QP of `pdn` do `access` on `[addr, addr + len)`, and
    /// returns the device-address runs of that range.
    pub fn check(
        &self,
        key: u32,
        pdn: u32,
        access: Access,
        addr: u64,
        len: u64,
    ) -> Result<Runs<'_>, KeyError> {
        if IndirectTable::owns(key) {
            let direct = |key, at, n| self.check(key, pdn, access, at, n);
            return self
                .indirect
                .check(key, pdn, access, addr, len, direct)
                .map(|runs| Runs::Listed(runs.into_iter()));
        }
        if let Some(dma) = self.dma_key(key) {
            admits(true, dma.pdn, dma.access, pdn, access)?;
            return DmaKey::runs(addr, len).ok_or(KeyError::OutOfRange);
        }
        let Some(mr) = self.get(key) else {
            return Err(match self.reservation(key) {
                Some(r) if !r.failed && r.pdn == pdn => KeyError::Pending,
                _ => KeyError::NoSuchKey,
            });
        };
        admits(mr.valid, mr.pdn, mr.access, pdn, access)?;
        let offset = addr.checked_sub(mr.iova).ok_or(KeyError::OutOfRange)?;
        let runs = mr.buffer.runs(offset, len).ok_or(KeyError::OutOfRange)?;
        Ok(Runs::Pages(runs))
    }
}

impl MrTable {
    /// [`MrTable::check`] of an rkey in a request that arrived on QP `qpn`: a memory
    /// window ([`mw`]) resolves to the range of the region it is bound to, which is then
    /// checked as a local access of the region (its validity, PD and bounds; the window's
    /// rights stand for the region's remote ones). Every other key is checked as
    /// [`MrTable::check`] checks it.
    pub fn check_remote(
        &self,
        key: u32,
        (pdn, qpn): (u32, u32),
        access: Access,
        addr: u64,
        len: u64,
    ) -> Result<Runs<'_>, KeyError> {
        if !mw::is_window_key(key) {
            return self.check(key, pdn, access, addr, len);
        }
        let (mr_key, at) = self.windows.resolve(key, (pdn, qpn), access, addr, len)?;
        let local = match access {
            Access::RemoteRead | Access::ReadResponse | Access::LocalRead => Access::LocalRead,
            Access::RemoteWrite | Access::RemoteAtomic | Access::LocalWrite => Access::LocalWrite,
            // A window grants no FLUSH rights (`MW_ACCESS_ALL`): its resolve refused it.
            Access::Flush(_) => Access::LocalRead,
        };
        self.check(mr_key, pdn, local, at, len)
    }

    /// Runs `BIND_MW` WQE `wqe` (`inline`: its `INLINE` flag) of QP `qpn` of `pdn`
    /// ([`MwTable::bind`]) against the regions of this table.
    pub fn bind_mw(
        &mut self,
        wqe: &BindMwWqe,
        (pdn, qpn): (u32, u32),
        inline: bool,
    ) -> Result<(), BindError> {
        let slots = &self.slots;
        let region = |key: u32| {
            let slot = slots.get((key >> 8) as usize)?;
            let mr = slot.mr.as_ref().filter(|_| slot.tag == key as u8)?;
            Some(Region {
                pdn: mr.pdn,
                access: mr.access,
                iova: mr.iova,
                length: mr.buffer.len(),
                valid: mr.valid,
            })
        };
        self.windows.bind(wqe, (pdn, qpn), inline, region)
    }
}

impl MrTable {
    /// The first address of the region `key` names, if it names a registered region: where
    /// a FLUSH of the whole region ([`rnic_abi::verbs::flush::MR`]) checks it from.
    pub fn region_start(&self, key: u32) -> Option<u64> {
        self.get(key).map(|mr| mr.iova)
    }
}

/// The kernel memory keys ([`super::fast_reg`]): the DMA key and fast-registration MRs.
impl MrTable {
    /// The DMA key `key` names, if it names one.
    pub fn dma_key(&self, key: u32) -> Option<DmaKey> {
        let slot = self.slots.get((key >> 8) as usize)?;
        (slot.tag == key as u8).then_some(slot.dma?)
    }

    /// Adds DMA key `dma`; returns its key, or `None` when the table is full.
    pub fn insert_dma(&mut self, dma: DmaKey) -> Option<u32> {
        let key = self.take_slot()?;
        self.slots[(key >> 8) as usize].dma = Some(dma);
        Some(key)
    }

    /// Removes DMA key `key`; whether it was one.
    pub fn remove_dma(&mut self, key: u32) -> bool {
        self.slot_mut(key)
            .and_then(|slot| slot.dma.take())
            .is_some()
    }

    /// Adds fast-registration MR `f`, free; returns its key (tag 0), or `None` when the
    /// table is full. Never slot 0: key 0 never names a valid key, whatever tag a REG_MR
    /// WQE chooses.
    pub fn insert_fast_reg(&mut self, f: FastRegSlot) -> Option<u32> {
        let key = self.take_slot_from(1)?;
        let slot = &mut self.slots[(key >> 8) as usize];
        slot.tag = 0;
        slot.fast_reg = Some(f);
        Some(key & !0xff)
    }

    /// The fast-registration MR whose index `key` names (any tag): its current key, and
    /// the MR.
    pub fn fast_reg(&self, key: u32) -> Option<(u32, FastRegSlot)> {
        let slot = self.slots.get((key >> 8) as usize)?;
        Some(((key & !0xff) | u32::from(slot.tag), slot.fast_reg?))
    }

    /// Removes the fast-registration MR whose index `key` names (any tag), with its
    /// registration.
    pub fn remove_fast_reg(&mut self, key: u32) -> Option<FastRegSlot> {
        let slot = self.slots.get_mut((key >> 8) as usize)?;
        let f = slot.fast_reg.take()?;
        slot.mr = None;
        Some(f)
    }

    /// The fast-registration MR a REG_MR WQE of a QP of `pdn` may register under `key`:
    /// the one whose index `key` names, of `pdn`, free.
    pub fn fast_reg_target(&self, key: u32, pdn: u32) -> Result<FastRegSlot, FastRegError> {
        let slot = self
            .slots
            .get((key >> 8) as usize)
            .ok_or(FastRegError::NotFastReg)?;
        let f = slot
            .fast_reg
            .filter(|f| f.pdn == pdn)
            .ok_or(FastRegError::NotFastReg)?;
        if slot.mr.is_some() {
            return Err(FastRegError::NotFree);
        }
        Ok(f)
    }

    /// Makes the fast-registration MR `key` names valid under `key` (its tag) with `mr`,
    /// once [`MrTable::fast_reg_target`] passed.
    pub fn fast_register(&mut self, key: u32, mr: Mr) {
        let slot = self.slots.get_mut((key >> 8) as usize);
        if let Some(slot) = slot.filter(|s| s.fast_reg.is_some() && s.mr.is_none()) {
            slot.tag = key as u8;
            slot.mr = Some(mr);
        }
    }

    /// DMA keys and fast-registration MRs of `pdn` (they stay with their function).
    pub fn kernel_keys_in_pd(&self, pdn: u32) -> usize {
        self.slots
            .iter()
            .filter(|s| s.dma.is_some() || s.fast_reg.is_some())
            .filter(|s| s.pdn() == Some(pdn))
            .count()
    }
}

/// The device-address runs of a checked range, in order (see [`MrTable::check`]).
#[derive(Debug, Clone)]
pub enum Runs<'a> {
    /// Of a memory region: read off its page list as they are walked.
    Pages(PageRuns<'a>),
    /// Of an indirect key: gathered from the regions it names.
    Listed(std::vec::IntoIter<(GuestAddress, usize)>),
    /// Of the DMA key: the range itself, one run (none if empty).
    Identity(Option<(GuestAddress, usize)>),
}

/// Two run lists are equal if they yield the same runs.
impl PartialEq for Runs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.clone().eq(other.clone())
    }
}

impl Iterator for Runs<'_> {
    type Item = (GuestAddress, usize);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Runs::Pages(runs) => runs.next(),
            Runs::Listed(runs) => runs.next(),
            Runs::Identity(run) => run.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::mkey::indirect::{Grant, IndirectKey, Layout};
    use rnic_abi::verbs::{ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE};

    fn region(pdn: u32, access: u32) -> Mr {
        let (_, buffer) = super::super::pages::one_page(0x100, 0x200);
        Mr {
            pdn,
            access,
            iova: 0x7000_0100,
            buffer,
            valid: true,
        }
    }

    #[test]
    fn keys_change_on_reregistration_and_stale_keys_fail() {
        let mut t = MrTable::new(4);
        let k1 = t.insert(region(1, ACCESS_LOCAL_WRITE)).unwrap();
        t.remove(k1).unwrap();
        let k2 = t.insert(region(1, ACCESS_LOCAL_WRITE)).unwrap();
        assert_eq!(k1 >> 8, k2 >> 8, "same slot");
        assert_ne!(k1 & 0xff, k2 & 0xff, "new tag");
        assert_eq!(
            t.check(k1, 1, Access::LocalRead, 0x7000_0100, 1)
                .unwrap_err(),
            KeyError::NoSuchKey
        );
        assert!(t.check(k2, 1, Access::LocalRead, 0x7000_0100, 1).is_ok());
    }

    #[test]
    fn checks_pd_access_range_and_validity() {
        let mut t = MrTable::new(4);
        let k = t
            .insert(region(1, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ))
            .unwrap();
        assert_eq!(
            t.check(k, 2, Access::LocalRead, 0x7000_0100, 1)
                .unwrap_err(),
            KeyError::OtherPd
        );
        assert_eq!(
            t.check(k, 1, Access::RemoteWrite, 0x7000_0100, 1)
                .unwrap_err(),
            KeyError::NoAccess
        );
        assert_eq!(
            t.check(k, 1, Access::RemoteRead, 0x7000_00ff, 1)
                .unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            t.check(k, 1, Access::RemoteRead, 0x7000_0200, 0x101)
                .unwrap_err(),
            KeyError::OutOfRange
        );
        let runs = t
            .check(k, 1, Access::RemoteRead, 0x7000_0110, 0x10)
            .unwrap();
        assert_eq!(runs.collect::<Vec<_>>(), [(GuestAddress(0x11110), 0x10)]);
        assert_eq!(t.invalidate(k, 2).unwrap_err(), KeyError::OtherPd);
        t.invalidate(k, 1).unwrap();
        assert_eq!(
            t.check(k, 1, Access::RemoteRead, 0x7000_0110, 1)
                .unwrap_err(),
            KeyError::Invalidated
        );
        assert_eq!(
            t.check(0, 1, Access::LocalRead, 0, 0).unwrap_err(),
            KeyError::NoSuchKey
        );
    }

    #[test]
    fn reserved_keys_are_pending_until_fulfilled_and_fail_after_a_failure() {
        let mut t = MrTable::new(3);
        let keys = t.reserve(1, 2).unwrap();
        assert!(t.reserve(1, 2).is_none(), "all or none");
        assert_eq!(t.count_in_pd(1), 2);
        let check = |t: &MrTable, k| t.check(k, 1, Access::LocalRead, 0x7000_0100, 1).map(drop);
        assert_eq!(check(&t, keys[0]).unwrap_err(), KeyError::Pending);
        assert_eq!(
            t.check(keys[0], 2, Access::LocalRead, 0x7000_0100, 1)
                .unwrap_err(),
            KeyError::NoSuchKey,
            "another PD never waits"
        );
        assert!(t.fulfil(keys[0], Some(region(1, 0))));
        assert!(check(&t, keys[0]).is_ok());
        assert!(!t.fulfil(keys[0], Some(region(1, 0))), "once");
        assert!(t.fulfil(keys[1], None));
        assert_eq!(check(&t, keys[1]).unwrap_err(), KeyError::NoSuchKey);
        assert!(!t.is_pending(keys[1]));
        assert_eq!(t.reserved_in_pd(1), 1);
        assert!(t.unreserve(keys[1]));
        assert_eq!(t.count_in_pd(1), 1);
        assert_eq!(t.reserved_in_pd(1), 0);
        // The released slot is handed out again under a new key.
        let k = t.insert(region(1, 0)).unwrap();
        assert_eq!(k >> 8, keys[1] >> 8);
        assert_ne!(k, keys[1]);
    }

    #[test]
    fn the_table_has_a_limit() {
        let mut t = MrTable::new(2);
        assert!(t.insert(region(1, 0)).is_some());
        assert!(t.insert(region(1, 0)).is_some());
        assert!(t.insert(region(1, 0)).is_none());
        assert_eq!(t.count_in_pd(1), 2);
    }

    // Indirect and pattern keys, resolved through the table (see `super::indirect`).

    /// A table with two regions of PD 1: one at iova 0x1000 (0x200 bytes, remote write
    /// and read) and one at 0x2000 (read only).
    fn table() -> (MrTable, u32, u32) {
        let mut t = MrTable::new(8);
        let mut region = |iova: u64, access: u32| {
            let (_, buffer) = crate::rdma::mkey::pages::one_page(0, 0x200);
            t.insert(Mr {
                pdn: 1,
                access,
                iova,
                buffer,
                valid: true,
            })
            .unwrap()
        };
        let rw = region(
            0x1000,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
        );
        let ro = region(0x2000, ACCESS_REMOTE_READ);
        (t, rw, ro)
    }

    #[test]
    fn a_one_shot_grant_allows_one_read_and_then_only_its_responses() {
        let (mut t, rw, _) = table();
        let key = t.indirect.insert(IndirectKey {
            pdn: 1,
            access: ACCESS_REMOTE_READ,
            layout: Layout::List(vec![(rw, 0x1000, 0x100)]),
            valid: true,
            grant: Grant::OneShot,
        });
        assert!(t.check(key, 1, Access::RemoteWrite, 0, 8).is_err());
        t.indirect.spend(key);
        assert_eq!(
            t.check(key, 1, Access::RemoteRead, 0, 8),
            Err(KeyError::Invalidated)
        );
        assert!(t.check(key, 1, Access::ReadResponse, 0, 8).is_ok());
        // Spending an ordinary key changes nothing.
        let lasting = t.indirect.insert(IndirectKey {
            grant: Grant::Lasting,
            ..t.indirect.keys[&key].clone()
        });
        t.indirect.spend(lasting);
        assert!(t.check(lasting, 1, Access::RemoteRead, 0, 8).is_ok());
    }

    #[test]
    fn checks_are_the_keys_and_each_regions() {
        let (mut t, rw, ro) = table();
        let key = t.indirect.insert(IndirectKey {
            pdn: 1,
            access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
            layout: Layout::List(vec![(rw, 0x1000, 0x100), (ro, 0x2000, 0x100)]),
            valid: true,
            grant: Grant::Lasting,
        });
        assert!(IndirectTable::owns(key) && !IndirectTable::owns(rw));
        let runs: Vec<_> = t
            .check(key, 1, Access::RemoteRead, 0xF0, 0x20)
            .unwrap()
            .collect();
        assert_eq!(runs.iter().map(|r| r.1).sum::<usize>(), 0x20);
        assert_eq!(runs.len(), 2);
        // The second region refuses writes: the whole access is refused.
        assert_eq!(
            t.check(key, 1, Access::RemoteWrite, 0xF0, 0x20),
            Err(KeyError::NoAccess)
        );
        assert!(t.check(key, 1, Access::RemoteWrite, 0, 0x100).is_ok());
        assert_eq!(
            t.check(key, 1, Access::RemoteRead, 0x1F0, 0x11),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(
            t.check(key, 2, Access::RemoteRead, 0, 1),
            Err(KeyError::OtherPd)
        );
        assert_eq!(
            t.check(key, 1, Access::RemoteAtomic, 0, 8),
            Err(KeyError::NoAccess)
        );
        t.invalidate(ro, 1).unwrap();
        assert_eq!(
            t.check(key, 1, Access::RemoteRead, 0x100, 1),
            Err(KeyError::Invalidated)
        );
        t.invalidate(key, 1).unwrap();
        assert_eq!(
            t.check(key, 1, Access::RemoteRead, 0, 1),
            Err(KeyError::Invalidated)
        );
        assert!(t.indirect.references(rw));
        assert_eq!(t.count_in_pd(1), 3);
        t.indirect.remove(key).unwrap();
        assert_eq!(
            t.check(key, 1, Access::RemoteRead, 0, 1),
            Err(KeyError::NoSuchKey)
        );
    }
}
