//! rnic-pingpong between two VFs of one rnicd, through the host transport: every
//! operation at several sizes over TCP, and the manual mode without TCP.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use rnic_abi::gid;
use rnic_tests::{bin, Rnicd};

const ITERS: u32 = 50;
const T: Duration = Duration::from_secs(20);

/// A running rnic-pingpong whose output is read line by line as it comes.
struct Side {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Side {
    fn drop(&mut self) {
        // A failed test must not leave a process holding a function.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Side {
    fn start(name: &'static str, socket: &Path, args: &[&str]) -> Side {
        let mut child = Command::new(bin("rnic-pingpong"))
            .arg("--vfio-user")
            .arg(socket)
            // Before the test's own arguments, which may give another (the last wins).
            .args(["--time-limit", "15"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rnic-pingpong");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        Side {
            name,
            stdin: child.stdin.take(),
            child,
            lines,
            stdout: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Waits for a line starting with `prefix`; returns the rest of it.
    fn wait_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + T;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push(line.clone());
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_string();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "{}: no line `{prefix}...` within {T:?}; stdout so far: {:?}",
                        self.name, self.stdout
                    );
                }
            }
        }
    }

    fn send_stdin(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(text.as_bytes()).expect("write stdin");
        stdin.flush().expect("flush stdin");
    }

    /// Waits for the exit; returns the status, all of stdout, and stderr.
    fn finish(&mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + T;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{}: did not finish within {T:?}; stdout: {:?}",
                    self.name, self.stdout
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // The reader thread ends at EOF, after the process exited.
        self.stdout.extend(self.lines.iter());
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().expect("stderr reader"))
            .unwrap_or_default();
        (status, self.stdout.join("\n"), stderr)
    }
}

/// Checks one side's result: exit 0, the iteration line and a latency line.
fn check_success(mut side: Side, size: usize, iters: u32) -> String {
    let name = side.name;
    let (status, out, err) = side.finish();
    assert!(
        status.success(),
        "{name} failed ({status}):\nstdout:\n{out}\nstderr:\n{err}"
    );
    let head = format!("{iters} iters of {size} bytes in ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("{name}: no `{head}...` line in:\n{out}"));
    // "N iters of S bytes in T s: X Mbit/s, Y usec/iter"
    let rest = &line[head.len()..];
    let (t, rest) = rest.split_once(" s: ").expect("` s: `");
    let (mbit, rest) = rest.split_once(" Mbit/s, ").expect("` Mbit/s, `");
    let usec = rest.strip_suffix(" usec/iter").expect("` usec/iter`");
    for v in [t, mbit, usec] {
        let v: f64 = v
            .parse()
            .unwrap_or_else(|_| panic!("{name}: {v:?} in {line:?}"));
        assert!(v >= 0.0 && v.is_finite(), "{line}");
    }
    assert!(
        out.lines().any(|l| l.starts_with("latency: min ")),
        "{name}: no latency line in:\n{out}"
    );
    out
}

/// One TCP run: the server on vf0 (--listen 0), the client on vf1.
fn tcp_run(rnicd: &Rnicd, op: &str, size: usize, extra: &[&str]) {
    let size_s = size.to_string();
    let iters = ITERS.to_string();
    let mut args = vec!["--op", op, "--size", &size_s, "--iters", &iters];
    args.extend_from_slice(extra);
    let mut server_args = vec!["--listen", "0"];
    server_args.extend_from_slice(&args);
    let mut server = Side::start("server", &rnicd.socket("vf0"), &server_args);
    let local = server.wait_line("local: ");
    assert!(local.starts_with("qpn 0x11 gid "), "{local}");
    let port = server.wait_line("listening on port ");
    let target = format!("127.0.0.1:{port}");
    let mut client_args = vec!["--connect", target.as_str()];
    client_args.extend_from_slice(&args);
    let client = Side::start("client", &rnicd.socket("vf1"), &client_args);
    let c = check_success(client, size, ITERS);
    let s = check_success(server, size, ITERS);
    // Each side learnt the other's parameters.
    let remote_of = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("remote: ").map(str::to_string))
            .expect("a remote: line")
    };
    let local_of = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("local: ").map(str::to_string))
            .expect("a local: line")
    };
    let wants_buf = op != "send";
    for (me, peer) in [(&c, &s), (&s, &c)] {
        let remote = remote_of(me);
        let local = local_of(peer);
        if wants_buf {
            assert_eq!(remote, local, "{op} {size}");
        } else {
            assert!(
                local.starts_with(&remote),
                "{op} {size}: {local} / {remote}"
            );
        }
    }
}

