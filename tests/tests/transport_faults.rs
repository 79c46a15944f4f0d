//! The RC transport against what a network does to it besides losing frames: a peer that
//! dies (its rnicd killed) and packets crafted to hurt (fuzzed headers, wrong keys, PSNs
//! far out of the window, bad lengths and pads), each between two rnicd over loopback UDP.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use rnic_abi::verbs::QpState;
use rnic_driver::verbs::{self, Qp, RecvWr, SendWr, Wc, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::net::two_rnicd;
use rnic_tests::verbs_pair::{
    buffer_bytes, connect_qps, guarded_mr, init_qp, pattern, poll_n, read_mr, side, signaled,
    PairOptions, Side,
};
use rnic_tests::wire::{datagram, reth, transport, Bth, ROCEV2_PORT};
use rnic_tests::{exit_counter, Rng, Rnicd};

const T: Duration = Duration::from_secs(10);

#[track_caller]
fn ok(side: &Side) -> Wc {
    let wcs = poll_n(&side.cq, 1, T);
    assert_eq!(wcs.len(), 1, "no completion within {T:?}");
    assert_eq!(wcs[0].status, Ok(WcStatus::Success), "{:?}", wcs[0]);
    wcs[0]
}

/// A checked RDMA WRITE of `len` bytes from `a` into `b`'s registered buffer at `at`.
#[track_caller]
fn write_checked(a: &Side, qp: &Qp, b: &Side, at: usize, len: usize, seed: u64) {
    let data = pattern(len, seed);
    a.mr.write(0, &data);
    let wr = signaled(
        seed,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(at),
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(0, len)],
    );
    qp.post_send(&wr).expect("post_send");
    let wc = ok(a);
    assert_eq!((wc.wr_id, wc.opcode), (seed, WcOpcode::RdmaWrite));
    assert!(read_mr(&b.mr, at, len) == data, "WRITE data differs");
}

/// The IPv4 address of a GID.
fn ip(gid: [u8; 16]) -> [u8; 4] {
    gid[12..].try_into().expect("4 bytes")
}

