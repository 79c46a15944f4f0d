//! DMA memory for a driver inside a VM without an IOMMU.
//!
//! Without an IOMMU (and without vfio-noiommu) the device addresses guest memory by its
//! guest-physical address: QEMU maps all guest RAM for the device at the addresses the
//! guest sees as physical. So the driver takes ordinary anonymous memory, pins it, and
//! looks up the physical address of every page in `/proc/self/pagemap`.
//!
//! Pinning is `mlock`: it keeps each page resident, so its physical address stays the
//! one the device was given. `mlock` does not promise the page never moves: the kernel
//! may still migrate mlocked pages (memory compaction, NUMA balancing), which a small
//! busybox guest does not trigger in practice. Hugetlb pages are not moved by compaction,
//! so buffers larger than a page are first tried as a 2 MiB hugetlb mapping, which also
//! makes them physically contiguous within each 2 MiB.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::Arc;

use rnic_abi::PAGE_SIZE;

use crate::error::{Error, Result};
use crate::transport::user_memory::{accessible, os_error, page_span, PinUnit, UserPages};
use crate::transport::{DmaBuffer, DmaRelease};

/// The device's page size, the unit of [`DmaBuffer::pages`].
const DEVICE_PAGE: usize = PAGE_SIZE as usize;
/// Size of the hugetlb pages tried for buffers larger than one page.
const HUGE_PAGE: usize = 2 << 20;
/// Where the kernel tells a process the physical frame behind each of its pages.
const PAGEMAP_PATH: &str = "/proc/self/pagemap";
/// Pagemap entry: the page is present in RAM.
const PAGEMAP_PRESENT: u64 = 1 << 63;
/// Pagemap entry: the page frame number, bits 0-54.
const PAGEMAP_PFN_MASK: u64 = (1 << 55) - 1;
/// Bytes per pagemap entry.
const PAGEMAP_ENTRY: usize = 8;

/// Hands out pinned anonymous memory and tells the device its guest-physical addresses.
#[derive(Debug)]
pub struct PagemapAllocator {
    /// Opened once: whether PFNs are shown is decided by the opener's capabilities, so an
    /// open that works now keeps working even if the process later drops privileges.
    pagemap: File,
    /// The kernel's page size: the granule of pagemap entries, which can be larger than
    /// the device's 4 KiB pages (arm64 kernels with 16 or 64 KiB pages).
    sys_page: usize,
}

impl PagemapAllocator {
    /// Opens `/proc/self/pagemap`.
    pub fn new() -> Result<Self> {
        let pagemap = File::open(PAGEMAP_PATH).map_err(|e| {
            Error::Io(
                format!("open {PAGEMAP_PATH} (is /proc mounted? mount -t proc proc /proc)"),
                e,
            )
        })?;
        Ok(Self {
            pagemap,
            sys_page: sys_page_size(),
        })
    }

    /// Allocates `size` bytes rounded up to whole 4 KiB pages (at least one), zeroed,
    /// pinned, with the guest-physical address of every page.
    pub fn alloc(&self, size: usize) -> Result<DmaBuffer> {
        let len = round_up(size.max(1), DEVICE_PAGE).ok_or_else(|| too_large(size))?;
        let mapping = Mapping::for_dma(len, self.sys_page)?;
        self.finish(mapping, len)
    }

    /// Turns `mapping` into a buffer of its first `len` bytes.
    fn finish(&self, mapping: Mapping, len: usize) -> Result<DmaBuffer> {
        let pages = self.physical_pages(mapping.ptr, len)?;
        let (ptr, map_len) = mapping.into_raw();
        let release: Arc<dyn DmaRelease> = Arc::new(PagemapRelease { map_len });
        // SAFETY: `ptr..ptr+map_len` is a live mapping owned from now on by the buffer,
        // which gives it back through `release` exactly once; `pages` holds one entry per
        // 4 KiB page of `len`.
        let buf = unsafe { DmaBuffer::new(ptr, len, pages, Some(release)) };
        // Anonymous memory starts zeroed, but the touch in `Mapping::new` wrote to it, and
        // the contract of `alloc_dma` should not lean on either detail.
        buf.zero();
        Ok(buf)
    }

