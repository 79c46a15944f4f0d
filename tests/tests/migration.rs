//! Live migration of an RC connection between VFs (`MIGRATE_QP` on the PF's admin queue),
//! end to end through rnicd's sockets: one "guest" (this process) holds VF0 and VF1,
//! which share its memory as two VFs of one VM do; a peer on VF2 streams SENDs, WRITEs
//! and READs with VF0's QP while the PF moves the QP between VF0 and VF1, and the QP on
//! VF0/VF1 streams SENDs, READs and atomics back. Every byte is checked, every work
//! request completes exactly once, and the peer's QP never leaves RTS.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rnic_abi::admin::Quota;
use rnic_abi::cmd::Status;
use rnic_abi::migration::{MigrateQpReq, MigrateQpResp};
use rnic_driver::transport::vfio_user::{VfioUserOptions, VfioUserTransport};
use rnic_driver::transport::Transport;
use rnic_driver::verbs::{
    self, AsyncEvent, Context, Cq, Event, Mr, Pd, Qp, QpState, RecvWr, SendWr, WcStatus, WrOpcode,
};
use rnic_driver::{Device, Error};
use rnic_tests::verbs_pair::{self, pattern, read_mr, read_u64, PairOptions, Side};
use rnic_tests::Rnicd;

/// Bytes of each message (several packets at the 1024-byte MTU of the pair options).
const MSG: usize = 2500;
/// Work requests of each kind per batch.
const BATCH: usize = 8;
/// Member ids of the functions: the PF is 0, VF n is n + 1.
const VF0: u32 = 1;
const VF1: u32 = 2;
const VF2: u32 = 3;
const VF3: u32 = 4;

/// Opens `path` as the second function of a guest whose memory `first` holds.
fn open_sharing(first: &VfioUserTransport, path: &std::path::Path) -> VfioUserTransport {
    VfioUserTransport::connect_sharing(path, first).expect("connect sharing memory")
}

fn open_own(path: &std::path::Path) -> VfioUserTransport {
    VfioUserTransport::connect_with(
        path,
        &VfioUserOptions {
            memory: 32 << 20,
            ..Default::default()
        },
    )
    .expect("connect")
}

fn context(t: VfioUserTransport) -> Context {
    Context::new(Device::open(Box::new(t)).expect("open")).expect("context")
}

/// The PF, for admin commands.
fn pf(rnicd: &Rnicd) -> Device {
    Device::open(Box::new(
        VfioUserTransport::connect(&rnicd.socket("pf")).expect("connect pf"),
    ))
    .expect("open pf")
}

/// The side of the connection in the guest with two VFs: its objects, which follow the
/// QP from context to context.
struct Mover {
    qp: Qp,
    mr: Mr,
    cq: Cq,
    _pd: Pd,
    /// The contexts of the guest's functions, by member id.
    ctxs: HashMap<u32, Context>,
    /// Where the QP is now.
    at: u32,
}

/// Offsets, in the mover's MR (M) and the peer's (P), of the areas of each kind of
/// message; `n` messages of each kind.
struct Layout {
    n: usize,
}

impl Layout {
    fn area(&self, k: usize) -> usize {
        k * self.n * MSG
    }
    // Mover's MR.
    fn m_recv(&self, i: usize) -> usize {
        self.area(0) + i * MSG
    }
    fn m_written(&self, i: usize) -> usize {
        self.area(1) + i * MSG
    }
    fn m_read_src(&self, i: usize) -> usize {
        self.area(2) + i * MSG
    }
    fn m_send_src(&self, i: usize) -> usize {
        self.area(3) + i * MSG
    }
    fn m_read_dst(&self, i: usize) -> usize {
        self.area(4) + i * MSG
    }
    fn m_atomic_dst(&self, i: usize) -> usize {
        self.area(5) + i * 8
    }
    // Peer's MR.
    fn p_send_src(&self, i: usize) -> usize {
        self.area(0) + i * MSG
    }
    fn p_write_src(&self, i: usize) -> usize {
        self.area(1) + i * MSG
    }
    fn p_read_dst(&self, i: usize) -> usize {
        self.area(2) + i * MSG
    }
    fn p_recv(&self, i: usize) -> usize {
        self.area(3) + i * MSG
    }
    fn p_read_src(&self, i: usize) -> usize {
        self.area(4) + i * MSG
    }
    fn p_counter(&self) -> usize {
        self.area(5)
    }
    fn bytes(&self) -> usize {
        self.area(6) + 4096
    }
}

