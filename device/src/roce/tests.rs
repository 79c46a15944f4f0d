//! The frame format as a whole: what [`super::build`] makes, [`super::parse`] takes back
//! unchanged, and every damage to it is caught; frames as rxe sends them parse.

use proptest::prelude::*;

use super::build::*;
use super::hdr::*;
use super::icrc::icrc;
use super::opcode::tests::all_opcodes;
use super::opcode::{self, *};
use super::parse::*;

fn addressing() -> Addressing {
    Addressing {
        src_mac: [0x02, 0, 0, 0, 0, 1],
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_ip: [10, 0, 0, 1],
        dst_ip: [10, 0, 0, 2],
        src_port: udp_src_port(0, 0x11, 0x12),
        ttl: 64,
        tos: 0,
        ip_id: 1,
    }
}

/// Headers for `op` with every extension header it carries filled with fixed values.
fn headers_for(op: u8) -> Headers {
    let info = opcode_info(op).unwrap();
    let mut h = Headers {
        bth: Bth::new(op, 0x12, 100),
        ..Headers::default()
    };
    for &e in info.ext_headers {
        match e {
            ExtHeader::Reth => {
                h.reth = Some(Reth {
                    va: 0x1000,
                    rkey: 0x55,
                    dma_len: 64,
                })
            }
            ExtHeader::Aeth => h.aeth = Some(Aeth::ack(AETH_CREDIT_INVALID).with_msn(3)),
            ExtHeader::AtomicEth => {
                h.atomic = Some(AtomicEth {
                    va: 0x2000,
                    rkey: 0x66,
                    swap_add: 1,
                    compare: 2,
                })
            }
            ExtHeader::AtomicAckEth => h.atomic_ack = Some(AtomicAckEth { orig: 9 }),
            ExtHeader::Imm => h.imm = Some([1, 2, 3, 4]),
            ExtHeader::Ieth => h.ieth = Some(0x77),
            ExtHeader::Deth => {
                h.deth = Some(Deth {
                    qkey: 0x1111_2222,
                    src_qp: 0x12,
                })
            }
            ExtHeader::Dceth => {
                h.dceth = Some(Dceth {
                    dc_key: 0x1122_3344_5566_7788,
                    dci_qpn: 0x34,
                })
            }
            ExtHeader::Feth => h.feth = Some(0x11),
        }
    }
    h
}

fn frame_for(op: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    build(&addressing(), &headers_for(op), payload, &mut out).unwrap();
    out
}

/// Recomputes the IPv4 header checksum of a frame after a test changed its header.
fn fix_ip_checksum(frame: &mut [u8]) {
    let ip = ETH_HEADER_LEN;
    frame[ip + 10] = 0;
    frame[ip + 11] = 0;
    let c = !ones_complement_sum(0, &frame[ip..ip + IPV4_HEADER_LEN]);
    frame[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
}

/// Recomputes the ICRC of a frame after a test changed covered bytes.
fn fix_icrc(frame: &mut [u8]) {
    let end = frame.len() - ICRC_LEN;
    let c = icrc(&frame[ETH_HEADER_LEN..end]);
    frame[end..].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn an_unsealed_frame_sealed_is_the_built_frame_and_only_it_passes_the_icrc_check() {
    let payload: Vec<u8> = (0..77u8).collect();
    for op in [
        opcode::RC_RDMA_WRITE_FIRST,
        opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
    ] {
        let built = frame_for(op, &payload);
        let mut unsealed = Vec::new();
        build_headers(
            &addressing(),
            &headers_for(op),
            payload.len(),
            &mut unsealed,
        )
        .unwrap();
        unsealed.extend_from_slice(&payload);
        end_unsealed(&mut unsealed, payload.len());
        assert_eq!(unsealed.len(), built.len());
        assert!(matches!(parse(&unsealed), Err(ParseError::Icrc { .. })));
        assert_eq!(parse_unsealed(&unsealed).unwrap().payload, &payload[..]);
        seal(&mut unsealed);
        assert_eq!(unsealed, built, "byte for byte what build makes");
        assert_eq!(parse(&unsealed).unwrap(), parse_unsealed(&built).unwrap());
    }
}

#[test]
fn build_lays_out_headers_as_rxe() {
    let mut out = Vec::new();
    let mut hdrs = headers_for(opcode::RC_SEND_ONLY);
    hdrs.bth.solicited = true;
    hdrs.bth.becn = true;
    hdrs.bth.pad = 3; // ignored: computed from the payload
    build(&addressing(), &hdrs, &[0xAA; 6], &mut out).unwrap();
    assert_eq!(out.len(), 14 + 20 + 8 + 12 + 6 + 2 + 4);
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    let ip = &out[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 52);
    assert_eq!(&ip[6..8], &[0x40, 0x00]); // DF
    assert_eq!(ip[9], 17);
    let udp = &out[34..42];
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4791);
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 32);
    assert_eq!(&udp[6..8], &[0, 0]);
    let bth = &out[42..54];
    assert_eq!(bth[0], opcode::RC_SEND_ONLY);
    assert_eq!(bth[1], 0x80 | (2 << 4)); // SE, pad 2, tver 0
    assert_eq!(&bth[2..4], &[0xFF, 0xFF]);
    assert_eq!(&bth[4..8], &[0x40, 0x00, 0x00, 0x12]); // BECN, QPN
    assert_eq!(&bth[8..12], &[0x00, 0x00, 0x00, 100]);
    assert_eq!(&out[60..62], &[0, 0]); // pad bytes are zero
}

