//! The command queue and its commands.
//!
//! Each function has one command queue: a virtio 1.x split virtqueue (descriptor table,
//! available ring, used ring) in guest memory, set up through the `CMDQ_*` registers of
//! [`crate::regs`]. A command is one descriptor chain: first the device-readable
//! descriptors holding a [`CmdHeader`] followed by the command's request structure, then
//! the device-writable descriptors that receive a [`RespHeader`] followed by the command's
//! response structure. Headers and structures may be split across descriptors at any byte.
//!
//! The device writes the response, then the used element with the number of bytes it
//! wrote, and then signals the queue's MSI-X vector unless the driver set
//! `VIRTQ_AVAIL_F_NO_INTERRUPT` in the available ring. A chain whose writable part cannot
//! hold a [`RespHeader`] completes with a used length of 0: the driver must treat that as
//! [`Status::Malformed`].

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Largest command queue, in entries.
pub const CMDQ_MAX_SIZE: u16 = 256;
/// Required alignment of the descriptor table.
pub const CMDQ_DESC_ALIGN: u64 = 16;
/// Required alignment of the available ring.
pub const CMDQ_AVAIL_ALIGN: u64 = 2;
/// Required alignment of the used ring.
pub const CMDQ_USED_ALIGN: u64 = 4;
/// Largest request or response the device accepts, in bytes.
pub const CMD_MAX_LEN: u32 = 64 * 1024;

