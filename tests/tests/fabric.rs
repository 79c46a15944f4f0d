//! RoCEv2 over a real network: two rnicd processes (`--net udp:127.0.1.1` and
//! `--net udp:127.0.2.1`, so their functions have disjoint loopback addresses), a QP on
//! vf0 of each, connected across them with nothing but each other's GID, carrying every
//! operation over real UDP sockets; and a capture of one side, checked by the independent
//! implementation in `rnic_tests::wire`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use rnic_driver::verbs::WrOpcode;
use rnic_tests::net::two_rnicd;
use rnic_tests::ops::{all_ops, atomics, ip, one, BIG};
use rnic_tests::tshark::{assert_nothing_flagged, tshark, tshark_fields};
use rnic_tests::verbs_pair::{
    connect, connect_qps, init_qp, pattern, read_mr, side, signaled, PairOptions,
};
use rnic_tests::wire::{carried_icrc, expected_icrc, ipv4_checksum, pcap_frames};
use rnic_tests::{bin, Rnicd};

#[test]
fn functions_of_two_rnicd_talk_over_udp_and_the_capture_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("b.pcap");
    let mut rnicd_a = Rnicd::start(1, &["--net", "udp:127.0.1.1"]);
    let mut rnicd_b = Rnicd::start(
        1,
        &[
            "--net",
            "udp:127.0.2.1",
            "--pcap",
            pcap.to_str().expect("utf-8 path"),
        ],
    );
    let o = PairOptions {
        buf_len: 4 << 20,
        ..PairOptions::default()
    };
    let (a_ip, b_ip);
    let mut pair_qpns = Vec::new();
    {
        let a = side(&rnicd_a.socket("vf0"), &o);
        let b = side(&rnicd_b.socket("vf0"), &o);
        // vf0 is function 1: ADDR + 1.
        (a_ip, b_ip) = (ip(a.gid), ip(b.gid));
        assert_eq!((a_ip, b_ip), ([127, 0, 1, 2], [127, 0, 2, 2]));
        connect(&a, &b, &o, 0x10, 0xFF_FFF0);
        pair_qpns.push((a.qp.qp_num(), b.qp.qp_num()));

        // Sizes from nothing to several 1 KiB MTUs, then a 1 MiB burst.
        for (i, len) in [0, 1, 3, 255, 1023, 1024, 1025, 2048, 3071, 4096, 5000, BIG]
            .into_iter()
            .enumerate()
        {
            all_ops(&a, &b, len, i as u64 + 1);
        }
        // Both engines asleep in epoll (no timer pending): the datagrams must wake B.
        std::thread::sleep(Duration::from_millis(50));
        atomics(&a, &b);
        // The other direction too.
        all_ops(&b, &a, 3000, 99);

        // A second QP pair: its own flow, so its own UDP source port.
        let qa = init_qp(&a, &a.cq, &o, o.access);
        let qb = init_qp(&b, &b.cq, &o, o.access);
        connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x500, 0x600);
        pair_qpns.push((qa.qp_num(), qb.qp_num()));
        let data = pattern(2500, 1234);
        a.mr.write(0, &data);
        qa.post_send(&signaled(
            7,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(0),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, 2500)],
        ))
        .expect("post_send");
        assert_eq!(one(&a).wr_id, 7);
        assert_eq!(read_mr(&b.mr, 0, 2500), data);
        drop((qa, qb));
    }
    assert!(rnicd_a.stop_with(libc::SIGTERM).success());
    assert!(rnicd_b.stop_with(libc::SIGTERM).success());
    let log_b = rnicd_b.log();
    assert!(log_b.contains("network udp:127.0.2.1:4791"), "{log_b}");

    // B's capture: what B sent (as built) and what it received (rebuilt from datagrams).
    let frames = pcap_frames(&std::fs::read(&pcap).expect("pcap written"));
    // 02:52 and B's VF0's address, 127.0.2.2 (§7.13).
    let b_mac = [0x02, 0x52, 127, 0, 2, 2];
    let mut from_a = 0;
    let mut from_b = 0;
    let mut opcodes = BTreeSet::new();
    // The UDP source port of the frames to each QP.
    let mut port_of_qp: BTreeMap<u32, BTreeSet<u16>> = BTreeMap::new();
    for (i, f) in frames.iter().enumerate() {
        assert!(f.len() >= 14 + 20 + 8 + 12 + 4, "frame {i} too short");
        assert_eq!(&f[12..14], &[0x08, 0x00], "frame {i}: IPv4");
        let ipv4 = &f[14..34];
        assert_eq!(ipv4[0], 0x45, "frame {i}: IPv4, 20-byte header");
        assert_eq!(ipv4[9], 17, "frame {i}: UDP");
        assert_eq!(ipv4_checksum(ipv4), 0, "frame {i}: IPv4 header checksum");
        assert_eq!(
            usize::from(u16::from_be_bytes([ipv4[2], ipv4[3]])),
            f.len() - 14,
            "frame {i}: IPv4 total length"
        );
        let (src, dst) = (&ipv4[12..16], &ipv4[16..20]);
        let udp = &f[34..42];
        let sport = u16::from_be_bytes([udp[0], udp[1]]);
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4791, "frame {i}");
        assert_eq!(
            usize::from(u16::from_be_bytes([udp[4], udp[5]])),
            f.len() - 34,
            "frame {i}: UDP length"
        );
        assert!(sport >= 0xC000, "frame {i}: source port {sport:#x}");
        assert_eq!(
            carried_icrc(f),
            expected_icrc(f),
            "frame {i} (opcode {:#04x}): ICRC",
            f[42]
        );
        if (src, dst) == (&a_ip[..], &b_ip[..]) {
            from_a += 1;
            // Rebuilt by B: its own MAC, and one derived from the source address.
            assert_eq!(f[..6], b_mac, "frame {i}: destination MAC");
            assert_eq!(
                f[6..12],
                [0x02, 0x00, 127, 0, 1, 2],
                "frame {i}: source MAC"
            );
        } else {
            assert_eq!((src, dst), (&b_ip[..], &a_ip[..]), "frame {i}: addresses");
            from_b += 1;
            assert_eq!(f[6..12], b_mac, "frame {i}: source MAC");
        }
        opcodes.insert(f[42]);
        let dest_qp = u32::from_be_bytes([0, f[47], f[48], f[49]]);
        port_of_qp.entry(dest_qp).or_default().insert(sport);
    }
    assert!(
        from_a > 1024 && from_b > 1024,
        "{from_a} frames from A, {from_b} from B"
    );
    for op in [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
        0x0f, 0x10, 0x11, 0x12, 0x13, 0x14,
    ] {
        assert!(opcodes.contains(&op), "opcode {op:#04x} not seen");
    }
    // Each connection has one flow port in both directions, and the two differ.
    let mut ports = Vec::new();
    for (qa, qb) in pair_qpns {
        let to_a = &port_of_qp[&qa];
        let to_b = &port_of_qp[&qb];
        assert_eq!(to_a.len(), 1, "one port towards QP {qa:#x}: {to_a:x?}");
        assert_eq!(to_a, to_b, "the same port in both directions");
        ports.extend(to_a.iter().copied());
    }
    assert_eq!(ports.len(), 2);
    assert_ne!(ports[0], ports[1], "two QP pairs, two source ports");
}

