//! An implementation of the wire format independent of the device's, for checking
//! captures (`rnicd --pcap`): the pcap format, the IPv4 header checksum, and the ICRC as
//! Linux rxe defines it, with a bitwise CRC-32 that shares no code with rnicd.

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