/// Command opcodes. Those from [`crate::admin::ADMIN_OPCODE_BASE`] on are admin commands:
/// only the PF's admin queue runs them; elsewhere they complete with
/// [`Status::NotPermitted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Opcode {
    /// Does nothing and succeeds: a round trip through the queue.
    Nop = 0x0000,
    /// Identity, capabilities and resource limits: [`QueryDeviceResp`].
    QueryDevice = 0x0001,
    /// Create the function's event queue: `verbs::CreateEqReq` -> `verbs::CreateEqResp`.
    CreateEq = 0x0100,
    /// Destroy the event queue: `verbs::ObjectReq`.
    DestroyEq = 0x0101,
    /// Allocate a protection domain: no body -> `verbs::ObjectResp`.
    AllocPd = 0x0110,
    /// Free a protection domain (fails with [`Status::Busy`] while objects use it):
    /// `verbs::ObjectReq`.
    DeallocPd = 0x0111,
    /// Register a memory region: `verbs::RegMrReq` -> `verbs::RegMrResp`.
    RegMr = 0x0120,
    /// Deregister a memory region, or destroy an indirect or pattern key: `verbs::ObjectReq`
    /// with the lkey. Fails with [`Status::Busy`] while an indirect or pattern key names
    /// the region, or a memory window is bound to it ([`crate::mw`], ABI 1.6).
    DeregMr = 0x0121,
    /// Create an indirect memory key: `mkey::CreateIndirectKeyReq` and its entries ->
    /// `verbs::RegMrResp`. `DEREG_MR` destroys it.
    CreateIndirectKey = 0x0122,
    /// Create a pattern (strided) memory key: `mkey::CreatePatternKeyReq` ->
    /// `verbs::RegMrResp`. `DEREG_MR` destroys it.
    CreatePatternKey = 0x0123,
    /// Allocate a memory window: `mw::AllocMwReq` -> `mw::AllocMwResp` (ABI 1.6).
    AllocMw = 0x0124,
    /// Free a memory window, bound or not: `verbs::ObjectReq` with a key of the window
    /// (its index counts, not its tag).
    DeallocMw = 0x0125,
    /// Register the DMA key of a PD: `fast_reg::RegDmaMrReq` -> `verbs::RegMrResp`
    /// (ABI 1.8). `DEREG_MR` destroys it.
    RegDmaMr = 0x0126,
    /// Allocate a fast-registration MR, free: `fast_reg::AllocFastRegMrReq` ->
    /// `verbs::RegMrResp` (ABI 1.8). `DEREG_MR` destroys it.
    AllocFastRegMr = 0x0127,
    /// Create a completion queue: `verbs::CreateCqReq` -> `verbs::CreateCqResp`.
    CreateCq = 0x0130,
    /// Destroy a completion queue (fails with [`Status::Busy`] while QPs use it):
    /// `verbs::ObjectReq`.
    DestroyCq = 0x0131,
    /// Move a completion queue to a ring of another size, its unconsumed completions with
    /// it (ABI 1.10, [`crate::regs::CAP_RESIZE_CQ`]): `verbs::ResizeCqReq`.
    ResizeCq = 0x0132,
    /// Create a queue pair: `verbs::CreateQpReq` -> `verbs::CreateQpResp`.
    CreateQp = 0x0140,
    /// Change a queue pair's state and attributes: `verbs::ModifyQpReq`.
    ModifyQp = 0x0141,
    /// Read a queue pair's attributes: `verbs::ObjectReq` -> `verbs::QueryQpResp`.
    QueryQp = 0x0142,
    /// Destroy a queue pair: `verbs::ObjectReq`.
    DestroyQp = 0x0143,
    /// Create a shared receive queue: `srq::CreateSrqReq` -> `srq::CreateSrqResp`.
    CreateSrq = 0x0150,
    /// Change an SRQ's limit: `srq::ModifySrqReq`.
    ModifySrq = 0x0151,
    /// Read an SRQ's attributes: `verbs::ObjectReq` -> `srq::QuerySrqResp`.
    QuerySrq = 0x0152,
    /// Destroy an SRQ (fails with [`Status::Busy`] while QPs use it): `verbs::ObjectReq`.
    DestroySrq = 0x0153,
    /// Move an SRQ to a ring of another size, the receives posted and not taken with it
    /// (ABI 1.11, [`crate::regs::CAP_RESIZE_SRQ`]): `srq::ResizeSrqReq`.
    ResizeSrq = 0x0154,
    /// Sets a DC target's access key ([`crate::dc::SetDcKeyReq`]).
    SetDcKey = 0x0160,
    /// Describe a QP that arrived on this function with `MIGRATE_QP` (its new PD, CQ and
    /// doorbell numbering): `migration::AdoptQpReq` -> `migration::AdoptQpResp`.
    AdoptQp = 0x0144,
    /// Give a QP a window for send WQEs by MMIO: `verbs::ObjectReq` (QPN) ->
    /// `mmio::SqWindowResp`.
    CreateSqWindow = 0x0145,
    /// A UD QP joins a multicast group (ABI 1.11): `mcast::McastReq`.
    AttachMcast = 0x0146,
    /// A UD QP leaves a multicast group (ABI 1.11): `mcast::McastReq`.
    DetachMcast = 0x0147,
    /// Create a control queue: `ctrlq::CreateCtrlqReq` -> `ctrlq::CreateCtrlqResp`.
    CreateCtrlq = 0x0170,
    /// Destroy a control queue: `verbs::ObjectReq`.
    DestroyCtrlq = 0x0171,
    /// Reserve pending memory keys: `ctrlq::ReserveMkeysReq` -> `ctrlq::ReserveMkeysResp`.
    /// `DEREG_MR` releases a key in any state.
    ReserveMkeys = 0x0172,
    /// Create a shared send queue: `shared_sq::CreateSharedSqReq` ->
    /// `shared_sq::CreateSharedSqResp`.
    CreateSharedSq = 0x0173,
    /// Destroy a shared send queue: `verbs::ObjectReq`. WQEs its QPs still hold complete
    /// with nothing.
    DestroySharedSq = 0x0174,
    /// Create an Ethernet send or receive queue: `eth::CreateEthQueueReq` ->
    /// `eth::CreateEthQueueResp` (ABI 1.7).
    CreateEthQueue = 0x0180,
    /// Destroy an Ethernet queue: `eth::EthQueueReq`. Descriptors it still holds are not
    /// completed: the driver takes its buffers back.
    DestroyEthQueue = 0x0181,
    /// Set the function's MTU, receive mode and multicast filter: `eth::SetEthReq` and its
    /// `eth::MacEntry`s.
    SetEth = 0x0182,
    /// Read the function's Ethernet state and counters: no body -> `eth::QueryEthResp`.
    QueryEth = 0x0183,
    /// Read one Ethernet queue's counters: `eth::EthQueueReq` -> `eth::EthQueueStats`.
    QueryEthQueue = 0x0184,
    /// Set or clear one entry of the function's GID table (ABI 1.10): `gid::SetGidReq`.
    SetGid = 0x0185,
    /// Read one entry of the function's GID table (ABI 1.10): `gid::QueryGidReq` ->
    /// `gid::QueryGidResp`.
    QueryGid = 0x0186,
    /// Admin (PF only, [`crate::admin`]): the device's pools and VF count: no body ->
    /// `admin::AdminQueryResp`.
    AdminQuery = 0x1000,
    /// Admin: enable VFs `0..n` and disable the rest: `admin::SetNumVfsReq`.
    SetNumVfs = 0x1001,
    /// Admin: one member's state, quota and usage: `admin::MemberReq` ->
    /// `admin::MemberInfo`.
    QueryMember = 0x1002,
    /// Admin: set a member's quota: `admin::SetQuotaReq`.
    SetQuota = 0x1003,
    /// Admin: set a member's MAC and/or GID: `admin::SetAddressReq`.
    SetAddress = 0x1004,
    /// Admin: set a member's link state: `admin::SetLinkReq`.
    SetLink = 0x1005,
    /// Admin: read a member's counters: `admin::MemberReq` -> `admin::MemberStats`.
    GetStats = 0x1006,
    /// Admin: function-level reset of a VF: `admin::MemberReq`.
    ResetVf = 0x1007,
    /// Admin: move a QP between members: `migration::MigrateQpReq` ->
    /// `migration::MigrateQpResp`.
    MigrateQp = 0x1008,
    /// Admin: read the counters of the device's network port: no body ->
    /// `admin::PortStats`.
    GetPortStats = 0x1009,
    /// Admin: set a member's sessions (UDP source ports): `session::SetSessionsReq`.
    SetSessions = 0x1010,
    /// Admin: set a VF's Ethernet spoof check and trust: `eth::SetVfEthReq` (ABI 1.7).
    SetVfEth = 0x1011,
}

