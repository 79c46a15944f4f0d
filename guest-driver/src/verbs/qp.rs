//! Queue pairs: creation, state changes, and posting work requests.
//!
//! The driver learns that the device is done with send-queue entries only from
//! completions, and unsignaled work requests have none of their own. So each QP keeps,
//! for every send slot, whether its WR was signaled and its `wr_id`, and polling a CQ
//! credits the QP ([`QpTrack::credit`]): completions of one send queue arrive in order, so
//! a completion frees its WR and every older outstanding one (those completed silently).

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_abi::cmd::Opcode;
use rnic_abi::fast_reg::FastRegWqe;
use rnic_abi::mw::BindMwWqe;
use rnic_abi::verbs::{
    attr, rq_stride, send_flags, sq_stride, wr, CreateQpReq, CreateQpResp, DoorbellSlot,
    ModifyQpReq, ObjectReq, QpAttr, QpState, QueryQpResp, RecvWqe, SendWqe, Sge, QPT_RC, QPT_UC,
};
use zerocopy::IntoBytes;

use super::cq::{CqInner, Wc};
use super::mr::{Pd, PdInner};
use super::ring::{self, Doorbells, Ring};
use super::{invalid, queue_full, Cq};
use crate::error::Result;
use rnic_abi::migration::{AdoptQpReq, AdoptQpResp};

/// Path MTU codes for [`super::rtr_attr`], as `enum ibv_mtu`: the ABI's one table.
pub use rnic_abi::verbs::mtu;

/// Sizes of a QP's queues, as `struct ibv_qp_cap`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests outstanding at once (rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once (rounded up to a power of two).
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
}

impl QpCaps {
    /// The capacities of a QP that takes its receives from an SRQ when `srq`: the
    /// device gets no receive queue, and the driver keeps a one-entry ring it never uses
    /// so that every QP has the same shape.
    pub(crate) fn for_srq(self, srq: bool) -> QpCaps {
        if srq {
            QpCaps {
                max_recv_wr: 1,
                max_recv_sge: 0,
                ..self
            }
        } else {
            self
        }
    }
}

/// What a send work request does, with the operands of each operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WrOpcode {
    /// SEND.
    #[default]
    Send,
    /// SEND with immediate data (byte for byte onto the wire, like ibverbs' `__be32`).
    SendWithImm(u32),
    /// SEND that invalidates this rkey at the responder.
    SendWithInv(u32),
    /// RDMA WRITE.
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data, which consumes a receive at the responder.
    RdmaWriteWithImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Atomic compare and swap of the 8 bytes at `remote_addr`; the old value lands in the
    /// (one, 8-byte) SGE.
    AtomicCmpSwp {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value expected.
        compare: u64,
        /// Value written if it matched.
        swap: u64,
    },
    /// Atomic fetch and add; the old value lands in the (one, 8-byte) SGE.
    AtomicFetchAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
    /// RDMA ATOMIC WRITE (ABI 1.11, `CAP_ATOMIC_WRITE`): `value`'s 8 bytes, in the order
    /// given, to the 8-aligned `remote_addr`, all at once. No SGEs, no inline data.
    AtomicWrite {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key (remote write access).
        rkey: u32,
        /// The bytes to write.
        value: [u8; 8],
    },
    /// RDMA FLUSH (ABI 1.11, `CAP_FLUSH`): makes what reached the remote region visible
    /// (placement type `flush::GLOBAL`) or persistent (`flush::PERSISTENT`), over the
    /// range (`flush::RANGE`) or the whole region (`flush::MR`). No SGEs, no inline data.
    Flush {
        /// Remote address.
        remote_addr: u64,
        /// Remote key (the `ACCESS_FLUSH_*` flags of the placement type).
        rkey: u32,
        /// Bytes of the range (the wire carries the low 32 bits).
        length: u64,
        /// Placement type ([`rnic_abi::verbs::flush`]).
        ptype: u8,
        /// Selectivity level ([`rnic_abi::verbs::flush`]).
        level: u8,
    },
    /// Invalidate this local key.
    LocalInv(u32),
    /// Bind a memory window ([`rnic_abi::mw::BindMwWqe`]; [`super::MemoryWindow::bind_opcode`]
    /// and [`Qp::post_bind_mw`] make it). No SGEs, no inline data.
    BindMw {
        /// A key of the window (its index names it).
        mw_key: u32,
        /// The window's key after the bind: the same index, any tag.
        new_key: u32,
        /// The region to bind to (ignored by a type 1 unbind, `length` 0).
        mr_lkey: u32,
        /// Where the window starts, in the region's iova space.
        addr: u64,
        /// Bytes of the window; 0 unbinds a type 1 window.
        length: u64,
        /// Its rights ([`rnic_abi::mw::MW_ACCESS_ALL`] bits).
        access: u32,
    },
    /// Register memory under a fast-registration MR's key ([`rnic_abi::fast_reg::FastRegWqe`];
    /// [`super::FastRegMr::reg_opcode`] and [`Qp::post_reg_mr`] make it). No SGEs, no
    /// inline data; RC and UC QPs only.
    RegMr {
        /// The key to register under: the MR's index, any tag.
        key: u32,
        /// The region's address in work requests and at remote peers.
        iova: u64,
        /// Bytes of the region.
        length: u64,
        /// `ACCESS_*` flags.
        access: u32,
        /// Device address of the page list (little-endian u64 page addresses).
        page_list: u64,
        /// Pages in the list.
        page_count: u32,
    },
}

impl WrOpcode {
    /// Whether the operation sends data from the requester, which may then be inline.
    pub fn carries_data_out(&self) -> bool {
        matches!(
            self,
            Self::Send
                | Self::SendWithImm(_)
                | Self::SendWithInv(_)
                | Self::RdmaWrite { .. }
                | Self::RdmaWriteWithImm { .. }
        )
    }
}

/// A send work request, as `struct ibv_send_wr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Local memory: where data comes from (or, for READs and atomics, goes to).
    pub sges: Vec<Sge>,
    /// Data to send from the WQE itself instead of `sges` (which must then be empty).
    pub inline: Option<Vec<u8>>,
    /// Report a completion (`IBV_SEND_SIGNALED`); always so with `sq_sig_all`.
    pub signaled: bool,
    /// Wait for earlier READs and atomics first (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Set the solicited-event bit (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

/// A receive work request, as `struct ibv_recv_wr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming message goes.
    pub sges: Vec<Sge>,
}

