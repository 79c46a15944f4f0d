//! The logic of `rnic-pingpong`: an RC ping-pong between two rnic functions in the manner
//! of rdma-core's `ibv_rc_pingpong`, for SENDs, RDMA WRITEs and RDMA READs.
//!
//! # Finding the peer
//!
//! Each side opens a function, creates one RC QP and registers one buffer, then learns the
//! other side's QP number, GID and first PSN (and, for `write` and `read`, the rkey and
//! address of its buffer) in one of two ways:
//!
//! * **TCP** ([`Rendezvous::Listen`] / [`Rendezvous::Connect`]), as `ibv_rc_pingpong`
//!   does. The client writes its [`Dest`] lines, the server reads them, moves its QP to
//!   RTS, writes its own lines back, and the client answers `done`. The lines:
//!
//!   ```text
//!   LLLL:QQQQQQ:PPPPPP:GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG\n   lid, QPN, PSN, GID (hex)
//!   RRRRRRRR:AAAAAAAAAAAAAAAA\n                             rkey, address (write/read only)
//!   done\n                                                  client to server, last
//!   ```
//!
//!   The first line is `ibv_rc_pingpong`'s own message: `format!("{lid:04x}:{qpn:06x}:
//!   {psn:06x}:{gid}")` with the GID as 32 hex digits in wire order (lid is always 0 here)
//!   plus a newline, 52 bytes like `ibv_rc_pingpong`'s NUL-terminated one; a reader
//!   accepts NUL as well as a newline as the end of a line, and `done\n` is as long as
//!   `ibv_rc_pingpong`'s `"done"` with its NUL, so `--op send` can interoperate with it.
//!
//! * **Manual** ([`Rendezvous::Manual`]), for VMs whose guests cannot reach each other:
//!   the peer's values come from the command line (`--peer QPN:GID:PSN[:RKEY:ADDR]`, hex)
//!   or from a line on standard input (`--peer -`), after this side printed its own
//!   (`local: qpn 0x11 gid ... psn 0x0 rkey 0x.. addr 0x..`). A freshly opened function
//!   hands out deterministic objects: its first QP is QPN 0x11, its first MR the same key
//!   every time, and (on the host, over vfio-user) this tool's buffer the same address; the
//!   PSN defaults to 0 in manual mode. So both command lines can be written in advance
//!   (in a VM the buffer's address is guest-physical and differs from run to run: there,
//!   `--op write` and `--op read` want `--peer -`).
//!   Since neither side knows when the other is ready, the `--initiator` side sends a
//!   small control message first and, while the peer's QP is not there yet (transport
//!   retries exceeded), resets its QP and tries again until the time limit; the other
//!   side answers, and both check they run the same `--op`, `--size` and `--iters`.
//!
//! # What each operation does
//!
//! * `send`: the client (initiator) SENDs `size` bytes, the server replies with a SEND of
//!   `size` bytes, `iters` times; each side keeps receives posted.
//! * `write`: the initiator RDMA-WRITEs `size` bytes into the peer's buffer with immediate
//!   data (the iteration number), which consumes a receive at the peer and so tells it;
//!   the peer checks its buffer and writes back the same way.
//! * `read`: the initiator RDMA-READs `size` bytes of the peer's buffer and checks them
//!   against the pattern the peer filled it with, `iters` times, then SENDs a control
//!   message `done` (with its figures, which the peer prints) to the peer, which only waits
//!   for it.
//!
//! # Following a migrated QP
//!
//! With [`Config::follow`] the tool also opens a second function of its guest (on the
//! host: sharing its memory). When the PF moves the QP there (`rnic-admin migrate`), the
//! first function reports `QP_DEPARTED`: the tool adopts the QP on the second one
//! ([`rnic_driver::verbs::Qp::adopt`]) and goes on; the same if it is moved back. The report
//! says how many moves it followed.
//!
//! # Figures
//!
//! As `ibv_rc_pingpong` counts them: `bytes` is `2 * size * iters` for send and write
//! (both directions), `size * iters` for read; Mbit/s is `bytes * 8 / usec`, usec/iter
//! `usec / iters`. The initiator's clock runs over all its iterations, and each latency
//! sample is one iteration (post to answer, or to the READ's completion). A send or write
//! responder's clock runs from the first message it receives to the completion of its
//! last answer, and its samples are the times between consecutive messages; a read
//! responder sees no READs and reports the initiator's figures, which `done` carries.
//!
//! # Control messages
//!
//! 64 bytes, sent as SENDs in manual mode (the hello and its answer) and at the end of
//! `read` (`done`): `RNICPP`, version 1, kind (1 hello, 2 done), op (1 send, 2 write,
//! 3 read), 1 if from the initiator, 6 reserved bytes, then little-endian u64s: size,
//! iters, and for `done` the run's nanoseconds and min, median and max latency in ns.
//!
//! With `check` on, every byte transferred is verified: the data of iteration `k` from
//! side `s` is [`pattern_byte`]`(s, k, i)`, which differs at every byte from the data of
//! any other iteration less than 256 apart, so stale data is caught; before each READ the
//! local destination is filled with the complement of what the READ must bring.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rnic_driver::transport::sysfs::SysfsTransport;
use rnic_driver::transport::vfio_user::{VfioUserOptions, VfioUserTransport, DEFAULT_MEMORY};
use rnic_driver::transport::{DmaBuffer, Transport};
use rnic_driver::verbs::{
    self, mtu, Context, Cq, Mr, Pd, Qp, QpCaps, QpState, RecvWr, SendWr, Wc, WcOpcode, WcStatus,
    WrOpcode,
};
use rnic_driver::Device;

/// `ibv_rc_pingpong`'s TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// The QP number of the first QP created on a freshly opened function (the device starts
/// at 0x11, after InfiniBand's special QPs).
pub const FIRST_QPN: u32 = rnic_abi::verbs::FIRST_QPN;
/// Bytes of a control message (manual-mode handshake, the READ test's `done`).
pub const CTRL_LEN: usize = 64;
/// Where control messages arrive in the buffer.
const CTRL_IN: usize = 0;
/// Where control messages are sent from.
const CTRL_OUT: usize = CTRL_LEN;
/// Where data arrives (SEND), where the peer writes (WRITE) or reads (READ): the address
/// this side advertises.
const DATA_IN: usize = 4096;
/// Receives kept posted at most.
const RX_DEPTH: u32 = 128;
/// Send queue depth: a ping-pong has one or two sends outstanding.
const TX_DEPTH: u32 = 16;
/// The RNR NAK timer code the responder advertises (0.64 ms, as `ibv_rc_pingpong`).
const MIN_RNR_TIMER: u8 = 12;
/// How long a wait sleeps at most before it looks at the clock again (and whether the QP
/// moved, with --follow-*).
const WAIT_SLICE: Duration = Duration::from_millis(20);
/// The same for a wait on completion events with no QP to follow: the event ends it, so
/// the slice only bounds how late the time limit is noticed, and a long one keeps an idle
/// waiter asleep.
const EVENT_WAIT_SLICE: Duration = Duration::from_secs(1);
/// Magic of control messages.
const CTRL_MAGIC: &[u8; 6] = b"RNICPP";
/// Version of control messages.
const CTRL_VERSION: u8 = 1;

/// An error of the ping-pong, with what went wrong and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingpongError(pub String);

impl std::fmt::Display for PingpongError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PingpongError {}

/// Result of the ping-pong.
pub type Result<T> = std::result::Result<T, PingpongError>;

pub(crate) fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(PingpongError(msg.into()))
}

/// Adds what was being done to a driver error.
pub(crate) fn drv(what: &str) -> impl FnOnce(rnic_driver::Error) -> PingpongError + '_ {
    move |e| PingpongError(format!("{what}: {e}"))
}

/// The operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// SEND ping-pong.
    Send,
    /// RDMA WRITE with immediate ping-pong.
    Write,
    /// RDMA READs by the initiator.
    Read,
}

impl Op {
    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
        }
    }

    fn code(self) -> u8 {
        match self {
            Op::Send => 1,
            Op::Write => 2,
            Op::Read => 3,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        [Op::Send, Op::Write, Op::Read]
            .into_iter()
            .find(|o| o.code() == c)
    }

    /// Whether the peer needs this side's rkey and buffer address.
    pub fn needs_remote_buffer(self) -> bool {
        self != Op::Send
    }
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "send" => Ok(Op::Send),
            "write" => Ok(Op::Write),
            "read" => Ok(Op::Read),
            _ => Err(format!("unknown operation {s:?}: use send, write or read")),
        }
    }
}

/// The rkey and address of a side's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Remote key.
    pub rkey: u32,
    /// Address of the first byte, as work requests name it (the MR's iova).
    pub addr: u64,
}

/// What one side tells the other: `ibv_rc_pingpong`'s `struct pingpong_dest`, plus the
/// buffer for WRITEs and READs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// InfiniBand LID (0: RoCE has none).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN the side sends (24 bits).
    pub psn: u32,
    /// The function's GID.
    pub gid: [u8; 16],
    /// The buffer the peer may write or read.
    pub buf: Option<RemoteBuf>,
}

/// A GID as 32 hex digits, bytes in wire order (as `ibv_rc_pingpong`'s `gid_to_wire_gid`).
pub fn format_gid(gid: &[u8; 16]) -> String {
    gid.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses 32 hex digits into a GID, or an IPv6 address in brackets (`[::ffff:10.82.0.2]`,
/// as rnic-info prints GIDs).
pub fn parse_gid(s: &str) -> Result<[u8; 16]> {
    if let Some(v6) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .map(|a| a.octets())
            .map_err(|_| PingpongError(format!("GID {s:?} is not an IPv6 address")));
    }
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return fail(format!(
            "GID {s:?} is not 32 hex digits (e.g. 00000000000000000000ffff0a000001)"
        ));
    }
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("checked hex digits");
    }
    Ok(gid)
}

