//! RDMA verbs, each opcode: SEND (with immediate, with invalidate), RDMA WRITE (with
//! immediate), RDMA READ, the atomics and LOCAL_INV; sixteen SGEs, inline data, unsignaled
//! WRs, fences and solicited events.
//!
//! Between two VFs of one rnicd, through the host transport: every operation travels as
//! RoCEv2 frames through the device's internal switch, and every test checks the data that
//! arrived, the completions as ibverbs defines them, and (for errors) that nothing outside
//! the registered memory changed.

use rnic_driver::verbs::{self, AsyncEvent, QpState, SendWr, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::verbs_checks::{
    assert_ok, assert_untouched, connected, exactly, expect_failed_then_flushed,
    expect_remote_error, no_event, one, recv, FILL, GUARD, QUIET, T,
};
use rnic_tests::verbs_pair::{
    buffer_bytes, guarded_mr, pattern, read_mr, read_u64, signaled, PairOptions,
};

#[test]
fn send_lands_in_the_posted_receive() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.qp.post_recv(&recv(7, vec![b.mr.sge(100, 64)]))
        .expect("post_recv");
    a.mr.write(0, b"hello, rdma");
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 11)]))
        .expect("post_send");
    let sent = one(&a.cq);
    assert_ok(&sent);
    assert_eq!(sent.wr_id, 1);
    assert_eq!(sent.opcode, WcOpcode::Send);
    assert_eq!(sent.qp_num, a.qp.qp_num());
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!((got.wr_id, got.byte_len), (7, 11));
    assert_eq!(got.opcode, WcOpcode::Recv);
    assert_eq!((got.imm_data, got.invalidated_rkey), (None, None));
    assert_eq!(got.qp_num, b.qp.qp_num());
    assert_eq!(got.src_qp, a.qp.qp_num());
    assert!(!got.solicited());
    assert_eq!(read_mr(&b.mr, 100, 11), b"hello, rdma");
    // The bytes after the message are the receive buffer's own.
    assert_eq!(read_mr(&b.mr, 111, 53), vec![0; 53]);
}

#[test]
fn send_with_imm_delivers_the_immediate_and_the_source_qp() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.qp.post_recv(&recv(3, vec![b.mr.sge(0, 4096)])).unwrap();
    let data = pattern(3000, 1);
    a.mr.write(0, &data);
    a.qp.post_send(&signaled(
        9,
        WrOpcode::SendWithImm(0x1234_5678),
        vec![a.mr.sge(0, 3000)],
    ))
    .unwrap();
    let sent = one(&a.cq);
    assert_ok(&sent);
    assert_eq!((sent.wr_id, sent.opcode), (9, WcOpcode::Send));
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(got.opcode, WcOpcode::Recv);
    assert_eq!(got.byte_len, 3000);
    assert_eq!(got.imm_data, Some(0x1234_5678));
    assert_eq!(got.invalidated_rkey, None);
    assert_eq!(got.src_qp, a.qp.qp_num());
    assert_eq!(read_mr(&b.mr, 0, 3000), data);
}

#[test]
fn send_with_inv_invalidates_the_responders_rkey_which_then_fails_rem_access_err() {
    let (_d, a, b) = connected(&PairOptions::default());
    let target = guarded_mr(&b, &b.pd, GUARD, 4096, verbs::ACCESS_ALL, FILL);
    // The key works before.
    a.mr.write(0, &[1; 16]);
    a.qp.post_send(&signaled(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: target.addr(0),
            rkey: target.rkey(),
        },
        vec![a.mr.sge(0, 16)],
    ))
    .unwrap();
    assert_ok(&one(&a.cq));
    assert_eq!(read_mr(&target, 0, 16), vec![1; 16]);
    target.write(0, &[FILL; 16]);

    b.qp.post_recv(&recv(5, vec![b.mr.sge(0, 64)])).unwrap();
    a.qp.post_send(&signaled(
        2,
        WrOpcode::SendWithInv(target.rkey()),
        vec![a.mr.sge(0, 10)],
    ))
    .unwrap();
    let sent = one(&a.cq);
    assert_ok(&sent);
    assert_eq!(sent.opcode, WcOpcode::Send);
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(got.opcode, WcOpcode::Recv);
    assert_eq!(got.byte_len, 10);
    assert_eq!(got.invalidated_rkey, Some(target.rkey()));
    assert_eq!(got.imm_data, None);

    // Now the key is dead: a WRITE with it fails and changes nothing.
    let write = signaled(
        10,
        WrOpcode::RdmaWrite {
            remote_addr: target.addr(0),
            rkey: target.rkey(),
        },
        vec![a.mr.sge(0, 16)],
    );
    expect_remote_error(
        &a,
        &b,
        write,
        WcStatus::RemAccessErr,
        AsyncEvent::QpAccessErr,
    );
    assert_untouched(&target, FILL);
}

