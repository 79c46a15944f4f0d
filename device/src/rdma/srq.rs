//! Shared receive queues (`rnic_abi::srq`): one receive ring that many RC QPs of a PD
//! take their receives from, in posting order, whichever QP a message arrives on.
//!
//! The responder asks [`super::RdmaState::next_recv`] for a QP's next receive and
//! [`super::RdmaState::take_recv`] to consume it; both go to the QP's own receive queue or to
//! its SRQ, so the transport stages do not care which it is. Which QP uses which SRQ is
//! kept here ([`SrqTable`]), not in the QP.

use std::collections::BTreeMap;

use rnic_abi::cmd::Status;
use rnic_abi::srq::MAX_SRQN;

use vm_memory::GuestMemoryMmap;

use super::env::Env;
use super::error::VerbsError;
use super::mkey::pages::PagedBuffer;
use super::qp::Qp;
use super::wqe::{read_recv, QpCaps, RecvOp, WorkQueue, WqeError};

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// Protection domain.
    pub pdn: u32,
    /// The ring, its doorbell slot and how far the device took it.
    pub wq: WorkQueue,
    /// SGEs per WQE (as `max_recv_sge`).
    pub caps: QpCaps,
    /// The armed limit, 0 when disarmed.
    pub limit: u32,
}

impl Srq {
    /// Moves the SRQ to `ring` of `entries` entries (`RESIZE_SRQ`): the WQEs from those
    /// the device took up to `posted` (the driver's count in the doorbell slot) are copied
    /// from the old ring (read in `r`), each to its free-running index in the new one
    /// (written in `w`), and only the new ring is read from then on, so the driver keeps
    /// its producer index. The stride and the armed limit stay. On an error nothing
    /// changes.
    pub fn resize(
        &mut self,
        ring: PagedBuffer,
        entries: u32,
        posted: u32,
        r: &GuestMemoryMmap,
        w: &GuestMemoryMmap,
    ) -> Result<(), ResizeError> {
        let wq = &self.wq;
        let pending = posted.wrapping_sub(wq.taken);
        // More than the old ring holds: the count is not one the driver could post.
        if pending > wq.entries || pending > entries {
            return Err(ResizeError::TooSmall);
        }
        let mut wqe = vec![0u8; wq.stride as usize];
        for i in 0..pending {
            let index = wq.taken.wrapping_add(i);
            let at = u64::from(index % entries) * u64::from(wq.stride);
            if !wq.ring.read(r, wq.entry_offset(index), &mut wqe) || !ring.write(w, at, &wqe) {
                return Err(ResizeError::Unreachable);
            }
        }
        self.wq.ring = ring;
        self.wq.entries = entries;
        Ok(())
    }
}

/// Why [`Srq::resize`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeError {
    /// The new ring cannot hold the WQEs posted and not taken yet (or the posted count
    /// is more than the old ring holds).
    TooSmall,
    /// A ring is not where the page lists say.
    Unreachable,
}

/// The SRQs of one function and the QPs that use them.
#[derive(Debug, Default)]
pub struct SrqTable {
    pub(super) srqs: BTreeMap<u32, Srq>,
    /// QP number -> SRQ number.
    pub(super) attached: BTreeMap<u32, u32>,
    next: u32,
}

impl SrqTable {
    /// The SRQ QP `qpn` takes its receives from, if any.
    pub fn of(&self, qpn: u32) -> Option<u32> {
        self.attached.get(&qpn).copied()
    }

    /// SRQ `srqn`, or the `NOT_FOUND` response.
    pub(super) fn get(&self, srqn: u32) -> Result<&Srq, VerbsError> {
        self.srqs
            .get(&srqn)
            .ok_or(VerbsError::new(Status::NotFound, srqn))
    }

    pub(super) fn get_mut(&mut self, srqn: u32) -> Result<&mut Srq, VerbsError> {
        self.srqs
            .get_mut(&srqn)
            .ok_or(VerbsError::new(Status::NotFound, srqn))
    }

    /// QPs that use SRQ `srqn`.
    pub fn users(&self, srqn: u32) -> usize {
        self.attached.values().filter(|&&s| s == srqn).count()
    }

    /// SRQs of `pdn`.
    pub fn count_in_pd(&self, pdn: u32) -> usize {
        self.srqs.values().filter(|s| s.pdn == pdn).count()
    }

    /// QP `qpn` is gone.
    pub fn detach(&mut self, qpn: u32) {
        self.attached.remove(&qpn);
    }

    /// An unused SRQ number: they count up through 1 ..= [`MAX_SRQN`], skipping those in use.
    pub(super) fn free_number(&mut self) -> Option<u32> {
        (0..MAX_SRQN).find_map(|_| {
            self.next = if self.next >= MAX_SRQN {
                1
            } else {
                self.next + 1
            };
            (!self.srqs.contains_key(&self.next)).then_some(self.next)
        })
    }
}

/// WQEs posted to `wq` and not yet taken, by its doorbell.
pub(super) fn outstanding(wq: &WorkQueue, env: &Env) -> u32 {
    let posted = env.doorbells.read32(wq.slot).unwrap_or(wq.taken);
    posted.wrapping_sub(wq.taken)
}

impl SrqTable {
    /// The receive WQE the next message on `qp` would take, from its SRQ or its own
    /// receive queue; `None` if none is posted (the responder answers RNR).
    pub fn next_recv(&self, qp: &Qp, env: &Env) -> Option<Result<RecvOp, WqeError>> {
        let (wq, caps) = match self.of(qp.qpn) {
            Some(srqn) => {
                let srq = self.srqs.get(&srqn)?;
                (&srq.wq, &srq.caps)
            }
            None => (&qp.rq, &qp.caps),
        };
        (outstanding(wq, env) != 0).then(|| read_recv(wq, caps, env.r, wq.taken))
    }

