//! PF administration through real vfio-user sockets: the admin queue, quotas and pools, VF
//! enable, link state, counters, VF reset, isolation between VFs, and `rnic-admin`.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rnic_abi::admin::{resource, Quota, SetQuotaReq, MEMBER_ENABLED, MEMBER_LINK_UP};
use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::regs;
use rnic_abi::verbs::{CreateQpReq, ModifyQpReq, ObjectReq, PageList, RegMrReq, QPT_RC};
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::transport::Transport;
use rnic_driver::verbs::{self, Context, Mr, QpCaps, SendWr, Sge, WcStatus, WrOpcode};
use rnic_driver::{Device, Error};
use rnic_tests::verbs_pair::{
    connect_qps, guarded_mr, init_qp, pair, poll_n, side, signaled, PairOptions, Side,
};
use rnic_tests::{bin, wait_for, Rnicd};
use zerocopy::IntoBytes;

const T: Duration = Duration::from_secs(10);

/// Every admin opcode.
const ADMIN_OPCODES: [Opcode; 10] = [
    Opcode::AdminQuery,
    Opcode::SetNumVfs,
    Opcode::QueryMember,
    Opcode::SetQuota,
    Opcode::SetAddress,
    Opcode::SetLink,
    Opcode::GetStats,
    Opcode::ResetVf,
    Opcode::MigrateQp,
    Opcode::SetSessions,
];

fn open(rnicd: &Rnicd, name: &str) -> Device {
    let t = VfioUserTransport::connect(&rnicd.socket(name)).expect("connect");
    Device::open(Box::new(t)).expect("open")
}

/// The status of a failed command.
#[track_caller]
fn status_of<T: std::fmt::Debug>(r: rnic_driver::Result<T>) -> Status {
    match r {
        Err(Error::Command { status, .. }) => Status::from_u16(status).expect("known status"),
        other => panic!("expected a command error, got {other:?}"),
    }
}

/// The completion status of `wr_id` on `side`'s CQ, which must come.
#[track_caller]
fn completion(side: &Side, wr_id: u64) -> WcStatus {
    let start = Instant::now();
    while start.elapsed() < T {
        for wc in poll_n(&side.cq, 1, Duration::from_millis(50)) {
            if wc.wr_id == wr_id {
                return wc.status.expect("known completion status");
            }
        }
    }
    panic!("no completion for wr {wr_id} within {T:?}");
}

fn all_members_usage(pf: &Device, members: u32) -> Vec<Quota> {
    (0..members)
        .map(|m| pf.query_member(m).expect("query member").usage)
        .collect()
}

/// Sums of the quotas of all members, field by field.
fn quota_sum(pf: &Device, members: u32) -> Quota {
    let mut sum = Quota::default();
    for m in 0..members {
        let q = pf.query_member(m).unwrap().quota;
        sum.qps += q.qps;
        sum.cqs += q.cqs;
        sum.mrs += q.mrs;
        sum.pds += q.pds;
        sum.mr_pages += q.mr_pages;
        sum.doorbell_pages += q.doorbell_pages;
        sum.dma_windows += q.dma_windows;
        sum.dma_pages += q.dma_pages;
    }
    sum
}

fn plus(a: Quota, b: Quota) -> Quota {
    Quota {
        qps: a.qps + b.qps,
        cqs: a.cqs + b.cqs,
        mrs: a.mrs + b.mrs,
        pds: a.pds + b.pds,
        mr_pages: a.mr_pages + b.mr_pages,
        doorbell_pages: a.doorbell_pages + b.doorbell_pages,
        dma_windows: a.dma_windows + b.dma_windows,
        dma_pages: a.dma_pages + b.dma_pages,
    }
}

/// `q` with only what the DMA mappings of its client hold, which no reset of the
/// function releases: what a function uses after a reset.
fn dma_only(q: Quota) -> Quota {
    Quota {
        dma_windows: q.dma_windows,
        dma_pages: q.dma_pages,
        ..Quota::default()
    }
}

fn pages(ctx: &Context, n: usize) -> Arc<rnic_driver::transport::DmaBuffer> {
    Arc::new(
        ctx.device()
            .transport()
            .alloc_dma(n * rnic_abi::PAGE_SIZE as usize)
            .expect("buffer"),
    )
}

fn reg(ctx: &Context, pd: &verbs::Pd, n: usize) -> rnic_driver::Result<Mr> {
    pd.reg_mr(
        pages(ctx, n),
        0,
        n * rnic_abi::PAGE_SIZE as usize,
        verbs::ACCESS_LOCAL_WRITE,
    )
}

