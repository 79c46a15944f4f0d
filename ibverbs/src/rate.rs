//! The static-rate conversions of verbs.h: `ibv_rate_to_mult`, `mult_to_ibv_rate`,
//! `ibv_rate_to_mbps`, `mbps_to_ibv_rate`. Pure functions of `enum ibv_rate`, answered
//! from one table with rdma-core's values (tests/more_verbs.rs compares every answer with
//! Debian's libibverbs.so.1).

use std::ffi::c_int;

use crate::abi::*;
use crate::ffi::guard;

/// Each rate with its multiple of 2.5 Gb/s (none for the rates that are not one: the
/// FDR, EDR and HDR lane rates) and its Mb/s.
const RATES: &[(ibv_rate, Option<c_int>, c_int)] = &[
    (IBV_RATE_2_5_GBPS, Some(1), 2500),
    (IBV_RATE_5_GBPS, Some(2), 5000),
    (IBV_RATE_10_GBPS, Some(4), 10000),
    (IBV_RATE_20_GBPS, Some(8), 20000),
    (IBV_RATE_30_GBPS, Some(12), 30000),
    (IBV_RATE_40_GBPS, Some(16), 40000),
    (IBV_RATE_60_GBPS, Some(24), 60000),
    (IBV_RATE_80_GBPS, Some(32), 80000),
    (IBV_RATE_120_GBPS, Some(48), 120000),
    (IBV_RATE_14_GBPS, None, 14062),
    (IBV_RATE_56_GBPS, None, 56250),
    (IBV_RATE_112_GBPS, None, 112500),
    (IBV_RATE_168_GBPS, None, 168750),
    (IBV_RATE_25_GBPS, None, 25781),
    (IBV_RATE_100_GBPS, None, 103125),
    (IBV_RATE_200_GBPS, None, 206250),
    (IBV_RATE_300_GBPS, None, 309375),
    (IBV_RATE_28_GBPS, Some(11), 28125),
    (IBV_RATE_50_GBPS, Some(20), 53125),
    (IBV_RATE_400_GBPS, Some(160), 425000),
    (IBV_RATE_600_GBPS, Some(240), 637500),
    (IBV_RATE_800_GBPS, Some(320), 850000),
    (IBV_RATE_1200_GBPS, Some(480), 1275000),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, -1 for a rate that is none
/// (or is no rate).
pub(crate) extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
    guard("ibv_rate_to_mult", -1, || {
        RATES
            .iter()
            .find(|r| r.0 == rate)
            .and_then(|r| r.1)
            .unwrap_or(-1)
    })
}

/// `mult_to_ibv_rate`: the rate of a multiple of 2.5 Gb/s, `IBV_RATE_MAX` for a multiple
/// no rate has.
pub(crate) extern "C" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
    guard("mult_to_ibv_rate", IBV_RATE_MAX, || {
        RATES
            .iter()
            .find(|r| r.1 == Some(mult))
            .map_or(IBV_RATE_MAX, |r| r.0)
    })
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, -1 for no rate.
pub(crate) extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
    guard("ibv_rate_to_mbps", -1, || {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
    })
}

/// `mbps_to_ibv_rate`: the rate of exactly `mbps` Mb/s, `IBV_RATE_MAX` for any other.
pub(crate) extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
    guard("mbps_to_ibv_rate", IBV_RATE_MAX, || {
        RATES
            .iter()
            .find(|r| r.2 == mbps)
            .map_or(IBV_RATE_MAX, |r| r.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_convert_both_ways() {
        assert_eq!(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
        assert_eq!(ibv_rate_to_mult(IBV_RATE_100_GBPS), -1);
        assert_eq!(ibv_rate_to_mult(IBV_RATE_MAX), -1);
        assert_eq!(ibv_rate_to_mult(u32::MAX), -1);
        assert_eq!(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
        assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_25_GBPS), 25781);
        assert_eq!(ibv_rate_to_mbps(25), -1);
        assert_eq!(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS);
        assert_eq!(mbps_to_ibv_rate(25000), IBV_RATE_MAX);
        for &(rate, mult, mbps) in RATES {
            assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(rate)), rate);
            if let Some(m) = mult {
                assert_eq!(mult_to_ibv_rate(m), rate);
            }
            assert_eq!(ibv_rate_to_mbps(rate), mbps);
        }
    }
}
