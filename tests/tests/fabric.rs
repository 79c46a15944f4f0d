//! RoCEv2 over a real network: two rnicd processes (`--net udp:127.0.1.1` and
//! `--net udp:127.0.2.1`, so their functions have disjoint loopback addresses), a QP on
//! vf0 of each, connected across them with nothing but each other's GID, carrying every
//! operation over real UDP sockets; and a capture of one side, checked by the independent
//! implementation in `rnic_tests::wire`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rnic_driver::verbs::{Mr, RecvWr, Wc, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::net::two_rnicd;
use rnic_tests::verbs_pair::{
    connect, connect_qps, init_qp, pattern, poll_n, read_mr, read_u64, side, signaled, PairOptions,
    Side,
};
use rnic_tests::wire::{carried_icrc, expected_icrc, ipv4_checksum, pcap_frames, tshark};
use rnic_tests::{bin, Rnicd};

const T: Duration = Duration::from_secs(10);
/// The largest message: 1 MiB, a thousand 1 KiB packets in one burst.
const BIG: usize = 1 << 20;
/// Where READs land on the requester and atomics work on the responder.
const READ_AT: usize = 2 << 20;
const ATOMIC_AT: usize = 3 << 20;

#[track_caller]
fn one(side: &Side) -> Wc {
    let wcs = poll_n(&side.cq, 1, T);
    assert_eq!(wcs.len(), 1, "no completion within {T:?}");
    let wc = wcs.into_iter().next().unwrap();
    assert_eq!(wc.status, Ok(WcStatus::Success), "{wc:?}");
    wc
}

fn sges(mr: &Mr, offset: usize, len: usize) -> Vec<rnic_driver::verbs::Sge> {
    if len == 0 {
        Vec::new()
    } else {
        vec![mr.sge(offset, len)]
    }
}

/// The IPv4-mapped address of a GID.
fn ip(gid: [u8; 16]) -> [u8; 4] {
    assert_eq!(gid[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    gid[12..].try_into().unwrap()
}

/// Every operation of `a` on `b` with a message of `len` bytes, data checked (and the
/// bytes after it untouched).
fn all_ops(a: &Side, b: &Side, len: usize, seed: u64) {
    const POISON: u8 = 0x5A;
    let fresh = |mr: &Mr, at: usize| mr.write(at, &vec![POISON; len + 16]);
    let check = |mr: &Mr, at: usize, data: &[u8], what: &str| {
        assert!(
            read_mr(mr, at, len) == data,
            "{what} of {len} bytes: data differs"
        );
        assert_eq!(
            read_mr(mr, at + len, 16),
            vec![POISON; 16],
            "{what} of {len} bytes: wrote past the end"
        );
    };

    // SEND and SEND with immediate.
    for (i, imm) in [None, Some(0x0102_0304u32)].into_iter().enumerate() {
        let data = pattern(len, seed * 8 + i as u64);
        a.mr.write(0, &data);
        fresh(&b.mr, 0);
        b.qp.post_recv(&RecvWr {
            wr_id: 100,
            sges: vec![b.mr.sge(0, BIG)],
        })
        .expect("post_recv");
        let opcode = imm.map_or(WrOpcode::Send, WrOpcode::SendWithImm);
        a.qp.post_send(&signaled(1, opcode, sges(&a.mr, 0, len)))
            .expect("post_send");
        assert_eq!(one(a).opcode, WcOpcode::Send);
        let got = one(b);
        assert_eq!(
            (got.opcode, got.byte_len as usize, got.imm_data),
            (WcOpcode::Recv, len, imm)
        );
        assert_eq!(got.src_qp, a.qp.qp_num());
        check(&b.mr, 0, &data, "SEND");
    }

    // RDMA WRITE and RDMA WRITE with immediate.
    for (i, imm) in [None, Some(0xCAFE_F00Du32)].into_iter().enumerate() {
        let data = pattern(len, seed * 8 + 2 + i as u64);
        a.mr.write(0, &data);
        fresh(&b.mr, 0);
        let (remote_addr, rkey) = (b.mr.addr(0), b.mr.rkey());
        let opcode = match imm {
            None => WrOpcode::RdmaWrite { remote_addr, rkey },
            Some(imm) => {
                b.qp.post_recv(&RecvWr {
                    wr_id: 200,
                    sges: Vec::new(),
                })
                .expect("post_recv");
                WrOpcode::RdmaWriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                }
            }
        };
        a.qp.post_send(&signaled(2, opcode, sges(&a.mr, 0, len)))
            .expect("post_send");
        assert_eq!(one(a).opcode, WcOpcode::RdmaWrite);
        if let Some(imm) = imm {
            let got = one(b);
            assert_eq!(
                (got.opcode, got.byte_len as usize, got.imm_data),
                (WcOpcode::RecvRdmaWithImm, len, Some(imm))
            );
        }
        check(&b.mr, 0, &data, "RDMA WRITE");
    }

    // RDMA READ.
    let data = pattern(len, seed * 8 + 4);
    b.mr.write(0, &data);
    fresh(&a.mr, READ_AT);
    a.qp.post_send(&signaled(
        3,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
        },
        sges(&a.mr, READ_AT, len),
    ))
    .expect("post_send");
    let wc = one(a);
    assert_eq!((wc.opcode, wc.byte_len as usize), (WcOpcode::RdmaRead, len));
    check(&a.mr, READ_AT, &data, "RDMA READ");
}

