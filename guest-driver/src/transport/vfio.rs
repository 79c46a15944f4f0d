//! The transport inside a Linux VM with an IOMMU: the rnic function is bound to the
//! kernel's `vfio-pci` driver and driven from userspace through VFIO, as DPDK, SPDK or
//! ixy drive real NICs.
//!
//! Behind an IOMMU the device no longer reaches guest-physical addresses: it reaches only
//! what the IOMMU maps for it. So this transport allocates its DMA memory itself, pinned
//! anonymous memory, and maps it with `VFIO_IOMMU_MAP_DMA` at I/O virtual addresses
//! (IOVAs) it chooses (page-aligned, never 0, from 4 GiB up, inside the ranges the IOMMU
//! reports). Those IOVAs are the device addresses the driver hands to the device. Memory
//! nobody mapped, such as another process's, is out of the device's reach: an access to it
//! fails in the IOMMU instead of reading or writing someone's memory.
//!
//! Everything else comes from the VFIO device descriptor: config space is its config
//! region (`pread`/`pwrite`), BAR0 (registers) is mmapped when VFIO allows it and read and
//! written through the descriptor otherwise, BAR2 (doorbells) is mmapped, MSI-X vectors
//! are eventfds handed over with `VFIO_DEVICE_SET_IRQS` (so a waiter sleeps until the
//! device signals), and `VFIO_DEVICE_RESET` resets the function.
//!
//! The steps of opening a function, each named in the error when it fails:
//!
//! 1. bind the function to `vfio-pci`: write `vfio-pci` to its `driver_override` and its
//!    address to `/sys/bus/pci/drivers_probe`, as DPDK's `dpdk-devbind.py` does (the
//!    kernel module must be loaded; `boot.sh --iommu` loads it);
//! 2. open its IOMMU group, `/dev/vfio/<group>` (readable in `iommu_group` in sysfs), and
//!    check that the group is viable (every device in it bound to vfio or to nothing);
//! 3. put the group into this process's container (`/dev/vfio/vfio`) and, for the first
//!    group, choose the type1 IOMMU model;
//! 4. ask the group for the device's descriptor by its PCI address.
//!
//! One container serves the whole process, as in DPDK: every function opened here shares
//! one IOVA space, so memory allocated through one function is reachable by the others
//! (as guest-physical memory is without an IOMMU). A group can be open only once, so the
//! container keeps each group's descriptor for as long as it lives.
//!
//! All of it needs root (the sysfs writes, `/dev/vfio`, pinning memory).

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::os::raw::{c_int, c_ulong};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rnic_abi::pci::{DOORBELL_BAR, REG_BAR};
use rnic_abi::PAGE_SIZE;
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_iommu_type1_info, vfio_irq_info, vfio_irq_set, vfio_region_info, VFIO_TYPE1v2_IOMMU,
    VFIO_API_VERSION, VFIO_BASE, VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET,
    VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, VFIO_GROUP_FLAGS_VIABLE, VFIO_IOMMU_INFO_CAPS,
    VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_TYPE, VFIO_TYPE1_IOMMU,
};
use vmm_sys_util::ioctl::{
    ioctl_expr, ioctl_with_mut_ptr, ioctl_with_mut_ref, ioctl_with_ptr, ioctl_with_ref,
    ioctl_with_val, _IOC_NONE,
};

use super::sysfs::{self, bound_driver, write_sysfs};
use super::user_memory::{self, PinUnit, UserPages};
use super::{
    check_config, check_reg, page_round, DmaBuffer, DmaRelease, InterruptFds, MappedBar, Mapping,
    Transport,
};
use crate::dma_pagemap;
use crate::error::{Error, Result};

/// The kernel driver that hands a PCI function to userspace through VFIO.
pub(crate) const VFIO_PCI: &str = "vfio-pci";
/// Where the PCI bus is in sysfs.
const SYSFS_PCI_BUS: &str = "/sys/bus/pci";
/// The VFIO container device.
const VFIO_CONTAINER_PATH: &str = "/dev/vfio/vfio";
/// Where the IOMMU groups' device files are.
const VFIO_GROUP_DIR: &str = "/dev/vfio";

/// The lowest IOVA handed out. Not 0, so a zero address is never valid DMA, and above the
/// guest-physical addresses of RAM in the VMs this project boots, so a guest-physical
/// address given to the device by mistake (or on purpose) reaches nothing.
pub const IOVA_BASE: u64 = 1 << 32;

/// `_IO(VFIO_TYPE, VFIO_BASE + nr)`: every VFIO ioctl is a plain `_IO` number whose
/// argument size is carried in the structures' `argsz` instead.
const fn vfio_io(nr: u32) -> c_ulong {
    ioctl_expr(_IOC_NONE, VFIO_TYPE as u32, VFIO_BASE + nr, 0)
}

// The numbers of linux/vfio.h.
const VFIO_GET_API_VERSION: c_ulong = vfio_io(0);
const VFIO_CHECK_EXTENSION: c_ulong = vfio_io(1);
const VFIO_SET_IOMMU: c_ulong = vfio_io(2);
const VFIO_GROUP_GET_STATUS: c_ulong = vfio_io(3);
const VFIO_GROUP_SET_CONTAINER: c_ulong = vfio_io(4);
const VFIO_GROUP_GET_DEVICE_FD: c_ulong = vfio_io(6);
const VFIO_DEVICE_GET_INFO: c_ulong = vfio_io(7);
const VFIO_DEVICE_GET_REGION_INFO: c_ulong = vfio_io(8);
const VFIO_DEVICE_GET_IRQ_INFO: c_ulong = vfio_io(9);
const VFIO_DEVICE_SET_IRQS: c_ulong = vfio_io(10);
const VFIO_DEVICE_RESET: c_ulong = vfio_io(11);
const VFIO_IOMMU_GET_INFO: c_ulong = vfio_io(12);
const VFIO_IOMMU_MAP_DMA: c_ulong = vfio_io(13);
const VFIO_IOMMU_UNMAP_DMA: c_ulong = vfio_io(14);

// `vfio_irq_set` is five u32 fields followed by the data (here one i32 eventfd per
// vector); `set_irqs` builds it as an array of u32, which these pin down.
const _: () = {
    assert!(size_of::<vfio_irq_set>() == 20);
    assert!(offset_of!(vfio_irq_set, argsz) == 0);
    assert!(offset_of!(vfio_irq_set, flags) == 4);
    assert!(offset_of!(vfio_irq_set, index) == 8);
    assert!(offset_of!(vfio_irq_set, start) == 12);
    assert!(offset_of!(vfio_irq_set, count) == 16);
};

