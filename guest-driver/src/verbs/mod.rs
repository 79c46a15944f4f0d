//! RDMA verbs over an rnic function: a safe, ibverbs-shaped API.
//!
//! [`Context`] owns an opened [`Device`] and its event queue. From it come protection
//! domains ([`Pd`]), which register memory ([`Mr`]) and create queue pairs ([`Qp`]), and
//! completion queues ([`Cq`]). Objects hold what they depend on (a QP its PD and CQs, an
//! MR its PD and its buffer), so Rust's ownership gives the destruction order the device
//! wants: every object is destroyed on drop, after the objects that use it.
//!
//! Doorbells: page 0 of the doorbell BAR is the command queue's; the objects of a context
//! ask for their slots from page [`DOORBELL_PAGE`] on, and spill to the next page when the
//! device answers that a page's slots are all taken, up to the function's quota of
//! doorbell pages (see `ContextInner::with_doorbell_page`).
//!
//! ```no_run
//! # fn demo(device: rnic_driver::Device) -> rnic_driver::Result<()> {
//! use std::sync::Arc;
//! use rnic_driver::verbs::*;
//!
//! let ctx = Context::new(device)?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let buf = Arc::new(ctx.device().transport().alloc_dma(4096)?);
//! let mr = pd.reg_mr(buf, 0, 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)?;
//! let qp = pd.create_qp(&cq, &cq, QpCaps { max_send_wr: 16, max_recv_wr: 16,
//!     max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 }, false)?;
//! let (attr, mask) = init_attr(ACCESS_REMOTE_WRITE);
//! qp.modify(&attr, mask)?;
//! qp.post_recv(&RecvWr { wr_id: 1, sges: vec![mr.sge(0, 4096)] })?;
//! # Ok(()) }
//! ```

mod cq;
mod ctrlq;
mod dc;
mod fast_reg;
mod mkey;
mod mmio;
mod mr;
mod mw;
mod qp;
pub(crate) mod ring;
mod shared_sq;
mod srq;
mod transition;
mod ud;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rnic_abi::cmd::{Opcode, QueryDeviceResp, Status};
use rnic_abi::regs;
use rnic_abi::verbs::{event, CreateEqReq, CreateEqResp, DoorbellSlot, Eqe, ObjectReq};
use zerocopy::{FromBytes, IntoBytes};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::transport::Transport;

pub use cq::{Cq, Wc, WcOpcode};
pub use ctrlq::CtrlQueue;
pub use dc::DcAddress;
pub use fast_reg::{DmaKey, FastReg, FastRegMr, GSI_QPN, MAX_FAST_REG_PAGES};
pub use mkey::{KeyRange, MemoryKey};
pub use mr::{Mr, Pd};
pub use mw::{inc_rkey, BindInfo, MemoryWindow, MW_KEY_BIT};
pub use qp::{mtu, Qp, QpCaps, RecvWr, RqState, SendSlot, SendWr, SqState, WrOpcode};
pub use rnic_abi::mw::{MW_ACCESS_ALL, MW_TYPE_1, MW_TYPE_2};
pub use rnic_abi::verbs::{
    attr, flush, mtu_bytes, mtu_code, QpAttr, QpState, QueryQpResp, Sge, WcStatus, ACCESS_ALL,
    ACCESS_FLUSH, ACCESS_FLUSH_GLOBAL, ACCESS_FLUSH_PERSISTENT, ACCESS_LOCAL_WRITE, ACCESS_MW_BIND,
    ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, ACCESS_ZERO_BASED, QPT_RC,
    QPT_UC,
};
pub use shared_sq::SharedSq;
pub use srq::Srq;
pub use transition::{init_attr, rtr_attr, rts_attr, uc_rtr_attr, uc_rts_attr};
pub use ud::{UdAddress, GRH_LEN, MULTICAST_QPN, QKEY_USE_OWN};

use ring::{Doorbells, ListKinds, Ring};

