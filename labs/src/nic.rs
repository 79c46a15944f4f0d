//! What a lab's code may do to the device: the [`Nic`] trait, the six things a driver does
//! to a PCIe function (config space, BAR0 registers, the doorbell BAR, DMA memory,
//! interrupts, and waiting). Two implementations:
//!
//! - [`LabDevice`], the checkers' device: rnicd's own device code in this process
//!   (`rnic-harness`), which works only while the driver [pauses](Nic::pause), so that a
//!   solution runs the same way every time. It records every access in order
//!   ([`Access`]), and with each doorbell store a copy of the memory the checker watches,
//!   which is how a checker can tell that a doorbell was rung before its WQE was written.
//! - [`TransportNic`], any function the guest driver can open: a vfio-user socket of a
//!   running rnicd, or a PCI function in a VM (`rnic-lab run`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use rnic_abi::pci::cfg;
use rnic_device::fabric::faults::{FaultCounters, FaultSpec};
use rnic_driver::transport::{DmaBuffer, Transport};
use rnic_harness::bench::{Bench, Net};
use rnic_harness::transport::{lock, InProcess, IOVA_BASE};

/// Every failure is a sentence for the student.
pub type Result<T> = std::result::Result<T, String>;

/// A PCI function as a driver reaches it. Offsets are the datasheet's: config space
/// (§2), BAR0 (§3), the doorbell BAR (§4.2).
pub trait Nic {
    /// Where the function is, for messages.
    fn describe(&self) -> String;
    /// Reads config space.
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()>;
    /// Writes config space.
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()>;
    /// Reads the 32-bit BAR0 register at `offset`.
    fn reg_read(&self, offset: u64) -> Result<u32>;
    /// Writes the 32-bit BAR0 register at `offset`.
    fn reg_write(&self, offset: u64, value: u32) -> Result<()>;
    /// Loads the 32-bit word at `offset` of the doorbell BAR (BAR2).
    fn db_read(&self, offset: u64) -> u32;
    /// Stores the 32-bit word at `offset` of the doorbell BAR, with a full fence before
    /// it (so the ring writes before it are visible first) and after it (so a later load
    /// of `NOTIFY_REQUEST` cannot pass it), as §4.4 asks.
    fn db_write(&self, offset: u64, value: u32);
    /// `size` bytes (whole pages) of zeroed memory the device can reach; its
    /// [`DmaBuffer::device_addr`] is what the device is told.
    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer>;
    /// What the VMM does for MSI-X: `vectors` vectors wired so that
    /// [`Nic::wait_interrupt`] sees them. Enabling MSI-X in the capability's Message
    /// Control is the driver's part (§3.5); some functions (vfio-user, VFIO) do it here
    /// too.
    fn enable_msix(&self, vectors: u16) -> Result<()>;
    /// Waits (at most a second) for MSI-X `vector`; whether it fired.
    fn wait_interrupt(&self, vector: u16) -> Result<bool>;
    /// What a driver does between two looks at memory the device writes: lets the device
    /// work. Every wait loop calls it; the lab device works only then.
    fn pause(&self);

