//! How raw Ethernet frames reach a QEMU network segment ([`crate::net::eth`]): one UDP
//! datagram per frame (QEMU `-netdev dgram`, and `-netdev socket,mcast=` for a hub
//! shared by several members), or a TCP stream in which each frame is preceded by its
//! length as a 4-byte big-endian number (QEMU `-netdev stream` and `-netdev
//! socket,listen=|connect=`). Every socket is non-blocking: nothing here ever waits. Every
//! socket's buffers are sized by [`crate::net::socket::size_buffers`], as the `udp:`
//! network's are, and the UDP ones report the kernel's drops ([`Link::kernel_drops`]).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{
    Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, ToSocketAddrs, UdpSocket,
};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use crate::net::socket::{
    bound_udp_socket, count_drops, setsockopt_int, size_buffers, sockaddr, KernelDrops,
};
use crate::net::udp::recv_one;

/// The largest frame a link carries (QEMU's own limit is 69,632 bytes; no IPv4 frame is
/// longer than 14 + 65,535).
pub const MAX_FRAME: usize = 65_536 + 4_096;
/// Bytes of frames a stream keeps queued for a slow peer; past that frames are dropped,
/// as from a full NIC queue.
const MAX_STREAM_BACKLOG: usize = 4 << 20;
/// Time between connection attempts of `eth:connect`.
const RECONNECT: Duration = Duration::from_millis(250);
/// Length prefix of a stream frame.
const PREFIX: usize = 4;

/// A way to put frames on a segment and take them off.
pub trait Link: Send {
    /// A descriptor that is readable when [`Link::recv`] or [`Link::poll`] has work.
    fn fd(&self) -> RawFd;
    /// Sends one frame. `WouldBlock`: no room now; `NotConnected`: no peer yet.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Receives one frame into `out` (replacing its contents); `false` if none waits.
    fn recv(&mut self, out: &mut Vec<u8>) -> io::Result<bool>;
    /// Housekeeping at `now`: accepting, (re)connecting, flushing what waits to be sent.
    fn poll(&mut self, _now: Instant) {}
    /// When [`Link::poll`] must run next even if [`Link::fd`] stays quiet.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Frames the host's kernel dropped before they could be received (the socket's
    /// buffer was full), since the link was opened, as far as the kernel reports them.
    fn kernel_drops(&self) -> u64 {
        0
    }
    /// What it is, for logs.
    fn describe(&self) -> String;
}

/// A non-blocking UDP socket bound to `addr`, with `SO_REUSEADDR` if `shared`, its
/// buffers sized and the kernel's drops reported.
fn udp_socket(addr: SocketAddrV4, shared: bool) -> io::Result<UdpSocket> {
    bound_udp_socket(addr, |raw| {
        if shared {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        }
        let what = format!("ethernet port ({addr})");
        size_buffers(raw, &what);
        count_drops(raw, &what);
        Ok(())
    })
}

/// One frame per UDP datagram: `eth:dgram` (to one peer) and `eth:mcast` (to a group).
pub struct DatagramLink {
    socket: UdpSocket,
    /// Where datagrams are received, [`MAX_FRAME`] long: receiving straight into the
    /// caller's buffer would zero its tail again for every frame.
    rx: Vec<u8>,
    to: SocketAddrV4,
    name: String,
    /// What the kernel dropped on the socket.
    drops: KernelDrops,
}

impl DatagramLink {
    /// `eth:dgram`: bound to `local`, sending to `remote`.
    pub fn dgram(local: SocketAddrV4, remote: SocketAddrV4) -> io::Result<Self> {
        Ok(Self {
            socket: udp_socket(local, false)?,
            rx: vec![0; MAX_FRAME],
            to: remote,
            name: format!("dgram {local} -> {remote}"),
            drops: KernelDrops::default(),
        })
    }

