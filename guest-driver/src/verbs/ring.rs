//! Rings and page lists in DMA memory, and the doorbell page helpers every verbs object
//! shares.
//!
//! A ring is a [`DmaBuffer`] of `entries * stride` bytes described to the device by a
//! [`PageList`]. The driver reaches the buffer through one host pointer, so an entry that
//! crosses a page boundary is no concern of the driver's: only the device walks pages.

use std::ops::Range;
use std::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use rnic_abi::doorbell::{self, NOTIFY_REQUEST, RUNG_BITMAP, SLOTS};
use rnic_abi::verbs::{
    owner_phase, page_table_levels, page_tables_at, DoorbellSlot, PageList, MAX_PAGE_LIST,
    PAGE_TABLE_ENTRIES,
};
use rnic_abi::{regs, PAGE_SIZE};

use crate::error::{Error, Result};
use crate::transport::{DmaBuffer, Transport};

/// Indexes into the pages of a buffer that hold bytes `offset..offset + len` (`len > 0`).
pub(crate) fn covered_pages(offset: usize, len: usize) -> Range<usize> {
    debug_assert!(len > 0);
    let page = PAGE_SIZE as usize;
    offset / page..(offset + len - 1) / page + 1
}

/// The bytes of a page-list array: each page address as a little-endian u64.
pub(crate) fn encode_page_list(pages: &[u64]) -> Vec<u8> {
    pages.iter().flat_map(|p| p.to_le_bytes()).collect()
}

/// The table pages of a page table of `levels` levels naming `pages`, and where each
/// goes: `tables[i]` is the device address of table page *i*, the lowest level's pages
/// first and the top one last (`rnic_abi::verbs::page_tables_at` of each level in all).
/// Returns the entries of each table page, in the order of `tables`.
pub(crate) fn page_table_entries(pages: &[u64], levels: u8, tables: &[u64]) -> Vec<Vec<u64>> {
    let per_table = PAGE_TABLE_ENTRIES as usize;
    let mut out = Vec::with_capacity(tables.len());
    // What the level being filled names: the pages, then the table pages of the level
    // below.
    let mut named: &[u64] = pages;
    let mut first = 0;
    for _ in 0..levels {
        let n = named.len().div_ceil(per_table);
        out.extend(named.chunks(per_table).map(<[u64]>::to_vec));
        named = tables.get(first..first + n).unwrap_or_default();
        first += n;
    }
    out
}

/// How a driver may describe memory to a device: which kinds of [`PageList`] it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListKinds {
    /// Flat arrays only (a device without `CAP_PAGE_TABLES`).
    Flat,
    /// Flat arrays and page tables (`CAP_PAGE_TABLES`, ABI 1.6).
    Tables,
}

impl ListKinds {
    /// What a device of capabilities `caps` takes.
    pub(crate) fn of(caps: u64) -> Self {
        if caps & regs::CAP_PAGE_TABLES != 0 {
            Self::Tables
        } else {
            Self::Flat
        }
    }
}

/// A page list in DMA memory (a flat array, or the table pages of a page table) and the
/// [`PageList`] that names it.
///
/// Kept alive as long as the object it describes: the ABI does not promise that the device
/// reads the list only while the creating command runs.
#[derive(Debug)]
pub(crate) struct PageListBuf {
    /// The array or the table pages, held so their memory lives exactly as long as this
    /// value.
    _array: DmaBuffer,
    list: PageList,
}

