//! Advanced RNIC features, part two (datasheet §14.9 on), each driven through the real
//! path: two VFs of one rnicd over the host vfio-user transport, and two rnicd talking
//! RoCEv2 over UDP.

use std::sync::Arc;
use std::time::Duration;

use rnic_abi::ctrlq::{ctrl_op, CtrlWqe, CTRLQ_CQE_QPN_BIT};
use rnic_abi::regs;
use rnic_abi::verbs::PageList;
use rnic_driver::transport::DmaBuffer;
use rnic_driver::verbs::{
    Cq, CtrlQueue, Qp, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_WRITE,
};
use rnic_tests::net::{expect_wc, on_both_paths};
use rnic_tests::verbs_pair::{
    buffer_bytes, connect_qps, init_qp, pattern, poll_n, side, signaled, PairOptions, Side,
};
use rnic_tests::Rnicd;

const T: Duration = Duration::from_secs(10);

/// The next completion of `cq`, which must come and must be for `wr_id` with `status`.
#[track_caller]
fn expect(cq: &Cq, wr_id: u64, status: WcStatus) -> Wc {
    expect_wc(cq, wr_id, status, T)
}

fn write(wr_id: u64, b: &Side, sge: Sge) -> SendWr {
    signaled(
        wr_id,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
        },
        vec![sge],
    )
}

// ---------------------------------------------------------------------------------------
// Pipelined memory registration (§14.9).

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
            a.qp.post_send(&write(round, b, mr.sge(0, data.len())))
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
    a.qp.post_send(&write(1, b, sge)).expect("post");
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
    (
        array,
        PageList {
            addr,
            count: pages.len() as u32,
            page_shift: 12,
        },
    )
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
        let unreachable = PageList {
            addr: 0x7fff_0000_0000,
            count: 1,
            page_shift: 12,
        };
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
            .post_send(&write(2, b, mr.sge(0, data.len())))
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

// ---------------------------------------------------------------------------------------
// Shared send queues (§14.10).

/// Bytes each shared-queue WR moves.
const SSQ_LEN: usize = 4096;

/// A QP of `a` connected to the QP of each of `peers`.
fn fan_out(a: &Side, peers: &[Side]) -> Vec<Qp> {
    let o = PairOptions::default();
    peers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let qa = init_qp(a, &a.cq, &o, ACCESS_REMOTE_WRITE);
            connect_qps((&qa, a.gid), (&p.qp, p.gid), &o, 0x500 + i as u32, 0x900);
            qa
        })
        .collect()
}