    /// `eth:mcast`: a member of `group` (bound to it, with `SO_REUSEADDR` so that other
    /// members on this host bind it too), sending to it, and hearing its own frames
    /// (`IP_MULTICAST_LOOP`, which other members on this host need; the Ethernet port
    /// ignores them).
    pub fn mcast(group: SocketAddrV4) -> io::Result<Self> {
        let socket = udp_socket(group, true)?;
        socket.join_multicast_v4(group.ip(), &Ipv4Addr::UNSPECIFIED)?;
        socket.set_multicast_loop_v4(true)?;
        Ok(Self {
            socket,
            rx: vec![0; MAX_FRAME],
            to: group,
            name: format!("mcast {group}"),
            drops: KernelDrops::default(),
        })
    }
}

impl Link for DatagramLink {
    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.socket.send_to(frame, self.to).map(|_| ())
    }

    fn recv(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
        match recv_one(&self.socket, &mut self.rx) {
            Ok(r) => {
                // A longer datagram is cut to the buffer, and fails the port's checks.
                out.clear();
                out.extend_from_slice(&self.rx[..r.len.min(MAX_FRAME)]);
                self.drops.update(r.kernel_drops);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn kernel_drops(&self) -> u64 {
        self.drops.total
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// How a stream finds its peer.
enum Peer {
    /// `eth:listen`: accepts; a newer connection replaces the current one (the peer
    /// restarted).
    Listen(TcpListener),
    /// `eth:connect`: connects, and again [`RECONNECT`] after each failure or loss.
    Connect {
        addr: SocketAddr,
        /// A connection being set up (non-blocking connect in progress).
        connecting: Option<TcpStream>,
        /// When to try again.
        retry_at: Instant,
    },
}

/// Epoll tokens of a stream link.
const LISTENER: u64 = 1;
const CONNECTION: u64 = 2;

/// Frames on a TCP stream, each after its 4-byte big-endian length.
pub struct StreamLink {
    peer: Peer,
    conn: Option<TcpStream>,
    /// Bytes received and not yet a whole frame.
    rx: Vec<u8>,
    /// Bytes to send (prefixes and frames) that the socket did not take yet.
    tx: VecDeque<u8>,
    /// What `fd` is: the listener, the connection, the connection being set up.
    epoll: Epoll,
    name: String,
    /// Connections made (or accepted) so far.
    pub connections: u64,
}

impl StreamLink {
    /// `eth:listen`: listens on `addr`.
    pub fn listen(addr: &str) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let name = format!("listen {}", listener.local_addr()?);
        // Accepted connections inherit the listener's buffers.
        size_buffers(listener.as_raw_fd(), &format!("ethernet port ({name})"));
        let link = Self::new(Peer::Listen(listener), name)?;
        if let Peer::Listen(l) = &link.peer {
            link.watch(ControlOperation::Add, l.as_raw_fd(), LISTENER, EventSet::IN)?;
        }
        Ok(link)
    }

    /// `eth:connect`: connects to `addr` (now, and again whenever the peer goes away).
    pub fn connect(addr: &str) -> io::Result<Self> {
        let resolved = addr.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{addr} has no address"))
        })?;
        let mut link = Self::new(
            Peer::Connect {
                addr: resolved,
                connecting: None,
                retry_at: Instant::now(),
            },
            format!("connect {resolved}"),
        )?;
        link.poll(Instant::now());
        Ok(link)
    }

    fn new(peer: Peer, name: String) -> io::Result<Self> {
        Ok(Self {
            peer,
            conn: None,
            rx: Vec::new(),
            tx: VecDeque::new(),
            epoll: Epoll::new()?,
            name,
            connections: 0,
        })
    }

    fn watch(
        &self,
        op: ControlOperation,
        fd: RawFd,
        token: u64,
        events: EventSet,
    ) -> io::Result<()> {
        self.epoll.ctl(op, fd, EpollEvent::new(events, token))
    }

    /// Makes `stream` the connection, dropping (and replacing) any earlier one.
    fn attach(&mut self, stream: TcpStream) {
        if self.conn.is_some() {
            log::info!(
                "ethernet port ({}): a new connection replaces the current one",
                self.name
            );
            self.detach("replaced");
        }
        let setup = stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| {
                self.watch(
                    ControlOperation::Add,
                    stream.as_raw_fd(),
                    CONNECTION,
                    EventSet::IN,
                )
            });
        if let Err(e) = setup {
            log::warn!(
                "ethernet port ({}): cannot use the connection: {e}",
                self.name
            );
            return;
        }
        log::info!(
            "ethernet port ({}): connected to {}",
            self.name,
            stream
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into())
        );
        self.connections += 1;
        self.conn = Some(stream);
    }

    /// Drops the connection (and what it had half received or not yet sent).
    fn detach(&mut self, why: &str) {
        if let Some(c) = self.conn.take() {
            let _ = self.watch(
                ControlOperation::Delete,
                c.as_raw_fd(),
                CONNECTION,
                EventSet::IN,
            );
            log::info!("ethernet port ({}): connection closed ({why})", self.name);
        }
        self.rx.clear();
        self.tx.clear();
        if let Peer::Connect { retry_at, .. } = &mut self.peer {
            *retry_at = Instant::now() + RECONNECT;
        }
    }

    /// Writes what waits; watches for room while some still does.
    fn flush(&mut self) {
        let Some(conn) = &mut self.conn else {
            return;
        };
        while !self.tx.is_empty() {
            let (head, _) = self.tx.as_slices();
            match conn.write(head) {
                Ok(0) => break,
                Ok(n) => {
                    self.tx.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.detach(&format!("send failed: {e}"));
                    return;
                }
            }
        }
        let events = if self.tx.is_empty() {
            EventSet::IN
        } else {
            EventSet::IN | EventSet::OUT
        };
        let fd = conn.as_raw_fd();
        let _ = self.watch(ControlOperation::Modify, fd, CONNECTION, events);
    }

    /// Starts or completes a connection attempt of `eth:connect`.
    fn progress_connect(&mut self, now: Instant) {
        let Peer::Connect {
            addr,
            connecting,
            retry_at,
        } = &mut self.peer
        else {
            return;
        };
        if let Some(s) = connecting {
            match s.take_error() {
                Ok(None) if s.peer_addr().is_ok() => {
                    let s = connecting.take().expect("checked");
                    let _ = self.epoll.ctl(
                        ControlOperation::Delete,
                        s.as_raw_fd(),
                        EpollEvent::new(EventSet::OUT, CONNECTION),
                    );
                    self.attach(s);
                }
                Ok(None) => {} // still in progress
                Ok(Some(e)) | Err(e) => {
                    let s = connecting.take().expect("checked");
                    let _ = self.epoll.ctl(
                        ControlOperation::Delete,
                        s.as_raw_fd(),
                        EpollEvent::new(EventSet::OUT, CONNECTION),
                    );
                    log::debug!("ethernet port: connecting to {addr} failed: {e}");
                    *retry_at = now + RECONNECT;
                }
            }
            return;
        }
        if self.conn.is_some() || now < *retry_at {
            return;
        }
        *retry_at = now + RECONNECT;
        match start_connect(*addr) {
            Ok(s) => {
                let fd = s.as_raw_fd();
                *connecting = Some(s);
                let _ = self.epoll.ctl(
                    ControlOperation::Add,
                    fd,
                    EpollEvent::new(EventSet::OUT, CONNECTION),
                );
            }
            Err(e) => log::debug!("ethernet port: cannot connect to {addr}: {e}"),
        }
    }

    /// Accepts what waits on `eth:listen`'s socket.
    fn accept(&mut self) {
        loop {
            let Peer::Listen(l) = &self.peer else {
                return;
            };
            match l.accept() {
                Ok((s, _)) => self.attach(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("ethernet port ({}): accept failed: {e}", self.name);
                    return;
                }
            }
        }
    }

    /// A whole frame at the start of `rx`, if one is there: moved into `out`.
    fn take_frame(&mut self, out: &mut Vec<u8>) -> Result<bool, usize> {
        let Some(prefix) = self.rx.first_chunk::<PREFIX>() else {
            return Ok(false);
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > MAX_FRAME {
            return Err(len);
        }
        if self.rx.len() < PREFIX + len {
            return Ok(false);
        }
        out.clear();
        out.extend_from_slice(&self.rx[PREFIX..PREFIX + len]);
        self.rx.drain(..PREFIX + len);
        Ok(true)
    }
}