#[test]
fn quotas_are_carved_from_the_pools_enforced_and_given_back() {
    let d = Rnicd::start(2, &[]);
    let pf = open(&d, "pf");
    let q = pf.admin_query().unwrap();
    assert_eq!((q.total_vfs, q.num_vfs), (2, 2));
    // By default the device is split evenly and nothing is left over.
    assert_eq!(q.unassigned, Quota::default());
    assert_eq!(quota_sum(&pf, 3), q.totals);
    let share = pf.query_member(1).unwrap().quota;
    assert_eq!(q.totals.qps, 3 * share.qps);

    let small = Quota {
        qps: 2,
        cqs: 2,
        mrs: 2,
        pds: 1,
        mr_pages: 8,
        doorbell_pages: 2,
        // Room for whatever the VF's client maps.
        dma_windows: share.dma_windows,
        dma_pages: share.dma_pages,
    };
    pf.set_quota(1, small).unwrap();
    let q = pf.admin_query().unwrap();
    assert_eq!(q.unassigned.qps, share.qps - 2);
    assert_eq!(q.unassigned.mr_pages, share.mr_pages - 8);
    assert_eq!(plus(quota_sum(&pf, 3), q.unassigned), q.totals);

    // The VF's limits are its quota.
    let ctx = Context::new(open(&d, "vf0")).unwrap();
    let l = ctx.query_device().unwrap().limits;
    assert_eq!(
        (l.max_qp, l.max_cq, l.max_mr, l.max_pd, l.doorbell_pages),
        (2, 2, 2, 1, 2)
    );
    assert_eq!(l.max_mr_pages, 8);

    // Each kind runs out at its quota, with NoResources.
    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(status_of(ctx.alloc_pd()), Status::NoResources);
    let cq1 = ctx.create_cq(16).unwrap();
    let _cq2 = ctx.create_cq(16).unwrap();
    assert_eq!(status_of(ctx.create_cq(16)), Status::NoResources);
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp1 = pd.create_qp(&cq1, &cq1, caps, false).unwrap();
    let _qp2 = pd.create_qp(&cq1, &cq1, caps, false).unwrap();
    assert_eq!(
        status_of(pd.create_qp(&cq1, &cq1, caps, false)),
        Status::NoResources
    );
    let mr1 = reg(&ctx, &pd, 4).unwrap();
    let _mr2 = reg(&ctx, &pd, 4).unwrap();
    assert_eq!(status_of(reg(&ctx, &pd, 1)), Status::NoResources);
    drop(mr1);
    // One MR is free again, but 4 + 5 pages exceed the 8 of the quota.
    assert_eq!(status_of(reg(&ctx, &pd, 5)), Status::NoResources);
    let _mr3 = reg(&ctx, &pd, 4).unwrap();
    let used = pf.query_member(1).unwrap().usage;
    assert_eq!(
        used,
        Quota {
            // The EQ and all queues have their doorbells in page 1.
            doorbell_pages: 1,
            // What the client mapped is its own affair.
            dma_windows: used.dma_windows,
            dma_pages: used.dma_pages,
            ..small
        }
    );

    // Quotas never exceed the totals, and never drop below usage.
    let free = pf.admin_query().unwrap().unassigned;
    let mut grab = pf.query_member(2).unwrap().quota;
    grab.qps += free.qps + 1;
    assert_eq!(status_of(pf.set_quota(2, grab)), Status::NoResources);
    grab.qps -= 1;
    pf.set_quota(2, grab).unwrap();
    assert_eq!(pf.admin_query().unwrap().unassigned.qps, 0);
    let below = Quota { qps: 1, ..small };
    assert_eq!(status_of(pf.set_quota(1, below)), Status::BadState);
    assert_eq!(pf.query_member(1).unwrap().quota, small);

    // Everything comes back when the objects go.
    drop(qp1);
    drop((_qp2, _mr2, _mr3, _cq2, cq1, pd));
    drop(ctx);
    wait_for(T, "vf0's usage to return to zero", || {
        pf.query_member(1).unwrap().usage == Quota::default()
    });
    let q = pf.admin_query().unwrap();
    assert_eq!(plus(quota_sum(&pf, 3), q.unassigned), q.totals);
}

