//! Application memory the device may reach: pages of a buffer the application allocated
//! itself (what `ibv_reg_mr` registers), as opposed to the [`DmaBuffer`]s a transport
//! allocates for rings.
//!
//! Two pieces serve both transports:
//!
//! - [`PageShare`]: registrations may overlap (two MRs on one buffer, or on neighbours
//!   that share a page), while what makes a page reachable (a DMA_MAP, an `mlock`) must
//!   be done once and undone after its last user. It keeps disjoint *units* (runs of
//!   pages made reachable together) with reference counts.
//! - [`back_with_memfd`] (host only): rnicd reaches only memory its client DMA_MAPs with a
//!   file descriptor, and malloc'd memory has none. So the pages are moved, in place,
//!   onto a memfd: their contents are copied into a fresh memfd, which is then mapped
//!   `MAP_SHARED | MAP_FIXED` over the same addresses. The application keeps its pointers
//!   and its data; rnicd maps the same memfd and sees every byte the application writes.
//!
//! Caveats of the remap (README.md repeats them for users):
//!
//! - A write by another thread to those pages between the copy and the new mapping is
//!   lost (for malloc'd memory that includes the allocator's own bookkeeping of
//!   neighbouring chunks). Register before other threads touch the pages, or register
//!   page-aligned buffers of whole pages.
//! - The pages stay memfd-backed after the last registration (restoring them would race
//!   with the application again, and the memory may have been freed and reused). They
//!   are `MAP_SHARED` from then on: a child made by `fork` shares them with its parent
//!   instead of getting a copy.
//! - `mlock`, `madvise` advice and transparent hugepages of the old pages do not carry
//!   over.
//! - Only private memory is moved (anonymous or a private file mapping). Shared file
//!   mappings, memory of other processes, guard pages and the kernel's special mappings
//!   (`[vdso]`, `[stack]`, ...) are refused with an error that names the range.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, Weak};

use rnic_abi::PAGE_SIZE;

use crate::error::{Error, Result};

#[cfg(doc)]
use super::DmaBuffer;

/// The page size of registrations (the device's, which is the host's on x86_64).
pub(crate) const PAGE: usize = PAGE_SIZE as usize;

/// The name every memfd made here has (`/memfd:rnic-mr (deleted)` in /proc/self/maps).
const MEMFD_NAME: &std::ffi::CStr = c"rnic-mr";

/// `addr..addr+len` widened to whole pages: (first page, end of the last page). `None` if
/// `len` is 0 or the range wraps.
pub(crate) fn page_span(addr: usize, len: usize) -> Option<(usize, usize)> {
    if len == 0 {
        return None;
    }
    let end = addr.checked_add(len)?.checked_add(PAGE - 1)? & !(PAGE - 1);
    Some((addr & !(PAGE - 1), end))
}

/// An error with an errno the application sees (`EFAULT`, `EOPNOTSUPP`, ...).
pub(crate) fn os_error(what: String, errno: i32) -> Error {
    Error::Io(what, io::Error::from_raw_os_error(errno))
}

/// One unit of [`PageShare`]: pages made reachable together.
#[derive(Debug)]
struct Unit<U> {
    start: usize,
    len: usize,
    refs: u32,
    value: U,
}

/// Reference-counted, disjoint runs of pages ("units"), for memory several registrations
/// may share. Each page belongs to at most one unit; a registration holds a reference on
/// every unit that covers one of its pages, and a unit is given back (its `U` returned
/// for undoing) when its last reference goes.
#[derive(Debug)]
pub(crate) struct PageShare<U> {
    /// The unit that holds each page, by page address.
    pages: BTreeMap<usize, u64>,
    units: HashMap<u64, Unit<U>>,
    next_id: u64,
}

impl<U> Default for PageShare<U> {
    fn default() -> Self {
        Self {
            pages: BTreeMap::new(),
            units: HashMap::new(),
            next_id: 0,
        }
    }
}