/// A peer whose rnicd is killed: the survivor's first WR fails with RETRY_EXC_ERR once
/// its retries are spent, which its `timeout` and `retry_cnt` bound, and everything
/// behind it is flushed; the survivor's device keeps working with others.
#[test]
fn a_dead_peer_ends_in_retry_exc_err_within_the_bound_and_the_device_stays_healthy() {
    let o = PairOptions {
        // 4.096 µs * 2^14 = 67 ms per try.
        timeout: 14,
        retry_cnt: 3,
        ..PairOptions::default()
    };
    let (mut rnicd_a, mut rnicd_b, a, b) =
        two_rnicd(["udp:127.0.4.1", "udp:127.0.5.1"], &[], &o, (0x10, 0x20));
    write_checked(&a, &a.qp, &b, 0, 3000, 1);

    rnicd_b.stop_with(libc::SIGKILL);
    // Its client cannot tear anything down on a dead device.
    std::mem::forget(b);
    let recvs: Vec<RecvWr> = (0..2)
        .map(|i| RecvWr {
            wr_id: 100 + i,
            sges: vec![a.mr.sge(0, 64)],
        })
        .collect();
    a.qp.post_recv_list(&recvs).expect("post_recv");
    let sends: Vec<SendWr> = (1..=4)
        .map(|i| signaled(i, WrOpcode::Send, vec![a.mr.sge(0, 2500)]))
        .collect();
    let posted = Instant::now();
    a.qp.post_send_list(&sends).expect("post_send");

    // Each of the first try and retry_cnt retries waits one full timeout.
    let per_try = Duration::from_nanos(4096 << o.timeout);
    let bound = per_try * (u32::from(o.retry_cnt) + 1);
    let slack = Duration::from_secs(2);
    let first = poll_n(&a.cq, 1, bound + slack);
    let took = posted.elapsed();
    assert_eq!(first.len(), 1, "no completion within {:?}", bound + slack);
    assert_eq!(
        (first[0].wr_id, first[0].status),
        (1, Ok(WcStatus::RetryExcErr)),
        "{first:?}"
    );
    assert!(
        took >= bound,
        "RETRY_EXC_ERR after {took:?}, before the {bound:?} the retries take"
    );
    eprintln!("RETRY_EXC_ERR after {took:?} (bound {bound:?})");
    let rest = poll_n(&a.cq, 5, T);
    let got: Vec<_> = rest
        .iter()
        .map(|w| (w.wr_id, w.status, w.is_recv()))
        .collect();
    let flushed = Ok(WcStatus::WrFlushErr);
    assert_eq!(
        got,
        vec![
            (2, flushed, false),
            (3, flushed, false),
            (4, flushed, false),
            (100, flushed, true),
            (101, flushed, true)
        ]
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(a.cq.poll(8).is_empty(), "one completion per WR");
    assert_eq!(a.qp.state().expect("query"), QpState::Err);

    // The survivor talks to a live peer as before, on a new QP of the same function.
    let rnicd_c = Rnicd::start(1, &["--net", "udp:127.0.6.1"]);
    let c = side(&rnicd_c.socket("vf0"), &o);
    let qa = init_qp(&a, &a.cq, &o, o.access);
    connect_qps((&qa, a.gid), (&c.qp, c.gid), &o, 0x300, 0x400);
    write_checked(&a, &qa, &c, 4096, 5000, 2);
    let data = pattern(1500, 3);
    c.mr.write(0, &data);
    qa.post_recv(&RecvWr {
        wr_id: 7,
        sges: vec![a.mr.sge(8192, 2048)],
    })
    .expect("post_recv");
    c.qp.post_send(&signaled(8, WrOpcode::Send, vec![c.mr.sge(0, 1500)]))
        .expect("post_send");
    ok(&c);
    let wc = ok(&a);
    assert_eq!((wc.wr_id, wc.byte_len), (7, 1500));
    assert_eq!(read_mr(&a.mr, 8192, 1500), data);
    assert!(rnicd_a.alive());
    drop((qa, c));
}

/// What a user's mistake makes a peer send to an RC QP: a UC SEND (the peer's QP is UC),
/// a UD SEND (it is UD), a CNP (it runs congestion control), a packet for a QPN the
/// function does not have (a stale one), a WRITE longer than the QP's path MTU (the
/// peer's is larger). Each, sent three times, is counted under its own reason, and
/// explained at warn level once, within seconds, naming the QP, the peer and the remedy.
#[test]
fn drops_a_user_can_act_on_are_counted_by_reason_and_explained_once() {
    let o = PairOptions::default();
    let (mut rnicd_a, mut rnicd_b, a, b) = two_rnicd(
        ["udp:127.0.146.1", "udp:127.0.147.1"],
        &[],
        &o,
        (0x100, 0x200),
    );
    // A second RC QP on A, never connected: a transport mismatch is found before the
    // QP's state or peer are looked at.
    let idle = init_qp(&a, &a.cq, &o, o.access);
    let (a_ip, b_ip) = (ip(a.gid), ip(b.gid));
    let (qpn, idle_qpn) = (a.qp.qp_num(), idle.qp_num());
    let stale = qpn + 1000;
    let epsn = a.qp.query().expect("query").attr.rq_psn;
    let (va, rkey) = (a.mr.addr(0), a.mr.rkey());
    // The peer's address, so that the connected QP's source check passes.
    let peer = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(b_ip), 0)).expect("bind");
    let port = peer.local_addr().expect("addr").port();
    let to = SocketAddrV4::new(Ipv4Addr::from(a_ip), ROCEV2_PORT);
    let data = [0x5A; 64];
    let deth = [0, 0, 0, 1, 0, 0, 0, 0x42];
    let frames = [
        transport(Bth::new(0x24, qpn, epsn), &[], &data),
        transport(Bth::new(0x64, idle_qpn, 0), &deth, &data),
        transport(Bth::new(0x80, qpn, 0), &[0; 16], &[]),
        transport(Bth::new(op::SEND_ONLY, stale, epsn), &[], &data),
        transport(
            Bth::new(op::WRITE_ONLY, qpn, epsn),
            &reth(va, rkey, 2048),
            &[0x5A; 2048],
        ),
    ];
    for _ in 0..3 {
        for t in &frames {
            peer.send_to(&datagram((b_ip, port), a_ip, t), to)
                .expect("send");
        }
    }

    let b_ip = Ipv4Addr::from(b_ip);
    let warnings = [
        format!(
            "vf0: dropped a UC_SEND_ONLY from {b_ip} for RC QP {qpn:#x}: the peer's QP is UC \
             and this one is RC (make both QPs RC, or both UC)"
        ),
        format!(
            "vf0: dropped a UD_SEND_ONLY from {b_ip} for RC QP {idle_qpn:#x}: the peer sends \
             datagrams to a connected QP"
        ),
        format!("vf0: dropped a CNP from {b_ip} for RC QP {qpn:#x}: rnic does no congestion"),
        format!(
            "vf0: dropped an RC_SEND_ONLY from {b_ip} for QP {stale:#x}, which this function \
             does not have (was the QP destroyed, or is the peer using a stale QPN?)"
        ),
        format!(
            "vf0: dropped an RC_RDMA_WRITE_ONLY from {b_ip} for RC QP {qpn:#x}: its \
             2048-byte payload is more than the QP's path MTU, 1024 (set the same MTU on \
             both sides"
        ),
    ];
    for w in &warnings {
        let line = rnicd_a.wait_for_log(w, Duration::from_secs(5));
        assert!(line.contains(" WARN "), "not a warning: {line}");
    }
    // The repeats arrived too (the counters below say so): still one warning each.
    std::thread::sleep(Duration::from_millis(300));
    let log = rnicd_a.log();
    for w in &warnings {
        let n = log.lines().filter(|l| l.contains(w.as_str())).count();
        assert_eq!(n, 1, "{w:?} logged {n} times:\n{log}");
    }
    // The connection was not hurt.
    write_checked(&a, &a.qp, &b, 0, 3000, 9);

    drop(idle);
    rnicd_a.stop_with(libc::SIGTERM);
    rnicd_b.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    let log = rnicd_a.log();
    for line in log.lines().filter(|l| l.contains(" WARN ")) {
        eprintln!("{line}");
    }
    let drops = logged_drops(&log, "vf0");
    eprintln!("A's drops: {drops:?}");
    for (reason, n) in [
        ("transport", 6),
        ("opcode", 3),
        ("unknown_qp", 3),
        ("too_long", 3),
    ] {
        assert_eq!(drops[reason], n, "{reason}: {drops:?}");
    }
}

