//! The receive path: frames for a function with live RC, UD and DC QPs, MRs and an SRQ,
//! and requests of its own in flight, through parse, the receive checks, the responder
//! and the completer. Invariants: see `rnic_fuzz::world`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::input::records;
use rnic_fuzz::world::{Mode, World};

/// Frames per input at most: enough for a multi-packet message and its neighbours.
const MAX_FRAMES: usize = 32;

fuzz_target!(|data: &[u8]| {
    let mut world = World::build(Mode::Fuzz);
    for r in records(data, MAX_FRAMES) {
        world.inject_to_b(r.bytes.to_vec(), r.seal());
        if r.step() {
            world.bench.step();
        }
    }
    world.bench.settle(8);
    world.check();
    world.check_bystander_counters();
});
