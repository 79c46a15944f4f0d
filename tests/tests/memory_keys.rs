//! Indirect and pattern memory keys (datasheet §14.1, §14.2): WRITEs, READs and local SGEs
//! through them, the violations they refuse, and the commands that make them. Each runs
//! between two VFs of one rnicd over the host vfio-user transport and between two rnicd
//! talking RoCEv2 over UDP; every test checks the bytes that arrived, the completions,
//! and for refusals that no byte outside what was allowed changed.

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::mkey::CreateIndirectKeyReq;
use rnic_abi::regs;
use rnic_abi::verbs::ObjectReq;
use rnic_driver::verbs::{
    KeyRange, Mr, RecvWr, Sge, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use rnic_tests::feature_checks::{
    assert_untouched, expect, fresh_qps, read, refused, status, three_regions, write, LW_RR, LW_RW,
};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{
    buffer_bytes, guarded_mr, pair, pattern, read_mr, signaled, PairOptions,
};
use rnic_tests::Rnicd;
use rnic_tools::features::{
    self, column, expected_buffer, ranges, FILL, GUARD, INDIRECT_LEN, ROW, ROWS,
};
use zerocopy::IntoBytes;

/// Checks the three regions hold `data` scattered as [`ranges`] says, and nothing else
/// changed.
fn assert_scattered(m: &[Mr; 3], data: &[u8]) {
    let wrong = features::misscattered(m, data);
    assert!(wrong.is_none(), "region {wrong:?} holds the wrong bytes");
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
