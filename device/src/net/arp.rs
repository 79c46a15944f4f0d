//! ARP (RFC 826) for the Ethernet port ([`crate::net::eth`]): the frames, and the
//! neighbor table that turns a destination IPv4 address into a MAC.
//!
//! The table caches answers for [`REACHABLE`]; past that an entry is still used for
//! [`STALE_GRACE`] while a fresh request confirms it (so a long transfer does not stall
//! every minute), then forgotten. Frames to an address not yet resolved wait, at most
//! [`QUEUE_PER_ADDRESS`] per address, while a request is broadcast up to [`TRIES`]
//! times, [`RETRY`] apart; if no reply comes they are dropped and counted (the RC
//! transport retransmits them later, which starts a new resolution).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::fabric::frame::Endpoint;
use crate::roce::hdr::{ETHERTYPE_IPV4, ETH_HEADER_LEN};

/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// The broadcast MAC.
pub const BROADCAST: [u8; 6] = [0xff; 6];
/// Ethernet's minimum frame length without the FCS: shorter frames are padded.
pub const ETH_MIN_FRAME: usize = 60;
/// ARP operation: request.
pub const REQUEST: u16 = 1;
/// ARP operation: reply.
pub const REPLY: u16 = 2;
/// Length of an ARP packet for IPv4 over Ethernet.
const ARP_LEN: usize = 28;

/// How long an answer is trusted.
pub const REACHABLE: Duration = Duration::from_secs(60);
/// How long a stale entry is still used while a request confirms it.
pub const STALE_GRACE: Duration = Duration::from_secs(5);
/// Time between requests for an address that has not answered.
pub const RETRY: Duration = Duration::from_millis(300);
/// Requests sent for an address before the frames waiting for it are dropped.
pub const TRIES: u32 = 3;
/// Frames that wait for one address at most; more are dropped.
pub const QUEUE_PER_ADDRESS: usize = 16;
/// Addresses being resolved at once at most (each holding a queue).
const MAX_PENDING: usize = 256;
/// Entries the cache keeps at most; past that the least recently confirmed goes.
const MAX_ENTRIES: usize = 4096;

/// An ARP packet for IPv4 over Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// [`REQUEST`] or [`REPLY`].
    pub op: u16,
    /// Sender MAC.
    pub sha: [u8; 6],
    /// Sender IPv4 address.
    pub spa: [u8; 4],
    /// Target MAC (zero in a request).
    pub tha: [u8; 6],
    /// Target IPv4 address.
    pub tpa: [u8; 4],
}

impl Arp {
    /// A request from `from` for the MAC of `ip`.
    pub fn request(from: Endpoint, ip: [u8; 4]) -> Self {
        Self {
            op: REQUEST,
            sha: from.mac,
            spa: from.ip,
            tha: [0; 6],
            tpa: ip,
        }
    }

    /// `me`'s reply to this request.
    pub fn reply(&self, me: Endpoint) -> Self {
        Self {
            op: REPLY,
            sha: me.mac,
            spa: me.ip,
            tha: self.sha,
            tpa: self.spa,
        }
    }

    /// Whether it announces its sender's own address (a gratuitous ARP).
    pub fn gratuitous(&self) -> bool {
        self.spa == self.tpa
    }

    /// Reads the ARP packet of an Ethernet frame: `None` unless it is ARP for IPv4 over
    /// Ethernet with a known operation.
    pub fn parse(frame: &[u8]) -> Option<Self> {
        if frame.get(12..14)? != ETHERTYPE_ARP.to_be_bytes() {
            return None;
        }
        let a = frame.get(ETH_HEADER_LEN..ETH_HEADER_LEN + ARP_LEN)?;
        let op = u16::from_be_bytes([a[6], a[7]]);
        if a[..6] != [0, 1, 0x08, 0x00, 6, 4] || !(op == REQUEST || op == REPLY) {
            return None;
        }
        let take = |at: usize| a[at..].iter().copied();
        let mut arp = Self {
            op,
            sha: [0; 6],
            spa: [0; 4],
            tha: [0; 6],
            tpa: [0; 4],
        };
        arp.sha.iter_mut().zip(take(8)).for_each(|(d, s)| *d = s);
        arp.spa.iter_mut().zip(take(14)).for_each(|(d, s)| *d = s);
        arp.tha.iter_mut().zip(take(18)).for_each(|(d, s)| *d = s);
        arp.tpa.iter_mut().zip(take(24)).for_each(|(d, s)| *d = s);
        Some(arp)
    }

