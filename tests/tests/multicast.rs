//! UD multicast (ABI 1.11, `CAP_MULTICAST`, datasheet §14.15) through the Rust driver over
//! vfio-user, against a real rnicd: UD QPs of two functions join a group; a datagram one
//! QP sends to the group (destination QPN 0xFFFFFF) reaches every QP in it, on the
//! sender's own function too, each with the group's address in its GRH; a QP that left
//! gets nothing more, while the others still do; what is no group, or no UD QP, or not
//! in the group, is refused.

use rnic_abi::cmd::Status;
use rnic_abi::gid::mapped;
use rnic_abi::regs::CAP_MULTICAST;
use rnic_driver::verbs::MULTICAST_QPN;
use rnic_driver::verbs::{self, RecvWr, UdAddress, WcOpcode, WcStatus, WrOpcode, GRH_LEN};
use rnic_tests::feature_checks::{expect, status};
use rnic_tests::verbs_pair::{pattern, read_mr, side, signaled, PairOptions, Side};
use rnic_tests::Rnicd;

const GROUP: [u8; 4] = [239, 1, 2, 3];
const QKEY: u32 = 0x2222;

/// A UD QP of `s` in RTS with its receive and send completions on `cq`.
fn ud_qp(s: &Side, cq: &verbs::Cq, o: &PairOptions) -> verbs::Qp {
    let qp = s.pd.create_ud_qp(cq, cq, o.caps).unwrap();
    qp.ud_ready(QKEY, 0).unwrap();
    qp
}

/// Posts a receive of `qp` into `s`'s buffer at `at`.
fn post_recv(qp: &verbs::Qp, s: &Side, wr_id: u64, at: usize) {
    qp.post_recv(&RecvWr {
        wr_id,
        sges: vec![s.mr.sge(at, GRH_LEN as usize + 256)],
    })
    .unwrap();
}

#[test]
fn a_datagram_to_a_group_reaches_every_qp_in_it_and_none_that_left() {
    let rnicd = Rnicd::start(2, &[]);
    let o = PairOptions::default();
    let a = side(&rnicd.socket("vf0"), &o);
    let b = side(&rnicd.socket("vf1"), &o);
    assert_eq!(a.ctx.attr().caps & CAP_MULTICAST, CAP_MULTICAST);
    let group = mapped(GROUP);

    let sent = a.ctx.create_cq(16).unwrap();
    let sender = ud_qp(&a, &sent, &o);
    let a_member = ud_qp(&a, &a.cq, &o);
    let b_cq = [b.ctx.create_cq(16).unwrap(), b.ctx.create_cq(16).unwrap()];
    let b_members = [ud_qp(&b, &b_cq[0], &o), ud_qp(&b, &b_cq[1], &o)];

    // What is refused, changing nothing.
    let bad = Status::BadParam as u16;
    assert_eq!(status(a_member.attach_mcast(&a.gid)), bad, "a unicast GID");
    assert_eq!(status(a.qp.attach_mcast(&group)), bad, "an RC QP");
    assert_eq!(
        status(a_member.detach_mcast(&group)),
        bad,
        "not in the group"
    );

    for qp in [&a_member, &b_members[0], &b_members[1]] {
        qp.attach_mcast(&group).unwrap();
    }
    // Joining twice changes nothing.
    b_members[0].attach_mcast(&group).unwrap();

    let to_group = UdAddress {
        dest_qpn: MULTICAST_QPN,
        qkey: QKEY,
        dgid: group,
        ..UdAddress::default()
    };
    let data = pattern(256, 7);
    a.mr.write(0, &data);
    post_recv(&a_member, &a, 10, 8192);
    post_recv(&b_members[0], &b, 20, 8192);
    post_recv(&b_members[1], &b, 21, 16384);
    let send = signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 256)]);
    sender.post_ud_send(&send, &to_group).unwrap();
    expect(&sent, 1, WcStatus::Success);
    for (s, cq, wr_id, at) in [
        (&a, &a.cq, 10, 8192usize),
        (&b, &b_cq[0], 20, 8192),
        (&b, &b_cq[1], 21, 16384),
    ] {
        let got = expect(cq, wr_id, WcStatus::Success);
        assert_eq!((got.opcode, got.src_qp), (WcOpcode::Recv, sender.qp_num()));
        // The GRH's IPv4 header: the sender's address, then the group's.
        let grh = read_mr(&s.mr, at, GRH_LEN as usize);
        assert_eq!(&grh[32..36], &a.gid[12..16], "source address");
        assert_eq!(&grh[36..40], &GROUP[..], "destination address");
        assert_eq!(read_mr(&s.mr, at + GRH_LEN as usize, 256), data);
    }

    // One of b's QPs leaves: the next datagram reaches the other. Both are delivered in
    // the one pass over the frame, so once the member's completion is there, the one
    // that left would have had its own.
    b_members[0].detach_mcast(&group).unwrap();
    post_recv(&b_members[0], &b, 22, 8192);
    post_recv(&b_members[1], &b, 23, 16384);
    let send = signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 256)]);
    sender.post_ud_send(&send, &to_group).unwrap();
    expect(&sent, 2, WcStatus::Success);
    expect(&b_cq[1], 23, WcStatus::Success);
    assert!(
        b_cq[0].poll(4).is_empty(),
        "a QP that left the group took a datagram"
    );
    assert_eq!(
        status(b_members[0].detach_mcast(&group)),
        bad,
        "left already"
    );

    // A QP that joins later takes what comes from then on (its QPs destroyed, b holds
    // none in the group until then).
    drop(b_members);
    let late = ud_qp(&b, &b_cq[0], &o);
    late.attach_mcast(&group).unwrap();
    post_recv(&late, &b, 24, 8192);
    post_recv(&a_member, &a, 11, 8192);
    let send = signaled(3, WrOpcode::Send, vec![a.mr.sge(0, 256)]);
    sender.post_ud_send(&send, &to_group).unwrap();
    expect(&b_cq[0], 24, WcStatus::Success);
    expect(&sent, 3, WcStatus::Success);
    expect(&a.cq, 11, WcStatus::Success);
}