/// Splits at colons, except inside brackets (a GID in IPv6 notation).
fn split_fields(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ':' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses a hex number with an optional `0x`, no wider than `bits`.
fn parse_hex(s: &str, bits: u32, what: &str) -> Result<u64> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let v = u64::from_str_radix(digits, 16)
        .map_err(|_| PingpongError(format!("{what} {s:?} is not a hex number")))?;
    if bits < 64 && v >> bits != 0 {
        return fail(format!("{what} {s:?} is wider than {bits} bits"));
    }
    Ok(v)
}

impl Dest {
    /// The first wire line, without its newline: `LLLL:QQQQQQ:PPPPPP:G*32`.
    pub fn line(&self) -> String {
        format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            format_gid(&self.gid)
        )
    }

    /// The second wire line, without its newline: `RRRRRRRR:AAAAAAAAAAAAAAAA`.
    pub fn buf_line(&self) -> Option<String> {
        self.buf.map(|b| format!("{:08x}:{:016x}", b.rkey, b.addr))
    }

    /// Parses a first wire line (`LLLL:QQQQQQ:PPPPPP:GID`).
    pub fn parse_line(line: &str) -> Result<Dest> {
        let bad = || {
            PingpongError(format!(
                "the peer sent {line:?}, not LLLL:QQQQQQ:PPPPPP:GID (an rnic-pingpong or ibv_rc_pingpong on the other end?)"
            ))
        };
        let f: Vec<&str> = line.trim().split(':').collect();
        let [lid, qpn, psn, gid] = f[..] else {
            return Err(bad());
        };
        Ok(Dest {
            lid: parse_hex(lid, 16, "LID").map_err(|_| bad())? as u16,
            qpn: parse_hex(qpn, 24, "QPN").map_err(|_| bad())? as u32,
            psn: parse_hex(psn, 24, "PSN").map_err(|_| bad())? as u32,
            gid: parse_gid(gid)?,
            buf: None,
        })
    }

    /// Parses a second wire line (`RKEY:ADDR`).
    pub fn parse_buf_line(line: &str) -> Result<RemoteBuf> {
        let bad = || {
            PingpongError(format!(
                "the peer sent {line:?}, not RRRRRRRR:AAAAAAAAAAAAAAAA (does it run the same --op?)"
            ))
        };
        let (rkey, addr) = line.trim().split_once(':').ok_or_else(bad)?;
        Ok(RemoteBuf {
            rkey: parse_hex(rkey, 32, "rkey").map_err(|_| bad())? as u32,
            addr: parse_hex(addr, 64, "address").map_err(|_| bad())?,
        })
    }

    /// Parses `--peer QPN:GID:PSN[:RKEY:ADDR]` (hex, `0x` optional; the GID as 32 hex
    /// digits or an IPv6 address in brackets).
    pub fn parse_peer(s: &str) -> Result<Dest> {
        let f = split_fields(s.trim());
        let (qpn, gid, psn, buf) = match f[..] {
            [qpn, gid, psn] => (qpn, gid, psn, None),
            [qpn, gid, psn, rkey, addr] => (qpn, gid, psn, Some((rkey, addr))),
            _ => {
                return fail(format!(
                    "--peer {s:?}: expected QPN:GID:PSN or QPN:GID:PSN:RKEY:ADDR in hex, as the other side's `local:` line prints them"
                ))
            }
        };
        let buf = match buf {
            Some((rkey, addr)) => Some(RemoteBuf {
                rkey: parse_hex(rkey, 32, "--peer rkey")? as u32,
                addr: parse_hex(addr, 64, "--peer address")?,
            }),
            None => None,
        };
        Ok(Dest {
            lid: 0,
            qpn: parse_hex(qpn, 24, "--peer QPN")? as u32,
            psn: parse_hex(psn, 24, "--peer PSN")? as u32,
            gid: parse_gid(gid)?,
            buf,
        })
    }

    /// The `--peer` argument that names this side.
    pub fn peer_arg(&self) -> String {
        let mut s = format!("{:x}:{}:{:x}", self.qpn, format_gid(&self.gid), self.psn);
        if let Some(b) = self.buf {
            s += &format!(":{:x}:{:x}", b.rkey, b.addr);
        }
        s
    }

    /// The human line: `qpn 0x11 gid ... psn 0x0 [rkey 0x.. addr 0x..]`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "qpn {:#x} gid {} psn {:#x}",
            self.qpn,
            format_gid(&self.gid),
            self.psn
        );
        if let Some(b) = self.buf {
            s += &format!(" rkey {:#x} addr {:#x}", b.rkey, b.addr);
        }
        s
    }

    pub(crate) fn json(&self) -> DestJson {
        DestJson {
            qpn: self.qpn,
            gid: format_gid(&self.gid),
            psn: self.psn,
            rkey: self.buf.map(|b| b.rkey),
            addr: self.buf.map(|b| format!("{:#x}", b.addr)),
        }
    }
}

/// Byte `i` of the data side `stream` (0: initiator, 1: the other side) sends in iteration
/// `iter`: a base sequence plus [`pattern_offset`]. Consecutive iterations differ at every
/// byte (by 0x35, odd), and so does any other iteration less than 256 away.
pub fn pattern_byte(stream: u8, iter: u64, i: usize) -> u8 {
    pattern_base(i).wrapping_add(pattern_offset(stream, iter))
}

fn pattern_base(i: usize) -> u8 {
    let i = i as u64;
    i.wrapping_mul(0x9d).wrapping_add(i >> 8) as u8
}

/// What side `stream` adds to the base sequence in iteration `iter`.
pub fn pattern_offset(stream: u8, iter: u64) -> u8 {
    iter.wrapping_mul(0x35)
        .wrapping_add(u64::from(stream).wrapping_mul(0x6b)) as u8
}

/// `len` bytes of [`pattern_byte`].
pub fn pattern(stream: u8, iter: u64, len: usize) -> Vec<u8> {
    Pattern::new(len).data(stream, iter)
}

/// The data of a run: the base sequence computed once, so that filling and checking cost
/// one addition and one comparison per byte.
#[derive(Clone, Debug)]
pub struct Pattern {
    base: Vec<u8>,
}

impl Pattern {
    /// The patterns of `len`-byte messages.
    pub fn new(len: usize) -> Pattern {
        Pattern {
            base: (0..len).map(pattern_base).collect(),
        }
    }

    /// The data side `stream` sends in iteration `iter`.
    pub fn data(&self, stream: u8, iter: u64) -> Vec<u8> {
        let off = pattern_offset(stream, iter);
        self.base.iter().map(|b| b.wrapping_add(off)).collect()
    }

    /// Checks `got` against the data of `stream` in iteration `iter`.
    pub fn verify(&self, got: &[u8], stream: u8, iter: u64) -> Result<()> {
        if got == self.data(stream, iter).as_slice() {
            return Ok(());
        }
        verify(got, stream, iter)
    }
}

/// How the two sides meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// TCP server on this port (0: any, printed); the server answers the client.
    Listen(u16),
    /// TCP client of `HOST[:PORT]`; the client sends first.
    Connect(String),
    /// No TCP: the peer's values are given.
    Manual {
        /// The peer, or `None` to read `QPN:GID:PSN[:RKEY:ADDR]` from standard input.
        peer: Option<Dest>,
        /// This side sends first.
        initiator: bool,
    },
}

impl Rendezvous {
    /// Whether this side sends first.
    pub fn initiator(&self) -> bool {
        match self {
            Rendezvous::Listen(_) => false,
            Rendezvous::Connect(_) => true,
            Rendezvous::Manual { initiator, .. } => *initiator,
        }
    }
}

/// Which function to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// A vfio-user socket of rnicd (host).
    VfioUser(PathBuf),
    /// A PCI function (in a VM).
    Pci(String),
    /// The first rnic function on the PCI bus.
    FirstPci,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The function.
    pub device: DeviceChoice,
    /// How to meet the peer.
    pub rendezvous: Rendezvous,
    /// The operation.
    pub op: Op,
    /// Bytes per message.
    pub size: usize,
    /// Iterations.
    pub iters: u64,
    /// Path MTU in bytes (256 to 4096).
    pub mtu: u32,
    /// First PSN this side sends (24 bits).
    pub psn: u32,
    /// Local ACK timeout code (4.096 us * 2^code).
    pub timeout: u8,
    /// Transport retries.
    pub retry: u8,
    /// Verify every byte.
    pub check: bool,
    /// Sleep on completion events instead of polling.
    pub events: bool,
    /// The whole run's time limit (`None`: none).
    pub time_limit: Option<Duration>,
    /// A second function of this guest that the QP may be moved to (`MIGRATE_QP`, issued
    /// on the PF): when the first function reports the QP's departure, the ping-pong
    /// follows it there, and back again if it returns. On the host (vfio-user) the two
    /// functions share this tool's memory, as two VFs of one VM do.
    pub follow: Option<DeviceChoice>,
}

/// The path MTU code of `bytes`.
pub fn mtu_code(bytes: u32) -> Option<u8> {
    Some(match bytes {
        256 => mtu::MTU_256,
        512 => mtu::MTU_512,
        1024 => mtu::MTU_1024,
        2048 => mtu::MTU_2048,
        4096 => mtu::MTU_4096,
        _ => return None,
    })
}

/// A 24-bit PSN from the time and the process ID, as `ibv_rc_pingpong`'s `lrand48()`
/// seeded with both.
pub fn random_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x & 0xFF_FFFF) as u32
}

/// Latency figures in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Fastest iteration.
    pub min: f64,
    /// Median iteration.
    pub median: f64,
    /// Slowest iteration.
    pub max: f64,
}

