//! Advanced RNIC features (datasheet §14), each driven through the real path: two VFs of
//! one rnicd over the host vfio-user transport, and two rnicd talking RoCEv2 over UDP.
//! Every test checks the bytes that arrived, the completions, and for refusals that no
//! byte outside what was allowed changed.

use std::time::Duration;

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::mkey::CreateIndirectKeyReq;
use rnic_abi::regs;
use rnic_abi::verbs::{wc_flags, ObjectReq};
use rnic_driver::verbs::{
    self, AsyncEvent, Cq, KeyRange, Mr, Qp, RecvWr, SendWr, Sge, Srq, UdAddress, Wc, WcOpcode,
    WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, GRH_LEN,
};
use rnic_driver::Error;
use rnic_tests::net::{expect_wc, on_both_paths, two_rnicd};
use rnic_tests::verbs_pair::{
    buffer_bytes, connect_qps, guarded_mr, init_qp, pair, pattern, poll_n, read_mr, signaled,
    PairOptions, Side,
};
use rnic_tests::wire::{carried_icrc, expected_icrc, pcap_frames};
use rnic_tests::Rnicd;
use rnic_tools::features::{
    self, column, expected_buffer, ranges, FILL, GUARD, INDIRECT_LEN, ROW, ROWS,
};
use zerocopy::IntoBytes;

const T: Duration = Duration::from_secs(10);
const LW_RW: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
const LW_RR: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ;

/// The next completion of `cq`, which must come and must be for `wr_id` with `status`.
#[track_caller]
fn expect(cq: &Cq, wr_id: u64, status: WcStatus) -> Wc {
    expect_wc(cq, wr_id, status, T)
}

/// A fresh pair of connected QPs on the sides' PDs and CQs, for a test whose error puts
/// the QPs it uses in the error state.
fn fresh_qps(a: &Side, b: &Side) -> (Qp, Qp) {
    let o = PairOptions::default();
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let qa = init_qp(a, &a.cq, &o, access);
    let qb = init_qp(b, &b.cq, &o, access);
    connect_qps((&qa, a.gid), (&qb, b.gid), &o, 0x300, 0x400);
    (qa, qb)
}

fn write(wr_id: u64, rkey: u32, remote_addr: u64, sge: Sge) -> SendWr {
    signaled(wr_id, WrOpcode::RdmaWrite { remote_addr, rkey }, vec![sge])
}

fn read(wr_id: u64, rkey: u32, remote_addr: u64, sge: Sge) -> SendWr {
    signaled(wr_id, WrOpcode::RdmaRead { remote_addr, rkey }, vec![sge])
}

// ---------------------------------------------------------------------------------------
// Indirect and pattern memory keys.

/// Three regions of `b` with `access` ([`features::three_regions`]).
fn three_regions(b: &Side, access: [u32; 3]) -> [Mr; 3] {
    features::three_regions(&b.endpoint(), access).expect("three regions")
}

/// Checks the three regions hold `data` scattered as [`ranges`] says, and nothing else
/// changed.
fn assert_scattered(m: &[Mr; 3], data: &[u8]) {
    let wrong = features::misscattered(m, data);
    assert!(wrong.is_none(), "region {wrong:?} holds the wrong bytes");
}

fn assert_untouched(mrs: &[&Mr]) {
    for (i, mr) in mrs.iter().enumerate() {
        assert!(
            buffer_bytes(mr).iter().all(|&x| x == FILL),
            "buffer {i} changed"
        );
    }
}

#[test]
fn query_device_reports_the_advanced_features_and_abi_1_3() {
    let rnicd = Rnicd::start(1, &[]);
    let (a, _b) = pair(&rnicd, "pf", "vf0", &PairOptions::default());
    let q = a.ctx.query_device().unwrap();
    assert!(q.caps & regs::CAP_INDIRECT_MKEY != 0);
    assert!(q.caps & regs::CAP_PATTERN_MKEY != 0);
    assert!(q.caps & regs::CAP_SEND_VARIANTS != 0);
    assert!(q.abi_minor >= 3);
}

#[test]
fn a_write_through_an_indirect_rkey_scatters_into_three_regions() {
    on_both_paths(71, |a, b| {
        let all = LW_RW | ACCESS_REMOTE_READ;
        let m = three_regions(b, [all; 3]);
        let key = b.pd.create_indirect_key(all, &ranges(&m)).unwrap();
        assert_eq!(key.len(), INDIRECT_LEN as u64);
        let data = pattern(INDIRECT_LEN, 1);
        a.mr.write(0, &data);
        // 1024-byte MTU: five packets, whose boundaries fall inside the entries.
        a.qp.post_send(&write(1, key.rkey(), 0, a.mr.sge(0, INDIRECT_LEN)))
            .unwrap();
        expect(&a.cq, 1, WcStatus::Success);
        assert_scattered(&m, &data);
        // A READ through the same key gathers the bytes back, in order.
        a.qp.post_send(&read(2, key.rkey(), 50, a.mr.sge(8192, 4000)))
            .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 8192, 4000), data[50..4050]);
    });
}

