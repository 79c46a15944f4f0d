//! The device's engine: the threads that find and do the functions' work, as a NIC's
//! processing units do.
//!
//! Each engine thread (a `worker`) runs the functions placed on it (`balance`): in a
//! *pass* it gives each of them a turn (commands, frames that arrived, rung send queues,
//! due timers) and forwards what they sent through the device's switch, which all
//! threads share behind a lock. A thread polls doorbells while it has work and sleeps
//! in epoll (through `event-manager`) when it has none, after asking its functions'
//! drivers to kick it (see `rnic_abi::doorbell`); a frame sent to a function of a
//! sleeping thread wakes that thread. With a network (`--net`), thread 0 also sleeps on
//! and drains the uplink's receive sockets.
//!
//! Guarantees across threads: a function runs on one thread at a time (its state is one
//! lock) and its frames arrive in the order they were sent, so order within a QP and
//! one completion per work request hold as in one thread. The PF's admin commands, which
//! act on any function and on the switch, and the moves of functions between threads
//! run while every other thread is between passes (`Shared::quiesce`): no frame is
//! then anywhere but in the switch, so a QP that migrates takes all of its traffic with
//! it, as with one thread.

mod balance;
mod shared;
mod worker;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "stepping")]
use std::sync::MutexGuard;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::EventFd;

use crate::fabric::faults::{FaultInjector, FaultSpec};
use crate::fabric::switch::Switch;
use crate::fabric::uplink::Uplink;
use crate::function::Function;
use crate::pcap::PcapWriter;

pub use balance::{Activity, Placement};
use shared::{lock, Shared, Slot};
use worker::Worker;

/// Stops a running engine from another thread.
#[derive(Clone)]
pub struct EngineHandle {
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
}

impl EngineHandle {
    /// Asks every engine thread to finish its pass and return: a busy thread sees the
    /// flag after its pass, a sleeping one wakes on the eventfd.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.stop.write(1);
    }
}

/// The engine before it runs: the functions, the switch between them, and how many
/// threads will run them.
pub struct Engine {
    functions: Vec<Arc<Function>>,
    switch: Switch,
    poll_window: Duration,
    threads: usize,
    policy: Placement,
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
    /// The single worker of [`Engine::step`].
    #[cfg(feature = "stepping")]
    stepper: Option<Worker>,
}

/// The thread count that suits this machine and `functions` functions: one per core,
/// no more than there are functions (a thread serves at least one).
pub fn default_threads(functions: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(functions).max(1)
}

impl Engine {
    /// An engine over `functions` whose threads keep polling for `poll_window` after
    /// their last work before they sleep; one thread until [`Engine::with_threads`].
    pub fn new(
        functions: Vec<Arc<Function>>,
        poll_window: Duration,
        pcap: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    ) -> io::Result<Self> {
        let switch = Switch::new(functions.iter().map(|f| f.endpoint()).collect(), pcap);
        Ok(Self {
            functions,
            switch,
            poll_window,
            threads: 1,
            policy: Placement::Auto,
            stop: Arc::new(EventFd::new(libc::EFD_NONBLOCK)?),
            stopping: Arc::new(AtomicBool::new(false)),
            #[cfg(feature = "stepping")]
            stepper: None,
        })
    }

