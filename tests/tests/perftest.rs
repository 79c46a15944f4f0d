//! `rnic-perf --perftest`: against itself, and against a perftest peer written here from
//! perftest 6.24's sources (perftest_communication.c, write_bw.c, read_bw.c,
//! perftest_resources.c): its TCP bytes, each read required whole as perftest's `read`
//! does, and its RC traffic on its own verbs objects. Two functions of one rnicd (the PF
//! and VF0). The real interop test against Soft-RoCE's ib_write_bw / ib_read_bw runs in a
//! VM (tests/tests/vm_rxe.rs).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rnic_driver::verbs::{self, mtu, QpCaps, SendWr, WrOpcode};
use rnic_tests::verbs_pair::{self, PairOptions};
use rnic_tests::{bin, finish_within, free_port, Rnicd};
use rnic_tools::perf::pattern;

const ITERS: u64 = 50;

/// Starts `rnic-perf --perftest TEST ARGS` on function `function`.
fn rnic_perf(rnicd: &Rnicd, function: &str, test: &str, args: &[String]) -> Child {
    Command::new(bin("rnic-perf"))
        .args(["--perftest", test, "--vfio-user"])
        .arg(rnicd.socket(function))
        .args(["--time-limit", "30"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rnic-perf")
}

/// Waits for `child`; kills it after 45 s.
fn finish(child: Child) -> Output {
    finish_within(child, Duration::from_secs(45))
}

/// A successful run's standard output.
fn stdout_of(name: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The line that starts with `prefix`.
fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
}

/// The result row of perftest's table: ` SIZE ITERS PEAK AVG RATE`.
fn result_row(text: &str, size: usize, iters: u64) -> Vec<f64> {
    let row = line(text, &format!(" {size:<7}    {iters:<10}"));
    let v: Vec<f64> = row
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert_eq!(v.len(), 5, "{row:?}");
    v
}

#[test]
fn two_rnic_perfs_in_perftest_mode() {
    let rnicd = Rnicd::start(1, &[]);
    for test in ["write_bw", "read_bw"] {
        // Several slots per page, a few packets, and perftest's default size.
        for (size, mtu) in [(100usize, 1024u32), (5000, 1024), (65536, 4096)] {
            let port = free_port().to_string();
            let common = |role: &[&str]| -> Vec<String> {
                let mut v: Vec<String> = role.iter().map(|s| s.to_string()).collect();
                v.extend(
                    [
                        "-s",
                        &size.to_string(),
                        "-n",
                        &ITERS.to_string(),
                        "-m",
                        &mtu.to_string(),
                    ]
                    .map(String::from),
                );
                v
            };
            let server = rnic_perf(&rnicd, "pf", test, &common(&["--listen", &port]));
            let target = format!("127.0.0.1:{port}");
            let client = rnic_perf(&rnicd, "vf0", test, &common(&["--connect", &target]));
            let what = format!("{test}, {size} bytes, MTU {mtu}");
            let c = stdout_of(&format!("client ({what})"), &finish(client));
            let s = stdout_of(&format!("server ({what})"), &finish(server));
            // Each side's remote address is the other's local one.
            assert_eq!(
                line(&c, " remote address:")[" remote".len()..],
                line(&s, " local address:")[" local".len()..],
                "{what}"
            );
            assert_eq!(
                line(&s, " remote address:")[" remote".len()..],
                line(&c, " local address:")[" local".len()..],
                "{what}"
            );
            assert!(line(&c, " GID: ").contains("255:255:10:82:00:"), "{c}");
            // The server prints the client's figures, as perftest's server does.
            let (cr, sr) = (result_row(&c, size, ITERS), result_row(&s, size, ITERS));
            assert!(cr[3] > 0.0 && cr[4] > 0.0, "{what}: {cr:?}");
            for (a, b) in cr.iter().zip(&sr) {
                assert!(
                    (a - b).abs() <= 0.01 * a.max(1e-6),
                    "{what}: {cr:?} vs {sr:?}"
                );
            }
            // The side that received the data verified it byte for byte.
            let (receiver, source) = if test == "write_bw" {
                (&s, &c)
            } else {
                (&c, &s)
            };
            assert!(
                line(receiver, " data check: ").contains("exact"),
                "{receiver}"
            );
            let expect = if test == "read_bw" {
                "source intact"
            } else {
                "completed"
            };
            assert!(line(source, " data check: ").contains(expect), "{source}");
        }
    }
}

/// What the perftest written here runs.
#[derive(Clone, Copy, Debug)]
struct Perftest {
    read: bool,
    size: usize,
    iters: u64,
    /// The client reports in Gbit/s (`--report_gbits`).
    gbits: bool,
}

/// What it saw: the rnic side's PSN and the report it received.
#[derive(Debug)]
struct Seen {
    report: [[u8; 8]; 5],
}

/// One `read` that must return `n` bytes, as perftest's `ethernet_read_data`.
fn read_whole(s: &mut TcpStream, n: usize, what: &str) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; n];
    let got = s.read(&mut buf).map_err(|e| format!("{what}: {e}"))?;
    if got != n {
        return Err(format!("{what}: read {got} bytes, not {n}"));
    }
    Ok(buf)
}

