//! `rnic-pingpong --ibv-compat`: the other end of rdma-core's `ibv_rc_pingpong`, its TCP
//! exchange byte for byte (over [`crate::rendezvous`]) and its ping-pong flow, plus an
//! RDMA WRITE and READ extension. The exchange, the QP, the flow and the checks are in
//! docs/tools.md, "`rnic-pingpong --ibv-compat`".

use std::time::{Duration, Instant};

use rnic_abi::gid;
use rnic_abi::verbs::mtu_code;
use rnic_driver::verbs::{self, RecvWr, SendWr, Wc, WcStatus, WrOpcode};

use crate::error::{drv, fail, timed_out, Result, ToolError};
use crate::open::{self, DeviceChoice};

use crate::pingpong::{DestJson, Figures, Op, RemoteBuf};
use crate::rc::{check_sizes, completion_error, idle_wait, page_round, RcSide};
use crate::rendezvous::Conn;

pub use crate::pingpong::Dest;
pub use crate::rendezvous::Role;

/// Bytes of `ibv_rc_pingpong`'s message, with its NUL: `sizeof
/// "0000:000000:000000:00000000000000000000000000000000"`.
pub const MSG_LEN: usize = 52;
/// The client's last word, with its NUL (`sizeof "done"` bytes).
pub const DONE: &[u8; 5] = b"done\0";
/// Bytes of the buffer message of `--op write` and `--op read`: `"%08x:%016x"` and a NUL.
pub const KEY_LEN: usize = 26;
/// `ibv_rc_pingpong`'s default number of receives posted at a time.
pub const DEFAULT_RX_DEPTH: u32 = 500;
/// What `ibv_rc_pingpong` fills its buffer with.
pub const FILL_BYTE: u8 = 0x7b;
/// The page size of `ibv_rc_pingpong`'s `--chk` pattern (x86's `sysconf(_SC_PAGESIZE)`).
pub const CHK_PAGE: usize = 4096;
/// `ibv_rc_pingpong`'s work request IDs.
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The hop limit `ibv_rc_pingpong` puts in the address vector.
const HOP_LIMIT: u8 = 1;
/// RNR retries (see the module documentation: not `ibv_rc_pingpong`'s 7).
const RNR_RETRY: u8 = 6;
/// How long a wait sleeps at most before it looks at the clock again.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// This side's message: `"%04x:%06x:%06x:%s"` and a NUL.
pub fn encode_msg(d: &Dest) -> [u8; MSG_LEN] {
    let line = d.line();
    let mut msg = [0u8; MSG_LEN];
    // LID 16 bits, QPN and PSN 24 bits: the line is always 51 characters.
    msg[..line.len()].copy_from_slice(line.as_bytes());
    msg
}