#[test]
fn local_sges_through_indirect_keys_gather_and_scatter() {
    on_both_paths(73, |a, b| {
        // The sender gathers its message from two pieces of its buffer, out of order.
        let data = pattern(3000, 2);
        a.mr.write(10_000, &data[..1000]);
        a.mr.write(5_000, &data[1000..]);
        let src =
            a.pd.create_indirect_key(
                0,
                &[
                    KeyRange {
                        mr: &a.mr,
                        offset: 10_000,
                        len: 1000,
                    },
                    KeyRange {
                        mr: &a.mr,
                        offset: 5_000,
                        len: 2000,
                    },
                ],
            )
            .unwrap();
        // The receiver scatters it into three regions.
        let m = three_regions(b, [ACCESS_LOCAL_WRITE; 3]);
        let dst =
            b.pd.create_indirect_key(ACCESS_LOCAL_WRITE, &ranges(&m))
                .unwrap();
        b.qp.post_recv(&RecvWr {
            wr_id: 9,
            sges: vec![dst.sge(0, INDIRECT_LEN as u32)],
        })
        .unwrap();
        a.qp.post_send(&signaled(4, WrOpcode::Send, vec![src.sge(0, 3000)]))
            .unwrap();
        expect(&a.cq, 4, WcStatus::Success);
        let got = expect(&b.cq, 9, WcStatus::Success);
        assert_eq!(got.byte_len, 3000);
        let mut want = data.clone();
        want.resize(INDIRECT_LEN, FILL);
        assert_scattered(&m, &want);
    });
}

#[test]
fn a_read_through_a_pattern_key_gathers_strided_data() {
    on_both_paths(75, |a, b| {
        let m = guarded_mr(b, &b.pd, GUARD, ROWS * ROW, LW_RR, FILL);
        let matrix = pattern(ROWS * ROW, 3);
        m.write(0, &matrix);
        let key =
            b.pd.create_pattern_key(ACCESS_REMOTE_READ, &m, 64, 64, ROW as u64, ROWS as u32)
                .unwrap();
        assert_eq!(key.len(), (ROWS * 64) as u64);
        let col = column(&matrix, 64, 128);
        a.qp.post_send(&read(1, key.rkey(), 0, a.mr.sge(0, ROWS * 64)))
            .unwrap();
        expect(&a.cq, 1, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 0, ROWS * 64), col);
        // From the middle of a block, across several.
        a.qp.post_send(&read(2, key.rkey(), 100, a.mr.sge(4096, 300)))
            .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 4096, 300), col[100..400]);

        // A local pattern key scatters a READ's response into a column of the requester.
        let local = guarded_mr(a, &a.pd, GUARD, ROWS * ROW, ACCESS_LOCAL_WRITE, FILL);
        let strided =
            a.pd.create_pattern_key(ACCESS_LOCAL_WRITE, &local, 8, 64, ROW as u64, ROWS as u32)
                .unwrap();
        a.qp.post_send(&read(3, key.rkey(), 0, strided.sge(0, (ROWS * 64) as u32)))
            .unwrap();
        expect(&a.cq, 3, WcStatus::Success);
        let mut want = vec![FILL; ROWS * ROW];
        for r in 0..ROWS {
            want[r * ROW + 8..r * ROW + 72].copy_from_slice(&col[r * 64..(r + 1) * 64]);
        }
        assert!(
            buffer_bytes(&local) == expected_buffer(&local, 0, &want),
            "the column landed where the pattern says"
        );
    });
}

/// Posts `wr` on a fresh QP of `a` and expects it to fail with `status`.
fn refused(a: &Side, b: &Side, wr: SendWr, status: WcStatus) {
    let (qa, _qb) = fresh_qps(a, b);
    let id = wr.wr_id;
    qa.post_send(&wr).unwrap();
    expect(&a.cq, id, status);
}