    /// Reads a 16-bit config register.
    fn config_read16(&self, offset: usize) -> Result<u16> {
        let mut b = [0u8; 2];
        self.config_read(offset as u16, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    /// Reads a 32-bit config register.
    fn config_read32(&self, offset: usize) -> Result<u32> {
        let mut b = [0u8; 4];
        self.config_read(offset as u16, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    /// Writes a 16-bit config register.
    fn config_write16(&self, offset: usize, value: u16) -> Result<()> {
        self.config_write(offset as u16, &value.to_le_bytes())
    }
    /// Writes a 32-bit config register.
    fn config_write32(&self, offset: usize, value: u32) -> Result<()> {
        self.config_write(offset as u16, &value.to_le_bytes())
    }
}

/// Polls `done` until it says yes, pausing between looks; fails after `limit` looks
/// (the lab device gives up sooner: see [`LabDevice`]).
pub fn wait_for(nic: &dyn Nic, what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let start = Instant::now();
    while !done()? {
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!("timed out after 10 s waiting for {what}"));
        }
        nic.pause();
    }
    Ok(())
}

/// One access of the driver to the function, in the order made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// A config-space read of `len` bytes at `offset`, which gave `value`.
    ConfigRead { offset: u16, len: usize, value: u64 },
    /// A config-space write.
    ConfigWrite { offset: u16, len: usize, value: u64 },
    /// A BAR0 read.
    RegRead { offset: u64, value: u32 },
    /// A BAR0 write.
    RegWrite { offset: u64, value: u32 },
    /// A doorbell-BAR load.
    DbRead { offset: u64, value: u32 },
    /// A doorbell-BAR store, with what the watched memory held at that moment
    /// (name, bytes), in the order of [`LabDevice::watch`].
    DbWrite {
        offset: u64,
        value: u32,
        watched: Vec<(String, Vec<u8>)>,
    },
    /// DMA memory handed out.
    Alloc { addr: u64, len: usize },
    /// MSI-X set up with this many vectors.
    EnableMsix { vectors: u16 },
    /// A wait for an interrupt and whether it came.
    WaitInterrupt { vector: u16, fired: bool },
    /// `count` pauses in a row.
    Pause { count: u32 },
}

/// How long the lab device lets a driver wait while nothing happens before it stops the
/// solution: long enough for the device's retransmission timers, short enough for a
/// student waiting for a verdict.
const IDLE_LIMIT: Duration = Duration::from_secs(3);

/// The checkers' device: a PF and one VF of rnicd's device code in this process; the
/// driver under test gets the VF (or the PF, [`LabDevice::pf`]; or several functions of a
/// larger device, [`LabDevice::group`]). Nothing happens on the
/// device unless the driver pauses or waits for an interrupt.
pub struct LabDevice {
    bench: Rc<Bench>,
    index: usize,
    t: InProcess,
    trace: RefCell<Vec<Access>>,
    watched: RefCell<Vec<(String, u64, usize)>>,
    last_progress: Rc<Cell<Instant>>,
    /// When the device went to sleep (§4.3), if it sleeps: one engine for every
    /// function, so shared by the [`LabDevice::group`] of a device.
    asleep: Rc<Cell<Option<Instant>>>,
}

/// How long the sleeping lab device waits for a kick before it wakes by itself, as a
/// timer would wake rnicd: a driver that never kicks is slow here (and its checker says
/// why), not stuck.
const NAP: Duration = Duration::from_millis(20);

impl LabDevice {
    /// A fresh device; the driver gets VF 0.
    pub fn new() -> Self {
        Self::with(Net::None, 1)
    }

    /// A fresh device; the driver gets the PF.
    pub fn pf() -> Self {
        Self::with(Net::None, 0)
    }

    /// A fresh device whose switch writes every frame to `pcap` (as `rnicd --pcap`).
    pub fn capturing(pcap: &std::path::Path) -> Self {
        Self::with(Net::Capture(pcap.to_path_buf()), 1)
    }

    /// A fresh device whose switch injects `faults` (not a spec that changes nothing)
    /// into every frame, those between the function's own QPs included (as `rnicd
    /// --net-faults`, §7.14); the driver gets VF 0.
    pub fn with_faults(faults: FaultSpec) -> Self {
        Self::on(Bench::with_faults(2, Net::None, faults), 1)
    }

    /// From now on the switch injects `faults` (a fresh injector: its counts start at 0);
    /// `FaultSpec::default()` makes the wire perfect. Only on a device made by
    /// [`LabDevice::with_faults`]: on another one, frames between functions go straight to
    /// their inboxes and never meet the faults.
    pub fn set_faults(&self, faults: FaultSpec) {
        self.bench.set_faults(faults);
    }

    /// What the switch's fault injector did since it was last set.
    pub fn fault_counters(&self) -> FaultCounters {
        self.bench.fault_counters().unwrap_or_default()
    }

    fn with(net: Net, index: usize) -> Self {
        Self::on(Bench::new(2, net), index)
    }

    fn on(bench: Bench, index: usize) -> Self {
        let bench = Rc::new(bench);
        let t = bench.transport(index);
        Self {
            bench,
            index,
            t,
            trace: RefCell::new(Vec::new()),
            watched: RefCell::new(Vec::new()),
            last_progress: Rc::new(Cell::new(Instant::now())),
            asleep: Rc::new(Cell::new(None)),
        }
    }

    /// The accesses so far.
    pub fn trace(&self) -> Vec<Access> {
        self.trace.borrow().clone()
    }

    /// Forgets the accesses so far (a checker's own set-up is not the student's).
    pub fn clear_trace(&self) {
        self.trace.borrow_mut().clear();
    }

    /// From now on, every doorbell store records a copy of the `len` bytes of DMA memory
    /// at device address `addr`, under `name`.
    pub fn watch(&self, name: &str, addr: u64, len: usize) {
        self.watched.borrow_mut().push((name.into(), addr, len));
    }

    /// `len` bytes of the driver's DMA memory at device address `addr`, as they are now.
    pub fn memory(&self, addr: u64, len: usize) -> Vec<u8> {
        let ram = self.bench.rams[self.index].bytes();
        let start = addr
            .checked_sub(IOVA_BASE)
            .map(|o| o as usize)
            .filter(|&o| o + len <= ram.len());
        start.map_or_else(|| vec![0; len], |o| ram[o..o + len].to_vec())
    }

