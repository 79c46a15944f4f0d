//! Which engine thread runs which function: the first placement, and the balancer that
//! revises it from what the functions did.
//!
//! A function is the unit of placement: its state is one lock, so two threads could not
//! work on one function at once anyway. Functions that exchange traffic are kept on one
//! thread (a *group*): a frame between two functions of one thread is handed over in
//! that thread's cache, in the same pass, with no wake-up of another thread, which is
//! what keeps one pair's latency and per-message cost where a single engine has them.
//! Groups are then spread over the threads so that the busiest thread has as little as
//! possible (longest processing time first), so N busy pairs get N threads. See
//! docs/performance.md, "Engine threads".

use std::fmt;
use std::str::FromStr;

/// How functions are placed on engine threads (`rnicd --placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// VF 2k and VF 2k+1 start on one thread (pairs, as test set-ups usually pair
    /// them), and the balancer then follows the traffic.
    #[default]
    Auto,
    /// Function n runs on thread n mod threads, for ever: consecutive functions on
    /// different threads. For tests of traffic across threads and for measuring what
    /// crossing threads costs.
    Spread,
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "spread" => Ok(Self::Spread),
            _ => Err(format!("unknown placement '{s}': use auto or spread")),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Spread => "spread",
        })
    }
}

/// The thread of each function (index = member: 0 the PF, n VF n-1) when the engine
/// starts.
pub fn initial(functions: usize, threads: usize, placement: Placement) -> Vec<usize> {
    let threads = threads.max(1);
    (0..functions)
        .map(|member| match placement {
            Placement::Spread => member % threads,
            // The PF with the first pair; VF 2k and 2k+1 (members 2k+1, 2k+2) together.
            Placement::Auto if member == 0 => 0,
            Placement::Auto => ((member - 1) / 2) % threads,
        })
        .collect()
}

/// What the functions did during one balancing period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
    /// How long the period was, in nanoseconds.
    pub period_ns: u64,
    /// Per function: nanoseconds of engine time its turns took when they did work.
    pub busy: Vec<u64>,
    /// Packets from one function to another: (from, to, packets).
    pub traffic: Vec<(usize, usize, u64)>,
}

/// Two functions belong together if the packets between them are at least this share
/// (1/N) of all the packets between functions in the period: a trickle beside heavy
/// traffic elsewhere binds nothing.
const LINK_SHARE: u64 = 100;
/// A placement that keeps every group together is replaced only when its busiest thread
/// was busy at least this much of the period (in %): below that one thread keeps up,
/// and spreading would only make more threads poll...
const BUSY_PERCENT: u64 = 50;
/// ...and when the new placement's busiest thread has at most this fraction (in %) of
/// the current one's load: below that, moving costs more than it gains.
const IMPROVEMENT_PERCENT: u64 = 85;

/// Functions joined by their traffic (union-find with path halving).
struct Groups(Vec<usize>);

impl Groups {
    fn new(n: usize) -> Self {
        Self((0..n).collect())
    }

