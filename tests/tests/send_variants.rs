//! SEND variants (datasheet §14.3): immediate data, invalidate and the solicited event, in
//! every combination, and SEND with invalidate on indirect keys and on keys of another PD.
//! Each runs between two VFs of one rnicd over the host vfio-user transport and between two
//! rnicd talking RoCEv2 over UDP.

use rnic_abi::verbs::wc_flags;
use rnic_driver::verbs::{Mr, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::feature_checks::{
    assert_untouched, expect, fresh_qps, read, refused, three_regions, write, LW_RR, LW_RW, QUIET,
    T,
};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{guarded_mr, pattern, read_mr, signaled};
use rnic_tools::features::{ranges, FILL, GUARD};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Plain,
    Imm,
    Inv,
}

#[test]
fn every_send_variant_completes_as_ibverbs_says_and_only_solicited_ones_wake() {
    on_both_paths(79, |a, b| {
        let mut invalidated = Vec::new();
        let mut id = 0u64;
        for variant in [Variant::Plain, Variant::Imm, Variant::Inv] {
            for solicited in [false, true] {
                for len in [16usize, 3000] {
                    id += 1;
                    let target = (variant == Variant::Inv)
                        .then(|| guarded_mr(b, &b.pd, GUARD, 64, LW_RR, FILL));
                    let imm = 0xA1B2_0000 | id as u32;
                    let opcode = match (variant, &target) {
                        (Variant::Imm, _) => WrOpcode::SendWithImm(imm),
                        (Variant::Inv, Some(t)) => WrOpcode::SendWithInv(t.rkey()),
                        _ => WrOpcode::Send,
                    };
                    let data = pattern(len, id);
                    a.mr.write(0, &data);
                    b.qp.post_recv(&RecvWr {
                        wr_id: id,
                        sges: vec![b.mr.sge(0, 4096)],
                    })
                    .unwrap();
                    b.cq.req_notify(true);
                    a.qp.post_send(&SendWr {
                        solicited,
                        ..signaled(id, opcode, vec![a.mr.sge(0, len)])
                    })
                    .unwrap();
                    let what = format!("{variant:?}, solicited {solicited}, {len} bytes");
                    let sent = expect(&a.cq, id, WcStatus::Success);
                    assert_eq!(
                        (sent.opcode, sent.wc_flags, sent.imm_data),
                        (WcOpcode::Send, 0, None),
                        "{what}"
                    );
                    let got = expect(&b.cq, id, WcStatus::Success);
                    assert_eq!((got.opcode, got.byte_len), (WcOpcode::Recv, len as u32));
                    assert_eq!(read_mr(&b.mr, 0, len), data, "{what}");
                    let want_flags = match variant {
                        Variant::Plain => 0,
                        Variant::Imm => wc_flags::WITH_IMM,
                        Variant::Inv => wc_flags::WITH_INV,
                    } | if solicited { wc_flags::SOLICITED } else { 0 };
                    assert_eq!(got.wc_flags, want_flags, "{what}");
                    assert_eq!(
                        got.imm_data,
                        (variant == Variant::Imm).then_some(imm),
                        "{what}"
                    );
                    assert_eq!(
                        got.invalidated_rkey,
                        target.as_ref().map(Mr::rkey),
                        "{what}"
                    );
                    // Armed for solicited completions only: exactly the solicited ones
                    // raise a completion event.
                    let wait = if solicited { T } else { QUIET };
                    assert_eq!(
                        b.ctx.wait_cq_event(&b.cq, wait).unwrap(),
                        solicited,
                        "{what}"
                    );
                    invalidated.extend(target);
                }
            }
        }
        // Every key a SEND invalidated is dead: a READ through it is refused.
        for t in &invalidated {
            refused(
                a,
                b,
                read(99, t.rkey(), t.addr(0), a.mr.sge(0, 8)),
                WcStatus::RemAccessErr,
            );
        }
    });
}

#[test]
fn send_with_invalidate_kills_an_indirect_key_and_refuses_a_foreign_one() {
    on_both_paths(81, |a, b| {
        let m = three_regions(b, [LW_RW; 3]);
        let key = b.pd.create_indirect_key(LW_RW, &ranges(&m)).unwrap();
        b.qp.post_recv(&RecvWr {
            wr_id: 1,
            sges: vec![b.mr.sge(0, 64)],
        })
        .unwrap();
        b.cq.req_notify(true);
        a.qp.post_send(&SendWr {
            solicited: true,
            ..signaled(1, WrOpcode::SendWithInv(key.rkey()), vec![a.mr.sge(0, 8)])
        })
        .unwrap();
        expect(&a.cq, 1, WcStatus::Success);
        let got = expect(&b.cq, 1, WcStatus::Success);
        assert_eq!(got.invalidated_rkey, Some(key.rkey()));
        assert!(got.solicited());
        assert!(b.ctx.wait_cq_event(&b.cq, T).unwrap());
        // The indirect key is dead; its regions are not.
        refused(
            a,
            b,
            write(2, key.rkey(), 0, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
        assert_untouched(&[&m[0], &m[1], &m[2]]);
        let (qa, _qb) = fresh_qps(a, b);
        qa.post_send(&write(3, m[0].rkey(), m[0].addr(0), a.mr.sge(0, 8)))
            .unwrap();
        expect(&a.cq, 3, WcStatus::Success);

        // A key of another PD cannot be invalidated: the requester gets
        // REM_INV_REQ_ERR, and the receive the message took completes with
        // LOC_QP_OP_ERR (as in rxe).
        let other = b.ctx.alloc_pd().unwrap();
        let foreign = guarded_mr(b, &other, GUARD, 64, LW_RW, FILL);
        let (qa, qb) = fresh_qps(a, b);
        qb.post_recv(&RecvWr {
            wr_id: 4,
            sges: vec![b.mr.sge(0, 64)],
        })
        .unwrap();
        qa.post_send(&signaled(
            4,
            WrOpcode::SendWithInv(foreign.rkey()),
            vec![a.mr.sge(0, 8)],
        ))
        .unwrap();
        expect(&a.cq, 4, WcStatus::RemInvReqErr);
        expect(&b.cq, 4, WcStatus::LocQpOpErr);
        // ... and it still works.
        let (qa, _qb) = fresh_qps(a, b);
        qa.post_send(&write(5, foreign.rkey(), foreign.addr(0), a.mr.sge(0, 8)))
            .unwrap();
        expect(&a.cq, 5, WcStatus::RemAccessErr);
    });
}
