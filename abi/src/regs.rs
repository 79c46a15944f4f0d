//! The register file in BAR0 ([`crate::pci::REG_BAR`]).
//!
//! Registers are 32 bits wide and must be accessed with aligned 32-bit reads and writes;
//! 64-bit registers are two 32-bit halves, low half first. Every access to BAR0 traps to
//! the device (a vfio-user message), so the data path never touches it except for
//! [`DOORBELL_KICK`], and that only when the device asked for it.

/// Identification magic, reads [`MAGIC`].
pub const MAGIC_REG: u64 = 0x000;
/// Interface version, reads [`crate::abi_version`].
pub const ABI_VERSION: u64 = 0x004;
/// Which function this is: bit 0 set on a VF; bits 15:8 the VF index.
pub const FUNCTION_INFO: u64 = 0x008;
/// Device capability bits ([`CAP_CMDQ`] and friends), low half.
pub const CAPS_LO: u64 = 0x010;
/// Device capability bits, high half.
pub const CAPS_HI: u64 = 0x014;
/// Device status bits ([`STATUS_READY`] and friends). Read-only.
pub const DEVICE_STATUS: u64 = 0x018;
/// Device control bits ([`CONTROL_RESET`]).
pub const DEVICE_CONTROL: u64 = 0x01C;
/// Command queue: device address of the descriptor table (what the VMM DMA-mapped: the
/// guest-physical address in a VM without an IOMMU), low and high half.
pub const CMDQ_DESC_LO: u64 = 0x020;
/// See [`CMDQ_DESC_LO`].
pub const CMDQ_DESC_HI: u64 = 0x024;
/// Command queue: address of the available (driver) ring.
pub const CMDQ_AVAIL_LO: u64 = 0x028;
/// See [`CMDQ_AVAIL_LO`].
pub const CMDQ_AVAIL_HI: u64 = 0x02C;
/// Command queue: address of the used (device) ring.
pub const CMDQ_USED_LO: u64 = 0x030;
/// See [`CMDQ_USED_LO`].
pub const CMDQ_USED_HI: u64 = 0x034;
/// Command queue size in entries: a power of two, at most [`CMDQ_MAX_SIZE`].
pub const CMDQ_SIZE: u64 = 0x038;
/// MSI-X vector the device signals when it completes commands, or [`NO_VECTOR`].
pub const CMDQ_MSIX_VECTOR: u64 = 0x03C;
/// Command queue control: write [`CMDQ_ENABLE`] to start it, 0 to stop it.
pub const CMDQ_CONTROL: u64 = 0x040;
/// Largest command queue the device supports (read-only).
pub const CMDQ_MAX_SIZE: u64 = 0x044;
/// The trapped notification register: write the number of a doorbell page after ringing a
/// doorbell in it, but only when that page's `NOTIFY_REQUEST` word is non-zero.
pub const DOORBELL_KICK: u64 = 0x048;
/// Number of doorbell pages in the doorbell BAR (read-only).
pub const DOORBELL_PAGES: u64 = 0x04C;
/// Offset of the user kick page (ABI 1.9, [`CAP_USER_KICK`]): the register BAR's second
/// 4 KiB page. It holds only [`USER_KICK`]; every other offset in it reads 0 and ignores
/// writes. An operating system that maps doorbell pages into processes maps this page
/// beside them, so a process can wake the device (the doorbell protocol's kick) without
/// reaching any other register.
pub const USER_KICK_PAGE: u64 = 0x1000;
/// The user kick register (u32, write-only, at offset 0 of [`USER_KICK_PAGE`]): a write of
/// a doorbell page number does what a write to [`DOORBELL_KICK`] does. Waking the device
/// is harmless whoever does it, so the page may be shared by every process.
pub const USER_KICK: u64 = USER_KICK_PAGE;
/// Number of MSI-X vectors (read-only).
pub const MSIX_VECTORS: u64 = 0x050;
/// Why the last [`CMDQ_CONTROL`] enable or other setup step failed ([`ERR_NONE`] and friends).
pub const ERROR_CODE: u64 = 0x054;
/// Admin queue ([`crate::admin`]): address of the descriptor table, low half. The admin
/// queue block `ADMINQ_*` has the layout of the `CMDQ_*` block (from [`CMDQ_DESC_LO`] to
/// [`CMDQ_CONTROL`]) moved up by [`ADMINQ_OFFSET`], and the same meaning. Every function
/// has it; on a VF every admin command completes with `NotPermitted`.
pub const ADMINQ_DESC_LO: u64 = 0x060;
/// See [`ADMINQ_DESC_LO`].
pub const ADMINQ_DESC_HI: u64 = 0x064;
/// Admin queue: address of the available (driver) ring.
pub const ADMINQ_AVAIL_LO: u64 = 0x068;
/// See [`ADMINQ_AVAIL_LO`].
pub const ADMINQ_AVAIL_HI: u64 = 0x06C;
/// Admin queue: address of the used (device) ring.
pub const ADMINQ_USED_LO: u64 = 0x070;
/// See [`ADMINQ_USED_LO`].
pub const ADMINQ_USED_HI: u64 = 0x074;
/// Admin queue size in entries: a power of two, at most [`CMDQ_MAX_SIZE`].
pub const ADMINQ_SIZE: u64 = 0x078;
/// MSI-X vector the device signals when it completes admin commands, or [`NO_VECTOR`].
pub const ADMINQ_MSIX_VECTOR: u64 = 0x07C;
/// Admin queue control: write [`CMDQ_ENABLE`] to start it, 0 to stop it.
pub const ADMINQ_CONTROL: u64 = 0x080;
/// Why the last [`ADMINQ_CONTROL`] enable failed or why the running admin queue stopped
/// (`ERR_CMDQ_*` codes, which mean the same for this queue).
pub const ADMINQ_ERROR_CODE: u64 = 0x084;
/// One past the last register; reads beyond it up to the MSI-X table return 0.
pub const REGS_END: u64 = 0x088;

