//! Registers, doorbells, config space, and the command and admin queues: a sequence of
//! what a guest and its VMM can do to a function with live objects (and, as the PF's
//! administrator, to the device), interleaved with engine passes; see `rnic_fuzz::ops`.
//!
//! Invariants: no panic, no hang, no memory error, whatever the sequence. Unless an admin
//! command ran (the PF may change any function, by design): A's and C's guest RAM change
//! only where the world's invariant allows, C's counters do not move, A's and C's work
//! requests complete at most once; and B's RAM too while B ran no commands and its
//! queue was left alone (a command may place a queue anywhere in B's RAM).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::input::records;
use rnic_fuzz::ops;
use rnic_fuzz::world::{Mode, World, A, B, C};

/// Operations per input at most.
const MAX_OPS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let mut world = World::build(Mode::Fuzz);
    let fx = ops::run(&world, &records(data, MAX_OPS));
    world.bench.settle(8);
    if !fx.admin {
        world.check_completions(&[A, C]);
        world.check_ram(A);
        world.check_ram(C);
        world.check_bystander_counters();
        if !fx.b_commands && !fx.b_queue_touched {
            world.check_ram(B);
        }
    }
    if fx.b_queue_touched || fx.admin {
        // B's (or every) command queue may be stopped or gone: tear down without waiting
        // for answers that will not come.
        world.bench.detach();
    }
});
