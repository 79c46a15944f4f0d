//! How the driver reaches the device: the one layer that differs between a VM and the host.
//!
//! Everything above [`Transport`] (the command queue, the verbs) is the same code whether
//! the device is a PCI function inside a VM or a vfio-user socket on the host, where the
//! driver itself plays the VMM ([`vfio_user::VfioUserTransport`]). Inside a VM there are
//! two ways, and [`open_pci`] picks one by itself:
//!
//! - the function has an IOMMU group (the VM has a virtual IOMMU): Linux VFIO
//!   ([`vfio::VfioTransport`]), with DMA addresses the driver maps itself and MSI-X
//!   interrupts as eventfds;
//! - it has none: PCI sysfs ([`sysfs::SysfsTransport`]), with guest-physical addresses
//!   from the page map and no interrupts (the guest kernel has no VFIO no-IOMMU mode).

pub mod sysfs;
pub(crate) mod user_memory;
pub mod vfio;
pub mod vfio_user;

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rnic_abi::PAGE_SIZE;
use vmm_sys_util::eventfd::EventFd;

use crate::error::{Error, Result};

/// The environment variable that overrides [`open_pci`]'s choice: `vfio`, `sysfs` or
/// `auto` (the default). `sysfs` behind an IOMMU works only while the function is bound
/// to no driver and the IOMMU passes its DMA through untranslated (`iommu=pt`): what
/// the VM tests use to show what the IOMMU protects.
pub const TRANSPORT_ENV: &str = "RNIC_TRANSPORT";

/// Opens the rnic function at PCI address `bdf` inside this (virtual) machine with the
/// transport that fits it: VFIO when the function has an IOMMU group (it is then behind
/// an IOMMU, where guest-physical addresses are not what the device may reach), PCI sysfs
/// with the page map otherwise; [`TRANSPORT_ENV`] overrides the choice.
pub fn open_pci(bdf: &str) -> Result<Box<dyn Transport>> {
    open_pci_in(Path::new(sysfs::SYSFS_PCI_DEVICES), bdf)
}

/// [`open_pci`] with the PCI devices listed under `root`.
fn open_pci_in(root: &Path, bdf: &str) -> Result<Box<dyn Transport>> {
    let (full, dev) = sysfs::locate(root, bdf)?;
    let choice = std::env::var(TRANSPORT_ENV).unwrap_or_default();
    Ok(if use_vfio(&full, &choice, vfio::iommu_group(&dev))? {
        Box::new(vfio::VfioTransport::open(&full)?)
    } else {
        Box::new(sysfs::SysfsTransport::open(&full)?)
    })
}

