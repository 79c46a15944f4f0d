//! The rnic tools' logic, on the driver library's public API (`rnic_driver`); the five
//! binaries in `src/bin` parse their command lines and call in here. README says what
//! each tool does ("The two commands", "Benchmarks", "Administering the device") and
//! docs/hardware-interface.md what they drive.

pub mod admin;
pub mod cli;
pub mod control;
pub mod error;
pub mod features;
pub mod ibv_compat;
pub mod info;
pub mod open;
pub mod perf;
pub mod pingpong;
pub mod rc;
pub mod rendezvous;
