//! The device side of the command queue: a virtio split ring that carries commands from
//! the driver and their responses back (layouts in `rnic_abi::cmd`).

use std::num::Wrapping;
use std::sync::atomic::Ordering;

use rnic_abi::cmd::{
    CmdHeader, RespHeader, Status, CMDQ_AVAIL_ALIGN, CMDQ_DESC_ALIGN, CMDQ_MAX_SIZE,
    CMDQ_USED_ALIGN, CMD_MAX_LEN,
};
use rnic_abi::regs::{
    QueueRegs, CMDQ_ENABLE, ERR_BUS_MASTER, ERR_CMDQ_ADDRESS, ERR_CMDQ_BROKEN, ERR_CMDQ_DMA,
    ERR_CMDQ_SIZE, ERR_CMDQ_VECTOR, ERR_NONE, NO_VECTOR,
};
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{FromBytes, IntoBytes};

use crate::commands::Response;

/// `VIRTQ_AVAIL_F_NO_INTERRUPT`: the driver polls and wants no interrupt.
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Ring addresses and size as the driver programmed them in BAR0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingConfig {
    /// Descriptor table address.
    pub desc: u64,
    /// Available ring address.
    pub avail: u64,
    /// Used ring address.
    pub used: u64,
    /// Entries.
    pub size: u32,
}

/// Outcome of one pass over the queue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Processed {
    /// Commands completed.
    pub completed: usize,
    /// Whether the driver wants an interrupt for them.
    pub interrupt: bool,
}

/// The device side of one command queue.
#[derive(Debug)]
pub struct CommandQueue {
    queue: Queue,
}

impl Default for CommandQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl CommandQueue {
    /// A stopped queue.
    pub fn new() -> Self {
        Self {
            queue: Queue::new(CMDQ_MAX_SIZE).expect("CMDQ_MAX_SIZE is a valid virtqueue size"),
        }
    }

    /// Whether the queue runs.
    pub fn is_running(&self) -> bool {
        self.queue.ready()
    }

    /// Stops the queue and forgets its rings.
    pub fn stop(&mut self) {
        self.queue.reset();
    }

    /// Starts the queue on `rings`, checking them against `mem`. On failure returns the
    /// `rnic_abi::regs::ERR_*` code that says why, and the queue stays stopped.
    pub fn start(&mut self, rings: RingConfig, mem: &GuestMemoryMmap) -> Result<(), u32> {
        self.queue.reset();
        let size = u16::try_from(rings.size).map_err(|_| ERR_CMDQ_SIZE)?;
        if size == 0 || !size.is_power_of_two() || size > CMDQ_MAX_SIZE {
            return Err(ERR_CMDQ_SIZE);
        }
        if !rings.desc.is_multiple_of(CMDQ_DESC_ALIGN)
            || !rings.avail.is_multiple_of(CMDQ_AVAIL_ALIGN)
            || !rings.used.is_multiple_of(CMDQ_USED_ALIGN)
        {
            return Err(ERR_CMDQ_ADDRESS);
        }
        if rings.avail == 0 {
            // virtio-queue takes an available ring at 0 for one never set and pops nothing
            // from it: the queue would look busy forever and never complete a command.
            return Err(ERR_CMDQ_ADDRESS);
        }
        let q = &mut self.queue;
        q.set_size(size);
        q.try_set_desc_table_address(GuestAddress(rings.desc))
            .map_err(|_| ERR_CMDQ_ADDRESS)?;
        q.try_set_avail_ring_address(GuestAddress(rings.avail))
            .map_err(|_| ERR_CMDQ_ADDRESS)?;
        q.try_set_used_ring_address(GuestAddress(rings.used))
            .map_err(|_| ERR_CMDQ_ADDRESS)?;
        q.set_ready(true);
        if !q.is_valid(mem) {
            q.reset();
            return Err(ERR_CMDQ_ADDRESS);
        }
        // A fresh queue starts where the driver's rings start: at index 0.
        q.set_next_avail(0);
        q.set_next_used(0);
        Ok(())
    }

    /// Whether the driver has published commands the device has not taken yet.
    pub fn has_work(&self, mem: &GuestMemoryMmap) -> bool {
        self.is_running()
            && self
                .queue
                .avail_idx(mem, Ordering::Acquire)
                .is_ok_and(|idx| idx.0 != self.queue.next_avail())
    }

    /// Executes every available command with `handler`, writing responses into `rings`
    /// (memory the device may write) and reading requests from `readable`. A failure to
    /// reach the rings themselves stops the queue and returns the `ERR_*` code.
    pub fn process(
        &mut self,
        rings: &GuestMemoryMmap,
        readable: &GuestMemoryMmap,
        mut handler: impl FnMut(&CmdHeader, &[u8], usize) -> Response,
    ) -> Result<Processed, u32> {
        let mut done = Processed::default();
        if !self.is_running() {
            return Ok(done);
        }
        let avail = self
            .queue
            .avail_idx(rings, Ordering::Acquire)
            .map_err(|_| self.fault(ERR_CMDQ_DMA))?;
        let pending = (avail - Wrapping(self.queue.next_avail())).0;
        if pending > self.queue.size() {
            return Err(self.fault(ERR_CMDQ_BROKEN));
        }
        while let Some(chain) = self.queue.pop_descriptor_chain(rings) {
            let head = chain.head_index();
            if head >= self.queue.size() {
                return Err(self.fault(ERR_CMDQ_BROKEN));
            }
            let written = execute(chain, rings, readable, &mut handler);
            self.queue
                .add_used(rings, head, written)
                .map_err(|_| self.fault(ERR_CMDQ_DMA))?;
            done.completed += 1;
        }
        if done.completed > 0 {
            // The queue crate does not look at VIRTQ_AVAIL_F_NO_INTERRUPT; we do.
            let flags: u16 = rings
                .load(GuestAddress(self.queue.avail_ring()), Ordering::Acquire)
                .map(u16::from_le)
                .unwrap_or(0);
            done.interrupt = flags & AVAIL_F_NO_INTERRUPT == 0;
        }
        Ok(done)
    }

    fn fault(&mut self, code: u32) -> u32 {
        log::warn!("command queue stopped: error code {code}");
        self.queue.reset();
        code
    }
}