/// RDMA FLUSH and ATOMIC WRITE (IBTA 1.5) as rxe lays them out (rxe_opcode.c, rxe_hdr.h,
/// rxe_req.c): FLUSH is BTH, FETH (placement type in bits 3:0, selectivity level in bits
/// 5:4, big-endian), RETH, no payload; ATOMIC WRITE is BTH, RETH, the 8 bytes as the
/// application gave them; both are answered by an empty READ RESPONSE ONLY (BTH, AETH).
#[test]
fn flush_and_atomic_write_are_laid_out_as_rxe() {
    const BTH_AT: usize = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN;
    let reth = Reth {
        va: 0x0000_7F00_DEAD_B008,
        rkey: 0x0000_1234,
        dma_len: 0x00BC_614E,
    };
    let mut bth = Bth::new(opcode::RC_FLUSH, 0x11, 0xABCD);
    bth.ack_req = true;
    let flush = Headers {
        bth,
        feth: Some(rnic_abi::verbs::flush::feth(
            rnic_abi::verbs::flush::PERSISTENT,
            rnic_abi::verbs::flush::MR,
        )),
        reth: Some(reth),
        ..Headers::default()
    };
    let mut out = Vec::new();
    build(&addressing(), &flush, &[], &mut out).unwrap();
    assert_eq!(out.len(), BTH_AT + 32 + ICRC_LEN);
    let t = &out[BTH_AT..];
    assert_eq!(t[0], 0x1C);
    assert_eq!(t[1], 0); // no pad
    assert_eq!(&t[8..12], &[0x80, 0x00, 0xAB, 0xCD]); // AckReq, PSN
    assert_eq!(&t[12..16], &[0, 0, 0, 0x12]); // FETH: level 1 (MR), type 2 (persistent)
    assert_eq!(&t[16..24], &0x0000_7F00_DEAD_B008u64.to_be_bytes());
    assert_eq!(&t[24..28], &[0, 0, 0x12, 0x34]);
    assert_eq!(&t[28..32], &[0x00, 0xBC, 0x61, 0x4E]);
    let p = parse(&out).unwrap();
    assert_eq!((p.hdrs, p.payload), (flush, &[][..]));
    // rxe 6.12's ICRC of a FLUSH: its table has no payload offset for FLUSH, so after the
    // masked headers the CRC runs on over the 32 transport header bytes again, unmasked.
    let ip = &out[ETH_HEADER_LEN..out.len() - ICRC_LEN];
    let mut masked = ip.to_vec();
    for i in [1, 8, 10, 11, 26, 27, 32] {
        masked[i] = 0xFF;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xFF; 8]);
    h.update(&masked);
    h.update(&ip[28..]);
    assert_eq!(out[out.len() - ICRC_LEN..], h.finalize().to_le_bytes());

    let write = Headers {
        bth: Bth {
            opcode: opcode::RC_ATOMIC_WRITE,
            ..bth
        },
        reth: Some(Reth { dma_len: 8, ..reth }),
        ..Headers::default()
    };
    let value = *b"cccccccc";
    out.clear();
    build(&addressing(), &write, &value, &mut out).unwrap();
    assert_eq!(out.len(), BTH_AT + 28 + 8 + ICRC_LEN);
    let t = &out[BTH_AT..];
    assert_eq!((t[0], t[1]), (0x1D, 0));
    assert_eq!(&t[12..20], &0x0000_7F00_DEAD_B008u64.to_be_bytes());
    assert_eq!(&t[24..28], &[0, 0, 0, 8]);
    assert_eq!(&t[28..36], &value);
    let p = parse(&out).unwrap();
    assert_eq!((p.hdrs, p.payload), (write, &value[..]));

    // The answer to either: READ RESPONSE ONLY, AETH (ACK, MSN), nothing else.
    let answer = Headers {
        bth: Bth::new(opcode::RC_RDMA_READ_RESPONSE_ONLY, 0x12, 0xABCD),
        aeth: Some(Aeth::ack(AETH_CREDIT_INVALID).with_msn(7)),
        ..Headers::default()
    };
    out.clear();
    build(&addressing(), &answer, &[], &mut out).unwrap();
    assert_eq!(out.len(), BTH_AT + 16 + ICRC_LEN);
    // rxe's AETH_ACK_UNLIMITED syndrome (0x1F), then the MSN.
    assert_eq!(&out[BTH_AT + 12..BTH_AT + 16], &[0x1F, 0, 0, 7]);
}

