//! One Ethernet queue's ring of descriptors in driver memory, its doorbell slot and its
//! interrupt (docs/hardware-interface.md §15.2, §15.4): what a send queue and a receive
//! queue have in common.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use rnic_abi::eth::{EthDesc, EthQueueStats};
use vm_memory::GuestMemoryMmap;
use zerocopy::{FromBytes, IntoBytes};

use crate::doorbell::DoorbellBar;
use crate::rdma::mkey::pages::PagedBuffer;

/// Bytes of a descriptor.
const DESC: u64 = size_of::<EthDesc>() as u64;
/// Offset of `len` in a descriptor.
const LEN_AT: u64 = 8;
/// Offset of `status` in a descriptor.
const STATUS_AT: u64 = 14;

/// A queue's ring and its progress.
#[derive(Debug)]
pub struct Ring {
    ring: PagedBuffer,
    entries: u32,
    /// BAR2 offset of the queue's doorbell slot.
    slot: u64,
    /// Descriptors the device took and wrote back, in all (free-running).
    pub completed: u32,
    /// The posted count as last read.
    posted: u32,
    vector: Option<u16>,
    moderation: Duration,
    /// The arm sequence number last acted on; 0 at creation, as the slot.
    arm_sequence: u16,
    /// Armed: the next completion past `seen` signals the vector.
    armed: bool,
    /// Completions the driver said it had seen when it last armed (low 16 bits).
    seen: u16,
    last_interrupt: Option<Instant>,
    /// The ring could not be read or written: the queue does nothing more.
    pub broken: bool,
    /// The queue's counters.
    pub stats: EthQueueStats,
}

impl Ring {
    /// A ring of `entries` descriptors in `ring`, whose doorbell slot is at BAR2 offset
    /// `slot`.
    pub fn new(
        ring: PagedBuffer,
        entries: u32,
        slot: u64,
        vector: Option<u16>,
        moderation: Duration,
    ) -> Self {
        Self {
            ring,
            entries,
            slot,
            completed: 0,
            posted: 0,
            vector,
            moderation,
            arm_sequence: 0,
            armed: false,
            seen: 0,
            last_interrupt: None,
            broken: false,
            stats: EthQueueStats::default(),
        }
    }

    /// Descriptors posted and not yet taken, from the slot's posted count; `None` (and
    /// the queue broken) if the driver claims more than the ring holds.
    pub fn outstanding(&mut self, doorbells: &DoorbellBar) -> Option<u32> {
        if self.broken {
            return None;
        }
        self.posted = doorbells.read32(self.slot).unwrap_or(self.posted);
        self.stats.posted = self.posted;
        let n = self.posted.wrapping_sub(self.completed);
        if n > self.entries {
            self.broken = true;
            return None;
        }
        Some(n)
    }

    /// The descriptor `k` places after the last one completed; `None` (and the queue
    /// broken) if the ring is not in mapped memory any more.
    pub fn descriptor(&mut self, mem: &GuestMemoryMmap, k: u32) -> Option<EthDesc> {
        let at = self.at(k);
        let mut bytes = [0u8; DESC as usize];
        if !self.ring.read(mem, at, &mut bytes) {
            self.broken = true;
            return None;
        }
        EthDesc::read_from_bytes(&bytes).ok()
    }

    /// Writes back descriptor `k` (counted from the last completed): its `len`, if
    /// given, then, after a release fence, its `status`. False (and the queue broken) if
    /// the ring is not in mapped memory any more.
    pub fn write_back(
        &mut self,
        mem: &GuestMemoryMmap,
        k: u32,
        len: Option<u32>,
        status: u16,
    ) -> bool {
        let at = self.at(k);
        if let Some(len) = len {
            if !self.ring.write(mem, at + LEN_AT, len.as_bytes()) {
                self.broken = true;
                return false;
            }
        }
        // What the descriptor describes (a received frame, its length) before the status
        // that hands it to the driver.
        fence(Ordering::Release);
        if !self.ring.write(mem, at + STATUS_AT, status.as_bytes()) {
            self.broken = true;
            return false;
        }
        true
    }

    /// The driver's descriptors up to `k` (counted from the last completed) are done.
    pub fn complete(&mut self, n: u32) {
        self.completed = self.completed.wrapping_add(n);
        self.stats.completed = self.completed;
    }

    fn at(&self, k: u32) -> u64 {
        u64::from(self.completed.wrapping_add(k) % self.entries) * DESC
    }