#[test]
fn violations_through_memory_keys_complete_with_their_status_and_touch_nothing() {
    on_both_paths(77, |a, b| {
        a.mr.write(0, &pattern(INDIRECT_LEN + 200, 4));
        // Past the key's end: the whole WRITE is refused, even its in-bounds bytes.
        let m = three_regions(b, [LW_RW; 3]);
        let key = b.pd.create_indirect_key(LW_RW, &ranges(&m)).unwrap();
        let past_end = write(1, key.rkey(), 100, a.mr.sge(0, INDIRECT_LEN));
        refused(a, b, past_end, WcStatus::RemAccessErr);
        assert_untouched(&[&m[0], &m[1], &m[2]]);
        // The key allows reads only: a WRITE is refused.
        let read_only = b.pd.create_indirect_key(ACCESS_REMOTE_READ, &ranges(&m));
        let read_only = read_only.unwrap();
        refused(
            a,
            b,
            write(2, read_only.rkey(), 0, a.mr.sge(0, 100)),
            WcStatus::RemAccessErr,
        );
        assert_untouched(&[&m[0], &m[1], &m[2]]);
        drop((key, read_only));

        // The key allows writes, but its last region does not: nothing is written, not
        // even into the regions that allow it.
        let m = three_regions(b, [LW_RW, LW_RW, LW_RR]);
        let key = b.pd.create_indirect_key(LW_RW, &ranges(&m)).unwrap();
        refused(
            a,
            b,
            write(3, key.rkey(), 0, a.mr.sge(0, INDIRECT_LEN)),
            WcStatus::RemAccessErr,
        );
        assert_untouched(&[&m[0], &m[1], &m[2]]);
        // Reads through it are refused too (its key lacks REMOTE_READ).
        refused(
            a,
            b,
            read(4, key.rkey(), 0, a.mr.sge(0, 10)),
            WcStatus::RemAccessErr,
        );
        // The first two regions alone are writable: that works.
        let (qa, _qb) = fresh_qps(a, b);
        qa.post_send(&write(5, key.rkey(), 0, a.mr.sge(0, 3900)))
            .unwrap();
        expect(&a.cq, 5, WcStatus::Success);

        // A local SGE through a key without LOCAL_WRITE cannot take a READ's response.
        let target = guarded_mr(a, &a.pd, GUARD, 512, ACCESS_LOCAL_WRITE, FILL);
        let no_write = a.pd.create_pattern_key(0, &target, 0, 16, 32, 16).unwrap();
        refused(
            a,
            b,
            read(6, b.mr.rkey(), b.mr.addr(0), no_write.sge(0, 256)),
            WcStatus::LocProtErr,
        );
        assert_untouched(&[&target]);

        // A pattern key past its region's end cannot be made.
        let long =
            b.pd.create_pattern_key(ACCESS_REMOTE_READ, &m[2], 0, 64, 128, 6);
        assert!(long.is_err());
    });
}

#[test]
fn an_invalidated_region_fails_through_the_indirect_key() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let m = three_regions(&b, [LW_RW; 3]);
    let key = b.pd.create_indirect_key(LW_RW, &ranges(&m)).unwrap();
    // The responder invalidates its middle region.
    b.qp.post_send(&signaled(1, WrOpcode::LocalInv(m[1].rkey()), vec![]))
        .unwrap();
    expect(&b.cq, 1, WcStatus::Success);
    a.mr.write(0, &pattern(INDIRECT_LEN, 5));
    // Writes that stay in the first region still work; one that reaches the second fails.
    a.qp.post_send(&write(2, key.rkey(), 0, a.mr.sge(0, 900)))
        .unwrap();
    expect(&a.cq, 2, WcStatus::Success);
    a.qp.post_send(&write(3, key.rkey(), 800, a.mr.sge(0, 200)))
        .unwrap();
    expect(&a.cq, 3, WcStatus::RemAccessErr);
    assert_untouched(&[&m[1], &m[2]]);
}

/// The status a failed command ended with.
fn status<T: std::fmt::Debug>(r: rnic_driver::Result<T>) -> u16 {
    match r {
        Err(Error::Command { status, .. }) => status,
        other => panic!("expected a command error, got {other:?}"),
    }
}

