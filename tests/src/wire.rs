//! An implementation of the wire format independent of the device's, for checking
//! captures (`rnicd --pcap`): the pcap format, the IPv4 header checksum, and the ICRC as
//! Linux rxe defines it, with a bitwise CRC-32 that shares no code with rnicd; and tshark,
//! Wireshark's decoder, as a second opinion.

/// CRC-32 (IEEE 802.3, reflected, as zlib's crc32) one bit at a time.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The ICRC of an Ethernet frame carrying IPv4/UDP/RoCEv2, as rxe computes it: over eight
/// 0xFF bytes, then IPv4 with TOS, TTL and checksum all ones, UDP with checksum all ones,
/// the BTH with byte 4 (FECN, BECN, reserved bits) all ones, and the rest up to the ICRC.
pub fn expected_icrc(frame: &[u8]) -> u32 {
    let mut masked = vec![0xFFu8; 8];
    let rest = &frame[14..frame.len() - 4];
    let mut bytes = rest.to_vec();
    bytes[1] = 0xFF; // TOS
    bytes[8] = 0xFF; // TTL
    bytes[10] = 0xFF; // IPv4 header checksum
    bytes[11] = 0xFF;
    bytes[20 + 6] = 0xFF; // UDP checksum
    bytes[20 + 7] = 0xFF;
    bytes[28 + 4] = 0xFF; // BTH byte 4
    masked.extend_from_slice(&bytes);
    crc32(&masked)
}

/// The ICRC a frame carries (its last 4 bytes, little-endian as rxe stores it).
pub fn carried_icrc(frame: &[u8]) -> u32 {
    u32::from_le_bytes(frame[frame.len() - 4..].try_into().expect("4 bytes"))
}

/// The IPv4 header checksum field's value for `header` (0 when the checksum is right).
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in header.chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The frames of a classic little-endian pcap file.
pub fn pcap_frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    pcap_records(bytes).into_iter().map(|(_, f)| f).collect()
}

/// The frames of a classic little-endian pcap file, each with its capture time in
/// seconds.
pub fn pcap_records(bytes: &[u8]) -> Vec<(f64, Vec<u8>)> {
    assert!(bytes.len() >= 24, "pcap too short");
    assert_eq!(
        u32::from_le_bytes(bytes[0..4].try_into().unwrap()),
        0xA1B2_C3D4,
        "pcap magic"
    );
    assert_eq!(
        u32::from_le_bytes(bytes[20..24].try_into().unwrap()),
        1,
        "link type Ethernet"
    );
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let time = f64::from(word(at)) + f64::from(word(at + 4)) * 1e-6;
        let incl = word(at + 8) as usize;
        let orig = word(at + 12) as usize;
        assert_eq!(incl, orig, "frames are captured whole");
        frames.push((time, bytes[at + 16..at + 16 + incl].to_vec()));
        at += 16 + incl;
    }
    assert_eq!(at, bytes.len(), "no trailing garbage");
    frames
}

/// RoCEv2's UDP destination port.
pub const ROCEV2_PORT: u16 = 4791;

/// A Base Transport Header, field by field, for crafting packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    /// OpCode.
    pub opcode: u8,
    /// Byte 1 whole: SE (bit 7), MigReq (6), PadCnt (5:4), TVer (3:0).
    pub flags: u8,
    /// P_Key.
    pub pkey: u16,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl Bth {
    /// A BTH as a well-behaved sender writes it: no flags, the default P_Key.
    pub fn new(opcode: u8, dest_qp: u32, psn: u32) -> Self {
        Self {
            opcode,
            flags: 0,
            pkey: 0xFFFF,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// The 12 bytes on the wire.
    pub fn bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4..8].copy_from_slice(&(self.dest_qp & 0xFF_FFFF).to_be_bytes());
        b[8..12].copy_from_slice(&(self.psn & 0xFF_FFFF).to_be_bytes());
        b[8] = u8::from(self.ack_req) << 7;
        b
    }
}

/// An RDMA Extended Transport Header: virtual address, R_Key, DMA length.
pub fn reth(va: u64, rkey: u32, len: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&va.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&len.to_be_bytes());
    b
}