#[test]
fn build_rejects_missing_and_unexpected_headers() {
    let mut out = vec![0xEE];
    for op in all_opcodes() {
        let full = headers_for(op);
        let info = opcode_info(op).unwrap();
        for &h in info.ext_headers {
            let mut hdrs = full;
            match h {
                ExtHeader::Reth => hdrs.reth = None,
                ExtHeader::Aeth => hdrs.aeth = None,
                ExtHeader::AtomicEth => hdrs.atomic = None,
                ExtHeader::AtomicAckEth => hdrs.atomic_ack = None,
                ExtHeader::Imm => hdrs.imm = None,
                ExtHeader::Ieth => hdrs.ieth = None,
                ExtHeader::Deth => hdrs.deth = None,
                ExtHeader::Dceth => hdrs.dceth = None,
                ExtHeader::Feth => hdrs.feth = None,
            }
            assert_eq!(
                build(&addressing(), &hdrs, &[], &mut out),
                Err(BuildError::MissingHeader {
                    opcode: op,
                    header: h
                })
            );
        }
        if !info.carries(ExtHeader::Ieth) {
            let mut hdrs = full;
            hdrs.ieth = Some(1);
            assert_eq!(
                build(&addressing(), &hdrs, &[], &mut out),
                Err(BuildError::UnexpectedHeader {
                    opcode: op,
                    header: ExtHeader::Ieth
                })
            );
        }
        if !info.has_payload {
            assert_eq!(
                build(&addressing(), &full, &[1], &mut out),
                Err(BuildError::UnexpectedPayload { opcode: op, len: 1 })
            );
        }
    }
    let mut hdrs = headers_for(opcode::RC_SEND_ONLY);
    hdrs.bth.psn = 1 << 24;
    assert!(matches!(
        build(&addressing(), &hdrs, &[], &mut out),
        Err(BuildError::FieldTooWide { .. })
    ));
    hdrs.bth.psn = 0;
    hdrs.bth.dest_qp = 1 << 24;
    assert!(matches!(
        build(&addressing(), &hdrs, &[], &mut out),
        Err(BuildError::FieldTooWide { .. })
    ));
    hdrs.bth.opcode = 0x15;
    assert_eq!(
        build(&addressing(), &hdrs, &[], &mut out),
        Err(BuildError::UnknownOpcode(0x15))
    );
    let hdrs = headers_for(opcode::RC_SEND_ONLY);
    assert!(matches!(
        build(&addressing(), &hdrs, &vec![0; 65536], &mut out),
        Err(BuildError::TooLong { .. })
    ));
    // Nothing was appended by any failed build.
    assert_eq!(out, vec![0xEE]);
}