/// The first doorbell page that objects of a context ask for (page 0 belongs to the
/// command queue); objects spill to the pages after it when it is full.
pub const DOORBELL_PAGE: u32 = 1;
/// Entries of the context's event queue: room for a completion event from each of many
/// armed CQs plus async events, in 16 KiB. Fewer if the device's CQ limit (which bounds
/// the EQ too) is lower.
pub const EQ_ENTRIES: u32 = 1024;
/// MSI-X vector of the event queue when the transport delivers interrupts (vector 0 is the
/// command queue's).
pub const EQ_VECTOR: u16 = 1;
/// Longest the driver sleeps on the EQ's interrupt before it looks at the ring anyway.
/// An eventfd keeps its count, so a lone waiter loses no interrupt; with several threads
/// waiting on one context, one may take the signal (and the event, into the pending
/// list) another was waiting for, and this bounds what that costs the other. Long enough
/// that an idle waiter hardly ever wakes (10 times a second: well under 1% of a TCG
/// guest's CPU), short enough to be a rare, bounded delay.
const EQ_WAIT_SLICE: Duration = Duration::from_millis(100);
/// Offset in an [`Eqe`] of the u32 whose top byte is `owner`.
const EQE_OWNER_WORD: usize = 12;

/// An asynchronous event of the function ([`Event::Async`]), as `enum ibv_event_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A CQ overran or could not be written; the CQ is in error (`IBV_EVENT_CQ_ERR`).
    CqErr,
    /// A QP moved to the error state (`IBV_EVENT_QP_FATAL`).
    QpFatal,
    /// A QP received a request it could not execute (`IBV_EVENT_QP_REQ_ERR`).
    QpReqErr,
    /// A QP was denied a remote access (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessErr,
    /// A QP in RTR received its first packet (`IBV_EVENT_COMM_EST`).
    CommEst,
    /// A QP in SQD has no more outstanding send work (`IBV_EVENT_SQ_DRAINED`).
    SqDrained,
    /// An SRQ's receives fell below its limit; the object is the SRQ
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached,
    /// rnic: the QP left this function (`MIGRATE_QP`); follow it with [`Qp::adopt`] on
    /// the context of the function it went to.
    QpDeparted,
    /// rnic: a QP arrived on this function (`MIGRATE_QP`).
    QpArrived,
    /// A type this driver does not know.
    Unknown(u8),
}

impl AsyncEvent {
    /// The event with this [`event`] type number.
    pub fn from_u8(v: u8) -> Self {
        match v {
            event::CQ_ERR => Self::CqErr,
            event::QP_FATAL => Self::QpFatal,
            event::QP_REQ_ERR => Self::QpReqErr,
            event::QP_ACCESS_ERR => Self::QpAccessErr,
            event::COMM_EST => Self::CommEst,
            event::SQ_DRAINED => Self::SqDrained,
            event::SRQ_LIMIT_REACHED => Self::SrqLimitReached,
            event::QP_DEPARTED => Self::QpDeparted,
            event::QP_ARRIVED => Self::QpArrived,
            other => Self::Unknown(other),
        }
    }
}

/// What the event queue reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// An armed CQ ([`Cq::req_notify`]) received a completion.
    Completion {
        /// The CQ's number ([`Cq::cqn`]).
        cqn: u32,
    },
    /// Something happened to an object.
    Async {
        /// What happened.
        event: AsyncEvent,
        /// The object: a CQ number for CQ events, a QP number for QP events.
        object: u32,
        /// Event-specific data (0 in ABI 1.1).
        data: u32,
    },
}

impl Event {
    /// Decodes an event-queue entry.
    pub fn from_eqe(e: &Eqe) -> Self {
        if e.event_type == event::EVENT_COMPLETION {
            Event::Completion { cqn: e.object }
        } else {
            Event::Async {
                event: AsyncEvent::from_u8(e.event_type),
                object: e.object,
                data: e.data,
            }
        }
    }
}