#[test]
fn rdma_write_places_data_at_the_remote_address_and_consumes_no_receive() {
    let (_d, a, b) = connected(&PairOptions::default());
    let target = guarded_mr(&b, &b.pd, GUARD, 8192, verbs::ACCESS_ALL, FILL);
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 64)])).unwrap();
    let data = pattern(5000, 2);
    a.mr.write(1000, &data);
    a.qp.post_send(&signaled(
        4,
        WrOpcode::RdmaWrite {
            remote_addr: target.addr(100),
            rkey: target.rkey(),
        },
        vec![a.mr.sge(1000, 5000)],
    ))
    .unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    assert_eq!((wc.wr_id, wc.opcode), (4, WcOpcode::RdmaWrite));
    let mut expected = vec![FILL; GUARD * 2 + 8192];
    expected[GUARD + 100..GUARD + 5100].copy_from_slice(&data);
    assert!(buffer_bytes(&target) == expected, "WRITE placed wrongly");
    // The receive is still posted: no completion at the responder.
    exactly(&b.cq, 0);
    assert_eq!(b.qp.query().unwrap().rq_consumed, 0);
}

#[test]
fn rdma_write_with_imm_places_data_and_consumes_a_receive_with_the_immediate() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.qp.post_recv(&recv(11, vec![b.mr.sge(0, 16)])).unwrap();
    let data = pattern(2500, 3);
    a.mr.write(0, &data);
    a.qp.post_send(&signaled(
        5,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: b.mr.addr(8192),
            rkey: b.mr.rkey(),
            imm: 0xCAFE_F00D,
        },
        vec![a.mr.sge(0, 2500)],
    ))
    .unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    assert_eq!(wc.opcode, WcOpcode::RdmaWrite);
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(got.wr_id, 11);
    assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(got.imm_data, Some(0xCAFE_F00D));
    assert_eq!(got.byte_len, 2500);
    assert_eq!(got.src_qp, a.qp.qp_num());
    assert_eq!(read_mr(&b.mr, 8192, 2500), data);
    // The data went to the address, not into the receive buffer.
    assert_eq!(read_mr(&b.mr, 0, 16), vec![0; 16]);
}

#[test]
fn rdma_read_gathers_remote_memory_into_local_sges() {
    let (_d, a, b) = connected(&PairOptions::default());
    let data = pattern(4000, 4);
    b.mr.write(3000, &data);
    let sges = vec![
        a.mr.sge(0, 1000),
        a.mr.sge(5000, 2500),
        a.mr.sge(20000, 500),
    ];
    a.qp.post_send(&signaled(
        6,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(3000),
            rkey: b.mr.rkey(),
        },
        sges,
    ))
    .unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (6, WcOpcode::RdmaRead, 4000)
    );
    assert_eq!(read_mr(&a.mr, 0, 1000), data[..1000]);
    assert_eq!(read_mr(&a.mr, 5000, 2500), data[1000..3500]);
    assert_eq!(read_mr(&a.mr, 20000, 500), data[3500..]);
    assert_eq!(read_mr(&a.mr, 1000, 4000), vec![0; 4000]);
    exactly(&b.cq, 0);
}

