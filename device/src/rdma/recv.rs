//! Receive validation: every frame is checked before the transport acts on it, in rxe's
//! order where it applies (length, addresses, version, QPN, opcode against QP state,
//! source against the QP's address vector, P_Key, ICRC). A frame that fails is dropped
//! and counted, never acted on.

use rnic_abi::verbs::QpState;

use super::qp::Qp;
use super::switch::Endpoint;
use crate::roce::packet::{self, opcode_info, Packet, DEFAULT_PKEY};

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Malformed, or failed a checksum or the ICRC.
    Malformed,
    /// Addressed to another MAC or IP.
    NotForUs,
    /// No such QP.
    UnknownQp,
    /// The QP's state does not take this packet.
    WrongState,
    /// From a source other than the QP's peer.
    WrongSource,
    /// P_Key mismatch.
    BadPkey,
}

/// Whether the packet is a request (to the responder) or a response (to the completer).
pub fn is_request(opcode: u8) -> bool {
    opcode_info(opcode).is_some_and(|i| i.is_request())
}

/// Parses `frame` and checks its addressing against `local`.
pub fn parse<'a>(frame: &'a [u8], local: &Endpoint) -> Result<Packet<'a>, Drop> {
    let pkt = packet::parse(frame).map_err(|_| Drop::Malformed)?;
    if pkt.dst_mac != local.mac || pkt.dst_ip != local.ip {
        return Err(Drop::NotForUs);
    }
    Ok(pkt)
}

/// Checks that `qp` takes `pkt`.
pub fn check(qp: &Qp, pkt: &Packet) -> Result<(), Drop> {
    let bth = &pkt.hdrs.bth;
    if bth.pkey != DEFAULT_PKEY {
        return Err(Drop::BadPkey);
    }
    let ok_state = if is_request(bth.opcode) {
        matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    } else {
        matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
    };
    if !ok_state {
        return Err(Drop::WrongState);
    }
    if pkt.src_ip[..] != qp.attr.dgid[12..16] {
        return Err(Drop::WrongSource);
    }
    Ok(())
}
