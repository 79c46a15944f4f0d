//! Addressing a QP's packets: from the QP's attributes and the function's endpoint to the
//! Ethernet, IPv4 and UDP fields of a frame.

use super::switch::AddressTable;

use crate::roce::packet::{self, Addressing, Headers};

use super::held::Held;
use super::qp::Qp;
use super::switch::{Endpoint, Frame};
use super::train::{Train, MAX_TRAIN_BYTES};

/// What a transport stage needs to put frames on the wire.
pub struct Wire<'a> {
    /// This function's address.
    pub local: Endpoint,
    /// IPv4 to MAC, for destinations.
    pub neighbors: &'a AddressTable,
    /// Frames to send, in order, unsealed (see [`super::switch`]).
    pub out: Vec<Frame>,
    /// Buffers of frames already delivered, reused for the frames built next: a frame
    /// costs no allocation (and no page faults) once the engine runs.
    pub spare: Vec<Vec<u8>>,
    /// The UDP source port of the frames built now, instead of the QP's own: the session
    /// of the message being sent ([`rnic_abi::session`]).
    pub src_port: Option<u16>,
    /// Whether the switch takes trains ([`super::train`]): the requester sends the
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
        }
    }
}

/// Most frame buffers kept for reuse: a window's worth of MTU-sized frames.
pub const MAX_SPARE: usize = 256;

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
    /// headers if `count` is 1, else a train (see [`super::train`]) whose last packet has
    /// `last`'s. `fill` appends the payload to the frame; for a train whose payload is
    /// in guest memory, `hold` gives it as [`Held`] instead, and the frame carries none
    /// of it (see [`super::held`]). As [`Wire::send_with`] otherwise.
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
        // A QP that migrated here keeps speaking as the address it was created with.
        let local = qp.home.unwrap_or(self.local);
        let addressing = Addressing {
            src_mac: local.mac,
            // An unknown destination goes to the broadcast address and, on the internal
            // switch, nowhere: the requester's retry timer then reports it.
            dst_mac: self.neighbors.get(&dst_ip).copied().unwrap_or([0xff; 6]),
            src_ip: local.ip,
            dst_ip,
            src_port: self
                .src_port
                .unwrap_or_else(|| packet::udp_src_port(route.flow_label, qp.qpn, route.dest_qpn)),
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
        match packet::build_headers(&addressing, hdrs, first_len, &mut frame) {
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
                packet::end_unsealed(&mut frame, framed);
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

/// 24-bit PSN arithmetic.
pub mod psn {
    /// `a + n` modulo 2^24.
    pub fn add(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & 0xFF_FFFF
    }

    /// The signed distance from `b` to `a` in the 24-bit sequence space.
    pub fn diff(a: u32, b: u32) -> i32 {
        ((a.wrapping_sub(b) << 8) as i32) >> 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn::add(0xFF_FFFF, 1), 0);
        assert_eq!(psn::diff(0, 0xFF_FFFF), 1);
        assert_eq!(psn::diff(0xFF_FFFF, 0), -1);
        assert_eq!(psn::diff(5, 3), 2);
    }
}
