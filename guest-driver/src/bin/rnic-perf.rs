//! rnic-perf: perftest-style bandwidth and latency tests between two rnic functions, with
//! the machine's own limits (memcpy, loopback UDP) measured in the same run. The logic
//! lives in `rnic_driver::perf`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use rnic_driver::perf::{self, Config, Test};
use rnic_driver::Location;

/// Measures RDMA bandwidth or latency between two rnic functions, as perftest's ib_*_bw
/// and ib_*_lat do, and prints each figure beside the baseline it is bounded by:
/// single-thread memcpy (two functions of one rnicd) and a loopback UDP socket pair
/// (two rnicd), measured in the same run.
///
/// One process drives both ends: give the two functions as vfio-user sockets (host) or
/// PCI addresses (in a VM with two functions).
///
/// Tests: write_bw, read_bw, send_bw, write_lat, send_lat, atomic_lat.
///
/// `rnic-perf --perftest write_bw|read_bw (--listen [PORT] | --connect HOST[:PORT])` is
/// another mode: one end of perftest's ib_write_bw / ib_read_bw over perftest's own TCP
/// exchange, so that the other end can be perftest (e.g. on Soft-RoCE); see
/// `rnic-perf --perftest write_bw --help`.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// The test.
    #[arg(value_parser = parse_test)]
    test: Test,

    /// vfio-user socket of the function that posts the work (host use).
    #[arg(long, value_name = "PATH", requires = "remote_vfio_user")]
    vfio_user: Option<PathBuf>,

    /// vfio-user socket of the function at the other end.
    #[arg(long, value_name = "PATH")]
    remote_vfio_user: Option<PathBuf>,

    /// PCI address of the function that posts the work (in a VM).
    #[arg(
        long,
        value_name = "BDF",
        conflicts_with = "vfio_user",
        requires = "remote_pci"
    )]
    pci: Option<String>,

    /// PCI address of the function at the other end.
    #[arg(long, value_name = "BDF")]
    remote_pci: Option<String>,

    /// Bytes per message.
    #[arg(long, short = 's', value_name = "N", default_value_t = 65536)]
    size: usize,

    /// Every size from 2 bytes to 1 MiB, in powers of two.
    #[arg(long, short = 'a')]
    all: bool,

    /// Messages per QP (bandwidth) or round trips (latency) per size.
    #[arg(long, short = 'n', value_name = "N")]
    iters: Option<u64>,

    /// Run each size for this many seconds instead (bandwidth tests).
    #[arg(long, short = 'D', value_name = "SECS")]
    duration: Option<f64>,

    /// QP pairs (bandwidth tests).
    #[arg(long, short = 'q', value_name = "N", default_value_t = 1)]
    qps: usize,

    /// Work requests in flight per QP.
    #[arg(long, short = 't', value_name = "N", default_value_t = 128)]
    tx_depth: u32,

    /// Messages up to this many bytes go inline in the WQE (WRITE, SEND).
    #[arg(long, short = 'I', value_name = "BYTES", default_value_t = 0)]
    inline: u32,

    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(long, short = 'm', value_name = "BYTES", default_value_t = 4096)]
    mtu: u32,

    /// Compare every byte that arrived with what was sent.
    #[arg(long)]
    check: bool,

    /// Skip the baselines (memcpy, UDP).
    #[arg(long)]
    no_baseline: bool,

    /// Seconds each baseline throughput measurement runs.
    #[arg(long, value_name = "SECS", default_value_t = 0.3)]
    baseline_time: f64,

    /// Run each size (and its baselines) this many times and report the median run.
    #[arg(long, short = 'r', value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    repeat: u64,

    /// Print one JSON object instead of tables (progress goes to standard error).
    #[arg(long)]
    json: bool,

    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
}

fn parse_test(s: &str) -> Result<Test, String> {
    Test::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Test::ALL.iter().map(|t| t.name()).collect();
        format!("{s}: use one of {}", names.join(", "))
    })
}

fn seconds(what: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{what} {v}: give a positive number of seconds"))
}

fn config(args: &Args) -> Result<Config, String> {
    let (local, remote) = match (
        &args.vfio_user,
        &args.remote_vfio_user,
        &args.pci,
        &args.remote_pci,
    ) {
        (Some(l), Some(r), None, None) => {
            (Location::VfioUser(l.clone()), Location::VfioUser(r.clone()))
        }
        (None, None, Some(l), Some(r)) => (Location::Pci(l.clone()), Location::Pci(r.clone())),
        _ => {
            return Err(
                "name both functions: --vfio-user PATH --remote-vfio-user PATH (host) or \
                 --pci BDF --remote-pci BDF (VM)"
                    .into(),
            )
        }
    };
    let sizes = if args.test == Test::AtomicLat {
        vec![8]
    } else if args.all {
        perf::all_sizes()
    } else {
        vec![args.size]
    };
    let default_iters = if args.test.is_bandwidth() { 5000 } else { 1000 };
    Ok(Config {
        local,
        remote,
        test: args.test,
        sizes,
        iters: args.iters.unwrap_or(default_iters),
        duration: args
            .duration
            .map(|d| seconds("--duration", d))
            .transpose()?,
        qps: args.qps,
        tx_depth: args.tx_depth,
        inline: args.inline,
        mtu: args.mtu,
        check: args.check,
        baselines: !args.no_baseline,
        baseline_time: seconds("--baseline-time", args.baseline_time)?,
        repeat: args.repeat as usize,
    })
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let argv: Vec<_> = std::env::args_os().collect();
    if perf::perftest::wanted(&argv) {
        std::process::exit(perf::perftest::main_with(argv));
    }
    let args = Args::parse();
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rnic-perf: {e}");
            std::process::exit(2);
        }
    };
    let mut progress = |line: &str| eprintln!("rnic-perf: {line}");
    let report = match perf::run(&cfg, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rnic-perf: {e}");
            std::process::exit(1);
        }
    };
    let json = match serde_json::to_string_pretty(&report) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("rnic-perf: cannot encode JSON: {e}");
            std::process::exit(1);
        }
    };
    if let Some(path) = &args.save {
        if let Err(e) = std::fs::write(path, format!("{json}\n")) {
            eprintln!("rnic-perf: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", report.text());
    }
}
