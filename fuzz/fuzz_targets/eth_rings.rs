//! B's Ethernet queues in a hostile driver's hands (datasheet §15): descriptors of any
//! address, length and flags on its send and receive rings, posted counts and arm words
//! of any value, `SET_ETH` bodies, queues destroyed and created under traffic, and frames
//! of any kind arriving, with engine passes between. Invariants: no panic, A's and C's
//! guest RAM untouched (B's may change anywhere: its descriptors name where its frames
//! go, in memory it mapped), and every completion B's RDMA QPs get is for a WR posted
//! once.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::input::records;
use rnic_fuzz::rings::apply;
use rnic_fuzz::world::{Mode, World, A, B, C};

/// Actions per input at most.
const MAX_ACTIONS: usize = 48;

fuzz_target!(|data: &[u8]| {
    let mut world = World::build(Mode::Fuzz);
    let dev = world.sides[B].ctx.device().clone();
    {
        let mut port = rnic_driver::eth::EthPort::open(&dev, 8, 1500, rnic_abi::eth::RX_ENABLE)
            .expect("B's Ethernet port opens");
        for r in records(data, MAX_ACTIONS) {
            apply(&world, &dev, &mut port, &r);
            if r.step() {
                world.bench.step();
            }
        }
        world.bench.settle(8);
    }
    world.check_completions(&[A, B, C]);
    world.check_ram(A);
    world.check_ram(C);
});