/// Distance from each `CMDQ_*` ring register to its `ADMINQ_*` twin.
pub const ADMINQ_OFFSET: u64 = ADMINQ_DESC_LO - CMDQ_DESC_LO;

/// The ring registers of one queue (command or admin): where a driver programs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRegs {
    /// Descriptor table address, low half (high half 4 bytes on).
    pub desc_lo: u64,
    /// Available ring address, low half.
    pub avail_lo: u64,
    /// Used ring address, low half.
    pub used_lo: u64,
    /// Queue size.
    pub size: u64,
    /// MSI-X vector.
    pub msix_vector: u64,
    /// Control ([`CMDQ_ENABLE`]).
    pub control: u64,
    /// Error code register.
    pub error_code: u64,
    /// [`DEVICE_STATUS`] bit that says the queue runs.
    pub running: u32,
    /// [`DEVICE_STATUS`] bit that says the queue stopped on an error.
    pub fatal: u32,
    /// Offset of its doorbell in doorbell page 0.
    pub doorbell: u64,
}

/// The command queue's registers.
pub const CMDQ_REGS: QueueRegs = QueueRegs {
    desc_lo: CMDQ_DESC_LO,
    avail_lo: CMDQ_AVAIL_LO,
    used_lo: CMDQ_USED_LO,
    size: CMDQ_SIZE,
    msix_vector: CMDQ_MSIX_VECTOR,
    control: CMDQ_CONTROL,
    error_code: ERROR_CODE,
    running: STATUS_CMDQ_RUNNING,
    fatal: STATUS_FATAL,
    doorbell: crate::doorbell::CMDQ_DOORBELL,
};

/// The admin queue's registers.
pub const ADMINQ_REGS: QueueRegs = QueueRegs {
    desc_lo: ADMINQ_DESC_LO,
    avail_lo: ADMINQ_AVAIL_LO,
    used_lo: ADMINQ_USED_LO,
    size: ADMINQ_SIZE,
    msix_vector: ADMINQ_MSIX_VECTOR,
    control: ADMINQ_CONTROL,
    error_code: ADMINQ_ERROR_CODE,
    running: STATUS_ADMINQ_RUNNING,
    fatal: STATUS_ADMINQ_FATAL,
    doorbell: crate::doorbell::ADMINQ_DOORBELL,
};

/// Value of [`MAGIC_REG`]: "RNIC" in ASCII, little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RNIC");

/// [`FUNCTION_INFO`]: set on a virtual function.
pub const FUNCTION_IS_VF: u32 = 1 << 0;
/// [`FUNCTION_INFO`]: shift of the VF index.
pub const FUNCTION_VF_INDEX_SHIFT: u32 = 8;

