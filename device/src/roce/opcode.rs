//! The opcodes of RoCEv2 (BTH byte 0) and the one table of what each carries, as rxe's
//! `rxe_opcode.c`: which extension headers follow the BTH, in which order, and what kind
//! of packet it is ([`opcode_info`]). Building and parsing both read it, so they cannot
//! disagree. The constants are the RC, UD and DC opcodes this device takes, named as in
//! the InfiniBand specification and rdma_rxe (`IB_OPCODE_RC_*`); RC is transport 0b000,
//! so the RC ones are also the low 5 bits (docs/hardware-interface.md §7.11). UC (0b001)
//! numbers its SENDs and WRITEs as RC does ([`rc_equivalent`]).

use std::fmt;

use super::hdr::{ExtHeader, BTH_LEN};

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
/// RDMA FLUSH request (FETH, then RETH; no payload; IBTA 1.5). Answered by an empty
/// [`RC_RDMA_READ_RESPONSE_ONLY`].
pub const RC_FLUSH: u8 = 0x1c;
/// RDMA ATOMIC WRITE request (RETH, then an 8-byte payload; IBTA 1.5). Answered by an
/// empty [`RC_RDMA_READ_RESPONSE_ONLY`].
pub const RC_ATOMIC_WRITE: u8 = 0x1d;
/// Last packet of a SEND with invalidate (carries the IETH).
pub const RC_SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
/// A single-packet SEND with invalidate (carries the IETH).
pub const RC_SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
/// First packet of a multi-packet UC SEND.
pub const UC_SEND_FIRST: u8 = 0x20;
/// Middle packet of a UC SEND.
pub const UC_SEND_MIDDLE: u8 = 0x21;
/// Last packet of a UC SEND.
pub const UC_SEND_LAST: u8 = 0x22;
/// Last packet of a UC SEND with immediate data (carries ImmDt).
pub const UC_SEND_LAST_WITH_IMMEDIATE: u8 = 0x23;
/// A single-packet UC SEND.
pub const UC_SEND_ONLY: u8 = 0x24;
/// A single-packet UC SEND with immediate data (carries ImmDt).
pub const UC_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x25;
/// First packet of a UC RDMA WRITE (carries the RETH).
pub const UC_RDMA_WRITE_FIRST: u8 = 0x26;
/// Middle packet of a UC RDMA WRITE.
pub const UC_RDMA_WRITE_MIDDLE: u8 = 0x27;
/// Last packet of a UC RDMA WRITE.
pub const UC_RDMA_WRITE_LAST: u8 = 0x28;
/// Last packet of a UC RDMA WRITE with immediate data (carries ImmDt).
pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x29;
/// A single-packet UC RDMA WRITE (carries the RETH).
pub const UC_RDMA_WRITE_ONLY: u8 = 0x2a;
/// A single-packet UC RDMA WRITE with immediate data (RETH, then ImmDt).
pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x2b;
/// The UC transport's bits (7:5 = 0b001) in an opcode.
pub const UC_TRANSPORT: u8 = 0x20;
/// A UD SEND (carries the DETH; UD messages are one packet).
pub const UD_SEND_ONLY: u8 = 0x64;
/// A UD SEND with immediate data (DETH, then ImmDt).
pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x65;
/// DC connect (manufacturer-specific range 0xC0-0xFF; carries the DCETH).
pub const DC_CONNECT: u8 = 0xC0;
/// DC disconnect (carries the DCETH).
pub const DC_DISCONNECT: u8 = 0xC1;

