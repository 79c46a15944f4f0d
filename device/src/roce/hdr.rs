//! The headers of a RoCEv2 frame as rxe's `rxe_hdr.h` lays them out: the lengths of the
//! Ethernet, IPv4 and UDP headers below the transport, the BTH, and the extension headers
//! an opcode carries ([`Headers`]; which ones, [`super::opcode`] says)
//! (docs/hardware-interface.md §7.11).

use std::fmt;
use std::time::Duration;

/// The UDP destination port of RoCEv2 (IANA-assigned); every RoCEv2 packet goes to it.
pub const ROCEV2_PORT: u16 = 4791;
/// The default partition key (full membership of the default partition), which rxe
/// puts in every BTH unless the QP was given another P_Key index.
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// Length of an Ethernet II header (destination MAC, source MAC, EtherType).
pub const ETH_HEADER_LEN: usize = 14;
/// The EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Length of an IPv4 header without options, the only kind rxe sends or can check.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// Length of the Base Transport Header.
pub const BTH_LEN: usize = 12;
/// Length of the invariant CRC that ends every packet.
pub const ICRC_LEN: usize = 4;
/// Offset of the IPv4 identification field in a frame.
pub const IP_ID_OFFSET: usize = ETH_HEADER_LEN + 4;
/// The IP protocol number of UDP.
pub(super) const IPPROTO_UDP: u8 = 17;
/// IPv4 flags/fragment-offset word with only Don't Fragment set, as rxe sends: RoCE
/// packets are sized to the path MTU and must never be fragmented.
pub(super) const IP_DF: u16 = 0x4000;
/// The More Fragments flag and the fragment offset: either means a fragment.
pub(super) const IP_MF_OFFSET: u16 = 0x3FFF;
/// The largest 24-bit value (QPN, PSN, MSN).
pub(super) const MASK_24: u32 = 0x00FF_FFFF;

/// An extension header that follows the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// RDMA Extended Transport Header: remote VA, R_Key, DMA length (16 bytes).
    Reth,
    /// ACK Extended Transport Header: syndrome and MSN (4 bytes).
    Aeth,
    /// Atomic Extended Transport Header: VA, R_Key, swap/add, compare (28 bytes).
    AtomicEth,
    /// Atomic ACK Extended Transport Header: the original remote value (8 bytes).
    AtomicAckEth,
    /// Immediate data (4 bytes).
    Imm,
    /// Invalidate Extended Transport Header: the R_Key to invalidate (4 bytes).
    Ieth,
    /// Datagram Extended Transport Header: Q_Key and source QP (8 bytes, UD).
    Deth,
    /// DC Extended Transport Header: DC access key and the initiator's QP (16 bytes).
    Dceth,
    /// FLUSH Extended Transport Header: placement type (bits 3:0) and selectivity level
    /// (bits 5:4) of an RC FLUSH (4 bytes; IBTA 1.5, rxe's `rxe_feth`).
    Feth,
}

impl ExtHeader {
    /// The header's length on the wire, in bytes.
    pub const fn wire_len(self) -> usize {
        match self {
            ExtHeader::Reth => 16,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicEth => 28,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::Imm => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::Deth => 8,
            ExtHeader::Dceth => 16,
            ExtHeader::Feth => 4,
        }
    }

    /// The name used in errors and logs.
    pub const fn name(self) -> &'static str {
        match self {
            ExtHeader::Reth => "RETH",
            ExtHeader::Aeth => "AETH",
            ExtHeader::AtomicEth => "AtomicETH",
            ExtHeader::AtomicAckEth => "AtomicAckETH",
            ExtHeader::Imm => "ImmDt",
            ExtHeader::Ieth => "IETH",
            ExtHeader::Deth => "DETH",
            ExtHeader::Dceth => "DCETH",
            ExtHeader::Feth => "FETH",
        }
    }
}

impl fmt::Display for ExtHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// Classification bits of `OpcodeInfo`. Private so that the methods are the interface.

/// The Base Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bth {
    /// The opcode; see [`super::opcode`].
    pub opcode: u8,
    /// Solicited Event: the responder should raise a completion event for this message.
    pub solicited: bool,
    /// MigReq: path migration state (rxe always sends 0).
    pub mig_req: bool,
    /// Pad count (0..=3): bytes after the payload that make it a multiple of 4. Ignored
    /// by [`super::build::build`], which computes it; set by [`super::parse::parse`].
    pub pad: u8,
    /// Transport header version; must be 0.
    pub tver: u8,
    /// Partition key; usually [`DEFAULT_PKEY`].
    pub pkey: u16,
    /// Forward ECN: set by the network on congestion. Not covered by the ICRC.
    pub fecn: bool,
    /// Backward ECN. Not covered by the ICRC.
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// AckReq: the responder must acknowledge this packet.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    /// A BTH with the given opcode, destination QP and PSN, the default P_Key, and every
    /// flag clear. (`Bth::default()` has P_Key 0, which no receiver accepts.)
    pub const fn new(opcode: u8, dest_qp: u32, psn: u32) -> Self {
        Bth {
            opcode,
            solicited: false,
            mig_req: false,
            pad: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }
}