#[test]
fn memory_key_commands_check_their_input() {
    let rnicd = Rnicd::start(1, &[]);
    let (_a, b) = pair(&rnicd, "pf", "vf0", &PairOptions::default());
    let dev = b.ctx.device();
    let m = three_regions(&b, [LW_RW; 3]);
    let key = b.pd.create_indirect_key(LW_RW, &ranges(&m)).unwrap();

    // A region an indirect key names cannot be deregistered, nor its PD freed.
    let dereg = ObjectReq {
        handle: m[1].lkey(),
        reserved: 0,
    };
    assert_eq!(
        status(dev.command(Opcode::DeregMr, dereg.as_bytes(), 0)),
        Status::Busy as u16
    );
    let dealloc = ObjectReq {
        handle: b.pd.pdn(),
        reserved: 0,
    };
    assert_eq!(
        status(dev.command(Opcode::DeallocPd, dealloc.as_bytes(), 0)),
        Status::Busy as u16
    );

    // Raw requests, as a driver that skipped its own checks would send them.
    let create = |entries: &[Sge]| {
        let req = CreateIndirectKeyReq {
            pdn: b.pd.pdn(),
            access: LW_RW,
            num_entries: entries.len() as u32,
            flags: 0,
        };
        let mut body = req.as_bytes().to_vec();
        body.extend_from_slice(entries.as_bytes());
        dev.command(Opcode::CreateIndirectKey, &body, 8)
    };
    let inside = m[0].sge(0, 1000);
    let past = Sge {
        length: 1001,
        ..inside
    };
    assert_eq!(status(create(&[inside, past])), Status::BadParam as u16);
    let nested = Sge {
        addr: 0,
        length: 10,
        lkey: key.lkey(),
    };
    assert_eq!(status(create(&[nested])), Status::BadParam as u16);
    let missing = Sge {
        lkey: m[0].lkey() ^ 0x80,
        ..inside
    };
    assert_eq!(status(create(&[missing])), Status::NotFound as u16);
    assert_eq!(status(create(&[])), Status::BadParam as u16);
    let short = CreateIndirectKeyReq {
        pdn: b.pd.pdn(),
        access: LW_RW,
        num_entries: 2,
        flags: 0,
    };
    let mut body = short.as_bytes().to_vec();
    body.extend_from_slice(inside.as_bytes());
    assert_eq!(
        status(dev.command(Opcode::CreateIndirectKey, &body, 8)),
        Status::BadParam as u16
    );

    // A region of another PD, bad access flags, a stride shorter than its blocks.
    let other = b.ctx.alloc_pd().unwrap();
    let foreign = guarded_mr(&b, &other, GUARD, 100, LW_RW, FILL);
    let mixed = [
        KeyRange {
            mr: &m[0],
            offset: 0,
            len: 10,
        },
        KeyRange {
            mr: &foreign,
            offset: 0,
            len: 10,
        },
    ];
    assert_eq!(
        status(b.pd.create_indirect_key(LW_RW, &mixed)),
        Status::BadParam as u16
    );
    assert_eq!(
        status(b.pd.create_indirect_key(ACCESS_REMOTE_WRITE, &ranges(&m))),
        Status::BadParam as u16
    );
    assert_eq!(
        status(b.pd.create_pattern_key(0, &m[1], 0, 64, 32, 4)),
        Status::BadParam as u16
    );
    // More blocks than one access may reach.
    assert_eq!(
        status(b.pd.create_pattern_key(0, &b.mr, 0, 1, 1, (1 << 16) + 1)),
        Status::BadParam as u16
    );
    assert!(b.pd.create_pattern_key(0, &b.mr, 0, 1, 1, 1 << 16).is_ok());
    drop(key);
    // With the key gone, the region goes too (the Mr's drop checks nothing, so ask).
    let m1 = m[1].lkey();
    drop(m);
    assert_eq!(
        status(
            dev.command(
                Opcode::DeregMr,
                ObjectReq {
                    handle: m1,
                    reserved: 0
                }
                .as_bytes(),
                0
            )
        ),
        Status::NotFound as u16
    );
}

// ---------------------------------------------------------------------------------------
// SEND variants: immediate data, invalidate and the solicited event, in every combination.

/// How long a test watches for an event that must not come.
const QUIET: Duration = Duration::from_millis(100);

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

// ---------------------------------------------------------------------------------------
// Shared receive queues.

/// `n` QPs of `b` on `srq`, each connected to a fresh QP of `a`: (a's, b's).
fn qps_on_srq(a: &Side, b: &Side, srq: &Srq, n: usize) -> Vec<(Qp, Qp)> {
    qps_on_srq_with(a, b, srq, n, &PairOptions::default())
}

/// [`qps_on_srq`] with options `o` (path MTU, queue sizes).
fn qps_on_srq_with(a: &Side, b: &Side, srq: &Srq, n: usize, o: &PairOptions) -> Vec<(Qp, Qp)> {
    (0..n)
        .map(|i| {
            let qa = init_qp(a, &a.cq, o, ACCESS_REMOTE_WRITE);
            let qb =
                b.pd.create_qp_with_srq(&b.cq, &b.cq, o.caps, false, srq)
                    .unwrap();
            let (at, m) = verbs::init_attr(ACCESS_REMOTE_WRITE);
            qb.modify(&at, m).unwrap();
            let psn = 0x1000 * (i as u32 + 1);
            connect_qps((&qa, a.gid), (&qb, b.gid), o, psn, psn + 7);
            (qa, qb)
        })
        .collect()
}

fn srq_recv(wr_id: u64, b: &Side) -> RecvWr {
    RecvWr {
        wr_id,
        sges: vec![b.mr.sge(wr_id as usize * 4096, 4096)],
    }
}

