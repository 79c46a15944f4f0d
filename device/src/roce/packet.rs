//! RoCEv2 frames, byte for byte as Linux's rdma_rxe builds and checks them
//! (drivers/infiniband/sw/rxe: rxe_hdr.h for the header layouts, rxe_opcode.c for which
//! headers each opcode carries, rxe_net.c for the IP and UDP headers, rxe_recv.c and
//! rxe_icrc.c for what a receiver checks).
//!
//! A frame is:
//!
//! ```text
//! Ethernet II (14) | IPv4 (20, no options) | UDP (8, dst 4791) | BTH (12)
//!   | extension headers (per opcode, in wire order) | payload | pad (0..=3) | ICRC (4)
//! ```
//!
//! [`build`] appends such a frame to a buffer; [`parse`] validates one and returns its
//! headers and a borrowed payload. [`opcode_info`] is the one table of which extension
//! headers each opcode carries and what kind of packet it is: both directions use it, so
//! they cannot disagree.

use std::fmt;
use std::time::Duration;

use crate::roce::icrc::icrc;

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
const IPPROTO_UDP: u8 = 17;
/// IPv4 flags/fragment-offset word with only Don't Fragment set, as rxe sends: RoCE
/// packets are sized to the path MTU and must never be fragmented.
const IP_DF: u16 = 0x4000;
/// The More Fragments flag and the fragment offset: either means a fragment.
const IP_MF_OFFSET: u16 = 0x3FFF;
/// The largest 24-bit value (QPN, PSN, MSN).
const MASK_24: u32 = 0x00FF_FFFF;

/// The RC opcodes (BTH byte 0), named as in the InfiniBand specification and rdma_rxe
/// (`IB_OPCODE_RC_*`). RC is transport 0b000, so these are also the low 5 bits.
pub mod opcode {
    /// First packet of a multi-packet SEND.
    pub const RC_SEND_FIRST: u8 = 0x00;
    /// Middle packet of a SEND.
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    /// Last packet of a SEND.
    pub const RC_SEND_LAST: u8 = 0x02;
    /// Last packet of a SEND with immediate data (carries ImmDt).
    pub const RC_SEND_LAST_WITH_IMMEDIATE: u8 = 0x03;
    /// A single-packet SEND.
    pub const RC_SEND_ONLY: u8 = 0x04;
    /// A single-packet SEND with immediate data (carries ImmDt).
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x05;
    /// First packet of an RDMA WRITE (carries the RETH).
    pub const RC_RDMA_WRITE_FIRST: u8 = 0x06;
    /// Middle packet of an RDMA WRITE.
    pub const RC_RDMA_WRITE_MIDDLE: u8 = 0x07;
    /// Last packet of an RDMA WRITE.
    pub const RC_RDMA_WRITE_LAST: u8 = 0x08;
    /// Last packet of an RDMA WRITE with immediate data (carries ImmDt).
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x09;
    /// A single-packet RDMA WRITE (carries the RETH).
    pub const RC_RDMA_WRITE_ONLY: u8 = 0x0a;
    /// A single-packet RDMA WRITE with immediate data (RETH, then ImmDt).
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0b;
    /// An RDMA READ request (carries the RETH, no payload).
    pub const RC_RDMA_READ_REQUEST: u8 = 0x0c;
    /// First packet of a multi-packet READ response (carries the AETH).
    pub const RC_RDMA_READ_RESPONSE_FIRST: u8 = 0x0d;
    /// Middle packet of a READ response (no AETH).
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0e;
    /// Last packet of a READ response (carries the AETH).
    pub const RC_RDMA_READ_RESPONSE_LAST: u8 = 0x0f;
    /// A single-packet READ response (carries the AETH).
    pub const RC_RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
    /// An ACK or NAK (carries the AETH, no payload).
    pub const RC_ACKNOWLEDGE: u8 = 0x11;
    /// The response to an atomic (AETH, then AtomicAckETH; no payload).
    pub const RC_ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    /// Atomic compare and swap request (carries the AtomicETH).
    pub const RC_COMPARE_SWAP: u8 = 0x13;
    /// Atomic fetch and add request (carries the AtomicETH).
    pub const RC_FETCH_ADD: u8 = 0x14;
    /// Last packet of a SEND with invalidate (carries the IETH).
    pub const RC_SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
    /// A single-packet SEND with invalidate (carries the IETH).
    pub const RC_SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
    /// A UD SEND (carries the DETH; UD messages are one packet).
    pub const UD_SEND_ONLY: u8 = 0x64;
    /// A UD SEND with immediate data (DETH, then ImmDt).
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x65;
    /// DC connect (manufacturer-specific range 0xC0-0xFF; carries the DCETH).
    pub const DC_CONNECT: u8 = 0xC0;
    /// DC disconnect (carries the DCETH).
    pub const DC_DISCONNECT: u8 = 0xC1;
}

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
        }
    }
}

impl fmt::Display for ExtHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// Classification bits of `OpcodeInfo`. Private so that the methods are the interface.
/// Sent by the requester (rxe's RXE_REQ_MASK).
const F_REQUEST: u16 = 1 << 0;
/// Sent by the responder: READ responses and ACKs (rxe's RXE_ACK_MASK).
const F_RESPONSE: u16 = 1 << 1;
/// First packet of a message (rxe's RXE_START_MASK).
const F_FIRST: u16 = 1 << 2;
/// Neither first nor last (rxe's RXE_MIDDLE_MASK).
const F_MIDDLE: u16 = 1 << 3;
/// Last packet of a message (rxe's RXE_END_MASK).
const F_LAST: u16 = 1 << 4;
/// Part of a SEND.
const F_SEND: u16 = 1 << 5;
/// Part of an RDMA WRITE.
const F_WRITE: u16 = 1 << 6;
/// An RDMA READ request.
const F_READ_REQUEST: u16 = 1 << 7;
/// Part of an RDMA READ response.
const F_READ_RESPONSE: u16 = 1 << 8;
/// An atomic request.
const F_ATOMIC: u16 = 1 << 9;
/// An ACK/NAK or atomic ACK: a response that carries no data.
const F_ACK: u16 = 1 << 10;
/// Completes a receive at the responder (rxe's RXE_COMP_MASK).
const F_COMPLETES: u16 = 1 << 11;
/// Takes a receive WQE at the responder (rxe's RXE_RWR_MASK).
const F_CONSUMES_RWQE: u16 = 1 << 12;
/// A UD (datagram) opcode; all the others are RC.
const F_DATAGRAM: u16 = 1 << 13;
/// A DC connection-management packet (DC_CONNECT, DC_DISCONNECT).
const F_DC_CONTROL: u16 = 1 << 14;

/// What one opcode carries and what kind of packet it is; from [`opcode_info`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode (BTH byte 0).
    pub opcode: u8,
    /// Its name as in the InfiniBand specification, e.g. `"RC_SEND_ONLY"`.
    pub name: &'static str,
    /// The extension headers after the BTH, in wire order.
    pub ext_headers: &'static [ExtHeader],
    /// Whether the packet may carry a payload (it may still be empty, e.g. a zero-length
    /// SEND). Opcodes without one must have none.
    pub has_payload: bool,
    flags: u16,
}

impl OpcodeInfo {
    /// Length of the BTH plus the extension headers, i.e. where the payload starts.
    pub const fn header_len(&self) -> usize {
        let mut len = BTH_LEN;
        let mut i = 0;
        while i < self.ext_headers.len() {
            len += self.ext_headers[i].wire_len();
            i += 1;
        }
        len
    }

    /// Offset of extension header `h` from the start of the BTH, if the opcode carries it.
    pub fn ext_offset(&self, h: ExtHeader) -> Option<usize> {
        let mut offset = BTH_LEN;
        for &e in self.ext_headers {
            if e == h {
                return Some(offset);
            }
            offset += e.wire_len();
        }
        None
    }

    /// Whether the opcode carries extension header `h`.
    pub fn carries(&self, h: ExtHeader) -> bool {
        self.ext_headers.contains(&h)
    }

    const fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// Sent by a requester (SEND, WRITE, READ request, atomic request).
    pub const fn is_request(&self) -> bool {
        self.has(F_REQUEST)
    }
    /// Sent by a responder (READ response, ACK/NAK, atomic ACK).
    pub const fn is_response(&self) -> bool {
        self.has(F_RESPONSE)
    }
    /// First packet of a message (also true of `*_ONLY`, READ request, atomics, ACKs).
    pub const fn is_first(&self) -> bool {
        self.has(F_FIRST)
    }
    /// A middle packet (`*_MIDDLE`).
    pub const fn is_middle(&self) -> bool {
        self.has(F_MIDDLE)
    }
    /// Last packet of a message (also true of `*_ONLY`, READ request, atomics, ACKs).
    pub const fn is_last(&self) -> bool {
        self.has(F_LAST)
    }
    /// The whole message in one packet: both first and last.
    pub const fn is_only(&self) -> bool {
        self.has(F_FIRST) && self.has(F_LAST)
    }
    /// Part of a SEND (any variant: plain, with immediate, with invalidate).
    pub const fn is_send(&self) -> bool {
        self.has(F_SEND)
    }
    /// Part of an RDMA WRITE (with or without immediate).
    pub const fn is_write(&self) -> bool {
        self.has(F_WRITE)
    }
    /// An RDMA READ request.
    pub const fn is_read_request(&self) -> bool {
        self.has(F_READ_REQUEST)
    }
    /// Part of an RDMA READ response.
    pub const fn is_read_response(&self) -> bool {
        self.has(F_READ_RESPONSE)
    }
    /// Part of an RDMA READ, request or response.
    pub const fn is_read(&self) -> bool {
        self.has(F_READ_REQUEST) || self.has(F_READ_RESPONSE)
    }
    /// An atomic request (compare and swap, fetch and add).
    pub const fn is_atomic(&self) -> bool {
        self.has(F_ATOMIC)
    }
    /// An acknowledgement that carries no data: RC_ACKNOWLEDGE or RC_ATOMIC_ACKNOWLEDGE.
    pub const fn is_ack(&self) -> bool {
        self.has(F_ACK)
    }
    /// A UD opcode (the others are RC).
    pub const fn is_datagram(&self) -> bool {
        self.has(F_DATAGRAM)
    }
    /// A DC connect or disconnect.
    pub const fn is_dc_control(&self) -> bool {
        self.has(F_DC_CONTROL)
    }
    /// Carries immediate data.
    pub fn has_immediate(&self) -> bool {
        self.carries(ExtHeader::Imm)
    }
    /// Carries an R_Key to invalidate.
    pub fn has_invalidate(&self) -> bool {
        self.carries(ExtHeader::Ieth)
    }
    /// Ends a message that completes a receive WQE at the responder (last/only SEND,
    /// last/only WRITE with immediate).
    pub const fn completes_receive(&self) -> bool {
        self.has(F_COMPLETES)
    }
    /// The packet at which the responder takes a receive WQE (first/only SEND, last/only
    /// WRITE with immediate), as rxe's RXE_RWR_MASK marks it.
    pub const fn consumes_receive_wqe(&self) -> bool {
        self.has(F_CONSUMES_RWQE)
    }
}

