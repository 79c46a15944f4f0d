//! Queue pairs: `ibv_create_qp`, `ibv_create_qp_ex` (a `verbs_context` op),
//! `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`, `ibv_qp_to_qp_ex`; the data-path
//! ops `ibv_post_send` and `ibv_post_recv`; and the new post-send API (`ibv_wr_start`,
//! `ibv_wr_rdma_write`, `ibv_wr_set_sge`, ..., `ibv_wr_complete`), whose builders are
//! function pointers in every QP's `ibv_qp_ex`.
//!
//! RC, UC and UD QPs; XRC, raw packet and driver QPs are not offered (`EOPNOTSUPP`).
//! Every send operation rnic has: SEND (with immediate, with invalidate), RDMA WRITE
//! (with immediate), RDMA READ, compare-and-swap, fetch-and-add, local invalidate,
//! memory-window binds (`IBV_WR_BIND_MW`, `ibv_wr_bind_mw`; `ibv_bind_mw` is in
//! src/mw.rs), inline data, FLUSH and ATOMIC_WRITE (ABI 1.11). TSO is not. A UC QP takes SEND and
//! RDMA WRITE (with and without immediate), local invalidate and binds; anything else
//! is `EINVAL` at post time, as UD's non-SENDs are.
//!
//! Posting follows ibverbs: the WRs of a chain before the one `*bad_wr` names were
//! posted, that one and those after it were not. An RC chain goes to the device with
//! one doorbell.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_abi::ud::QPT_UD;
use rnic_abi::verbs::{QpAttr, QPT_RC, QPT_UC};
use rnic_driver::verbs::{self, QpCaps, RecvWr, SendWr, Sge, UdAddress, WrOpcode};

use crate::abi::*;
use crate::ah::{ah_attr, route, Ah, Route};
use crate::context::RnicContext;
use crate::cq::{Cq, CqObj};
use crate::ffi::{errno_of, errno_result, guard, invalid, null_on_err, unsupported, Errno};
use crate::objects::{from_c, lookup, register, unregister, Obj};
use crate::pd::{pd_of, PdObj};
use crate::srq::{srq_of, SrqObj};

/// A queue pair.
pub(crate) struct Qp {
    pub(crate) ctx: Arc<RnicContext>,
    pub(crate) qp: verbs::Qp,
    /// The device's QP type (`QPT_RC`, `QPT_UC` or `QPT_UD`).
    qp_type: u8,
    /// What it uses, kept while it lives (their destroys answer `EBUSY` meanwhile).
    _pd: Arc<PdObj>,
    _cqs: (Arc<CqObj>, Arc<CqObj>),
    srq: Option<Arc<SrqObj>>,
    sq_sig_all: bool,
    /// The capacities `ibv_create_qp` reported.
    cap: ibv_qp_cap,
    /// The Q_Key last set (UD), for `ibv_query_qp`.
    qkey: AtomicU32,
    /// The work requests `ibv_wr_*` is building.
    batch: Mutex<Batch>,
}

/// A queue pair as C holds it.
pub(crate) type QpObj = Obj<ibv_qp_ex, Qp>;

/// The work requests of the new post-send API between `ibv_wr_start` and
/// `ibv_wr_complete`, and the first error building them.
#[derive(Default)]
struct Batch {
    wrs: Vec<(SendWr, Option<UdAddress>)>,
    error: Option<Errno>,
}

impl Qp {
    fn batch(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether it is a UD QP.
    fn ud(&self) -> bool {
        self.qp_type == QPT_UD
    }

    /// Posts `wrs` (each with its UD destination): an RC list with one doorbell, all or
    /// nothing; UD WRs one by one. Returns how many were posted and the error that stopped
    /// the rest.
    pub(crate) fn post(&self, wrs: &[(SendWr, Option<UdAddress>)]) -> (usize, Result<(), Errno>) {
        if self.ud() {
            for (i, (wr, to)) in wrs.iter().enumerate() {
                let Some(to) = to else {
                    return (
                        i,
                        Err(invalid(format_args!("a UD send without an address"))),
                    );
                };
                if let Err(e) = self.qp.post_ud_send(wr, to) {
                    return (i, Err(post_errno(&e)));
                }
            }
            return (wrs.len(), Ok(()));
        }
        let list: Vec<SendWr> = wrs.iter().map(|(w, _)| w.clone()).collect();
        match self.qp.post_send_list(&list) {
            Ok(()) => (wrs.len(), Ok(())),
            Err(e) => (0, Err(post_errno(&e))),
        }
    }
}

/// The errno of a failed post: `ENOMEM` for a full queue, as rdma-core's providers
/// answer; what the driver says otherwise (`EINVAL` for a WR the QP cannot take).
fn post_errno(e: &rnic_driver::Error) -> Errno {
    log::debug!("post: {e}");
    if verbs::is_queue_full(e) {
        libc::ENOMEM
    } else {
        errno_of(e)
    }
}

/// Sets `*bad = wr` if `bad` is not NULL.
///
/// # Safety
///
/// `bad` is NULL or writable.
pub(crate) unsafe fn set_bad<T>(bad: *mut *mut T, wr: *mut T) {
    if !bad.is_null() {
        // SAFETY: the caller's promise.
        unsafe { bad.write(wr) };
    }
}

/// The SGEs of a work request.
///
/// # Safety
///
/// `list` is NULL or readable for `n` entries.
unsafe fn sges(list: *const ibv_sge, n: c_int, max: u32) -> Result<Vec<Sge>, Errno> {
    let n = usize::try_from(n).map_err(|_| invalid(format_args!("{n} SGEs")))?;
    if n as u64 > u64::from(max) {
        return Err(invalid(format_args!("{n} SGEs; the queue takes {max}")));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if list.is_null() {
        return Err(invalid(format_args!("{n} SGEs at NULL")));
    }
    Ok((0..n)
        .map(|i| {
            // SAFETY: readable for `n` entries by the caller's promise.
            let s = unsafe { list.add(i).read_unaligned() };
            Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            }
        })
        .collect())
}

/// The bytes of `sges` of this process's memory, for inline data (`lkey`s play no part,
/// as in ibverbs).
///
/// # Safety
///
/// Each SGE names readable memory of this process.
unsafe fn gather(sges: &[Sge], max: u32) -> Result<Vec<u8>, Errno> {
    let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    if total > u64::from(max) {
        return Err(invalid(format_args!(
            "{total} bytes of inline data; the QP takes {max}"
        )));
    }
    let mut out = vec![0u8; total as usize];
    let mut at = 0;
    for s in sges.iter().filter(|s| s.length > 0) {
        let n = s.length as usize;
        // SAFETY: the caller's promise: readable memory of the application (copied
        // without making a Rust reference to it, which the application owns); `out` has
        // room for every SGE.
        unsafe {
            std::ptr::copy_nonoverlapping(s.addr as usize as *const u8, out.as_mut_ptr().add(at), n)
        };
        at += n;
    }
    Ok(out)
}

/// Whether a QP of the device's `qp_type` takes `op` (UD: SENDs; UC: SENDs, RDMA
/// WRITEs and the local operations, as in rxe; RC: everything).
pub(crate) fn takes(qp_type: u8, op: &WrOpcode) -> bool {
    match qp_type {
        QPT_UD => matches!(op, WrOpcode::Send | WrOpcode::SendWithImm(_)),
        QPT_UC => matches!(
            op,
            WrOpcode::Send
                | WrOpcode::SendWithImm(_)
                | WrOpcode::RdmaWrite { .. }
                | WrOpcode::RdmaWriteWithImm { .. }
                | WrOpcode::LocalInv(_)
                | WrOpcode::BindMw { .. }
                | WrOpcode::RegMr { .. }
        ),
        _ => true,
    }
}

/// The name of the device's QP type, for messages.
fn type_name(qp_type: u8) -> &'static str {
    match qp_type {
        QPT_UD => "UD",
        QPT_UC => "UC",
        _ => "RC",
    }
}

