//! Figures of a run: latency percentiles, bandwidth over windows, and the ratios to the
//! baselines (docs/performance.md).

use std::time::Duration;

use serde::Serialize;

/// Latency figures of a set of samples, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Samples taken.
    pub samples: usize,
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub median_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Mean.
    pub avg_us: f64,
}

impl Latency {
    /// The figures of `samples` (sorted here); all zero when there are none.
    pub fn of(samples: &mut [Duration]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let at = |q: f64| {
            // Nearest rank: the smallest sample with at least q of them at or below it.
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            us(samples[rank - 1])
        };
        let total: Duration = samples.iter().sum();
        Latency {
            samples: samples.len(),
            min_us: us(samples[0]),
            median_us: at(0.5),
            p99_us: at(0.99),
            max_us: us(samples[samples.len() - 1]),
            avg_us: us(total) / samples.len() as f64,
        }
    }
}

/// Bytes in a MiB: the unit of every bandwidth rnic-perf reports.
pub const MIB: f64 = (1u64 << 20) as f64;

/// Bytes per second of `bytes` moved in `elapsed`, in MiB/s (2^20 bytes, as perftest's
/// "MiB/sec").
pub fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s <= 0.0 {
        0.0
    } else {
        bytes as f64 / s / MIB
    }
}

/// The best bandwidth, in MiB/s, over windows of consecutive progress marks `(time since
/// start, bytes done by then)`: at least `min_window` long each, so that one burst of
/// completions read at once does not look like an infinitely fast moment.
pub fn peak_mib_per_s(marks: &[(Duration, u64)], min_window: Duration) -> f64 {
    let mut best = 0.0f64;
    let mut start = 0;
    for end in 1..marks.len() {
        while start + 1 < end && marks[end].0 - marks[start + 1].0 >= min_window {
            start += 1;
        }
        let dt = marks[end].0 - marks[start].0;
        if dt >= min_window {
            best = best.max(mib_per_s(marks[end].1 - marks[start].1, dt));
        }
    }
    best
}

/// `value / baseline`, or `None` where there is no baseline to compare with.
pub fn ratio(value: f64, baseline: Option<f64>) -> Option<f64> {
    baseline.filter(|b| *b > 0.0).map(|b| value / b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut s: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let l = Latency::of(&mut s);
        assert_eq!(l.samples, 100);
        assert_eq!(l.min_us, 1.0);
        assert_eq!(l.median_us, 50.0);
        assert_eq!(l.p99_us, 99.0);
        assert_eq!(l.max_us, 100.0);
        assert!((l.avg_us - 50.5).abs() < 1e-9);
        assert_eq!(Latency::of(&mut []), Latency::default());
        let one = Latency::of(&mut [Duration::from_micros(7)]);
        assert_eq!((one.min_us, one.median_us, one.p99_us), (7.0, 7.0, 7.0));
    }

    #[test]
    fn peak_needs_a_whole_window() {
        let ms = Duration::from_millis;
        // 1 MiB per ms for 10 ms, then one burst of 5 MiB at once.
        let mib = 1u64 << 20;
        let mut marks: Vec<_> = (0..=10).map(|i| (ms(i), i * mib)).collect();
        marks.push((ms(10) + Duration::from_nanos(1), 15 * mib));
        let peak = peak_mib_per_s(&marks, ms(2));
        // A 2 ms window that includes the burst: 7 MiB in 2 ms.
        assert!((peak - 3_500.0).abs() < 1.0, "{peak}");
        assert_eq!(peak_mib_per_s(&marks[..1], ms(2)), 0.0);
        assert_eq!(mib_per_s(2 << 20, Duration::from_secs(2)), 1.0);
    }

    #[test]
    fn ratios_need_a_baseline() {
        assert_eq!(ratio(3.0, Some(4.0)), Some(0.75));
        assert_eq!(ratio(3.0, None), None);
        assert_eq!(ratio(3.0, Some(0.0)), None);
    }
}