const NO_EXT: &[ExtHeader] = &[];
const RETH: &[ExtHeader] = &[ExtHeader::Reth];
const IMM: &[ExtHeader] = &[ExtHeader::Imm];
const RETH_IMM: &[ExtHeader] = &[ExtHeader::Reth, ExtHeader::Imm];
const AETH: &[ExtHeader] = &[ExtHeader::Aeth];
const AETH_ATOMIC_ACK: &[ExtHeader] = &[ExtHeader::Aeth, ExtHeader::AtomicAckEth];
const ATOMIC: &[ExtHeader] = &[ExtHeader::AtomicEth];
const IETH: &[ExtHeader] = &[ExtHeader::Ieth];
const DETH: &[ExtHeader] = &[ExtHeader::Deth];
const DETH_IMM: &[ExtHeader] = &[ExtHeader::Deth, ExtHeader::Imm];
const DCETH: &[ExtHeader] = &[ExtHeader::Dceth];

/// The opcode table: the extension headers (in wire order), payload and classification
/// of every RC opcode, as in rxe_opcode.c. `None` for opcodes this device does not speak
/// (other transports, RC FLUSH and ATOMIC WRITE, reserved values), which [`parse`]
/// rejects.
pub fn opcode_info(op: u8) -> Option<OpcodeInfo> {
    OPCODES[usize::from(op)]
}

/// [`describe`] of every opcode, worked out at compile time: every packet built or
/// parsed looks its opcode up.
static OPCODES: [Option<OpcodeInfo>; 256] = {
    let mut table = [None; 256];
    let mut op = 0;
    while op < 256 {
        table[op] = describe(op as u8);
        op += 1;
    }
    table
};

/// What [`opcode_info`] says of `op`.
const fn describe(op: u8) -> Option<OpcodeInfo> {
    use opcode::*;
    const REQ_SEND: u16 = F_REQUEST | F_SEND;
    const REQ_WRITE: u16 = F_REQUEST | F_WRITE;
    const READ_RESP: u16 = F_RESPONSE | F_READ_RESPONSE;
    const ONE: u16 = F_FIRST | F_LAST;
    let (name, ext_headers, has_payload, flags): (&str, &[ExtHeader], bool, u16) = match op {
        RC_SEND_FIRST => (
            "RC_SEND_FIRST",
            NO_EXT,
            true,
            REQ_SEND | F_FIRST | F_CONSUMES_RWQE,
        ),
        RC_SEND_MIDDLE => ("RC_SEND_MIDDLE", NO_EXT, true, REQ_SEND | F_MIDDLE),
        RC_SEND_LAST => (
            "RC_SEND_LAST",
            NO_EXT,
            true,
            REQ_SEND | F_LAST | F_COMPLETES,
        ),
        RC_SEND_LAST_WITH_IMMEDIATE => (
            "RC_SEND_LAST_WITH_IMMEDIATE",
            IMM,
            true,
            REQ_SEND | F_LAST | F_COMPLETES,
        ),
        RC_SEND_ONLY => (
            "RC_SEND_ONLY",
            NO_EXT,
            true,
            REQ_SEND | ONE | F_COMPLETES | F_CONSUMES_RWQE,
        ),
        RC_SEND_ONLY_WITH_IMMEDIATE => (
            "RC_SEND_ONLY_WITH_IMMEDIATE",
            IMM,
            true,
            REQ_SEND | ONE | F_COMPLETES | F_CONSUMES_RWQE,
        ),
        RC_RDMA_WRITE_FIRST => ("RC_RDMA_WRITE_FIRST", RETH, true, REQ_WRITE | F_FIRST),
        RC_RDMA_WRITE_MIDDLE => ("RC_RDMA_WRITE_MIDDLE", NO_EXT, true, REQ_WRITE | F_MIDDLE),
        RC_RDMA_WRITE_LAST => ("RC_RDMA_WRITE_LAST", NO_EXT, true, REQ_WRITE | F_LAST),
        RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => (
            "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            IMM,
            true,
            REQ_WRITE | F_LAST | F_COMPLETES | F_CONSUMES_RWQE,
        ),
        RC_RDMA_WRITE_ONLY => ("RC_RDMA_WRITE_ONLY", RETH, true, REQ_WRITE | ONE),
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => (
            "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            RETH_IMM,
            true,
            REQ_WRITE | ONE | F_COMPLETES | F_CONSUMES_RWQE,
        ),
        RC_RDMA_READ_REQUEST => (
            "RC_RDMA_READ_REQUEST",
            RETH,
            false,
            F_REQUEST | F_READ_REQUEST | ONE,
        ),
        RC_RDMA_READ_RESPONSE_FIRST => (
            "RC_RDMA_READ_RESPONSE_FIRST",
            AETH,
            true,
            READ_RESP | F_FIRST,
        ),
        RC_RDMA_READ_RESPONSE_MIDDLE => (
            "RC_RDMA_READ_RESPONSE_MIDDLE",
            NO_EXT,
            true,
            READ_RESP | F_MIDDLE,
        ),
        RC_RDMA_READ_RESPONSE_LAST => {
            ("RC_RDMA_READ_RESPONSE_LAST", AETH, true, READ_RESP | F_LAST)
        }
        RC_RDMA_READ_RESPONSE_ONLY => ("RC_RDMA_READ_RESPONSE_ONLY", AETH, true, READ_RESP | ONE),
        RC_ACKNOWLEDGE => ("RC_ACKNOWLEDGE", AETH, false, F_RESPONSE | F_ACK | ONE),
        RC_ATOMIC_ACKNOWLEDGE => (
            "RC_ATOMIC_ACKNOWLEDGE",
            AETH_ATOMIC_ACK,
            false,
            F_RESPONSE | F_ACK | ONE,
        ),
        RC_COMPARE_SWAP => ("RC_COMPARE_SWAP", ATOMIC, false, F_REQUEST | F_ATOMIC | ONE),
        RC_FETCH_ADD => ("RC_FETCH_ADD", ATOMIC, false, F_REQUEST | F_ATOMIC | ONE),
        RC_SEND_LAST_WITH_INVALIDATE => (
            "RC_SEND_LAST_WITH_INVALIDATE",
            IETH,
            true,
            REQ_SEND | F_LAST | F_COMPLETES,
        ),
        RC_SEND_ONLY_WITH_INVALIDATE => (
            "RC_SEND_ONLY_WITH_INVALIDATE",
            IETH,
            true,
            REQ_SEND | ONE | F_COMPLETES | F_CONSUMES_RWQE,
        ),
        UD_SEND_ONLY => (
            "UD_SEND_ONLY",
            DETH,
            true,
            REQ_SEND | ONE | F_COMPLETES | F_CONSUMES_RWQE | F_DATAGRAM,
        ),
        UD_SEND_ONLY_WITH_IMMEDIATE => (
            "UD_SEND_ONLY_WITH_IMMEDIATE",
            DETH_IMM,
            true,
            REQ_SEND | ONE | F_COMPLETES | F_CONSUMES_RWQE | F_DATAGRAM,
        ),
        DC_CONNECT => ("DC_CONNECT", DCETH, false, F_REQUEST | ONE | F_DC_CONTROL),
        DC_DISCONNECT => (
            "DC_DISCONNECT",
            DCETH,
            false,
            F_REQUEST | ONE | F_DC_CONTROL,
        ),
        _ => return None,
    };
    Some(OpcodeInfo {
        opcode: op,
        name,
        ext_headers,
        has_payload,
        flags,
    })
}

/// An opcode the InfiniBand specification defines that this device does not take: of a
/// transport it has no QPs of, or an operation it does not do. [`foreign`] tells one apart
/// from a reserved value, which no sender writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Foreign {
    /// The transport: `"UC"`, `"RD"`, `"XRC"`, `"CNP"`, or `"RC"` for an RC operation
    /// this device does not do.
    pub transport: &'static str,
    /// The operation as the specification names it after the transport (`"SEND_ONLY"`,
    /// `"FLUSH"`); empty for a CNP, which is nothing else.
    pub operation: &'static str,
}

impl Foreign {
    /// Whether the opcode is of a transport this device has no QPs of (UC, RD, XRC), as
    /// opposed to something it does on no QP (a CNP, RC FLUSH or ATOMIC WRITE).
    pub fn other_transport(&self) -> bool {
        matches!(self.transport, "UC" | "RD" | "XRC")
    }
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operation {
            "" => f.write_str(self.transport),
            op => write!(f, "{}_{op}", self.transport),
        }
    }
}

/// What `op` is if it is an opcode the specification defines that [`opcode_info`] does
/// not know; `None` for a known opcode or a reserved one. Bits 7-5 of an opcode are its
/// transport (RC 0, UC 1, RD 2, UD 3, CNP 4, XRC 5) and bits 4-0 its operation, which UC,
/// RD and XRC number as RC does: UC has the SENDs and WRITEs, RD the RC set up to
/// FETCH_ADD and RESYNC (0x15), XRC the whole RC set; the CNP is 0x80 alone.
pub fn foreign(op: u8) -> Option<Foreign> {
    if opcode_info(op).is_some() {
        return None;
    }
    let low = op & 0x1F;
    // The RC operation with the same low bits, without its "RC_".
    let rc = || opcode_info(low).and_then(|i| i.name.strip_prefix("RC_"));
    let (transport, operation) = match (op >> 5, low) {
        (0, 0x1C) => ("RC", "FLUSH"),
        (0, 0x1D) => ("RC", "ATOMIC_WRITE"),
        (1, 0x00..=0x0B) => ("UC", rc()?),
        (2, 0x00..=0x14) => ("RD", rc()?),
        (2, 0x15) => ("RD", "RESYNC"),
        (4, 0x00) => ("CNP", ""),
        (5, _) => ("XRC", rc()?),
        _ => return None,
    };
    Some(Foreign {
        transport,
        operation,
    })
}

/// The name of opcode `op` as the specification gives it (`"RC_SEND_ONLY"`,
/// `"UC_SEND_ONLY"`, `"CNP"`), or its value for a reserved one.
pub fn opcode_name(op: u8) -> String {
    match (opcode_info(op), foreign(op)) {
        (Some(info), _) => info.name.to_string(),
        (None, Some(f)) => f.to_string(),
        (None, None) => format!("opcode {op:#04x}"),
    }
}

/// The Base Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bth {
    /// The opcode; see [`opcode`].
    pub opcode: u8,
    /// Solicited Event: the responder should raise a completion event for this message.
    pub solicited: bool,
    /// MigReq: path migration state (rxe always sends 0).
    pub mig_req: bool,
    /// Pad count (0..=3): bytes after the payload that make it a multiple of 4. Ignored
    /// by [`build`], which computes it; set by [`parse`].
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
        }
    }
}