    /// Looks up the physical address of each 4 KiB page of `ptr..ptr+len`.
    fn physical_pages(&self, ptr: NonNull<u8>, len: usize) -> Result<Vec<u64>> {
        let start = ptr.as_ptr() as usize;
        let first = start / self.sys_page;
        let last = (start + len - 1) / self.sys_page;
        let mut raw = vec![0u8; (last - first + 1) * PAGEMAP_ENTRY];
        let offset = (first * PAGEMAP_ENTRY) as u64;
        self.pagemap
            .read_exact_at(&mut raw, offset)
            .map_err(|e| Error::Io(format!("read {PAGEMAP_PATH}"), e))?;

        let mut pages = Vec::with_capacity(len / DEVICE_PAGE);
        for virt in (start..start + len).step_by(DEVICE_PAGE) {
            let index = virt / self.sys_page - first;
            let mut word = [0u8; PAGEMAP_ENTRY];
            word.copy_from_slice(&raw[index * PAGEMAP_ENTRY..(index + 1) * PAGEMAP_ENTRY]);
            let entry = u64::from_ne_bytes(word);
            if entry & PAGEMAP_PRESENT == 0 {
                return Err(Error::Io(
                    format!(
                        "DMA page at {virt:#x} is not resident although it was mlocked and written"
                    ),
                    io::Error::other("page not present in /proc/self/pagemap"),
                ));
            }
            let pfn = entry & PAGEMAP_PFN_MASK;
            if pfn == 0 {
                // The kernel hides PFNs (reports 0) from openers without CAP_SYS_ADMIN.
                return Err(Error::Io(
                    format!(
                        "{PAGEMAP_PATH} hides physical addresses: the driver needs CAP_SYS_ADMIN (run as root)"
                    ),
                    io::Error::from(io::ErrorKind::PermissionDenied),
                ));
            }
            pages.push(pfn * self.sys_page as u64 + (virt % self.sys_page) as u64);
        }
        Ok(pages)
    }
}

/// Pinned application pages: their guest-physical addresses, looked up once when pinned
/// (`mlock` keeps them resident at those addresses, with the caveat of the module's
/// documentation).
#[derive(Debug)]
pub(crate) struct PinnedPages {
    physical: Vec<u64>,
}

impl PinUnit for PinnedPages {
    fn device_addr(&self, start: usize, page: usize) -> u64 {
        self.physical[(page - start) / DEVICE_PAGE]
    }
}

/// What a registration of application memory pins, shared by the registrations of one
/// transport; undoing a unit unpins it.
pub(crate) fn user_pins() -> Arc<UserPages<PinnedPages>> {
    UserPages::new(Box::new(|start, len, _| {
        let addr = start as *mut libc::c_void;
        // SAFETY: munlock and madvise change no contents of the application's memory;
        // on a range that was unmapped meanwhile they fail harmlessly.
        unsafe {
            libc::munlock(addr, len);
            libc::madvise(addr, len, libc::MADV_DOFORK);
        }
    }))
}

impl PagemapAllocator {
    /// Makes application memory `addr..addr+len` reachable inside a VM without an IOMMU:
    /// every page is locked (`mlock`), kept out of children made by `fork`
    /// (`MADV_DONTFORK`, as `ibv_fork_init` does: a copy-on-write break would move the
    /// parent's page away from the address the device was given, and the device would
    /// then write into memory the kernel may reuse), faulted in, and looked up in
    /// `/proc/self/pagemap`. `writable`: the pages are faulted in for writing, so that a
    /// never-written page has a frame of its own rather than the shared zero page.
    pub(crate) fn map_user(
        &self,
        pins: &Arc<UserPages<PinnedPages>>,
        addr: usize,
        len: usize,
        writable: bool,
    ) -> Result<DmaBuffer> {
        let (start, end) = page_span(addr, len)
            .ok_or_else(|| os_error(format!("{len} bytes at {addr:#x}"), libc::EINVAL))?;
        accessible(start, end, writable)?;
        pins.map(addr, len, &[(start, end, ())], |(), s, l| {
            self.pin(s, l, writable)
        })
    }

