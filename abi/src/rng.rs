//! The seeded pseudo-random generator of rnic: SplitMix64, small, fast, and repeatable by
//! its seed. rnicd decides its injected network faults with it (`--net-faults seed=S`,
//! docs/hardware-interface.md §7.14: the same seed gives the same faults), the tools draw
//! PSNs and fill check buffers with it, and the tests make their random choices with it.
//!
//! It lives here, in the one crate below all of them that needs neither `std` nor an
//! allocator, so that device, driver, tools, tests and fuzz targets share one generator.
//! Not for secrets.

/// SplitMix64 (Steele, Lea and Flood): the state advances by a constant, and each output
/// is a mix of the state. Every seed, 0 included, gives a full-period stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng(pub u64);

impl Rng {
    /// The generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p` (never for 0, always for 1). One number is drawn even
    /// when `p` is 0, so that one decision's odds do not shift the ones after it.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// True `percent` times in a hundred.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Fills `buf` with random bytes, eight from each number drawn.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_splitmix64() {
        // The reference outputs of SplitMix64 seeded with 1234567.
        let mut r = Rng::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
        assert_eq!(r.next_u64(), 9817491932198370423);
    }

    #[test]
    fn the_same_seed_repeats_and_others_differ() {
        let (mut a, mut b, mut c) = (Rng::new(7), Rng::new(7), Rng::new(8));
        let (mut x, mut y, mut z) = ([0u8; 13], [0u8; 13], [0u8; 13]);
        a.fill(&mut x);
        b.fill(&mut y);
        c.fill(&mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut r = Rng::new(0);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            assert!(!r.chance(0.0));
            assert!(r.chance(1.0));
            assert!(r.percent(100) && !r.percent(0));
        }
        assert_eq!(r.below(0), 0);
    }
}