/// Through one shared send queue of `a`: a SEND to `peers[0]`, which has no receive
/// posted (its connection stalls in RNR), then WRITEs to the others, which land first;
/// no completion comes until the SEND is received, then all in posting order. Then a
/// round-robin burst completes in posting order too.
fn shared_sq_completes_in_posting_order(a: &Side, peers: &[Side]) {
    assert!(a.ctx.attr().caps & regs::CAP_SHARED_SQ != 0);
    let qps = fan_out(a, peers);
    let cq = a.ctx.create_cq(64).expect("CQ");
    let ssq =
        a.pd.create_shared_sq(16, 2, 0, &cq)
            .expect("shared send queue");
    let data = pattern(SSQ_LEN, 9);
    a.mr.write(0, &data);
    let send = signaled(0, WrOpcode::Send, vec![a.mr.sge(0, SSQ_LEN)]);
    ssq.post_send(&qps[0], &send).expect("post the SEND");
    for (i, peer) in peers.iter().enumerate().skip(1) {
        ssq.post_send(&qps[i], &write(i as u64, peer, a.mr.sge(0, SSQ_LEN)))
            .expect("post a WRITE");
    }
    let landed = |p: &Side| buffer_bytes(&p.mr)[p.mr.offset()..][..SSQ_LEN] == data[..];
    rnic_tests::wait_for(T, "the WRITEs to land", || peers[1..].iter().all(landed));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        cq.poll(1).is_empty(),
        "nothing completes before the SEND posted first"
    );
    peers[0]
        .qp
        .post_recv(&rnic_driver::verbs::RecvWr {
            wr_id: 50,
            sges: vec![peers[0].mr.sge(0, SSQ_LEN)],
        })
        .expect("post the receive");
    let check_order = |wcs: &[Wc], expected: &[(u64, u32)]| {
        let got: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.src_qp)).collect();
        assert_eq!(
            got, expected,
            "completions in posting order, with their QPs"
        );
        for w in wcs {
            assert_eq!(w.status, Ok(WcStatus::Success), "{}", w.status_str());
            assert_eq!(
                w.qp_num,
                rnic_abi::shared_sq::SHARED_SQ_CQE_QPN_BIT | ssq.ssqn()
            );
        }
    };
    let wcs = poll_n(&cq, peers.len(), T);
    let expected: Vec<(u64, u32)> = (0..peers.len())
        .map(|i| (i as u64, qps[i].qp_num()))
        .collect();
    check_order(&wcs, &expected);
    expect(&peers[0].cq, 50, WcStatus::Success);
    assert!(landed(&peers[0]));
    // A burst, round robin over the QPs, with sizes that make the connections uneven.
    let mut expected = Vec::new();
    for n in 0..12u64 {
        let i = n as usize % qps.len();
        let len = if i == 0 {
            SSQ_LEN
        } else {
            64 * (n as usize + 1)
        };
        ssq.post_send(&qps[i], &write(100 + n, &peers[i], a.mr.sge(0, len)))
            .expect("post");
        expected.push((100 + n, qps[i].qp_num()));
    }
    check_order(&poll_n(&cq, expected.len(), T), &expected);
    // A WR naming a QP of another PD completes with LOC_QP_OP_ERR in its place; the WRs
    // around it, and their QPs, go on.
    let other_pd = a.ctx.alloc_pd().expect("PD");
    let stranger = init_qp_in(a, &other_pd);
    ssq.post_send(&qps[1], &write(200, &peers[1], a.mr.sge(0, 64)))
        .expect("post");
    ssq.post_send(&stranger, &write(201, &peers[1], a.mr.sge(0, 64)))
        .expect("post");
    ssq.post_send(&qps[2], &write(202, &peers[2], a.mr.sge(0, 64)))
        .expect("post");
    let wcs = poll_n(&cq, 3, T);
    let got: Vec<(u64, Result<WcStatus, u8>)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (200, Ok(WcStatus::Success)),
            (201, Ok(WcStatus::LocQpOpErr)),
            (202, Ok(WcStatus::Success))
        ]
    );
    assert_eq!(wcs[1].src_qp, stranger.qp_num());
    // A QP that enters ERR while it holds an entry (a SEND waiting in RNR, peer 0 has no
    // receive) completes it flushed, in its place; the entry behind it, on another QP,
    // waited for it and then completes.
    ssq.post_send(
        &qps[0],
        &signaled(300, WrOpcode::Send, vec![a.mr.sge(0, 64)]),
    )
    .expect("post");
    ssq.post_send(&qps[1], &write(301, &peers[1], a.mr.sge(0, 64)))
        .expect("post");
    std::thread::sleep(Duration::from_millis(100));
    assert!(cq.poll(1).is_empty(), "the SEND holds the order");
    let err = rnic_driver::verbs::QpAttr {
        qp_state: rnic_driver::verbs::QpState::Err as u8,
        ..Default::default()
    };
    qps[0]
        .modify(&err, rnic_driver::verbs::attr::STATE)
        .expect("to ERR");
    let got: Vec<(u64, Result<WcStatus, u8>)> = poll_n(&cq, 2, T)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        got,
        [
            (300, Ok(WcStatus::WrFlushErr)),
            (301, Ok(WcStatus::Success))
        ]
    );
    assert_eq!(ssq.free_slots(), 16, "every completion freed its slot");
}

/// A QP of `a`'s context in `pd`, in INIT.
fn init_qp_in(a: &Side, pd: &rnic_driver::verbs::Pd) -> Qp {
    let o = PairOptions::default();
    let qp = pd.create_qp(&a.cq, &a.cq, o.caps, false).expect("QP");
    let (at, m) = rnic_driver::verbs::init_attr(ACCESS_REMOTE_WRITE);
    qp.modify(&at, m).expect("INIT");
    qp
}

