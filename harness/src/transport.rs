//! The guest driver's [`Transport`] for a function of this process: what QEMU and the
//! guest kernel do, done in one thread, so that the same calls (a fuzz input, a lab
//! solution) run the same way every time.
//!
//! - Guest RAM is a memfd, DMA-mapped into the function exactly as rnicd's vfio-user glue
//!   maps a client's `DMA_MAP` ([`rnic_device::dma::DmaSpace::map`]), and mapped into this
//!   process for the driver.
//! - BAR0 and config space are the function's region reads and writes, as a client's
//!   `REGION_READ`/`REGION_WRITE` arrive.
//! - The doorbell BAR is the function's own memfd, mmapped here as QEMU maps it.
//! - MSI-X vectors are eventfds installed with the function's `SET_IRQS`.
//! - Waiting for an interrupt is one pass of the engine ([`Engine::step`]): the driver's
//!   command queue and verbs wait through [`Transport::wait_interrupt`], so every command
//!   they send is carried out in the caller's thread, in order.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rnic_abi::pci::{cfg, DOORBELL_BAR, REG_BAR};
use rnic_abi::vfio_user::{IRQ_MSIX, IRQ_SET_ACTION_TRIGGER, IRQ_SET_DATA_EVENTFD, REGION_CONFIG};
use rnic_abi::PAGE_SIZE;
use rnic_device::engine::Engine;
use rnic_device::function::Function;
use rnic_driver::transport::{DmaBuffer, DmaRelease, MappedBar, Mapping, Transport};
use rnic_driver::{Error, Result};

/// Where guest RAM sits in each function's DMA space: high, so that a stray small address
/// misses it.
pub const IOVA_BASE: u64 = 0x1_0000_0000;
/// Bytes of guest RAM per function: room for the rings, the command buffers and the MRs
/// of a fuzz world or a lab, small enough to compare on every input.
pub const RAM_SIZE: usize = 2 << 20;

/// The engine, shared by the transports of its functions.
pub type SharedEngine = Arc<Mutex<Engine>>;

/// Locks the engine; a panic in an earlier holder (a crash being reported) does not matter.
pub fn lock(engine: &SharedEngine) -> MutexGuard<'_, Engine> {
    engine.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who a page of guest RAM was given to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The driver, for its rings and command buffers: the device writes there.
    Driver,
    /// The harness, for memory it registers: the device writes only where and as the
    /// registration allows.
    Harness,
}

/// One function's guest RAM: a memfd, zero where nothing was ever handed out (and a hole
/// there: untouched RAM costs nothing to create or to check), and which pages were given
/// to whom.
pub struct GuestRam {
    file: File,
    mapping: Mapping,
    /// First page of each run handed out, with its length in pages and owner; a page
    /// given back keeps its record (the device wrote there legitimately while it was out).
    given: Mutex<BTreeMap<usize, (usize, Owner)>>,
    /// Runs given back: served again first, so that the command buffers the driver
    /// allocates per command do not use up the RAM.
    free: Arc<FreeRuns>,
    /// The next page never handed out.
    next: Mutex<usize>,
}

impl GuestRam {
    /// Fresh RAM, all zero.
    pub fn new() -> std::io::Result<Arc<Self>> {
        let file = sealed_memfd(c"rnic-harness-ram", RAM_SIZE as u64)?;
        let mapping = Mapping::new(file.as_raw_fd(), RAM_SIZE, 0, "guest RAM")
            .map_err(std::io::Error::other)?;
        Ok(Arc::new(Self {
            file,
            mapping,
            given: Mutex::new(BTreeMap::new()),
            free: Arc::new(FreeRuns::default()),
            next: Mutex::new(0),
        }))
    }

    /// The memfd behind the RAM (for a client that maps it again elsewhere).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// DMA-maps the RAM into `f` at [`IOVA_BASE`], as a client's `DMA_MAP` does.
    pub fn map_into(&self, f: &Function) -> std::io::Result<()> {
        let fd = self.file.try_clone()?;
        f.dma()
            .map(IOVA_BASE, RAM_SIZE as u64, 0, Some(fd), true)
            .map_err(std::io::Error::other)
    }

