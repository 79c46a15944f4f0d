//! Payload held in the sending function's memory (docs/hardware-interface.md §7.12): the
//! payload of a train between two functions of this process, which the receiver copies
//! once, straight into its own memory, as a NIC's loopback DMA would. The sender checks
//! the memory against its MR table as it would to copy it and keeps the runs it found,
//! with a snapshot of its memory map ([`Held`]); the receiver can copy those bytes
//! ([`Payload::write_to`], after its own checks) and nothing else of the sender's
//! memory. What needs the bytes themselves (a capture, the uplink, a receiver taking the
//! train packet by packet) gets them with [`Held::append_to`].

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::dma::MemorySnapshot;

/// Bytes in the sending function's memory, checked, to be copied where they go.
#[derive(Debug, Clone)]
pub struct Held {
    mem: MemorySnapshot,
    /// Runs of device memory, each within one mapped region, in payload order.
    runs: Vec<(GuestAddress, usize)>,
    len: usize,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq::<GuestMemoryMmap>(&*self.mem, &*other.mem)
            && self.len == other.len
            && self.runs == other.runs
    }
}

impl Eq for Held {}

impl Held {
    /// No bytes yet, of the memory `mem`.
    pub fn new(mem: MemorySnapshot) -> Self {
        Self {
            mem,
            runs: Vec::new(),
            len: 0,
        }
    }

    /// Adds the `n` bytes at `addr` to the end of the payload. Returns false, adding
    /// nothing, if they are not all mapped.
    pub fn push(&mut self, addr: GuestAddress, n: usize) -> bool {
        let before = self.runs.len();
        let mut at = addr;
        for slice in self.mem.get_slices(addr, n) {
            let Ok(slice) = slice else {
                self.runs.truncate(before);
                return false;
            };
            let k = slice.len();
            // Consecutive within one region: one run.
            let merged = match self.runs.last().copied() {
                Some((a, m)) if a.0.checked_add(m as u64) == Some(at.0) => {
                    self.mem.get_slice(a, m + k).is_ok()
                }
                _ => false,
            };
            match self.runs.last_mut() {
                Some((_, m)) if merged => *m += k,
                _ => self.runs.push((at, k)),
            }
            at = GuestAddress(at.0 + k as u64);
        }
        self.len += n;
        true
    }

    /// Payload bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `[at, at + n)` of the payload (as many of them as it has) as a payload
    /// of their own: one packet's, or a run's.
    pub fn part(&self, at: usize, n: usize) -> Payload<'_> {
        let at = at.min(self.len);
        Payload::Held {
            held: self,
            at,
            len: n.min(self.len - at),
        }
    }

    /// Calls `f(address, length)` for the runs of device memory of payload bytes
    /// `[at, at + n)`, in order; false if `f` did, or the range is not in the payload.
    fn walk(&self, at: usize, n: usize, mut f: impl FnMut(GuestAddress, usize) -> bool) -> bool {
        if at.checked_add(n).is_none_or(|end| end > self.len) {
            return false;
        }
        let mut skip = at;
        let mut left = n;
        for &(addr, run) in &self.runs {
            if left == 0 {
                break;
            }
            if skip >= run {
                skip -= run;
                continue;
            }
            let k = (run - skip).min(left);
            if !f(GuestAddress(addr.0 + skip as u64), k) {
                return false;
            }
            left -= k;
            skip = 0;
        }
        left == 0
    }

    /// Appends payload bytes `[at, at + n)` to `out`; false (appending nothing) if the
    /// range is not in the payload.
    pub fn append_to(&self, at: usize, n: usize, out: &mut Vec<u8>) -> bool {
        let before = out.len();
        let done = self.walk(at, n, |addr, k| {
            self.mem.write_all_volatile_to(addr, out, k).is_ok()
        });
        if !done {
            out.truncate(before);
        }
        done
    }

    /// Copies payload bytes `[at, at + n)` into `dst` (another function's memory, or the
    /// same function's) at `addr`, memory to memory. False if the range is not in the
    /// payload or the destination is not all mapped in `dst`; bytes before the failure
    /// may have been written.
    pub fn write_to(&self, at: usize, n: usize, dst: &GuestMemoryMmap, addr: GuestAddress) -> bool {
        let mut to = addr;
        self.walk(at, n, |from, k| {
            let Ok(src) = self.mem.get_slice(from, k) else {
                return false;
            };
            let mut copied = 0;
            for part in dst.get_slices(to, k) {
                let Ok(part) = part else { return false };
                let Ok(src) = src.subslice(copied, part.len()) else {
                    return false;
                };
                // memmove: the two may be the same memory mapped twice.
                src.copy_to_volatile_slice(part);
                copied += part.len();
            }
            to = GuestAddress(to.0 + k as u64);
            copied == k
        })
    }
}

/// A run's payload: bytes in the frame, or held in the sender's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// In the frame.
    Bytes(&'a [u8]),
    /// Bytes `[at, at + len)` of a payload in the sending function's memory (see
    /// [`Held::part`]).
    Held {
        /// The whole payload held.
        held: &'a Held,
        /// Where this part starts in it.
        at: usize,
        /// Bytes in the part.
        len: usize,
    },
}

