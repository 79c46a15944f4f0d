//! Shared receive queues: `ibv_create_srq`, `ibv_create_srq_ex` (basic SRQs),
//! `ibv_modify_srq` (the size and the limit), `ibv_query_srq`, `ibv_destroy_srq`, `ibv_get_srq_num`,
//! and the data-path op `ibv_post_srq_recv`.

use std::ffi::c_int;
use std::sync::Arc;

use rnic_driver::verbs;

use crate::abi::*;
use crate::context::RnicContext;
use crate::ffi::{errno_of, errno_result, invalid, null_on_err, unsupported, write_out, Errno};
use crate::objects::{from_c, lookup, register, unregister, users, Obj};
use crate::pd::{pd_of, PdObj};
use crate::qp::post_recv_chain;

/// A shared receive queue.
pub(crate) struct Srq {
    pub(crate) ctx: Arc<RnicContext>,
    pd: Arc<PdObj>,
    pub(crate) srq: verbs::Srq,
    /// SGEs per WR, as created (the size is the driver's [`verbs::Srq::max_wr`]).
    max_sge: u32,
}

/// A shared receive queue as C holds it.
pub(crate) type SrqObj = Obj<ibv_srq, Srq>;

impl Srq {
    /// The PD it was created from.
    pub(crate) fn pd(&self) -> &Arc<PdObj> {
        &self.pd
    }
}

/// The live SRQ at `srq` (control path).
pub(crate) fn srq_of(srq: *const ibv_srq) -> Result<Arc<SrqObj>, Errno> {
    lookup(srq)
}

/// Creates an SRQ of PD `pd` as `attr` asks, writing what it got back into `attr`.
fn create(
    pd: *mut ibv_pd,
    srq_context: *mut std::ffi::c_void,
    attr: &mut ibv_srq_attr,
) -> Result<*mut ibv_srq, Errno> {
    let pdo = pd_of(pd)?;
    let ctx = pdo.r.ctx.clone();
    let l = ctx.verbs.attr().limits;
    if attr.max_wr == 0 || attr.max_wr > l.max_qp_wr || attr.max_sge > l.max_sge {
        return Err(invalid(format_args!(
            "an SRQ of {} WRs of {} SGEs (at most {} of {})",
            attr.max_wr, attr.max_sge, l.max_qp_wr, l.max_sge
        )));
    }
    let srq = pdo
        .r
        .pd
        .create_srq(attr.max_wr, attr.max_sge, attr.srq_limit)
        .map_err(|e| {
            log::warn!("{}: ibv_create_srq: {e}", ctx.name());
            errno_of(&e)
        })?;
    let srqn = srq.srqn();
    attr.max_wr = srq.max_wr();
    let mut c = ibv_srq::zeroed();
    c.context = ctx.ibv_context();
    c.srq_context = srq_context;
    c.pd = pd;
    c.handle = srqn;
    let state = Srq {
        ctx: ctx.clone(),
        pd: pdo,
        srq,
        max_sge: attr.max_sge,
    };
    let obj = register(ctx.ibv_context(), c, state, |_| ());
    ctx.events
        .srqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(srqn, Arc::downgrade(&obj));
    Ok(obj.c_ptr())
}

/// `ibv_create_srq`: `attr` gets the SRQ's actual size.
///
/// # Safety
///
/// `attr` is NULL or readable and writable.
pub(crate) unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    null_on_err("ibv_create_srq", || {
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_create_srq: attr is NULL")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let mut a = unsafe { attr.read_unaligned() };
        let srq = create(pd, a.srq_context, &mut a.attr)?;
        // SAFETY: as above.
        unsafe { attr.write_unaligned(a) };
        Ok(srq)
    })
}

/// `verbs_context::create_srq_ex`, behind verbs.h's `ibv_create_srq_ex` for what it
/// does not hand to `ibv_create_srq` itself: XRC and tag-matching SRQs, which rnic
/// lacks.
pub(crate) unsafe extern "C" fn create_srq_ex_op(
    _ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    null_on_err("ibv_create_srq_ex", || {
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_create_srq_ex: attr is NULL")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let mut a = unsafe { attr.read_unaligned() };
        let basic = a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || a.srq_type == IBV_SRQT_BASIC;
        if !basic {
            return Err(unsupported("XRC and tag-matching SRQs"));
        }
        if a.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD) != 0 {
            return Err(unsupported("SRQs with XRC domains, CQs or tag matching"));
        }
        let srq = create(a.pd, a.srq_context, &mut a.attr)?;
        // SAFETY: as above.
        unsafe { attr.write_unaligned(a) };
        Ok(srq)
    })
}

