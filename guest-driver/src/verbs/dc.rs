//! Dynamically Connected transport ([`rnic_abi::dc`]): a DC initiator (DCI) reaches many
//! DC targets (DCTs), each send WR naming its target.

use rnic_abi::cmd::Opcode;
use rnic_abi::dc::{DcSendWqe, SetDcKeyReq, QPT_DCI, QPT_DCT};
use rnic_abi::regs;
use rnic_abi::verbs::SendWqe;
use zerocopy::{FromBytes, IntoBytes};

use super::qp::encode_send_wqe;
use super::transition::{init_attr, rtr_attr, rts_attr};
use super::{invalid, Cq, Pd, Qp, QpCaps, SendWr, WrOpcode};
use crate::error::{Error, Result};

/// Where a DCI send goes (as `ibv_wr_set_dc_addr`'s address handle, DCT number and key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DcAddress {
    /// The target's DCT number (its QP number).
    pub dctn: u32,
    /// The target function's GID (IPv4-mapped, from QUERY_DEVICE).
    pub dgid: [u8; 16],
    /// The target's DC access key.
    pub dc_key: u64,
}

/// The path MTU code DC QPs use (4096 bytes).
const DC_PATH_MTU: u8 = 5;
/// A placeholder peer for the RTR step: the connection supplies the real one.
const NO_PEER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0];

impl Pd {
    fn check_dc(&self) -> Result<()> {
        if self.inner.ctx().attr.caps & regs::CAP_DC == 0 {
            return Err(Error::Unsupported(
                "DC: the device does not report CAP_DC (an rnicd older than ABI 1.4?)",
            ));
        }
        Ok(())
    }

    /// Creates a DC initiator, in RESET; bring it up with [`Qp::dci_ready`]. Its receive
    /// side is unused (`caps.max_recv_wr` may be 1).
    pub fn create_dci(&self, send_cq: &Cq, caps: QpCaps, sq_sig_all: bool) -> Result<Qp> {
        self.check_dc()?;
        self.create_qp_on(send_cq, send_cq, caps, sq_sig_all, None, QPT_DCI)
    }

    /// Creates a DC target with DC access key `dc_key`, in RESET; bring it up with
    /// [`Qp::dct_ready`]. Receives come from its own queue or from `srq`.
    pub fn create_dct(
        &self,
        recv_cq: &Cq,
        caps: QpCaps,
        srq: Option<&super::Srq>,
        dc_key: u64,
    ) -> Result<Qp> {
        self.check_dc()?;
        let caps = QpCaps {
            max_send_wr: 1,
            max_send_sge: 0,
            max_inline_data: 0,
            ..caps
        };
        let caps = caps.for_srq(srq.is_some());
        let dct = self.create_qp_on(recv_cq, recv_cq, caps, false, srq, QPT_DCT)?;
        let req = SetDcKeyReq {
            qpn: dct.qp_num(),
            reserved: 0,
            dc_key,
        };
        self.inner
            .ctx()
            .command_no_body(Opcode::SetDcKey, req.as_bytes())?;
        Ok(dct)
    }
}

impl Qp {
    /// Brings a DCT to RTR: it accepts connections and the accesses in `access`.
    pub fn dct_ready(&self, access: u32) -> Result<()> {
        let (a, m) = init_attr(access);
        self.modify(&a, m)?;
        let (a, m) = rtr_attr(0, NO_PEER, 0, DC_PATH_MTU, 16, 1);
        self.modify(&a, m)
    }

    /// Brings a DCI to RTS with the RC timers: ACK timeout code `timeout`, `retry_cnt`
    /// transport retries, `max_rd_atomic` READs or atomics in flight.
    pub fn dci_ready(&self, timeout: u8, retry_cnt: u8, max_rd_atomic: u8) -> Result<()> {
        let (a, m) = init_attr(0);
        self.modify(&a, m)?;
        let (a, m) = rtr_attr(0, NO_PEER, 0, DC_PATH_MTU, 0, 1);
        self.modify(&a, m)?;
        let (a, m) = rts_attr(0, timeout, retry_cnt, 7, max_rd_atomic);
        self.modify(&a, m)
    }

    /// Posts a send WR (SEND, RDMA WRITE or READ, atomics) on a DCI, to `to`.
    pub fn post_dc_send(&self, wr: &SendWr, to: &DcAddress) -> Result<()> {
        if matches!(
            wr.opcode,
            WrOpcode::LocalInv(_) | WrOpcode::BindMw { .. } | WrOpcode::RegMr { .. }
        ) {
            return Err(invalid(format!(
                "post_dc_send: {:?} has no target; post it on an RC QP",
                wr.opcode
            )));
        }
        let mut wqe = encode_send_wqe(wr, &self.caps())?;
        let fixed = size_of::<SendWqe>();
        let mut dc = DcSendWqe::read_from_bytes(&wqe[..fixed])
            .map_err(|_| Error::Device("a send WQE is 64 bytes".into()))?;
        dc.dctn = to.dctn;
        dc.dest_ip.copy_from_slice(&to.dgid[12..16]);
        dc.dc_key = to.dc_key;
        wqe[..fixed].copy_from_slice(dc.as_bytes());
        self.post_encoded_sends(std::slice::from_ref(wr), &[wqe], None)
            .map(drop)
    }
}
