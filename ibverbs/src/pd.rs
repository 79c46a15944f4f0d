//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`,
//! `ibv_reg_mr` (and `_iova`, `_iova2`), `ibv_dereg_mr`, `ibv_reg_dmabuf_mr`, and the
//! fork helpers providers import.
//!
//! A memory region is the application's own memory: the transport makes its pages
//! reachable (`Transport::map_user_memory`: on the host they are moved in place onto a
//! memfd that rnicd maps, in a VM they are locked and translated) and the PD registers
//! them with the region's iova, the application's address (or the one
//! `ibv_reg_mr_iova2` names), so work requests and peers use the addresses the
//! application knows.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rnic_driver::verbs;

use crate::abi::*;
use crate::context::RnicContext;
use crate::ffi::{errno_of, errno_result, guard, invalid, null_on_err, unsupported, Errno};
use crate::objects::{lookup, register, unregister, users, Obj};

/// A protection domain.
pub(crate) struct Pd {
    pub(crate) ctx: Arc<RnicContext>,
    pub(crate) pd: verbs::Pd,
}

/// A protection domain as C holds it.
pub(crate) type PdObj = Obj<ibv_pd, Pd>;

/// A memory region: the registration, which holds the pages the device reaches.
pub(crate) struct Mr {
    _pd: Arc<PdObj>,
    _mr: verbs::Mr,
}

/// The live PD at `pd`.
pub(crate) fn pd_of(pd: *const ibv_pd) -> Result<Arc<PdObj>, Errno> {
    lookup(pd)
}

/// `ibv_alloc_pd`.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    null_on_err("ibv_alloc_pd", || {
        let rctx = RnicContext::lookup(ctx)?;
        let pd = rctx.verbs.alloc_pd().map_err(|e| {
            log::warn!("{}: ibv_alloc_pd: {e}", rctx.name());
            errno_of(&e)
        })?;
        let mut c = ibv_pd::zeroed();
        c.context = ctx;
        c.handle = pd.pdn();
        Ok(register(ctx, c, Pd { ctx: rctx, pd }, |_| ()).c_ptr())
    })
}

/// `ibv_dealloc_pd`: 0, or an errno (`EBUSY` while MRs, QPs, SRQs or AHs use it).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    errno_result("ibv_dealloc_pd", || {
        unregister::<ibv_pd, Pd>(pd, |o| {
            if users(o) > 0 {
                log::debug!("PD {pd:p} still has {} objects", users(o));
                return Err(libc::EBUSY);
            }
            Ok(())
        })
        .map(drop)
    })
}

/// Access bits rnic honours; the device takes them with the same values.
const DEVICE_ACCESS: c_uint = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Checks `access` as rdma-core's kernel does and returns what the device takes.
fn device_access(access: c_uint) -> Result<u32, Errno> {
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    if access & IBV_ACCESS_ON_DEMAND != 0 {
        return Err(unsupported(
            "on-demand paging (IBV_ACCESS_ON_DEMAND) memory regions",
        ));
    }
    if access & IBV_ACCESS_ZERO_BASED != 0 {
        return Err(unsupported(
            "zero-based memory regions (IBV_ACCESS_ZERO_BASED)",
        ));
    }
    if access & (IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT) != 0 {
        return Err(unsupported("RDMA FLUSH targets (IBV_ACCESS_FLUSH_*)"));
    }
    // Memory windows cannot be bound (rnic has none), so MW_BIND grants nothing;
    // HUGETLB is a hint.
    let known = DEVICE_ACCESS | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB;
    if access & !known != 0 {
        return Err(invalid(format_args!("access flags {access:#x}")));
    }
    // The remote may write only what the local side may (IB spec 10.6.3.1).
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && access & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(invalid(format_args!(
            "access {access:#x}: remote write or atomic access needs local write"
        )));
    }
    Ok(access & DEVICE_ACCESS)
}

