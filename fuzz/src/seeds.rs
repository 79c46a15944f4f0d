//! Seeds from real traffic: the world of [`crate::world`] is built with A's link up and
//! A sending every kind of request to every kind of QP of B, with the switch capturing
//! every frame it forwards (as `rnicd --pcap` does); the frames to B become the seeds.

use std::path::PathBuf;

use rnic_device::function::{FunctionId, Identity};
use rnic_device::net::arp::Arp;
use rnic_device::net::eth::mac_for_ip;
use rnic_device::rdma::switch::Endpoint;

use crate::input::{record, STEP};
use crate::world::{Mode, World, B};

/// Where the recording's capture goes (one per process).
pub fn capture_path() -> PathBuf {
    std::env::temp_dir().join(format!("rnic-fuzz-capture-{}.pcap", std::process::id()))
}

/// The frames B received in the recorded world, in order, sealed.
pub fn frames_to_b() -> Vec<Vec<u8>> {
    let world = World::build(Mode::Record);
    let mac = world.bench.functions[B].endpoint().mac;
    // Dropping the world flushes and closes the capture.
    drop(world);
    let path = capture_path();
    let bytes = std::fs::read(&path).expect("read the capture");
    let _ = std::fs::remove_file(&path);
    rnic_tests::wire::pcap_frames(&bytes)
        .into_iter()
        .filter(|f| f.get(..6) == Some(&mac[..]))
        .collect()
}

/// Seeds of the receive target: each frame alone (resealed, then a pass), and the whole
/// conversation in one input.
pub fn recv_seeds() -> Vec<Vec<u8>> {
    let frames = frames_to_b();
    let mut seeds: Vec<Vec<u8>> = frames.iter().map(|f| record(1 | STEP, f)).collect();
    seeds.push(frames.iter().flat_map(|f| record(1 | STEP, f)).collect());
    seeds
}

/// A host elsewhere on the Ethernet segment.
pub const OUTSIDE: Endpoint = Endpoint {
    mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
    ip: [10, 82, 1, 5],
};

/// Seeds of the Ethernet port target: the recorded frames to B as they would come off a
/// segment (B's port MAC, the outside host's as source), and ARP: requests for B's and
/// A's addresses, an unasked reply, a gratuitous announcement.
pub fn eth_seeds() -> Vec<Vec<u8>> {
    let ip_b = Identity::new(FunctionId::Vf(0), 2, None).ipv4();
    let ip_a = Identity::new(FunctionId::Pf, 2, None).ipv4();
    let mac_b = mac_for_ip(ip_b);
    let frames: Vec<Vec<u8>> = frames_to_b()
        .into_iter()
        .map(|mut f| {
            f[..6].copy_from_slice(&mac_b);
            f[6..12].copy_from_slice(&OUTSIDE.mac);
            f
        })
        .collect();
    let b = Endpoint {
        mac: mac_b,
        ip: ip_b.octets(),
    };
    let mut reply = Arp::request(b, OUTSIDE.ip).reply(OUTSIDE);
    reply.tha = mac_b;
    let arp = [
        Arp::request(OUTSIDE, ip_b.octets()).frame(),
        Arp::request(OUTSIDE, ip_a.octets()).frame(),
        reply.frame(),
        Arp::request(OUTSIDE, OUTSIDE.ip).frame(),
    ];
    let mut seeds: Vec<Vec<u8>> = frames
        .iter()
        .chain(arp.iter())
        .map(|f| record(1 | STEP, f))
        .collect();
    seeds.push(
        arp.iter()
            .chain(frames.iter())
            .flat_map(|f| record(1 | STEP, f))
            .collect(),
    );
    seeds
}
