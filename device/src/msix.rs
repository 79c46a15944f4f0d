//! MSI-X: the vector table and pending bits in BAR0, and the eventfds that deliver them.
//!
//! Over vfio-user the VMM owns interrupt delivery: it hands the device one eventfd per
//! vector (SET_IRQS) and turns a write to it into the guest's interrupt. The VMM also owns
//! the vector table: QEMU emulates it and masks a vector by swapping its eventfd, and
//! never forwards table writes. So the table here is plain storage, and what gates a
//! message is what the VMM does forward: MSI-X Enable and Function Mask in config space.
//! While either blocks, a message waits in the pending-bit array and goes out when it
//! clears, as on hardware.
//!
//! The eventfds are the VMM's, and so is everything about them: it can fill one's counter
//! or make it blocking after handing it over. So the engine never writes them. A message
//! the device sends is *raised* on the function's [`InterruptLine`] (an atomic bit and a
//! wake-up of an eventfd of the device's own), and the function's vfio-user connection
//! thread delivers it ([`InterruptLine::deliver`]): a VMM that makes a write block stalls
//! only its own connection, never an engine thread or a lock another function needs
//! (docs/hardware-interface.md §9.3).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use rnic_abi::pci::{MSIX_ENTRY_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};
use rnic_abi::vfio_user::{
    IRQ_SET_ACTION_MASK, IRQ_SET_ACTION_TRIGGER, IRQ_SET_ACTION_TYPE_MASK, IRQ_SET_ACTION_UNMASK,
    IRQ_SET_DATA_EVENTFD, IRQ_SET_DATA_NONE, IRQ_SET_DATA_TYPE_MASK,
};
use vmm_sys_util::eventfd::EventFd;

/// Vector control word: the per-vector mask bit.
const VECTOR_MASKED: u32 = 1;

/// MSI-X state of one function.
#[derive(Debug)]
pub struct Msix {
    table: Vec<u8>,
    pending: Vec<u64>,
    line: Arc<InterruptLine>,
}

/// Where a BAR0 offset falls in the MSI-X structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsixArea {
    /// Byte offset into the vector table.
    Table(usize),
    /// Byte offset into the pending-bit array.
    Pba(usize),
}

impl Msix {
    /// `vectors` vectors (at most 32), all masked, none pending, no eventfds.
    pub fn new(vectors: u16) -> io::Result<Self> {
        let mut m = Self {
            table: vec![0; vectors as usize * MSIX_ENTRY_SIZE as usize],
            pending: vec![0; (vectors as usize).div_ceil(64)],
            line: Arc::new(InterruptLine::new(vectors)?),
        };
        m.reset();
        Ok(m)
    }

    /// Number of vectors.
    pub fn vectors(&self) -> u16 {
        self.line.vectors()
    }

    /// The line the messages go out on, to the VMM's eventfds.
    pub fn line(&self) -> &Arc<InterruptLine> {
        &self.line
    }

    /// Back to power-on: every vector masked with a zero message, nothing pending. The
    /// eventfds belong to the VMM and survive a function reset.
    pub fn reset(&mut self) {
        self.table.fill(0);
        for v in 0..usize::from(self.vectors()) {
            self.set_control(v, VECTOR_MASKED);
        }
        self.pending.fill(0);
    }

    /// Which MSI-X structure `offset` (into BAR0) of an access of `len` bytes lies in.
    pub fn area(&self, offset: u64, len: usize) -> Option<MsixArea> {
        let end = offset.checked_add(len as u64)?;
        let table_end = MSIX_TABLE_OFFSET + self.table.len() as u64;
        let pba_end = MSIX_PBA_OFFSET + self.pending.len() as u64 * 8;
        if offset >= MSIX_TABLE_OFFSET && end <= table_end {
            Some(MsixArea::Table((offset - MSIX_TABLE_OFFSET) as usize))
        } else if offset >= MSIX_PBA_OFFSET && end <= pba_end {
            Some(MsixArea::Pba((offset - MSIX_PBA_OFFSET) as usize))
        } else {
            None
        }
    }

    /// Reads table or PBA bytes.
    pub fn read(&self, area: MsixArea, data: &mut [u8]) {
        match area {
            MsixArea::Table(off) => data.copy_from_slice(&self.table[off..off + data.len()]),
            MsixArea::Pba(off) => {
                let bytes: Vec<u8> = self.pending.iter().flat_map(|w| w.to_le_bytes()).collect();
                data.copy_from_slice(&bytes[off..off + data.len()]);
            }
        }
    }

    /// Writes table bytes; the PBA is read-only.
    pub fn write(&mut self, area: MsixArea, data: &[u8]) {
        if let MsixArea::Table(off) = area {
            self.table[off..off + data.len()].copy_from_slice(data);
        }
    }

