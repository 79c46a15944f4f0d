//! The transport inside a Linux VM: the rnic function is a plain PCI device with no
//! kernel driver bound, reached through its files under `/sys/bus/pci/devices/<BDF>`.
//!
//! Config space goes through the `config` file, the BARs are mmapped from the
//! `resource<N>` files, and DMA memory is pinned anonymous memory whose guest-physical
//! addresses come from `/proc/self/pagemap` (see the `dma_pagemap` module); that only works
//! because the VM has no IOMMU, so the device sees guest-physical addresses. All of it
//! needs root. Interrupts cannot reach userspace without a kernel driver, so the driver
//! polls.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rnic_abi::pci::{self, cfg};

use super::user_memory::UserPages;
use super::{check_config, check_reg, DmaBuffer, MappedBar, Mapping, Transport};
use crate::dma_pagemap::{user_pins, PagemapAllocator, PinnedPages};
use crate::error::{Error, Result};

/// Where the kernel lists PCI functions.
pub(crate) const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// A function's `driver` link may name this one and still leave the device to us:
/// pci-stub only claims a device to keep other drivers off it.
pub(crate) const HARMLESS_DRIVER: &str = "pci-stub";

/// An rnic function inside a VM, driven from userspace through PCI sysfs.
#[derive(Debug)]
pub struct SysfsTransport {
    bdf: String,
    dev: PathBuf,
    config: File,
    regs: Mapping,
    doorbells: Mapping,
    dma: PagemapAllocator,
    /// Application memory pinned for registrations ([`Transport::map_user_memory`]).
    user: Arc<UserPages<PinnedPages>>,
}

impl SysfsTransport {
    /// The PCI addresses (`0000:00:03.0`) of every rnic function in the system, sorted.
    pub fn find_all() -> Result<Vec<String>> {
        find_all_in(Path::new(SYSFS_PCI_DEVICES))
    }

    /// Opens the rnic function at PCI address `bdf` (`0000:00:03.0`; the domain may be
    /// left out). Enables it, turns on memory decoding and bus mastering, and maps its
    /// register and doorbell BARs. This works only where the device reaches
    /// guest-physical addresses, i.e. in a VM without an IOMMU; [`super::open_pci`]
    /// picks VFIO instead where there is one.
    pub fn open(bdf: &str) -> Result<Self> {
        open_in(Path::new(SYSFS_PCI_DEVICES), bdf)
    }

    /// Opens the first rnic function of [`SysfsTransport::find_all`].
    pub fn open_first() -> Result<Self> {
        open_first_in(Path::new(SYSFS_PCI_DEVICES))
    }

    /// The function's PCI address.
    pub fn bdf(&self) -> &str {
        &self.bdf
    }
}

impl Transport for SysfsTransport {
    fn describe(&self) -> String {
        format!("pci:{}", self.bdf)
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        check_config(&self.bdf, offset, buf.len())?;
        self.config
            .read_exact_at(buf, u64::from(offset))
            .map_err(|e| config_error(&self.bdf, "read", offset, buf.len(), e))
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        check_config(&self.bdf, offset, data.len())?;
        self.config
            .write_all_at(data, u64::from(offset))
            .map_err(|e| config_error(&self.bdf, "write", offset, data.len(), e))
    }

    fn reg_read32(&self, offset: u64) -> Result<u32> {
        check_reg(&self.bdf, self.regs.len(), offset)?;
        Ok(self.regs.bar().read32(offset))
    }

    fn reg_write32(&self, offset: u64, value: u32) -> Result<()> {
        check_reg(&self.bdf, self.regs.len(), offset)?;
        self.regs.bar().write32(offset, value);
        Ok(())
    }