impl<U> PageShare<U> {
    /// Takes a reference, pushed onto `held`, on each unit covering a page of
    /// `start..end` (page-aligned), making new units for the runs of pages no unit
    /// covers with `make(run_start, run_len)`. Each unit is referenced once per call even
    /// if it covers several of the pages. On an error the references taken so far stay
    /// in `held`: the caller gives them back with [`PageShare::release`].
    pub(crate) fn acquire(
        &mut self,
        start: usize,
        end: usize,
        held: &mut Vec<u64>,
        mut make: impl FnMut(usize, usize) -> Result<U>,
    ) -> Result<()> {
        let mut page = start;
        while page < end {
            if let Some(&id) = self.pages.get(&page) {
                if !held.contains(&id) {
                    if let Some(u) = self.units.get_mut(&id) {
                        u.refs += 1;
                    }
                    held.push(id);
                }
                page += PAGE;
                continue;
            }
            let run_end = (page..end)
                .step_by(PAGE)
                .find(|p| self.pages.contains_key(p))
                .unwrap_or(end);
            let value = make(page, run_end - page)?;
            let id = self.next_id;
            self.next_id += 1;
            for p in (page..run_end).step_by(PAGE) {
                self.pages.insert(p, id);
            }
            self.units.insert(
                id,
                Unit {
                    start: page,
                    len: run_end - page,
                    refs: 1,
                    value,
                },
            );
            held.push(id);
            page = run_end;
        }
        Ok(())
    }

    /// Drops one reference on each unit of `held`; returns the units (start, length,
    /// value) whose last reference that was, which the caller undoes.
    pub(crate) fn release(&mut self, held: &[u64]) -> Vec<(usize, usize, U)> {
        let mut gone = Vec::new();
        for id in held {
            let Some(u) = self.units.get_mut(id) else {
                continue;
            };
            u.refs -= 1;
            if u.refs == 0 {
                let u = self.units.remove(id).expect("present above");
                for p in (u.start..u.start + u.len).step_by(PAGE) {
                    self.pages.remove(&p);
                }
                gone.push((u.start, u.len, u.value));
            }
        }
        gone
    }

    /// The unit holding `page`: its first page and value.
    pub(crate) fn unit_of(&self, page: usize) -> Option<(usize, &U)> {
        let u = self.units.get(self.pages.get(&page)?)?;
        Some((u.start, &u.value))
    }

    /// Pages held by some unit (for tests and logs).
    pub(crate) fn page_count(&self) -> usize {
        self.pages.len()
    }
}

/// One mapping of /proc/self/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Vma {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) exec: bool,
    /// `s` rather than `p`: a shared mapping.
    pub(crate) shared: bool,
    /// Offset in the mapped file.
    pub(crate) offset: u64,
    pub(crate) inode: u64,
    /// The path or pseudo-name (`[heap]`, `/memfd:rnic-mr (deleted)`), empty for
    /// anonymous memory.
    pub(crate) path: String,
}

impl Vma {
    /// Parses a line of /proc/PID/maps: `start-end perms offset dev inode [path]`.
    fn parse(line: &str) -> Option<Vma> {
        let mut f = line.splitn(6, ' ');
        let (range, perms, offset, _dev, inode) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let path = f.next().unwrap_or("").trim_start().to_string();
        let (start, end) = range.split_once('-')?;
        let perms = perms.as_bytes();
        if perms.len() < 4 {
            return None;
        }
        Some(Vma {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            read: perms[0] == b'r',
            write: perms[1] == b'w',
            exec: perms[2] == b'x',
            shared: perms[3] == b's',
            offset: u64::from_str_radix(offset, 16).ok()?,
            inode: inode.parse().ok()?,
            path,
        })
    }

    fn prot(&self) -> libc::c_int {
        let mut p = libc::PROT_NONE;
        if self.read {
            p |= libc::PROT_READ;
        }
        if self.write {
            p |= libc::PROT_WRITE;
        }
        if self.exec {
            p |= libc::PROT_EXEC;
        }
        p
    }

    /// Whether this is a memfd made by [`back_with_memfd`].
    fn is_ours(&self) -> bool {
        self.shared
            && self
                .path
                .strip_prefix("/memfd:")
                .is_some_and(|n| n.starts_with(MEMFD_NAME.to_str().unwrap_or("rnic-mr")))
    }

    /// Why the pages of this mapping cannot be moved onto a memfd, if they cannot.
    fn unsuitable(&self) -> Option<&'static str> {
        if !self.read {
            Some("it is not readable (a guard page or PROT_NONE memory)")
        } else if self.shared {
            Some("it is a shared mapping (of a file, shared memory or a device); register private memory (malloc, anonymous mmap)")
        } else if self.path.starts_with('[')
            && self.path != "[heap]"
            && !self.path.starts_with("[anon:")
        {
            Some("it is a special mapping of the kernel's (stack, vdso, ...)")
        } else {
            None
        }
    }
}

