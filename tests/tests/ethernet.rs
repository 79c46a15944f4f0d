//! Ethernet queues (ABI 1.7, `CAP_ETH`, datasheet §15) through the Rust driver over
//! vfio-user: frames between two VFs of one rnicd through the internal switch, unicast,
//! broadcast and multicast by the receive mode, gathered from several descriptors, at MTU
//! 9000; the PF's spoof check, trust and link state; RoCE beside Ethernet on one
//! function; and what a hostile driver gets for malformed descriptors, oversized frames,
//! a ring in unmapped memory and a receive queue it never refills: errors counted, nothing
//! else touched.

use std::time::Duration;

use rnic_abi::eth::{self, desc_error, RX_ALLMULTI, RX_ENABLE, RX_PROMISC};
use rnic_driver::eth::{EthPort, SendError};
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::verbs::{WcStatus, WrOpcode};
use rnic_driver::Device;
use rnic_tests::verbs_pair::{pair, pattern, poll_n, read_mr, signaled, PairOptions};
use rnic_tests::Rnicd;

const WAIT: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(300);
const BROADCAST: [u8; 6] = [0xff; 6];

fn open(rnicd: &Rnicd, name: &str) -> Device {
    let t = VfioUserTransport::connect(&rnicd.socket(name)).expect("connect");
    Device::open(Box::new(t)).expect("open")
}

fn mac_of(dev: &Device) -> [u8; 6] {
    dev.query_device().expect("query").mac
}

/// A frame from `src` to `dst` of EtherType 0x88B5 (local experimental), `len` bytes in
/// all, its payload a pattern that starts with `tag`.
fn frame(dst: [u8; 6], src: [u8; 6], len: usize, tag: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend((0..len - 14).map(|i| tag.wrapping_add(i as u8)));
    f
}

#[test]
fn frames_go_between_two_vfs_by_mac_and_receive_mode() {
    let rnicd = Rnicd::start(3, &[]);
    let (da, db, dc) = (
        open(&rnicd, "vf0"),
        open(&rnicd, "vf1"),
        open(&rnicd, "vf2"),
    );
    let (ma, mb, mc) = (mac_of(&da), mac_of(&db), mac_of(&dc));
    let mut a = EthPort::open(&da, 64, 1500, RX_ENABLE).expect("vf0 port");
    let mut b = EthPort::open(&db, 64, 1500, RX_ENABLE).expect("vf1 port");
    let mut c = EthPort::open(&dc, 64, 1500, RX_ENABLE).expect("vf2 port");

    // Unicast both ways, the shortest and the longest frame of MTU 1500.
    for (len, tag) in [(60, 1u8), (1514, 2), (1518, 3)] {
        a.send(&[&frame(mb, ma, len, tag)]).expect("send");
        assert_eq!(b.recv(WAIT).unwrap(), Some(frame(mb, ma, len, tag)));
        b.send(&[&frame(ma, mb, len, tag)]).expect("send");
        assert_eq!(a.recv(WAIT).unwrap(), Some(frame(ma, mb, len, tag)));
    }
    // Not for vf2: nothing there.
    assert_eq!(c.recv(QUIET).unwrap(), None, "unicast stays unicast");

    // A frame gathered from three descriptors arrives as one.
    let whole = frame(mb, ma, 1000, 9);
    a.send(&[&whole[..14], &whole[14..500], &whole[500..]])
        .expect("send gathered");
    assert_eq!(b.recv(WAIT).unwrap(), Some(whole));

    // Broadcast reaches every other function, not the sender.
    a.send(&[&frame(BROADCAST, ma, 100, 4)]).expect("broadcast");
    assert_eq!(b.recv(WAIT).unwrap(), Some(frame(BROADCAST, ma, 100, 4)));
    assert_eq!(c.recv(WAIT).unwrap(), Some(frame(BROADCAST, ma, 100, 4)));
    assert_eq!(a.recv(QUIET).unwrap(), None, "not back to the sender");

    // Multicast: only to who joined.
    let group = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x42];
    c.set(1500, RX_ENABLE, &[group]).expect("join");
    a.send(&[&frame(group, ma, 80, 5)]).expect("multicast");
    assert_eq!(c.recv(WAIT).unwrap(), Some(frame(group, ma, 80, 5)));
    assert_eq!(b.recv(QUIET).unwrap(), None, "vf1 did not join");
    let filtered = b.query().unwrap().counters.rx_filtered;
    assert_eq!(filtered, 1);

    // Promiscuous and all-multicast are for trusted VFs only.
    b.set(1500, RX_ENABLE | RX_PROMISC | RX_ALLMULTI, &[])
        .expect("ask for promiscuous");
    assert_eq!(
        b.query().unwrap().rx_mode,
        RX_ENABLE,
        "untrusted: not granted"
    );
    a.send(&[&frame(mc, ma, 70, 6)]).expect("to vf2");
    assert_eq!(c.recv(WAIT).unwrap(), Some(frame(mc, ma, 70, 6)));
    assert_eq!(b.recv(QUIET).unwrap(), None);
    let pf = open(&rnicd, "pf");
    pf.set_vf_eth(2, eth::VF_SPOOF_CHECK | eth::VF_TRUST)
        .expect("trust vf1");
    let q = b.query().unwrap();
    assert_eq!(q.rx_mode, RX_ENABLE | RX_PROMISC | RX_ALLMULTI);
    assert_ne!(q.flags & eth::ETH_TRUSTED, 0);
    // Trusted, it takes every multicast group; vf2 still only the one it joined.
    let other = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x43];
    a.send(&[&frame(other, ma, 70, 7)]).expect("to a group");
    assert_eq!(
        b.recv(WAIT).unwrap(),
        Some(frame(other, ma, 70, 7)),
        "all-multicast"
    );
    assert_eq!(c.recv(QUIET).unwrap(), None);

    // Counters: what vf0 sent and vf1 received, frames and bytes.
    let qa = a.query().unwrap().counters;
    assert_eq!(qa.tx_frames, 8);
    let sa = a.queue_stats(true).unwrap();
    assert_eq!((sa.frames, sa.errors), (8, 0));
    assert_eq!(sa.completed, 10, "eight frames, one of three descriptors");
    let qb = b.query().unwrap().counters;
    assert_eq!(qb.rx_frames, 6);
    assert_eq!(qb.rx_bytes, 60 + 1514 + 1518 + 1000 + 100 + 70);
    assert_eq!(qb.rx_filtered, 1, "the group not joined, before trust");
}

