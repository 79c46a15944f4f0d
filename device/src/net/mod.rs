//! The device's networking beyond its internal switch: the uplinks
//! ([`crate::fabric::uplink::Uplink`]) that carry frames between rnicd processes and to
//! other hosts (docs/hardware-interface.md §7.13, §7.16).
//!
//! - [`udp`]: RoCEv2 over real UDP sockets, so that functions of different rnicd
//!   processes reach each other (`rnicd --net udp:ADDR[:PORT]`).
//! - [`eth`]: an Ethernet port on a QEMU network segment, with ARP ([`arp`]), over the
//!   framings of [`link`] (`rnicd --net eth:...`).
//!
//! Both networks give function n (0 = PF, i + 1 = VF i) the IPv4 address base + n
//! ([`function_ips`]), the base being chosen in one place ([`ip_base`]).

pub mod arp;
pub mod eth;
pub mod gso;
pub mod link;
pub mod socket;
pub mod udp;

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::str::FromStr;

use crate::fabric::uplink::UplinkStats;
use crate::identity::DEFAULT_IP_BASE;
use eth::EthSpec;
use rnic_abi::admin::PortStats;
use udp::UdpSpec;

/// How long one engine pass may read frames off the network before it hands them to the
/// functions. A reader slower than its peer (a loaded host, a debug build) must still
/// deliver what it read, and so acknowledge it: were it to read until the socket is
/// empty, the peer's retransmissions of what it has not acknowledged would keep the
/// socket from emptying, and the reader would never leave its loop.
pub const READ_TIME: std::time::Duration = std::time::Duration::from_millis(1);

/// Whether a read loop that started at `start` and has read `read` frames should stop
/// for [`READ_TIME`] (looked at every 16 frames: a clock read per frame would cost more
/// than the frame).
pub fn read_time_up(start: std::time::Instant, read: usize) -> bool {
    read.is_multiple_of(16) && start.elapsed() >= READ_TIME
}

/// What `--net` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetSpec {
    /// `udp:ADDR[:PORT]`: RoCEv2 over the host's UDP sockets.
    Udp(UdpSpec),
    /// `eth:...`: an Ethernet port on a QEMU network segment.
    Eth(EthSpec),
}

impl FromStr for NetSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("eth:") {
            s.parse().map(Self::Eth)
        } else if s.starts_with("udp:") {
            s.parse().map(Self::Udp)
        } else {
            Err(format!(
                "'{s}' is not a network: --net takes udp:ADDR[:PORT] or eth:dgram:..., \
                 eth:mcast:..., eth:listen:..., eth:connect:..."
            ))
        }
    }
}

impl fmt::Display for NetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Udp(s) => s.fmt(f),
            Self::Eth(s) => s.fmt(f),
        }
    }
}

/// The counters of a port of `kind` (`rnic_abi::admin::PORT_*`): what every uplink
/// counts, from its [`UplinkStats`], and from `own` what only some count (frames
/// ignored, ARP, drops by reason); `rx_frames` is every frame's one outcome summed.
pub fn port_stats(kind: u32, s: &UplinkStats, own: PortStats) -> PortStats {
    PortStats {
        kind,
        tx_frames: s.tx,
        tx_bytes: s.tx_bytes,
        tx_dropped: s.tx_dropped,
        rx_frames: s.rx
            + s.rx_dropped
            + own.not_for_us
            + own.looped
            + own.other_protocol
            + own.arp_received,
        rx_bytes: s.rx_bytes,
        rx_delivered: s.rx,
        rx_dropped: s.rx_dropped,
        rx_kernel_dropped: s.rx_kernel_dropped,
        ..own
    }
}

/// The PF's IPv4 address: `--net udp:ADDR`'s ADDR, else `--net-ip`, else
/// [`DEFAULT_IP_BASE`]. A `--net-ip` that contradicts `udp:ADDR` is refused.
pub fn ip_base(net: Option<&NetSpec>, net_ip: Option<Ipv4Addr>) -> Result<Ipv4Addr, NetError> {
    match (net, net_ip) {
        (Some(NetSpec::Udp(u)), Some(ip)) if ip != u.addr => Err(NetError::Conflict {
            udp: *u,
            net_ip: ip,
        }),
        (Some(NetSpec::Udp(u)), _) => Ok(u.addr),
        (_, ip) => Ok(ip.unwrap_or(DEFAULT_IP_BASE)),
    }
}

/// The addresses of `count` functions from `base`: base + n (a 32-bit sum) for n in
/// 0..count, all of them unicast.
pub fn function_ips(base: Ipv4Addr, count: u16) -> Result<Vec<Ipv4Addr>, NetError> {
    (0..count)
        .map(|n| {
            u32::from(base)
                .checked_add(u32::from(n))
                .map(Ipv4Addr::from)
                .filter(|ip| !ip.is_broadcast() && !ip.is_multicast() && !ip.is_unspecified())
                .ok_or(NetError::Range { base, n })
        })
        .collect()
}

