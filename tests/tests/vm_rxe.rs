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

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rnic_tests::tshark::{assert_clean_roce_capture, assert_nothing_flagged};
use rnic_tests::vm::{Boot, DgramLink};
use rnic_tests::{bin, finish_within, free_port, Rnicd};

/// Small messages, and one above the path MTU (1024 on rxe over a 1500-byte NIC).
const SIZES: [usize; 2] = [64, 4096];
/// TCG is slow: few iterations.
const ITERS: u64 = 20;

/// rnic-perf --perftest on VF0 with `args`, waited for (at most 300 s).
fn rnic_perf(rnicd: &Rnicd, test: &str, size: usize, args: &[&str]) -> Output {
    rnic_perf_within(rnicd, test, size, args, 280)
}

/// rnic-perf --perftest on VF0 with `args` and a time limit of `limit` seconds.
fn rnic_perf_within(rnicd: &Rnicd, test: &str, size: usize, args: &[&str], limit: u64) -> Output {
    let child = Command::new(bin("rnic-perf"))
        .args(["--perftest", test, "--vfio-user"])
        .arg(rnicd.socket("vf0"))
        .args(["-s", &size.to_string(), "-n", &ITERS.to_string()])
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

/// The guest's script: perftest clients against rnic-perf servers on the host (each
/// retried while the server is not listening yet), then perftest servers for rnic-perf
/// clients. Each run ends with a `PERFTEST ...` line.
fn guest_script(ports: &[u16]) -> String {
    let mut s = String::from(
        r#"X=$(rxe-gid-index)
client() { # TEST SIZE PORT
    again=0
    for i in $(seq 120); do
        out=$(ib_$1 -d rxe0 -x $X -s $2 -n ITERS -p $3 10.0.2.2 2>&1); rc=$?
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
server() { # TEST SIZE
    ib_$1 -d rxe0 -x $X -s $2 -n ITERS -p 18515 2>&1; echo "PERFTEST server $1 $2 rc=$?"
}
"#,
    )
    .replace("ITERS", &ITERS.to_string());
    let mut port = ports.iter();
    for test in ["write_bw", "read_bw"] {
        for size in SIZES {
            s += &format!("client {test} {size} {}\n", port.next().expect("a port"));
        }
    }
    for test in ["write_bw", "read_bw"] {
        for size in SIZES {
            s += &format!("server {test} {size}\n");
        }
    }
    s
}

#[test]
#[ignore = "boots a QEMU guest with Soft-RoCE; run as root with --ignored --test-threads=1"]
fn perftest_on_soft_roce_against_rnic_perf_in_both_roles() {
    // End A: rnicd's Ethernet port; end B: the guest's eth0.
    let link = DgramLink::new();
    let pcap = std::env::temp_dir().join(format!("rnicd-port-{}.pcap", std::process::id()));
    let net = format!("eth:dgram:127.0.0.1:{}:127.0.0.1:{}", link.a, link.b);
    let rnicd = Rnicd::start(1, &["--net", &net, "--pcap", pcap.to_str().expect("utf-8")]);
    let server_ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let forward = free_port();

    // eth1: QEMU's user network, for TCP with the host.
    let guest = Boot::rxe()
        .nic(link.nic_b(), "10.82.1.10/16")
        .timeout(900)
        .command(&guest_script(&server_ports))
        .env("RNIC_BOOT_APPEND", "rnic_eth1_ip=10.0.2.15/24")
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
        .expect("run boot.sh");

    // rnic-perf serves the guest's perftest clients, one test at a time.
    let mut outputs = Vec::new();
    let mut port = server_ports.iter();
    for test in ["write_bw", "read_bw"] {
        for size in SIZES {
            let p = port.next().expect("a port").to_string();
            let mut out = rnic_perf(&rnicd, test, size, &["--listen", &p]);
            // A client that quit before the last handshake may be one whose clock
            // calibration failed (see `guest_script`), which comes back for the same test:
            // serve it again for a while; if it does not come, its first failure stands.
            for _ in 0..2 {
                if out.status.success() || !text(&out).contains("after the test") {
                    break;
                }
                let again = rnic_perf_within(&rnicd, test, size, &["--listen", &p], 150);
                if text(&again).contains("waiting for a client on TCP port") {
                    break;
                }
                out = again;
            }
            outputs.push((format!("rnic-perf server, ib_{test} -s {size} client"), out));
        }
    }
    // rnic-perf is the client of the guest's perftest servers; the forwarded port accepts
    // before the guest listens, so a run that finds nobody there is repeated.
    let target = format!("127.0.0.1:{forward}");
    for test in ["write_bw", "read_bw"] {
        for size in SIZES {
            let mut tries = 0;
            let out = loop {
                let out = rnic_perf(&rnicd, test, size, &["--connect", &target]);
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
    }
    let guest = finish_within(guest, Duration::from_secs(960));
    let console = String::from_utf8_lossy(&guest.stdout).into_owned();
    let report = |what: &str| {
        format!(
            "{what}\nguest console:\n{console}\nboot.sh: {}\nrnicd log: {}\ncapture: {}",
            String::from_utf8_lossy(&guest.stderr),
            rnicd.log(),
            pcap.display()
        )
    };
    for (name, out) in &outputs {
        assert!(
            out.status.success(),
            "{}",
            report(&format!("{name}: {}", text(out)))
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(" data check: "), "{name}: {stdout}");
        assert!(
            stdout.contains("GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:82:01:10"),
            "{name}: the peer is the guest: {stdout}"
        );
    }
    for role in ["client", "server"] {
        for test in ["write_bw", "read_bw"] {
            for size in SIZES {
                let want = format!("PERFTEST {role} {test} {size} rc=0");
                assert!(
                    console.contains(&want),
                    "{}",
                    report(&format!("no `{want}`"))
                );
            }
        }
    }
    assert_eq!(
        guest.status.code(),
        Some(0),
        "{}",
        report("the guest failed")
    );
    // rnicd's port saw it all as well-formed RoCEv2: at least one packet per message of
    // each of the eight runs.
    assert_clean_roce_capture(&pcap, 8 * ITERS as usize);
    assert_nothing_flagged(&pcap);
    let _ = std::fs::remove_file(&pcap);
}
