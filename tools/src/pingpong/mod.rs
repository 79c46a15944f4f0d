//! The logic of `rnic-pingpong`: an RC ping-pong between two rnic functions in the manner
//! of rdma-core's `ibv_rc_pingpong`, for SENDs, RDMA WRITEs and RDMA READs, every byte
//! checked (README, "The two commands" and "On the host, without a VM"; the
//! `--ibv-compat` mode is [`crate::ibv_compat`]). One file a job: [`line`](mod@line) the line
//! format, [`pattern`](mod@pattern) the data, `exchange.rs` how the two sides meet, `ctrl.rs` the
//! control messages, [`report`] the figures, `session.rs` the verbs objects and the loops
//! of the three operations; [`run`] ties them together.

mod ctrl;
mod exchange;
pub mod line;
pub mod pattern;
pub mod report;
mod session;

use std::time::{Duration, Instant};

pub use self::ctrl::CTRL_LEN;
pub use self::line::{Dest, RemoteBuf};
pub use self::pattern::{pattern, pattern_byte, pattern_offset, verify, Pattern};
pub use self::report::{DestJson, Figures, Latency, Report};
use self::session::Session;
use crate::error::fail;
pub use crate::error::{Result, ToolError};
pub use crate::open::DeviceChoice;
pub use crate::rc::random_psn;
use crate::rendezvous::Role;
pub use crate::rendezvous::DEFAULT_PORT;

/// The QP number of the first QP created on a freshly opened function (the device starts
/// at 0x11, after InfiniBand's special QPs).
pub const FIRST_QPN: u32 = rnic_abi::verbs::FIRST_QPN;

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

    /// The remote access a QP and its buffer allow the peer for this operation.
    pub fn remote_access(self) -> u32 {
        match self {
            Op::Send => 0,
            Op::Write => rnic_driver::verbs::ACCESS_REMOTE_WRITE,
            Op::Read => rnic_driver::verbs::ACCESS_REMOTE_READ,
        }
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

/// Runs one side of the ping-pong. `info` receives the lines scripts look for, as they
/// happen: `local: ...`, `listening on port N`, `peer: --peer ...` (manual mode),
/// `remote: ...`.
pub fn run(cfg: &Config, info: &mut dyn FnMut(&str)) -> Result<Report> {
    let deadline = cfg.time_limit.map(|t| Instant::now() + t);
    let mut s = Session::new(cfg, deadline)?;
    let initiator = cfg.rendezvous.initiator();
    info(&format!("local: {}", s.local.describe()));
    let remote = match &cfg.rendezvous {
        Rendezvous::Listen(port) => exchange::tcp(&s, &Role::Listen(*port), info)?,
        Rendezvous::Connect(target) => exchange::tcp(&s, &Role::Connect(target.clone()), info)?,
        Rendezvous::Manual { peer, .. } => {
            let mut me = s.local;
            if !cfg.op.needs_remote_buffer() {
                me.buf = None;
            }
            info(&format!("peer: --peer {}", me.peer_arg()));
            let remote = match peer {
                Some(p) => *p,
                None => exchange::peer_from_stdin(deadline, cfg.time_limit)?,
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

    pub(crate) const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 2];

    pub(crate) fn dest() -> Dest {
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

    pub(crate) fn cfg(op: Op) -> Config {
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
    fn options_parse() {
        assert_eq!("write".parse::<Op>().unwrap(), Op::Write);
        assert!("atomic".parse::<Op>().is_err());
    }
}
