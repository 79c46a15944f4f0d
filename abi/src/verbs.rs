//! RDMA objects and their formats: protection domains, memory regions, completion queues,
//! queue pairs and the event queue; the send and receive work-queue entries the driver
//! writes; the completion and event entries the device writes.
//!
//! Numbering follows ibverbs wherever ibverbs has a number (access flags, QP states and
//! attribute masks, work-request and completion opcodes, completion statuses, event
//! types), so a verbs provider passes values through unchanged.
//!
//! Rings (send queue, receive queue, completion queue, event queue) live in driver memory
//! described by a [`PageList`]. Entry `i` of a ring of `n` entries and stride `s` is at byte
//! `(i % n) * s` of the ring; a ring never straddles the end of its pages.
//!
//! Ownership of CQ and EQ entries is a phase bit: the driver zeroes the ring; the device
//! writes entries of its first pass with `owner & 1 == 1`, of the second with 0, and so on
//! ([`owner_phase`]), writing the owner byte last. An entry is new to the driver when its
//! owner bit equals the phase of the pass the driver is reading.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Local write access (`IBV_ACCESS_LOCAL_WRITE`).
pub const ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// Remote write access (`IBV_ACCESS_REMOTE_WRITE`).
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// Remote read access (`IBV_ACCESS_REMOTE_READ`).
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
/// Remote atomic access (`IBV_ACCESS_REMOTE_ATOMIC`).
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
/// Every access flag that grants an access, local or remote.
pub const ACCESS_ALL: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
/// A memory region memory windows may be bound to (`IBV_ACCESS_MW_BIND`; ABI 1.6,
/// [`crate::regs::CAP_MW`]): `REG_MR` only. It grants no access by itself.
pub const ACCESS_MW_BIND: u32 = 1 << 4;
/// A type 2 memory window bound zero-based (`IBV_ACCESS_ZERO_BASED`): peers address its
/// first byte as 0 ([`crate::mw::BindMwWqe::access`] only; ABI 1.6).
pub const ACCESS_ZERO_BASED: u32 = 1 << 5;
/// Remote FLUSH to global visibility (`IBV_ACCESS_FLUSH_GLOBAL`; ABI 1.11,
/// [`crate::regs::CAP_FLUSH`]): on a region, the FLUSH requests of placement type
/// [`flush::GLOBAL`] it admits; on a QP, that its responder takes them.
pub const ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
/// Remote FLUSH to persistence (`IBV_ACCESS_FLUSH_PERSISTENT`; ABI 1.11,
/// [`crate::regs::CAP_FLUSH`]): as [`ACCESS_FLUSH_GLOBAL`] for placement type
/// [`flush::PERSISTENT`].
pub const ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// Both FLUSH access flags.
pub const ACCESS_FLUSH: u32 = ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT;
/// The access flags `REG_MR` takes: [`ACCESS_ALL`], [`ACCESS_MW_BIND`] and (ABI 1.11)
/// [`ACCESS_FLUSH`].
pub const ACCESS_REG_MR: u32 = ACCESS_ALL | ACCESS_MW_BIND | ACCESS_FLUSH;

/// RDMA FLUSH's placement types and selectivity levels, as `enum ibv_placement_type` and
/// `enum ibv_selectivity_level` (ABI 1.11, [`crate::regs::CAP_FLUSH`]). A FLUSH WQE
/// carries them in [`SendWqe::imm_or_inv`] as the FETH does on the wire: the placement
/// type in bits 3:0, the selectivity level in bits 5:4 ([`flush::feth`]).
pub mod flush {
    /// Placement type: global visibility (`IBV_FLUSH_GLOBAL`).
    pub const GLOBAL: u8 = 1 << 0;
    /// Placement type: persistence (`IBV_FLUSH_PERSISTENT`).
    pub const PERSISTENT: u8 = 1 << 1;
    /// Selectivity level: the range the RETH names (`IBV_FLUSH_RANGE`).
    pub const RANGE: u8 = 0;
    /// Selectivity level: the whole region the R_Key names (`IBV_FLUSH_MR`).
    pub const MR: u8 = 1;
    /// The FETH word of placement type `ptype` and selectivity level `level`: bits 3:0
    /// and 5:4, as IBTA 1.5 and rxe's `feth_init` lay them out.
    pub const fn feth(ptype: u8, level: u8) -> u32 {
        (ptype as u32 & 0xF) | ((level as u32 & 0x3) << 4)
    }
    /// The placement type of FETH word `bits`.
    pub const fn ptype(bits: u32) -> u8 {
        (bits & 0xF) as u8
    }
    /// The selectivity level of FETH word `bits`.
    pub const fn level(bits: u32) -> u8 {
        ((bits >> 4) & 0x3) as u8
    }
}

