//! The transport on the host: the driver speaks vfio-user to rnicd itself and so plays
//! the VMM's part too. Guest RAM is a memfd that it DMA-maps with its descriptor; BAR0 and
//! config space are region reads and writes over the socket; the doorbell BAR is mmapped
//! from the descriptor the device hands out; MSI-X vectors are eventfds.
//!
//! What a guest would see through QEMU, this sees through the same messages, which is
//! what makes it the real path for tests and benchmarks.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rnic_abi::pci::{cfg, DOORBELL_BAR, REG_BAR};
use rnic_abi::PAGE_SIZE;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::Client;

use super::user_memory::{self, Memfd, PinUnit, UserPages};
use super::{
    check_config, page_round, DmaBuffer, DmaRelease, InterruptFds, MappedBar, Mapping, Transport,
};
use crate::error::{Error, Result};

/// Where the memfd "guest RAM" appears in the device's DMA address space. Any page-aligned
/// value works; a high one makes a stray zero address fail loudly.
pub const DEFAULT_IOVA_BASE: u64 = 0x1_0000_0000;
/// Default size of the guest RAM memfd.
pub const DEFAULT_MEMORY: usize = 64 << 20;
/// Where application memory ([`Transport::map_user_memory`]) appears in the device's DMA
/// address space: at its virtual address plus this. User addresses are below 2^56 (even
/// with 5-level page tables), so these never meet guest RAM at [`DEFAULT_IOVA_BASE`].
pub const USER_IOVA_BASE: u64 = 1 << 56;

/// Options of a [`VfioUserTransport`].
#[derive(Debug, Clone)]
pub struct VfioUserOptions {
    /// Bytes of DMA memory to share with the device.
    pub memory: usize,
    /// Device address of the first byte of that memory.
    pub iova_base: u64,
}

impl Default for VfioUserOptions {
    fn default() -> Self {
        Self {
            memory: DEFAULT_MEMORY,
            iova_base: DEFAULT_IOVA_BASE,
        }
    }
}

/// An rnic function reached over a vfio-user socket.
pub struct VfioUserTransport {
    path: PathBuf,
    /// Shared with the releases of registered application memory, which DMA_UNMAP.
    client: Arc<Mutex<Client>>,
    doorbells: Mapping,
    memory: Arc<GuestRam>,
    vectors: InterruptFds,
    /// Application memory DMA-mapped for registrations ([`Transport::map_user_memory`]).
    user: Arc<UserPages<UserDma>>,
}

/// A run of application pages DMA-mapped at [`USER_IOVA_BASE`] + their address, from the
/// memfd that backs them (held open: another function of this process may need to map the
/// same pages, and that takes the descriptor).
struct UserDma {
    _file: Arc<Memfd>,
}

impl PinUnit for UserDma {
    fn device_addr(&self, _start: usize, page: usize) -> u64 {
        USER_IOVA_BASE + page as u64
    }
}

impl std::fmt::Debug for VfioUserTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioUserTransport")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The memfd that stands for guest RAM, with a first-fit page allocator over it.
struct GuestRam {
    /// Kept open so another function can DMA-map the same memory ([`VfioUserTransport::connect_sharing`]).
    file: File,
    mapping: Mapping,
    iova_base: u64,
    /// One flag per page: in use.
    used: Mutex<Vec<bool>>,
}

impl GuestRam {
    fn alloc(self: &Arc<Self>, size: usize) -> Result<DmaBuffer> {
        let len = page_round(size);
        let pages = len / PAGE_SIZE as usize;
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let start = first_fit(&used, pages).ok_or_else(|| {
            Error::NoDmaMemory(format!(
                "no {len} contiguous free bytes in the {} MiB shared with the device; give the transport more memory",
                self.mapping.len() >> 20
            ))
        })?;
        used[start..start + pages]
            .iter_mut()
            .for_each(|u| *u = true);
        drop(used);
        let offset = start * PAGE_SIZE as usize;
        // SAFETY: in bounds of the mapping, checked by first_fit.
        let ptr = unsafe { NonNull::new_unchecked(self.mapping.ptr().as_ptr().add(offset)) };
        let device_pages = (0..pages)
            .map(|i| self.iova_base + (offset + i * PAGE_SIZE as usize) as u64)
            .collect();
        let release: Arc<dyn DmaRelease> = self.clone();
        // SAFETY: the pages are ours until release() gives them back.
        let buf = unsafe { DmaBuffer::new(ptr, len, device_pages, Some(release)) };
        buf.zero();
        Ok(buf)
    }
}

