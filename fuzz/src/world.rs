//! The fuzz world: three functions of one device with live RDMA objects, set up by the
//! real guest driver through the real command queue, and the invariants every input must
//! leave true.
//!
//! - A (the PF) is the peer: RC QPs `qa`, `qa2` connected to B's, a UD QP, a DC
//!   initiator, receives posted. In [`Mode::Fuzz`] its link is down while an input runs,
//!   so that everything that reaches B comes from the input; in [`Mode::Live`] it
//!   answers what B sends.
//! - B (VF 0) is the target: RC QP `qb` with its own receive queue and an MMIO window for
//!   WQEs, RC QP `qb2` on an SRQ,
//!   a UD QP, a DC target on the SRQ, a writable MR and a read-only one, receives posted
//!   everywhere, and a SEND, a WRITE, a READ and an atomic of `qb` in flight to A, so
//!   that answers the input forges meet a completer with work outstanding. Made last (so
//!   that the numbers and keys of everything before, which the seeds name, stay as they
//!   were): a UC QP `ucb` connected to A's `uca`, with receives posted, and two memory
//!   windows bound through it to a third, writable MR: a type 1 window and a zero-based
//!   type 2 window of `ucb`.
//! - C (VF 1) is a bystander with objects of its own: nothing an input does to A or B may
//!   change anything of C's.
//!
//! Invariants, checked by [`World::check`]:
//! 1. a function's guest RAM changes only where the device may write: the driver's rings
//!    and command buffers, and the registered range of its MRs with local write access
//!    (never their guard bytes, never a read-only MR, never unallocated RAM);
//! 2. C's memory is unchanged, and so are its counters where the input reaches B only
//!    ([`World::check_bystander_counters`]);
//! 3. every posted work request completes at most once, and every completion is of a
//!    work request that was posted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rnic_device::fabric::frame::Frame;
use rnic_driver::verbs::{
    self, mtu, BindInfo, Context, Cq, DcAddress, KeyRange, MemoryKey, MemoryWindow, Mr, Pd, Qp,
    QpCaps, RecvWr, SendWr, Srq, UdAddress, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_MW_BIND,
    ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, ACCESS_ZERO_BASED, MW_TYPE_1,
    MW_TYPE_2, QKEY_USE_OWN,
};

use crate::bench::{Bench, Net};
use crate::transport::{Owner, IOVA_BASE};

/// Function indices.
pub const A: usize = 0;
/// The target.
pub const B: usize = 1;
/// The bystander.
pub const C: usize = 2;

/// Every access.
pub const ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
/// The UD Q_Key of the world.
pub const QKEY: u32 = 0x1111_2222;
/// The DC access key of B's DCT.
pub const DC_KEY: u64 = 0x0123_4567_89ab_cdef;
/// Bytes of each MR, and of the guard on either side of it.
pub const MR_LEN: usize = 64 * 1024;
/// Guard bytes around each MR.
pub const GUARD: usize = 4096;
/// What guard bytes and fresh MRs hold.
const FILL: u8 = 0x5a;
/// First PSNs: A's QPs send from `PSN_A`, B's from `PSN_B`.
pub const PSN_A: u32 = 0x100;
/// See [`PSN_A`].
pub const PSN_B: u32 = 0xabc000;

/// How the world is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A's link goes down after set-up: inputs are the only traffic to B.
    Fuzz,
    /// A's link stays up: the traffic of the set-up is real, for recording seeds.
    Record,
    /// A's link stays up: A answers what B sends, as a live peer.
    Live,
}

/// One function's objects. Declared in drop order: QPs before what they use, windows
/// before the regions they are bound to.
pub struct Side {
    /// QPs (RC, UD, DC, UC), in creation order.
    pub qps: Vec<Qp>,
    /// The SRQ, if the side has one.
    pub srq: Option<Srq>,
    /// Memory windows (B only: type 1, then type 2, bound to `mrs[2]`).
    pub mws: Vec<MemoryWindow>,
    /// MRs; `mrs[0]` is writable, `mrs[1]` (B only) read-only, `mrs[2]` (B only) writable
    /// and bindable (`ACCESS_MW_BIND`).
    pub mrs: Vec<Mr>,
    /// The one CQ of every queue of the side.
    pub cq: Cq,
    /// The protection domain.
    pub pd: Pd,
    /// The context (device, command queue, EQ).
    pub ctx: Context,
}

