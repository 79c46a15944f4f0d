//! The Ethernet port (`rnicd --net eth:...`): rnicd processes on a QEMU-style network
//! segment (UDP datagram pair, TCP stream, multicast hub), finding each other by ARP and
//! running every RC operation; and a test socket playing a Linux guest with Soft-RoCE on
//! the segment: ARP, frames that must be dropped or ignored (and counted), and a frame
//! built as rxe builds it reaching a QP.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::FromRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use rnic_driver::verbs::{self, RecvWr, WcOpcode, WcStatus};
use rnic_tests::net::two_rnicd_with;
use rnic_tests::ops::{all_ops, atomics, ip, T};
use rnic_tests::tshark::{assert_nothing_flagged, tshark};
use rnic_tests::verbs_pair::{poll_n, read_mr, side, to_rts, PairOptions, Side};
use rnic_tests::wire::{
    carried_icrc, expected_icrc, ipv4_checksum, pcap_frames, roce_frame, transport, Bth, IpStyle,
};
use rnic_tests::Rnicd;

/// Two UDP ports for test `test` of this binary, unlikely to be used by anything else
/// (tests run in parallel threads; the pid separates test binaries).
fn ports(test: u16) -> (u16, u16) {
    let base = 20_000 + (std::process::id() % 4000) as u16 * 10 + test * 2;
    (base, base + 1)
}

/// The MAC of a function with IPv4 address `ip` on an Ethernet port.
fn mac_of(ip: [u8; 4]) -> [u8; 6] {
    [0x02, 0x52, ip[0], ip[1], ip[2], ip[3]]
}

fn options() -> PairOptions {
    PairOptions {
        buf_len: 4 << 20,
        ..PairOptions::default()
    }
}

/// Every operation both ways, messages from empty to many MTUs (1 KiB), atomics.
fn traffic(a: &Side, b: &Side, sizes: &[usize]) {
    for (i, &len) in sizes.iter().enumerate() {
        all_ops(a, b, len, i as u64 + 1);
    }
    atomics(a, b);
    all_ops(b, a, 3000, 99);
    atomics(b, a);
}

/// A frame cut to its IPv4 total length (Ethernet padding removed).
fn unpadded(f: &[u8]) -> &[u8] {
    &f[..14 + usize::from(u16::from_be_bytes([f[16], f[17]]))]
}

/// Checks a capture of the segment: ARP found each peer, every RoCEv2 frame goes from
/// one side's MAC and IP to the other's with a valid IPv4 checksum and ICRC, and tshark
/// decodes it all with nothing malformed.
fn check_capture(pcap: &Path, a_ip: [u8; 4], b_ip: [u8; 4]) {
    let frames = pcap_frames(&std::fs::read(pcap).expect("pcap written"));
    let (a_mac, b_mac) = (mac_of(a_ip), mac_of(b_ip));
    let (mut arp, mut a_to_b, mut b_to_a) = (Vec::new(), 0, 0);
    for (i, f) in frames.iter().enumerate() {
        assert!(f.len() >= 60, "frame {i}: shorter than Ethernet's minimum");
        if f[12..14] == [0x08, 0x06] {
            arp.push((u16::from_be_bytes([f[20], f[21]]), &f[6..12], &f[38..42]));
            continue;
        }
        assert_eq!(f[12..14], [0x08, 0x00], "frame {i}: IPv4");
        let f = unpadded(f);
        assert_eq!(ipv4_checksum(&f[14..34]), 0, "frame {i}: IPv4 checksum");
        assert_eq!(carried_icrc(f), expected_icrc(f), "frame {i}: ICRC");
        let (src, dst) = (&f[26..30], &f[30..34]);
        if (src, dst) == (&a_ip[..], &b_ip[..]) {
            assert_eq!((&f[..6], &f[6..12]), (&b_mac[..], &a_mac[..]), "frame {i}");
            a_to_b += 1;
        } else {
            assert_eq!((src, dst), (&b_ip[..], &a_ip[..]), "frame {i}: addresses");
            assert_eq!((&f[..6], &f[6..12]), (&a_mac[..], &b_mac[..]), "frame {i}");
            b_to_a += 1;
        }
    }
    assert!(
        a_to_b > 100 && b_to_a > 100,
        "{a_to_b} frames A->B, {b_to_a} B->A"
    );
    // A asked for B's MAC, and B answered (or the other way round first).
    let asked = |who: &[u8; 6], whom: [u8; 4]| {
        arp.iter()
            .any(|(op, sha, tpa)| *op == 1 && *sha == &who[..] && *tpa == &whom[..])
    };
    let answered = |who: &[u8; 6]| arp.iter().any(|(op, sha, _)| *op == 2 && *sha == &who[..]);
    assert!(
        (asked(&a_mac, b_ip) && answered(&b_mac)) || (asked(&b_mac, a_ip) && answered(&a_mac)),
        "no ARP exchange captured: {arp:x?}"
    );
    let path = pcap.to_str().expect("utf-8 path");
    assert_nothing_flagged(pcap);
    let roce = tshark(&[
        "-r",
        path,
        "-Y",
        "infiniband",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]);
    assert_eq!(
        roce.lines().count(),
        a_to_b + b_to_a,
        "tshark: InfiniBand frames"
    );
    let arps = tshark(&[
        "-r",
        path,
        "-Y",
        "arp",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]);
    assert_eq!(arps.lines().count(), arp.len(), "tshark: ARP frames");
}

