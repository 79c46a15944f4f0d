//! What a run found, as perftest-like tables or JSON, with every figure also given as a
//! ratio to its baseline (README, "Benchmarks").

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

use super::baseline::Baseline;
use super::stats::{mib_per_s, ratio, Latency};
use super::Test;

/// Bandwidth figures of one message size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Bandwidth {
    /// Peak over the best window, MiB/s.
    pub peak_mib_s: f64,
    /// Average over the run, MiB/s.
    pub avg_mib_s: f64,
    /// Messages per second, in millions.
    pub msg_rate_mpps: f64,
    /// Seconds the run took.
    pub seconds: f64,
}

/// The figures of one message size.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SizeResult {
    /// Bytes per message.
    pub bytes: usize,
    /// Messages completed (all QPs), or round trips timed.
    pub iterations: u64,
    /// Bytes the completions account for: the requester's completions for WRITE and READ
    /// (a signalled completion retires the unsignalled WRs before it), the receive
    /// completions' byte counts for SEND; round trips times size for latency tests.
    pub bytes_completed: u64,
    /// Bytes compared with what was sent, in checking mode (0 without).
    pub bytes_checked: u64,
    /// Bandwidth tests: the messages each QP completed, in QP order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages_per_qp: Vec<u64>,
    /// Bandwidth tests in checking mode: the QPs whose received bytes were compared (and
    /// matched, or the run would have failed).
    pub qps_checked: u64,
    /// Bandwidth tests.
    pub bandwidth: Option<Bandwidth>,
    /// Latency tests (half round trips; whole round trips for atomic_lat).
    pub latency: Option<Latency>,
    /// The machine's limits for this size, if measured.
    pub baseline: Option<Baseline>,
    /// Average bandwidth over single-thread memcpy bandwidth.
    pub ratio_memcpy: Option<f64>,
    /// Average bandwidth over loopback UDP throughput.
    pub ratio_udp: Option<f64>,
    /// Median latency over the loopback UDP ping-pong's median half round trip.
    pub ratio_udp_latency: Option<f64>,
}

impl SizeResult {
    /// A bandwidth result: `messages` of `bytes` in `elapsed`.
    pub fn bandwidth(
        bytes: usize,
        messages: u64,
        elapsed: Duration,
        peak_mib_s: f64,
        bytes_completed: u64,
        bytes_checked: u64,
    ) -> SizeResult {
        let avg = mib_per_s(messages * bytes as u64, elapsed);
        SizeResult {
            bytes,
            iterations: messages,
            bytes_completed,
            bytes_checked,
            bandwidth: Some(Bandwidth {
                // A run shorter than one peak window has only its average.
                peak_mib_s: if peak_mib_s > 0.0 { peak_mib_s } else { avg },
                avg_mib_s: avg,
                msg_rate_mpps: messages as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6,
                seconds: elapsed.as_secs_f64(),
            }),
            ..SizeResult::default()
        }
    }

    /// A latency result from the round trips' `samples`.
    pub fn latency(bytes: usize, samples: &mut [Duration], bytes_checked: u64) -> SizeResult {
        SizeResult {
            bytes,
            iterations: samples.len() as u64,
            bytes_completed: samples.len() as u64 * bytes as u64,
            bytes_checked,
            latency: Some(Latency::of(samples)),
            ..SizeResult::default()
        }
    }

    /// Adds the baselines and the ratios to them.
    pub fn set_baseline(&mut self, b: Baseline) {
        if let Some(bw) = &self.bandwidth {
            self.ratio_memcpy = ratio(bw.avg_mib_s, Some(b.memcpy_mib_s));
            self.ratio_udp = ratio(bw.avg_mib_s, Some(b.udp_mib_s));
        }
        if let Some(l) = &self.latency {
            self.ratio_udp_latency = ratio(l.median_us, Some(b.udp_half_rtt.median_us));
        }
        self.baseline = Some(b);
    }
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The test.
    pub test: Test,
    /// The function that posted the work.
    pub local: String,
    /// The other end.
    pub remote: String,
    /// QP pairs.
    pub qps: usize,
    /// Work requests in flight per QP.
    pub tx_depth: u32,
    /// Inline threshold, bytes.
    pub inline: u32,
    /// Path MTU, bytes.
    pub mtu: u32,
    /// Whether data was checked.
    pub check: bool,
    /// Runs per size; each result is the median run.
    pub repeat: usize,
    /// Whether the driver slept on completion interrupts (`--events`).
    pub events: bool,
    /// One entry per message size.
    pub results: Vec<SizeResult>,
}