/// `size_of::<T>()` as the `argsz` of a VFIO structure.
fn argsz<T>() -> u32 {
    size_of::<T>() as u32
}

/// Turns a negative ioctl result into an error saying what was being done; the errno is
/// read at once, before anything else can change it.
fn check(ret: c_int, what: impl FnOnce() -> String) -> Result<c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        return Err(Error::Io(what(), e));
    }
    Ok(ret)
}

/// Runs the VFIO ioctl `request` on `fd` with `info`, a structure the kernel reads and
/// fills in (at most its `argsz` bytes), and returns it filled.
///
/// # Safety
/// `T` must be the structure `request` takes, with `argsz` no larger than `T`.
unsafe fn query<T>(
    fd: &impl AsRawFd,
    request: c_ulong,
    mut info: T,
    what: impl FnOnce() -> String,
) -> Result<T> {
    // SAFETY: `info` is what `request` takes (the caller's promise) and lives across the
    // call; the kernel writes no more than its `argsz` bytes.
    check(unsafe { ioctl_with_mut_ref(fd, request, &mut info) }, what)?;
    Ok(info)
}

/// The IOMMU group of the PCI function whose sysfs directory is `dev`, if it has one: a
/// function has one exactly when an IOMMU translates its DMA.
pub fn iommu_group(dev: &Path) -> Option<u32> {
    let target = std::fs::read_link(dev.join("iommu_group")).ok()?;
    target.file_name()?.to_str()?.parse().ok()
}

/// Binds the function `bdf` (sysfs directory `dev`) to vfio-pci, unless it already is:
/// `driver_override` names vfio-pci, then `drivers_probe` lets the kernel match it, the
/// documented way of handing a device to a chosen driver (what `dpdk-devbind.py` does).
/// `pci_bus` is `/sys/bus/pci`. A function that another driver holds is left alone.
fn bind_vfio_pci(pci_bus: &Path, bdf: &str, dev: &Path) -> Result<()> {
    match bound_driver(dev).as_deref() {
        Some(VFIO_PCI) => return Ok(()),
        // pci-stub only keeps other drivers off; hand the function over.
        Some(sysfs::HARMLESS_DRIVER) => {
            write_sysfs(&dev.join("driver/unbind"), bdf).map_err(|e| {
                Error::Io(format!("unbind {bdf} from {}", sysfs::HARMLESS_DRIVER), e)
            })?;
        }
        Some(other) => {
            return Err(Error::Io(
                format!(
                    "bind the function to vfio-pci: kernel driver `{other}` is bound to {bdf}; unbind it first (echo {bdf} > {}/driver/unbind)",
                    dev.display()
                ),
                io::Error::from(ErrorKind::ResourceBusy),
            ))
        }
        None => {}
    }
    if !pci_bus.join("drivers").join(VFIO_PCI).is_dir() {
        return Err(Error::NotFound(format!(
            "bind {bdf} to vfio-pci: the vfio-pci driver is not loaded (modprobe vfio-pci; qemu-scripts/boot.sh --iommu loads it)"
        )));
    }
    let bind_error = |step: &str, e: io::Error| {
        let hint = if e.kind() == ErrorKind::PermissionDenied {
            " (run as root)"
        } else {
            ""
        };
        Error::Io(format!("bind the function to vfio-pci: {step}{hint}"), e)
    };
    write_sysfs(&dev.join("driver_override"), VFIO_PCI).map_err(|e| {
        bind_error(
            &format!("write {VFIO_PCI} to {}/driver_override", dev.display()),
            e,
        )
    })?;
    let probe = write_sysfs(&pci_bus.join("drivers_probe"), bdf);
    // Another process may have bound it meanwhile: what counts is the result.
    match bound_driver(dev).as_deref() {
        Some(VFIO_PCI) => {
            log::info!("bound {bdf} to vfio-pci");
            Ok(())
        }
        other => Err(bind_error(
            &format!(
                "{bdf} is bound to {} after writing it to {}/drivers_probe",
                other.unwrap_or("no driver"),
                pci_bus.display()
            ),
            probe
                .err()
                .unwrap_or_else(|| io::Error::from(ErrorKind::NotFound)),
        )),
    }
}

/// The IOVA space of a container: free ranges, handed out next fit (from where the last
/// one ended, wrapping around at the top) and merged again when given back, and the
/// ranges handed out. Next fit keeps a freed IOVA unused for as long as the space lasts:
/// a late or stray device access to a buffer given back meets unmapped space, not the
/// next buffer.
#[derive(Debug, Default)]
struct IovaSpace {
    /// Free ranges: start -> length, disjoint and never adjacent.
    free: BTreeMap<u64, u64>,
    /// Ranges handed out: start -> length.
    taken: BTreeMap<u64, u64>,
    /// Where the next search starts: the end of the range last handed out.
    cursor: u64,
}

impl IovaSpace {
    /// The parts of `ranges` (inclusive `(first, last)` pairs, as the IOMMU reports them)
    /// at or above `floor`, in whole pages.
    fn new(ranges: &[(u64, u64)], floor: u64) -> Self {
        let mut space = Self::default();
        for &(first, last) in ranges {
            let start = first.max(floor).next_multiple_of(PAGE_SIZE);
            let end = last.saturating_add(1) & !(PAGE_SIZE - 1);
            if end > start {
                space.add_free(start, end - start);
            }
        }
        space
    }

    /// The lowest address at or above `from` where `len` free bytes begin.
    fn fit_from(&self, from: u64, len: u64) -> Option<u64> {
        use std::ops::Bound::{Excluded, Unbounded};
        let containing = self
            .free
            .range(..=from)
            .next_back()
            .filter(|(&start, &free)| from < start + free)
            .map(|(&start, &free)| (from, start + free - from));
        let above = self
            .free
            .range((Excluded(from), Unbounded))
            .map(|(&start, &free)| (start, free));
        containing
            .into_iter()
            .chain(above)
            .find(|&(_, free)| free >= len)
            .map(|(at, _)| at)
    }

    /// `len` bytes (a multiple of the page size) of IOVA space.
    fn take(&mut self, len: u64) -> Option<u64> {
        let at = self
            .fit_from(self.cursor, len)
            .or_else(|| self.fit_from(0, len))?;
        let (&start, &free) = self.free.range(..=at).next_back()?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        if at + len < start + free {
            self.free.insert(at + len, start + free - at - len);
        }
        self.taken.insert(at, len);
        self.cursor = at + len;
        Some(at)
    }

