//! The device's internal switch (docs/hardware-interface.md §7.12): what the engine's
//! threads share of the fabric, behind one lock. A frame comes here when something
//! watches ([`super::route::Route::hop`]): the capture, the fault injector
//! ([`FaultInjector`], §7.14), which see it sealed, or the [`Uplink`] to a network (§7.13),
//! for a destination that is no port's. Frames that arrive from the uplink go to their
//! port's inbox ([`Switch::poll_uplink`]). What leaves the process, on the network or in
//! a capture, is byte for byte the frame a function built, its ICRC computed.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use super::faults::{FaultCounters, FaultInjector};
use super::frame::{segment, AddrHash, AddressTable, Endpoint, Frame, MAX_SPARE};
use super::inbox::Inboxes;
use super::route::{roce_destination, Hop, Route};
use super::uplink::{Uplink, UplinkStats};
use crate::pcap::PcapWriter;

/// An engine thread with fewer spare frame buffers than this takes some from the
/// switch's ([`Switch::trade_spare`])...
const SPARE_LOW: usize = MAX_SPARE / 8;
/// ...and one with more gives its surplus.
const SPARE_HIGH: usize = MAX_SPARE / 2;

/// Writes `frame` to the capture, if there is one; a failing capture stops.
fn capture(pcap: &mut Option<PcapWriter<std::io::BufWriter<std::fs::File>>>, frame: &[u8]) {
    if let Some(p) = pcap {
        if let Err(e) = p.write_frame(frame) {
            log::warn!("pcap write failed, capture stopped: {e}");
            *pcap = None;
        }
    }
}

/// Frames in flight between functions.
pub struct Switch {
    ports: Vec<Endpoint>,
    /// Which port a frame goes to; the engine's threads keep copies ([`Switch::route`]).
    route: Route,
    by_ip: AddressTable,
    /// Each port's addresses beyond its own: those its driver set in its GID table.
    gid_addresses: Vec<Vec<[u8; 4]>>,
    /// The ports' inboxes, shared with the engine's threads ([`Switch::inboxes`]).
    inboxes: Arc<Inboxes>,
    pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    /// Whether the switch was made with a capture (which may have stopped since).
    captures: bool,
    /// Frames with no port to go to.
    pub unroutable: u64,
    /// Faults to inject into every frame sent (`--net-faults`).
    faults: Option<FaultInjector>,
    /// Where frames for other addresses go (`--net`).
    uplink: Option<Box<dyn Uplink>>,
    /// Whether the uplink captures what crosses its wire itself.
    uplink_captures: bool,
    /// Buffers of delivered frames, shared by all ports: one function's received frames
    /// become another's next frames (see `rdma::wire::Wire::spare`).
    spare: Vec<Vec<u8>>,
    /// The port whose frames [`Switch::send_from`] is forwarding, while it counts
    /// traffic.
    sender: Option<usize>,
    /// Whether [`Switch::send_from`] counts traffic.
    counts_traffic: bool,
    /// Packets forwarded from one port to another since [`Switch::take_traffic`]: what
    /// the engine's balancer keeps together.
    traffic: HashMap<(usize, usize), u64, AddrHash>,
    /// Ports whose inbox was empty and received a frame, since [`Switch::take_fresh`]:
    /// the engine wakes the threads that serve them.
    fresh: Vec<usize>,
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch")
            .field("ports", &self.ports)
            .field("unroutable", &self.unroutable)
            .field("uplink", &self.uplink.as_ref().map(|u| u.stats()))
            .finish_non_exhaustive()
    }
}

impl Switch {
    /// A switch with one port per function, in function order.
    pub fn new(
        ports: Vec<Endpoint>,
        pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    ) -> Self {
        let route = Route::new(&ports);
        let by_ip = ports.iter().map(|p| (p.ip, p.mac)).collect();
        let inboxes = Arc::new(Inboxes::new(ports.len()));
        Self {
            gid_addresses: vec![Vec::new(); ports.len()],
            ports,
            route,
            by_ip,
            inboxes,
            captures: pcap.is_some(),
            pcap,
            unroutable: 0,
            faults: None,
            uplink: None,
            uplink_captures: false,
            spare: Vec::new(),
            sender: None,
            counts_traffic: false,
            traffic: HashMap::default(),
            fresh: Vec::new(),
        }
    }