/// Registers `len` bytes at `addr` of this process with PD `pd`, at `iova`.
fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, Errno> {
    let pdo = pd_of(pd)?;
    let access = device_access(access)?;
    if addr.is_null() || len == 0 {
        return Err(invalid(format_args!(
            "ibv_reg_mr of {len} bytes at {addr:p}"
        )));
    }
    let ctx = &pdo.r.ctx;
    let writable = access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) != 0;
    let mapped = {
        let _quiet = crate::heap_quiet::exclusive();
        ctx.verbs
            .device()
            .transport()
            .map_user_memory(addr as usize, len, writable)
    };
    let buf = mapped.map_err(|e| {
        log::warn!("{}: ibv_reg_mr: {e}", ctx.name());
        errno_of(&e)
    })?;
    let offset = addr as usize % rnic_abi::PAGE_SIZE as usize;
    let mr = pdo
        .r
        .pd
        .reg_mr_iova(Arc::new(buf), offset, len, iova, access)
        .map_err(|e| {
            log::warn!("{}: ibv_reg_mr of {len} bytes at {addr:p}: {e}", ctx.name());
            errno_of(&e)
        })?;
    let mut c = ibv_mr::zeroed();
    c.context = ctx.ibv_context();
    c.pd = pd;
    c.addr = addr;
    c.length = len;
    c.handle = mr.lkey();
    c.lkey = mr.lkey();
    c.rkey = mr.rkey();
    let state = Mr {
        _pd: pdo.clone(),
        _mr: mr,
    };
    Ok(register(ctx.ibv_context(), c, state, |_| ()).c_ptr())
}

/// `ibv_reg_mr`: registers `length` bytes at `addr` for `access`; the region's addresses
/// are the application's.
///
/// # Safety
///
/// `addr..addr+length` is memory of this process (anything else is refused, never read).
pub(crate) unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    null_on_err("ibv_reg_mr", || {
        reg_mr(pd, addr, length, addr as u64, access as c_uint)
    })
}

/// `ibv_reg_mr_iova`: as [`ibv_reg_mr`], with the region's first byte at `iova`.
///
/// # Safety
///
/// As [`ibv_reg_mr`].
pub(crate) unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    null_on_err("ibv_reg_mr_iova", || {
        reg_mr(pd, addr, length, iova, access as c_uint)
    })
}

/// `ibv_reg_mr_iova2`: as [`ibv_reg_mr_iova`] (what verbs.h's `ibv_reg_mr` macro calls
/// for access flags it cannot see at compile time).
///
/// # Safety
///
/// As [`ibv_reg_mr`].
pub(crate) unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    null_on_err("ibv_reg_mr_iova2", || {
        reg_mr(pd, addr, length, iova, access)
    })
}

/// `ibv_reg_dmabuf_mr`: rnic reaches no dma-buf (device memory of another driver).
///
/// # Safety
///
/// Any arguments.
pub(crate) unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    null_on_err("ibv_reg_dmabuf_mr", || {
        Err(unsupported("dma-buf memory regions (ibv_reg_dmabuf_mr)"))
    })
}

/// `ibv_dereg_mr`: 0 or an errno.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    errno_result("ibv_dereg_mr", || {
        unregister::<ibv_mr, Mr>(mr, |_| Ok(())).map(drop)
    })
}

/// Whether `ibv_fork_init` was called.
static FORK_INIT: AtomicBool = AtomicBool::new(false);

