//! Receive validation: every frame is checked before the transport acts on it, in rxe's
//! order where it applies (length, addresses, version, QPN, opcode against QP state,
//! source against the QP's address vector, P_Key, ICRC). A frame that fails is dropped
//! and counted by reason ([`super::drops`]), never acted on.

use rnic_abi::verbs::QpState;

use super::drops::{Drop, QpTransport};
use super::qp::{mtu, Qp};
use crate::fabric::frame::{Endpoint, Frame};
use crate::roce::packet::{self, opcode_info, Packet, ParseError, DEFAULT_PKEY};

/// Whether the packet is a request (to the responder) or a response (to the completer).
pub fn is_request(opcode: u8) -> bool {
    opcode_info(opcode).is_some_and(|i| i.is_request())
}

/// Why [`parse`] refused a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Dropped for this reason.
    Drop(Drop),
    /// A sound frame addressed here, of an opcode the device does not take
    /// ([`packet::foreign`]): dropped for the QP its BTH names ([`Drop::from`] its
    /// [`ParseError::Unsupported`]), or as [`Drop::UnknownQp`] if there is none.
    Foreign(packet::Unsupported),
}

/// Parses `frame` and checks its addressing against `local`. The ICRC is checked unless
/// the frame is an unsealed one of the internal switch ([`Frame`]).
pub fn parse<'a>(frame: &'a Frame, local: &Endpoint) -> Result<Packet<'a>, Refused> {
    let parsed = if frame.sealed {
        packet::parse(&frame.bytes)
    } else {
        packet::parse_unsealed(&frame.bytes)
    };
    let here = |mac: [u8; 6], ip: [u8; 4]| mac == local.mac && ip == local.ip;
    match parsed {
        Ok(pkt) if here(pkt.dst_mac, pkt.dst_ip) => Ok(pkt),
        Err(ParseError::Unsupported(u)) if here(u.dst_mac, u.dst_ip) => Err(Refused::Foreign(u)),
        Ok(_) | Err(ParseError::Unsupported(_)) => Err(Refused::Drop(Drop::Address)),
        Err(e) => Err(Refused::Drop(e.into())),
    }
}

/// Checks that a QP of transport `qp` takes packets of `opcode` (one [`opcode_info`]
/// knows): a UD QP datagrams only, a connected QP no datagram, and only a DC target DC
/// connects and disconnects.
pub fn check_transport(qp: QpTransport, opcode: u8) -> Result<(), Drop> {
    let Some(info) = opcode_info(opcode) else {
        return Err(Drop::Opcode);
    };
    let takes = match qp {
        QpTransport::Ud => info.is_datagram(),
        QpTransport::DcTarget => !info.is_datagram(),
        QpTransport::Rc | QpTransport::DcInitiator => !info.is_datagram() && !info.is_dc_control(),
    };
    if takes {
        Ok(())
    } else {
        Err(Drop::Transport)
    }
}

/// Checks that `qp` takes `pkt`, whose payload is `payload_len` bytes long (its own, or
/// each packet's of a run; in the frame or held in the sender's memory).
pub fn check(qp: &Qp, pkt: &Packet, payload_len: usize) -> Result<(), Drop> {
    let bth = &pkt.hdrs.bth;
    if bth.pkey != DEFAULT_PKEY {
        return Err(Drop::Pkey);
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
        return Err(Drop::State);
    }
    if pkt.src_ip[..] != qp.attr.dgid[12..16] {
        return Err(Drop::Source);
    }
    // Every sender pads payloads to 4 bytes (InfiniBand packets are whole words long);
    // a pad count that does not do so was not written by one.
    if !(payload_len + usize::from(bth.pad)).is_multiple_of(4) {
        return Err(Drop::Pad);
    }
    // As a port drops frames beyond its MTU: a longer payload never reaches the
    // transport, whatever its PSN.
    if payload_len > mtu(&qp.attr) as usize {
        return Err(Drop::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::drops::QpTransport;

    #[test]
    fn each_qp_transport_takes_its_own_opcodes_only() {
        use packet::opcode as op;
        use QpTransport::*;
        let takes = |qp, opcode| check_transport(qp, opcode).is_ok();
        for opcode in [
            op::RC_SEND_ONLY,
            op::RC_RDMA_READ_REQUEST,
            op::RC_ACKNOWLEDGE,
        ] {
            assert!(takes(Rc, opcode) && takes(DcInitiator, opcode) && takes(DcTarget, opcode));
            assert_eq!(check_transport(Ud, opcode), Err(Drop::Transport));
        }
        for opcode in [op::UD_SEND_ONLY, op::UD_SEND_ONLY_WITH_IMMEDIATE] {
            assert!(takes(Ud, opcode));
            for qp in [Rc, DcInitiator, DcTarget] {
                assert_eq!(check_transport(qp, opcode), Err(Drop::Transport), "{qp:?}");
            }
        }
        for opcode in [op::DC_CONNECT, op::DC_DISCONNECT] {
            assert!(takes(DcTarget, opcode));
            for qp in [Rc, Ud, DcInitiator] {
                assert_eq!(check_transport(qp, opcode), Err(Drop::Transport), "{qp:?}");
            }
        }
        // Nothing the table lacks reaches this check; were it to, it is no opcode here.
        assert_eq!(check_transport(Rc, 0x24), Err(Drop::Opcode));
    }
}
