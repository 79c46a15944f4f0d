//! A hostile vfio-user client and the bystanders it must not reach: for the tests that
//! show what one VMM can and cannot do to rnicd and to the other functions.
//!
//! [`Client`] speaks vfio-user over a real socket with real descriptors (`SCM_RIGHTS`),
//! and sends whatever a test asks, well-formed or not. [`Traffic`] runs verified RDMA
//! traffic between two other functions while it does. [`Usage`] reads what rnicd holds.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rnic_abi::vfio_user::{
    DmaMap, Header, RegionInfo, SetIrqs, Version, CMD_DEVICE_GET_REGION_INFO, CMD_DEVICE_SET_IRQS,
    CMD_DMA_MAP, CMD_VERSION, DMA_MAP_READ, DMA_MAP_WRITE, FLAG_ERROR, FLAG_REPLY, HEADER_SIZE,
    IRQ_MSIX,
};
use rnic_device::vfio::server::{recv_with_fds, send_with_fds};
use zerocopy::{FromBytes, IntoBytes};

use crate::verbs_pair::{self, PairOptions};
use crate::Rnicd;

/// A reply as it came.
#[derive(Debug)]
pub struct Reply {
    /// Its header.
    pub header: Header,
    /// Its body.
    pub body: Vec<u8>,
    /// Descriptors that came with it.
    pub fds: Vec<File>,
}

impl Reply {
    /// The errno of an error reply; `None` for a success.
    pub fn errno(&self) -> Option<i32> {
        (self.header.flags & FLAG_ERROR != 0).then_some(self.header.error as i32)
    }
}

/// A vfio-user client that sends what it is told.
pub struct Client {
    /// The socket.
    pub stream: UnixStream,
    next_id: u16,
}