/// A device opened for verbs: the function, its event queue, and the bookkeeping its
/// objects share.
pub struct Context {
    inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.device)
            .field("eqn", &self.inner.eqn)
            .field("eq_vector", &self.inner.eq_vector)
            .finish_non_exhaustive()
    }
}

/// What a context's objects keep alive and reach: the device and the event queue.
pub(crate) struct ContextInner {
    device: Arc<Device>,
    attr: QueryDeviceResp,
    doorbells: Doorbells,
    eqn: u32,
    eq_slot: DoorbellSlot,
    eq_vector: Option<u16>,
    /// Freed only after DESTROY_EQ succeeded: a device that still owns it may write it.
    eq_ring: ManuallyDrop<Ring>,
    eq: Mutex<EqState>,
    /// The send and receive accounting of each live QP, by QP number, so that polling a CQ
    /// can give slots back to the QPs whose completions it reads.
    qps: Mutex<HashMap<u32, Arc<qp::QpTrack>>>,
    /// The lowest doorbell page that may have a free slot: where the next object asks
    /// first. It rises when the device reports a page full and falls when an object with
    /// a slot in a lower page is destroyed.
    doorbell_page: AtomicU32,
}

/// The driver's side of the event queue.
#[derive(Debug, Default)]
struct EqState {
    /// Entries consumed in all (free-running).
    consumed: u32,
    /// Events read from the ring while looking for another one, in order, for
    /// [`Context::get_event`].
    pending: VecDeque<Event>,
}

