//! Shared receive queues (datasheet §14.4): many QPs taking one queue's receives in order,
//! RNR when it is empty, the limit event, and a QP in error that flushes only its own
//! receive. Between two VFs of one rnicd over the host vfio-user transport, and between two
//! rnicd talking RoCEv2 over UDP.

use std::time::Duration;

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::verbs::ObjectReq;
use rnic_driver::verbs::{
    self, AsyncEvent, Qp, RecvWr, Srq, WcStatus, WrOpcode, ACCESS_REMOTE_WRITE,
};
use rnic_tests::feature_checks::{expect, status, QUIET, T};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{
    connect_qps, init_qp, pair, pattern, poll_n, read_mr, signaled, PairOptions, Side,
};
use rnic_tests::Rnicd;
use zerocopy::IntoBytes;

/// `n` QPs of `b` on `srq`, each connected to a fresh QP of `a`: (a's, b's).
fn qps_on_srq(a: &Side, b: &Side, srq: &Srq, n: usize) -> Vec<(Qp, Qp)> {
    qps_on_srq_with(a, b, srq, n, &PairOptions::default())
}

/// [`qps_on_srq`] with options `o` (path MTU, queue sizes).
fn qps_on_srq_with(a: &Side, b: &Side, srq: &Srq, n: usize, o: &PairOptions) -> Vec<(Qp, Qp)> {
    (0..n)
        .map(|i| {
            let qa = init_qp(a, &a.cq, o, ACCESS_REMOTE_WRITE);
            let qb =
                b.pd.create_qp_with_srq(&b.cq, &b.cq, o.caps, false, srq)
                    .unwrap();
            let (at, m) = verbs::init_attr(ACCESS_REMOTE_WRITE);
            qb.modify(&at, m).unwrap();
            let psn = 0x1000 * (i as u32 + 1);
            connect_qps((&qa, a.gid), (&qb, b.gid), o, psn, psn + 7);
            (qa, qb)
        })
        .collect()
}

fn srq_recv(wr_id: u64, b: &Side) -> RecvWr {
    RecvWr {
        wr_id,
        sges: vec![b.mr.sge(wr_id as usize * 4096, 4096)],
    }
}

#[test]
fn many_qps_take_an_srqs_receives_in_order_and_wait_rnr_when_it_is_empty() {
    on_both_paths(83, |a, b| {
        let srq = b.pd.create_srq(16, 1, 0).unwrap();
        let q = srq.query().unwrap();
        assert_eq!(
            (q.max_wr, q.max_sge, q.srq_limit, q.consumed),
            (16, 1, 0, 0)
        );
        let qps = qps_on_srq(a, b, &srq, 3);
        srq.post_recv_list(&(0..6).map(|i| srq_recv(i, b)).collect::<Vec<_>>())
            .unwrap();
        // QPs 2, 0, 1, 1, 2, 0 each send one message: receive i goes to the i-th
        // message, whichever QP it came on.
        for (i, &k) in [2usize, 0, 1, 1, 2, 0].iter().enumerate() {
            let len = 100 + i * 300;
            let data = pattern(len, 40 + i as u64);
            a.mr.write(0, &data);
            qps[k]
                .0
                .post_send(&signaled(i as u64, WrOpcode::Send, vec![a.mr.sge(0, len)]))
                .unwrap();
            expect(&a.cq, i as u64, WcStatus::Success);
            let got = expect(&b.cq, i as u64, WcStatus::Success);
            assert_eq!(got.qp_num, qps[k].1.qp_num(), "message {i}");
            assert_eq!(got.src_qp, qps[k].0.qp_num());
            assert_eq!(got.byte_len, len as u32);
            assert_eq!(read_mr(&b.mr, i * 4096, len), data, "message {i}");
        }
        assert_eq!(srq.query().unwrap().consumed, 6);
        assert_eq!(srq.free_slots(), 16);

        // Empty: the requester is told RNR and retries until a receive comes.
        a.mr.write(0, b"late");
        qps[1]
            .0
            .post_send(&signaled(7, WrOpcode::Send, vec![a.mr.sge(0, 4)]))
            .unwrap();
        assert!(
            poll_n(&a.cq, 1, QUIET).is_empty(),
            "completed with no receive"
        );
        srq.post_recv(&srq_recv(7, b)).unwrap();
        expect(&a.cq, 7, WcStatus::Success);
        let got = expect(&b.cq, 7, WcStatus::Success);
        assert_eq!(got.qp_num, qps[1].1.qp_num());
        assert_eq!(read_mr(&b.mr, 7 * 4096, 4), b"late");

        // A QP on the SRQ takes no receives of its own, and the SRQ outlives no QP.
        assert!(qps[0].1.post_recv(&srq_recv(1, b)).is_err());
        let destroy = ObjectReq {
            handle: srq.srqn(),
            reserved: 0,
        };
        assert_eq!(
            status(
                b.ctx
                    .device()
                    .command(Opcode::DestroySrq, destroy.as_bytes(), 0)
            ),
            Status::Busy as u16
        );
    });
}

