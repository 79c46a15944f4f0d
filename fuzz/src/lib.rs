//! Coverage-guided fuzzing of rnicd (`cargo fuzz`, see fuzz/README.md).
//!
//! Every target drives the device's own code in one thread, through the same entry
//! points rnicd's threads use: region accesses and `DMA_MAP` of memfd guest RAM for the
//! vfio-user side, the doorbell BAR's memfd for the driver's stores, the engine's passes
//! ([`rnic_device::engine::Engine::step`]) for the work, and the switch or the Ethernet
//! port for frames. The set-up is the real guest driver (`rnic_driver`) over an
//! in-process transport ([`transport`]); both come from
//! `rnic-harness`, the workspace's deterministic device, re-exported here.

pub mod eth;
pub mod input;
pub mod ops;
pub mod rings;
pub mod seeds;
pub mod vfio;
pub mod vfio_socket;
pub mod world;

pub use rnic_harness::{bench, transport};
