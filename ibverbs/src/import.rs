//! `ibv_import_device`, `ibv_import_pd`, `ibv_import_mr`, `ibv_import_dm` and their
//! `ibv_unimport_*`: sharing a context, and the objects made in it, with another process
//! (or another context of this one) through a duplicate of the context's kernel command
//! file (`ibv_context::cmd_fd`) and the objects' kernel handles.
//!
//! rnic's contexts have no kernel file: commands go through the function's own command
//! queue, `cmd_fd` is -1, and a function has one driver at a time (README.md, *One
//! process per function*). So nothing can be imported, and the functions answer as
//! rdma-core does for a provider without import support (Soft-RoCE's, for one): the
//! imports fail with `EOPNOTSUPP` (`ibv_import_device` first answers `EINVAL` for a file
//! that is no character device, as rdma-core checks before it asks the provider), the
//! unimports do nothing. Each says so once on stderr.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::context::RnicContext;
use crate::ffi::{guard, invalid, null_on_err, unsupported, Errno};
use crate::pd::pd_of;

/// The refusal of import `name`.
fn no_import(name: &str) -> Errno {
    unsupported(&format!(
        "sharing a context's objects ({name}: rnic contexts have no kernel command file)"
    ))
}

/// `ibv_import_device`: NULL with `errno` `EINVAL` if `cmd_fd` is no character device,
/// else `EOPNOTSUPP` (see the module's documentation).
///
/// # Safety
///
/// Any value.
pub(crate) unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    null_on_err("ibv_import_device", || {
        // SAFETY: fstat writes only the stat structure it is given.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a writable stat structure; any fd value is allowed.
        let ok = unsafe { libc::fstat(cmd_fd, &mut st) } == 0;
        if !ok || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
            return Err(invalid(format_args!(
                "ibv_import_device: fd {cmd_fd} is no character device"
            )));
        }
        Err(no_import("ibv_import_device"))
    })
}

/// `ibv_import_pd`: NULL, `errno` `EOPNOTSUPP` (`EINVAL` for a pointer that is not an
/// open context).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_import_pd(ctx: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    null_on_err("ibv_import_pd", || {
        RnicContext::lookup(ctx)?;
        Err(no_import("ibv_import_pd"))
    })
}

/// `ibv_import_mr`: NULL, `errno` `EOPNOTSUPP` (`EINVAL` for a pointer that is not a
/// live PD).
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    null_on_err("ibv_import_mr", || {
        pd_of(pd)?;
        Err(no_import("ibv_import_mr"))
    })
}

/// `ibv_import_dm`: NULL, `errno` `EOPNOTSUPP` (`EINVAL` for a pointer that is not an
/// open context); rnic has no device memory either.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_import_dm(ctx: *mut ibv_context, _handle: u32) -> *mut ibv_dm {
    null_on_err("ibv_import_dm", || {
        RnicContext::lookup(ctx)?;
        Err(no_import("ibv_import_dm"))
    })
}

/// Defines the unimports: nothing was imported, so there is nothing to let go of. The
/// object (if it is one of this library's) is left as it is.
macro_rules! unimport {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: does nothing (see the module's documentation).")]
        ///
        /// # Safety
        ///
        /// Any pointer; it is not read.
        pub(crate) unsafe extern "C" fn $name(_object: *mut c_void) {
            guard(stringify!($name), (), || {
                no_import(stringify!($name));
            })
        }
    )*};
}

unimport!(ibv_unimport_pd, ibv_unimport_mr, ibv_unimport_dm);

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> c_int {
        // SAFETY: the calling thread's errno slot.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn nothing_can_be_imported() {
        // SAFETY: the functions take any value and pointer.
        unsafe {
            assert!(ibv_import_device(-1).is_null());
            assert_eq!(errno(), libc::EINVAL);
            let file = std::fs::File::open("/proc/self/stat").expect("a regular file");
            let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
            assert!(ibv_import_device(fd).is_null());
            assert_eq!(errno(), libc::EINVAL);
            let null = std::fs::File::open("/dev/null").expect("/dev/null");
            assert!(ibv_import_device(std::os::fd::AsRawFd::as_raw_fd(&null)).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert!(ibv_import_pd(std::ptr::null_mut(), 1).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert!(ibv_import_mr(0x10 as *mut ibv_pd, 1).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert!(ibv_import_dm(0x10 as *mut ibv_context, 1).is_null());
            assert_eq!(errno(), libc::EINVAL);
            ibv_unimport_pd(std::ptr::null_mut());
            ibv_unimport_mr(0x10 as *mut c_void);
            ibv_unimport_dm(std::ptr::null_mut());
        }
    }
}
