//! Work queues and their entries: the rings in driver memory ([`WorkQueue`]), the WQEs
//! as the device reads them ([`read_send`], [`read_recv`]; layouts in
//! docs/hardware-interface.md §7.6), and a send WQE the requester has taken, on its way
//! to a completion ([`Op`]).

use rnic_abi::verbs::{send_flags, wc, wr, RecvWqe, SendWqe, Sge, WcStatus};
use vm_memory::GuestMemoryMmap;
use zerocopy::FromBytes;

use super::answers::Answers;
use super::env::Env;
use super::mkey::pages::PagedBuffer;
use super::mmio;
use crate::roce::psn;

/// A send or receive queue in driver memory.
#[derive(Debug)]
pub struct WorkQueue {
    /// The ring.
    pub ring: PagedBuffer,
    /// Entries (a power of two).
    pub entries: u32,
    /// Bytes per entry.
    pub stride: u32,
    /// Byte offset of the queue's doorbell slot in the doorbell BAR.
    pub slot: u64,
    /// Entries the device has taken from the queue, in all.
    pub taken: u32,
    /// Byte offset in the doorbell BAR of the send queue's MMIO window, if it has one
    /// (see [`super::mmio`]).
    pub window: Option<u64>,
}

impl WorkQueue {
    /// A new queue on `ring`: `entries` entries of `stride` bytes, its doorbell slot at
    /// byte offset `slot` of the doorbell BAR, nothing taken yet and no MMIO window. QP,
    /// SRQ, shared send queue and control queue creation all start their queues this way.
    pub fn new(ring: PagedBuffer, entries: u32, stride: u32, slot: u64) -> Self {
        Self {
            ring,
            entries,
            stride,
            slot,
            taken: 0,
            window: None,
        }
    }

    /// Byte offset of entry `index` in the ring.
    pub fn entry_offset(&self, index: u32) -> u64 {
        u64::from(index % self.entries) * u64::from(self.stride)
    }
}

/// Limits a QP was created with.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    /// SGEs per send WQE.
    pub max_send_sge: u32,
    /// SGEs per receive WQE.
    pub max_recv_sge: u32,
    /// Inline bytes per send WQE.
    pub max_inline_data: u32,
}

/// Why a WQE could not be read; each maps to a completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WqeError {
    /// The ring is not reachable any more.
    Unreachable,
    /// More SGEs or inline bytes than the QP allows, or an opcode the device does not know;
    /// `wr_id` is the WQE's, for its completion.
    Malformed {
        /// The WR's ID, from the WQE's fixed part.
        wr_id: u64,
    },
}

impl WqeError {
    /// The ID of the WR whose WQE this is: the WQE's own when its fixed part was read, 0
    /// when not even that could be.
    pub fn wr_id(self) -> u64 {
        match self {
            WqeError::Unreachable => 0,
            WqeError::Malformed { wr_id } => wr_id,
        }
    }
}

/// A send WQE, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOp {
    /// Fixed part.
    pub wqe: SendWqe,
    /// Gather list (empty with inline data).
    pub sges: Vec<Sge>,
    /// Inline data.
    pub inline: Option<Vec<u8>>,
}

impl SendOp {
    /// Bytes the operation moves from or to local memory.
    pub fn length(&self) -> u64 {
        match &self.inline {
            Some(d) => d.len() as u64,
            None => self.sges.iter().map(|s| u64::from(s.length)).sum(),
        }
    }

    /// What stands in the send queue for a WQE that could not be read (`e`): nothing to
    /// send, and the WR's ID where the WQE gave it, so that its error completion names
    /// the WR the driver posted.
    pub fn unreadable(e: WqeError) -> Self {
        SendOp {
            wqe: SendWqe {
                wr_id: e.wr_id(),
                ..SendWqe::default()
            },
            sges: Vec::new(),
            inline: None,
        }
    }

    /// Whether the WR asks for a completion (or the QP signals all).
    pub fn signaled(&self, sq_sig_all: bool) -> bool {
        sq_sig_all || self.wqe.flags & send_flags::SIGNALED != 0
    }
}

/// Reads send WQE `index` of `sq`: from its MMIO window if the window holds that WQE
/// (and empties the window, see [`mmio`]), from the ring otherwise.
pub fn read_send(sq: &WorkQueue, caps: &QpCaps, env: &Env, index: u32) -> Result<SendOp, WqeError> {
    let db = env.doorbells;
    if let Some(w) = sq.window.filter(|&w| mmio::holds(db, w, index)) {
        let op = decode_send(
            |offset, buf| mmio::read(db, w, offset, buf),
            caps,
            mmio::WQE_ROOM,
        );
        mmio::release(db, w);
        return op;
    }
    let at = sq.entry_offset(index);
    decode_send(
        |offset, buf| sq.ring.read(env.r, at + offset, buf),
        caps,
        sq.stride,
    )
}