/// Access to one rnic PCI function.
pub trait Transport: Send + Sync {
    /// Where the function is, for messages: `vfio-user:PATH` or `pci:BDF`.
    fn describe(&self) -> String;
    /// Reads config space.
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()>;
    /// Writes config space.
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()>;
    /// Reads a 32-bit register of BAR0.
    fn reg_read32(&self, offset: u64) -> Result<u32>;
    /// Writes a 32-bit register of BAR0.
    fn reg_write32(&self, offset: u64, value: u32) -> Result<()>;
    /// The doorbell BAR, mapped into this process.
    fn doorbells(&self) -> &MappedBar;
    /// Allocates `size` bytes (rounded up to whole pages) of memory the device can reach,
    /// zeroed.
    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer>;
    /// Makes `len` bytes of this process's own memory at `addr` (any alignment; memory
    /// the application allocated, as `ibv_reg_mr` registers it) reachable by the device.
    /// The buffer returned covers the whole pages around the range: its pointer is the
    /// first page's and [`DmaBuffer::pages`] holds the device address of each page. The
    /// pages stay reachable until the buffer and every other registration sharing one
    /// of them are dropped. `writable`: the device will write to the memory (it must
    /// then be writable for this process too).
    ///
    /// Memory this process cannot hand to the device fails with an error carrying an
    /// errno: `EFAULT` for an unmapped (or, with `writable`, read-only) range,
    /// `EOPNOTSUPP` for a kind of memory the transport cannot share (see each
    /// transport). Transports without a way to do it fail with [`Error::Unsupported`].
    fn map_user_memory(&self, _addr: usize, _len: usize, _writable: bool) -> Result<DmaBuffer> {
        Err(Error::Unsupported(
            "registering application memory (this transport cannot make it reachable)",
        ))
    }
    /// Sets up `count` MSI-X vectors so that [`Transport::wait_interrupt`] works. Returns
    /// `false` when this transport cannot deliver interrupts to the driver (then poll).
    fn enable_interrupts(&self, count: u16) -> Result<bool>;
    /// Waits until MSI-X `vector` fires or `timeout` passes; `Ok(false)` on timeout.
    fn wait_interrupt(&self, vector: u16, timeout: Duration) -> Result<bool>;
    /// The descriptor that becomes readable when MSI-X `vector` fires (an eventfd whose
    /// count a read clears), for waiting on several functions at once; valid until
    /// interrupts are set up again. `None` without interrupts.
    fn interrupt_fd(&self, _vector: u16) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Asks the VMM-level reset of the function (vfio-user DEVICE_RESET, VFIO's
    /// VFIO_DEVICE_RESET, or the sysfs `reset` file).
    fn function_reset(&self) -> Result<()>;
    /// Fails when the way to the function is gone for good: for vfio-user,
    /// [`Error::DeviceGone`] once rnicd closed the socket. Cheap (an atomic load), so
    /// waits call it on every round; `Ok(())` for transports that cannot lose the
    /// function. A reset of the function is another matter, seen in the doorbell BAR
    /// ([`ResetWatch`]).
    fn check_alive(&self) -> Result<()> {
        Ok(())
    }
    /// What kind of transport this is, for reports (`rnic-info`): its name and how the
    /// device reaches memory, e.g. `vfio (IOMMU group 3)`.
    fn kind(&self) -> String;
    /// The concrete transport, for what only one of them can do (tests, tools).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A BAR mapped into the driver's address space. Accesses are volatile and bounds-checked.
#[derive(Debug)]
pub struct MappedBar {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; accesses go through volatile reads and
// writes of naturally aligned words, which are atomic on the platforms we build for.
unsafe impl Send for MappedBar {}
// SAFETY: see above.
unsafe impl Sync for MappedBar {}

impl MappedBar {
    /// Wraps a mapping of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay mapped for the life of the value.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize) -> Self {
        Self { ptr, len }
    }

    /// Size of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn word(&self, offset: u64) -> *mut u32 {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= self.len as u64,
            "BAR access at {offset:#x} outside the {:#x}-byte mapping",
            self.len
        );
        // SAFETY: in bounds, checked above.
        unsafe { self.ptr.as_ptr().add(offset as usize) as *mut u32 }
    }

    /// Reads the 32-bit word at `offset`.
    pub fn read32(&self, offset: u64) -> u32 {
        // SAFETY: in-bounds aligned pointer into a live mapping.
        unsafe { self.word(offset).read_volatile() }
    }

    /// Writes the 32-bit word at `offset`.
    pub fn write32(&self, offset: u64, value: u32) {
        // SAFETY: in-bounds aligned pointer into a live mapping.
        unsafe { self.word(offset).write_volatile(value) }
    }
}

/// A shared, read-write mmap of a file (guest RAM, a BAR), unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    /// The mapped memory, as a BAR; valid as long as `self`.
    bar: MappedBar,
}