/// ctx_xchg_data: the client writes then reads; the server reads then writes.
fn xchg(s: &mut TcpStream, client: bool, mine: &[u8], what: &str) -> Result<Vec<u8>, String> {
    if client {
        s.write_all(mine).map_err(|e| e.to_string())?;
        read_whole(s, mine.len(), what)
    } else {
        let theirs = read_whole(s, mine.len(), what)?;
        s.write_all(mine).map_err(|e| e.to_string())?;
        Ok(theirs)
    }
}

/// The peer's KEY_PRINT_FMT_GID fields: lid, out_reads, qpn, psn, rkey, vaddr, gid.
type Key = (u32, u32, u32, u32, u32, u64, [u8; 16]);

fn parse_key(m: &[u8]) -> Result<Key, String> {
    let text = std::str::from_utf8(m).map_err(|_| "not text".to_string())?;
    let text = text.split('\0').next().unwrap_or("");
    let f: Vec<&str> = text.split(':').collect();
    if f.len() != 24 {
        return Err(format!("Couldn't parse line <{text}>"));
    }
    let h = |s: &str| u64::from_str_radix(s, 16).map_err(|e| format!("{s:?}: {e}"));
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = h(f[6 + i])? as u8;
    }
    Ok((
        h(f[0])? as u32,
        h(f[1])? as u32,
        h(f[2])? as u32,
        h(f[3])? as u32,
        h(f[4])? as u32,
        h(f[5])?,
        gid,
    ))
}

/// exchange_versions, check_sys_data and check_mtu (IBV_MTU_1024 here); returns the
/// agreed MTU code.
fn prelude(s: &mut TcpStream, client: bool) -> Result<u8, String> {
    // exchange_versions: char version[16] from strncpy(.., "6.24", 16).
    let mut version = b"6.24".to_vec();
    version.resize(16, 0);
    let theirs = xchg(s, client, &version, "version")?;
    let text: String = theirs
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    if text.parse::<f64>().unwrap_or(0.0) < 5.70 {
        return Err(
            "Current implementation is not compatible with versions older than 5.70".into(),
        );
    }
    // check_sys_data: hton_int(cycle_buffer), hton_int(cache_line_size).
    let cycle = xchg(s, client, &4096i32.to_be_bytes(), "page size")?;
    let cache = xchg(s, client, &64i32.to_be_bytes(), "cache line")?;
    if cycle != 4096i32.to_be_bytes() || cache != 64i32.to_be_bytes() {
        return Err(format!("sys data {cycle:?} {cache:?}"));
    }
    // check_mtu: sprintf(cur, "%d", IBV_MTU_1024), 2 bytes of it.
    let rem_mtu = xchg(s, client, b"3\0", "mtu")?;
    match rem_mtu[0] {
        b'1'..=b'5' if rem_mtu[1] == 0 => Ok((rem_mtu[0] - b'0').min(mtu::MTU_1024)),
        _ => Err(format!("bad MTU message {rem_mtu:?}")),
    }
}

/// `sprintf(msg, KEY_PRINT_FMT_GID, ...)` into `char msg[108]`.
fn key_msg(out_reads: u32, qpn: u32, psn: u32, rkey: u32, vaddr: u64, gid: [u8; 16]) -> Vec<u8> {
    let mut key = format!(
        "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
        0, out_reads, qpn, psn, rkey, vaddr
    );
    for b in gid {
        key += &format!("{b:02x}:");
    }
    key += &format!("{:08x}:", 0);
    let mut key = key.into_bytes();
    assert_eq!(key.len(), 107);
    key.push(0);
    key
}