impl Context {
    /// Opens `device` for verbs: checks the function offers RDMA, picks the event queue's
    /// interrupt (where the transport has interrupts) and creates the event queue.
    ///
    /// With interrupts, this asks the transport for two MSI-X vectors (the command queue's
    /// and [`EQ_VECTOR`]). The transport replaces its whole eventfd set when it does; that
    /// is safe here because the context owns the device, so no command is in flight, and
    /// the command queue never relies on an interrupt alone (it looks at its used ring at
    /// least every 10 ms).
    pub fn new(device: Device) -> Result<Context> {
        let attr = device.query_device()?;
        if attr.caps & regs::CAP_RDMA_RC == 0 {
            return Err(Error::Unsupported(
                "RDMA verbs: the device does not report CAP_RDMA_RC (an rnicd older than ABI 1.1?)",
            ));
        }
        let t = device.transport();
        if attr.limits.doorbell_pages <= DOORBELL_PAGE
            || (t.doorbells().len() as u64) < u64::from(DOORBELL_PAGE + 1) * rnic_abi::PAGE_SIZE
        {
            return Err(Error::Device(format!(
                "the function has {} doorbell pages ({} bytes mapped); verbs need page {DOORBELL_PAGE}",
                attr.limits.doorbell_pages,
                t.doorbells().len()
            )));
        }
        let eq_vector = if device.interrupts() && attr.limits.msix_vectors > u32::from(EQ_VECTOR) {
            match t.enable_interrupts(EQ_VECTOR + 1) {
                Ok(true) => Some(EQ_VECTOR),
                Ok(false) => None,
                Err(e) => {
                    log::warn!(
                        "{}: cannot set up MSI-X vector {EQ_VECTOR} for the event queue ({e}); polling it instead",
                        t.describe()
                    );
                    None
                }
            }
        } else {
            None
        };

        let eq_entries = eq_entries(attr.limits.max_cqe);
        let eq_ring = Ring::new(
            t,
            eq_entries,
            size_of::<Eqe>() as u32,
            ListKinds::of(attr.caps),
        )?;
        let req = CreateEqReq {
            ring: eq_ring.page_list(),
            entries: eq_entries,
            vector: eq_vector.map_or(regs::NO_VECTOR, u32::from),
            doorbell_page: DOORBELL_PAGE,
            reserved: 0,
        };
        let resp: CreateEqResp = command(&device, Opcode::CreateEq, req.as_bytes())?;
        let eq_slot = match Doorbells::check_slot(t, resp.doorbell) {
            Ok(s) => s,
            Err(e) => {
                // Give the EQ back; if that fails too, keep its ring out of reuse.
                if destroy(&device, Opcode::DestroyEq, resp.eqn, "event queue").is_err() {
                    std::mem::forget(eq_ring);
                }
                return Err(e);
            }
        };
        log::debug!(
            "{}: event queue {} with {eq_entries} entries, vector {eq_vector:?}",
            t.describe(),
            resp.eqn
        );
        Ok(Context {
            inner: Arc::new(ContextInner {
                device: Arc::new(device),
                attr,
                doorbells: Doorbells::default(),
                eqn: resp.eqn,
                eq_slot,
                eq_vector,
                eq_ring: ManuallyDrop::new(eq_ring),
                eq: Mutex::new(EqState::default()),
                qps: Mutex::new(HashMap::new()),
                doorbell_page: AtomicU32::new(DOORBELL_PAGE),
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.inner.device
    }

    /// What QUERY_DEVICE said when the context was opened (identity, GID, limits).
    pub fn attr(&self) -> &QueryDeviceResp {
        &self.inner.attr
    }

    /// QUERY_DEVICE, asked again.
    pub fn query_device(&self) -> Result<QueryDeviceResp> {
        self.inner.device.query_device()
    }

    /// Sets entry `index` of the function's GID table to `gid`, or clears it (`SET_GID`,
    /// ABI 1.10, datasheet §6.13). QPs and datagrams name the entry they send from by
    /// `sgid_index`.
    pub fn set_gid(&self, index: u32, gid: Option<[u8; 16]>) -> Result<()> {
        use rnic_abi::gid::{SetGidReq, GID_VALID};
        let req = SetGidReq {
            index,
            flags: if gid.is_some() { GID_VALID } else { 0 },
            reserved: 0,
            gid: gid.unwrap_or_default(),
        };
        self.inner.command_no_body(Opcode::SetGid, req.as_bytes())
    }

    /// Entry `index` of the function's GID table (`QUERY_GID`): `None` when empty.
    pub fn query_gid(&self, index: u32) -> Result<Option<[u8; 16]>> {
        use rnic_abi::gid::{QueryGidReq, QueryGidResp, GID_VALID};
        let req = QueryGidReq { index, reserved: 0 };
        let r: QueryGidResp = self.inner.command(Opcode::QueryGid, req.as_bytes())?;
        Ok((r.flags & GID_VALID != 0).then_some(r.gid))
    }

    /// (work-queue doorbells rung, how many needed a kick): while the device is busy it
    /// polls the doorbells, so doorbells cost no message to it.
    pub fn doorbell_stats(&self) -> (u64, u64) {
        self.inner.doorbells().stats.get()
    }

    /// The event queue's number.
    pub fn eqn(&self) -> u32 {
        self.inner.eqn
    }

    /// Fails at once if the function is lost to this driver ([`Device::check_alive`]:
    /// rnicd gone, [`Error::DeviceGone`]; reset by someone else, [`Error::FunctionReset`]).
    /// Cheap: call it in every round of a completion loop, so that a lost function ends
    /// the loop instead of leaving it polling a CQ no completion will reach. Every wait
    /// of this module calls it itself.
    pub fn check_alive(&self) -> Result<()> {
        self.inner.device.check_alive()
    }

    /// Whether waiting for events sleeps on an interrupt (else it polls the event queue).
    pub fn uses_interrupts(&self) -> bool {
        self.inner.eq_vector.is_some()
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::alloc(&self.inner)
    }

    /// Creates a completion queue of at least `entries` entries (rounded up to a power of
    /// two, at least 2).
    pub fn create_cq(&self, entries: u32) -> Result<Cq> {
        Cq::create(&self.inner, entries)
    }

    /// The next event, waiting up to `timeout` for one; `Ok(None)` when none came.
    pub fn get_event(&self, timeout: Duration) -> Result<Option<Event>> {
        self.inner.wait_event(timeout, |_| true)
    }

    /// The descriptor that becomes readable when the event queue's interrupt fires, for
    /// sleeping on several contexts at once ([`wait_any_cq_event`]); `None` when the
    /// context polls its event queue (the transport has no interrupts).
    pub fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        let vector = self.inner.eq_vector?;
        self.inner.transport().interrupt_fd(vector)
    }

    /// Waits up to `timeout` for a completion event of `cq` (which must have been armed
    /// with [`Cq::req_notify`]); returns whether one came. Other events read meanwhile are
    /// kept for [`Context::get_event`].
    ///
    /// As with ibverbs, arm, poll, and only then wait: a completion that arrived before the
    /// arm raises no event.
    pub fn wait_cq_event(&self, cq: &Cq, timeout: Duration) -> Result<bool> {
        let cqn = cq.cqn();
        let want = |e: &Event| matches!(e, Event::Completion { cqn: c } if *c == cqn);
        Ok(self.inner.wait_event(timeout, want)?.is_some())
    }
}

/// Waits up to `timeout` until one of the CQs in `cqs` (each with its context; each
/// armed with [`Cq::req_notify`]) has a completion event, sleeping on the contexts'
/// interrupts; returns whether one came. The events it finds are consumed, as
/// [`Context::wait_cq_event`] consumes them. A context without interrupts is looked at
/// every 50 µs instead.
pub fn wait_any_cq_event(cqs: &[(&Context, &Cq)], timeout: Duration) -> Result<bool> {
    let start = Instant::now();
    loop {
        let mut any = false;
        for (ctx, cq) in cqs {
            any |= ctx.wait_cq_event(cq, Duration::ZERO)?;
        }
        if any {
            return Ok(true);
        }
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok(false);
        }
        let mut fds: Vec<libc::pollfd> = cqs
            .iter()
            .filter_map(|(ctx, _)| ctx.event_fd())
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if fds.len() < cqs.len() {
            std::thread::sleep(left.min(Duration::from_micros(50)));
            continue;
        }
        let ms = i32::try_from(left.min(EQ_WAIT_SLICE).as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a valid array of pollfds of its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::Io("poll interrupt eventfds".into(), e));
            }
        }
        for p in fds.iter().filter(|p| p.revents & libc::POLLIN != 0) {
            // Clears the eventfd's count; EAGAIN (another reader was first) is fine.
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a u64 we own, from a descriptor the transport
            // keeps open.
            let _ = unsafe { libc::read(p.fd, (&mut count as *mut u64).cast(), 8) };
        }
    }
}

