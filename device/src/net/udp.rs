//! RoCEv2 over real UDP sockets (`rnicd --net udp:ADDR[:PORT]`): how the functions of one
//! rnicd reach those of other rnicd processes, in other namespaces, on other hosts, or on
//! other loopback addresses. Addressing, sending (runs with UDP segmentation offload, one
//! socket per flow port), the ICRC over canonical headers the receiver rebuilds, and
//! receiving are in docs/hardware-interface.md §7.13.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::mem::{size_of, size_of_val, MaybeUninit};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::str::FromStr;

use super::gso::{self, Batch, RunKey};
use super::socket::{self, bound_udp_socket, setsockopt_int};
use crate::fabric::frame::Endpoint;
use crate::fabric::uplink::{Uplink, UplinkStats};
use crate::roce::hdr::{
    BTH_LEN, ETHERTYPE_IPV4, ETH_HEADER_LEN, ICRC_LEN, IPV4_HEADER_LEN, ROCEV2_PORT, UDP_HEADER_LEN,
};
use crate::roce::icrc::icrc;
use rnic_abi::admin::{PortStats, PORT_UDP};

/// The UDP port datagrams go to when `--net` names none: RoCEv2's.
pub const DEFAULT_PORT: u16 = ROCEV2_PORT;

/// Send sockets kept open at most; past that, the least recently used one is closed
/// (and opened again if its flow sends again), so that many QPs do not run rnicd out of
/// file descriptors.
const MAX_FLOWS: usize = 512;

/// The largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_535 - IPV4_HEADER_LEN - UDP_HEADER_LEN;

/// The headers a datagram's frame has beyond its UDP payload: Ethernet, IPv4, UDP.
const FRAME_HEADERS: usize = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN;

/// IPv4 "don't fragment".
const IP_DF: u16 = 0x4000;
/// IPv4 protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

/// What `--net udp:ADDR[:PORT]` says: the first function's address and the UDP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSpec {
    /// The PF's IPv4 address; function n has `addr + n`.
    pub addr: Ipv4Addr,
    /// The UDP port every function receives on, and sends to.
    pub port: u16,
}

impl FromStr for UdpSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = "--net takes udp:ADDR[:PORT], e.g. udp:127.0.1.1 or udp:10.0.0.5:4791";
        let Some(rest) = s.strip_prefix("udp:") else {
            return Err(format!("'{s}' is not a network: {usage}"));
        };
        let (addr, port) = match rest.split_once(':') {
            Some((a, p)) => {
                let port = p
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| format!("'{p}' is not a UDP port (1..=65535): {usage}"))?;
                (a, port)
            }
            None => (rest, DEFAULT_PORT),
        };
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("'{addr}' is not an IPv4 address: {usage}"))?;
        if addr.is_unspecified() || addr.is_broadcast() || addr.is_multicast() {
            return Err(format!(
                "{addr} is not a unicast address: ADDR must be an address of this host"
            ));
        }
        Ok(Self { addr, port })
    }
}

impl fmt::Display for UdpSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "udp:{}:{}", self.addr, self.port)
    }
}

/// The MAC a frame received over UDP says it came from: `02:00` (locally administered,
/// unicast) followed by the source IPv4 address, since the peer's real MAC is not known.
pub fn peer_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

pub use crate::net::NetError;

/// What a socket is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A function's receive socket: exclusive, reports TTL and TOS.
    Receive,
    /// A flow's send socket: `SO_REUSEADDR`, DF on every datagram.
    Send,
}

/// A non-blocking UDP socket bound to `addr`.
fn bind_socket(addr: SocketAddrV4, role: Role) -> io::Result<UdpSocket> {
    bound_udp_socket(addr, |raw| {
        match role {
            Role::Receive => {
                setsockopt_int(raw, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
                setsockopt_int(raw, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
                socket::size_buffers(raw, &format!("udp receive socket {addr}"));
                socket::count_drops(raw, "udp receive socket");
                if !gso::enable_gro(raw) {
                    log::debug!("UDP_GRO unavailable: datagrams are received one by one");
                }
            }
            Role::Send => {
                setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
                setsockopt_int(
                    raw,
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    libc::IP_PMTUDISC_DO,
                )?;
                // Send-only: its receive buffer never holds anything.
                socket::size_buffer(raw, socket::Direction::Send);
            }
        }
        Ok(())
    })
}

/// One datagram, or a coalesced run of them, as `recvmsg` reported it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    /// Its length (beyond the buffer if `truncated`).
    pub len: usize,
    from: SocketAddrV4,
    ttl: Option<u8>,
    tos: Option<u8>,
    /// The size of the datagrams of a coalesced run (`UDP_GRO`): all but the last.
    segment: Option<usize>,
    /// It did not fit the buffer.
    pub truncated: bool,
    /// Datagrams the kernel dropped on this socket for want of room before this one was
    /// queued, since the socket was opened (`SO_RXQ_OVFL`, see
    /// [`super::socket::count_drops`]); `None` while there were none.
    pub kernel_drops: Option<u32>,
}

/// Receives one datagram (or coalesced run) into `buf`, with its sender, its TTL and TOS,
/// its segment size and the socket's drop count.
pub(crate) fn recv_one(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Received> {
    let mut name = MaybeUninit::<libc::sockaddr_in>::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for the IP_TTL, IP_TOS, UDP_GRO and SO_RXQ_OVFL messages (u64 for cmsghdr's
    // alignment).
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; all-zero is a valid value (also for musl's padding).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = name.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points at live buffers of the sizes it gives.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: recvmsg filled the name (zeroed before, so initialized either way).
    let name = unsafe { name.assume_init() };
    let from = SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(name.sin_addr.s_addr)),
        u16::from_be(name.sin_port),
    );
    let (mut ttl, mut tos, mut segment, mut kernel_drops) = (None, None, None, None);
    // SAFETY: the CMSG_* macros walk the control buffer recvmsg filled, within
    // msg_controllen; each message's data is read unaligned, at the size its type has.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::IPPROTO_IP {
                let data = libc::CMSG_DATA(c);
                match h.cmsg_type {
                    libc::IP_TTL => {
                        ttl = Some(std::ptr::read_unaligned(data as *const libc::c_int) as u8)
                    }
                    // Linux reports the TOS as a single byte.
                    libc::IP_TOS => tos = Some(*data),
                    _ => {}
                }
            } else if h.cmsg_level == libc::SOL_UDP && h.cmsg_type == gso::UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                segment = usize::try_from(size).ok().filter(|&s| s > 0);
            } else if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SO_RXQ_OVFL {
                kernel_drops = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const u32));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Received {
        len: n as usize,
        from,
        ttl,
        tos,
        segment,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        kernel_drops,
    })
}