/// Both atomics of `a` on `b`.
fn atomics(a: &Side, b: &Side) {
    b.mr.write(ATOMIC_AT, &40u64.to_le_bytes());
    a.qp.post_send(&signaled(
        4,
        WrOpcode::AtomicFetchAdd {
            remote_addr: b.mr.addr(ATOMIC_AT),
            rkey: b.mr.rkey(),
            add: 2,
        },
        vec![a.mr.sge(READ_AT, 8)],
    ))
    .expect("post_send");
    let wc = one(a);
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::FetchAdd, 8));
    assert_eq!(read_u64(&a.mr, READ_AT), 40);
    assert_eq!(read_u64(&b.mr, ATOMIC_AT), 42);
    a.qp.post_send(&signaled(
        5,
        WrOpcode::AtomicCmpSwp {
            remote_addr: b.mr.addr(ATOMIC_AT),
            rkey: b.mr.rkey(),
            compare: 42,
            swap: 0xDEAD_BEEF,
        },
        vec![a.mr.sge(READ_AT + 8, 8)],
    ))
    .expect("post_send");
    let wc = one(a);
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::CompSwap, 8));
    assert_eq!(read_u64(&a.mr, READ_AT + 8), 42);
    assert_eq!(read_u64(&b.mr, ATOMIC_AT), 0xDEAD_BEEF);
}

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
    let b_mac = [0x02, 0x52, 0x4e, 0x49, 0x43, 1];
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
    assert!(help.contains("--net <udp:ADDR[:PORT]>"), "{help}");
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

/// A number as tshark prints a field: decimal, or hexadecimal with 0x.
fn number(field: &str) -> u64 {
    match field.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => field.parse(),
    }
    .unwrap_or_else(|_| panic!("'{field}' is not a number"))
}

/// What tshark decoded of each frame of `pcap`, in order: its protocol stack, BTH opcode,
/// destination QP, PSN and ICRC.
fn tshark_fields(pcap: &Path) -> Vec<(String, [u64; 4])> {
    let path = pcap.to_str().expect("utf-8 path");
    let fields = [
        "frame.protocols",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.invariant.crc",
    ];
    let mut args = vec!["-r", path, "-T", "fields", "-E", "separator=/t"];
    for f in &fields {
        args.extend(["-e", f]);
    }
    tshark(&args)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), fields.len(), "tshark line: {line}");
            let n = |i: usize| number(f[i]);
            (f[0].to_string(), [n(1), n(2), n(3), n(4)])
        })
        .collect()
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
    let flagged = tshark(&[
        "-r",
        path,
        "-Y",
        "_ws.malformed || _ws.expert.severity >= \"Warning\"",
    ]);
    assert!(flagged.trim().is_empty(), "tshark flags frames:\n{flagged}");
    let verbose = tshark(&["-r", path, "-V"]);
    assert_eq!(
        verbose.matches("InfiniBand\n").count(),
        frames.len(),
        "every frame has an InfiniBand layer"
    );
    assert!(!verbose.contains("Malformed"), "a malformed frame");
}
