//! Lab 1, the reference solution: identify the function.

use rnic_abi::pci::{self, cfg};
use rnic_abi::regs;

use crate::lab1::Identity;
use crate::nic::{Nic, Result};

/// Identifies the function (docs/labs/lab1.md).
pub fn identify(nic: &dyn Nic) -> Result<Identity> {
    // Step 1 (§2.1): the PCI identity.
    let vendor_id = nic.config_read16(cfg::VENDOR_ID)?;
    let device_id = nic.config_read16(cfg::DEVICE_ID)?;
    if vendor_id != pci::VENDOR_ID {
        return Err(format!("vendor {vendor_id:#06x} is not rnic's"));
    }

    // Step 2 (§2.2): decode BAR0 before touching it.
    let command = nic.config_read16(cfg::COMMAND)?;
    nic.config_write16(cfg::COMMAND, command | cfg::COMMAND_MEMORY)?;

    // Step 3 (§3.3): MAGIC says BAR0 decodes; ABI_VERSION is major.minor.
    let magic = nic.reg_read(regs::MAGIC_REG)?;
    if magic != regs::MAGIC {
        return Err(format!("MAGIC is {magic:#x}, not \"RNIC\""));
    }
    let version = nic.reg_read(regs::ABI_VERSION)?;
    let abi = ((version >> 16) as u16, version as u16);

    // Step 4 (§3.3): PF or VF.
    let info = nic.reg_read(regs::FUNCTION_INFO)?;
    let vf_index =
        (info & regs::FUNCTION_IS_VF != 0).then_some((info >> regs::FUNCTION_VF_INDEX_SHIFT) as u8);

    // Step 5 (§3.4): 64 capability bits in two registers.
    let caps =
        u64::from(nic.reg_read(regs::CAPS_LO)?) | u64::from(nic.reg_read(regs::CAPS_HI)?) << 32;

    // Step 6 (§2.3): walk the capability list to MSI-X.
    let mut at = usize::from(nic.config_read16(cfg::CAP_PTR)? & 0xFC);
    let mut msix_vectors = 0;
    while at != 0 {
        let header = nic.config_read16(at)?;
        if header as u8 == cfg::CAP_ID_MSIX {
            let control = nic.config_read16(at + cfg::MSIX_MSG_CTRL)?;
            msix_vectors = (control & 0x7FF) + 1;
            break;
        }
        at = usize::from(header >> 8) & 0xFC;
    }

    // Step 7 (§2.2): size BAR2 (64-bit: two dwords) with decoding off, then restore it.
    let bar = cfg::BAR0 + 4 * usize::from(pci::DOORBELL_BAR);
    let (lo, hi) = (nic.config_read32(bar)?, nic.config_read32(bar + 4)?);
    nic.config_write16(cfg::COMMAND, command)?;
    nic.config_write32(bar, u32::MAX)?;
    nic.config_write32(bar + 4, u32::MAX)?;
    let mask =
        u64::from(nic.config_read32(bar)? & !0xF) | u64::from(nic.config_read32(bar + 4)?) << 32;
    nic.config_write32(bar, lo)?;
    nic.config_write32(bar + 4, hi)?;
    nic.config_write16(cfg::COMMAND, command | cfg::COMMAND_MEMORY)?;

    Ok(Identity {
        vendor_id,
        device_id,
        vf_index,
        abi,
        caps,
        msix_vectors,
        doorbell_bar_size: (!mask).wrapping_add(1),
    })
}