/// perftest 6.24's ib_write_bw / ib_read_bw, one RC QP, on function `socket`: the client
/// if `connect_to` is given, else the server on `listener`.
fn perftest(
    socket: &Path,
    p: Perftest,
    listener: Option<TcpListener>,
    connect_to: Option<u16>,
) -> Result<Seen, String> {
    let client = connect_to.is_some();
    // BUFF_SIZE(size, cycle_buffer), twice: the local half, then the half the peer uses.
    let half = p.size.max(4096);
    let side = verbs_pair::side(
        socket,
        &PairOptions {
            buf_len: 2 * half.div_ceil(4096) * 4096,
            access: verbs::ACCESS_LOCAL_WRITE
                | verbs::ACCESS_REMOTE_WRITE
                | verbs::ACCESS_REMOTE_READ,
            caps: QpCaps {
                max_send_wr: 128,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..PairOptions::default()
        },
    );
    // "Initialize buffer with random numbers".
    let noise: Vec<u8> = (0..2 * half)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_be_bytes()[0])
        .collect();
    side.mr.write(0, &noise);
    let mut s = match connect_to {
        Some(port) => connect_retrying(port),
        None => {
            listener
                .expect("a listener")
                .accept()
                .map_err(|e| e.to_string())?
                .0
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mtu_code = prelude(&mut s, client)?;
    let psn = 0x5a3c1f;
    let out_reads = if p.read { 16 } else { 1 };
    let vaddr = side.mr.addr(half);
    let key = key_msg(
        out_reads,
        side.qp.qp_num(),
        psn,
        side.mr.rkey(),
        vaddr,
        side.gid,
    );
    let (_, rem_reads, rqpn, rpsn, rkey, rvaddr, rgid) =
        parse_key(&xchg(&mut s, client, &key, "keys")?)?;
    // ctx_connect: RTR always, RTS on the client only.
    let (mut a, m) = verbs::rtr_attr(rqpn, rgid, rpsn, mtu_code, out_reads as u8, 12);
    a.hop_limit = 0xff;
    side.qp
        .modify(&a, m)
        .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
    if client {
        let (a, m) = verbs::rts_attr(psn, 14, 7, 7, rem_reads.min(16) as u8);
        side.qp
            .modify(&a, m)
            .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
    }
    for what in ["keys again", "additional handshake"] {
        parse_key(&xchg(&mut s, client, &key, what)?)?;
    }
    let step = if p.size > 64 {
        p.size.next_multiple_of(64)
    } else {
        64
    };
    let slots = if p.size <= 2048 {
        (4096 / step) as u64
    } else {
        1
    };
    let offset = |i: u64| {
        if p.size <= 2048 {
            (i % slots) as usize * step
        } else {
            0
        }
    };
    let used = slots.min(p.iters);
    let rnic_pattern = pattern(p.size.max(4096), rpsn.into());
    let mut report = [[0u8; 8]; 5];
    if client {
        let (mut posted, mut done) = (0u64, 0u64);
        let deadline = Instant::now() + Duration::from_secs(20);
        while done < p.iters {
            while posted < p.iters && posted - done < 128 {
                let remote_addr = rvaddr + offset(posted) as u64;
                let opcode = if p.read {
                    WrOpcode::RdmaRead { remote_addr, rkey }
                } else {
                    WrOpcode::RdmaWrite { remote_addr, rkey }
                };
                side.qp
                    .post_send(&SendWr {
                        wr_id: posted,
                        opcode,
                        sges: vec![side.mr.sge(offset(posted), p.size)],
                        signaled: (posted + 1) % 100 == 0 || posted + 1 == p.iters,
                        ..SendWr::default()
                    })
                    .map_err(|e| e.to_string())?;
                posted += 1;
            }
            for wc in side.cq.poll(16) {
                if !wc.is_success() {
                    return Err(format!("Completion with error: {}", wc.status_str()));
                }
                done = done.max(wc.wr_id + 1);
            }
            if Instant::now() > deadline {
                return Err(format!("stuck at {done} of {}", p.iters));
            }
        }
        if p.read {
            for k in 0..used {
                let off = offset(k);
                let got = verbs_pair::read_mr(&side.mr, off, p.size);
                if got[..] != rnic_pattern[off..off + p.size] {
                    return Err(format!(
                        "READ data at offset {off} is not rnic-perf's pattern"
                    ));
                }
            }
        }
        parse_key(&xchg(&mut s, client, &key, "end of test")?)?;
        // print_report_bw divides bytes by 2^20 for MiB/s, by 125e6 for Gbit/s.
        let rate = 0.123456f64;
        let (peak, avg) = if p.gbits {
            let gbits = rate * 1e6 * p.size as f64 / 125e6;
            (gbits * 1.1, gbits)
        } else {
            (111.11, 99.5)
        };
        let mine = [
            (p.size as u64).to_be_bytes(),
            p.iters.to_be_bytes(),
            peak.to_bits().to_be_bytes(),
            avg.to_bits().to_be_bytes(),
            rate.to_bits().to_be_bytes(),
        ];
        for (i, piece) in mine.iter().enumerate() {
            report[i].copy_from_slice(&xchg(&mut s, client, piece, "report")?);
        }
    } else {
        // The server waits for the client to finish.
        parse_key(&xchg(&mut s, client, &key, "end of test")?)?;
        for r in report.iter_mut() {
            r.copy_from_slice(&xchg(&mut s, client, &[0xa5; 8], "report")?);
        }
        if !p.read {
            for k in 0..used {
                let off = offset(k);
                let got = verbs_pair::read_mr(&side.mr, half + off, p.size);
                if got[..] != rnic_pattern[off..off + p.size] {
                    return Err(format!(
                        "WRITE data at offset {off} is not rnic-perf's pattern"
                    ));
                }
            }
        }
    }
    // ctx_close_connection.
    parse_key(&xchg(&mut s, client, &key, "close")?)?;
    Ok(Seen { report })
}

#[test]
fn rnic_perf_against_perftest_written_here_in_both_roles() {
    let rnicd = Rnicd::start(1, &[]);
    for (test, read) in [("write_bw", false), ("read_bw", true)] {
        for size in [100usize, 5000] {
            let p = Perftest {
                read,
                size,
                iters: ITERS,
                gbits: false,
            };
            let args = |role: &[String]| -> Vec<String> {
                let mut v = role.to_vec();
                v.extend([
                    "-s".into(),
                    size.to_string(),
                    "-n".into(),
                    ITERS.to_string(),
                ]);
                v
            };
            // rnic-perf serves; perftest (here, on VF0) is the client.
            let port = free_port();
            let server = rnic_perf(
                &rnicd,
                "pf",
                test,
                &args(&["--listen".into(), port.to_string()]),
            );
            let seen = perftest(&rnicd.socket("vf0"), p, None, Some(port))
                .unwrap_or_else(|e| panic!("perftest client, {test} {size}: {e}"));
            let out = stdout_of(&format!("rnic-perf server, {test} {size}"), &finish(server));
            assert_eq!(
                seen.report, [[0u8; 8]; 5],
                "the passive server reports zeros"
            );
            let row = result_row(&out, size, ITERS);
            assert_eq!(
                &row[2..],
                &[111.11, 99.5, 0.123456],
                "the client's figures: {out}"
            );
            let check = line(&out, " data check: ");
            let want = if read { "source intact" } else { "overwritten" };
            assert!(check.contains(want), "{out}");
            assert!(
                line(&out, " remote address:").contains("PSN 0x5a3c1f"),
                "{out}"
            );
            if read {
                assert!(line(&out, " local address:").contains(" OUT 0x"), "{out}");
            }

            // perftest (here, on the PF) serves; rnic-perf is the client.
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let port = listener.local_addr().expect("addr").port();
            let client = rnic_perf(
                &rnicd,
                "vf0",
                test,
                &args(&["--connect".into(), format!("127.0.0.1:{port}")]),
            );
            let seen = perftest(&rnicd.socket("pf"), p, Some(listener), None)
                .unwrap_or_else(|e| panic!("perftest server, {test} {size}: {e}"));
            let out = stdout_of(&format!("rnic-perf client, {test} {size}"), &finish(client));
            assert_eq!(u64::from_be_bytes(seen.report[0]), size as u64);
            assert_eq!(u64::from_be_bytes(seen.report[1]), ITERS);
            let avg = f64::from_bits(u64::from_be_bytes(seen.report[3]));
            let row = result_row(&out, size, ITERS);
            assert!((row[3] - avg).abs() <= 0.01, "{out} vs {avg}");
            let want = if read { "overwritten" } else { "completed" };
            assert!(line(&out, " data check: ").contains(want), "{out}");
        }
    }
}

#[test]
fn a_peer_that_is_not_perftest_is_refused_clearly() {
    let rnicd = Rnicd::start(0, &[]);
    let port = free_port();
    let server = rnic_perf(
        &rnicd,
        "pf",
        "write_bw",
        &["--listen".into(), port.to_string()],
    );
    let mut s = connect_retrying(port);
    // ibv_rc_pingpong's first bytes: not a version.
    s.write_all(b"0000:000011:abcdef:").expect("write");
    drop(s);
    let out = finish(server);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("version") && err.contains("perftest"), "{err}");
}

/// Connects to 127.0.0.1:`port`, retrying for 15 s while the server starts.
fn connect_retrying(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("connect to port {port}: {e}"),
        }
    }
}

