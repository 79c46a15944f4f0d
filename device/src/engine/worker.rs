//! One engine thread: passes over the functions placed on it while there is work, sleep
//! in epoll when there is none.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
#[cfg(feature = "stepping")]
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use event_manager::{EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::eventfd::EventFd;

use super::balance::{self, Activity, Placement};
use super::shared::{lock, Shared};
use crate::admin::AdminContext;
use crate::fabric::frame::{AddrHash, AddressTable, Frame};
use crate::fabric::inbox::Inboxes;
use crate::fabric::route::{Hop, Route};
use crate::fabric::switch::Switch;
use crate::function::{PollOutcome, Port};

/// Datagrams taken from each function's receive socket per pass, so that a flood on one
/// does not starve the others or the doorbells.
const UPLINK_BUDGET: usize = 256;

/// Idle passes in the poll window between two looks at the eventfds.
const EVENT_CHECK_PASSES: u32 = 32;

/// How often the balancer runs while there is work (on whichever thread has some).
const BALANCE_PERIOD: Duration = Duration::from_millis(50);
/// How often a thread adds the traffic it counted to what the balancer reads.
const TRAFFIC_FLUSH: Duration = Duration::from_millis(5);

const WAKE: u32 = 0;
const STOP: u32 = u32::MAX;
/// Event data of socket i: SOCKET | i.
const SOCKET: u32 = 1 << 31;

/// Drains the thread's wake-up eventfd; the loop itself decides what to do after a
/// wake-up.
struct Wakeups {
    wake: Arc<EventFd>,
    /// The uplink's receive sockets (thread 0 only): watched, never read here (epoll is
    /// level-triggered, so they stay readable until a pass drains them into the switch).
    sockets: Vec<RawFd>,
    shared: Arc<Shared>,
}

impl MutEventSubscriber for Wakeups {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::with_data(self.wake.as_ref(), WAKE, EventSet::IN)) {
            log::error!("cannot watch an engine thread's wake-up eventfd: {e}");
        }
        for (i, fd) in self.sockets.iter().enumerate() {
            if let Err(e) = ops.add(Events::with_data(fd, SOCKET | i as u32, EventSet::IN)) {
                log::error!("cannot watch receive socket {i} (fd {fd}): {e}");
            }
        }
        let stop = self.shared.stop.as_ref();
        if let Err(e) = ops.add(Events::with_data(stop, STOP, EventSet::IN)) {
            log::error!("cannot watch the stop eventfd: {e}");
        }
    }

    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        match events.data() {
            // Never read: it stays readable, so that every thread sees it.
            STOP => self.shared.stopping.store(true, Ordering::Release),
            // Non-blocking: a spurious wake-up reads EAGAIN, which is fine.
            WAKE => {
                let _ = self.wake.read();
            }
            // Datagrams arrived; a pass reads them.
            _ => {}
        }
    }
}

/// What a worker keeps between passes.
struct State {
    index: usize,
    /// The functions placed on this thread, in member order.
    mine: Vec<usize>,
    /// The thread of every function, as of `placement_seen`.
    placement: Vec<usize>,
    placement_seen: u64,
    admin_seen: u64,
    /// IPv4 to MAC of the switch's ports, as of `admin_seen`.
    neighbors: AddressTable,
    /// The switch's forwarding table, as of `admin_seen`.
    route: Route,
    /// Whether a function can have no address but its own (`--net udp`; fixed when the
    /// engine starts).
    own_address_only: bool,
    /// The ports' inboxes.
    inboxes: Arc<Inboxes>,
    /// Frame buffers its functions build with and give back.
    spare: Vec<Vec<u8>>,
    /// Whether nothing watches the switch (no capture, no fault injector; fixed when the
    /// engine starts): then frames between functions go straight into the
    /// destination's inbox, and may be trains.
    direct: bool,
    /// Whether it polls the uplink and releases the fault injector's held frames
    /// (thread 0 of an engine that has either).
    tends_switch: bool,
    /// Whether it took the switch's lock in this pass (for the network or the capture):
    /// then the pass ends with the switch's own end-of-pass work.
    used_switch: bool,
    /// Packets it forwarded directly between ports since it last handed them to the
    /// balancer, and when that was; `None` when nobody balances.
    traffic: Option<HashMap<(usize, usize), u64, AddrHash>>,
    traffic_flushed: Instant,
    /// Whether it asks its functions' drivers for kicks (it is about to sleep).
    notifying: bool,
    /// Ports that received frames in its last pass.
    fresh: Vec<usize>,
}