    /// Returns the range [`IovaSpace::take`] handed out at `start`.
    fn give_back(&mut self, start: u64) {
        if let Some(len) = self.taken.remove(&start) {
            self.add_free(start, len);
        }
    }

    /// Adds `start..start+len` to the free ranges, merged with its neighbours.
    fn add_free(&mut self, mut start: u64, mut len: u64) {
        if let Some((&before, &before_len)) = self.free.range(..start).next_back() {
            if before + before_len == start {
                self.free.remove(&before);
                start = before;
                len += before_len;
            }
        }
        if let Some(after_len) = self.free.remove(&(start + len)) {
            len += after_len;
        }
        self.free.insert(start, len);
    }

    /// Whether `iova` lies in a range handed out.
    fn is_taken(&self, iova: u64) -> bool {
        self.taken
            .range(..=iova)
            .next_back()
            .is_some_and(|(&start, &len)| iova < start + len)
    }

    /// A page of the space that nothing has: the last page of the highest free range.
    fn unused_page(&self) -> Option<u64> {
        let (&start, &len) = self.free.iter().next_back()?;
        Some(start + len - PAGE_SIZE)
    }
}

/// Reads the IOVA ranges out of the capability chain of a `VFIO_IOMMU_GET_INFO` answer
/// (`info`, the whole buffer): `(first, last)` pairs, or `None` when the chain has no
/// IOVA-range capability (then the IOMMU puts no limit beyond the address width).
fn parse_iova_ranges(info: &[u8]) -> Option<Vec<(u64, u64)>> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(info.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(info.get(at..at + 8)?.try_into().ok()?))
    };
    let flags = u32_at(offset_of!(vfio_iommu_type1_info, flags))?;
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return None;
    }
    let mut at = u32_at(offset_of!(vfio_iommu_type1_info, cap_offset))? as usize;
    // Each header: id (u16), version (u16), offset of the next (u32, 0 = last). A
    // malformed chain must not loop for ever: it cannot have more links than bytes.
    for _ in 0..info.len() {
        if at == 0 {
            return None;
        }
        let id = u32_at(at)? & 0xffff;
        let next = u32_at(at + 4)? as usize;
        if id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            // After the 8-byte header: nr_iovas (u32), reserved (u32), then
            // `{ start: u64, end: u64 }` pairs, end inclusive.
            let count = u32_at(at + 8)? as usize;
            return (0..count)
                .map(|i| Some((u64_at(at + 16 + 16 * i)?, u64_at(at + 24 + 16 * i)?)))
                .collect();
        }
        at = next;
    }
    None
}

/// A VFIO container (`/dev/vfio/vfio`): one IOMMU address space shared by every group in
/// it, so by every function opened in this process.
#[derive(Debug)]
struct Container {
    file: File,
    state: Mutex<ContainerState>,
}

#[derive(Debug, Default)]
struct ContainerState {
    /// The groups in the container, by number, open for as long as the container is.
    groups: HashMap<u32, File>,
    /// Whether the IOMMU model is set (done with the first group).
    iommu_set: bool,
    /// The IOVA space the IOMMU accepts, from [`IOVA_BASE`] up.
    iovas: IovaSpace,
}

/// The container this process's functions share while any of them (or any DMA buffer of
/// theirs) lives.
static CONTAINER: Mutex<Weak<Container>> = Mutex::new(Weak::new());

impl Container {
    /// The process's container, opened if there is none.
    fn shared() -> Result<Arc<Container>> {
        let mut slot = CONTAINER.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.upgrade() {
            return Ok(c);
        }
        let c = Arc::new(Container::open()?);
        *slot = Arc::downgrade(&c);
        Ok(c)
    }