    fn doorbells(&self) -> &MappedBar {
        self.doorbells.bar()
    }

    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.dma.alloc(size)
    }

    /// Without an IOMMU the device reaches guest-physical addresses: the pages are
    /// locked and translated (`PagemapAllocator::map_user`).
    fn map_user_memory(&self, addr: usize, len: usize, writable: bool) -> Result<DmaBuffer> {
        self.dma.map_user(&self.user, addr, len, writable)
    }

    fn enable_interrupts(&self, _count: u16) -> Result<bool> {
        // MSI-X messages land in the guest kernel's interrupt controller, and without a
        // kernel driver nothing forwards them to this process: the driver polls instead.
        Ok(false)
    }

    fn wait_interrupt(&self, _vector: u16, _timeout: Duration) -> Result<bool> {
        Err(Error::Unsupported(
            "interrupts in a VM without a kernel driver (poll the completion rings instead)",
        ))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn kind(&self) -> String {
        "sysfs (no IOMMU: guest-physical addresses from the page map)".into()
    }

    fn function_reset(&self) -> Result<()> {
        let path = self.dev.join("reset");
        if !path.exists() {
            return Err(Error::Unsupported(
                "function reset: the kernel offers no reset method for this function (no `reset` file in sysfs)",
            ));
        }
        // The kernel saves and restores the config space around the reset, so memory
        // decoding and bus mastering stay on.
        write_sysfs(&path, "1").map_err(|e| {
            let hint = if is_permission(&e) {
                " (run as root)"
            } else {
                ""
            };
            Error::Io(
                format!("reset {} through {}{hint}", self.bdf, path.display()),
                e,
            )
        })
    }
}

