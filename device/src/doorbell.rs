//! The doorbell BAR: memory shared between the device and the VMM, which maps it into the
//! guest, so that ringing a doorbell costs the driver one store and no message.
//!
//! See `rnic_abi::doorbell` for the protocol: the device polls doorbells while it has
//! work, and asks for a kick through `NOTIFY_REQUEST` before it sleeps.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use rnic_abi::doorbell::{NOTIFY_REQUEST, RESET_COUNT};
use rnic_abi::PAGE_SIZE;

/// The memfd behind a function's doorbell BAR, and the device's own mapping of it.
#[derive(Debug)]
pub struct DoorbellBar {
    file: File,
    ptr: NonNull<u8>,
    len: usize,
    /// The function's resets so far, written to [`RESET_COUNT`] by every reset: the
    /// device's own copy, since the driver can write the BAR.
    resets: AtomicU32,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for DoorbellBar {}
// SAFETY: see above.
unsafe impl Sync for DoorbellBar {}

impl DoorbellBar {
    /// Creates a zeroed BAR of `pages` doorbell pages. The memfd is sealed at its size
    /// before anyone else sees it: the VMM gets the descriptor itself, and a file that
    /// shrinks under rnicd's own mapping would turn the device's next doorbell read into
    /// SIGBUS.
    pub fn new(pages: u32) -> io::Result<Self> {
        let len = pages as usize * PAGE_SIZE as usize;
        // SAFETY: memfd_create with a valid C string; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"rnic-doorbells".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that we now own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on a descriptor we own.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: mapping a file we own with a length it has; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr as *mut u8).ok_or_else(io::Error::last_os_error)?;
        Ok(Self {
            file,
            ptr,
            len,
            resets: AtomicU32::new(0),
        })
    }

    /// The descriptor the VMM maps (handed out with the region's sparse-mmap area).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the BAR has no pages.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn word(&self, offset: u64) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || offset.checked_add(4)? > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds and aligned; the mapping lives as long as self, and AtomicU32
        // has the layout of u32.
        Some(unsafe { &*(self.ptr.as_ptr().add(offset as usize) as *const AtomicU32) })
    }

    /// Reads the 32-bit word at byte `offset`, or `None` outside the BAR or misaligned.
    pub fn read32(&self, offset: u64) -> Option<u32> {
        self.word(offset).map(|w| w.load(Ordering::Acquire))
    }

    /// Writes the 32-bit word at byte `offset`; false outside the BAR or misaligned.
    pub fn write32(&self, offset: u64, value: u32) -> bool {
        self.word(offset)
            .map(|w| w.store(value, Ordering::Release))
            .is_some()
    }

    /// Atomically replaces the 32-bit word at `offset` with `value`, returning the old one.
    pub fn swap32(&self, offset: u64, value: u32) -> Option<u32> {
        self.word(offset).map(|w| w.swap(value, Ordering::AcqRel))
    }

    /// Atomically sets `bits` in the 32-bit word at `offset` (a rung bit the device
    /// sets on a driver's behalf, e.g. for a queue that moved here with work pending).
    pub fn or32(&self, offset: u64, bits: u32) -> bool {
        self.word(offset)
            .map(|w| w.fetch_or(bits, Ordering::AcqRel))
            .is_some()
    }

    /// Reads bytes for a trapped region read (a client that did not mmap the BAR).
    pub fn read_bytes(&self, offset: u64, data: &mut [u8]) -> bool {
        match offset.checked_add(data.len() as u64) {
            Some(end) if end <= self.len as u64 => {
                // SAFETY: in bounds, checked above.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.ptr.as_ptr().add(offset as usize),
                        data.as_mut_ptr(),
                        data.len(),
                    )
                };
                true
            }
            _ => false,
        }
    }

    /// Writes bytes for a trapped region write.
    pub fn write_bytes(&self, offset: u64, data: &[u8]) -> bool {
        match offset.checked_add(data.len() as u64) {
            Some(end) if end <= self.len as u64 => {
                // SAFETY: in bounds, checked above.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        self.ptr.as_ptr().add(offset as usize),
                        data.len(),
                    )
                };
                true
            }
            _ => false,
        }
    }

    /// Sets or clears `NOTIFY_REQUEST` in `page`.
    pub fn request_notify(&self, page: u32, on: bool) {
        self.write32(u64::from(page) * PAGE_SIZE + NOTIFY_REQUEST, u32::from(on));
    }

    /// Function reset: zeroes the whole BAR but for [`RESET_COUNT`], which counts one
    /// more reset.
    pub fn reset(&self) {
        let count = self.resets.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        // SAFETY: the whole mapping is ours to write.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
        self.write32(RESET_COUNT, count);
    }
}

impl Drop for DoorbellBar {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn writes_through_the_fd_are_seen_by_the_device() {
        let bar = DoorbellBar::new(2).unwrap();
        // SAFETY: dup of a valid fd, owned by the new File.
        let f = unsafe { File::from_raw_fd(libc::dup(bar.fd())) };
        f.write_at(&7u32.to_le_bytes(), PAGE_SIZE + 0x40).unwrap();
        assert_eq!(bar.read32(PAGE_SIZE + 0x40), Some(7));
        bar.request_notify(1, true);
        let mut b = [0u8; 4];
        f.read_at(&mut b, PAGE_SIZE).unwrap();
        assert_eq!(u32::from_le_bytes(b), 1);
    }

    #[test]
    fn the_memfd_the_vmm_gets_cannot_change_size() {
        let bar = DoorbellBar::new(1).unwrap();
        // SAFETY: dup of a valid fd, owned by the new File: what the VMM holds.
        let f = unsafe { File::from_raw_fd(libc::dup(bar.fd())) };
        assert!(f.set_len(0).is_err(), "shrinking would SIGBUS the device");
        assert!(f.set_len(2 * PAGE_SIZE).is_err());
        assert_ne!(
            // SAFETY: F_ADD_SEALS on a descriptor we own: the seals are sealed too.
            unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, 0) },
            0
        );
        bar.write32(0x40, 5);
        assert_eq!(bar.read32(0x40), Some(5));
    }

    #[test]
    fn accesses_outside_or_misaligned_are_refused() {
        let bar = DoorbellBar::new(1).unwrap();
        assert_eq!(bar.read32(PAGE_SIZE), None);
        assert_eq!(bar.read32(2), None);
        assert!(!bar.write32(u64::MAX - 1, 1));
        assert!(!bar.read_bytes(PAGE_SIZE - 2, &mut [0u8; 4]));
        assert!(!bar.write_bytes(u64::MAX, &[0u8; 4]));
    }

    #[test]
    fn reset_zeroes_everything_but_the_reset_count() {
        let bar = DoorbellBar::new(1).unwrap();
        assert_eq!(bar.read32(RESET_COUNT), Some(0));
        bar.write32(0x40, 9);
        bar.reset();
        assert_eq!(bar.read32(0x40), Some(0));
        assert_eq!(bar.read32(RESET_COUNT), Some(1));
        // A driver that overwrites the count does not change the device's own.
        bar.write32(RESET_COUNT, 77);
        bar.reset();
        assert_eq!(bar.read32(RESET_COUNT), Some(2));
    }
}
