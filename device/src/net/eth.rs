//! The Ethernet port (`rnicd --net eth:...`): the functions as Ethernet endpoints on a
//! QEMU network segment, so that a guest running Soft-RoCE, or another rnicd, exchanges
//! RoCEv2 with them. Framing per mode ([`crate::net::link`]), addressing, ARP
//! ([`crate::net::arp`]) and what is checked and counted on receipt are in
//! docs/hardware-interface.md §7.16.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::str::FromStr;
use std::time::Instant;

use crate::fabric::frame::Endpoint;
use crate::fabric::uplink::{Uplink, UplinkStats};
use crate::net::arp::{Arp, Neighbors, Route, BROADCAST, ETHERTYPE_ARP, ETH_MIN_FRAME, REQUEST};
use crate::net::link::{DatagramLink, Link, StreamLink};
use crate::net::NetError;
use crate::roce::build::ones_complement_sum;
use crate::roce::hdr::{
    ETHERTYPE_IPV4, ETH_HEADER_LEN, IPV4_HEADER_LEN, ROCEV2_PORT, UDP_HEADER_LEN,
};
use rnic_abi::admin::{PortStats, PORT_ETH};

/// Frames read off the wire per engine pass at most.
const READ_BUDGET: usize = 1024;
/// Frames waiting for one function at most; more are dropped (counted).
const INBOX_LIMIT: usize = 8192;
/// IPv4 protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

/// The MAC of the function whose IPv4 address is `ip` on an Ethernet port: `02:52`
/// (locally administered, unicast) followed by the address.
pub fn mac_for_ip(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x52, o[0], o[1], o[2], o[3]]
}

/// What `--net eth:...` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EthSpec {
    /// `eth:dgram:LADDR:LPORT:RADDR:RPORT`.
    Dgram {
        /// Where the port's socket is bound.
        local: SocketAddrV4,
        /// Where its frames go.
        remote: SocketAddrV4,
    },
    /// `eth:mcast:GROUP:PORT`.
    Mcast(SocketAddrV4),
    /// `eth:listen:HOST:PORT`.
    Listen(String),
    /// `eth:connect:HOST:PORT`.
    Connect(String),
}

const USAGE: &str = "--net takes eth:dgram:LADDR:LPORT:RADDR:RPORT, eth:mcast:GROUP:PORT, \
                     eth:listen:HOST:PORT or eth:connect:HOST:PORT";

fn socket_addr(host: &str, port: &str) -> Result<SocketAddrV4, String> {
    let ip: Ipv4Addr = host
        .parse()
        .map_err(|_| format!("'{host}' is not an IPv4 address: {USAGE}"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("'{port}' is not a port (1..=65535): {USAGE}"))?;
    Ok(SocketAddrV4::new(ip, port))
}

impl FromStr for EthSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(rest) = s.strip_prefix("eth:") else {
            return Err(format!("'{s}' is not an Ethernet port: {USAGE}"));
        };
        let parts: Vec<&str> = rest.split(':').collect();
        match parts[..] {
            ["dgram", la, lp, ra, rp] => Ok(Self::Dgram {
                local: socket_addr(la, lp)?,
                remote: socket_addr(ra, rp)?,
            }),
            ["mcast", g, p] => {
                let group = socket_addr(g, p)?;
                if !group.ip().is_multicast() {
                    return Err(format!("{} is not a multicast group: {USAGE}", group.ip()));
                }
                Ok(Self::Mcast(group))
            }
            [mode @ ("listen" | "connect"), host, port] => {
                if host.is_empty() {
                    return Err(format!("'{s}' names no host: {USAGE}"));
                }
                socket_addr("0.0.0.0", port)?;
                let addr = format!("{host}:{port}");
                Ok(if mode == "listen" {
                    Self::Listen(addr)
                } else {
                    Self::Connect(addr)
                })
            }
            _ => Err(format!("'{s}' is not an Ethernet port: {USAGE}")),
        }
    }
}

