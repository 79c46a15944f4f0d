//! Completion queues: `ibv_create_cq`, `ibv_create_cq_ex` (a `verbs_context` op),
//! `ibv_destroy_cq`, and the data-path ops verbs.h's inline functions call:
//! `ibv_poll_cq`, `ibv_req_notify_cq`, and the extended poll API (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll`, `ibv_wc_read_*`).
//!
//! Every CQ is an `ibv_cq_ex` (which begins as an `ibv_cq`, so `ibv_cq_ex_to_cq` is a
//! cast): one structure serves both APIs.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rnic_driver::verbs::{self, Wc, WcOpcode};

use crate::abi::*;
use crate::context::RnicContext;
use crate::events::{Channel, ChannelObj};
use crate::ffi::{
    errno_of, errno_result, guard, invalid, null_on_err, set_errno, unsupported, Errno,
};
use crate::objects::{from_c, lookup, register, unregister, users, Obj};

/// A completion queue.
pub(crate) struct Cq {
    pub(crate) ctx: Arc<RnicContext>,
    pub(crate) cq: verbs::Cq,
    /// Where its completion events go.
    channel: Option<Arc<ChannelObj>>,
    /// The completion the extended poll API is at (`ibv_start_poll` .. `ibv_end_poll`).
    current: Mutex<Option<Wc>>,
    /// Polls in a row that found nothing (see [`Cq::idle`]).
    empty_polls: AtomicU32,
}

/// A completion queue as C holds it.
pub(crate) type CqObj = Obj<ibv_cq_ex, Cq>;

/// Empty polls in a row after which a poll gives the CPU away ([`Cq::idle`]), and after
/// which it sleeps.
const SPIN_POLLS: u32 = 64;
const YIELD_POLLS: u32 = 1024;
/// How long an idle poll sleeps, once polls have found nothing for a while.
const IDLE_SLEEP: Duration = Duration::from_micros(20);