/// The world. Drop order: sides (their objects destroyed by real commands), then the
/// device.
pub struct World {
    /// A, B and C.
    pub sides: Vec<Side>,
    /// The device.
    pub bench: Bench,
    /// Guest RAM of each function at the end of set-up.
    snapshots: Vec<Vec<u8>>,
    /// Byte ranges (offsets into guest RAM) of each function where the device may write
    /// although the harness owns them: writable MRs' registered ranges.
    writable: Vec<Vec<(usize, usize)>>,
    /// Work requests posted on each function: `wr_id`s, all distinct.
    posted: Vec<BTreeSet<u64>>,
    /// Work requests completed so far.
    pub(crate) completed: Vec<BTreeSet<u64>>,
    /// C's counters at the end of set-up.
    bystander: (rnic_device::rdma::Counters, rnic_abi::admin::MemberStats),
}

/// The queue sizes of every QP of the world.
pub fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

/// Registers `MR_LEN` bytes of a fresh guarded buffer with `access`, and notes where the
/// device may write.
fn mr(bench: &Bench, f: usize, pd: &Pd, access: u32, writable: &mut Vec<(usize, usize)>) -> Mr {
    let buf = bench.rams[f]
        .alloc(GUARD * 2 + MR_LEN, Owner::Harness)
        .expect("MR buffer");
    buf.write(0, &vec![FILL; buf.len()]);
    let start = (buf.pages()[0] - IOVA_BASE) as usize + GUARD;
    if access & ACCESS_LOCAL_WRITE != 0 {
        writable.push((start, start + MR_LEN));
    }
    pd.reg_mr(Arc::new(buf), GUARD, MR_LEN, access)
        .expect("register an MR")
}

fn side(bench: &Bench, f: usize, writable: &mut Vec<(usize, usize)>) -> Side {
    let ctx = bench.open(f);
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(256).expect("cq");
    let mrs = vec![mr(bench, f, &pd, ACCESS, writable)];
    Side {
        qps: Vec::new(),
        srq: None,
        mws: Vec::new(),
        mrs,
        cq,
        pd,
        ctx,
    }
}

fn rc(side: &Side, srq: Option<&Srq>) -> Qp {
    let qp = match srq {
        Some(srq) => side
            .pd
            .create_qp_with_srq(&side.cq, &side.cq, caps(), false, srq),
        None => side.pd.create_qp(&side.cq, &side.cq, caps(), false),
    }
    .expect("RC QP");
    let (a, m) = verbs::init_attr(ACCESS & !ACCESS_LOCAL_WRITE);
    qp.modify(&a, m).expect("INIT");
    qp
}

/// A UC QP of `side`, in INIT.
fn uc(side: &Side) -> Qp {
    let qp = side
        .pd
        .create_uc_qp(&side.cq, &side.cq, caps(), false)
        .expect("UC QP");
    let (a, m) = verbs::init_attr(ACCESS_REMOTE_WRITE);
    qp.modify(&a, m).expect("INIT");
    qp
}

/// Brings UC QP `qp` (INIT) to RTS towards `peer` (QPN, GID).
fn connect_uc(qp: &Qp, peer: (u32, [u8; 16]), my_psn: u32, peer_psn: u32) {
    let (a, m) = verbs::uc_rtr_attr(peer.0, peer.1, peer_psn, mtu::MTU_1024);
    qp.modify(&a, m).expect("UC RTR");
    let (a, m) = verbs::uc_rts_attr(my_psn);
    qp.modify(&a, m).expect("UC RTS");
}

/// Brings `qp` (INIT) to RTS towards `peer` (QPN, GID). The ACK timeout is long (code 20,
/// about 4 s), so that no retry fires while an input runs.
fn connect(qp: &Qp, peer: (u32, [u8; 16]), my_psn: u32, peer_psn: u32) {
    let (a, m) = verbs::rtr_attr(peer.0, peer.1, peer_psn, mtu::MTU_1024, 16, 1);
    qp.modify(&a, m).expect("RTR");
    let (a, m) = verbs::rts_attr(my_psn, 20, 7, 7, 16);
    qp.modify(&a, m).expect("RTS");
}