/// This side's buffer message (`--op write` and `--op read`): `"%08x:%016x"` of the rkey
/// and the address, then a NUL.
pub fn encode_key(b: &RemoteBuf) -> [u8; KEY_LEN] {
    let mut msg = [0u8; KEY_LEN];
    let text = format!("{:08x}:{:016x}", b.rkey, b.addr);
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

/// Parses the peer's buffer message.
pub fn decode_key(msg: &[u8]) -> Result<RemoteBuf> {
    let text = msg.split(|&b| b == 0).next().unwrap_or_default();
    if text.len() == msg.len() {
        return fail("the peer's buffer message has no NUL: does it run the same --op?");
    }
    let text = std::str::from_utf8(text)
        .map_err(|_| ToolError("the peer's buffer message is not text".into()))?;
    Dest::parse_buf_line(text)
}

/// Parses the peer's 52 bytes: the text up to the NUL, as `ibv_rc_pingpong`'s `sscanf(msg,
/// "%x:%x:%x:%s")` and `wire_gid_to_gid` read it.
pub fn decode_msg(msg: &[u8]) -> Result<Dest> {
    let Some(end) = msg.iter().position(|&b| b == 0) else {
        return fail(format!(
            "the peer's message {:?} has no NUL: is it ibv_rc_pingpong (or rnic-pingpong --ibv-compat)? rnic-pingpong without --ibv-compat uses another format",
            String::from_utf8_lossy(msg)
        ));
    };
    let text = std::str::from_utf8(&msg[..end])
        .map_err(|_| ToolError("the peer's message is not text".into()))?;
    Dest::parse_line(text)
}

/// What an `ibv_rc_pingpong` client sends (and each side then echoes): `size` bytes of
/// [`FILL_BYTE`], with the first byte of each [`CHK_PAGE`]-byte page zero if it runs with
/// `--chk`.
pub fn client_data(size: usize, chk: bool) -> Vec<u8> {
    let mut data = vec![FILL_BYTE; size];
    if chk {
        data.iter_mut().step_by(CHK_PAGE).for_each(|b| *b = 0);
    }
    data
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The function.
    pub device: DeviceChoice,
    /// Server or client.
    pub role: Role,
    /// Bytes per message (`-s`).
    pub size: usize,
    /// Messages each way (`-n`).
    pub iters: u64,
    /// Path MTU in bytes (`-m`).
    pub mtu: u32,
    /// Receives posted at a time (`-r`).
    pub rx_depth: u32,
    /// First PSN this side sends (24 bits).
    pub psn: u32,
    /// Local ACK timeout code (14 in `ibv_rc_pingpong`).
    pub timeout: u8,
    /// Transport retries (7 in `ibv_rc_pingpong`).
    pub retry: u8,
    /// `--chk`: the client zeroes each page's first byte; both sides verify every message.
    pub check: bool,
    /// Sleep on completion events (`-e`) instead of polling.
    pub events: bool,
    /// The whole run's time limit (`None`: none).
    pub time_limit: Option<Duration>,
    /// SEND (`ibv_rc_pingpong`'s test), or this module's RDMA WRITE or READ extension.
    pub op: Op,
}

/// What a run measured, as `ibv_rc_pingpong` counts it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// The run's figures; the role is "server" or "client", `bytes` is `2 * size * iters`
    /// (send) or `size * iters` (write, read), and the seconds run from the start of the
    /// ping-pong to its end.
    #[serde(flatten)]
    pub figures: Figures,
    /// Whether every message was verified.
    pub checked: bool,
    /// Whether the client's data carries `--chk`'s zero bytes (`None` without `check`).
    pub peer_chk: Option<bool>,
    /// This side.
    pub local: DestJson,
    /// The peer.
    pub remote: DestJson,
}

impl Report {
    /// `ibv_rc_pingpong`'s two lines: `N bytes in T seconds = X Mbit/sec` and `N iters in
    /// T seconds = Y usec/iter`.
    pub fn text(&self) -> String {
        let f = &self.figures;
        format!(
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec\n{} iters in {:.2} seconds = {:.2} usec/iter\n",
            f.bytes, f.seconds, f.mbit_per_s, f.iters, f.seconds, f.usec_per_iter
        )
    }
}

/// `ibv_rc_pingpong`'s `local address:` / `remote address:` line.
pub fn address_line(which: &str, d: &Dest) -> String {
    format!(
        "  {which} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid::ip(&d.gid)
    )
}

/// The verbs objects of one side. Fields drop in order: the QP before what it uses.
struct Side {
    rc: RcSide,
    cfg: Config,
    deadline: Option<Instant>,
    local: Dest,
    /// Receives posted and not completed (`routs`).
    routs: u32,
    /// What every message must contain, once known.
    expected: Option<Vec<u8>>,
}

impl Side {
    fn new(cfg: &Config, deadline: Option<Instant>) -> Result<Side> {
        check_sizes(cfg.size, cfg.iters, cfg.mtu)?;
        if cfg.iters > i32::MAX as u64 {
            return fail("--iters: at most 2147483647 (ibv_rc_pingpong counts in an int)");
        }
        if cfg.rx_depth == 0 {
            return fail("--rx-depth must be at least 1");
        }
        let buf_len = page_round(cfg.size);
        let (ctx, _, buf) = open::open_verbs(&cfg.device, None, buf_len)?;
        let limits = ctx.attr().limits;
        if cfg.rx_depth > limits.max_qp_wr {
            return fail(format!(
                "--rx-depth {}: the function takes at most {} receives per QP",
                cfg.rx_depth, limits.max_qp_wr
            ));
        }
        if cfg.rx_depth + 1 > limits.max_cqe {
            return fail(format!(
                "--rx-depth {}: the function's CQs hold at most {} entries",
                cfg.rx_depth, limits.max_cqe
            ));
        }
        let access = verbs::ACCESS_LOCAL_WRITE | cfg.op.remote_access();
        let rc = RcSide::new(
            ctx,
            buf,
            buf_len,
            access,
            cfg.rx_depth + 1,
            (1, cfg.rx_depth),
        )?;
        rc.to_init(cfg.op.remote_access())?;
        let client = matches!(cfg.role, Role::Connect(_));
        let sent = client_data(cfg.size, cfg.check || cfg.op != Op::Send);
        match (cfg.op, client) {
            // The target of the WRITEs starts as something they must overwrite.
            (Op::Write, false) => rc.mr.write(0, &vec![!FILL_BYTE; cfg.size]),
            _ => rc.mr.write(0, &sent),
        }
        let local = Dest {
            lid: 0,
            qpn: rc.qp.qp_num(),
            psn: cfg.psn & 0xFF_FFFF,
            gid: rc.ctx.attr().gid,
            buf: (cfg.op != Op::Send).then(|| RemoteBuf {
                rkey: rc.mr.rkey(),
                addr: rc.mr.addr(0),
            }),
        };
        let mut side = Side {
            rc,
            cfg: cfg.clone(),
            deadline,
            local,
            routs: 0,
            // The client knows what comes back: what it sends.
            expected: (cfg.check && (client || cfg.op != Op::Send)).then_some(sent),
        };
        if cfg.op == Op::Send {
            side.post_recv(cfg.rx_depth)?;
        }
        Ok(side)
    }

