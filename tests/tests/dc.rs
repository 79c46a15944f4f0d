//! The Dynamically Connected transport (datasheet §14.8): one DCI reaches three DCTs,
//! connecting to each in turn, over one rnicd (four VFs), over two rnicd on UDP, and over
//! a lossy switch. Every WR completes once, in order; every byte is checked.

use std::time::Duration;

use rnic_driver::verbs::{
    DcAddress, Qp, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rnic_tests::tshark;
use rnic_tests::verbs_pair::{poll_n, read_mr, side, signaled, PairOptions, Side};
use rnic_tests::wire::{carried_icrc, expected_icrc, pcap_frames};
use rnic_tests::Rnicd;

const T: Duration = Duration::from_secs(20);
/// Bytes of each SEND, WRITE and READ: two packets at the DC path MTU (4096).
const LEN: usize = 5000;
const ROUNDS: usize = 3;
/// Where in each target's buffer the WRITEs land, and in the DCI's the READs.
const WRITE_AREA: usize = 256 * 1024;
const READ_AREA: usize = 512 * 1024;

fn data(target: usize, round: usize, what: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8) ^ (target as u8 * 31) ^ (round as u8 * 7) ^ what)
        .collect()
}

fn key(i: usize) -> u64 {
    0xDC00_0000_0000_0000 | ((i as u64 + 1) * 0x1111)
}

/// A DCT on `t` with key `key(i)`, its receives posted.
fn dct_on(t: &Side, i: usize, o: &PairOptions) -> Qp {
    let dct = t.pd.create_dct(&t.cq, o.caps, None, key(i)).expect("dct");
    dct.dct_ready(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ)
        .expect("dct ready");
    for r in 0..ROUNDS {
        dct.post_recv(&RecvWr {
            wr_id: (i * 100 + r) as u64,
            sges: vec![t.mr.sge(r * LEN, LEN)],
        })
        .expect("recv");
    }
    dct
}

fn dci_on(a: &Side, o: &PairOptions) -> Qp {
    let dci = a.pd.create_dci(&a.cq, o.caps, false).expect("dci");
    dci.dci_ready(o.timeout, o.retry_cnt, o.max_rd_atomic)
        .expect("dci ready");
    dci
}

fn addr(t: &Side, dct: &Qp, key: u64) -> DcAddress {
    DcAddress {
        dctn: dct.qp_num(),
        dgid: t.gid,
        dc_key: key,
    }
}

/// SENDs and WRITEs to every target, interleaved, then READs back; checks everything.
fn exercise(a: &Side, targets: &[&Side]) {
    let o = PairOptions::default();
    let dcts: Vec<Qp> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| dct_on(t, i, &o))
        .collect();
    let dci = dci_on(a, &o);
    let to = |i: usize| addr(targets[i], &dcts[i], key(i));
    let mut wrs: Vec<(SendWr, usize)> = Vec::new();
    let mut at = 0;
    for r in 0..ROUNDS {
        for (i, t) in targets.iter().enumerate() {
            a.mr.write(at, &data(i, r, 0));
            let send = signaled(0, WrOpcode::Send, vec![a.mr.sge(at, LEN)]);
            at += LEN;
            a.mr.write(at, &data(i, r, 0x80));
            let write = signaled(
                0,
                WrOpcode::RdmaWrite {
                    remote_addr: t.mr.addr(WRITE_AREA + r * LEN),
                    rkey: t.mr.rkey(),
                },
                vec![a.mr.sge(at, LEN)],
            );
            at += LEN;
            wrs.push((send, i));
            wrs.push((write, i));
        }
    }
    for r in 0..ROUNDS {
        for (i, t) in targets.iter().enumerate() {
            let read = signaled(
                0,
                WrOpcode::RdmaRead {
                    remote_addr: t.mr.addr(WRITE_AREA + r * LEN),
                    rkey: t.mr.rkey(),
                },
                vec![a.mr.sge(READ_AREA + (r * targets.len() + i) * LEN, LEN)],
            );
            wrs.push((read, i));
        }
    }
    for (n, (wr, i)) in wrs.iter_mut().enumerate() {
        wr.wr_id = n as u64;
        dci.post_dc_send(wr, &to(*i)).expect("post");
    }
    let got = poll_n(&a.cq, wrs.len(), T);
    let ids: Vec<(u64, Result<WcStatus, u8>)> = got.iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<(u64, Result<WcStatus, u8>)> = (0..wrs.len() as u64)
        .map(|n| (n, Ok(WcStatus::Success)))
        .collect();
    assert_eq!(ids, want, "every WR completes once, in order, with success");
    assert!(poll_n(&a.cq, 1, Duration::from_millis(50)).is_empty());
    for (i, t) in targets.iter().enumerate() {
        let recvs = poll_n(&t.cq, ROUNDS, T);
        assert_eq!(recvs.len(), ROUNDS, "target {i}: receives");
        for (r, wc) in recvs.iter().enumerate() {
            assert_eq!(
                (wc.wr_id, wc.status, wc.opcode, wc.byte_len as usize),
                (
                    (i * 100 + r) as u64,
                    Ok(WcStatus::Success),
                    WcOpcode::Recv,
                    LEN
                )
            );
            assert!(read_mr(&t.mr, r * LEN, LEN) == data(i, r, 0), "SEND data");
            assert!(
                read_mr(&t.mr, WRITE_AREA + r * LEN, LEN) == data(i, r, 0x80),
                "WRITE data"
            );
            assert!(
                read_mr(&a.mr, READ_AREA + (r * targets.len() + i) * LEN, LEN) == data(i, r, 0x80),
                "READ data"
            );
        }
    }
}

