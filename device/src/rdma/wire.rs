//! Addressing a QP's packets: from the QP's attributes and the function's endpoint to the
//! Ethernet, IPv4 and UDP fields of a frame.

use std::collections::HashMap;

use crate::roce::packet::{self, Addressing, Headers};

use super::qp::Qp;
use super::switch::{Endpoint, Frame};

/// What a transport stage needs to put frames on the wire.
pub struct Wire<'a> {
    /// This function's address.
    pub local: Endpoint,
    /// IPv4 to MAC, for destinations.
    pub neighbors: &'a HashMap<[u8; 4], [u8; 6]>,
    /// Frames to send, in order, unsealed (see [`super::switch`]).
    pub out: Vec<Frame>,
    /// Buffers of frames already delivered, reused for the frames built next: a frame
    /// costs no allocation (and no page faults) once the engine runs.
    pub spare: Vec<Vec<u8>>,
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
        let copied: Result<(), std::convert::Infallible> =
            self.send_with(qp, hdrs, payload.len(), |frame| {
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
        let dst_ip: [u8; 4] = qp.attr.dgid[12..16].try_into().unwrap_or([0; 4]);
        // A QP that migrated here keeps speaking as the address it was created with.
        let local = qp.home.unwrap_or(self.local);
        let addressing = Addressing {
            src_mac: local.mac,
            // An unknown destination goes to the broadcast address and, on the internal
            // switch, nowhere: the requester's retry timer then reports it.
            dst_mac: self.neighbors.get(&dst_ip).copied().unwrap_or([0xff; 6]),
            src_ip: local.ip,
            dst_ip,
            src_port: packet::udp_src_port(qp.attr.flow_label, qp.qpn, qp.attr.dest_qp_num),
            ttl: if qp.attr.hop_limit == 0 {
                64
            } else {
                qp.attr.hop_limit
            },
            tos: qp.attr.traffic_class,
            ip_id: 0,
        };
        let mut frame = self.spare.pop().unwrap_or_default();
        frame.clear();
        match packet::build_headers(&addressing, hdrs, len, &mut frame) {
            Ok(()) => {
                let headers = frame.len();
                fill(&mut frame)?;
                if frame.len() != headers + len {
                    log::error!(
                        "qp {:#x}: {} bytes of payload where the headers say {len}: frame dropped",
                        qp.qpn,
                        frame.len() - headers
                    );
                    return Ok(());
                }
                packet::end_unsealed(&mut frame, len);
                self.out.push(Frame {
                    bytes: frame,
                    sealed: false,
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
