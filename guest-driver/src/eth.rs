//! The function's Ethernet queues ([`rnic_abi::eth`], datasheet §15): one send ring and
//! one receive ring of whole Ethernet frames, driven by polling.
//!
//! This is the smallest driver of the NIC side of a function: what the kernel's `rnic.ko`
//! does with NAPI and interrupts, done here by a loop, so that a tool or a test on the
//! host (over vfio-user) or in a guest can send and receive frames. Each ring slot has a
//! buffer of its own; a frame to send is copied into the slot's buffer, and a received
//! frame is copied out of it before the buffer is posted again.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use rnic_abi::cmd::Opcode;
use rnic_abi::doorbell::NOTIFY_REQUEST;
use rnic_abi::eth::{
    self, CreateEthQueueReq, CreateEthQueueResp, EthDesc, EthQueueReq, EthQueueStats, MacEntry,
    QueryEthResp, SetEthReq,
};
use rnic_abi::regs::{self, NO_VECTOR};
use rnic_abi::verbs::DoorbellSlot;
use rnic_abi::PAGE_SIZE;
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Error, Result};
use crate::transport::{DmaBuffer, Transport};
use crate::verbs::ring::{Doorbells, ListKinds, Ring};
use crate::Device;

/// The MSI-X vector of both queues' completions, when [`EthOptions::interrupts`].
pub const ETH_VECTOR: u16 = 2;
/// The MSI-X vector of link and MAC changes, when [`EthOptions::interrupts`].
pub const ETH_EVENT_VECTOR: u16 = 3;

/// How [`EthPort::open_with`] sets a port up.
#[derive(Debug, Clone, Copy)]
pub struct EthOptions {
    /// Slots of each ring: a power of two, 8 to 4096.
    pub entries: u32,
    /// MTU, 68 to 9000.
    pub mtu: u32,
    /// `SET_ETH` receive mode ([`rnic_abi::eth::RX_ENABLE`] and friends).
    pub rx_mode: u32,
    /// Completions signal [`ETH_VECTOR`] while armed ([`EthPort::arm`]), link changes
    /// [`ETH_EVENT_VECTOR`]; otherwise the port is polled only.
    pub interrupts: bool,
    /// Least time between two interrupts of a queue, µs.
    pub moderation_usecs: u32,
}

impl Default for EthOptions {
    fn default() -> Self {
        Self {
            entries: 64,
            mtu: eth::DEFAULT_MTU,
            rx_mode: eth::RX_ENABLE,
            interrupts: false,
            moderation_usecs: 0,
        }
    }
}

/// The doorbell page the Ethernet queues' slots are asked for.
const DOORBELL_PAGE: u32 = 1;
/// Bytes of each slot's buffer.
pub const BUFFER_SIZE: usize = 16 * 1024;
/// Bytes of a descriptor.
const DESC: usize = size_of::<EthDesc>();

/// One ring and the buffers of its slots.
struct Queue {
    kind: u8,
    number: u32,
    ring: Ring,
    buffers: DmaBuffer,
    buffer_size: usize,
    slot: DoorbellSlot,
    /// Descriptors posted, in all.
    posted: u32,
    /// Descriptors the driver took back, in all.
    done: u32,
    /// The arm sequence last written.
    arm_sequence: u16,
}

impl Queue {
    fn create(
        dev: &Device,
        kind: u8,
        buffer_size: usize,
        o: &EthOptions,
        vector: Option<u16>,
    ) -> Result<Self> {
        let entries = o.entries;
        let t = dev.transport();
        let caps = dev.query_device()?.caps;
        let ring = Ring::new(t, entries, DESC as u32, ListKinds::of(caps))?;
        let buffers = t.alloc_dma(entries as usize * buffer_size)?;
        let req = CreateEthQueueReq {
            kind,
            reserved0: 0,
            msix_vector: vector.unwrap_or(NO_VECTOR as u16),
            entries,
            doorbell_page: DOORBELL_PAGE,
            moderation_usecs: o.moderation_usecs,
            ring: ring.page_list(),
        };
        let bytes = dev.command(
            Opcode::CreateEthQueue,
            req.as_bytes(),
            size_of::<CreateEthQueueResp>(),
        )?;
        let resp = CreateEthQueueResp::read_from_bytes(&bytes)
            .map_err(|_| Error::Device("CREATE_ETH_QUEUE answered a short response".into()))?;
        let slot = Doorbells::check_slot(t, resp.doorbell)?;
        Ok(Self {
            kind,
            number: resp.queue,
            ring,
            buffers,
            buffer_size,
            slot,
            posted: 0,
            done: 0,
            arm_sequence: 0,
        })
    }

