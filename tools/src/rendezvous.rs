//! The TCP rendezvous of rnic-pingpong, its `--ibv-compat` mode and `rnic-perf
//! --perftest`: one side listens, the other connects (retrying while it is refused, as
//! README "Start order" says), and then they swap their messages, each sent whole in one
//! write. What the messages say is each protocol's (`pingpong::line`, `ibv_compat`,
//! `perf::perftest::wire`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{fail, timed_out, Result, ToolError};

/// `ibv_rc_pingpong`'s and perftest's TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// Which side of the TCP exchange this is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Wait for the client on this TCP port (0: any, printed).
    Listen(u16),
    /// Connect to `HOST[:PORT]`; this side sends first.
    Connect(String),
}

/// One TCP connection to the peer, with its reads buffered.
pub struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Listens or connects as `role` says, before `deadline`. A server says `listening
    /// on port N` through `info`; `peer_hint` names what the other side should run, for
    /// a server that no client reached in time.
    pub fn open(
        role: &Role,
        deadline: Option<Instant>,
        limit: Option<Duration>,
        peer_hint: &str,
        info: &mut dyn FnMut(&str),
    ) -> Result<Conn> {
        let stream = match role {
            Role::Listen(port) => accept_one(*port, deadline, limit, peer_hint, info)?,
            Role::Connect(target) => connect_retrying(target, deadline)?,
        };
        Ok(Conn {
            reader: BufReader::new(stream),
        })
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    /// Reads and writes give up after `left` (`None`: never).
    pub fn set_time_left(&self, left: Option<Duration>) -> Result<()> {
        set_timeouts(self.stream(), left)
    }

    /// Sends `data` in one write (the peer may read each message with one `read`).
    pub fn send(&self, data: &[u8], what: &str) -> Result<()> {
        let mut stream = self.stream();
        stream
            .write_all(data)
            .map_err(|e| ToolError(format!("send {what}: {}", io_msg(&e))))
    }

    /// Reads exactly `buf.len()` bytes, the peer's `what`.
    pub fn recv(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        self.read_exact(buf).map_err(|e| read_error(what, &e, None))
    }

    /// Reads exactly `buf.len()` bytes; the error is the caller's to put in words
    /// ([`read_error`]).
    pub fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.reader.read_exact(buf)
    }

    /// Reads what is there, up to `buf.len()` bytes, as `read` does.
    pub fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reader.read(buf)
    }

    /// Reads one token ending in a newline or a NUL ([`read_token`]).
    pub fn read_token(&mut self, what: &str) -> Result<String> {
        read_token(&mut self.reader, what)
    }

    /// The buffered reader, for a protocol that reads tokens of its own.
    pub fn reader(&mut self) -> &mut impl BufRead {
        &mut self.reader
    }
}

/// The error of a failed read of the peer's `what`; a read that timed out says `silence`
/// where the caller knows why the peer may be silent.
pub fn read_error(what: &str, e: &std::io::Error, silence: Option<&str>) -> ToolError {
    let msg = match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "the peer closed the connection early (did it fail? see its output)".to_string()
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => match silence {
            Some(hint) => format!("no answer: {hint}"),
            None => io_msg(e),
        },
        _ => io_msg(e),
    };
    ToolError(format!("read the peer's {what}: {msg}"))
}

/// Reads one token ending in a newline or a NUL (`ibv_rc_pingpong` ends its messages with
/// a NUL), without the end.
pub fn read_token(r: &mut impl BufRead, what: &str) -> Result<String> {
    let mut out = Vec::new();
    loop {
        let buf = r
            .fill_buf()
            .map_err(|e| ToolError(format!("reading {what} over TCP: {}", io_msg(&e))))?;
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
    String::from_utf8(out).map_err(|_| ToolError(format!("the peer sent non-text as {what}")))
}

/// An I/O error in words; a timeout says to raise the time limit.
pub fn io_msg(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "timed out (raise --time-limit?)".into()
        }
        _ => e.to_string(),
    }
}