// SAFETY: a plain memory mapping, only accessed through MappedBar or DmaBuffer.
unsafe impl Send for Mapping {}
// SAFETY: see above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of descriptor `fd` from `offset`; `what` names it in errors.
    pub fn new(fd: i32, len: usize, offset: u64, what: &str) -> Result<Self> {
        // SAFETY: mapping a descriptor we hold with a length the owner advertised; the
        // result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os(format!("mmap {what}")));
        }
        let ptr =
            NonNull::new(ptr as *mut u8).ok_or_else(|| Error::last_os(format!("mmap {what}")))?;
        // SAFETY: the mapping stays until `self` is dropped, and the MappedBar is only
        // lent out by reference.
        let bar = unsafe { MappedBar::new(ptr, len) };
        Ok(Self { bar })
    }

    /// The first byte of the mapping.
    pub fn ptr(&self) -> NonNull<u8> {
        self.bar.ptr
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bar.len
    }

    /// Whether it is empty (never: mmap refuses empty mappings).
    pub fn is_empty(&self) -> bool {
        self.bar.len == 0
    }

    /// The mapping as a BAR: volatile, bounds-checked 32-bit accesses.
    pub fn bar(&self) -> &MappedBar {
        &self.bar
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped; no reference to `bar` outlives us.
        if unsafe { libc::munmap(self.bar.ptr.as_ptr().cast(), self.bar.len) } != 0 {
            log::warn!("munmap failed: {}", io::Error::last_os_error());
        }
    }
}

/// Checks a 32-bit access to BAR0 of `len` bytes at `offset` of function `what`, which
/// [`MappedBar`] would otherwise turn into a panic.
pub(crate) fn check_reg(what: &str, len: usize, offset: u64) -> Result<()> {
    let fits = offset.checked_add(4).is_some_and(|end| end <= len as u64);
    if offset & 3 == 0 && fits {
        return Ok(());
    }
    Err(Error::Io(
        format!(
            "BAR0 register access at {offset:#x} of {what}: must be 4-byte aligned inside the {len:#x}-byte BAR"
        ),
        io::Error::from(io::ErrorKind::InvalidInput),
    ))
}

/// Checks a config-space access of `len` bytes at `offset` of function `what` against the
/// size of PCIe config space.
pub(crate) fn check_config(what: &str, offset: u16, len: usize) -> Result<()> {
    if usize::from(offset) + len <= rnic_abi::pci::CONFIG_SPACE_SIZE {
        return Ok(());
    }
    Err(Error::Io(
        format!(
            "config access of {len} bytes at {offset:#x} of {what}: beyond the {:#x}-byte config space",
            rnic_abi::pci::CONFIG_SPACE_SIZE
        ),
        io::Error::from(io::ErrorKind::InvalidInput),
    ))
}

/// Whether [`open_pci`] takes VFIO for function `bdf`, given [`TRANSPORT_ENV`]'s value
/// `choice` (empty when unset) and the function's IOMMU group.
fn use_vfio(bdf: &str, choice: &str, group: Option<u32>) -> Result<bool> {
    match (choice, group) {
        ("" | "auto", Some(group)) => {
            log::info!("{bdf} is in IOMMU group {group}: using VFIO");
            Ok(true)
        }
        ("" | "auto", None) => {
            log::info!("the guest has no IOMMU for {bdf}: using the page map (PCI sysfs)");
            Ok(false)
        }
        ("vfio", _) => Ok(true),
        ("sysfs", _) => Ok(false),
        (other, _) => Err(Error::NotFound(format!(
            "{TRANSPORT_ENV}={other}: give vfio, sysfs or auto (the default)"
        ))),
    }
}

/// The eventfds of a function's MSI-X vectors, one per vector, as handed to the VMM
/// (vfio-user SET_IRQS) or the kernel (VFIO_DEVICE_SET_IRQS): what makes
/// [`Transport::wait_interrupt`] sleep until the device signals.
#[derive(Debug, Default)]
pub(crate) struct InterruptFds {
    fds: Mutex<Vec<EventFd>>,
}

impl InterruptFds {
    /// `count` fresh non-blocking eventfds, to be handed over and then [`installed`](Self::install).
    pub(crate) fn create(count: u16) -> Result<Vec<EventFd>> {
        (0..count)
            .map(|_| {
                EventFd::new(libc::EFD_NONBLOCK)
                    .map_err(|e| Error::Io("create an interrupt eventfd".into(), e))
            })
            .collect()
    }