/// Everything below the transport headers that a sender chooses for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Addressing {
    /// Source MAC (ours).
    pub src_mac: [u8; 6],
    /// Destination MAC (the peer's, or the next hop's).
    pub dst_mac: [u8; 6],
    /// Source IPv4 address (from our GID).
    pub src_ip: [u8; 4],
    /// Destination IPv4 address (from the peer's GID).
    pub dst_ip: [u8; 4],
    /// UDP source port: flow entropy, fixed per QP; see [`udp_src_port`].
    pub src_port: u16,
    /// IPv4 TTL (the address vector's hop limit).
    pub ttl: u8,
    /// IPv4 TOS byte (the address vector's traffic class: DSCP and ECN).
    pub tos: u8,
    /// IPv4 identification. With DF set it only has to differ between packets in flight.
    pub ip_id: u16,
}

/// The UDP source port rxe gives a connected QP: `rdma_get_udp_sport()` of Linux's
/// ib_verbs.h, which rxe_modify_qp applies when the address vector is set.
///
/// If the GRH flow label is 0 (the usual case), a flow label is derived from the
/// product of both QPNs, so that both ends of a connection pick the same port; the
/// 20-bit label is then folded into 14 bits and put in the dynamic range 0xC000..=0xFFFF.
/// Receivers do not check the source port: any value works, this one merely matches
/// what rxe would send.
pub const fn udp_src_port(flow_label: u32, local_qpn: u32, remote_qpn: u32) -> u16 {
    const FLOW_LABEL_MASK: u64 = 0x000F_FFFF;
    let fl = if flow_label & FLOW_LABEL_MASK as u32 != 0 {
        flow_label & FLOW_LABEL_MASK as u32
    } else {
        let mut v = local_qpn as u64 * remote_qpn as u64;
        v ^= v >> 20;
        v ^= v >> 40;
        (v & FLOW_LABEL_MASK) as u32
    };
    let low = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    (low | 0xC000) as u16
}

/// Why [`build`] refused to build a frame. Nothing is appended when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The BTH opcode is not in the opcode table.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The opcode needs an extension header that `Headers` does not have.
    #[error("opcode {opcode:#04x} needs a {header} that is missing")]
    MissingHeader {
        /// The opcode.
        opcode: u8,
        /// The missing header.
        header: ExtHeader,
    },
    /// `Headers` has an extension header that the opcode does not carry. Refused rather
    /// than dropped because it means the caller picked the wrong opcode or headers.
    #[error("opcode {opcode:#04x} does not carry a {header}")]
    UnexpectedHeader {
        /// The opcode.
        opcode: u8,
        /// The header it does not carry.
        header: ExtHeader,
    },
    /// A payload was given for an opcode that carries none.
    #[error("opcode {opcode:#04x} carries no payload but {len} bytes were given")]
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// The payload length given.
        len: usize,
    },
    /// A field holds a value wider than its wire field (e.g. a PSN of 2^24): refused,
    /// not truncated, because truncation would hide sequence arithmetic bugs.
    #[error("{field} value {value:#x} does not fit its wire field")]
    FieldTooWide {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// The frame would need an IPv4 total length above 65535 bytes.
    #[error("packet too long for IPv4: {ip_len} bytes")]
    TooLong {
        /// The IPv4 total length it would need.
        ip_len: usize,
    },
}

/// Fills in the UDP checksum of a frame [`build`] wrote (whose checksum is 0), as a
/// sender that checksums UDP over IPv4 does (rxe may, hardware RoCE NICs do); the ICRC
/// does not cover it, so the frame stays valid. Frames that are not IPv4/UDP are left.
pub fn set_udp_checksum(frame: &mut [u8]) {
    let ip = ETH_HEADER_LEN;
    let Some(h) = frame.get(ip..ip + IPV4_HEADER_LEN) else {
        return;
    };
    if h[9] != IPPROTO_UDP || h[0] != 0x45 {
        return;
    }
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let words = |b: &[u8]| u32::from(u16::from_be_bytes([b[0], b[1]]));
    let pseudo = words(&h[12..14]) + words(&h[14..16]) + words(&h[16..18]) + words(&h[18..20]);
    let Some(udp) = frame.get_mut(ip + IPV4_HEADER_LEN..ip + total) else {
        return;
    };
    udp[6] = 0;
    udp[7] = 0;
    let len = udp.len() as u32;
    let c = match !ones_complement_sum(pseudo + u32::from(IPPROTO_UDP) + len, udp) {
        0 => 0xFFFF,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
}

/// Ones' complement sum of 16-bit big-endian words (an odd last byte is padded with 0),
/// folded to 16 bits; the base of the IPv4 and UDP checksums.
pub fn ones_complement_sum(mut sum: u32, data: &[u8]) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// Appends a complete frame to `out`: Ethernet II (EtherType 0x0800), IPv4 (no options,
/// DF set, header checksum), UDP (destination port 4791, checksum 0 as rxe sends over
/// IPv4, where 0 means "none"), BTH, the extension headers the opcode carries (each of
/// which must be present in `hdrs`, and no others), the payload, the pad (`hdrs.bth.pad`
/// is ignored and computed so that payload + pad is a multiple of 4), and the ICRC
/// (4 bytes, little-endian, as rxe stores it).
///
/// The frame is not padded to Ethernet's 60-byte minimum (the smallest RoCE frame is
/// 58 bytes): that is the link's job, and [`parse`] accepts such trailing bytes.
pub fn build(
    addr: &Addressing,
    hdrs: &Headers,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), BuildError> {
    let start = out.len();
    build_headers(addr, hdrs, payload.len(), out)?;
    out.extend_from_slice(payload);
    end_unsealed(out, payload.len());
    seal(&mut out[start..]);
    Ok(())
}

/// [`build`] in steps, for a caller that appends the payload itself (straight from
/// guest memory, with no zeroing first): appends the headers of a frame that will carry
/// `payload_len` bytes of payload. The caller then appends exactly the payload and calls
/// [`end_unsealed`]; [`seal`] computes the ICRC, which a frame that never leaves the
/// process and is never captured does not need (see [`crate::fabric::frame`]).
pub fn build_headers(
    addr: &Addressing,
    hdrs: &Headers,
    payload_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), BuildError> {
    let bth = &hdrs.bth;
    let info = opcode_info(bth.opcode).ok_or(BuildError::UnknownOpcode(bth.opcode))?;

    // Check everything before writing anything, so a failed build leaves `out` as it was.
    for h in [
        ExtHeader::Reth,
        ExtHeader::Aeth,
        ExtHeader::AtomicEth,
        ExtHeader::AtomicAckEth,
        ExtHeader::Imm,
        ExtHeader::Ieth,
        ExtHeader::Deth,
        ExtHeader::Dceth,
    ] {
        match (info.carries(h), hdrs.has(h)) {
            (true, false) => {
                return Err(BuildError::MissingHeader {
                    opcode: bth.opcode,
                    header: h,
                })
            }
            (false, true) => {
                return Err(BuildError::UnexpectedHeader {
                    opcode: bth.opcode,
                    header: h,
                })
            }
            _ => {}
        }
    }
    if !info.has_payload && payload_len != 0 {
        return Err(BuildError::UnexpectedPayload {
            opcode: bth.opcode,
            len: payload_len,
        });
    }
    let too_wide = |field, value: u32, max: u32| {
        if value > max {
            Err(BuildError::FieldTooWide { field, value })
        } else {
            Ok(())
        }
    };
    too_wide("BTH.tver", u32::from(bth.tver), 0x0F)?;
    too_wide("BTH.dest_qp", bth.dest_qp, MASK_24)?;
    too_wide("BTH.psn", bth.psn, MASK_24)?;
    if let Some(aeth) = &hdrs.aeth {
        too_wide("AETH.msn", aeth.msn, MASK_24)?;
    }
    if let Some(deth) = &hdrs.deth {
        too_wide("DETH.src_qp", deth.src_qp, MASK_24)?;
    }
    if let Some(d) = &hdrs.dceth {
        too_wide("DCETH.dci_qpn", d.dci_qpn, MASK_24)?;
    }

    let pad = (4 - payload_len % 4) % 4;
    let udp_len = UDP_HEADER_LEN + info.header_len() + payload_len + pad + ICRC_LEN;
    let ip_len = IPV4_HEADER_LEN + udp_len;
    if ip_len > usize::from(u16::MAX) {
        return Err(BuildError::TooLong { ip_len });
    }

    out.reserve(ETH_HEADER_LEN + ip_len);
    // Ethernet II.
    out.extend_from_slice(&addr.dst_mac);
    out.extend_from_slice(&addr.src_mac);
    out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());

    // IPv4: version 4, IHL 5, as rxe's prepare_ipv4_hdr.
    let ip_start = out.len();
    out.push(0x45);
    out.push(addr.tos);
    out.extend_from_slice(&(ip_len as u16).to_be_bytes());
    out.extend_from_slice(&addr.ip_id.to_be_bytes());
    out.extend_from_slice(&IP_DF.to_be_bytes());
    out.push(addr.ttl);
    out.push(IPPROTO_UDP);
    out.extend_from_slice(&[0, 0]); // checksum, filled in below
    out.extend_from_slice(&addr.src_ip);
    out.extend_from_slice(&addr.dst_ip);
    let checksum = !ones_complement_sum(0, &out[ip_start..ip_start + IPV4_HEADER_LEN]);
    out[ip_start + 10..ip_start + 12].copy_from_slice(&checksum.to_be_bytes());

    // UDP, checksum 0: rxe computes none over IPv4 (the ICRC protects the packet).
    out.extend_from_slice(&addr.src_port.to_be_bytes());
    out.extend_from_slice(&ROCEV2_PORT.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);

    // BTH; the reserved bits (resv6a, resv7) are sent as 0, as rxe's bth_init does.
    out.push(bth.opcode);
    out.push(
        (u8::from(bth.solicited) << 7)
            | (u8::from(bth.mig_req) << 6)
            | ((pad as u8) << 4)
            | bth.tver,
    );
    out.extend_from_slice(&bth.pkey.to_be_bytes());
    let qpn_word = (u32::from(bth.fecn) << 31) | (u32::from(bth.becn) << 30) | bth.dest_qp;
    out.extend_from_slice(&qpn_word.to_be_bytes());
    let psn_word = (u32::from(bth.ack_req) << 31) | bth.psn;
    out.extend_from_slice(&psn_word.to_be_bytes());

    // Extension headers, in the table's wire order. The checks above guarantee presence;
    // the `if let`s only avoid an unwrap.
    for &h in info.ext_headers {
        match h {
            ExtHeader::Reth => {
                if let Some(r) = &hdrs.reth {
                    out.extend_from_slice(&r.va.to_be_bytes());
                    out.extend_from_slice(&r.rkey.to_be_bytes());
                    out.extend_from_slice(&r.dma_len.to_be_bytes());
                }
            }
            ExtHeader::Aeth => {
                if let Some(a) = &hdrs.aeth {
                    let word = (u32::from(a.syndrome) << 24) | a.msn;
                    out.extend_from_slice(&word.to_be_bytes());
                }
            }
            ExtHeader::AtomicEth => {
                if let Some(a) = &hdrs.atomic {
                    out.extend_from_slice(&a.va.to_be_bytes());
                    out.extend_from_slice(&a.rkey.to_be_bytes());
                    out.extend_from_slice(&a.swap_add.to_be_bytes());
                    out.extend_from_slice(&a.compare.to_be_bytes());
                }
            }
            ExtHeader::AtomicAckEth => {
                if let Some(a) = &hdrs.atomic_ack {
                    out.extend_from_slice(&a.orig.to_be_bytes());
                }
            }
            ExtHeader::Imm => {
                if let Some(imm) = &hdrs.imm {
                    out.extend_from_slice(imm);
                }
            }
            ExtHeader::Ieth => {
                if let Some(rkey) = hdrs.ieth {
                    out.extend_from_slice(&rkey.to_be_bytes());
                }
            }
            ExtHeader::Deth => {
                if let Some(d) = &hdrs.deth {
                    out.extend_from_slice(&d.qkey.to_be_bytes());
                    // A reserved byte, then the 24-bit source QP.
                    out.extend_from_slice(&d.src_qp.to_be_bytes());
                }
            }
            ExtHeader::Dceth => {
                if let Some(d) = &hdrs.dceth {
                    out.extend_from_slice(&d.dc_key.to_be_bytes());
                    out.extend_from_slice(&d.dci_qpn.to_be_bytes());
                    // Reserved.
                    out.extend_from_slice(&[0; 4]);
                }
            }
        }
    }

    Ok(())
}