    fn open() -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(VFIO_CONTAINER_PATH)
            .map_err(|e| {
                let hint = match e.kind() {
                    ErrorKind::NotFound => {
                        " (load the vfio modules: modprobe vfio-pci vfio_iommu_type1)"
                    }
                    ErrorKind::PermissionDenied => " (run as root)",
                    _ => "",
                };
                Error::Io(format!("open {VFIO_CONTAINER_PATH}{hint}"), e)
            })?;
        // SAFETY: an argument-less ioctl on a descriptor we own.
        let version = unsafe { vmm_sys_util::ioctl::ioctl(&file, VFIO_GET_API_VERSION) };
        if version != VFIO_API_VERSION as c_int {
            return Err(Error::Device(format!(
                "{VFIO_CONTAINER_PATH} speaks VFIO API version {version}, this driver {VFIO_API_VERSION}"
            )));
        }
        Ok(Self {
            file,
            state: Mutex::new(ContainerState::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, ContainerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts IOMMU group `number` into the container (once; later calls find it there).
    fn attach(&self, number: u32) -> Result<()> {
        let mut state = self.state();
        if state.groups.contains_key(&number) {
            return Ok(());
        }
        let path = PathBuf::from(VFIO_GROUP_DIR).join(number.to_string());
        let group = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::EBUSY) => " (another process has the group open: a function can be driven by one process at a time)",
                    Some(libc::ENOENT) => " (is the function bound to vfio-pci?)",
                    Some(libc::EACCES) | Some(libc::EPERM) => " (run as root)",
                    _ => "",
                };
                Error::Io(format!("open IOMMU group {}{hint}", path.display()), e)
            })?;
        let status = vfio_group_status {
            argsz: argsz::<vfio_group_status>(),
            ..Default::default()
        };
        // SAFETY: GET_STATUS takes a vfio_group_status.
        let status = unsafe {
            query(&group, VFIO_GROUP_GET_STATUS, status, || {
                format!("VFIO_GROUP_GET_STATUS of group {number}")
            })
        }?;
        if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(Error::Io(
                format!(
                    "IOMMU group {number} is not viable: bind every device of /sys/kernel/iommu_groups/{number}/devices to vfio-pci (or to no driver)"
                ),
                io::Error::from(ErrorKind::PermissionDenied),
            ));
        }
        let container_fd: c_int = self.file.as_raw_fd();
        check(
            // SAFETY: the kernel reads one int (our container's descriptor) from the pointer.
            unsafe { ioctl_with_ref(&group, VFIO_GROUP_SET_CONTAINER, &container_fd) },
            || format!("VFIO_GROUP_SET_CONTAINER of group {number}"),
        )?;
        if !state.iommu_set {
            self.set_iommu(&mut state)?;
        }
        state.groups.insert(number, group);
        Ok(())
    }

    /// Chooses the type1 IOMMU model (v2 where the kernel has it) and learns the IOVA
    /// ranges it accepts.
    fn set_iommu(&self, state: &mut ContainerState) -> Result<()> {
        let has = |model: u32| {
            // SAFETY: CHECK_EXTENSION takes its argument by value.
            unsafe { ioctl_with_val(&self.file, VFIO_CHECK_EXTENSION, c_ulong::from(model)) > 0 }
        };
        let model = if has(VFIO_TYPE1v2_IOMMU) {
            VFIO_TYPE1v2_IOMMU
        } else if has(VFIO_TYPE1_IOMMU) {
            VFIO_TYPE1_IOMMU
        } else {
            return Err(Error::NotFound(
                "the kernel's VFIO has no type1 IOMMU (load vfio_iommu_type1: modprobe vfio_iommu_type1)".into(),
            ));
        };
        check(
            // SAFETY: SET_IOMMU takes the model by value.
            unsafe { ioctl_with_val(&self.file, VFIO_SET_IOMMU, c_ulong::from(model)) },
            || {
                "VFIO_SET_IOMMU (type1; with an IOMMU lacking interrupt remapping, load vfio_iommu_type1 with allow_unsafe_interrupts=1)".into()
            },
        )?;
        let ranges = self.iova_ranges()?.unwrap_or_else(|| vec![(0, u64::MAX)]);
        state.iovas = IovaSpace::new(&ranges, IOVA_BASE);
        state.iommu_set = true;
        log::debug!("VFIO container: type1 model {model}, IOVA ranges {ranges:x?}");
        Ok(())
    }

    /// The IOVA ranges of `VFIO_IOMMU_GET_INFO`, if the kernel reports them.
    fn iova_ranges(&self) -> Result<Option<Vec<(u64, u64)>>> {
        // First the fixed part; the kernel raises argsz to what the capabilities need.
        let info = vfio_iommu_type1_info {
            argsz: argsz::<vfio_iommu_type1_info>(),
            ..Default::default()
        };
        // SAFETY: IOMMU_GET_INFO takes a vfio_iommu_type1_info.
        let info = unsafe {
            query(&self.file, VFIO_IOMMU_GET_INFO, info, || {
                "VFIO_IOMMU_GET_INFO".into()
            })
        }?;
        if info.argsz as usize <= size_of::<vfio_iommu_type1_info>() {
            return Ok(None);
        }
        // A u64 buffer keeps the structure's 8-byte alignment.
        let mut buf = vec![0u64; (info.argsz as usize).div_ceil(8)];
        let header = vfio_iommu_type1_info {
            argsz: info.argsz,
            ..Default::default()
        };
        // SAFETY: `buf` is 8-byte aligned and larger than the header (argsz grew past it).
        unsafe {
            buf.as_mut_ptr()
                .cast::<vfio_iommu_type1_info>()
                .write(header)
        };
        check(
            // SAFETY: the kernel writes at most `argsz` bytes, which `buf` holds.
            unsafe { ioctl_with_mut_ptr(&self.file, VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) },
            || "VFIO_IOMMU_GET_INFO with capabilities".into(),
        )?;
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(parse_iova_ranges(&bytes))
    }

    /// Maps `len` bytes of this process's memory at `vaddr` for the device at `iova`,
    /// readable, and writable if `writable`. The kernel pins the pages.
    fn map(&self, vaddr: u64, iova: u64, len: u64, writable: bool) -> Result<()> {
        let write = if writable { VFIO_DMA_MAP_FLAG_WRITE } else { 0 };
        let map = vfio_iommu_type1_dma_map {
            argsz: argsz::<vfio_iommu_type1_dma_map>(),
            flags: VFIO_DMA_MAP_FLAG_READ | write,
            vaddr,
            iova,
            size: len,
        };
        check(
            // SAFETY: the kernel reads the structure; the memory it names is ours and stays
            // mapped until `unmap`.
            unsafe { ioctl_with_ref(&self.file, VFIO_IOMMU_MAP_DMA, &map) },
            || {
                format!("VFIO_IOMMU_MAP_DMA of {len:#x} bytes at IOVA {iova:#x} (out of locked memory? run as root or raise ulimit -l)")
            },
        )?;
        log::debug!("VFIO: mapped {len:#x} bytes at IOVA {iova:#x} (writable: {writable})");
        Ok(())
    }

    /// Removes the mapping at `iova`.
    fn unmap(&self, iova: u64, len: u64) -> Result<()> {
        let unmap = vfio_iommu_type1_dma_unmap {
            argsz: argsz::<vfio_iommu_type1_dma_unmap>(),
            iova,
            size: len,
            ..Default::default()
        };
        // SAFETY: UNMAP_DMA takes a vfio_iommu_type1_dma_unmap (and writes back the size
        // it unmapped).
        let unmap = unsafe {
            query(&self.file, VFIO_IOMMU_UNMAP_DMA, unmap, || {
                format!("VFIO_IOMMU_UNMAP_DMA of {len:#x} bytes at IOVA {iova:#x}")
            })
        }?;
        log::debug!("VFIO: unmapped {:#x} bytes at IOVA {iova:#x}", unmap.size);
        if unmap.size != len {
            return Err(Error::Io(
                format!(
                    "VFIO_IOMMU_UNMAP_DMA at IOVA {iova:#x} removed {:#x} of {len:#x} bytes",
                    unmap.size
                ),
                io::Error::from(ErrorKind::InvalidData),
            ));
        }
        Ok(())
    }

    /// Allocates a DMA buffer: pinned anonymous memory mapped at fresh IOVAs.
    fn alloc(self: &Arc<Self>, size: usize, sys_page: usize) -> Result<DmaBuffer> {
        let len = page_round(size);
        let memory = dma_pagemap::Mapping::for_dma(len, sys_page)?;
        let iova = self.state().iovas.take(len as u64).ok_or_else(|| {
            Error::NoDmaMemory(format!(
                "no {len:#x} bytes of IOVA space left in the VFIO container"
            ))
        })?;
        if let Err(e) = self.map(memory.ptr().as_ptr() as u64, iova, len as u64, true) {
            self.state().iovas.give_back(iova);
            return Err(e);
        }
        let (ptr, map_len) = memory.into_raw();
        let pages = (0..len as u64 / PAGE_SIZE)
            .map(|i| iova + i * PAGE_SIZE)
            .collect();
        let release: Arc<dyn DmaRelease> = Arc::new(VfioRelease {
            container: self.clone(),
            map_len,
        });
        // SAFETY: `ptr..ptr+map_len` is a live mapping owned from now on by the buffer,
        // which gives it back through `release` exactly once; `pages` has one IOVA per
        // 4 KiB page of `len`.
        let buf = unsafe { DmaBuffer::new(ptr, len, pages, Some(release)) };
        buf.zero();
        Ok(buf)
    }
}

