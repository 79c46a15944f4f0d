//! Packet sequence numbers: 24 bits that wrap, compared by their signed distance
//! (docs/hardware-interface.md §7.9).

/// `a + n` modulo 2^24.
pub fn add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & 0xFF_FFFF
}

/// The signed distance from `b` to `a` in the 24-bit sequence space.
pub fn diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

#[cfg(test)]
mod tests {
    use crate::roce::psn;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn::add(0xFF_FFFF, 1), 0);
        assert_eq!(psn::diff(0, 0xFF_FFFF), 1);
        assert_eq!(psn::diff(0xFF_FFFF, 0), -1);
        assert_eq!(psn::diff(5, 3), 2);
    }
}
