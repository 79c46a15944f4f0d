//! The device's internal switch: Ethernet frames between the functions of one rnicd.
//!
//! Functions talk to each other exactly as they would over a network: whole
//! Ethernet/IPv4/UDP/RoCEv2 frames, addressed by MAC, with the ICRC computed and checked.
//! The switch forwards by destination MAC and, when asked, writes every frame to a pcap.

use std::collections::{HashMap, VecDeque};

use crate::pcap::PcapWriter;

/// A function's address on the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Ethernet address.
    pub mac: [u8; 6],
    /// IPv4 address (the GID's last four bytes).
    pub ip: [u8; 4],
}

/// Frames in flight between functions.
pub struct Switch {
    ports: Vec<Endpoint>,
    by_mac: HashMap<[u8; 6], usize>,
    by_ip: HashMap<[u8; 4], [u8; 6]>,
    inbox: Vec<VecDeque<Vec<u8>>>,
    pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    /// Frames with no port to go to.
    pub unroutable: u64,
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch")
            .field("ports", &self.ports)
            .field("unroutable", &self.unroutable)
            .finish_non_exhaustive()
    }
}

impl Switch {
    /// A switch with one port per function, in function order.
    pub fn new(
        ports: Vec<Endpoint>,
        pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    ) -> Self {
        let by_mac = ports.iter().enumerate().map(|(i, p)| (p.mac, i)).collect();
        let by_ip = ports.iter().map(|p| (p.ip, p.mac)).collect();
        let inbox = ports.iter().map(|_| VecDeque::new()).collect();
        Self {
            ports,
            by_mac,
            by_ip,
            inbox,
            pcap,
            unroutable: 0,
        }
    }

    /// The address table functions use to address frames (their ARP, on this switch).
    pub fn neighbors(&self) -> HashMap<[u8; 4], [u8; 6]> {
        self.by_ip.clone()
    }

    /// Forwards `frame` to the port its destination MAC names.
    pub fn send(&mut self, frame: Vec<u8>) {
        if let Some(pcap) = &mut self.pcap {
            if let Err(e) = pcap.write_frame(&frame) {
                log::warn!("pcap write failed, capture stopped: {e}");
                self.pcap = None;
            }
        }
        let dst: Option<[u8; 6]> = frame.get(..6).and_then(|d| d.try_into().ok());
        match dst.and_then(|d| self.by_mac.get(&d)) {
            Some(&port) => self.inbox[port].push_back(frame),
            None => self.unroutable += 1,
        }
    }

    /// Takes the frames waiting for `port`.
    pub fn take(&mut self, port: usize) -> VecDeque<Vec<u8>> {
        self.inbox
            .get_mut(port)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether any frame waits anywhere.
    pub fn busy(&self) -> bool {
        self.inbox.iter().any(|q| !q.is_empty())
    }
}