    /// Arms the queue: its vector fires at the next completion the driver has not seen
    /// (at once if there is one already).
    fn arm(&mut self, t: &dyn Transport) -> Result<()> {
        self.arm_sequence = self.arm_sequence.wrapping_add(1);
        let word = eth::arm_word(self.arm_sequence, self.done);
        Doorbells::write_slot(t, self.slot, 4, word);
        // A sleeping device must see the arm word, which may ask for an interrupt at once.
        self.notify(t)
    }

    fn entries(&self) -> u32 {
        self.ring.entries()
    }

    /// Byte offset of descriptor `index` (a free-running count) in the ring.
    fn desc_at(&self, index: u32) -> usize {
        self.ring.offset(index)
    }

    /// The buffer of ring slot `index`: its offset in `buffers` and device address.
    fn buffer(&self, index: u32) -> (usize, u64) {
        let at = (index % self.entries()) as usize * self.buffer_size;
        (at, self.buffers.device_addr(at))
    }

    /// Writes descriptor `index` with `status` 0 last-but-one and publishes it.
    fn write_desc(&self, index: u32, desc: EthDesc) {
        let at = self.desc_at(index);
        self.ring.buf().write(at, &desc.as_bytes()[..14]);
        self.ring.buf().store_u16(at + 14, 0);
    }

    /// The status the device wrote back into descriptor `index` (0: not yet).
    fn status(&self, index: u32) -> u16 {
        self.ring.buf().load_u16(self.desc_at(index) + 14)
    }

    /// Tells the device how many descriptors are posted: the count into the slot, then
    /// the notification protocol of §4 for the slot's page (no `RUNG_BITMAP` bit: the
    /// device reads Ethernet slots on every pass, §15.2).
    fn ring_doorbell(&self, t: &dyn Transport) -> Result<()> {
        Doorbells::write_slot(t, self.slot, 0, self.posted);
        self.notify(t)
    }

    /// The notification protocol after a store into the slot: full fence, then a kick if
    /// the device asked for one.
    fn notify(&self, t: &dyn Transport) -> Result<()> {
        fence(Ordering::SeqCst);
        let page = u64::from(self.slot.page) * PAGE_SIZE;
        if t.doorbells().read32(page + NOTIFY_REQUEST) != 0 {
            t.reg_write32(regs::DOORBELL_KICK, self.slot.page)?;
        }
        Ok(())
    }
}

/// A frame to send that went wrong: the error the device wrote back
/// ([`rnic_abi::eth::desc_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendError(pub u8);

/// A function's Ethernet port: its send and receive queues, buffers posted.
pub struct EthPort<'d> {
    dev: &'d Device,
    /// Whether the queues signal [`ETH_VECTOR`].
    interrupts: bool,
    tx: Queue,
    rx: Queue,
    /// Errors of sent frames the caller has not taken yet.
    failed: Vec<SendError>,
}

impl std::fmt::Debug for EthPort<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EthPort")
            .field("tx_posted", &self.tx.posted)
            .field("rx_posted", &self.rx.posted)
            .finish_non_exhaustive()
    }
}

impl<'d> EthPort<'d> {
    /// Creates a send and a receive queue of `entries` slots (a power of two, 8 to 4096)
    /// with buffers of `buffer_size` bytes (at least the longest frame of `mtu`), posts
    /// every receive buffer, and enables reception with MTU `mtu` and `rx_mode`
    /// ([`rnic_abi::eth::RX_ENABLE`] and friends).
    pub fn open(dev: &'d Device, entries: u32, mtu: u32, rx_mode: u32) -> Result<Self> {
        Self::open_with(
            dev,
            &EthOptions {
                entries,
                mtu,
                rx_mode,
                ..EthOptions::default()
            },
        )
    }

    /// [`EthPort::open`] with every option.
    pub fn open_with(dev: &'d Device, o: &EthOptions) -> Result<Self> {
        let (entries, mtu, rx_mode) = (o.entries, o.mtu, o.rx_mode);
        if dev.query_device()?.caps & regs::CAP_ETH == 0 {
            return Err(Error::Unsupported(
                "Ethernet queues: the device does not report CAP_ETH (an rnicd older than ABI 1.7?)",
            ));
        }
        // Room for the longest frame of any MTU, and more: a driver may try to send a
        // longer one, which the device refuses (a test of it does).
        let buffer_size = BUFFER_SIZE;
        let interrupts = o.interrupts
            && dev.interrupts()
            && dev.transport().enable_interrupts(ETH_EVENT_VECTOR + 1)?;
        if o.interrupts && !interrupts {
            return Err(Error::Unsupported(
                "Ethernet interrupts: this transport delivers no MSI-X interrupts to the driver",
            ));
        }
        let vector = interrupts.then_some(ETH_VECTOR);
        let tx = Queue::create(dev, eth::KIND_TX, buffer_size, o, vector)?;
        let rx = match Queue::create(dev, eth::KIND_RX, buffer_size, o, vector) {
            Ok(rx) => rx,
            Err(e) => {
                let _ = destroy(dev, &tx);
                return Err(e);
            }
        };
        let mut port = Self {
            dev,
            interrupts,
            tx,
            rx,
            failed: Vec::new(),
        };
        for _ in 0..entries {
            port.post_rx_buffer();
        }
        port.rx.ring_doorbell(dev.transport())?;
        port.set(mtu, rx_mode, &[])?;
        Ok(port)
    }

