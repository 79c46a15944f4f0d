//! The RoCEv2 invariant CRC (ICRC) of IPv4 packets, as rdma_rxe computes and checks it.
//!
//! The ICRC is the InfiniBand end-to-end CRC carried over to RoCEv2: it covers the packet
//! from the IP header to the end of the pad, except the fields that switches and routers
//! are allowed to change on the way (so that a changed TTL or an ECN mark does not make
//! the packet look corrupt). Those fields are replaced by all ones before the CRC runs.

use crc32fast::Hasher;

/// Length of the IPv4 header the ICRC assumes: rxe masks fields at fixed offsets of a
/// 20-byte header, so packets with IP options cannot be checked (and are rejected by
/// [`crate::roce::parse::parse`]).
const IPV4_HDR: usize = 20;
/// Length of the UDP header.
const UDP_HDR: usize = 8;
/// Length of the BTH.
const BTH: usize = 12;
/// The part of the packet in which bytes are masked: IPv4 + UDP + BTH.
const MASKED_SPAN: usize = IPV4_HDR + UDP_HDR + BTH;

/// Offsets, from the start of the IPv4 header, of the bytes that are replaced by 0xFF:
/// - 1: IPv4 TOS (DSCP and ECN: rewritten by routers and by ECN marking);
/// - 8: IPv4 TTL (decremented by every router);
/// - 10, 11: IPv4 header checksum (changes with the two above);
/// - 26, 27: UDP checksum (may be added or changed by middle boxes);
/// - 32: BTH byte 4, i.e. the whole byte above the 24-bit destination QPN: FECN, BECN
///   and the 6 reserved bits. rxe does `bth->qpn |= ~BTH_QPN_MASK`, which sets all 8 bits,
///   so FECN/BECN (which congestion notification rewrites) are not covered. BTH byte 8
///   (AckReq and the 7 reserved bits above the PSN) IS covered.
const MASKED_BYTES: [usize; 7] = [1, 8, 10, 11, 26, 27, 32];

/// The ICRC of an IPv4 RoCEv2 packet as rxe computes it.
///
/// `ip_onwards_without_icrc` is the frame from the first byte of the IPv4 header up to,
/// but not including, the 4 ICRC bytes (so: IPv4 header, UDP header, BTH, extension
/// headers, payload and pad).
///
/// The value is CRC-32 with the zlib/Ethernet polynomial (reflected 0xEDB88320, initial
/// value and final xor all ones) over 8 bytes of 0xFF, which stand for the masked LRH of
/// native InfiniBand, then the bytes given with these fields set to all ones: IPv4 TOS,
/// TTL and header checksum; UDP checksum; BTH byte 4 (FECN, BECN and the 6 reserved
/// bits above the QPN). In Python: `zlib.crc32(b'\xff' * 8 + masked)`. On the wire it is
/// stored little-endian, i.e. `icrc(..).to_le_bytes()` are the last 4 bytes of the UDP
/// payload (rxe stores the host-order u32 of an x86 host).
///
/// An RC FLUSH (opcode 0x1C) is hashed as Linux's rxe hashes it (6.12, the rdma_rxe of
/// the Soft-RoCE peers rnic is tested against): rxe_opcode.c gives FLUSH no payload
/// offset, so rxe's `payload_addr` is the BTH and its `payload_size` the 32 bytes of
/// BTH, FETH and RETH, and its ICRC runs on over those 32 bytes a second time, unmasked
/// ([`RC_FLUSH_REHASHED`]). A FLUSH with the ICRC of the specification would be dropped
/// by such an rxe, and its FLUSHes by rnic.
///
/// Input shorter than the IPv4+UDP+BTH headers is hashed as far as it goes (masking
/// the bytes that exist), so the function never panics; such input is not a packet and
/// [`crate::roce::parse::parse`] rejects it before asking for its ICRC.
pub fn icrc(ip_onwards_without_icrc: &[u8]) -> u32 {
    let bytes = ip_onwards_without_icrc;
    let mut hasher = Hasher::new();
    // The masked LRH: rxe starts from a precomputed seed (0xdebb20e3) that equals the
    // running CRC after these 8 bytes; feeding them is the same and plainer.
    hasher.update(&[0xFF; 8]);

    let head_len = bytes.len().min(MASKED_SPAN);
    let mut head = [0u8; MASKED_SPAN];
    head[..head_len].copy_from_slice(&bytes[..head_len]);
    for &offset in &MASKED_BYTES {
        if offset < head_len {
            head[offset] = 0xFF;
        }
    }
    hasher.update(&head[..head_len]);
    hasher.update(&bytes[head_len..]);
    let transport = &bytes[(IPV4_HDR + UDP_HDR).min(bytes.len())..];
    if transport.first() == Some(&RC_FLUSH_REHASHED) {
        hasher.update(transport);
    }
    hasher.finalize()
}