    /// Replaces the whole set (the old descriptors close).
    pub(crate) fn install(&self, fds: Vec<EventFd>) {
        *self.lock() = fds;
    }

    /// How many vectors are set up.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<EventFd>> {
        self.fds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes every waiter on every vector (as if each fired): for a transport that
    /// lost the device, whose waiters then find out.
    pub(crate) fn wake_all(&self) {
        for fd in self.lock().iter() {
            if let Err(e) = fd.write(1) {
                log::debug!("wake an interrupt waiter: {e}");
            }
        }
    }

    /// The descriptor of `vector`, if set up.
    pub(crate) fn raw(&self, vector: u16) -> Option<std::os::fd::RawFd> {
        self.lock().get(usize::from(vector)).map(|v| v.as_raw_fd())
    }

    /// Sleeps until `vector` fires or `timeout` passes; `Ok(false)` on timeout. Clears the
    /// eventfd's count, so one signal wakes one wait.
    pub(crate) fn wait(&self, vector: u16, timeout: Duration) -> Result<bool> {
        // A duplicate, so that the lock is not held while sleeping and a concurrent
        // re-install cannot close the descriptor under poll.
        let fd = {
            let fds = self.lock();
            let v = fds
                .get(usize::from(vector))
                .ok_or(Error::Unsupported("interrupt vector not enabled"))?;
            v.try_clone()
                .map_err(|e| Error::Io("dup an interrupt eventfd".into(), e))?
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Round up: a sub-millisecond timeout must still sleep, not spin.
        let ms = timeout.as_micros().div_ceil(1000);
        let ms = i32::try_from(ms).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd that lives across the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                // A signal is no interrupt of the device: an early wake-up says "nothing
                // yet", as a timeout does, and the caller looks again.
                return Ok(false);
            }
            return Err(Error::Io("poll an interrupt eventfd".into(), e));
        }
        if n == 0 {
            return Ok(false);
        }
        // Non-blocking read to clear the count; EAGAIN means another waiter took it.
        let _ = fd.read();
        Ok(true)
    }
}

/// Notices a reset of the function that this driver did not do: the function's
/// `RESET_COUNT` (doorbell page 0, `rnic_abi::doorbell::RESET_COUNT`, ABI 1.6), as read
/// after the driver's own last reset, against what it reads now. Every reset advances
/// the count, whoever asked for it (the PF's RESET_VF or VF disable, the VMM's reset, the
/// client going away); it is one load from the mapped doorbell BAR, cheap enough for
/// every round of a wait. A device older than ABI 1.6 reads 0 forever: nothing is
/// noticed there.
#[derive(Debug)]
pub struct ResetWatch {
    expected: AtomicU32,
}

impl ResetWatch {
    /// Watches the function behind `t` from its count now: call it right after a reset
    /// of the driver's own.
    pub fn new(t: &dyn Transport) -> Self {
        Self {
            expected: AtomicU32::new(reset_count(t)),
        }
    }

    /// Takes the count now as the driver's own: after a reset it did itself.
    pub fn rearm(&self, t: &dyn Transport) {
        self.expected.store(reset_count(t), Ordering::Relaxed);
    }

    /// Fails with [`Error::DeviceGone`] if the transport lost the function
    /// ([`Transport::check_alive`]), or with [`Error::FunctionReset`] if the function
    /// was reset since the driver's own last reset.
    pub fn check(&self, t: &dyn Transport) -> Result<()> {
        t.check_alive()?;
        if reset_count(t) != self.expected.load(Ordering::Relaxed) {
            return Err(Error::FunctionReset(t.describe()));
        }
        Ok(())
    }
}

/// The function's `RESET_COUNT` (0 if the doorbell BAR is too small to hold it).
fn reset_count(t: &dyn Transport) -> u32 {
    let db = t.doorbells();
    if (db.len() as u64) < rnic_abi::doorbell::RESET_COUNT + 4 {
        return 0;
    }
    db.read32(rnic_abi::doorbell::RESET_COUNT)
}

