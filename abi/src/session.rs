//! Sessions bound to UDP 5-tuples, and multipath (ABI 1.4, [`crate::regs::CAP_SESSIONS`]).
//!
//! The PF (the trusted side) gives each function up to [`MAX_SESSIONS`] **sessions**: UDP
//! source ports, so RoCEv2 5-tuples (source and destination address, UDP, source port,
//! 4791), with the admin command `SET_SESSIONS`. A function cannot choose its ports.
//!
//! A send WQE of an RC QP names a **session group** in `SendWqe::session_group`: bit *i*
//! = session *i* of the function. For each message with a non-zero group, the device
//! picks one session of the group (round robin over the function's messages), and every
//! packet of the message, resent ones included, leaves from that session's source port:
//! one connection spreads over several network paths (multipath) that ECMP tells apart by
//! the 5-tuple. The receiver keeps the connection's order as always (PSNs). A group that
//! names no assigned session, or 0, uses the QP's own port.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Sessions a function may have.
pub const MAX_SESSIONS: usize = 8;

/// `SET_SESSIONS` request (admin queue): replaces member `member`'s sessions.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetSessionsReq {
    /// The member (0 = PF, 1 + n = VF n).
    pub member: u32,
    /// Sessions, 0 ..= [`MAX_SESSIONS`] (0 removes them all).
    pub count: u32,
    /// The UDP source ports of sessions `0 .. count`: non-zero and distinct.
    pub ports: [u16; MAX_SESSIONS],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes() {
        assert_eq!(size_of::<SetSessionsReq>(), 24);
    }
}
