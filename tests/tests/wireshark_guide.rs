//! docs/wireshark.md's display filters against a capture of a real rnicd: RC QPs of two
//! functions run a WRITE, a READ, a SEND and a FETCH_ADD, and a WRITE with a wrong R_Key
//! that the responder NAKs; every filter of the guide's table must be one tshark takes
//! and must show at least one frame of that capture, so the guide cannot name a field
//! Wireshark does not have or a value rnic never sends.

use rnic_driver::verbs::{RecvWr, WcStatus, WrOpcode};
use rnic_tests::feature_checks::{expect, read, refused, write};
use rnic_tests::tshark::tshark;
use rnic_tests::verbs_pair::{pair, signaled, PairOptions};
use rnic_tests::Rnicd;

/// The filters of the guide's table (its first column).
fn guide_filters() -> Vec<String> {
    let path = rnic_tests::vm::repo().join("docs/wireshark.md");
    let guide =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let table = guide
        .split("## Display filters")
        .nth(1)
        .expect("the guide's Display filters section");
    table
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once("` |"))
        .map(|(filter, _)| filter.to_string())
        .collect()
}

#[test]
fn every_filter_of_the_guide_shows_frames_of_a_real_capture() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("guide.pcap");
    let mut rnicd = Rnicd::start(2, &["--pcap", pcap.to_str().unwrap()]);
    let o = PairOptions::default();
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    assert_eq!(
        b.qp.qp_num(),
        0x11,
        "the guide's QP filter names the first QP"
    );
    let (rkey, at) = (b.mr.rkey(), b.mr.addr(0));
    a.qp.post_send(&write(1, rkey, at, a.mr.sge(0, 64)))
        .unwrap();
    expect(&a.cq, 1, WcStatus::Success);
    a.qp.post_send(&read(2, rkey, at, a.mr.sge(4096, 64)))
        .unwrap();
    expect(&a.cq, 2, WcStatus::Success);
    b.qp.post_recv(&RecvWr {
        wr_id: 3,
        sges: vec![b.mr.sge(8192, 64)],
    })
    .unwrap();
    a.qp.post_send(&signaled(4, WrOpcode::Send, vec![a.mr.sge(0, 64)]))
        .unwrap();
    expect(&a.cq, 4, WcStatus::Success);
    expect(&b.cq, 3, WcStatus::Success);
    let add = WrOpcode::AtomicFetchAdd {
        remote_addr: b.mr.addr(16384),
        rkey,
        add: 1,
    };
    a.qp.post_send(&signaled(5, add, vec![a.mr.sge(12288, 8)]))
        .unwrap();
    expect(&a.cq, 5, WcStatus::Success);
    // A wrong R_Key: the responder NAKs it (remote access error).
    refused(
        &a,
        &b,
        write(6, rkey ^ 0x100, at, a.mr.sge(0, 64)),
        WcStatus::RemAccessErr,
    );
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget((a, b));

    let filters = guide_filters();
    assert!(filters.len() >= 10, "the guide's table: {filters:?}");
    let path = pcap.to_str().unwrap();
    for filter in &filters {
        let frames = tshark(&[
            "-r",
            path,
            "-Y",
            filter,
            "-T",
            "fields",
            "-e",
            "frame.number",
        ]);
        assert!(
            frames.lines().count() > 0,
            "docs/wireshark.md's filter `{filter}` shows no frame of a capture that has \
             WRITE, READ, SEND, FETCH_ADD and a NAK"
        );
    }
}