impl DmaRelease for GuestRam {
    fn release(&self, _ptr: NonNull<u8>, _len: usize, device_pages: &[u64]) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        for &p in device_pages {
            if let Some(u) = used.get_mut(((p - self.iova_base) / PAGE_SIZE) as usize) {
                *u = false;
            }
        }
    }
}

/// Index of the first run of `n` free pages.
fn first_fit(used: &[bool], n: usize) -> Option<usize> {
    let mut run = 0;
    for (i, &u) in used.iter().enumerate() {
        run = if u { 0 } else { run + 1 };
        if run == n {
            return Some(i + 1 - n);
        }
    }
    None
}

fn vfio(what: impl Into<String>) -> impl FnOnce(vfio_user::Error) -> Error {
    let what = what.into();
    move |e| Error::VfioUser(what, e)
}

/// Connects to the vfio-user socket at `path` and negotiates.
fn open_client(path: &Path) -> Result<Client> {
    if !path.exists() {
        return Err(Error::NotFound(format!(
            "{} does not exist; is rnicd running with this --socket-dir?",
            path.display()
        )));
    }
    Client::new(path).map_err(vfio(format!("connect to {}", path.display())))
}

impl VfioUserTransport {
    /// Connects to the function served at `path` with default options.
    pub fn connect(path: &Path) -> Result<Self> {
        Self::connect_with(path, &VfioUserOptions::default())
    }

    /// Connects to the function served at `path`: negotiates, shares guest memory, and
    /// maps the doorbell BAR.
    pub fn connect_with(path: &Path, options: &VfioUserOptions) -> Result<Self> {
        let mut client = open_client(path)?;
        let memory = page_round(options.memory);
        // SAFETY: memfd_create with a valid C string; the result is checked.
        let fd = unsafe { libc::memfd_create(c"rnic-guest-ram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("memfd_create for guest memory"));
        }
        // SAFETY: fd is fresh and now owned by the File.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(memory as u64)
            .map_err(|e| Error::Io("size the guest memory memfd".into(), e))?;
        let mapping = Mapping::new(file.as_raw_fd(), memory, 0, "guest memory")?;
        client
            .dma_map(0, options.iova_base, memory as u64, file.as_raw_fd())
            .map_err(vfio("DMA_MAP guest memory"))?;
        let guest_ram = Arc::new(GuestRam {
            file,
            mapping,
            iova_base: options.iova_base,
            used: Mutex::new(vec![false; memory / PAGE_SIZE as usize]),
        });
        Self::finish(path, client, guest_ram)
    }

    /// Connects to the function served at `path` and gives it the guest memory of
    /// `other` (the same memfd, DMA-mapped at the same device address), as QEMU does for
    /// two functions attached to one guest. Both then allocate DMA memory from one pool,
    /// so an object of one is reachable by the other: what `MIGRATE_QP` between them
    /// needs.
    pub fn connect_sharing(path: &Path, other: &VfioUserTransport) -> Result<Self> {
        let mut client = open_client(path)?;
        let ram = other.memory.clone();
        client
            .dma_map(
                0,
                ram.iova_base,
                ram.mapping.len() as u64,
                ram.file.as_raw_fd(),
            )
            .map_err(vfio("DMA_MAP shared guest memory"))?;
        Self::finish(path, client, ram)
    }

    /// Maps the doorbell BAR of a connected function whose guest memory is mapped.
    fn finish(path: &Path, client: Client, guest_ram: Arc<GuestRam>) -> Result<Self> {
        let region = client
            .region(u32::from(DOORBELL_BAR))
            .ok_or_else(|| Error::Device("the device has no doorbell BAR region".into()))?;
        let file_offset = region.file_offset.as_ref().ok_or_else(|| {
            Error::Device("the doorbell BAR came without a file descriptor to map".into())
        })?;
        let len = usize::try_from(region.size)
            .map_err(|_| Error::Device("doorbell BAR too large".into()))?;
        let doorbells = Mapping::new(
            file_offset.file().as_raw_fd(),
            len,
            file_offset.start(),
            "doorbell BAR",
        )?;

        let client = Arc::new(Mutex::new(client));
        let unmap_client = client.clone();
        let user = UserPages::new(Box::new(move |start, len, _: UserDma| {
            let iova = USER_IOVA_BASE + start as u64;
            let r = unmap_client
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .dma_unmap(iova, len as u64);
            if let Err(e) = r {
                log::warn!("DMA_UNMAP of registered memory {iova:#x}+{len:#x} failed: {e}");
            }
        }));
        Ok(Self {
            path: path.to_path_buf(),
            client,
            doorbells,
            memory: guest_ram,
            vectors: InterruptFds::default(),
            user,
        })
    }

    fn client(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a DMA_UNMAP for the guest memory (for tests of what the device does then).
    pub fn unmap_guest_memory(&self) -> Result<()> {
        let len = self.memory.mapping.len() as u64;
        self.client()
            .dma_unmap(self.memory.iova_base, len)
            .map_err(vfio("DMA_UNMAP guest memory"))
    }

    /// Closes the connection, as a VMM that goes away does.
    pub fn disconnect(&self) -> Result<()> {
        self.client().shutdown().map_err(vfio("shutdown"))
    }
}

impl Transport for VfioUserTransport {
    fn describe(&self) -> String {
        format!("vfio-user:{}", self.path.display())
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        check_config(&self.describe(), offset, buf.len())?;
        self.client()
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, u64::from(offset), buf)
            .map_err(vfio("config read"))
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        check_config(&self.describe(), offset, data.len())?;
        self.client()
            .region_write(VFIO_PCI_CONFIG_REGION_INDEX, u64::from(offset), data)
            .map_err(vfio("config write"))
    }

    fn reg_read32(&self, offset: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.client()
            .region_read(u32::from(REG_BAR), offset, &mut b)
            .map_err(vfio("register read"))?;
        Ok(u32::from_le_bytes(b))
    }

    fn reg_write32(&self, offset: u64, value: u32) -> Result<()> {
        self.client()
            .region_write(u32::from(REG_BAR), offset, &value.to_le_bytes())
            .map_err(vfio("register write"))
    }

    fn doorbells(&self) -> &MappedBar {
        self.doorbells.bar()
    }

    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.memory.alloc(size)
    }

