//! The device's networking beyond its internal switch: what carries frames between
//! rnicd processes, and what makes a wire imperfect on purpose.
//!
//! - [`faults`]: deterministic loss, duplication, reordering, corruption and delay of
//!   frames, for testing the transport (`rnicd --net-faults`).
//! - [`udp`]: RoCEv2 over real UDP sockets, so that functions of different rnicd
//!   processes reach each other (`rnicd --net udp:ADDR[:PORT]`).

pub mod faults;
pub mod udp;
