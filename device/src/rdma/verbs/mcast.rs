//! `ATTACH_MCAST` and `DETACH_MCAST` (ABI 1.11, docs/hardware-interface.md §14.15): a UD
//! QP joins or leaves a multicast group ([`super::super::mcast`]).

use rnic_abi::cmd::Status;
use rnic_abi::mcast::{self, McastReq};

use super::decode;
use crate::rdma::error::VerbsError;
use crate::rdma::RdmaState;

impl RdmaState {
    /// Checks a multicast request: the group it names and its UD QP.
    fn mcast_request(&self, body: &[u8]) -> Result<([u8; 4], u32), VerbsError> {
        let req: McastReq = decode(body)?;
        if req.reserved != 0 {
            return Err(VerbsError::new(Status::BadParam, 4));
        }
        let group = mcast::group(&req.gid).ok_or(VerbsError::new(Status::BadParam, 8))?;
        if !self.qps.contains_key(&req.qpn) {
            return Err(VerbsError::new(Status::NotFound, req.qpn));
        }
        if self.ud.qkey(req.qpn).is_none() {
            return Err(VerbsError::new(Status::BadParam, 0));
        }
        Ok((group, req.qpn))
    }

    /// `ATTACH_MCAST`: the QP takes the group's packets from now on.
    pub(super) fn attach_mcast(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let (group, qpn) = self.mcast_request(body)?;
        self.mcast.attach(group, qpn)?;
        Ok(Vec::new())
    }

    /// `DETACH_MCAST`: the QP takes none of the group's packets any more.
    pub(super) fn detach_mcast(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let (group, qpn) = self.mcast_request(body)?;
        self.mcast.detach(group, qpn)?;
        Ok(Vec::new())
    }
}