#[test]
fn the_pf_decides_spoof_check_and_link_and_the_mtu_bounds_frames() {
    let rnicd = Rnicd::start(2, &[]);
    let (da, db, pf) = (open(&rnicd, "vf0"), open(&rnicd, "vf1"), open(&rnicd, "pf"));
    let (ma, mb) = (mac_of(&da), mac_of(&db));
    let mut a = EthPort::open(&da, 16, 9000, RX_ENABLE).expect("vf0 port");
    let mut b = EthPort::open(&db, 16, 9000, RX_ENABLE).expect("vf1 port");
    let admin = &pf;

    // Jumbo frames both ways at MTU 9000 (9018 bytes, 9022 with an 802.1Q tag); one byte
    // more is refused at the sender.
    let jumbo = frame(mb, ma, 9018, 1);
    a.send(&[&jumbo]).expect("jumbo");
    assert_eq!(b.recv(WAIT).unwrap(), Some(jumbo));
    a.send(&[&frame(mb, ma, 9023, 2)]).expect("post too long");
    a.flush(WAIT).unwrap();
    assert_eq!(a.take_send_errors(), [SendError(desc_error::MALFORMED)]);
    // MTU 1500 at the receiver: a 9000-byte frame is dropped there, counted.
    b.set(1500, RX_ENABLE, &[]).unwrap();
    a.send(&[&frame(mb, ma, 9018, 3)])
        .expect("jumbo to a 1500 receiver");
    assert_eq!(b.recv(QUIET).unwrap(), None);
    assert_eq!(b.query().unwrap().counters.rx_too_long, 1);

    // A spoofed source is dropped and counted, until the PF turns the check off.
    let spoofed = frame(mb, [0x02, 0, 0, 0, 0, 0x99], 100, 4);
    a.send(&[&spoofed]).unwrap();
    a.flush(WAIT).unwrap();
    assert_eq!(a.take_send_errors(), [SendError(desc_error::SPOOFED)]);
    assert_eq!(b.recv(QUIET).unwrap(), None);
    assert_eq!(a.query().unwrap().counters.tx_spoofed, 1);
    // A RoCEv2 frame from vf0's MAC but another function's IPv4 address: spoofed too (its
    // RDMA peers know a function by its address).
    let mut roce = ipv4_frame(mb, ma, [10, 82, 0, 3], [10, 82, 0, 3], 80);
    roce[23] = 17;
    roce[36..38].copy_from_slice(&4791u16.to_be_bytes());
    a.send(&[&roce]).unwrap();
    a.flush(WAIT).unwrap();
    assert_eq!(a.take_send_errors(), [SendError(desc_error::SPOOFED)]);
    admin.set_vf_eth(1, 0).expect("spoof check off for vf0");
    a.send(&[&spoofed]).unwrap();
    assert_eq!(b.recv(WAIT).unwrap(), Some(spoofed));

    // Link down: sends fail with LINK_DOWN, nothing arrives; link up: traffic again.
    admin.set_link(1, false).expect("link down");
    assert_eq!(a.query().unwrap().flags & eth::ETH_LINK_UP, 0);
    a.send(&[&frame(mb, ma, 64, 5)]).unwrap();
    a.flush(WAIT).unwrap();
    assert_eq!(a.take_send_errors(), [SendError(desc_error::LINK_DOWN)]);
    b.send(&[&frame(ma, mb, 64, 6)]).unwrap();
    assert_eq!(a.recv(QUIET).unwrap(), None);
    admin.set_link(1, true).expect("link up");
    b.send(&[&frame(ma, mb, 64, 7)]).unwrap();
    assert_eq!(a.recv(WAIT).unwrap(), Some(frame(ma, mb, 64, 7)));
    let c = a.query().unwrap().counters;
    assert_eq!((c.tx_link_down, c.rx_link_down), (1, 1));
}