/// Gives memory back when a [`DmaBuffer`] is dropped.
pub trait DmaRelease: Send + Sync {
    /// Releases the buffer's memory.
    fn release(&self, ptr: NonNull<u8>, len: usize, device_pages: &[u64]);
}

/// Memory that both the driver and the device reach: the driver through a pointer, the
/// device through the device address of each page. The device may change it at any time,
/// so all access goes through copies and atomics, never references.
pub struct DmaBuffer {
    ptr: NonNull<u8>,
    len: usize,
    pages: Vec<u64>,
    release: Option<std::sync::Arc<dyn DmaRelease>>,
}

// SAFETY: the buffer owns its memory; concurrent access is through volatile copies.
unsafe impl Send for DmaBuffer {}
// SAFETY: see above.
unsafe impl Sync for DmaBuffer {}

impl std::fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBuffer")
            .field("len", &self.len)
            .field("first_page", &self.pages.first().map(|p| format!("{p:#x}")))
            .field("contiguous", &self.contiguous().is_some())
            .finish()
    }
}

impl DmaBuffer {
    /// Wraps `len` bytes at `ptr` whose page `i` the device reaches at `pages[i]`.
    ///
    /// # Safety
    /// The memory must stay valid until `release` gets it back (or forever without one),
    /// and `pages` must cover `len` bytes.
    pub unsafe fn new(
        ptr: NonNull<u8>,
        len: usize,
        pages: Vec<u64>,
        release: Option<std::sync::Arc<dyn DmaRelease>>,
    ) -> Self {
        debug_assert!(pages.len() as u64 * PAGE_SIZE >= len as u64);
        Self {
            ptr,
            len,
            pages,
            release,
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The driver's address of the first byte.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The device address of each page.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// The device address of byte `offset`.
    pub fn device_addr(&self, offset: usize) -> u64 {
        assert!(
            offset <= self.len,
            "offset {offset} beyond a {}-byte DMA buffer",
            self.len
        );
        let page = offset / PAGE_SIZE as usize;
        if page == self.pages.len() {
            // One past the end: the end address of the last page.
            return self.pages[page - 1] + PAGE_SIZE;
        }
        self.pages[page] + (offset % PAGE_SIZE as usize) as u64
    }

    /// The device address of the first byte if the device sees the buffer as one range.
    pub fn contiguous(&self) -> Option<u64> {
        let first = *self.pages.first()?;
        self.pages
            .iter()
            .enumerate()
            .all(|(i, &p)| p == first + i as u64 * PAGE_SIZE)
            .then_some(first)
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "access of {len} bytes at {offset} beyond a {}-byte DMA buffer",
            self.len
        );
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: in bounds; the device may race, which is why this is a raw copy.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
    }

    /// Copies bytes at `offset` out of the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds; the device may race, which is why this is a raw copy.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
    }

    /// Fills the buffer with zeroes.
    pub fn zero(&self) {
        // SAFETY: the whole buffer is ours.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
    }

    /// Reads a little-endian u16 at a 2-byte aligned `offset` with acquire ordering.
    pub fn load_u16(&self, offset: usize) -> u16 {
        self.check(offset, 2);
        assert!(offset.is_multiple_of(2));
        // SAFETY: in bounds and aligned; AtomicU16 has the layout of u16.
        let v = unsafe {
            (*(self.ptr.as_ptr().add(offset) as *const std::sync::atomic::AtomicU16))
                .load(Ordering::Acquire)
        };
        u16::from_le(v)
    }

    /// Writes a little-endian u16 at a 2-byte aligned `offset` with release ordering, so
    /// everything written before it is visible to the device first.
    pub fn store_u16(&self, offset: usize, value: u16) {
        self.check(offset, 2);
        assert!(offset.is_multiple_of(2));
        fence(Ordering::Release);
        // SAFETY: in bounds and aligned; AtomicU16 has the layout of u16.
        unsafe {
            (*(self.ptr.as_ptr().add(offset) as *const std::sync::atomic::AtomicU16))
                .store(value.to_le(), Ordering::Release)
        };
    }

