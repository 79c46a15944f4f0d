//! RDMA verbs, the RC transport's corners: a SEND before its receive (RNR NAKs and the RNR
//! retry budget), retries, 24-bit PSN wrap, outstanding READs and atomics, the shortest ACK
//! timeout, SQD, rings that wrap, and doorbells under load.
//!
//! Between two VFs of one rnicd, through the host transport: every operation travels as
//! RoCEv2 frames through the device's internal switch, and every test checks the data that
//! arrived, the completions as ibverbs defines them, and (for errors) that nothing outside
//! the registered memory changed.

use std::time::{Duration, Instant};

use rnic_driver::verbs::{
    self, attr, AsyncEvent, QpAttr, QpState, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE,
};
use rnic_tests::verbs_checks::{
    all_access, assert_ok, assert_untouched, connected, exactly, expect_failed_then_flushed,
    expect_remote_error, one, recv, wait_event, FILL, QUIET, T,
};
use rnic_tests::verbs_pair::{
    connect_qps, init_qp, pair, pattern, poll_n, read_mr, read_u64, signaled, PairOptions,
};
use rnic_tests::Rnicd;

// ---------------------------------------------------------------------------------------
// No receive posted.

#[test]
fn a_send_before_its_receive_is_posted_completes_after_rnr_naks() {
    let (_d, a, b) = connected(&PairOptions::default());
    a.mr.write(0, b"late");
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 4)]))
        .unwrap();
    // The responder has nothing to put it in: RNR NAKs, and the requester retries.
    std::thread::sleep(Duration::from_millis(50));
    exactly(&a.cq, 0);
    b.qp.post_recv(&recv(2, vec![b.mr.sge(0, 64)])).unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(got.byte_len, 4);
    assert_eq!(read_mr(&b.mr, 0, 4), b"late");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn with_rnr_retry_zero_a_send_without_a_receive_fails_rnr_retry_exc_err() {
    let o = PairOptions {
        rnr_retry: 0,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    a.qp.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 4)]),
        SendWr {
            wr_id: 2,
            sges: vec![a.mr.sge(0, 4)],
            ..SendWr::default()
        },
    ])
    .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::RnrRetryExcErr, &[2]);
    // The responder did nothing wrong.
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
    exactly(&b.cq, 0);
}

// ---------------------------------------------------------------------------------------
// Transport corners: retries, windows, wrapping.

#[test]
fn with_rnr_retry_one_a_multi_packet_send_without_a_receive_fails_rnr_retry_exc_err() {
    // The packets behind the refused first one are out of sequence at the responder; the
    // NAK that says so must not give the requester its RNR retries back.
    let o = PairOptions {
        rnr_retry: 1,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 5000)]))
        .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::RnrRetryExcErr, &[]);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
    exactly(&b.cq, 0);
}

#[test]
fn multi_packet_sends_and_writes_with_imm_posted_before_their_receives_complete_intact() {
    let (_d, a, b) = connected(&PairOptions::default());
    let data = pattern(5000, 11);
    a.mr.write(0, &data);
    a.qp.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 5000)]),
        signaled(
            2,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: b.mr.addr(50_000),
                rkey: b.mr.rkey(),
                imm: 99,
            },
            vec![a.mr.sge(0, 5000)],
        ),
        signaled(3, WrOpcode::SendWithImm(3), vec![a.mr.sge(0, 2100)]),
    ])
    .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    exactly(&a.cq, 0);
    for i in 0..3 {
        b.qp.post_recv(&recv(i, vec![b.mr.sge(i as usize * 8192, 8192)]))
            .unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let wcs = exactly(&a.cq, 3);
    wcs.iter().for_each(assert_ok);
    let got = exactly(&b.cq, 3);
    got.iter().for_each(assert_ok);
    let summary: Vec<_> = got
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.byte_len, w.imm_data))
        .collect();
    assert_eq!(
        summary,
        [
            (0, WcOpcode::Recv, 5000, None),
            (1, WcOpcode::RecvRdmaWithImm, 5000, Some(99)),
            (2, WcOpcode::Recv, 2100, Some(3)),
        ]
    );
    assert_eq!(read_mr(&b.mr, 0, 5000), data);
    assert_eq!(read_mr(&b.mr, 50_000, 5000), data);
    assert_eq!(read_mr(&b.mr, 8192 * 2, 2100), data[..2100]);
    assert_eq!(read_mr(&b.mr, 8192, 5000), vec![0; 5000]);
}

