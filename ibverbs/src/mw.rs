//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw` and `ibv_bind_mw` (the
//! `ibv_context_ops` verbs.h's inline functions call), and the binds of `IBV_WR_BIND_MW`
//! and `ibv_wr_bind_mw` (src/qp.rs), which all become `BIND_MW` work requests on a QP.
//!
//! As rdma-core's providers (rxe's, for one): `ibv_bind_mw` binds a type 1 window by
//! posting a bind on the QP under the next key (`ibv_inc_rkey` of `mw->rkey`) and sets
//! `mw->rkey` to it once posted (if the bind then fails, with `IBV_WC_MW_BIND_ERR`, the
//! application sets it back); a type 2 window is bound by the application's own
//! `IBV_WR_BIND_MW` work request with the key it chose (`wr.bind_mw.rkey`), and
//! `mw->rkey` stays as it was, as with rxe and mlx5. A zero-based bind of a type 1
//! window is `EINVAL`, as in rxe.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use rnic_driver::verbs::{self, SendWr, WrOpcode};

use crate::abi::*;
use crate::ffi::{errno_of, errno_result, guard, invalid, null_on_err, Errno};
use crate::objects::{from_c, register, unregister};
use crate::pd::{pd_of, Mr, PdObj};
use crate::qp::Qp;

/// A memory window.
pub(crate) struct Mw {
    /// Its PD, kept while it lives (`ibv_dealloc_pd` answers `EBUSY` meanwhile).
    _pd: Arc<PdObj>,
    mw: verbs::MemoryWindow,
}

/// The rights a bind may give a window (rnic's `MW_ACCESS_ALL`, the same bits);
/// `IBV_ACCESS_LOCAL_WRITE` is accepted and means nothing for a window.
const BIND_ACCESS: c_uint = IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_ZERO_BASED;
const _: () = assert!(BIND_ACCESS == verbs::MW_ACCESS_ALL);

/// The device's window type for `t`.
fn device_mw_type(t: ibv_mw_type) -> Result<u8, Errno> {
    match t {
        IBV_MW_TYPE_1 => Ok(verbs::MW_TYPE_1),
        IBV_MW_TYPE_2 => Ok(verbs::MW_TYPE_2),
        t => Err(invalid(format_args!("memory window type {t}"))),
    }
}

/// `ibv_context_ops::alloc_mw`, behind verbs.h's `ibv_alloc_mw`: a window of `type_`
/// (`IBV_MW_TYPE_1` or `_2`) of PD `pd`, or NULL with `errno` (`EOPNOTSUPP` on a
/// function without memory windows, `ENOMEM` past its quota of MRs and windows).
pub(crate) unsafe extern "C" fn alloc_mw_op(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    null_on_err("ibv_alloc_mw", || {
        let pdo = pd_of(pd)?;
        let mw_type = device_mw_type(type_)?;
        let ctx = pdo.r.ctx.clone();
        let mw = pdo.r.pd.alloc_mw(mw_type).map_err(|e| {
            log::warn!("{}: ibv_alloc_mw: {e}", ctx.name());
            errno_of(&e)
        })?;
        let mut c = ibv_mw::zeroed();
        c.context = ctx.ibv_context();
        c.pd = pd;
        c.rkey = mw.rkey();
        c.handle = mw.rkey();
        c.type_ = type_;
        let state = Mw { _pd: pdo, mw };
        Ok(register(ctx.ibv_context(), c, state, |_| ()).c_ptr())
    })
}

/// `ibv_context_ops::dealloc_mw`, behind verbs.h's `ibv_dealloc_mw`: 0 or an errno. A
/// bound window may be freed; its keys are dead at once.
pub(crate) unsafe extern "C" fn dealloc_mw_op(mw: *mut ibv_mw) -> c_int {
    errno_result("ibv_dealloc_mw", || {
        unregister::<ibv_mw, Mw>(mw, |_| Ok(())).map(drop)
    })
}

