//! The ops: what libibverbs calls for an rnic device. Control verbs are libibverbs'
//! `ibv_cmd_*` with rnic's driver data; posting, polling and arming work on the mapped
//! doorbell page and the rings ([`crate::ring`], [`crate::send`]).
//!
//! Objects are the provider's own allocations with the libibverbs structure first, so a
//! `*mut ibv_cq` is a `*mut Cq` and so on. Each CQ is guarded by a mutex, and each QP's
//! send and receive queues by one each (their accounting, `rnic_driver::verbs::SqState`
//! and `RqState`, which polling credits). Lock order: CQ, then the context's QP table,
//! then a queue. No call unwinds into C: every op runs under [`guard`].

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_abi::pci::{PF_DEVICE_ID, VENDOR_ID, VF_DEVICE_ID};
use rnic_abi::uverbs::{
    CreateCqReq, CreateQpReq, CreateSrqReq, ResizeCqReq, ResizeSrqReq, MMAP_LEN, UVERBS_ABI_VERSION,
};
use rnic_abi::verbs::{rq_stride, sq_stride, Cqe, Sge};
use rnic_driver::verbs::{RqState, SendSlot, SqState};
use rnic_verbs_abi::*;

use crate::driver::*;
use crate::ring::{ibv_wc_of, is_recv, write_recv_wqe, CqReader, Doorbells, Ring};
use crate::send::{inc_rkey, write_send_wqe, SendLimits, UdAv};
use crate::wr::{Batch, SUPPORTED_SEND_OPS};

type Errno = c_int;

fn set_errno(e: Errno) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

/// Runs an op, turning a panic into `on_panic` (and `EIO` in errno) instead of unwinding
/// into C.
fn guard<T>(name: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            eprintln!("librnic: {name}: internal error; failing the call with EIO");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// For ops that return 0 or an errno value.
fn status(name: &str, body: impl FnOnce() -> Result<(), Errno>) -> c_int {
    guard(name, libc::EIO, || match body() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    })
}

/// For ops that return an object or null with errno set.
fn object<T>(name: &str, body: impl FnOnce() -> Result<*mut T, Errno>) -> *mut T {
    guard(name, null_mut(), || match body() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            null_mut()
        }
    })
}

/// An `ibv_cmd_*` result (0 or an errno value) as a `Result`.
fn cmd(ret: c_int) -> Result<(), Errno> {
    match ret {
        0 => Ok(()),
        e if e > 0 => Err(e),
        _ => Err(libc::EIO),
    }
}

/// A page-aligned mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory (or device memory) usable from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` bytes (rounded up to pages) of zeroed anonymous memory; an empty mapping
    /// for 0.
    fn anonymous(len: usize) -> Result<Self, Errno> {
        if len == 0 {
            return Ok(Self {
                ptr: null_mut(),
                len: 0,
            });
        }
        let len = len.div_ceil(4096) * 4096;
        let m = Self::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)?;
        // A child of fork() must not get the pages (copy-on-write would leave the device
        // writing the parent's old ones), as libibverbs does for registered memory.
        // SAFETY: our own mapping.
        unsafe { libc::madvise(m.ptr.cast(), m.len, libc::MADV_DONTFORK) };
        Ok(m)
    }

    /// One page of `fd` at `offset`, shared.
    fn device(fd: c_int, offset: u64) -> Result<Self, Errno> {
        let offset = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
        Self::map(MMAP_LEN as usize, libc::MAP_SHARED, fd, offset)
    }

    fn map(len: usize, flags: c_int, fd: c_int, offset: libc::off_t) -> Result<Self, Errno> {
        // SAFETY: a new mapping at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            // SAFETY: errno is thread-local.
            return Err(unsafe { *libc::__errno_location() });
        }
        Ok(Self { ptr: p.cast(), len })
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: our own mapping, no longer used.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

// ---- device ----

static MATCH_TABLE: [verbs_match_ent; 3] = [
    verbs_match_ent {
        driver_data: ptr::null(),
        u: 0,
        vendor: VENDOR_ID,
        device: PF_DEVICE_ID,
        kind: VERBS_MATCH_PCI,
    },
    verbs_match_ent {
        driver_data: ptr::null(),
        u: 0,
        vendor: VENDOR_ID,
        device: VF_DEVICE_ID,
        kind: VERBS_MATCH_PCI,
    },
    verbs_match_ent {
        driver_data: ptr::null(),
        u: 0,
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL,
    },
];

/// What the plug-in registers: the name `rnic`, uverbs ABI 1, rnic's PF and VF.
pub static OPS: verbs_device_ops = verbs_device_ops {
    name: c"rnic".as_ptr(),
    match_min_abi_version: UVERBS_ABI_VERSION,
    match_max_abi_version: UVERBS_ABI_VERSION,
    match_table: MATCH_TABLE.as_ptr(),
    static_providers: ptr::null(),
    match_device: None,
    alloc_context: Some(alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
};

unsafe extern "C" fn alloc_device(_sysfs: *mut verbs_sysfs_dev) -> *mut verbs_device {
    // SAFETY: calloc of a structure that is valid all-zero (integers, pointers, arrays).
    let d = unsafe { libc::calloc(1, size_of::<verbs_device>()) };
    d.cast()
}

unsafe extern "C" fn uninit_device(device: *mut verbs_device) {
    // SAFETY: allocated by alloc_device; libibverbs is done with it.
    unsafe { libc::free(device.cast()) };
}

// ---- context ----

/// The context: libibverbs' `verbs_context` (allocated zeroed by libibverbs), then ours.
#[repr(C)]
struct Context {
    vctx: verbs_context,
    inner: *mut Inner,
}

/// The provider's part of a context.
struct Inner {
    db: Doorbells,
    _db_page: Mapping,
    _kick_page: Mapping,
    /// The QPs, by number, for polling to credit their queues.
    qps: Mutex<HashMap<u32, Arc<QpTrack>>>,
}

/// A QP's queue accounting.
struct QpTrack {
    sq: Mutex<SqState>,
    rq: Mutex<RqState>,
    /// The accounting of the QP's SRQ, which its receive completions credit instead of
    /// `rq`.
    srq: Option<Arc<Mutex<RqState>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The provider's part of the context `ctx` belongs to.
///
/// # Safety
///
/// `ctx` is a context this provider allocated and has not freed.
unsafe fn inner<'a>(ctx: *mut ibv_context) -> &'a Inner {
    let c = ctx
        .cast::<u8>()
        .wrapping_sub(offset_of!(verbs_context, context))
        .cast::<Context>();
    // SAFETY: the caller's contract: alloc_context set `inner` before handing it out.
    unsafe { &*(*c).inner }
}

static CONTEXT_OPS: verbs_context_ops = verbs_context_ops {
    alloc_mw: Some(alloc_mw),
    alloc_pd: Some(alloc_pd),
    bind_mw: Some(bind_mw),
    create_ah: Some(create_ah),
    create_cq: Some(create_cq),
    create_cq_ex: Some(create_cq_ex),
    create_qp: Some(create_qp),
    create_qp_ex: Some(create_qp_ex),
    create_srq: Some(create_srq),
    dealloc_mw: Some(dealloc_mw),
    attach_mcast: Some(attach_mcast),
    detach_mcast: Some(detach_mcast),
    dealloc_pd: Some(dealloc_pd),
    dereg_mr: Some(dereg_mr),
    destroy_ah: Some(destroy_ah),
    destroy_cq: Some(destroy_cq),
    destroy_qp: Some(destroy_qp),
    destroy_srq: Some(destroy_srq),
    free_context: Some(free_context),
    modify_qp: Some(modify_qp),
    modify_srq: Some(modify_srq),
    poll_cq: Some(poll_cq),
    post_recv: Some(post_recv),
    post_send: Some(post_send),
    post_srq_recv: Some(post_srq_recv),
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    query_qp: Some(query_qp),
    query_srq: Some(query_srq),
    reg_mr: Some(reg_mr),
    req_notify_cq: Some(req_notify_cq),
    resize_cq: Some(resize_cq),
    ..verbs_context_ops::EMPTY
};

unsafe extern "C" fn alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    object("alloc_context", || {
        // SAFETY: libibverbs' allocator: zeroed memory of our size with the verbs_context
        // at its offset (0) initialised.
        let c = unsafe {
            _verbs_init_and_alloc_context(
                device,
                cmd_fd,
                size_of::<Context>(),
                offset_of!(Context, vctx) as *mut verbs_context,
                0,
            )
        }
        .cast::<Context>();
        if c.is_null() {
            // SAFETY: errno is thread-local.
            return Err(unsafe { *libc::__errno_location() });
        }
        // SAFETY: `c` is the context just allocated, ours alone.
        match unsafe { open_context(c, cmd_fd) } {
            Ok(()) => Ok(c.cast::<verbs_context>()),
            Err(e) => {
                // SAFETY: as rdma-core's providers undo a failed allocation.
                unsafe {
                    verbs_uninit_context(c.cast());
                    libc::free(c.cast());
                }
                Err(e)
            }
        }
    })
}

/// `ALLOC_UCONTEXT` and the two mappings.
///
/// # Safety
///
/// `c` is a context fresh from `_verbs_init_and_alloc_context`.
unsafe fn open_context(c: *mut Context, cmd_fd: c_int) -> Result<(), Errno> {
    let mut req = ibv_get_context::default();
    let mut resp = GetContextResp::default();
    // SAFETY: the command and response buffers are ours, of the sizes given.
    cmd(unsafe {
        ibv_cmd_get_context(
            c.cast(),
            &mut req,
            size_of::<ibv_get_context>(),
            &mut resp.core,
            size_of::<GetContextResp>(),
        )
    })?;
    let drv = resp.drv;
    if drv.abi_version >> 16 != u32::from(rnic_abi::ABI_MAJOR) {
        // A driver refuses a device of another major version (datasheet §1.3).
        return Err(libc::EPROTONOSUPPORT);
    }
    let db_page = Mapping::device(cmd_fd, drv.doorbell_offset)?;
    let kick_page = Mapping::device(cmd_fd, drv.kick_offset)?;
    // SAFETY: both pages stay mapped as long as Inner, which owns them.
    let db = unsafe { Doorbells::new(db_page.ptr, kick_page.ptr, drv.doorbell_page) };
    let inner = Box::new(Inner {
        db,
        _db_page: db_page,
        _kick_page: kick_page,
        qps: Mutex::new(HashMap::new()),
    });
    // SAFETY: `c` is ours; the ops table is a static.
    unsafe {
        (*c).inner = Box::into_raw(inner);
        verbs_set_ops(c.cast(), &CONTEXT_OPS);
    }
    Ok(())
}

unsafe extern "C" fn free_context(ctx: *mut ibv_context) {
    guard("free_context", (), || {
        let c = ctx
            .cast::<u8>()
            .wrapping_sub(offset_of!(verbs_context, context))
            .cast::<Context>();
        // SAFETY: our context, freed once by libibverbs' ibv_close_device.
        unsafe {
            if !(*c).inner.is_null() {
                drop(Box::from_raw((*c).inner));
            }
            verbs_uninit_context(c.cast());
            libc::free(c.cast());
        }
    })
}

unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    status("query_device_ex", || {
        let mut resp = ib_uverbs_ex_query_device_resp { bytes: [0; 304] };
        let mut resp_size = size_of::<ib_uverbs_ex_query_device_resp>();
        // SAFETY: libibverbs' own arguments, and our response buffer of that size.
        cmd(unsafe {
            ibv_cmd_query_device_any(ctx, input, attr, attr_size, &mut resp, &mut resp_size)
        })
    })
}

unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    status("query_port", || {
        let mut req = ibv_query_port::default();
        // SAFETY: libibverbs' arguments and our command buffer.
        cmd(unsafe { ibv_cmd_query_port(ctx, port, attr, &mut req, size_of::<ibv_query_port>()) })
    })
}

// ---- PD, MR, MW ----

/// Makes a provider object: `obj` boxed, then `create` (the `ibv_cmd_*` that makes it in
/// the kernel and fills it) run on it; the box goes again if that fails.
fn created<T>(obj: T, create: impl FnOnce(*mut T) -> c_int) -> Result<*mut T, Errno> {
    let p = Box::into_raw(Box::new(obj));
    if let Err(e) = cmd(create(p)) {
        // SAFETY: ours, never handed out.
        drop(unsafe { Box::from_raw(p) });
        return Err(e);
    }
    Ok(p)
}

/// Undoes [`created`]: `destroy` (the object's `ibv_cmd_*`), then the box, unless the
/// kernel refused.
///
/// # Safety
///
/// `p` was made by [`created`] as a `T`, and is not used once destroyed.
unsafe fn destroyed<T>(p: *mut T, destroy: impl FnOnce(*mut T) -> c_int) -> Result<(), Errno> {
    cmd(destroy(p))?;
    // SAFETY: the caller's contract; the kernel has let go of it.
    drop(unsafe { Box::from_raw(p) });
    Ok(())
}

/// A PD.
#[repr(C)]
struct Pd {
    ibv: ibv_pd,
    pdn: u32,
}

unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    object("alloc_pd", || {
        let pd = Pd {
            ibv: ibv_pd::zeroed(),
            pdn: 0,
        };
        let mut req = ibv_alloc_pd::default();
        let mut resp = AllocPdResp::default();
        let pd = created(pd, |pd| {
            // SAFETY: our PD and buffers.
            unsafe {
                ibv_cmd_alloc_pd(
                    ctx,
                    pd.cast(),
                    &mut req,
                    size_of::<ibv_alloc_pd>(),
                    &mut resp.core,
                    size_of::<AllocPdResp>(),
                )
            }
        })?;
        // SAFETY: ours.
        unsafe { (*pd).pdn = resp.drv.pdn };
        Ok(pd.cast())
    })
}

unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: a PD of ours, made by alloc_pd.
    status("dealloc_pd", || unsafe {
        destroyed(pd.cast::<Pd>(), |pd| ibv_cmd_dealloc_pd(pd.cast()))
    })
}

unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    object("reg_mr", || {
        // SAFETY: verbs_mr is valid all-zero.
        let mr: verbs_mr = unsafe { std::mem::zeroed() };
        let mut req = ibv_reg_mr::default();
        let mut resp = ib_uverbs_reg_mr_resp::default();
        let mr = created(mr, |mr| {
            // SAFETY: the application's region and our MR and buffers.
            unsafe {
                ibv_cmd_reg_mr(
                    pd,
                    addr,
                    length,
                    hca_va,
                    access,
                    mr,
                    &mut req,
                    size_of::<ibv_reg_mr>(),
                    &mut resp,
                    size_of::<ib_uverbs_reg_mr_resp>(),
                )
            }
        })?;
        Ok(mr.cast())
    })
}

unsafe extern "C" fn dereg_mr(mr: *mut verbs_mr) -> c_int {
    // SAFETY: an MR of ours, made by reg_mr.
    status("dereg_mr", || unsafe {
        destroyed(mr, |mr| ibv_cmd_dereg_mr(mr))
    })
}

/// `ibv_alloc_mw`: a window of type 1 or 2 (the kernel refuses other types with `EINVAL`,
/// and all of them with `EOPNOTSUPP` on a function without memory windows). Its key's tag
/// is 0 until a bind.
unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw {
    object("alloc_mw", || {
        let mut req = ibv_alloc_mw::default();
        let mut resp = ib_uverbs_alloc_mw_resp::default();
        created(ibv_mw::zeroed(), |mw| {
            // SAFETY: the application's PD, our window and buffers.
            unsafe {
                ibv_cmd_alloc_mw(
                    pd,
                    mw_type,
                    mw,
                    &mut req,
                    size_of::<ibv_alloc_mw>(),
                    &mut resp,
                    size_of::<ib_uverbs_alloc_mw_resp>(),
                )
            }
        })
    })
}

unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: a window of ours, made by alloc_mw.
    status("dealloc_mw", || unsafe {
        destroyed(mw, |mw| ibv_cmd_dealloc_mw(mw))
    })
}

/// `ibv_attach_mcast`: the kernel's `attach_mcast` (ATTACH_MCAST, datasheet §14.15) joins
/// the UD QP to the group; the device then hands it the group's datagrams.
unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    status("attach_mcast", || {
        // SAFETY: the application's QP and GID, which libibverbs passes on.
        cmd(unsafe { ibv_cmd_attach_mcast(qp, gid, lid) })
    })
}

/// `ibv_detach_mcast`: the QP leaves the group (DETACH_MCAST).
unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    status("detach_mcast", || {
        // SAFETY: as attach_mcast.
        cmd(unsafe { ibv_cmd_detach_mcast(qp, gid, lid) })
    })
}

/// `ibv_bind_mw` (verbs.h has checked that the window is of type 1 and the region of its
/// PD): posts a `BIND_MW` WQE on `qp` under the window's next key (`ibv_inc_rkey`) and,
/// once posted, makes that `mw->rkey`, as rdma-core's providers do (if the bind then
/// completes in error, the application puts the old key back). A type 1 window cannot be
/// zero-based: `EINVAL`.
unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    status("bind_mw", || {
        if mw.is_null() || mw_bind.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the application's bind.
        let b = unsafe { *mw_bind };
        if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the application's window.
        let new_key = inc_rkey(unsafe { (*mw).rkey });
        let mut w = ibv_send_wr::zeroed();
        w.wr_id = b.wr_id;
        w.opcode = IBV_WR_BIND_MW;
        w.send_flags = b.send_flags;
        w.anon_bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
            mw,
            rkey: new_key,
            bind_info: b.bind_info,
        };
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: a QP of ours and a WR of one bind, alive during the call.
        match unsafe { post_send(qp, &mut w, &mut bad) } {
            0 => {
                // SAFETY: the application's window; its key is the provider's to keep.
                unsafe { (*mw).rkey = new_key };
                Ok(())
            }
            e => Err(e),
        }
    })
}

// ---- CQ ----

/// A CQ.
#[repr(C)]
struct Cq {
    /// An extended CQ's structure, whose start is the `ibv_cq` of any CQ.
    ibv: ibv_cq_ex,
    /// The context's part (outlives the CQ: a context is closed after its objects).
    inner: *const Inner,
    reader: Mutex<CqReader>,
    /// The completion an extended CQ's poll is at (`ibv_start_poll`, `ibv_next_poll`).
    current: Mutex<ibv_wc>,
    /// The ring the reader reads (another after `ibv_resize_cq`).
    ring: Mutex<Mapping>,
}

/// The CQ of an `ibv_cq` of ours.
///
/// # Safety
///
/// `cq` was created by [`create_cq`] and not destroyed.
unsafe fn cq_of<'a>(cq: *mut ibv_cq) -> &'a Cq {
    // SAFETY: the caller's contract; `ibv` is the first field.
    unsafe { &*cq.cast::<Cq>() }
}

unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: libibverbs' arguments.
    object("create_cq", || unsafe {
        new_cq(ctx, cqe, channel, comp_vector).map(|c| c.cast())
    })
}