/// The opcode whose transport headers rxe's ICRC covers twice: RC FLUSH (see [`icrc`]).
pub const RC_FLUSH_REHASHED: u8 = super::opcode::RC_FLUSH;

#[cfg(test)]
mod tests {
    use super::*;

    /// A deliberately plain bitwise CRC-32 (reflected polynomial 0xEDB88320, initial value
    /// all ones, final xor all ones), independent of crc32fast.
    fn crc32_bitwise(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                if crc & 1 != 0 {
                    crc = (crc >> 1) ^ 0xEDB8_8320;
                } else {
                    crc >>= 1;
                }
            }
        }
        !crc
    }

    /// A hand-written IPv4+UDP+BTH+RETH+payload sequence, in pieces so that the masked
    /// copy below can be assembled field by field.
    struct Pieces {
        ip: [u8; 20],
        udp: [u8; 8],
        bth: [u8; 12],
        rest: Vec<u8>,
    }

    fn pieces() -> Pieces {
        Pieces {
            ip: [
                0x45, 0x8A, 0x00, 0x4C, 0x12, 0x34, 0x40, 0x00, 0x3F, 0x11, 0xAB, 0xCD, 10, 0, 0,
                1, 10, 0, 0, 2,
            ],
            udp: [0xC1, 0x23, 0x12, 0xB7, 0x00, 0x38, 0x5A, 0xA5],
            bth: [
                0x0A, 0x00, 0xFF, 0xFF, 0xC5, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x07,
            ],
            rest: {
                let mut r = vec![
                    0, 0, 0, 0, 0x12, 0x34, 0x50, 0x00, 0, 0, 0x56, 0x78, 0, 0, 0, 8,
                ];
                r.extend_from_slice(b"payload!");
                r
            },
        }
    }

    impl Pieces {
        /// The packet from the IP header on, without its ICRC.
        fn packet(&self) -> Vec<u8> {
            [&self.ip[..], &self.udp, &self.bth, &self.rest].concat()
        }
    }

    #[test]
    fn matches_bitwise_crc_over_hand_masked_bytes() {
        let p = pieces();
        let packet = p.packet();

        // Assemble the masked sequence by hand, field by field.
        let mut masked = vec![0xFF; 8]; // the masked LRH
        let mut ip = p.ip;
        ip[1] = 0xFF; // TOS
        ip[8] = 0xFF; // TTL
        ip[10] = 0xFF; // header checksum
        ip[11] = 0xFF;
        masked.extend_from_slice(&ip);
        let mut udp = p.udp;
        udp[6] = 0xFF; // UDP checksum
        udp[7] = 0xFF;
        masked.extend_from_slice(&udp);
        let mut bth = p.bth;
        bth[4] = 0xFF; // FECN, BECN, resv6a
        masked.extend_from_slice(&bth);
        masked.extend_from_slice(&p.rest);

        assert_eq!(icrc(&packet), crc32_bitwise(&masked));
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc_and_others_do() {
        let p = pieces();
        let packet = p.packet();
        let base = icrc(&packet);
        for i in 0..packet.len() {
            for bit in 0..8 {
                let mut flipped = packet.clone();
                flipped[i] ^= 1 << bit;
                let masked = MASKED_BYTES.contains(&i);
                assert_eq!(icrc(&flipped) == base, masked, "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn bitwise_reference_matches_known_crc32_values() {
        // Check values of CRC-32/ISO-HDLC (zlib.crc32) to make sure the reference is right.
        assert_eq!(crc32_bitwise(b""), 0);
        assert_eq!(crc32_bitwise(b"123456789"), 0xCBF4_3926);
        // rxe's seed: the running (not yet inverted) CRC after 8 bytes of 0xFF.
        assert_eq!(!crc32_bitwise(&[0xFF; 8]), 0xDEBB_20E3);
    }

    #[test]
    fn short_input_does_not_panic() {
        for len in 0..=MASKED_SPAN + 1 {
            let data = vec![0x5Au8; len];
            let _ = icrc(&data);
        }
    }
}
