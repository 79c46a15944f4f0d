//! rnic-pingpong's session: one side's verbs objects (a function, one RC QP, one buffer)
//! and the loops of the three operations:
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
//! In manual mode the `--initiator` side first sends a hello (a control message) and,
//! while the peer's QP is not there yet (transport retries exceeded), resets its QP and
//! tries again until the time limit; both check they run the same `--op`, `--size` and
//! `--iters`. With [`Config::follow`] the session follows its QP to the other function
//! when the PF migrates it (`rnic-admin migrate`, README "Moving a connection between
//! VFs"): it adopts the QP there ([`rnic_driver::verbs::Qp::adopt`]) and goes on.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rnic_abi::verbs::mtu_code;
use rnic_driver::verbs::{
    self, Context, QpState, RecvWr, SendWr, Wc, WcOpcode, WcStatus, WrOpcode,
};

use super::ctrl::{Ctrl, CtrlKind, CTRL_LEN};
use super::line::{Dest, RemoteBuf};
use super::pattern::Pattern;
use super::report::Latency;
use super::{Config, Op, Rendezvous};
use crate::error::{drv, fail, timed_out, Result, ToolError};
use crate::open;
use crate::rc::{self, check_sizes, idle_wait, page_round, RcSide};

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
pub(super) struct Session {
    /// The QP, its CQ and buffer, and (`side.ctx`) the function the QP is on now.
    side: RcSide,
    /// The other function of [`Config::follow`], where the QP may go.
    spare: Option<Context>,
    /// Migrations followed.
    pub(super) followed: u32,
    pub(super) cfg: Config,
    /// Offset of the data this side sends (SEND and WRITE source).
    data_out: usize,
    pub(super) deadline: Option<Instant>,
    /// Completions polled but not looked at yet.
    pending: VecDeque<Wc>,
    /// Successful completions already accounted for, put aside while waiting for another
    /// one; handed out again first, in order.
    stash: VecDeque<Wc>,
    /// Receives still to post, in the order messages will come.
    to_post: VecDeque<RecvKind>,
    /// Receives posted and not completed, in order.
    posted: VecDeque<RecvKind>,
    pub(super) local: Dest,
    pattern: Pattern,
}

