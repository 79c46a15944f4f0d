//! PCI identity and the layout of the configuration space and BARs.

/// Vendor ID of every rnic function. It lies in a range the PCI-SIG has not assigned, as a
/// software-only device should; no host driver claims it.
pub const VENDOR_ID: u16 = 0xF1C0;
/// Device ID of the physical function.
pub const PF_DEVICE_ID: u16 = 0x0001;
/// Device ID of a virtual function (also in the PF's SR-IOV capability).
pub const VF_DEVICE_ID: u16 = 0x0002;
/// Subsystem vendor ID.
pub const SUBSYSTEM_VENDOR_ID: u16 = VENDOR_ID;
/// Subsystem ID.
pub const SUBSYSTEM_ID: u16 = 0x0001;
/// Revision ID.
pub const REVISION_ID: u8 = 0x01;
/// Class code: network controller (0x02), Ethernet (0x00), programming interface 0.
/// RoCE NICs present themselves as Ethernet controllers.
pub const CLASS_CODE: u32 = 0x02_00_00;

/// Size of the configuration space (PCI Express extended space).
pub const CONFIG_SPACE_SIZE: usize = 4096;

/// Standard config-space register offsets used by device and driver.
pub mod cfg {
    /// Vendor ID (u16).
    pub const VENDOR_ID: usize = 0x00;
    /// Device ID (u16).
    pub const DEVICE_ID: usize = 0x02;
    /// Command register (u16).
    pub const COMMAND: usize = 0x04;
    /// Status register (u16).
    pub const STATUS: usize = 0x06;
    /// Revision ID (u8).
    pub const REVISION_ID: usize = 0x08;
    /// Class code, 3 bytes starting with the programming interface.
    pub const CLASS_CODE: usize = 0x09;
    /// Header type (u8).
    pub const HEADER_TYPE: usize = 0x0E;
    /// First BAR register (u32); BAR n is at `BAR0 + 4 * n`.
    pub const BAR0: usize = 0x10;
    /// Subsystem vendor ID (u16).
    pub const SUBSYSTEM_VENDOR_ID: usize = 0x2C;
    /// Subsystem ID (u16).
    pub const SUBSYSTEM_ID: usize = 0x2E;
    /// Capabilities pointer (u8).
    pub const CAP_PTR: usize = 0x34;
    /// Interrupt line (u8).
    pub const INTERRUPT_LINE: usize = 0x3C;
    /// Interrupt pin (u8). rnic has no INTx: it reads 0.
    pub const INTERRUPT_PIN: usize = 0x3D;

    /// Command register: memory space enable.
    pub const COMMAND_MEMORY: u16 = 1 << 1;
    /// Command register: bus master enable. The device does no DMA while it is clear.
    pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
    /// Command register: INTx disable.
    pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
    /// Status register: capabilities list present.
    pub const STATUS_CAP_LIST: u16 = 1 << 4;

    /// Offset of the power-management capability.
    pub const PM_CAP: usize = 0x40;
    /// Offset of the MSI-X capability.
    pub const MSIX_CAP: usize = 0x50;
    /// Offset of the PCI Express capability.
    pub const PCIE_CAP: usize = 0x60;
    /// Offset of the SR-IOV extended capability (PF only).
    pub const SRIOV_CAP: usize = 0x100;

    /// Capability ID of power management.
    pub const CAP_ID_PM: u8 = 0x01;
    /// Capability ID of MSI-X.
    pub const CAP_ID_MSIX: u8 = 0x11;
    /// Capability ID of PCI Express.
    pub const CAP_ID_PCIE: u8 = 0x10;
    /// Extended capability ID of SR-IOV.
    pub const EXT_CAP_ID_SRIOV: u16 = 0x0010;

    /// MSI-X message control, relative to the MSI-X capability (u16).
    pub const MSIX_MSG_CTRL: usize = 0x02;
    /// MSI-X table offset and BIR, relative to the capability (u32).
    pub const MSIX_TABLE: usize = 0x04;
    /// MSI-X PBA offset and BIR, relative to the capability (u32).
    pub const MSIX_PBA: usize = 0x08;
    /// MSI-X message control: MSI-X enable.
    pub const MSIX_ENABLE: u16 = 1 << 15;
    /// MSI-X message control: function mask.
    pub const MSIX_FUNCTION_MASK: u16 = 1 << 14;

    /// PCIe device capabilities, relative to the PCIe capability (u32).
    pub const PCIE_DEVCAP: usize = 0x04;
    /// PCIe device control, relative to the PCIe capability (u16).
    pub const PCIE_DEVCTL: usize = 0x08;
    /// PCIe device status, relative to the PCIe capability (u16).
    pub const PCIE_DEVSTA: usize = 0x0A;
    /// Device capabilities: function-level reset supported.
    pub const PCIE_DEVCAP_FLR: u32 = 1 << 28;
    /// Device control: initiate function-level reset (reads as 0).
    pub const PCIE_DEVCTL_FLR: u16 = 1 << 15;

    /// SR-IOV control register, relative to the SR-IOV capability (u16).
    pub const SRIOV_CTRL: usize = 0x08;
    /// SR-IOV status register (u16).
    pub const SRIOV_STATUS: usize = 0x0A;
    /// InitialVFs (u16).
    pub const SRIOV_INITIAL_VFS: usize = 0x0C;
    /// TotalVFs (u16).
    pub const SRIOV_TOTAL_VFS: usize = 0x0E;
    /// NumVFs (u16).
    pub const SRIOV_NUM_VFS: usize = 0x10;
    /// First VF offset (u16).
    pub const SRIOV_VF_OFFSET: usize = 0x14;
    /// VF stride (u16).
    pub const SRIOV_VF_STRIDE: usize = 0x16;
    /// VF device ID (u16).
    pub const SRIOV_VF_DEVICE_ID: usize = 0x1A;
    /// Supported page sizes (u32).
    pub const SRIOV_SUPPORTED_PAGE_SIZES: usize = 0x1C;
    /// System page size (u32).
    pub const SRIOV_SYSTEM_PAGE_SIZE: usize = 0x20;
    /// First VF BAR (u32); VF BAR n is at `SRIOV_VF_BAR0 + 4 * n`.
    pub const SRIOV_VF_BAR0: usize = 0x24;
    /// Size of the SR-IOV capability.
    pub const SRIOV_CAP_SIZE: usize = 0x40;
    /// SR-IOV control: VF enable.
    pub const SRIOV_CTRL_VF_ENABLE: u16 = 1 << 0;
    /// SR-IOV control: VF memory space enable.
    pub const SRIOV_CTRL_VF_MSE: u16 = 1 << 3;
}

/// BAR index of the register BAR (64-bit, non-prefetchable, trapped: every access is a
/// message to the device).
pub const REG_BAR: u8 = 0;
/// Size of the register BAR.
pub const REG_BAR_SIZE: u64 = 0x4000;
/// Offset of the MSI-X table inside the register BAR.
pub const MSIX_TABLE_OFFSET: u64 = 0x2000;
/// Offset of the MSI-X pending-bit array inside the register BAR.
pub const MSIX_PBA_OFFSET: u64 = 0x3000;
/// Size of one MSI-X table entry.
pub const MSIX_ENTRY_SIZE: u64 = 16;
/// Number of MSI-X vectors of every function.
pub const MSIX_VECTORS: u16 = 16;

/// BAR index of the doorbell BAR (64-bit, prefetchable, mmapped by the VMM: guest writes
/// reach shared memory without any message to the device).
pub const DOORBELL_BAR: u8 = 2;