impl Cq {
    /// Accounts for a poll that found `n` completions. rnic is software: its engine
    /// threads run on the same CPUs as the application, and ibverbs programs spin on
    /// `ibv_poll_cq` (ibv_rc_pingpong, perftest), which on a machine with few cores keeps
    /// the device itself from running: 12 ms per ping-pong round trip on two cores. So a
    /// CQ that keeps coming up empty gives the CPU away: it yields after
    /// [`SPIN_POLLS`] empty polls in a row, and sleeps [`IDLE_SLEEP`] after
    /// [`YIELD_POLLS`]. A completion resets the count, so a busy CQ never waits.
    fn idle(&self, n: usize) {
        if n > 0 {
            self.empty_polls.store(0, Ordering::Relaxed);
            return;
        }
        let empty = self.empty_polls.fetch_add(1, Ordering::Relaxed);
        if empty >= YIELD_POLLS {
            std::thread::sleep(IDLE_SLEEP);
        } else if empty >= SPIN_POLLS {
            std::thread::yield_now();
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Wc>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device raised a completion event for this CQ (`obj`): queue it on its channel.
    pub(crate) fn completion_event(&self, obj: &Arc<CqObj>) {
        match &self.channel {
            Some(ch) => ch.r.push(Arc::downgrade(obj)),
            None => log::debug!("completion event of a CQ without a channel"),
        }
    }

    /// `ibv_ack_cq_events`: counted in the CQ's `comp_events_completed`, as rdma-core
    /// counts them.
    pub(crate) fn ack_events(&self, obj: &CqObj, n: c_uint) {
        let _serialised = self.current();
        // SAFETY: the live CQ's structure; the field is libibverbs' to maintain, written
        // under this CQ's lock.
        unsafe { (*obj.c_ptr()).comp_events_completed += n };
    }
}

/// `enum ibv_wc_opcode` of a driver opcode (the same numbers, but FLUSH's: see
/// `rnic_abi::verbs::wc::FLUSH`).
fn wc_opcode(op: WcOpcode) -> ibv_wc_opcode {
    match op {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
        WcOpcode::AtomicWrite => IBV_WC_ATOMIC_WRITE,
        WcOpcode::Flush => IBV_WC_FLUSH,
        // Only control queues complete registrations; never on an application's CQ.
        WcOpcode::RegMr => u32::from(rnic_abi::verbs::wc::REG_MR),
        WcOpcode::Unknown(n) => n.into(),
    }
}

/// A driver completion as `struct ibv_wc`.
pub(crate) fn c_wc(w: &Wc) -> ibv_wc {
    let mut c = ibv_wc::zeroed();
    c.wr_id = w.wr_id;
    c.status = match w.status {
        Ok(s) => s as ibv_wc_status,
        Err(n) => n.into(),
    };
    c.opcode = wc_opcode(w.opcode);
    c.vendor_err = w.vendor_err;
    c.byte_len = w.byte_len;
    c.imm_data = w.imm_data.or(w.invalidated_rkey).unwrap_or(0);
    c.qp_num = w.qp_num;
    c.src_qp = w.src_qp;
    c.wc_flags = wc_flags_of(w.wc_flags);
    c.sl = wc_sl_of(w.wc_flags);
    c
}

/// Creates a CQ of at least `cqe` entries on `ctx` (the verbs of `ibv_create_cq` and
/// `ibv_create_cq_ex`).
fn create(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<Arc<CqObj>, Errno> {
    let rctx = RnicContext::lookup(ctx)?;
    let max = rctx.verbs.attr().limits.max_cqe;
    if cqe < 1 || cqe as u32 > max {
        return Err(invalid(format_args!("{cqe} CQ entries (1 to {max})")));
    }
    if comp_vector != 0 {
        return Err(invalid(format_args!(
            "completion vector {comp_vector} (the device has 1)"
        )));
    }
    let channel = if channel.is_null() {
        None
    } else {
        let ch = lookup::<ibv_comp_channel, Channel>(channel)?;
        if !Arc::ptr_eq(&ch.r.ctx, &rctx) {
            return Err(invalid(format_args!(
                "completion channel {channel:p} is of another context"
            )));
        }
        Some(ch)
    };
    let cq = rctx.verbs.create_cq(cqe as u32).map_err(|e| {
        log::warn!("{}: ibv_create_cq of {cqe} entries: {e}", rctx.name());
        errno_of(&e)
    })?;
    let mut c = ibv_cq_ex::zeroed();
    c.context = ctx;
    c.channel = channel
        .as_ref()
        .map_or(std::ptr::null_mut(), |ch| ch.c_ptr());
    c.cq_context = cq_context;
    c.handle = cq.cqn();
    c.cqe = cq.entries().try_into().unwrap_or(c_int::MAX);
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
    let cqn = cq.cqn();
    let state = Cq {
        ctx: rctx.clone(),
        cq,
        channel,
        current: Mutex::new(None),
        empty_polls: AtomicU32::new(0),
    };
    let obj = register(ctx, c, state, |_| ());
    rctx.events
        .cqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(cqn, Arc::downgrade(&obj));
    Ok(obj)
}

/// `ibv_create_cq`.
///
/// # Safety
///
/// Any pointers.
pub(crate) unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    null_on_err("ibv_create_cq", || {
        create(ctx, cqe, cq_context, channel, comp_vector).map(|o| o.c_ptr().cast())
    })
}

/// `verbs_context::create_cq_ex`, behind verbs.h's `ibv_create_cq_ex`: the fields of a
/// plain `ibv_wc` can be read (`IBV_WC_STANDARD_FLAGS`); timestamps, VLANs, flow tags,
/// tag matching and parent domains are not offered.
pub(crate) unsafe extern "C" fn create_cq_ex_op(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    null_on_err("ibv_create_cq_ex", || {
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_create_cq_ex: attr is NULL")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let a = unsafe { attr.read_unaligned() };
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            return Err(unsupported(
                "CQs of a parent domain (ibv_alloc_parent_domain)",
            ));
        }
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return Err(invalid(format_args!(
                "ibv_create_cq_ex comp_mask {:#x}",
                a.comp_mask
            )));
        }
        if a.wc_flags & !IBV_WC_STANDARD_FLAGS != 0 {
            return Err(unsupported(
                "completion timestamps, VLANs, flow tags and tag matching in CQs (ibv_create_cq_ex wc_flags)",
            ));
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
            if a.flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
                return Err(unsupported("CQs that ignore overruns"));
            }
            if a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0 {
                return Err(invalid(format_args!(
                    "ibv_create_cq_ex flags {:#x}",
                    a.flags
                )));
            }
        }
        let cqe = c_int::try_from(a.cqe).unwrap_or(c_int::MAX);
        let vector = c_int::try_from(a.comp_vector).unwrap_or(c_int::MAX);
        create(ctx, cqe, a.cq_context, a.channel, vector).map(|o| o.c_ptr())
    })
}