/// One engine thread.
pub(super) struct Worker {
    shared: Arc<Shared>,
    st: State,
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl State {
    /// Catches up with the placement and with what admin commands changed. Called with
    /// the thread's pass lock held, so that no placement change is half seen.
    fn refresh(&mut self, shared: &Shared) {
        let version = shared.placement_version.load(Ordering::Acquire);
        if version != self.placement_seen {
            self.placement = lock(&shared.placement).clone();
            let mine: Vec<usize> = (0..self.placement.len())
                .filter(|&f| self.placement[f] == self.index)
                .collect();
            for &f in &mine {
                if !self.mine.contains(&f) {
                    // Its drivers kick whoever had it; from now on they kick as we ask.
                    shared.functions[f].request_notify(self.notifying);
                }
            }
            self.mine = mine;
            self.placement_seen = version;
        }
        let admin = shared.admin_version.load(Ordering::Acquire);
        if admin != self.admin_seen {
            let switch = lock(&shared.switch);
            self.neighbors = switch.neighbors();
            self.route = switch.route();
            self.admin_seen = admin;
        }
    }

    /// Asks (or stops asking) the drivers of its functions for kicks.
    fn notify(&mut self, shared: &Shared, on: bool) {
        let _pass = lock(&shared.workers[self.index].pass);
        self.refresh(shared);
        self.notifying = on;
        for &f in &self.mine {
            shared.functions[f].request_notify(on);
        }
    }

    /// Runs the PF's admin queue if the PF is placed here: its commands act on any
    /// function and on the switch, so they run with every other thread between passes.
    fn run_admin(&mut self, shared: &Shared) -> bool {
        if !self.mine.contains(&0) {
            return false;
        }
        let Some(pf) = shared.functions.first() else {
            return false;
        };
        let pool = pf.pool().clone();
        let me = self.index;
        let mut quiet = None;
        let done = pf.run_admin(|h, body, room| {
            let q = quiet.get_or_insert_with(|| shared.quiesce(me));
            let mut ctx = AdminContext {
                functions: &shared.functions,
                switch: &mut q.switch,
                pool: &pool,
            };
            ctx.execute(h, body, room)
        });
        if let Some(mut q) = quiet {
            // Addresses and steering may have changed: every thread takes the new ones
            // before its next pass, as the version moves before any pass can start.
            shared.admin_version.fetch_add(1, Ordering::AcqRel);
            // Everyone looks again below: the switch's record of whom to wake can go.
            q.switch.take_fresh(&mut Vec::new());
            drop(q);
            // The commands may have given any function work (a reset, a migrated QP,
            // frames steered to it).
            shared.wake_others(me);
        }
        done
    }

    /// Gives each of its functions a turn: its admin queue (a VF's answers
    /// `NotPermitted`), then [`crate::function::Function::run`] with the frames that
    /// arrived for it, forwarding what it sent. Returns whether any worked, and the
    /// earliest timer.
    fn pass(&mut self, shared: &Shared) -> PollOutcome {
        let guard = lock(&shared.workers[self.index].pass);
        self.refresh(shared);
        let now = Instant::now();
        let mut all = PollOutcome::default();
        self.used_switch = false;
        if self.tends_switch {
            // The network, and frames the fault injector held (reordered, delayed).
            let mut switch = lock(&shared.switch);
            switch.release_due(now);
            all.progress |= switch.poll_uplink(UPLINK_BUDGET) > 0;
            self.used_switch = true;
        }
        if Switch::spare_uneven(self.spare.len()) {
            lock(&shared.switch).trade_spare(&mut self.spare);
        }
        for k in 0..self.mine.len() {
            let member = self.mine[k];
            let f = &shared.functions[member];
            if member != 0 {
                all.progress |= f.run_admin(|h, _, _| crate::commands::not_permitted(h));
            }
            let frames = if self.direct {
                self.inboxes.take(member)
            } else {
                // The fault injector may release frames that are due, for any port: the
                // pass ends by waking whoever they went to.
                self.used_switch = true;
                lock(&shared.switch).take(member)
            };
            let start = Instant::now();
            let mut port = Port::new(frames, &self.neighbors);
            port.spare = std::mem::take(&mut self.spare);
            port.trains = self.direct;
            port.own_address_only = self.own_address_only;
            let o = f.run(&mut port, now);
            let Port { out, spare, .. } = port;
            self.spare = spare;
            if o.progress {
                let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                shared.busy[member].fetch_add(ns, Ordering::Relaxed);
            }
            if let Some(on) = f.take_os_receives_change() {
                // The port answers ARP for the function only while its OS does not.
                lock(&shared.switch).set_os_receives(member, on);
                self.used_switch = true;
            }
            if let Some(addresses) = f.take_gid_addresses() {
                let mut switch = lock(&shared.switch);
                switch.set_gid_addresses(member, &addresses);
                // This thread's functions after this one see the change in this pass (a
                // reset freed an address another may set now); the other threads take it
                // before their next pass.
                self.neighbors = switch.neighbors();
                self.route = switch.route();
                shared.admin_version.fetch_add(1, Ordering::AcqRel);
                self.used_switch = true;
            }
            self.forward(shared, member, out);
            all.progress |= o.progress;
            all.deadline = earliest(all.deadline, o.deadline);
        }
        if self.used_switch {
            let mut switch = lock(&shared.switch);
            // What the functions sent to the network in this pass goes out together.
            switch.flush_uplink();
            if self.tends_switch {
                // Held frames wake the engine when they are due, as transport timers do.
                all.deadline = earliest(all.deadline, switch.next_deadline());
            }
            switch.take_fresh(&mut self.fresh);
        }
        // Frames sent to functions that already had their turn are work for the next.
        all.progress |= self.mine.iter().any(|&p| self.inboxes.is_waiting(p));
        drop(guard);
        // Threads that got frames and may be asleep: wake them.
        for port in self.fresh.drain(..) {
            match self.placement.get(port) {
                Some(&w) if w != self.index => shared.wake_if_sleeping(w),
                _ => {}
            }
        }
        self.flush_traffic(shared);
        all
    }

    /// Forwards the frames function `from` sent where [`Route::hop`] says: straight into
    /// the inbox of the function each is for when nothing watches the switch, else (and
    /// for the network) through the switch.
    fn forward(&mut self, shared: &Shared, from: usize, frames: Vec<Frame>) {
        if frames.is_empty() {
            return;
        }
        let mut through_switch = Vec::new();
        for frame in frames {
            match self.route.hop(&frame.bytes, !self.direct) {
                Hop::Inbox(port) => {
                    if let Some(t) = &mut self.traffic {
                        *t.entry((from, port)).or_default() += frame.packets();
                    }
                    if self.inboxes.push(port, frame) {
                        self.fresh.push(port);
                    }
                }
                Hop::Switch | Hop::Uplink | Hop::Flood | Hop::Multicast | Hop::Nowhere => {
                    through_switch.push(frame)
                }
            }
        }
        if !through_switch.is_empty() {
            let mut switch = lock(&shared.switch);
            for frame in through_switch {
                switch.send_from(from, frame);
            }
            switch.take_fresh(&mut self.fresh);
            self.used_switch = true;
        }
    }

    /// Hands the traffic it counted to the balancer, now and then.
    fn flush_traffic(&mut self, shared: &Shared) {
        let Some(t) = &mut self.traffic else {
            return;
        };
        if t.is_empty() || self.traffic_flushed.elapsed() < TRAFFIC_FLUSH {
            return;
        }
        self.traffic_flushed = Instant::now();
        let mut all = lock(&shared.traffic);
        for (k, n) in t.drain() {
            *all.entry(k).or_default() += n;
        }
    }

    /// A turn of the whole thread: the PF's admin queue, then a pass.
    fn turn(&mut self, shared: &Shared) -> PollOutcome {
        let admin = self.run_admin(shared);
        let mut outcome = self.pass(shared);
        outcome.progress |= admin;
        outcome
    }

    /// Now and then while there is work: moves functions between threads
    /// when what they did says another placement is better ([`balance::rebalance`]).
    fn balance(&mut self, shared: &Shared) {
        if shared.policy != Placement::Auto || shared.workers.len() < 2 {
            return;
        }
        // Whichever thread has work looks, at most one at a time and once a period: a
        // thread whose functions are all idle may sleep for good while others work.
        let Ok(mut last) = shared.last_balance.try_lock() else {
            return;
        };
        let period = last.elapsed();
        if period < BALANCE_PERIOD {
            return;
        }
        *last = Instant::now();
        drop(last);
        let activity = Activity {
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX),
            busy: shared
                .busy
                .iter()
                .map(|b| b.swap(0, Ordering::Relaxed))
                .collect(),
            traffic: {
                let mut all = std::mem::take(&mut *lock(&shared.traffic));
                for (a, b, n) in lock(&shared.switch).take_traffic() {
                    *all.entry((a, b)).or_default() += n;
                }
                all.into_iter().map(|((a, b), n)| (a, b, n)).collect()
            },
        };
        let current = lock(&shared.placement).clone();
        let Some(next) = balance::rebalance(&current, shared.workers.len(), &activity) else {
            return;
        };
        {
            let _quiet = shared.quiesce(self.index);
            shared.set_wakers(&next);
            *lock(&shared.placement) = next.clone();
            shared.placement_version.fetch_add(1, Ordering::AcqRel);
        }
        let busy: Vec<String> = (0..shared.workers.len())
            .map(|t| {
                let ns: u64 = (0..current.len())
                    .filter(|&f| current[f] == t)
                    .map(|f| activity.busy[f])
                    .sum();
                format!("{}%", ns.saturating_mul(100) / activity.period_ns.max(1))
            })
            .collect();
        let placed: Vec<String> = shared
            .functions
            .iter()
            .zip(&next)
            .map(|(f, t)| format!("{}:{t}", f.identity().id))
            .collect();
        log::info!(
            "engine: placement now {} (threads busy {} of the last {} ms)",
            placed.join(" "),
            busy.join("/"),
            activity.period_ns / 1_000_000
        );
        log::debug!("engine: moved on {activity:?}");
        shared.wake_others(self.index);
    }
}

