//! The vfio-user wire format, as rnic speaks it (docs/hardware-interface.md §9).
//!
//! vfio-user is QEMU's protocol for a device that lives in another process: a client (the
//! VMM) and a server (rnicd) exchange messages over a unix socket, each a [`Header`] and
//! a body, with file descriptors (guest memory, interrupt eventfds, the doorbell BAR)
//! passed beside them as `SCM_RIGHTS`. The protocol is QEMU's (`docs/interop/vfio-user.rst`
//! in its tree); the layouts are here so that rnicd's server and the driver's client
//! (which plays the VMM on the host) cannot disagree, and so that the limits rnicd
//! enforces on a client are written down once.
//!
//! Everything is in the host's byte order (little-endian here, see the crate docs).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The message header that starts every command and every reply.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Header {
    /// Chosen by the sender of a command, echoed in its reply.
    pub message_id: u16,
    /// One of the `CMD_` numbers.
    pub command: u16,
    /// Size of the whole message, this header included.
    pub message_size: u32,
    /// [`FLAG_REPLY`] (type), [`FLAG_NO_REPLY`], [`FLAG_ERROR`].
    pub flags: u32,
    /// In an error reply, an errno (0 if none is given); 0 in a command.
    pub error: u32,
}

/// Size of [`Header`].
pub const HEADER_SIZE: usize = 16;

/// The type bits of [`Header::flags`]: 0 for a command, [`FLAG_REPLY`] for a reply.
pub const FLAG_TYPE_MASK: u32 = 0xf;
/// Type: a reply.
pub const FLAG_REPLY: u32 = 0x1;
/// In a command: the sender wants no reply (not even an error).
pub const FLAG_NO_REPLY: u32 = 0x10;
/// In a reply: the command failed, [`Header::error`] says why.
pub const FLAG_ERROR: u32 = 0x20;

/// `VFIO_USER_VERSION`: the first message, negotiating version and capabilities.
pub const CMD_VERSION: u16 = 1;
/// `VFIO_USER_DMA_MAP`: memory the device may reach.
pub const CMD_DMA_MAP: u16 = 2;
/// `VFIO_USER_DMA_UNMAP`.
pub const CMD_DMA_UNMAP: u16 = 3;
/// `VFIO_USER_DEVICE_GET_INFO`.
pub const CMD_DEVICE_GET_INFO: u16 = 4;
/// `VFIO_USER_DEVICE_GET_REGION_INFO`.
pub const CMD_DEVICE_GET_REGION_INFO: u16 = 5;
/// `VFIO_USER_DEVICE_GET_REGION_IO_FDS` (not supported by rnicd).
pub const CMD_DEVICE_GET_REGION_IO_FDS: u16 = 6;
/// `VFIO_USER_DEVICE_GET_IRQ_INFO`.
pub const CMD_DEVICE_GET_IRQ_INFO: u16 = 7;
/// `VFIO_USER_DEVICE_SET_IRQS`.
pub const CMD_DEVICE_SET_IRQS: u16 = 8;
/// `VFIO_USER_REGION_READ`.
pub const CMD_REGION_READ: u16 = 9;
/// `VFIO_USER_REGION_WRITE`.
pub const CMD_REGION_WRITE: u16 = 10;
/// `VFIO_USER_DMA_READ` (server to client; rnicd never sends it).
pub const CMD_DMA_READ: u16 = 11;
/// `VFIO_USER_DMA_WRITE` (server to client; rnicd never sends it).
pub const CMD_DMA_WRITE: u16 = 12;
/// `VFIO_USER_DEVICE_RESET`.
pub const CMD_DEVICE_RESET: u16 = 13;

/// The name of a command number, for messages.
pub const fn command_name(command: u16) -> &'static str {
    match command {
        CMD_VERSION => "VERSION",
        CMD_DMA_MAP => "DMA_MAP",
        CMD_DMA_UNMAP => "DMA_UNMAP",
        CMD_DEVICE_GET_INFO => "DEVICE_GET_INFO",
        CMD_DEVICE_GET_REGION_INFO => "DEVICE_GET_REGION_INFO",
        CMD_DEVICE_GET_REGION_IO_FDS => "DEVICE_GET_REGION_IO_FDS",
        CMD_DEVICE_GET_IRQ_INFO => "DEVICE_GET_IRQ_INFO",
        CMD_DEVICE_SET_IRQS => "DEVICE_SET_IRQS",
        CMD_REGION_READ => "REGION_READ",
        CMD_REGION_WRITE => "REGION_WRITE",
        CMD_DMA_READ => "DMA_READ",
        CMD_DMA_WRITE => "DMA_WRITE",
        CMD_DEVICE_RESET => "DEVICE_RESET",
        _ => "unknown command",
    }
}

/// The protocol version rnic speaks (QEMU's client speaks 0.0 and refuses a higher minor).
pub const VERSION_MAJOR: u16 = 0;
/// See [`VERSION_MAJOR`].
pub const VERSION_MINOR: u16 = 0;

