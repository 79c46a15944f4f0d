//! Network fault injection (`rnicd --net-faults`, docs/hardware-interface.md §7.14): a
//! deterministic imperfect wire for testing the transport. A [`FaultSpec`] says how often
//! frames are lost, duplicated, reordered or corrupted and how long each is delayed; a
//! [`FaultInjector`] applies it, from a PRNG seeded by the spec so that a run repeats
//! exactly. Held frames are released by [`FaultInjector::due`], which the owner calls at
//! [`FaultInjector::next_deadline`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rnic_abi::rng::Rng;

/// Bytes of an Ethernet header, which corruption leaves alone (so that the frame still
/// reaches the port it was meant for and is dropped there, by the receiver's checks).
const ETH_HEADER_LEN: usize = 14;

/// How long a reordered frame waits for a next frame to overtake it before it goes
/// anyway, so that the last frame of a burst is not held forever.
pub const REORDER_HOLD: Duration = Duration::from_millis(1);

/// What faults to inject, and the seed of their randomness.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultSpec {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub dup: f64,
    /// Probability that a frame is held back and delivered after the next one.
    pub reorder: f64,
    /// Probability that a frame gets one bit flipped.
    pub corrupt: f64,
    /// How long every frame is held before delivery.
    pub delay: Duration,
    /// Seed of the PRNG.
    pub seed: u64,
}

impl FaultSpec {
    /// Whether the spec changes anything at all.
    pub fn is_noop(&self) -> bool {
        self.loss == 0.0
            && self.dup == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && self.delay.is_zero()
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={},dup={},reorder={},corrupt={},delay={},seed={}",
            self.loss,
            self.dup,
            self.reorder,
            self.corrupt,
            self.delay.as_secs_f64() * 1000.0,
            self.seed
        )
    }
}

/// Why a fault spec did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// An item is not `key=value`.
    #[error("`{0}` is not KEY=VALUE (keys: loss, dup, reorder, corrupt, delay, seed)")]
    NotKeyValue(String),
    /// An unknown key.
    #[error("unknown key `{0}` (keys: loss, dup, reorder, corrupt, delay, seed)")]
    UnknownKey(String),
    /// A key given twice.
    #[error("`{0}` is given twice")]
    Repeated(String),
    /// A probability that is not a number in 0..=1.
    #[error("{key}={value}: a probability must be a number from 0 to 1")]
    BadProbability {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
    /// A delay that is not a non-negative number of milliseconds.
    #[error("delay={0}: the delay must be a non-negative number of milliseconds (at most 60000)")]
    BadDelay(String),
    /// A seed that is not an unsigned 64-bit integer.
    #[error("seed={0}: the seed must be an unsigned 64-bit integer")]
    BadSeed(String),
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    /// Parses `loss=P,dup=P,reorder=P,corrupt=P,delay=MS,seed=S`, any subset in any
    /// order; what is not given is 0. The empty string is no faults.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = FaultSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| FaultSpecError::NotKeyValue(item.to_string()))?;
            if seen.contains(&key) {
                return Err(FaultSpecError::Repeated(key.to_string()));
            }
            let probability = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| FaultSpecError::BadProbability {
                        key: key.to_string(),
                        value: value.to_string(),
                    })
            };
            match key {
                "loss" => spec.loss = probability()?,
                "dup" => spec.dup = probability()?,
                "reorder" => spec.reorder = probability()?,
                "corrupt" => spec.corrupt = probability()?,
                "delay" => {
                    let ms = value
                        .parse::<f64>()
                        .ok()
                        .filter(|ms| (0.0..=60_000.0).contains(ms))
                        .ok_or_else(|| FaultSpecError::BadDelay(value.to_string()))?;
                    spec.delay = Duration::from_secs_f64(ms / 1000.0);
                }
                "seed" => {
                    spec.seed = value
                        .parse()
                        .map_err(|_| FaultSpecError::BadSeed(value.to_string()))?
                }
                _ => return Err(FaultSpecError::UnknownKey(key.to_string())),
            }
            seen.push(key);
        }
        Ok(spec)
    }
}

/// Counts of what the injector did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounters {
    /// Frames offered.
    pub sent: u64,
    /// Frames handed on (copies included; corrupted ones too).
    pub delivered: u64,
    /// Frames lost.
    pub lost: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames held back to be overtaken (counted once, with or without a copy).
    pub reordered: u64,
    /// Frames with a bit flipped.
    pub corrupted: u64,
    /// Frames (copies included) that waited for the delay.
    pub delayed: u64,
}

impl FaultCounters {
    /// Every counter with its field name, for reports.
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("sent", self.sent),
            ("delivered", self.delivered),
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("reordered", self.reordered),
            ("corrupted", self.corrupted),
            ("delayed", self.delayed),
        ]
    }
}