#[test]
fn a_write_with_imm_refused_for_its_rkey_still_completes_the_receive_once() {
    let (_d, a, b) = connected(&PairOptions::default());
    let t = all_access(&b);
    let wr = signaled(
        10,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: t.addr(0),
            rkey: t.rkey() ^ 0x0001_0000,
            imm: 5,
        },
        vec![a.mr.sge(0, 100)],
    );
    // The receive posted at the responder gets exactly one completion (a flush).
    expect_remote_error(&a, &b, wr, WcStatus::RemAccessErr, AsyncEvent::QpAccessErr);
    assert_untouched(&t, FILL);
    assert_eq!(b.qp.query().unwrap().rq_consumed, 1);
}

#[test]
fn zero_byte_rdma_needs_no_valid_rkey() {
    // IB C9-88: a zero-length RDMA READ or WRITE does not check its address and rkey.
    let (_d, a, b) = connected(&PairOptions::default());
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 8)])).unwrap();
    a.qp.post_send_list(&[
        signaled(
            1,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: 0,
                rkey: 0,
                imm: 0xABCD,
            },
            vec![],
        ),
        signaled(
            2,
            WrOpcode::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        ),
        signaled(
            3,
            WrOpcode::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        ),
    ])
    .unwrap();
    let wcs = exactly(&a.cq, 3);
    wcs.iter().for_each(assert_ok);
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(
        (got.opcode, got.byte_len, got.imm_data),
        (WcOpcode::RecvRdmaWithImm, 0, Some(0xABCD))
    );
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn psns_wrap_at_24_bits_inside_messages_reads_and_rnr_retries() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let qa = init_qp(&a, &a.cq, &o, o.access & !ACCESS_LOCAL_WRITE);
    let qb = init_qp(&b, &b.cq, &o, o.access & !ACCESS_LOCAL_WRITE);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0xFF_FFFD, 0xFF_FFFE);
    let data = pattern(10_000, 12);
    a.mr.write(0, &data);
    b.mr.write(500_000, &data);
    // A SEND across the wrap that first meets RNR, a READ across it, a WRITE after it.
    qa.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 10_000)]),
        signaled(
            2,
            WrOpcode::RdmaRead {
                remote_addr: b.mr.addr(500_000),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(200_000, 10_000)],
        ),
        signaled(
            3,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(300_000),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, 10_000)],
        ),
    ])
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    qb.post_recv(&recv(1, vec![b.mr.sge(0, 10_000)])).unwrap();
    let wcs = exactly(&a.cq, 3);
    wcs.iter().for_each(assert_ok);
    assert_eq!(one(&b.cq).byte_len, 10_000);
    assert_eq!(read_mr(&b.mr, 0, 10_000), data);
    assert_eq!(read_mr(&a.mr, 200_000, 10_000), data);
    assert_eq!(read_mr(&b.mr, 300_000, 10_000), data);
    // Traffic the other way crosses its own wrap.
    qa.post_recv(&recv(7, vec![a.mr.sge(400_000, 10_000)]))
        .unwrap();
    qb.post_send(&signaled(
        8,
        WrOpcode::Send,
        vec![b.mr.sge(500_000, 10_000)],
    ))
    .unwrap();
    assert_ok(&one(&b.cq));
    assert_ok(&one(&a.cq));
    assert_eq!(read_mr(&a.mr, 400_000, 10_000), data);
}

