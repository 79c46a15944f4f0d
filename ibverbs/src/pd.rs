//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`,
//! `ibv_reg_mr` (and `_iova`, `_iova2`), `ibv_rereg_mr`, `ibv_dereg_mr`,
//! `ibv_reg_dmabuf_mr`, and the fork helpers providers import.
//!
//! A memory region is the application's own memory: the transport makes its pages
//! reachable (`Transport::map_user_memory`: on the host they are moved in place onto a
//! memfd that rnicd maps, in a VM they are locked and translated) and the PD registers
//! them with the region's iova, the application's address (or the one
//! `ibv_reg_mr_iova2` names), so work requests and peers use the addresses the
//! application knows.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rnic_driver::verbs;

use crate::abi::*;
use crate::context::RnicContext;
use crate::ffi::{
    errno_of, errno_result, guard, invalid, null_on_err, set_errno, unsupported, Errno,
};
use crate::objects::{lookup, register, unregister, users, Obj};

/// A protection domain.
pub(crate) struct Pd {
    pub(crate) ctx: Arc<RnicContext>,
    pub(crate) pd: verbs::Pd,
}

/// A protection domain as C holds it.
pub(crate) type PdObj = Obj<ibv_pd, Pd>;

/// A memory region: its registration, which `ibv_rereg_mr` replaces.
pub(crate) struct Mr {
    reg: Mutex<Registration>,
}

impl Mr {
    /// The local key of its registration now (a memory window's bind names it).
    pub(crate) fn lkey(&self) -> u32 {
        self.reg.lock().unwrap_or_else(|e| e.into_inner()).mr.lkey()
    }
}

/// A registration on the device, which holds the pages the device reaches, and what it
/// was made of.
struct Registration {
    /// Its PD, kept while it lives (`ibv_dealloc_pd` answers `EBUSY` meanwhile).
    pd: Arc<PdObj>,
    mr: verbs::Mr,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    /// As the application gave it.
    access: c_uint,
}

// SAFETY: `addr` is an address of the application's memory, kept only to register it
// again; it is never dereferenced. The rest is Send.
unsafe impl Send for Registration {}

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

/// Checks `access` as rdma-core's kernel does and returns what the device takes: with
/// `windows` (the function has memory windows, `CAP_MW`) `IBV_ACCESS_MW_BIND` too,
/// which the device needs to bind windows to the region (it has the same value); with
/// `flush` (`CAP_FLUSH`, ABI 1.11) the `IBV_ACCESS_FLUSH_*` flags (the same values),
/// which a function without it refuses, as the kernel does without
/// `IB_DEVICE_FLUSH_*`.
fn device_access(access: c_uint, windows: bool, flush: bool) -> Result<u32, Errno> {
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
    let flush_access = IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
    if !flush && access & flush_access != 0 {
        return Err(unsupported("RDMA FLUSH targets (IBV_ACCESS_FLUSH_*)"));
    }
    // Without memory windows MW_BIND grants nothing; HUGETLB is a hint.
    let known = DEVICE_ACCESS | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB | flush_access;
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
    let mw_bind = if windows { IBV_ACCESS_MW_BIND } else { 0 };
    Ok(access & (DEVICE_ACCESS | mw_bind | flush_access))
}
const _: () = assert!(IBV_ACCESS_MW_BIND == rnic_abi::verbs::ACCESS_MW_BIND);
const _: () = assert!(IBV_ACCESS_FLUSH_GLOBAL == rnic_abi::verbs::ACCESS_FLUSH_GLOBAL);
const _: () = assert!(IBV_ACCESS_FLUSH_PERSISTENT == rnic_abi::verbs::ACCESS_FLUSH_PERSISTENT);

