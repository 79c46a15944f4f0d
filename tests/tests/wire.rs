//! The frames on the device's internal switch, captured with `rnicd --pcap`, checked by an
//! implementation independent of the device's: the pcap format, the Ethernet, IPv4 and UDP
//! headers, and every frame's ICRC, recomputed here as Linux rxe defines it with a bitwise
//! CRC-32 that shares no code with rnicd (`rnic_tests::wire`).

use std::time::Duration;

use rnic_driver::verbs::{RecvWr, SendWr, WcStatus, WrOpcode};
use rnic_tests::verbs_pair::{pair, poll_n, PairOptions};
use rnic_tests::wire::{expected_icrc, ipv4_checksum, pcap_frames};
use rnic_tests::Rnicd;

#[test]
fn every_frame_on_the_switch_has_rxe_headers_and_icrc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("switch.pcap");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().expect("utf-8 path")]);
    {
        let o = PairOptions {
            mtu: rnic_driver::verbs::mtu::MTU_256,
            ..PairOptions::default()
        };
        let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
        let t = Duration::from_secs(10);
        // A multi-packet SEND with immediate, a multi-packet WRITE, a READ, and both atomics:
        // every header the transport uses.
        b.qp.post_recv(&RecvWr {
            wr_id: 1,
            sges: vec![b.mr.sge(0, 4096)],
        })
        .expect("recv");
        let wrs = [
            WrOpcode::SendWithImm(0x1234_5678),
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(8192),
                rkey: b.mr.rkey(),
            },
            WrOpcode::RdmaRead {
                remote_addr: b.mr.addr(8192),
                rkey: b.mr.rkey(),
            },
        ];
        for (i, opcode) in wrs.into_iter().enumerate() {
            let len = 1000 + i as u32;
            let wr = SendWr {
                wr_id: 10 + i as u64,
                opcode,
                sges: vec![a.mr.sge(65536, len as usize)],
                signaled: true,
                ..SendWr::default()
            };
            a.qp.post_send(&wr).expect("post");
        }
        for (i, opcode) in [
            WrOpcode::AtomicFetchAdd {
                remote_addr: b.mr.addr(0x10000),
                rkey: b.mr.rkey(),
                add: 5,
            },
            WrOpcode::AtomicCmpSwp {
                remote_addr: b.mr.addr(0x10000),
                rkey: b.mr.rkey(),
                compare: 5,
                swap: 9,
            },
        ]
        .into_iter()
        .enumerate()
        {
            let wr = SendWr {
                wr_id: 20 + i as u64,
                opcode,
                sges: vec![a.mr.sge(0x20000 + 8 * i, 8)],
                signaled: true,
                ..SendWr::default()
            };
            a.qp.post_send(&wr).expect("post");
        }
        let done = poll_n(&a.cq, 5, t);
        assert_eq!(done.len(), 5, "{done:?}");
        assert!(
            done.iter().all(|w| w.status == Ok(WcStatus::Success)),
            "{done:?}"
        );
        assert_eq!(poll_n(&b.cq, 1, t).len(), 1);
    }
    assert!(rnicd.stop_with(libc::SIGTERM).success());

    let frames = pcap_frames(&std::fs::read(&pcap).expect("pcap written"));
    // 4 SEND packets and 4 WRITE packets, which arrive together and draw one coalesced
    // ACK, a READ request + 4 responses, two atomics + two atomic ACKs: 18, more only if
    // a timer made the requester resend.
    assert!(frames.len() >= 18, "{} frames captured", frames.len());
    let mut opcodes = std::collections::BTreeSet::new();
    for (i, f) in frames.iter().enumerate() {
        assert!(f.len() >= 14 + 20 + 8 + 12 + 4, "frame {i} too short");
        assert_eq!(&f[12..14], &[0x08, 0x00], "frame {i}: IPv4 ethertype");
        let ip = &f[14..34];
        assert_eq!(ip[0], 0x45, "frame {i}: IPv4, 20-byte header");
        assert_eq!(ip[9], 17, "frame {i}: UDP");
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            f.len() - 14,
            "frame {i}: IPv4 total length"
        );
        assert_eq!(ipv4_checksum(ip), 0, "frame {i}: IPv4 header checksum");
        let udp = &f[34..42];
        assert_eq!(
            u16::from_be_bytes([udp[2], udp[3]]),
            4791,
            "frame {i}: RoCEv2 port"
        );
        assert!(
            u16::from_be_bytes([udp[0], udp[1]]) >= 0xC000,
            "frame {i}: source port in the flow-entropy range"
        );
        assert_eq!(
            usize::from(u16::from_be_bytes([udp[4], udp[5]])),
            f.len() - 34,
            "frame {i}: UDP length"
        );
        let bth = &f[42..54];
        assert_eq!(bth[1] & 0x0F, 0, "frame {i}: transport version 0");
        assert_eq!(
            u16::from_be_bytes([bth[2], bth[3]]),
            0xFFFF,
            "frame {i}: default P_Key"
        );
        assert_eq!(
            (f.len() - 4 - 14) % 4,
            0,
            "frame {i}: packet length a multiple of 4"
        );
        let icrc = u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap());
        assert_eq!(
            icrc,
            expected_icrc(f),
            "frame {i} (opcode {:#04x}): ICRC",
            bth[0]
        );
        opcodes.insert(bth[0]);
    }
    // SEND first/middle/last with immediate, WRITE first/middle/last, READ request and
    // responses, both atomics, their acknowledgements.
    for op in [
        0x00, 0x01, 0x03, 0x06, 0x07, 0x08, 0x0c, 0x0d, 0x0e, 0x0f, 0x11, 0x12, 0x13, 0x14,
    ] {
        assert!(
            opcodes.contains(&op),
            "opcode {op:#04x} not seen; saw {opcodes:x?}"
        );
    }
}
