//! Memory windows (ABI 1.6, `CAP_MW`) through the driver: a type 1 window grants remote
//! WRITE, READ and atomics on its range and loses them on a rebind; a type 2 window serves
//! only the QP that bound it and is invalidated by the peer's SEND with invalidate; a
//! region with a bound window cannot be deregistered. Between two VFs of one rnicd and
//! between two rnicd over UDP. (ibverbs/tests/memory_windows.rs drives the rest through
//! libibverbs.)

use rnic_abi::cmd::Status;
use rnic_abi::verbs::wc_flags;
use rnic_driver::verbs::{
    inc_rkey, BindInfo, Mr, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE,
    ACCESS_MW_BIND, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, MW_KEY_BIT,
    MW_TYPE_1, MW_TYPE_2,
};
use rnic_tests::feature_checks::{expect, fresh_qps, read, refused, status, write};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{guarded_mr, pattern, read_mr, read_u64, signaled, Side};
use rnic_tools::features::{FILL, GUARD};

const RW: u32 = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

/// A region of `b` that windows may be bound to, inside guards.
fn bindable(b: &Side, len: usize) -> Mr {
    guarded_mr(
        b,
        &b.pd,
        GUARD,
        len,
        ACCESS_LOCAL_WRITE | ACCESS_MW_BIND,
        FILL,
    )
}

/// The bind of `len` bytes at `offset` of `mr` with `access`.
fn info(mr: &Mr, offset: usize, len: u64, access: u32) -> BindInfo<'_> {
    BindInfo {
        mr: Some(mr),
        addr: mr.addr(offset),
        length: len,
        access,
    }
}

/// A signaled atomic fetch-and-add of `add` at `remote_addr` through `rkey` into `sge`.
fn fetch_add(
    wr_id: u64,
    rkey: u32,
    remote_addr: u64,
    add: u64,
    sge: rnic_abi::verbs::Sge,
) -> SendWr {
    signaled(
        wr_id,
        WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        },
        vec![sge],
    )
}

#[test]
fn a_type_1_window_grants_write_read_and_atomics_on_its_range_until_bound_again() {
    on_both_paths(156, |a, b| {
        let t = bindable(b, 8192);
        let mw = b.pd.alloc_mw(MW_TYPE_1).unwrap();
        assert_eq!(mw.rkey() & MW_KEY_BIT, MW_KEY_BIT, "{mw:?}");
        let first = mw.rkey();
        let all = RW | ACCESS_REMOTE_ATOMIC;
        let k1 =
            b.qp.post_bind_mw(1, &mw, &info(&t, 0, 4096, all), true)
                .unwrap();
        assert_eq!((k1, mw.rkey()), (inc_rkey(first), k1));
        let bound = expect(&b.cq, 1, WcStatus::Success);
        assert_eq!(bound.opcode, WcOpcode::BindMw);

        let data = pattern(100, 7);
        a.mr.write(0, &data);
        a.qp.post_send(&write(2, k1, t.addr(100), a.mr.sge(0, 100)))
            .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&t, 100, 100), data);
        a.qp.post_send(&read(3, k1, t.addr(100), a.mr.sge(4096, 100)))
            .unwrap();
        expect(&a.cq, 3, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 4096, 100), data);
        t.write(512, &40u64.to_le_bytes());
        a.qp.post_send(&fetch_add(4, k1, t.addr(512), 2, a.mr.sge(8192, 8)))
            .unwrap();
        expect(&a.cq, 4, WcStatus::Success);
        assert_eq!((read_u64(&a.mr, 8192), read_u64(&t, 512)), (40, 42));

        // Bound again, read-only, over the region's second half: the first key is dead,
        // and the new one neither writes nor adds, nor reaches past the window.
        let k2 =
            b.qp.post_bind_mw(5, &mw, &info(&t, 4096, 4096, ACCESS_REMOTE_READ), true)
                .unwrap();
        expect(&b.cq, 5, WcStatus::Success);
        a.qp.post_send(&read(6, k2, t.addr(4096), a.mr.sge(0, 4096)))
            .unwrap();
        expect(&a.cq, 6, WcStatus::Success);
        let rem = WcStatus::RemAccessErr;
        refused(a, b, read(7, k1, t.addr(100), a.mr.sge(0, 8)), rem);
        refused(a, b, write(8, k2, t.addr(4096), a.mr.sge(0, 8)), rem);
        refused(a, b, fetch_add(9, k2, t.addr(4096), 1, a.mr.sge(0, 8)), rem);
        refused(a, b, read(10, k2, t.addr(4096 - 8), a.mr.sge(0, 16)), rem);
        refused(a, b, read(11, k2, t.addr(8192 - 8), a.mr.sge(0, 16)), rem);
        assert_eq!(read_u64(&t, 512), 42);

        // The region is held while the window is bound to it.
        assert_eq!(status(t.dereg()), Status::Busy as u16);
        drop(mw);
        t.dereg().unwrap();
    });
}

#[test]
fn a_type_2_window_serves_the_qp_that_bound_it_until_the_peer_invalidates_it() {
    on_both_paths(158, |a, b| {
        let t = bindable(b, 4096);
        let mw = b.pd.alloc_mw(MW_TYPE_2).unwrap();
        let key = inc_rkey(mw.rkey());
        let bind = mw.bind_opcode(key, &info(&t, 0, 4096, RW));
        b.qp.post_send(&signaled(1, bind, vec![])).unwrap();
        assert_eq!(expect(&b.cq, 1, WcStatus::Success).opcode, WcOpcode::BindMw);
        mw.set_rkey(key);

        let data = pattern(256, 3);
        a.mr.write(0, &data);
        a.qp.post_send(&write(2, key, t.addr(0), a.mr.sge(0, 256)))
            .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&t, 0, 256), data);
        // Not through another QP of the PD.
        refused(
            a,
            b,
            read(3, key, t.addr(0), a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
        // Bound: a second bind fails (on a QP of its own, which it takes to ERR).
        let (_qa, qb) = fresh_qps(a, b);
        let again = mw.bind_opcode(inc_rkey(key), &info(&t, 0, 64, RW));
        qb.post_send(&signaled(4, again, vec![])).unwrap();
        expect(&b.cq, 4, WcStatus::MwBindErr);

        // The peer's SEND with invalidate frees it: the receive says so.
        b.qp.post_recv(&RecvWr {
            wr_id: 5,
            sges: vec![b.mr.sge(0, 64)],
        })
        .unwrap();
        a.qp.post_send(&signaled(
            6,
            WrOpcode::SendWithInv(key),
            vec![a.mr.sge(0, 8)],
        ))
        .unwrap();
        expect(&a.cq, 6, WcStatus::Success);
        let got = expect(&b.cq, 5, WcStatus::Success);
        assert_eq!(
            (got.opcode, got.wc_flags, got.invalidated_rkey),
            (WcOpcode::Recv, wc_flags::WITH_INV, Some(key))
        );
        a.qp.post_send(&write(7, key, t.addr(0), a.mr.sge(0, 8)))
            .unwrap();
        expect(&a.cq, 7, WcStatus::RemAccessErr);
        assert_eq!(
            read_mr(&t, 0, 256),
            data,
            "nothing written after the invalidation"
        );
    });
}
