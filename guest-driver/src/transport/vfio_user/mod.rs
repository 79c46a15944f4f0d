//! The transport on the host: the driver speaks vfio-user to rnicd itself and so plays
//! the VMM's part too. Guest RAM is a memfd that it DMA-maps with its descriptor; BAR0 and
//! config space are region reads and writes over the socket; the doorbell BAR is mmapped
//! from the descriptor the device hands out; MSI-X vectors are eventfds.
//!
//! What a guest would see through QEMU, this sees through the same messages, which is
//! what makes it the real path for tests and benchmarks. The protocol itself is
//! [`client`], the driver's own vfio-user client.
//!
//! # A socket another client holds
//!
//! rnicd serves one client per socket at a time (a VMM, or a tool like this one). A
//! client that connects meanwhile is answered with an error reply to its VERSION, errno
//! `EBUSY` (rnicd before that answer: left waiting, unanswered, in the socket's listen
//! backlog). Either means "held": [`VfioUserTransport::connect_with`] tries again until
//! [`VfioUserOptions::wait`] runs out (a silent socket it keeps waiting on, in the
//! backlog's order), then fails with [`Error::Held`] naming the socket. The wait is a
//! field of the options whose default is one process-wide setting, [`default_wait`]
//! ([`DEFAULT_WAIT`] unless [`set_default_wait`] changed it): the tools set it from
//! their `--wait SECS` (`rnic_tools::cli::WaitOption`), so it reaches every connection they make,
//! through [`crate::Location`] and the tools' own device choices alike.
//!
//! # rnicd going away
//!
//! Each connection has a watcher thread that sleeps in `poll` on the socket until it
//! hangs up (or the transport is dropped). Then the transport is *gone*: every interrupt
//! waiter is woken (the watcher writes the transport's own MSI-X eventfds), and from then
//! on every request, [`Transport::check_alive`] and every interrupt wait fail at once with
//! [`Error::DeviceGone`]. A request that finds the socket closed does the same.

pub mod client;

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rnic_abi::pci::{cfg, DOORBELL_BAR, REG_BAR};
use rnic_abi::vfio_user as wire;
use rnic_abi::PAGE_SIZE;
use vmm_sys_util::eventfd::EventFd;

use self::client::{Client, ClientError};
use super::user_memory::{self, Memfd, PinUnit, UserPages};
use super::{
    check_config, page_round, DmaBuffer, DmaRelease, InterruptFds, MappedBar, Mapping, Transport,
};
use crate::error::{Error, Result};

/// Where the memfd "guest RAM" appears in the device's DMA address space. Any page-aligned
/// value works; a high one makes a stray zero address fail loudly.
pub const DEFAULT_IOVA_BASE: u64 = 0x1_0000_0000;
/// Default size of the guest RAM memfd.
pub const DEFAULT_MEMORY: usize = 64 << 20;
/// Where application memory ([`Transport::map_user_memory`]) appears in the device's DMA
/// address space: at its virtual address plus this. User addresses are below 2^56 (even
/// with 5-level page tables), so these never meet guest RAM at [`DEFAULT_IOVA_BASE`].
pub const USER_IOVA_BASE: u64 = 1 << 56;
/// How long a socket another client holds is waited for unless told otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(1);
/// How long a VERSION goes unanswered before the socket counts as held (rnicd before
/// its EBUSY answer leaves a second client in the listen backlog).
pub const HELD_REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between attempts on a socket that answered EBUSY.
const HELD_RETRY: Duration = Duration::from_millis(100);

/// The process-wide default of [`VfioUserOptions::wait`], in milliseconds.
static WAIT_MS: AtomicU64 = AtomicU64::new(DEFAULT_WAIT.as_millis() as u64);

/// Sets how long connections made from now on wait for a socket another client holds,
/// unless their options say otherwise: what the tools' `--wait SECS` does.
pub fn set_default_wait(wait: Duration) {
    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    WAIT_MS.store(ms, Ordering::Relaxed);
}

/// The default of [`VfioUserOptions::wait`]: [`DEFAULT_WAIT`] unless
/// [`set_default_wait`] changed it.
pub fn default_wait() -> Duration {
    Duration::from_millis(WAIT_MS.load(Ordering::Relaxed))
}