/// The mappings that overlap `start..end`, in address order, or `EFAULT` if some byte of
/// the range is not mapped at all.
pub(crate) fn mappings(start: usize, end: usize) -> Result<Vec<Vma>> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Error::Io("read /proc/self/maps".into(), e))?;
    covering(text.lines().filter_map(Vma::parse), start, end)
}

/// The mappings of this process over `start..end` (page-aligned), checked readable, and
/// writable if `writable`: `EFAULT` naming the part that is not.
pub(crate) fn accessible(start: usize, end: usize, writable: bool) -> Result<Vec<Vma>> {
    let vmas = mappings(start, end)?;
    for v in &vmas {
        if !v.read || (writable && !v.write) {
            return Err(os_error(
                format!(
                    "{:#x}..{:#x} is not {} by this process",
                    v.start.max(start),
                    v.end.min(end),
                    if writable { "writable" } else { "readable" }
                ),
                libc::EFAULT,
            ));
        }
    }
    Ok(vmas)
}

/// The mappings of `all` (in address order) that overlap `start..end`, which must cover
/// it without a gap.
fn covering(all: impl Iterator<Item = Vma>, start: usize, end: usize) -> Result<Vec<Vma>> {
    let mut out = Vec::new();
    let mut next = start;
    for v in all {
        if v.end <= start {
            continue;
        }
        if v.start >= end {
            break;
        }
        if v.start > next {
            break;
        }
        next = v.end;
        out.push(v);
        if next >= end {
            return Ok(out);
        }
    }
    Err(os_error(
        format!("{next:#x} is not mapped in this process (registering {start:#x}..{end:#x})"),
        libc::EFAULT,
    ))
}

/// A memfd made by [`back_with_memfd`], kept open while some registration uses its
/// pages (the transport needs the descriptor to DMA_MAP them again).
#[derive(Debug)]
pub(crate) struct Memfd {
    file: File,
    inode: u64,
}

impl Memfd {
    /// The descriptor.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// The memfds made so far that some registration still holds, by inode: the pages of
/// one may be registered again, and must then not be moved a second time.
static MEMFDS: Mutex<Vec<Weak<Memfd>>> = Mutex::new(Vec::new());

/// Serialises moves, so two threads registering overlapping memory do not both move it.
static MOVING: Mutex<()> = Mutex::new(());

/// A run of pages backed by a memfd: `len` bytes at `start`, at `offset` in the file.
#[derive(Debug, Clone)]
pub(crate) struct Backed {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) file: Arc<Memfd>,
    pub(crate) offset: u64,
}

/// Makes the pages `start..end` (page-aligned) of this process memfd-backed, moving the
/// ones that are not (see the module's documentation), and returns the runs of pages with
/// their memfd and offset. `writable`: the device will write, so the pages must be
/// writable for the application too (as the kernel's registration requires, `EFAULT`).
pub(crate) fn back_with_memfd(start: usize, end: usize, writable: bool) -> Result<Vec<Backed>> {
    let _moving = MOVING.lock().unwrap_or_else(|e| e.into_inner());
    let vmas = mappings(start, end)?;
    let mut known = MEMFDS.lock().unwrap_or_else(|e| e.into_inner());
    known.retain(|w| w.strong_count() > 0);

    // Each piece of the range: already on a memfd of ours, or to be moved.
    let mut out: Vec<Backed> = Vec::new();
    let mut to_move: Vec<(usize, usize, Vma)> = Vec::new();
    for v in vmas {
        let (s, e) = (v.start.max(start), v.end.min(end));
        if writable && !v.write {
            return Err(os_error(
                format!("{s:#x}..{e:#x} is mapped read-only, and the registration allows writes"),
                libc::EFAULT,
            ));
        }
        if v.is_ours() {
            if let Some(file) = known
                .iter()
                .filter_map(Weak::upgrade)
                .find(|m| m.inode == v.inode)
            {
                out.push(Backed {
                    start: s,
                    len: e - s,
                    offset: v.offset + (s - v.start) as u64,
                    file,
                });
                continue;
            }
            // A memfd of ours no registration holds any more: the pages are private to
            // this process in all but name, so moving them again is safe.
        } else if let Some(why) = v.unsuitable() {
            return Err(os_error(
                format!("cannot register {s:#x}..{e:#x} ({}): {why}", v.path),
                libc::EOPNOTSUPP,
            ));
        }
        to_move.push((s, e, v));
    }

    // Adjacent pieces move together onto one memfd.
    let mut i = 0;
    while i < to_move.len() {
        let mut j = i + 1;
        while j < to_move.len() && to_move[j].0 == to_move[j - 1].1 {
            j += 1;
        }
        let run = &to_move[i..j];
        let file = move_run(run)?;
        known.push(Arc::downgrade(&file));
        out.push(Backed {
            start: run[0].0,
            len: run[run.len() - 1].1 - run[0].0,
            file,
            offset: 0,
        });
        i = j;
    }
    out.sort_by_key(|b| b.start);
    Ok(out)
}

