//! Trains: consecutive packets of one message carried in one frame between two functions
//! of this process.
//!
//! Every packet costs the engine the same work whatever its size: the requester builds
//! its headers, the switch looks up its destination, the receiver parses it and takes its
//! QP out of the function's map and puts it back. Between two functions of one rnicd
//! nothing needs the packets of a message apart, so the requester sends them as a
//! *train*: one unsealed frame with the first packet's headers, the payload of all the
//! packets one after the other, the last packet's pad and an ICRC slot, and a [`Train`]
//! that says how many packets it holds and what the last one's headers are (the packets
//! between are MIDDLE packets whose headers follow from the first's). When the payload
//! is in the sender's memory it stays there ([`super::held`]): the frame then holds the
//! first packet's headers as if it had no payload, and the ICRC slot.
//!
//! A train is a way of carrying packets, not a different protocol:
//! - the receiving function walks it packet by packet ([`Train::packets`]) through the
//!   checks and the transport code a frame of each packet would go through;
//! - the switch cuts it into its packets' frames ([`segment`]) before anything outside
//!   the process sees it (the pcap, the fault injector, the uplink), and those frames are
//!   byte for byte the ones the requester builds one at a time;
//! - the requester ends a train at every packet that asks for an acknowledgement, so the
//!   packets inside a train never do.

use super::held::{Held, Payload};
use super::recv::Drop;
use super::switch::Frame;
use crate::roce::packet::{self, opcode as op, Addressing, Headers, Packet};

/// Most payload bytes in one train: a frame buffer stays at most this size (plus
/// headers), and the responder gets to acknowledge at least this often.
pub const MAX_TRAIN_BYTES: u32 = 64 * 1024;

/// The packets after the first in a train frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Train {
    /// Packets in the frame, at least 2.
    pub count: u32,
    /// Payload bytes of every packet but the last: the QP's path MTU, a multiple of 4.
    pub seg: u32,
    /// Payload bytes of the last packet (1 to `seg`).
    pub last_len: u32,
    /// Headers of the last packet.
    pub last: Headers,
    /// The payload of all the packets, when it is still in the sender's memory (see
    /// [`super::held`]): the frame then carries none of it.
    pub held: Option<Held>,
}

/// Consecutive packets of a train taken together: the first one's headers, all their
/// payload. The receiver takes the MIDDLE packets of a train as one run when its QP
/// would execute them one after the other anyway (see [`super::responder::takes_run`]),
/// and packet by packet ([`Run::packets`]) otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run<'a> {
    /// The run's first packet, with the payload of all of them if they are in the
    /// frame (none if they are held).
    pub packet: Packet<'a>,
    /// Packets in the run, each but the last of a train `payload / count` bytes long:
    /// 1, or the MIDDLE packets of a train.
    pub count: u32,
    /// The run's payload, wherever it is: `packet.payload`, or held in the sender's
    /// memory (see [`super::held`]).
    pub payload: Payload<'a>,
}

impl<'a> Run<'a> {
    /// Whether the run's payload is in the sender's memory rather than in the frame.
    pub fn is_held(&self) -> bool {
        matches!(self.payload, Payload::Held { .. })
    }

    /// Whether every packet of the run is `mtu` bytes long, as MIDDLE packets are.
    pub fn is_mtu_long(&self, mtu: u32) -> bool {
        self.payload.len() as u64 == u64::from(mtu) * u64::from(self.count)
    }

