//! rnic-pingpong's data pattern: with `check` on, every byte transferred is verified. The
//! data of iteration `k` from side `s` is [`pattern_byte`]`(s, k, i)`, which differs at
//! every byte from the data of any other iteration less than 256 apart and from the other
//! side's, so stale data is caught; before each READ the local destination is filled
//! with the complement of what the READ must bring.

use crate::error::{fail, Result};

/// Byte `i` of the data side `stream` (0: initiator, 1: the other side) sends in iteration
/// `iter`: a base sequence plus [`pattern_offset`]. Consecutive iterations differ at every
/// byte (by 0x35, odd), and so does any other iteration less than 256 away.
pub fn pattern_byte(stream: u8, iter: u64, i: usize) -> u8 {
    pattern_base(i).wrapping_add(pattern_offset(stream, iter))
}

fn pattern_base(i: usize) -> u8 {
    let i = i as u64;
    i.wrapping_mul(0x9d).wrapping_add(i >> 8) as u8
}

/// What side `stream` adds to the base sequence in iteration `iter`.
pub fn pattern_offset(stream: u8, iter: u64) -> u8 {
    iter.wrapping_mul(0x35)
        .wrapping_add(u64::from(stream).wrapping_mul(0x6b)) as u8
}

/// `len` bytes of [`pattern_byte`].
pub fn pattern(stream: u8, iter: u64, len: usize) -> Vec<u8> {
    Pattern::new(len).data(stream, iter)
}

/// The data of a run: the base sequence computed once, so that filling and checking cost
/// one addition and one comparison per byte.
#[derive(Clone, Debug)]
pub struct Pattern {
    base: Vec<u8>,
}

impl Pattern {
    /// The patterns of `len`-byte messages.
    pub fn new(len: usize) -> Pattern {
        Pattern {
            base: (0..len).map(pattern_base).collect(),
        }
    }

    /// The data side `stream` sends in iteration `iter`.
    pub fn data(&self, stream: u8, iter: u64) -> Vec<u8> {
        let off = pattern_offset(stream, iter);
        self.base.iter().map(|b| b.wrapping_add(off)).collect()
    }

    /// Checks `got` against the data of `stream` in iteration `iter`.
    pub fn verify(&self, got: &[u8], stream: u8, iter: u64) -> Result<()> {
        if got == self.data(stream, iter).as_slice() {
            return Ok(());
        }
        verify(got, stream, iter)
    }
}

/// Checks `got` against the data of `stream` in iteration `iter`, saying where it differs.
pub fn verify(got: &[u8], stream: u8, iter: u64) -> Result<()> {
    let Some(i) = (0..got.len()).find(|&i| got[i] != pattern_byte(stream, iter, i)) else {
        return Ok(());
    };
    let bad = (i..got.len())
        .filter(|&j| got[j] != pattern_byte(stream, iter, j))
        .count();
    let stale = if iter > 0 && got[i] == pattern_byte(stream, iter - 1, i) {
        format!(" (stale data of iteration {})", iter - 1)
    } else {
        String::new()
    };
    fail(format!(
        "data check failed: byte {i} of {} is {:#04x}, expected {:#04x}{stale}; {bad} bytes differ",
        got.len(),
        got[i],
        pattern_byte(stream, iter, i)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_change_every_byte_between_iterations_and_sides() {
        let p = Pattern::new(3000);
        for k in 0..300u64 {
            let a = p.data(0, k);
            let b = p.data(0, k + 1);
            assert!(a.iter().zip(&b).all(|(x, y)| x != y), "iteration {k}");
            let c = p.data(1, k);
            assert!(
                a.iter().zip(&c).all(|(x, y)| x != y),
                "sides in iteration {k}"
            );
            assert_eq!(a[1234], pattern_byte(0, k, 1234));
        }
        assert_eq!(pattern(1, 7, 10), p.data(1, 7)[..10]);
        // Not just a ramp: neighbouring bytes differ too.
        let a = p.data(0, 0);
        assert!(a.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn verification_names_the_first_bad_byte_and_stale_data() {
        let p = Pattern::new(100);
        assert!(p.verify(&p.data(1, 5), 1, 5).is_ok());
        let e = p.verify(&p.data(1, 4), 1, 5).unwrap_err();
        assert!(e.0.contains("byte 0 of 100"), "{e}");
        assert!(e.0.contains("stale data of iteration 4"), "{e}");
        assert!(e.0.contains("100 bytes differ"), "{e}");
        let mut d = p.data(0, 9);
        d[42] ^= 1;
        let e = p.verify(&d, 0, 9).unwrap_err();
        assert!(e.0.contains("byte 42 of 100"), "{e}");
        assert!(e.0.contains("1 bytes differ"), "{e}");
        assert!(!e.0.contains("stale"), "{e}");
    }
}
