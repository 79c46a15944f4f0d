//! UC QPs (ABI 1.6, `CAP_UC`): SEND and RDMA WRITE, with and without immediate, in one
//! packet and in many, complete at the sender without acknowledgements and arrive whole;
//! a message that finds no receive, too small a receive or a bad rkey is dropped by the
//! receiver without a word, and the receive waits for the next message; RC and UC QPs
//! do not talk; the frames carry rxe's UC opcodes (0x20-0x2B) with a valid ICRC. Between
//! two VFs of one rnicd, and between two rnicd over UDP.

use rnic_abi::verbs::wc_flags;
use rnic_driver::verbs::{
    self, mtu, uc_rtr_attr, uc_rts_attr, Qp, RecvWr, WcOpcode, WcStatus, WrOpcode,
};
use rnic_tests::feature_checks::{expect, QUIET};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{
    init_qp, pair, pattern, poll_n, read_mr, signaled, to_rtr, to_rts, PairOptions, Side,
};
use rnic_tests::wire::{carried_icrc, expected_icrc, pcap_frames};
use rnic_tests::Rnicd;

/// A UC QP of `side`'s PD and CQ, in INIT, allowing remote writes.
fn uc_qp(side: &Side) -> Qp {
    let qp = side
        .pd
        .create_uc_qp(&side.cq, &side.cq, PairOptions::default().caps, false)
        .expect("create a UC QP");
    let (a, m) = verbs::init_attr(verbs::ACCESS_REMOTE_WRITE);
    qp.modify(&a, m).expect("UC INIT");
    qp
}

/// Moves a UC QP in INIT to RTS, talking to `peer` (its QP and GID) at path MTU `mtu`;
/// it sends from PSN `psn`, the peer from `peer_psn`.
fn uc_connect(qp: &Qp, peer: (&Qp, [u8; 16]), mtu: u8, psn: u32, peer_psn: u32) {
    let (a, m) = uc_rtr_attr(peer.0.qp_num(), peer.1, peer_psn, mtu);
    qp.modify(&a, m).expect("UC RTR");
    let (a, m) = uc_rts_attr(psn);
    qp.modify(&a, m).expect("UC RTS");
}

/// A connected pair of UC QPs, `a`'s and `b`'s, at path MTU 1024.
fn uc_pair(a: &Side, b: &Side) -> (Qp, Qp) {
    let (qa, qb) = (uc_qp(a), uc_qp(b));
    uc_connect(&qa, (&qb, b.gid), mtu::MTU_1024, 0x10, 0xFF_FFFE);
    uc_connect(&qb, (&qa, a.gid), mtu::MTU_1024, 0xFF_FFFE, 0x10);
    (qa, qb)
}

/// The operations of the data test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
}

/// Posts a receive of `len` bytes at `offset` of `b`'s region on `qb`.
fn post_recv(b: &Side, qb: &Qp, wr_id: u64, offset: usize, len: usize) {
    qb.post_recv(&RecvWr {
        wr_id,
        sges: vec![b.mr.sge(offset, len)],
    })
    .expect("post_recv");
}

