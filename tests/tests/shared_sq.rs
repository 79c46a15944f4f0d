//! Shared send queues (datasheet §14.10): one queue and one CQ for many connections, whose
//! completions come in posting order, between two VFs of one rnicd and across two rnicd
//! over UDP.

use std::time::Duration;

use rnic_abi::regs;
use rnic_driver::verbs::{Qp, Wc, WcStatus, WrOpcode, ACCESS_REMOTE_WRITE};
use rnic_tests::feature_checks::{expect, write_to_mr, T};
use rnic_tests::verbs_pair::{
    buffer_bytes, connect_qps, init_qp, pattern, poll_n, side, signaled, PairOptions, Side,
};
use rnic_tests::Rnicd;

/// Bytes each shared-queue WR moves.
const SSQ_LEN: usize = 4096;

/// A QP of `a` connected to the QP of each of `peers`.
fn fan_out(a: &Side, peers: &[Side]) -> Vec<Qp> {
    let o = PairOptions::default();
    peers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let qa = init_qp(a, &a.cq, &o, ACCESS_REMOTE_WRITE);
            connect_qps((&qa, a.gid), (&p.qp, p.gid), &o, 0x500 + i as u32, 0x900);
            qa
        })
        .collect()
}

/// Through one shared send queue of `a`: a SEND to `peers[0]`, which has no receive
/// posted (its connection stalls in RNR), then WRITEs to the others, which land first;
/// no completion comes until the SEND is received, then all in posting order. Then a
/// round-robin burst completes in posting order too.
fn shared_sq_completes_in_posting_order(a: &Side, peers: &[Side]) {
    assert!(a.ctx.attr().caps & regs::CAP_SHARED_SQ != 0);
    let qps = fan_out(a, peers);
    let cq = a.ctx.create_cq(64).expect("CQ");
    let ssq =
        a.pd.create_shared_sq(16, 2, 0, &cq)
            .expect("shared send queue");
    let data = pattern(SSQ_LEN, 9);
    a.mr.write(0, &data);
    let send = signaled(0, WrOpcode::Send, vec![a.mr.sge(0, SSQ_LEN)]);
    ssq.post_send(&qps[0], &send).expect("post the SEND");
    for (i, peer) in peers.iter().enumerate().skip(1) {
        ssq.post_send(&qps[i], &write_to_mr(i as u64, peer, a.mr.sge(0, SSQ_LEN)))
            .expect("post a WRITE");
    }
    let landed = |p: &Side| buffer_bytes(&p.mr)[p.mr.offset()..][..SSQ_LEN] == data[..];
    rnic_tests::wait_for(T, "the WRITEs to land", || peers[1..].iter().all(landed));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        cq.poll(1).is_empty(),
        "nothing completes before the SEND posted first"
    );
    peers[0]
        .qp
        .post_recv(&rnic_driver::verbs::RecvWr {
            wr_id: 50,
            sges: vec![peers[0].mr.sge(0, SSQ_LEN)],
        })
        .expect("post the receive");
    let check_order = |wcs: &[Wc], expected: &[(u64, u32)]| {
        let got: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.src_qp)).collect();
        assert_eq!(
            got, expected,
            "completions in posting order, with their QPs"
        );
        for w in wcs {
            assert_eq!(w.status, Ok(WcStatus::Success), "{}", w.status_str());
            assert_eq!(
                w.qp_num,
                rnic_abi::shared_sq::SHARED_SQ_CQE_QPN_BIT | ssq.ssqn()
            );
        }
    };
    let wcs = poll_n(&cq, peers.len(), T);
    let expected: Vec<(u64, u32)> = (0..peers.len())
        .map(|i| (i as u64, qps[i].qp_num()))
        .collect();
    check_order(&wcs, &expected);
    expect(&peers[0].cq, 50, WcStatus::Success);
    assert!(landed(&peers[0]));
    // A burst, round robin over the QPs, with sizes that make the connections uneven.
    let mut expected = Vec::new();
    for n in 0..12u64 {
        let i = n as usize % qps.len();
        let len = if i == 0 {
            SSQ_LEN
        } else {
            64 * (n as usize + 1)
        };
        ssq.post_send(&qps[i], &write_to_mr(100 + n, &peers[i], a.mr.sge(0, len)))
            .expect("post");
        expected.push((100 + n, qps[i].qp_num()));
    }
    check_order(&poll_n(&cq, expected.len(), T), &expected);
    // A WR naming a QP of another PD completes with LOC_QP_OP_ERR in its place; the WRs
    // around it, and their QPs, go on.
    let other_pd = a.ctx.alloc_pd().expect("PD");
    let stranger = init_qp_in(a, &other_pd);
    ssq.post_send(&qps[1], &write_to_mr(200, &peers[1], a.mr.sge(0, 64)))
        .expect("post");
    ssq.post_send(&stranger, &write_to_mr(201, &peers[1], a.mr.sge(0, 64)))
        .expect("post");
    ssq.post_send(&qps[2], &write_to_mr(202, &peers[2], a.mr.sge(0, 64)))
        .expect("post");
    let wcs = poll_n(&cq, 3, T);
    let got: Vec<(u64, Result<WcStatus, u8>)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (200, Ok(WcStatus::Success)),
            (201, Ok(WcStatus::LocQpOpErr)),
            (202, Ok(WcStatus::Success))
        ]
    );
    assert_eq!(wcs[1].src_qp, stranger.qp_num());
    // A QP that enters ERR while it holds an entry (a SEND waiting in RNR, peer 0 has no
    // receive) completes it flushed, in its place; the entry behind it, on another QP,
    // waited for it and then completes.
    ssq.post_send(
        &qps[0],
        &signaled(300, WrOpcode::Send, vec![a.mr.sge(0, 64)]),
    )
    .expect("post");
    ssq.post_send(&qps[1], &write_to_mr(301, &peers[1], a.mr.sge(0, 64)))
        .expect("post");
    std::thread::sleep(Duration::from_millis(100));
    assert!(cq.poll(1).is_empty(), "the SEND holds the order");
    let err = rnic_driver::verbs::QpAttr {
        qp_state: rnic_driver::verbs::QpState::Err as u8,
        ..Default::default()
    };
    qps[0]
        .modify(&err, rnic_driver::verbs::attr::STATE)
        .expect("to ERR");
    let got: Vec<(u64, Result<WcStatus, u8>)> = poll_n(&cq, 2, T)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        got,
        [
            (300, Ok(WcStatus::WrFlushErr)),
            (301, Ok(WcStatus::Success))
        ]
    );
    assert_eq!(ssq.free_slots(), 16, "every completion freed its slot");
}

