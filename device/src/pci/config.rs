//! The PCI Express configuration space of one rnic function (PF or VF).
//!
//! The space is a 4 KiB byte image plus two per-byte masks: the bits software may write and
//! the bits it clears by writing 1 (RW1C). Every other bit is read-only, so a guest can
//! write anything anywhere without breaking the device's identity. A few registers need
//! more than masks (the FLR trigger, NumVFs, the PMCSR power state); [`ConfigSpace::write`]
//! handles them after applying the masks and reports what changed in [`WriteEffects`], so
//! the caller can react (enable DMA, rebuild MSI-X routes, create VFs, reset the function).
//!
//! Layout (offsets from [`rnic_abi::pci::cfg`]):
//!
//! | offset  | contents                                              |
//! |---------|-------------------------------------------------------|
//! | 0x00    | type 0 header, 64-bit memory BARs                      |
//! | 0x40    | power management (version 3)                          |
//! | 0x50    | MSI-X, table and PBA in the register BAR               |
//! | 0x60    | PCI Express capability (version 2, endpoint)           |
//! | 0x100   | PF: SR-IOV extended capability; VF: empty (reads 0)    |

use std::fmt;
use std::io;

use rnic_abi::pci::{self, cfg, CONFIG_SPACE_SIZE};

/// One byte per config-space byte: the image itself or one of its masks.
type Image = [u8; CONFIG_SPACE_SIZE];

// Header registers that the ABI does not name because no driver needs them.
const CACHE_LINE_SIZE: usize = 0x0C;
const EXPANSION_ROM_BAR: usize = 0x30;

/// Command bits the guest may change. IO space (bit 0) stays 0 because no BAR is an IO
/// BAR; the others are the ones a PCIe endpoint implements (PCIe drops the rest of the
/// conventional-PCI bits).
const COMMAND_PARITY_ERROR_RESPONSE: u16 = 1 << 6;
const COMMAND_SERR: u16 = 1 << 8;
const COMMAND_WRITABLE: u16 = cfg::COMMAND_MEMORY
    | cfg::COMMAND_BUS_MASTER
    | COMMAND_PARITY_ERROR_RESPONSE
    | COMMAND_SERR
    | cfg::COMMAND_INTX_DISABLE;
/// Status error bits (master data parity error, signalled/received target abort, received
/// master abort, signalled system error, detected parity error): all RW1C.
const STATUS_W1C: u16 = (1 << 8) | (1 << 11) | (1 << 12) | (1 << 13) | (1 << 14) | (1 << 15);

/// BAR low bits: memory space (bit 0 clear), 64-bit (bits 2:1 = 0b10), prefetchable (bit 3).
const BAR_TYPE_64: u32 = 0b100;
const BAR_PREFETCHABLE: u32 = 1 << 3;
/// The four low BAR bits are type bits, never address bits.
const BAR_FLAG_BITS: u32 = 0xF;
/// Smallest BAR size: one page, so a BAR can be mmapped on its own.
const BAR_MIN_SIZE: u64 = 4096;
/// A 64-bit BAR occupies two BAR slots, so its low index must leave room for the upper half.
const MAX_BAR_INDEX: u8 = 4;

// Power-management capability.
const PM_PMC: usize = 0x02;
const PM_PMCSR: usize = 0x04;
const PM_CAP_SIZE: usize = 0x08;
/// PMC: version 3 of the PM spec; no D1/D2, no PME, no aux current.
const PM_PMC_VALUE: u16 = 0x0003;
const PMCSR_POWER_STATE: u16 = 0b11;
/// No_Soft_Reset: going D3hot -> D0 keeps the function's state, so the guest need not
/// re-initialise a device that only changed power state.
const PMCSR_NO_SOFT_RESET: u16 = 1 << 3;
const PMCSR_PME_STATUS: u16 = 1 << 15;

// MSI-X capability.
const MSIX_CAP_SIZE: usize = 0x0C;
/// The table size field holds N-1 in 11 bits.
const MSIX_MAX_VECTORS: u16 = 2048;

// PCI Express capability, relative offsets beyond those the ABI names.
const PCIE_FLAGS: usize = 0x02;
const PCIE_LNKCAP: usize = 0x0C;
const PCIE_LNKCTL: usize = 0x10;
const PCIE_LNKSTA: usize = 0x12;
const PCIE_DEVCAP2: usize = 0x24;
const PCIE_DEVCTL2: usize = 0x28;
const PCIE_LNKCAP2: usize = 0x2C;
const PCIE_LNKCTL2: usize = 0x30;
/// Size of a version-2 PCI Express capability of an endpoint.
const PCIE_CAP_SIZE: usize = 0x3C;
/// Capability version 2, device/port type 0 (PCI Express endpoint).
const PCIE_FLAGS_VALUE: u16 = 0x0002;
/// Max payload 256 B (encoding 1), role-based error reporting, FLR.
const PCIE_DEVCAP_VALUE: u32 = 0x1 | (1 << 15) | cfg::PCIE_DEVCAP_FLR;
/// Everything but the FLR trigger (bit 15), which is handled apart.
const PCIE_DEVCTL_WRITABLE: u16 = 0x7FFF;
/// Max read request 512 B (14:12 = 2), no snoop, relaxed ordering, max payload 128 B: what
/// a freshly reset PCIe function reports.
const PCIE_DEVCTL_POWER_ON: u16 = 0x2810;
/// Correctable, non-fatal, fatal and unsupported-request detected.
const PCIE_DEVSTA_W1C: u16 = 0x000F;
/// 8.0 GT/s (speed 3), x16 (width in 9:4), no ASPM, port 0.
const LINK_SPEED_8GT: u32 = 3;
const LINK_WIDTH_X16: u32 = 16;
const PCIE_LNKCAP_VALUE: u32 = LINK_SPEED_8GT | (LINK_WIDTH_X16 << 4);
/// ASPM control (1:0), read completion boundary (3), common clock (6), extended synch (7).
const PCIE_LNKCTL_WRITABLE: u16 = 0b1100_1011;
/// Trained at the full speed and width; there is no real link to retrain.
const PCIE_LNKSTA_VALUE: u16 = (LINK_SPEED_8GT | (LINK_WIDTH_X16 << 4)) as u16;
/// Completion timeout ranges A-D and completion timeout disable supported.
const PCIE_DEVCAP2_VALUE: u32 = 0xF | (1 << 4);
/// Completion timeout value (3:0) and completion timeout disable (4).
const PCIE_DEVCTL2_WRITABLE: u16 = 0x1F;
/// Supported link speeds vector: 2.5, 5 and 8 GT/s (bits 1..=3).
const PCIE_LNKCAP2_VALUE: u32 = 0b1110;
/// Target link speed (3:0).
const PCIE_LNKCTL2_WRITABLE: u16 = 0xF;