/// Seeds of the test patterns, by kind.
const SEED_PEER_SEND: u64 = 1_000;
const SEED_PEER_WRITE: u64 = 2_000;
const SEED_MOVER_READ_SRC: u64 = 3_000;
const SEED_MOVER_SEND: u64 = 4_000;
const SEED_PEER_READ_SRC: u64 = 5_000;

/// A signaled send work request, the `i`th of kind `kind`, with one SGE.
fn wr(kind: u64, i: usize, opcode: WrOpcode, sge: rnic_driver::verbs::Sge) -> SendWr {
    SendWr {
        wr_id: wr_id(kind, i),
        opcode,
        sges: vec![sge],
        signaled: true,
        ..SendWr::default()
    }
}

/// wr_id of the `i`th work request of kind `kind`.
fn wr_id(kind: u64, i: usize) -> u64 {
    kind << 32 | i as u64
}
const K_PEER_SEND: u64 = 1;
const K_PEER_WRITE: u64 = 2;
const K_PEER_READ: u64 = 3;
const K_MOVER_RECV: u64 = 4;
const K_MOVER_SEND: u64 = 5;
const K_MOVER_READ: u64 = 6;
const K_MOVER_ATOMIC: u64 = 7;
const K_PEER_RECV: u64 = 8;

/// A running test: rnicd, the PF, the guest with two (or more) VFs, and the peer.
struct Stream {
    pf: Device,
    mover: Mover,
    peer: Side,
    layout: Layout,
    o: PairOptions,
    /// Completions seen, by wr_id, on the mover's CQ and the peer's.
    seen_mover: HashMap<u64, usize>,
    seen_peer: HashMap<u64, usize>,
    /// Batches posted.
    batches: usize,
    /// Last: the objects above are destroyed through it when the test ends.
    rnicd: Rnicd,
}

impl Stream {
    /// rnicd with four VFs: the guest holds VF0 and VF1 (shared memory), the peer VF2,
    /// and VF3 is a function of another guest (its own memory). The QP starts on VF0.
    fn start(batches: usize) -> Stream {
        Self::start_with(batches, &[])
    }

    /// [`Stream::start`] with more rnicd options.
    fn start_with(batches: usize, rnicd_args: &[&str]) -> Stream {
        let rnicd = Rnicd::start(4, rnicd_args);
        let pf = pf(&rnicd);
        let layout = Layout { n: batches * BATCH };
        let o = PairOptions {
            buf_len: layout.bytes(),
            ..PairOptions::default()
        };
        let ta = VfioUserTransport::connect_with(
            &rnicd.socket("vf0"),
            &VfioUserOptions {
                memory: layout.bytes() + (32 << 20),
                ..Default::default()
            },
        )
        .expect("connect vf0");
        let tb = open_sharing(&ta, &rnicd.socket("vf1"));
        let buf = Arc::new(ta.alloc_dma(layout.bytes()).expect("buffer"));
        let ctx_a = context(ta);
        let ctx_b = context(tb);
        let pd = ctx_a.alloc_pd().expect("pd");
        let cq = ctx_a.create_cq(1024).expect("cq");
        let mr = pd.reg_mr(buf, 0, layout.bytes(), o.access).expect("mr");
        let qp = pd.create_qp(&cq, &cq, o.caps, false).expect("qp");
        let (a, m) = verbs::init_attr(o.access & !verbs::ACCESS_LOCAL_WRITE);
        qp.modify(&a, m).expect("INIT");
        let gid = ctx_a.attr().gid;
        let peer = verbs_pair::side(&rnicd.socket("vf2"), &o);
        verbs_pair::connect_qps((&qp, gid), (&peer.qp, peer.gid), &o, 0x100, 0xabc000);

        // The data the READs fetch and the SENDs and WRITEs carry.
        for i in 0..layout.n {
            mr.write(
                layout.m_read_src(i),
                &pattern(MSG, SEED_MOVER_READ_SRC + i as u64),
            );
            mr.write(
                layout.m_send_src(i),
                &pattern(MSG, SEED_MOVER_SEND + i as u64),
            );
            peer.mr.write(
                layout.p_send_src(i),
                &pattern(MSG, SEED_PEER_SEND + i as u64),
            );
            peer.mr.write(
                layout.p_write_src(i),
                &pattern(MSG, SEED_PEER_WRITE + i as u64),
            );
            peer.mr.write(
                layout.p_read_src(i),
                &pattern(MSG, SEED_PEER_READ_SRC + i as u64),
            );
        }
        peer.mr.write(layout.p_counter(), &0u64.to_le_bytes());
        let mut ctxs = HashMap::new();
        ctxs.insert(VF0, ctx_a);
        ctxs.insert(VF1, ctx_b);
        let s = Stream {
            rnicd,
            pf,
            mover: Mover {
                qp,
                mr,
                cq,
                _pd: pd,
                ctxs,
                at: VF0,
            },
            peer,
            layout,
            o,
            seen_mover: HashMap::new(),
            seen_peer: HashMap::new(),
            batches: 0,
        };
        // Every receive of the whole stream, posted up front on the starting function.
        for i in 0..s.layout.n {
            s.mover
                .qp
                .post_recv(&RecvWr {
                    wr_id: wr_id(K_MOVER_RECV, i),
                    sges: vec![s.mover.mr.sge(s.layout.m_recv(i), MSG)],
                })
                .expect("mover post_recv");
            s.peer
                .qp
                .post_recv(&RecvWr {
                    wr_id: wr_id(K_PEER_RECV, i),
                    sges: vec![s.peer.mr.sge(s.layout.p_recv(i), MSG)],
                })
                .expect("peer post_recv");
        }
        s
    }