/// Capability: a command queue ([`crate::cmd`]).
pub const CAP_CMDQ: u64 = 1 << 0;
/// Capability: doorbell BAR with notification suppression ([`crate::doorbell`]).
pub const CAP_DOORBELL_NOTIFY: u64 = 1 << 1;
/// Capability: MSI-X interrupts for command completion.
pub const CAP_MSIX: u64 = 1 << 2;
/// Capability: function-level reset, by [`CONTROL_RESET`] and by PCIe FLR.
pub const CAP_FUNCTION_RESET: u64 = 1 << 3;
/// Capability: RDMA verbs over reliable connected QPs ([`crate::verbs`]).
pub const CAP_RDMA_RC: u64 = 1 << 4;
/// Capability: the function administers the device through its admin queue
/// ([`crate::admin`]); set on the PF only.
pub const CAP_ADMIN: u64 = 1 << 5;
/// Capability: indirect memory keys, lists of MR ranges used as one key
/// ([`crate::mkey`], `CREATE_INDIRECT_KEY`).
pub const CAP_INDIRECT_MKEY: u64 = 1 << 6;
/// Capability: pattern (strided) memory keys ([`crate::mkey`], `CREATE_PATTERN_KEY`).
pub const CAP_PATTERN_MKEY: u64 = 1 << 7;
/// Capability: SEND with immediate, SEND with invalidate (of MR, indirect and pattern
/// keys) and the solicited event, in every combination, with the completion semantics of
/// the datasheet's §14.3 (the `wc_flags` bits of [`crate::verbs::wc_flags`]).
pub const CAP_SEND_VARIANTS: u64 = 1 << 8;
/// Capability: shared receive queues ([`crate::srq`]).
pub const CAP_SRQ: u64 = 1 << 9;
/// Capability: unreliable datagram QPs ([`crate::ud`]).
pub const CAP_UD: u64 = 1 << 10;
/// Capability: Dynamically Connected transport ([`crate::dc`]).
pub const CAP_DC: u64 = 1 << 13;
/// Capability: one-shot READ grants, indirect keys that allow exactly one remote READ
/// ([`crate::mkey::KEY_ONE_SHOT_READ`]).
pub const CAP_ONE_SHOT_READ: u64 = 1 << 11;
/// Capability: send WQEs written into a window of the doorbell BAR ([`crate::mmio`]).
pub const CAP_WQE_MMIO: u64 = 1 << 12;
/// Pipelined memory registration through control queues ([`crate::ctrlq`], ABI 1.4).
pub const CAP_PIPELINED_REG: u64 = 1 << 14;
/// Shared send queues ([`crate::shared_sq`], ABI 1.4).
pub const CAP_SHARED_SQ: u64 = 1 << 15;
/// Sessions bound to UDP source ports, and multipath ([`crate::session`], ABI 1.4).
pub const CAP_SESSIONS: u64 = 1 << 16;
/// Page lists may be page tables of up to [`crate::verbs::MAX_PAGE_LEVELS`] levels
/// ([`crate::verbs::PageList::levels`], ABI 1.6), so no page list needs memory the
/// device sees as contiguous beyond one page.
pub const CAP_PAGE_TABLES: u64 = 1 << 17;
/// Unreliable connected QPs (`CreateQpReq::qp_type` = [`crate::verbs::QPT_UC`], ABI
/// 1.6): SEND and RDMA WRITE, with and without immediate, no acknowledgements.
pub const CAP_UC: u64 = 1 << 18;
/// Memory windows of types 1 and 2 ([`crate::mw`], ABI 1.6): `ALLOC_MW`, `DEALLOC_MW`,
/// `BIND_MW` work requests, their invalidation.
pub const CAP_MW: u64 = 1 << 19;
/// Ethernet queues ([`crate::eth`], ABI 1.7): send and receive rings of whole Ethernet
/// frames, `CREATE_ETH_QUEUE` to `QUERY_ETH_QUEUE`, and the admin `SET_VF_ETH`.
pub const CAP_ETH: u64 = 1 << 20;
/// Kernel memory keys ([`crate::fast_reg`], ABI 1.8): `REG_DMA_MR`, `ALLOC_FAST_REG_MR`
/// and `REG_MR` work requests.
pub const CAP_FAST_REG: u64 = 1 << 21;
/// The GSI QP ([`crate::ud::QPT_GSI`], ABI 1.8): QP 1 of each function, for the
/// management datagrams of a communication manager.
pub const CAP_GSI: u64 = 1 << 22;
/// The user kick page ([`USER_KICK_PAGE`], ABI 1.9): a page of the register BAR that holds
/// nothing but [`USER_KICK`], so an operating system can map it into its processes.
pub const CAP_USER_KICK: u64 = 1 << 23;
/// The GID table ([`crate::gid::GID_TABLE_LEN`] entries per function, ABI 1.10): the
/// function's driver sets the source addresses its QPs and address vectors choose by
/// `sgid_index` (`SET_GID`, `QUERY_GID`).
pub const CAP_GID_TABLE: u64 = 1 << 24;
/// `RESIZE_CQ` (ABI 1.10): a CQ moves to a ring of another size with its unconsumed
/// completions.
pub const CAP_RESIZE_CQ: u64 = 1 << 25;
/// `RESIZE_SRQ` (ABI 1.11): an SRQ moves to a ring of another size with the receives
/// posted and not taken yet.
pub const CAP_RESIZE_SRQ: u64 = 1 << 26;
/// RDMA ATOMIC WRITE (ABI 1.11): [`crate::verbs::wr::ATOMIC_WRITE`], executed by the
/// responder (datasheet §14.14).
pub const CAP_ATOMIC_WRITE: u64 = 1 << 27;
/// RDMA FLUSH (ABI 1.11): [`crate::verbs::wr::FLUSH`], the FLUSH access flags on regions
/// and QPs (datasheet §14.14).
pub const CAP_FLUSH: u64 = 1 << 28;
/// UD multicast (ABI 1.11): `ATTACH_MCAST` and `DETACH_MCAST` ([`crate::mcast`]), and UD
/// sends to a multicast group.
pub const CAP_MULTICAST: u64 = 1 << 29;

