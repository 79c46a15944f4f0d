//! UD multicast (ABI 1.11, [`crate::regs::CAP_MULTICAST`]; docs/hardware-interface.md
//! §14.15).
//!
//! A UD QP joins a multicast group with `ATTACH_MCAST` and leaves it with `DETACH_MCAST`
//! ([`McastReq`]). A group is an IPv4-mapped multicast GID (`::ffff:224.0.0.0/4`, as the
//! RDMA core makes one from an IPv4 group for RoCEv2). A UD send to such a GID with the
//! remote QPN [`MULTICAST_QPN`] goes to the group: every QP of every function of the
//! device attached to it receives a copy, the sender's own function included, and the
//! frame leaves through the device's network port too. A function holds at most
//! [`MAX_GROUPS`] groups, each with at most [`MAX_QPS_PER_GROUP`] of its QPs.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The destination QPN of a multicast packet (IBTA's permissive QPN, `0xFFFFFF`).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// Groups one function may hold at once (`max_mcast_grp`).
pub const MAX_GROUPS: u32 = 64;

/// QPs of one function one group may hold (`max_mcast_qp_attach`).
pub const MAX_QPS_PER_GROUP: u32 = 16;

/// Request of `ATTACH_MCAST` and `DETACH_MCAST`: QP `qpn` joins or leaves group `gid`.
///
/// Errors: `NOT_FOUND` for a QP that does not exist; `BAD_PARAM` with syndrome 0 for a QP
/// that is not UD, 4 for a nonzero reserved field, 8 for a GID that is not an IPv4-mapped multicast address,
/// 16 (`DETACH_MCAST`) for a QP that is not in the group; `NO_RESOURCES` when the function
/// holds [`MAX_GROUPS`] groups already or the group [`MAX_QPS_PER_GROUP`] of its QPs.
/// Attaching a QP that is in the group already succeeds and changes nothing.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct McastReq {
    /// The UD QP.
    pub qpn: u32,
    /// Must be 0.
    pub reserved: u32,
    /// The group's GID.
    pub gid: [u8; 16],
}

/// The IPv4 group of `gid` if it is an IPv4-mapped multicast GID.
pub fn group(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let ip = crate::gid::ipv4(gid)?;
    (ip[0] & 0xf0 == 0xe0).then_some(ip)
}

/// The Ethernet MAC of IPv4 group `ip` (RFC 1112: `01:00:5e` and the group's low 23 bits).
pub fn mac_of(ip: [u8; 4]) -> [u8; 6] {
    [0x01, 0x00, 0x5e, ip[1] & 0x7f, ip[2], ip[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_an_ipv4_mapped_multicast_gid() {
        let mut gid = [0u8; 16];
        gid[10..12].copy_from_slice(&[0xff, 0xff]);
        gid[12..].copy_from_slice(&[239, 1, 2, 3]);
        assert_eq!(group(&gid), Some([239, 1, 2, 3]));
        gid[12] = 10;
        assert_eq!(group(&gid), None, "unicast");
        gid[12] = 224;
        gid[10] = 0;
        assert_eq!(group(&gid), None, "not IPv4-mapped");
        assert_eq!(mac_of([239, 129, 2, 3]), [1, 0, 0x5e, 1, 2, 3]);
        assert_eq!(size_of::<McastReq>(), 24);
    }
}