/// What of a frame goes on the wire through a socket: the addressing the kernel is
/// asked for, and the UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port (the QP's flow entropy).
    pub src_port: u16,
    /// IPv4 TOS byte.
    pub tos: u8,
    /// IPv4 TTL.
    pub ttl: u8,
    /// The UDP payload: BTH to ICRC.
    pub payload: &'a [u8],
}

impl<'a> Outgoing<'a> {
    /// Reads an Ethernet/IPv4 (no options)/UDP frame; `None` if it is not one or its
    /// lengths do not fit.
    pub fn of(frame: &'a [u8]) -> Option<Self> {
        let ip_at = ETH_HEADER_LEN;
        let udp_at = ip_at + IPV4_HEADER_LEN;
        let payload_at = udp_at + UDP_HEADER_LEN;
        if frame.len() < payload_at
            || u16::from_be_bytes([frame[12], frame[13]]) != ETHERTYPE_IPV4
            || frame[ip_at] != 0x45
            || frame[ip_at + 9] != IPPROTO_UDP
        {
            return None;
        }
        let ip_len = usize::from(u16::from_be_bytes([frame[ip_at + 2], frame[ip_at + 3]]));
        let udp_len = usize::from(u16::from_be_bytes([frame[udp_at + 4], frame[udp_at + 5]]));
        if ip_at + ip_len > frame.len()
            || udp_len < UDP_HEADER_LEN
            || IPV4_HEADER_LEN + udp_len > ip_len
        {
            return None;
        }
        let ip4 = |at: usize| Ipv4Addr::new(frame[at], frame[at + 1], frame[at + 2], frame[at + 3]);
        Some(Self {
            src_ip: ip4(ip_at + 12),
            dst_ip: ip4(ip_at + 16),
            src_port: u16::from_be_bytes([frame[udp_at], frame[udp_at + 1]]),
            tos: frame[ip_at + 1],
            ttl: frame[ip_at + 8],
            payload: &frame[payload_at..udp_at + udp_len],
        })
    }
}

/// The canonical IPv4 and UDP headers of a RoCEv2 packet, as
/// [`crate::roce::build::build`] writes them: no options, IP ID 0, DF, header checksum,
/// destination port 4791, UDP checksum 0.
pub fn canonical_ip_udp(
    src: SocketAddrV4,
    dst_ip: Ipv4Addr,
    tos: u8,
    ttl: u8,
    payload_len: usize,
) -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN] {
    let udp_len = (UDP_HEADER_LEN + payload_len) as u16;
    let ip_len = IPV4_HEADER_LEN as u16 + udp_len;
    let mut h = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    h[0] = 0x45;
    h[1] = tos;
    h[2..4].copy_from_slice(&ip_len.to_be_bytes());
    // 4..6: IP ID 0.
    h[6..8].copy_from_slice(&IP_DF.to_be_bytes());
    h[8] = ttl;
    h[9] = IPPROTO_UDP;
    h[12..16].copy_from_slice(&src.ip().octets());
    h[16..20].copy_from_slice(&dst_ip.octets());
    let mut sum: u32 = h[..IPV4_HEADER_LEN]
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h[20..22].copy_from_slice(&src.port().to_be_bytes());
    h[22..24].copy_from_slice(&ROCEV2_PORT.to_be_bytes());
    h[24..26].copy_from_slice(&udp_len.to_be_bytes());
    // 26..28: UDP checksum 0.
    h
}

/// The canonical frame of a datagram received from `src` on `dst_ip` with `tos` and
/// `ttl`, as the receiving function `dst_mac` sees it (see the module documentation),
/// in `frame` (a buffer to reuse: whatever it holds is replaced).
pub fn rebuild_frame(
    mut frame: Vec<u8>,
    dst_mac: [u8; 6],
    src: SocketAddrV4,
    dst_ip: Ipv4Addr,
    tos: u8,
    ttl: u8,
    payload: &[u8],
) -> Vec<u8> {
    frame.clear();
    frame.reserve(ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + payload.len());
    frame.extend_from_slice(&dst_mac);
    frame.extend_from_slice(&peer_mac(*src.ip()));
    frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    frame.extend_from_slice(&canonical_ip_udp(src, dst_ip, tos, ttl, payload.len()));
    frame.extend_from_slice(payload);
    frame
}

/// `out`'s payload with its ICRC recomputed for source port `port` (for a flow that could
/// not be sent from its own port).
fn payload_for_port(out: &Outgoing, port: u16) -> Vec<u8> {
    let covered = out.payload.len() - ICRC_LEN;
    let mut packet = canonical_ip_udp(
        SocketAddrV4::new(out.src_ip, port),
        out.dst_ip,
        out.tos,
        out.ttl,
        out.payload.len(),
    )
    .to_vec();
    packet.extend_from_slice(&out.payload[..covered]);
    let crc = icrc(&packet);
    let mut payload = out.payload.to_vec();
    payload[covered..].copy_from_slice(&crc.to_le_bytes());
    payload
}