    /// The Ethernet frame carrying it: to the broadcast MAC for a request, to the target
    /// for a reply; padded to [`ETH_MIN_FRAME`].
    pub fn frame(&self) -> Vec<u8> {
        let dst = if self.op == REQUEST {
            BROADCAST
        } else {
            self.tha
        };
        let mut f = Vec::with_capacity(ETH_MIN_FRAME);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&self.sha);
        f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        f.extend_from_slice(&[0, 1]); // hardware: Ethernet
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f.extend_from_slice(&[6, 4]);
        f.extend_from_slice(&self.op.to_be_bytes());
        f.extend_from_slice(&self.sha);
        f.extend_from_slice(&self.spa);
        f.extend_from_slice(&self.tha);
        f.extend_from_slice(&self.tpa);
        f.resize(ETH_MIN_FRAME, 0);
        f
    }
}

/// What the neighbor table counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ArpCounters {
    /// Requests sent.
    pub requests: u64,
    /// Replies sent.
    pub replies: u64,
    /// Frames dropped because their destination never answered.
    pub unresolved: u64,
    /// Frames dropped because too many already waited for their destination.
    pub queue_full: u64,
}

/// A cached answer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: [u8; 6],
    confirmed: Instant,
    /// When a request last asked to confirm it, once stale.
    probed: Option<Instant>,
}

/// An address being resolved.
#[derive(Debug)]
struct Pending {
    /// The function that asks (its MAC and IP go into the requests).
    asker: Endpoint,
    frames: VecDeque<Vec<u8>>,
    /// Requests sent so far.
    tries: u32,
    /// When the next request (or the giving up) is due.
    next: Instant,
}

/// What to do with a frame for an address.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// Send it (handed back) to this MAC, and, if there is one, this request to confirm
    /// the (stale) entry.
    Send(Vec<u8>, [u8; 6], Option<Arp>),
    /// It waits for the answer to this request, which must be sent now.
    WaitAndAsk(Arp),
    /// It waits for an answer already asked for.
    Wait,
    /// Too many frames wait for the address: dropped (counted).
    Dropped,
}

/// IPv4 addresses to MACs, with frames waiting for addresses being resolved.
#[derive(Debug, Default)]
pub struct Neighbors {
    entries: HashMap<[u8; 4], Entry>,
    pending: HashMap<[u8; 4], Pending>,
    counters: ArpCounters,
}

impl Neighbors {
    /// What the table counted.
    pub fn counters(&self) -> ArpCounters {
        self.counters
    }

    /// Counts a reply the port sent.
    pub fn count_reply(&mut self) {
        self.counters.replies += 1;
    }

    /// The cached MAC of `ip`, if it is fresh or in its grace period.
    pub fn lookup(&self, ip: [u8; 4], now: Instant) -> Option<[u8; 6]> {
        self.entries
            .get(&ip)
            .filter(|e| now.saturating_duration_since(e.confirmed) < REACHABLE + STALE_GRACE)
            .map(|e| e.mac)
    }