/// The per-reason drop counters rnicd logged for `function` when it stopped.
fn logged_drops(log: &str, function: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{function}: drops ");
    let line = log
        .lines()
        .rev()
        .find_map(|l| l.find(&prefix).map(|i| &l[i + prefix.len()..]))
        .unwrap_or_else(|| panic!("no drop counters of {function} in the log:\n{log}"));
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("name=value");
            (k.to_string(), v.parse().expect("a count"))
        })
        .collect()
}

/// `n` random bytes of `rng`.
fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    rng.fill(&mut b);
    b
}

/// BTH opcodes (RC).
mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_ONLY: u8 = 0x04;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_ONLY: u8 = 0x0A;
    pub const READ_REQUEST: u8 = 0x0C;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
}

/// Extension header bytes each fuzzed opcode carries, and whether it has a payload.
fn layout(opcode: u8) -> (usize, bool) {
    match opcode {
        op::SEND_FIRST | op::SEND_ONLY => (0, true),
        op::WRITE_FIRST | op::WRITE_ONLY => (16, true),
        op::READ_REQUEST => (16, false),
        op::READ_RESPONSE_ONLY => (4, true),
        op::ACKNOWLEDGE => (4, false),
        op::ATOMIC_ACKNOWLEDGE => (12, false),
        _ => (28, false),
    }
}

