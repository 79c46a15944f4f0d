//! rnicd's device in this process, driven one engine pass at a time by its caller: the
//! deterministic device of the fuzz targets (`fuzz/`) and of the labs (`labs/`).
//!
//! [`bench::Bench`] builds what rnicd's `Device::start` builds (functions, switch, engine),
//! without sockets or threads; [`transport::InProcess`] is the guest driver's
//! [`Transport`](rnic_driver::transport::Transport) for one of its functions, reaching it
//! the way a VMM does (region accesses, `DMA_MAP` of memfd guest RAM, the doorbell BAR's
//! memfd, eventfd interrupts). Nothing runs unless the caller steps the engine, so the same
//! calls always give the same result.

pub mod bench;
pub mod transport;