/// Length of the frame [`build`] makes of `hdrs` and `payload_len` bytes of payload (0
/// for an unknown opcode).
pub fn frame_len(hdrs: &Headers, payload_len: usize) -> usize {
    opcode_info(hdrs.bth.opcode).map_or(0, |info| {
        ETH_HEADER_LEN
            + IPV4_HEADER_LEN
            + UDP_HEADER_LEN
            + info.header_len()
            + payload_len.next_multiple_of(4)
            + ICRC_LEN
    })
}

/// Ends a frame from [`build_headers`] whose `payload_len` bytes of payload were
/// appended: appends the pad and a zero ICRC.
pub fn end_unsealed(out: &mut Vec<u8>, payload_len: usize) {
    let pad = (4 - payload_len % 4) % 4;
    out.extend_from_slice(&[0u8; 3 + ICRC_LEN][..pad + ICRC_LEN]);
}

/// Computes the ICRC of `frame` (one whole frame from [`build_headers`] and
/// [`end_unsealed`], Ethernet header first) into its last four bytes.
pub fn seal(frame: &mut [u8]) {
    let Some(end) = frame.len().checked_sub(ICRC_LEN) else {
        return;
    };
    let crc = icrc(&frame[ETH_HEADER_LEN.min(end)..end]);
    frame[end..].copy_from_slice(&crc.to_le_bytes());
}

/// A frame that [`parse`] accepted: the addressing it arrived with, its transport
/// headers, and its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 TTL.
    pub ttl: u8,
    /// IPv4 TOS byte.
    pub tos: u8,
    /// The BTH (with its pad count as received) and the opcode's extension headers.
    pub hdrs: Headers,
    /// The payload, without pad and ICRC; borrowed from the frame.
    pub payload: &'a [u8],
}

/// The addressing and BTH of a frame whose opcode this device does not take
/// ([`ParseError::Unsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// The BTH as received.
    pub bth: Bth,
}

/// Why [`parse`] dropped a frame. Each reason is its own variant so that the device can
/// count drops by reason; the checks run in the order listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Shorter than an Ethernet header.
    #[error("frame of {len} bytes is shorter than an Ethernet header")]
    TruncatedEthernet {
        /// The frame length.
        len: usize,
    },
    /// The EtherType is not IPv4 (this includes VLAN-tagged frames and IPv6).
    #[error("EtherType {0:#06x} is not IPv4")]
    NotIpv4(u16),
    /// Too short for an IPv4 header.
    #[error("{len} bytes after the Ethernet header: too short for IPv4")]
    TruncatedIp {
        /// Bytes after the Ethernet header.
        len: usize,
    },
    /// The IP version field is not 4.
    #[error("IP version {0} is not 4")]
    IpVersion(u8),
    /// The IPv4 header length is not 5 words. Options are refused because rxe's ICRC
    /// assumes a 20-byte header, so it would compute it over the wrong bytes.
    #[error("IPv4 header length {0} words: options are not supported")]
    IpHeaderLength(u8),
    /// The IPv4 total length is below the header length or beyond the frame.
    #[error("IPv4 total length {total} with {available} bytes present")]
    IpTotalLength {
        /// The total length field.
        total: u16,
        /// Bytes present after the Ethernet header.
        available: usize,
    },
    /// The IPv4 header checksum is wrong.
    #[error("bad IPv4 header checksum")]
    IpChecksum,
    /// A fragment (MF set or a fragment offset): RoCE packets are never fragmented, and
    /// this device does no reassembly.
    #[error("IPv4 fragment")]
    IpFragment,
    /// The IP protocol is not UDP.
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// The IP payload is too short for a UDP header.
    #[error("IP payload of {len} bytes is too short for UDP")]
    TruncatedUdp {
        /// The IP payload length.
        len: usize,
    },
    /// The UDP destination port is not 4791.
    #[error("UDP destination port {0} is not RoCEv2's")]
    UdpPort(u16),
    /// The UDP length is below 8 or beyond the IP payload.
    #[error("UDP length {udp_len} with an IP payload of {ip_payload} bytes")]
    UdpLength {
        /// The UDP length field.
        udp_len: u16,
        /// The IP payload length.
        ip_payload: usize,
    },
    /// A non-zero UDP checksum that is wrong (0 means none over IPv4, as rxe sends).
    #[error("bad UDP checksum")]
    UdpChecksum,
    /// The UDP payload is too short for a BTH.
    #[error("UDP payload of {len} bytes is too short for a BTH")]
    TruncatedBth {
        /// The UDP payload length.
        len: usize,
    },
    /// The BTH transport version is not 0.
    #[error("BTH transport version {0} is not 0")]
    BthVersion(u8),
    /// The opcode is not in the opcode table, nor one the specification defines
    /// ([`foreign`]): a reserved value.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// An opcode the specification defines that this device does not take ([`foreign`]),
    /// in a frame whose ICRC holds (its headers are not checked: their layout is another
    /// transport's). It says who sent it to whom, for the receiver to explain the drop.
    #[error("{} ({:#04x}) is not an opcode this device takes", opcode_name(.0.bth.opcode), .0.bth.opcode)]
    Unsupported(Unsupported),
    /// Too short for the opcode's extension headers and the ICRC.
    #[error("opcode {opcode:#04x} needs {need} bytes of headers and ICRC, {have} present")]
    TruncatedHeaders {
        /// The opcode.
        opcode: u8,
        /// BTH + extension headers + ICRC.
        need: usize,
        /// UDP payload length.
        have: usize,
    },
    /// The BTH pad count exceeds the bytes between the headers and the ICRC.
    #[error("pad of {pad} with {available} bytes between headers and ICRC")]
    BadPad {
        /// The pad count.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        available: usize,
    },
    /// A payload on an opcode that carries none (ACK, READ request, atomics).
    #[error("opcode {opcode:#04x} carries no payload but has {len} bytes")]
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// Bytes of payload and pad found.
        len: usize,
    },
    /// The ICRC does not match the packet.
    #[error("bad ICRC: packet has {found:#010x}, computed {computed:#010x}")]
    Icrc {
        /// The value in the packet (read little-endian).
        found: u32,
        /// The value computed over the packet.
        computed: u32,
    },
}

/// Reads fixed-size fields from a slice without panicking: every read is bounds-checked
/// and a short slice gives `None`.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.buf.split_first_chunk::<N>()?;
        self.buf = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }
}

/// Parses and validates a frame, in the order Linux (IP and UDP layers) and then rxe
/// check where it applies: Ethernet type; IPv4 version, header length, total length,
/// header checksum, fragmentation and protocol; UDP destination port, length and (if
/// non-zero) checksum; BTH transport version; known opcode; room for the opcode's
/// headers and the ICRC; pad; no payload where the opcode has none; ICRC.
///
/// Bytes after the IPv4 total length (Ethernet padding of short frames) are ignored.
/// Addresses, QPN, P_Key and PSN are not checked here: they need QP state.
///
/// Every failure is a distinct [`ParseError`]; no input makes it panic.
pub fn parse(frame: &[u8]) -> Result<Packet<'_>, ParseError> {
    parse_checked(frame, true)
}

/// [`parse`] without the ICRC check, for a frame built by this process that nothing
/// outside it has seen or touched (an unsealed frame of the internal switch, whose ICRC
/// was never computed). Every other check is made.
pub fn parse_unsealed(frame: &[u8]) -> Result<Packet<'_>, ParseError> {
    parse_checked(frame, false)
}

