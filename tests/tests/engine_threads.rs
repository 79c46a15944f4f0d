//! rnicd's engine on several threads: traffic between functions that different threads
//! serve, every byte checked (rnic-perf --check through real vfio-user sockets), and the
//! placement following the traffic. Migration between functions of different threads
//! is in migration.rs; tests/run-all.sh runs every suite again with the functions spread
//! over two threads.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use rnic_tests::{bin, wait_for, Rnicd};

/// CPU ticks each engine thread of rnicd `pid` used so far, by thread name.
fn engine_ticks(pid: u32) -> HashMap<String, u64> {
    let mut ticks = HashMap::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("rnicd's threads");
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("engine-") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis, from field 3 (the state)
        // on: utime is field 14, stime field 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<u64> = rest
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        ticks.insert(comm.to_string(), fields[14 - 3] + fields[15 - 3]);
    }
    ticks
}

/// Runs rnic-perf with `args` and checking on, and fails the test if it fails.
fn perf(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(bin("rnic-perf"))
        .args(args)
        .args(["--check", "--no-baseline"])
        .output()
        .expect("run rnic-perf");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rnic-perf {args:?} failed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Runs rnic-perf `args` on `pairs` of rnicd's functions ("vf0", ...), the first of each
/// posting, all pairs at once, checking every byte.
fn perf_on(rnicd: &Rnicd, args: &[&str], pairs: &[(&str, &str)]) -> String {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(|s| s.into()).collect();
    for (a, b) in pairs {
        all.extend([
            "--vfio-user".into(),
            rnicd.socket(a).into_os_string(),
            "--remote-vfio-user".into(),
            rnicd.socket(b).into_os_string(),
        ]);
    }
    let refs: Vec<&std::ffi::OsStr> = all.iter().map(|a| a.as_os_str()).collect();
    perf(&refs)
}

/// With `--placement spread`, VF0 (function 1) runs on thread 1 and VF1 (function 2) on
/// thread 0: every frame between them crosses threads, and every byte of every
/// operation still arrives, checked, with both threads working.
#[test]
fn functions_on_different_threads_exchange_every_operation() {
    let rnicd = Rnicd::start(2, &["--threads", "2", "--placement", "spread"]);
    rnicd.wait_for_log(
        "2 threads over 3 functions, placement spread",
        Duration::from_secs(5),
    );
    // A thread has its name once it runs.
    wait_for(Duration::from_secs(5), "two named engine threads", || {
        engine_ticks(rnicd.pid()).len() == 2
    });
    let before = engine_ticks(rnicd.pid());
    let vf0_vf1 = [("vf0", "vf1")];
    for test in ["write_bw", "read_bw", "send_bw"] {
        perf_on(
            &rnicd,
            &[test, "-s", "65536", "-n", "200", "-q", "4", "-t", "16"],
            &vf0_vf1,
        );
    }
    for (test, size) in [
        ("write_lat", "8"),
        ("send_lat", "4096"),
        ("atomic_lat", "8"),
    ] {
        perf_on(&rnicd, &[test, "-s", size, "-n", "200"], &vf0_vf1);
    }
    let after = engine_ticks(rnicd.pid());
    for (name, ticks) in &after {
        assert!(
            *ticks > before[name],
            "{name} did no work: {before:?} -> {after:?}"
        );
    }
}

/// The placement of the last balancer line in rnicd's log: function name -> thread.
fn last_placement(log: &str) -> HashMap<String, usize> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("engine: placement now"))
        .unwrap_or_else(|| panic!("no placement change logged:\n{log}"));
    let list = line
        .split("placement now ")
        .nth(1)
        .and_then(|r| r.split(" (").next())
        .unwrap_or("");
    list.split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once(':')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Two busy pairs that cross the first placement (VF0 and VF1 start on thread 0, VF2
/// and VF3 on thread 1, while VF0 talks to VF2 and VF1 to VF3): the balancer puts each
/// pair on a thread of its own.
#[test]
fn the_placement_follows_the_traffic() {
    let rnicd = Rnicd::start(4, &["--threads", "2", "--placement", "auto"]);
    let report = perf_on(
        &rnicd,
        &["write_bw", "-s", "65536", "-D", "1.5"],
        &[("vf0", "vf2"), ("vf1", "vf3")],
    );
    assert!(report.contains("2 pairs at once"), "{report}");
    let placed = last_placement(&rnicd.log());
    assert_eq!(placed["vf0"], placed["vf2"], "{placed:?}");
    assert_eq!(placed["vf1"], placed["vf3"], "{placed:?}");
    assert_ne!(placed["vf0"], placed["vf1"], "{placed:?}");
}

/// Two busy pairs that start on thread 1 (VF2/VF3 and VF6/VF7) while thread 0 has
/// nothing to do and sleeps: the busy thread runs the balancer itself and gives one pair
/// to thread 0.
#[test]
fn busy_pairs_on_one_thread_are_spread_while_the_other_sleeps() {
    let rnicd = Rnicd::start(8, &["--threads", "2", "--placement", "auto"]);
    perf_on(
        &rnicd,
        &["write_bw", "-e", "-s", "65536", "-D", "1.5"],
        &[("vf2", "vf3"), ("vf6", "vf7")],
    );
    let placed = last_placement(&rnicd.log());
    assert_eq!(placed["vf2"], placed["vf3"], "{placed:?}");
    assert_eq!(placed["vf6"], placed["vf7"], "{placed:?}");
    assert_ne!(placed["vf2"], placed["vf6"], "{placed:?}");
}

/// With a capture and injected faults, every frame goes through the switch, which both
/// threads share: traffic across threads survives loss, duplication and reordering with
/// every byte checked, and the capture is one consistent record: exactly the frames the
/// fault injector delivered, each a well-formed RoCEv2 frame.
#[test]
fn threads_share_one_capture_and_one_fault_injector() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pcap = dir.path().join("threads.pcap");
    let pcap_arg = pcap.to_str().expect("utf-8 path");
    let mut rnicd = Rnicd::start(
        2,
        &[
            "--threads",
            "2",
            "--placement",
            "spread",
            "--net-faults",
            "loss=0.01,dup=0.01,reorder=0.01,seed=5",
            "--pcap",
            pcap_arg,
        ],
    );
    for test in ["write_bw", "read_bw", "send_bw"] {
        let args = [test, "-s", "20000", "-n", "60", "-q", "2", "-m", "1024"];
        perf_on(&rnicd, &args, &[("vf0", "vf1")]);
    }
    rnicd.stop_with(libc::SIGTERM);
    let log = rnicd.log();
    let delivered = rnic_tests::logged_count(&log, "network faults:", "delivered");
    let frames = rnic_tests::wire::pcap_frames(&std::fs::read(&pcap).expect("pcap"));
    assert!(delivered > 1000, "{log}");
    assert_eq!(frames.len() as u64, delivered, "{log}");
    for (i, f) in frames.iter().enumerate() {
        // Ethernet, IPv4, UDP to 4791: every captured frame is a whole RoCEv2 frame.
        assert!(f.len() > 58, "frame {i} is {} bytes", f.len());
        assert_eq!(&f[12..14], &[0x08, 0x00], "frame {i}");
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 4791, "frame {i}");
    }
}