fn sides(rnicd: &Rnicd, names: &[&str]) -> Vec<Side> {
    names
        .iter()
        .map(|n| side(&rnicd.socket(n), &PairOptions::default()))
        .collect()
}

/// Vendor BTH opcodes of the DC handshake (datasheet §14.8).
const DC_CONNECT: u8 = 0xC0;
const DC_DISCONNECT: u8 = 0xC1;
/// Where the BTH starts in a captured RoCEv2 frame (Ethernet, IPv4, UDP).
const BTH: usize = 42;

fn bth_psn(frame: &[u8]) -> u32 {
    u32::from_be_bytes([0, frame[BTH + 9], frame[BTH + 10], frame[BTH + 11]])
}

fn bth_dest_qp(frame: &[u8]) -> u32 {
    u32::from_be_bytes([0, frame[BTH + 5], frame[BTH + 6], frame[BTH + 7]])
}

/// Checks a lossless DC capture: Wireshark flags nothing (it shows the handshake
/// opcodes as unknown, their DCETH as vendor data); one connect per run of WRs for one
/// target and one disconnect between runs, each with a valid ICRC, the DCETH (key, DCI
/// QPN, reserved) and an ACK request; the first request after a connect takes the next
/// PSN.
fn check_dc_capture(pcap: &std::path::Path, runs: &[usize]) {
    tshark::assert_nothing_flagged(pcap);
    let frames = pcap_frames(&std::fs::read(pcap).unwrap());
    let control = |opcode: u8| -> Vec<&Vec<u8>> {
        frames
            .iter()
            .filter(|f| f.get(BTH) == Some(&opcode))
            .collect()
    };
    let (connects, disconnects) = (control(DC_CONNECT), control(DC_DISCONNECT));
    assert_eq!(connects.len(), runs.len(), "one DC_CONNECT per run");
    assert_eq!(
        disconnects.len(),
        runs.len() - 1,
        "a DC_DISCONNECT between runs"
    );
    for (f, target) in connects.iter().zip(runs) {
        assert_eq!(f.len(), BTH + 12 + 16 + 4, "BTH, DCETH, ICRC");
        assert_eq!(carried_icrc(f), expected_icrc(f));
        assert!(f[BTH + 8] & 0x80 != 0, "a handshake asks for an ACK");
        assert_eq!(f[BTH + 12..BTH + 20], key(*target).to_be_bytes(), "DC key");
        assert_eq!(f[BTH + 24..BTH + 28], [0; 4], "DCETH reserved");
        let next = psn_after(bth_psn(f));
        assert!(
            frames.iter().any(|d| d[BTH] < DC_CONNECT
                && bth_dest_qp(d) == bth_dest_qp(f)
                && bth_psn(d) == next),
            "data after a connect continues its PSN"
        );
    }
    for f in &disconnects {
        assert_eq!(carried_icrc(f), expected_icrc(f));
        assert_eq!(
            f[BTH + 20..BTH + 24],
            connects[0][BTH + 20..BTH + 24],
            "DCI QPN"
        );
    }
}