#[test]
fn many_qps_take_an_srqs_receives_in_order_and_wait_rnr_when_it_is_empty() {
    on_both_paths(83, |a, b| {
        let srq = b.pd.create_srq(16, 1, 0).unwrap();
        let q = srq.query().unwrap();
        assert_eq!(
            (q.max_wr, q.max_sge, q.srq_limit, q.consumed),
            (16, 1, 0, 0)
        );
        let qps = qps_on_srq(a, b, &srq, 3);
        srq.post_recv_list(&(0..6).map(|i| srq_recv(i, b)).collect::<Vec<_>>())
            .unwrap();
        // QPs 2, 0, 1, 1, 2, 0 each send one message: receive i goes to the i-th
        // message, whichever QP it came on.
        for (i, &k) in [2usize, 0, 1, 1, 2, 0].iter().enumerate() {
            let len = 100 + i * 300;
            let data = pattern(len, 40 + i as u64);
            a.mr.write(0, &data);
            qps[k]
                .0
                .post_send(&signaled(i as u64, WrOpcode::Send, vec![a.mr.sge(0, len)]))
                .unwrap();
            expect(&a.cq, i as u64, WcStatus::Success);
            let got = expect(&b.cq, i as u64, WcStatus::Success);
            assert_eq!(got.qp_num, qps[k].1.qp_num(), "message {i}");
            assert_eq!(got.src_qp, qps[k].0.qp_num());
            assert_eq!(got.byte_len, len as u32);
            assert_eq!(read_mr(&b.mr, i * 4096, len), data, "message {i}");
        }
        assert_eq!(srq.query().unwrap().consumed, 6);
        assert_eq!(srq.free_slots(), 16);

        // Empty: the requester is told RNR and retries until a receive comes.
        a.mr.write(0, b"late");
        qps[1]
            .0
            .post_send(&signaled(7, WrOpcode::Send, vec![a.mr.sge(0, 4)]))
            .unwrap();
        assert!(
            poll_n(&a.cq, 1, QUIET).is_empty(),
            "completed with no receive"
        );
        srq.post_recv(&srq_recv(7, b)).unwrap();
        expect(&a.cq, 7, WcStatus::Success);
        let got = expect(&b.cq, 7, WcStatus::Success);
        assert_eq!(got.qp_num, qps[1].1.qp_num());
        assert_eq!(read_mr(&b.mr, 7 * 4096, 4), b"late");

        // A QP on the SRQ takes no receives of its own, and the SRQ outlives no QP.
        assert!(qps[0].1.post_recv(&srq_recv(1, b)).is_err());
        let destroy = ObjectReq {
            handle: srq.srqn(),
            reserved: 0,
        };
        assert_eq!(
            status(
                b.ctx
                    .device()
                    .command(Opcode::DestroySrq, destroy.as_bytes(), 0)
            ),
            Status::Busy as u16
        );
    });
}

#[test]
fn the_srq_limit_event_fires_once_below_the_limit_and_an_erring_qp_leaves_the_rest() {
    on_both_paths(85, |a, b| {
        let srq = b.pd.create_srq(8, 1, 0).unwrap();
        let qps = qps_on_srq(a, b, &srq, 2);
        srq.post_recv_list(&(0..4).map(|i| srq_recv(i, b)).collect::<Vec<_>>())
            .unwrap();
        srq.set_limit(3).unwrap();
        assert_eq!(srq.query().unwrap().srq_limit, 3);
        let send = |k: usize, id: u64| {
            qps[k]
                .0
                .post_send(&signaled(id, WrOpcode::Send, vec![a.mr.sge(0, 8)]))
                .unwrap();
            expect(&a.cq, id, WcStatus::Success);
            expect(&b.cq, id, WcStatus::Success);
        };
        let limit_event = |timeout| {
            b.ctx
                .wait_async_event(AsyncEvent::SrqLimitReached, srq.srqn(), timeout)
                .unwrap()
        };
        // 4 posted: taking one leaves 3, not fewer than the limit.
        send(0, 0);
        assert!(!limit_event(QUIET));
        // Taking the next leaves 2: the event, and the limit is disarmed.
        send(1, 1);
        assert!(limit_event(T));
        assert_eq!(srq.query().unwrap().srq_limit, 0);

        // QP 0 of b enters the error state: none of the SRQ's receives is flushed...
        let (err, m) = (
            verbs::QpAttr {
                qp_state: verbs::QpState::Err as u8,
                ..Default::default()
            },
            verbs::attr::STATE,
        );
        qps[0].1.modify(&err, m).unwrap();
        assert!(
            poll_n(&b.cq, 1, QUIET).is_empty(),
            "an SRQ receive was flushed"
        );
        // ... and QP 1 still takes them, in order.
        send(1, 2);
        send(1, 3);
        assert!(!limit_event(QUIET), "the disarmed limit fired again");
        assert_eq!(srq.query().unwrap().consumed, 4);
        assert!(srq.set_limit(8).is_err(), "a limit must be below the size");
    });
}

// ---------------------------------------------------------------------------------------
// UD QPs.

const QKEY: u32 = 0x1111_0042;

