//! rnic-perf's figures are consistent: every test, run in checking mode through the real
//! path (vfio-user sockets, shared guest memory, a real rnicd), accounts for exactly the
//! bytes it moved, compares every byte that arrived, and gives its ratios to baselines it
//! measured in the same run. No timing is asserted: speed is the benchmark's business
//! (bench/run.sh), not a test's.

use std::process::Command;

use rnic_tests::{bin, Rnicd};
use serde_json::Value;

/// Runs rnic-perf with `args` between `local` and `remote` and returns its JSON report.
fn perf(local: &std::path::Path, remote: &std::path::Path, args: &[&str]) -> Value {
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    all.extend([
        "--vfio-user".as_ref(),
        local.as_os_str(),
        "--remote-vfio-user".as_ref(),
        remote.as_os_str(),
    ]);
    perf_with(&all)
}

/// Runs rnic-perf with `args` (functions included) and returns its JSON report.
fn perf_with(args: &[&std::ffi::OsStr]) -> Value {
    let out = Command::new(bin("rnic-perf"))
        .args(args)
        .args(["--json", "--check", "--baseline-time", "0.02"])
        .output()
        .expect("run rnic-perf");
    assert!(
        out.status.success(),
        "rnic-perf {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("rnic-perf --json prints one JSON object")
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// Checks one bandwidth report: `qps * iters` messages per size, every byte accounted
/// for and checked, ratios that are the figures over their baselines.
fn check_bandwidth(report: &Value, test: &str, sizes: &[u64], qps: u64, iters: u64) {
    check_bandwidth_figures(report, test, sizes, qps, iters);
    for r in report["results"].as_array().expect("results") {
        let avg = f(r, &["bandwidth", "avg_mib_s"]);
        let memcpy = f(r, &["baseline", "memcpy_mib_s"]);
        let udp = f(r, &["baseline", "udp_mib_s"]);
        assert!(memcpy > 0.0 && udp > 0.0, "{r}");
        assert!((f(r, &["ratio_memcpy"]) - avg / memcpy).abs() < 1e-9, "{r}");
        assert!((f(r, &["ratio_udp"]) - avg / udp).abs() < 1e-9, "{r}");
    }
}

/// [`check_bandwidth`] without the baselines (a pair's report among several).
fn check_bandwidth_figures(report: &Value, test: &str, sizes: &[u64], qps: u64, iters: u64) {
    assert_eq!(report["test"], test);
    assert_eq!(u(report, "qps"), qps);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), sizes.len(), "{report}");
    for (r, &size) in results.iter().zip(sizes) {
        assert_eq!(u(r, "bytes"), size);
        assert_eq!(u(r, "iterations"), qps * iters, "{r}");
        assert_eq!(u(r, "bytes_completed"), qps * iters * size, "{test}: {r}");
        assert!(
            u(r, "bytes_checked") >= size,
            "{test}: nothing checked: {r}"
        );
        let avg = f(r, &["bandwidth", "avg_mib_s"]);
        let peak = f(r, &["bandwidth", "peak_mib_s"]);
        let rate = f(r, &["bandwidth", "msg_rate_mpps"]);
        let secs = f(r, &["bandwidth", "seconds"]);
        assert!(avg > 0.0 && peak > 0.0 && secs > 0.0, "{r}");
        // MiB/s, as perftest reports its "MB/sec".
        let expect_avg = (qps * iters * size) as f64 / secs / (1u64 << 20) as f64;
        assert!((avg - expect_avg).abs() <= expect_avg * 1e-6, "{r}");
        assert!(
            (rate * 1e6 * secs - (qps * iters) as f64).abs() < 1.0,
            "{r}"
        );
    }
}

fn check_latency(report: &Value, test: &str, size: u64, iters: u64) {
    assert_eq!(report["test"], test);
    let r = &report["results"][0];
    assert_eq!(u(r, "bytes"), size);
    assert_eq!(u(r, "iterations"), iters, "{r}");
    assert_eq!(u(r, "bytes_completed"), iters * size, "{r}");
    // Warm-up rounds are checked too.
    assert!(u(r, "bytes_checked") >= iters * size, "{test}: {r}");
    let l = &r["latency"];
    let (min, median, p99, max) = (
        f(l, &["min_us"]),
        f(l, &["median_us"]),
        f(l, &["p99_us"]),
        f(l, &["max_us"]),
    );
    assert!(
        0.0 < min && min <= median && median <= p99 && p99 <= max,
        "{l}"
    );
    assert_eq!(u(l, "samples"), iters);
    let udp = f(r, &["baseline", "udp_half_rtt", "median_us"]);
    assert!(
        (f(r, &["ratio_udp_latency"]) - median / udp).abs() < 1e-9,
        "{r}"
    );
}

