//! rnic-pingpong: an RC ping-pong between two rnic functions, in the manner of rdma-core's
//! ibv_rc_pingpong, for SENDs, RDMA WRITEs and RDMA READs (README, "The two commands").
//! The logic lives in `rnic_tools::pingpong` (the line format in its `line.rs`); with
//! `--ibv-compat` it is `ibv_rc_pingpong`'s own exchange and flow
//! (`rnic_tools::ibv_compat`), so that the other end can be `ibv_rc_pingpong` itself.

// The doc comments below are clap's help text, where `[PORT]` means an optional value.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use rnic_abi::verbs::mtu_code;
use rnic_tools::pingpong::{self, Config, Dest, DeviceChoice, Op, Rendezvous, DEFAULT_PORT};
use rnic_tools::{ibv_compat, rc};

/// Measures latency and bandwidth between two rnic functions over one RC queue pair, as
/// ibv_rc_pingpong does, and checks every byte moved.
///
/// One side listens (--listen [PORT]), the other connects (--connect HOST[:PORT]); they
/// swap QP number, GID and PSN (and for write/read the buffer's rkey and address) over
/// TCP in ibv_rc_pingpong's format "LLLL:QQQQQQ:PPPPPP:GID" plus "RKEY:ADDR" lines.
/// Where the two sides cannot reach each other (two VMs), name the peer by hand:
/// --peer QPN:GID:PSN[:RKEY:ADDR] on both sides and --initiator on exactly one; the first
/// QP of a freshly opened function is QPN 0x11 and the PSN defaults to 0 in this mode.
/// `--peer -` reads the peer's values from standard input, after printing this side's.
///
/// Lines for scripts, on standard output (standard error with --json): `local: qpn 0x..
/// gid ... psn 0x.. rkey 0x.. addr 0x..`, `listening on port N`, `peer: --peer ...`
/// (manual mode), `remote: ...`; at the end `N iters of S bytes in T s: X Mbit/s, Y
/// usec/iter` and a latency line, or one JSON object with --json.
///
/// With --ibv-compat the other end may be rdma-core's ibv_rc_pingpong (e.g. on Soft-RoCE):
/// this side then speaks its TCP exchange byte for byte and runs its SEND ping-pong
/// (defaults as ibv_rc_pingpong's: --size 4096, --iters 1000, --mtu 1024, --rx-depth 500,
/// port 18515), printing its lines (`  local address:  LID 0x0000, QPN 0x000011, PSN ...,
/// GID ::ffff:a.b.c.d`, `  remote address: ...`, `N bytes in T seconds = X Mbit/sec`,
/// `N iters in T seconds = Y usec/iter`). Either role: `rnic-pingpong --ibv-compat
/// --listen` here and `ibv_rc_pingpong -d rxe0 -g 1 THIS_HOST` there, or
/// `ibv_rc_pingpong -d rxe0 -g 1` there and `rnic-pingpong --ibv-compat --connect
/// THAT_HOST` here.
///
/// --op write and --op read (an rnic extension, for a peer written to match, described in
/// rnic_tools::ibv_compat) add the buffer's rkey and address to the exchange: the client
/// RDMA-WRITEs into or RDMA-READs from the server's buffer.
///
/// Give both ends the same -s/--size, -n/--iters and -m/--mtu. --check (the default) is
/// ibv_rc_pingpong's -c/--chk: as client this side zeroes the first byte of every 4 KiB
/// page as -c does, and either side verifies every message received byte for byte.
#[derive(Parser, Debug)]
#[command(name = "rnic-pingpong", version, args_override_self = true)]
#[command(group(ArgGroup::new("mode").required(true).args(["listen", "connect", "server", "peer"])))]
struct Args {
    #[command(flatten)]
    wait: rnic_tools::cli::WaitOption,

    /// Wait for the other side on this TCP port (0: any free port, printed as `listening
    /// on port N`).
    #[arg(long, value_name = "PORT", num_args = 0..=1, default_missing_value = DEFAULT_PORT_STR)]
    listen: Option<u16>,

