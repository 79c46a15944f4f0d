//! UD QPs (datasheet §14.5): SENDs arrive with their GRH, wrong Q_Keys and SENDs without a
//! receive are dropped and counted, between two VFs of one rnicd and between two rnicd
//! over UDP; the frames are checked in the capture (ICRC included).

use rnic_abi::verbs::wc_flags;
use rnic_driver::verbs::{Qp, RecvWr, SendWr, UdAddress, WcOpcode, WcStatus, WrOpcode, GRH_LEN};
use rnic_tests::feature_checks::{expect, QUIET};
use rnic_tests::net::two_rnicd;
use rnic_tests::verbs_pair::{pair, pattern, poll_n, read_mr, signaled, PairOptions, Side};
use rnic_tests::wire::{carried_icrc, expected_icrc, pcap_frames};
use rnic_tests::Rnicd;

const QKEY: u32 = 0x1111_0042;

/// A UD QP on each side, ready; (a's, b's).
fn ud_pair(a: &Side, b: &Side) -> (Qp, Qp) {
    let caps = PairOptions::default().caps;
    let qa = a.pd.create_ud_qp(&a.cq, &a.cq, caps).unwrap();
    let qb = b.pd.create_ud_qp(&b.cq, &b.cq, caps).unwrap();
    qa.ud_ready(0x77, 0x10).unwrap();
    qb.ud_ready(QKEY, 0x20).unwrap();
    (qa, qb)
}

/// Exchanges UD SENDs from `a` to `b`: a plain one, a full-size solicited one with
/// immediate data, one with the wrong Q_Key and one while no receive is posted (both
/// dropped at `b`). Checks every byte of the receive buffers; returns the IPv4 header the
/// first receive's GRH held.
fn ud_exchange(a: &Side, b: &Side) -> Vec<u8> {
    let (qa, qb) = ud_pair(a, b);
    let to = UdAddress {
        dest_qpn: qb.qp_num(),
        qkey: QKEY,
        dgid: b.gid,
        ..UdAddress::default()
    };
    let grh = GRH_LEN as usize;
    let mut first_grh = Vec::new();
    // (length, immediate, solicited)
    for (i, (len, imm, solicited)) in [(100usize, None, false), (4096, Some(0xC0FFEE), true)]
        .into_iter()
        .enumerate()
    {
        let id = i as u64 + 1;
        let at = i * 8192;
        qb.post_recv(&RecvWr {
            wr_id: id,
            sges: vec![b.mr.sge(at, grh + 4096)],
        })
        .unwrap();
        let data = pattern(len, 60 + id);
        a.mr.write(at, &data);
        let opcode = imm.map_or(WrOpcode::Send, WrOpcode::SendWithImm);
        let wr = SendWr {
            solicited,
            ..signaled(id, opcode, vec![a.mr.sge(at, len)])
        };
        qa.post_ud_send(&wr, &to).unwrap();
        let sent = expect(&a.cq, id, WcStatus::Success);
        assert_eq!((sent.opcode, sent.byte_len), (WcOpcode::Send, len as u32));
        let got = expect(&b.cq, id, WcStatus::Success);
        assert_eq!(got.opcode, WcOpcode::Recv);
        assert_eq!(got.qp_num, qb.qp_num());
        assert_eq!(got.src_qp, qa.qp_num());
        assert_eq!(got.byte_len, (grh + len) as u32);
        assert_eq!(got.imm_data, imm);
        let flags = wc_flags::GRH
            | imm.map_or(0, |_| wc_flags::WITH_IMM)
            | if solicited { wc_flags::SOLICITED } else { 0 };
        assert_eq!(got.wc_flags, flags);
        let buf = read_mr(&b.mr, at, grh + len);
        assert_eq!(buf[..20], [0; 20], "the GRH's first 20 bytes are zero");
        let ip = &buf[20..40];
        assert_eq!(ip[0], 0x45, "an IPv4 header");
        assert_eq!(ip[9], 17, "UDP");
        assert_eq!(ip[12..16], a.gid[12..16], "source address");
        assert_eq!(ip[16..20], b.gid[12..16], "destination address");
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            20 + 8 + 12 + 8 + imm.map_or(0, |_| 4) + len.div_ceil(4) * 4 + 4,
            "IPv4 total length: IP, UDP, BTH, DETH, ImmDt, payload and pad, ICRC"
        );
        assert_eq!(buf[grh..], data[..]);
        if i == 0 {
            first_grh = ip.to_vec();
        }
    }
    // The wrong Q_Key: sent (UD does not know), dropped at b; the receive stays posted.
    qb.post_recv(&RecvWr {
        wr_id: 3,
        sges: vec![b.mr.sge(3 * 8192, grh + 64)],
    })
    .unwrap();
    let wrong = UdAddress { qkey: 0x2222, ..to };
    qa.post_ud_send(&signaled(3, WrOpcode::Send, vec![a.mr.sge(0, 8)]), &wrong)
        .unwrap();
    expect(&a.cq, 3, WcStatus::Success);
    assert!(
        poll_n(&b.cq, 1, QUIET).is_empty(),
        "a wrong Q_Key was taken"
    );
    // The right one takes that receive; with the QP's own Q_Key it would be 0x77.
    qa.post_ud_send(&signaled(4, WrOpcode::Send, vec![a.mr.sge(0, 8)]), &to)
        .unwrap();
    expect(&a.cq, 4, WcStatus::Success);
    expect(&b.cq, 3, WcStatus::Success);
    // Nothing posted: dropped, not retried.
    qa.post_ud_send(&signaled(5, WrOpcode::Send, vec![a.mr.sge(0, 8)]), &to)
        .unwrap();
    expect(&a.cq, 5, WcStatus::Success);
    assert!(poll_n(&b.cq, 1, QUIET).is_empty());
    // More than a packet is refused before it is posted.
    let big = signaled(6, WrOpcode::Send, vec![a.mr.sge(0, 4097)]);
    assert!(qa.post_ud_send(&big, &to).is_err());
    first_grh
}