fn psn_after(p: u32) -> u32 {
    (p + 1) & 0xFF_FFFF
}

#[test]
fn one_dci_reaches_three_dcts_of_one_rnicd() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("dc.pcap");
    let mut rnicd = Rnicd::start(4, &["--pcap", pcap.to_str().unwrap()]);
    let s = sides(&rnicd, &["vf0", "vf1", "vf2", "vf3"]);
    exercise(&s[0], &[&s[1], &s[2], &s[3]]);
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget(s);
    // SENDs and WRITEs visit the targets 0, 1, 2 three times; the READs do it again.
    let runs: Vec<usize> = (0..2 * ROUNDS).flat_map(|_| 0..3).collect();
    check_dc_capture(&pcap, &runs);
}

#[test]
fn one_dci_reaches_three_dcts_of_another_rnicd_over_udp() {
    let ra = Rnicd::start(1, &["--net", "udp:127.0.80.1"]);
    let rb = Rnicd::start(3, &["--net", "udp:127.0.81.1"]);
    let a = sides(&ra, &["vf0"]);
    let b = sides(&rb, &["vf0", "vf1", "vf2"]);
    exercise(&a[0], &[&b[0], &b[1], &b[2]]);
}

#[test]
fn dc_data_arrives_over_a_lossy_network() {
    let rnicd = Rnicd::start(4, &["--net-faults", "loss=0.05,seed=7"]);
    let s = sides(&rnicd, &["vf0", "vf1", "vf2", "vf3"]);
    exercise(&s[0], &[&s[1], &s[2], &s[3]]);
}

#[test]
fn a_wrong_dc_key_fails_the_wr_with_remote_access_error_and_the_dci_goes_to_error() {
    let rnicd = Rnicd::start(2, &[]);
    let s = sides(&rnicd, &["vf0", "vf1"]);
    let (a, t) = (&s[0], &s[1]);
    let o = PairOptions::default();
    let dct = dct_on(t, 0, &o);
    let dci = dci_on(a, &o);
    t.mr.write(WRITE_AREA, &[0x77; 64]);
    let wrong = addr(t, &dct, key(0) ^ 1);
    let write = |wr_id| {
        signaled(
            wr_id,
            WrOpcode::RdmaWrite {
                remote_addr: t.mr.addr(WRITE_AREA),
                rkey: t.mr.rkey(),
            },
            vec![a.mr.sge(0, 64)],
        )
    };
    dci.post_dc_send(&write(1), &wrong).unwrap();
    dci.post_dc_send(&write(2), &addr(t, &dct, key(0))).unwrap();
    let got = poll_n(&a.cq, 2, T);
    let st: Vec<_> = got.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![
            (1, Ok(WcStatus::RemAccessErr)),
            (2, Ok(WcStatus::WrFlushErr))
        ]
    );
    assert_eq!(
        read_mr(&t.mr, WRITE_AREA, 64),
        vec![0x77; 64],
        "nothing written"
    );
    assert!(poll_n(&t.cq, 1, Duration::from_millis(50)).is_empty());
    // The DCT still serves a DCI with the right key.
    let dci2 = dci_on(a, &o);
    a.mr.write(0, &[0x42; 64]);
    dci2.post_dc_send(&write(3), &addr(t, &dct, key(0)))
        .unwrap();
    let got = poll_n(&a.cq, 1, T);
    assert_eq!((got[0].wr_id, got[0].status), (3, Ok(WcStatus::Success)));
    assert_eq!(read_mr(&t.mr, WRITE_AREA, 64), vec![0x42; 64]);
}