fn every_test(local: &std::path::Path, remote: &std::path::Path) {
    let sizes = [1u64, 4096, 70_000];
    for test in ["write_bw", "read_bw", "send_bw"] {
        let report = perf(
            local,
            remote,
            &[test, "-s", "1", "-n", "200", "-q", "3", "-t", "16"],
        );
        check_bandwidth(&report, test, &[1], 3, 200);
        // Sizes below and above the MTU, one QP.
        for size in sizes {
            let s = size.to_string();
            let report = perf(
                local,
                remote,
                &[test, "-n", "40", "-t", "8", "-m", "1024", "-s", &s],
            );
            check_bandwidth(&report, test, &[size], 1, 40);
        }
    }
    // Inline WRITEs and SENDs.
    for test in ["write_bw", "send_bw"] {
        let report = perf(local, remote, &[test, "-s", "64", "-I", "64", "-n", "100"]);
        check_bandwidth(&report, test, &[64], 1, 100);
    }
    for (test, size) in [("write_lat", "8"), ("send_lat", "8"), ("write_lat", "5000")] {
        let report = perf(local, remote, &[test, "-s", size, "-n", "100"]);
        check_latency(&report, test, size.parse().unwrap(), 100);
    }
    let report = perf(local, remote, &["atomic_lat", "-n", "100"]);
    check_latency(&report, "atomic_lat", 8, 100);
}

#[test]
fn figures_add_up_between_two_functions_of_one_rnicd() {
    let rnicd = Rnicd::start(1, &[]);
    every_test(&rnicd.socket("pf"), &rnicd.socket("vf0"));
}

/// 256 QP pairs need more doorbell slots than one doorbell page holds (two per QP): the
/// driver spills to further pages, and every QP moves and checks its own data.
#[test]
fn every_one_of_256_qps_moves_its_data() {
    let rnicd = Rnicd::start(1, &[]);
    let (qps, iters) = (256u64, 8u64);
    for test in ["write_bw", "send_bw"] {
        let report = perf(
            &rnicd.socket("pf"),
            &rnicd.socket("vf0"),
            &[test, "-s", "64", "-q", "256", "-t", "4", "-n", "8"],
        );
        check_bandwidth(&report, test, &[64], qps, iters);
        let r = &report["results"][0];
        let per_qp = r["messages_per_qp"].as_array().expect("messages_per_qp");
        assert_eq!(per_qp.len() as u64, qps, "{r}");
        assert!(per_qp.iter().all(|n| n.as_u64() == Some(iters)), "{r}");
        assert_eq!(u(r, "qps_checked"), qps, "{test}: {r}");
    }
}

/// Repeated runs and several sizes use the same QPs: a SEND run (bandwidth or latency)
/// leaves no receive posted for the next (which would overflow the receive queue) and
/// every run moves and checks all its messages.
#[test]
fn sends_run_again_on_the_same_qps() {
    let rnicd = Rnicd::start(1, &[]);
    let report = perf(
        &rnicd.socket("pf"),
        &rnicd.socket("vf0"),
        &[
            "send_bw", "-s", "512", "-n", "40", "-t", "16", "--repeat", "3",
        ],
    );
    check_bandwidth(&report, "send_bw", &[512], 1, 40);
    let report = perf(
        &rnicd.socket("pf"),
        &rnicd.socket("vf0"),
        &[
            "send_bw", "-s", "256", "-D", "0.05", "-t", "16", "--repeat", "2",
        ],
    );
    let r = &report["results"][0];
    assert!(u(r, "iterations") > 0, "{r}");
    assert_eq!(u(r, "bytes_completed"), u(r, "iterations") * 256, "{r}");
    let report = perf(
        &rnicd.socket("pf"),
        &rnicd.socket("vf0"),
        &["send_lat", "-s", "64", "-n", "30", "--repeat", "3"],
    );
    check_latency(&report, "send_lat", 64, 30);
}

#[test]
fn figures_add_up_between_two_rnicd_over_udp() {
    let a = Rnicd::start(0, &["--net", "udp:127.0.61.1"]);
    let b = Rnicd::start(0, &["--net", "udp:127.0.62.1"]);
    let report = perf(
        &a.socket("pf"),
        &b.socket("pf"),
        &["write_bw", "-s", "65536", "-n", "50", "-q", "2"],
    );
    check_bandwidth(&report, "write_bw", &[65536], 2, 50);
    let report = perf(&a.socket("pf"), &b.socket("pf"), &["send_lat", "-n", "50"]);
    check_latency(&report, "send_lat", 65536, 50);
}