#[test]
fn a_shared_send_queue_completes_in_posting_order_between_functions() {
    let o = PairOptions::default();
    let rnicd = Rnicd::start(4, &[]);
    let a = side(&rnicd.socket("vf0"), &o);
    let peers: Vec<Side> = ["vf1", "vf2", "vf3"]
        .iter()
        .map(|f| side(&rnicd.socket(f), &o))
        .collect();
    shared_sq_completes_in_posting_order(&a, &peers);
}

#[test]
fn a_shared_send_queue_completes_in_posting_order_across_two_rnicd() {
    let o = PairOptions::default();
    let rnicd_a = Rnicd::start(1, &["--net", "udp:127.0.128.1"]);
    let rnicd_b = Rnicd::start(3, &["--net", "udp:127.0.129.1"]);
    let a = side(&rnicd_a.socket("vf0"), &o);
    let peers: Vec<Side> = ["vf0", "vf1", "vf2"]
        .iter()
        .map(|f| side(&rnicd_b.socket(f), &o))
        .collect();
    shared_sq_completes_in_posting_order(&a, &peers);
    drop((a, peers));
}

// ---------------------------------------------------------------------------------------
// Sessions and multipath (§14.11).

/// The sessions the PF gives vf0 (member 1).
const SESSION_PORTS: [u16; 4] = [50001, 50002, 50003, 50004];

/// Gives `function` (a member id) of the rnicd whose PF socket is `pf` [`SESSION_PORTS`].
fn assign_sessions(pf: &std::path::Path, member: u32) {
    let t = rnic_driver::transport::vfio_user::VfioUserTransport::connect(pf).expect("PF");
    let pf = rnic_driver::Device::open(Box::new(t)).expect("open the PF");
    assert!(pf.query_device().expect("QUERY_DEVICE").caps & regs::CAP_SESSIONS != 0);
    pf.set_sessions(member, &SESSION_PORTS)
        .expect("SET_SESSIONS");
    let too_many = [1u16; 9];
    assert!(pf.set_sessions(member, &too_many).is_err());
}

/// Bytes of each message: three packets at the pair's MTU.
const MSG_LEN: usize = 2500;

/// `a` sends 8 messages over all four sessions, then 2 over session 2 alone and 1 over
/// none; `b` receives them in order, whole. Returns the messages' wr_ids in order.
fn send_over_sessions(a: &Side, b: &Side) {
    let messages: Vec<Vec<u8>> = (0..11).map(|i| pattern(MSG_LEN, 40 + i)).collect();
    for (i, _) in messages.iter().enumerate() {
        b.qp.post_recv(&rnic_driver::verbs::RecvWr {
            wr_id: 1000 + i as u64,
            sges: vec![b.mr.sge(i * MSG_LEN, MSG_LEN)],
        })
        .expect("post a receive");
    }
    for (i, m) in messages.iter().enumerate() {
        a.mr.write(i * MSG_LEN, m);
        let wr = signaled(
            i as u64,
            WrOpcode::Send,
            vec![a.mr.sge(i * MSG_LEN, MSG_LEN)],
        );
        let group = match i {
            0..8 => 0b1111,
            8..10 => 0b0100,
            _ => 0,
        };
        a.qp.post_send_on_sessions(&wr, group).expect("post");
    }
    for i in 0..messages.len() as u64 {
        expect(&a.cq, i, WcStatus::Success);
    }
    for (i, m) in messages.iter().enumerate() {
        // The receiver keeps the connection's order whatever path each message took.
        expect(&b.cq, 1000 + i as u64, WcStatus::Success);
        let mut got = vec![0u8; MSG_LEN];
        b.mr.read(i * MSG_LEN, &mut got);
        assert!(got == *m, "message {i} arrived whole, in its place");
    }
}

