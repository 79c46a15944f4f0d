//! The GID table (ABI 1.10, `CAP_GID_TABLE`, datasheet §6.13) through the Rust driver over
//! vfio-user, against a real rnicd: two functions each set an address of their own in
//! entry 1; RC QPs that send from it and address the peer's reach each other (the
//! responder checks that packets come from the GID it was connected to, so this shows
//! the source address too), as do UD datagrams, whose GRH names the entry's address;
//! what cannot be an address, or is another function's, is refused; a QP cannot send
//! from an empty entry; a reset empties the table and frees its addresses.

use rnic_abi::cmd::Status;
use rnic_abi::gid::{mapped, GID_TABLE_LEN};
use rnic_abi::regs::CAP_GID_TABLE;
use rnic_driver::verbs::{self, RecvWr, UdAddress, WcOpcode, WcStatus, WrOpcode, GRH_LEN};
use rnic_tests::feature_checks::{expect, status, write};
use rnic_tests::verbs_pair::{
    init_qp, pattern, read_mr, side, signaled, to_rts, PairOptions, Side,
};
use rnic_tests::Rnicd;

const A_IP: [u8; 4] = [10, 99, 0, 1];
const B_IP: [u8; 4] = [10, 99, 0, 2];

/// Connects a fresh RC QP of `a` and one of `b`, each sending from entry `sgid_index`
/// of its table and addressing the other at `a_gid` / `b_gid`.
fn connect_from(
    a: &Side,
    b: &Side,
    sgid_index: u8,
    a_gid: [u8; 16],
    b_gid: [u8; 16],
) -> (verbs::Qp, verbs::Qp) {
    let o = PairOptions::default();
    let access = verbs::ACCESS_REMOTE_WRITE | verbs::ACCESS_REMOTE_READ;
    let qa = init_qp(a, &a.cq, &o, access);
    let qb = init_qp(b, &b.cq, &o, access);
    for (me, peer, peer_gid, psn) in [(&qa, &qb, b_gid, 0x100), (&qb, &qa, a_gid, 0x200)] {
        let (mut at, m) = verbs::rtr_attr(peer.qp_num(), peer_gid, psn, o.mtu, 16, 1);
        at.sgid_index = sgid_index;
        me.modify(&at, m).expect("RTR");
    }
    to_rts(&qa, &o, 0x200);
    to_rts(&qb, &o, 0x100);
    (qa, qb)
}