/// Stops `rnicd` and returns its log, which ends with the port's counters.
fn stop(mut rnicd: Rnicd) -> String {
    assert!(rnicd.stop_with(libc::SIGTERM).success());
    rnicd.log()
}

#[test]
fn two_rnicd_on_a_dgram_segment_find_each_other_by_arp_and_run_every_operation() {
    let (p1, p2) = ports(0);
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("a.pcap");
    let net_a = format!("eth:dgram:127.0.0.1:{p1}:127.0.0.1:{p2}");
    let net_b = format!("eth:dgram:127.0.0.1:{p2}:127.0.0.1:{p1}");
    let pcap_arg = pcap.to_str().expect("utf-8 path");
    let (rnicd_a, rnicd_b, a, b) = two_rnicd_with(
        [
            &["--net", &net_a, "--net-ip", "10.50.0.1", "--pcap", pcap_arg],
            &["--net", &net_b, "--net-ip", "10.50.1.1"],
        ],
        &options(),
        (0x10, 0xFF_FFF0),
    );
    let (a_ip, b_ip) = (ip(a.gid), ip(b.gid));
    assert_eq!(
        (a_ip, b_ip),
        ([10, 50, 0, 2], [10, 50, 1, 2]),
        "VF0 is --net-ip + 1"
    );
    traffic(&a, &b, &[0, 1, 1023, 1024, 1025, 4099, 64 << 10]);
    drop((a, b));
    let log_b = stop(rnicd_b);
    let log_a = stop(rnicd_a);
    assert!(log_a.contains(&format!("network {net_a}")), "{log_a}");
    assert!(
        log_a.contains("MACs 02:52:0a:32:00:01 to 02:52:0a:32:00:02"),
        "{log_a}"
    );
    for log in [&log_a, &log_b] {
        assert!(log.contains("ip_checksum 0"), "{log}");
        assert!(log.contains("frames unresolved 0"), "{log}");
    }
    check_capture(&pcap, a_ip, b_ip);
}

#[test]
fn two_rnicd_on_a_tcp_stream_connect_in_any_order_and_again_after_a_restart() {
    let (port, _) = ports(1);
    let listen = format!("eth:listen:127.0.0.1:{port}");
    let connect = format!("eth:connect:127.0.0.1:{port}");
    let args_b = ["--net", &connect, "--net-ip", "10.51.1.1"];
    let o = options();
    // The connecting side starts first: it retries until the listener is there.
    let (rnicd_b, rnicd_a, b, a) = two_rnicd_with(
        [&args_b, &["--net", &listen, "--net-ip", "10.51.0.1"]],
        &o,
        (0x20, 0x30),
    );
    traffic(&a, &b, &[0, 5, 1025, 4099, 64 << 10]);
    // B goes away; a new B connects, and A accepts it.
    drop((a, b));
    let log_b = stop(rnicd_b);
    assert!(log_b.contains("connected to 127.0.0.1"), "{log_b}");
    let rnicd_b = Rnicd::start(1, &args_b);
    let a = side(&rnicd_a.socket("vf0"), &o);
    let b = side(&rnicd_b.socket("vf0"), &o);
    rnic_tests::verbs_pair::connect(&a, &b, &o, 0x40, 0x50);
    traffic(&a, &b, &[2000]);
    drop((a, b));
    drop(rnicd_b);
    let log_a = stop(rnicd_a);
    assert_eq!(
        log_a.matches("connected to 127.0.0.1").count(),
        2,
        "two connections accepted: {log_a}"
    );
    assert!(
        log_a.contains("connection closed (the peer closed it)"),
        "{log_a}"
    );
}