#[test]
fn a_peer_that_stops_answering_gives_retry_exc_err() {
    let o = PairOptions {
        timeout: 8,
        retry_cnt: 2,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let to_err = QpAttr {
        qp_state: QpState::Err as u8,
        ..QpAttr::default()
    };
    b.qp.modify(&to_err, attr::STATE).unwrap();
    a.qp.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 8)]),
        signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 8)]),
    ])
    .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::RetryExcErr, &[2]);
}

#[test]
fn reads_and_atomics_beyond_max_rd_atomic_wait_their_turn() {
    let o = PairOptions {
        max_rd_atomic: 1,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let data = pattern(20_000, 13);
    b.mr.write(0, &data);
    let mut wrs = Vec::new();
    for i in 0..6u64 {
        let at = i as usize * 3000;
        wrs.push(signaled(
            i,
            WrOpcode::RdmaRead {
                remote_addr: b.mr.addr(at),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(100_000 + at, 3000)],
        ));
        wrs.push(signaled(
            100 + i,
            WrOpcode::AtomicFetchAdd {
                remote_addr: b.mr.addr(40_000),
                rkey: b.mr.rkey(),
                add: 1,
            },
            vec![a.mr.sge(200_000 + 8 * i as usize, 8)],
        ));
    }
    a.qp.post_send_list(&wrs).unwrap();
    let wcs = exactly(&a.cq, 12);
    wcs.iter().for_each(assert_ok);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    let want: Vec<u64> = (0..6).flat_map(|i| [i, 100 + i]).collect();
    assert_eq!(ids, want);
    assert_eq!(read_mr(&a.mr, 100_000, 18_000), data[..18_000]);
    for i in 0..6 {
        assert_eq!(read_u64(&a.mr, 200_000 + 8 * i), i as u64);
    }
    assert_eq!(read_u64(&b.mr, 40_000), 6);
}

#[test]
fn an_unaligned_atomic_fails_rem_inv_req_err() {
    let (_d, a, b) = connected(&PairOptions::default());
    let wr = signaled(
        10,
        WrOpcode::AtomicFetchAdd {
            remote_addr: b.mr.addr(4),
            rkey: b.mr.rkey(),
            add: 1,
        },
        vec![a.mr.sge(0, 8)],
    );
    expect_remote_error(&a, &b, wr, WcStatus::RemInvReqErr, AsyncEvent::QpReqErr);
    assert_eq!(read_mr(&b.mr, 0, 16), vec![0; 16]);
}

#[test]
fn a_receive_with_a_bad_lkey_fails_loc_prot_err_there_and_rem_op_err_at_the_sender() {
    let (_d, a, b) = connected(&PairOptions::default());
    let bad = Sge {
        lkey: b.mr.lkey() ^ 0x00ff_ff00,
        ..b.mr.sge(0, 64)
    };
    b.qp.post_recv_list(&[recv(1, vec![bad]), recv(2, vec![b.mr.sge(64, 64)])])
        .unwrap();
    a.qp.post_send_list(&[
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 32)]),
        signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 32)]),
    ])
    .unwrap();
    expect_failed_then_flushed(&a, 1, WcStatus::RemOpErr, &[2]);
    let wcs = exactly(&b.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, Ok(WcStatus::LocProtErr)));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, Ok(WcStatus::WrFlushErr)));
    wait_event(&b.ctx, AsyncEvent::QpFatal, b.qp.qp_num());
    assert_eq!(read_mr(&b.mr, 0, 128), vec![0; 128]);
}

