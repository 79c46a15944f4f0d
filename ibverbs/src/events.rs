//! Events: completion channels (`ibv_create_comp_channel`, `ibv_get_cq_event`,
//! `ibv_ack_cq_events`) and asynchronous events (`ibv_get_async_event`,
//! `ibv_ack_async_event`, the context's `async_fd`).
//!
//! The function has one event queue, read by one thread ([`start`]) for all the
//! contexts this process has on it (see `context.rs`). It
//! sleeps on the queue's MSI-X interrupt (an eventfd on the host and through VFIO; closing
//! the context wakes it through a descriptor of its own; inside a VM without an IOMMU,
//! where a userspace driver gets no interrupts, it looks at the queue every millisecond,
//! every 50 µs while events come) and moves each event to where the application waits:
//! a completion event to the channel of its CQ, an asynchronous event to the queue of
//! the context whose object it names.
//!
//! A channel's `fd` and the context's `async_fd` are eventfds in semaphore mode: each
//! event queued adds one, each `ibv_get_*_event` takes one (blocking, or `EAGAIN` if the
//! application made the descriptor non-blocking), so `poll`/`epoll` on them work as on
//! rdma-core's descriptors.
//!
//! Events name objects by weak references: an object destroyed before its event is read
//! is skipped, and destroying it drops its queued events ([`Channel::forget`],
//! [`AsyncQueue::forget`]) instead of waiting for acknowledgements as rdma-core does, so
//! that a destroy never hangs.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use rnic_driver::verbs::{AsyncEvent, Event};

use crate::abi::*;
use crate::context::{Function, RnicContext};
use crate::cq::CqObj;
use crate::ffi::{errno_result, guard, invalid, minus_one, null_on_err, set_errno, Errno};
use crate::objects::{self, lookup, register, unregister, users, Obj};
use crate::qp::QpObj;
use crate::srq::SrqObj;

/// Longest the event thread sleeps on the interrupt before it looks at the queue anyway
/// (closing the context wakes it at once, through its stop descriptor); and how long it
/// pauses after a failed read of the queue.
const WAIT: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_millis(20);
/// Without interrupts: how often the event thread looks at the event queue when idle,
/// and when events came recently.
const POLL_IDLE: Duration = Duration::from_millis(1);
const POLL_BUSY: Duration = Duration::from_micros(50);
/// Idle looks, after an event, before the thread slows down to [`POLL_IDLE`].
const BUSY_LOOKS: u32 = 2000;

/// An eventfd in semaphore mode: [`SemFd::post`] adds one, a read takes one.
#[derive(Debug)]
pub(crate) struct SemFd(OwnedFd);

impl SemFd {
    pub(crate) fn new() -> Result<Self, Errno> {
        // SAFETY: eventfd with valid flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            log::warn!("cannot create an eventfd for events: {e}");
            return Err(e.raw_os_error().unwrap_or(libc::EMFILE));
        }
        // SAFETY: a fresh descriptor, owned from here on.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds one.
    fn post(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a u64 we own to our eventfd.
        let n = unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
        if n != 8 {
            log::warn!(
                "signalling an event descriptor failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }

    /// Takes one, as the descriptor's flags say: blocking, or `EAGAIN` when it is
    /// non-blocking and nothing is there.
    fn take(&self) -> Result<(), Errno> {
        loop {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a u64 we own from our eventfd.
            let n = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if e != libc::EINTR {
                return Err(e);
            }
        }
    }

    /// Takes one if there is one, without blocking.
    fn try_take(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut p, 1, 0) } == 1;
        ready && self.take().is_ok()
    }
}

/// A completion channel: the CQs whose completion events are waiting to be read.
pub(crate) struct Channel {
    pub(crate) ctx: Arc<RnicContext>,
    fd: SemFd,
    queue: Mutex<VecDeque<Weak<CqObj>>>,
}

/// A completion channel as C holds it.
pub(crate) type ChannelObj = Obj<ibv_comp_channel, Channel>;

impl Channel {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Weak<CqObj>>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a completion event of `cq`.
    pub(crate) fn push(&self, cq: Weak<CqObj>) {
        self.queue().push_back(cq);
        self.fd.post();
    }

