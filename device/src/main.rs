//! rnicd: serves an emulated RDMA NIC (a PF and its VFs) over vfio-user sockets.

// The doc comments of the options below are rnicd's --help text, written for a terminal
// (DIR/vf<i>.sock, udp:ADDR[:PORT]), not rustdoc markup.
#![allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use rnic_device::device::{Device, DeviceConfig};
use rnic_device::engine::Placement;
use rnic_device::fabric::faults::FaultSpec;
use rnic_device::net::NetSpec;
use rnic_device::notify::{sd_notify, ReadyFd};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

/// The rnic device process: a software RDMA NIC that QEMU (`-device vfio-user-pci`) or a
/// host-side vfio-user client attaches to.
///
/// The physical function is served on DIR/pf.sock and virtual function i on DIR/vf<i>.sock.
/// Each socket takes one client at a time; when it leaves, the next may attach. Logging
/// follows RUST_LOG (default: info) and goes to standard error.
///
/// Once every socket listens, rnicd says it is ready: READY=1 to $NOTIFY_SOCKET when set
/// (systemd's Type=notify), and a line on --ready-fd. Signals: SIGINT or SIGTERM removes
/// the sockets and exits; SIGUSR1 logs the counters (the switch's, then every function's,
/// with its drops by reason) and carries on; SIGHUP reopens the --pcap file, so that the
/// capture continues into a new file after the old one was moved away (log rotation).
#[derive(Parser, Debug)]
#[command(
    name = "rnicd",
    version,
    about = "The emulated RDMA NIC, served to VMMs over vfio-user",
    long_about
)]
struct Args {
    /// Directory for the vfio-user sockets (created if missing).
    #[arg(long, value_name = "DIR")]
    socket_dir: PathBuf,

    /// Number of SR-IOV virtual functions (the PF's TotalVFs), each with its own socket.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=255))]
    vfs: u16,

    /// Microseconds the device keeps polling doorbells after its last work before it
    /// sleeps and asks drivers to kick it. Longer trades idle CPU for lower latency.
    #[arg(long, value_name = "US", default_value_t = 200)]
    poll_us: u64,

    /// Write every frame the functions exchange (Ethernet/IPv4/UDP/RoCEv2) to FILE, a pcap
    /// that Wireshark and tshark decode.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,

    /// Inject network faults into every frame the device forwards, for testing the
    /// transport: SPEC is a comma-separated subset of loss=P, dup=P, reorder=P,
    /// corrupt=P (probabilities per frame, 0 to 1), delay=MS (every frame held MS
    /// milliseconds) and seed=S (the PRNG seed; the same seed gives the same faults).
    /// A lost frame is dropped; a duplicated one delivered twice; a reordered one held
    /// until the next frame has passed (at most 1 ms); a corrupted one has one bit flipped
    /// after its Ethernet header, so the receiver's checks drop it. Example:
    /// --net-faults loss=0.02,dup=0.01,reorder=0.01,corrupt=0.001,seed=7
    #[arg(long, value_name = "SPEC")]
    net_faults: Option<FaultSpec>,

    /// Make the functions reachable over a real network: udp:ADDR[:PORT] (this host's UDP
    /// sockets) or eth:MODE:... (an Ethernet port on a QEMU network segment).
    ///
    /// udp:ADDR[:PORT] — RoCEv2 over this host's UDP sockets, to the functions of other
    /// rnicd processes (other hosts, network namespaces, or loopback addresses). Function
    /// n (0 = PF, i+1 = VF i) gets the IPv4 address ADDR+n as its GID (::ffff:ADDR+n) and
    /// receives on UDP port PORT (default 4791) of that address, which must be an address
    /// of this host (all of 127.0.0.0/8 is, on Linux). A QP whose destination GID is not a
    /// function of this rnicd sends to that address, port PORT; all rnicd processes that
    /// talk must use the same PORT. Example, two rnicd on one host: --net udp:127.0.1.1
    /// and --net udp:127.0.2.1
    ///
    /// eth:MODE:... — an Ethernet port on a QEMU network segment, shared with VMs whose
    /// virtio-net NIC runs Soft-RoCE (rdma_rxe) and with other rnicd. Each function is an
    /// Ethernet endpoint with IPv4 address --net-ip + n and MAC 02:52 followed by that
    /// address; it answers ARP and resolves its peers by ARP. MODE is one of:
    /// dgram:LADDR:LPORT:RADDR:RPORT — one frame per UDP datagram, from LADDR:LPORT to
    /// RADDR:RPORT; QEMU:
    /// -netdev dgram,id=n0,local.type=inet,local.host=RADDR,local.port=RPORT,remote.type=inet,remote.host=LADDR,remote.port=LPORT
    /// — mcast:GROUP:PORT — a hub of every member of the multicast group; QEMU: -netdev
    /// socket,id=n0,mcast=GROUP:PORT — listen:HOST:PORT or connect:HOST:PORT — a TCP
    /// stream, each frame after its 4-byte big-endian length; QEMU, against listen:
    /// -netdev stream,id=n0,server=off,addr.type=inet,addr.host=HOST,addr.port=PORT
    /// (server=on against connect). Details: docs/hardware-interface.md §7.16.
    ///
    /// Functions of one rnicd always talk through the internal switch.
    #[arg(long, value_name = "udp:ADDR[:PORT] | eth:MODE:...")]
    net: Option<NetSpec>,

    /// The PF's IPv4 address: function n gets ADDR+n. Default: udp:ADDR's ADDR with --net
    /// udp:, else 10.82.0.1 (so VF0 is 10.82.0.2).
    #[arg(long, value_name = "ADDR")]
    net_ip: Option<std::net::Ipv4Addr>,

