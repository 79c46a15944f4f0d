//! How a fuzz input is cut into frames: records of a flags byte, a 16-bit little-endian
//! length and that many bytes (fewer at the end of the input). Seeds are written in the
//! same form ([`record`]), so that libFuzzer's mutations keep the structure most of the
//! time and still reach every byte of every frame.

use crate::world::Seal;

/// Flags bit: run an engine pass after this frame (else the frames arrive together).
pub const STEP: u8 = 1 << 2;

/// One record of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The flags byte: bits 0-1 the [`Seal`] (0 and 3 as is, 1 resealed, 2 unsealed),
    /// bit 2 [`STEP`], the rest for the target's own use.
    pub flags: u8,
    /// The frame.
    pub bytes: &'a [u8],
}

impl Record<'_> {
    /// What happens to the frame's ICRC.
    pub fn seal(&self) -> Seal {
        match self.flags & 3 {
            1 => Seal::Reseal,
            2 => Seal::Unsealed,
            _ => Seal::AsIs,
        }
    }

    /// Whether an engine pass follows the frame.
    pub fn step(&self) -> bool {
        self.flags & STEP != 0
    }
}

/// The records of `data`, at most `max` of them.
pub fn records(mut data: &[u8], max: usize) -> Vec<Record<'_>> {
    let mut out = Vec::new();
    while data.len() >= 3 && out.len() < max {
        let flags = data[0];
        let len = usize::from(u16::from_le_bytes([data[1], data[2]])).min(data.len() - 3);
        out.push(Record {
            flags,
            bytes: &data[3..3 + len],
        });
        data = &data[3 + len..];
    }
    out
}

/// Reads little-endian arguments off a record's bytes, in order; past the end, zeroes
/// (so that every input means something).
pub struct Args<'a>(pub &'a [u8]);

impl<'a> Args<'a> {
    /// The next `n` bytes (at most 8) as a little-endian number.
    pub fn take(&mut self, n: usize) -> u64 {
        let mut b = [0u8; 8];
        let k = n.min(self.0.len()).min(8);
        b[..k].copy_from_slice(&self.0[..k]);
        self.0 = &self.0[k..];
        u64::from_le_bytes(b)
    }

    /// The next 2 bytes.
    pub fn u16(&mut self) -> u16 {
        self.take(2) as u16
    }

    /// The next 4 bytes.
    pub fn u32(&mut self) -> u32 {
        self.take(4) as u32
    }

    /// The next 8 bytes.
    pub fn u64(&mut self) -> u64 {
        self.take(8)
    }

    /// What is left.
    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}

/// Encodes one record (a seed's, or a regression test's).
pub fn record(flags: u8, bytes: &[u8]) -> Vec<u8> {
    let len = u16::try_from(bytes.len()).expect("a frame of at most 64 KiB");
    let mut v = vec![flags];
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_short_tail_is_cut() {
        let mut data = record(1 | STEP, b"abc");
        data.extend(record(2, b""));
        data.extend([0, 10, 0, b'x', b'y']);
        let r = records(&data, 16);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].seal(), r[0].step(), r[0].bytes),
            (Seal::Reseal, true, &b"abc"[..])
        );
        assert_eq!(
            (r[1].seal(), r[1].step(), r[1].bytes),
            (Seal::Unsealed, false, &b""[..])
        );
        assert_eq!((r[2].seal(), r[2].bytes), (Seal::AsIs, &b"xy"[..]));
        assert_eq!(records(&data, 1).len(), 1);
    }

    #[test]
    fn missing_arguments_read_as_zero() {
        let mut a = Args(&[1, 2, 3]);
        assert_eq!(a.u16(), 0x0201);
        assert_eq!(a.u32(), 3);
        assert_eq!(a.u64(), 0);
        assert!(a.rest().is_empty());
    }
}