impl Latency {
    /// The figures of `samples` (nanoseconds); `None` without samples.
    pub fn of(samples: &[u64]) -> Option<Latency> {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let median = match s.len() {
            0 => return None,
            n if n % 2 == 1 => s[n / 2] as f64,
            n => (s[n / 2 - 1] as f64 + s[n / 2] as f64) / 2.0,
        };
        Some(Latency {
            min: s[0] as f64 / 1e3,
            median: median / 1e3,
            max: s[s.len() - 1] as f64 / 1e3,
        })
    }
}

/// A side's parameters, for JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DestJson {
    /// QP number.
    pub qpn: u32,
    /// GID, 32 hex digits.
    pub gid: String,
    /// First PSN.
    pub psn: u32,
    /// Buffer rkey (write/read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rkey: Option<u32>,
    /// Buffer address, hex (write/read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// The operation.
    pub op: Op,
    /// "initiator" (sends first) or "responder".
    pub role: &'static str,
    /// Bytes per message.
    pub size: usize,
    /// Iterations.
    pub iters: u64,
    /// Bytes moved in all, both directions (`2 * size * iters` for send and write,
    /// `size * iters` for read).
    pub bytes: u64,
    /// Seconds the iterations took.
    pub seconds: f64,
    /// `bytes * 8 / seconds / 1e6`.
    pub mbit_per_s: f64,
    /// `seconds * 1e6 / iters`.
    pub usec_per_iter: f64,
    /// Per-iteration figures: the initiator's round trips; for a send or write
    /// responder, the times between consecutive messages received; for a read responder,
    /// the initiator's figures, which its `done` carries. `None` with fewer than one
    /// sample.
    pub latency_usec: Option<Latency>,
    /// Whether every byte was verified.
    pub checked: bool,
    /// Whose clock the figures come from: "self", or "initiator" for a read responder
    /// (which sees no READs and prints what the initiator's `done` says).
    pub measured_by: &'static str,
    /// This side.
    pub local: DestJson,
    /// The peer.
    pub remote: DestJson,
    /// How many times the QP moved to another function during the run and was followed
    /// there ([`Config::follow`]).
    pub migrations_followed: u32,
}

impl Report {
    fn new(
        cfg: &Config,
        role: &'static str,
        elapsed: Duration,
        latency: Option<Latency>,
        local: &Dest,
        remote: &Dest,
    ) -> Report {
        let dirs = if cfg.op == Op::Read { 1 } else { 2 };
        let bytes = cfg.size as u64 * cfg.iters * dirs;
        let seconds = elapsed.as_secs_f64();
        let usec = (seconds * 1e6).max(f64::MIN_POSITIVE);
        Report {
            op: cfg.op,
            role,
            size: cfg.size,
            iters: cfg.iters,
            bytes,
            seconds,
            mbit_per_s: bytes as f64 * 8.0 / usec,
            usec_per_iter: usec / cfg.iters as f64,
            latency_usec: latency,
            checked: cfg.check,
            measured_by: if cfg.op == Op::Read && role == "responder" {
                "initiator"
            } else {
                "self"
            },
            local: local.json(),
            remote: remote.json(),
            migrations_followed: 0,
        }
    }

    /// `ibv_rc_pingpong`-style text: `N iters of S bytes in T s: X Mbit/s, Y usec/iter`
    /// and a latency line.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} iters of {} bytes in {:.3} s: {:.2} Mbit/s, {:.2} usec/iter\n",
            self.iters, self.size, self.seconds, self.mbit_per_s, self.usec_per_iter
        );
        match self.latency_usec {
            Some(l) => {
                s += &format!(
                    "latency: min {:.2} usec, median {:.2} usec, max {:.2} usec\n",
                    l.min, l.median, l.max
                )
            }
            None => s += "latency: no samples\n",
        }
        if self.measured_by != "self" {
            s += &format!("(figures measured by the {})\n", self.measured_by);
        }
        if self.migrations_followed > 0 {
            s += &format!(
                "followed the QP through {} migration(s)\n",
                self.migrations_followed
            );
        }
        s
    }
}

/// What a control message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ctrl {
    kind: CtrlKind,
    /// Sent by the side with `--initiator`.
    initiator: bool,
    op: Op,
    size: u64,
    iters: u64,
    /// `done` only: nanoseconds of the run, min, median, max (the median rounded).
    elapsed_ns: u64,
    lat_ns: [u64; 3],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtrlKind {
    Hello,
    Done,
}

impl Ctrl {
    fn encode(&self) -> [u8; CTRL_LEN] {
        let mut b = [0u8; CTRL_LEN];
        b[..6].copy_from_slice(CTRL_MAGIC);
        b[6] = CTRL_VERSION;
        b[7] = match self.kind {
            CtrlKind::Hello => 1,
            CtrlKind::Done => 2,
        };
        b[8] = self.op.code();
        b[9] = u8::from(self.initiator);
        for (i, v) in [
            self.size,
            self.iters,
            self.elapsed_ns,
            self.lat_ns[0],
            self.lat_ns[1],
            self.lat_ns[2],
        ]
        .into_iter()
        .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Result<Ctrl> {
        if b.len() < CTRL_LEN || &b[..6] != CTRL_MAGIC || b[6] != CTRL_VERSION {
            return fail(
                "the peer sent a message that is not an rnic-pingpong control message (does it run the same version and --op?)",
            );
        }
        let kind = match b[7] {
            1 => CtrlKind::Hello,
            2 => CtrlKind::Done,
            k => {
                return fail(format!(
                    "the peer sent a control message of unknown kind {k}"
                ))
            }
        };
        let op = Op::from_code(b[8])
            .ok_or_else(|| PingpongError(format!("the peer runs an unknown operation {}", b[8])))?;
        let u = |i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().expect("8"));
        Ok(Ctrl {
            kind,
            initiator: b[9] != 0,
            op,
            size: u(0),
            iters: u(1),
            elapsed_ns: u(2),
            lat_ns: [u(3), u(4), u(5)],
        })
    }

    /// Checks that the peer runs what we run.
    fn check_same(&self, cfg: &Config) -> Result<()> {
        if (self.op, self.size, self.iters) != (cfg.op, cfg.size as u64, cfg.iters) {
            return fail(format!(
                "the peer runs --op {} --size {} --iters {}, this side --op {} --size {} --iters {}: both sides need the same --op, --size and --iters",
                self.op.name(),
                self.size,
                self.iters,
                cfg.op.name(),
                cfg.size,
                cfg.iters
            ));
        }
        Ok(())
    }
}

/// What a receive WQE is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvKind {
    /// A control message, into `CTRL_IN`.
    Ctrl,
    /// Data (SEND) or a WRITE's immediate, into `DATA_IN`.
    Data,
}

/// Work request IDs: the kind in the low byte, the iteration above.
mod wr_id {
    pub const SEND: u64 = 1;
    pub const WRITE: u64 = 2;
    pub const READ: u64 = 3;
    pub const CTRL_SEND: u64 = 4;
    pub const RECV_DATA: u64 = 5;
    pub const RECV_CTRL: u64 = 6;

    pub fn make(kind: u64, iter: u64) -> u64 {
        kind | iter << 8
    }

    pub fn kind(id: u64) -> u64 {
        id & 0xff
    }

    pub fn name(id: u64) -> &'static str {
        match kind(id) {
            SEND => "SEND",
            WRITE => "RDMA WRITE with immediate",
            READ => "RDMA READ",
            CTRL_SEND => "control SEND",
            RECV_DATA => "receive",
            RECV_CTRL => "control receive",
            _ => "unknown work request",
        }
    }
}

/// The verbs objects of one side. Fields drop in order: the QP before what it uses.
struct Session {
    qp: Qp,
    mr: Mr,
    cq: Cq,
    _pd: Pd,
    /// The context of the function the QP is on now.
    ctx: Context,
    /// The other function of [`Config::follow`], where the QP may go.
    spare: Option<Context>,
    /// Migrations followed.
    followed: u32,
    cfg: Config,
    /// Offset of the data this side sends (SEND and WRITE source).
    data_out: usize,
    deadline: Option<Instant>,
    /// Completions polled but not looked at yet.
    pending: VecDeque<Wc>,
    /// Successful completions already accounted for, put aside while waiting for another
    /// one; handed out again first, in order.
    stash: VecDeque<Wc>,
    /// Receives still to post, in the order messages will come.
    to_post: VecDeque<RecvKind>,
    /// Receives posted and not completed, in order.
    posted: VecDeque<RecvKind>,
    local: Dest,
    pattern: Pattern,
}

/// Opens the function and allocates `buf_len` bytes of DMA memory for this tool's buffer
/// first, so that on a fresh vfio-user function its address is the first page of guest
/// memory every time.
pub(crate) fn open(
    choice: &DeviceChoice,
    follow: Option<&DeviceChoice>,
    buf_len: usize,
) -> Result<(Device, Option<Device>, Arc<DmaBuffer>)> {
    let pci = |bdf: &str| -> Result<Box<dyn Transport>> {
        rnic_driver::transport::open_pci(bdf).map_err(drv(&format!(
            "open PCI function {bdf} (as root, with the function bound to no driver, or to vfio-pci behind an IOMMU)"
        )))
    };
    let mut spare: Option<Box<dyn Transport>> = None;
    let transport: Box<dyn Transport> = match choice {
        DeviceChoice::VfioUser(path) => {
            let options = VfioUserOptions {
                memory: DEFAULT_MEMORY.max(buf_len + (16 << 20)),
                ..VfioUserOptions::default()
            };
            let first = VfioUserTransport::connect_with(path, &options)
                .map_err(drv(&format!("open vfio-user function {}", path.display())))?;
            match follow {
                None => {}
                Some(DeviceChoice::VfioUser(second)) => {
                    // Two functions of one "guest": the second maps the first's memory.
                    spare = Some(Box::new(
                        VfioUserTransport::connect_sharing(second, &first).map_err(drv(
                            &format!("open vfio-user function {}", second.display()),
                        ))?,
                    ));
                }
                Some(_) => {
                    return fail("--follow-vfio-user goes with --vfio-user (both on the host)")
                }
            }
            Box::new(first)
        }
        DeviceChoice::Pci(bdf) => pci(bdf)?,
        DeviceChoice::FirstPci => {
            let all = SysfsTransport::find_all().map_err(|e| {
                PingpongError(format!(
                    "look for rnic functions on the PCI bus: {e}; on the host use --vfio-user PATH (a socket of rnicd)"
                ))
            })?;
            let Some(bdf) = all.first() else {
                return fail(
                    "no rnic function found on this machine's PCI bus: on the host use --vfio-user PATH (a socket of rnicd); in a VM attach an rnic function or name it with --pci BDF",
                );
            };
            pci(bdf)?
        }
    };
    if spare.is_none() {
        match follow {
            Some(DeviceChoice::Pci(bdf)) if !matches!(choice, DeviceChoice::VfioUser(_)) => {
                // In a VM every function reaches all of guest memory at its physical
                // addresses, or (behind an IOMMU) everything this process's VFIO
                // container maps, so the second function needs nothing shared explicitly.
                spare = Some(pci(bdf)?);
            }
            Some(_) => return fail("--follow-pci goes with a PCI function (in a VM)"),
            None => {}
        }
    }
    let buf = transport
        .alloc_dma(buf_len)
        .map_err(drv("allocate the DMA buffer (try a smaller --size)"))?;
    let device = Device::open(transport).map_err(drv("open the function"))?;
    let spare = spare
        .map(|t| Device::open(t).map_err(drv("open the function to follow the QP to")))
        .transpose()?;
    Ok((device, spare, Arc::new(buf)))
}

