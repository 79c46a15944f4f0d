//! libibverbs' sysfs helpers, which tools use to read device files themselves
//! (`ibv_devinfo` reads `board_id` below `ibv_device::ibdev_path`; librdmacm reads
//! below `ibv_get_sysfs_path()`).

use std::ffi::{c_char, c_int, CStr, CString, OsStr};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::ffi::{guard, minus_one};

/// Where sysfs is: `$SYSFS_PATH` (without trailing slashes) unless the program runs
/// set-uid, else `/sys`.
fn sysfs_path() -> &'static CStr {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: getuid and geteuid cannot fail.
        let setuid = unsafe { libc::getuid() != libc::geteuid() };
        let from_env = std::env::var_os("SYSFS_PATH").filter(|_| !setuid);
        let path = from_env
            .as_deref()
            .map(|p| {
                let bytes = p.as_bytes();
                let end = bytes.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
                bytes[..end].to_vec()
            })
            .unwrap_or_else(|| b"/sys".to_vec());
        CString::new(path).unwrap_or_else(|_| c"/sys".to_owned())
    })
}

/// `ibv_get_sysfs_path`.
pub(crate) extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    guard("ibv_get_sysfs_path", c"/sys".as_ptr(), || {
        sysfs_path().as_ptr()
    })
}

/// Reads `dir/file` into `buf` with one read of at most `buf.len()` bytes: the length
/// of the text read without a final newline, NUL-terminated in `buf`; `EINVAL` when the
/// text and its NUL do not fit.
fn read_file(dir: &OsStr, file: &OsStr, buf: &mut [u8]) -> Result<usize, c_int> {
    let path = PathBuf::from(dir).join(file);
    let mut f = std::fs::File::open(path).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let mut len = f
        .read(buf)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    if len > 0 {
        if buf[len - 1] == b'\n' {
            len -= 1;
            buf[len] = 0;
        } else if len < buf.len() {
            buf[len] = 0;
        } else {
            return Err(libc::EINVAL);
        }
    }
    Ok(len)
}

/// `ibv_read_sysfs_file`: the length read, or -1 with `errno`.
///
/// # Safety
///
/// `dir` and `file` are NULL or NUL-terminated strings; `buf` is NULL or writable for
/// `size` bytes.
pub(crate) unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    minus_one("ibv_read_sysfs_file", || {
        if dir.is_null() || file.is_null() || buf.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: NUL-terminated strings (the caller's promise).
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        // SAFETY: `buf` is writable for `size` bytes (the caller's promise).
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        let n = read_file(
            OsStr::from_bytes(dir.to_bytes()),
            OsStr::from_bytes(file.to_bytes()),
            buf,
        )?;
        Ok(c_int::try_from(n).unwrap_or(c_int::MAX))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_without_its_newline_and_terminated() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("board_id"), b"RNIC0001\n").unwrap();
        let mut buf = [0x55u8; 16];
        let n = read_file(dir.path().as_os_str(), OsStr::new("board_id"), &mut buf).unwrap();
        assert_eq!(&buf[..n + 1], b"RNIC0001\0");
        // Text and NUL must fit.
        std::fs::write(dir.path().join("long"), b"12345678").unwrap();
        let mut small = [0u8; 8];
        assert_eq!(
            read_file(dir.path().as_os_str(), OsStr::new("long"), &mut small),
            Err(libc::EINVAL)
        );
        assert_eq!(
            read_file(dir.path().as_os_str(), OsStr::new("missing"), &mut buf),
            Err(libc::ENOENT)
        );
    }

    #[test]
    fn the_exported_reader_reports_minus_one() {
        let mut buf = [0 as c_char; 8];
        // SAFETY: valid strings and buffer.
        let r = unsafe {
            ibv_read_sysfs_file(c"/nonexistent".as_ptr(), c"x".as_ptr(), buf.as_mut_ptr(), 8)
        };
        assert_eq!(r, -1);
        // SAFETY: NULL is allowed.
        let r =
            unsafe { ibv_read_sysfs_file(std::ptr::null(), c"x".as_ptr(), buf.as_mut_ptr(), 8) };
        assert_eq!(r, -1);
    }

    #[test]
    fn sysfs_is_at_sys_unless_told() {
        // SYSFS_PATH is not set in the test environment (or, if it is, is honoured).
        let p = sysfs_path().to_str().unwrap();
        assert!(!p.ends_with('/') || p == "/");
    }
}
