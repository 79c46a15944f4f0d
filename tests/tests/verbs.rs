//! RDMA verbs between two VFs of one rnicd, through the host transport: every operation
//! travels as RoCEv2 frames through the device's internal switch, and every test checks the
//! data that arrived, the completions as ibverbs defines them, and (for errors) that nothing
//! outside the registered memory changed.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use rnic_driver::verbs::{
    self, attr, AsyncEvent, Context, Cq, Event, Mr, QpAttr, QpState, RecvWr, SendWr, Sge, Wc,
    WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use rnic_tests::verbs_pair::{
    buffer_bytes, connect_qps, guarded_mr, init_qp, pair, pattern, poll_n, read_mr, read_u64,
    signaled, to_rtr, to_rts, PairOptions, Side,
};
use rnic_tests::Rnicd;

const T: Duration = Duration::from_secs(10);
/// How long a test watches a CQ to be sure that nothing more arrives.
const QUIET: Duration = Duration::from_millis(100);
/// Guard bytes on each side of the regions error tests aim at.
const GUARD: usize = 4096;
/// What guarded buffers are filled with.
const FILL: u8 = 0x5A;

fn start() -> Rnicd {
    Rnicd::start(2, &[])
}

fn connected(o: &PairOptions) -> (Rnicd, Side, Side) {
    let rnicd = start();
    let (a, b) = pair(&rnicd, "vf0", "vf1", o);
    (rnicd, a, b)
}

fn recv(wr_id: u64, sges: Vec<Sge>) -> RecvWr {
    RecvWr { wr_id, sges }
}

#[track_caller]
fn assert_ok(wc: &Wc) {
    assert_eq!(
        wc.status,
        Ok(WcStatus::Success),
        "wr {:#x}: {}",
        wc.wr_id,
        wc.status_str()
    );
}

/// The next completion of `cq`, which must come.
#[track_caller]
fn one(cq: &Cq) -> Wc {
    let got = poll_n(cq, 1, T);
    assert_eq!(got.len(), 1, "no completion within {T:?}");
    got[0]
}

/// Exactly `n` completions of `cq`, and no more for a while.
#[track_caller]
fn exactly(cq: &Cq, n: usize) -> Vec<Wc> {
    let got = poll_n(cq, n, T);
    assert_eq!(got.len(), n, "completions: {got:#?}");
    let extra = poll_n(cq, 1, QUIET);
    assert!(extra.is_empty(), "unexpected completion: {extra:#?}");
    got
}

/// Waits for async event `what` about `object`; returns every event seen up to it.
#[track_caller]
fn wait_event(ctx: &Context, what: AsyncEvent, object: u32) -> Vec<Event> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < T {
        let Some(e) = ctx.get_event(T - start.elapsed()).expect("get_event") else {
            break;
        };
        seen.push(e);
        if let Event::Async {
            event, object: o, ..
        } = e
        {
            if event == what && o == object {
                return seen;
            }
        }
    }
    panic!("no {what:?} event for {object:#x}; saw {seen:?}");
}

/// Checks that no async event arrives on `ctx` for a while.
#[track_caller]
fn no_event(ctx: &Context) {
    let e = ctx.get_event(QUIET).expect("get_event");
    assert_eq!(e, None, "unexpected event");
}

#[track_caller]
fn assert_untouched(mr: &Mr, fill: u8) {
    let bytes = buffer_bytes(mr);
    if let Some(i) = bytes.iter().position(|&b| b != fill) {
        panic!(
            "byte {i} of a {}-byte buffer (region at {}..{}) changed to {:#x}",
            bytes.len(),
            mr.offset(),
            mr.offset() + mr.len(),
            bytes[i]
        );
    }
}

/// After a failure on `side`: the failed WR completed with `status`, then every WR behind
/// it (`flushed`, signaled or not) with WR_FLUSH_ERR, exactly once each; the QP is in ERR,
/// QP_FATAL was raised for it, and every send slot is free again.
#[track_caller]
fn expect_failed_then_flushed(side: &Side, failed: u64, status: WcStatus, flushed: &[u64]) {
    let wcs = exactly(&side.cq, 1 + flushed.len());
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (failed, Ok(status)),
        "{wcs:#?}"
    );
    assert_eq!(wcs[0].qp_num, side.qp.qp_num());
    for (wc, id) in wcs[1..].iter().zip(flushed) {
        assert_eq!((wc.wr_id, wc.status), (*id, Ok(WcStatus::WrFlushErr)));
        assert_eq!(wc.qp_num, side.qp.qp_num());
    }
    assert_eq!(side.qp.state().expect("query"), QpState::Err);
    wait_event(&side.ctx, AsyncEvent::QpFatal, side.qp.qp_num());
    assert_eq!(side.qp.sq_free_slots(), side.qp.caps().max_send_wr);
}

