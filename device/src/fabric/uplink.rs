//! The switch's link to a real network (`--net`): what a network port ([`crate::net`]'s
//! UDP and Ethernet uplinks) does for the switch, and what it counted
//! (docs/hardware-interface.md §7.13, §7.16).

use std::os::fd::RawFd;
use std::time::Instant;

use super::frame::Endpoint;

/// What an uplink did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UplinkStats {
    /// Frames sent to the network.
    pub tx: u64,
    /// Frames for the network that could not be sent (full buffers, no route, ...).
    pub tx_dropped: u64,
    /// Frames received from the network and delivered to a port.
    pub rx: u64,
    /// What arrived from the network and could not be delivered (a truncated datagram);
    /// malformed packets are delivered, and dropped by the functions' receive checks.
    pub rx_dropped: u64,
    /// Bytes of the frames of `tx`.
    pub tx_bytes: u64,
    /// Bytes of every frame read off the network, delivered or not.
    pub rx_bytes: u64,
    /// Frames the host's kernel dropped before rnicd could read them (its socket buffer
    /// was full), as far as the kernel reports them.
    pub rx_kernel_dropped: u64,
}

impl std::fmt::Display for UplinkStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tx {} ({} bytes, dropped {}) rx {} ({} bytes, dropped {}, by the kernel {})",
            self.tx,
            self.tx_bytes,
            self.tx_dropped,
            self.rx,
            self.rx_bytes,
            self.rx_dropped,
            self.rx_kernel_dropped
        )
    }
}

/// The switch's link to a real network, for destinations that are no port of its own.
pub trait Uplink: Send {
    /// Sends `frame` (a whole Ethernet/IPv4/UDP/RoCEv2 frame) towards its destination IP,
    /// now or at the next [`Uplink::flush`]. Returns whether it was taken; a frame that
    /// was not, or that could not go out when flushed, is counted by the uplink.
    fn send(&mut self, frame: &[u8]) -> bool;
    /// Sends what [`Uplink::send`] kept to send together; the engine calls it at the end
    /// of every pass.
    fn flush(&mut self) {}
    /// Appends to `out` up to `max` frames that arrived for switch port `port`, built in
    /// buffers taken from `spare` where it needs new ones (buffers of frames delivered
    /// before); returns how many arrivals it read (dropped ones included), so 0 means
    /// none waited.
    fn receive(
        &mut self,
        port: usize,
        max: usize,
        out: &mut Vec<Vec<u8>>,
        spare: &mut Vec<Vec<u8>>,
    ) -> usize;
    /// The descriptors to sleep on, per switch port: readable when something arrived.
    fn fds(&self) -> Vec<RawFd>;
    /// What it did so far.
    fn stats(&self) -> UplinkStats;
    /// Its counters as the PF reads them (`GET_PORT_STATS`).
    fn port_stats(&self) -> rnic_abi::admin::PortStats;
    /// Does the uplink's own work at `now`, once per engine pass before the `receive`
    /// calls: reading its wire into the ports' queues, answering and timing out what it
    /// must. Returns how many frames it read.
    fn poll(&mut self, _now: Instant) -> usize {
        0
    }
    /// When [`Uplink::poll`] must run next though no descriptor became readable.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Whether it follows changes of its ports' addresses ([`Uplink::set_endpoint`]); an
    /// uplink whose sockets are bound to the addresses does not.
    fn follows_addresses(&self) -> bool {
        false
    }
    /// Port `port` has a new address (the PF's `SET_ADDRESS`).
    fn set_endpoint(&mut self, _port: usize, _endpoint: Endpoint) {}
    /// Port `port`'s operating system receives the frames for it that are not RoCEv2,
    /// ARP included, and answers ARP itself (`on`), or stops.
    fn set_os_receives(&mut self, _port: usize, _on: bool) {}
    /// Asks it to keep, for the capture, every frame it puts on and takes off its wire,
    /// as they are there (its own frames, such as ARP, included); `false` if it cannot,
    /// and the switch then captures the frames it hands over and takes.
    fn capture_wire(&mut self) -> bool {
        false
    }
    /// Moves the frames kept for the capture since last asked into `out`.
    fn captured(&mut self, _out: &mut Vec<Vec<u8>>) {}
    /// What it did, in words, for the log.
    fn report(&self) -> String {
        self.stats().to_string()
    }
}
