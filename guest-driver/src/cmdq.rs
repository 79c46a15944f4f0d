//! The driver side of the command queue and of the PF's admin queue: a virtio split ring
//! in DMA memory, one command in flight at a time (commands are control-path work;
//! simplicity wins here). Both queues are the same but for their registers
//! (`rnic_abi::regs::QueueRegs`).

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use rnic_abi::cmd::{CmdHeader, RespHeader, Status};
use rnic_abi::doorbell::NOTIFY_REQUEST;
use rnic_abi::regs::{self, QueueRegs};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Error, Result};
use crate::transport::{poll_until, DmaBuffer, ResetWatch, Transport};

/// Entries of the driver's command queue.
pub const QUEUE_SIZE: u16 = 64;
/// How long a command may take before the driver gives up.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// MSI-X vector the driver asks for command completions.
pub const CMDQ_VECTOR: u16 = 0;

const DESC_SIZE: usize = 16;
const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Where the three rings sit in the queue's one page.
struct Layout {
    avail: usize,
    used: usize,
}

const LAYOUT: Layout = {
    let desc_end = QUEUE_SIZE as usize * DESC_SIZE;
    let avail_end = desc_end + 4 + 2 * QUEUE_SIZE as usize + 2;
    Layout {
        avail: desc_end,
        used: avail_end.next_multiple_of(4),
    }
};

/// A running command queue.
pub struct CommandQueue {
    regs: QueueRegs,
    /// MSI-X vector completions are signalled on, if any.
    vector: Option<u16>,
    rings: DmaBuffer,
    next_avail: u16,
    last_used: u16,
    next_token: u32,
    stats: QueueStats,
    /// The function's reset count when the queue started: any reset since stopped it.
    resets: ResetWatch,
}

/// Counters of how the queue talked to the device.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Commands completed.
    pub commands: u64,
    /// Doorbells that needed a kick (a trapped register write) because the device slept.
    pub kicks: u64,
    /// Completion interrupts received.
    pub interrupts: u64,
}

/// The raw outcome of a command that the device answered.
#[derive(Debug, Clone)]
pub struct Completion {
    /// Response header.
    pub header: RespHeader,
    /// Response body.
    pub body: Vec<u8>,
}

impl CommandQueue {
    /// Sets up and starts the queue on `t`. `interrupts` says whether completions are to be
    /// signalled on [`CMDQ_VECTOR`] (otherwise the driver polls the used ring).
    pub fn start(t: &dyn Transport, interrupts: bool) -> Result<Self> {
        Self::start_on(t, regs::CMDQ_REGS, interrupts.then_some(CMDQ_VECTOR))
    }

    /// Sets up and starts the queue whose registers are `qregs` (the command queue's or
    /// the admin queue's), with completions signalled on `vector` or, if `None`, polled.
    pub fn start_on(t: &dyn Transport, qregs: QueueRegs, vector: Option<u16>) -> Result<Self> {
        let resets = ResetWatch::new(t);
        let rings = t.alloc_dma(rnic_abi::PAGE_SIZE as usize)?;
        let base = rings
            .contiguous()
            .ok_or_else(|| Error::Device("command queue page is not contiguous".into()))?;
        let flags = if vector.is_some() {
            0
        } else {
            AVAIL_F_NO_INTERRUPT
        };
        rings.store_u16(LAYOUT.avail, flags);
        let write64 = |lo: u64, v: u64| -> Result<()> {
            t.reg_write32(lo, v as u32)?;
            t.reg_write32(lo + 4, (v >> 32) as u32)
        };
        write64(qregs.desc_lo, base)?;
        write64(qregs.avail_lo, base + LAYOUT.avail as u64)?;
        write64(qregs.used_lo, base + LAYOUT.used as u64)?;
        t.reg_write32(qregs.size, u32::from(QUEUE_SIZE))?;
        t.reg_write32(qregs.msix_vector, vector.map_or(regs::NO_VECTOR, u32::from))?;
        t.reg_write32(qregs.control, regs::CMDQ_ENABLE)?;
        let status = t.reg_read32(regs::DEVICE_STATUS)?;
        if status & regs::STATUS_DISABLED != 0 {
            return Err(Error::Device(
                "the function is disabled by its PF (SET_NUM_VFS); enable it with rnic-admin vfs"
                    .into(),
            ));
        }
        if status & qregs.running == 0 {
            let code = t.reg_read32(qregs.error_code)?;
            return Err(Error::Device(format!(
                "the queue at {:#x} did not start: {} (error code {code})",
                qregs.desc_lo,
                describe_error_code(code)
            )));
        }
        Ok(Self {
            regs: qregs,
            vector,
            rings,
            next_avail: 0,
            last_used: 0,
            next_token: 1,
            stats: QueueStats::default(),
            resets,
        })
    }

