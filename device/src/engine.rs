//! The device's event loop: it finds work by polling doorbells while there is work, and
//! sleeps in epoll (through `event-manager`) when there is none, after asking drivers to
//! kick it (see `rnic_abi::doorbell`).

use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_manager::{EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::eventfd::EventFd;

use crate::function::Function;

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
    poll_window: Duration,
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
}

impl Engine {
    /// An engine over `functions` that keeps polling for `poll_window` after the last work
    /// before it sleeps.
    pub fn new(functions: Vec<Arc<Function>>, poll_window: Duration) -> std::io::Result<Self> {
        Ok(Self {
            functions,
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

    fn poll_all(&self) -> bool {
        // Every function gets its turn: no short-circuit.
        self.functions.iter().fold(false, |any, f| f.poll() | any)
    }

    fn request_notify(&self, on: bool) {
        self.functions.iter().for_each(|f| f.request_notify(on));
    }

    /// Runs until stopped.
    pub fn run(self) -> Result<(), event_manager::Error> {
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
            if self.poll_all() {
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
            if !self.poll_all() {
                em.run()?;
            }
            self.request_notify(false);
            last_work = Instant::now();
        }
        log::debug!("engine stopped");
        Ok(())
    }
}