impl Opcode {
    /// Whether this is an admin command (only the PF's admin queue runs it).
    pub fn is_admin(self) -> bool {
        crate::admin::is_admin_opcode(self as u16)
    }

    /// The opcode with this number, if there is one.
    pub fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0x0000 => Self::Nop,
            0x0001 => Self::QueryDevice,
            0x0100 => Self::CreateEq,
            0x0101 => Self::DestroyEq,
            0x0110 => Self::AllocPd,
            0x0111 => Self::DeallocPd,
            0x0120 => Self::RegMr,
            0x0121 => Self::DeregMr,
            0x0122 => Self::CreateIndirectKey,
            0x0123 => Self::CreatePatternKey,
            0x0124 => Self::AllocMw,
            0x0125 => Self::DeallocMw,
            0x0126 => Self::RegDmaMr,
            0x0127 => Self::AllocFastRegMr,
            0x0130 => Self::CreateCq,
            0x0131 => Self::DestroyCq,
            0x0132 => Self::ResizeCq,
            0x0140 => Self::CreateQp,
            0x0141 => Self::ModifyQp,
            0x0142 => Self::QueryQp,
            0x0143 => Self::DestroyQp,
            0x0144 => Self::AdoptQp,
            0x0145 => Self::CreateSqWindow,
            0x0146 => Self::AttachMcast,
            0x0147 => Self::DetachMcast,
            0x0150 => Self::CreateSrq,
            0x0151 => Self::ModifySrq,
            0x0152 => Self::QuerySrq,
            0x0153 => Self::DestroySrq,
            0x0154 => Self::ResizeSrq,
            0x0160 => Self::SetDcKey,
            0x0170 => Self::CreateCtrlq,
            0x0171 => Self::DestroyCtrlq,
            0x0172 => Self::ReserveMkeys,
            0x0173 => Self::CreateSharedSq,
            0x0174 => Self::DestroySharedSq,
            0x0180 => Self::CreateEthQueue,
            0x0181 => Self::DestroyEthQueue,
            0x0182 => Self::SetEth,
            0x0183 => Self::QueryEth,
            0x0184 => Self::QueryEthQueue,
            0x0185 => Self::SetGid,
            0x0186 => Self::QueryGid,
            0x1000 => Self::AdminQuery,
            0x1001 => Self::SetNumVfs,
            0x1002 => Self::QueryMember,
            0x1003 => Self::SetQuota,
            0x1004 => Self::SetAddress,
            0x1005 => Self::SetLink,
            0x1006 => Self::GetStats,
            0x1007 => Self::ResetVf,
            0x1008 => Self::MigrateQp,
            0x1009 => Self::GetPortStats,
            0x1010 => Self::SetSessions,
            0x1011 => Self::SetVfEth,
            _ => return None,
        })
    }
}