impl Worker {
    /// Engine thread `index` over `shared`.
    pub(super) fn new(index: usize, shared: Arc<Shared>) -> Self {
        let (direct, uplink, inboxes, own_address_only) = {
            let switch = lock(&shared.switch);
            (
                switch.takes_trains(),
                switch.has_uplink(),
                switch.inboxes(),
                !switch.uplink_follows_addresses(),
            )
        };
        let counting = shared.policy == Placement::Auto && shared.workers.len() > 1;
        let mut st = State {
            index,
            mine: Vec::new(),
            placement: Vec::new(),
            placement_seen: 0,
            admin_seen: u64::MAX,
            neighbors: AddressTable::default(),
            route: Route::default(),
            own_address_only,
            inboxes,
            spare: Vec::new(),
            direct,
            tends_switch: index == 0 && (uplink || !direct),
            used_switch: false,
            traffic: counting.then(HashMap::default),
            traffic_flushed: Instant::now(),
            notifying: false,
            fresh: Vec::new(),
        };
        st.refresh(&shared);
        Self { shared, st }
    }

    /// Runs until the engine is stopped.
    pub(super) fn run(mut self) -> Result<(), event_manager::Error> {
        let shared = self.shared.clone();
        let slot = &shared.workers[self.st.index];
        let mut em: EventManager<Box<dyn MutEventSubscriber + Send>> = EventManager::new()?;
        let sockets = if self.st.index == 0 {
            lock(&shared.switch).uplink_fds()
        } else {
            Vec::new()
        };
        em.add_subscriber(Box::new(Wakeups {
            wake: slot.wake.clone(),
            sockets,
            shared: shared.clone(),
        }));
        log::debug!("engine thread {} running", self.st.index);
        let mut last_work = Instant::now();
        let mut idle_passes = 0u32;
        let st = &mut self.st;
        while !shared.stopping.load(Ordering::Acquire) {
            let outcome = st.turn(&shared);
            if outcome.progress {
                last_work = Instant::now();
                st.balance(&shared);
                continue;
            }
            if last_work.elapsed() < shared.poll_window {
                // The eventfds only matter for a stop request while polling (kicks are
                // not asked for): look at them now and then, not at every pass.
                idle_passes += 1;
                if idle_passes.is_multiple_of(EVENT_CHECK_PASSES) {
                    em.run_with_timeout(0)?;
                }
                std::thread::yield_now();
                continue;
            }
            // Going idle: say so (a thread that gives us a frame from now on wakes us),
            // ask for kicks, then look once more, so that a doorbell rung just before the
            // request was visible is not missed (the driver fences between its doorbell
            // write and its read of the request).
            slot.sleeping.store(true, Ordering::SeqCst);
            st.notify(&shared, true);
            fence(Ordering::SeqCst);
            let outcome = st.turn(&shared);
            if !outcome.progress {
                match outcome.deadline {
                    // Sleep until the next transport timer, or until woken.
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
            slot.sleeping.store(false, Ordering::SeqCst);
            st.notify(&shared, false);
            last_work = Instant::now();
        }
        log::debug!("engine thread {} stopped", st.index);
        Ok(())
    }

    /// One turn, for a harness that drives the engine in one thread.
    #[cfg(feature = "stepping")]
    pub(super) fn step(&mut self) -> PollOutcome {
        self.st.turn(&self.shared)
    }

    /// The switch, for a harness that drives the engine in one thread.
    #[cfg(feature = "stepping")]
    pub(super) fn switch(&self) -> MutexGuard<'_, Switch> {
        lock(&self.shared.switch)
    }
}