/// [`DEVICE_STATUS`]: the function finished reset and accepts set-up.
pub const STATUS_READY: u32 = 1 << 0;
/// [`DEVICE_STATUS`]: the command queue runs.
pub const STATUS_CMDQ_RUNNING: u32 = 1 << 1;
/// [`DEVICE_STATUS`]: the command queue hit an error it could not recover from and
/// stopped; [`ERROR_CODE`] says which. Restarting the queue (or a reset) clears it.
pub const STATUS_FATAL: u32 = 1 << 2;
/// [`DEVICE_STATUS`]: the function is a VF that its PF disabled (`SET_NUM_VFS`): it does
/// nothing else; its queues do not run and its traffic is not processed.
pub const STATUS_DISABLED: u32 = 1 << 3;
/// [`DEVICE_STATUS`]: the admin queue runs.
pub const STATUS_ADMINQ_RUNNING: u32 = 1 << 4;
/// [`DEVICE_STATUS`]: the admin queue hit an error it could not recover from and stopped;
/// [`ADMINQ_ERROR_CODE`] says which.
pub const STATUS_ADMINQ_FATAL: u32 = 1 << 5;
/// [`DEVICE_STATUS`]: the function's link is down (its PF set it so): it sends and receives
/// nothing.
pub const STATUS_LINK_DOWN: u32 = 1 << 6;

/// [`DEVICE_CONTROL`]: write 1 to reset the device state of the function (registers,
/// queues, doorbells, and every object it created) to power-on. PCI state that belongs to
/// the OS and VMM (config space, the MSI-X table) is kept; PCIe FLR resets that too.
/// Completes before the write returns; reads as 0.
pub const CONTROL_RESET: u32 = 1 << 0;

/// [`CMDQ_CONTROL`]: run the command queue.
pub const CMDQ_ENABLE: u32 = 1 << 0;

/// The value of a vector register that asks for no interrupt.
pub const NO_VECTOR: u32 = 0xFFFF;

/// [`ERROR_CODE`]: no error.
pub const ERR_NONE: u32 = 0;
/// [`ERROR_CODE`]: the command queue size is zero, not a power of two, or too large.
pub const ERR_CMDQ_SIZE: u32 = 1;
/// [`ERROR_CODE`]: a command queue ring is misaligned, not in memory DMA-mapped writable
/// (all three rings must be), or (the available ring) at address 0.
pub const ERR_CMDQ_ADDRESS: u32 = 2;
/// [`ERROR_CODE`]: the command queue vector is beyond the MSI-X table.
pub const ERR_CMDQ_VECTOR: u32 = 3;
/// [`ERROR_CODE`]: the command queue was enabled while bus mastering is off.
pub const ERR_BUS_MASTER: u32 = 4;
/// [`ERROR_CODE`]: the device could not reach the command queue's rings while running it
/// (the memory was unmapped); the queue stopped.
pub const ERR_CMDQ_DMA: u32 = 5;
/// [`ERROR_CODE`]: the available ring named a descriptor beyond the queue, or its index ran
/// more than a queue's worth ahead of the device; the queue stopped.
pub const ERR_CMDQ_BROKEN: u32 = 6;