    /// Sends `opcode` with `request` as its body and waits for the response, which may be up
    /// to `response_len` bytes after the header.
    ///
    /// Fails at once, before and during the wait, when the function is lost: the
    /// transport lost it ([`Error::DeviceGone`], [`Transport::check_alive`]) or it was
    /// reset since the queue started ([`Error::FunctionReset`]; a reset stops the queue,
    /// so no completion would come).
    pub fn execute(
        &mut self,
        t: &dyn Transport,
        opcode: u16,
        request: &[u8],
        response_len: usize,
    ) -> Result<Completion> {
        self.resets.check(t)?;
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        let header = CmdHeader {
            opcode,
            reserved: 0,
            token,
        };
        let req = t.alloc_dma(size_of::<CmdHeader>() + request.len())?;
        req.write(0, header.as_bytes());
        req.write(size_of::<CmdHeader>(), request);
        let resp_len = size_of::<RespHeader>() + response_len;
        let resp = t.alloc_dma(resp_len)?;

        let mut chain = segments(&req, size_of::<CmdHeader>() + request.len(), 0);
        chain.extend(segments(&resp, resp_len, DESC_F_WRITE));
        if chain.len() > usize::from(QUEUE_SIZE) {
            return Err(Error::Device("command too fragmented for the queue".into()));
        }
        for (i, (addr, len, flags)) in chain.iter().enumerate() {
            let last = i + 1 == chain.len();
            let flags = flags | if last { 0 } else { DESC_F_NEXT };
            let mut d = [0u8; DESC_SIZE];
            d[0..8].copy_from_slice(&addr.to_le_bytes());
            d[8..12].copy_from_slice(&len.to_le_bytes());
            d[12..14].copy_from_slice(&flags.to_le_bytes());
            d[14..16].copy_from_slice(&((i + 1) as u16).to_le_bytes());
            self.rings.write(i * DESC_SIZE, &d);
        }
        let slot = usize::from(self.next_avail % QUEUE_SIZE);
        self.rings.store_u16(LAYOUT.avail + 4 + 2 * slot, 0);
        self.next_avail = self.next_avail.wrapping_add(1);
        // Descriptors and ring entry first, then the index that publishes them.
        self.rings.store_u16(LAYOUT.avail + 2, self.next_avail);
        if ring_doorbell(t, self.regs.doorbell, u32::from(self.next_avail))? {
            self.stats.kicks += 1;
        }

        let used_idx = LAYOUT.used + 2;
        let expected = self.last_used.wrapping_add(1);
        let (rings, vector, stats) = (&self.rings, self.vector, &mut self.stats);
        let resets = &self.resets;
        let mut wait = || -> Result<Option<()>> {
            resets.check(t)?;
            // With interrupts, the device signals after it wrote the used ring: wait for
            // the signal first, so that none is left behind for the next command.
            if let Some(vector) = vector {
                if t.wait_interrupt(vector, Duration::from_millis(10))? {
                    stats.interrupts += 1;
                }
            }
            Ok((rings.load_u16(used_idx) == expected).then_some(()))
        };
        poll_until(COMMAND_TIMEOUT, "a command completion", &mut wait)?;
        self.stats.commands += 1;
        let elem = LAYOUT.used + 4 + 8 * usize::from(self.last_used % QUEUE_SIZE);
        self.last_used = expected;
        let written = self.rings.load_u32(elem + 4) as usize;
        if written < size_of::<RespHeader>() {
            return Err(Error::Device(format!(
                "command {opcode:#06x}: the device wrote {written} bytes, no full response header (response buffer unreachable?)"
            )));
        }
        let mut bytes = vec![0u8; written.min(resp_len)];
        resp.read(0, &mut bytes);
        let (header, body) = RespHeader::read_from_prefix(&bytes)
            .map_err(|_| Error::Device("short response".into()))?;
        if header.token != token {
            return Err(Error::Device(format!(
                "response token {} does not match command token {token}",
                header.token
            )));
        }
        Ok(Completion {
            header,
            body: body.to_vec(),
        })
    }

