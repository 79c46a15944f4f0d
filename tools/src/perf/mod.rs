//! rnic-perf: perftest-style bandwidth and latency tests between two rnic functions, with
//! the machine's own limits measured in the same run as baselines (README, "Benchmarks";
//! docs/performance.md for what the figures mean).
//!
//! One process opens both functions (two functions of one rnicd, two rnicd over UDP, or two
//! functions of one VM) and drives both ends of every connection, so no rendezvous is
//! needed and both ends see the same clock. Each test connects `qps` RC QP pairs:
//!
//! - bandwidth (`write_bw`, `read_bw`, `send_bw`): the local end keeps up to `tx_depth`
//!   work requests in flight on every QP, signalling one in [`signal_every`]; `send_bw`'s
//!   remote end keeps receives posted. Bandwidth counts completed messages; the peak is the
//!   best window of [`PEAK_WINDOW`].
//! - latency (`write_lat`, `send_lat`): one QP, one message in flight, each end answering
//!   the other's message (a WRITE is seen by polling the last byte of the target buffer, a
//!   SEND by its receive completion); the figure is half of each round trip, as perftest's.
//!   `atomic_lat` reports the whole round trip of one FETCH_AND_ADD, as perftest's.
//!
//! With `check`, messages come from distinct buffer slots with distinct contents, and every
//! byte that arrived is compared (WRITEs and READs after the run, SENDs as they arrive,
//! atomics by their fetched values); the run fails on the first difference.
//!
//! With `events` (perftest's `-e`), the driver sleeps on the completion interrupt instead
//! of spinning on the CQ: it arms the CQ, polls once more, and waits on the MSI-X
//! eventfd, so that on a machine with few cores rnicd's engine threads have them. A
//! WRITE raises no completion at its target, so `write_lat` with events sends RDMA
//! WRITE with immediate, whose receive completion wakes the other end.
//!
//! [`pairs::run`] runs a bandwidth test on several pairs of functions at once, each pair
//! driven by its own thread, and reports each pair and their sum.

mod baseline;
pub mod pairs;
pub mod perftest;
mod report;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use rnic_driver::error::Error as DriverError;
use rnic_driver::transport::vfio_user::{VfioUserOptions, VfioUserTransport};
use rnic_driver::transport::Transport;
use rnic_driver::verbs::{self, Context, Cq, Mr, Pd, Qp, QpCaps, RecvWr, SendWr, Wc, WrOpcode};
use rnic_driver::{Device, Location};

pub use baseline::Baseline;
pub use report::{Report, SizeResult};
pub use stats::Latency;

/// What can stop a run.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The configuration cannot be run.
    #[error("{0}")]
    Config(String),
    /// The driver or the device failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A work request failed, data differed, or nothing moved for too long.
    #[error("{0}")]
    Failed(String),
    /// A baseline could not be measured.
    #[error("baseline: {0}")]
    Baseline(#[from] std::io::Error),
}

/// Result of a run.
pub type Result<T> = std::result::Result<T, PerfError>;

/// The shortest window the peak bandwidth is taken over.
pub const PEAK_WINDOW: Duration = Duration::from_millis(5);
/// Longest a test waits without any completion before it gives up.
const STALL: Duration = Duration::from_secs(10);
/// Longest one sleep on a completion interrupt lasts (events mode) before the test looks
/// at its CQs and its stall deadline again.
const EVENT_WAIT: Duration = Duration::from_millis(100);
/// Bytes of buffer per QP and direction that checking mode gives its slots, at most.
const CHECK_SLOT_BYTES: usize = 16 << 20;

/// A perftest test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// RDMA WRITE bandwidth.
    WriteBw,
    /// RDMA READ bandwidth.
    ReadBw,
    /// SEND bandwidth.
    SendBw,
    /// RDMA WRITE ping-pong latency.
    WriteLat,
    /// SEND ping-pong latency.
    SendLat,
    /// FETCH_AND_ADD latency.
    AtomicLat,
}

impl Test {
    /// Every test, in the order the names are listed.
    pub const ALL: [Test; 6] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::SendLat,
        Test::AtomicLat,
    ];

    /// The test's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::SendBw => "send_bw",
            Test::WriteLat => "write_lat",
            Test::SendLat => "send_lat",
            Test::AtomicLat => "atomic_lat",
        }
    }

    /// The test called `name`.
    pub fn from_name(name: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether it measures bandwidth (else latency).
    pub fn is_bandwidth(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }
}