/// A ratio with two decimals, or `-`.
pub(super) fn opt(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// The line between a table's parts.
pub(super) const RULE: &str =
    "---------------------------------------------------------------------------------------------";

/// The figures of one row of a bandwidth table.
pub(super) struct BandwidthRow {
    pub bytes: usize,
    pub iterations: u64,
    pub peak_mib_s: f64,
    pub avg_mib_s: f64,
    pub msg_rate_mpps: f64,
    pub ratio_memcpy: Option<f64>,
    pub ratio_udp: Option<f64>,
}

impl BandwidthRow {
    /// The row of one size's result.
    pub fn of(r: &SizeResult) -> Self {
        let bw = r.bandwidth.unwrap_or_default();
        Self {
            bytes: r.bytes,
            iterations: r.iterations,
            peak_mib_s: bw.peak_mib_s,
            avg_mib_s: bw.avg_mib_s,
            msg_rate_mpps: bw.msg_rate_mpps,
            ratio_memcpy: r.ratio_memcpy,
            ratio_udp: r.ratio_udp,
        }
    }
}

/// The header of a bandwidth table, with a column named `label` before the figures if
/// given (the pair, in a table of several).
pub(super) fn bandwidth_header(s: &mut String, label: Option<&str>) {
    let _ = writeln!(
        s,
        " {:>8}{} {:>11} {:>15} {:>18} {:>13} {:>9} {:>9}",
        "#bytes",
        label.map_or(String::new(), |l| format!(" {l:>5}")),
        "#iterations",
        "BW peak[MiB/sec]",
        "BW average[MiB/sec]",
        "MsgRate[Mpps]",
        "vs memcpy",
        "vs UDP"
    );
}

/// A row of a bandwidth table; `label` as in [`bandwidth_header`].
pub(super) fn bandwidth_row(s: &mut String, label: Option<&str>, r: &BandwidthRow) {
    let _ = writeln!(
        s,
        " {:>8}{} {:>11} {:>15.2} {:>18.2} {:>13.6} {:>9} {:>9}",
        r.bytes,
        label.map_or(String::new(), |l| format!(" {l:>5}")),
        r.iterations,
        r.peak_mib_s,
        r.avg_mib_s,
        r.msg_rate_mpps,
        opt(r.ratio_memcpy),
        opt(r.ratio_udp)
    );
}

impl Report {
    /// perftest-like text: a header, one row per size, and the baselines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{RULE}");
        let _ = writeln!(
            s,
            " {}  {} -> {}\n QPs {}  TX depth {}  MTU {}  inline {}{}{}{}",
            self.test.name(),
            self.local,
            self.remote,
            self.qps,
            self.tx_depth,
            self.mtu,
            self.inline,
            if self.check { "  data checked" } else { "" },
            if self.events { "  events" } else { "" },
            if self.repeat > 1 {
                format!("  median of {} runs", self.repeat)
            } else {
                String::new()
            }
        );
        let _ = writeln!(s, "{RULE}");
        if self.test.is_bandwidth() {
            bandwidth_header(&mut s, None);
            for r in &self.results {
                bandwidth_row(&mut s, None, &BandwidthRow::of(r));
            }
        } else {
            let unit = if self.test == Test::AtomicLat {
                "round trip"
            } else {
                "half round trip"
            };
            let _ = writeln!(s, " latency = {unit}, usec");
            let _ = writeln!(
                s,
                " {:>8} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>7}",
                "#bytes",
                "#iterations",
                "t_min",
                "t_median",
                "t_p99",
                "t_max",
                "t_avg",
                "UDP half-RTT",
                "vs UDP"
            );
            for r in &self.results {
                let l = r.latency.unwrap_or_default();
                let udp = r.baseline.map(|b| b.udp_half_rtt.median_us);
                let _ = writeln!(
                    s,
                    " {:>8} {:>11} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>12} {:>7}",
                    r.bytes,
                    r.iterations,
                    l.min_us,
                    l.median_us,
                    l.p99_us,
                    l.max_us,
                    l.avg_us,
                    opt(udp),
                    opt(r.ratio_udp_latency)
                );
            }
        }
        let _ = writeln!(s, "{RULE}");
        let baselines: Vec<_> = self.results.iter().filter_map(|r| r.baseline).collect();
        if !baselines.is_empty() {
            let _ = writeln!(
                s,
                " baselines, same run: {:>8} {:>14} {:>13} {:>14} {:>16}",
                "#bytes", "memcpy[MiB/sec]", "UDP datagram", "UDP[MiB/sec]", "UDP half-RTT[us]"
            );
            for b in baselines {
                let _ = writeln!(
                    s,
                    "                      {:>8} {:>14.2} {:>13} {:>14.2} {:>16.2}",
                    b.memcpy_bytes,
                    b.memcpy_mib_s,
                    b.udp_datagram,
                    b.udp_mib_s,
                    b.udp_half_rtt.median_us
                );
            }
            let _ = writeln!(s, "{RULE}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_follow_the_baseline() {
        // 1000 messages of 64 KiB in a second: 62.5 MiB/s.
        let mut r = SizeResult::bandwidth(65536, 1000, Duration::from_secs(1), 0.0, 65_536_000, 0);
        let bw = r.bandwidth.unwrap();
        assert!((bw.avg_mib_s - 62.5).abs() < 1e-9);
        assert_eq!(bw.peak_mib_s, bw.avg_mib_s);
        r.set_baseline(Baseline {
            memcpy_bytes: 65536,
            memcpy_mib_s: 125.0,
            udp_datagram: 4096,
            udp_mib_s: 62.5,
            udp_half_rtt: Latency::default(),
        });
        assert_eq!(r.ratio_memcpy, Some(0.5));
        assert_eq!(r.ratio_udp, Some(1.0));
        assert_eq!(r.ratio_udp_latency, None);

        let mut lat = SizeResult::latency(8, &mut [Duration::from_micros(4); 3], 24);
        lat.set_baseline(Baseline {
            udp_half_rtt: Latency::of(&mut [Duration::from_micros(8)]),
            ..Baseline::default()
        });
        assert_eq!(lat.ratio_udp_latency, Some(0.5));
        assert_eq!(lat.bytes_completed, 24);
        let report = Report {
            test: Test::WriteLat,
            local: "a".into(),
            remote: "b".into(),
            qps: 1,
            tx_depth: 1,
            inline: 0,
            mtu: 1024,
            check: true,
            repeat: 1,
            events: false,
            results: vec![lat],
        };
        let text = report.text();
        assert!(text.contains("write_lat"), "{text}");
        assert!(text.contains("half round trip"), "{text}");
        assert!(text.contains("0.50"), "{text}");
    }
}