#[test]
fn many_more_wrs_than_queue_entries_wrap_the_rings_and_the_cq() {
    let o = PairOptions {
        caps: verbs::QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 32,
        },
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let scq = a.ctx.create_cq(4).unwrap();
    let rcq = b.ctx.create_cq(4).unwrap();
    let qa = init_qp(&a, &scq, &o, ACCESS_REMOTE_WRITE);
    let qb = init_qp(&b, &rcq, &o, ACCESS_REMOTE_WRITE);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 1, 2);
    let mut next_recv = 0u64;
    let mut received = 0u64;
    let mut signaled_sent = Vec::new();
    let total = 300u64;
    let mut i = 0u64;
    let start = Instant::now();
    while received < total {
        assert!(start.elapsed() < T, "stuck at {received} of {total}");
        while qb.rq_free_slots() > 0 && next_recv < total {
            qb.post_recv(&recv(
                next_recv,
                vec![b.mr.sge((next_recv % 64) as usize * 16, 16)],
            ))
            .unwrap();
            next_recv += 1;
        }
        if i < total && qa.sq_free_slots() > 0 {
            a.mr.write((i % 64) as usize * 8, &i.to_le_bytes());
            // Every other WR unsignaled, and the last one signaled.
            let sig = i % 2 == 1 || i + 1 == total;
            qa.post_send(&SendWr {
                wr_id: i,
                sges: vec![a.mr.sge((i % 64) as usize * 8, 8)],
                signaled: sig,
                ..SendWr::default()
            })
            .unwrap();
            i += 1;
        }
        for wc in scq.poll(4) {
            assert_ok(&wc);
            signaled_sent.push(wc.wr_id);
        }
        for wc in rcq.poll(4) {
            assert_ok(&wc);
            assert_eq!(wc.wr_id, received);
            assert_eq!(wc.byte_len, 8);
            let at = (received % 64) as usize * 16;
            assert_eq!(read_u64(&b.mr, at), received);
            received += 1;
        }
    }
    signaled_sent.extend(
        poll_n(&scq, total as usize / 2 - signaled_sent.len(), T)
            .iter()
            .map(|w| w.wr_id),
    );
    let want: Vec<u64> = (0..total).filter(|i| i % 2 == 1).collect();
    assert_eq!(signaled_sent, want);
    assert_eq!(qa.sq_free_slots(), 4);
    assert_eq!(qb.rq_free_slots(), 4);
}

