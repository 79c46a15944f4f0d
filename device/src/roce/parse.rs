//! Parsing and validating RoCEv2 frames in the order Linux's IP and UDP layers and then
//! rxe (rxe_recv.c, rxe_icrc.c) check them: [`parse`] returns the headers and a borrowed
//! payload, or the one reason the frame is refused ([`ParseError`])
//! (docs/hardware-interface.md §7.11).

use super::build::ones_complement_sum;
use super::hdr::*;
use super::icrc::icrc;
use super::opcode::{foreign, opcode_info, opcode_name};

/// A frame that [`parse`] accepted: the addressing it arrived with, its transport
/// headers, and its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 TTL.
    pub ttl: u8,
    /// IPv4 TOS byte.
    pub tos: u8,
    /// The BTH (with its pad count as received) and the opcode's extension headers.
    pub hdrs: Headers,
    /// The payload, without pad and ICRC; borrowed from the frame.
    pub payload: &'a [u8],
}

/// The addressing and BTH of a frame whose opcode this device does not take
/// ([`ParseError::Unsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// The BTH as received.
    pub bth: Bth,
}

/// Why [`parse`] dropped a frame. Each reason is its own variant so that the device can
/// count drops by reason; the checks run in the order listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Shorter than an Ethernet header.
    #[error("frame of {len} bytes is shorter than an Ethernet header")]
    TruncatedEthernet {
        /// The frame length.
        len: usize,
    },
    /// The EtherType is not IPv4 (this includes VLAN-tagged frames and IPv6).
    #[error("EtherType {0:#06x} is not IPv4")]
    NotIpv4(u16),
    /// Too short for an IPv4 header.
    #[error("{len} bytes after the Ethernet header: too short for IPv4")]
    TruncatedIp {
        /// Bytes after the Ethernet header.
        len: usize,
    },
    /// The IP version field is not 4.
    #[error("IP version {0} is not 4")]
    IpVersion(u8),
    /// The IPv4 header length is not 5 words. Options are refused because rxe's ICRC
    /// assumes a 20-byte header, so it would compute it over the wrong bytes.
    #[error("IPv4 header length {0} words: options are not supported")]
    IpHeaderLength(u8),
    /// The IPv4 total length is below the header length or beyond the frame.
    #[error("IPv4 total length {total} with {available} bytes present")]
    IpTotalLength {
        /// The total length field.
        total: u16,
        /// Bytes present after the Ethernet header.
        available: usize,
    },
    /// The IPv4 header checksum is wrong.
    #[error("bad IPv4 header checksum")]
    IpChecksum,
    /// A fragment (MF set or a fragment offset): RoCE packets are never fragmented, and
    /// this device does no reassembly.
    #[error("IPv4 fragment")]
    IpFragment,
    /// The IP protocol is not UDP.
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// The IP payload is too short for a UDP header.
    #[error("IP payload of {len} bytes is too short for UDP")]
    TruncatedUdp {
        /// The IP payload length.
        len: usize,
    },
    /// The UDP destination port is not 4791.
    #[error("UDP destination port {0} is not RoCEv2's")]
    UdpPort(u16),
    /// The UDP length is below 8 or beyond the IP payload.
    #[error("UDP length {udp_len} with an IP payload of {ip_payload} bytes")]
    UdpLength {
        /// The UDP length field.
        udp_len: u16,
        /// The IP payload length.
        ip_payload: usize,
    },
    /// A non-zero UDP checksum that is wrong (0 means none over IPv4, as rxe sends).
    #[error("bad UDP checksum")]
    UdpChecksum,
    /// The UDP payload is too short for a BTH.
    #[error("UDP payload of {len} bytes is too short for a BTH")]
    TruncatedBth {
        /// The UDP payload length.
        len: usize,
    },
    /// The BTH transport version is not 0.
    #[error("BTH transport version {0} is not 0")]
    BthVersion(u8),
    /// The opcode is not in the opcode table, nor one the specification defines
    /// ([`foreign`]): a reserved value.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// An opcode the specification defines that this device does not take ([`foreign`]),
    /// in a frame whose ICRC holds (its headers are not checked: their layout is another
    /// transport's). It says who sent it to whom, for the receiver to explain the drop.
    #[error("{} ({:#04x}) is not an opcode this device takes", opcode_name(.0.bth.opcode), .0.bth.opcode)]
    Unsupported(Unsupported),
    /// Too short for the opcode's extension headers and the ICRC.
    #[error("opcode {opcode:#04x} needs {need} bytes of headers and ICRC, {have} present")]
    TruncatedHeaders {
        /// The opcode.
        opcode: u8,
        /// BTH + extension headers + ICRC.
        need: usize,
        /// UDP payload length.
        have: usize,
    },
    /// The BTH pad count exceeds the bytes between the headers and the ICRC.
    #[error("pad of {pad} with {available} bytes between headers and ICRC")]
    BadPad {
        /// The pad count.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        available: usize,
    },
    /// A payload on an opcode that carries none (ACK, READ request, atomics).
    #[error("opcode {opcode:#04x} carries no payload but has {len} bytes")]
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// Bytes of payload and pad found.
        len: usize,
    },
    /// The ICRC does not match the packet.
    #[error("bad ICRC: packet has {found:#010x}, computed {computed:#010x}")]
    Icrc {
        /// The value in the packet (read little-endian).
        found: u32,
        /// The value computed over the packet.
        computed: u32,
    },
}

