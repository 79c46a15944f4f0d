//! Lab 6, your solution: read a RoCEv2 frame header by header (docs/labs/lab6.md).
//! `cargo run -p rnic-labs -- check 6` judges it step by step; `cargo run -p rnic-labs --
//! capture 6 FILE` writes the frames it is judged on, for Wireshark.

#![allow(unreachable_code, unused_variables, unused_imports, unused_mut)]
// The skeleton compiles as shipped: what is still to write is `todo!()`.
#![allow(clippy::diverging_sub_expression)]

use crate::lab6::{Aeth, AtomicEth, Packet, Reth};
use crate::nic::Result;

/// Reads `frame` (Ethernet to ICRC, as captured) into a [`Packet`], or says why it
/// cannot. Never panics: check every length before you index (step 9).
pub fn parse(frame: &[u8]) -> Result<Packet> {
    let mut p = Packet::default();

    // Step 1 (§7.11 "Wire format"): Ethernet II (14 bytes: destination MAC, source MAC,
    // EtherType 0x0800), IPv4 (20 bytes, no options: the addresses at IPv4 bytes 12-19,
    // the total length at bytes 2-3, which says where the packet ends), UDP (8 bytes:
    // source port, destination port 4791, length). Network fields are big-endian.
    todo!("step 1: Ethernet, IPv4, UDP");

    // Step 2 (§7.11 "Base Transport Header"): the 12 bytes after UDP: opcode, SE, pad
    // count, P_Key, the 24-bit destination QP, AckReq and the 24-bit PSN.
    todo!("step 2: the BTH");

    // Steps 3-6 (§7.9 "Packets of a work request", §7.11 "Extension headers"): which
    // headers follow the BTH depends on the opcode, in the order RETH, AETH, AtomicETH,
    // AtomicAckETH, ImmDt, IETH. Fill p.reth, p.aeth, p.atomic, p.atomic_ack, p.imm,
    // p.ieth for those the opcode carries.
    todo!("step 3: RETH");
    todo!("step 4: AETH");
    todo!("step 5: AtomicETH and AtomicAckETH");
    todo!("step 6: ImmDt and IETH");

    // Step 7: the payload is what lies between the extension headers and the pad (BTH
    // pad count) before the 4-byte ICRC: p.payload = its range of offsets in `frame`.
    todo!("step 7: the payload");

    // Step 8 (§7.11 "ICRC"): the last 4 bytes of the IPv4 packet, stored little-endian.
    todo!("step 8: the ICRC");
    Ok(p)
}