/// `ibv_destroy_cq`: 0, or an errno (`EBUSY` while a QP uses it). Events of the CQ not
/// yet read are dropped.
///
/// # Safety
///
/// Any pointer.
/// `ibv_resize_cq`: the CQ moves to a ring of at least `cqe` entries with the completions
/// not polled yet (the device's `RESIZE_CQ`, ABI 1.10); `cq->cqe` becomes its size.
/// `EINVAL` for a size out of range or below the completions not polled yet.
///
/// # Safety
///
/// `cq` is a CQ of this library, or any pointer (refused).
pub(crate) unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    errno_result("ibv_resize_cq", || {
        let obj = lookup::<ibv_cq_ex, Cq>(cq.cast())?;
        let rctx = &obj.r.ctx;
        let max = rctx.verbs.attr().limits.max_cqe;
        if cqe < 1 || cqe as u32 > max {
            return Err(invalid(format_args!("{cqe} CQ entries (1 to {max})")));
        }
        obj.r.cq.resize(cqe as u32).map_err(|e| {
            log::debug!("{}: ibv_resize_cq to {cqe} entries: {e}", rctx.name());
            errno_of(&e)
        })?;
        // SAFETY: the application's CQ, one of ours (looked up above); a provider sets
        // its `cqe` so.
        unsafe { (*cq).cqe = obj.r.cq.entries().try_into().unwrap_or(c_int::MAX) };
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    errno_result("ibv_destroy_cq", || {
        // The event thread holds a CQ for a moment while it queues its event, under the
        // context's CQ table lock: with that lock held here, a reference counted as a
        // user is a QP's, never the event thread's.
        let rctx = lookup::<ibv_cq_ex, Cq>(cq.cast())?.r.ctx.clone();
        let mut cqs = rctx.events.cqs.lock().unwrap_or_else(|e| e.into_inner());
        let obj = unregister::<ibv_cq_ex, Cq>(cq.cast(), |o| {
            if users(o) > 0 {
                log::debug!("CQ {cq:p} is still used by QPs");
                return Err(libc::EBUSY);
            }
            Ok(())
        })?;
        cqs.remove(&obj.r.cq.cqn());
        drop(cqs);
        let events = &obj.r.ctx.events;
        if let Some(ch) = &obj.r.channel {
            ch.r.forget(&obj);
        }
        events.async_queue.forget(Arc::as_ptr(&obj).cast());
        Ok(())
    })
}

/// The CQ of a data-path call.
///
/// # Safety
///
/// As [`from_c`].
unsafe fn data_cq<'a>(cq: *const ibv_cq_ex) -> Result<&'a CqObj, Errno> {
    // SAFETY: the caller's promise.
    unsafe { from_c(cq) }
}

/// `ibv_context_ops::poll_cq`: up to `n` completions into `wc`; their number, or -1.
pub(crate) unsafe extern "C" fn poll_cq_op(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", -1, || {
        // SAFETY: verbs.h's ibv_poll_cq read cq->context through the pointer already.
        let obj = match unsafe { data_cq(cq.cast()) } {
            Ok(o) => o,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        let Ok(n) = usize::try_from(n) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if n == 0 {
            return 0;
        }
        if wc.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let got = obj.r.cq.poll(n);
        obj.r.idle(got.len());
        for (i, w) in got.iter().enumerate() {
            // SAFETY: the caller gave room for `n` >= got.len() completions.
            unsafe { wc.add(i).write_unaligned(c_wc(w)) };
        }
        got.len() as c_int
    })
}