/// The body of `VERSION` (command and reply) before its capabilities: a NUL-terminated
/// JSON object, `{"capabilities":{...}}`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Version {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
}

/// The most file descriptors rnicd takes in one message (its `max_msg_fds`): SET_IRQS
/// of more vectors comes in several messages, as QEMU sends them.
pub const MAX_MSG_FDS: usize = 8;
/// The most data one REGION_READ or REGION_WRITE carries (rnicd's
/// `max_data_xfer_size`): the size of the largest region, the doorbell BAR.
pub const MAX_DATA_XFER: u32 = 0x1_0000;
/// The longest VERSION body rnicd reads (the capabilities JSON of QEMU's client is
/// about 200 bytes).
pub const MAX_VERSION_BODY: u32 = 4096;
/// The longest message rnicd reads: a REGION_WRITE of [`MAX_DATA_XFER`] bytes. A header
/// that announces more ends the connection before anything is read or allocated.
pub const MAX_MESSAGE: u32 =
    (HEADER_SIZE + core::mem::size_of::<RegionAccess>()) as u32 + MAX_DATA_XFER;

/// `VFIO_USER_DMA_MAP` body.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DmaMap {
    /// Size of this structure (32).
    pub argsz: u32,
    /// [`DMA_MAP_READ`], [`DMA_MAP_WRITE`].
    pub flags: u32,
    /// Offset of the memory in the file descriptor that comes with the message.
    pub offset: u64,
    /// Device (DMA) address of the first byte.
    pub address: u64,
    /// Bytes.
    pub size: u64,
}

/// DMA_MAP: the device may read the memory.
pub const DMA_MAP_READ: u32 = 1 << 0;
/// DMA_MAP: the device may write the memory.
pub const DMA_MAP_WRITE: u32 = 1 << 1;

/// `VFIO_USER_DMA_UNMAP` body (command and reply).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DmaUnmap {
    /// Size of this structure (24).
    pub argsz: u32,
    /// [`DMA_UNMAP_ALL`], or 0.
    pub flags: u32,
    /// Device address of the first byte.
    pub address: u64,
    /// Bytes.
    pub size: u64,
}

/// DMA_UNMAP: dirty-page bitmap wanted (migration; rnic refuses it).
pub const DMA_UNMAP_GET_DIRTY_PAGE_INFO: u32 = 1 << 1;
/// DMA_UNMAP: remove every mapping (address and size ignored).
pub const DMA_UNMAP_ALL: u32 = 1 << 2;

/// `VFIO_USER_DEVICE_GET_INFO` body (command and reply).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DeviceInfo {
    /// Size of this structure (16).
    pub argsz: u32,
    /// [`DEVICE_FLAGS_RESET`], [`DEVICE_FLAGS_PCI`].
    pub flags: u32,
    /// Number of regions.
    pub num_regions: u32,
    /// Number of IRQ indexes.
    pub num_irqs: u32,
}

/// Device flag: DEVICE_RESET works (`VFIO_DEVICE_FLAGS_RESET`).
pub const DEVICE_FLAGS_RESET: u32 = 1 << 0;
/// Device flag: a PCI device (`VFIO_DEVICE_FLAGS_PCI`).
pub const DEVICE_FLAGS_PCI: u32 = 1 << 1;

/// `VFIO_USER_DEVICE_GET_REGION_INFO` body: Linux's `struct vfio_region_info`, followed in
/// a reply by its capabilities when `argsz` leaves room for them.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegionInfo {
    /// In a command: room for the reply body; in a reply: the size of the whole reply body.
    pub argsz: u32,
    /// `REGION_FLAG_` bits.
    pub flags: u32,
    /// Region index (`REGION_` numbers).
    pub index: u32,
    /// Offset of the first capability from the start of this structure, 0 if none.
    pub cap_offset: u32,
    /// Size of the region.
    pub size: u64,
    /// Offset of the region in the file descriptor that comes with the reply (mmap).
    pub offset: u64,
}

/// Region flag: readable (`VFIO_REGION_INFO_FLAG_READ`).
pub const REGION_FLAG_READ: u32 = 1 << 0;
/// Region flag: writable.
pub const REGION_FLAG_WRITE: u32 = 1 << 1;
/// Region flag: mmappable, through the descriptor that comes with the reply.
pub const REGION_FLAG_MMAP: u32 = 1 << 2;
/// Region flag: capabilities follow.
pub const REGION_FLAG_CAPS: u32 = 1 << 3;

/// Region index of BAR0 (`VFIO_PCI_BAR0_REGION_INDEX`); BAR n is index n.
pub const REGION_BAR0: u32 = 0;
/// Region index of the expansion ROM.
pub const REGION_ROM: u32 = 6;
/// Region index of PCI configuration space (`VFIO_PCI_CONFIG_REGION_INDEX`).
pub const REGION_CONFIG: u32 = 7;
/// Region index of legacy VGA.
pub const REGION_VGA: u32 = 8;
/// Number of regions of a PCI device.
pub const NUM_REGIONS: u32 = 9;