/// Posts `bad` (signaled) on `a` with an unsignaled and a signaled SEND behind it, and a
/// receive at `b`; `bad` fails at the responder with `status`. Checks the flush on both
/// sides (the receive too gets exactly one completion) and the responder's `b_event`.
#[track_caller]
fn expect_remote_error(a: &Side, b: &Side, bad: SendWr, status: WcStatus, b_event: AsyncEvent) {
    b.qp.post_recv(&recv(50, vec![b.mr.sge(0, 64)])).unwrap();
    let bad_id = bad.wr_id;
    let behind = [
        SendWr {
            wr_id: bad_id + 1,
            sges: vec![a.mr.sge(0, 8)],
            ..SendWr::default()
        },
        signaled(bad_id + 2, WrOpcode::Send, vec![a.mr.sge(0, 8)]),
    ];
    a.qp.post_send_list(&[bad, behind[0].clone(), behind[1].clone()])
        .unwrap();
    expect_failed_then_flushed(a, bad_id, status, &[bad_id + 1, bad_id + 2]);
    // The responder refused the request: it said why, and it is in ERR too.
    wait_event(&b.ctx, b_event, b.qp.qp_num());
    wait_event(&b.ctx, AsyncEvent::QpFatal, b.qp.qp_num());
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
    let wcs = exactly(&b.cq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (50, Ok(WcStatus::WrFlushErr))
    );
}

// ---------------------------------------------------------------------------------------
// Each opcode.

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

// ---------------------------------------------------------------------------------------
// Sizes.

/// Moves `size` bytes with `op` from `a` to `b` (for READ, from `b` to `a`) between
/// SGE lists of `local` and `remote` pieces and checks the data, the completions and that
/// nothing else in either buffer changed.
#[derive(Debug, Clone)]
struct Transfer {
    op: u8,
    mtu: u8,
    size: usize,
    local_sges: usize,
    remote_sges: usize,
    inline: bool,
    seed: u64,
}

const OPS: [&str; 5] = ["SEND", "SEND_WITH_IMM", "WRITE", "WRITE_WITH_IMM", "READ"];

/// Cuts `[0, size)` into `n` pieces of at least one byte (none for 0 bytes) and lays them
/// out through a buffer of `buf_len` bytes with random gaps, in a random order. Returns
/// (buffer offset, length) of each piece, in message order.
fn layout(size: usize, n: usize, buf_len: usize, rng: &mut u64) -> Vec<(usize, usize)> {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let n = n.min(size);
    if n == 0 {
        return Vec::new();
    }
    let mut cuts: Vec<usize> = (1..n)
        .map(|_| 1 + (next() as usize) % (size - 1).max(1))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut lens = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain([size]) {
        if c > last {
            lens.push(c - last);
            last = c;
        }
    }
    // Physical order: a rotation of message order, with gaps from the spare room.
    let k = lens.len();
    let rot = (next() as usize) % k;
    let mut spare = buf_len - size;
    let mut offsets = vec![0; k];
    let mut at = (next() as usize) % (spare.min(5000) + 1);
    spare -= at;
    for j in 0..k {
        let i = (j + rot) % k;
        offsets[i] = at;
        at += lens[i];
        let gap = (next() as usize) % (spare.min(300) + 1);
        spare -= gap;
        at += gap;
    }
    offsets.into_iter().zip(lens).collect()
}