/// Completion status of a command, in [`RespHeader::status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    /// The command succeeded.
    Ok = 0,
    /// The opcode is not one the device knows.
    BadOpcode = 1,
    /// A field of the request has a value the command does not accept.
    BadParam = 2,
    /// The descriptor chain is malformed: a request shorter than its header or structure,
    /// longer than [`CMD_MAX_LEN`], a readable descriptor after a writable one, or a
    /// response buffer too small for the response (the syndrome then says how many bytes
    /// it needs).
    Malformed = 3,
    /// The device could not read a request buffer, or a buffer a command names: the
    /// address is not DMA-mapped. The syndrome is the byte offset of the request that
    /// failed, or 0 when a page list (or a page it names) was unreachable.
    DmaError = 4,
    /// The function has no resources left for this command.
    NoResources = 5,
    /// The function is not allowed to issue this command.
    NotPermitted = 6,
    /// An internal device error; the device log says more.
    Internal = 7,
    /// The object is in use by others and cannot be destroyed yet.
    Busy = 8,
    /// The object named does not exist (or belongs to another function).
    NotFound = 9,
    /// The requested state transition or attribute is not allowed now.
    BadState = 10,
}

impl Status {
    /// The status with this number, if there is one.
    pub fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0 => Self::Ok,
            1 => Self::BadOpcode,
            2 => Self::BadParam,
            3 => Self::Malformed,
            4 => Self::DmaError,
            5 => Self::NoResources,
            6 => Self::NotPermitted,
            7 => Self::Internal,
            8 => Self::Busy,
            9 => Self::NotFound,
            10 => Self::BadState,
            _ => return None,
        })
    }
}

/// The first bytes of every command.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CmdHeader {
    /// An [`Opcode`].
    pub opcode: u16,
    /// Must be 0.
    pub reserved: u16,
    /// Echoed in the response, for the driver's own matching.
    pub token: u32,
}

/// The first bytes of every response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RespHeader {
    /// A [`Status`].
    pub status: u16,
    /// The opcode of the command.
    pub opcode: u16,
    /// The command's token.
    pub token: u32,
    /// A status-specific detail, for example the offending byte offset of a malformed
    /// request, or 0.
    pub syndrome: u32,
    /// Must be ignored.
    pub reserved: u32,
}

/// Function kind, in [`QueryDeviceResp::function_kind`].
pub const FUNCTION_KIND_PF: u8 = 0;
/// See [`FUNCTION_KIND_PF`].
pub const FUNCTION_KIND_VF: u8 = 1;

/// Response of [`Opcode::QueryDevice`]: who the function is, what it can do and how much
/// of it. The request has no body.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueryDeviceResp {
    /// PCI vendor ID.
    pub vendor_id: u16,
    /// PCI device ID.
    pub device_id: u16,
    /// [`crate::ABI_MAJOR`] of the device.
    pub abi_major: u16,
    /// [`crate::ABI_MINOR`] of the device.
    pub abi_minor: u16,
    /// Version of the device implementation (rnicd): major, minor, patch in bytes 2, 1, 0.
    pub fw_version: u32,
    /// [`FUNCTION_KIND_PF`] or [`FUNCTION_KIND_VF`].
    pub function_kind: u8,
    /// Index of the VF (0 on the PF).
    pub vf_index: u8,
    /// On the PF, the number of VFs the device has (TotalVFs); 0 on a VF.
    pub total_vfs: u16,
    /// Capability bits, as in [`crate::regs::CAPS_LO`].
    pub caps: u64,
    /// The function's Ethernet MAC address.
    pub mac: [u8; 6],
    /// Must be ignored.
    pub reserved0: u16,
    /// The function's default GID (an IPv4-mapped IPv6 address for RoCEv2).
    pub gid: [u8; 16],
    /// Resource limits of the function.
    pub limits: Limits,
}

/// Resource limits of a function, as `ibv_query_device` reports them.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Limits {
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Outstanding RDMA READs and atomics a QP may have as responder.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READs and atomics a QP may have as requester.
    pub max_qp_init_rd_atom: u32,
    /// Bytes of inline data per work request.
    pub max_inline_data: u32,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Pages one memory region may cover.
    pub max_mr_pages: u32,
    /// Doorbell pages of the function.
    pub doorbell_pages: u32,
    /// MSI-X vectors of the function.
    pub msix_vectors: u32,
    /// Largest command queue.
    pub cmdq_max_size: u32,
}
