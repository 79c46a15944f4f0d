//! `RESIZE_SRQ` (ABI 1.11, `CAP_RESIZE_SRQ`) through the Rust driver over vfio-user,
//! against a real rnicd: an SRQ of 4 entries with receives posted and not taken yet, across
//! a wrap of its ring, moves to a ring of 16, and messages then take those receives in
//! order, with their wr_ids and into their buffers, followed by more receives than the old
//! ring could hold; a size smaller than what is pending, or not above the armed limit, is
//! refused and changes nothing, and the SRQ works on after a refusal; the limit stays
//! armed across a resize; an SRQ shrinks once drained.

use rnic_abi::cmd::Status;
use rnic_abi::regs::CAP_RESIZE_SRQ;
use rnic_driver::verbs::{self, Qp, RecvWr, Srq, WcStatus, WrOpcode, ACCESS_REMOTE_WRITE};
use rnic_tests::feature_checks::{expect, status};
use rnic_tests::verbs_pair::{
    connect_qps, init_qp, pair, pattern, read_mr, signaled, PairOptions, Side,
};
use rnic_tests::Rnicd;

/// Bytes of each receive buffer, at `wr_id * BUF` in b's MR.
const BUF: usize = 256;

fn recvs(b: &Side, ids: std::ops::Range<u64>) -> Vec<RecvWr> {
    ids.map(|id| RecvWr {
        wr_id: id,
        sges: vec![b.mr.sge(id as usize * BUF, BUF)],
    })
    .collect()
}

/// Sends one message per id in `ids` from `qa` (`100 + id` bytes of pattern `id`), and
/// checks that each took the next receive of the SRQ: that receive's wr_id is `id`, and
/// its buffer got the bytes.
fn messages(a: &Side, b: &Side, qa: &Qp, ids: std::ops::Range<u64>) {
    for id in ids {
        let len = 100 + id as usize;
        let off = id as usize * BUF;
        a.mr.write(off, &pattern(len, id));
        qa.post_send(&signaled(id, WrOpcode::Send, vec![a.mr.sge(off, len)]))
            .unwrap();
        expect(&a.cq, id, WcStatus::Success);
        let got = expect(&b.cq, id, WcStatus::Success);
        assert_eq!(got.byte_len, len as u32, "message {id}");
        assert_eq!(read_mr(&b.mr, off, len), pattern(len, id), "message {id}");
    }
}

/// An SRQ of `b` with one QP of `b` on it, connected to a QP of `a`: (a's QP, b's QP).
fn qp_on(a: &Side, b: &Side, srq: &Srq) -> (Qp, Qp) {
    let o = PairOptions::default();
    let qa = init_qp(a, &a.cq, &o, ACCESS_REMOTE_WRITE);
    let qb =
        b.pd.create_qp_with_srq(&b.cq, &b.cq, o.caps, false, srq)
            .unwrap();
    let (at, m) = verbs::init_attr(ACCESS_REMOTE_WRITE);
    qb.modify(&at, m).unwrap();
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x100, 0x200);
    (qa, qb)
}

#[test]
fn an_srq_moves_to_a_bigger_ring_with_its_pending_receives_and_shrinks_when_drained() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    assert_eq!(a.ctx.attr().caps & CAP_RESIZE_SRQ, CAP_RESIZE_SRQ);
    let srq = b.pd.create_srq(4, 1, 0).unwrap();
    assert_eq!(srq.max_wr(), 4);
    let (qa, _qb) = qp_on(&a, &b, &srq);

    // Four posted, three taken; three more posted across the wrap (indexes 4..7 in
    // entries 0..3): receives 3..7 are pending, at indexes 3, 4, 5, 6.
    srq.post_recv_list(&recvs(&b, 0..4)).unwrap();
    messages(&a, &b, &qa, 0..3);
    srq.post_recv_list(&recvs(&b, 4..7)).unwrap();
    assert_eq!(srq.query().unwrap().consumed, 3);
    srq.set_limit(2).unwrap();

    // Too small for what is pending: refused, nothing changes, and the SRQ works on.
    assert_eq!(status(srq.resize(2)), Status::BadParam as u16);
    assert_eq!(srq.max_wr(), 4);
    let q = srq.query().unwrap();
    assert_eq!((q.max_wr, q.srq_limit, q.consumed), (4, 2, 3));

    srq.resize(16).unwrap();
    assert_eq!(srq.max_wr(), 16);
    let q = srq.query().unwrap();
    // The limit stays armed.
    assert_eq!((q.max_wr, q.srq_limit, q.consumed), (16, 2, 3));
    // The pending receives, from the new ring, in order.
    messages(&a, &b, &qa, 3..5);
    srq.set_limit(0).unwrap();
    messages(&a, &b, &qa, 5..7);
    // More than the old ring held, posted to the new one from the driver's index on.
    srq.post_recv_list(&recvs(&b, 7..19)).unwrap();
    messages(&a, &b, &qa, 7..19);

    // Not above the armed limit: refused, even when drained.
    srq.set_limit(8).unwrap();
    assert_eq!(status(srq.resize(8)), Status::BadParam as u16);
    assert_eq!(srq.query().unwrap().max_wr, 16);
    srq.set_limit(0).unwrap();
    // Drained, it shrinks, and still works.
    srq.resize(2).unwrap();
    assert_eq!(srq.query().unwrap().max_wr, 2);
    srq.post_recv_list(&recvs(&b, 19..21)).unwrap();
    messages(&a, &b, &qa, 19..21);
    assert_eq!(srq.query().unwrap().consumed, 21);
}
