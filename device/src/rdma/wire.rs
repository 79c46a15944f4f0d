//! Addressing a QP's packets: from the QP's attributes and the function's endpoint to the
//! Ethernet, IPv4 and UDP fields of a frame.

use crate::roce::build;
use crate::roce::build::Addressing;
use crate::roce::hdr::Headers;

use super::qp::Qp;
use crate::fabric::frame::{AddressTable, Endpoint, Frame, MAX_SPARE};
use crate::fabric::held::Held;
use crate::fabric::train::{Train, MAX_TRAIN_BYTES};
use crate::gid_table::GidTable;

/// What a transport stage needs to put frames on the wire.
pub struct Wire<'a> {
    /// This function's address.
    pub local: Endpoint,
    /// Its GID table: the addresses it sends from, by `sgid_index`, and takes packets for.
    pub gids: GidTable,
    /// IPv4 to MAC, for destinations.
    pub neighbors: &'a AddressTable,
    /// Frames to send, in order, unsealed (see [`crate::fabric::frame`]).
    pub out: Vec<Frame>,
    /// Buffers of frames already delivered, reused for the frames built next: a frame
    /// costs no allocation (and no page faults) once the engine runs.
    pub spare: Vec<Vec<u8>>,
    /// The UDP source port of the frames built now, instead of the QP's own: the session
    /// of the message being sent ([`rnic_abi::session`]).
    pub src_port: Option<u16>,
    /// Whether the switch takes trains ([`crate::fabric::train`]): the requester sends the
    /// packets of a message to another function of this process as trains.
    pub trains: bool,
}

/// Where a packet goes: the address-vector fields of a frame.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Destination GID (IPv4-mapped).
    pub dgid: [u8; 16],
    /// IPv4 TTL (0: 64).
    pub hop_limit: u8,
    /// IPv4 TOS.
    pub traffic_class: u8,
    /// Flow label, for the UDP source port.
    pub flow_label: u32,
    /// Destination QP, for the UDP source port.
    pub dest_qpn: u32,
    /// The source: an entry of the function's GID table.
    pub sgid_index: u8,
}

impl Route {
    /// The route of a connected QP: its address vector.
    pub fn of(qp: &Qp) -> Self {
        Route {
            dgid: qp.attr.dgid,
            hop_limit: qp.attr.hop_limit,
            traffic_class: qp.attr.traffic_class,
            flow_label: qp.attr.flow_label,
            dest_qpn: qp.attr.dest_qp_num,
            sgid_index: qp.attr.sgid_index,
        }
    }
}

