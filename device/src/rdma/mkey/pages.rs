//! Driver memory the device reaches through a page list: rings and memory regions.
//!
//! The device reads a `PageList` once, when the object is created, and from then on
//! translates byte offsets to device addresses itself; every access still goes through the
//! function's DMA space, so a page the client later unmaps fails the access instead of
//! reaching anything else.

use rnic_abi::verbs::{PageList, MAX_PAGE_LIST};
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

/// Bytes `[0, len)` spread over `pages`, starting `offset` bytes into the first page.
#[derive(Debug, Clone, Default)]
pub struct PagedBuffer {
    pages: Vec<u64>,
    offset: u64,
    len: u64,
}

impl PagedBuffer {
    /// Reads and checks `list` from `mem`: the pages must hold `offset + len` bytes and be
    /// reachable for reading (and, with `writable`, writing) in `mem`.
    pub fn load(
        list: &PageList,
        offset: u64,
        len: u64,
        mem: &GuestMemoryMmap,
    ) -> Result<Self, PageListError> {
        if list.page_shift != 12
            || list.count == 0
            || list.count > MAX_PAGE_LIST
            || offset >= PAGE_SIZE
        {
            return Err(PageListError::Invalid);
        }
        let needed = offset.checked_add(len).ok_or(PageListError::TooSmall)?;
        if u64::from(list.count) * PAGE_SIZE < needed {
            return Err(PageListError::TooSmall);
        }
        let mut raw = vec![0u8; list.count as usize * 8];
        mem.read_slice(&mut raw, GuestAddress(list.addr))
            .map_err(|_| PageListError::Unmapped)?;
        let pages: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if pages.iter().any(|p| p % PAGE_SIZE != 0) {
            return Err(PageListError::Invalid);
        }
        let buffer = Self { pages, offset, len };
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
    let list = PageList {
        addr: 0x10000,
        count: 1,
        page_shift: 12,
    };
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
        PageList {
            addr: at,
            count: pages.len() as u32,
            page_shift: 12,
        }
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
        let list_unmapped = PageList {
            addr: 0x90000,
            count: 1,
            page_shift: 12,
        };
        assert_eq!(
            PagedBuffer::load(&list_unmapped, 0, 1, &m).unwrap_err(),
            PageListError::Unmapped
        );
    }
}
