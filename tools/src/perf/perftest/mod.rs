//! `rnic-perf --perftest write_bw|read_bw`: one end of perftest's `ib_write_bw` /
//! `ib_read_bw`; the messages are [`wire`]'s, the command line `cli.rs`'s; here are the QP,
//! the traffic, the checks, the recognition of a peer running something else, and the run
//! (docs/tools.md, "`rnic-perf --perftest`", says what each does).

mod cli;
pub mod wire;

use std::time::{Duration, Instant};

use rnic_abi::gid;
use rnic_abi::verbs::{mtu_bytes, mtu_code};
use rnic_driver::verbs::{self, Cq, Mr, RecvWr, SendWr, WrOpcode};
use serde::Serialize;

use crate::error::{drv, fail, Result, ToolError};
use crate::open::{self, DeviceChoice};
use crate::rc::{check_sizes, completion_error, page_round, RcSide};
use crate::rendezvous::{self, Conn};

pub use crate::rendezvous::Role;

pub use self::cli::{main_with, wanted};
pub use self::wire::{
    address_lines, decode_dest, decode_mtu, decode_version, encode_dest, encode_mtu,
    encode_version, region_len, slot_offsets, v4_mapped, BwReport, Dest, CACHE_LINE, CYCLE_BUFFER,
    DEST_LEN, MIN_PEER_VERSION, MTU_LEN, RESULT_HEAD, RESULT_LINE, VERSION, VERSION_LEN,
};

/// perftest's default message size for bandwidth tests.
pub const DEFAULT_SIZE: usize = 65536;
/// perftest's default iterations for bandwidth tests.
pub const DEFAULT_ITERS: u64 = 5000;
/// perftest's default send queue depth for bandwidth tests.
pub const DEFAULT_TX_DEPTH: u32 = 128;
/// One work request in this many is signalled (perftest's default `--cq-mod`).
pub const CQ_MOD: u64 = 100;
/// Signalled work requests come at least this often in a run (a run of few iterations
/// signals one in `iters / PROGRESS_MARKS`): the stall watchdog ([`STALL`]) and the peak
/// figure see progress even when the whole run is fewer than [`CQ_MOD`] large messages
/// on a slow peer (100 READs of 1 MiB from Soft-RoCE in a guest take about 30 s).
const PROGRESS_MARKS: u64 = 8;
/// perftest's RTR values.
const MIN_RNR_TIMER: u8 = 12;
const HOP_LIMIT: u8 = 0xff;
/// perftest's RTS values (`-u` 14, retry and RNR retry 7).
const TIMEOUT: u8 = 14;
const RETRY: u8 = 7;
/// The longest the client waits for a completion before it gives up.
const STALL: Duration = Duration::from_secs(30);
/// Slots shorter than this are not failed by the "overwritten" check.
const MIN_CHECKED_SLOT: usize = 8;
/// How often a server waiting on TCP looks at its completion queue for a SEND.
const WATCH_TICK: Duration = Duration::from_millis(50);
/// How long the client waits for the server's answer after its test. A perftest server of
/// the same test is already waiting in that exchange and answers at once; one that is still
/// in a test of its own (ib_send_bw's server waits for SENDs that never come) does not.
const AFTER_TEST_ANSWER: Duration = Duration::from_secs(5);
/// A report whose average bandwidth over bytes per microsecond is below this is in Gbit/s:
/// perftest divides by 2^20 for MiB/s (ratio 0.95) and by 125e6 for Gbit/s (ratio 0.008).
const GBITS_RATIO: f64 = 0.1;

/// The two tests spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
}

