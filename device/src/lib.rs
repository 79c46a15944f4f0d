//! rnicd: an RDMA NIC that exists only in software, served to VMMs over vfio-user.
//!
//! The crate is laid out as the hardware is, and its modules use each other one way only:
//! no two of them depend on each other, directly or not (docs/architecture.md walks one
//! RDMA WRITE through them, from the top down):
//! - [`device`]: the PF and its VFs, each on its own socket, and the engine running them;
//! - [`vfio`]: the vfio-user glue that turns protocol messages into function accesses;
//! - [`engine`]: the threads that find and do the functions' work, and send on what
//!   they sent;
//! - [`admin`] and [`migrate`]: the PF's admin commands, which act on any function;
//! - [`function`]: one PCI function and what accesses to its BARs do, built from
//!   [`pci`], [`msix`], [`doorbell`], [`dma`] and [`cmdq`], with [`commands`] behind the
//!   queue;
//! - [`rdma`]: the RDMA engine of a function: its objects, verbs and transport;
//! - [`net`]: the uplinks that carry frames to other hosts;
//! - [`fabric`]: frames between the functions, the switch, and where a frame goes;
//! - [`roce`]: the RoCEv2 wire format;
//! - [`identity`], [`resources`], [`pcap`]: what a function is, the pools it draws from,
//!   packet captures;
//! - [`notify`]: rnicd's readiness signal (systemd's `NOTIFY_SOCKET`, `--ready-fd`).

pub mod admin;
pub mod cmdq;
pub mod commands;
pub mod control;
pub mod device;
pub mod dma;
pub mod doorbell;
pub mod engine;
pub mod eth;
pub mod fabric;
pub mod function;
pub mod gid_table;
pub mod identity;
pub mod migrate;
pub mod msix;
pub mod net;
pub mod notify;
pub mod pcap;
pub mod pci;
pub mod rdma;
pub mod resources;
pub mod roce;
pub mod vfio;
