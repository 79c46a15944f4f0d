//! Driver memory the device reaches through a page list: rings and memory regions.
//!
//! The device reads a `PageList` once, when the object is created, and from then on
//! translates byte offsets to device addresses itself; every access still goes through the
//! function's DMA space, so a page the client later unmaps fails the access instead of
//! reaching anything else. A list is a flat array or a page table of up to three levels
//! (docs/hardware-interface.md §7.3): [`page_addresses`] walks either into the array of
//! page addresses the rest of the device uses.

use rnic_abi::verbs::{
    page_table_reach, PageList, MAX_PAGE_LEVELS, MAX_PAGE_LIST, PAGE_TABLE_ENTRIES,
};
use rnic_abi::PAGE_SIZE;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Why a page list was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageListError {
    /// Page size other than 4 KiB, no pages, too many pages, or misaligned pages.
    Invalid,
    /// The list itself, or one of its pages, is not in DMA-mapped memory.
    Unmapped,
    /// The pages hold fewer bytes than the object needs.
    TooSmall,
}

/// The device-address runs of a range of a [`PagedBuffer`], in order: `(address,
/// length)` for each stretch of pages that are contiguous in device memory.
#[derive(Debug, Clone)]
pub struct PageRuns<'a> {
    pages: &'a [u64],
    pos: u64,
    stop: u64,
}

impl Iterator for PageRuns<'_> {
    type Item = (GuestAddress, usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.stop {
            return None;
        }
        let first = (self.pos / PAGE_SIZE) as usize;
        let last = ((self.stop - 1) / PAGE_SIZE) as usize;
        let start = *self.pages.get(first)? + self.pos % PAGE_SIZE;
        let mut page = first;
        while page < last
            && self.pages.get(page + 1) == Some(&self.pages[page].wrapping_add(PAGE_SIZE))
        {
            page += 1;
        }
        let end = ((page as u64 + 1) * PAGE_SIZE).min(self.stop);
        let n = end - self.pos;
        self.pos = end;
        Some((GuestAddress(start), n as usize))
    }
}