    /// Drops the queued events of `cq` (being destroyed).
    pub(crate) fn forget(&self, cq: &Arc<CqObj>) {
        let mut q = self.queue();
        let before = q.len();
        q.retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(cq)));
        for _ in q.len()..before {
            // Each queued event was counted once in the descriptor, unless a reader took
            // the count already (it then finds the queue without the event and waits for
            // the next) or push has yet to count it (a reader then finds nothing for that
            // count and waits again): never block here.
            self.fd.try_take();
        }
    }

    /// The next event: the CQ it is for. Blocks as the descriptor says.
    fn next(&self) -> Result<Arc<CqObj>, Errno> {
        loop {
            self.fd.take()?;
            // Destroyed CQs' events were removed with their count, so the queue has an
            // entry for each count taken, unless a destroy raced this take.
            if let Some(cq) = self.queue().pop_front().and_then(|w| w.upgrade()) {
                return Ok(cq);
            }
        }
    }
}

/// What an asynchronous event names.
#[derive(Clone)]
enum Subject {
    Cq(Weak<CqObj>),
    Qp(Weak<QpObj>),
    Srq(Weak<SrqObj>),
}

/// The context's asynchronous events waiting to be read, and their descriptor (the
/// context's `async_fd`).
pub(crate) struct AsyncQueue {
    fd: SemFd,
    queue: Mutex<VecDeque<(ibv_event_type, Subject)>>,
}

impl AsyncQueue {
    fn queue(&self) -> MutexGuard<'_, VecDeque<(ibv_event_type, Subject)>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, event: ibv_event_type, subject: Subject) {
        self.queue().push_back((event, subject));
        self.fd.post();
    }

    /// Drops the queued events about the object at `ptr` (being destroyed).
    pub(crate) fn forget(&self, ptr: *const c_void) {
        let mut q = self.queue();
        let before = q.len();
        q.retain(|(_, s)| {
            let p = match s {
                Subject::Cq(w) => w.as_ptr() as *const c_void,
                Subject::Qp(w) => w.as_ptr() as *const c_void,
                Subject::Srq(w) => w.as_ptr() as *const c_void,
            };
            p != ptr
        });
        for _ in q.len()..before {
            // As in Channel::forget.
            self.fd.try_take();
        }
    }

    /// The next event with the object it names, as `struct ibv_async_event`.
    fn next(&self) -> Result<ibv_async_event, Errno> {
        loop {
            self.fd.take()?;
            let Some((event_type, subject)) = self.queue().pop_front() else {
                continue;
            };
            let element = match subject {
                Subject::Cq(w) => w.upgrade().map(|o| ibv_async_event_element {
                    cq: o.c_ptr().cast(),
                }),
                Subject::Qp(w) => w.upgrade().map(|o| ibv_async_event_element {
                    qp: o.c_ptr().cast(),
                }),
                Subject::Srq(w) => w
                    .upgrade()
                    .map(|o| ibv_async_event_element { srq: o.c_ptr() }),
            };
            if let Some(element) = element {
                return Ok(ibv_async_event {
                    element,
                    event_type,
                });
            }
        }
    }
}

/// A context's side of events: its asynchronous queue, and its objects events name by
/// number.
pub(crate) struct ContextEvents {
    pub(crate) async_queue: AsyncQueue,
    pub(crate) cqs: Mutex<HashMap<u32, Weak<CqObj>>>,
    pub(crate) qps: Mutex<HashMap<u32, Weak<QpObj>>>,
    pub(crate) srqs: Mutex<HashMap<u32, Weak<SrqObj>>>,
}

/// A function's side of events: the thread that reads its event queue.
pub(crate) struct FunctionEvents {
    stop: AtomicBool,
    /// Posted by [`FunctionEvents::stop`]: wakes the event thread out of its sleep.
    stop_fd: SemFd,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ContextEvents {
    pub(crate) fn new() -> Result<Self, Errno> {
        Ok(Self {
            async_queue: AsyncQueue {
                fd: SemFd::new()?,
                queue: Mutex::new(VecDeque::new()),
            },
            cqs: Mutex::new(HashMap::new()),
            qps: Mutex::new(HashMap::new()),
            srqs: Mutex::new(HashMap::new()),
        })
    }

    /// The descriptor that becomes readable when an asynchronous event is queued.
    pub(crate) fn async_fd(&self) -> RawFd {
        self.async_queue.fd.raw()
    }
}

impl FunctionEvents {
    pub(crate) fn new() -> Result<Self, Errno> {
        Ok(Self {
            stop: AtomicBool::new(false),
            stop_fd: SemFd::new()?,
            thread: Mutex::new(None),
        })
    }

