//! Several pairs of functions at once (`rnic-perf --pairs N`, or the options of several
//! pairs): each pair runs the same bandwidth test, driven by a thread of its own as a
//! separate perftest process would drive it, and the pairs start each size together.
//! The report gives each pair's figures and their sum, against baselines of N memcpy
//! threads and N loopback UDP socket pairs running at once in the same process run
//! (README, "Benchmarks").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::baseline;
use super::report::{bandwidth_header, bandwidth_row, BandwidthRow, Report, SizeResult, RULE};
use super::stats::{mib_per_s, ratio};
use super::{run_once, Config, PerfError, Plan, Result, Test};

/// The machine's limits for N pairs: N of each single-thread baseline at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ParallelBaseline {
    /// How many ran at once.
    pub threads: usize,
    /// Bytes per copy.
    pub memcpy_bytes: usize,
    /// N threads copying at once, each between its own two buffers: MiB/s in all.
    pub memcpy_mib_s: f64,
    /// Bytes per datagram.
    pub udp_datagram: usize,
    /// N loopback UDP socket pairs sending at once: MiB/s of payload received in all.
    pub udp_mib_s: f64,
}

/// All pairs' figures for one message size.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Aggregate {
    /// Bytes per message.
    pub bytes: usize,
    /// Messages all pairs completed.
    pub messages: u64,
    /// From the pairs' common start to the end of the last one.
    pub seconds: f64,
    /// All pairs' bytes over `seconds`, MiB/s.
    pub avg_mib_s: f64,
    /// All pairs' messages over `seconds`, millions per second.
    pub msg_rate_mpps: f64,
    /// The sum of the pairs' peaks (each over its own best window), MiB/s.
    pub peak_sum_mib_s: f64,
    /// The baselines, if measured.
    pub baseline: Option<ParallelBaseline>,
    /// `avg_mib_s` over N memcpy threads' bandwidth.
    pub ratio_memcpy: Option<f64>,
    /// `avg_mib_s` over N UDP socket pairs' throughput.
    pub ratio_udp: Option<f64>,
}

/// What a run of several pairs found.
#[derive(Clone, Debug, Serialize)]
pub struct PairsReport {
    /// The test.
    pub test: Test,
    /// Each pair's own report (each size: the run of the median aggregate).
    pub pairs: Vec<Report>,
    /// The pairs together, per size.
    pub aggregate: Vec<Aggregate>,
}

/// One pair's run of one size: when it started and ended, and what it found.
struct Timed {
    start: Instant,
    end: Instant,
    result: SizeResult,
}

/// The aggregate of the pairs' runs `runs` of `bytes`-byte messages.
fn aggregate(bytes: usize, runs: &[&Timed]) -> Aggregate {
    let start = runs.iter().map(|t| t.start).min();
    let end = runs.iter().map(|t| t.end).max();
    let span = match (start, end) {
        (Some(s), Some(e)) => e - s,
        _ => Duration::ZERO,
    };
    let messages: u64 = runs.iter().map(|t| t.result.iterations).sum();
    let peak_sum_mib_s = runs
        .iter()
        .filter_map(|t| t.result.bandwidth.map(|b| b.peak_mib_s))
        .sum();
    Aggregate {
        bytes,
        messages,
        seconds: span.as_secs_f64(),
        avg_mib_s: mib_per_s(messages * bytes as u64, span),
        msg_rate_mpps: messages as f64 / span.as_secs_f64().max(1e-9) / 1e6,
        peak_sum_mib_s,
        ..Aggregate::default()
    }
}

/// Measures N of each single-thread baseline at once.
fn parallel_baseline(
    threads: usize,
    size: usize,
    mtu: usize,
    time: Duration,
) -> std::io::Result<ParallelBaseline> {
    let datagram = size.clamp(1, mtu);
    let memcpy_mib_s = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(move || baseline::memcpy_mib_s(size, time)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    });
    let udp: std::io::Result<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(move || baseline::udp_mib_s(datagram, time)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a UDP baseline panicked")))
            })
            .collect()
    });
    Ok(ParallelBaseline {
        threads,
        memcpy_bytes: size,
        memcpy_mib_s,
        udp_datagram: datagram,
        udp_mib_s: udp?.into_iter().sum(),
    })
}