// SR-IOV extended capability, relative offsets beyond those the ABI names.
const SRIOV_CAPABILITIES: usize = 0x04;
const SRIOV_FUNC_DEP_LINK: usize = 0x12;
const SRIOV_VF_MIGRATION_STATE: usize = 0x3C;
const SRIOV_VERSION: u32 = 1;
const SRIOV_CTRL_VF_MIGRATION_ENABLE: u16 = 1 << 1;
const SRIOV_CTRL_ARI_CAPABLE: u16 = 1 << 4;
const SRIOV_CTRL_WRITABLE: u16 = cfg::SRIOV_CTRL_VF_ENABLE
    | SRIOV_CTRL_VF_MIGRATION_ENABLE
    | cfg::SRIOV_CTRL_VF_MSE
    | SRIOV_CTRL_ARI_CAPABLE;
/// VF Migration Status.
const SRIOV_STATUS_W1C: u16 = 1 << 0;
/// VFs sit right after the PF in routing-ID space, one after the other.
const SRIOV_FIRST_VF_OFFSET: u16 = 1;
const SRIOV_VF_STRIDE: u16 = 1;
/// 4K, 8K, 64K, 256K, 1M and 4M pages: what the PCIe spec requires a PF to support.
const SRIOV_SUPPORTED_PAGE_SIZES_VALUE: u32 = 0x553;
/// 4 KiB pages until software says otherwise.
const SRIOV_SYSTEM_PAGE_SIZE_POWER_ON: u32 = 1;

// The capability offsets come from the ABI crate; make sure they leave each capability
// room, so a change there cannot silently overlap two capabilities.
const _: () = assert!(cfg::PM_CAP + PM_CAP_SIZE <= cfg::MSIX_CAP);
const _: () = assert!(cfg::MSIX_CAP + MSIX_CAP_SIZE <= cfg::PCIE_CAP);
const _: () = assert!(cfg::PCIE_CAP + PCIE_CAP_SIZE <= 0x100);
const _: () = assert!(cfg::SRIOV_CAP + cfg::SRIOV_CAP_SIZE <= CONFIG_SPACE_SIZE);

/// Which function a configuration space belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionKind {
    /// The physical function; it alone carries the SR-IOV capability.
    Pf {
        /// InitialVFs and TotalVFs reported in the SR-IOV capability.
        total_vfs: u16,
    },
    /// A virtual function of the PF.
    Vf {
        /// Zero-based index of the VF under its PF.
        index: u16,
    },
}

/// One 64-bit memory BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarSpec {
    /// Index of the low half (0, 2 or 4); the upper half is `index + 1`.
    pub index: u8,
    /// Size in bytes: a power of two, at least 4096. Other sizes are rounded up.
    pub size: u64,
    /// Whether the BAR reports itself prefetchable (bit 3).
    pub prefetchable: bool,
}

/// What [`ConfigSpace::new`] builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigParams {
    /// PF or VF.
    pub kind: FunctionKind,
    /// The function's own BARs.
    pub bars: Vec<BarSpec>,
    /// Number of MSI-X vectors, 1..=2048 (values outside are clamped).
    pub msix_vectors: u16,
    /// PF only: the per-VF BARs reported in the SR-IOV capability (ignored on a VF).
    pub vf_bars: Vec<BarSpec>,
}

/// What a [`ConfigSpace::write`] changed that the device must act on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriteEffects {
    /// The guest asked for a function-level reset. The space is *not* reset by the write:
    /// the caller must quiesce the function and then call [`ConfigSpace::reset`].
    pub flr: bool,
    /// The command register's value changed (memory enable, bus master, ...).
    pub command_changed: bool,
    /// MSI-X message control changed (enable or function mask).
    pub msix_changed: bool,
    /// SR-IOV control or NumVFs changed (PF only).
    pub sriov_changed: bool,
}

/// The configuration space of one function. See the module documentation.
#[derive(Clone)]
pub struct ConfigSpace {
    kind: FunctionKind,
    /// Current contents.
    data: Box<Image>,
    /// Bits software may write.
    wmask: Box<Image>,
    /// Bits software clears by writing 1.
    w1c: Box<Image>,
    /// Contents at power-on, restored by [`ConfigSpace::reset`].
    power_on: Box<Image>,
}

/// Registers whose changes [`WriteEffects`] reports, captured before and after a write.
struct Watched {
    command: u16,
    msix_ctrl: u16,
    sriov_ctrl: u16,
    num_vfs: u16,
}

/// Builds the image and masks register by register.
struct Builder {
    data: Box<Image>,
    wmask: Box<Image>,
    w1c: Box<Image>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            data: Box::new([0; CONFIG_SPACE_SIZE]),
            wmask: Box::new([0; CONFIG_SPACE_SIZE]),
            w1c: Box::new([0; CONFIG_SPACE_SIZE]),
        }
    }

    /// Sets a register of `N` bytes at `off`: value, writable bits and RW1C bits.
    fn reg<const N: usize>(&mut self, off: usize, value: [u8; N], wmask: [u8; N], w1c: [u8; N]) {
        self.data[off..off + N].copy_from_slice(&value);
        self.wmask[off..off + N].copy_from_slice(&wmask);
        self.w1c[off..off + N].copy_from_slice(&w1c);
    }

    fn ro8(&mut self, off: usize, value: u8) {
        self.reg(off, [value], [0], [0]);
    }

    fn reg16(&mut self, off: usize, value: u16, wmask: u16, w1c: u16) {
        self.reg(
            off,
            value.to_le_bytes(),
            wmask.to_le_bytes(),
            w1c.to_le_bytes(),
        );
    }

    fn ro16(&mut self, off: usize, value: u16) {
        self.reg16(off, value, 0, 0);
    }

    fn reg32(&mut self, off: usize, value: u32, wmask: u32) {
        self.reg(off, value.to_le_bytes(), wmask.to_le_bytes(), [0; 4]);
    }

    fn ro32(&mut self, off: usize, value: u32) {
        self.reg32(off, value, 0);
    }

    /// A 64-bit memory BAR in the BAR array starting at `base` (the header's BAR0 or the
    /// SR-IOV capability's VF BAR0). The writable bits are exactly the address bits at or
    /// above the size, which is what makes the all-ones sizing protocol work.
    fn bar(&mut self, base: usize, spec: &BarSpec) {
        if spec.index & 1 != 0 || spec.index > MAX_BAR_INDEX {
            // A bad spec is a bug in the caller's constants; dropping the BAR leaves a
            // consistent space (the BAR reads 0) instead of a panic or overlapping BARs.
            log::warn!(
                "ignoring BAR {spec:?}: a 64-bit BAR needs an even index <= {MAX_BAR_INDEX}"
            );
            return;
        }
        let size = bar_size(spec.size);
        if size != spec.size {
            log::warn!(
                "BAR {} size {:#x} rounded up to {size:#x}",
                spec.index,
                spec.size
            );
        }
        let off = base + 4 * usize::from(spec.index);
        let flags = BAR_TYPE_64
            | if spec.prefetchable {
                BAR_PREFETCHABLE
            } else {
                0
            };
        let addr_mask = !(size - 1);
        self.reg32(off, flags, (addr_mask as u32) & !BAR_FLAG_BITS);
        self.reg32(off + 4, 0, (addr_mask >> 32) as u32);
    }
}

/// Rounds a requested BAR size to something a BAR can express: a power of two of at least
/// a page. Sizes above 2^63 cannot be rounded up in 64 bits and saturate there.
fn bar_size(requested: u64) -> u64 {
    requested
        .max(BAR_MIN_SIZE)
        .checked_next_power_of_two()
        .unwrap_or(1 << 63)
}

