//! Lab 8, the reference solution: move a live QP from VF 0 to VF 1 and follow it.

use rnic_abi::cmd::Opcode;
use rnic_abi::doorbell;
use rnic_abi::migration::{AdoptQpReq, AdoptQpResp, MigrateQpReq, MigrateQpResp};
use rnic_abi::verbs::{self as v, event};
use zerocopy::{FromBytes, IntoBytes};

use crate::lab2::{call, Queue};
use crate::lab3::ENTRIES;
use crate::lab8::{ring, Admin, EventQueue, Mover};
use crate::nic::{wait_for, Nic, Result};

/// Steps 1-2 (§12.1, §12.8 "The command"): MIGRATE_QP, the QP's own CQ moving with it.
pub fn migrate(admin: &mut dyn Admin, m: &Mover) -> Result<MigrateQpResp> {
    let req = MigrateQpReq {
        // Member ids: 0 is the PF, n is VF n - 1.
        from: m.vfs[0] + 1,
        to: m.vfs[1] + 1,
        qpn: m.qpn,
        flags: 0,
        send_cq: 0,
        recv_cq: 0,
        doorbell_page: m.page,
        reserved: 0,
    };
    let body = admin.command(
        Opcode::MigrateQp,
        req.as_bytes(),
        size_of::<MigrateQpResp>(),
    )?;
    MigrateQpResp::read_from_bytes(&body).map_err(|_| format!("{} bytes of answer", body.len()))
}

/// Waits for the next EQE of `eq`, reads it and hands the entry back (§7.6 "EQE", §7.5
/// "Consuming").
pub fn next_event(nic: &dyn Nic, eq: &mut EventQueue) -> Result<v::Eqe> {
    let at = (eq.consumed % ENTRIES) as usize * size_of::<v::Eqe>();
    let phase = v::owner_phase(eq.consumed, ENTRIES);
    let ring = &eq.ring;
    // The owner byte is bits 31:24 of the u32 at +0x0C, written last.
    wait_for(nic, "an event", || {
        Ok((ring.load_u32(at + 0x0C) >> 24) as u8 & 1 == phase)
    })?;
    let mut bytes = [0u8; size_of::<v::Eqe>()];
    eq.ring.read(at, &mut bytes);
    let eqe = v::Eqe::read_from_bytes(&bytes).map_err(|_| "EQE size")?;
    eq.consumed = eq.consumed.wrapping_add(1);
    let slot = eq.eq.doorbell;
    nic.db_write(doorbell::slot_offset(slot.page, slot.slot), eq.consumed);
    Ok(eqe)
}

/// Step 3 (§12.8 "Events and the drivers"): QP_DEPARTED; the old doorbells are not
/// rung again.
pub fn depart(nic: &dyn Nic, m: &mut Mover) -> Result<()> {
    let eqe = next_event(nic, &mut m.eqs[0])?;
    if eqe.event_type != event::QP_DEPARTED || eqe.object != m.qpn {
        return Err(format!(
            "VF 0's event {:#x} for {:#x}",
            eqe.event_type, eqe.object
        ));
    }
    m.at = None;
    Ok(())
}

/// Steps 4-5 (§12.8 "Events and the drivers"): QP_ARRIVED, ADOPT_QP, the new numbers and
/// slots, and the driver's counts on them.
pub fn adopt(nic: &dyn Nic, q: &mut dyn Queue, m: &mut Mover) -> Result<()> {
    let eqe = next_event(nic, &mut m.eqs[1])?;
    if eqe.event_type != event::QP_ARRIVED || eqe.object != m.qpn {
        return Err(format!(
            "VF 1's event {:#x} for {:#x}",
            eqe.event_type, eqe.object
        ));
    }
    let req = AdoptQpReq {
        qpn: m.qpn,
        reserved: 0,
    };
    let a: AdoptQpResp = call(q, nic, Opcode::AdoptQp, req.as_bytes())?;
    m.pdn = a.pdn;
    m.cqn = a.send_cq;
    m.sq_doorbell = a.sq_doorbell;
    m.rq_doorbell = a.rq_doorbell;
    m.cq_doorbell = a.send_cq_doorbell;
    m.at = Some(1);
    // The CQ's consumer index, then each queue's producer count with its rung bit; the
    // last ring reads NOTIFY_REQUEST and kicks if asked.
    let cq = m.cq_doorbell;
    nic.db_write(doorbell::slot_offset(cq.page, cq.slot), m.cq_consumed);
    ring(nic, m.sq_doorbell, m.sq_posted)?;
    ring(nic, m.rq_doorbell, m.rq_posted)
}