impl World {
    /// Builds the world (see the module documentation).
    pub fn build(mode: Mode) -> Self {
        let net = match mode {
            Mode::Fuzz | Mode::Live => Net::None,
            Mode::Record => Net::Capture(crate::seeds::capture_path()),
        };
        Self::build_on(Bench::new(3, net), mode)
    }

    /// Builds the world on the functions of `bench` (at least three).
    pub fn build_on(bench: Bench, mode: Mode) -> Self {
        let mut writable = vec![Vec::new(), Vec::new(), Vec::new()];
        let mut a = side(&bench, A, &mut writable[A]);
        let mut b = side(&bench, B, &mut writable[B]);
        let mut c = side(&bench, C, &mut writable[C]);
        b.mrs
            .push(mr(&bench, B, &b.pd, ACCESS_REMOTE_READ, &mut writable[B]));
        b.srq = Some(b.pd.create_srq(32, 4, 0).expect("srq"));
        let gid_a = a.ctx.attr().gid;
        let gid_b = b.ctx.attr().gid;

        // RC: qa <-> qb (B's own RQ), qa2 <-> qb2 (B's SRQ).
        let qa = rc(&a, None);
        let qa2 = rc(&a, None);
        let qb = rc(&b, None);
        let qb2 = rc(&b, b.srq.as_ref());
        connect(&qa, (qb.qp_num(), gid_b), PSN_A, PSN_B);
        connect(&qb, (qa.qp_num(), gid_a), PSN_B, PSN_A);
        connect(&qa2, (qb2.qp_num(), gid_b), PSN_A, PSN_B);
        connect(&qb2, (qa2.qp_num(), gid_a), PSN_B, PSN_A);
        // UD on both; DC from A to B.
        let ua = a.pd.create_ud_qp(&a.cq, &a.cq, caps()).expect("UD QP");
        ua.ud_ready(QKEY, PSN_A).expect("UD ready");
        let ub = b.pd.create_ud_qp(&b.cq, &b.cq, caps()).expect("UD QP");
        ub.ud_ready(QKEY, PSN_B).expect("UD ready");
        let dct =
            b.pd.create_dct(&b.cq, caps(), b.srq.as_ref(), DC_KEY)
                .expect("DCT");
        dct.dct_ready(ACCESS & !ACCESS_LOCAL_WRITE)
            .expect("DCT ready");
        let dci = a.pd.create_dci(&a.cq, caps(), false).expect("DCI");
        dci.dci_ready(20, 7, 16).expect("DCI ready");
        // WQEs may reach qb through its MMIO window too.
        qb.enable_wqe_mmio().expect("MMIO window");
        // C: a QP of its own, connected to nothing the inputs reach.
        let qc = rc(&c, None);

        let mut posted = vec![BTreeSet::new(), BTreeSet::new(), BTreeSet::new()];
        let mut post_recvs =
            |qp: Option<&Qp>, srq: Option<&Srq>, side: usize, mr: &Mr, base: u64| {
                for i in 0..8u64 {
                    let wr = RecvWr {
                        wr_id: base + i,
                        sges: vec![mr.sge(4096 * i as usize, 4096)],
                    };
                    match (qp, srq) {
                        (Some(qp), _) => qp.post_recv(&wr).expect("post a receive"),
                        (None, Some(srq)) => srq.post_recv(&wr).expect("post an SRQ receive"),
                        (None, None) => unreachable!("a receive goes to a QP or an SRQ"),
                    }
                    posted[side].insert(base + i);
                }
            };
        post_recvs(Some(&qb), None, B, &b.mrs[0], 1000);
        post_recvs(None, b.srq.as_ref(), B, &b.mrs[0], 2000);
        post_recvs(Some(&ub), None, B, &b.mrs[0], 3000);
        post_recvs(Some(&qa), None, A, &a.mrs[0], 1000);
        post_recvs(Some(&qa2), None, A, &a.mrs[0], 1100);
        post_recvs(Some(&ua), None, A, &a.mrs[0], 1200);
        post_recvs(Some(&qc), None, C, &c.mrs[0], 1000);

        if mode == Mode::Fuzz {
            bench.functions[A].set_link(false);
        }
        // B's requests to A: in flight (lost on A's pulled cable) while an input runs.
        let a_mr = &a.mrs[0];
        let b_mr = &b.mrs[0];
        let requests = [
            WrOpcode::Send,
            WrOpcode::RdmaWrite {
                remote_addr: a_mr.addr(0x8000),
                rkey: a_mr.rkey(),
            },
            WrOpcode::RdmaRead {
                remote_addr: a_mr.addr(0x9000),
                rkey: a_mr.rkey(),
            },
            WrOpcode::AtomicFetchAdd {
                remote_addr: a_mr.addr(0xa000),
                rkey: a_mr.rkey(),
                add: 3,
            },
        ];
        for (i, opcode) in requests.into_iter().enumerate() {
            let len = if matches!(opcode, WrOpcode::AtomicFetchAdd { .. }) {
                8
            } else {
                3000
            };
            let wr_id = 5000 + i as u64;
            qb.post_send(&SendWr {
                wr_id,
                opcode,
                sges: vec![b_mr.sge(0x8000 + 0x1000 * i, len)],
                signaled: true,
                ..SendWr::default()
            })
            .expect("post B's request");
            posted[B].insert(wr_id);
        }
        bench.settle(64);

        if mode == Mode::Record {
            // A's requests of every kind to each of B's QPs, and B's answers.
            let b_ro = &b.mrs[1];
            let to_b = [
                (WrOpcode::Send, 2000),
                (WrOpcode::SendWithImm(0x1234_5678), 100),
                (
                    WrOpcode::RdmaWriteWithImm {
                        remote_addr: b_mr.addr(0xc000),
                        rkey: b_mr.rkey(),
                        imm: 7,
                    },
                    1500,
                ),
                (
                    WrOpcode::RdmaRead {
                        remote_addr: b_ro.addr(0x100),
                        rkey: b_ro.rkey(),
                    },
                    2500,
                ),
                (
                    WrOpcode::AtomicCmpSwp {
                        remote_addr: b_mr.addr(0xd000),
                        rkey: b_mr.rkey(),
                        compare: 0x5a5a_5a5a_5a5a_5a5a,
                        swap: 1,
                    },
                    8,
                ),
            ];
            for (i, (opcode, len)) in to_b.into_iter().enumerate() {
                let wr = SendWr {
                    wr_id: 6000 + i as u64,
                    opcode,
                    sges: vec![a_mr.sge(0x1000 * i, len)],
                    signaled: true,
                    ..SendWr::default()
                };
                qa.post_send(&wr).expect("post A's request");
                posted[A].extend([6000 + i as u64, 7000 + i as u64, 8000 + i as u64]);
                qa2.post_send(&SendWr {
                    wr_id: 7000 + i as u64,
                    ..wr.clone()
                })
                .expect("post A's request");
                dci.post_dc_send(
                    &SendWr {
                        wr_id: 8000 + i as u64,
                        ..wr
                    },
                    &DcAddress {
                        dctn: dct.qp_num(),
                        dgid: gid_b,
                        dc_key: DC_KEY,
                    },
                )
                .expect("post A's DC request");
            }
            ua.post_ud_send(
                &SendWr {
                    wr_id: 9000,
                    sges: vec![a_mr.sge(0, 512)],
                    signaled: true,
                    ..SendWr::default()
                },
                &UdAddress {
                    dest_qpn: ub.qp_num(),
                    qkey: QKEY_USE_OWN,
                    dgid: gid_b,
                    hop_limit: 0,
                    traffic_class: 0,
                    sgid_index: 0,
                },
            )
            .expect("post A's datagram");
            posted[A].insert(9000);
            bench.settle(256);
        }

        // Last, so that everything above keeps its number and key: UC and windows.
        let uca = uc(&a);
        let ucb = uc(&b);
        connect_uc(&uca, (ucb.qp_num(), gid_b), PSN_A, PSN_B);
        connect_uc(&ucb, (uca.qp_num(), gid_a), PSN_B, PSN_A);
        for i in 0..8u64 {
            let wr = RecvWr {
                wr_id: 4000 + i,
                sges: vec![b.mrs[0].sge(4096 * i as usize, 4096)],
            };
            ucb.post_recv(&wr).expect("post a UC receive");
            posted[B].insert(4000 + i);
        }
        let bindable = mr(&bench, B, &b.pd, ACCESS | ACCESS_MW_BIND, &mut writable[B]);
        b.mrs.push(bindable);
        let remote = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
        for (i, (mw_type, access)) in [(MW_TYPE_1, remote), (MW_TYPE_2, remote | ACCESS_ZERO_BASED)]
            .into_iter()
            .enumerate()
        {
            let mw = b.pd.alloc_mw(mw_type).expect("a memory window");
            let info = BindInfo {
                mr: Some(&b.mrs[2]),
                addr: b.mrs[2].addr(0),
                length: MR_LEN as u64,
                access,
            };
            let wr_id = 4100 + i as u64;
            ucb.post_bind_mw(wr_id, &mw, &info, true)
                .expect("post a bind");
            posted[B].insert(wr_id);
            b.mws.push(mw);
        }
        bench.settle(64);
        if mode == Mode::Record {
            // UC messages to ucb, and WRITEs through B's windows: by qa through the type 1
            // window, by uca through the type 2 one (zero-based) and a SEND and a WRITE
            // with immediate of two packets each.
            let (w1, w2) = (b.mws[0].rkey(), b.mws[1].rkey());
            let writes = [
                (
                    &qa,
                    WrOpcode::RdmaWrite {
                        remote_addr: b.mrs[2].addr(0x200),
                        rkey: w1,
                    },
                ),
                (
                    &uca,
                    WrOpcode::RdmaWrite {
                        remote_addr: 0x300,
                        rkey: w2,
                    },
                ),
                (&uca, WrOpcode::Send),
                (
                    &uca,
                    WrOpcode::RdmaWriteWithImm {
                        remote_addr: b.mrs[0].addr(0xe000),
                        rkey: b.mrs[0].rkey(),
                        imm: 9,
                    },
                ),
            ];
            for (i, (qp, opcode)) in writes.into_iter().enumerate() {
                let wr_id = 9100 + i as u64;
                qp.post_send(&SendWr {
                    wr_id,
                    opcode,
                    sges: vec![a.mrs[0].sge(0x1000 * i, 1500)],
                    signaled: true,
                    ..SendWr::default()
                })
                .expect("post A's request through a window or on UC");
                posted[A].insert(wr_id);
            }
            bench.settle(256);
        }

        a.qps.extend([qa, qa2, ua, dci, uca]);
        b.qps.extend([qb, qb2, ub, dct, ucb]);
        c.qps.push(qc);
        let mut world = World {
            snapshots: Vec::new(),
            bystander: (
                bench.functions[C].rdma_counters(),
                bench.functions[C].stats(),
            ),
            sides: vec![a, b, c],
            bench,
            writable,
            posted,
            completed: vec![BTreeSet::new(), BTreeSet::new(), BTreeSet::new()],
        };
        // Completions of the set-up count too: none may come again.
        world
            .poll_completions(&[A, B, C])
            .expect("set-up completions");
        world.snapshots = world.bench.rams.iter().map(|r| r.snapshot()).collect();
        world
    }