/// A UDP socket bound to `addr` with `SO_REUSEADDR`, as every member of a multicast
/// group on one host needs, joined to the group.
fn mcast_member(group: SocketAddrV4) -> UdpSocket {
    // SAFETY: plain socket calls on a descriptor owned by the UdpSocket right after.
    let s = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket");
        let one: libc::c_int = 1;
        let r = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "SO_REUSEADDR");
        UdpSocket::from_raw_fd(fd)
    };
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: group.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*group.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a sockaddr_in of the size given.
    let r = unsafe {
        libc::bind(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "bind {group}: {}", std::io::Error::last_os_error());
    s.join_multicast_v4(group.ip(), &Ipv4Addr::UNSPECIFIED)
        .expect("join");
    s
}

#[test]
fn two_rnicd_and_a_listener_share_a_multicast_hub() {
    let (port, _) = ports(2);
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 82, 1), port);
    let listener = mcast_member(group);
    listener.set_nonblocking(true).expect("nonblocking");
    let net = format!("eth:mcast:{group}");
    let (rnicd_a, rnicd_b, a, b) = two_rnicd_with(
        [
            &["--net", &net, "--net-ip", "10.52.0.1"],
            &["--net", &net, "--net-ip", "10.52.1.1"],
        ],
        &options(),
        (0x60, 0x70),
    );
    traffic(&a, &b, &[0, 2000, 5000]);
    let (a_mac, b_mac) = (mac_of(ip(a.gid)), mac_of(ip(b.gid)));
    drop((a, b));
    // The third member heard both (as much as its socket buffer held).
    let (mut from_a, mut from_b, mut arp) = (0, 0, 0);
    let mut buf = vec![0u8; 70_000];
    while let Ok(n) = listener.recv(&mut buf) {
        let f = &buf[..n];
        from_a += usize::from(f[6..12] == a_mac);
        from_b += usize::from(f[6..12] == b_mac);
        arp += usize::from(f[12..14] == [0x08, 0x06]);
    }
    assert!(
        from_a > 10 && from_b > 10,
        "{from_a} frames from A, {from_b} from B"
    );
    assert!(arp >= 2, "{arp} ARP frames");
    for log in [stop(rnicd_a), stop(rnicd_b)] {
        // Each heard its own frames back from the hub, and ignored them.
        let looped = log
            .split("looped ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .expect("counters logged");
        assert!(looped > 10, "{log}");
    }
}

const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const GUEST_IP: [u8; 4] = [10, 60, 0, 100];

/// An ARP request from the guest for `ip`, written byte by byte.
fn guest_arp_request(ip: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&GUEST_IP);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip);
    f.resize(60, 0);
    f
}

/// The next frame the guest receives that `wanted` accepts (others are skipped).
fn guest_receive(guest: &UdpSocket, wanted: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let start = Instant::now();
    let mut buf = vec![0u8; 70_000];
    while start.elapsed() < T {
        if let Ok(n) = guest.recv(&mut buf) {
            if wanted(&buf[..n]) {
                return buf[..n].to_vec();
            }
        }
    }
    panic!("no such frame within {T:?}");
}

