//! Trains (docs/hardware-interface.md §7.12): consecutive packets of one message carried
//! in one unsealed frame between two functions of this process: the first packet's
//! headers, the payload of all of them (none when it is held in the sender's memory,
//! [`super::held`]), the last packet's pad and an ICRC slot, and a [`Train`] that says
//! how many packets it holds and what the last one's headers are (those between are
//! MIDDLE packets whose headers follow from the first's).
//!
//! A train is a way of carrying packets, not a protocol: the receiver walks it packet by
//! packet ([`Train::packets`]), or its MIDDLE packets as one [`Run`]; the fabric cuts it
//! into its packets' frames ([`super::frame::segment`]), byte for byte those built one at
//! a time, before anything outside the process sees it; the requester ends a train at
//! every packet that asks for an acknowledgement.

use super::held::{Held, Payload};
use crate::roce::build;
use crate::roce::hdr;
use crate::roce::hdr::Headers;
use crate::roce::opcode as op;
use crate::roce::parse::Packet;
use crate::roce::psn;

/// Why a train frame does not give its packets: each is a receive drop reason of its own
/// (`rdma::drops::Drop` of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainError {
    /// The frame does not hold what the train says (or its payload is held where bytes
    /// are needed).
    Length,
    /// Its first packet cannot begin a train.
    Opcode,
}

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
/// would execute them one after the other anyway (see `rdma::responder::takes_run`),
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
/// the packets between a train's first and last (RC's, or a UC message's).
pub fn middle_of(opcode: u8) -> Option<u8> {
    match opcode {
        op::RC_SEND_FIRST | op::RC_SEND_MIDDLE => Some(op::RC_SEND_MIDDLE),
        op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_MIDDLE => Some(op::RC_RDMA_WRITE_MIDDLE),
        op::UC_SEND_FIRST | op::UC_SEND_MIDDLE => Some(op::UC_SEND_MIDDLE),
        op::UC_RDMA_WRITE_FIRST | op::UC_RDMA_WRITE_MIDDLE => Some(op::UC_RDMA_WRITE_MIDDLE),
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
        bth: hdr::Bth {
            opcode: middle_opcode,
            psn: psn::add(first.bth.psn, i),
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
    /// [`TrainError::Length`] if the frame does not hold what the train says (or its
    /// payload is held: see [`super::frame::materialize`]), and [`TrainError::Opcode`] if
    /// its first packet cannot begin a train.
    pub fn packets<'a>(
        &'a self,
        first: Packet<'a>,
        bytes: &'a [u8],
    ) -> Result<impl Iterator<Item = Packet<'a>> + 'a, TrainError> {
        if self.held.is_some() {
            return Err(TrainError::Length);
        }
        Ok(self.runs(first, bytes)?.flat_map(Run::packets))
    }

    /// The packets of the train as [`Train::packets`], but its MIDDLE packets as one
    /// [`Run`]: the first packet, the middle ones if any, the last.
    pub fn runs<'a>(
        &'a self,
        first: Packet<'a>,
        bytes: &'a [u8],
    ) -> Result<impl Iterator<Item = Run<'a>> + 'a, TrainError> {
        let middle_opcode = middle_of(first.hdrs.bth.opcode).ok_or(TrainError::Opcode)?;
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
            Some(_) => return Err(TrainError::Length),
            None => (self.payload_len() + pad, seg),
        };
        let fits = self.count >= 2
            && self.last_len >= 1
            && self.last_len <= self.seg
            && first.payload.len() == first_len
            && start
                .checked_add(framed + hdr::ICRC_LEN)
                .is_some_and(|end| end == bytes.len());
        if !fits {
            return Err(TrainError::Length);
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
        let middle = hdr::ETH_HEADER_LEN
            + hdr::IPV4_HEADER_LEN
            + hdr::UDP_HEADER_LEN
            + hdr::BTH_LEN
            + hdr::ICRC_LEN;
        frame_len
            + self.held.as_ref().map_or(0, |h| h.len() + self.pad())
            + (self.count as usize - 2) * middle
            + build::frame_len(&self.last, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_train_of_any_message_has_its_transports_middle_opcode() {
        for (first, middle) in [
            (op::RC_SEND_FIRST, op::RC_SEND_MIDDLE),
            (op::RC_RDMA_WRITE_FIRST, op::RC_RDMA_WRITE_MIDDLE),
            (
                op::RC_RDMA_READ_RESPONSE_FIRST,
                op::RC_RDMA_READ_RESPONSE_MIDDLE,
            ),
            (op::UC_SEND_FIRST, op::UC_SEND_MIDDLE),
            (op::UC_RDMA_WRITE_FIRST, op::UC_RDMA_WRITE_MIDDLE),
        ] {
            assert_eq!(middle_of(first), Some(middle), "{first:#x}");
            assert_eq!(middle_of(middle), Some(middle), "{middle:#x}");
        }
        // A message's last or only packet never starts a train's middle.
        for opcode in [op::RC_SEND_ONLY, op::UC_SEND_LAST, op::UD_SEND_ONLY] {
            assert_eq!(middle_of(opcode), None, "{opcode:#x}");
        }
    }
}
