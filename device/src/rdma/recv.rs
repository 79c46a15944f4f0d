//! Receive validation: every frame is checked before the transport acts on it, in rxe's
//! order where it applies (length, addresses, version, QPN, opcode against QP state,
//! source against the QP's address vector, P_Key, ICRC). A frame that fails is dropped
//! and counted by reason ([`DropCounters`]), never acted on.

use rnic_abi::verbs::QpState;

use super::qp::{mtu, Qp};
use super::switch::{Endpoint, Frame};
use crate::roce::packet::{self, opcode_info, Packet, ParseError, DEFAULT_PKEY};

/// Why a frame was dropped. Each reason has its own counter in [`DropCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Too short for a header it announces, or a length field that disagrees with the
    /// frame (IPv4 total length, UDP length, the opcode's headers and ICRC).
    Length,
    /// Not RoCEv2 over IPv4: another EtherType, IP version, IP options, a fragment,
    /// another IP protocol or UDP port.
    Header,
    /// A wrong IPv4 header checksum or non-zero UDP checksum.
    Checksum,
    /// BTH transport version other than 0.
    Version,
    /// An opcode this device does not know (UC, CNP, reserved), or one of the other
    /// transport than the QP's (a UD SEND to an RC QP, an RC opcode to a UD QP).
    Opcode,
    /// A pad count that does not fit the packet: more than the bytes after the headers,
    /// payload and pad not a multiple of 4, or payload on an opcode that carries none.
    Pad,
    /// The ICRC does not match.
    Icrc,
    /// Addressed to another MAC or IP.
    Address,
    /// No QP with the destination QPN.
    UnknownQp,
    /// P_Key other than the default.
    Pkey,
    /// The QP's state does not take this packet (opcode against QP state).
    State,
    /// From a source other than the QP's peer.
    Source,
    /// A payload longer than the QP's path MTU.
    TooLong,
    /// Outside the PSN window: a request ahead of the one expected (out of sequence), a
    /// duplicate READ or atomic no longer remembered, or a response to a PSN never sent.
    Psn,
    /// A UD packet whose Q_Key is not the receiving QP's.
    Qkey,
    /// A UD packet for a QP with no receive posted (UD is unreliable: no RNR).
    NoReceive,
    /// A DC connect or disconnect with the wrong DC access key (answered with a NAK).
    DcKey,
}

impl From<ParseError> for Drop {
    fn from(e: ParseError) -> Self {
        use ParseError::*;
        match e {
            TruncatedEthernet { .. }
            | TruncatedIp { .. }
            | IpTotalLength { .. }
            | TruncatedUdp { .. }
            | UdpLength { .. }
            | TruncatedBth { .. }
            | TruncatedHeaders { .. } => Drop::Length,
            NotIpv4(_) | IpVersion(_) | IpHeaderLength(_) | IpFragment | NotUdp(_) | UdpPort(_) => {
                Drop::Header
            }
            IpChecksum | UdpChecksum => Drop::Checksum,
            BthVersion(_) => Drop::Version,
            UnknownOpcode(_) => Drop::Opcode,
            BadPad { .. } | UnexpectedPayload { .. } => Drop::Pad,
            Icrc { .. } => Drop::Icrc,
        }
    }
}

/// Frames dropped by the receive checks and the PSN window, by reason. Their sum is the
/// frames dropped by the transport; `Counters::rx_dropped` also counts frames that
/// arrived while Bus Master Enable was clear.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DropCounters {
    /// [`Drop::Length`].
    pub length: u64,
    /// [`Drop::Header`].
    pub header: u64,
    /// [`Drop::Checksum`].
    pub checksum: u64,
    /// [`Drop::Version`].
    pub version: u64,
    /// [`Drop::Opcode`].
    pub opcode: u64,
    /// [`Drop::Pad`].
    pub pad: u64,
    /// [`Drop::Icrc`].
    pub icrc: u64,
    /// [`Drop::Address`].
    pub address: u64,
    /// [`Drop::UnknownQp`].
    pub unknown_qp: u64,
    /// [`Drop::Pkey`].
    pub pkey: u64,
    /// [`Drop::State`].
    pub state: u64,
    /// [`Drop::Source`].
    pub source: u64,
    /// [`Drop::TooLong`].
    pub too_long: u64,
    /// [`Drop::Psn`].
    pub psn: u64,
    /// [`Drop::Qkey`].
    pub qkey: u64,
    /// [`Drop::NoReceive`].
    pub no_receive: u64,
    /// [`Drop::DcKey`].
    pub dc_key: u64,
}

impl DropCounters {
    /// Counts `packets` packets dropped for `why`.
    pub fn count(&mut self, why: Drop, packets: u64) {
        *self.slot(why) += packets;
    }

