//! RoCEv2: InfiniBand transport packets carried in UDP/IPv4 over Ethernet, as Linux's
//! rdma_rxe (Soft-RoCE) puts them on the wire and checks them.
//!
//! The layering, from the wire inwards:
//! - a frame is Ethernet II → IPv4 → UDP (destination port 4791) → BTH → the extension
//!   headers the opcode calls for → payload → pad → ICRC;
//! - [`packet`] turns whole frames into typed headers and back ([`packet::build`],
//!   [`packet::parse`]) and holds the opcode table, the single place that knows which
//!   headers each opcode carries;
//! - [`icrc`] is the invariant CRC that covers the frame from the IP header on, with the
//!   fields that routers may rewrite masked out.
//!
//! Nothing here knows about queue pairs, PSN windows or memory: the transport stages
//! elsewhere (requester, responder, completer) build and read frames only through
//! [`packet`], and decide what to do with them themselves. Only IPv4 is supported, since
//! that is what the device's RoCEv2 GIDs carry.

pub mod icrc;
pub mod packet;
pub mod psn;
