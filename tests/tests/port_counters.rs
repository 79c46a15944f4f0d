//! The counters the PF reads after real traffic between two rnicd: GET_PORT_STATS of each
//! one's network port (`--net eth:dgram`, `--net udp:`) and GET_STATS of the function
//! that used it, read through `rnic-admin --json stats`; one side's port must have
//! received exactly what the other's sent, and each port must have carried exactly its
//! function's frames (and its own ARP). At exit, rnicd logs both.

use std::time::Duration;

use rnic_tests::net::two_rnicd_with;
use rnic_tests::ops::{all_ops, atomics};
use rnic_tests::verbs_pair::{PairOptions, Side};
use rnic_tests::{free_port, logged_count, wait_for, Rnicd};
use serde_json::Value;

fn options() -> PairOptions {
    PairOptions {
        buf_len: 4 << 20,
        ..PairOptions::default()
    }
}

/// Every operation both ways, messages from empty (the shortest frames) to many MTUs.
fn traffic(a: &Side, b: &Side) {
    for (i, len) in [0, 1024, 4099, 64 << 10].into_iter().enumerate() {
        all_ops(a, b, len, i as u64 + 1);
    }
    atomics(a, b);
    all_ops(b, a, 3000, 99);
}

/// GET_STATS of every member and GET_PORT_STATS of `rnicd`, once two readings 100 ms
/// apart agree (the last ACKs have landed).
fn settled_counters(rnicd: &Rnicd) -> Value {
    let read = || serde_json::from_str::<Value>(&rnicd.admin(&["--json", "stats"])).expect("JSON");
    let mut last = read();
    wait_for(Duration::from_secs(10), "the counters to settle", || {
        std::thread::sleep(Duration::from_millis(100));
        let now = read();
        std::mem::replace(&mut last, now) == last
    });
    last
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Runs traffic between VF0 of two rnicd started with `args`, whose network ports are of
/// `kind`, and checks the counters the PFs read and the ones rnicd logs at exit.
fn check_counters(args: [&[&str]; 2], kind: &str) {
    let (rnicd_a, rnicd_b, a, b) = two_rnicd_with(args, &options(), (0x10, 0x20));
    traffic(&a, &b);
    let (ca, cb) = (settled_counters(&rnicd_a), settled_counters(&rnicd_b));
    let eth = kind == "eth";
    for (c, other) in [(&ca, &cb), (&cb, &ca)] {
        let (port, peer) = (&c["port"], &other["port"]);
        let (vf0, pf) = (&c["members"][1], &c["members"][0]);
        assert_eq!(port["kind"], kind, "{port}");
        assert_eq!(vf0["name"], "vf0");
        // Nothing was lost between two sockets of one host, so one side's port received
        // exactly what the other's sent.
        for key in [
            "tx_dropped",
            "rx_dropped",
            "rx_kernel_dropped",
            "not_for_us",
        ] {
            assert_eq!(n(port, key), 0, "{key}: {port}");
        }
        assert!(n(port, "tx_frames") > 100, "{port}");
        for (tx, rx) in [
            ("tx_frames", "rx_frames"),
            ("tx_bytes", "rx_bytes"),
            ("arp_sent", "arp_received"),
        ] {
            assert_eq!(n(port, tx), n(peer, rx), "{tx}/{rx}: {port} {peer}");
        }
        assert_eq!(n(port, "arp_sent") > 0, eth, "{port}");
        // The port carried VF0's frames and its own ARP, nothing else: the PF sent none.
        assert_eq!(n(pf, "tx_packets"), 0, "{pf}");
        let data_tx = n(port, "tx_frames") - n(port, "arp_sent");
        assert_eq!(n(vf0, "tx_packets"), data_tx, "{vf0} {port}");
        let data_rx = n(port, "rx_frames") - n(port, "arp_received");
        assert_eq!(n(port, "rx_delivered"), data_rx, "{port}");
        // What arrived was accepted, or dropped by the transport (duplicates).
        let taken = n(vf0, "rx_packets") + n(vf0, "rx_errors");
        assert_eq!(taken, data_rx, "{vf0} {port}");
        // Bytes: GET_STATS counts frames as the function built and received them; an
        // Ethernet port counts them as on the wire, ARP and the shortest RoCEv2 frames
        // (58 bytes) padded to 60.
        let tx_extra = n(port, "tx_bytes") - n(vf0, "tx_bytes") - 60 * n(port, "arp_sent");
        let rx_extra = n(port, "rx_bytes") - n(vf0, "rx_bytes") - 60 * n(port, "arp_received");
        if eth {
            assert!(tx_extra <= 2 * data_tx, "{vf0} {port}");
            assert!(rx_extra <= 2 * data_rx, "{vf0} {port}");
        } else {
            assert_eq!((tx_extra, rx_extra), (0, 0), "{vf0} {port}");
        }
    }
    // The sides go away and their functions are reset: the exit log still tells what
    // VF0 carried, beside the port's counters.
    drop((a, b));
    for (mut rnicd, c) in [(rnicd_b, &cb), (rnicd_a, &ca)] {
        wait_for(Duration::from_secs(10), "VF0's reset", || {
            let now: Value =
                serde_json::from_str(&rnicd.admin(&["--json", "stats", "vf0"])).expect("JSON");
            n(&now[0], "tx_packets") == 0
        });
        assert!(rnicd.stop_with(libc::SIGTERM).success());
        let log = rnicd.log();
        let (vf0, port) = (&c["members"][1], &c["port"]);
        // The line since its last reset: `vf0: tx N rx N ...`.
        assert_eq!(
            logged_count(&log, "vf0: tx ", "rx"),
            0,
            "reset when its client left"
        );
        for key in ["tx_packets", "tx_bytes", "rx_packets", "rx_bytes"] {
            assert_eq!(
                logged_count(&log, "vf0: since start: ", key),
                n(vf0, key),
                "{key}"
            );
        }
        let prefix = format!("port ({kind}): ");
        for key in ["tx_frames", "tx_bytes", "rx_frames", "rx_kernel_dropped"] {
            assert_eq!(logged_count(&log, &prefix, key), n(port, key), "{key}");
        }
    }
}

#[test]
fn an_eth_dgram_link_counts_every_frame_in_the_port_and_function_counters() {
    let (p1, p2) = (free_port(), free_port());
    let net_a = format!("eth:dgram:127.0.0.1:{p1}:127.0.0.1:{p2}");
    let net_b = format!("eth:dgram:127.0.0.1:{p2}:127.0.0.1:{p1}");
    check_counters(
        [
            &["--net", &net_a, "--net-ip", "10.51.0.1"],
            &["--net", &net_b, "--net-ip", "10.51.1.1"],
        ],
        "eth",
    );
}

#[test]
fn a_udp_network_counts_every_frame_in_the_port_and_function_counters() {
    check_counters(
        [&["--net", "udp:127.0.201.1"], &["--net", "udp:127.0.202.1"]],
        "udp",
    );
}