/// Reads fixed-size fields from a slice without panicking: every read is bounds-checked
/// and a short slice gives `None`.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.buf.split_first_chunk::<N>()?;
        self.buf = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }
}

/// Parses and validates a frame, in the order Linux (IP and UDP layers) and then rxe
/// check where it applies: Ethernet type; IPv4 version, header length, total length,
/// header checksum, fragmentation and protocol; UDP destination port, length and (if
/// non-zero) checksum; BTH transport version; known opcode; room for the opcode's
/// headers and the ICRC; pad; no payload where the opcode has none; ICRC.
///
/// Bytes after the IPv4 total length (Ethernet padding of short frames) are ignored.
/// Addresses, QPN, P_Key and PSN are not checked here: they need QP state.
///
/// Every failure is a distinct [`ParseError`]; no input makes it panic.
pub fn parse(frame: &[u8]) -> Result<Packet<'_>, ParseError> {
    parse_checked(frame, true)
}

/// [`parse`] without the ICRC check, for a frame built by this process that nothing
/// outside it has seen or touched (an unsealed frame of the internal switch, whose ICRC
/// was never computed). Every other check is made.
pub fn parse_unsealed(frame: &[u8]) -> Result<Packet<'_>, ParseError> {
    parse_checked(frame, false)
}

