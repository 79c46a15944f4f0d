//! One-shot READ grants (datasheet §14.6): an rkey good for exactly one READ, also when
//! responses are lost and duplicated. Between two VFs of one rnicd over the host vfio-user
//! transport, and between two rnicd talking RoCEv2 over UDP.

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::mkey::CreateIndirectKeyReq;
use rnic_driver::verbs::{KeyRange, WcStatus};
use rnic_tests::feature_checks::{expect, fresh_qps, read, refused, status, write, LW_RR};
use rnic_tests::net::on_both_paths;
use rnic_tests::verbs_pair::{guarded_mr, pair, pattern, read_mr, PairOptions};
use rnic_tests::Rnicd;
use rnic_tools::features::{FILL, GUARD};
use zerocopy::IntoBytes;

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