/// One queue as its register block presents it: the ring registers the driver wrote
/// (`CMDQ_*` or `ADMINQ_*`, named by a [`QueueRegs`]), the device queue they start, and what
/// the device last saw of the queue's doorbell. The command queue and the admin queue are
/// both one of these.
#[derive(Debug)]
pub struct QueueBlock {
    regs: QueueRegs,
    rings: RingConfig,
    vector: u32,
    error_code: u32,
    fatal: bool,
    queue: CommandQueue,
    /// Last doorbell value the device acted on.
    doorbell_seen: u32,
}

/// What the start of a queue checks against: the function's PCI and DMA state.
pub struct StartContext<'a> {
    /// Bus mastering is on.
    pub bus_master: bool,
    /// Vectors of the MSI-X table.
    pub msix_vectors: u16,
    /// Memory the device may write (all three rings must be in it).
    pub writable: &'a GuestMemoryMmap,
    /// The function's doorbells.
    pub doorbells: &'a crate::doorbell::DoorbellBar,
}

impl QueueBlock {
    /// A stopped queue at power-on, programmed through the registers `regs` names.
    pub fn new(regs: QueueRegs) -> Self {
        Self {
            regs,
            rings: RingConfig::default(),
            vector: NO_VECTOR,
            error_code: ERR_NONE,
            fatal: false,
            queue: CommandQueue::new(),
            doorbell_seen: 0,
        }
    }

    /// Back to power-on: stopped, registers cleared.
    pub fn reset(&mut self) {
        *self = Self::new(self.regs);
    }

    /// Whether the queue runs.
    pub fn is_running(&self) -> bool {
        self.queue.is_running()
    }

    /// The `DEVICE_STATUS` bits this queue contributes.
    pub fn status_bits(&self) -> u32 {
        let mut s = 0;
        if self.queue.is_running() {
            s |= self.regs.running;
        }
        if self.fatal {
            s |= self.regs.fatal;
        }
        s
    }

    /// The value of register `offset`, if it is one of this queue's.
    pub fn read(&self, offset: u64) -> Option<u32> {
        let r = &self.regs;
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        Some(match offset {
            o if o == r.desc_lo => lo(self.rings.desc),
            o if o == r.desc_lo + 4 => hi(self.rings.desc),
            o if o == r.avail_lo => lo(self.rings.avail),
            o if o == r.avail_lo + 4 => hi(self.rings.avail),
            o if o == r.used_lo => lo(self.rings.used),
            o if o == r.used_lo + 4 => hi(self.rings.used),
            o if o == r.size => self.rings.size,
            o if o == r.msix_vector => self.vector,
            o if o == r.control => u32::from(self.is_running()) * CMDQ_ENABLE,
            o if o == r.error_code => self.error_code,
            _ => return None,
        })
    }

    /// Applies a write to register `offset` if it is one of this queue's: `None` if it is
    /// not, else whether the engine must look at the function (the queue started).
    pub fn write(&mut self, offset: u64, value: u32, ctx: &StartContext) -> Option<bool> {
        let r = self.regs;
        let set_lo = |v: &mut u64| *v = (*v & !0xffff_ffff) | u64::from(value);
        let set_hi = |v: &mut u64| *v = (*v & 0xffff_ffff) | u64::from(value) << 32;
        match offset {
            o if o == r.desc_lo => set_lo(&mut self.rings.desc),
            o if o == r.desc_lo + 4 => set_hi(&mut self.rings.desc),
            o if o == r.avail_lo => set_lo(&mut self.rings.avail),
            o if o == r.avail_lo + 4 => set_hi(&mut self.rings.avail),
            o if o == r.used_lo => set_lo(&mut self.rings.used),
            o if o == r.used_lo + 4 => set_hi(&mut self.rings.used),
            o if o == r.size => self.rings.size = value,
            o if o == r.msix_vector => self.vector = value,
            o if o == r.control => return Some(self.control(value, ctx)),
            // The error code register is read-only.
            o if o == r.error_code => {}
            _ => return None,
        }
        Some(false)
    }

    fn control(&mut self, value: u32, ctx: &StartContext) -> bool {
        if value & CMDQ_ENABLE == 0 {
            self.queue.stop();
            return false;
        }
        let result = if !ctx.bus_master {
            Err(ERR_BUS_MASTER)
        } else if self.vector != NO_VECTOR && self.vector >= u32::from(ctx.msix_vectors) {
            Err(ERR_CMDQ_VECTOR)
        } else {
            self.queue.start(self.rings, ctx.writable)
        };
        match result {
            Ok(()) => {
                self.error_code = ERR_NONE;
                self.fatal = false;
                // A fresh queue starts at index 0: so do its doorbell and what the device
                // saw of it, or a stale doorbell value could hide the first new one.
                ctx.doorbells.write32(self.regs.doorbell, 0);
                self.doorbell_seen = 0;
                log::info!(
                    "queue at {:#x}: {} entries running",
                    r_base(&self.regs),
                    self.rings.size
                );
                true
            }
            Err(code) => {
                self.error_code = code;
                log::warn!(
                    "queue at {:#x} refused to start: error code {code}",
                    r_base(&self.regs)
                );
                false
            }
        }
    }

    /// Whether the queue may have work: it was kicked, or its doorbell moved since the
    /// last look (which this records).
    pub fn due(&mut self, doorbells: &crate::doorbell::DoorbellBar, kicked: bool) -> bool {
        let doorbell = doorbells.read32(self.regs.doorbell).unwrap_or(0);
        let moved = doorbell != self.doorbell_seen;
        self.doorbell_seen = doorbell;
        kicked || moved
    }

    /// Runs every available command through `handler` (see [`CommandQueue::process`]).
    /// Returns whether any command completed, and the MSI-X vector to signal if the driver
    /// wants an interrupt for them. A ring failure stops the queue with its error code.
    pub fn process(
        &mut self,
        writable: &GuestMemoryMmap,
        readable: &GuestMemoryMmap,
        handler: impl FnMut(&CmdHeader, &[u8], usize) -> Response,
    ) -> (bool, Option<u16>) {
        if !self.queue.is_running() {
            return (false, None);
        }
        match self.queue.process(writable, readable, handler) {
            Ok(done) => {
                // The register takes any value; one that is no vector must not be
                // truncated into one.
                let vector = u16::try_from(self.vector)
                    .ok()
                    .filter(|&v| u32::from(v) != NO_VECTOR);
                (done.completed > 0, vector.filter(|_| done.interrupt))
            }
            Err(code) => {
                self.error_code = code;
                self.fatal = true;
                log::error!(
                    "queue at {:#x} failed with error code {code}; restart the queue or reset the function",
                    r_base(&self.regs)
                );
                (true, None)
            }
        }
    }
}