/// Runs `cfgs` (one per pair: the same test, sizes and options, their own functions) at
/// once. Bandwidth tests only: a latency under other pairs' load is not what perftest's
/// latency tests measure.
pub fn run(cfgs: &[Config], progress: &(dyn Fn(&str) + Sync)) -> Result<PairsReport> {
    let Some(first) = cfgs.first() else {
        return Err(PerfError::Config("no pair of functions to run".into()));
    };
    if !first.test.is_bandwidth() {
        return Err(PerfError::Config(format!(
            "{} runs one pair: several pairs at once run the bandwidth tests",
            first.test.name()
        )));
    }
    let n = cfgs.len();
    let repeat = first.repeat.max(1);
    // Every pair meets at the start of every run, failed or not, so that none waits for
    // ever on one that gave up.
    let barrier = Barrier::new(n);
    let failed = AtomicBool::new(false);
    let error: Mutex<Option<PerfError>> = Mutex::new(None);
    let fail = |e: PerfError| {
        failed.store(true, Ordering::Release);
        error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    // runs[pair][size][repeat]
    let runs: Vec<Vec<Vec<Timed>>> = std::thread::scope(|s| {
        let handles: Vec<_> = cfgs
            .iter()
            .enumerate()
            .map(|(p, cfg)| {
                let (barrier, failed, fail) = (&barrier, &failed, &fail);
                s.spawn(move || {
                    let mut say = |line: &str| progress(&format!("pair {p}: {line}"));
                    let ends = Plan::of(cfg).and_then(|plan| {
                        let ends = plan.open(cfg, &mut say)?;
                        Ok((plan, ends))
                    });
                    let ends = ends.map_err(fail).ok();
                    let mut mine = Vec::with_capacity(cfg.sizes.len());
                    for &size in &cfg.sizes {
                        let mut sized = Vec::with_capacity(repeat);
                        for _ in 0..repeat {
                            barrier.wait();
                            let Some((plan, (a, b))) = &ends else {
                                continue;
                            };
                            if failed.load(Ordering::Acquire) {
                                continue;
                            }
                            let start = Instant::now();
                            match run_once(cfg, plan, size, a, b) {
                                Ok(result) => sized.push(Timed {
                                    start,
                                    end: Instant::now(),
                                    result,
                                }),
                                Err(e) => fail(e),
                            }
                        }
                        mine.push(sized);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let complete = |pair: &Vec<Vec<Timed>>| {
        pair.len() == first.sizes.len() && pair.iter().all(|sized| sized.len() == repeat)
    };
    if let Some(p) = runs.iter().position(|pair| !complete(pair)) {
        return Err(PerfError::Failed(format!(
            "pair {p} stopped before the end of the run"
        )));
    }
    let mut aggregates = Vec::with_capacity(first.sizes.len());
    let mut per_pair: Vec<Vec<SizeResult>> = vec![Vec::new(); n];
    for (k, &size) in first.sizes.iter().enumerate() {
        // The repeat whose aggregate is the median, with each pair's run of it.
        let mut by_repeat: Vec<(Aggregate, usize)> = (0..repeat)
            .map(|r| {
                let timed: Vec<&Timed> = runs.iter().map(|pair| &pair[k][r]).collect();
                (aggregate(size, &timed), r)
            })
            .collect();
        by_repeat.sort_by(|x, y| x.0.avg_mib_s.total_cmp(&y.0.avg_mib_s));
        let (mut agg, r) = by_repeat.swap_remove(repeat / 2);
        for (pair, results) in runs.iter().zip(&mut per_pair) {
            results.push(pair[k][r].result.clone());
        }
        if first.baselines {
            progress(&format!(
                "baselines: {n} memcpy threads and {n} UDP pairs at once"
            ));
            let b = parallel_baseline(n, size, first.mtu as usize, first.baseline_time)?;
            agg.ratio_memcpy = ratio(agg.avg_mib_s, Some(b.memcpy_mib_s));
            agg.ratio_udp = ratio(agg.avg_mib_s, Some(b.udp_mib_s));
            agg.baseline = Some(b);
        }
        aggregates.push(agg);
    }
    let pairs = cfgs
        .iter()
        .zip(per_pair)
        .map(|(cfg, results)| Report {
            test: cfg.test,
            local: cfg.local.to_string(),
            remote: cfg.remote.to_string(),
            qps: cfg.qps,
            tx_depth: cfg.tx_depth,
            inline: cfg.inline,
            mtu: cfg.mtu,
            check: cfg.check,
            repeat,
            events: cfg.events,
            results,
        })
        .collect();
    Ok(PairsReport {
        test: first.test,
        pairs,
        aggregate: aggregates,
    })
}

impl PairsReport {
    /// perftest-like text: each pair's rows, then the sum of all pairs and its baselines.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{RULE}");
        let _ = writeln!(
            s,
            " {}  {} pairs at once{}",
            self.test.name(),
            self.pairs.len(),
            self.pairs.first().map_or(String::new(), |p| format!(
                "\n QPs {} per pair  TX depth {}  MTU {}  inline {}{}{}",
                p.qps,
                p.tx_depth,
                p.mtu,
                p.inline,
                if p.check { "  data checked" } else { "" },
                if p.events { "  events" } else { "" }
            ))
        );
        for (i, p) in self.pairs.iter().enumerate() {
            let _ = writeln!(s, " pair {i}: {} -> {}", p.local, p.remote);
        }
        let _ = writeln!(s, "{RULE}");
        bandwidth_header(&mut s, Some("pair"));
        for (k, agg) in self.aggregate.iter().enumerate() {
            for (i, p) in self.pairs.iter().enumerate() {
                if let Some(r) = p.results.get(k) {
                    let row = BandwidthRow {
                        ratio_memcpy: None,
                        ratio_udp: None,
                        ..BandwidthRow::of(r)
                    };
                    bandwidth_row(&mut s, Some(&i.to_string()), &row);
                }
            }
            let row = BandwidthRow {
                bytes: agg.bytes,
                iterations: agg.messages,
                peak_mib_s: agg.peak_sum_mib_s,
                avg_mib_s: agg.avg_mib_s,
                msg_rate_mpps: agg.msg_rate_mpps,
                ratio_memcpy: agg.ratio_memcpy,
                ratio_udp: agg.ratio_udp,
            };
            bandwidth_row(&mut s, Some("all"), &row);
        }
        let _ = writeln!(s, "{RULE}");
        let baselines: Vec<_> = self.aggregate.iter().filter_map(|a| a.baseline).collect();
        if !baselines.is_empty() {
            let _ = writeln!(
                s,
                " baselines, same run, N at once: {:>8} {:>3} {:>14} {:>13} {:>14}",
                "#bytes", "N", "memcpy[MiB/sec]", "UDP datagram", "UDP[MiB/sec]"
            );
            for b in baselines {
                let _ = writeln!(
                    s,
                    "                                 {:>8} {:>3} {:>14.2} {:>13} {:>14.2}",
                    b.memcpy_bytes, b.threads, b.memcpy_mib_s, b.udp_datagram, b.udp_mib_s
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

    fn timed(start: Instant, ms: u64, messages: u64, bytes: usize) -> Timed {
        let elapsed = Duration::from_millis(ms);
        Timed {
            start,
            end: start + elapsed,
            result: SizeResult::bandwidth(
                bytes,
                messages,
                elapsed,
                0.0,
                messages * bytes as u64,
                0,
            ),
        }
    }

    #[test]
    fn the_aggregate_spans_from_the_first_start_to_the_last_end() {
        let t0 = Instant::now();
        let a = timed(t0, 1000, 1000, 1000);
        let b = timed(t0 + Duration::from_millis(500), 1500, 3000, 1000);
        let agg = aggregate(1000, &[&a, &b]);
        assert_eq!(agg.messages, 4000);
        assert!((agg.seconds - 2.0).abs() < 1e-9);
        // 4 MB in 2 s.
        let mib = super::super::stats::MIB;
        assert!((agg.avg_mib_s - 2e6 / mib).abs() < 1e-9, "{agg:?}");
        assert!((agg.msg_rate_mpps - 0.002).abs() < 1e-12, "{agg:?}");
        // Each run's peak is its average here: 1 + 2 MB/s.
        assert!((agg.peak_sum_mib_s - 3e6 / mib).abs() < 1e-9, "{agg:?}");
    }

    #[test]
    fn parallel_baselines_add_up() {
        let b = parallel_baseline(2, 4096, 1024, Duration::from_millis(20)).unwrap();
        assert_eq!((b.threads, b.udp_datagram, b.memcpy_bytes), (2, 1024, 4096));
        assert!(b.memcpy_mib_s > 0.0 && b.udp_mib_s > 0.0, "{b:?}");
    }
}
