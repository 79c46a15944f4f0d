//! The switch's ports as the engine's threads see them: each port's inbox, which any
//! thread may fill and the thread running the port's function empties
//! (docs/hardware-interface.md §7.12, §4.7).
//!
//! The inboxes and the forwarding table ([`super::route`]) live outside the switch's lock
//! so that, when nothing watches the switch (no capture, no fault injector), a thread
//! forwards a frame between two functions of the device with one lock of the
//! destination's inbox and a lookup in its own copy of the table, however many threads
//! run; the switch's lock is left to what is shared by nature (the capture, the fault
//! injector, the uplink). See [`super::switch`].
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::frame::Frame;

/// The inboxes of a switch's ports.
#[derive(Debug)]
pub struct Inboxes {
    queues: Vec<Mutex<VecDeque<Frame>>>,
    /// Per port: whether its queue may hold frames, read without the lock by whoever
    /// looks for work (set under the lock when a frame goes in, cleared when taken).
    waiting: Vec<AtomicBool>,
}

impl Inboxes {
    /// Empty inboxes for `ports` ports.
    pub fn new(ports: usize) -> Self {
        Self {
            queues: (0..ports).map(|_| Mutex::new(VecDeque::new())).collect(),
            waiting: (0..ports).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// How many ports there are.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether there are no ports.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    fn queue(&self, port: usize) -> Option<MutexGuard<'_, VecDeque<Frame>>> {
        self.queues
            .get(port)
            .map(|q| q.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Appends `frame` to port `port`'s inbox; returns whether the inbox was empty (so
    /// that whoever serves the port may need waking). A port that does not exist takes
    /// nothing (and the frame is dropped: the caller checked the port).
    pub fn push(&self, port: usize, frame: Frame) -> bool {
        let Some(mut q) = self.queue(port) else {
            return false;
        };
        let was_empty = q.is_empty();
        q.push_back(frame);
        self.waiting[port].store(true, Ordering::Release);
        was_empty
    }

    /// Takes every frame waiting at `port`, in order.
    pub fn take(&self, port: usize) -> VecDeque<Frame> {
        if !self.is_waiting(port) {
            return VecDeque::new();
        }
        let Some(mut q) = self.queue(port) else {
            return VecDeque::new();
        };
        self.waiting[port].store(false, Ordering::Release);
        std::mem::take(&mut *q)
    }

    /// Whether frames may wait at `port`.
    pub fn is_waiting(&self, port: usize) -> bool {
        self.waiting
            .get(port)
            .is_some_and(|w| w.load(Ordering::Acquire))
    }

    /// Moves the frames at every port but `to` that `pick` selects to `to`, keeping
    /// their order; returns whether `to`'s inbox was empty and received any.
    pub fn move_to(&self, to: usize, pick: impl Fn(&Frame) -> bool) -> bool {
        let mut moved = VecDeque::new();
        for port in (0..self.len()).filter(|&p| p != to) {
            let Some(mut q) = self.queue(port) else {
                continue;
            };
            let (theirs, stay): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(&pick);
            *q = stay;
            if q.is_empty() {
                self.waiting[port].store(false, Ordering::Release);
            }
            moved.extend(theirs);
        }
        let mut fresh = false;
        for frame in moved {
            fresh |= self.push(to, frame);
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8) -> Frame {
        Frame::unsealed(vec![tag; 64])
    }

    #[test]
    fn inboxes_keep_order_and_say_when_they_were_empty() {
        let inboxes = Inboxes::new(2);
        assert!(!inboxes.is_waiting(0));
        assert!(inboxes.push(0, frame(1)));
        assert!(!inboxes.push(0, frame(2)));
        assert!(inboxes.is_waiting(0) && !inboxes.is_waiting(1));
        let got: Vec<u8> = inboxes.take(0).iter().map(|f| f.bytes[0]).collect();
        assert_eq!(got, [1, 2]);
        assert!(!inboxes.is_waiting(0));
        assert!(inboxes.take(0).is_empty());
        // A port that is not there takes nothing and panics on nothing.
        assert!(!inboxes.push(7, frame(3)));
        assert!(inboxes.take(7).is_empty());
    }

    #[test]
    fn moving_frames_keeps_their_order() {
        let inboxes = Inboxes::new(3);
        for tag in [1, 2, 3, 4] {
            inboxes.push(0, frame(tag));
        }
        inboxes.push(1, frame(5));
        assert!(inboxes.move_to(2, |f| f.bytes[0] % 2 == 1));
        let at = |p| -> Vec<u8> { inboxes.take(p).iter().map(|f| f.bytes[0]).collect() };
        assert_eq!(at(2), [1, 3, 5]);
        assert_eq!(at(0), [2, 4]);
        assert!(!inboxes.is_waiting(1));
    }
}
