//! GIDs: the function's GID table and the text form every rnic program reads and prints.
//!
//! **The GID table** (ABI 1.10, [`crate::regs::CAP_GID_TABLE`]; docs/hardware-interface.md
//! §6.13). Each function has [`GID_TABLE_LEN`] entries. A QP's address vector and a UD
//! work request name their source address by index (`sgid_index`); the device sends from
//! the entry's IPv4 address and takes RoCEv2 packets for any IPv4 address the table holds.
//! At reset entry 0 is the function's own GID (QUERY_DEVICE's `gid`, which the PF may
//! change), and the other entries are empty, so a driver that never sets the table sends
//! from its function's GID with `sgid_index` 0. `SET_GID` ([`SetGidReq`]) sets or clears
//! any entry, entry 0 included, as an operating system adds and removes the addresses of
//! the function's network interface; `QUERY_GID` reads one. Entries hold any GID, but only
//! an IPv4-mapped one (`::ffff:a.b.c.d`) can be a source: RoCEv2 runs over IPv4 here.
//!
//! **Text.** A function's GID is an IPv4-mapped IPv6 address (§6.12, QUERY_DEVICE `gid`;
//! §7.11 for its use on the wire). Read ([`parse`]): 32 hex digits in wire order (as
//! `ibv_rc_pingpong` sends a GID), an IPv6 address, bare or in brackets
//! (`[::ffff:10.82.0.2]`, as inside `rnic-pingpong --peer`), or an IPv4 address, which
//! stands for its IPv4-mapped GID. Printed: [`hex`] (the 32 digits) or [`ip`] (the IPv6
//! text, `::ffff:10.82.0.2`).

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Entries in each function's GID table.
pub const GID_TABLE_LEN: u32 = 16;

/// [`SetGidReq::flags`], [`QueryGidResp::flags`]: the entry holds [`SetGidReq::gid`]; a
/// `SET_GID` without it clears the entry.
pub const GID_VALID: u32 = 1 << 0;

/// Request of `SET_GID`: sets or clears entry `index` of the function's GID table.
///
/// Errors: `BAD_PARAM` with syndrome 0 for an index at or above [`GID_TABLE_LEN`], 4 for
/// unknown flag bits or a nonzero reserved field, 8 for a GID that cannot be an address
/// (the IPv4-mapped `0.0.0.0`, broadcast or multicast, or all zeroes), 16 for an IPv4
/// address another function of the device has; `BAD_STATE` with syndrome 16 when the
/// device's network (`--net udp`) cannot give the function another address than its own.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetGidReq {
    /// The entry, below [`GID_TABLE_LEN`].
    pub index: u32,
    /// [`GID_VALID`] to set the entry, 0 to clear it.
    pub flags: u32,
    /// Must be 0.
    pub reserved: u64,
    /// The GID (with [`GID_VALID`]; zeroes otherwise).
    pub gid: [u8; 16],
}

/// Request of `QUERY_GID`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueryGidReq {
    /// The entry, below [`GID_TABLE_LEN`].
    pub index: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// Response of `QUERY_GID`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueryGidResp {
    /// [`GID_VALID`] if the entry holds a GID.
    pub flags: u32,
    /// Reserved (0).
    pub reserved: u32,
    /// The entry's GID (zeroes when empty).
    pub gid: [u8; 16],
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), the only kind of GID a
/// function sends from.
pub fn ipv4(gid: &[u8; 16]) -> Option<[u8; 4]> {
    (gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff])
        .then(|| [gid[12], gid[13], gid[14], gid[15]])
}

/// The IPv4-mapped GID of `ip`.
pub fn mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&ip);
    gid
}

/// Why a text is not a GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseGidError;

impl fmt::Display for ParseGidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "not a GID: give 32 hex digits (e.g. 00000000000000000000ffff0a520002), an IPv6 \
             address (e.g. ::ffff:10.82.0.2, or [::ffff:10.82.0.2]) or an IPv4 address \
             (e.g. 10.82.0.2, for its IPv4-mapped GID)",
        )
    }
}

/// The GID `s` names: 32 hex digits, an IPv6 address (bare or in brackets) or an IPv4
/// address (mapped, as RoCEv2 uses it).
pub fn parse(s: &str) -> Result<[u8; 16], ParseGidError> {
    if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| ParseGidError)?;
        }
        return Ok(gid);
    }
    if let Some(v6) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return v6
            .parse::<Ipv6Addr>()
            .map(|a| a.octets())
            .map_err(|_| ParseGidError);
    }
    if let Ok(v4) = s.parse::<Ipv4Addr>() {
        return Ok(v4.to_ipv6_mapped().octets());
    }
    s.parse::<Ipv6Addr>()
        .map(|a| a.octets())
        .map_err(|_| ParseGidError)
}

/// `gid` as 32 hex digits, bytes in wire order (`ibv_rc_pingpong`'s `gid_to_wire_gid`).
pub fn hex(gid: &[u8; 16]) -> Hex<'_> {
    Hex(gid)
}

/// `gid` as an IPv6 address, whose text is the usual form (`::ffff:10.82.0.2`).
pub fn ip(gid: &[u8; 16]) -> Ipv6Addr {
    Ipv6Addr::from(*gid)
}

/// The 32-hex-digit form of a GID ([`hex`]).
#[derive(Debug, Clone, Copy)]
pub struct Hex<'a>(pub &'a [u8; 16]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 2];

    #[test]
    fn every_form_reads_as_the_same_gid() {
        for text in [
            "00000000000000000000ffff0a520002",
            "00000000000000000000FFFF0A520002",
            "::ffff:10.82.0.2",
            "[::ffff:10.82.0.2]",
            "10.82.0.2",
        ] {
            assert_eq!(parse(text), Ok(GID), "{text}");
        }
        assert_eq!(parse("fe80::1").unwrap()[15], 1);
        assert_eq!(parse("[fe80::1]").unwrap()[0], 0xfe);
    }

    #[test]
    fn what_is_no_gid_is_refused() {
        for bad in [
            "",
            "nope",
            "[nonsense]",
            "00000000000000000000ffff0a52000",
            "00000000000000000000ffff0a5200023",
            "0000000000000000000gffff0a520002",
            "[10.82.0.2]",
            "::ffff:10.82.0.2]",
            "10.82.0",
        ] {
            assert_eq!(parse(bad), Err(ParseGidError), "{bad:?}");
        }
        assert!(ParseGidError.to_string().contains("32 hex digits"));
    }

    #[test]
    fn both_printed_forms_read_back() {
        assert_eq!(hex(&GID).to_string(), "00000000000000000000ffff0a520002");
        assert_eq!(ip(&GID).to_string(), "::ffff:10.82.0.2");
        assert_eq!(parse(&hex(&GID).to_string()), Ok(GID));
        assert_eq!(parse(&ip(&GID).to_string()), Ok(GID));
    }
}
