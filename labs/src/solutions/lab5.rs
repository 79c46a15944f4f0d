//! Lab 5, the reference solution: a WRITE completed by interrupt.

use rnic_abi::doorbell;
use rnic_abi::pci::{self, cfg};
use rnic_abi::verbs::{self as v};
use zerocopy::FromBytes;

use crate::lab3::ENTRIES;
use crate::lab4::Write;
use crate::lab5::{State, VECTOR};
use crate::nic::{find_capability, Nic, Result};
use crate::solutions::lab4;

/// Steps 1-2 (§2.3, §3.5): MSI-X on, the function and the vector unmasked.
pub fn enable(nic: &dyn Nic) -> Result<()> {
    let cap = find_capability(nic, cfg::CAP_ID_MSIX)?.ok_or("no MSI-X capability")?;
    let at = usize::from(cap) + cfg::MSIX_MSG_CTRL;
    let control = nic.config_read16(at)?;
    nic.config_write16(at, (control | cfg::MSIX_ENABLE) & !cfg::MSIX_FUNCTION_MASK)?;
    let entry = pci::MSIX_TABLE_OFFSET + pci::MSIX_ENTRY_SIZE * u64::from(VECTOR);
    nic.reg_write(entry + 0xC, 0) // Vector Control: Mask clear
}

/// Steps 3-6 (§7.5 "Arming", §7.7): arm, post, sleep, read the event, then the CQE.
pub fn write_and_wait(nic: &dyn Nic, s: &mut State, w: &Write) -> Result<(v::Eqe, v::Cqe)> {
    let o = s.lab4.objects;
    // Step 3: arm before posting, or the CQE may come before the arm and raise nothing.
    s.arm_seq += 1;
    let cq = o.cq.doorbell;
    nic.db_write(doorbell::slot_offset(cq.page, cq.slot) + 4, s.arm_seq << 1);
    lab4::post(nic, &mut s.lab4, w)?;

    // Step 4: sleep until the EQ's vector fires.
    let ring = &s.lab4.memory.eq_ring;
    let at = (s.eq_consumed % ENTRIES) as usize * size_of::<v::Eqe>();
    let phase = v::owner_phase(s.eq_consumed, ENTRIES);
    let is_new = || (ring.load_u32(at + 12) >> 24) as u8 & 1 == phase;
    while !is_new() {
        if !nic.wait_interrupt(VECTOR)? {
            return Err("no interrupt within a second".into());
        }
    }

    // Step 5: the EQE (owner bit in its last byte, loaded with acquire first).
    let mut bytes = [0u8; size_of::<v::Eqe>()];
    ring.read(at, &mut bytes);
    let eqe = v::Eqe::read_from_bytes(&bytes).map_err(|_| "EQE size")?;

    // Step 6: hand the EQ entry back, then take the CQE the event announced.
    s.eq_consumed += 1;
    let eq = o.eq.doorbell;
    nic.db_write(doorbell::slot_offset(eq.page, eq.slot), s.eq_consumed);
    let cqe = lab4::poll(nic, &mut s.lab4)?;
    Ok((eqe, cqe))
}
