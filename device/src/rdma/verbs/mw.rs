//! The memory window commands (docs/hardware-interface.md §14.12): `ALLOC_MW` and
//! `DEALLOC_MW`. Windows are bound and invalidated by work requests
//! ([`crate::rdma::requester`]), not by commands.

use rnic_abi::cmd::Status;
use rnic_abi::mw::{AllocMwReq, AllocMwResp, MW_TYPE_1, MW_TYPE_2};
use rnic_abi::verbs::ObjectReq;

use super::{decode, reply};
use crate::rdma::error::VerbsError;
use crate::rdma::RdmaState;
use crate::resources::Resource;

impl RdmaState {
    /// `ALLOC_MW`: an unbound window of a PD, charged as one MR of the quota.
    pub(super) fn alloc_mw(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: AllocMwReq = decode(body)?;
        if req.mw_type != MW_TYPE_1 && req.mw_type != MW_TYPE_2 {
            return Err(VerbsError::new(Status::BadParam, u32::from(req.mw_type)));
        }
        if req.reserved != [0; 3] {
            return Err(VerbsError::new(Status::BadParam, 0));
        }
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        self.charge(Resource::Mr, 1)?;
        let Some(rkey) = self.mrs.windows.alloc(req.pdn, req.mw_type) else {
            self.release(Resource::Mr, 1);
            return Err(VerbsError::new(Status::NoResources, Resource::Mr.index()));
        };
        Ok(reply(&AllocMwResp { rkey, reserved: 0 }))
    }

    /// `DEALLOC_MW`: frees a window, bound or not; requests through it fail from now on.
    pub(super) fn dealloc_mw(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: ObjectReq = decode(body)?;
        self.mrs
            .windows
            .dealloc(req.handle)
            .ok_or(VerbsError::new(Status::NotFound, req.handle))?;
        self.release(Resource::Mr, 1);
        Ok(Vec::new())
    }
}