fn run_transfer(t: &Transfer) {
    let mtu = verbs::mtu_bytes(t.mtu).unwrap() as usize;
    let o = PairOptions {
        mtu: t.mtu,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let buf_len = o.buf_len;
    let mut rng = t.seed | 1;
    let op = OPS[t.op as usize];
    let a_before = pattern(buf_len, t.seed);
    let b_before = pattern(buf_len, !t.seed);
    a.mr.write(0, &a_before);
    b.mr.write(0, &b_before);
    let local = layout(t.size, t.local_sges, buf_len, &mut rng);
    let remote_off = (rng as usize) % (buf_len - t.size + 1);
    let remote = if matches!(op, "SEND" | "SEND_WITH_IMM") {
        layout(t.size, t.remote_sges, buf_len, &mut rng)
    } else {
        vec![(remote_off, t.size)]
    };
    let gather = |bytes: &[u8], pieces: &[(usize, usize)]| -> Vec<u8> {
        pieces
            .iter()
            .flat_map(|&(o, l)| bytes[o..o + l].iter().copied())
            .collect()
    };
    let scatter = |bytes: &mut [u8], pieces: &[(usize, usize)], data: &[u8]| {
        let mut at = 0;
        for &(o, l) in pieces {
            bytes[o..o + l].copy_from_slice(&data[at..at + l]);
            at += l;
        }
    };
    let sges: Vec<Sge> = local.iter().map(|&(o, l)| a.mr.sge(o, l)).collect();
    let takes_recv = matches!(op, "SEND" | "SEND_WITH_IMM" | "WRITE_WITH_IMM");
    if takes_recv {
        let rsges = if op == "WRITE_WITH_IMM" {
            vec![b.mr.sge(0, 1)]
        } else {
            remote.iter().map(|&(o, l)| b.mr.sge(o, l)).collect()
        };
        b.qp.post_recv(&recv(0xB0B, rsges)).unwrap();
    }
    let imm = (t.seed >> 32) as u32;
    let opcode = match op {
        "SEND" => WrOpcode::Send,
        "SEND_WITH_IMM" => WrOpcode::SendWithImm(imm),
        "WRITE" => WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(remote_off),
            rkey: b.mr.rkey(),
        },
        "WRITE_WITH_IMM" => WrOpcode::RdmaWriteWithImm {
            remote_addr: b.mr.addr(remote_off),
            rkey: b.mr.rkey(),
            imm,
        },
        _ => WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(remote_off),
            rkey: b.mr.rkey(),
        },
    };
    let inline = t.inline && op != "READ" && t.size <= o.caps.max_inline_data as usize;
    let wr = if inline {
        SendWr {
            inline: Some(gather(&a_before, &local)),
            ..signaled(0xA0A, opcode, vec![])
        }
    } else {
        signaled(0xA0A, opcode, sges)
    };
    a.qp.post_send(&wr).unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    let want = match op {
        "SEND" | "SEND_WITH_IMM" => WcOpcode::Send,
        "READ" => WcOpcode::RdmaRead,
        _ => WcOpcode::RdmaWrite,
    };
    assert_eq!((wc.wr_id, wc.opcode), (0xA0A, want));
    if op == "READ" {
        assert_eq!(wc.byte_len as usize, t.size);
    }
    // The responder's completion, if any, was written before the ACK that completed the
    // request: it is there now or never.
    let got = b.cq.poll(2);
    if takes_recv {
        assert_eq!(got.len(), 1, "{got:?}");
        let r = &got[0];
        assert_ok(r);
        assert_eq!((r.wr_id, r.byte_len as usize), (0xB0B, t.size));
        assert_eq!(r.src_qp, a.qp.qp_num());
        let (opc, imm_data) = match op {
            "SEND" => (WcOpcode::Recv, None),
            "SEND_WITH_IMM" => (WcOpcode::Recv, Some(imm)),
            _ => (WcOpcode::RecvRdmaWithImm, Some(imm)),
        };
        assert_eq!((r.opcode, r.imm_data), (opc, imm_data));
    } else {
        assert!(got.is_empty(), "{got:?}");
    }
    let mut a_after = a_before.clone();
    let mut b_after = b_before.clone();
    if op == "READ" {
        scatter(&mut a_after, &local, &gather(&b_before, &remote));
    } else {
        scatter(&mut b_after, &remote, &gather(&a_before, &local));
    }
    let a_now = read_mr(&a.mr, 0, buf_len);
    let b_now = read_mr(&b.mr, 0, buf_len);
    let first_diff = |x: &[u8], y: &[u8]| x.iter().zip(y).position(|(p, q)| p != q);
    assert!(
        a_now == a_after,
        "{op} of {} bytes (mtu {mtu}): requester's buffer differs at {:?}",
        t.size,
        first_diff(&a_now, &a_after)
    );
    assert!(
        b_now == b_after,
        "{op} of {} bytes (mtu {mtu}): responder's buffer differs at {:?}",
        t.size,
        first_diff(&b_now, &b_after)
    );
}