/// The RDMA Extended Transport Header: the remote buffer of a WRITE or READ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole transfer (not of this packet).
    pub dma_len: u32,
}

/// NAK codes: the low 5 bits of an AETH syndrome whose type is NAK (IB spec table 44).
pub mod nak {
    /// PSN sequence error: the responder got a PSN ahead of the one it expected; the
    /// requester retransmits from the NAK's PSN (go-back-N).
    pub const PSN_SEQ_ERROR: u8 = 0;
    /// Invalid request (unsupported opcode, bad length...).
    pub const INVALID_REQUEST: u8 = 1;
    /// Remote access error (bad R_Key, bounds, access rights).
    pub const REMOTE_ACCESS_ERROR: u8 = 2;
    /// Remote operational error (the responder could not complete the request).
    pub const REMOTE_OPERATIONAL_ERROR: u8 = 3;
    /// Invalid RD request (RD transport only; listed for completeness).
    pub const INVALID_RD_REQUEST: u8 = 4;
}

/// The credit count of an ACK that means "no credit information" (rxe's
/// AETH_ACK_UNLIMITED): responders without end-to-end flow control send it.
pub const AETH_CREDIT_INVALID: u8 = 0x1F;

/// Syndrome type bits (7..5) of an AETH; bit 7 is reserved and must be 0.
const AETH_TYPE_MASK: u8 = 0xE0;
const AETH_TYPE_ACK: u8 = 0x00;
const AETH_TYPE_RNR_NAK: u8 = 0x20;
const AETH_TYPE_NAK: u8 = 0x60;
/// The 5-bit value of a syndrome: credits, RNR timer, or NAK code.
const AETH_VALUE_MASK: u8 = 0x1F;

/// The ACK Extended Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Aeth {
    /// The syndrome byte: type in bits 6..5 (bit 7 reserved), value in bits 4..0. Build
    /// it with [`Aeth::ack`], [`Aeth::nak`] or [`Aeth::rnr_nak`]; read it with
    /// [`Aeth::kind`].
    pub syndrome: u8,
    /// Message sequence number (24 bits): count of messages the responder has completed.
    pub msn: u32,
}

/// What an AETH syndrome says; from [`Aeth::kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AethKind {
    /// Positive acknowledgement with a credit count ([`AETH_CREDIT_INVALID`] = none).
    Ack {
        /// The 5-bit credit count code.
        credit: u8,
    },
    /// Receiver not ready: retry after the encoded timer.
    RnrNak {
        /// The 5-bit RNR timer code (IB spec table 45).
        timer: u8,
    },
    /// Negative acknowledgement; see [`nak`] for the codes.
    Nak {
        /// The 5-bit NAK code.
        code: u8,
    },
    /// A reserved syndrome type (0b10, or bit 7 set), which receivers must not act on.
    Reserved {
        /// The whole syndrome byte.
        syndrome: u8,
    },
}

impl Aeth {
    /// An ACK with credit count code `credit` (5 bits; higher bits are dropped) and MSN 0;
    /// set the MSN with [`Aeth::with_msn`].
    pub const fn ack(credit: u8) -> Self {
        Aeth {
            syndrome: AETH_TYPE_ACK | (credit & AETH_VALUE_MASK),
            msn: 0,
        }
    }

    /// A NAK with `code` (see [`nak`]; 5 bits, higher bits dropped) and MSN 0.
    pub const fn nak(code: u8) -> Self {
        Aeth {
            syndrome: AETH_TYPE_NAK | (code & AETH_VALUE_MASK),
            msn: 0,
        }
    }

    /// An RNR NAK with the 5-bit RNR timer code `timer` (higher bits dropped) and MSN 0.
    pub const fn rnr_nak(timer: u8) -> Self {
        Aeth {
            syndrome: AETH_TYPE_RNR_NAK | (timer & AETH_VALUE_MASK),
            msn: 0,
        }
    }

    /// The same AETH with MSN `msn` (taken modulo 2^24, as MSNs wrap).
    pub const fn with_msn(self, msn: u32) -> Self {
        Aeth {
            syndrome: self.syndrome,
            msn: msn & MASK_24,
        }
    }