/// Queue pair type: reliable connected (`IBV_QPT_RC`).
pub const QPT_RC: u8 = 2;
/// Queue pair type: unreliable connected (`IBV_QPT_UC`; ABI 1.6, [`crate::regs::CAP_UC`]).
pub const QPT_UC: u8 = 3;

/// The number of the first QP a function creates after a reset; later ones count up from
/// it, skipping numbers in use. 0 and 1 are InfiniBand's special QPs.
pub const FIRST_QPN: u32 = 0x11;

/// QP states, numbered as `enum ibv_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum QpState {
    /// Reset.
    Reset = 0,
    /// Initialized.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained.
    Sqd = 4,
    /// Send queue error.
    Sqe = 5,
    /// Error.
    Err = 6,
}

impl QpState {
    /// The state with this number.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }
}

/// `ModifyQp::attr_mask` bits, as `enum ibv_qp_attr_mask`.
pub mod attr {
    /// `qp_state`.
    pub const STATE: u32 = 1 << 0;
    /// `cur_qp_state`.
    pub const CUR_STATE: u32 = 1 << 1;
    /// `en_sqd_async_notify`.
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    /// `qp_access_flags`.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `pkey_index`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `port_num`.
    pub const PORT: u32 = 1 << 5;
    /// `qkey`.
    pub const QKEY: u32 = 1 << 6;
    /// The address vector (`dgid`, `sgid_index`, `hop_limit`, `traffic_class`, `flow_label`).
    pub const AV: u32 = 1 << 7;
    /// `path_mtu`.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `timeout`.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `retry_cnt`.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `rnr_retry`.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `rq_psn`.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `sq_psn`.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `dest_qp_num`.
    pub const DEST_QPN: u32 = 1 << 20;
}

/// Path MTU codes, as `enum ibv_mtu`: the one table of codes and bytes that device,
/// driver, tools and libibverbs convert with ([`mtu_bytes`], [`mtu_code`]).
pub mod mtu {
    /// 256 bytes.
    pub const MTU_256: u8 = 1;
    /// 512 bytes.
    pub const MTU_512: u8 = 2;
    /// 1024 bytes.
    pub const MTU_1024: u8 = 3;
    /// 2048 bytes.
    pub const MTU_2048: u8 = 4;
    /// 4096 bytes.
    pub const MTU_4096: u8 = 5;
    /// The path MTUs in bytes, smallest first, as the tools' `--mtu` takes them.
    pub const BYTES: [u32; 5] = [256, 512, 1024, 2048, 4096];
}

/// The bytes of path MTU code `code` (`enum ibv_mtu`: 1 = 256 bytes ... 5 = 4096 bytes).
pub const fn mtu_bytes(code: u8) -> Option<u32> {
    match code {
        mtu::MTU_256..=mtu::MTU_4096 => Some(128 << code),
        _ => None,
    }
}

/// The path MTU code of `bytes` (256, 512, 1024, 2048 or 4096; none for other sizes).
pub const fn mtu_code(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(mtu::MTU_256),
        512 => Some(mtu::MTU_512),
        1024 => Some(mtu::MTU_1024),
        2048 => Some(mtu::MTU_2048),
        4096 => Some(mtu::MTU_4096),
        _ => None,
    }
}

/// Work-request opcodes, as `enum ibv_wr_opcode`.
pub mod wr {
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_WITH_IMM: u8 = 1;
    /// SEND.
    pub const SEND: u8 = 2;
    /// SEND with immediate.
    pub const SEND_WITH_IMM: u8 = 3;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 4;
    /// Atomic compare and swap.
    pub const ATOMIC_CMP_AND_SWP: u8 = 5;
    /// Atomic fetch and add.
    pub const ATOMIC_FETCH_AND_ADD: u8 = 6;
    /// Local invalidate.
    pub const LOCAL_INV: u8 = 7;
    /// Bind a memory window: the WQE is a [`crate::mw::BindMwWqe`] (ABI 1.6; before, it
    /// completed with `MW_BIND_ERR`).
    pub const BIND_MW: u8 = 8;
    /// SEND with invalidate.
    pub const SEND_WITH_INV: u8 = 9;
    /// Fast-register memory under a fast-registration MR's key
    /// (`crate::fast_reg::FastRegWqe`, ABI 1.8; the kernel's `IB_WR_REG_MR`).
    pub const REG_MR: u8 = 10;
    /// RDMA FLUSH (`IBV_WR_FLUSH`; ABI 1.11, [`crate::regs::CAP_FLUSH`]): `remote_addr`,
    /// `rkey`, the length in `compare_add`, the FETH word
    /// ([`super::flush::feth`]) in `imm_or_inv`; no SGEs, no inline data.
    pub const FLUSH: u8 = 14;
    /// RDMA ATOMIC WRITE (`IBV_WR_ATOMIC_WRITE`; ABI 1.11,
    /// [`crate::regs::CAP_ATOMIC_WRITE`]): the 8 bytes of `compare_add`, in memory order
    /// (as `ibv_wr_atomic_write` takes them), to the 8-aligned `remote_addr` under
    /// `rkey`; no SGEs, no inline data.
    pub const ATOMIC_WRITE: u8 = 15;
}