#[test]
fn roce_and_ethernet_share_a_function_each_to_its_own_side() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let (ma, mb) = (mac_of(a.ctx.device()), mac_of(b.ctx.device()));
    let mut ea = EthPort::open(a.ctx.device(), 16, 1500, RX_ENABLE).expect("vf0 port");
    let mut eb = EthPort::open(b.ctx.device(), 16, 1500, RX_ENABLE).expect("vf1 port");
    // RDMA WRITEs and Ethernet frames interleaved: each arrives where it belongs.
    for i in 0..20u8 {
        ea.send(&[&frame(mb, ma, 200, i)]).expect("frame");
        let data = pattern(4096, u64::from(i));
        a.mr.write(0, &data);
        a.qp.post_send(&signaled(
            u64::from(i),
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(0),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, 4096)],
        ))
        .expect("post a WRITE");
        let wc = poll_n(&a.cq, 1, WAIT);
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (u64::from(i), Ok(WcStatus::Success))
        );
        assert_eq!(read_mr(&b.mr, 0, 4096), data);
        assert_eq!(eb.recv(WAIT).unwrap(), Some(frame(mb, ma, 200, i)));
    }
    assert_eq!(eb.query().unwrap().counters.rx_frames, 20);
    assert_eq!(
        ea.query().unwrap().counters.rx_frames,
        0,
        "no RoCE ACK reached the netdev"
    );
}

