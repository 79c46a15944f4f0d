//! libibverbs.so.1 for rnic: rdma-core's libibverbs ABI, so that unmodified programs
//! built against Debian's libibverbs (`ibv_devices`, `ibv_devinfo`, and in later phases
//! `ibv_rc_pingpong` and perftest) run on rnic functions.
//!
//! The library is the provider and libibverbs in one: there is no kernel and no
//! provider plug-in, every verb goes to [`rnic_driver::verbs`] over the function's
//! transport (vfio-user on the host, PCI sysfs in a VM). See README.md for how to use it.
//!
//! - [`abi`]: `#[repr(C)]` mirrors of verbs.h's structures (the `rnic-verbs-abi` crate,
//!   ibverbs/abi, shared with the rdma-core provider), checked against the header by
//!   tests/layout.rs;
//! - [`exports`]: the exported symbols and their version nodes, which are Debian's
//!   (symbols.txt, read by [`symbols`]; build.rs makes the version script from it);
//! - `discover`, `device`: finding the functions, `ibv_get_device_list` and friends;
//! - `context`, `query`: `ibv_open_device`, and the queries of an open device;
//! - [`attr`]: what the queries report, from the function's QUERY_DEVICE answer;
//! - [`strings`], `sysfs`: the `*_str` helpers and the sysfs readers;
//! - `ffi`: the errno conventions, and the guard that keeps panics out of C.
//!
//! Threads: every entry point may be called from any thread. Devices and contexts are
//! found by address in mutex-guarded registries; a context lives in an `Arc`, so a call
//! in flight keeps it alive across a concurrent `ibv_close_device`.

pub use rnic_verbs_abi as abi;
mod ah;
pub mod attr;
mod context;
mod cq;
mod device;
mod discover;
mod events;
pub mod exports;
mod ffi;
mod heap_quiet;
mod import;
mod mw;
mod objects;
mod pd;
mod provider;
mod qp;
mod query;
mod rate;
mod srq;
pub mod strings;
pub mod symbols;
mod sysfs;

pub use device::NAME_PREFIX;
pub use discover::{OPEN_TIMEOUT, VFIO_USER_ENV};
pub use ffi::LOG_ENV;