/// The UDP port whole Ethernet frames cross to the function at `port`'s address: the
/// next one (4792 by default).
pub fn eth_port(port: u16) -> u16 {
    port.wrapping_add(1)
}

/// The IPv4 address an Ethernet frame of a function's operating system goes to over a
/// `udp:` port: an IPv4 packet's destination, an ARP packet's target; `None` for other
/// frames (IPv6, ...), which cannot cross.
pub fn eth_destination(frame: &[u8]) -> Option<Ipv4Addr> {
    let at = match frame.get(12..14)? {
        [0x08, 0x00] => 30,
        [0x08, 0x06] => 38,
        _ => return None,
    };
    let ip: [u8; 4] = frame.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(ip))
}

/// A function's receive sockets.
struct RxPort {
    ip: Ipv4Addr,
    mac: [u8; 6],
    socket: UdpSocket,
    /// Bound to (ip, port + 1): whole Ethernet frames of the functions' operating
    /// systems, one per datagram, sent and received (§15.1).
    eth: UdpSocket,
    /// What the kernel dropped on each socket.
    drops: socket::KernelDrops,
    eth_drops: socket::KernelDrops,
}

/// A flow's send socket.
struct TxFlow {
    socket: UdpSocket,
    /// The port it is bound to: the flow's, or a kernel-chosen one if that was taken.
    port: u16,
    ttl: Option<u8>,
    tos: Option<u8>,
    /// When it last sent, in sends of the uplink (for closing the least recently used).
    used: u64,
}

impl TxFlow {
    /// A socket for (ip, port), or, if that port is taken, for (ip, any port).
    fn open(ip: Ipv4Addr, port: u16) -> io::Result<Self> {
        let socket = match bind_socket(SocketAddrV4::new(ip, port), Role::Send) {
            Ok(s) => s,
            Err(e) => {
                let s = bind_socket(SocketAddrV4::new(ip, 0), Role::Send)?;
                log::warn!(
                    "cannot send from {ip}:{port} ({e}): that flow's datagrams go from port \
                     {} instead, with their ICRC recomputed for it (captures show the frames \
                     as the QP built them)",
                    s.local_addr().map(|a| a.port()).unwrap_or(0)
                );
                s
            }
        };
        let port = socket.local_addr()?.port();
        Ok(Self {
            socket,
            port,
            ttl: None,
            tos: None,
            used: 0,
        })
    }

    /// Sets the TTL and TOS of what it sends next, if they changed.
    fn set_ip(&mut self, ttl: u8, tos: u8) -> io::Result<()> {
        if self.ttl != Some(ttl) {
            self.socket.set_ttl(u32::from(ttl.max(1)))?;
            self.ttl = Some(ttl);
        }
        if self.tos != Some(tos) {
            setsockopt_int(
                self.socket.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_TOS,
                libc::c_int::from(tos),
            )?;
            self.tos = Some(tos);
        }
        Ok(())
    }
}

/// The functions' link to a real network: one receive socket per function, one send
/// socket per flow.
pub struct UdpUplink {
    port: u16,
    ports: Vec<RxPort>,
    flows: HashMap<(Ipv4Addr, u16), TxFlow>,
    /// Sends so far: the clock of `TxFlow::used`.
    sends: u64,
    /// The run of datagrams waiting to go out in one system call.
    batch: Option<Batch>,
    /// The buffer of the last batch sent, for the next one.
    batch_buf: Vec<u8>,
    /// Whether runs go out segmented by the kernel (until a send says it cannot).
    gso: bool,
    buf: Vec<u8>,
    stats: UplinkStats,
    /// Problems already reported, so that a flood of one is logged once.
    warned: HashSet<(&'static str, i32)>,
}

impl fmt::Debug for UdpUplink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpUplink")
            .field("port", &self.port)
            .field(
                "addresses",
                &self.ports.iter().map(|p| p.ip).collect::<Vec<_>>(),
            )
            .field("flows", &self.flows.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl UdpUplink {
    /// Binds a receive socket on (IP, `port`) for each of `endpoints` (the switch's
    /// ports, in order).
    pub fn bind(endpoints: &[Endpoint], port: u16) -> Result<Self, NetError> {
        let ports = endpoints
            .iter()
            .map(|e| {
                let addr = SocketAddrV4::new(Ipv4Addr::from(e.ip), port);
                let socket = bind_socket(addr, Role::Receive)
                    .map_err(|source| NetError::Bind { addr, source })?;
                let eth_addr = SocketAddrV4::new(*addr.ip(), eth_port(port));
                let eth =
                    bind_socket(eth_addr, Role::Receive).map_err(|source| NetError::Bind {
                        addr: eth_addr,
                        source,
                    })?;
                Ok(RxPort {
                    ip: *addr.ip(),
                    mac: e.mac,
                    socket,
                    eth,
                    drops: socket::KernelDrops::default(),
                    eth_drops: socket::KernelDrops::default(),
                })
            })
            .collect::<Result<Vec<_>, NetError>>()?;
        Ok(Self {
            port,
            ports,
            flows: HashMap::new(),
            sends: 0,
            batch: None,
            batch_buf: Vec::new(),
            gso: true,
            buf: vec![0; MAX_DATAGRAM + 1],
            stats: UplinkStats::default(),
            warned: HashSet::new(),
        })
    }

    /// Logs a problem the first time it happens.
    fn warn_once(&mut self, what: &'static str, errno: i32, msg: impl FnOnce() -> String) {
        if self.warned.insert((what, errno)) {
            log::warn!("{} (reported once)", msg());
        }
    }

    fn drop_tx(&mut self, what: &'static str, errno: i32, msg: impl FnOnce() -> String) -> bool {
        self.drop_many(1, what, errno, msg)
    }

    fn drop_many(
        &mut self,
        count: usize,
        what: &'static str,
        errno: i32,
        msg: impl FnOnce() -> String,
    ) -> bool {
        self.stats.tx_dropped += count as u64;
        self.warn_once(what, errno, msg);
        false
    }

    /// Counts the outcome of sending `count` datagrams of at most `len` bytes, `bytes` in
    /// all, to `to`. The bytes counted are those of the frames the datagrams carry (each
    /// with its Ethernet, IPv4 and UDP headers), as the functions' counters count them.
    fn count_sent(
        &mut self,
        sent: io::Result<()>,
        count: usize,
        (len, bytes): (usize, usize),
        to: SocketAddrV4,
    ) {
        match sent {
            Ok(()) => {
                self.stats.tx += count as u64;
                self.stats.tx_bytes += (bytes + count * FRAME_HEADERS) as u64;
            }
            // A full socket buffer: lost, as from a full NIC queue; the transport resends.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.stats.tx_dropped += count as u64;
            }
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                self.drop_many(count, "mtu", libc::EMSGSIZE, || {
                    format!(
                        "a datagram of {len} bytes to {to} exceeds the path MTU and RoCE \
                         packets are not fragmented: dropped; give the QP a smaller path MTU"
                    )
                });
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                self.drop_many(count, "send", errno, || format!("cannot send to {to}: {e}"));
            }
        }
    }