/// `ibv_modify_srq`: the size (`IBV_SRQ_MAX_WR`: the device's `RESIZE_SRQ`, to at least
/// `max_wr` entries, with the receives posted and not taken yet; the limit stays) and the
/// limit (`IBV_SRQ_LIMIT`), in that order. 0 or an errno: `EINVAL` for a size of 0, above
/// `max_srq_wr`, not above the armed limit or below the receives pending, or a limit not
/// below the size; `EOPNOTSUPP` for a resize where the device lacks `CAP_RESIZE_SRQ`.
///
/// # Safety
///
/// `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    errno_result("ibv_modify_srq", || {
        let obj = srq_of(srq)?;
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_modify_srq: attr is NULL")));
        }
        if mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return Err(invalid(format_args!("ibv_modify_srq mask {mask:#x}")));
        }
        // SAFETY: non-NULL; the caller's structure.
        let a = unsafe { attr.read_unaligned() };
        if mask & IBV_SRQ_MAX_WR != 0 {
            let rctx = &obj.r.ctx;
            let max = rctx.verbs.attr().limits.max_qp_wr;
            if a.max_wr == 0 || a.max_wr > max {
                return Err(invalid(format_args!(
                    "an SRQ of {} WRs (1 to {max})",
                    a.max_wr
                )));
            }
            obj.r.srq.resize(a.max_wr).map_err(|e| {
                log::debug!("{}: ibv_modify_srq to {} WRs: {e}", rctx.name(), a.max_wr);
                errno_of(&e)
            })?;
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            let max_wr = obj.r.srq.max_wr();
            if a.srq_limit >= max_wr {
                return Err(invalid(format_args!(
                    "SRQ limit {} not below its {max_wr} WRs",
                    a.srq_limit
                )));
            }
            obj.r.srq.set_limit(a.srq_limit).map_err(|e| errno_of(&e))?;
        }
        Ok(())
    })
}

/// `ibv_query_srq`: 0 or an errno.
///
/// # Safety
///
/// `attr` is NULL or writable.
pub(crate) unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    errno_result("ibv_query_srq", || {
        let obj = srq_of(srq)?;
        let q = obj.r.srq.query().map_err(|e| errno_of(&e))?;
        let a = ibv_srq_attr {
            max_wr: q.max_wr,
            max_sge: obj.r.max_sge,
            srq_limit: q.srq_limit,
        };
        // SAFETY: NULL or writable by the caller's promise.
        unsafe { write_out(attr, a, "srq_attr") }
    })
}

/// `ibv_destroy_srq`: 0, or an errno (`EBUSY` while a QP uses it).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    errno_result("ibv_destroy_srq", || {
        let obj = unregister::<ibv_srq, Srq>(srq, |o| {
            if users(o) > 0 {
                log::debug!("SRQ {srq:p} is still used by QPs");
                return Err(libc::EBUSY);
            }
            Ok(())
        })?;
        let events = &obj.r.ctx.events;
        events
            .srqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&obj.r.srq.srqn());
        events.async_queue.forget(Arc::as_ptr(&obj).cast());
        Ok(())
    })
}

/// `verbs_context::get_srq_num`, behind verbs.h's `ibv_get_srq_num`.
pub(crate) unsafe extern "C" fn get_srq_num_op(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    errno_result("ibv_get_srq_num", || {
        let obj = srq_of(srq)?;
        // SAFETY: NULL or writable by the caller's promise.
        unsafe { write_out(num, obj.r.srq.srqn(), "srq_num") }
    })
}

/// `ibv_context_ops::post_srq_recv`: posts the chain of receives; 0, or an errno with
/// `*bad_wr` at the first WR not posted.
pub(crate) unsafe extern "C" fn post_srq_recv_op(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    errno_result("ibv_post_srq_recv", || {
        // SAFETY: verbs.h's ibv_post_srq_recv read srq->context through the pointer.
        let obj = unsafe { from_c::<ibv_srq, Srq>(srq) }.inspect_err(|_| {
            // SAFETY: NULL or writable by the caller's promise.
            unsafe { crate::qp::set_bad(bad_wr, wr) }
        })?;
        // SAFETY: `wr` is NULL or a chain of the caller's receive WRs.
        unsafe {
            post_recv_chain(wr, bad_wr, obj.r.max_sge, |wrs| {
                obj.r.srq.post_recv_list(wrs)
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_srqs_are_einval() {
        let not_an_srq = [0u64; 32];
        let p = not_an_srq.as_ptr() as *mut ibv_srq;
        let mut attr = ibv_srq_attr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        };
        let mut bad = std::ptr::null_mut();
        let mut n = 0;
        // SAFETY: the functions take any pointer; `p` is readable memory that is not an
        // SRQ, and the data-path op only reads its header.
        unsafe {
            assert_eq!(ibv_modify_srq(p, &mut attr, IBV_SRQ_LIMIT), libc::EINVAL);
            assert_eq!(ibv_query_srq(p, &mut attr), libc::EINVAL);
            assert_eq!(ibv_destroy_srq(p), libc::EINVAL);
            assert_eq!(get_srq_num_op(p, &mut n), libc::EINVAL);
            assert_eq!(
                post_srq_recv_op(p, std::ptr::null_mut(), &mut bad),
                libc::EINVAL
            );
            let mut init = ibv_srq_init_attr {
                srq_context: std::ptr::null_mut(),
                attr,
            };
            assert!(ibv_create_srq(std::ptr::null_mut(), &mut init).is_null());
        }
    }
}
