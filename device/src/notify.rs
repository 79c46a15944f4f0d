//! Telling whoever started rnicd that it is ready: every socket listens, so a client that
//! connects now is served.
//!
//! Two ways, both taken when asked for:
//! - systemd's notification protocol (`Type=notify` units): a datagram `READY=1` to the
//!   unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name written with a
//!   leading `@`), as `sd_notify(3)` sends it; `STOPPING=1` when rnicd stops;
//! - `--ready-fd N`: a line on descriptor N, which is then closed, for scripts and tests
//!   that start rnicd with a pipe (`read` returns once rnicd is ready; end of file without
//!   a line means rnicd exited before).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The line written to `--ready-fd`.
pub const READY_LINE: &str = "ready\n";

/// A descriptor given with `--ready-fd`, taken over by rnicd: checked when rnicd starts,
/// written and closed once it is ready.
#[derive(Debug)]
pub struct ReadyFd(File);

impl ReadyFd {
    /// Takes over descriptor `fd`, which must be open (inherited from the parent); it is
    /// marked close-on-exec so that no child of rnicd keeps it.
    pub fn take(fd: RawFd) -> io::Result<Self> {
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        // SAFETY: F_GETFD only reads the flags of a descriptor number; it fails with
        // EBADF when the number is not open.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above, setting the close-on-exec flag of an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
        // SAFETY: the descriptor is open, and nothing else in rnicd uses it: it was
        // inherited for this purpose and is owned by the File from here on.
        Ok(Self(unsafe { File::from_raw_fd(fd) }))
    }

    /// Writes [`READY_LINE`] and closes the descriptor.
    pub fn signal(mut self) -> io::Result<()> {
        self.0.write_all(READY_LINE.as_bytes())
    }
}

/// The address of `$NOTIFY_SOCKET`'s value: a filesystem path, or an abstract socket
/// name after `@`.
fn notify_address(value: &str) -> io::Result<SocketAddr> {
    match value.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None if value.starts_with('/') => SocketAddr::from_pathname(value),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NOTIFY_SOCKET={value}: neither an absolute path nor @name"),
        )),
    }
}

/// Sends `state` (newline-separated `KEY=VALUE` lines, as `sd_notify(3)` takes them) to
/// the socket `$NOTIFY_SOCKET` names. Returns false if it is not set (rnicd is not a
/// `Type=notify` service).
pub fn sd_notify(state: &str) -> io::Result<bool> {
    let Some(value) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let value = value
        .into_string()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is not UTF-8"))?;
    let address = notify_address(&value)?;
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &address)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn abstract_and_path_addresses() {
        use std::os::linux::net::SocketAddrExt;
        let a = notify_address("@rnic/notify").unwrap();
        assert_eq!(a.as_abstract_name(), Some(&b"rnic/notify"[..]));
        let p = notify_address("/run/systemd/notify").unwrap();
        assert_eq!(
            p.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        assert!(notify_address("relative").is_err());
    }

    #[test]
    fn ready_fd_writes_a_line_and_closes() {
        let mut fds = [0; 2];
        // SAFETY: pipe into an array of two descriptors we own from here on.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the read end is ours.
        let mut reader = unsafe { File::from_raw_fd(fds[0]) };
        ReadyFd::take(fds[1]).unwrap().signal().unwrap();
        let mut got = String::new();
        // End of file: the write end was closed.
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, READY_LINE);
    }

    #[test]
    fn a_closed_descriptor_is_refused() {
        assert!(ReadyFd::take(-1).is_err());
        assert!(ReadyFd::take(1_000_000).is_err());
    }
}
