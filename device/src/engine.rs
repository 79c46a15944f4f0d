//! The device's event loop: it finds work by polling doorbells while there is work, and
//! sleeps in epoll (through `event-manager`) when there is none, after asking drivers to
//! kick it (see `rnic_abi::doorbell`).

use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_manager::{EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::eventfd::EventFd;

use std::collections::HashMap;

use crate::function::{Function, PollOutcome, Port};
use crate::pcap::PcapWriter;
use crate::rdma::switch::Switch;

/// Drains the wake-up eventfds; the loop itself decides what to do after a wake-up.
struct Wakeups {
    functions: Vec<Arc<Function>>,
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
}

const STOP: u32 = u32::MAX;

impl MutEventSubscriber for Wakeups {
    fn init(&mut self, ops: &mut EventOps) {
        for (i, f) in self.functions.iter().enumerate() {
            if let Err(e) = ops.add(Events::with_data(f.wake_fd(), i as u32, EventSet::IN)) {
                log::error!(
                    "cannot watch the wake-up eventfd of {}: {e}",
                    f.identity().id
                );
            }
        }
        if let Err(e) = ops.add(Events::with_data(self.stop.as_ref(), STOP, EventSet::IN)) {
            log::error!("cannot watch the stop eventfd: {e}");
        }
    }

    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        if events.data() == STOP {
            self.stopping.store(true, Ordering::Release);
            return;
        }
        if let Some(f) = self.functions.get(events.data() as usize) {
            // Non-blocking: a spurious wake-up reads EAGAIN, which is fine.
            let _ = f.wake_fd().read();
        }
    }
}

/// Stops a running engine from another thread.
#[derive(Clone)]
pub struct EngineHandle {
    stop: Arc<EventFd>,
}

impl EngineHandle {
    /// Asks the engine to return from [`Engine::run`].
    pub fn stop(&self) {
        let _ = self.stop.write(1);
    }
}

/// The event loop over all functions of a device.
pub struct Engine {
    functions: Vec<Arc<Function>>,
    switch: Switch,
    neighbors: HashMap<[u8; 4], [u8; 6]>,
    poll_window: Duration,
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
}

impl Engine {
    /// An engine over `functions` that keeps polling for `poll_window` after the last work
    /// before it sleeps.
    pub fn new(
        functions: Vec<Arc<Function>>,
        poll_window: Duration,
        pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    ) -> std::io::Result<Self> {
        let switch = Switch::new(functions.iter().map(|f| f.endpoint()).collect(), pcap);
        let neighbors = switch.neighbors();
        Ok(Self {
            functions,
            switch,
            neighbors,
            poll_window,
            stop: Arc::new(EventFd::new(libc::EFD_NONBLOCK)?),
            stopping: Arc::new(AtomicBool::new(false)),
        })
    }

    /// A handle that stops the engine.
    pub fn handle(&self) -> EngineHandle {
        EngineHandle {
            stop: self.stop.clone(),
        }
    }

    /// Gives every function its turn; returns whether any worked, and the earliest timer.
    fn poll_all(&mut self) -> PollOutcome {
        let now = Instant::now();
        let mut all = PollOutcome::default();
        for (index, f) in self.functions.iter().enumerate() {
            let mut port = Port {
                switch: &mut self.switch,
                index,
                neighbors: &self.neighbors,
            };
            let o = f.run(&mut port, now);
            all.progress |= o.progress;
            all.deadline = match (all.deadline, o.deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        // Frames sent to functions that already had their turn are work for the next.
        all.progress |= self.switch.busy();
        all
    }

    fn request_notify(&self, on: bool) {
        self.functions.iter().for_each(|f| f.request_notify(on));
    }

    /// Runs until stopped.
    pub fn run(mut self) -> Result<(), event_manager::Error> {
        let mut em: EventManager<Box<dyn MutEventSubscriber + Send>> = EventManager::new()?;
        em.add_subscriber(Box::new(Wakeups {
            functions: self.functions.clone(),
            stop: self.stop.clone(),
            stopping: self.stopping.clone(),
        }));
        log::debug!(
            "engine running over {} functions (stop fd {})",
            self.functions.len(),
            self.stop.as_raw_fd()
        );
        let mut last_work = Instant::now();
        while !self.stopping.load(Ordering::Acquire) {
            let outcome = self.poll_all();
            if outcome.progress {
                last_work = Instant::now();
                continue;
            }
            if last_work.elapsed() < self.poll_window {
                em.run_with_timeout(0)?;
                std::thread::yield_now();
                continue;
            }
            // Going idle: ask for kicks, then look once more, so that a doorbell rung just
            // before the request was visible is not missed (the driver fences between its
            // doorbell write and its read of the request).
            self.request_notify(true);
            fence(Ordering::SeqCst);
            let outcome = self.poll_all();
            if !outcome.progress {
                match outcome.deadline {
                    // Sleep until the next transport timer, or until kicked.
                    Some(at) => {
                        let ms = at
                            .saturating_duration_since(Instant::now())
                            .as_millis()
                            .clamp(1, i32::MAX as u128) as i32;
                        em.run_with_timeout(ms)?;
                    }
                    None => {
                        em.run()?;
                    }
                }
            }
            self.request_notify(false);
            last_work = Instant::now();
        }
        log::debug!("engine stopped");
        Ok(())
    }
}
