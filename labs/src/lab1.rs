//! Lab 1: config space and BARs (docs/labs/lab1.md). The driver finds out what the
//! function is, from its PCI identity, its capability list, its BARs and BAR0's identity
//! registers, without changing anything it does not restore.

use rnic_abi::pci::{self, cfg};
use rnic_abi::{doorbell, regs};

use crate::nic::{Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};

/// What a driver learns about a function before it sets anything up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// PCI vendor ID (§2.1).
    pub vendor_id: u16,
    /// PCI device ID: the PF's or a VF's (§2.1).
    pub device_id: u16,
    /// The VF index from FUNCTION_INFO (§3.3); `None` on the PF.
    pub vf_index: Option<u8>,
    /// ABI major and minor version from ABI_VERSION (§1.3, §3.3).
    pub abi: (u16, u16),
    /// CAPS_HI:CAPS_LO (§3.4).
    pub caps: u64,
    /// MSI-X vectors: the table size in the MSI-X capability's Message Control, plus one
    /// (§2.3).
    pub msix_vectors: u16,
    /// Size in bytes of the doorbell BAR (BAR2), found by the all-ones sizing protocol
    /// (§2.2).
    pub doorbell_bar_size: u64,
}

/// The student's code: identify the function.
pub type Code = fn(&dyn Nic) -> Result<Identity>;

/// The steps, as docs/labs/lab1.md numbers them.
pub const STEPS: [&str; 7] = [
    "the PCI identity (vendor and device ID)",
    "Memory Space Enable before any BAR0 access",
    "MAGIC and the ABI version",
    "FUNCTION_INFO: PF or VF, and which",
    "the capability bits",
    "MSI-X vectors, from the capability list",
    "the doorbell BAR's size, and the BAR restored",
];

/// Title of the report.
pub const TITLE: &str = "lab 1: config space and BARs";

