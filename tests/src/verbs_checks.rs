//! What the tests of the RDMA verbs (tests/tests/verbs_*.rs) share: a pair of connected
//! VFs, completions that must come (and nothing more), async events, untouched memory, and
//! a failed WR with the flush behind it.

use std::time::{Duration, Instant};

use rnic_driver::verbs::{
    self, AsyncEvent, Context, Cq, Event, Mr, QpState, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode,
};

use crate::verbs_pair::{buffer_bytes, guarded_mr, pair, poll_n, signaled, PairOptions, Side};
use crate::Rnicd;

/// How long a test waits for what must come.
pub const T: Duration = Duration::from_secs(10);
/// How long a test watches a CQ to be sure that nothing more arrives.
pub const QUIET: Duration = Duration::from_millis(100);
/// Guard bytes on each side of the regions error tests aim at.
pub const GUARD: usize = 4096;
/// What guarded buffers are filled with.
pub const FILL: u8 = 0x5A;

fn start() -> Rnicd {
    Rnicd::start(2, &[])
}

/// A fresh rnicd with two VFs, and a side on each, connected with options `o`.
pub fn connected(o: &PairOptions) -> (Rnicd, Side, Side) {
    let rnicd = start();
    let (a, b) = pair(&rnicd, "vf0", "vf1", o);
    (rnicd, a, b)
}

/// A receive WR.
pub fn recv(wr_id: u64, sges: Vec<Sge>) -> RecvWr {
    RecvWr { wr_id, sges }
}

/// Checks that `wc` completed successfully.
#[track_caller]
pub fn assert_ok(wc: &Wc) {
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
pub fn one(cq: &Cq) -> Wc {
    let got = poll_n(cq, 1, T);
    assert_eq!(got.len(), 1, "no completion within {T:?}");
    got[0]
}

/// Exactly `n` completions of `cq`, and no more for a while.
#[track_caller]
pub fn exactly(cq: &Cq, n: usize) -> Vec<Wc> {
    let got = poll_n(cq, n, T);
    assert_eq!(got.len(), n, "completions: {got:#?}");
    let extra = poll_n(cq, 1, QUIET);
    assert!(extra.is_empty(), "unexpected completion: {extra:#?}");
    got
}

/// Waits for async event `what` about `object`; returns every event seen up to it.
#[track_caller]
pub fn wait_event(ctx: &Context, what: AsyncEvent, object: u32) -> Vec<Event> {
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
pub fn no_event(ctx: &Context) {
    let e = ctx.get_event(QUIET).expect("get_event");
    assert_eq!(e, None, "unexpected event");
}

/// Checks that no byte of `mr`'s buffer (its guards included) differs from `fill`.
#[track_caller]
pub fn assert_untouched(mr: &Mr, fill: u8) {
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
pub fn expect_failed_then_flushed(side: &Side, failed: u64, status: WcStatus, flushed: &[u64]) {
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
pub fn expect_remote_error(a: &Side, b: &Side, bad: SendWr, status: WcStatus, b_event: AsyncEvent) {
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

/// A guarded region of `b` (8 KiB, [`GUARD`] bytes of [`FILL`] on each side) that allows
/// everything.
pub fn all_access(b: &Side) -> Mr {
    guarded_mr(b, &b.pd, GUARD, 8192, verbs::ACCESS_ALL, FILL)
}