#[test]
fn every_size_boundary_arrives_intact_by_send_write_and_read() {
    let mtu = 1024;
    for size in [0, 1, mtu - 1, mtu, mtu + 1, 10 * mtu + 3, 1 << 20] {
        for op in [0, 2, 4] {
            run_transfer(&Transfer {
                op,
                mtu: verbs::mtu::MTU_1024,
                size,
                local_sges: 3,
                remote_sges: 2,
                inline: false,
                seed: size as u64 * 31 + u64::from(op),
            });
        }
    }
}

fn transfers() -> impl Strategy<Value = Transfer> {
    (
        0u8..5,
        1u8..=5,
        0usize..8,
        0usize..=65536,
        1usize..=16,
        1usize..=16,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(op, mtu, kind, random, local_sges, remote_sges, inline, seed)| {
                let m = verbs::mtu_bytes(mtu).unwrap() as usize;
                let size = [0, 1, m - 1, m, m + 1, 10 * m + 3, 1 << 20, random][kind];
                Transfer {
                    op,
                    mtu,
                    size,
                    local_sges,
                    remote_sges,
                    inline,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_transfers_arrive_intact_and_change_nothing_else(t in transfers()) {
        run_transfer(&t);
    }

    #[test]
    fn random_batches_complete_exactly_their_signaled_wrs_in_order(wrs in batches()) {
        run_batch(&wrs);
    }
}

/// One work request of a random batch.
#[derive(Debug, Clone)]
struct BatchWr {
    /// SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ, CMP_AND_SWP, FETCH_AND_ADD.
    kind: u8,
    size: usize,
    offset: usize,
    signaled: bool,
    solicited: bool,
    inline: bool,
    cas_matches: bool,
    operand: u64,
}

fn batches() -> impl Strategy<Value = Vec<BatchWr>> {
    let wr = (
        0u8..7,
        0usize..=3000,
        0usize..1000,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(kind, size, offset, signaled, solicited, inline, cas_matches, operand)| BatchWr {
                kind,
                size,
                offset,
                signaled,
                solicited,
                inline,
                cas_matches,
                operand,
            },
        );
    prop::collection::vec(wr, 1..=12)
}

/// Posts `wrs` as one list (work request `k` uses bytes `k * 8192 + offset ..` of both
/// buffers), then a signaled zero-length WRITE as a barrier, and checks every completion,
/// in order, and both buffers whole.
fn run_batch(wrs: &[BatchWr]) {
    const REGION: usize = 8192;
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let len = 12 * REGION;
    let seed = wrs.iter().fold(7u64, |h, w| h.wrapping_mul(31) ^ w.operand);
    let mut a_exp = pattern(len, seed);
    let mut b_exp = pattern(len, seed ^ 0xFFFF);
    a.mr.write(0, &a_exp);
    b.mr.write(0, &b_exp);
    let mut posts = Vec::new();
    let mut recvs = Vec::new();
    // (wr_id, opcode, byte_len where ibverbs defines it) of the send completions, and
    // (wr_id, opcode, byte_len, imm, solicited) of the receive completions, expected.
    let mut sends = Vec::new();
    let mut received = Vec::new();
    for (k, w) in wrs.iter().enumerate() {
        let id = k as u64;
        let base = k * REGION;
        let (at, size) = if w.kind >= 5 {
            (base + w.offset / 8 * 8, 8)
        } else {
            (base + w.offset, w.size)
        };
        let imm = w.operand as u32;
        let remote_addr = b.mr.addr(at);
        let rkey = b.mr.rkey();
        let old = u64::from_le_bytes(b_exp[at..at + 8].try_into().unwrap());
        let (opcode, wc) = match w.kind {
            0 => (WrOpcode::Send, WcOpcode::Send),
            1 => (WrOpcode::SendWithImm(imm), WcOpcode::Send),
            2 => (
                WrOpcode::RdmaWrite { remote_addr, rkey },
                WcOpcode::RdmaWrite,
            ),
            3 => (
                WrOpcode::RdmaWriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                },
                WcOpcode::RdmaWrite,
            ),
            4 => (WrOpcode::RdmaRead { remote_addr, rkey }, WcOpcode::RdmaRead),
            5 => (
                WrOpcode::AtomicCmpSwp {
                    remote_addr,
                    rkey,
                    compare: if w.cas_matches { old } else { !old },
                    swap: w.operand,
                },
                WcOpcode::CompSwap,
            ),
            _ => (
                WrOpcode::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add: w.operand,
                },
                WcOpcode::FetchAdd,
            ),
        };
        let sges = if size == 0 {
            vec![]
        } else {
            vec![a.mr.sge(at, size)]
        };
        let inline = w.inline && w.kind <= 3 && size <= o.caps.max_inline_data as usize;
        posts.push(SendWr {
            wr_id: id,
            opcode,
            sges: if inline { vec![] } else { sges },
            inline: inline.then(|| a_exp[at..at + size].to_vec()),
            signaled: w.signaled,
            solicited: w.solicited,
            fence: false,
        });
        match w.kind {
            0 | 1 => {
                let sges = if size == 0 {
                    vec![]
                } else {
                    vec![b.mr.sge(at, size)]
                };
                recvs.push(recv(id, sges));
                let imm = (w.kind == 1).then_some(imm);
                received.push((id, WcOpcode::Recv, size, imm, w.solicited));
            }
            3 => {
                recvs.push(recv(id, vec![]));
                received.push((id, WcOpcode::RecvRdmaWithImm, size, Some(imm), w.solicited));
            }
            _ => {}
        }
        match w.kind {
            0..=3 => {
                let data = a_exp[at..at + size].to_vec();
                b_exp[at..at + size].copy_from_slice(&data);
            }
            4 => {
                let data = b_exp[at..at + size].to_vec();
                a_exp[at..at + size].copy_from_slice(&data);
            }
            _ => {
                a_exp[at..at + 8].copy_from_slice(&old.to_le_bytes());
                let new = match (w.kind, w.cas_matches) {
                    (5, true) => w.operand,
                    (5, false) => old,
                    _ => old.wrapping_add(w.operand),
                };
                b_exp[at..at + 8].copy_from_slice(&new.to_le_bytes());
            }
        }
        if w.signaled {
            // READs and atomics report the bytes they fetched.
            sends.push((id, wc, (w.kind >= 4).then_some(size)));
        }
    }
    posts.push(signaled(
        999,
        WrOpcode::RdmaWrite {
            remote_addr: 0,
            rkey: 0,
        },
        vec![],
    ));
    sends.push((999, WcOpcode::RdmaWrite, None));
    b.qp.post_recv_list(&recvs).unwrap();
    a.qp.post_send_list(&posts).unwrap();
    // Completions come in order: once the barrier's is there, all are.
    let got = poll_n(&a.cq, sends.len(), T);
    got.iter().for_each(assert_ok);
    let got: Vec<_> = got
        .iter()
        .map(|w| {
            let fetched = matches!(
                w.opcode,
                WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd
            );
            (w.wr_id, w.opcode, fetched.then_some(w.byte_len as usize))
        })
        .collect();
    assert_eq!(got, sends);
    assert!(a.cq.poll(1).is_empty());
    let got: Vec<_> =
        b.cq.poll(recvs.len() + 1)
            .iter()
            .map(|w| {
                assert_ok(w);
                assert_eq!(w.src_qp, a.qp.qp_num());
                (
                    w.wr_id,
                    w.opcode,
                    w.byte_len as usize,
                    w.imm_data,
                    w.solicited(),
                )
            })
            .collect();
    assert_eq!(got, received);
    assert!(
        read_mr(&a.mr, 0, len) == a_exp,
        "requester's buffer differs"
    );
    assert!(
        read_mr(&b.mr, 0, len) == b_exp,
        "responder's buffer differs"
    );
    assert_eq!(a.qp.sq_free_slots(), a.qp.caps().max_send_wr);
}

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
// Errors.

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

fn all_access(b: &Side) -> Mr {
    guarded_mr(b, &b.pd, GUARD, 8192, verbs::ACCESS_ALL, FILL)
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

// ---------------------------------------------------------------------------------------
// State: posting, modify, query, events.

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
