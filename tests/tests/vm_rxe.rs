//! perftest on Soft-RoCE against rnic-perf: a TCG guest running Debian trixie's rdma-core,
//! perftest 25.01.0 and rdma_rxe on a virtio-net NIC, that NIC on a UDP datagram pair with
//! rnicd's Ethernet port (`--net eth:dgram`), and rnic-perf on the host on rnicd's VF0
//! (10.82.0.2). TCP between the host and the guest goes through a second NIC, QEMU's user
//! network: the guest reaches the host's 127.0.0.1 at 10.0.2.2, and a host port is
//! forwarded to the guest's perftest server.
//!
//! It boots a VM (seconds under TCG), so it is ignored by default:
//! `cargo build --workspace --bins && cargo test -p rnic-tests --test vm_rxe -- --ignored
//! --test-threads=1` (as root, after qemu-scripts/setup.sh; qemu-scripts/boot.sh --rxe
//! builds the guest image on first use; tests/run-all.sh runs it). Every run keeps rnicd's capture of its port
//! (`rnicd-port.pcap` in rnicd's temporary directory, named on failure).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rnic_tests::tshark::{assert_clean_roce_capture, assert_nothing_flagged};
use rnic_tests::vm::{Boot, DgramLink};
use rnic_tests::wire::pcap_records;
use rnic_tests::{bin, finish_within, free_port, Rnicd};

/// Small messages, and one above the path MTU (1024 on rxe over a 1500-byte NIC).
const SIZES: [usize; 2] = [64, 4096];
/// TCG is slow: few iterations.
const ITERS: u64 = 20;