/// Send flags in [`SendWqe::flags`], as `enum ibv_send_flags`.
pub mod send_flags {
    /// Wait for outstanding READs and atomics before starting this WR.
    pub const FENCE: u8 = 1 << 0;
    /// Report a completion for this WR.
    pub const SIGNALED: u8 = 1 << 1;
    /// Set the solicited-event bit on the message.
    pub const SOLICITED: u8 = 1 << 2;
    /// The data is inline in the WQE instead of in SGEs.
    pub const INLINE: u8 = 1 << 3;
}

/// Completion opcodes, as `enum ibv_wc_opcode`.
pub mod wc {
    /// SEND completed.
    pub const SEND: u8 = 0;
    /// RDMA WRITE completed.
    pub const RDMA_WRITE: u8 = 1;
    /// RDMA READ completed.
    pub const RDMA_READ: u8 = 2;
    /// Compare and swap completed.
    pub const COMP_SWAP: u8 = 3;
    /// Fetch and add completed.
    pub const FETCH_ADD: u8 = 4;
    /// Bind MW completed.
    pub const BIND_MW: u8 = 5;
    /// Local invalidate completed.
    pub const LOCAL_INV: u8 = 6;
    /// A memory registration completed: a control queue's, or a REG_MR work request's (as
    /// the kernel's `IB_WC_REG_MR`).
    pub const REG_MR: u8 = 8;
    /// RDMA ATOMIC WRITE completed (`IBV_WC_ATOMIC_WRITE`; ABI 1.11).
    pub const ATOMIC_WRITE: u8 = 9;
    /// RDMA FLUSH completed (ABI 1.11). ibverbs numbers it 8 (`IBV_WC_FLUSH`), which
    /// rnic gave [`REG_MR`] first: drivers translate this one.
    pub const FLUSH: u8 = 14;
    /// A receive completed (SEND in).
    pub const RECV: u8 = 128;
    /// A receive consumed by an RDMA WRITE with immediate.
    pub const RECV_RDMA_WITH_IMM: u8 = 129;
}

/// Completion flags in [`Cqe::wc_flags`], as `enum ibv_wc_flags`.
pub mod wc_flags {
    /// The receive buffer starts with a GRH (UD receives, [`crate::ud`]).
    pub const GRH: u8 = 1 << 0;
    /// `imm_data` is valid.
    pub const WITH_IMM: u8 = 1 << 1;
    /// `invalidated_rkey` is valid.
    pub const WITH_INV: u8 = 1 << 3;
    /// The message carried the solicited-event bit (not an ibverbs flag; rnic reports it).
    pub const SOLICITED: u8 = 1 << 7;
}

/// Completion statuses, as `enum ibv_wc_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WcStatus {
    /// Success.
    Success = 0,
    /// Local length error: a message longer than the receive buffer, or SGEs beyond limits.
    LocLenErr = 1,
    /// Local QP operation error: a WQE the QP cannot execute.
    LocQpOpErr = 2,
    /// Local protection error: an lkey that is invalid, of another PD, lacks the access,
    /// or does not cover the SGE.
    LocProtErr = 4,
    /// Flushed: the QP entered the error state before this WR ran.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Bad response: an unexpected response opcode.
    BadRespErr = 7,
    /// Local access error: a response could not be written locally.
    LocAccessErr = 8,
    /// Remote invalid request: the responder could not execute the request (opcode not
    /// allowed, length too large, bad invalidate).
    RemInvReqErr = 9,
    /// Remote access error: the rkey is invalid, of another PD, lacks the access, or does
    /// not cover the range.
    RemAccessErr = 10,
    /// Remote operation error: the responder failed (for example it could not write a
    /// completion or a receive buffer).
    RemOpErr = 11,
    /// Transport retries exhausted.
    RetryExcErr = 12,
    /// RNR retries exhausted.
    RnrRetryExcErr = 13,
    /// Fatal error.
    FatalErr = 19,
    /// General error.
    GeneralErr = 21,
}

