//! rnicd as a daemon (docs/hardware-interface.md §1.1): it says when it is ready
//! (`--ready-fd`, systemd's `NOTIFY_SOCKET`), logs its counters on SIGUSR1 without
//! stopping, reopens its capture on SIGHUP (log rotation), and names itself in `-V` and
//! `-h` as a daemon should.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rnic_driver::verbs::{WcStatus, WrOpcode};
use rnic_tests::verbs_pair::{pair, poll_n, signaled, PairOptions, Side};
use rnic_tests::wire::pcap_frames;
use rnic_tests::{bin, listening, ReadyPipe, Rnicd};

/// The sockets of an rnicd with `vfs` VFs in `dir`.
fn sockets(dir: &Path, vfs: u16) -> Vec<std::path::PathBuf> {
    std::iter::once("pf".to_string())
        .chain((0..vfs).map(|v| format!("vf{v}")))
        .map(|n| dir.join(format!("{n}.sock")))
        .collect()
}

/// `rnicd --socket-dir DIR --vfs N`, logging to `DIR/../rnicd.log`.
fn rnicd_command(dir: &Path, vfs: u16) -> Command {
    let mut c = Command::new(bin("rnicd"));
    c.arg("--socket-dir")
        .arg(dir)
        .arg("--vfs")
        .arg(vfs.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Sends `signal` to `child` and waits for it to exit.
fn stop(child: &mut std::process::Child, signal: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().expect("wait");
    assert!(status.success(), "rnicd exited with {status}");
}

#[test]
fn ready_fd_gets_its_line_once_every_socket_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socks = dir.path().join("sock");
    let mut command = rnicd_command(&socks, 3);
    let ready = ReadyPipe::give(&mut command);
    let mut child = command.spawn().expect("spawn rnicd");
    let line = ready.wait(Duration::from_secs(10)).expect("ready line");
    assert_eq!(line, "ready\n");
    // The line came after the sockets listened, not merely after they were bound.
    for s in sockets(&socks, 3) {
        assert!(listening(&s), "{} does not listen", s.display());
    }
    stop(&mut child, libc::SIGTERM);
}

#[test]
fn ready_fd_ends_without_a_line_when_rnicd_cannot_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The socket directory is a file: rnicd fails before it listens.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let mut command = rnicd_command(&file, 0);
    let ready = ReadyPipe::give(&mut command);
    let mut child = command.spawn().expect("spawn rnicd");
    let err = ready
        .wait(Duration::from_secs(10))
        .expect_err("no ready line");
    assert!(err.contains("end of file"), "{err}");
    assert!(!child.wait().unwrap().success());
}

#[test]
fn a_closed_ready_fd_is_refused_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = rnicd_command(&dir.path().join("sock"), 0)
        .args(["--ready-fd", "57"])
        .stderr(Stdio::piped())
        .output()
        .expect("run rnicd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ready-fd 57"), "{err}");
}

/// rnicd notified through `NOTIFY_SOCKET=value`, received on `socket`: READY=1 with its
/// pid once its sockets listen, STOPPING=1 when it stops.
fn notify_through(socket: &UnixDatagram, value: &str) {
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let dir = tempfile::tempdir().expect("tempdir");
    let socks = dir.path().join("sock");
    let mut child = rnicd_command(&socks, 2)
        .env("NOTIFY_SOCKET", value)
        .spawn()
        .expect("spawn rnicd");
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("READY=1 within 10 s");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    let lines: Vec<&str> = msg.lines().collect();
    assert!(lines.contains(&"READY=1"), "{msg:?}");
    assert!(
        lines.contains(&format!("MAINPID={}", child.id()).as_str()),
        "{msg:?}"
    );
    assert!(msg.contains("STATUS="), "{msg:?}");
    for s in sockets(&socks, 2) {
        assert!(listening(&s), "{} does not listen at READY=1", s.display());
    }
    stop(&mut child, libc::SIGTERM);
    let n = socket.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(&buf[..n], b"STOPPING=1");
}

#[test]
fn notify_socket_gets_ready_at_a_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).expect("bind");
    notify_through(&socket, path.to_str().unwrap());
}

#[test]
fn notify_socket_gets_ready_at_an_abstract_name() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("rnic-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&addr).expect("bind");
    notify_through(&socket, &format!("@{name}"));
}

/// An RDMA WRITE of `len` bytes of `fill` from `a` to `b`, completed.
fn write(a: &Side, b: &Side, len: usize, fill: u8, id: u64) {
    a.mr.write(0, &vec![fill; len]);
    a.qp.post_send(&signaled(
        id,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(4096),
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(0, len)],
    ))
    .expect("post");
    let wc = poll_n(&a.cq, 1, Duration::from_secs(10));
    assert_eq!(wc.len(), 1, "no completion");
    assert_eq!(wc[0].status, Ok(WcStatus::Success));
}