    /// Puts `bytes` on the switch as a frame for B (its MAC written over the first six
    /// bytes: a frame for another MAC never reaches a function), `sealed` (its ICRC as it
    /// is), `resealed` (its ICRC computed, so that the checks after it run) or unsealed
    /// (as a frame of another function of this rnicd, whose ICRC nobody checks).
    pub fn inject_to_b(&self, mut bytes: Vec<u8>, seal: Seal) {
        let mac = self.bench.functions[B].endpoint().mac;
        if bytes.len() >= 6 {
            bytes[..6].copy_from_slice(&mac);
        }
        let frame = match seal {
            Seal::AsIs => Frame::sealed(bytes),
            Seal::Reseal => {
                rnic_device::roce::build::seal(&mut bytes);
                Frame::sealed(bytes)
            }
            Seal::Unsealed => Frame::unsealed(bytes),
        };
        self.bench.inject(frame);
    }

    /// Posts `wqe`, as raw bytes, on B's QP `which` (0: `qb`, RC with an MMIO window; 1:
    /// `qb2`, RC on the SRQ; 2: `ub`, UD; 3: `ucb`, UC), through the window if `by_mmio`
    /// and it is free. Returns the `wr_id` it got, if the driver posted it (not when the queue is
    /// full or the QP in ERR); note it with [`World::note_posted`].
    pub fn post_raw_on_b(
        &self,
        which: usize,
        wr_id: u64,
        wqe: &[u8],
        by_mmio: bool,
    ) -> Option<u64> {
        let qp = &self.sides[B].qps[[0, 1, 2, 4][which % 4]];
        qp.post_raw_send(wr_id, wqe, by_mmio).ok().map(|_| wr_id)
    }

