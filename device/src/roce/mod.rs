//! RoCEv2: InfiniBand transport packets carried in UDP/IPv4 over Ethernet, as Linux's
//! rdma_rxe (Soft-RoCE) puts them on the wire and checks them.
//!
//! The layering, from the wire inwards:
//! - a frame is Ethernet II → IPv4 → UDP (destination port 4791) → BTH → the extension
//!   headers the opcode calls for → payload → pad → ICRC;
//! - [`opcode`] is the opcode table, the single place that knows which headers each
//!   opcode carries and what kind of packet it is (rxe's `rxe_opcode.c`);
//! - [`hdr`] lays out the headers (rxe's `rxe_hdr.h`);
//! - [`build`] turns typed headers and a payload into a whole frame, [`parse`] a frame
//!   back into them, checking it as rxe does;
//! - [`icrc`] is the invariant CRC that covers the frame from the IP header on, with the
//!   fields that routers may rewrite masked out.
//!
//! Nothing here knows about queue pairs, PSN windows or memory: the transport stages
//! elsewhere (requester, responder, completer) build and read frames only through
//! [`build`] and [`parse`], and decide what to do with them themselves. [`psn`] is the
//! arithmetic of the 24-bit packet sequence numbers. Only IPv4 is supported, since
//! that is what the device's RoCEv2 GIDs carry.

pub mod build;
pub mod hdr;
pub mod icrc;
pub mod opcode;
pub mod parse;
pub mod psn;

#[cfg(test)]
mod tests;