/// A GID of the same type as rnic's (IPv4-mapped), for a peer that sends no traffic.
const FAKE_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 99];

/// Waits for a run that must fail within `secs` of `since`; returns its standard error.
fn fails_within(name: &str, child: Child, since: Instant, secs: u64) -> String {
    let out = finish(child);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{name} succeeded:\n{err}");
    assert!(
        since.elapsed() < Duration::from_secs(secs),
        "{name} took {:?} to fail:\n{err}",
        since.elapsed()
    );
    err
}

/// rnic-perf --perftest write_bw serving on the PF, and a connection to it.
fn rnic_perf_serving(rnicd: &Rnicd, args: &[String]) -> (Child, TcpStream) {
    let port = free_port();
    let mut all = vec!["--listen".to_string(), port.to_string()];
    all.extend_from_slice(args);
    let server = rnic_perf(rnicd, "pf", "write_bw", &all);
    (server, connect_retrying(port))
}

/// rnic-perf --perftest write_bw connecting from `function`, and its accepted connection.
fn rnic_perf_connecting(rnicd: &Rnicd, function: &str, args: &[String]) -> (Child, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let mut all = vec!["--connect".to_string(), format!("127.0.0.1:{port}")];
    all.extend_from_slice(args);
    let client = rnic_perf(rnicd, function, "write_bw", &all);
    (client, listener.accept().expect("accept").0)
}

