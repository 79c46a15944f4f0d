//! Pipelined memory registration (datasheet §14.9): registrations posted on a control queue
//! whose keys work at once, and the work that reaches a key before its registration ran,
//! which waits for it (or fails with it). Between two VFs of one rnicd over the host
//! vfio-user transport, and between two rnicd talking RoCEv2 over UDP.

use std::sync::Arc;
use std::time::Duration;

use rnic_abi::ctrlq::{ctrl_op, CtrlWqe, CTRLQ_CQE_QPN_BIT};
use rnic_abi::regs;
use rnic_abi::verbs::PageList;
use rnic_driver::transport::DmaBuffer;
use rnic_driver::verbs::{
    Cq, CtrlQueue, Qp, Sge, WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE,
};
use rnic_tests::feature_checks::{expect, write_to_mr};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{
    buffer_bytes, connect_qps, init_qp, pattern, signaled, PairOptions, Side,
};

/// A control queue of `a`'s PD with a CQ of its own.
fn ctrl_queue(a: &Side) -> (CtrlQueue, Cq) {
    assert!(a.ctx.attr().caps & regs::CAP_PIPELINED_REG != 0);
    assert!(a.ctx.attr().abi_minor >= 4);
    let cq = a.ctx.create_cq(16).expect("control CQ");
    let ctrl = a.pd.create_ctrl_queue(8, &cq).expect("control queue");
    (ctrl, cq)
}

/// A buffer of `len` bytes on `a` holding `data`.
fn dma_buffer(a: &Side, data: &[u8]) -> Arc<DmaBuffer> {
    let buf = a
        .ctx
        .device()
        .transport()
        .alloc_dma(data.len())
        .expect("buffer");
    buf.write(0, data);
    Arc::new(buf)
}

/// Checks the registration completion on `cq`: `wr_id`, `status`, the queue and the key.
#[track_caller]
fn expect_reg(cq: &Cq, ctrl: &CtrlQueue, wr_id: u64, key: u32, status: WcStatus) {
    let wc = expect(cq, wr_id, status);
    assert_eq!(wc.opcode, WcOpcode::RegMr);
    assert_eq!(wc.qp_num, CTRLQ_CQE_QPN_BIT | ctrl.ctrlqn());
    assert_eq!(wc.reg_key, Some(key), "the completion names the key");
}

#[test]
fn a_write_posted_right_behind_its_registration_carries_the_right_data() {
    on_both_paths(120, |a, b| {
        let (ctrl, ctrl_cq) = ctrl_queue(a);
        let data = pattern(3000, 7);
        for round in 0..4u64 {
            let buf = dma_buffer(a, &data);
            let mr = ctrl
                .post_reg_mr(buf, 0, data.len(), ACCESS_LOCAL_WRITE, 100 + round)
                .expect("post_reg_mr returns at once");
            a.qp.post_send(&write_to_mr(round, b, mr.sge(0, data.len())))
                .expect("post the WRITE right behind");
            expect(&a.cq, round, WcStatus::Success);
            expect_reg(&ctrl_cq, &ctrl, 100 + round, mr.lkey(), WcStatus::Success);
            assert!(buffer_bytes(&b.mr)[b.mr.offset()..][..data.len()] == data[..]);
        }
    });
}

/// Posts WRITE 1 of `data`, from a buffer of `a` whose key is pending (reserved, not yet
/// registered), to `b`'s MR; returns the buffer and the key.
fn write_with_pending_key(
    a: &Side,
    b: &Side,
    ctrl: &CtrlQueue,
    data: &[u8],
) -> (Arc<DmaBuffer>, u32) {
    let buf = dma_buffer(a, data);
    let key = ctrl.reserve_key().expect("a pending key");
    let sge = Sge {
        addr: buf.device_addr(0),
        length: data.len() as u32,
        lkey: key,
    };
    a.qp.post_send(&write_to_mr(1, b, sge)).expect("post");
    (buf, key)
}

#[test]
fn a_write_posted_before_its_registration_waits_for_it() {
    on_both_paths(122, |a, b| {
        let (ctrl, ctrl_cq) = ctrl_queue(a);
        let data = pattern(5000, 3);
        let (buf, key) = write_with_pending_key(a, b, &ctrl, &data);
        std::thread::sleep(Duration::from_millis(300));
        assert!(a.cq.poll(1).is_empty(), "the WRITE waits for its key");
        assert!(
            buffer_bytes(&b.mr).iter().all(|&x| x == 0),
            "nothing was written yet"
        );
        let pages: Vec<u64> = buf.pages().to_vec();
        let list = page_list(a, &pages);
        ctrl.post_raw(&reg_wqe(9, key, &buf, data.len(), list.1))
            .expect("post the registration");
        expect_reg(&ctrl_cq, &ctrl, 9, key, WcStatus::Success);
        expect(&a.cq, 1, WcStatus::Success);
        assert!(buffer_bytes(&b.mr)[b.mr.offset()..][..data.len()] == data[..]);
        release(a, key);
    });
}

