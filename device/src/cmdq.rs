//! The device side of the command queue: a virtio split ring that carries commands from
//! the driver and their responses back (layouts in `rnic_abi::cmd`).

use std::num::Wrapping;
use std::sync::atomic::Ordering;

use rnic_abi::cmd::{
    CmdHeader, RespHeader, Status, CMDQ_AVAIL_ALIGN, CMDQ_DESC_ALIGN, CMDQ_MAX_SIZE,
    CMDQ_USED_ALIGN, CMD_MAX_LEN,
};
use rnic_abi::regs::{ERR_CMDQ_ADDRESS, ERR_CMDQ_BROKEN, ERR_CMDQ_DMA, ERR_CMDQ_SIZE};
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::{FromBytes, IntoBytes};

/// `VIRTQ_AVAIL_F_NO_INTERRUPT`: the driver polls and wants no interrupt.
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// What a command handler answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Completion status.
    pub status: Status,
    /// Status detail for [`RespHeader::syndrome`].
    pub syndrome: u32,
    /// The response structure that follows the header (empty on failure).
    pub body: Vec<u8>,
}

impl Response {
    /// A successful response carrying `body`.
    pub fn ok(body: Vec<u8>) -> Self {
        Self {
            status: Status::Ok,
            syndrome: 0,
            body,
        }
    }

    /// A failed response with no body.
    pub fn error(status: Status, syndrome: u32) -> Self {
        Self {
            status,
            syndrome,
            body: Vec::new(),
        }
    }
}

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
        mut handler: impl FnMut(&CmdHeader, &[u8]) -> Response,
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

/// Runs one chain and returns the number of bytes written into its writable part.
fn execute<M: std::ops::Deref<Target = GuestMemoryMmap>>(
    chain: virtio_queue::DescriptorChain<M>,
    rings: &GuestMemoryMmap,
    readable: &GuestMemoryMmap,
    handler: &mut impl FnMut(&CmdHeader, &[u8]) -> Response,
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
    let response = match header {
        _ if dma_error.is_some() => Response::error(Status::DmaError, dma_error.unwrap_or(0)),
        _ if malformed.is_some() => Response::error(Status::Malformed, malformed.unwrap_or(0)),
        None => Response::error(Status::Malformed, request.len() as u32),
        Some(header) => handler(&header, body),
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