impl fmt::Display for FaultCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} delivered {} lost {} duplicated {} reordered {} corrupted {} delayed {}",
            self.sent,
            self.delivered,
            self.lost,
            self.duplicated,
            self.reordered,
            self.corrupted,
            self.delayed
        )
    }
}

/// Applies a [`FaultSpec`] to a stream of frames.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    spec: FaultSpec,
    /// rnic's seeded generator ([`rnic_abi::rng`]).
    rng: Rng,
    /// Reordered frames, waiting for the next frame to overtake them (or their hold to
    /// end), oldest first.
    overtaken: Vec<(Instant, Vec<u8>)>,
    /// Frames waiting for the delay, by due time then arrival.
    delayed: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    order: u64,
    counters: FaultCounters,
}

impl FaultInjector {
    /// An injector of `spec`, its PRNG seeded by `spec.seed`.
    pub fn new(spec: FaultSpec) -> Self {
        Self {
            spec,
            rng: Rng::new(spec.seed),
            overtaken: Vec::new(),
            delayed: BinaryHeap::new(),
            order: 0,
            counters: FaultCounters::default(),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// What the injector did so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Frames held (reordered or delayed) and not yet delivered.
    pub fn held(&self) -> usize {
        self.overtaken.len() + self.delayed.len()
    }

    /// Takes `frame` at `now`; returns the frames to deliver now, in order: none, it, its
    /// copies, held frames it overtook, or held frames that fell due.
    pub fn apply(&mut self, mut frame: Vec<u8>, now: Instant) -> Vec<Vec<u8>> {
        self.counters.sent += 1;
        let mut out = self.due(now);
        // Every decision is drawn for every frame, so that one frame's fate depends only
        // on the seed and its position in the stream.
        let lost = self.rng.chance(self.spec.loss);
        let corrupt = self.rng.chance(self.spec.corrupt);
        let dup = self.rng.chance(self.spec.dup);
        let reorder = self.rng.chance(self.spec.reorder);
        let bit = self.rng.next_u64();
        if lost {
            self.counters.lost += 1;
            return out;
        }
        if corrupt && frame.len() > ETH_HEADER_LEN {
            let bits = ((frame.len() - ETH_HEADER_LEN) * 8) as u64;
            // `bit` is uniform in u64: scaled to 0..bits.
            let at = ((u128::from(bit) * u128::from(bits)) >> 64) as u64;
            frame[ETH_HEADER_LEN + (at / 8) as usize] ^= 1 << (at % 8);
            self.counters.corrupted += 1;
        }
        let mut copies = vec![frame];
        if dup {
            copies.push(copies[0].clone());
            self.counters.duplicated += 1;
        }
        if reorder {
            self.counters.reordered += 1;
            self.overtaken
                .extend(copies.into_iter().map(|c| (now + REORDER_HOLD, c)));
            return out;
        }
        // This frame overtakes every frame held back for reordering.
        copies.extend(self.overtaken.drain(..).map(|(_, c)| c));
        self.pass(copies, now, &mut out);
        out
    }

    /// Sends `frames` through the delay stage into `out`.
    fn pass(&mut self, frames: Vec<Vec<u8>>, now: Instant, out: &mut Vec<Vec<u8>>) {
        if self.spec.delay.is_zero() {
            self.counters.delivered += frames.len() as u64;
            out.extend(frames);
            return;
        }
        for f in frames {
            self.counters.delayed += 1;
            self.order += 1;
            self.delayed
                .push(Reverse((now + self.spec.delay, self.order, f)));
        }
        // A delay too short to outlast this call is still kept for the next look.
    }

    /// The frames whose time has come at `now`: reordered frames no frame overtook within
    /// [`REORDER_HOLD`], and delayed frames whose delay is over.
    pub fn due(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if self.overtaken.first().is_some_and(|(at, _)| *at <= now) {
            // All go together: they wait behind the oldest, and order among them is kept.
            let frames: Vec<Vec<u8>> = self.overtaken.drain(..).map(|(_, c)| c).collect();
            self.pass(frames, now, &mut out);
        }
        while self
            .delayed
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= now)
        {
            if let Some(Reverse((_, _, f))) = self.delayed.pop() {
                self.counters.delivered += 1;
                out.push(f);
            }
        }
        out
    }

    /// When the next held frame falls due, if any is held.
    pub fn next_deadline(&self) -> Option<Instant> {
        let overtaken = self.overtaken.first().map(|(at, _)| *at);
        let delayed = self.delayed.peek().map(|Reverse((at, _, _))| *at);
        match (overtaken, delayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every held frame, now, in the order it would have gone.
    pub fn flush(&mut self) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut delayed = std::mem::take(&mut self.delayed).into_sorted_vec();
        // into_sorted_vec sorts Reverse ascending: latest first.
        delayed.reverse();
        out.extend(delayed.into_iter().map(|Reverse((_, _, f))| f));
        out.extend(self.overtaken.drain(..).map(|(_, c)| c));
        self.counters.delivered += out.len() as u64;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame `i`: its number, and the number's complement, so that no single bit flip
    /// turns one frame into another.
    fn frame(i: u32) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[ETH_HEADER_LEN..ETH_HEADER_LEN + 4].copy_from_slice(&i.to_be_bytes());
        f[ETH_HEADER_LEN + 4..ETH_HEADER_LEN + 8].copy_from_slice(&(!i).to_be_bytes());
        f
    }

    fn id(f: &[u8]) -> u32 {
        u32::from_be_bytes(f[ETH_HEADER_LEN..ETH_HEADER_LEN + 4].try_into().unwrap())
    }

    #[test]
    fn parses_any_subset_in_any_order() {
        let s: FaultSpec = "loss=0.02,dup=0.01,reorder=0.01,corrupt=0.001,delay=2.5,seed=7"
            .parse()
            .unwrap();
        assert_eq!(
            s,
            FaultSpec {
                loss: 0.02,
                dup: 0.01,
                reorder: 0.01,
                corrupt: 0.001,
                delay: Duration::from_micros(2500),
                seed: 7,
            }
        );
        let s: FaultSpec = " seed=3 , loss=1 ".parse().unwrap();
        assert_eq!((s.loss, s.seed, s.dup), (1.0, 3, 0.0));
        assert_eq!("".parse::<FaultSpec>().unwrap(), FaultSpec::default());
        assert!(FaultSpec::default().is_noop());
        // Display gives back what parses to the same spec.
        let s: FaultSpec = "loss=0.5,delay=3,seed=9".parse().unwrap();
        assert_eq!(s.to_string().parse::<FaultSpec>().unwrap(), s);
    }

    #[test]
    fn parse_errors_name_the_key_and_value() {
        let err = |s: &str| s.parse::<FaultSpec>().unwrap_err().to_string();
        assert!(err("loss=1.5").contains("loss=1.5"), "{}", err("loss=1.5"));
        assert!(err("dup=-0.1").contains("dup=-0.1"));
        assert!(err("reorder=x").contains("reorder=x"));
        assert!(err("corrupt=NaN").contains("corrupt=NaN"));
        assert!(err("delay=-1").contains("delay=-1"));
        assert!(err("seed=1.5").contains("seed=1.5"));
        assert!(err("jitter=1").contains("jitter"));
        assert!(err("loss").contains("`loss`"));
        assert!(err("loss=0.1,loss=0.2").contains("twice"));
    }

    #[test]
    fn no_faults_pass_frames_straight_through() {
        let mut inj = FaultInjector::new(FaultSpec::default());
        let now = Instant::now();
        for i in 0..100 {
            assert_eq!(inj.apply(frame(i), now), vec![frame(i)]);
        }
        assert_eq!(inj.next_deadline(), None);
    }

    fn run(spec: FaultSpec, n: u32) -> (Vec<Vec<u8>>, FaultInjector) {
        let mut inj = FaultInjector::new(spec);
        let start = Instant::now();
        let mut got = Vec::new();
        for i in 0..n {
            // A frame every 10 µs.
            let now = start + Duration::from_micros(u64::from(i) * 10);
            got.extend(inj.apply(frame(i), now));
        }
        got.extend(inj.flush());
        (got, inj)
    }

    #[test]
    fn a_seed_gives_the_same_faults_every_time() {
        let spec: FaultSpec = "loss=0.1,dup=0.1,reorder=0.1,corrupt=0.1,delay=1,seed=42"
            .parse()
            .unwrap();
        let (a, ia) = run(spec, 10_000);
        let (b, ib) = run(spec, 10_000);
        assert_eq!(a, b);
        assert_eq!(ia.counters(), ib.counters());
        let (c, _) = run(FaultSpec { seed: 43, ..spec }, 10_000);
        assert_ne!(a, c);
    }

    #[test]
    fn rates_are_roughly_right_and_every_frame_is_accounted_for() {
        let spec: FaultSpec = "loss=0.05,dup=0.03,reorder=0.02,corrupt=0.01,seed=1"
            .parse()
            .unwrap();
        let n = 100_000u32;
        let (got, inj) = run(spec, n);
        let c = inj.counters();
        let near = |count: u64, p: f64, of: f64| {
            let expected = p * of;
            // Within 5 standard deviations (binomial).
            let sd = (of * p * (1.0 - p)).sqrt();
            assert!(
                (count as f64 - expected).abs() < 5.0 * sd + 1.0,
                "{count} vs {expected} ({c})"
            );
        };
        near(c.lost, 0.05, f64::from(n));
        let kept = f64::from(n) * 0.95;
        near(c.corrupted, 0.01, kept);
        near(c.duplicated, 0.03, kept);
        near(c.reordered, 0.02, kept);
        assert_eq!(c.sent, u64::from(n));
        assert_eq!(c.delivered + c.lost, c.sent + c.duplicated, "{c}");
        assert_eq!(got.len() as u64, c.delivered);
        assert_eq!(inj.held(), 0);
        // Every frame not lost arrives (once, or twice if duplicated); corrupted frames
        // differ in one bit, and only after the Ethernet header.
        let mut seen = vec![0u32; n as usize];
        let mut corrupted = 0u64;
        for f in &got {
            let i = id(f);
            if (i as usize) < seen.len() && f == &frame(i) {
                seen[i as usize] += 1;
            } else {
                corrupted += 1;
                assert!(f[..ETH_HEADER_LEN].iter().all(|&b| b == 0));
                assert_eq!(f.len(), 64);
            }
        }
        let arrived = seen.iter().filter(|&&k| k > 0).count() as u64;
        let twice = seen.iter().filter(|&&k| k == 2).count() as u64;
        assert!(seen.iter().all(|&k| k <= 2));
        // A corrupted frame's copy is corrupted the same way.
        assert!(corrupted >= c.corrupted && corrupted <= 2 * c.corrupted);
        assert!(arrived + c.corrupted >= u64::from(n) - c.lost);
        assert!(twice <= c.duplicated);
        // Reordering happened: some frame came after a later one.
        let ids: Vec<u32> = got.iter().map(|f| id(f)).filter(|&i| i < n).collect();
        assert!(ids.windows(2).any(|w| w[0] > w[1]));
    }

    #[test]
    fn a_reordered_frame_comes_right_after_the_next() {
        let spec = FaultSpec {
            reorder: 1.0,
            ..FaultSpec::default()
        };
        let mut inj = FaultInjector::new(spec);
        let now = Instant::now();
        assert!(inj.apply(frame(0), now).is_empty());
        assert_eq!(inj.next_deadline(), Some(now + REORDER_HOLD));
        // Nothing overtook it in time: it goes alone.
        assert!(inj.due(now).is_empty());
        assert_eq!(inj.due(now + REORDER_HOLD), vec![frame(0)]);
        // With a 50% chance the stream is shuffled in pairs and runs.
        let spec = FaultSpec {
            reorder: 0.5,
            seed: 5,
            ..FaultSpec::default()
        };
        let mut inj = FaultInjector::new(spec);
        let mut got = Vec::new();
        for i in 0..1000 {
            got.extend(inj.apply(frame(i), now));
        }
        got.extend(inj.flush());
        let mut ids: Vec<u32> = got.iter().map(|f| id(f)).collect();
        assert_ne!(ids, (0..1000).collect::<Vec<_>>());
        ids.sort_unstable();
        assert_eq!(ids, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn delayed_frames_wait_and_keep_their_order() {
        let spec: FaultSpec = "delay=5".parse().unwrap();
        let mut inj = FaultInjector::new(spec);
        let t0 = Instant::now();
        assert!(inj.apply(frame(0), t0).is_empty());
        let t1 = t0 + Duration::from_millis(1);
        assert!(inj.apply(frame(1), t1).is_empty());
        assert_eq!(inj.next_deadline(), Some(t0 + Duration::from_millis(5)));
        assert!(inj.due(t0 + Duration::from_millis(4)).is_empty());
        assert_eq!(inj.due(t0 + Duration::from_millis(5)), vec![frame(0)]);
        assert_eq!(inj.next_deadline(), Some(t1 + Duration::from_millis(5)));
        // A frame offered late releases what is due first; it waits itself.
        let t2 = t0 + Duration::from_millis(7);
        assert_eq!(inj.apply(frame(2), t2), vec![frame(1)]);
        assert_eq!(inj.held(), 1);
        assert_eq!(inj.due(t2 + Duration::from_millis(5)), vec![frame(2)]);
        assert_eq!(inj.next_deadline(), None);
        let c = inj.counters();
        assert_eq!((c.sent, c.delivered, c.delayed), (3, 3, 3));
    }

    #[test]
    fn corruption_flips_exactly_one_bit_after_the_ethernet_header() {
        let spec = FaultSpec {
            corrupt: 1.0,
            seed: 11,
            ..FaultSpec::default()
        };
        let mut inj = FaultInjector::new(spec);
        let now = Instant::now();
        for i in 0..1000 {
            let f = inj.apply(frame(i), now);
            assert_eq!(f.len(), 1);
            let flipped: u32 = f[0]
                .iter()
                .zip(frame(i))
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(flipped, 1);
            assert_eq!(f[0][..ETH_HEADER_LEN], frame(i)[..ETH_HEADER_LEN]);
        }
    }
}
