//! Building RoCEv2 frames byte for byte as rxe sends them (rxe_net.c for the IP and UDP
//! headers, rxe_hdr.h for the transport headers, rxe_icrc.c for the ICRC): [`build`]
//! appends a whole frame; [`build_headers`], [`end_unsealed`] and [`seal`] do it in steps
//! (docs/hardware-interface.md §7.11).
//!
//! A frame is:
//!
//! ```text
//! Ethernet II (14) | IPv4 (20, no options) | UDP (8, dst 4791) | BTH (12)
//!   | extension headers (per opcode, in wire order) | payload | pad (0..=3) | ICRC (4)
//! ```

use super::hdr::*;
use super::icrc::icrc;
use super::opcode::opcode_info;

/// Everything below the transport headers that a sender chooses for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Addressing {
    /// Source MAC (ours).
    pub src_mac: [u8; 6],
    /// Destination MAC (the peer's, or the next hop's).
    pub dst_mac: [u8; 6],
    /// Source IPv4 address (from our GID).
    pub src_ip: [u8; 4],
    /// Destination IPv4 address (from the peer's GID).
    pub dst_ip: [u8; 4],
    /// UDP source port: flow entropy, fixed per QP; see [`udp_src_port`].
    pub src_port: u16,
    /// IPv4 TTL (the address vector's hop limit).
    pub ttl: u8,
    /// IPv4 TOS byte (the address vector's traffic class: DSCP and ECN).
    pub tos: u8,
    /// IPv4 identification. With DF set it only has to differ between packets in flight.
    pub ip_id: u16,
}

/// The UDP source port rxe gives a connected QP: `rdma_get_udp_sport()` of Linux's
/// ib_verbs.h, which rxe_modify_qp applies when the address vector is set.
///
/// If the GRH flow label is 0 (the usual case), a flow label is derived from the
/// product of both QPNs, so that both ends of a connection pick the same port; the
/// 20-bit label is then folded into 14 bits and put in the dynamic range 0xC000..=0xFFFF.
/// Receivers do not check the source port: any value works, this one merely matches
/// what rxe would send.
pub const fn udp_src_port(flow_label: u32, local_qpn: u32, remote_qpn: u32) -> u16 {
    const FLOW_LABEL_MASK: u64 = 0x000F_FFFF;
    let fl = if flow_label & FLOW_LABEL_MASK as u32 != 0 {
        flow_label & FLOW_LABEL_MASK as u32
    } else {
        let mut v = local_qpn as u64 * remote_qpn as u64;
        v ^= v >> 20;
        v ^= v >> 40;
        (v & FLOW_LABEL_MASK) as u32
    };
    let low = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    (low | 0xC000) as u16
}

/// Why [`build`] refused to build a frame. Nothing is appended when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The BTH opcode is not in the opcode table.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The opcode needs an extension header that `Headers` does not have.
    #[error("opcode {opcode:#04x} needs a {header} that is missing")]
    MissingHeader {
        /// The opcode.
        opcode: u8,
        /// The missing header.
        header: ExtHeader,
    },
    /// `Headers` has an extension header that the opcode does not carry. Refused rather
    /// than dropped because it means the caller picked the wrong opcode or headers.
    #[error("opcode {opcode:#04x} does not carry a {header}")]
    UnexpectedHeader {
        /// The opcode.
        opcode: u8,
        /// The header it does not carry.
        header: ExtHeader,
    },
    /// A payload was given for an opcode that carries none.
    #[error("opcode {opcode:#04x} carries no payload but {len} bytes were given")]
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// The payload length given.
        len: usize,
    },
    /// A field holds a value wider than its wire field (e.g. a PSN of 2^24): refused,
    /// not truncated, because truncation would hide sequence arithmetic bugs.
    #[error("{field} value {value:#x} does not fit its wire field")]
    FieldTooWide {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// The frame would need an IPv4 total length above 65535 bytes.
    #[error("packet too long for IPv4: {ip_len} bytes")]
    TooLong {
        /// The IPv4 total length it would need.
        ip_len: usize,
    },
}