/// The message sizes `--all` runs: powers of two from 2 bytes to 1 MiB.
pub fn all_sizes() -> Vec<usize> {
    (1..=20).map(|p| 1usize << p).collect()
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The function whose QPs post the work.
    pub local: Location,
    /// The function at the other end.
    pub remote: Location,
    /// The test.
    pub test: Test,
    /// Message sizes, each measured in turn.
    pub sizes: Vec<usize>,
    /// Messages per QP for bandwidth tests, round trips for latency tests.
    pub iters: u64,
    /// Run each size for this long instead of `iters` (bandwidth tests).
    pub duration: Option<Duration>,
    /// QP pairs (bandwidth tests).
    pub qps: usize,
    /// Work requests in flight per QP (bandwidth tests).
    pub tx_depth: u32,
    /// Messages up to this many bytes go inline in the WQE (WRITE and SEND).
    pub inline: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Compare every byte that arrived.
    pub check: bool,
    /// Measure the baselines too.
    pub baselines: bool,
    /// How long each baseline throughput measurement runs.
    pub baseline_time: Duration,
    /// Runs of each size (and of its baselines); the report gives the median run.
    pub repeat: usize,
    /// Sleep on completion interrupts instead of spinning on the CQs (perftest's `-e`).
    pub events: bool,
}

/// The run with the median figure: average bandwidth, or median latency.
fn median_run(mut runs: Vec<SizeResult>) -> SizeResult {
    let key = |r: &SizeResult| match (&r.bandwidth, &r.latency) {
        (Some(bw), _) => bw.avg_mib_s,
        (None, Some(l)) => l.median_us,
        (None, None) => 0.0,
    };
    runs.sort_by(|x, y| key(x).total_cmp(&key(y)));
    runs.swap_remove(runs.len() / 2)
}

/// Which work request of a run is signalled: one in this many, and the last.
pub fn signal_every(tx_depth: u32) -> u64 {
    u64::from((tx_depth / 4).max(1))
}

/// One end of the test: a function and its objects. Fields drop in order, users first.
struct End {
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    cq: Cq,
    /// Held so that it outlives the QPs and MRs.
    _pd: Pd,
    ctx: Context,
}

/// How each QP's buffer is cut: `slots` source slots, then `slots` destination slots, of
/// `slot` bytes each.
#[derive(Clone, Copy, Debug)]
struct Layout {
    slot: usize,
    slots: usize,
}

impl Layout {
    fn src(&self, i: u64) -> usize {
        (i % self.slots as u64) as usize * self.slot
    }
    fn dst(&self, i: u64) -> usize {
        (self.slots + (i % self.slots as u64) as usize) * self.slot
    }
    fn bytes(&self) -> usize {
        2 * self.slots * self.slot
    }
}

fn open(location: &Location, memory: usize) -> Result<Context> {
    let transport: Box<dyn Transport> = match location {
        Location::VfioUser(path) => Box::new(VfioUserTransport::connect_with(
            path,
            &VfioUserOptions {
                memory,
                ..Default::default()
            },
        )?),
        Location::Pci(bdf) => rnic_driver::transport::open_pci(bdf)?,
    };
    Ok(Context::new(Device::open(transport)?)?)
}

/// The path MTU code of `mtu` bytes (the ABI's table).
fn mtu_code(mtu: u32) -> Result<u8> {
    rnic_abi::verbs::mtu_code(mtu)
        .ok_or_else(|| PerfError::Config(format!("path MTU {mtu}: {}", crate::rc::mtu_choices())))
}

/// Deterministic bytes from rnic's seeded generator ([`rnic_abi::rng`]): the same `seed`
/// gives the same bytes, and different seeds different ones. Checking mode fills its
/// slots with them; the tests use them for the data they move.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0; len];
    rnic_abi::rng::Rng::new(seed).fill(&mut bytes);
    bytes
}

/// The pattern checking mode fills slot `slot` of QP `qp` with.
fn slot_pattern(qp: usize, slot: usize, len: usize) -> Vec<u8> {
    pattern(len, (qp as u64) << 32 | slot as u64)
}