    /// Runs the functions on `threads` threads (at most one per function), placed by
    /// `policy`.
    pub fn with_threads(mut self, threads: usize, policy: Placement) -> Self {
        self.threads = threads.clamp(1, self.functions.len().max(1));
        self.policy = policy;
        self
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
    /// `uplink`, and thread 0 sleeps on and drains its receive sockets.
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
            stopping: self.stopping.clone(),
        }
    }

    /// The state the workers share, with every function placed.
    fn into_shared(self) -> io::Result<Arc<Shared>> {
        let threads = self.threads;
        let placement = balance::initial(self.functions.len(), threads, self.policy);
        let workers = (0..threads)
            .map(|_| {
                Ok(Slot {
                    wake: Arc::new(EventFd::new(libc::EFD_NONBLOCK)?),
                    sleeping: AtomicBool::new(false),
                    pass: Mutex::new(()),
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        let busy = self.functions.iter().map(|_| AtomicU64::new(0)).collect();
        let mut switch = self.switch;
        // Only the balancer reads the traffic between ports.
        switch.count_traffic(self.policy == Placement::Auto && threads > 1);
        let shared = Shared {
            functions: self.functions,
            switch: Mutex::new(switch),
            poll_window: self.poll_window,
            stop: self.stop,
            stopping: self.stopping,
            workers,
            policy: self.policy,
            placement: Mutex::new(placement.clone()),
            placement_version: AtomicU64::new(1),
            admin_version: AtomicU64::new(0),
            control: Mutex::new(()),
            busy,
            last_balance: Mutex::new(Instant::now()),
            traffic: Mutex::new(HashMap::new()),
        };
        shared.set_wakers(&placement);
        Ok(Arc::new(shared))
    }

    /// Starts the engine's threads (`engine-0`, `engine-1`, ...).
    pub fn spawn(self) -> io::Result<RunningEngine> {
        let stop = self.handle();
        let threads = self.threads;
        let policy = self.policy;
        let shared = self.into_shared()?;
        let functions = shared.functions.len();
        let mut running = RunningEngine {
            stop,
            threads: Vec::new(),
            shared: shared.clone(),
        };
        for index in 0..threads {
            let worker = Worker::new(index, shared.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("engine-{index}"))
                .spawn(move || {
                    if let Err(e) = worker.run() {
                        log::error!("engine thread {index} failed: {e}");
                    }
                });
            match spawned {
                Ok(t) => running.threads.push(t),
                Err(e) => {
                    running.stop_and_join();
                    return Err(e);
                }
            }
        }
        log::info!(
            "engine: {threads} thread{} over {functions} functions, placement {policy}",
            if threads == 1 { "" } else { "s" },
        );
        Ok(running)
    }
}

/// The engine's threads, running.
pub struct RunningEngine {
    stop: EngineHandle,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl RunningEngine {
    /// A handle that stops the engine.
    pub fn handle(&self) -> EngineHandle {
        self.stop.clone()
    }

    /// Stops every thread, waits for them, and logs what the switch saw (fault and
    /// network counters).
    pub fn stop_and_join(&mut self) {
        self.stop.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.log_switch_counters();
        log::debug!("engine stopped");
    }

    /// Logs what the switch saw so far: the fault injector's and the network port's
    /// counters (at stop, and on rnicd's SIGUSR1).
    pub fn log_switch_counters(&self) {
        let switch = lock(&self.shared.switch);
        if let Some(c) = switch.fault_counters() {
            log::info!("network faults: {c}");
        }
        if let Some(report) = switch.uplink_report() {
            log::info!("network: {report}");
            // The same counters as GET_PORT_STATS reads them, by their names there.
            let p = switch.port_stats();
            let counters: Vec<String> = p.named().iter().map(|(n, v)| format!("{n} {v}")).collect();
            log::info!("port ({}): {}", p.kind_name(), counters.join(" "));
        }
    }

    /// Makes the capture continue into `pcap` (see [`Switch::replace_capture`]); false
    /// if the engine has no capture.
    pub fn replace_capture(&self, pcap: PcapWriter<std::io::BufWriter<std::fs::File>>) -> bool {
        lock(&self.shared.switch).replace_capture(pcap)
    }

    /// A read-only view of the switch, for the control socket.
    pub fn switch_view(&self) -> SwitchView {
        SwitchView(self.shared.clone())
    }

    /// The thread each function runs on now (index: member).
    pub fn placement(&self) -> Vec<usize> {
        lock(&self.shared.placement).clone()
    }
}

/// The switch of a running engine, read from another thread: the network port's counters
/// and the fault injector's ([`RunningEngine::switch_view`]). Each read holds the switch's
/// lock for a copy, no longer.
#[derive(Clone)]
pub struct SwitchView(Arc<Shared>);

impl SwitchView {
    /// GET_PORT_STATS's counters.
    pub fn port_stats(&self) -> rnic_abi::admin::PortStats {
        lock(&self.0.switch).port_stats()
    }

    /// What fault injection did so far, by name; `None` without it.
    pub fn fault_counters(&self) -> Option<Vec<(&'static str, u64)>> {
        lock(&self.0.switch)
            .fault_counters()
            .map(|c| c.named().to_vec())
    }
}

impl Drop for RunningEngine {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop_and_join();
        }
    }
}

/// What a harness needs to drive the engine itself, one pass at a time, in one thread
/// (rnic-harness, for the fuzz targets and the labs): the same passes a single engine thread makes, without its
/// sleeping.
#[cfg(feature = "stepping")]
impl Engine {
    /// The one worker that [`Engine::step`] drives, made at the first call from the
    /// engine as configured so far.
    fn stepper(&mut self) -> &mut Worker {
        let functions = self.functions.clone();
        let stop = self.stop.clone();
        let stopping = self.stopping.clone();
        let poll_window = self.poll_window;
        let switch = &mut self.switch;
        self.stepper.get_or_insert_with(|| {
            let engine = Engine {
                functions,
                switch: std::mem::replace(switch, Switch::new(Vec::new(), None)),
                poll_window,
                threads: 1,
                policy: Placement::Auto,
                stop,
                stopping,
                stepper: None,
            };
            let shared = engine
                .into_shared()
                .expect("the harness's engine needs its eventfds");
            Worker::new(0, shared)
        })
    }

    /// One pass over every function, as an engine thread makes between its sleeps: the
    /// PF's admin queue, the uplink, then each function's admin queue, commands,
    /// frames, send queues and timers.
    pub fn step(&mut self) -> crate::function::PollOutcome {
        self.stepper().step()
    }

    /// The device's switch, for frames that arrive from outside as a network's would.
    pub fn switch(&mut self) -> MutexGuard<'_, Switch> {
        self.stepper().switch()
    }
}