    /// Connect to the other side's --listen at HOST[:PORT] (port 18515 by default); this
    /// side sends first.
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "server")]
    connect: Option<String>,

    /// The other side's host, as ibv_rc_pingpong's SERVERNAME: --connect HOST.
    #[arg(value_name = "SERVERNAME")]
    server: Option<String>,

    /// The TCP port (ibv_rc_pingpong's -p): where --listen listens and where --connect
    /// or SERVERNAME connect, when they name none.
    #[arg(long, short = 'p', value_name = "PORT")]
    port: Option<u16>,

    /// Manual mode, no TCP: the peer's QPN:GID:PSN[:RKEY:ADDR] in hex, as its `local:`
    /// line prints them; `-` reads them from standard input.
    #[arg(long, value_name = "QPN:GID:PSN[:RKEY:ADDR]")]
    peer: Option<String>,

    /// In manual mode, this side sends first (give it on exactly one side).
    #[arg(long, requires = "peer")]
    initiator: bool,

    /// The vfio-user socket of a function served by rnicd (host use).
    #[arg(long, value_name = "PATH", conflicts_with = "pci")]
    vfio_user: Option<PathBuf>,

    /// The PCI address of a function in this machine, e.g. 0000:00:03.0 (in a VM); by
    /// default the first rnic function on the PCI bus.
    #[arg(long, value_name = "BDF")]
    pci: Option<String>,

    /// Another function of this guest (PCI address, in a VM) that the QP may be moved to
    /// with `rnic-admin migrate`: the ping-pong follows it there (and back) and goes on.
    #[arg(long, value_name = "BDF", conflicts_with = "follow_vfio_user")]
    follow_pci: Option<String>,

    /// The same on the host: the vfio-user socket of the function to follow the QP to; it
    /// shares this tool's memory with the first function, as two VFs of one VM do.
    #[arg(long, value_name = "PATH", requires = "vfio_user")]
    follow_vfio_user: Option<PathBuf>,

    /// What to measure: send (SEND ping-pong), write (RDMA WRITE with immediate
    /// ping-pong) or read (RDMA READs by the side that sends first).
    #[arg(long, value_name = "OP", default_value = "send")]
    op: Op,

    /// Bytes per message.
    #[arg(long, short = 's', value_name = "N", default_value_t = 4096)]
    size: usize,

    /// Iterations.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 1000)]
    iters: u64,

    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(long, short = 'm', value_name = "BYTES", default_value_t = 1024, value_parser = parse_mtu)]
    mtu: u32,

    /// First PSN this side sends (24 bits, decimal or 0x hex); by default random in TCP
    /// mode, 0 in manual mode.
    #[arg(long, value_name = "N", value_parser = parse_psn)]
    psn: Option<u32>,

    /// Local ACK timeout code: 4.096 us * 2^CODE (0: wait forever).
    #[arg(long, value_name = "CODE", default_value_t = 14,
          value_parser = clap::value_parser!(u8).range(0..=31))]
    timeout: u8,

    /// Transport retries before a send fails.
    #[arg(long, value_name = "N", default_value_t = 7,
          value_parser = clap::value_parser!(u8).range(0..=7))]
    retry: u8,

    /// Verify every byte transferred (the default; ibv_rc_pingpong's -c/--chk).
    #[arg(long, short = 'c', visible_alias = "chk", overrides_with = "no_check")]
    check: bool,

    /// Do not fill or verify data (as ibv_rc_pingpong without --chk).
    #[arg(long, overrides_with = "check")]
    no_check: bool,

    /// Sleep on completion events instead of polling the completion queue.
    #[arg(long, short = 'e')]
    events: bool,

    /// Give up after this many seconds in all (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    time_limit: f64,

    /// Print the result as one JSON object (and the progress lines on standard error).
    #[arg(long)]
    json: bool,

    /// Interoperate with rdma-core's ibv_rc_pingpong: its TCP messages and its SEND
    /// ping-pong (with --listen or --connect; see above).
    #[arg(long, conflicts_with_all = ["peer", "follow_pci", "follow_vfio_user"])]
    ibv_compat: bool,

    /// With --ibv-compat: receives posted at a time (ibv_rc_pingpong's -r, default 500).
    #[arg(long, short = 'r', value_name = "N", requires = "ibv_compat",
          default_value_t = rnic_tools::ibv_compat::DEFAULT_RX_DEPTH)]
    rx_depth: u32,
}

const DEFAULT_PORT_STR: &str = "18515";

fn parse_mtu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if mtu_code(v).is_some() => Ok(v),
        _ => Err(format!("{s}: {}", rc::mtu_choices())),
    }
}

fn parse_psn(s: &str) -> Result<u32, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse::<u32>(),
    }
    .map_err(|e| format!("{s:?}: {e}"))?;
    if v > 0xFF_FFFF {
        return Err(format!("{s}: a PSN has 24 bits (at most 0xffffff)"));
    }
    Ok(v)
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    rnic_tools::cli::generate_if_asked::<Args>();
    let args = Args::parse();
    args.wait.apply();
    debug_assert_eq!(DEFAULT_PORT_STR, DEFAULT_PORT.to_string());
    match run(&args) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("rnic-pingpong: {e}");
            std::process::exit(1);
        }
    }
}