impl End {
    fn new(ctx: Context, qps: usize, layout: Layout, caps: QpCaps, cqe: u32) -> Result<End> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cqe)?;
        let mut mrs = Vec::with_capacity(qps);
        let mut qp_list = Vec::with_capacity(qps);
        for _ in 0..qps {
            let buf = Arc::new(ctx.device().transport().alloc_dma(layout.bytes())?);
            mrs.push(pd.reg_mr(buf, 0, layout.bytes(), verbs::ACCESS_ALL)?);
            qp_list.push(pd.create_qp(&cq, &cq, caps, false)?);
        }
        Ok(End {
            qps: qp_list,
            mrs,
            cq,
            _pd: pd,
            ctx,
        })
    }

    fn gid(&self) -> [u8; 16] {
        self.ctx.attr().gid
    }
}

/// Connects QP i of `a` with QP i of `b`.
fn connect(a: &End, b: &End, mtu: u8, depth: u32) -> Result<()> {
    let rd_atomic = depth.min(16) as u8;
    for (qa, qb) in a.qps.iter().zip(&b.qps) {
        for (me, peer, peer_gid) in [(qa, qb, b.gid()), (qb, qa, a.gid())] {
            let (at, m) = verbs::init_attr(verbs::ACCESS_ALL & !verbs::ACCESS_LOCAL_WRITE);
            me.modify(&at, m)?;
            let (at, m) = verbs::rtr_attr(peer.qp_num(), peer_gid, 0, mtu, rd_atomic, 1);
            me.modify(&at, m)?;
        }
        for me in [qa, qb] {
            let (at, m) = verbs::rts_attr(0, 14, 7, 7, rd_atomic);
            me.modify(&at, m)?;
        }
    }
    Ok(())
}

fn failed(what: &str, wc: &Wc) -> PerfError {
    PerfError::Failed(format!(
        "{what}: work request {:#x} on QP {:#x} completed with {}",
        wc.wr_id,
        wc.qp_num,
        wc.status_str()
    ))
}

fn stalled(what: &str) -> PerfError {
    PerfError::Failed(format!(
        "{what}: no progress for {} s; is rnicd running, and the link between the two \
             functions up? (RUST_LOG=debug on rnicd shows the packets)",
        STALL.as_secs()
    ))
}

fn mismatch(what: &str, qp: usize, slot: u64) -> PerfError {
    PerfError::Failed(format!(
        "{what}: data check failed on QP {qp}, message slot {slot}: the bytes that arrived \
         differ from the bytes sent"
    ))
}

/// What a configuration needs, worked out before anything is opened.
#[derive(Clone, Copy, Debug)]
struct Plan {
    qps: usize,
    mtu: u8,
    layout: Layout,
    caps: QpCaps,
    cqe: u32,
    /// Bytes of DMA memory each end asks its transport for.
    memory: usize,
}