fn parse_checked(frame: &[u8], check_icrc: bool) -> Result<Packet<'_>, ParseError> {
    // Ethernet.
    let Some((eth, after_eth)) = frame.split_first_chunk::<ETH_HEADER_LEN>() else {
        return Err(ParseError::TruncatedEthernet { len: frame.len() });
    };
    let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    if ethertype != ETHERTYPE_IPV4 {
        return Err(ParseError::NotIpv4(ethertype));
    }
    let mut dst_mac = [0u8; 6];
    dst_mac.copy_from_slice(&eth[0..6]);
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&eth[6..12]);

    // IPv4.
    let Some(ip) = after_eth.first_chunk::<IPV4_HEADER_LEN>() else {
        return Err(ParseError::TruncatedIp {
            len: after_eth.len(),
        });
    };
    if ip[0] >> 4 != 4 {
        return Err(ParseError::IpVersion(ip[0] >> 4));
    }
    if ip[0] & 0x0F != 5 {
        return Err(ParseError::IpHeaderLength(ip[0] & 0x0F));
    }
    let total = u16::from_be_bytes([ip[2], ip[3]]);
    if usize::from(total) < IPV4_HEADER_LEN || usize::from(total) > after_eth.len() {
        return Err(ParseError::IpTotalLength {
            total,
            available: after_eth.len(),
        });
    }
    if ones_complement_sum(0, ip) != 0xFFFF {
        return Err(ParseError::IpChecksum);
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & IP_MF_OFFSET != 0 {
        return Err(ParseError::IpFragment);
    }
    if ip[9] != IPPROTO_UDP {
        return Err(ParseError::NotUdp(ip[9]));
    }
    let tos = ip[1];
    let ttl = ip[8];
    let mut src_ip = [0u8; 4];
    src_ip.copy_from_slice(&ip[12..16]);
    let mut dst_ip = [0u8; 4];
    dst_ip.copy_from_slice(&ip[16..20]);
    // The IP packet proper; trailing Ethernet padding is cut off here.
    let ip_packet = &after_eth[..usize::from(total)];
    let ip_payload = &ip_packet[IPV4_HEADER_LEN..];

    // UDP.
    let Some(udp) = ip_payload.first_chunk::<UDP_HEADER_LEN>() else {
        return Err(ParseError::TruncatedUdp {
            len: ip_payload.len(),
        });
    };
    let src_port = u16::from_be_bytes([udp[0], udp[1]]);
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    if dst_port != ROCEV2_PORT {
        return Err(ParseError::UdpPort(dst_port));
    }
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]);
    if usize::from(udp_len) < UDP_HEADER_LEN || usize::from(udp_len) > ip_payload.len() {
        return Err(ParseError::UdpLength {
            udp_len,
            ip_payload: ip_payload.len(),
        });
    }
    // Like Linux's UDP layer, bytes past the UDP length are dropped.
    let udp_datagram = &ip_payload[..usize::from(udp_len)];
    if u16::from_be_bytes([udp[6], udp[7]]) != 0 {
        // Linux verifies a non-zero checksum before handing the packet to rxe's tunnel
        // socket; the ICRC does not cover this field, so this is its only protection.
        let pseudo = u32::from(u16::from_be_bytes([src_ip[0], src_ip[1]]))
            + u32::from(u16::from_be_bytes([src_ip[2], src_ip[3]]))
            + u32::from(u16::from_be_bytes([dst_ip[0], dst_ip[1]]))
            + u32::from(u16::from_be_bytes([dst_ip[2], dst_ip[3]]))
            + u32::from(IPPROTO_UDP)
            + u32::from(udp_len);
        if ones_complement_sum(pseudo, udp_datagram) != 0xFFFF {
            return Err(ParseError::UdpChecksum);
        }
    }
    let udp_payload = &udp_datagram[UDP_HEADER_LEN..];

    // BTH.
    let Some(bth) = udp_payload.first_chunk::<BTH_LEN>() else {
        return Err(ParseError::TruncatedBth {
            len: udp_payload.len(),
        });
    };
    let tver = bth[1] & 0x0F;
    if tver != 0 {
        return Err(ParseError::BthVersion(tver));
    }
    let op = bth[0];
    let Some(info) = opcode_info(op) else {
        let bth = unsupported(bth, ip_packet, udp_payload, check_icrc)?;
        return Err(ParseError::Unsupported(Unsupported {
            dst_mac,
            src_ip,
            dst_ip,
            bth,
        }));
    };
    let header_len = info.header_len();
    if udp_payload.len() < header_len + ICRC_LEN {
        return Err(ParseError::TruncatedHeaders {
            opcode: op,
            need: header_len + ICRC_LEN,
            have: udp_payload.len(),
        });
    }
    let pad = (bth[1] >> 4) & 0x03;
    let between = udp_payload.len() - header_len - ICRC_LEN;
    if usize::from(pad) > between {
        return Err(ParseError::BadPad {
            pad,
            available: between,
        });
    }
    if !info.has_payload && between != 0 {
        return Err(ParseError::UnexpectedPayload {
            opcode: op,
            len: between,
        });
    }
    if check_icrc {
        verify_icrc(ip_packet, udp_payload)?;
    }
    let covered_udp = &udp_payload[..udp_payload.len() - ICRC_LEN];
    let mut hdrs = Headers {
        bth: read_bth(bth),
        ..Headers::default()
    };

    // Extension headers, in the table's wire order.
    let truncated = ParseError::TruncatedHeaders {
        opcode: op,
        need: header_len + ICRC_LEN,
        have: udp_payload.len(),
    };
    let mut r = Reader {
        buf: &covered_udp[BTH_LEN..header_len],
    };
    for &h in info.ext_headers {
        match h {
            ExtHeader::Reth => {
                hdrs.reth = Some(Reth {
                    va: r.u64().ok_or(truncated)?,
                    rkey: r.u32().ok_or(truncated)?,
                    dma_len: r.u32().ok_or(truncated)?,
                });
            }
            ExtHeader::Aeth => {
                let word = r.u32().ok_or(truncated)?;
                hdrs.aeth = Some(Aeth {
                    syndrome: (word >> 24) as u8,
                    msn: word & MASK_24,
                });
            }
            ExtHeader::AtomicEth => {
                hdrs.atomic = Some(AtomicEth {
                    va: r.u64().ok_or(truncated)?,
                    rkey: r.u32().ok_or(truncated)?,
                    swap_add: r.u64().ok_or(truncated)?,
                    compare: r.u64().ok_or(truncated)?,
                });
            }
            ExtHeader::AtomicAckEth => {
                hdrs.atomic_ack = Some(AtomicAckEth {
                    orig: r.u64().ok_or(truncated)?,
                });
            }
            ExtHeader::Imm => hdrs.imm = Some(r.take().ok_or(truncated)?),
            ExtHeader::Ieth => hdrs.ieth = Some(r.u32().ok_or(truncated)?),
            ExtHeader::Feth => hdrs.feth = Some(r.u32().ok_or(truncated)?),
            ExtHeader::Deth => {
                hdrs.deth = Some(Deth {
                    qkey: r.u32().ok_or(truncated)?,
                    src_qp: r.u32().ok_or(truncated)? & MASK_24,
                });
            }
            ExtHeader::Dceth => {
                let hi = r.u32().ok_or(truncated)?;
                let lo = r.u32().ok_or(truncated)?;
                let dci_qpn = r.u32().ok_or(truncated)? & MASK_24;
                r.u32().ok_or(truncated)?;
                hdrs.dceth = Some(Dceth {
                    dc_key: u64::from(hi) << 32 | u64::from(lo),
                    dci_qpn,
                });
            }
        }
    }

    let payload = &covered_udp[header_len..covered_udp.len() - usize::from(pad)];
    Ok(Packet {
        src_mac,
        dst_mac,
        src_ip,
        dst_ip,
        src_port,
        ttl,
        tos,
        hdrs,
        payload,
    })
}