#[test]
fn atomic_cmp_and_swp_swaps_only_when_the_compare_matches() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.mr.write(64, &0x1111_2222_3333_4444u64.to_le_bytes());
    let cas = |wr_id, compare, swap, at| {
        signaled(
            wr_id,
            WrOpcode::AtomicCmpSwp {
                remote_addr: b.mr.addr(64),
                rkey: b.mr.rkey(),
                compare,
                swap,
            },
            vec![a.mr.sge(at, 8)],
        )
    };
    // Not matching: nothing swapped, the old value returned.
    a.qp.post_send(&cas(1, 5, 6, 0)).unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::CompSwap, 8));
    assert_eq!(read_u64(&a.mr, 0), 0x1111_2222_3333_4444);
    assert_eq!(read_u64(&b.mr, 64), 0x1111_2222_3333_4444);
    // Matching: swapped.
    a.qp.post_send(&cas(2, 0x1111_2222_3333_4444, 0xAAAA, 8))
        .unwrap();
    assert_ok(&one(&a.cq));
    assert_eq!(read_u64(&a.mr, 8), 0x1111_2222_3333_4444);
    assert_eq!(read_u64(&b.mr, 64), 0xAAAA);
    // The neighbours are untouched.
    assert_eq!(read_mr(&b.mr, 56, 8), vec![0; 8]);
    assert_eq!(read_mr(&b.mr, 72, 8), vec![0; 8]);
}

#[test]
fn atomic_fetch_and_add_returns_the_old_value_and_adds() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.mr.write(128, &u64::MAX.to_le_bytes());
    for (i, add) in [2u64, 40, 1 << 40].into_iter().enumerate() {
        a.qp.post_send(&signaled(
            i as u64,
            WrOpcode::AtomicFetchAdd {
                remote_addr: b.mr.addr(128),
                rkey: b.mr.rkey(),
                add,
            },
            vec![a.mr.sge(8 * i, 8)],
        ))
        .unwrap();
    }
    let wcs = exactly(&a.cq, 3);
    for (i, wc) in wcs.iter().enumerate() {
        assert_ok(wc);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (i as u64, WcOpcode::FetchAdd, 8)
        );
    }
    // Wrapping arithmetic, each applied exactly once, in order.
    assert_eq!(read_u64(&a.mr, 0), u64::MAX);
    assert_eq!(read_u64(&a.mr, 8), 1);
    assert_eq!(read_u64(&a.mr, 16), 41);
    assert_eq!(read_u64(&b.mr, 128), 41 + (1 << 40));
}

#[test]
fn local_inv_invalidates_the_lkey_so_its_next_use_fails_loc_prot_err() {
    let (_d, a, b) = connected(&PairOptions::default());
    let src = guarded_mr(&a, &a.pd, GUARD, 4096, verbs::ACCESS_ALL, FILL);
    b.qp.post_recv_list(&[
        recv(1, vec![b.mr.sge(0, 64)]),
        recv(2, vec![b.mr.sge(64, 64)]),
    ])
    .unwrap();
    // The key works before.
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![src.sge(0, 32)]))
        .unwrap();
    assert_ok(&one(&a.cq));
    assert_ok(&one(&b.cq));
    assert_eq!(read_mr(&b.mr, 0, 32), vec![FILL; 32]);

    a.qp.post_send(&signaled(2, WrOpcode::LocalInv(src.lkey()), vec![]))
        .unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    assert_eq!((wc.wr_id, wc.opcode), (2, WcOpcode::LocalInv));

    let send = signaled(3, WrOpcode::Send, vec![src.sge(0, 32)]);
    let behind = signaled(4, WrOpcode::Send, vec![a.mr.sge(0, 8)]);
    a.qp.post_send_list(&[send, behind]).unwrap();
    expect_failed_then_flushed(&a, 3, WcStatus::LocProtErr, &[4]);
    // Nothing reached the peer: its receive is still posted, its buffer unchanged.
    exactly(&b.cq, 0);
    assert_eq!(read_mr(&b.mr, 64, 64), vec![0; 64]);
    assert_eq!(b.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn sixteen_sges_on_both_sides_gather_and_scatter_in_order() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let n = o.caps.max_send_sge as usize;
    let data = pattern(n * (n + 1) * 100 / 2, 5);
    // Send SGEs of 100, 200, ... bytes, scattered backwards through the buffer.
    let mut send_sges = Vec::new();
    let mut at = 0;
    for i in 0..n {
        let len = (i + 1) * 100;
        let offset = 200_000 - (i + 1) * 3000;
        a.mr.write(offset, &data[at..at + len]);
        send_sges.push(a.mr.sge(offset, len));
        at += len;
    }
    // Receive SGEs of other sizes, with gaps between them.
    let mut recv_sges = Vec::new();
    let mut left = data.len();
    for i in 0..n {
        let len = if i + 1 == n { left } else { 700 - 20 * i };
        recv_sges.push(b.mr.sge(i * 1000, len));
        left -= len;
    }
    b.qp.post_recv(&recv(1, recv_sges.clone())).unwrap();
    a.qp.post_send(&signaled(1, WrOpcode::Send, send_sges))
        .unwrap();
    assert_ok(&one(&a.cq));
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(got.byte_len as usize, data.len());
    let mut at = 0;
    let mut placed = Vec::new();
    for s in &recv_sges {
        let offset = (s.addr - b.mr.addr(0)) as usize;
        placed.extend(read_mr(&b.mr, offset, s.length as usize));
        // The gap after each SGE is untouched.
        if s.length < 1000 {
            let gap = 1000 - s.length as usize;
            assert_eq!(
                read_mr(&b.mr, offset + s.length as usize, gap),
                vec![0; gap]
            );
        }
        at += s.length as usize;
    }
    assert_eq!(at, data.len());
    assert!(placed == data, "scattered data differs");
}

