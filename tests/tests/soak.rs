//! Sustained traffic between two rnicd over loopback UDP keeps rnicd's memory flat: once
//! warm, streaming SENDs, WRITEs and READs for a minute must not grow either
//! process's resident set by more than a little.

use std::time::{Duration, Instant};

use rnic_driver::verbs::{RecvWr, SendWr, WcStatus, WrOpcode};
use rnic_tests::net::two_rnicd;
use rnic_tests::verbs_pair::{pattern, poll_n, read_mr, signaled, PairOptions, Side};

/// How long the traffic runs before the first sample, and after it.
const WARM_UP: Duration = Duration::from_secs(5);
const MEASURED: Duration = Duration::from_secs(60);
/// Growth of VmRSS allowed over the measured part, per process.
const MAX_GROWTH_KIB: u64 = 2048;

/// A process's resident set size, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of KiB")
}

/// Byte ranges of each side's buffer: a source, a WRITE target, a receive area.
const SRC: usize = 0;
const DST: usize = 1 << 20;
const RECV: usize = 2 << 20;
const LEN: usize = 64 << 10;
/// Work requests in one round.
const ROUND: u64 = 12;

/// One round of traffic from `a` to `b`: WRITEs, SENDs and READs, all completed with
/// success, and the round's last WRITE checked byte for byte.
fn round(a: &Side, b: &Side, n: u64) {
    let data = pattern(LEN, n);
    a.mr.write(SRC, &data);
    let recvs: Vec<RecvWr> = (0..ROUND / 3)
        .map(|i| RecvWr {
            wr_id: i,
            sges: vec![b.mr.sge(RECV, LEN)],
        })
        .collect();
    b.qp.post_recv_list(&recvs).expect("post_recv");
    let wrs: Vec<SendWr> = (0..ROUND)
        .map(|i| {
            let (opcode, at) = match i % 3 {
                0 => (
                    WrOpcode::RdmaWrite {
                        remote_addr: b.mr.addr(DST),
                        rkey: b.mr.rkey(),
                    },
                    SRC,
                ),
                1 => (WrOpcode::Send, SRC),
                _ => (
                    WrOpcode::RdmaRead {
                        remote_addr: b.mr.addr(DST),
                        rkey: b.mr.rkey(),
                    },
                    DST,
                ),
            };
            signaled(i, opcode, vec![a.mr.sge(at, LEN)])
        })
        .collect();
    a.qp.post_send_list(&wrs).expect("post_send");
    let t = Duration::from_secs(10);
    let sent = poll_n(&a.cq, ROUND as usize, t);
    let received = poll_n(&b.cq, (ROUND / 3) as usize, t);
    assert_eq!(sent.len() as u64, ROUND, "round {n}: send completions");
    assert_eq!(received.len() as u64, ROUND / 3, "round {n}: receives");
    for wc in sent.iter().chain(&received) {
        assert_eq!(wc.status, Ok(WcStatus::Success), "round {n}: {wc:?}");
    }
    assert!(read_mr(&b.mr, DST, LEN) == data, "round {n}: WRITE data");
    assert!(read_mr(&b.mr, RECV, LEN) == data, "round {n}: SEND data");
}

#[test]
fn sustained_traffic_keeps_rnicd_memory_flat() {
    let o = PairOptions {
        buf_len: 4 << 20,
        // 1 s per try: a loaded machine that starves a process for a while must not end
        // the connection; retries are not what this measures.
        timeout: 18,
        ..PairOptions::default()
    };
    let (rnicd_a, rnicd_b, a, b) = two_rnicd(
        ["udp:127.0.11.1", "udp:127.0.12.1"],
        &[],
        &o,
        (0xFF_0000, 0x42),
    );

    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < WARM_UP {
        round(&a, &b, n);
        round(&b, &a, n + 1);
        n += 2;
    }
    let before = [rss_kib(rnicd_a.pid()), rss_kib(rnicd_b.pid())];
    let measured = Instant::now();
    let warm_rounds = n;
    while measured.elapsed() < MEASURED {
        round(&a, &b, n);
        round(&b, &a, n + 1);
        n += 2;
    }
    let after = [rss_kib(rnicd_a.pid()), rss_kib(rnicd_b.pid())];
    let bytes = (n - warm_rounds) * ROUND * LEN as u64;
    eprintln!(
        "{} rounds ({} MiB) in {:?} after {warm_rounds} to warm up; VmRSS KiB A {} -> {}, \
         B {} -> {}",
        n - warm_rounds,
        bytes >> 20,
        measured.elapsed(),
        before[0],
        after[0],
        before[1],
        after[1]
    );
    for (who, (b0, b1)) in ["A", "B"].iter().zip(before.iter().zip(&after)) {
        assert!(
            b1.saturating_sub(*b0) <= MAX_GROWTH_KIB,
            "rnicd {who} grew from {b0} KiB to {b1} KiB under steady traffic"
        );
    }
}