impl Payload<'_> {
    /// Payload bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            Payload::Held { len, .. } => *len,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes payload bytes `[at, at + n)` into `dst` at `addr`; false if they are not
    /// in the payload or the destination is not all mapped.
    pub fn write_to(&self, at: usize, n: usize, dst: &GuestMemoryMmap, addr: GuestAddress) -> bool {
        match self {
            Payload::Bytes(b) => at
                .checked_add(n)
                .and_then(|end| b.get(at..end))
                .is_some_and(|part| dst.write_slice(part, addr).is_ok()),
            Payload::Held {
                held,
                at: start,
                len,
            } => {
                at.checked_add(n).is_some_and(|end| end <= *len)
                    && held.write_to(start + at, n, dst, addr)
            }
        }
    }

    /// Appends the payload's bytes to `out`; false (appending nothing) if held bytes
    /// cannot be read.
    pub fn append_to(&self, out: &mut Vec<u8>) -> bool {
        match self {
            Payload::Bytes(b) => {
                out.extend_from_slice(b);
                true
            }
            Payload::Held { held, at, len } => held.append_to(*at, *len, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::DmaSpace;
    use std::io::Write;

    const PAGE: u64 = rnic_abi::PAGE_SIZE;

    /// A function's memory: two regions of `pages` pages one after the other from
    /// device address `iova`, page `p` filled with `p + fill`.
    fn space(iova: u64, pages: u64, fill: u8) -> DmaSpace {
        let dma = DmaSpace::new();
        for region in 0..2 {
            let mut file = crate::dma::tests::memfd(0);
            for p in 0..pages {
                let byte = fill.wrapping_add((region * pages + p) as u8);
                file.write_all(&vec![byte; PAGE as usize]).unwrap();
            }
            dma.map(
                iova + region * pages * PAGE,
                pages * PAGE,
                0,
                Some(file),
                true,
            )
            .unwrap();
        }
        dma
    }

    /// The bytes a `Held` stands for, read directly.
    fn expected(mem: &GuestMemoryMmap, runs: &[(u64, usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(a, n) in runs {
            let mut b = vec![0; n];
            mem.read_slice(&mut b, GuestAddress(a)).unwrap();
            out.extend(b);
        }
        out
    }

    #[test]
    fn copies_what_was_pushed_across_runs_and_regions() {
        let a = space(0x10000, 4, 1);
        let b = space(0x80000, 4, 100);
        let mut held = Held::new(a.readable());
        // Runs out of order, one crossing from the first region into the second.
        let runs = [
            (0x12000 + 100, 300usize),
            (0x13000 + 4000, 5000),
            (0x10000, 64),
        ];
        for &(addr, n) in &runs {
            assert!(held.push(GuestAddress(addr), n));
        }
        assert_eq!(held.len(), 5364);
        let want = expected(&a.readable(), &runs);

        let mut out = vec![9];
        assert!(held.append_to(0, held.len(), &mut out));
        assert_eq!(out[1..], want[..]);

        // Into B, across B's two regions, from the middle of the payload.
        let dst = GuestAddress(0x80000 + 4 * PAGE - 1000);
        assert!(held.write_to(200, 5000, &b.writable(), dst));
        let mut got = vec![0; 5000];
        b.readable().read_slice(&mut got, dst).unwrap();
        assert_eq!(got[..], want[200..5200]);

        let part = held.part(300, 64);
        let mut out = Vec::new();
        assert!(part.append_to(&mut out));
        assert_eq!(out[..], want[300..364]);
        // A part copies its own bytes and no others.
        let dst = GuestAddress(0x80000);
        assert!(part.write_to(10, 54, &b.writable(), dst));
        let mut got = vec![0; 54];
        b.readable().read_slice(&mut got, dst).unwrap();
        assert_eq!(got[..], want[310..364]);
        assert!(!part.write_to(10, 55, &b.writable(), dst));
        assert_eq!(held.part(5000, 1000).len(), 364);
    }

    #[test]
    fn refuses_what_is_not_mapped_or_not_in_the_payload() {
        let a = space(0x10000, 2, 1);
        let b = space(0x80000, 2, 100);
        let mut held = Held::new(a.readable());
        // Runs past the end of A's memory add nothing.
        assert!(!held.push(GuestAddress(0x10000 + 4 * PAGE - 10), 20));
        assert!(held.is_empty());
        assert!(held.push(GuestAddress(0x10000), 100));
        let mut out = vec![7u8];
        assert!(!held.append_to(50, 51, &mut out));
        assert_eq!(out, [7]);
        let w = b.writable();
        assert!(!held.write_to(0, 101, &w, GuestAddress(0x80000)));
        // A destination that runs out of B's memory.
        assert!(!held.write_to(0, 100, &w, GuestAddress(0x80000 + 4 * PAGE - 10)));
        assert!(!Payload::Bytes(&[1, 2, 3]).write_to(2, 2, &w, GuestAddress(0x80000)));
        assert!(held
            .part(0, 100)
            .write_to(0, 100, &w, GuestAddress(0x80000)));
    }
}
