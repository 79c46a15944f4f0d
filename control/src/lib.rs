//! rnicd's control socket: a read-only view of the whole device while VMMs hold its
//! functions (docs/hardware-interface.md §12.9). rnicd serves it at
//! `<socket dir>/control.sock`; `rnic-admin --control DIR stats|res|metrics` reads it.
//!
//! One request per connection: the client writes one line ([`Request`]), rnicd answers
//! and closes. Answers are one JSON document ([`Stats`], a list of [`QpEntry`] ...) or,
//! for `metrics`, Prometheus' text format. Nothing here changes the device: the PF's admin
//! queue keeps that role.
//!
//! This crate is the one definition of the answers, shared by rnicd (which fills them)
//! and the tools (which read them), so that they cannot disagree.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The socket's file name in rnicd's socket directory.
pub const SOCKET_NAME: &str = "control.sock";

/// The longest request line rnicd reads, newline included.
pub const MAX_REQUEST: usize = 128;

/// How long rnicd waits for a client's request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The kinds of object `res` lists, as `rdma res show` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// Queue pairs ([`QpEntry`]).
    Qp,
    /// Completion queues ([`CqEntry`]).
    Cq,
    /// Memory regions ([`MrEntry`]).
    Mr,
    /// Protection domains ([`PdEntry`]).
    Pd,
    /// Shared receive queues ([`SrqEntry`]).
    Srq,
}

impl Resource {
    /// Every kind, in the order `rnic-admin res` lists them.
    pub const ALL: [Resource; 5] = [Self::Qp, Self::Cq, Self::Mr, Self::Pd, Self::Srq];

    /// The word of the request: `qp`, `cq`, `mr`, `pd`, `srq`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Qp => "qp",
            Self::Cq => "cq",
            Self::Mr => "mr",
            Self::Pd => "pd",
            Self::Srq => "srq",
        }
    }

    /// The kind a word names.
    pub fn from_word(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.word() == word)
    }
}

/// What a client asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `stats`: every function's counters and the network port's ([`Stats`]).
    Stats,
    /// `res KIND`: the objects of every function (a JSON list of the kind's entries).
    Res(Resource),
    /// `metrics`: the counters of `stats` in Prometheus' text exposition format.
    Metrics,
}

impl Request {
    /// The request line, without its newline.
    pub fn line(self) -> String {
        match self {
            Self::Stats => "stats".into(),
            Self::Res(r) => format!("res {}", r.word()),
            Self::Metrics => "metrics".into(),
        }
    }

    /// Parses a request line (its newline already removed).
    pub fn parse(line: &str) -> Result<Self, String> {
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        match words.as_slice() {
            ["stats"] => Ok(Self::Stats),
            ["metrics"] => Ok(Self::Metrics),
            ["res", kind] => Resource::from_word(kind)
                .map(Self::Res)
                .ok_or_else(|| format!("no resource {kind:?}: qp, cq, mr, pd or srq")),
            _ => Err(format!(
                "unknown request {:?}: stats, res qp|cq|mr|pd|srq, or metrics",
                line.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// The answer to a request rnicd refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// Why.
    pub error: String,
}

/// Counters by name.
pub type Counters = BTreeMap<String, u64>;

/// The answer to `stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Milliseconds since rnicd started.
    pub uptime_ms: u64,
    /// Every function, the PF first.
    pub functions: Vec<FunctionStats>,
    /// The network port (`--net`): its kind (`none`, `udp`, `eth`) and GET_PORT_STATS's
    /// counters since start.
    pub port: PortStats,
    /// What `--net-faults` did to the frames the switch forwarded, since start; `None`
    /// without fault injection.
    pub faults: Option<Counters>,
}

/// One function's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionStats {
    /// `pf`, `vf0`, `vf1`, ...
    pub function: String,
    /// Since its last reset (function-level reset, `DEVICE_CONTROL.RESET`, a VMM's
    /// going away): what GET_MEMBER_STATS reads.
    pub since_reset: FunctionCounters,
    /// Since rnicd started, across resets.
    pub since_start: FunctionCounters,
}

/// The counters of a function over one span of time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCounters {
    /// Transport counters: GET_MEMBER_STATS's (`tx_packets`, `rx_errors`,
    /// `retransmits`, ...).
    pub transport: Counters,
    /// The receive drops of the transport, by reason (`psn`, `icrc`, `unknown_qp`, ...;
    /// docs/hardware-interface.md §7.9), all of them, zeros included.
    pub drops: Counters,
    /// The counters above that mean what one of Soft-RoCE's hw_counters means, under
    /// rxe's name (`sent_pkts`, `rcvd_pkts`, `out_of_seq_request`, ...).
    pub rxe: Counters,
    /// The Ethernet queues' counters (§15.7); empty in `since_start`, where they are not
    /// kept.
    pub ethernet: Counters,
}

/// The network port's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStats {
    /// `none`, `udp` or `eth`.
    pub kind: String,
    /// GET_PORT_STATS's counters by field name.
    pub counters: Counters,
}