/// A UD QP on each side, ready; (a's, b's).
fn ud_pair(a: &Side, b: &Side) -> (Qp, Qp) {
    let caps = PairOptions::default().caps;
    let qa = a.pd.create_ud_qp(&a.cq, &a.cq, caps).unwrap();
    let qb = b.pd.create_ud_qp(&b.cq, &b.cq, caps).unwrap();
    qa.ud_ready(0x77, 0x10).unwrap();
    qb.ud_ready(QKEY, 0x20).unwrap();
    (qa, qb)
}

/// Exchanges UD SENDs from `a` to `b`: a plain one, a full-size solicited one with
/// immediate data, one with the wrong Q_Key and one while no receive is posted (both
/// dropped at `b`). Checks every byte of the receive buffers; returns the IPv4 header the
/// first receive's GRH held.
fn ud_exchange(a: &Side, b: &Side) -> Vec<u8> {
    let (qa, qb) = ud_pair(a, b);
    let to = UdAddress {
        dest_qpn: qb.qp_num(),
        qkey: QKEY,
        dgid: b.gid,
        ..UdAddress::default()
    };
    let grh = GRH_LEN as usize;
    let mut first_grh = Vec::new();
    // (length, immediate, solicited)
    for (i, (len, imm, solicited)) in [(100usize, None, false), (4096, Some(0xC0FFEE), true)]
        .into_iter()
        .enumerate()
    {
        let id = i as u64 + 1;
        let at = i * 8192;
        qb.post_recv(&RecvWr {
            wr_id: id,
            sges: vec![b.mr.sge(at, grh + 4096)],
        })
        .unwrap();
        let data = pattern(len, 60 + id);
        a.mr.write(at, &data);
        let opcode = imm.map_or(WrOpcode::Send, WrOpcode::SendWithImm);
        let wr = SendWr {
            solicited,
            ..signaled(id, opcode, vec![a.mr.sge(at, len)])
        };
        qa.post_ud_send(&wr, &to).unwrap();
        let sent = expect(&a.cq, id, WcStatus::Success);
        assert_eq!((sent.opcode, sent.byte_len), (WcOpcode::Send, len as u32));
        let got = expect(&b.cq, id, WcStatus::Success);
        assert_eq!(got.opcode, WcOpcode::Recv);
        assert_eq!(got.qp_num, qb.qp_num());
        assert_eq!(got.src_qp, qa.qp_num());
        assert_eq!(got.byte_len, (grh + len) as u32);
        assert_eq!(got.imm_data, imm);
        let flags = wc_flags::GRH
            | imm.map_or(0, |_| wc_flags::WITH_IMM)
            | if solicited { wc_flags::SOLICITED } else { 0 };
        assert_eq!(got.wc_flags, flags);
        let buf = read_mr(&b.mr, at, grh + len);
        assert_eq!(buf[..20], [0; 20], "the GRH's first 20 bytes are zero");
        let ip = &buf[20..40];
        assert_eq!(ip[0], 0x45, "an IPv4 header");
        assert_eq!(ip[9], 17, "UDP");
        assert_eq!(ip[12..16], a.gid[12..16], "source address");
        assert_eq!(ip[16..20], b.gid[12..16], "destination address");
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            20 + 8 + 12 + 8 + imm.map_or(0, |_| 4) + len.div_ceil(4) * 4 + 4,
            "IPv4 total length: IP, UDP, BTH, DETH, ImmDt, payload and pad, ICRC"
        );
        assert_eq!(buf[grh..], data[..]);
        if i == 0 {
            first_grh = ip.to_vec();
        }
    }
    // The wrong Q_Key: sent (UD does not know), dropped at b; the receive stays posted.
    qb.post_recv(&RecvWr {
        wr_id: 3,
        sges: vec![b.mr.sge(3 * 8192, grh + 64)],
    })
    .unwrap();
    let wrong = UdAddress { qkey: 0x2222, ..to };
    qa.post_ud_send(&signaled(3, WrOpcode::Send, vec![a.mr.sge(0, 8)]), &wrong)
        .unwrap();
    expect(&a.cq, 3, WcStatus::Success);
    assert!(
        poll_n(&b.cq, 1, QUIET).is_empty(),
        "a wrong Q_Key was taken"
    );
    // The right one takes that receive; with the QP's own Q_Key it would be 0x77.
    qa.post_ud_send(&signaled(4, WrOpcode::Send, vec![a.mr.sge(0, 8)]), &to)
        .unwrap();
    expect(&a.cq, 4, WcStatus::Success);
    expect(&b.cq, 3, WcStatus::Success);
    // Nothing posted: dropped, not retried.
    qa.post_ud_send(&signaled(5, WrOpcode::Send, vec![a.mr.sge(0, 8)]), &to)
        .unwrap();
    expect(&a.cq, 5, WcStatus::Success);
    assert!(poll_n(&b.cq, 1, QUIET).is_empty());
    // More than a packet is refused before it is posted.
    let big = signaled(6, WrOpcode::Send, vec![a.mr.sge(0, 4097)]);
    assert!(qa.post_ud_send(&big, &to).is_err());
    first_grh
}