impl Session {
    pub(super) fn new(cfg: &Config, deadline: Option<Instant>) -> Result<Session> {
        check_sizes(cfg.size, cfg.iters, cfg.mtu)?;
        let data_out = DATA_IN + page_round(cfg.size);
        let buf_len = data_out + page_round(cfg.size);
        let (ctx, spare, buf) = open::open_verbs(&cfg.device, cfg.follow.as_ref(), buf_len)?;
        let limits = ctx.attr().limits;
        if (buf_len as u64) > limits.max_mr_size {
            return fail(format!(
                "--size {}: the buffer ({buf_len} bytes) exceeds the function's largest memory region ({} bytes)",
                cfg.size, limits.max_mr_size
            ));
        }
        let rx = RX_DEPTH.min(limits.max_qp_wr.max(1));
        let tx = TX_DEPTH.min(limits.max_qp_wr.max(1));
        let cqe = ((rx + tx) * 2).min(limits.max_cqe.max(2));
        let access =
            verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_WRITE | verbs::ACCESS_REMOTE_READ;
        let side = RcSide::new(ctx, buf, buf_len, access, cqe, (tx, rx))?;
        let local = Dest {
            lid: 0,
            qpn: side.qp.qp_num(),
            psn: cfg.psn & 0xFF_FFFF,
            gid: side.ctx.attr().gid,
            buf: Some(RemoteBuf {
                rkey: side.mr.rkey(),
                addr: side.mr.addr(DATA_IN),
            }),
        };
        let mut s = Session {
            side,
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
                s.side.mr.write(DATA_IN, &s.pattern.data(1, 0));
            }
            Op::Read => {}
        }
        s.post_receives()?;
        Ok(s)
    }

    fn to_init(&self) -> Result<()> {
        self.side.to_init(self.cfg.op.remote_access())
    }

    /// Moves the QP to RTR and RTS towards `remote`.
    pub(super) fn connect(&self, remote: &Dest) -> Result<()> {
        let mtu = mtu_code(self.cfg.mtu).expect("checked in new");
        let (a, m) = verbs::rtr_attr(remote.qpn, remote.gid, remote.psn, mtu, 1, MIN_RNR_TIMER);
        self.side.qp.modify(&a, m).map_err(drv(&format!(
            "move the QP to RTR towards {} (--mtu {})",
            remote.describe(),
            self.cfg.mtu
        )))?;
        let (a, m) = verbs::rts_attr(self.local.psn, self.cfg.timeout, self.cfg.retry, 7, 1);
        self.side
            .qp
            .modify(&a, m)
            .map_err(drv("move the QP to RTS"))
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
                    let got = self.side.cq.poll(16);
                    if got.is_empty() {
                        self.side
                            .ctx
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
        self.side.qp.modify(&a, m).map_err(drv("reset the QP"))?;
        self.to_init()?;
        self.post_receives()?;
        self.connect(remote)
    }

    /// Posts receives from the plan while the receive queue has room.
    fn post_receives(&mut self) -> Result<()> {
        let n = (self.side.qp.rq_free_slots() as usize).min(self.to_post.len());
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
                    sges: vec![self.side.mr.sge(CTRL_IN, CTRL_LEN)],
                },
                RecvKind::Data => RecvWr {
                    wr_id: wr_id::RECV_DATA,
                    sges: vec![self.side.mr.sge(DATA_IN, self.cfg.size)],
                },
            })
            .collect();
        self.side
            .qp
            .post_recv_list(&wrs)
            .map_err(drv("post receives"))?;
        let taken: Vec<RecvKind> = self.to_post.drain(..n).collect();
        self.posted.extend(taken);
        Ok(())
    }

    fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    fn timed_out(&self, what: &str) -> ToolError {
        timed_out(self.cfg.time_limit, what)
    }

    /// The next completion, successful or not, in the order the device wrote them.
    fn next_wc_any(&mut self, what: &str) -> Result<Wc> {
        let mut idle = 0u32;
        loop {
            if let Some(wc) = self.pending.pop_front() {
                return Ok(wc);
            }
            let got = self.side.cq.poll(16);
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
            let got = idle_wait(
                &self.side.ctx,
                &self.side.cq,
                self.cfg.events,
                &mut idle,
                slice,
            )?;
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
        let qpn = self.side.qp.qp_num();
        let departed = self
            .side
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
        self.side
            .qp
            .adopt(spare, None, None)
            .map_err(drv("take over the QP on the other function"))?;
        if let Some(spare) = self.spare.as_mut() {
            std::mem::swap(&mut self.side.ctx, spare);
        }
        self.followed += 1;
        log::info!(
            "followed QP {qpn:#x} to {}",
            self.side.ctx.device().transport().describe()
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
        self.side.qp.post_send(wr).map_err(drv(what))
    }

    /// Posts a control message (its completion is the caller's to wait for).
    fn post_ctrl(&self, c: &Ctrl) -> Result<()> {
        self.side.mr.write(CTRL_OUT, &c.encode());
        self.post_send(
            &SendWr {
                wr_id: wr_id::make(wr_id::CTRL_SEND, 0),
                opcode: WrOpcode::Send,
                sges: vec![self.side.mr.sge(CTRL_OUT, CTRL_LEN)],
                signaled: true,
                ..SendWr::default()
            },
            "post a control SEND",
        )
    }

    fn read_ctrl(&self) -> Result<Ctrl> {
        let mut b = [0u8; CTRL_LEN];
        self.side.mr.read(CTRL_IN, &mut b);
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
    pub(super) fn handshake(&mut self, remote: &Dest, initiator: bool) -> Result<()> {
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
            self.side
                .mr
                .write(self.data_out, &self.pattern.data(stream, iter));
        }
    }

    /// Checks the incoming area against the peer's data of iteration `iter`.
    fn verify_in(&self, stream: u8, iter: u64) -> Result<()> {
        if !self.cfg.check {
            return Ok(());
        }
        let mut got = vec![0u8; self.cfg.size];
        self.side.mr.read(DATA_IN, &mut got);
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
                sges: vec![self.side.mr.sge(self.data_out, self.cfg.size)],
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
    pub(super) fn run_pingpong_initiator(&mut self, remote: &Dest) -> Result<(Duration, Vec<u64>)> {
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
                .map_err(|e| ToolError(format!("iteration {k}: {e}")))?;
            samples.push(t0.elapsed().as_nanos() as u64);
        }
        Ok((start.elapsed(), samples))
    }

    /// The send/write responder: wait for a message, check it, answer, `iters` times.
    pub(super) fn run_pingpong_responder(&mut self, remote: &Dest) -> Result<(Duration, Vec<u64>)> {
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
                .map_err(|e| ToolError(format!("iteration {k}: {e}")))?;
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
    pub(super) fn run_read_initiator(&mut self, remote: &Dest) -> Result<(Duration, Vec<u64>)> {
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
                self.side.mr.write(DATA_IN, &poison);
            }
            self.post_send(
                &SendWr {
                    wr_id: wr_id::make(wr_id::READ, k),
                    opcode: WrOpcode::RdmaRead {
                        remote_addr: b.addr,
                        rkey: b.rkey,
                    },
                    sges: vec![self.side.mr.sge(DATA_IN, size)],
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
                self.side.mr.read(DATA_IN, &mut got);
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
    pub(super) fn run_read_responder(&mut self) -> Result<(Duration, Option<Latency>)> {
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

/// The error of a failed completion, with its status string and a hint.
fn completion_error(wc: &Wc) -> ToolError {
    rc::completion_error(wc, wr_id::name(wc.wr_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_request_ids_carry_their_kind() {
        assert_eq!(wr_id::kind(wr_id::make(wr_id::READ, 77)), wr_id::READ);
    }
}