#[test]
fn a_sound_frame_of_a_foreign_opcode_says_whom_it_was_for_and_a_damaged_one_does_not() {
    // An XRC SEND, whose XRCETH the device never looks at (a BTH and the ICRC are all
    // it needs to tell it from damage): turn an RC SEND into one.
    let mut f = frame_for(opcode::RC_SEND_ONLY, b"hello");
    let bth = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN;
    f[bth] = 0xA4;
    fix_icrc(&mut f);
    let a = addressing();
    let want = Unsupported {
        dst_mac: a.dst_mac,
        src_ip: a.src_ip,
        dst_ip: a.dst_ip,
        bth: Bth {
            pad: 3,
            ..Bth::new(0xA4, 0x12, 100)
        },
    };
    assert_eq!(parse(&f), Err(ParseError::Unsupported(want)));
    assert_eq!(
        ParseError::Unsupported(want).to_string(),
        "XRC_SEND_ONLY (0xa4) is not an opcode this device takes"
    );
    // The ICRC still vouches for it.
    let mut damaged = f.clone();
    damaged[bth + BTH_LEN] ^= 1;
    assert!(matches!(parse(&damaged), Err(ParseError::Icrc { .. })));
    assert!(matches!(
        parse_unsealed(&damaged),
        Err(ParseError::Unsupported(_))
    ));
    // Too short for a BTH and an ICRC.
    let mut cut = frame_for(opcode::RC_ACKNOWLEDGE, &[]);
    cut[bth] = 0x80;
    let n = cut.len() - 8;
    cut.truncate(n);
    let ip_len = (n - ETH_HEADER_LEN) as u16;
    cut[ETH_HEADER_LEN + 2..ETH_HEADER_LEN + 4].copy_from_slice(&ip_len.to_be_bytes());
    cut[ETH_HEADER_LEN + IPV4_HEADER_LEN + 4..ETH_HEADER_LEN + IPV4_HEADER_LEN + 6]
        .copy_from_slice(&(ip_len - IPV4_HEADER_LEN as u16).to_be_bytes());
    fix_ip_checksum(&mut cut);
    assert_eq!(
        parse(&cut),
        Err(ParseError::TruncatedHeaders {
            opcode: 0x80,
            need: BTH_LEN + ICRC_LEN,
            have: BTH_LEN
        })
    );
    // A reserved opcode is refused before the ICRC, as before.
    let mut reserved = f.clone();
    reserved[bth] = 0x2C;
    assert_eq!(parse(&reserved), Err(ParseError::UnknownOpcode(0x2C)));
}

#[test]
fn build_appends_after_existing_bytes() {
    let mut out = vec![1, 2, 3];
    build(
        &addressing(),
        &headers_for(opcode::RC_SEND_ONLY),
        b"x",
        &mut out,
    )
    .unwrap();
    assert_eq!(&out[..3], &[1, 2, 3]);
    assert_eq!(parse(&out[3..]).unwrap().payload, b"x");
}