/// [`SysfsTransport::find_all`] under `root`.
fn find_all_in(root: &Path) -> Result<Vec<String>> {
    let entries = fs::read_dir(root).map_err(|e| {
        Error::Io(
            format!(
                "list {} (is sysfs mounted? mount -t sysfs sysfs /sys)",
                root.display()
            ),
            e,
        )
    })?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::Io(format!("list {}", root.display()), e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // Functions whose vendor cannot be read are not ours to judge: skip, don't fail.
        if read_hex_u16(&entry.path().join("vendor")).ok() == Some(pci::VENDOR_ID) {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

/// [`SysfsTransport::open_first`] under `root`.
fn open_first_in(root: &Path) -> Result<SysfsTransport> {
    let all = find_all_in(root)?;
    let Some(first) = all.first() else {
        return Err(Error::NotFound(format!(
            "no PCI function with vendor ID {:#06x} under {} (was the VM started with the rnic vfio-user device?)",
            pci::VENDOR_ID,
            root.display()
        )));
    };
    open_in(root, first)
}

/// [`SysfsTransport::open`] under `root`.
fn open_in(root: &Path, bdf: &str) -> Result<SysfsTransport> {
    let (bdf, dev) = locate(root, bdf)?;
    check_vendor(&bdf, &dev)?;
    check_no_driver(&bdf, &dev)?;
    enable(&bdf, &dev)?;

    let config = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev.join("config"))
        .map_err(|e| open_error(&bdf, &dev.join("config"), e))?;
    enable_decoding(&bdf, &config)?;

    let regs = map_bar(&bdf, &dev, pci::REG_BAR)?;
    let doorbells = map_bar(&bdf, &dev, pci::DOORBELL_BAR)?;
    check_bar_sizes(&bdf, regs.len(), doorbells.len())?;
    let dma = PagemapAllocator::new()?;

    log::info!(
        "opened rnic function {bdf}: BAR{} {:#x} bytes, BAR{} {:#x} bytes",
        pci::REG_BAR,
        regs.len(),
        pci::DOORBELL_BAR,
        doorbells.len()
    );
    Ok(SysfsTransport {
        regs,
        doorbells,
        bdf,
        dev,
        config,
        dma,
        user: user_pins(),
    })
}

/// Refuses a function whose vendor ID is not rnic's.
pub(crate) fn check_vendor(bdf: &str, dev: &Path) -> Result<()> {
    let vendor = read_hex_u16(&dev.join("vendor"))
        .map_err(|e| Error::Io(format!("read the vendor ID of {bdf}"), e))?;
    if vendor != pci::VENDOR_ID {
        return Err(Error::NotFound(format!(
            "{bdf} has vendor ID {vendor:#06x}, not rnic's {:#06x}: is this an rnic function?",
            pci::VENDOR_ID
        )));
    }
    Ok(())
}

/// Refuses BARs too small for rnic's registers (BAR0) or one doorbell page (BAR2).
pub(crate) fn check_bar_sizes(bdf: &str, regs: usize, doorbells: usize) -> Result<()> {
    if (regs as u64) < pci::REG_BAR_SIZE {
        return Err(Error::Device(format!(
            "BAR{} of {bdf} is {regs:#x} bytes, rnic's is {:#x}: is this an rnic function?",
            pci::REG_BAR,
            pci::REG_BAR_SIZE
        )));
    }
    if (doorbells as u64) < rnic_abi::PAGE_SIZE {
        return Err(Error::Device(format!(
            "BAR{} of {bdf} is {doorbells:#x} bytes, less than one doorbell page: is this an rnic function?",
            pci::DOORBELL_BAR,
        )));
    }
    Ok(())
}

/// Finds the sysfs directory of `bdf`, accepting addresses without the PCI domain as
/// `lspci` prints them (`00:03.0`). Returns the full address and the directory.
pub(crate) fn locate(root: &Path, bdf: &str) -> Result<(String, PathBuf)> {
    // The name becomes a path component: refuse anything that could leave `root`.
    let bdf = bdf.trim();
    if bdf.is_empty() || bdf.contains('/') || bdf == "." || bdf == ".." {
        return Err(Error::NotFound(format!(
            "`{bdf}` is not a PCI address such as 0000:00:03.0"
        )));
    }
    let mut candidates = vec![bdf.to_string()];
    if bdf.matches(':').count() == 1 {
        candidates.push(format!("0000:{bdf}"));
    }
    for name in candidates {
        let dev = root.join(&name);
        if dev.is_dir() {
            return Ok((name, dev));
        }
    }
    Err(Error::NotFound(format!(
        "no PCI function {bdf} under {} (list the rnic functions with `rnic-info`, or look for vendor {:#06x} in lspci)",
        root.display(),
        pci::VENDOR_ID
    )))
}

/// The name of the kernel driver bound to the function at `dev`, if any.
pub(crate) fn bound_driver(dev: &Path) -> Option<String> {
    let target = fs::read_link(dev.join("driver")).ok()?;
    Some(
        target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}

/// Refuses a function a kernel driver owns: both would program the same device.
fn check_no_driver(bdf: &str, dev: &Path) -> Result<()> {
    let Some(driver) = bound_driver(dev) else {
        return Ok(());
    };
    if driver == HARMLESS_DRIVER {
        return Ok(());
    }
    let hint = if driver == super::vfio::VFIO_PCI {
        " (or open it through VFIO, as rnic's tools do by themselves when the function has an IOMMU group)"
    } else {
        ""
    };
    Err(Error::Io(
        format!(
            "kernel driver `{driver}` is bound to {bdf}: unbind it first (echo {bdf} > {}/driver/unbind){hint}",
            dev.display()
        ),
        io::Error::from(ErrorKind::ResourceBusy),
    ))
}

/// Enables the function (power state, resources) through its `enable` file.
fn enable(bdf: &str, dev: &Path) -> Result<()> {
    let path = dev.join("enable");
    // The file shows a count of enables, and every write of "1" adds one that only as
    // many writes of "0" undo: don't add one on every open.
    let enabled = || {
        fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .is_some_and(|count| count > 0)
    };
    if enabled() {
        return Ok(());
    }
    match write_sysfs(&path, "1") {
        Ok(()) => Ok(()),
        // Another process may have enabled it between our read and write.
        Err(e) if enabled() => {
            log::debug!("enabling {bdf} failed ({e}), but it is enabled now");
            Ok(())
        }
        Err(e) => {
            let hint = if is_permission(&e) {
                " (run as root)"
            } else if e.raw_os_error() == Some(libc::EBUSY) {
                " (is a kernel driver bound? unbind it)"
            } else {
                ""
            };
            Err(Error::Io(
                format!("enable {bdf} through {}{hint}", path.display()),
                e,
            ))
        }
    }
}

/// Sets Memory Space Enable and Bus Master Enable in the command register.
fn enable_decoding(bdf: &str, config: &File) -> Result<()> {
    let offset = cfg::COMMAND as u64;
    let mut raw = [0u8; 2];
    config
        .read_exact_at(&mut raw, offset)
        .map_err(|e| config_error(bdf, "read", cfg::COMMAND as u16, 2, e))?;
    let command = u16::from_le_bytes(raw);
    let wanted = command | cfg::COMMAND_MEMORY | cfg::COMMAND_BUS_MASTER;
    if wanted != command {
        // Two bytes at an aligned offset: the kernel turns this into one 16-bit config
        // write, so the neighbouring status register is untouched.
        config
            .write_all_at(&wanted.to_le_bytes(), offset)
            .map_err(|e| config_error(bdf, "write", cfg::COMMAND as u16, 2, e))?;
        log::debug!("{bdf}: command register {command:#06x} -> {wanted:#06x}");
    }
    Ok(())
}

/// Maps BAR `index` of the function at `dev` whole, from its `resource<N>` file.
fn map_bar(bdf: &str, dev: &Path, index: u8) -> Result<Mapping> {
    let path = dev.join(format!("resource{index}"));
    // O_SYNC makes the kernel map the BAR uncached, as device memory must be.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_SYNC)
        .open(&path)
        .map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                Error::Io(
                    format!(
                        "{bdf} has no BAR{index} ({} is missing): is this an rnic function?",
                        path.display()
                    ),
                    e,
                )
            } else {
                open_error(bdf, &path, e)
            }
        })?;
    let size = bar_size(dev, index, &file)
        .map_err(|e| Error::Io(format!("find the size of BAR{index} of {bdf}"), e))?;
    let len = usize::try_from(size).ok().filter(|&len| len > 0).ok_or_else(|| {
        Error::Device(format!(
            "BAR{index} of {bdf} has no usable size ({size:#x}): is this an rnic function, and did the guest firmware assign its BARs?"
        ))
    })?;
    // The mapping stays valid after the file is closed, so `file` may go now.
    Mapping::new(
        file.as_raw_fd(),
        len,
        0,
        &format!(
            "{} ({len:#x} bytes; is a kernel driver bound? unbind it. A kernel in lockdown mode also refuses this)",
            path.display()
        ),
    )
}

