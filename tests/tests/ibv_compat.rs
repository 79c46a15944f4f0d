//! `rnic-pingpong --ibv-compat` against itself and against an `ibv_rc_pingpong` written
//! here from rdma-core's description (libibverbs/examples/rc_pingpong.c): its TCP bytes
//! and its ping-pong flow, on its own verbs objects, so that nothing rnic-specific in
//! rnic-pingpong's exchange could pass unnoticed. Two functions of one rnicd (the PF and
//! VF0), both roles, messages below and above the path MTU. The real interop test against
//! Soft-RoCE's ibv_rc_pingpong runs in VMs (tests/tests/vm.rs).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rnic_driver::verbs::{self, mtu, QpCaps, RecvWr, SendWr, WrOpcode};
use rnic_tests::verbs_pair::{self, PairOptions};
use rnic_tests::{bin, finish_within, free_port, Rnicd};

const ITERS: u64 = 100;

/// Starts `rnic-pingpong --ibv-compat` on function `function` with `args`.
fn rnic_pingpong(rnicd: &Rnicd, function: &str, args: &[String]) -> Child {
    Command::new(bin("rnic-pingpong"))
        .arg("--ibv-compat")
        .arg("--vfio-user")
        .arg(rnicd.socket(function))
        .args(["--time-limit", "20"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rnic-pingpong")
}

/// Waits for `child`; kills it after 30 s.
fn finish(child: Child) -> Output {
    finish_within(child, Duration::from_secs(30))
}

/// Checks a successful run's output: ibv_rc_pingpong's address lines and figures.
/// Returns (local line, remote line) without their labels.
fn check_output(name: &str, out: &Output, size: usize, iters: u64) -> (String, String) {
    check_output_moving(name, out, 2 * size as u64 * iters, iters)
}

/// [`check_output`] for a run that moves `bytes` in all.
fn check_output_moving(name: &str, out: &Output, bytes: u64, iters: u64) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let find = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
            .unwrap_or_else(|| panic!("{name}: no `{prefix}` line in:\n{stdout}"))
    };
    let local = find("  local address:  ");
    let remote = find("  remote address: ");
    assert!(
        local.starts_with("LID 0x0000, QPN 0x000011, PSN 0x"),
        "{local}"
    );
    assert!(local.contains(", GID ::ffff:"), "{local}");
    let bytes = find(&format!("{bytes} bytes in "));
    assert!(
        bytes.contains(" seconds = ") && bytes.ends_with(" Mbit/sec"),
        "{bytes}"
    );
    let it = find(&format!("{iters} iters in "));
    assert!(it.ends_with(" usec/iter"), "{it}");
    (local, remote)
}

/// Runs `rnic-pingpong --ibv-compat ARGS` as server on `server_fn` and as client on
/// `client_fn`; returns the client's output and the server's.
fn run_pair(rnicd: &Rnicd, server_fn: &str, client_fn: &str, args: &[String]) -> (Output, Output) {
    let port = free_port().to_string();
    let mut sargs = vec!["--listen".to_string(), port.clone()];
    sargs.extend(args.iter().cloned());
    let server = rnic_pingpong(rnicd, server_fn, &sargs);
    let mut cargs = vec!["--connect".to_string(), format!("127.0.0.1:{port}")];
    cargs.extend(args.iter().cloned());
    let client = rnic_pingpong(rnicd, client_fn, &cargs);
    (finish(client), finish(server))
}

#[test]
fn two_rnic_pingpongs_in_ibv_compat_mode_in_both_roles() {
    let rnicd = Rnicd::start(1, &[]);
    for (server_fn, client_fn) in [("pf", "vf0"), ("vf0", "pf")] {
        // Below the MTU, a few packets, many packets at the smallest MTU.
        for (size, mtu) in [(100usize, 1024u32), (5000, 1024), (20_000, 256)] {
            let common = [
                "--size".to_string(),
                size.to_string(),
                "--iters".into(),
                ITERS.to_string(),
                "--mtu".into(),
                mtu.to_string(),
            ];
            let (c, s) = run_pair(&rnicd, server_fn, client_fn, &common);
            let what = format!("{server_fn} serving {client_fn}, {size} bytes, MTU {mtu}");
            let (c_local, c_remote) = check_output(&format!("client ({what})"), &c, size, ITERS);
            let (s_local, s_remote) = check_output(&format!("server ({what})"), &s, size, ITERS);
            assert_eq!(c_remote, s_local, "{what}");
            assert_eq!(s_remote, c_local, "{what}");
        }
    }
}

