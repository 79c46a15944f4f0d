//! The function's view of its client's memory: what DMA_MAP gave it, and nothing else.
//!
//! Every DMA_MAP region becomes a `vm-memory` region mapped from the file descriptor the
//! client passed, so the device reads and writes guest RAM directly. Regions the client
//! mapped read-only are kept apart from the writable ones: device writes only ever go
//! through [`DmaSpace::writable`], where a read-only region is simply absent, so a write to
//! it fails like a write to unmapped memory instead of faulting the process.

use std::fs::File;
use std::io;

use vm_memory::{
    Address, FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap,
    GuestRegionMmap, MmapRegion,
};

/// A snapshot of mapped memory. Holding it keeps every region it contains mapped in this
/// process, even if the client unmaps it meanwhile, so an in-flight DMA never faults.
pub type MemorySnapshot = vm_memory::GuestMemoryLoadGuard<GuestMemoryMmap>;

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
    #[error("DMA_MAP range {iova:#x}+{size:#x} is empty, overflows, or is not page-aligned")]
    BadRange {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
    },
    /// The range overlaps one already mapped.
    #[error("DMA_MAP range {iova:#x}+{size:#x} overlaps an existing mapping")]
    Overlap {
        /// Start of the range.
        iova: u64,
        /// Size of the range.
        size: u64,
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

/// The DMA address space of one function.
#[derive(Debug)]
pub struct DmaSpace {
    readable: GuestMemoryAtomic<GuestMemoryMmap>,
    writable: GuestMemoryAtomic<GuestMemoryMmap>,
    /// Ranges whose DMA_MAP was refused for lack of a descriptor. QEMU maps its ROMs and
    /// other devices' BARs that way and later unmaps them; those unmaps succeed quietly.
    refused: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl Default for DmaSpace {
    fn default() -> Self {
        Self::new()
    }
}

const PAGE: u64 = rnic_abi::PAGE_SIZE;

impl DmaSpace {
    /// An empty address space: every DMA fails until the client maps memory.
    pub fn new() -> Self {
        Self {
            readable: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            writable: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            refused: std::sync::Mutex::new(Vec::new()),
        }
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
            self.refused_ranges().push((iova, size));
            return Err(DmaMapError::NoFd { iova, size });
        };
        let bad_range = || DmaMapError::BadRange { iova, size };
        if size == 0
            || !iova.is_multiple_of(PAGE)
            || !size.is_multiple_of(PAGE)
            || !offset.is_multiple_of(PAGE)
        {
            return Err(bad_range());
        }
        iova.checked_add(size).ok_or_else(bad_range)?;
        let len = usize::try_from(size).map_err(|_| bad_range())?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let mapping = MmapRegion::build(
            Some(FileOffset::new(file, offset)),
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
        let region = std::sync::Arc::new(
            GuestRegionMmap::new(mapping, GuestAddress(iova)).ok_or_else(bad_range)?,
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

    fn refused_ranges(&self) -> std::sync::MutexGuard<'_, Vec<(u64, u64)>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unmaps every region inside `iova`..`iova + size`, as Linux's VFIO type1 IOMMU
    /// does: a range that holds no mapping unmaps nothing and is no error (QEMU sends such
    /// unmaps whenever a guest's IOMMU address space changes), and a range that cuts a
    /// region is refused, leaving everything mapped.
    pub fn unmap(&self, iova: u64, size: u64) -> Result<(), DmaMapError> {
        {
            let mut refused = self.refused_ranges();
            if let Some(i) = refused.iter().position(|&r| r == (iova, size)) {
                refused.swap_remove(i);
                return Ok(());
            }
        }
        let readable = self.readable.lock().unwrap_or_else(|e| e.into_inner());
        let writable = self.writable.lock().unwrap_or_else(|e| e.into_inner());
        let end = iova.saturating_add(size);
        let straddles = || DmaMapError::Straddles { iova, size };
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
        Ok(())
    }

    /// Forgets every mapping (the client went away or asked UNMAP_ALL).
    pub fn unmap_all(&self) {
        self.refused_ranges().clear();
        self.readable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(GuestMemoryMmap::new());
        self.writable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(GuestMemoryMmap::new());
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
        use std::os::unix::fs::MetadataExt;
        use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
        let (r, w) = (self.readable(), self.writable());
        let mut files: std::collections::HashMap<(bool, u64), Option<(u64, u64)>> =
            Default::default();
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

    /// Number of mapped regions, for logs and tests.
    pub fn region_count(&self) -> usize {
        use vm_memory::GuestMemoryBackend;
        self.readable.memory().num_regions()
    }
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

    /// An anonymous memory file of `size` bytes, as a VMM's guest RAM.
    pub(crate) fn memfd(size: u64) -> File {
        // SAFETY: memfd_create with a valid C string.
        let fd = unsafe { libc::memfd_create(c"dma-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh descriptor we own.
        let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.set_len(size).unwrap();
        f
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