/// The UDP source ports of the SEND packets from `src_ip` in `pcap`, one per message in
/// PSN order. Every packet of a message, resent ones included, must share it.
fn message_ports(pcap: &std::path::Path, src_ip: &[u8]) -> Vec<u16> {
    let frames = rnic_tests::wire::pcap_frames(&std::fs::read(pcap).expect("pcap"));
    // PSN -> (opcode, port); a packet sent again must be the same packet.
    let mut by_psn = std::collections::BTreeMap::new();
    for f in frames
        .iter()
        .filter(|f| f.len() > 54 && &f[26..30] == src_ip)
    {
        // SEND_FIRST, SEND_MIDDLE, SEND_LAST.
        if !matches!(f[42], 0x00..=0x02) {
            continue;
        }
        let psn = u32::from_be_bytes([0, f[51], f[52], f[53]]);
        let packet = (f[42], u16::from_be_bytes([f[34], f[35]]));
        if let Some(before) = by_psn.insert(psn, packet) {
            assert_eq!(
                before, packet,
                "PSN {psn:#x} was sent again from another port"
            );
        }
    }
    let mut ports = Vec::new();
    let mut current = None;
    for (opcode, port) in by_psn.into_values() {
        if opcode == 0x00 {
            current = Some(port);
        }
        assert_eq!(current, Some(port), "a message changed ports");
        if opcode == 0x02 {
            ports.push(port);
        }
    }
    ports
}

/// The ports [`send_over_sessions`] must have used: round robin over the four, then
/// session 2, then the QP's own port (none of the sessions).
fn check_ports(ports: &[u16]) {
    assert_eq!(ports.len(), 11, "{ports:?}");
    let rr: Vec<u16> = (0..8).map(|i| SESSION_PORTS[i % 4]).collect();
    assert_eq!(ports[..8], rr[..], "round robin over the group");
    assert_eq!(
        ports[8..10],
        [SESSION_PORTS[2]; 2],
        "the group of session 2"
    );
    assert!(
        !SESSION_PORTS.contains(&ports[10]),
        "no group: the QP's own port"
    );
}

#[test]
fn messages_leave_from_the_sessions_the_pf_assigned_between_functions() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("sessions.pcap");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    assign_sessions(&rnicd.socket("pf"), 1);
    let o = PairOptions::default();
    let (a, b) = rnic_tests::verbs_pair::pair(&rnicd, "vf0", "vf1", &o);
    send_over_sessions(&a, &b);
    let src_ip = a.gid[12..16].to_vec();
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    check_ports(&message_ports(&pcap, &src_ip));
}

#[test]
fn messages_leave_from_the_sessions_the_pf_assigned_across_two_rnicd() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("sessions.pcap");
    let o = PairOptions::default();
    let pcap_arg = pcap.to_str().unwrap();
    let mut rnicd_a = Rnicd::start(1, &["--net", "udp:127.0.130.1", "--pcap", pcap_arg]);
    // The receiver's capture shows the frames as they came off the UDP socket: the
    // sessions are real 5-tuples.
    let pcap_b = dir.path().join("sessions-b.pcap");
    let mut rnicd_b = Rnicd::start(
        1,
        &[
            "--net",
            "udp:127.0.131.1",
            "--pcap",
            pcap_b.to_str().unwrap(),
        ],
    );
    // Here with rnic-admin, which does the same.
    let ports: Vec<String> = SESSION_PORTS.iter().map(u16::to_string).collect();
    let mut args = vec!["sessions", "vf0"];
    args.extend(ports.iter().map(String::as_str));
    rnicd_a.admin(&args);
    let a = side(&rnicd_a.socket("vf0"), &o);
    let b = side(&rnicd_b.socket("vf0"), &o);
    rnic_tests::verbs_pair::connect(&a, &b, &o, 0x10, 0x20);
    send_over_sessions(&a, &b);
    let src_ip = a.gid[12..16].to_vec();
    rnicd_a.stop_with(libc::SIGTERM);
    rnicd_b.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    check_ports(&message_ports(&pcap, &src_ip));
    check_ports(&message_ports(&pcap_b, &src_ip));
}