/// Checks `--size`, `--iters` and `--mtu`.
pub(crate) fn check_sizes(size: usize, iters: u64, mtu: u32) -> Result<()> {
    if size == 0 || size > u32::MAX as usize {
        return fail(format!("--size {size}: must be 1 to {} bytes", u32::MAX));
    }
    if iters == 0 {
        return fail("--iters must be at least 1");
    }
    if mtu_code(mtu).is_none() {
        return fail(format!("--mtu {mtu}: use 256, 512, 1024, 2048 or 4096"));
    }
    Ok(())
}

/// An RC QP on `cq` with `tx` send and `rx` receive WQEs of one SGE each, no inline data.
pub(crate) fn rc_qp(pd: &Pd, cq: &Cq, tx: u32, rx: u32) -> Result<Qp> {
    let caps = QpCaps {
        max_send_wr: tx,
        max_recv_wr: rx,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    pd.create_qp(cq, cq, caps, false)
        .map_err(drv("create the queue pair"))
}

pub(crate) fn page_round(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

impl Session {
    fn new(cfg: &Config, deadline: Option<Instant>) -> Result<Session> {
        check_sizes(cfg.size, cfg.iters, cfg.mtu)?;
        let data_out = DATA_IN + page_round(cfg.size);
        let buf_len = data_out + page_round(cfg.size);
        let (device, spare, buf) = open(&cfg.device, cfg.follow.as_ref(), buf_len)?;
        let ctx = Context::new(device).map_err(drv("open the function for RDMA verbs"))?;
        let spare = spare
            .map(|d| Context::new(d).map_err(drv("open the function to follow to for RDMA verbs")))
            .transpose()?;
        let limits = ctx.attr().limits;
        if (buf_len as u64) > limits.max_mr_size {
            return fail(format!(
                "--size {}: the buffer ({buf_len} bytes) exceeds the function's largest memory region ({} bytes)",
                cfg.size, limits.max_mr_size
            ));
        }
        let pd = ctx
            .alloc_pd()
            .map_err(drv("allocate a protection domain"))?;
        let rx = RX_DEPTH.min(limits.max_qp_wr.max(1));
        let tx = TX_DEPTH.min(limits.max_qp_wr.max(1));
        let cq = ctx
            .create_cq(((rx + tx) * 2).min(limits.max_cqe.max(2)))
            .map_err(drv("create a completion queue"))?;
        let access =
            verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_WRITE | verbs::ACCESS_REMOTE_READ;
        let mr = pd
            .reg_mr(buf, 0, buf_len, access)
            .map_err(drv("register the buffer"))?;
        let qp = rc_qp(&pd, &cq, tx, rx)?;
        let local = Dest {
            lid: 0,
            qpn: qp.qp_num(),
            psn: cfg.psn & 0xFF_FFFF,
            gid: ctx.attr().gid,
            buf: Some(RemoteBuf {
                rkey: mr.rkey(),
                addr: mr.addr(DATA_IN),
            }),
        };
        let mut s = Session {
            qp,
            mr,
            cq,
            _pd: pd,
            ctx,
            spare,
            followed: 0,
            cfg: cfg.clone(),
            data_out,
            deadline,
            pending: VecDeque::new(),
            stash: VecDeque::new(),
            to_post: VecDeque::new(),
            posted: VecDeque::new(),
            local,
            pattern: Pattern::new(if cfg.check || cfg.op == Op::Read {
                cfg.size
            } else {
                0
            }),
        };
        s.to_init()?;
        // Every receive this side will need, in the order the messages come.
        let initiator = cfg.rendezvous.initiator();
        if matches!(cfg.rendezvous, Rendezvous::Manual { .. }) {
            s.to_post.push_back(RecvKind::Ctrl);
        }
        match cfg.op {
            Op::Send | Op::Write => s
                .to_post
                .extend(std::iter::repeat_n(RecvKind::Data, cfg.iters as usize)),
            Op::Read if !initiator => {
                s.to_post.push_back(RecvKind::Ctrl);
                // What the initiator reads and checks.
                s.mr.write(DATA_IN, &s.pattern.data(1, 0));
            }
            Op::Read => {}
        }
        s.post_receives()?;
        Ok(s)
    }

    fn to_init(&self) -> Result<()> {
        let access = match self.cfg.op {
            Op::Send => 0,
            Op::Write => verbs::ACCESS_REMOTE_WRITE,
            Op::Read => verbs::ACCESS_REMOTE_READ,
        };
        let (a, m) = verbs::init_attr(access);
        self.qp.modify(&a, m).map_err(drv("move the QP to INIT"))
    }

    /// Moves the QP to RTR and RTS towards `remote`.
    fn connect(&self, remote: &Dest) -> Result<()> {
        let mtu = mtu_code(self.cfg.mtu).expect("checked in new");
        let (a, m) = verbs::rtr_attr(remote.qpn, remote.gid, remote.psn, mtu, 1, MIN_RNR_TIMER);
        self.qp.modify(&a, m).map_err(drv(&format!(
            "move the QP to RTR towards {} (--mtu {})",
            remote.describe(),
            self.cfg.mtu
        )))?;
        let (a, m) = verbs::rts_attr(self.local.psn, self.cfg.timeout, self.cfg.retry, 7, 1);
        self.qp.modify(&a, m).map_err(drv("move the QP to RTS"))
    }

    /// After the QP failed (the peer was not there yet): takes the flushed receives back
    /// into the plan, and moves the QP through RESET back to RTS.
    fn reconnect(&mut self, remote: &Dest) -> Result<()> {
        let flushed_by = Instant::now() + Duration::from_secs(2);
        let mut receives = self.posted.len();
        while receives > 0 && Instant::now() < flushed_by {
            match self.pending.pop_front() {
                Some(wc) => receives -= usize::from(wc.is_recv()),
                None => {
                    let got = self.cq.poll(16);
                    if got.is_empty() {
                        self.ctx
                            .check_alive()
                            .map_err(drv("wait for the flushed receives"))?;
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    self.pending.extend(got);
                }
            }
        }
        self.pending.clear();
        while let Some(k) = self.posted.pop_back() {
            self.to_post.push_front(k);
        }
        let (a, m) = (
            verbs::QpAttr {
                qp_state: QpState::Reset as u8,
                ..verbs::QpAttr::default()
            },
            verbs::attr::STATE,
        );
        self.qp.modify(&a, m).map_err(drv("reset the QP"))?;
        self.to_init()?;
        self.post_receives()?;
        self.connect(remote)
    }

    /// Posts receives from the plan while the receive queue has room.
    fn post_receives(&mut self) -> Result<()> {
        let n = (self.qp.rq_free_slots() as usize).min(self.to_post.len());
        if n == 0 {
            return Ok(());
        }
        let wrs: Vec<RecvWr> = self
            .to_post
            .iter()
            .take(n)
            .map(|k| match k {
                RecvKind::Ctrl => RecvWr {
                    wr_id: wr_id::RECV_CTRL,
                    sges: vec![self.mr.sge(CTRL_IN, CTRL_LEN)],
                },
                RecvKind::Data => RecvWr {
                    wr_id: wr_id::RECV_DATA,
                    sges: vec![self.mr.sge(DATA_IN, self.cfg.size)],
                },
            })
            .collect();
        self.qp.post_recv_list(&wrs).map_err(drv("post receives"))?;
        let taken: Vec<RecvKind> = self.to_post.drain(..n).collect();
        self.posted.extend(taken);
        Ok(())
    }

    fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    fn timed_out(&self, what: &str) -> PingpongError {
        timed_out(self.cfg.time_limit, what)
    }

    /// The next completion, successful or not, in the order the device wrote them.
    fn next_wc_any(&mut self, what: &str) -> Result<Wc> {
        let mut idle = 0u32;
        loop {
            if let Some(wc) = self.pending.pop_front() {
                return Ok(wc);
            }
            let got = self.cq.poll(16);
            if !got.is_empty() {
                self.pending.extend(got);
                continue;
            }
            // Nothing to do: a moment to see whether the QP moved.
            self.follow_migration()?;
            let left = self.time_left();
            if left == Some(Duration::ZERO) {
                return Err(self.timed_out(what));
            }
            let most = if self.cfg.events && self.spare.is_none() {
                EVENT_WAIT_SLICE
            } else {
                WAIT_SLICE
            };
            let slice = left.map_or(most, |l| l.min(most));
            let got = idle_wait(&self.ctx, &self.cq, self.cfg.events, &mut idle, slice)?;
            self.pending.extend(got);
        }
    }

    /// If the QP left the function it is on (`QP_DEPARTED`), follows it to the other
    /// function of [`Config::follow`]: adopts it there and makes that the current
    /// context. Completions keep arriving in the same CQ ring meanwhile; work posted
    /// before the adoption is announced to the new function by it.
    fn follow_migration(&mut self) -> Result<()> {
        let Some(spare) = &self.spare else {
            return Ok(());
        };
        let qpn = self.qp.qp_num();
        let departed = self
            .ctx
            .wait_async_event(verbs::AsyncEvent::QpDeparted, qpn, Duration::ZERO)
            .map_err(drv("look at the event queue"))?;
        if !departed {
            return Ok(());
        }
        // Posted together with the departure, so it is there already.
        let arrived = spare
            .wait_async_event(verbs::AsyncEvent::QpArrived, qpn, Duration::from_secs(5))
            .map_err(drv("look at the other function's event queue"))?;
        if !arrived {
            return fail(format!(
                "QP {qpn:#x} left its function but did not arrive on the one to follow it to"
            ));
        }
        self.qp
            .adopt(spare, None, None)
            .map_err(drv("take over the QP on the other function"))?;
        if let Some(spare) = self.spare.as_mut() {
            std::mem::swap(&mut self.ctx, spare);
        }
        self.followed += 1;
        log::info!(
            "followed QP {qpn:#x} to {}",
            self.ctx.device().transport().describe()
        );
        Ok(())
    }

    /// The next successful completion: an error completion is an error naming it and its
    /// status. A receive completion takes its WQE off the books and posts more.
    fn next_wc(&mut self, what: &str) -> Result<Wc> {
        if let Some(wc) = self.stash.pop_front() {
            return Ok(wc);
        }
        let wc = self.next_wc_any(what)?;
        if !wc.is_success() {
            return Err(completion_error(&wc));
        }
        self.account_recv(&wc)?;
        Ok(wc)
    }

    fn account_recv(&mut self, wc: &Wc) -> Result<()> {
        if !wc.is_recv() {
            return Ok(());
        }
        let want = match wr_id::kind(wc.wr_id) {
            wr_id::RECV_CTRL => RecvKind::Ctrl,
            _ => RecvKind::Data,
        };
        let kind = self.posted.pop_front();
        if kind != Some(want) {
            return fail(format!(
                "internal error: a {} completed where a {kind:?} receive was next",
                wr_id::name(wc.wr_id)
            ));
        }
        self.post_receives()
    }

    fn post_send(&self, wr: &SendWr, what: &str) -> Result<()> {
        self.qp.post_send(wr).map_err(drv(what))
    }

    /// Posts a control message (its completion is the caller's to wait for).
    fn post_ctrl(&self, c: &Ctrl) -> Result<()> {
        self.mr.write(CTRL_OUT, &c.encode());
        self.post_send(
            &SendWr {
                wr_id: wr_id::make(wr_id::CTRL_SEND, 0),
                opcode: WrOpcode::Send,
                sges: vec![self.mr.sge(CTRL_OUT, CTRL_LEN)],
                signaled: true,
                ..SendWr::default()
            },
            "post a control SEND",
        )
    }

    fn read_ctrl(&self) -> Result<Ctrl> {
        let mut b = [0u8; CTRL_LEN];
        self.mr.read(CTRL_IN, &mut b);
        Ctrl::decode(&b)
    }

    /// Waits for completions of the kinds `want` (each once, in any order); the others
    /// that come meanwhile are kept for later. Returns the wanted ones in `want`'s order.
    fn wait_for(&mut self, want: &[u64], what: &str) -> Result<Vec<Wc>> {
        let mut got: Vec<Option<Wc>> = vec![None; want.len()];
        let mut other = Vec::new();
        // Look at what was put aside first.
        let mut stash = std::mem::take(&mut self.stash);
        while got.iter().any(Option::is_none) {
            let wc = match stash.pop_front() {
                Some(wc) => wc,
                None => self.next_wc(what)?,
            };
            match want
                .iter()
                .zip(&got)
                .position(|(k, g)| *k == wr_id::kind(wc.wr_id) && g.is_none())
            {
                Some(i) => got[i] = Some(wc),
                None => other.push(wc),
            }
        }
        other.extend(stash);
        self.stash = other.into();
        Ok(got.into_iter().map(|w| w.expect("all came")).collect())
    }

    /// The manual mode's handshake: the initiator says hello until the peer answers; both
    /// check they run the same test.
    fn handshake(&mut self, remote: &Dest, initiator: bool) -> Result<()> {
        let hello = Ctrl {
            kind: CtrlKind::Hello,
            op: self.cfg.op,
            size: self.cfg.size as u64,
            iters: self.cfg.iters,
            elapsed_ns: 0,
            lat_ns: [0; 3],
            initiator,
        };
        let waiting = "the other side (start it with the same --op, --size and --iters, --peer naming this side, and --initiator on exactly one of the two)";
        if initiator {
            let mut attempts = 0u32;
            'attempt: loop {
                attempts += 1;
                self.post_ctrl(&hello)?;
                let (mut sent, mut answer) = (false, None);
                while !sent || answer.is_none() {
                    let wc = self.next_wc_any(waiting)?;
                    if !wc.is_success() {
                        if wr_id::kind(wc.wr_id) == wr_id::CTRL_SEND
                            && wc.status == Ok(WcStatus::RetryExcErr)
                        {
                            log::info!(
                                "hello {attempts}: the peer did not answer; resetting the QP and trying again"
                            );
                            self.reconnect(remote)?;
                            continue 'attempt;
                        }
                        return Err(completion_error(&wc));
                    }
                    self.account_recv(&wc)?;
                    match wr_id::kind(wc.wr_id) {
                        wr_id::CTRL_SEND => sent = true,
                        wr_id::RECV_CTRL => answer = Some(self.read_ctrl()?),
                        _ => self.stash.push_back(wc),
                    }
                }
                let answer = answer.expect("came");
                if answer.kind != CtrlKind::Hello {
                    return fail("the peer answered the hello with something else");
                }
                if answer.initiator {
                    return fail(
                        "both sides run with --initiator: give it on exactly one of the two",
                    );
                }
                return answer.check_same(&self.cfg);
            }
        }
        self.wait_for(&[wr_id::RECV_CTRL], waiting)?;
        let theirs = self.read_ctrl()?;
        // Answer even when the tests differ, so that the initiator fails at once too.
        self.post_ctrl(&hello)?;
        self.wait_for(
            &[wr_id::CTRL_SEND],
            "the initiator to acknowledge the answer",
        )?;
        if theirs.kind != CtrlKind::Hello {
            return fail("the initiator's first message is not a hello");
        }
        theirs.check_same(&self.cfg)
    }

    /// Writes this side's data of iteration `iter` into the outgoing area.
    fn fill_out(&self, stream: u8, iter: u64) {
        if self.cfg.check {
            self.mr
                .write(self.data_out, &self.pattern.data(stream, iter));
        }
    }

    /// Checks the incoming area against the peer's data of iteration `iter`.
    fn verify_in(&self, stream: u8, iter: u64) -> Result<()> {
        if !self.cfg.check {
            return Ok(());
        }
        let mut got = vec![0u8; self.cfg.size];
        self.mr.read(DATA_IN, &mut got);
        self.pattern.verify(&got, stream, iter)
    }

    /// Posts this side's message of iteration `iter`: a SEND, or a WRITE with immediate.
    fn post_data(&self, iter: u64, remote: &Dest) -> Result<()> {
        let (kind, opcode) = match self.cfg.op {
            Op::Send => (wr_id::SEND, WrOpcode::Send),
            _ => {
                let b = remote.buf.expect("checked before the run");
                (
                    wr_id::WRITE,
                    WrOpcode::RdmaWriteWithImm {
                        remote_addr: b.addr,
                        rkey: b.rkey,
                        imm: iter as u32,
                    },
                )
            }
        };
        self.post_send(
            &SendWr {
                wr_id: wr_id::make(kind, iter),
                opcode,
                sges: vec![self.mr.sge(self.data_out, self.cfg.size)],
                signaled: true,
                ..SendWr::default()
            },
            "post a send work request",
        )
    }

    /// Checks a data receive of iteration `iter`: length (SEND) or immediate (WRITE).
    fn check_recv(&self, wc: &Wc, iter: u64) -> Result<()> {
        match self.cfg.op {
            Op::Send => {
                if wc.byte_len as usize != self.cfg.size {
                    return fail(format!(
                        "iteration {iter}: the peer sent {} bytes, expected {} (do both sides use the same --size?)",
                        wc.byte_len, self.cfg.size
                    ));
                }
            }
            _ => {
                if wc.opcode != WcOpcode::RecvRdmaWithImm {
                    return fail(format!(
                        "iteration {iter}: the peer sent a {:?}, expected an RDMA WRITE with immediate (does it run --op write?)",
                        wc.opcode
                    ));
                }
                if self.cfg.check && wc.imm_data != Some(iter as u32) {
                    return fail(format!(
                        "iteration {iter}: the WRITE's immediate data is {:?}, expected {iter}",
                        wc.imm_data
                    ));
                }
            }
        }
        Ok(())
    }

    /// The send/write initiator: post, wait for the answer, `iters` times.
    fn run_pingpong_initiator(&mut self, remote: &Dest) -> Result<(Duration, Vec<u64>)> {
        let sent_kind = if self.cfg.op == Op::Send {
            wr_id::SEND
        } else {
            wr_id::WRITE
        };
        let mut samples = Vec::with_capacity(self.cfg.iters as usize);
        let start = Instant::now();
        for k in 0..self.cfg.iters {
            let t0 = Instant::now();
            self.fill_out(0, k);
            self.post_data(k, remote)?;
            let what = format!("the peer's answer in iteration {k}");
            let got = self.wait_for(&[sent_kind, wr_id::RECV_DATA], &what)?;
            self.check_recv(&got[1], k)?;
            self.verify_in(1, k)
                .map_err(|e| PingpongError(format!("iteration {k}: {e}")))?;
            samples.push(t0.elapsed().as_nanos() as u64);
        }
        Ok((start.elapsed(), samples))
    }

    /// The send/write responder: wait for a message, check it, answer, `iters` times.
    fn run_pingpong_responder(&mut self, remote: &Dest) -> Result<(Duration, Vec<u64>)> {
        let sent_kind = if self.cfg.op == Op::Send {
            wr_id::SEND
        } else {
            wr_id::WRITE
        };
        let mut samples = Vec::with_capacity(self.cfg.iters as usize);
        let mut start = None;
        let mut last: Option<Instant> = None;
        let mut answering = false;
        for k in 0..self.cfg.iters {
            let what = if k == 0 {
                "the initiator's first message".to_string()
            } else {
                format!("the initiator's message in iteration {k}")
            };
            let got = self.wait_for(&[wr_id::RECV_DATA], &what)?;
            let now = Instant::now();
            start.get_or_insert(now);
            if let Some(prev) = last {
                samples.push((now - prev).as_nanos() as u64);
            }
            last = Some(now);
            self.check_recv(&got[0], k)?;
            self.verify_in(0, k)
                .map_err(|e| PingpongError(format!("iteration {k}: {e}")))?;
            if answering {
                // The outgoing area is reused: the last answer must be done with it.
                self.wait_for(&[sent_kind], "the completion of the last answer")?;
            }
            self.fill_out(1, k);
            self.post_data(k, remote)?;
            answering = true;
        }
        if answering {
            self.wait_for(&[sent_kind], "the completion of the last answer")?;
        }
        let elapsed = start.map_or(Duration::ZERO, |s| s.elapsed());
        Ok((elapsed, samples))
    }

    /// The read initiator: READ the peer's buffer `iters` times, then tell it `done`.
    fn run_read_initiator(&mut self, remote: &Dest) -> Result<(Duration, Vec<u64>)> {
        let b = remote.buf.expect("checked before the run");
        let size = self.cfg.size;
        let expected = self.pattern.data(1, 0);
        let poison: Vec<u8> = expected.iter().map(|b| !b).collect();
        let mut samples = Vec::with_capacity(self.cfg.iters as usize);
        let mut got = vec![0u8; size];
        let start = Instant::now();
        for k in 0..self.cfg.iters {
            let t0 = Instant::now();
            if self.cfg.check {
                self.mr.write(DATA_IN, &poison);
            }
            self.post_send(
                &SendWr {
                    wr_id: wr_id::make(wr_id::READ, k),
                    opcode: WrOpcode::RdmaRead {
                        remote_addr: b.addr,
                        rkey: b.rkey,
                    },
                    sges: vec![self.mr.sge(DATA_IN, size)],
                    signaled: true,
                    ..SendWr::default()
                },
                "post an RDMA READ",
            )?;
            let wc = self.wait_for(&[wr_id::READ], &format!("the READ of iteration {k}"))?;
            if wc[0].byte_len as usize != size {
                return fail(format!(
                    "iteration {k}: the READ brought {} bytes, expected {size}",
                    wc[0].byte_len
                ));
            }
            if self.cfg.check {
                self.mr.read(DATA_IN, &mut got);
                if got != expected {
                    let i = got.iter().zip(&expected).position(|(a, b)| a != b);
                    let i = i.expect("differ");
                    let stale = if got[i] == poison[i] {
                        " (the READ did not write it)"
                    } else {
                        ""
                    };
                    return fail(format!(
                        "iteration {k}: data check failed: byte {i} of {size} is {:#04x}, expected {:#04x}{stale}",
                        got[i], expected[i]
                    ));
                }
            }
            samples.push(t0.elapsed().as_nanos() as u64);
        }
        let elapsed = start.elapsed();
        let lat = Latency::of(&samples);
        let ns = |f: fn(&Latency) -> f64| lat.as_ref().map_or(0, |l| (f(l) * 1e3).round() as u64);
        let done = Ctrl {
            kind: CtrlKind::Done,
            op: self.cfg.op,
            size: size as u64,
            iters: self.cfg.iters,
            elapsed_ns: elapsed.as_nanos() as u64,
            lat_ns: [ns(|l| l.min), ns(|l| l.median), ns(|l| l.max)],
            initiator: true,
        };
        self.post_ctrl(&done)?;
        self.wait_for(&[wr_id::CTRL_SEND], "the peer to acknowledge `done`")?;
        Ok((elapsed, samples))
    }

    /// The read responder: waits for `done`; reports what the initiator measured.
    fn run_read_responder(&mut self) -> Result<(Duration, Option<Latency>)> {
        self.wait_for(
            &[wr_id::RECV_CTRL],
            "the initiator to finish its READs and send `done`",
        )?;
        let done = self.read_ctrl()?;
        if done.kind != CtrlKind::Done {
            return fail("the initiator sent something other than `done`");
        }
        done.check_same(&self.cfg)?;
        let [min, median, max] = done.lat_ns.map(|n| n as f64 / 1e3);
        let lat = (done.iters > 0).then_some(Latency { min, median, max });
        Ok((Duration::from_nanos(done.elapsed_ns), lat))
    }
}

/// Waits a moment, at most `slice`, after a poll of `cq` found nothing; returns what a
/// last poll found (possibly nothing). With `events` it arms the CQ, polls once more (a
/// completion written before the arm raises no event) and sleeps on the event; otherwise
/// it spins first for latency, then gives the CPU away (the device, rnicd, may need it to
/// make progress): `idle` counts the empty polls so far.
pub(crate) fn idle_wait(
    ctx: &Context,
    cq: &Cq,
    events: bool,
    idle: &mut u32,
    slice: Duration,
) -> Result<Vec<Wc>> {
    // A lost function (rnicd gone, or reset under this driver) sends no completion: end
    // the wait with that instead of waiting for the time limit.
    ctx.check_alive().map_err(drv("wait for a completion"))?;
    if events {
        cq.req_notify(false);
        let got = cq.poll(16);
        if got.is_empty() {
            ctx.wait_cq_event(cq, slice)
                .map_err(drv("wait for a completion event"))?;
        }
        return Ok(got);
    }
    *idle += 1;
    if *idle < 200 {
        std::hint::spin_loop();
    } else if *idle < 20_000 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50).min(slice));
    }
    Ok(Vec::new())
}

