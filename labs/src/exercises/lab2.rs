//! Lab 2, your solution: bring the function up and run its command queue
//! (docs/labs/lab2.md). `cargo run -p rnic-labs -- check 2` judges it step by step.

#![allow(
    unreachable_code,
    unused_variables,
    unused_mut,
    unused_imports,
    dead_code
)]

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
    // Step 1 (§8, §10 steps 4-5, §5.5): set Memory Space Enable, reset the function
    // (DEVICE_CONTROL), wait for DEVICE_STATUS.READY with `wait_for`, then set Bus
    // Master Enable.
    todo!("step 1: reset, READY, Bus Master Enable");

    // Step 2 (§6.1): three pages of DMA memory (nic.alloc_dma); the three ring
    // addresses (low register first), CMDQ_SIZE, CMDQ_MSIX_VECTOR = regs::NO_VECTOR, then
    // CMDQ_CONTROL = regs::CMDQ_ENABLE; check DEVICE_STATUS.CMDQ_RUNNING.
    todo!("step 2: the ring registers, then ENABLE")
}

impl Queue for CommandQueue {
    fn execute(
        &mut self,
        nic: &dyn Nic,
        opcode: Opcode,
        body: &[u8],
        resp_len: usize,
    ) -> Result<Vec<u8>> {
        // Done for you (§6.4): the request (readable) chained to the room for the
        // response (writable), in descriptors 0 and 1.
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

        // Steps 4-5 (§6.10, §4.4): put descriptor 0 in the available ring, publish
        // avail->idx (DmaBuffer::store_u16), ring CMDQ_DOORBELL, and kick if the device
        // asked for it in NOTIFY_REQUEST.
        todo!("step 4: the available ring and the doorbell");

        // Step 3 (§6.9, §6.6): wait until used->idx catches up, then read the RespHeader
        // and the response after it.
        // Step 7 (§6.7): a status other than OK is an error that names it.
        todo!("step 3: wait for the answer and read it")
    }
}
