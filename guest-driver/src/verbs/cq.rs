//! Completion queues.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_abi::cmd::Opcode;
use rnic_abi::ctrlq::CTRLQ_CQE_QPN_BIT;
use rnic_abi::verbs::{wc, wc_flags, Cqe, CreateCqReq, CreateCqResp, ResizeCqReq, WcStatus};
use zerocopy::{FromBytes, IntoBytes};

use super::ring::{self, Doorbells, Ring};
use super::{Binding, ContextInner};
use crate::error::Result;

/// Offset in a CQ's doorbell slot of the consumer index (u32).
const SLOT_CONSUMER_INDEX: u64 = 0;
/// Offset in a CQ's doorbell slot of the arm word (u32).
const SLOT_ARM: u64 = 4;
/// Offset in a [`Cqe`] of the u32 whose top byte is `owner`.
const CQE_OWNER_WORD: usize = 24;

/// What a completion is for, as `enum ibv_wc_opcode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (with or without immediate or invalidate) completed.
    Send,
    /// An RDMA WRITE completed.
    RdmaWrite,
    /// An RDMA READ completed.
    RdmaRead,
    /// A compare and swap completed.
    CompSwap,
    /// A fetch and add completed.
    FetchAdd,
    /// A memory-window bind completed.
    BindMw,
    /// A local invalidate completed.
    LocalInv,
    /// A receive completed: a SEND arrived.
    Recv,
    /// A receive was consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// A control queue's registration completed ([`rnic_abi::ctrlq`]).
    RegMr,
    /// An RDMA ATOMIC WRITE completed (ABI 1.11).
    AtomicWrite,
    /// An RDMA FLUSH completed (ABI 1.11).
    Flush,
    /// An opcode this driver does not know.
    Unknown(u8),
}

impl WcOpcode {
    /// The opcode with this [`wc`] number.
    pub fn from_u8(v: u8) -> Self {
        match v {
            wc::SEND => Self::Send,
            wc::RDMA_WRITE => Self::RdmaWrite,
            wc::RDMA_READ => Self::RdmaRead,
            wc::COMP_SWAP => Self::CompSwap,
            wc::FETCH_ADD => Self::FetchAdd,
            wc::BIND_MW => Self::BindMw,
            wc::LOCAL_INV => Self::LocalInv,
            wc::RECV => Self::Recv,
            wc::RECV_RDMA_WITH_IMM => Self::RecvRdmaWithImm,
            wc::REG_MR => Self::RegMr,
            wc::ATOMIC_WRITE => Self::AtomicWrite,
            wc::FLUSH => Self::Flush,
            other => Self::Unknown(other),
        }
    }
}

/// A work completion, the driver's `ibv_wc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The work request's ID.
    pub wr_id: u64,
    /// How it ended; `Err` holds a status number this driver does not know.
    pub status: std::result::Result<WcStatus, u8>,
    /// What completed. Only meaningful on success, as in ibverbs.
    pub opcode: WcOpcode,
    /// Bytes transferred (receives, READs; 8 for atomics).
    pub byte_len: u32,
    /// Immediate data, byte for byte as the sender posted it (network order, like
    /// ibverbs' `__be32 imm_data`).
    pub imm_data: Option<u32>,
    /// The rkey a SEND with invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The key a control queue's registration was for ([`WcOpcode::RegMr`]).
    pub reg_key: Option<u32>,
    /// The local QP.
    pub qp_num: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
    /// The raw [`wc_flags`].
    pub wc_flags: u8,
    /// Device-specific detail of an error, 0 on success.
    pub vendor_err: u32,
}

impl Wc {
    /// Decodes a completion-queue entry.
    pub fn from_cqe(c: &Cqe) -> Wc {
        Wc {
            wr_id: c.wr_id,
            status: WcStatus::from_u8(c.status).ok_or(c.status),
            opcode: WcOpcode::from_u8(c.opcode),
            byte_len: c.byte_len,
            imm_data: (c.wc_flags & wc_flags::WITH_IMM != 0).then_some(c.imm_or_inv),
            invalidated_rkey: (c.wc_flags & wc_flags::WITH_INV != 0).then_some(c.imm_or_inv),
            // A control queue's (a REG_MR work request's completion names no key).
            reg_key: (c.opcode == wc::REG_MR && c.qp_num & CTRLQ_CQE_QPN_BIT != 0)
                .then_some(c.imm_or_inv),
            qp_num: c.qp_num,
            src_qp: c.src_qp,
            wc_flags: c.wc_flags,
            vendor_err: c.vendor_err,
        }
    }

