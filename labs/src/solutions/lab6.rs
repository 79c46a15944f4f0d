//! Lab 6, the reference solution: a RoCEv2 frame, header by header (§7.11).

use crate::lab6::{Aeth, AtomicEth, Packet, Reth};
use crate::nic::Result;

/// The extension headers after the BTH, in wire order (§7.11).
#[derive(Clone, Copy, PartialEq)]
enum Ext {
    Reth,
    Aeth,
    AtomicEth,
    AtomicAckEth,
    Imm,
    Ieth,
}

/// What RC opcode `op` carries after its BTH, and whether it has a payload (§7.9's table
/// of the packets of a work request).
fn layout(op: u8) -> Option<(&'static [Ext], bool)> {
    use Ext::*;
    Some(match op {
        0x00 | 0x01 | 0x02 | 0x04 => (&[], true), // SEND FIRST, MIDDLE, LAST, ONLY
        0x03 | 0x05 => (&[Imm], true),            // SEND LAST, ONLY with immediate
        0x06 | 0x0A => (&[Reth], true),           // RDMA WRITE FIRST, ONLY
        0x07 | 0x08 => (&[], true),               // RDMA WRITE MIDDLE, LAST
        0x09 => (&[Imm], true),                   // RDMA WRITE LAST with immediate
        0x0B => (&[Reth, Imm], true),             // RDMA WRITE ONLY with immediate
        0x0C => (&[Reth], false),                 // RDMA READ request
        0x0D | 0x0F | 0x10 => (&[Aeth], true),    // READ response FIRST, LAST, ONLY
        0x0E => (&[], true),                      // READ response MIDDLE
        0x11 => (&[Aeth], false),                 // ACKNOWLEDGE
        0x12 => (&[Aeth, AtomicAckEth], false),   // ATOMIC ACKNOWLEDGE
        0x13 | 0x14 => (&[AtomicEth], false),     // COMPARE_SWAP, FETCH_ADD
        0x16 | 0x17 => (&[Ieth], true),           // SEND LAST, ONLY with invalidate
        _ => return None,
    })
}

/// Big-endian reads that fail instead of panicking.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or("the headers run past the end of the packet")?;
        self.0 = rest;
        Ok(*head)
    }
    fn u32(&mut self) -> Result<u32> {
        self.bytes().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Result<u64> {
        self.bytes().map(u64::from_be_bytes)
    }
}

/// Steps 1-9.
pub fn parse(frame: &[u8]) -> Result<Packet> {
    let mut p = Packet::default();

    // Step 1: Ethernet (14 bytes), IPv4 (20, no options), UDP (8) to port 4791.
    if frame.len() < 14 + 20 + 8 {
        return Err(format!(
            "{} bytes: too short for Ethernet, IPv4 and UDP",
            frame.len()
        ));
    }
    p.dst_mac.copy_from_slice(&frame[0..6]);
    p.src_mac.copy_from_slice(&frame[6..12]);
    if frame[12..14] != [0x08, 0x00] {
        return Err("not IPv4".into());
    }
    let ip = &frame[14..];
    if ip[0] != 0x45 {
        return Err(format!("IPv4 version and IHL {:#04x}, not 0x45", ip[0]));
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < 20 + 8 || total > ip.len() {
        return Err(format!(
            "IPv4 total length {total} with {} bytes present",
            ip.len()
        ));
    }
    if ip[9] != 17 {
        return Err("not UDP".into());
    }
    p.src_ip.copy_from_slice(&ip[12..16]);
    p.dst_ip.copy_from_slice(&ip[16..20]);
    // Ethernet padding after the IPv4 packet is not part of it.
    let udp = &ip[20..total];
    p.src_port = u16::from_be_bytes([udp[0], udp[1]]);
    if u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
        return Err("not UDP port 4791".into());
    }
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len != udp.len() {
        return Err(format!(
            "UDP length {udp_len} in an IPv4 packet with {} bytes of UDP",
            udp.len()
        ));
    }
    let roce = &udp[8..];

    // Step 2: the BTH (12 bytes), and the ICRC (4) at the end.
    if roce.len() < 12 + 4 {
        return Err("too short for a BTH and an ICRC".into());
    }
    p.opcode = roce[0];
    p.solicited = roce[1] & 0x80 != 0;
    p.pad = (roce[1] >> 4) & 3;
    p.pkey = u16::from_be_bytes([roce[2], roce[3]]);
    p.dest_qp = u32::from_be_bytes([0, roce[5], roce[6], roce[7]]);
    p.ack_req = roce[8] & 0x80 != 0;
    p.psn = u32::from_be_bytes([0, roce[9], roce[10], roce[11]]);
    let (exts, has_payload) = layout(p.opcode).ok_or(format!(
        "opcode {:#04x} is not an RC opcode of §7.9",
        p.opcode
    ))?;
    let body = &roce[12..roce.len() - 4];

    // Steps 3-6: the extension headers, in order.
    let mut r = Reader(body);
    for ext in exts {
        match ext {
            Ext::Reth => {
                p.reth = Some(Reth {
                    va: r.u64()?,
                    rkey: r.u32()?,
                    dma_len: r.u32()?,
                })
            }
            Ext::Aeth => {
                let word = r.u32()?;
                p.aeth = Some(Aeth {
                    syndrome: (word >> 24) as u8,
                    msn: word & 0xFF_FFFF,
                })
            }
            Ext::AtomicEth => {
                p.atomic = Some(AtomicEth {
                    va: r.u64()?,
                    rkey: r.u32()?,
                    swap_add: r.u64()?,
                    compare: r.u64()?,
                })
            }
            Ext::AtomicAckEth => p.atomic_ack = Some(r.u64()?),
            Ext::Imm => p.imm = Some(r.bytes()?),
            Ext::Ieth => p.ieth = Some(r.u32()?),
        }
    }

    // Step 7: what is left is payload and pad.
    let rest = r.0.len();
    if usize::from(p.pad) > rest || (!has_payload && rest != 0) {
        return Err(format!(
            "pad count {} with {rest} bytes after the headers",
            p.pad
        ));
    }
    let start = 14 + 20 + 8 + 12 + (body.len() - rest);
    p.payload = start..start + rest - usize::from(p.pad);

    // Step 8: the ICRC, little-endian.
    let icrc = &roce[roce.len() - 4..];
    p.icrc = u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]);
    Ok(p)
}
