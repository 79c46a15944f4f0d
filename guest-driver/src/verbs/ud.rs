//! Unreliable datagram QPs ([`rnic_abi::ud`]): single-packet SENDs to any UD QP, addressed
//! per work request.

use rnic_abi::cmd::Opcode;
use rnic_abi::ud::{UdSendWqe, QPT_UD, UD_MAX_PAYLOAD};
use rnic_abi::verbs::{attr, QpAttr, QpState, SendWqe};
use zerocopy::{FromBytes, IntoBytes};

use super::qp::encode_send_wqe;
use super::{invalid, Cq, Pd, Qp, QpCaps, SendWr, WrOpcode};
use crate::error::{Error, Result};

pub use rnic_abi::mcast::MULTICAST_QPN;
pub use rnic_abi::ud::{GRH_LEN, QKEY_USE_OWN};

/// Where a UD send goes: the address vector and the Q_Key (as an ibverbs address handle
/// plus `remote_qpn` and `remote_qkey`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdAddress {
    /// The destination QP.
    pub dest_qpn: u32,
    /// The Q_Key to send with; [`QKEY_USE_OWN`] sends the QP's own.
    pub qkey: u32,
    /// The destination GID (the function's GID from QUERY_DEVICE).
    pub dgid: [u8; 16],
    /// IPv4 TTL (0: 64).
    pub hop_limit: u8,
    /// IPv4 TOS.
    pub traffic_class: u8,
    /// The source: an entry of the function's GID table (0: the function's GID).
    pub sgid_index: u8,
}

impl Pd {
    /// Creates a UD QP, in RESET. Bring it up with [`Qp::ud_ready`]. Its receives (from
    /// its own queue, or an SRQ's) get [`GRH_LEN`] bytes of GRH before the payload.
    pub fn create_ud_qp(&self, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Qp> {
        self.create_qp_of_type(QPT_UD, send_cq, recv_cq, caps, false, None)
    }
}

impl Qp {
    /// Moves a UD QP from RESET through INIT and RTR to RTS, with Q_Key `qkey` (received
    /// packets must carry it) and first PSN `sq_psn`.
    pub fn ud_ready(&self, qkey: u32, sq_psn: u32) -> Result<()> {
        let init = QpAttr {
            qp_state: QpState::Init as u8,
            port_num: 1,
            ..QpAttr::default()
        };
        self.modify_with_qkey(&init, attr::STATE | attr::PKEY_INDEX | attr::PORT, qkey)?;
        let rtr = QpAttr {
            qp_state: QpState::Rtr as u8,
            ..QpAttr::default()
        };
        self.modify(&rtr, attr::STATE)?;
        let rts = QpAttr {
            qp_state: QpState::Rts as u8,
            sq_psn,
            ..QpAttr::default()
        };
        self.modify(&rts, attr::STATE | attr::SQ_PSN)
    }

    /// The UD QP joins the multicast group `gid`, an IPv4-mapped multicast GID
    /// (`ATTACH_MCAST`, ABI 1.11, datasheet §14.15): it receives what any QP sends to the
    /// group (`dest_qpn` [`MULTICAST_QPN`], `dgid` the group's GID) from now on.
    pub fn attach_mcast(&self, gid: &[u8; 16]) -> Result<()> {
        self.mcast(Opcode::AttachMcast, gid)
    }

    /// The UD QP leaves the multicast group `gid` (`DETACH_MCAST`).
    pub fn detach_mcast(&self, gid: &[u8; 16]) -> Result<()> {
        self.mcast(Opcode::DetachMcast, gid)
    }

    /// Posts a UD SEND (`WrOpcode::Send` or `SendWithImm`, at most 4096 bytes) to `to`.
    pub fn post_ud_send(&self, wr: &SendWr, to: &UdAddress) -> Result<()> {
        if !matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm(_)) {
            return Err(invalid(format!(
                "post_ud_send: {:?} is not a UD operation (SEND, SEND with immediate)",
                wr.opcode
            )));
        }
        let len: u64 = match &wr.inline {
            Some(d) => d.len() as u64,
            None => wr.sges.iter().map(|s| u64::from(s.length)).sum(),
        };
        if len > u64::from(UD_MAX_PAYLOAD) {
            return Err(invalid(format!(
                "post_ud_send: {len} bytes; a UD message is one packet of at most {UD_MAX_PAYLOAD}"
            )));
        }
        let mut wqe = encode_send_wqe(wr, &self.caps())?;
        let fixed = size_of::<SendWqe>();
        let mut ud = UdSendWqe::read_from_bytes(&wqe[..fixed])
            .map_err(|_| Error::Device("a send WQE is 64 bytes".into()))?;
        ud.remote_qkey = to.qkey;
        ud.remote_qpn = to.dest_qpn;
        ud.dgid = to.dgid;
        ud.hop_limit = to.hop_limit;
        ud.traffic_class = to.traffic_class;
        ud.sgid_index = to.sgid_index;
        wqe[..fixed].copy_from_slice(ud.as_bytes());
        self.post_encoded_sends(std::slice::from_ref(wr), &[wqe], None)
            .map(drop)
    }
}