/// The header of a region capability (`struct vfio_info_cap_header`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CapHeader {
    /// Capability id.
    pub id: u16,
    /// Its version.
    pub version: u16,
    /// Offset of the next capability from the start of [`RegionInfo`], 0 at the end.
    pub next: u32,
}

/// Capability id of the sparse mmap capability (`VFIO_REGION_INFO_CAP_SPARSE_MMAP`).
pub const CAP_SPARSE_MMAP: u16 = 1;

/// The sparse mmap capability after its [`CapHeader`]: then `nr_areas` [`SparseArea`]s.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SparseMmap {
    /// Number of areas that follow.
    pub nr_areas: u32,
    /// Zero.
    pub reserved: u32,
}

/// One mmappable area of a region, relative to [`RegionInfo::offset`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SparseArea {
    /// Offset in the region.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
}

/// `VFIO_USER_DEVICE_GET_IRQ_INFO` body (command and reply).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct IrqInfo {
    /// Size of this structure (16).
    pub argsz: u32,
    /// `IRQ_INFO_` bits.
    pub flags: u32,
    /// IRQ index (`IRQ_` numbers).
    pub index: u32,
    /// Number of interrupts of the index.
    pub count: u32,
}

/// IRQ info flag: interrupts are eventfds (`VFIO_IRQ_INFO_EVENTFD`).
pub const IRQ_INFO_EVENTFD: u32 = 1 << 0;

/// IRQ index of INTx (`VFIO_PCI_INTX_IRQ_INDEX`).
pub const IRQ_INTX: u32 = 0;
/// IRQ index of MSI.
pub const IRQ_MSI: u32 = 1;
/// IRQ index of MSI-X.
pub const IRQ_MSIX: u32 = 2;
/// IRQ index of the error interrupt.
pub const IRQ_ERR: u32 = 3;
/// IRQ index of the request interrupt.
pub const IRQ_REQ: u32 = 4;
/// Number of IRQ indexes of a PCI device.
pub const NUM_IRQS: u32 = 5;

/// `VFIO_USER_DEVICE_SET_IRQS` body; the eventfds come beside it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetIrqs {
    /// Size of this structure (20).
    pub argsz: u32,
    /// One `IRQ_SET_DATA_` and one `IRQ_SET_ACTION_` bit.
    pub flags: u32,
    /// IRQ index.
    pub index: u32,
    /// First interrupt of the index.
    pub start: u32,
    /// Number of interrupts.
    pub count: u32,
}

/// SET_IRQS data: none (trigger now, or with count 0 tear down).
pub const IRQ_SET_DATA_NONE: u32 = 1 << 0;
/// SET_IRQS data: booleans in the body (rnic refuses it).
pub const IRQ_SET_DATA_BOOL: u32 = 1 << 1;
/// SET_IRQS data: eventfds beside the message.
pub const IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
/// The data bits of SET_IRQS flags.
pub const IRQ_SET_DATA_TYPE_MASK: u32 = 0x7;
/// SET_IRQS action: mask.
pub const IRQ_SET_ACTION_MASK: u32 = 1 << 3;
/// SET_IRQS action: unmask.
pub const IRQ_SET_ACTION_UNMASK: u32 = 1 << 4;
/// SET_IRQS action: trigger (set the eventfds, or fire).
pub const IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;
/// The action bits of SET_IRQS flags.
pub const IRQ_SET_ACTION_TYPE_MASK: u32 = 0x38;

/// `VFIO_USER_REGION_READ` and `_WRITE` body before the data (a write's command and a
/// read's reply carry `count` bytes after it).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegionAccess {
    /// Offset in the region.
    pub offset: u64,
    /// Region index.
    pub region: u32,
    /// Bytes.
    pub count: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn layouts_are_the_protocols() {
        assert_eq!(size_of::<Header>(), HEADER_SIZE);
        assert_eq!(size_of::<Version>(), 4);
        assert_eq!(size_of::<DmaMap>(), 32);
        assert_eq!(size_of::<DmaUnmap>(), 24);
        assert_eq!(size_of::<DeviceInfo>(), 16);
        assert_eq!(size_of::<RegionInfo>(), 32);
        assert_eq!(size_of::<CapHeader>(), 8);
        assert_eq!(size_of::<SparseMmap>(), 8);
        assert_eq!(size_of::<SparseArea>(), 16);
        assert_eq!(size_of::<IrqInfo>(), 16);
        assert_eq!(size_of::<SetIrqs>(), 20);
        assert_eq!(size_of::<RegionAccess>(), 16);
        assert_eq!(MAX_MESSAGE, 16 + 16 + 0x1_0000);
    }

    #[test]
    fn every_command_has_a_name() {
        for c in 1..=13 {
            assert_ne!(command_name(c), "unknown command", "{c}");
        }
        assert_eq!(command_name(14), "unknown command");
    }
}