    /// Posts `n` receives of the whole buffer.
    fn post_recv(&mut self, n: u32) -> Result<()> {
        let wrs: Vec<RecvWr> = (0..n)
            .map(|_| RecvWr {
                wr_id: RECV_WRID,
                sges: vec![self.rc.mr.sge(0, self.cfg.size)],
            })
            .collect();
        self.rc
            .qp
            .post_recv_list(&wrs)
            .map_err(drv("post receives"))?;
        self.routs += n;
        Ok(())
    }

    fn post_send(&self) -> Result<()> {
        self.rc
            .qp
            .post_send(&SendWr {
                wr_id: SEND_WRID,
                opcode: WrOpcode::Send,
                sges: vec![self.rc.mr.sge(0, self.cfg.size)],
                signaled: true,
                ..SendWr::default()
            })
            .map_err(drv("post a SEND"))
    }

    /// Moves the QP to RTR and RTS towards `remote`, with `ibv_rc_pingpong`'s attributes.
    fn connect(&self, remote: &Dest) -> Result<()> {
        let mtu = mtu_code(self.cfg.mtu).expect("checked in new");
        let (mut a, m) = verbs::rtr_attr(remote.qpn, remote.gid, remote.psn, mtu, 1, 12);
        a.hop_limit = HOP_LIMIT;
        self.rc.qp.modify(&a, m).map_err(drv(&format!(
            "move the QP to RTR towards QPN {:#x} GID {} (--mtu {})",
            remote.qpn,
            gid::ip(&remote.gid),
            self.cfg.mtu
        )))?;
        let (a, m) = verbs::rts_attr(
            self.local.psn,
            self.cfg.timeout,
            self.cfg.retry,
            RNR_RETRY,
            1,
        );
        self.rc.qp.modify(&a, m).map_err(drv("move the QP to RTS"))
    }

    /// The TCP exchange as `role`: the peer, with this side's QP connected to it, and the
    /// connection, which write and read keep for their final `done`.
    fn exchange(&self, role: &Role, info: &mut dyn FnMut(&str)) -> Result<(Dest, Conn)> {
        let hint = "ibv_rc_pingpong SERVER, or rnic-pingpong --ibv-compat --connect";
        let mut conn = Conn::open(role, self.deadline, self.cfg.time_limit, hint, info)?;
        let remote = match role {
            // The server: read the client's message, connect, answer, read `done`.
            Role::Listen(_) => {
                let remote = self.read_dest(&mut conn)?;
                self.connect(&remote)?;
                conn.send(&self.messages(), "this side's address message")?;
                read_done(&mut conn)?;
                remote
            }
            // The client: send this side's message, read the server's, say `done`, and
            // only then connect.
            Role::Connect(_) => {
                conn.send(&self.messages(), "this side's address message")?;
                let remote = self.read_dest(&mut conn)?;
                conn.send(DONE, "\"done\"")?;
                self.connect(&remote)?;
                remote
            }
        };
        Ok((remote, conn))
    }

    /// This side's message, and for write and read its buffer message, as one write.
    fn messages(&self) -> Vec<u8> {
        let mut out = encode_msg(&self.local).to_vec();
        if let Some(b) = &self.local.buf {
            out.extend_from_slice(&encode_key(b));
        }
        out
    }