/// A run of application pages ([`Transport::map_user_memory`]) VFIO-mapped at `iova`.
#[derive(Debug)]
struct UserIova {
    iova: u64,
}

impl PinUnit for UserIova {
    fn device_addr(&self, start: usize, page: usize) -> u64 {
        self.iova + (page - start) as u64
    }
}

impl Container {
    /// What application memory registrations through this container share: a run of
    /// pages is mapped once, at fresh IOVAs, and unmapped after its last registration.
    fn user_pages(self: &Arc<Self>) -> Arc<UserPages<UserIova>> {
        let container = self.clone();
        UserPages::new(Box::new(move |_start, len, unit: UserIova| {
            match container.unmap(unit.iova, len as u64) {
                Ok(()) => container.state().iovas.give_back(unit.iova),
                // The IOVAs stay taken: the device might still reach them.
                Err(e) => log::warn!("{e}"),
            }
        }))
    }

    /// Maps the application's pages `start..start+len` (page-aligned) at fresh IOVAs,
    /// writable for the device if `writable`.
    fn map_user_run(&self, start: usize, len: usize, writable: bool) -> Result<UserIova> {
        let iova = self.state().iovas.take(len as u64).ok_or_else(|| {
            Error::NoDmaMemory(format!(
                "no {len:#x} bytes of IOVA space left in the VFIO container"
            ))
        })?;
        match self.map(start as u64, iova, len as u64, writable) {
            Ok(()) => Ok(UserIova { iova }),
            Err(e) => {
                self.state().iovas.give_back(iova);
                Err(e)
            }
        }
    }
}

/// Gives a buffer of [`Container::alloc`] back: out of the IOMMU first, so the device can
/// no longer reach the memory, then to the kernel.
#[derive(Debug)]
struct VfioRelease {
    container: Arc<Container>,
    map_len: usize,
}

impl DmaRelease for VfioRelease {
    fn release(&self, ptr: NonNull<u8>, len: usize, device_pages: &[u64]) {
        if let Some(&iova) = device_pages.first() {
            match self.container.unmap(iova, len as u64) {
                Ok(()) => self.container.state().iovas.give_back(iova),
                // The IOVAs stay taken: the device might still reach them.
                Err(e) => log::warn!("{e}"),
            }
        }
        dma_pagemap::unmap(ptr, self.map_len);
    }
}

/// BAR0 as VFIO offers it.
#[derive(Debug)]
enum Registers {
    /// mmapped from the device descriptor.
    Mapped(Mapping),
    /// Read and written through the device descriptor at `offset`.
    File { offset: u64, len: usize },
}

impl Registers {
    fn len(&self) -> usize {
        match self {
            Registers::Mapped(m) => m.len(),
            Registers::File { len, .. } => *len,
        }
    }
}

/// An rnic function inside a VM with an IOMMU, driven from userspace through VFIO.
#[derive(Debug)]
pub struct VfioTransport {
    bdf: String,
    group: u32,
    container: Arc<Container>,
    device: File,
    config_offset: u64,
    regs: Registers,
    doorbells: Mapping,
    vectors: InterruptFds,
    /// Application memory mapped for registrations ([`Transport::map_user_memory`]).
    user: Arc<UserPages<UserIova>>,
    /// MSI-X vectors the function has.
    msix_vectors: u32,
    /// Whether VFIO can reset the function.
    can_reset: bool,
    sys_page: usize,
}

impl VfioTransport {
    /// Opens the rnic function at PCI address `bdf` (`0000:00:03.0`; the domain may be
    /// left out) through VFIO: binds it to vfio-pci, puts its IOMMU group into this
    /// process's container and maps its register and doorbell BARs.
    pub fn open(bdf: &str) -> Result<Self> {
        open_in(Path::new(SYSFS_PCI_BUS), bdf)
    }

    /// The function's PCI address.
    pub fn bdf(&self) -> &str {
        &self.bdf
    }

    /// The function's IOMMU group.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// A page-aligned IOVA inside the IOMMU's range that nothing is mapped at: what a
    /// test gives the device to check that unmapped memory is out of its reach.
    pub fn unmapped_iova(&self) -> Option<u64> {
        self.container.state().iovas.unused_page()
    }

    /// Whether this process has memory mapped for the device at `iova`.
    pub fn is_mapped(&self, iova: u64) -> bool {
        self.container.state().iovas.is_taken(iova)
    }

    /// `VFIO_DEVICE_SET_IRQS` on the MSI-X index: `fds` as the trigger of vectors
    /// 0..fds.len(), or (with no fds) MSI-X off.
    fn set_msix(&self, fds: &[c_int]) -> Result<()> {
        let flags = if fds.is_empty() {
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER
        } else {
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER
        };
        let argsz = size_of::<vfio_irq_set>() + std::mem::size_of_val(fds);
        // The header's five u32 fields (layout checked at compile time above), then the
        // descriptors.
        let mut set: Vec<u32> = vec![
            argsz as u32,
            flags,
            VFIO_PCI_MSIX_IRQ_INDEX,
            0,
            fds.len() as u32,
        ];
        set.extend(fds.iter().map(|&fd| fd as u32));
        check(
            // SAFETY: `set` is a complete vfio_irq_set of `argsz` bytes, which the kernel
            // only reads.
            unsafe { ioctl_with_ptr(&self.device, VFIO_DEVICE_SET_IRQS, set.as_ptr()) },
            || {
                format!(
                    "VFIO_DEVICE_SET_IRQS: {} MSI-X vectors of {}",
                    fds.len(),
                    self.bdf
                )
            },
        )?;
        Ok(())
    }
}