    /// Decodes the syndrome the way rxe's completer does (type = bits 7..5).
    pub const fn kind(&self) -> AethKind {
        let value = self.syndrome & AETH_VALUE_MASK;
        match self.syndrome & AETH_TYPE_MASK {
            AETH_TYPE_ACK => AethKind::Ack { credit: value },
            AETH_TYPE_RNR_NAK => AethKind::RnrNak { timer: value },
            AETH_TYPE_NAK => AethKind::Nak { code: value },
            _ => AethKind::Reserved {
                syndrome: self.syndrome,
            },
        }
    }
}

/// The RNR NAK timer values of the IB spec (table 45), in microseconds, by code.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// How long an RNR NAK with timer `code` asks the requester to wait.
pub fn rnr_delay(code: u8) -> Duration {
    Duration::from_micros(u64::from(RNR_TIMER_US[usize::from(code & 0x1f)]))
}

/// The Atomic Extended Transport Header of compare-and-swap and fetch-and-add.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (compare and swap) or addend (fetch and add).
    pub swap_add: u64,
    /// Compare value (compare and swap; ignored by fetch and add).
    pub compare: u64,
}

/// The Atomic ACK Extended Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicAckEth {
    /// The remote value before the atomic operation.
    pub orig: u64,
}

/// The transport headers of one packet: the BTH and the extension headers its opcode
/// carries (those it does not carry are `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Headers {
    /// The BTH.
    pub bth: Bth,
    /// RETH: WRITE first/only, READ request.
    pub reth: Option<Reth>,
    /// AETH: ACK, atomic ACK, READ response first/last/only.
    pub aeth: Option<Aeth>,
    /// AtomicETH: compare and swap, fetch and add.
    pub atomic: Option<AtomicEth>,
    /// AtomicAckETH: atomic ACK.
    pub atomic_ack: Option<AtomicAckEth>,
    /// Immediate data exactly as on the wire. Kept as raw bytes because verbs hand it to
    /// the application as an opaque big-endian `__be32`: no byte order is implied here.
    pub imm: Option<[u8; 4]>,
    /// IETH: the R_Key to invalidate (SEND with invalidate).
    pub ieth: Option<u32>,
    /// DETH: UD SENDs.
    pub deth: Option<Deth>,
    /// DCETH: DC connect and disconnect.
    pub dceth: Option<Dceth>,
    /// FETH: an RC FLUSH's word, placement type in bits 3:0 and selectivity level in
    /// bits 5:4 (`rnic_abi::verbs::flush::feth`); the other bits are reserved.
    pub feth: Option<u32>,
}

/// The DC Extended Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Dceth {
    /// The DC access key the target must have.
    pub dc_key: u64,
    /// The initiating DCI (24 bits): where the target's answers go.
    pub dci_qpn: u32,
}

/// The Datagram Extended Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Deth {
    /// The Q_Key the receiving QP must have.
    pub qkey: u32,
    /// The sending QP (24 bits).
    pub src_qp: u32,
}

impl Headers {
    /// Whether extension header `h` is present.
    pub const fn has(&self, h: ExtHeader) -> bool {
        match h {
            ExtHeader::Reth => self.reth.is_some(),
            ExtHeader::Aeth => self.aeth.is_some(),
            ExtHeader::AtomicEth => self.atomic.is_some(),
            ExtHeader::AtomicAckEth => self.atomic_ack.is_some(),
            ExtHeader::Imm => self.imm.is_some(),
            ExtHeader::Ieth => self.ieth.is_some(),
            ExtHeader::Deth => self.deth.is_some(),
            ExtHeader::Dceth => self.dceth.is_some(),
            ExtHeader::Feth => self.feth.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aeth_helpers() {
        assert_eq!(Aeth::ack(AETH_CREDIT_INVALID).syndrome, 0x1F);
        assert_eq!(Aeth::nak(nak::PSN_SEQ_ERROR).syndrome, 0x60);
        assert_eq!(Aeth::nak(nak::REMOTE_OPERATIONAL_ERROR).syndrome, 0x63);
        assert_eq!(Aeth::rnr_nak(14).syndrome, 0x2E);
        assert_eq!(Aeth::ack(3).kind(), AethKind::Ack { credit: 3 });
        assert_eq!(
            Aeth::nak(nak::INVALID_REQUEST).kind(),
            AethKind::Nak { code: 1 }
        );
        assert_eq!(Aeth::rnr_nak(5).kind(), AethKind::RnrNak { timer: 5 });
        assert_eq!(
            Aeth {
                syndrome: 0x41,
                msn: 0
            }
            .kind(),
            AethKind::Reserved { syndrome: 0x41 }
        );
        assert_eq!(
            Aeth {
                syndrome: 0x80,
                msn: 0
            }
            .kind(),
            AethKind::Reserved { syndrome: 0x80 }
        );
        assert_eq!(Aeth::ack(0).with_msn(0x0100_0005).msn, 5);
    }
}