    /// Reads the peer's message, and for write and read its buffer message.
    fn read_dest(&self, conn: &mut Conn) -> Result<Dest> {
        let mut msg = [0u8; MSG_LEN];
        conn.recv(&mut msg, "address message")?;
        let mut remote = decode_msg(&msg)?;
        if self.cfg.op != Op::Send {
            let mut key = [0u8; KEY_LEN];
            conn.recv(&mut key, "buffer message")?;
            remote.buf = Some(decode_key(&key)?);
        }
        Ok(remote)
    }

    /// The client of write and read: one WRITE or READ at a time, `iters` times.
    fn run_one_sided(&mut self, remote: &RemoteBuf) -> Result<Duration> {
        let size = self.cfg.size;
        let (opcode, name) = match self.cfg.op {
            Op::Read => (
                WrOpcode::RdmaRead {
                    remote_addr: remote.addr,
                    rkey: remote.rkey,
                },
                "RDMA READ",
            ),
            _ => (
                WrOpcode::RdmaWrite {
                    remote_addr: remote.addr,
                    rkey: remote.rkey,
                },
                "RDMA WRITE",
            ),
        };
        let poison = vec![!FILL_BYTE; size];
        let reading = self.cfg.op == Op::Read && self.cfg.check;
        let mut idle = 0u32;
        let start = Instant::now();
        for n in 1..=self.cfg.iters {
            if reading {
                self.rc.mr.write(0, &poison);
            }
            self.rc
                .qp
                .post_send(&SendWr {
                    wr_id: SEND_WRID,
                    opcode,
                    sges: vec![self.rc.mr.sge(0, size)],
                    signaled: true,
                    ..SendWr::default()
                })
                .map_err(drv(&format!("post an {name}")))?;
            let mut done = false;
            while !done {
                for wc in self.completions(&mut idle)? {
                    if !wc.is_success() || wc.wr_id != SEND_WRID {
                        return Err(completion_error(&wc, name));
                    }
                    done = true;
                }
            }
            if reading {
                self.verify(n)?;
            }
        }
        Ok(start.elapsed())
    }

    /// The next completions, waiting for them (polling, or on events with `events`).
    fn completions(&mut self, idle: &mut u32) -> Result<Vec<Wc>> {
        loop {
            let got = self.rc.cq.poll(16);
            if !got.is_empty() {
                *idle = 0;
                return Ok(got);
            }
            let left = self
                .deadline
                .map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Err(timed_out(
                    self.cfg.time_limit,
                    "the ping-pong's completions (is the peer still running?)",
                ));
            }
            let slice = left.map_or(WAIT_SLICE, |l| l.min(WAIT_SLICE));
            let got = idle_wait(&self.rc.ctx, &self.rc.cq, self.cfg.events, idle, slice)?;
            if !got.is_empty() {
                return Ok(got);
            }
        }
    }

    /// Checks the message just received against what every message must hold.
    fn verify(&mut self, n: u64) -> Result<()> {
        let mut got = vec![0u8; self.cfg.size];
        self.rc.mr.read(0, &mut got);
        match &self.expected {
            Some(expected) if got == *expected => Ok(()),
            Some(expected) => fail(format!(
                "message {n} differs from what the client sent (or, for --op read, the server's buffer): {}",
                first_difference(&got, expected)
            )),
            None => {
                let known = [true, false].map(|chk| client_data(self.cfg.size, chk));
                if !known.contains(&got) {
                    return fail(format!(
                        "message {n} is not what an ibv_rc_pingpong client sends ({} bytes of {FILL_BYTE:#04x}, with --chk a 0 at the start of each {CHK_PAGE}-byte page): {}",
                        self.cfg.size,
                        first_difference(&got, &known[0])
                    ));
                }
                self.expected = Some(got);
                Ok(())
            }
        }
    }

    /// `ibv_rc_pingpong`'s loop: returns the time from the start to the last completion.
    fn run_pingpong(&mut self, client: bool) -> Result<Duration> {
        let iters = self.cfg.iters;
        let mut pending = RECV_WRID;
        if client {
            self.post_send()?;
            pending |= SEND_WRID;
        }
        let start = Instant::now();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        let mut idle = 0u32;
        while rcnt < iters || scnt < iters {
            for wc in self.completions(&mut idle)? {
                let name = match wc.wr_id {
                    SEND_WRID => "SEND",
                    RECV_WRID => "receive",
                    _ => "unknown work request",
                };
                if wc.wr_id == SEND_WRID && wc.status == Ok(WcStatus::RnrRetryExcErr) {
                    return Err(no_receives_posted(&wc));
                }
                if !wc.is_success() {
                    return Err(completion_error(&wc, name));
                }
                match wc.wr_id {
                    SEND_WRID => scnt += 1,
                    RECV_WRID => {
                        self.routs -= 1;
                        if self.routs <= 1 {
                            self.post_recv(self.cfg.rx_depth - self.routs)?;
                        }
                        rcnt += 1;
                        if wc.byte_len as usize != self.cfg.size {
                            return fail(format!(
                                "message {rcnt} has {} bytes, expected {} (both sides need the same size: -s / --size)",
                                wc.byte_len, self.cfg.size
                            ));
                        }
                        if self.cfg.check {
                            self.verify(rcnt)?;
                        }
                    }
                    id => return fail(format!("a completion for unknown wr_id {id}")),
                }
                pending &= !wc.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send()?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(start.elapsed())
    }
}

/// The error of a SEND the peer answered with RNR NAKs until the retries ran out.
fn no_receives_posted(wc: &Wc) -> ToolError {
    ToolError(format!(
        "the peer posted no receives: it answered this side's SEND with RNR NAKs until the \
         {RNR_RETRY} retries ran out (completion: {}). Is it running a WRITE or READ test \
         (ib_write_bw, ib_read_bw, rnic-pingpong --op write)? Run ibv_rc_pingpong, or \
         rnic-pingpong --ibv-compat, on the other side",
        wc.status_str()
    ))
}

/// Reads the client's `"done"` and its NUL.
fn read_done(conn: &mut Conn) -> Result<()> {
    let mut done = [0u8; DONE.len()];
    conn.recv(&mut done, "\"done\"")?;
    if &done != DONE {
        return fail(format!(
            "the client sent {:?} instead of \"done\" and its NUL",
            String::from_utf8_lossy(&done)
        ));
    }
    Ok(())
}

/// Where `got` first differs from `want`, in words.
fn first_difference(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => format!(
            "byte {i} is {:#04x}, expected {:#04x}; {} bytes differ",
            got[i],
            want[i],
            got.iter().zip(want).filter(|(a, b)| a != b).count()
        ),
        None => "the lengths differ".into(),
    }
}

