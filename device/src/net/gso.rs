//! Many datagrams per system call on the UDP uplink: Linux's UDP generic segmentation
//! offload (`UDP_SEGMENT`, since 4.18) on the sending side and UDP receive coalescing
//! (`UDP_GRO`, since 5.0) on the receiving side.
//!
//! A message of many MTU-sized packets becomes a run of equal-sized datagrams of one flow
//! (the first packet carries a RETH or the message's only one is shorter, so runs start
//! after it). The uplink collects such a run in a [`Batch`] and hands it to the kernel as
//! one buffer with a segment size: the kernel cuts it into datagrams as late as it can
//! (on loopback, not at all when the receiving socket coalesces), so the per-datagram
//! cost of a system call, a route lookup and a socket wake-up is paid once per run. A
//! receiving socket with `UDP_GRO` gets such a run back as one buffer with the segment
//! size in a control message, and cuts it into the datagrams it was made of; datagrams
//! that came one by one arrive as before. On the wire nothing changes but the IPv4
//! identification of the segments after the first of a run (the kernel numbers them 1,
//! 2, ...; rnicd receivers never read it, see [`super::udp`]).

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use super::socket::{setsockopt_int, sockaddr};

/// `SOL_UDP` option: the segment size of the datagram sent (a control message of a u16).
const UDP_SEGMENT: libc::c_int = 103;
/// `SOL_UDP` option: coalesce received datagrams of a flow (the segment size comes in a
/// control message of an int).
pub const UDP_GRO: libc::c_int = 104;

/// Most segments in one send (Linux's `UDP_MAX_SEGMENTS` was 64 before 6.2, 128 since).
pub const MAX_SEGMENTS: usize = 64;

/// The most bytes of UDP payload in one send: an IPv4 datagram's limit.
pub const MAX_BATCH_BYTES: usize = 65_535 - 20 - 8;

/// What makes datagrams one run: the same flow to the same place with the same marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunKey {
    /// Source address and port (the flow's send socket).
    pub src: (Ipv4Addr, u16),
    /// Where the datagrams go.
    pub to: SocketAddrV4,
    /// IPv4 TTL.
    pub ttl: u8,
    /// IPv4 TOS.
    pub tos: u8,
}

/// Datagrams of one run, back to back, waiting for one send.
#[derive(Debug)]
pub struct Batch {
    /// The run they belong to.
    pub key: RunKey,
    /// The size of every datagram but the last (which may be shorter).
    pub segment: usize,
    /// How many datagrams.
    pub count: usize,
    /// The last datagram was shorter than `segment`: nothing more may follow it.
    closed: bool,
    /// The datagrams' bytes.
    pub bytes: Vec<u8>,
}

impl Batch {
    /// A batch of one datagram, `payload`, reusing `bytes`' allocation.
    pub fn new(key: RunKey, payload: &[u8], mut bytes: Vec<u8>) -> Self {
        bytes.clear();
        bytes.extend_from_slice(payload);
        Self {
            key,
            segment: payload.len(),
            count: 1,
            closed: false,
            bytes,
        }
    }

    /// Appends `payload` if it can go in the same send: same run, no longer than the
    /// segment size, room left; returns whether it did.
    pub fn join(&mut self, key: &RunKey, payload: &[u8]) -> bool {
        if self.closed
            || self.key != *key
            || payload.len() > self.segment
            || payload.is_empty()
            || self.count >= MAX_SEGMENTS
            || self.bytes.len() + payload.len() > MAX_BATCH_BYTES
        {
            return false;
        }
        self.closed = payload.len() < self.segment;
        self.bytes.extend_from_slice(payload);
        self.count += 1;
        true
    }

    /// The datagrams, one by one (for a socket that cannot segment).
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        datagrams(&self.bytes, self.segment)
    }
}

/// The datagrams a run of `segment`-byte datagrams (the last may be shorter) is made of,
/// back to back in `bytes`; an empty `bytes` is one empty datagram.
pub fn datagrams(bytes: &[u8], segment: usize) -> impl Iterator<Item = &[u8]> {
    let empty = bytes.is_empty().then_some(bytes);
    empty.into_iter().chain(bytes.chunks(segment.max(1)))
}

/// Sends `bytes` to `to` as datagrams of `segment` bytes (the last may be shorter), in
/// one system call.
pub fn send_segments(
    socket: &UdpSocket,
    bytes: &[u8],
    segment: usize,
    to: SocketAddrV4,
) -> io::Result<()> {
    let addr = sockaddr(to);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let gso_size = u16::try_from(segment)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment over 64 KiB"))?;
    // One control message of a u16 (u64s for cmsghdr's alignment).
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&addr as *const libc::sockaddr_in as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is arithmetic on a constant.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as _;
    // SAFETY: the control buffer holds CMSG_SPACE(2) bytes (32 >= 24), so the first header
    // and its two data bytes are inside it; the data is written unaligned.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), gso_size);
    }
    // SAFETY: every pointer in `msg` points at live buffers of the sizes it gives; the
    // kernel only reads them.
    let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to coalesce datagrams received on `fd`; false if it cannot (then
/// every datagram arrives on its own, which works the same, only slower).
pub fn enable_gro(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok()
}

/// Whether a failed segmented send means the path cannot segment at all (an old kernel,
/// a device or route without checksum offload or with IPsec), rather than a full buffer
/// or a datagram too large.
pub fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> RunKey {
        RunKey {
            src: (Ipv4Addr::new(127, 0, 0, 1), port),
            to: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791),
            ttl: 64,
            tos: 0,
        }
    }

    #[test]
    fn a_run_takes_equal_datagrams_then_one_shorter_and_stops() {
        let mut b = Batch::new(key(1), &[1; 100], Vec::new());
        assert!(b.join(&key(1), &[2; 100]));
        assert!(!b.join(&key(1), &[3; 101]), "longer than the segment");
        assert!(!b.join(&key(2), &[3; 100]), "another flow");
        assert!(b.join(&key(1), &[4; 40]));
        assert!(!b.join(&key(1), &[5; 40]), "after a shorter one");
        assert_eq!(b.count, 3);
        let d: Vec<_> = b.datagrams().collect();
        assert_eq!(d, vec![&[1u8; 100][..], &[2; 100][..], &[4; 40][..]]);
    }

    #[test]
    fn a_run_stops_at_the_segment_count_and_the_datagram_limit() {
        let mut b = Batch::new(key(1), &[0; 8], Vec::new());
        while b.join(&key(1), &[0; 8]) {}
        assert_eq!(b.count, MAX_SEGMENTS);
        let big = vec![0u8; 4112];
        let mut b = Batch::new(key(1), &big, Vec::new());
        while b.join(&key(1), &big) {}
        assert_eq!(b.count, MAX_BATCH_BYTES / 4112);
        assert!(b.bytes.len() <= MAX_BATCH_BYTES);
    }
}