impl Test {
    /// The test called `name` (`write_bw`, `read_bw`).
    pub fn from_name(name: &str) -> Option<Test> {
        match name {
            "write_bw" => Some(Test::WriteBw),
            "read_bw" => Some(Test::ReadBw),
            _ => None,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA WRITE",
            Test::ReadBw => "RDMA READ",
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The function.
    pub device: DeviceChoice,
    /// The test.
    pub test: Test,
    /// Server, or client (perftest's client is the active side).
    pub role: Role,
    /// Bytes per message (`-s`).
    pub size: usize,
    /// Messages (`-n`).
    pub iters: u64,
    /// Work requests in flight (`-t`).
    pub tx_depth: u32,
    /// This side's path MTU in bytes (`-m`); the smaller of the two sides' is used.
    pub mtu: u32,
    /// First PSN this side sends (24 bits).
    pub psn: u32,
    /// The whole run's time limit (`None`: none).
    pub time_limit: Option<Duration>,
}

/// How the received data compared (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DataCheck {
    /// Every slot holds exactly the peer's rnic-perf pattern.
    Exact,
    /// Every slot was overwritten (a perftest peer's random bytes).
    Overwritten,
    /// The passive read_bw server's source buffer is intact.
    SourceIntact,
    /// The write_bw client: every WRITE completed successfully (the server checks the data).
    Completed,
}

impl DataCheck {
    fn text(self) -> &'static str {
        match self {
            DataCheck::Exact => "exact (the peer's rnic-perf pattern, byte for byte)",
            DataCheck::Overwritten => "overwritten (every slot the messages reached changed)",
            DataCheck::SourceIntact => "source intact (the buffer the peer read is unchanged)",
            DataCheck::Completed => "completed (every WRITE succeeded; the server checks the data)",
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// The test.
    pub test: Test,
    /// "server" or "client".
    pub role: &'static str,
    /// The peer's version string.
    pub peer_version: String,
    /// The path MTU used, in bytes.
    pub mtu: u32,
    /// This side's address, as printed.
    pub local: String,
    /// The peer's address, as printed.
    pub remote: String,
    /// The client's report (measured here, or received from the client).
    pub report: BwReport,
    /// How the data was checked.
    pub data: DataCheck,
    /// Slots of the buffer that were checked.
    pub slots_checked: usize,
}

impl Outcome {
    /// perftest's result table and a line about the data check.
    pub fn text(&self) -> String {
        format!(
            "{RESULT_LINE}\n{RESULT_HEAD}\n{}\n{RESULT_LINE}\n data check: {} ({} slot(s))\n",
            self.report.line(),
            self.data.text(),
            self.slots_checked
        )
    }
}

/// One TCP connection and which side of each exchange writes first.
struct Channel<'a> {
    conn: Conn,
    client: bool,
    /// While set, reads also look at this CQ: a completion on a server's CQ can only be the
    /// receive it posted, taken by a SEND (see [`sends_arrived`]).
    watch: Option<(&'a Cq, Test)>,
    /// Said after "timed out" when the peer does not answer in time.
    silence_hint: Option<String>,
}

impl Channel<'_> {
    /// One exchange: the client writes, then reads; the server reads, then writes.
    fn swap<const N: usize>(&mut self, mine: &[u8; N], what: &str) -> Result<[u8; N]> {
        let mut theirs = [0u8; N];
        if self.client {
            self.conn.send(mine, what)?;
            self.recv(&mut theirs, what)?;
        } else {
            self.recv(&mut theirs, what)?;
            self.conn.send(mine, what)?;
        }
        Ok(theirs)
    }

    fn recv(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let read = match self.watch {
            None => self.conn.read_exact(buf),
            Some((cq, test)) => self.recv_watching(buf, cq, test)?,
        };
        read.map_err(|e| rendezvous::read_error(what, &e, self.silence_hint.as_deref()))
    }