/// Checks `got` against the data of `stream` in iteration `iter`, saying where it differs.
pub fn verify(got: &[u8], stream: u8, iter: u64) -> Result<()> {
    let Some(i) = (0..got.len()).find(|&i| got[i] != pattern_byte(stream, iter, i)) else {
        return Ok(());
    };
    let bad = (i..got.len())
        .filter(|&j| got[j] != pattern_byte(stream, iter, j))
        .count();
    let stale = if iter > 0 && got[i] == pattern_byte(stream, iter - 1, i) {
        format!(" (stale data of iteration {})", iter - 1)
    } else {
        String::new()
    };
    fail(format!(
        "data check failed: byte {i} of {} is {:#04x}, expected {:#04x}{stale}; {bad} bytes differ",
        got.len(),
        got[i],
        pattern_byte(stream, iter, i)
    ))
}

pub(crate) fn timed_out(limit: Option<Duration>, what: &str) -> PingpongError {
    PingpongError(format!(
        "timed out after {} s waiting for {what} (raise --time-limit for long runs)",
        limit.unwrap_or_default().as_secs_f64()
    ))
}

/// The error of a failed completion, with its status string and a hint.
fn completion_error(wc: &Wc) -> PingpongError {
    completion_error_named(wc, wr_id::name(wc.wr_id))
}