#[test]
fn a_guest_on_the_segment_gets_arp_answers_its_bad_frames_counted_and_its_rxe_frame_delivered() {
    let (p_dev, p_guest) = ports(3);
    let rnicd = Rnicd::start(
        1,
        &[
            "--net",
            &format!("eth:dgram:127.0.0.1:{p_dev}:127.0.0.1:{p_guest}"),
            "--net-ip",
            "10.60.0.1",
        ],
    );
    let guest = UdpSocket::bind(("127.0.0.1", p_guest)).expect("guest socket");
    guest
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    guest.connect(("127.0.0.1", p_dev)).expect("connect");
    let vf0_ip = [10, 60, 0, 2];
    let vf0_mac = mac_of(vf0_ip);
    let is_arp_reply = |f: &[u8]| f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[21] == 2;

    // ARP: the reply names VF0's MAC and IP, to the guest.
    let ask_vf0 = || {
        guest.send(&guest_arp_request(vf0_ip)).expect("send");
        let r = guest_receive(&guest, is_arp_reply);
        assert_eq!((&r[..6], &r[6..12]), (&GUEST_MAC[..], &vf0_mac[..]));
        assert_eq!(
            r[14..22],
            [0, 1, 0x08, 0x00, 6, 4, 0, 2],
            "IPv4/Ethernet reply"
        );
        assert_eq!(
            (&r[22..28], &r[28..32]),
            (&vf0_mac[..], &vf0_ip[..]),
            "sender"
        );
        assert_eq!(
            (&r[32..38], &r[38..42]),
            (&GUEST_MAC[..], &GUEST_IP[..]),
            "target"
        );
    };
    ask_vf0();
    // Nobody answers for an address that is no function's.
    guest
        .send(&guest_arp_request([10, 60, 0, 9]))
        .expect("send");

    // A QP on VF0 whose peer is the guest's QP 0x77, expecting PSN 100.
    let o = options();
    let s = side(&rnicd.socket("vf0"), &o);
    let mut gid = [0u8; 16];
    gid[10..12].copy_from_slice(&[0xff, 0xff]);
    gid[12..].copy_from_slice(&GUEST_IP);
    let (at, m) = verbs::rtr_attr(0x77, gid, 100, o.mtu, 16, o.min_rnr_timer);
    s.qp.modify(&at, m).expect("RTR");
    to_rts(&s.qp, &o, 500);
    s.qp.post_recv(&RecvWr {
        wr_id: 9,
        sges: vec![s.mr.sge(0, 4096)],
    })
    .expect("post_recv");

    // A SEND ONLY as rxe builds it: IP ID not 0, DF, TTL 64, UDP checksum, its QP's
    // source port; ICRC over that exact header.
    let payload = b"hello from rxe";
    let bth = Bth {
        ack_req: true,
        ..Bth::new(0x04, s.qp.qp_num(), 100)
    };
    let style = IpStyle {
        ip_id: 0x1c46,
        udp_checksum: true,
    };
    let good = roce_frame(
        (vf0_mac, GUEST_MAC),
        (GUEST_IP, 0xC0A7),
        vf0_ip,
        style,
        &transport(bth, &[], payload),
    );
    assert_ne!(good[40..42], [0, 0], "a UDP checksum");
    let mut bad_checksum = good.clone();
    bad_checksum[24] ^= 0x10;
    let mut bad_udp_length = good.clone();
    bad_udp_length[38..40].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut other_mac = good.clone();
    other_mac[..6].copy_from_slice(&mac_of([10, 60, 0, 9]));
    let mut not_ip = good.clone();
    not_ip[12..14].copy_from_slice(&[0x88, 0xb5]);
    for f in [&bad_checksum, &bad_udp_length, &other_mac, &not_ip] {
        guest.send(f).expect("send");
    }
    // Alive, and still answering.
    ask_vf0();
    assert!(
        poll_n(&s.cq, 1, Duration::from_millis(200)).is_empty(),
        "nothing delivered"
    );

    guest.send(&good).expect("send");
    let wc = poll_n(&s.cq, 1, T);
    assert_eq!(wc.len(), 1, "the rxe frame reached the QP");
    assert_eq!(
        (
            wc[0].status,
            wc[0].opcode,
            wc[0].byte_len as usize,
            wc[0].wr_id
        ),
        (Ok(WcStatus::Success), WcOpcode::Recv, payload.len(), 9)
    );
    assert_eq!(read_mr(&s.mr, 0, payload.len()), payload);
    // The ACK comes back to the guest's MAC (learned from its ARP request), to QP 0x77.
    let ack = guest_receive(&guest, |f| f.len() > 42 && f[12..14] == [0x08, 0x00]);
    let ack = unpadded(&ack);
    assert_eq!((&ack[..6], &ack[6..12]), (&GUEST_MAC[..], &vf0_mac[..]));
    assert_eq!(
        (ack[42], &ack[47..50]),
        (0x11, &[0, 0, 0x77][..]),
        "ACK to QP 0x77"
    );
    assert_eq!(
        u32::from_be_bytes([0, ack[51], ack[52], ack[53]]),
        100,
        "PSN"
    );
    assert_eq!(carried_icrc(ack), expected_icrc(ack));

    drop(s);
    let log = stop(rnicd);
    for counted in [
        "not_for_us 1 ",
        "other_protocol 1;",
        "ip_checksum 1 ",
        "udp_length 1 ",
        "replies sent 2 ",
    ] {
        assert!(log.contains(counted), "{counted}: {log}");
    }
    assert!(
        log.contains("dropped a frame from 52:54:00:12:34:56: bad IPv4 header checksum"),
        "{log}"
    );
}
