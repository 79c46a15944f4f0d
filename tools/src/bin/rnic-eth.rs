//! rnic-eth: sends and receives Ethernet frames on a function's Ethernet queues, the NIC
//! side of rnic (docs/hardware-interface.md §15), through `rnic_driver::eth`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rnic_driver::eth::EthPort;
use rnic_driver::Location;

/// EtherType of rnic-eth's own frames (IEEE 802 local experimental).
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
/// Byte 14 of a ping request and of its echo.
const REQUEST: u8 = 1;
const REPLY: u8 = 2;

/// Sends and receives whole Ethernet frames through a function's Ethernet queues: the
/// smallest NIC driver there is, a polling loop over one send and one receive ring.
///
/// `ping` sends frames of EtherType 0x88B5 to a MAC and times their echo; `echo` answers
/// them; `recv` prints what arrives (any EtherType: ARP, IPv4, ...); `send` sends frames
/// and `stats` prints the function's Ethernet counters. Opening a function resets it.
#[derive(Parser, Debug)]
#[command(name = "rnic-eth", version)]
struct Args {
    #[command(flatten)]
    wait: rnic_tools::cli::WaitOption,

    /// The vfio-user socket of a function served by rnicd (host use).
    #[arg(long, value_name = "PATH", conflicts_with = "pci")]
    vfio_user: Option<PathBuf>,

    /// The PCI address of a function in this machine (in a VM).
    #[arg(long, value_name = "BDF")]
    pci: Option<String>,