/// Converts a send work request of a QP of the device's `qp_type` with `cap`.
///
/// # Safety
///
/// The WR's SGE list (and, for inline data, the memory it names) is readable; `wr.ud.ah`
/// of a UD WR is NULL or an AH's header is readable there; `bind_mw.mw` and
/// `bind_mw.bind_info.mr` of a bind are NULL or readable.
unsafe fn send_wr(
    w: &ibv_send_wr,
    qp_type: u8,
    cap: &ibv_qp_cap,
) -> Result<(SendWr, Option<UdAddress>), Errno> {
    let ud = qp_type == QPT_UD;
    // SAFETY: reading the union member the opcode says is set; all are plain data.
    let (rdma, atomic, udw) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let opcode = match w.opcode {
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm(w.imm_data),
        IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv(w.imm_data),
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm: w.imm_data,
        },
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        IBV_WR_LOCAL_INV => WrOpcode::LocalInv(w.imm_data),
        IBV_WR_BIND_MW => {
            if w.num_sge != 0 || w.imm_data != 0 {
                return Err(invalid(format_args!(
                    "IBV_WR_BIND_MW with {} SGEs and imm_data {:#x} (both must be 0)",
                    w.num_sge, w.imm_data
                )));
            }
            // SAFETY: the union member the opcode says is set; plain data.
            let b = unsafe { w.anon_bind_mw_tso.bind_mw };
            // SAFETY: the caller's promise.
            unsafe { crate::mw::bind_opcode(b.mw, b.rkey, &b.bind_info)? }
        }
        IBV_WR_TSO => return Err(unsupported("TCP segmentation offload (IBV_WR_TSO)")),
        IBV_WR_FLUSH => return Err(unsupported("RDMA FLUSH (IBV_WR_FLUSH)")),
        IBV_WR_ATOMIC_WRITE => return Err(unsupported("atomic write (IBV_WR_ATOMIC_WRITE)")),
        op => return Err(invalid(format_args!("send opcode {op}"))),
    };
    if !takes(qp_type, &opcode) {
        return Err(invalid(format_args!(
            "opcode {} on a {} QP (UD: SEND and SEND with immediate only; UC: SEND and RDMA WRITE, with and without immediate, LOCAL_INV and BIND_MW only)",
            w.opcode,
            type_name(qp_type)
        )));
    }
    // SAFETY: the caller's promise.
    let list = unsafe { sges(w.sg_list, w.num_sge, cap.max_send_sge)? };
    let f = w.send_flags;
    let mut out = SendWr {
        wr_id: w.wr_id,
        opcode,
        signaled: f & IBV_SEND_SIGNALED != 0,
        fence: f & IBV_SEND_FENCE != 0,
        solicited: f & IBV_SEND_SOLICITED != 0,
        ..SendWr::default()
    };
    if f & IBV_SEND_INLINE != 0 && opcode.carries_data_out() {
        // SAFETY: the caller's promise.
        out.inline = Some(unsafe { gather(&list, cap.max_inline_data)? });
    } else {
        out.sges = list;
    }
    let to = if ud {
        // SAFETY: the caller's promise (the AH is checked by its magic number).
        let ah = unsafe { from_c::<ibv_ah, Ah>(udw.ah)? };
        Some(ah.r.route.ud(udw.remote_qpn, udw.remote_qkey))
    } else {
        None
    };
    Ok((out, to))
}

/// Converts a receive work request with at most `max_sge` SGEs.
///
/// # Safety
///
/// The WR's SGE list is readable.
unsafe fn recv_wr(w: &ibv_recv_wr, max_sge: u32) -> Result<RecvWr, Errno> {
    Ok(RecvWr {
        wr_id: w.wr_id,
        // SAFETY: the caller's promise.
        sges: unsafe { sges(w.sg_list, w.num_sge, max_sge)? },
    })
}

/// A work request of a chain C hands over: `ibv_send_wr` or `ibv_recv_wr`.
pub(crate) trait Chained {
    fn next(&self) -> *mut Self;
}

impl Chained for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl Chained for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// Posts the chain `wr` as ibverbs does: the WRs before the first that cannot be taken
/// are posted, and `*bad_wr` names that one. Each WR is converted by `convert`; `post`
/// posts the converted ones and says how many it did (all but the one that failed and
/// those after it).
///
/// # Safety
///
/// `wr` is NULL or a chain of readable WRs (with whatever `convert` reads); `bad_wr` is
/// NULL or writable.
unsafe fn post_chain<W: Chained, T>(
    wr: *mut W,
    bad_wr: *mut *mut W,
    mut convert: impl FnMut(&W) -> Result<T, Errno>,
    post: impl FnOnce(&[T]) -> (usize, Result<(), Errno>),
) -> Result<(), Errno> {
    let mut list = Vec::new();
    let mut ptrs = Vec::new();
    let mut cur = wr;
    let mut failed = None;
    while !cur.is_null() {
        // SAFETY: the caller's promise.
        let w = unsafe { cur.read_unaligned() };
        match convert(&w) {
            Ok(x) => {
                list.push(x);
                ptrs.push(cur);
            }
            Err(e) => {
                failed = Some((cur, e));
                break;
            }
        }
        cur = w.next();
    }
    if !list.is_empty() {
        let (posted, result) = post(&list);
        if let Err(e) = result {
            // SAFETY: the caller's promise.
            unsafe { set_bad(bad_wr, ptrs[posted]) };
            return Err(e);
        }
    }
    match failed {
        Some((at, e)) => {
            // SAFETY: the caller's promise.
            unsafe { set_bad(bad_wr, at) };
            Err(e)
        }
        None => Ok(()),
    }
}

