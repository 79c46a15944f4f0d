//! The kernel's memory keys and the GSI QP (ABI 1.8, `CAP_FAST_REG`, `CAP_GSI`, datasheet
//! §16) through the Rust driver over vfio-user, against a real rnicd: the DMA key as lkey
//! and rkey; a fast-registration MR registered by REG_MR work requests, used by the peer,
//! invalidated locally and by SEND with invalidate and registered again; every REG_MR
//! WQE that must fail completes once with `LOC_QP_OP_ERR`; memory outside what the VMM
//! mapped fails the access, never rnicd; and two functions' GSI QPs exchange datagrams on
//! QP 1 with the GSI Q_Key; a QP whose PD has kernel keys does not migrate.

use rnic_abi::cmd::Status;
use rnic_abi::regs::{CAP_FAST_REG, CAP_GSI};
use rnic_abi::ud::GSI_QKEY;
use rnic_abi::verbs::wc_flags;
use rnic_driver::verbs::{
    FastReg, FastRegMr, Qp, RecvWr, UdAddress, WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, GRH_LEN, GSI_QPN, QKEY_USE_OWN,
};
use rnic_tests::feature_checks::{expect, fresh_qps, read, refused, status, write, QUIET};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{pair, pattern, poll_n, read_mr, signaled, PairOptions, Side};
use rnic_tests::Rnicd;

const LW: u32 = ACCESS_LOCAL_WRITE;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
/// A device address no function of these tests has mapped.
const UNMAPPED: u64 = 0xdead_0000_0000;

/// Offset in `b.mr` of page `i` of its buffer (the MR starts at the buffer's start).
fn page(i: usize) -> usize {
    i * 4096
}

/// Writes `pages` (device addresses) as a page list at `offset` of `side`'s MR; returns
/// the list's device address (the MR's iova is its device address).
fn page_list(side: &Side, offset: usize, pages: &[u64]) -> u64 {
    let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
    side.mr.write(offset, &bytes);
    side.mr.addr(offset)
}

/// The device address of page `i` of `side`'s MR.
fn page_addr(side: &Side, i: usize) -> u64 {
    side.mr.buffer().pages()[i]
}

/// A registration of 4096 bytes at iova `0x1_0000_0800` on pages 10 and 20 of `b`'s
/// MR (so its bytes are the second half of page 10 and the first half of page 20).
fn two_pages(b: &Side) -> FastReg {
    FastReg {
        iova: 0x1_0000_0800,
        length: 4096,
        access: ALL,
        page_list: page_list(b, 0, &[page_addr(b, 10), page_addr(b, 20)]),
        page_count: 2,
    }
}

/// Posts a REG_MR of `fr` with `reg` on `qp` and expects it to succeed; returns the key.
fn register(b: &Side, qp: &Qp, wr_id: u64, fr: &FastRegMr, reg: &FastReg) -> u32 {
    let key = qp.post_reg_mr(wr_id, fr, reg, true).unwrap();
    let wc = expect(&b.cq, wr_id, WcStatus::Success);
    assert_eq!(
        (wc.opcode, wc.qp_num, wc.reg_key),
        (WcOpcode::RegMr, qp.qp_num(), None)
    );
    key
}