impl Plan {
    /// Checks `cfg` and sizes the ends for it.
    fn of(cfg: &Config) -> Result<Plan> {
        if cfg.sizes.is_empty() || cfg.sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
            return Err(PerfError::Config(
                "message sizes must be between 1 byte and 1 GiB".into(),
            ));
        }
        if cfg.test == Test::AtomicLat && cfg.sizes.iter().any(|&s| s != 8) {
            return Err(PerfError::Config(
                "atomic_lat moves 8 bytes per operation: use --size 8".into(),
            ));
        }
        let qps = if cfg.test.is_bandwidth() { cfg.qps } else { 1 };
        if qps == 0 || cfg.tx_depth == 0 || cfg.iters == 0 {
            return Err(PerfError::Config(
                "--qps, --tx-depth and --iters must be at least 1".into(),
            ));
        }
        let mtu = mtu_code(cfg.mtu)?;
        let max_size = *cfg.sizes.iter().max().expect("not empty");
        let depth = cfg.tx_depth;
        let slots = if cfg.check && cfg.test.is_bandwidth() {
            (depth as usize).min((CHECK_SLOT_BYTES / max_size).max(1))
        } else {
            1
        };
        let layout = Layout {
            slot: max_size.next_multiple_of(64),
            slots,
        };
        Ok(Plan {
            qps,
            mtu,
            layout,
            memory: qps * layout.bytes().next_multiple_of(4096) + (64 << 20),
            caps: QpCaps {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: cfg.inline,
            },
            cqe: (qps as u32 * depth * 2).next_power_of_two().max(64),
        })
    }

    /// Opens both ends of `cfg`, connects their QPs and fills the source slots.
    fn open(&self, cfg: &Config, progress: &mut dyn FnMut(&str)) -> Result<(End, End)> {
        progress(&format!(
            "opening {} and {}: {} QP pair(s), {} KiB of buffers each",
            cfg.local,
            cfg.remote,
            self.qps,
            self.qps * self.layout.bytes() / 1024
        ));
        let end = |at: &Location| {
            End::new(
                open(at, self.memory)?,
                self.qps,
                self.layout,
                self.caps,
                self.cqe,
            )
        };
        let (a, b) = (end(&cfg.local)?, end(&cfg.remote)?);
        if cfg.events {
            for (end, location) in [(&a, &cfg.local), (&b, &cfg.remote)] {
                if end.ctx.event_fd().is_none() {
                    return Err(PerfError::Config(format!(
                        "--events sleeps on completion interrupts, and {location} has none \
                         (the sysfs transport in a VM polls): leave --events off there"
                    )));
                }
            }
        }
        connect(&a, &b, self.mtu, cfg.tx_depth)?;
        if cfg.check {
            for end in [&a, &b] {
                for (q, mr) in end.mrs.iter().enumerate() {
                    for s in 0..self.layout.slots {
                        mr.write(
                            self.layout.src(s as u64),
                            &slot_pattern(q, s, self.layout.slot),
                        );
                    }
                }
            }
        }
        Ok((a, b))
    }
}

/// One run of `cfg`'s test with messages of `size` bytes.
fn run_once(cfg: &Config, plan: &Plan, size: usize, a: &End, b: &End) -> Result<SizeResult> {
    match cfg.test {
        Test::WriteBw | Test::ReadBw | Test::SendBw => bandwidth(cfg, size, plan.layout, a, b),
        Test::WriteLat => write_lat(cfg, size, plan.layout, a, b),
        Test::SendLat => send_lat(cfg, size, plan.layout, a, b),
        Test::AtomicLat => atomic_lat(cfg, a, b),
    }
}

/// Runs the whole configuration: every size, with its baselines.
pub fn run(cfg: &Config, progress: &mut dyn FnMut(&str)) -> Result<Report> {
    let plan = Plan::of(cfg)?;
    let (a, b) = plan.open(cfg, progress)?;
    let mut results = Vec::with_capacity(cfg.sizes.len());
    for &size in &cfg.sizes {
        progress(&format!("{} of {size} bytes", cfg.test.name()));
        let mut runs = Vec::with_capacity(cfg.repeat);
        let mut baselines = Vec::with_capacity(cfg.repeat);
        for _ in 0..cfg.repeat.max(1) {
            runs.push(run_once(cfg, &plan, size, &a, &b)?);
            if cfg.baselines {
                baselines.push(baseline::measure(
                    size,
                    cfg.mtu as usize,
                    cfg.baseline_time,
                    2000,
                )?);
            }
        }
        let mut r = median_run(runs);
        if !baselines.is_empty() {
            r.set_baseline(baseline::median(&baselines));
        }
        results.push(r);
    }
    Ok(Report {
        test: cfg.test,
        local: cfg.local.to_string(),
        remote: cfg.remote.to_string(),
        qps: plan.qps,
        tx_depth: cfg.tx_depth,
        inline: cfg.inline,
        mtu: cfg.mtu,
        check: cfg.check,
        repeat: cfg.repeat.max(1),
        events: cfg.events,
        results,
    })
}

/// How a test waits for completions: spinning on the CQs, or (events mode) sleeping on
/// their interrupts.
struct Waiter<'a> {
    ends: Vec<&'a End>,
    events: bool,
    armed: bool,
}

impl<'a> Waiter<'a> {
    fn new(cfg: &Config, ends: Vec<&'a End>) -> Self {
        Self {
            ends,
            events: cfg.events,
            armed: false,
        }
    }