#[test]
fn send_pingpong_over_tcp_at_several_sizes() {
    let rnicd = Rnicd::start(2, &[]);
    for size in [1, 4096, 100_000] {
        tcp_run(&rnicd, "send", size, &[]);
    }
}

#[test]
fn write_pingpong_over_tcp_at_several_sizes() {
    let rnicd = Rnicd::start(2, &[]);
    for size in [1, 4096, 100_000] {
        tcp_run(&rnicd, "write", size, &[]);
    }
}

#[test]
fn read_over_tcp_at_several_sizes() {
    let rnicd = Rnicd::start(2, &[]);
    for size in [1, 4096, 100_000] {
        tcp_run(&rnicd, "read", size, &[]);
    }
    // Other MTUs, completion events, and no data check.
    tcp_run(&rnicd, "read", 10_000, &["--mtu", "256", "--events"]);
    tcp_run(&rnicd, "write", 10_000, &["--mtu", "4096", "--no-check"]);
}

/// The GID of a function, as 32 hex digits, from rnic-info.
fn gid_hex(rnicd: &Rnicd, function: &str) -> String {
    let out = Command::new(bin("rnic-info"))
        .args(["--json", "--vfio-user"])
        .arg(rnicd.socket(function))
        .output()
        .expect("run rnic-info");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let text = v[0]["gid"].as_str().expect("gid");
    gid::hex(&gid::parse(text).expect("a GID")).to_string()
}

#[test]
fn manual_mode_with_peers_written_in_advance() {
    let rnicd = Rnicd::start(2, &[]);
    let (g0, g1) = (gid_hex(&rnicd, "vf0"), gid_hex(&rnicd, "vf1"));
    // A fresh function's first QP is 0x11 and the PSN is 0 in manual mode, so both
    // command lines are known before either side runs.
    let qpn = format!("{:x}", rnic_tools::pingpong::FIRST_QPN);
    let peer_of_vf0 = format!("{qpn}:{g1}:0");
    let peer_of_vf1 = format!("0x{qpn}:{g0}:0x0");
    let iters = ITERS.to_string();
    // The initiator first: it retries until the other side is there (the delay is longer
    // than one round of transport retries, ~0.5 s).
    let mut initiator = Side::start(
        "initiator",
        &rnicd.socket("vf0"),
        &["--peer", &peer_of_vf0, "--initiator", "--iters", &iters],
    );
    let local = initiator.wait_line("local: ");
    assert!(
        local.starts_with(&format!("qpn 0x11 gid {g0} psn 0x0 rkey ")),
        "{local}"
    );
    std::thread::sleep(Duration::from_millis(800));
    let responder = Side::start(
        "responder",
        &rnicd.socket("vf1"),
        &["--peer", &peer_of_vf1, "--iters", &iters],
    );
    check_success(initiator, 4096, ITERS);
    check_success(responder, 4096, ITERS);
}

#[test]
fn manual_mode_with_peers_read_from_stdin() {
    let rnicd = Rnicd::start(2, &[]);
    for (op, size) in [("write", 100_000), ("read", 4096)] {
        let size_s = size.to_string();
        let iters = ITERS.to_string();
        let args = [
            "--peer", "-", "--op", op, "--size", &size_s, "--iters", &iters,
        ];
        let mut with_initiator = args.to_vec();
        with_initiator.push("--initiator");
        let mut a = Side::start("initiator", &rnicd.socket("vf0"), &with_initiator);
        let mut b = Side::start("responder", &rnicd.socket("vf1"), &args);
        let pa = a.wait_line("peer: --peer ");
        let pb = b.wait_line("peer: --peer ");
        // With the buffer: QPN:GID:PSN:RKEY:ADDR.
        assert_eq!(pa.split(':').count(), 5, "{pa}");
        a.send_stdin(&format!("{pb}\n"));
        b.send_stdin(&format!("{pa}\n"));
        check_success(a, size, ITERS);
        let out = check_success(b, size, ITERS);
        if op == "read" {
            assert!(out.contains("measured by the initiator"), "{out}");
        }
    }
}

