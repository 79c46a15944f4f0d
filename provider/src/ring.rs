//! The data path on plain memory: the doorbell page protocol (datasheet §4.4, §7.5), the
//! send and receive rings (WQEs, §7.6) and the completion ring (CQEs, phase bits, arming,
//! §7.7). Nothing here makes a system call, so the unit tests run it on ordinary memory
//! standing in for the mapped doorbell and kick pages.

use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};

use rnic_abi::doorbell::{slot_offset, NOTIFY_REQUEST, RUNG_BITMAP};
use rnic_abi::verbs::{owner_phase, Cqe, RecvWqe, Sge};
use rnic_verbs_abi::{ibv_wc, wc_flags_of, wc_sl_of, IBV_WC_FLUSH, IBV_WC_GENERAL_ERR};
use zerocopy::{FromBytes, IntoBytes};

/// A user context's doorbell page and the device's user kick page, as mapped.
#[derive(Clone, Copy, Debug)]
pub struct Doorbells {
    db: *mut u8,
    kick: *mut u8,
    page: u32,
}

// SAFETY: the pages are device memory shared by every thread of the process; every
// access below is an atomic or volatile access of an aligned u32.
unsafe impl Send for Doorbells {}
// SAFETY: as above.
unsafe impl Sync for Doorbells {}

impl Doorbells {
    /// The doorbell page `db` (4 KiB) of page number `page`, and the kick page `kick`.
    ///
    /// # Safety
    ///
    /// Both must stay mapped, readable and writable, for the value's lifetime.
    pub unsafe fn new(db: *mut u8, kick: *mut u8, page: u32) -> Self {
        Self { db, kick, page }
    }

    /// The u32 at byte `offset` of the doorbell page.
    fn word(&self, offset: u64) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset < rnic_abi::PAGE_SIZE);
        // SAFETY: in the page (a mapping `new` requires to outlive self), 4-aligned.
        unsafe { &*(self.db.add(offset as usize) as *const AtomicU32) }
    }

    /// Word `index` (0: +0, 1: +4) of slot `slot`.
    pub fn slot_word(&self, slot: u32, index: u64) -> &AtomicU32 {
        self.word(slot_offset(0, slot) + 4 * index)
    }

    /// Stores `value` in word `index` of slot `slot` after a release fence (a consumer
    /// index or an arm word: no bit, no kick).
    pub fn store(&self, slot: u32, index: u64, value: u32) {
        self.slot_word(slot, index).store(value, Ordering::Release);
    }

    /// Rings a queue's doorbell: `count` into the slot, the slot's bit into the rung
    /// bitmap, a full fence, and a kick when the device asked for one. Returns whether it
    /// kicked.
    pub fn ring(&self, slot: u32, count: u32) -> bool {
        self.slot_word(slot, 0).store(count, Ordering::Release);
        self.word(RUNG_BITMAP + 4 * u64::from(slot / 32))
            .fetch_or(1 << (slot % 32), Ordering::Release);
        fence(Ordering::SeqCst);
        if self.word(NOTIFY_REQUEST).load(Ordering::Acquire) == 0 {
            return false;
        }
        // SAFETY: offset 0 of the kick page, mapped and writable as `new` requires.
        unsafe { std::ptr::write_volatile(self.kick as *mut u32, self.page) };
        true
    }
}

/// A ring of `entries` entries of `stride` bytes in process memory.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    base: *mut u8,
    entries: u32,
    stride: u32,
}

// SAFETY: the ring is only written under its queue's lock (send and receive rings) or
// read under its CQ's lock.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// The ring at `base`.
    ///
    /// # Safety
    ///
    /// `base` must hold `entries * stride` bytes, readable and writable, for the value's
    /// lifetime; `entries` is a power of two (or 0, for no ring).
    pub unsafe fn new(base: *mut u8, entries: u32, stride: u32) -> Self {
        Self {
            base,
            entries,
            stride,
        }
    }

    /// Entries of the ring.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Bytes of one entry.
    pub fn stride(&self) -> u32 {
        self.stride
    }

    /// The bytes of the entry of free-running index `index`.
    ///
    /// # Safety
    ///
    /// The caller holds the queue's lock and the device does not read the entry (it is
    /// not posted, or already completed).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn entry(&self, index: u32) -> &mut [u8] {
        let at = (index & (self.entries - 1)) as usize * self.stride as usize;
        // SAFETY: in the ring (`new`), exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(at), self.stride as usize) }
    }

    /// A pointer to the entry of free-running index `index`.
    fn entry_ptr(&self, index: u32) -> *mut u8 {
        let at = (index & (self.entries - 1)) as usize * self.stride as usize;
        // SAFETY: in the ring (`new`).
        unsafe { self.base.add(at) }
    }
}