/// `ibv_create_cq_ex`: a CQ with the `ibv_cq_ex` poll API for the fields of a plain
/// `ibv_wc` (`IBV_WC_STANDARD_FLAGS`); no time stamps or other fields, no parent domain,
/// no creation flags (`EOPNOTSUPP`).
unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    object("create_cq_ex", || {
        // SAFETY: libibverbs' argument.
        let a = unsafe { &*attr };
        if a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            || (a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags != 0)
            || a.wc_flags & !IBV_WC_STANDARD_FLAGS != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let vector = c_int::try_from(a.comp_vector).map_err(|_| libc::EINVAL)?;
        // SAFETY: libibverbs' context and the application's channel.
        let cq = unsafe { new_cq(ctx, cqe, a.channel, vector)? };
        // SAFETY: the CQ just created, ours, not yet handed out.
        let x = unsafe { &mut (*cq).ibv };
        x.cq_context = a.cq_context;
        x.start_poll = Some(cq_start_poll);
        x.next_poll = Some(cq_next_poll);
        x.end_poll = Some(cq_end_poll);
        x.read_opcode = Some(cq_read_opcode);
        x.read_vendor_err = Some(cq_read_vendor_err);
        x.read_byte_len = Some(cq_read_byte_len);
        x.read_imm_data = Some(cq_read_imm_data);
        x.read_qp_num = Some(cq_read_qp_num);
        x.read_src_qp = Some(cq_read_src_qp);
        x.read_wc_flags = Some(cq_read_wc_flags);
        x.read_slid = Some(cq_read_slid);
        x.read_sl = Some(cq_read_sl);
        x.read_dlid_path_bits = Some(cq_read_dlid_path_bits);
        Ok(cq.cast())
    })
}

/// Creates a CQ (`create_cq`, `create_cq_ex`).
///
/// # Safety
///
/// `ctx` is an open context of ours, `channel` null or a channel of it.
/// The entries and the zeroed memory of a new ring for at least `wanted` CQEs or WQEs of
/// `stride` bytes: a power of two, at least 2 (the rings of `new_cq`, `resize_cq`,
/// `create_srq` and `resize_srq`).
fn ring_memory(wanted: u32, stride: u32) -> Result<(u32, Mapping), Errno> {
    let entries = wanted
        .max(2)
        .checked_next_power_of_two()
        .ok_or(libc::EINVAL)?;
    let len = (entries as usize)
        .checked_mul(stride as usize)
        .ok_or(libc::EINVAL)?;
    Ok((entries, Mapping::anonymous(len)?))
}

/// [`ring_memory`] of a CQ of at least `cqe` entries.
fn cq_ring_memory(cqe: c_int) -> Result<(u32, Mapping), Errno> {
    let want = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
    ring_memory(want, size_of::<Cqe>() as u32)
}

unsafe fn new_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut Cq, Errno> {
    let (entries, ring) = cq_ring_memory(cqe)?;
    let mut req = rnic_create_cq {
        drv: CreateCqReq {
            ring_va: ring.addr(),
            entries,
            reserved: 0,
        },
        ..Default::default()
    };
    let mut resp = CreateCqResp::default();
    // SAFETY: a ring of `entries` CQEs, mapped above (zeroed), owned by the CQ.
    let view = unsafe { Ring::new(ring.ptr, entries, size_of::<Cqe>() as u32) };
    let cq = Box::into_raw(Box::new(Cq {
        ibv: ibv_cq_ex::zeroed(),
        // SAFETY: ctx is an open context of ours.
        inner: unsafe { inner(ctx) },
        // The slot is the kernel's answer, below.
        reader: Mutex::new(CqReader::new(view, 0)),
        current: Mutex::new(ibv_wc::zeroed()),
        ring: Mutex::new(ring),
    }));
    // SAFETY: our CQ and buffers.
    let r = cmd(unsafe {
        ibv_cmd_create_cq(
            ctx,
            entries as c_int,
            channel,
            comp_vector,
            cq.cast(),
            &mut req.hdr,
            size_of::<rnic_create_cq>(),
            &mut resp.core,
            size_of::<CreateCqResp>(),
        )
    });
    if let Err(e) = r {
        // SAFETY: ours, never handed out.
        drop(unsafe { Box::from_raw(cq) });
        return Err(e);
    }
    if resp.drv.entries != entries {
        // SAFETY: the CQ just created, ours, never handed out.
        unsafe {
            ibv_cmd_destroy_cq(cq.cast());
            drop(Box::from_raw(cq));
        }
        return Err(libc::EPROTO);
    }
    // SAFETY: ours, not yet handed out.
    *lock(unsafe { &(*cq).reader }) = CqReader::new(view, resp.drv.doorbell_slot);
    Ok(cq)
}

/// `ibv_start_poll` and `ibv_next_poll`: the next completion (of a QP still there) becomes
/// the current one, or `ENOENT`.
fn cq_poll_one(name: &str, cqx: *mut ibv_cq_ex) -> c_int {
    guard(name, libc::EIO, || {
        // SAFETY: an extended CQ of ours, alive while the application polls it.
        let cq = unsafe { cq_of(cqx.cast()) };
        // SAFETY: the context outlives its CQs.
        let inner = unsafe { &*cq.inner };
        let mut reader = lock(&cq.reader);
        let before = reader.consumed();
        loop {
            let Some(c) = reader.take() else {
                // No ibv_end_poll follows ENOENT: give back what was passed over.
                if reader.consumed() != before {
                    reader.publish(&inner.db);
                }
                return libc::ENOENT;
            };
            if !credit(inner, &c) {
                continue;
            }
            let wc = ibv_wc_of(&c);
            // SAFETY: the application's CQ structure, which it reads after the call.
            unsafe {
                (*cqx).status = wc.status;
                (*cqx).wr_id = wc.wr_id;
            }
            *lock(&cq.current) = wc;
            return 0;
        }
    })
}

unsafe extern "C" fn cq_start_poll(cqx: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    cq_poll_one("ibv_start_poll", cqx)
}

unsafe extern "C" fn cq_next_poll(cqx: *mut ibv_cq_ex) -> c_int {
    cq_poll_one("ibv_next_poll", cqx)
}

unsafe extern "C" fn cq_end_poll(cqx: *mut ibv_cq_ex) {
    guard("ibv_end_poll", (), || {
        // SAFETY: as in cq_poll_one.
        let cq = unsafe { cq_of(cqx.cast()) };
        // SAFETY: the context outlives its CQs.
        let inner = unsafe { &*cq.inner };
        lock(&cq.reader).publish(&inner.db);
    })
}

/// A field of the current completion of the extended CQ `cqx`.
fn current<T>(cqx: *mut ibv_cq_ex, field: impl FnOnce(&ibv_wc) -> T) -> T {
    // SAFETY: an extended CQ of ours, between ibv_start_poll and ibv_end_poll.
    let cq = unsafe { cq_of(cqx.cast()) };
    field(&lock(&cq.current))
}

unsafe extern "C" fn cq_read_opcode(cqx: *mut ibv_cq_ex) -> ibv_wc_opcode {
    current(cqx, |w| w.opcode)
}

unsafe extern "C" fn cq_read_vendor_err(cqx: *mut ibv_cq_ex) -> u32 {
    current(cqx, |w| w.vendor_err)
}

unsafe extern "C" fn cq_read_byte_len(cqx: *mut ibv_cq_ex) -> u32 {
    current(cqx, |w| w.byte_len)
}

unsafe extern "C" fn cq_read_imm_data(cqx: *mut ibv_cq_ex) -> u32 {
    current(cqx, |w| w.imm_data)
}

unsafe extern "C" fn cq_read_qp_num(cqx: *mut ibv_cq_ex) -> u32 {
    current(cqx, |w| w.qp_num)
}

unsafe extern "C" fn cq_read_src_qp(cqx: *mut ibv_cq_ex) -> u32 {
    current(cqx, |w| w.src_qp)
}

unsafe extern "C" fn cq_read_wc_flags(cqx: *mut ibv_cq_ex) -> c_uint {
    current(cqx, |w| w.wc_flags)
}

unsafe extern "C" fn cq_read_slid(cqx: *mut ibv_cq_ex) -> u32 {
    current(cqx, |w| u32::from(w.slid))
}

unsafe extern "C" fn cq_read_sl(cqx: *mut ibv_cq_ex) -> u8 {
    current(cqx, |w| w.sl)
}

unsafe extern "C" fn cq_read_dlid_path_bits(cqx: *mut ibv_cq_ex) -> u8 {
    current(cqx, |w| w.dlid_path_bits)
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    status("destroy_cq", || {
        // SAFETY: a CQ of ours.
        cmd(unsafe { ibv_cmd_destroy_cq(cq) })?;
        // SAFETY: allocated by create_cq; the device no longer writes its ring.
        drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
        Ok(())
    })
}