#[test]
fn a_hostile_driver_gets_errors_counted_and_nobody_else_notices() {
    use rnic_abi::cmd::{Opcode, Status};
    use rnic_abi::eth::CreateEthQueueReq;
    use rnic_abi::verbs::PageList;
    use zerocopy::IntoBytes;

    let rnicd = Rnicd::start(3, &[]);
    let (da, db, dc) = (
        open(&rnicd, "vf0"),
        open(&rnicd, "vf1"),
        open(&rnicd, "vf2"),
    );
    let (ma, mb, mc) = (mac_of(&da), mac_of(&db), mac_of(&dc));
    let mut a = EthPort::open(&da, 32, 1500, RX_ENABLE).expect("vf0 port");
    let mut b = EthPort::open(&db, 8, 1500, RX_ENABLE).expect("vf1 port");
    let mut c = EthPort::open(&dc, 8, 1500, RX_ENABLE).expect("vf2 port");

    // A zero-length descriptor; a frame of one descriptor more than a frame may have
    // (the first TX_MAX_DESCS go back as one malformed frame, the last, 8 bytes, as a
    // frame too short).
    a.send(&[&[]]).unwrap();
    let piece = [0u8; 8];
    let pieces: Vec<&[u8]> = (0..=eth::TX_MAX_DESCS as usize)
        .map(|_| &piece[..])
        .collect();
    a.send(&pieces).unwrap();
    a.flush(WAIT).unwrap();
    let errors = a.take_send_errors();
    assert_eq!(errors.len(), 2 + eth::TX_MAX_DESCS as usize);
    assert!(errors
        .iter()
        .all(|e| *e == SendError(desc_error::MALFORMED)));
    assert_eq!(a.query().unwrap().counters.tx_malformed, 3);
    // Commands that name rings in memory that is not mapped are refused.
    let req = CreateEthQueueReq {
        kind: eth::KIND_TX,
        reserved0: 0,
        msix_vector: 0xffff,
        entries: 8,
        doorbell_page: 1,
        moderation_usecs: 0,
        ring: PageList::flat(0xdead_0000, 1),
    };
    let done = da
        .raw_command(Opcode::CreateEthQueue as u16, req.as_bytes(), 16)
        .expect("command runs");
    assert_eq!(done.header.status, Status::DmaError as u16);

    // A receiver that never refills: frames beyond its 8 buffers are dropped, counted,
    // and the sender and the others go on.
    for i in 0..12u8 {
        a.send(&[&frame(mb, ma, 64, i)]).unwrap();
    }
    a.flush(WAIT).unwrap();
    rnic_tests::wait_for(WAIT, "vf1 counts the drops", || {
        b.query().unwrap().counters.rx_no_buffer == 4
    });
    for i in 0..8u8 {
        assert_eq!(b.recv(WAIT).unwrap(), Some(frame(mb, ma, 64, i)));
    }
    a.send(&[&frame(mc, ma, 64, 50)]).unwrap();
    assert_eq!(c.recv(WAIT).unwrap(), Some(frame(mc, ma, 64, 50)));
    assert_eq!(c.query().unwrap().counters.rx_no_buffer, 0);
}

/// An IPv4 packet (protocol 253, for experiments) from `src` to `dst` at IPv4 `sip` to
/// `dip`, `len` bytes in all.
fn ipv4_frame(dst: [u8; 6], src: [u8; 6], sip: [u8; 4], dip: [u8; 4], len: usize) -> Vec<u8> {
    let mut f = frame(dst, src, len, 0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 253;
    f[26..30].copy_from_slice(&sip);
    f[30..34].copy_from_slice(&dip);
    f
}

/// An ARP request from `mac` at `sip` for `tip`, broadcast.
fn arp_request(mac: [u8; 6], sip: [u8; 4], tip: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&BROADCAST);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&sip);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tip);
    f.resize(60, 0);
    f
}

#[test]
fn ipv4_and_arp_frames_cross_between_two_rnicd_over_udp() {
    let a_net = "udp:127.0.170.1";
    let b_net = "udp:127.0.171.1";
    let ra = Rnicd::start(1, &["--net", a_net]);
    let rb = Rnicd::start(1, &["--net", b_net]);
    let (da, db) = (open(&ra, "vf0"), open(&rb, "vf0"));
    let (ma, mb) = (mac_of(&da), mac_of(&db));
    let (ipa, ipb) = ([127, 0, 170, 2], [127, 0, 171, 2]);
    let mut a = EthPort::open(&da, 32, 1500, RX_ENABLE).expect("a's port");
    let mut b = EthPort::open(&db, 32, 1500, RX_ENABLE).expect("b's port");

    // ARP for b's address reaches b's OS (the broadcast crosses to the address it asks
    // for); the answer and IPv4 packets of every size cross back and forth.
    let ask = arp_request(ma, ipa, ipb);
    a.send(&[&ask]).unwrap();
    assert_eq!(b.recv(WAIT).unwrap(), Some(ask));
    for len in [60, 1000, 1514] {
        let to_b = ipv4_frame(mb, ma, ipa, ipb, len);
        a.send(&[&to_b]).unwrap();
        assert_eq!(b.recv(WAIT).unwrap(), Some(to_b));
        let to_a = ipv4_frame(ma, mb, ipb, ipa, len);
        b.send(&[&to_a]).unwrap();
        assert_eq!(a.recv(WAIT).unwrap(), Some(to_a));
    }
    // IPv6 cannot cross (nothing names the rnicd it is for): dropped at the port.
    let mut v6 = frame(mb, ma, 80, 1);
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    a.send(&[&v6]).unwrap();
    assert_eq!(b.recv(QUIET).unwrap(), None);
    assert_eq!(b.query().unwrap().counters.rx_frames, 4);
}