    fn set_control(&mut self, vector: usize, value: u32) {
        let at = vector * MSIX_ENTRY_SIZE as usize + 12;
        self.table[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// Signals `vector`, or makes it pending while MSI-X is disabled or the function
    /// masked. Returns whether the message went out (was raised on the line).
    pub fn signal(&mut self, vector: u16, enabled: bool, function_masked: bool) -> bool {
        let v = vector as usize;
        if vector >= self.vectors() {
            return false;
        }
        if !enabled || function_masked {
            self.pending[v / 64] |= 1 << (v % 64);
            return false;
        }
        self.line.raise(vector);
        true
    }

    /// Delivers every pending vector that is no longer masked.
    pub fn deliver_pending(&mut self, enabled: bool, function_masked: bool) {
        if !enabled || function_masked {
            return;
        }
        for v in 0..self.vectors() {
            let (word, bit) = (usize::from(v) / 64, 1 << (v % 64));
            if self.pending[word] & bit != 0 {
                self.pending[word] &= !bit;
                self.line.raise(v);
            }
        }
    }
}

/// The MSI-X messages of a function on their way to its VMM: vectors the device raised
/// and the VMM's eventfds that deliver them. The engine only raises (an atomic OR and, for
/// the first bit, a write to an eventfd of the line's own, which cannot block); the
/// function's vfio-user connection delivers.
#[derive(Debug)]
pub struct InterruptLine {
    vectors: u16,
    /// Raised vectors not yet delivered, one bit each.
    raised: AtomicU32,
    /// Readable while `raised` may hold bits: what the delivering thread waits on.
    wake: EventFd,
    /// The VMM's eventfd of each vector (SET_IRQS). Only the delivering side takes this
    /// lock, never the engine.
    triggers: Mutex<Vec<Option<File>>>,
}

/// A raised vector that could not be delivered.
#[derive(Debug)]
pub struct Undelivered {
    /// The vector.
    pub vector: u16,
    /// Why: the eventfd's counter is full (the VMM does not read it), or the VMM made it
    /// blocking after handing it over.
    pub error: io::Error,
}

impl InterruptLine {
    /// A line of `vectors` vectors (at most 32), none raised, no eventfds.
    pub fn new(vectors: u16) -> io::Result<Self> {
        assert!(vectors <= 32, "an interrupt line has at most 32 vectors");
        Ok(Self {
            vectors,
            raised: AtomicU32::new(0),
            wake: EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?,
            triggers: Mutex::new((0..vectors).map(|_| None).collect()),
        })
    }

    /// Number of vectors.
    pub fn vectors(&self) -> u16 {
        self.vectors
    }

    fn triggers(&self) -> std::sync::MutexGuard<'_, Vec<Option<File>>> {
        self.triggers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raises `vector` for delivery. Never blocks.
    pub fn raise(&self, vector: u16) {
        if vector >= self.vectors {
            return;
        }
        if self.raised.fetch_or(1 << vector, Ordering::AcqRel) == 0 {
            // Our own non-blocking eventfd, drained by every delivery: it cannot fill.
            let _ = self.wake.write(1);
        }
    }

    /// The descriptor that becomes readable when vectors are raised.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Whether any vector waits for delivery (for tests and in-process harnesses).
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire) != 0
    }

    /// Writes the eventfd of every raised vector; returns those that could not be
    /// delivered. A vector without an eventfd is dropped, as an MSI-X message to an
    /// address nobody decodes.
    pub fn deliver(&self) -> Vec<Undelivered> {
        // Drain the wake-up before taking the bits: a vector raised after the swap
        // writes it again.
        let _ = self.wake.read();
        let bits = self.raised.swap(0, Ordering::AcqRel);
        let mut failed = Vec::new();
        if bits == 0 {
            return failed;
        }
        let triggers = self.triggers();
        for vector in 0..self.vectors {
            if bits & (1 << vector) == 0 {
                continue;
            }
            match &triggers[usize::from(vector)] {
                Some(fd) => {
                    if let Err(error) = signal_eventfd(fd) {
                        failed.push(Undelivered { vector, error });
                    }
                }
                None => log::debug!("MSI-X vector {vector} fired with no eventfd set"),
            }
        }
        failed
    }

    /// How many vectors have an eventfd (each one a descriptor rnicd holds).
    pub fn trigger_count(&self) -> usize {
        self.triggers().iter().filter(|t| t.is_some()).count()
    }

    /// Forgets the eventfds (the VMM went away).
    pub fn clear_triggers(&self) {
        self.triggers().iter_mut().for_each(|t| *t = None);
    }