/// `ibv_context_ops::req_notify_cq`: arms the CQ; 0 or an errno.
pub(crate) unsafe extern "C" fn req_notify_cq_op(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    errno_result("ibv_req_notify_cq", || {
        // SAFETY: as in poll_cq_op.
        let obj = unsafe { data_cq(cq.cast())? };
        obj.r.cq.req_notify(solicited_only != 0);
        Ok(())
    })
}

/// Takes the next completion into the extended poll state; `ENOENT` when there is none.
fn advance(cq: *mut ibv_cq_ex) -> Result<(), Errno> {
    // SAFETY: verbs.h's ibv_start_poll/ibv_next_poll called through the pointer.
    let obj = unsafe { data_cq(cq)? };
    let mut cur = obj.r.current();
    let got = obj.r.cq.poll(1).pop();
    obj.r.idle(usize::from(got.is_some()));
    let Some(w) = got else {
        *cur = None;
        return Err(libc::ENOENT);
    };
    // SAFETY: the live CQ's structure; wr_id and status are the public face of the
    // current completion, written while the CQ's poll state is locked.
    unsafe {
        let c = obj.c_ptr();
        (*c).wr_id = w.wr_id;
        (*c).status = c_wc(&w).status;
    }
    *cur = Some(w);
    Ok(())
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // ENOENT (nothing to poll) is the common answer, not an error worth errno.
    guard("ibv_start_poll", libc::EIO, || {
        // SAFETY: NULL or the caller's structure.
        if !attr.is_null() && unsafe { attr.read_unaligned() }.comp_mask != 0 {
            return libc::EINVAL;
        }
        advance(cq).err().unwrap_or(0)
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    guard("ibv_next_poll", libc::EIO, || {
        advance(cq).err().unwrap_or(0)
    })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard("ibv_end_poll", (), || {
        // SAFETY: as in advance().
        if let Ok(obj) = unsafe { data_cq(cq) } {
            *obj.r.current() = None;
        }
    })
}

/// Reads a field of the current completion (0 without one).
fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Wc) -> T) -> T {
    // SAFETY: as in advance().
    match unsafe { data_cq(cq) } {
        Ok(obj) => obj.r.current().as_ref().map(f).unwrap_or_default(),
        Err(_) => T::default(),
    }
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    guard("ibv_wc_read_opcode", 0, || {
        read(cq, |w| wc_opcode(w.opcode))
    })
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    guard("ibv_wc_read_vendor_err", 0, || read(cq, |w| w.vendor_err))
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    guard("ibv_wc_read_byte_len", 0, || read(cq, |w| w.byte_len))
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    guard("ibv_wc_read_imm_data", 0, || {
        read(cq, |w| w.imm_data.or(w.invalidated_rkey).unwrap_or(0))
    })
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    guard("ibv_wc_read_qp_num", 0, || read(cq, |w| w.qp_num))
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    guard("ibv_wc_read_src_qp", 0, || read(cq, |w| w.src_qp))
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    guard("ibv_wc_read_wc_flags", 0, || {
        read(cq, |w| wc_flags_of(w.wc_flags))
    })
}

/// RoCE has no LIDs or path bits: 0, as rxe reports.
unsafe extern "C" fn read_slid(_cq: *mut ibv_cq_ex) -> u32 {
    0
}

/// The packet type in place of a service level, as in `ibv_wc` (see [`wc_sl_of`]).
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    guard("ibv_wc_read_sl", 0, || read(cq, |w| wc_sl_of(w.wc_flags)))
}

