//! Lab 1, your solution: identify the function (docs/labs/lab1.md).
//!
//! Replace each `todo!` with the code that finds the value, reading the datasheet
//! section it names; run `cargo run -p rnic-labs -- check 1` to see each step's verdict.

#![allow(unreachable_code, unused_variables, unused_imports)]
// The skeleton compiles as shipped: what is still to write is `todo!()`.
#![allow(clippy::diverging_sub_expression)]

use rnic_abi::pci::{self, cfg};
use rnic_abi::regs;

use crate::lab1::Identity;
use crate::nic::{Nic, Result};

/// Identifies the function.
pub fn identify(nic: &dyn Nic) -> Result<Identity> {
    // Step 1 (§2.1): the PCI identity. Done for you, as an example.
    let vendor_id = nic.config_read16(cfg::VENDOR_ID)?;
    let device_id = nic.config_read16(cfg::DEVICE_ID)?;
    if vendor_id != pci::VENDOR_ID {
        return Err(format!("vendor {vendor_id:#06x} is not rnic's"));
    }

    // Step 2 (§2.2): set Memory Space Enable (cfg::COMMAND_MEMORY) in COMMAND, keeping
    // the other bits, before anything touches BAR0.
    todo!("step 2: Memory Space Enable");

    // Step 3 (§3.3): read MAGIC (check it is regs::MAGIC) and ABI_VERSION.
    let abi: (u16, u16) = todo!("step 3: MAGIC and ABI_VERSION");

    // Step 4 (§3.3): FUNCTION_INFO: regs::FUNCTION_IS_VF, regs::FUNCTION_VF_INDEX_SHIFT.
    let vf_index: Option<u8> = todo!("step 4: FUNCTION_INFO");

    // Step 5 (§3.4): CAPS_LO and CAPS_HI.
    let caps: u64 = todo!("step 5: CAPS");

    // Step 6 (§2.3): walk the capability list from cfg::CAP_PTR to the capability with ID
    // cfg::CAP_ID_MSIX; its Message Control (cfg::MSIX_MSG_CTRL) holds the table size.
    let msix_vectors: u16 = todo!("step 6: MSI-X vectors");

    // Step 7 (§2.2): size BAR2 (config cfg::BAR0 + 8; a 64-bit BAR is two dwords):
    // remember it, write all ones, read the mask back, write the old value back.
    let doorbell_bar_size: u64 = todo!("step 7: the doorbell BAR's size");

    Ok(Identity {
        vendor_id,
        device_id,
        vf_index,
        abi,
        caps,
        msix_vectors,
        doorbell_bar_size,
    })
}