/// The size of BAR `index`: the length of its `resource<N>` file, or failing that its
/// line in the `resource` file (`start end flags`, in hex).
fn bar_size(dev: &Path, index: u8, file: &File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    if len != 0 {
        return Ok(len);
    }
    let table = fs::read_to_string(dev.join("resource"))?;
    let Some(line) = table.lines().nth(usize::from(index)) else {
        return Ok(0);
    };
    let mut fields = line.split_whitespace().map(parse_hex);
    match (fields.next(), fields.next()) {
        (Some(Some(start)), Some(Some(end))) if end > start => Ok(end - start + 1),
        _ => Ok(0),
    }
}

/// Reads a sysfs attribute holding one hex number (`0xf1c0`).
pub(crate) fn read_hex_u16(path: &Path) -> io::Result<u16> {
    let text = fs::read_to_string(path)?;
    parse_hex(text.trim())
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| {
            io::Error::new(
                ErrorKind::InvalidData,
                format!(
                    "{} holds `{}`, not a 16-bit hex number",
                    path.display(),
                    text.trim()
                ),
            )
        })
}

fn parse_hex(text: &str) -> Option<u64> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))?;
    u64::from_str_radix(digits, 16).ok()
}

/// Writes `value` to an existing sysfs attribute (never creates a file).
pub(crate) fn write_sysfs(path: &Path, value: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all_at(value.as_bytes(), 0)
}

pub(crate) fn is_permission(e: &io::Error) -> bool {
    e.kind() == ErrorKind::PermissionDenied
}

pub(crate) fn open_error(bdf: &str, path: &Path, e: io::Error) -> Error {
    let hint = if is_permission(&e) {
        " (run as root)"
    } else {
        ""
    };
    Error::Io(format!("open {} of {bdf}{hint}", path.display()), e)
}

