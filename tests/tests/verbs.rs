//! RDMA verbs between two VFs of one rnicd, through the host transport: every operation
//! travels as RoCEv2 frames through the device's internal switch.

use std::time::Duration;

use rnic_driver::verbs::{RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::verbs_pair::{pair, poll_n, PairOptions};
use rnic_tests::Rnicd;

const T: Duration = Duration::from_secs(10);

#[test]
fn send_lands_in_the_posted_receive() {
    let rnicd = Rnicd::start(2, &[]);
    let o = PairOptions::default();
    let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
    b.qp.post_recv(&RecvWr {
        wr_id: 7,
        sges: vec![b.mr.sge(100, 64)],
    })
    .expect("post_recv");
    a.mr.write(0, b"hello, rdma");
    a.qp.post_send(&SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sges: vec![a.mr.sge(0, 11)],
        signaled: true,
        ..SendWr::default()
    })
    .expect("post_send");
    let sent = poll_n(&a.cq, 1, T);
    assert_eq!(sent.len(), 1, "send completion");
    assert_eq!(
        sent[0].status,
        Ok(WcStatus::Success),
        "{}",
        sent[0].status_str()
    );
    assert_eq!(sent[0].wr_id, 1);
    assert_eq!(sent[0].opcode, WcOpcode::Send);
    let got = poll_n(&b.cq, 1, T);
    assert_eq!(got.len(), 1, "receive completion");
    assert_eq!(
        got[0].status,
        Ok(WcStatus::Success),
        "{}",
        got[0].status_str()
    );
    assert_eq!((got[0].wr_id, got[0].byte_len), (7, 11));
    assert_eq!(got[0].src_qp, a.qp.qp_num());
    let mut data = [0u8; 11];
    b.mr.read(100, &mut data);
    assert_eq!(&data, b"hello, rdma");
}
