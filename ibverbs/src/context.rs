//! Contexts: `ibv_open_device`, `ibv_close_device`, and the [`verbs_context`] an
//! `ibv_context *` leads verbs.h's inline functions to.
//!
//! An [`RnicContext`] is the `verbs_context` C sees in front of a [`Function`]: one
//! `rnic_driver::verbs::Context` (the function, reset and with its event queue) and the
//! thread that reads its event queue. The contexts one process opens on one function
//! share it, as rdma-core's contexts on one device share the device (rdma-core's own
//! test suite opens a client's and a server's on the device it tests): each context has
//! its own objects, channels and asynchronous events, and the function is closed with
//! the last of them. A context lives in an `Arc` registered by the address of its
//! `ibv_context`: every call looks the pointer up there, so a pointer that is not a live
//! context is `EINVAL` and is never dereferenced, and a context stays alive while a call
//! on another thread still uses it, even if the application closes it meanwhile.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::fs::File;
use std::mem::offset_of;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use rnic_abi::cmd::QueryDeviceResp;
use rnic_abi::regs;
use rnic_driver::device::PciIdentity;
use rnic_driver::verbs;

use crate::abi::*;
use crate::device::RnicDevice;
use crate::discover::Claim;
use crate::events::{self, ContextEvents, FunctionEvents};
use crate::ffi::{errno_of, invalid, minus_one, null_on_err, set_errno, unsupported, Errno};
use crate::query;
use crate::{cq, mw, objects, qp, srq};

/// An opened device. `repr(C)` with the `verbs_context` first, so that the
/// `ibv_context` at its end is where verbs.h expects it.
#[repr(C)]
pub(crate) struct RnicContext {
    vctx: UnsafeCell<verbs_context>,
    device: &'static RnicDevice,
    /// The function, opened for verbs (the one of [`RnicContext::function`]).
    pub(crate) verbs: Arc<verbs::Context>,
    /// This context's asynchronous events and the objects events name.
    pub(crate) events: ContextEvents,
    /// The function and its event thread, shared with this process's other contexts on
    /// it; closed when the last of them is dropped.
    function: Arc<Function>,
}

/// A function opened for verbs, shared by the contexts of this process on it.
pub(crate) struct Function {
    /// The function.
    pub(crate) verbs: Arc<verbs::Context>,
    /// The contexts on it, for the event thread to find an event's object in.
    contexts: Mutex<Vec<Weak<RnicContext>>>,
    /// The thread that reads its event queue.
    pub(crate) events: FunctionEvents,
    /// The device it is.
    device: &'static RnicDevice,
    /// The process that opened it: a child made by `fork` finds it in [`FUNCTIONS`]
    /// but has neither its event thread nor, in a VM, its memory (`MADV_DONTFORK`).
    pid: u32,
    /// The function's lock in a VM, released after `verbs` closed the function.
    _lock: Option<File>,
    /// Tells the device its function is free again; dropped last.
    _release: Release,
}

impl Function {
    /// The device's name (`rnic_0`), for messages.
    pub(crate) fn name(&self) -> &str {
        self.device.name()
    }