    /// Reads a little-endian u32 at a 4-byte aligned `offset` with acquire ordering.
    pub fn load_u32(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        assert!(offset.is_multiple_of(4));
        // SAFETY: in bounds and aligned; AtomicU32 has the layout of u32.
        let v = unsafe {
            (*(self.ptr.as_ptr().add(offset) as *const std::sync::atomic::AtomicU32))
                .load(Ordering::Acquire)
        };
        u32::from_le(v)
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release.release(self.ptr, self.len, &self.pages);
        }
    }
}

/// Rounds `size` up to whole pages (at least one).
pub(crate) fn page_round(size: usize) -> usize {
    let page = PAGE_SIZE as usize;
    size.max(1).div_ceil(page) * page
}

/// Polls `done` until it returns `Some` or `timeout` passes, backing off from spinning to
/// short sleeps so a waiting driver does not burn a core.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    what: &'static str,
    mut done: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = done()? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(Error::Timeout(timeout, what));
        }
        spins += 1;
        if spins < 1000 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_follows_the_iommu_group_unless_told_otherwise() {
        let pick = |choice: &str, group| use_vfio("0000:00:03.0", choice, group).unwrap();
        assert!(pick("", Some(3)), "an IOMMU group: VFIO");
        assert!(!pick("", None), "none: the page map");
        assert!(pick("auto", Some(3)) && !pick("auto", None));
        assert!(!pick("sysfs", Some(3)) && pick("vfio", None));
        let err = use_vfio("0000:00:03.0", "uio", None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("RNIC_TRANSPORT=uio") && err.contains("vfio, sysfs or auto"),
            "{err}"
        );
    }

    #[test]
    fn interrupt_fds_wake_a_waiter_once_per_signal() {
        let irqs = InterruptFds::default();
        assert!(irqs.wait(0, Duration::ZERO).is_err(), "no vector yet");
        assert_eq!(irqs.raw(0), None);
        irqs.install(InterruptFds::create(2).unwrap());
        assert_eq!(irqs.count(), 2);
        let fd = irqs.raw(1).unwrap();
        // What the kernel does when MSI-X vector 1 fires: add 1 to its eventfd.
        // SAFETY: writes 8 bytes from a u64 we own to an eventfd `irqs` keeps open.
        let n = unsafe { libc::write(fd, (&1u64 as *const u64).cast(), 8) };
        assert_eq!(n, 8);
        assert!(
            !irqs.wait(0, Duration::from_millis(1)).unwrap(),
            "vector 0 is quiet"
        );
        let start = std::time::Instant::now();
        assert!(irqs.wait(1, Duration::from_secs(5)).unwrap());
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "a pending signal wakes at once"
        );
        // The signal was consumed: the next wait sleeps its whole timeout.
        let start = std::time::Instant::now();
        assert!(!irqs.wait(1, Duration::from_micros(300)).unwrap());
        assert!(
            start.elapsed() >= Duration::from_micros(300),
            "a short timeout still sleeps"
        );
        irqs.install(Vec::new());
        assert_eq!(irqs.raw(1), None);
    }

    #[test]
    fn access_checks_name_the_function_and_the_limit() {
        assert!(check_reg("f", 0x4000, 0x3ffc).is_ok());
        for bad in [2, 0x4000, 0x3ffe, u64::MAX - 1] {
            let err = check_reg("f", 0x4000, bad).unwrap_err().to_string();
            assert!(
                err.contains("of f") && err.contains("0x4000-byte BAR"),
                "{err}"
            );
        }
        assert!(check_config("f", 0xffc, 4).is_ok());
        let err = check_config("f", 0xffe, 4).unwrap_err().to_string();
        assert!(
            err.contains("of f") && err.contains("config space"),
            "{err}"
        );
    }
}