/// Fills in the UDP checksum of a frame [`build`] wrote (whose checksum is 0), as a
/// sender that checksums UDP over IPv4 does (rxe may, hardware RoCE NICs do); the ICRC
/// does not cover it, so the frame stays valid. Frames that are not IPv4/UDP are left.
pub fn set_udp_checksum(frame: &mut [u8]) {
    let ip = ETH_HEADER_LEN;
    let Some(h) = frame.get(ip..ip + IPV4_HEADER_LEN) else {
        return;
    };
    if h[9] != IPPROTO_UDP || h[0] != 0x45 {
        return;
    }
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let words = |b: &[u8]| u32::from(u16::from_be_bytes([b[0], b[1]]));
    let pseudo = words(&h[12..14]) + words(&h[14..16]) + words(&h[16..18]) + words(&h[18..20]);
    let Some(udp) = frame.get_mut(ip + IPV4_HEADER_LEN..ip + total) else {
        return;
    };
    udp[6] = 0;
    udp[7] = 0;
    let len = udp.len() as u32;
    let c = match !ones_complement_sum(pseudo + u32::from(IPPROTO_UDP) + len, udp) {
        0 => 0xFFFF,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
}

/// Ones' complement sum of 16-bit big-endian words (an odd last byte is padded with 0),
/// folded to 16 bits; the base of the IPv4 and UDP checksums.
pub fn ones_complement_sum(mut sum: u32, data: &[u8]) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// Appends a complete frame to `out`: Ethernet II (EtherType 0x0800), IPv4 (no options,
/// DF set, header checksum), UDP (destination port 4791, checksum 0 as rxe sends over
/// IPv4, where 0 means "none"), BTH, the extension headers the opcode carries (each of
/// which must be present in `hdrs`, and no others), the payload, the pad (`hdrs.bth.pad`
/// is ignored and computed so that payload + pad is a multiple of 4), and the ICRC
/// (4 bytes, little-endian, as rxe stores it).
///
/// The frame is not padded to Ethernet's 60-byte minimum (the smallest RoCE frame is
/// 58 bytes): that is the link's job, and [`super::parse::parse`] accepts such trailing
/// bytes.
pub fn build(
    addr: &Addressing,
    hdrs: &Headers,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), BuildError> {
    let start = out.len();
    build_headers(addr, hdrs, payload.len(), out)?;
    out.extend_from_slice(payload);
    end_unsealed(out, payload.len());
    seal(&mut out[start..]);
    Ok(())
}

/// [`build`] in steps, for a caller that appends the payload itself (straight from
/// guest memory, with no zeroing first): appends the headers of a frame that will carry
/// `payload_len` bytes of payload. The caller then appends exactly the payload and calls
/// [`end_unsealed`]; [`seal`] computes the ICRC, which a frame that never leaves the
/// process and is never captured does not need (see [`crate::fabric::frame`]).
pub fn build_headers(
    addr: &Addressing,
    hdrs: &Headers,
    payload_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), BuildError> {
    let bth = &hdrs.bth;
    let info = opcode_info(bth.opcode).ok_or(BuildError::UnknownOpcode(bth.opcode))?;

    // Check everything before writing anything, so a failed build leaves `out` as it was.
    for h in [
        ExtHeader::Reth,
        ExtHeader::Aeth,
        ExtHeader::AtomicEth,
        ExtHeader::AtomicAckEth,
        ExtHeader::Imm,
        ExtHeader::Ieth,
        ExtHeader::Deth,
        ExtHeader::Dceth,
        ExtHeader::Feth,
    ] {
        match (info.carries(h), hdrs.has(h)) {
            (true, false) => {
                return Err(BuildError::MissingHeader {
                    opcode: bth.opcode,
                    header: h,
                })
            }
            (false, true) => {
                return Err(BuildError::UnexpectedHeader {
                    opcode: bth.opcode,
                    header: h,
                })
            }
            _ => {}
        }
    }
    if !info.has_payload && payload_len != 0 {
        return Err(BuildError::UnexpectedPayload {
            opcode: bth.opcode,
            len: payload_len,
        });
    }
    let too_wide = |field, value: u32, max: u32| {
        if value > max {
            Err(BuildError::FieldTooWide { field, value })
        } else {
            Ok(())
        }
    };
    too_wide("BTH.tver", u32::from(bth.tver), 0x0F)?;
    too_wide("BTH.dest_qp", bth.dest_qp, MASK_24)?;
    too_wide("BTH.psn", bth.psn, MASK_24)?;
    if let Some(aeth) = &hdrs.aeth {
        too_wide("AETH.msn", aeth.msn, MASK_24)?;
    }
    if let Some(deth) = &hdrs.deth {
        too_wide("DETH.src_qp", deth.src_qp, MASK_24)?;
    }
    if let Some(d) = &hdrs.dceth {
        too_wide("DCETH.dci_qpn", d.dci_qpn, MASK_24)?;
    }

    let pad = (4 - payload_len % 4) % 4;
    let udp_len = UDP_HEADER_LEN + info.header_len() + payload_len + pad + ICRC_LEN;
    let ip_len = IPV4_HEADER_LEN + udp_len;
    if ip_len > usize::from(u16::MAX) {
        return Err(BuildError::TooLong { ip_len });
    }

    out.reserve(ETH_HEADER_LEN + ip_len);
    // Ethernet II.
    out.extend_from_slice(&addr.dst_mac);
    out.extend_from_slice(&addr.src_mac);
    out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());

    // IPv4: version 4, IHL 5, as rxe's prepare_ipv4_hdr.
    let ip_start = out.len();
    out.push(0x45);
    out.push(addr.tos);
    out.extend_from_slice(&(ip_len as u16).to_be_bytes());
    out.extend_from_slice(&addr.ip_id.to_be_bytes());
    out.extend_from_slice(&IP_DF.to_be_bytes());
    out.push(addr.ttl);
    out.push(IPPROTO_UDP);
    out.extend_from_slice(&[0, 0]); // checksum, filled in below
    out.extend_from_slice(&addr.src_ip);
    out.extend_from_slice(&addr.dst_ip);
    let checksum = !ones_complement_sum(0, &out[ip_start..ip_start + IPV4_HEADER_LEN]);
    out[ip_start + 10..ip_start + 12].copy_from_slice(&checksum.to_be_bytes());

    // UDP, checksum 0: rxe computes none over IPv4 (the ICRC protects the packet).
    out.extend_from_slice(&addr.src_port.to_be_bytes());
    out.extend_from_slice(&ROCEV2_PORT.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);

    // BTH; the reserved bits (resv6a, resv7) are sent as 0, as rxe's bth_init does.
    out.push(bth.opcode);
    out.push(
        (u8::from(bth.solicited) << 7)
            | (u8::from(bth.mig_req) << 6)
            | ((pad as u8) << 4)
            | bth.tver,
    );
    out.extend_from_slice(&bth.pkey.to_be_bytes());
    let qpn_word = (u32::from(bth.fecn) << 31) | (u32::from(bth.becn) << 30) | bth.dest_qp;
    out.extend_from_slice(&qpn_word.to_be_bytes());
    let psn_word = (u32::from(bth.ack_req) << 31) | bth.psn;
    out.extend_from_slice(&psn_word.to_be_bytes());

    // Extension headers, in the table's wire order. The checks above guarantee presence;
    // the `if let`s only avoid an unwrap.
    for &h in info.ext_headers {
        match h {
            ExtHeader::Reth => {
                if let Some(r) = &hdrs.reth {
                    out.extend_from_slice(&r.va.to_be_bytes());
                    out.extend_from_slice(&r.rkey.to_be_bytes());
                    out.extend_from_slice(&r.dma_len.to_be_bytes());
                }
            }
            ExtHeader::Aeth => {
                if let Some(a) = &hdrs.aeth {
                    let word = (u32::from(a.syndrome) << 24) | a.msn;
                    out.extend_from_slice(&word.to_be_bytes());
                }
            }
            ExtHeader::AtomicEth => {
                if let Some(a) = &hdrs.atomic {
                    out.extend_from_slice(&a.va.to_be_bytes());
                    out.extend_from_slice(&a.rkey.to_be_bytes());
                    out.extend_from_slice(&a.swap_add.to_be_bytes());
                    out.extend_from_slice(&a.compare.to_be_bytes());
                }
            }
            ExtHeader::AtomicAckEth => {
                if let Some(a) = &hdrs.atomic_ack {
                    out.extend_from_slice(&a.orig.to_be_bytes());
                }
            }
            ExtHeader::Imm => {
                if let Some(imm) = &hdrs.imm {
                    out.extend_from_slice(imm);
                }
            }
            ExtHeader::Ieth => {
                if let Some(rkey) = hdrs.ieth {
                    out.extend_from_slice(&rkey.to_be_bytes());
                }
            }
            ExtHeader::Feth => {
                if let Some(bits) = hdrs.feth {
                    out.extend_from_slice(&bits.to_be_bytes());
                }
            }
            ExtHeader::Deth => {
                if let Some(d) = &hdrs.deth {
                    out.extend_from_slice(&d.qkey.to_be_bytes());
                    // A reserved byte, then the 24-bit source QP.
                    out.extend_from_slice(&d.src_qp.to_be_bytes());
                }
            }
            ExtHeader::Dceth => {
                if let Some(d) = &hdrs.dceth {
                    out.extend_from_slice(&d.dc_key.to_be_bytes());
                    out.extend_from_slice(&d.dci_qpn.to_be_bytes());
                    // Reserved.
                    out.extend_from_slice(&[0; 4]);
                }
            }
        }
    }

    Ok(())
}

