//! RDMA verbs, QP state: posting before RTS, illegal transitions, QUERY_QP, COMM_EST, CQ
//! overruns, and a QP in error reset and connected again.
//!
//! Between two VFs of one rnicd, through the host transport: every operation travels as
//! RoCEv2 frames through the device's internal switch, and every test checks the data that
//! arrived, the completions as ibverbs defines them, and (for errors) that nothing outside
//! the registered memory changed.

use rnic_driver::verbs::{
    self, attr, AsyncEvent, Event, QpAttr, QpState, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rnic_tests::verbs_checks::{
    assert_ok, connected, exactly, no_event, one, recv, wait_event, QUIET,
};
use rnic_tests::verbs_pair::{
    connect_qps, init_qp, poll_n, read_mr, read_u64, signaled, to_rtr, to_rts, PairOptions,
};

#[test]
fn post_send_before_rts_is_refused_and_the_device_never_runs_it() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let qa = a.pd.create_qp(&a.cq, &a.cq, o.caps, false).unwrap();
    let qb = init_qp(&b, &b.cq, &o, ACCESS_REMOTE_WRITE);
    qb.post_recv_list(&[
        recv(1, vec![b.mr.sge(0, 64)]),
        recv(2, vec![b.mr.sge(64, 64)]),
    ])
    .unwrap();
    a.mr.write(0, b"early!!!");
    a.mr.write(8, b"in RTS!!");
    let early = |id| signaled(id, WrOpcode::Send, vec![a.mr.sge(0, 8)]);
    assert_eq!(qa.state().unwrap(), QpState::Reset);
    assert!(qa.post_send(&early(1)).is_err(), "post_send in RESET");
    assert!(
        qa.post_recv(&recv(9, vec![a.mr.sge(0, 8)])).is_err(),
        "post_recv in RESET"
    );
    let (at, m) = verbs::init_attr(ACCESS_REMOTE_WRITE);
    qa.modify(&at, m).unwrap();
    assert!(qa.post_send(&early(2)).is_err(), "post_send in INIT");
    to_rtr(&qa, (&qb, b.gid), &o, 0x55);
    assert!(qa.post_send(&early(3)).is_err(), "post_send in RTR");
    assert_eq!(qa.sq_free_slots(), qa.caps().max_send_wr);
    to_rtr(&qb, (&qa, a.gid), &o, 0x77);
    to_rts(&qb, &o, 0x55);
    to_rts(&qa, &o, 0x77);
    qa.post_send(&signaled(4, WrOpcode::Send, vec![a.mr.sge(8, 8)]))
        .unwrap();
    let wcs = exactly(&a.cq, 1);
    assert_ok(&wcs[0]);
    assert_eq!(wcs[0].wr_id, 4);
    let got = exactly(&b.cq, 1);
    assert_ok(&got[0]);
    assert_eq!(got[0].wr_id, 1);
    assert_eq!(read_mr(&b.mr, 0, 8), b"in RTS!!");
    assert_eq!(qa.query().unwrap().sq_consumed, 1);
}

#[test]
fn illegal_modify_transitions_and_attributes_are_refused_and_leave_the_state() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let qp = a.pd.create_qp(&a.cq, &a.cq, o.caps, false).unwrap();
    let (init, init_mask) = verbs::init_attr(ACCESS_REMOTE_WRITE);
    let (rtr, rtr_mask) = verbs::rtr_attr(b.qp.qp_num(), b.gid, 0, o.mtu, 4, 12);
    let (rts, rts_mask) = verbs::rts_attr(0, 14, 7, 7, 4);
    let refused = |a: &QpAttr, m: u32, state: QpState, what: &str| {
        assert!(qp.modify(a, m).is_err(), "{what} was accepted");
        assert_eq!(qp.state().unwrap(), state, "after {what}");
    };
    refused(&rtr, rtr_mask, QpState::Reset, "RESET -> RTR");
    refused(&rts, rts_mask, QpState::Reset, "RESET -> RTS");
    refused(
        &init,
        init_mask & !attr::ACCESS_FLAGS,
        QpState::Reset,
        "RESET -> INIT without access flags",
    );
    refused(
        &init,
        init_mask | attr::SQ_PSN,
        QpState::Reset,
        "RESET -> INIT with an SQ PSN",
    );
    qp.modify(&init, init_mask).unwrap();
    refused(&rts, rts_mask, QpState::Init, "INIT -> RTS");
    let bad_mtu = QpAttr { path_mtu: 6, ..rtr };
    refused(&bad_mtu, rtr_mask, QpState::Init, "RTR with MTU code 6");
    let bad_gid = QpAttr {
        dgid: [0xfe; 16],
        ..rtr
    };
    refused(&bad_gid, rtr_mask, QpState::Init, "RTR with a non-IPv4 GID");
    let cur = QpAttr {
        cur_qp_state: QpState::Rtr as u8,
        ..rtr
    };
    refused(
        &cur,
        rtr_mask | attr::CUR_STATE,
        QpState::Init,
        "a wrong current state",
    );
    qp.modify(&rtr, rtr_mask).unwrap();
    refused(&init, init_mask, QpState::Rtr, "RTR -> INIT");
    let bad_retry = QpAttr {
        retry_cnt: 8,
        ..rts
    };
    refused(&bad_retry, rts_mask, QpState::Rtr, "RTS with 8 retries");
    qp.modify(&rts, rts_mask).unwrap();
    refused(&rtr, rtr_mask, QpState::Rts, "RTS -> RTR");
    refused(&init, init_mask, QpState::Rts, "RTS -> INIT");
    // Any state may go to ERR and to RESET.
    let to = |s: QpState| QpAttr {
        qp_state: s as u8,
        ..QpAttr::default()
    };
    qp.modify(&to(QpState::Err), attr::STATE).unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Err);
    refused(&rts, rts_mask, QpState::Err, "ERR -> RTS");
    qp.modify(&to(QpState::Reset), attr::STATE).unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Reset);
}