/// Sends a small SEND from `qa` into a fresh receive at the end of `b`'s region and waits
/// for it at `b`: a UC QP delivers in order, so everything `qa` sent before has been
/// placed (or dropped) by then.
fn fence_by_send(a: &Side, b: &Side, qa: &Qp, qb: &Qp, wr_id: u64) {
    let at = b.mr.len() - 64;
    post_recv(b, qb, wr_id, at, 64);
    qa.post_send(&signaled(wr_id, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
        .unwrap();
    expect(&a.cq, wr_id, WcStatus::Success);
    let got = expect(&b.cq, wr_id, WcStatus::Success);
    assert_eq!((got.opcode, got.byte_len), (WcOpcode::Recv, 8));
}

#[test]
fn uc_sends_and_writes_with_and_without_immediate_arrive_whole_in_one_packet_and_many() {
    on_both_paths(150, |a, b| {
        let (qa, qb) = uc_pair(a, b);
        let mut id = 0u64;
        for op in [Op::Send, Op::SendImm, Op::Write, Op::WriteImm] {
            // One byte, one whole packet, three packets, 65 packets with a ragged end.
            for len in [1usize, 1024, 3000, 65 * 1024 - 7] {
                id += 1;
                let what = format!("{op:?} of {len} bytes");
                let data = pattern(len, id);
                a.mr.write(0, &data);
                // The target (a WRITE's) or the receive buffer (a SEND's) at 128 KiB.
                let at = 128 * 1024;
                b.mr.write(at, &vec![0; len]);
                let imm = 0x5EED_0000 | id as u32;
                let consumes_receive = op != Op::Write;
                if consumes_receive {
                    post_recv(b, &qb, id, at, 96 * 1024);
                }
                let (remote_addr, rkey) = (b.mr.addr(at), b.mr.rkey());
                let opcode = match op {
                    Op::Send => WrOpcode::Send,
                    Op::SendImm => WrOpcode::SendWithImm(imm),
                    Op::Write => WrOpcode::RdmaWrite { remote_addr, rkey },
                    Op::WriteImm => WrOpcode::RdmaWriteWithImm {
                        remote_addr,
                        rkey,
                        imm,
                    },
                };
                qa.post_send(&signaled(id, opcode, vec![a.mr.sge(0, len)]))
                    .unwrap();
                let sent = expect(&a.cq, id, WcStatus::Success);
                let sent_as = match op {
                    Op::Send | Op::SendImm => WcOpcode::Send,
                    Op::Write | Op::WriteImm => WcOpcode::RdmaWrite,
                };
                assert_eq!(sent.opcode, sent_as, "{what}");
                if consumes_receive {
                    let got = expect(&b.cq, id, WcStatus::Success);
                    let (opcode, flags, imm_data) = match op {
                        Op::Send => (WcOpcode::Recv, 0, None),
                        Op::SendImm => (WcOpcode::Recv, wc_flags::WITH_IMM, Some(imm)),
                        _ => (WcOpcode::RecvRdmaWithImm, wc_flags::WITH_IMM, Some(imm)),
                    };
                    assert_eq!(
                        (got.opcode, got.byte_len, got.wc_flags, got.imm_data),
                        (opcode, len as u32, flags, imm_data),
                        "{what}"
                    );
                    assert_eq!((got.qp_num, got.src_qp), (qb.qp_num(), qa.qp_num()));
                } else {
                    // A WRITE raises nothing at b: a SEND behind it shows it was placed.
                    fence_by_send(a, b, &qa, &qb, 1000 + id);
                }
                assert!(read_mr(&b.mr, at, len) == data, "{what}: data differ");
            }
        }
        // Nothing more came on either side: one completion per WR.
        assert!(poll_n(&a.cq, 1, QUIET).is_empty());
        assert!(poll_n(&b.cq, 1, QUIET).is_empty());
    });
}

#[test]
fn a_uc_message_without_a_fitting_receive_or_with_a_bad_rkey_is_dropped_and_the_receive_waits_for_the_next(
) {
    on_both_paths(152, |a, b| {
        let (qa, qb) = uc_pair(a, b);
        let send = |id: u64, len: usize| {
            a.mr.write(0, &pattern(len, id));
            qa.post_send(&signaled(id, WrOpcode::Send, vec![a.mr.sge(0, len)]))
                .unwrap();
            // Completed at the sender once sent, whatever became of it.
            expect(&a.cq, id, WcStatus::Success);
        };
        // No receive posted: dropped, not retried (nothing arrives once one is posted).
        send(1, 100);
        assert!(poll_n(&b.cq, 1, QUIET).is_empty());
        post_recv(b, &qb, 50, 0, 2048);
        assert!(
            poll_n(&b.cq, 1, QUIET).is_empty(),
            "a dropped message came later"
        );
        // Too big for the receive (three packets into 2048 bytes): dropped, and the
        // receive stays posted.
        send(2, 3000);
        assert!(poll_n(&b.cq, 1, QUIET).is_empty());
        // A WRITE through a key b does not have: dropped, the QP stays up.
        qa.post_send(&signaled(
            3,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(0),
                rkey: b.mr.rkey() ^ 0x0F00,
            },
            vec![a.mr.sge(0, 64)],
        ))
        .unwrap();
        expect(&a.cq, 3, WcStatus::Success);
        // The next message that fits takes the receive that waited.
        send(4, 1500);
        let got = expect(&b.cq, 50, WcStatus::Success);
        assert_eq!((got.opcode, got.byte_len), (WcOpcode::Recv, 1500));
        assert!(read_mr(&b.mr, 0, 1500) == pattern(1500, 4));
        assert!(poll_n(&a.cq, 1, QUIET).is_empty());
        assert!(poll_n(&b.cq, 1, QUIET).is_empty());
    });
}

#[test]
fn rc_and_uc_qps_do_not_talk_to_each_other() {
    on_both_paths(154, |a, b| {
        // UC at a, RC at b: the UC SEND completes at a (no ACK is awaited), the RC QP
        // drops what is no RC opcode, and its receive stays posted.
        let o = PairOptions {
            timeout: 8,
            retry_cnt: 1,
            ..PairOptions::default()
        };
        let uc_a = uc_qp(a);
        let rc_b = init_qp(b, &b.cq, &o, verbs::ACCESS_REMOTE_WRITE);
        uc_connect(&uc_a, (&rc_b, b.gid), mtu::MTU_1024, 0x20, 0x30);
        to_rtr(&rc_b, (&uc_a, a.gid), &o, 0x20);
        to_rts(&rc_b, &o, 0x30);
        post_recv(b, &rc_b, 7, 0, 4096);
        uc_a.post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 64)]))
            .unwrap();
        expect(&a.cq, 1, WcStatus::Success);
        assert!(
            poll_n(&b.cq, 1, QUIET).is_empty(),
            "an RC QP took a UC SEND"
        );

        // RC at a, UC at b: b drops the RC SEND and sends no ACK, so a retries and
        // gives up (RETRY_EXC_ERR, after one retry of a ~1 ms timeout).
        let rc_a = init_qp(a, &a.cq, &o, verbs::ACCESS_REMOTE_WRITE);
        let uc_b = uc_qp(b);
        uc_connect(&uc_b, (&rc_a, a.gid), mtu::MTU_1024, 0x40, 0x50);
        to_rtr(&rc_a, (&uc_b, b.gid), &o, 0x40);
        to_rts(&rc_a, &o, 0x50);
        post_recv(b, &uc_b, 8, 8192, 4096);
        rc_a.post_send(&signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 64)]))
            .unwrap();
        expect(&a.cq, 2, WcStatus::RetryExcErr);
        assert!(
            poll_n(&b.cq, 1, QUIET).is_empty(),
            "a UC QP took an RC SEND"
        );
    });
}