impl Context {
    /// Waits up to `timeout` (zero: just looks) for async event `event` about object
    /// `object` (e.g. [`AsyncEvent::QpDeparted`] of a QP); returns whether it came. Other
    /// events read meanwhile are kept for [`Context::get_event`] and the CQ waits.
    pub fn wait_async_event(
        &self,
        event: AsyncEvent,
        object: u32,
        timeout: Duration,
    ) -> Result<bool> {
        let want = |e: &Event| matches!(e, Event::Async { event: ev, object: o, .. } if *ev == event && *o == object);
        Ok(self.inner.wait_event(timeout, want)?.is_some())
    }
}

impl ContextInner {
    pub(crate) fn transport(&self) -> &dyn Transport {
        self.device.transport()
    }

    pub(crate) fn doorbells(&self) -> &Doorbells {
        &self.doorbells
    }

    /// The kinds of page list the device takes.
    pub(crate) fn list_kinds(&self) -> ListKinds {
        ListKinds::of(self.attr.caps)
    }

    /// Sends a command whose response is an `R`.
    pub(crate) fn command<R: FromBytes>(&self, op: Opcode, request: &[u8]) -> Result<R> {
        command(&self.device, op, request)
    }

    /// Sends a command that answers with no body.
    pub(crate) fn command_no_body(&self, op: Opcode, request: &[u8]) -> Result<()> {
        self.device.command(op, request, 0).map(drop)
    }