    /// Puts `frame` into port `port`'s inbox, noting the port if its inbox was empty.
    fn deliver(&mut self, port: usize, frame: Frame) {
        if let Some(from) = self.sender {
            *self.traffic.entry((from, port)).or_default() += frame.packets();
        }
        if self.inboxes.push(port, frame) {
            self.fresh.push(port);
        }
    }

    /// The ports' inboxes, which the engine's threads fill directly when nothing
    /// watches the switch ([`Switch::takes_trains`]) and empty themselves.
    pub fn inboxes(&self) -> Arc<Inboxes> {
        self.inboxes.clone()
    }

    /// A copy of the forwarding table, for a thread that forwards without the switch.
    pub fn route(&self) -> Route {
        self.route.clone()
    }

    /// The ports that received a frame into an empty inbox since last asked.
    pub fn take_fresh(&mut self, out: &mut Vec<usize>) {
        out.append(&mut self.fresh);
    }

    /// The packets forwarded between ports since last asked: (from, to, packets).
    pub fn take_traffic(&mut self) -> Vec<(usize, usize, u64)> {
        self.traffic.drain().map(|((a, b), p)| (a, b, p)).collect()
    }

    /// Sends frames for addresses that are no port of this switch to `uplink`, and takes
    /// frames from it in [`Switch::poll_uplink`].
    pub fn set_uplink(&mut self, mut uplink: Box<dyn Uplink>) {
        self.uplink_captures = self.pcap.is_some() && uplink.capture_wire();
        self.uplink = Some(uplink);
    }

    /// Writes what the uplink captured of its wire since last asked.
    fn capture_uplink(&mut self) {
        if !self.uplink_captures {
            return;
        }
        let mut frames = Vec::new();
        if let Some(u) = &mut self.uplink {
            u.captured(&mut frames);
        }
        for f in &frames {
            capture(&mut self.pcap, f);
        }
    }

    /// Whether the uplink follows address changes of the ports (see
    /// [`Uplink::follows_addresses`]); true without an uplink.
    pub fn uplink_follows_addresses(&self) -> bool {
        self.uplink.as_ref().is_none_or(|u| u.follows_addresses())
    }

    /// What the uplink did, in words, if there is one.
    pub fn uplink_report(&self) -> Option<String> {
        self.uplink.as_ref().map(|u| u.report())
    }

    /// The counters of the device's network port (all 0, kind `PORT_NONE`, without one).
    pub fn port_stats(&self) -> rnic_abi::admin::PortStats {
        self.uplink
            .as_ref()
            .map(|u| u.port_stats())
            .unwrap_or_default()
    }

    /// The uplink's descriptors to sleep on (none without an uplink).
    pub fn uplink_fds(&self) -> Vec<RawFd> {
        self.uplink.as_ref().map(|u| u.fds()).unwrap_or_default()
    }

    /// What the uplink did, if there is one.
    pub fn uplink_stats(&self) -> Option<UplinkStats> {
        self.uplink.as_ref().map(|u| u.stats())
    }

    /// Moves what arrived from the uplink, up to `max` per port, into the ports' inboxes
    /// (capturing each frame); returns how many arrivals were read.
    pub fn poll_uplink(&mut self, max: usize) -> usize {
        let Some(uplink) = &mut self.uplink else {
            return 0;
        };
        let mut read = uplink.poll(Instant::now());
        let mut frames = Vec::new();
        for port in 0..self.inboxes.len() {
            if let Some(uplink) = &mut self.uplink {
                read += uplink.receive(port, max, &mut frames, &mut self.spare);
            }
            for frame in frames.drain(..) {
                if !self.uplink_captures {
                    capture(&mut self.pcap, &frame);
                }
                let to = self.route.steered(&frame).unwrap_or(port);
                self.deliver(to, Frame::sealed(frame));
            }
        }
        self.capture_uplink();
        read
    }

