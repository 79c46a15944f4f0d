//! rnicd: an RDMA NIC that exists only in software, served to VMMs over vfio-user.
//!
//! The crate is laid out as the hardware is:
//! - [`pci`]: config space, as PCI Express defines it;
//! - [`function`]: one PCI function and what accesses to its BARs do, built from
//!   [`msix`], [`doorbell`], [`dma`] and [`cmdq`], with [`commands`] behind the queue;
//! - [`vfio`]: the vfio-user glue that turns protocol messages into function accesses;
//! - [`engine`]: the event loop that finds and does work;
//! - [`device`]: the PF and its VFs, each on its own socket.

pub mod admin;
pub mod cmdq;
pub mod commands;
pub mod device;
pub mod dma;
pub mod doorbell;
pub mod engine;
pub mod fabric;
pub mod function;
pub mod identity;
pub mod migrate;
pub mod msix;
pub mod net;
pub mod pcap;
pub mod pci;
pub mod rdma;
pub mod resources;
pub mod roce;
pub mod vfio;