/// Whether any frame of `frames` carries 64 bytes of `fill`.
fn carries(frames: &[Vec<u8>], fill: u8) -> bool {
    frames
        .iter()
        .any(|f| f.windows(64).any(|w| w.iter().all(|&b| b == fill)))
}

#[test]
fn sighup_continues_the_capture_in_a_new_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("cap.pcap");
    let rotated = dir.path().join("cap.pcap.1");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    let o = PairOptions::default();
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    write(&a, &b, 300, 0xA5, 1);
    // What logrotate does: move the file away, then signal.
    std::fs::rename(&pcap, &rotated).unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rnicd.pid() as i32, libc::SIGHUP) };
    rnicd.wait_for_log("SIGHUP: capture reopened", Duration::from_secs(10));
    write(&a, &b, 300, 0x5A, 2);
    drop((a, b));
    let status = rnicd.stop_with(libc::SIGTERM);
    assert!(status.success());
    let old = pcap_frames(&std::fs::read(&rotated).expect("old capture"));
    let new = pcap_frames(&std::fs::read(&pcap).expect("new capture"));
    assert!(carries(&old, 0xA5), "the first WRITE is in the old file");
    assert!(
        !carries(&old, 0x5A),
        "the second WRITE is not in the old file"
    );
    assert!(carries(&new, 0x5A), "the second WRITE is in the new file");
    assert!(
        !carries(&new, 0xA5),
        "the first WRITE is not in the new file"
    );
    // Each file is a whole capture of its own, its ACKs included.
    assert!(
        old.len() >= 2 && new.len() >= 2,
        "{} {}",
        old.len(),
        new.len()
    );
}

#[test]
fn sighup_without_a_capture_changes_nothing() {
    let rnicd = Rnicd::start(0, &[]);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rnicd.pid() as i32, libc::SIGHUP) };
    rnicd.wait_for_log("SIGHUP: no capture", Duration::from_secs(10));
}

#[test]
fn sigusr1_logs_the_counters_and_rnicd_serves_on() {
    // Faults that drop frames, so that drop counters and fault counters have something.
    let mut rnicd = Rnicd::start(2, &["--net-faults", "corrupt=0.2,seed=3"]);
    let o = PairOptions::default();
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    for i in 0..20 {
        write(&a, &b, 3000, 0x11, i);
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rnicd.pid() as i32, libc::SIGUSR1) };
    rnicd.wait_for_log("SIGUSR1: the counters so far", Duration::from_secs(10));
    // The last of the lines it logs.
    rnicd.wait_for_log("vf1: since start:", Duration::from_secs(10));
    let log = rnicd.log();
    let dump = &log[log.find("SIGUSR1").unwrap()..];
    assert!(dump.contains("network faults:"), "{dump}");
    assert!(dump.contains("corrupted"), "{dump}");
    for f in ["pf", "vf0", "vf1"] {
        assert!(dump.contains(&format!("{f}: tx ")), "{dump}");
        assert!(dump.contains(&format!("{f}: drops ")), "{dump}");
    }
    // Corrupted frames were dropped by the receiver's ICRC check, by reason.
    let vf1_tx = rnic_tests::logged_count(dump, "vf1: tx ", "tx");
    let vf0_tx = rnic_tests::logged_count(dump, "vf0: tx ", "tx");
    assert!(vf0_tx >= 20 && vf1_tx > 0, "{dump}");
    // Nothing stopped: the QPs still work, and rnicd runs on.
    write(&a, &b, 100, 0x22, 100);
    assert!(rnicd.alive());
    assert!(!rnicd.log().contains("removing the sockets"));
}

#[test]
fn version_and_help_name_rnicd() {
    let v = Command::new(bin("rnicd")).arg("-V").output().unwrap();
    assert!(v.status.success());
    assert_eq!(
        String::from_utf8_lossy(&v.stdout),
        format!("rnicd {}\n", env!("CARGO_PKG_VERSION"))
    );
    let h = Command::new(bin("rnicd")).arg("-h").output().unwrap();
    assert!(h.status.success());
    let h = String::from_utf8_lossy(&h.stdout);
    // The summary (also the man page's NAME line), then the usage under rnicd's name.
    assert!(h.starts_with("The emulated RDMA NIC"), "{h}");
    assert!(h.contains("Usage: rnicd [OPTIONS]"), "{h}");
    assert!(!h.contains("Two kinds"), "{h}");
    // Each option's short help is a complete sentence, not a lead-in to a list.
    for line in h.lines().filter(|l| l.starts_with("          ")) {
        let line = line.trim_end();
        assert!(!line.ends_with(':'), "dangling short help: {line}");
    }
    assert!(h.contains("--ready-fd <N>"), "{h}");
    let long = Command::new(bin("rnicd")).arg("--help").output().unwrap();
    let long = String::from_utf8_lossy(&long.stdout);
    for word in [
        "SIGUSR1",
        "SIGHUP",
        "NOTIFY_SOCKET",
        "udp:ADDR[:PORT] — RoCEv2",
    ] {
        assert!(long.contains(word), "--help says nothing of {word}");
    }
}
