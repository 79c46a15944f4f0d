//! The RC transport over a bad network: rnicd with `--net-faults` loses, duplicates,
//! reorders and corrupts the frames its switch forwards, and every message between two
//! VFs must still arrive exactly once, in order and intact, every atomic apply once, and
//! every work request complete exactly once with success.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rnic_driver::verbs::{mtu, RecvWr, SendWr, Wc, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::verbs_pair::{connect, pattern, poll_n, side, signaled, PairOptions, Side};
use rnic_tests::wire::pcap_frames;
use rnic_tests::{exit_counter, Rng, Rnicd};

const SPEC: &str = "loss=0.02,dup=0.01,reorder=0.01,corrupt=0.001,seed=7";

/// Work requests kept outstanding, normally.
const WINDOW: u64 = 32;
/// Bytes of each slot a message uses (a message is at most 4 MTUs and a bit).
const SLOT: usize = 8192;
/// Slots of the requester's source and result rings. A slot is reused only once the WR
/// that used it completed (the window < SOURCE_SLOTS, completions come in order).
const SOURCE_SLOTS: usize = 128;
/// Receive slots of the responder, and receives it keeps posted.
const RECV_SLOTS: usize = 256;
const RECVS_POSTED: u64 = 128;
/// WRITE target slots at the responder.
const WRITE_SLOTS: usize = 256;

/// Layout of each side's buffer: what it uses as a requester (sources, results) and
/// as a responder (receives, WRITE targets, the READ region, the atomic words).
const SOURCE: usize = 0;
const RESULT: usize = SOURCE + SOURCE_SLOTS * SLOT;
const RECV: usize = RESULT + SOURCE_SLOTS * SLOT;
const WRITE: usize = RECV + RECV_SLOTS * SLOT;
const READ: usize = WRITE + WRITE_SLOTS * SLOT;
const READ_LEN: usize = 64 << 10;
const FAA: usize = READ + READ_LEN;
const CAS: usize = FAA + 64;
const END: usize = CAS + 64;

/// The bytes of message `seq` of `len` bytes: its sequence number, a checksum of the
/// rest, then a pattern of its own.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut out = pattern(len, seq);
    if len >= 8 {
        out[..4].copy_from_slice(&(seq as u32).to_le_bytes());
        let sum = out[8..].iter().fold(0x811C_9DC5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        out[4..8].copy_from_slice(&sum.to_le_bytes());
    }
    out
}

