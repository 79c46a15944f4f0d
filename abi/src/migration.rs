//! Live migration of an RC queue pair between functions of one device
//! (docs/hardware-interface.md, "Connection migration").
//!
//! The PF issues `MIGRATE_QP` ([`MigrateQpReq`]) on its admin queue; the device moves the
//! QP with its transport state and the objects it uses from function `from` to function
//! `to`. The destination driver then learns the new numbering with `ADOPT_QP`
//! ([`AdoptQpReq`] / [`AdoptQpResp`]).
//!
//! Member ids: 0 is the PF, `n` is VF `n - 1`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `MIGRATE_QP` request (PF only): move QP `qpn` from member `from` to member `to`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MigrateQpReq {
    /// Member the QP lives on now: 0 = PF, n = VF n-1.
    pub from: u32,
    /// Member to move it to: 0 = PF, n = VF n-1.
    pub to: u32,
    /// The QP to move. QPNs are device-wide, so the QP keeps this number.
    pub qpn: u32,
    /// Reserved flags; must be 0.
    pub flags: u32,
    /// 0: move the QP's own send CQ with it (only allowed when no other QP uses it);
    /// otherwise the number of an existing CQ of `to` that becomes the QP's send CQ.
    pub send_cq: u32,
    /// As `send_cq`, for the receive CQ.
    pub recv_cq: u32,
    /// Doorbell page of `to` in which the device allocates the QP's SQ/RQ doorbell slots
    /// (and those of CQs that move).
    pub doorbell_page: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `MIGRATE_QP` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MigrateQpResp {
    /// The QP's number (unchanged).
    pub qpn: u32,
    /// The QP's protection domain number on `to` (may differ from the one on `from`).
    pub pdn: u32,
    /// The QP's send CQ number on `to`.
    pub send_cq: u32,
    /// The QP's receive CQ number on `to`.
    pub recv_cq: u32,
    /// How many memory regions moved with the PD.
    pub mrs_moved: u32,
    /// How many CQs moved (0, 1 or 2).
    pub cqs_moved: u32,
    /// Zero.
    pub reserved: [u32; 2],
}

/// `ADOPT_QP` request (any function): describe a QP that arrived on this function.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AdoptQpReq {
    /// The QP, as the `QP_ARRIVED` event named it.
    pub qpn: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `ADOPT_QP` response: what the driver of the destination needs to keep using the QP.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AdoptQpResp {
    /// The QP's number.
    pub qpn: u32,
    /// Its protection domain on this function.
    pub pdn: u32,
    /// Its send CQ on this function.
    pub send_cq: u32,
    /// Its receive CQ on this function.
    pub recv_cq: u32,
    /// Doorbell of the send queue on this function.
    pub sq_doorbell: crate::verbs::DoorbellSlot,
    /// Doorbell of the receive queue on this function.
    pub rq_doorbell: crate::verbs::DoorbellSlot,
    /// Doorbell of the send CQ on this function.
    pub send_cq_doorbell: crate::verbs::DoorbellSlot,
    /// Doorbell of the receive CQ on this function.
    pub recv_cq_doorbell: crate::verbs::DoorbellSlot,
    /// Send queue entries.
    pub sq_size: u32,
    /// Receive queue entries.
    pub rq_size: u32,
    /// The send queue's producer index the device last saw (wrapping count).
    pub sq_pi: u32,
    /// The receive queue's producer index the device last saw (wrapping count).
    pub rq_pi: u32,
    /// The QP's state (`QpState` number).
    pub state: u32,
    /// Zero.
    pub reserved: u32,
}