#[test]
fn functions_send_from_and_take_packets_for_the_addresses_their_drivers_set() {
    let rnicd = Rnicd::start(2, &[]);
    let o = PairOptions::default();
    let a = side(&rnicd.socket("vf0"), &o);
    let b = side(&rnicd.socket("vf1"), &o);
    assert_eq!(a.ctx.attr().caps & CAP_GID_TABLE, CAP_GID_TABLE);

    // At reset: entry 0 is the function's GID, the rest empty.
    assert_eq!(a.ctx.query_gid(0).unwrap(), Some(a.gid));
    assert_eq!(a.ctx.query_gid(1).unwrap(), None);
    a.ctx.set_gid(1, Some(mapped(A_IP))).unwrap();
    b.ctx.set_gid(1, Some(mapped(B_IP))).unwrap();
    assert_eq!(a.ctx.query_gid(1).unwrap(), Some(mapped(A_IP)));

    // What cannot be set, and changes nothing.
    let bad = Status::BadParam as u16;
    let cases: [(u32, [u8; 16], u16); 5] = [
        (GID_TABLE_LEN, mapped([10, 99, 0, 9]), bad),
        (2, mapped([224, 0, 0, 1]), bad),
        (2, mapped([0, 0, 0, 0]), bad),
        // Another function's: the address a set, and a's own.
        (2, mapped(A_IP), bad),
        (2, a.gid, bad),
    ];
    for (index, gid, want) in cases {
        assert_eq!(status(b.ctx.set_gid(index, Some(gid))), want, "{gid:?}");
    }
    assert_eq!(b.ctx.query_gid(2).unwrap(), None);
    assert_eq!(status(b.ctx.query_gid(GID_TABLE_LEN)), bad);

    // RC from entry 1 to the peer's entry-1 address, both ways: WRITE and SEND.
    let (qa, qb) = connect_from(&a, &b, 1, mapped(A_IP), mapped(B_IP));
    for (from, qf, to, seed) in [(&a, &qa, &b, 1u64), (&b, &qb, &a, 2)] {
        let data = pattern(4096, seed);
        from.mr.write(0, &data);
        let wr = write(seed, to.mr.rkey(), to.mr.addr(65536), from.mr.sge(0, 4096));
        qf.post_send(&wr).unwrap();
        expect(&from.cq, seed, WcStatus::Success);
        assert_eq!(read_mr(&to.mr, 65536, 4096), data);
    }

    // A QP that names an empty entry, or one without an IPv4 address, cannot connect.
    let empty = init_qp(&a, &a.cq, &o, 0);
    let (mut at, m) = verbs::rtr_attr(qb.qp_num(), mapped(B_IP), 0, o.mtu, 16, 1);
    at.sgid_index = 3;
    assert_eq!(status(empty.modify(&at, m)), bad);
    let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 1];
    a.ctx.set_gid(3, Some(link_local)).unwrap();
    assert_eq!(a.ctx.query_gid(3).unwrap(), Some(link_local));
    assert_eq!(status(empty.modify(&at, m)), bad);

    // UD from entry 1: the receiver's GRH names the source address.
    let caps = o.caps;
    let ua = a.pd.create_ud_qp(&a.cq, &a.cq, caps).unwrap();
    let ub = b.pd.create_ud_qp(&b.cq, &b.cq, caps).unwrap();
    ua.ud_ready(0x1111, 0).unwrap();
    ub.ud_ready(0x1111, 0).unwrap();
    ub.post_recv(&RecvWr {
        wr_id: 30,
        sges: vec![b.mr.sge(8192, GRH_LEN as usize + 256)],
    })
    .unwrap();
    let data = pattern(256, 3);
    a.mr.write(0, &data);
    let to_b = UdAddress {
        dest_qpn: ub.qp_num(),
        qkey: 0x1111,
        dgid: mapped(B_IP),
        sgid_index: 1,
        ..UdAddress::default()
    };
    let send = signaled(31, WrOpcode::Send, vec![a.mr.sge(0, 256)]);
    ua.post_ud_send(&send, &to_b).unwrap();
    expect(&a.cq, 31, WcStatus::Success);
    let got = expect(&b.cq, 30, WcStatus::Success);
    assert_eq!(got.opcode, WcOpcode::Recv);
    assert_eq!(got.src_qp, ua.qp_num());
    // Over IPv4 the GRH's last 20 bytes are the IPv4 header (as on rxe): source address
    // at 32..36, destination at 36..40.
    let grh = read_mr(&b.mr, 8192, GRH_LEN as usize);
    assert_eq!(&grh[32..36], &A_IP[..], "source address");
    assert_eq!(&grh[36..40], &B_IP[..], "destination address");
    assert_eq!(read_mr(&b.mr, 8192 + GRH_LEN as usize, 256), data);
    // A datagram from an entry with no IPv4 address completes in error.
    let from_ipv6 = UdAddress {
        sgid_index: 3,
        ..to_b
    };
    ua.post_ud_send(
        &signaled(32, WrOpcode::Send, vec![a.mr.sge(0, 256)]),
        &from_ipv6,
    )
    .unwrap();
    expect(&a.cq, 32, WcStatus::LocQpOpErr);

    // Clearing an entry frees its address for another function.
    drop((ua, ub, qa, qb, empty));
    a.ctx.set_gid(1, None).unwrap();
    assert_eq!(a.ctx.query_gid(1).unwrap(), None);
    b.ctx.set_gid(2, Some(mapped(A_IP))).unwrap();
    b.ctx.set_gid(2, None).unwrap();

    // A reset (the client goes away) empties the table and frees the addresses.
    a.ctx.set_gid(4, Some(mapped([10, 99, 0, 4]))).unwrap();
    drop(a);
    let a = side(&rnicd.socket("vf0"), &o);
    assert_eq!(a.ctx.query_gid(4).unwrap(), None);
    assert_eq!(a.ctx.query_gid(0).unwrap(), Some(a.gid));
    b.ctx.set_gid(4, Some(mapped([10, 99, 0, 4]))).unwrap();
}
