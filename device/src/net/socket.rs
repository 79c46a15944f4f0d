//! Sockets as every link that carries frames opens them: bound UDP sockets, and the
//! options set the same way on all: buffer sizes, and the kernel's count of datagrams it
//! dropped for want of room (`SO_RXQ_OVFL`).
//!
//! A link whose receive buffer is the kernel's default (208 KiB on most hosts) loses
//! frames whenever a burst (a large READ response, a window of WRITEs) arrives faster than
//! one engine pass drains it; those losses are rnicd's own, not the network's, so every
//! receiving socket asks for [`SOCKET_BUFFER`] through [`size_buffers`].

use std::io;
use std::mem::size_of;
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Socket buffer size asked for (with `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` where allowed,
/// else capped by `net.core.rmem_max`/`wmem_max`): room for the send windows
/// (the requester's `SEND_WINDOW` packets each) of many QPs at once.
pub const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: a c_int option value of the size given, on a descriptor we own.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an integer socket option.
pub(crate) fn getsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a c_int option value and its length, on a descriptor we own.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One direction of a socket's buffering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `SO_RCVBUF`: what arrived and was not read yet.
    Receive,
    /// `SO_SNDBUF`: what was sent and has not left yet.
    Send,
}

impl Direction {
    /// (the option beyond the sysctl cap, the capped option, the cap's sysctl).
    fn options(self) -> (libc::c_int, libc::c_int, &'static str) {
        match self {
            Self::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, "net.core.rmem_max"),
            Self::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, "net.core.wmem_max"),
        }
    }
}

/// Asks for a `direction` buffer of [`SOCKET_BUFFER`] bytes on `fd`: forced (beyond the
/// sysctl cap) where the process may (`CAP_NET_ADMIN`), else as large as the cap allows.
/// Returns what the kernel reports having granted: Linux reports twice the size it was
/// given (the rest is its bookkeeping), so a full grant reads `2 * SOCKET_BUFFER`.
/// Failure is not fatal: the socket keeps the buffer it had.
pub fn size_buffer(fd: RawFd, direction: Direction) -> libc::c_int {
    let (force, capped, _) = direction.options();
    if setsockopt_int(fd, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, capped, SOCKET_BUFFER);
    }
    getsockopt_int(fd, libc::SOL_SOCKET, capped).unwrap_or(0)
}

/// Whether the warning about a capped buffer was given already, per direction: every
/// socket gets the same cap, so once per process says it all.
static WARNED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// Sizes both buffers of a socket that receives frames (`what` names it in the log) with
/// [`size_buffer`], logs what the kernel granted at debug level, and warns once, naming
/// the sysctl to raise, if a buffer got less than asked. Returns (receive, send) as the
/// kernel reports them.
pub fn size_buffers(fd: RawFd, what: &str) -> (libc::c_int, libc::c_int) {
    let granted = [Direction::Receive, Direction::Send].map(|d| (d, size_buffer(fd, d)));
    log::debug!(
        "{what}: receive buffer {} bytes, send buffer {} bytes (as the kernel reports them, \
         twice what it granted; asked {SOCKET_BUFFER})",
        granted[0].1,
        granted[1].1
    );
    for (i, (direction, got)) in granted.into_iter().enumerate() {
        // A full grant reads twice the size asked; under the size asked is under half.
        if got < SOCKET_BUFFER && !WARNED[i].swap(true, Ordering::Relaxed) {
            let (_, _, sysctl) = direction.options();
            log::warn!(
                "{what}: the kernel granted a {} buffer of {} bytes of the {SOCKET_BUFFER} \
                 asked, capped by {sysctl}: a burst larger than that (a message of a few \
                 hundred KiB) is partly lost and must be retransmitted; raise the cap \
                 (sysctl -w {sysctl}={SOCKET_BUFFER}) or give rnicd CAP_NET_ADMIN",
                match direction {
                    Direction::Receive => "receive",
                    Direction::Send => "send",
                },
                got / 2
            );
        }
    }
    (granted[0].1, granted[1].1)
}

/// Asks the kernel to report with every datagram received on `fd` how many it dropped
/// on that socket so far for want of room (`SO_RXQ_OVFL`; read by
/// `net::udp::recv_one`). Failure is not fatal: drops then go uncounted.
pub fn count_drops(fd: RawFd, what: &str) {
    if let Err(e) = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1) {
        log::debug!("{what}: SO_RXQ_OVFL unavailable ({e}): kernel drops are not counted");
    }
}

/// The drops one socket's kernel reported: `SO_RXQ_OVFL` gives, with each datagram
/// queued after a drop, the socket's count since it was opened, a u32 that may wrap.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelDrops {
    reported: u32,
    /// Drops counted so far.
    pub total: u64,
}

impl KernelDrops {
    /// Takes the count a datagram came with (`None`: none came, no drop yet); returns
    /// how many drops are new.
    pub fn update(&mut self, reported: Option<u32>) -> u64 {
        let Some(count) = reported else {
            return 0;
        };
        let new = u64::from(count.wrapping_sub(self.reported));
        self.reported = count;
        self.total += new;
        new
    }
}

/// `addr` as the C library takes it.
pub(crate) fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// A non-blocking UDP socket that `configure` sets options on before it is bound to
/// `addr` (options such as `SO_REUSEADDR` only count if set before `bind`).
pub(crate) fn bound_udp_socket(
    addr: SocketAddrV4,
    configure: impl FnOnce(RawFd) -> io::Result<()>,
) -> io::Result<UdpSocket> {
    // SAFETY: plain socket creation; the descriptor is owned right after.
    let raw = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    configure(raw)?;
    let sa = sockaddr(addr);
    // SAFETY: a sockaddr_in of the size given, on a descriptor we own.
    let r = unsafe {
        libc::bind(
            raw,
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UdpSocket::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// The kernel's cap on buffers a process without CAP_NET_ADMIN may ask for.
    fn sysctl(name: &str) -> libc::c_int {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .expect("a Linux host")
            .trim()
            .parse()
            .expect("a number")
    }

    #[test]
    fn buffers_get_what_was_asked_or_the_sysctl_cap() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = socket.as_raw_fd();
        let (rcv, snd) = size_buffers(fd, "test socket");
        assert_eq!(
            rcv,
            getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap()
        );
        assert_eq!(
            snd,
            getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap()
        );
        let forced = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 4096).is_ok();
        for (got, cap) in [(rcv, sysctl("rmem_max")), (snd, sysctl("wmem_max"))] {
            // Linux doubles what it grants; what it grants is the size asked, or the cap.
            let expected = if forced {
                SOCKET_BUFFER
            } else {
                SOCKET_BUFFER.min(cap)
            };
            assert_eq!(got, 2 * expected, "forced {forced}, cap {cap}");
        }
    }

    #[test]
    fn kernel_drop_counts_add_up_across_the_wrap() {
        let mut d = KernelDrops::default();
        assert_eq!(d.update(None), 0);
        assert_eq!(d.update(Some(5)), 5);
        assert_eq!(d.update(Some(5)), 0);
        assert_eq!(d.update(Some(u32::MAX)), u64::from(u32::MAX) - 5);
        assert_eq!(d.update(Some(2)), 3);
        assert_eq!(d.total, u64::from(u32::MAX) + 3);
    }

    #[test]
    fn tcp_sockets_are_sized_alike() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = listener.as_raw_fd();
        let (rcv, _) = size_buffers(fd, "test listener");
        assert!(rcv >= 2 * SOCKET_BUFFER.min(sysctl("rmem_max")), "{rcv}");
    }
}