/// A queue pair, as `rdma res show qp` lists one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpEntry {
    /// The function it is on.
    pub function: String,
    /// Its number.
    pub lqpn: u32,
    /// The peer QP (RC, UC); 0 for others.
    pub rqpn: u32,
    /// `RC`, `UC`, `UD`, `DC initiator` or `DC target`.
    pub r#type: String,
    /// `RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE` or `ERR`.
    pub state: String,
    /// The PSN of the next request packet it sends.
    pub sq_psn: u32,
    /// The PSN it expects next as a responder.
    pub rq_psn: u32,
    /// Its protection domain.
    pub pdn: u32,
    /// Its send and receive CQs.
    pub send_cqn: u32,
    /// See `send_cqn`.
    pub recv_cqn: u32,
    /// The SRQ it receives from, if any.
    pub srqn: Option<u32>,
    /// Send WQEs taken from the ring and not yet completed.
    pub outstanding: u32,
    /// Request retransmissions since the QP was created (timeouts, NAKs, RNR).
    pub retransmits: u64,
    /// RNR retries left of the current request, and transport retries left.
    pub rnr_retry_left: u8,
    /// See `rnr_retry_left`.
    pub retry_left: u8,
}

/// A completion queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CqEntry {
    /// The function it is on.
    pub function: String,
    /// Its number.
    pub cqn: u32,
    /// Ring entries.
    pub entries: u32,
    /// CQEs written since creation (free-running).
    pub produced: u32,
    /// QPs (and SRQs' QPs) completing on it.
    pub users: usize,
    /// Overran or unreachable: it takes no more CQEs (§7.7).
    pub error: bool,
}

/// A memory region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrEntry {
    /// The function it is on.
    pub function: String,
    /// Its key (rnic's lkey and rkey are one).
    pub key: u32,
    /// Its protection domain.
    pub pdn: u32,
    /// The address of its first byte in work requests.
    pub iova: u64,
    /// Its length in bytes.
    pub length: u64,
    /// Its `ACCESS_*` flags.
    pub access: u32,
    /// Cleared by an invalidation.
    pub valid: bool,
}

/// A protection domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PdEntry {
    /// The function it is on.
    pub function: String,
    /// Its number.
    pub pdn: u32,
    /// Objects that use it.
    pub users: usize,
}

/// A shared receive queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SrqEntry {
    /// The function it is on.
    pub function: String,
    /// Its number.
    pub srqn: u32,
    /// Its protection domain.
    pub pdn: u32,
    /// Ring entries.
    pub entries: u32,
    /// Receive WQEs taken since creation (free-running).
    pub taken: u32,
    /// The armed limit (0: not armed).
    pub limit: u32,
}

/// Why a query failed.
#[derive(Debug)]
pub enum QueryError {
    /// The socket could not be reached or read.
    Io(std::io::Error),
    /// rnicd refused the request.
    Refused(String),
    /// The answer is not what the request gets.
    Answer(String),
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Refused(why) => write!(f, "rnicd refused the request: {why}"),
            Self::Answer(why) => write!(f, "unexpected answer: {why}"),
        }
    }
}

impl std::error::Error for QueryError {}

/// The socket of the rnicd that serves `dir` (or `dir` itself when it names a socket).
pub fn socket_in(dir: &Path) -> std::path::PathBuf {
    if dir.is_dir() {
        dir.join(SOCKET_NAME)
    } else {
        dir.to_path_buf()
    }
}

/// Sends `request` to the control socket at `path` and returns the answer's text.
pub fn query_text(path: &Path, request: Request) -> Result<String, QueryError> {
    let mut stream = UnixStream::connect(path).map_err(QueryError::Io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(QueryError::Io)?;
    stream
        .write_all(format!("{}\n", request.line()).as_bytes())
        .map_err(QueryError::Io)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(QueryError::Io)?;
    if let Ok(e) = serde_json::from_str::<ErrorAnswer>(&text) {
        return Err(QueryError::Refused(e.error));
    }
    Ok(text)
}

/// Sends `request` and parses its JSON answer as a `T`.
pub fn query<T: serde::de::DeserializeOwned>(
    path: &Path,
    request: Request,
) -> Result<T, QueryError> {
    let text = query_text(path, request)?;
    serde_json::from_str(&text).map_err(|e| QueryError::Answer(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_through_their_lines() {
        let mut all = vec![Request::Stats, Request::Metrics];
        all.extend(Resource::ALL.map(Request::Res));
        for r in all {
            assert_eq!(Request::parse(&r.line()), Ok(r));
        }
    }

    #[test]
    fn bad_requests_say_what_is_accepted() {
        assert!(Request::parse("res ah")
            .unwrap_err()
            .contains("qp, cq, mr, pd or srq"));
        assert!(Request::parse("").unwrap_err().contains("stats, res"));
        assert!(Request::parse("stats now").is_err());
    }
}