/// The bind of window `mw` to `info` under key `new_key`, as a work request's operation.
/// `info.mr` NULL with length 0 unbinds (type 1); rights beyond [`BIND_ACCESS`] are
/// `EINVAL`.
///
/// # Safety
///
/// `mw` and `info.mr` are NULL, or readable for the header of the object they claim to
/// be (checked by its magic number).
pub(crate) unsafe fn bind_opcode(
    mw: *mut ibv_mw,
    new_key: u32,
    info: &ibv_mw_bind_info,
) -> Result<WrOpcode, Errno> {
    // SAFETY: the caller's promise.
    let w = unsafe { from_c::<ibv_mw, Mw>(mw)? };
    let access = info.mw_access_flags & !IBV_ACCESS_LOCAL_WRITE;
    if access & !BIND_ACCESS != 0 {
        return Err(invalid(format_args!(
            "memory window access {:#x} (remote write, read, atomic and zero-based only)",
            info.mw_access_flags
        )));
    }
    let mr = if info.mr.is_null() {
        if info.length != 0 || info.addr != 0 {
            return Err(invalid(format_args!(
                "a bind of {} bytes at {:#x} without a memory region",
                info.length, info.addr
            )));
        }
        None
    } else {
        // SAFETY: the caller's promise.
        Some(unsafe { from_c::<ibv_mr, Mr>(info.mr)? })
    };
    Ok(WrOpcode::BindMw {
        mw_key: w.r.mw.rkey(),
        new_key,
        mr_lkey: mr.map_or(0, |m| m.r.lkey()),
        addr: info.addr,
        length: info.length,
        access,
    })
}

/// `ibv_context_ops::bind_mw`, behind verbs.h's `ibv_bind_mw` (which has checked that
/// the window is of type 1 and that a region given is of the window's PD): posts the
/// bind on `qp` (RC or UC) under the next key and sets `mw->rkey` to it; 0, or an errno
/// (also in `errno`): `EINVAL` for a zero-based bind, a QP of another type or arguments
/// that are not what they claim, `ENOMEM` when the send queue is full.
pub(crate) unsafe extern "C" fn bind_mw_op(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    let r = guard("ibv_bind_mw", Err(libc::EIO), || {
        // SAFETY: verbs.h's ibv_bind_mw read mw->context through the pointer; the QP's
        // header is the caller's.
        let (q, w) = unsafe {
            (
                from_c::<ibv_qp_ex, Qp>(qp.cast())?,
                from_c::<ibv_mw, Mw>(mw)?,
            )
        };
        if mw_bind.is_null() {
            return Err(invalid(format_args!("ibv_bind_mw: mw_bind is NULL")));
        }
        // SAFETY: non-NULL: the caller's structure.
        let b = unsafe { mw_bind.read_unaligned() };
        if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
            return Err(invalid(format_args!(
                "ibv_bind_mw: a type 1 window cannot be zero-based"
            )));
        }
        let new_key = verbs::inc_rkey(w.r.mw.rkey());
        // SAFETY: `mw` checked above; `bind_info.mr` is the caller's region or NULL.
        let opcode = unsafe { bind_opcode(mw, new_key, &b.bind_info)? };
        let wr = SendWr {
            wr_id: b.wr_id,
            opcode,
            signaled: b.send_flags & IBV_SEND_SIGNALED != 0,
            fence: b.send_flags & IBV_SEND_FENCE != 0,
            ..SendWr::default()
        };
        if !crate::qp::takes(q.r.qp.qp_type(), &wr.opcode) {
            return Err(invalid(format_args!("ibv_bind_mw on a UD QP")));
        }
        q.r.post(&[(wr, None)]).1?;
        w.r.mw.set_rkey(new_key);
        // SAFETY: the live window's structure; `rkey` is the library's to keep, as
        // rdma-core's providers do.
        unsafe { (*w.c_ptr()).rkey = new_key };
        Ok(())
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            crate::ffi::set_errno(e);
            e
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_types_are_ibverbs_numbers() {
        assert_eq!(device_mw_type(IBV_MW_TYPE_1), Ok(1));
        assert_eq!(device_mw_type(IBV_MW_TYPE_2), Ok(2));
        assert_eq!(device_mw_type(3), Err(libc::EINVAL));
    }

    #[test]
    fn window_verbs_on_garbage_fail_without_crashing() {
        let not_an_object = [0u64; 64];
        let p = not_an_object.as_ptr() as *mut ibv_mw;
        let info = ibv_mw_bind_info {
            mr: std::ptr::null_mut(),
            addr: 0,
            length: 0,
            mw_access_flags: 0,
        };
        let mut bind = ibv_mw_bind {
            wr_id: 1,
            send_flags: 0,
            bind_info: info,
        };
        // SAFETY: readable memory that is not an object; only headers are read.
        unsafe {
            assert!(alloc_mw_op(std::ptr::null_mut(), IBV_MW_TYPE_1).is_null());
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            assert_eq!(dealloc_mw_op(p), libc::EINVAL);
            assert_eq!(bind_opcode(p, 0, &info).err(), Some(libc::EINVAL));
            assert_eq!(bind_mw_op(p.cast(), p, &mut bind), libc::EINVAL);
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
        }
    }
}
