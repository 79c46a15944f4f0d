//! What the host tools and the driver do when the device goes away under them: rnicd
//! stopped, the function reset by its PF, the socket held by another client. Each must
//! end at once with an error that says what happened, never wait out a time limit.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use rnic_driver::transport::vfio_user::{VfioUserOptions, VfioUserTransport};
use rnic_driver::verbs::Context;
use rnic_driver::{Device, Error};
use rnic_tests::{bin, finish_within, Rnicd};

/// How long a tool may take to notice, once the device went away ("a few seconds"; it
/// was 150 s before the driver watched for it).
const NOTICE: Duration = Duration::from_secs(5);

/// A running `rnic-pingpong` whose stdout lines arrive on a channel.
struct Pingpong {
    child: Option<Child>,
    lines: Receiver<String>,
}

impl Pingpong {
    /// Starts a long ping-pong on `socket` with `args` (`--listen 0` or `--connect ...`).
    fn start(socket: &Path, args: &[&str]) -> Pingpong {
        let mut child = Command::new(bin("rnic-pingpong"))
            .arg("--vfio-user")
            .arg(socket)
            .args(["--iters", "100000000", "--time-limit", "90"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rnic-pingpong");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Pingpong {
            child: Some(child),
            lines,
        }
    }

    /// The rest of the first stdout line that starts with `prefix`.
    fn wait_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_string();
                    }
                }
                Err(e) => panic!("rnic-pingpong printed no {prefix:?} line: {e}"),
            }
        }
    }

    /// Waits (at most `limit`) for the exit; returns the output and how long it took.
    fn finish(&mut self, limit: Duration) -> (Output, Duration) {
        let start = Instant::now();
        let out = finish_within(self.child.take().expect("running"), limit);
        (out, start.elapsed())
    }
}

impl Drop for Pingpong {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Two ping-pongs between vf0 (listening) and vf1, both past their set-up: running.
fn running_pair(rnicd: &Rnicd) -> (Pingpong, Pingpong) {
    let server = Pingpong::start(&rnicd.socket("vf0"), &["--listen", "0"]);
    let port = server.wait_line("listening on port ");
    let target = format!("127.0.0.1:{}", port.trim());
    let client = Pingpong::start(&rnicd.socket("vf1"), &["--connect", &target]);
    server.wait_line("remote: ");
    client.wait_line("remote: ");
    // Into the iterations.
    std::thread::sleep(Duration::from_millis(300));
    (server, client)
}

/// Checks that a tool failed (status 1) within [`NOTICE`] saying `what`.
#[track_caller]
fn failed_saying(name: &str, (out, took): (Output, Duration), what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
    assert!(took < NOTICE, "{name} took {took:?} to notice: {stderr}");
    assert!(
        stderr.contains(what),
        "{name} did not say {what:?}: {stderr}"
    );
}

#[test]
fn pingpongs_end_at_once_when_rnicd_is_stopped() {
    let mut rnicd = Rnicd::start(2, &[]);
    let (mut server, mut client) = running_pair(&rnicd);
    rnicd.stop_with(libc::SIGTERM);
    let gone = "rnicd closed the socket";
    failed_saying("the server", server.finish(NOTICE * 4), gone);
    failed_saying("the client", client.finish(NOTICE * 4), gone);
}

#[test]
fn a_pingpong_ends_at_once_when_its_vf_is_reset() {
    let rnicd = Rnicd::start(2, &[]);
    let (mut server, _client) = running_pair(&rnicd);
    rnicd.admin(&["reset-vf", "vf0"]);
    failed_saying(
        "the ping-pong on the reset VF",
        server.finish(NOTICE * 4),
        "was reset by someone else",
    );
}

#[test]
fn rnic_admin_says_the_socket_is_held_and_waits_for_it_with_wait() {
    let rnicd = Rnicd::start(1, &[]);
    let pf = rnicd.socket("pf");
    let holder = VfioUserTransport::connect(&pf).expect("the first client");
    let admin = |extra: &[&str]| {
        Command::new(bin("rnic-admin"))
            .arg("--vfio-user")
            .arg(&pf)
            .args(extra)
            .arg("vfs")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rnic-admin")
    };

    let start = Instant::now();
    let out = finish_within(admin(&[]), Duration::from_secs(20));
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
    assert!(
        stderr.contains(&format!("{} is held by another client", pf.display()))
            && stderr.contains("--wait SECS"),
        "{stderr}"
    );

    // With --wait, it gets the socket once the holder leaves.
    let waiting = admin(&["--wait", "10"]);
    std::thread::sleep(Duration::from_millis(1500));
    drop(holder);
    let out = finish_within(waiting, Duration::from_secs(20));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("vf0"));
}

#[test]
fn a_held_socket_is_an_error_of_its_own_for_the_library() {
    let rnicd = Rnicd::start(0, &[]);
    let pf = rnicd.socket("pf");
    let _holder = VfioUserTransport::connect(&pf).expect("the first client");
    let options = VfioUserOptions {
        wait: Duration::from_millis(200),
        ..VfioUserOptions::default()
    };
    let start = Instant::now();
    let e = VfioUserTransport::connect_with(&pf, &options).expect_err("held");
    assert!(matches!(e, Error::Held { .. }), "{e}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn requests_fail_at_once_after_rnicd_is_killed() {
    let mut rnicd = Rnicd::start(1, &[]);
    let t = VfioUserTransport::connect(&rnicd.socket("vf0")).expect("connect");
    let ctx = Context::new(Device::open(Box::new(t)).expect("open")).expect("context");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(16).expect("cq");
    ctx.device().nop().expect("nop");
    rnicd.stop_with(libc::SIGKILL);

    // The watcher notices the hang-up by itself, with no request in flight.
    let start = Instant::now();
    while ctx.check_alive().is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the transport did not notice that rnicd died"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let gone = |e: &Error| {
        matches!(e, Error::DeviceGone(_)) && e.to_string().contains("rnicd closed the socket")
    };
    let t0 = Instant::now();
    let e = ctx.device().nop().expect_err("a command to a dead rnicd");
    assert!(gone(&e), "{e}");
    let e = ctx
        .device()
        .transport()
        .reg_read32(rnic_abi::regs::DEVICE_STATUS)
        .expect_err("a register read of a dead rnicd");
    assert!(gone(&e), "{e}");
    let e = ctx
        .device()
        .transport()
        .check_alive()
        .expect_err("check_alive");
    assert!(gone(&e), "{e}");
    // Waits end at once too, with or without interrupts.
    cq.req_notify(false);
    let e = ctx
        .wait_cq_event(&cq, Duration::from_secs(10))
        .expect_err("a wait on a dead rnicd");
    assert!(gone(&e), "{e}");
    // And teardown does not wait for the device either.
    drop((cq, pd, ctx));
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "requests, waits and teardown took {:?}",
        t0.elapsed()
    );
}