    /// The CQs had nothing. Spinning: a pause. Events: arm the CQs (the caller then
    /// looks once more, since a completion that came before the arm raises no event),
    /// or, armed already, sleep until an event comes.
    /// A lost function (rnicd gone, reset under the driver) ends the wait with its error.
    fn idle(&mut self) -> Result<()> {
        for end in &self.ends {
            end.ctx.check_alive()?;
        }
        if !self.events {
            std::hint::spin_loop();
        } else if !self.armed {
            for end in &self.ends {
                end.cq.req_notify(false);
            }
            self.armed = true;
        } else {
            let cqs: Vec<_> = self.ends.iter().map(|e| (&e.ctx, &e.cq)).collect();
            verbs::wait_any_cq_event(&cqs, EVENT_WAIT)?;
            self.armed = false;
        }
        Ok(())
    }

    /// The CQs had something: the next idle look arms them again.
    fn progressed(&mut self) {
        self.armed = false;
    }
}

/// The send WR of message `i` of QP `q` for a bandwidth test.
fn bw_wr(cfg: &Config, size: usize, layout: Layout, a: &End, b: &End, q: usize, i: u64) -> SendWr {
    let (local, remote) = (&a.mrs[q], &b.mrs[q]);
    let (sge, opcode) = match cfg.test {
        Test::ReadBw => (
            local.sge(layout.dst(i), size),
            WrOpcode::RdmaRead {
                remote_addr: remote.addr(layout.src(i)),
                rkey: remote.rkey(),
            },
        ),
        Test::SendBw => (local.sge(layout.src(i), size), WrOpcode::Send),
        _ => (
            local.sge(layout.src(i), size),
            WrOpcode::RdmaWrite {
                remote_addr: remote.addr(layout.dst(i)),
                rkey: remote.rkey(),
            },
        ),
    };
    let inline = cfg.test != Test::ReadBw && size <= cfg.inline as usize;
    let every = signal_every(cfg.tx_depth);
    SendWr {
        wr_id: (q as u64) << 32 | i,
        opcode,
        sges: if inline { Vec::new() } else { vec![sge] },
        inline: inline.then(|| {
            let mut data = vec![0u8; size];
            local.read(layout.src(i), &mut data);
            data
        }),
        signaled: (i + 1).is_multiple_of(every),
        fence: false,
        solicited: false,
    }
}

fn recv_wr(layout: Layout, end: &End, size: usize, q: usize, i: u64) -> RecvWr {
    RecvWr {
        wr_id: (q as u64) << 32 | i,
        sges: vec![end.mrs[q].sge(layout.dst(i), size)],
    }
}