    /// `read_exact` in short reads, looking at `cq` between them, so that a SEND from the
    /// peer ends the run at once instead of when the time limit runs out. The outer
    /// result is the SEND's diagnostic, the inner one the read's.
    fn recv_watching(
        &mut self,
        buf: &mut [u8],
        cq: &Cq,
        test: Test,
    ) -> Result<std::io::Result<()>> {
        use std::io::ErrorKind::{Interrupted, TimedOut, UnexpectedEof, WouldBlock};
        let limit = self
            .conn
            .stream()
            .read_timeout()
            .map_err(|e| ToolError(format!("TCP: {e}")))?;
        let started = Instant::now();
        self.conn.set_time_left(Some(WATCH_TICK))?;
        let mut filled = 0;
        let read = loop {
            if filled == buf.len() {
                break Ok(());
            }
            match self.conn.read_some(&mut buf[filled..]) {
                Ok(0) => break Err(UnexpectedEof.into()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == Interrupted => {}
                Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => {
                    cq.check_alive()
                        .map_err(drv("watch the completion queue"))?;
                    if !cq.poll(1).is_empty() {
                        return Err(sends_arrived(test));
                    }
                    if limit.is_some_and(|l| started.elapsed() >= l) {
                        break Err(TimedOut.into());
                    }
                }
                Err(e) => break Err(e),
            }
        };
        self.conn
            .set_time_left(limit.map(|l| l.saturating_sub(started.elapsed())))?;
        Ok(read)
    }

    fn swap_dest(&mut self, local: &Dest, what: &str) -> Result<Dest> {
        decode_dest(&self.swap(&encode_dest(local), what)?)
    }

    /// An exchange of the address again: the peer's must name the QP its first did.
    fn swap_same_dest(&mut self, local: &Dest, first: &Dest, what: &str) -> Result<Dest> {
        let again = self.swap_dest(local, what)?;
        same_qp(first, &again)?;
        Ok(again)
    }
}

/// The diagnostic of a SEND that reached a server of `test`, which posts no receives of
/// its own accord (one is posted to catch exactly this): the peer runs a SEND test.
fn sends_arrived(test: Test) -> ToolError {
    ToolError(format!(
        "the peer sends SENDs (is it ib_send_bw or ib_send_lat?) but this side runs {}, \
         which receives none: run the same test on both sides (rnic-perf --perftest speaks \
         ib_write_bw and ib_read_bw)",
        test.name()
    ))
}

/// perftest sends one address message per QP: a second that names another QP is the
/// second QP of a peer run with `-q N`, and the exchange is out of step from there on.
fn same_qp(first: &Dest, again: &Dest) -> Result<()> {
    if again.qpn == first.qpn {
        return Ok(());
    }
    fail(format!(
        "the peer sent the address of QPN {:#x} after that of QPN {:#x}: it runs more than \
         one QP (perftest's -q N), and rnic-perf --perftest runs one: run the peer without -q",
        again.qpn, first.qpn
    ))
}

/// Whether a perftest report's bandwidth is in Gbit/s (`--report_gbits`) rather than
/// MiB/s: the unit shows in the bandwidth over the byte rate its message rate implies.
pub fn reported_in_gbits(r: &BwReport) -> bool {
    let bytes_per_us = r.msg_rate * r.size as f64;
    r.bw_avg > 0.0 && bytes_per_us > 0.0 && r.bw_avg / bytes_per_us < GBITS_RATIO
}

/// The parameters both sides agree on in steps 1 to 4.
struct Agreed {
    peer_version: String,
    cycle: usize,
    cache_line: usize,
    mtu_code: u8,
}

fn agree(ch: &mut Channel, mtu_code: u8) -> Result<Agreed> {
    let (peer_version, v) = decode_version(&ch.swap(&encode_version(), "version")?);
    if v < MIN_PEER_VERSION {
        return fail(format!(
            "the peer's version is {peer_version:?}: perftest's exchange needs {MIN_PEER_VERSION:.2} or later (is the peer perftest?)"
        ));
    }
    let cycle = u32::from_be_bytes(ch.swap(&CYCLE_BUFFER.to_be_bytes(), "page size")?);
    let cache = u32::from_be_bytes(ch.swap(&CACHE_LINE.to_be_bytes(), "cache line size")?);
    if !(1..=1 << 20).contains(&cycle) || !(1..=4096).contains(&cache) {
        return fail(format!(
            "the peer's page size {cycle} or cache line size {cache} is not believable"
        ));
    }
    let peer_mtu = decode_mtu(&ch.swap(&encode_mtu(mtu_code), "MTU")?);
    Ok(Agreed {
        peer_version,
        cycle: cycle.max(CYCLE_BUFFER) as usize,
        cache_line: cache.max(CACHE_LINE) as usize,
        mtu_code: peer_mtu.map_or(mtu_code, |p| p.min(mtu_code)),
    })
}

/// This side's function, QP, CQ and buffer, the QP in INIT for `cfg.test`.
fn open_side(cfg: &Config, buf_len: usize) -> Result<RcSide> {
    let (ctx, _, buf) = open::open_verbs(&cfg.device, None, buf_len)?;
    let limits = ctx.attr().limits;
    if cfg.tx_depth == 0 || cfg.tx_depth > limits.max_qp_wr || cfg.tx_depth + 1 > limits.max_cqe {
        return fail(format!(
            "--tx-depth {}: give 1 to {}",
            cfg.tx_depth,
            limits.max_qp_wr.min(limits.max_cqe - 1)
        ));
    }
    let access = verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_WRITE | verbs::ACCESS_REMOTE_READ;
    let side = RcSide::new(
        ctx,
        buf,
        buf_len,
        access,
        cfg.tx_depth + 1,
        (cfg.tx_depth, 1),
    )?;
    side.to_init(match cfg.test {
        Test::WriteBw => verbs::ACCESS_REMOTE_WRITE,
        Test::ReadBw => verbs::ACCESS_REMOTE_READ,
    })?;
    Ok(side)
}

/// Runs one side. `info` receives the progress lines as perftest prints them (the
/// address lines, `listening on port N`).
pub fn run(cfg: &Config, info: &mut dyn FnMut(&str)) -> Result<Outcome> {
    check_sizes(cfg.size, cfg.iters, cfg.mtu)?;
    if cfg.iters < 5 {
        return fail("--iters: perftest runs at least 5");
    }
    let deadline = cfg.time_limit.map(|t| Instant::now() + t);
    let client = matches!(cfg.role, Role::Connect(_));
    // The largest page size a peer may ask for is covered up front, so that the function
    // is open (and its errors reported) before anything is said on TCP.
    const MAX_CYCLE: usize = 64 << 10;
    let buf_len = page_round(region_len(cfg.size, MAX_CYCLE));
    let side = open_side(cfg, buf_len)?;
    if !client {
        // Neither test SENDs; a receive posted here is taken only by a peer running a SEND
        // test, which the TCP reads below see on the CQ and name (see `sends_arrived`).
        side.qp
            .post_recv(&RecvWr {
                wr_id: 0,
                sges: vec![side.mr.sge(0, buf_len)],
            })
            .map_err(drv("post the receive that catches a peer's SEND"))?;
    }
    let hint = format!("ib_{} -d DEV -x GID_INDEX THIS_HOST", cfg.test.name());
    let mut ch = Channel {
        conn: Conn::open(&cfg.role, deadline, cfg.time_limit, &hint, info)?,
        client,
        watch: None,
        silence_hint: None,
    };
    let agreed = agree(&mut ch, mtu_code(cfg.mtu).expect("checked"))?;
    if agreed.cycle > MAX_CYCLE {
        return fail(format!(
            "the peer's page size is {} bytes: at most {MAX_CYCLE} is supported",
            agreed.cycle
        ));
    }
    let limits = side.ctx.attr().limits;
    let psn = cfg.psn & 0xff_ffff;
    let local = Dest {
        lid: 0,
        out_reads: match cfg.test {
            Test::WriteBw => 1,
            Test::ReadBw => limits.max_qp_rd_atom.clamp(1, 255),
        },
        qpn: side.qp.qp_num(),
        psn,
        rkey: side.mr.rkey(),
        vaddr: side.mr.addr(0),
        gid: side.ctx.attr().gid,
        srqn: 0,
    };
    let region = region_len(cfg.size, agreed.cycle);
    let own = super::pattern(region, psn.into());
    // The source holds this side's pattern; a target holds its complement, which any
    // data that arrives must change.
    let receives = matches!(
        (cfg.test, client),
        (Test::WriteBw, false) | (Test::ReadBw, true)
    );
    let before: Vec<u8> = if receives {
        own.iter().map(|b| !b).collect()
    } else {
        own.clone()
    };
    side.mr.write(0, &before);
    let local_text = address_lines("local", cfg.test, &local);
    info(&local_text);
    let remote = ch.swap_dest(&local, "QP address")?;
    if v4_mapped(&local.gid) != v4_mapped(&remote.gid) {
        return fail(format!(
            "GID types differ: this side's {} and the peer's {} (perftest's \"Found Incompatibility issue with GID types\"; give the peer an IPv4 RoCEv2 GID with -x)",
            gid::ip(&local.gid),
            gid::ip(&remote.gid)
        ));
    }
    connect(
        &side,
        &local,
        &remote,
        agreed.mtu_code,
        client,
        limits.max_qp_init_rd_atom,
    )?;
    if !client {
        ch.watch = Some((&side.cq, cfg.test));
    }
    let first = remote;
    let remote = ch.swap_same_dest(&local, &first, "QP address (after connecting)")?;
    let remote_text = address_lines("remote", cfg.test, &remote);
    info(&remote_text);
    ch.swap_same_dest(&local, &first, "handshake before the test")?;
    let slots = slot_offsets(cfg.size, agreed.cycle, agreed.cache_line, cfg.iters);
    let (report, data) = if client {
        let report = run_client(cfg, &side, &remote, &slots, deadline)?;
        let data = if receives {
            check_received(&side.mr, cfg.size, &slots, &before, remote.psn)?
        } else {
            DataCheck::Completed
        };
        ch.conn
            .set_time_left(Some(deadline.map_or(AFTER_TEST_ANSWER, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(AFTER_TEST_ANSWER)
            })))?;
        ch.silence_hint = Some(format!(
            "a perftest server of {} answers at once, so the peer is still in a test of its \
             own (ib_send_bw's server waits for SENDs): run the same test on both sides \
             (ib_{} against rnic-perf --perftest {})",
            cfg.test.name(),
            cfg.test.name(),
            cfg.test.name()
        ));
        ch.swap_same_dest(&local, &first, "handshake after the test")?;
        // ib_send_bw's server makes one exchange more before its test, so it may take the
        // one above for that and fall silent here.
        exchange_report(&mut ch, &report)?;
        ch.silence_hint = None;
        ch.conn
            .set_time_left(deadline.map(|d| d.saturating_duration_since(Instant::now())))?;
        (report, data)
    } else {
        // The client runs its test now; this read waits for it.
        ch.conn
            .set_time_left(deadline.map(|d| d.saturating_duration_since(Instant::now())))?;
        ch.swap_same_dest(
            &local,
            &first,
            "handshake after the test (the client's test ran meanwhile)",
        )?;
        let report = exchange_report(&mut ch, &BwReport::default())?;
        if reported_in_gbits(&report) {
            return fail(format!(
                "the peer reports in Gbit/s (perftest's --report_gbits: average {:.2}), and \
                 rnic-perf --perftest prints MiB/s under perftest's MiB/sec header: run the \
                 peer without --report_gbits",
                report.bw_avg
            ));
        }
        let data = if receives {
            check_received(&side.mr, cfg.size, &slots, &before, remote.psn)?
        } else {
            check_intact(&side.mr, &before)?
        };
        (report, data)
    };
    ch.swap_same_dest(&local, &first, "closing handshake")?;
    Ok(Outcome {
        test: cfg.test,
        role: if client { "client" } else { "server" },
        peer_version: agreed.peer_version,
        mtu: mtu_bytes(agreed.mtu_code).expect("an agreed code"),
        local: local_text,
        remote: remote_text,
        report,
        data,
        slots_checked: if receives { slots.len() } else { 1 },
    })
}

/// Moves the QP to RTR (and, on the client, RTS) with perftest's attributes.
fn connect(
    side: &RcSide,
    local: &Dest,
    remote: &Dest,
    mtu: u8,
    client: bool,
    max_init_rd_atom: u32,
) -> Result<()> {
    let rd_atomic = local.out_reads.clamp(1, 255) as u8;
    let (mut a, m) = verbs::rtr_attr(
        remote.qpn,
        remote.gid,
        remote.psn,
        mtu,
        rd_atomic,
        MIN_RNR_TIMER,
    );
    a.hop_limit = HOP_LIMIT;
    side.qp.modify(&a, m).map_err(drv(&format!(
        "move the QP to RTR towards QPN {:#x} GID {}",
        remote.qpn,
        gid::ip(&remote.gid)
    )))?;
    if client {
        let reads = remote.out_reads.min(max_init_rd_atom).clamp(1, 255) as u8;
        let (a, m) = verbs::rts_attr(local.psn, TIMEOUT, RETRY, RETRY, reads);
        side.qp.modify(&a, m).map_err(drv("move the QP to RTS"))?;
    }
    Ok(())
}

/// The active side's loop: `iters` WRITEs or READs, `tx_depth` in flight.
fn run_client(
    cfg: &Config,
    side: &RcSide,
    remote: &Dest,
    slots: &[usize],
    deadline: Option<Instant>,
) -> Result<BwReport> {
    let every = CQ_MOD
        .min(u64::from(cfg.tx_depth))
        .min(cfg.iters / PROGRESS_MARKS)
        .max(1);
    let depth = u64::from(cfg.tx_depth);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut marks = vec![(Duration::ZERO, 0u64)];
    let start = Instant::now();
    let mut last_progress = start;
    while done < cfg.iters {
        while posted < cfg.iters && posted - done < depth {
            let off = slots[(posted % slots.len() as u64) as usize];
            let remote_addr = remote.vaddr.wrapping_add(off as u64);
            let opcode = match cfg.test {
                Test::WriteBw => WrOpcode::RdmaWrite {
                    remote_addr,
                    rkey: remote.rkey,
                },
                Test::ReadBw => WrOpcode::RdmaRead {
                    remote_addr,
                    rkey: remote.rkey,
                },
            };
            side.qp
                .post_send(&SendWr {
                    wr_id: posted,
                    opcode,
                    sges: vec![side.mr.sge(off, cfg.size)],
                    signaled: (posted + 1) % every == 0 || posted + 1 == cfg.iters,
                    ..SendWr::default()
                })
                .map_err(drv(&format!("post an {}", cfg.test.verb())))?;
            posted += 1;
        }
        let wcs = side.cq.poll(16);
        for wc in &wcs {
            if !wc.is_success() {
                return Err(completion_error(wc, cfg.test.verb()));
            }
            done = done.max(wc.wr_id + 1);
        }
        let now = Instant::now();
        if wcs.is_empty() {
            side.ctx.check_alive().map_err(drv(&format!(
                "wait for the {} completions",
                cfg.test.verb()
            )))?;
            if now - last_progress > STALL || deadline.is_some_and(|d| now >= d) {
                return fail(format!(
                    "{} {} of {} completed, then nothing for {} s: is the peer's QP connected, and the network between the two up?",
                    done,
                    cfg.test.verb(),
                    cfg.iters,
                    (now - last_progress).as_secs()
                ));
            }
            std::hint::spin_loop();
        } else {
            last_progress = now;
            marks.push((now - start, done * cfg.size as u64));
        }
    }
    let elapsed = start.elapsed();
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mib = (1u64 << 20) as f64;
    let bytes = (cfg.iters * cfg.size as u64) as f64;
    let avg = bytes / secs / mib;
    let peak = super::stats::peak_mib_per_s(&marks, super::PEAK_WINDOW);
    Ok(BwReport {
        size: cfg.size as u64,
        iters: cfg.iters,
        bw_peak: if peak > 0.0 { peak } else { avg },
        bw_avg: avg,
        msg_rate: cfg.iters as f64 / secs / 1e6,
    })
}

/// Steps 9: the five pieces of the report, each its own exchange; returns the peer's.
fn exchange_report(ch: &mut Channel, mine: &BwReport) -> Result<BwReport> {
    let names = [
        "report size",
        "report iterations",
        "report peak",
        "report average",
        "report rate",
    ];
    let mut theirs = [[0u8; 8]; 5];
    for (i, piece) in mine.pieces().iter().enumerate() {
        theirs[i] = ch.swap(piece, names[i])?;
    }
    Ok(BwReport::from_pieces(&theirs))
}

/// Checks the slots that received data (see the module documentation).
fn check_received(
    mr: &Mr,
    size: usize,
    slots: &[usize],
    before: &[u8],
    peer_psn: u32,
) -> Result<DataCheck> {
    let peer = super::pattern(before.len(), peer_psn.into());
    let mut got = vec![0u8; size];
    let mut exact = true;
    for &off in slots {
        mr.read(off, &mut got);
        let peer_slot = &peer[off..off + size];
        exact &= got == peer_slot;
        if !exact && size >= MIN_CHECKED_SLOT && got == before[off..off + size] {
            return fail(format!(
                "the slot at offset {off} of this side's buffer still holds what was there before the test: no data reached it"
            ));
        }
    }
    Ok(if exact {
        DataCheck::Exact
    } else {
        DataCheck::Overwritten
    })
}

/// The passive read_bw server: its source must be as it was.
fn check_intact(mr: &Mr, before: &[u8]) -> Result<DataCheck> {
    let mut got = vec![0u8; before.len()];
    mr.read(0, &mut got);
    if got != before {
        let i = got
            .iter()
            .zip(before)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return fail(format!(
            "this side's source buffer changed during a read_bw test (first at byte {i})"
        ));
    }
    Ok(DataCheck::SourceIntact)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 2];