    /// Whether the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.status == Ok(WcStatus::Success)
    }

    /// Whether the message carried the solicited-event bit (receives).
    pub fn solicited(&self) -> bool {
        self.wc_flags & wc_flags::SOLICITED != 0
    }

    /// Whether it completes a receive WQE: receive opcodes have bit 7 set. The device
    /// keeps the opcode right in error and flush completions too; the QP accounting relies
    /// on it when one CQ serves both queues of a QP.
    pub fn is_recv(&self) -> bool {
        match self.opcode {
            WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => true,
            WcOpcode::Unknown(n) => n & 0x80 != 0,
            _ => false,
        }
    }

    /// A readable status, as `ibv_wc_status_str` says it.
    pub fn status_str(&self) -> String {
        match self.status {
            Ok(s) => s.name().to_string(),
            Err(n) => format!("unknown status {n}"),
        }
    }
}

/// A completion queue. Destroyed on drop, once no QP uses it any more.
#[derive(Debug)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

/// What QPs keep alive of their CQs.
pub(crate) struct CqInner {
    /// Context, CQ number and doorbell slot (they change if the CQ follows a migrated
    /// QP).
    pub(crate) bind: Binding,
    state: Mutex<CqState>,
}

impl std::fmt::Debug for CqInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("cqn", &self.bind.num())
            .field("entries", &self.state().ring.entries())
            .finish_non_exhaustive()
    }
}

/// The driver's side of a CQ.
#[derive(Debug)]
struct CqState {
    /// The ring (another after a resize); freed only after DESTROY_CQ succeeded.
    ring: ManuallyDrop<Ring>,
    /// Entries consumed in all (free-running), as the consumer index says.
    consumed: u32,
    /// The last arm sequence number written (31 bits).
    arm_seq: u32,
}

/// The arm word for arm sequence `seq`: bits 31:1 the sequence, bit 0 "solicited only".
pub(crate) fn arm_word(seq: u32, solicited_only: bool) -> u32 {
    (seq << 1) | u32::from(solicited_only)
}

/// The arm sequence after `seq` (31 bits, wrapping).
pub(crate) fn next_arm_seq(seq: u32) -> u32 {
    seq.wrapping_add(1) & 0x7FFF_FFFF
}

impl Cq {
    pub(crate) fn create(ctx: &Arc<ContextInner>, entries: u32) -> Result<Cq> {
        let entries = ring::ring_entries(entries, 2)?;
        let t = ctx.transport();
        let ring = Ring::new(t, entries, size_of::<Cqe>() as u32, ctx.list_kinds())?;
        let resp: CreateCqResp = ctx.with_doorbell_page(|doorbell_page| {
            let req = CreateCqReq {
                ring: ring.page_list(),
                entries,
                doorbell_page,
            };
            ctx.command(Opcode::CreateCq, req.as_bytes())
        })?;
        let slot = match Doorbells::check_slot(t, resp.doorbell) {
            Ok(s) => s,
            Err(e) => {
                if ctx
                    .destroy(Opcode::DestroyCq, resp.cqn, "completion queue")
                    .is_err()
                {
                    std::mem::forget(ring);
                }
                return Err(e);
            }
        };
        Ok(Cq {
            inner: Arc::new(CqInner {
                bind: Binding::new(ctx.clone(), resp.cqn, slot),
                state: Mutex::new(CqState {
                    ring: ManuallyDrop::new(ring),
                    consumed: 0,
                    arm_seq: 0,
                }),
            }),
        })
    }

    /// The CQ's number.
    pub fn cqn(&self) -> u32 {
        self.inner.bind.num()
    }

    /// Entries in the ring (the requested number rounded up).
    pub fn entries(&self) -> u32 {
        self.inner.state().ring.entries()
    }