#[test]
fn parse_rejects_every_truncation() {
    for op in all_opcodes() {
        let payload: &[u8] = if opcode_info(op).unwrap().has_payload {
            b"abcdefg"
        } else {
            b""
        };
        let frame = frame_for(op, payload);
        assert!(parse(&frame).is_ok());
        for len in 0..frame.len() {
            assert!(parse(&frame[..len]).is_err(), "op {op:#x} len {len}");
        }
    }
    // A truncated frame whose IP and UDP lengths were made to agree still fails:
    // here only the ICRC is cut off, so the BTH/headers room check fires.
    let mut frame = frame_for(opcode::RC_ACKNOWLEDGE, &[]);
    let new_len = frame.len() - 4;
    frame.truncate(new_len);
    let ip_len = (new_len - ETH_HEADER_LEN) as u16;
    frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
    frame[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    fix_ip_checksum(&mut frame);
    assert!(matches!(
        parse(&frame),
        Err(ParseError::TruncatedHeaders { .. })
    ));
}

#[test]
fn parse_rejects_each_reason() {
    let good = frame_for(opcode::RC_SEND_ONLY, b"abcd");
    assert!(parse(&good).is_ok());

    let mut f = good.clone();
    f[12] = 0x86;
    f[13] = 0xDD;
    assert_eq!(parse(&f), Err(ParseError::NotIpv4(0x86DD)));

    let mut f = good.clone();
    f[14] = 0x65;
    fix_ip_checksum(&mut f);
    assert_eq!(parse(&f), Err(ParseError::IpVersion(6)));

    let mut f = good.clone();
    f[14] = 0x46;
    fix_ip_checksum(&mut f);
    assert_eq!(parse(&f), Err(ParseError::IpHeaderLength(6)));

    let mut f = good.clone();
    f[24] ^= 0x01; // checksum byte
    assert_eq!(parse(&f), Err(ParseError::IpChecksum));

    let mut f = good.clone();
    f[20] = 0x20; // MF
    fix_ip_checksum(&mut f);
    assert_eq!(parse(&f), Err(ParseError::IpFragment));

    let mut f = good.clone();
    f[23] = 6; // TCP
    fix_ip_checksum(&mut f);
    assert_eq!(parse(&f), Err(ParseError::NotUdp(6)));

    let mut f = good.clone();
    f[36..38].copy_from_slice(&4792u16.to_be_bytes());
    assert_eq!(parse(&f), Err(ParseError::UdpPort(4792)));

    let mut f = good.clone();
    f[38..40].copy_from_slice(&7u16.to_be_bytes());
    assert!(matches!(parse(&f), Err(ParseError::UdpLength { .. })));

    let mut f = good.clone();
    f[40] = 0x12; // a non-zero, wrong UDP checksum
    assert_eq!(parse(&f), Err(ParseError::UdpChecksum));

    let mut f = good.clone();
    f[43] |= 0x01; // tver 1
    fix_icrc(&mut f);
    assert_eq!(parse(&f), Err(ParseError::BthVersion(1)));

    let mut f = good.clone();
    f[42] = 0x15;
    fix_icrc(&mut f);
    assert_eq!(parse(&f), Err(ParseError::UnknownOpcode(0x15)));

    // An ACK whose opcode is turned into a WRITE_ONLY: no room for the RETH.
    let mut f = frame_for(opcode::RC_ACKNOWLEDGE, &[]);
    f[42] = opcode::RC_RDMA_WRITE_ONLY;
    fix_icrc(&mut f);
    assert_eq!(
        parse(&f),
        Err(ParseError::TruncatedHeaders {
            opcode: opcode::RC_RDMA_WRITE_ONLY,
            need: 32,
            have: 20
        })
    );

    // A zero-length SEND claiming 3 bytes of pad.
    let mut f = frame_for(opcode::RC_SEND_ONLY, &[]);
    f[43] |= 0x30;
    fix_icrc(&mut f);
    assert_eq!(
        parse(&f),
        Err(ParseError::BadPad {
            pad: 3,
            available: 0
        })
    );

    // A READ request with 4 bytes after its headers.
    let mut f = frame_for(opcode::RC_RDMA_READ_REQUEST, &[]);
    let mut longer = f.clone();
    longer.truncate(f.len() - 4);
    longer.extend_from_slice(&[0; 4]);
    longer.extend_from_slice(&[0; 4]);
    let ip_len = (longer.len() - ETH_HEADER_LEN) as u16;
    longer[16..18].copy_from_slice(&ip_len.to_be_bytes());
    longer[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    fix_ip_checksum(&mut longer);
    fix_icrc(&mut longer);
    assert_eq!(
        parse(&longer),
        Err(ParseError::UnexpectedPayload {
            opcode: opcode::RC_RDMA_READ_REQUEST,
            len: 4
        })
    );

    let last = f.len() - 1;
    f[last] ^= 0x80;
    assert!(matches!(parse(&f), Err(ParseError::Icrc { .. })));
}

#[test]
fn parse_accepts_valid_udp_checksum_and_ethernet_padding() {
    let mut f = frame_for(opcode::RC_SEND_ONLY, b"abc");
    set_udp_checksum(&mut f);
    assert_ne!(f[40..42], [0, 0]);
    let plain = frame_for(opcode::RC_SEND_ONLY, b"abc");
    let before = parse(&plain).unwrap();
    assert_eq!(parse(&f).unwrap(), before);

    // The smallest frame (58 bytes) padded to Ethernet's 60-byte minimum.
    let mut f = frame_for(opcode::RC_SEND_ONLY, &[]);
    assert_eq!(f.len(), 58);
    f.extend_from_slice(&[0xAB, 0xCD]);
    assert_eq!(parse(&f).unwrap().payload, b"");
}

/// A frame as Linux rxe sends it: IP ID not 0 (the kernel's counter), DF, TTL 64, a
/// per-QP UDP source port, and (when the stack checksums) a UDP checksum. Its ICRC
/// covers the header exactly as on the wire, IP ID included.
#[test]
fn a_frame_as_rxe_sends_it_parses_and_its_icrc_covers_the_ip_id() {
    let addr = Addressing {
        ip_id: 0xBEEF,
        src_port: 0xE61A,
        ..addressing()
    };
    let mut f = Vec::new();
    build(
        &addr,
        &headers_for(opcode::RC_RDMA_WRITE_ONLY),
        b"rxe!",
        &mut f,
    )
    .unwrap();
    set_udp_checksum(&mut f);
    assert_eq!(f[18..20], [0xBE, 0xEF], "IP ID");
    assert_eq!(f[20] & 0x40, 0x40, "DF");
    assert_eq!(f[22], 64, "TTL");
    assert_ne!(f[40..42], [0, 0], "UDP checksum");
    let p = parse(&f).expect("parses");
    assert_eq!(p.src_port, 0xE61A);
    assert_eq!(p.payload, b"rxe!");
    // The ICRC is computed over the IP ID as it is: another ID (checksum fixed) fails.
    let mut other_id = f.clone();
    other_id[19] ^= 1;
    fix_ip_checksum(&mut other_id);
    set_udp_checksum(&mut other_id);
    assert!(matches!(parse(&other_id), Err(ParseError::Icrc { .. })));
}

#[test]
fn every_single_bit_flip_after_ethernet_is_caught() {
    for op in [
        opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        opcode::RC_ATOMIC_ACKNOWLEDGE,
    ] {
        let payload: &[u8] = if opcode_info(op).unwrap().has_payload {
            b"hello"
        } else {
            b""
        };
        let frame = frame_for(op, payload);
        let good = parse(&frame).unwrap();
        for i in ETH_HEADER_LEN..frame.len() {
            for bit in 0..8 {
                let mut f = frame.clone();
                f[i] ^= 1 << bit;
                check_flip(&f, &good, i);
            }
        }
    }
}

/// The result of parsing `f`, which is a valid frame whose byte `i` had one bit
/// flipped. Must fail, except for the two fields the ICRC leaves out by design:
/// BTH byte 4 (FECN, BECN, reserved: rewritten by the network) and the UDP checksum
/// (a zero checksum turned non-zero is checked, and could in rare packets be right).
fn check_flip(f: &[u8], good: &Packet<'_>, i: usize) {
    let bth4 = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + 4;
    let udp_csum = ETH_HEADER_LEN + IPV4_HEADER_LEN + 6;
    match parse(f) {
        Err(_) => {}
        Ok(p) if i == bth4 => {
            let mut expected = *good;
            expected.hdrs.bth.fecn = p.hdrs.bth.fecn;
            expected.hdrs.bth.becn = p.hdrs.bth.becn;
            assert_eq!(p, expected);
        }
        Ok(p) if i == udp_csum || i == udp_csum + 1 => assert_eq!(p, *good),
        Ok(p) => panic!("flip in byte {i} accepted: {p:?}"),
    }
}

fn arb_reth() -> impl Strategy<Value = Reth> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| Reth {
        va,
        rkey,
        dma_len,
    })
}