impl Client {
    /// Connects to `path` (no negotiation).
    pub fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Self { stream, next_id: 1 }
    }

    /// A client on a connected `stream` (a second half of another client's socket, say).
    pub fn from_stream(stream: UnixStream) -> Self {
        Self { stream, next_id: 1 }
    }

    /// Connects and negotiates as QEMU does.
    pub fn attach(path: &Path) -> Self {
        let mut c = Self::connect(path);
        let mut body = Version { major: 0, minor: 0 }.as_bytes().to_vec();
        body.extend_from_slice(b"{\"capabilities\":{\"max_msg_fds\":16}}\0");
        let r = c.call(CMD_VERSION, &body, &[]);
        assert_eq!(r.errno(), None, "VERSION refused");
        c
    }

    /// The bytes of a command message (header with the right size, then `body`).
    pub fn message(&mut self, command: u16, body: &[u8], flags: u32) -> Vec<u8> {
        let header = Header {
            message_id: self.next_id,
            command,
            message_size: (HEADER_SIZE + body.len()) as u32,
            flags,
            error: 0,
        };
        self.next_id = self.next_id.wrapping_add(1);
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(body);
        bytes
    }

    /// Sends `bytes` with `fds` in one `sendmsg` (then the rest of the bytes without).
    pub fn send_raw(&mut self, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
        let mut sent = 0;
        let mut with = fds;
        while sent < bytes.len() {
            sent += send_with_fds(self.stream.as_raw_fd(), &bytes[sent..], with, 0)?;
            with = &[];
        }
        Ok(())
    }

    /// Sends a command.
    pub fn send(&mut self, command: u16, body: &[u8], fds: &[RawFd]) {
        let m = self.message(command, body, 0);
        self.send_raw(&m, fds).expect("send");
    }

    /// Reads one reply (panics if none comes within the read timeout).
    pub fn recv(&mut self) -> Reply {
        self.try_recv().expect("a reply")
    }

    /// Reads one reply; `None` if the connection ended.
    pub fn try_recv(&mut self) -> Option<Reply> {
        let mut head = [0u8; HEADER_SIZE];
        let mut fds = Vec::new();
        let mut got = 0;
        while got < HEADER_SIZE {
            let (n, _) = recv_with_fds(self.stream.as_raw_fd(), &mut head[got..], &mut fds).ok()?;
            if n == 0 {
                return None;
            }
            got += n;
        }
        let header = Header::read_from_bytes(&head).ok()?;
        let mut body = vec![0u8; (header.message_size as usize).saturating_sub(HEADER_SIZE)];
        self.stream.read_exact(&mut body).ok()?;
        assert_ne!(header.flags & FLAG_REPLY, 0, "a reply");
        Some(Reply { header, body, fds })
    }

    /// Sends a command and reads its reply.
    pub fn call(&mut self, command: u16, body: &[u8], fds: &[RawFd]) -> Reply {
        self.send(command, body, fds);
        self.recv()
    }

    /// DMA_MAP of `size` bytes of `fd` from `offset` at `iova`, read-write; the errno of
    /// a refusal.
    pub fn dma_map(
        &mut self,
        fd: Option<RawFd>,
        iova: u64,
        size: u64,
        offset: u64,
    ) -> Result<(), i32> {
        let body = DmaMap {
            argsz: 32,
            flags: DMA_MAP_READ | DMA_MAP_WRITE,
            offset,
            address: iova,
            size,
        };
        let fds: Vec<RawFd> = fd.into_iter().collect();
        match self.call(CMD_DMA_MAP, body.as_bytes(), &fds).errno() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// SET_IRQS of MSI-X vectors `start..start + fds.len()` (or `count` without fds) with
    /// `flags`; the errno of a refusal.
    pub fn set_irqs(
        &mut self,
        flags: u32,
        start: u32,
        count: u32,
        fds: &[RawFd],
    ) -> Result<(), i32> {
        let body = SetIrqs {
            argsz: 20,
            flags,
            index: IRQ_MSIX,
            start,
            count,
        };
        match self.call(CMD_DEVICE_SET_IRQS, body.as_bytes(), fds).errno() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// GET_REGION_INFO of `index` with room for its capabilities: the info and the
    /// descriptor that came with it.
    pub fn region_info(&mut self, index: u32) -> (RegionInfo, Option<File>) {
        let ask = RegionInfo {
            argsz: 256,
            index,
            ..Default::default()
        };
        let mut r = self.call(CMD_DEVICE_GET_REGION_INFO, ask.as_bytes(), &[]);
        assert_eq!(r.errno(), None, "GET_REGION_INFO {index}");
        let info = RegionInfo::read_from_prefix(&r.body)
            .expect("region info")
            .0;
        (info, r.fds.pop())
    }
}

/// A memfd of `size` bytes, sealed against shrinking (as QEMU's memory-backend-memfd) or
/// not.
pub fn memfd(size: u64, sealed: bool) -> File {
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd = unsafe {
        libc::memfd_create(
            c"rnic-hostile".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: a fresh descriptor that we own.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(size).expect("size the memfd");
    if sealed {
        // SAFETY: F_ADD_SEALS on a descriptor we own.
        let r = unsafe {
            libc::fcntl(
                f.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
            )
        };
        assert_eq!(r, 0, "seal the memfd");
    }
    f
}

/// An eventfd, non-blocking or not.
pub fn eventfd(nonblocking: bool) -> File {
    let flags = libc::EFD_CLOEXEC | if nonblocking { libc::EFD_NONBLOCK } else { 0 };
    // SAFETY: plain eventfd creation; the result is checked.
    let fd = unsafe { libc::eventfd(0, flags) };
    assert!(fd >= 0, "eventfd");
    // SAFETY: a fresh descriptor that we own.
    unsafe { File::from_raw_fd(fd) }
}

/// A pipe whose buffer is full: (read end, write end).
pub fn full_pipe() -> (File, File) {
    let mut fds = [0; 2];
    assert_eq!(
        // SAFETY: pipe2 into an array of two.
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) },
        0
    );
    // SAFETY: the pipe's descriptors are ours.
    let (r, mut w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    while w.write(&[0u8; 4096]).is_ok() {}
    // A writer would now block for as long as nobody reads.
    // SAFETY: F_SETFL on a descriptor we own.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, 0) };
    (r, w)
}

/// What rnicd holds: open descriptors and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Open descriptors.
    pub fds: usize,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Peak resident memory, KiB.
    pub hwm_kib: u64,
    /// Virtual address space in use, KiB.
    pub vm_kib: u64,
    /// Memory mappings.
    pub maps: usize,
}

impl Usage {
    /// What process `pid` holds now.
    pub fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Self {
            fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
            vm_kib: field("VmSize:"),
            maps: std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .map_or(0, |m| m.lines().count()),
        }
    }
}

/// Verified RDMA traffic between two functions, in a thread of its own: RDMA WRITEs of a
/// fresh pattern each time, each followed by a SEND that tells the other side to check
/// it, every completion checked and every byte compared.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    handle: Option<JoinHandle<Result<u64, String>>>,
}

/// Bytes each round writes.
const ROUND_BYTES: usize = 16 * 1024;

