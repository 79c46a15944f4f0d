//! The function's view of its client's memory: what DMA_MAP gave it, and nothing else.
//!
//! Every DMA_MAP window becomes a `vm-memory` region mapped from the file descriptor the
//! client passed, so the device reads and writes guest RAM directly. Windows the client
//! mapped read-only are kept apart from the writable ones: device writes only ever go
//! through [`DmaSpace::writable`], where a read-only window is simply absent, so a write to
//! it fails like a write to unmapped memory instead of faulting the process.
//!
//! The files are the client's, so nothing about them is trusted (docs/hardware-interface.md
//! §5.2): a window must lie inside its file, and the file must be a memfd sealed against
//! shrinking (a file that shrinks under a mapping turns the next access into SIGBUS,
//! which would end every function of rnicd). What a client can make rnicd hold is
//! bounded: its windows and their pages by the function's quota ([`DmaQuota`]), the
//! files behind them by [`MAX_FILES`] (windows of one file share one descriptor).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};

use vm_memory::{
    Address, FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap,
    GuestRegionMmap, MmapRegion,
};

/// A snapshot of mapped memory. Holding it keeps every region it contains mapped in this
/// process, even if the client unmaps it meanwhile, so an in-flight DMA never faults.
pub type MemorySnapshot = vm_memory::GuestMemoryLoadGuard<GuestMemoryMmap>;

/// How many distinct files the windows of one function may come from. A VMM maps guest
/// RAM from one file per memory backend; each distinct file costs rnicd a descriptor.
pub const MAX_FILES: usize = 64;

/// Linux's `HUGETLBFS_MAGIC` (`statfs.f_type` of hugetlbfs).
const HUGETLBFS_MAGIC: i64 = 0x958458f6;

/// Why a DMA_MAP or DMA_UNMAP was refused.
#[derive(Debug, thiserror::Error)]
pub enum DmaMapError {
    /// The client sent no file descriptor: its memory cannot be shared with this process.
    #[error(
        "DMA_MAP of {size:#x} bytes at {iova:#x} came without a file descriptor: rnicd can only \
         reach guest RAM it can map. Back the guest's RAM with a shared memory backend, e.g. \
         `-object memory-backend-memfd,id=mem,size=...,share=on -numa node,memdev=mem`"
    )]
    NoFd {
        /// Start of the refused range.
        iova: u64,
        /// Size of the refused range.
        size: u64,
    },
    /// The range is empty, overflows, or is not page-aligned.
    #[error("DMA_MAP range {iova:#x}+{size:#x} (file offset {offset:#x}) is empty, overflows, or is not page-aligned")]
    BadRange {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
        /// Offset into the file.
        offset: u64,
    },
    /// The window reaches past the end of its file.
    #[error(
        "DMA_MAP of {size:#x} bytes at file offset {offset:#x} reaches past the end of the \
         file ({file_size:#x} bytes)"
    )]
    OutsideFile {
        /// Size of the window.
        size: u64,
        /// Offset into the file.
        offset: u64,
        /// The file's size.
        file_size: u64,
    },
    /// The descriptor is not memory rnicd can map safely.
    #[error("DMA_MAP of {iova:#x}+{size:#x}: {why}")]
    BadFile {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
        /// What is wrong with the file, and what to do.
        why: String,
    },
    /// The range overlaps one already mapped.
    #[error("DMA_MAP range {iova:#x}+{size:#x} overlaps an existing mapping")]
    Overlap {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
    },
    /// The window would pass a limit: the function's quota, or [`MAX_FILES`].
    #[error("DMA_MAP of {iova:#x}+{size:#x}: {why}")]
    Quota {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
        /// Which limit.
        why: String,
    },
    /// mmap of the client's file failed.
    #[error(
        "cannot map the client's memory ({iova:#x}+{size:#x} at file offset {offset:#x}): {source}"
    )]
    Mmap {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
        /// Offset into the file.
        offset: u64,
        /// What mmap said.
        source: vm_memory::mmap::MmapRegionError,
    },
    /// DMA_UNMAP named a range that cuts a mapped region in two: regions are unmapped
    /// whole.
    #[error(
        "DMA_UNMAP of {iova:#x}+{size:#x} cuts a mapped region: unmap whole regions (as \
         they were mapped)"
    )]
    Straddles {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
    },
}

