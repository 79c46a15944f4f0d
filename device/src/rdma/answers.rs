//! Which answers of a READ have arrived, so that a READ whose responses arrive with a gap
//! asks again only for what is missing.
//!
//! The responses of a READ carry consecutive PSNs, and each PSN says where its payload
//! goes (packet `k` holds bytes from `k * MTU` on). So a response that arrives after a
//! gap can be placed at once; what the requester must remember is which packets it has.
//! [`Answers`] keeps that as the count of packets received in order from the first (the
//! first missing one is the READ's first PSN plus that count) and the runs received
//! beyond it. A READ asked again (see `requester::ask`) names the first missing packet's
//! PSN, address and the remaining length, as the InfiniBand spec and Linux rxe resume a
//! READ; the responses that come back for packets already placed are recognised and
//! skipped, so a loss in the repeat of a part that had arrived costs nothing.

/// Response packets of one READ received so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answers {
    /// Packets received in order from the first: packet `in_order` is the first missing.
    in_order: u32,
    /// Runs of packets `[start, end)` received beyond the first missing one, sorted and
    /// neither touching nor overlapping each other or `in_order`. Empty (no allocation)
    /// unless responses arrived with a gap.
    beyond: Vec<(u32, u32)>,
}

/// What [`Answers::take`] made of `count` packets from packet `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Every one of them had arrived before: nothing to place.
    Repeat,
    /// At least one is new: place them all (placing one twice writes the same bytes).
    New,
}

impl Answers {
    /// The first packet not received: where a repeated request starts.
    pub fn first_missing(&self) -> u32 {
        self.in_order
    }

    /// Whether every one of `npsn` packets has arrived.
    pub fn complete(&self, npsn: u32) -> bool {
        self.in_order >= npsn
    }

    /// Whether packets arrived beyond the first missing one (a gap is open).
    pub fn has_gap(&self) -> bool {
        !self.beyond.is_empty()
    }

    /// Records that packets `[first, first + count)` arrived.
    pub fn take(&mut self, first: u32, count: u32) -> Taken {
        let end = first.saturating_add(count);
        if count == 0 || end <= self.in_order || self.covered(first, end) {
            return Taken::Repeat;
        }
        if first <= self.in_order {
            self.in_order = end;
        } else {
            // Merge with every run it touches or overlaps, keeping the list sorted.
            let mut start = first;
            let mut stop = end;
            self.beyond.retain(|&(s, e)| {
                let apart = e < start || s > stop;
                if !apart {
                    start = start.min(s);
                    stop = stop.max(e);
                }
                apart
            });
            let at = self.beyond.partition_point(|&(s, _)| s < start);
            self.beyond.insert(at, (start, stop));
        }
        // Runs the in-order part now reaches join it.
        while let Some(&(s, e)) = self.beyond.first() {
            if s > self.in_order {
                break;
            }
            self.in_order = self.in_order.max(e);
            self.beyond.remove(0);
        }
        Taken::New
    }

    fn covered(&self, first: u32, end: u32) -> bool {
        self.beyond.iter().any(|&(s, e)| s <= first && end <= e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_packets_advance_the_first_missing() {
        let mut a = Answers::default();
        assert_eq!(a.take(0, 1), Taken::New);
        assert_eq!(a.take(1, 30), Taken::New);
        assert_eq!(a.first_missing(), 31);
        assert!(!a.has_gap());
        assert!(a.complete(31) && !a.complete(32));
    }

    #[test]
    fn a_gap_is_remembered_and_filled_by_the_repeat() {
        let mut a = Answers::default();
        a.take(0, 5);
        // Packets 5 and 9 are lost.
        a.take(6, 3);
        a.take(10, 6);
        assert_eq!(a.first_missing(), 5);
        assert!(a.has_gap());
        // The repeat from 5: 5 is new, 6..9 arrived before, 9 is new, 10.. arrived before.
        assert_eq!(a.take(5, 1), Taken::New);
        assert_eq!(a.first_missing(), 9);
        assert_eq!(a.take(6, 1), Taken::Repeat);
        assert_eq!(a.take(8, 1), Taken::Repeat);
        assert_eq!(a.take(9, 1), Taken::New);
        assert_eq!(a.first_missing(), 16);
        assert!(!a.has_gap());
        assert_eq!(a.take(12, 2), Taken::Repeat);
        assert!(a.complete(16));
    }

    #[test]
    fn runs_beyond_merge_when_they_touch_or_overlap() {
        let mut a = Answers::default();
        a.take(10, 2);
        a.take(20, 2);
        a.take(12, 3); // touches [10, 12)
        a.take(18, 4); // overlaps [20, 22)
        assert_eq!(a.beyond, vec![(10, 15), (18, 22)]);
        a.take(14, 5); // joins both
        assert_eq!(a.beyond, vec![(10, 22)]);
        a.take(0, 10);
        assert_eq!(a.first_missing(), 22);
        assert!(!a.has_gap());
    }

    #[test]
    fn a_partial_repeat_is_new() {
        let mut a = Answers::default();
        a.take(0, 4);
        // A run that starts among packets already placed and ends past them.
        assert_eq!(a.take(2, 4), Taken::New);
        assert_eq!(a.first_missing(), 6);
        assert_eq!(a.take(0, 0), Taken::Repeat);
    }

    #[test]
    fn arbitrary_arrival_orders_end_complete() {
        // Every permutation of 6 single packets ends with all 6 in order, whatever the
        // order and with repeats thrown in.
        let n = 6u32;
        let mut order: Vec<u32> = (0..n).collect();
        let mut count = 0;
        permute(&mut order, 0, &mut |o| {
            let mut a = Answers::default();
            for &k in o {
                assert_eq!(a.take(k, 1), Taken::New, "{o:?}");
                assert_eq!(a.take(k, 1), Taken::Repeat, "{o:?}");
            }
            assert!(a.complete(n) && !a.has_gap(), "{o:?}: {a:?}");
            count += 1;
        });
        assert_eq!(count, 720);
    }

    fn permute(v: &mut Vec<u32>, k: usize, f: &mut impl FnMut(&[u32])) {
        if k == v.len() {
            f(v);
            return;
        }
        for i in k..v.len() {
            v.swap(k, i);
            permute(v, k + 1, f);
            v.swap(k, i);
        }
    }
}