    /// Handles SET_IRQS for the MSI-X index: sets or removes the eventfds of a range of
    /// vectors, or fires them.
    pub fn set_irqs(&self, flags: u32, start: u32, count: u32, fds: Vec<File>) -> io::Result<()> {
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let end = start
            .checked_add(count)
            .filter(|&e| e <= u32::from(self.vectors))
            .ok_or_else(|| {
                invalid(format!(
                    "SET_IRQS for vectors {start}..+{count}, but the function has {}",
                    self.vectors
                ))
            })?;
        let range = start as usize..end as usize;
        match (
            flags & IRQ_SET_DATA_TYPE_MASK,
            flags & IRQ_SET_ACTION_TYPE_MASK,
        ) {
            (IRQ_SET_DATA_EVENTFD, IRQ_SET_ACTION_TRIGGER) => {
                if !fds.is_empty() && fds.len() != count as usize {
                    return Err(invalid(format!(
                        "SET_IRQS for {count} vectors came with {} eventfds",
                        fds.len()
                    )));
                }
                // No descriptors at all means "tear these vectors down".
                let mut fds = fds.into_iter();
                let mut triggers = self.triggers();
                for v in range {
                    triggers[v] = fds.next();
                }
                Ok(())
            }
            (IRQ_SET_DATA_NONE, IRQ_SET_ACTION_TRIGGER) => {
                if count == 0 {
                    // The vfio convention: DATA_NONE with count 0 disables them all.
                    self.clear_triggers();
                } else {
                    // A software trigger: it ignores Enable and Mask.
                    for v in range {
                        self.raise(v as u16);
                    }
                }
                Ok(())
            }
            (_, IRQ_SET_ACTION_MASK | IRQ_SET_ACTION_UNMASK) => Err(invalid(
                "MSI-X vectors are masked through the table, not SET_IRQS".into(),
            )),
            _ => Err(invalid(format!("unsupported SET_IRQS flags {flags:#x}"))),
        }
    }
}

/// Whether `fd` is what an MSI-X trigger must be: a non-blocking eventfd (QEMU's are).
/// `Err` says what it is instead.
pub fn check_trigger(fd: &File) -> Result<(), String> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    if link != "anon_inode:[eventfd]" {
        return Err(format!("the descriptor is {link}, not an eventfd"));
    }
    if !is_nonblocking(fd) {
        return Err("the eventfd is blocking; create it with EFD_NONBLOCK".into());
    }
    Ok(())
}