    /// Sets the MTU, the receive mode and the multicast addresses (`SET_ETH`).
    pub fn set(&self, mtu: u32, rx_mode: u32, multicast: &[[u8; 6]]) -> Result<()> {
        let req = SetEthReq {
            mtu,
            rx_mode,
            event_vector: if self.interrupts {
                ETH_EVENT_VECTOR
            } else {
                NO_VECTOR as u16
            },
            reserved: 0,
            mc_count: multicast.len() as u32,
        };
        let mut body = req.as_bytes().to_vec();
        for mac in multicast {
            body.extend_from_slice(
                MacEntry {
                    mac: *mac,
                    reserved: 0,
                }
                .as_bytes(),
            );
        }
        self.dev.command(Opcode::SetEth, &body, 0).map(drop)
    }

    /// Arms both queues (NAPI's "done polling"): [`ETH_VECTOR`] fires once at the next
    /// completion the driver has not taken, at once if there is one.
    pub fn arm(&mut self) -> Result<()> {
        let t = self.dev.transport();
        self.tx.arm(t)?;
        self.rx.arm(t)
    }

    /// Waits up to `timeout` for [`ETH_VECTOR`]; false if it did not fire.
    pub fn wait_interrupt(&self, timeout: Duration) -> Result<bool> {
        self.dev.transport().wait_interrupt(ETH_VECTOR, timeout)
    }

    /// Waits up to `timeout` for [`ETH_EVENT_VECTOR`] (a link or MAC change).
    pub fn wait_event(&self, timeout: Duration) -> Result<bool> {
        self.dev
            .transport()
            .wait_interrupt(ETH_EVENT_VECTOR, timeout)
    }

    /// The function's Ethernet state and counters (`QUERY_ETH`).
    pub fn query(&self) -> Result<QueryEthResp> {
        query(self.dev)
    }

    /// The counters of the send queue (`tx`) or the receive queue.
    pub fn queue_stats(&self, tx: bool) -> Result<EthQueueStats> {
        let q = if tx { &self.tx } else { &self.rx };
        let req = EthQueueReq {
            kind: q.kind,
            reserved0: [0; 3],
            queue: q.number,
        };
        let bytes = self.dev.command(
            Opcode::QueryEthQueue,
            req.as_bytes(),
            size_of::<EthQueueStats>(),
        )?;
        EthQueueStats::read_from_bytes(&bytes)
            .map_err(|_| Error::Device("QUERY_ETH_QUEUE answered a short response".into()))
    }

    /// Sends one frame made of `parts` (each one descriptor; several make a gathered
    /// frame). Waits up to a second for a free slot. Errors the device reports come back
    /// from [`EthPort::take_send_errors`], as a NIC's do.
    pub fn send(&mut self, parts: &[&[u8]]) -> Result<()> {
        if let Some(p) = parts.iter().find(|p| p.len() > self.tx.buffer_size) {
            return Err(Error::Device(format!(
                "a part of {} bytes does not fit a {BUFFER_SIZE}-byte buffer",
                p.len()
            )));
        }
        let n = parts.len() as u32;
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.tx.posted.wrapping_sub(self.tx.done) + n > self.tx.entries() {
            self.reclaim();
            if Instant::now() > deadline {
                self.dev.check_alive()?;
                return Err(Error::Device("the send queue did not move for 1 s".into()));
            }
            std::thread::yield_now();
        }
        for (i, part) in parts.iter().enumerate() {
            let index = self.tx.posted;
            let (at, addr) = self.tx.buffer(index);
            let len = part.len();
            self.tx.buffers.write(at, part);
            let more = i + 1 < parts.len();
            self.tx.write_desc(
                index,
                EthDesc {
                    addr,
                    len: len as u32,
                    flags: if more { eth::TX_MORE } else { 0 },
                    status: 0,
                },
            );
            self.tx.posted = self.tx.posted.wrapping_add(1);
        }
        self.tx.ring_doorbell(self.dev.transport())
    }