fn bandwidth(cfg: &Config, size: usize, layout: Layout, a: &End, b: &End) -> Result<SizeResult> {
    let qps = a.qps.len();
    let depth = u64::from(cfg.tx_depth);
    let what = cfg.test.name();
    let sends = cfg.test == Test::SendBw;
    let mut posted = vec![0u64; qps];
    let mut completed = vec![0u64; qps];
    // With a duration, posting stops when it has passed and the messages in flight finish.
    let mut limit = cfg.duration.map_or(cfg.iters, |_| u64::MAX);
    // Receives: posted and completed per QP of the remote end (send_bw). Never more are
    // posted than messages will come, so none is left for the next run (the QPs serve
    // every size and every repeat).
    let first_receives = if sends { depth.min(limit) } else { 0 };
    let mut recv_posted = vec![first_receives; qps];
    let mut recv_done = vec![0u64; qps];
    let mut received_bytes = 0u64;
    for (q, qp) in b.qps.iter().enumerate().filter(|_| sends) {
        let wrs: Vec<_> = (0..first_receives)
            .map(|i| recv_wr(layout, b, size, q, i))
            .collect();
        qp.post_recv_list(&wrs)?;
    }
    // The sender's completions, and the receiver's for SENDs.
    let mut waiter = Waiter::new(cfg, if sends { vec![a, b] } else { vec![a] });
    let start = Instant::now();
    let mut marks = vec![(Duration::ZERO, 0u64)];
    let mut done_bytes = 0u64;
    let mut last_progress = Instant::now();
    loop {
        if let Some(d) = cfg.duration {
            if limit == u64::MAX && start.elapsed() >= d {
                // As far as any QP posted, or posted receives for: every receive is used.
                limit = posted
                    .iter()
                    .chain(&recv_posted)
                    .copied()
                    .max()
                    .unwrap_or(0);
                // Every QP ends on a signalled WR: post up to the next one.
                limit = limit.next_multiple_of(signal_every(cfg.tx_depth));
            }
        }
        for q in 0..qps {
            let room = depth - (posted[q] - completed[q]);
            let n = room.min(limit - posted[q]);
            if n == 0 {
                continue;
            }
            let wrs: Vec<_> = (posted[q]..posted[q] + n)
                .map(|i| {
                    let mut wr = bw_wr(cfg, size, layout, a, b, q, i);
                    wr.signaled |= i + 1 == limit;
                    wr
                })
                .collect();
            a.qps[q].post_send_list(&wrs)?;
            posted[q] += n;
        }
        let mut progressed = false;
        for wc in a.cq.poll(256) {
            if !wc.is_success() {
                return Err(failed(what, &wc));
            }
            let q = (wc.wr_id >> 32) as usize;
            let i = wc.wr_id & 0xffff_ffff;
            let newly = (i + 1).saturating_sub(completed[q]);
            completed[q] += newly;
            done_bytes += newly * size as u64;
            progressed = true;
        }
        if sends {
            for wc in b.cq.poll(256) {
                if !wc.is_success() {
                    return Err(failed(what, &wc));
                }
                let q = (wc.wr_id >> 32) as usize;
                let i = wc.wr_id & 0xffff_ffff;
                received_bytes += u64::from(wc.byte_len);
                if cfg.check {
                    let mut got = vec![0u8; size];
                    b.mrs[q].read(layout.dst(i), &mut got);
                    if got[..] != slot_pattern(q, (i % layout.slots as u64) as usize, size)[..] {
                        return Err(mismatch(what, q, i));
                    }
                }
                recv_done[q] += 1;
                let next = recv_posted[q];
                if next < limit {
                    b.qps[q].post_recv(&recv_wr(layout, b, size, q, next))?;
                    recv_posted[q] += 1;
                }
                progressed = true;
            }
        }
        if progressed {
            last_progress = Instant::now();
            marks.push((start.elapsed(), done_bytes));
            waiter.progressed();
        } else if last_progress.elapsed() > STALL {
            return Err(stalled(what));
        }
        let all_sent = (0..qps).all(|q| posted[q] == limit && completed[q] == limit);
        let all_received = !sends || (0..qps).all(|q| recv_done[q] == completed[q]);
        if all_sent && all_received {
            break;
        }
        if !progressed {
            waiter.idle()?;
        }
    }
    let elapsed = start.elapsed();
    let messages: u64 = completed.iter().sum();
    let mut checked = 0u64;
    let mut qps_checked = 0u64;
    if cfg.check && cfg.test != Test::SendBw {
        // Every slot now holds what the last message through it carried: the source
        // slot's pattern, at the other end.
        let targets = if cfg.test == Test::ReadBw {
            &a.mrs
        } else {
            &b.mrs
        };
        for (q, (target, &done)) in targets.iter().zip(&completed).enumerate() {
            for s in 0..done.min(layout.slots as u64) {
                let mut got = vec![0u8; size];
                target.read(layout.dst(s), &mut got);
                if got[..] != slot_pattern(q, s as usize, size)[..] {
                    return Err(mismatch(what, q, s));
                }
                checked += size as u64;
            }
            qps_checked += u64::from(done > 0);
        }
    } else if cfg.check {
        checked = received_bytes;
        // Every receive was compared as it completed.
        qps_checked = recv_done.iter().filter(|&&n| n > 0).count() as u64;
    }
    Ok(SizeResult {
        messages_per_qp: completed,
        qps_checked,
        ..SizeResult::bandwidth(
            size,
            messages,
            elapsed,
            stats::peak_mib_per_s(&marks, PEAK_WINDOW),
            if sends { received_bytes } else { done_bytes },
            checked,
        )
    })
}

/// Waits until `end`'s CQ yields a completion that `want` accepts, spinning or (events
/// mode) sleeping on its interrupt; fails on an error completion, or after [`STALL`].
fn wait_for(cfg: &Config, end: &End, what: &str, mut want: impl FnMut(&Wc) -> bool) -> Result<Wc> {
    let start = Instant::now();
    let mut waiter = Waiter::new(cfg, vec![end]);
    loop {
        let wcs = end.cq.poll(16);
        for wc in &wcs {
            if !wc.is_success() {
                return Err(failed(what, wc));
            }
            if want(wc) {
                return Ok(*wc);
            }
        }
        if start.elapsed() > STALL {
            return Err(stalled(what));
        }
        if wcs.is_empty() {
            waiter.idle()?;
        } else {
            waiter.progressed();
        }
    }
}