/// Sent by the requester (rxe's RXE_REQ_MASK).
const F_REQUEST: u32 = 1 << 0;
/// Sent by the responder: READ responses and ACKs (rxe's RXE_ACK_MASK).
const F_RESPONSE: u32 = 1 << 1;
/// First packet of a message (rxe's RXE_START_MASK).
const F_FIRST: u32 = 1 << 2;
/// Neither first nor last (rxe's RXE_MIDDLE_MASK).
const F_MIDDLE: u32 = 1 << 3;
/// Last packet of a message (rxe's RXE_END_MASK).
const F_LAST: u32 = 1 << 4;
/// Part of a SEND.
const F_SEND: u32 = 1 << 5;
/// Part of an RDMA WRITE.
const F_WRITE: u32 = 1 << 6;
/// An RDMA READ request.
const F_READ_REQUEST: u32 = 1 << 7;
/// Part of an RDMA READ response.
const F_READ_RESPONSE: u32 = 1 << 8;
/// An atomic request.
const F_ATOMIC: u32 = 1 << 9;
/// An ACK/NAK or atomic ACK: a response that carries no data.
const F_ACK: u32 = 1 << 10;
/// Completes a receive at the responder (rxe's RXE_COMP_MASK).
const F_COMPLETES: u32 = 1 << 11;
/// Takes a receive WQE at the responder (rxe's RXE_RWR_MASK).
const F_CONSUMES_RWQE: u32 = 1 << 12;
/// A UD (datagram) opcode; all the others are RC.
const F_DATAGRAM: u32 = 1 << 13;
/// A DC connection-management packet (DC_CONNECT, DC_DISCONNECT).
const F_DC_CONTROL: u32 = 1 << 14;
/// A UC opcode (a SEND or WRITE of the unreliable connected transport).
const F_UC: u32 = 1 << 15;
/// An RDMA FLUSH or ATOMIC WRITE request (rxe's RXE_FLUSH_MASK, RXE_ATOMIC_WRITE_MASK):
/// the responder answers it with an empty READ response, from a responder resource.
const F_FLUSH_OR_ATOMIC_WRITE: u32 = 1 << 16;

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
    flags: u32,
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

    const fn has(&self, flag: u32) -> bool {
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
    /// An RDMA FLUSH or ATOMIC WRITE request: answered by an empty READ response.
    pub const fn is_flush_or_atomic_write(&self) -> bool {
        self.has(F_FLUSH_OR_ATOMIC_WRITE)
    }
    /// A UD opcode.
    pub const fn is_datagram(&self) -> bool {
        self.has(F_DATAGRAM)
    }
    /// A UC opcode.
    pub const fn is_uc(&self) -> bool {
        self.has(F_UC)
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
const FETH_RETH: &[ExtHeader] = &[ExtHeader::Feth, ExtHeader::Reth];

/// The opcode table: the extension headers (in wire order), payload and classification
/// of every RC, UC, UD and DC opcode, as in rxe_opcode.c. `None` for opcodes this device
/// does not speak (RD, XRC, CNPs, reserved values), which
/// [`super::parse::parse`] rejects.
pub fn opcode_info(op: u8) -> Option<OpcodeInfo> {
    OPCODES[usize::from(op)]
}

/// The RC opcode of the same operation and place in its message as `op`: `op` itself
/// for RC, the RC one with the same low five bits for UC (IBTA numbers UC's SENDs and
/// WRITEs as RC's). The responder executes both transports' requests alike.
pub const fn rc_equivalent(op: u8) -> u8 {
    if op & 0xE0 == UC_TRANSPORT {
        op & 0x1F
    } else {
        op
    }
}

/// The names of the UC opcodes, in opcode order from [`UC_SEND_FIRST`].
const UC_NAMES: [&str; 12] = [
    "UC_SEND_FIRST",
    "UC_SEND_MIDDLE",
    "UC_SEND_LAST",
    "UC_SEND_LAST_WITH_IMMEDIATE",
    "UC_SEND_ONLY",
    "UC_SEND_ONLY_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_FIRST",
    "UC_RDMA_WRITE_MIDDLE",
    "UC_RDMA_WRITE_LAST",
    "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_ONLY",
    "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
];

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
    const REQ_SEND: u32 = F_REQUEST | F_SEND;
    const REQ_WRITE: u32 = F_REQUEST | F_WRITE;
    const READ_RESP: u32 = F_RESPONSE | F_READ_RESPONSE;
    const ONE: u32 = F_FIRST | F_LAST;
    let (name, ext_headers, has_payload, flags): (&str, &[ExtHeader], bool, u32) = match op {
        // UC's SENDs and WRITEs carry what RC's of the same low bits carry.
        UC_SEND_FIRST..=UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => {
            let Some(rc) = describe(op & 0x1F) else {
                return None;
            };
            (
                UC_NAMES[(op - UC_SEND_FIRST) as usize],
                rc.ext_headers,
                rc.has_payload,
                rc.flags | F_UC,
            )
        }
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
        RC_FLUSH => (
            "RC_FLUSH",
            FETH_RETH,
            false,
            F_REQUEST | F_FLUSH_OR_ATOMIC_WRITE | ONE,
        ),
        RC_ATOMIC_WRITE => (
            "RC_ATOMIC_WRITE",
            RETH,
            true,
            F_REQUEST | F_FLUSH_OR_ATOMIC_WRITE | ONE,
        ),
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
    /// The transport: `"RD"`, `"XRC"`, `"CNP"`, or `"RC"` for an RC operation this
    /// device does not do.
    pub transport: &'static str,
    /// The operation as the specification names it after the transport (`"SEND_ONLY"`,
    /// `"FLUSH"`); empty for a CNP, which is nothing else.
    pub operation: &'static str,
}

impl Foreign {
    /// Whether the opcode is of a transport this device has no QPs of (RD, XRC), as
    /// opposed to something it does on no QP (a CNP).
    pub fn other_transport(&self) -> bool {
        matches!(self.transport, "RD" | "XRC")
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
/// RD and XRC number as RC does: UC has the SENDs and WRITEs (known here), RD the RC set
/// up to FETCH_ADD and RESYNC (0x15), XRC the whole RC set; the CNP is 0x80 alone.
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Every opcode the table knows.
    pub(in crate::roce) fn all_opcodes() -> Vec<u8> {
        (0..=u8::MAX)
            .filter(|&op| opcode_info(op).is_some())
            .collect()
    }

    #[test]
    fn opcode_table_matches_rxe() {
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
            (RC_FLUSH, FETH_RETH, false),
            (RC_ATOMIC_WRITE, RETH, true),
            (UC_SEND_FIRST, NO_EXT, true),
            (UC_SEND_MIDDLE, NO_EXT, true),
            (UC_SEND_LAST, NO_EXT, true),
            (UC_SEND_LAST_WITH_IMMEDIATE, IMM, true),
            (UC_SEND_ONLY, NO_EXT, true),
            (UC_SEND_ONLY_WITH_IMMEDIATE, IMM, true),
            (UC_RDMA_WRITE_FIRST, RETH, true),
            (UC_RDMA_WRITE_MIDDLE, NO_EXT, true),
            (UC_RDMA_WRITE_LAST, NO_EXT, true),
            (UC_RDMA_WRITE_LAST_WITH_IMMEDIATE, IMM, true),
            (UC_RDMA_WRITE_ONLY, RETH, true),
            (UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, RETH_IMM, true),
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
        // rxe's FLUSH: BTH, FETH at 12, RETH at 16, 32 bytes; ATOMIC WRITE: BTH, RETH,
        // the 8-byte payload at 28 (rxe_opcode.c).
        let flush = opcode_info(RC_FLUSH).unwrap();
        assert_eq!(flush.header_len(), 32);
        assert_eq!(flush.ext_offset(ExtHeader::Feth), Some(12));
        assert_eq!(flush.ext_offset(ExtHeader::Reth), Some(16));
        let atomic_write = opcode_info(RC_ATOMIC_WRITE).unwrap();
        assert_eq!(atomic_write.header_len(), 28);
        for info in [flush, atomic_write] {
            assert!(info.is_flush_or_atomic_write() && info.is_only() && info.is_request());
            assert!(!info.is_write() && !info.is_atomic() && !info.is_read());
        }
        // Not spoken: RC 0x15 (reserved), UC beyond the WRITEs, RD, UD other than SEND.
        for op in [0x15, 0x2c, 0x40, 0x66] {
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
        // UC is RC's SENDs and WRITEs under another transport, as rxe's table has them.
        for op in UC_SEND_FIRST..=UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE {
            let (uc, rc) = (opcode_info(op).unwrap(), opcode_info(op & 0x1F).unwrap());
            assert!(uc.is_uc() && !rc.is_uc() && uc.is_request());
            assert_eq!(uc.name.strip_prefix("UC_"), rc.name.strip_prefix("RC_"));
            assert_eq!(uc.flags & !F_UC, rc.flags, "{}", uc.name);
            assert_eq!(rc_equivalent(op), op & 0x1F);
            assert_eq!(rc_equivalent(op & 0x1F), op & 0x1F);
        }
        assert_eq!(rc_equivalent(UD_SEND_ONLY), UD_SEND_ONLY);
        assert_eq!(
            opcode_info(UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
                .unwrap()
                .header_len(),
            32
        );
    }

    #[test]
    fn defined_opcodes_of_other_transports_are_told_apart_from_reserved_ones() {
        let name = |op| foreign(op).map(|f| f.to_string());
        // UC is spoken (ABI 1.6): not foreign.
        assert_eq!(name(0x24), None);
        assert_eq!(name(0x2B), None);
        assert_eq!(name(0x4C).as_deref(), Some("RD_RDMA_READ_REQUEST"));
        assert_eq!(name(0x55).as_deref(), Some("RD_RESYNC"));
        assert_eq!(name(0x80).as_deref(), Some("CNP"));
        assert_eq!(name(0xB7).as_deref(), Some("XRC_SEND_ONLY_WITH_INVALIDATE"));
        // FLUSH and ATOMIC WRITE are spoken (ABI 1.11): not foreign.
        assert_eq!(name(0x1C), None);
        assert_eq!(name(0x1D), None);
        assert!(foreign(0x44).unwrap().other_transport());
        assert!(!foreign(0x80).unwrap().other_transport());
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
}