    fn local(&self, ip: Ipv4Addr) -> bool {
        self.ports.iter().any(|p| p.ip == ip)
    }
}

impl UdpUplink {
    /// Sends an Ethernet frame of a function's operating system (§15.1) whole, as one
    /// datagram from the function's Ethernet socket to the Ethernet port of the address
    /// it is for ([`eth_destination`]).
    fn send_ethernet(&mut self, frame: &[u8]) -> bool {
        let Some(from) = self
            .ports
            .iter()
            .position(|p| frame.get(6..12) == Some(&p.mac))
        else {
            return self.drop_tx("eth source", 0, || {
                "an Ethernet frame from a MAC that is no function's cannot cross a udp: port: dropped".into()
            });
        };
        let Some(dst) = eth_destination(frame) else {
            return self.drop_tx("eth protocol", 0, || {
                "an Ethernet frame that is neither IPv4 nor ARP (IPv6, ...) cannot cross a udp: port: dropped".into()
            });
        };
        if self.local(dst) {
            // A broadcast for a function of this rnicd: the switch gave it its copy.
            return true;
        }
        if dst.is_unspecified() || dst.is_broadcast() || dst.is_multicast() {
            return self.drop_tx("eth destination", 0, || {
                format!("an Ethernet frame for {dst}, which is not a unicast address, cannot cross a udp: port: dropped")
            });
        }
        let to = SocketAddrV4::new(dst, eth_port(self.port));
        match self.ports[from].eth.send_to(frame, to) {
            Ok(_) => {
                self.stats.tx += 1;
                self.stats.tx_bytes += frame.len() as u64;
                true
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                self.drop_tx("eth send", errno, || {
                    format!("cannot send an Ethernet frame to {to}: {e}")
                })
            }
        }
    }