/// Writes a receive WQE of `sges` into `entry` (a whole entry of the receive ring).
pub fn write_recv_wqe(entry: &mut [u8], wr_id: u64, sges: &[Sge]) {
    let wqe = RecvWqe {
        wr_id,
        num_sge: sges.len() as u32,
        reserved: 0,
    };
    let (head, body) = entry.split_at_mut(size_of::<RecvWqe>());
    head.copy_from_slice(wqe.as_bytes());
    for (chunk, sge) in body.chunks_exact_mut(size_of::<Sge>()).zip(sges) {
        chunk.copy_from_slice(sge.as_bytes());
    }
}

/// The next arm sequence number after `seq`: 31 bits, never 0 (the device's "never armed").
pub fn next_arm_seq(seq: u32) -> u32 {
    match (seq + 1) & 0x7fff_ffff {
        0 => 1,
        n => n,
    }
}

/// The arm word of sequence `seq`.
pub fn arm_word(seq: u32, solicited_only: bool) -> u32 {
    seq << 1 | u32::from(solicited_only)
}

/// A CQ's reading side: its ring, its slot, and what the process has consumed.
#[derive(Debug)]
pub struct CqReader {
    ring: Ring,
    slot: u32,
    consumed: u32,
    arm_seq: u32,
}

impl CqReader {
    /// The reader of a fresh (zeroed) CQ ring, whose doorbell slot is `slot`.
    pub fn new(ring: Ring, slot: u32) -> Self {
        Self {
            ring,
            slot,
            consumed: 0,
            arm_seq: 0,
        }
    }

    /// Reads `ring` from now on (the CQ was resized: the device copied the entries not
    /// consumed yet to their indexes there), from the same consumer index.
    pub fn set_ring(&mut self, ring: Ring) {
        self.ring = ring;
    }

    /// The next new CQE, if the device wrote one; does not store the consumer index.
    pub fn take(&mut self) -> Option<Cqe> {
        let entries = self.ring.entries();
        let p = self.ring.entry_ptr(self.consumed);
        // SAFETY: byte 0x1B of a 32-byte CQE in the ring; an atomic load, since the device
        // writes it concurrently.
        let owner = unsafe { (*(p.add(0x1B) as *const AtomicU8)).load(Ordering::Acquire) };
        if owner & 1 != owner_phase(self.consumed, entries) {
            return None;
        }
        let mut bytes = [0u8; size_of::<Cqe>()];
        // SAFETY: the entry's 32 bytes, which the device no longer writes (its owner byte
        // says it is the process's, and the acquire above orders this read after it).
        unsafe { std::ptr::copy_nonoverlapping(p, bytes.as_mut_ptr(), bytes.len()) };
        self.consumed = self.consumed.wrapping_add(1);
        Cqe::read_from_bytes(&bytes).ok()
    }

    /// Stores the consumer index (after polling took entries).
    pub fn publish(&self, db: &Doorbells) {
        db.store(self.slot, 0, self.consumed);
    }

    /// Arms the CQ for its next (solicited-only: next solicited or failed) completion.
    pub fn arm(&mut self, db: &Doorbells, solicited_only: bool) {
        self.arm_seq = next_arm_seq(self.arm_seq);
        db.store(self.slot, 1, arm_word(self.arm_seq, solicited_only));
    }

    /// CQEs consumed in all.
    pub fn consumed(&self) -> u32 {
        self.consumed
    }
}