/// Registers `len` bytes at `addr` of this process with PD `pdo`, at `iova`.
fn register_region(
    pdo: &Arc<PdObj>,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> Result<Registration, Errno> {
    let ctx = &pdo.r.ctx;
    let caps = ctx.verbs.attr().caps;
    let windows = caps & rnic_abi::regs::CAP_MW != 0;
    let flush = caps & rnic_abi::regs::CAP_FLUSH != 0;
    let device_access = device_access(access, windows, flush)?;
    if addr.is_null() || len == 0 {
        return Err(invalid(format_args!(
            "ibv_reg_mr of {len} bytes at {addr:p}"
        )));
    }
    let writable = device_access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) != 0;
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
        .reg_mr_iova(Arc::new(buf), offset, len, iova, device_access)
        .map_err(|e| {
            log::warn!("{}: ibv_reg_mr of {len} bytes at {addr:p}: {e}", ctx.name());
            errno_of(&e)
        })?;
    Ok(Registration {
        pd: pdo.clone(),
        mr,
        addr,
        len,
        iova,
        access,
    })
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
    let reg = register_region(&pdo, addr, len, iova, access)?;
    let ctx = &pdo.r.ctx;
    let mut c = ibv_mr::zeroed();
    c.context = ctx.ibv_context();
    c.pd = pd;
    c.addr = addr;
    c.length = len;
    c.handle = reg.mr.lkey();
    c.lkey = reg.mr.lkey();
    c.rkey = reg.mr.rkey();
    let state = Mr {
        reg: Mutex::new(reg),
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

/// `ibv_rereg_mr`: changes what a memory region covers (`IBV_REREG_MR_CHANGE_TRANSLATION`:
/// `length` bytes at `addr`, which become its iova too), its PD
/// (`IBV_REREG_MR_CHANGE_PD`) or its access (`IBV_REREG_MR_CHANGE_ACCESS`), any
/// together. 0, or an `IBV_REREG_MR_ERR_*` code with `errno` set.
///
/// rnic's device cannot change a registration in place, so the region is registered
/// anew with what changes and what stays, and the old registration is let go once the
/// new one stands: its lkey and rkey change (as the kernel allows; the application reads
/// them from the `ibv_mr` again), the old ones stop working, and if the new registration
/// fails (`IBV_REREG_MR_ERR_CMD`, `errno` as `ibv_reg_mr` would set it) the region is
/// left as it was. The arguments are checked as rdma-core checks them
/// (`IBV_REREG_MR_ERR_INPUT`, `EINVAL`), and flags 0 or a PD that is not one of the
/// region's context are `IBV_REREG_MR_ERR_CMD` with `EINVAL`, as the kernel answers.
///
/// # Safety
///
/// Any pointers; with `IBV_REREG_MR_CHANGE_TRANSLATION`, as [`ibv_reg_mr`].
pub(crate) unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard("ibv_rereg_mr", IBV_REREG_MR_ERR_CMD, || {
        match rereg_mr(mr, flags, pd, addr, length, access as c_uint) {
            Ok(()) => 0,
            Err((code, errno)) => {
                set_errno(errno);
                code
            }
        }
    })
}

/// [`ibv_rereg_mr`]'s work; an error is its `IBV_REREG_MR_ERR_*` code and errno.
fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_uint,
) -> Result<(), (c_int, Errno)> {
    let input = |what: std::fmt::Arguments<'_>| (IBV_REREG_MR_ERR_INPUT, invalid(what));
    let obj = lookup::<ibv_mr, Mr>(mr).map_err(|e| (IBV_REREG_MR_ERR_INPUT, e))?;
    if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
        return Err(input(format_args!("ibv_rereg_mr flags {flags:#x}")));
    }
    let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    if translation && (addr.is_null() || length == 0) {
        return Err(input(format_args!(
            "ibv_rereg_mr to {length} bytes at {addr:p}"
        )));
    }
    if access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0 {
        return Err(input(format_args!(
            "ibv_rereg_mr: access {access:#x} without IBV_REREG_MR_CHANGE_ACCESS"
        )));
    }
    let cmd = |e: Errno| (IBV_REREG_MR_ERR_CMD, e);
    if flags == 0 {
        return Err(cmd(invalid(format_args!("ibv_rereg_mr with no flags"))));
    }
    let mut reg = obj.r.reg.lock().unwrap_or_else(|e| e.into_inner());
    let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        let pdo = pd_of(pd).map_err(cmd)?;
        if !Arc::ptr_eq(&pdo.r.ctx, &reg.pd.r.ctx) {
            return Err(cmd(invalid(format_args!(
                "ibv_rereg_mr: PD {pd:p} is of another context than MR {mr:p}"
            ))));
        }
        pdo
    } else {
        reg.pd.clone()
    };
    let (addr, len, iova) = if translation {
        (addr, length, addr as u64)
    } else {
        (reg.addr, reg.len, reg.iova)
    };
    let access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        access
    } else {
        reg.access
    };
    let new = register_region(&new_pd, addr, len, iova, access).map_err(cmd)?;
    // The old registration goes first: a window bound to it keeps it (EBUSY), and then
    // the region stays as it was.
    if let Err(e) = reg.mr.dereg() {
        log::debug!("ibv_rereg_mr of {mr:p}: the old registration stays: {e}");
        return Err(cmd(errno_of(&e)));
    }
    let c = obj.c_ptr();
    // SAFETY: `c` is the live MR's C structure (the registry holds it); libibverbs
    // writes these fields of it on a re-registration, as rdma-core does.
    unsafe {
        (*c).pd = new_pd.c_ptr();
        (*c).addr = addr;
        (*c).length = len;
        (*c).lkey = new.mr.lkey();
        (*c).rkey = new.mr.rkey();
    }
    // The old registration goes (deregistered on the device) with the old PD's hold.
    *reg = new;
    Ok(())
}

