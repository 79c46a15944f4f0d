//! Lab 4, the reference solution: post an RDMA WRITE and poll its completion by hand.

use rnic_abi::verbs::{self as v};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use zerocopy::{FromBytes, IntoBytes};

use crate::lab3::ENTRIES;
use crate::lab4::{Setup, Write};
use crate::nic::{wait_for, Nic, Result};

/// Steps 1-3 (§7.6 "Send WQE", §7.5 "Posting", §4.4).
pub fn post(nic: &dyn Nic, s: &mut Setup, w: &Write) -> Result<()> {
    let o = &s.objects;
    // Step 1: the WQE at entry posted % entries; its one SGE right after the fixed part.
    let wqe = v::SendWqe {
        wr_id: w.wr_id,
        opcode: v::wr::RDMA_WRITE,
        flags: v::send_flags::SIGNALED,
        num_sge: 1,
        remote_addr: o.iova + w.dst,
        rkey: o.mr.rkey,
        ..Default::default()
    };
    let sge = v::Sge {
        addr: o.iova + w.src,
        length: w.len,
        lkey: o.mr.lkey,
    };
    let at = (s.sq_posted % ENTRIES * v::sq_stride(1, 0)) as usize;
    let ring = &s.memory.sq[0];
    ring.write(at, wqe.as_bytes());
    ring.write(at + size_of::<v::SendWqe>(), sge.as_bytes());
    s.sq_posted = s.sq_posted.wrapping_add(1);

    // Step 2: the count (db_write fences before it), then the slot's bit.
    let (page, slot) = (o.qps[0].sq_doorbell.page, o.qps[0].sq_doorbell.slot);
    nic.db_write(doorbell::slot_offset(page, slot), s.sq_posted);
    let word = u64::from(page) * PAGE_SIZE + doorbell::RUNG_BITMAP + 4 * u64::from(slot / 32);
    nic.db_write(word, nic.db_read(word) | 1 << (slot % 32));

    // Step 3: a kick with the page number, only if the device asked.
    if nic.db_read(u64::from(page) * PAGE_SIZE + doorbell::NOTIFY_REQUEST) != 0 {
        nic.reg_write(regs::DOORBELL_KICK, page)?;
    }
    Ok(())
}

/// Steps 4-6 (§7.6 "CQE", "Ownership phase", §7.5 "Consuming").
pub fn poll(nic: &dyn Nic, s: &mut Setup) -> Result<v::Cqe> {
    let ring = &s.memory.cq_ring;
    let at = (s.cq_consumed % ENTRIES) as usize * size_of::<v::Cqe>();
    // New when its owner bit (byte 0x1B: bits 31:24 of the u32 at 0x18, an acquire
    // load) shows this pass's phase.
    let phase = v::owner_phase(s.cq_consumed, ENTRIES);
    wait_for(nic, "the completion", || {
        Ok((ring.load_u32(at + 0x18) >> 24) as u8 & 1 == phase)
    })?;
    let mut bytes = [0u8; size_of::<v::Cqe>()];
    ring.read(at, &mut bytes);
    let cqe = v::Cqe::read_from_bytes(&bytes).map_err(|_| "CQE size")?;
    s.cq_consumed = s.cq_consumed.wrapping_add(1);
    let cq = s.objects.cq.doorbell;
    nic.db_write(doorbell::slot_offset(cq.page, cq.slot), s.cq_consumed);
    Ok(cqe)
}