/// A PSN at least `min` away from `epsn`, ahead or behind, from the fuzzer's choice.
fn far_psn(rng: &mut Rng, epsn: u32, min: u32) -> u32 {
    let offset = min + (rng.next_u64() as u32) % ((1 << 23) - min);
    if rng.next_u64() & 1 == 0 {
        epsn.wrapping_add(offset) & 0xFF_FFFF
    } else {
        epsn.wrapping_sub(offset) & 0xFF_FFFF
    }
}

/// Packets crafted to hurt, sent as raw datagrams to a live QP: each is dropped by the
/// check it fails (counted by reason) or, out of the PSN window, never executed; no byte
/// of the target's memory and nothing of either QP's state changes, and the connection
/// carries checked data afterwards.
#[test]
fn hostile_packets_change_no_memory_and_no_qp_state_and_are_counted_by_reason() {
    const GUARD: usize = 4096;
    const REGION: usize = 8192;
    const FILL: u8 = 0xC3;
    let o = PairOptions::default();
    let (mut rnicd_a, mut rnicd_b, a, b) = two_rnicd(
        ["udp:127.0.7.1", "udp:127.0.8.1"],
        &[],
        &o,
        (0x1000, 0x2000),
    );
    // Targets on A: a guarded region every hostile WRITE names, and a receive posted in
    // it that any hostile SEND would fill.
    let target = guarded_mr(&a, &a.pd, GUARD, REGION, verbs::ACCESS_ALL, FILL);
    a.qp.post_recv(&RecvWr {
        wr_id: 55,
        sges: vec![target.sge(REGION / 2, REGION / 2)],
    })
    .expect("post_recv");
    a.mr.write(0, &pattern(o.buf_len, 77));
    let before_target = buffer_bytes(&target);
    let before_a = read_mr(&a.mr, 0, o.buf_len);
    let qa = a.qp.query().expect("query").attr;
    let qb = b.qp.query().expect("query").attr;
    assert_eq!(qa.qp_state, QpState::Rts as u8);
    assert_eq!((qa.sq_psn, qa.rq_psn), (0x1000, 0x2000));
    assert_eq!((qb.sq_psn, qb.rq_psn), (0x2000, 0x1000));

    let (a_ip, b_ip) = (ip(a.gid), ip(b.gid));
    let qpn = a.qp.qp_num();
    let epsn = qa.rq_psn;
    let (va, rkey) = (target.addr(0), target.rkey());
    // The hostile sender poses as B's function (the QP's peer address); any port will do.
    let spoof = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(b_ip), 0)).expect("bind");
    let spoof_port = spoof.local_addr().expect("addr").port();
    let stranger_ip = [b_ip[0], b_ip[1], b_ip[2], 99];
    let stranger = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(stranger_ip), 0))
        .expect("bind a stranger");
    let stranger_port = stranger.local_addr().expect("addr").port();
    let to = SocketAddrV4::new(Ipv4Addr::from(a_ip), ROCEV2_PORT);
    let send = |d: &[u8]| {
        spoof.send_to(d, to).expect("send");
    };
    let valid = |t: &[u8]| datagram((b_ip, spoof_port), a_ip, t);
    // A WRITE that A would execute at once: the right QP, PSN and rkey.
    let write =
        |bth: Bth, payload: &[u8]| transport(bth, &reth(va, rkey, payload.len() as u32), payload);
    let at_epsn = Bth::new(op::WRITE_ONLY, qpn, epsn);
    let data = [0xEE; 64];
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();

    // ICRC: a bit flipped in the ICRC, or in the payload after the ICRC was computed.
    for bit in 0..3 {
        let mut d = valid(&write(at_epsn, &data));
        let n = d.len();
        d[n - 1 - bit] ^= 1;
        send(&d);
        let mut d = valid(&write(at_epsn, &data));
        d[40 + bit] ^= 0x80;
        send(&d);
    }
    want.insert("icrc", 6);
    // Transport version 1, 2, 15.
    for tver in [1u8, 2, 15] {
        send(&valid(&write(
            Bth {
                flags: tver,
                ..at_epsn
            },
            &data,
        )));
    }
    want.insert("version", 3);
    // Opcodes of other transports (UC WRITE, UD SEND) and reserved ones (0x81 in the
    // CNP's range, 0x15).
    for opcode in [0x2A, 0x64] {
        send(&valid(&write(Bth { opcode, ..at_epsn }, &data)));
    }
    want.insert("transport", 2);
    for opcode in [0x81, 0x15] {
        send(&valid(&write(Bth { opcode, ..at_epsn }, &data)));
    }
    want.insert("opcode", 2);
    // Another partition.
    send(&valid(&write(
        Bth {
            pkey: 0x7FFF,
            ..at_epsn
        },
        &data,
    )));
    want.insert("pkey", 1);
    // No such QP, and QP 0.
    for dest_qp in [qpn + 1000, 0] {
        send(&valid(&write(Bth { dest_qp, ..at_epsn }, &data)));
    }
    want.insert("unknown_qp", 2);
    // Pads: one byte short of a word; more pad than bytes; a READ request with payload.
    let mut t = write(at_epsn, &[1; 61]);
    t.pop();
    send(&valid(&t));
    let mut t = write(at_epsn, &[]);
    t[1] |= 3 << 4;
    send(&valid(&t));
    let mut t = transport(
        Bth::new(op::READ_REQUEST, qpn, epsn),
        &reth(va, rkey, 64),
        &[],
    );
    t.extend_from_slice(&[0; 4]);
    send(&valid(&t));
    want.insert("pad", 3);
    // Truncated: cut inside the RETH (ICRC recomputed), and three bytes in all.
    let t = write(at_epsn, &data);
    send(&valid(&t[..12 + 8]));
    send(&[op::WRITE_ONLY, 0, 0xFF]);
    want.insert("length", 2);
    // Longer than the path MTU (1024), at the expected PSN with the right key.
    send(&valid(&write(at_epsn, &[0xEE; 1028])));
    want.insert("too_long", 1);
    // From an address other than the QP's peer.
    stranger
        .send_to(
            &datagram((stranger_ip, stranger_port), a_ip, &write(at_epsn, &data)),
            to,
        )
        .expect("send");
    want.insert("source", 1);
    // Far out of the window, with the right key and with wrong ones: ahead they are
    // out of sequence, behind they are duplicates and never executed again.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut psn_drops = 0;
    for i in 0..20u32 {
        let psn = far_psn(&mut rng, epsn, 1000);
        let key = if i % 2 == 0 { rkey } else { rkey ^ 0x5A5A };
        let bth = Bth::new(op::WRITE_ONLY, qpn, psn);
        send(&valid(&transport(bth, &reth(va, key, 64), &data)));
        psn_drops += u64::from(psn.wrapping_sub(epsn) & 0xFF_FFFF < 1 << 23);
    }
    // Duplicate READs and atomics that were never executed: nothing to answer from.
    for opcode in [op::READ_REQUEST, op::FETCH_ADD, op::COMPARE_SWAP] {
        let psn = epsn.wrapping_sub(500) & 0xFF_FFFF;
        let ext = if opcode == op::READ_REQUEST {
            reth(va, rkey, 64).to_vec()
        } else {
            let mut e = va.to_be_bytes().to_vec();
            e.extend_from_slice(&rkey.to_be_bytes());
            e.extend_from_slice(&[0; 16]);
            e
        };
        send(&valid(&transport(Bth::new(opcode, qpn, psn), &ext, &[])));
        psn_drops += 1;
    }
    want.insert("psn", psn_drops);
    // Fuzzed: random bytes in the BTH's flags, the extension headers (RETH, AETH,
    // AtomicETH, AtomicAckETH) and the payload, of requests and responses, at PSNs away
    // from the expected one.
    let opcodes = [
        op::SEND_FIRST,
        op::SEND_ONLY,
        op::WRITE_FIRST,
        op::WRITE_ONLY,
        op::READ_REQUEST,
        op::READ_RESPONSE_ONLY,
        op::ACKNOWLEDGE,
        op::ATOMIC_ACKNOWLEDGE,
        op::COMPARE_SWAP,
        op::FETCH_ADD,
    ];
    for i in 0..400 {
        let opcode = opcodes[i % opcodes.len()];
        let (ext_len, has_payload) = layout(opcode);
        let mut bth = Bth::new(opcode, qpn, far_psn(&mut rng, epsn, 2));
        // SE, MigReq and AckReq at random; the pad and version are left valid so that
        // the packets reach the transport.
        bth.flags = rng.next_u64() as u8 & 0xC0;
        bth.ack_req = rng.next_u64() & 1 == 1;
        let ext = random_bytes(&mut rng, ext_len);
        let payload = if has_payload {
            let n = (rng.next_u64() % 1025) as usize;
            random_bytes(&mut rng, n)
        } else {
            Vec::new()
        };
        send(&valid(&transport(bth, &ext, &payload)));
    }

    // Let everything arrive and be handled.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        buffer_bytes(&target) == before_target,
        "the target region changed"
    );
    assert!(
        read_mr(&a.mr, 0, o.buf_len) == before_a,
        "A's buffer changed"
    );
    assert!(a.cq.poll(8).is_empty(), "no completion on A");
    assert!(b.cq.poll(8).is_empty(), "no completion on B");
    for (who, qp, q) in [("A", &a.qp, qa), ("B", &b.qp, qb)] {
        let now = qp.query().expect("query").attr;
        assert_eq!(now.qp_state, QpState::Rts as u8, "{who}'s QP state");
        assert_eq!(
            (now.sq_psn, now.rq_psn),
            (q.sq_psn, q.rq_psn),
            "{who}'s PSNs"
        );
    }

    // The connection works, both ways, with checked data, in the target too.
    let len = REGION / 2;
    let data = pattern(len, 5);
    b.mr.write(0, &data);
    b.qp.post_send(&signaled(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: target.addr(0),
            rkey,
        },
        vec![b.mr.sge(0, len)],
    ))
    .expect("post_send");
    ok(&b);
    let sent = pattern(3000, 6);
    b.mr.write(len, &sent);
    b.qp.post_send(&signaled(2, WrOpcode::Send, vec![b.mr.sge(len, 3000)]))
        .expect("post_send");
    ok(&b);
    let wc = ok(&a);
    assert_eq!((wc.wr_id, wc.byte_len), (55, 3000));
    let mut want_target = before_target.clone();
    want_target[GUARD..GUARD + len].copy_from_slice(&data);
    want_target[GUARD + len..GUARD + len + 3000].copy_from_slice(&sent);
    assert!(
        buffer_bytes(&target) == want_target,
        "WRITE and SEND data, and nothing else"
    );
    write_checked(&a, &a.qp, &b, 0, 5000, 8);
    let (qa, qb) = (
        a.qp.query().expect("query").attr,
        b.qp.query().expect("query").attr,
    );
    assert_eq!(qa.rq_psn, qb.sq_psn, "B's requests all taken by A");
    assert_eq!(qb.rq_psn, qa.sq_psn, "A's requests all taken by B");
    // 4 + 3 packets from B, 5 from A.
    assert_eq!((qb.sq_psn, qa.sq_psn), (0x2000 + 7, 0x1000 + 5));

    // The counters are logged when rnicd stops, and must be read while the clients are
    // still attached (a function's reset clears them).
    drop(target);
    rnicd_a.stop_with(libc::SIGTERM);
    rnicd_b.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    let (log_a, log_b) = (rnicd_a.log(), rnicd_b.log());
    let drops = logged_drops(&log_a, "vf0");
    eprintln!("A's drops: {drops:?}");
    for (reason, n) in &want {
        assert!(
            drops[*reason] >= *n,
            "{reason}: {} counted, at least {n} sent",
            drops[*reason]
        );
    }
    assert_eq!(
        drops.values().sum::<u64>(),
        exit_counter(&log_a, "vf0", "dropped"),
        "the reasons add up to the total"
    );
    // A answered the first request ahead of the window with a sequence NAK, which went
    // to B, and B had sent nothing at that PSN: dropped there.
    let drops_b = logged_drops(&log_b, "vf0");
    eprintln!("B's drops: {drops_b:?}");
    assert!(drops_b["psn"] >= 1, "{drops_b:?}");
}