impl PageListBuf {
    /// Writes `pages` into fresh DMA memory: as a flat array when the memory the
    /// transport gives is contiguous for the device (always up to 512 pages, one page of
    /// array), else as a page table of as few levels as hold them, whose table pages may
    /// lie anywhere: what lets a VM without an IOMMU (guest-physical pages from the page
    /// map) register a region of any size.
    pub(crate) fn new(t: &dyn Transport, pages: &[u64], kinds: ListKinds) -> Result<Self> {
        let count = u32::try_from(pages.len())
            .ok()
            .filter(|&c| (1..=MAX_PAGE_LIST).contains(&c))
            .ok_or_else(|| {
                super::invalid(format!(
                    "{} pages in one page list; the device takes 1 to {MAX_PAGE_LIST}",
                    pages.len()
                ))
            })?;
        if let Some(bad) = pages.iter().find(|p| *p % PAGE_SIZE != 0) {
            return Err(Error::Device(format!(
                "DMA page address {bad:#x} is not {PAGE_SIZE}-byte aligned"
            )));
        }
        let bytes = encode_page_list(pages);
        let array = t.alloc_dma(bytes.len())?;
        // The device reads a flat array as one range of device addresses. One page always
        // is; a longer array (more than 512 pages, 2 MiB described) needs memory the
        // device sees as contiguous, which a VM without an IOMMU or hugepages rarely has.
        if let Some(addr) = array.contiguous() {
            array.write(0, &bytes);
            return Ok(Self {
                _array: array,
                list: PageList::flat(addr, count),
            });
        }
        drop(array);
        if kinds == ListKinds::Flat {
            return Err(Error::NoDmaMemory(format!(
                "a page list of {count} pages needs {} device-contiguous bytes on a device without page tables (CAP_PAGE_TABLES, ABI 1.6); reserve hugepages or register smaller regions",
                bytes.len()
            )));
        }
        Self::table(t, pages, count)
    }

    /// `pages` (`count` of them) as a page table.
    fn table(t: &dyn Transport, pages: &[u64], count: u32) -> Result<Self> {
        let levels = page_table_levels(count)
            .ok_or_else(|| super::invalid(format!("{count} pages in one page list")))?;
        let n: usize = (1..=levels)
            .map(|l| page_tables_at(count, l) as usize)
            .sum();
        let tables = t.alloc_dma(n * PAGE_SIZE as usize)?;
        let addrs = &tables.pages()[..n];
        for (i, entries) in page_table_entries(pages, levels, addrs).iter().enumerate() {
            tables.write(i * PAGE_SIZE as usize, &encode_page_list(entries));
        }
        let top = addrs[n - 1];
        log::debug!(
            "{}: {count} pages in a page table of {levels} levels ({n} table pages)",
            t.describe()
        );
        Ok(Self {
            _array: tables,
            list: PageList::table(top, count, levels),
        })
    }

    /// What a command names.
    pub(crate) fn list(&self) -> PageList {
        self.list
    }
}

/// A ring of `entries` entries `stride` bytes apart in DMA memory.
#[derive(Debug)]
pub(crate) struct Ring {
    buf: DmaBuffer,
    entries: u32,
    stride: u32,
    pages: PageListBuf,
}

impl Ring {
    /// Allocates a zeroed ring (zero owner bits are what the phase protocol starts from),
    /// described in a page list of `kinds`.
    pub(crate) fn new(
        t: &dyn Transport,
        entries: u32,
        stride: u32,
        kinds: ListKinds,
    ) -> Result<Self> {
        let bytes = ring_bytes(entries, stride)?;
        let buf = t.alloc_dma(bytes)?;
        let needed = bytes.div_ceil(PAGE_SIZE as usize);
        let pages = PageListBuf::new(t, &buf.pages()[..needed], kinds)?;
        Ok(Self {
            buf,
            entries,
            stride,
            pages,
        })
    }

    /// The ring's memory.
    pub(crate) fn buf(&self) -> &DmaBuffer {
        &self.buf
    }

    /// Entries in the ring.
    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// The page list a create command names.
    pub(crate) fn page_list(&self) -> PageList {
        self.pages.list()
    }

    /// Byte offset of entry `index` (counting over all passes).
    pub(crate) fn offset(&self, index: u32) -> usize {
        entry_offset(index, self.entries, self.stride)
    }

    /// Zeroes the ring (after a QP reset, when indices start over).
    pub(crate) fn clear(&self) {
        self.buf.zero();
    }
}

/// Size in bytes of a ring, or an error if it cannot be allocated.
pub(crate) fn ring_bytes(entries: u32, stride: u32) -> Result<usize> {
    u64::from(entries)
        .checked_mul(u64::from(stride))
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b > 0 && b as u64 <= u64::from(MAX_PAGE_LIST) * PAGE_SIZE)
        .ok_or_else(|| {
            super::invalid(format!(
                "a ring of {entries} entries of {stride} bytes is too large"
            ))
        })
}