#[test]
fn inline_data_goes_from_the_wqe_for_send_and_write() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let max = o.caps.max_inline_data as usize;
    let data = pattern(max, 6);
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 4096)])).unwrap();
    a.qp.post_send(&SendWr {
        wr_id: 1,
        opcode: WrOpcode::SendWithImm(7),
        inline: Some(data.clone()),
        signaled: true,
        ..SendWr::default()
    })
    .unwrap();
    assert_ok(&one(&a.cq));
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!((got.byte_len as usize, got.imm_data), (max, Some(7)));
    assert_eq!(read_mr(&b.mr, 0, max), data);

    a.qp.post_send(&SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(10_000),
            rkey: b.mr.rkey(),
        },
        inline: Some(data[..37].to_vec()),
        signaled: true,
        ..SendWr::default()
    })
    .unwrap();
    assert_ok(&one(&a.cq));
    assert_eq!(read_mr(&b.mr, 10_000, 37), data[..37]);
    assert_eq!(read_mr(&b.mr, 10_037, 1), [0]);
    // More than the QP's inline limit is refused at post time.
    let too_long = SendWr {
        inline: Some(vec![0; max + 1]),
        ..SendWr::default()
    };
    assert!(a.qp.post_send(&too_long).is_err());
}

#[test]
fn only_signaled_wrs_complete_in_order_and_unsignaled_ones_free_their_slots_silently() {
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let signals = [
        false, true, false, false, true, false, true, false, false, true,
    ];
    b.qp.post_recv_list(
        &(0..signals.len())
            .map(|i| recv(100 + i as u64, vec![b.mr.sge(i * 64, 64)]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let wrs: Vec<SendWr> = signals
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            a.mr.write(i * 8, &(i as u64).to_le_bytes());
            SendWr {
                wr_id: i as u64,
                sges: vec![a.mr.sge(i * 8, 8)],
                signaled: s,
                ..SendWr::default()
            }
        })
        .collect();
    a.qp.post_send_list(&wrs).unwrap();
    let wcs = exactly(&a.cq, 4);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 4, 6, 9]);
    wcs.iter().for_each(assert_ok);
    assert_eq!(a.qp.sq_free_slots(), a.qp.caps().max_send_wr);
    // Every message arrived, in order.
    let got = exactly(&b.cq, signals.len());
    for (i, wc) in got.iter().enumerate() {
        assert_ok(wc);
        assert_eq!(wc.wr_id, 100 + i as u64);
        assert_eq!(read_u64(&b.mr, i * 64), i as u64);
    }
    // The last one unsignaled: it completes silently; a signaled one after it frees both.
    b.qp.post_recv_list(&[recv(1, vec![b.mr.sge(0, 8)]), recv(2, vec![b.mr.sge(8, 8)])])
        .unwrap();
    a.qp.post_send(&SendWr {
        wr_id: 77,
        sges: vec![a.mr.sge(0, 8)],
        ..SendWr::default()
    })
    .unwrap();
    exactly(&b.cq, 1);
    exactly(&a.cq, 0);
    assert_eq!(a.qp.sq_free_slots(), a.qp.caps().max_send_wr - 1);
    a.qp.post_send(&signaled(78, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    assert_eq!(one(&a.cq).wr_id, 78);
    assert_eq!(a.qp.sq_free_slots(), a.qp.caps().max_send_wr);
}

#[test]
fn a_fenced_send_waits_for_the_read_before_it() {
    let (_d, a, b) = connected(&PairOptions::default());
    // The READ brings the remote bytes into a's buffer; the fenced SEND sends that same
    // buffer. Without the fence the SEND would gather the bytes before the READ placed
    // them.
    let remote = pattern(6000, 7);
    b.mr.write(100_000, &remote);
    a.mr.write(0, &[0xEE; 6000]);
    b.qp.post_recv(&recv(1, vec![b.mr.sge(0, 6000)])).unwrap();
    a.qp.post_send_list(&[
        signaled(
            1,
            WrOpcode::RdmaRead {
                remote_addr: b.mr.addr(100_000),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, 6000)],
        ),
        SendWr {
            fence: true,
            ..signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 6000)])
        },
    ])
    .unwrap();
    let wcs = exactly(&a.cq, 2);
    wcs.iter().for_each(assert_ok);
    assert_eq!(
        (wcs[0].opcode, wcs[1].opcode),
        (WcOpcode::RdmaRead, WcOpcode::Send)
    );
    let got = one(&b.cq);
    assert_ok(&got);
    assert_eq!(got.byte_len, 6000);
    assert!(read_mr(&b.mr, 0, 6000) == remote, "the SEND did not wait");
}