/// Decodes a send WQE that `read(offset, buf)` reads from wherever it is (a ring entry,
/// an MMIO window), of at most `room` bytes, checked against `caps`.
pub fn decode_send(
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
    caps: &QpCaps,
    room: u32,
) -> Result<SendOp, WqeError> {
    // One read for the fixed part and, as far as the entry has room, the first SGEs
    // after it: most WQEs have one or two, and a guest-memory read costs more than the
    // bytes it moves.
    let mut head = [0u8; 64 + HEAD_SGES * 16];
    let first = (room as usize).clamp(64, head.len());
    if !read(0, &mut head[..first]) {
        return Err(WqeError::Unreachable);
    }
    let wqe =
        SendWqe::read_from_bytes(&head[..64]).map_err(|_| WqeError::Malformed { wr_id: 0 })?;
    let malformed = WqeError::Malformed { wr_id: wqe.wr_id };
    if wqe.opcode > wr::REG_MR && !matches!(wqe.opcode, wr::FLUSH | wr::ATOMIC_WRITE) {
        return Err(malformed);
    }
    if matches!(wqe.opcode, wr::FLUSH | wr::ATOMIC_WRITE) {
        // Everything is in the fixed part (ABI 1.11): no SGEs, no inline data.
        if wqe.num_sge != 0 || wqe.flags & send_flags::INLINE != 0 {
            return Err(malformed);
        }
        return Ok(SendOp {
            wqe,
            sges: Vec::new(),
            inline: None,
        });
    }
    if wqe.opcode == wr::REG_MR {
        // The registration is where the RDMA fields are (`rnic_abi::fast_reg`): no SGEs,
        // no inline data; the requester reads the rest when it runs it.
        let flags = send_flags::SIGNALED | send_flags::FENCE;
        if wqe.num_sge != 0 || wqe.flags & !flags != 0 {
            return Err(malformed);
        }
        return Ok(SendOp {
            wqe,
            sges: Vec::new(),
            inline: None,
        });
    }
    if wqe.flags & send_flags::INLINE != 0 {
        if wqe.inline_len > caps.max_inline_data || u64::from(wqe.inline_len) + 64 > u64::from(room)
        {
            return Err(malformed);
        }
        let mut data = vec![0u8; wqe.inline_len as usize];
        if !read(64, &mut data) {
            return Err(WqeError::Unreachable);
        }
        return Ok(SendOp {
            wqe,
            sges: Vec::new(),
            inline: Some(data),
        });
    }
    let n = u32::from(wqe.num_sge);
    if n > caps.max_send_sge || 64 + u64::from(n) * 16 > u64::from(room) {
        return Err(malformed);
    }
    let end = 64 + n as usize * 16;
    let sges = if end <= first {
        sges_of(&head[64..end])
    } else {
        let mut raw = vec![0u8; end - 64];
        if !read(64, &mut raw) {
            return Err(WqeError::Unreachable);
        }
        sges_of(&raw)
    };
    Ok(SendOp {
        wqe,
        sges,
        inline: None,
    })
}

/// SGEs that [`decode_send`] reads together with the fixed part of a WQE.
const HEAD_SGES: usize = 4;

/// A receive WQE, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvOp {
    /// The WR's ID.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: Vec<Sge>,
}

impl RecvOp {
    /// Bytes the receive buffers hold.
    pub fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// Reads receive WQE number `index` of `rq`.
pub fn read_recv(
    rq: &WorkQueue,
    caps: &QpCaps,
    mem: &GuestMemoryMmap,
    index: u32,
) -> Result<RecvOp, WqeError> {
    let at = rq.entry_offset(index);
    let mut fixed = [0u8; 16];
    if !rq.ring.read(mem, at, &mut fixed) {
        return Err(WqeError::Unreachable);
    }
    let wqe = RecvWqe::read_from_bytes(&fixed).map_err(|_| WqeError::Malformed { wr_id: 0 })?;
    if wqe.num_sge > caps.max_recv_sge {
        return Err(WqeError::Malformed { wr_id: wqe.wr_id });
    }
    let sges = read_sges(rq, mem, at + 16, wqe.num_sge)?;
    Ok(RecvOp {
        wr_id: wqe.wr_id,
        sges,
    })
}

fn read_sges(q: &WorkQueue, mem: &GuestMemoryMmap, at: u64, n: u32) -> Result<Vec<Sge>, WqeError> {
    let mut raw = vec![0u8; n as usize * 16];
    if !q.ring.read(mem, at, &mut raw) {
        return Err(WqeError::Unreachable);
    }
    Ok(sges_of(&raw))
}

fn sges_of(raw: &[u8]) -> Vec<Sge> {
    let mut sges = Vec::with_capacity(raw.len() / 16);
    sges.extend(
        raw.chunks_exact(16)
            .filter_map(|c| Sge::read_from_bytes(c).ok()),
    );
    sges
}

/// Where an op is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpState {
    /// Waiting to be sent (or resent from packet `next_pkt`), or partly sent and held
    /// by the window.
    Queued,
    /// All its packets are out; waiting for acknowledgement or responses.
    Sent,
    /// Acknowledged or answered: ready to complete in order.
    Done,
}