    /// Destroys an object on drop: logs a failure and returns it, so the caller can keep
    /// the object's memory out of reuse (the device may still write it).
    pub(crate) fn destroy(&self, op: Opcode, handle: u32, what: &str) -> Result<()> {
        destroy(&self.device, op, handle, what)
    }

    /// Destroys an object and frees `memory` (its rings) with it; if the device refuses,
    /// `memory` is leaked instead, as the device may still write it.
    pub(crate) fn destroy_or_leak<M>(
        &self,
        op: Opcode,
        handle: u32,
        what: &str,
        memory: M,
    ) -> Result<()> {
        self.destroy(op, handle, what)
            .inspect_err(|_| std::mem::forget(memory))
    }

    /// Creates an object whose doorbell slots the device assigns in the page the request
    /// names: `create(page)` is tried on the lowest page that may have room and, while the
    /// device answers `NO_RESOURCES` (the page's slots are taken, or its quota of doorbell
    /// pages does not reach a fresh page), on the pages after it, up to the last doorbell
    /// page the function has and the transport mapped. The first answer that is not
    /// `NO_RESOURCES`, or the last page's, is the result.
    pub(crate) fn with_doorbell_page<R>(
        &self,
        mut create: impl FnMut(u32) -> Result<R>,
    ) -> Result<R> {
        let mapped = (self.transport().doorbells().len() as u64 / rnic_abi::PAGE_SIZE) as u32;
        let pages = self
            .attr
            .limits
            .doorbell_pages
            .min(mapped)
            .min(rnic_abi::doorbell::PAGES);
        let first = self
            .doorbell_page
            .load(Ordering::Relaxed)
            .max(DOORBELL_PAGE);
        let mut page = first.min(pages.saturating_sub(1)).max(DOORBELL_PAGE);
        loop {
            match create(page) {
                Err(Error::Command { status, .. })
                    if status == Status::NoResources as u16 && page + 1 < pages =>
                {
                    page += 1;
                }
                result => {
                    if result.is_ok() && page > first {
                        self.doorbell_page.fetch_max(page, Ordering::Relaxed);
                    }
                    return result;
                }
            }
        }
    }

    /// An object with a doorbell slot in `page` was destroyed: that page has room again.
    pub(crate) fn doorbell_slot_freed(&self, page: u32) {
        self.doorbell_page
            .fetch_min(page.max(DOORBELL_PAGE), Ordering::Relaxed);
    }

    pub(crate) fn qps(&self) -> MutexGuard<'_, HashMap<u32, Arc<qp::QpTrack>>> {
        self.qps.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn eq(&self) -> MutexGuard<'_, EqState> {
        self.eq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the next entry off the event-queue ring, if the device wrote one.
    fn take_eqe(&self, st: &mut EqState) -> Option<Event> {
        let ring = &*self.eq_ring;
        let off = ring.offset(st.consumed);
        // The owner byte is the last of the entry's last u32; the device writes it last,
        // so an acquire load of that word orders the reads of the rest after it.
        let owner = (ring.buf().load_u32(off + EQE_OWNER_WORD) >> 24) as u8;
        if !ring::is_new(owner, st.consumed, ring.entries()) {
            return None;
        }
        let mut bytes = [0u8; size_of::<Eqe>()];
        ring.buf().read(off, &mut bytes);
        let eqe = Eqe::read_from_bytes(&bytes).expect("an Eqe is 16 bytes");
        st.consumed = st.consumed.wrapping_add(1);
        Some(Event::from_eqe(&eqe))
    }