/// The BTH of a frame whose opcode [`opcode_info`] does not know, if [`foreign`] says
/// the specification defines it and the frame is sound as far as can be told without its
/// headers' layout: room for a BTH and the ICRC, and the ICRC (unless `check_icrc` is
/// false). Otherwise the error that drops it: the opcode is a reserved value, or the frame
/// is short or damaged.
fn unsupported(
    bth: &[u8; BTH_LEN],
    ip_packet: &[u8],
    udp_payload: &[u8],
    check_icrc: bool,
) -> Result<Bth, ParseError> {
    let op = bth[0];
    if foreign(op).is_none() {
        return Err(ParseError::UnknownOpcode(op));
    }
    if udp_payload.len() < BTH_LEN + ICRC_LEN {
        return Err(ParseError::TruncatedHeaders {
            opcode: op,
            need: BTH_LEN + ICRC_LEN,
            have: udp_payload.len(),
        });
    }
    if check_icrc {
        verify_icrc(ip_packet, udp_payload)?;
    }
    Ok(read_bth(bth))
}

/// Checks the ICRC of the RoCEv2 packet `udp_payload` (BTH to ICRC, at least four bytes)
/// that ends `ip_packet`: computed over the IP packet up to the ICRC, as the sender did.
fn verify_icrc(ip_packet: &[u8], udp_payload: &[u8]) -> Result<(), ParseError> {
    let icrc_at = udp_payload.len() - ICRC_LEN;
    let mut found = [0u8; ICRC_LEN];
    found.copy_from_slice(&udp_payload[icrc_at..]);
    let found = u32::from_le_bytes(found);
    let covered_len = IPV4_HEADER_LEN + UDP_HEADER_LEN + icrc_at;
    let computed = icrc(&ip_packet[..covered_len]);
    if found != computed {
        return Err(ParseError::Icrc { found, computed });
    }
    Ok(())
}

/// The fields of the 12 bytes of a BTH.
fn read_bth(bth: &[u8; BTH_LEN]) -> Bth {
    let qpn_word = u32::from_be_bytes([bth[4], bth[5], bth[6], bth[7]]);
    let psn_word = u32::from_be_bytes([bth[8], bth[9], bth[10], bth[11]]);
    Bth {
        opcode: bth[0],
        solicited: bth[1] & 0x80 != 0,
        mig_req: bth[1] & 0x40 != 0,
        pad: (bth[1] >> 4) & 0x03,
        tver: bth[1] & 0x0F,
        pkey: u16::from_be_bytes([bth[2], bth[3]]),
        fecn: qpn_word & 0x8000_0000 != 0,
        becn: qpn_word & 0x4000_0000 != 0,
        dest_qp: qpn_word & MASK_24,
        ack_req: psn_word & 0x8000_0000 != 0,
        psn: psn_word & MASK_24,
    }
}