    /// The function under test (its counters, for the checkers).
    pub fn function(&self) -> &rnic_device::function::Function {
        &self.bench.functions[self.index]
    }

    /// Lets the device finish what it has and go to sleep (§4.3), as it does between a
    /// driver's commands when nothing else runs: the next doorbell then needs a kick.
    /// Records nothing.
    pub fn idle(&self) {
        for _ in 0..1000 {
            if self.asleep.get().is_some() {
                return;
            }
            self.pass();
        }
    }

    /// One pass of the engine as rnicd's engine thread makes it (§4.3): after a pass with
    /// nothing to do it sets `NOTIFY_REQUEST`, takes a last look, and sleeps until a kick
    /// (or, here, a short nap). Whether the pass did anything.
    fn pass(&self) -> bool {
        let f = &self.bench.functions[self.index];
        // Like rnicd's engine, in every function's pages (§4.3).
        let notify = |on: bool| {
            self.bench
                .functions
                .iter()
                .for_each(|f| f.request_notify(on))
        };
        if let Some(since) = self.asleep.get() {
            if since.elapsed() < NAP {
                return false;
            }
            self.wake();
        }
        let mut progress = lock(&self.bench.engine).step().progress;
        if !progress {
            notify(true);
            progress = lock(&self.bench.engine).step().progress;
            if progress {
                notify(false);
            } else {
                self.asleep.set(Some(Instant::now()));
            }
        }
        f.interrupts().deliver();
        progress
    }

    fn wake(&self) {
        self.asleep.set(None);
        for f in &self.bench.functions {
            f.request_notify(false);
        }
    }

    fn record(&self, access: Access) {
        self.trace.borrow_mut().push(access);
    }

    /// A device of `count` functions (the PF and `count - 1` VFs) of which the driver under
    /// test (or the checker, at register level) holds those of `driven` (0 the PF, n VF
    /// n - 1): one `LabDevice` each, with its own trace, all on one engine that sleeps and
    /// wakes for all of them (§4.3). The functions of `shared` share one guest RAM, as the
    /// functions of one guest do (§12.8 "Host transport"). The bench is for the checker's
    /// own drivers of the other functions ([`Bench::open`]).
    pub fn group(count: usize, driven: &[usize], shared: &[usize]) -> (Rc<Bench>, Vec<LabDevice>) {
        let mut bench = Bench::new(count, Net::None);
        for &i in shared.iter().skip(1) {
            bench.share_ram(shared[0], i);
        }
        let bench = Rc::new(bench);
        let last_progress = Rc::new(Cell::new(Instant::now()));
        let asleep = Rc::new(Cell::new(None));
        let devices = driven
            .iter()
            .map(|&index| Self {
                bench: bench.clone(),
                index,
                t: bench.transport(index),
                trace: RefCell::new(Vec::new()),
                watched: RefCell::new(Vec::new()),
                last_progress: last_progress.clone(),
                asleep: asleep.clone(),
            })
            .collect();
        (bench, devices)
    }
}

impl Default for LabDevice {
    fn default() -> Self {
        Self::new()
    }
}

fn le(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
    u64::from_le_bytes(b)
}

impl Nic for LabDevice {
    fn describe(&self) -> String {
        format!("the lab device ({})", self.t.describe())
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        self.t
            .config_read(offset, buf)
            .map_err(|e| format!("config read at {offset:#x}: {e}"))?;
        self.record(Access::ConfigRead {
            offset,
            len: buf.len(),
            value: le(buf),
        });
        Ok(())
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        self.record(Access::ConfigWrite {
            offset,
            len: data.len(),
            value: le(data),
        });
        self.t
            .config_write(offset, data)
            .map_err(|e| format!("config write at {offset:#x}: {e}"))
    }

    fn reg_read(&self, offset: u64) -> Result<u32> {
        let value = self
            .t
            .reg_read32(offset)
            .map_err(|e| format!("BAR0 read at {offset:#x}: {e}"))?;
        self.record(Access::RegRead { offset, value });
        Ok(value)
    }

    fn reg_write(&self, offset: u64, value: u32) -> Result<()> {
        self.record(Access::RegWrite { offset, value });
        if offset == rnic_abi::regs::DOORBELL_KICK {
            self.wake();
        }
        self.t
            .reg_write32(offset, value)
            .map_err(|e| format!("BAR0 write at {offset:#x}: {e}"))
    }

    fn db_read(&self, offset: u64) -> u32 {
        check_db_offset(offset);
        let value = self.t.doorbells().read32(offset);
        self.record(Access::DbRead { offset, value });
        value
    }

