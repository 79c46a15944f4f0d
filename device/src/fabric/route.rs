//! Where a frame goes: the forwarding table of the switch's ports, which the engine's
//! threads keep copies of ([`super::switch::Switch::route`]), and [`Route::hop`], the one
//! decision between a port's inbox, the switch and the uplink
//! (docs/hardware-interface.md §7.12).

use std::collections::{HashMap, HashSet};

use super::frame::{AddrHash, Endpoint};
use crate::roce::hdr::ROCEV2_PORT;

/// Where a frame goes next: what [`Route::hop`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// Straight into the inbox of this port (a function of this rnicd).
    Inbox(usize),
    /// Into the switch first: it is for a port, but something watches the switch (the
    /// capture, the fault injector), which then hands it on.
    Switch,
    /// To the network: its destination IP is no port's (RoCEv2), or its destination MAC
    /// (any other frame).
    Uplink,
    /// To every port but the sender's, and to the network: a broadcast or multicast
    /// frame (§15.1); through the switch, which knows the sender.
    Flood,
    /// To every port, the sender's too, and to the network: a RoCEv2 frame for a
    /// multicast group, which any function's QPs may have joined (§14.15).
    Multicast,
    /// Nowhere (counted unroutable): an address of a port under a MAC no port has, or no
    /// IPv4 destination at all.
    Nowhere,
}

/// Which port a frame goes to: by steering entry (QPs that migrated away from the
/// function whose address they keep), else by destination MAC; and which destinations
/// are the ports' own (the rest are the network's).
#[derive(Debug, Clone, Default)]
pub struct Route {
    by_mac: HashMap<[u8; 6], usize, AddrHash>,
    /// The ports' IPv4 addresses.
    ips: HashSet<[u8; 4], AddrHash>,
    /// (destination IPv4, destination QPN) to port.
    steering: HashMap<([u8; 4], u32), usize>,
}

impl Route {
    /// The table of `ports`, in port order, with no steering.
    pub fn new(ports: &[Endpoint]) -> Self {
        Self {
            by_mac: ports.iter().enumerate().map(|(i, p)| (p.mac, i)).collect(),
            ips: ports.iter().map(|p| p.ip).collect(),
            steering: HashMap::new(),
        }
    }

    /// Where `frame` goes from the port that sent it, when something watches the switch
    /// (`watched`) or not: the one place that decides between an inbox of this engine,
    /// the switch and the uplink. The engine's threads ask it for every frame a function
    /// sends, and the switch for every frame it forwards (with `watched` false: it is
    /// the watcher).
    pub fn hop(&self, frame: &[u8], watched: bool) -> Hop {
        if let Some(port) = self.port(frame) {
            return if watched {
                Hop::Switch
            } else {
                Hop::Inbox(port)
            };
        }
        match roce_destination(frame) {
            Some((ip, _)) if ip[0] & 0xf0 == 0xe0 => Hop::Multicast,
            Some((ip, _)) if !self.ips.contains(&ip) => Hop::Uplink,
            Some(_) => Hop::Nowhere,
            // Another frame: to every port if it is broadcast or multicast, else, its MAC
            // being no port's, the network's.
            None if frame.first().is_some_and(|b| b & 1 != 0) => Hop::Flood,
            None if frame.len() >= 14 => Hop::Uplink,
            None => Hop::Nowhere,
        }
    }

    /// The port `frame` goes to, if it is one of the switch's.
    pub fn port(&self, frame: &[u8]) -> Option<usize> {
        self.steered(frame).or_else(|| {
            let dst: [u8; 6] = frame.get(..6)?.try_into().ok()?;
            self.by_mac.get(&dst).copied()
        })
    }

    /// The port a steering entry sends `frame` to, if one does.
    pub fn steered(&self, frame: &[u8]) -> Option<usize> {
        if self.steering.is_empty() {
            return None;
        }
        self.steering.get(&roce_destination(frame)?).copied()
    }

    /// Port `port`'s address changes from `old` to `new`.
    pub fn set_endpoint(&mut self, port: usize, old: Endpoint, new: Endpoint) {
        self.by_mac.remove(&old.mac);
        self.by_mac.insert(new.mac, port);
        self.ips.remove(&old.ip);
        self.ips.insert(new.ip);
    }

    /// `ip` is a port's too (an address of its GID table): a RoCEv2 frame for it does
    /// not go to the network.
    pub fn add_ip(&mut self, ip: [u8; 4]) {
        self.ips.insert(ip);
    }

    /// `ip` is no port's any more.
    pub fn remove_ip(&mut self, ip: [u8; 4]) {
        self.ips.remove(&ip);
    }

    /// Frames for QP `qpn` at `ip` go to `port` from now on; `None` ends the steering.
    pub fn steer(&mut self, ip: [u8; 4], qpn: u32, port: Option<usize>) {
        match port {
            Some(p) => self.steering.insert((ip, qpn), p),
            None => self.steering.remove(&(ip, qpn)),
        };
    }

    /// Whether any steering entry exists.
    pub fn steers(&self) -> bool {
        !self.steering.is_empty()
    }
}

/// Whether `frame` is RoCEv2: Ethernet, IPv4, UDP to port 4791. Such frames are the
/// RDMA engine's; every other frame is the Ethernet queues' (§15.1).
/// A frame too short to hold a BTH is RoCEv2 still: the RDMA engine counts it, by
/// reason, as a malformed packet.
pub fn is_roce(frame: &[u8]) -> bool {
    const ETH: usize = 14;
    let Some(&vihl) = frame.get(ETH) else {
        return false;
    };
    let udp = ETH + usize::from(vihl & 0x0f) * 4;
    frame.get(12..14) == Some(&[0x08, 0x00])
        && frame.get(ETH + 9) == Some(&17)
        && vihl & 0x0f >= 5
        && frame.get(udp + 2..udp + 4) == Some(&ROCEV2_PORT.to_be_bytes())
}

/// The destination IPv4 address and QPN of a RoCEv2 frame (Ethernet, IPv4 with any
/// options, UDP to port 4791, BTH), or `None` for anything else.
pub fn roce_destination(frame: &[u8]) -> Option<([u8; 4], u32)> {
    const ETH: usize = 14;
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ihl = usize::from(frame.get(ETH)? & 0x0f) * 4;
    if *frame.get(ETH + 9)? != 17 || ihl < 20 {
        return None;
    }
    let udp = ETH + ihl;
    if frame.get(udp + 2..udp + 4)? != ROCEV2_PORT.to_be_bytes() {
        return None;
    }
    let ip: [u8; 4] = frame.get(ETH + 16..ETH + 20)?.try_into().ok()?;
    let bth = udp + 8;
    let q = frame.get(bth + 5..bth + 8)?;
    Some((ip, u32::from_be_bytes([0, q[0], q[1], q[2]])))
}