/// `ibv_dereg_mr`: 0 or an errno (`EBUSY` while a memory window is bound to the
/// region, as the kernel answers; the region then stays registered).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    errno_result("ibv_dereg_mr", || {
        let obj = lookup::<ibv_mr, Mr>(mr)?;
        {
            let reg = obj.r.reg.lock().unwrap_or_else(|e| e.into_inner());
            reg.mr.dereg().map_err(|e| {
                log::debug!("ibv_dereg_mr of {mr:p}: {e}");
                errno_of(&e)
            })?;
        }
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
        assert_eq!(device_access(0, false, false), Ok(0));
        assert_eq!(
            device_access(
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                false,
                false
            ),
            Ok(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
        );
        assert_eq!(
            device_access(IBV_ACCESS_REMOTE_READ, false, false),
            Ok(IBV_ACCESS_REMOTE_READ)
        );
        // Optional bits and hints are dropped; MW_BIND too, unless the function has
        // memory windows.
        let flags = IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE;
        assert_eq!(
            device_access(flags, false, false),
            Ok(IBV_ACCESS_LOCAL_WRITE)
        );
        assert_eq!(
            device_access(flags, true, false),
            Ok(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)
        );
        assert_eq!(
            device_access(IBV_ACCESS_REMOTE_WRITE, false, false),
            Err(libc::EINVAL)
        );
        assert_eq!(
            device_access(IBV_ACCESS_REMOTE_ATOMIC, false, false),
            Err(libc::EINVAL)
        );
        assert_eq!(
            device_access(IBV_ACCESS_ON_DEMAND, false, false),
            Err(libc::EOPNOTSUPP)
        );
        assert_eq!(
            device_access(IBV_ACCESS_ZERO_BASED, false, false),
            Err(libc::EOPNOTSUPP)
        );
        assert_eq!(device_access(1 << 15, false, false), Err(libc::EINVAL));
        // FLUSH targets where the function has CAP_FLUSH (ABI 1.11) only.
        let flush = IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
        assert_eq!(device_access(flush, false, false), Err(libc::EOPNOTSUPP));
        assert_eq!(device_access(flush, false, true), Ok(flush));
        assert_eq!(
            device_access(IBV_ACCESS_FLUSH_PERSISTENT, false, true),
            Ok(IBV_ACCESS_FLUSH_PERSISTENT)
        );
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
            let rereg = ibv_rereg_mr(
                0x10 as *mut ibv_mr,
                IBV_REREG_MR_CHANGE_ACCESS,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                0,
            );
            assert_eq!(rereg, IBV_REREG_MR_ERR_INPUT);
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
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