    fn root(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    fn join(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            // The smaller index is the root, so groups come out in function order.
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// The heaviest thread's load under `placement`.
fn max_load(placement: &[usize], threads: usize, busy: &[u64]) -> u64 {
    let mut load = vec![0u64; threads];
    for (f, &t) in placement.iter().enumerate() {
        load[t] += busy.get(f).copied().unwrap_or(0);
    }
    load.into_iter().max().unwrap_or(0)
}

/// A better placement than `current` for what `activity` shows, or `None` to keep it.
///
/// Functions linked by traffic form groups, which go whole to one thread each, the
/// heaviest group first onto the least loaded thread (preferring, among equally loaded
/// threads, the one that already runs most of the group, so that little moves). Idle
/// functions that nothing links stay where they are. The result is taken when the
/// current placement splits a group across threads, or when the busiest thread is busy
/// half of the time or more and the new placement lowers its load by at least 15%.
pub fn rebalance(current: &[usize], threads: usize, activity: &Activity) -> Option<Vec<usize>> {
    let n = current.len();
    if threads < 2 || n == 0 || current.iter().any(|&t| t >= threads) {
        return None;
    }
    let busy = |f: usize| activity.busy.get(f).copied().unwrap_or(0);
    let total_packets: u64 = activity.traffic.iter().map(|&(_, _, p)| p).sum();
    let link_min = (total_packets / LINK_SHARE).max(1);
    let mut groups = Groups::new(n);
    let mut linked = vec![false; n];
    for &(a, b, packets) in &activity.traffic {
        if a < n && b < n && a != b && packets >= link_min {
            groups.join(a, b);
            linked[a] = true;
            linked[b] = true;
        }
    }
    // The groups that take part: anything busy or linked.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (f, &linked) in linked.iter().enumerate() {
        if busy(f) > 0 || linked {
            let r = groups.root(f);
            members[r].push(f);
        }
    }
    let mut active: Vec<(u64, Vec<usize>)> = members
        .into_iter()
        .filter(|m| !m.is_empty())
        .map(|m| (m.iter().map(|&f| busy(f)).sum(), m))
        .collect();
    if active.is_empty() {
        return None;
    }
    let split = active
        .iter()
        .any(|(_, m)| m.iter().any(|&f| current[f] != current[m[0]]));
    // Heaviest first; among equals, function order (the members are in order).
    active.sort_by(|a, b| b.0.cmp(&a.0).then(a.1[0].cmp(&b.1[0])));
    let mut next = current.to_vec();
    let mut load = vec![0u64; threads];
    for (g_load, m) in &active {
        let here = |t: usize| -> u64 {
            m.iter()
                .filter(|&&f| current[f] == t)
                .map(|&f| busy(f) + 1)
                .sum()
        };
        let t = (0..threads)
            .min_by(|&a, &b| load[a].cmp(&load[b]).then(here(b).cmp(&here(a))))
            .unwrap_or(0);
        load[t] += g_load;
        for &f in m {
            next[f] = t;
        }
    }
    if next == current {
        return None;
    }
    let (before, after) = (
        max_load(current, threads, &activity.busy),
        max_load(&next, threads, &activity.busy),
    );
    let busy_enough = before.saturating_mul(100) >= activity.period_ns.saturating_mul(BUSY_PERCENT);
    let better = after.saturating_mul(100) <= before.saturating_mul(IMPROVEMENT_PERCENT);
    (split || (busy_enough && better)).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The activity of a period of 1000 ns.
    fn activity(busy: &[u64], traffic: &[(usize, usize, u64)]) -> Activity {
        Activity {
            period_ns: 1000,
            busy: busy.to_vec(),
            traffic: traffic.to_vec(),
        }
    }

    #[test]
    fn initial_placements() {
        assert_eq!(initial(5, 2, Placement::Auto), vec![0, 0, 0, 1, 1]);
        assert_eq!(initial(5, 2, Placement::Spread), vec![0, 1, 0, 1, 0]);
        assert_eq!(
            initial(9, 4, Placement::Auto),
            vec![0, 0, 0, 1, 1, 2, 2, 3, 3]
        );
        assert_eq!(initial(3, 1, Placement::Auto), vec![0, 0, 0]);
        assert_eq!(initial(3, 0, Placement::Spread), vec![0, 0, 0]);
        assert_eq!("spread".parse::<Placement>(), Ok(Placement::Spread));
        assert!("fast".parse::<Placement>().is_err());
    }

    #[test]
    fn a_pair_split_across_threads_is_brought_together() {
        // VF0 (1) and VF1 (2) talk, on different threads.
        let a = activity(&[0, 500, 700], &[(1, 2, 1000), (2, 1, 900)]);
        let next = rebalance(&[0, 1, 0], 2, &a).expect("the pair is split");
        assert_eq!(next[1], next[2]);
        // The pair goes where most of its load already is: thread 0, with VF1.
        assert_eq!(next, vec![0, 0, 0]);
    }

    #[test]
    fn two_busy_pairs_on_one_thread_get_a_thread_each() {
        // Pairs (1,2) and (3,4) all on thread 0, thread 1 idle.
        let a = activity(
            &[0, 400, 600, 450, 550],
            &[(1, 2, 800), (2, 1, 800), (3, 4, 800), (4, 3, 800)],
        );
        let next = rebalance(&[0, 0, 0, 0, 0], 2, &a).expect("one thread does all");
        assert_eq!(next[1], next[2]);
        assert_eq!(next[3], next[4]);
        assert_ne!(next[1], next[3]);
        // The idle PF stays.
        assert_eq!(next[0], 0);
    }

    #[test]
    fn a_balanced_placement_stays() {
        let a = activity(
            &[0, 400, 600, 450, 550],
            &[(1, 2, 800), (2, 1, 800), (3, 4, 800), (4, 3, 800)],
        );
        assert_eq!(rebalance(&[0, 0, 0, 1, 1], 2, &a), None);
        // Idle: nothing to act on.
        assert_eq!(rebalance(&[0, 1, 0], 2, &activity(&[0, 0, 0], &[])), None);
    }

    #[test]
    fn a_small_gain_does_not_move_anything() {
        // Three independent busy functions on two threads: 500+450 against 400. The best
        // split is 500 against 450+400 = 850: no better than 950 by 15%.
        let a = activity(&[500, 450, 400], &[]);
        assert_eq!(rebalance(&[0, 0, 1], 2, &a), None);
        // But 900+400 against 0 is worth moving.
        assert!(rebalance(&[0, 0, 0], 2, &activity(&[900, 400, 0], &[])).is_some());
    }

    #[test]
    fn a_trickle_beside_heavy_traffic_binds_nothing() {
        // 10 packets between 1 and 3, under 1% of all: 1 and 3 may part.
        let a = activity(
            &[0, 500, 500, 500, 500],
            &[(1, 2, 5000), (3, 4, 5000), (1, 3, 10)],
        );
        let next = rebalance(&[0, 0, 0, 0, 0], 2, &a).expect("unbalanced");
        assert_ne!(next[1], next[3]);
        // Alone, a few packets do bind: a slow ping-pong is a pair too.
        let a = activity(&[0, 100, 100], &[(1, 2, 3), (2, 1, 3)]);
        let next = rebalance(&[0, 0, 1], 2, &a).expect("split");
        assert_eq!(next[1], next[2]);
    }

    #[test]
    fn light_work_is_not_spread() {
        // Two independent functions, together 40% of the period on one thread: one
        // thread keeps up, so the other may sleep.
        let a = activity(&[0, 200, 200], &[]);
        assert_eq!(rebalance(&[0, 0, 0], 2, &a), None);
        // At 100% they part.
        let a = activity(&[0, 500, 500], &[]);
        let next = rebalance(&[0, 0, 0], 2, &a).expect("busy");
        assert_ne!(next[1], next[2]);
    }

    #[test]
    fn a_chain_of_traffic_stays_on_one_thread() {
        // 1-2-3 all talk: one group, whatever the load.
        let a = activity(&[0, 300, 300, 300], &[(1, 2, 500), (2, 3, 500)]);
        let next = rebalance(&[0, 0, 1, 1], 2, &a).expect("the group is split");
        assert!(next[1] == next[2] && next[2] == next[3]);
    }

    #[test]
    fn bad_input_changes_nothing() {
        let a = activity(&[5, 5], &[(0, 7, 100), (9, 1, 100)]);
        assert_eq!(rebalance(&[0, 1], 1, &a), None);
        assert_eq!(rebalance(&[0, 3], 2, &a), None);
        assert_eq!(rebalance(&[], 2, &a), None);
    }
}