/// Where to listen or connect: --listen's port, or --connect's target (SERVERNAME's),
/// with -p filling in the port they do not name.
fn listen_or_connect(args: &Args) -> (Option<u16>, Option<String>) {
    let listen = args.listen.map(|port| match args.port {
        Some(p) if port == DEFAULT_PORT => p,
        _ => port,
    });
    let connect = args
        .connect
        .clone()
        .or_else(|| args.server.clone())
        .map(|target| match args.port {
            Some(p) if !target.contains(':') => format!("{target}:{p}"),
            _ => target,
        });
    (listen, connect)
}

fn run(args: &Args) -> Result<(), String> {
    if args.ibv_compat {
        return run_ibv_compat(args);
    }
    let manual = args.peer.is_some();
    let (listen, connect) = listen_or_connect(args);
    let rendezvous = match (&listen, &connect, &args.peer) {
        (Some(port), _, _) => Rendezvous::Listen(*port),
        (_, Some(target), _) => Rendezvous::Connect(target.clone()),
        (_, _, Some(peer)) => Rendezvous::Manual {
            peer: if peer == "-" {
                None
            } else {
                Some(Dest::parse_peer(peer).map_err(|e| e.to_string())?)
            },
            initiator: args.initiator,
        },
        _ => {
            return Err("give --listen [PORT], --connect HOST[:PORT], SERVERNAME or --peer".into())
        }
    };
    let cfg = Config {
        device: device(args),
        rendezvous,
        op: args.op,
        size: args.size,
        iters: args.iters,
        mtu: args.mtu,
        psn: args
            .psn
            .unwrap_or_else(|| if manual { 0 } else { pingpong::random_psn() }),
        timeout: args.timeout,
        retry: args.retry,
        // --check and --no-check override each other; checking is the default.
        check: args.check || !args.no_check,
        events: args.events,
        time_limit: time_limit(args)?,
        follow: match (&args.follow_pci, &args.follow_vfio_user) {
            (Some(bdf), _) => Some(DeviceChoice::Pci(bdf.clone())),
            (None, Some(path)) => Some(DeviceChoice::VfioUser(path.clone())),
            (None, None) => None,
        },
    };
    let report = pingpong::run(&cfg, &mut info_printer(args.json)).map_err(|e| e.to_string())?;
    print_report(args.json, &report, &report.text())
}

/// The function to open.
fn device(args: &Args) -> DeviceChoice {
    match (&args.vfio_user, &args.pci) {
        (Some(path), _) => DeviceChoice::VfioUser(path.clone()),
        (None, Some(bdf)) => DeviceChoice::Pci(bdf.clone()),
        (None, None) => DeviceChoice::FirstPci,
    }
}

fn time_limit(args: &Args) -> Result<Option<Duration>, String> {
    if !(args.time_limit >= 0.0 && args.time_limit.is_finite()) {
        return Err(format!(
            "--time-limit {}: give a number of seconds (0: no limit)",
            args.time_limit
        ));
    }
    Ok((args.time_limit > 0.0).then(|| Duration::from_secs_f64(args.time_limit)))
}

/// Progress lines: standard output, or standard error when stdout carries JSON.
fn info_printer(json: bool) -> impl FnMut(&str) {
    move |line: &str| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

fn print_report(json: bool, report: &impl serde::Serialize, text: &str) -> Result<(), String> {
    if json {
        let text =
            serde_json::to_string_pretty(report).map_err(|e| format!("cannot encode JSON: {e}"))?;
        println!("{text}");
    } else {
        print!("{text}");
    }
    Ok(())
}

/// `--ibv-compat`: ibv_rc_pingpong's exchange and SEND ping-pong.
fn run_ibv_compat(args: &Args) -> Result<(), String> {
    let role = match listen_or_connect(args) {
        (Some(port), _) => ibv_compat::Role::Listen(port),
        (_, Some(target)) => ibv_compat::Role::Connect(target),
        _ => return Err("--ibv-compat needs --listen [PORT] or --connect HOST[:PORT]".into()),
    };
    let cfg = ibv_compat::Config {
        device: device(args),
        role,
        size: args.size,
        iters: args.iters,
        mtu: args.mtu,
        rx_depth: args.rx_depth,
        psn: args.psn.unwrap_or_else(pingpong::random_psn),
        timeout: args.timeout,
        retry: args.retry,
        check: args.check || !args.no_check,
        events: args.events,
        time_limit: time_limit(args)?,
        op: args.op,
    };
    let report = ibv_compat::run(&cfg, &mut info_printer(args.json)).map_err(|e| e.to_string())?;
    print_report(args.json, &report, &report.text())
}