/// A send WQE the requester has taken.
#[derive(Debug, Clone)]
pub struct Op {
    /// Its index in the send queue.
    pub index: u32,
    /// The WQE.
    pub op: SendOp,
    /// PSN of its first packet (valid once sent).
    pub first_psn: u32,
    /// PSNs it uses: packets for SEND and WRITE, response packets for READ, 1 for atomics.
    pub npsn: u32,
    /// Next packet to (re)send.
    pub next_pkt: u32,
    /// Life state.
    pub state: OpState,
    /// Completion status (errors are decided on the way).
    pub status: WcStatus,
    /// Which of a READ's response packets arrived (and so where a request for the rest
    /// starts); an atomic's one answer is its op's `Done`.
    pub answers: Answers,
    /// Whether the op holds a READ/atomic slot.
    pub holds_rd_atomic: bool,
    /// Whether it was ever sent (PSNs assigned).
    pub assigned: bool,
    /// The shared send queue entry it is, if it came from one (its completion goes
    /// there).
    pub shared: Option<SharedRef>,
    /// The UDP source port of the session its packets leave from, if its WQE named a
    /// session group (chosen before its first packet, kept for resends;
    /// `session::OWN_PORT`: the group named no assigned session).
    pub session_port: Option<u16>,
}

impl Op {
    /// PSN of its last packet.
    pub fn last_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npsn.saturating_sub(1))
    }

    /// Whether `p` falls inside the op's PSNs.
    pub fn contains(&self, p: u32) -> bool {
        self.assigned && psn::diff(p, self.first_psn) >= 0 && psn::diff(p, self.last_psn()) <= 0
    }

    /// Whether it is a local operation (LOCAL_INV, BIND_MW, REG_MR): it changes a key
    /// and sends nothing.
    pub fn is_local(&self) -> bool {
        matches!(self.op.wqe.opcode, wr::LOCAL_INV | wr::BIND_MW | wr::REG_MR)
    }

    /// Whether it is a READ, an atomic, a FLUSH or an ATOMIC WRITE (answered by
    /// responses, limited in number: the responder keeps an answer for each).
    pub fn is_rd_atomic(&self) -> bool {
        matches!(
            self.op.wqe.opcode,
            wr::RDMA_READ
                | wr::ATOMIC_CMP_AND_SWP
                | wr::ATOMIC_FETCH_AND_ADD
                | wr::FLUSH
                | wr::ATOMIC_WRITE
        )
    }

    /// Ends the op with `status`; it completes when its turn comes.
    pub fn fail(&mut self, status: WcStatus) {
        self.status = status;
        self.state = OpState::Done;
    }
}

/// Where a QP's op came from: entry `index` of shared send queue `ssqn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRef {
    /// The shared send queue.
    pub ssqn: u32,
    /// Which queue of that number (numbers are reused after `DESTROY_SHARED_SQ`).
    pub generation: u64,
    /// The entry's index (free-running, as the doorbell counts).
    pub index: u32,
}