#[test]
fn the_dma_key_is_an_lkey_for_every_operation_and_an_rkey_when_granted() {
    on_both_paths(160, |a, b| {
        assert_eq!(a.ctx.attr().caps & CAP_FAST_REG, CAP_FAST_REG);
        let dma_a = a.pd.reg_dma_mr(LW).unwrap();
        let dma_b = b.pd.reg_dma_mr(ALL | ACCESS_REMOTE_ATOMIC).unwrap();
        // Through the DMA key, an address is its device address: an MR's iova here.
        let data = pattern(3000, 11);
        a.mr.write(0, &data);
        a.qp.post_send(&write(
            1,
            b.mr.rkey(),
            b.mr.addr(0),
            dma_a.sge(a.mr.addr(0), 3000),
        ))
        .unwrap();
        expect(&a.cq, 1, WcStatus::Success);
        assert_eq!(read_mr(&b.mr, 0, 3000), data);
        a.qp.post_send(&read(
            2,
            b.mr.rkey(),
            b.mr.addr(0),
            dma_a.sge(a.mr.addr(8192), 3000),
        ))
        .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 8192, 3000), data);
        b.qp.post_recv(&RecvWr {
            wr_id: 3,
            sges: vec![dma_b.sge(b.mr.addr(16384), 3000)],
        })
        .unwrap();
        a.qp.post_send(&signaled(
            4,
            WrOpcode::Send,
            vec![dma_a.sge(a.mr.addr(0), 3000)],
        ))
        .unwrap();
        expect(&a.cq, 4, WcStatus::Success);
        assert_eq!(expect(&b.cq, 3, WcStatus::Success).byte_len, 3000);
        assert_eq!(read_mr(&b.mr, 16384, 3000), data);

        // As an rkey, where granted: any of b's memory by its device address.
        let more = pattern(500, 12);
        a.mr.write(4096, &more);
        let at = b.mr.addr(65536 + 7);
        a.qp.post_send(&write(5, dma_b.rkey(), at, a.mr.sge(4096, 500)))
            .unwrap();
        expect(&a.cq, 5, WcStatus::Success);
        assert_eq!(read_mr(&b.mr, 65536 + 7, 500), more);
        a.qp.post_send(&read(6, dma_b.rkey(), at, a.mr.sge(12288, 500)))
            .unwrap();
        expect(&a.cq, 6, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 12288, 500), more);
        // a's key has no remote rights.
        let to_a = write(7, dma_a.rkey(), a.mr.addr(0), b.mr.sge(0, 8));
        refused(b, a, to_a, WcStatus::RemAccessErr);
        assert_eq!(read_mr(&a.mr, 0, 3000), data);

        // Local write is required; remote write and atomics need it, as for REG_MR.
        let bad = Status::BadParam as u16;
        assert_eq!(status(a.pd.reg_dma_mr(0)), bad);
        assert_eq!(status(a.pd.reg_dma_mr(ACCESS_REMOTE_READ)), bad);
        assert_eq!(status(a.pd.reg_dma_mr(ACCESS_REMOTE_WRITE)), bad);
        // Nothing invalidates it; it still works after a LOCAL_INV failed.
        let inv = signaled(9, WrOpcode::LocalInv(dma_b.lkey()), vec![]);
        refused(b, a, inv, WcStatus::LocQpOpErr);
        a.qp.post_send(&write(10, dma_b.rkey(), at, a.mr.sge(4096, 8)))
            .unwrap();
        expect(&a.cq, 10, WcStatus::Success);
        // DEREG_MR destroys it: the key is refused from then on.
        let old = dma_b.rkey();
        drop(dma_b);
        let late = write(8, old, b.mr.addr(0), a.mr.sge(0, 8));
        refused(a, b, late, WcStatus::RemAccessErr);
    });
}

