//! What the machine itself can do, measured in the same process run as the RDMA figures:
//! single-thread memcpy (the limit for two functions of one rnicd, whose data path is a
//! copy between two guest memories) and a raw UDP socket pair on loopback (the limit for
//! two rnicd, whose packets are UDP datagrams); docs/performance.md says what they bound.
//!
//! Both UDP ends busy-poll non-blocking sockets, as rnicd's engine polls while it has
//! work, so the comparison is between like and like rather than against scheduler
//! wake-ups.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::stats::{mib_per_s, Latency};

/// Baseline figures for one message size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Baseline {
    /// Bytes per copy.
    pub memcpy_bytes: usize,
    /// Single-thread memcpy bandwidth, MiB/s.
    pub memcpy_mib_s: f64,
    /// Bytes per datagram (the message size, at most one MTU, as one RoCE packet carries).
    pub udp_datagram: usize,
    /// Loopback UDP throughput with datagrams of that size, MiB/s of payload received.
    pub udp_mib_s: f64,
    /// Half the round trip of a loopback UDP ping-pong with such datagrams.
    pub udp_half_rtt: Latency,
}

/// Page-aligned bytes, as guest memory is.
struct PageBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuffer {
    fn new(len: usize, fill: u8) -> Self {
        let storage = vec![fill; len + 4096];
        let start = storage.as_ptr().align_offset(4096);
        Self {
            storage,
            start,
            len,
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Measures single-thread memcpy of `size` bytes, repeated for about `time`; MiB/s.
///
/// Both buffers are page-aligned, as the guest memories rnicd copies between are: two
/// heap blocks allocated one after the other sit a few bytes apart modulo 4 KiB, which
/// makes the CPU's string copy falsely detect overlap and run an order of magnitude
/// slower than memcpy can.
pub fn memcpy_mib_s(size: usize, time: Duration) -> f64 {
    let size = size.max(1);
    let src = PageBuffer::new(size, 0x5a);
    let mut dst = PageBuffer::new(size, 0);
    // Warm the caches and the pages the way a repeated transfer finds them.
    dst.bytes_mut().copy_from_slice(src.bytes());
    let mut copies = 0u64;
    let start = Instant::now();
    loop {
        for _ in 0..16 {
            dst.bytes_mut()
                .copy_from_slice(std::hint::black_box(src.bytes()));
            std::hint::black_box(dst.bytes_mut());
        }
        copies += 16;
        if start.elapsed() >= time {
            break;
        }
    }
    mib_per_s(copies * size as u64, start.elapsed())
}

const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// A non-blocking loopback socket with large buffers (forced where the caller may, as
/// rnicd does as root).
fn loopback_socket() -> io::Result<UdpSocket> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.set_nonblocking(true)?;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        let size = &SOCKET_BUFFER as *const libc::c_int as *const libc::c_void;
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: setsockopt reads `len` bytes at `size`, a live c_int.
        let forced =
            unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, force, size, len) } == 0;
        if !forced {
            // SAFETY: as above.
            unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, plain, size, len) };
        }
    }
    Ok(s)
}

fn connected_pair() -> io::Result<(UdpSocket, UdpSocket)> {
    let a = loopback_socket()?;
    let b = loopback_socket()?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    Ok((a, b))
}

/// Loopback UDP throughput: one thread sends `datagram`-byte datagrams for `time` as fast
/// as the socket takes them, another receives; MiB/s of payload that arrived.
pub fn udp_mib_s(datagram: usize, time: Duration) -> io::Result<f64> {
    let (tx, rx) = connected_pair()?;
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let receiver = {
        let stop = stop.clone();
        let received = received.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                match rx.recv(&mut buf) {
                    Ok(n) => {
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(_) => break,
                }
            }
        })
    };
    let payload = vec![0xa5u8; datagram];
    let start = Instant::now();
    let mut at_start = None;
    // Past `time`, it goes on until the receiver counted something after the warm-up: on
    // a busy machine its thread may not have run at all in a short window.
    let counted = |at: &Option<(Instant, u64)>| {
        at.is_some_and(|(_, b0)| received.load(Ordering::Relaxed) > b0)
    };
    while start.elapsed() < time
        || (!counted(&at_start) && start.elapsed() < time + PINGPONG_PATIENCE)
    {
        match tx.send(&payload) {
            Ok(_) => {}
            // Full buffers: the receiver is the bottleneck, which is what is measured.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            // Loopback refuses nothing else; a refused datagram is lost like a dropped one.
            Err(_) => {}
        }
        if at_start.is_none() && start.elapsed() >= time / 10 {
            // The first tenth warms up; count from here.
            at_start = Some((Instant::now(), received.load(Ordering::Relaxed)));
        }
    }
    let end = (Instant::now(), received.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    let _ = receiver.join();
    let (t0, b0) = at_start.unwrap_or((start, 0));
    Ok(mib_per_s(end.1 - b0, end.0 - t0))
}