    /// How the queue has talked to the device so far.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }
}

/// Writes `value` to the doorbell at `offset` of page 0 and kicks the device if it asked;
/// returns whether it kicked.
pub fn ring_doorbell(t: &dyn Transport, offset: u64, value: u32) -> Result<bool> {
    let db = t.doorbells();
    // Everything the doorbell announces (descriptors, ring index) before the doorbell.
    fence(Ordering::Release);
    db.write32(offset, value);
    // The doorbell store must be visible before we read the device's request; the device
    // fences between setting the request and its last look at the doorbells.
    fence(Ordering::SeqCst);
    if db.read32(NOTIFY_REQUEST) != 0 {
        t.reg_write32(regs::DOORBELL_KICK, 0)?;
        return Ok(true);
    }
    Ok(false)
}

/// (device address, length, flags) runs of a buffer's first `len` bytes, merging pages the
/// device sees as contiguous.
fn segments(buf: &DmaBuffer, len: usize, flags: u16) -> Vec<(u64, u32, u16)> {
    let page = rnic_abi::PAGE_SIZE as usize;
    let mut out: Vec<(u64, u32, u16)> = Vec::new();
    let mut offset = 0;
    while offset < len {
        let n = (page - offset % page).min(len - offset);
        let addr = buf.device_addr(offset);
        match out.last_mut() {
            Some((a, l, _)) if *a + u64::from(*l) == addr => *l += n as u32,
            _ => out.push((addr, n as u32, flags)),
        }
        offset += n;
    }
    out
}

/// Turns a status into a driver error, or passes an OK response on.
pub fn check(opcode: u16, c: Completion) -> Result<Completion> {
    match Status::from_u16(c.header.status) {
        Some(Status::Ok) => Ok(c),
        s => Err(Error::Command {
            opcode,
            status: c.header.status,
            name: s.map_or("unknown", status_name),
        }),
    }
}

/// The name of a status, as the hardware interface document spells it.
pub fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "OK",
        Status::BadOpcode => "BAD_OPCODE",
        Status::BadParam => "BAD_PARAM",
        Status::Malformed => "MALFORMED",
        Status::DmaError => "DMA_ERROR",
        Status::NoResources => "NO_RESOURCES",
        Status::NotPermitted => "NOT_PERMITTED",
        Status::Internal => "INTERNAL",
        Status::Busy => "BUSY",
        Status::NotFound => "NOT_FOUND",
        Status::BadState => "BAD_STATE",
    }
}

/// What an `ERROR_CODE` register value means.
pub fn describe_error_code(code: u32) -> &'static str {
    match code {
        regs::ERR_NONE => "no error",
        regs::ERR_CMDQ_SIZE => "queue size is zero, not a power of two, or too large",
        regs::ERR_CMDQ_ADDRESS => "a ring is misaligned or not in DMA-mapped memory (is guest RAM shared with rnicd, e.g. memory-backend-memfd?)",
        regs::ERR_CMDQ_VECTOR => "MSI-X vector beyond the table",
        regs::ERR_BUS_MASTER => "bus mastering is off; set Bus Master Enable in the PCI command register",
        regs::ERR_CMDQ_DMA => "the device lost access to the rings",
        regs::ERR_CMDQ_BROKEN => "the available ring named a bad descriptor",
        _ => "unknown error code",
    }
}