impl Wire<'_> {
    /// Keeps a delivered frame's buffer for a frame to come.
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        if self.spare.len() < MAX_SPARE {
            self.spare.push(buffer);
        }
    }

    /// Builds a frame of `qp` to its peer and queues it.
    pub fn send(&mut self, qp: &Qp, hdrs: &Headers, payload: &[u8]) {
        self.send_to(qp, &Route::of(qp), hdrs, payload);
    }

    /// Builds a frame of `qp` along `route` and queues it.
    pub fn send_to(&mut self, qp: &Qp, route: &Route, hdrs: &Headers, payload: &[u8]) {
        let copied: Result<(), std::convert::Infallible> =
            self.send_along_with(qp, route, hdrs, payload.len(), |frame| {
                frame.extend_from_slice(payload);
                Ok(())
            });
        let Ok(()) = copied;
    }

    /// Builds a frame of `qp` to its peer with `len` bytes of payload that `fill` appends
    /// to the frame's headers (the requester gathers from memory straight into the
    /// frame, with no zeroing first), and queues it; if `fill` fails, nothing is queued
    /// and its error is returned.
    pub fn send_with<E>(
        &mut self,
        qp: &Qp,
        hdrs: &Headers,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.send_along_with(qp, &Route::of(qp), hdrs, len, fill)
    }

    /// [`Wire::send_with`] along `route` instead of the QP's own address vector.
    pub fn send_along_with<E>(
        &mut self,
        qp: &Qp,
        route: &Route,
        hdrs: &Headers,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.build(qp, route, hdrs, None, len, fill)
    }

    /// How many packets of `qp` at path MTU `mtu` one frame may carry: a train's worth
    /// ([`MAX_TRAIN_BYTES`]) when the switch takes trains and the peer is a function of
    /// this process, else 1.
    pub fn max_train(&self, qp: &Qp, mtu: u32) -> u32 {
        if self.trains && self.neighbors.contains_key(&destination(&Route::of(qp))) {
            (MAX_TRAIN_BYTES / mtu.max(1)).max(1)
        } else {
            1
        }
    }

    /// Sends `count` consecutive packets of one message of `qp` to its peer, `len` bytes
    /// of payload in all at `mtu` bytes per packet but the last: one frame with `first`'s
    /// headers if `count` is 1, else a train (see [`crate::fabric::train`]) whose last packet has
    /// `last`'s. `fill` appends the payload to the frame; for a train whose payload is
    /// in guest memory, `hold` gives it as [`Held`] instead, and the frame carries none
    /// of it (see [`crate::fabric::held`]). As [`Wire::send_with`] otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn send_packets<E>(
        &mut self,
        qp: &Qp,
        first: &Headers,
        last: impl FnOnce() -> Headers,
        count: u32,
        mtu: u32,
        len: u64,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
        hold: Option<impl FnOnce() -> Result<Held, E>>,
    ) -> Result<(), E> {
        let last_at = mtu as usize * count.saturating_sub(1) as usize;
        let mut train = (count > 1).then(|| Train {
            count,
            seg: mtu,
            last_len: (len as usize).saturating_sub(last_at) as u32,
            last: last(),
            held: None,
        });
        let route = Route::of(qp);
        match (train.as_mut(), hold) {
            (Some(t), Some(hold)) => {
                t.held = Some(hold()?);
                self.build(qp, &route, first, train, len as usize, |_| Ok(()))
            }
            _ => self.build(qp, &route, first, train, len as usize, fill),
        }
    }

    /// Builds a frame (or a train, whose headers are its first packet's) with `len`
    /// bytes of payload, those the train does not hold from `fill`, and queues it.
    fn build<E>(
        &mut self,
        qp: &Qp,
        route: &Route,
        hdrs: &Headers,
        train: Option<Train>,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let dst_ip = destination(route);
        // A QP that migrated here keeps speaking as the address it was created with (a
        // QP with a source of the GID table's never migrates); one whose entry was
        // cleared under it sends from the function's own.
        let local = qp.home.unwrap_or(self.local);
        let src_ip = match qp.home {
            Some(home) => home.ip,
            None => self
                .gids
                .source(route.sgid_index, local.ip)
                .unwrap_or(local.ip),
        };
        let addressing = Addressing {
            src_mac: local.mac,
            // A multicast group's MAC is the group's (§14.15). An unknown destination goes
            // to the broadcast address and, on the internal switch, nowhere: the
            // requester's retry timer then reports it.
            dst_mac: if super::mcast::is_group(dst_ip) {
                rnic_abi::mcast::mac_of(dst_ip)
            } else {
                self.neighbors.get(&dst_ip).copied().unwrap_or([0xff; 6])
            },
            src_ip,
            dst_ip,
            src_port: self
                .src_port
                .unwrap_or_else(|| build::udp_src_port(route.flow_label, qp.qpn, route.dest_qpn)),
            ttl: if route.hop_limit == 0 {
                64
            } else {
                route.hop_limit
            },
            tos: route.traffic_class,
            ip_id: 0,
        };
        let mut frame = self.spare.pop().unwrap_or_default();
        frame.clear();
        // A train's headers are its first packet's, which carries one segment, or
        // nothing if the train's payload is held.
        let held = train.as_ref().and_then(|t| t.held.as_ref()).map(Held::len);
        let first_len = match (&train, held) {
            (Some(_), Some(_)) => 0,
            (Some(t), None) => t.seg as usize,
            (None, _) => len,
        };
        match build::build_headers(&addressing, hdrs, first_len, &mut frame) {
            Ok(()) => {
                let headers = frame.len();
                fill(&mut frame)?;
                let framed = frame.len() - headers;
                let got = framed + held.unwrap_or(0);
                if got != len {
                    log::error!(
                        "qp {:#x}: {got} bytes of payload where the headers say {len}: frame dropped",
                        qp.qpn,
                    );
                    return Ok(());
                }
                build::end_unsealed(&mut frame, framed);
                self.out.push(Frame {
                    bytes: frame,
                    sealed: false,
                    train: train.map(Box::new),
                });
            }
            Err(e) => log::error!(
                "qp {:#x}: cannot build opcode {:#x}: {e}",
                qp.qpn,
                hdrs.bth.opcode
            ),
        }
        Ok(())
    }

    /// The packets queued since `out` held `before` frames (a train counts its packets).
    pub fn packets_since(&self, before: usize) -> u64 {
        self.out[before..].iter().map(Frame::packets).sum()
    }
}

