//! The device's internal Ethernet fabric: how frames get from the function that sent them
//! to the function, or the network, they are for (docs/hardware-interface.md §7.12).
//!
//! - [`frame`]: a frame, sealed or not, and a port's address;
//! - [`route`]: where a frame goes ([`route::Route::hop`]: an inbox, the switch, the
//!   uplink);
//! - [`inbox`]: each port's queue of frames that arrived;
//! - [`switch`]: what the engine's threads share: the capture, the fault injector
//!   ([`faults`]) and the uplink ([`uplink`]) to a network;
//! - [`train`] and [`held`]: many packets of one message in one frame between two
//!   functions, their payload possibly still in the sender's memory.
//!
//! The fabric knows frames and addresses, not queue pairs: `rdma` turns QP state into
//! frames and frames into QP state, `net` carries them to other hosts; neither uses the
//! other.

pub mod faults;
pub mod frame;
pub mod held;
pub mod inbox;
pub mod route;
pub mod switch;
pub mod train;
pub mod uplink;