    /// rnicd reaches only memory DMA-mapped with a descriptor: the pages are moved onto a
    /// memfd in place (`user_memory::back_with_memfd`, whose documentation lists the
    /// caveats) and DMA-mapped at [`USER_IOVA_BASE`] + their address.
    fn map_user_memory(&self, addr: usize, len: usize, writable: bool) -> Result<DmaBuffer> {
        let (start, end) = user_memory::page_span(addr, len).ok_or_else(|| {
            user_memory::os_error(format!("{len} bytes at {addr:#x}"), libc::EINVAL)
        })?;
        let runs = user_memory::back_with_memfd(start, end, writable)?;
        let pieces: Vec<_> = runs.iter().map(|r| (r.start, r.start + r.len, r)).collect();
        self.user.map(addr, len, &pieces, |run, start, len| {
            let offset = run.offset + (start - run.start) as u64;
            let iova = USER_IOVA_BASE + start as u64;
            self.client()
                .dma_map(offset, iova, len as u64, run.file.fd())
                .map_err(vfio(format!(
                    "DMA_MAP registered memory {start:#x}+{len:#x}"
                )))?;
            Ok(UserDma {
                _file: run.file.clone(),
            })
        })
    }

    fn enable_interrupts(&self, count: u16) -> Result<bool> {
        let fds = InterruptFds::create(count)?;
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        self.client()
            .set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                0,
                u32::from(count),
                &raw,
            )
            .map_err(vfio("SET_IRQS"))?;
        self.vectors.install(fds);
        // As the VMM, also do what the guest's MSI-X setup does: enable MSI-X.
        let at = cfg::MSIX_CAP as u16 + cfg::MSIX_MSG_CTRL as u16;
        let mut ctrl = [0u8; 2];
        self.config_read(at, &mut ctrl)?;
        let ctrl = (u16::from_le_bytes(ctrl) | cfg::MSIX_ENABLE) & !cfg::MSIX_FUNCTION_MASK;
        self.config_write(at, &ctrl.to_le_bytes())?;
        Ok(true)
    }

    fn wait_interrupt(&self, vector: u16, timeout: Duration) -> Result<bool> {
        self.vectors.wait(vector, timeout)
    }

    fn interrupt_fd(&self, vector: u16) -> Option<std::os::fd::RawFd> {
        self.vectors.raw(vector)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn function_reset(&self) -> Result<()> {
        self.client().reset().map_err(vfio("DEVICE_RESET"))
    }

    fn kind(&self) -> String {
        "vfio-user (this process plays the VMM)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::first_fit;

    #[test]
    fn first_fit_finds_the_first_hole_big_enough() {
        let used = [true, false, true, false, false, true, false, false, false];
        assert_eq!(first_fit(&used, 1), Some(1));
        assert_eq!(first_fit(&used, 2), Some(3));
        assert_eq!(first_fit(&used, 3), Some(6));
        assert_eq!(first_fit(&used, 4), None);
    }
}