    /// Reads up to `max` Ethernet frames that arrived for port `port` into `out`.
    fn receive_ethernet(
        &mut self,
        port: usize,
        max: usize,
        out: &mut Vec<Vec<u8>>,
        spare: &mut Vec<Vec<u8>>,
    ) -> usize {
        let mut read = 0;
        while read < max {
            let Some(p) = self.ports.get(port) else {
                break;
            };
            let r = match recv_one(&p.eth, &mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            self.stats.rx_kernel_dropped += self.ports[port].eth_drops.update(r.kernel_drops);
            read += 1;
            if r.truncated || r.len < 14 {
                self.stats.rx_dropped += 1;
                continue;
            }
            let payload = &self.buf[..r.len];
            for d in gso::datagrams(payload, r.segment.unwrap_or(payload.len())) {
                let mut frame = spare.pop().unwrap_or_default();
                frame.clear();
                frame.extend_from_slice(d);
                self.stats.rx += 1;
                self.stats.rx_bytes += frame.len() as u64;
                out.push(frame);
            }
        }
        read
    }
}

impl Uplink for UdpUplink {
    fn send(&mut self, frame: &[u8]) -> bool {
        if !crate::fabric::route::is_roce(frame) {
            return self.send_ethernet(frame);
        }
        let Some(out) = Outgoing::of(frame) else {
            return self.drop_tx("not udp", 0, || {
                "a frame for the network is not IPv4/UDP: dropped".into()
            });
        };
        if out.payload.len() < BTH_LEN + ICRC_LEN {
            return self.drop_tx("short", 0, || {
                "a frame for the network is too short for RoCEv2: dropped".into()
            });
        }
        if !self.local(out.src_ip) {
            return self.drop_tx("source", 0, || {
                format!(
                    "a frame from {}, which is no function's address, was dropped",
                    out.src_ip
                )
            });
        }
        let dst = out.dst_ip;
        if dst.is_unspecified() || dst.is_broadcast() || dst.is_multicast() {
            return self.drop_tx("destination", 0, || {
                format!("a frame to {dst}, which is not a unicast address, was dropped (is the QP's destination GID an IPv4-mapped unicast address?)")
            });
        }
        let key = (out.src_ip, out.src_port);
        let run = RunKey {
            src: key,
            to: SocketAddrV4::new(dst, self.port),
            ttl: out.ttl,
            tos: out.tos,
        };
        // Another run: the waiting one goes first (and its flow is not closed under it).
        if self.batch.as_ref().is_some_and(|b| b.key != run) {
            self.flush();
        }
        if self.flows.len() >= MAX_FLOWS && !self.flows.contains_key(&key) {
            if let Some(oldest) = self
                .flows
                .iter()
                .min_by_key(|(_, f)| f.used)
                .map(|(k, _)| *k)
            {
                self.flows.remove(&oldest);
            }
        }
        self.sends += 1;
        let now = self.sends;
        let flow = match self.flows.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => match TxFlow::open(out.src_ip, out.src_port) {
                Ok(f) => v.insert(f),
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(0);
                    return self.drop_tx("open", errno, || {
                        format!("cannot open a send socket on {}: {e}", out.src_ip)
                    });
                }
            },
        };
        flow.used = now;
        let payload = if flow.port == out.src_port {
            Cow::Borrowed(out.payload)
        } else {
            Cow::Owned(payload_for_port(&out, flow.port))
        };
        let joined = self.batch.as_mut().is_some_and(|b| b.join(&run, &payload));
        if !joined {
            self.flush();
            let buf = std::mem::take(&mut self.batch_buf);
            self.batch = Some(Batch::new(run, &payload, buf));
        }
        if !self.gso {
            self.flush();
        }
        true
    }

    fn flush(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let RunKey { src, to, ttl, tos } = batch.key;
        let Some(flow) = self.flows.get_mut(&src) else {
            // Cannot happen: a batch's flow is only closed after the batch went out.
            self.stats.tx_dropped += batch.count as u64;
            return;
        };
        if let Err(e) = flow.set_ip(ttl, tos) {
            let errno = e.raw_os_error().unwrap_or(0);
            self.drop_many(batch.count, "ttl/tos", errno, || {
                format!("cannot set TTL {ttl} / TOS {tos:#x}: {e}")
            });
            self.batch_buf = batch.bytes;
            return;
        }
        let sent = if batch.count == 1 {
            flow.socket.send_to(&batch.bytes, to).map(|_| ())
        } else {
            gso::send_segments(&flow.socket, &batch.bytes, batch.segment, to)
        };
        // A path that cannot segment: the run's datagrams go one by one.
        let one_by_one: Option<Vec<_>> = match &sent {
            Err(e) if batch.count > 1 && gso::unsupported(e) => Some(
                batch
                    .datagrams()
                    .map(|d| (flow.socket.send_to(d, to).map(|_| ()), d.len()))
                    .collect(),
            ),
            _ => None,
        };
        match (sent, one_by_one) {
            (Err(e), Some(each)) => {
                self.gso = false;
                let errno = e.raw_os_error().unwrap_or(0);
                self.warn_once("gso", errno, || {
                    format!(
                        "the kernel cannot segment datagrams to {to} ({e}): every datagram \
                         is sent on its own from now on, at a higher CPU cost"
                    )
                });
                for (sent, len) in each {
                    self.count_sent(sent, 1, (len, len), to);
                }
            }
            (sent, _) => {
                let sizes = (batch.segment, batch.bytes.len());
                self.count_sent(sent, batch.count, sizes, to)
            }
        }
        self.batch_buf = batch.bytes;
    }

    fn receive(
        &mut self,
        port: usize,
        max: usize,
        out: &mut Vec<Vec<u8>>,
        spare: &mut Vec<Vec<u8>>,
    ) -> usize {
        let mut read = 0;
        let start = std::time::Instant::now();
        while read < max && !super::read_time_up(start, read) {
            let Some(p) = self.ports.get(port) else {
                return read;
            };
            let r = match recv_one(&p.socket, &mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let (ip, errno) = (p.ip, e.raw_os_error().unwrap_or(0));
                    self.warn_once("recv", errno, || format!("receive on {ip} failed: {e}"));
                    break;
                }
            };
            let (ip, mac) = (p.ip, p.mac);
            self.stats.rx_kernel_dropped += self.ports[port].drops.update(r.kernel_drops);
            let payload = &self.buf[..r.len.min(self.buf.len())];
            if r.truncated {
                read += 1;
                self.stats.rx_dropped += 1;
                self.stats.rx_bytes += (r.len + FRAME_HEADERS) as u64;
                log::trace!("datagram of {} bytes from {} truncated", r.len, r.from);
                continue;
            }
            // Without the ancillary data (never so on Linux) the values rnicd sends.
            let ttl = r.ttl.unwrap_or(64);
            let tos = r.tos.unwrap_or(0);
            // A coalesced run is the datagrams it was made of, back to back.
            let segment = r.segment.unwrap_or(payload.len());
            let before = out.len();
            out.extend(gso::datagrams(payload, segment).map(|d| {
                let buffer = spare.pop().unwrap_or_default();
                rebuild_frame(buffer, mac, r.from, ip, tos, ttl, d)
            }));
            let n = out.len() - before;
            read += n;
            self.stats.rx += n as u64;
            self.stats.rx_bytes += out[before..].iter().map(|f| f.len() as u64).sum::<u64>();
        }
        read + self.receive_ethernet(port, max.saturating_sub(read), out, spare)
    }

    fn fds(&self) -> Vec<RawFd> {
        self.ports
            .iter()
            .flat_map(|p| [p.socket.as_raw_fd(), p.eth.as_raw_fd()])
            .collect()
    }

    fn stats(&self) -> UplinkStats {
        self.stats
    }

    fn port_stats(&self) -> PortStats {
        // The only frames it drops on receipt are those too large for the buffer.
        let own = PortStats {
            truncated: self.stats.rx_dropped,
            ..PortStats::default()
        };
        super::port_stats(PORT_UDP, &self.stats(), own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::build;
    use crate::roce::build::Addressing;
    use crate::roce::hdr::{Bth, Headers, Reth};
    use crate::roce::opcode as op;
    use crate::roce::parse;
    use std::time::{Duration, Instant};

    #[test]
    fn specs_parse_and_refuse_with_the_usage() {
        assert_eq!(
            "udp:127.0.1.1".parse::<UdpSpec>().unwrap(),
            UdpSpec {
                addr: Ipv4Addr::new(127, 0, 1, 1),
                port: 4791
            }
        );
        assert_eq!(
            "udp:10.0.0.5:5000".parse::<UdpSpec>().unwrap(),
            UdpSpec {
                addr: Ipv4Addr::new(10, 0, 0, 5),
                port: 5000
            }
        );
        for bad in [
            "127.0.1.1",
            "tcp:127.0.1.1",
            "udp:",
            "udp:1.2.3",
            "udp:1.2.3.4:0",
            "udp:1.2.3.4:70000",
            "udp:0.0.0.0",
            "udp:224.0.0.1",
        ] {
            let e = bad.parse::<UdpSpec>().unwrap_err();
            assert!(
                e.contains("udp:ADDR") || e.contains("unicast"),
                "{bad}: {e}"
            );
        }
    }

    /// A RoCEv2 frame of a two-MTU-ish WRITE first packet with odd-length payload (so it
    /// has a pad), as a function builds it.
    fn frame(addressing: &Addressing) -> Vec<u8> {
        let hdrs = Headers {
            bth: Bth::new(op::RC_RDMA_WRITE_FIRST, 0x12, 0x345),
            reth: Some(Reth {
                va: 0x1000,
                rkey: 0x77,
                dma_len: 3000,
            }),
            ..Headers::default()
        };
        let payload: Vec<u8> = (0..1021u32).map(|i| (i * 7) as u8).collect();
        let mut f = Vec::new();
        build::build(addressing, &hdrs, &payload, &mut f).unwrap();
        f
    }

    fn addressing(src_ip: [u8; 4], dst_ip: [u8; 4], dst_mac: [u8; 6]) -> Addressing {
        Addressing {
            src_mac: [0x02, 0x52, 0x4e, 0x49, 0x43, 1],
            dst_mac,
            src_ip,
            dst_ip,
            src_port: build::udp_src_port(0, 0x12, 0x34),
            ttl: 17,
            tos: 0x68,
            ip_id: 0,
        }
    }

    #[test]
    fn a_frame_rebuilt_from_its_datagram_differs_only_in_the_mac_source() {
        let rx_mac = [0x02, 0x52, 0x4e, 0x49, 0x43, 7];
        let f = frame(&addressing([10, 1, 0, 2], [10, 2, 0, 3], rx_mac));
        let out = Outgoing::of(&f).unwrap();
        assert_eq!(out.payload, &f[42..]);
        let rebuilt = rebuild_frame(
            Vec::new(),
            rx_mac,
            SocketAddrV4::new(out.src_ip, out.src_port),
            out.dst_ip,
            out.tos,
            out.ttl,
            out.payload,
        );
        assert_eq!(rebuilt.len(), f.len());
        assert_eq!(rebuilt[..6], f[..6]);
        assert_eq!(rebuilt[6..12], peer_mac(Ipv4Addr::new(10, 1, 0, 2)));
        assert_eq!(rebuilt[12..], f[12..]);
        parse::parse(&rebuilt).expect("the rebuilt frame's ICRC verifies");
    }

    #[test]
    fn a_recomputed_icrc_covers_the_port_actually_used() {
        let f = frame(&addressing([10, 1, 0, 2], [10, 2, 0, 3], [0; 6]));
        let out = Outgoing::of(&f).unwrap();
        let payload = payload_for_port(&out, 40000);
        assert_ne!(payload, out.payload);
        let rebuilt = rebuild_frame(
            Vec::new(),
            [0; 6],
            SocketAddrV4::new(out.src_ip, 40000),
            out.dst_ip,
            out.tos,
            out.ttl,
            &payload,
        );
        parse::parse(&rebuilt).expect("ICRC over port 40000");
        let unchanged = rebuild_frame(
            Vec::new(),
            [0; 6],
            SocketAddrV4::new(out.src_ip, 40000),
            out.dst_ip,
            out.tos,
            out.ttl,
            out.payload,
        );
        assert!(matches!(
            parse::parse(&unchanged),
            Err(parse::ParseError::Icrc { .. })
        ));
    }

    /// A port and loopback addresses for one test, unlikely to be used by anything else
    /// (tests of one binary run in parallel threads; the pid separates test binaries).
    fn test_net(test: u8) -> (u16, [u8; 4], [u8; 4]) {
        let pid = std::process::id();
        let port = 20_000 + (pid % 20_000) as u16;
        let b = (pid >> 8) as u8;
        let c = pid as u8;
        (
            port,
            [127, 100 + test * 2, b, c],
            [127, 101 + test * 2, b, c],
        )
    }

    fn endpoint(ip: [u8; 4], n: u8) -> Endpoint {
        Endpoint {
            mac: [0x02, 0x52, 0x4e, 0x49, 0x43, n],
            ip,
        }
    }

    /// Polls `port` of `u` until a frame arrives (or 5 s pass).
    fn receive_one(u: &mut UdpUplink, port: usize) -> Option<Vec<u8>> {
        receive_n(u, port, 1).pop()
    }

    /// Receives on `port` of `u` until `n` frames arrived (or 5 s pass).
    fn receive_n(u: &mut UdpUplink, port: usize, n: usize) -> Vec<Vec<u8>> {
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < n && start.elapsed() < Duration::from_secs(5) {
            u.receive(port, 256, &mut got, &mut Vec::new());
            std::thread::sleep(Duration::from_micros(100));
        }
        got
    }

    /// Two endpoints on loopback addresses of test `test`, each with its uplink.
    fn pair(test: u8) -> (Endpoint, Endpoint, UdpUplink, UdpUplink) {
        let (port, a_ip, b_ip) = test_net(test);
        let (a, b) = (endpoint(a_ip, 1), endpoint(b_ip, 2));
        let ua = UdpUplink::bind(&[a], port).unwrap();
        let ub = UdpUplink::bind(&[b], port).unwrap();
        (a, b, ua, ub)
    }

    #[test]
    fn frames_cross_real_sockets_unchanged_but_for_the_mac_source() {
        let (a, b, mut ua, mut ub) = pair(0);
        let f = frame(&addressing(a.ip, b.ip, b.mac));
        assert!(ua.send(&f));
        ua.flush();
        let got = receive_one(&mut ub, 0).expect("datagram arrived");
        assert_eq!(got[..6], f[..6]);
        assert_eq!(got[6..12], peer_mac(Ipv4Addr::from(a.ip)));
        assert_eq!(got[12..], f[12..], "TTL, TOS, source port: all as sent");
        parse::parse(&got).expect("ICRC verifies");
        assert_eq!(ua.stats().tx, 1);
        assert_eq!(ub.stats().rx, 1);
        // Bytes are the frames', as the functions' counters count them, on both sides.
        assert_eq!(ua.port_stats().tx_bytes, f.len() as u64);
        let p = ub.port_stats();
        assert_eq!((p.kind, p.rx_frames, p.rx_delivered), (PORT_UDP, 1, 1));
        assert_eq!(p.rx_bytes, got.len() as u64);
        // A second QP's flow goes from its own port.
        let mut second = addressing(a.ip, b.ip, b.mac);
        second.src_port = build::udp_src_port(0, 0x13, 0x34);
        assert_ne!(second.src_port, addressing(a.ip, b.ip, b.mac).src_port);
        assert!(ua.send(&frame(&second)));
        ua.flush();
        let got = receive_one(&mut ub, 0).expect("second datagram");
        assert_eq!(u16::from_be_bytes([got[34], got[35]]), second.src_port);
        assert_eq!(ua.flows.len(), 2);
        // A frame arrives in a spare buffer when there is one (no allocation per frame).
        assert!(ua.send(&f));
        ua.flush();
        let mut spare = vec![vec![0xEE; 9000]];
        let buffer = spare[0].as_ptr();
        let mut got = Vec::new();
        let start = Instant::now();
        while got.is_empty() && start.elapsed() < Duration::from_secs(5) {
            ub.receive(0, 16, &mut got, &mut spare);
        }
        assert_eq!((got.len(), spare.len()), (1, 0));
        assert_eq!(got[0].as_ptr(), buffer);
        assert_eq!(got[0][12..], f[12..], "the buffer's old bytes are gone");
    }

    /// The frames of a message of `n` MTU-sized packets and a short last one, PSNs from
    /// `psn`, from `a` to `b`.
    fn message(a: Endpoint, b: Endpoint, psn: u32, n: usize, mtu: usize) -> Vec<Vec<u8>> {
        (0..=n)
            .map(|i| {
                let len = if i == n { mtu / 3 } else { mtu };
                let payload: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                let hdrs = Headers {
                    bth: Bth::new(op::RC_SEND_MIDDLE, 0x12, psn + i as u32),
                    ..Headers::default()
                };
                let mut f = Vec::new();
                build::build(&addressing(a.ip, b.ip, b.mac), &hdrs, &payload, &mut f).unwrap();
                f
            })
            .collect()
    }

    #[test]
    fn a_run_of_datagrams_goes_out_in_one_send_and_arrives_as_its_frames() {
        let (a, b, mut ua, mut ub) = pair(6);
        // Two messages of 20 + 1 packets: more than one send's worth each.
        let sent: Vec<_> = [message(a, b, 100, 20, 4096), message(a, b, 121, 20, 4096)].concat();
        for f in &sent {
            assert!(ua.send(f));
        }
        assert!(ua.stats().tx < 42, "kept until flushed");
        ua.flush();
        assert_eq!(ua.stats().tx, 42);
        assert!(ua.gso, "loopback segments");
        let got = receive_n(&mut ub, 0, sent.len());
        assert_eq!(got.len(), sent.len());
        for (f, g) in sent.iter().zip(&got) {
            assert_eq!(g[12..], f[12..], "every frame, in order, as built");
            parse::parse(g).expect("ICRC verifies");
        }
        assert_eq!(ub.stats().rx, 42);
        assert_eq!(ub.receive(0, 16, &mut Vec::new(), &mut Vec::new()), 0);
    }

    #[test]
    fn without_segmentation_every_datagram_goes_on_its_own() {
        let (a, b, mut ua, mut ub) = pair(8);
        // As after a send the kernel could not segment.
        ua.gso = false;
        let sent = message(a, b, 7, 5, 2048);
        for f in &sent {
            assert!(ua.send(f));
            assert!(ua.batch.is_none(), "sent at once, nothing kept");
        }
        assert_eq!(ua.stats().tx, sent.len() as u64);
        let got = receive_n(&mut ub, 0, sent.len());
        assert_eq!(got.len(), sent.len());
        for (f, g) in sent.iter().zip(&got) {
            assert_eq!(g[12..], f[12..]);
        }
    }

    #[test]
    fn runs_of_interleaved_flows_keep_each_flows_order() {
        let (a, b, mut ua, mut ub) = pair(7);
        let first = message(a, b, 0, 3, 1024);
        let mut second = message(a, b, 50, 3, 1024);
        let other_port = build::udp_src_port(0, 0x99, 0x34);
        for f in &mut second {
            f[34..36].copy_from_slice(&other_port.to_be_bytes());
            build::seal(f);
        }
        for (x, y) in first.iter().zip(&second) {
            assert!(ua.send(x));
            assert!(ua.send(y));
        }
        ua.flush();
        let got = receive_n(&mut ub, 0, 8);
        let of = |port: u16| -> Vec<&Vec<u8>> {
            got.iter()
                .filter(|g| g[34..36] == port.to_be_bytes())
                .collect()
        };
        let first_port = u16::from_be_bytes([first[0][34], first[0][35]]);
        assert_eq!(of(first_port).len(), 4);
        for (f, g) in first.iter().zip(of(first_port)) {
            assert_eq!(g[12..], f[12..]);
        }
        for (f, g) in second.iter().zip(of(other_port)) {
            assert_eq!(g[12..], f[12..]);
            parse::parse(g).expect("ICRC verifies");
        }
    }

    #[test]
    fn send_sockets_are_capped_closing_the_least_recently_used() {
        let (port, a_ip, b_ip) = test_net(5);
        let (a, b) = (endpoint(a_ip, 1), endpoint(b_ip, 2));
        let mut ua = UdpUplink::bind(&[a], port).unwrap();
        let mut f = frame(&addressing(a.ip, b.ip, b.mac));
        let first = Outgoing::of(&f).unwrap().src_port;
        let mut send = |port: u16| {
            f[34..36].copy_from_slice(&port.to_be_bytes());
            // Nobody receives: the kernel drops the datagrams, which is fine here.
            assert!(ua.send(&f));
        };
        send(first);
        send(0xC000);
        // The first flow sends again: 0xC000 is now the least recently used.
        send(first);
        for i in 1..MAX_FLOWS as u16 {
            send(0xC000 + i);
        }
        assert_eq!(ua.flows.len(), MAX_FLOWS);
        assert!(ua.flows.contains_key(&(Ipv4Addr::from(a.ip), first)));
        assert!(!ua.flows.contains_key(&(Ipv4Addr::from(a.ip), 0xC000)));
        assert!(ua.flows.contains_key(&(Ipv4Addr::from(a.ip), 0xC001)));
    }

    #[test]
    fn a_taken_flow_port_falls_back_to_another_with_a_matching_icrc() {
        let (port, a_ip, b_ip) = test_net(1);
        let (a, b) = (endpoint(a_ip, 1), endpoint(b_ip, 2));
        let f = frame(&addressing(a.ip, b.ip, b.mac));
        let flow_port = Outgoing::of(&f).unwrap().src_port;
        // Held without SO_REUSEADDR, as another program would.
        let _squatter = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(a.ip), flow_port))
            .expect("squat the flow port");
        let mut ua = UdpUplink::bind(&[a], port).unwrap();
        let mut ub = UdpUplink::bind(&[b], port).unwrap();
        assert!(ua.send(&f));
        ua.flush();
        let got = receive_one(&mut ub, 0).expect("datagram arrived");
        assert_ne!(u16::from_be_bytes([got[34], got[35]]), flow_port);
        parse::parse(&got).expect("ICRC recomputed for the port used");
    }

    #[test]
    fn short_and_foreign_datagrams_reach_the_receive_checks() {
        let (port, a_ip, b_ip) = test_net(2);
        let mut ub = UdpUplink::bind(&[endpoint(b_ip, 2)], port).unwrap();
        let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(a_ip), 0)).unwrap();
        let to = SocketAddrV4::new(Ipv4Addr::from(b_ip), port);
        let mut not_roce = vec![0u8; 64];
        not_roce[0] = 0xee; // no such opcode
        let mut bad_version = vec![0u8; 64];
        bad_version[0] = op::RC_SEND_ONLY;
        bad_version[1] = 1;
        let mut short_headers = vec![0u8; 20];
        short_headers[0] = op::RC_RDMA_WRITE_ONLY; // needs a RETH
        for d in [
            &[][..],
            &[1, 2, 3][..],
            &not_roce,
            &bad_version,
            &short_headers,
        ] {
            s.send_to(d, to).unwrap();
        }
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < 5 && start.elapsed() < Duration::from_secs(5) {
            ub.receive(0, 16, &mut got, &mut Vec::new());
        }
        let why: Vec<_> = got.iter().map(|f| parse::parse(f).unwrap_err()).collect();
        assert!(matches!(why[0], parse::ParseError::TruncatedBth { len: 0 }));
        assert!(matches!(why[1], parse::ParseError::TruncatedBth { len: 3 }));
        assert_eq!(why[2], parse::ParseError::UnknownOpcode(0xee));
        assert_eq!(why[3], parse::ParseError::BthVersion(1));
        assert!(matches!(
            why[4],
            parse::ParseError::TruncatedHeaders { opcode: 0x0a, .. }
        ));
        assert_eq!((ub.stats().rx, ub.stats().rx_dropped), (5, 0));
        // Nothing waits: the next receive reads nothing.
        assert_eq!(ub.receive(0, 16, &mut got, &mut Vec::new()), 0);
        // Out-of-range ports read nothing either.
        assert_eq!(ub.receive(7, 16, &mut got, &mut Vec::new()), 0);
    }

    #[test]
    fn binding_an_address_twice_names_the_fix() {
        let (port, a_ip, _) = test_net(3);
        let _first = UdpUplink::bind(&[endpoint(a_ip, 1)], port).unwrap();
        let e = UdpUplink::bind(&[endpoint(a_ip, 1)], port).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("address in use"), "{msg}");
        assert!(msg.contains("choose another ADDR"), "{msg}");
    }

    #[test]
    fn frames_that_are_not_udp_or_not_to_a_unicast_address_are_dropped() {
        let (port, a_ip, _) = test_net(4);
        let a = endpoint(a_ip, 1);
        let mut ua = UdpUplink::bind(&[a], port).unwrap();
        assert!(!ua.send(&[0u8; 10]));
        let f = frame(&addressing(a.ip, [255, 255, 255, 255], [0xff; 6]));
        assert!(!ua.send(&f));
        let f = frame(&addressing([10, 9, 9, 9], [10, 2, 0, 3], [0xff; 6]));
        assert!(!ua.send(&f), "not from one of our addresses");
        assert_eq!(ua.stats().tx_dropped, 3);
    }
}