/// The CMP_AND_SWP chain: the value the word holds after `k` swaps.
fn chain(k: u64) -> u64 {
    k.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ 0x5555
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

/// A message posted and not yet checked off.
#[derive(Debug, Clone, Copy)]
struct Msg {
    seq: u64,
    kind: Kind,
    len: usize,
    /// READ: where in the responder's read region it reads from.
    /// WRITE: which write slot. Atomics: the expected original value.
    arg: u64,
}

fn read_bytes(side: &Side, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    side.mr.read(offset, &mut out);
    out
}

fn read_u64(side: &Side, offset: usize) -> u64 {
    u64::from_le_bytes(read_bytes(side, offset, 8).try_into().unwrap())
}

#[track_caller]
fn check_bytes(what: &str, m: &Msg, got: &[u8], want: &[u8]) {
    if got != want {
        let at = got.iter().zip(want).position(|(x, y)| x != y);
        panic!(
            "{what}: message {m:?}: {} bytes, want {}; first difference at {at:?}; \
             header got {:02x?} want {:02x?}",
            got.len(),
            want.len(),
            &got[..got.len().min(8)],
            &want[..want.len().min(8)]
        );
    }
}

/// Transport counters rnicd logged for `function` when it stopped.
#[derive(Debug, Default)]
struct Counters {
    tx: u64,
    rx: u64,
    dropped: u64,
    retransmits: u64,
    rnr_naks: u64,
}

fn counters(log: &str, function: &str) -> Counters {
    let field = |name| exit_counter(log, function, name);
    Counters {
        tx: field("tx"),
        rx: field("rx"),
        dropped: field("dropped"),
        retransmits: field("retransmits"),
        rnr_naks: field("rnr_naks"),
    }
}

/// How a run goes.
#[derive(Debug, Clone)]
struct Run {
    /// The `--net-faults` spec.
    spec: String,
    /// Messages from vf0 to vf1.
    messages: u64,
    /// Messages from vf1 to vf0 at the same time.
    messages_back: u64,
    /// Receivers post receives a few at a time and late, so that requests meet an empty
    /// receive queue (RNR NAKs) while frames are being lost.
    rnr_pressure: bool,
    /// Seed of the test's own choices (opcodes, sizes).
    seed: u64,
    /// Work requests each requester keeps outstanding (at most the send queue's depth).
    window: u64,
    /// Only READs and atomics.
    rd_atomic_only: bool,
    /// Path MTU code.
    mtu: u8,
    /// First PSN of each side's requester.
    psn: u32,
    /// READs and atomics each requester keeps outstanding.
    max_rd_atomic: u8,
}

/// One direction of traffic: a requester posting mixed work to a responder, and the
/// bookkeeping that checks every completion on both ends.
struct Flow {
    name: &'static str,
    rng: Rng,
    messages: u64,
    posted: u64,
    /// Posted WRs awaiting their completion, in order.
    outstanding: VecDeque<Msg>,
    /// Messages that consume a receive, in order, awaiting the receive's completion.
    to_receive: VecDeque<Msg>,
    recvs_posted: u64,
    recvs_done: u64,
    completed: u64,
    faa_sum: u64,
    cas_done: u64,
    kinds: [u64; 7],
    bytes: u64,
    last_write: Vec<Option<Msg>>,
    read_region: Vec<u8>,
    rnr_pressure: bool,
    last_refill: Instant,
    window: u64,
    rd_atomic_only: bool,
}

impl Flow {
    fn new(name: &'static str, messages: u64, seed: u64, run: &Run, resp: &Side) -> Self {
        let read_region = payload(seed ^ u64::MAX, READ_LEN);
        resp.mr.write(READ, &read_region);
        resp.mr.write(FAA, &0u64.to_le_bytes());
        resp.mr.write(CAS, &chain(0).to_le_bytes());
        let mut f = Self {
            name,
            rng: Rng(seed | 1),
            messages,
            posted: 0,
            outstanding: VecDeque::new(),
            to_receive: VecDeque::new(),
            recvs_posted: 0,
            recvs_done: 0,
            completed: 0,
            faa_sum: 0,
            cas_done: 0,
            kinds: [0; 7],
            bytes: 0,
            last_write: vec![None; WRITE_SLOTS],
            read_region,
            rnr_pressure: run.rnr_pressure,
            last_refill: Instant::now(),
            window: run.window,
            rd_atomic_only: run.rd_atomic_only,
        };
        f.post_recvs(resp);
        f
    }

    fn done(&self) -> bool {
        self.completed == self.messages && self.to_receive.is_empty()
    }

    /// Keeps the responder's receive queue full or, under RNR pressure, refills it with
    /// a few receives once it is empty and a while has passed.
    fn post_recvs(&mut self, resp: &Side) {
        let target = if self.rnr_pressure {
            let empty = self.recvs_posted == self.recvs_done;
            if !empty || self.last_refill.elapsed() < Duration::from_micros(500) {
                return;
            }
            self.last_refill = Instant::now();
            1 + self.rng.below(4)
        } else {
            RECVS_POSTED
        };
        let mut wrs = Vec::new();
        while self.recvs_posted - self.recvs_done < target {
            let slot = (self.recvs_posted as usize) % RECV_SLOTS;
            wrs.push(RecvWr {
                wr_id: self.recvs_posted,
                sges: vec![resp.mr.sge(RECV + slot * SLOT, SLOT)],
            });
            self.recvs_posted += 1;
        }
        resp.qp.post_recv_list(&wrs).expect("post_recv");
    }

    /// Keeps the window full.
    fn post(&mut self, req: &Side, resp: &Side) {
        while self.posted < self.messages && self.posted - self.completed < self.window {
            let seq = self.posted;
            let rng = &mut self.rng;
            let first = if self.rd_atomic_only { 70 } else { 0 };
            let kind = match first + rng.below(100 - first) {
                0..=24 => Kind::Send,
                25..=39 => Kind::SendImm,
                40..=59 => Kind::Write,
                60..=69 => Kind::WriteImm,
                70..=84 => Kind::Read,
                85..=92 => Kind::FetchAdd,
                _ => Kind::CmpSwap,
            };
            // Mostly small; some up to one MTU; a few of several MTUs (the MTU is 1024).
            let len = match rng.below(100) {
                0..=69 => rng.below(257) as usize,
                70..=89 => 257 + rng.below(768) as usize,
                _ => 1025 + rng.below(3 * 1024 + 100) as usize,
            };
            let slot = (seq as usize) % SOURCE_SLOTS;
            let source = SOURCE + slot * SLOT;
            let result = RESULT + slot * SLOT;
            let data = payload(seq, len);
            let inline = matches!(kind, Kind::Send | Kind::SendImm | Kind::Write)
                && len <= 64
                && rng.below(2) == 0;
            let mut m = Msg {
                seq,
                kind,
                len,
                arg: 0,
            };
            let remote = |offset: usize| resp.mr.addr(offset);
            let rkey = resp.mr.rkey();
            let imm = imm_of(seq);
            let (opcode, sges) = match kind {
                Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                    req.mr.write(source, &data);
                    let write_slot = (seq as usize) % WRITE_SLOTS;
                    m.arg = write_slot as u64;
                    let to = remote(WRITE + write_slot * SLOT);
                    let opcode = match kind {
                        Kind::Send => WrOpcode::Send,
                        Kind::SendImm => WrOpcode::SendWithImm(imm),
                        Kind::Write => WrOpcode::RdmaWrite {
                            remote_addr: to,
                            rkey,
                        },
                        _ => WrOpcode::RdmaWriteWithImm {
                            remote_addr: to,
                            rkey,
                            imm,
                        },
                    };
                    // Some messages are gathered from two pieces.
                    let sges = if len > 1 && rng.below(4) == 0 {
                        let cut = 1 + rng.below(len as u64 - 1) as usize;
                        vec![req.mr.sge(source, cut), req.mr.sge(source + cut, len - cut)]
                    } else {
                        vec![req.mr.sge(source, len)]
                    };
                    (opcode, sges)
                }
                Kind::Read => {
                    req.mr.write(result, &vec![0xEE; len]);
                    let from = rng.below((READ_LEN - len) as u64 + 1) as usize;
                    m.arg = from as u64;
                    (
                        WrOpcode::RdmaRead {
                            remote_addr: remote(READ + from),
                            rkey,
                        },
                        vec![req.mr.sge(result, len)],
                    )
                }
                Kind::FetchAdd => {
                    m.len = 8;
                    m.arg = self.faa_sum;
                    let add = 1 + seq;
                    self.faa_sum += add;
                    req.mr.write(result, &[0xEE; 8]);
                    (
                        WrOpcode::AtomicFetchAdd {
                            remote_addr: remote(FAA),
                            rkey,
                            add,
                        },
                        vec![req.mr.sge(result, 8)],
                    )
                }
                Kind::CmpSwap => {
                    m.len = 8;
                    m.arg = chain(self.cas_done);
                    self.cas_done += 1;
                    req.mr.write(result, &[0xEE; 8]);
                    (
                        WrOpcode::AtomicCmpSwp {
                            remote_addr: remote(CAS),
                            rkey,
                            compare: chain(self.cas_done - 1),
                            swap: chain(self.cas_done),
                        },
                        vec![req.mr.sge(result, 8)],
                    )
                }
            };
            let wr = SendWr {
                wr_id: seq,
                opcode,
                sges: if inline { Vec::new() } else { sges },
                inline: inline.then_some(data),
                signaled: true,
                // Some wait for the READs and atomics before them.
                fence: self.rng.below(20) == 0,
                ..SendWr::default()
            };
            req.qp.post_send(&wr).expect("post_send");
            if matches!(kind, Kind::Send | Kind::SendImm | Kind::WriteImm) {
                self.to_receive.push_back(m);
            }
            self.outstanding.push_back(m);
            self.posted += 1;
        }
    }

    /// A completion of the requester: each WR once, in order, with success; READ and
    /// atomic results right; WRITE data placed.
    fn on_send_completion(&mut self, wc: &Wc, req: &Side, resp: &Side) {
        let name = self.name;
        let m = self.outstanding.pop_front().unwrap_or_else(|| {
            panic!("{name}: a send completion with nothing outstanding: {wc:?}")
        });
        assert_eq!(
            (wc.wr_id, wc.status),
            (m.seq, Ok(WcStatus::Success)),
            "{name}: completion {wc:?} ({}) for message {m:?}",
            wc.status_str()
        );
        let slot = (m.seq as usize) % SOURCE_SLOTS;
        let result = RESULT + slot * SLOT;
        let want_opcode = match m.kind {
            Kind::Send | Kind::SendImm => WcOpcode::Send,
            Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::FetchAdd => WcOpcode::FetchAdd,
            Kind::CmpSwap => WcOpcode::CompSwap,
        };
        assert_eq!(wc.opcode, want_opcode, "{name}: {m:?}");
        match m.kind {
            Kind::Write | Kind::WriteImm => {
                self.last_write[m.arg as usize] = Some(m);
                // Acknowledged means placed.
                let at = WRITE + m.arg as usize * SLOT;
                check_bytes(
                    "WRITE data at the responder",
                    &m,
                    &read_bytes(resp, at, m.len),
                    &payload(m.seq, m.len),
                );
            }
            Kind::Read => {
                assert_eq!(wc.byte_len as usize, m.len, "{name}: {m:?}");
                let from = m.arg as usize;
                check_bytes(
                    "READ data",
                    &m,
                    &read_bytes(req, result, m.len),
                    &self.read_region[from..from + m.len],
                );
            }
            Kind::FetchAdd | Kind::CmpSwap => {
                assert_eq!(wc.byte_len, 8);
                assert_eq!(
                    read_u64(req, result),
                    m.arg,
                    "{name}: {m:?}: the original value returned"
                );
            }
            Kind::Send | Kind::SendImm => {}
        }
        self.kinds[m.kind as usize] += 1;
        self.bytes += m.len as u64;
        self.completed += 1;
    }

    /// A receive completion at the responder: one per SEND or WRITE with immediate, in
    /// order, with the right length, immediate and bytes.
    fn on_recv_completion(&mut self, wc: &Wc, resp: &Side) {
        let name = self.name;
        let m = self
            .to_receive
            .pop_front()
            .unwrap_or_else(|| panic!("{name}: a receive completion for no message: {wc:?}"));
        assert_eq!(
            (wc.wr_id, wc.status),
            (self.recvs_done, Ok(WcStatus::Success)),
            "{name}: receive {wc:?} ({}) for message {m:?}",
            wc.status_str()
        );
        let imm = imm_of(m.seq);
        let (want_opcode, want_imm) = match m.kind {
            Kind::Send => (WcOpcode::Recv, None),
            Kind::SendImm => (WcOpcode::Recv, Some(imm)),
            _ => (WcOpcode::RecvRdmaWithImm, Some(imm)),
        };
        assert_eq!(
            (wc.opcode, wc.imm_data, wc.byte_len as usize),
            (want_opcode, want_imm, m.len),
            "{name}: receive {wc:?} for message {m:?}"
        );
        if m.kind != Kind::WriteImm {
            let slot = (self.recvs_done as usize) % RECV_SLOTS;
            check_bytes(
                "SEND data",
                &m,
                &read_bytes(resp, RECV + slot * SLOT, m.len),
                &payload(m.seq, m.len),
            );
        }
        self.recvs_done += 1;
    }

    /// The end state at the responder: each atomic applied exactly once, and the last
    /// WRITE of every slot still there (no stale duplicate landed later).
    fn check_end(&self, resp: &Side) {
        assert!(
            self.to_receive.is_empty(),
            "{}: {} receives missing",
            self.name,
            self.to_receive.len()
        );
        assert_eq!(
            read_u64(resp, FAA),
            self.faa_sum,
            "{}: the FETCH_AND_ADD counter",
            self.name
        );
        assert_eq!(
            read_u64(resp, CAS),
            chain(self.cas_done),
            "{}: the CMP_AND_SWP chain",
            self.name
        );
        for (slot, m) in self.last_write.iter().enumerate() {
            if let Some(m) = m {
                check_bytes(
                    "the last WRITE of a slot, at the end",
                    m,
                    &read_bytes(resp, WRITE + slot * SLOT, m.len),
                    &payload(m.seq, m.len),
                );
            }
        }
    }

    fn summary(&self) -> String {
        let k = &self.kinds;
        format!(
            "{}: {} messages, {} bytes (SEND {} SEND_IMM {} WRITE {} WRITE_IMM {} READ {} \
             FAA {} CAS {})",
            self.name, self.completed, self.bytes, k[0], k[1], k[2], k[3], k[4], k[5], k[6]
        )
    }
}