/// The completion opcode (`wc::*`) of a send WR of `opcode` (`wr::*`).
pub fn send_completion(opcode: u8) -> u8 {
    match opcode {
        wr::RDMA_WRITE | wr::RDMA_WRITE_WITH_IMM => wc::RDMA_WRITE,
        wr::RDMA_READ => wc::RDMA_READ,
        wr::ATOMIC_CMP_AND_SWP => wc::COMP_SWAP,
        wr::ATOMIC_FETCH_AND_ADD => wc::FETCH_ADD,
        wr::LOCAL_INV => wc::LOCAL_INV,
        wr::BIND_MW => wc::BIND_MW,
        wr::REG_MR => wc::REG_MR,
        wr::FLUSH => wc::FLUSH,
        wr::ATOMIC_WRITE => wc::ATOMIC_WRITE,
        _ => wc::SEND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    const CAPS: QpCaps = QpCaps {
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };

    fn decode(bytes: &[u8]) -> Result<SendOp, WqeError> {
        decode_send(
            |offset, buf| match bytes.get(offset as usize..offset as usize + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            },
            &CAPS,
            128,
        )
    }

    #[test]
    fn a_reg_mr_wqe_has_no_sges_no_inline_data_and_only_its_two_flags() {
        let good = SendWqe {
            wr_id: 7,
            opcode: wr::REG_MR,
            flags: send_flags::SIGNALED | send_flags::FENCE,
            session_group: 12, // FastRegWqe::page_shift
            inline_len: 2,     // FastRegWqe::page_count
            ..SendWqe::default()
        };
        let mut bytes = good.as_bytes().to_vec();
        bytes.resize(128, 0);
        let op = decode(&bytes).unwrap();
        assert_eq!((op.wqe, op.sges.len(), op.inline), (good, 0, None));
        assert_eq!(send_completion(wr::REG_MR), wc::REG_MR);
        for bad in [
            SendWqe { num_sge: 1, ..good },
            SendWqe {
                flags: send_flags::INLINE,
                ..good
            },
            SendWqe { opcode: 11, ..good },
            SendWqe { opcode: 16, ..good },
        ] {
            let mut bytes = bad.as_bytes().to_vec();
            bytes.resize(128, 0);
            assert_eq!(decode(&bytes), Err(WqeError::Malformed { wr_id: 7 }));
        }
    }

    #[test]
    fn flush_and_atomic_write_wqes_carry_everything_in_their_fixed_part() {
        for opcode in [wr::FLUSH, wr::ATOMIC_WRITE] {
            let good = SendWqe {
                wr_id: 9,
                opcode,
                flags: send_flags::SIGNALED | send_flags::FENCE,
                remote_addr: 0x1000,
                rkey: 0x1234,
                compare_add: 0x0807_0605_0403_0201,
                imm_or_inv: rnic_abi::verbs::flush::feth(1, 1),
                ..SendWqe::default()
            };
            let mut bytes = good.as_bytes().to_vec();
            bytes.resize(128, 0);
            let op = decode(&bytes).unwrap();
            assert_eq!((op.wqe, op.sges.len(), op.inline), (good, 0, None));
            for bad in [
                SendWqe { num_sge: 1, ..good },
                SendWqe {
                    flags: send_flags::INLINE,
                    ..good
                },
            ] {
                let mut bytes = bad.as_bytes().to_vec();
                bytes.resize(128, 0);
                assert_eq!(decode(&bytes), Err(WqeError::Malformed { wr_id: 9 }));
            }
        }
        assert_eq!(send_completion(wr::FLUSH), wc::FLUSH);
        assert_eq!(send_completion(wr::ATOMIC_WRITE), wc::ATOMIC_WRITE);
    }

    /// Found by the `send` fuzz target: a malformed WQE completed with wr_id 0, so the
    /// driver could not tell which of its WRs had failed.
    #[test]
    fn a_malformed_send_wqe_completes_under_its_own_wr_id() {
        let good = SendWqe {
            wr_id: 0x5eed_0001,
            opcode: wr::SEND,
            ..SendWqe::default()
        };
        let cases = [
            SendWqe {
                opcode: 0x72,
                ..good
            },
            SendWqe { num_sge: 3, ..good },
            SendWqe {
                flags: send_flags::INLINE,
                inline_len: 65,
                ..good
            },
        ];
        for wqe in cases {
            let mut bytes = wqe.as_bytes().to_vec();
            bytes.resize(128, 0);
            let e = decode(&bytes).expect_err("malformed");
            assert_eq!(e, WqeError::Malformed { wr_id: 0x5eed_0001 }, "{wqe:?}");
            assert_eq!(SendOp::unreadable(e).wqe.wr_id, 0x5eed_0001);
        }
        // A WQE that cannot be read at all has no ID to give.
        assert_eq!(decode(&[0; 10]), Err(WqeError::Unreachable));
        assert_eq!(SendOp::unreadable(WqeError::Unreachable).wqe.wr_id, 0);
        // And a good one decodes.
        let mut bytes = good.as_bytes().to_vec();
        bytes.resize(128, 0);
        assert_eq!(decode(&bytes).map(|op| op.wqe.wr_id), Ok(0x5eed_0001));
    }
}