/// Takes send completions that are due without waiting; keeps the send queue from filling
/// in the latency tests, which signal every WR but wait only for the peer's answer.
fn retire_sends(end: &End, what: &str) -> Result<()> {
    for wc in end.cq.poll(64) {
        if !wc.is_success() {
            return Err(failed(what, &wc));
        }
    }
    Ok(())
}

/// Round trips in a latency test: the iterations plus a tenth to warm up.
fn lat_rounds(cfg: &Config) -> u64 {
    cfg.iters + cfg.iters / 10
}

fn lat_send_wr(cfg: &Config, size: usize, from: &Mr, src: usize, opcode: WrOpcode) -> SendWr {
    let inline = size <= cfg.inline as usize;
    SendWr {
        wr_id: 0,
        opcode,
        sges: if inline {
            Vec::new()
        } else {
            vec![from.sge(src, size)]
        },
        inline: inline.then(|| {
            let mut data = vec![0u8; size];
            from.read(src, &mut data);
            data
        }),
        signaled: true,
        fence: false,
        solicited: false,
    }
}

fn write_lat(cfg: &Config, size: usize, layout: Layout, a: &End, b: &End) -> Result<SizeResult> {
    let what = "write_lat";
    let rounds = lat_rounds(cfg);
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    let (src, dst) = (layout.src(0), layout.dst(0));
    let last = size - 1;
    // Each end's target starts at 0 and every round writes a new non-zero marker.
    for end in [a, b] {
        end.mrs[0].write(dst, &vec![0u8; size]);
    }
    // With events, each WRITE carries an immediate, whose receive completion wakes the
    // target's driver: one receive per round, posted ahead as send_lat posts them.
    let depth = if cfg.events {
        u64::from(cfg.tx_depth).min(rounds)
    } else {
        0
    };
    for end in [a, b].into_iter().filter(|_| depth > 0) {
        let wrs: Vec<_> = (0..depth)
            .map(|i| recv_wr(layout, end, size, 0, i))
            .collect();
        end.qps[0].post_recv_list(&wrs)?;
    }
    // The target sees a WRITE: its last byte changes (and, with events, its immediate
    // arrives first).
    let arrived = |end: &End, marker: u8| -> Result<()> {
        if cfg.events {
            wait_for(cfg, end, what, Wc::is_recv)?;
        }
        wait_for_byte(end, dst + last, marker, what)
    };
    let mut checked = 0u64;
    for round in 0..rounds {
        let marker = (round % 255 + 1) as u8;
        if cfg.check {
            let mut data = slot_pattern(0, round as usize, size);
            data[last] = marker;
            a.mrs[0].write(src, &data);
        } else {
            a.mrs[0].write(src + last, &[marker]);
        }
        let write = |from: &End, to: &End| {
            lat_send_wr(
                cfg,
                size,
                &from.mrs[0],
                src,
                if cfg.events {
                    WrOpcode::RdmaWriteWithImm {
                        remote_addr: to.mrs[0].addr(dst),
                        rkey: to.mrs[0].rkey(),
                        imm: round as u32,
                    }
                } else {
                    WrOpcode::RdmaWrite {
                        remote_addr: to.mrs[0].addr(dst),
                        rkey: to.mrs[0].rkey(),
                    }
                },
            )
        };
        let t = Instant::now();
        a.qps[0].post_send(&write(a, b))?;
        arrived(b, marker)?;
        b.mrs[0].write(src + last, &[marker]);
        b.qps[0].post_send(&write(b, a))?;
        arrived(a, marker)?;
        let rtt = t.elapsed();
        if round >= rounds - cfg.iters {
            samples.push(rtt / 2);
        }
        if cfg.check {
            let mut sent = vec![0u8; size];
            let mut got = vec![0u8; size];
            a.mrs[0].read(src, &mut sent);
            b.mrs[0].read(dst, &mut got);
            if sent != got {
                return Err(mismatch(what, 0, round));
            }
            checked += size as u64;
        }
        for end in [a, b]
            .into_iter()
            .filter(|_| depth > 0 && round + depth < rounds)
        {
            end.qps[0].post_recv(&recv_wr(layout, end, size, 0, 0))?;
        }
        retire_sends(a, what)?;
        retire_sends(b, what)?;
    }
    Ok(SizeResult::latency(size, &mut samples, checked))
}

