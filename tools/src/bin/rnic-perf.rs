//! rnic-perf: perftest-style bandwidth and latency tests between two rnic functions, with
//! the machine's own limits (memcpy, loopback UDP) measured in the same run. The logic
//! lives in `rnic_tools::perf` (README, "Benchmarks").

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use rnic_driver::Location;
use rnic_tools::perf::{self, Config, Test};

/// Measures RDMA bandwidth or latency between two rnic functions, as perftest's ib_*_bw
/// and ib_*_lat do, and prints each figure beside the baseline it is bounded by:
/// single-thread memcpy (two functions of one rnicd) and a loopback UDP socket pair
/// (two rnicd), measured in the same run.
///
/// One process drives both ends: give the two functions as vfio-user sockets (host) or
/// PCI addresses (in a VM with two functions). Several pairs run at once, each driven by
/// its own thread, when the options name several (repeat --vfio-user and
/// --remote-vfio-user, or --pci and --remote-pci) or with --pairs N; the report then
/// gives each pair and their sum, against N memcpy threads and N UDP pairs at once.
///
/// Tests: write_bw, read_bw, send_bw, write_lat, send_lat, atomic_lat.
///
/// `rnic-perf --perftest write_bw|read_bw (--listen [PORT] | --connect HOST[:PORT])` is
/// another mode: one end of perftest's ib_write_bw / ib_read_bw over perftest's own TCP
/// exchange, so that the other end can be perftest (e.g. on Soft-RoCE); see
/// `rnic-perf --perftest write_bw --help`.
#[derive(Parser, Debug)]
#[command(name = "rnic-perf", version)]
struct Args {
    #[command(flatten)]
    wait: rnic_tools::cli::WaitOption,

    /// The test.
    #[arg(value_parser = parse_test)]
    test: Test,

    /// vfio-user socket of the function that posts the work (host use); once per pair.
    #[arg(long, value_name = "PATH")]
    vfio_user: Vec<PathBuf>,

    /// vfio-user socket of the function at the other end; once per pair.
    #[arg(long, value_name = "PATH")]
    remote_vfio_user: Vec<PathBuf>,

    /// PCI address of the function that posts the work (in a VM); once per pair.
    #[arg(long, value_name = "BDF")]
    pci: Vec<String>,

    /// PCI address of the function at the other end; once per pair.
    #[arg(long, value_name = "BDF")]
    remote_pci: Vec<String>,

    /// Run N pairs at once: VF 2k posts to VF 2k+1 for k below N, as DIR/vf2k.sock and
    /// DIR/vf2k+1.sock with --socket-dir DIR (host), else as the 2k-th and 2k+1-th rnic
    /// functions in PCI order (in a VM). Bandwidth tests.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=128))]
    pairs: Option<u16>,

    /// With --pairs: the directory of rnicd's sockets.
    #[arg(long, value_name = "DIR", requires = "pairs")]
    socket_dir: Option<PathBuf>,

    /// Sleep on completion interrupts instead of spinning on the CQs (perftest's -e): arm
    /// the CQ, poll once more, then wait on the MSI-X eventfd. Frees the cores for rnicd
    /// on a small machine. write_lat then sends RDMA WRITE with immediate, so that the
    /// target's driver is woken by a receive completion.
    #[arg(long, short = 'e')]
    events: bool,

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
    /// (No short flag: perftest's `-r` is the receive queue depth.)
    #[arg(long, value_name = "N", default_value_t = 1,
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

/// The pairs of functions the options name: (the one that posts, the other end).
fn pairs(args: &Args) -> Result<Vec<(Location, Location)>, String> {
    if let Some(n) = args.pairs {
        if !(args.vfio_user.is_empty() && args.pci.is_empty()) {
            return Err(
                "--pairs names the functions itself: leave out --vfio-user and --pci".into(),
            );
        }
        let n = usize::from(n);
        return match &args.socket_dir {
            Some(dir) => Ok((0..n)
                .map(|k| {
                    let sock = |v: usize| Location::VfioUser(dir.join(format!("vf{v}.sock")));
                    (sock(2 * k), sock(2 * k + 1))
                })
                .collect()),
            None => {
                let all = Location::all_pci().map_err(|e| e.to_string())?;
                if all.len() < 2 * n {
                    return Err(format!(
                        "--pairs {n} needs {} rnic functions and this machine has {} \
                         (on the host, give --socket-dir DIR)",
                        2 * n,
                        all.len()
                    ));
                }
                let mut it = all.into_iter();
                Ok((0..n)
                    .map_while(|_| Some((it.next()?, it.next()?)))
                    .collect())
            }
        };
    }
    let zip = |l: &[Location], r: &[Location]| -> Result<Vec<_>, String> {
        if l.len() != r.len() {
            return Err(format!(
                "{} function(s) post work (--vfio-user, --pci) and {} are at the other end \
                 (--remote-vfio-user, --remote-pci): name them in pairs",
                l.len(),
                r.len()
            ));
        }
        Ok(l.iter().cloned().zip(r.iter().cloned()).collect())
    };
    let host = |v: &[PathBuf]| {
        v.iter()
            .map(|p| Location::VfioUser(p.clone()))
            .collect::<Vec<_>>()
    };
    let vm = |v: &[String]| {
        v.iter()
            .map(|b| Location::Pci(b.clone()))
            .collect::<Vec<_>>()
    };
    let mut all = zip(&host(&args.vfio_user), &host(&args.remote_vfio_user))?;
    all.extend(zip(&vm(&args.pci), &vm(&args.remote_pci))?);
    if all.is_empty() {
        return Err(
            "name both functions: --vfio-user PATH --remote-vfio-user PATH (host) or \
                    --pci BDF --remote-pci BDF (VM), or --pairs N"
                .into(),
        );
    }
    Ok(all)
}

/// The configuration of one pair of functions.
fn config(args: &Args, local: Location, remote: Location) -> Result<Config, String> {
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
        events: args.events,
    })
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let argv: Vec<_> = std::env::args_os().collect();
    if perf::perftest::wanted(&argv) {
        std::process::exit(perf::perftest::main_with(argv));
    }
    rnic_tools::cli::generate_if_asked::<Args>();
    let args = Args::parse();
    args.wait.apply();
    let cfgs = match pairs(&args).and_then(|pairs| {
        pairs
            .into_iter()
            .map(|(l, r)| config(&args, l, r))
            .collect::<Result<Vec<_>, _>>()
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rnic-perf: {e}");
            std::process::exit(2);
        }
    };
    let progress = |line: &str| eprintln!("rnic-perf: {line}");
    let outcome = if let [cfg] = &cfgs[..] {
        perf::run(cfg, &mut |line: &str| progress(line)).map(|r| {
            let text = r.text();
            (serde_json::to_string_pretty(&r), text)
        })
    } else {
        perf::pairs::run(&cfgs, &progress).map(|r| {
            let text = r.text();
            (serde_json::to_string_pretty(&r), text)
        })
    };
    let (json, text) = match outcome {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rnic-perf: {e}");
            std::process::exit(1);
        }
    };
    let json = match json {
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
        print!("{text}");
    }
}