    /// The run with its payload in bytes: itself, or, if its payload is held, the
    /// same run with the payload copied into `buf`. `None` if the held payload cannot
    /// be read (only this process builds held runs, so that would be a bug).
    pub fn in_bytes<'b>(self, buf: &'b mut Vec<u8>) -> Option<Run<'b>>
    where
        'a: 'b,
    {
        if !self.is_held() {
            return Some(self);
        }
        buf.clear();
        if !self.payload.append_to(buf) {
            return None;
        }
        Some(Run {
            packet: Packet {
                payload: buf,
                ..self.packet
            },
            count: self.count,
            payload: Payload::Bytes(buf),
        })
    }

    /// The packets of the run, one by one; a held run ([`Run::in_bytes`] gives its
    /// bytes) has none.
    pub fn packets(self) -> impl Iterator<Item = Packet<'a>> {
        let count = if self.is_held() { 0 } else { self.count };
        let seg = self.packet.payload.len() / self.count.max(1) as usize;
        (0..count).map(move |i| {
            if i == 0 && self.count == 1 {
                return self.packet;
            }
            let at = i as usize * seg;
            Packet {
                hdrs: middle(&self.packet.hdrs, self.packet.hdrs.bth.opcode, i),
                payload: &self.packet.payload[at..at + seg],
                ..self.packet
            }
        })
    }
}

/// The MIDDLE opcode of the message a FIRST or MIDDLE packet belongs to: the opcode of
/// the packets between a train's first and last.
pub fn middle_of(opcode: u8) -> Option<u8> {
    match opcode {
        op::RC_SEND_FIRST | op::RC_SEND_MIDDLE => Some(op::RC_SEND_MIDDLE),
        op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_MIDDLE => Some(op::RC_RDMA_WRITE_MIDDLE),
        op::RC_RDMA_READ_RESPONSE_FIRST | op::RC_RDMA_READ_RESPONSE_MIDDLE => {
            Some(op::RC_RDMA_READ_RESPONSE_MIDDLE)
        }
        _ => None,
    }
}

/// The headers of the MIDDLE packet `i` packets after the one with `first`: its PSN
/// counted on, no extension headers, no flags.
fn middle(first: &Headers, middle_opcode: u8, i: u32) -> Headers {
    Headers {
        bth: packet::Bth {
            opcode: middle_opcode,
            psn: super::wire::psn::add(first.bth.psn, i),
            ack_req: false,
            solicited: false,
            pad: 0,
            ..first.bth
        },
        ..Headers::default()
    }
}

impl Train {
    /// Bytes of payload in the whole train.
    pub fn payload_len(&self) -> usize {
        (self.count as usize - 1) * self.seg as usize + self.last_len as usize
    }

    /// Bytes of the last packet's pad.
    fn pad(&self) -> usize {
        (4 - self.last_len as usize % 4) % 4
    }