/// Why the network could not be set up. The messages name the fix.
#[derive(Debug)]
pub enum NetError {
    /// Function `n`'s address would not be a unicast IPv4 address.
    Range {
        /// The PF's address.
        base: Ipv4Addr,
        /// The function number.
        n: u16,
    },
    /// `--net-ip` and `--net udp:ADDR` disagree.
    Conflict {
        /// The `--net` given.
        udp: UdpSpec,
        /// The `--net-ip` given.
        net_ip: Ipv4Addr,
    },
    /// A receive socket of `--net udp:` could not be bound.
    Bind {
        /// The address.
        addr: SocketAddrV4,
        /// Why.
        source: io::Error,
    },
    /// The Ethernet port could not be opened.
    Eth {
        /// The `--net` given.
        spec: EthSpec,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Range { base, n } => write!(
                f,
                "function {n} would have address {base} + {n}, which is not a unicast IPv4 \
                 address; choose a lower --net-ip (or udp:ADDR)"
            ),
            NetError::Conflict { udp, net_ip } => write!(
                f,
                "--net-ip {net_ip} contradicts --net {udp}, whose ADDR is already the PF's \
                 address; drop --net-ip"
            ),
            NetError::Bind { addr, source } => {
                write!(f, "cannot bind {addr}: ")?;
                match source.kind() {
                    io::ErrorKind::AddrInUse => write!(
                        f,
                        "address in use — another rnicd uses this --net address (or another \
                         program, e.g. the kernel's rdma_rxe, holds UDP port {} on it); \
                         choose another ADDR, or another PORT for every rnicd",
                        addr.port()
                    ),
                    io::ErrorKind::AddrNotAvailable => write!(
                        f,
                        "address not available — {} is not an address of this host; add it \
                         (e.g. `ip addr add {}/32 dev lo`, or on the interface that reaches \
                         the peers) or choose another ADDR; function n uses ADDR + n",
                        addr.ip(),
                        addr.ip()
                    ),
                    io::ErrorKind::PermissionDenied => write!(
                        f,
                        "permission denied — ports below 1024 need CAP_NET_BIND_SERVICE; \
                         choose another PORT"
                    ),
                    _ => write!(f, "{source}"),
                }
            }
            NetError::Eth { spec, source } => {
                write!(f, "--net {spec}: {source}")?;
                match source.kind() {
                    io::ErrorKind::AddrInUse => write!(
                        f,
                        " — another program (another rnicd, or QEMU's side of the segment) \
                         holds that local address; each end needs its own port"
                    ),
                    io::ErrorKind::AddrNotAvailable => write!(
                        f,
                        " — the local address is not one of this host's; use one it has \
                         (127.0.0.1 for a segment on this host)"
                    ),
                    _ => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for NetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetError::Bind { source, .. } | NetError::Eth { source, .. } => Some(source),
            NetError::Range { .. } | NetError::Conflict { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_by_kind() {
        assert!(matches!("udp:127.0.1.1".parse(), Ok(NetSpec::Udp(_))));
        assert_eq!(
            "eth:dgram:127.0.0.1:5000:127.0.0.1:5001".parse(),
            Ok(NetSpec::Eth(EthSpec::Dgram {
                local: "127.0.0.1:5000".parse().unwrap(),
                remote: "127.0.0.1:5001".parse().unwrap(),
            }))
        );
        assert_eq!(
            "eth:mcast:230.0.0.1:1234".parse(),
            Ok(NetSpec::Eth(EthSpec::Mcast(
                "230.0.0.1:1234".parse().unwrap()
            )))
        );
        assert_eq!(
            "eth:listen:127.0.0.1:7000".parse(),
            Ok(NetSpec::Eth(EthSpec::Listen("127.0.0.1:7000".into())))
        );
        assert_eq!(
            "eth:connect:localhost:7000".parse(),
            Ok(NetSpec::Eth(EthSpec::Connect("localhost:7000".into())))
        );
        for bad in [
            "tcp:1.2.3.4",
            "eth:",
            "eth:dgram:127.0.0.1:5000:127.0.0.1",
            "eth:dgram:127.0.0.1:0:127.0.0.1:5001",
            "eth:mcast:10.0.0.1:1234",
            "eth:listen::7000",
            "eth:connect:h:x",
            "eth:tap:tap0",
        ] {
            let e = bad.parse::<NetSpec>().unwrap_err();
            assert!(e.contains("--net takes"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_ip_base_comes_from_one_place() {
        let udp: NetSpec = "udp:127.0.1.1".parse().unwrap();
        let eth: NetSpec = "eth:mcast:230.0.0.1:1234".parse().unwrap();
        let ip = Ipv4Addr::new(10, 9, 0, 1);
        assert_eq!(ip_base(None, None).unwrap(), DEFAULT_IP_BASE);
        assert_eq!(ip_base(Some(&eth), None).unwrap(), DEFAULT_IP_BASE);
        assert_eq!(ip_base(Some(&eth), Some(ip)).unwrap(), ip);
        assert_eq!(ip_base(None, Some(ip)).unwrap(), ip);
        assert_eq!(
            ip_base(Some(&udp), None).unwrap(),
            Ipv4Addr::new(127, 0, 1, 1)
        );
        let e = ip_base(Some(&udp), Some(ip)).unwrap_err().to_string();
        assert!(e.contains("drop --net-ip"), "{e}");
    }

    #[test]
    fn function_addresses_are_sums_and_stop_at_the_end_of_ipv4() {
        let ips = function_ips(Ipv4Addr::new(10, 0, 0, 255), 2).unwrap();
        assert_eq!(
            ips,
            [Ipv4Addr::new(10, 0, 0, 255), Ipv4Addr::new(10, 0, 1, 0)]
        );
        let e = function_ips(Ipv4Addr::new(255, 255, 255, 250), 6).unwrap_err();
        assert!(matches!(e, NetError::Range { n: 5, .. }), "broadcast");
        assert!(e.to_string().contains("choose a lower --net-ip"));
        assert!(function_ips(Ipv4Addr::new(255, 255, 255, 250), 5).is_ok());
    }
}