#[test]
fn a_vf_reset_destroys_exactly_its_objects_and_leaks_nothing() {
    let d = Rnicd::start(2, &[]);
    let (a, b) = pair(&d, "vf0", "vf1", &PairOptions::default());
    let extra = guarded_mr(&a, &a.pd, 4096, 8192, verbs::ACCESS_ALL, 0);
    let pf = open(&d, "pf");
    let before = all_members_usage(&pf, 3);
    assert_ne!(before[1], Quota::default());
    assert_eq!(before[1].mrs, 2);
    let unassigned = pf.admin_query().unwrap().unassigned;

    pf.reset_vf(1).unwrap();
    let after = all_members_usage(&pf, 3);
    // Its client's DMA mappings survive the reset.
    assert_eq!(after[1], dma_only(before[1]), "vf0 leaked");
    assert_eq!(after[2], before[2], "vf1 was touched");
    assert_eq!(after[0], before[0]);
    assert_eq!(pf.admin_query().unwrap().unassigned, unassigned);
    // A function-level reset: the queues stopped, bus mastering is off.
    let status = a
        .ctx
        .device()
        .transport()
        .reg_read32(regs::DEVICE_STATUS)
        .unwrap();
    assert_eq!(status & regs::STATUS_CMDQ_RUNNING, 0);
    assert_ne!(status & regs::STATUS_READY, 0);
    // The other VF goes on.
    assert_eq!(b.qp.state().unwrap(), verbs::QpState::Rts);

    assert_eq!(status_of(pf.reset_vf(0)), Status::BadParam);
    assert_eq!(status_of(pf.reset_vf(3)), Status::NotFound);
    // vf0's objects are gone on the device, and its driver sees the reset (RESET_COUNT):
    // commands fail at once, so teardown does not wait for the stopped queue.
    let e = a.ctx.device().nop().expect_err("a command after the reset");
    assert!(matches!(e, Error::FunctionReset(_)), "{e}");
    let t0 = Instant::now();
    drop(extra);
    drop(a);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

#[test]
fn a_vf_issuing_admin_commands_gets_not_permitted() {
    let d = Rnicd::start(1, &[]);
    let vf = open(&d, "vf0");
    for op in ADMIN_OPCODES {
        // On its admin queue (which a VF has, as every function does) ...
        let c = vf.raw_admin_command(op as u16, &[0; 32], 64).unwrap();
        assert_eq!(
            Status::from_u16(c.header.status),
            Some(Status::NotPermitted),
            "{op:?}"
        );
        // ... and on its command queue.
        let c = vf.raw_command(op as u16, &[], 64).unwrap();
        assert_eq!(
            Status::from_u16(c.header.status),
            Some(Status::NotPermitted),
            "{op:?}"
        );
    }
    assert_eq!(status_of(vf.set_num_vfs(0)), Status::NotPermitted);
    // Nothing changed.
    let pf = open(&d, "pf");
    assert_eq!(pf.admin_query().unwrap().num_vfs, 1);
    // Even the PF runs admin commands on its admin queue only.
    let c = pf.raw_command(Opcode::AdminQuery as u16, &[], 64).unwrap();
    assert_eq!(
        Status::from_u16(c.header.status),
        Some(Status::NotPermitted)
    );
    let c = pf
        .raw_admin_command(Opcode::CreateQp as u16, &[], 64)
        .unwrap();
    assert_eq!(Status::from_u16(c.header.status), Some(Status::BadOpcode));
    assert!(pf.query_device().unwrap().caps & regs::CAP_ADMIN != 0);
    assert_eq!(vf.query_device().unwrap().caps & regs::CAP_ADMIN, 0);
}

#[test]
fn a_disabled_vf_reports_disabled_and_does_nothing() {
    let d = Rnicd::start(2, &[]);
    let o = PairOptions {
        timeout: 10,
        retry_cnt: 2,
        ..PairOptions::default()
    };
    let (a, b) = pair(&d, "vf0", "vf1", &o);
    let pf = open(&d, "pf");
    pf.set_num_vfs(1).unwrap();
    let q = pf.admin_query().unwrap();
    assert_eq!(q.num_vfs, 1);
    let m = pf.query_member(2).unwrap();
    assert_eq!(m.flags & MEMBER_ENABLED, 0);
    assert_eq!(
        m.usage,
        dma_only(m.usage),
        "disabling destroys what the VF held (its client's mappings stay)"
    );
    assert_ne!(pf.query_member(1).unwrap().flags & MEMBER_ENABLED, 0);

    let t = b.ctx.device().transport();
    assert_eq!(
        t.reg_read32(regs::DEVICE_STATUS).unwrap(),
        regs::STATUS_DISABLED
    );
    // It takes no set-up: its command queue does not start.
    t.reg_write32(regs::CMDQ_CONTROL, regs::CMDQ_ENABLE)
        .unwrap();
    assert_eq!(t.reg_read32(regs::CMDQ_CONTROL).unwrap(), 0);
    assert_eq!(
        t.reg_read32(regs::DEVICE_STATUS).unwrap(),
        regs::STATUS_DISABLED
    );
    // Its traffic is not processed: vf0's send is never acknowledged.
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    assert_eq!(completion(&a, 1), WcStatus::RetryExcErr);
    assert_eq!(pf.member_stats(2).unwrap().rx_packets, 0);

    // Enabled again, it starts from power-on.
    pf.set_num_vfs(2).unwrap();
    let status = t.reg_read32(regs::DEVICE_STATUS).unwrap();
    assert_ne!(status & regs::STATUS_READY, 0);
    assert_eq!(
        status & (regs::STATUS_DISABLED | regs::STATUS_CMDQ_RUNNING),
        0
    );
    // vf1's objects are gone on the device, and its driver sees the resets: teardown does
    // not wait for the stopped queue.
    let t0 = Instant::now();
    drop(b);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

#[test]
fn a_link_down_looks_like_a_pulled_cable_and_the_qp_recovers_when_it_comes_back() {
    let d = Rnicd::start(2, &[]);
    let o = PairOptions {
        timeout: 14,
        retry_cnt: 7,
        ..PairOptions::default()
    };
    let (a, b) = pair(&d, "vf0", "vf1", &o);
    let pf = open(&d, "pf");
    pf.set_link(2, false).unwrap();
    assert_eq!(pf.query_member(2).unwrap().flags & MEMBER_LINK_UP, 0);
    let status = b
        .ctx
        .device()
        .transport()
        .reg_read32(regs::DEVICE_STATUS)
        .unwrap();
    assert_ne!(status & regs::STATUS_LINK_DOWN, 0);

    b.qp.post_recv(&verbs::RecvWr {
        wr_id: 7,
        sges: vec![b.mr.sge(0, 64)],
    })
    .unwrap();
    a.mr.write(0, b"through the cable");
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 17)]))
        .unwrap();
    wait_for(T, "vf0 to retransmit into the pulled cable", || {
        pf.member_stats(1).unwrap().retransmits > 0
    });
    assert!(poll_n(&a.cq, 1, Duration::from_millis(10)).is_empty());
    let vf1 = pf.member_stats(2).unwrap();
    assert_eq!(vf1.rx_packets, 0);
    assert!(vf1.rx_errors > 0, "frames lost at the link: {vf1:?}");

    pf.set_link(2, true).unwrap();
    assert_eq!(completion(&a, 1), WcStatus::Success);
    assert_eq!(completion(&b, 7), WcStatus::Success);
    let mut got = [0u8; 17];
    b.mr.read(0, &mut got);
    assert_eq!(&got, b"through the cable");
}

