//! Frames: whole Ethernet/IPv4/UDP/RoCEv2 frames as functions send and receive them, the
//! addresses of the switch's ports, and how a train frame becomes the frames of its
//! packets (docs/hardware-interface.md §7.12).
//!
//! The ICRC protects a frame on a wire; a frame that goes from one function of this
//! process to another crosses none. So functions send [`Frame`]s *unsealed* (ICRC not
//! computed), and the fabric seals one (computes its ICRC) only when something outside
//! the process will see its bytes or may change them: the pcap, the fault injector, the
//! uplink (see [`super::switch`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::train::Train;
use crate::roce::build;
use crate::roce::build::Addressing;
use crate::roce::hdr;
use crate::roce::parse;
use crate::roce::parse::Packet;

/// Most frame buffers kept for reuse: a window's worth of MTU-sized frames.
pub const MAX_SPARE: usize = 256;

/// A frame on the switch: a whole Ethernet frame, whether its ICRC is computed, and,
/// for a train, the packets it carries after its first ([`super::train`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's bytes; unsealed, its last four (the ICRC) are not meaningful.
    pub bytes: Vec<u8>,
    /// Whether the ICRC is in `bytes`. Only frames built by this process's functions
    /// and seen by nothing else are unsealed; everything from the network is sealed.
    pub sealed: bool,
    /// For a train (always unsealed): the packets after the first.
    pub train: Option<Box<Train>>,
}

impl Frame {
    /// A frame whose ICRC is in its bytes (from the network, or built sealed).
    pub fn sealed(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            sealed: true,
            train: None,
        }
    }

    /// A frame of one packet built by this process, its ICRC not computed.
    pub fn unsealed(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            sealed: false,
            train: None,
        }
    }

    /// Computes the ICRC into the bytes, if it is not there yet. A train must be cut
    /// into its packets first ([`segment`]); it is left as it is.
    pub fn seal(&mut self) {
        if !self.sealed && self.train.is_none() {
            build::seal(&mut self.bytes);
            self.sealed = true;
        }
    }

    /// The packets the frame carries: 1, or a train's count.
    pub fn packets(&self) -> u64 {
        self.train.as_ref().map_or(1, |t| u64::from(t.count))
    }

    /// The bytes its packets take on a wire.
    pub fn wire_len(&self) -> usize {
        match &self.train {
            Some(t) => t.wire_len(self.bytes.len()),
            None => self.bytes.len(),
        }
    }
}

/// A function's address on the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Ethernet address.
    pub mac: [u8; 6],
    /// IPv4 address (the GID's last four bytes).
    pub ip: [u8; 4],
}

/// IPv4 address to MAC: the neighbours functions address their frames to.
pub type AddressTable = HashMap<[u8; 4], [u8; 6], AddrHash>;

/// The hasher of the switch's address tables, which are looked up for every frame: a
/// multiply-and-rotate over the key's few bytes (as rustc's FxHash). SipHash's
/// resistance to chosen keys buys nothing here: the tables hold the device's own
/// functions, at most 256, whose addresses only the PF sets.
pub type AddrHash = BuildHasherDefault<AddrHasher>;

/// See [`AddrHash`].
#[derive(Debug, Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Puts a train's held payload (see [`super::held`]) into its frame, as a train built
/// with its bytes. Returns false if the frame's first packet does not parse or the held
/// bytes cannot be read (only this process builds trains, so either is a bug); the
/// frame is then left as it was.
pub fn materialize(frame: &mut Frame) -> bool {
    let Some(train) = frame.train.as_deref_mut() else {
        return true;
    };
    let Some(held) = train.held.take() else {
        return true;
    };
    // The first packet's headers again, now for a packet that carries its segment.
    let rebuilt = parse::parse_unsealed(&frame.bytes).ok().and_then(|first| {
        let mut bytes = Vec::new();
        let seg = train.seg as usize;
        build::build_headers(
            &addressing(&first, &frame.bytes),
            &first.hdrs,
            seg,
            &mut bytes,
        )
        .ok()?;
        held.append_to(0, held.len(), &mut bytes).then_some(())?;
        build::end_unsealed(&mut bytes, held.len());
        Some(bytes)
    });
    match rebuilt {
        Some(bytes) => {
            frame.bytes = bytes;
            true
        }
        None => {
            train.held = Some(held);
            false
        }
    }
}

/// The addressing `first`, parsed from `frame`, was built with.
fn addressing(first: &Packet, frame: &[u8]) -> Addressing {
    Addressing {
        src_mac: first.src_mac,
        dst_mac: first.dst_mac,
        src_ip: first.src_ip,
        dst_ip: first.dst_ip,
        src_port: first.src_port,
        ttl: first.ttl,
        tos: first.tos,
        ip_id: frame
            .get(hdr::IP_ID_OFFSET..hdr::IP_ID_OFFSET + 2)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]])),
    }
}

/// Cuts the train `frame` into the unsealed frames of its packets, in order, taking
/// their buffers from `spare` and giving the train's back. A frame that is no train
/// comes back as it is; a train that does not parse (only this process builds them, so
/// this is a bug) is dropped and logged.
pub fn segment(mut frame: Frame, spare: &mut Vec<Vec<u8>>) -> Vec<Frame> {
    if !materialize(&mut frame) {
        log::error!("a train's held payload cannot be read: train dropped");
        return Vec::new();
    }
    let Some(train) = frame.train.as_deref() else {
        return vec![frame];
    };
    let mut out = Vec::with_capacity(train.count as usize);
    let first = match parse::parse_unsealed(&frame.bytes) {
        Ok(first) => first,
        Err(e) => {
            log::error!("a train's first packet does not parse ({e}): train dropped");
            return out;
        }
    };
    let addressing = addressing(&first, &frame.bytes);
    let packets = match train.packets(first, &frame.bytes) {
        Ok(packets) => packets,
        Err(why) => {
            log::error!("a train does not hold what it says ({why:?}): train dropped");
            return out;
        }
    };
    for p in packets {
        let mut bytes = spare.pop().unwrap_or_default();
        bytes.clear();
        if let Err(e) = build::build_headers(&addressing, &p.hdrs, p.payload.len(), &mut bytes) {
            log::error!("a train's packet cannot be rebuilt ({e}): train dropped");
            return Vec::new();
        }
        bytes.extend_from_slice(p.payload);
        build::end_unsealed(&mut bytes, p.payload.len());
        out.push(Frame::unsealed(bytes));
    }
    if spare.len() < MAX_SPARE {
        spare.push(frame.bytes);
    }
    out
}