    /// An indirect key over parts of B's two MRs and a pattern key over its writable
    /// one, created as a driver does (with the same numbers in every world, so that seeds
    /// name them), for WQEs to use.
    pub fn b_keys(&self) -> [MemoryKey<'_>; 2] {
        let b = &self.sides[B];
        let ranges = [
            KeyRange {
                mr: &b.mrs[0],
                offset: 0,
                len: 8192,
            },
            KeyRange {
                mr: &b.mrs[1],
                offset: 4096,
                len: 4096,
            },
        ];
        [
            b.pd.create_indirect_key(ACCESS, &ranges)
                .expect("indirect key"),
            b.pd.create_pattern_key(ACCESS, &b.mrs[0], 0x100, 64, 256, 16)
                .expect("pattern key"),
        ]
    }

    /// Notes work requests posted on function `f` outside the set-up.
    pub fn note_posted(&mut self, f: usize, wr_ids: impl IntoIterator<Item = u64>) {
        for wr_id in wr_ids {
            assert!(self.posted[f].insert(wr_id), "wr_id {wr_id} posted twice");
        }
    }

    /// Polls every CQ through the driver; fails on a completion of a work request that
    /// was never posted or already completed.
    fn poll_completions(&mut self, functions: &[usize]) -> Result<(), String> {
        for &f in functions {
            let side = &self.sides[f];
            loop {
                let wcs = side.cq.poll(64);
                if wcs.is_empty() {
                    break;
                }
                for wc in wcs {
                    if !self.posted[f].contains(&wc.wr_id) {
                        return Err(format!(
                            "function {f}: completion of wr_id {} that was never posted: {wc:?}",
                            wc.wr_id
                        ));
                    }
                    if !self.completed[f].insert(wc.wr_id) {
                        return Err(format!(
                            "function {f}: second completion of wr_id {}: {wc:?}",
                            wc.wr_id
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the invariants (see the module documentation) on every function; panics
    /// with what broke.
    pub fn check(&mut self) {
        self.check_completions(&[A, B, C]);
        for f in [A, B, C] {
            self.check_ram(f);
        }
    }

    /// Invariant 3 on `functions`: polls their CQs through the driver.
    pub fn check_completions(&mut self, functions: &[usize]) {
        if let Err(e) = self.poll_completions(functions) {
            panic!("invariant 3 (at most one completion per posted WR): {e}");
        }
    }

    /// Invariant 1 (and for C, 2) on function `f`'s guest RAM.
    pub fn check_ram(&self, f: usize) {
        let ram = &self.bench.rams[f];
        let now = ram.bytes();
        let before = &self.snapshots[f];
        // RAM handed out since the snapshot (by teardown commands) was zero before.
        for (page, x) in now.chunks(4096).enumerate() {
            let base = page * 4096;
            let y = before
                .get(base..(base + 4096).min(before.len()))
                .unwrap_or(&[]);
            if x == y {
                continue;
            }
            for (i, &p) in x.iter().enumerate() {
                let at = base + i;
                let q = y.get(i).copied().unwrap_or(0);
                if p == q {
                    continue;
                }
                let allowed = f != C
                    && match ram.owner(at) {
                        Some(Owner::Driver) => true,
                        Some(Owner::Harness) => {
                            self.writable[f].iter().any(|&(s, e)| (s..e).contains(&at))
                        }
                        None => false,
                    };
                assert!(
                    allowed,
                    "invariant 1 (no write outside what the function registered): function {f} \
                     guest RAM at iova {:#x} ({:?}) changed {q:#04x} -> {p:#04x}",
                    IOVA_BASE + at as u64,
                    ram.owner(at)
                );
            }
        }
        if let Some(at) = ram.untouched_from(now.len()) {
            panic!(
                "invariant 1 (no write outside what the function registered): function {f} \
                 guest RAM at iova {:#x}, never handed out, was written",
                IOVA_BASE + at as u64
            );
        }
    }

    /// Checks that C's counters did not move: for inputs that reach only B (on the
    /// Ethernet port a frame may name C, which then counts it, and must change nothing
    /// else of C's).
    pub fn check_bystander_counters(&self) {
        let c = &self.bench.functions[C];
        assert_eq!(
            (c.rdma_counters(), c.stats()),
            self.bystander,
            "invariant 2: the bystander function's counters changed"
        );
    }

    /// The QP numbers of each side, for tests and seeds.
    pub fn qpns(&self) -> BTreeMap<usize, Vec<u32>> {
        self.sides
            .iter()
            .enumerate()
            .map(|(f, s)| (f, s.qps.iter().map(Qp::qp_num).collect()))
            .collect()
    }
}

/// What happens to a frame's ICRC on its way in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Kept as it is: the receive checks verify it.
    AsIs,
    /// Computed again, so that the checks after the ICRC see the frame.
    Reseal,
    /// Not there: the frame comes as from another function of this rnicd.
    Unsealed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::records;

    #[test]
    fn an_untouched_world_keeps_its_invariants() {
        let mut world = World::build(Mode::Fuzz);
        world.bench.settle(8);
        world.check();
        world.check_bystander_counters();
    }

    #[test]
    #[should_panic(expected = "invariant 1")]
    fn a_write_into_an_mr_guard_is_caught() {
        let mut world = World::build(Mode::Fuzz);
        // The byte before B's writable MR: what a device bug writing one byte too low
        // would change.
        world.sides[B].mrs[0].buffer().write(GUARD - 1, &[0]);
        world.check();
    }

    #[test]
    #[should_panic(expected = "invariant 1")]
    fn a_write_to_the_bystander_is_caught() {
        let mut world = World::build(Mode::Fuzz);
        world.sides[C].mrs[0].write(0, &[1]);
        world.check();
    }

    #[test]
    fn the_recorded_conversation_is_taken_by_b_and_completes_its_requests() {
        let seeds = crate::seeds::recv_seeds();
        let conversation = seeds.last().expect("seeds");
        let mut world = World::build(Mode::Fuzz);
        for r in records(conversation, usize::MAX) {
            world.inject_to_b(r.bytes.to_vec(), r.seal());
            world.bench.step();
        }
        world.bench.settle(16);
        world.check();
        world.check_bystander_counters();
        let counters = world.bench.functions[B].rdma_counters();
        assert_eq!(counters.rx_dropped, 0, "{counters:?}");
        assert!(counters.rx_packets >= 10, "{counters:?}");
        // B's four requests were answered and completed, and receives were consumed: UC's
        // too (a SEND and a WRITE with immediate).
        for wr_id in [5000, 5001, 5002, 5003, 1000, 2000, 3000, 4000, 4001] {
            assert!(
                world.completed[B].contains(&wr_id),
                "wr {wr_id}: {:?}",
                world.completed[B]
            );
        }
    }

    #[test]
    fn the_driver_s_own_wqes_posted_raw_all_complete_and_keep_the_invariants() {
        let seeds = crate::seeds::send_seeds();
        let conversation = seeds.last().expect("seeds");
        let mut world = World::build(Mode::Live);
        let keys = world.b_keys();
        let mut posted = Vec::new();
        for (i, r) in records(conversation, usize::MAX).into_iter().enumerate() {
            let wr_id = 0x5eed_0000 + i as u64;
            posted.extend(world.post_raw_on_b(usize::from(r.flags & 3), wr_id, r.bytes, false));
            world.bench.step();
        }
        world.bench.settle(64);
        drop(keys);
        assert_eq!(posted.len(), 15, "every seed WQE was posted");
        world.note_posted(B, posted.clone());
        world.check();
        for wr_id in posted {
            assert!(
                world.completed[B].contains(&wr_id),
                "wr {wr_id:#x} did not complete"
            );
        }
    }
}