    /// Waits up to `timeout` for the first event `want` accepts, keeping the others for
    /// later in arrival order (repeated completion events of one CQ are kept once: they
    /// all mean "this CQ has new completions").
    fn wait_event(
        &self,
        timeout: Duration,
        want: impl Fn(&Event) -> bool,
    ) -> Result<Option<Event>> {
        let start = Instant::now();
        let mut idle_rounds = 0u32;
        loop {
            {
                let mut st = self.eq();
                if let Some(i) = st.pending.iter().position(&want) {
                    return Ok(st.pending.remove(i));
                }
                let before = st.consumed;
                let mut found = None;
                while let Some(e) = self.take_eqe(&mut st) {
                    if want(&e) {
                        found = Some(e);
                        break;
                    }
                    let duplicate =
                        matches!(e, Event::Completion { .. }) && st.pending.contains(&e);
                    if !duplicate {
                        st.pending.push_back(e);
                    }
                }
                if st.consumed != before {
                    // Tell the device the entries are free again.
                    Doorbells::write_slot(self.transport(), self.eq_slot, 0, st.consumed);
                }
                if found.is_some() {
                    return Ok(found);
                }
            }
            // A lost function raises no event: say so instead of waiting for one.
            self.device.check_alive()?;
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Ok(None);
            }
            let left = timeout - elapsed;
            match self.eq_vector {
                // An eventfd keeps its count, so an event that came between the look above
                // and this wait still wakes it at once.
                Some(v) => {
                    self.transport()
                        .wait_interrupt(v, left.min(EQ_WAIT_SLICE))?;
                }
                None => {
                    idle_rounds += 1;
                    if idle_rounds < 1000 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::sleep(left.min(Duration::from_micros(50)));
                    }
                }
            }
        }
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: `eq_ring` is not used again: this is the last use of `self`.
        let ring = unsafe { ManuallyDrop::take(&mut self.eq_ring) };
        if self
            .destroy(Opcode::DestroyEq, self.eqn, "event queue")
            .is_err()
        {
            std::mem::forget(ring);
        }
    }
}

/// Where an object lives: its context, its number there and (for a CQ) its doorbell
/// slot. All three change when the object follows a migrated QP to another function
/// ([`Qp::adopt`]), so every use reads them afresh.
pub(crate) struct Binding {
    at: std::sync::RwLock<(Arc<ContextInner>, u32, DoorbellSlot)>,
}

impl Binding {
    pub(crate) fn new(ctx: Arc<ContextInner>, num: u32, slot: DoorbellSlot) -> Self {
        Self {
            at: std::sync::RwLock::new((ctx, num, slot)),
        }
    }

    fn get(&self) -> std::sync::RwLockReadGuard<'_, (Arc<ContextInner>, u32, DoorbellSlot)> {
        self.at.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The context.
    pub(crate) fn ctx(&self) -> Arc<ContextInner> {
        self.get().0.clone()
    }

    /// The number on the context's function.
    pub(crate) fn num(&self) -> u32 {
        self.get().1
    }

    /// The doorbell slot.
    pub(crate) fn slot(&self) -> DoorbellSlot {
        self.get().2
    }

    /// Moves the object to `ctx`, where it is `num` with doorbell `slot`.
    pub(crate) fn rebind(&self, ctx: Arc<ContextInner>, num: u32, slot: DoorbellSlot) {
        *self.at.write().unwrap_or_else(|e| e.into_inner()) = (ctx, num, slot);
    }
}

/// The event queue's size: [`EQ_ENTRIES`], or the largest power of two within the
/// device's `max_cqe` if that is lower (at least 2, the smallest ring the device takes).
fn eq_entries(max_cqe: u32) -> u32 {
    match max_cqe.checked_ilog2() {
        Some(log) => EQ_ENTRIES.min(1 << log).max(2),
        None => 2,
    }
}