    /// The packets of the train whose frame is `bytes`, given its first packet as
    /// parsed from the frame (the frame's headers describe only that one). Fails with
    /// [`Drop::Length`] if the frame does not hold what the train says (or its payload
    /// is held: see [`materialize`]), and [`Drop::Opcode`] if its first packet cannot
    /// begin a train.
    pub fn packets<'a>(
        &'a self,
        first: Packet<'a>,
        bytes: &'a [u8],
    ) -> Result<impl Iterator<Item = Packet<'a>> + 'a, Drop> {
        if self.held.is_some() {
            return Err(Drop::Length);
        }
        Ok(self.runs(first, bytes)?.flat_map(Run::packets))
    }

    /// The packets of the train as [`Train::packets`], but its MIDDLE packets as one
    /// [`Run`]: the first packet, the middle ones if any, the last.
    pub fn runs<'a>(
        &'a self,
        first: Packet<'a>,
        bytes: &'a [u8],
    ) -> Result<impl Iterator<Item = Run<'a>> + 'a, Drop> {
        let middle_opcode = middle_of(first.hdrs.bth.opcode).ok_or(Drop::Opcode)?;
        // Where the first payload starts in the frame (both borrow the same bytes).
        let start = (first.payload.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
        let pad = self.pad();
        let seg = self.seg as usize;
        let middles = self.count.saturating_sub(2);
        let last_at = seg * (self.count.max(1) as usize - 1);
        // Held: the frame is the first packet's headers with no payload, and the ICRC
        // slot. Else: every payload byte, the last packet's pad and the ICRC slot.
        let (framed, first_len) = match &self.held {
            Some(held) if held.len() == self.payload_len() => (0, 0),
            Some(_) => return Err(Drop::Length),
            None => (self.payload_len() + pad, seg),
        };
        let fits = self.count >= 2
            && self.last_len >= 1
            && self.last_len <= self.seg
            && first.payload.len() == first_len
            && start
                .checked_add(framed + packet::ICRC_LEN)
                .is_some_and(|end| end == bytes.len());
        if !fits {
            return Err(Drop::Length);
        }
        // Payload bytes `[at, at + n)` of the train, as a run's.
        let part = |at: usize, n: usize| match &self.held {
            Some(held) => (&bytes[start..start], held.part(at, n)),
            None => {
                let b = &bytes[start + at..start + at + n];
                (b, Payload::Bytes(b))
            }
        };
        let mut last = self.last;
        last.bth.pad = pad as u8;
        let run = |hdrs: Headers, at: usize, n: usize, count: u32| {
            let (bytes, payload) = part(at, n);
            Run {
                packet: Packet {
                    hdrs,
                    payload: bytes,
                    ..first
                },
                count,
                payload,
            }
        };
        let runs = [
            Some(run(first.hdrs, 0, seg, 1)),
            (middles > 0).then(|| {
                let hdrs = middle(&first.hdrs, middle_opcode, 1);
                run(hdrs, seg, middles as usize * seg, middles)
            }),
            Some(run(last, last_at, self.last_len as usize, 1)),
        ];
        Ok(runs.into_iter().flatten())
    }

    /// Bytes the train's packets take as frames of their own (what a port counts), for
    /// a train frame of `frame_len` bytes: the first packet's headers are in the frame,
    /// every payload byte and the last packet's pad are in it or held; each middle
    /// packet adds a BTH-only header and an ICRC, the last its own headers and ICRC.
    pub fn wire_len(&self, frame_len: usize) -> usize {
        let middle = packet::ETH_HEADER_LEN
            + packet::IPV4_HEADER_LEN
            + packet::UDP_HEADER_LEN
            + packet::BTH_LEN
            + packet::ICRC_LEN;
        frame_len
            + self.held.as_ref().map_or(0, |h| h.len() + self.pad())
            + (self.count as usize - 2) * middle
            + packet::frame_len(&self.last, 0)
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
    let rebuilt = packet::parse_unsealed(&frame.bytes).ok().and_then(|first| {
        let mut bytes = Vec::new();
        let seg = train.seg as usize;
        packet::build_headers(
            &addressing(&first, &frame.bytes),
            &first.hdrs,
            seg,
            &mut bytes,
        )
        .ok()?;
        held.append_to(0, held.len(), &mut bytes).then_some(())?;
        packet::end_unsealed(&mut bytes, held.len());
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
            .get(packet::IP_ID_OFFSET..packet::IP_ID_OFFSET + 2)
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
    let first = match packet::parse_unsealed(&frame.bytes) {
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
        if let Err(e) = packet::build_headers(&addressing, &p.hdrs, p.payload.len(), &mut bytes) {
            log::error!("a train's packet cannot be rebuilt ({e}): train dropped");
            return Vec::new();
        }
        bytes.extend_from_slice(p.payload);
        packet::end_unsealed(&mut bytes, p.payload.len());
        out.push(Frame::unsealed(bytes));
    }
    if spare.len() < super::wire::MAX_SPARE {
        spare.push(frame.bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::PcapWriter;
    use crate::rdma::pages::PagedBuffer;
    use crate::rdma::qp::{Qp, QpCaps, WorkQueue};
    use crate::rdma::switch::{AddressTable, Endpoint, Switch};
    use crate::rdma::wire::{psn, Wire};
    use crate::roce::packet::{Bth, Reth};
    use rnic_abi::verbs::{QpAttr, QpState};

    const A: Endpoint = Endpoint {
        mac: [2, 0, 0, 0, 0, 1],
        ip: [10, 0, 0, 1],
    };
    const B: Endpoint = Endpoint {
        mac: [2, 0, 0, 0, 0, 2],
        ip: [10, 0, 0, 2],
    };

    /// A QP of A connected to QP 0x22 of B.
    fn qp() -> Qp {
        let queue = || WorkQueue {
            ring: PagedBuffer::default(),
            entries: 1,
            stride: 64,
            slot: 0,
            taken: 0,
            window: None,
        };
        let mut dgid = [0u8; 16];
        dgid[10..12].copy_from_slice(&[0xff, 0xff]);
        dgid[12..].copy_from_slice(&B.ip);
        Qp {
            qpn: 0x11,
            pdn: 1,
            send_cqn: 1,
            recv_cqn: 1,
            sq_sig_all: false,
            state: QpState::Rts,
            attr: QpAttr {
                dgid,
                dest_qp_num: 0x22,
                ..QpAttr::default()
            },
            caps: QpCaps {
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq: queue(),
            rq: queue(),
            sq_slot: (0, 0),
            req: Default::default(),
            resp: Default::default(),
            home: None,
        }
    }

    fn wire(neighbors: &AddressTable) -> Wire<'_> {
        Wire {
            local: A,
            neighbors,
            out: Vec::new(),
            spare: Vec::new(),
            src_port: None,
            trains: true,
        }
    }

    /// The packets of a 1102-byte WRITE with immediate at MTU 256, as the requester
    /// numbers them: FIRST (with the RETH), three MIDDLEs, LAST (78 bytes, 2 of pad,
    /// with the immediate, solicited and asking for an ACK).
    const LEN: usize = 1102;
    fn headers(i: u32) -> Headers {
        let opcode = match i {
            0 => op::RC_RDMA_WRITE_FIRST,
            4 => op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            _ => op::RC_RDMA_WRITE_MIDDLE,
        };
        Headers {
            bth: Bth {
                ack_req: i == 4,
                solicited: i == 4,
                ..Bth::new(opcode, 0x22, psn::add(0xFF_FFFE, i))
            },
            reth: (i == 0).then_some(Reth {
                va: 0x1000,
                rkey: 0x77,
                dma_len: LEN as u32,
            }),
            imm: (i == 4).then_some([1, 2, 3, 4]),
            ..Headers::default()
        }
    }

    fn payload() -> Vec<u8> {
        (0..LEN as u32).map(|i| (i * 7) as u8).collect()
    }

    fn one_at_a_time(neighbors: &AddressTable) -> Vec<Frame> {
        let (qp, data) = (qp(), payload());
        let mut w = wire(neighbors);
        for i in 0..5u32 {
            let range = i as usize * 256..(i as usize * 256 + 256).min(LEN);
            let len = range.len();
            w.send_with(&qp, &headers(i), len, |f| {
                f.extend_from_slice(&data[range]);
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        w.out
    }

    fn as_a_train(neighbors: &AddressTable) -> Frame {
        let (qp, data) = (qp(), payload());
        let mut w = wire(neighbors);
        assert_eq!(w.max_train(&qp, 256), MAX_TRAIN_BYTES / 256);
        let last = || headers(4);
        let fill = |f: &mut Vec<u8>| {
            f.extend_from_slice(&data);
            Ok::<(), ()>(())
        };
        let no_hold = None::<fn() -> Result<Held, ()>>;
        w.send_packets(&qp, &headers(0), last, 5, 256, LEN as u64, fill, no_hold)
            .unwrap();
        assert_eq!(*w.out[0].train.as_deref().unwrap(), train());
        assert_eq!(w.out.len(), 1);
        w.out.pop().unwrap()
    }

    /// The train of those packets.
    fn train() -> Train {
        Train {
            count: 5,
            seg: 256,
            last_len: 78,
            last: headers(4),
            held: None,
        }
    }

    fn neighbors() -> AddressTable {
        [(A.ip, A.mac), (B.ip, B.mac)].into_iter().collect()
    }

    #[test]
    fn a_train_is_the_frames_built_one_at_a_time() {
        let neighbors = neighbors();
        let each = one_at_a_time(&neighbors);
        let frame = as_a_train(&neighbors);
        assert_eq!(frame.packets(), 5);
        assert!(!frame.sealed);
        assert_eq!(
            frame.wire_len(),
            each.iter().map(|f| f.bytes.len()).sum::<usize>()
        );
        // What the receiving function walks: the packets it would have parsed (PSNs
        // wrap through 0, the pad is the last packet's).
        let train = frame.train.as_deref().unwrap();
        let first = packet::parse_unsealed(&frame.bytes).unwrap();
        let walked: Vec<Packet> = train.packets(first, &frame.bytes).unwrap().collect();
        let parsed: Vec<Packet> = each
            .iter()
            .map(|f| packet::parse_unsealed(&f.bytes).unwrap())
            .collect();
        assert_eq!(walked, parsed);
        assert_eq!(walked[2].hdrs.bth.psn, 0);
        // As the receiver takes them: the first, the three MIDDLEs as one run, the last.
        let runs: Vec<Run> = train.runs(first, &frame.bytes).unwrap().collect();
        assert_eq!(runs.iter().map(|r| r.count).collect::<Vec<_>>(), [1, 3, 1]);
        assert_eq!(runs[1].packet.hdrs, parsed[1].hdrs);
        assert_eq!(runs[1].packet.payload, &payload()[256..1024]);
        assert_eq!(runs[1].packets().collect::<Vec<_>>(), parsed[1..4]);
        // What the switch cuts it into: the same frames, byte for byte.
        let mut spare = Vec::new();
        assert_eq!(segment(frame, &mut spare), each);
        assert_eq!(spare.len(), 1, "the train's buffer is kept for reuse");
    }

    /// The same train with its payload in a function's memory: held.
    fn held_train(neighbors: &AddressTable, memory: &crate::dma::DmaSpace) -> Frame {
        const IOVA: u64 = 0x4000;
        let mut file = crate::dma::tests::memfd(0x2000);
        std::io::Write::write_all(&mut file, &payload()).unwrap();
        memory.map(IOVA, 0x2000, 0, Some(file), false).unwrap();
        let mut w = wire(neighbors);
        let fill = |_: &mut Vec<u8>| -> Result<(), ()> { unreachable!("the payload is held") };
        let hold = || {
            let mut held = Held::new(memory.readable());
            assert!(held.push(vm_memory::GuestAddress(IOVA), LEN));
            Ok(held)
        };
        let last = || headers(4);
        w.send_packets(
            &qp(),
            &headers(0),
            last,
            5,
            256,
            LEN as u64,
            fill,
            Some(hold),
        )
        .unwrap();
        w.out.pop().unwrap()
    }

    #[test]
    fn a_held_train_carries_the_same_packets() {
        let neighbors = neighbors();
        let memory = crate::dma::DmaSpace::new();
        let each = one_at_a_time(&neighbors);
        let whole = as_a_train(&neighbors);
        let mut frame = held_train(&neighbors, &memory);
        // The frame carries no payload (and no pad), and counts the same.
        assert_eq!(frame.bytes.len(), whole.bytes.len() - LEN - 2);
        assert_eq!(frame.wire_len(), whole.wire_len());
        let train = frame.train.as_deref().unwrap();
        let first = packet::parse_unsealed(&frame.bytes).unwrap();
        assert!(first.payload.is_empty());
        let runs: Vec<Run> = train.runs(first, &frame.bytes).unwrap().collect();
        let whole_first = packet::parse_unsealed(&whole.bytes).unwrap();
        let whole_train = whole.train.as_deref().unwrap();
        let whole_runs: Vec<Run> = whole_train
            .runs(whole_first, &whole.bytes)
            .unwrap()
            .collect();
        assert_eq!(runs.iter().map(|r| r.count).collect::<Vec<_>>(), [1, 3, 1]);
        // Every run is held: no packets until it is read into bytes, and then the same
        // packets as the train built with its bytes.
        for (run, want) in runs.iter().zip(&whole_runs) {
            assert!(run.is_held() && !want.is_held());
            assert_eq!(run.packet.hdrs, want.packet.hdrs);
            assert_eq!(run.payload.len(), want.payload.len());
            assert_eq!(run.packets().count(), 0);
            let mut buf = Vec::new();
            let read = run.in_bytes(&mut buf).unwrap();
            assert_eq!(read.packet.payload, want.packet.payload);
            assert_eq!(
                read.packets().collect::<Vec<_>>(),
                want.packets().collect::<Vec<_>>()
            );
        }
        assert!(runs[1].is_mtu_long(256) && !runs[2].is_mtu_long(256));
        // Walking packet by packet needs the bytes; materialized, it is the whole train.
        assert_eq!(train.packets(first, &frame.bytes).err(), Some(Drop::Length));
        let mut copy = frame.clone();
        assert!(materialize(&mut copy));
        assert_eq!(copy, whole);
        // The switch cuts it into the same frames.
        assert_eq!(segment(frame.clone(), &mut Vec::new()), each);
        // A held payload that does not match the train is refused.
        let t = frame.train.as_deref_mut().unwrap();
        let mut short = Held::new(memory.readable());
        assert!(short.push(vm_memory::GuestAddress(0x4000), LEN - 4));
        t.held = Some(short);
        let first = packet::parse_unsealed(&frame.bytes).unwrap();
        let t = frame.train.as_deref().unwrap();
        assert_eq!(t.runs(first, &frame.bytes).err(), Some(Drop::Length));
    }

    #[test]
    fn a_train_that_does_not_hold_what_it_says_is_refused() {
        let neighbors = neighbors();
        let mut frame = as_a_train(&neighbors);
        let first = packet::parse_unsealed(&frame.bytes).unwrap();
        for (count, seg, last_len) in [(5, 256, 74), (6, 256, 78), (1, 256, 78), (5, 252, 78)] {
            let t = Train {
                count,
                seg,
                last_len,
                last: headers(4),
                held: None,
            };
            assert_eq!(t.packets(first, &frame.bytes).err(), Some(Drop::Length));
        }
        let mut send_only = first;
        send_only.hdrs.bth.opcode = op::RC_SEND_ONLY;
        let train = frame.train.as_deref().unwrap();
        assert_eq!(
            train.packets(send_only, &frame.bytes).err(),
            Some(Drop::Opcode)
        );
        // The switch drops such a train rather than cut it wrongly.
        frame.train.as_mut().unwrap().last_len = 90;
        assert!(segment(frame, &mut Vec::new()).is_empty());
    }

    #[test]
    fn the_switch_passes_a_train_whole_to_a_port_and_cuts_it_for_a_capture() {
        let each = one_at_a_time(&neighbors());
        let mut switch = Switch::new(vec![A, B], None);
        assert!(switch.takes_trains());
        let train = as_a_train(&switch.neighbors());
        switch.send(train.clone());
        assert_eq!(switch.take(1), std::slice::from_ref(&train));

        let path = std::env::temp_dir().join(format!("rnic-train-{}.pcap", std::process::id()));
        let pcap = PcapWriter::create(&path).unwrap();
        let mut switch = Switch::new(vec![A, B], Some(pcap));
        assert!(!switch.takes_trains());
        // A function that sent a train anyway: what arrives and what is captured are
        // its packets' frames, sealed.
        switch.send(train);
        let got: Vec<Frame> = switch.take(1).into();
        let sealed: Vec<Frame> = each
            .into_iter()
            .map(|mut f| {
                f.seal();
                f
            })
            .collect();
        assert_eq!(got, sealed);
        for f in &got {
            packet::parse(&f.bytes).expect("a valid ICRC");
        }
        drop(switch);
        let captured = std::fs::metadata(&path).unwrap().len() as usize;
        std::fs::remove_file(&path).unwrap();
        // The pcap header, then a record header and the bytes of each frame.
        assert_eq!(
            captured,
            24 + got.iter().map(|f| 16 + f.bytes.len()).sum::<usize>()
        );
    }
}