/// The transport part of a packet (BTH, extension headers, payload and pad) with the pad
/// count set to what the payload needs, as every sender writes it.
pub fn transport(bth: Bth, ext: &[u8], payload: &[u8]) -> Vec<u8> {
    let pad = (4 - payload.len() % 4) % 4;
    let bth = Bth {
        flags: (bth.flags & !0x30) | ((pad as u8) << 4),
        ..bth
    };
    let mut t = bth.bytes().to_vec();
    t.extend_from_slice(ext);
    t.extend_from_slice(payload);
    t.resize(t.len() + pad, 0);
    t
}

/// How a sender writes the IPv4 and UDP headers of a RoCEv2 frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct IpStyle {
    /// The IPv4 identification (rnicd and a socket's kernel send 0 with DF; Linux rxe
    /// sends its counter).
    pub ip_id: u16,
    /// Whether the UDP checksum is computed (else 0, "none").
    pub udp_checksum: bool,
}

/// A whole Ethernet frame carrying a RoCEv2 packet from `src` (IPv4 address and UDP
/// port) to `dst`, with MACs `macs` (destination, source): IPv4 without options, DF,
/// TTL 64, header checksum right, the IP ID and UDP checksum as `style` says, and the
/// ICRC computed with this module's own CRC over the headers exactly as written.
pub fn roce_frame(
    macs: ([u8; 6], [u8; 6]),
    src: ([u8; 4], u16),
    dst: [u8; 4],
    style: IpStyle,
    transport: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + transport.len() + 4;
    let ip_len = 20 + udp_len;
    let mut frame = macs.0.to_vec();
    frame.extend_from_slice(&macs.1);
    frame.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
    frame.extend_from_slice(&(ip_len as u16).to_be_bytes());
    frame.extend_from_slice(&style.ip_id.to_be_bytes());
    frame.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&src.0);
    frame.extend_from_slice(&dst);
    let checksum = ipv4_checksum(&frame[14..34]);
    frame[24..26].copy_from_slice(&checksum.to_be_bytes());
    frame.extend_from_slice(&src.1.to_be_bytes());
    frame.extend_from_slice(&ROCEV2_PORT.to_be_bytes());
    frame.extend_from_slice(&(udp_len as u16).to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(transport);
    frame.extend_from_slice(&[0; 4]);
    let icrc = expected_icrc(&frame);
    let end = frame.len();
    frame[end - 4..].copy_from_slice(&icrc.to_le_bytes());
    if style.udp_checksum {
        // Over the pseudo-header (addresses, protocol, length) and the UDP datagram.
        let mut pseudo = frame[26..34].to_vec();
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
        pseudo.extend_from_slice(&frame[34..]);
        if pseudo.len() % 2 == 1 {
            pseudo.push(0);
        }
        let c = match ipv4_checksum(&pseudo) {
            0 => 0xFFFF,
            c => c,
        };
        frame[40..42].copy_from_slice(&c.to_be_bytes());
    }
    frame
}

/// The UDP payload of a RoCEv2 datagram from `src` to `dst` (IPv4 address and UDP port
/// each): `transport` followed by its ICRC, computed with this module's own CRC over the
/// canonical IPv4 and UDP headers a receiver rebuilds from the datagram (no options, IP ID
/// 0, DF, destination port 4791; TOS, TTL and checksums are masked by the ICRC anyway).
pub fn datagram(src: ([u8; 4], u16), dst: [u8; 4], transport: &[u8]) -> Vec<u8> {
    roce_frame(([0; 6], [0; 6]), src, dst, IpStyle::default(), transport)[42..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn a_crafted_packet_pads_to_four_bytes_and_carries_its_icrc() {
        let t = transport(Bth::new(0x0a, 0x12, 7), &reth(1, 2, 3), &[9; 3]);
        assert_eq!(t.len(), 12 + 16 + 4);
        assert_eq!(t[1] >> 4 & 3, 1, "one pad byte");
        let d = datagram(([127, 0, 0, 1], 0xC001), [127, 0, 0, 2], &t);
        assert_eq!(&d[..t.len()], &t[..]);
        assert_eq!(d.len(), t.len() + 4);
    }
}