/// ib_send_bw's exchange up to its test, as send_bw.c makes it: the prelude, one address
/// exchange, RTR (and RTS on the client), then three handshakes where write_bw makes two.
fn send_bw_until_the_test(
    side: &verbs_pair::Side,
    s: &mut TcpStream,
    client: bool,
    psn: u32,
) -> Result<(), String> {
    let mtu_code = prelude(s, client)?;
    let key = key_msg(
        1,
        side.qp.qp_num(),
        psn,
        side.mr.rkey(),
        side.mr.addr(0),
        side.gid,
    );
    let (_, _, rqpn, rpsn, _, _, rgid) = parse_key(&xchg(s, client, &key, "keys")?)?;
    let (mut a, m) = verbs::rtr_attr(rqpn, rgid, rpsn, mtu_code, 1, 12);
    a.hop_limit = 0xff;
    side.qp.modify(&a, m).map_err(|e| format!("RTR: {e}"))?;
    if client {
        let (a, m) = verbs::rts_attr(psn, 14, 7, 7, 1);
        side.qp.modify(&a, m).map_err(|e| format!("RTS: {e}"))?;
    }
    for what in ["after connecting", "keys to print", "before the test"] {
        xchg(s, client, &key, what)?;
    }
    Ok(())
}

#[test]
fn a_peer_with_two_qps_is_named_at_once() {
    let rnicd = Rnicd::start(0, &[]);
    // perftest's `-q 2` sends one address message per QP, one exchange each.
    let keys = [0x21u32, 0x22].map(|qpn| key_msg(1, qpn, 0x1234, 0x100, 0x1000, FAKE_GID));

    // rnic-perf serves; `ib_write_bw -q 2` connects.
    let (server, mut s) = rnic_perf_serving(&rnicd, &[]);
    let start = Instant::now();
    prelude(&mut s, true).expect("the prelude");
    xchg(&mut s, true, &keys[0], "QP 0").expect("QP 0");
    // The server takes QP 1's address for its second exchange, and stops there.
    let _ = xchg(&mut s, true, &keys[1], "QP 1");
    let err = fails_within("rnic-perf server", server, start, 10);
    assert!(err.contains("QPN 0x22 after that of QPN 0x21"), "{err}");
    assert!(err.contains("run the peer without -q"), "{err}");

    // `ib_write_bw -q 2` serves; rnic-perf connects.
    let (client, mut s) = rnic_perf_connecting(&rnicd, "pf", &[]);
    let start = Instant::now();
    prelude(&mut s, false).expect("the prelude");
    for (i, key) in keys.iter().enumerate() {
        xchg(&mut s, false, key, "a QP").unwrap_or_else(|e| panic!("QP {i}: {e}"));
    }
    let err = fails_within("rnic-perf client", client, start, 10);
    assert!(err.contains("more than one QP (perftest's -q N)"), "{err}");
}