fn parse_checked(frame: &[u8], check_icrc: bool) -> Result<Packet<'_>, ParseError> {
    // Ethernet.
    let Some((eth, after_eth)) = frame.split_first_chunk::<ETH_HEADER_LEN>() else {
        return Err(ParseError::TruncatedEthernet { len: frame.len() });
    };
    let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    if ethertype != ETHERTYPE_IPV4 {
        return Err(ParseError::NotIpv4(ethertype));
    }
    let mut dst_mac = [0u8; 6];
    dst_mac.copy_from_slice(&eth[0..6]);
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&eth[6..12]);

    // IPv4.
    let Some(ip) = after_eth.first_chunk::<IPV4_HEADER_LEN>() else {
        return Err(ParseError::TruncatedIp {
            len: after_eth.len(),
        });
    };
    if ip[0] >> 4 != 4 {
        return Err(ParseError::IpVersion(ip[0] >> 4));
    }
    if ip[0] & 0x0F != 5 {
        return Err(ParseError::IpHeaderLength(ip[0] & 0x0F));
    }
    let total = u16::from_be_bytes([ip[2], ip[3]]);
    if usize::from(total) < IPV4_HEADER_LEN || usize::from(total) > after_eth.len() {
        return Err(ParseError::IpTotalLength {
            total,
            available: after_eth.len(),
        });
    }
    if ones_complement_sum(0, ip) != 0xFFFF {
        return Err(ParseError::IpChecksum);
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & IP_MF_OFFSET != 0 {
        return Err(ParseError::IpFragment);
    }
    if ip[9] != IPPROTO_UDP {
        return Err(ParseError::NotUdp(ip[9]));
    }
    let tos = ip[1];
    let ttl = ip[8];
    let mut src_ip = [0u8; 4];
    src_ip.copy_from_slice(&ip[12..16]);
    let mut dst_ip = [0u8; 4];
    dst_ip.copy_from_slice(&ip[16..20]);
    // The IP packet proper; trailing Ethernet padding is cut off here.
    let ip_packet = &after_eth[..usize::from(total)];
    let ip_payload = &ip_packet[IPV4_HEADER_LEN..];

    // UDP.
    let Some(udp) = ip_payload.first_chunk::<UDP_HEADER_LEN>() else {
        return Err(ParseError::TruncatedUdp {
            len: ip_payload.len(),
        });
    };
    let src_port = u16::from_be_bytes([udp[0], udp[1]]);
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    if dst_port != ROCEV2_PORT {
        return Err(ParseError::UdpPort(dst_port));
    }
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]);
    if usize::from(udp_len) < UDP_HEADER_LEN || usize::from(udp_len) > ip_payload.len() {
        return Err(ParseError::UdpLength {
            udp_len,
            ip_payload: ip_payload.len(),
        });
    }
    // Like Linux's UDP layer, bytes past the UDP length are dropped.
    let udp_datagram = &ip_payload[..usize::from(udp_len)];
    if u16::from_be_bytes([udp[6], udp[7]]) != 0 {
        // Linux verifies a non-zero checksum before handing the packet to rxe's tunnel
        // socket; the ICRC does not cover this field, so this is its only protection.
        let pseudo = u32::from(u16::from_be_bytes([src_ip[0], src_ip[1]]))
            + u32::from(u16::from_be_bytes([src_ip[2], src_ip[3]]))
            + u32::from(u16::from_be_bytes([dst_ip[0], dst_ip[1]]))
            + u32::from(u16::from_be_bytes([dst_ip[2], dst_ip[3]]))
            + u32::from(IPPROTO_UDP)
            + u32::from(udp_len);
        if ones_complement_sum(pseudo, udp_datagram) != 0xFFFF {
            return Err(ParseError::UdpChecksum);
        }
    }
    let udp_payload = &udp_datagram[UDP_HEADER_LEN..];

    // BTH.
    let Some(bth) = udp_payload.first_chunk::<BTH_LEN>() else {
        return Err(ParseError::TruncatedBth {
            len: udp_payload.len(),
        });
    };
    let tver = bth[1] & 0x0F;
    if tver != 0 {
        return Err(ParseError::BthVersion(tver));
    }
    let op = bth[0];
    let Some(info) = opcode_info(op) else {
        let bth = unsupported(bth, ip_packet, udp_payload, check_icrc)?;
        return Err(ParseError::Unsupported(Unsupported {
            dst_mac,
            src_ip,
            dst_ip,
            bth,
        }));
    };
    let header_len = info.header_len();
    if udp_payload.len() < header_len + ICRC_LEN {
        return Err(ParseError::TruncatedHeaders {
            opcode: op,
            need: header_len + ICRC_LEN,
            have: udp_payload.len(),
        });
    }
    let pad = (bth[1] >> 4) & 0x03;
    let between = udp_payload.len() - header_len - ICRC_LEN;
    if usize::from(pad) > between {
        return Err(ParseError::BadPad {
            pad,
            available: between,
        });
    }
    if !info.has_payload && between != 0 {
        return Err(ParseError::UnexpectedPayload {
            opcode: op,
            len: between,
        });
    }
    if check_icrc {
        verify_icrc(ip_packet, udp_payload)?;
    }
    let covered_udp = &udp_payload[..udp_payload.len() - ICRC_LEN];
    let mut hdrs = Headers {
        bth: read_bth(bth),
        ..Headers::default()
    };

    // Extension headers, in the table's wire order.
    let truncated = ParseError::TruncatedHeaders {
        opcode: op,
        need: header_len + ICRC_LEN,
        have: udp_payload.len(),
    };
    let mut r = Reader {
        buf: &covered_udp[BTH_LEN..header_len],
    };
    for &h in info.ext_headers {
        match h {
            ExtHeader::Reth => {
                hdrs.reth = Some(Reth {
                    va: r.u64().ok_or(truncated)?,
                    rkey: r.u32().ok_or(truncated)?,
                    dma_len: r.u32().ok_or(truncated)?,
                });
            }
            ExtHeader::Aeth => {
                let word = r.u32().ok_or(truncated)?;
                hdrs.aeth = Some(Aeth {
                    syndrome: (word >> 24) as u8,
                    msn: word & MASK_24,
                });
            }
            ExtHeader::AtomicEth => {
                hdrs.atomic = Some(AtomicEth {
                    va: r.u64().ok_or(truncated)?,
                    rkey: r.u32().ok_or(truncated)?,
                    swap_add: r.u64().ok_or(truncated)?,
                    compare: r.u64().ok_or(truncated)?,
                });
            }
            ExtHeader::AtomicAckEth => {
                hdrs.atomic_ack = Some(AtomicAckEth {
                    orig: r.u64().ok_or(truncated)?,
                });
            }
            ExtHeader::Imm => hdrs.imm = Some(r.take().ok_or(truncated)?),
            ExtHeader::Ieth => hdrs.ieth = Some(r.u32().ok_or(truncated)?),
            ExtHeader::Deth => {
                hdrs.deth = Some(Deth {
                    qkey: r.u32().ok_or(truncated)?,
                    src_qp: r.u32().ok_or(truncated)? & MASK_24,
                });
            }
            ExtHeader::Dceth => {
                let hi = r.u32().ok_or(truncated)?;
                let lo = r.u32().ok_or(truncated)?;
                let dci_qpn = r.u32().ok_or(truncated)? & MASK_24;
                r.u32().ok_or(truncated)?;
                hdrs.dceth = Some(Dceth {
                    dc_key: u64::from(hi) << 32 | u64::from(lo),
                    dci_qpn,
                });
            }
        }
    }

    let payload = &covered_udp[header_len..covered_udp.len() - usize::from(pad)];
    Ok(Packet {
        src_mac,
        dst_mac,
        src_ip,
        dst_ip,
        src_port,
        ttl,
        tos,
        hdrs,
        payload,
    })
}

/// The BTH of a frame whose opcode [`opcode_info`] does not know, if [`foreign`] says
/// the specification defines it and the frame is sound as far as can be told without its
/// headers' layout: room for a BTH and the ICRC, and the ICRC (unless `check_icrc` is
/// false). Otherwise the error that drops it: the opcode is a reserved value, or the frame
/// is short or damaged.
fn unsupported(
    bth: &[u8; BTH_LEN],
    ip_packet: &[u8],
    udp_payload: &[u8],
    check_icrc: bool,
) -> Result<Bth, ParseError> {
    let op = bth[0];
    if foreign(op).is_none() {
        return Err(ParseError::UnknownOpcode(op));
    }
    if udp_payload.len() < BTH_LEN + ICRC_LEN {
        return Err(ParseError::TruncatedHeaders {
            opcode: op,
            need: BTH_LEN + ICRC_LEN,
            have: udp_payload.len(),
        });
    }
    if check_icrc {
        verify_icrc(ip_packet, udp_payload)?;
    }
    Ok(read_bth(bth))
}

/// Checks the ICRC of the RoCEv2 packet `udp_payload` (BTH to ICRC, at least four bytes)
/// that ends `ip_packet`: computed over the IP packet up to the ICRC, as the sender did.
fn verify_icrc(ip_packet: &[u8], udp_payload: &[u8]) -> Result<(), ParseError> {
    let icrc_at = udp_payload.len() - ICRC_LEN;
    let mut found = [0u8; ICRC_LEN];
    found.copy_from_slice(&udp_payload[icrc_at..]);
    let found = u32::from_le_bytes(found);
    let covered_len = IPV4_HEADER_LEN + UDP_HEADER_LEN + icrc_at;
    let computed = icrc(&ip_packet[..covered_len]);
    if found != computed {
        return Err(ParseError::Icrc { found, computed });
    }
    Ok(())
}