/// One perftest run: the test, the message size and the iterations.
type Run = (&'static str, usize, u64);

/// rnic-perf --perftest on VF0 with `args`, waited for (at most 300 s).
fn rnic_perf(rnicd: &Rnicd, run: Run, args: &[&str]) -> Output {
    rnic_perf_within(rnicd, run, args, 280)
}

/// rnic-perf --perftest on VF0 with `args` and a time limit of `limit` seconds.
fn rnic_perf_within(rnicd: &Rnicd, (test, size, iters): Run, args: &[&str], limit: u64) -> Output {
    let child = Command::new(bin("rnic-perf"))
        .args(["--perftest", test, "--vfio-user"])
        .arg(rnicd.socket("vf0"))
        .args(["-s", &size.to_string(), "-n", &iters.to_string()])
        .args(["--time-limit", &limit.to_string()])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rnic-perf");
    finish_within(child, Duration::from_secs(300))
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The runs of both directions of the first test: small messages and one above the path
/// MTU.
fn small_runs() -> Vec<Run> {
    let mut runs = Vec::new();
    for test in ["write_bw", "read_bw"] {
        for size in SIZES {
            runs.push((test, size, ITERS));
        }
    }
    runs
}

/// The guest's script: perftest clients of `runs` against rnic-perf servers on the host
/// (at `ports`, each retried while the server is not listening yet), then perftest
/// servers of `runs` for rnic-perf clients. Each run ends with a `PERFTEST ...` line.
fn guest_script(runs: &[Run], ports: &[u16]) -> String {
    let mut s = String::from(
        r#"X=$(rxe-gid-index)
client() { # TEST SIZE ITERS PORT
    again=0
    for i in $(seq 120); do
        out=$(ib_$1 -d rxe0 -x $X -s $2 -n $3 -p $4 10.0.2.2 2>&1); rc=$?
        if [ $rc != 0 ] && echo "$out" | grep -q "Couldn't connect"; then sleep 1; continue; fi
        echo "$out"
        # perftest times its report with the TSC, calibrated against the clock, which a
        # busy TCG guest can fail after a good test: the host serves the test again.
        if [ $rc != 0 ] && [ $again -lt 2 ] && echo "$out" | grep -q "Can't produce a report"; then
            again=$((again + 1)); echo "PERFTEST client $1 $2 clock calibration failed: again"; continue
        fi
        echo "PERFTEST client $1 $2 rc=$rc"; return
    done
    echo "PERFTEST client $1 $2 never connected"
}
server() { # TEST SIZE ITERS
    ib_$1 -d rxe0 -x $X -s $2 -n $3 -p 18515 2>&1; echo "PERFTEST server $1 $2 rc=$?"
}
"#,
    );
    for ((test, size, iters), port) in runs.iter().zip(ports) {
        s += &format!("client {test} {size} {iters} {port}\n");
    }
    for (test, size, iters) in runs {
        s += &format!("server {test} {size} {iters}\n");
    }
    s
}

/// Starts the Soft-RoCE guest's boot.sh `cmd` with a second NIC on QEMU's user network
/// (eth1, 10.0.2.15), whose TCP port 18515 the host reaches at 127.0.0.1:`forward`.
fn spawn_with_forward(mut cmd: Command, forward: u16) -> std::process::Child {
    cmd.env("RNIC_BOOT_APPEND", "rnic_eth1_ip=10.0.2.15/24")
        .env(
            "RNIC_BOOT_EXTRA_QEMU_ARGS",
            format!(
                "-netdev user,id=u0,hostfwd=tcp:127.0.0.1:{forward}-10.0.2.15:18515 \
                 -device virtio-net-pci,netdev=u0,romfile="
            ),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run boot.sh")
}

/// What a session against the Soft-RoCE guest gave.
struct Session {
    /// rnic-perf's runs: as the server of the guest's clients, then as the client of its
    /// servers, each named.
    outputs: Vec<(String, Output)>,
    /// The guest's console.
    console: String,
    /// boot.sh's exit and stderr.
    guest: Output,
    /// The rnicd (kept for its log).
    rnicd: Rnicd,
    /// rnicd's capture of its port.
    pcap: PathBuf,
}

/// Boots the Soft-RoCE guest on rnicd's Ethernet port and runs `runs` in both roles: the
/// guest's perftest clients against rnic-perf servers on VF0, then rnic-perf clients
/// against the guest's perftest servers.
fn against_soft_roce(runs: &[Run]) -> Session {
    // End A: rnicd's Ethernet port; end B: the guest's eth0.
    let link = DgramLink::new();
    let pcap = std::env::temp_dir().join(format!(
        "rnicd-port-{}-{}.pcap",
        std::process::id(),
        free_port()
    ));
    let net = format!("eth:dgram:127.0.0.1:{}:127.0.0.1:{}", link.a, link.b);
    let rnicd = Rnicd::start(1, &["--net", &net, "--pcap", pcap.to_str().expect("utf-8")]);
    let server_ports: Vec<u16> = runs.iter().map(|_| free_port()).collect();
    let forward = free_port();

    // eth1: QEMU's user network, for TCP with the host.
    let guest = spawn_with_forward(
        Boot::rxe()
            .nic(link.nic_b(), "10.82.1.10/16")
            .timeout(900)
            .command(&guest_script(runs, &server_ports)),
        forward,
    );

    // rnic-perf serves the guest's perftest clients, one test at a time.
    let mut outputs = Vec::new();
    for (&run, port) in runs.iter().zip(&server_ports) {
        let (test, size, _) = run;
        let p = port.to_string();
        let mut out = rnic_perf(&rnicd, run, &["--listen", &p]);
        // A client that quit before the last handshake may be one whose clock
        // calibration failed (see `guest_script`), which comes back for the same test:
        // serve it again for a while; if it does not come, its first failure stands.
        for _ in 0..2 {
            if out.status.success() || !text(&out).contains("after the test") {
                break;
            }
            let again = rnic_perf_within(&rnicd, run, &["--listen", &p], 150);
            if text(&again).contains("waiting for a client on TCP port") {
                break;
            }
            out = again;
        }
        outputs.push((format!("rnic-perf server, ib_{test} -s {size} client"), out));
    }
    // rnic-perf is the client of the guest's perftest servers; the forwarded port accepts
    // before the guest listens, so a run that finds nobody there is repeated.
    let target = format!("127.0.0.1:{forward}");
    for &run in runs {
        let (test, size, _) = run;
        let mut tries = 0;
        let out = loop {
            let out = rnic_perf(&rnicd, run, &["--connect", &target]);
            let err = String::from_utf8_lossy(&out.stderr);
            let nobody = err.contains("version")
                && ["closed", "reset", "pipe"].iter().any(|w| err.contains(w));
            tries += 1;
            if out.status.success() || !nobody || tries >= 120 {
                break out;
            }
            std::thread::sleep(Duration::from_secs(1));
        };
        outputs.push((
            format!("rnic-perf client of ib_{test} -s {size} server"),
            out,
        ));
    }
    let guest = finish_within(guest, Duration::from_secs(960));
    let console = String::from_utf8_lossy(&guest.stdout).into_owned();
    Session {
        outputs,
        console,
        guest,
        rnicd,
        pcap,
    }
}

impl Session {
    /// What to show when something failed.
    fn report(&self, what: &str) -> String {
        format!(
            "{what}\nguest console:\n{}\nboot.sh: {}\nrnicd log: {}\ncapture: {}",
            self.console,
            String::from_utf8_lossy(&self.guest.stderr),
            self.rnicd.log(),
            self.pcap.display()
        )
    }

    /// Every run of `runs` passed in both roles, on both sides, against the guest, and
    /// the guest finished well.
    fn check(&self, runs: &[Run]) {
        for (name, out) in &self.outputs {
            assert!(
                out.status.success(),
                "{}",
                self.report(&format!("{name}: {}", text(out)))
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains(" data check: "), "{name}: {stdout}");
            assert!(
                stdout.contains("GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:82:01:10"),
                "{name}: the peer is the guest: {stdout}"
            );
        }
        for role in ["client", "server"] {
            for (test, size, _) in runs {
                let want = format!("PERFTEST {role} {test} {size} rc=0");
                assert!(
                    self.console.contains(&want),
                    "{}",
                    self.report(&format!("no `{want}`"))
                );
            }
        }
        assert_eq!(
            self.guest.status.code(),
            Some(0),
            "{}",
            self.report("the guest failed")
        );
    }

    /// The average bandwidth (MiB/s) rnic-perf printed for run `name` (perftest's table:
    /// `#bytes #iterations BW peak BW average MsgRate`; a server prints its client's).
    fn average_mib_s(&self, name: &str, size: usize) -> f64 {
        let (_, out) = self
            .outputs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no run {name}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.len() >= 5 && w[0] == size.to_string())
            .and_then(|w| w[3].parse().ok())
            .unwrap_or_else(|| panic!("{name}: no figures for {size} bytes in {stdout}"))
    }
}

#[test]
#[ignore = "boots a QEMU guest with Soft-RoCE; run as root with --ignored --test-threads=1"]
fn perftest_on_soft_roce_against_rnic_perf_in_both_roles() {
    let runs = small_runs();
    let session = against_soft_roce(&runs);
    session.check(&runs);
    // rnicd's port saw it all as well-formed RoCEv2: at least one packet per message of
    // each of the eight runs.
    assert_clean_roce_capture(&session.pcap, 8 * ITERS as usize);
    assert_nothing_flagged(&session.pcap);
    let _ = std::fs::remove_file(&session.pcap);
}

/// The median time, in seconds, from a READ request that `requester` (an IPv4 address)
/// sent to the first response to it, over the READ requests of `frames` (a capture with
/// times).
fn read_answer_latency(frames: &[(f64, Vec<u8>)], requester: [u8; 4]) -> f64 {
    let psn = |f: &[u8]| u32::from_be_bytes([0, f[51], f[52], f[53]]);
    let roce = |f: &&(f64, Vec<u8>)| f.1.len() > 54 && f.1[36..38] == [0x12, 0xB7];
    let mut asked = std::collections::HashMap::new();
    let mut latencies = Vec::new();
    for (t, f) in frames.iter().filter(roce) {
        let from_requester = f[26..30] == requester;
        match f[42] {
            0x0C if from_requester => {
                asked.entry(psn(f)).or_insert(*t);
            }
            // READ RESPONSE FIRST or ONLY: the first answer to the request with its PSN.
            0x0D | 0x10 if f[30..34] == requester => {
                if let Some(sent) = asked.remove(&psn(f)) {
                    latencies.push(t - sent);
                }
            }
            _ => {}
        }
    }
    assert!(!latencies.is_empty(), "no READ answered");
    latencies.sort_by(f64::total_cmp);
    latencies[latencies.len() / 2]
}

/// 1 MiB READs, 100 of them, in both roles against rxe (which used to fail with rnic as
/// the requester: the Ethernet port's socket dropped responses, and every gap made the
/// whole megabyte be asked for again), with fewer than 1.5 READ requests from rnic per
/// READ it posted (its port's capture); and 64 KiB READs and WRITEs in both roles.
///
/// Against Soft-RoCE in a TCG guest, a transfer in which the guest sends the data (rnic
/// READs from it, or it WRITEs to rnic) runs at the rate of the guest's transmit path,
/// about a third of what the guest receives: rnic answers a READ request in a fraction of
/// a millisecond, the guest in about 30 ms. So rnic's 64 KiB READs from the guest must not
/// fall below half the rate of the guest's 64 KiB WRITEs to rnic (the same data, the same
/// way; they were once many times slower), and the two READ directions' rates and answer
/// times are printed.
#[test]
#[ignore = "boots a QEMU guest with Soft-RoCE; run as root with --ignored --test-threads=1"]
fn large_reads_against_soft_roce_complete_in_both_roles() {
    const MIB: usize = 1 << 20;
    const SMALL: usize = 64 << 10;
    const SMALL_ITERS: u64 = 400;
    let runs = [
        ("read_bw", MIB, 100),
        ("read_bw", SMALL, SMALL_ITERS),
        ("write_bw", SMALL, SMALL_ITERS),
    ];
    let session = against_soft_roce(&runs);
    for (name, out) in &session.outputs {
        eprintln!("{name}:\n{}", String::from_utf8_lossy(&out.stdout));
    }
    session.check(&runs);
    // rnic's READ requests (VF0 is 10.82.0.2) against the READs it posted as a client.
    const RNIC: [u8; 4] = [10, 82, 0, 2];
    const GUEST: [u8; 4] = [10, 82, 1, 10];
    let frames = pcap_records(&std::fs::read(&session.pcap).expect("capture"));
    let requests = frames
        .iter()
        .filter(|(_, f)| f.len() > 42 && f[26..30] == RNIC && f[42] == 0x0C)
        .count() as u64;
    let reads: u64 = runs
        .iter()
        .filter(|&&(test, _, _)| test == "read_bw")
        .map(|&(_, _, iters)| iters)
        .sum();
    eprintln!("rnic sent {requests} READ requests for {reads} READs");
    assert!(
        requests >= reads && requests * 2 < reads * 3,
        "{}",
        session.report(&format!("{requests} READ requests for {reads} READs"))
    );
    let rate = |name: &str| session.average_mib_s(name, SMALL);
    let guest_reads = rate("rnic-perf server, ib_read_bw -s 65536 client");
    let rnic_reads = rate("rnic-perf client of ib_read_bw -s 65536 server");
    let guest_writes = rate("rnic-perf server, ib_write_bw -s 65536 client");
    let rnic_answers = read_answer_latency(&frames, GUEST);
    let guest_answers = read_answer_latency(&frames, RNIC);
    eprintln!(
        "64 KiB: the guest READs from rnic at {guest_reads} MiB/s (rnic answers in {:.2} ms), \
         rnic READs from the guest at {rnic_reads} MiB/s (the guest answers in {:.2} ms), \
         the guest WRITEs to rnic at {guest_writes} MiB/s",
        rnic_answers * 1e3,
        guest_answers * 1e3
    );
    // rnic answers at once: what the guest waits for is its own stack.
    assert!(
        rnic_answers < 0.005,
        "rnic answers READs in {rnic_answers} s"
    );
    // The data the guest sends, at the rate it sends it: rnic READs it at least about as
    // fast as the guest WRITEs it. Only a slow side is a fault; rnic's READs often run at
    // twice the guest's WRITEs, and single TCG runs vary by a third.
    assert!(
        2.0 * rnic_reads >= guest_writes,
        "rnic READs 64 KiB from the guest at {rnic_reads} MiB/s, the guest WRITEs them to \
         rnic at {guest_writes} MiB/s"
    );
    assert_nothing_flagged(&session.pcap);
    let _ = std::fs::remove_file(&session.pcap);
}

/// RDMA ATOMIC WRITE and FLUSH (datasheet §14.14) between rnic and Soft-RoCE, both ways:
/// wire compatibility with rxe, which defines them for Linux. VF0 on the host (the Rust
/// driver) and an RC QP of pyverbs on rxe0 in the guest (tests/rdma-core/atomic_write_peer.py)
/// swap their QPs over TCP. rnic's ATOMIC WRITE lands its 8 bytes in rxe's region and its
/// FLUSHes (a range, the whole region) complete; rxe's ATOMIC WRITE lands in rnic's region
/// and its FLUSHes complete with the opcodes ibverbs gives them; a persistent FLUSH of a
/// region that allows global visibility only is refused by rxe with a remote access error.
#[test]
#[ignore = "boots a QEMU guest with Soft-RoCE; run as root with --ignored --test-threads=1"]
fn atomic_write_and_flush_between_rnic_and_soft_roce_in_both_directions() {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;

    use rnic_driver::verbs::{self, flush, WcOpcode, WcStatus, WrOpcode};
    use rnic_tests::verbs_pair::{poll_n, read_mr, side, signaled, to_rts, PairOptions};

    let link = DgramLink::new();
    let net = format!("eth:dgram:127.0.0.1:{}:127.0.0.1:{}", link.a, link.b);
    let rnicd = Rnicd::start(1, &["--net", &net]);
    let forward = free_port();
    let peer = rnic_tests::vm::repo().join("tests/rdma-core/atomic_write_peer.py");
    let guest = Boot::rxe()
        .arg("--pyverbs")
        .arg("--file")
        .arg(format!("{}:/root/atomic_write_peer.py", peer.display()))
        .nic(link.nic_b(), "10.82.1.10/16")
        .timeout(600)
        .command("python3 /root/atomic_write_peer.py $(rxe-gid-index) 18515 2>&1");
    let guest = spawn_with_forward(guest, forward);

    let o = PairOptions {
        access: PairOptions::default().access | verbs::ACCESS_FLUSH,
        buf_len: 1 << 16,
        ..PairOptions::default()
    };
    let a = side(&rnicd.socket("vf0"), &o);
    a.mr.write(0, &[0xA5; 64]);
    let hex: String = a.gid.iter().map(|b| format!("{b:02x}")).collect();
    let mine = format!(
        "{} {hex} 4660 {} {}\n",
        a.qp.qp_num(),
        a.mr.rkey(),
        a.mr.addr(0)
    );
    // The forwarded port accepts before the guest listens: try until the peer answers.
    let try_once = || {
        let s = TcpStream::connect(format!("127.0.0.1:{forward}")).ok()?;
        let mut r = BufReader::new(s.try_clone().ok()?);
        (&s).write_all(mine.as_bytes()).ok()?;
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(n) if n > 0 => Some((s, (r, line))),
            _ => None,
        }
    };
    let (mut out, mut lines) = (0..600)
        .find_map(|_| {
            let got = try_once();
            if got.is_none() {
                std::thread::sleep(Duration::from_secs(1));
            }
            got
        })
        .expect("the Soft-RoCE guest's peer answers");
    let theirs: Vec<String> = lines.1.split_whitespace().map(String::from).collect();
    let (qpn, psn, rkey, addr): (u32, u32, u32, u64) = (
        theirs[0].parse().unwrap(),
        theirs[2].parse().unwrap(),
        theirs[3].parse().unwrap(),
        theirs[4].parse().unwrap(),
    );
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&theirs[1][2 * i..2 * i + 2], 16).unwrap();
    }
    let (at, m) = verbs::rtr_attr(qpn, gid, psn, o.mtu, 16, o.min_rnr_timer);
    a.qp.modify(&at, m).expect("RTR");
    to_rts(&a.qp, &o, 4660);
    let mut ready = String::new();
    lines.0.read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");

    // rnic to rxe: ATOMIC WRITE, FLUSH of a range, FLUSH of the region.
    let wrs = [
        signaled(
            1,
            WrOpcode::AtomicWrite {
                remote_addr: addr + 8,
                rkey,
                value: *b"rnic2rxe",
            },
            vec![],
        ),
        signaled(
            2,
            WrOpcode::Flush {
                remote_addr: addr,
                rkey,
                length: 64,
                ptype: flush::GLOBAL,
                level: flush::RANGE,
            },
            vec![],
        ),
        signaled(
            3,
            WrOpcode::Flush {
                remote_addr: 0,
                rkey,
                length: 0,
                ptype: flush::GLOBAL,
                level: flush::MR,
            },
            vec![],
        ),
    ];
    a.qp.post_send_list(&wrs).unwrap();
    let wcs = poll_n(&a.cq, 3, Duration::from_secs(60));
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, Ok(WcStatus::Success), WcOpcode::AtomicWrite),
            (2, Ok(WcStatus::Success), WcOpcode::Flush),
            (3, Ok(WcStatus::Success), WcOpcode::Flush),
        ]
    );
    out.write_all(b"rnic-done\n").unwrap();
    let mut done = String::new();
    lines.0.read_line(&mut done).unwrap();
    assert_eq!(done.trim(), "rxe-done");
    // rxe to rnic: its ATOMIC WRITE landed, nothing around it moved.
    assert_eq!(read_mr(&a.mr, 16, 8), b"rxe2rnic");
    assert_eq!(read_mr(&a.mr, 0, 16), vec![0xA5; 16]);
    assert_eq!(read_mr(&a.mr, 24, 40), vec![0xA5; 40]);
    // A persistent FLUSH of rxe's region, which allows global visibility only.
    a.qp.post_send(&signaled(
        4,
        WrOpcode::Flush {
            remote_addr: addr,
            rkey,
            length: 64,
            ptype: flush::PERSISTENT,
            level: flush::RANGE,
        },
        vec![],
    ))
    .unwrap();
    let wcs = poll_n(&a.cq, 1, Duration::from_secs(60));
    assert_eq!(
        wcs.first().map(|w| (w.wr_id, w.status)),
        Some((4, Ok(WcStatus::RemAccessErr)))
    );
    out.write_all(b"bye\n").unwrap();
    let guest = finish_within(guest, Duration::from_secs(300));
    let console = String::from_utf8_lossy(&guest.stdout);
    let peer_lines: Vec<&str> = console.lines().filter(|l| l.starts_with("PEER")).collect();
    let report = format!("{console}\n{}", String::from_utf8_lossy(&guest.stderr));
    // rxe's region got rnic's 8 bytes between 8 of its own on each side.
    let region = format!(
        "PEER region {}{}{}",
        "5a".repeat(8),
        hex_of(b"rnic2rxe"),
        "5a".repeat(8)
    );
    assert!(peer_lines.contains(&region.as_str()), "{report}");
    // ibverbs' opcodes: IBV_WC_ATOMIC_WRITE 9, IBV_WC_FLUSH 8.
    for want in [
        "PEER wc 1 status 0 opcode 9",
        "PEER wc 2 status 0 opcode 8",
        "PEER wc 3 status 0 opcode 8",
        "PEER end",
    ] {
        assert!(peer_lines.contains(&want), "{want} missing:\n{report}");
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