/// What the `ibv_rc_pingpong` written here runs with.
#[derive(Clone, Copy, Debug)]
struct Ibv {
    size: usize,
    iters: u64,
    rx_depth: u32,
    mtu: u8,
    /// `-c`/`--chk`.
    chk: bool,
    /// How long its loop waits for the counts before it gives up.
    patience: Duration,
}

impl Default for Ibv {
    fn default() -> Self {
        Ibv {
            size: 4096,
            iters: ITERS,
            rx_depth: 500,
            mtu: mtu::MTU_1024,
            chk: true,
            patience: Duration::from_secs(20),
        }
    }
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const MSG: usize = "0000:000000:000000:00000000000000000000000000000000".len() + 1;

/// `ibv_rc_pingpong` as rdma-core writes it, on function `socket`: server (`listener`)
/// or client (`connect_to`). Returns its counts (sends, receives) or its complaint.
fn ibv_rc_pingpong(
    socket: &Path,
    o: Ibv,
    listener: Option<TcpListener>,
    connect_to: Option<u16>,
) -> Result<(u64, u64), String> {
    let page = 4096;
    let side = verbs_pair::side(
        socket,
        &PairOptions {
            buf_len: o.size.div_ceil(page) * page,
            access: verbs::ACCESS_LOCAL_WRITE,
            caps: QpCaps {
                max_send_wr: 1,
                max_recv_wr: o.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..PairOptions::default()
        },
    );
    // memset(ctx->buf, 0x7b, size)
    side.mr.write(0, &vec![0x7b; o.size]);
    let post_recv = |n: u32| {
        for _ in 0..n {
            side.qp
                .post_recv(&RecvWr {
                    wr_id: RECV_WRID,
                    sges: vec![side.mr.sge(0, o.size)],
                })
                .expect("post_recv");
        }
        n
    };
    let mut routs = post_recv(o.rx_depth);
    let psn: u32 = 0x5a3c1f;
    let gid: String = side.gid.iter().map(|b| format!("{b:02x}")).collect();
    let mut msg = format!("{:04x}:{:06x}:{:06x}:{gid}", 0, side.qp.qp_num(), psn).into_bytes();
    msg.push(0);
    assert_eq!(msg.len(), MSG);
    // sscanf(msg, "%x:%x:%x:%s") and wire_gid_to_gid.
    let parse = |m: &[u8]| -> Result<(u32, u32, [u8; 16]), String> {
        let text = std::str::from_utf8(m).map_err(|_| "not text".to_string())?;
        let text = text.split('\0').next().unwrap_or("");
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 4 || f[3].len() != 32 {
            return Err(format!("unexpected message {text:?}"));
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|e| format!("{s:?}: {e}"));
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok((hex(f[1])?, hex(f[2])?, g))
    };
    let connect_qp = |qpn: u32, rpsn: u32, rgid: [u8; 16]| {
        let (mut a, m) = verbs::rtr_attr(qpn, rgid, rpsn, o.mtu, 1, 12);
        a.hop_limit = 1;
        side.qp.modify(&a, m).expect("RTR");
        let (a, m) = verbs::rts_attr(psn, 14, 7, 7, 1);
        side.qp.modify(&a, m).expect("RTS");
    };
    let mut buf = [0u8; MSG];
    let client = connect_to.is_some();
    if let Some(port) = connect_to {
        // ibv_rc_pingpong connects once; the harness waits for the server to listen.
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut s = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(format!("Couldn't connect to port {port}: {e}")),
            }
        };
        s.write_all(&msg).map_err(|e| e.to_string())?;
        // read(sockfd, msg, sizeof msg) != sizeof msg: one read must bring it all.
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n != MSG {
            return Err(format!("client read {n} bytes, not {MSG}"));
        }
        s.write_all(b"done\0").map_err(|e| e.to_string())?;
        let (qpn, rpsn, rgid) = parse(&buf)?;
        connect_qp(qpn, rpsn, rgid);
    } else {
        let listener = listener.expect("a listener");
        let (mut s, _) = listener.accept().map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n != MSG {
            return Err(format!("{n}/{MSG}: Couldn't read remote address"));
        }
        let (qpn, rpsn, rgid) = parse(&buf)?;
        connect_qp(qpn, rpsn, rgid);
        s.write_all(&msg).map_err(|e| e.to_string())?;
        // read(connfd, msg, sizeof msg) != sizeof "done"
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n != 5 || &buf[..5] != b"done\0" {
            return Err(format!(
                "Couldn't send/recv local address: got {:?}",
                &buf[..n]
            ));
        }
    }
    let mut pending = RECV_WRID;
    let send = || {
        side.qp
            .post_send(&SendWr {
                wr_id: SEND_WRID,
                opcode: WrOpcode::Send,
                sges: vec![side.mr.sge(0, o.size)],
                signaled: true,
                ..SendWr::default()
            })
            .expect("post_send")
    };
    if client {
        if o.chk {
            for i in (0..o.size).step_by(page) {
                side.mr.write(i, &[0]);
            }
        }
        send();
        pending |= SEND_WRID;
    }
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let deadline = Instant::now() + o.patience;
    while rcnt < o.iters || scnt < o.iters {
        if Instant::now() > deadline {
            return Err(format!("stuck after {scnt} sends and {rcnt} receives"));
        }
        for wc in side.cq.poll(2) {
            if !wc.is_success() {
                return Err(format!(
                    "Failed status {} for wr_id {}",
                    wc.status_str(),
                    wc.wr_id
                ));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recv(o.rx_depth - routs);
                    }
                    rcnt += 1;
                }
                id => return Err(format!("Completion for unknown wr_id {id}")),
            }
            pending &= !wc.wr_id;
            if scnt < o.iters && pending == 0 {
                send();
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    if !client && o.chk {
        for i in (0..o.size).step_by(page) {
            let b = verbs_pair::read_mr(&side.mr, i, 1)[0];
            if b != 0 {
                return Err(format!("invalid data in page {}", i / page));
            }
        }
    }
    Ok((scnt, rcnt))
}

#[test]
fn an_ibv_rc_pingpong_client_and_server_written_from_rdma_core() {
    let rnicd = Rnicd::start(1, &[]);
    let cases = [
        (Ibv::default(), vec![]),
        (
            Ibv {
                size: 1,
                ..Ibv::default()
            },
            vec![],
        ),
        (
            Ibv {
                size: 9000,
                rx_depth: 3,
                mtu: mtu::MTU_512,
                ..Ibv::default()
            },
            vec!["--mtu", "512"],
        ),
        // Without -c: the client's data is all 0x7b, which rnic-pingpong's check accepts.
        (
            Ibv {
                size: 3000,
                chk: false,
                ..Ibv::default()
            },
            vec![],
        ),
    ];
    for (ibv, extra) in cases {
        let mut args: Vec<String> = vec![
            "--size".into(),
            ibv.size.to_string(),
            "--iters".into(),
            ibv.iters.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));

        // ibv_rc_pingpong serves on the PF; rnic-pingpong connects from VF0.
        let listener = TcpListener::bind("0.0.0.0:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mut cargs = vec!["--connect".to_string(), format!("127.0.0.1:{port}")];
        cargs.extend(args.iter().cloned());
        let client = rnic_pingpong(&rnicd, "vf0", &cargs);
        let served = ibv_rc_pingpong(&rnicd.socket("pf"), ibv, Some(listener), None);
        let out = finish(client);
        assert_eq!(served, Ok((ibv.iters, ibv.iters)), "{ibv:?}: {out:?}");
        check_output(&format!("rnic client {ibv:?}"), &out, ibv.size, ibv.iters);

        // rnic-pingpong serves on VF0; ibv_rc_pingpong connects from the PF.
        let port = free_port();
        let mut sargs = vec!["--listen".to_string(), port.to_string()];
        sargs.extend(args.iter().cloned());
        let server = rnic_pingpong(&rnicd, "vf0", &sargs);
        let called = ibv_rc_pingpong(&rnicd.socket("pf"), ibv, None, Some(port));
        let out = finish(server);
        assert_eq!(called, Ok((ibv.iters, ibv.iters)), "{ibv:?}: {out:?}");
        check_output(&format!("rnic server {ibv:?}"), &out, ibv.size, ibv.iters);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("RNICPP"), "{stdout}");
    }
}