fn le16(image: &Image, off: usize) -> u16 {
    u16::from_le_bytes([image[off], image[off + 1]])
}

impl ConfigSpace {
    /// Builds the power-on configuration space described by `params`.
    ///
    /// Invalid parameters never panic: a BAR with an odd index or an index above 4 is left
    /// out (logged), BAR sizes are rounded up to a power of two of at least 4096, and
    /// `msix_vectors` is clamped to 1..=2048.
    pub fn new(params: ConfigParams) -> Self {
        let mut b = Builder::new();
        let device_id = match params.kind {
            FunctionKind::Pf { .. } => pci::PF_DEVICE_ID,
            FunctionKind::Vf { .. } => pci::VF_DEVICE_ID,
        };

        // Type 0 header.
        b.ro16(cfg::VENDOR_ID, pci::VENDOR_ID);
        b.ro16(cfg::DEVICE_ID, device_id);
        b.reg16(cfg::COMMAND, 0, COMMAND_WRITABLE, 0);
        b.reg16(cfg::STATUS, cfg::STATUS_CAP_LIST, 0, STATUS_W1C);
        b.ro8(cfg::REVISION_ID, pci::REVISION_ID);
        let [prog_if, subclass, class, _] = pci::CLASS_CODE.to_le_bytes();
        b.reg(cfg::CLASS_CODE, [prog_if, subclass, class], [0; 3], [0; 3]);
        b.reg(CACHE_LINE_SIZE, [0], [0xFF], [0]);
        // Latency timer, header type (0, single function) and BIST stay 0.
        for spec in &params.bars {
            b.bar(cfg::BAR0, spec);
        }
        b.ro16(cfg::SUBSYSTEM_VENDOR_ID, pci::SUBSYSTEM_VENDOR_ID);
        b.ro16(cfg::SUBSYSTEM_ID, pci::SUBSYSTEM_ID);
        b.ro32(EXPANSION_ROM_BAR, 0);
        b.ro8(cfg::CAP_PTR, cfg::PM_CAP as u8);
        b.reg(cfg::INTERRUPT_LINE, [0], [0xFF], [0]);
        // Interrupt pin stays 0: MSI-X only, no INTx.

        // Power management.
        b.reg(
            cfg::PM_CAP,
            [cfg::CAP_ID_PM, cfg::MSIX_CAP as u8],
            [0; 2],
            [0; 2],
        );
        b.ro16(cfg::PM_CAP + PM_PMC, PM_PMC_VALUE);
        b.reg16(
            cfg::PM_CAP + PM_PMCSR,
            PMCSR_NO_SOFT_RESET,
            PMCSR_POWER_STATE,
            PMCSR_PME_STATUS,
        );

        // MSI-X.
        let table_size = params.msix_vectors.clamp(1, MSIX_MAX_VECTORS) - 1;
        b.reg(
            cfg::MSIX_CAP,
            [cfg::CAP_ID_MSIX, cfg::PCIE_CAP as u8],
            [0; 2],
            [0; 2],
        );
        b.reg16(
            cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL,
            table_size,
            cfg::MSIX_ENABLE | cfg::MSIX_FUNCTION_MASK,
            0,
        );
        // The offsets are 8-byte aligned, leaving the low 3 bits for the BIR.
        b.ro32(
            cfg::MSIX_CAP + cfg::MSIX_TABLE,
            pci::MSIX_TABLE_OFFSET as u32 | u32::from(pci::REG_BAR),
        );
        b.ro32(
            cfg::MSIX_CAP + cfg::MSIX_PBA,
            pci::MSIX_PBA_OFFSET as u32 | u32::from(pci::REG_BAR),
        );

        // PCI Express. Slot and root registers (0x14..0x24) and the *2 status/slot
        // registers stay 0: an endpoint has none.
        let pcie = cfg::PCIE_CAP;
        b.reg(pcie, [cfg::CAP_ID_PCIE, 0], [0; 2], [0; 2]);
        b.ro16(pcie + PCIE_FLAGS, PCIE_FLAGS_VALUE);
        b.ro32(pcie + cfg::PCIE_DEVCAP, PCIE_DEVCAP_VALUE);
        b.reg16(
            pcie + cfg::PCIE_DEVCTL,
            PCIE_DEVCTL_POWER_ON,
            PCIE_DEVCTL_WRITABLE,
            0,
        );
        b.reg16(pcie + cfg::PCIE_DEVSTA, 0, 0, PCIE_DEVSTA_W1C);
        b.ro32(pcie + PCIE_LNKCAP, PCIE_LNKCAP_VALUE);
        b.reg16(pcie + PCIE_LNKCTL, 0, PCIE_LNKCTL_WRITABLE, 0);
        b.ro16(pcie + PCIE_LNKSTA, PCIE_LNKSTA_VALUE);
        b.ro32(pcie + PCIE_DEVCAP2, PCIE_DEVCAP2_VALUE);
        b.reg16(pcie + PCIE_DEVCTL2, 0, PCIE_DEVCTL2_WRITABLE, 0);
        b.ro32(pcie + PCIE_LNKCAP2, PCIE_LNKCAP2_VALUE);
        b.reg16(
            pcie + PCIE_LNKCTL2,
            LINK_SPEED_8GT as u16,
            PCIE_LNKCTL2_WRITABLE,
            0,
        );

        // Extended space: SR-IOV on the PF. On a VF, 0x100 stays 0, which the PCIe spec
        // defines as "no extended capabilities".
        if let FunctionKind::Pf { total_vfs } = params.kind {
            let sriov = cfg::SRIOV_CAP;
            b.ro32(
                sriov,
                u32::from(cfg::EXT_CAP_ID_SRIOV) | (SRIOV_VERSION << 16),
            );
            b.ro32(sriov + SRIOV_CAPABILITIES, 0);
            b.reg16(sriov + cfg::SRIOV_CTRL, 0, SRIOV_CTRL_WRITABLE, 0);
            b.reg16(sriov + cfg::SRIOV_STATUS, 0, 0, SRIOV_STATUS_W1C);
            b.ro16(sriov + cfg::SRIOV_INITIAL_VFS, total_vfs);
            b.ro16(sriov + cfg::SRIOV_TOTAL_VFS, total_vfs);
            b.reg16(sriov + cfg::SRIOV_NUM_VFS, 0, 0xFFFF, 0);
            b.ro8(sriov + SRIOV_FUNC_DEP_LINK, 0);
            b.ro16(sriov + cfg::SRIOV_VF_OFFSET, SRIOV_FIRST_VF_OFFSET);
            b.ro16(sriov + cfg::SRIOV_VF_STRIDE, SRIOV_VF_STRIDE);
            b.ro16(sriov + cfg::SRIOV_VF_DEVICE_ID, pci::VF_DEVICE_ID);
            b.ro32(
                sriov + cfg::SRIOV_SUPPORTED_PAGE_SIZES,
                SRIOV_SUPPORTED_PAGE_SIZES_VALUE,
            );
            // Which single bit software sets is its business; the spec leaves anything
            // else undefined, so the whole register is plain RW.
            b.reg32(
                sriov + cfg::SRIOV_SYSTEM_PAGE_SIZE,
                SRIOV_SYSTEM_PAGE_SIZE_POWER_ON,
                u32::MAX,
            );
            for spec in &params.vf_bars {
                b.bar(sriov + cfg::SRIOV_VF_BAR0, spec);
            }
            b.ro32(sriov + SRIOV_VF_MIGRATION_STATE, 0);
        }

        ConfigSpace {
            kind: params.kind,
            power_on: b.data.clone(),
            data: b.data,
            wmask: b.wmask,
            w1c: b.w1c,
        }
    }

