//! The receive path: every frame is checked before the transport acts on it, in rxe's
//! order where it applies (length, addresses, version, QPN, opcode against QP state,
//! source against the QP's address vector, P_Key, ICRC), then handed to its QP: to the
//! responder if it is a request, to the completer if it is a response, packet by packet
//! or, for a train's middle packets, as one run (as rxe's `rxe_rcv()` checks a packet and
//! hands it to `rxe_resp` or `rxe_comp`). A frame that fails is dropped and counted by
//! reason ([`super::drops`]), never acted on (docs/hardware-interface.md §7.9).

use std::time::Instant;

use rnic_abi::mcast::MULTICAST_QPN;
use rnic_abi::verbs::QpState;

use super::drops::{self, Drop, QpTransport};
use super::env::Env;
use super::qp::{self, mtu, Qp};
use super::wire::Wire;
use super::{completer, dc, mcast, responder, RdmaState};
use crate::fabric::frame::{Endpoint, Frame};
use crate::fabric::held::Payload;
use crate::fabric::train::Run;
use crate::gid_table::GidTable;
use crate::roce::hdr::DEFAULT_PKEY;
use crate::roce::opcode::opcode_info;
use crate::roce::parse;
use crate::roce::parse::{Packet, ParseError};

/// Whether the packet is a request (to the responder) or a response (to the completer).
pub fn is_request(opcode: u8) -> bool {
    opcode_info(opcode).is_some_and(|i| i.is_request())
}

/// Why [`parse()`] refused a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Dropped for this reason.
    Drop(Drop),
    /// A sound frame addressed here, of an opcode the device does not take
    /// ([`crate::roce::opcode::foreign`]): dropped for the QP its BTH names ([`Drop::from`] its
    /// [`ParseError::Unsupported`]), or as [`Drop::UnknownQp`] if there is none.
    Foreign(parse::Unsupported),
}

/// Parses `frame` and checks its addressing against `local` and the addresses of its GID
/// table, `gids`. The ICRC is checked unless the frame is an unsealed one of the internal
/// switch ([`Frame`]).
pub fn parse<'a>(
    frame: &'a Frame,
    local: &Endpoint,
    gids: &GidTable,
) -> Result<Packet<'a>, Refused> {
    let parsed = if frame.sealed {
        parse::parse(&frame.bytes)
    } else {
        parse::parse_unsealed(&frame.bytes)
    };
    // A multicast group's frame comes to every function (§14.15): the function's own
    // groups are for the multicast dispatch to find.
    let here = |mac: [u8; 6], ip: [u8; 4]| {
        (mac == local.mac && (ip == local.ip || gids.holds(ip)))
            || (mcast::is_group(ip) && mac == rnic_abi::mcast::mac_of(ip))
    };
    match parsed {
        Ok(pkt) if here(pkt.dst_mac, pkt.dst_ip) => Ok(pkt),
        Err(ParseError::Unsupported(u)) if here(u.dst_mac, u.dst_ip) => Err(Refused::Foreign(u)),
        Ok(_) | Err(ParseError::Unsupported(_)) => Err(Refused::Drop(Drop::Address)),
        Err(e) => Err(Refused::Drop(e.into())),
    }
}

