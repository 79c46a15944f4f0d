//! How two rnic-pingpongs meet (the lines are [`super::line`]'s):
//!
//! * **TCP** (`--listen` / `--connect`, over [`crate::rendezvous`]), as `ibv_rc_pingpong`
//!   does: the client writes its lines, the server reads them, moves its QP to RTS,
//!   writes its own lines back, and the client answers `done`.
//! * **Manual** (`--peer`), for VMs whose guests cannot reach each other: the peer's
//!   values come from the command line, or from a line on standard input (`--peer -`),
//!   after this side printed its own. A freshly opened function hands out deterministic
//!   objects (its first QP is QPN 0x11, its first MR the same key every time, on the host
//!   this tool's buffer the same address; the PSN defaults to 0), so both command lines
//!   can be written in advance (in a VM the buffer's address differs from run to run:
//!   there `--op write` and `--op read` want `--peer -`). The `--initiator` side then says
//!   hello until the peer's QP answers (`session.rs`).

use std::io::BufRead;
use std::time::{Duration, Instant};

use super::line::{read_dest, wire_lines, Dest};
use super::session::Session;
use crate::error::{fail, timed_out, Result, ToolError};
use crate::rendezvous::{Conn, Role};

/// The TCP exchange as `role`: returns the peer, with this side's QP connected to it.
pub(super) fn tcp(s: &Session, role: &Role, info: &mut dyn FnMut(&str)) -> Result<Dest> {
    let hint = "rnic-pingpong --connect HOST:PORT";
    let mut conn = Conn::open(role, s.deadline, s.cfg.time_limit, hint, info)?;
    let lines = wire_lines(&s.local, s.cfg.op);
    let remote = match role {
        // The server: read the client's lines, connect the QP, answer, read `done`.
        Role::Listen(_) => {
            let remote = read_dest(conn.reader(), s.cfg.op)?;
            s.connect(&remote)?;
            conn.send(lines.as_bytes(), "this side's parameters")?;
            let done = conn.read_token("`done`")?;
            if done != "done" {
                return fail(format!("the client sent {done:?} instead of `done`"));
            }
            remote
        }
        // The client: send this side's lines, read the server's, say `done`.
        Role::Connect(_) => {
            conn.send(lines.as_bytes(), "this side's parameters")?;
            let remote = read_dest(conn.reader(), s.cfg.op)?;
            conn.send(b"done\n", "`done`")?;
            s.connect(&remote)?;
            remote
        }
    };
    Ok(remote)
}

/// Reads `--peer -`'s line from standard input.
pub(super) fn peer_from_stdin(deadline: Option<Instant>, limit: Option<Duration>) -> Result<Dest> {
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
            .map_err(|_| ToolError("standard input: reader failed".into()))?,
    };
    let line = got.map_err(|e| ToolError(format!("read the peer from standard input: {e}")))?;
    if line.trim().is_empty() {
        return fail("standard input ended without the peer's QPN:GID:PSN[:RKEY:ADDR]");
    }
    Dest::parse_peer(&line)
}
