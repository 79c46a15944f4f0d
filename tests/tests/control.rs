//! rnicd's read-only control socket (§12.9) while clients hold every function, the PF
//! included: `rnic-admin --control` shows live counters, per-reason drops and QPs with
//! their PSNs advancing, without disturbing the traffic (every WR still completes once,
//! with success, and every byte arrives); a hostile client of the socket gets an error and
//! changes nothing.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use rnic_control::{QpEntry, Request, Resource, Stats};
use rnic_driver::verbs::{WcStatus, WrOpcode};
use rnic_tests::verbs_pair::{pair, pattern, poll_n, read_mr, signaled, PairOptions};
use rnic_tests::{bin, Rnicd};

/// Loss makes the responder drop what follows a lost packet (`psn`); corruption makes it
/// drop frames whose ICRC or IPv4 checksum no longer match (`icrc`, `checksum`).
const FAULTS: &str = "--net-faults=loss=0.03,corrupt=0.03,seed=11";

/// `rnic-admin --control DIR ARGS`: what it printed; it must succeed.
fn admin(rnicd: &Rnicd, args: &[&str]) -> String {
    let out = Command::new(bin("rnic-admin"))
        .arg("--control")
        .arg(rnicd.socket_dir())
        .args(args)
        .output()
        .expect("run rnic-admin");
    assert!(
        out.status.success(),
        "rnic-admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn qp(rnicd: &Rnicd, function: &str) -> QpEntry {
    let socket = rnicd.socket_dir().join(rnic_control::SOCKET_NAME);
    let qps: Vec<QpEntry> = rnic_control::query(&socket, Request::Res(Resource::Qp)).unwrap();
    qps.into_iter()
        .find(|q| q.function == function)
        .unwrap_or_else(|| panic!("no QP of {function}"))
}

/// Posts `count` signaled RDMA WRITEs of 3000 bytes from `a` into `b` and checks each
/// completes once, with success, and that the bytes arrived.
fn writes(
    a: &rnic_tests::verbs_pair::Side,
    b: &rnic_tests::verbs_pair::Side,
    round: u64,
    count: u64,
) {
    let data = pattern(3000, round);
    a.mr.write(0, &data);
    for i in 0..count {
        let wr = signaled(
            round * 1000 + i,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(4096 * (i % 64) as usize),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, data.len())],
        );
        a.qp.post_send(&wr).expect("post");
        if i % 32 == 31 || i + 1 == count {
            let want = (i % 32 + 1) as usize;
            let wcs = poll_n(&a.cq, want, Duration::from_secs(60));
            assert_eq!(wcs.len(), want, "completions of round {round}");
            assert!(
                wcs.iter().all(|w| w.status == Ok(WcStatus::Success)),
                "{wcs:?}"
            );
        }
    }
    for i in 0..count.min(64) {
        assert_eq!(read_mr(&b.mr, 4096 * i as usize, data.len()), data);
    }
}