/// Encodes a send WQE: the fixed part, then the SGEs or the inline data. Checks the WR
/// against the QP's `caps`.
pub(crate) fn encode_send_wqe(wr: &SendWr, caps: &QpCaps) -> Result<Vec<u8>> {
    let mut flags = 0;
    if wr.signaled {
        flags |= send_flags::SIGNALED;
    }
    if wr.fence {
        flags |= send_flags::FENCE;
    }
    if wr.solicited {
        flags |= send_flags::SOLICITED;
    }
    let mut w = SendWqe {
        wr_id: wr.wr_id,
        ..SendWqe::default()
    };
    match wr.opcode {
        WrOpcode::Send => w.opcode = wr::SEND,
        WrOpcode::SendWithImm(imm) => (w.opcode, w.imm_or_inv) = (wr::SEND_WITH_IMM, imm),
        WrOpcode::SendWithInv(rkey) => (w.opcode, w.imm_or_inv) = (wr::SEND_WITH_INV, rkey),
        WrOpcode::RdmaWrite { remote_addr, rkey } => {
            (w.opcode, w.remote_addr, w.rkey) = (wr::RDMA_WRITE, remote_addr, rkey)
        }
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => {
            (w.opcode, w.remote_addr, w.rkey, w.imm_or_inv) =
                (wr::RDMA_WRITE_WITH_IMM, remote_addr, rkey, imm)
        }
        WrOpcode::RdmaRead { remote_addr, rkey } => {
            (w.opcode, w.remote_addr, w.rkey) = (wr::RDMA_READ, remote_addr, rkey)
        }
        WrOpcode::AtomicCmpSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            (w.opcode, w.remote_addr, w.rkey, w.compare_add, w.swap) =
                (wr::ATOMIC_CMP_AND_SWP, remote_addr, rkey, compare, swap)
        }
        WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            (w.opcode, w.remote_addr, w.rkey, w.compare_add) =
                (wr::ATOMIC_FETCH_AND_ADD, remote_addr, rkey, add)
        }
        WrOpcode::AtomicWrite {
            remote_addr,
            rkey,
            value,
        } => {
            no_data(wr, "an ATOMIC WRITE")?;
            (w.opcode, w.remote_addr, w.rkey, w.compare_add) = (
                wr::ATOMIC_WRITE,
                remote_addr,
                rkey,
                u64::from_le_bytes(value),
            )
        }
        WrOpcode::Flush {
            remote_addr,
            rkey,
            length,
            ptype,
            level,
        } => {
            no_data(wr, "a FLUSH")?;
            (w.opcode, w.remote_addr, w.rkey, w.compare_add, w.imm_or_inv) = (
                wr::FLUSH,
                remote_addr,
                rkey,
                length,
                rnic_abi::verbs::flush::feth(ptype, level),
            )
        }
        WrOpcode::LocalInv(key) => (w.opcode, w.imm_or_inv) = (wr::LOCAL_INV, key),
        WrOpcode::BindMw {
            mw_key,
            new_key,
            mr_lkey,
            addr,
            length,
            access,
        } => {
            no_data(wr, "a memory-window bind")?;
            let b = BindMwWqe {
                wr_id: wr.wr_id,
                opcode: wr::BIND_MW,
                flags,
                mw_key,
                addr,
                new_key,
                mr_lkey,
                length,
                access,
                ..BindMwWqe::default()
            };
            return Ok(b.as_bytes().to_vec());
        }
        WrOpcode::RegMr {
            key,
            iova,
            length,
            access,
            page_list,
            page_count,
        } => {
            no_data(wr, "a REG_MR")?;
            let r = FastRegWqe {
                wr_id: wr.wr_id,
                opcode: wr::REG_MR,
                flags,
                page_shift: rnic_abi::PAGE_SIZE.trailing_zeros() as u8,
                key,
                iova,
                access,
                page_count,
                page_list,
                length,
                ..FastRegWqe::default()
            };
            return Ok(r.as_bytes().to_vec());
        }
    }
    let mut out = Vec::with_capacity(size_of::<SendWqe>());
    match &wr.inline {
        Some(data) => {
            if !wr.opcode.carries_data_out() {
                return Err(invalid(format!(
                    "post_send: {:?} cannot carry inline data",
                    wr.opcode
                )));
            }
            if !wr.sges.is_empty() {
                return Err(invalid(
                    "post_send: a work request has either inline data or SGEs, not both".into(),
                ));
            }
            if data.len() > caps.max_inline_data as usize {
                return Err(invalid(format!(
                    "post_send: {} bytes of inline data, the QP takes {}",
                    data.len(),
                    caps.max_inline_data
                )));
            }
            w.flags = flags | send_flags::INLINE;
            w.inline_len = data.len() as u32;
            out.extend_from_slice(w.as_bytes());
            out.extend_from_slice(data);
        }
        None => {
            if wr.sges.len() > caps.max_send_sge as usize {
                return Err(invalid(format!(
                    "post_send: {} SGEs, the QP takes {}",
                    wr.sges.len(),
                    caps.max_send_sge
                )));
            }
            w.flags = flags;
            // max_send_sge fits a u8: checked when the QP was created.
            w.num_sge = wr.sges.len() as u8;
            out.extend_from_slice(w.as_bytes());
            out.extend(wr.sges.iter().flat_map(|s| s.as_bytes().iter().copied()));
        }
    }
    Ok(out)
}

/// Encodes a receive WQE: the fixed part, then the SGEs.
pub(crate) fn encode_recv_wqe(wr: &RecvWr, caps: &QpCaps) -> Result<Vec<u8>> {
    if wr.sges.len() > caps.max_recv_sge as usize {
        return Err(invalid(format!(
            "post_recv: {} SGEs, the QP takes {}",
            wr.sges.len(),
            caps.max_recv_sge
        )));
    }
    let w = RecvWqe {
        wr_id: wr.wr_id,
        num_sge: wr.sges.len() as u32,
        reserved: 0,
    };
    let mut out = Vec::with_capacity(size_of::<RecvWqe>() + 16 * wr.sges.len());
    out.extend_from_slice(w.as_bytes());
    out.extend(wr.sges.iter().flat_map(|s| s.as_bytes().iter().copied()));
    Ok(out)
}

/// Writes encoded receive WQEs into `ring` after the `rq.posted` ones and rings its
/// doorbell `slot`: all of them, or none if they do not fit (the error names `what`).
pub(super) fn post_recv_wqes(
    ctx: &super::ContextInner,
    (ring, slot): (&Ring, DoorbellSlot),
    rq: &mut RqState,
    wqes: &[Vec<u8>],
    what: impl Fn() -> String,
) -> Result<()> {
    if (wqes.len() as u64) > u64::from(rq.free()) {
        return Err(queue_full(format!(
            "{}: {} work requests, {} free receive slots of {}",
            what(),
            wqes.len(),
            rq.free(),
            rq.entries
        )));
    }
    if wqes.is_empty() {
        return Ok(());
    }
    for wqe in wqes {
        ring.buf().write(ring.offset(rq.posted), wqe);
        rq.posted = rq.posted.wrapping_add(1);
    }
    // Rung under the lock, as the send doorbell. The device reads the receive slot when a
    // message arrives; the bit and kick matter for a QP in the error state, whose new
    // receives the device must flush.
    ctx.doorbells()
        .ring_queue(ctx.transport(), slot, rq.posted)?;
    Ok(())
}

/// What the driver remembers of a posted send WR until it completes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendSlot {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Whether it completes with a completion of its own (signaled or `sq_sig_all`).
    pub signaled: bool,
}

/// Send-queue accounting: which ring entries hold WRs the device may still read. Shared
/// with the rdma-core provider (`rnic-provider`), whose send queues follow the same rules.
#[derive(Debug)]
pub struct SqState {
    /// WQEs posted in all (free-running): the send doorbell value.
    posted: u32,
    /// WQEs known complete in all (free-running).
    completed: u32,
    /// One per ring entry: the WR last posted there.
    slots: Vec<SendSlot>,
}

impl SqState {
    /// The accounting of an empty send queue of `entries` entries.
    pub fn new(entries: u32) -> Self {
        Self {
            posted: 0,
            completed: 0,
            slots: vec![SendSlot::default(); entries as usize],
        }
    }

    /// Entries of the ring.
    pub fn entries(&self) -> u32 {
        self.slots.len() as u32
    }

    /// WQEs posted in all (free-running): the send doorbell value.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Entries free for new WQEs.
    pub fn free(&self) -> u32 {
        self.entries() - self.posted.wrapping_sub(self.completed)
    }

    /// Records a WR posted at the next entry (the caller checked [`SqState::free`]).
    pub fn push(&mut self, slot: SendSlot) {
        let n = self.entries();
        self.slots[(self.posted % n) as usize] = slot;
        self.posted = self.posted.wrapping_add(1);
    }

