//! Why the receive path drops a frame ([`Drop`]), the counters of drops by reason
//! ([`DropCounters`]), and the warnings that explain a drop whose cause the user can
//! remove (a peer of another transport, a stale QPN, another MTU: [`explain`]), once per
//! QP and reason ([`Explained`]). The checks themselves are in [`super::recv`]
//! (docs/hardware-interface.md §7.9).

use std::collections::HashSet;
use std::fmt::Write;

use crate::fabric::train::TrainError;
use crate::roce::opcode;
use crate::roce::opcode::{opcode_info, opcode_name};
use crate::roce::parse::ParseError;

/// Why a frame was dropped. Each reason has its own counter in [`DropCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// An opcode this device takes on no QP: a reserved value, a CNP (the device does no
    /// congestion control).
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
    /// An opcode of another transport than the QP's: RD or XRC (the device has no such
    /// QPs), UD to a connected QP, RC or UC to a UD QP, UC to an RC or DC QP, RC to a UC
    /// QP, a DC connect or disconnect to a QP that is no DC target.
    Transport,
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
    /// A UC request the responder refused: its rkey or the QP's access flags do not allow
    /// it, or it overruns its receive or its RETH length, or breaks its message's opcode
    /// sequence. UC answers nothing, so the rest of its message is dropped with it
    /// ([`super::uc`]).
    Refused,
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
            Unsupported(u) => unsupported(u.bth.opcode),
            BadPad { .. } | UnexpectedPayload { .. } => Drop::Pad,
            Icrc { .. } => Drop::Icrc,
        }
    }
}

impl From<TrainError> for Drop {
    fn from(e: TrainError) -> Self {
        match e {
            TrainError::Length => Drop::Length,
            TrainError::Opcode => Drop::Opcode,
        }
    }
}

/// Why a QP drops a packet of `opcode`, one the device does not take
/// ([`opcode::foreign`]): an opcode of a transport it has no QPs of is another transport
/// than the QP's; the rest it takes on no QP.
pub fn unsupported(opcode: u8) -> Drop {
    match opcode::foreign(opcode) {
        Some(f) if f.other_transport() => Drop::Transport,
        _ => Drop::Opcode,
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
    /// [`Drop::Transport`].
    pub transport: u64,
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
    /// [`Drop::Refused`].
    pub refused: u64,
}

impl Drop {
    /// Every reason, in the order of the checks (and of [`DropCounters::named`]).
    pub const ALL: [Drop; 19] = [
        Drop::Length,
        Drop::Header,
        Drop::Checksum,
        Drop::Version,
        Drop::Opcode,
        Drop::Pad,
        Drop::Icrc,
        Drop::Address,
        Drop::UnknownQp,
        Drop::Transport,
        Drop::Pkey,
        Drop::State,
        Drop::Source,
        Drop::TooLong,
        Drop::Psn,
        Drop::Qkey,
        Drop::NoReceive,
        Drop::DcKey,
        Drop::Refused,
    ];
}

impl DropCounters {
    /// Adds `other`'s counts to these, reason by reason.
    pub fn add(&mut self, other: &DropCounters) {
        for (why, (_, n)) in Drop::ALL.into_iter().zip(other.named()) {
            self.count(why, n);
        }
    }

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
            Drop::Transport => &mut self.transport,
            Drop::Pkey => &mut self.pkey,
            Drop::State => &mut self.state,
            Drop::Source => &mut self.source,
            Drop::TooLong => &mut self.too_long,
            Drop::Psn => &mut self.psn,
            Drop::Qkey => &mut self.qkey,
            Drop::NoReceive => &mut self.no_receive,
            Drop::DcKey => &mut self.dc_key,
            Drop::Refused => &mut self.refused,
        }
    }

    /// Every counter with its name (as logged: `name=value`), in check order.
    pub fn named(&self) -> [(&'static str, u64); 19] {
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
            ("transport", self.transport),
            ("pkey", self.pkey),
            ("state", self.state),
            ("source", self.source),
            ("too_long", self.too_long),
            ("psn", self.psn),
            ("qkey", self.qkey),
            ("no_receive", self.no_receive),
            ("dc_key", self.dc_key),
            ("refused", self.refused),
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

/// The transport of a QP, as the receive checks and their warnings tell QPs apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTransport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected ([`super::uc`]).
    Uc,
    /// Unreliable datagram ([`super::ud`]).
    Ud,
    /// A DC initiator ([`super::dc`]).
    DcInitiator,
    /// A DC target.
    DcTarget,
}

impl QpTransport {
    /// How a warning names a QP of this transport: "RC QP 0x11".
    pub fn name(self) -> &'static str {
        match self {
            QpTransport::Rc => "RC",
            QpTransport::Uc => "UC",
            QpTransport::Ud => "UD",
            QpTransport::DcInitiator => "DC initiator",
            QpTransport::DcTarget => "DC target",
        }
    }

    /// The transport a peer's QP must have to talk to a QP of this one.
    fn peer(self) -> &'static str {
        match self {
            QpTransport::Rc => "RC",
            QpTransport::Uc => "UC",
            QpTransport::Ud => "UD",
            QpTransport::DcInitiator | QpTransport::DcTarget => "DC",
        }
    }
}

