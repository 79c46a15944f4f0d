//! Lab 5, your solution: a WRITE completed by interrupt (docs/labs/lab5.md).
//! `cargo run -p rnic-labs -- check 5` judges it step by step.

#![allow(unreachable_code, unused_variables, unused_imports)]
// The skeleton compiles as shipped: what is still to write is `todo!()`.
#![allow(clippy::diverging_sub_expression)]

use rnic_abi::doorbell;
use rnic_abi::pci::{self, cfg};
use rnic_abi::verbs::{self as v};
use zerocopy::FromBytes;

use crate::lab3::ENTRIES;
use crate::lab4::Write;
use crate::lab5::{State, VECTOR};
use crate::nic::{find_capability, Nic, Result};
use crate::solutions::lab4;

/// Turns interrupts on; the VMM has already wired the vectors.
pub fn enable(nic: &dyn Nic) -> Result<()> {
    // Step 1 (§2.3, §3.5): find the MSI-X capability (find_capability), set MSI-X
    // Enable and clear Function Mask in its Message Control.
    todo!("step 1: MSI-X Enable");

    // Step 2 (§3.5): clear the Mask bit of vector VECTOR's Vector Control in the MSI-X
    // table (BAR0 pci::MSIX_TABLE_OFFSET, pci::MSIX_ENTRY_SIZE bytes per entry, +0xC).
    todo!("step 2: unmask the vector")
}

/// Arms the CQ, posts `w`, sleeps until the interrupt, reads the event, then the CQE.
pub fn write_and_wait(nic: &dyn Nic, s: &mut State, w: &Write) -> Result<(v::Eqe, v::Cqe)> {
    // Step 3 (§7.5 "Arming"): one more arm sequence (s.arm_seq) into the CQ's arm word
    // (its slot + 4), shifted left by one; then post, with lab4::post(nic, &mut s.lab4, w).
    todo!("step 3: arm, then post");

    // Step 4 (§7.7): nic.wait_interrupt(VECTOR) until EQ entry s.eq_consumed % ENTRIES of
    // s.lab4.memory.eq_ring is new (its owner bit, bit 0 of byte 15, shows
    // v::owner_phase(s.eq_consumed, ENTRIES); load the u32 at +12, bits 31:24).
    // Step 5: read the v::Eqe.
    let eqe: v::Eqe = todo!("step 4: wait for the interrupt, then step 5: read the EQE");

    // Step 6 (§7.5 "Consuming"): the EQ's new consumer index into its slot; then take the
    // CQE with lab4::poll(nic, &mut s.lab4).
    todo!("step 6: the EQ's consumer index, then the CQE")
}