    /// Decides where `frame`, from function `asker` to `ip`, goes; a frame that must wait
    /// is kept here and handed back by [`Neighbors::learn`] once `ip` answers.
    pub fn route(&mut self, asker: Endpoint, ip: [u8; 4], frame: Vec<u8>, now: Instant) -> Route {
        if let Some(e) = self.entries.get_mut(&ip) {
            let age = now.saturating_duration_since(e.confirmed);
            if age < REACHABLE {
                return Route::Send(frame, e.mac, None);
            }
            if age < REACHABLE + STALE_GRACE {
                let due = e
                    .probed
                    .is_none_or(|p| now.saturating_duration_since(p) >= RETRY);
                if !due {
                    return Route::Send(frame, e.mac, None);
                }
                e.probed = Some(now);
                self.counters.requests += 1;
                return Route::Send(frame, e.mac, Some(Arp::request(asker, ip)));
            }
            self.entries.remove(&ip);
        }
        if let Some(p) = self.pending.get_mut(&ip) {
            if p.frames.len() >= QUEUE_PER_ADDRESS {
                self.counters.queue_full += 1;
                return Route::Dropped;
            }
            p.frames.push_back(frame);
            return Route::Wait;
        }
        if self.pending.len() >= MAX_PENDING {
            self.counters.queue_full += 1;
            return Route::Dropped;
        }
        self.pending.insert(
            ip,
            Pending {
                asker,
                frames: VecDeque::from([frame]),
                tries: 1,
                next: now + RETRY,
            },
        );
        self.counters.requests += 1;
        Route::WaitAndAsk(Arp::request(asker, ip))
    }