impl Traffic {
    /// Starts traffic between functions `a` and `b` of `rnicd` ("vf1", "vf2").
    pub fn start(rnicd: &Rnicd, a: &str, b: &str) -> Self {
        let (sa, sb) = (rnicd.socket(a), rnicd.socket(b));
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let (stop2, rounds2) = (stop.clone(), rounds.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let o = PairOptions {
                buf_len: 4 * ROUND_BYTES,
                ..PairOptions::default()
            };
            let a = verbs_pair::side(&sa, &o);
            let b = verbs_pair::side(&sb, &o);
            verbs_pair::connect(&a, &b, &o, 0x100, 0xabc000);
            let _ = ready_tx.send(());
            run_traffic(&a, &b, &stop2, &rounds2)
        });
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the traffic's functions opened");
        let t = Self {
            stop,
            rounds,
            handle: Some(handle),
        };
        t.expect_progress(Duration::from_secs(30));
        t
    }

    /// Rounds completed and checked so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Acquire)
    }

    /// Panics unless more rounds complete within `timeout` (or the traffic failed).
    pub fn expect_progress(&self, timeout: Duration) {
        let start = self.rounds();
        let deadline = Instant::now() + timeout;
        while self.rounds() < start + 3 {
            assert!(
                self.handle.as_ref().is_some_and(|h| !h.is_finished()),
                "the bystanders' traffic stopped"
            );
            assert!(
                Instant::now() < deadline,
                "the bystanders' traffic made no progress in {timeout:?} (stuck at round {start})"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the traffic; panics if any completion or byte was wrong. Returns the rounds.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        let handle = self.handle.take().expect("running");
        match handle.join() {
            Ok(Ok(rounds)) => rounds,
            Ok(Err(e)) => panic!("the bystanders' traffic failed: {e}"),
            Err(_) => panic!("the bystanders' traffic panicked"),
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn run_traffic(
    a: &verbs_pair::Side,
    b: &verbs_pair::Side,
    stop: &AtomicBool,
    rounds: &AtomicU64,
) -> Result<u64, String> {
    use rnic_driver::verbs::{RecvWr, SendWr, WrOpcode};
    let mut round = 0u64;
    while !stop.load(Ordering::Acquire) {
        round += 1;
        let data = verbs_pair::pattern(ROUND_BYTES, round);
        a.mr.write(0, &data);
        b.qp.post_recv(&RecvWr {
            wr_id: round,
            sges: vec![b.mr.sge(2 * ROUND_BYTES, 64)],
        })
        .map_err(|e| format!("post_recv: {e}"))?;
        let write = SendWr {
            wr_id: 2 * round,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(ROUND_BYTES),
                rkey: b.mr.rkey(),
            },
            sges: vec![a.mr.sge(0, ROUND_BYTES)],
            signaled: true,
            ..SendWr::default()
        };
        let send = SendWr {
            wr_id: 2 * round + 1,
            opcode: WrOpcode::Send,
            sges: vec![a.mr.sge(0, 64)],
            signaled: true,
            ..SendWr::default()
        };
        a.qp.post_send_list(&[write, send])
            .map_err(|e| format!("post_send: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut sent, mut received) = (Vec::new(), Vec::new());
        while sent.len() < 2 || received.is_empty() {
            if Instant::now() > deadline {
                return Err(format!("round {round}: completions missing after 30 s"));
            }
            sent.extend(a.cq.poll(4));
            received.extend(b.cq.poll(4));
            std::thread::yield_now();
        }
        for wc in sent.iter().chain(&received) {
            if !wc.is_success() {
                return Err(format!("round {round}: {wc:?}"));
            }
        }
        let ids: Vec<u64> = sent.iter().map(|w| w.wr_id).collect();
        if ids != [2 * round, 2 * round + 1] || received[0].wr_id != round || received.len() != 1 {
            return Err(format!("round {round}: completions {ids:?} / {received:?}"));
        }
        let mut placed = vec![0u8; ROUND_BYTES];
        b.mr.read(ROUND_BYTES, &mut placed);
        if placed != data {
            return Err(format!("round {round}: the WRITE placed other bytes"));
        }
        let mut message = vec![0u8; 64];
        b.mr.read(2 * ROUND_BYTES, &mut message);
        if message != data[..64] {
            return Err(format!("round {round}: the SEND delivered other bytes"));
        }
        rounds.store(round, Ordering::Release);
    }
    Ok(round)
}