    /// Its live contexts, oldest first.
    pub(crate) fn contexts(&self) -> Vec<Arc<RnicContext>> {
        lock(&self.contexts)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

// SAFETY: `vctx` is written only before the context is shared; afterwards C may read
// and write it through its pointer (the cell makes that sound for Rust), and Rust
// never touches it again. `verbs::Context` and `ContextEvents` are Send and Sync; the
// rest is immutable.
unsafe impl Send for RnicContext {}
// SAFETY: as above.
unsafe impl Sync for RnicContext {}

/// Marks the device's function free when dropped.
struct Release(&'static RnicDevice);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// The live contexts.
static CONTEXTS: Mutex<Vec<Arc<RnicContext>>> = Mutex::new(Vec::new());

/// The functions contexts have open, with their devices. Opening and closing a context
/// hold it throughout, so a function is either found by the next open or closed.
static FUNCTIONS: Mutex<Vec<(&'static RnicDevice, Arc<Function>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn contexts() -> MutexGuard<'static, Vec<Arc<RnicContext>>> {
    lock(&CONTEXTS)
}

impl RnicContext {
    /// The `ibv_context` C holds.
    pub(crate) fn ibv_context(&self) -> *mut ibv_context {
        self.vctx
            .get()
            .wrapping_byte_add(offset_of!(verbs_context, context))
            .cast()
    }

    /// The live context `ctx` points to.
    pub(crate) fn lookup(ctx: *const ibv_context) -> Result<Arc<RnicContext>, Errno> {
        if ctx.is_null() {
            return Err(invalid(format_args!("context is NULL")));
        }
        contexts()
            .iter()
            .find(|c| std::ptr::eq(c.ibv_context(), ctx))
            .cloned()
            .ok_or_else(|| invalid(format_args!("{ctx:p} is not an open context")))
    }

    /// The device's name (`rnic_0`), for messages.
    pub(crate) fn name(&self) -> &str {
        self.device.name()
    }

    /// The function's PCI identity.
    pub(crate) fn pci(&self) -> PciIdentity {
        self.verbs.device().pci()
    }

    /// QUERY_DEVICE, asked now (and remembered for `ibv_get_device_guid`).
    pub(crate) fn query_device(&self) -> Result<QueryDeviceResp, Errno> {
        let q = self.verbs.query_device().map_err(|e| {
            log::warn!("{}: QUERY_DEVICE failed: {e}", self.device.name());
            errno_of(&e)
        })?;
        self.device.remember(q);
        Ok(q)
    }

    /// Whether the function's link is up (`DEVICE_STATUS`: its PF may take it down).
    pub(crate) fn link_up(&self) -> Result<bool, Errno> {
        let status = self
            .verbs
            .device()
            .transport()
            .reg_read32(regs::DEVICE_STATUS)
            .map_err(|e| {
                log::warn!("{}: reading DEVICE_STATUS failed: {e}", self.device.name());
                errno_of(&e)
            })?;
        Ok(status & regs::STATUS_LINK_DOWN == 0)
    }
}

/// The `verbs_context` of a new context on `device`: the ops this library has, the
/// unsupported ones that say so, and the `ibv_context` fields.
fn new_verbs_context(device: &'static RnicDevice) -> verbs_context {
    let mut v = verbs_context::zeroed();
    v.query_port = Some(query::query_port_op);
    v.query_device_ex = Some(query::query_device_ex_op);
    v.create_cq_ex = Some(cq::create_cq_ex_op);
    v.create_qp_ex = Some(qp::create_qp_ex_op);
    v.create_srq_ex = Some(srq::create_srq_ex_op);
    v.get_srq_num = Some(srq::get_srq_num_op);
    v.open_qp = Some(no_open_qp);
    v.open_xrcd = Some(no_open_xrcd);
    v.alloc_td = Some(no_alloc_td);
    v.alloc_dm = Some(no_alloc_dm);
    v.create_counters = Some(no_create_counters);
    v.create_wq = Some(no_create_wq);
    v.create_rwq_ind_table = Some(no_create_rwq_ind_table);
    v.create_flow_action_esp = Some(no_create_flow_action_esp);
    v.query_rt_values = Some(no_query_rt_values);
    // The whole structure: every op slot above is within reach.
    v.sz = size_of::<verbs_context>();
    let c = &mut v.context;
    c.device = device.as_ibv();
    c.ops._compat_query_device = Some(query::compat_query_device);
    c.ops._compat_query_port = Some(query::compat_query_port);
    // The ops verbs.h's inline functions call: the data path.
    c.ops.poll_cq = Some(cq::poll_cq_op);
    c.ops.req_notify_cq = Some(cq::req_notify_cq_op);
    c.ops.post_send = Some(qp::post_send_op);
    c.ops.post_recv = Some(qp::post_recv_op);
    c.ops.post_srq_recv = Some(srq::post_srq_recv_op);
    // Memory windows: verbs.h's ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw.
    c.ops.alloc_mw = Some(mw::alloc_mw_op);
    c.ops.bind_mw = Some(mw::bind_mw_op);
    c.ops.dealloc_mw = Some(mw::dealloc_mw_op);
    // No kernel file: commands go through the function's own queue. async_fd is set
    // when the context's event machinery exists.
    c.cmd_fd = -1;
    c.async_fd = -1;
    // One event queue, one completion vector.
    c.num_comp_vectors = 1;
    c.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    c.abi_compat = VERBS_ABI_IS_EXTENDED;
    v
}

/// Takes `device`'s function, starts verbs on it and its event thread.
fn open_function(device: &'static RnicDevice) -> Result<Arc<Function>, Errno> {
    let Claim {
        device: function,
        lock,
    } = device.take()?;
    let release = Release(device);
    let verbs = verbs::Context::new(function).map_err(|e| {
        log::warn!(
            "{}: cannot start verbs on {}: {e}",
            device.name(),
            device.location()
        );
        errno_of(&e)
    })?;
    device.remember(*verbs.attr());
    let function = Arc::new(Function {
        verbs: Arc::new(verbs),
        contexts: Mutex::new(Vec::new()),
        events: FunctionEvents::new()?,
        device,
        pid: std::process::id(),
        _lock: lock,
        _release: release,
    });
    events::start(&function)?;
    Ok(function)
}

/// Opens a context on `device`: on the function another context of this process has
/// open, or on the function taken now.
fn open(device: &'static RnicDevice) -> Result<*mut ibv_context, Errno> {
    let mut functions = lock(&FUNCTIONS);
    let function = match functions.iter().find(|(d, _)| std::ptr::eq(*d, device)) {
        Some((_, f)) if f.pid != std::process::id() => {
            log::warn!(
                "{} is held by the process this one was forked from; open it in one process at a time",
                device.name()
            );
            return Err(libc::EBUSY);
        }
        Some((_, f)) => Arc::clone(f),
        None => {
            let f = open_function(device)?;
            functions.push((device, Arc::clone(&f)));
            f
        }
    };
    let events = match ContextEvents::new() {
        Ok(e) => e,
        Err(e) => {
            release_unused(&mut functions, &function);
            return Err(e);
        }
    };
    let mut vctx = new_verbs_context(device);
    vctx.context.async_fd = events.async_fd();
    let ctx = Arc::new(RnicContext {
        vctx: UnsafeCell::new(vctx),
        device,
        verbs: Arc::clone(&function.verbs),
        events,
        function: Arc::clone(&function),
    });
    lock(&function.contexts).push(Arc::downgrade(&ctx));
    let ptr = ctx.ibv_context();
    log::debug!(
        "{}: opened {} as context {ptr:p}",
        device.name(),
        device.location()
    );
    contexts().push(ctx);
    Ok(ptr)
}

/// Stops `function`'s event thread and lets it go (the last context holding it closes
/// it), if no context of it is live.
fn release_unused(
    functions: &mut Vec<(&'static RnicDevice, Arc<Function>)>,
    function: &Arc<Function>,
) {
    lock(&function.contexts).retain(|w| w.strong_count() > 0);
    if !lock(&function.contexts).is_empty() {
        return;
    }
    function.events.stop();
    functions.retain(|(_, f)| !Arc::ptr_eq(f, function));
}

/// Closes a context: it leaves the registry, and is dropped (closing its function) as
/// soon as no call uses it.
fn close(ctx: *mut ibv_context) -> Result<(), Errno> {
    let ctx = {
        let mut all = contexts();
        let i = all
            .iter()
            .position(|c| std::ptr::eq(c.ibv_context(), ctx))
            .ok_or_else(|| invalid(format_args!("{ctx:p} is not an open context")))?;
        all.swap_remove(i)
    };
    log::debug!(
        "{}: closing context {:p}",
        ctx.device.name(),
        ctx.ibv_context()
    );
    // What the application left: destroyed as the kernel does for a closed device,
    // users before what they use, so the function is clean for the next process.
    drop(objects::take_context(ctx.ibv_context()));
    let mut functions = lock(&FUNCTIONS);
    let function = Arc::clone(&ctx.function);
    lock(&function.contexts).retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&ctx)));
    release_unused(&mut functions, &function);
    // Closed here if nothing else holds it, before another open may look for it.
    drop(ctx);
    drop(function);
    drop(functions);
    Ok(())
}

/// `ibv_open_device`: a context on the device, or NULL with `errno` (`EBUSY` if another
/// process has the function, the process this one was forked from among them).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    null_on_err("ibv_open_device", || open(RnicDevice::from_ibv(device)?))
}

/// `ibv_close_device`: 0, or -1 with `errno`.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    minus_one("ibv_close_device", || close(ctx).map(|()| 0))
}