#[test]
fn the_srq_limit_event_fires_once_below_the_limit_and_an_erring_qp_leaves_the_rest() {
    on_both_paths(85, |a, b| {
        let srq = b.pd.create_srq(8, 1, 0).unwrap();
        let qps = qps_on_srq(a, b, &srq, 2);
        srq.post_recv_list(&(0..4).map(|i| srq_recv(i, b)).collect::<Vec<_>>())
            .unwrap();
        srq.set_limit(3).unwrap();
        assert_eq!(srq.query().unwrap().srq_limit, 3);
        let send = |k: usize, id: u64| {
            qps[k]
                .0
                .post_send(&signaled(id, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
                .unwrap();
            expect(&a.cq, id, WcStatus::Success);
            expect(&b.cq, id, WcStatus::Success);
        };
        let limit_event = |timeout| {
            b.ctx
                .wait_async_event(AsyncEvent::SrqLimitReached, srq.srqn(), timeout)
                .unwrap()
        };
        // 4 posted: taking one leaves 3, not fewer than the limit.
        send(0, 0);
        assert!(!limit_event(QUIET));
        // Taking the next leaves 2: the event, and the limit is disarmed.
        send(1, 1);
        assert!(limit_event(T));
        assert_eq!(srq.query().unwrap().srq_limit, 0);

        // QP 0 of b enters the error state: none of the SRQ's receives is flushed...
        let (err, m) = (
            verbs::QpAttr {
                qp_state: verbs::QpState::Err as u8,
                ..Default::default()
            },
            verbs::attr::STATE,
        );
        qps[0].1.modify(&err, m).unwrap();
        assert!(
            poll_n(&b.cq, 1, QUIET).is_empty(),
            "an SRQ receive was flushed"
        );
        // ... and QP 1 still takes them, in order.
        send(1, 2);
        send(1, 3);
        assert!(!limit_event(QUIET), "the disarmed limit fired again");
        assert_eq!(srq.query().unwrap().consumed, 4);
        assert!(srq.set_limit(8).is_err(), "a limit must be below the size");
    });
}

#[test]
fn a_qp_on_an_srq_that_fails_mid_message_flushes_only_its_own_receive() {
    // Every frame is held 40 ms, so a 256-packet SEND (twice the send window) arrives in
    // two halves about 80 ms apart: long enough to catch it half received.
    let rnicd = Rnicd::start(2, &["--net-faults", "delay=40"]);
    let o = PairOptions {
        mtu: verbs::mtu::MTU_256,
        ..PairOptions::default()
    };
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    let srq = b.pd.create_srq(8, 1, 0).unwrap();
    let qps = qps_on_srq_with(&a, &b, &srq, 2, &o);
    let len = 256 * 256;
    srq.post_recv_list(
        &(0..3)
            .map(|i| RecvWr {
                wr_id: i,
                sges: vec![b.mr.sge(i as usize * len, len)],
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    a.mr.write(0, &pattern(len, 77));
    qps[0]
        .0
        .post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, len)]))
        .unwrap();
    // Wait until the message has taken its receive, and not finished.
    rnic_tests::wait_for(T, "the SEND to take a receive", || {
        srq.query().unwrap().consumed == 1
    });
    assert!(
        poll_n(&b.cq, 1, Duration::ZERO).is_empty(),
        "finished already"
    );
    let err = verbs::QpAttr {
        qp_state: verbs::QpState::Err as u8,
        ..Default::default()
    };
    qps[0].1.modify(&err, verbs::attr::STATE).unwrap();
    // Its receive completes flushed; the SRQ's others stay.
    let got = expect(&b.cq, 0, WcStatus::WrFlushErr);
    assert_eq!(got.qp_num, qps[0].1.qp_num());
    assert!(
        poll_n(&b.cq, 1, QUIET).is_empty(),
        "another receive was flushed"
    );
    assert_eq!(srq.query().unwrap().consumed, 1);
    // The other QP takes the next one.
    qps[1]
        .0
        .post_send(&signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 100)]))
        .unwrap();
    let got = expect(&b.cq, 1, WcStatus::Success);
    assert_eq!(got.qp_num, qps[1].1.qp_num());
}
