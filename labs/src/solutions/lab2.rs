//! Lab 2, the reference solution: bring the function up and run its command queue.

use rnic_abi::cmd::{CmdHeader, Opcode, RespHeader, Status};
use rnic_abi::pci::cfg;
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use rnic_driver::transport::DmaBuffer;
use zerocopy::{FromBytes, IntoBytes};

use crate::lab2::Queue;
use crate::nic::{wait_for, Nic, Result};

/// Entries of the queue; the rings of §6.3 for 64 entries fit one page.
const SIZE: u16 = 64;
/// Offsets in the rings' page: the descriptor table at 0, then these.
const AVAIL: usize = 0x400; // flags u16, idx u16, ring[SIZE] u16
const USED: usize = 0x488; //  flags u16, idx u16, ring[SIZE] {id u32, len u32}
const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// The command queue of §6: one page of rings, one page each for the request and the
/// response (one command at a time).
pub struct CommandQueue {
    rings: DmaBuffer,
    req: DmaBuffer,
    resp: DmaBuffer,
    /// Commands sent so far: avail->idx.
    sent: u16,
}

/// Brings the function up and starts its command queue (§10 steps 2-8).
pub fn start(nic: &dyn Nic) -> Result<CommandQueue> {
    // Step 1 (§8, §10 steps 4-5, §5.5): memory decoding, reset, READY, bus mastering.
    let command = nic.config_read16(cfg::COMMAND)?;
    nic.config_write16(cfg::COMMAND, command | cfg::COMMAND_MEMORY)?;
    nic.reg_write(regs::DEVICE_CONTROL, regs::CONTROL_RESET)?;
    wait_for(nic, "READY", || {
        Ok(nic.reg_read(regs::DEVICE_STATUS)? & regs::STATUS_READY != 0)
    })?;
    let command = nic.config_read16(cfg::COMMAND)?;
    nic.config_write16(cfg::COMMAND, command | cfg::COMMAND_BUS_MASTER)?;

    // Step 2 (§6.1): the rings' addresses, low half first, the size, then ENABLE.
    let rings = nic.alloc_dma(PAGE_SIZE as usize)?;
    let req = nic.alloc_dma(PAGE_SIZE as usize)?;
    let resp = nic.alloc_dma(PAGE_SIZE as usize)?;
    rings.store_u16(AVAIL, AVAIL_F_NO_INTERRUPT);
    let base = rings.device_addr(0);
    for (lo, addr) in [
        (regs::CMDQ_DESC_LO, base),
        (regs::CMDQ_AVAIL_LO, base + AVAIL as u64),
        (regs::CMDQ_USED_LO, base + USED as u64),
    ] {
        nic.reg_write(lo, addr as u32)?;
        nic.reg_write(lo + 4, (addr >> 32) as u32)?;
    }
    nic.reg_write(regs::CMDQ_SIZE, u32::from(SIZE))?;
    nic.reg_write(regs::CMDQ_MSIX_VECTOR, regs::NO_VECTOR)?;
    nic.reg_write(regs::CMDQ_CONTROL, regs::CMDQ_ENABLE)?;
    if nic.reg_read(regs::DEVICE_STATUS)? & regs::STATUS_CMDQ_RUNNING == 0 {
        let code = nic.reg_read(regs::ERROR_CODE)?;
        return Err(format!(
            "the command queue did not start: ERROR_CODE {code} (§6.2)"
        ));
    }
    Ok(CommandQueue {
        rings,
        req,
        resp,
        sent: 0,
    })
}

impl Queue for CommandQueue {
    fn execute(
        &mut self,
        nic: &dyn Nic,
        opcode: Opcode,
        body: &[u8],
        resp_len: usize,
    ) -> Result<Vec<u8>> {
        // §6.4: the request (readable) chained to the room for the response (writable).
        let token = u32::from(self.sent) + 1;
        let header = CmdHeader {
            opcode: opcode as u16,
            reserved: 0,
            token,
        };
        self.req.write(0, header.as_bytes());
        self.req.write(size_of::<CmdHeader>(), body);
        let room = size_of::<RespHeader>() + resp_len;
        let chain = [
            (
                self.req.device_addr(0),
                size_of::<CmdHeader>() + body.len(),
                DESC_F_NEXT,
                1u16,
            ),
            (self.resp.device_addr(0), room, DESC_F_WRITE, 0),
        ];
        for (i, (addr, len, flags, next)) in chain.into_iter().enumerate() {
            let mut desc = [0u8; 16];
            desc[0..8].copy_from_slice(&addr.to_le_bytes());
            desc[8..12].copy_from_slice(&(len as u32).to_le_bytes());
            desc[12..14].copy_from_slice(&flags.to_le_bytes());
            desc[14..16].copy_from_slice(&next.to_le_bytes());
            self.rings.write(16 * i, &desc);
        }

        // Step 4 (§6.10): the ring entry, then avail->idx, then the doorbell.
        let slot = usize::from(self.sent % SIZE);
        self.rings.store_u16(AVAIL + 4 + 2 * slot, 0);
        self.sent = self.sent.wrapping_add(1);
        self.rings.store_u16(AVAIL + 2, self.sent);
        nic.db_write(doorbell::CMDQ_DOORBELL, u32::from(self.sent));
        // Step 5 (§4.4): a kick only if the device asked for one.
        if nic.db_read(doorbell::NOTIFY_REQUEST) != 0 {
            nic.reg_write(regs::DOORBELL_KICK, 0)?;
        }

        // §6.9: used->idx catches up; the used element says how much was written.
        let name = format!("{opcode:?}");
        wait_for(
            nic,
            &name,
            || Ok(self.rings.load_u16(USED + 2) == self.sent),
        )?;
        let written = self.rings.load_u32(USED + 4 + 8 * slot + 4) as usize;
        let mut bytes = vec![0u8; room];
        self.resp.read(0, &mut bytes);
        let (head, rest) = RespHeader::read_from_prefix(&bytes).map_err(|_| "response")?;
        if written < size_of::<RespHeader>() || head.token != token {
            return Err(format!(
                "{name}: used length {written}, token {}",
                head.token
            ));
        }
        // Step 7 (§6.7): the status.
        if head.status != Status::Ok as u16 {
            let status =
                Status::from_u16(head.status).map_or("unknown".into(), |s| format!("{s:?}"));
            return Err(format!(
                "{name}: status {} ({status}), syndrome {:#x}",
                head.status, head.syndrome
            ));
        }
        Ok(rest[..resp_len].to_vec())
    }
}