/// Reads `n` little-endian u64s at `addr` of `mem`.
fn read_u64s(mem: &GuestMemoryMmap, addr: u64, n: usize) -> Result<Vec<u64>, PageListError> {
    let mut raw = vec![0u8; n * 8];
    mem.read_slice(&mut raw, GuestAddress(addr))
        .map_err(|_| PageListError::Unmapped)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

/// Checks a list's own fields: 4 KiB pages, reserved bytes 0, at most
/// [`MAX_PAGE_LEVELS`] levels, 1 to [`MAX_PAGE_LIST`] pages and no more than its levels
/// reach.
fn check_fields(list: &PageList) -> Result<(), PageListError> {
    if u32::from(list.page_shift) != PAGE_SIZE.trailing_zeros()
        || list.reserved != 0
        || list.levels > MAX_PAGE_LEVELS
        || list.count == 0
        || list.count > MAX_PAGE_LIST
        || list.count > page_table_reach(list.levels)
    {
        return Err(PageListError::Invalid);
    }
    Ok(())
}

/// The page addresses `list` names, read from `mem`: its flat array, or its page table
/// walked level by level from the top, each table page read only once the entry naming
/// it passed (4 KiB aligned). Checks the list's own fields, that every table page (or the
/// array) is mapped, and that every entry read is 4 KiB aligned; not the pages
/// themselves. Reads `count` / 512 + `count` / 512² + … + 1 table pages at most.
pub fn page_addresses(list: &PageList, mem: &GuestMemoryMmap) -> Result<Vec<u64>, PageListError> {
    check_fields(list)?;
    let aligned = |entries: &[u64]| entries.iter().all(|p| p.is_multiple_of(PAGE_SIZE));
    if list.levels == 0 {
        let pages = read_u64s(mem, list.addr, list.count as usize)?;
        return if aligned(&pages) {
            Ok(pages)
        } else {
            Err(PageListError::Invalid)
        };
    }
    if !list.addr.is_multiple_of(PAGE_SIZE) {
        return Err(PageListError::Invalid);
    }
    let per_table = PAGE_TABLE_ENTRIES as usize;
    let mut tables = vec![list.addr];
    for level in (1..=list.levels).rev() {
        // One entry of this level covers 512^(level - 1) pages: it needs as many
        // entries as the level below has table pages (or, at level 1, pages).
        let span = u64::from(PAGE_TABLE_ENTRIES).pow(u32::from(level) - 1);
        let needed = u64::from(list.count).div_ceil(span) as usize;
        let mut next = Vec::with_capacity(needed);
        for (k, &table) in tables.iter().enumerate() {
            let n = needed.saturating_sub(k * per_table).min(per_table);
            let entries = read_u64s(mem, table, n)?;
            if !aligned(&entries) {
                return Err(PageListError::Invalid);
            }
            next.extend(entries);
        }
        tables = next;
    }
    Ok(tables)
}

/// Bytes `[0, len)` spread over `pages`, starting `offset` bytes into the first page.
#[derive(Debug, Clone, Default)]
pub struct PagedBuffer {
    pages: Vec<u64>,
    offset: u64,
    len: u64,
}

impl PagedBuffer {
    /// Reads and checks `list` from `mem` ([`page_addresses`]): the pages must hold
    /// `offset + len` bytes and, like every table page of the list, be reachable in `mem`
    /// (the view the object needs: the writable one for memory the device writes).
    pub fn load(
        list: &PageList,
        offset: u64,
        len: u64,
        mem: &GuestMemoryMmap,
    ) -> Result<Self, PageListError> {
        check_fields(list)?;
        Self::fits(list.count as usize, offset, len)?;
        let buffer = Self::on_pages(page_addresses(list, mem)?, offset, len)?;
        // Every page must be reachable now; later unmaps fail the access that meets them.
        for &p in &buffer.pages {
            if mem.read_slice(&mut [0u8; 1], GuestAddress(p)).is_err()
                || mem
                    .read_slice(&mut [0u8; 1], GuestAddress(p + PAGE_SIZE - 1))
                    .is_err()
            {
                return Err(PageListError::Unmapped);
            }
        }
        Ok(buffer)
    }

    /// `len` bytes on `pages` (4 KiB aligned device addresses), from `offset` in the
    /// first: the pages must hold `offset + len` bytes. Whether they are reachable is
    /// left to each access (a fast-registration's pages, [`super::fast_reg`]).
    pub fn on_pages(pages: Vec<u64>, offset: u64, len: u64) -> Result<Self, PageListError> {
        Self::fits(pages.len(), offset, len)?;
        Ok(Self { pages, offset, len })
    }

    /// Checks that `count` pages hold `len` bytes from `offset` (less than a page) on.
    fn fits(count: usize, offset: u64, len: u64) -> Result<(), PageListError> {
        if offset >= PAGE_SIZE {
            return Err(PageListError::Invalid);
        }
        let needed = offset.checked_add(len).ok_or(PageListError::TooSmall)?;
        if count as u64 * PAGE_SIZE < needed {
            return Err(PageListError::TooSmall);
        }
        Ok(())
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device addresses of the buffer's pages.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// Pages the buffer covers.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// The device-address runs that bytes `[at, at + len)` occupy, or `None` if the range
    /// is not inside the buffer. Pages that follow each other in device memory make one
    /// run, so a buffer the driver allocated in one piece is copied in one piece.
    pub fn runs(&self, at: u64, len: u64) -> Option<PageRuns<'_>> {
        let end = at.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(PageRuns {
            pages: &self.pages,
            pos: self.offset + at,
            stop: self.offset + end,
        })
    }

    /// Copies bytes at `at` into `out`; false if out of range or unreachable.
    pub fn read(&self, mem: &GuestMemoryMmap, at: u64, out: &mut [u8]) -> bool {
        let Some(runs) = self.runs(at, out.len() as u64) else {
            return false;
        };
        let mut done = 0;
        for (addr, n) in runs {
            if mem.read_slice(&mut out[done..done + n], addr).is_err() {
                return false;
            }
            done += n;
        }
        true
    }

    /// Copies `data` to `at`; false if out of range or unreachable (a prefix may have been
    /// written).
    pub fn write(&self, mem: &GuestMemoryMmap, at: u64, data: &[u8]) -> bool {
        let Some(runs) = self.runs(at, data.len() as u64) else {
            return false;
        };
        let mut done = 0;
        for (addr, n) in runs {
            if mem.write_slice(&data[done..done + n], addr).is_err() {
                return false;
            }
            done += n;
        }
        true
    }
}

/// Test memory: 16 KiB of guest memory at 0x10000 with a one-entry page list at 0x10000
/// naming the page at 0x11000, and a buffer of `len` bytes from `offset` in that page.
#[cfg(test)]
pub(crate) fn one_page(offset: u64, len: u64) -> (GuestMemoryMmap, PagedBuffer) {
    let m = GuestMemoryMmap::from_ranges(&[(GuestAddress(0x10000), 0x4000)]).expect("memory");
    m.write_slice(&0x11000u64.to_le_bytes(), GuestAddress(0x10000))
        .expect("page list");
    let list = PageList::flat(0x10000, 1);
    let buffer = PagedBuffer::load(&list, offset, len, &m).expect("buffer");
    (m, buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0x10000), 0x10000)]).unwrap()
    }

    fn list(mem: &GuestMemoryMmap, at: u64, pages: &[u64]) -> PageList {
        let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(at)).unwrap();
        PageList::flat(at, pages.len() as u32)
    }

    /// 8 MiB of memory at 1 MiB for page tables: 2048 pages.
    const BIG: u64 = 0x10_0000;

    fn big() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(BIG), 0x80_0000)]).unwrap()
    }

    /// The `n`th page of [`big`].
    fn page(n: u64) -> u64 {
        BIG + n * PAGE_SIZE
    }

    /// Writes `entries` at the start of the table page at `at`.
    fn table(mem: &GuestMemoryMmap, at: u64, entries: &[u64]) {
        let bytes: Vec<u8> = entries.iter().flat_map(|p| p.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(at)).unwrap();
    }

    /// 700 pages in reverse order (pages 1999 down to 1300) under a two-level table: its
    /// level-1 tables at pages 7 (entries 0-511) and 3 (entries 512-699), the top at
    /// page 5. Returns the list and the pages in buffer order.
    fn two_levels(m: &GuestMemoryMmap) -> (PageList, Vec<u64>) {
        let pages: Vec<u64> = (0..700).map(|i| page(1999 - i)).collect();
        table(m, page(7), &pages[..512]);
        table(m, page(3), &pages[512..]);
        table(m, page(5), &[page(7), page(3)]);
        (PageList::table(page(5), 700, 2), pages)
    }

    #[test]
    fn a_two_level_table_names_its_pages_in_order() {
        let m = big();
        let (l, pages) = two_levels(&m);
        assert_eq!(page_addresses(&l, &m).unwrap(), pages);
        let b = PagedBuffer::load(&l, 0x800, 700 * PAGE_SIZE - 0x800, &m).unwrap();
        assert_eq!(b.pages(), &pages[..]);
        // The far end: the last bytes of buffer page 699 (device page 1300), and an
        // access across the boundary between the two level-1 tables' pages.
        let end = b.len() - 16;
        assert!(b.write(&m, end, &[0xab; 16]));
        let mut back = [0u8; 16];
        m.read_slice(&mut back, GuestAddress(page(1300) + PAGE_SIZE - 16))
            .unwrap();
        assert_eq!(back, [0xab; 16]);
        let across = 512 * PAGE_SIZE - 0x800 - 8;
        let data: Vec<u8> = (0..16).collect();
        assert!(b.write(&m, across, &data));
        let runs: Vec<_> = b.runs(across, 16).unwrap().collect();
        assert_eq!(
            runs,
            [
                (GuestAddress(page(1999 - 511) + PAGE_SIZE - 8), 8),
                (GuestAddress(page(1999 - 512)), 8)
            ]
        );
        let mut back = [0u8; 16];
        assert!(b.read(&m, across, &mut back));
        assert_eq!(&back[..], &data[..]);
    }

    #[test]
    fn deeper_tables_than_needed_work_and_unused_entries_are_ignored() {
        let m = big();
        // Three levels for five pages: one table page per level, each with garbage
        // (unaligned, unmapped) after the entries the count needs.
        let pages: Vec<u64> = [40, 30, 31, 20, 50].map(page).to_vec();
        let garbage = [0x1234_5678_9abc_u64; 8];
        table(&m, page(10), &[pages.clone(), garbage.to_vec()].concat());
        table(&m, page(11), &[page(10), garbage[0]]);
        table(&m, page(12), &[page(11), garbage[0]]);
        let l = PageList::table(page(12), 5, 3);
        assert_eq!(page_addresses(&l, &m).unwrap(), pages);
        let b = PagedBuffer::load(&l, 0, 5 * PAGE_SIZE, &m).unwrap();
        assert_eq!(b.page_count(), 5);
        // One level: up to 512 pages straight from the top table page.
        let one = PageList::table(page(10), 5, 1);
        assert_eq!(page_addresses(&one, &m).unwrap(), pages);
        // A flat list keeps working as before, side by side.
        let flat = PageList::flat(page(10), 5);
        assert_eq!(page_addresses(&flat, &m).unwrap(), pages);
    }

    #[test]
    fn a_full_three_level_table_reaches_the_largest_list() {
        // 2^20 entries naming the same 4 pages over and over (the device does not care
        // that pages repeat): 2048 level-1 tables, 4 level-2 and the top.
        let m = GuestMemoryMmap::from_ranges(&[(GuestAddress(BIG), 0x90_0000)]).unwrap();
        let leaf: Vec<u64> = (0..512).map(|i| page(i % 4)).collect();
        let leaves = 2048u64;
        for t in 0..leaves {
            table(&m, page(8 + t), &leaf);
        }
        for t in 0..4 {
            let entries: Vec<u64> = (0..512).map(|i| page(8 + t * 512 + i)).collect();
            table(&m, page(8 + leaves + t), &entries);
        }
        let top: Vec<u64> = (0..4).map(|t| page(8 + leaves + t)).collect();
        table(&m, page(4), &top);
        let l = PageList::table(page(4), MAX_PAGE_LIST, 3);
        let pages = page_addresses(&l, &m).unwrap();
        assert_eq!(pages.len(), MAX_PAGE_LIST as usize);
        assert!(pages
            .iter()
            .enumerate()
            .all(|(i, &p)| p == page(i as u64 % 4)));
        // Two levels cannot name that many.
        assert_eq!(
            page_addresses(&PageList::table(page(4), MAX_PAGE_LIST, 2), &m).unwrap_err(),
            PageListError::Invalid
        );
    }

    #[test]
    fn malformed_tables_are_refused() {
        let m = big();
        let (l, _) = two_levels(&m);
        let refused = |list: PageList| PagedBuffer::load(&list, 0, 1, &m).unwrap_err();
        // The list's own fields.
        assert_eq!(refused(PageList { levels: 4, ..l }), PageListError::Invalid);
        assert_eq!(
            refused(PageList { levels: 255, ..l }),
            PageListError::Invalid
        );
        assert_eq!(
            refused(PageList { reserved: 1, ..l }),
            PageListError::Invalid
        );
        assert_eq!(refused(PageList { levels: 1, ..l }), PageListError::Invalid);
        assert_eq!(
            refused(PageList {
                addr: l.addr + 8,
                ..l
            }),
            PageListError::Invalid
        );
        assert_eq!(
            refused(PageList {
                count: MAX_PAGE_LIST + 1,
                levels: 3,
                ..l
            }),
            PageListError::Invalid
        );
        // The top table page unmapped.
        assert_eq!(
            refused(PageList {
                addr: 0x4000_0000,
                ..l
            }),
            PageListError::Unmapped
        );
        // A level-1 table named by an unaligned entry, then by an unmapped one.
        table(&m, page(5), &[page(7), page(3) + 8]);
        assert_eq!(refused(l), PageListError::Invalid);
        table(&m, page(5), &[page(7), 0x4000_0000]);
        assert_eq!(refused(l), PageListError::Unmapped);
        table(&m, page(5), &[page(7), page(3)]);
        assert!(PagedBuffer::load(&l, 0, 1, &m).is_ok());
        // A page of the buffer unaligned, then unmapped: the last entry the count needs.
        table(&m, page(3) + 187 * 8, &[page(9) + 1]);
        assert_eq!(refused(l), PageListError::Invalid);
        table(&m, page(3) + 187 * 8, &[0x4000_0000]);
        assert_eq!(refused(l), PageListError::Unmapped);
        // Fewer pages than the object needs.
        table(&m, page(3) + 187 * 8, &[page(9)]);
        assert_eq!(
            PagedBuffer::load(&l, 0, 700 * PAGE_SIZE + 1, &m).unwrap_err(),
            PageListError::TooSmall
        );
    }

    #[test]
    fn reads_and_writes_cross_pages_in_list_order() {
        let m = mem();
        // Pages out of address order: the list order is what counts.
        let l = list(&m, 0x10000, &[0x13000, 0x11000]);
        let b = PagedBuffer::load(&l, 0xff0, 0x20, &m).unwrap();
        let data: Vec<u8> = (0..0x20).collect();
        assert!(b.write(&m, 0, &data));
        let mut first = [0u8; 16];
        m.read_slice(&mut first, GuestAddress(0x13ff0)).unwrap();
        assert_eq!(&first[..], &data[..16]);
        let mut second = [0u8; 16];
        m.read_slice(&mut second, GuestAddress(0x11000)).unwrap();
        assert_eq!(&second[..], &data[16..]);
        let mut back = vec![0u8; 0x20];
        assert!(b.read(&m, 0, &mut back));
        assert_eq!(back, data);
    }

    #[test]
    fn pages_that_follow_each_other_in_memory_make_one_run() {
        let m = mem();
        // Pages 1 and 2 follow each other, page 3 does not follow page 2.
        let l = list(&m, 0x10000, &[0x11000, 0x12000, 0x15000, 0x16000]);
        let b = PagedBuffer::load(&l, 0x10, 0x3ff0, &m).unwrap();
        let runs: Vec<_> = b.runs(0x8, 0x3fe0).unwrap().collect();
        assert_eq!(
            runs,
            [
                (GuestAddress(0x11018), 0x1fe8),
                (GuestAddress(0x15000), 0x1ff8)
            ]
        );
        // A range inside one page, and one ending where a page ends.
        let runs: Vec<_> = b.runs(0x100, 0x10).unwrap().collect();
        assert_eq!(runs, [(GuestAddress(0x11110), 0x10)]);
        let runs: Vec<_> = b.runs(0, 0x1ff0).unwrap().collect();
        assert_eq!(runs, [(GuestAddress(0x11010), 0x1ff0)]);
        assert_eq!(b.runs(0x10, 0).unwrap().count(), 0);
        assert!(b.runs(0x10, 0x3fe1).is_none());
        // The data lands where the runs say.
        let data: Vec<u8> = (0..0x3ff0u32).map(|i| i as u8).collect();
        assert!(b.write(&m, 0, &data));
        let mut back = vec![0u8; data.len()];
        assert!(b.read(&m, 0, &mut back));
        assert_eq!(back, data);
        let mut third = [0u8; 4];
        m.read_slice(&mut third, GuestAddress(0x15000)).unwrap();
        assert_eq!(third, [0xf0, 0xf1, 0xf2, 0xf3]);
    }

    #[test]
    fn out_of_range_accesses_fail() {
        let m = mem();
        let l = list(&m, 0x10000, &[0x11000]);
        let b = PagedBuffer::load(&l, 0, 0x100, &m).unwrap();
        assert!(!b.read(&m, 0xf8, &mut [0u8; 16]));
        assert!(!b.write(&m, u64::MAX, &[0u8; 1]));
        assert!(b.read(&m, 0xf0, &mut [0u8; 16]));
    }

    #[test]
    fn bad_lists_are_refused() {
        let m = mem();
        let l = list(&m, 0x10000, &[0x11000]);
        assert_eq!(
            PagedBuffer::load(&l, 0, 0x1001, &m).unwrap_err(),
            PageListError::TooSmall
        );
        assert_eq!(
            PagedBuffer::load(
                &PageList {
                    page_shift: 13,
                    ..l
                },
                0,
                1,
                &m
            )
            .unwrap_err(),
            PageListError::Invalid
        );
        assert_eq!(
            PagedBuffer::load(&PageList { count: 0, ..l }, 0, 0, &m).unwrap_err(),
            PageListError::Invalid
        );
        let unaligned = list(&m, 0x10100, &[0x11010]);
        assert_eq!(
            PagedBuffer::load(&unaligned, 0, 1, &m).unwrap_err(),
            PageListError::Invalid
        );
        let unmapped = list(&m, 0x10200, &[0x90000]);
        assert_eq!(
            PagedBuffer::load(&unmapped, 0, 1, &m).unwrap_err(),
            PageListError::Unmapped
        );
        let list_unmapped = PageList::flat(0x90000, 1);
        assert_eq!(
            PagedBuffer::load(&list_unmapped, 0, 1, &m).unwrap_err(),
            PageListError::Unmapped
        );
    }
}