impl WcStatus {
    /// The status with this number.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Success,
            1 => Self::LocLenErr,
            2 => Self::LocQpOpErr,
            4 => Self::LocProtErr,
            5 => Self::WrFlushErr,
            6 => Self::MwBindErr,
            7 => Self::BadRespErr,
            8 => Self::LocAccessErr,
            9 => Self::RemInvReqErr,
            10 => Self::RemAccessErr,
            11 => Self::RemOpErr,
            12 => Self::RetryExcErr,
            13 => Self::RnrRetryExcErr,
            19 => Self::FatalErr,
            21 => Self::GeneralErr,
            _ => return None,
        })
    }

    /// The ibverbs name, as `ibv_wc_status_str` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::LocLenErr => "local length error",
            Self::LocQpOpErr => "local QP operation error",
            Self::LocProtErr => "local protection error",
            Self::WrFlushErr => "Work Request Flushed Error",
            Self::MwBindErr => "memory management operation error",
            Self::BadRespErr => "bad response error",
            Self::LocAccessErr => "local access error",
            Self::RemInvReqErr => "remote invalid request error",
            Self::RemAccessErr => "remote access error",
            Self::RemOpErr => "remote operation error",
            Self::RetryExcErr => "transport retry counter exceeded",
            Self::RnrRetryExcErr => "RNR retry counter exceeded",
            Self::FatalErr => "fatal error",
            Self::GeneralErr => "general error",
        }
    }
}

/// Event types in [`Eqe::event_type`]: the ibverbs async events (`enum ibv_event_type`),
/// plus [`event::EVENT_COMPLETION`].
pub mod event {
    /// A CQ overran or could not be written; the CQ is in error.
    pub const CQ_ERR: u8 = 0;
    /// A QP hit an error that moved it to the error state (`IBV_EVENT_QP_FATAL`).
    pub const QP_FATAL: u8 = 1;
    /// A QP received a request it could not execute (`IBV_EVENT_QP_REQ_ERR`).
    pub const QP_REQ_ERR: u8 = 2;
    /// A QP was denied a remote access (`IBV_EVENT_QP_ACCESS_ERR`).
    pub const QP_ACCESS_ERR: u8 = 3;
    /// A QP in RTR received its first packet (`IBV_EVENT_COMM_EST`).
    pub const COMM_EST: u8 = 4;
    /// A QP in SQD has no more outstanding send work (`IBV_EVENT_SQ_DRAINED`).
    pub const SQ_DRAINED: u8 = 5;
    /// An SRQ's WQEs fell below its limit ([`crate::srq`]); [`Eqe::object`](crate::verbs::Eqe::object) is the SRQ
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    pub const SRQ_LIMIT_REACHED: u8 = 15;
    /// rnic-specific: QP [`Eqe::object`](crate::verbs::Eqe::object) left this function (`MIGRATE_QP`, see
    /// [`crate::migration`]); its number now means nothing here, and what moved with it
    /// (its PD and MRs, CQs that moved) is gone too.
    pub const QP_DEPARTED: u8 = 0x40;
    /// rnic-specific: QP [`Eqe::object`](crate::verbs::Eqe::object) arrived on this function (`MIGRATE_QP`); the
    /// driver learns its new numbering with `ADOPT_QP`.
    pub const QP_ARRIVED: u8 = 0x41;
    /// A completion event: an armed CQ ([`Eqe::object`](crate::verbs::Eqe::object)) received a completion.
    pub const EVENT_COMPLETION: u8 = 0x80;
}

/// Where a ring or a memory region lives: the addresses of its pages in driver memory,
/// as a flat array (`levels` 0) or as a page table (`levels` 1 to [`MAX_PAGE_LEVELS`],
/// ABI 1.6, [`crate::regs::CAP_PAGE_TABLES`]).
///
/// A page table is made of 4 KiB table pages of [`PAGE_TABLE_ENTRIES`] little-endian u64
/// entries. `addr` is the top table page; an entry of a level-*l* table page names a
/// level-(*l*−1) table page, and an entry of a level-1 table page names a page of the
/// buffer. Page `i` of the buffer is entry `i % 512` of level-1 table `i / 512`, level-1
/// table `j` is entry `j % 512` of level-2 table `j / 512`, and so on: each level counts
/// its table pages from 0 in the order of the level above. Only the entries that `count`
/// needs are read; the rest of a table page is ignored. No table page need follow any
/// other in device memory, so a list of any size needs no contiguous memory.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PageList {
    /// `levels` 0: device address of an array of `count` little-endian u64 page
    /// addresses, contiguous in device memory, of any alignment. Otherwise: device address
    /// of the top table page, 4 KiB aligned.
    pub addr: u64,
    /// Number of pages of the buffer, 1 to [`MAX_PAGE_LIST`], at most
    /// [`page_table_reach`]`(levels)`.
    pub count: u32,
    /// log2 of the page size; 12 (4 KiB) is the only size rnic 1.x accepts. (Before ABI
    /// 1.6 this was a u32 with `levels` and `reserved` its upper bytes, which had to be 0:
    /// a flat list has the same bytes as before.)
    pub page_shift: u8,
    /// Levels of table pages between `addr` and the pages: 0 (a flat array) to
    /// [`MAX_PAGE_LEVELS`].
    pub levels: u8,
    /// Must be 0.
    pub reserved: u16,
}

/// log2 of the only page size of a [`PageList`]: 4 KiB ([`crate::PAGE_SIZE`]).
pub const PAGE_SHIFT: u8 = 12;