    /// Engine threads: the functions are spread over them, each function on one thread
    /// at a time. Default: one per core, at most one per function. Idle threads sleep.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,

    /// How functions are placed on the engine threads. auto: functions that exchange
    /// traffic share a thread, and busy groups get threads of their own (the placement
    /// follows the traffic). spread: function n on thread n mod N for ever, so that
    /// consecutive functions are on different threads (for testing and measuring
    /// traffic across threads).
    #[arg(long, value_name = "auto|spread", default_value_t = Placement::Auto)]
    placement: Placement,

    /// Once every socket listens, write a line ("ready") to descriptor N, inherited from
    /// the parent (a pipe's write end), and close it: a script reads one line from the
    /// pipe to wait for rnicd (end of file without a line: rnicd failed to start).
    #[arg(long, value_name = "N")]
    ready_fd: Option<i32>,
}

/// Descriptors rnicd may hold for each function's client at most: the files behind its
/// DMA windows, its MSI-X eventfds, and the connection itself.
const DESCRIPTORS_PER_FUNCTION: u64 =
    rnic_device::dma::MAX_FILES as u64 + rnic_abi::pci::MSIX_VECTORS as u64 + 4;

/// Raises the soft limit on open descriptors to the hard one, as daemons that hold many
/// do: each function's client may make rnicd hold [`DESCRIPTORS_PER_FUNCTION`].
fn raise_descriptor_limit(functions: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let want = functions * DESCRIPTORS_PER_FUNCTION + 256;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit from a struct we own, within the hard limit.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    }
    if limit.rlim_cur < want {
        log::warn!(
            "the descriptor limit is {} but {functions} functions' clients may make rnicd hold \
             {want}; raise it (ulimit -n) or a client that maps many files will be refused",
            limit.rlim_cur
        );
    }
}

/// With `RNIC_GENERATE=man|bash|zsh|fish` in the environment, prints rnicd's man page or
/// a shell's completion script, from the command line above, and exits
/// (`tools/install-docs.sh`; the tools do the same).
fn generate_if_asked() {
    use clap::CommandFactory;
    let Ok(what) = std::env::var("RNIC_GENERATE") else {
        return;
    };
    let mut cmd = Args::command();
    let mut out = std::io::stdout();
    let shell = match what.as_str() {
        "man" => {
            let written = clap_mangen::Man::new(cmd).render(&mut out);
            std::process::exit(i32::from(written.is_err()));
        }
        "bash" => clap_complete::Shell::Bash,
        "zsh" => clap_complete::Shell::Zsh,
        "fish" => clap_complete::Shell::Fish,
        other => {
            eprintln!("rnicd: RNIC_GENERATE={other:?}: give man, bash, zsh or fish");
            std::process::exit(2);
        }
    };
    clap_complete::generate(shell, &mut cmd, "rnicd", &mut out);
    std::process::exit(0);
}

fn main() {
    generate_if_asked();
    // Milliseconds: transport timers and retransmissions are milliseconds apart.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let args = Args::parse();
    // Taken before anything else opens descriptors, so a wrong N fails at once.
    let ready_fd = args.ready_fd.map(|fd| {
        ReadyFd::take(fd).unwrap_or_else(|e| {
            eprintln!("rnicd: --ready-fd {fd}: {e}");
            std::process::exit(1);
        })
    });
    raise_descriptor_limit(u64::from(args.vfs) + 1);
    let config = DeviceConfig {
        socket_dir: args.socket_dir,
        vfs: args.vfs,
        poll_window: Duration::from_micros(args.poll_us),
        pcap: args.pcap,
        net_faults: args.net_faults,
        net: args.net,
        net_ip: args.net_ip,
        threads: args.threads.map(usize::from),
        placement: args.placement,
    };
    // Catch the signals before the sockets exist, so none is left behind.
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rnicd: cannot install signal handlers: {e}");
            std::process::exit(1);
        }
    };
    let device = match Device::start(&config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rnicd: {e}");
            std::process::exit(1);
        }
    };
    log::info!(
        "serving the PF and {} VFs: {}",
        config.vfs,
        device
            .sockets()
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Every socket listens (bound and listening in Device::start): say so.
    if let Some(fd) = ready_fd {
        if let Err(e) = fd.signal() {
            log::warn!("--ready-fd: cannot write the ready line: {e}");
        }
    }
    let status = format!("STATUS=serving the PF and {} VFs", config.vfs);
    match sd_notify(&format!(
        "READY=1\n{status}\nMAINPID={}",
        std::process::id()
    )) {
        Ok(true) => log::info!("ready: notified systemd"),
        Ok(false) => {}
        Err(e) => log::warn!("cannot notify NOTIFY_SOCKET: {e}"),
    }
    for signal in signals.forever() {
        match signal {
            SIGUSR1 => {
                log::info!("SIGUSR1: the counters so far");
                device.log_counters();
            }
            SIGHUP => match device.reopen_capture() {
                Ok(Some(path)) => log::info!("SIGHUP: capture reopened: {}", path.display()),
                Ok(None) => log::info!("SIGHUP: no capture to reopen (no --pcap)"),
                Err(e) => log::warn!("SIGHUP: {e}; the capture continues in the old file"),
            },
            _ => {
                log::info!("signal {signal}: removing the sockets and exiting");
                break;
            }
        }
    }
    let _ = sd_notify("STOPPING=1");
    device.shutdown();
}