/// A dropped packet, as [`explain`] describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The QPN it was for.
    pub qpn: u32,
    /// The transport of the QP with that number, if the function has one.
    pub qp: Option<QpTransport>,
    /// Its opcode.
    pub opcode: u8,
    /// Its source IPv4 address.
    pub src_ip: [u8; 4],
    /// Bytes of its payload.
    pub payload_len: usize,
    /// The most payload the QP takes in one packet: its path MTU, or a UD QP's limit.
    pub max_payload: u32,
}

/// Whether [`explain`] explains a drop for `why` of an `opcode` packet: the reasons a
/// user can act on. The others come of damage, hostility or timing (checksums, PSNs
/// out of the window), or of a reserved opcode no sound peer sends; a capture shows them.
pub fn explainable(why: Drop, opcode: u8) -> bool {
    match why {
        Drop::Transport | Drop::UnknownQp | Drop::TooLong => true,
        Drop::Opcode => opcode::foreign(opcode).is_some(),
        _ => false,
    }
}

/// The warning that explains a drop of `d` for `why`: what arrived, the likely cause and
/// what to do about it; `None` unless [`explainable`].
pub fn explain(why: Drop, d: &Dropped) -> Option<String> {
    if !explainable(why, d.opcode) {
        return None;
    }
    let name = opcode_name(d.opcode);
    // "an RC_...", "an XRC_...", "a UC_...", "a UD_...", "a CNP", "a DC_...".
    let article = if name.starts_with(['R', 'X']) {
        "an"
    } else {
        "a"
    };
    let ip = std::net::Ipv4Addr::from(d.src_ip);
    let mut text = format!("dropped {article} {name} from {ip} for ");
    if let Some(qp) = d.qp {
        let _ = write!(text, "{} ", qp.name());
    }
    let _ = write!(text, "QP {:#x}", d.qpn);
    let info = opcode_info(d.opcode);
    let foreign = opcode::foreign(d.opcode);
    let datagram = info.is_some_and(|i| i.is_datagram());
    let control = info.is_some_and(|i| i.is_dc_control());
    let theirs = if info.is_some_and(|i| i.is_uc()) {
        "UC"
    } else {
        "RC"
    };
    let qp = d.qp.unwrap_or(QpTransport::Rc);
    let cause = match why {
        Drop::Transport => match foreign {
            Some(f) => format!(
                ": rnic has no {t} QPs (the peer's QP is {t}: create it as {p}, as this one is)",
                t = f.transport,
                p = qp.peer()
            ),
            None if datagram => format!(
                ": the peer sends datagrams to a connected QP (its QP is UD: make both QPs \
                 {p}, or both UD)",
                p = qp.peer()
            ),
            None if control => ": the peer is a DC initiator and this QP is no DC target \
                 (address a DC target QP, with its DC access key)"
                .to_string(),
            None if qp == QpTransport::Ud => format!(
                ": the peer's QP is connected and this one takes datagrams (make both QPs \
                 UD, or both {theirs})"
            ),
            None => format!(
                ": the peer's QP is {theirs} and this one is {p} (make both QPs {p}, or both \
                 {theirs})",
                p = qp.peer()
            ),
        },
        Drop::Opcode => match foreign {
            Some(f) if f.transport == "CNP" => ": rnic does no congestion control and \
                 ignores CNPs (the peer runs ECN congestion control, e.g. DCQCN: turn it off \
                 for this traffic to stop them)"
                .to_string(),
            _ => ": rnic does not do this operation (the peer posted a work request rnic \
                 lacks: use SENDs, RDMA WRITEs and READs, and the two atomics)"
                .to_string(),
        },
        Drop::UnknownQp => ", which this function does not have (was the QP destroyed, or \
             is the peer using a stale QPN?)"
            .to_string(),
        Drop::TooLong if qp == QpTransport::Ud => format!(
            ": its {}-byte payload is more than a UD packet carries here, {} (send \
             smaller datagrams)",
            d.payload_len, d.max_payload
        ),
        Drop::TooLong => format!(
            ": its {}-byte payload is more than the QP's path MTU, {} (set the same MTU on \
             both sides: path_mtu, or -m of the perftest tools)",
            d.payload_len, d.max_payload
        ),
        _ => return None,
    };
    text.push_str(&cause);
    Some(text)
}