#[test]
fn json_output_and_clear_errors() {
    let rnicd = Rnicd::start(2, &[]);
    // JSON: stdout is one object, the progress lines go to stderr (so the server gets a
    // port picked here rather than printing the one it got).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port().to_string()
    };
    let server = Side::start(
        "server",
        &rnicd.socket("vf0"),
        &["--listen", &port, "--iters", "10", "--size", "64", "--json"],
    );
    let target = format!("127.0.0.1:{port}");
    let client = Side::start(
        "client",
        &rnicd.socket("vf1"),
        &[
            "--connect",
            &target,
            "--iters",
            "10",
            "--size",
            "64",
            "--json",
        ],
    );
    for mut side in [client, server] {
        let name = side.name;
        let (status, out, err) = side.finish();
        assert!(status.success(), "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON object");
        assert_eq!(v["op"], "send");
        assert_eq!(
            (v["iters"].as_u64(), v["size"].as_u64()),
            (Some(10), Some(64))
        );
        assert_eq!(v["bytes"].as_u64(), Some(2 * 10 * 64));
        assert!(v["usec_per_iter"].as_f64().expect("usec") > 0.0);
        assert!(v["latency_usec"]["median"].as_f64().is_some(), "{v}");
        assert_eq!(v["local"]["qpn"].as_u64(), Some(0x11));
        assert!(err.contains("local: qpn 0x11"), "{err}");
    }

    // Mismatched tests fail on both sides, saying so.
    let (g0, g1) = (gid_hex(&rnicd, "vf0"), gid_hex(&rnicd, "vf1"));
    let a = Side::start(
        "initiator",
        &rnicd.socket("vf0"),
        &[
            "--peer",
            &format!("11:{g1}:0"),
            "--initiator",
            "--iters",
            "10",
        ],
    );
    let b = Side::start(
        "responder",
        &rnicd.socket("vf1"),
        &["--peer", &format!("11:{g0}:0"), "--iters", "20"],
    );
    for mut side in [a, b] {
        let name = side.name;
        let (status, _, err) = side.finish();
        assert_eq!(status.code(), Some(1), "{name}");
        assert!(
            err.contains("both sides need the same --op, --size and --iters"),
            "{name}: {err}"
        );
    }

    // A wrong rkey: the READ fails with the ibverbs status string.
    let mut a = Side::start(
        "initiator",
        &rnicd.socket("vf0"),
        &[
            "--peer",
            &format!("11:{g1}:0:0xbad00:0x100001000"),
            "--initiator",
            "--op",
            "read",
            "--iters",
            "3",
        ],
    );
    let mut b = Side::start(
        "responder",
        &rnicd.socket("vf1"),
        &[
            "--peer",
            &format!("11:{g0}:0:1:100001000"),
            "--op",
            "read",
            "--iters",
            "3",
        ],
    );
    let (status, _, err) = a.finish();
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("RDMA READ"), "{err}");
    assert!(err.contains("remote access error"), "{err}");
    let (status, _, _) = b.finish();
    assert!(!status.success());

    // Nobody there: a timeout that says what it waited for.
    let started = Instant::now();
    let mut a = Side::start(
        "lonely",
        &rnicd.socket("vf0"),
        &["--peer", &format!("11:{g1}:0"), "--time-limit", "1"],
    );
    let (status, _, err) = a.finish();
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("timed out after 1 s waiting for"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // No device: the error names the option to use.
    let out = Command::new(bin("rnic-pingpong"))
        .args(["--vfio-user", "/nonexistent/vf0.sock", "--listen"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is rnicd running"), "{err}");
}

/// ibv_rc_pingpong's short flags and its SERVERNAME: `-p PORT -s N -n N -m MTU -e -c`
/// on both sides, the client naming the server's host alone.
#[test]
fn ibv_rc_pingpongs_short_flags_and_servername() {
    let rnicd = Rnicd::start(2, &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port().to_string())
        .expect("a free port");
    let flags = [
        "-p",
        port.as_str(),
        "-s",
        "3000",
        "-n",
        "20",
        "-m",
        "2048",
        "-e",
        "-c",
    ];
    let mut server_args = vec!["--listen"];
    server_args.extend_from_slice(&flags);
    let mut server = Side::start("server", &rnicd.socket("vf0"), &server_args);
    assert_eq!(server.wait_line("listening on port "), port);
    let mut client_args = flags.to_vec();
    client_args.push("127.0.0.1");
    let client = Side::start("client", &rnicd.socket("vf1"), &client_args);
    check_success(client, 3000, 20);
    check_success(server, 3000, 20);
}