#[test]
fn uc_qps_refuse_reads_atomics_and_send_with_invalidate_at_post_time() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let (qa, _qb) = uc_pair(&a, &b);
    let sge = a.mr.sge(0, 8);
    for opcode in [
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
        },
        WrOpcode::AtomicFetchAdd {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
            add: 1,
        },
        WrOpcode::AtomicCmpSwp {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
            compare: 0,
            swap: 1,
        },
        WrOpcode::SendWithInv(b.mr.rkey()),
    ] {
        let e = qa
            .post_send(&signaled(1, opcode, vec![sge]))
            .expect_err("refused");
        assert!(e.to_string().contains("not a UC operation"), "{e}");
    }
    // Nothing was posted.
    assert_eq!(qa.sq_free_slots(), qa.caps().max_send_wr);
    assert!(poll_n(&a.cq, 1, QUIET).is_empty());
    // RC's responder attributes are refused on a UC QP, as on UD.
    let qp = uc_qp(&a);
    let (at, m) = verbs::rtr_attr(1, b.gid, 0, mtu::MTU_1024, 4, 12);
    assert!(qp.modify(&at, m).is_err(), "MAX_DEST_RD_ATOMIC on UC");
}

#[test]
fn uc_frames_carry_rxes_uc_opcodes_and_a_valid_icrc_and_nothing_answers_them() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("uc.pcap");
    let rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let (qa, qb) = uc_pair(&a, &b);
    // SEND_ONLY; SEND_FIRST, MIDDLE, LAST_WITH_IMMEDIATE; RDMA_WRITE_FIRST, LAST;
    // RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    post_recv(&b, &qb, 1, 0, 4096);
    post_recv(&b, &qb, 2, 4096, 4096);
    post_recv(&b, &qb, 4, 0, 64);
    let target = (b.mr.addr(16384), b.mr.rkey());
    let wrs = [
        signaled(1, WrOpcode::Send, vec![a.mr.sge(0, 100)]),
        signaled(
            2,
            WrOpcode::SendWithImm(0x0102_0304),
            vec![a.mr.sge(0, 2100)],
        ),
        signaled(
            3,
            WrOpcode::RdmaWrite {
                remote_addr: target.0,
                rkey: target.1,
            },
            vec![a.mr.sge(0, 1500)],
        ),
        signaled(
            4,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: target.0,
                rkey: target.1,
                imm: 0x0A0B_0C0D,
            },
            vec![a.mr.sge(0, 16)],
        ),
    ];
    qa.post_send_list(&wrs).unwrap();
    for id in 1..=4 {
        expect(&a.cq, id, WcStatus::Success);
    }
    for id in [1, 2, 4] {
        expect(&b.cq, id, WcStatus::Success);
    }
    drop((qa, qb));
    drop((a, b));
    drop(rnicd);
    let frames = pcap_frames(&std::fs::read(&pcap).unwrap());
    // Every RoCE frame of the capture is a UC request: nothing was acknowledged.
    let roce: Vec<_> = frames.iter().filter(|f| f.len() > 54).collect();
    let opcodes: Vec<u8> = roce.iter().map(|f| f[42]).collect();
    assert_eq!(
        opcodes,
        [0x24, 0x20, 0x21, 0x23, 0x26, 0x28, 0x2B],
        "UC opcodes as rxe sends them"
    );
    for (i, f) in roce.iter().enumerate() {
        assert_eq!(carried_icrc(f), expected_icrc(f), "frame {i}: ICRC");
        let bth = &f[42..54];
        assert_eq!(
            bth[8] & 0x80,
            0,
            "frame {i}: UC asks for no acknowledgement"
        );
        // PSNs count from 0x10, one per packet.
        let psn = u32::from_be_bytes([0, bth[9], bth[10], bth[11]]);
        assert_eq!(psn, 0x10 + i as u32, "frame {i}: PSN");
    }
    // RETHs: the WRITE's first packet, and the WRITE with immediate's only one.
    assert_eq!(roce[4][54..62], target.0.to_be_bytes());
    assert_eq!(roce[4][62..66], target.1.to_be_bytes());
    assert_eq!(roce[4][66..70], 1500u32.to_be_bytes());
    assert_eq!(roce[6][54..62], target.0.to_be_bytes());
    // ImmDt as posted, after the SEND's last packet's BTH and the WRITE's RETH.
    assert_eq!(roce[3][54..58], 0x0102_0304u32.to_le_bytes());
    assert_eq!(roce[6][70..74], 0x0A0B_0C0Du32.to_le_bytes());
}