/// `VFIO_DEVICE_GET_REGION_INFO` of region `index`.
fn region_info(device: &File, bdf: &str, index: u32) -> Result<vfio_region_info> {
    let info = vfio_region_info {
        argsz: argsz::<vfio_region_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: GET_REGION_INFO takes a vfio_region_info.
    unsafe {
        query(device, VFIO_DEVICE_GET_REGION_INFO, info, || {
            format!("VFIO_DEVICE_GET_REGION_INFO {index} of {bdf}")
        })
    }
}

/// [`VfioTransport::open`] with the PCI bus at `pci_bus`.
fn open_in(pci_bus: &Path, bdf: &str) -> Result<VfioTransport> {
    let (bdf, dev) = sysfs::locate(&pci_bus.join("devices"), bdf)?;
    sysfs::check_vendor(&bdf, &dev)?;
    let group = iommu_group(&dev).ok_or_else(|| {
        Error::NotFound(format!(
            "{bdf} has no IOMMU group (the guest has no IOMMU, or it is off: boot with a virtual IOMMU and intel_iommu=on, or use the page map: SysfsTransport)"
        ))
    })?;
    bind_vfio_pci(pci_bus, &bdf, &dev)?;
    let container = Container::shared()?;
    container.attach(group)?;
    let device = {
        let state = container.state();
        let group_file = state.groups.get(&group).expect("attached above");
        let name = CString::new(bdf.as_str()).expect("a PCI address has no NUL");
        // SAFETY: the kernel reads the NUL-terminated name; a new descriptor is returned.
        let fd = check(
            unsafe { ioctl_with_ptr(group_file, VFIO_GROUP_GET_DEVICE_FD, name.as_ptr()) },
            || format!("VFIO_GROUP_GET_DEVICE_FD {bdf} of IOMMU group {group}"),
        )?;
        // SAFETY: a fresh descriptor the kernel handed us, owned by the File from now on.
        unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) }
    };

    let info = vfio_device_info {
        argsz: argsz::<vfio_device_info>(),
        ..Default::default()
    };
    // SAFETY: DEVICE_GET_INFO takes a vfio_device_info.
    let info = unsafe {
        query(&device, VFIO_DEVICE_GET_INFO, info, || {
            format!("VFIO_DEVICE_GET_INFO of {bdf}")
        })
    }?;
    if info.flags & VFIO_DEVICE_FLAGS_PCI == 0
        || info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX
        || info.num_irqs <= VFIO_PCI_MSIX_IRQ_INDEX
    {
        return Err(Error::Device(format!(
            "VFIO describes {bdf} as no PCI device (flags {:#x}, {} regions, {} interrupt kinds)",
            info.flags, info.num_regions, info.num_irqs
        )));
    }
    let config = region_info(&device, &bdf, VFIO_PCI_CONFIG_REGION_INDEX)?;
    let bar0 = region_info(&device, &bdf, u32::from(REG_BAR))?;
    let bar2 = region_info(&device, &bdf, u32::from(DOORBELL_BAR))?;
    let size = |r: &vfio_region_info, what: &str| {
        usize::try_from(r.size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| {
                Error::Device(format!(
                    "{what} of {bdf} has no usable size ({:#x}): is this an rnic function?",
                    r.size
                ))
            })
    };
    let (regs_len, doorbells_len) = (size(&bar0, "BAR0")?, size(&bar2, "BAR2")?);
    sysfs::check_bar_sizes(&bdf, regs_len, doorbells_len)?;
    if bar2.flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
        return Err(Error::Device(format!(
            "VFIO does not let BAR{DOORBELL_BAR} (doorbells) of {bdf} be mmapped"
        )));
    }
    let doorbells = Mapping::new(
        device.as_raw_fd(),
        doorbells_len,
        bar2.offset,
        &format!("BAR{DOORBELL_BAR} of {bdf} through VFIO"),
    )?;
    let mut regs = Registers::File {
        offset: bar0.offset,
        len: regs_len,
    };
    if bar0.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 {
        match Mapping::new(
            device.as_raw_fd(),
            regs_len,
            bar0.offset,
            "BAR0 through VFIO",
        ) {
            Ok(m) => regs = Registers::Mapped(m),
            // Parts of a BAR may be kept from mmap (sparse areas): then go through the
            // descriptor, as for a BAR VFIO never offered to map.
            Err(e) => log::debug!("{e}; reaching BAR0 of {bdf} through the VFIO descriptor"),
        }
    }

    let irq = vfio_irq_info {
        argsz: argsz::<vfio_irq_info>(),
        index: VFIO_PCI_MSIX_IRQ_INDEX,
        ..Default::default()
    };
    // SAFETY: GET_IRQ_INFO takes a vfio_irq_info.
    let irq = unsafe {
        query(&device, VFIO_DEVICE_GET_IRQ_INFO, irq, || {
            format!("VFIO_DEVICE_GET_IRQ_INFO (MSI-X) of {bdf}")
        })
    }?;

    log::info!(
        "opened rnic function {bdf} through VFIO (IOMMU group {group}): BAR0 {regs_len:#x} bytes ({}), BAR2 {doorbells_len:#x} bytes, {} MSI-X vectors",
        if matches!(regs, Registers::Mapped(_)) { "mmapped" } else { "through the descriptor" },
        irq.count
    );
    let user = container.user_pages();
    Ok(VfioTransport {
        bdf,
        group,
        container,
        config_offset: config.offset,
        regs,
        doorbells,
        vectors: InterruptFds::default(),
        user,
        msix_vectors: irq.count,
        can_reset: info.flags & VFIO_DEVICE_FLAGS_RESET != 0,
        device,
        sys_page: dma_pagemap::sys_page_size(),
    })
}

impl Transport for VfioTransport {
    fn describe(&self) -> String {
        format!("vfio:{}", self.bdf)
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        check_config(&self.bdf, offset, buf.len())?;
        self.device
            .read_exact_at(buf, self.config_offset + u64::from(offset))
            .map_err(|e| {
                Error::Io(
                    format!(
                        "config space read of {} bytes at {offset:#x} of {} through VFIO",
                        buf.len(),
                        self.bdf
                    ),
                    e,
                )
            })
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        check_config(&self.bdf, offset, data.len())?;
        self.device
            .write_all_at(data, self.config_offset + u64::from(offset))
            .map_err(|e| {
                Error::Io(
                    format!(
                        "config space write of {} bytes at {offset:#x} of {} through VFIO",
                        data.len(),
                        self.bdf
                    ),
                    e,
                )
            })
    }