    /// Stops the event thread and waits for it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.stop_fd.post();
        if let Some(t) = lock(&self.thread).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// Starts the event thread of `function`. Closing its last context
/// ([`FunctionEvents::stop`]) wakes it and waits for its end.
pub(crate) fn start(function: &Arc<Function>) -> Result<(), Errno> {
    let weak = Arc::downgrade(function);
    let t = std::thread::Builder::new()
        .name(format!("{}-events", function.name()))
        .spawn(move || run(weak))
        .map_err(|e| {
            log::warn!("cannot start the event thread: {e}");
            libc::EAGAIN
        })?;
    *lock(&function.events.thread) = Some(t);
    Ok(())
}

/// What the event thread does after a look at the queue.
enum Pause {
    /// Looks again at once: it found an event.
    None,
    /// Sleeps on the interrupt eventfd (and the stop descriptor).
    Interrupt(RawFd),
    /// Sleeps this long: no interrupts, or the read failed.
    For(Duration),
}

fn run(weak: Weak<Function>) {
    let mut idle = 0u32;
    loop {
        let Some(f) = weak.upgrade() else { return };
        let got = if f.events.stop.load(Ordering::Acquire) {
            None
        } else {
            Some(f.verbs.get_event(Duration::ZERO))
        };
        // From here the thread may allocate and free, the last reference to the context
        // included (see heap_quiet); the look above does neither.
        let quiet = crate::heap_quiet::shared();
        let pause = match got {
            None => {
                drop(f);
                drop(quiet);
                return;
            }
            Some(Ok(Some(e))) => {
                if !f.contexts().iter().any(|c| dispatch(c, e)) {
                    log::debug!("{}: event {e:?} about an object that is gone", f.name());
                }
                idle = 0;
                Pause::None
            }
            Some(Ok(None)) => match f.verbs.event_fd() {
                Some(fd) => Pause::Interrupt(fd),
                None => {
                    idle = idle.saturating_add(1);
                    Pause::For(if idle < BUSY_LOOKS {
                        POLL_BUSY
                    } else {
                        POLL_IDLE
                    })
                }
            },
            Some(Err(e)) if e.function_lost() => {
                // rnicd is gone or the function was reset: no event will come again, and
                // every verb now fails with the errno of `e`. Say it once and stop.
                log::warn!("{}: {e}; no more events from it", f.name());
                drop(f);
                drop(quiet);
                return;
            }
            Some(Err(e)) => {
                log::warn!("{}: reading the event queue failed: {e}", f.name());
                Pause::For(RETRY)
            }
        };
        drop(quiet);
        match pause {
            Pause::None => {}
            // The context is held while sleeping: its descriptors stay open.
            Pause::Interrupt(fd) => sleep_on_interrupt(fd, f.events.stop_fd.raw()),
            Pause::For(d) => std::thread::sleep(d),
        }
        let _quiet = crate::heap_quiet::shared();
        drop(f);
    }
}

/// Sleeps until the interrupt eventfd `event_fd` or the stop descriptor `stop_fd` is
/// readable, or [`WAIT`] passes, and clears the interrupt's count (the queue is looked at
/// next; an interrupt after this read leaves a count that ends the next sleep at once).
fn sleep_on_interrupt(event_fd: RawFd, stop_fd: RawFd) {
    let mut fds = [
        libc::pollfd {
            fd: event_fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop_fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = i32::try_from(WAIT.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: two valid pollfds that live across the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n > 0 && fds[0].revents & libc::POLLIN != 0 {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a u64 we own from the (non-blocking) eventfd.
        unsafe { libc::read(event_fd, (&mut count as *mut u64).cast(), 8) };
    }
}

/// Moves one event of the function's queue to where the application reads it, if it is
/// about an object of context `ctx`; returns whether it was.
fn dispatch(ctx: &RnicContext, e: Event) -> bool {
    let ev = &ctx.events;
    match e {
        Event::Completion { cqn } => {
            // The table stays locked until the CQ is let go (see ibv_destroy_cq).
            let cqs = lock(&ev.cqs);
            match cqs.get(&cqn).and_then(Weak::upgrade) {
                Some(cq) => {
                    cq.r.completion_event(&cq);
                    true
                }
                None => false,
            }
        }
        Event::Async { event, object, .. } => {
            let (event_type, subject) = match event {
                AsyncEvent::CqErr => (
                    IBV_EVENT_CQ_ERR,
                    lock(&ev.cqs).get(&object).cloned().map(Subject::Cq),
                ),
                AsyncEvent::SrqLimitReached => (
                    IBV_EVENT_SRQ_LIMIT_REACHED,
                    lock(&ev.srqs).get(&object).cloned().map(Subject::Srq),
                ),
                AsyncEvent::QpFatal
                | AsyncEvent::QpReqErr
                | AsyncEvent::QpAccessErr
                | AsyncEvent::CommEst
                | AsyncEvent::SqDrained => {
                    let t = match event {
                        AsyncEvent::QpFatal => IBV_EVENT_QP_FATAL,
                        AsyncEvent::QpReqErr => IBV_EVENT_QP_REQ_ERR,
                        AsyncEvent::QpAccessErr => IBV_EVENT_QP_ACCESS_ERR,
                        AsyncEvent::CommEst => IBV_EVENT_COMM_EST,
                        _ => IBV_EVENT_SQ_DRAINED,
                    };
                    (t, lock(&ev.qps).get(&object).cloned().map(Subject::Qp))
                }
                other => {
                    log::debug!("{}: event {other:?} about {object:#x} ignored", ctx.name());
                    // No context takes it.
                    return true;
                }
            };
            match subject {
                Some(s) => {
                    ev.async_queue.push(event_type, s);
                    true
                }
                None => false,
            }
        }
    }
}

/// `ibv_create_comp_channel`: a channel whose `fd` becomes readable when one of its CQs
/// has a completion event.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    null_on_err("ibv_create_comp_channel", || {
        let rctx = RnicContext::lookup(ctx)?;
        let fd = SemFd::new()?;
        let mut c = ibv_comp_channel::zeroed();
        c.context = ctx;
        c.fd = fd.raw();
        c.refcnt = 0;
        let chan = Channel {
            ctx: rctx,
            fd,
            queue: Mutex::new(VecDeque::new()),
        };
        Ok(register(ctx, c, chan, |_| ()).c_ptr())
    })
}

/// `ibv_destroy_comp_channel`: 0, or an errno (`EBUSY` while a CQ uses it).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_destroy_comp_channel(chan: *mut ibv_comp_channel) -> c_int {
    errno_result("ibv_destroy_comp_channel", || {
        unregister::<ibv_comp_channel, Channel>(chan, |o| {
            if users(o) > 0 {
                log::debug!("completion channel {chan:p} still has CQs");
                return Err(libc::EBUSY);
            }
            Ok(())
        })
        .map(drop)
    })
}

/// `ibv_get_cq_event`: waits for the next completion event of the channel; 0 with its
/// CQ and the CQ's context, or -1 with `errno`.
///
/// # Safety
///
/// `cq` and `cq_context` are NULL or writable.
pub(crate) unsafe extern "C" fn ibv_get_cq_event(
    chan: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    minus_one("ibv_get_cq_event", || {
        if cq.is_null() || cq_context.is_null() {
            return Err(invalid(format_args!("ibv_get_cq_event: NULL out-pointer")));
        }
        // The channel is looked up by magic (a wait may last long; a registry lookup
        // would hold nothing during it anyway).
        // SAFETY: `chan` was dereferenced by no one yet: NULL or a pointer the caller
        // got from ibv_create_comp_channel, whose header is readable while it lives.
        let ch = unsafe { objects::from_c::<ibv_comp_channel, Channel>(chan)? };
        let got = ch.r.next()?;
        let p = got.c_ptr();
        // SAFETY: out-pointers the caller provided (checked non-NULL); `p` is the live
        // CQ (held by `got`), whose cq_context C set at creation.
        unsafe {
            cq.write(p.cast());
            cq_context.write((*p).cq_context);
        }
        Ok(0)
    })
}

/// `ibv_ack_cq_events`: acknowledges `nevents` events of `cq`. Programs call it for every
/// event (perftest with `-e`), so the CQ is checked by its magic number, as on the data
/// path, not looked up in the registry.
///
/// # Safety
///
/// `cq` is NULL or readable for an object's header (a CQ from `ibv_get_cq_event` is).
pub(crate) unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    guard("ibv_ack_cq_events", (), || {
        // SAFETY: the caller's promise.
        match unsafe { objects::from_c::<ibv_cq_ex, crate::cq::Cq>(cq.cast()) } {
            Ok(o) => o.r.ack_events(o, nevents),
            Err(e) => set_errno(e),
        }
    })
}