fn imm_of(seq: u64) -> u32 {
    seq as u32 ^ 0xA5A5_0000
}

/// Runs `run` on a fresh rnicd; returns the transport counters of vf0 and vf1.
fn run(run: &Run) -> (Counters, Counters) {
    let started = Instant::now();
    let mut rnicd = Rnicd::start(2, &["--net-faults", &run.spec]);
    let o = PairOptions {
        buf_len: END.next_multiple_of(4096),
        // 4.096 µs * 2^10 = 4 ms: losses the NAKs do not reveal are found quickly.
        timeout: 10,
        mtu: run.mtu,
        max_rd_atomic: run.max_rd_atomic,
        ..PairOptions::default()
    };
    let a = side(&rnicd.socket("vf0"), &o);
    let b = side(&rnicd.socket("vf1"), &o);
    connect(&a, &b, &o, run.psn, run.psn ^ 0x80);
    let mut ab = Flow::new("vf0->vf1", run.messages, run.seed, run, &b);
    let mut ba = Flow::new("vf1->vf0", run.messages_back, !run.seed, run, &a);
    let mut last_progress = Instant::now();
    while !(ab.done() && ba.done()) {
        ab.post(&a, &b);
        ba.post(&b, &a);
        let mut progress = false;
        // One CQ per side takes its requester's and its responder's completions.
        for wc in a.cq.poll(64) {
            progress = true;
            if wc.is_recv() {
                ba.on_recv_completion(&wc, &a);
            } else {
                ab.on_send_completion(&wc, &a, &b);
            }
        }
        for wc in b.cq.poll(64) {
            progress = true;
            if wc.is_recv() {
                ab.on_recv_completion(&wc, &b);
            } else {
                ba.on_send_completion(&wc, &b, &a);
            }
        }
        ab.post_recvs(&b);
        ba.post_recvs(&a);
        if progress {
            last_progress = Instant::now();
        } else {
            assert!(
                last_progress.elapsed() < Duration::from_secs(20),
                "stuck: {} of {} posted, {} receives; next {:?} / {} of {} posted, {} \
                 receives; next {:?}",
                ab.completed,
                ab.posted,
                ab.recvs_done,
                ab.outstanding.front(),
                ba.completed,
                ba.posted,
                ba.recvs_done,
                ba.outstanding.front(),
            );
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let moved = started.elapsed();
    // Nothing more completes on either side.
    std::thread::sleep(Duration::from_millis(100));
    let extra_a = a.cq.poll(16);
    let extra_b = b.cq.poll(16);
    assert!(
        extra_a.is_empty() && extra_b.is_empty(),
        "{extra_a:?} {extra_b:?}"
    );
    ab.check_end(&b);
    ba.check_end(&a);

    // The counters are logged at exit, and must be read while the clients are still
    // attached (a function's reset clears them); with rnicd gone, the sides cannot
    // destroy their objects, so they are left to the end of the process.
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget(a);
    std::mem::forget(b);
    let log = rnicd.log();
    let vf0 = counters(&log, "vf0");
    let vf1 = counters(&log, "vf1");
    eprintln!("{} in {moved:?} through {}", ab.summary(), run.spec);
    if run.messages_back > 0 {
        eprintln!("{}", ba.summary());
    }
    for (name, c) in [("vf0", &vf0), ("vf1", &vf1)] {
        eprintln!(
            "{name}: tx {} rx {} dropped {} retransmits {} rnr_naks {}",
            c.tx, c.rx, c.dropped, c.retransmits, c.rnr_naks
        );
    }
    if let Some(line) = log.lines().find(|l| l.contains("network faults: sent")) {
        eprintln!("{line}");
    }
    (vf0, vf1)
}

impl Default for Run {
    fn default() -> Self {
        Self {
            spec: SPEC.into(),
            messages: 10_000,
            messages_back: 0,
            rnr_pressure: false,
            seed: 0x0123_4567_89AB_CDEF,
            window: WINDOW,
            rd_atomic_only: false,
            mtu: mtu::MTU_1024,
            psn: 0x100,
            max_rd_atomic: 16,
        }
    }
}

/// The runs go one at a time: on two cores, runs side by side could starve each
/// other's engines for longer than the retry counters allow.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_alone(r: &Run) -> (Counters, Counters) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    run(r)
}

#[test]
fn every_message_arrives_once_in_order_through_loss_dup_reorder_and_corruption() {
    let r = Run::default();
    let (vf0, vf1) = run_alone(&r);
    // The faults showed: requests were sent again, and corrupt frames were dropped.
    assert!(vf0.retransmits > 0, "{vf0:?}");
    assert!(
        vf0.tx > r.messages && vf1.rx > r.messages,
        "{vf0:?} {vf1:?}"
    );
    assert!(vf0.dropped + vf1.dropped > 0, "{vf0:?} {vf1:?}");
}

/// Only READs and atomics, with up to 120 WRs outstanding: while one waits for a lost
/// answer, the ones behind it are answered, and more go out. The responder answers a
/// duplicate only from the answers it kept for its last max_dest_rd_atomic requests,
/// so the requester must not have more than that many unretired at once.
#[test]
fn reads_and_atomics_whose_answers_are_lost_are_answered_again() {
    let r = Run {
        messages: 5000,
        window: 120,
        rd_atomic_only: true,
        ..Run::default()
    };
    let (vf0, _) = run_alone(&r);
    assert!(vf0.retransmits > 0, "{vf0:?}");
}

/// Both directions at once, harsher faults, a 256-byte MTU (messages of up to 17
/// packets), PSNs that wrap, fenced WRs, and receivers that often have no receive posted
/// (RNR NAKs among the losses).
#[test]
fn both_directions_with_rnr_small_mtu_and_psn_wrap() {
    let r = Run {
        spec: "loss=0.05,dup=0.05,reorder=0.05,corrupt=0.01,seed=8".into(),
        messages: 2000,
        messages_back: 2000,
        rnr_pressure: true,
        window: 64,
        mtu: mtu::MTU_256,
        psn: 0xFF_FE00,
        ..Run::default()
    };
    let (vf0, vf1) = run_alone(&r);
    for c in [&vf0, &vf1] {
        assert!(c.retransmits > 0 && c.rnr_naks > 0, "{c:?}");
    }
}

/// The signed distance from PSN `b` to PSN `a` (24 bits, wrapping).
fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// 1 MiB WRITEs through a lossy switch, as the capture shows them: never more than the
/// 128-PSN window past the last PSN acknowledged, AckReq on every 32nd packet and the
/// last, far fewer ACKs than packets, and after a loss a resend from the first
/// unacknowledged PSN on, never of an acknowledged one (not from the message's start).
#[test]
fn long_messages_go_out_in_windows_and_resend_only_what_was_not_acknowledged() {
    const MSG: usize = 1 << 20;
    const PKTS: u32 = 1024;
    const MESSAGES: u32 = 4;
    const START: u32 = 0xFF_FC00;
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("switch.pcap");
    let pcap_arg = pcap.to_str().expect("utf-8 path");
    let rnicd = Rnicd::start(
        2,
        &["--net-faults", "loss=0.01,seed=11", "--pcap", pcap_arg],
    );
    let o = PairOptions {
        buf_len: 2 * MSG,
        timeout: 10,
        ..PairOptions::default()
    };
    let a = side(&rnicd.socket("vf0"), &o);
    let b = side(&rnicd.socket("vf1"), &o);
    connect(&a, &b, &o, START, 0x10);
    for m in 0..MESSAGES {
        let data = pattern(MSG, u64::from(m));
        a.mr.write(0, &data);
        let wr = signaled(
            u64::from(m),
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(0),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, MSG)],
        );
        a.qp.post_send(&wr).expect("post_send");
        let wcs = poll_n(&a.cq, 1, Duration::from_secs(30));
        assert_eq!(wcs.len(), 1, "message {m} not completed");
        assert_eq!(wcs[0].status, Ok(WcStatus::Success), "{:?}", wcs[0]);
        assert!(read_bytes(&b, 0, MSG) == data, "message {m}: data differs");
    }

    // Every frame is in the capture once it was delivered (lost ones never are).
    let frames = pcap_frames(&std::fs::read(&pcap).expect("pcap"));
    let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
    let mut acked_end = START;
    let (mut requests, mut acks, mut resends) = (0u32, 0u32, 0u32);
    let mut seen = std::collections::HashSet::new();
    for (i, f) in frames.iter().enumerate() {
        let opcode = f[42];
        let dest_qp = u32::from_be_bytes([0, f[47], f[48], f[49]]);
        let ack_req = f[50] & 0x80 != 0;
        let psn = u32::from_be_bytes([0, f[51], f[52], f[53]]);
        if dest_qp == qb && (0x06..=0x0A).contains(&opcode) {
            requests += 1;
            let ahead = psn_diff(psn, acked_end);
            assert!(
                (0..128).contains(&ahead),
                "frame {i}: PSN {psn:#x} is {ahead} past the last acknowledged"
            );
            let k = psn_diff(psn, START) as u32 % PKTS;
            if (k + 1).is_multiple_of(32) {
                assert!(
                    ack_req,
                    "frame {i}: packet {k} of its message without AckReq"
                );
            }
            if !seen.insert(psn) {
                resends += 1;
            }
        } else if dest_qp == qa && opcode == 0x11 {
            acks += 1;
            // An ACK acknowledges its PSN, a NAK (RNR or other) the ones before.
            let end = if f[54] >> 5 == 0 {
                psn.wrapping_add(1) & 0xFF_FFFF
            } else {
                psn
            };
            if psn_diff(end, acked_end) > 0 {
                acked_end = end;
            }
        }
    }
    eprintln!("{requests} request frames ({resends} resent), {acks} ACK frames");
    assert!(
        requests >= PKTS * MESSAGES * 98 / 100,
        "{requests} requests"
    );
    assert!(resends > 0, "the losses cost resends");
    assert!(acks * 8 < requests, "{acks} ACKs for {requests} packets");
    assert_eq!(psn_diff(acked_end, START), (PKTS * MESSAGES) as i32);
}