impl PageList {
    /// A flat array of `count` 4 KiB page addresses at device address `addr`.
    pub const fn flat(addr: u64, count: u32) -> Self {
        Self {
            addr,
            count,
            page_shift: PAGE_SHIFT,
            levels: 0,
            reserved: 0,
        }
    }

    /// A page table of `levels` levels whose top table page is at device address `addr`,
    /// naming `count` 4 KiB pages.
    pub const fn table(addr: u64, count: u32, levels: u8) -> Self {
        Self {
            addr,
            count,
            page_shift: PAGE_SHIFT,
            levels,
            reserved: 0,
        }
    }
}

/// Largest number of pages one [`PageList`] may name.
pub const MAX_PAGE_LIST: u32 = 1 << 20;

/// Entries of one table page of a [`PageList`] with `levels` > 0: a 4 KiB page of u64s.
pub const PAGE_TABLE_ENTRIES: u32 = 512;

/// Deepest page table a [`PageList`] may be: three levels reach 512^3 pages, more than
/// [`MAX_PAGE_LIST`]; two reach 262144 (1 GiB).
pub const MAX_PAGE_LEVELS: u8 = 3;

/// How many pages a [`PageList`] of `levels` levels can name: 512^`levels` for a page
/// table, [`MAX_PAGE_LIST`] for a flat array (0), and never more than [`MAX_PAGE_LIST`].
pub const fn page_table_reach(levels: u8) -> u32 {
    let mut reach: u64 = 1;
    let mut l = 0;
    if levels == 0 {
        return MAX_PAGE_LIST;
    }
    while l < levels && reach < MAX_PAGE_LIST as u64 {
        reach *= PAGE_TABLE_ENTRIES as u64;
        l += 1;
    }
    if reach > MAX_PAGE_LIST as u64 {
        MAX_PAGE_LIST
    } else {
        reach as u32
    }
}

/// The fewest page-table levels (1 to [`MAX_PAGE_LEVELS`]) that name `count` pages, or
/// `None` if `count` is 0 or more than [`MAX_PAGE_LIST`].
pub const fn page_table_levels(count: u32) -> Option<u8> {
    if count == 0 || count > MAX_PAGE_LIST {
        return None;
    }
    let mut levels = 1;
    while page_table_reach(levels) < count {
        levels += 1;
    }
    Some(levels)
}

/// Table pages at level `level` (1 = the lowest) of a page table naming `count` pages:
/// one entry per page (level 1) or per table page of the level below, 512 to a page.
pub const fn page_tables_at(count: u32, level: u8) -> u32 {
    let mut n = count;
    let mut l = 0;
    while l < level {
        n = n.div_ceil(PAGE_TABLE_ENTRIES);
        l += 1;
    }
    n
}

/// Doorbell placement of a queue the device created: slot `slot` of doorbell page `page`
/// (see `crate::doorbell::slot_offset`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DoorbellSlot {
    /// Doorbell page.
    pub page: u32,
    /// Slot in the page.
    pub slot: u32,
}

/// `CREATE_EQ` request. The function's event queue: completion events of armed CQs and
/// async events go here, and its MSI-X vector fires for each batch. One per function.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateEqReq {
    /// The ring: `entries * size_of::<Eqe>()` bytes.
    pub ring: PageList,
    /// Entries: a power of two, at least 2.
    pub entries: u32,
    /// MSI-X vector to signal, or `crate::regs::NO_VECTOR`.
    pub vector: u32,
    /// Doorbell page in which the device places the EQ's consumer-index slot.
    pub doorbell_page: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `CREATE_EQ` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateEqResp {
    /// EQ number.
    pub eqn: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The consumer-index slot: the driver writes there (u32) how many entries it has
    /// consumed in all, so the device can tell a full ring from an empty one.
    pub doorbell: DoorbellSlot,
}

/// An event-queue entry (16 bytes).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Eqe {
    /// The object the event is about: a CQ number for completion and CQ events, a QP
    /// number for QP events.
    pub object: u32,
    /// Event-specific data (0 so far).
    pub data: u32,
    /// An [`event`] type.
    pub event_type: u8,
    /// Must be ignored.
    pub reserved: [u8; 6],
    /// Ownership phase bit (bit 0), written last.
    pub owner: u8,
}

/// A request that names one object by number (DESTROY_*, DEALLOC_PD, DEREG_MR, QUERY_QP).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ObjectReq {
    /// The object's number (for DEREG_MR, its lkey).
    pub handle: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// A response that returns a created object's number (ALLOC_PD).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ObjectResp {
    /// The object's number.
    pub handle: u32,
    /// Must be ignored.
    pub reserved: u32,
}

/// `REG_MR` request: register `length` bytes starting at `iova` for `access`.
///
/// Byte `iova` maps to byte `iova % page size` of the first page of `pages`; the pages
/// must cover `iova % page size + length` bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegMrReq {
    /// Protection domain.
    pub pdn: u32,
    /// `ACCESS_*` flags. Remote write or atomic access requires local write (as ibverbs).
    pub access: u32,
    /// The address the region is known by in work requests and remote keys.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// The physical pages, in order.
    pub pages: PageList,
}