    /// Hands out `size` bytes (whole pages), zeroed, to `owner`.
    pub fn alloc(self: &Arc<Self>, size: usize, owner: Owner) -> Result<DmaBuffer> {
        let pages = size.div_ceil(PAGE_SIZE as usize).max(1);
        let reused = self
            .free
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&pages)
            .and_then(Vec::pop);
        let first = match reused {
            Some(first) => first,
            None => {
                let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
                if (*next + pages) * PAGE_SIZE as usize > RAM_SIZE {
                    return Err(Error::NoDmaMemory(format!(
                        "the harness's guest RAM ({RAM_SIZE} bytes) is used up: raise RAM_SIZE"
                    )));
                }
                *next += pages;
                *next - pages
            }
        };
        let mut given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        // A page the driver had keeps counting as the driver's.
        let owner = match given.get(&first) {
            Some((_, Owner::Driver)) => Owner::Driver,
            _ => owner,
        };
        given.insert(first, (pages, owner));
        drop(given);
        let offset = first * PAGE_SIZE as usize;
        let len = pages * PAGE_SIZE as usize;
        // SAFETY: in bounds: checked against RAM_SIZE when the run was first handed out.
        let ptr = unsafe { NonNull::new_unchecked(self.mapping.ptr().as_ptr().add(offset)) };
        let device_pages = (0..pages)
            .map(|i| IOVA_BASE + (offset + i * PAGE_SIZE as usize) as u64)
            .collect();
        let release: Arc<dyn DmaRelease> = self.free.clone();
        // SAFETY: the pages are the buffer's until release() gives them back. The mapping
        // lives as long as this RAM, which the transport and the world hold until their
        // buffers are gone; a buffer the driver forgets (its object could not be
        // destroyed) is never touched again.
        let buf = unsafe { DmaBuffer::new(ptr, len, device_pages, Some(release)) };
        buf.zero();
        Ok(buf)
    }

    /// The bytes of the RAM handed out so far (the rest is zero, see
    /// [`GuestRam::untouched_from`]).
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    /// The bytes of the RAM handed out so far, as they are now. Nothing else touches the
    /// RAM while the engine does not run, which is all the time the slice is held (the
    /// world is one thread).
    pub fn bytes(&self) -> &[u8] {
        let len = *self.next.lock().unwrap_or_else(|e| e.into_inner()) * PAGE_SIZE as usize;
        // SAFETY: in bounds of the mapping, which lives as long as self.
        unsafe { std::slice::from_raw_parts(self.mapping.ptr().as_ptr(), len) }
    }

    /// The first offset at or past `offset` that holds data: `None` when the RAM from
    /// there on was never written (a hole of the memfd, as it was created).
    pub fn untouched_from(&self, offset: usize) -> Option<usize> {
        // SAFETY: lseek on a descriptor we hold.
        let at = unsafe {
            libc::lseek(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                libc::SEEK_DATA,
            )
        };
        usize::try_from(at).ok().filter(|&at| at < RAM_SIZE)
    }

    /// The owner of the byte at `offset`, if it was ever handed out.
    pub fn owner(&self, offset: usize) -> Option<Owner> {
        let page = offset / PAGE_SIZE as usize;
        let given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        let (&first, &(pages, owner)) = given.range(..=page).next_back()?;
        (page < first + pages).then_some(owner)
    }
}

/// Runs of pages given back, by length in pages. Apart from the RAM itself, so that a
/// buffer the driver forgets keeps nothing big alive.
#[derive(Default)]
struct FreeRuns(Mutex<BTreeMap<usize, Vec<usize>>>);

impl DmaRelease for FreeRuns {
    fn release(&self, _ptr: NonNull<u8>, _len: usize, device_pages: &[u64]) {
        if let Some(&first) = device_pages.first() {
            let first = ((first - IOVA_BASE) / PAGE_SIZE) as usize;
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(device_pages.len())
                .or_default()
                .push(first);
        }
    }
}

/// A function of this process, reached as the driver reaches one through a VMM.
pub struct InProcess {
    function: Arc<Function>,
    engine: SharedEngine,
    ram: Arc<GuestRam>,
    doorbells: MappedBar,
    _doorbell_mapping: Mapping,
    vectors: Mutex<Vec<File>>,
    /// Set when the world is torn down: waits fail at once, so that the driver's
    /// destructors do not wait for commands nobody runs.
    detached: Arc<AtomicBool>,
}

impl InProcess {
    /// The transport of `function`, whose engine is `engine`, with guest RAM `ram`
    /// (already DMA-mapped into it). `detached` stops all waiting when set.
    pub fn new(
        function: Arc<Function>,
        engine: SharedEngine,
        ram: Arc<GuestRam>,
        detached: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        let bar = function.doorbells();
        // The mapping keeps the memfd alive on its own, as QEMU's mapping of the BAR does.
        let mapping = Mapping::new(bar.fd(), bar.len(), 0, "the doorbell BAR")
            .map_err(std::io::Error::other)?;
        // SAFETY: the mapping lives as long as the transport, which holds it.
        let doorbells = unsafe { MappedBar::new(mapping.ptr(), mapping.len()) };
        Ok(Self {
            function,
            engine,
            ram,
            doorbells,
            _doorbell_mapping: mapping,
            vectors: Mutex::new(Vec::new()),
            detached,
        })
    }