/// `ibv_fork_init`: 0. Registered memory is fork-safe without it: in a VM it is always
/// kept out of children (`MADV_DONTFORK`); on the host it is memfd-backed and shared
/// with children rather than copied (README.md).
///
/// # Safety
///
/// None needed.
pub(crate) unsafe extern "C" fn ibv_fork_init() -> c_int {
    FORK_INIT.store(true, Ordering::Release);
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (see [`ibv_fork_init`]).
///
/// # Safety
///
/// None needed.
pub(crate) unsafe extern "C" fn ibv_is_fork_initialized() -> u32 {
    IBV_FORK_UNNEEDED
}

/// `madvise(advice)` on the pages of `base..base+size`, if `ibv_fork_init` was called
/// (as rdma-core: otherwise 0 and nothing done).
fn fork_range(base: *mut c_void, size: usize, advice: c_int) -> c_int {
    if !FORK_INIT.load(Ordering::Acquire) || size == 0 {
        return 0;
    }
    let page = rnic_abi::PAGE_SIZE as usize;
    let start = base as usize & !(page - 1);
    let Some(end) = (base as usize)
        .checked_add(size)
        .and_then(|e| e.checked_add(page - 1))
    else {
        return libc::EINVAL;
    };
    let end = end & !(page - 1);
    // SAFETY: advice changes no contents; a range that is not mapped fails with ENOMEM.
    if unsafe { libc::madvise(start as *mut c_void, end - start, advice) } != 0 {
        return std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL);
    }
    0
}

/// `ibv_dontfork_range`: 0 or an errno.
///
/// # Safety
///
/// Any range (an unmapped one fails).
pub(crate) unsafe extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    guard("ibv_dontfork_range", libc::EIO, || {
        fork_range(base, size, libc::MADV_DONTFORK)
    })
}

/// `ibv_dofork_range`: 0 or an errno.
///
/// # Safety
///
/// Any range (an unmapped one fails).
pub(crate) unsafe extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    guard("ibv_dofork_range", libc::EIO, || {
        fork_range(base, size, libc::MADV_DOFORK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_are_checked_as_the_kernel_does() {
        assert_eq!(device_access(0), Ok(0));
        assert_eq!(
            device_access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            Ok(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
        );
        assert_eq!(
            device_access(IBV_ACCESS_REMOTE_READ),
            Ok(IBV_ACCESS_REMOTE_READ)
        );
        // Optional bits and hints are dropped.
        assert_eq!(
            device_access(
                IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE
            ),
            Ok(IBV_ACCESS_LOCAL_WRITE)
        );
        assert_eq!(device_access(IBV_ACCESS_REMOTE_WRITE), Err(libc::EINVAL));
        assert_eq!(device_access(IBV_ACCESS_REMOTE_ATOMIC), Err(libc::EINVAL));
        assert_eq!(device_access(IBV_ACCESS_ON_DEMAND), Err(libc::EOPNOTSUPP));
        assert_eq!(device_access(IBV_ACCESS_ZERO_BASED), Err(libc::EOPNOTSUPP));
        assert_eq!(device_access(1 << 15), Err(libc::EINVAL));
    }

    #[test]
    fn garbage_pds_and_mrs_are_einval() {
        let mut buf = [0u8; 64];
        // SAFETY: the functions take any pointer; garbage is never dereferenced.
        unsafe {
            assert!(ibv_alloc_pd(std::ptr::null_mut()).is_null());
            assert_eq!(ibv_dealloc_pd(0x10 as *mut ibv_pd), libc::EINVAL);
            assert!(ibv_reg_mr(0x10 as *mut ibv_pd, buf.as_mut_ptr().cast(), 64, 0).is_null());
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            assert_eq!(ibv_dereg_mr(std::ptr::null_mut()), libc::EINVAL);
            assert!(ibv_reg_dmabuf_mr(std::ptr::null_mut(), 0, 0, 0, -1, 0).is_null());
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
        }
    }

    #[test]
    fn fork_ranges_are_advised_once_fork_init_was_called() {
        let page = rnic_abi::PAGE_SIZE as usize;
        // SAFETY: a fresh anonymous mapping of our own, advised and unmapped here.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
            assert_eq!(ibv_fork_init(), 0);
            assert_eq!(ibv_dontfork_range(p.byte_add(10), page), 0);
            assert_eq!(ibv_dofork_range(p.byte_add(10), page), 0);
            // Sizes that wrap, and memory that is not mapped, fail instead of panicking.
            assert_eq!(ibv_dontfork_range(p, usize::MAX), libc::EINVAL);
            libc::munmap(p, 2 * page);
            assert_eq!(ibv_dontfork_range(p, page), libc::ENOMEM);
        }
    }
}