#[test]
fn query_qp_returns_the_attributes_set() {
    let o = PairOptions {
        mtu: verbs::mtu::MTU_2048,
        timeout: 17,
        retry_cnt: 5,
        rnr_retry: 3,
        min_rnr_timer: 9,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let q = a.qp.query().unwrap();
    let at = q.attr;
    assert_eq!(at.qp_state, QpState::Rts as u8);
    assert_eq!(at.path_mtu, verbs::mtu::MTU_2048);
    assert_eq!(at.dest_qp_num, b.qp.qp_num());
    assert_eq!(at.dgid, b.gid);
    assert_eq!(at.rq_psn, 0xabc000);
    assert_eq!(at.sq_psn, 0x100);
    assert_eq!((at.timeout, at.retry_cnt, at.rnr_retry), (17, 5, 3));
    assert_eq!(at.min_rnr_timer, 9);
    assert_eq!((at.max_rd_atomic, at.max_dest_rd_atomic), (16, 16));
    assert_eq!(at.qp_access_flags, o.access & !ACCESS_LOCAL_WRITE);
    assert_eq!((at.port_num, at.pkey_index, at.hop_limit), (1, 0, 64));
    assert_eq!(b.qp.query().unwrap().attr.rq_psn, 0x100);
    // RTS -> RTS changes what it may.
    let change = QpAttr {
        qp_state: QpState::Rts as u8,
        min_rnr_timer: 20,
        qp_access_flags: ACCESS_REMOTE_READ,
        ..QpAttr::default()
    };
    a.qp.modify(&change, attr::MIN_RNR_TIMER | attr::ACCESS_FLAGS)
        .unwrap();
    let at = a.qp.query().unwrap().attr;
    assert_eq!(
        (at.min_rnr_timer, at.qp_access_flags),
        (20, ACCESS_REMOTE_READ)
    );
    assert_eq!(at.path_mtu, verbs::mtu::MTU_2048, "the rest is kept");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn comm_est_is_raised_when_a_qp_in_rtr_receives_its_first_message() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let qa = init_qp(&a, &a.cq, &o, ACCESS_REMOTE_WRITE);
    let qb = init_qp(&b, &b.cq, &o, ACCESS_REMOTE_WRITE);
    to_rtr(&qb, (&qa, a.gid), &o, 1);
    to_rtr(&qa, (&qb, b.gid), &o, 2);
    to_rts(&qa, &o, 1);
    qb.post_recv(&recv(1, vec![b.mr.sge(0, 64)])).unwrap();
    a.mr.write(0, b"first");
    qa.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 5)]))
        .unwrap();
    assert_ok(&one(&a.cq));
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!((got.qp_num, got.src_qp), (qb.qp_num(), qa.qp_num()));
    let events = wait_event(&b.ctx, AsyncEvent::CommEst, qb.qp_num());
    assert_eq!(events.len(), 1, "{events:?}");
    // Once only; and never for QPs that were in RTS when traffic began.
    to_rts(&qb, &o, 2);
    qb.post_recv(&recv(2, vec![b.mr.sge(0, 64)])).unwrap();
    qa.post_send(&signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 5)]))
        .unwrap();
    assert_ok(&one(&a.cq));
    assert_ok(&one(&b.cq));
    no_event(&b.ctx);
    no_event(&a.ctx);
}