#[test]
fn an_armed_queue_interrupts_once_per_arm_and_link_changes_signal_the_event_vector() {
    use rnic_driver::eth::EthOptions;
    let rnicd = Rnicd::start(2, &[]);
    let (da, db, pf) = (open(&rnicd, "vf0"), open(&rnicd, "vf1"), open(&rnicd, "pf"));
    let (ma, mb) = (mac_of(&da), mac_of(&db));
    let mut a = EthPort::open(&da, 16, 1500, RX_ENABLE).expect("vf0 port");
    let o = EthOptions {
        entries: 16,
        interrupts: true,
        ..EthOptions::default()
    };
    let mut b = EthPort::open_with(&db, &o).expect("vf1 port with interrupts");

    // Not armed: a frame arrives, no interrupt.
    a.send(&[&frame(mb, ma, 64, 1)]).unwrap();
    assert_eq!(b.recv(WAIT).unwrap(), Some(frame(mb, ma, 64, 1)));
    assert!(!b.wait_interrupt(QUIET).unwrap(), "not armed");
    // Armed having seen everything: quiet until the next frame, which interrupts once.
    b.arm().unwrap();
    assert!(!b.wait_interrupt(QUIET).unwrap(), "nothing new");
    a.send(&[&frame(mb, ma, 64, 2)]).unwrap();
    assert!(b.wait_interrupt(WAIT).unwrap(), "the frame interrupts");
    a.send(&[&frame(mb, ma, 64, 3)]).unwrap();
    assert!(!b.wait_interrupt(QUIET).unwrap(), "once per arm");
    // Armed without taking the two frames (NAPI's race): it fires at once.
    b.arm().unwrap();
    assert!(
        b.wait_interrupt(WAIT).unwrap(),
        "completions the driver has not seen"
    );
    assert_eq!(b.recv(WAIT).unwrap(), Some(frame(mb, ma, 64, 2)));
    assert_eq!(b.recv(WAIT).unwrap(), Some(frame(mb, ma, 64, 3)));
    let stats = b.queue_stats(false).unwrap();
    assert_eq!(stats.interrupts, 2);

    // The PF pulls the link: the event vector fires, and the driver sees it down.
    pf.set_link(2, false).unwrap();
    assert!(b.wait_event(WAIT).unwrap(), "link change");
    assert_eq!(b.query().unwrap().flags & eth::ETH_LINK_UP, 0);
    pf.set_link(2, true).unwrap();
    assert!(b.wait_event(WAIT).unwrap(), "link change");
    assert_ne!(b.query().unwrap().flags & eth::ETH_LINK_UP, 0);
}

#[test]
fn rnic_eth_pings_one_vf_from_another_and_reads_the_counters() {
    use std::process::Command;
    let rnicd = Rnicd::start(2, &[]);
    let tool = rnic_tests::bin("rnic-eth");
    let sock = |n: &str| rnicd.socket(n).display().to_string();
    // The VFs' MACs without --net: 02:52:4e:49:43 and the function number.
    let echo = Command::new(&tool)
        .args(["--vfio-user", &sock("vf1"), "echo", "--count", "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the echo");
    std::thread::sleep(Duration::from_millis(500));
    let ping = Command::new(&tool)
        .args([
            "--vfio-user",
            &sock("vf0"),
            "ping",
            "02:52:4e:49:43:02",
            "--count",
            "3",
        ])
        .output()
        .expect("ping");
    let out = String::from_utf8_lossy(&ping.stdout);
    assert!(
        ping.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ping.stderr)
    );
    assert!(out.contains("3 pings, 3 echoes"), "{out}");
    let echo = rnic_tests::finish_within(echo, WAIT);
    assert!(echo.status.success());
    assert!(String::from_utf8_lossy(&echo.stdout).contains("answered 3 pings"));
    let stats = Command::new(&tool)
        .args(["--vfio-user", &sock("vf0"), "stats"])
        .output()
        .expect("stats");
    let out = String::from_utf8_lossy(&stats.stdout);
    assert!(out.contains("mac 02:52:4e:49:43:01 mtu 1500"), "{out}");
}