    /// Reads the arm word and decides whether the queue's vector is due now: returns the
    /// vector to signal, and, when moderation holds an interrupt back, sets `deadline`
    /// to when it may fire.
    pub fn interrupt_due(
        &mut self,
        doorbells: &DoorbellBar,
        now: Instant,
        deadline: &mut Option<Instant>,
    ) -> Option<u16> {
        let word = doorbells.read32(self.slot + 4).unwrap_or(0);
        let sequence = (word >> 16) as u16;
        if sequence != self.arm_sequence {
            self.arm_sequence = sequence;
            self.armed = true;
            self.seen = word as u16;
        }
        if !self.armed || self.completed as u16 == self.seen {
            return None;
        }
        let vector = self.vector?;
        if let Some(last) = self.last_interrupt {
            let allowed = last + self.moderation;
            if now < allowed {
                *deadline = Some(deadline.map_or(allowed, |d| d.min(allowed)));
                return None;
            }
        }
        self.armed = false;
        self.last_interrupt = Some(now);
        self.stats.interrupts += 1;
        Some(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::PageList;
    use vm_memory::{Bytes, GuestAddress};

    fn ring_in_memory(entries: u32) -> (GuestMemoryMmap, Ring, DoorbellBar) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x4000)]).unwrap();
        mem.write_obj(0x1000u64, GuestAddress(0)).unwrap();
        let list = PageList::flat(0, 1);
        let buffer = PagedBuffer::load(&list, 0, u64::from(entries) * DESC, &mem).unwrap();
        let doorbells = DoorbellBar::new(1).unwrap();
        let ring = Ring::new(buffer, entries, 0x100, Some(3), Duration::ZERO);
        (mem, ring, doorbells)
    }

    #[test]
    fn an_armed_queue_signals_once_per_arm_and_at_once_when_it_missed_completions() {
        let (_mem, mut ring, db) = ring_in_memory(8);
        let now = Instant::now();
        let mut deadline = None;
        ring.complete(2);
        // Never armed: no interrupt.
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), None);
        // Armed having seen 0 of the 2: fires at once, then not again.
        db.write32(0x104, rnic_abi::eth::arm_word(1, 0));
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), Some(3));
        ring.complete(1);
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), None);
        // Armed having seen all 3: quiet until the next completion.
        db.write32(0x104, rnic_abi::eth::arm_word(2, 3));
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), None);
        ring.complete(1);
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), Some(3));
        assert_eq!(ring.stats.interrupts, 2);
    }

    #[test]
    fn moderation_holds_the_next_interrupt_back_and_names_when() {
        let (_mem, mut ring, db) = ring_in_memory(8);
        ring.moderation = Duration::from_millis(5);
        let now = Instant::now();
        let mut deadline = None;
        ring.complete(1);
        db.write32(0x104, rnic_abi::eth::arm_word(1, 0));
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), Some(3));
        ring.complete(1);
        db.write32(0x104, rnic_abi::eth::arm_word(2, 1));
        assert_eq!(ring.interrupt_due(&db, now, &mut deadline), None);
        assert_eq!(deadline, Some(now + Duration::from_millis(5)));
        let later = now + Duration::from_millis(5);
        assert_eq!(ring.interrupt_due(&db, later, &mut deadline), Some(3));
    }

    #[test]
    fn a_driver_that_posts_more_than_the_ring_holds_breaks_its_queue() {
        let (mem, mut ring, db) = ring_in_memory(8);
        db.write32(0x100, 9);
        assert_eq!(ring.outstanding(&db), None);
        assert!(ring.broken);
        // A broken queue reads nothing more.
        db.write32(0x100, 1);
        assert_eq!(ring.outstanding(&db), None);
        let _ = mem;
    }

    #[test]
    fn descriptors_are_read_and_written_back_where_the_count_says() {
        let (mem, mut ring, db) = ring_in_memory(8);
        let d = EthDesc {
            addr: 0x2000,
            len: 64,
            flags: 0,
            status: 0,
        };
        // Descriptor 7, then (wrapping) 0.
        ring.complete(7);
        mem.write_slice(d.as_bytes(), GuestAddress(0x1000 + 7 * 16))
            .unwrap();
        db.write32(0x100, 8);
        assert_eq!(ring.outstanding(&db), Some(1));
        assert_eq!(ring.descriptor(&mem, 0), Some(d));
        assert!(ring.write_back(&mem, 0, Some(60), 1));
        let mut raw = [0u8; 16];
        mem.read_slice(&mut raw, GuestAddress(0x1000 + 7 * 16))
            .unwrap();
        let back = EthDesc::read_from_bytes(&raw).unwrap();
        assert_eq!((back.len, back.status), (60, 1));
        ring.complete(1);
        assert_eq!(ring.at(0), 0);
    }
}