/// A TCP socket with a non-blocking connection attempt to `addr` under way.
fn start_connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let SocketAddr::V4(v4) = addr else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "only IPv4 peers are supported",
        ));
    };
    // SAFETY: plain socket creation; the descriptor is owned right after.
    let raw = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let stream = unsafe { TcpStream::from_raw_fd(raw) };
    // Before connecting: the window scale is agreed on in the handshake.
    size_buffers(raw, &format!("ethernet port (connect {addr})"));
    let sa = sockaddr(v4);
    // SAFETY: a sockaddr_in of the size given, on a descriptor we own.
    let r = unsafe {
        libc::connect(
            raw,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(stream)
}

impl Link for StreamLink {
    fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.conn.is_none() {
            return Err(io::ErrorKind::NotConnected.into());
        }
        if self.tx.len() + PREFIX + frame.len() > MAX_STREAM_BACKLOG {
            self.flush();
            if self.tx.len() + PREFIX + frame.len() > MAX_STREAM_BACKLOG {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        self.tx.extend((frame.len() as u32).to_be_bytes());
        self.tx.extend(frame);
        self.flush();
        Ok(())
    }

    fn recv(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
        loop {
            match self.take_frame(out) {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(len) => {
                    self.detach(&format!(
                        "a frame length of {len} bytes: not a stream of length-prefixed \
                         frames (is the peer a QEMU -netdev stream/socket?)"
                    ));
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "bad frame length",
                    ));
                }
            }
            let Some(conn) = &mut self.conn else {
                return Ok(false);
            };
            let at = self.rx.len();
            self.rx.resize(at + 64 * 1024, 0);
            match conn.read(&mut self.rx[at..]) {
                Ok(0) => {
                    self.rx.truncate(at);
                    self.detach("the peer closed it");
                    return Ok(false);
                }
                Ok(n) => self.rx.truncate(at + n),
                Err(e) => {
                    self.rx.truncate(at);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return Ok(false),
                        io::ErrorKind::Interrupted => {}
                        _ => {
                            self.detach(&format!("receive failed: {e}"));
                            return Ok(false);
                        }
                    }
                }
            }
        }
    }

    fn poll(&mut self, now: Instant) {
        self.accept();
        self.progress_connect(now);
        if !self.tx.is_empty() {
            self.flush();
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        match &self.peer {
            Peer::Connect {
                connecting: None,
                retry_at,
                ..
            } if self.conn.is_none() => Some(*retry_at),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::socket::getsockopt_int;

    /// A loopback address with a port no other test uses.
    fn free_addr() -> SocketAddrV4 {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        match s.local_addr().unwrap() {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(_) => unreachable!("bound to IPv4"),
        }
    }

    fn drain(link: &mut DatagramLink) -> u64 {
        let mut frame = Vec::new();
        let mut n = 0;
        while link.recv(&mut frame).unwrap() {
            n += 1;
        }
        n
    }

    #[test]
    fn datagram_sockets_are_sized_and_count_what_the_kernel_dropped() {
        let (local, remote) = (free_addr(), free_addr());
        let mut link = DatagramLink::dgram(local, remote).unwrap();
        let fd = link.socket.as_raw_fd();
        let rcvbuf = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        assert!(rcvbuf > 212_992, "sized beyond the default: {rcvbuf}");
        // A buffer of a few datagrams, flooded before anything is read.
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 * 1024).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent = 200;
        for _ in 0..sent {
            sender.send_to(&[0x55; 1400], local).unwrap();
        }
        let received = drain(&mut link);
        assert!(received < sent, "the buffer held {received} of {sent}");
        // The count comes with the next datagram queued after the drops.
        sender.send_to(&[0x55; 1400], local).unwrap();
        assert_eq!(drain(&mut link), 1);
        // On loopback every datagram not received was dropped by the receiving socket.
        assert_eq!(link.kernel_drops(), sent - received);
    }
}