/// Byte offset of entry `index` of a ring of `entries` (a power of two) entries.
pub(crate) fn entry_offset(index: u32, entries: u32, stride: u32) -> usize {
    (index % entries) as usize * stride as usize
}

/// Whether the owner byte of entry `index` says the device wrote it on the pass the driver
/// is reading. Indices are free-running u32 counts; `entries` is a power of two, so the
/// phase stays right when the count wraps.
pub(crate) fn is_new(owner: u8, index: u32, entries: u32) -> bool {
    owner & 1 == owner_phase(index, entries)
}

/// Rounds a requested queue depth up to the power of two the device wants, at least `min`.
pub(crate) fn ring_entries(requested: u32, min: u32) -> Result<u32> {
    requested
        .max(min)
        .checked_next_power_of_two()
        .ok_or_else(|| {
            super::invalid(format!(
                "{requested} entries cannot be rounded up to a power of two"
            ))
        })
}

/// Access to the doorbell BAR for the verbs objects of one context.
#[derive(Debug, Default)]
pub(crate) struct Doorbells {
    /// Serialises the read-modify-write of `RUNG_BITMAP` words. See [`Doorbells::ring_queue`].
    bitmap: Mutex<()>,
    /// Doorbells rung, and how many of them needed a kick (a trapped register write).
    pub(crate) stats: DoorbellStats,
}

/// How work-queue doorbells reached the device.
#[derive(Debug, Default)]
pub struct DoorbellStats {
    rung: std::sync::atomic::AtomicU64,
    kicked: std::sync::atomic::AtomicU64,
}

impl DoorbellStats {
    /// (doorbells rung, kicks needed). A kick is a vfio-user message (or a trapped MMIO
    /// write in a VM); a doorbell alone is a store to shared memory.
    pub fn get(&self) -> (u64, u64) {
        (
            self.rung.load(Ordering::Relaxed),
            self.kicked.load(Ordering::Relaxed),
        )
    }
}

impl Doorbells {
    /// Checks that a slot the device handed out lies in the BAR, so later writes cannot
    /// panic in the bounds check of [`crate::transport::MappedBar`].
    pub(crate) fn check_slot(t: &dyn Transport, slot: DoorbellSlot) -> Result<DoorbellSlot> {
        let end = doorbell::slot_offset(slot.page, slot.slot) + doorbell::SLOT_SIZE;
        if slot.page >= doorbell::PAGES || slot.slot >= SLOTS || end > t.doorbells().len() as u64 {
            return Err(Error::Device(format!(
                "the device assigned doorbell slot {} of page {}, outside the doorbell BAR",
                slot.slot, slot.page
            )));
        }
        Ok(slot)
    }

    /// Writes a u32 at `plus` bytes into `slot`, after everything written before it
    /// (entries consumed, WQEs written).
    pub(crate) fn write_slot(t: &dyn Transport, slot: DoorbellSlot, plus: u64, value: u32) {
        fence(Ordering::Release);
        t.doorbells()
            .write32(doorbell::slot_offset(slot.page, slot.slot) + plus, value);
    }