/// Posts the receive chain `wr` with `post` (a QP's or an SRQ's, all or nothing), as
/// [`post_chain`] does.
///
/// # Safety
///
/// `wr` is NULL or a chain of readable receive WRs with readable SGE lists; `bad_wr` is
/// NULL or writable.
pub(crate) unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    post: impl FnOnce(&[RecvWr]) -> rnic_driver::Result<()>,
) -> Result<(), Errno> {
    // SAFETY: the caller's promise, which covers the SGE lists recv_wr reads.
    unsafe {
        post_chain(
            wr,
            bad_wr,
            |w| recv_wr(w, max_sge),
            |list| match post(list) {
                Ok(()) => (list.len(), Ok(())),
                Err(e) => (0, Err(post_errno(&e))),
            },
        )
    }
}

/// `ibv_context_ops::post_send`: posts the chain of send WRs; 0, or an errno with
/// `*bad_wr` at the first WR not posted.
pub(crate) unsafe extern "C" fn post_send_op(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    errno_result("ibv_post_send", || {
        // SAFETY: verbs.h's ibv_post_send read qp->context through the pointer.
        let obj = unsafe { from_c::<ibv_qp_ex, Qp>(qp.cast()) }.inspect_err(|_| {
            // SAFETY: NULL or writable by the caller's promise.
            unsafe { set_bad(bad_wr, wr) }
        })?;
        let q = &obj.r;
        // SAFETY: the caller's chain, whose lists and memory send_wr reads.
        unsafe { post_chain(wr, bad_wr, |w| send_wr(w, q.qp_type, &q.cap), |l| q.post(l)) }
    })
}

/// `ibv_context_ops::post_recv`: posts the chain of receive WRs; 0, or an errno with
/// `*bad_wr` at the first WR not posted.
pub(crate) unsafe extern "C" fn post_recv_op(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    errno_result("ibv_post_recv", || {
        // SAFETY: verbs.h's ibv_post_recv read qp->context through the pointer.
        let obj = unsafe { from_c::<ibv_qp_ex, Qp>(qp.cast()) }.inspect_err(|_| {
            // SAFETY: NULL or writable by the caller's promise.
            unsafe { set_bad(bad_wr, wr) }
        })?;
        if obj.r.srq.is_some() {
            // SAFETY: as above.
            unsafe { set_bad(bad_wr, wr) };
            return Err(invalid(format_args!(
                "ibv_post_recv on a QP with an SRQ: post to the SRQ"
            )));
        }
        // SAFETY: the caller's chain.
        unsafe {
            post_recv_chain(wr, bad_wr, obj.r.cap.max_recv_sge, |wrs| {
                obj.r.qp.post_recv_list(wrs)
            })
        }
    })
}

/// The QP types rnic has, as the device numbers them.
fn device_qp_type(t: ibv_qp_type) -> Result<u8, Errno> {
    match t {
        IBV_QPT_RC => Ok(QPT_RC),
        IBV_QPT_UD => Ok(QPT_UD),
        IBV_QPT_UC => Ok(QPT_UC),
        IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => Err(unsupported("XRC QPs")),
        IBV_QPT_RAW_PACKET => Err(unsupported("raw packet QPs (IBV_QPT_RAW_PACKET)")),
        IBV_QPT_DRIVER => Err(unsupported("driver-specific QPs (IBV_QPT_DRIVER: DC, SRD)")),
        t => Err(invalid(format_args!("QP type {t}"))),
    }
}

/// Creates a QP as `a` (an `ibv_qp_init_attr_ex` whose extensions were checked) asks,
/// and writes what it got into `a.cap`.
fn create(a: &mut ibv_qp_init_attr_ex) -> Result<Arc<QpObj>, Errno> {
    let pdo = pd_of(a.pd)?;
    let ctx = pdo.r.ctx.clone();
    let qp_type = device_qp_type(a.qp_type)?;
    let cq = |p: *mut ibv_cq, what| -> Result<Arc<CqObj>, Errno> {
        let c = lookup::<ibv_cq_ex, Cq>(p.cast())
            .inspect_err(|_| log::debug!("{what} CQ {p:p}: not a CQ"))?;
        if !Arc::ptr_eq(&c.r.ctx, &ctx) {
            return Err(invalid(format_args!("the {what} CQ is of another context")));
        }
        Ok(c)
    };
    let send_cq = cq(a.send_cq, "send")?;
    let recv_cq = cq(a.recv_cq, "receive")?;
    let srq = if a.srq.is_null() {
        None
    } else {
        let s = srq_of(a.srq)?;
        if !Arc::ptr_eq(s.r.pd(), &pdo) {
            return Err(invalid(format_args!("the SRQ is of another PD")));
        }
        Some(s)
    };
    let l = ctx.verbs.attr().limits;
    let c = a.cap;
    let recv_wr = if srq.is_some() { 0 } else { c.max_recv_wr };
    if c.max_send_wr > l.max_qp_wr
        || recv_wr > l.max_qp_wr
        || c.max_send_sge > l.max_sge
        || c.max_recv_sge > l.max_sge
        || c.max_inline_data > l.max_inline_data
    {
        log::debug!(
            "QP caps ({} WRs of {} SGEs, {} receives of {}, {} inline bytes) beyond the function's {} WRs, {} SGEs, {} inline bytes",
            c.max_send_wr,
            c.max_send_sge,
            c.max_recv_wr,
            c.max_recv_sge,
            c.max_inline_data,
            l.max_qp_wr,
            l.max_sge,
            l.max_inline_data
        );
        return Err(libc::EINVAL);
    }
    let caps = QpCaps {
        max_send_wr: c.max_send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    };
    let sq_sig_all = a.sq_sig_all != 0;
    let qp = pdo
        .r
        .pd
        .create_qp_of_type(
            qp_type,
            &send_cq.r.cq,
            &recv_cq.r.cq,
            caps,
            sq_sig_all,
            srq.as_ref().map(|s| &s.r.srq),
        )
        .map_err(|e| {
            log::warn!("{}: ibv_create_qp: {e}", ctx.name());
            errno_of(&e)
        })?;
    let got = qp.caps();
    let cap = ibv_qp_cap {
        max_send_wr: got.max_send_wr,
        max_recv_wr: if srq.is_some() { 0 } else { got.max_recv_wr },
        max_send_sge: got.max_send_sge,
        max_recv_sge: if srq.is_some() { 0 } else { got.max_recv_sge },
        max_inline_data: got.max_inline_data,
    };
    a.cap = cap;
    let qpn = qp.qp_num();
    let mut x = ibv_qp_ex::zeroed();
    let b = &mut x.qp_base;
    b.context = ctx.ibv_context();
    b.qp_context = a.qp_context;
    b.pd = a.pd;
    b.send_cq = a.send_cq;
    b.recv_cq = a.recv_cq;
    b.srq = a.srq;
    b.handle = qpn;
    b.qp_num = qpn;
    b.state = IBV_QPS_RESET;
    b.qp_type = a.qp_type;
    install_wr_ops(&mut x);
    let state = Qp {
        ctx: ctx.clone(),
        qp,
        qp_type,
        _pd: pdo,
        _cqs: (send_cq, recv_cq),
        srq,
        sq_sig_all,
        cap,
        qkey: AtomicU32::new(0),
        batch: Mutex::new(Batch::default()),
    };
    let obj = register(ctx.ibv_context(), x, state, |_| ());
    ctx.events
        .qps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(qpn, Arc::downgrade(&obj));
    Ok(obj)
}