/// Fails a pointer-returning op: NULL, `errno` `EOPNOTSUPP`, and one line on stderr.
fn unsupported_null<T>(what: &str) -> *mut T {
    set_errno(unsupported(what));
    std::ptr::null_mut()
}

/// Defines ops that fail as unsupported: NULL, `errno` `EOPNOTSUPP`, one line on stderr
/// naming the verb.
macro_rules! unsupported_ops {
    ($( $name:ident ( $($arg:ty),* ) -> $ret:ty = $what:literal; )*) => {
        $(
            unsafe extern "C" fn $name($(_: $arg),*) -> *mut $ret {
                unsupported_null($what)
            }
        )*
    };
}

unsupported_ops! {
    no_open_qp(*mut ibv_context, *mut ibv_qp_open_attr) -> ibv_qp = "ibv_open_qp (XRC)";
    no_open_xrcd(*mut ibv_context, *mut ibv_xrcd_init_attr) -> ibv_xrcd = "ibv_open_xrcd (XRC)";
    no_alloc_td(*mut ibv_context, *mut ibv_td_init_attr) -> ibv_td = "ibv_alloc_td (thread domains)";
    no_alloc_dm(*mut ibv_context, *mut ibv_alloc_dm_attr) -> ibv_dm = "ibv_alloc_dm (device memory)";
    no_create_counters(*mut ibv_context, *mut ibv_counters_init_attr) -> ibv_counters = "ibv_create_counters";
    no_create_wq(*mut ibv_context, *mut ibv_wq_init_attr) -> ibv_wq = "ibv_create_wq (work queues)";
    no_create_rwq_ind_table(*mut ibv_context, *mut ibv_rwq_ind_table_init_attr) -> ibv_rwq_ind_table = "ibv_create_rwq_ind_table (RSS)";
    no_create_flow_action_esp(*mut ibv_context, *mut std::ffi::c_void) -> ibv_flow_action = "ibv_create_flow_action_esp (IPsec)";
}