#[test]
fn a_send_test_against_write_bw_is_named_at_once() {
    let rnicd = Rnicd::start(1, &[]);
    let (server, mut s) = rnic_perf_serving(&rnicd, &[]);
    // ib_send_bw's client on VF0: its exchange, then SENDs.
    let side = verbs_pair::side(&rnicd.socket("vf0"), &PairOptions::default());
    let start = Instant::now();
    send_bw_until_the_test(&side, &mut s, true, 0xabcd).expect("send_bw's exchange");
    for i in 0..4 {
        side.qp
            .post_send(&SendWr {
                wr_id: i,
                opcode: WrOpcode::Send,
                sges: vec![side.mr.sge(0, 64)],
                signaled: true,
                ..SendWr::default()
            })
            .expect("post a SEND");
    }
    let err = fails_within("rnic-perf server", server, start, 10);
    assert!(
        err.contains("the peer sends SENDs (is it ib_send_bw"),
        "{err}"
    );
    assert!(err.contains("run the same test on both sides"), "{err}");
}

#[test]
fn a_send_bw_server_is_named_at_once() {
    let rnicd = Rnicd::start(1, &[]);
    let args = ["-n", &ITERS.to_string(), "-s", "4096"].map(String::from);
    let (client, mut s) = rnic_perf_connecting(&rnicd, "vf0", &args);
    // ib_send_bw's server on the PF: its buffer takes rnic-perf's WRITEs; after its
    // exchange it waits for SENDs and says nothing more.
    let side = verbs_pair::side(
        &rnicd.socket("pf"),
        &PairOptions {
            access: verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_WRITE,
            ..PairOptions::default()
        },
    );
    let start = Instant::now();
    send_bw_until_the_test(&side, &mut s, false, 0x4321).expect("send_bw's exchange");
    let err = fails_within("rnic-perf client", client, start, 12);
    assert!(err.contains("still in a test of its own"), "{err}");
    assert!(
        err.contains("ib_write_bw against rnic-perf --perftest write_bw"),
        "{err}"
    );
}

#[test]
fn a_peer_reporting_gbits_is_named() {
    let rnicd = Rnicd::start(1, &[]);
    let port = free_port();
    let args = [
        "--listen",
        &port.to_string(),
        "-s",
        "5000",
        "-n",
        &ITERS.to_string(),
    ]
    .map(String::from);
    let server = rnic_perf(&rnicd, "pf", "write_bw", &args);
    let p = Perftest {
        read: false,
        size: 5000,
        iters: ITERS,
        gbits: true,
    };
    let start = Instant::now();
    // The peer's closing exchange fails: rnic-perf has stopped at the report.
    let _ = perftest(&rnicd.socket("vf0"), p, None, Some(port));
    let err = fails_within("rnic-perf server", server, start, 15);
    assert!(err.contains("the peer reports in Gbit/s"), "{err}");
    assert!(err.contains("run the peer without --report_gbits"), "{err}");
}