    /// Rings a work-queue doorbell (send or receive): the posted count into the slot, the
    /// slot's bit into the page's `RUNG_BITMAP`, then the notification protocol of
    /// `rnic_abi::doorbell` (the same steps as [`crate::cmdq::ring_doorbell`], which only
    /// knows page 0: the kick must name this slot's page). Returns whether it kicked.
    ///
    /// The ABI asks for an atomic OR of the bit, but [`crate::transport::MappedBar`] offers
    /// only 32-bit loads and stores, so this is a read-modify-write of the 32-bit half of
    /// the u64 word that holds the bit, under a lock that all queues of this context share
    /// (only this context, and so only this lock, uses these doorbell pages). That is
    /// enough because the device only ever clears bits (it swaps words with 0): if it takes
    /// the word between our read and our write, we write its old bits back and it will look
    /// at those slots once more and find nothing new, which costs a little and loses
    /// nothing. No bit of ours can be lost, because no other writer exists.
    pub(crate) fn ring_queue(
        &self,
        t: &dyn Transport,
        slot: DoorbellSlot,
        posted: u32,
    ) -> Result<bool> {
        let db = t.doorbells();
        let page_base = u64::from(slot.page) * PAGE_SIZE;
        // The WQEs before the count that publishes them.
        fence(Ordering::Release);
        db.write32(doorbell::slot_offset(slot.page, slot.slot), posted);
        // The count before the bit that makes the device read it.
        fence(Ordering::Release);
        let (word, bit) = bitmap_position(slot.slot);
        {
            let _guard = self.bitmap.lock().unwrap_or_else(|e| e.into_inner());
            let at = page_base + RUNG_BITMAP + word;
            let old = db.read32(at);
            db.write32(at, old | bit);
        }
        // The doorbell stores must be visible before we read the device's request; the
        // device fences between setting the request and its last look at the doorbells.
        fence(Ordering::SeqCst);
        self.stats.rung.fetch_add(1, Ordering::Relaxed);
        if db.read32(page_base + NOTIFY_REQUEST) != 0 {
            t.reg_write32(regs::DOORBELL_KICK, slot.page)?;
            self.stats.kicked.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
        Ok(false)
    }
}

/// Byte offset within `RUNG_BITMAP` of the 32-bit word holding `slot`'s bit, and the bit.
///
/// The bitmap is u64 words, little-endian, so bit `s` of the bitmap is bit `s % 32` of the
/// u32 at byte `4 * (s / 32)`.
pub(crate) fn bitmap_position(slot: u32) -> (u64, u32) {
    (u64::from(slot / 32) * 4, 1 << (slot % 32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{DmaRelease, MappedBar};
    use std::collections::HashMap;
    use std::ptr::NonNull;
    use std::sync::Arc;

    /// A transport that only allocates DMA memory: heap memory whose pages the "device"
    /// reaches at made-up addresses, contiguous or scattered (every page 64 KiB below the
    /// one before), recorded so a test can walk what the driver wrote as the device does.
    struct FakeDma {
        scattered: bool,
        next: std::sync::Mutex<u64>,
        /// Device address of each page handed out, and where the driver sees it.
        seen: std::sync::Mutex<HashMap<u64, usize>>,
    }

    struct FreeHeap;

    impl DmaRelease for FreeHeap {
        fn release(&self, ptr: NonNull<u8>, len: usize, _pages: &[u64]) {
            let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: allocated in `alloc_dma` with this layout, released once.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    impl FakeDma {
        fn new(scattered: bool) -> Self {
            Self {
                scattered,
                next: std::sync::Mutex::new(0x40_0000_0000),
                seen: Default::default(),
            }
        }

        /// The u64 at device address `addr` (which must lie in memory handed out).
        fn read(&self, addr: u64) -> u64 {
            let page = addr & !(PAGE_SIZE - 1);
            let ptr = self.seen.lock().unwrap()[&page] + (addr - page) as usize;
            // SAFETY: an 8-byte aligned address inside a live allocation of a test.
            unsafe { (ptr as *const u64).read_volatile() }
        }

        /// What the device would read from `list`: the walk of §7.3.
        fn walk(&self, list: PageList) -> Vec<u64> {
            if list.levels == 0 {
                return (0..u64::from(list.count))
                    .map(|i| self.read(list.addr + 8 * i))
                    .collect();
            }
            assert_eq!(list.addr % PAGE_SIZE, 0);
            let mut tables = vec![list.addr];
            for level in (1..=list.levels).rev() {
                let span = 512u64.pow(u32::from(level) - 1);
                let needed = u64::from(list.count).div_ceil(span);
                tables = (0..needed)
                    .map(|i| self.read(tables[(i / 512) as usize] + 8 * (i % 512)))
                    .collect();
            }
            tables
        }
    }

    impl Transport for FakeDma {
        fn describe(&self) -> String {
            "fake".into()
        }
        fn config_read(&self, _: u16, _: &mut [u8]) -> Result<()> {
            Err(Error::Unsupported("fake"))
        }
        fn config_write(&self, _: u16, _: &[u8]) -> Result<()> {
            Err(Error::Unsupported("fake"))
        }
        fn reg_read32(&self, _: u64) -> Result<u32> {
            Err(Error::Unsupported("fake"))
        }
        fn reg_write32(&self, _: u64, _: u32) -> Result<()> {
            Err(Error::Unsupported("fake"))
        }
        fn doorbells(&self) -> &MappedBar {
            unreachable!("page lists ring no doorbells")
        }
        fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
            let len = crate::transport::page_round(size);
            let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: a non-zero size.
            let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).unwrap();
            let mut next = self.next.lock().unwrap();
            let mut seen = self.seen.lock().unwrap();
            let pages = (0..len / 4096)
                .map(|i| {
                    let addr = *next;
                    *next = if self.scattered {
                        addr - 0x1_0000
                    } else {
                        addr + PAGE_SIZE
                    };
                    seen.insert(addr, ptr.as_ptr() as usize + i * 4096);
                    addr
                })
                .collect();
            if !self.scattered {
                // Keep separate allocations apart.
                *next += PAGE_SIZE;
            }
            // SAFETY: the memory lives until FreeHeap releases it; one page each.
            Ok(unsafe { DmaBuffer::new(ptr, len, pages, Some(Arc::new(FreeHeap))) })
        }
        fn enable_interrupts(&self, _: u16) -> Result<bool> {
            Ok(false)
        }
        fn wait_interrupt(&self, _: u16, _: std::time::Duration) -> Result<bool> {
            Ok(false)
        }
        fn function_reset(&self) -> Result<()> {
            Err(Error::Unsupported("fake"))
        }
        fn kind(&self) -> String {
            "fake".into()
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    /// `n` page addresses in no order the device could merge.
    fn pages(n: u64) -> Vec<u64> {
        (0..n)
            .map(|i| 0x7_0000_0000 + (i * 7919 % n) * 3 * PAGE_SIZE)
            .collect()
    }

    #[test]
    fn small_lists_and_contiguous_memory_stay_flat() {
        for scattered in [false, true] {
            let t = FakeDma::new(scattered);
            for n in [1, 2, 511, 512] {
                let p = pages(n);
                let buf = PageListBuf::new(&t, &p, ListKinds::Tables).unwrap();
                let list = buf.list();
                assert_eq!((list.levels, list.count), (0, n as u32), "{n} pages");
                assert_eq!(t.walk(list), p);
            }
        }
        // Contiguous memory holds any flat array, with or without page tables.
        let t = FakeDma::new(false);
        let p = pages(5000);
        for kinds in [ListKinds::Flat, ListKinds::Tables] {
            let buf = PageListBuf::new(&t, &p, kinds).unwrap();
            let list = buf.list();
            assert_eq!(list.levels, 0);
            assert_eq!(t.walk(list), p);
        }
    }

    #[test]
    fn scattered_memory_gets_page_tables_of_as_few_levels_as_hold_the_list() {
        let t = FakeDma::new(true);
        for (n, levels) in [(513, 2), (4096, 2), (262144, 2), (262145, 3)] {
            let p = pages(n);
            let buf = PageListBuf::new(&t, &p, ListKinds::Tables).unwrap();
            let list = buf.list();
            assert_eq!(
                (list.levels, list.count, list.page_shift, list.reserved),
                (levels, n as u32, 12, 0),
                "{n} pages"
            );
            assert_eq!(list.addr % PAGE_SIZE, 0);
            assert!(t.walk(list) == p, "{n} pages walk back in order");
        }
    }

    #[test]
    fn without_page_tables_scattered_memory_is_out_of_dma_memory() {
        let t = FakeDma::new(true);
        let err = PageListBuf::new(&t, &pages(4096), ListKinds::Flat).unwrap_err();
        assert!(matches!(err, Error::NoDmaMemory(_)), "{err}");
        assert!(
            err.to_string().contains("32768 device-contiguous bytes"),
            "{err}"
        );
        // Nothing a device could not take either way.
        assert!(PageListBuf::new(&t, &[], ListKinds::Tables).is_err());
        assert!(PageListBuf::new(&t, &[0x1001], ListKinds::Tables).is_err());
        let too_many = vec![0; MAX_PAGE_LIST as usize + 1];
        assert!(PageListBuf::new(&t, &too_many, ListKinds::Tables).is_err());
    }

    #[test]
    fn table_entries_go_level_by_level() {
        // 1030 pages: three level-1 tables (512, 512, 6 entries), then the top naming them.
        let p = pages(1030);
        let tables = [0xa000, 0xb000, 0xc000, 0xd000];
        let entries = page_table_entries(&p, 2, &tables);
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0], p[..512]);
        assert_eq!(entries[1], p[512..1024]);
        assert_eq!(entries[2], p[1024..]);
        assert_eq!(entries[3], [0xa000, 0xb000, 0xc000]);
        // Deeper than needed: one more table on top naming the one before.
        let entries = page_table_entries(&p[..3], 3, &tables[..3]);
        assert_eq!(entries, [p[..3].to_vec(), vec![0xa000], vec![0xb000]]);
    }

    #[test]
    fn covered_pages_span_first_to_last_byte() {
        assert_eq!(covered_pages(0, 1), 0..1);
        assert_eq!(covered_pages(0, 4096), 0..1);
        assert_eq!(covered_pages(0, 4097), 0..2);
        assert_eq!(covered_pages(4095, 2), 0..2);
        assert_eq!(covered_pages(4096, 4096), 1..2);
        assert_eq!(covered_pages(100, 3 * 4096), 0..4);
    }

    #[test]
    fn page_lists_are_little_endian_u64s() {
        let bytes = encode_page_list(&[0x1_0000_1000, 0x2000]);
        assert_eq!(bytes.len(), 16);
        assert_eq!(&bytes[..8], &0x1_0000_1000u64.to_le_bytes());
        assert_eq!(&bytes[8..], &0x2000u64.to_le_bytes());
    }

    #[test]
    fn entries_wrap_around_the_ring() {
        assert_eq!(entry_offset(0, 4, 32), 0);
        assert_eq!(entry_offset(3, 4, 32), 96);
        assert_eq!(entry_offset(4, 4, 32), 0);
        assert_eq!(entry_offset(u32::MAX, 4, 32), 96);
    }

    #[test]
    fn new_entries_follow_the_pass_phase() {
        // First pass: the device writes 1; a zeroed ring holds nothing new.
        assert!(!is_new(0, 0, 4));
        assert!(is_new(1, 0, 4));
        assert!(is_new(1, 3, 4));
        // Second pass: entries still holding 1 are last pass's.
        assert!(!is_new(1, 4, 4));
        assert!(is_new(0, 4, 4));
        // Only bit 0 counts.
        assert!(is_new(0xFF, 8, 4));
        // The free-running count wraps at 2^32, a multiple of every power-of-two ring, so
        // the entry after u32::MAX is a first-pass entry again, as the device sees it.
        assert_eq!(owner_phase(u32::MAX, 4), 0);
        assert!(is_new(1, u32::MAX.wrapping_add(1), 4));
    }

    #[test]
    fn ring_sizes_round_to_powers_of_two() {
        assert_eq!(ring_entries(0, 1).unwrap(), 1);
        assert_eq!(ring_entries(0, 2).unwrap(), 2);
        assert_eq!(ring_entries(5, 2).unwrap(), 8);
        assert_eq!(ring_entries(64, 2).unwrap(), 64);
        assert!(ring_entries(u32::MAX, 2).is_err());
        assert_eq!(ring_bytes(64, 32).unwrap(), 2048);
        assert!(ring_bytes(0, 32).is_err());
        assert!(ring_bytes(u32::MAX, u32::MAX).is_err());
    }

    #[test]
    fn bitmap_bits_are_in_little_endian_u32_halves() {
        assert_eq!(bitmap_position(0), (0, 1));
        assert_eq!(bitmap_position(31), (0, 1 << 31));
        assert_eq!(bitmap_position(32), (4, 1));
        assert_eq!(bitmap_position(65), (8, 2));
        assert_eq!(bitmap_position(SLOTS - 1), (56, 1 << 31));
        // The last slot's word is still inside the bitmap, before the first slot.
        assert!(RUNG_BITMAP + bitmap_position(SLOTS - 1).0 + 4 <= doorbell::SLOTS_BASE);
    }
}
