//! The vfio-user socket: bytes and file descriptors a client sends down function B's
//! socket, into rnicd's own vfio-user server over a real socket pair (framing, sizes,
//! descriptors of every kind, order), then through B's backend into the function, with
//! engine passes in between; see `rnic_fuzz::vfio_socket`.
//!
//! Invariants: no panic, no hang, no memory error (a SIGBUS from a mapping past the end
//! of its file, or of a file that shrank, is a crash too), no descriptor left open once
//! the client is gone, and nothing of the other functions changes: A's and C's guest RAM
//! only where the world's invariant allows, C's counters, A's and C's work requests
//! complete at most once.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::input::records;
use rnic_fuzz::vfio_socket::{descriptors_after_disconnect, open_descriptors, run};
use rnic_fuzz::world::{Mode, World, A, C};

/// Records (sendmsg calls) per input at most.
const MAX_RECORDS: usize = 48;

fuzz_target!(|data: &[u8]| {
    let mut world = World::build(Mode::Fuzz);
    let before = descriptors_after_disconnect(&world);
    run(&world, &records(data, MAX_RECORDS));
    world.bench.settle(8);
    world.check_completions(&[A, C]);
    world.check_ram(A);
    world.check_ram(C);
    world.check_bystander_counters();
    assert_eq!(
        open_descriptors(),
        before,
        "descriptors the client sent are still open after it left"
    );
    // B was disconnected (reset, memory unmapped): tear down without waiting for it.
    world.bench.detach();
});
