//! The send path from guest memory: arbitrary bytes as send WQEs (every opcode, SGE
//! lists, inline data, UD addresses, memory, indirect and pattern keys), posted on B's
//! live QPs through the ring or the MMIO window, with A up and answering. Reaches the
//! requester's WQE checks and packetization, then A's responder and B's completer.
//! Invariants: the world's (A's guest RAM too: nothing B posts may make A write outside
//! its MR), except C's counters (a UD WQE may name C, which then counts a drop).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::input::records;
use rnic_fuzz::world::{Mode, World, B};

/// WQEs per input at most.
const MAX_WQES: usize = 32;
/// Flags bit: post through the MMIO window (qb only; the ring when it is busy).
const MMIO: u8 = 1 << 3;
/// The first `wr_id` of an input's WQEs: far from the set-up's.
const FIRST_WR_ID: u64 = 0x5eed_0000;

fuzz_target!(|data: &[u8]| {
    let mut world = World::build(Mode::Live);
    let mut posted = Vec::new();
    {
        let keys = world.b_keys();
        for (i, r) in records(data, MAX_WQES).into_iter().enumerate() {
            let wr_id = FIRST_WR_ID + i as u64;
            let which = usize::from(r.flags & 3);
            posted.extend(world.post_raw_on_b(which, wr_id, r.bytes, r.flags & MMIO != 0));
            if r.step() {
                world.bench.step();
            }
        }
        world.bench.settle(32);
        drop(keys);
    }
    world.note_posted(B, posted);
    world.bench.settle(8);
    world.check();
});