/// The first register of a queue's block, to name the queue in logs.
fn r_base(regs: &QueueRegs) -> u64 {
    regs.desc_lo
}

/// Runs one chain and returns the number of bytes written into its writable part.
fn execute<M: std::ops::Deref<Target = GuestMemoryMmap>>(
    chain: virtio_queue::DescriptorChain<M>,
    rings: &GuestMemoryMmap,
    readable: &GuestMemoryMmap,
    handler: &mut impl FnMut(&CmdHeader, &[u8], usize) -> Response,
) -> u32 {
    let mut request = Vec::new();
    let mut writable: Vec<(GuestAddress, u32)> = Vec::new();
    let mut malformed = None;
    let mut dma_error = None;
    for desc in chain {
        if desc.is_write_only() {
            writable.push((desc.addr(), desc.len()));
            continue;
        }
        if !writable.is_empty() {
            // virtio requires every readable descriptor before the first writable one.
            malformed.get_or_insert(request.len() as u32);
            continue;
        }
        let start = request.len();
        if start + desc.len() as usize > CMD_MAX_LEN as usize {
            malformed.get_or_insert(CMD_MAX_LEN);
            continue;
        }
        request.resize(start + desc.len() as usize, 0);
        if readable
            .read_slice(&mut request[start..], desc.addr())
            .is_err()
        {
            dma_error.get_or_insert(start as u32);
        }
    }
    let (header, body) = match CmdHeader::read_from_prefix(&request) {
        Ok((header, body)) => (Some(header), body),
        Err(_) => (None, &[][..]),
    };
    let (opcode, token) = header.map_or((0, 0), |h| (h.opcode, h.token));
    // A chain with no room for a response header completes with a used length of 0, which
    // the driver takes for Malformed: the command must not have run.
    let room = writable.iter().map(|&(_, len)| u64::from(len)).sum::<u64>();
    let header_len = std::mem::size_of::<RespHeader>() as u64;
    let no_room = room < header_len;
    // What the handler may put after the header; a command whose response cannot fit
    // must not run (a created object's number would be lost).
    let body_room = usize::try_from(room.saturating_sub(header_len)).unwrap_or(usize::MAX);
    let response = match header {
        _ if dma_error.is_some() => Response::error(Status::DmaError, dma_error.unwrap_or(0)),
        _ if malformed.is_some() => Response::error(Status::Malformed, malformed.unwrap_or(0)),
        _ if no_room => Response::error(Status::Malformed, 0),
        None => Response::error(Status::Malformed, request.len() as u32),
        Some(header) => handler(&header, body, body_room),
    };
    write_response(&writable, rings, opcode, token, response)
}

/// Scatters header and body over the writable descriptors; returns bytes written.
fn write_response(
    writable: &[(GuestAddress, u32)],
    mem: &GuestMemoryMmap,
    opcode: u16,
    token: u32,
    mut response: Response,
) -> u32 {
    let room: u64 = writable.iter().map(|&(_, len)| u64::from(len)).sum();
    let header_len = std::mem::size_of::<RespHeader>() as u64;
    if room < header_len {
        log::debug!("command {opcode:#06x}: no room for a response header");
        return 0;
    }
    let needed = header_len + response.body.len() as u64;
    if room < needed {
        // Tell the driver how much room the response needs.
        response = Response::error(Status::Malformed, needed as u32);
    }
    let header = RespHeader {
        status: response.status as u16,
        opcode,
        token,
        syndrome: response.syndrome,
        reserved: 0,
    };
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(&response.body);
    let mut offset = 0usize;
    for &(addr, len) in writable {
        if offset == bytes.len() {
            break;
        }
        let n = (len as usize).min(bytes.len() - offset);
        if mem.write_slice(&bytes[offset..offset + n], addr).is_err() {
            log::debug!(
                "command {opcode:#06x}: response buffer at {:#x} is not writable",
                addr.0
            );
            return offset as u32;
        }
        offset += n;
    }
    offset as u32
}

#[cfg(test)]
mod tests {
    //! The driver side of the ring is built by hand in guest memory, byte by byte as the
    //! virtio spec lays it out, so these tests check the device against the spec rather
    //! than against the queue crate's own helpers.

    use super::*;
    use rnic_abi::cmd::Opcode;

    const MEM_BASE: u64 = 0x10000;
    const MEM_SIZE: usize = 0x40000;
    const MEM_END: u64 = MEM_BASE + MEM_SIZE as u64;
    const DESC: u64 = 0x10000;
    const AVAIL: u64 = 0x11000;
    const USED: u64 = 0x12000;
    const DATA: u64 = 0x13000;
    /// An address no test maps.
    const UNMAPPED: u64 = 0x100_0000;