impl From<DmaMapError> for io::Error {
    fn from(e: DmaMapError) -> Self {
        io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
    }
}

/// The limits of a function's DMA windows: its quota of windows and of the pages they
/// cover (`rnic_abi::admin::Quota::dma_windows`, `dma_pages`, which the PF sets).
pub trait DmaQuota: std::fmt::Debug + Send + Sync {
    /// Charges one window of `pages` pages; `Err` says which limit it would pass.
    fn charge_window(&self, pages: u64) -> Result<(), String>;
    /// Gives back one window of `pages` pages.
    fn release_window(&self, pages: u64);
    /// The most windows the function may hold, for the client to know.
    fn max_windows(&self) -> u32;
}

/// No limits but those of the process: for a function alone in a test.
#[derive(Debug, Default)]
pub struct Unlimited;

impl DmaQuota for Unlimited {
    fn charge_window(&self, _pages: u64) -> Result<(), String> {
        Ok(())
    }
    fn release_window(&self, _pages: u64) {}
    fn max_windows(&self) -> u32 {
        u32::MAX
    }
}

/// A file behind windows: one descriptor shared by all of them.
#[derive(Debug)]
struct Backer {
    file: Arc<File>,
    /// Whether `file` was opened for writing (windows the device may write need it).
    writable: bool,
    windows: usize,
}

/// A window, as the book keeps it.
#[derive(Debug, Clone, Copy)]
struct Window {
    size: u64,
    /// The (device, inode) of its file.
    file: (u64, u64),
}

/// What the function's windows hold, for charging and releasing them.
#[derive(Debug, Default)]
struct Book {
    /// Windows by device address.
    windows: BTreeMap<u64, Window>,
    files: HashMap<(u64, u64), Backer>,
}

/// The DMA address space of one function.
#[derive(Debug)]
pub struct DmaSpace {
    readable: GuestMemoryAtomic<GuestMemoryMmap>,
    writable: GuestMemoryAtomic<GuestMemoryMmap>,
    /// Taken first by every change.
    book: Mutex<Book>,
    quota: Box<dyn DmaQuota>,
}

impl Default for DmaSpace {
    fn default() -> Self {
        Self::new()
    }
}

const PAGE: u64 = rnic_abi::PAGE_SIZE;

impl DmaSpace {
    /// An empty address space without limits: every DMA fails until the client maps memory.
    pub fn new() -> Self {
        Self::with_quota(Box::new(Unlimited))
    }