/// Options of a [`VfioUserTransport`].
#[derive(Debug, Clone)]
pub struct VfioUserOptions {
    /// Bytes of DMA memory to share with the device.
    pub memory: usize,
    /// Device address of the first byte of that memory.
    pub iova_base: u64,
    /// How long to wait for the socket when another client holds it (see the module
    /// docs); by default [`default_wait`].
    pub wait: Duration,
    /// Scatter every DMA allocation: its pages are free pages taken from the top of the
    /// memory down, so no page follows the one before it in device memory, as a VM without
    /// an IOMMU gives a driver guest-physical pages. The driver still sees each
    /// allocation in one piece, through a mapping of its own of each page. For tests of
    /// what non-contiguous memory does (page tables, accesses that cross pages); each
    /// allocated page costs a mapping of this process. Off by default: the memory is
    /// handed out first-fit, contiguous.
    pub scatter: bool,
}

impl Default for VfioUserOptions {
    fn default() -> Self {
        Self {
            memory: DEFAULT_MEMORY,
            iova_base: DEFAULT_IOVA_BASE,
            wait: default_wait(),
            scatter: false,
        }
    }
}

/// What the transport and its connection's watcher share.
struct Link {
    /// `vfio-user:PATH`, for messages.
    describe: String,
    /// [`ALIVE`], [`GONE`] or [`DISCONNECTED`].
    state: AtomicU8,
    /// The MSI-X eventfds, which the watcher writes to wake every waiter.
    vectors: InterruptFds,
}

/// The connection works.
const ALIVE: u8 = 0;
/// rnicd closed it.
const GONE: u8 = 1;
/// This side closed it ([`VfioUserTransport::disconnect`]).
const DISCONNECTED: u8 = 2;

impl Link {
    /// Fails once the connection ended.
    fn check(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            ALIVE => Ok(()),
            GONE => Err(Error::DeviceGone(self.describe.clone())),
            _ => Err(Error::VfioUser(
                format!("{}: disconnected by this side", self.describe),
                ClientError::Closed,
            )),
        }
    }

    /// rnicd closed the connection: wakes every interrupt waiter, once.
    fn mark_gone(&self) {
        if self
            .state
            .compare_exchange(ALIVE, GONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            log::debug!("{}: rnicd closed the socket", self.describe);
            self.vectors.wake_all();
        }
    }

    /// The driver error of a failed request: a closed connection makes the transport gone.
    fn error(&self, what: impl Into<String>, e: ClientError) -> Error {
        match e {
            ClientError::Closed if self.state.load(Ordering::Acquire) != DISCONNECTED => {
                self.mark_gone();
                Error::DeviceGone(self.describe.clone())
            }
            e => Error::VfioUser(what.into(), e),
        }
    }
}