unsafe extern "C" fn read_dlid_path_bits(_cq: *mut ibv_cq_ex) -> u8 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::{wc, wc_flags as flags, Cqe, WcStatus};

    fn cqe(opcode: u8, status: u8, wc_flags: u8, imm: u32) -> Wc {
        Wc::from_cqe(&Cqe {
            wr_id: 77,
            byte_len: 12,
            imm_or_inv: imm,
            qp_num: 5,
            src_qp: 6,
            opcode,
            status,
            wc_flags,
            owner: 1,
            vendor_err: 3,
        })
    }

    #[test]
    fn completions_convert_to_ibv_wc() {
        let c = c_wc(&cqe(wc::RECV, 0, flags::WITH_IMM | flags::GRH, 0x0102_0304));
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (77, IBV_WC_SUCCESS, IBV_WC_RECV)
        );
        assert_eq!(
            (c.byte_len, c.qp_num, c.src_qp, c.vendor_err),
            (12, 5, 6, 3)
        );
        assert_eq!(c.imm_data, 0x0102_0304);
        assert_eq!(c.wc_flags, IBV_WC_WITH_IMM | IBV_WC_GRH);
        let c = c_wc(&cqe(wc::RECV, 0, flags::WITH_INV, 0x55));
        assert_eq!((c.imm_data, c.wc_flags), (0x55, IBV_WC_WITH_INV));
        let c = c_wc(&cqe(
            wc::RDMA_READ,
            WcStatus::RemAccessErr as u8,
            flags::SOLICITED,
            0,
        ));
        assert_eq!(
            (c.status, c.opcode),
            (IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_READ)
        );
        // The solicited bit is rnic's own, not an ibv_wc flag.
        assert_eq!(c.wc_flags, 0);
        let c = c_wc(&cqe(wc::RECV_RDMA_WITH_IMM, 99, 0, 0));
        assert_eq!((c.status, c.opcode), (99, IBV_WC_RECV_RDMA_WITH_IMM));
    }

    #[test]
    fn receives_with_a_grh_report_the_roce_v2_ipv4_packet_type_as_their_sl() {
        // UCX 1.18's UD transport takes sl & 7 == 2 for IPv4 and reads the destination
        // address from the receive buffer's GRH space accordingly.
        let ud = c_wc(&cqe(wc::RECV, 0, flags::GRH, 0));
        assert_eq!(ud.sl & 0x7, 2);
        assert_eq!(ud.sl, ROCE_V2_IPV4_PACKET_TYPE);
        // RC receives and sends carry no GRH: 0, as Soft-RoCE reports.
        assert_eq!(c_wc(&cqe(wc::RECV, 0, 0, 0)).sl, 0);
        assert_eq!(c_wc(&cqe(wc::SEND, 0, 0, 0)).sl, 0);
    }

    #[test]
    fn data_path_calls_on_garbage_fail_without_crashing() {
        let not_a_cq = [0u64; 64];
        let p = not_a_cq.as_ptr() as *mut ibv_cq;
        let mut wc = [ibv_wc::zeroed(); 2];
        // SAFETY: `p` is readable memory that is not a CQ; NULL is allowed.
        unsafe {
            assert_eq!(poll_cq_op(p, 2, wc.as_mut_ptr()), -1);
            assert_eq!(poll_cq_op(std::ptr::null_mut(), 2, wc.as_mut_ptr()), -1);
            assert_eq!(req_notify_cq_op(p, 0), libc::EINVAL);
            assert_eq!(start_poll(p.cast(), std::ptr::null_mut()), libc::EINVAL);
            assert_eq!(read_byte_len(p.cast()), 0);
            assert_eq!(read_sl(p.cast()), 0);
            end_poll(p.cast());
            assert_eq!(ibv_destroy_cq(p), libc::EINVAL);
            assert!(ibv_create_cq(
                std::ptr::null_mut(),
                4,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0
            )
            .is_null());
        }
    }
}
