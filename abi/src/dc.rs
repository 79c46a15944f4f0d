//! Dynamically Connected transport (ABI 1.4, [`crate::regs::CAP_DC`]).
//!
//! A DC initiator (DCI, `CreateQpReq::qp_type` = [`QPT_DCI`]) is one send queue that
//! reaches many DC targets. A DC target (DCT, [`QPT_DCT`]) is a receive-only QP (its own
//! receive queue or an SRQ) with a 64-bit DC access key set by [`SetDcKeyReq`]
//! (`SET_DC_KEY`, opcode 0x0160) before it leaves RESET; its QP number is the "DCT
//! number" initiators address. Both move RESET → INIT → RTR (→ RTS for a DCI) with the
//! RC state table; the address vector, destination QP and receive PSN given at RTR are
//! placeholders (the connection supplies them).
//!
//! Every DCI send WQE is a [`DcSendWqe`]: [`crate::verbs::SendWqe`] with the target
//! (DCT number, IPv4 address, DC access key) in its last 16 bytes. The DCI connects to
//! the target of the WQE at the head (a `DC_CONNECT` packet carrying the key), runs that
//! target's consecutive WQEs with RC reliability (SEND, RDMA WRITE, RDMA READ, atomics),
//! and when a WQE names another target, waits until everything is acknowledged,
//! disconnects (`DC_DISCONNECT`) and connects to the next one. A wrong key completes the
//! WQE with `REM_ACCESS_ERR` and the DCI goes to ERR, as an RC QP would.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Queue pair type: DC initiator.
pub const QPT_DCI: u8 = 5;
/// Queue pair type: DC target.
pub const QPT_DCT: u8 = 6;

/// A DCI send WQE's fixed part: [`crate::verbs::SendWqe`] with the DC address in what is
/// `reserved1` there. SGEs or inline data follow as for any send WQE.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DcSendWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// A `wr` opcode (not LOCAL_INV or BIND_MW).
    pub opcode: u8,
    /// `send_flags`.
    pub flags: u8,
    /// Number of SGEs.
    pub num_sge: u8,
    /// Must be 0.
    pub reserved0: u8,
    /// Immediate data.
    pub imm_or_inv: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Bytes of inline data.
    pub inline_len: u32,
    /// Compare value or addend.
    pub compare_add: u64,
    /// Swap value.
    pub swap: u64,
    /// The target's DCT number.
    pub dctn: u32,
    /// The target's IPv4 address (the last 4 bytes of its IPv4-mapped GID).
    pub dest_ip: [u8; 4],
    /// The target's DC access key.
    pub dc_key: u64,
}

/// `SET_DC_KEY` request: the DC access key of a DCT (in RESET). No response body.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetDcKeyReq {
    /// The DCT.
    pub qpn: u32,
    /// Must be 0.
    pub reserved: u32,
    /// The key initiators must present.
    pub dc_key: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn the_dc_wqe_overlays_the_send_wqe() {
        use crate::verbs::SendWqe;
        assert_eq!(size_of::<DcSendWqe>(), size_of::<SendWqe>());
        assert_eq!(offset_of!(DcSendWqe, swap), offset_of!(SendWqe, swap));
        assert_eq!(offset_of!(DcSendWqe, dctn), offset_of!(SendWqe, reserved1));
        assert_eq!(size_of::<SetDcKeyReq>(), 16);
    }
}