    /// Checks that `len` bytes at `offset` lie inside the space and returns the start as an
    /// index. Written with checked arithmetic because the offset comes from the guest.
    fn range(offset: u64, len: usize) -> io::Result<usize> {
        usize::try_from(offset)
            .ok()
            .filter(|&start| {
                start
                    .checked_add(len)
                    .is_some_and(|end| end <= CONFIG_SPACE_SIZE)
            })
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "config space access of {len} bytes at {offset:#x} \
                         is outside the {CONFIG_SPACE_SIZE}-byte space"
                    ),
                )
            })
    }

    /// Reads `data.len()` bytes at `offset`, any alignment. An access that does not fit in
    /// the 4096-byte space (`offset + len > 4096`) fails with `InvalidInput` and reads
    /// nothing.
    pub fn read(&self, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let start = Self::range(offset, data.len())?;
        data.copy_from_slice(&self.data[start..start + data.len()]);
        Ok(())
    }

    /// Writes `data.len()` bytes at `offset`, any alignment, honouring read-only,
    /// read-write and RW1C bits byte by byte, and reports what the device must act on.
    /// An access that does not fit in the space fails with `InvalidInput` and changes
    /// nothing.
    ///
    /// Beyond the masks:
    /// - Device control bit 15 (initiate FLR) always reads 0; writing it sets
    ///   [`WriteEffects::flr`] and leaves the reset to the caller.
    /// - NumVFs is read-only while VF Enable is set (as VF Enable was before this write),
    ///   and a value above TotalVFs is clamped to TotalVFs. The spec leaves such a value
    ///   undefined; clamping keeps every later reader (and the VF count the device acts
    ///   on) within what the PF can actually provide.
    /// - A PMCSR power state of D1 or D2 is discarded, as the PM spec requires for
    ///   unsupported states; D0 and D3hot are accepted.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<WriteEffects> {
        let start = Self::range(offset, data.len())?;
        let end = start + data.len();
        let before = self.watched();
        let num_vfs_off = cfg::SRIOV_CAP + cfg::SRIOV_NUM_VFS;
        // Judged on the state before the write: enabling VFs and resizing them in a single
        // access must not slip a NumVFs change past the lock.
        let num_vfs_locked = self.is_pf() && self.sriov_vf_enabled();
        let power_state = le16(&self.data, cfg::PM_CAP + PM_PMCSR) & PMCSR_POWER_STATE;
        let flr_byte = cfg::PCIE_CAP + cfg::PCIE_DEVCTL + 1;
        let flr_bit = (cfg::PCIE_DEVCTL_FLR >> 8) as u8;

        let mut effects = WriteEffects::default();
        for (off, &val) in (start..end).zip(data) {
            let locked = num_vfs_locked && (num_vfs_off..num_vfs_off + 2).contains(&off);
            let wmask = if locked { 0 } else { self.wmask[off] };
            let old = self.data[off];
            self.data[off] = ((old & !wmask) | (val & wmask)) & !(val & self.w1c[off]);
            if off == flr_byte && val & flr_bit != 0 {
                effects.flr = true;
            }
        }

        let touches = |reg: usize, len: usize| start < reg + len && reg < end;
        if self.is_pf() && touches(num_vfs_off, 2) {
            let total = self.total_vfs();
            if self.sriov_num_vfs() > total {
                self.data[num_vfs_off..num_vfs_off + 2].copy_from_slice(&total.to_le_bytes());
            }
        }
        let pmcsr = cfg::PM_CAP + PM_PMCSR;
        if touches(pmcsr, 1) {
            let new_state = u16::from(self.data[pmcsr]) & PMCSR_POWER_STATE;
            if new_state == 1 || new_state == 2 {
                self.data[pmcsr] =
                    (self.data[pmcsr] & !(PMCSR_POWER_STATE as u8)) | power_state as u8;
            }
        }

        let after = self.watched();
        effects.command_changed = before.command != after.command;
        effects.msix_changed = before.msix_ctrl != after.msix_ctrl;
        effects.sriov_changed =
            before.sriov_ctrl != after.sriov_ctrl || before.num_vfs != after.num_vfs;
        Ok(effects)
    }

    fn watched(&self) -> Watched {
        Watched {
            command: self.command(),
            msix_ctrl: self.msix_ctrl(),
            sriov_ctrl: self.sriov_ctrl(),
            num_vfs: self.sriov_num_vfs(),
        }
    }

    fn is_pf(&self) -> bool {
        matches!(self.kind, FunctionKind::Pf { .. })
    }

    fn total_vfs(&self) -> u16 {
        match self.kind {
            FunctionKind::Pf { total_vfs } => total_vfs,
            FunctionKind::Vf { .. } => 0,
        }
    }

    fn msix_ctrl(&self) -> u16 {
        le16(&self.data, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL)
    }

    fn sriov_ctrl(&self) -> u16 {
        if self.is_pf() {
            le16(&self.data, cfg::SRIOV_CAP + cfg::SRIOV_CTRL)
        } else {
            0
        }
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        le16(&self.data, cfg::COMMAND)
    }

    /// Bus master enable: the function may DMA only while this is set.
    pub fn bus_master(&self) -> bool {
        self.command() & cfg::COMMAND_BUS_MASTER != 0
    }

    /// Memory space enable: the function's BARs decode only while this is set.
    pub fn memory_enabled(&self) -> bool {
        self.command() & cfg::COMMAND_MEMORY != 0
    }

    /// MSI-X enable bit of the MSI-X message control register.
    pub fn msix_enabled(&self) -> bool {
        self.msix_ctrl() & cfg::MSIX_ENABLE != 0
    }

    /// MSI-X function mask bit: while set, no vector may fire (pending bits collect).
    pub fn msix_function_masked(&self) -> bool {
        self.msix_ctrl() & cfg::MSIX_FUNCTION_MASK != 0
    }

    /// NumVFs of the SR-IOV capability; always 0 on a VF.
    pub fn sriov_num_vfs(&self) -> u16 {
        if self.is_pf() {
            le16(&self.data, cfg::SRIOV_CAP + cfg::SRIOV_NUM_VFS)
        } else {
            0
        }
    }

    /// VF Enable bit of the SR-IOV control register; always false on a VF.
    pub fn sriov_vf_enabled(&self) -> bool {
        self.sriov_ctrl() & cfg::SRIOV_CTRL_VF_ENABLE != 0
    }

    /// Returns every register to its power-on value, as a function-level reset does. This
    /// includes BAR addresses, the command register and, on a PF, VF Enable and NumVFs;
    /// the spec allows a function to reset more than FLR strictly requires, and the guest
    /// restores what it needs (Linux saves and restores config space around an FLR).
    pub fn reset(&mut self) {
        self.data.copy_from_slice(&self.power_on[..]);
    }
}