    /// Accounts for a send completion of `wr_id`; returns whether it matched an
    /// outstanding WR.
    ///
    /// A completion is for the oldest outstanding WR that could have produced it: a
    /// successful completion only comes from a signaled WR, an error or flush completion
    /// from any WR. The WRs before it completed silently (unsignaled successes), and none
    /// can lie beyond the oldest outstanding signaled WR, whose own completion would have
    /// come first. So the search stops there, and the completion frees everything up to
    /// and including the WR it matched. If `wr_id`s repeat, a match may be an older WR
    /// than the real one: that frees fewer slots than it could, never more, so the device
    /// never finds a WQE overwritten before it read it.
    pub fn complete(&mut self, wr_id: u64, success: bool) -> bool {
        let n = self.entries();
        let outstanding = self.posted.wrapping_sub(self.completed);
        for i in 0..outstanding {
            let s = self.slots[(self.completed.wrapping_add(i) % n) as usize];
            if s.wr_id == wr_id && (s.signaled || !success) {
                self.completed = self.completed.wrapping_add(i + 1);
                return true;
            }
            if s.signaled {
                break;
            }
        }
        false
    }

    /// Forgets every WR (the QP went back to RESET: the device restarts its counts).
    pub fn reset(&mut self) {
        self.posted = 0;
        self.completed = 0;
        self.slots.fill(SendSlot::default());
    }
}

/// Receive-queue accounting: every receive WQE completes with a completion of its own, in
/// order, so counts suffice. Shared with the rdma-core provider, as [`SqState`].
#[derive(Debug, Default)]
pub struct RqState {
    pub(super) posted: u32,
    pub(super) completed: u32,
    pub(super) entries: u32,
}

impl RqState {
    /// The accounting of an empty receive queue of `entries` entries.
    pub fn new(entries: u32) -> Self {
        Self {
            entries,
            ..Self::default()
        }
    }

    /// WQEs posted in all (free-running): the receive doorbell value.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Records a WQE posted at the next entry (the caller checked [`RqState::free`]).
    pub fn push(&mut self) {
        self.posted = self.posted.wrapping_add(1);
    }

    /// The queue has `entries` entries from now on (an SRQ moved to a ring of another
    /// size with its WQEs at their indexes: the counts stay).
    pub fn set_entries(&mut self, entries: u32) {
        self.entries = entries;
    }

    /// Forgets every WQE (the QP went back to RESET).
    pub fn reset(&mut self) {
        self.posted = 0;
        self.completed = 0;
    }

    /// Entries free for new WQEs (none while an SRQ shrunk below its receives not
    /// completed yet: the device took some, which free their entries as they complete).
    pub fn free(&self) -> u32 {
        self.entries
            .saturating_sub(self.posted.wrapping_sub(self.completed))
    }

    /// Accounts for a receive completion; returns whether a WQE was outstanding.
    pub fn complete(&mut self) -> bool {
        if self.completed == self.posted {
            // A completion left in the CQ from before a reset: nothing to free.
            return false;
        }
        self.completed = self.completed.wrapping_add(1);
        true
    }
}

/// A QP's accounting, shared with the CQs that credit it.
#[derive(Debug)]
pub(crate) struct QpTrack {
    qpn: u32,
    /// The CQ numbers, which change when the QP follows a migration ([`Qp::adopt`]).
    send_cqn: AtomicU32,
    recv_cqn: AtomicU32,
    sq_sig_all: bool,
    sq: Mutex<SqState>,
    /// The QP's receive accounting, or its SRQ's, which all QPs on it share.
    rq: Arc<Mutex<RqState>>,
}

impl QpTrack {
    /// The accounting of a send queue of `entries` entries whose completions go to CQ
    /// `cqn` under `id` (a shared send queue).
    pub(crate) fn sending(id: u32, cqn: u32, entries: u32) -> Self {
        Self {
            qpn: id,
            send_cqn: AtomicU32::new(cqn),
            recv_cqn: AtomicU32::new(u32::MAX),
            sq_sig_all: false,
            sq: Mutex::new(SqState::new(entries)),
            rq: Default::default(),
        }
    }

    pub(crate) fn sq(&self) -> MutexGuard<'_, SqState> {
        self.sq.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rq(&self) -> MutexGuard<'_, RqState> {
        self.rq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a completion read from CQ `cqn` is for the send queue. With separate CQs
    /// the CQ says it; with one CQ for both queues, the opcode's receive bit does.
    fn is_send(&self, cqn: u32, wc: &Wc) -> Option<bool> {
        let send = self.send_cqn.load(Ordering::Acquire);
        let recv = self.recv_cqn.load(Ordering::Acquire);
        match (cqn == send, cqn == recv) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            (true, true) => Some(!wc.is_recv()),
            (false, false) => None,
        }
    }

    /// The accounting of a queue whose every WQE completes on CQ `cqn`, in order (a
    /// control queue): a receive-style count under `id`.
    pub(crate) fn counting(id: u32, cqn: u32, count: Arc<Mutex<RqState>>) -> Self {
        Self {
            qpn: id,
            send_cqn: AtomicU32::new(u32::MAX),
            recv_cqn: AtomicU32::new(cqn),
            sq_sig_all: false,
            sq: Mutex::new(SqState::new(1)),
            rq: count,
        }
    }

    /// Frees the queue entries that a completion read from CQ `cqn` says are done.
    pub(crate) fn credit(&self, cqn: u32, wc: &Wc) {
        let matched = match self.is_send(cqn, wc) {
            Some(true) => self.sq().complete(wc.wr_id, wc.is_success()),
            Some(false) => self.rq().complete(),
            None => return,
        };
        if !matched {
            log::debug!(
                "QP {:#x}: a completion (wr_id {:#x}, {}) matches no outstanding work request",
                self.qpn,
                wc.wr_id,
                wc.status_str()
            );
        }
    }
}