#[test]
fn a_cq_overrun_raises_cq_err_and_overwrites_no_completion() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let small = a.ctx.create_cq(2).unwrap();
    assert_eq!(small.entries(), 2);
    let qa = init_qp(&a, &small, &o, ACCESS_REMOTE_WRITE);
    let qb = init_qp(&b, &b.cq, &o, ACCESS_REMOTE_WRITE);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 10, 20);
    qb.post_recv_list(
        &(0..3)
            .map(|i| recv(i, vec![b.mr.sge(0, 64)]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    qa.post_send_list(
        &(1..=3)
            .map(|i| signaled(i, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let events = wait_event(&a.ctx, AsyncEvent::CqErr, small.cqn());
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, Event::Async { event: AsyncEvent::CqErr, object, .. } if *object != small.cqn())),
        "{events:?}"
    );
    // The first two completions are intact; the third was never written over them.
    let wcs = small.poll(8);
    assert_eq!(wcs.len(), 2, "{wcs:#?}");
    for (i, wc) in wcs.iter().enumerate() {
        assert_ok(wc);
        assert_eq!((wc.wr_id, wc.qp_num), (i as u64 + 1, qa.qp_num()));
    }
    assert!(poll_n(&small, 1, QUIET).is_empty());
    // The QP that could not complete is in ERR.
    wait_event(&a.ctx, AsyncEvent::QpFatal, qa.qp_num());
    assert_eq!(qa.state().unwrap(), QpState::Err);
    // All three messages were delivered.
    assert_eq!(exactly(&b.cq, 3).len(), 3);
}

#[test]
fn a_receive_cq_overrun_fails_the_message_rem_op_err_and_overwrites_no_completion() {
    // The responder cannot report the third receive: it refuses the message (the ABI's
    // REM_OP_ERR: "it could not write a completion") instead of acknowledging it.
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let small = b.ctx.create_cq(2).unwrap();
    let qa = init_qp(&a, &a.cq, &o, ACCESS_REMOTE_WRITE);
    let qb = init_qp(&b, &small, &o, ACCESS_REMOTE_WRITE);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 10, 20);
    qb.post_recv_list(
        &(0..4)
            .map(|i| recv(i, vec![b.mr.sge(i as usize * 64, 64)]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for i in 0..3u64 {
        a.mr.write(i as usize * 8, &i.to_le_bytes());
    }
    qa.post_send_list(
        &(0..3u64)
            .map(|i| signaled(i, WrOpcode::Send, vec![a.mr.sge(i as usize * 8, 8)]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let wcs = exactly(&a.cq, 3);
    assert_ok(&wcs[0]);
    assert_ok(&wcs[1]);
    assert_eq!((wcs[2].wr_id, wcs[2].status), (2, Ok(WcStatus::RemOpErr)));
    wait_event(&b.ctx, AsyncEvent::CqErr, small.cqn());
    wait_event(&b.ctx, AsyncEvent::QpFatal, qb.qp_num());
    assert_eq!(qb.state().unwrap(), QpState::Err);
    let got = small.poll(8);
    assert_eq!(got.len(), 2, "{got:#?}");
    for (i, wc) in got.iter().enumerate() {
        assert_ok(wc);
        assert_eq!(wc.wr_id, i as u64);
        assert_eq!(read_u64(&b.mr, i * 64), i as u64);
    }
    assert!(poll_n(&small, 1, QUIET).is_empty());
}

#[test]
fn a_qp_in_error_can_be_reset_and_connected_again() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 64)])).unwrap();
    let to = |s: QpState| QpAttr {
        qp_state: s as u8,
        ..QpAttr::default()
    };
    for side in [&a, &b] {
        side.qp.modify(&to(QpState::Err), attr::STATE).unwrap();
    }
    let flushed = exactly(&b.cq, 1);
    assert_eq!(flushed[0].status, Ok(WcStatus::WrFlushErr));
    exactly(&a.cq, 0);
    for side in [&a, &b] {
        side.qp.modify(&to(QpState::Reset), attr::STATE).unwrap();
        let (at, m) = verbs::init_attr(o.access & !ACCESS_LOCAL_WRITE);
        side.qp.modify(&at, m).unwrap();
    }
    connect_qps((&a.qp, a.gid), (&b.qp, b.gid), &o, 0x333, 0x444);
    b.qp.post_recv(&recv(2, vec![b.mr.sge(0, 64)])).unwrap();
    a.mr.write(0, b"again");
    a.qp.post_send(&signaled(3, WrOpcode::Send, vec![a.mr.sge(0, 5)]))
        .unwrap();
    assert_ok(&one(&a.cq));
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!((got.wr_id, got.byte_len), (2, 5));
    assert_eq!(read_mr(&b.mr, 0, 5), b"again");
}