#[test]
fn live_counters_drops_and_qps_while_every_function_is_held() {
    let rnicd = Rnicd::start(2, &[FAULTS]);
    // The PF is held too, by a client that only opened it (as a VM holding the PF).
    let _pf = rnic_tests::verbs_pair::side(&rnicd.socket("pf"), &PairOptions::default());
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());

    writes(&a, &b, 1, 150);
    let before = qp(&rnicd, "vf0");
    assert_eq!(
        (before.state.as_str(), before.r#type.as_str()),
        ("RTS", "RC")
    );
    assert_eq!(before.rqpn, qp(&rnicd, "vf1").lqpn, "aimed at its peer");
    writes(&a, &b, 2, 150);
    let after = qp(&rnicd, "vf0");
    // 150 WRITEs of 3 packets each at MTU 1024: the PSN moved on by 450.
    assert_eq!(after.sq_psn.wrapping_sub(before.sq_psn) & 0xFF_FFFF, 450);
    assert!(after.retransmits > before.retransmits || after.retransmits > 0);
    assert_eq!(
        qp(&rnicd, "vf1").rq_psn.wrapping_sub(0x100) & 0xFF_FFFF,
        900,
        "the responder expects the PSN after the last WRITE"
    );

    // Drops of two kinds, by reason, at the responder.
    let socket = rnicd.socket_dir().join(rnic_control::SOCKET_NAME);
    let stats: Stats = rnic_control::query(&socket, Request::Stats).unwrap();
    let vf1 = stats
        .functions
        .iter()
        .find(|f| f.function == "vf1")
        .unwrap();
    let drops = &vf1.since_reset.drops;
    assert!(drops["psn"] > 0, "losses show as PSN drops: {drops:?}");
    assert!(
        drops["icrc"] + drops["checksum"] > 0,
        "corruption shows as ICRC or checksum drops: {drops:?}"
    );
    assert_eq!(vf1.since_reset.rxe["out_of_seq_request"], drops["psn"]);
    let vf0 = stats
        .functions
        .iter()
        .find(|f| f.function == "vf0")
        .unwrap();
    assert!(vf0.since_reset.transport["retransmits"] > 0);
    assert!(vf0.since_start.transport["tx_packets"] >= 900);
    let faults = stats.faults.as_ref().expect("fault counters");
    assert!(faults["lost"] > 0 && faults["corrupted"] > 0, "{faults:?}");

    // The same through rnic-admin, as text, JSON and Prometheus' format.
    let text = admin(&rnicd, &["stats"]);
    assert!(
        text.contains("vf1:") && text.contains("drops by reason since reset"),
        "{text}"
    );
    assert!(text.contains(&format!("psn {}", drops["psn"])), "{text}");
    let qps = admin(&rnicd, &["res", "qp"]);
    assert!(
        qps.contains("function vf0 lqpn") && qps.contains("type RC state RTS"),
        "{qps}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&admin(&rnicd, &["--json", "res", "cq"])).unwrap();
    assert_eq!(
        json.as_array().map(Vec::len),
        Some(3),
        "a CQ per function: {json}"
    );
    assert!(admin(&rnicd, &["res", "mr"]).contains(&format!("lkey {:#x}", b.mr.rkey())));
    assert_eq!(admin(&rnicd, &["res", "pd"]).lines().count(), 3);
    let metrics = admin(&rnicd, &["metrics"]);
    assert!(
        metrics.contains("rnic_rx_drops_total{function=\"vf1\",reason=\"psn\"}"),
        "{metrics}"
    );
    let watched = admin(&rnicd, &["stats", "vf0", "--watch", "0.1", "--count", "2"]);
    assert_eq!(watched.matches("vf0:").count(), 2, "{watched}");

    // The traffic never noticed.
    writes(&a, &b, 3, 60);
}

/// Sends `bytes` to the control socket and returns the answer.
fn raw(rnicd: &Rnicd, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(rnicd.socket_dir().join(rnic_control::SOCKET_NAME)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn a_hostile_control_client_gets_an_error_and_changes_nothing() {
    let rnicd = Rnicd::start(1, &[]);
    let (a, b) = pair(&rnicd, "pf", "vf0", &PairOptions::default());
    assert!(raw(&rnicd, b"res qp qp\n").contains("\"error\":\"unknown request"));
    assert!(raw(&rnicd, b"res fish\n").contains("no resource \\\"fish\\\""));
    assert!(raw(&rnicd, &[0xff; 300]).contains("at most 128 bytes"));
    assert!(raw(&rnicd, b"\xff\xfe\n").contains("not UTF-8"));
    // One that says nothing is dropped at the timeout, and the next is served.
    let silent = UnixStream::connect(rnicd.socket_dir().join(rnic_control::SOCKET_NAME)).unwrap();
    assert!(raw(&rnicd, b"stats\n").contains("\"functions\""));
    drop(silent);
    // The functions kept working.
    writes(&a, &b, 1, 10);
    assert_eq!(admin(&rnicd, &["res", "qp"]).lines().count(), 2);
    assert!(rnicd.log().contains("control socket (read-only"));
}