/// `ibv_resize_cq`: the CQ moves to a new ring of at least `cqe` entries (a power of two)
/// with the completions not polled yet (the kernel's and the device's `RESIZE_CQ`); the
/// reader keeps its consumer index and reads the new ring from it.
unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    status("resize_cq", || {
        let (entries, ring) = cq_ring_memory(cqe)?;
        let size = c_int::try_from(entries).map_err(|_| libc::EINVAL)?;
        // SAFETY: a CQ of ours, alive during the call.
        let c = unsafe { cq_of(cq) };
        let mut req = rnic_resize_cq {
            drv: ResizeCqReq {
                ring_va: ring.addr(),
                entries,
                reserved: 0,
            },
            ..Default::default()
        };
        let mut resp = ib_uverbs_resize_cq_resp::default();
        // No poll reads either ring while the CQ moves.
        let mut reader = lock(&c.reader);
        // SAFETY: our CQ and buffers.
        cmd(unsafe {
            ibv_cmd_resize_cq(
                cq,
                size,
                &mut req.hdr,
                size_of::<rnic_resize_cq>(),
                &mut resp,
                size_of::<ib_uverbs_resize_cq_resp>(),
            )
        })?;
        // SAFETY: a ring of `entries` CQEs, mapped above, which the CQ keeps from now on.
        reader.set_ring(unsafe { Ring::new(ring.ptr, entries, size_of::<Cqe>() as u32) });
        // The old ring, which the kernel unpinned, goes.
        *lock(&c.ring) = ring;
        Ok(())
    })
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard("poll_cq", -1, || {
        // SAFETY: a CQ of ours, alive while the application polls it.
        let cq = unsafe { cq_of(cq) };
        // SAFETY: the context outlives its CQs.
        let inner = unsafe { &*cq.inner };
        let mut reader = lock(&cq.reader);
        let before = reader.consumed();
        let mut got = 0;
        while got < n.max(0) {
            let Some(c) = reader.take() else { break };
            if !credit(inner, &c) {
                // A completion of a QP destroyed since: nobody's (as rnic.ko does).
                continue;
            }
            // SAFETY: the application's array of `n` entries.
            unsafe { wc.add(got as usize).write(ibv_wc_of(&c)) };
            got += 1;
        }
        if reader.consumed() != before {
            reader.publish(&inner.db);
        }
        got
    })
}

/// Frees the queue entries a completion completes; false if its QP is not (or no
/// longer) one of the context's.
fn credit(inner: &Inner, c: &Cqe) -> bool {
    let Some(track) = lock(&inner.qps).get(&c.qp_num).cloned() else {
        return false;
    };
    if is_recv(c) {
        // The device copies the receive WQE's wr_id (the application's, as written by
        // post_recv or post_srq_recv) into the CQE; an SRQ receive frees an SRQ entry.
        match &track.srq {
            Some(srq) => lock(srq).complete(),
            None => lock(&track.rq).complete(),
        };
    } else {
        lock(&track.sq).complete(c.wr_id, c.status == 0);
    }
    true
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    status("req_notify_cq", || {
        // SAFETY: a CQ of ours.
        let cq = unsafe { cq_of(cq) };
        // SAFETY: the context outlives its CQs.
        let inner = unsafe { &*cq.inner };
        lock(&cq.reader).arm(&inner.db, solicited_only != 0);
        Ok(())
    })
}

// ---- QP ----

/// `struct verbs_qp`'s room: libibverbs' `ibv_qp_to_qp_ex` reads `comp_mask` (0 here: no
/// extended QP).
#[repr(C)]
struct VerbsQp {
    qp_ex: ibv_qp_ex,
    comp_mask: u32,
    xrcd: *mut c_void,
}

/// A QP.
#[repr(C)]
struct Qp {
    vqp: VerbsQp,
    inner: *const Inner,
    track: Arc<QpTrack>,
    /// `enum ibv_qp_state` as the last successful MODIFY_QP left it.
    state: AtomicU32,
    sq: Ring,
    rq: Ring,
    sq_slot: u32,
    rq_slot: u32,
    limits: SendLimits,
    max_recv_sge: u32,
    sq_sig_all: bool,
    /// The `ibv_wr_*` batch of an extended QP.
    batch: Mutex<Batch>,
    _sq_ring: Mapping,
    _rq_ring: Mapping,
}

/// The QP of an `ibv_qp` of ours.
///
/// # Safety
///
/// `qp` was created by [`create_qp`] and not destroyed.
unsafe fn qp_of<'a>(qp: *mut ibv_qp) -> &'a Qp {
    // SAFETY: the caller's contract; the ibv_qp is at offset 0.
    unsafe { &*qp.cast::<Qp>() }
}

fn entries_for(wr: u32) -> Result<u32, Errno> {
    wr.max(1).checked_next_power_of_two().ok_or(libc::EINVAL)
}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: libibverbs' arguments.
    object("create_qp", || unsafe { new_qp(pd, attr) })
}

/// `ibv_create_qp_ex` (libibverbs calls `create_qp` itself when the mask is the PD alone):
/// the PD with `create_flags` 0 (rdma-core's tests ask for none on other vendors'
/// devices) is an ordinary QP; with `send_ops_flags` (those of [`SUPPORTED_SEND_OPS`]) it
/// also has the `ibv_wr_*` API ([`crate::wr`]), memory window binds included. No XRC, no
/// create flags, no TSO, ATOMIC WRITE or FLUSH: `EOPNOTSUPP`.
unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    object("create_qp_ex", || {
        // SAFETY: libibverbs' argument.
        let a = unsafe { &mut *attr };
        let known =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & !known != 0 || a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let ex = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        if ex && a.send_ops_flags & !SUPPORTED_SEND_OPS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: the application's PD.
        if a.pd.is_null() || unsafe { (*a.pd).context } != ctx {
            return Err(libc::EINVAL);
        }
        let mut legacy = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: the application's PD and our copy of its attributes.
        let qp = unsafe { new_qp(a.pd, &mut legacy) }?;
        // The capabilities the QP got, as ibv_create_qp reports them.
        a.cap = legacy.cap;
        if ex {
            // SAFETY: the QP just created, ours, not yet handed out.
            let vqp = unsafe { &mut *qp.cast::<VerbsQp>() };
            set_wr_ops(&mut vqp.qp_ex);
            vqp.comp_mask = VERBS_QP_EX;
        }
        Ok(qp)
    })
}

