//! VM tests: a real QEMU guest with rnic functions attached over vfio-user, and the guest
//! driver's tools run inside it. They boot VMs (seconds each, under TCG), so they are
//! ignored by default; `tests/run-all.sh` runs them after `qemu-scripts/setup.sh`.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// Boots a guest with `args` (functions to attach) running `guest_cmd`; returns the
/// console output and the guest command's exit status.
fn boot(args: &[&str], guest_cmd: &str) -> (String, Option<i32>) {
    let out = Command::new("bash")
        .arg(repo().join("qemu-scripts/boot.sh"))
        .args(args)
        .args(["--timeout", "300", "--"])
        .arg(guest_cmd)
        .env("RNIC_RNICD", rnic_tests::bin("rnicd"))
        .output()
        .expect("run qemu-scripts/boot.sh");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{console}\n{}", String::from_utf8_lossy(&out.stderr));
    (console, out.status.code())
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn guest_with_two_vfs_runs_rnic_info_on_each() {
    // Each function by address, then all of them as JSON, from inside the guest.
    let script = r#"
set -e
for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat $dev/vendor)" = 0xf1c0 ]; then
        bdf=$(basename $dev)
        echo "FOUND $bdf $(cat $dev/device)"
        rnic-info --pci $bdf
    fi
done
echo JSON-BEGIN
rnic-info --json
echo JSON-END
"#;
    let (console, status) = boot(&["--vf", "0", "--vf", "1"], script);
    assert_eq!(status, Some(0), "guest commands failed");
    let found: Vec<&str> = console
        .lines()
        .filter(|l| l.starts_with("FOUND "))
        .collect();
    assert_eq!(found.len(), 2, "two VFs on the guest's PCI bus: {found:?}");
    assert!(
        found.iter().all(|l| l.ends_with("0x0002")),
        "both are VFs: {found:?}"
    );
    assert!(console.contains("function:     VF 0"));
    assert!(console.contains("function:     VF 1"));
    assert!(console.contains("vendor f1c0 device 0002"));
    assert!(
        console.contains("interrupts:   polled"),
        "in a VM the driver polls"
    );
    let json = console
        .split("JSON-BEGIN")
        .nth(1)
        .and_then(|rest| rest.split("JSON-END").next())
        .expect("JSON block on the console");
    // The serial console may carry carriage returns.
    let json: serde_json::Value =
        serde_json::from_str(&json.replace('\r', "")).expect("rnic-info --json output");
    let reports = json.as_array().expect("array");
    assert_eq!(reports.len(), 2);
    let mut indexes: Vec<u64> = reports
        .iter()
        .map(|r| r["vf_index"].as_u64().expect("vf_index"))
        .collect();
    indexes.sort();
    assert_eq!(indexes, [0, 1]);
    let macs: Vec<&str> = reports
        .iter()
        .map(|r| r["mac"].as_str().expect("mac"))
        .collect();
    assert_ne!(macs[0], macs[1]);
    assert!(reports.iter().all(|r| r["location"]
        .as_str()
        .is_some_and(|l| l.starts_with("pci:"))));
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn guest_sees_the_pf_with_its_sriov_capability() {
    let script = r#"
set -e
rnic-info
for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat $dev/vendor)" = 0xf1c0 ]; then echo "CLASS $(cat $dev/class)"; fi
done
"#;
    let (console, status) = boot(&["--pf"], script);
    assert_eq!(status, Some(0));
    assert!(console.contains("function:     PF with "), "{console}");
    assert!(console.contains("CLASS 0x020000"), "network/Ethernet class");
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn guest_command_failure_is_reported() {
    let (_, status) = boot(&[], "echo about to fail; exit 7");
    assert_eq!(
        status,
        Some(7),
        "boot.sh returns the guest command's exit status"
    );
}

/// Where VM runs keep their files, as the qemu-scripts see it (inside the trixie root when
/// QEMU runs there, so that QEMU reaches the sockets).
fn vm_run_base() -> PathBuf {
    let out = Command::new("bash")
        .arg("-c")
        .arg("source qemu-scripts/env.sh; if qemu_in_root; then echo $TRIXIE_ROOT/run/rnic-vm; else echo $RNIC_CACHE/run/rnic-vm; fi")
        .current_dir(repo())
        .output()
        .expect("source qemu-scripts/env.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Starts an rnicd with `vfs` VFs whose sockets (and log, `rnicd.log`) are in a fresh
/// folder named after `name` where QEMU reaches them; returns the folder and the process.
fn start_rnicd(name: &str, vfs: u32) -> (PathBuf, std::process::Child) {
    let dir = vm_run_base().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket dir");
    let log = std::fs::File::create(dir.join("rnicd.log")).expect("log");
    let rnicd = Command::new(rnic_tests::bin("rnicd"))
        .args(["--socket-dir"])
        .arg(&dir)
        .args(["--vfs", &vfs.to_string()])
        .env("RUST_LOG", "info")
        .stderr(log)
        .spawn()
        .expect("start rnicd");
    rnic_tests::wait_for(std::time::Duration::from_secs(10), "rnicd to serve", || {
        std::fs::read_to_string(dir.join("rnicd.log"))
            .unwrap_or_default()
            .contains("serving the PF")
    });
    (dir, rnicd)
}

/// The GID of VF `vf` of an rnicd, as rnic-pingpong writes GIDs (32 hex digits):
/// ::ffff:10.82.0.(vf + 2).
fn vf_gid_hex(vf: u32) -> String {
    format!("00000000000000000000ffff0a52{:04x}", vf + 2)
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn two_guests_run_rnic_pingpong_against_each_other() {
    // One rnicd with two VFs; each guest gets one. The guests have no network between
    // them, so the test passes the connection parameters: a freshly opened function's
    // first QP is 0x11, and each side is given the PSNs.
    let (dir, mut rnicd) = start_rnicd("two-guests", 2);

    // Sizes below and above the 1024-byte path MTU; a long ACK timeout (code 20, about 4 s,
    // 7 retries) covers the guests booting at different speeds.
    let script = |peer: u32, initiator: bool| {
        let mut s = String::from("set -e\n");
        for (size, psn) in [(100, 0x100), (5000, 0x2000)] {
            let (mine, theirs) = if initiator {
                (psn, psn + 0x10_0000)
            } else {
                (psn + 0x10_0000, psn)
            };
            s += &format!(
                "rnic-pingpong --peer 0x11:{}:{theirs:#x} --psn {mine:#x} {} --op send --size {size} --iters 20 --mtu 1024 --timeout 20\n",
                vf_gid_hex(peer),
                if initiator { "--initiator" } else { "" },
            );
        }
        s
    };
    let guest = |vf: u32, peer: u32, initiator: bool| {
        Command::new("bash")
            .arg(repo().join("qemu-scripts/boot.sh"))
            .arg("--socket-dir")
            .arg(&dir)
            .args(["--vf", &vf.to_string(), "--timeout", "400", "--"])
            .arg(script(peer, initiator))
            .env("RNIC_RNICD", rnic_tests::bin("rnicd"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("boot a guest")
    };
    let a = guest(0, 1, true);
    let b = guest(1, 0, false);
    let (a, b) = (
        a.wait_with_output().expect("guest A"),
        b.wait_with_output().expect("guest B"),
    );
    let _ = rnicd.kill();
    let _ = rnicd.wait();
    for (name, out) in [("A", &a), ("B", &b)] {
        let console = String::from_utf8_lossy(&out.stdout);
        eprintln!(
            "--- guest {name} ---\n{console}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "guest {name}'s rnic-pingpong failed"
        );
        assert!(
            console.contains("local: qpn 0x11"),
            "guest {name}: {console}"
        );
        for size in [100, 5000] {
            assert!(
                console.contains(&format!("20 iters of {size} bytes")),
                "guest {name}: no result for {size} bytes"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn the_main_job_demo_runs_rdma_between_two_vfs_in_one_guest() {
    let out = Command::new("bash")
        .arg(repo().join("qemu-scripts/demo.sh"))
        .args(["--timeout", "400"])
        .env("RNIC_RNICD", rnic_tests::bin("rnicd"))
        .output()
        .expect("run qemu-scripts/demo.sh");
    let console = String::from_utf8_lossy(&out.stdout);
    eprintln!("{console}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "demo failed");
    for op in ["send", "write", "read"] {
        assert!(
            console.contains(&format!("=== rnic-pingpong --op {op}")),
            "{op} ran"
        );
    }
    assert_eq!(
        console.matches("200 iters of 8192 bytes").count(),
        3,
        "three ping-pongs finished"
    );
    assert!(console.contains("demo: all done"));
}

/// A guest's console lines as they come, from a child's standard output.
fn console_lines(
    child: &mut std::process::Child,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
) {
    use std::io::BufRead;
    let out = child.stdout.take().expect("guest stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let all = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(out).lines().map_while(|l| l.ok()) {
            all += &line;
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, all)
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn a_running_pingpong_follows_its_qp_from_vf0_to_vf1() {
    // One rnicd with three VFs. Guest A holds VF0 and VF1 (one guest, one memory), guest B
    // VF2. rnic-pingpong runs between VF0 and VF2; while it runs, `rnic-admin migrate` on
    // the host moves the connection to VF1, and the ping-pong follows it and finishes.
    let (dir, mut rnicd) = start_rnicd("migrate", 3);
    const ITERS: u32 = 3000;
    // Guest A finds which of its functions is VF 0 and which VF 1.
    let script_a = format!(
        r#"set -e
for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat $dev/vendor)" = 0xf1c0 ]; then
        bdf=$(basename $dev)
        if rnic-info --pci $bdf | grep -q "VF 0"; then vf0=$bdf; fi
        if rnic-info --pci $bdf | grep -q "VF 1"; then vf1=$bdf; fi
    fi
done
echo "VF0 $vf0 VF1 $vf1"
rnic-pingpong --pci $vf0 --follow-pci $vf1 --peer 0x11:{}:0x300 --psn 0x100 --initiator --op send --size 1000 --iters {ITERS} --mtu 1024 --timeout 20 --time-limit 300
"#,
        vf_gid_hex(2)
    );
    let script_b = format!(
        "set -e\nrnic-pingpong --peer 0x11:{}:0x100 --psn 0x300 --op send --size 1000 --iters {ITERS} --mtu 1024 --timeout 20 --time-limit 300\n",
        vf_gid_hex(0)
    );
    let guest = |vfs: &[&str], script: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("qemu-scripts/boot.sh"))
            .arg("--socket-dir")
            .arg(&dir);
        for vf in vfs {
            cmd.args(["--vf", vf]);
        }
        cmd.args(["--timeout", "400", "--"])
            .arg(script)
            .env("RNIC_RNICD", rnic_tests::bin("rnicd"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("boot a guest")
    };
    let mut a = guest(&["0", "1"], &script_a);
    let b = guest(&["2"], &script_b);
    let (a_lines, a_all) = console_lines(&mut a);
    // First guest A's tool must be up (it prints `remote:` once its QP is connected).
    let mut a_seen = Vec::new();
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "guest A never started its ping-pong: {a_seen:?}"
        );
        if let Ok(line) = a_lines.recv_timeout(std::time::Duration::from_millis(200)) {
            a_seen.push(line);
        }
        if a_seen.iter().any(|l| l.contains("remote: qpn")) {
            break;
        }
    }
    let admin = |args: &[&str]| {
        Command::new(rnic_tests::bin("rnic-admin"))
            .arg("--vfio-user")
            .arg(dir.join("pf.sock"))
            .args(args)
            .output()
            .expect("run rnic-admin")
    };
    // Then both sides must be exchanging data (the handshake is a few packets): move the
    // QP once VF0 has sent 200.
    let vf0_tx = || {
        let out = admin(&["--json", "stats", "vf0"]);
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let find = |v: &serde_json::Value| v["tx_packets"].as_u64();
        find(&v)
            .or_else(|| v.as_array().and_then(|a| a.first()).and_then(find))
            .or_else(|| find(&v["stats"]))
            .unwrap_or(0)
    };
    rnic_tests::wait_for(
        std::time::Duration::from_secs(300),
        "the ping-pong to run",
        || vf0_tx() > 200,
    );
    let out = admin(&["migrate", "--from", "vf0", "--to", "vf1", "--qpn", "0x11"]);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rnic-admin migrate failed: {said}");
    assert!(said.contains("QP 0x11 moved from vf0 to vf1"), "{said}");
    let a = a.wait_with_output().expect("guest A");
    let b = b.wait_with_output().expect("guest B");
    let a_console = a_all.join().expect("guest A console");
    let b_console = String::from_utf8_lossy(&b.stdout).into_owned();
    let _ = rnicd.kill();
    let _ = rnicd.wait();
    eprintln!(
        "--- guest A ---\n{a_console}\n{}\n--- guest B ---\n{b_console}\n{}\n--- rnicd ---\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr),
        std::fs::read_to_string(dir.join("rnicd.log")).unwrap_or_default()
    );
    assert_eq!(a.status.code(), Some(0), "guest A's rnic-pingpong failed");
    assert_eq!(b.status.code(), Some(0), "guest B's rnic-pingpong failed");
    for console in [&a_console, &b_console] {
        assert!(
            console.contains(&format!("{ITERS} iters of 1000 bytes")),
            "{console}"
        );
    }
    assert!(
        a_console.contains("followed the QP through 1 migration(s)"),
        "guest A did not follow its QP: {a_console}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