/// Checks that `function`'s drop counters in `log` have one Q_Key and one no-receive drop.
fn assert_ud_drops(log: &str, function: &str) {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains(&format!("{function}: drops ")))
        .unwrap_or_else(|| panic!("no drop counters of {function}:\n{log}"));
    assert!(
        line.contains(" qkey=1 ") && format!("{line} ").contains(" no_receive=1 "),
        "{line}"
    );
}

#[test]
fn ud_sends_arrive_with_their_grh_and_wrong_qkeys_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("ud.pcap");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let ip_header = ud_exchange(&a, &b);
    // The counters are logged when rnicd stops, and must be read while the clients are
    // still attached (a function's reset clears them).
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    assert_ud_drops(&rnicd.log(), "vf1");

    // On the wire, as rxe: BTH, DETH (Q_Key, reserved, source QP), ImmDt, payload, ICRC.
    let frames = pcap_frames(&std::fs::read(&pcap).unwrap());
    let ud: Vec<_> = frames
        .iter()
        .filter(|f| matches!(f.get(42), Some(0x64 | 0x65)))
        .collect();
    assert_eq!(ud.len(), 5, "five UD SENDs");
    for f in &ud {
        assert_eq!(carried_icrc(f), expected_icrc(f));
        let bth = &f[42..54];
        assert!(bth[8] & 0x80 == 0, "UD asks for no acknowledgement");
        assert_eq!(bth[1] & 0x0F, 0, "transport version 0");
        assert_eq!(bth[2..4], [0xFF, 0xFF], "default P_Key");
        assert_eq!(f[58], 0, "DETH reserved byte");
    }
    let first = ud[0];
    assert_eq!(first[42], 0x64);
    assert_eq!(first[54..58], QKEY.to_be_bytes());
    assert_eq!(
        first[14..34],
        ip_header[..],
        "the GRH holds the packet's IPv4 header"
    );
    let second = ud[1];
    assert_eq!(second[42], 0x65);
    assert!(second[43] & 0x80 != 0, "solicited event bit");
    assert_eq!(second[62..66], 0xC0FFEEu32.to_le_bytes(), "ImmDt as posted");
    assert_eq!(
        ud[2][54..58],
        0x2222u32.to_be_bytes(),
        "the wrong Q_Key as sent"
    );
    // Source QP (24 bits) after the reserved byte, destination QP in the BTH.
    assert_eq!(first[59..62], ud[1][59..62]);
    assert_eq!(first[47..50], ud[1][47..50]);
}

#[test]
fn ud_sends_cross_two_rnicd_over_udp() {
    let o = PairOptions::default();
    let (_ra, mut rb, a, b) = two_rnicd(["udp:127.0.87.1", "udp:127.0.88.1"], &[], &o, (1, 2));
    ud_exchange(&a, &b);
    rb.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));
    assert_ud_drops(&rb.log(), "vf0");
}

// ---------------------------------------------------------------------------------------
// One-shot READ grants.

#[test]
fn a_one_shot_read_grant_allows_exactly_one_read() {
    on_both_paths(89, |a, b| {
        let m = guarded_mr(b, &b.pd, GUARD, 8192, LW_RR, FILL);
        let data = pattern(8192, 9);
        m.write(0, &data);
        let range = [KeyRange {
            mr: &m,
            offset: 1000,
            len: 5000,
        }];
        let grant = b.pd.create_one_shot_read_key(&range).unwrap();
        // It grants nothing but a READ: a WRITE is refused (and does not spend it).
        refused(
            a,
            b,
            write(1, grant.rkey(), 0, a.mr.sge(0, 8)),
            WcStatus::RemAccessErr,
        );
        // The one READ (five packets at a 1024-byte MTU).
        a.qp.post_send(&read(2, grant.rkey(), 0, a.mr.sge(0, 5000)))
            .unwrap();
        expect(&a.cq, 2, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 0, 5000), data[1000..6000]);
        // A second READ with the key fails, on the same QP and on another, and lands
        // nothing.
        let before = read_mr(&a.mr, 65536, 16);
        a.qp.post_send(&read(3, grant.rkey(), 0, a.mr.sge(65536, 16)))
            .unwrap();
        expect(&a.cq, 3, WcStatus::RemAccessErr);
        refused(
            a,
            b,
            read(4, grant.rkey(), 100, a.mr.sge(65536, 16)),
            WcStatus::RemAccessErr,
        );
        assert_eq!(read_mr(&a.mr, 65536, 16), before);
        // The region itself is not affected, and a new grant works once again.
        let again = b.pd.create_one_shot_read_key(&range).unwrap();
        let (qa, _qb) = fresh_qps(a, b);
        qa.post_send(&read(5, m.rkey(), m.addr(0), a.mr.sge(0, 100)))
            .unwrap();
        expect(&a.cq, 5, WcStatus::Success);
        qa.post_send(&read(6, again.rkey(), 4990, a.mr.sge(0, 10)))
            .unwrap();
        expect(&a.cq, 6, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, 0, 10), data[5990..6000]);
        // A grant is for READ alone: one with other access is refused when it is made.
        let mut body = CreateIndirectKeyReq {
            pdn: b.pd.pdn(),
            access: LW_RR,
            num_entries: 1,
            flags: rnic_abi::mkey::KEY_ONE_SHOT_READ,
        }
        .as_bytes()
        .to_vec();
        body.extend_from_slice(m.sge(0, 10).as_bytes());
        let made = b.ctx.device().command(Opcode::CreateIndirectKey, &body, 8);
        assert_eq!(status(made), Status::BadParam as u16);
    });
}