/// Creates a QP (`create_qp`, `create_qp_ex`).
///
/// # Safety
///
/// `pd` is a PD of ours and `attr` valid attributes.
unsafe fn new_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<*mut ibv_qp, Errno> {
    // SAFETY: the caller's contract.
    let (ctx, a) = unsafe { ((*pd).context, &mut *attr) };
    // An RC QP may take its receives from an SRQ; it then has no receive queue.
    let srq = if a.srq.is_null() {
        None
    } else if a.qp_type == IBV_QPT_RC {
        // SAFETY: an SRQ of ours (the application's attribute).
        Some(unsafe { srq_of(a.srq) }.rq.clone())
    } else {
        return Err(libc::EINVAL);
    };
    let ud = match a.qp_type {
        IBV_QPT_RC | IBV_QPT_UC => false,
        IBV_QPT_UD => true,
        _ => return Err(libc::EOPNOTSUPP),
    };
    let mut cap = a.cap;
    if srq.is_some() {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    let sq_entries = entries_for(cap.max_send_wr)?;
    let rq_entries = if cap.max_recv_wr == 0 {
        0
    } else {
        entries_for(cap.max_recv_wr)?
    };
    let sq_stride = sq_stride(cap.max_send_sge, cap.max_inline_data);
    let rq_stride = rq_stride(cap.max_recv_sge);
    let sq_ring = Mapping::anonymous(sq_entries as usize * sq_stride as usize)?;
    let rq_ring = Mapping::anonymous(rq_entries as usize * rq_stride as usize)?;
    let mut req = rnic_create_qp {
        drv: CreateQpReq {
            sq_va: sq_ring.addr(),
            rq_va: rq_ring.addr(),
            sq_entries,
            rq_entries,
        },
        ..Default::default()
    };
    let mut resp = CreateQpResp::default();
    let qp = Box::into_raw(Box::new(Qp {
        // SAFETY: VerbsQp is valid all-zero (integers, pointers, empty ops).
        vqp: unsafe { std::mem::zeroed() },
        // SAFETY: an open context of ours.
        inner: unsafe { inner(ctx) },
        track: Arc::new(QpTrack {
            sq: Mutex::new(SqState::new(sq_entries)),
            rq: Mutex::new(RqState::new(rq_entries)),
            srq,
        }),
        state: AtomicU32::new(IBV_QPS_RESET),
        // SAFETY: the rings just mapped, of these geometries.
        sq: unsafe { Ring::new(sq_ring.ptr, sq_entries, sq_stride) },
        // SAFETY: as above.
        rq: unsafe { Ring::new(rq_ring.ptr, rq_entries, rq_stride) },
        sq_slot: 0,
        rq_slot: 0,
        limits: SendLimits {
            max_sge: cap.max_send_sge,
            max_inline: 0,
            ud,
        },
        max_recv_sge: cap.max_recv_sge,
        sq_sig_all: a.sq_sig_all != 0,
        batch: Mutex::new(Batch::default()),
        _sq_ring: sq_ring,
        _rq_ring: rq_ring,
    }));
    // SAFETY: our QP (its ibv_qp first) and buffers; libibverbs' attributes.
    let r = cmd(unsafe {
        ibv_cmd_create_qp(
            pd,
            qp.cast(),
            attr,
            &mut req.hdr,
            size_of::<rnic_create_qp>(),
            &mut resp.core,
            size_of::<CreateQpResp>(),
        )
    });
    if let Err(e) = r {
        // SAFETY: ours, never handed out.
        drop(unsafe { Box::from_raw(qp) });
        return Err(e);
    }
    let d = resp.drv;
    // SAFETY: ours, not yet handed out.
    let q = unsafe { &mut *qp };
    if d.sq_stride != sq_stride || (rq_entries > 0 && d.rq_stride != rq_stride) {
        // SAFETY: the QP just created.
        unsafe { ibv_cmd_destroy_qp(qp.cast()) };
        // SAFETY: ours.
        drop(unsafe { Box::from_raw(qp) });
        return Err(libc::EPROTO);
    }
    q.sq_slot = d.sq_slot;
    q.rq_slot = d.rq_slot;
    q.limits.max_inline = d.max_inline_data.min(sq_stride - 64);
    // SAFETY: the context outlives its QPs.
    let inner = unsafe { &*q.inner };
    lock(&inner.qps).insert(d.qpn, q.track.clone());
    Ok(qp.cast())
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    status("destroy_qp", || {
        // SAFETY: a QP of ours.
        let (num, inner) = unsafe { ((*qp).qp_num, qp_of(qp).inner) };
        // SAFETY: as above.
        cmd(unsafe { ibv_cmd_destroy_qp(qp) })?;
        // SAFETY: the context outlives its QPs.
        lock(unsafe { &(*inner).qps }).remove(&num);
        // SAFETY: allocated by create_qp; the device no longer reads its rings.
        drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
        Ok(())
    })
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    status("modify_qp", || {
        // SAFETY: a QP of ours.
        let q = unsafe { qp_of(qp) };
        // Hold the queues so that no post runs while the state changes under it.
        let mut sq = lock(&q.track.sq);
        let mut rq = lock(&q.track.rq);
        let mut req = ibv_modify_qp::default();
        // SAFETY: a QP of ours, libibverbs' attributes, our buffer.
        cmd(unsafe { ibv_cmd_modify_qp(qp, attr, mask, &mut req, size_of::<ibv_modify_qp>()) })?;
        if mask & IBV_QP_STATE != 0 {
            // SAFETY: libibverbs' attributes.
            let state = unsafe { (*attr).qp_state };
            if state == IBV_QPS_RESET {
                // The device forgot its counts and leaves the slots to the driver
                // (datasheet §7.8): both count from 0 again.
                sq.reset();
                rq.reset();
                // SAFETY: the context outlives its QPs.
                let db = unsafe { &(*q.inner).db };
                db.store(q.sq_slot, 0, 0);
                db.store(q.rq_slot, 0, 0);
            }
            q.state.store(state, Ordering::Release);
        }
        Ok(())
    })
}

unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    status("query_qp", || {
        let mut req = ibv_query_qp::default();
        // SAFETY: a QP of ours, libibverbs' buffers, ours.
        cmd(unsafe {
            ibv_cmd_query_qp(
                qp,
                attr,
                mask,
                init_attr,
                &mut req,
                size_of::<ibv_query_qp>(),
            )
        })
    })
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard("post_send", libc::EIO, || {
        // SAFETY: a QP of ours.
        let q = unsafe { qp_of(qp) };
        // SAFETY: the context outlives its QPs.
        let inner = unsafe { &*q.inner };
        let state = q.state.load(Ordering::Acquire);
        let mut sq = lock(&q.track.sq);
        let before = sq.posted();
        let mut w = wr;
        let mut err = 0;
        if matches!(state, IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR) {
            err = libc::EINVAL;
        }
        while err == 0 && !w.is_null() {
            // SAFETY: the application's list.
            let r = unsafe { &*w };
            if sq.free() == 0 {
                err = libc::ENOMEM;
                break;
            }
            let av = if q.limits.ud {
                // SAFETY: `wr.ud` is the union member of UD sends; its AH is one of ours.
                let ah = unsafe { r.wr.ud.ah };
                if ah.is_null() {
                    err = libc::EINVAL;
                    break;
                }
                // SAFETY: an AH of ours (the Ah starts with its ibv_ah).
                Some(unsafe { (*ah.cast::<Ah>()).av })
            } else {
                None
            };
            // SAFETY: the entry after the last posted is free (checked above), under the
            // SQ's lock; the application's SGEs.
            let written =
                unsafe { write_send_wqe(q.sq.entry(sq.posted()), r, av.as_ref(), q.limits) };
            if let Err(e) = written {
                err = e;
                break;
            }
            sq.push(SendSlot {
                wr_id: r.wr_id,
                signaled: q.sq_sig_all || r.send_flags & IBV_SEND_SIGNALED != 0,
            });
            w = r.next;
        }
        if sq.posted() != before {
            inner.db.ring(q.sq_slot, sq.posted());
        }
        if err != 0 && !bad_wr.is_null() {
            // SAFETY: the application's out pointer.
            unsafe { *bad_wr = w };
        }
        err
    })
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("post_recv", libc::EIO, || {
        // SAFETY: a QP of ours.
        let q = unsafe { qp_of(qp) };
        // SAFETY: the context outlives its QPs.
        let inner = unsafe { &*q.inner };
        let mut rq = lock(&q.track.rq);
        // A QP on an SRQ has no receive queue (rq.entries() is 0).
        if q.state.load(Ordering::Acquire) == IBV_QPS_RESET || q.rq.entries() == 0 {
            if !bad_wr.is_null() {
                // SAFETY: the application's out pointer.
                unsafe { *bad_wr = wr };
            }
            return libc::EINVAL;
        }
        // SAFETY: the application's list; the QP's receive ring and its accounting, locked.
        unsafe {
            post_recv_list(
                &inner.db,
                &q.rq,
                q.rq_slot,
                q.max_recv_sge,
                &mut rq,
                wr,
                bad_wr,
            )
        }
    })
}

// ---- SRQ ----

/// A shared receive queue: its ring in anonymous memory, its slot on the context's page.
#[repr(C)]
struct Srq {
    ibv: ibv_srq,
    /// The context's part (outlives the SRQ).
    inner: *const Inner,
    /// Posted and completed receives; the completions of every QP on the SRQ credit it.
    rq: Arc<Mutex<RqState>>,
    /// Its ring (another after a resize); locked after `rq`.
    ring: Mutex<SrqRing>,
    slot: u32,
    max_sge: u32,
}

/// An SRQ's ring and the memory it is in.
struct SrqRing {
    ring: Ring,
    _mapping: Mapping,
}

impl SrqRing {
    /// The ring of `entries` WQEs of `stride` bytes in `mapping`, which it keeps.
    ///
    /// # Safety
    ///
    /// `mapping` holds `entries * stride` bytes.
    unsafe fn new(mapping: Mapping, entries: u32, stride: u32) -> Self {
        Self {
            // SAFETY: the caller's promise; the mapping lives as long as the ring.
            ring: unsafe { Ring::new(mapping.ptr, entries, stride) },
            _mapping: mapping,
        }
    }
}

/// The SRQ of an `ibv_srq` of ours.
///
/// # Safety
///
/// `srq` was created by [`create_srq`] and not destroyed.
unsafe fn srq_of<'a>(srq: *mut ibv_srq) -> &'a Srq {
    // SAFETY: the caller's contract; `ibv` is the first field.
    unsafe { &*srq.cast::<Srq>() }
}

unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    object("create_srq", || {
        // SAFETY: libibverbs' arguments.
        let (ctx, a) = unsafe { ((*pd).context, &mut *attr) };
        let max_sge = a.attr.max_sge.max(1);
        let stride = rq_stride(max_sge);
        let (entries, ring) = ring_memory(a.attr.max_wr, stride)?;
        if a.attr.srq_limit >= entries {
            return Err(libc::EINVAL);
        }
        a.attr.max_sge = max_sge;
        let mut req = rnic_create_srq {
            drv: CreateSrqReq {
                ring_va: ring.addr(),
                entries,
                reserved: 0,
            },
            ..Default::default()
        };
        let mut resp = CreateSrqResp::default();
        let srq = Box::into_raw(Box::new(Srq {
            ibv: ibv_srq::zeroed(),
            // SAFETY: an open context of ours.
            inner: unsafe { inner(ctx) },
            rq: Arc::new(Mutex::new(RqState::new(entries))),
            // SAFETY: the ring just mapped, of this geometry.
            ring: Mutex::new(unsafe { SrqRing::new(ring, entries, stride) }),
            slot: 0,
            max_sge,
        }));
        // SAFETY: our SRQ (its ibv_srq first) and buffers; libibverbs' attributes.
        let r = cmd(unsafe {
            ibv_cmd_create_srq(
                pd,
                srq.cast(),
                attr,
                &mut req.hdr,
                size_of::<rnic_create_srq>(),
                &mut resp.core,
                size_of::<CreateSrqResp>(),
            )
        });
        if let Err(e) = r {
            // SAFETY: ours, never handed out.
            drop(unsafe { Box::from_raw(srq) });
            return Err(e);
        }
        // ibv_cmd_create_srq puts the kernel's max_wr into the attributes (the ioctl path
        // leaves the legacy response's core fields alone).
        // SAFETY: libibverbs' attributes.
        let granted = unsafe { (*attr).attr.max_wr };
        if resp.drv.stride != stride || granted != entries {
            // SAFETY: the SRQ just created, ours, never handed out.
            unsafe {
                ibv_cmd_destroy_srq(srq.cast());
                drop(Box::from_raw(srq));
            }
            return Err(libc::EPROTO);
        }
        // SAFETY: ours, not yet handed out.
        unsafe { (*srq).slot = resp.drv.doorbell_slot };
        Ok(srq.cast())
    })
}

unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    status("destroy_srq", || {
        // SAFETY: an SRQ of ours (the kernel refuses while a QP uses it).
        cmd(unsafe { ibv_cmd_destroy_srq(srq) })?;
        // SAFETY: allocated by create_srq; the device no longer reads its ring. QPs that
        // used it are gone, but their tracks may outlive them in a poller's hands: they
        // hold the accounting by Arc.
        drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
        Ok(())
    })
}

