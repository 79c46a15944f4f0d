//! Two rnicd processes on one network (loopback UDP addresses, or an Ethernet segment),
//! for the network tests.

use crate::verbs_pair::{connect, side, PairOptions, Side};
use crate::Rnicd;

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