/// Spins until byte `offset` of `end`'s first MR holds `value`; fails after [`STALL`], or
/// at once when the function is lost.
fn wait_for_byte(end: &End, offset: usize, value: u8, what: &str) -> Result<()> {
    let start = Instant::now();
    let mut b = [0u8; 1];
    let mut spins = 0u32;
    loop {
        end.mrs[0].read(offset, &mut b);
        if b[0] == value {
            return Ok(());
        }
        if start.elapsed() > STALL {
            return Err(stalled(what));
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            end.ctx.check_alive()?;
        }
        std::hint::spin_loop();
    }
}

fn send_lat(cfg: &Config, size: usize, layout: Layout, a: &End, b: &End) -> Result<SizeResult> {
    let what = "send_lat";
    let rounds = lat_rounds(cfg);
    let (src, dst) = (layout.src(0), layout.dst(0));
    // One receive per round is posted in all, so none is left for the next run (the QPs
    // serve every size and every repeat).
    let depth = u64::from(cfg.tx_depth).min(rounds);
    for end in [a, b] {
        let wrs: Vec<_> = (0..depth)
            .map(|i| recv_wr(layout, end, size, 0, i))
            .collect();
        end.qps[0].post_recv_list(&wrs)?;
    }
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    let mut checked = 0u64;
    for round in 0..rounds {
        if cfg.check {
            a.mrs[0].write(src, &slot_pattern(0, round as usize, size));
        }
        let t = Instant::now();
        a.qps[0].post_send(&lat_send_wr(cfg, size, &a.mrs[0], src, WrOpcode::Send))?;
        wait_for(cfg, b, what, Wc::is_recv)?;
        b.qps[0].post_send(&lat_send_wr(cfg, size, &b.mrs[0], dst, WrOpcode::Send))?;
        let back = wait_for(cfg, a, what, Wc::is_recv)?;
        let rtt = t.elapsed();
        if round >= rounds - cfg.iters {
            samples.push(rtt / 2);
        }
        if back.byte_len as usize != size {
            return Err(mismatch(what, 0, round));
        }
        if cfg.check {
            // B echoed what it received; A now holds it in its receive slot.
            let mut sent = vec![0u8; size];
            let mut got = vec![0u8; size];
            a.mrs[0].read(src, &mut sent);
            a.mrs[0].read(dst, &mut got);
            if sent != got {
                return Err(mismatch(what, 0, round));
            }
            checked += size as u64;
        }
        for end in [a, b].into_iter().filter(|_| round + depth < rounds) {
            end.qps[0].post_recv(&recv_wr(layout, end, size, 0, 0))?;
        }
        retire_sends(a, what)?;
        retire_sends(b, what)?;
    }
    Ok(SizeResult::latency(size, &mut samples, checked))
}

fn atomic_lat(cfg: &Config, a: &End, b: &End) -> Result<SizeResult> {
    let what = "atomic_lat";
    let rounds = lat_rounds(cfg);
    // Both at offset 0: the remote counter and the local landing place of the old value.
    b.mrs[0].write(0, &0u64.to_le_bytes());
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    let mut checked = 0u64;
    for round in 0..rounds {
        let wr = SendWr {
            wr_id: round,
            opcode: WrOpcode::AtomicFetchAdd {
                remote_addr: b.mrs[0].addr(0),
                rkey: b.mrs[0].rkey(),
                add: 1,
            },
            sges: vec![a.mrs[0].sge(0, 8)],
            inline: None,
            signaled: true,
            fence: false,
            solicited: false,
        };
        let t = Instant::now();
        a.qps[0].post_send(&wr)?;
        wait_for(cfg, a, what, |wc| wc.wr_id == round)?;
        let rtt = t.elapsed();
        if round >= rounds - cfg.iters {
            samples.push(rtt);
        }
        if cfg.check {
            let mut old = [0u8; 8];
            a.mrs[0].read(0, &mut old);
            if u64::from_le_bytes(old) != round {
                return Err(mismatch(what, 0, round));
            }
            checked += 8;
        }
    }
    Ok(SizeResult::latency(8, &mut samples, checked))
}