    fn reg_read32(&self, offset: u64) -> Result<u32> {
        check_reg(&self.bdf, self.regs.len(), offset)?;
        match &self.regs {
            Registers::Mapped(m) => Ok(m.bar().read32(offset)),
            Registers::File { offset: base, .. } => {
                let mut b = [0u8; 4];
                self.device
                    .read_exact_at(&mut b, base + offset)
                    .map_err(|e| {
                        Error::Io(
                            format!("BAR0 read at {offset:#x} of {} through VFIO", self.bdf),
                            e,
                        )
                    })?;
                Ok(u32::from_le_bytes(b))
            }
        }
    }

    fn reg_write32(&self, offset: u64, value: u32) -> Result<()> {
        check_reg(&self.bdf, self.regs.len(), offset)?;
        match &self.regs {
            Registers::Mapped(m) => {
                m.bar().write32(offset, value);
                Ok(())
            }
            Registers::File { offset: base, .. } => self
                .device
                .write_all_at(&value.to_le_bytes(), base + offset)
                .map_err(|e| {
                    Error::Io(
                        format!("BAR0 write at {offset:#x} of {} through VFIO", self.bdf),
                        e,
                    )
                }),
        }
    }

    fn doorbells(&self) -> &MappedBar {
        self.doorbells.bar()
    }

    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.container.alloc(size, self.sys_page)
    }

    /// The IOMMU maps the application's own pages where they are: VFIO_IOMMU_MAP_DMA of
    /// their virtual addresses at fresh IOVAs (the kernel pins them; no copy, no move).
    /// Pages this process may only read are mapped read-only for the device.
    fn map_user_memory(&self, addr: usize, len: usize, writable: bool) -> Result<DmaBuffer> {
        let (start, end) = user_memory::page_span(addr, len).ok_or_else(|| {
            user_memory::os_error(format!("{len} bytes at {addr:#x}"), libc::EINVAL)
        })?;
        let pieces: Vec<_> = user_memory::accessible(start, end, writable)?
            .iter()
            .map(|v| (v.start.max(start), v.end.min(end), v.write))
            .collect();
        self.user.map(addr, len, &pieces, |&write, run, run_len| {
            self.container.map_user_run(run, run_len, write)
        })
    }

    fn enable_interrupts(&self, count: u16) -> Result<bool> {
        if u32::from(count) > self.msix_vectors {
            return Err(Error::Device(format!(
                "{} has {} MSI-X vectors, {count} asked",
                self.bdf, self.msix_vectors
            )));
        }
        // vfio-pci sizes MSI-X when it enables it: to change the number of vectors, turn
        // it off first (the old eventfds are then released by the kernel).
        if self.vectors.count() != 0 {
            self.set_msix(&[])?;
            self.vectors.install(Vec::new());
        }
        let fds = InterruptFds::create(count)?;
        let raw: Vec<c_int> = fds.iter().map(|f| f.as_raw_fd()).collect();
        self.set_msix(&raw)?;
        self.vectors.install(fds);
        Ok(true)
    }

    fn wait_interrupt(&self, vector: u16, timeout: Duration) -> Result<bool> {
        self.vectors.wait(vector, timeout)
    }

    fn interrupt_fd(&self, vector: u16) -> Option<std::os::fd::RawFd> {
        self.vectors.raw(vector)
    }

    fn function_reset(&self) -> Result<()> {
        if !self.can_reset {
            return Err(Error::Unsupported(
                "function reset: VFIO offers no reset method for this function",
            ));
        }
        check(
            // SAFETY: an argument-less ioctl on our device descriptor.
            unsafe { vmm_sys_util::ioctl::ioctl(&self.device, VFIO_DEVICE_RESET) },
            || format!("VFIO_DEVICE_RESET of {}", self.bdf),
        )?;
        Ok(())
    }

    fn kind(&self) -> String {
        format!(
            "vfio (IOMMU group {}: DMA at IOVAs the driver maps, MSI-X as eventfds)",
            self.group
        )
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_are_those_of_linux_vfio_h() {
        // _IO(';', 100 + n): type 0x3b in bits 8..16.
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_SET_IOMMU, 0x3b66);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(VFIO_DEVICE_SET_IRQS, 0x3b6e);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
    }

    #[test]
    fn iova_space_starts_at_the_floor_avoids_holes_and_merges() {
        // As the Intel IOMMU reports it: all of a 39-bit space but the MSI window.
        let ranges = [(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
        let mut space = IovaSpace::new(&ranges, IOVA_BASE);
        let a = space.take(0x1000).unwrap();
        assert_eq!(a, IOVA_BASE, "never 0, never below the floor");
        let b = space.take(0x3000).unwrap();
        assert_eq!(b, IOVA_BASE + 0x1000);
        let c = space.take(0x1000).unwrap();
        assert!(space.is_taken(b + 0x2fff) && space.is_taken(c));
        assert!(!space.is_taken(c + 0x1000) && !space.is_taken(0) && !space.is_taken(0xa1e_2000));
        space.give_back(a);
        assert!(!space.is_taken(a));
        // Next fit: what was given back is not handed out again soon.
        assert_eq!(space.take(0x1000).unwrap(), c + 0x1000);
        space.give_back(b);
        space.give_back(b); // twice: no effect
                            // Given back, a and b are one free range again.
        assert_eq!(space.free.get(&a), Some(&0x4000), "neighbours merged");
        assert_eq!(space.unused_page(), Some((1 << 39) - 0x1000));
        assert!(!space.is_taken((1 << 39) - 0x1000));

        // Below the floor only: nothing; the MSI window is kept out.
        let mut low = IovaSpace::new(&[(0, 0xffff_ffff)], IOVA_BASE);
        assert_eq!(low.take(0x1000), None);
        assert_eq!(low.unused_page(), None);
        let mut holed = IovaSpace::new(&ranges, 0xfed0_0000);
        assert_eq!(holed.take(0x10_0000), Some(0xfed0_0000));
        assert_eq!(
            holed.take(0x10_0000),
            Some(0xfef0_0000),
            "the MSI window is skipped"
        );
    }

    #[test]
    fn iova_space_wraps_around_when_the_top_is_reached() {
        // Four pages.
        let mut space = IovaSpace::new(&[(0x1_0000, 0x1_3fff)], 0);
        let a = space.take(0x2000).unwrap();
        let b = space.take(0x1000).unwrap();
        assert_eq!((a, b), (0x1_0000, 0x1_2000));
        space.give_back(a);
        // One page left above the cursor: two do not fit there, so the search wraps.
        assert_eq!(space.take(0x2000), Some(a));
        assert_eq!(space.take(0x1000), Some(0x1_3000));
        assert_eq!(space.take(0x1000), None, "full");
        space.give_back(b);
        assert_eq!(space.take(0x1000), Some(b));
        assert!(space.free.is_empty());
    }

    /// A VFIO_IOMMU_GET_INFO answer with `caps` (id, payload) chained after the header.
    fn info_with(caps: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut buf = vec![0u8; size_of::<vfio_iommu_type1_info>()];
        let mut at = buf.len();
        buf[4..8].copy_from_slice(&VFIO_IOMMU_INFO_CAPS.to_ne_bytes());
        buf[16..20].copy_from_slice(&(at as u32).to_ne_bytes());
        for (i, (id, payload)) in caps.iter().enumerate() {
            let next = if i + 1 == caps.len() {
                0
            } else {
                at + 8 + payload.len()
            };
            buf.extend_from_slice(&id.to_ne_bytes());
            buf.extend_from_slice(&1u16.to_ne_bytes());
            buf.extend_from_slice(&(next as u32).to_ne_bytes());
            buf.extend_from_slice(payload);
            at = buf.len();
        }
        buf
    }

    #[test]
    fn iova_ranges_come_from_the_capability_chain() {
        let mut ranges = Vec::new();
        ranges.extend_from_slice(&2u32.to_ne_bytes());
        ranges.extend_from_slice(&0u32.to_ne_bytes());
        for v in [0u64, 0xfedf_ffff, 0xfef0_0000, (1 << 48) - 1] {
            ranges.extend_from_slice(&v.to_ne_bytes());
        }
        // A migration capability (id 2) first, then the ranges.
        let info = info_with(&[(2, vec![0; 24]), (1, ranges)]);
        assert_eq!(
            parse_iova_ranges(&info),
            Some(vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 48) - 1)])
        );
        // No capability flag, no chain, or a truncated one: no ranges, no panic.
        let mut no_caps = info.clone();
        no_caps[4..8].fill(0);
        assert_eq!(parse_iova_ranges(&no_caps), None);
        assert_eq!(parse_iova_ranges(&info_with(&[(2, vec![0; 24])])), None);
        assert_eq!(parse_iova_ranges(&info[..info.len() - 4]), None);
        // A chain pointing at itself ends.
        let mut looped = info_with(&[(2, vec![0; 8])]);
        let first = size_of::<vfio_iommu_type1_info>();
        looped[first + 4..first + 8].copy_from_slice(&(first as u32).to_ne_bytes());
        assert_eq!(parse_iova_ranges(&looped), None);
    }

    /// A fake /sys/bus/pci with one function, removed on drop.
    struct FakeBus {
        root: PathBuf,
    }

    impl FakeBus {
        fn new(name: &str) -> Self {
            let root =
                std::env::temp_dir().join(format!("rnic-vfio-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("devices/0000:00:03.0")).unwrap();
            std::fs::create_dir_all(root.join("drivers")).unwrap();
            let dev = root.join("devices/0000:00:03.0");
            std::fs::write(
                dev.join("vendor"),
                format!("{:#06x}\n", rnic_abi::pci::VENDOR_ID),
            )
            .unwrap();
            std::fs::write(dev.join("driver_override"), "").unwrap();
            std::fs::write(root.join("drivers_probe"), "").unwrap();
            Self { root }
        }

        fn dev(&self) -> PathBuf {
            self.root.join("devices/0000:00:03.0")
        }

        /// Makes `driver` a loaded driver, and the function bound to it if `bound`.
        fn driver(&self, driver: &str, bound: bool) {
            let dir = self.root.join("drivers").join(driver);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("unbind"), "").unwrap();
            if bound {
                let _ = std::fs::remove_file(self.dev().join("driver"));
                std::os::unix::fs::symlink(&dir, self.dev().join("driver")).unwrap();
            }
        }
    }

    impl Drop for FakeBus {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn the_iommu_group_is_read_from_sysfs() {
        let bus = FakeBus::new("group");
        assert_eq!(iommu_group(&bus.dev()), None, "no IOMMU, no group");
        // Without a group, opening through VFIO says what is missing.
        let err = open_in(&bus.root, "00:03.0").unwrap_err().to_string();
        assert!(err.contains("no IOMMU group"), "{err}");
        std::os::unix::fs::symlink(
            "../../../kernel/iommu_groups/7",
            bus.dev().join("iommu_group"),
        )
        .unwrap();
        assert_eq!(iommu_group(&bus.dev()), Some(7));
        // With one, the next step is binding, which needs the vfio-pci driver.
        let err = open_in(&bus.root, "00:03.0").unwrap_err().to_string();
        assert!(err.contains("modprobe vfio-pci"), "{err}");
    }

    #[test]
    fn binding_follows_the_driver_override_protocol() {
        let bus = FakeBus::new("bind");
        let bdf = "0000:00:03.0";
        // vfio-pci not loaded: the error names the module.
        let err = bind_vfio_pci(&bus.root, bdf, &bus.dev())
            .unwrap_err()
            .to_string();
        assert!(err.contains("modprobe vfio-pci"), "{err}");

        // Loaded: driver_override and drivers_probe are written. The fake kernel binds
        // nothing, so the result is an error saying so.
        bus.driver(VFIO_PCI, false);
        let err = bind_vfio_pci(&bus.root, bdf, &bus.dev())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bind the function to vfio-pci") && err.contains("no driver"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(bus.dev().join("driver_override")).unwrap(),
            VFIO_PCI
        );
        assert_eq!(
            std::fs::read_to_string(bus.root.join("drivers_probe")).unwrap(),
            bdf
        );

        // Already bound: nothing to do.
        bus.driver(VFIO_PCI, true);
        bind_vfio_pci(&bus.root, bdf, &bus.dev()).unwrap();

        // Another driver holds it: left alone, with the unbind command.
        bus.driver("mlx5_core", true);
        let err = bind_vfio_pci(&bus.root, bdf, &bus.dev())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mlx5_core") && err.contains("driver/unbind"),
            "{err}"
        );

        // pci-stub is unbound first.
        bus.driver(sysfs::HARMLESS_DRIVER, true);
        let _ = bind_vfio_pci(&bus.root, bdf, &bus.dev());
        assert_eq!(
            std::fs::read_to_string(
                bus.root
                    .join("drivers")
                    .join(sysfs::HARMLESS_DRIVER)
                    .join("unbind")
            )
            .unwrap(),
            bdf
        );
    }
}