/// `ibv_create_qp`: `attr->cap` gets what the QP has.
///
/// # Safety
///
/// `attr` is NULL or readable and writable.
pub(crate) unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    null_on_err("ibv_create_qp", || {
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_create_qp: attr is NULL")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let a = unsafe { attr.read_unaligned() };
        let mut x = ibv_qp_init_attr_ex::zeroed();
        x.qp_context = a.qp_context;
        x.send_cq = a.send_cq;
        x.recv_cq = a.recv_cq;
        x.srq = a.srq;
        x.cap = a.cap;
        x.qp_type = a.qp_type;
        x.sq_sig_all = a.sq_sig_all;
        x.comp_mask = IBV_QP_INIT_ATTR_PD;
        x.pd = pd;
        let obj = create(&mut x)?;
        // SAFETY: as above; only `cap` changes.
        unsafe { std::ptr::addr_of_mut!((*attr).cap).write_unaligned(x.cap) };
        Ok(obj.c_ptr().cast())
    })
}

/// The send operations the new post-send API may build on a QP of each type.
const RC_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_FLUSH
    | IBV_QP_EX_WITH_ATOMIC_WRITE;
/// UC: as rxe's, without SEND with invalidate, which has no UC opcode.
const UC_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW;
const UD_SEND_OPS: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

/// `verbs_context::create_qp_ex`, behind verbs.h's `ibv_create_qp_ex` (which calls
/// `ibv_create_qp` itself when only the PD is given): `send_ops_flags` of the operations
/// rnic has; XRC, create flags, TSO, RSS are not offered.
pub(crate) unsafe extern "C" fn create_qp_ex_op(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    null_on_err("ibv_create_qp_ex", || {
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_create_qp_ex: attr is NULL")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let mut a = unsafe { attr.read_unaligned() };
        let m = a.comp_mask;
        if m & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(invalid(format_args!("ibv_create_qp_ex without a PD")));
        }
        if m & IBV_QP_INIT_ATTR_XRCD != 0 {
            return Err(unsupported("XRC QPs"));
        }
        if m & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(unsupported(
                "QP create flags (ibv_qp_init_attr_ex.create_flags)",
            ));
        }
        if m & (IBV_QP_INIT_ATTR_MAX_TSO_HEADER
            | IBV_QP_INIT_ATTR_IND_TABLE
            | IBV_QP_INIT_ATTR_RX_HASH)
            != 0
        {
            return Err(unsupported("TSO and RSS QPs"));
        }
        let known =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if m & !known != 0 {
            return Err(invalid(format_args!("ibv_create_qp_ex comp_mask {m:#x}")));
        }
        if m & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            let have = match a.qp_type {
                IBV_QPT_UD => UD_SEND_OPS,
                IBV_QPT_UC => UC_SEND_OPS,
                _ => RC_SEND_OPS,
            };
            if a.send_ops_flags & !have != 0 {
                return Err(unsupported(
                    "send operations rnic lacks in send_ops_flags (TSO; on UD anything but SEND; on UC READs, atomics, FLUSH, atomic write and SEND with invalidate)",
                ));
            }
        }
        let pd = pd_of(a.pd)?;
        if pd.r.ctx.ibv_context() != ctx {
            return Err(invalid(format_args!("the PD is of another context")));
        }
        let obj = create(&mut a)?;
        // SAFETY: as above; only `cap` changes.
        unsafe { std::ptr::addr_of_mut!((*attr).cap).write_unaligned(a.cap) };
        Ok(obj.c_ptr().cast())
    })
}

/// `ibv_destroy_qp`: 0 or an errno. Its events not yet read are dropped.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    errno_result("ibv_destroy_qp", || {
        let obj = unregister::<ibv_qp_ex, Qp>(qp.cast(), |_| Ok(()))?;
        let events = &obj.r.ctx.events;
        events
            .qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&obj.r.qp.qp_num());
        events.async_queue.forget(Arc::as_ptr(&obj).cast());
        Ok(())
    })
}

/// `ibv_qp_to_qp_ex`: the QP's `ibv_qp_ex` (every rnic QP has one), or NULL.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    null_on_err("ibv_qp_to_qp_ex", || {
        lookup::<ibv_qp_ex, Qp>(qp.cast()).map(|o| o.c_ptr())
    })
}

/// What rnic guarantees of the order in which the data of one work request of a QP
/// reaches memory (`IBV_QUERY_QP_DATA_IN_ORDER_*` bits): nothing, for every QP type and
/// operation, as Soft-RoCE answers. rnicd places a packet's payload with an ordinary
/// `memcpy` (vm-memory's `write_slice`), whose stores the CPU may make visible in any
/// order (glibc's copies of a few hundred bytes store the tail first), so even a
/// 128-byte block can be seen half written; and the responses of an RDMA READ that
/// arrive after a lost one are placed at once (docs/hardware-interface.md, *Lost READ
/// response*). A reader must poll for the completion, not for the data's last byte.
const DATA_IN_ORDER: c_int = 0;

/// `ibv_query_qp_data_in_order`: whether the data of a work request of `op` on `qp`
/// reaches memory in order (`flags` 0: 1 or 0), or which of the
/// `IBV_QUERY_QP_DATA_IN_ORDER_*` guarantees hold
/// (`IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS`): none on rnic ([`DATA_IN_ORDER`]). Unknown
/// flags, and a pointer that is not a live QP, answer 0 (the function has no error
/// return; rdma-core answers 0 for unknown flags too).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_query_qp_data_in_order(
    qp: *mut ibv_qp,
    op: ibv_wr_opcode,
    flags: u32,
) -> c_int {
    guard("ibv_query_qp_data_in_order", 0, || {
        if flags & !IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS != 0 {
            invalid(format_args!("ibv_query_qp_data_in_order flags {flags:#x}"));
            return 0;
        }
        if lookup::<ibv_qp_ex, Qp>(qp.cast()).is_err() {
            return 0;
        }
        log::debug!("QP {qp:p}: data of opcode {op} is not placed in order");
        let mut caps = DATA_IN_ORDER;
        // As rdma-core: a whole message in order is each 128-byte block in order too.
        if caps & IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG != 0 {
            caps |= IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES;
        }
        if flags & IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS != 0 {
            caps
        } else {
            caps & IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG
        }
    })
}