/// `REG_MR` response. The key's low 8 bits differ on each registration that reuses the
/// same MR slot, so a stale key never matches a new registration.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegMrResp {
    /// Local key.
    pub lkey: u32,
    /// Remote key (equal to the lkey in rnic).
    pub rkey: u32,
}

/// `CREATE_CQ` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateCqReq {
    /// The ring: `entries * size_of::<Cqe>()` bytes.
    pub ring: PageList,
    /// Entries: a power of two, at least 2.
    pub entries: u32,
    /// Doorbell page for the CQ's slot.
    pub doorbell_page: u32,
}

/// `RESIZE_CQ` request (ABI 1.10, [`crate::regs::CAP_RESIZE_CQ`]): the CQ's new ring. The
/// device copies the completions the driver has not consumed (its consumer index in the
/// CQ's doorbell slot up to what the device produced) into the new ring, each at its
/// free-running index modulo the new size with the new ring's owner phase, and writes only
/// the new ring from then on. Indexes keep counting: the driver keeps its consumer index
/// and reads the new ring from it, modulo the new size. `BAD_PARAM` (syndrome `entries`)
/// for a size that is not a power of two in 2 ..= `max_cqe` or smaller than the
/// completions not consumed; `BAD_STATE` for a CQ in error (overrun).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ResizeCqReq {
    /// The new ring: `entries * size_of::<Cqe>()` bytes.
    pub ring: PageList,
    /// Its entries: a power of two, at least 2.
    pub entries: u32,
    /// The CQ.
    pub cqn: u32,
}

/// `CREATE_CQ` response.
///
/// The CQ's doorbell slot holds two u32: at +0 the consumer index (completions the driver
/// has consumed in all; the device reads it before writing a CQE and reports an overrun,
/// never overwriting an unconsumed entry), and at +4 the arm word: bits 31:1 an arm
/// sequence number the driver increments on each `req_notify_cq`, bit 0 set for "next
/// solicited completion only". The device compares the sequence with the last one it
/// acted on when it writes a CQE, and posts a completion event when armed.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateCqResp {
    /// CQ number.
    pub cqn: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The CQ's doorbell slot.
    pub doorbell: DoorbellSlot,
}

/// A completion-queue entry (32 bytes), the device's `ibv_wc`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Cqe {
    /// The work request's ID.
    pub wr_id: u64,
    /// Bytes transferred (receives, READs, atomics: 8).
    pub byte_len: u32,
    /// Immediate data (as on the wire, like ibverbs' `__be32`) or the invalidated rkey.
    pub imm_or_inv: u32,
    /// The local QP.
    pub qp_num: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
    /// A [`wc`] opcode.
    pub opcode: u8,
    /// A [`WcStatus`].
    pub status: u8,
    /// [`wc_flags`].
    pub wc_flags: u8,
    /// Ownership phase bit (bit 0), written last.
    pub owner: u8,
    /// Device-specific detail of an error (a syndrome), 0 on success.
    pub vendor_err: u32,
}

/// `CREATE_QP` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateQpReq {
    /// Protection domain.
    pub pdn: u32,
    /// CQ for send completions.
    pub send_cqn: u32,
    /// CQ for receive completions.
    pub recv_cqn: u32,
    /// Send-queue entries: a power of two.
    pub sq_entries: u32,
    /// Receive-queue entries: a power of two.
    pub rq_entries: u32,
    /// SGEs per send WQE.
    pub max_send_sge: u32,
    /// SGEs per receive WQE.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WQE.
    pub max_inline_data: u32,
    /// Doorbell page for the QP's send and receive slots.
    pub doorbell_page: u32,
    /// [`QPT_RC`], [`QPT_UC`], `ud::QPT_UD`, `dc::QPT_DCI`, `dc::QPT_DCT` or `ud::QPT_GSI`
    /// (ABI 1.8: the function's QP 1).
    pub qp_type: u8,
    /// Non-zero: every send WR completes as if signaled (`sq_sig_all`).
    pub sq_sig_all: u8,
    /// The shared receive queue the QP takes its receives from ([`crate::srq`]), or 0
    /// for a receive queue of its own. With an SRQ, `rq_entries` and `max_recv_sge` must
    /// be 0 and `rq` empty.
    pub srqn: u16,
    /// The send ring: `sq_entries * sq_stride(max_send_sge, max_inline_data)` bytes.
    pub sq: PageList,
    /// The receive ring: `rq_entries * rq_stride(max_recv_sge)` bytes.
    pub rq: PageList,
}