    fn slot(&mut self, why: Drop) -> &mut u64 {
        match why {
            Drop::Length => &mut self.length,
            Drop::Header => &mut self.header,
            Drop::Checksum => &mut self.checksum,
            Drop::Version => &mut self.version,
            Drop::Opcode => &mut self.opcode,
            Drop::Pad => &mut self.pad,
            Drop::Icrc => &mut self.icrc,
            Drop::Address => &mut self.address,
            Drop::UnknownQp => &mut self.unknown_qp,
            Drop::Pkey => &mut self.pkey,
            Drop::State => &mut self.state,
            Drop::Source => &mut self.source,
            Drop::TooLong => &mut self.too_long,
            Drop::Psn => &mut self.psn,
            Drop::Qkey => &mut self.qkey,
            Drop::NoReceive => &mut self.no_receive,
            Drop::DcKey => &mut self.dc_key,
        }
    }

    /// Every counter with its name (as logged: `name=value`), in check order.
    pub fn named(&self) -> [(&'static str, u64); 17] {
        [
            ("length", self.length),
            ("header", self.header),
            ("checksum", self.checksum),
            ("version", self.version),
            ("opcode", self.opcode),
            ("pad", self.pad),
            ("icrc", self.icrc),
            ("address", self.address),
            ("unknown_qp", self.unknown_qp),
            ("pkey", self.pkey),
            ("state", self.state),
            ("source", self.source),
            ("too_long", self.too_long),
            ("psn", self.psn),
            ("qkey", self.qkey),
            ("no_receive", self.no_receive),
            ("dc_key", self.dc_key),
        ]
    }

    /// All drops counted.
    pub fn total(&self) -> u64 {
        self.named().iter().map(|(_, n)| n).sum()
    }
}

impl std::fmt::Display for DropCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, n)) in self.named().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={n}")?;
        }
        Ok(())
    }
}

/// Whether the packet is a request (to the responder) or a response (to the completer).
pub fn is_request(opcode: u8) -> bool {
    opcode_info(opcode).is_some_and(|i| i.is_request())
}

/// Parses `frame` and checks its addressing against `local`. The ICRC is checked unless
/// the frame is an unsealed one of the internal switch ([`super::switch::Frame`]).
pub fn parse<'a>(frame: &'a Frame, local: &Endpoint) -> Result<Packet<'a>, Drop> {
    let pkt = if frame.sealed {
        packet::parse(&frame.bytes)?
    } else {
        packet::parse_unsealed(&frame.bytes)?
    };
    if pkt.dst_mac != local.mac || pkt.dst_ip != local.ip {
        return Err(Drop::Address);
    }
    Ok(pkt)
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

    #[test]
    fn every_reason_has_its_own_counter() {
        let all = [
            Drop::Length,
            Drop::Header,
            Drop::Checksum,
            Drop::Version,
            Drop::Opcode,
            Drop::Pad,
            Drop::Icrc,
            Drop::Address,
            Drop::UnknownQp,
            Drop::Pkey,
            Drop::State,
            Drop::Source,
            Drop::TooLong,
            Drop::Psn,
            Drop::Qkey,
            Drop::NoReceive,
            Drop::DcKey,
        ];
        let mut c = DropCounters::default();
        for (i, why) in all.iter().enumerate() {
            for _ in 0..=i {
                c.count(*why, 1);
            }
        }
        let named = c.named();
        for (i, (_, n)) in named.iter().enumerate() {
            assert_eq!(*n, i as u64 + 1, "{:?}", named[i]);
        }
        assert_eq!(c.total(), (1..=17).sum::<u64>());
        assert!(c.to_string().starts_with("length=1 header=2 "));
        assert!(c
            .to_string()
            .ends_with(" psn=14 qkey=15 no_receive=16 dc_key=17"));
    }

    #[test]
    fn parse_errors_map_to_their_reason() {
        assert_eq!(Drop::from(ParseError::IpChecksum), Drop::Checksum);
        assert_eq!(Drop::from(ParseError::BthVersion(1)), Drop::Version);
        assert_eq!(Drop::from(ParseError::UnknownOpcode(0x64)), Drop::Opcode);
        assert_eq!(
            Drop::from(ParseError::BadPad {
                pad: 3,
                available: 1
            }),
            Drop::Pad
        );
        assert_eq!(
            Drop::from(ParseError::Icrc {
                found: 1,
                computed: 2
            }),
            Drop::Icrc
        );
        assert_eq!(
            Drop::from(ParseError::TruncatedHeaders {
                opcode: 0x0a,
                need: 48,
                have: 20
            }),
            Drop::Length
        );
    }
}