#[test]
fn the_receiver_counts_what_it_drops_by_reason() {
    let mut rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let (qa, qb) = uc_pair(&a, &b);
    let send = |qp: &Qp, id: u64, len: usize| {
        qp.post_send(&signaled(id, WrOpcode::Send, vec![a.mr.sge(0, len)]))
            .unwrap();
        expect(&a.cq, id, WcStatus::Success);
    };
    // One packet each: no receive; a receive too small; a bad rkey.
    send(&qa, 1, 100);
    // A UC send completes once sent: an RC SEND behind it on the same link, received,
    // shows that the receiver took the first before the receive below is posted.
    post_recv(&b, &b.qp, 7, 4096, 64);
    send(&a.qp, 7, 8);
    expect(&b.cq, 7, WcStatus::Success);
    post_recv(&b, &qb, 9, 0, 16);
    send(&qa, 2, 100);
    qa.post_send(&signaled(
        3,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey() ^ 0x0F00,
        },
        vec![a.mr.sge(0, 64)],
    ))
    .unwrap();
    expect(&a.cq, 3, WcStatus::Success);
    // A UC SEND to an RC QP: no RC opcode.
    let rc_b = init_qp(&b, &b.cq, &PairOptions::default(), 0);
    let uc_a = uc_qp(&a);
    uc_connect(&uc_a, (&rc_b, b.gid), mtu::MTU_1024, 0x20, 0x30);
    to_rtr(&rc_b, (&uc_a, a.gid), &PairOptions::default(), 0x20);
    send(&uc_a, 4, 100);
    // The receive that waited takes the next message that fits.
    send(&qa, 5, 8);
    let got = expect(&b.cq, 9, WcStatus::Success);
    assert_eq!(got.byte_len, 8);
    // The counters are logged when rnicd stops, while the clients are attached.
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((qa, qb, uc_a, rc_b, a, b));
    let log = rnicd.log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("vf1: drops "))
        .unwrap_or_else(|| panic!("no drop counters of vf1:\n{log}"));
    let line = format!("{line} ");
    for counter in [" no_receive=1 ", " refused=2 ", " transport=1 ", " psn=0 "] {
        assert!(line.contains(counter), "{counter:?} in {line}");
    }
}
