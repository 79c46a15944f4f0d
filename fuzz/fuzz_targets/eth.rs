//! The Ethernet port (`rnicd --net eth:...`): frames from the segment (ARP, IPv4, UDP,
//! RoCEv2, anything) into the port of a device whose functions hold the world of
//! `rnic_fuzz::world`, through the port's checks, ARP, and on to the functions' receive
//! paths. Invariants: the world's, and every frame the port sends comes from one of the
//! functions' MACs.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_fuzz::bench::{Bench, Net};
use rnic_fuzz::eth::{fix_ipv4_checksum, Segment};
use rnic_fuzz::input::records;
use rnic_fuzz::world::{Mode, Seal, World};

/// Frames per input at most.
const MAX_FRAMES: usize = 32;

fuzz_target!(|data: &[u8]| {
    let segment = Segment::default();
    let bench = Bench::new(3, Net::Eth(Box::new(segment.clone())));
    let macs: Vec<[u8; 6]> = bench.functions.iter().map(|f| f.endpoint().mac).collect();
    let mut world = World::build_on(bench, Mode::Fuzz);
    for r in records(data, MAX_FRAMES) {
        let mut frame = r.bytes.to_vec();
        if r.seal() == Seal::Reseal {
            fix_ipv4_checksum(&mut frame);
            rnic_device::roce::build::seal(&mut frame);
        }
        segment.push(frame);
        if r.step() {
            world.bench.step();
        }
    }
    world.bench.settle(8);
    world.check();
    for frame in segment.sent() {
        assert!(
            frame
                .get(6..12)
                .is_some_and(|src| macs.iter().any(|m| m[..] == *src)),
            "the port sent a frame from a MAC that is no function's: {frame:02x?}"
        );
    }
});