impl fmt::Display for EthSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dgram { local, remote } => write!(f, "eth:dgram:{local}:{remote}"),
            Self::Mcast(group) => write!(f, "eth:mcast:{group}"),
            Self::Listen(addr) => write!(f, "eth:listen:{addr}"),
            Self::Connect(addr) => write!(f, "eth:connect:{addr}"),
        }
    }
}

/// What the port counted of what it received, by reason, in words for the log: the
/// receive counters of [`PortStats`] (frames ignored are valid but not for the functions,
/// frames dropped are invalid).
fn received_report(c: &PortStats) -> String {
    format!(
        "ignored: not_for_us {} looped {} other_protocol {}; arp {}; dropped: runt {} \
         ip_version {} ip_header_length {} ip_checksum {} ip_total_length {} ip_fragment {} \
         udp_length {} backlog {}",
        c.not_for_us,
        c.looped,
        c.other_protocol,
        c.arp_received,
        c.runt,
        c.ip_version,
        c.ip_header_length,
        c.ip_checksum,
        c.ip_total_length,
        c.ip_fragment,
        c.udp_length,
        c.backlog
    )
}

/// What becomes of a received frame.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Whole and for the function at this port, trimmed to this length.
    Deliver(usize, usize),
    /// For every port whose operating system receives (§15.5): a broadcast or multicast
    /// frame that is not ARP.
    DeliverToHosts,
    /// ARP, handled by the port.
    Arp,
    /// Counted in this slot, with this reason for the log (dropped ones only).
    Count(fn(&mut PortStats) -> &mut u64, Option<&'static str>),
}

/// The functions' Ethernet port on a QEMU network segment.
pub struct EthUplink {
    link: Box<dyn Link>,
    ports: Vec<Endpoint>,
    neighbors: Neighbors,
    inbox: Vec<VecDeque<Vec<u8>>>,
    stats: UplinkStats,
    /// What it counted of what it received, by reason (the receive counters of
    /// [`PortStats`]), and the ARP packets it sent.
    counters: PortStats,
    /// Frames put on and taken off the wire since the switch last asked, when capturing.
    capture: Option<Vec<Vec<u8>>>,
    /// Problems already reported, so that a flood of one is logged once.
    warned: HashSet<&'static str>,
    /// Per port: its operating system receives its frames and answers ARP (§15.5).
    os: Vec<bool>,
}

impl fmt::Debug for EthUplink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EthUplink")
            .field("link", &self.link.describe())
            .field("ports", &self.ports)
            .field("stats", &self.stats)
            .field("counters", &self.counters)
            .finish()
    }
}

impl EthUplink {
    /// Opens the port that `spec` describes for the functions `endpoints` (the switch's
    /// ports, in order).
    pub fn open(spec: &EthSpec, endpoints: &[Endpoint]) -> Result<Self, NetError> {
        let fail = |source| NetError::Eth {
            spec: spec.clone(),
            source,
        };
        let link: Box<dyn Link> = match spec {
            EthSpec::Dgram { local, remote } => {
                Box::new(DatagramLink::dgram(*local, *remote).map_err(fail)?)
            }
            EthSpec::Mcast(group) => Box::new(DatagramLink::mcast(*group).map_err(fail)?),
            EthSpec::Listen(addr) => Box::new(StreamLink::listen(addr).map_err(fail)?),
            EthSpec::Connect(addr) => Box::new(StreamLink::connect(addr).map_err(fail)?),
        };
        Ok(Self::with_link(link, endpoints))
    }

    /// A port on `link`.
    pub fn with_link(link: Box<dyn Link>, endpoints: &[Endpoint]) -> Self {
        Self {
            link,
            ports: endpoints.to_vec(),
            neighbors: Neighbors::default(),
            inbox: endpoints.iter().map(|_| VecDeque::new()).collect(),
            stats: UplinkStats::default(),
            counters: PortStats::default(),
            capture: None,
            warned: HashSet::new(),
            os: vec![false; endpoints.len()],
        }
    }