/// The (QP, reason) pairs a function has explained ([`explain`]), so that it explains
/// each once. Bounded: a peer can name any QPN, and each is a pair of its own. It goes
/// with the function's other state at a reset.
#[derive(Debug, Default)]
pub struct Explained {
    pairs: HashSet<(u32, Drop)>,
    full: bool,
}

/// What to do about an explainable drop ([`Explained::note`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first of its QP and reason: warn, with [`explain`]'s words.
    Explain,
    /// The first new pair after [`Explained::MAX`]: warn that new ones are no longer
    /// explained.
    Suppress,
    /// Explained before, or new after the suppression: count only.
    Count,
}

impl Explained {
    /// The pairs remembered; drops of further ones are counted only.
    pub const MAX: usize = 256;

    /// Notes a drop for `why` of a packet for QP `qpn`, and says whether to explain it.
    pub fn note(&mut self, qpn: u32, why: Drop) -> Verdict {
        if self.pairs.contains(&(qpn, why)) {
            return Verdict::Count;
        }
        if self.pairs.len() < Self::MAX {
            self.pairs.insert((qpn, why));
            return Verdict::Explain;
        }
        if self.full {
            return Verdict::Count;
        }
        self.full = true;
        Verdict::Suppress
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::hdr;
    use crate::roce::parse;

    #[test]
    fn every_reason_has_its_own_counter_in_check_order() {
        for (i, why) in Drop::ALL.into_iter().enumerate() {
            let mut c = DropCounters::default();
            c.count(why, 3);
            let named = c.named();
            assert_eq!(named[i].1, 3, "{why:?} is counted under {}", named[i].0);
            assert_eq!(c.total(), 3);
            let mut sum = DropCounters::default();
            sum.add(&c);
            sum.add(&c);
            assert_eq!(sum.named()[i].1, 6);
        }
    }

    #[test]
    fn every_reason_has_its_own_counter() {
        let all = Drop::ALL;
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
        assert_eq!(c.total(), (1..=19).sum::<u64>());
        assert!(c.to_string().starts_with("length=1 header=2 "));
        assert!(c.to_string().contains(" opcode=5 "));
        assert!(c.to_string().contains(" unknown_qp=9 transport=10 "));
        assert!(c.to_string().contains(" too_long=14 "));
        assert!(c
            .to_string()
            .ends_with(" psn=15 qkey=16 no_receive=17 dc_key=18 refused=19"));
    }

    #[test]
    fn parse_errors_map_to_their_reason() {
        assert_eq!(Drop::from(ParseError::IpChecksum), Drop::Checksum);
        assert_eq!(Drop::from(ParseError::BthVersion(1)), Drop::Version);
        assert_eq!(Drop::from(ParseError::UnknownOpcode(0x15)), Drop::Opcode);
        let unsupported = |opcode| {
            ParseError::Unsupported(parse::Unsupported {
                dst_mac: [0; 6],
                src_ip: [0; 4],
                dst_ip: [0; 4],
                bth: hdr::Bth::new(opcode, 0x11, 0),
            })
        };
        // RD and XRC are transports: the QP's is another. A CNP is not taken on any QP.
        // (UC parses: its QPs are told apart by the receive checks.)
        for (opcode, why) in [
            (0x44, Drop::Transport),
            (0xA4, Drop::Transport),
            (0x80, Drop::Opcode),
        ] {
            assert_eq!(Drop::from(unsupported(opcode)), why, "{opcode:#x}");
        }
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

    fn dropped(qp: Option<QpTransport>, opcode: u8) -> Dropped {
        Dropped {
            qpn: 0x11,
            qp,
            opcode,
            src_ip: [10, 0, 0, 2],
            payload_len: 4096,
            max_payload: 1024,
        }
    }

    #[test]
    fn a_drop_the_user_can_act_on_is_explained_with_its_cause_and_remedy() {
        use QpTransport::*;
        let say = |why, qp, opcode| explain(why, &dropped(qp, opcode)).unwrap();
        assert_eq!(
            say(Drop::Transport, Some(Rc), 0x24),
            "dropped a UC_SEND_ONLY from 10.0.0.2 for RC QP 0x11: the peer's QP is UC and \
             this one is RC (make both QPs RC, or both UC)"
        );
        assert_eq!(
            say(Drop::Transport, Some(Uc), 0x04),
            "dropped an RC_SEND_ONLY from 10.0.0.2 for UC QP 0x11: the peer's QP is RC and \
             this one is UC (make both QPs UC, or both RC)"
        );
        assert!(say(Drop::Transport, Some(Uc), 0x64)
            .ends_with("(its QP is UD: make both QPs UC, or both UD)"));
        assert!(say(Drop::Transport, Some(Ud), 0x2A)
            .ends_with("this one takes datagrams (make both QPs UD, or both UC)"));
        assert!(say(Drop::Transport, Some(Rc), 0x44)
            .contains("rnic has no RD QPs (the peer's QP is RD: create it as RC, as this one is)"));
        assert_eq!(
            say(Drop::Transport, Some(Rc), 0x64),
            "dropped a UD_SEND_ONLY from 10.0.0.2 for RC QP 0x11: the peer sends datagrams \
             to a connected QP (its QP is UD: make both QPs RC, or both UD)"
        );
        assert!(say(Drop::Transport, Some(Ud), 0x04).starts_with(
            "dropped an RC_SEND_ONLY from 10.0.0.2 for UD QP 0x11: the peer's QP is connected"
        ));
        assert!(say(Drop::Transport, Some(DcInitiator), 0xC0)
            .contains("for DC initiator QP 0x11: the peer is a DC initiator"));
        assert!(say(Drop::Transport, Some(DcTarget), 0xA4)
            .contains("rnic has no XRC QPs (the peer's QP is XRC: create it as DC"));
        assert!(say(Drop::Opcode, Some(Rc), 0x80)
            .starts_with("dropped a CNP from 10.0.0.2 for RC QP 0x11: rnic does no congestion"));
        assert_eq!(
            say(Drop::UnknownQp, None, 0x04),
            "dropped an RC_SEND_ONLY from 10.0.0.2 for QP 0x11, which this function does not \
             have (was the QP destroyed, or is the peer using a stale QPN?)"
        );
        assert_eq!(
            say(Drop::TooLong, Some(Rc), 0x04),
            "dropped an RC_SEND_ONLY from 10.0.0.2 for RC QP 0x11: its 4096-byte payload is \
             more than the QP's path MTU, 1024 (set the same MTU on both sides: path_mtu, or \
             -m of the perftest tools)"
        );
        assert!(say(Drop::TooLong, Some(Ud), 0x64).contains("more than a UD packet carries"));
    }

    #[test]
    fn damage_hostility_and_reserved_opcodes_are_counted_not_explained() {
        for why in [Drop::Icrc, Drop::Psn, Drop::Pkey, Drop::Source, Drop::Qkey] {
            assert!(!explainable(why, 0x04), "{why:?}");
            assert_eq!(explain(why, &dropped(Some(QpTransport::Rc), 0x04)), None);
        }
        assert!(!explainable(Drop::Opcode, 0x15));
        assert!(explainable(Drop::Opcode, 0x80));
    }

    #[test]
    fn each_qp_and_reason_is_explained_once_and_the_memory_is_bounded() {
        let mut e = Explained::default();
        assert_eq!(e.note(0x11, Drop::Transport), Verdict::Explain);
        assert_eq!(e.note(0x11, Drop::Transport), Verdict::Count);
        assert_eq!(e.note(0x11, Drop::TooLong), Verdict::Explain);
        assert_eq!(e.note(0x12, Drop::Transport), Verdict::Explain);
        // A peer spraying QPNs fills the memory; then one warning says so, and the
        // rest are counted only, the pairs explained before included.
        let mut explained = 3;
        for qpn in 0x100.. {
            match e.note(qpn, Drop::UnknownQp) {
                Verdict::Explain => explained += 1,
                Verdict::Suppress => break,
                Verdict::Count => panic!("QP {qpn:#x} was never noted"),
            }
        }
        assert_eq!(explained, Explained::MAX);
        assert_eq!(e.note(0x1_0000, Drop::UnknownQp), Verdict::Count);
        assert_eq!(e.note(0x11, Drop::Transport), Verdict::Count);
        assert_eq!(e.pairs.len(), Explained::MAX);
    }
}