/// `ibv_get_async_event`: waits for the context's next asynchronous event; 0 or -1 with
/// `errno`.
///
/// # Safety
///
/// `event` is NULL or writable.
pub(crate) unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    minus_one("ibv_get_async_event", || {
        if event.is_null() {
            return Err(invalid(format_args!("ibv_get_async_event: event is NULL")));
        }
        let rctx = RnicContext::lookup(ctx)?;
        let e = rctx.events.async_queue.next()?;
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { event.write_unaligned(e) };
        Ok(0)
    })
}

/// `ibv_ack_async_event`: acknowledges an event from [`ibv_get_async_event`] (counted in
/// its object's `events_completed`, as rdma-core does).
///
/// # Safety
///
/// `event` is NULL or points to an event from `ibv_get_async_event`.
pub(crate) unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    guard("ibv_ack_async_event", (), || {
        if event.is_null() {
            return;
        }
        // SAFETY: readable by the caller's promise.
        let e = unsafe { event.read_unaligned() };
        // SAFETY: reading the union member the event type says is set; each is a
        // pointer, checked against the registry before use.
        unsafe {
            match e.event_type {
                IBV_EVENT_CQ_ERR => {
                    if let Ok(o) = lookup::<ibv_cq_ex, crate::cq::Cq>(e.element.cq.cast()) {
                        (*o.c_ptr()).async_events_completed += 1;
                    }
                }
                IBV_EVENT_SRQ_LIMIT_REACHED | IBV_EVENT_SRQ_ERR => {
                    if let Ok(o) = lookup::<ibv_srq, crate::srq::Srq>(e.element.srq) {
                        (*o.c_ptr()).events_completed += 1;
                    }
                }
                IBV_EVENT_QP_FATAL
                | IBV_EVENT_QP_REQ_ERR
                | IBV_EVENT_QP_ACCESS_ERR
                | IBV_EVENT_COMM_EST
                | IBV_EVENT_SQ_DRAINED
                | IBV_EVENT_QP_LAST_WQE_REACHED => {
                    if let Ok(o) = lookup::<ibv_qp_ex, crate::qp::Qp>(e.element.qp.cast()) {
                        (*o.c_ptr()).qp_base.events_completed += 1;
                    }
                }
                _ => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_fd_counts_posts() {
        let s = SemFd::new().unwrap();
        assert!(!s.try_take());
        s.post();
        s.post();
        assert!(s.try_take());
        assert!(s.take().is_ok());
        assert!(!s.try_take());
        // Non-blocking descriptors answer EAGAIN, as the application may make them.
        // SAFETY: fcntl on our own descriptor.
        unsafe { libc::fcntl(s.raw(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(s.take(), Err(libc::EAGAIN));
    }

    #[test]
    fn calls_on_what_is_not_a_channel_or_context_fail_cleanly() {
        let garbage = 0x50 as *mut ibv_comp_channel;
        let (mut cq, mut cq_ctx) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the functions take any pointer (garbage is NULL-page memory that is
        // never read: the registry rejects it first, or the magic check on NULL).
        unsafe {
            assert_eq!(ibv_destroy_comp_channel(garbage), libc::EINVAL);
            assert_eq!(
                ibv_get_cq_event(std::ptr::null_mut(), &mut cq, &mut cq_ctx),
                -1
            );
            assert!(ibv_create_comp_channel(std::ptr::null_mut()).is_null());
            let mut ev = ibv_async_event {
                element: ibv_async_event_element { port_num: 0 },
                event_type: 0,
            };
            assert_eq!(ibv_get_async_event(std::ptr::null_mut(), &mut ev), -1);
            ibv_ack_async_event(std::ptr::null_mut());
            let not_a_cq = [0u64; 32];
            ibv_ack_cq_events(not_a_cq.as_ptr() as *mut ibv_cq, 1);
            ibv_ack_cq_events(std::ptr::null_mut(), 1);
        }
    }
}