    /// MTU, 68 to 9000.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Sends COUNT frames of SIZE bytes to MAC.
    Send {
        /// Destination MAC, aa:bb:cc:dd:ee:ff (ff:ff:ff:ff:ff:ff broadcasts).
        mac: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Bytes of each frame, header included.
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Prints the frames that arrive, until COUNT did or TIMEOUT seconds pass.
    Recv {
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long, default_value_t = 10.0)]
        timeout: f64,
    },
    /// Answers COUNT ping requests (then exits), or waits TIMEOUT seconds for them.
    Echo {
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long, default_value_t = 10.0)]
        timeout: f64,
    },
    /// Sends COUNT ping requests of SIZE bytes to MAC, each after the last one's echo,
    /// and prints the round-trip times.
    Ping {
        mac: String,
        #[arg(long, default_value_t = 4)]
        count: u32,
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Sends FRAMES frames of SIZE bytes to the function at PEER (a second vfio-user
    /// socket or PCI function this process drives too) and prints the frame rate at which
    /// they arrived there: the Ethernet queues' benchmark.
    Rate {
        /// The receiving function: a vfio-user socket path, or a PCI address.
        peer: String,
        #[arg(long, default_value_t = 64)]
        size: usize,
        #[arg(long, default_value_t = 100_000)]
        frames: u64,
    },
    /// Prints the function's Ethernet state and counters.
    Stats,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    rnic_tools::cli::generate_if_asked::<Args>();
    let args = Args::parse();
    args.wait.apply();
    if let Err(e) = run(&args) {
        eprintln!("rnic-eth: {e}");
        std::process::exit(1);
    }
}

fn fail(msg: String) -> rnic_driver::Error {
    rnic_driver::Error::Device(msg)
}

fn run(args: &Args) -> rnic_driver::Result<()> {
    let location = match (&args.vfio_user, &args.pci) {
        (Some(path), _) => Location::VfioUser(path.clone()),
        (None, Some(bdf)) => Location::Pci(bdf.clone()),
        (None, None) => Location::all_pci()?.into_iter().next().ok_or_else(|| {
            fail("no rnic function found; name one with --pci or --vfio-user".into())
        })?,
    };
    let device = rnic_driver::Device::open(location.open_transport()?)?;
    let me = device.query_device()?.mac;
    let mut port = EthPort::open(&device, 64, args.mtu, rnic_abi::eth::RX_ENABLE)?;
    match &args.command {
        Command::Send { mac, count, size } => {
            let to = parse_mac(mac)?;
            for i in 0..*count {
                port.send(&[&frame(to, me, *size, 0, i)])?;
            }
            port.flush(Duration::from_secs(5))?;
            report_errors(&mut port)?;
            println!("sent {count} frames of {size} bytes to {mac}");
        }
        Command::Recv { count, timeout } => {
            let deadline = Instant::now() + Duration::from_secs_f64(*timeout);
            let mut got = 0;
            while got < *count {
                let left = deadline.saturating_duration_since(Instant::now());
                let Some(f) = port.recv(left)? else {
                    return Err(fail(format!(
                        "{got} of {count} frames arrived in {timeout} s"
                    )));
                };
                println!("{}", describe(&f));
                got += 1;
            }
        }
        Command::Echo { count, timeout } => {
            let deadline = Instant::now() + Duration::from_secs_f64(*timeout);
            let mut answered = 0;
            while answered < *count {
                let left = deadline.saturating_duration_since(Instant::now());
                let Some(mut f) = port.recv(left)? else {
                    return Err(fail(format!(
                        "{answered} of {count} pings came in {timeout} s"
                    )));
                };
                if f.get(12..15) != Some(&[ETHERTYPE[0], ETHERTYPE[1], REQUEST]) {
                    continue;
                }
                let from: [u8; 6] = f[6..12].try_into().expect("6 bytes");
                f[..6].copy_from_slice(&from);
                f[6..12].copy_from_slice(&me);
                f[14] = REPLY;
                port.send(&[&f])?;
                answered += 1;
            }
            port.flush(Duration::from_secs(5))?;
            println!("answered {answered} pings");
        }
        Command::Ping { mac, count, size } => {
            let to = parse_mac(mac)?;
            let mut times = Vec::new();
            for i in 0..*count {
                let start = Instant::now();
                port.send(&[&frame(to, me, *size, REQUEST, i)])?;
                loop {
                    let Some(f) = port.recv(Duration::from_secs(2))? else {
                        report_errors(&mut port)?;
                        return Err(fail(format!("no echo of ping {i} from {mac} in 2 s")));
                    };
                    if f.get(12..15) == Some(&[ETHERTYPE[0], ETHERTYPE[1], REPLY])
                        && f.get(15..19) == Some(&i.to_be_bytes())
                    {
                        break;
                    }
                }
                let us = start.elapsed().as_secs_f64() * 1e6;
                println!("{size} bytes from {mac}: seq={i} time={us:.0} us");
                times.push(us);
            }
            let avg = times.iter().sum::<f64>() / times.len().max(1) as f64;
            println!("{count} pings, {count} echoes, average {avg:.0} us");
        }
        Command::Rate { peer, size, frames } => {
            let location = if std::path::Path::new(peer).exists() {
                Location::VfioUser(peer.into())
            } else {
                Location::Pci(peer.clone())
            };
            let peer_dev = rnic_driver::Device::open(location.open_transport()?)?;
            let to = peer_dev.query_device()?.mac;
            let mut rx = EthPort::open(&peer_dev, 256, args.mtu, rnic_abi::eth::RX_ENABLE)?;
            let (rate, bytes) = rate(&mut port, &mut rx, me, to, *size, *frames)?;
            println!(
                "{frames} frames of {size} bytes: {:.0} frames/s, {:.1} Gbit/s",
                rate,
                rate * bytes as f64 * 8.0 / 1e9
            );
        }
        Command::Stats => {
            let q = port.query()?;
            let c = q.counters;
            println!(
                "mac {} mtu {} rx_mode {:#x} flags {:#x}",
                format_mac(&q.mac),
                q.mtu,
                q.rx_mode,
                q.flags
            );
            println!(
                "tx_frames {} tx_bytes {} tx_malformed {} tx_dma_errors {} tx_spoofed {} tx_link_down {}",
                c.tx_frames, c.tx_bytes, c.tx_malformed, c.tx_dma_errors, c.tx_spoofed, c.tx_link_down
            );
            println!(
                "rx_frames {} rx_bytes {} rx_no_buffer {} rx_too_long {} rx_filtered {} rx_disabled {} rx_dma_errors {} rx_link_down {} ring_errors {} interrupts {}",
                c.rx_frames,
                c.rx_bytes,
                c.rx_no_buffer,
                c.rx_too_long,
                c.rx_filtered,
                c.rx_disabled,
                c.rx_dma_errors,
                c.rx_link_down,
                c.ring_errors,
                c.interrupts
            );
        }
    }
    Ok(())
}

/// Sends `frames` frames of `size` bytes from `tx` to `rx` (at `to`), keeping the send
/// ring full, and returns the rate at which they arrived (frames/s) and their size.
fn rate(
    tx: &mut EthPort,
    rx: &mut EthPort,
    me: [u8; 6],
    to: [u8; 6],
    size: usize,
    frames: u64,
) -> rnic_driver::Result<(f64, usize)> {
    let f = frame(to, me, size, 0, 0);
    let start = Instant::now();
    let (mut sent, mut got) = (0u64, 0u64);
    let mut idle = Instant::now();
    while got < frames {
        // Stay a ring's worth ahead of the receiver at most: it posts 256 buffers.
        while sent < frames && sent - got < 192 {
            tx.send(&[&f])?;
            sent += 1;
        }
        let before = got;
        while rx.recv(Duration::ZERO)?.is_some() {
            got += 1;
        }
        if got > before {
            idle = Instant::now();
        } else if idle.elapsed() > Duration::from_secs(2) {
            report_errors(tx)?;
            return Err(fail(format!(
                "{got} of {sent} frames arrived, then none for 2 s (rx_no_buffer: {})",
                rx.query()?.counters.rx_no_buffer
            )));
        }
    }
    Ok((frames as f64 / start.elapsed().as_secs_f64(), f.len()))
}

/// A frame of rnic-eth's EtherType: `kind` and the sequence number `seq` after the header,
/// padded to `size` bytes with a pattern.
fn frame(to: [u8; 6], from: [u8; 6], size: usize, kind: u8, seq: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(size.max(19));
    f.extend_from_slice(&to);
    f.extend_from_slice(&from);
    f.extend_from_slice(&ETHERTYPE);
    f.push(kind);
    f.extend_from_slice(&seq.to_be_bytes());
    let n = f.len();
    f.extend((n..size).map(|i| i as u8));
    f
}

/// One line about a frame: addresses, EtherType, length.
fn describe(f: &[u8]) -> String {
    if f.len() < 14 {
        return format!("{} bytes (shorter than a header)", f.len());
    }
    let what = match [f[12], f[13]] {
        [0x08, 0x06] => "ARP",
        [0x08, 0x00] => "IPv4",
        [0x86, 0xdd] => "IPv6",
        t if t == ETHERTYPE => "rnic-eth",
        _ => "other",
    };
    format!(
        "{} > {} type {:02x}{:02x} ({what}) length {}",
        format_mac(&f[6..12]),
        format_mac(&f[..6]),
        f[12],
        f[13],
        f.len()
    )
}

fn report_errors(port: &mut EthPort) -> rnic_driver::Result<()> {
    let errors = port.take_send_errors();
    if let Some(e) = errors.first() {
        return Err(fail(format!(
            "{} descriptors came back with errors (the first: {}; see docs/hardware-interface.md §15.3)",
            errors.len(),
            e.0
        )));
    }
    Ok(())
}

fn parse_mac(s: &str) -> rnic_driver::Result<[u8; 6]> {
    rnic_tools::admin::parse_mac(s)
        .ok_or_else(|| fail(format!("{s}: not a MAC (aa:bb:cc:dd:ee:ff)")))
}

fn format_mac(m: &[u8]) -> String {
    <[u8; 6]>::try_from(m).map_or_else(|_| "?".into(), |m| rnic_tools::admin::format_mac(&m))
}