#[test]
fn a_second_rnicd_on_the_same_addresses_is_refused_naming_the_fix() {
    let _first = Rnicd::start(0, &["--net", "udp:127.0.3.1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(bin("rnicd"))
        .arg("--socket-dir")
        .arg(dir.path())
        .args(["--net", "udp:127.0.3.1"])
        .stdin(Stdio::null())
        .output()
        .expect("run rnicd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot bind 127.0.3.1:4791"), "{err}");
    assert!(err.contains("address in use"), "{err}");
    assert!(err.contains("choose another ADDR"), "{err}");
    assert!(
        !dir.path().join("pf.sock").exists(),
        "no socket left behind"
    );

    let help = Command::new(bin("rnicd"))
        .arg("--help")
        .output()
        .expect("rnicd --help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--net <udp:ADDR[:PORT] | eth:MODE:...>"),
        "{help}"
    );
    assert!(help.contains("ADDR+n"), "{help}");

    let bad = Command::new(bin("rnicd"))
        .arg("--socket-dir")
        .arg(dir.path())
        .args(["--net", "tcp:1.2.3.4"])
        .output()
        .expect("run rnicd");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("udp:ADDR[:PORT]"));
}

#[test]
fn tshark_decodes_every_captured_frame_as_infiniband_with_a_valid_icrc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("a.pcap");
    let o = PairOptions {
        buf_len: 4 << 20,
        ..PairOptions::default()
    };
    let (rnicd_a, rnicd_b, a, b) = two_rnicd(
        ["udp:127.0.9.1", "udp:127.0.10.1"],
        &["--pcap", pcap.to_str().expect("utf-8 path")],
        &o,
        (0xFF_FFF8, 0x77),
    );
    for (i, len) in [0, 5, 1024, 4099].into_iter().enumerate() {
        all_ops(&a, &b, len, i as u64 + 40);
    }
    atomics(&a, &b);
    all_ops(&b, &a, 2000, 50);
    drop((a, b));
    drop((rnicd_a, rnicd_b));

    let frames = pcap_frames(&std::fs::read(&pcap).expect("pcap written"));
    let decoded = tshark_fields(&pcap);
    assert_eq!(decoded.len(), frames.len(), "tshark read every frame");
    assert!(frames.len() > 50, "{} frames", frames.len());
    let mut opcodes = BTreeSet::new();
    for (i, (f, (protocols, [opcode, dest_qp, psn, icrc]))) in
        frames.iter().zip(&decoded).enumerate()
    {
        assert!(
            [
                "eth:ethertype:ip:udp:infiniband",
                "eth:ethertype:ip:udp:infiniband:data"
            ]
            .contains(&protocols.as_str()),
            "frame {i}: decoded as {protocols}, not RoCEv2"
        );
        assert_eq!(*opcode, u64::from(f[42]), "frame {i}: opcode");
        let qp = u32::from_be_bytes([0, f[47], f[48], f[49]]);
        assert_eq!(*dest_qp, u64::from(qp), "frame {i}: destination QP");
        let p = u32::from_be_bytes([0, f[51], f[52], f[53]]);
        assert_eq!(*psn, u64::from(p), "frame {i}: PSN");
        // tshark shows the last four bytes as a big-endian number: where the ICRC is.
        let tail: [u8; 4] = f[f.len() - 4..].try_into().expect("4 bytes");
        assert_eq!(
            *icrc,
            u64::from(u32::from_be_bytes(tail)),
            "frame {i}: ICRC field"
        );
        assert_eq!(carried_icrc(f), expected_icrc(f), "frame {i}: ICRC");
        opcodes.insert(f[42]);
    }
    assert!(opcodes.len() >= 15, "opcodes seen: {opcodes:x?}");
    // Nothing malformed, no expert warning or error, in the full decode.
    let path = pcap.to_str().expect("utf-8 path");
    assert_nothing_flagged(&pcap);
    let verbose = tshark(&["-r", path, "-V"]);
    assert_eq!(
        verbose.matches("InfiniBand\n").count(),
        frames.len(),
        "every frame has an InfiniBand layer"
    );
    assert!(!verbose.contains("Malformed"), "a malformed frame");
}