#[test]
fn counters_count_packets_and_bytes_per_member() {
    let d = Rnicd::start(2, &[]);
    let (a, b) = pair(&d, "vf0", "vf1", &PairOptions::default());
    for i in 0..4 {
        b.qp.post_recv(&verbs::RecvWr {
            wr_id: i,
            sges: vec![b.mr.sge(0, 4096)],
        })
        .unwrap();
        a.qp.post_send(&signaled(i, WrOpcode::Send, vec![a.mr.sge(0, 1000)]))
            .unwrap();
        assert_eq!(completion(&a, i), WcStatus::Success);
    }
    let pf = open(&d, "pf");
    let s = pf.member_stats(1).unwrap();
    let r = pf.member_stats(2).unwrap();
    assert!(s.tx_packets >= 4 && r.rx_packets >= 4, "{s:?} {r:?}");
    // Each SEND carries 1000 bytes of payload plus headers.
    assert!(
        s.tx_bytes >= 4 * 1000 && r.rx_bytes >= s.tx_bytes,
        "{s:?} {r:?}"
    );
    assert!(r.tx_packets >= 1, "the responder acknowledged: {r:?}");
    assert_eq!(s.retransmits, 0);
    assert_eq!(pf.member_stats(0).unwrap().tx_packets, 0);
}

/// Between two functions of one rnicd the packets of a message travel as one train
/// (device/src/fabric/train.rs); the counters still count every packet, and the bytes the
/// packets would take on a wire.
#[test]
fn counters_count_each_packet_of_a_message_sent_as_a_train() {
    let d = Rnicd::start(2, &[]);
    let (a, b) = pair(&d, "vf0", "vf1", &PairOptions::default());
    let pattern: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    a.mr.write(0, &pattern);
    b.qp.post_recv(&verbs::RecvWr {
        wr_id: 1,
        sges: vec![b.mr.sge(0, 16384)],
    })
    .unwrap();
    a.qp.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 10_000)]))
        .unwrap();
    assert_eq!(completion(&a, 1), WcStatus::Success);
    let mut got = vec![0u8; 10_000];
    b.mr.read(0, &mut got);
    assert!(got == pattern, "the message arrived whole");
    let pf = open(&d, "pf");
    let s = pf.member_stats(1).unwrap();
    let r = pf.member_stats(2).unwrap();
    // 10 000 bytes at MTU 1024: 10 packets, each with Ethernet, IPv4, UDP, BTH and ICRC
    // (58 bytes); SEND FIRST, MIDDLE and LAST carry no other header.
    assert_eq!((s.tx_packets, r.rx_packets), (10, 10), "{s:?} {r:?}");
    assert_eq!(s.tx_bytes, 10 * 58 + 10_000, "{s:?}");
    assert_eq!(r.rx_bytes, s.tx_bytes, "{r:?}");
    assert_eq!((s.retransmits, r.rx_errors), (0, 0), "{s:?} {r:?}");
}

