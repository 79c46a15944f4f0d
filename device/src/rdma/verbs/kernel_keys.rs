//! The commands of the kernel's memory keys (docs/hardware-interface.md §16,
//! [`crate::rdma::mkey::fast_reg`]): `REG_DMA_MR`, `ALLOC_FAST_REG_MR`, and `DEREG_MR` of
//! what they made. REG_MR work requests run in the requester.

use rnic_abi::cmd::Status;
use rnic_abi::fast_reg::{AllocFastRegMrReq, RegDmaMrReq, MAX_FAST_REG_PAGES};
use rnic_abi::verbs::{RegMrResp, ACCESS_ALL, ACCESS_LOCAL_WRITE};

use super::{check_mr_access, decode, reply};
use crate::rdma::error::VerbsError;
use crate::rdma::mkey::fast_reg::{DmaKey, FastRegSlot};
use crate::rdma::RdmaState;
use crate::resources::Resource;

/// The response of a command that made `key`: the same key as lkey and rkey.
fn key_reply(key: u32) -> Vec<u8> {
    reply(&RegMrResp {
        lkey: key,
        rkey: key,
    })
}

impl RdmaState {
    /// `REG_DMA_MR`: the DMA key of a PD, charged as one MR of the quota.
    pub(super) fn reg_dma_mr(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: RegDmaMrReq = decode(body)?;
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        check_mr_access(req.access, ACCESS_ALL)?;
        if req.access & ACCESS_LOCAL_WRITE == 0 {
            return Err(VerbsError::new(Status::BadParam, req.access));
        }
        self.charge(Resource::Mr, 1)?;
        let dma = DmaKey {
            pdn: req.pdn,
            access: req.access,
        };
        let Some(key) = self.mrs.insert_dma(dma) else {
            self.release(Resource::Mr, 1);
            return Err(VerbsError::new(Status::NoResources, Resource::Mr.index()));
        };
        Ok(key_reply(key))
    }

    /// `ALLOC_FAST_REG_MR`: a free fast-registration MR, charged as one MR and its
    /// `max_pages` pages of the quota (a REG_MR WQE then never needs more).
    pub(super) fn alloc_fast_reg_mr(&mut self, body: &[u8]) -> Result<Vec<u8>, VerbsError> {
        let req: AllocFastRegMrReq = decode(body)?;
        if !self.pds.contains_key(&req.pdn) {
            return Err(VerbsError::new(Status::NotFound, req.pdn));
        }
        if req.max_pages == 0 || req.max_pages > MAX_FAST_REG_PAGES {
            return Err(VerbsError::new(Status::BadParam, req.max_pages));
        }
        let pages = u64::from(req.max_pages);
        self.charge(Resource::MrPages, pages)?;
        if let Err(e) = self.charge(Resource::Mr, 1) {
            self.release(Resource::MrPages, pages);
            return Err(e);
        }
        let slot = FastRegSlot {
            pdn: req.pdn,
            max_pages: req.max_pages,
        };
        let Some(key) = self.mrs.insert_fast_reg(slot) else {
            self.release(Resource::MrPages, pages);
            self.release(Resource::Mr, 1);
            return Err(VerbsError::new(Status::NoResources, Resource::Mr.index()));
        };
        Ok(key_reply(key))
    }

    /// `DEREG_MR` of `key` if it is a DMA key or names a fast-registration MR (by its
    /// index, whatever the tag); `Ok(false)` if it is neither. A fast-registration MR
    /// that an indirect key or a bound memory window names is `BUSY`, as a region is.
    pub(super) fn dereg_kernel_key(&mut self, key: u32) -> Result<bool, VerbsError> {
        if self.mrs.remove_dma(key) {
            self.release(Resource::Mr, 1);
            return Ok(true);
        }
        let Some((current, _)) = self.mrs.fast_reg(key) else {
            return Ok(false);
        };
        if self.mrs.indirect.references(current) || self.mrs.windows.bound_to(current) {
            return Err(VerbsError::new(Status::Busy, key));
        }
        if let Some(slot) = self.mrs.remove_fast_reg(key) {
            self.release(Resource::MrPages, u64::from(slot.max_pages));
            self.release(Resource::Mr, 1);
        }
        Ok(true)
    }
}