/// The error of a failed completion of the work request called `name`.
pub(crate) fn completion_error_named(wc: &Wc, name: &str) -> PingpongError {
    let hint = match wc.status {
        Ok(WcStatus::RetryExcErr) => {
            " (the peer's QP did not answer: is the other side running, connected to this side's QPN, GID and PSN, and reachable? Raise --timeout or --retry for a slow peer)"
        }
        Ok(WcStatus::RnrRetryExcErr) => {
            " (the peer had no receive posted: does it run the same --op, with receives for this side's SENDs?)"
        }
        Ok(WcStatus::RemAccessErr) => {
            " (the peer refused the rkey or address: give the peer's current rkey and addr, from its `local:` line)"
        }
        Ok(WcStatus::RemInvReqErr) => {
            " (the peer refused the request: do both sides run the same --op and --size?)"
        }
        Ok(WcStatus::LocLenErr) => {
            " (a message larger than the posted receive: do both sides use the same --size?)"
        }
        Ok(WcStatus::WrFlushErr) => {
            " (flushed: this QP went to the error state, after an earlier failure here or a request from the peer it refused; see the other side's error)"
        }
        _ => "",
    };
    let status = match wc.status {
        Ok(s) => s as u8,
        Err(n) => n,
    };
    PingpongError(format!(
        "{name} (wr_id {:#x}) completed with error: {} (status {status}, vendor error {:#x}){hint}",
        wc.wr_id,
        wc.status_str(),
        wc.vendor_err
    ))
}