/// For exploring: FAULTS_SPEC, FAULTS_MESSAGES, FAULTS_BACK, FAULTS_RNR=1, FAULTS_SEED,
/// FAULTS_WINDOW, FAULTS_RDATOMIC=1, FAULTS_MTU (a code: 1 is 256 bytes), FAULTS_PSN (hex),
/// FAULTS_RDMAX.
#[test]
#[ignore = "explores with settings from the environment"]
fn explore() {
    let env = |k: &str| std::env::var(k).ok();
    let d = Run::default();
    run_alone(&Run {
        spec: env("FAULTS_SPEC").unwrap_or(d.spec),
        messages: env("FAULTS_MESSAGES").map_or(d.messages, |v| v.parse().unwrap()),
        messages_back: env("FAULTS_BACK").map_or(0, |v| v.parse().unwrap()),
        rnr_pressure: env("FAULTS_RNR").is_some_and(|v| v == "1"),
        seed: env("FAULTS_SEED").map_or(d.seed, |v| v.parse().unwrap()),
        window: env("FAULTS_WINDOW").map_or(d.window, |v| v.parse().unwrap()),
        rd_atomic_only: env("FAULTS_RDATOMIC").is_some_and(|v| v == "1"),
        mtu: env("FAULTS_MTU").map_or(d.mtu, |v| v.parse().unwrap()),
        psn: env("FAULTS_PSN").map_or(d.psn, |v| u32::from_str_radix(&v, 16).unwrap()),
        max_rd_atomic: env("FAULTS_RDMAX").map_or(d.max_rd_atomic, |v| v.parse().unwrap()),
    });
}
