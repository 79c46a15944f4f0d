//! The C boundary: how an exported function reports failure, and the guard that keeps a
//! Rust panic from ever reaching C.
//!
//! libibverbs has three conventions and each exported function follows rdma-core's:
//! return the errno value itself ([`errno_result`]: `ibv_query_device`, `ibv_query_port`
//! and the ops of `verbs_context`), return -1 and set `errno` ([`minus_one`]:
//! `ibv_query_gid`, `ibv_close_device`), or return NULL and set `errno`
//! ([`null_on_err`]: `ibv_open_device`). Inside, a function body is a closure returning
//! `Result<_, Errno>`; a panic in it is caught, logged and turned into `EIO`.

use std::collections::HashSet;
use std::ffi::c_int;
use std::io::{self, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, Once};

use rnic_abi::cmd::Status;
use rnic_driver::Error;

/// An errno value (`EINVAL`, ...), always positive.
pub(crate) type Errno = c_int;

/// The environment variable with the library's log filter (`env_logger` syntax;
/// default `warn`).
pub const LOG_ENV: &str = "RNIC_LOG";

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for the
    // life of the thread.
    unsafe { *libc::__errno_location() = e };
}

/// Sends the `log` records of this library and of rnic_driver to stderr, once per
/// process: warnings and errors by default (what an application's user must see, one
/// line each), more with `RNIC_LOG=debug`. A program that installed a logger of its own
/// (a Rust test) keeps it.
pub(crate) fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var(LOG_ENV).unwrap_or_else(|_| "warn".into());
        let _ = env_logger::Builder::new()
            .parse_filters(&filter)
            .format(|buf, record| match record.level() {
                log::Level::Error | log::Level::Warn => {
                    writeln!(buf, "libibverbs (rnic): {}", record.args())
                }
                level => writeln!(
                    buf,
                    "libibverbs (rnic) {}: {}",
                    level.as_str().to_lowercase(),
                    record.args()
                ),
            })
            .try_init();
    });
}

/// Runs the body of exported function `name`. A panic in it is logged and answered with
/// `on_panic` and `errno` `EIO`: unwinding into C is undefined behaviour (Rust would
/// abort the application instead).
pub(crate) fn guard<T>(name: &'static str, on_panic: T, body: impl FnOnce() -> T) -> T {
    init_logging();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic");
            log::error!("{name}: internal error ({what}); failing the call with EIO");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// For functions that return 0 or an errno value (and set `errno` too, which costs
/// nothing and helps callers that look there).
pub(crate) fn errno_result(name: &'static str, body: impl FnOnce() -> Result<(), Errno>) -> c_int {
    guard(name, libc::EIO, || match body() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    })
}

/// For functions that return a non-negative value or -1 with `errno` set.
pub(crate) fn minus_one(name: &'static str, body: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    guard(name, -1, || {
        body().unwrap_or_else(|e| {
            set_errno(e);
            -1
        })
    })
}

/// For functions that return a pointer, or NULL with `errno` set.
pub(crate) fn null_on_err<T>(
    name: &'static str,
    body: impl FnOnce() -> Result<*mut T, Errno>,
) -> *mut T {
    guard(name, std::ptr::null_mut(), || {
        body().unwrap_or_else(|e| {
            set_errno(e);
            std::ptr::null_mut()
        })
    })
}

/// `EINVAL` for an argument the caller got wrong, logged at debug level (programs probe
/// with such calls; they are not worth a line on stderr).
pub(crate) fn invalid(what: std::fmt::Arguments<'_>) -> Errno {
    log::debug!("invalid argument: {what}");
    libc::EINVAL
}

/// `EOPNOTSUPP`, what rdma-core's providers answer for a verb they lack, with a line on
/// stderr naming what is missing, once per process and feature.
pub(crate) fn unsupported(what: &str) -> Errno {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said
        .get_or_insert_with(HashSet::new)
        .insert(what.to_string())
    {
        log::warn!("{what} is not supported by rnic yet (EOPNOTSUPP)");
    }
    libc::EOPNOTSUPP
}

/// The errno an application sees for a driver error.
pub(crate) fn errno_of(e: &Error) -> Errno {
    match e {
        Error::Io(_, io) => io_errno(io),
        Error::VfioUser(_, e) => e.errno(),
        Error::Device(_) => libc::EIO,
        // The function vanished (rnicd closed the socket): no such device any more.
        Error::DeviceGone(_) => libc::ENODEV,
        // Reset under the application: every object is gone, as after a fatal error.
        Error::FunctionReset(_) => libc::EIO,
        Error::Held { .. } => libc::EBUSY,
        Error::NotFound(_) | Error::AbiMismatch { .. } => libc::ENODEV,
        Error::Command { status, .. } => match Status::from_u16(*status) {
            Some(Status::NoResources) => libc::ENOMEM,
            Some(Status::BadParam | Status::BadState) => libc::EINVAL,
            Some(Status::NotPermitted) => libc::EPERM,
            Some(Status::Busy) => libc::EBUSY,
            Some(Status::NotFound) => libc::ENOENT,
            _ => libc::EIO,
        },
        Error::Timeout(..) => libc::ETIMEDOUT,
        Error::Unsupported(_) => libc::EOPNOTSUPP,
        Error::NoDmaMemory(_) => libc::ENOMEM,
    }
}