#[test]
fn the_shortest_ack_timeout_neither_fails_nor_repeats_reads_atomics_and_writes() {
    // An ACK timeout of 8 µs: should the timer fire before an answer came, the requester
    // resends what the responder may already have executed, which must then be
    // acknowledged or answered again (atomics from the saved result), never applied twice.
    let o = PairOptions {
        timeout: 1,
        retry_cnt: 7,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let data = pattern(64 * 1024, 14);
    b.mr.write(0, &data);
    let rounds = 40u64;
    for r in 0..rounds {
        let at = (r as usize % 16) * 4096;
        a.qp.post_send_list(&[
            SendWr {
                wr_id: 3 * r,
                sges: vec![a.mr.sge(200_000 + at, 4096)],
                ..signaled(
                    3 * r,
                    WrOpcode::RdmaRead {
                        remote_addr: b.mr.addr(at),
                        rkey: b.mr.rkey(),
                    },
                    vec![],
                )
            },
            signaled(
                3 * r + 1,
                WrOpcode::AtomicFetchAdd {
                    remote_addr: b.mr.addr(100_000),
                    rkey: b.mr.rkey(),
                    add: 1,
                },
                vec![a.mr.sge(300_000 + 8 * r as usize, 8)],
            ),
            signaled(
                3 * r + 2,
                WrOpcode::RdmaWrite {
                    remote_addr: b.mr.addr(400_000 + at),
                    rkey: b.mr.rkey(),
                },
                vec![a.mr.sge(200_000 + at, 4096)],
            ),
        ])
        .unwrap();
        let wcs = poll_n(&a.cq, 3, T);
        assert_eq!(wcs.len(), 3, "round {r}: {wcs:?}");
        wcs.iter().for_each(assert_ok);
        assert_eq!(read_u64(&a.mr, 300_000 + 8 * r as usize), r);
    }
    assert_eq!(read_u64(&b.mr, 100_000), rounds);
    assert_eq!(read_mr(&b.mr, 400_000, 64 * 1024), data);
}

#[test]
fn sqd_reports_sq_drained_and_holds_new_work_until_rts_again() {
    let (_rnicd, a, b) = connected(&PairOptions::default());
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 64)]))
        .expect("post_recv");
    b.qp.post_recv(&recv(2, vec![b.mr.sge(64, 64)]))
        .expect("post_recv");
    let to = |state: QpState| QpAttr {
        qp_state: state as u8,
        ..QpAttr::default()
    };

    // A QP with nothing in flight reports the drain at once. (A WQE posted just before the
    // modify may not have started yet, and SQD rightly holds it: so finish it first.)
    a.mr.write(0, b"before");
    a.qp.post_send(&signaled(10, WrOpcode::Send, vec![a.mr.sge(0, 6)]))
        .expect("post");
    assert_ok(&one(&a.cq));
    assert_ok(&one(&b.cq));
    a.qp.modify(&to(QpState::Sqd), attr::STATE)
        .expect("RTS -> SQD");
    wait_event(&a.ctx, AsyncEvent::SqDrained, a.qp.qp_num());

    // In SQD a new send waits.
    a.mr.write(64, b"after");
    a.qp.post_send(&signaled(11, WrOpcode::Send, vec![a.mr.sge(64, 5)]))
        .expect("post in SQD");
    std::thread::sleep(QUIET);
    assert!(a.cq.poll(1).is_empty(), "nothing runs while drained");
    assert!(b.cq.poll(1).is_empty());

    // Back to RTS: it goes.
    a.qp.modify(&to(QpState::Rts), attr::STATE)
        .expect("SQD -> RTS");
    let wc = one(&a.cq);
    assert_ok(&wc);
    assert_eq!(wc.wr_id, 11);
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!((got.wr_id, got.byte_len), (2, 5));
    assert_eq!(read_mr(&b.mr, 64, 5), b"after");
}

#[test]
fn under_load_doorbells_cost_no_message_and_an_idle_device_needs_one_kick() {
    // The device polls doorbells for a while after its last work: a stream of sends needs
    // no kick, that is no vfio-user message, beyond the one that woke the device.
    let rnicd = Rnicd::start(2, &["--poll-us", "2000000"]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let n = 200;
    for i in 0..n {
        b.qp.post_recv(&recv(i, vec![b.mr.sge(0, 64)]))
            .expect("post_recv");
        a.qp.post_send(&signaled(i, WrOpcode::Send, vec![a.mr.sge(0, 64)]))
            .expect("post_send");
        assert_ok(&one(&a.cq));
        assert_ok(&one(&b.cq));
    }
    let (rung, kicked) = a.ctx.doorbell_stats();
    assert_eq!(rung, n);
    assert!(
        kicked <= 2,
        "{kicked} of {rung} send doorbells needed a kick while the device was busy"
    );

    // A device with no poll window sleeps after each piece of work: then each doorbell
    // after a pause wakes it with a kick.
    drop((a, b));
    let rnicd = Rnicd::start(2, &["--poll-us", "0"]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    for i in 0..10 {
        b.qp.post_recv(&recv(i, vec![b.mr.sge(0, 64)]))
            .expect("post_recv");
        std::thread::sleep(Duration::from_millis(5));
        a.qp.post_send(&signaled(i, WrOpcode::Send, vec![a.mr.sge(0, 64)]))
            .expect("post_send");
        assert_ok(&one(&a.cq));
        assert_ok(&one(&b.cq));
    }
    let (rung, kicked) = a.ctx.doorbell_stats();
    assert_eq!(
        (rung, kicked),
        (10, 10),
        "a sleeping device is kicked by every doorbell"
    );
}