/// The IPv4 address a route leads to.
fn destination(route: &Route) -> [u8; 4] {
    route.dgid[12..16].try_into().unwrap_or([0; 4])
}

#[cfg(test)]
mod tests {
    //! Trains as the requester builds them, and as the fabric walks and cuts them.
    use super::*;
    use crate::fabric::frame::{materialize, segment};
    use crate::fabric::switch::Switch;
    use crate::fabric::train::{Run, Train, TrainError};
    use crate::pcap::PcapWriter;
    use crate::rdma::mkey::pages::PagedBuffer;
    use crate::rdma::qp::Qp;
    use crate::rdma::wqe::QpCaps;
    use crate::rdma::wqe::WorkQueue;
    use crate::roce::hdr::{Bth, Reth};
    use crate::roce::opcode as op;
    use crate::roce::parse;
    use crate::roce::parse::Packet;
    use crate::roce::psn;
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
            gids: GidTable::default(),
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
        let first = parse::parse_unsealed(&frame.bytes).unwrap();
        let walked: Vec<Packet> = train.packets(first, &frame.bytes).unwrap().collect();
        let parsed: Vec<Packet> = each
            .iter()
            .map(|f| parse::parse_unsealed(&f.bytes).unwrap())
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
        let first = parse::parse_unsealed(&frame.bytes).unwrap();
        assert!(first.payload.is_empty());
        let runs: Vec<Run> = train.runs(first, &frame.bytes).unwrap().collect();
        let whole_first = parse::parse_unsealed(&whole.bytes).unwrap();
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
        assert_eq!(
            train.packets(first, &frame.bytes).err(),
            Some(TrainError::Length)
        );
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
        let first = parse::parse_unsealed(&frame.bytes).unwrap();
        let t = frame.train.as_deref().unwrap();
        assert_eq!(t.runs(first, &frame.bytes).err(), Some(TrainError::Length));
    }

    #[test]
    fn a_train_that_does_not_hold_what_it_says_is_refused() {
        let neighbors = neighbors();
        let mut frame = as_a_train(&neighbors);
        let first = parse::parse_unsealed(&frame.bytes).unwrap();
        for (count, seg, last_len) in [(5, 256, 74), (6, 256, 78), (1, 256, 78), (5, 252, 78)] {
            let t = Train {
                count,
                seg,
                last_len,
                last: headers(4),
                held: None,
            };
            assert_eq!(
                t.packets(first, &frame.bytes).err(),
                Some(TrainError::Length)
            );
        }
        let mut send_only = first;
        send_only.hdrs.bth.opcode = op::RC_SEND_ONLY;
        let train = frame.train.as_deref().unwrap();
        assert_eq!(
            train.packets(send_only, &frame.bytes).err(),
            Some(TrainError::Opcode)
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
            parse::parse(&f.bytes).expect("a valid ICRC");
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