/// A fresh memfd of `len` bytes, created with `MFD_ALLOW_SEALING` and sealed so that its
/// size never changes (`F_SEAL_SHRINK`, `F_SEAL_GROW`, then `F_SEAL_SEAL`): rnicd, as
/// QEMU's `memory-backend-memfd` does, refuses DMA_MAP of a file whose size can shrink
/// under the device's mapping. `what` names it in errors.
pub(crate) fn sealed_memfd(name: &std::ffi::CStr, len: usize, what: &str) -> Result<File> {
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(Error::last_os(format!("memfd_create for {what}")));
    }
    // SAFETY: a fresh descriptor, owned from here on by the File.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len as u64)
        .map_err(|e| Error::Io(format!("size the {len}-byte memfd of {what}"), e))?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own; the result is checked.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(Error::last_os(format!("seal the memfd of {what}")));
    }
    Ok(file)
}

/// Moves the adjacent pieces `run` (start, end, their mapping) onto one fresh memfd:
/// copies their bytes into it, then maps it over them with each piece's protection.
fn move_run(run: &[(usize, usize, Vma)]) -> Result<Arc<Memfd>> {
    let start = run[0].0;
    let len = run[run.len() - 1].1 - start;
    let file = sealed_memfd(MEMFD_NAME, len, "registered memory")?;
    // The copy goes through pwrite from the raw range, with no Rust reference to it:
    // another thread of the application may be writing it (the caveat above).
    let mut done = 0;
    while done < len {
        // SAFETY: start..start+len is mapped and readable (checked by the caller against
        // /proc/self/maps); the kernel only reads it.
        let n = unsafe {
            libc::pwrite(
                file.as_raw_fd(),
                (start + done) as *const libc::c_void,
                len - done,
                done as libc::off_t,
            )
        };
        if n <= 0 {
            let e = io::Error::last_os_error();
            if n < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Io(
                format!("copy {start:#x}+{len:#x} into a memfd"),
                e,
            ));
        }
        done += n as usize;
    }
    for (s, e, v) in run {
        // SAFETY: replaces the pages s..e, which hold exactly the bytes just copied to
        // the file at the same offset, with a shared mapping of the file: the memory
        // keeps its contents and its address. MAP_FIXED unmaps what was there; nothing
        // of Rust's refers to it (it is the application's memory).
        let p = unsafe {
            libc::mmap(
                *s as *mut libc::c_void,
                e - s,
                v.prot(),
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                (s - start) as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os(format!(
                "map a memfd over {s:#x}..{e:#x} for the device"
            )));
        }
    }
    let inode = file
        .metadata()
        .map_err(|e| Error::Io("fstat a memfd".into(), e))?
        .ino();
    log::debug!("moved {start:#x}+{len:#x} onto memfd inode {inode} for the device");
    Ok(Arc::new(Memfd { file, inode }))
}

/// A unit of registered pages: knows the device address of each of its pages.
pub(crate) trait PinUnit: Send + 'static {
    /// The device address of `page`, a page of this unit, which starts at `start`.
    fn device_addr(&self, start: usize, page: usize) -> u64;
}

/// What undoes a unit when its last registration goes (a DMA_UNMAP, an `munlock`):
/// called with the unit's start, length and value.
pub(crate) type Undo<U> = Box<dyn Fn(usize, usize, U) + Send + Sync>;

/// The application memory one transport made reachable: the units of [`PageShare`] and
/// how to undo one. Registrations are [`DmaBuffer`]s whose release gives their units
/// back.
pub(crate) struct UserPages<U> {
    share: Mutex<PageShare<U>>,
    undo: Undo<U>,
}