    /// Sends the frames for QP `qpn` at address `ip` to `port` from now on (`port` being
    /// the one whose address `ip` is ends the steering), and moves the frames for it
    /// already waiting at other ports there, in their order.
    pub fn steer(&mut self, ip: [u8; 4], qpn: u32, port: usize) {
        if port >= self.inboxes.len() {
            return;
        }
        let home = self.ports.get(port).is_some_and(|p| p.ip == ip);
        self.route.steer(ip, qpn, (!home).then_some(port));
        let theirs = |f: &Frame| roce_destination(&f.bytes) == Some((ip, qpn));
        if self.inboxes.move_to(port, theirs) {
            self.fresh.push(port);
        }
    }

    /// The address table functions use to address frames (their ARP, on this switch).
    pub fn neighbors(&self) -> AddressTable {
        self.by_ip.clone()
    }

    /// Gives port `index` a new address (the PF's `SET_ADDRESS`); frames for the old one
    /// no longer reach it. The caller keeps addresses unique.
    pub fn set_endpoint(&mut self, index: usize, endpoint: Endpoint) {
        let Some(old) = self.ports.get(index).copied() else {
            return;
        };
        self.route.set_endpoint(index, old, endpoint);
        self.by_ip.remove(&old.ip);
        self.by_ip.insert(endpoint.ip, endpoint.mac);
        for ip in &self.gid_addresses[index] {
            self.by_ip.insert(*ip, endpoint.mac);
        }
        self.ports[index] = endpoint;
        if let Some(u) = &mut self.uplink {
            u.set_endpoint(index, endpoint);
        }
        self.capture_uplink();
    }

    /// Port `index`'s addresses beyond its own are `addresses` from now on (those of its
    /// GID table, §6.13): frames for them go to it, and functions address them to its
    /// MAC. An address that is another port's stays that port's (a function checks this
    /// when its driver sets it; two setting one at once race, and the first wins).
    pub fn set_gid_addresses(&mut self, index: usize, addresses: &[[u8; 4]]) {
        let Some(port) = self.ports.get(index).copied() else {
            return;
        };
        for ip in std::mem::take(&mut self.gid_addresses[index]) {
            self.by_ip.remove(&ip);
            self.route.remove_ip(ip);
        }
        let mut mine = Vec::new();
        for &ip in addresses {
            if ip == port.ip {
                continue;
            }
            if self.by_ip.contains_key(&ip) {
                log::warn!(
                    "port {index}: {} is another port's address; not forwarded to it",
                    std::net::Ipv4Addr::from(ip)
                );
                continue;
            }
            self.by_ip.insert(ip, port.mac);
            self.route.add_ip(ip);
            mine.push(ip);
        }
        self.gid_addresses[index] = mine;
    }

    /// Port `port`'s operating system receives its frames, or stops (§15.5): the uplink
    /// answers ARP for the port only while it does not.
    pub fn set_os_receives(&mut self, port: usize, on: bool) {
        if let Some(u) = &mut self.uplink {
            u.set_os_receives(port, on);
        }
    }

    /// Writes the capture to `pcap` from now on (SIGHUP's reopening of `--pcap`, for log
    /// rotation): every frame written before went to the old writer, every frame after
    /// goes to this one, and the old one is closed. A capture that had stopped on a write
    /// error starts again. Without a capture from the start, nothing changes: the switch
    /// was not watching frames, and threads that forward past it do not look again.
    pub fn replace_capture(&mut self, pcap: PcapWriter<std::io::BufWriter<std::fs::File>>) -> bool {
        if !self.captures {
            return false;
        }
        self.pcap = Some(pcap);
        true
    }

    /// Makes every frame sent from now on go through `faults` first.
    pub fn set_faults(&mut self, faults: FaultInjector) {
        self.faults = Some(faults);
    }