/// Loopback UDP ping-pong of `datagram`-byte datagrams, `iters` round trips after a
/// warm-up; half of each round trip.
pub fn udp_half_rtt(datagram: usize, iters: usize) -> io::Result<Latency> {
    let (a, b) = connected_pair()?;
    let total = iters + iters / 10 + 1;
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..total {
            let n = spin_recv(&b, &mut buf)?;
            spin_send(&b, &buf[..n])?;
        }
        Ok(())
    });
    let payload = vec![0x3cu8; datagram];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..total {
        let t = Instant::now();
        spin_send(&a, &payload)?;
        spin_recv(&a, &mut buf)?;
        if i >= total - iters {
            samples.push(t.elapsed() / 2);
        }
    }
    echo.join()
        .map_err(|_| io::Error::other("the UDP echo thread panicked"))??;
    Ok(Latency::of(&mut samples))
}

/// Longest a ping-pong end waits for its peer before it reports the baseline broken.
const PINGPONG_PATIENCE: Duration = Duration::from_secs(5);

fn spin_recv(s: &UdpSocket, buf: &mut [u8]) -> io::Result<usize> {
    let start = Instant::now();
    loop {
        match s.recv(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if start.elapsed() > PINGPONG_PATIENCE {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "UDP ping-pong baseline: a datagram on loopback was lost",
                    ));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
}

fn spin_send(s: &UdpSocket, data: &[u8]) -> io::Result<()> {
    loop {
        match s.send(data) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// Every baseline for messages of `size` bytes over a path MTU of `mtu` bytes.
pub fn measure(size: usize, mtu: usize, time: Duration, pingpongs: usize) -> io::Result<Baseline> {
    let datagram = size.clamp(1, mtu);
    Ok(Baseline {
        memcpy_bytes: size,
        memcpy_mib_s: memcpy_mib_s(size, time),
        udp_datagram: datagram,
        udp_mib_s: udp_mib_s(datagram, time)?,
        udp_half_rtt: udp_half_rtt(datagram, pingpongs)?,
    })
}

/// Each figure's median over several measurements (`all` not empty).
pub fn median(all: &[Baseline]) -> Baseline {
    let mid = |f: &dyn Fn(&Baseline) -> f64| {
        let mut v: Vec<f64> = all.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut half_rtts: Vec<Latency> = all.iter().map(|b| b.udp_half_rtt).collect();
    half_rtts.sort_by(|x, y| x.median_us.total_cmp(&y.median_us));
    Baseline {
        memcpy_bytes: all[0].memcpy_bytes,
        memcpy_mib_s: mid(&|b| b.memcpy_mib_s),
        udp_datagram: all[0].udp_datagram,
        udp_mib_s: mid(&|b| b.udp_mib_s),
        udp_half_rtt: half_rtts[half_rtts.len() / 2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_measure_something() {
        let b = measure(4096, 4096, Duration::from_millis(30), 200).unwrap();
        assert!(b.memcpy_mib_s > 0.0);
        assert!(b.udp_mib_s > 0.0);
        assert_eq!(b.udp_datagram, 4096);
        assert_eq!(b.udp_half_rtt.samples, 200);
        assert!(b.udp_half_rtt.min_us > 0.0);
        assert!(b.udp_half_rtt.min_us <= b.udp_half_rtt.max_us);
        // Messages above the MTU are measured with MTU-sized datagrams.
        assert_eq!(
            measure(1 << 20, 1024, Duration::from_millis(5), 5)
                .unwrap()
                .udp_datagram,
            1024
        );
    }
}
