//! A userspace driver for rnic, the emulated RDMA NIC.
//!
//! This crate is the driver and nothing else: transports, the command queue, the device,
//! the verbs, the PF's admin commands and the errors. The tools built on it (`rnic-info`,
//! `rnic-pingpong`, `rnic-perf`, `rnic-admin`, `rnic-features`) are the `rnic-tools`
//! crate's (README "Layout").
//!
//! One driver for two worlds: inside a VM it reaches the PCI function through VFIO when
//! the VM has an IOMMU ([`transport::vfio`]) and through sysfs otherwise
//! ([`transport::sysfs`]), choosing by itself ([`transport::open_pci`]); on the host it
//! speaks vfio-user to rnicd itself and plays the VMM ([`transport::vfio_user`]). Everything above the [`transport::Transport`] trait is
//! shared: [`device::Device`] opens and resets a function and runs its command queue
//! ([`cmdq`]).
//!
//! # A function lost under the driver
//!
//! The driver notices when it loses a function, and it does not keep waiting for it:
//!
//! - rnicd closes the socket (it exited or was stopped). The vfio-user transport watches
//!   its socket, so from then on every request and every wait fails at once with
//!   [`Error::DeviceGone`] ([`transport::Transport::check_alive`]).
//! - Someone else resets the function: the PF's `RESET_VF` or VF disable, or its VMM.
//!   The function's `RESET_COUNT` in the doorbell BAR has moved since the driver's own
//!   reset ([`transport::ResetWatch`]), so commands and waits fail with
//!   [`Error::FunctionReset`].
//!
//! Commands and the command queue's completion wait check both of these. So do the verbs
//! layer's waits. A completion loop of one's own can call [`verbs::Context::check_alive`]
//! (or [`verbs::Cq::check_alive`]) in each idle round, as the tools do. After such an
//! error, teardown is quick and quiet: destroy commands fail at once, and the objects
//! count as destroyed ([`Error::function_lost`]).
//!
//! A vfio-user socket that another client holds is waited for. The wait defaults to one
//! second, and each tool's `--wait SECS` changes it (see [`transport::vfio_user`]). If the
//! socket is still held after that, the connection fails with [`Error::Held`].

pub mod admin;
pub mod cmdq;
pub mod device;
pub mod dma_pagemap;
pub mod error;
pub mod eth;
pub mod transport;
pub mod verbs;

pub use device::Device;
pub use error::{Error, Result};

use std::path::Path;

use transport::sysfs::SysfsTransport;
use transport::vfio_user::VfioUserTransport;

/// Where to find a function, as the tools' command lines say it.
#[derive(Debug, Clone)]
pub enum Location {
    /// A vfio-user socket on the host, connected with default options: a socket another
    /// client holds is waited for as long as the process-wide default says
    /// ([`transport::vfio_user::set_default_wait`], the tools' `--wait`).
    VfioUser(std::path::PathBuf),
    /// A PCI function in this (virtual) machine, reached through VFIO if it has an IOMMU
    /// group, else through sysfs ([`transport::open_pci`]).
    Pci(String),
}

impl Location {
    /// Opens the function.
    pub fn open(&self) -> Result<Device> {
        Device::open(self.open_transport()?)
    }

    /// Opens the transport to the function, without opening the function itself.
    pub fn open_transport(&self) -> Result<Box<dyn transport::Transport>> {
        Ok(match self {
            Location::VfioUser(path) => Box::new(VfioUserTransport::connect(Path::new(path))?),
            Location::Pci(bdf) => transport::open_pci(bdf)?,
        })
    }

    /// Every rnic function of this machine's PCI bus.
    pub fn all_pci() -> Result<Vec<Location>> {
        Ok(SysfsTransport::find_all()?
            .into_iter()
            .map(Location::Pci)
            .collect())
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::VfioUser(p) => write!(f, "vfio-user:{}", p.display()),
            Location::Pci(bdf) => write!(f, "pci:{bdf}"),
        }
    }
}