fn config_error(bdf: &str, what: &str, offset: u16, len: usize, e: io::Error) -> Error {
    // sysfs serves only the first 64 bytes to non-root readers, and 256 bytes when the
    // machine has no PCIe extended config space; both end a read early.
    let hint = match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::WriteZero => {
            " (ended early: run as root; extended config space needs a PCIe machine such as QEMU's q35)"
        }
        ErrorKind::PermissionDenied => " (run as root)",
        _ => "",
    };
    Error::Io(
        format!("config space {what} of {len} bytes at {offset:#x} of {bdf}{hint}"),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/sys/bus/pci/devices` in a temporary directory, removed on drop.
    struct FakeSysfs {
        root: PathBuf,
    }

    impl FakeSysfs {
        fn new(name: &str) -> Self {
            let root =
                std::env::temp_dir().join(format!("rnic-sysfs-test-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(&root).unwrap();
            Self { root }
        }

        /// Adds a function directory with a `vendor` file; returns its path.
        fn function(&self, bdf: &str, vendor: u16) -> PathBuf {
            let dev = self.root.join(bdf);
            fs::create_dir_all(&dev).unwrap();
            fs::write(dev.join("vendor"), format!("{vendor:#06x}\n")).unwrap();
            dev
        }

        /// Adds an rnic function with `enable` and `config` files but no BARs.
        fn rnic_without_bars(&self, bdf: &str) -> PathBuf {
            let dev = self.function(bdf, pci::VENDOR_ID);
            fs::write(dev.join("enable"), "0\n").unwrap();
            let mut config = vec![0u8; pci::CONFIG_SPACE_SIZE];
            config[..2].copy_from_slice(&pci::VENDOR_ID.to_le_bytes());
            // The status register next to the command register must survive.
            config[cfg::STATUS..cfg::STATUS + 2].copy_from_slice(&0x0010u16.to_le_bytes());
            fs::write(dev.join("config"), config).unwrap();
            dev
        }

        /// Adds an rnic function whose BARs are plain files, which mmap like BARs do.
        fn rnic(&self, bdf: &str) -> PathBuf {
            let dev = self.rnic_without_bars(bdf);
            let resource0 = File::create(dev.join("resource0")).unwrap();
            resource0.set_len(pci::REG_BAR_SIZE).unwrap();
            resource0
                .write_all_at(&0x1234_5678u32.to_le_bytes(), rnic_abi::regs::ABI_VERSION)
                .unwrap();
            File::create(dev.join("resource2"))
                .unwrap()
                .set_len(rnic_abi::doorbell::BAR_SIZE)
                .unwrap();
            dev
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    fn open_err(root: &Path, bdf: &str) -> String {
        match open_in(root, bdf) {
            Ok(_) => panic!("opening {bdf} should have failed"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn find_all_lists_only_rnic_functions_sorted() {
        let sysfs = FakeSysfs::new("find-all");
        sysfs.function("0000:00:05.0", pci::VENDOR_ID);
        sysfs.function("0000:00:01.0", 0x8086);
        sysfs.function("0000:00:03.0", pci::VENDOR_ID);
        sysfs.function("0000:00:04.0", 0x1af4);
        // Unreadable or malformed vendor files are skipped, not fatal.
        fs::create_dir_all(sysfs.root.join("0000:00:06.0")).unwrap();
        let odd = sysfs.root.join("0000:00:07.0");
        fs::create_dir_all(&odd).unwrap();
        fs::write(odd.join("vendor"), "rnic\n").unwrap();
        // A stray file in the listing is no function.
        fs::write(sysfs.root.join("not-a-function"), "").unwrap();

        assert_eq!(
            find_all_in(&sysfs.root).unwrap(),
            vec!["0000:00:03.0".to_string(), "0000:00:05.0".to_string()]
        );
    }

    #[test]
    fn find_all_without_sysfs_names_the_fix() {
        let err = find_all_in(Path::new("/nonexistent/rnic/sysfs")).unwrap_err();
        assert!(err.to_string().contains("mount -t sysfs"), "{err}");
    }

    #[test]
    fn open_first_without_devices_is_not_found() {
        let sysfs = FakeSysfs::new("none");
        sysfs.function("0000:00:01.0", 0x8086);
        assert!(matches!(
            open_first_in(&sysfs.root),
            Err(Error::NotFound(_))
        ));
    }

    #[test]
    fn open_without_resource_files_is_a_clear_error() {
        let sysfs = FakeSysfs::new("no-bars");
        let dev = sysfs.rnic_without_bars("0000:00:03.0");
        let err = open_err(&sysfs.root, "0000:00:03.0");
        assert!(
            err.contains("resource0") && err.contains("is this an rnic function?"),
            "{err}"
        );

        // The steps before the BARs did their work on the fake files.
        assert_eq!(fs::read_to_string(dev.join("enable")).unwrap().trim(), "1");
        let config = fs::read(dev.join("config")).unwrap();
        let command = u16::from_le_bytes([config[cfg::COMMAND], config[cfg::COMMAND + 1]]);
        assert_eq!(command, cfg::COMMAND_MEMORY | cfg::COMMAND_BUS_MASTER);
        assert_eq!(
            &config[cfg::STATUS..cfg::STATUS + 2],
            &0x0010u16.to_le_bytes()
        );
    }

    #[test]
    fn open_refuses_bad_names_foreign_devices_and_bound_drivers() {
        let sysfs = FakeSysfs::new("refuse");
        sysfs.function("0000:00:01.0", 0x8086);
        let bound = sysfs.rnic("0000:00:02.0");
        let driver = sysfs.root.join("drivers/mlx5_core");
        fs::create_dir_all(&driver).unwrap();
        std::os::unix::fs::symlink(&driver, bound.join("driver")).unwrap();

        for bad in ["", "..", "../../etc", "0000:00:09.0"] {
            assert!(
                matches!(open_in(&sysfs.root, bad), Err(Error::NotFound(_))),
                "{bad:?}"
            );
        }
        assert!(open_err(&sysfs.root, "0000:00:01.0").contains("is this an rnic function?"));
        let err = open_err(&sysfs.root, "0000:00:02.0");
        assert!(err.contains("mlx5_core") && err.contains("unbind"), "{err}");
    }

    #[test]
    fn open_maps_bars_and_checks_bounds() {
        let sysfs = FakeSysfs::new("open");
        let dev = sysfs.rnic("0000:00:03.0");
        // The domain may be left out, as lspci prints addresses.
        let t = open_in(&sysfs.root, "00:03.0").unwrap();
        assert_eq!(t.describe(), "pci:0000:00:03.0");
        assert_eq!(t.bdf(), "0000:00:03.0");

        assert_eq!(
            t.reg_read32(rnic_abi::regs::ABI_VERSION).unwrap(),
            0x1234_5678
        );
        t.reg_write32(rnic_abi::regs::DEVICE_CONTROL, 0xdead_beef)
            .unwrap();
        assert_eq!(
            t.reg_read32(rnic_abi::regs::DEVICE_CONTROL).unwrap(),
            0xdead_beef
        );
        for bad in [2, pci::REG_BAR_SIZE, pci::REG_BAR_SIZE - 2, u64::MAX - 1] {
            assert!(t.reg_read32(bad).is_err(), "{bad:#x}");
            assert!(t.reg_write32(bad, 0).is_err(), "{bad:#x}");
        }
        assert_eq!(t.doorbells().len() as u64, rnic_abi::doorbell::BAR_SIZE);

        let mut vendor = [0u8; 2];
        t.config_read(cfg::VENDOR_ID as u16, &mut vendor).unwrap();
        assert_eq!(u16::from_le_bytes(vendor), pci::VENDOR_ID);
        t.config_write(0x100, &[1, 2, 3, 4]).unwrap();
        let mut back = [0u8; 4];
        t.config_read(0x100, &mut back).unwrap();
        assert_eq!(back, [1, 2, 3, 4]);
        assert!(t.config_read(0xffe, &mut back).is_err());
        assert!(t.config_write(u16::MAX, &[0]).is_err());

        assert!(!t.enable_interrupts(4).unwrap());
        assert!(matches!(
            t.wait_interrupt(0, Duration::from_millis(1)),
            Err(Error::Unsupported(_))
        ));
        assert!(matches!(t.function_reset(), Err(Error::Unsupported(_))));
        fs::write(dev.join("reset"), "0").unwrap();
        t.function_reset().unwrap();
        assert_eq!(fs::read_to_string(dev.join("reset")).unwrap(), "1");

        let buf = t.alloc_dma(100).unwrap();
        assert_eq!(buf.len(), rnic_abi::PAGE_SIZE as usize);
        assert_ne!(buf.pages()[0], 0);
    }

    #[test]
    fn enable_does_not_stack_enables() {
        let sysfs = FakeSysfs::new("enabled");
        let dev = sysfs.rnic_without_bars("0000:00:03.0");
        // Already enabled twice by someone else: the count must stay as it is.
        fs::write(dev.join("enable"), "2\n").unwrap();
        enable("0000:00:03.0", &dev).unwrap();
        assert_eq!(fs::read_to_string(dev.join("enable")).unwrap(), "2\n");
    }

    #[test]
    fn bar_size_falls_back_to_the_resource_table() {
        let sysfs = FakeSysfs::new("size");
        let dev = sysfs.rnic_without_bars("0000:00:03.0");
        let empty = File::create(dev.join("resource0")).unwrap();
        fs::write(
            dev.join("resource"),
            "0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
             0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
             0x00000000fe000000 0x00000000fe00ffff 0x000000000014220c\n",
        )
        .unwrap();
        assert_eq!(bar_size(&dev, 2, &empty).unwrap(), 0x10000);
        assert_eq!(bar_size(&dev, 0, &empty).unwrap(), 0);
        assert_eq!(bar_size(&dev, 5, &empty).unwrap(), 0);

        // An unassigned BAR0 is refused with a reason, not mapped with length 0.
        let err = open_err(&sysfs.root, "0000:00:03.0");
        assert!(err.contains("no usable size"), "{err}");
    }
}