    /// What the VMM does for MSI-X: `count` vectors wired to eventfds with the function's
    /// `SET_IRQS`. Enabling MSI-X in config space is the driver's part
    /// ([`Transport::enable_interrupts`] does both).
    pub fn wire_vectors(&self, count: u16) -> Result<()> {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..count {
            // SAFETY: plain eventfd creation; the result is checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(device_error(
                    "eventfd for an MSI-X vector",
                    std::io::Error::last_os_error(),
                ));
            }
            // SAFETY: a fresh descriptor that we own.
            let file = unsafe { File::from_raw_fd(fd) };
            theirs.push(
                file.try_clone()
                    .map_err(|e| device_error("dup an eventfd", e))?,
            );
            ours.push(file);
        }
        self.function
            .set_irqs(
                IRQ_MSIX,
                IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER,
                0,
                u32::from(count),
                theirs,
            )
            .map_err(|e| device_error("SET_IRQS", e))?;
        *self.vectors.lock().unwrap_or_else(|e| e.into_inner()) = ours;
        Ok(())
    }
}

fn device_error(what: &str, e: std::io::Error) -> Error {
    Error::Io(what.into(), e)
}

impl Transport for InProcess {
    fn describe(&self) -> String {
        format!("in-process:{}", self.function.identity().id)
    }

    fn kind(&self) -> String {
        "in-process (the harness calls the device directly)".into()
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        self.function
            .region_read(REGION_CONFIG, u64::from(offset), buf)
            .map_err(|e| device_error("config read", e))
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        self.function
            .region_write(REGION_CONFIG, u64::from(offset), data)
            .map_err(|e| device_error("config write", e))
    }

    fn reg_read32(&self, offset: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.function
            .region_read(u32::from(REG_BAR), offset, &mut b)
            .map_err(|e| device_error("BAR0 read", e))?;
        Ok(u32::from_le_bytes(b))
    }

    fn reg_write32(&self, offset: u64, value: u32) -> Result<()> {
        self.function
            .region_write(u32::from(REG_BAR), offset, &value.to_le_bytes())
            .map_err(|e| device_error("BAR0 write", e))
    }

    fn doorbells(&self) -> &MappedBar {
        &self.doorbells
    }

    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.ram.alloc(size, Owner::Driver)
    }

    fn enable_interrupts(&self, count: u16) -> Result<bool> {
        self.wire_vectors(count)?;
        // As the guest's MSI-X set-up does: enable MSI-X, unmask the function.
        let at = (cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL) as u16;
        let mut ctrl = [0u8; 2];
        self.config_read(at, &mut ctrl)?;
        let ctrl = (u16::from_le_bytes(ctrl) | cfg::MSIX_ENABLE) & !cfg::MSIX_FUNCTION_MASK;
        self.config_write(at, &ctrl.to_le_bytes())?;
        Ok(true)
    }

    fn wait_interrupt(&self, vector: u16, _timeout: Duration) -> Result<bool> {
        if self.detached.load(Ordering::Acquire) {
            return Err(Error::Device(
                "the harness is torn down: nothing runs the device any more".into(),
            ));
        }
        lock(&self.engine).step();
        // What the function's vfio-user connection does in rnicd.
        self.function.interrupts().deliver();
        let vectors = self.vectors.lock().unwrap_or_else(|e| e.into_inner());
        let Some(efd) = vectors.get(usize::from(vector)) else {
            return Err(Error::Unsupported("interrupt vector not enabled"));
        };
        Ok(read_eventfd(efd))
    }

    fn function_reset(&self) -> Result<()> {
        self.function.reset();
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A memfd of `size` bytes sealed at that size, as QEMU's memory-backend-memfd makes
/// guest RAM (rnicd maps nothing else).
pub fn sealed_memfd(name: &std::ffi::CStr, size: u64) -> std::io::Result<File> {
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that we own.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Reads (and so clears) an eventfd; whether it had been signalled.
fn read_eventfd(efd: &File) -> bool {
    use std::io::Read;
    let mut count = [0u8; 8];
    matches!((&*efd).read(&mut count), Ok(8))
}

/// The doorbell BAR's region index, for harnesses that write it as a client does.
pub const DOORBELL_REGION: u32 = DOORBELL_BAR as u32;