    /// Locks, faults in and looks up the pages `start..start+len` (page-aligned).
    fn pin(&self, start: usize, len: usize, writable: bool) -> Result<PinnedPages> {
        let addr = start as *mut libc::c_void;
        // SAFETY: locking and advising memory of this process changes no contents.
        if unsafe { libc::mlock(addr, len) } != 0 {
            return Err(Error::last_os(format!(
                "mlock {len} bytes of registered memory at {start:#x} (run as root or raise RLIMIT_MEMLOCK: ulimit -l)"
            )));
        }
        // SAFETY: as above.
        unsafe { libc::madvise(addr, len, libc::MADV_DONTFORK) };
        let populate = if writable {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: populating faults pages in as an access would; contents are unchanged.
        if unsafe { libc::madvise(addr, len, populate) } != 0 {
            // Kernels before 5.14: touch each page instead. A write must not change a
            // byte another thread may be writing, so it is an atomic add of zero.
            for p in (start..start + len).step_by(DEVICE_PAGE) {
                // SAFETY: p is a mapped page of this process (checked by the caller),
                // readable, and writable when `writable`; the atomic access adds 0.
                unsafe {
                    let a = &*(p as *const std::sync::atomic::AtomicU8);
                    if writable {
                        a.fetch_add(0, std::sync::atomic::Ordering::Relaxed);
                    } else {
                        a.load(std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }
        let ptr = NonNull::new(start as *mut u8)
            .ok_or_else(|| os_error("registering address 0".into(), libc::EFAULT))?;
        match self.physical_pages(ptr, len) {
            Ok(physical) => Ok(PinnedPages { physical }),
            Err(e) => {
                // SAFETY: undoes the lock and advice above.
                unsafe {
                    libc::munlock(addr, len);
                    libc::madvise(addr, len, libc::MADV_DOFORK);
                }
                Err(e)
            }
        }
    }
}

/// The kernel's page size, which can be larger than the device's 4 KiB pages (arm64
/// kernels with 16 or 64 KiB pages).
pub(crate) fn sys_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let reported = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // The arithmetic of the allocators relies on whole device pages per kernel page;
    // anything else would be a broken sysconf, so fall back to the common case.
    usize::try_from(reported)
        .ok()
        .filter(|p| p.is_power_of_two() && *p >= DEVICE_PAGE)
        .unwrap_or(DEVICE_PAGE)
}

/// Which kind of pages back a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// Ordinary pages of the kernel's page size.
    Small,
    /// 2 MiB hugetlb pages from the reserved pool.
    Huge,
}

/// An anonymous, locked, populated mapping; unmapped on drop unless handed over with
/// [`Mapping::into_raw`], so every error path of an allocator cleans up. Also the memory
/// of the VFIO transport's DMA buffers, which VFIO then maps for the device.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    map_len: usize,
}

impl Mapping {
    /// Memory for a DMA buffer of `len` bytes (a multiple of 4 KiB): a 2 MiB hugetlb
    /// mapping for more than a page where the kernel has one reserved (it is never moved
    /// and is contiguous within each 2 MiB), else kernel pages.
    pub(crate) fn for_dma(len: usize, sys_page: usize) -> Result<Self> {
        if len > DEVICE_PAGE {
            match Mapping::new(len, Backing::Huge, sys_page) {
                Ok(m) => return Ok(m),
                // Expected whenever no hugepages are reserved (vm.nr_hugepages = 0).
                Err(e) => log::debug!(
                    "no hugetlb page for a {len}-byte DMA buffer ({e}); using 4 KiB pages"
                ),
            }
        }
        Mapping::new(len, Backing::Small, sys_page)
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Maps at least `len` bytes, locks them and writes to every page.
    fn new(len: usize, backing: Backing, sys_page: usize) -> Result<Self> {
        let granule = match backing {
            Backing::Small => sys_page,
            Backing::Huge => HUGE_PAGE,
        };
        let map_len = round_up(len, granule).ok_or_else(|| too_large(len))?;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if backing == Backing::Huge {
            flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
        }
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing
        // cannot alias anything in this process.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            let what = format!("mmap {map_len} bytes of {backing:?} pages for DMA");
            return Err(if e.raw_os_error() == Some(libc::ENOMEM) {
                Error::NoDmaMemory(format!("{what}: {e}"))
            } else {
                Error::Io(what, e)
            });
        }
        let ptr = NonNull::new(addr.cast::<u8>()).ok_or_else(|| {
            Error::Io(
                "mmap for DMA returned address 0".into(),
                io::Error::other("null mapping"),
            )
        })?;
        // From here on, dropping `mapping` unmaps.
        let mapping = Self { ptr, map_len };

        // A child created by fork would share the pages copy-on-write, and the parent's
        // next write would then move to a fresh physical page the device does not know.
        // SAFETY: advice on our own mapping; it changes no contents.
        if unsafe { libc::madvise(addr, map_len, libc::MADV_DONTFORK) } != 0 {
            return Err(Error::last_os("madvise(MADV_DONTFORK) on DMA memory"));
        }
        if backing == Backing::Small {
            // khugepaged collapsing these pages into a transparent hugepage would copy
            // them elsewhere. Fails harmlessly on kernels without THP, hence ignored.
            // SAFETY: advice on our own mapping; it changes no contents.
            unsafe { libc::madvise(addr, map_len, libc::MADV_NOHUGEPAGE) };
        }
        // SAFETY: locking our own mapping has no memory-safety effect.
        if unsafe { libc::mlock(addr, map_len) } != 0 {
            return Err(Error::last_os(format!(
                "mlock {map_len} bytes of DMA memory (run as root or raise RLIMIT_MEMLOCK: ulimit -l)"
            )));
        }
        // MAP_POPULATE may leave read faults mapped to the shared zero page, whose
        // physical address is every such page's; a write gives each page its own frame.
        for offset in (0..map_len).step_by(DEVICE_PAGE) {
            // SAFETY: in bounds of the writable mapping created above.
            unsafe { mapping.ptr.as_ptr().add(offset).write_volatile(0) };
        }
        Ok(mapping)
    }

    /// Gives up ownership without unmapping: (first byte, mapped length), for
    /// [`unmap`] later.
    pub(crate) fn into_raw(self) -> (NonNull<u8>, usize) {
        let raw = (self.ptr, self.map_len);
        std::mem::forget(self);
        raw
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        unmap(self.ptr, self.map_len);
    }
}

/// Gives a [`PagemapAllocator`] buffer back to the kernel.
#[derive(Debug)]
struct PagemapRelease {
    /// The mapped length, which for hugetlb memory exceeds the buffer's length.
    map_len: usize,
}

impl DmaRelease for PagemapRelease {
    fn release(&self, ptr: NonNull<u8>, _len: usize, _device_pages: &[u64]) {
        unmap(ptr, self.map_len);
    }
}

/// Unlocks and unmaps memory mapped by [`Mapping::new`].
pub(crate) fn unmap(ptr: NonNull<u8>, map_len: usize) {
    let addr = ptr.as_ptr().cast::<libc::c_void>();
    // SAFETY: `addr..addr+map_len` is a mapping of ours that nothing uses any more (its
    // owner is being dropped). munlock on never-locked memory is harmless, and munmap
    // implies munlock anyway; both are explicit for clarity of the pairing.
    unsafe {
        libc::munlock(addr, map_len);
        if libc::munmap(addr, map_len) != 0 {
            log::warn!(
                "munmap of DMA memory at {addr:p} failed: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// `value` rounded up to a multiple of the power of two `to`, or `None` on overflow.
fn round_up(value: usize, to: usize) -> Option<usize> {
    Some(value.checked_add(to - 1)? & !(to - 1))
}

fn too_large(size: usize) -> Error {
    Error::NoDmaMemory(format!(
        "a DMA buffer of {size} bytes is larger than the address space"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator() -> PagemapAllocator {
        PagemapAllocator::new().expect("open /proc/self/pagemap")
    }

    #[test]
    fn three_pages_have_physical_addresses_and_hold_data() {
        let dma = allocator();
        let buf = dma.alloc(3 * DEVICE_PAGE).expect("allocate 3 pages");
        assert_eq!(buf.len(), 3 * DEVICE_PAGE);
        assert_eq!(buf.pages().len(), 3);
        for &page in buf.pages() {
            assert_ne!(page, 0, "the tests run as root, so PFNs must be visible");
            assert_eq!(
                page % PAGE_SIZE,
                0,
                "page address {page:#x} not page-aligned"
            );
        }

        let mut zeroes = vec![0xffu8; buf.len()];
        buf.read(0, &mut zeroes);
        assert!(
            zeroes.iter().all(|&b| b == 0),
            "a new buffer must be zeroed"
        );

        // Across a page boundary, to cover more than one mapping page.
        let data: Vec<u8> = (0..100u8).collect();
        buf.write(DEVICE_PAGE - 50, &data);
        let mut back = vec![0u8; data.len()];
        buf.read(DEVICE_PAGE - 50, &mut back);
        assert_eq!(back, data);
        assert_eq!(buf.device_addr(DEVICE_PAGE + 7), buf.pages()[1] + 7);
    }

    #[test]
    fn odd_sizes_round_up_to_whole_pages() {
        let dma = allocator();
        assert_eq!(dma.alloc(0).unwrap().len(), DEVICE_PAGE);
        assert_eq!(dma.alloc(1).unwrap().len(), DEVICE_PAGE);
        let buf = dma.alloc(DEVICE_PAGE + 1).unwrap();
        assert_eq!(buf.len(), 2 * DEVICE_PAGE);
        assert_eq!(buf.pages().len(), 2);
    }

    #[test]
    fn absurd_sizes_are_errors_not_panics() {
        let dma = allocator();
        assert!(matches!(dma.alloc(usize::MAX), Err(Error::NoDmaMemory(_))));
        assert!(dma.alloc(usize::MAX / 2).is_err());
    }

    /// Set in the process [`drop_releases_the_mapping`] starts for the check.
    const RELEASE_CHECK_ENV: &str = "RNIC_DMA_PAGEMAP_RELEASE_CHECK";

    #[test]
    fn drop_releases_the_mapping() {
        // Checked in a process of its own that runs nothing else: no other thread can map
        // the freed range again before the check looks at it. (A forked child of this
        // multithreaded harness died of SIGSEGV now and then.)
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "dma_pagemap::tests::release_check",
                "--test-threads=1",
            ])
            .env(RELEASE_CHECK_ENV, "1")
            .output()
            .expect("run the release check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the release check failed: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    #[ignore = "run by drop_releases_the_mapping in a process of its own"]
    fn release_check() {
        if std::env::var_os(RELEASE_CHECK_ENV).is_none() {
            return;
        }
        assert_eq!(release_check_in_child(), 0, "the step that failed");
    }

    /// Allocates through the real path, drops the buffer, and checks that the range is no
    /// longer mapped. Returns 0 on success, the number of the failed step otherwise.
    fn release_check_in_child() -> i32 {
        let Ok(dma) = PagemapAllocator::new() else {
            return 10;
        };
        let len = 3 * DEVICE_PAGE;
        let Ok(mapping) = Mapping::new(len, Backing::Small, dma.sys_page) else {
            return 11;
        };
        let addr = mapping.ptr.as_ptr().cast::<libc::c_void>();
        let Ok(buf) = dma.finish(mapping, len) else {
            return 12;
        };
        let mut resident = vec![0u8; len.div_ceil(dma.sys_page)];
        // SAFETY: mincore only inspects the range; `resident` has one byte per page.
        if unsafe { libc::mincore(addr, len, resident.as_mut_ptr()) } != 0 {
            return 13;
        }
        if resident.iter().any(|r| r & 1 == 0) {
            return 14;
        }
        drop(buf);
        // SAFETY: as above; mincore on an unmapped range fails with ENOMEM, touching nothing.
        if unsafe { libc::mincore(addr, len, resident.as_mut_ptr()) } == 0 {
            return 15;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::ENOMEM) {
            return 16;
        }
        0
    }

    #[test]
    fn hugepage_attempt_falls_back_cleanly() {
        let dma = allocator();
        match Mapping::new(2 * DEVICE_PAGE, Backing::Huge, dma.sys_page) {
            Ok(huge) => {
                // One 2 MiB page holds the whole buffer, so the device sees one range.
                let pages = dma.physical_pages(huge.ptr, 2 * DEVICE_PAGE).unwrap();
                assert_eq!(
                    pages[1],
                    pages[0] + PAGE_SIZE,
                    "hugetlb pages not contiguous"
                );
            }
            Err(e) => assert!(
                !hugepages_possible(),
                "hugetlb mapping failed although hugepages are available: {e}"
            ),
        }

        // Whatever the hugepage pool holds, a multi-page allocation must work.
        let buf = dma
            .alloc(5 * DEVICE_PAGE)
            .expect("allocate with or without hugepages");
        assert_eq!(buf.pages().len(), 5);
        assert!(buf.pages().iter().all(|&p| p != 0 && p % PAGE_SIZE == 0));
        buf.write(4 * DEVICE_PAGE, b"tail");
        let mut tail = [0u8; 4];
        buf.read(4 * DEVICE_PAGE, &mut tail);
        assert_eq!(&tail, b"tail");
    }

    /// Whether a 2 MiB hugetlb mapping could succeed here: free reserved pages, or
    /// permission to allocate surplus ones. Another test may take the last free page
    /// meanwhile, so a failure is only reported when neither exists.
    fn hugepages_possible() -> bool {
        let read = |path: &str| -> u64 {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        read("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") > 0
            || read("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages") > 0
    }

    #[test]
    fn application_memory_is_pinned_and_shared_by_overlapping_registrations() {
        let dma = allocator();
        let pins = user_pins();
        // An ordinary heap buffer, not page-aligned, never written.
        let buf = vec![0u8; 3 * DEVICE_PAGE].into_boxed_slice();
        let addr = buf.as_ptr() as usize + 100;
        let a = dma.map_user(&pins, addr, 2 * DEVICE_PAGE, true).unwrap();
        assert_eq!(a.len() / DEVICE_PAGE, a.pages().len());
        assert!(a.pages().len() >= 2);
        assert!(a.pages().iter().all(|&p| p != 0 && p % PAGE_SIZE == 0));
        // Overlapping registration: the shared pages have the same frames.
        let b = dma.map_user(&pins, addr + DEVICE_PAGE, 10, false).unwrap();
        assert_eq!(b.pages()[0], a.pages()[1]);
        // Locked while either holds them.
        let locked = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmLck:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap()
        };
        assert!(locked() >= 8, "VmLck {} kB", locked());
        drop(a);
        drop(b);
        // Unmapped memory is refused with EFAULT, never translated.
        let e = dma.map_user(&pins, 8, 16, false).unwrap_err();
        assert!(matches!(&e, Error::Io(_, io) if io.raw_os_error() == Some(libc::EFAULT)));
        drop(buf);
    }

    #[test]
    fn mapping_reports_the_same_frames_twice() {
        // Pinned memory must not move between two lookups.
        let dma = allocator();
        let mapping = Mapping::new(4 * DEVICE_PAGE, Backing::Small, dma.sys_page).unwrap();
        let first = dma.physical_pages(mapping.ptr, 4 * DEVICE_PAGE).unwrap();
        let second = dma.physical_pages(mapping.ptr, 4 * DEVICE_PAGE).unwrap();
        assert_eq!(first, second);
        assert_eq!(first.len(), 4);
    }
}
