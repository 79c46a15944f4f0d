//! `RESIZE_CQ` (ABI 1.10, `CAP_RESIZE_CQ`) through the Rust driver over vfio-user, against
//! a real rnicd: a CQ of 4 entries with completions not polled yet moves to a ring of 16
//! (past a wrap of the old one), and they come out of the new ring in order, followed by
//! more than the old ring could hold; a size smaller than what is pending is refused and
//! changes nothing; a CQ shrinks once it is drained.

use std::time::Duration;

use rnic_abi::cmd::Status;
use rnic_abi::regs::CAP_RESIZE_CQ;
use rnic_driver::verbs::{self, Cq, Qp, WcStatus};
use rnic_tests::feature_checks::{status, write};
use rnic_tests::verbs_pair::{connect_qps, init_qp, pair, pattern, poll_n, read_mr, PairOptions};
use rnic_tests::Rnicd;

const WAIT: Duration = Duration::from_secs(10);

/// Posts signaled 64-byte WRITEs `ids` from `qa` into `b`'s MR, each at offset `id * 64`,
/// and waits until the last one's bytes arrived (its completion is then close behind).
fn writes(
    a: &rnic_tests::verbs_pair::Side,
    b: &rnic_tests::verbs_pair::Side,
    qa: &Qp,
    ids: std::ops::Range<u64>,
) {
    let last = ids.end - 1;
    for id in ids {
        let off = (id * 64) as usize;
        a.mr.write(off, &pattern(64, id));
        let wr = write(id, b.mr.rkey(), b.mr.addr(off), a.mr.sge(off, 64));
        qa.post_send(&wr).unwrap();
    }
    let off = (last * 64) as usize;
    let deadline = std::time::Instant::now() + WAIT;
    while read_mr(&b.mr, off, 64) != pattern(64, last) {
        assert!(
            std::time::Instant::now() < deadline,
            "WRITE {last} never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The ACK comes back through the same switch.
    std::thread::sleep(Duration::from_millis(100));
}

/// Polls `n` completions of `cq` and checks they are `ids`, successful, in order.
fn expect_ids(cq: &Cq, ids: std::ops::Range<u64>) {
    let want: Vec<u64> = ids.collect();
    let got = poll_n(cq, want.len(), WAIT);
    assert!(
        got.iter().all(|w| w.status == Ok(WcStatus::Success)),
        "{got:?}"
    );
    assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), want);
}

#[test]
fn a_cq_moves_to_a_bigger_ring_with_its_pending_completions_and_shrinks_when_drained() {
    let rnicd = Rnicd::start(2, &[]);
    let o = PairOptions::default();
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    assert_eq!(a.ctx.attr().caps & CAP_RESIZE_CQ, CAP_RESIZE_CQ);
    let cq = a.ctx.create_cq(4).unwrap();
    assert_eq!(cq.entries(), 4);
    let access = verbs::ACCESS_REMOTE_WRITE;
    let qa = init_qp(&a, &cq, &o, access);
    let qb = init_qp(&b, &b.cq, &o, access);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x10, 0x20);

    // Three completions polled, three pending across the old ring's wrap (indexes 3..6).
    writes(&a, &b, &qa, 1..4);
    expect_ids(&cq, 1..4);
    writes(&a, &b, &qa, 4..7);
    // Too small for what is pending: refused, nothing changes.
    assert_eq!(status(cq.resize(2)), Status::BadParam as u16);
    assert_eq!(cq.entries(), 4);
    cq.resize(16).unwrap();
    assert_eq!(cq.entries(), 16);
    expect_ids(&cq, 4..7);
    // More than the old ring held, unpolled, then polled from the new one.
    writes(&a, &b, &qa, 7..19);
    expect_ids(&cq, 7..19);
    // Drained, it shrinks back, and still works.
    cq.resize(2).unwrap();
    writes(&a, &b, &qa, 19..21);
    expect_ids(&cq, 19..21);
    assert!(poll_n(&cq, 1, Duration::from_millis(50)).is_empty());
}
