//! RDMA ATOMIC WRITE and FLUSH (ABI 1.11, `CAP_ATOMIC_WRITE`, `CAP_FLUSH`, datasheet
//! §14.14) through the Rust driver over vfio-user, against a real rnicd: two VFs, an RC
//! QP each. An ATOMIC WRITE lands its 8 bytes and nothing else; one at a misaligned
//! address is refused as rxe refuses it (remote invalid request); a FLUSH completes over
//! a range and over the whole region, and one whose placement type the region does not
//! allow is a remote access error; through a network that loses, duplicates and reorders
//! frames, every ATOMIC WRITE and FLUSH completes once and none is executed twice.

use rnic_driver::verbs::{self, flush, AsyncEvent, SendWr, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::verbs_checks::{assert_ok, connected, expect_remote_error, one, FILL, GUARD};
use std::time::Duration;

use rnic_tests::verbs_pair::{
    connect, guarded_mr, poll_n, read_mr, read_u64, side, signaled, PairOptions,
};
use rnic_tests::Rnicd;

/// QPs (and buffers) that allow everything, FLUSH of both placement types included.
fn options() -> PairOptions {
    PairOptions {
        access: PairOptions::default().access | verbs::ACCESS_FLUSH,
        ..PairOptions::default()
    }
}

fn atomic_write(wr_id: u64, remote_addr: u64, rkey: u32, value: [u8; 8]) -> SendWr {
    signaled(
        wr_id,
        WrOpcode::AtomicWrite {
            remote_addr,
            rkey,
            value,
        },
        vec![],
    )
}

fn flush_wr(wr_id: u64, remote_addr: u64, rkey: u32, length: u64, ptype: u8, level: u8) -> SendWr {
    signaled(
        wr_id,
        WrOpcode::Flush {
            remote_addr,
            rkey,
            length,
            ptype,
            level,
        },
        vec![],
    )
}

#[test]
fn an_atomic_write_lands_its_eight_bytes_and_nothing_else() {
    let (_d, a, b) = connected(&options());
    let target = guarded_mr(&b, &b.pd, GUARD, 4096, verbs::ACCESS_ALL, FILL);
    for (i, at) in [8usize, 4088].into_iter().enumerate() {
        let value = *b"cccccccc";
        let value = value.map(|c| c + i as u8);
        a.qp.post_send(&atomic_write(
            i as u64,
            target.addr(at),
            target.rkey(),
            value,
        ))
        .unwrap();
        let wc = one(&a.cq);
        assert_ok(&wc);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (i as u64, WcOpcode::AtomicWrite, 8)
        );
        assert_eq!(read_mr(&target, at, 8), value);
    }
    assert_eq!(read_mr(&target, 0, 8), vec![FILL; 8]);
    assert_eq!(read_mr(&target, 16, 4072), vec![FILL; 4072]);
    // No receive was consumed.
    assert!(b.cq.poll(4).is_empty());
}

#[test]
fn a_misaligned_atomic_write_is_a_remote_invalid_request() {
    let (_d, a, b) = connected(&options());
    let target = guarded_mr(&b, &b.pd, GUARD, 4096, verbs::ACCESS_ALL, FILL);
    let bad = atomic_write(20, target.addr(4), target.rkey(), [1; 8]);
    expect_remote_error(&a, &b, bad, WcStatus::RemInvReqErr, AsyncEvent::QpReqErr);
    assert_eq!(read_mr(&target, 0, 16), vec![FILL; 16]);
}

#[test]
fn an_atomic_write_without_remote_write_access_is_a_remote_access_error() {
    let (_d, a, b) = connected(&options());
    let target = guarded_mr(&b, &b.pd, GUARD, 4096, verbs::ACCESS_REMOTE_READ, FILL);
    let bad = atomic_write(30, target.addr(0), target.rkey(), [1; 8]);
    expect_remote_error(&a, &b, bad, WcStatus::RemAccessErr, AsyncEvent::QpAccessErr);
    assert_eq!(read_mr(&target, 0, 8), vec![FILL; 8]);
}

