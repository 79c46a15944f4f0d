//! Completion queues and the event queue: rings the device writes and the driver reads,
//! with an owner phase bit, a consumer index read back from the doorbell slot so that an
//! unconsumed entry is never overwritten, and arming for completion events.

use std::sync::atomic::{fence, Ordering};

use rnic_abi::verbs::{owner_phase, wc_flags, Cqe, Eqe, WcStatus};
use vm_memory::GuestMemoryMmap;
use zerocopy::IntoBytes;

use super::mkey::pages::PagedBuffer;
use crate::doorbell::DoorbellBar;

/// Writes `entry` (whose last byte is the owner byte) at `index` of `ring`, owner last.
fn write_entry(
    ring: &PagedBuffer,
    mem: &GuestMemoryMmap,
    index: u32,
    entries: u32,
    entry: &mut [u8],
    owner_at: usize,
) -> bool {
    let size = entry.len() as u64;
    let at = u64::from(index % entries) * size;
    entry[owner_at] = owner_phase(index, entries);
    let owner = entry[owner_at];
    // The body first, then (after a release fence) the owner byte that hands it over.
    entry[owner_at] = owner ^ 1;
    if !ring.write(mem, at, entry) {
        return false;
    }
    fence(Ordering::Release);
    ring.write(mem, at + owner_at as u64, &[owner])
}

/// What happened to a completion the device tried to post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// Written; `event` says whether the CQ was armed for it (a completion event is due).
    Written {
        /// An event is due.
        event: bool,
    },
    /// The CQ is full (or already in error): nothing was written, the CQ is now in error.
    Overrun,
    /// The ring is no longer reachable: the CQ is now in error.
    Unreachable,
}

/// A completion queue.
#[derive(Debug)]
pub struct CompletionQueue {
    ring: PagedBuffer,
    entries: u32,
    produced: u32,
    /// Byte offset of the doorbell slot in the doorbell BAR.
    slot: u64,
    /// The arm sequence number the device last acted on.
    arm_handled: u32,
    /// Set on overrun or DMA failure; the CQ takes no more completions.
    pub error: bool,
    /// QPs that use this CQ.
    pub users: usize,
}

impl CompletionQueue {
    /// A CQ of `entries` entries over `ring`, with its doorbell slot at `slot`.
    pub fn new(ring: PagedBuffer, entries: u32, slot: u64) -> Self {
        Self {
            ring,
            entries,
            produced: 0,
            slot,
            arm_handled: 0,
            error: false,
            users: 0,
        }
    }

    /// Byte offset of the CQ's doorbell slot in the doorbell BAR.
    pub fn slot(&self) -> u64 {
        self.slot
    }

    /// Moves the CQ's doorbell slot (the CQ moved to another function, `MIGRATE_QP`).
    pub fn set_slot(&mut self, slot: u64) {
        self.slot = slot;
    }

    /// The ring's pages.
    pub fn ring(&self) -> &PagedBuffer {
        &self.ring
    }

    /// Posts `cqe`.
    pub fn post(&mut self, mem: &GuestMemoryMmap, doorbells: &DoorbellBar, mut cqe: Cqe) -> Posted {
        if self.error {
            return Posted::Overrun;
        }
        let consumed = doorbells.read32(self.slot).unwrap_or(0);
        if self.produced.wrapping_sub(consumed) >= self.entries {
            self.error = true;
            return Posted::Overrun;
        }
        let owner_at = std::mem::offset_of!(Cqe, owner);
        cqe.owner = 0;
        if !write_entry(
            &self.ring,
            mem,
            self.produced,
            self.entries,
            cqe.as_mut_bytes(),
            owner_at,
        ) {
            self.error = true;
            return Posted::Unreachable;
        }
        self.produced = self.produced.wrapping_add(1);
        let arm = doorbells.read32(self.slot + 4).unwrap_or(0);
        let (seq, solicited_only) = (arm >> 1, arm & 1 != 0);
        let wanted = !solicited_only
            || cqe.wc_flags & wc_flags::SOLICITED != 0
            || cqe.status != WcStatus::Success as u8;
        let event = seq != self.arm_handled && wanted;
        if event {
            self.arm_handled = seq;
        }
        Posted::Written { event }
    }

    /// Entries of the ring.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Completions written so far.
    pub fn produced(&self) -> u32 {
        self.produced
    }