/// Objects of one VF, named from another, look exactly like objects that do not exist.
#[test]
fn another_vfs_objects_are_out_of_reach_of_every_command() {
    let d = Rnicd::start(2, &[]);
    let o = PairOptions::default();
    let a = side(&d.socket("vf0"), &o);
    let b = side(&d.socket("vf1"), &o);
    // Give vf1 numbers vf0 does not have.
    let b_pd = b.ctx.alloc_pd().unwrap();
    let b_cq = b.ctx.create_cq(16).unwrap();
    let b_qp = init_qp(&b, &b.cq, &o, 0);
    let b_mr = guarded_mr(&b, &b_pd, 4096, 4096, verbs::ACCESS_ALL, 0);
    assert_ne!(b_pd.pdn(), a.pd.pdn());
    assert_ne!(b_cq.cqn(), a.cq.cqn());
    assert_ne!(b_qp.qp_num(), a.qp.qp_num());
    assert_ne!(b_mr.lkey(), a.mr.lkey());
    const GHOST: u32 = 0x00ab_cd01;

    let dev = a.ctx.device();
    let run = |op: Opcode, body: &[u8]| {
        let c = dev.raw_command(op as u16, body, 64).unwrap();
        (Status::from_u16(c.header.status), c.header.syndrome)
    };
    let object = |handle| {
        ObjectReq {
            handle,
            reserved: 0,
        }
        .as_bytes()
        .to_vec()
    };
    let modify = |qpn| ModifyQpReq {
        qpn,
        ..ModifyQpReq::default()
    };
    let reg_mr = |pdn| RegMrReq {
        pdn,
        access: 0,
        iova: 0,
        length: 4096,
        pages: PageList::default(),
    };
    let create_qp = |pdn, cqn| CreateQpReq {
        pdn,
        send_cqn: cqn,
        recv_cqn: cqn,
        sq_entries: 16,
        rq_entries: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
        doorbell_page: 1,
        qp_type: QPT_RC,
        sq_sig_all: 0,
        srqn: 0,
        sq: PageList::default(),
        rq: PageList::default(),
    };
    type Case<'a> = (&'a str, Opcode, Box<dyn Fn(u32) -> Vec<u8> + 'a>, u32);
    let cases: Vec<Case> = vec![
        (
            "destroy qp",
            Opcode::DestroyQp,
            Box::new(object),
            b_qp.qp_num(),
        ),
        ("query qp", Opcode::QueryQp, Box::new(object), b_qp.qp_num()),
        (
            "modify qp",
            Opcode::ModifyQp,
            Box::new(|n| modify(n).as_bytes().to_vec()),
            b_qp.qp_num(),
        ),
        (
            "destroy cq",
            Opcode::DestroyCq,
            Box::new(object),
            b_cq.cqn(),
        ),
        (
            "dealloc pd",
            Opcode::DeallocPd,
            Box::new(object),
            b_pd.pdn(),
        ),
        ("dereg mr", Opcode::DeregMr, Box::new(object), b_mr.lkey()),
        (
            "reg mr in pd",
            Opcode::RegMr,
            Box::new(|n| reg_mr(n).as_bytes().to_vec()),
            b_pd.pdn(),
        ),
        (
            "create qp in pd",
            Opcode::CreateQp,
            Box::new(|n| create_qp(n, a.cq.cqn()).as_bytes().to_vec()),
            b_pd.pdn(),
        ),
        (
            "create qp on cq",
            Opcode::CreateQp,
            Box::new(|n| create_qp(a.pd.pdn(), n).as_bytes().to_vec()),
            b_cq.cqn(),
        ),
    ];
    for (what, op, body, theirs) in &cases {
        let got = run(*op, &body(*theirs));
        let ghost = run(*op, &body(GHOST));
        assert_eq!(got, (Some(Status::NotFound), *theirs), "{what}");
        assert_eq!(ghost, (Some(Status::NotFound), GHOST), "{what}");
    }
    // vf1's objects are all still there.
    assert_eq!(b_qp.state().unwrap(), verbs::QpState::Init);
    assert_eq!(b.qp.state().unwrap(), verbs::QpState::Init);
    let usage = open(&d, "pf").query_member(2).unwrap().usage;
    assert_eq!((usage.qps, usage.cqs, usage.pds, usage.mrs), (2, 2, 2, 2));
}

/// Keys of another VF's MRs in WQEs fail exactly as garbage keys do; an rkey works only
/// for a QP of its own PD.
#[test]
fn another_vfs_keys_fail_in_wqes_as_garbage_keys_do() {
    let d = Rnicd::start(3, &[]);
    let o = PairOptions::default();
    let (a, b) = pair(&d, "vf0", "vf1", &o);
    // vf2 holds MRs whose keys neither vf0 nor vf1 has.
    let c = side(&d.socket("vf2"), &o);
    let c_mrs: Vec<Mr> = (0..3)
        .map(|_| guarded_mr(&c, &c.pd, 4096, 4096, verbs::ACCESS_ALL, 0))
        .collect();
    let c_key = c_mrs[2].lkey();
    assert!(c_key != a.mr.lkey() && c_key != b.mr.lkey());
    let b_other_pd = b.ctx.alloc_pd().unwrap();
    let b_other = guarded_mr(&b, &b_other_pd, 4096, 4096, verbs::ACCESS_ALL, 0x5A);
    let garbage = a.mr.lkey() ^ 0x00ff_ff00;

    // A fresh connected QP pair for each try: every failure puts its QPs in ERR.
    let mut wr_id = 100;
    let mut attempt = |make: &dyn Fn(&Side) -> SendWr| -> WcStatus {
        let qa = init_qp(
            &a,
            &a.cq,
            &o,
            verbs::ACCESS_ALL & !verbs::ACCESS_LOCAL_WRITE,
        );
        let qb = init_qp(
            &b,
            &b.cq,
            &o,
            verbs::ACCESS_ALL & !verbs::ACCESS_LOCAL_WRITE,
        );
        connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x10, 0x20);
        wr_id += 1;
        let wr = SendWr { wr_id, ..make(&a) };
        qa.post_send(&wr).unwrap();
        let status = completion(&a, wr_id);
        // Flushes of the responder's side, if any, are not part of the check.
        let _ = poll_n(&b.cq, 8, Duration::from_millis(20));
        status
    };
    let (b_addr, b_rkey) = (b.mr.addr(0), b.mr.rkey());
    let with_lkey = |lkey: u32| {
        move |a: &Side| {
            signaled(
                0,
                WrOpcode::RdmaWrite {
                    remote_addr: b_addr,
                    rkey: b_rkey,
                },
                vec![Sge {
                    lkey,
                    ..a.mr.sge(0, 16)
                }],
            )
        }
    };
    let garbage_local = attempt(&with_lkey(garbage));
    assert_eq!(garbage_local, WcStatus::LocProtErr);
    assert_eq!(attempt(&with_lkey(c_key)), garbage_local);

    let write_with = |addr: u64, rkey: u32| {
        move |a: &Side| {
            signaled(
                0,
                WrOpcode::RdmaWrite {
                    remote_addr: addr,
                    rkey,
                },
                vec![a.mr.sge(0, 16)],
            )
        }
    };
    let garbage_remote = attempt(&write_with(b_addr, b_rkey ^ 0x00ff_ff00));
    assert_eq!(garbage_remote, WcStatus::RemAccessErr);
    assert_eq!(
        attempt(&write_with(c_mrs[2].addr(0), c_mrs[2].rkey())),
        garbage_remote
    );
    // vf1's own key, but of another PD than the QP's.
    assert_eq!(
        attempt(&write_with(b_other.addr(0), b_other.rkey())),
        WcStatus::RemAccessErr
    );
    let mut untouched = vec![0u8; 4096];
    b_other.read(0, &mut untouched);
    assert_eq!(untouched, vec![0x5A; 4096]);
    // The keys still work where they belong.
    assert_eq!(attempt(&write_with(b_addr, b_rkey)), WcStatus::Success);
}

