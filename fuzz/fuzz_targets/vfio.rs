//! The vfio-user glue: client requests (DMA map and unmap, region access, SET_IRQS,
//! reset) for function B while its objects are live, through the `ServerBackend` that
//! rnicd's vfio-user server calls for each message; see `rnic_fuzz::vfio`. The `vfio_user`
//! crate's own message parsing is not reached (it reads a socket).
//!
//! Invariants: no panic, no hang, no memory error (a SIGBUS from a mapping past the end
//! of its file is a crash too), and nothing of the other functions changes: A's and C's
//! guest RAM only where the world's invariant allows, C's counters, A's and C's work
//! requests complete at most once.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::input::records;
use rnic_fuzz::world::{Mode, World, A, C};

/// Requests per input at most.
const MAX_REQUESTS: usize = 48;

fuzz_target!(|data: &[u8]| {
    let mut world = World::build(Mode::Fuzz);
    let disturbed = rnic_fuzz::vfio::run(&world, &records(data, MAX_REQUESTS));
    world.bench.settle(8);
    world.check_completions(&[A, C]);
    world.check_ram(A);
    world.check_ram(C);
    world.check_bystander_counters();
    if disturbed {
        // B's memory, registers or interrupts may be gone: tear down without waiting for
        // answers that will not come.
        world.bench.detach();
    }
});
