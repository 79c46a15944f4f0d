//! RDMA verbs, errors: bad local and remote keys, regions overrun, access refused, receives
//! too small; the failed WR's status, the flush behind it and the events on both sides.
//!
//! Between two VFs of one rnicd, through the host transport: every operation travels as
//! RoCEv2 frames through the device's internal switch, and every test checks the data that
//! arrived, the completions as ibverbs defines them, and (for errors) that nothing outside
//! the registered memory changed.

use rnic_driver::verbs::{
    self, attr, AsyncEvent, Mr, QpAttr, QpState, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rnic_tests::verbs_checks::{
    all_access, assert_ok, assert_untouched, connected, exactly, expect_failed_then_flushed,
    expect_remote_error, one, recv, wait_event, FILL, GUARD,
};
use rnic_tests::verbs_pair::{
    buffer_bytes, guarded_mr, pattern, read_mr, signaled, PairOptions, Side,
};

#[test]
fn a_bad_lkey_fails_loc_prot_err_and_flushes_the_wrs_behind_it() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.qp.post_recv(&recv(9, vec![b.mr.sge(0, 64)])).unwrap();
    let bad = Sge {
        lkey: a.mr.lkey() ^ 0x00ff_ff00,
        ..a.mr.sge(0, 16)
    };
    a.qp.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 8)]),
        SendWr {
            wr_id: 2,
            sges: vec![bad],
            ..SendWr::default()
        },
        SendWr {
            wr_id: 3,
            sges: vec![a.mr.sge(0, 8)],
            ..SendWr::default()
        },
        signaled(4, WrOpcode::Send, vec![a.mr.sge(0, 8)]),
    ])
    .unwrap();
    // WR 1 has its own completion first; then the unsignaled WR 2 fails: it still gets one.
    let first = one(&a.cq);
    assert_ok(&first);
    assert_eq!(first.wr_id, 1);
    expect_failed_then_flushed(&a, 2, WcStatus::LocProtErr, &[3, 4]);
    // Only WR 1 reached the responder; posting to a QP in ERR flushes at once.
    assert_ok(&one(&b.cq));
    a.qp.post_send(&signaled(5, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    a.qp.post_recv(&recv(6, vec![a.mr.sge(0, 8)])).unwrap();
    let wcs = exactly(&a.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (5, Ok(WcStatus::WrFlushErr)));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (6, Ok(WcStatus::WrFlushErr)));
    assert_eq!(wcs[1].opcode, WcOpcode::Recv);
    exactly(&b.cq, 0);
}

#[test]
fn an_sge_beyond_its_local_mr_fails_loc_prot_err_and_sends_nothing() {
    let (_d, a, b) = connected(&PairOptions::default());
    let small = guarded_mr(&a, &a.pd, GUARD, 1000, verbs::ACCESS_ALL, FILL);
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 4096)])).unwrap();
    let past_end = Sge {
        length: 1001,
        ..small.sge(0, 1000)
    };
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![past_end]))
        .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::LocProtErr, &[]);
    exactly(&b.cq, 0);
    assert_eq!(read_mr(&b.mr, 0, 4096), vec![0; 4096]);
}

#[test]
fn a_read_into_a_bad_lkey_fails_loc_prot_err_and_writes_nothing() {
    let (_d, a, b) = connected(&PairOptions::default());
    // A region without local write cannot take READ data either.
    let ro = guarded_mr(&a, &a.pd, GUARD, 4096, 0, FILL);
    b.mr.write(0, &[1; 4096]);
    a.qp.post_send(&signaled(
        1,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
        },
        vec![ro.sge(0, 4096)],
    ))
    .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::LocProtErr, &[]);
    assert_untouched(&ro, FILL);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

/// A fresh pair, a guarded region at the responder made by `target`, and `op(target)`
/// posted: it must fail with `status`, raise `event` at the responder, and change nothing.
fn remote_failure(
    target: impl Fn(&Side) -> Mr,
    op: impl Fn(&Side, &Mr) -> SendWr,
    status: WcStatus,
    event: AsyncEvent,
) {
    let (_d, a, b) = connected(&PairOptions::default());
    let t = target(&b);
    a.mr.write(0, &pattern(1 << 16, 8));
    let wr = op(&a, &t);
    expect_remote_error(&a, &b, wr, status, event);
    assert_untouched(&t, FILL);
}

fn write_to(addr: u64, rkey: u32, a: &Side, len: usize) -> SendWr {
    signaled(
        10,
        WrOpcode::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![a.mr.sge(0, len)],
    )
}

fn read_from(addr: u64, rkey: u32, a: &Side, len: usize) -> SendWr {
    signaled(
        10,
        WrOpcode::RdmaRead {
            remote_addr: addr,
            rkey,
        },
        vec![a.mr.sge(0, len)],
    )
}