#[test]
fn rnic_admin_prints_text_and_json() {
    let d = Rnicd::start(2, &[]);
    let text = d.admin(&["vfs"]);
    assert!(text.starts_with("VFs: 2 of 2 enabled\n"), "{text}");
    assert!(text.contains("vf1    enabled  up"), "{text}");

    d.admin(&["vfs", "enable", "1"]);
    d.admin(&["quota", "set", "vf0", "--qps", "10", "--mrs", "20"]);
    d.admin(&["link", "vf0", "down"]);
    d.admin(&["mac", "vf0", "02:00:00:00:aa:01", "--gid", "10.82.9.9"]);

    let json: serde_json::Value = serde_json::from_str(&d.admin(&["--json", "vfs"])).expect("JSON");
    assert_eq!(json["total_vfs"], 2);
    assert_eq!(json["num_vfs"], 1);
    let vf0 = &json["members"][1];
    assert_eq!(vf0["name"], "vf0");
    assert_eq!(vf0["enabled"], true);
    assert_eq!(vf0["link_up"], false);
    assert_eq!(vf0["mac"], "02:00:00:00:aa:01");
    assert_eq!(vf0["gid"], "::ffff:10.82.9.9");
    assert_eq!(vf0["quota"]["qps"], 10);
    assert_eq!(vf0["quota"]["mrs"], 20);
    assert_eq!(json["members"][2]["enabled"], false);
    let freed = json["unassigned"]["qps"].as_u64().unwrap();
    let share = json["members"][0]["quota"]["qps"].as_u64().unwrap();
    assert_eq!(freed, share - 10);

    let quota = d.admin(&["quota", "show"]);
    assert!(quota.contains("vf0:\n  quota: qps 10 cqs"), "{quota}");
    assert!(
        quota.contains(&format!("unassigned: qps {freed} ")),
        "{quota}"
    );

    let stats: serde_json::Value =
        serde_json::from_str(&d.admin(&["stats", "--json"])).expect("JSON");
    assert_eq!(stats["members"].as_array().map(Vec::len), Some(3));
    assert_eq!(stats["members"][1]["name"], "vf0");
    assert_eq!(stats["members"][1]["tx_packets"], 0);
    assert_eq!(stats["port"]["kind"], "none", "no --net: no port");
    let one = d.admin(&["stats", "vf1"]);
    assert!(one.starts_with("vf1: tx_packets 0 tx_bytes 0 "), "{one}");
    let all = d.admin(&["stats"]);
    assert!(
        all.ends_with("port: none (rnicd runs without --net)\n"),
        "{all}"
    );

    let done: serde_json::Value =
        serde_json::from_str(&d.admin(&["--json", "reset-vf", "vf0"])).expect("JSON");
    assert_eq!(done["ok"], true);

    // Failures say why and exit non-zero.
    let out = Command::new(bin("rnic-admin"))
        .arg("--vfio-user")
        .arg(d.socket("pf"))
        .args(["quota", "set", "vf0", "--qps", "100000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NO_RESOURCES"), "{err}");
    // A VF cannot administer.
    let out = Command::new(bin("rnic-admin"))
        .arg("--vfio-user")
        .arg(d.socket("vf0"))
        .arg("vfs")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a PF"));
}