/// A queue pair: reliable or unreliable connected, unreliable datagram, or a DC
/// initiator or target. Destroyed on drop.
pub struct Qp {
    pd: Arc<PdInner>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    qpn: u32,
    /// `QPT_RC`, `QPT_UC`, `ud::QPT_UD`, `dc::QPT_DCI`, `dc::QPT_DCT` or `ud::QPT_GSI`.
    qp_type: u8,
    caps: QpCaps,
    sq_slot: DoorbellSlot,
    rq_slot: DoorbellSlot,
    /// Both freed only after DESTROY_QP succeeded.
    sq_ring: ManuallyDrop<Ring>,
    rq_ring: ManuallyDrop<Ring>,
    track: Arc<QpTrack>,
    /// The SRQ the QP takes its receives from (kept alive while the QP is).
    srq: Option<Arc<super::srq::SrqInner>>,
    /// The BAR offset of the send queue's MMIO window, once it has one.
    pub(super) sq_window: std::sync::OnceLock<u64>,
    /// The state the last successful modify set (or QUERY_QP last reported), to refuse
    /// posts in states that take none.
    state: AtomicU8,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn)
            .field("pdn", &self.pd.pdn())
            .field("send_cqn", &self.send_cq.bind.num())
            .field("recv_cqn", &self.recv_cq.bind.num())
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl Pd {
    /// Creates an RC queue pair, in RESET, whose send completions go to `send_cq` and
    /// receive completions to `recv_cq` (they may be the same CQ). Queue depths are
    /// rounded up to powers of two; [`Qp::caps`] says what the QP got. With `sq_sig_all`
    /// every send WR completes as if signaled.
    pub fn create_qp(
        &self,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sq_sig_all: bool,
    ) -> Result<Qp> {
        self.create_qp_on(send_cq, recv_cq, caps, sq_sig_all, None, QPT_RC)
    }

    /// [`Pd::create_qp`] for a QP that takes its receives from `srq` (which must be of
    /// this PD) instead of a receive queue of its own: `caps.max_recv_wr` and
    /// `max_recv_sge` are ignored, and receives are posted with [`super::Srq::post_recv`].
    pub fn create_qp_with_srq(
        &self,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sq_sig_all: bool,
        srq: &super::Srq,
    ) -> Result<Qp> {
        self.create_qp_of_type(QPT_RC, send_cq, recv_cq, caps, sq_sig_all, Some(srq))
    }

    /// Creates an unreliable-connected QP, in RESET, as [`Pd::create_qp`] makes an RC
    /// one. Connect it with [`super::uc_rtr_attr`] and [`super::uc_rts_attr`]. It sends SEND and RDMA
    /// WRITE (with and without immediate), and posts LOCAL_INV and memory-window binds;
    /// a send completes once its last packet left, and a message that does not arrive
    /// whole, or finds no fitting receive, is dropped by the receiver without a word.
    pub fn create_uc_qp(
        &self,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sq_sig_all: bool,
    ) -> Result<Qp> {
        self.create_qp_of_type(QPT_UC, send_cq, recv_cq, caps, sq_sig_all, None)
    }

    /// Creates a QP of `qp_type` ([`QPT_RC`], [`QPT_UC`] or [`rnic_abi::ud::QPT_UD`]), in
    /// RESET, that takes its receives from `srq` if one is given: [`Pd::create_qp`],
    /// [`Pd::create_uc_qp`], [`Pd::create_ud_qp`] and [`Pd::create_qp_with_srq`] in one,
    /// as ibverbs' `ibv_create_qp` names them all at once.
    pub fn create_qp_of_type(
        &self,
        qp_type: u8,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sq_sig_all: bool,
        srq: Option<&super::Srq>,
    ) -> Result<Qp> {
        if qp_type == rnic_abi::ud::QPT_UD
            && self.inner.ctx().attr.caps & rnic_abi::regs::CAP_UD == 0
        {
            return Err(crate::Error::Unsupported(
                "UD QPs: the device does not report CAP_UD (an rnicd older than ABI 1.3?)",
            ));
        }
        if qp_type == QPT_UC && self.inner.ctx().attr.caps & rnic_abi::regs::CAP_UC == 0 {
            return Err(crate::Error::Unsupported(
                "UC QPs: the device does not report CAP_UC (an rnicd older than ABI 1.6?)",
            ));
        }
        let caps = caps.for_srq(srq.is_some());
        self.create_qp_on(send_cq, recv_cq, caps, sq_sig_all, srq, qp_type)
    }

    pub(super) fn create_qp_on(
        &self,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sq_sig_all: bool,
        srq: Option<&super::Srq>,
        qp_type: u8,
    ) -> Result<Qp> {
        let ctx = &self.inner.ctx();
        if !Arc::ptr_eq(&send_cq.inner.bind.ctx(), ctx)
            || !Arc::ptr_eq(&recv_cq.inner.bind.ctx(), ctx)
        {
            return Err(invalid(
                "create_qp: the CQs belong to another context than the PD".into(),
            ));
        }
        if caps.max_send_sge > u32::from(u8::MAX) {
            // The WQE counts its SGEs in a byte.
            return Err(invalid(format!(
                "create_qp: {} send SGEs; a send WQE holds at most 255",
                caps.max_send_sge
            )));
        }
        let caps = QpCaps {
            max_send_wr: ring::ring_entries(caps.max_send_wr, 1)?,
            max_recv_wr: ring::ring_entries(caps.max_recv_wr, 1)?,
            ..caps
        };
        let t = ctx.transport();
        let kinds = ctx.list_kinds();
        let sq_ring = Ring::new(
            t,
            caps.max_send_wr,
            sq_stride(caps.max_send_sge, caps.max_inline_data),
            kinds,
        )?;
        let rq_ring = Ring::new(t, caps.max_recv_wr, rq_stride(caps.max_recv_sge), kinds)?;
        // On an SRQ the device gets no receive queue (the driver keeps a one-entry ring it
        // never uses, so that every QP has the same shape).
        let own_rq = srq.is_none();
        let resp: CreateQpResp = ctx.with_doorbell_page(|doorbell_page| {
            let req = CreateQpReq {
                pdn: self.inner.pdn(),
                send_cqn: send_cq.cqn(),
                recv_cqn: recv_cq.cqn(),
                sq_entries: caps.max_send_wr,
                rq_entries: if own_rq { caps.max_recv_wr } else { 0 },
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
                doorbell_page,
                qp_type,
                sq_sig_all: u8::from(sq_sig_all),
                // SRQ numbers fit 16 bits (checked when the SRQ was created).
                srqn: srq.map_or(0, |q| q.srqn() as u16),
                sq: sq_ring.page_list(),
                rq: if own_rq {
                    rq_ring.page_list()
                } else {
                    Default::default()
                },
            };
            ctx.command(Opcode::CreateQp, req.as_bytes())
        })?;
        let slots = Doorbells::check_slot(t, resp.sq_doorbell)
            .and_then(|sq| Ok((sq, Doorbells::check_slot(t, resp.rq_doorbell)?)));
        let (sq_slot, rq_slot) = match slots {
            Ok(s) => s,
            Err(e) => {
                if ctx
                    .destroy(Opcode::DestroyQp, resp.qpn, "queue pair")
                    .is_err()
                {
                    std::mem::forget(sq_ring);
                    std::mem::forget(rq_ring);
                }
                return Err(e);
            }
        };
        let track = Arc::new(QpTrack {
            qpn: resp.qpn,
            send_cqn: AtomicU32::new(send_cq.cqn()),
            recv_cqn: AtomicU32::new(recv_cq.cqn()),
            sq_sig_all,
            sq: Mutex::new(SqState::new(caps.max_send_wr)),
            rq: match srq {
                Some(q) => q.inner.rq.clone(),
                None => Arc::new(Mutex::new(RqState {
                    entries: caps.max_recv_wr,
                    ..RqState::default()
                })),
            },
        });
        ctx.qps().insert(resp.qpn, track.clone());
        Ok(Qp {
            pd: self.inner.clone(),
            send_cq: send_cq.inner.clone(),
            recv_cq: recv_cq.inner.clone(),
            qpn: resp.qpn,
            qp_type,
            caps,
            sq_slot,
            rq_slot,
            sq_ring: ManuallyDrop::new(sq_ring),
            rq_ring: ManuallyDrop::new(rq_ring),
            track,
            srq: srq.map(|q| q.inner.clone()),
            sq_window: Default::default(),
            state: AtomicU8::new(QpState::Reset as u8),
        })
    }
}

impl Qp {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The QP's type: [`QPT_RC`], [`QPT_UC`], [`rnic_abi::ud::QPT_UD`],
    /// [`rnic_abi::dc::QPT_DCI`], [`rnic_abi::dc::QPT_DCT`] or [`rnic_abi::ud::QPT_GSI`].
    pub fn qp_type(&self) -> u8 {
        self.qp_type
    }

    pub(super) fn pd_ctx(&self) -> Arc<super::ContextInner> {
        self.pd.ctx()
    }

    /// The QP's capacities: the requested ones with queue depths rounded up.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// Send WRs that can be posted now. Completions free slots when a CQ is polled.
    pub fn sq_free_slots(&self) -> u32 {
        self.track.sq().free()
    }

    /// Receive WRs that can be posted now.
    pub fn rq_free_slots(&self) -> u32 {
        self.track.rq().free()
    }

