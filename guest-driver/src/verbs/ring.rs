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
use rnic_abi::verbs::{owner_phase, DoorbellSlot, PageList, MAX_PAGE_LIST};
use rnic_abi::{regs, PAGE_SIZE};

use crate::error::{Error, Result};
use crate::transport::{DmaBuffer, Transport};

/// log2 of [`PAGE_SIZE`], the only page size rnic 1.x accepts in a [`PageList`].
pub(crate) const PAGE_SHIFT: u32 = PAGE_SIZE.trailing_zeros();

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

/// A page-list array in DMA memory and the [`PageList`] that names it.
///
/// Kept alive as long as the object it describes: the ABI does not promise that the device
/// reads the array only while the creating command runs.
#[derive(Debug)]
pub(crate) struct PageListBuf {
    /// The array itself, held so its memory lives exactly as long as this value.
    _array: DmaBuffer,
    list: PageList,
}

impl PageListBuf {
    /// Writes `pages` into fresh DMA memory.
    pub(crate) fn new(t: &dyn Transport, pages: &[u64]) -> Result<Self> {
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
        // The device reads the array as one range of device addresses. One page always is;
        // a longer array (more than 512 pages, 2 MiB described) needs memory the device
        // sees as contiguous, which a VM without hugepages may not have.
        let addr = array.contiguous().ok_or_else(|| {
            Error::NoDmaMemory(format!(
                "a page list of {count} pages needs {} device-contiguous bytes; reserve hugepages or register smaller regions",
                bytes.len()
            ))
        })?;
        array.write(0, &bytes);
        Ok(Self {
            _array: array,
            list: PageList {
                addr,
                count,
                page_shift: PAGE_SHIFT,
            },
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
    /// Allocates a zeroed ring (zero owner bits are what the phase protocol starts from).
    pub(crate) fn new(t: &dyn Transport, entries: u32, stride: u32) -> Result<Self> {
        let bytes = ring_bytes(entries, stride)?;
        let buf = t.alloc_dma(bytes)?;
        let needed = bytes.div_ceil(PAGE_SIZE as usize);
        let pages = PageListBuf::new(t, &buf.pages()[..needed])?;
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