#[test]
fn a_fast_reg_mr_is_registered_invalidated_and_registered_again_by_work_requests() {
    on_both_paths(162, |a, b| {
        let fr = b.pd.alloc_fast_reg_mr(4).unwrap();
        assert_eq!(fr.key() & 0xff, 0, "allocated with tag 0: {fr:?}");
        let reg = two_pages(b);
        let k1 = register(b, &b.qp, 1, &fr, &reg);
        assert_eq!(k1, fr.key());
        assert_eq!(k1 & 0xff, 1);

        // The peer writes and reads through the new key; the bytes land on the pages.
        let data = pattern(4096, 21);
        a.mr.write(0, &data);
        a.qp.post_send(&write(2, k1, reg.iova, a.mr.sge(0, 4096)))
            .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&b.mr, page(10) + 2048, 2048), data[..2048]);
        assert_eq!(read_mr(&b.mr, page(20), 2048), data[2048..]);
        a.qp.post_send(&read(3, k1, reg.iova + 100, a.mr.sge(8192, 3000)))
            .unwrap();
        expect(&a.cq, 3, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 8192, 3000), data[100..3100]);
        // Not a byte beyond the registration.
        let past = write(4, k1, reg.iova + 4096 - 8, a.mr.sge(0, 16));
        refused(a, b, past, WcStatus::RemAccessErr);
        let before = write(5, k1, reg.iova - 1, a.mr.sge(0, 2));
        refused(a, b, before, WcStatus::RemAccessErr);

        // LOCAL_INV frees it: the key is refused, and a registration with a new tag
        // makes it valid again (the old key stays refused).
        b.qp.post_send(&signaled(6, WrOpcode::LocalInv(k1), vec![]))
            .unwrap();
        assert_eq!(
            expect(&b.cq, 6, WcStatus::Success).opcode,
            WcOpcode::LocalInv
        );
        refused(
            a,
            b,
            write(7, k1, reg.iova, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
        let k2 = register(b, &b.qp, 8, &fr, &reg);
        assert_eq!(k2, k1 + 1);
        refused(
            a,
            b,
            write(9, k1, reg.iova, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
        a.qp.post_send(&write(10, k2, reg.iova, a.mr.sge(0, 8)))
            .unwrap();
        expect(&a.cq, 10, WcStatus::Success);

        // The peer's SEND with invalidate frees it too, and the receive says so.
        b.qp.post_recv(&RecvWr {
            wr_id: 11,
            sges: vec![b.mr.sge(page(30), 64)],
        })
        .unwrap();
        a.qp.post_send(&signaled(
            12,
            WrOpcode::SendWithInv(k2),
            vec![a.mr.sge(0, 8)],
        ))
        .unwrap();
        expect(&a.cq, 12, WcStatus::Success);
        let got = expect(&b.cq, 11, WcStatus::Success);
        assert_eq!(
            (got.wc_flags, got.invalidated_rkey),
            (wc_flags::WITH_INV, Some(k2))
        );
        refused(
            a,
            b,
            write(13, k2, reg.iova, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
        // Free again: registered anew, on one page now.
        let one = FastReg {
            length: 100,
            page_count: 1,
            ..reg
        };
        let k3 = register(b, &b.qp, 14, &fr, &one);
        a.qp.post_send(&write(15, k3, one.iova, a.mr.sge(0, 100)))
            .unwrap();
        expect(&a.cq, 15, WcStatus::Success);
        refused(
            a,
            b,
            write(16, k3, one.iova + 96, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );

        // As an lkey of b's own work requests.
        b.qp.post_send(&write(
            17,
            a.mr.rkey(),
            a.mr.addr(65536),
            signaled_sge(k3, one.iova, 100),
        ))
        .unwrap();
        expect(&b.cq, 17, WcStatus::Success);
        assert_eq!(
            read_mr(&a.mr, 65536, 100),
            read_mr(&b.mr, page(10) + 2048, 100)
        );

        // DEREG_MR destroys it.
        drop(fr);
        refused(
            a,
            b,
            write(18, k3, one.iova, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
    });
}

/// An SGE of `len` bytes at `addr` through `lkey`.
fn signaled_sge(lkey: u32, addr: u64, len: u32) -> rnic_abi::verbs::Sge {
    rnic_abi::verbs::Sge {
        addr,
        length: len,
        lkey,
    }
}

/// Posts `op` (a REG_MR that must fail) and a SEND behind it on a fresh QP of `b`:
/// the REG_MR completes with `LOC_QP_OP_ERR`, the SEND is flushed without going out
/// (the peer's receive stays posted), and nothing more completes.
fn fails(a: &Side, b: &Side, op: WrOpcode, what: &str) {
    let (qa, qb) = fresh_qps(a, b);
    qa.post_recv(&RecvWr {
        wr_id: 3,
        sges: vec![a.mr.sge(0, 64)],
    })
    .unwrap();
    qb.post_send(&signaled(1, op, vec![])).unwrap();
    qb.post_send(&signaled(2, WrOpcode::Send, vec![b.mr.sge(0, 8)]))
        .unwrap();
    let wc = expect(&b.cq, 1, WcStatus::LocQpOpErr);
    assert_eq!(wc.opcode, WcOpcode::RegMr, "{what}");
    expect(&b.cq, 2, WcStatus::WrFlushErr);
    assert!(
        poll_n(&b.cq, 1, QUIET).is_empty(),
        "{what}: one completion per WR"
    );
    assert!(
        poll_n(&a.cq, 1, QUIET).is_empty(),
        "{what}: the SEND behind the failed REG_MR went out"
    );
}

#[test]
fn every_reg_mr_that_must_fail_completes_once_with_loc_qp_op_err() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let fr = b.pd.alloc_fast_reg_mr(2).unwrap();
    let reg = two_pages(&b);
    let key = (fr.key() & !0xff) | 0x42;
    let op = |reg: FastReg| fr.reg_opcode(key, &reg);
    fails(
        &a,
        &b,
        op(FastReg {
            page_count: 3,
            ..reg
        }),
        "more pages than max_pages",
    );
    fails(
        &a,
        &b,
        op(FastReg {
            page_count: 0,
            ..reg
        }),
        "no pages",
    );
    fails(
        &a,
        &b,
        op(FastReg {
            length: 4096 + 2049,
            ..reg
        }),
        "beyond the pages",
    );
    fails(
        &a,
        &b,
        op(FastReg {
            access: ACCESS_REMOTE_WRITE,
            ..reg
        }),
        "remote write alone",
    );
    fails(
        &a,
        &b,
        op(FastReg {
            access: 1 << 24,
            ..reg
        }),
        "unknown access",
    );
    let misaligned = page_list(&b, 64, &[page_addr(&b, 10) + 8, page_addr(&b, 20)]);
    fails(
        &a,
        &b,
        op(FastReg {
            page_list: misaligned,
            ..reg
        }),
        "misaligned page",
    );
    fails(
        &a,
        &b,
        op(FastReg {
            page_list: UNMAPPED,
            ..reg
        }),
        "unmapped page list",
    );
    let ordinary = WrOpcode::RegMr {
        key: b.mr.lkey(),
        iova: reg.iova,
        length: reg.length,
        access: reg.access,
        page_list: reg.page_list,
        page_count: reg.page_count,
    };
    fails(&a, &b, ordinary, "an ordinary MR");
    let other_pd = b.ctx.alloc_pd().unwrap();
    let foreign = other_pd.alloc_fast_reg_mr(2).unwrap();
    fails(
        &a,
        &b,
        foreign.reg_opcode(foreign.key() | 1, &reg),
        "another PD's MR",
    );
    // Valid: a second registration must wait for an invalidation.
    let k = register(&b, &b.qp, 3, &fr, &reg);
    fails(&a, &b, fr.reg_opcode(k + 1, &reg), "an MR that is not free");
    // Nothing failed changed it: the first registration's key still works.
    a.qp.post_send(&write(4, k, reg.iova, a.mr.sge(0, 8)))
        .unwrap();
    expect(&a.cq, 4, WcStatus::Success);
    // A UD QP takes no REG_MR.
    let ud =
        b.pd.create_ud_qp(&b.cq, &b.cq, PairOptions::default().caps)
            .unwrap();
    ud.ud_ready(7, 0).unwrap();
    let on_ud = ud.post_send(&signaled(5, fr.reg_opcode(k + 2, &reg), vec![]));
    if on_ud.is_ok() {
        expect(&b.cq, 5, WcStatus::LocQpOpErr);
        assert!(poll_n(&b.cq, 1, QUIET).is_empty());
    }
    // The commands' own checks.
    let bad = Status::BadParam as u16;
    assert_eq!(status(b.pd.alloc_fast_reg_mr(0)), bad);
    assert_eq!(status(b.pd.alloc_fast_reg_mr(513)), bad);
    assert!(b.pd.alloc_fast_reg_mr(512).is_ok());
}

#[test]
fn memory_outside_the_mapping_fails_the_access_and_nothing_else() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    // Pages nobody mapped register (the device reads only the list), and every access
    // through them fails: the responder's DMA fails (a remote operational error, as for
    // a region's page the VMM unmapped), the requester's is a local protection error.
    let fr = b.pd.alloc_fast_reg_mr(2).unwrap();
    let mapped = two_pages(&b);
    let reg = FastReg {
        page_list: page_list(&b, 0, &[UNMAPPED, UNMAPPED + 4096]),
        ..mapped
    };
    let k = register(&b, &b.qp, 1, &fr, &reg);
    refused(
        &a,
        &b,
        write(2, k, reg.iova, a.mr.sge(0, 64)),
        WcStatus::RemOpErr,
    );
    refused(
        &a,
        &b,
        read(3, k, reg.iova, a.mr.sge(0, 64)),
        WcStatus::RemOpErr,
    );
    let (_qa, qb) = fresh_qps(&a, &b);
    qb.post_send(&signaled(
        4,
        WrOpcode::Send,
        vec![signaled_sge(k, reg.iova, 64)],
    ))
    .unwrap();
    expect(&b.cq, 4, WcStatus::LocProtErr);

    // The DMA key reaches what is mapped and nothing else, either way (a range that
    // wraps around is refused as out of range: a remote access error).
    let dma_a = a.pd.reg_dma_mr(LW).unwrap();
    let dma_b = b.pd.reg_dma_mr(ALL).unwrap();
    let (qa, _qb) = fresh_qps(&a, &b);
    qa.post_send(&signaled(5, WrOpcode::Send, vec![dma_a.sge(UNMAPPED, 64)]))
        .unwrap();
    expect(&a.cq, 5, WcStatus::LocProtErr);
    refused(
        &a,
        &b,
        write(6, dma_b.rkey(), UNMAPPED, a.mr.sge(0, 64)),
        WcStatus::RemOpErr,
    );
    refused(
        &a,
        &b,
        read(7, dma_b.rkey(), u64::MAX - 8, a.mr.sge(0, 64)),
        WcStatus::RemAccessErr,
    );
    // A READ whose landing place is unmapped fails when its response is placed.
    refused(
        &a,
        &b,
        read(8, b.mr.rkey(), b.mr.addr(0), dma_a.sge(UNMAPPED, 64)),
        WcStatus::LocAccessErr,
    );

    // rnicd is fine: the original QPs still work.
    a.qp.post_send(&write(
        9,
        dma_b.rkey(),
        b.mr.addr(0),
        dma_a.sge(a.mr.addr(0), 64),
    ))
    .unwrap();
    expect(&a.cq, 9, WcStatus::Success);
}

/// Posts a receive of up to 256 bytes at `offset` of `side`'s MR on `qp`.
fn post_gsi_recv(side: &Side, qp: &Qp, wr_id: u64, offset: usize) {
    qp.post_recv(&RecvWr {
        wr_id,
        sges: vec![side.mr.sge(offset, GRH_LEN as usize + 256)],
    })
    .unwrap();
}

/// Sends `len` bytes at `offset` of `from`'s MR on GSI QP `qp` to QP 1 of `to` with
/// `qkey`.
fn send_gsi(from: &Side, qp: &Qp, wr_id: u64, to: &Side, qkey: u32, offset: usize) {
    let addr = UdAddress {
        dest_qpn: GSI_QPN,
        qkey,
        dgid: to.gid,
        ..UdAddress::default()
    };
    qp.post_ud_send(
        &signaled(wr_id, WrOpcode::Send, vec![from.mr.sge(offset, 256)]),
        &addr,
    )
    .unwrap();
    expect(&from.cq, wr_id, WcStatus::Success);
}

#[test]
fn two_functions_gsi_qps_exchange_datagrams_on_qp_1_with_the_gsi_qkey() {
    on_both_paths(164, |a, b| {
        assert_eq!(a.ctx.attr().caps & CAP_GSI, CAP_GSI);
        let caps = PairOptions::default().caps;
        let mut ga = a.pd.create_gsi_qp(&a.cq, &a.cq, caps).unwrap();
        let gb = b.pd.create_gsi_qp(&b.cq, &b.cq, caps).unwrap();
        assert_eq!((ga.qp_num(), gb.qp_num()), (GSI_QPN, GSI_QPN));
        let busy = Status::Busy as u16;
        assert_eq!(status(a.pd.create_gsi_qp(&a.cq, &a.cq, caps)), busy);
        ga.gsi_ready(0).unwrap();
        gb.gsi_ready(0x40).unwrap();

        // a to b, and b's answer back.
        for (from, qf, to, qt, seed) in [(a, &ga, b, &gb, 1u64), (b, &gb, a, &ga, 2)] {
            let data = pattern(256, 30 + seed);
            from.mr.write(0, &data);
            post_gsi_recv(to, qt, seed, 8192);
            send_gsi(from, qf, 10 + seed, to, GSI_QKEY, 0);
            let got = expect(&to.cq, seed, WcStatus::Success);
            assert_eq!(
                (got.opcode, got.qp_num, got.src_qp, got.byte_len),
                (WcOpcode::Recv, GSI_QPN, GSI_QPN, GRH_LEN + 256)
            );
            assert_eq!(got.wc_flags, wc_flags::GRH);
            assert_eq!(read_mr(&to.mr, 8192 + GRH_LEN as usize, 256), data);
        }
        // A wrong Q_Key is dropped; the receive waits for the right one. (GSI_QKEY has
        // bit 31 set: a send that names a Q_Key with it sends the QP's own, so the wrong
        // one has it clear.)
        post_gsi_recv(b, &gb, 3, 8192);
        send_gsi(a, &ga, 13, b, GSI_QKEY & !QKEY_USE_OWN, 0);
        assert!(
            poll_n(&b.cq, 1, QUIET).is_empty(),
            "a wrong Q_Key was taken"
        );
        send_gsi(a, &ga, 14, b, GSI_QKEY, 0);
        expect(&b.cq, 3, WcStatus::Success);
        // An ordinary UD QP with the GSI Q_Key reaches QP 1 too, named as the source.
        let ud = a.pd.create_ud_qp(&a.cq, &a.cq, caps).unwrap();
        ud.ud_ready(GSI_QKEY, 0).unwrap();
        post_gsi_recv(b, &gb, 4, 8192);
        send_gsi(a, &ud, 15, b, GSI_QKEY, 0);
        assert_eq!(expect(&b.cq, 4, WcStatus::Success).src_qp, ud.qp_num());

        // The GSI QP stays with its function.
        assert_eq!(
            status(ga.adopt(&a.ctx, None, None)),
            Status::BadParam as u16
        );
        // Destroyed, number 1 is free again.
        drop(ga);
        let again = a.pd.create_gsi_qp(&a.cq, &a.cq, caps).unwrap();
        assert_eq!(again.qp_num(), GSI_QPN);
    });
}

#[test]
fn a_qp_whose_pd_has_kernel_keys_stays_with_its_function() {
    use rnic_abi::migration::MigrateQpReq;
    use rnic_driver::transport::vfio_user::VfioUserTransport;
    use rnic_driver::Device;
    // To vf2, which has no QP of that number.
    let rnicd = Rnicd::start(3, &[]);
    let pf = Device::open(Box::new(
        VfioUserTransport::connect(&rnicd.socket("pf")).unwrap(),
    ))
    .unwrap();
    let (a, _b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let req = MigrateQpReq {
        from: 1,
        to: 3,
        qpn: a.qp.qp_num(),
        doorbell_page: rnic_driver::verbs::DOORBELL_PAGE,
        ..MigrateQpReq::default()
    };
    let refusal = |pf: &Device| match pf.migrate_qp(&req) {
        Err(rnic_driver::Error::Command { status, .. }) => status,
        other => panic!("MIGRATE_QP: {other:?}"),
    };
    let dma = a.pd.reg_dma_mr(LW).unwrap();
    assert_eq!(refusal(&pf), Status::Busy as u16, "with a DMA key");
    drop(dma);
    let fr = a.pd.alloc_fast_reg_mr(1).unwrap();
    assert_eq!(refusal(&pf), Status::Busy as u16, "with a fast-reg MR");
    drop(fr);
    // Without them, the next check speaks: vf2 does not reach vf0's memory.
    assert_eq!(refusal(&pf), Status::DmaError as u16);
}