#[test]
fn a_bad_configuration_is_refused_with_the_fix() {
    let rnicd = Rnicd::start(1, &[]);
    let out = Command::new(bin("rnic-perf"))
        .args(["write_bw", "--mtu", "3000", "--vfio-user"])
        .arg(rnicd.socket("pf"))
        .arg("--remote-vfio-user")
        .arg(rnicd.socket("vf0"))
        .output()
        .expect("run rnic-perf");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("256, 512, 1024, 2048 or 4096"), "{err}");
    let out = Command::new(bin("rnic-perf"))
        .args(["write_bw", "--vfio-user"])
        .arg(rnicd.socket("pf"))
        .output()
        .expect("run rnic-perf");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--remote-vfio-user"), "{err}");
}

/// perftest's `-e`: the driver sleeps on the completion interrupt (an MSI-X eventfd of
/// the vfio-user transport) instead of spinning, and every test still moves and checks
/// every byte; write_lat then wakes its target with WRITE with immediate.
#[test]
fn events_mode_sleeps_on_interrupts_and_moves_everything() {
    let rnicd = Rnicd::start(2, &[]);
    let (local, remote) = (rnicd.socket("vf0"), rnicd.socket("vf1"));
    for test in ["write_bw", "read_bw", "send_bw"] {
        let report = perf(
            &local,
            &remote,
            &[test, "-e", "-s", "4096", "-n", "300", "-q", "2", "-t", "32"],
        );
        assert_eq!(report["events"], true, "{report}");
        check_bandwidth(&report, test, &[4096], 2, 300);
    }
    for (test, size) in [("write_lat", "8"), ("send_lat", "64"), ("atomic_lat", "8")] {
        let report = perf(&local, &remote, &[test, "-e", "-s", size, "-n", "100"]);
        assert_eq!(report["events"], true, "{report}");
        check_latency(&report, test, size.parse().unwrap(), 100);
    }
}

/// Checks a report of several pairs: each pair's own figures, and a sum that adds them up
/// against N baselines measured at once.
fn check_pairs(report: &Value, test: &str, pairs: usize, size: u64, iters: u64) {
    assert_eq!(report["test"], test);
    let each = report["pairs"].as_array().expect("pairs");
    assert_eq!(each.len(), pairs, "{report}");
    for p in each {
        check_bandwidth_figures(p, test, &[size], 1, iters);
    }
    let agg = &report["aggregate"][0];
    assert_eq!(u(agg, "bytes"), size);
    assert_eq!(u(agg, "messages"), pairs as u64 * iters, "{agg}");
    let (avg, secs) = (f(agg, &["avg_mib_s"]), f(agg, &["seconds"]));
    let expect = (pairs as u64 * iters * size) as f64 / secs / (1u64 << 20) as f64;
    assert!((avg - expect).abs() <= expect * 1e-6, "{agg}");
    // The pairs started together: the span is no shorter than any pair's run.
    for p in each {
        assert!(
            f(&p["results"][0], &["bandwidth", "seconds"]) <= secs + 1e-9,
            "{report}"
        );
    }
    assert_eq!(u(&agg["baseline"], "threads"), pairs as u64);
    let memcpy = f(agg, &["baseline", "memcpy_mib_s"]);
    assert!(
        (f(agg, &["ratio_memcpy"]) - avg / memcpy).abs() < 1e-9,
        "{agg}"
    );
}

/// `--pairs N`: VF 2k posts to VF 2k+1, all pairs at once, each driven by its own
/// thread; with events too. The same through the options of each pair, across two rnicd.
#[test]
fn several_pairs_run_at_once_and_add_up() {
    let rnicd = Rnicd::start(4, &[]);
    let dir = rnicd.socket_dir();
    for extra in [&[][..], &["-e"][..]] {
        let mut args: Vec<&std::ffi::OsStr> =
            ["write_bw", "-s", "8192", "-n", "400", "--pairs", "2"]
                .iter()
                .chain(extra)
                .map(|a| a.as_ref())
                .collect();
        args.extend(["--socket-dir".as_ref(), dir.as_os_str()]);
        check_pairs(&perf_with(&args), "write_bw", 2, 8192, 400);
    }
    let other = Rnicd::start(2, &[]);
    let sockets = [
        rnicd.socket("vf0"),
        rnicd.socket("vf1"),
        other.socket("vf0"),
        other.socket("vf1"),
    ];
    let mut args: Vec<&std::ffi::OsStr> = ["send_bw", "-s", "1000", "-n", "200"]
        .iter()
        .map(|a| a.as_ref())
        .collect();
    for pair in sockets.chunks(2) {
        args.extend([
            "--vfio-user".as_ref(),
            pair[0].as_os_str(),
            "--remote-vfio-user".as_ref(),
            pair[1].as_os_str(),
        ]);
    }
    check_pairs(&perf_with(&args), "send_bw", 2, 1000, 200);
    // Latency under other pairs' load is not a perftest figure: refused with the reason.
    let out = Command::new(bin("rnic-perf"))
        .args(["write_lat", "--pairs", "2", "--socket-dir"])
        .arg(&dir)
        .output()
        .expect("run rnic-perf");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bandwidth tests"), "{err}");
}