/// The errno of an I/O error: its own when the OS gave one, else by kind.
fn io_errno(e: &io::Error) -> Errno {
    e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        _ => libc::EIO,
    })
}

/// Copies `value` to the first `len` bytes at `dst`, zeroing what `len` has beyond it:
/// how an extensible output structure is filled for a caller built against another
/// version of it (smaller: it gets a prefix; larger: the fields it knows and we do not
/// read as zero).
///
/// # Safety
///
/// `dst` must be valid for writes of `len` bytes.
pub(crate) unsafe fn write_prefix<T: Copy>(dst: *mut u8, len: usize, value: &T) {
    let n = len.min(size_of::<T>());
    // SAFETY: `value` is a `T`, readable for size_of::<T>() >= n bytes; `dst` is writable
    // for `len` >= n bytes (the caller's promise); the two cannot overlap, as `value` is
    // a Rust reference the caller's buffer does not alias.
    unsafe {
        std::ptr::copy_nonoverlapping(value as *const T as *const u8, dst, n);
        std::ptr::write_bytes(dst.add(n), 0, len - n);
    }
}

/// Writes `value` through `dst`, or fails with `EINVAL` naming `what` if `dst` is NULL.
///
/// # Safety
///
/// `dst` must be NULL or valid for a write of a `T`.
pub(crate) unsafe fn write_out<T>(dst: *mut T, value: T, what: &str) -> Result<(), Errno> {
    if dst.is_null() {
        return Err(invalid(format_args!("{what} is NULL")));
    }
    // SAFETY: non-null, and valid for a write by the caller's promise; write_unaligned
    // asks nothing of its alignment.
    unsafe { dst.write_unaligned(value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> Errno {
        // SAFETY: see set_errno.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn each_convention_reports_its_way() {
        assert_eq!(errno_result("t", || Ok(())), 0);
        assert_eq!(errno_result("t", || Err(libc::EINVAL)), libc::EINVAL);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(minus_one("t", || Ok(7)), 7);
        assert_eq!(minus_one("t", || Err(libc::ENODEV)), -1);
        assert_eq!(errno(), libc::ENODEV);
        let p: *mut u8 = null_on_err("t", || Err(libc::EBUSY));
        assert!(p.is_null());
        assert_eq!(errno(), libc::EBUSY);
    }

    #[test]
    fn a_panic_becomes_eio() {
        let r = errno_result("t", || panic!("boom"));
        assert_eq!(r, libc::EIO);
        assert_eq!(errno(), libc::EIO);
        let r: *mut u8 = null_on_err("t", || panic!("boom"));
        assert!(r.is_null());
    }

    #[test]
    fn write_prefix_truncates_and_zero_fills() {
        let value: u32 = 0x0403_0201;
        let mut buf = [0xffu8; 8];
        // SAFETY: buf has 8 bytes.
        unsafe { write_prefix(buf.as_mut_ptr(), 2, &value) };
        assert_eq!(buf, [1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        // SAFETY: buf has 8 bytes.
        unsafe { write_prefix(buf.as_mut_ptr(), 8, &value) };
        assert_eq!(buf, [1, 2, 3, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn write_out_refuses_null() {
        // SAFETY: NULL is allowed.
        let r = unsafe { write_out(std::ptr::null_mut::<u32>(), 1, "x") };
        assert_eq!(r, Err(libc::EINVAL));
    }

    #[test]
    fn driver_errors_map_to_errnos() {
        let busy = Error::Command {
            opcode: 0x110,
            status: Status::Busy as u16,
            name: "BUSY",
        };
        assert_eq!(errno_of(&busy), libc::EBUSY);
        assert_eq!(errno_of(&Error::NotFound("x".into())), libc::ENODEV);
        let io = Error::Io("x".into(), io::Error::from_raw_os_error(libc::ECONNREFUSED));
        assert_eq!(errno_of(&io), libc::ECONNREFUSED);
        assert_eq!(
            errno_of(&Error::Timeout(std::time::Duration::ZERO, "x")),
            libc::ETIMEDOUT
        );
    }

    #[test]
    fn unsupported_is_eopnotsupp() {
        assert_eq!(unsupported("a test feature"), libc::EOPNOTSUPP);
        assert_eq!(unsupported("a test feature"), libc::EOPNOTSUPP);
    }
}