/// The DMA quotas (ABI 1.6): this machine's budget split evenly between the functions,
/// set and read back through `rnic-admin` and the library, and carved from the pools as
/// every other kind is. (The PF's socket takes one client at a time: the library's
/// connection is closed while `rnic-admin` runs.)
#[test]
fn dma_quotas_split_the_budget_and_read_back_through_rnic_admin_and_the_library() {
    let d = Rnicd::start(2, &[]);
    let pf = open(&d, "pf");
    let q = pf.admin_query().unwrap();
    let share = pf.query_member(1).unwrap().quota;
    drop(pf);
    // Half the process's mappings and 16 TiB of pages, split three ways.
    let windows = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(32768, |n| u32::try_from(n / 2).unwrap_or(u32::MAX));
    assert_eq!(share.dma_windows, windows / 3);
    assert_eq!(share.dma_pages, u32::MAX / 3);
    assert_eq!(
        (q.totals.dma_windows, q.totals.dma_pages),
        (3 * share.dma_windows, 3 * share.dma_pages)
    );
    assert_eq!(q.unassigned, Quota::default());

    // rnic-admin sets them; a size is rounded up to whole pages.
    d.admin(&[
        "quota",
        "set",
        "vf0",
        "--dma-windows",
        "100",
        "--dma-memory",
        "1G",
    ]);
    d.admin(&["quota", "set", "vf1", "--dma-memory", "5000"]);
    let json: serde_json::Value =
        serde_json::from_str(&d.admin(&["quota", "show", "--json"])).expect("JSON");
    let vf0 = &json["members"][1]["quota"];
    assert_eq!(
        (vf0["dma_windows"].as_u64(), vf0["dma_pages"].as_u64()),
        (Some(100), Some(262144))
    );
    let vf1 = &json["members"][2]["quota"];
    assert_eq!(vf1["dma_pages"], 2);
    assert_eq!(vf1["dma_windows"], share.dma_windows, "not given: kept");
    assert_eq!(json["members"][1]["usage"]["dma_windows"], 0);
    assert_eq!(
        json["unassigned"]["dma_pages"],
        (share.dma_pages - 262144) + (share.dma_pages - 2)
    );
    // The tables show the memory in a unit.
    let text = d.admin(&["quota", "show"]);
    assert!(
        text.contains(" doorbell_pages 16 dma_windows 100 dma_memory 1GiB\n"),
        "{text}"
    );
    let vfs = d.admin(&["vfs"]);
    let last_two = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words[words.len() - 2..].join(" ")
    };
    let header = vfs.lines().nth(1).expect("a header");
    assert_eq!(last_two(header), "DMA_WINDOWS DMA_MEMORY", "{vfs}");
    let line = vfs
        .lines()
        .find(|l| l.starts_with("vf0 "))
        .expect("vf0's line");
    assert_eq!(last_two(line), "0/100 0B/1GiB", "{vfs}");
    let json: serde_json::Value = serde_json::from_str(&d.admin(&["vfs", "--json"])).expect("JSON");
    assert_eq!(json["members"][2]["quota"]["dma_pages"], 2);

    // The library reads the same, and nothing else changed.
    let pf = open(&d, "pf");
    let m = pf.query_member(1).unwrap().quota;
    assert_eq!((m.dma_windows, m.dma_pages), (100, 262144));
    assert_eq!(
        Quota {
            dma_windows: share.dma_windows,
            dma_pages: share.dma_pages,
            ..m
        },
        share
    );
    let q = pf.admin_query().unwrap();
    assert_eq!(q.unassigned.dma_windows, share.dma_windows - 100);
    assert_eq!(plus(quota_sum(&pf, 3), q.unassigned), q.totals);

    // Beyond what is unassigned: NO_RESOURCES, the syndrome naming the kind; nothing
    // changes.
    let free = q.unassigned;
    let vf1 = pf.query_member(2).unwrap().quota;
    for (quota, index) in [
        (
            Quota {
                dma_windows: vf1.dma_windows + free.dma_windows + 1,
                ..vf1
            },
            resource::DMA_WINDOWS,
        ),
        (
            Quota {
                dma_pages: vf1.dma_pages + free.dma_pages + 1,
                ..vf1
            },
            resource::DMA_PAGES,
        ),
    ] {
        assert_eq!(status_of(pf.set_quota(2, quota)), Status::NoResources);
        let req = SetQuotaReq {
            member: 2,
            reserved: 0,
            quota,
        };
        let c = pf
            .raw_admin_command(Opcode::SetQuota as u16, req.as_bytes(), 0)
            .unwrap();
        assert_eq!(
            (Status::from_u16(c.header.status), c.header.syndrome),
            (Some(Status::NoResources), index)
        );
        assert_eq!(pf.query_member(2).unwrap().quota, vf1);
    }
    drop(pf);
    let rnic_admin = |args: &[&str]| {
        Command::new(bin("rnic-admin"))
            .arg("--vfio-user")
            .arg(d.socket("pf"))
            .args(args)
            .output()
            .unwrap()
    };
    let too_many = (100 + free.dma_windows + 1).to_string();
    let out = rnic_admin(&["quota", "set", "vf0", "--dma-windows", &too_many]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NO_RESOURCES"), "{err}");
    // Sizes that are none, or more than a quota counts, are refused before anything runs.
    for size in ["1.5G", "lots", "16T"] {
        let out = rnic_admin(&["quota", "set", "vf0", "--dma-memory", size]);
        assert!(!out.status.success(), "{size}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--dma-memory"), "{err}");
    }

    // Exactly what is unassigned can be taken; then nothing is left.
    let pf = open(&d, "pf");
    assert_eq!(pf.query_member(1).unwrap().quota, m);
    pf.set_quota(
        2,
        Quota {
            dma_windows: vf1.dma_windows + free.dma_windows,
            dma_pages: vf1.dma_pages + free.dma_pages,
            ..vf1
        },
    )
    .unwrap();
    let q = pf.admin_query().unwrap();
    assert_eq!(q.unassigned, Quota::default());
    assert_eq!(quota_sum(&pf, 3), q.totals);
}