impl<U> std::fmt::Debug for UserPages<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pages = self.share.lock().map_or(0, |s| s.page_count());
        f.debug_struct("UserPages").field("pages", &pages).finish()
    }
}

impl<U: PinUnit> UserPages<U> {
    pub(crate) fn new(undo: Undo<U>) -> Arc<Self> {
        Arc::new(Self {
            share: Mutex::new(PageShare::default()),
            undo,
        })
    }

    /// Makes `addr..addr+len` reachable: `pieces` are the page-aligned pieces
    /// (start, end, what the piece is) that cover its pages in order, and
    /// `make(piece, run_start, run_len)` makes a unit of the pages of `piece` no earlier
    /// registration made reachable. Returns the buffer of the whole pages, whose release
    /// gives the units back.
    pub(crate) fn map<P>(
        self: &Arc<Self>,
        addr: usize,
        len: usize,
        pieces: &[(usize, usize, P)],
        mut make: impl FnMut(&P, usize, usize) -> Result<U>,
    ) -> Result<super::DmaBuffer> {
        let (start, end) = page_span(addr, len)
            .ok_or_else(|| os_error(format!("{len} bytes at {addr:#x}"), libc::EINVAL))?;
        let mut share = self.share.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = Vec::new();
        let mut result = Ok(());
        for (s, e, piece) in pieces {
            result = share.acquire(*s, *e, &mut held, |rs, rl| make(piece, rs, rl));
            if result.is_err() {
                break;
            }
        }
        let pages: Option<Vec<u64>> = (start..end)
            .step_by(PAGE)
            .map(|p| share.unit_of(p).map(|(us, u)| u.device_addr(us, p)))
            .collect();
        let failed = match (result, pages) {
            (Ok(()), Some(pages)) => {
                drop(share);
                let release: Arc<dyn super::DmaRelease> = Arc::new(UserRelease {
                    pages: self.clone(),
                    held,
                });
                let ptr = std::ptr::NonNull::new(start as *mut u8)
                    .ok_or_else(|| os_error("registering address 0".into(), libc::EFAULT))?;
                // SAFETY: start..end is mapped in this process (the pieces say so) and
                // stays reachable by the device until `release` gives the units back;
                // `pages` has one device address per page of it.
                return Ok(unsafe {
                    super::DmaBuffer::new(ptr, end - start, pages, Some(release))
                });
            }
            (Err(e), _) => e,
            (Ok(()), None) => Error::Device(format!(
                "{start:#x}..{end:#x}: the pieces given do not cover every page"
            )),
        };
        for (s, l, u) in share.release(&held) {
            (self.undo)(s, l, u);
        }
        Err(failed)
    }
}

/// Gives a registration's units back when its [`DmaBuffer`] goes.
struct UserRelease<U> {
    pages: Arc<UserPages<U>>,
    held: Vec<u64>,
}

