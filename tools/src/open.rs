//! How the tools open the functions their command lines name: a vfio-user socket of
//! rnicd on the host (`--vfio-user`), a PCI function in a VM (`--pci`), or the first rnic
//! function(s) on the VM's PCI bus (README, "On the host, without a VM" and "Attaching to
//! your own QEMU").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rnic_driver::transport::sysfs::SysfsTransport;
use rnic_driver::transport::vfio_user::{VfioUserOptions, VfioUserTransport, DEFAULT_MEMORY};
use rnic_driver::transport::{DmaBuffer, Transport};
use rnic_driver::verbs::Context;
use rnic_driver::Device;

use crate::error::{drv, fail, Result, ToolError};

/// Which function to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// A vfio-user socket of rnicd (host).
    VfioUser(PathBuf),
    /// A PCI function (in a VM).
    Pci(String),
    /// The first rnic function on the PCI bus.
    FirstPci,
}

/// Opens PCI function `bdf` (through VFIO behind an IOMMU, else sysfs).
pub fn pci(bdf: &str) -> Result<Box<dyn Transport>> {
    rnic_driver::transport::open_pci(bdf).map_err(drv(&format!(
        "open PCI function {bdf} (as root, with the function bound to no driver, or to vfio-pci behind an IOMMU)"
    )))
}

/// Connects to the vfio-user socket `path`, sharing `memory` bytes of DMA memory.
pub fn vfio_user(path: &Path, memory: usize) -> Result<VfioUserTransport> {
    let options = VfioUserOptions {
        memory,
        ..VfioUserOptions::default()
    };
    VfioUserTransport::connect_with(path, &options)
        .map_err(drv(&format!("open vfio-user function {}", path.display())))
}

/// Connects to the vfio-user socket `path` as a second function of `first`'s "guest": it
/// maps `first`'s memory, as two VFs of one VM share theirs.
pub fn vfio_user_sharing(path: &Path, first: &VfioUserTransport) -> Result<VfioUserTransport> {
    VfioUserTransport::connect_sharing(path, first)
        .map_err(drv(&format!("open vfio-user function {}", path.display())))
}

/// Opens the function `choice` names and allocates `buf_len` bytes of DMA memory for the
/// tool's buffer first, so that on a fresh vfio-user function its address is the first
/// page of guest memory every time. With `follow`, also opens that second function of
/// the same guest (on the host: sharing the first's memory), where a QP may migrate.
pub fn open(
    choice: &DeviceChoice,
    follow: Option<&DeviceChoice>,
    buf_len: usize,
) -> Result<(Device, Option<Device>, Arc<DmaBuffer>)> {
    let mut spare: Option<Box<dyn Transport>> = None;
    let transport: Box<dyn Transport> = match choice {
        DeviceChoice::VfioUser(path) => {
            let first = vfio_user(path, DEFAULT_MEMORY.max(buf_len + (16 << 20)))?;
            match follow {
                None => {}
                Some(DeviceChoice::VfioUser(second)) => {
                    spare = Some(Box::new(vfio_user_sharing(second, &first)?));
                }
                Some(_) => {
                    return fail("--follow-vfio-user goes with --vfio-user (both on the host)")
                }
            }
            Box::new(first)
        }
        DeviceChoice::Pci(bdf) => pci(bdf)?,
        DeviceChoice::FirstPci => {
            let all = SysfsTransport::find_all().map_err(|e| {
                ToolError(format!(
                    "look for rnic functions on the PCI bus: {e}; on the host use --vfio-user PATH (a socket of rnicd)"
                ))
            })?;
            let Some(bdf) = all.first() else {
                return fail(
                    "no rnic function found on this machine's PCI bus: on the host use --vfio-user PATH (a socket of rnicd); in a VM attach an rnic function or name it with --pci BDF",
                );
            };
            pci(bdf)?
        }
    };
    if spare.is_none() {
        match follow {
            Some(DeviceChoice::Pci(bdf)) if !matches!(choice, DeviceChoice::VfioUser(_)) => {
                // In a VM every function reaches all of guest memory at its physical
                // addresses, or (behind an IOMMU) everything this process's VFIO
                // container maps, so the second function needs nothing shared explicitly.
                spare = Some(pci(bdf)?);
            }
            Some(_) => return fail("--follow-pci goes with a PCI function (in a VM)"),
            None => {}
        }
    }
    let buf = transport
        .alloc_dma(buf_len)
        .map_err(drv("allocate the DMA buffer (try a smaller --size)"))?;
    let device = Device::open(transport).map_err(drv("open the function"))?;
    let spare = spare
        .map(|t| Device::open(t).map_err(drv("open the function to follow the QP to")))
        .transpose()?;
    Ok((device, spare, Arc::new(buf)))
}

/// [`open`], and the functions opened for RDMA verbs.
pub fn open_verbs(
    choice: &DeviceChoice,
    follow: Option<&DeviceChoice>,
    buf_len: usize,
) -> Result<(Context, Option<Context>, Arc<DmaBuffer>)> {
    let (device, spare, buf) = open(choice, follow, buf_len)?;
    let ctx = Context::new(device).map_err(drv("open the function for RDMA verbs"))?;
    let spare = spare
        .map(|d| Context::new(d).map_err(drv("open the function to follow to for RDMA verbs")))
        .transpose()?;
    Ok((ctx, spare, buf))
}