    fn db_write(&self, offset: u64, value: u32) {
        check_db_offset(offset);
        let watched = self
            .watched
            .borrow()
            .iter()
            .map(|(name, addr, len)| (name.clone(), self.memory(*addr, *len)))
            .collect();
        self.record(Access::DbWrite {
            offset,
            value,
            watched,
        });
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.t.doorbells().write32(offset, value);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        let buf = self
            .t
            .alloc_dma(size)
            .map_err(|e| format!("DMA memory: {e}"))?;
        self.record(Access::Alloc {
            addr: buf.device_addr(0),
            len: buf.len(),
        });
        Ok(buf)
    }

    fn enable_msix(&self, vectors: u16) -> Result<()> {
        self.record(Access::EnableMsix { vectors });
        self.t
            .wire_vectors(vectors)
            .map_err(|e| format!("MSI-X: {e}"))
    }

    fn wait_interrupt(&self, vector: u16) -> Result<bool> {
        // A second of the device's time: passes until the vector fires or it idles.
        let start = Instant::now();
        let fired = loop {
            if self
                .t
                .wait_interrupt(vector, Duration::ZERO)
                .map_err(|e| format!("interrupt {vector}: {e}"))?
            {
                break true;
            }
            if start.elapsed() > Duration::from_secs(1) {
                break false;
            }
        };
        self.record(Access::WaitInterrupt { vector, fired });
        Ok(fired)
    }

    fn pause(&self) {
        let progress = self.pass();
        let now = Instant::now();
        if progress {
            self.last_progress.set(now);
        } else if now.duration_since(self.last_progress.get()) > IDLE_LIMIT {
            // Unwinds to the checker, which reports it as the step's failure.
            self.last_progress.set(now);
            panic!(
                "the driver kept waiting while the device had nothing to do for {IDLE_LIMIT:?}: \
                 what it waits for will not happen"
            );
        }
        let mut trace = self.trace.borrow_mut();
        match trace.last_mut() {
            Some(Access::Pause { count }) => *count += 1,
            _ => trace.push(Access::Pause { count: 1 }),
        }
    }
}

/// The doorbell BAR is 64 KiB of 32-bit words; anything else is the driver's bug, which
/// the lab reports rather than letting the mapping's bounds check abort the process.
fn check_db_offset(offset: u64) {
    if !offset.is_multiple_of(4) || offset + 4 > rnic_abi::doorbell::BAR_SIZE {
        panic!("doorbell BAR access at {offset:#x}: outside the BAR or not 32-bit aligned (§4.2)");
    }
}

/// Any function the guest driver's transports open, for running a solution against a
/// real rnicd or in a VM. Records nothing.
pub struct TransportNic(pub Box<dyn Transport>);

impl Nic for TransportNic {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        self.0.config_read(offset, buf).map_err(|e| e.to_string())
    }
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        self.0.config_write(offset, data).map_err(|e| e.to_string())
    }
    fn reg_read(&self, offset: u64) -> Result<u32> {
        self.0.reg_read32(offset).map_err(|e| e.to_string())
    }
    fn reg_write(&self, offset: u64, value: u32) -> Result<()> {
        self.0.reg_write32(offset, value).map_err(|e| e.to_string())
    }
    fn db_read(&self, offset: u64) -> u32 {
        check_db_offset(offset);
        self.0.doorbells().read32(offset)
    }
    fn db_write(&self, offset: u64, value: u32) {
        check_db_offset(offset);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.0.doorbells().write32(offset, value);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.0.alloc_dma(size).map_err(|e| e.to_string())
    }
    fn enable_msix(&self, vectors: u16) -> Result<()> {
        match self.0.enable_interrupts(vectors) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("{} cannot deliver interrupts", self.0.kind())),
            Err(e) => Err(e.to_string()),
        }
    }
    fn wait_interrupt(&self, vector: u16) -> Result<bool> {
        self.0
            .wait_interrupt(vector, Duration::from_secs(1))
            .map_err(|e| e.to_string())
    }
    fn pause(&self) {
        std::thread::yield_now();
    }
}

/// The first offset of config space's capability list with ID `id` (§2.3), walking it
/// as a driver does; for the checkers' own view of the truth.
pub fn find_capability(nic: &dyn Nic, id: u8) -> Result<Option<u16>> {
    let mut at = nic.config_read16(cfg::CAP_PTR)? & 0xFC;
    for _ in 0..48 {
        if at == 0 {
            return Ok(None);
        }
        let header = nic.config_read16(usize::from(at))?;
        if header as u8 == id {
            return Ok(Some(at));
        }
        at = (header >> 8) & 0xFC;
    }
    Err("the capability list does not end".into())
}