/// `CREATE_QP` response. The QP starts in RESET.
///
/// Both doorbells work alike: the driver writes to the slot (u32 at +0) how many WQEs it
/// has posted to that queue in all, then sets the slot's bit in the page's `RUNG_BITMAP`,
/// then follows the notification protocol. The device reads a receive slot when a message
/// arrives; it looks at a rung receive slot only to flush receives posted while the QP is
/// in the error state, so that every posted WR gets its completion.
///
/// The device reads the send queue from RTS on. Send WQEs announced while the QP was in
/// RESET, INIT or RTR break the verbs rules (`ibv_post_send` refuses them): entering RTS
/// skips them, and they never run. In SQD the device starts no new send WQE, finishes
/// those in flight, and then posts `SQ_DRAINED`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateQpResp {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The send doorbell slot.
    pub sq_doorbell: DoorbellSlot,
    /// The receive doorbell slot.
    pub rq_doorbell: DoorbellSlot,
}

/// QP attributes, as `struct ibv_qp_attr` carries them (the fields rnic uses).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QpAttr {
    /// Target state ([`QpState`]).
    pub qp_state: u8,
    /// Current state the driver believes the QP is in (checked with [`attr::CUR_STATE`]).
    pub cur_qp_state: u8,
    /// Path MTU code ([`mtu_bytes`]).
    pub path_mtu: u8,
    /// Local ACK timeout: 4.096 µs * 2^timeout; 0 means infinite.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 means infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (0..=31) this QP advertises as responder.
    pub min_rnr_timer: u8,
    /// Outstanding READs and atomics as requester.
    pub max_rd_atomic: u8,
    /// Outstanding READs and atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Port number (1).
    pub port_num: u8,
    /// The source: an entry of the function's GID table (`crate::gid`) holding an
    /// IPv4-mapped GID (0, the function's GID, unless the driver set the table).
    pub sgid_index: u8,
    /// Hop limit (IPv4 TTL) of the packets.
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS) of the packets.
    pub traffic_class: u8,
    /// Must be 0.
    pub reserved0: [u8; 1],
    /// P_Key index (0: the default P_Key 0xFFFF).
    pub pkey_index: u16,
    /// `ACCESS_REMOTE_*` flags the QP allows incoming requests.
    pub qp_access_flags: u32,
    /// Remote QP number.
    pub dest_qp_num: u32,
    /// Expected PSN of the first incoming request.
    pub rq_psn: u32,
    /// PSN of the first outgoing request.
    pub sq_psn: u32,
    /// Flow label (unused on IPv4).
    pub flow_label: u32,
    /// Destination GID.
    pub dgid: [u8; 16],
}

/// `MODIFY_QP` request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ModifyQpReq {
    /// The QP.
    pub qpn: u32,
    /// Which attributes to apply ([`attr`] bits).
    pub attr_mask: u32,
    /// The attributes.
    pub attr: QpAttr,
}

/// `QUERY_QP` response: the QP's attributes and state.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueryQpResp {
    /// Current attributes (`qp_state` is the current state).
    pub attr: QpAttr,
    /// Send WQEs the device has taken (for diagnostics).
    pub sq_consumed: u32,
    /// Receive WQEs the device has taken.
    pub rq_consumed: u32,
}

/// A send work-queue entry's fixed part (64 bytes), followed by `num_sge` [`Sge`]s or, with
/// `send_flags::INLINE`, by `inline_len` bytes of data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SendWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// A [`wr`] opcode.
    pub opcode: u8,
    /// [`send_flags`].
    pub flags: u8,
    /// Number of SGEs.
    pub num_sge: u8,
    /// Sessions the message may leave from (bit i = session i, [`crate::session`]; ABI
    /// 1.4, formerly reserved). 0: the QP's own UDP source port.
    pub session_group: u8,
    /// Immediate data (byte for byte onto the wire), or the rkey to invalidate (SEND with
    /// invalidate, LOCAL_INV: an MR, indirect, pattern or memory window key), or the FETH
    /// word (FLUSH, ABI 1.11: [`flush::feth`]).
    pub imm_or_inv: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Bytes of inline data.
    pub inline_len: u32,
    /// Compare value (compare and swap) or addend (fetch and add); the 8 bytes to write,
    /// in memory order (ATOMIC WRITE, ABI 1.11); the length (FLUSH, ABI 1.11; the RETH
    /// carries its low 32 bits, as rxe's).
    pub compare_add: u64,
    /// Swap value (compare and swap).
    pub swap: u64,
    /// Must be 0.
    pub reserved1: [u8; 16],
}

/// A receive work-queue entry's fixed part (16 bytes), followed by `num_sge` [`Sge`]s.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RecvWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Number of SGEs.
    pub num_sge: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// A scatter/gather entry (16 bytes).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Sge {
    /// Address, in the MR's iova space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The MR's lkey.
    pub lkey: u32,
}