/// Reads and writes on `stream` give up after `left` (`None`: never).
pub fn set_timeouts(stream: &TcpStream, left: Option<Duration>) -> Result<()> {
    let t = left.map(|l| l.max(Duration::from_millis(1)));
    stream
        .set_read_timeout(t)
        .and_then(|()| stream.set_write_timeout(t))
        .map_err(|e| ToolError(format!("set TCP timeouts: {e}")))
}

/// Listens on TCP `port` (0: any, printed as `listening on port N` through `info`) and
/// accepts one client before `deadline`; `peer_hint` says what the other side should run.
fn accept_one(
    port: u16,
    deadline: Option<Instant>,
    limit: Option<Duration>,
    peer_hint: &str,
    info: &mut dyn FnMut(&str),
) -> Result<TcpStream> {
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        ToolError(format!(
            "listen on TCP port {port}: {e} (another program on it? choose another with --listen PORT, or --listen 0 for any)"
        ))
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| ToolError(format!("the listening socket's port: {e}")))?
        .port();
    info(&format!("listening on port {port}"));
    listener
        .set_nonblocking(true)
        .map_err(|e| ToolError(format!("listen: {e}")))?;
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
        .map_err(|e| ToolError(format!("TCP: {e}")))?;
    set_timeouts(
        &stream,
        deadline.map(|d| d.saturating_duration_since(Instant::now())),
    )?;
    Ok(stream)
}

/// Splits `HOST[:PORT]` (IPv6 in brackets) into addresses.
fn resolve(target: &str) -> Result<Vec<SocketAddr>> {
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
        .map_err(|e| ToolError(format!("--connect {target}: {e} (use HOST or HOST:PORT)")))?
        .collect();
    if addrs.is_empty() {
        return fail(format!("--connect {target}: the name has no address"));
    }
    Ok(addrs)
}

/// Connects to `target` (`HOST[:PORT]`, port 18515 by default), retrying while the
/// connection is refused (the server may still be starting) until `deadline`.
fn connect_retrying(target: &str, deadline: Option<Instant>) -> Result<TcpStream> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn connect_targets_get_the_default_port() {
        let a = resolve("127.0.0.1").unwrap();
        assert_eq!(a[0], "127.0.0.1:18515".parse().unwrap());
        assert_eq!(resolve("127.0.0.1:7").unwrap()[0].port(), 7);
        assert_eq!(resolve("[::1]").unwrap()[0].port(), DEFAULT_PORT);
        assert_eq!(resolve("[::1]:9").unwrap()[0].port(), 9);
        assert_eq!(resolve("::1").unwrap()[0].port(), DEFAULT_PORT);
    }

    #[test]
    fn both_sides_meet_and_swap_messages() {
        let listener_port = {
            // A free port, released for the server to take.
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        let server = std::thread::spawn(move || {
            let mut said = Vec::new();
            let mut conn = Conn::open(
                &Role::Listen(listener_port),
                deadline,
                None,
                "the test",
                &mut |l| said.push(l.to_string()),
            )
            .unwrap();
            let mut hello = [0u8; 5];
            conn.recv(&mut hello, "hello").unwrap();
            conn.send(b"line one\nline two\0", "lines").unwrap();
            (hello, said)
        });
        let target = format!("127.0.0.1:{listener_port}");
        let mut conn = Conn::open(&Role::Connect(target), deadline, None, "", &mut |_| {}).unwrap();
        conn.send(b"hello", "hello").unwrap();
        assert_eq!(conn.read_token("a line").unwrap(), "line one");
        assert_eq!(conn.read_token("a line").unwrap(), "line two");
        let (hello, said) = server.join().unwrap();
        assert_eq!(&hello, b"hello");
        assert_eq!(said, [format!("listening on port {listener_port}")]);
        let mut more = [0u8; 1];
        let e = conn.recv(&mut more, "last word").unwrap_err();
        assert!(
            e.0.starts_with("read the peer's last word: the peer closed"),
            "{e}"
        );
    }
}