/// A device completion as `struct ibv_wc` (opcodes and statuses have ibverbs' numbers,
/// but FLUSH's, which reads as `IBV_WC_FLUSH`; a status beyond `GENERAL_ERR` reads as
/// `GENERAL_ERR`, as rnic.ko reports it; the immediate data or invalidated rkey is
/// passed through as it arrived).
pub fn ibv_wc_of(c: &Cqe) -> ibv_wc {
    let mut w = ibv_wc::zeroed();
    w.wr_id = c.wr_id;
    w.status = u32::from(c.status).min(IBV_WC_GENERAL_ERR);
    w.opcode = if c.opcode == rnic_abi::verbs::wc::FLUSH {
        IBV_WC_FLUSH
    } else {
        c.opcode.into()
    };
    w.vendor_err = c.vendor_err;
    w.byte_len = c.byte_len;
    w.imm_data = c.imm_or_inv;
    w.qp_num = c.qp_num;
    w.src_qp = c.src_qp;
    w.wc_flags = wc_flags_of(c.wc_flags);
    w.sl = wc_sl_of(c.wc_flags);
    w
}

/// Whether a completion is a receive's: bit 7 of the opcode (kept in flushes too).
pub fn is_recv(c: &Cqe) -> bool {
    c.opcode & 0x80 != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::{wc, wc_flags, WcStatus};
    use rnic_verbs_abi::{IBV_WC_GRH, IBV_WC_RECV, IBV_WC_SEND, IBV_WC_WITH_IMM};

    /// Page-aligned memory standing in for a mapped page.
    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    fn page() -> Box<Page> {
        Box::new(Page([0; 4096]))
    }

    fn u32_at(p: &Page, off: u64) -> u32 {
        u32::from_le_bytes(p.0[off as usize..off as usize + 4].try_into().unwrap())
    }

    #[test]
    fn ringing_writes_the_count_sets_the_bit_and_kicks_only_when_asked() {
        let mut db = page();
        let mut kick = page();
        // SAFETY: both pages outlive the doorbells.
        let d = unsafe { Doorbells::new(db.0.as_mut_ptr(), kick.0.as_mut_ptr(), 7) };
        assert!(!d.ring(33, 5));
        assert_eq!(u32_at(&db, slot_offset(0, 33)), 5);
        assert_eq!(u32_at(&db, RUNG_BITMAP + 4), 1 << 1);
        assert_eq!(u32_at(&kick, 0), 0);
        // The device sleeps: the next ring kicks with the page number.
        db.0[NOTIFY_REQUEST as usize] = 1;
        assert!(d.ring(2, 6));
        assert_eq!(u32_at(&db, RUNG_BITMAP), 1 << 2);
        assert_eq!(u32_at(&db, RUNG_BITMAP + 4), 1 << 1, "other bits stay");
        assert_eq!(u32_at(&kick, 0), 7);
    }

    fn write_cqe(ring: &mut [u8], index: u32, entries: u32, cqe: Cqe) {
        let at = (index % entries) as usize * 32;
        let mut c = cqe;
        c.owner = owner_phase(index, entries);
        ring[at..at + 32].copy_from_slice(c.as_bytes());
    }

    #[test]
    fn polling_follows_the_phase_bit_across_passes_and_publishes_the_index() {
        let mut db = page();
        let mut kick = page();
        let mut ring = page();
        // SAFETY: the pages outlive the doorbells and the ring.
        let d = unsafe { Doorbells::new(db.0.as_mut_ptr(), kick.0.as_mut_ptr(), 1) };
        // SAFETY: 4 entries of 32 bytes in a 4 KiB page.
        let r = unsafe { Ring::new(ring.0.as_mut_ptr(), 4, 32) };
        let mut cq = CqReader::new(r, 9);
        assert!(cq.take().is_none(), "a zeroed ring is empty");
        for i in 0..6u32 {
            let c = Cqe {
                wr_id: u64::from(i),
                ..Cqe::default()
            };
            write_cqe(&mut ring.0, i, 4, c);
            if i == 3 {
                // Entries 0..=3 of the first pass.
                for j in 0..4u32 {
                    assert_eq!(cq.take().unwrap().wr_id, u64::from(j));
                }
                assert!(cq.take().is_none());
                cq.publish(&d);
                assert_eq!(u32_at(&db, slot_offset(0, 9)), 4);
            }
        }
        // Second pass: owner 0, written over entries 0 and 1.
        assert_eq!(cq.take().unwrap().wr_id, 4);
        assert_eq!(cq.take().unwrap().wr_id, 5);
        assert!(cq.take().is_none(), "entry 2 still shows the first pass");
        cq.publish(&d);
        assert_eq!(u32_at(&db, slot_offset(0, 9)), 6);
        assert_eq!(cq.consumed(), 6);
    }

    #[test]
    fn arming_counts_a_31_bit_sequence_into_the_second_word() {
        let mut db = page();
        let mut kick = page();
        // SAFETY: the pages outlive the doorbells.
        let d = unsafe { Doorbells::new(db.0.as_mut_ptr(), kick.0.as_mut_ptr(), 1) };
        let mut ring = page();
        // SAFETY: as above.
        let r = unsafe { Ring::new(ring.0.as_mut_ptr(), 2, 32) };
        let mut cq = CqReader::new(r, 3);
        cq.arm(&d, false);
        assert_eq!(u32_at(&db, slot_offset(0, 3) + 4), 2);
        cq.arm(&d, true);
        assert_eq!(u32_at(&db, slot_offset(0, 3) + 4), 4 | 1);
        assert_eq!(u32_at(&kick, 0), 0, "arming never kicks");
        assert_eq!(next_arm_seq(0x7fff_ffff), 1);
    }

    #[test]
    fn receive_wqes_hold_their_sges() {
        let mut e = [0xffu8; 64];
        let sges = [
            Sge {
                addr: 0x1000,
                length: 10,
                lkey: 3,
            },
            Sge {
                addr: 0x2000,
                length: 20,
                lkey: 4,
            },
        ];
        write_recv_wqe(&mut e, 42, &sges);
        let wqe = RecvWqe::read_from_bytes(&e[..16]).unwrap();
        assert_eq!((wqe.wr_id, wqe.num_sge, wqe.reserved), (42, 2, 0));
        assert_eq!(Sge::read_from_bytes(&e[32..48]).unwrap(), sges[1]);
    }

    #[test]
    fn completions_convert_to_ibv_wc() {
        let send = Cqe {
            wr_id: 1,
            opcode: wc::SEND,
            status: WcStatus::RetryExcErr as u8,
            qp_num: 0x11,
            ..Cqe::default()
        };
        let w = ibv_wc_of(&send);
        assert_eq!(
            (w.wr_id, w.opcode, w.status, w.qp_num),
            (1, IBV_WC_SEND, 12, 0x11)
        );
        assert!(!is_recv(&send));
        let odd = Cqe {
            status: 200,
            ..send
        };
        assert_eq!(ibv_wc_of(&odd).status, IBV_WC_GENERAL_ERR);
        let ud = Cqe {
            wr_id: 2,
            opcode: wc::RECV,
            byte_len: 40 + 8,
            imm_or_inv: 0x0403_0201,
            src_qp: 0x22,
            wc_flags: wc_flags::GRH | wc_flags::WITH_IMM | wc_flags::SOLICITED,
            ..Cqe::default()
        };
        let w = ibv_wc_of(&ud);
        assert_eq!(w.opcode, IBV_WC_RECV);
        assert_eq!(w.wc_flags, IBV_WC_GRH | IBV_WC_WITH_IMM);
        assert_eq!((w.imm_data, w.src_qp, w.byte_len), (0x0403_0201, 0x22, 48));
        assert_eq!(w.sl, rnic_verbs_abi::ROCE_V2_IPV4_PACKET_TYPE);
        assert!(is_recv(&ud));
        // FLUSH has another number on the device (ibverbs' 8 was REG_MR's first).
        let flush = Cqe {
            opcode: rnic_abi::verbs::wc::FLUSH,
            ..Cqe::default()
        };
        assert_eq!(ibv_wc_of(&flush).opcode, IBV_WC_FLUSH);
        let atomic_write = Cqe {
            opcode: rnic_abi::verbs::wc::ATOMIC_WRITE,
            ..Cqe::default()
        };
        assert_eq!(ibv_wc_of(&atomic_write).opcode, 9);
    }
}