/// Runs one side. `info` receives the progress lines as they happen: `ibv_rc_pingpong`'s
/// `  local address: ...` and `  remote address: ...`, and `listening on port N`.
pub fn run(cfg: &Config, info: &mut dyn FnMut(&str)) -> Result<Report> {
    let deadline = cfg.time_limit.map(|t| Instant::now() + t);
    let mut side = Side::new(cfg, deadline)?;
    info(&address_line("local address: ", &side.local));
    let client = matches!(cfg.role, Role::Connect(_));
    let (remote, mut conn) = side.exchange(&cfg.role, info)?;
    info(&address_line("remote address:", &remote));
    let elapsed = match (cfg.op, client) {
        (Op::Send, _) => {
            drop(conn);
            side.run_pingpong(client)?
        }
        (_, true) => {
            let buf = remote.buf.expect("read_dest reads it for write and read");
            let elapsed = side.run_one_sided(&buf)?;
            conn.send(DONE, "the final \"done\"")?;
            elapsed
        }
        (_, false) => {
            let start = Instant::now();
            read_done(&mut conn)?;
            let elapsed = start.elapsed();
            if cfg.op == Op::Write && cfg.check {
                side.verify(cfg.iters)?;
            }
            elapsed
        }
    };
    let dirs = if cfg.op == Op::Send { 2 } else { 1 };
    let role = if client { "client" } else { "server" };
    Ok(Report {
        figures: Figures::of(cfg.op, role, cfg.size, cfg.iters, dirs, elapsed),
        checked: cfg.check,
        peer_chk: side.expected.as_ref().map(|e| e.first() == Some(&0)),
        local: side.local.json(),
        remote: remote.json(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 2];

    fn dest(qpn: u32, psn: u32) -> Dest {
        Dest {
            lid: 0,
            qpn,
            psn,
            gid: GID,
            buf: None,
        }
    }

    /// The message as rdma-core builds it: `sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn,
    /// psn, gid)` into `char msg[sizeof "0000:000000:000000:" + 32 zeros]`, all of which
    /// is written.
    fn rdma_core_msg(lid: u32, qpn: u32, psn: u32, gid_hex: &str) -> Vec<u8> {
        let template = "0000:000000:000000:00000000000000000000000000000000";
        let mut m = format!("{lid:04x}:{qpn:06x}:{psn:06x}:{gid_hex}").into_bytes();
        m.resize(template.len() + 1, 0);
        m
    }

    #[test]
    fn our_message_is_byte_for_byte_rdma_cores() {
        let msg = encode_msg(&dest(0x11, 0xabcdef));
        assert_eq!(msg.len(), MSG_LEN);
        assert_eq!(
            &msg[..],
            b"0000:000011:abcdef:00000000000000000000ffff0a520002\0"
        );
        assert_eq!(
            msg.to_vec(),
            rdma_core_msg(0, 0x11, 0xabcdef, "00000000000000000000ffff0a520002")
        );
        assert_eq!(DONE.len(), "done".len() + 1);
    }

    #[test]
    fn what_ibv_rc_pingpong_sends_parses() {
        // An rxe QPN and PSN, the GID of ::ffff:10.82.0.1 at index 1.
        let wire = rdma_core_msg(0, 0x000012, 0x5a3c1f, "00000000000000000000ffff0a520001");
        let d = decode_msg(&wire).unwrap();
        assert_eq!((d.lid, d.qpn, d.psn), (0, 0x12, 0x5a3c1f));
        assert_eq!(gid::ip(&d.gid).to_string(), "::ffff:10.82.0.1");
        // sscanf's %x takes upper case too; and an InfiniBand LID.
        let wire = rdma_core_msg(0x1a, 0xABCDEF, 0, "FE800000000000000000000000000001");
        let d = decode_msg(&wire).unwrap();
        assert_eq!(
            (d.lid, d.qpn, d.gid[0], d.gid[15]),
            (0x1a, 0xabcdef, 0xfe, 1)
        );
        // A GID of zeros (ibv_rc_pingpong without -g).
        let d = decode_msg(&rdma_core_msg(0, 1, 2, &"0".repeat(32))).unwrap();
        assert_eq!(d.gid, [0; 16]);
    }

    #[test]
    fn foreign_messages_are_refused() {
        // rnic-pingpong's own format ends its line with a newline, not a NUL.
        let mut own = b"0000:000011:abcdef:00000000000000000000ffff0a520002\n".to_vec();
        let e = decode_msg(&own).unwrap_err();
        assert!(e.0.contains("has no NUL"), "{e}");
        own[51] = 0;
        assert!(decode_msg(&own).is_ok());
        let e = decode_msg(b"hello\0").unwrap_err();
        assert!(e.0.contains("LLLL:QQQQQQ:PPPPPP"), "{e}");
    }

    #[test]
    fn client_data_is_ibv_rc_pingpongs() {
        assert_eq!(client_data(3, false), vec![0x7b; 3]);
        let d = client_data(3 * CHK_PAGE + 1, true);
        for (i, b) in d.iter().enumerate() {
            let want = if i % CHK_PAGE == 0 { 0 } else { 0x7b };
            assert_eq!(*b, want, "byte {i}");
        }
    }

    #[test]
    fn lines_read_like_ibv_rc_pingpongs() {
        assert_eq!(
            address_line("local address: ", &dest(0x11, 0xabc)),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x000abc, GID ::ffff:10.82.0.2"
        );
        let r = Report {
            figures: Figures {
                op: Op::Send,
                role: "client",
                size: 4096,
                iters: 1000,
                bytes: 8_192_000,
                seconds: 0.5,
                mbit_per_s: 131.072,
                usec_per_iter: 500.0,
            },
            checked: true,
            peer_chk: Some(true),
            local: dest(1, 2).json(),
            remote: dest(3, 4).json(),
        };
        assert_eq!(
            r.text(),
            "8192000 bytes in 0.50 seconds = 131.07 Mbit/sec\n1000 iters in 0.50 seconds = 500.00 usec/iter\n"
        );
    }

    #[test]
    fn buffer_messages_round_trip() {
        let b = RemoteBuf {
            rkey: 0x1234,
            addr: 0x1_0000_2000,
        };
        let msg = encode_key(&b);
        assert_eq!(&msg[..], b"00001234:0000000100002000\0");
        assert_eq!(decode_key(&msg).unwrap(), b);
        assert!(decode_key(b"00001234:0000000100002000\n").is_err());
    }

    #[test]
    fn differences_are_named() {
        assert_eq!(
            first_difference(&[1, 2, 3], &[1, 0, 0]),
            "byte 1 is 0x02, expected 0x00; 2 bytes differ"
        );
    }
}