    const F_NEXT: u16 = 1;
    const F_WRITE: u16 = 2;
    const RESP_LEN: u32 = std::mem::size_of::<RespHeader>() as u32;

    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(MEM_BASE), MEM_SIZE)]).unwrap()
    }

    /// One buffer of a chain: device-readable or device-writable, at an address and length.
    #[derive(Debug, Clone, Copy)]
    enum Buf {
        Read(u64, u32),
        Write(u64, u32),
    }

    /// The driver's side of a split virtqueue, in guest memory.
    struct Driver {
        mem: GuestMemoryMmap,
        size: u16,
        avail_idx: u16,
        next_desc: u16,
        next_data: u64,
    }

    impl Driver {
        fn new(size: u16) -> Self {
            Self {
                mem: memory(),
                size,
                avail_idx: 0,
                next_desc: 0,
                next_data: DATA,
            }
        }

        fn rings(&self) -> RingConfig {
            RingConfig {
                desc: DESC,
                avail: AVAIL,
                used: USED,
                size: u32::from(self.size),
            }
        }

        /// A driver with a queue of `size` entries and a device queue started on it.
        fn started(size: u16) -> (Self, CommandQueue) {
            let drv = Self::new(size);
            let mut q = CommandQueue::new();
            q.start(drv.rings(), &drv.mem).expect("valid rings");
            (drv, q)
        }

        /// `len` bytes of data memory, filled with 0xEE. Buffers are packed with a one-byte
        /// gap, so most of them start at odd addresses.
        fn alloc(&mut self, len: u32) -> u64 {
            let addr = self.next_data;
            self.next_data += u64::from(len) + 1;
            assert!(self.next_data <= MEM_END, "test data memory exhausted");
            self.mem
                .write_slice(&vec![0xEE; len as usize], GuestAddress(addr))
                .unwrap();
            addr
        }

        /// A readable buffer holding `bytes`.
        fn put(&mut self, bytes: &[u8]) -> Buf {
            let addr = self.alloc(bytes.len() as u32);
            self.mem.write_slice(bytes, GuestAddress(addr)).unwrap();
            Buf::Read(addr, bytes.len() as u32)
        }

        /// `bytes` split into readable buffers of the given lengths (which must add up).
        fn put_split(&mut self, bytes: &[u8], lens: &[usize]) -> Vec<Buf> {
            assert_eq!(lens.iter().sum::<usize>(), bytes.len());
            let mut at = 0;
            lens.iter()
                .map(|&n| {
                    let b = self.put(&bytes[at..at + n]);
                    at += n;
                    b
                })
                .collect()
        }

        /// A writable buffer of `len` bytes.
        fn room(&mut self, len: u32) -> Buf {
            Buf::Write(self.alloc(len), len)
        }

        fn set_desc(&self, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
            let mut raw = [0u8; 16];
            raw[0..8].copy_from_slice(&addr.to_le_bytes());
            raw[8..12].copy_from_slice(&len.to_le_bytes());
            raw[12..14].copy_from_slice(&flags.to_le_bytes());
            raw[14..16].copy_from_slice(&next.to_le_bytes());
            let at = DESC + 16 * u64::from(index);
            self.mem.write_slice(&raw, GuestAddress(at)).unwrap();
        }

        /// Writes `bufs` as one chain into consecutive free descriptors; returns its head.
        fn chain(&mut self, bufs: &[Buf]) -> u16 {
            let head = self.next_desc;
            for (i, buf) in bufs.iter().enumerate() {
                let index = self.next_desc;
                self.next_desc = (self.next_desc + 1) % self.size;
                let (addr, len, write) = match *buf {
                    Buf::Read(a, l) => (a, l, 0),
                    Buf::Write(a, l) => (a, l, F_WRITE),
                };
                let last = i + 1 == bufs.len();
                let flags = write | if last { 0 } else { F_NEXT };
                self.set_desc(
                    index,
                    addr,
                    len,
                    flags,
                    if last { 0 } else { self.next_desc },
                );
            }
            head
        }

        /// Puts `head` in the available ring and publishes it.
        fn publish(&mut self, head: u16) {
            let slot = AVAIL + 4 + 2 * u64::from(self.avail_idx % self.size);
            self.mem
                .write_obj(head.to_le(), GuestAddress(slot))
                .unwrap();
            self.avail_idx = self.avail_idx.wrapping_add(1);
            self.set_avail_idx(self.avail_idx);
        }

        /// Writes `bufs` as a chain and publishes it; returns the head.
        fn submit(&mut self, bufs: &[Buf]) -> u16 {
            let head = self.chain(bufs);
            self.publish(head);
            head
        }

        fn set_avail_idx(&self, idx: u16) {
            self.mem
                .write_obj(idx.to_le(), GuestAddress(AVAIL + 2))
                .unwrap();
        }

        fn set_avail_flags(&self, flags: u16) {
            self.mem
                .write_obj(flags.to_le(), GuestAddress(AVAIL))
                .unwrap();
        }

        fn used_idx(&self) -> u16 {
            u16::from_le(self.mem.read_obj(GuestAddress(USED + 2)).unwrap())
        }

        /// Used element `i`: (descriptor id, bytes written).
        fn used(&self, i: u16) -> (u32, u32) {
            let at = USED + 4 + 8 * u64::from(i % self.size);
            let id: u32 = self.mem.read_obj(GuestAddress(at)).unwrap();
            let len: u32 = self.mem.read_obj(GuestAddress(at + 4)).unwrap();
            (u32::from_le(id), u32::from_le(len))
        }

        fn read(&self, addr: u64, len: usize) -> Vec<u8> {
            let mut v = vec![0; len];
            self.mem.read_slice(&mut v, GuestAddress(addr)).unwrap();
            v
        }

        /// The contents of the writable buffers among `bufs`, concatenated.
        fn gather(&self, bufs: &[Buf]) -> Vec<u8> {
            bufs.iter()
                .filter_map(|b| match *b {
                    Buf::Write(a, l) => Some(self.read(a, l as usize)),
                    Buf::Read(..) => None,
                })
                .flatten()
                .collect()
        }

        /// The response header at the start of writable buffer `buf`.
        fn resp(&self, buf: Buf) -> RespHeader {
            let Buf::Write(addr, _) = buf else {
                panic!("{buf:?} is not a response buffer")
            };
            RespHeader::read_from_bytes(&self.read(addr, RESP_LEN as usize)).unwrap()
        }
    }

    fn request(opcode: u16, token: u32, body: &[u8]) -> Vec<u8> {
        let mut v = CmdHeader {
            opcode,
            reserved: 0,
            token,
        }
        .as_bytes()
        .to_vec();
        v.extend_from_slice(body);
        v
    }

    fn nop(token: u32) -> Vec<u8> {
        request(Opcode::Nop as u16, token, &[])
    }

    type Calls = Vec<(CmdHeader, Vec<u8>)>;

    /// Runs one pass with a handler that records its calls and answers Ok with the request
    /// body reversed.
    fn run(q: &mut CommandQueue, drv: &Driver) -> (Result<Processed, u32>, Calls) {
        let mut calls = Vec::new();
        let result = q.process(&drv.mem, &drv.mem, |h, body, _| {
            calls.push((*h, body.to_vec()));
            Response::ok(body.iter().rev().copied().collect())
        });
        (result, calls)
    }

    fn expected_response(status: Status, opcode: u16, token: u32, syndrome: u32) -> RespHeader {
        RespHeader {
            status: status as u16,
            opcode,
            token,
            syndrome,
            reserved: 0,
        }
    }

    #[test]
    fn start_refuses_bad_sizes() {
        let drv = Driver::new(16);
        let mut q = CommandQueue::new();
        for size in [0, 3, 6, 100, 255, 512, 1 << 15, 1 << 16, u32::MAX] {
            let rings = RingConfig {
                size,
                ..drv.rings()
            };
            assert_eq!(q.start(rings, &drv.mem), Err(ERR_CMDQ_SIZE), "size {size}");
            assert!(!q.is_running());
        }
        for size in [1, 2, 64, u32::from(CMDQ_MAX_SIZE)] {
            let rings = RingConfig {
                size,
                ..drv.rings()
            };
            assert_eq!(q.start(rings, &drv.mem), Ok(()), "size {size}");
            assert!(q.is_running());
        }
    }

    #[test]
    fn start_refuses_misaligned_rings() {
        let drv = Driver::new(16);
        let mut q = CommandQueue::new();
        let base = drv.rings();
        for rings in [
            RingConfig {
                desc: DESC + 8,
                ..base
            },
            RingConfig {
                desc: DESC + 1,
                ..base
            },
            RingConfig {
                avail: AVAIL + 1,
                ..base
            },
            RingConfig {
                used: USED + 2,
                ..base
            },
            RingConfig {
                used: USED + 1,
                ..base
            },
        ] {
            assert_eq!(q.start(rings, &drv.mem), Err(ERR_CMDQ_ADDRESS), "{rings:?}");
            assert!(!q.is_running());
        }
        // The smallest alignments the spec allows are accepted.
        let rings = RingConfig {
            desc: DESC + 16,
            avail: AVAIL + 2,
            used: USED + 4,
            ..base
        };
        assert_eq!(q.start(rings, &drv.mem), Ok(()));
    }

    #[test]
    fn start_refuses_rings_outside_memory() {
        let drv = Driver::new(16);
        let mut q = CommandQueue::new();
        let base = drv.rings();
        for rings in [
            RingConfig {
                desc: UNMAPPED,
                ..base
            },
            // Below memory, and straddling its end.
            RingConfig {
                desc: MEM_BASE - 0x100,
                ..base
            },
            RingConfig {
                desc: MEM_END - 16 * 8,
                ..base
            },
            RingConfig {
                avail: UNMAPPED,
                ..base
            },
            // flags, idx and 16 entries fit, used_event does not.
            RingConfig {
                avail: MEM_END - 4 - 2 * 16,
                ..base
            },
            RingConfig {
                used: UNMAPPED,
                ..base
            },
            RingConfig {
                used: MEM_END - 4 - 8 * 8,
                ..base
            },
            // Addresses whose ring would wrap around the address space.
            RingConfig {
                desc: u64::MAX - 15,
                ..base
            },
            RingConfig {
                avail: u64::MAX - 1,
                ..base
            },
            RingConfig {
                used: u64::MAX - 3,
                ..base
            },
        ] {
            assert_eq!(q.start(rings, &drv.mem), Err(ERR_CMDQ_ADDRESS), "{rings:?}");
            assert!(!q.is_running());
        }
        // Rings that end at the end of memory (as near as alignment allows) are fine.
        for rings in [
            RingConfig {
                desc: MEM_END - 16 * 16,
                ..base
            },
            RingConfig {
                avail: MEM_END - (4 + 2 * 16 + 2),
                ..base
            },
            RingConfig {
                used: MEM_END - (4 + 8 * 16 + 4),
                ..base
            },
        ] {
            assert_eq!(q.start(rings, &drv.mem), Ok(()), "{rings:?}");
        }
        // Nothing at all is mapped.
        assert_eq!(
            q.start(base, &GuestMemoryMmap::new()),
            Err(ERR_CMDQ_ADDRESS)
        );
    }

    #[test]
    fn an_available_ring_at_address_zero_is_refused() {
        // virtio-queue never pops from an available ring at 0; accepting one would leave
        // the driver waiting forever.
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        let mut q = CommandQueue::new();
        let rings = RingConfig {
            desc: 0x1000,
            avail: 0,
            used: 0x2000,
            size: 8,
        };
        assert_eq!(q.start(rings, &mem), Err(ERR_CMDQ_ADDRESS));
        assert!(!q.is_running());
        // The other rings may sit at 0.
        let rings = RingConfig {
            desc: 0,
            avail: 0x1000,
            used: 0x2000,
            size: 8,
        };
        assert_eq!(q.start(rings, &mem), Ok(()));
        let rings = RingConfig {
            desc: 0x1000,
            avail: 0x2000,
            used: 0,
            size: 8,
        };
        assert_eq!(q.start(rings, &mem), Ok(()));
    }

    #[test]
    fn a_failed_start_stops_a_running_queue() {
        let (drv, mut q) = Driver::started(16);
        assert!(q.is_running());
        let rings = RingConfig {
            size: 3,
            ..drv.rings()
        };
        assert_eq!(q.start(rings, &drv.mem), Err(ERR_CMDQ_SIZE));
        assert!(!q.is_running());
        assert_eq!(run(&mut q, &drv).0, Ok(Processed::default()));
    }

    #[test]
    fn nop_round_trip() {
        let (mut drv, mut q) = Driver::started(16);
        assert!(!q.has_work(&drv.mem));
        let req = drv.put(&nop(0xdead_beef));
        let resp = drv.room(64);
        let head = drv.submit(&[req, resp]);
        assert!(q.has_work(&drv.mem));

        let (result, calls) = run(&mut q, &drv);
        assert_eq!(
            result,
            Ok(Processed {
                completed: 1,
                interrupt: true
            })
        );
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0.opcode, Opcode::Nop as u16);
        assert_eq!(calls[0].0.token, 0xdead_beef);
        assert!(calls[0].1.is_empty());
        assert_eq!(drv.used_idx(), 1);
        assert_eq!(drv.used(0), (u32::from(head), RESP_LEN));
        assert_eq!(
            drv.resp(resp),
            expected_response(Status::Ok, Opcode::Nop as u16, 0xdead_beef, 0)
        );
        // Nothing beyond the header was written.
        assert_eq!(drv.gather(&[resp])[RESP_LEN as usize..], [0xEE; 48]);
        assert!(!q.has_work(&drv.mem));
        assert_eq!(run(&mut q, &drv).0, Ok(Processed::default()));
    }

    #[test]
    fn response_body_follows_the_header() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&request(0x1234, 77, b"abcdef"));
        let resp = drv.room(RESP_LEN + 6);
        let head = drv.submit(&[req, resp]);
        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(calls[0].1, b"abcdef");
        assert_eq!(drv.used(0), (u32::from(head), RESP_LEN + 6));
        let out = drv.gather(&[resp]);
        assert_eq!(
            RespHeader::read_from_bytes(&out[..16]).unwrap(),
            expected_response(Status::Ok, 0x1234, 77, 0)
        );
        assert_eq!(&out[16..], b"fedcba");
    }

    #[test]
    fn handler_status_and_syndrome_reach_the_driver() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&request(0x0099, 5, &[]));
        let resp = drv.room(32);
        drv.submit(&[req, resp]);
        let result = q.process(&drv.mem, &drv.mem, |h, _, _| {
            Response::error(Status::BadOpcode, u32::from(h.opcode))
        });
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(drv.used(0).1, RESP_LEN);
        assert_eq!(
            drv.resp(resp),
            expected_response(Status::BadOpcode, 0x0099, 5, 0x0099)
        );
    }

    #[test]
    fn request_and_response_split_at_odd_bytes() {
        let (mut drv, mut q) = Driver::started(16);
        let body: Vec<u8> = (1..=13).collect();
        let req = request(0x042, 0x0102_0304, &body);
        // The header splits after 3 and 8 bytes... and the body after 1 more.
        let mut bufs = drv.put_split(&req, &[3, 5, 1, 12]);
        let room = [drv.room(5), drv.room(7), drv.room(3), drv.room(100)];
        bufs.extend_from_slice(&room);
        let head = drv.submit(&bufs);

        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0.opcode, 0x42);
        assert_eq!(calls[0].0.token, 0x0102_0304);
        assert_eq!(calls[0].1, body);

        let written = RESP_LEN + body.len() as u32;
        assert_eq!(drv.used(0), (u32::from(head), written));
        let mut expected = expected_response(Status::Ok, 0x42, 0x0102_0304, 0)
            .as_bytes()
            .to_vec();
        expected.extend(body.iter().rev());
        let out = drv.gather(&room);
        assert_eq!(&out[..written as usize], &expected[..]);
        assert!(out[written as usize..].iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn one_byte_descriptors() {
        let (mut drv, mut q) = Driver::started(64);
        let req = request(0x0007, 0xa5a5_5a5a, &[9, 8]);
        let mut bufs = drv.put_split(&req, &[1; 10]);
        let room: Vec<Buf> = (0..RESP_LEN + 2).map(|_| drv.room(1)).collect();
        bufs.extend_from_slice(&room);
        drv.submit(&bufs);
        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(calls[0].1, [9, 8]);
        assert_eq!(drv.used(0).1, RESP_LEN + 2);
        let out = drv.gather(&room);
        assert_eq!(
            RespHeader::read_from_bytes(&out[..16]).unwrap(),
            expected_response(Status::Ok, 7, 0xa5a5_5a5a, 0)
        );
        assert_eq!(&out[16..], [8, 9]);
    }

    #[test]
    fn readable_after_writable_is_malformed() {
        let (mut drv, mut q) = Driver::started(16);
        let req = drv.put(&nop(3));
        let resp = drv.room(32);
        let late = drv.put(&[1, 2, 3, 4]);
        let head = drv.submit(&[req, resp, late]);
        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert!(calls.is_empty(), "a malformed chain must not execute");
        assert_eq!(drv.used(0), (u32::from(head), RESP_LEN));
        assert_eq!(
            drv.resp(resp),
            expected_response(Status::Malformed, Opcode::Nop as u16, 3, 8)
        );
    }

    #[test]
    fn request_shorter_than_its_header_is_malformed() {
        let (mut drv, mut q) = Driver::started(16);
        let short = drv.put(&nop(3)[..5]);
        let resp = drv.room(32);
        drv.submit(&[short, resp]);
        // A chain with no readable part at all.
        let resp2 = drv.room(32);
        drv.submit(&[resp2]);
        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(2));
        assert!(calls.is_empty());
        assert_eq!(drv.used(0).1, RESP_LEN);
        assert_eq!(
            drv.resp(resp),
            expected_response(Status::Malformed, 0, 0, 5)
        );
        assert_eq!(drv.used(1).1, RESP_LEN);
        assert_eq!(
            drv.resp(resp2),
            expected_response(Status::Malformed, 0, 0, 0)
        );
    }

    #[test]
    fn request_outside_memory_is_a_dma_error() {
        let (mut drv, mut q) = Driver::started(16);
        let hdr = drv.put(&request(0x0011, 9, &[]));
        let resp = drv.room(32);
        drv.submit(&[hdr, Buf::Read(UNMAPPED, 4), resp]);
        // A buffer that starts in memory and runs past its end.
        let resp2 = drv.room(32);
        drv.submit(&[Buf::Read(MEM_END - 4, 12), resp2]);
        // And one whose end wraps around the address space.
        let resp3 = drv.room(32);
        drv.submit(&[Buf::Read(u64::MAX - 3, 12), resp3]);

        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(3));
        assert!(
            calls.is_empty(),
            "the handler must not see a request it cannot read"
        );
        assert_eq!(drv.used(0).1, RESP_LEN);
        assert_eq!(
            drv.resp(resp),
            expected_response(Status::DmaError, 0x0011, 9, 8)
        );
        assert_eq!(drv.resp(resp2).status, Status::DmaError as u16);
        assert_eq!(drv.resp(resp2).syndrome, 0);
        assert_eq!(drv.resp(resp3).status, Status::DmaError as u16);
        assert!(q.is_running());
    }

    #[test]
    fn response_too_small_for_the_body_is_malformed_with_the_needed_length() {
        let (mut drv, mut q) = Driver::started(16);
        let req = drv.put(&request(0x0005, 11, &[0; 24]));
        let room = [drv.room(10), drv.room(10)];
        drv.submit(&[req, room[0], room[1]]);
        let (result, _) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(drv.used(0).1, RESP_LEN);
        let out = drv.gather(&room);
        assert_eq!(
            RespHeader::read_from_bytes(&out[..16]).unwrap(),
            expected_response(Status::Malformed, 0x0005, 11, RESP_LEN + 24)
        );
        assert_eq!(out[16..], [0xEE; 4]);
    }

    #[test]
    fn response_area_smaller_than_a_header_completes_with_length_zero() {
        let (mut drv, mut q) = Driver::started(16);
        let req = drv.put(&nop(1));
        let small = drv.room(RESP_LEN - 1);
        drv.submit(&[req, small]);
        let req2 = drv.put(&nop(2));
        let split = [drv.room(8), drv.room(7)];
        drv.submit(&[req2, split[0], split[1]]);
        let req3 = drv.put(&nop(3));
        drv.submit(&[req3]);

        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(3));
        assert!(
            calls.is_empty(),
            "a command with no room for its response must not run"
        );
        for i in 0..3 {
            assert_eq!(drv.used(i).1, 0, "used element {i}");
        }
        assert!(drv.gather(&[small]).iter().all(|&b| b == 0xEE));
        assert!(drv.gather(&split).iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn requests_larger_than_cmd_max_len_are_malformed() {
        let (mut drv, mut q) = Driver::started(16);
        let max_body = vec![0x5A; CMD_MAX_LEN as usize - 8];
        // Exactly CMD_MAX_LEN is accepted...
        let req = drv.put(&request(0x0003, 1, &max_body));
        let resp = drv.room(32);
        drv.submit(&[req, resp]);
        let mut body_len = None;
        let result = q.process(&drv.mem, &drv.mem, |h, body, _| {
            assert_eq!(h.token, 1);
            body_len = Some(body.len());
            Response::ok(Vec::new())
        });
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(body_len, Some(max_body.len()));
        assert_eq!(drv.resp(resp).status, Status::Ok as u16);

        // ...one byte more is not, whether in one descriptor or spread over several...
        let hdr = drv.put(&request(0x0003, 2, &[]));
        let resp = drv.room(32);
        drv.submit(&[hdr, Buf::Read(DATA, CMD_MAX_LEN - 7), resp]);
        let hdr = drv.put(&request(0x0003, 3, &[]));
        let resp2 = drv.room(32);
        drv.submit(&[
            hdr,
            Buf::Read(DATA, CMD_MAX_LEN / 2),
            Buf::Read(DATA, CMD_MAX_LEN / 2),
            resp2,
        ]);
        // ...and a huge length is refused before the device reads (or allocates) anything.
        let resp3 = drv.room(32);
        drv.submit(&[Buf::Read(UNMAPPED, 0x8000_0000), resp3]);

        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(3));
        assert!(calls.is_empty());
        assert_eq!(
            drv.resp(resp),
            expected_response(Status::Malformed, 0x0003, 2, CMD_MAX_LEN)
        );
        assert_eq!(
            drv.resp(resp2),
            expected_response(Status::Malformed, 0x0003, 3, CMD_MAX_LEN)
        );
        assert_eq!(drv.resp(resp3).status, Status::Malformed as u16);
        assert_eq!(drv.resp(resp3).syndrome, CMD_MAX_LEN);
    }

    #[test]
    fn avail_idx_more_than_a_queue_ahead_breaks_the_queue() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&nop(1));
        let resp = drv.room(32);
        let head = drv.chain(&[req, resp]);
        for _ in 0..8 {
            drv.publish(head);
        }
        // A full ring is fine...
        let (result, _) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(8));
        // ...one more entry than the ring holds is not.
        drv.set_avail_idx(8 + 9);
        assert!(q.has_work(&drv.mem));
        let (result, calls) = run(&mut q, &drv);
        assert_eq!(result, Err(ERR_CMDQ_BROKEN));
        assert!(calls.is_empty());
        assert!(!q.is_running());
        assert!(!q.has_work(&drv.mem));
        assert_eq!(drv.used_idx(), 8, "nothing completed");
        assert_eq!(run(&mut q, &drv).0, Ok(Processed::default()));

        // Going backwards looks like running ahead by almost 64Ki entries.
        let (drv, mut q) = Driver::started(8);
        drv.set_avail_idx(u16::MAX);
        assert_eq!(run(&mut q, &drv).0, Err(ERR_CMDQ_BROKEN));
        assert!(!q.is_running());
    }

    #[test]
    fn head_index_beyond_the_queue_breaks_it() {
        for bad in [8, 9, u16::MAX] {
            let (mut drv, mut q) = Driver::started(8);
            let req = drv.put(&nop(1));
            let resp = drv.room(32);
            drv.submit(&[req, resp]);
            drv.publish(bad);
            let (result, calls) = run(&mut q, &drv);
            assert_eq!(result, Err(ERR_CMDQ_BROKEN), "head {bad}");
            assert!(!q.is_running());
            // The good command before it still completed.
            assert_eq!(calls.len(), 1);
            assert_eq!(drv.used_idx(), 1);
        }
    }

    #[test]
    fn no_interrupt_flag_is_respected() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&nop(1));
        let resp = drv.room(32);
        let head = drv.chain(&[req, resp]);

        drv.set_avail_flags(AVAIL_F_NO_INTERRUPT);
        drv.publish(head);
        assert_eq!(
            run(&mut q, &drv).0,
            Ok(Processed {
                completed: 1,
                interrupt: false
            })
        );
        drv.set_avail_flags(0);
        drv.publish(head);
        assert_eq!(
            run(&mut q, &drv).0,
            Ok(Processed {
                completed: 1,
                interrupt: true
            })
        );
        // Nothing completed: nothing to signal, whatever the flag says.
        assert_eq!(run(&mut q, &drv).0, Ok(Processed::default()));
    }

    #[test]
    fn several_commands_complete_in_order() {
        let (mut drv, mut q) = Driver::started(16);
        let mut expected = Vec::new();
        for token in 1..=5u32 {
            let req = drv.put(&request(0x0100 + token as u16, token, &[token as u8]));
            let resp = drv.room(RESP_LEN + 1);
            let head = drv.submit(&[req, resp]);
            expected.push((head, token, resp));
        }
        let (result, calls) = run(&mut q, &drv);
        assert_eq!(
            result,
            Ok(Processed {
                completed: 5,
                interrupt: true
            })
        );
        let tokens: Vec<u32> = calls.iter().map(|(h, _)| h.token).collect();
        assert_eq!(tokens, [1, 2, 3, 4, 5]);
        assert_eq!(drv.used_idx(), 5);
        for (i, &(head, token, resp)) in expected.iter().enumerate() {
            assert_eq!(drv.used(i as u16), (u32::from(head), RESP_LEN + 1));
            assert_eq!(
                drv.resp(resp),
                expected_response(Status::Ok, 0x0100 + token as u16, token, 0)
            );
            assert_eq!(drv.gather(&[resp])[16], token as u8);
        }
    }

    #[test]
    fn ring_indices_wrap_around() {
        let (mut drv, mut q) = Driver::started(4);
        let req = drv.put(&nop(0));
        let resp = drv.room(32);
        let head = drv.chain(&[req, resp]);
        // Past 2^16 commands, in uneven batches, so every index wraps at least once.
        let mut done = 0u32;
        while done < 0x10000 + 7 {
            let batch = 1 + done % 4;
            for _ in 0..batch {
                drv.publish(head);
            }
            let (result, calls) = run(&mut q, &drv);
            assert_eq!(result.map(|p| p.completed), Ok(batch as usize));
            assert_eq!(calls.len(), batch as usize);
            done += batch;
            assert_eq!(drv.used_idx(), done as u16);
        }
        assert_eq!(
            drv.used(drv.used_idx().wrapping_sub(1)),
            (u32::from(head), RESP_LEN)
        );
    }

    #[test]
    fn descriptor_loops_terminate() {
        let (mut drv, mut q) = Driver::started(8);
        let hdr = drv.put(&nop(1));
        let Buf::Read(hdr_addr, hdr_len) = hdr else {
            unreachable!()
        };
        let resp = drv.room(32);
        let Buf::Write(resp_addr, resp_len) = resp else {
            unreachable!()
        };

        // A readable descriptor that points at itself.
        drv.set_desc(0, hdr_addr, hdr_len, F_NEXT, 0);
        drv.publish(0);
        // Readable, then two writable descriptors that point at each other.
        drv.set_desc(1, hdr_addr, hdr_len, F_NEXT, 2);
        drv.set_desc(2, resp_addr, resp_len, F_NEXT | F_WRITE, 3);
        drv.set_desc(3, resp_addr, resp_len, F_NEXT | F_WRITE, 2);
        drv.publish(1);
        // Readable -> writable -> back to the readable head.
        drv.set_desc(4, hdr_addr, hdr_len, F_NEXT, 5);
        drv.set_desc(5, resp_addr, resp_len, F_NEXT | F_WRITE, 4);
        drv.publish(4);

        let (result, _) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(3));
        assert!(q.is_running());
        assert_eq!(drv.used(0), (0, 0), "no writable part: nothing written");
        assert_eq!(drv.used(1), (1, RESP_LEN));
        assert_eq!(drv.used(2), (4, RESP_LEN));
        assert_eq!(drv.resp(resp).status, Status::Malformed as u16);

        // The queue still works afterwards.
        let req = drv.put(&nop(2));
        let resp = drv.room(32);
        drv.next_desc = 6;
        drv.submit(&[req, resp]);
        let (result, _) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(1));
        assert_eq!(drv.resp(resp), expected_response(Status::Ok, 0, 2, 0));
    }

    #[test]
    fn response_into_memory_the_device_cannot_write() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&nop(1));
        drv.submit(&[req, Buf::Write(UNMAPPED, 64)]);
        let req = drv.put(&nop(2));
        let first = drv.room(8);
        drv.submit(&[req, first, Buf::Write(UNMAPPED, 64)]);
        let (result, _) = run(&mut q, &drv);
        assert_eq!(result.map(|p| p.completed), Ok(2));
        assert_eq!(drv.used(0).1, 0);
        assert_eq!(drv.used(1).1, 8, "only what reached memory counts");
        assert!(q.is_running());
    }

    #[test]
    fn requests_come_from_the_readable_view() {
        let (mut drv, mut q) = Driver::started(8);
        // A region the device may read but not write: only in `readable`.
        let readable = GuestMemoryMmap::<()>::from_ranges(&[
            (GuestAddress(MEM_BASE), MEM_SIZE),
            (GuestAddress(UNMAPPED), 0x1000),
        ])
        .unwrap();
        readable
            .write_slice(&request(0x0033, 44, &[1, 2]), GuestAddress(UNMAPPED))
            .unwrap();
        let resp = drv.room(32);
        drv.submit(&[Buf::Read(UNMAPPED, 10), resp]);
        let mut seen = None;
        let result = q.process(&drv.mem, &readable, |h, body, _| {
            seen = Some((*h, body.to_vec()));
            Response::ok(Vec::new())
        });
        assert_eq!(result.map(|p| p.completed), Ok(1));
        let (h, body) = seen.expect("handler called");
        assert_eq!((h.opcode, h.token, body), (0x0033, 44, vec![1, 2]));
        assert_eq!(drv.resp(resp), expected_response(Status::Ok, 0x0033, 44, 0));
    }

    #[test]
    fn losing_the_rings_stops_the_queue_with_a_dma_error() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&nop(1));
        let resp = drv.room(32);
        drv.submit(&[req, resp]);
        let empty = GuestMemoryMmap::new();
        assert!(!q.has_work(&empty));
        let result = q.process(&empty, &empty, |_, _, _| panic!("nothing to run"));
        assert_eq!(result, Err(ERR_CMDQ_DMA));
        assert!(!q.is_running());
    }

    #[test]
    fn stop_and_restart_begin_again_at_index_zero() {
        let (mut drv, mut q) = Driver::started(8);
        let req = drv.put(&nop(1));
        let resp = drv.room(32);
        let head = drv.chain(&[req, resp]);
        drv.publish(head);
        drv.publish(head);
        assert_eq!(run(&mut q, &drv).0.map(|p| p.completed), Ok(2));
        q.stop();
        assert!(!q.is_running());
        drv.publish(head);
        assert!(!q.has_work(&drv.mem));
        assert_eq!(run(&mut q, &drv).0, Ok(Processed::default()));

        // The driver re-initialises its rings and starts over.
        let mut drv2 = Driver::new(8);
        q.start(drv2.rings(), &drv2.mem).unwrap();
        let req = drv2.put(&nop(9));
        let resp = drv2.room(32);
        drv2.submit(&[req, resp]);
        assert_eq!(run(&mut q, &drv2).0.map(|p| p.completed), Ok(1));
        assert_eq!(drv2.used_idx(), 1);
        assert_eq!(drv2.resp(resp).token, 9);
    }
}