    /// Moves the CQ to `ring` of `entries` entries (`RESIZE_CQ`): the completions from
    /// the driver's consumer index `consumed` up to those produced are copied, each to its
    /// free-running index in the new ring with the new ring's owner phase, and only the
    /// new ring is written from then on. On an error nothing changes.
    pub fn resize(
        &mut self,
        ring: PagedBuffer,
        entries: u32,
        consumed: u32,
        mem: &GuestMemoryMmap,
    ) -> Result<(), ResizeError> {
        if self.error {
            return Err(ResizeError::InError);
        }
        let pending = self.produced.wrapping_sub(consumed);
        if pending > self.entries || pending > entries {
            return Err(ResizeError::TooSmall);
        }
        let owner_at = std::mem::offset_of!(Cqe, owner);
        let mut cqe = [0u8; size_of::<Cqe>()];
        for i in 0..pending {
            let index = consumed.wrapping_add(i);
            let at = u64::from(index % self.entries) * cqe.len() as u64;
            if !self.ring.read(mem, at, &mut cqe)
                || !write_entry(&ring, mem, index, entries, &mut cqe, owner_at)
            {
                return Err(ResizeError::Unreachable);
            }
        }
        self.ring = ring;
        self.entries = entries;
        Ok(())
    }
}

/// Why [`CompletionQueue::resize`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeError {
    /// The CQ overran or lost its ring: it takes nothing more.
    InError,
    /// The new ring cannot hold the completions not consumed yet.
    TooSmall,
    /// A ring is not where the page lists say.
    Unreachable,
}

/// The function's event queue.
#[derive(Debug)]
pub struct EventQueue {
    ring: PagedBuffer,
    entries: u32,
    produced: u32,
    slot: u64,
    /// MSI-X vector, or `NO_VECTOR`.
    pub vector: u32,
    /// Events dropped because the ring was full.
    pub dropped: u64,
}

impl EventQueue {
    /// An EQ of `entries` entries over `ring`, signalling `vector`.
    pub fn new(ring: PagedBuffer, entries: u32, slot: u64, vector: u32) -> Self {
        Self {
            ring,
            entries,
            produced: 0,
            slot,
            vector,
            dropped: 0,
        }
    }

    /// Posts an event; returns whether it was written. A full EQ drops the event and
    /// counts it: the driver is told by the gap in nothing but the counter, as on hardware
    /// where an EQ overrun is itself a fatal condition.
    pub fn post(
        &mut self,
        mem: &GuestMemoryMmap,
        doorbells: &DoorbellBar,
        event_type: u8,
        object: u32,
    ) -> bool {
        let consumed = doorbells.read32(self.slot).unwrap_or(0);
        if self.produced.wrapping_sub(consumed) >= self.entries {
            self.dropped += 1;
            log::warn!("event queue full: event {event_type:#x} for object {object} dropped");
            return false;
        }
        let mut eqe = Eqe {
            object,
            data: 0,
            event_type,
            reserved: [0; 6],
            owner: 0,
        };
        let owner_at = std::mem::offset_of!(Eqe, owner);
        if !write_entry(
            &self.ring,
            mem,
            self.produced,
            self.entries,
            eqe.as_mut_bytes(),
            owner_at,
        ) {
            self.dropped += 1;
            return false;
        }
        self.produced = self.produced.wrapping_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress};
    use zerocopy::FromBytes;

    fn setup(entries: u32) -> (GuestMemoryMmap, CompletionQueue, DoorbellBar) {
        let (m, ring) = crate::rdma::mkey::pages::one_page(0, u64::from(entries) * 32);
        (
            m,
            CompletionQueue::new(ring, entries, 0x100),
            DoorbellBar::new(1).unwrap(),
        )
    }

    fn read_cqe(m: &GuestMemoryMmap, i: u64) -> Cqe {
        let mut b = [0u8; 32];
        m.read_slice(&mut b, GuestAddress(0x11000 + i * 32))
            .unwrap();
        Cqe::read_from_bytes(&b).unwrap()
    }

