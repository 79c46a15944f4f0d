//! What the engine's threads share: the functions, the switch, the placement of functions
//! on threads, each thread's wake-up, and the quiescing under which admin commands and
//! placement changes run (see [`super`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::EventFd;

use super::balance::Placement;
use crate::fabric::switch::Switch;
use crate::function::Function;

/// Locks `m`, whatever a panicking holder left: every structure behind the engine's
/// locks is consistent between the statements that change it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a worker thread shares with the others.
pub(super) struct Slot {
    /// Wakes the thread when it sleeps; functions placed on it kick it through this.
    pub(super) wake: Arc<EventFd>,
    /// Set while the thread is about to sleep or sleeping: whoever gives it a frame then
    /// writes `wake`.
    pub(super) sleeping: AtomicBool,
    /// Held by the thread during each pass; [`Shared::quiesce`] takes it to keep the
    /// thread between passes.
    pub(super) pass: Mutex<()>,
}

/// What all engine threads share.
pub(super) struct Shared {
    pub(super) functions: Vec<Arc<Function>>,
    pub(super) switch: Mutex<Switch>,
    pub(super) poll_window: Duration,
    pub(super) stop: Arc<EventFd>,
    pub(super) stopping: Arc<AtomicBool>,
    pub(super) workers: Vec<Slot>,
    pub(super) policy: Placement,
    /// The thread of each function, and its version (bumped at every change).
    pub(super) placement: Mutex<Vec<usize>>,
    pub(super) placement_version: AtomicU64,
    /// Bumped after admin commands ran: addresses may have changed.
    pub(super) admin_version: AtomicU64,
    /// One quiescing thread at a time.
    pub(super) control: Mutex<()>,
    /// Per function: nanoseconds of work since the balancer last looked.
    pub(super) busy: Vec<AtomicU64>,
    /// When the balancer last looked; held while it looks.
    pub(super) last_balance: Mutex<Instant>,
    /// Packets the threads forwarded between functions (from, to) since the balancer
    /// last looked, beside what the switch counted itself.
    pub(super) traffic: Mutex<HashMap<(usize, usize), u64>>,
}

/// Every other worker held between passes, and the switch: what admin commands and
/// placement changes run under.
pub(super) struct Quiet<'a> {
    pub(super) switch: MutexGuard<'a, Switch>,
    pub(super) _passes: Vec<MutexGuard<'a, ()>>,
    pub(super) _control: MutexGuard<'a, ()>,
}

impl Shared {
    /// Waits until every worker but `me` is between passes and keeps them there while
    /// the result lives. `me` must not be in a pass itself.
    pub(super) fn quiesce(&self, me: usize) -> Quiet<'_> {
        let control = lock(&self.control);
        let passes = self
            .workers
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != me)
            .map(|(_, w)| lock(&w.pass))
            .collect();
        Quiet {
            switch: lock(&self.switch),
            _passes: passes,
            _control: control,
        }
    }

    /// Wakes worker `w` if it sleeps or is about to.
    pub(super) fn wake_if_sleeping(&self, w: usize) {
        if let Some(slot) = self.workers.get(w) {
            if slot.sleeping.load(Ordering::SeqCst) {
                let _ = slot.wake.write(1);
            }
        }
    }

    /// Wakes every worker but `me`, so that each looks at its functions again.
    pub(super) fn wake_others(&self, me: usize) {
        for (i, slot) in self.workers.iter().enumerate() {
            if i != me {
                let _ = slot.wake.write(1);
            }
        }
    }

    /// Points each function's kicks at the worker it is placed on.
    pub(super) fn set_wakers(&self, placement: &[usize]) {
        for (f, &w) in self.functions.iter().zip(placement) {
            f.set_waker(self.workers[w].wake.clone());
        }
    }
}