fn arb_aeth() -> impl Strategy<Value = Aeth> {
    (any::<u8>(), 0..=MASK_24).prop_map(|(syndrome, msn)| Aeth { syndrome, msn })
}

fn arb_atomic() -> impl Strategy<Value = AtomicEth> {
    (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
        |(va, rkey, swap_add, compare)| AtomicEth {
            va,
            rkey,
            swap_add,
            compare,
        },
    )
}

prop_compose! {
    fn arb_bth(op: u8)(
        solicited in any::<bool>(),
        mig_req in any::<bool>(),
        pkey in any::<u16>(),
        fecn in any::<bool>(),
        becn in any::<bool>(),
        dest_qp in 0..=MASK_24,
        ack_req in any::<bool>(),
        psn in 0..=MASK_24,
    ) -> Bth {
        Bth { opcode: op, solicited, mig_req, pad: 0, tver: 0, pkey, fecn, becn,
              dest_qp, ack_req, psn }
    }
}

prop_compose! {
    fn arb_addressing()(
        src_mac in any::<[u8; 6]>(),
        dst_mac in any::<[u8; 6]>(),
        src_ip in any::<[u8; 4]>(),
        dst_ip in any::<[u8; 4]>(),
        src_port in any::<u16>(),
        ttl in any::<u8>(),
        tos in any::<u8>(),
        ip_id in any::<u16>(),
    ) -> Addressing {
        Addressing { src_mac, dst_mac, src_ip, dst_ip, src_port, ttl, tos, ip_id }
    }
}