    /// Posts batch `b`: the peer's SENDs, WRITEs and READs, and the mover's SENDs, READs
    /// and fetch-and-adds, interleaved.
    fn post_batch(&mut self) {
        let b = self.batches;
        self.batches += 1;
        let l = &self.layout;
        let m = &self.mover;
        let p = &self.peer;
        for i in b * BATCH..(b + 1) * BATCH {
            let peer_wrs = [
                wr(
                    K_PEER_SEND,
                    i,
                    WrOpcode::Send,
                    p.mr.sge(l.p_send_src(i), MSG),
                ),
                wr(
                    K_PEER_WRITE,
                    i,
                    WrOpcode::RdmaWrite {
                        remote_addr: m.mr.addr(l.m_written(i)),
                        rkey: m.mr.rkey(),
                    },
                    p.mr.sge(l.p_write_src(i), MSG),
                ),
                wr(
                    K_PEER_READ,
                    i,
                    WrOpcode::RdmaRead {
                        remote_addr: m.mr.addr(l.m_read_src(i)),
                        rkey: m.mr.rkey(),
                    },
                    p.mr.sge(l.p_read_dst(i), MSG),
                ),
            ];
            p.qp.post_send_list(&peer_wrs).expect("peer post_send");
            let mover_wrs = [
                wr(
                    K_MOVER_SEND,
                    i,
                    WrOpcode::Send,
                    m.mr.sge(l.m_send_src(i), MSG),
                ),
                wr(
                    K_MOVER_READ,
                    i,
                    WrOpcode::RdmaRead {
                        remote_addr: p.mr.addr(l.p_read_src(i)),
                        rkey: p.mr.rkey(),
                    },
                    m.mr.sge(l.m_read_dst(i), MSG),
                ),
                wr(
                    K_MOVER_ATOMIC,
                    i,
                    WrOpcode::AtomicFetchAdd {
                        remote_addr: p.mr.addr(l.p_counter()),
                        rkey: p.mr.rkey(),
                        add: 1,
                    },
                    m.mr.sge(l.m_atomic_dst(i), 8),
                ),
            ];
            m.qp.post_send_list(&mover_wrs).expect("mover post_send");
        }
    }