#[test]
fn foreign_peers_and_options_get_clear_errors() {
    let rnicd = Rnicd::start(1, &[]);
    // rnic-pingpong's own format (a newline where ibv_rc_pingpong puts its NUL).
    let port = free_port();
    let server = rnic_pingpong(&rnicd, "vf0", &["--listen".into(), port.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("connect: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    s.write_all(b"0000:000011:000000:00000000000000000000ffff0a520002\n")
        .expect("write");
    let out = finish(server);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no NUL"), "{err}");

    // --rx-depth belongs to --ibv-compat.
    let out = Command::new(bin("rnic-pingpong"))
        .args(["--listen", "--rx-depth", "10"])
        .output()
        .expect("run");
    assert!(!out.status.success());
}

#[test]
fn rdma_write_and_read_extension_between_two_rnic_pingpongs() {
    let rnicd = Rnicd::start(1, &[]);
    for op in ["write", "read"] {
        for (server_fn, client_fn, size) in [("pf", "vf0", 5000usize), ("vf0", "pf", 100)] {
            let common = [
                "--op".to_string(),
                op.into(),
                "--size".into(),
                size.to_string(),
                "--iters".into(),
                ITERS.to_string(),
            ];
            let (c, s) = run_pair(&rnicd, server_fn, client_fn, &common);
            let what = format!("{op}, {server_fn} serving {client_fn}, {size} bytes");
            let bytes = size as u64 * ITERS;
            let (c_local, c_remote) =
                check_output_moving(&format!("client ({what})"), &c, bytes, ITERS);
            let (s_local, s_remote) =
                check_output_moving(&format!("server ({what})"), &s, bytes, ITERS);
            assert_eq!(c_remote, s_local, "{what}");
            assert_eq!(s_remote, c_local, "{what}");
        }
    }
    // A WRITE/READ peer meeting a SEND peer: the server waits for the buffer message,
    // which never comes, and says so.
    let port = free_port().to_string();
    let server = rnic_pingpong(
        &rnicd,
        "pf",
        &[
            "--listen".into(),
            port.clone(),
            "--op".into(),
            "read".into(),
            "--time-limit".into(),
            "3".into(),
        ],
    );
    let client = rnic_pingpong(
        &rnicd,
        "vf0",
        &[
            "--connect".into(),
            format!("127.0.0.1:{port}"),
            "--time-limit".into(),
            "3".into(),
        ],
    );
    let s = finish(server);
    let _ = finish(client);
    assert_eq!(s.status.code(), Some(1));
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(err.contains("buffer message"), "{err}");
}

#[test]
fn a_peer_that_posts_no_receives_is_named_at_once() {
    let rnicd = Rnicd::start(1, &[]);
    // A server with ibv_rc_pingpong's exchange that never posts a receive, as a peer
    // running a WRITE test would be; it gives up after 3 s.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let client = rnic_pingpong(
        &rnicd,
        "vf0",
        &["--connect".into(), format!("127.0.0.1:{port}")],
    );
    let start = Instant::now();
    let peer = std::thread::spawn({
        let socket = rnicd.socket("pf");
        move || {
            let o = Ibv {
                rx_depth: 0,
                patience: Duration::from_secs(3),
                ..Ibv::default()
            };
            ibv_rc_pingpong(&socket, o, Some(listener), None)
        }
    });
    let out = finish(client);
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(3), "it took {took:?}: {err}");
    assert!(err.contains("the peer posted no receives"), "{err}");
    assert!(err.contains("Run ibv_rc_pingpong"), "{err}");
    let seen = peer.join().expect("the peer");
    assert!(seen.is_err_and(|e| e.contains("stuck after 0 sends and 0 receives")));
}