    /// MODIFY_QP: applies the attributes `mask` ([`attr`] bits) selects.
    ///
    /// A move to RESET empties the queues: the driver starts its counts (and the doorbell
    /// slots) at 0 again, as the device does. Completions of the QP still in its CQs
    /// should have been polled first.
    pub fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        self.modify_with(attr, mask, &[])
    }

    /// [`Qp::modify`] that also sets the Q_Key of a UD QP to `qkey`.
    pub fn modify_with_qkey(&self, attr: &QpAttr, mask: u32, qkey: u32) -> Result<()> {
        let extra = rnic_abi::ud::ModifyQpQkey { qkey, reserved: 0 };
        self.modify_with(attr, mask | attr::QKEY, extra.as_bytes())
    }

    /// `ATTACH_MCAST` or `DETACH_MCAST` (`opcode`) of this QP and group `gid`.
    pub(super) fn mcast(&self, opcode: Opcode, gid: &[u8; 16]) -> Result<()> {
        if self.pd.ctx().attr.caps & rnic_abi::regs::CAP_MULTICAST == 0 {
            return Err(crate::Error::Unsupported(
                "multicast: the device does not report CAP_MULTICAST (an rnicd older than ABI 1.11?)",
            ));
        }
        let req = rnic_abi::mcast::McastReq {
            qpn: self.qpn,
            reserved: 0,
            gid: *gid,
        };
        self.pd.ctx().command_no_body(opcode, req.as_bytes())
    }

    /// Whether the QP takes its receives from an SRQ.
    pub fn has_srq(&self) -> bool {
        self.srq.is_some()
    }

    /// [`Qp::modify`] with `extra` after the request (a UD QP's Q_Key).
    pub(super) fn modify_with(&self, attr: &QpAttr, mask: u32, extra: &[u8]) -> Result<()> {
        let req = ModifyQpReq {
            qpn: self.qpn,
            attr_mask: mask,
            attr: *attr,
        };
        let mut body = req.as_bytes().to_vec();
        body.extend_from_slice(extra);
        // Hold the queues so no post runs while the state changes under it.
        let mut sq = self.track.sq();
        let mut rq = self.track.rq();
        self.pd.ctx().command_no_body(Opcode::ModifyQp, &body)?;
        if mask & attr::STATE != 0 {
            self.state.store(attr.qp_state, Ordering::Release);
        }
        if mask & attr::STATE != 0 && attr.qp_state == QpState::Reset as u8 {
            sq.reset();
            // An SRQ's counts are its own: the QP leaving does not change them.
            if self.srq.is_none() {
                rq.posted = 0;
                rq.completed = 0;
            }
            self.sq_ring.clear();
            self.rq_ring.clear();
            let ctx = self.pd.ctx();
            let t = ctx.transport();
            Doorbells::write_slot(t, self.sq_slot, 0, 0);
            Doorbells::write_slot(t, self.rq_slot, 0, 0);
        }
        Ok(())
    }

    /// QUERY_QP: the current attributes and state.
    pub fn query(&self) -> Result<QueryQpResp> {
        let req = ObjectReq {
            handle: self.qpn,
            reserved: 0,
        };
        self.pd.ctx().command(Opcode::QueryQp, req.as_bytes())
    }

    /// The current state, from QUERY_QP.
    pub fn state(&self) -> Result<QpState> {
        let attr = self.query()?.attr;
        QpState::from_u8(attr.qp_state).ok_or_else(|| {
            crate::Error::Device(format!(
                "QUERY_QP of QP {:#x} reports state {}",
                self.qpn, attr.qp_state
            ))
        })
    }

    /// Refuses a post (`what`) while the QP is in a state `refused` names, as ibverbs does
    /// (`EINVAL`). The state the last modify set decides, except that a refused one is
    /// asked again of the device, which may have moved the QP to ERR by itself since.
    /// Called with the queue's lock held, so no modify runs meanwhile.
    fn check_post_state(&self, what: &str, refused: fn(QpState) -> bool) -> Result<()> {
        let cached = QpState::from_u8(self.state.load(Ordering::Acquire)).unwrap_or(QpState::Reset);
        if !refused(cached) {
            return Ok(());
        }
        let now = self.state()?;
        self.state.store(now as u8, Ordering::Release);
        if refused(now) {
            return Err(invalid(format!(
                "{what} on QP {:#x} in state {now:?}",
                self.qpn
            )));
        }
        Ok(())
    }

    /// Posts one send work request and rings the send doorbell.
    ///
    /// Fails without posting anything if the WR does not fit the QP's caps, if the QP is
    /// in RESET, INIT or RTR (as ibverbs: the send queue takes work from RTS on; in ERR it
    /// takes work and flushes it), or with an error [`super::is_queue_full`] recognises if
    /// the send queue is full.
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        self.post_send_list(std::slice::from_ref(wr))
    }

    /// Posts send work requests in order with one doorbell. All or nothing: if any WR is
    /// invalid or they do not all fit, nothing is posted.
    pub fn post_send_list(&self, wrs: &[SendWr]) -> Result<()> {
        if self.qp_type == QPT_UC {
            if let Some(wr) = wrs.iter().find(|w| !uc_operation(&w.opcode)) {
                return Err(invalid(format!(
                    "post_send on UC QP {:#x}: {:?} is not a UC operation (SEND and RDMA WRITE, with and without immediate; LOCAL_INV; BIND_MW)",
                    self.qpn, wr.opcode
                )));
            }
        }
        let wqes = wrs
            .iter()
            .map(|wr| encode_send_wqe(wr, &self.caps))
            .collect::<Result<Vec<_>>>()?;
        self.post_encoded_sends(wrs, &wqes, None).map(drop)
    }

    /// Posts `wqes`, the encoded `wrs`, with one doorbell: all or nothing. With `window`
    /// (the BAR offset of the QP's MMIO window) and a single WQE, writes it into the
    /// window instead of the ring if the window is free; returns whether it did.
    pub(super) fn post_encoded_sends(
        &self,
        wrs: &[SendWr],
        wqes: &[Vec<u8>],
        window: Option<u64>,
    ) -> Result<bool> {
        let mut sq = self.track.sq();
        self.check_post_state("post_send", |s| {
            matches!(s, QpState::Reset | QpState::Init | QpState::Rtr)
        })?;
        if (wqes.len() as u64) > u64::from(sq.free()) {
            return Err(queue_full(format!(
                "post_send on QP {:#x}: {} work requests, {} free send slots of {}",
                self.qpn,
                wqes.len(),
                sq.free(),
                sq.entries()
            )));
        }
        if wqes.is_empty() {
            return Ok(false);
        }
        let ctx = self.pd.ctx();
        let by_mmio = match (window, wqes) {
            (Some(w), [wqe]) => super::mmio::write_window(ctx.transport(), w, sq.posted, wqe),
            _ => false,
        };
        for (wr, wqe) in wrs.iter().zip(wqes) {
            if !by_mmio {
                self.sq_ring
                    .buf()
                    .write(self.sq_ring.offset(sq.posted), wqe);
            }
            sq.push(SendSlot {
                wr_id: wr.wr_id,
                signaled: wr.signaled || self.track.sq_sig_all,
            });
        }
        // Rung under the lock: the doorbell values must reach the device in order.
        ctx.doorbells()
            .ring_queue(ctx.transport(), self.sq_slot, sq.posted)?;
        Ok(by_mmio)
    }

    /// Posts a send WQE the caller encoded, byte for byte: for tests and fuzzing of the
    /// device's checks of what a driver would never build. `wqe` is cut to the ring's
    /// stride (zero-filled up to it), its first 8 bytes (the WQE's `wr_id`) replaced by
    /// `wr_id`, and it is tracked as a signaled WR. With `by_mmio` it goes through the
    /// QP's MMIO window ([`Qp::enable_wqe_mmio`]) when that is free, as
    /// [`Qp::post_send_mmio`] sends; returns whether it did.
    pub fn post_raw_send(&self, wr_id: u64, wqe: &[u8], by_mmio: bool) -> Result<bool> {
        let stride = sq_stride(self.caps.max_send_sge, self.caps.max_inline_data) as usize;
        let mut bytes = wqe[..wqe.len().min(stride)].to_vec();
        bytes.resize(bytes.len().max(8), 0);
        bytes[..8].copy_from_slice(&wr_id.to_le_bytes());
        let wr = SendWr {
            wr_id,
            signaled: true,
            ..SendWr::default()
        };
        let window = by_mmio.then(|| self.sq_window.get().copied()).flatten();
        self.post_encoded_sends(std::slice::from_ref(&wr), &[bytes], window)
    }

    /// Posts one send work request whose message leaves from a session of `group` (bit i
    /// = session i of the function, as the PF assigned them; [`rnic_abi::session`]): the
    /// device picks one per message. Otherwise as [`Qp::post_send`].
    pub fn post_send_on_sessions(&self, wr: &SendWr, group: u8) -> Result<()> {
        if self.pd.ctx().attr.caps & rnic_abi::regs::CAP_SESSIONS == 0 {
            return Err(crate::Error::Unsupported(
                "sessions: the device does not report CAP_SESSIONS (an rnicd older than ABI 1.4?)",
            ));
        }
        let mut wqe = encode_send_wqe(wr, &self.caps)?;
        let fixed = size_of::<SendWqe>();
        let mut w = <SendWqe as zerocopy::FromBytes>::read_from_bytes(&wqe[..fixed])
            .expect("an encoded WQE starts with a SendWqe");
        w.session_group = group;
        wqe[..fixed].copy_from_slice(w.as_bytes());
        self.post_encoded_sends(std::slice::from_ref(wr), &[wqe], None)
            .map(drop)
    }

    /// Posts one receive work request. Refused in RESET, as ibverbs does; from INIT on the
    /// receive queue takes work.
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        self.post_recv_list(std::slice::from_ref(wr))
    }

    /// Posts receive work requests in order with one doorbell. All or nothing, as
    /// [`Qp::post_send_list`].
    pub fn post_recv_list(&self, wrs: &[RecvWr]) -> Result<()> {
        if let Some(srq) = &self.srq {
            return Err(invalid(format!(
                "post_recv on QP {:#x}: it takes its receives from SRQ {}; post them there",
                self.qpn,
                srq.srqn()
            )));
        }
        let wqes = wrs
            .iter()
            .map(|wr| encode_recv_wqe(wr, &self.caps))
            .collect::<Result<Vec<_>>>()?;
        let mut rq = self.track.rq();
        self.check_post_state("post_recv", |s| s == QpState::Reset)?;
        post_recv_wqes(
            &self.pd.ctx(),
            (&self.rq_ring, self.rq_slot),
            &mut rq,
            &wqes,
            || format!("post_recv on QP {:#x}", self.qpn),
        )
    }
}

