//! A userspace driver for rnic, the emulated RDMA NIC.
//!
//! One driver for two worlds: inside a VM it reaches the PCI function through sysfs
//! ([`transport::sysfs`]); on the host it speaks vfio-user to rnicd itself and plays the
//! VMM ([`transport::vfio_user`]). Everything above the [`transport::Transport`] trait is
//! shared: [`device::Device`] opens and resets a function and runs its command queue
//! ([`cmdq`]).

pub mod admin;
pub mod cmdq;
pub mod device;
mod dma_pagemap;
pub mod error;
pub mod features;
pub mod ibv_compat;
pub mod info;
pub mod perf;
pub mod pingpong;
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
    /// A vfio-user socket on the host.
    VfioUser(std::path::PathBuf),
    /// A PCI function in this (virtual) machine.
    Pci(String),
}

impl Location {
    /// Opens the function.
    pub fn open(&self) -> Result<Device> {
        let transport: Box<dyn transport::Transport> = match self {
            Location::VfioUser(path) => Box::new(VfioUserTransport::connect(Path::new(path))?),
            Location::Pci(bdf) => Box::new(SysfsTransport::open(bdf)?),
        };
        Device::open(transport)
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