/// `ibv_modify_srq`: the size (`IBV_SRQ_MAX_WR`: a new ring of at least `max_wr` entries,
/// a power of two, to which the kernel's and the device's `RESIZE_SRQ` move the receives
/// posted and not taken yet; the SRQ keeps its producer index and posts to the new ring
/// from it), then the limit (`IBV_SRQ_LIMIT`), each its own command.
unsafe extern "C" fn modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    status("modify_srq", || {
        if mask & IBV_SRQ_MAX_WR != 0 {
            // SAFETY: an SRQ of ours and libibverbs' attributes.
            unsafe { resize_srq(srq, attr) }?;
        }
        if mask & !IBV_SRQ_MAX_WR == 0 {
            return Ok(());
        }
        let mut req = ibv_modify_srq::default();
        // SAFETY: an SRQ of ours, libibverbs' attributes, our buffer. The kernel arms the
        // limit (IBV_SRQ_LIMIT) and refuses other bits.
        cmd(unsafe {
            ibv_cmd_modify_srq(
                srq,
                attr,
                mask & !IBV_SRQ_MAX_WR,
                &mut req,
                size_of::<ibv_modify_srq>(),
            )
        })
    })
}

/// The resize of [`modify_srq`]: the SRQ moves to a new ring of at least `attr->max_wr`
/// entries.
///
/// # Safety
///
/// `srq` is an SRQ of ours, `attr` readable.
unsafe fn resize_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> Result<(), c_int> {
    // SAFETY: the caller's promise.
    let (q, max_wr) = unsafe { (srq_of(srq), (*attr).max_wr) };
    let stride = rq_stride(q.max_sge);
    let (entries, mapping) = ring_memory(max_wr, stride)?;
    let mut req = rnic_modify_srq {
        drv: ResizeSrqReq {
            ring_va: mapping.addr(),
            entries,
            reserved: 0,
        },
        ..Default::default()
    };
    // Nothing is posted to either ring while the SRQ moves.
    let mut rq = lock(&q.rq);
    let mut ring = lock(&q.ring);
    // SAFETY: our SRQ and buffers; the command starts with `struct ibv_modify_srq`.
    cmd(unsafe {
        ibv_cmd_modify_srq(
            srq,
            attr,
            IBV_SRQ_MAX_WR,
            (&mut req as *mut rnic_modify_srq).cast(),
            size_of::<rnic_modify_srq>(),
        )
    })?;
    // The old ring, which the kernel unpinned, goes.
    // SAFETY: a ring of `entries` WQEs of the SRQ's stride, mapped above.
    *ring = unsafe { SrqRing::new(mapping, entries, stride) };
    rq.set_entries(entries);
    Ok(())
}

unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    status("query_srq", || {
        let mut req = ibv_query_srq::default();
        // SAFETY: an SRQ of ours, libibverbs' attributes, our buffer.
        cmd(unsafe { ibv_cmd_query_srq(srq, attr, &mut req, size_of::<ibv_query_srq>()) })
    })
}

/// Writes the receive WQEs of the list `wr` into `ring` (accounted by `rq`) and rings
/// `slot` once: the receive doorbell protocol of a QP's receive queue and of an SRQ.
/// Returns 0 or the errno of the first WR refused (left in `*bad_wr`).
///
/// # Safety
///
/// `wr` is the application's list; `ring` has `rq`'s entries; `rq` is locked.
unsafe fn post_recv_list(
    db: &Doorbells,
    ring: &Ring,
    slot: u32,
    max_sge: u32,
    rq: &mut RqState,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let before = rq.posted();
    let mut w = wr;
    let mut err = 0;
    while !w.is_null() {
        // SAFETY: the application's list.
        let r = unsafe { &*w };
        let n = usize::try_from(r.num_sge).unwrap_or(usize::MAX);
        if n > max_sge as usize {
            err = libc::EINVAL;
            break;
        }
        if rq.free() == 0 {
            err = libc::ENOMEM;
            break;
        }
        let sges: Vec<Sge> = (0..n)
            .map(|i| {
                // SAFETY: the application's `num_sge` SGEs.
                let s = unsafe { &*r.sg_list.add(i) };
                Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                }
            })
            .collect();
        // SAFETY: the entry after the last posted is free, under the queue's lock.
        write_recv_wqe(unsafe { ring.entry(rq.posted()) }, r.wr_id, &sges);
        rq.push();
        w = r.next;
    }
    if rq.posted() != before {
        db.ring(slot, rq.posted());
    }
    if err != 0 && !bad_wr.is_null() {
        // SAFETY: the application's out pointer.
        unsafe { *bad_wr = w };
    }
    err
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("post_srq_recv", libc::EIO, || {
        // SAFETY: an SRQ of ours.
        let q = unsafe { srq_of(srq) };
        // SAFETY: the context outlives its SRQs.
        let inner = unsafe { &*q.inner };
        let mut rq = lock(&q.rq);
        let ring = lock(&q.ring);
        // SAFETY: the application's list; the SRQ's ring and its accounting, locked.
        unsafe {
            post_recv_list(
                &inner.db, &ring.ring, q.slot, q.max_sge, &mut rq, wr, bad_wr,
            )
        }
    })
}

// ---- the ibv_wr_* API of extended QPs ----

/// `struct verbs_qp`'s `VERBS_QP_EX`: `ibv_qp_to_qp_ex` gives the `ibv_qp_ex`.
const VERBS_QP_EX: u32 = 1 << 1;

fn set_wr_ops(x: &mut ibv_qp_ex) {
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_atomic_write = Some(wr_atomic_write);
    x.wr_flush = Some(wr_flush);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
}

/// Runs `f` on the batch of the extended QP `qpx` (with the `wr_id` and `wr_flags` the
/// application set in it).
fn with_batch(name: &str, qpx: *mut ibv_qp_ex, f: impl FnOnce(&ibv_qp_ex, &mut Batch)) {
    guard(name, (), || {
        // SAFETY: an extended QP of ours (its ibv_qp_ex is at offset 0 of the Qp), alive
        // while the application builds on it.
        let (q, x) = unsafe { (qp_of(qpx.cast()), &*qpx) };
        f(x, &mut lock(&q.batch));
    })
}

/// Starts a work request of `opcode` and lets `f` fill it.
fn begin(name: &str, qpx: *mut ibv_qp_ex, opcode: ibv_wr_opcode, f: impl FnOnce(&mut ibv_send_wr)) {
    with_batch(name, qpx, |x, b| {
        if let Some(w) = b.begin(x, opcode) {
            f(w);
        }
    })
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    with_batch("ibv_wr_start", qpx, |_, b| *b = Batch::default())
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    with_batch("ibv_wr_abort", qpx, |_, b| *b = Batch::default())
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    guard("ibv_wr_complete", libc::EIO, || {
        // SAFETY: as in with_batch.
        let q = unsafe { qp_of(qpx.cast()) };
        let mut batch = std::mem::take(&mut *lock(&q.batch));
        let head = match batch.chain() {
            Ok(h) => h,
            Err(e) => return e,
        };
        if head.is_null() {
            return 0;
        }
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: our QP and the batch's list, which outlives the call.
        unsafe { post_send(qpx.cast(), head, &mut bad) }
    })
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    begin("ibv_wr_send", qpx, IBV_WR_SEND, |_| {})
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    begin("ibv_wr_send_imm", qpx, IBV_WR_SEND_WITH_IMM, |w| {
        w.imm_data = imm
    })
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    begin("ibv_wr_send_inv", qpx, IBV_WR_SEND_WITH_INV, |w| {
        w.imm_data = rkey
    })
}

unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    begin("ibv_wr_local_inv", qpx, IBV_WR_LOCAL_INV, |w| {
        w.imm_data = rkey
    })
}

/// `ibv_wr_bind_mw`: binds `mw` (type 2, or type 1) under `rkey` (the application's new
/// key, `mw->rkey` left as it is, as in rxe and mlx5). The region is read when the batch
/// is posted.
unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    begin("ibv_wr_bind_mw", qpx, IBV_WR_BIND_MW, |w| {
        w.anon_bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
            mw,
            rkey,
            bind_info: if info.is_null() {
                // Refused when posted: a bind needs its window's region or an unbind.
                ibv_mw_bind_info {
                    mr: null_mut(),
                    addr: u64::MAX,
                    length: 0,
                    mw_access_flags: 0,
                }
            } else {
                // SAFETY: the application's bind information.
                unsafe { *info }
            },
        }
    })
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin("ibv_wr_rdma_write", qpx, IBV_WR_RDMA_WRITE, |w| {
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        }
    })
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    begin(
        "ibv_wr_rdma_write_imm",
        qpx,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        |w| {
            w.wr.rdma = ibv_send_wr_rdma {
                remote_addr: addr,
                rkey,
            };
            w.imm_data = imm;
        },
    )
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin("ibv_wr_rdma_read", qpx, IBV_WR_RDMA_READ, |w| {
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        }
    })
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(
        "ibv_wr_atomic_cmp_swp",
        qpx,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        |w| {
            w.wr.atomic = ibv_send_wr_atomic {
                remote_addr: addr,
                compare_add: compare,
                swap,
                rkey,
            }
        },
    )
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    begin(
        "ibv_wr_atomic_fetch_add",
        qpx,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        |w| {
            w.wr.atomic = ibv_send_wr_atomic {
                remote_addr: addr,
                compare_add: add,
                swap: 0,
                rkey,
            }
        },
    )
}

/// `ibv_wr_atomic_write` (ABI 1.11): the 8 bytes at `value`, as they lie in memory, go
/// in `wr.atomic.compare_add` (how [`crate::send::write_send_wqe`] takes them).
unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    value: *const std::ffi::c_void,
) {
    // Refused when posted (no remote address to write to is no better than a NULL value).
    let bytes = if value.is_null() {
        None
    } else {
        // SAFETY: non-NULL: the application's 8 bytes (ibv_wr_atomic_write's contract).
        Some(unsafe { value.cast::<[u8; 8]>().read_unaligned() })
    };
    begin("ibv_wr_atomic_write", qpx, IBV_WR_ATOMIC_WRITE, |w| {
        w.wr.atomic = ibv_send_wr_atomic {
            remote_addr: addr,
            compare_add: bytes.map_or(0, u64::from_le_bytes),
            swap: 0,
            rkey,
        };
        if bytes.is_none() {
            // An opcode the device has not: ibv_wr_complete reports EINVAL.
            w.opcode = u32::MAX;
        }
    })
}