impl<U: PinUnit> super::DmaRelease for UserRelease<U> {
    fn release(&self, _ptr: std::ptr::NonNull<u8>, _len: usize, _device_pages: &[u64]) {
        // Undone under the lock: a registration of the same pages racing with this one
        // must find them either still reachable or already unreachable, never between.
        let mut share = self.pages.share.lock().unwrap_or_else(|e| e.into_inner());
        for (s, l, u) in share.release(&self.held) {
            (self.pages.undo)(s, l, u);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn vma(start: usize, end: usize, perms: &str, path: &str) -> Vma {
        Vma::parse(&format!(
            "{start:x}-{end:x} {perms} 00000000 00:00 0 {path}"
        ))
        .unwrap()
    }

    #[test]
    fn maps_lines_parse() {
        let v = Vma::parse(
            "7f3c8a000000-7f3c8a021000 rw-s 00002000 00:01 1234                       /memfd:rnic-mr (deleted)",
        )
        .unwrap();
        assert_eq!((v.start, v.end), (0x7f3c_8a00_0000, 0x7f3c_8a02_1000));
        assert!(v.read && v.write && !v.exec && v.shared);
        assert_eq!((v.offset, v.inode), (0x2000, 1234));
        assert_eq!(v.path, "/memfd:rnic-mr (deleted)");
        assert!(v.is_ours());
        let anon = Vma::parse("55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(anon.path, "");
        assert!(anon.unsuitable().is_none() && !anon.is_ours());
        assert!(vma(0, 0x1000, "rw-p", "[heap]").unsuitable().is_none());
        assert!(vma(0, 0x1000, "rw-p", "[stack]").unsuitable().is_some());
        assert!(vma(0, 0x1000, "---p", "").unsuitable().is_some());
        assert!(vma(0, 0x1000, "rw-s", "/dev/shm/x").unsuitable().is_some());
        assert!(vma(0, 0x1000, "r--p", "/usr/lib/libc.so.6")
            .unsuitable()
            .is_none());
    }

    #[test]
    fn a_range_must_be_covered_without_gaps() {
        let all = || {
            vec![
                vma(0x1000, 0x3000, "rw-p", ""),
                vma(0x3000, 0x4000, "rw-p", "[heap]"),
                vma(0x6000, 0x7000, "rw-p", ""),
            ]
            .into_iter()
        };
        assert_eq!(covering(all(), 0x2000, 0x4000).unwrap().len(), 2);
        assert_eq!(covering(all(), 0x6000, 0x7000).unwrap().len(), 1);
        let e = covering(all(), 0x2000, 0x5000).unwrap_err();
        assert!(matches!(&e, Error::Io(_, io) if io.raw_os_error() == Some(libc::EFAULT)));
        assert!(covering(all(), 0x8000, 0x9000).is_err());
    }

    #[test]
    fn page_spans_widen_to_whole_pages() {
        assert_eq!(page_span(0x1001, 1), Some((0x1000, 0x2000)));
        assert_eq!(page_span(0x1000, 0x1000), Some((0x1000, 0x2000)));
        assert_eq!(page_span(0x1fff, 2), Some((0x1000, 0x3000)));
        assert_eq!(page_span(0x1000, 0), None);
        assert_eq!(page_span(usize::MAX - 10, 100), None);
    }

    #[test]
    fn overlapping_registrations_share_units() {
        let mut s: PageShare<&'static str> = PageShare::default();
        let mut made = Vec::new();
        let mut a = Vec::new();
        s.acquire(0x1000, 0x4000, &mut a, |st, len| {
            made.push((st, len));
            Ok("a")
        })
        .unwrap();
        let mut b = Vec::new();
        s.acquire(0x3000, 0x6000, &mut b, |st, len| {
            made.push((st, len));
            Ok("b")
        })
        .unwrap();
        // b reuses a's unit for page 0x3000 and makes one for the rest.
        assert_eq!(made, [(0x1000, 0x3000), (0x4000, 0x2000)]);
        assert_eq!(s.page_count(), 5);
        assert_eq!(
            s.unit_of(0x3000).map(|(st, v)| (st, *v)),
            Some((0x1000, "a"))
        );
        // Dropping a keeps its unit, which b still uses.
        assert!(s.release(&a).is_empty());
        let gone = s.release(&b);
        assert_eq!(gone.len(), 2);
        assert_eq!(s.page_count(), 0);
    }

    #[test]
    fn a_failed_acquire_leaves_what_to_release() {
        let mut s: PageShare<u32> = PageShare::default();
        let mut first = Vec::new();
        s.acquire(0x2000, 0x3000, &mut first, |_, _| Ok(1)).unwrap();
        let mut held = Vec::new();
        let r = s.acquire(0x1000, 0x5000, &mut held, |st, _| {
            if st == 0x1000 {
                Ok(2)
            } else {
                Err(os_error("no".into(), libc::ENOMEM))
            }
        });
        assert!(r.is_err());
        // The unit made (0x1000) and the one referenced (0x2000) are held.
        assert_eq!(held.len(), 2);
        let gone = s.release(&held);
        assert_eq!(gone.iter().map(|g| g.2).collect::<Vec<_>>(), [2]);
        assert_eq!(s.release(&first).len(), 1);
    }

    /// An anonymous mapping of `pages` pages, unmapped on drop.
    struct Anon(*mut u8, usize);

    impl Anon {
        fn new(pages: usize) -> Anon {
            let len = pages * PAGE;
            // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            Anon(p.cast(), len)
        }

        fn addr(&self) -> usize {
            self.0 as usize
        }
    }

    impl Drop for Anon {
        fn drop(&mut self) {
            // SAFETY: unmaps the mapping made in new(), which nothing uses any more.
            unsafe { libc::munmap(self.0.cast(), self.1) };
        }
    }

    #[test]
    fn moving_pages_keeps_their_contents_and_shares_them_with_the_memfd() {
        let m = Anon::new(3);
        for i in 0..3 * PAGE {
            // SAFETY: in bounds of the mapping.
            unsafe { m.0.add(i).write((i % 251) as u8) };
        }
        let runs = back_with_memfd(m.addr() + PAGE, m.addr() + 3 * PAGE, true).unwrap();
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        assert_eq!((r.start, r.len, r.offset), (m.addr() + PAGE, 2 * PAGE, 0));
        // Every byte is where it was, in the moved pages and in the one left alone.
        for i in 0..3 * PAGE {
            // SAFETY: in bounds of the mapping.
            assert_eq!(unsafe { m.0.add(i).read() }, (i % 251) as u8, "byte {i}");
        }
        // The application's writes reach the file, which is what rnicd maps.
        // SAFETY: in bounds.
        unsafe { m.0.add(PAGE + 5).write(0xAB) };
        let mut b = [0u8; 1];
        r.file.file.read_exact_at(&mut b, 5).unwrap();
        assert_eq!(b[0], 0xAB);
        let vmas = mappings(m.addr() + PAGE, m.addr() + 3 * PAGE).unwrap();
        assert!(vmas.iter().all(Vma::is_ours), "{vmas:?}");

        // Registered again (overlapping, plus the page before): the moved pages stay on
        // their memfd, the new page gets one of its own.
        let again = back_with_memfd(m.addr(), m.addr() + 2 * PAGE, true).unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!((again[0].start, again[0].len), (m.addr(), PAGE));
        assert_eq!(again[1].start, m.addr() + PAGE);
        assert_eq!(again[1].file.inode, r.file.inode);
        assert_eq!(again[1].offset, 0);
    }

    #[test]
    fn unsuitable_memory_is_refused_with_an_errno() {
        let m = Anon::new(2);
        // A guard page (PROT_NONE) in the range.
        assert_eq!(
            // SAFETY: changes the protection of our own second page.
            unsafe { libc::mprotect(m.0.add(PAGE).cast(), PAGE, libc::PROT_NONE) },
            0
        );
        let e = back_with_memfd(m.addr(), m.addr() + 2 * PAGE, false).unwrap_err();
        assert!(matches!(&e, Error::Io(_, io) if io.raw_os_error() == Some(libc::EOPNOTSUPP)));
        // Read-only memory for a registration that allows writes.
        assert_eq!(
            // SAFETY: as above.
            unsafe { libc::mprotect(m.0.add(PAGE).cast(), PAGE, libc::PROT_READ) },
            0
        );
        let e = back_with_memfd(m.addr() + PAGE, m.addr() + 2 * PAGE, true).unwrap_err();
        assert!(matches!(&e, Error::Io(_, io) if io.raw_os_error() == Some(libc::EFAULT)));
        // Read-only is fine for a read-only registration, and stays read-only.
        back_with_memfd(m.addr() + PAGE, m.addr() + 2 * PAGE, false).unwrap();
        let v = mappings(m.addr() + PAGE, m.addr() + 2 * PAGE).unwrap();
        assert!(!v[0].write && v[0].read);
        // Memory that is not mapped at all: the page above 0, below mmap_min_addr (an
        // address unmapped here could be mapped again by a test running beside this one).
        let addr = PAGE;
        let e = back_with_memfd(addr, addr + PAGE, false).unwrap_err();
        assert!(matches!(&e, Error::Io(_, io) if io.raw_os_error() == Some(libc::EFAULT)));
    }

    #[test]
    fn shared_file_mappings_are_refused() {
        let f = tempfile_like();
        f.set_len(PAGE as u64).unwrap();
        // SAFETY: a fresh shared mapping of our own file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let e = back_with_memfd(p as usize, p as usize + PAGE, true).unwrap_err();
        assert!(matches!(&e, Error::Io(_, io) if io.raw_os_error() == Some(libc::EOPNOTSUPP)));
        assert!(e.to_string().contains("shared mapping"), "{e}");
        // SAFETY: unmaps what was mapped above.
        unsafe { libc::munmap(p, PAGE) };
    }

    /// An unlinked regular file in the temporary directory.
    fn tempfile_like() -> File {
        let path = std::env::temp_dir().join(format!("rnic-um-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