#[test]
fn a_one_shot_read_survives_lost_and_duplicated_responses() {
    // Lost and duplicated frames make the requester ask again, and the responder answer a
    // duplicate READ from what it remembers: the grant's one READ still completes.
    let mut rnicd = Rnicd::start(2, &["--net-faults", "loss=0.15,dup=0.15,seed=11"]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());
    let m = guarded_mr(&b, &b.pd, GUARD, 16 * 4096, LW_RR, FILL);
    let data = pattern(16 * 4096, 12);
    m.write(0, &data);
    for i in 0..16u64 {
        let at = i as usize * 4096;
        let grant =
            b.pd.create_one_shot_read_key(&[KeyRange {
                mr: &m,
                offset: at,
                len: 3000,
            }])
            .unwrap();
        a.qp.post_send(&read(i, grant.rkey(), 0, a.mr.sge(at, 3000)))
            .unwrap();
        expect(&a.cq, i, WcStatus::Success);
        assert_eq!(read_mr(&a.mr, at, 3000), data[at..at + 3000], "READ {i}");
    }
    // The requester did have to ask again (the counters are read while attached).
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((a, b, m));
    let log = rnicd.log();
    let line = log
        .lines()
        .find(|l| l.contains("vf0: tx "))
        .unwrap_or_else(|| panic!("no counters of vf0:\n{log}"));
    let retransmits: u64 = line
        .split_whitespace()
        .skip_while(|w| *w != "retransmits")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(retransmits > 0, "no READ was asked again: {line}");
}

// ---------------------------------------------------------------------------------------
// WQEs by MMIO.

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

#[test]
fn a_qp_on_an_srq_that_fails_mid_message_flushes_only_its_own_receive() {
    // Every frame is held 40 ms, so a 256-packet SEND (twice the send window) arrives in
    // two halves about 80 ms apart: long enough to catch it half received.
    let rnicd = Rnicd::start(2, &["--net-faults", "delay=40"]);
    let o = PairOptions {
        mtu: verbs::mtu::MTU_256,
        ..PairOptions::default()
    };
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    let srq = b.pd.create_srq(8, 1, 0).unwrap();
    let qps = qps_on_srq_with(&a, &b, &srq, 2, &o);
    let len = 256 * 256;
    srq.post_recv_list(
        &(0..3)
            .map(|i| RecvWr {
                wr_id: i,
                sges: vec![b.mr.sge(i as usize * len, len)],
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    a.mr.write(0, &pattern(len, 77));
    qps[0]
        .0
        .post_send(&signaled(1, WrOpcode::Send, vec![a.mr.sge(0, len)]))
        .unwrap();
    // Wait until the message has taken its receive, and not finished.
    rnic_tests::wait_for(T, "the SEND to take a receive", || {
        srq.query().unwrap().consumed == 1
    });
    assert!(
        poll_n(&b.cq, 1, Duration::ZERO).is_empty(),
        "finished already"
    );
    let err = verbs::QpAttr {
        qp_state: verbs::QpState::Err as u8,
        ..Default::default()
    };
    qps[0].1.modify(&err, verbs::attr::STATE).unwrap();
    // Its receive completes flushed; the SRQ's others stay.
    let got = expect(&b.cq, 0, WcStatus::WrFlushErr);
    assert_eq!(got.qp_num, qps[0].1.qp_num());
    assert!(
        poll_n(&b.cq, 1, QUIET).is_empty(),
        "another receive was flushed"
    );
    assert_eq!(srq.query().unwrap().consumed, 1);
    // The other QP takes the next one.
    qps[1]
        .0
        .post_send(&signaled(2, WrOpcode::Send, vec![a.mr.sge(0, 100)]))
        .unwrap();
    let got = expect(&b.cq, 1, WcStatus::Success);
    assert_eq!(got.qp_num, qps[1].1.qp_num());
}