    /// Moves the CQ to a ring of `entries` entries (rounded up to a power of two), with
    /// the completions not polled yet (`RESIZE_CQ`, ABI 1.10). Fails, changing nothing,
    /// when the device lacks `CAP_RESIZE_CQ` or the new ring cannot hold what is pending.
    pub fn resize(&self, entries: u32) -> Result<()> {
        let inner = &*self.inner;
        let (ctx, cqn, _) = inner.bind.get().clone();
        if ctx.attr.caps & rnic_abi::regs::CAP_RESIZE_CQ == 0 {
            return Err(crate::error::Error::Unsupported(
                "resizing a CQ: the device does not report CAP_RESIZE_CQ (an rnicd older than ABI 1.10?)",
            ));
        }
        let entries = ring::ring_entries(entries, 2)?;
        let t = ctx.transport();
        let ring = Ring::new(t, entries, size_of::<Cqe>() as u32, ctx.list_kinds())?;
        // Held across the command: no poll reads either ring meanwhile.
        let mut st = inner.state();
        let req = ResizeCqReq {
            ring: ring.page_list(),
            entries,
            cqn,
        };
        ctx.command_no_body(Opcode::ResizeCq, req.as_bytes())?;
        // The device writes only the new ring now; the old one is free.
        let old = std::mem::replace(&mut st.ring, ManuallyDrop::new(ring));
        drop(ManuallyDrop::into_inner(old));
        Ok(())
    }

    /// Fails at once if the function this CQ lives on is lost to the driver
    /// ([`super::Context::check_alive`]): for completion loops that hold only the CQ.
    pub fn check_alive(&self) -> crate::Result<()> {
        self.inner.bind.get().0.device.check_alive()
    }

    /// Takes up to `max` new completions, oldest first, and tells the device their entries
    /// are free. Send completions also free their QP's send-queue slots
    /// ([`super::Qp::sq_free_slots`]), receive completions receive-queue slots.
    pub fn poll(&self, max: usize) -> Vec<Wc> {
        let inner = &*self.inner;
        // Held across the QP accounting too: a QP's completions must be credited in the
        // order the device wrote them, even with several threads polling.
        let mut st = inner.state();
        let st = &mut *st;
        let ring = &*st.ring;
        let mut out = Vec::new();
        while out.len() < max {
            let off = ring.offset(st.consumed);
            // The owner byte is the top byte of the entry's u32 at +24, written last: an
            // acquire load of it orders the reads of the rest of the entry after it.
            let owner = (ring.buf().load_u32(off + CQE_OWNER_WORD) >> 24) as u8;
            if !ring::is_new(owner, st.consumed, ring.entries()) {
                break;
            }
            let mut bytes = [0u8; size_of::<Cqe>()];
            ring.buf().read(off, &mut bytes);
            let cqe = Cqe::read_from_bytes(&bytes).expect("a Cqe is 32 bytes");
            out.push(Wc::from_cqe(&cqe));
            st.consumed = st.consumed.wrapping_add(1);
        }
        if out.is_empty() {
            return out;
        }
        // The entries are read; the release in write_slot orders those reads before the
        // device may see the slots as free.
        let (ctx, cqn, slot) = inner.bind.get().clone();
        Doorbells::write_slot(ctx.transport(), slot, SLOT_CONSUMER_INDEX, st.consumed);
        {
            let qps = ctx.qps();
            for wc in &out {
                if let Some(track) = qps.get(&wc.qp_num) {
                    track.credit(cqn, wc);
                }
            }
        }
        out
    }

    /// Arms the CQ: its next completion (with `solicited_only`, its next completion of a
    /// message with the solicited bit, or any error completion, as the device decides)
    /// posts a completion event to the context's event queue.
    ///
    /// Arm, then poll once more before waiting: a completion written before the arm
    /// raises no event.
    pub fn req_notify(&self, solicited_only: bool) {
        let mut st = self.inner.state();
        st.arm_seq = next_arm_seq(st.arm_seq);
        Doorbells::write_slot(
            self.inner.bind.ctx().transport(),
            self.inner.bind.slot(),
            SLOT_ARM,
            arm_word(st.arm_seq, solicited_only),
        );
    }
}

impl CqInner {
    /// Moves the CQ to `ctx`, where it is `cqn` with doorbell `slot` (it followed a
    /// migrated QP), and tells the device there how far the driver consumed. Runs `also`
    /// under the same lock as polls, so no poll sees one change without the other.
    pub(crate) fn move_to(
        &self,
        ctx: Arc<ContextInner>,
        cqn: u32,
        slot: rnic_abi::verbs::DoorbellSlot,
        also: impl FnOnce(),
    ) {
        let st = self.state();
        Doorbells::write_slot(ctx.transport(), slot, SLOT_CONSUMER_INDEX, st.consumed);
        self.bind.rebind(ctx, cqn, slot);
        also();
    }

