//! Two rnicd processes on one network (loopback UDP addresses, or an Ethernet segment),
//! for the network tests.

use std::time::Duration;

use rnic_driver::verbs::{Cq, Wc, WcStatus};

use crate::verbs_pair::{connect, pair, poll_n, side, PairOptions, Side};
use crate::Rnicd;

/// Runs `test` on two VFs of one rnicd, then on two rnicd over UDP (loopback addresses
/// `127.0.<net>.1` and `127.0.<net + 1>.1`, distinct per test).
pub fn on_both_paths(net: u8, test: impl Fn(&Side, &Side)) {
    let o = PairOptions::default();
    {
        let rnicd = Rnicd::start(2, &[]);
        let (a, b) = pair(&rnicd, "vf0", "vf1", &o);
        test(&a, &b);
    }
    let nets = [
        format!("udp:127.0.{net}.1"),
        format!("udp:127.0.{}.1", net + 1),
    ];
    let (_ra, _rb, a, b) = two_rnicd([&nets[0], &nets[1]], &[], &o, (0x10, 0xFF_FFF0));
    test(&a, &b);
}

/// The next completion of `cq` within `timeout`, which must come and must be for `wr_id`
/// with `status`.
#[track_caller]
pub fn expect_wc(cq: &Cq, wr_id: u64, status: WcStatus, timeout: Duration) -> Wc {
    let got = poll_n(cq, 1, timeout);
    assert_eq!(got.len(), 1, "no completion within {timeout:?}");
    assert_eq!(
        (got[0].wr_id, got[0].status),
        (wr_id, Ok(status)),
        "{}",
        got[0].status_str()
    );
    got[0]
}

/// Two rnicd with one VF each, on `--net` addresses `nets` (e.g. `udp:127.0.4.1`; the
/// first rnicd also gets `extra_a`), and a side on the vf0 of each, connected with send
/// PSNs `psns`. In the order that drops the sides before the processes they talk to.
pub fn two_rnicd(
    nets: [&str; 2],
    extra_a: &[&str],
    o: &PairOptions,
    psns: (u32, u32),
) -> (Rnicd, Rnicd, Side, Side) {
    let mut args_a = vec!["--net", nets[0]];
    args_a.extend_from_slice(extra_a);
    two_rnicd_with([&args_a, &["--net", nets[1]]], o, psns)
}

/// Two rnicd with one VF each, started in order with `args` each, and a side on the vf0
/// of each, connected with send PSNs `psns`.
pub fn two_rnicd_with(
    args: [&[&str]; 2],
    o: &PairOptions,
    psns: (u32, u32),
) -> (Rnicd, Rnicd, Side, Side) {
    let rnicd_a = Rnicd::start(1, args[0]);
    let rnicd_b = Rnicd::start(1, args[1]);
    let a = side(&rnicd_a.socket("vf0"), o);
    let b = side(&rnicd_b.socket("vf0"), o);
    connect(&a, &b, o, psns.0, psns.1);
    (rnicd_a, rnicd_b, a, b)
}