#[test]
fn a_bad_rkey_fails_rem_access_err_and_changes_nothing() {
    remote_failure(
        all_access,
        |a, t| write_to(t.addr(0), t.rkey() ^ 0x0001_0000, a, 100),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn an_rkey_of_another_pd_fails_rem_access_err_and_changes_nothing() {
    remote_failure(
        |b| {
            let other = b.ctx.alloc_pd().unwrap();
            guarded_mr(b, &other, GUARD, 8192, verbs::ACCESS_ALL, FILL)
        },
        |a, t| write_to(t.addr(0), t.rkey(), a, 100),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn a_multi_packet_write_past_the_remote_mr_fails_rem_access_err_and_changes_nothing() {
    remote_failure(
        all_access,
        |a, t| write_to(t.addr(4096), t.rkey(), a, 4097 + 3000),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn a_write_starting_before_the_remote_mr_fails_rem_access_err() {
    remote_failure(
        all_access,
        |a, t| write_to(t.addr(0) - 8, t.rkey(), a, 100),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn a_read_past_the_remote_mr_fails_rem_access_err() {
    remote_failure(
        all_access,
        |a, t| read_from(t.addr(8000), t.rkey(), a, 500),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn an_mr_without_remote_write_refuses_a_write_with_rem_access_err() {
    remote_failure(
        |b| {
            let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
            guarded_mr(b, &b.pd, GUARD, 8192, access, FILL)
        },
        |a, t| write_to(t.addr(0), t.rkey(), a, 100),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn an_mr_without_remote_read_refuses_a_read_with_rem_access_err() {
    remote_failure(
        |b| {
            let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
            guarded_mr(b, &b.pd, GUARD, 8192, access, FILL)
        },
        |a, t| read_from(t.addr(0), t.rkey(), a, 100),
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn an_mr_without_remote_atomic_refuses_an_atomic_with_rem_access_err() {
    remote_failure(
        |b| {
            let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
            guarded_mr(b, &b.pd, GUARD, 8192, access, FILL)
        },
        |a, t| {
            signaled(
                10,
                WrOpcode::AtomicFetchAdd {
                    remote_addr: t.addr(0),
                    rkey: t.rkey(),
                    add: 1,
                },
                vec![a.mr.sge(0, 8)],
            )
        },
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
}

#[test]
fn a_qp_without_remote_write_access_refuses_a_write_with_rem_access_err() {
    let (_d, a, b) = connected(&PairOptions::default());
    let t = all_access(&b);
    // RTS -> RTS: the responder stops allowing remote writes.
    let allow = QpAttr {
        qp_state: QpState::Rts as u8,
        qp_access_flags: ACCESS_REMOTE_READ,
        ..QpAttr::default()
    };
    b.qp.modify(&allow, attr::ACCESS_FLAGS).unwrap();
    assert_eq!(
        b.qp.query().unwrap().attr.qp_access_flags,
        ACCESS_REMOTE_READ
    );
    // READs still work.
    a.qp.post_send(&read_from(t.addr(0), t.rkey(), &a, 64))
        .unwrap();
    assert_ok(&one(&a.cq));
    assert_eq!(read_mr(&a.mr, 0, 64), vec![FILL; 64]);
    a.mr.write(0, &[1; 100]);
    let wr = write_to(t.addr(0), t.rkey(), &a, 100);
    expect_remote_error(&a, &b, wr, WcStatus::RemAccessErr, AsyncEvent::QpAccessErr);
    assert_untouched(&t, FILL);
}

#[test]
fn a_local_inv_of_a_responders_key_makes_remote_use_fail_rem_access_err() {
    let (_d, a, b) = connected(&PairOptions::default());
    let t = all_access(&b);
    // The responder invalidates its own key with a LOCAL_INV on its send queue.
    b.qp.post_send(&signaled(1, WrOpcode::LocalInv(t.rkey()), vec![]))
        .unwrap();
    let wc = one(&b.cq);
    assert_ok(&wc);
    assert_eq!(wc.opcode, WcOpcode::LocalInv);
    a.mr.write(0, &[1; 100]);
    let wr = write_to(t.addr(0), t.rkey(), &a, 100);
    expect_remote_error(&a, &b, wr, WcStatus::RemAccessErr, AsyncEvent::QpAccessErr);
    assert_untouched(&t, FILL);
}

#[test]
fn a_receive_too_small_fails_loc_len_err_there_and_rem_inv_req_err_at_the_sender() {
    let (_d, a, b) = connected(&PairOptions::default());
    // 1500 bytes of receive buffer in a guarded region; 6000 bytes sent (six packets,
    // the four MIDDLEs taken as one run: the run, not its second packet, overflows).
    let rbuf = guarded_mr(&b, &b.pd, GUARD, 1500, verbs::ACCESS_ALL, FILL);
    b.qp.post_recv_list(&[
        recv(1, vec![rbuf.sge(0, 1500)]),
        recv(2, vec![b.mr.sge(0, 64)]),
    ])
    .unwrap();
    a.mr.write(0, &pattern(6000, 9));
    a.qp.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 6000)]),
        signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 10)]),
    ])
    .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::RemInvReqErr, &[2]);
    let wcs = exactly(&b.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, Ok(WcStatus::LocLenErr)));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, Ok(WcStatus::WrFlushErr)));
    wait_event(&b.ctx, AsyncEvent::QpReqErr, b.qp.qp_num());
    wait_event(&b.ctx, AsyncEvent::QpFatal, b.qp.qp_num());
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
    // Nothing beyond the receive buffer changed.
    let bytes = buffer_bytes(&rbuf);
    assert!(bytes[..GUARD].iter().all(|&x| x == FILL));
    assert!(bytes[GUARD + 1500..].iter().all(|&x| x == FILL));
}