/// Checks that `function`'s drop counters in `log` have one Q_Key and one no-receive drop.
fn assert_ud_drops(log: &str, function: &str) {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains(&format!("{function}: drops ")))
        .unwrap_or_else(|| panic!("no drop counters of {function}:\n{log}"));
    assert!(
        line.contains(" qkey=1 ") && format!("{line} ").contains(" no_receive=1 "),
        "{line}"
    );
}

#[test]
fn ud_sends_arrive_with_their_grh_and_wrong_qkeys_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("ud.pcap");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let ip_header = ud_exchange(&a, &b);
    // The counters are logged when rnicd stops, and must be read while the clients are
    // still attached (a function's reset clears them).
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    assert_ud_drops(&rnicd.log(), "vf1");

    // On the wire, as rxe: BTH, DETH (Q_Key, reserved, source QP), ImmDt, payload, ICRC.
    let frames = pcap_frames(&std::fs::read(&pcap).unwrap());
    let ud: Vec<_> = frames
        .iter()
        .filter(|f| matches!(f.get(42), Some(0x64 | 0x65)))
        .collect();
    assert_eq!(ud.len(), 5, "five UD SENDs");
    for f in &ud {
        assert_eq!(carried_icrc(f), expected_icrc(f));
        let bth = &f[42..54];
        assert!(bth[8] & 0x80 == 0, "UD asks for no acknowledgement");
        assert_eq!(bth[1] & 0x0F, 0, "transport version 0");
        assert_eq!(bth[2..4], [0xFF, 0xFF], "default P_Key");
        assert_eq!(f[58], 0, "DETH reserved byte");
    }
    let first = ud[0];
    assert_eq!(first[42], 0x64);
    assert_eq!(first[54..58], QKEY.to_be_bytes());
    assert_eq!(
        first[14..34],
        ip_header[..],
        "the GRH holds the packet's IPv4 header"
    );
    let second = ud[1];
    assert_eq!(second[42], 0x65);
    assert!(second[43] & 0x80 != 0, "solicited event bit");
    assert_eq!(second[62..66], 0xC0FFEEu32.to_le_bytes(), "ImmDt as posted");
    assert_eq!(
        ud[2][54..58],
        0x2222u32.to_be_bytes(),
        "the wrong Q_Key as sent"
    );
    // Source QP (24 bits) after the reserved byte, destination QP in the BTH.
    assert_eq!(first[59..62], ud[1][59..62]);
    assert_eq!(first[47..50], ud[1][47..50]);
}

#[test]
fn ud_sends_cross_two_rnicd_over_udp() {
    let o = PairOptions::default();
    let (_ra, mut rb, a, b) = two_rnicd(["udp:127.0.87.1", "udp:127.0.88.1"], &[], &o, (1, 2));
    ud_exchange(&a, &b);
    rb.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    assert_ud_drops(&rb.log(), "vf0");
}