    fn warn_once(&mut self, what: &'static str, msg: impl FnOnce() -> String) {
        if self.warned.insert(what) {
            log::warn!(
                "ethernet port ({}): {} (reported once)",
                self.link.describe(),
                msg()
            );
        }
    }

    /// Puts `frame` on the wire as it is (padded to the Ethernet minimum).
    fn transmit(&mut self, mut frame: Vec<u8>) -> bool {
        if frame.len() < ETH_MIN_FRAME {
            frame.resize(ETH_MIN_FRAME, 0);
        }
        match self.link.send(&frame) {
            Ok(()) => {
                self.stats.tx += 1;
                self.stats.tx_bytes += frame.len() as u64;
                if let Some(c) = &mut self.capture {
                    c.push(frame);
                }
                true
            }
            Err(e) => {
                self.stats.tx_dropped += 1;
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => {}
                    std::io::ErrorKind::NotConnected => self.warn_once("no peer", || {
                        "no peer connected yet: frames are dropped until one is".into()
                    }),
                    _ => self.warn_once("send", || format!("cannot send a frame: {e}")),
                }
                false
            }
        }
    }

    /// Sends `frame` to `mac`.
    fn transmit_to(&mut self, mut frame: Vec<u8>, mac: [u8; 6]) -> bool {
        frame[..6].copy_from_slice(&mac);
        self.transmit(frame)
    }

    fn transmit_arp(&mut self, arp: Arp) {
        if self.transmit(arp.frame()) {
            self.counters.arp_sent += 1;
        }
    }

    fn port_of_mac(&self, mac: &[u8]) -> Option<usize> {
        self.ports.iter().position(|p| p.mac[..] == *mac)
    }

    fn port_of_ip(&self, ip: [u8; 4]) -> Option<usize> {
        self.ports.iter().position(|p| p.ip == ip)
    }

    /// What to do with a frame received from the wire.
    fn classify(&self, frame: &[u8]) -> Verdict {
        let Some(eth) = frame.first_chunk::<ETH_HEADER_LEN>() else {
            return Verdict::Count(|c| &mut c.runt, Some("shorter than an Ethernet header"));
        };
        let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
        if self.port_of_mac(&eth[6..12]).is_some() {
            return Verdict::Count(|c| &mut c.looped, None);
        }
        let port = self.port_of_mac(&eth[..6]);
        if ethertype == ETHERTYPE_ARP && (port.is_some() || eth[..6] == BROADCAST) {
            return Verdict::Arp;
        }
        if eth[0] & 1 != 0 && self.os.contains(&true) {
            return Verdict::DeliverToHosts;
        }
        let Some(port) = port else {
            return Verdict::Count(|c| &mut c.not_for_us, None);
        };
        if self.os[port] && !crate::fabric::route::is_roce(frame) {
            // The operating system's: it checks what it takes.
            return Verdict::Deliver(port, frame.len());
        }
        if ethertype != ETHERTYPE_IPV4 {
            return Verdict::Count(|c| &mut c.other_protocol, None);
        }
        let ip = &frame[ETH_HEADER_LEN..];
        if ip.len() < IPV4_HEADER_LEN {
            return Verdict::Count(|c| &mut c.runt, Some("too short for an IPv4 header"));
        }
        if ip[0] >> 4 != 4 {
            return Verdict::Count(|c| &mut c.ip_version, Some("IP version other than 4"));
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ihl < IPV4_HEADER_LEN || ihl > ip.len() {
            return Verdict::Count(
                |c| &mut c.ip_header_length,
                Some("IPv4 header length under 20 bytes or past the frame"),
            );
        }
        if ones_complement_sum(0, &ip[..ihl]) != 0xFFFF {
            return Verdict::Count(|c| &mut c.ip_checksum, Some("bad IPv4 header checksum"));
        }
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if total < ihl || total > ip.len() {
            return Verdict::Count(
                |c| &mut c.ip_total_length,
                Some("IPv4 total length under its header or past the frame"),
            );
        }
        if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
            return Verdict::Count(
                |c| &mut c.ip_fragment,
                Some("an IPv4 fragment (RoCEv2 is never fragmented)"),
            );
        }
        if ip[9] != IPPROTO_UDP {
            return Verdict::Count(|c| &mut c.other_protocol, None);
        }
        let udp = &ip[ihl..total];
        let udp_len = udp
            .get(4..6)
            .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])));
        match udp_len {
            Some(len) if (UDP_HEADER_LEN..=udp.len()).contains(&len) => {}
            _ => {
                return Verdict::Count(
                    |c| &mut c.udp_length,
                    Some("UDP length under 8 or past the IP payload"),
                )
            }
        }
        if udp[2..4] != ROCEV2_PORT.to_be_bytes() {
            return Verdict::Count(|c| &mut c.other_protocol, None);
        }
        Verdict::Deliver(port, ETH_HEADER_LEN + total)
    }

    /// Handles one frame read off the wire.
    fn handle(&mut self, mut frame: Vec<u8>, now: Instant) {
        self.stats.rx_bytes += frame.len() as u64;
        if let Some(c) = &mut self.capture {
            c.push(frame.clone());
        }
        match self.classify(&frame) {
            Verdict::Deliver(port, len) => {
                if self.inbox[port].len() >= INBOX_LIMIT {
                    self.counters.backlog += 1;
                    self.stats.rx_dropped += 1;
                    return;
                }
                frame.truncate(len);
                self.inbox[port].push_back(frame);
                self.stats.rx += 1;
            }
            Verdict::Arp => {
                self.handle_arp(&frame, now);
                let hosts: Vec<usize> = match self.port_of_mac(&frame[..6]) {
                    Some(port) => vec![port],
                    None => (0..self.ports.len()).collect(),
                };
                self.deliver_to_hosts(&frame, &hosts);
            }
            Verdict::DeliverToHosts => {
                let all: Vec<usize> = (0..self.ports.len()).collect();
                self.deliver_to_hosts(&frame, &all);
            }
            Verdict::Count(slot, why) => {
                *slot(&mut self.counters) += 1;
                if let Some(why) = why {
                    self.stats.rx_dropped += 1;
                    let src = mac_str(&frame[6.min(frame.len())..12.min(frame.len())]);
                    self.warn_once(why, || format!("dropped a frame from {src}: {why}"));
                }
            }
        }
    }

    /// Gives a copy of `frame` to each of `ports` whose operating system receives.
    fn deliver_to_hosts(&mut self, frame: &[u8], ports: &[usize]) {
        for &port in ports {
            if !self.os[port] {
                continue;
            }
            if self.inbox[port].len() >= INBOX_LIMIT {
                self.counters.backlog += 1;
                self.stats.rx_dropped += 1;
                continue;
            }
            self.inbox[port].push_back(frame.to_vec());
            self.stats.rx += 1;
        }
    }

    fn handle_arp(&mut self, frame: &[u8], now: Instant) {
        let Some(arp) = Arp::parse(frame) else {
            self.counters.runt += 1;
            self.stats.rx_dropped += 1;
            return;
        };
        self.counters.arp_received += 1;
        if let Some(mine) = self.port_of_ip(arp.spa) {
            let ip = Ipv4Addr::from(arp.spa);
            let (theirs, ours) = (mac_str(&arp.sha), mac_str(&self.ports[mine].mac));
            self.warn_once("conflict", || {
                format!(
                    "{theirs} claims {ip}, which is {ours}'s: an address conflict on the segment"
                )
            });
            return;
        }
        let released = match self.port_of_ip(arp.tpa) {
            Some(port) => {
                let released = self.neighbors.learn(arp.spa, arp.sha, now);
                if arp.op == REQUEST && !self.os[port] {
                    self.neighbors.count_reply();
                    self.transmit_arp(arp.reply(self.ports[port]));
                }
                released
            }
            None if arp.gratuitous() => self.neighbors.learn(arp.spa, arp.sha, now),
            None => self.neighbors.refresh(arp.spa, arp.sha, now),
        };
        for f in released {
            self.transmit_to(f, arp.sha);
        }
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_str(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Uplink for EthUplink {
    fn send(&mut self, frame: &[u8]) -> bool {
        if frame.first_chunk::<6>() != Some(&BROADCAST) || !crate::fabric::route::is_roce(frame) {
            // A frame the function's operating system addressed (§15.3): as it is.
            return self.transmit(frame.to_vec());
        }
        let addrs = frame
            .get(12..ETH_HEADER_LEN + IPV4_HEADER_LEN)
            .filter(|h| h[..2] == ETHERTYPE_IPV4.to_be_bytes());
        let Some(h) = addrs else {
            self.stats.tx_dropped += 1;
            self.warn_once("not ipv4", || {
                "a frame for the network is not IPv4: dropped".into()
            });
            return false;
        };
        let src: [u8; 4] = h[14..18].try_into().expect("4 bytes");
        let dst: [u8; 4] = h[18..22].try_into().expect("4 bytes");
        let Some(port) = self.port_of_ip(src) else {
            self.stats.tx_dropped += 1;
            self.warn_once("source", || {
                format!(
                    "a frame from {}, no function's address: dropped",
                    Ipv4Addr::from(src)
                )
            });
            return false;
        };
        let d = Ipv4Addr::from(dst);
        if d.is_unspecified() || d.is_broadcast() || d.is_multicast() {
            self.stats.tx_dropped += 1;
            self.warn_once("destination", || {
                format!("a frame to {d}, which is not a unicast address: dropped")
            });
            return false;
        }
        let asker = self.ports[port];
        let mut frame = frame.to_vec();
        frame[6..12].copy_from_slice(&asker.mac);
        match self.neighbors.route(asker, dst, frame, Instant::now()) {
            Route::Send(frame, mac, confirm) => {
                let sent = self.transmit_to(frame, mac);
                if let Some(arp) = confirm {
                    self.transmit_arp(arp);
                }
                sent
            }
            Route::WaitAndAsk(arp) => {
                self.transmit_arp(arp);
                true
            }
            Route::Wait => true,
            Route::Dropped => {
                self.stats.tx_dropped += 1;
                false
            }
        }
    }

    fn poll(&mut self, now: Instant) -> usize {
        self.link.poll(now);
        let mut read = 0;
        let start = Instant::now();
        while read < READ_BUDGET && !crate::net::read_time_up(start, read) {
            // Each frame is received into a buffer of its own, which the port keeps.
            let mut frame = Vec::new();
            match self.link.recv(&mut frame) {
                Ok(true) => {
                    read += 1;
                    self.handle(frame, now);
                }
                Ok(false) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.warn_once("receive", || format!("receive failed: {e}"));
                    break;
                }
            }
        }
        for arp in self.neighbors.tick(now) {
            self.transmit_arp(arp);
        }
        read
    }

    fn next_deadline(&self) -> Option<Instant> {
        match (self.link.next_deadline(), self.neighbors.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn follows_addresses(&self) -> bool {
        true
    }

    fn set_endpoint(&mut self, port: usize, endpoint: Endpoint) {
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        *p = endpoint;
        self.neighbors.forget(endpoint.ip);
        // A gratuitous ARP: neighbors that cached the address learn its new MAC.
        self.transmit_arp(Arp::request(endpoint, endpoint.ip));
    }

    fn set_os_receives(&mut self, port: usize, on: bool) {
        if let Some(os) = self.os.get_mut(port) {
            *os = on;
        }
    }

    fn capture_wire(&mut self) -> bool {
        self.capture.get_or_insert_with(Vec::new);
        true
    }

    fn captured(&mut self, out: &mut Vec<Vec<u8>>) {
        if let Some(c) = &mut self.capture {
            out.append(c);
        }
    }

    fn report(&self) -> String {
        let a = self.neighbors.counters();
        format!(
            "{} ({}); {}; arp: requests sent {} replies sent {} frames unresolved {} \
             queue full {}",
            self.stats(),
            self.link.describe(),
            received_report(&self.counters),
            a.requests,
            a.replies,
            a.unresolved,
            a.queue_full
        )
    }

    fn receive(
        &mut self,
        port: usize,
        max: usize,
        out: &mut Vec<Vec<u8>>,
        _spare: &mut Vec<Vec<u8>>,
    ) -> usize {
        let Some(inbox) = self.inbox.get_mut(port) else {
            return 0;
        };
        let n = max.min(inbox.len());
        out.extend(inbox.drain(..n));
        n
    }

    fn fds(&self) -> Vec<RawFd> {
        vec![self.link.fd()]
    }

    fn stats(&self) -> UplinkStats {
        UplinkStats {
            rx_kernel_dropped: self.link.kernel_drops(),
            ..self.stats
        }
    }

    fn port_stats(&self) -> PortStats {
        let a = self.neighbors.counters();
        let mut p = crate::net::port_stats(
            PORT_ETH,
            &self.stats(),
            PortStats {
                arp_unresolved: a.unresolved + a.queue_full,
                ..self.counters
            },
        );
        // Frames whose ARP went unanswered leave the queue of their address without a
        // send having been tried; the other drops are in the stats already.
        p.tx_dropped += a.unresolved;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::arp::REPLY;
    use crate::roce::build;
    use crate::roce::build::Addressing;
    use crate::roce::hdr::{Bth, Headers};
    use crate::roce::opcode;
    use crate::roce::parse;
    use std::sync::{Arc, Mutex};

    /// Frames in both directions, shared with the test.
    #[derive(Default, Clone)]
    struct Wire {
        to_port: Arc<Mutex<VecDeque<Vec<u8>>>>,
        from_port: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Link for Wire {
        fn fd(&self) -> RawFd {
            -1
        }
        fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
            self.from_port.lock().unwrap().push(frame.to_vec());
            Ok(())
        }
        fn recv(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
            match self.to_port.lock().unwrap().pop_front() {
                Some(f) => {
                    *out = f;
                    Ok(true)
                }
                None => Ok(false),
            }
        }
        fn describe(&self) -> String {
            "test wire".into()
        }
    }

    const VF0: Endpoint = Endpoint {
        mac: [0x02, 0x52, 10, 82, 0, 2],
        ip: [10, 82, 0, 2],
    };
    const PF: Endpoint = Endpoint {
        mac: [0x02, 0x52, 10, 82, 0, 1],
        ip: [10, 82, 0, 1],
    };
    const GUEST: Endpoint = Endpoint {
        mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
        ip: [10, 82, 1, 5],
    };

    fn port() -> (EthUplink, Wire) {
        let wire = Wire::default();
        let mut u = EthUplink::with_link(Box::new(wire.clone()), &[PF, VF0]);
        u.capture_wire();
        (u, wire)
    }

    /// A RoCEv2 SEND ONLY frame from `from` to `to`, as Linux rxe builds it: IP ID not 0,
    /// DF, TTL 64, a real UDP checksum, a per-QP source port.
    fn rxe_frame(from: Endpoint, to: Endpoint, payload: &[u8]) -> Vec<u8> {
        let addr = Addressing {
            src_mac: from.mac,
            dst_mac: to.mac,
            src_ip: from.ip,
            dst_ip: to.ip,
            src_port: 0xC123,
            ttl: 64,
            tos: 0,
            ip_id: 0x4d2e,
        };
        let hdrs = Headers {
            bth: Bth::new(opcode::RC_SEND_ONLY, 0x11, 7),
            ..Headers::default()
        };
        let mut f = Vec::new();
        build::build(&addr, &hdrs, payload, &mut f).unwrap();
        build::set_udp_checksum(&mut f);
        f
    }

    /// Recomputes the IPv4 header checksum after a test changed the header.
    fn fix_checksum(mut f: Vec<u8>) -> Vec<u8> {
        f[24..26].copy_from_slice(&[0, 0]);
        let c = !ones_complement_sum(0, &f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn arrive(u: &mut EthUplink, wire: &Wire, frames: Vec<Vec<u8>>) -> usize {
        wire.to_port.lock().unwrap().extend(frames);
        u.poll(Instant::now())
    }

    #[test]
    fn answers_arp_for_its_functions_only() {
        let (mut u, wire) = port();
        let for_vf0 = Arp::request(GUEST, VF0.ip).frame();
        let for_other = Arp::request(GUEST, [10, 82, 0, 9]).frame();
        assert_eq!(arrive(&mut u, &wire, vec![for_vf0, for_other]), 2);
        let sent = wire.from_port.lock().unwrap().clone();
        assert_eq!(sent.len(), 1, "one reply");
        let reply = Arp::parse(&sent[0]).unwrap();
        assert_eq!(
            (reply.op, reply.sha, reply.spa, reply.tha, reply.tpa),
            (REPLY, VF0.mac, VF0.ip, GUEST.mac, GUEST.ip)
        );
        assert_eq!(sent[0][..6], GUEST.mac);
        assert_eq!(u.port_stats().arp_received, 2);
        // The request taught it the guest's MAC: a frame to the guest goes right out.
        let f = rxe_frame(
            VF0,
            Endpoint {
                mac: BROADCAST,
                ..GUEST
            },
            b"x",
        );
        assert!(u.send(&f));
        let sent = wire.from_port.lock().unwrap().clone();
        assert_eq!(sent[1][..6], GUEST.mac);
        assert_eq!(sent[1][6..], f[6..]);
        // The capture saw both requests, the reply and the frame.
        let mut captured = Vec::new();
        u.captured(&mut captured);
        assert_eq!(captured.len(), 4);
    }

    #[test]
    fn frames_wait_for_arp_and_go_out_with_the_resolved_mac_padded() {
        let (mut u, wire) = port();
        // The smallest RoCEv2 frame (58 bytes), to a MAC the function does not know.
        let f = rxe_frame(
            PF,
            Endpoint {
                mac: BROADCAST,
                ..GUEST
            },
            b"",
        );
        assert_eq!(f.len(), 58);
        assert!(u.send(&f));
        let request = Arp::parse(&wire.from_port.lock().unwrap()[0]).unwrap();
        assert_eq!(request, Arp::request(PF, GUEST.ip));
        let reply = request.reply(GUEST).frame();
        arrive(&mut u, &wire, vec![reply]);
        let sent = wire.from_port.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[1].len(), ETH_MIN_FRAME);
        assert_eq!(sent[1][..6], GUEST.mac);
        assert_eq!(sent[1][6..58], f[6..]);
        assert_eq!(u.stats().tx, 2);
    }

    /// A peer that never stops sending, each frame a little slower than the last was
    /// read: a loaded host whose rnicd reads more slowly than its peer retransmits.
    struct Endless {
        frame: Vec<u8>,
    }

    impl Link for Endless {
        fn fd(&self) -> RawFd {
            -1
        }
        fn send(&mut self, _frame: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
        fn recv(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
            std::thread::sleep(std::time::Duration::from_micros(100));
            out.clone_from(&self.frame);
            Ok(true)
        }
        fn describe(&self) -> String {
            "endless".into()
        }
    }

    #[test]
    fn a_pass_stops_reading_a_peer_that_never_stops_sending_and_delivers_what_it_read() {
        let frame = rxe_frame(GUEST, VF0, b"again");
        let mut u = EthUplink::with_link(Box::new(Endless { frame }), &[PF, VF0]);
        let start = Instant::now();
        let read = u.poll(Instant::now());
        let took = start.elapsed();
        // Reading the whole budget would take over 100 ms here.
        assert!(
            read > 0 && read < READ_BUDGET / 4,
            "read {read} frames in {took:?}"
        );
        let mut delivered = Vec::new();
        assert_eq!(
            u.receive(1, usize::MAX, &mut delivered, &mut Vec::new()),
            read
        );
        assert!(delivered
            .iter()
            .all(|f| f[..] == rxe_frame(GUEST, VF0, b"again")[..]));
    }

    #[test]
    fn invalid_and_foreign_frames_are_counted_and_valid_ones_delivered_trimmed() {
        let (mut u, wire) = port();
        let good = rxe_frame(GUEST, VF0, b"hello");
        parse::parse(&good).expect("an rxe frame parses");
        let mut padded = rxe_frame(GUEST, VF0, b"");
        padded.resize(ETH_MIN_FRAME, 0xAA);
        let mut bad_checksum = good.clone();
        bad_checksum[24] ^= 1;
        let mut bad_udp_len = good.clone();
        bad_udp_len[38..40].copy_from_slice(&4000u16.to_be_bytes());
        let mut bad_version = good.clone();
        bad_version[14] = 0x65;
        let mut short_ihl = good.clone();
        short_ihl[14] = 0x44;
        let mut bad_total = good.clone();
        bad_total[16..18].copy_from_slice(&3000u16.to_be_bytes());
        let bad_total = fix_checksum(bad_total);
        let mut fragment = good.clone();
        fragment[20] |= 0x20; // more fragments
        let fragment = fix_checksum(fragment);
        let mut other_mac = good.clone();
        other_mac[5] = 0x77;
        let mut ipv6 = good.clone();
        ipv6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let mut looped = good.clone();
        looped[6..12].copy_from_slice(&PF.mac);
        let frames = vec![
            good.clone(),
            padded,
            bad_checksum,
            bad_udp_len,
            bad_version,
            short_ihl,
            bad_total,
            fragment,
            other_mac,
            ipv6,
            looped,
            vec![1, 2, 3],
        ];
        let n = frames.len();
        let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
        assert_eq!(arrive(&mut u, &wire, frames), n);
        let c = u.port_stats();
        assert_eq!(
            (c.ip_checksum, c.udp_length, c.ip_version, c.runt),
            (1, 1, 1, 1)
        );
        assert_eq!(
            (c.ip_header_length, c.ip_total_length, c.ip_fragment),
            (1, 1, 1)
        );
        assert_eq!((c.not_for_us, c.other_protocol, c.looped), (1, 1, 1));
        // Every frame read is in one of the port counters' outcomes.
        assert_eq!(
            (c.kind, c.rx_frames, c.rx_delivered),
            (PORT_ETH, n as u64, 2)
        );
        assert_eq!((c.rx_dropped, u.stats().rx_dropped), (7, 7));
        assert_eq!(c.rx_bytes, bytes);
        let mut out = Vec::new();
        assert_eq!(u.receive(1, 16, &mut out, &mut Vec::new()), 2);
        assert_eq!(out[0], good);
        assert_eq!(out[1].len(), 58, "padding cut");
        parse::parse(&out[1]).expect("trimmed frame parses");
        assert_eq!(u.receive(0, 16, &mut out, &mut Vec::new()), 0);
    }

    #[test]
    fn a_function_that_changes_address_is_announced_and_answers_for_the_new_one() {
        let (mut u, wire) = port();
        let moved = Endpoint {
            mac: [0x02, 0, 0, 0, 0, 0x99],
            ip: [10, 82, 7, 7],
        };
        u.set_endpoint(1, moved);
        let announce = Arp::parse(&wire.from_port.lock().unwrap()[0]).unwrap();
        assert!(announce.gratuitous());
        assert_eq!((announce.sha, announce.spa), (moved.mac, moved.ip));
        arrive(&mut u, &wire, vec![Arp::request(GUEST, VF0.ip).frame()]);
        assert_eq!(
            wire.from_port.lock().unwrap().len(),
            1,
            "old address: no reply"
        );
        arrive(&mut u, &wire, vec![Arp::request(GUEST, moved.ip).frame()]);
        let reply = Arp::parse(&wire.from_port.lock().unwrap()[1]).unwrap();
        assert_eq!((reply.sha, reply.spa), (moved.mac, moved.ip));
    }
}