impl Qp {
    /// Follows this QP to `ctx` after the device moved it there (`MIGRATE_QP`, which the
    /// PF issues; `ctx` reports `QP_ARRIVED` for it, this QP's old context
    /// `QP_DEPARTED`). Both contexts must be functions of one guest sharing its memory,
    /// which the migration checked.
    ///
    /// Asks `ctx`'s function for the QP's new numbering (`ADOPT_QP`) and rebinds the QP,
    /// its PD (and with it every MR of the PD: keys are unchanged) and the CQs that moved
    /// with it to `ctx`. If the migration named CQs of the destination instead of moving
    /// the QP's own, pass them as `send_cq`/`recv_cq`; the QP then holds those. Its old
    /// CQs then stay on the old function and hold every completion of the QP from before
    /// the move (none come later): poll them before adopting, and poll the named ones
    /// only after, so that each completion frees the QP's queue slots.
    ///
    /// Work posted after the device moved the QP and before this call went to doorbells
    /// the old function no longer watches; this rings the new ones with the driver's
    /// producer indexes, so that work runs now. Completions keep coming in the same
    /// CQ rings; the CQs' consumer indexes are written to their new doorbells too.
    pub fn adopt(
        &mut self,
        ctx: &super::Context,
        send_cq: Option<&Cq>,
        recv_cq: Option<&Cq>,
    ) -> Result<()> {
        let new_ctx = ctx.inner.clone();
        for cq in [send_cq, recv_cq].into_iter().flatten() {
            if !Arc::ptr_eq(&cq.inner.bind.ctx(), &new_ctx) {
                return Err(invalid(
                    "adopt: a CQ named for the QP belongs to another context".into(),
                ));
            }
        }
        let req = AdoptQpReq {
            qpn: self.qpn,
            reserved: 0,
        };
        let resp: AdoptQpResp = new_ctx.command(Opcode::AdoptQp, req.as_bytes())?;
        let t = new_ctx.transport();
        let sq_slot = Doorbells::check_slot(t, resp.sq_doorbell)?;
        let rq_slot = Doorbells::check_slot(t, resp.rq_doorbell)?;
        for (named, cqn) in [(send_cq, resp.send_cq), (recv_cq, resp.recv_cq)] {
            if let Some(cq) = named {
                if cq.cqn() != cqn {
                    return Err(crate::Error::Device(format!(
                        "adopt: the device says QP {:#x} completes to CQ {cqn}, not CQ {}",
                        self.qpn,
                        cq.cqn()
                    )));
                }
            }
        }
        // Every slot is checked before anything changes.
        let own_cq_slots = [
            (send_cq.is_none(), resp.send_cq_doorbell),
            (recv_cq.is_none(), resp.recv_cq_doorbell),
        ]
        .map(|(moved, slot)| moved.then(|| Doorbells::check_slot(t, slot)).transpose());
        let [send_cq_slot, recv_cq_slot] = own_cq_slots;
        let (send_cq_slot, recv_cq_slot) = (send_cq_slot?, recv_cq_slot?);
        let old_ctx = self.pd.ctx();
        // Both contexts credit this QP's completions to the same accounting while it
        // moves: CQs polled on either side find it.
        new_ctx.qps().insert(self.qpn, self.track.clone());
        self.pd
            .bind
            .rebind(new_ctx.clone(), resp.pdn, Default::default());
        // Each CQ that moved is rebound under its poll lock, together with the QP's
        // record of that CQ's number, so no poll credits with a stale pairing.
        let moves = [
            (&self.send_cq, resp.send_cq, send_cq_slot, true),
            (&self.recv_cq, resp.recv_cq, recv_cq_slot, false),
        ];
        for (own, cqn, slot, is_send) in moves {
            let track = &self.track;
            let set_cqn = || {
                if is_send {
                    track.send_cqn.store(cqn, Ordering::Release);
                } else {
                    track.recv_cqn.store(cqn, Ordering::Release);
                }
            };
            match slot {
                // A CQ used for both queues moves once; the second pass finds it moved.
                Some(slot) if !Arc::ptr_eq(&own.bind.ctx(), &new_ctx) => {
                    own.move_to(new_ctx.clone(), cqn, slot, set_cqn)
                }
                _ => set_cqn(),
            }
        }
        old_ctx.qps().remove(&self.qpn);
        if let Some(cq) = send_cq {
            self.send_cq = cq.inner.clone();
        }
        if let Some(cq) = recv_cq {
            self.recv_cq = cq.inner.clone();
        }
        self.sq_slot = sq_slot;
        self.rq_slot = rq_slot;
        if let Some(state) = QpState::from_u8(resp.state as u8) {
            self.state.store(state as u8, Ordering::Release);
        }
        let (sq_posted, rq_posted) = (self.track.sq().posted, self.track.rq().posted);
        // Announce everything posted so far on the new doorbells (a value the device
        // already had changes nothing).
        new_ctx.doorbells().ring_queue(t, self.sq_slot, sq_posted)?;
        new_ctx.doorbells().ring_queue(t, self.rq_slot, rq_posted)?;
        log::debug!(
            "QP {:#x} adopted by {}: pd {}, cqs {}/{}",
            self.qpn,
            t.describe(),
            resp.pdn,
            resp.send_cq,
            resp.recv_cq
        );
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let ctx = &self.pd.ctx();
        let destroyed = ctx.destroy(Opcode::DestroyQp, self.qpn, "queue pair");
        // Completions still in the CQs have no QP to credit any more.
        ctx.qps().remove(&self.qpn);
        // SAFETY: the rings are not used again: this is the last use of `self`.
        let rings = unsafe {
            (
                ManuallyDrop::take(&mut self.sq_ring),
                ManuallyDrop::take(&mut self.rq_ring),
            )
        };
        if destroyed.is_err() {
            std::mem::forget(rings);
        } else {
            ctx.doorbell_slot_freed(self.sq_slot.page.min(self.rq_slot.page));
        }
    }
}