fn is_nonblocking(fd: &File) -> bool {
    // SAFETY: F_GETFL on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// Adds 1 to an eventfd the VMM handed over, without ever blocking on it: one that was
/// made blocking since SET_IRQS is not written (a write could block for as long as the
/// VMM wants), and a full counter fails with `WouldBlock`.
fn signal_eventfd(fd: &File) -> io::Result<()> {
    if !is_nonblocking(fd) {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "the VMM made the eventfd blocking after handing it over; not written",
        ));
    }
    let one = 1u64.to_ne_bytes();
    // SAFETY: write of 8 bytes we own to a descriptor we own.
    let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    if n == one.len() as isize {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    fn eventfd() -> File {
        // SAFETY: plain eventfd creation.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        // SAFETY: fresh fd we own.
        unsafe { File::from_raw_fd(fd) }
    }

    fn count(f: &mut File) -> u64 {
        let mut b = [0u8; 8];
        match f.read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    fn eventfd_trigger() -> u32 {
        IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER
    }

    #[test]
    fn signal_raises_and_the_line_delivers_to_the_vectors_eventfd() {
        let mut m = Msix::new(4).unwrap();
        let mut e = eventfd();
        m.line()
            .set_irqs(eventfd_trigger(), 2, 1, vec![e.try_clone().unwrap()])
            .unwrap();
        assert!(m.signal(2, true, false));
        assert_eq!(count(&mut e), 0, "raised, not yet delivered");
        assert!(m.line().is_raised());
        assert!(m.line().deliver().is_empty());
        assert_eq!(count(&mut e), 1);
        // A vector without an eventfd is dropped; nothing is left raised.
        assert!(m.signal(1, true, false));
        assert!(m.line().deliver().is_empty());
        assert!(!m.line().is_raised());
        assert!(!m.signal(4, true, false), "no such vector");
    }

    #[test]
    fn the_wake_fd_is_readable_exactly_while_vectors_are_raised() {
        let line = InterruptLine::new(2).unwrap();
        let readable = |line: &InterruptLine| {
            let mut p = libc::pollfd {
                fd: line.wake_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll of one pollfd we own, no waiting.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        assert!(!readable(&line));
        line.raise(0);
        line.raise(1);
        assert!(readable(&line));
        line.deliver();
        assert!(!readable(&line));
    }

    #[test]
    fn a_full_or_blocking_eventfd_is_not_written_and_says_so() {
        let line = InterruptLine::new(2).unwrap();
        let full = eventfd();
        let max = (u64::MAX - 1).to_ne_bytes();
        assert_eq!(
            // SAFETY: write of 8 bytes we own: the counter's maximum.
            unsafe { libc::write(full.as_raw_fd(), max.as_ptr().cast(), 8) },
            8
        );
        let blocking = eventfd();
        // SAFETY: F_SETFL on a descriptor we own: the client turns blocking on.
        unsafe { libc::fcntl(blocking.as_raw_fd(), libc::F_SETFL, 0) };
        line.set_irqs(eventfd_trigger(), 0, 2, vec![full, blocking])
            .unwrap();
        line.raise(0);
        line.raise(1);
        let failed = line.deliver();
        assert_eq!(failed.len(), 2);
        assert!(failed
            .iter()
            .all(|u| u.error.kind() == io::ErrorKind::WouldBlock));
    }

    #[test]
    fn triggers_must_be_non_blocking_eventfds() {
        assert!(check_trigger(&eventfd()).is_ok());
        let mut fds = [0; 2];
        // SAFETY: pipe into an array of two.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the pipe's descriptors are ours.
        let (r, _w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        assert!(
            check_trigger(&r).unwrap_err().contains("pipe"),
            "{:?}",
            check_trigger(&r)
        );
        // SAFETY: plain eventfd creation, blocking.
        let blocking = unsafe { File::from_raw_fd(libc::eventfd(0, 0)) };
        assert!(check_trigger(&blocking).unwrap_err().contains("blocking"));
    }

    #[test]
    fn disabled_or_masked_signals_become_pending_then_delivered() {
        let mut m = Msix::new(2).unwrap();
        let mut e = eventfd();
        m.line()
            .set_irqs(eventfd_trigger(), 0, 1, vec![e.try_clone().unwrap()])
            .unwrap();
        assert!(!m.signal(0, false, false));
        let mut pba = [0u8; 8];
        m.read(MsixArea::Pba(0), &mut pba);
        assert_eq!(pba[0], 1);
        m.deliver_pending(true, true);
        m.line().deliver();
        assert_eq!(count(&mut e), 0);
        m.deliver_pending(true, false);
        m.line().deliver();
        assert_eq!(count(&mut e), 1);
        m.read(MsixArea::Pba(0), &mut pba);
        assert_eq!(pba[0], 0);
    }

    #[test]
    fn table_is_storage_that_reset_masks() {
        let mut m = Msix::new(2).unwrap();
        m.write(MsixArea::Table(16), &0xfee0_0000u32.to_le_bytes());
        let mut b = [0u8; 4];
        m.read(MsixArea::Table(16), &mut b);
        assert_eq!(u32::from_le_bytes(b), 0xfee0_0000);
        m.reset();
        m.read(MsixArea::Table(16), &mut b);
        assert_eq!(u32::from_le_bytes(b), 0);
        m.read(MsixArea::Table(28), &mut b);
        assert_eq!(u32::from_le_bytes(b), VECTOR_MASKED);
    }

    #[test]
    fn bad_set_irqs_requests_are_refused() {
        let m = InterruptLine::new(2).unwrap();
        assert!(m
            .set_irqs(eventfd_trigger(), 1, 2, vec![eventfd(), eventfd()])
            .is_err());
        assert!(m
            .set_irqs(eventfd_trigger(), 0, 2, vec![eventfd()])
            .is_err());
        assert!(m.set_irqs(eventfd_trigger(), u32::MAX, 2, vec![]).is_err());
        assert!(m
            .set_irqs(IRQ_SET_DATA_NONE | IRQ_SET_ACTION_MASK, 0, 1, vec![])
            .is_err());
    }

    #[test]
    fn areas_are_bounded() {
        let m = Msix::new(16).unwrap();
        assert_eq!(m.area(MSIX_TABLE_OFFSET, 4), Some(MsixArea::Table(0)));
        assert_eq!(
            m.area(MSIX_TABLE_OFFSET + 16 * 16 - 4, 4),
            Some(MsixArea::Table(252))
        );
        assert_eq!(m.area(MSIX_TABLE_OFFSET + 16 * 16, 4), None);
        assert_eq!(m.area(MSIX_PBA_OFFSET + 4, 4), Some(MsixArea::Pba(4)));
        assert_eq!(m.area(MSIX_PBA_OFFSET + 8, 4), None);
        assert_eq!(m.area(u64::MAX, 4), None);
    }
}
