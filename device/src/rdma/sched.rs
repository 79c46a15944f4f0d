//! Which QPs need a turn without a doorbell: the QPs with queued work (ops behind a fence
//! or the READ window, or a go-back-N resend) and the QPs whose retry or RNR timer is
//! armed, ordered by deadline. The engine asks it each pass instead of looking at every
//! QP, so a pass costs the same however many QPs sit idle.
//!
//! The schedule is told about a QP after every piece of work on it
//! ([`Schedule::update`]); it may hold a QP that no longer needs a turn (a spurious turn
//! does nothing), but never misses one that does, as long as every change to a QP's
//! queued work or timers is followed by an update.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// The QPs that need a turn now or later, without a doorbell.
#[derive(Debug, Default)]
pub struct Schedule {
    /// QPs with queued work: a turn on every pass.
    pending: BTreeSet<u32>,
    /// (deadline, QPN) of every armed timer: a turn once it is due.
    timers: BTreeSet<(Instant, u32)>,
    /// The deadline of each QP in `timers`, to find its entry again.
    deadline_of: HashMap<u32, Instant>,
}

impl Schedule {
    /// Records what QP `qpn` waits for: queued work (`pending`) and its earliest timer.
    pub fn update(&mut self, qpn: u32, pending: bool, deadline: Option<Instant>) {
        if pending {
            self.pending.insert(qpn);
        } else {
            self.pending.remove(&qpn);
        }
        if self.deadline_of.get(&qpn).copied() == deadline {
            return;
        }
        if let Some(old) = self.deadline_of.remove(&qpn) {
            self.timers.remove(&(old, qpn));
        }
        if let Some(at) = deadline {
            self.deadline_of.insert(qpn, at);
            self.timers.insert((at, qpn));
        }
    }

    /// QP `qpn` is gone (destroyed or migrated away).
    pub fn forget(&mut self, qpn: u32) {
        self.update(qpn, false, None);
    }

    /// Appends to `out` the QPs that need a turn at `now`: every pending QP and every QP
    /// whose timer is due. The due timers stay scheduled until the QP's next update.
    pub fn due(&self, now: Instant, out: &mut Vec<u32>) {
        out.extend(self.pending.iter().copied());
        out.extend(
            self.timers
                .iter()
                .take_while(|(at, _)| *at <= now)
                .map(|(_, qpn)| *qpn),
        );
    }

    /// The earliest armed timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// Whether nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.timers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn due(s: &Schedule, now: Instant) -> Vec<u32> {
        let mut v = Vec::new();
        s.due(now, &mut v);
        v
    }

    #[test]
    fn pending_qps_get_a_turn_on_every_pass_until_updated() {
        let mut s = Schedule::default();
        let now = Instant::now();
        s.update(7, true, None);
        assert_eq!(due(&s, now), [7]);
        assert_eq!(due(&s, now), [7]);
        s.update(7, false, None);
        assert!(due(&s, now).is_empty());
        assert!(s.is_empty());
    }

    #[test]
    fn timers_are_due_in_deadline_order_and_rearming_moves_them() {
        let mut s = Schedule::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        s.update(1, false, Some(ms(30)));
        s.update(2, false, Some(ms(10)));
        s.update(3, false, Some(ms(20)));
        assert_eq!(s.next_deadline(), Some(ms(10)));
        assert!(due(&s, t0).is_empty());
        assert_eq!(due(&s, ms(20)), [2, 3]);
        // Re-armed later: the old entry goes.
        s.update(2, false, Some(ms(40)));
        assert_eq!(due(&s, ms(20)), [3]);
        assert_eq!(s.next_deadline(), Some(ms(20)));
        s.forget(3);
        s.forget(1);
        assert_eq!(s.next_deadline(), Some(ms(40)));
        s.update(2, false, None);
        assert!(s.is_empty());
    }

    #[test]
    fn many_idle_qps_cost_nothing_to_look_at() {
        let mut s = Schedule::default();
        let now = Instant::now();
        for qpn in 0..10_000 {
            s.update(qpn, false, None);
        }
        s.update(5000, true, None);
        assert_eq!(due(&s, now), [5000]);
        assert!(s.deadline_of.is_empty());
    }
}