    fn state(&self) -> MutexGuard<'_, CqState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `ring` is not used again: this is the last use of `self`.
        let ring = unsafe { ManuallyDrop::take(&mut st.ring) };
        let ctx = self.bind.ctx();
        if ctx
            .destroy(Opcode::DestroyCq, self.bind.num(), "completion queue")
            .is_err()
        {
            std::mem::forget(ring);
        } else {
            ctx.doorbell_slot_freed(self.bind.slot().page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cqe() -> Cqe {
        Cqe {
            wr_id: 0x1122_3344_5566_7788,
            byte_len: 100,
            imm_or_inv: 0xAABB_CCDD,
            qp_num: 5,
            src_qp: 9,
            opcode: wc::RECV,
            status: 0,
            wc_flags: 0,
            owner: 1,
            vendor_err: 0,
        }
    }

    #[test]
    fn cqes_decode_to_work_completions() {
        let w = Wc::from_cqe(&cqe());
        assert_eq!(w.wr_id, 0x1122_3344_5566_7788);
        assert!(w.is_success());
        assert_eq!(w.opcode, WcOpcode::Recv);
        assert_eq!(w.byte_len, 100);
        assert_eq!((w.qp_num, w.src_qp), (5, 9));
        assert_eq!(w.imm_data, None);
        assert_eq!(w.invalidated_rkey, None);
        assert!(w.is_recv());
        assert!(!w.solicited());
    }

    #[test]
    fn flags_select_immediate_or_invalidate() {
        let mut c = cqe();
        c.wc_flags = wc_flags::WITH_IMM | wc_flags::SOLICITED;
        c.opcode = wc::RECV_RDMA_WITH_IMM;
        let w = Wc::from_cqe(&c);
        assert_eq!(w.imm_data, Some(0xAABB_CCDD));
        assert_eq!(w.invalidated_rkey, None);
        assert_eq!(w.opcode, WcOpcode::RecvRdmaWithImm);
        assert!(w.solicited());

        c.wc_flags = wc_flags::WITH_INV;
        c.opcode = wc::RECV;
        let w = Wc::from_cqe(&c);
        assert_eq!(w.imm_data, None);
        assert_eq!(w.invalidated_rkey, Some(0xAABB_CCDD));
    }

    #[test]
    fn statuses_and_opcodes_keep_unknown_numbers() {
        let mut c = cqe();
        c.status = 5;
        c.opcode = wc::RDMA_READ;
        c.vendor_err = 0x42;
        let w = Wc::from_cqe(&c);
        assert_eq!(w.status, Ok(WcStatus::WrFlushErr));
        assert!(!w.is_success());
        assert_eq!(w.status_str(), "Work Request Flushed Error");
        assert_eq!(w.opcode, WcOpcode::RdmaRead);
        assert!(!w.is_recv());
        assert_eq!(w.vendor_err, 0x42);

        c.status = 99;
        c.opcode = 77;
        let w = Wc::from_cqe(&c);
        assert_eq!(w.status, Err(99));
        assert_eq!(w.status_str(), "unknown status 99");
        assert_eq!(w.opcode, WcOpcode::Unknown(77));
        assert!(!w.is_recv());
        c.opcode = 0x85;
        assert!(Wc::from_cqe(&c).is_recv());
    }

    #[test]
    fn send_opcodes_map_to_ibverbs() {
        for (n, op) in [
            (wc::SEND, WcOpcode::Send),
            (wc::RDMA_WRITE, WcOpcode::RdmaWrite),
            (wc::COMP_SWAP, WcOpcode::CompSwap),
            (wc::FETCH_ADD, WcOpcode::FetchAdd),
            (wc::BIND_MW, WcOpcode::BindMw),
            (wc::LOCAL_INV, WcOpcode::LocalInv),
        ] {
            assert_eq!(WcOpcode::from_u8(n), op);
        }
    }

    #[test]
    fn the_owner_word_holds_the_owner_byte_on_top() {
        let c = cqe();
        let bytes = c.as_bytes();
        let word = u32::from_le_bytes(
            bytes[CQE_OWNER_WORD..CQE_OWNER_WORD + 4]
                .try_into()
                .unwrap(),
        );
        assert_eq!((word >> 24) as u8, c.owner);
    }

    #[test]
    fn arm_words_carry_a_31_bit_sequence() {
        assert_eq!(arm_word(1, false), 2);
        assert_eq!(arm_word(1, true), 3);
        assert_eq!(arm_word(0x7FFF_FFFF, true), 0xFFFF_FFFF);
        assert_eq!(next_arm_seq(0), 1);
        assert_eq!(next_arm_seq(0x7FFF_FFFF), 0);
    }
}