    /// An empty address space whose windows are charged to `quota`.
    pub fn with_quota(quota: Box<dyn DmaQuota>) -> Self {
        Self {
            readable: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            writable: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            book: Mutex::new(Book::default()),
            quota,
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most windows the client may hold.
    pub fn max_windows(&self) -> u32 {
        self.quota.max_windows()
    }

    /// Maps `size` bytes of `file` from `offset` at device address `iova`.
    pub fn map(
        &self,
        iova: u64,
        size: u64,
        offset: u64,
        file: Option<File>,
        writable: bool,
    ) -> Result<(), DmaMapError> {
        let Some(file) = file else {
            return Err(DmaMapError::NoFd { iova, size });
        };
        let bad_range = || DmaMapError::BadRange { iova, size, offset };
        if size == 0
            || !iova.is_multiple_of(PAGE)
            || !size.is_multiple_of(PAGE)
            || !offset.is_multiple_of(PAGE)
        {
            return Err(bad_range());
        }
        iova.checked_add(size).ok_or_else(bad_range)?;
        let len = usize::try_from(size).map_err(|_| bad_range())?;
        let key = check_file(&file, iova, size, offset)?;
        let mut book = self.book();
        let known = book.files.get(&key);
        if known.is_none() && book.files.len() >= MAX_FILES {
            return Err(DmaMapError::Quota {
                iova,
                size,
                why: format!(
                    "the function's windows already come from {MAX_FILES} files, the most \
                     one function may map"
                ),
            });
        }
        // Windows of one file share one descriptor: the first one that can do what the
        // window needs (writing needs a descriptor opened for it).
        let new_writable = opened_for_writing(&file);
        let (shared, keep) = match known {
            Some(b) if b.writable || !writable => (b.file.clone(), false),
            _ => (Arc::new(file), true),
        };
        let pages = size / PAGE;
        self.quota
            .charge_window(pages)
            .map_err(|why| DmaMapError::Quota { iova, size, why })?;
        let mapped = self.insert(iova, size, offset, len, shared.clone(), writable);
        if let Err(e) = mapped {
            self.quota.release_window(pages);
            return Err(e);
        }
        book.windows.insert(iova, Window { size, file: key });
        let backer = book.files.entry(key).or_insert(Backer {
            file: shared.clone(),
            writable: new_writable,
            windows: 0,
        });
        if keep && new_writable && !backer.writable {
            backer.file = shared;
            backer.writable = true;
        }
        backer.windows += 1;
        Ok(())
    }

    /// Maps the window and adds it to the views.
    fn insert(
        &self,
        iova: u64,
        size: u64,
        offset: u64,
        len: usize,
        file: Arc<File>,
        writable: bool,
    ) -> Result<(), DmaMapError> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let mapping = MmapRegion::build(
            Some(FileOffset::from_arc(file, offset)),
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
        )
        .map_err(|source| DmaMapError::Mmap {
            iova,
            size,
            offset,
            source,
        })?;
        let region = Arc::new(
            GuestRegionMmap::new(mapping, GuestAddress(iova)).ok_or(DmaMapError::BadRange {
                iova,
                size,
                offset,
            })?,
        );
        let overlap = || DmaMapError::Overlap { iova, size };
        // Take both update locks so the two views never disagree.
        let readable = self.readable.lock().unwrap_or_else(|e| e.into_inner());
        let writable_view = self.writable.lock().unwrap_or_else(|e| e.into_inner());
        let new_readable = self
            .readable
            .memory()
            .insert_region(region.clone())
            .map_err(|_| overlap())?;
        let new_writable = if writable {
            Some(
                self.writable
                    .memory()
                    .insert_region(region)
                    .map_err(|_| overlap())?,
            )
        } else {
            None
        };
        readable.replace(new_readable);
        if let Some(w) = new_writable {
            writable_view.replace(w);
        } else {
            drop(writable_view);
        }
        Ok(())
    }

    /// Unmaps every region inside `iova`..`iova + size`, as Linux's VFIO type1 IOMMU
    /// does: a range that holds no mapping unmaps nothing and is no error (QEMU sends such
    /// unmaps whenever a guest's IOMMU address space changes, and for what it could not
    /// map), and a range that cuts a region is refused, leaving everything mapped.
    pub fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaMapError> {
        let mut book = self.book();
        let end = iova.saturating_add(size);
        let straddles = || DmaMapError::Straddles { iova, size };
        // A window that starts before the range and reaches into it.
        if let Some((&start, w)) = book.windows.range(..iova).next_back() {
            if start + w.size > iova {
                return Err(straddles());
            }
        }
        let inside: Vec<(u64, Window)> = book
            .windows
            .range(iova..end)
            .map(|(&start, &w)| (start, w))
            .collect();
        if inside.iter().any(|&(start, w)| start + w.size > end) {
            return Err(straddles());
        }
        if inside.is_empty() {
            return Ok(());
        }
        let readable = self.readable.lock().unwrap_or_else(|e| e.into_inner());
        let writable = self.writable.lock().unwrap_or_else(|e| e.into_inner());
        // The writable view's regions are a subset of the readable view's.
        let new_readable =
            remove_within(&self.readable.memory(), iova, end).ok_or_else(straddles)?;
        let new_writable =
            remove_within(&self.writable.memory(), iova, end).ok_or_else(straddles)?;
        if let Some(r) = new_readable {
            readable.replace(r);
        }
        if let Some(w) = new_writable {
            writable.replace(w);
        }
        for (start, w) in inside {
            book.windows.remove(&start);
            self.forget(&mut book, w);
        }
        Ok(())
    }

    /// Releases a removed window's charge and, with its file's last window, the file.
    fn forget(&self, book: &mut Book, w: Window) {
        self.quota.release_window(w.size / PAGE);
        if let Some(b) = book.files.get_mut(&w.file) {
            b.windows -= 1;
            if b.windows == 0 {
                book.files.remove(&w.file);
            }
        }
    }

    /// Forgets every mapping (the client went away or asked UNMAP_ALL).
    pub fn unmap_all(&self) {
        let mut book = self.book();
        self.readable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(GuestMemoryMmap::new());
        self.writable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(GuestMemoryMmap::new());
        let windows = std::mem::take(&mut book.windows);
        for w in windows.into_values() {
            self.forget(&mut book, w);
        }
    }

    /// Memory the device may read.
    pub fn readable(&self) -> MemorySnapshot {
        self.readable.memory()
    }

    /// Memory the device may write (and read).
    pub fn writable(&self) -> MemorySnapshot {
        self.writable.memory()
    }

    /// What backs device address `iova` in this space (in the writable view if
    /// `writable`): the identity of the file the client mapped and the offset in it. Two
    /// functions reach the same memory at an address exactly when this is equal for both
    /// (the check `MIGRATE_QP` makes; QEMU maps one guest's RAM from one memfd into all
    /// of its devices).
    pub fn backing(&self, iova: u64, writable: bool) -> Option<Backing> {
        self.backings(&[(iova, writable)]).pop().flatten()
    }

    /// [`DmaSpace::backing`] of each `(device address, writable)` of `pages`, looking up
    /// each mapped file once (a large memory region has many pages in few mappings).
    pub fn backings(&self, pages: &[(u64, bool)]) -> Vec<Option<Backing>> {
        use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
        let (r, w) = (self.readable(), self.writable());
        let mut files: HashMap<(bool, u64), Option<(u64, u64)>> = Default::default();
        pages
            .iter()
            .map(|&(iova, writable)| {
                let mem = if writable { &w } else { &r };
                let region = mem.find_region(GuestAddress(iova))?;
                let start = region.start_addr().raw_value();
                let file_offset = region.file_offset()?;
                let (dev, ino) = (*files.entry((writable, start)).or_insert_with(|| {
                    let meta = file_offset.file().metadata().ok()?;
                    Some((meta.dev(), meta.ino()))
                }))?;
                Some(Backing {
                    dev,
                    ino,
                    offset: file_offset.start().checked_add(iova - start)?,
                })
            })
            .collect()
    }

    /// Number of mapped windows, for logs and tests.
    pub fn region_count(&self) -> usize {
        self.book().windows.len()
    }

    /// Number of distinct files behind the windows (each held open once).
    pub fn file_count(&self) -> usize {
        self.book().files.len()
    }
}

/// Checks that `file` is memory rnicd may map `size` bytes of from `offset`: a regular
/// shared-memory file (a memfd) sealed against shrinking, not on hugetlbfs, at least
/// `offset + size` bytes long. Returns its (device, inode).
fn check_file(file: &File, iova: u64, size: u64, offset: u64) -> Result<(u64, u64), DmaMapError> {
    let bad = |why: String| DmaMapError::BadFile { iova, size, why };
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("cannot fstat the descriptor: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(bad(format!(
            "the descriptor is not a regular file (mode {:o}): rnicd maps only memfds",
            meta.mode()
        )));
    }
    // SAFETY: F_GET_SEALS on a descriptor we own.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(bad(
            "the file is not a memfd (it cannot be sealed), so it could shrink under the \
             mapping; back guest RAM with memory-backend-memfd"
                .into(),
        ));
    }
    if seals & libc::F_SEAL_SHRINK == 0 {
        return Err(bad(
            "the memfd is not sealed against shrinking (F_SEAL_SHRINK), so it could shrink \
             under the mapping; QEMU's memory-backend-memfd seals by default (seal=on)"
                .into(),
        ));
    }
    // SAFETY: an all-zero statfs is valid; fstatfs fills it.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs into a statfs we own, on a descriptor we own.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } == 0
        && fs.f_type as i64 == HUGETLBFS_MAGIC
    {
        return Err(bad(
            "the memfd is on hugetlbfs, whose pages can run out under the mapping (SIGBUS); \
             use memory-backend-memfd without hugetlb=on"
                .into(),
        ));
    }
    match offset.checked_add(size) {
        Some(end) if end <= meta.len() => Ok((meta.dev(), meta.ino())),
        _ => Err(DmaMapError::OutsideFile {
            size,
            offset,
            file_size: meta.len(),
        }),
    }
}