    /// Polls both CQs until every work request of the batches posted so far completed,
    /// checking each completes once and successfully.
    fn complete_batches(&mut self) {
        // Per batch: mover 3 sends + BATCH receives; peer 3 sends + BATCH receives.
        let want = self.batches * BATCH * 4;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.seen_mover.len() < want || self.seen_peer.len() < want {
            assert!(
                Instant::now() < deadline,
                "stream stalled: mover {} of {want} completions, peer {} of {want}\n{}",
                self.seen_mover.len(),
                self.seen_peer.len(),
                self.rnicd.log()
            );
            let mover = record(&mut self.seen_mover, &self.mover.cq, "mover");
            let peer = record(&mut self.seen_peer, &self.peer.cq, "peer");
            if mover + peer == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        for (seen, who) in [(&self.seen_mover, "mover"), (&self.seen_peer, "peer")] {
            if let Some((id, n)) = seen.iter().find(|(_, n)| **n != 1) {
                panic!("{who}: wr {id:#x} completed {n} times");
            }
            assert_eq!(seen.len(), want, "{who}: completions of unknown WRs");
        }
    }

    /// Moves the QP to member `to` through the PF's admin queue, and follows it there:
    /// the old context reports QP_DEPARTED, the new one QP_ARRIVED, and the QP adopts.
    fn migrate(&mut self, to: u32) -> MigrateQpResp {
        let qpn = self.mover.qp.qp_num();
        let from = self.mover.at;
        let resp = self
            .pf
            .migrate_qp(&MigrateQpReq {
                from,
                to,
                qpn,
                doorbell_page: verbs::DOORBELL_PAGE,
                ..MigrateQpReq::default()
            })
            .expect("MIGRATE_QP");
        assert_eq!(resp.qpn, qpn, "the QP keeps its number");
        assert_eq!((resp.mrs_moved, resp.cqs_moved), (1, 1));
        assert_eq!(
            self.mover.ctxs[&from]
                .get_event(Duration::from_secs(5))
                .unwrap(),
            Some(Event::Async {
                event: AsyncEvent::QpDeparted,
                object: qpn,
                data: 0
            })
        );
        assert_eq!(
            self.mover.ctxs[&to]
                .get_event(Duration::from_secs(5))
                .unwrap(),
            Some(Event::Async {
                event: AsyncEvent::QpArrived,
                object: qpn,
                data: 0
            })
        );
        let ctx = &self.mover.ctxs[&to];
        self.mover.qp.adopt(ctx, None, None).expect("adopt");
        assert_eq!(self.mover.cq.cqn(), resp.send_cq);
        assert_eq!(self.mover.mr.pdn(), resp.pdn);
        self.mover.at = to;
        self.assert_peer_rts();
        resp
    }

    fn assert_peer_rts(&self) {
        assert_eq!(
            self.peer.qp.state().expect("query peer"),
            QpState::Rts,
            "the peer's QP left RTS"
        );
    }

    /// Checks every byte the stream moved, and that nothing completes late or twice.
    fn check_data(&mut self) {
        std::thread::sleep(Duration::from_millis(100));
        assert!(self.mover.cq.poll(16).is_empty(), "a late mover completion");
        assert!(self.peer.cq.poll(16).is_empty(), "a late peer completion");
        let l = &self.layout;
        let n = self.batches * BATCH;
        for i in 0..n {
            let m = &self.mover.mr;
            let p = &self.peer.mr;
            let s = i as u64;
            assert_eq!(
                read_mr(m, l.m_recv(i), MSG),
                pattern(MSG, SEED_PEER_SEND + s),
                "peer SEND {i}"
            );
            assert_eq!(
                read_mr(m, l.m_written(i), MSG),
                pattern(MSG, SEED_PEER_WRITE + s),
                "peer WRITE {i}"
            );
            assert_eq!(
                read_mr(p, l.p_read_dst(i), MSG),
                pattern(MSG, SEED_MOVER_READ_SRC + s),
                "peer READ {i}"
            );
            assert_eq!(
                read_mr(p, l.p_recv(i), MSG),
                pattern(MSG, SEED_MOVER_SEND + s),
                "mover SEND {i}"
            );
            assert_eq!(
                read_mr(m, l.m_read_dst(i), MSG),
                pattern(MSG, SEED_PEER_READ_SRC + s),
                "mover READ {i}"
            );
            // Atomics execute in order, once each: the ith saw i.
            assert_eq!(read_u64(m, l.m_atomic_dst(i)), s, "mover FETCH_ADD {i}");
        }
        assert_eq!(read_u64(&self.peer.mr, l.p_counter()), n as u64);
        self.assert_peer_rts();
        // No frame was dropped anywhere: none reached a function the QP had left.
        for member in [VF0, VF1, VF2] {
            let stats = self.pf.member_stats(member).expect("GET_STATS");
            assert_eq!(stats.rx_errors, 0, "member {member}: {stats:?}");
        }
    }

    /// The mover's function sees no event (no migration happened to it).
    fn assert_no_events(&self) {
        for (member, ctx) in &self.mover.ctxs {
            assert_eq!(
                ctx.get_event(Duration::from_millis(100)).unwrap(),
                None,
                "member {member}"
            );
        }
    }
}

/// Polls `cq` once, counting each completion in `seen` and checking it succeeded;
/// returns how many there were.
fn record(seen: &mut HashMap<u64, usize>, cq: &Cq, who: &str) -> usize {
    let wcs = cq.poll(64);
    for wc in &wcs {
        assert_eq!(
            wc.status,
            Ok(WcStatus::Success),
            "{who}: wr {:#x} completed with {}",
            wc.wr_id,
            wc.status_str()
        );
        *seen.entry(wc.wr_id).or_default() += 1;
    }
    wcs.len()
}

fn status_of(e: &Error) -> Option<Status> {
    match e {
        Error::Command { status, .. } => Status::from_u16(*status),
        _ => None,
    }
}

#[test]
fn a_qp_migrates_to_another_vf_under_a_running_stream() {
    let mut s = Stream::start(3);
    s.post_batch();
    // Mid-stream: the batch is posted and in flight when the QP moves.
    let resp = s.migrate(VF1);
    s.post_batch();
    s.complete_batches();
    s.post_batch();
    s.complete_batches();
    s.check_data();
    // Neither function hands the moved QP's number to a new QP: VF1 has it, and VF0's
    // frames for it are steered to VF1.
    let qpn = s.mover.qp.qp_num();
    for member in [VF0, VF1] {
        let ctx = &s.mover.ctxs[&member];
        let pd = ctx.alloc_pd().expect("pd");
        let cq = ctx.create_cq(4).expect("cq");
        let other = pd.create_qp(&cq, &cq, s.o.caps, false).expect("qp");
        assert_ne!(other.qp_num(), qpn, "member {member}");
    }
    // The objects moved and were charged: VF1 now holds the QP, its PD, MR and CQ.
    let b = s.pf.query_member(VF1).unwrap().usage;
    let a = s.pf.query_member(VF0).unwrap().usage;
    assert_eq!((b.qps, b.pds, b.mrs, b.cqs), (1, 1, 1, 1), "{b:?}");
    assert_eq!((a.qps, a.pds, a.mrs, a.cqs), (0, 0, 0, 0), "{a:?}");
    assert_ne!(resp.pdn, 0);
}

/// Moves the stream's QP VF0 -> VF1 -> VF0 -> VF1 -> VF0 -> VF1, a batch posted before
/// each move, and checks every byte and completion (six batches).
fn back_and_forth(s: &mut Stream) {
    for (n, to) in [VF1, VF0, VF1, VF0, VF1].into_iter().enumerate() {
        s.post_batch();
        s.migrate(to);
        // Two batches in flight at most, so the send queues never fill.
        if n % 2 == 1 {
            s.complete_batches();
        }
    }
    s.post_batch();
    s.complete_batches();
    s.check_data();
}

#[test]
fn a_qp_migrates_back_and_forth_under_a_running_stream() {
    let mut s = Stream::start(6);
    back_and_forth(&mut s);
    // Its destruction on the last function it reached goes through: drop cleans up.
}

/// With the functions spread over two engine threads, VF0 (function 1) and the peer VF2
/// (function 3) run on thread 1 and VF1 (function 2) on thread 0: each move takes the QP
/// to the other thread, under traffic, and nothing is lost or repeated.
#[test]
fn a_qp_migrates_between_engine_threads_under_a_running_stream() {
    let mut s = Stream::start_with(6, &["--threads", "2", "--placement", "spread"]);
    s.rnicd
        .wait_for_log("placement spread", std::time::Duration::from_secs(5));
    // check_data also finds that no frame was dropped.
    back_and_forth(&mut s);
    // Nor was any sent twice: nothing waited for a retransmission timer.
    for member in [VF0, VF1, VF2] {
        let stats = s.pf.member_stats(member).expect("GET_STATS");
        assert_eq!(stats.retransmits, 0, "member {member}: {stats:?}");
    }
}

#[test]
fn failed_migrations_change_nothing() {
    let mut s = Stream::start(4);
    let qpn = s.mover.qp.qp_num();
    let usage = |s: &Stream| [VF0, VF1, VF3].map(|m| s.pf.query_member(m).unwrap().usage);
    let req = |to| MigrateQpReq {
        from: VF0,
        to,
        qpn,
        doorbell_page: verbs::DOORBELL_PAGE,
        ..MigrateQpReq::default()
    };
    // A function of another guest (its own memory) cannot reach the QP's memory.
    let other = context(open_own(&s.rnicd.socket("vf3")));
    let before = usage(&s);
    s.post_batch();
    let e = s.pf.migrate_qp(&req(VF3)).unwrap_err();
    assert_eq!(status_of(&e), Some(Status::DmaError), "{e}");
    assert_eq!(usage(&s), before);

    // VF1 shares the memory but has no quota for a QP.
    let quota = s.pf.query_member(VF1).unwrap().quota;
    s.pf.set_quota(VF1, Quota { qps: 0, ..quota })
        .expect("SET_QUOTA");
    let e = s.pf.migrate_qp(&req(VF1)).unwrap_err();
    assert_eq!(status_of(&e), Some(Status::NoResources), "{e}");
    s.pf.set_quota(VF1, quota).expect("SET_QUOTA back");
    assert_eq!(usage(&s), before);

    // Another QP of VF0 uses the PD that would have to move.
    s.post_batch();
    let other_qp = s
        .mover
        ._pd
        .create_qp(&s.mover.cq, &s.mover.cq, s.o.caps, false)
        .expect("second qp");
    let e = s.pf.migrate_qp(&req(VF1)).unwrap_err();
    assert_eq!(status_of(&e), Some(Status::Busy), "{e}");
    drop(other_qp);

    // Nonsense: no such QP, the same member twice, reserved bits.
    for bad in [
        MigrateQpReq {
            qpn: qpn + 1,
            ..req(VF1)
        },
        req(VF0),
        MigrateQpReq {
            flags: 1,
            ..req(VF1)
        },
    ] {
        assert!(s.pf.migrate_qp(&bad).is_err(), "{bad:?}");
    }
    assert_eq!(other.get_event(Duration::from_millis(100)).unwrap(), None);
    s.assert_no_events();
    // The stream went on on VF0 throughout, and still does.
    s.post_batch();
    s.complete_batches();
    s.check_data();
    assert_eq!(s.mover.qp.state().unwrap(), QpState::Rts);
    // And the QP can still move where it may.
    s.post_batch();
    s.migrate(VF1);
    s.complete_batches();
    s.check_data();
}

#[test]
fn migration_can_join_cqs_of_the_destination() {
    let mut s = Stream::start(2);
    let qpn = s.mover.qp.qp_num();
    // A CQ that VF1's driver already has; the QP's own CQ stays on VF0.
    let joined = s.mover.ctxs[&VF1].create_cq(1024).expect("cq on vf1");
    s.post_batch();
    // The batch is in flight while the QP moves.
    let resp =
        s.pf.migrate_qp(&MigrateQpReq {
            from: VF0,
            to: VF1,
            qpn,
            send_cq: joined.cqn(),
            recv_cq: joined.cqn(),
            doorbell_page: verbs::DOORBELL_PAGE,
            ..MigrateQpReq::default()
        })
        .expect("MIGRATE_QP");
    assert_eq!(
        (resp.send_cq, resp.recv_cq, resp.cqs_moved),
        (joined.cqn(), joined.cqn(), 0)
    );
    // What completed before the move is in the old CQ, which stays on VF0; nothing
    // comes there any more. The driver reads it before it adopts the QP.
    assert_eq!(
        s.mover.ctxs[&VF0]
            .get_event(Duration::from_secs(5))
            .unwrap(),
        Some(Event::Async {
            event: AsyncEvent::QpDeparted,
            object: qpn,
            data: 0
        })
    );
    while record(&mut s.seen_mover, &s.mover.cq, "mover (old CQ)") > 0 {}
    let ctx = &s.mover.ctxs[&VF1];
    s.mover
        .qp
        .adopt(ctx, Some(&joined), Some(&joined))
        .expect("adopt");
    // The rest of the stream completes to the joined CQ.
    let old = std::mem::replace(&mut s.mover.cq, joined);
    s.post_batch();
    s.complete_batches();
    s.check_data();
    assert!(old.poll(4).is_empty());
    // The old CQ still lives on VF0 and nothing uses it.
    let a = s.pf.query_member(VF0).unwrap().usage;
    assert_eq!((a.qps, a.cqs), (0, 1), "{a:?}");
}

/// A running rnic-pingpong whose standard output lines arrive on a channel.
struct Pingpong {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Pingpong {
    fn start(args: &[&std::ffi::OsStr]) -> Pingpong {
        use std::io::BufRead;
        let mut child = std::process::Command::new(rnic_tests::bin("rnic-pingpong"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn rnic-pingpong");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Pingpong {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line starting with `prefix`; returns it.
    fn wait_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line {prefix:?}; so far: {:?}", self.seen));
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// Waits for the process to exit; returns its status and all its output.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("rnic-pingpong did not finish: {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.seen.extend(self.lines.try_iter());
        (status, self.seen.join("\n"))
    }
}

impl Drop for Pingpong {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn rnic_pingpong_follows_its_qp_to_the_other_vf_and_back() {
    let rnicd = Rnicd::start(3, &[]);
    let pf = pf(&rnicd);
    let os = |s: &str| std::ffi::OsString::from(s);
    let common = [
        "--op",
        "send",
        "--size",
        "3000",
        "--iters",
        "6000",
        "--time-limit",
        "60",
    ];
    let mut a_args: Vec<std::ffi::OsString> = vec![
        os("--vfio-user"),
        rnicd.socket("vf0").into(),
        os("--follow-vfio-user"),
        rnicd.socket("vf1").into(),
        os("--listen"),
        os("0"),
    ];
    a_args.extend(common.iter().map(|s| os(s)));
    let mut a = Pingpong::start(&a_args.iter().map(|s| s.as_os_str()).collect::<Vec<_>>());
    let local = a.wait_line("local: qpn ");
    let port = a.wait_line("listening on port ");
    let port = port.rsplit(' ').next().expect("port").to_string();
    let mut b_args: Vec<std::ffi::OsString> = vec![
        os("--vfio-user"),
        rnicd.socket("vf2").into(),
        os("--connect"),
        os(&format!("127.0.0.1:{port}")),
    ];
    b_args.extend(common.iter().map(|s| os(s)));
    let b = Pingpong::start(&b_args.iter().map(|s| s.as_os_str()).collect::<Vec<_>>());
    let qpn = u32::from_str_radix(
        local
            .trim_start_matches("local: qpn 0x")
            .split(' ')
            .next()
            .expect("qpn"),
        16,
    )
    .expect("hex qpn");
    a.wait_line("remote: ");
    // The ping-pong is running: move its QP to VF1 and, a little later, back.
    for (from, to) in [(VF0, VF1), (VF1, VF0)] {
        std::thread::sleep(Duration::from_millis(300));
        pf.migrate_qp(&MigrateQpReq {
            from,
            to,
            qpn,
            doorbell_page: verbs::DOORBELL_PAGE,
            ..MigrateQpReq::default()
        })
        .expect("MIGRATE_QP while the ping-pong runs");
    }
    let (a_status, a_out) = a.finish();
    let (b_status, b_out) = b.finish();
    assert!(
        a_status.success(),
        "side A failed:\n{a_out}\n{}",
        rnicd.log()
    );
    assert!(b_status.success(), "side B failed:\n{b_out}");
    for out in [&a_out, &b_out] {
        assert!(out.contains("6000 iters of 3000 bytes"), "{out}");
    }
    assert!(
        a_out.contains("followed the QP through 2 migration(s)"),
        "{a_out}"
    );
}