/// Reads one token ending in a newline or a NUL (`ibv_rc_pingpong` ends its messages with
/// a NUL), without the end.
fn read_token(r: &mut impl BufRead, what: &str) -> Result<String> {
    let mut out = Vec::new();
    loop {
        let buf = r
            .fill_buf()
            .map_err(|e| PingpongError(format!("reading {what} over TCP: {}", io_msg(&e))))?;
        if buf.is_empty() {
            return fail(format!(
                "the peer closed the TCP connection before sending {what}"
            ));
        }
        match buf.iter().position(|&b| b == b'\n' || b == 0) {
            Some(i) => {
                out.extend_from_slice(&buf[..i]);
                r.consume(i + 1);
                break;
            }
            None => {
                let n = buf.len();
                out.extend_from_slice(buf);
                r.consume(n);
            }
        }
        if out.len() > 1024 {
            return fail(format!("the peer sent an overlong line instead of {what}"));
        }
    }
    String::from_utf8(out).map_err(|_| PingpongError(format!("the peer sent non-text as {what}")))
}

pub(crate) fn io_msg(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "timed out (raise --time-limit?)".into()
        }
        _ => e.to_string(),
    }
}

/// This side's lines: the first, and the buffer line for write and read.
fn wire_lines(local: &Dest, op: Op) -> String {
    let mut s = local.line() + "\n";
    if op.needs_remote_buffer() {
        s += &(local.buf_line().expect("a local side has a buffer") + "\n");
    }
    s
}

/// Reads the peer's lines.
fn read_dest(r: &mut impl BufRead, op: Op) -> Result<Dest> {
    let mut d = Dest::parse_line(&read_token(r, "its QPN, GID and PSN")?)?;
    if op.needs_remote_buffer() {
        d.buf = Some(Dest::parse_buf_line(&read_token(
            r,
            "its rkey and address",
        )?)?);
    }
    Ok(d)
}

pub(crate) fn set_timeouts(stream: &TcpStream, left: Option<Duration>) -> Result<()> {
    let t = left.map(|l| l.max(Duration::from_millis(1)));
    stream
        .set_read_timeout(t)
        .and_then(|()| stream.set_write_timeout(t))
        .map_err(|e| PingpongError(format!("set TCP timeouts: {e}")))
}

/// Listens on TCP `port` (0: any, printed as `listening on port N` through `info`) and
/// accepts one client before `deadline`; `peer_hint` says what the other side should run.
pub(crate) fn accept_one(
    port: u16,
    deadline: Option<Instant>,
    limit: Option<Duration>,
    peer_hint: &str,
    info: &mut dyn FnMut(&str),
) -> Result<TcpStream> {
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        PingpongError(format!(
            "listen on TCP port {port}: {e} (another program on it? choose another with --listen PORT, or --listen 0 for any)"
        ))
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| PingpongError(format!("the listening socket's port: {e}")))?
        .port();
    info(&format!("listening on port {port}"));
    listener
        .set_nonblocking(true)
        .map_err(|e| PingpongError(format!("listen: {e}")))?;
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timed_out(
                        limit,
                        &format!("a client on TCP port {port} ({peer_hint} on the other side)"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return fail(format!("accept on TCP port {port}: {e}")),
        }
    };
    stream
        .set_nonblocking(false)
        .map_err(|e| PingpongError(format!("TCP: {e}")))?;
    set_timeouts(
        &stream,
        deadline.map(|d| d.saturating_duration_since(Instant::now())),
    )?;
    Ok(stream)
}

/// The TCP server's side: accept one client, read its lines, connect the QP, answer.
fn tcp_server(s: &Session, port: u16, info: &mut dyn FnMut(&str)) -> Result<Dest> {
    let stream = accept_one(
        port,
        s.deadline,
        s.cfg.time_limit,
        "rnic-pingpong --connect HOST:PORT",
        info,
    )?;
    let mut reader = BufReader::new(&stream);
    let remote = read_dest(&mut reader, s.cfg.op)?;
    s.connect(&remote)?;
    (&stream)
        .write_all(wire_lines(&s.local, s.cfg.op).as_bytes())
        .map_err(|e| PingpongError(format!("send this side's parameters: {}", io_msg(&e))))?;
    let done = read_token(&mut reader, "`done`")?;
    if done != "done" {
        return fail(format!("the client sent {done:?} instead of `done`"));
    }
    Ok(remote)
}

/// Splits `HOST[:PORT]` (IPv6 in brackets) into addresses.
fn resolve(target: &str) -> Result<Vec<std::net::SocketAddr>> {
    let with_port = if target.starts_with('[') {
        if target.contains("]:") {
            target.to_string()
        } else {
            format!("{target}:{DEFAULT_PORT}")
        }
    } else {
        match target.matches(':').count() {
            0 => format!("{target}:{DEFAULT_PORT}"),
            1 => target.to_string(),
            // A bare IPv6 address.
            _ => format!("[{target}]:{DEFAULT_PORT}"),
        }
    };
    let addrs: Vec<_> = with_port
        .to_socket_addrs()
        .map_err(|e| PingpongError(format!("--connect {target}: {e} (use HOST or HOST:PORT)")))?
        .collect();
    if addrs.is_empty() {
        return fail(format!("--connect {target}: the name has no address"));
    }
    Ok(addrs)
}

/// Connects to `target` (`HOST[:PORT]`, port 18515 by default), retrying while the
/// connection is refused (the server may still be starting) until `deadline`.
pub(crate) fn connect_retrying(target: &str, deadline: Option<Instant>) -> Result<TcpStream> {
    let time_left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let addrs = resolve(target)?;
    let mut last_err = None;
    let stream = 'connected: loop {
        for a in &addrs {
            let t = time_left()
                .unwrap_or(Duration::from_secs(10))
                .clamp(Duration::from_millis(1), Duration::from_secs(10));
            match TcpStream::connect_timeout(a, t) {
                Ok(stream) => break 'connected stream,
                Err(e) => last_err = Some(e),
            }
        }
        let e = last_err.take().expect("tried one");
        let refused = e.kind() == std::io::ErrorKind::ConnectionRefused;
        if !refused || time_left() == Some(Duration::ZERO) {
            let port = addrs[0].port();
            let listen = if port == DEFAULT_PORT {
                "--listen".to_string()
            } else {
                format!("--listen {port}")
            };
            return fail(format!(
                "cannot connect to {target}: {e} (is the other side running with {listen}?)"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    set_timeouts(&stream, time_left())?;
    Ok(stream)
}

/// The TCP client's side: connect, send this side's lines, read the server's, say `done`.
fn tcp_client(s: &Session, target: &str) -> Result<Dest> {
    let stream = connect_retrying(target, s.deadline)?;
    (&stream)
        .write_all(wire_lines(&s.local, s.cfg.op).as_bytes())
        .map_err(|e| PingpongError(format!("send this side's parameters: {}", io_msg(&e))))?;
    let mut reader = BufReader::new(&stream);
    let remote = read_dest(&mut reader, s.cfg.op)?;
    (&stream)
        .write_all(b"done\n")
        .map_err(|e| PingpongError(format!("send `done`: {}", io_msg(&e))))?;
    Ok(remote)
}

/// Reads `--peer -`'s line from standard input.
fn peer_from_stdin(deadline: Option<Instant>, limit: Option<Duration>) -> Result<Dest> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = std::io::stdin().lock().read_line(&mut line).map(|_| line);
        let _ = tx.send(r);
    });
    let got = match deadline {
        Some(d) => rx
            .recv_timeout(d.saturating_duration_since(Instant::now()))
            .map_err(|_| {
                timed_out(
                    limit,
                    "the peer's QPN:GID:PSN[:RKEY:ADDR] on standard input",
                )
            })?,
        None => rx
            .recv()
            .map_err(|_| PingpongError("standard input: reader failed".into()))?,
    };
    let line = got.map_err(|e| PingpongError(format!("read the peer from standard input: {e}")))?;
    if line.trim().is_empty() {
        return fail("standard input ended without the peer's QPN:GID:PSN[:RKEY:ADDR]");
    }
    Dest::parse_peer(&line)
}