unsafe extern "C" fn no_query_rt_values(_: *mut ibv_context, _: *mut ibv_values_ex) -> c_int {
    unsupported("ibv_query_rt_values_ex (device clock)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_pointer_is_where_verbs_h_looks() {
        let v = UnsafeCell::new(verbs_context::zeroed());
        let ctx: *mut ibv_context = v
            .get()
            .wrapping_byte_add(offset_of!(verbs_context, context))
            .cast();
        // verbs_get_ctx: container_of(ctx, struct verbs_context, context).
        let back = ctx.wrapping_byte_sub(offset_of!(verbs_context, context)) as *mut verbs_context;
        assert_eq!(back, v.get());
    }

    #[test]
    fn closing_or_querying_what_is_not_a_context_is_einval() {
        let garbage = 0x4000 as *mut ibv_context;
        // SAFETY: the function takes any pointer.
        assert_eq!(unsafe { ibv_close_device(garbage) }, -1);
        // SAFETY: see set_errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_close_device(std::ptr::null_mut()) }, -1);
        assert!(RnicContext::lookup(garbage).is_err());
        // SAFETY: the function takes any pointer.
        assert!(unsafe { ibv_open_device(std::ptr::null_mut()) }.is_null());
    }

    #[test]
    fn unsupported_ops_fail_with_eopnotsupp() {
        // SAFETY: the ops ignore their arguments.
        unsafe {
            assert!(no_open_xrcd(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
            assert_eq!(
                no_query_rt_values(std::ptr::null_mut(), std::ptr::null_mut()),
                libc::EOPNOTSUPP
            );
        }
    }
}
