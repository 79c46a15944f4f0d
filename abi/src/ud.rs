//! Unreliable datagram QPs (ABI 1.3, [`crate::regs::CAP_UD`]).
//!
//! A UD QP (`CreateQpReq::qp_type` = [`QPT_UD`]) sends and receives single-packet SENDs
//! (with or without immediate data) to and from any UD QP, addressed per work request:
//! the send WQE carries the address vector ([`UdSendWqe`], the same 64 bytes as
//! [`crate::verbs::SendWqe`] with the RDMA and atomic fields reused). Nothing is
//! acknowledged or retried: a send completes once its packet is on the wire.
//!
//! On the wire (as rxe): BTH opcode `UD_SEND_ONLY` (0x64) or `UD_SEND_ONLY_WITH_IMMEDIATE`
//! (0x65), then the 8-byte DETH (Q_Key, a reserved byte, the 24-bit source QP), then the
//! immediate data. A receiver drops, and counts, a packet whose Q_Key is not its QP's.
//!
//! A receive buffer gets [`GRH_LEN`] bytes first, as ibverbs defines it for RoCEv2: 20
//! zero bytes, then the packet's 20-byte IPv4 header; then the payload. The completion's
//! `byte_len` counts both, `src_qp` is the sender's QP and `wc_flags` has
//! [`crate::verbs::wc_flags::GRH`].
//!
//! The Q_Key of the QP is set with `MODIFY_QP` and [`crate::verbs::attr::QKEY`]: the
//! request is then a `ModifyQpReq` followed by a [`ModifyQpQkey`] (68 bytes in all).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Queue pair type: unreliable datagram (`IBV_QPT_UD`).
pub const QPT_UD: u8 = 4;
/// Queue pair type: the function's GSI QP (the kernel's `IB_QPT_GSI`; ABI 1.8,
/// [`crate::regs::CAP_GSI`]). It is a UD QP in every way but its number, [`GSI_QPN`]:
/// a function has at most one (a second `CREATE_QP` of this type fails with `BUSY`), and
/// packets for QP 1 at the function's address reach it. A communication manager sets
/// its Q_Key to [`GSI_QKEY`] and sends its MADs to QP 1 of the peer with that Q_Key.
pub const QPT_GSI: u8 = 1;
/// The GSI QP's number.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of every GSI QP (IBTA 13.4.6.1, the kernel's `IB_QP1_QKEY`). Its bit 31 is
/// [`QKEY_USE_OWN`]'s: a send that names it sends the sending QP's own Q_Key, which is
/// this one for a GSI QP that was given it.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Bytes of GRH space at the start of every UD receive buffer.
pub const GRH_LEN: u32 = 40;

/// Largest UD payload: one packet of the port MTU (4096 bytes).
pub const UD_MAX_PAYLOAD: u32 = 4096;

/// A `remote_qkey` with this bit set means "use the sending QP's own Q_Key" (IB 10.2.5).
pub const QKEY_USE_OWN: u32 = 1 << 31;

/// A UD send WQE's fixed part: [`crate::verbs::SendWqe`]'s layout with the address vector
/// where the RDMA and atomic fields are. SGEs or inline data follow as for any send WQE.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct UdSendWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `wr::SEND` or `wr::SEND_WITH_IMM`.
    pub opcode: u8,
    /// `send_flags`.
    pub flags: u8,
    /// Number of SGEs.
    pub num_sge: u8,
    /// Must be 0.
    pub reserved0: u8,
    /// Immediate data.
    pub imm: u32,
    /// The Q_Key to send with (or [`QKEY_USE_OWN`]).
    pub remote_qkey: u32,
    /// The destination QP number.
    pub remote_qpn: u32,
    /// Must be 0.
    pub reserved1: u32,
    /// Bytes of inline data.
    pub inline_len: u32,
    /// Destination GID (IPv4-mapped for RoCEv2).
    pub dgid: [u8; 16],
    /// IPv4 TTL (0: 64).
    pub hop_limit: u8,
    /// IPv4 TOS.
    pub traffic_class: u8,
    /// The source: an entry of the function's GID table (ABI 1.10, `crate::gid`; 0, the
    /// function's GID, unless the driver set the table). A datagram from an entry that
    /// holds no IPv4-mapped GID completes with `LOC_QP_OP_ERR`.
    pub sgid_index: u8,
    /// Must be 0.
    pub reserved2: [u8; 13],
}

/// Follows a `ModifyQpReq` whose mask has `attr::QKEY`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct ModifyQpQkey {
    /// The QP's Q_Key.
    pub qkey: u32,
    /// Must be 0.
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn the_ud_wqe_overlays_the_send_wqe() {
        use crate::verbs::SendWqe;
        assert_eq!(size_of::<UdSendWqe>(), size_of::<SendWqe>());
        assert_eq!(offset_of!(UdSendWqe, imm), offset_of!(SendWqe, imm_or_inv));
        assert_eq!(
            offset_of!(UdSendWqe, inline_len),
            offset_of!(SendWqe, inline_len)
        );
        assert_eq!(offset_of!(UdSendWqe, num_sge), offset_of!(SendWqe, num_sge));
        assert_eq!(size_of::<ModifyQpQkey>(), 8);
    }
}