/// The attribute-mask bits rnic's device takes, which have ibverbs' values.
const DEVICE_MASK: c_int = IBV_QP_STATE
    | IBV_QP_CUR_STATE
    | IBV_QP_EN_SQD_ASYNC_NOTIFY
    | IBV_QP_ACCESS_FLAGS
    | IBV_QP_PKEY_INDEX
    | IBV_QP_PORT
    | IBV_QP_AV
    | IBV_QP_PATH_MTU
    | IBV_QP_TIMEOUT
    | IBV_QP_RETRY_CNT
    | IBV_QP_RNR_RETRY
    | IBV_QP_RQ_PSN
    | IBV_QP_MAX_QP_RD_ATOMIC
    | IBV_QP_MIN_RNR_TIMER
    | IBV_QP_SQ_PSN
    | IBV_QP_MAX_DEST_RD_ATOMIC
    | IBV_QP_DEST_QPN;

/// The device's attributes and mask for `ibv_modify_qp(a, mask)`, and the Q_Key to set.
fn device_attr(a: &ibv_qp_attr, mask: c_int) -> Result<(QpAttr, u32, Option<u32>), Errno> {
    if mask & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE) != 0 {
        return Err(unsupported(
            "alternate paths (IBV_QP_ALT_PATH, IBV_QP_PATH_MIG_STATE)",
        ));
    }
    if mask & IBV_QP_CAP != 0 {
        return Err(unsupported("resizing a QP's queues (IBV_QP_CAP)"));
    }
    if mask & IBV_QP_RATE_LIMIT != 0 {
        return Err(unsupported("QP rate limits (IBV_QP_RATE_LIMIT)"));
    }
    if mask & !(DEVICE_MASK | IBV_QP_QKEY) != 0 {
        return Err(invalid(format_args!("ibv_modify_qp mask {mask:#x}")));
    }
    let u8_of =
        |v: u32, what: &str| u8::try_from(v).map_err(|_| invalid(format_args!("{what} {v}")));
    let mut d = QpAttr {
        qp_state: u8_of(a.qp_state, "QP state")?,
        cur_qp_state: u8_of(a.cur_qp_state, "current QP state")?,
        path_mtu: u8_of(a.path_mtu, "path MTU")?,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        min_rnr_timer: a.min_rnr_timer,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        port_num: a.port_num,
        pkey_index: a.pkey_index,
        qp_access_flags: qp_access(a.qp_access_flags),
        dest_qp_num: a.dest_qp_num,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        ..QpAttr::default()
    };
    if mask & IBV_QP_AV != 0 {
        let r = route(&a.ah_attr)?;
        // The device numbers its one GID 0.
        d.sgid_index = 0;
        d.dgid = r.dgid;
        d.hop_limit = r.hop_limit;
        d.traffic_class = r.traffic_class;
        d.flow_label = r.flow_label;
    }
    let qkey = (mask & IBV_QP_QKEY != 0).then_some(a.qkey);
    Ok((d, (mask & DEVICE_MASK) as u32, qkey))
}

/// The access flags a QP gives the device: those asked for. Remote FLUSH
/// (`IBV_ACCESS_FLUSH_*`, ABI 1.11) is among them, with the device's numbers: the
/// responder takes a FLUSH only where the QP allows its placement type (datasheet
/// §14.14), as rxe does; rdma-core's own tests set both FLUSH flags on every extended RC
/// QP ("we don't have capability bits for this").
fn qp_access(asked: c_uint) -> c_uint {
    asked
}

/// The READs and atomics a QP may have in flight (`max_rd_atomic`) when asked for
/// `asked`, on a function that allows `most`: at most `most`. Asking for more is no
/// error, as on mlx5 or bnxt_re: perftest, for one, asks for as many as the *peer*
/// allows (its `out_reads`, 128 on Soft-RoCE), and a requester that keeps fewer READs in
/// flight than it may stays within what any responder allows. (The responder's side,
/// `max_dest_rd_atomic`, is the resources it holds: the device refuses more than it
/// has.)
fn initiator_depth(asked: u8, most: u32) -> u8 {
    if u32::from(asked) <= most {
        return asked;
    }
    log::debug!("max_rd_atomic {asked} lowered to the function's {most} (max_qp_init_rd_atom)");
    u8::try_from(most).unwrap_or(u8::MAX)
}

/// `ibv_modify_qp`: 0 or an errno; `qp->state` follows a state change, as libibverbs
/// keeps it. `max_rd_atomic` above the function's `max_qp_init_rd_atom` is lowered to
/// it (see [`initiator_depth`]).
///
/// # Safety
///
/// `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    errno_result("ibv_modify_qp", || {
        let obj = lookup::<ibv_qp_ex, Qp>(qp.cast())?;
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_modify_qp: attr is NULL")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let a = unsafe { attr.read_unaligned() };
        let (mut d, m, qkey) = device_attr(&a, mask)?;
        let q = &obj.r;
        if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
            let most = q.ctx.query_device()?.limits.max_qp_init_rd_atom;
            d.max_rd_atomic = initiator_depth(d.max_rd_atomic, most);
        }
        let r = match qkey {
            Some(k) => q.qp.modify_with_qkey(&d, m, k),
            None => q.qp.modify(&d, m),
        };
        r.map_err(|e| {
            log::debug!("{}: ibv_modify_qp(mask {mask:#x}): {e}", q.ctx.name());
            errno_of(&e)
        })?;
        if let Some(k) = qkey {
            q.qkey.store(k, Ordering::Relaxed);
        }
        if mask & IBV_QP_STATE != 0 {
            // SAFETY: the live QP's structure; `state` is libibverbs' to keep.
            unsafe { (*obj.c_ptr()).qp_base.state = a.qp_state };
        }
        Ok(())
    })
}