/// A QP of `a`'s context in `pd`, in INIT.
fn init_qp_in(a: &Side, pd: &rnic_driver::verbs::Pd) -> Qp {
    let o = PairOptions::default();
    let qp = pd.create_qp(&a.cq, &a.cq, o.caps, false).expect("QP");
    let (at, m) = rnic_driver::verbs::init_attr(ACCESS_REMOTE_WRITE);
    qp.modify(&at, m).expect("INIT");
    qp
}

#[test]
fn a_shared_send_queue_completes_in_posting_order_between_functions() {
    let o = PairOptions::default();
    let rnicd = Rnicd::start(4, &[]);
    let a = side(&rnicd.socket("vf0"), &o);
    let peers: Vec<Side> = ["vf1", "vf2", "vf3"]
        .iter()
        .map(|f| side(&rnicd.socket(f), &o))
        .collect();
    shared_sq_completes_in_posting_order(&a, &peers);
}

#[test]
fn a_shared_send_queue_completes_in_posting_order_across_two_rnicd() {
    let o = PairOptions::default();
    let rnicd_a = Rnicd::start(1, &["--net", "udp:127.0.128.1"]);
    let rnicd_b = Rnicd::start(3, &["--net", "udp:127.0.129.1"]);
    let a = side(&rnicd_a.socket("vf0"), &o);
    let peers: Vec<Side> = ["vf0", "vf1", "vf2"]
        .iter()
        .map(|f| side(&rnicd_b.socket(f), &o))
        .collect();
    shared_sq_completes_in_posting_order(&a, &peers);
    drop((a, peers));
}