/// A VF's DMA reaches only what its own client mapped: a memory region naming pages of
/// another VF's memory cannot be registered.
#[test]
fn a_vf_cannot_register_memory_its_client_did_not_map() {
    use rnic_driver::transport::vfio_user::VfioUserOptions;
    let d = Rnicd::start(2, &[]);
    let a = open(&d, "vf0");
    // vf1's client maps its memory at device addresses vf0's client does not use.
    let other_base = 0x40_0000_0000;
    let b_t = VfioUserTransport::connect_with(
        &d.socket("vf1"),
        &VfioUserOptions {
            iova_base: other_base,
            ..VfioUserOptions::default()
        },
    )
    .expect("connect vf1");
    let b_buf = b_t.alloc_dma(4096).expect("vf1 buffer");
    let b_page = b_buf.device_addr(0);
    assert!(b_page >= other_base);
    let _b = Device::open(Box::new(b_t)).expect("open vf1");

    let t = a.transport();
    let pd: rnic_abi::verbs::ObjectResp = {
        let body = a.command(Opcode::AllocPd, &[], 8).unwrap();
        zerocopy::FromBytes::read_from_bytes(&body).unwrap()
    };
    let list = t.alloc_dma(8).unwrap();
    list.write(0, &b_page.to_le_bytes());
    let req = RegMrReq {
        pdn: pd.handle,
        access: verbs::ACCESS_LOCAL_WRITE,
        iova: 0,
        length: 4096,
        pages: PageList::flat(list.device_addr(0), 1),
    };
    let c = a
        .raw_command(Opcode::RegMr as u16, req.as_bytes(), 8)
        .unwrap();
    assert_eq!(Status::from_u16(c.header.status), Some(Status::DmaError));
    // The same request naming vf0's own page works.
    let own = t.alloc_dma(4096).unwrap();
    list.write(0, &own.device_addr(0).to_le_bytes());
    let c = a
        .raw_command(Opcode::RegMr as u16, req.as_bytes(), 8)
        .unwrap();
    assert_eq!(Status::from_u16(c.header.status), Some(Status::Ok));
}

/// A client's DMA windows are charged to its function's quota: they show in its usage,
/// hold the quota (it cannot be lowered below them), survive the function's resets, go
/// with the client, and a DMA_MAP beyond the quota is refused with ENOSPC. VERSION
/// tells the client its window quota.
#[test]
fn a_clients_dma_windows_are_charged_to_its_quota() {
    use rnic_tests::hostile::{memfd, Client};
    use std::os::fd::AsRawFd;
    let d = Rnicd::start(1, &[]);
    let mut c = Client::attach(&d.socket("vf0"));
    let ram = memfd(0x10_0000, true);
    for i in 0..3u64 {
        c.dma_map(
            Some(ram.as_raw_fd()),
            0x1_0000_0000 + i * 0x10_0000,
            0x1_0000,
            i * 0x1_0000,
        )
        .expect("a window");
    }
    let pf = open(&d, "pf");
    let usage = pf.query_member(1).unwrap().usage;
    assert_eq!((usage.dma_windows, usage.dma_pages), (3, 48));
    let mut quota = pf.query_member(1).unwrap().quota;
    quota.dma_windows = 2;
    assert_eq!(
        status_of(pf.set_quota(1, quota)),
        Status::BadState,
        "below usage"
    );
    quota.dma_windows = 3;
    quota.dma_pages = 47;
    assert_eq!(status_of(pf.set_quota(1, quota)), Status::BadState);
    quota.dma_windows = 4;
    quota.dma_pages = 64;
    pf.set_quota(1, quota).unwrap();
    c.dma_map(Some(ram.as_raw_fd()), 0x2_0000_0000, 0x1_0000, 0)
        .expect("the fourth window");
    assert_eq!(
        c.dma_map(Some(ram.as_raw_fd()), 0x3_0000_0000, 0x1000, 0),
        Err(libc::ENOSPC),
        "a fifth window"
    );
    // A reset of the VF destroys its objects, not its client's mappings.
    pf.reset_vf(1).unwrap();
    let usage = pf.query_member(1).unwrap().usage;
    assert_eq!((usage.dma_windows, usage.dma_pages), (4, 64));
    drop(pf);
    drop(c);
    // A new client learns its quota of windows from VERSION; the old one's are gone.
    let mut next = rnic_tests::hostile::Client::connect(&d.socket("vf0"));
    let r = next.call(rnic_abi::vfio_user::CMD_VERSION, &[0, 0, 0, 0], &[]);
    let caps = String::from_utf8_lossy(&r.body[4..]).into_owned();
    assert!(caps.contains("\"max_dma_maps\":4"), "{caps}");
    drop(next);
    let pf = open(&d, "pf");
    wait_for(T, "vf0's windows to go with its client", || {
        pf.query_member(1).unwrap().usage.dma_windows == 0
    });
    assert_eq!(pf.query_member(1).unwrap().usage.dma_pages, 0);
}