    pub(super) fn dest() -> Dest {
        Dest {
            lid: 0,
            out_reads: 0x10,
            qpn: 0x11,
            psn: 0x5a3c1f,
            rkey: 0x201,
            vaddr: 0x1_0000,
            gid: GID,
            srqn: 0,
        }
    }

    #[test]
    fn a_second_qp_is_named() {
        let first = dest();
        assert!(same_qp(&first, &first).is_ok());
        let second = Dest {
            qpn: 0x12,
            psn: 0x1,
            ..dest()
        };
        let e = same_qp(&first, &second).unwrap_err();
        assert!(
            e.0.contains("QPN 0x12 after that of QPN 0x11") && e.0.contains("without -q"),
            "{e}"
        );
    }

    #[test]
    fn report_units_show_in_the_figures() {
        // 5000 messages of 64 KiB in 0.1 s, as print_report_bw computes both units.
        let (size, iters, secs) = (65536u64, 5000u64, 0.1);
        let bytes = (size * iters) as f64;
        let rate = iters as f64 / secs / 1e6;
        let mib = BwReport {
            size,
            iters,
            bw_peak: bytes / secs / 1048576.0,
            bw_avg: bytes / secs / 1048576.0,
            msg_rate: rate,
        };
        assert!(!reported_in_gbits(&mib));
        let gbits = BwReport {
            bw_peak: bytes / secs / 125e6,
            bw_avg: bytes / secs / 125e6,
            ..mib
        };
        assert!(reported_in_gbits(&gbits));
        // A passive server's zeros say nothing.
        assert!(!reported_in_gbits(&BwReport::default()));
    }
}