/// Runs one side of the ping-pong. `info` receives the lines scripts look for, as they
/// happen: `local: ...`, `listening on port N`, `peer: --peer ...` (manual mode),
/// `remote: ...`.
pub fn run(cfg: &Config, info: &mut dyn FnMut(&str)) -> Result<Report> {
    let deadline = cfg.time_limit.map(|t| Instant::now() + t);
    let mut s = Session::new(cfg, deadline)?;
    let initiator = cfg.rendezvous.initiator();
    info(&format!("local: {}", s.local.describe()));
    let remote = match &cfg.rendezvous {
        Rendezvous::Listen(port) => tcp_server(&s, *port, info)?,
        Rendezvous::Connect(target) => {
            let remote = tcp_client(&s, target)?;
            s.connect(&remote)?;
            remote
        }
        Rendezvous::Manual { peer, .. } => {
            let mut me = s.local;
            if !cfg.op.needs_remote_buffer() {
                me.buf = None;
            }
            info(&format!("peer: --peer {}", me.peer_arg()));
            let remote = match peer {
                Some(p) => *p,
                None => peer_from_stdin(deadline, cfg.time_limit)?,
            };
            if cfg.op.needs_remote_buffer() && remote.buf.is_none() {
                return fail(format!(
                    "--op {} needs the peer's rkey and address: --peer QPN:GID:PSN:RKEY:ADDR, as the peer's `local:` line prints them",
                    cfg.op.name()
                ));
            }
            s.connect(&remote)?;
            remote
        }
    };
    info(&format!("remote: {}", remote.describe()));
    if matches!(cfg.rendezvous, Rendezvous::Manual { .. }) {
        s.handshake(&remote, initiator)?;
    }
    let role = if initiator { "initiator" } else { "responder" };
    let (elapsed, latency) = match (cfg.op, initiator) {
        (Op::Send | Op::Write, true) => {
            let (e, samples) = s.run_pingpong_initiator(&remote)?;
            (e, Latency::of(&samples))
        }
        (Op::Send | Op::Write, false) => {
            let (e, samples) = s.run_pingpong_responder(&remote)?;
            (e, Latency::of(&samples))
        }
        (Op::Read, true) => {
            let (e, samples) = s.run_read_initiator(&remote)?;
            (e, Latency::of(&samples))
        }
        (Op::Read, false) => s.run_read_responder()?,
    };
    let mut local = s.local;
    if !cfg.op.needs_remote_buffer() {
        local.buf = None;
    }
    let mut report = Report::new(cfg, role, elapsed, latency, &local, &remote);
    report.migrations_followed = s.followed;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 2];

    fn dest() -> Dest {
        Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: GID,
            buf: Some(RemoteBuf {
                rkey: 0x101,
                addr: 0x1_0000_1000,
            }),
        }
    }

    #[test]
    fn the_first_line_is_ibv_rc_pingpongs_message() {
        let line = dest().line();
        assert_eq!(line, "0000:000011:abcdef:00000000000000000000ffff0a520002");
        // With its newline as long as ibv_rc_pingpong's message with its NUL.
        assert_eq!(
            line.len() + 1,
            "0000:000000:000000:00000000000000000000000000000000\0".len()
        );
        let back = Dest::parse_line(&line).unwrap();
        assert_eq!(
            back,
            Dest {
                buf: None,
                ..dest()
            }
        );
        assert_eq!(dest().buf_line().unwrap(), "00000101:0000000100001000");
        assert_eq!(
            Dest::parse_buf_line("00000101:0000000100001000").unwrap(),
            dest().buf.unwrap()
        );
    }

    #[test]
    fn bad_lines_are_refused_with_the_format() {
        for bad in [
            "",
            "0000:000011:abcdef",
            "0000:000011:abcdef:00ff",
            "0000:1000000:000000:00000000000000000000ffff0a520002",
            "zzzz:000011:abcdef:00000000000000000000ffff0a520002",
        ] {
            let e = Dest::parse_line(bad).unwrap_err();
            assert!(
                e.0.contains("LLLL:QQQQQQ:PPPPPP") || e.0.contains("GID"),
                "{e}"
            );
        }
        assert!(Dest::parse_buf_line("12345").is_err());
    }

    #[test]
    fn tokens_end_at_a_newline_or_a_nul() {
        let wire = b"0000:000011:abcdef:00000000000000000000ffff0a520002\0done\0rest\n";
        let mut r = BufReader::new(&wire[..]);
        assert_eq!(
            read_token(&mut r, "a").unwrap(),
            "0000:000011:abcdef:00000000000000000000ffff0a520002"
        );
        assert_eq!(read_token(&mut r, "b").unwrap(), "done");
        assert_eq!(read_token(&mut r, "c").unwrap(), "rest");
        let e = read_token(&mut r, "`done`").unwrap_err();
        assert!(
            e.0.contains("closed the TCP connection before sending `done`"),
            "{e}"
        );
    }

    #[test]
    fn wire_lines_carry_the_buffer_for_write_and_read_only() {
        assert_eq!(wire_lines(&dest(), Op::Send).lines().count(), 1);
        let w = wire_lines(&dest(), Op::Write);
        let mut r = BufReader::new(w.as_bytes());
        assert_eq!(read_dest(&mut r, Op::Write).unwrap(), dest());
        let mut r = BufReader::new(w.as_bytes());
        assert_eq!(read_dest(&mut r, Op::Send).unwrap().buf, None);
    }

    #[test]
    fn peer_arguments_parse_in_hex_with_or_without_0x() {
        let d =
            Dest::parse_peer("11:00000000000000000000ffff0a520002:abcdef:101:100001000").unwrap();
        assert_eq!(d, dest());
        assert_eq!(Dest::parse_peer(&dest().peer_arg()).unwrap(), dest());
        let d = Dest::parse_peer("0x11:00000000000000000000FFFF0A520002:0x0\n").unwrap();
        assert_eq!((d.qpn, d.psn, d.gid, d.buf), (0x11, 0, GID, None));
        let d = Dest::parse_peer("11:[::ffff:10.82.0.2]:0").unwrap();
        assert_eq!(d.gid, GID);
        for bad in [
            "11",
            "11:00000000000000000000ffff0a520002",
            "11:00000000000000000000ffff0a520002:0:1",
            "1000000:00000000000000000000ffff0a520002:0",
            "11:00000000000000000000ffff0a52000:0",
            "11:[nonsense]:0",
            "11:00000000000000000000ffff0a520002:0:1:x",
        ] {
            assert!(Dest::parse_peer(bad).is_err(), "{bad}");
        }
        let local = dest().describe();
        assert_eq!(
            local,
            "qpn 0x11 gid 00000000000000000000ffff0a520002 psn 0xabcdef rkey 0x101 addr 0x100001000"
        );
    }

    #[test]
    fn connect_targets_get_the_default_port() {
        let a = resolve("127.0.0.1").unwrap();
        assert_eq!(a[0], "127.0.0.1:18515".parse().unwrap());
        assert_eq!(resolve("127.0.0.1:7").unwrap()[0].port(), 7);
        assert_eq!(resolve("[::1]").unwrap()[0].port(), DEFAULT_PORT);
        assert_eq!(resolve("[::1]:9").unwrap()[0].port(), 9);
        assert_eq!(resolve("::1").unwrap()[0].port(), DEFAULT_PORT);
    }

    #[test]
    fn patterns_change_every_byte_between_iterations_and_sides() {
        let p = Pattern::new(3000);
        for k in 0..300u64 {
            let a = p.data(0, k);
            let b = p.data(0, k + 1);
            assert!(a.iter().zip(&b).all(|(x, y)| x != y), "iteration {k}");
            let c = p.data(1, k);
            assert!(
                a.iter().zip(&c).all(|(x, y)| x != y),
                "sides in iteration {k}"
            );
            assert_eq!(a[1234], pattern_byte(0, k, 1234));
        }
        assert_eq!(pattern(1, 7, 10), p.data(1, 7)[..10]);
        // Not just a ramp: neighbouring bytes differ too.
        let a = p.data(0, 0);
        assert!(a.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn verification_names_the_first_bad_byte_and_stale_data() {
        let p = Pattern::new(100);
        assert!(p.verify(&p.data(1, 5), 1, 5).is_ok());
        let e = p.verify(&p.data(1, 4), 1, 5).unwrap_err();
        assert!(e.0.contains("byte 0 of 100"), "{e}");
        assert!(e.0.contains("stale data of iteration 4"), "{e}");
        assert!(e.0.contains("100 bytes differ"), "{e}");
        let mut d = p.data(0, 9);
        d[42] ^= 1;
        let e = p.verify(&d, 0, 9).unwrap_err();
        assert!(e.0.contains("byte 42 of 100"), "{e}");
        assert!(e.0.contains("1 bytes differ"), "{e}");
        assert!(!e.0.contains("stale"), "{e}");
    }

    #[test]
    fn latency_figures() {
        assert_eq!(Latency::of(&[]), None);
        let l = Latency::of(&[3000, 1000, 2000]).unwrap();
        assert_eq!((l.min, l.median, l.max), (1.0, 2.0, 3.0));
        let l = Latency::of(&[4000, 1000, 2000, 3000]).unwrap();
        assert_eq!(l.median, 2.5);
    }

    fn cfg(op: Op) -> Config {
        Config {
            device: DeviceChoice::FirstPci,
            rendezvous: Rendezvous::Connect("x".into()),
            op,
            size: 4096,
            iters: 1000,
            mtu: 1024,
            psn: 0,
            timeout: 14,
            retry: 7,
            check: true,
            events: false,
            time_limit: None,
            follow: None,
        }
    }

    #[test]
    fn reports_read_like_ibv_rc_pingpong() {
        let r = Report::new(
            &cfg(Op::Send),
            "initiator",
            Duration::from_millis(500),
            Latency::of(&[400_000, 500_000, 600_000]),
            &dest(),
            &dest(),
        );
        assert_eq!(r.bytes, 2 * 4096 * 1000);
        assert!((r.usec_per_iter - 500.0).abs() < 1e-9);
        assert!((r.mbit_per_s - 131.072).abs() < 1e-9);
        assert_eq!(
            r.text(),
            "1000 iters of 4096 bytes in 0.500 s: 131.07 Mbit/s, 500.00 usec/iter\n\
             latency: min 400.00 usec, median 500.00 usec, max 600.00 usec\n"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["op"], "send");
        assert_eq!(v["latency_usec"]["median"], 500.0);
        assert_eq!(v["local"]["addr"], "0x100001000");
        let r = Report::new(
            &cfg(Op::Read),
            "responder",
            Duration::from_millis(500),
            None,
            &dest(),
            &dest(),
        );
        assert_eq!(r.bytes, 4096 * 1000);
        assert!(r.text().contains("latency: no samples"));
        assert!(r.text().contains("measured by the initiator"));
    }

    #[test]
    fn control_messages_round_trip_and_compare_tests() {
        let c = Ctrl {
            kind: CtrlKind::Done,
            op: Op::Read,
            size: 4096,
            iters: 1000,
            elapsed_ns: 123,
            lat_ns: [1, 2, 3],
            initiator: true,
        };
        let b = c.encode();
        assert_eq!(Ctrl::decode(&b).unwrap(), c);
        assert!(c.check_same(&cfg(Op::Read)).is_ok());
        let e = c.check_same(&cfg(Op::Write)).unwrap_err();
        assert!(
            e.0.contains("both sides need the same --op, --size and --iters"),
            "{e}"
        );
        let mut bad = b;
        bad[0] = b'X';
        assert!(Ctrl::decode(&bad).is_err());
        assert!(Ctrl::decode(&b[..10]).is_err());
    }

    #[test]
    fn options_parse() {
        assert_eq!("write".parse::<Op>().unwrap(), Op::Write);
        assert!("atomic".parse::<Op>().is_err());
        assert_eq!(mtu_code(4096), Some(mtu::MTU_4096));
        assert_eq!(mtu_code(1500), None);
        assert!(random_psn() <= 0xFF_FFFF);
        assert_eq!(wr_id::kind(wr_id::make(wr_id::READ, 77)), wr_id::READ);
    }
}