/// A control WQE registering `len` bytes of `buf` (whose pages `pages` names) under `key`
/// for local write.
fn reg_wqe(wr_id: u64, key: u32, buf: &DmaBuffer, len: usize, pages: PageList) -> CtrlWqe {
    reg_wqe_for(ACCESS_LOCAL_WRITE, wr_id, key, buf, len, pages)
}

/// [`reg_wqe`] with `access`.
fn reg_wqe_for(
    access: u32,
    wr_id: u64,
    key: u32,
    buf: &DmaBuffer,
    len: usize,
    pages: PageList,
) -> CtrlWqe {
    CtrlWqe {
        wr_id,
        opcode: ctrl_op::REG_MR,
        key,
        access,
        iova: buf.device_addr(0),
        length: len as u64,
        pages,
        ..CtrlWqe::default()
    }
}

/// A page-list array for `pages` in `a`'s DMA memory (kept alive by the buffer returned).
fn page_list(a: &Side, pages: &[u64]) -> (DmaBuffer, PageList) {
    let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
    let array = a
        .ctx
        .device()
        .transport()
        .alloc_dma(bytes.len())
        .expect("page list");
    array.write(0, &bytes);
    let addr = array.device_addr(0);
    (array, PageList::flat(addr, pages.len() as u32))
}

/// Releases a reserved key (DEREG_MR).
fn release(a: &Side, key: u32) {
    let req = rnic_abi::verbs::ObjectReq {
        handle: key,
        reserved: 0,
    };
    a.ctx
        .device()
        .command(
            rnic_abi::cmd::Opcode::DeregMr,
            zerocopy::IntoBytes::as_bytes(&req),
            0,
        )
        .expect("DEREG_MR releases the key");
}

fn fresh_qps(a: &Side, b: &Side) -> (Qp, Qp) {
    let o = PairOptions::default();
    let qa = init_qp(a, &a.cq, &o, ACCESS_REMOTE_WRITE);
    let qb = init_qp(b, &b.cq, &o, ACCESS_REMOTE_WRITE);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x300, 0x400);
    (qa, qb)
}

#[test]
fn a_failed_registration_fails_the_waiting_write_and_nothing_else() {
    on_both_paths(124, |a, b| {
        let (ctrl, ctrl_cq) = ctrl_queue(a);
        let (other_a, _other_b) = fresh_qps(a, b);
        let data = pattern(2000, 5);
        let (buf, key) = write_with_pending_key(a, b, &ctrl, &data);
        // A page list the device cannot reach: the registration fails.
        let unreachable = PageList::flat(0x7fff_0000_0000, 1);
        ctrl.post_raw(&reg_wqe(7, key, &buf, data.len(), unreachable))
            .expect("post the registration");
        expect_reg(&ctrl_cq, &ctrl, 7, key, WcStatus::LocProtErr);
        expect(&a.cq, 1, WcStatus::LocProtErr);
        assert!(
            buffer_bytes(&b.mr).iter().all(|&x| x == 0),
            "the failed WRITE wrote nothing"
        );
        // Another QP, and a registration that works, go on as before.
        let mr = ctrl
            .post_reg_mr(buf.clone(), 0, data.len(), ACCESS_LOCAL_WRITE, 8)
            .expect("post_reg_mr");
        other_a
            .post_send(&write_to_mr(2, b, mr.sge(0, data.len())))
            .expect("post on the other QP");
        expect(&a.cq, 2, WcStatus::Success);
        expect_reg(&ctrl_cq, &ctrl, 8, mr.lkey(), WcStatus::Success);
        assert!(buffer_bytes(&b.mr)[b.mr.offset()..][..data.len()] == data[..]);
        release(a, key);
    });
}

#[test]
fn a_remote_write_to_a_pending_rkey_is_answered_rnr_until_the_registration_ran() {
    on_both_paths(126, |a, b| {
        let (ctrl, ctrl_cq) = ctrl_queue(b);
        let len = 6000;
        let target = dma_buffer(b, &vec![0u8; len]);
        let key = ctrl.reserve_key().expect("a pending key on the target");
        let data = pattern(len, 11);
        let wr = signaled(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: target.device_addr(0),
                rkey: key,
            },
            vec![a.mr.sge(0, len)],
        );
        a.mr.write(0, &data);
        a.qp.post_send(&wr).expect("post");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            a.cq.poll(1).is_empty(),
            "the WRITE waits (RNR) for the rkey"
        );
        let mut now = vec![0u8; len];
        target.read(0, &mut now);
        assert!(now.iter().all(|&x| x == 0), "nothing was written yet");
        let list = page_list(b, target.pages());
        let wqe = reg_wqe_for(
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
            3,
            key,
            &target,
            len,
            list.1,
        );
        ctrl.post_raw(&wqe).expect("post the registration");
        expect_reg(&ctrl_cq, &ctrl, 3, key, WcStatus::Success);
        expect(&a.cq, 1, WcStatus::Success);
        target.read(0, &mut now);
        assert!(
            now == data,
            "the WRITE arrived once the rkey was registered"
        );
        release(b, key);
    });
}