#[test]
fn the_solicited_bit_is_reported_and_only_it_wakes_a_solicited_only_wait() {
    let (_d, a, b) = connected(&PairOptions::default());
    b.qp.post_recv_list(
        &(0..4)
            .map(|i| recv(i, vec![b.mr.sge(i as usize * 64, 64)]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let send = |wr_id, solicited| {
        a.qp.post_send(&SendWr {
            solicited,
            ..signaled(wr_id, WrOpcode::Send, vec![a.mr.sge(0, 16)])
        })
        .unwrap();
        assert_ok(&one(&a.cq));
    };
    // Armed for solicited completions only: an ordinary SEND raises no event.
    b.cq.req_notify(true);
    send(1, false);
    let got = one(&b.cq);
    assert!(!got.solicited());
    assert!(!b.ctx.wait_cq_event(&b.cq, QUIET).unwrap());
    // A solicited one does.
    send(2, true);
    assert!(b.ctx.wait_cq_event(&b.cq, T).unwrap());
    let got = one(&b.cq);
    assert_ok(&got);
    assert!(got.solicited());
    // Solicited with immediate data, and WRITE with immediate, carry the flag too.
    b.cq.req_notify(true);
    a.qp.post_send(&SendWr {
        solicited: true,
        ..signaled(
            3,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: b.mr.addr(4096),
                rkey: b.mr.rkey(),
                imm: 1,
            },
            vec![a.mr.sge(0, 16)],
        )
    })
    .unwrap();
    assert_ok(&one(&a.cq));
    assert!(b.ctx.wait_cq_event(&b.cq, T).unwrap());
    let got = one(&b.cq);
    assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm);
    assert!(got.solicited());
    // Armed for any completion: an ordinary SEND wakes it.
    b.cq.req_notify(false);
    send(4, false);
    assert!(b.ctx.wait_cq_event(&b.cq, T).unwrap());
    assert!(!one(&b.cq).solicited());
    // The sender's completions never carry the bit.
    no_event(&a.ctx);
}