/// Whether `file` was opened for writing.
fn opened_for_writing(file: &File) -> bool {
    // SAFETY: F_GETFL on a descriptor we own.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_ACCMODE == libc::O_RDWR
}

/// The memory behind a device address: which file, and where in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backing {
    /// Device of the file (`st_dev`).
    pub dev: u64,
    /// Inode of the file (`st_ino`).
    pub ino: u64,
    /// Byte offset in the file.
    pub offset: u64,
}

/// `mem` without its regions inside `iova..end`: `Some(None)` when there are none (it stays
/// as it is), `None` when a region lies partly inside.
fn remove_within(mem: &GuestMemoryMmap, iova: u64, end: u64) -> Option<Option<GuestMemoryMmap>> {
    use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
    let mut inside = Vec::new();
    for r in mem.iter() {
        let (start, len) = (r.start_addr().raw_value(), r.len());
        let r_end = start.saturating_add(len);
        if start >= iova && r_end <= end {
            inside.push((start, len));
        } else if start < end && r_end > iova {
            return None;
        }
    }
    let mut left: Option<GuestMemoryMmap> = None;
    for (start, len) in inside {
        left = Some(remove(left.as_ref().unwrap_or(mem), start, len)?);
    }
    Some(left)
}

/// `mem` without the region that starts at `iova` and is `size` bytes long, if there is one.
fn remove(mem: &GuestMemoryMmap, iova: u64, size: u64) -> Option<GuestMemoryMmap> {
    use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
    let region = mem.find_region(GuestAddress(iova))?;
    if region.start_addr().raw_value() != iova || region.len() != size {
        return None;
    }
    if mem.num_regions() == 1 {
        // vm-memory will not build an empty collection through remove_region.
        return Some(GuestMemoryMmap::new());
    }
    mem.remove_region(GuestAddress(iova), size)
        .ok()
        .map(|(m, _)| m)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use vm_memory::Bytes;

    /// An anonymous memory file of `size` bytes sealed against shrinking, as QEMU's
    /// memory-backend-memfd makes guest RAM (it may still grow, for tests that write it
    /// out).
    pub(crate) fn memfd(size: u64) -> File {
        let f = unsealed_memfd(size);
        assert_eq!(
            // SAFETY: F_ADD_SEALS on a descriptor we own.
            unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) },
            0
        );
        f
    }

    /// A memfd of `size` bytes that could be shrunk under a mapping.
    fn unsealed_memfd(size: u64) -> File {
        // SAFETY: memfd_create with a valid C string.
        let fd = unsafe {
            libc::memfd_create(
                c"dma-test".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh descriptor we own.
        let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(size).unwrap();
        f
    }

    #[test]
    fn files_that_could_shrink_or_are_not_memory_are_refused() {
        let space = DmaSpace::new();
        let refused = |f: File| match space.map(0x10000, 0x1000, 0, Some(f), true) {
            Err(DmaMapError::BadFile { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        assert!(refused(unsealed_memfd(0x1000)).contains("F_SEAL_SHRINK"));
        let dir = std::env::temp_dir().join(format!("rnic-dma-{}", std::process::id()));
        let plain = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&dir)
            .unwrap();
        plain.set_len(0x1000).unwrap();
        assert!(refused(plain).contains("not a memfd"));
        std::fs::remove_file(&dir).unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe into an array of two.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the pipe's descriptors are ours.
        let (r, _w) = unsafe {
            (
                <File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]),
                <File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]),
            )
        };
        assert!(refused(r).contains("not a regular file"));
        assert_eq!(space.region_count(), 0);
    }

    #[test]
    fn windows_must_lie_inside_their_file() {
        let space = DmaSpace::new();
        // 1 TiB onto a 4 KiB file, and a window that starts past its end.
        for (size, offset) in [(1u64 << 40, 0), (0x1000, 0x1000), (0x2000, 0)] {
            assert!(
                matches!(
                    space.map(0x10000, size, offset, Some(memfd(0x1000)), true),
                    Err(DmaMapError::OutsideFile { .. })
                ),
                "{size:#x} at {offset:#x}"
            );
        }
        assert!(matches!(
            space.map(0x10000, 0x1000, u64::MAX - 0xfff, Some(memfd(0x1000)), true),
            Err(DmaMapError::OutsideFile { .. })
        ));
        space
            .map(0x10000, 0x1000, 0, Some(memfd(0x1000)), true)
            .unwrap();
    }

    /// A quota of `windows` windows and `pages` pages.
    #[derive(Debug)]
    struct Fixed {
        windows: u64,
        pages: u64,
        used: Mutex<(u64, u64)>,
    }

    impl DmaQuota for Fixed {
        fn charge_window(&self, pages: u64) -> Result<(), String> {
            let mut used = self.used.lock().unwrap();
            if used.0 + 1 > self.windows || used.1 + pages > self.pages {
                return Err("over the quota".into());
            }
            *used = (used.0 + 1, used.1 + pages);
            Ok(())
        }
        fn release_window(&self, pages: u64) {
            let mut used = self.used.lock().unwrap();
            *used = (used.0 - 1, used.1 - pages);
        }
        fn max_windows(&self) -> u32 {
            self.windows as u32
        }
    }

    #[test]
    fn windows_are_charged_to_the_quota_and_released_by_every_unmap() {
        let quota = Arc::new(Fixed {
            windows: 3,
            pages: 4,
            used: Mutex::new((0, 0)),
        });
        #[derive(Debug)]
        struct Shared(Arc<Fixed>);
        impl DmaQuota for Shared {
            fn charge_window(&self, pages: u64) -> Result<(), String> {
                self.0.charge_window(pages)
            }
            fn release_window(&self, pages: u64) {
                self.0.release_window(pages)
            }
            fn max_windows(&self) -> u32 {
                self.0.max_windows()
            }
        }
        let space = DmaSpace::with_quota(Box::new(Shared(quota.clone())));
        assert_eq!(space.max_windows(), 3);
        let ram = memfd(0x10000);
        let map =
            |iova, pages| space.map(iova, pages * PAGE, 0, Some(ram.try_clone().unwrap()), true);
        map(0x10000, 2).unwrap();
        map(0x20000, 1).unwrap();
        assert!(
            matches!(map(0x30000, 2), Err(DmaMapError::Quota { .. })),
            "pages"
        );
        map(0x30000, 1).unwrap();
        assert!(
            matches!(map(0x40000, 1), Err(DmaMapError::Quota { .. })),
            "windows"
        );
        // A refused map charges nothing; an overlap gives back what it charged.
        space.unmap(0x30000, 0x1000).unwrap();
        assert!(matches!(map(0x10000, 1), Err(DmaMapError::Overlap { .. })));
        assert_eq!(*quota.used.lock().unwrap(), (2, 3));
        space.unmap(0x10000, 0x20000).unwrap();
        assert_eq!(*quota.used.lock().unwrap(), (0, 0));
        map(0x10000, 4).unwrap();
        space.unmap_all();
        assert_eq!(*quota.used.lock().unwrap(), (0, 0));
        assert_eq!(space.file_count(), 0);
    }

    #[test]
    fn windows_of_one_file_share_a_descriptor_and_files_are_limited() {
        let space = DmaSpace::new();
        let ram = memfd(0x100000);
        for i in 0..8u64 {
            space
                .map(
                    0x100000 + i * 0x1000,
                    0x1000,
                    i * 0x1000,
                    Some(ram.try_clone().unwrap()),
                    i % 2 == 0,
                )
                .unwrap();
        }
        assert_eq!((space.region_count(), space.file_count()), (8, 1));
        for i in 1..MAX_FILES as u64 {
            space
                .map(
                    0x1000_0000 + i * 0x1000,
                    0x1000,
                    0,
                    Some(memfd(0x1000)),
                    true,
                )
                .unwrap();
        }
        assert!(matches!(
            space.map(0x2000_0000, 0x1000, 0, Some(memfd(0x1000)), true),
            Err(DmaMapError::Quota { .. })
        ));
        // Another window of a file already in use is fine.
        space
            .map(0x3000_0000, 0x1000, 0, Some(ram.try_clone().unwrap()), true)
            .unwrap();
        // A file opened read-only cannot back a window the device writes, even when
        // another window of it is readable only.
        let path = format!("/proc/self/fd/{}", ram.as_raw_fd());
        let read_only = File::open(&path).unwrap();
        space
            .map(0x4000_0000, 0x1000, 0, Some(read_only), false)
            .unwrap();
        space.unmap(0x100000, 0x8000).unwrap();
        space.unmap(0x3000_0000, 0x1000).unwrap();
        assert_eq!(
            space.file_count(),
            MAX_FILES,
            "the read-only window keeps its file"
        );
    }

    #[test]
    fn fdless_map_is_refused_naming_memfd() {
        let space = DmaSpace::new();
        let err = space.map(0, 0x1000, 0, None, true).unwrap_err();
        assert!(err.to_string().contains("memory-backend-memfd"), "{err}");
        assert_eq!(space.region_count(), 0);
        // Unmapping the refused range is not an error, nor is unmapping it twice (nothing
        // is mapped there).
        space.unmap(0, 0x1000).unwrap();
        space.unmap(0, 0x1000).unwrap();
    }

    #[test]
    fn mapped_memory_is_shared_with_the_file() {
        let space = DmaSpace::new();
        let mut f = memfd(0x4000);
        space
            .map(0x10000, 0x2000, 0x1000, Some(f.try_clone().unwrap()), true)
            .unwrap();
        space
            .writable()
            .write_slice(b"hello", GuestAddress(0x10010))
            .unwrap();
        let mut buf = [0u8; 5];
        std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0x1010).unwrap();
        assert_eq!(&buf, b"hello");
        f.write_all(b"x").unwrap();
    }

    #[test]
    fn access_outside_mapped_memory_fails() {
        let space = DmaSpace::new();
        space
            .map(0x10000, 0x1000, 0, Some(memfd(0x1000)), true)
            .unwrap();
        let mut buf = [0u8; 16];
        assert!(space
            .readable()
            .read_slice(&mut buf, GuestAddress(0xfff8))
            .is_err());
        assert!(space
            .readable()
            .read_slice(&mut buf, GuestAddress(0x10ff8))
            .is_err());
        assert!(space
            .readable()
            .read_slice(&mut buf, GuestAddress(u64::MAX - 4))
            .is_err());
        assert!(space
            .readable()
            .read_slice(&mut buf, GuestAddress(0x10000))
            .is_ok());
    }

    #[test]
    fn read_only_regions_cannot_be_written() {
        let space = DmaSpace::new();
        space
            .map(0x10000, 0x1000, 0, Some(memfd(0x1000)), false)
            .unwrap();
        assert!(space
            .writable()
            .write_slice(b"x", GuestAddress(0x10000))
            .is_err());
        let mut b = [0u8; 1];
        assert!(space
            .readable()
            .read_slice(&mut b, GuestAddress(0x10000))
            .is_ok());
    }

    #[test]
    fn bad_ranges_and_overlaps_are_refused() {
        let space = DmaSpace::new();
        assert!(matches!(
            space.map(0x10, 0x1000, 0, Some(memfd(0x1000)), true),
            Err(DmaMapError::BadRange { .. })
        ));
        assert!(matches!(
            space.map(0, 0, 0, Some(memfd(0x1000)), true),
            Err(DmaMapError::BadRange { .. })
        ));
        assert!(matches!(
            space.map(u64::MAX - 0xfff, 0x2000, 0, Some(memfd(0x2000)), true),
            Err(DmaMapError::BadRange { .. })
        ));
        space
            .map(0x10000, 0x2000, 0, Some(memfd(0x2000)), true)
            .unwrap();
        assert!(matches!(
            space.map(0x11000, 0x2000, 0, Some(memfd(0x2000)), true),
            Err(DmaMapError::Overlap { .. })
        ));
    }

    #[test]
    fn unmap_removes_the_regions_inside_the_range_whole() {
        let space = DmaSpace::new();
        for (iova, size, writable) in [
            (0x10000, 0x1000, true),
            (0x12000, 0x1000, false),
            (0x20000, 0x1000, true),
            (0x30000, 0x2000, true),
        ] {
            space
                .map(iova, size, 0, Some(memfd(size)), writable)
                .unwrap();
        }
        // Two regions, one of them read-only, and the hole between them.
        space.unmap(0x10000, 0x3000).unwrap();
        assert_eq!(space.region_count(), 2);
        assert_eq!(space.backing(0x12000, false), None);
        // Nothing mapped there: nothing to do, no error (QEMU sends such unmaps).
        space.unmap(0x10000, 0x3000).unwrap();
        space.unmap(0x50000, 0x1000).unwrap();
        // A range that cuts a region in two is refused, and leaves it mapped.
        assert!(matches!(
            space.unmap(0x31000, 0x1000),
            Err(DmaMapError::Straddles { .. })
        ));
        assert!(space.unmap(0x2f000, 0x2000).is_err());
        assert_eq!(space.region_count(), 2);
        space.unmap(0x20000, 0x1000).unwrap();
        space.unmap(0x30000, 0x2000).unwrap();
        assert_eq!(space.region_count(), 0);
    }

    #[test]
    fn backing_names_the_same_memory_through_two_spaces() {
        let f = memfd(0x4000);
        let (a, b, c) = (DmaSpace::new(), DmaSpace::new(), DmaSpace::new());
        a.map(0x10000, 0x4000, 0, Some(f.try_clone().unwrap()), true)
            .unwrap();
        // b maps the same file at the same address, read-only; c another file.
        b.map(0x10000, 0x4000, 0, Some(f.try_clone().unwrap()), false)
            .unwrap();
        c.map(0x10000, 0x4000, 0, Some(memfd(0x4000)), true)
            .unwrap();
        let at = |s: &DmaSpace, iova, w| s.backing(iova, w);
        assert_eq!(at(&a, 0x11000, false).unwrap().offset, 0x1000);
        assert_eq!(at(&a, 0x11000, false), at(&b, 0x11000, false));
        assert_eq!(at(&b, 0x11000, true), None, "b may not write it");
        assert_ne!(at(&a, 0x11000, false), at(&c, 0x11000, false));
        assert_ne!(at(&a, 0x11000, false), at(&a, 0x12000, false));
        assert_eq!(at(&a, 0x20000, false), None, "unmapped");
        let pages = [(0x11000, false), (0x13000, true), (0x20000, false)];
        assert_eq!(
            a.backings(&pages),
            pages.map(|(p, w)| a.backing(p, w)).to_vec()
        );
        assert_eq!(b.backings(&pages)[1], None, "b may not write it");
    }

    #[test]
    fn snapshot_keeps_unmapped_memory_alive() {
        let space = DmaSpace::new();
        space
            .map(0x10000, 0x1000, 0, Some(memfd(0x1000)), true)
            .unwrap();
        let snapshot = space.writable();
        space.unmap_all();
        snapshot
            .write_slice(b"still here", GuestAddress(0x10000))
            .unwrap();
        assert!(space
            .writable()
            .write_slice(b"x", GuestAddress(0x10000))
            .is_err());
    }
}