    /// Consumes the WQE [`SrqTable::next_recv`] returned. On an SRQ whose limit is armed
    /// and which now holds fewer WQEs than the limit, disarms the limit and returns the
    /// SRQ's number: `SRQ_LIMIT_REACHED` is due.
    pub fn take_recv(&mut self, qp: &mut Qp, env: &Env) -> Option<u32> {
        let Some(srqn) = self.of(qp.qpn) else {
            qp.rq.taken = qp.rq.taken.wrapping_add(1);
            return None;
        };
        let srq = self.srqs.get_mut(&srqn)?;
        srq.wq.taken = srq.wq.taken.wrapping_add(1);
        if srq.limit != 0 && outstanding(&srq.wq, env) < srq.limit {
            srq.limit = 0;
            return Some(srqn);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An SRQ of 4 WQEs of stride 32 (one SGE) on the page at 0x11000, its slot at 0x100,
    /// with 7 posted in all (wr_ids 100 + index) and 5 taken: indexes 5 and 6 (entries 1
    /// and 2 of the second lap) are pending. And a loader of a new ring of N entries on
    /// the page at 0x12000 (its page list at 0x10008).
    fn pending() -> (
        GuestMemoryMmap,
        Srq,
        impl Fn(&GuestMemoryMmap, u32) -> PagedBuffer,
    ) {
        use vm_memory::{Bytes, GuestAddress};
        let (m, ring) = crate::rdma::mkey::pages::one_page(0, 4 * 32);
        let mut srq = Srq {
            pdn: 1,
            wq: super::super::wqe::WorkQueue::new(ring, 4, 32, 0x100),
            caps: QpCaps {
                max_send_sge: 0,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            limit: 0,
        };
        for index in 0..7u64 {
            let mut wqe = [0u8; 32];
            wqe[..8].copy_from_slice(&(index + 100).to_le_bytes());
            wqe[8..12].copy_from_slice(&1u32.to_le_bytes());
            m.write_slice(&wqe, GuestAddress(0x11000 + index % 4 * 32))
                .unwrap();
        }
        srq.wq.taken = 5;
        m.write_slice(&0x12000u64.to_le_bytes(), GuestAddress(0x10008))
            .unwrap();
        let load = |m: &GuestMemoryMmap, entries: u32| {
            let list = rnic_abi::verbs::PageList::flat(0x10008, 1);
            PagedBuffer::load(&list, 0, u64::from(entries) * 32, m).unwrap()
        };
        (m, srq, load)
    }

    /// The wr_id of entry `slot` of the new ring.
    fn id_at(m: &GuestMemoryMmap, slot: u64) -> u64 {
        use vm_memory::{Bytes, GuestAddress};
        let mut b = [0u8; 8];
        m.read_slice(&mut b, GuestAddress(0x12000 + slot * 32))
            .unwrap();
        u64::from_le_bytes(b)
    }

    #[test]
    fn a_resize_moves_the_untaken_wqes_to_their_indexes_in_the_new_ring() {
        let (m, mut s, load) = pending();
        // Too small for what is pending, or a posted count the old ring cannot hold.
        assert_eq!(
            s.resize(load(&m, 1), 1, 7, &m, &m),
            Err(ResizeError::TooSmall)
        );
        assert_eq!(
            s.resize(load(&m, 8), 8, 10, &m, &m),
            Err(ResizeError::TooSmall)
        );
        assert_eq!(s.wq.entries, 4);
        s.resize(load(&m, 8), 8, 7, &m, &m).unwrap();
        assert_eq!((s.wq.entries, s.wq.stride, s.wq.taken), (8, 32, 5));
        // Indexes 5 and 6 of an 8-entry ring.
        assert_eq!((id_at(&m, 5), id_at(&m, 6)), (105, 106));
        // The device reads them there, at its own index.
        let caps = s.caps;
        assert_eq!(read_recv(&s.wq, &caps, &m, 5).unwrap().wr_id, 105);
    }

    #[test]
    fn a_shrink_wraps_the_untaken_wqes_in_the_smaller_ring() {
        let (m, mut s, load) = pending();
        // Index 5 goes to entry 1 of 2, index 6 to entry 0.
        s.resize(load(&m, 2), 2, 7, &m, &m).unwrap();
        assert_eq!((id_at(&m, 1), id_at(&m, 0)), (105, 106));
    }

    #[test]
    fn srq_numbers_skip_those_in_use_and_wrap() {
        let mut t = SrqTable::default();
        assert_eq!(t.free_number(), Some(1));
        t.next = MAX_SRQN - 1;
        assert_eq!(t.free_number(), Some(MAX_SRQN));
        assert_eq!(t.free_number(), Some(1));
    }

    #[test]
    fn attachments_are_counted_per_srq() {
        let mut t = SrqTable::default();
        t.attached.insert(0x11, 1);
        t.attached.insert(0x12, 1);
        t.attached.insert(0x13, 2);
        assert_eq!((t.users(1), t.users(2), t.users(3)), (2, 1, 0));
        t.detach(0x11);
        assert_eq!(t.users(1), 1);
        assert_eq!(t.of(0x13), Some(2));
        assert_eq!(t.of(0x11), None);
    }
}
