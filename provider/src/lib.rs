//! `librnic-rdmav34.so`: rnic's provider plug-in for rdma-core's libibverbs (Debian
//! trixie's rdma-core 56.1, private ABI `IBVERBS_PRIVATE_34`), for functions driven by
//! the kernel driver `rnic.ko`.
//!
//! libibverbs loads the plug-in named by `/etc/libibverbs.d/rnic.driver`; its constructor
//! registers [`OPS`], which match uverbs devices on PCI functions 0xF1C0:0x0001 (PF) and
//! 0xF1C0:0x0002 (VF) whose kernel driver speaks uverbs ABI 1. Control verbs go to the
//! kernel through libibverbs' `ibv_cmd_*` with rnic's driver data (`rnic_abi::uverbs`);
//! the data path (posting, polling, arming) runs in the process on the context's mapped
//! doorbell page and on rings in its own memory.
//!
//! - [`driver`]: mirrors of driver.h and kern-abi.h, and the libibverbs functions used;
//! - [`ring`]: doorbells, rings and completions on plain memory;
//! - [`send`]: send work requests as WQEs;
//! - `verbs`: the ops;
//! - [`wr`]: the `ibv_wr_*` batches of extended QPs.
//!
//! The plug-in exports no symbol: libibverbs finds it through the constructor.

pub mod driver;
pub mod ring;
pub mod send;
mod verbs;
pub mod wr;

pub use verbs::OPS;

/// The constructor: registers [`OPS`] with libibverbs when the plug-in is loaded (as
/// rdma-core's `PROVIDER_DRIVER` does).
#[cfg_attr(test, allow(dead_code))]
extern "C" fn register() {
    // SAFETY: OPS is a static that lives as long as the plug-in, as libibverbs requires.
    unsafe { driver::verbs_register_driver_34(&OPS) };
}

// Not in the rlib of the crate's own tests: they do not link libibverbs.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static REGISTER: extern "C" fn() = register;