/// The fields of the 12 bytes of a BTH.
fn read_bth(bth: &[u8; BTH_LEN]) -> Bth {
    let qpn_word = u32::from_be_bytes([bth[4], bth[5], bth[6], bth[7]]);
    let psn_word = u32::from_be_bytes([bth[8], bth[9], bth[10], bth[11]]);
    Bth {
        opcode: bth[0],
        solicited: bth[1] & 0x80 != 0,
        mig_req: bth[1] & 0x40 != 0,
        pad: (bth[1] >> 4) & 0x03,
        tver: bth[1] & 0x0F,
        pkey: u16::from_be_bytes([bth[2], bth[3]]),
        fecn: qpn_word & 0x8000_0000 != 0,
        becn: qpn_word & 0x4000_0000 != 0,
        dest_qp: qpn_word & MASK_24,
        ack_req: psn_word & 0x8000_0000 != 0,
        psn: psn_word & MASK_24,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every opcode the table knows.
    fn all_opcodes() -> Vec<u8> {
        (0..=u8::MAX)
            .filter(|&op| opcode_info(op).is_some())
            .collect()
    }

    fn addressing() -> Addressing {
        Addressing {
            src_mac: [0x02, 0, 0, 0, 0, 1],
            dst_mac: [0x02, 0, 0, 0, 0, 2],
            src_ip: [10, 0, 0, 1],
            dst_ip: [10, 0, 0, 2],
            src_port: udp_src_port(0, 0x11, 0x12),
            ttl: 64,
            tos: 0,
            ip_id: 1,
        }
    }

    /// Headers for `op` with every extension header it carries filled with fixed values.
    fn headers_for(op: u8) -> Headers {
        let info = opcode_info(op).unwrap();
        let mut h = Headers {
            bth: Bth::new(op, 0x12, 100),
            ..Headers::default()
        };
        for &e in info.ext_headers {
            match e {
                ExtHeader::Reth => {
                    h.reth = Some(Reth {
                        va: 0x1000,
                        rkey: 0x55,
                        dma_len: 64,
                    })
                }
                ExtHeader::Aeth => h.aeth = Some(Aeth::ack(AETH_CREDIT_INVALID).with_msn(3)),
                ExtHeader::AtomicEth => {
                    h.atomic = Some(AtomicEth {
                        va: 0x2000,
                        rkey: 0x66,
                        swap_add: 1,
                        compare: 2,
                    })
                }
                ExtHeader::AtomicAckEth => h.atomic_ack = Some(AtomicAckEth { orig: 9 }),
                ExtHeader::Imm => h.imm = Some([1, 2, 3, 4]),
                ExtHeader::Ieth => h.ieth = Some(0x77),
                ExtHeader::Deth => {
                    h.deth = Some(Deth {
                        qkey: 0x1111_2222,
                        src_qp: 0x12,
                    })
                }
                ExtHeader::Dceth => {
                    h.dceth = Some(Dceth {
                        dc_key: 0x1122_3344_5566_7788,
                        dci_qpn: 0x34,
                    })
                }
            }
        }
        h
    }

    fn frame_for(op: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        build(&addressing(), &headers_for(op), payload, &mut out).unwrap();
        out
    }

    /// Recomputes the IPv4 header checksum of a frame after a test changed its header.
    fn fix_ip_checksum(frame: &mut [u8]) {
        let ip = ETH_HEADER_LEN;
        frame[ip + 10] = 0;
        frame[ip + 11] = 0;
        let c = !ones_complement_sum(0, &frame[ip..ip + IPV4_HEADER_LEN]);
        frame[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    }

    /// Recomputes the ICRC of a frame after a test changed covered bytes.
    fn fix_icrc(frame: &mut [u8]) {
        let end = frame.len() - ICRC_LEN;
        let c = icrc(&frame[ETH_HEADER_LEN..end]);
        frame[end..].copy_from_slice(&c.to_le_bytes());
    }

    #[test]
    fn an_unsealed_frame_sealed_is_the_built_frame_and_only_it_passes_the_icrc_check() {
        let payload: Vec<u8> = (0..77u8).collect();
        for op in [
            opcode::RC_RDMA_WRITE_FIRST,
            opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        ] {
            let built = frame_for(op, &payload);
            let mut unsealed = Vec::new();
            build_headers(
                &addressing(),
                &headers_for(op),
                payload.len(),
                &mut unsealed,
            )
            .unwrap();
            unsealed.extend_from_slice(&payload);
            end_unsealed(&mut unsealed, payload.len());
            assert_eq!(unsealed.len(), built.len());
            assert!(matches!(parse(&unsealed), Err(ParseError::Icrc { .. })));
            assert_eq!(parse_unsealed(&unsealed).unwrap().payload, &payload[..]);
            seal(&mut unsealed);
            assert_eq!(unsealed, built, "byte for byte what build makes");
            assert_eq!(parse(&unsealed).unwrap(), parse_unsealed(&built).unwrap());
        }
    }

    #[test]
    fn opcode_table_matches_rxe() {
        use opcode::*;
        let expect: &[(u8, &[ExtHeader], bool)] = &[
            (RC_SEND_FIRST, NO_EXT, true),
            (RC_SEND_MIDDLE, NO_EXT, true),
            (RC_SEND_LAST, NO_EXT, true),
            (RC_SEND_LAST_WITH_IMMEDIATE, IMM, true),
            (RC_SEND_ONLY, NO_EXT, true),
            (RC_SEND_ONLY_WITH_IMMEDIATE, IMM, true),
            (RC_RDMA_WRITE_FIRST, RETH, true),
            (RC_RDMA_WRITE_MIDDLE, NO_EXT, true),
            (RC_RDMA_WRITE_LAST, NO_EXT, true),
            (RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, IMM, true),
            (RC_RDMA_WRITE_ONLY, RETH, true),
            (RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, RETH_IMM, true),
            (RC_RDMA_READ_REQUEST, RETH, false),
            (RC_RDMA_READ_RESPONSE_FIRST, AETH, true),
            (RC_RDMA_READ_RESPONSE_MIDDLE, NO_EXT, true),
            (RC_RDMA_READ_RESPONSE_LAST, AETH, true),
            (RC_RDMA_READ_RESPONSE_ONLY, AETH, true),
            (RC_ACKNOWLEDGE, AETH, false),
            (RC_ATOMIC_ACKNOWLEDGE, AETH_ATOMIC_ACK, false),
            (RC_COMPARE_SWAP, ATOMIC, false),
            (RC_FETCH_ADD, ATOMIC, false),
            (RC_SEND_LAST_WITH_INVALIDATE, IETH, true),
            (RC_SEND_ONLY_WITH_INVALIDATE, IETH, true),
            (UD_SEND_ONLY, DETH, true),
            (UD_SEND_ONLY_WITH_IMMEDIATE, DETH_IMM, true),
            (DC_CONNECT, DCETH, false),
            (DC_DISCONNECT, DCETH, false),
        ];
        assert_eq!(all_opcodes().len(), expect.len());
        for &(op, ext, payload) in expect {
            let info = opcode_info(op).unwrap();
            assert_eq!(info.opcode, op);
            assert_eq!(info.ext_headers, ext, "{}", info.name);
            assert_eq!(info.has_payload, payload, "{}", info.name);
            // Every opcode is exactly one of request or response.
            assert_ne!(info.is_request(), info.is_response(), "{}", info.name);
        }
        // rxe's header lengths (rxe_opcode.c `.length`).
        assert_eq!(opcode_info(RC_SEND_ONLY).unwrap().header_len(), 12);
        assert_eq!(opcode_info(UD_SEND_ONLY).unwrap().header_len(), 20);
        assert_eq!(
            opcode_info(UD_SEND_ONLY_WITH_IMMEDIATE)
                .unwrap()
                .header_len(),
            24
        );
        assert!(opcode_info(UD_SEND_ONLY).unwrap().is_datagram());
        assert!(!opcode_info(RC_SEND_ONLY).unwrap().is_datagram());
        assert_eq!(
            opcode_info(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
                .unwrap()
                .header_len(),
            32
        );
        assert_eq!(opcode_info(RC_ATOMIC_ACKNOWLEDGE).unwrap().header_len(), 24);
        assert_eq!(opcode_info(RC_COMPARE_SWAP).unwrap().header_len(), 40);
        let ack = opcode_info(RC_ATOMIC_ACKNOWLEDGE).unwrap();
        assert_eq!(ack.ext_offset(ExtHeader::AtomicAckEth), Some(16));
        assert_eq!(ack.ext_offset(ExtHeader::Reth), None);
        // Not spoken: RC 0x15 (reserved), FLUSH, ATOMIC WRITE, UC, UD other than SEND.
        for op in [0x15, 0x1c, 0x1d, 0x20, 0x66] {
            assert!(opcode_info(op).is_none(), "{op:#x}");
        }
        let first = opcode_info(RC_SEND_FIRST).unwrap();
        assert!(first.is_send() && first.is_first() && !first.is_last() && !first.is_only());
        let only = opcode_info(RC_RDMA_READ_RESPONSE_ONLY).unwrap();
        assert!(only.is_read() && only.is_read_response() && only.is_only());
        assert!(opcode_info(RC_FETCH_ADD).unwrap().is_atomic());
        assert!(opcode_info(RC_ACKNOWLEDGE).unwrap().is_ack());
        assert!(opcode_info(RC_SEND_ONLY_WITH_INVALIDATE)
            .unwrap()
            .has_invalidate());
        assert!(opcode_info(RC_RDMA_WRITE_LAST_WITH_IMMEDIATE)
            .unwrap()
            .consumes_receive_wqe());
        assert!(!opcode_info(RC_RDMA_WRITE_LAST).unwrap().completes_receive());
    }

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

    #[test]
    fn udp_src_port_matches_kernel_formula() {
        // Computed by hand from rdma_calc_flow_label / rdma_flow_label_to_udp_sport:
        // 0x11 * 0x12 = 0x132, no high bits to fold, | 0xC000.
        assert_eq!(udp_src_port(0, 0x11, 0x12), 0xC132);
        // Symmetric, so both ends pick the same port.
        assert_eq!(udp_src_port(0, 0x12, 0x11), 0xC132);
        // Flow label 0x12345: low 14 bits 0x2345 ^ (0x10000 >> 14 = 4) = 0x2341.
        assert_eq!(udp_src_port(0x12345, 1, 2), 0xE341);
        for (l, r) in [(1, 1), (0xFF_FFFF, 0xFF_FFFF), (0xABCDE, 0x12)] {
            assert!(udp_src_port(0, l, r) >= 0xC000);
        }
    }

    /// A frame built by `build` at development time from [`fixed_frame_inputs`]
    /// (RC_RDMA_WRITE_ONLY with AckReq and FECN set, TOS 0x02, TTL 64, a 5-byte payload
    /// and so 3 pad bytes).
    const FIXED_FRAME_HEX: &str = concat!(
        "525400abcdef5254001234560800",             // Ethernet
        "45020044123440004011df1ec0a86401c0a86402", // IPv4
        "c0de12b700300000",                         // UDP
        "0a30ffff800000118000abcd",                 // BTH
        "00007f00deadb0000000123400000005",         // RETH
        "68656c6c6f000000",                         // payload + pad
        "f5b05c69",                                 // ICRC
    );
    /// Its ICRC as computed independently with Python at development time:
    /// `zlib.crc32(b'\xff'*8 + masked_headers + rest)`, where masked_headers is the IPv4
    /// header with TOS, TTL and checksum set to 0xFF, the UDP header with its checksum
    /// set to 0xFF, and the BTH with byte 4 set to 0xFF.
    const FIXED_FRAME_ICRC: u32 = 0x695C_B0F5;

    /// The inputs of [`FIXED_FRAME_HEX`].
    fn fixed_frame_inputs() -> (Addressing, Headers, Vec<u8>) {
        let addr = Addressing {
            src_mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            dst_mac: [0x52, 0x54, 0x00, 0xAB, 0xCD, 0xEF],
            src_ip: [192, 168, 100, 1],
            dst_ip: [192, 168, 100, 2],
            src_port: 0xC0DE,
            ttl: 64,
            tos: 0x02,
            ip_id: 0x1234,
        };
        let mut bth = Bth::new(opcode::RC_RDMA_WRITE_ONLY, 0x00_0011, 0x00_ABCD);
        bth.ack_req = true;
        bth.fecn = true;
        let hdrs = Headers {
            bth,
            reth: Some(Reth {
                va: 0x0000_7F00_DEAD_B000,
                rkey: 0x0000_1234,
                dma_len: 5,
            }),
            ..Headers::default()
        };
        (addr, hdrs, b"hello".to_vec())
    }

    fn from_hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn fixed_frame_is_built_byte_for_byte_and_its_icrc_matches_python() {
        let expected = from_hex(FIXED_FRAME_HEX);
        let (addr, hdrs, payload) = fixed_frame_inputs();
        let mut out = Vec::new();
        build(&addr, &hdrs, &payload, &mut out).unwrap();
        assert_eq!(out, expected);
        let end = expected.len() - ICRC_LEN;
        assert_eq!(icrc(&expected[ETH_HEADER_LEN..end]), FIXED_FRAME_ICRC);
        assert_eq!(expected[end..], FIXED_FRAME_ICRC.to_le_bytes());
        let p = parse(&expected).unwrap();
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.hdrs.bth.pad, 3);
        assert!(p.hdrs.bth.fecn);
        assert_eq!(p.hdrs.reth, hdrs.reth);
    }

    #[test]
    fn build_lays_out_headers_as_rxe() {
        let mut out = Vec::new();
        let mut hdrs = headers_for(opcode::RC_SEND_ONLY);
        hdrs.bth.solicited = true;
        hdrs.bth.becn = true;
        hdrs.bth.pad = 3; // ignored: computed from the payload
        build(&addressing(), &hdrs, &[0xAA; 6], &mut out).unwrap();
        assert_eq!(out.len(), 14 + 20 + 8 + 12 + 6 + 2 + 4);
        assert_eq!(&out[12..14], &[0x08, 0x00]);
        let ip = &out[14..34];
        assert_eq!(ip[0], 0x45);
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 52);
        assert_eq!(&ip[6..8], &[0x40, 0x00]); // DF
        assert_eq!(ip[9], 17);
        let udp = &out[34..42];
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4791);
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 32);
        assert_eq!(&udp[6..8], &[0, 0]);
        let bth = &out[42..54];
        assert_eq!(bth[0], opcode::RC_SEND_ONLY);
        assert_eq!(bth[1], 0x80 | (2 << 4)); // SE, pad 2, tver 0
        assert_eq!(&bth[2..4], &[0xFF, 0xFF]);
        assert_eq!(&bth[4..8], &[0x40, 0x00, 0x00, 0x12]); // BECN, QPN
        assert_eq!(&bth[8..12], &[0x00, 0x00, 0x00, 100]);
        assert_eq!(&out[60..62], &[0, 0]); // pad bytes are zero
    }

    #[test]
    fn build_rejects_missing_and_unexpected_headers() {
        let mut out = vec![0xEE];
        for op in all_opcodes() {
            let full = headers_for(op);
            let info = opcode_info(op).unwrap();
            for &h in info.ext_headers {
                let mut hdrs = full;
                match h {
                    ExtHeader::Reth => hdrs.reth = None,
                    ExtHeader::Aeth => hdrs.aeth = None,
                    ExtHeader::AtomicEth => hdrs.atomic = None,
                    ExtHeader::AtomicAckEth => hdrs.atomic_ack = None,
                    ExtHeader::Imm => hdrs.imm = None,
                    ExtHeader::Ieth => hdrs.ieth = None,
                    ExtHeader::Deth => hdrs.deth = None,
                    ExtHeader::Dceth => hdrs.dceth = None,
                }
                assert_eq!(
                    build(&addressing(), &hdrs, &[], &mut out),
                    Err(BuildError::MissingHeader {
                        opcode: op,
                        header: h
                    })
                );
            }
            if !info.carries(ExtHeader::Ieth) {
                let mut hdrs = full;
                hdrs.ieth = Some(1);
                assert_eq!(
                    build(&addressing(), &hdrs, &[], &mut out),
                    Err(BuildError::UnexpectedHeader {
                        opcode: op,
                        header: ExtHeader::Ieth
                    })
                );
            }
            if !info.has_payload {
                assert_eq!(
                    build(&addressing(), &full, &[1], &mut out),
                    Err(BuildError::UnexpectedPayload { opcode: op, len: 1 })
                );
            }
        }
        let mut hdrs = headers_for(opcode::RC_SEND_ONLY);
        hdrs.bth.psn = 1 << 24;
        assert!(matches!(
            build(&addressing(), &hdrs, &[], &mut out),
            Err(BuildError::FieldTooWide { .. })
        ));
        hdrs.bth.psn = 0;
        hdrs.bth.dest_qp = 1 << 24;
        assert!(matches!(
            build(&addressing(), &hdrs, &[], &mut out),
            Err(BuildError::FieldTooWide { .. })
        ));
        hdrs.bth.opcode = 0x15;
        assert_eq!(
            build(&addressing(), &hdrs, &[], &mut out),
            Err(BuildError::UnknownOpcode(0x15))
        );
        let hdrs = headers_for(opcode::RC_SEND_ONLY);
        assert!(matches!(
            build(&addressing(), &hdrs, &vec![0; 65536], &mut out),
            Err(BuildError::TooLong { .. })
        ));
        // Nothing was appended by any failed build.
        assert_eq!(out, vec![0xEE]);
    }

    #[test]
    fn defined_opcodes_of_other_transports_are_told_apart_from_reserved_ones() {
        let name = |op| foreign(op).map(|f| f.to_string());
        assert_eq!(name(0x24).as_deref(), Some("UC_SEND_ONLY"));
        assert_eq!(
            name(0x2B).as_deref(),
            Some("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE")
        );
        assert_eq!(name(0x4C).as_deref(), Some("RD_RDMA_READ_REQUEST"));
        assert_eq!(name(0x55).as_deref(), Some("RD_RESYNC"));
        assert_eq!(name(0x80).as_deref(), Some("CNP"));
        assert_eq!(name(0xB7).as_deref(), Some("XRC_SEND_ONLY_WITH_INVALIDATE"));
        assert_eq!(name(0x1C).as_deref(), Some("RC_FLUSH"));
        assert_eq!(name(0x1D).as_deref(), Some("RC_ATOMIC_WRITE"));
        assert!(foreign(0x24).unwrap().other_transport());
        assert!(!foreign(0x80).unwrap().other_transport());
        assert!(!foreign(0x1C).unwrap().other_transport());
        // Reserved: UC has no READ, RD no SEND with invalidate, the CNP range one opcode;
        // and what this device takes is not foreign.
        for op in [0x15, 0x2C, 0x56, 0x66, 0x81, 0xB5, 0xC2, 0xE0, 0xFF] {
            assert_eq!(foreign(op), None, "{op:#x}");
        }
        for op in all_opcodes() {
            assert_eq!(foreign(op), None, "{op:#x}");
            assert_eq!(opcode_name(op), opcode_info(op).unwrap().name);
        }
        assert_eq!(opcode_name(0x24), "UC_SEND_ONLY");
        assert_eq!(opcode_name(0x15), "opcode 0x15");
    }

    #[test]
    fn a_sound_frame_of_a_foreign_opcode_says_whom_it_was_for_and_a_damaged_one_does_not() {
        // A UC SEND is laid out as the RC one: turn an RC SEND into one.
        let mut f = frame_for(opcode::RC_SEND_ONLY, b"hello");
        let bth = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN;
        f[bth] = 0x24;
        fix_icrc(&mut f);
        let a = addressing();
        let want = Unsupported {
            dst_mac: a.dst_mac,
            src_ip: a.src_ip,
            dst_ip: a.dst_ip,
            bth: Bth {
                pad: 3,
                ..Bth::new(0x24, 0x12, 100)
            },
        };
        assert_eq!(parse(&f), Err(ParseError::Unsupported(want)));
        assert_eq!(
            ParseError::Unsupported(want).to_string(),
            "UC_SEND_ONLY (0x24) is not an opcode this device takes"
        );
        // The ICRC still vouches for it.
        let mut damaged = f.clone();
        damaged[bth + BTH_LEN] ^= 1;
        assert!(matches!(parse(&damaged), Err(ParseError::Icrc { .. })));
        assert!(matches!(
            parse_unsealed(&damaged),
            Err(ParseError::Unsupported(_))
        ));
        // Too short for a BTH and an ICRC.
        let mut cut = frame_for(opcode::RC_ACKNOWLEDGE, &[]);
        cut[bth] = 0x80;
        let n = cut.len() - 8;
        cut.truncate(n);
        let ip_len = (n - ETH_HEADER_LEN) as u16;
        cut[ETH_HEADER_LEN + 2..ETH_HEADER_LEN + 4].copy_from_slice(&ip_len.to_be_bytes());
        cut[ETH_HEADER_LEN + IPV4_HEADER_LEN + 4..ETH_HEADER_LEN + IPV4_HEADER_LEN + 6]
            .copy_from_slice(&(ip_len - IPV4_HEADER_LEN as u16).to_be_bytes());
        fix_ip_checksum(&mut cut);
        assert_eq!(
            parse(&cut),
            Err(ParseError::TruncatedHeaders {
                opcode: 0x80,
                need: BTH_LEN + ICRC_LEN,
                have: BTH_LEN
            })
        );
        // A reserved opcode is refused before the ICRC, as before.
        let mut reserved = f.clone();
        reserved[bth] = 0x2C;
        assert_eq!(parse(&reserved), Err(ParseError::UnknownOpcode(0x2C)));
    }

    #[test]
    fn build_appends_after_existing_bytes() {
        let mut out = vec![1, 2, 3];
        build(
            &addressing(),
            &headers_for(opcode::RC_SEND_ONLY),
            b"x",
            &mut out,
        )
        .unwrap();
        assert_eq!(&out[..3], &[1, 2, 3]);
        assert_eq!(parse(&out[3..]).unwrap().payload, b"x");
    }

    #[test]
    fn parse_rejects_every_truncation() {
        for op in all_opcodes() {
            let payload: &[u8] = if opcode_info(op).unwrap().has_payload {
                b"abcdefg"
            } else {
                b""
            };
            let frame = frame_for(op, payload);
            assert!(parse(&frame).is_ok());
            for len in 0..frame.len() {
                assert!(parse(&frame[..len]).is_err(), "op {op:#x} len {len}");
            }
        }
        // A truncated frame whose IP and UDP lengths were made to agree still fails:
        // here only the ICRC is cut off, so the BTH/headers room check fires.
        let mut frame = frame_for(opcode::RC_ACKNOWLEDGE, &[]);
        let new_len = frame.len() - 4;
        frame.truncate(new_len);
        let ip_len = (new_len - ETH_HEADER_LEN) as u16;
        frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
        frame[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        fix_ip_checksum(&mut frame);
        assert!(matches!(
            parse(&frame),
            Err(ParseError::TruncatedHeaders { .. })
        ));
    }

    #[test]
    fn parse_rejects_each_reason() {
        let good = frame_for(opcode::RC_SEND_ONLY, b"abcd");
        assert!(parse(&good).is_ok());

        let mut f = good.clone();
        f[12] = 0x86;
        f[13] = 0xDD;
        assert_eq!(parse(&f), Err(ParseError::NotIpv4(0x86DD)));

        let mut f = good.clone();
        f[14] = 0x65;
        fix_ip_checksum(&mut f);
        assert_eq!(parse(&f), Err(ParseError::IpVersion(6)));

        let mut f = good.clone();
        f[14] = 0x46;
        fix_ip_checksum(&mut f);
        assert_eq!(parse(&f), Err(ParseError::IpHeaderLength(6)));

        let mut f = good.clone();
        f[24] ^= 0x01; // checksum byte
        assert_eq!(parse(&f), Err(ParseError::IpChecksum));

        let mut f = good.clone();
        f[20] = 0x20; // MF
        fix_ip_checksum(&mut f);
        assert_eq!(parse(&f), Err(ParseError::IpFragment));

        let mut f = good.clone();
        f[23] = 6; // TCP
        fix_ip_checksum(&mut f);
        assert_eq!(parse(&f), Err(ParseError::NotUdp(6)));

        let mut f = good.clone();
        f[36..38].copy_from_slice(&4792u16.to_be_bytes());
        assert_eq!(parse(&f), Err(ParseError::UdpPort(4792)));

        let mut f = good.clone();
        f[38..40].copy_from_slice(&7u16.to_be_bytes());
        assert!(matches!(parse(&f), Err(ParseError::UdpLength { .. })));

        let mut f = good.clone();
        f[40] = 0x12; // a non-zero, wrong UDP checksum
        assert_eq!(parse(&f), Err(ParseError::UdpChecksum));

        let mut f = good.clone();
        f[43] |= 0x01; // tver 1
        fix_icrc(&mut f);
        assert_eq!(parse(&f), Err(ParseError::BthVersion(1)));

        let mut f = good.clone();
        f[42] = 0x15;
        fix_icrc(&mut f);
        assert_eq!(parse(&f), Err(ParseError::UnknownOpcode(0x15)));

        // An ACK whose opcode is turned into a WRITE_ONLY: no room for the RETH.
        let mut f = frame_for(opcode::RC_ACKNOWLEDGE, &[]);
        f[42] = opcode::RC_RDMA_WRITE_ONLY;
        fix_icrc(&mut f);
        assert_eq!(
            parse(&f),
            Err(ParseError::TruncatedHeaders {
                opcode: opcode::RC_RDMA_WRITE_ONLY,
                need: 32,
                have: 20
            })
        );

        // A zero-length SEND claiming 3 bytes of pad.
        let mut f = frame_for(opcode::RC_SEND_ONLY, &[]);
        f[43] |= 0x30;
        fix_icrc(&mut f);
        assert_eq!(
            parse(&f),
            Err(ParseError::BadPad {
                pad: 3,
                available: 0
            })
        );

        // A READ request with 4 bytes after its headers.
        let mut f = frame_for(opcode::RC_RDMA_READ_REQUEST, &[]);
        let mut longer = f.clone();
        longer.truncate(f.len() - 4);
        longer.extend_from_slice(&[0; 4]);
        longer.extend_from_slice(&[0; 4]);
        let ip_len = (longer.len() - ETH_HEADER_LEN) as u16;
        longer[16..18].copy_from_slice(&ip_len.to_be_bytes());
        longer[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        fix_ip_checksum(&mut longer);
        fix_icrc(&mut longer);
        assert_eq!(
            parse(&longer),
            Err(ParseError::UnexpectedPayload {
                opcode: opcode::RC_RDMA_READ_REQUEST,
                len: 4
            })
        );

        let last = f.len() - 1;
        f[last] ^= 0x80;
        assert!(matches!(parse(&f), Err(ParseError::Icrc { .. })));
    }

    #[test]
    fn parse_accepts_valid_udp_checksum_and_ethernet_padding() {
        let mut f = frame_for(opcode::RC_SEND_ONLY, b"abc");
        set_udp_checksum(&mut f);
        assert_ne!(f[40..42], [0, 0]);
        let plain = frame_for(opcode::RC_SEND_ONLY, b"abc");
        let before = parse(&plain).unwrap();
        assert_eq!(parse(&f).unwrap(), before);

        // The smallest frame (58 bytes) padded to Ethernet's 60-byte minimum.
        let mut f = frame_for(opcode::RC_SEND_ONLY, &[]);
        assert_eq!(f.len(), 58);
        f.extend_from_slice(&[0xAB, 0xCD]);
        assert_eq!(parse(&f).unwrap().payload, b"");
    }

    /// A frame as Linux rxe sends it: IP ID not 0 (the kernel's counter), DF, TTL 64, a
    /// per-QP UDP source port, and (when the stack checksums) a UDP checksum. Its ICRC
    /// covers the header exactly as on the wire, IP ID included.
    #[test]
    fn a_frame_as_rxe_sends_it_parses_and_its_icrc_covers_the_ip_id() {
        let addr = Addressing {
            ip_id: 0xBEEF,
            src_port: 0xE61A,
            ..addressing()
        };
        let mut f = Vec::new();
        build(
            &addr,
            &headers_for(opcode::RC_RDMA_WRITE_ONLY),
            b"rxe!",
            &mut f,
        )
        .unwrap();
        set_udp_checksum(&mut f);
        assert_eq!(f[18..20], [0xBE, 0xEF], "IP ID");
        assert_eq!(f[20] & 0x40, 0x40, "DF");
        assert_eq!(f[22], 64, "TTL");
        assert_ne!(f[40..42], [0, 0], "UDP checksum");
        let p = parse(&f).expect("parses");
        assert_eq!(p.src_port, 0xE61A);
        assert_eq!(p.payload, b"rxe!");
        // The ICRC is computed over the IP ID as it is: another ID (checksum fixed) fails.
        let mut other_id = f.clone();
        other_id[19] ^= 1;
        fix_ip_checksum(&mut other_id);
        set_udp_checksum(&mut other_id);
        assert!(matches!(parse(&other_id), Err(ParseError::Icrc { .. })));
    }

    #[test]
    fn every_single_bit_flip_after_ethernet_is_caught() {
        for op in [
            opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            opcode::RC_ATOMIC_ACKNOWLEDGE,
        ] {
            let payload: &[u8] = if opcode_info(op).unwrap().has_payload {
                b"hello"
            } else {
                b""
            };
            let frame = frame_for(op, payload);
            let good = parse(&frame).unwrap();
            for i in ETH_HEADER_LEN..frame.len() {
                for bit in 0..8 {
                    let mut f = frame.clone();
                    f[i] ^= 1 << bit;
                    check_flip(&f, &good, i);
                }
            }
        }
    }

    /// The result of parsing `f`, which is a valid frame whose byte `i` had one bit
    /// flipped. Must fail, except for the two fields the ICRC leaves out by design:
    /// BTH byte 4 (FECN, BECN, reserved: rewritten by the network) and the UDP checksum
    /// (a zero checksum turned non-zero is checked, and could in rare packets be right).
    fn check_flip(f: &[u8], good: &Packet<'_>, i: usize) {
        let bth4 = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + 4;
        let udp_csum = ETH_HEADER_LEN + IPV4_HEADER_LEN + 6;
        match parse(f) {
            Err(_) => {}
            Ok(p) if i == bth4 => {
                let mut expected = *good;
                expected.hdrs.bth.fecn = p.hdrs.bth.fecn;
                expected.hdrs.bth.becn = p.hdrs.bth.becn;
                assert_eq!(p, expected);
            }
            Ok(p) if i == udp_csum || i == udp_csum + 1 => assert_eq!(p, *good),
            Ok(p) => panic!("flip in byte {i} accepted: {p:?}"),
        }
    }

    fn arb_reth() -> impl Strategy<Value = Reth> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| Reth {
            va,
            rkey,
            dma_len,
        })
    }

    fn arb_aeth() -> impl Strategy<Value = Aeth> {
        (any::<u8>(), 0..=MASK_24).prop_map(|(syndrome, msn)| Aeth { syndrome, msn })
    }

    fn arb_atomic() -> impl Strategy<Value = AtomicEth> {
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(va, rkey, swap_add, compare)| AtomicEth {
                va,
                rkey,
                swap_add,
                compare,
            },
        )
    }

    prop_compose! {
        fn arb_bth(op: u8)(
            solicited in any::<bool>(),
            mig_req in any::<bool>(),
            pkey in any::<u16>(),
            fecn in any::<bool>(),
            becn in any::<bool>(),
            dest_qp in 0..=MASK_24,
            ack_req in any::<bool>(),
            psn in 0..=MASK_24,
        ) -> Bth {
            Bth { opcode: op, solicited, mig_req, pad: 0, tver: 0, pkey, fecn, becn,
                  dest_qp, ack_req, psn }
        }
    }

    prop_compose! {
        fn arb_addressing()(
            src_mac in any::<[u8; 6]>(),
            dst_mac in any::<[u8; 6]>(),
            src_ip in any::<[u8; 4]>(),
            dst_ip in any::<[u8; 4]>(),
            src_port in any::<u16>(),
            ttl in any::<u8>(),
            tos in any::<u8>(),
            ip_id in any::<u16>(),
        ) -> Addressing {
            Addressing { src_mac, dst_mac, src_ip, dst_ip, src_port, ttl, tos, ip_id }
        }
    }

    /// An opcode, headers with every extension header it carries (random), and a payload
    /// (0..=4096 bytes for opcodes that carry one, so all pad counts occur).
    fn arb_packet() -> impl Strategy<Value = (Headers, Vec<u8>)> {
        proptest::sample::select(all_opcodes()).prop_flat_map(|op| {
            let info = opcode_info(op).unwrap();
            let max_len = if info.has_payload { 4096 } else { 0 };
            (
                arb_bth(op),
                arb_reth(),
                arb_aeth(),
                arb_atomic(),
                any::<u64>(),
                any::<[u8; 4]>(),
                any::<u32>(),
                proptest::collection::vec(any::<u8>(), 0..=max_len),
            )
                .prop_map(
                    move |(bth, reth, aeth, atomic, orig, imm, ieth, payload)| {
                        let c = |h| info.carries(h);
                        let hdrs = Headers {
                            bth,
                            reth: c(ExtHeader::Reth).then_some(reth),
                            aeth: c(ExtHeader::Aeth).then_some(aeth),
                            atomic: c(ExtHeader::AtomicEth).then_some(atomic),
                            atomic_ack: c(ExtHeader::AtomicAckEth).then_some(AtomicAckEth { orig }),
                            imm: c(ExtHeader::Imm).then_some(imm),
                            ieth: c(ExtHeader::Ieth).then_some(ieth),
                            // The IETH's value serves as Q_Key and source QP.
                            deth: c(ExtHeader::Deth).then_some(Deth {
                                qkey: ieth,
                                src_qp: ieth & MASK_24,
                            }),
                            dceth: c(ExtHeader::Dceth).then_some(Dceth {
                                dc_key: u64::from(ieth) << 8,
                                dci_qpn: ieth & MASK_24,
                            }),
                        };
                        (hdrs, payload)
                    },
                )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn build_parse_round_trip(addr in arb_addressing(), (hdrs, payload) in arb_packet()) {
            let mut out = Vec::new();
            build(&addr, &hdrs, &payload, &mut out).unwrap();
            let pad = (4 - payload.len() % 4) % 4;
            prop_assert_eq!(
                out.len(),
                ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN
                    + opcode_info(hdrs.bth.opcode).unwrap().header_len()
                    + payload.len() + pad + ICRC_LEN
            );
            let p = parse(&out).unwrap();
            let mut expected = hdrs;
            expected.bth.pad = pad as u8;
            prop_assert_eq!(p.hdrs, expected);
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!(p.src_mac, addr.src_mac);
            prop_assert_eq!(p.dst_mac, addr.dst_mac);
            prop_assert_eq!(p.src_ip, addr.src_ip);
            prop_assert_eq!(p.dst_ip, addr.dst_ip);
            prop_assert_eq!(p.src_port, addr.src_port);
            prop_assert_eq!(p.ttl, addr.ttl);
            prop_assert_eq!(p.tos, addr.tos);

            // The ICRC in the frame is what an independent reading of the spec gives.
            let end = out.len() - ICRC_LEN;
            let mut masked = vec![0xFFu8; 8];
            masked.extend_from_slice(&out[ETH_HEADER_LEN..end]);
            for off in [1usize, 8, 10, 11, 26, 27, 32] {
                masked[8 + off] = 0xFF;
            }
            prop_assert_eq!(&out[end..], &crc32fast::hash(&masked).to_le_bytes()[..]);
        }

        #[test]
        fn parse_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..200)
        ) {
            let _ = parse(&bytes);
        }

        #[test]
        fn parse_never_panics_on_corrupted_frames(
            (hdrs, payload) in arb_packet(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            do_cut in any::<bool>(),
        ) {
            let mut out = Vec::new();
            build(&addressing(), &hdrs, &payload, &mut out).unwrap();
            for (at, value) in edits {
                let i = at.index(out.len());
                out[i] = value;
            }
            if do_cut {
                let len = cut.index(out.len() + 1);
                out.truncate(len);
            }
            let _ = parse(&out);
        }

        #[test]
        fn random_single_bit_flips_are_caught(
            (hdrs, payload) in arb_packet(),
            at in any::<prop::sample::Index>(),
            bit in 0..8u8,
        ) {
            let mut frame = Vec::new();
            build(&addressing(), &hdrs, &payload, &mut frame).unwrap();
            let good = parse(&frame).unwrap();
            let i = ETH_HEADER_LEN + at.index(frame.len() - ETH_HEADER_LEN);
            let mut f = frame.clone();
            f[i] ^= 1 << bit;
            check_flip(&f, &good, i);
        }
    }
}