/// `ibv_query_qp`: the QP's attributes (all of them, whatever `mask` asks) and its
/// creation attributes; 0 or an errno.
///
/// # Safety
///
/// `attr` and `init_attr` are NULL or writable.
pub(crate) unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    errno_result("ibv_query_qp", || {
        let obj = lookup::<ibv_qp_ex, Qp>(qp.cast())?;
        if attr.is_null() || init_attr.is_null() {
            return Err(invalid(format_args!("ibv_query_qp: a NULL argument")));
        }
        let q = &obj.r;
        let resp = q.qp.query().map_err(|e| errno_of(&e))?;
        let d = resp.attr;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = d.qp_state.into();
        a.cur_qp_state = d.qp_state.into();
        a.path_mtu = d.path_mtu.into();
        a.qkey = q.qkey.load(Ordering::Relaxed);
        a.rq_psn = d.rq_psn;
        a.sq_psn = d.sq_psn;
        a.dest_qp_num = d.dest_qp_num;
        a.qp_access_flags = d.qp_access_flags;
        a.cap = q.cap;
        if !q.ud() {
            a.ah_attr = ah_attr(&Route {
                dgid: d.dgid,
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
                flow_label: d.flow_label,
            });
        }
        a.pkey_index = d.pkey_index;
        a.max_rd_atomic = d.max_rd_atomic;
        a.max_dest_rd_atomic = d.max_dest_rd_atomic;
        a.min_rnr_timer = d.min_rnr_timer;
        a.port_num = crate::attr::PORT_NUM;
        a.timeout = d.timeout;
        a.retry_cnt = d.retry_cnt;
        a.rnr_retry = d.rnr_retry;
        // SAFETY: the live QP's structure, read for the creation attributes.
        let base = unsafe { (*obj.c_ptr()).qp_base };
        let init = ibv_qp_init_attr {
            qp_context: base.qp_context,
            send_cq: base.send_cq,
            recv_cq: base.recv_cq,
            srq: base.srq,
            cap: q.cap,
            qp_type: base.qp_type,
            sq_sig_all: c_int::from(q.sq_sig_all),
        };
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe {
            attr.write_unaligned(a);
            init_attr.write_unaligned(init);
        }
        Ok(())
    })
}

/// Fills the `ibv_wr_*` builders of a QP's `ibv_qp_ex`.
fn install_wr_ops(x: &mut ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_atomic_write = Some(wr_atomic_write);
    x.wr_flush = Some(wr_flush);
}

/// Runs `f` on the batch of the QP `qpx` (and its `wr_id` and `wr_flags`, which the
/// application sets before each builder call). A builder returns nothing: an error is
/// kept for `ibv_wr_complete`, which reports it.
fn with_batch(
    name: &'static str,
    qpx: *mut ibv_qp_ex,
    f: impl FnOnce(&Qp, &mut Batch, u64, c_uint) -> Result<(), Errno>,
) {
    guard(name, (), || {
        // SAFETY: verbs.h's ibv_wr_* called through the pointer.
        let Ok(obj) = (unsafe { from_c::<ibv_qp_ex, Qp>(qpx) }) else {
            log::debug!("{name} on {qpx:p}, which is not a QP");
            return;
        };
        // SAFETY: the live QP's structure; the application wrote these fields.
        let (wr_id, flags) = unsafe { ((*qpx).wr_id, (*qpx).wr_flags) };
        let mut b = obj.r.batch();
        if b.error.is_none() {
            if let Err(e) = f(&obj.r, &mut b, wr_id, flags) {
                b.error = Some(e);
            }
        }
    })
}

/// Starts a work request of `opcode` in the batch.
fn begin(name: &'static str, qpx: *mut ibv_qp_ex, opcode: WrOpcode) {
    with_batch(name, qpx, |q, b, wr_id, flags| {
        if !takes(q.qp_type, &opcode) {
            return Err(invalid(format_args!(
                "{name} on a {} QP",
                type_name(q.qp_type)
            )));
        }
        b.wrs.push((
            SendWr {
                wr_id,
                opcode,
                signaled: flags & IBV_SEND_SIGNALED != 0,
                fence: flags & IBV_SEND_FENCE != 0,
                solicited: flags & IBV_SEND_SOLICITED != 0,
                ..SendWr::default()
            },
            None,
        ));
        Ok(())
    })
}

/// Changes the last work request of the batch.
fn last(
    name: &'static str,
    qpx: *mut ibv_qp_ex,
    f: impl FnOnce(&Qp, &mut (SendWr, Option<UdAddress>)) -> Result<(), Errno>,
) {
    with_batch(name, qpx, |q, b, _, _| match b.wrs.last_mut() {
        Some(w) => f(q, w),
        None => Err(invalid(format_args!("{name} before a work request"))),
    })
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    guard("ibv_wr_start", (), || {
        // SAFETY: as in with_batch.
        if let Ok(obj) = unsafe { from_c::<ibv_qp_ex, Qp>(qpx) } {
            *obj.r.batch() = Batch::default();
        }
    })
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    errno_result("ibv_wr_complete", || {
        // SAFETY: as in with_batch.
        let obj = unsafe { from_c::<ibv_qp_ex, Qp>(qpx)? };
        let batch = std::mem::take(&mut *obj.r.batch());
        if let Some(e) = batch.error {
            return Err(e);
        }
        obj.r.post(&batch.wrs).1
    })
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: our caller's contract is wr_start's.
    unsafe { wr_start(qpx) }
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    begin("ibv_wr_send", qpx, WrOpcode::Send)
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    begin("ibv_wr_send_imm", qpx, WrOpcode::SendWithImm(imm))
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    begin("ibv_wr_send_inv", qpx, WrOpcode::SendWithInv(rkey))
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(
        "ibv_wr_rdma_write",
        qpx,
        WrOpcode::RdmaWrite { remote_addr, rkey },
    )
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    begin(
        "ibv_wr_rdma_write_imm",
        qpx,
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        },
    )
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(
        "ibv_wr_rdma_read",
        qpx,
        WrOpcode::RdmaRead { remote_addr, rkey },
    )
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(
        "ibv_wr_atomic_cmp_swp",
        qpx,
        WrOpcode::AtomicCmpSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        },
    )
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    begin(
        "ibv_wr_atomic_fetch_add",
        qpx,
        WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        },
    )
}

unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    begin("ibv_wr_local_inv", qpx, WrOpcode::LocalInv(rkey))
}

/// Records an operation rnic lacks, reported by `ibv_wr_complete`.
fn lacks(name: &'static str, qpx: *mut ibv_qp_ex, what: &'static str) {
    with_batch(name, qpx, |_, _, _, _| Err(unsupported(what)))
}

unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if info.is_null() {
        with_batch("ibv_wr_bind_mw", qpx, |_, _, _, _| {
            Err(invalid(format_args!("ibv_wr_bind_mw: bind_info is NULL")))
        });
        return;
    }
    // SAFETY: non-NULL: the caller's bind information.
    let info = unsafe { info.read_unaligned() };
    // SAFETY: the window and region pointers are the caller's, checked by their magic.
    match unsafe { crate::mw::bind_opcode(mw, rkey, &info) } {
        Ok(opcode) => begin("ibv_wr_bind_mw", qpx, opcode),
        Err(e) => with_batch("ibv_wr_bind_mw", qpx, |_, _, _, _| Err(e)),
    }
}

unsafe extern "C" fn wr_send_tso(qpx: *mut ibv_qp_ex, _: *mut c_void, _: u16, _: u16) {
    lacks(
        "ibv_wr_send_tso",
        qpx,
        "TCP segmentation offload (ibv_wr_send_tso)",
    )
}

unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut ibv_qp_ex, _: u32) {
    lacks("ibv_wr_set_xrc_srqn", qpx, "XRC QPs (ibv_wr_set_xrc_srqn)")
}

/// `ibv_wr_atomic_write` (ABI 1.11): the 8 bytes at `atomic_wr`, as they lie in memory.
unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    if atomic_wr.is_null() {
        with_batch("ibv_wr_atomic_write", qpx, |_, _, _, _| {
            Err(invalid(format_args!(
                "ibv_wr_atomic_write: atomic_wr is NULL"
            )))
        });
        return;
    }
    // SAFETY: non-NULL: the caller's 8 bytes (ibv_wr_atomic_write's contract).
    let value = unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() };
    begin(
        "ibv_wr_atomic_write",
        qpx,
        WrOpcode::AtomicWrite {
            remote_addr,
            rkey,
            value,
        },
    )
}

/// `ibv_wr_flush` (ABI 1.11): placement type `ptype`, selectivity level `level`.
unsafe extern "C" fn wr_flush(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    length: usize,
    ptype: u8,
    level: u8,
) {
    begin(
        "ibv_wr_flush",
        qpx,
        WrOpcode::Flush {
            remote_addr,
            rkey,
            length: length as u64,
            ptype,
            level,
        },
    )
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last("ibv_wr_set_sge", qpx, |_, (w, _)| {
        w.sges = vec![Sge { addr, length, lkey }];
        w.inline = None;
        Ok(())
    })
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    last("ibv_wr_set_sge_list", qpx, |q, (w, _)| {
        let n = c_int::try_from(n).map_err(|_| invalid(format_args!("{n} SGEs")))?;
        // SAFETY: the caller's list of `n` SGEs.
        w.sges = unsafe { sges(list, n, q.cap.max_send_sge)? };
        w.inline = None;
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: one buffer of ours, describing the caller's data.
    unsafe { wr_set_inline_data_list(qpx, 1, &buf) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    n: usize,
    bufs: *const ibv_data_buf,
) {
    last("ibv_wr_set_inline_data_list", qpx, |q, (w, _)| {
        if n > 0 && bufs.is_null() {
            return Err(invalid(format_args!("{n} inline buffers at NULL")));
        }
        let list: Vec<Sge> = (0..n)
            .map(|i| {
                // SAFETY: the caller's list of `n` buffers.
                let b = unsafe { bufs.add(i).read_unaligned() };
                Sge {
                    addr: b.addr as u64,
                    length: u32::try_from(b.length).unwrap_or(u32::MAX),
                    lkey: 0,
                }
            })
            .collect();
        if !w.opcode.carries_data_out() {
            return Err(invalid(format_args!("inline data for {:?}", w.opcode)));
        }
        // SAFETY: the buffers are the caller's memory.
        w.inline = Some(unsafe { gather(&list, q.cap.max_inline_data)? });
        w.sges.clear();
        Ok(())
    })
}

unsafe extern "C" fn wr_set_ud_addr(
    qpx: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    last("ibv_wr_set_ud_addr", qpx, |q, (_, to)| {
        if !q.ud() {
            return Err(invalid(format_args!(
                "ibv_wr_set_ud_addr on a {} QP",
                type_name(q.qp_type)
            )));
        }
        // SAFETY: NULL or the caller's AH, checked by its magic number.
        let a = unsafe { from_c::<ibv_ah, Ah>(ah)? };
        *to = Some(a.r.route.ud(remote_qpn, remote_qkey));
        Ok(())
    })
}

/// `ibv_attach_mcast`: the UD QP joins the multicast group `gid`, an IPv4-mapped multicast
/// GID (`ATTACH_MCAST`, datasheet §14.15); RoCE has no LIDs, so `lid` is not used. 0 or an
/// errno (`EINVAL` for a QP that is not UD or a GID that is no group).
///
/// # Safety
///
/// `gid` is NULL or points to a GID.
pub(crate) unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: the caller's contract.
    errno_result("ibv_attach_mcast", || unsafe { mcast(qp, gid, true) })
}

/// `ibv_detach_mcast`: the QP leaves the group (`DETACH_MCAST`); `EINVAL` if it is not in
/// it.
///
/// # Safety
///
/// As [`ibv_attach_mcast`].
pub(crate) unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: the caller's contract.
    errno_result("ibv_detach_mcast", || unsafe { mcast(qp, gid, false) })
}

/// Joins (`attach`) or leaves group `gid`.
///
/// # Safety
///
/// `gid` is NULL or points to a GID.
unsafe fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> Result<(), Errno> {
    let obj = lookup::<ibv_qp_ex, Qp>(qp.cast())?;
    // SAFETY: the caller's contract; every bit pattern is a GID.
    let gid = unsafe { gid.as_ref().map(|g| g.raw) }
        .ok_or_else(|| invalid(format_args!("multicast: the GID is NULL")))?;
    let done = if attach {
        obj.r.qp.attach_mcast(&gid)
    } else {
        obj.r.qp.detach_mcast(&gid)
    };
    done.map_err(|e| errno_of(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::attr;

    fn send(opcode: ibv_wr_opcode, sge: &mut ibv_sge, flags: c_uint) -> ibv_send_wr {
        let mut w = ibv_send_wr::zeroed();
        w.wr_id = 9;
        w.opcode = opcode;
        w.send_flags = flags;
        w.sg_list = sge;
        w.num_sge = 1;
        w
    }

    fn cap() -> ibv_qp_cap {
        ibv_qp_cap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 16,
        }
    }

    #[test]
    fn send_work_requests_convert_with_their_operands() {
        let data = *b"0123456789";
        let mut sge = ibv_sge {
            addr: data.as_ptr() as u64,
            length: 10,
            lkey: 0x77,
        };
        let mut w = send(
            IBV_WR_RDMA_WRITE_WITH_IMM,
            &mut sge,
            IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
        );
        w.imm_data = 0x1234;
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0xabc,
            rkey: 5,
        };
        // SAFETY: the WR's list and memory are ours.
        let (s, to) = unsafe { send_wr(&w, QPT_RC, &cap()) }.unwrap();
        assert_eq!(
            s.opcode,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: 0xabc,
                rkey: 5,
                imm: 0x1234
            }
        );
        assert!(s.signaled && s.solicited && !s.fence && to.is_none());
        assert_eq!(s.sges[0].lkey, 0x77);

        // Inline: the bytes are gathered now.
        let w = send(IBV_WR_SEND, &mut sge, IBV_SEND_INLINE);
        // SAFETY: as above.
        let (s, _) = unsafe { send_wr(&w, QPT_RC, &cap()) }.unwrap();
        assert_eq!(s.inline.as_deref(), Some(&data[..]));
        assert!(s.sges.is_empty());

        let mut w = send(IBV_WR_ATOMIC_FETCH_AND_ADD, &mut sge, 0);
        w.wr.atomic = ibv_send_wr_atomic {
            remote_addr: 8,
            compare_add: 3,
            swap: 0,
            rkey: 4,
        };
        // SAFETY: as above.
        let (s, _) = unsafe { send_wr(&w, QPT_RC, &cap()) }.unwrap();
        assert_eq!(
            s.opcode,
            WrOpcode::AtomicFetchAdd {
                remote_addr: 8,
                rkey: 4,
                add: 3
            }
        );
    }

    #[test]
    fn send_work_requests_rnic_cannot_take_are_refused() {
        let mut sge = ibv_sge {
            addr: 0,
            length: 100,
            lkey: 1,
        };
        // SAFETY: the WRs' lists are ours; inline data is refused before it is read.
        unsafe {
            // A bind with an SGE, or of a window that is not one, is EINVAL.
            let w = send(IBV_WR_BIND_MW, &mut sge, 0);
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
            let mut w = send(IBV_WR_BIND_MW, &mut sge, 0);
            w.num_sge = 0;
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
            // UC has no READs, atomics or SEND with invalidate.
            for op in [
                IBV_WR_RDMA_READ,
                IBV_WR_ATOMIC_CMP_AND_SWP,
                IBV_WR_ATOMIC_FETCH_AND_ADD,
                IBV_WR_SEND_WITH_INV,
            ] {
                let w = send(op, &mut sge, 0);
                assert_eq!(
                    send_wr(&w, QPT_UC, &cap()).err(),
                    Some(libc::EINVAL),
                    "{op}"
                );
            }
            let w = send(IBV_WR_RDMA_WRITE_WITH_IMM, &mut sge, 0);
            assert!(send_wr(&w, QPT_UC, &cap()).is_ok());
            let w = send(IBV_WR_SEND, &mut sge, IBV_SEND_INLINE);
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
            let w = send(IBV_WR_RDMA_READ, &mut sge, 0);
            assert_eq!(send_wr(&w, QPT_UD, &cap()).err(), Some(libc::EINVAL));
            let mut w = send(IBV_WR_SEND, &mut sge, 0);
            w.num_sge = 3;
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
            w.num_sge = -1;
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
            w.num_sge = 1;
            w.sg_list = std::ptr::null_mut();
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
            w.opcode = 77;
            assert_eq!(send_wr(&w, QPT_RC, &cap()).err(), Some(libc::EINVAL));
        }
    }

    #[test]
    fn modify_masks_and_attributes_translate() {
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = 0x42;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.sgid_index = 1;
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.grh.dgid = ibv_gid {
            raw: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 3],
        };
        let mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN;
        let (d, m, qkey) = device_attr(&a, mask).unwrap();
        assert_eq!(m, attr::STATE | attr::AV | attr::PATH_MTU | attr::DEST_QPN);
        assert_eq!(
            (d.qp_state, d.path_mtu, d.dest_qp_num, d.sgid_index),
            (2, 3, 0x42, 0)
        );
        assert_eq!((d.dgid[15], d.hop_limit), (3, 1));
        assert_eq!(qkey, None);
        a.qkey = 0x1111_1111;
        let (_, m, qkey) = device_attr(&a, IBV_QP_STATE | IBV_QP_QKEY).unwrap();
        assert_eq!((m, qkey), (attr::STATE, Some(0x1111_1111)));
        assert_eq!(
            device_attr(&a, IBV_QP_ALT_PATH).err(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(device_attr(&a, IBV_QP_CAP).err(), Some(libc::EOPNOTSUPP));
        assert_eq!(device_attr(&a, 1 << 24).err(), Some(libc::EINVAL));
        a.ah_attr.is_global = 0;
        assert_eq!(device_attr(&a, IBV_QP_AV).err(), Some(libc::EINVAL));
        assert_eq!(device_qp_type(IBV_QPT_UC), Ok(QPT_UC));
        assert_eq!(device_qp_type(IBV_QPT_XRC_SEND), Err(libc::EOPNOTSUPP));
        assert_eq!(device_qp_type(IBV_QPT_RC), Ok(QPT_RC));
    }

    #[test]
    fn a_qp_may_allow_remote_flush() {
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC
            | IBV_ACCESS_FLUSH_GLOBAL
            | IBV_ACCESS_FLUSH_PERSISTENT;
        let mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        let (d, _, _) = device_attr(&a, mask).unwrap();
        assert_eq!(
            d.qp_access_flags,
            rnic_abi::verbs::ACCESS_REMOTE_WRITE
                | rnic_abi::verbs::ACCESS_REMOTE_READ
                | rnic_abi::verbs::ACCESS_REMOTE_ATOMIC
                | rnic_abi::verbs::ACCESS_FLUSH
        );
    }

    #[test]
    fn initiator_depth_above_the_functions_is_lowered_to_it() {
        assert_eq!(initiator_depth(0, 16), 0);
        assert_eq!(initiator_depth(16, 16), 16);
        // perftest asks for its peer's out_reads: 128 from Soft-RoCE.
        assert_eq!(initiator_depth(128, 16), 16);
        assert_eq!(initiator_depth(255, 1000), 255);
    }

    #[test]
    fn data_path_calls_on_garbage_fail_without_crashing() {
        let not_a_qp = [0u64; 64];
        let p = not_a_qp.as_ptr() as *mut ibv_qp;
        let mut sge = ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        let mut w = send(IBV_WR_SEND, &mut sge, 0);
        let mut bad = std::ptr::null_mut();
        let mut rbad = std::ptr::null_mut();
        // SAFETY: `p` is readable memory that is not a QP; the ops read its header only.
        unsafe {
            assert_eq!(post_send_op(p, &mut w, &mut bad), libc::EINVAL);
            assert_eq!(bad, &mut w as *mut _);
            assert_eq!(
                post_recv_op(p, std::ptr::null_mut(), &mut rbad),
                libc::EINVAL
            );
            wr_start(p.cast());
            wr_send(p.cast());
            wr_set_sge(p.cast(), 1, 2, 3);
            assert_eq!(wr_complete(p.cast()), libc::EINVAL);
            assert!(ibv_qp_to_qp_ex(p).is_null());
            assert_eq!(ibv_destroy_qp(p), libc::EINVAL);
            assert_eq!(ibv_modify_qp(p, std::ptr::null_mut(), 0), libc::EINVAL);
            assert_eq!(ibv_query_qp_data_in_order(p, IBV_WR_SEND, 0), 0);
            assert_eq!(ibv_query_qp_data_in_order(std::ptr::null_mut(), 0, 1), 0);
        }
    }
}
