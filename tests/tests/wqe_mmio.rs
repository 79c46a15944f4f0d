//! Send WQEs by MMIO (datasheet §14.7): a WQE written into the doorbell BAR's window is
//! taken from there and not from the ring, and MMIO and ring posts never reorder. Between
//! two VFs of one rnicd over the host vfio-user transport, and between two rnicd talking
//! RoCEv2 over UDP.

use rnic_driver::verbs::{Qp, RecvWr, SendWr, WcStatus, WrOpcode, ACCESS_REMOTE_WRITE};
use rnic_tests::feature_checks::{expect, T};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{connect_qps, init_qp, poll_n, read_mr, signaled, PairOptions, Side};

/// 40 bytes of message `i` of a run tagged `tag`.
fn message(tag: &str, i: usize) -> Vec<u8> {
    let mut m = format!("{tag} message {i}").into_bytes();
    m.resize(40, b'.');
    m
}

/// A SEND of `data` inline.
fn inline_send(wr_id: u64, data: Vec<u8>) -> SendWr {
    SendWr {
        inline: Some(data),
        ..signaled(wr_id, WrOpcode::Send, vec![])
    }
}

/// A fresh connected pair whose `a` end has a 4-entry send queue and an MMIO window.
fn mmio_qps(a: &Side, b: &Side, send_wr: u32) -> (Qp, Qp) {
    let mut o = PairOptions::default();
    o.caps.max_send_wr = send_wr;
    let access = ACCESS_REMOTE_WRITE;
    let qa = init_qp(a, &a.cq, &o, access);
    let qb = init_qp(b, &b.cq, &PairOptions::default(), access);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x500, 0x600);
    qa.enable_wqe_mmio().unwrap();
    (qa, qb)
}

#[test]
fn a_wqe_by_mmio_is_taken_from_the_window_not_the_ring() {
    on_both_paths(91, |a, b| {
        let (qa, qb) = mmio_qps(a, b, 4);
        // Fill the 4-entry ring with WQEs of its own; each completes before the next.
        // Then post four by MMIO: they take the same ring entries, which still hold the
        // old WQEs, so a device that read the ring would send the old messages.
        for (i, (tag, mmio)) in [("ring", false), ("mmio", true)]
            .iter()
            .flat_map(|t| std::iter::repeat_n(*t, 4))
            .enumerate()
        {
            let id = i as u64;
            qb.post_recv(&RecvWr {
                wr_id: id,
                sges: vec![b.mr.sge(i * 64, 64)],
            })
            .unwrap();
            let wr = inline_send(id, message(tag, i));
            if mmio {
                assert!(qa.post_send_mmio(&wr).unwrap(), "the window was free");
            } else {
                qa.post_send(&wr).unwrap();
            }
            expect(&a.cq, id, WcStatus::Success);
            let got = expect(&b.cq, id, WcStatus::Success);
            assert_eq!(got.byte_len, 40);
            assert_eq!(read_mr(&b.mr, i * 64, 40), message(tag, i), "message {i}");
        }
        // A second window for the same QP is refused.
        assert!(qa.enable_wqe_mmio().is_err());
    });
}

#[test]
fn mmio_and_ring_posts_never_reorder() {
    on_both_paths(93, |a, b| {
        let (qa, qb) = mmio_qps(a, b, 128);
        let n = 96;
        qb.post_recv_list(
            &(0..n)
                .map(|i| RecvWr {
                    wr_id: i as u64,
                    sges: vec![b.mr.sge(i * 64, 64)],
                })
                .collect::<Vec<_>>(),
        )
        .unwrap();
        // Back to back, without waiting: every other one by MMIO (or, when the device has
        // not emptied the window yet, to the ring after all).
        let mut by_mmio = 0;
        for i in 0..n {
            let wr = inline_send(i as u64, message("mixed", i));
            if i % 2 == 0 {
                by_mmio += usize::from(qa.post_send_mmio(&wr).unwrap());
            } else {
                qa.post_send(&wr).unwrap();
            }
        }
        assert!(by_mmio > 0, "no WQE went by MMIO");
        let sent = poll_n(&a.cq, n, T);
        let got = poll_n(&b.cq, n, T);
        assert_eq!((sent.len(), got.len()), (n, n));
        for i in 0..n {
            assert_eq!(
                (sent[i].wr_id, sent[i].status),
                (i as u64, Ok(WcStatus::Success))
            );
            assert_eq!(got[i].wr_id, i as u64, "receives complete in posting order");
            assert_eq!(
                read_mr(&b.mr, i * 64, 40),
                message("mixed", i),
                "message {i}"
            );
        }
    });
}
