//! What the tests of the advanced features (datasheet §14: tests/tests/memory_keys.rs,
//! send_variants.rs, srq.rs, ud.rs, one_shot_read.rs, wqe_mmio.rs,
//! pipelined_registration.rs, shared_sq.rs, sessions.rs) share: completions that must
//! come, WRITEs and READs through a key, refused WRs on fresh QPs, the status of a failed
//! command, and the three regions an indirect key spans.

use rnic_driver::verbs::{
    Cq, Mr, Qp, SendWr, Sge, Wc, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use rnic_driver::Error;
use rnic_tools::features::{self, FILL};

use crate::net::expect_wc;
pub use crate::verbs_checks::{QUIET, T};
use crate::verbs_pair::{buffer_bytes, connect_qps, init_qp, signaled, PairOptions, Side};

/// Local write and remote write.
pub const LW_RW: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
/// Local write and remote read.
pub const LW_RR: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ;

/// The next completion of `cq`, which must come and must be for `wr_id` with `status`.
#[track_caller]
pub fn expect(cq: &Cq, wr_id: u64, status: WcStatus) -> Wc {
    expect_wc(cq, wr_id, status, T)
}

/// A fresh pair of connected QPs on the sides' PDs and CQs, for a test whose error puts
/// the QPs it uses in the error state.
pub fn fresh_qps(a: &Side, b: &Side) -> (Qp, Qp) {
    let o = PairOptions::default();
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let qa = init_qp(a, &a.cq, &o, access);
    let qb = init_qp(b, &b.cq, &o, access);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x300, 0x400);
    (qa, qb)
}

/// A signaled RDMA WRITE of `sge` to `remote_addr` through `rkey`.
pub fn write(wr_id: u64, rkey: u32, remote_addr: u64, sge: Sge) -> SendWr {
    signaled(wr_id, WrOpcode::RdmaWrite { remote_addr, rkey }, vec![sge])
}

/// A signaled RDMA READ into `sge` from `remote_addr` through `rkey`.
pub fn read(wr_id: u64, rkey: u32, remote_addr: u64, sge: Sge) -> SendWr {
    signaled(wr_id, WrOpcode::RdmaRead { remote_addr, rkey }, vec![sge])
}

/// Three regions of `b` with `access` ([`features::three_regions`]).
pub fn three_regions(b: &Side, access: [u32; 3]) -> [Mr; 3] {
    features::three_regions(&b.endpoint(), access).expect("three regions")
}

/// Checks that every byte of each of `mrs` (guards included) still holds [`FILL`].
pub fn assert_untouched(mrs: &[&Mr]) {
    for (i, mr) in mrs.iter().enumerate() {
        assert!(
            buffer_bytes(mr).iter().all(|&x| x == FILL),
            "buffer {i} changed"
        );
    }
}

/// Posts `wr` on a fresh QP of `a` and expects it to fail with `status`.
pub fn refused(a: &Side, b: &Side, wr: SendWr, status: WcStatus) {
    let (qa, _qb) = fresh_qps(a, b);
    let id = wr.wr_id;
    qa.post_send(&wr).unwrap();
    expect(&a.cq, id, status);
}

/// The status a failed command ended with.
pub fn status<T: std::fmt::Debug>(r: rnic_driver::Result<T>) -> u16 {
    match r {
        Err(Error::Command { status, .. }) => status,
        other => panic!("expected a command error, got {other:?}"),
    }
}

/// A signaled RDMA WRITE of `sge` to the start of `b`'s registered buffer.
pub fn write_to_mr(wr_id: u64, b: &Side, sge: Sge) -> SendWr {
    signaled(
        wr_id,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
        },
        vec![sge],
    )
}