#[test]
fn a_flush_after_writes_completes_over_a_range_and_over_the_region() {
    let (_d, a, b) = connected(&options());
    let access =
        verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_WRITE | verbs::ACCESS_FLUSH_GLOBAL;
    let target = guarded_mr(&b, &b.pd, GUARD, 8192, access, FILL);
    a.mr.write(0, &[7; 5000]);
    let write = signaled(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: target.addr(100),
            rkey: target.rkey(),
        },
        vec![a.mr.sge(0, 5000)],
    );
    let range = flush_wr(
        2,
        target.addr(100),
        target.rkey(),
        5000,
        flush::GLOBAL,
        flush::RANGE,
    );
    // Level MR ignores the address and length: the whole region.
    let region = flush_wr(3, 0, target.rkey(), 12_345_678, flush::GLOBAL, flush::MR);
    a.qp.post_send_list(&[write, range, region]).unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        let wc = one(&a.cq);
        assert_ok(&wc);
        got.push((wc.wr_id, wc.opcode));
    }
    assert_eq!(
        got,
        [
            (1, WcOpcode::RdmaWrite),
            (2, WcOpcode::Flush),
            (3, WcOpcode::Flush)
        ]
    );
    assert_eq!(read_mr(&target, 100, 5000), vec![7; 5000]);
}

#[test]
fn a_flush_of_a_placement_type_the_region_does_not_allow_is_a_remote_access_error() {
    let (_d, a, b) = connected(&options());
    let access =
        verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_WRITE | verbs::ACCESS_FLUSH_GLOBAL;
    let target = guarded_mr(&b, &b.pd, GUARD, 4096, access, FILL);
    // rdma-core's test_qp_ex_rc_flush_type_violate: persistence on a region that allows
    // global visibility only.
    let bad = flush_wr(
        40,
        target.addr(0),
        target.rkey(),
        64,
        flush::PERSISTENT,
        flush::RANGE,
    );
    expect_remote_error(&a, &b, bad, WcStatus::RemAccessErr, AsyncEvent::QpAccessErr);
}

#[test]
fn a_flush_of_a_region_without_flush_access_is_a_remote_access_error() {
    let (_d, a, b) = connected(&options());
    let target = guarded_mr(&b, &b.pd, GUARD, 4096, verbs::ACCESS_ALL, FILL);
    let bad = flush_wr(
        50,
        target.addr(0),
        target.rkey(),
        64,
        flush::GLOBAL,
        flush::MR,
    );
    expect_remote_error(&a, &b, bad, WcStatus::RemAccessErr, AsyncEvent::QpAccessErr);
}

/// A faulty network (`--net-faults`): ATOMIC WRITEs of a new value each to one word, and
/// FLUSHes between them, all complete with success in order; the word ends with the last
/// value and keeps it: a duplicate request is answered from the responder's resources,
/// never written again (which would bring back an older value).
#[test]
fn through_loss_and_duplicates_each_atomic_write_lands_once_in_order() {
    let rnicd = Rnicd::start(
        2,
        &["--net-faults", "loss=0.05,dup=0.05,reorder=0.02,seed=11"],
    );
    let o = PairOptions {
        // 4.096 µs * 2^10 = 4 ms: lost answers are asked for again quickly.
        timeout: 10,
        ..options()
    };
    let a = side(&rnicd.socket("vf0"), &o);
    let b = side(&rnicd.socket("vf1"), &o);
    connect(&a, &b, &o, 0x10, 0x20);
    let word = b.mr.addr(64);
    let value = |k: u64| (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5).to_le_bytes();
    const ROUNDS: u64 = 300;
    const BATCH: u64 = 12;
    let mut k = 0;
    while k < ROUNDS {
        let wrs: Vec<SendWr> = (k..k + BATCH)
            .map(|i| {
                if i % 3 == 2 {
                    flush_wr(i, word, b.mr.rkey(), 8, flush::GLOBAL, flush::RANGE)
                } else {
                    atomic_write(i, word, b.mr.rkey(), value(i))
                }
            })
            .collect();
        a.qp.post_send_list(&wrs).unwrap();
        let wcs = poll_n(&a.cq, BATCH as usize, Duration::from_secs(20));
        assert_eq!(wcs.len(), BATCH as usize, "completions of WRs {k}..");
        for (wc, i) in wcs.iter().zip(k..) {
            assert_eq!((wc.wr_id, wc.status), (i, Ok(WcStatus::Success)));
            let op = if i % 3 == 2 {
                WcOpcode::Flush
            } else {
                WcOpcode::AtomicWrite
            };
            assert_eq!(wc.opcode, op);
        }
        k += BATCH;
    }
    let last = u64::from_le_bytes(value(ROUNDS - 2));
    assert_eq!(read_u64(&b.mr, 64), last);
    // Duplicates still on their way change nothing.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read_u64(&b.mr, 64), last);
}