/// Length of the frame [`build`] makes of `hdrs` and `payload_len` bytes of payload (0
/// for an unknown opcode).
pub fn frame_len(hdrs: &Headers, payload_len: usize) -> usize {
    opcode_info(hdrs.bth.opcode).map_or(0, |info| {
        ETH_HEADER_LEN
            + IPV4_HEADER_LEN
            + UDP_HEADER_LEN
            + info.header_len()
            + payload_len.next_multiple_of(4)
            + ICRC_LEN
    })
}

/// Ends a frame from [`build_headers`] whose `payload_len` bytes of payload were
/// appended: appends the pad and a zero ICRC.
pub fn end_unsealed(out: &mut Vec<u8>, payload_len: usize) {
    let pad = (4 - payload_len % 4) % 4;
    out.extend_from_slice(&[0u8; 3 + ICRC_LEN][..pad + ICRC_LEN]);
}

/// Computes the ICRC of `frame` (one whole frame from [`build_headers`] and
/// [`end_unsealed`], Ethernet header first) into its last four bytes.
pub fn seal(frame: &mut [u8]) {
    let Some(end) = frame.len().checked_sub(ICRC_LEN) else {
        return;
    };
    let crc = icrc(&frame[ETH_HEADER_LEN.min(end)..end]);
    frame[end..].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_src_port_matches_kernel_formula() {
        // Computed by hand from rdma_calc_flow_label / rdma_flow_label_to_udp_sport:
        // 0x11 * 0x12 = 0x132, no high bits to fold, | 0xC000.
        assert_eq!(udp_src_port(0, 0x11, 0x12), 0xC132);
        // Symmetric, so both ends pick the same port.
        assert_eq!(udp_src_port(0, 0x12, 0x11), 0xC132);
        // Flow label 0x12345: low 14 bits 0x2345 ^ (0x10000 >> 14 = 4) = 0x2341.
        assert_eq!(udp_src_port(0x12345, 1, 2), 0xE341);
        for (l, r) in [(1, 1), (0xFF_FFFF, 0xFF_FFFF), (0xABCDE, 0x12)] {
            assert!(udp_src_port(0, l, r) >= 0xC000);
        }
    }
}