/// The thread that watches a connection for rnicd hanging up; stopped and joined on drop.
struct Watcher {
    stop: EventFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `sock` (a duplicate of it) for `link`.
    fn start(sock: &UnixStream, link: Arc<Link>) -> Result<Self> {
        let sock: OwnedFd = sock
            .try_clone()
            .map_err(|e| Error::Io("duplicate the vfio-user socket for its watcher".into(), e))?
            .into();
        let stop = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)
            .map_err(|e| Error::Io("create the watcher's eventfd".into(), e))?;
        let stop_fd = stop
            .try_clone()
            .map_err(|e| Error::Io("duplicate the watcher's eventfd".into(), e))?;
        let thread = std::thread::Builder::new()
            .name("rnic-vfio-user-watch".into())
            .spawn(move || watch(&sock, &stop_fd, &link))
            .map_err(|e| Error::Io("start the vfio-user socket watcher".into(), e))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if self.stop.write(1).is_err() {
            log::warn!("cannot stop the vfio-user socket watcher; leaving it");
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watcher's loop: sleeps until the socket hangs up (rnicd closed it: the link is
/// gone) or `stop` is written (the transport is dropped or disconnects).
fn watch(sock: &OwnedFd, stop: &EventFd, link: &Link) {
    let mut fds = [
        libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: two valid pollfds that live across the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            log::warn!("{}: the socket watcher stops: poll: {e}", link.describe);
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        let hangup = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
        if fds[0].revents & hangup != 0 {
            link.mark_gone();
            return;
        }
    }
}

/// An rnic function reached over a vfio-user socket.
pub struct VfioUserTransport {
    path: PathBuf,
    /// Shared with the releases of registered application memory, which DMA_UNMAP.
    client: Arc<Mutex<Client>>,
    /// Whether the connection still works; the MSI-X eventfds.
    link: Arc<Link>,
    /// Watches the socket for rnicd hanging up; `None` after [`Self::disconnect`].
    watcher: Mutex<Option<Watcher>>,
    doorbells: Mapping,
    memory: Arc<GuestRam>,
    /// Application memory DMA-mapped for registrations ([`Transport::map_user_memory`]).
    user: Arc<UserPages<UserDma>>,
}

/// A run of application pages DMA-mapped at [`USER_IOVA_BASE`] + their address, from the
/// memfd that backs them (held open: another function of this process may need to map the
/// same pages, and that takes the descriptor).
struct UserDma {
    _file: Arc<Memfd>,
}

impl PinUnit for UserDma {
    fn device_addr(&self, _start: usize, page: usize) -> u64 {
        USER_IOVA_BASE + page as u64
    }
}

impl std::fmt::Debug for VfioUserTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioUserTransport")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The memfd that stands for guest RAM, with a first-fit page allocator over it.
struct GuestRam {
    /// Kept open so another function can DMA-map the same memory ([`VfioUserTransport::connect_sharing`]).
    file: File,
    mapping: Mapping,
    iova_base: u64,
    /// One flag per page: in use.
    used: Mutex<Vec<bool>>,
    /// [`VfioUserOptions::scatter`].
    scatter: bool,
}

impl GuestRam {
    fn alloc(self: &Arc<Self>, size: usize) -> Result<DmaBuffer> {
        if self.scatter {
            return self.alloc_scattered(size);
        }
        let len = page_round(size);
        let pages = len / PAGE_SIZE as usize;
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let start = first_fit(&used, pages).ok_or_else(|| {
            Error::NoDmaMemory(format!(
                "no {len} contiguous free bytes in the {} MiB shared with the device; give the transport more memory",
                self.mapping.len() >> 20
            ))
        })?;
        used[start..start + pages]
            .iter_mut()
            .for_each(|u| *u = true);
        drop(used);
        let offset = start * PAGE_SIZE as usize;
        // SAFETY: in bounds of the mapping, checked by first_fit.
        let ptr = unsafe { NonNull::new_unchecked(self.mapping.ptr().as_ptr().add(offset)) };
        let device_pages = (0..pages)
            .map(|i| self.iova_base + (offset + i * PAGE_SIZE as usize) as u64)
            .collect();
        let release: Arc<dyn DmaRelease> = self.clone();
        // SAFETY: the pages are ours until release() gives them back.
        let buf = unsafe { DmaBuffer::new(ptr, len, device_pages, Some(release)) };
        buf.zero();
        Ok(buf)
    }
}

impl GuestRam {
    /// [`GuestRam::alloc`] of [`VfioUserOptions::scatter`]: free pages from the top down,
    /// seen by the driver through a view of their own.
    fn alloc_scattered(self: &Arc<Self>, size: usize) -> Result<DmaBuffer> {
        let len = page_round(size);
        let count = len / PAGE_SIZE as usize;
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let picked: Vec<usize> = (0..used.len())
            .rev()
            .filter(|&i| !used[i])
            .take(count)
            .collect();
        if picked.len() < count {
            return Err(Error::NoDmaMemory(format!(
                "no {count} free pages in the {} MiB shared with the device; give the transport more memory",
                self.mapping.len() >> 20
            )));
        }
        picked.iter().for_each(|&i| used[i] = true);
        drop(used);
        let device_pages: Vec<u64> = picked
            .iter()
            .map(|&i| self.iova_base + i as u64 * PAGE_SIZE)
            .collect();
        let ptr = match self.map_view(&picked, len) {
            Ok(ptr) => ptr,
            Err(e) => {
                self.free(&device_pages);
                return Err(e);
            }
        };
        let release: Arc<dyn DmaRelease> = self.clone();
        // SAFETY: the view maps exactly `device_pages`, which are ours until release()
        // gives them back and unmaps the view.
        let buf = unsafe { DmaBuffer::new(ptr, len, device_pages, Some(release)) };
        buf.zero();
        Ok(buf)
    }

    /// A new mapping of `len` bytes whose page *k* is page `pages[k]` of the memfd.
    fn map_view(&self, pages: &[usize], len: usize) -> Result<NonNull<u8>> {
        let page = PAGE_SIZE as usize;
        // SAFETY: a fresh anonymous reservation nobody else knows of; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("reserve a scattered DMA view"));
        }
        for (k, &i) in pages.iter().enumerate() {
            // SAFETY: replaces page k of the reservation made above (in bounds: `pages`
            // has len / 4096 entries) with page i of our memfd, inside the file.
            let p = unsafe {
                libc::mmap(
                    base.cast::<u8>().add(k * page).cast(),
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    self.file.as_raw_fd(),
                    (i * page) as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                let e = Error::last_os("map a page of a scattered DMA view");
                // SAFETY: the reservation made above, which nothing uses yet.
                unsafe { unmap_view(base.cast(), len) };
                return Err(e);
            }
        }
        NonNull::new(base.cast()).ok_or_else(|| Error::last_os("reserve a scattered DMA view"))
    }

    /// Marks `device_pages` free.
    fn free(&self, device_pages: &[u64]) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        for &p in device_pages {
            if let Some(u) = used.get_mut(((p - self.iova_base) / PAGE_SIZE) as usize) {
                *u = false;
            }
        }
    }
}

impl DmaRelease for GuestRam {
    fn release(&self, ptr: NonNull<u8>, len: usize, device_pages: &[u64]) {
        if self.scatter {
            // SAFETY: the view alloc_scattered() made for this buffer alone, which is
            // being dropped.
            unsafe { unmap_view(ptr.as_ptr(), len) };
        }
        self.free(device_pages);
    }
}

/// Unmaps a scattered DMA view.
///
/// # Safety
/// `ptr..ptr + len` must be a view of [`GuestRam::map_view`] that nothing uses any more.
unsafe fn unmap_view(ptr: *mut u8, len: usize) {
    // SAFETY: the caller's promise.
    if unsafe { libc::munmap(ptr.cast(), len) } != 0 {
        log::warn!(
            "munmap of a scattered DMA view at {ptr:p} failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Index of the first run of `n` free pages.
fn first_fit(used: &[bool], n: usize) -> Option<usize> {
    let mut run = 0;
    for (i, &u) in used.iter().enumerate() {
        run = if u { 0 } else { run + 1 };
        if run == n {
            return Some(i + 1 - n);
        }
    }
    None
}

/// The error of a socket held by another client, after waiting `waited`.
fn held(path: &Path, waited: Duration) -> Error {
    Error::Held {
        path: path.display().to_string(),
        waited,
    }
}

/// Connects to the vfio-user socket at `path` and negotiates, waiting up to `wait` while
/// another client holds it (module docs).
fn open_client(path: &Path, wait: Duration) -> Result<Client> {
    if !path.exists() {
        return Err(Error::NotFound(format!(
            "{} does not exist; is rnicd running with this --socket-dir?",
            path.display()
        )));
    }
    let start = Instant::now();
    let give_up = start + wait;
    loop {
        let sock = match UnixStream::connect(path) {
            Ok(s) => s,
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                return Err(Error::NotFound(format!(
                    "{}: nothing listens on it (connection refused); is rnicd running with this --socket-dir?",
                    path.display()
                )));
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                // The listen backlog is full: clients queue for it.
                if Instant::now() >= give_up {
                    return Err(held(path, start.elapsed()));
                }
                std::thread::sleep(
                    HELD_RETRY.min(give_up.saturating_duration_since(Instant::now())),
                );
                continue;
            }
            Err(e) => {
                return Err(Error::VfioUser(
                    format!("connect to {}", path.display()),
                    ClientError::Io(e),
                ))
            }
        };
        // An unanswered VERSION sits in the backlog of a held socket: wait on it, in
        // the queue's order, for the whole wait (at least the held timeout).
        let deadline = give_up.max(Instant::now() + HELD_REPLY_TIMEOUT);
        match Client::negotiate(sock, deadline) {
            Ok(client) => return Ok(client),
            Err(ClientError::Refused { errno, .. }) if errno == libc::EBUSY as u32 => {
                let now = Instant::now();
                if now >= give_up {
                    return Err(held(path, start.elapsed()));
                }
                log::debug!("{} is held by another client; trying again", path.display());
                std::thread::sleep(HELD_RETRY.min(give_up - now));
            }
            Err(ClientError::NoReply { .. }) => return Err(held(path, start.elapsed())),
            Err(ClientError::Closed) => {
                return Err(Error::DeviceGone(format!("vfio-user:{}", path.display())))
            }
            Err(e) => return Err(Error::VfioUser(format!("VERSION on {}", path.display()), e)),
        }
    }
}

impl VfioUserTransport {
    /// Connects to the function served at `path` with default options.
    pub fn connect(path: &Path) -> Result<Self> {
        Self::connect_with(path, &VfioUserOptions::default())
    }

    /// Connects to the function served at `path`: negotiates, shares guest memory, and
    /// maps the doorbell BAR.
    pub fn connect_with(path: &Path, options: &VfioUserOptions) -> Result<Self> {
        let client = open_client(path, options.wait)?;
        let memory = page_round(options.memory);
        let file = user_memory::sealed_memfd(c"rnic-guest-ram", memory, "guest memory")?;
        let mapping = Mapping::new(file.as_raw_fd(), memory, 0, "guest memory")?;
        let guest_ram = Arc::new(GuestRam {
            file,
            mapping,
            iova_base: options.iova_base,
            used: Mutex::new(vec![false; memory / PAGE_SIZE as usize]),
            scatter: options.scatter,
        });
        Self::finish(path, client, guest_ram, "DMA_MAP guest memory")
    }

    /// Connects to the function served at `path` and gives it the guest memory of
    /// `other` (the same memfd, DMA-mapped at the same device address), as QEMU does for
    /// two functions attached to one guest. Both then allocate DMA memory from one pool,
    /// so an object of one is reachable by the other: what `MIGRATE_QP` between them
    /// needs.
    pub fn connect_sharing(path: &Path, other: &VfioUserTransport) -> Result<Self> {
        let client = open_client(path, default_wait())?;
        Self::finish(
            path,
            client,
            other.memory.clone(),
            "DMA_MAP shared guest memory",
        )
    }

    /// Watches the connection, DMA-maps the guest memory and maps the doorbell BAR of a
    /// negotiated connection.
    fn finish(path: &Path, mut client: Client, ram: Arc<GuestRam>, map_what: &str) -> Result<Self> {
        let link = Arc::new(Link {
            describe: format!("vfio-user:{}", path.display()),
            state: AtomicU8::new(ALIVE),
            vectors: InterruptFds::default(),
        });
        let watcher = Watcher::start(client.socket(), link.clone())?;
        let info = client
            .device_info()
            .map_err(|e| link.error("DEVICE_GET_INFO", e))?;
        if info.flags & wire::DEVICE_FLAGS_PCI == 0 || info.num_regions <= u32::from(DOORBELL_BAR) {
            return Err(Error::Device(format!(
                "{} is no PCI device with a doorbell BAR (flags {:#x}, {} regions)",
                path.display(),
                info.flags,
                info.num_regions
            )));
        }
        client
            .dma_map(
                0,
                ram.iova_base,
                ram.mapping.len() as u64,
                ram.file.as_raw_fd(),
            )
            .map_err(|e| link.error(map_what, e))?;
        let doorbells = map_doorbells(&mut client, &link)?;

        let client = Arc::new(Mutex::new(client));
        let (unmap_client, unmap_link) = (client.clone(), link.clone());
        let user = UserPages::new(Box::new(move |start, len, _: UserDma| {
            let iova = USER_IOVA_BASE + start as u64;
            if unmap_link.check().is_err() {
                // The connection ended: rnicd dropped every mapping with it.
                return;
            }
            let r = unmap_client
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .dma_unmap(iova, len as u64);
            match r.map_err(|e| unmap_link.error("DMA_UNMAP", e)) {
                Ok(()) | Err(Error::DeviceGone(_)) => {}
                Err(e) => {
                    log::warn!("DMA_UNMAP of registered memory {iova:#x}+{len:#x} failed: {e}")
                }
            }
        }));
        Ok(Self {
            path: path.to_path_buf(),
            client,
            link,
            watcher: Mutex::new(Some(watcher)),
            doorbells,
            memory: ram,
            user,
        })
    }

    fn client(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one exchange with the server unless the connection ended; `what` names it in
    /// an error.
    fn call<T>(
        &self,
        what: impl FnOnce() -> String,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, ClientError>,
    ) -> Result<T> {
        self.link.check()?;
        let r = f(&mut self.client());
        r.map_err(|e| self.link.error(what(), e))
    }

    /// What the server said it takes in its VERSION reply (with this client's own limits).
    pub fn server_caps(&self) -> client::ServerCaps {
        self.client().caps()
    }

    /// Sends a DMA_UNMAP for the guest memory (for tests of what the device does then).
    pub fn unmap_guest_memory(&self) -> Result<()> {
        let len = self.memory.mapping.len() as u64;
        let iova = self.memory.iova_base;
        self.call(
            || "DMA_UNMAP guest memory".into(),
            |c| c.dma_unmap(iova, len),
        )
    }

    /// Closes the connection, as a VMM that goes away does.
    pub fn disconnect(&self) -> Result<()> {
        // The watcher first, so that the hang-up it would see is not taken for rnicd's.
        drop(
            self.watcher
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        self.link.state.store(DISCONNECTED, Ordering::Release);
        self.client().shutdown().map_err(|e| {
            Error::VfioUser(
                format!("shutdown {}", self.path.display()),
                ClientError::Io(e),
            )
        })
    }
}

/// Maps the doorbell BAR: the region's mmappable area at offset 0 (its sparse mmap
/// area, or the whole region), from the descriptor the region info came with.
fn map_doorbells(client: &mut Client, link: &Link) -> Result<Mapping> {
    let region = client
        .region_info(u32::from(DOORBELL_BAR))
        .map_err(|e| link.error("DEVICE_GET_REGION_INFO of the doorbell BAR", e))?;
    let info = region.info;
    if info.flags & wire::REGION_FLAG_MMAP == 0 {
        return Err(Error::Device(
            "the doorbell BAR is not mmappable (no REGION_FLAG_MMAP)".into(),
        ));
    }
    let fd = region.fd.ok_or_else(|| {
        Error::Device("the doorbell BAR came without a file descriptor to map".into())
    })?;
    let len = match region.sparse.iter().find(|a| a.offset == 0) {
        Some(area) => area.size,
        None if region.sparse.is_empty() => info.size,
        None => {
            return Err(Error::Device(format!(
                "the doorbell BAR's mmappable areas ({:?}) do not start at its beginning",
                region.sparse
            )))
        }
    };
    if len == 0 || len > info.size {
        return Err(Error::Device(format!(
            "the doorbell BAR's mmappable area of {len:#x} bytes does not fit its {:#x} bytes",
            info.size
        )));
    }
    let len = usize::try_from(len).map_err(|_| Error::Device("doorbell BAR too large".into()))?;
    Mapping::new(fd.as_raw_fd(), len, info.offset, "doorbell BAR")
}

impl Transport for VfioUserTransport {
    fn describe(&self) -> String {
        self.link.describe.clone()
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        check_config(&self.describe(), offset, buf.len())?;
        self.call(
            || "config read".into(),
            |c| c.region_read(wire::REGION_CONFIG, u64::from(offset), buf),
        )
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        check_config(&self.describe(), offset, data.len())?;
        self.call(
            || "config write".into(),
            |c| c.region_write(wire::REGION_CONFIG, u64::from(offset), data),
        )
    }

    fn reg_read32(&self, offset: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.call(
            || "register read".into(),
            |c| c.region_read(u32::from(REG_BAR), offset, &mut b),
        )?;
        Ok(u32::from_le_bytes(b))
    }

    fn reg_write32(&self, offset: u64, value: u32) -> Result<()> {
        self.call(
            || "register write".into(),
            |c| c.region_write(u32::from(REG_BAR), offset, &value.to_le_bytes()),
        )
    }

    fn doorbells(&self) -> &MappedBar {
        self.doorbells.bar()
    }

    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.memory.alloc(size)
    }

    /// rnicd reaches only memory DMA-mapped with a descriptor: the pages are moved onto a
    /// memfd in place (`user_memory::back_with_memfd`, whose documentation lists the
    /// caveats) and DMA-mapped at [`USER_IOVA_BASE`] + their address.
    fn map_user_memory(&self, addr: usize, len: usize, writable: bool) -> Result<DmaBuffer> {
        let (start, end) = user_memory::page_span(addr, len).ok_or_else(|| {
            user_memory::os_error(format!("{len} bytes at {addr:#x}"), libc::EINVAL)
        })?;
        let runs = user_memory::back_with_memfd(start, end, writable)?;
        let pieces: Vec<_> = runs.iter().map(|r| (r.start, r.start + r.len, r)).collect();
        self.user.map(addr, len, &pieces, |run, start, len| {
            let offset = run.offset + (start - run.start) as u64;
            let iova = USER_IOVA_BASE + start as u64;
            self.call(
                || format!("DMA_MAP registered memory {start:#x}+{len:#x}"),
                |c| c.dma_map(offset, iova, len as u64, run.file.fd()),
            )?;
            Ok(UserDma {
                _file: run.file.clone(),
            })
        })
    }

    fn enable_interrupts(&self, count: u16) -> Result<bool> {
        let fds = InterruptFds::create(count)?;
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        self.call(
            || "SET_IRQS".into(),
            |c| {
                c.set_irqs(
                    wire::IRQ_MSIX,
                    wire::IRQ_SET_DATA_EVENTFD | wire::IRQ_SET_ACTION_TRIGGER,
                    0,
                    u32::from(count),
                    &raw,
                )
            },
        )?;
        self.link.vectors.install(fds);
        // As the VMM, also do what the guest's MSI-X setup does: enable MSI-X.
        let at = cfg::MSIX_CAP as u16 + cfg::MSIX_MSG_CTRL as u16;
        let mut ctrl = [0u8; 2];
        self.config_read(at, &mut ctrl)?;
        let ctrl = (u16::from_le_bytes(ctrl) | cfg::MSIX_ENABLE) & !cfg::MSIX_FUNCTION_MASK;
        self.config_write(at, &ctrl.to_le_bytes())?;
        Ok(true)
    }

    /// Ends at once, with [`Error::DeviceGone`], when rnicd closes the socket meanwhile
    /// (the watcher wakes every waiter).
    fn wait_interrupt(&self, vector: u16, timeout: Duration) -> Result<bool> {
        self.link.check()?;
        let fired = self.link.vectors.wait(vector, timeout)?;
        self.link.check()?;
        Ok(fired)
    }

    fn interrupt_fd(&self, vector: u16) -> Option<std::os::fd::RawFd> {
        self.link.vectors.raw(vector)
    }

    /// [`Error::DeviceGone`] once rnicd closed the socket (one atomic load).
    fn check_alive(&self) -> Result<()> {
        self.link.check()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn function_reset(&self) -> Result<()> {
        self.call(|| "DEVICE_RESET".into(), Client::reset)
    }

    fn kind(&self) -> String {
        "vfio-user (this process plays the VMM)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;
    use zerocopy::{FromBytes, IntoBytes};

    /// A socket that answers every VERSION with EBUSY and closes, as rnicd does while
    /// another client holds the socket; counts the clients it turned away.
    fn busy_socket(dir: &Path) -> (PathBuf, Arc<std::sync::atomic::AtomicUsize>) {
        let path = dir.join("busy.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let turned_away = count.clone();
        std::thread::spawn(move || {
            for mut s in listener.incoming().map_while(std::result::Result::ok) {
                let mut h = [0u8; wire::HEADER_SIZE];
                if s.read_exact(&mut h).is_err() {
                    continue;
                }
                let h = wire::Header::read_from_bytes(&h).unwrap();
                let reply = wire::Header {
                    message_id: h.message_id,
                    command: h.command,
                    message_size: wire::HEADER_SIZE as u32,
                    flags: wire::FLAG_REPLY | wire::FLAG_ERROR,
                    error: libc::EBUSY as u32,
                };
                let _ = s.write_all(reply.as_bytes());
                turned_away.fetch_add(1, Ordering::Relaxed);
            }
        });
        (path, count)
    }

    #[test]
    fn an_ebusy_answer_is_retried_until_the_wait_runs_out() {
        let dir = std::env::temp_dir().join(format!("rnic-busy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, count) = busy_socket(&dir);
        let options = VfioUserOptions {
            wait: Duration::from_millis(350),
            ..VfioUserOptions::default()
        };
        let start = Instant::now();
        let e = VfioUserTransport::connect_with(&path, &options).unwrap_err();
        let took = start.elapsed();
        let _ = std::fs::remove_dir_all(&dir);
        let text = e.to_string();
        assert!(matches!(e, Error::Held { .. }), "{text}");
        assert!(
            text.contains(&format!("{} is held by another client", path.display()))
                && text.contains("pass --wait SECS"),
            "{text}"
        );
        assert!(count.load(Ordering::Relaxed) >= 3, "tried again");
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_millis(900),
            "an EBUSY needs no reply timeout: {took:?}"
        );
    }

    /// Guest RAM of `pages` pages at IOVA 0x1_0000_0000, scattered or not.
    fn guest_ram(pages: usize, scatter: bool) -> Arc<GuestRam> {
        let len = pages * PAGE_SIZE as usize;
        let file = user_memory::sealed_memfd(c"test-ram", len, "test RAM").unwrap();
        let mapping = Mapping::new(file.as_raw_fd(), len, 0, "test RAM").unwrap();
        Arc::new(GuestRam {
            file,
            mapping,
            iova_base: 0x1_0000_0000,
            used: Mutex::new(vec![false; pages]),
            scatter,
        })
    }

    #[test]
    fn scattered_allocations_have_no_two_pages_in_a_row_and_one_view() {
        let ram = guest_ram(16, true);
        let a = ram.alloc(3 * 4096).unwrap();
        let b = ram.alloc(4097).unwrap();
        let at = |page: u64| 0x1_0000_0000 + page * 4096;
        // From the top down: a takes pages 15, 14, 13; b 12 and 11.
        assert_eq!(a.pages(), [at(15), at(14), at(13)]);
        assert_eq!(b.pages(), [at(12), at(11)]);
        assert_eq!(a.contiguous(), None);
        // The driver's view is one piece; each page lands where the device sees it.
        let data: Vec<u8> = (0..3 * 4096).map(|i| (i / 4096 + 1) as u8).collect();
        a.write(0, &data);
        let ram_byte = |page: usize| {
            // SAFETY: in bounds of the 16-page mapping.
            unsafe { *ram.mapping.ptr().as_ptr().add(page * 4096 + 100) }
        };
        assert_eq!([ram_byte(15), ram_byte(14), ram_byte(13)], [1, 2, 3]);
        // Freed pages are taken again from the top down; a fresh buffer reads zero.
        drop(a);
        let c = ram.alloc(2 * 4096).unwrap();
        assert_eq!(c.pages(), [at(15), at(14)]);
        let mut back = [0xffu8; 8];
        c.read(4096, &mut back);
        assert_eq!(back, [0; 8]);
        // Out of pages: an error, and nothing taken.
        assert!(matches!(ram.alloc(13 * 4096), Err(Error::NoDmaMemory(_))));
        let d = ram.alloc(12 * 4096).unwrap();
        assert_eq!(d.pages().len(), 12);
        drop((b, c, d));
        assert!(ram.used.lock().unwrap().iter().all(|u| !u));
    }

    #[test]
    fn first_fit_finds_the_first_hole_big_enough() {
        let used = [true, false, true, false, false, true, false, false, false];
        assert_eq!(first_fit(&used, 1), Some(1));
        assert_eq!(first_fit(&used, 2), Some(3));
        assert_eq!(first_fit(&used, 3), Some(6));
        assert_eq!(first_fit(&used, 4), None);
    }
}
