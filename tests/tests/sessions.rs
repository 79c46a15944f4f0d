//! Sessions and multipath (datasheet §14.11): the UDP source ports the PF assigns to a
//! function, and messages spread over them one session per message, in order; checked in
//! the capture, between two VFs of one rnicd and across two rnicd over UDP.

use rnic_abi::regs;
use rnic_driver::verbs::{WcStatus, WrOpcode};
use rnic_tests::feature_checks::expect;
use rnic_tests::verbs_pair::{pattern, side, signaled, PairOptions, Side};
use rnic_tests::Rnicd;

/// The sessions the PF gives vf0 (member 1).
const SESSION_PORTS: [u16; 4] = [50001, 50002, 50003, 50004];

/// Gives `function` (a member id) of the rnicd whose PF socket is `pf` [`SESSION_PORTS`].
fn assign_sessions(pf: &std::path::Path, member: u32) {
    let t = rnic_driver::transport::vfio_user::VfioUserTransport::connect(pf).expect("PF");
    let pf = rnic_driver::Device::open(Box::new(t)).expect("open the PF");
    assert!(pf.query_device().expect("QUERY_DEVICE").caps & regs::CAP_SESSIONS != 0);
    pf.set_sessions(member, &SESSION_PORTS)
        .expect("SET_SESSIONS");
    let too_many = [1u16; 9];
    assert!(pf.set_sessions(member, &too_many).is_err());
}

/// Bytes of each message: three packets at the pair's MTU.
const MSG_LEN: usize = 2500;

/// `a` sends 8 messages over all four sessions, then 2 over session 2 alone and 1 over
/// none; `b` receives them in order, whole. Returns the messages' wr_ids in order.
fn send_over_sessions(a: &Side, b: &Side) {
    let messages: Vec<Vec<u8>> = (0..11).map(|i| pattern(MSG_LEN, 40 + i)).collect();
    for (i, _) in messages.iter().enumerate() {
        b.qp.post_recv(&rnic_driver::verbs::RecvWr {
            wr_id: 1000 + i as u64,
            sges: vec![b.mr.sge(i * MSG_LEN, MSG_LEN)],
        })
        .expect("post a receive");
    }
    for (i, m) in messages.iter().enumerate() {
        a.mr.write(i * MSG_LEN, m);
        let wr = signaled(
            i as u64,
            WrOpcode::Send,
            vec![a.mr.sge(i * MSG_LEN, MSG_LEN)],
        );
        let group = match i {
            0..8 => 0b1111,
            8..10 => 0b0100,
            _ => 0,
        };
        a.qp.post_send_on_sessions(&wr, group).expect("post");
    }
    for i in 0..messages.len() as u64 {
        expect(&a.cq, i, WcStatus::Success);
    }
    for (i, m) in messages.iter().enumerate() {
        // The receiver keeps the connection's order whatever path each message took.
        expect(&b.cq, 1000 + i as u64, WcStatus::Success);
        let mut got = vec![0u8; MSG_LEN];
        b.mr.read(i * MSG_LEN, &mut got);
        assert!(got == *m, "message {i} arrived whole, in its place");
    }
}

/// The UDP source ports of the SEND packets from `src_ip` in `pcap`, one per message in
/// PSN order. Every packet of a message, resent ones included, must share it.
fn message_ports(pcap: &std::path::Path, src_ip: &[u8]) -> Vec<u16> {
    let frames = rnic_tests::wire::pcap_frames(&std::fs::read(pcap).expect("pcap"));
    // PSN -> (opcode, port); a packet sent again must be the same packet.
    let mut by_psn = std::collections::BTreeMap::new();
    for f in frames
        .iter()
        .filter(|f| f.len() > 54 && &f[26..30] == src_ip)
    {
        // SEND_FIRST, SEND_MIDDLE, SEND_LAST.
        if !matches!(f[42], 0x00..=0x02) {
            continue;
        }
        let psn = u32::from_be_bytes([0, f[51], f[52], f[53]]);
        let packet = (f[42], u16::from_be_bytes([f[34], f[35]]));
        if let Some(before) = by_psn.insert(psn, packet) {
            assert_eq!(
                before, packet,
                "PSN {psn:#x} was sent again from another port"
            );
        }
    }
    let mut ports = Vec::new();
    let mut current = None;
    for (opcode, port) in by_psn.into_values() {
        if opcode == 0x00 {
            current = Some(port);
        }
        assert_eq!(current, Some(port), "a message changed ports");
        if opcode == 0x02 {
            ports.push(port);
        }
    }
    ports
}

/// The ports [`send_over_sessions`] must have used: round robin over the four, then
/// session 2, then the QP's own port (none of the sessions).
fn check_ports(ports: &[u16]) {
    assert_eq!(ports.len(), 11, "{ports:?}");
    let rr: Vec<u16> = (0..8).map(|i| SESSION_PORTS[i % 4]).collect();
    assert_eq!(ports[..8], rr[..], "round robin over the group");
    assert_eq!(
        ports[8..10],
        [SESSION_PORTS[2]; 2],
        "the group of session 2"
    );
    assert!(
        !SESSION_PORTS.contains(&ports[10]),
        "no group: the QP's own port"
    );
}

#[test]
fn messages_leave_from_the_sessions_the_pf_assigned_between_functions() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("sessions.pcap");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    assign_sessions(&rnicd.socket("pf"), 1);
    let o = PairOptions::default();
    let (a, b) = rnic_tests::verbs_pair::pair(&rnicd, "vf0", "vf1", &o);
    send_over_sessions(&a, &b);
    let src_ip = a.gid[12..16].to_vec();
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    check_ports(&message_ports(&pcap, &src_ip));
}

#[test]
fn messages_leave_from_the_sessions_the_pf_assigned_across_two_rnicd() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("sessions.pcap");
    let o = PairOptions::default();
    let pcap_arg = pcap.to_str().unwrap();
    let mut rnicd_a = Rnicd::start(1, &["--net", "udp:127.0.130.1", "--pcap", pcap_arg]);
    // The receiver's capture shows the frames as they came off the UDP socket: the
    // sessions are real 5-tuples.
    let pcap_b = dir.path().join("sessions-b.pcap");
    let mut rnicd_b = Rnicd::start(
        1,
        &[
            "--net",
            "udp:127.0.131.1",
            "--pcap",
            pcap_b.to_str().unwrap(),
        ],
    );
    // Here with rnic-admin, which does the same.
    let ports: Vec<String> = SESSION_PORTS.iter().map(u16::to_string).collect();
    let mut args = vec!["sessions", "vf0"];
    args.extend(ports.iter().map(String::as_str));
    rnicd_a.admin(&args);
    let a = side(&rnicd_a.socket("vf0"), &o);
    let b = side(&rnicd_b.socket("vf0"), &o);
    rnic_tests::verbs_pair::connect(&a, &b, &o, 0x10, 0x20);
    send_over_sessions(&a, &b);
    let src_ip = a.gid[12..16].to_vec();
    rnicd_a.stop_with(libc::SIGTERM);
    rnicd_b.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    check_ports(&message_ports(&pcap, &src_ip));
    check_ports(&message_ports(&pcap_b, &src_ip));
}
