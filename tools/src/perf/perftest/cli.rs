//! `rnic-perf --perftest`'s command line (README, "Against perftest's ib_write_bw /
//! ib_read_bw"): parsed, run ([`super::run`]) and printed as perftest prints.

use std::time::Duration;

use super::{run, Config, Role, Test, DEFAULT_ITERS, DEFAULT_SIZE, DEFAULT_TX_DEPTH};
use crate::open::DeviceChoice;
use crate::rc::random_psn;

/// `rnic-perf --perftest TEST ...`: one end of perftest's `ib_write_bw` / `ib_read_bw`.
///
/// Speaks perftest 6.24's TCP exchange (Debian trixie's perftest 25.01.0) and runs its
/// RC bandwidth test on one QP, so that the other end can be perftest itself, e.g. on
/// Soft-RoCE: `ib_write_bw -d rxe0 -x 1 -s SIZE -n ITERS THIS_HOST` against
/// `rnic-perf --perftest write_bw --listen`, or `ib_write_bw -d rxe0 -x 1` there and
/// `rnic-perf --perftest write_bw --connect THAT_HOST` here (the same for read_bw and
/// ib_read_bw). Give both ends the same size and iterations; the path MTU is the smaller
/// of the two sides'.
///
/// The client is the active side (it posts the WRITEs or READs); the server's buffer is
/// the target or source. The side that received data checks it after the test: exactly
/// (byte for byte) when the peer is rnic-perf, whose buffers hold a pattern seeded by its
/// PSN, and otherwise that every buffer slot the messages reached was overwritten (a
/// perftest peer sends random bytes); a read_bw server checks that its buffer is intact.
///
/// Prints perftest's lines: ` local address: LID ... QPN ... PSN ... RKey ... VAddr ...`,
/// ` GID: ...`, the same for `remote`, and the result table (`#bytes #iterations BW
/// peak[MiB/sec] BW average[MiB/sec] MsgRate[Mpps]`; the server prints the client's
/// figures, as perftest's server does), then ` data check: ...`.
#[derive(clap::Parser, Debug)]
#[command(name = "rnic-perf --perftest", version, about, long_about)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["listen", "connect"])))]
struct Args {
    #[command(flatten)]
    wait: crate::cli::WaitOption,

    /// The test: write_bw (ib_write_bw) or read_bw (ib_read_bw).
    #[arg(long, value_name = "TEST", value_parser = parse_test)]
    perftest: Test,

    /// Be the server: wait for the client on this TCP port (default 18515, perftest's).
    #[arg(long, value_name = "PORT", num_args = 0..=1, default_missing_value = "18515")]
    listen: Option<u16>,

    /// Be the client (the active side): connect to the server at HOST[:PORT].
    #[arg(long, value_name = "HOST[:PORT]")]
    connect: Option<String>,

    /// The vfio-user socket of a function served by rnicd (host use).
    #[arg(long, value_name = "PATH", conflicts_with = "pci")]
    vfio_user: Option<std::path::PathBuf>,

    /// The PCI address of a function (in a VM); by default the first rnic function.
    #[arg(long, value_name = "BDF")]
    pci: Option<String>,

    /// Bytes per message (perftest's -s).
    #[arg(long, short = 's', value_name = "N", default_value_t = DEFAULT_SIZE)]
    size: usize,

    /// Messages (perftest's -n; at least 5).
    #[arg(long, short = 'n', value_name = "N", default_value_t = DEFAULT_ITERS)]
    iters: u64,

    /// Work requests in flight (perftest's -t).
    #[arg(long, short = 't', value_name = "N", default_value_t = DEFAULT_TX_DEPTH)]
    tx_depth: u32,

    /// This side's path MTU in bytes (256 to 4096); the smaller of the two sides' is used.
    #[arg(long, short = 'm', value_name = "BYTES", default_value_t = 4096)]
    mtu: u32,

    /// First PSN this side sends (24 bits); random by default.
    #[arg(long, value_name = "N")]
    psn: Option<u32>,

    /// Give up after this many seconds in all (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    time_limit: f64,

    /// Print one JSON object at the end (progress lines go to standard error).
    #[arg(long)]
    json: bool,
}

fn parse_test(s: &str) -> std::result::Result<Test, String> {
    Test::from_name(s).ok_or_else(|| format!("{s}: use write_bw or read_bw"))
}

/// Whether a command line asks for the perftest mode (`--perftest` anywhere in it).
pub fn wanted(args: &[std::ffi::OsString]) -> bool {
    args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a == "--perftest" || a.starts_with("--perftest="))
    })
}

/// `rnic-perf --perftest ...`: parses `args` (with the program name first), runs, prints;
/// returns the exit status.
pub fn main_with(args: Vec<std::ffi::OsString>) -> i32 {
    use clap::Parser;
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    args.wait.apply();
    if !(args.time_limit >= 0.0 && args.time_limit.is_finite()) {
        eprintln!(
            "rnic-perf: --time-limit {}: give seconds (0: none)",
            args.time_limit
        );
        return 2;
    }
    let role = match (&args.listen, &args.connect) {
        (Some(port), _) => Role::Listen(*port),
        (_, Some(target)) => Role::Connect(target.clone()),
        _ => unreachable!("clap requires --listen or --connect"),
    };
    let cfg = Config {
        device: match (&args.vfio_user, &args.pci) {
            (Some(path), _) => DeviceChoice::VfioUser(path.clone()),
            (None, Some(bdf)) => DeviceChoice::Pci(bdf.clone()),
            (None, None) => DeviceChoice::FirstPci,
        },
        test: args.perftest,
        role,
        size: args.size,
        iters: args.iters,
        tx_depth: args.tx_depth,
        mtu: args.mtu,
        psn: args.psn.unwrap_or_else(random_psn),
        time_limit: (args.time_limit > 0.0).then(|| Duration::from_secs_f64(args.time_limit)),
    };
    let json = args.json;
    let mut info = |line: &str| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    match run(&cfg, &mut info) {
        Ok(outcome) if json => match serde_json::to_string_pretty(&outcome) {
            Ok(text) => {
                println!("{text}");
                0
            }
            Err(e) => {
                eprintln!("rnic-perf: cannot encode JSON: {e}");
                1
            }
        },
        Ok(outcome) => {
            print!("{}", outcome.text());
            0
        }
        Err(e) => {
            eprintln!("rnic-perf: {e}");
            1
        }
    }
}
