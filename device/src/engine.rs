//! The device's event loop: it finds work by polling doorbells while there is work, and
//! sleeps in epoll (through `event-manager`) when there is none, after asking drivers to
//! kick it (see `rnic_abi::doorbell`). With a network (`--net`) it also sleeps on the
//! functions' receive sockets, and drains them on every pass.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_manager::{EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::eventfd::EventFd;

use crate::rdma::switch::AddressTable;

use crate::admin::AdminContext;
use crate::function::{Function, PollOutcome, Port};
use crate::net::faults::{FaultInjector, FaultSpec};
use crate::pcap::PcapWriter;
use crate::rdma::switch::{Switch, Uplink};

/// Datagrams taken from each function's receive socket per pass, so that a flood on one
/// does not starve the others or the doorbells.
const UPLINK_BUDGET: usize = 256;

/// Idle passes in the poll window between two looks at the eventfds.
const EVENT_CHECK_PASSES: u32 = 32;

/// Drains the wake-up eventfds; the loop itself decides what to do after a wake-up.
struct Wakeups {
    functions: Vec<Arc<Function>>,
    /// The uplink's receive sockets: watched, never read here (epoll is level-triggered,
    /// so they stay readable until the loop drains them into the switch).
    sockets: Vec<RawFd>,
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
}

const STOP: u32 = u32::MAX;
/// Event data of socket i: SOCKET | i.
const SOCKET: u32 = 1 << 31;

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
        for (i, fd) in self.sockets.iter().enumerate() {
            if let Err(e) = ops.add(Events::with_data(fd, SOCKET | i as u32, EventSet::IN)) {
                log::error!("cannot watch receive socket {i} (fd {fd}): {e}");
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
        if events.data() & SOCKET != 0 {
            // Datagrams arrived; the loop reads them.
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
    neighbors: AddressTable,
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

    /// Makes every frame the switch forwards go through a fault injector of `spec`
    /// (`--net-faults`); `None` or a spec that changes nothing leaves the switch perfect.
    pub fn with_faults(mut self, spec: Option<FaultSpec>) -> Self {
        if let Some(spec) = spec.filter(|s| !s.is_noop()) {
            log::info!("injecting network faults: {spec}");
            self.switch.set_faults(FaultInjector::new(spec));
        }
        self
    }

    /// Connects the switch to a network (`--net`): frames for other addresses go to
    /// `uplink`, and the engine sleeps on and drains its receive sockets.
    pub fn with_uplink(mut self, uplink: Option<Box<dyn Uplink>>) -> Self {
        if let Some(uplink) = uplink {
            self.switch.set_uplink(uplink);
        }
        self
    }

    /// A handle that stops the engine.
    pub fn handle(&self) -> EngineHandle {
        EngineHandle {
            stop: self.stop.clone(),
        }
    }

    /// Runs the admin queues: the PF's through [`AdminContext`], with the whole device at
    /// hand; a VF's answers `NotPermitted` to everything. No function's state is locked
    /// here; the commands lock what they touch.
    fn run_admin_queues(&mut self) -> bool {
        let mut progress = false;
        let Some((pf, vfs)) = self.functions.split_first() else {
            return false;
        };
        let pool = pf.pool().clone();
        let mut ctx = AdminContext {
            functions: &self.functions,
            switch: &mut self.switch,
            neighbors: &mut self.neighbors,
            pool: &pool,
        };
        progress |= pf.run_admin(|h, body, room| ctx.execute(h, body, room));
        for vf in vfs {
            progress |= vf.run_admin(|h, _, _| crate::admin::not_permitted(h));
        }
        progress
    }

    /// Gives every function its turn; returns whether any worked, and the earliest timer.
    fn poll_all(&mut self) -> PollOutcome {
        let now = Instant::now();
        // Frames the fault injector held (reordered, delayed) that are due now.
        self.switch.release_due(now);
        let mut all = PollOutcome::default();
        // Admin commands first: a function's own pass below consumes its kick.
        all.progress |= self.run_admin_queues();
        // Datagrams from the network, into the inboxes of their functions.
        all.progress |= self.switch.poll_uplink(UPLINK_BUDGET) > 0;
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
        // What the functions sent to the network in this pass goes out together.
        self.switch.flush_uplink();
        // Frames sent to functions that already had their turn are work for the next.
        all.progress |= self.switch.busy();
        // Held frames wake the engine when they are due, as transport timers do.
        all.deadline = match (all.deadline, self.switch.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
            sockets: self.switch.uplink_fds(),
            stop: self.stop.clone(),
            stopping: self.stopping.clone(),
        }));
        log::debug!(
            "engine running over {} functions (stop fd {})",
            self.functions.len(),
            self.stop.as_raw_fd()
        );
        let mut last_work = Instant::now();
        let mut idle_passes = 0u32;
        while !self.stopping.load(Ordering::Acquire) {
            let outcome = self.poll_all();
            if outcome.progress {
                last_work = Instant::now();
                continue;
            }
            if last_work.elapsed() < self.poll_window {
                // The eventfds only matter for a stop request while polling (kicks are
                // not asked for): look at them now and then, not at every pass.
                idle_passes += 1;
                if idle_passes.is_multiple_of(EVENT_CHECK_PASSES) {
                    em.run_with_timeout(0)?;
                }
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
        if let Some(c) = self.switch.fault_counters() {
            log::info!("network faults: {c}");
        }
        if let Some(report) = self.switch.uplink_report() {
            log::info!("network: {report}");
            // The same counters as GET_PORT_STATS reads them, by their names there.
            let p = self.switch.port_stats();
            let counters: Vec<String> = p.named().iter().map(|(n, v)| format!("{n} {v}")).collect();
            log::info!("port ({}): {}", p.kind_name(), counters.join(" "));
        }
        log::debug!("engine stopped");
        Ok(())
    }
}

/// What a harness needs to drive the engine itself, one pass at a time, in one thread (the
/// fuzz targets of `fuzz/`): the same passes [`Engine::run`] makes, without its sleeping.
#[cfg(feature = "fuzzing")]
impl Engine {
    /// One pass over every function, as [`Engine::run`] makes between its sleeps: admin
    /// queues, the uplink, then each function's commands, frames, send queues and timers.
    pub fn step(&mut self) -> PollOutcome {
        self.poll_all()
    }

    /// The device's switch, for frames that arrive from outside as a network's would.
    pub fn switch_mut(&mut self) -> &mut Switch {
        &mut self.switch
    }
}