/// Runs `code` on a fresh lab device's VF 0 and judges it.
pub fn check(code: Code) -> Report {
    let dev = LabDevice::new();
    let bar2 = cfg::BAR0 as u16 + 4 * u16::from(pci::DOORBELL_BAR);
    let bar2_before = dev.config_read32(usize::from(bar2)).unwrap_or(0);
    dev.clear_trace();
    let mut r = Report::new(TITLE, &STEPS);
    let id = match run_student(|| code(&dev)) {
        Ok(id) => id,
        Err(e) => {
            r.stopped(e);
            return r;
        }
    };
    let trace = dev.trace();
    let reads = |offset: u16| {
        trace.iter().any(|a| {
            matches!(a, Access::ConfigRead { offset: o, len, .. }
                if *o <= offset && offset < *o + *len as u16)
        })
    };
    let reg_read = |offset: u64| {
        trace
            .iter()
            .any(|a| matches!(a, Access::RegRead { offset: o, .. } if *o == offset))
    };

    // 1: the IDs, read from config space.
    let want = (pci::VENDOR_ID, pci::VF_DEVICE_ID);
    let step = if !reads(cfg::VENDOR_ID as u16) || !reads(cfg::DEVICE_ID as u16) {
        Err(
            "the vendor and device IDs were not read from config space (offsets 0x00, 0x02; \
             §2.1)"
                .into(),
        )
    } else if (id.vendor_id, id.device_id) != want {
        Err(format!(
            "the identity is {:04x}:{:04x}; config space says {:04x}:{:04x} (§2.1)",
            id.vendor_id, id.device_id, want.0, want.1
        ))
    } else {
        Ok(format!("{:04x}:{:04x}, a VF", want.0, want.1))
    };
    if !r.judge(0, step) {
        return r;
    }

    // 2: Memory Space Enable before the first BAR0 access.
    let enable = trace.iter().position(|a| {
        matches!(a, Access::ConfigWrite { offset, value, .. }
            if *offset == cfg::COMMAND as u16 && *value as u16 & cfg::COMMAND_MEMORY != 0)
    });
    let first_bar0 = trace
        .iter()
        .position(|a| matches!(a, Access::RegRead { .. } | Access::RegWrite { .. }));
    let step = match (enable, first_bar0) {
        (_, None) => Err("BAR0 was never read: the identity registers are there (§3.3)".into()),
        (None, Some(_)) => Err(
            "BAR0 was read but Memory Space Enable (COMMAND bit 1) was never \
                                set: a PCI function ignores memory accesses until then (§2.2)"
                .into(),
        ),
        (Some(e), Some(b)) if b < e => Err(format!(
            "BAR0 was accessed (access {b}) before Memory Space Enable was set (access {e}): a \
             PCI function ignores memory accesses until then (§2.2)"
        )),
        _ => Ok("COMMAND.MEMORY set, then BAR0".into()),
    };
    if !r.judge(1, step) {
        return r;
    }

    // 3: MAGIC checked, the version decoded.
    let abi = (rnic_abi::ABI_MAJOR, rnic_abi::ABI_MINOR);
    let step = if !reg_read(regs::MAGIC_REG) {
        Err("MAGIC (BAR0 0x000) was not read: it is how a driver knows BAR0 decodes (§3.3)".into())
    } else if id.abi != abi {
        Err(format!(
            "ABI {}.{} reported; ABI_VERSION holds {}.{} (major in bits 31:16, §3.3)",
            id.abi.0, id.abi.1, abi.0, abi.1
        ))
    } else {
        Ok(format!("\"RNIC\", ABI {}.{}", abi.0, abi.1))
    };
    if !r.judge(2, step) {
        return r;
    }

    // 4: FUNCTION_INFO.
    let step = if !reg_read(regs::FUNCTION_INFO) {
        Err("FUNCTION_INFO (BAR0 0x008) was not read (§3.3)".into())
    } else if id.vf_index != Some(0) {
        Err(format!(
            "vf_index {:?}; FUNCTION_INFO says VF 0 (bit 0 set, index in bits 15:8, §3.3)",
            id.vf_index
        ))
    } else {
        Ok("VF 0".into())
    };
    if !r.judge(3, step) {
        return r;
    }

    // 5: both halves of CAPS.
    let caps = u64::from(dev.reg_read(regs::CAPS_LO).unwrap_or(0))
        | u64::from(dev.reg_read(regs::CAPS_HI).unwrap_or(0)) << 32;
    let step = if !reg_read(regs::CAPS_LO) || !reg_read(regs::CAPS_HI) {
        Err("CAPS_LO and CAPS_HI (0x010, 0x014) were not both read (§3.4)".into())
    } else if id.caps != caps {
        Err(format!(
            "caps {:#x}; the device has {caps:#x} (CAPS_HI is bits 63:32, §3.4)",
            id.caps
        ))
    } else {
        Ok(format!("{caps:#x}"))
    };
    if !r.judge(4, step) {
        return r;
    }

    // 6: the capability list walked, not assumed.
    let step = if !reads(cfg::CAP_PTR as u16) {
        Err(
            "the capabilities pointer (config 0x34) was not read: walk the list rather than \
             assume where the MSI-X capability is (§2.3)"
                .into(),
        )
    } else if id.msix_vectors != pci::MSIX_VECTORS {
        Err(format!(
            "{} MSI-X vectors; the device has {} (Message Control bits 10:0 are the table \
             size minus one, §2.3)",
            id.msix_vectors,
            pci::MSIX_VECTORS
        ))
    } else {
        Ok(format!("{} vectors", pci::MSIX_VECTORS))
    };
    if !r.judge(5, step) {
        return r;
    }

    // 7: sized with all ones, and put back.
    let sized = trace.iter().any(|a| {
        matches!(a, Access::ConfigWrite { offset, value, .. }
            if *offset == bar2 && *value as u32 == u32::MAX)
    });
    let bar2_after = dev.config_read32(usize::from(bar2)).unwrap_or(0);
    let step = if !sized {
        Err(format!(
            "BAR2 (config {bar2:#x}) was not sized: write all ones, read the mask back, \
             restore (§2.2)"
        ))
    } else if bar2_after != bar2_before {
        Err(format!(
            "BAR2 holds {bar2_after:#x} after sizing, not its address {bar2_before:#x}: write \
             the old value back (§2.2)"
        ))
    } else if id.doorbell_bar_size != doorbell::BAR_SIZE {
        Err(format!(
            "doorbell BAR of {:#x} bytes; it has {:#x} (size = !(mask & !0xF) + 1, §2.2)",
            id.doorbell_bar_size,
            doorbell::BAR_SIZE
        ))
    } else {
        Ok(format!("{:#x} bytes, BAR2 restored", doorbell::BAR_SIZE))
    };
    r.judge(6, step);
    r
}

/// Runs `code` on a real function (`rnic-lab run 1`): what it found.
pub fn run(nic: &dyn Nic, code: Code) -> Result<String> {
    let id = run_student(|| code(nic))?;
    let function = id.vf_index.map_or("the PF".into(), |vf| format!("VF {vf}"));
    Ok(format!(
        "{:04x}:{:04x}, {function}, ABI {}.{}, caps {:#x}, {} MSI-X vectors, doorbell BAR of \
         {:#x} bytes",
        id.vendor_id,
        id.device_id,
        id.abi.0,
        id.abi.1,
        id.caps,
        id.msix_vectors,
        id.doorbell_bar_size
    ))
}