/// Fails unless `wr` (`what`, a local operation) has no SGEs and no inline data.
fn no_data(wr: &SendWr, what: &str) -> Result<()> {
    if wr.inline.is_some() || !wr.sges.is_empty() {
        return Err(invalid(format!(
            "post_send: {what} has no SGEs and no inline data"
        )));
    }
    Ok(())
}

/// Whether a UC QP takes `op`: SEND and RDMA WRITE, with and without immediate, and
/// the local operations (LOCAL_INV, BIND_MW, REG_MR). No READs, atomics or SEND with
/// invalidate: as in rxe, they have no UC opcode.
fn uc_operation(op: &WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send
            | WrOpcode::SendWithImm(_)
            | WrOpcode::RdmaWrite { .. }
            | WrOpcode::RdmaWriteWithImm { .. }
            | WrOpcode::LocalInv(_)
            | WrOpcode::BindMw { .. }
            | WrOpcode::RegMr { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::WcStatus;
    use zerocopy::FromBytes;

    fn caps() -> QpCaps {
        QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        }
    }

    fn sge(n: u32) -> Sge {
        Sge {
            addr: 0x1000 * u64::from(n),
            length: 100 + n,
            lkey: 0x100 + n,
        }
    }

    fn decode(bytes: &[u8]) -> (SendWqe, &[u8]) {
        SendWqe::read_from_prefix(bytes).unwrap()
    }

    #[test]
    fn send_wqes_carry_sges_after_the_fixed_part() {
        let wr = SendWr {
            wr_id: 77,
            opcode: WrOpcode::SendWithImm(0x0102_0304),
            sges: vec![sge(1), sge(2)],
            signaled: true,
            solicited: true,
            ..SendWr::default()
        };
        let bytes = encode_send_wqe(&wr, &caps()).unwrap();
        assert_eq!(bytes.len(), 64 + 32);
        let (w, rest) = decode(&bytes);
        assert_eq!(w.wr_id, 77);
        assert_eq!(w.opcode, wr::SEND_WITH_IMM);
        assert_eq!(w.flags, send_flags::SIGNALED | send_flags::SOLICITED);
        assert_eq!(w.num_sge, 2);
        assert_eq!(w.imm_or_inv, 0x0102_0304);
        assert_eq!(w.inline_len, 0);
        assert_eq!(Sge::read_from_bytes(&rest[..16]).unwrap(), sge(1));
        assert_eq!(Sge::read_from_bytes(&rest[16..]).unwrap(), sge(2));
        assert!(bytes.len() <= sq_stride(2, 64) as usize);
    }

    #[test]
    fn inline_data_follows_the_fixed_part() {
        let wr = SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: 0xdead_0000,
                rkey: 0x42,
            },
            inline: Some(b"hello".to_vec()),
            fence: true,
            ..SendWr::default()
        };
        let bytes = encode_send_wqe(&wr, &caps()).unwrap();
        let (w, rest) = decode(&bytes);
        assert_eq!(w.opcode, wr::RDMA_WRITE);
        assert_eq!(w.flags, send_flags::INLINE | send_flags::FENCE);
        assert_eq!((w.remote_addr, w.rkey), (0xdead_0000, 0x42));
        assert_eq!(w.num_sge, 0);
        assert_eq!(w.inline_len, 5);
        assert_eq!(rest, b"hello");
    }

    #[test]
    fn every_opcode_encodes_its_operands() {
        let enc = |opcode| {
            let wr = SendWr {
                opcode,
                ..SendWr::default()
            };
            decode(&encode_send_wqe(&wr, &caps()).unwrap()).0
        };
        assert_eq!(enc(WrOpcode::Send).opcode, wr::SEND);
        let w = enc(WrOpcode::SendWithInv(0x55));
        assert_eq!((w.opcode, w.imm_or_inv), (wr::SEND_WITH_INV, 0x55));
        let w = enc(WrOpcode::RdmaWriteWithImm {
            remote_addr: 8,
            rkey: 9,
            imm: 10,
        });
        assert_eq!(
            (w.opcode, w.remote_addr, w.rkey, w.imm_or_inv),
            (wr::RDMA_WRITE_WITH_IMM, 8, 9, 10)
        );
        let w = enc(WrOpcode::RdmaRead {
            remote_addr: 16,
            rkey: 3,
        });
        assert_eq!((w.opcode, w.remote_addr, w.rkey), (wr::RDMA_READ, 16, 3));
        let w = enc(WrOpcode::AtomicCmpSwp {
            remote_addr: 24,
            rkey: 4,
            compare: 5,
            swap: 6,
        });
        assert_eq!(
            (w.opcode, w.remote_addr, w.rkey, w.compare_add, w.swap),
            (wr::ATOMIC_CMP_AND_SWP, 24, 4, 5, 6)
        );
        let w = enc(WrOpcode::AtomicFetchAdd {
            remote_addr: 32,
            rkey: 7,
            add: 8,
        });
        assert_eq!(
            (w.opcode, w.remote_addr, w.rkey, w.compare_add, w.swap),
            (wr::ATOMIC_FETCH_AND_ADD, 32, 7, 8, 0)
        );
        let w = enc(WrOpcode::LocalInv(0x99));
        assert_eq!((w.opcode, w.imm_or_inv, w.flags), (wr::LOCAL_INV, 0x99, 0));
    }

    #[test]
    fn a_bind_is_one_bind_mw_wqe_without_sges() {
        let bind = WrOpcode::BindMw {
            mw_key: 0x4000_0100,
            new_key: 0x4000_0101,
            mr_lkey: 0x33,
            addr: 0x1000,
            length: 4096,
            access: rnic_abi::verbs::ACCESS_REMOTE_READ,
        };
        let wr = SendWr {
            wr_id: 5,
            opcode: bind,
            signaled: true,
            fence: true,
            ..SendWr::default()
        };
        let bytes = encode_send_wqe(&wr, &caps()).unwrap();
        assert_eq!(bytes.len(), size_of::<BindMwWqe>());
        let b = BindMwWqe::read_from_bytes(&bytes).unwrap();
        assert_eq!(
            b,
            BindMwWqe {
                wr_id: 5,
                opcode: wr::BIND_MW,
                flags: send_flags::SIGNALED | send_flags::FENCE,
                mw_key: 0x4000_0100,
                addr: 0x1000,
                new_key: 0x4000_0101,
                mr_lkey: 0x33,
                length: 4096,
                access: rnic_abi::verbs::ACCESS_REMOTE_READ,
                ..BindMwWqe::default()
            }
        );
        let with_sge = SendWr {
            opcode: bind,
            sges: vec![sge(1)],
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&with_sge, &caps()).is_err());
        let inline = SendWr {
            opcode: bind,
            inline: Some(vec![1]),
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&inline, &caps()).is_err());
    }

    #[test]
    fn a_reg_mr_is_one_fast_reg_wqe_with_4_kib_pages_and_no_sges() {
        let reg = WrOpcode::RegMr {
            key: 0x305,
            iova: 0x1_0000_0800,
            length: 4096,
            access: rnic_abi::verbs::ACCESS_LOCAL_WRITE,
            page_list: 0x7000,
            page_count: 2,
        };
        let wr = SendWr {
            wr_id: 9,
            opcode: reg,
            signaled: true,
            ..SendWr::default()
        };
        let bytes = encode_send_wqe(&wr, &caps()).unwrap();
        assert_eq!(
            FastRegWqe::read_from_bytes(&bytes).unwrap(),
            FastRegWqe {
                wr_id: 9,
                opcode: wr::REG_MR,
                flags: send_flags::SIGNALED,
                page_shift: 12,
                key: 0x305,
                iova: 0x1_0000_0800,
                access: rnic_abi::verbs::ACCESS_LOCAL_WRITE,
                page_count: 2,
                page_list: 0x7000,
                length: 4096,
                ..FastRegWqe::default()
            }
        );
        let with_sge = SendWr {
            opcode: reg,
            sges: vec![sge(1)],
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&with_sge, &caps()).is_err());
        assert!(uc_operation(&reg));
    }

    #[test]
    fn uc_takes_sends_writes_and_local_operations_only() {
        assert!(uc_operation(&WrOpcode::Send));
        assert!(uc_operation(&WrOpcode::SendWithImm(1)));
        assert!(uc_operation(&WrOpcode::RdmaWriteWithImm {
            remote_addr: 0,
            rkey: 0,
            imm: 0
        }));
        assert!(uc_operation(&WrOpcode::LocalInv(1)));
        assert!(!uc_operation(&WrOpcode::SendWithInv(1)));
        assert!(!uc_operation(&WrOpcode::RdmaRead {
            remote_addr: 0,
            rkey: 0
        }));
        assert!(!uc_operation(&WrOpcode::AtomicFetchAdd {
            remote_addr: 0,
            rkey: 0,
            add: 1
        }));
    }

    #[test]
    fn bad_work_requests_are_refused() {
        let too_many = SendWr {
            sges: vec![sge(1), sge(2), sge(3)],
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&too_many, &caps()).is_err());
        let too_long = SendWr {
            inline: Some(vec![0; 65]),
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&too_long, &caps()).is_err());
        let both = SendWr {
            inline: Some(vec![0; 4]),
            sges: vec![sge(1)],
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&both, &caps()).is_err());
        let inline_read = SendWr {
            opcode: WrOpcode::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            inline: Some(vec![0; 4]),
            ..SendWr::default()
        };
        assert!(encode_send_wqe(&inline_read, &caps()).is_err());
        let recv = RecvWr {
            wr_id: 0,
            sges: vec![sge(1), sge(2), sge(3)],
        };
        assert!(encode_recv_wqe(&recv, &caps()).is_err());
    }

    #[test]
    fn recv_wqes_carry_their_sges() {
        let wr = RecvWr {
            wr_id: 5,
            sges: vec![sge(7)],
        };
        let bytes = encode_recv_wqe(&wr, &caps()).unwrap();
        assert_eq!(bytes.len(), 32);
        let (w, rest) = RecvWqe::read_from_prefix(&bytes).unwrap();
        assert_eq!((w.wr_id, w.num_sge, w.reserved), (5, 1, 0));
        assert_eq!(Sge::read_from_bytes(rest).unwrap(), sge(7));
        assert!(bytes.len() <= rq_stride(2) as usize);
    }

    fn post(sq: &mut SqState, wr_id: u64, signaled: bool) {
        sq.push(SendSlot { wr_id, signaled });
    }

    #[test]
    fn a_signaled_completion_frees_the_silent_ones_before_it() {
        let mut sq = SqState::new(8);
        assert_eq!(sq.free(), 8);
        post(&mut sq, 1, false);
        post(&mut sq, 2, false);
        post(&mut sq, 3, true);
        post(&mut sq, 4, false);
        assert_eq!(sq.free(), 4);
        assert!(sq.complete(3, true));
        assert_eq!(sq.free(), 7);
        // An unsignaled WR never completes successfully on its own: no match.
        assert!(!sq.complete(4, true));
        assert_eq!(sq.free(), 7);
    }

    #[test]
    fn repeated_wr_ids_free_up_to_the_signaled_one() {
        // As ibv_rc_pingpong does: the same wr_id for every WR.
        let mut sq = SqState::new(4);
        post(&mut sq, 9, false);
        post(&mut sq, 9, false);
        post(&mut sq, 9, true);
        post(&mut sq, 9, true);
        assert_eq!(sq.free(), 0);
        assert!(sq.complete(9, true));
        assert_eq!(sq.free(), 3);
        assert!(sq.complete(9, true));
        assert_eq!(sq.free(), 4);
    }

    #[test]
    fn errors_and_flushes_free_one_work_request_each() {
        let mut sq = SqState::new(8);
        for i in 0..5 {
            post(&mut sq, i, false);
        }
        // WR 1 fails (WR 0 succeeded silently), then 2, 3 and 4 are flushed.
        assert!(sq.complete(1, false));
        assert_eq!(sq.free(), 5);
        for i in 2..5 {
            assert!(sq.complete(i, false));
        }
        assert_eq!(sq.free(), 8);
        assert!(!sq.complete(5, false));
    }

    #[test]
    fn a_completion_never_reaches_past_a_signaled_work_request() {
        let mut sq = SqState::new(8);
        post(&mut sq, 1, true);
        post(&mut sq, 2, true);
        // A stray completion for WR 2 before WR 1's: WR 1's completion must come first.
        assert!(!sq.complete(2, true));
        assert_eq!(sq.free(), 6);
        assert!(sq.complete(1, true));
        assert!(sq.complete(2, true));
        assert_eq!(sq.free(), 8);
    }

    #[test]
    fn counts_survive_wrapping() {
        let mut sq = SqState::new(4);
        sq.posted = u32::MAX - 1;
        sq.completed = u32::MAX - 1;
        for i in 0..4 {
            post(&mut sq, i, i == 3);
        }
        assert_eq!(sq.free(), 0);
        assert_eq!(sq.posted, 2);
        assert!(sq.complete(3, true));
        assert_eq!(sq.free(), 4);

        let mut rq = RqState {
            posted: 1,
            completed: u32::MAX,
            entries: 4,
        };
        assert_eq!(rq.free(), 2);
        assert!(rq.complete());
        assert!(rq.complete());
        assert!(!rq.complete());
        assert_eq!(rq.free(), 4);
    }

    fn track(send_cqn: u32, recv_cqn: u32) -> QpTrack {
        QpTrack {
            qpn: 1,
            send_cqn: AtomicU32::new(send_cqn),
            recv_cqn: AtomicU32::new(recv_cqn),
            sq_sig_all: false,
            sq: Mutex::new(SqState::new(4)),
            rq: Arc::new(Mutex::new(RqState {
                entries: 4,
                ..RqState::default()
            })),
        }
    }

    fn wc(opcode: u8, status: u8, wr_id: u64) -> Wc {
        Wc::from_cqe(&rnic_abi::verbs::Cqe {
            wr_id,
            opcode,
            status,
            qp_num: 1,
            owner: 1,
            ..Default::default()
        })
    }

    #[test]
    fn completions_credit_the_queue_they_belong_to() {
        use rnic_abi::verbs::wc as op;
        // One CQ for both queues: the opcode decides, even for flushes.
        let t = track(3, 3);
        post(&mut t.sq(), 10, true);
        t.rq().posted = 2;
        t.credit(3, &wc(op::RECV, WcStatus::WrFlushErr as u8, 20));
        assert_eq!((t.sq().free(), t.rq().free()), (3, 3));
        t.credit(3, &wc(op::SEND, 0, 10));
        assert_eq!((t.sq().free(), t.rq().free()), (4, 3));
        // Separate CQs: the CQ decides; others are ignored.
        let t = track(3, 4);
        t.rq().posted = 1;
        t.credit(4, &wc(op::SEND, WcStatus::WrFlushErr as u8, 0));
        assert_eq!(t.rq().free(), 4);
        post(&mut t.sq(), 1, true);
        t.credit(5, &wc(op::SEND, 0, 1));
        assert_eq!(t.sq().free(), 3);
    }
}