/// Sends a command whose response is an `R`.
fn command<R: FromBytes>(device: &Device, op: Opcode, request: &[u8]) -> Result<R> {
    let body = device.command(op, request, size_of::<R>())?;
    R::read_from_bytes(&body).map_err(|_| {
        Error::Device(format!(
            "{op:?} answered {} bytes, expected {}",
            body.len(),
            size_of::<R>()
        ))
    })
}

/// Sends a DESTROY-style command for `handle`, logging a failure. On a function that is
/// lost ([`Error::function_lost`]: rnicd gone, or reset by someone else) the object is
/// gone already and the device no longer touches its memory: that is success, quietly.
fn destroy(device: &Device, op: Opcode, handle: u32, what: &str) -> Result<()> {
    let req = ObjectReq {
        handle,
        reserved: 0,
    };
    match device.command(op, req.as_bytes(), 0) {
        Ok(_) => Ok(()),
        Err(e) if e.function_lost() => {
            log::debug!("{what} {handle:#x} went with its function: {e}");
            Ok(())
        }
        Err(e) => {
            log::error!(
                "{}: destroying {what} {handle:#x} failed: {e}; its memory is leaked so the device cannot write into memory reused for something else",
                device.transport().describe()
            );
            Err(e)
        }
    }
}

/// The error of a request the caller got wrong (ibverbs' `EINVAL`).
pub(crate) fn invalid(what: String) -> Error {
    Error::Io(what, io::Error::from(io::ErrorKind::InvalidInput))
}

/// The error of a post to a full queue (ibverbs' `ENOMEM`): poll the CQ and try again.
pub(crate) fn queue_full(what: String) -> Error {
    Error::Io(
        what,
        io::Error::new(io::ErrorKind::WouldBlock, "queue full"),
    )
}

/// Whether `e` is the error of a post to a full queue, which polling completions clears.
pub fn is_queue_full(e: &Error) -> bool {
    matches!(e, Error::Io(_, io) if io.kind() == io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eqes_decode_to_events() {
        let mut e = Eqe {
            object: 7,
            event_type: event::EVENT_COMPLETION,
            owner: 1,
            ..Eqe::default()
        };
        assert_eq!(Event::from_eqe(&e), Event::Completion { cqn: 7 });
        e.event_type = event::QP_FATAL;
        e.data = 3;
        assert_eq!(
            Event::from_eqe(&e),
            Event::Async {
                event: AsyncEvent::QpFatal,
                object: 7,
                data: 3
            }
        );
        assert_eq!(AsyncEvent::from_u8(event::CQ_ERR), AsyncEvent::CqErr);
        assert_eq!(AsyncEvent::from_u8(event::COMM_EST), AsyncEvent::CommEst);
        assert_eq!(
            AsyncEvent::from_u8(event::SQ_DRAINED),
            AsyncEvent::SqDrained
        );
        assert_eq!(AsyncEvent::from_u8(0x42), AsyncEvent::Unknown(0x42));
    }

    #[test]
    fn the_eq_fits_the_device_limit() {
        assert_eq!(eq_entries(65536), EQ_ENTRIES);
        assert_eq!(eq_entries(1024), 1024);
        assert_eq!(eq_entries(1000), 512);
        assert_eq!(eq_entries(1), 2);
        assert_eq!(eq_entries(0), 2);
    }

    #[test]
    fn the_owner_word_holds_the_eqe_owner_byte_on_top() {
        let e = Eqe {
            owner: 1,
            event_type: 0x80,
            ..Eqe::default()
        };
        let word = u32::from_le_bytes(
            e.as_bytes()[EQE_OWNER_WORD..EQE_OWNER_WORD + 4]
                .try_into()
                .unwrap(),
        );
        assert_eq!((word >> 24) as u8, 1);
    }

    #[test]
    fn queue_full_is_recognisable() {
        assert!(is_queue_full(&queue_full("post".into())));
        assert!(!is_queue_full(&invalid("post".into())));
        assert!(!is_queue_full(&Error::Timeout(Duration::ZERO, "x")));
    }
}
