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
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(bytes[at + 12..at + 16].try_into().unwrap()) as usize;
        assert_eq!(incl, orig, "frames are captured whole");
        frames.push(bytes[at + 16..at + 16 + incl].to_vec());
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

/// The UDP payload of a RoCEv2 datagram from `src` to `dst` (IPv4 address and UDP port
/// each): `transport` followed by its ICRC, computed with this module's own CRC over the
/// canonical IPv4 and UDP headers a receiver rebuilds from the datagram (no options, IP ID
/// 0, DF, destination port 4791; TOS, TTL and checksums are masked by the ICRC anyway).
pub fn datagram(src: ([u8; 4], u16), dst: [u8; 4], transport: &[u8]) -> Vec<u8> {
    let udp_len = 8 + transport.len() + 4;
    let ip_len = 20 + udp_len;
    let mut frame = vec![0u8; 14];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&[0x45, 0]);
    frame.extend_from_slice(&(ip_len as u16).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&src.0);
    frame.extend_from_slice(&dst);
    frame.extend_from_slice(&src.1.to_be_bytes());
    frame.extend_from_slice(&ROCEV2_PORT.to_be_bytes());
    frame.extend_from_slice(&(udp_len as u16).to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(transport);
    frame.extend_from_slice(&[0; 4]);
    let icrc = expected_icrc(&frame);
    let mut payload = transport.to_vec();
    payload.extend_from_slice(&icrc.to_le_bytes());
    payload
}

/// Protocols Wireshark tries on InfiniBand payloads by heuristics. The payloads here are
/// test patterns, which some of them misread (and then call the frame malformed).
const PAYLOAD_HEURISTICS: [&str; 8] = [
    "rpcordma",
    "smb_direct",
    "smc",
    "nvme-rdma",
    "lnet",
    "iser",
    "infiniband_sdp",
    "fcoib",
];

/// Runs tshark with `args`, payload heuristics off; fails naming the fix when tshark is
/// not installed.
pub fn tshark(args: &[&str]) -> String {
    let mut command = std::process::Command::new("tshark");
    for p in PAYLOAD_HEURISTICS {
        command.args(["--disable-protocol", p]);
    }
    let out = match command.args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "tshark is not installed: run `bash qemu-scripts/setup.sh` as root (it installs \
             Debian's tshark), then run this test again"
        ),
        Err(e) => panic!("cannot run tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

/// Asserts, by tshark, that the capture `pcap` holds more than `min_roce` RoCEv2 frames
/// (Ethernet, IPv4, UDP 4791, InfiniBand transport) and no frame Wireshark calls malformed.
pub fn assert_clean_roce_capture(pcap: &std::path::Path, min_roce: usize) {
    let path = pcap.to_str().expect("UTF-8 path");
    let roce = tshark(&["-r", path, "-Y", "infiniband"]).lines().count();
    assert!(
        roce > min_roce,
        "{path}: {roce} RoCEv2 frames, expected more than {min_roce}"
    );
    let malformed = tshark(&["-r", path, "-Y", "_ws.malformed"]);
    assert!(
        malformed.is_empty(),
        "{path}: malformed frames:\n{malformed}"
    );
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