    /// Takes back the send descriptors the device is done with, noting their errors.
    /// Returns how many it took.
    pub fn reclaim(&mut self) -> u32 {
        let mut n = 0;
        while self.tx.done != self.tx.posted {
            let status = self.tx.status(self.tx.done);
            if status & eth::DESC_DONE == 0 {
                break;
            }
            let error = (status >> eth::DESC_ERROR_SHIFT) as u8;
            if error != eth::desc_error::NONE {
                self.failed.push(SendError(error));
            }
            self.tx.done = self.tx.done.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// Waits until every frame sent has been taken by the device, or `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reclaim();
            if self.tx.done == self.tx.posted {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.dev.check_alive()?;
                return Err(Error::Device(format!(
                    "{} sent frames not taken by the device in {timeout:?}",
                    self.tx.posted.wrapping_sub(self.tx.done)
                )));
            }
            std::thread::yield_now();
        }
    }

    /// The errors of sent frames since last asked (one per descriptor).
    pub fn take_send_errors(&mut self) -> Vec<SendError> {
        self.reclaim();
        std::mem::take(&mut self.failed)
    }

    /// The next received frame, waiting up to `timeout`; `None` if none came.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        loop {
            let index = self.rx.done;
            let status = self.rx.status(index);
            if status & eth::DESC_DONE != 0 {
                let at = self.rx.desc_at(index);
                let len = self.rx.ring.buf().load_u32(at + 8) as usize;
                let (buf_at, _) = self.rx.buffer(index);
                let mut frame = vec![0u8; len.min(self.rx.buffer_size)];
                self.rx.buffers.read(buf_at, &mut frame);
                self.rx.done = self.rx.done.wrapping_add(1);
                self.post_rx_buffer();
                self.rx.ring_doorbell(self.dev.transport())?;
                return Ok(Some(frame));
            }
            if Instant::now() > deadline {
                self.dev.check_alive()?;
                return Ok(None);
            }
            std::thread::yield_now();
        }
    }

    /// The device address of slot `index`'s buffer of the send (`tx`) or receive queue.
    pub fn buffer_address(&self, tx: bool, index: u32) -> u64 {
        let q = if tx { &self.tx } else { &self.rx };
        q.buffer(index).1
    }

    /// Posts `desc` as it is, whatever it says, on the send (`tx`) or receive queue and
    /// rings the doorbell: a hostile driver's descriptor, for tests and the fuzzer. The
    /// port's own bookkeeping follows (the device completes it like any other).
    pub fn post_raw(&mut self, tx: bool, desc: EthDesc) -> Result<()> {
        let q = if tx { &mut self.tx } else { &mut self.rx };
        let at = q.desc_at(q.posted);
        q.ring.buf().write(at, desc.as_bytes());
        q.posted = q.posted.wrapping_add(1);
        q.ring_doorbell(self.dev.transport())
    }

    /// Writes `value` at `plus` (0: the posted count, 4: the arm word) into the doorbell
    /// slot of the send (`tx`) or receive queue, as a hostile driver may, and follows the
    /// notification protocol.
    pub fn write_slot_raw(&self, tx: bool, plus: u64, value: u32) -> Result<()> {
        let q = if tx { &self.tx } else { &self.rx };
        let t = self.dev.transport();
        Doorbells::write_slot(t, q.slot, plus, value);
        q.notify(t)
    }

    /// Posts the buffer of the next receive slot (not yet told to the device).
    fn post_rx_buffer(&mut self) {
        let index = self.rx.posted;
        let (_, addr) = self.rx.buffer(index);
        self.rx.write_desc(
            index,
            EthDesc {
                addr,
                len: self.rx.buffer_size as u32,
                flags: 0,
                status: 0,
            },
        );
        self.rx.posted = self.rx.posted.wrapping_add(1);
    }
}

impl Drop for EthPort<'_> {
    fn drop(&mut self) {
        // Reception off first, then the queues; their buffers go with `self`.
        let _ = self.set(eth::DEFAULT_MTU, 0, &[]);
        let _ = destroy(self.dev, &self.rx);
        let _ = destroy(self.dev, &self.tx);
    }
}

fn destroy(dev: &Device, q: &Queue) -> Result<()> {
    let req = EthQueueReq {
        kind: q.kind,
        reserved0: [0; 3],
        queue: q.number,
    };
    dev.command(Opcode::DestroyEthQueue, req.as_bytes(), 0)
        .map(drop)
}

/// A function's Ethernet state and counters (`QUERY_ETH`), with or without queues.
pub fn query(dev: &Device) -> Result<QueryEthResp> {
    let bytes = dev.command(Opcode::QueryEth, &[], size_of::<QueryEthResp>())?;
    QueryEthResp::read_from_bytes(&bytes)
        .map_err(|_| Error::Device("QUERY_ETH answered a short response".into()))
}