    /// What the fault injector did, if there is one.
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        self.faults.as_ref().map(FaultInjector::counters)
    }

    /// Forwards `frame` to the port its destination MAC names, through the fault
    /// injector if there is one (which may drop, copy, corrupt or hold it: the frame is
    /// sealed first, so that the receiver's ICRC check sees what it did).
    /// A train goes whole only to a port of the switch, with nothing watching; anywhere
    /// else it goes as the frames of its packets.
    pub fn send(&mut self, mut frame: Frame) {
        if frame.train.is_some()
            && !matches!(self.route.hop(&frame.bytes, self.watched()), Hop::Inbox(_))
        {
            for packet in segment(frame, &mut self.spare) {
                self.send(packet);
            }
            return;
        }
        match &mut self.faults {
            Some(faults) => {
                frame.seal();
                for bytes in faults.apply(frame.bytes, Instant::now()) {
                    self.forward(Frame::sealed(bytes));
                }
            }
            None => self.forward(frame),
        }
    }

    /// [`Switch::send`] of a frame that port `from` sent: its packets count as traffic
    /// from `from` to where they go.
    pub fn send_from(&mut self, from: usize, frame: Frame) {
        self.sender = self.counts_traffic.then_some(from);
        self.send(frame);
        self.sender = None;
    }

    /// Makes [`Switch::send_from`] count the packets between ports (for
    /// [`Switch::take_traffic`]), or stop counting.
    pub fn count_traffic(&mut self, on: bool) {
        self.counts_traffic = on;
        if !on {
            self.traffic.clear();
        }
    }

    /// Delivers the frames the fault injector held (reordered or delayed) whose time has
    /// come.
    pub fn release_due(&mut self, now: Instant) {
        if let Some(faults) = &mut self.faults {
            for bytes in faults.due(now) {
                self.forward(Frame::sealed(bytes));
            }
        }
    }

    /// When the fault injector next releases a held frame: the engine must look then.
    pub fn next_deadline(&self) -> Option<Instant> {
        let faults = self.faults.as_ref().and_then(FaultInjector::next_deadline);
        let uplink = self.uplink.as_ref().and_then(|u| u.next_deadline());
        match (faults, uplink) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forwards `frame` to the port its destination MAC names or, if its destination IP
    /// is no port's, to the uplink.
    /// With an uplink that captures its own wire, frames for it are captured there, as
    /// they go out (with the destination MAC it resolved).
    fn forward(&mut self, mut frame: Frame) {
        let hop = self.route.hop(&frame.bytes, false);
        let local = matches!(hop, Hop::Inbox(_));
        if self.pcap.is_some() && (local || !self.uplink_captures) {
            frame.seal();
            capture(&mut self.pcap, &frame.bytes);
        }
        match (hop, &mut self.uplink) {
            (Hop::Inbox(port), _) => self.deliver(port, frame),
            (Hop::Flood, _) => {
                // Every port but the one whose MAC sent it (a frame held by the fault
                // injector comes back here without its sender).
                let src = frame.bytes.get(6..12).unwrap_or(&[]);
                let to: Vec<usize> = (0..self.inboxes.len())
                    .filter(|&p| self.ports.get(p).is_none_or(|e| e.mac[..] != *src))
                    .collect();
                for port in to {
                    self.deliver(port, frame.clone());
                }
                if let Some(uplink) = &mut self.uplink {
                    uplink.send(&frame.bytes);
                    self.capture_uplink();
                }
            }
            (Hop::Multicast, _) => {
                for port in 0..self.inboxes.len() {
                    self.deliver(port, frame.clone());
                }
                if let Some(uplink) = &mut self.uplink {
                    frame.seal();
                    uplink.send(&frame.bytes);
                    self.capture_uplink();
                }
            }
            (Hop::Uplink, Some(uplink)) => {
                frame.seal();
                uplink.send(&frame.bytes);
                self.capture_uplink();
                // The uplink copied what it needs: the buffer serves the next frame built.
                if self.spare.len() < MAX_SPARE {
                    self.spare.push(frame.bytes);
                }
            }
            _ => self.unroutable += 1,
        }
    }

    /// Whether functions may send trains ([`super::train`]): nothing but the ports sees
    /// frames (no capture, no fault injector), so a train needs cutting only when it
    /// goes to the uplink.
    pub fn takes_trains(&self) -> bool {
        !self.watched()
    }

    /// Whether something watches the frames between ports: the capture or the fault
    /// injector, which see every frame, so that no frame may go straight into an inbox.
    pub fn watched(&self) -> bool {
        self.pcap.is_some() || self.faults.is_some()
    }

    /// Takes the frames waiting for `port`, with held frames that fell due delivered first.
    pub fn take(&mut self, port: usize) -> VecDeque<Frame> {
        if self.faults.as_ref().is_some_and(|f| f.held() > 0) {
            self.release_due(Instant::now());
        }
        self.inboxes.take(port)
    }

    /// Evens out frame buffers between an engine thread's own (`mine`, which its
    /// functions build frames from and put received frames' buffers back into) and the
    /// switch's (which the uplink and cut trains use): a thread whose functions mostly
    /// receive gives its surplus to one whose functions mostly send, through here.
    pub fn trade_spare(&mut self, mine: &mut Vec<Vec<u8>>) {
        if mine.len() > SPARE_HIGH && self.spare.len() < MAX_SPARE {
            let give = (mine.len() - SPARE_HIGH).min(MAX_SPARE - self.spare.len());
            self.spare.extend(mine.drain(mine.len() - give..));
        } else if mine.len() < SPARE_LOW && !self.spare.is_empty() {
            let take = (SPARE_LOW - mine.len()).min(self.spare.len());
            mine.extend(self.spare.drain(self.spare.len() - take..));
        }
    }

    /// Whether a thread holding `n` spare frame buffers has a surplus or a shortage for
    /// [`Switch::trade_spare`] to even out.
    pub fn spare_uneven(n: usize) -> bool {
        !(SPARE_LOW..=SPARE_HIGH).contains(&n)
    }

    /// Whether frames may go to a network (`--net`).
    pub fn has_uplink(&self) -> bool {
        self.uplink.is_some()
    }

    /// Sends what the uplink kept to send together (see [`Uplink::flush`]).
    pub fn flush_uplink(&mut self) {
        if let Some(u) = &mut self.uplink {
            u.flush();
        }
    }

    /// Whether a frame waits for any of `ports`.
    pub fn waiting(&self, ports: &[usize]) -> bool {
        ports.iter().any(|&p| self.inboxes.is_waiting(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// An uplink that records what it is sent and delivers what the test queued.
    #[derive(Default)]
    struct Fake {
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
        arriving: Vec<(usize, Vec<u8>)>,
    }

    impl Uplink for Fake {
        fn send(&mut self, frame: &[u8]) -> bool {
            self.sent.lock().unwrap().push(frame.to_vec());
            true
        }
        fn receive(
            &mut self,
            port: usize,
            max: usize,
            out: &mut Vec<Vec<u8>>,
            _spare: &mut Vec<Vec<u8>>,
        ) -> usize {
            let mut n = 0;
            while n < max {
                let Some(i) = self.arriving.iter().position(|(p, _)| *p == port) else {
                    break;
                };
                out.push(self.arriving.remove(i).1);
                n += 1;
            }
            n
        }
        fn fds(&self) -> Vec<RawFd> {
            vec![]
        }
        fn stats(&self) -> UplinkStats {
            UplinkStats::default()
        }
        fn port_stats(&self) -> rnic_abi::admin::PortStats {
            rnic_abi::admin::PortStats::default()
        }
    }

    fn frame(dst_mac: [u8; 6], dst_ip: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst_mac);
        f[30..34].copy_from_slice(&dst_ip);
        f
    }

    /// A RoCEv2 frame (only the fields steering reads) to `dst_mac`/`dst_ip`, QP `qpn`.
    fn roce(dst_mac: [u8; 6], dst_ip: [u8; 4], qpn: u32, tag: u8) -> Vec<u8> {
        let mut f = frame(dst_mac, dst_ip);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        f[47..50].copy_from_slice(&qpn.to_be_bytes()[1..]);
        f[59] = tag;
        f
    }

    /// Ports 10.0.0.1 and 10.0.0.2.
    fn two_ports() -> [Endpoint; 2] {
        [1, 2].map(|n| Endpoint {
            mac: [2, 0, 0, 0, 0, n],
            ip: [10, 0, 0, n],
        })
    }

    #[test]
    fn frames_are_sealed_when_they_leave_the_process_and_not_before() {
        use crate::roce::build;
        use crate::roce::build::Addressing;
        use crate::roce::hdr::{Bth, Headers};
        use crate::roce::opcode;
        use crate::roce::parse;
        let [a, b] = two_ports();
        let unsealed_to = |to: Endpoint| {
            let addr = Addressing {
                src_mac: a.mac,
                dst_mac: to.mac,
                src_ip: a.ip,
                dst_ip: to.ip,
                src_port: 0xc000,
                ttl: 64,
                tos: 0,
                ip_id: 0,
            };
            let hdrs = Headers {
                bth: Bth::new(opcode::RC_SEND_ONLY, 0x11, 0),
                ..Headers::default()
            };
            let mut bytes = Vec::new();
            build::build_headers(&addr, &hdrs, 8, &mut bytes).unwrap();
            bytes.extend_from_slice(b"payload!");
            build::end_unsealed(&mut bytes, 8);
            Frame::unsealed(bytes)
        };
        let mut s = Switch::new(vec![a, b], None);
        let fake = Fake::default();
        let sent = fake.sent.clone();
        s.set_uplink(Box::new(fake));
        // To a port of the switch, with no capture and no faults: as it was sent.
        s.send(unsealed_to(b));
        let got = s.take(1).pop_front().unwrap();
        assert_eq!(got, unsealed_to(b));
        // To the network: sealed, and the ICRC checks.
        let far = Endpoint {
            mac: [2, 0, 0, 0, 0, 9],
            ip: [10, 9, 0, 1],
        };
        s.send(unsealed_to(far));
        let out = sent.lock().unwrap().pop().unwrap();
        assert_eq!(parse::parse(&out).unwrap().payload, b"payload!");
        // Through a fault injector (which may corrupt it): sealed before.
        let spec: crate::fabric::faults::FaultSpec = "loss=0,seed=1".parse().unwrap();
        s.set_faults(FaultInjector::new(spec));
        s.send(unsealed_to(b));
        let got = s.take(1).pop_front().unwrap();
        assert!(got.sealed);
        assert!(parse::parse(&got.bytes).is_ok());
    }

    #[test]
    fn steering_sends_one_qps_frames_to_another_port_and_moves_queued_ones() {
        let a = Endpoint {
            mac: [2, 0, 0, 0, 0, 1],
            ip: [10, 0, 0, 1],
        };
        let b = Endpoint {
            mac: [2, 0, 0, 0, 0, 2],
            ip: [10, 0, 0, 2],
        };
        let mut s = Switch::new(vec![a, b], None);
        assert_eq!(
            roce_destination(&roce(a.mac, a.ip, 0x11, 0)),
            Some((a.ip, 0x11))
        );
        assert_eq!(roce_destination(&frame(a.mac, a.ip)), None, "not RoCE");
        s.send(Frame::sealed(roce(a.mac, a.ip, 0x11, 1)));
        s.send(Frame::sealed(roce(a.mac, a.ip, 0x12, 2)));
        s.steer(a.ip, 0x11, 1);
        // The queued frame of QP 0x11 moved; the other QP's stayed.
        assert_eq!(
            s.take(1).iter().map(|f| f.bytes[59]).collect::<Vec<_>>(),
            [1]
        );
        s.send(Frame::sealed(roce(a.mac, a.ip, 0x11, 3)));
        s.send(Frame::sealed(roce(a.mac, a.ip, 0x12, 4)));
        assert_eq!(
            s.take(1).iter().map(|f| f.bytes[59]).collect::<Vec<_>>(),
            [3]
        );
        assert_eq!(
            s.take(0).iter().map(|f| f.bytes[59]).collect::<Vec<_>>(),
            [2, 4]
        );
        // Frames from the network are steered too.
        s.set_uplink(Box::new(Fake {
            arriving: vec![
                (0, roce(a.mac, a.ip, 0x11, 6)),
                (0, roce(a.mac, a.ip, 0x12, 7)),
            ],
            ..Fake::default()
        }));
        assert_eq!(s.poll_uplink(8), 2);
        assert_eq!(
            s.take(1).iter().map(|f| f.bytes[59]).collect::<Vec<_>>(),
            [6]
        );
        assert_eq!(
            s.take(0).iter().map(|f| f.bytes[59]).collect::<Vec<_>>(),
            [7]
        );
        // Steering back to the address's own port ends it.
        s.steer(a.ip, 0x11, 0);
        s.send(Frame::sealed(roce(a.mac, a.ip, 0x11, 5)));
        assert_eq!(
            s.take(0).iter().map(|f| f.bytes[59]).collect::<Vec<_>>(),
            [5]
        );
        assert!(!s.route.steers());
    }

    #[test]
    fn frames_for_other_addresses_go_to_the_uplink_and_arrivals_to_their_port() {
        let ports = two_ports().to_vec();
        let mut s = Switch::new(ports, None);
        // Without an uplink, an unknown destination is unroutable.
        s.send(Frame::sealed(roce([0xff; 6], [10, 9, 0, 1], 1, 0)));
        assert_eq!(s.unroutable, 1);
        let fake = Fake {
            arriving: vec![(1, vec![1]), (0, vec![2]), (1, vec![3])],
            ..Fake::default()
        };
        let sent = fake.sent.clone();
        s.set_uplink(Box::new(fake));
        s.send(Frame::sealed(frame([2, 0, 0, 0, 0, 2], [10, 0, 0, 2])));
        s.send(Frame::sealed(roce([0xff; 6], [10, 9, 0, 1], 1, 0)));
        // A local IP with an unknown MAC is not sent out.
        s.send(Frame::sealed(roce([0xff; 6], [10, 0, 0, 1], 1, 0)));
        assert_eq!(s.unroutable, 2);
        assert_eq!(sent.lock().unwrap().len(), 1);
        assert_eq!(sent.lock().unwrap()[0][30..34], [10, 9, 0, 1]);
        assert_eq!(s.take(1).len(), 1);
        assert_eq!(s.poll_uplink(1), 2, "one per port per pass");
        assert_eq!(s.take(0), VecDeque::from([Frame::sealed(vec![2])]));
        assert_eq!(s.take(1), VecDeque::from([Frame::sealed(vec![1])]));
        assert_eq!(s.poll_uplink(8), 1);
        assert_eq!(s.take(1), VecDeque::from([Frame::sealed(vec![3])]));
        assert_eq!(s.poll_uplink(8), 0);
    }

    #[test]
    fn a_broadcast_that_is_not_roce_reaches_every_other_port_and_the_network() {
        let ports = two_ports().to_vec();
        let mut s = Switch::new(ports, None);
        let fake = Fake::default();
        let sent = fake.sent.clone();
        s.set_uplink(Box::new(fake));
        let mut arp = vec![0u8; 60];
        arp[..6].copy_from_slice(&[0xff; 6]);
        arp[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        s.send_from(0, Frame::sealed(arp.clone()));
        assert_eq!(s.take(0).len(), 0, "not back to its sender");
        assert_eq!(s.take(1), VecDeque::from([Frame::sealed(arp.clone())]));
        assert_eq!(*sent.lock().unwrap(), [arp]);
        // A frame that is not RoCE, for a MAC no port has: the network's.
        let mut other = vec![0u8; 60];
        other[..6].copy_from_slice(&[0x52, 0x54, 0, 0, 0, 1]);
        s.send_from(1, Frame::sealed(other.clone()));
        assert_eq!(sent.lock().unwrap()[1], other);
        assert_eq!(s.unroutable, 0);
    }

    #[test]
    fn a_roce_frame_to_a_group_reaches_every_port_its_sender_too_and_the_network() {
        let mut s = Switch::new(two_ports().to_vec(), None);
        let fake = Fake::default();
        let sent = fake.sent.clone();
        s.set_uplink(Box::new(fake));
        let group = [239, 1, 2, 3];
        let f = roce(rnic_abi::mcast::mac_of(group), group, 0xFF_FFFF, 1);
        assert_eq!(s.route().hop(&f, false), Hop::Multicast);
        s.send_from(0, Frame::sealed(f.clone()));
        for port in [0, 1] {
            assert_eq!(s.take(port), VecDeque::from([Frame::sealed(f.clone())]));
        }
        assert_eq!(*sent.lock().unwrap(), [f]);
    }
}