/// Bytes between send WQEs: the fixed part plus room for the SGEs or the inline data,
/// rounded up to a power of two.
pub const fn sq_stride(max_send_sge: u32, max_inline_data: u32) -> u32 {
    let sges = max_send_sge as u64 * 16;
    let inline = (max_inline_data as u64).div_ceil(16) * 16;
    let body = if sges > inline { sges } else { inline };
    let stride = 64 + body;
    if stride > u32::MAX as u64 {
        return u32::MAX;
    }
    (stride as u32).next_power_of_two()
}

/// Bytes between receive WQEs.
pub const fn rq_stride(max_recv_sge: u32) -> u32 {
    let stride = 16 + max_recv_sge as u64 * 16;
    if stride > u32::MAX as u64 {
        return u32::MAX;
    }
    (stride as u32).next_power_of_two()
}

/// The owner bit the device writes into entry `index` (counting from 0 over all passes) of
/// a ring of `entries` entries: 1 on the first pass, 0 on the second, and so on.
pub const fn owner_phase(index: u32, entries: u32) -> u8 {
    if entries == 0 {
        return 1;
    }
    (((index / entries) & 1) ^ 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_their_documented_sizes() {
        assert_eq!(size_of::<Eqe>(), 16);
        assert_eq!(size_of::<Cqe>(), 32);
        assert_eq!(size_of::<SendWqe>(), 64);
        assert_eq!(size_of::<RecvWqe>(), 16);
        assert_eq!(size_of::<Sge>(), 16);
        assert_eq!(size_of::<PageList>(), 16);
        assert_eq!(size_of::<QpAttr>(), 52);
    }

    #[test]
    fn a_flat_page_list_has_the_bytes_of_abi_1_5() {
        // Before 1.6, bytes 12..16 were `page_shift: u32` = 12.
        let list = PageList::flat(0x1122_3344_5566_7000, 3);
        let mut old = [0u8; 16];
        old[..8].copy_from_slice(&0x1122_3344_5566_7000u64.to_le_bytes());
        old[8..12].copy_from_slice(&3u32.to_le_bytes());
        old[12..].copy_from_slice(&12u32.to_le_bytes());
        assert_eq!(list.as_bytes(), &old[..]);
        let two = PageList::table(0x1122_3344_5566_7000, 3, 2);
        assert_eq!(&two.as_bytes()[12..], &[12, 2, 0, 0]);
    }

    #[test]
    fn page_table_geometry() {
        assert_eq!(page_table_reach(0), MAX_PAGE_LIST);
        assert_eq!(page_table_reach(1), 512);
        assert_eq!(page_table_reach(2), 262144);
        assert_eq!(page_table_reach(3), MAX_PAGE_LIST);
        assert_eq!(page_table_reach(200), MAX_PAGE_LIST);
        assert_eq!(page_table_levels(0), None);
        assert_eq!(page_table_levels(1), Some(1));
        assert_eq!(page_table_levels(512), Some(1));
        assert_eq!(page_table_levels(513), Some(2));
        assert_eq!(page_table_levels(262144), Some(2));
        assert_eq!(page_table_levels(262145), Some(3));
        assert_eq!(page_table_levels(MAX_PAGE_LIST), Some(MAX_PAGE_LEVELS));
        assert_eq!(page_table_levels(MAX_PAGE_LIST + 1), None);
        // 16 MiB: 4096 pages in 8 level-1 tables under one level-2 table.
        assert_eq!(page_tables_at(4096, 0), 4096);
        assert_eq!(page_tables_at(4096, 1), 8);
        assert_eq!(page_tables_at(4096, 2), 1);
        assert_eq!(page_tables_at(513, 1), 2);
        assert_eq!(page_tables_at(MAX_PAGE_LIST, 2), 4);
        assert_eq!(page_tables_at(MAX_PAGE_LIST, 3), 1);
    }

    #[test]
    fn strides_hold_the_largest_wqe() {
        assert_eq!(sq_stride(1, 0), 128);
        assert_eq!(sq_stride(4, 0), 128);
        assert_eq!(sq_stride(4, 200), 512);
        assert_eq!(rq_stride(1), 32);
        assert_eq!(rq_stride(4), 128);
    }

    #[test]
    fn owner_phase_flips_each_pass() {
        assert_eq!(owner_phase(0, 4), 1);
        assert_eq!(owner_phase(3, 4), 1);
        assert_eq!(owner_phase(4, 4), 0);
        assert_eq!(owner_phase(8, 4), 1);
    }

    #[test]
    fn mtu_codes_are_ibverbs() {
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
        for (i, bytes) in mtu::BYTES.into_iter().enumerate() {
            let code = mtu_code(bytes).unwrap();
            assert_eq!(usize::from(code), i + 1);
            assert_eq!(mtu_bytes(code), Some(bytes));
        }
        assert_eq!(mtu_code(4096), Some(mtu::MTU_4096));
        assert_eq!(mtu_code(1500), None);
        assert_eq!(mtu_code(0), None);
    }
}