/// Checks that a QP of transport `qp` takes packets of `opcode` (one [`opcode_info`]
/// knows): a UD QP datagrams only, a UC QP UC opcodes only, an RC or DC QP neither, and
/// only a DC target DC connects and disconnects.
pub fn check_transport(qp: QpTransport, opcode: u8) -> Result<(), Drop> {
    let Some(info) = opcode_info(opcode) else {
        return Err(Drop::Opcode);
    };
    let other = info.is_datagram() || info.is_uc();
    let takes = match qp {
        QpTransport::Ud => info.is_datagram(),
        QpTransport::Uc => info.is_uc(),
        QpTransport::DcTarget => !other,
        QpTransport::Rc | QpTransport::DcInitiator => !other && !info.is_dc_control(),
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

impl RdmaState {
    /// Validates `frame` and hands its packets (one, or a train's: see [`crate::fabric::train`]) to
    /// their QP's responder or completer, counting each packet received or dropped (by
    /// the checks, or by the transport's PSN window).
    pub(super) fn deliver(
        &mut self,
        frame: &Frame,
        env: &Env,
        wire: &mut Wire,
        now: Instant,
        received: &mut Vec<u32>,
    ) {
        let parsed = match parse(frame, &wire.local, &wire.gids) {
            // Not addressed here: steered here for a QP that migrated in?
            Err(why) => self.parse_for_arrived(frame).unwrap_or(Err(why)),
            parsed => parsed,
        };
        let pkt = match parsed {
            Ok(pkt) => pkt,
            Err(Refused::Drop(why)) => {
                log::trace!("frame dropped: {why:?}");
                self.count_drops(why, frame.packets());
                return;
            }
            Err(Refused::Foreign(u)) => {
                let (qpn, opcode) = (u.bth.dest_qp, u.bth.opcode);
                let qp = self.qps.get(&qpn).map(|qp| &**qp);
                let why = qp.map_or(drops::Drop::UnknownQp, |_| drops::unsupported(opcode));
                log::trace!("qp {qpn:#x}: frame {opcode:#x} dropped: {why:?}");
                let dropped = self.dropped(qpn, qp, opcode, u.src_ip, 0);
                self.drop_explained(why, &dropped, frame.packets());
                return;
            }
        };
        let qpn = pkt.hdrs.bth.dest_qp;
        if mcast::is_group(pkt.dst_ip) || qpn == MULTICAST_QPN {
            self.deliver_multicast(frame, &pkt, env, wire, now, received);
            return;
        }
        let Some(mut qp) = self.qps.remove(&qpn) else {
            let (opcode, len) = (pkt.hdrs.bth.opcode, pkt.payload.len());
            log::trace!("qp {qpn:#x}: frame {opcode:#x} dropped: UnknownQp");
            let dropped = self.dropped(qpn, None, opcode, pkt.src_ip, len);
            self.drop_explained(drops::Drop::UnknownQp, &dropped, frame.packets());
            return;
        };
        received.push(qpn);
        let before = wire.out.len();
        match frame.train.as_deref().map(|t| t.runs(pkt, &frame.bytes)) {
            None => self.take_packet(&mut qp, &pkt, &frame.bytes, env, wire, now),
            Some(Ok(runs)) => {
                for run in runs {
                    self.take_run(&mut qp, run, &frame.bytes, env, wire, now);
                }
            }
            Some(Err(why)) => {
                log::error!("qp {qpn:#x}: a train does not hold what it says: dropped");
                self.count_drops(why.into(), frame.packets());
            }
        }
        self.counters.tx_packets += wire.packets_since(before);
        self.qps.insert(qpn, qp);
        self.reschedule(qpn);
        self.report_drained(qpn, env);
    }

    /// Hands a multicast packet to each QP of the function in its group (rxe's
    /// `rxe_rcv_mcast_pkt`), each taking it as a datagram of its own. A function with no
    /// QP in the group ignores it without counting it: the switch gives every function a
    /// copy, as an Ethernet switch floods a group's frames (§14.15). Multicast needs both
    /// the group's address and [`MULTICAST_QPN`]: either alone is dropped.
    fn deliver_multicast(
        &mut self,
        frame: &Frame,
        pkt: &Packet,
        env: &Env,
        wire: &mut Wire,
        now: Instant,
        received: &mut Vec<u32>,
    ) {
        let (group, qpn) = (pkt.dst_ip, pkt.hdrs.bth.dest_qp);
        if !mcast::is_group(group) || qpn != MULTICAST_QPN || frame.train.is_some() {
            let why = if mcast::is_group(group) {
                Drop::UnknownQp
            } else {
                Drop::Address
            };
            log::trace!("multicast frame to {group:?}, qp {qpn:#x}, dropped: {why:?}");
            self.count_drops(why, frame.packets());
            return;
        }
        for qpn in self.mcast.members(group).to_vec() {
            let Some(mut qp) = self.qps.remove(&qpn) else {
                continue;
            };
            received.push(qpn);
            self.take_packet(&mut qp, pkt, &frame.bytes, env, wire, now);
            self.qps.insert(qpn, qp);
            self.reschedule(qpn);
            self.report_drained(qpn, env);
        }
    }

    /// Hands a run of a train's packets to `qp`'s transport: as one, if its responder or
    /// completer takes it so (see [`responder::takes_run`], [`completer::takes_run`]),
    /// else packet by packet. A single packet whose payload is held goes as a packet
    /// whose payload is copied from where it is held.
    fn take_run(
        &mut self,
        qp: &mut Qp,
        run: Run,
        frame: &[u8],
        env: &Env,
        wire: &mut Wire,
        now: Instant,
    ) {
        let plain_rc = || self.transport_of(qp.qpn) == drops::QpTransport::Rc;
        let request = is_request(run.packet.hdrs.bth.opcode);
        let as_one = || {
            if request {
                responder::takes_run(qp, &run)
            } else {
                completer::takes_run(qp, &run)
            }
        };
        if run.count == 1 && run.is_held() && plain_rc() {
            let len = run.payload.len();
            let taken = self.take_rc(qp, &run.packet, run.payload, env, wire, now);
            self.count_taken(qp, &run.packet, (1, len), taken);
            return;
        }
        if run.count == 1 || !plain_rc() || !as_one() {
            // A held payload is read into a buffer first, as the sender used to.
            let mut buf = if run.is_held() {
                wire.spare.pop().unwrap_or_default()
            } else {
                Vec::new()
            };
            match run.in_bytes(&mut buf) {
                Some(run) => {
                    for pkt in run.packets() {
                        self.take_packet(qp, &pkt, frame, env, wire, now);
                    }
                }
                None => {
                    log::error!("qp {:#x}: a train's held payload cannot be read", qp.qpn);
                    self.count_drops(drops::Drop::Length, u64::from(run.count));
                }
            }
            if buf.capacity() > 0 {
                wire.recycle(buf);
            }
            return;
        }
        // The packets of a run differ only in PSN and payload: what the checks say of
        // the first, they say of all.
        let seg = run.payload.len() / run.count as usize;
        let taken = check(qp, &run.packet, seg).and_then(|()| {
            if request {
                responder::on_run(self, qp, run, env, wire)
            } else {
                completer::on_run(self, qp, run, env, now)
            }
        });
        self.count_taken(qp, &run.packet, (run.count, seg), taken);
    }

    /// Hands one packet to `qp`'s transport and counts it received or dropped.
    fn take_packet(
        &mut self,
        qp: &mut Qp,
        pkt: &Packet,
        frame: &[u8],
        env: &Env,
        wire: &mut Wire,
        now: Instant,
    ) {
        let checked = check_transport(self.transport_of(qp.qpn), pkt.hdrs.bth.opcode);
        let taken = checked.and_then(|()| match self.ud.qkey(qp.qpn) {
            Some(qkey) => responder::on_datagram(self, qp, pkt, frame, env, qkey),
            None if self.uc.contains(qp.qpn) => check(qp, pkt, pkt.payload.len()).and_then(|()| {
                responder::on_uc_request(self, qp, pkt, Payload::Bytes(pkt.payload), env, wire)
            }),
            None => match self.dc.receive(qp, pkt, wire, now) {
                Some(Ok(dc::DcPacket::Taken)) => Ok(()),
                Some(Ok(dc::DcPacket::Refused)) => {
                    completer::retire(self, qp, env, now);
                    Ok(())
                }
                Some(Err(why)) => Err(why),
                None => self.take_rc(qp, pkt, Payload::Bytes(pkt.payload), env, wire, now),
            },
        });
        self.count_taken(qp, pkt, (1, pkt.payload.len()), taken);
    }

    /// Hands `pkt`, whose payload is `payload`, to the responder or the completer of
    /// `qp`, a QP of the RC transport.
    fn take_rc(
        &mut self,
        qp: &mut Qp,
        pkt: &Packet,
        payload: Payload,
        env: &Env,
        wire: &mut Wire,
        now: Instant,
    ) -> Result<(), drops::Drop> {
        check(qp, pkt, payload.len())?;
        if is_request(pkt.hdrs.bth.opcode) {
            responder::on_request(self, qp, pkt, payload, env, wire)
        } else {
            completer::on_response(self, qp, pkt, payload, env, now)
        }
    }

    /// Counts `count` packets from `pkt` on (one, or a run's) that `qp` took or
    /// dropped, each with `payload_len` bytes of payload.
    fn count_taken(
        &mut self,
        qp: &Qp,
        pkt: &Packet,
        (count, payload_len): (u32, usize),
        taken: Result<(), drops::Drop>,
    ) {
        match taken {
            Ok(()) => self.counters.rx_packets += u64::from(count),
            Err(why) => {
                log::trace!(
                    "qp {:#x}: {count} packet(s) {:#x} from psn {} dropped: {why:?}",
                    qp.qpn,
                    pkt.hdrs.bth.opcode,
                    pkt.hdrs.bth.psn
                );
                let opcode = pkt.hdrs.bth.opcode;
                let dropped = self.dropped(qp.qpn, Some(qp), opcode, pkt.src_ip, payload_len);
                self.drop_explained(why, &dropped, u64::from(count));
            }
        }
    }

    /// Counts `packets` packets dropped for `why`.
    fn count_drops(&mut self, why: drops::Drop, packets: u64) {
        self.counters.rx_dropped += packets;
        self.counters.drops.count(why, packets);
    }

    /// Counts `packets` packets of `dropped` dropped for `why`, and if the user can act on
    /// the reason ([`drops::explainable`]) and this is its first drop for the QP, explains
    /// it at warn level; later ones are counted only.
    fn drop_explained(&mut self, why: drops::Drop, dropped: &drops::Dropped, packets: u64) {
        self.count_drops(why, packets);
        if !drops::explainable(why, dropped.opcode) {
            return;
        }
        let f = self.function;
        match self.explained.note(dropped.qpn, why) {
            drops::Verdict::Explain => {
                if let Some(text) = drops::explain(why, dropped) {
                    log::warn!("{f}: {text}");
                }
            }
            drops::Verdict::Suppress => log::warn!(
                "{f}: drops of {} QP and reason pairs explained: drops of further pairs are \
                 only counted (see the drop counters at exit; RUST_LOG=trace logs each)",
                drops::Explained::MAX
            ),
            drops::Verdict::Count => {}
        }
    }

    /// A drop of an `opcode` packet with `payload_len` bytes of payload from `src_ip` for
    /// QP `qpn`, which is `qp` if the function has it (a QP taking a packet is out of
    /// `qps`), as [`drops::explain`] describes it.
    fn dropped(
        &self,
        qpn: u32,
        qp: Option<&Qp>,
        opcode: u8,
        src_ip: [u8; 4],
        payload_len: usize,
    ) -> drops::Dropped {
        let transport = qp.map(|_| self.transport_of(qpn));
        let max_payload = match (qp, transport) {
            (_, Some(drops::QpTransport::Ud)) => rnic_abi::ud::UD_MAX_PAYLOAD,
            (Some(qp), _) => qp::mtu(&qp.attr),
            (None, _) => 0,
        };
        drops::Dropped {
            qpn,
            qp: transport,
            opcode,
            src_ip,
            payload_len,
            max_payload,
        }
    }

    /// The transport of QP `qpn`.
    pub(super) fn transport_of(&self, qpn: u32) -> drops::QpTransport {
        if self.ud.qkey(qpn).is_some() {
            drops::QpTransport::Ud
        } else if self.uc.contains(qpn) {
            drops::QpTransport::Uc
        } else if self.dc.is_dci(qpn) {
            drops::QpTransport::DcInitiator
        } else if self.dc.is_dct(qpn) {
            drops::QpTransport::DcTarget
        } else {
            drops::QpTransport::Rc
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::drops::QpTransport;

    #[test]
    fn each_qp_transport_takes_its_own_opcodes_only() {
        use crate::roce::opcode as op;
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
            for qp in [Rc, Uc, DcInitiator, DcTarget] {
                assert_eq!(check_transport(qp, opcode), Err(Drop::Transport), "{qp:?}");
            }
        }
        for opcode in [op::UC_SEND_ONLY, op::UC_RDMA_WRITE_MIDDLE] {
            assert!(takes(Uc, opcode));
            for qp in [Rc, Ud, DcInitiator, DcTarget] {
                assert_eq!(check_transport(qp, opcode), Err(Drop::Transport), "{qp:?}");
            }
        }
        for opcode in [op::RC_SEND_ONLY, op::RC_ACKNOWLEDGE, op::UD_SEND_ONLY] {
            assert_eq!(check_transport(Uc, opcode), Err(Drop::Transport));
        }
        for opcode in [op::DC_CONNECT, op::DC_DISCONNECT] {
            assert!(takes(DcTarget, opcode));
            for qp in [Rc, Ud, DcInitiator] {
                assert_eq!(check_transport(qp, opcode), Err(Drop::Transport), "{qp:?}");
            }
        }
        // Nothing the table lacks reaches this check; were it to, it is no opcode here.
        assert_eq!(check_transport(Rc, 0x44), Err(Drop::Opcode));
    }
}