impl fmt::Debug for ConfigSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The raw images are 16 KiB of mostly zeroes; show the state that matters instead.
        f.debug_struct("ConfigSpace")
            .field("kind", &self.kind)
            .field("command", &format_args!("{:#06x}", self.command()))
            .field("msix_ctrl", &format_args!("{:#06x}", self.msix_ctrl()))
            .field("sriov_ctrl", &format_args!("{:#06x}", self.sriov_ctrl()))
            .field("sriov_num_vfs", &self.sriov_num_vfs())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TOTAL_VFS: u16 = 8;
    const DOORBELL_BAR_SIZE: u64 = 0x10000;

    fn bars() -> Vec<BarSpec> {
        vec![
            BarSpec {
                index: pci::REG_BAR,
                size: pci::REG_BAR_SIZE,
                prefetchable: false,
            },
            BarSpec {
                index: pci::DOORBELL_BAR,
                size: DOORBELL_BAR_SIZE,
                prefetchable: true,
            },
        ]
    }

    fn pf() -> ConfigSpace {
        ConfigSpace::new(ConfigParams {
            kind: FunctionKind::Pf {
                total_vfs: TOTAL_VFS,
            },
            bars: bars(),
            msix_vectors: pci::MSIX_VECTORS,
            vf_bars: bars(),
        })
    }

    fn vf() -> ConfigSpace {
        ConfigSpace::new(ConfigParams {
            kind: FunctionKind::Vf { index: 3 },
            bars: bars(),
            msix_vectors: pci::MSIX_VECTORS,
            vf_bars: Vec::new(),
        })
    }

    fn rd8(cs: &ConfigSpace, off: usize) -> u8 {
        let mut b = [0; 1];
        cs.read(off as u64, &mut b).expect("in range");
        b[0]
    }

    fn rd16(cs: &ConfigSpace, off: usize) -> u16 {
        let mut b = [0; 2];
        cs.read(off as u64, &mut b).expect("in range");
        u16::from_le_bytes(b)
    }

    fn rd32(cs: &ConfigSpace, off: usize) -> u32 {
        let mut b = [0; 4];
        cs.read(off as u64, &mut b).expect("in range");
        u32::from_le_bytes(b)
    }

    fn wr16(cs: &mut ConfigSpace, off: usize, v: u16) -> WriteEffects {
        cs.write(off as u64, &v.to_le_bytes()).expect("in range")
    }

    fn wr32(cs: &mut ConfigSpace, off: usize, v: u32) -> WriteEffects {
        cs.write(off as u64, &v.to_le_bytes()).expect("in range")
    }

    /// Sets bits directly in the image, as the device would when it latches an error.
    fn poke16(cs: &mut ConfigSpace, off: usize, v: u16) {
        cs.data[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn identity_of_pf_and_vf() {
        for (cs, device_id) in [(pf(), pci::PF_DEVICE_ID), (vf(), pci::VF_DEVICE_ID)] {
            assert_eq!(rd16(&cs, cfg::VENDOR_ID), pci::VENDOR_ID);
            assert_eq!(rd16(&cs, cfg::DEVICE_ID), device_id);
            assert_eq!(rd8(&cs, cfg::REVISION_ID), pci::REVISION_ID);
            assert_eq!(rd32(&cs, cfg::REVISION_ID) >> 8, pci::CLASS_CODE);
            assert_eq!(rd8(&cs, cfg::HEADER_TYPE), 0);
            assert_eq!(
                rd16(&cs, cfg::SUBSYSTEM_VENDOR_ID),
                pci::SUBSYSTEM_VENDOR_ID
            );
            assert_eq!(rd16(&cs, cfg::SUBSYSTEM_ID), pci::SUBSYSTEM_ID);
            assert_eq!(rd8(&cs, cfg::INTERRUPT_PIN), 0);
            assert_eq!(rd16(&cs, cfg::COMMAND), 0);
            assert_eq!(rd16(&cs, cfg::STATUS), cfg::STATUS_CAP_LIST);
        }
    }

    #[test]
    fn capability_list_walks_pm_msix_pcie() {
        for cs in [pf(), vf()] {
            let mut found = Vec::new();
            let mut ptr = usize::from(rd8(&cs, cfg::CAP_PTR));
            while ptr != 0 && found.len() < 16 {
                found.push((ptr, rd8(&cs, ptr)));
                ptr = usize::from(rd8(&cs, ptr + 1));
            }
            assert_eq!(
                found,
                [
                    (cfg::PM_CAP, cfg::CAP_ID_PM),
                    (cfg::MSIX_CAP, cfg::CAP_ID_MSIX),
                    (cfg::PCIE_CAP, cfg::CAP_ID_PCIE),
                ]
            );
            assert_eq!(rd16(&cs, cfg::PM_CAP + PM_PMC), 0x0003);
            assert_eq!(rd16(&cs, cfg::PM_CAP + PM_PMCSR), PMCSR_NO_SOFT_RESET);
            assert_eq!(
                rd16(&cs, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL),
                pci::MSIX_VECTORS - 1
            );
            assert_eq!(
                u64::from(rd32(&cs, cfg::MSIX_CAP + cfg::MSIX_TABLE)),
                pci::MSIX_TABLE_OFFSET | u64::from(pci::REG_BAR)
            );
            assert_eq!(
                u64::from(rd32(&cs, cfg::MSIX_CAP + cfg::MSIX_PBA)),
                pci::MSIX_PBA_OFFSET | u64::from(pci::REG_BAR)
            );
        }
    }

    #[test]
    fn pcie_capability_registers() {
        let mut cs = pf();
        let p = cfg::PCIE_CAP;
        assert_eq!(rd16(&cs, p + PCIE_FLAGS), 0x0002);
        let devcap = rd32(&cs, p + cfg::PCIE_DEVCAP);
        assert_eq!(devcap & 0x7, 1, "max payload 256 B");
        assert_ne!(devcap & cfg::PCIE_DEVCAP_FLR, 0);
        assert_ne!(devcap & (1 << 15), 0, "role-based error reporting");
        assert_eq!(rd16(&cs, p + cfg::PCIE_DEVCTL), 0x2810);
        assert_eq!(rd32(&cs, p + PCIE_LNKCAP), 0x0000_0103);
        assert_eq!(rd16(&cs, p + PCIE_LNKSTA), 0x0103);
        assert_eq!(rd32(&cs, p + PCIE_DEVCAP2), 0x1F);
        assert_eq!(rd32(&cs, p + PCIE_LNKCAP2), 0x0E);
        assert_eq!(rd16(&cs, p + PCIE_LNKCTL2), 3);

        wr16(&mut cs, p + cfg::PCIE_DEVCTL, 0x7FFF);
        assert_eq!(rd16(&cs, p + cfg::PCIE_DEVCTL), 0x7FFF);
        wr16(&mut cs, p + PCIE_LNKCTL, 0xFFFF);
        assert_eq!(rd16(&cs, p + PCIE_LNKCTL), 0x00CB);
        wr16(&mut cs, p + PCIE_LNKSTA, 0);
        assert_eq!(rd16(&cs, p + PCIE_LNKSTA), 0x0103);
        wr16(&mut cs, p + PCIE_DEVCTL2, 0xFFFF);
        assert_eq!(rd16(&cs, p + PCIE_DEVCTL2), 0x1F);
        wr16(&mut cs, p + PCIE_LNKCTL2, 0xFFFF);
        assert_eq!(rd16(&cs, p + PCIE_LNKCTL2), 0xF);
        // Slot and root registers.
        for off in (0x14..0x24).step_by(4) {
            wr32(&mut cs, p + off, u32::MAX);
            assert_eq!(rd32(&cs, p + off), 0);
        }
    }

    #[test]
    fn sriov_capability_on_pf_only() {
        let cs = pf();
        let s = cfg::SRIOV_CAP;
        let header = rd32(&cs, s);
        assert_eq!(header & 0xFFFF, u32::from(cfg::EXT_CAP_ID_SRIOV));
        assert_eq!((header >> 16) & 0xF, 1, "version");
        assert_eq!(header >> 20, 0, "last extended capability");
        assert_eq!(rd16(&cs, s + cfg::SRIOV_INITIAL_VFS), TOTAL_VFS);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_TOTAL_VFS), TOTAL_VFS);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_NUM_VFS), 0);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_VF_OFFSET), 1);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_VF_STRIDE), 1);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_VF_DEVICE_ID), pci::VF_DEVICE_ID);
        assert_eq!(rd32(&cs, s + cfg::SRIOV_SUPPORTED_PAGE_SIZES), 0x553);
        assert_eq!(rd32(&cs, s + cfg::SRIOV_SYSTEM_PAGE_SIZE), 1);
        assert_eq!(rd32(&cs, s + cfg::SRIOV_VF_BAR0), BAR_TYPE_64);
        assert_eq!(
            rd32(&cs, s + cfg::SRIOV_VF_BAR0 + 8),
            BAR_TYPE_64 | BAR_PREFETCHABLE
        );

        let mut vf = vf();
        assert_eq!(rd32(&vf, 0x100), 0, "a VF has no extended capabilities");
        let effects = wr32(&mut vf, s + cfg::SRIOV_CTRL, u32::MAX);
        assert_eq!(effects, WriteEffects::default());
        wr16(&mut vf, s + cfg::SRIOV_NUM_VFS, 4);
        assert!(vf.data[0x100..].iter().all(|&b| b == 0));
        assert_eq!(vf.sriov_num_vfs(), 0);
        assert!(!vf.sriov_vf_enabled());
    }

    #[test]
    fn read_only_fields_ignore_writes() {
        let mut cs = pf();
        wr32(&mut cs, cfg::VENDOR_ID, u32::MAX);
        wr32(&mut cs, cfg::REVISION_ID, u32::MAX);
        wr32(&mut cs, CACHE_LINE_SIZE, 0);
        wr32(&mut cs, cfg::SUBSYSTEM_VENDOR_ID, 0);
        wr16(&mut cs, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL, 0x07FF);
        wr32(&mut cs, cfg::MSIX_CAP + cfg::MSIX_TABLE, 0x1234_5678);
        assert_eq!(rd16(&cs, cfg::VENDOR_ID), pci::VENDOR_ID);
        assert_eq!(rd16(&cs, cfg::DEVICE_ID), pci::PF_DEVICE_ID);
        assert_eq!(rd32(&cs, cfg::REVISION_ID) >> 8, pci::CLASS_CODE);
        assert_eq!(rd8(&cs, cfg::HEADER_TYPE), 0);
        assert_eq!(
            rd16(&cs, cfg::SUBSYSTEM_VENDOR_ID),
            pci::SUBSYSTEM_VENDOR_ID
        );
        assert_eq!(
            rd16(&cs, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL),
            pci::MSIX_VECTORS - 1
        );
        assert_eq!(
            u64::from(rd32(&cs, cfg::MSIX_CAP + cfg::MSIX_TABLE)),
            pci::MSIX_TABLE_OFFSET
        );
        // The cache line size is writable, latency timer and BIST are not.
        wr32(&mut cs, CACHE_LINE_SIZE, u32::MAX);
        assert_eq!(rd32(&cs, CACHE_LINE_SIZE), 0xFF);
        wr32(&mut cs, cfg::CAP_PTR, u32::MAX);
        assert_eq!(rd8(&cs, cfg::CAP_PTR), cfg::PM_CAP as u8);
        wr32(&mut cs, cfg::INTERRUPT_LINE, u32::MAX);
        assert_eq!(rd32(&cs, cfg::INTERRUPT_LINE), 0xFF);
    }

    #[test]
    fn command_register_writable_bits() {
        let mut cs = pf();
        let effects = wr16(&mut cs, cfg::COMMAND, 0xFFFF);
        assert_eq!(cs.command(), 0x0546);
        assert!(effects.command_changed);
        assert!(cs.memory_enabled() && cs.bus_master());
        assert!(!wr16(&mut cs, cfg::COMMAND, 0xFFFF).command_changed);
        let effects = wr16(&mut cs, cfg::COMMAND, cfg::COMMAND_MEMORY);
        assert!(effects.command_changed);
        assert!(cs.memory_enabled() && !cs.bus_master());
        assert_eq!(
            effects,
            WriteEffects {
                command_changed: true,
                ..WriteEffects::default()
            }
        );
    }

    #[test]
    fn rw1c_bits_clear_on_one_and_keep_on_zero() {
        let mut cs = pf();
        let status_errors = 0xF900;
        poke16(&mut cs, cfg::STATUS, cfg::STATUS_CAP_LIST | status_errors);
        wr16(&mut cs, cfg::STATUS, 0);
        assert_eq!(rd16(&cs, cfg::STATUS), cfg::STATUS_CAP_LIST | status_errors);
        wr16(&mut cs, cfg::STATUS, 1 << 8);
        assert_eq!(
            rd16(&cs, cfg::STATUS),
            cfg::STATUS_CAP_LIST | (status_errors & !(1 << 8))
        );
        wr16(&mut cs, cfg::STATUS, 0xFFFF);
        assert_eq!(rd16(&cs, cfg::STATUS), cfg::STATUS_CAP_LIST);

        let pmcsr = cfg::PM_CAP + PM_PMCSR;
        poke16(&mut cs, pmcsr, PMCSR_NO_SOFT_RESET | PMCSR_PME_STATUS);
        wr16(&mut cs, pmcsr, 0);
        assert_eq!(rd16(&cs, pmcsr), PMCSR_NO_SOFT_RESET | PMCSR_PME_STATUS);
        wr16(&mut cs, pmcsr, PMCSR_PME_STATUS);
        assert_eq!(rd16(&cs, pmcsr), PMCSR_NO_SOFT_RESET);

        let devsta = cfg::PCIE_CAP + cfg::PCIE_DEVSTA;
        poke16(&mut cs, devsta, 0xF);
        wr16(&mut cs, devsta, 0x5);
        assert_eq!(rd16(&cs, devsta), 0xA);
        // Writing ones never sets an RW1C bit.
        wr16(&mut cs, devsta, 0xFFFF);
        assert_eq!(rd16(&cs, devsta), 0);

        let sriov_status = cfg::SRIOV_CAP + cfg::SRIOV_STATUS;
        poke16(&mut cs, sriov_status, 1);
        wr16(&mut cs, sriov_status, 1);
        assert_eq!(rd16(&cs, sriov_status), 0);
    }

    #[test]
    fn pm_power_state_accepts_d0_and_d3_only() {
        let mut cs = pf();
        let pmcsr = cfg::PM_CAP + PM_PMCSR;
        wr16(&mut cs, pmcsr, 0xFFFF);
        assert_eq!(rd16(&cs, pmcsr), PMCSR_NO_SOFT_RESET | 3);
        wr16(&mut cs, pmcsr, 1);
        assert_eq!(rd16(&cs, pmcsr) & 3, 3, "D1 is unsupported and discarded");
        wr16(&mut cs, pmcsr, 0);
        assert_eq!(rd16(&cs, pmcsr) & 3, 0);
        wr16(&mut cs, pmcsr, 2);
        assert_eq!(rd16(&cs, pmcsr) & 3, 0, "D2 is unsupported and discarded");
    }

    /// Sizes a 64-bit BAR pair the way firmware does and returns (low, high) read-back.
    fn size_bar(cs: &mut ConfigSpace, off: usize) -> (u32, u32) {
        wr32(cs, off, u32::MAX);
        wr32(cs, off + 4, u32::MAX);
        (rd32(cs, off), rd32(cs, off + 4))
    }

    #[test]
    fn bar_sizing() {
        for mut cs in [pf(), vf()] {
            assert_eq!(rd32(&cs, cfg::BAR0), BAR_TYPE_64);
            assert_eq!(rd32(&cs, cfg::BAR0 + 8), BAR_TYPE_64 | BAR_PREFETCHABLE);

            let (lo, hi) = size_bar(&mut cs, cfg::BAR0);
            assert_eq!(lo, 0xFFFF_C004);
            assert_eq!(hi, u32::MAX);
            let size = !(u64::from(hi) << 32 | u64::from(lo & !0xF)) + 1;
            assert_eq!(size, pci::REG_BAR_SIZE);

            let (lo, hi) = size_bar(&mut cs, cfg::BAR0 + 8);
            assert_eq!(lo, 0xFFFF_000C);
            assert_eq!(hi, u32::MAX);

            // Unused BARs 4 and 5 and the expansion ROM stay 0.
            assert_eq!(size_bar(&mut cs, cfg::BAR0 + 16), (0, 0));
            wr32(&mut cs, EXPANSION_ROM_BAR, u32::MAX);
            assert_eq!(rd32(&cs, EXPANSION_ROM_BAR), 0);

            // Programming an address keeps the type bits.
            wr32(&mut cs, cfg::BAR0, 0xFEB0_0000);
            wr32(&mut cs, cfg::BAR0 + 4, 0x0000_0001);
            assert_eq!(rd32(&cs, cfg::BAR0), 0xFEB0_0004);
            assert_eq!(rd32(&cs, cfg::BAR0 + 4), 1);
        }
    }

    #[test]
    fn vf_bar_sizing_in_sriov() {
        let mut cs = pf();
        let base = cfg::SRIOV_CAP + cfg::SRIOV_VF_BAR0;
        assert_eq!(size_bar(&mut cs, base), (0xFFFF_C004, u32::MAX));
        assert_eq!(size_bar(&mut cs, base + 8), (0xFFFF_000C, u32::MAX));
        assert_eq!(size_bar(&mut cs, base + 16), (0, 0));
    }

    #[test]
    fn odd_bar_specs_are_normalised() {
        let mut cs = ConfigSpace::new(ConfigParams {
            kind: FunctionKind::Vf { index: 0 },
            bars: vec![
                BarSpec {
                    index: 0,
                    size: 5000,
                    prefetchable: false,
                },
                BarSpec {
                    index: 2,
                    size: 1 << 33,
                    prefetchable: true,
                },
                // Odd, and past the end: both dropped.
                BarSpec {
                    index: 3,
                    size: 4096,
                    prefetchable: false,
                },
                BarSpec {
                    index: 6,
                    size: 4096,
                    prefetchable: false,
                },
            ],
            msix_vectors: 0,
            vf_bars: bars(),
        });
        assert_eq!(size_bar(&mut cs, cfg::BAR0), (0xFFFF_E004, u32::MAX));
        // An 8 GiB BAR: the low half has only its type bits, the upper half carries the size.
        assert_eq!(size_bar(&mut cs, cfg::BAR0 + 8), (0x0000_000C, 0xFFFF_FFFE));
        assert_eq!(size_bar(&mut cs, cfg::BAR0 + 16), (0, 0));
        assert_eq!(rd16(&cs, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL), 0);
        assert_eq!(rd32(&cs, 0x100), 0, "vf_bars ignored on a VF");
    }

    #[test]
    fn flr_is_reported_and_reads_zero() {
        let mut cs = pf();
        let devctl = cfg::PCIE_CAP + cfg::PCIE_DEVCTL;
        let effects = wr16(&mut cs, devctl, PCIE_DEVCTL_POWER_ON | cfg::PCIE_DEVCTL_FLR);
        assert!(effects.flr);
        assert_eq!(rd16(&cs, devctl), PCIE_DEVCTL_POWER_ON);
        // A byte write of the high half alone triggers too.
        let effects = cs.write(devctl as u64 + 1, &[0x80]).expect("in range");
        assert!(effects.flr);
        assert_eq!(rd16(&cs, devctl), 0x0010);
        assert!(!wr16(&mut cs, devctl, 0x2810).flr);
    }

    #[test]
    fn msix_control_bits() {
        let mut cs = vf();
        let ctrl = cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL;
        let effects = wr16(&mut cs, ctrl, cfg::MSIX_ENABLE | cfg::MSIX_FUNCTION_MASK);
        assert!(effects.msix_changed);
        assert!(cs.msix_enabled() && cs.msix_function_masked());
        assert!(!wr16(&mut cs, ctrl, 0xFFFF).msix_changed);
        assert!(wr16(&mut cs, ctrl, cfg::MSIX_ENABLE).msix_changed);
        assert!(cs.msix_enabled() && !cs.msix_function_masked());
    }

    #[test]
    fn num_vfs_clamps_and_locks_while_enabled() {
        let mut cs = pf();
        let s = cfg::SRIOV_CAP;
        let effects = wr16(&mut cs, s + cfg::SRIOV_NUM_VFS, TOTAL_VFS + 1);
        assert!(effects.sriov_changed);
        assert_eq!(cs.sriov_num_vfs(), TOTAL_VFS);
        wr16(&mut cs, s + cfg::SRIOV_NUM_VFS, 0xFFFF);
        assert_eq!(cs.sriov_num_vfs(), TOTAL_VFS);
        wr16(&mut cs, s + cfg::SRIOV_NUM_VFS, 4);
        assert_eq!(cs.sriov_num_vfs(), 4);

        wr16(&mut cs, s + cfg::SRIOV_CTRL, 0xFFFF);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_CTRL), 0x1B);
        assert!(cs.sriov_vf_enabled());
        let effects = wr16(&mut cs, s + cfg::SRIOV_NUM_VFS, 2);
        assert!(!effects.sriov_changed);
        assert_eq!(cs.sriov_num_vfs(), 4, "NumVFs is read-only while VF Enable");

        let effects = wr16(&mut cs, s + cfg::SRIOV_CTRL, cfg::SRIOV_CTRL_VF_MSE);
        assert!(effects.sriov_changed && !cs.sriov_vf_enabled());
        wr16(&mut cs, s + cfg::SRIOV_NUM_VFS, 2);
        assert_eq!(cs.sriov_num_vfs(), 2);

        // The system page size is plain RW.
        wr32(&mut cs, s + cfg::SRIOV_SYSTEM_PAGE_SIZE, 0x10);
        assert_eq!(rd32(&cs, s + cfg::SRIOV_SYSTEM_PAGE_SIZE), 0x10);
        // Read-only SR-IOV fields.
        wr16(&mut cs, s + cfg::SRIOV_TOTAL_VFS, 100);
        wr16(&mut cs, s + cfg::SRIOV_VF_DEVICE_ID, 0);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_TOTAL_VFS), TOTAL_VFS);
        assert_eq!(rd16(&cs, s + cfg::SRIOV_VF_DEVICE_ID), pci::VF_DEVICE_ID);
    }

    #[test]
    fn reset_restores_power_on_values() {
        let mut cs = pf();
        let pristine = pf();
        wr16(&mut cs, cfg::COMMAND, 0xFFFF);
        wr32(&mut cs, cfg::BAR0, 0xFEB0_0000);
        wr16(
            &mut cs,
            cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL,
            cfg::MSIX_ENABLE,
        );
        wr16(&mut cs, cfg::PCIE_CAP + cfg::PCIE_DEVCTL, 0);
        wr16(&mut cs, cfg::SRIOV_CAP + cfg::SRIOV_NUM_VFS, 3);
        wr16(&mut cs, cfg::SRIOV_CAP + cfg::SRIOV_CTRL, 1);
        cs.reset();
        assert_eq!(cs.data, pristine.data);
        assert_eq!(cs.command(), 0);
        assert!(!cs.msix_enabled());
        assert_eq!(cs.sriov_num_vfs(), 0);
        assert!(!cs.sriov_vf_enabled());
        assert_eq!(rd16(&cs, cfg::PCIE_CAP + cfg::PCIE_DEVCTL), 0x2810);
    }

    #[test]
    fn unaligned_writes_spanning_registers() {
        let mut cs = pf();
        // Device ID high byte, command (both bytes), status low byte.
        let effects = cs.write(3, &[0xAA, 0x06, 0xFF, 0x00]).expect("in range");
        assert!(effects.command_changed);
        assert_eq!(rd16(&cs, cfg::DEVICE_ID), pci::PF_DEVICE_ID);
        assert_eq!(cs.command(), 0x0506);
        assert_eq!(rd16(&cs, cfg::STATUS), cfg::STATUS_CAP_LIST);

        // MSI-X control high byte plus the read-only table offset.
        let ctrl = cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL;
        let effects = cs
            .write(ctrl as u64 + 1, &[0xC0, 0xFF, 0xFF])
            .expect("in range");
        assert!(effects.msix_changed);
        assert!(cs.msix_enabled() && cs.msix_function_masked());
        assert_eq!(
            u64::from(rd32(&cs, cfg::MSIX_CAP + cfg::MSIX_TABLE)),
            pci::MSIX_TABLE_OFFSET
        );

        // An 8-byte write over BAR0 low and high halves at once.
        cs.write(cfg::BAR0 as u64, &u64::MAX.to_le_bytes())
            .expect("in range");
        assert_eq!(rd32(&cs, cfg::BAR0), 0xFFFF_C004);
        assert_eq!(rd32(&cs, cfg::BAR0 + 4), u32::MAX);

        // A read spanning registers sees both.
        let mut buf = [0; 3];
        cs.read(1, &mut buf).expect("in range");
        assert_eq!(
            buf,
            [(pci::VENDOR_ID >> 8) as u8, pci::PF_DEVICE_ID as u8, 0]
        );
    }

    #[test]
    fn out_of_range_accesses_fail_cleanly() {
        let mut cs = pf();
        let mut buf = [0; 4];
        for (offset, len) in [
            (4096, 1),
            (4095, 2),
            (4093, 4),
            (u64::MAX, 1),
            (u64::MAX - 1, 4),
            (u64::MAX, 0),
            (1 << 32, 4),
        ] {
            let err = cs.read(offset, &mut buf[..len]).expect_err("out of range");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            let err = cs.write(offset, &buf[..len]).expect_err("out of range");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
        let big = vec![0xFF; CONFIG_SPACE_SIZE + 1];
        assert!(cs.write(0, &big).is_err());
        assert_eq!(cs.data, pf().data, "failed writes change nothing");
        // The last bytes and an empty access at the very end are fine.
        cs.read(4092, &mut buf).expect("in range");
        cs.read(4096, &mut []).expect("empty access at the end");
        cs.write(4096, &[]).expect("empty access at the end");
        // The whole space in one access.
        let mut all = vec![0; CONFIG_SPACE_SIZE];
        cs.read(0, &mut all).expect("whole space");
        assert_eq!(all[..], cs.data[..]);
    }

    fn any_space() -> impl Strategy<Value = ConfigSpace> {
        prop_oneof![Just(pf()), Just(vf())]
    }

    fn any_write() -> impl Strategy<Value = (u64, Vec<u8>)> {
        let offset = prop_oneof![
            8 => 0..CONFIG_SPACE_SIZE as u64 + 8,
            1 => any::<u64>(),
        ];
        (offset, proptest::collection::vec(any::<u8>(), 0..=8))
    }

    proptest! {
        #[test]
        fn random_writes_never_touch_read_only_bits(
            mut cs in any_space(),
            writes in proptest::collection::vec(any_write(), 1..64),
        ) {
            for (offset, data) in writes {
                let fits = offset
                    .checked_add(data.len() as u64)
                    .is_some_and(|end| end <= CONFIG_SPACE_SIZE as u64);
                prop_assert_eq!(cs.write(offset, &data).is_ok(), fits);
                let mut now = vec![0; CONFIG_SPACE_SIZE];
                cs.read(0, &mut now).expect("whole space");
                for (i, &byte) in now.iter().enumerate() {
                    let changeable = cs.wmask[i] | cs.w1c[i];
                    prop_assert_eq!(
                        (byte ^ cs.power_on[i]) & !changeable, 0,
                        "read-only bits changed at {:#x}", i
                    );
                    // RW1C bits start clear, and a write can only clear them.
                    prop_assert_eq!(byte & cs.w1c[i], 0, "RW1C bit set at {:#x}", i);
                }
                prop_assert!(cs.sriov_num_vfs() <= cs.total_vfs());
                prop_assert_eq!(
                    rd16(&cs, cfg::PCIE_CAP + cfg::PCIE_DEVCTL) & cfg::PCIE_DEVCTL_FLR,
                    0
                );
            }
        }
    }
}