/// An opcode, headers with every extension header it carries (random), and a payload
/// (0..=4096 bytes for opcodes that carry one, so all pad counts occur).
fn arb_packet() -> impl Strategy<Value = (Headers, Vec<u8>)> {
    proptest::sample::select(all_opcodes()).prop_flat_map(|op| {
        let info = opcode_info(op).unwrap();
        let max_len = if info.has_payload { 4096 } else { 0 };
        (
            arb_bth(op),
            arb_reth(),
            arb_aeth(),
            arb_atomic(),
            any::<u64>(),
            any::<[u8; 4]>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..=max_len),
        )
            .prop_map(move |(bth, reth, aeth, atomic, orig, imm, ieth, payload)| {
                let c = |h| info.carries(h);
                let hdrs = Headers {
                    bth,
                    reth: c(ExtHeader::Reth).then_some(reth),
                    aeth: c(ExtHeader::Aeth).then_some(aeth),
                    atomic: c(ExtHeader::AtomicEth).then_some(atomic),
                    atomic_ack: c(ExtHeader::AtomicAckEth).then_some(AtomicAckEth { orig }),
                    imm: c(ExtHeader::Imm).then_some(imm),
                    ieth: c(ExtHeader::Ieth).then_some(ieth),
                    // The IETH's value serves as Q_Key and source QP.
                    deth: c(ExtHeader::Deth).then_some(Deth {
                        qkey: ieth,
                        src_qp: ieth & MASK_24,
                    }),
                    dceth: c(ExtHeader::Dceth).then_some(Dceth {
                        dc_key: u64::from(ieth) << 8,
                        dci_qpn: ieth & MASK_24,
                    }),
                    feth: c(ExtHeader::Feth).then_some(ieth),
                };
                (hdrs, payload)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn build_parse_round_trip(addr in arb_addressing(), (hdrs, payload) in arb_packet()) {
        let mut out = Vec::new();
        build(&addr, &hdrs, &payload, &mut out).unwrap();
        let pad = (4 - payload.len() % 4) % 4;
        prop_assert_eq!(
            out.len(),
            ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN
                + opcode_info(hdrs.bth.opcode).unwrap().header_len()
                + payload.len() + pad + ICRC_LEN
        );
        let p = parse(&out).unwrap();
        let mut expected = hdrs;
        expected.bth.pad = pad as u8;
        prop_assert_eq!(p.hdrs, expected);
        prop_assert_eq!(p.payload, &payload[..]);
        prop_assert_eq!(p.src_mac, addr.src_mac);
        prop_assert_eq!(p.dst_mac, addr.dst_mac);
        prop_assert_eq!(p.src_ip, addr.src_ip);
        prop_assert_eq!(p.dst_ip, addr.dst_ip);
        prop_assert_eq!(p.src_port, addr.src_port);
        prop_assert_eq!(p.ttl, addr.ttl);
        prop_assert_eq!(p.tos, addr.tos);

        // The ICRC in the frame is what an independent reading of the spec gives (and,
        // for a FLUSH, of rxe's quirk: its transport headers once more, unmasked).
        let end = out.len() - ICRC_LEN;
        let mut masked = vec![0xFFu8; 8];
        masked.extend_from_slice(&out[ETH_HEADER_LEN..end]);
        for off in [1usize, 8, 10, 11, 26, 27, 32] {
            masked[8 + off] = 0xFF;
        }
        if hdrs.bth.opcode == opcode::RC_FLUSH {
            masked.extend_from_slice(&out[ETH_HEADER_LEN + 28..end]);
        }
        prop_assert_eq!(&out[end..], &crc32fast::hash(&masked).to_le_bytes()[..]);
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        let _ = parse(&bytes);
    }

    #[test]
    fn parse_never_panics_on_corrupted_frames(
        (hdrs, payload) in arb_packet(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut out = Vec::new();
        build(&addressing(), &hdrs, &payload, &mut out).unwrap();
        for (at, value) in edits {
            let i = at.index(out.len());
            out[i] = value;
        }
        if do_cut {
            let len = cut.index(out.len() + 1);
            out.truncate(len);
        }
        let _ = parse(&out);
    }

    #[test]
    fn random_single_bit_flips_are_caught(
        (hdrs, payload) in arb_packet(),
        at in any::<prop::sample::Index>(),
        bit in 0..8u8,
    ) {
        let mut frame = Vec::new();
        build(&addressing(), &hdrs, &payload, &mut frame).unwrap();
        let good = parse(&frame).unwrap();
        let i = ETH_HEADER_LEN + at.index(frame.len() - ETH_HEADER_LEN);
        let mut f = frame.clone();
        f[i] ^= 1 << bit;
        check_flip(&f, &good, i);
    }
}

/// A frame built by `build` at development time from [`fixed_frame_inputs`]
/// (RC_RDMA_WRITE_ONLY with AckReq and FECN set, TOS 0x02, TTL 64, a 5-byte payload
/// and so 3 pad bytes).
const FIXED_FRAME_HEX: &str = concat!(
    "525400abcdef5254001234560800",             // Ethernet
    "45020044123440004011df1ec0a86401c0a86402", // IPv4
    "c0de12b700300000",                         // UDP
    "0a30ffff800000118000abcd",                 // BTH
    "00007f00deadb0000000123400000005",         // RETH
    "68656c6c6f000000",                         // payload + pad
    "f5b05c69",                                 // ICRC
);
/// Its ICRC as computed independently with Python at development time:
/// `zlib.crc32(b'\xff'*8 + masked_headers + rest)`, where masked_headers is the IPv4
/// header with TOS, TTL and checksum set to 0xFF, the UDP header with its checksum
/// set to 0xFF, and the BTH with byte 4 set to 0xFF.
const FIXED_FRAME_ICRC: u32 = 0x695C_B0F5;

/// The inputs of [`FIXED_FRAME_HEX`].
fn fixed_frame_inputs() -> (Addressing, Headers, Vec<u8>) {
    let addr = Addressing {
        src_mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
        dst_mac: [0x52, 0x54, 0x00, 0xAB, 0xCD, 0xEF],
        src_ip: [192, 168, 100, 1],
        dst_ip: [192, 168, 100, 2],
        src_port: 0xC0DE,
        ttl: 64,
        tos: 0x02,
        ip_id: 0x1234,
    };
    let mut bth = Bth::new(opcode::RC_RDMA_WRITE_ONLY, 0x00_0011, 0x00_ABCD);
    bth.ack_req = true;
    bth.fecn = true;
    let hdrs = Headers {
        bth,
        reth: Some(Reth {
            va: 0x0000_7F00_DEAD_B000,
            rkey: 0x0000_1234,
            dma_len: 5,
        }),
        ..Headers::default()
    };
    (addr, hdrs, b"hello".to_vec())
}

fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn fixed_frame_is_built_byte_for_byte_and_its_icrc_matches_python() {
    let expected = from_hex(FIXED_FRAME_HEX);
    let (addr, hdrs, payload) = fixed_frame_inputs();
    let mut out = Vec::new();
    build(&addr, &hdrs, &payload, &mut out).unwrap();
    assert_eq!(out, expected);
    let end = expected.len() - ICRC_LEN;
    assert_eq!(icrc(&expected[ETH_HEADER_LEN..end]), FIXED_FRAME_ICRC);
    assert_eq!(expected[end..], FIXED_FRAME_ICRC.to_le_bytes());
    let p = parse(&expected).unwrap();
    assert_eq!(p.payload, b"hello");
    assert_eq!(p.hdrs.bth.pad, 3);
    assert!(p.hdrs.bth.fecn);
    assert_eq!(p.hdrs.reth, hdrs.reth);
}