    #[test]
    fn entries_carry_the_owner_phase_and_never_overwrite_unconsumed_ones() {
        let (m, mut cq, db) = setup(2);
        for i in 0..2 {
            assert_eq!(
                cq.post(
                    &m,
                    &db,
                    Cqe {
                        wr_id: i,
                        ..Cqe::default()
                    }
                ),
                Posted::Written { event: false }
            );
        }
        assert_eq!(read_cqe(&m, 0).owner, 1);
        assert_eq!(read_cqe(&m, 1).wr_id, 1);
        assert_eq!(
            cq.post(
                &m,
                &db,
                Cqe {
                    wr_id: 9,
                    ..Cqe::default()
                }
            ),
            Posted::Overrun
        );
        assert!(cq.error);
        assert_eq!(read_cqe(&m, 0).wr_id, 0, "not overwritten");
    }

    #[test]
    fn a_resize_moves_the_unconsumed_entries_to_their_indexes_in_the_new_ring() {
        let (m, mut cq, db) = setup(4);
        let post = |cq: &mut CompletionQueue, wr_id| {
            let cqe = Cqe {
                wr_id,
                ..Cqe::default()
            };
            assert_eq!(cq.post(&m, &db, cqe), Posted::Written { event: false });
        };
        // Six posted, four consumed: entries 4 and 5 (second lap of 4) are pending.
        for i in 0..4 {
            post(&mut cq, i);
        }
        db.write32(0x100, 4);
        post(&mut cq, 4);
        post(&mut cq, 5);
        // The new ring: page 0x12000, its list at 0x10008.
        m.write_slice(&0x12000u64.to_le_bytes(), GuestAddress(0x10008))
            .unwrap();
        let list = rnic_abi::verbs::PageList::flat(0x10008, 1);
        let load = |entries: u32| PagedBuffer::load(&list, 0, u64::from(entries) * 32, &m).unwrap();
        assert_eq!(cq.resize(load(2), 2, 3, &m), Err(ResizeError::TooSmall));
        cq.resize(load(8), 8, 4, &m).unwrap();
        let new = |i: u64| {
            let mut b = [0u8; 32];
            m.read_slice(&mut b, GuestAddress(0x12000 + i * 32))
                .unwrap();
            Cqe::read_from_bytes(&b).unwrap()
        };
        // Indexes 4 and 5 of an 8-entry ring, first lap.
        assert_eq!((new(4).wr_id, new(4).owner), (4, owner_phase(4, 8)));
        assert_eq!((new(5).wr_id, new(5).owner), (5, owner_phase(5, 8)));
        // The next completions go to the new ring, from index 6 on, none to the old one.
        let old_before = read_cqe(&m, 2);
        post(&mut cq, 6);
        assert_eq!(new(6).wr_id, 6);
        assert_eq!(read_cqe(&m, 2), old_before);
        // A CQ in error stays as it is.
        cq.error = true;
        assert_eq!(cq.resize(load(8), 8, 7, &m), Err(ResizeError::InError));
    }

    #[test]
    fn consumed_entries_make_room_with_the_next_phase() {
        let (m, mut cq, db) = setup(2);
        cq.post(&m, &db, Cqe::default());
        cq.post(&m, &db, Cqe::default());
        db.write32(0x100, 1);
        assert_eq!(
            cq.post(
                &m,
                &db,
                Cqe {
                    wr_id: 5,
                    ..Cqe::default()
                }
            ),
            Posted::Written { event: false }
        );
        let e = read_cqe(&m, 0);
        assert_eq!((e.wr_id, e.owner), (5, 0));
    }

    #[test]
    fn arming_gives_one_event_for_the_next_completion() {
        let (m, mut cq, db) = setup(8);
        db.write32(0x104, 1 << 1);
        assert_eq!(
            cq.post(&m, &db, Cqe::default()),
            Posted::Written { event: true }
        );
        assert_eq!(
            cq.post(&m, &db, Cqe::default()),
            Posted::Written { event: false }
        );
        // Solicited-only arming ignores ordinary completions.
        db.write32(0x104, 2 << 1 | 1);
        assert_eq!(
            cq.post(&m, &db, Cqe::default()),
            Posted::Written { event: false }
        );
        let solicited = Cqe {
            wc_flags: wc_flags::SOLICITED,
            ..Cqe::default()
        };
        assert_eq!(cq.post(&m, &db, solicited), Posted::Written { event: true });
        // An error completion also ends a solicited-only wait.
        db.write32(0x104, 3 << 1 | 1);
        let error = Cqe {
            status: WcStatus::RemAccessErr as u8,
            ..Cqe::default()
        };
        assert_eq!(cq.post(&m, &db, error), Posted::Written { event: true });
    }
}