    /// Records that `ip` is at `mac` (an answer, or what a request aimed at one of our
    /// addresses says of its sender); returns the frames that waited for it.
    pub fn learn(&mut self, ip: [u8; 4], mac: [u8; 6], now: Instant) -> Vec<Vec<u8>> {
        if ip == [0; 4] || mac[0] & 1 != 0 {
            return Vec::new();
        }
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&ip) {
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.confirmed)
                .map(|(k, _)| *k)
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(
            ip,
            Entry {
                mac,
                confirmed: now,
                probed: None,
            },
        );
        self.pending
            .remove(&ip)
            .map(|p| p.frames.into())
            .unwrap_or_default()
    }

    /// Updates `ip`'s entry if there is one (RFC 826's merge for ARP not aimed at us).
    pub fn refresh(&mut self, ip: [u8; 4], mac: [u8; 6], now: Instant) -> Vec<Vec<u8>> {
        if self.entries.contains_key(&ip) || self.pending.contains_key(&ip) {
            self.learn(ip, mac, now)
        } else {
            Vec::new()
        }
    }

    /// Forgets everything about `ip` (an address that became one of our own).
    pub fn forget(&mut self, ip: [u8; 4]) {
        self.entries.remove(&ip);
        if let Some(p) = self.pending.remove(&ip) {
            self.counters.unresolved += p.frames.len() as u64;
        }
    }

    /// Does what is due at `now`: returns the requests to send again; addresses asked
    /// [`TRIES`] times without an answer have their frames dropped (counted).
    pub fn tick(&mut self, now: Instant) -> Vec<Arp> {
        let mut again = Vec::new();
        let counters = &mut self.counters;
        self.pending.retain(|&ip, p| {
            if now < p.next {
                return true;
            }
            if p.tries >= TRIES {
                counters.unresolved += p.frames.len() as u64;
                log::debug!(
                    "no ARP reply from {} after {TRIES} requests: {} frames dropped",
                    std::net::Ipv4Addr::from(ip),
                    p.frames.len()
                );
                return false;
            }
            p.tries += 1;
            p.next = now + RETRY;
            counters.requests += 1;
            again.push(Arp::request(p.asker, ip));
            true
        });
        again
    }

    /// When [`Neighbors::tick`] has something to do next.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Endpoint = Endpoint {
        mac: [0x02, 0x52, 10, 82, 0, 2],
        ip: [10, 82, 0, 2],
    };
    const PEER: ([u8; 4], [u8; 6]) = ([10, 82, 1, 7], [0x52, 0x54, 0, 0x12, 0x34, 0x56]);

    #[test]
    fn requests_and_replies_round_trip_through_frames() {
        let req = Arp::request(ME, PEER.0);
        let f = req.frame();
        assert_eq!(f.len(), ETH_MIN_FRAME);
        assert_eq!(f[..6], BROADCAST);
        assert_eq!(f[6..12], ME.mac);
        assert_eq!(Arp::parse(&f), Some(req));
        let peer = Endpoint {
            mac: PEER.1,
            ip: PEER.0,
        };
        let rep = req.reply(peer);
        let f = rep.frame();
        assert_eq!(f[..6], ME.mac, "a reply goes to the asker");
        assert_eq!(Arp::parse(&f), Some(rep));
        assert_eq!(
            (rep.op, rep.sha, rep.spa, rep.tpa),
            (REPLY, PEER.1, PEER.0, ME.ip)
        );
        // Not ARP, not IPv4 over Ethernet, an unknown operation, truncated: refused.
        let mut bad = f.clone();
        bad[12] = 0x08;
        bad[13] = 0x00;
        assert_eq!(Arp::parse(&bad), None);
        let mut bad = f.clone();
        bad[ETH_HEADER_LEN + 4] = 8;
        assert_eq!(Arp::parse(&bad), None);
        let mut bad = f.clone();
        bad[ETH_HEADER_LEN + 7] = 3;
        assert_eq!(Arp::parse(&bad), None);
        assert_eq!(Arp::parse(&f[..40]), None);
    }

    #[test]
    fn frames_wait_for_an_answer_and_are_released_by_it() {
        let mut n = Neighbors::default();
        let t = Instant::now();
        assert_eq!(
            n.route(ME, PEER.0, vec![1], t),
            Route::WaitAndAsk(Arp::request(ME, PEER.0))
        );
        assert_eq!(n.route(ME, PEER.0, vec![2], t), Route::Wait);
        assert_eq!(n.learn(PEER.0, PEER.1, t), vec![vec![1], vec![2]]);
        assert_eq!(
            n.route(ME, PEER.0, vec![3], t),
            Route::Send(vec![3], PEER.1, None)
        );
        // Stale: still used, with one request to confirm it per RETRY.
        let stale = t + REACHABLE + Duration::from_secs(1);
        assert_eq!(
            n.route(ME, PEER.0, vec![4], stale),
            Route::Send(vec![4], PEER.1, Some(Arp::request(ME, PEER.0)))
        );
        assert_eq!(
            n.route(ME, PEER.0, vec![5], stale),
            Route::Send(vec![5], PEER.1, None)
        );
        // Past the grace period: forgotten, resolved again.
        let gone = t + REACHABLE + STALE_GRACE;
        assert!(matches!(
            n.route(ME, PEER.0, vec![6], gone),
            Route::WaitAndAsk(_)
        ));
        assert_eq!(n.counters().requests, 3);
    }

    #[test]
    fn unanswered_addresses_are_asked_again_then_their_frames_dropped() {
        let mut n = Neighbors::default();
        let t = Instant::now();
        for i in 0..QUEUE_PER_ADDRESS + 2 {
            n.route(ME, PEER.0, vec![i as u8], t);
        }
        assert_eq!(n.counters().queue_full, 2);
        assert_eq!(n.next_deadline(), Some(t + RETRY));
        assert!(n.tick(t).is_empty(), "nothing due yet");
        let mut now = t;
        for _ in 1..TRIES {
            now += RETRY;
            assert_eq!(n.tick(now), vec![Arp::request(ME, PEER.0)]);
        }
        now += RETRY;
        assert!(n.tick(now).is_empty());
        assert_eq!(n.counters().unresolved, QUEUE_PER_ADDRESS as u64);
        assert_eq!(n.counters().requests, u64::from(TRIES));
        assert_eq!(n.next_deadline(), None);
        // A late answer finds nothing waiting; multicast senders are never learned.
        assert!(n.learn(PEER.0, PEER.1, now).is_empty());
        assert!(n.learn([10, 0, 0, 9], [1, 0, 0, 0, 0, 1], now).is_empty());
        assert_eq!(n.lookup([10, 0, 0, 9], now), None);
        assert_eq!(n.lookup(PEER.0, now), Some(PEER.1));
        // Refresh only updates what is known.
        assert!(n.refresh([10, 0, 0, 8], PEER.1, now).is_empty());
        assert_eq!(n.lookup([10, 0, 0, 8], now), None);
    }
}