/// `ibv_wr_flush` (ABI 1.11): the length in `wr.atomic.compare_add`, the FETH word
/// (placement type, selectivity level) in `wr.atomic.swap`.
unsafe extern "C" fn wr_flush(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    len: usize,
    ptype: u8,
    level: u8,
) {
    begin("ibv_wr_flush", qpx, IBV_WR_FLUSH, |w| {
        w.wr.atomic = ibv_send_wr_atomic {
            remote_addr: addr,
            compare_add: len as u64,
            swap: u64::from(rnic_abi::verbs::flush::feth(ptype, level)),
            rkey,
        }
    })
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    with_batch("ibv_wr_set_ud_addr", qpx, |_, b| {
        b.set_ud_addr(ah, qpn, qkey)
    })
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    with_batch("ibv_wr_set_sge", qpx, |_, b| {
        b.set_sges(&[ibv_sge { addr, length, lkey }])
    })
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    with_batch("ibv_wr_set_sge_list", qpx, |_, b| {
        let sges = if n == 0 || list.is_null() {
            &[][..]
        } else {
            // SAFETY: the application's `n` SGEs.
            unsafe { std::slice::from_raw_parts(list, n) }
        };
        b.set_sges(sges)
    })
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    with_batch("ibv_wr_set_inline_data", qpx, |_, b| {
        b.set_inline(&[(addr.cast_const().cast(), length)])
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    with_batch("ibv_wr_set_inline_data_list", qpx, |_, b| {
        let bufs: Vec<(*const u8, usize)> = (0..if list.is_null() { 0 } else { n })
            .map(|i| {
                // SAFETY: the application's `n` buffers.
                let d = unsafe { &*list.add(i) };
                (d.addr.cast_const().cast(), d.length)
            })
            .collect();
        b.set_inline(&bufs)
    })
}

// ---- AH ----

/// An address handle: the address vector UD sends carry, its source an entry of the
/// device's GID table (datasheet §6.13; an entry with no IPv4 address fails the send).
#[repr(C)]
struct Ah {
    ibv: ibv_ah,
    av: UdAv,
}

unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    object("create_ah", || {
        // SAFETY: libibverbs' argument.
        let a = unsafe { &*attr };
        if a.is_global == 0 || u32::from(a.grh.sgid_index) >= rnic_abi::gid::GID_TABLE_LEN {
            // RoCE has no LIDs: every address is a GID, from an entry of the table.
            return Err(libc::EINVAL);
        }
        let mut ibv = ibv_ah::zeroed();
        // SAFETY: libibverbs' PD.
        ibv.context = unsafe { (*pd).context };
        ibv.pd = pd;
        let ah = Box::new(Ah {
            ibv,
            av: UdAv {
                // SAFETY: every view of the GID union is its 16 bytes.
                dgid: unsafe { a.grh.dgid.raw },
                hop_limit: a.grh.hop_limit,
                traffic_class: a.grh.traffic_class,
                flow_label: a.grh.flow_label,
                sgid_index: a.grh.sgid_index,
            },
        });
        Ok(Box::into_raw(ah).cast())
    })
}

unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    status("destroy_ah", || {
        // SAFETY: allocated by create_ah.
        drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_round_up_to_a_power_of_two_of_at_least_two_entries_of_zeroed_pages() {
        let (entries, m) = ring_memory(5, 32).unwrap();
        assert_eq!((entries, m.len), (8, 4096));
        let (entries, m) = ring_memory(0, 64).unwrap();
        assert_eq!((entries, m.len), (2, 4096));
        let (entries, m) = ring_memory(129, 32).unwrap();
        assert_eq!((entries, m.len), (256, 8192));
        // SAFETY: the mapping's own bytes.
        assert!(unsafe { std::slice::from_raw_parts(m.ptr, m.len) }
            .iter()
            .all(|&b| b == 0));
        assert_eq!(ring_memory(u32::MAX, 32).err(), Some(libc::EINVAL));
        assert_eq!(cq_ring_memory(-1).err(), Some(libc::EINVAL));
        assert_eq!(cq_ring_memory(3).unwrap().0, 4);
    }

    #[test]
    fn the_match_table_names_the_pf_and_the_vf_and_ends() {
        assert_eq!(MATCH_TABLE[0].vendor, 0xF1C0);
        assert_eq!(MATCH_TABLE[0].device, 0x0001);
        assert_eq!(MATCH_TABLE[1].device, 0x0002);
        assert_eq!(MATCH_TABLE[2].kind, VERBS_MATCH_SENTINEL);
        assert_eq!(OPS.match_min_abi_version, 1);
        assert!(OPS.import_context.is_none());
    }

    #[test]
    fn objects_start_with_their_libibverbs_structure() {
        assert_eq!(offset_of!(Context, vctx), 0);
        assert_eq!(offset_of!(Cq, ibv), 0);
        assert_eq!(offset_of!(Qp, vqp), 0);
        assert_eq!(offset_of!(VerbsQp, qp_ex), 0);
        assert_eq!(offset_of!(Ah, ibv), 0);
        assert_eq!(offset_of!(Pd, ibv), 0);
        // verbs_qp: the union of ibv_qp and ibv_qp_ex, comp_mask, xrcd.
        assert_eq!(size_of::<VerbsQp>(), size_of::<ibv_qp_ex>() + 16);
    }

    fn u32_at(m: &Mapping, off: u64) -> u32 {
        // SAFETY: inside a mapping of a page or more, 4-aligned.
        unsafe { ptr::read_volatile(m.ptr.add(off as usize).cast::<u32>()) }
    }

    /// A context part, a CQ and an RC QP of ours on plain memory, as create_cq and
    /// create_qp would leave them after the kernel's answers (CQ slot 5, SQ slot 1, RQ
    /// slot 2 of doorbell page 3).
    fn fake_objects() -> (Box<Inner>, Box<Cq>, Box<Qp>) {
        let db_page = Mapping::anonymous(4096).unwrap();
        let kick_page = Mapping::anonymous(4096).unwrap();
        // SAFETY: the pages live as long as Inner.
        let db = unsafe { Doorbells::new(db_page.ptr, kick_page.ptr, 3) };
        let inner = Box::new(Inner {
            db,
            _db_page: db_page,
            _kick_page: kick_page,
            qps: Mutex::new(HashMap::new()),
        });
        let cq_ring = Mapping::anonymous(4 * 32).unwrap();
        // SAFETY: 4 CQEs in the mapping the CQ owns.
        let view = unsafe { Ring::new(cq_ring.ptr, 4, 32) };
        let cq = Box::new(Cq {
            ibv: ibv_cq_ex::zeroed(),
            inner: &*inner,
            reader: Mutex::new(CqReader::new(view, 5)),
            current: Mutex::new(ibv_wc::zeroed()),
            ring: Mutex::new(cq_ring),
        });
        let (sq_stride, rq_stride) = (sq_stride(1, 64), rq_stride(1));
        let sq_ring = Mapping::anonymous(4 * sq_stride as usize).unwrap();
        let rq_ring = Mapping::anonymous(4 * rq_stride as usize).unwrap();
        let track = Arc::new(QpTrack {
            sq: Mutex::new(SqState::new(4)),
            rq: Mutex::new(RqState::new(4)),
            srq: None,
        });
        // SAFETY: VerbsQp is valid all-zero.
        let mut vqp: VerbsQp = unsafe { std::mem::zeroed() };
        vqp.qp_ex.qp_base.qp_num = 0x11;
        let qp = Box::new(Qp {
            vqp,
            inner: &*inner,
            track: track.clone(),
            state: AtomicU32::new(IBV_QPS_RTS),
            // SAFETY: the rings the QP owns.
            sq: unsafe { Ring::new(sq_ring.ptr, 4, sq_stride) },
            // SAFETY: as above.
            rq: unsafe { Ring::new(rq_ring.ptr, 4, rq_stride) },
            sq_slot: 1,
            rq_slot: 2,
            limits: SendLimits {
                max_sge: 1,
                max_inline: 64,
                ud: false,
            },
            max_recv_sge: 1,
            sq_sig_all: false,
            batch: Mutex::new(Batch::default()),
            _sq_ring: sq_ring,
            _rq_ring: rq_ring,
        });
        lock(&inner.qps).insert(0x11, track);
        (inner, cq, qp)
    }

    fn send(wr_id: u64, flags: std::ffi::c_uint, sge: &mut ibv_sge) -> ibv_send_wr {
        let mut w = ibv_send_wr::zeroed();
        w.wr_id = wr_id;
        w.opcode = IBV_WR_SEND;
        w.send_flags = flags;
        w.sg_list = sge;
        w.num_sge = 1;
        w
    }

    #[test]
    fn posting_rings_polling_credits_and_a_full_queue_says_enomem() {
        let (inner, mut cq, mut qp) = fake_objects();
        let qp_ptr: *mut ibv_qp = (&mut *qp as *mut Qp).cast();
        let cq_ptr: *mut ibv_cq = (&mut *cq as *mut Cq).cast();
        let mut sge = ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        };
        let mut sge2 = sge;
        let mut second = send(2, IBV_SEND_SIGNALED, &mut sge2);
        let mut first = send(1, 0, &mut sge);
        first.next = &mut second;
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: a QP of ours and a valid list.
        assert_eq!(unsafe { post_send(qp_ptr, &mut first, &mut bad) }, 0);
        let db = &inner._db_page;
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 1)), 2);
        assert_eq!(u32_at(db, rnic_abi::doorbell::RUNG_BITMAP), 1 << 1);
        assert_eq!(u32_at(&inner._kick_page, 0), 0, "the device polls: no kick");
        // Three more into four entries with two outstanding: the third is refused.
        let (mut s3, mut s4, mut s5) = (sge, sge, sge);
        let mut w5 = send(5, IBV_SEND_SIGNALED, &mut s5);
        let mut w4 = send(4, 0, &mut s4);
        let mut w3 = send(3, 0, &mut s3);
        w4.next = &mut w5;
        w3.next = &mut w4;
        // SAFETY: the device asks to be kicked.
        unsafe { ptr::write_volatile(db.ptr.cast::<u32>(), 1) };
        // SAFETY: as above.
        let r = unsafe { post_send(qp_ptr, &mut w3, &mut bad) };
        assert_eq!(r, libc::ENOMEM);
        assert_eq!(bad, &mut w5 as *mut _);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 1)), 4);
        assert_eq!(
            u32_at(&inner._kick_page, 0),
            3,
            "kicked with the page number"
        );
        // The device completes WR 2 (and so WR 1, unsignaled, before it).
        let cqe = Cqe {
            wr_id: 2,
            byte_len: 8,
            qp_num: 0x11,
            owner: 1,
            ..Cqe::default()
        };
        // SAFETY: entry 0 of the CQ ring, which the test plays the device for.
        unsafe {
            ptr::copy_nonoverlapping(
                zerocopy::IntoBytes::as_bytes(&cqe).as_ptr(),
                lock(&cq.ring).ptr,
                32,
            )
        };
        let mut wc = [ibv_wc::zeroed(); 4];
        // SAFETY: a CQ of ours and room for 4 completions.
        assert_eq!(unsafe { poll_cq(cq_ptr, 4, wc.as_mut_ptr()) }, 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].opcode, wc[0].status),
            (2, IBV_WC_SEND, 0)
        );
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 5)), 1);
        assert_eq!(lock(&qp.track.sq).free(), 2);
        // A completion of a QP that is no longer there is passed over.
        let stale = Cqe {
            qp_num: 0x99,
            ..cqe
        };
        // SAFETY: entry 1 of the CQ ring.
        unsafe {
            ptr::copy_nonoverlapping(
                zerocopy::IntoBytes::as_bytes(&stale).as_ptr(),
                lock(&cq.ring).ptr.add(32),
                32,
            )
        };
        // SAFETY: as above.
        assert_eq!(unsafe { poll_cq(cq_ptr, 4, wc.as_mut_ptr()) }, 0);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 5)), 2);
        // SAFETY: a CQ of ours.
        assert_eq!(unsafe { req_notify_cq(cq_ptr, 1) }, 0);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 5) + 4), 2 | 1);
        // A receive.
        let mut rsge = sge;
        let mut r = ibv_recv_wr::zeroed();
        r.wr_id = 9;
        r.sg_list = &mut rsge;
        r.num_sge = 1;
        let mut rbad: *mut ibv_recv_wr = null_mut();
        // SAFETY: a QP of ours and a valid WR.
        assert_eq!(unsafe { post_recv(qp_ptr, &mut r, &mut rbad) }, 0);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 2)), 1);
        // Back to RESET: the counts and both slots start over from 0.
        let mut attr = ibv_qp_attr::zeroed();
        attr.qp_state = IBV_QPS_RESET;
        // SAFETY: a QP of ours (the test's ibv_cmd_modify_qp succeeds doing nothing).
        assert_eq!(unsafe { modify_qp(qp_ptr, &mut attr, IBV_QP_STATE) }, 0);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 1)), 0);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 2)), 0);
        assert_eq!(lock(&qp.track.sq).free(), 4);
        assert_eq!(lock(&qp.track.rq).posted(), 0);
        // SAFETY: as above.
        let r = unsafe { post_recv(qp_ptr, &mut r, &mut rbad) };
        assert_eq!(r, libc::EINVAL);
        // Sends before RTS break the verbs rules: refused, nothing rung.
        attr.qp_state = IBV_QPS_INIT;
        // SAFETY: as above.
        assert_eq!(unsafe { modify_qp(qp_ptr, &mut attr, IBV_QP_STATE) }, 0);
        let mut s6 = sge;
        let mut w6 = send(6, IBV_SEND_SIGNALED, &mut s6);
        // SAFETY: as above.
        let r = unsafe { post_send(qp_ptr, &mut w6, &mut bad) };
        assert_eq!(r, libc::EINVAL);
        assert_eq!(bad, &mut w6 as *mut _);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 1)), 0);
    }

    fn recv(wr_id: u64, sge: &mut ibv_sge) -> ibv_recv_wr {
        let mut r = ibv_recv_wr::zeroed();
        r.wr_id = wr_id;
        r.sg_list = sge;
        r.num_sge = 1;
        r
    }

    #[test]
    fn srq_receives_ring_its_slot_and_completions_on_any_qp_free_its_entries() {
        let (inner, mut cq, _qp) = fake_objects();
        let cq_ptr: *mut ibv_cq = (&mut *cq as *mut Cq).cast();
        // An SRQ of 2 entries of 1 SGE on slot 7, as create_srq leaves it.
        let stride = rq_stride(1);
        let ring = Mapping::anonymous(2 * stride as usize).unwrap();
        let mut srq = Box::new(Srq {
            ibv: ibv_srq::zeroed(),
            inner: &*inner,
            rq: Arc::new(Mutex::new(RqState::new(2))),
            // SAFETY: a ring of 2 entries of this stride.
            ring: Mutex::new(unsafe { SrqRing::new(ring, 2, stride) }),
            slot: 7,
            max_sge: 1,
        });
        let srq_ptr: *mut ibv_srq = (&mut *srq as *mut Srq).cast();
        // Two QPs on it, as create_qp with the SRQ leaves their tracks.
        for qpn in [0x21, 0x22] {
            let track = Arc::new(QpTrack {
                sq: Mutex::new(SqState::new(4)),
                rq: Mutex::new(RqState::new(0)),
                srq: Some(srq.rq.clone()),
            });
            lock(&inner.qps).insert(qpn, track);
        }
        let mut sge = ibv_sge {
            addr: 0x2000,
            length: 64,
            lkey: 3,
        };
        let (mut s2, mut s3) = (sge, sge);
        let mut second = recv(20, &mut s2);
        let mut first = recv(10, &mut sge);
        first.next = &mut second;
        let mut bad: *mut ibv_recv_wr = null_mut();
        // SAFETY: an SRQ of ours and a valid list.
        assert_eq!(unsafe { post_srq_recv(srq_ptr, &mut first, &mut bad) }, 0);
        let db = &inner._db_page;
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 7)), 2);
        assert_eq!(u32_at(db, rnic_abi::doorbell::RUNG_BITMAP), 1 << 7);
        // The WQEs carry the application's wr_ids and SGEs.
        assert_eq!(
            u64::from_le_bytes(srq.ring_entry(1)[..8].try_into().unwrap()),
            20
        );
        // Full: the third is refused and named.
        let mut third = recv(30, &mut s3);
        // SAFETY: as above.
        let r = unsafe { post_srq_recv(srq_ptr, &mut third, &mut bad) };
        assert_eq!(r, libc::ENOMEM);
        assert_eq!(bad, &mut third as *mut _);
        // The device completes the first on QP 0x22: the completion names it and its
        // wr_id, and frees an SRQ entry.
        let cqe = Cqe {
            wr_id: 10,
            byte_len: 64,
            qp_num: 0x22,
            opcode: rnic_abi::verbs::wc::RECV,
            owner: 1,
            ..Cqe::default()
        };
        // SAFETY: entry 0 of the CQ ring, which the test plays the device for.
        unsafe {
            ptr::copy_nonoverlapping(
                zerocopy::IntoBytes::as_bytes(&cqe).as_ptr(),
                lock(&cq.ring).ptr,
                32,
            )
        };
        let mut wc = [ibv_wc::zeroed(); 4];
        // SAFETY: a CQ of ours and room for 4 completions.
        assert_eq!(unsafe { poll_cq(cq_ptr, 4, wc.as_mut_ptr()) }, 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].opcode, wc[0].qp_num),
            (10, IBV_WC_RECV, 0x22)
        );
        assert_eq!(lock(&srq.rq).free(), 1);
        // SAFETY: as above.
        assert_eq!(unsafe { post_srq_recv(srq_ptr, &mut third, &mut bad) }, 0);
        assert_eq!(u32_at(db, rnic_abi::doorbell::slot_offset(0, 7)), 3);
        // Entry 0 again, now the third's.
        assert_eq!(
            u64::from_le_bytes(srq.ring_entry(0)[..8].try_into().unwrap()),
            30
        );
        // Too many SGEs.
        let mut sges = [sge, sge];
        let mut two = recv(40, &mut sges[0]);
        two.num_sge = 2;
        // SAFETY: as above.
        let r = unsafe { post_srq_recv(srq_ptr, &mut two, &mut bad) };
        assert_eq!(r, libc::EINVAL);
    }

    impl Srq {
        fn ring_entry(&self, i: u32) -> Vec<u8> {
            // SAFETY: an entry of the SRQ's ring, read by the test alone.
            unsafe { lock(&self.ring).ring.entry(i) }.to_vec()
        }
    }

    #[test]
    fn panics_do_not_cross_the_boundary() {
        assert_eq!(status("test", || panic!("boom")), libc::EIO);
        assert!(object::<u8>("test", || panic!("boom")).is_null());
    }
}
