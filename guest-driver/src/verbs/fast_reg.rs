//! The kernel's memory keys ([`rnic_abi::fast_reg`], ABI 1.8): a PD's DMA key
//! ([`Pd::reg_dma_mr`]), fast-registration MRs ([`Pd::alloc_fast_reg_mr`]) registered by
//! REG_MR work requests ([`Qp::post_reg_mr`]), and the GSI QP ([`Pd::create_gsi_qp`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rnic_abi::cmd::Opcode;
use rnic_abi::fast_reg::{AllocFastRegMrReq, RegDmaMrReq};
use rnic_abi::regs;
use rnic_abi::ud::{GSI_QKEY, QPT_GSI};
use rnic_abi::verbs::{RegMrResp, Sge};
use zerocopy::IntoBytes;

use super::mr::PdInner;
use super::{inc_rkey, Cq, Pd, Qp, QpCaps, SendWr, WrOpcode};
use crate::error::{Error, Result};

pub use rnic_abi::fast_reg::MAX_FAST_REG_PAGES;
pub use rnic_abi::ud::GSI_QPN;

/// A PD's DMA key: its byte `a` is device address `a`, for any memory the function's
/// DMA reaches (the kernel's `pd->local_dma_lkey`, and with remote rights its unsafe
/// global rkey). Destroyed on drop.
pub struct DmaKey {
    pd: Arc<PdInner>,
    key: u32,
    access: u32,
}

impl std::fmt::Debug for DmaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaKey")
            .field("pdn", &self.pd.pdn())
            .field("key", &format_args!("{:#x}", self.key))
            .field("access", &format_args!("{:#x}", self.access))
            .finish()
    }
}

/// What a REG_MR work request registers ([`WrOpcode::RegMr`] without its key): `length`
/// bytes at `iova`, on the `page_count` 4 KiB pages whose device addresses are the
/// little-endian u64s at device address `page_list` (byte `iova` is byte `iova % 4096`
/// of the first page), with `access`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastReg {
    /// The region's address in work requests and at remote peers.
    pub iova: u64,
    /// Bytes of the region.
    pub length: u64,
    /// `ACCESS_*` flags.
    pub access: u32,
    /// Device address of the page list.
    pub page_list: u64,
    /// Pages in the list.
    pub page_count: u32,
}

/// A fast-registration MR: room for `max_pages` pages, registered by REG_MR work
/// requests and freed by LOCAL_INV or SEND with invalidate. Deregistered on drop.
pub struct FastRegMr {
    pd: Arc<PdInner>,
    max_pages: u32,
    /// The key of the last registration posted (the allocation's, tag 0, until then).
    key: AtomicU32,
}

impl std::fmt::Debug for FastRegMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastRegMr")
            .field("pdn", &self.pd.pdn())
            .field("key", &format_args!("{:#x}", self.key()))
            .field("max_pages", &self.max_pages)
            .finish()
    }
}

impl Pd {
    /// Fails unless the device reports `CAP_FAST_REG`.
    fn check_fast_reg(&self) -> Result<()> {
        if self.inner.ctx().attr.caps & regs::CAP_FAST_REG == 0 {
            return Err(Error::Unsupported(
                "kernel memory keys: the device does not report CAP_FAST_REG (an rnicd older than ABI 1.8?)",
            ));
        }
        Ok(())
    }

    /// Registers the PD's DMA key with `access`: `ACCESS_LOCAL_WRITE`, and the remote
    /// rights to give any peer that holds the key over all of the function's memory.
    pub fn reg_dma_mr(&self, access: u32) -> Result<DmaKey> {
        self.check_fast_reg()?;
        let req = RegDmaMrReq {
            pdn: self.pdn(),
            access,
        };
        let ctx = self.inner.ctx();
        let resp: RegMrResp = ctx.command(Opcode::RegDmaMr, req.as_bytes())?;
        Ok(DmaKey {
            pd: self.inner.clone(),
            key: resp.lkey,
            access,
        })
    }

    /// Allocates a fast-registration MR for up to `max_pages` pages
    /// (1 ..= [`MAX_FAST_REG_PAGES`]), free.
    pub fn alloc_fast_reg_mr(&self, max_pages: u32) -> Result<FastRegMr> {
        self.check_fast_reg()?;
        let req = AllocFastRegMrReq {
            pdn: self.pdn(),
            max_pages,
        };
        let ctx = self.inner.ctx();
        let resp: RegMrResp = ctx.command(Opcode::AllocFastRegMr, req.as_bytes())?;
        Ok(FastRegMr {
            pd: self.inner.clone(),
            max_pages,
            key: AtomicU32::new(resp.lkey),
        })
    }

    /// Creates the function's GSI QP (QP [`GSI_QPN`]), in RESET: a UD QP in all but its
    /// number. Bring it up with [`Qp::ud_ready`] and [`GSI_QKEY`]
    /// ([`Qp::gsi_ready`]). A function has one: a second fails with `BUSY`.
    pub fn create_gsi_qp(&self, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Qp> {
        if self.inner.ctx().attr.caps & regs::CAP_GSI == 0 {
            return Err(Error::Unsupported(
                "the GSI QP: the device does not report CAP_GSI (an rnicd older than ABI 1.8?)",
            ));
        }
        let caps = caps.for_srq(false);
        self.create_qp_on(send_cq, recv_cq, caps, false, None, QPT_GSI)
    }
}

impl DmaKey {
    /// The key, as lkey.
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The key, as rkey (with remote rights only).
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The `ACCESS_*` flags it was registered with.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// An SGE for `length` bytes at device address `addr`.
    pub fn sge(&self, addr: u64, length: u32) -> Sge {
        Sge {
            addr,
            length,
            lkey: self.key,
        }
    }
}

impl Drop for DmaKey {
    fn drop(&mut self) {
        // A DMA key owns no memory: a failure leaks only the key.
        let _ = self.pd.ctx().destroy(Opcode::DeregMr, self.key, "DMA key");
    }
}

impl FastRegMr {
    /// The key of the last registration posted ([`Qp::post_reg_mr`]); before any, the
    /// allocation's (tag 0).
    pub fn key(&self) -> u32 {
        self.key.load(Ordering::Acquire)
    }

    /// Records `key` as the MR's key: what a registration posted without
    /// [`Qp::post_reg_mr`] (a [`WrOpcode::RegMr`] of its own) set.
    pub fn set_key(&self, key: u32) {
        self.key.store(key, Ordering::Release);
    }

    /// Pages a registration may have.
    pub fn max_pages(&self) -> u32 {
        self.max_pages
    }

    /// The PD's number.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn()
    }

    /// The REG_MR operation that registers `reg` under `new_key` (same index, any tag;
    /// [`inc_rkey`] of [`FastRegMr::key`] is what the kernel's `ib_inc_rkey` gives).
    pub fn reg_opcode(&self, new_key: u32, reg: &FastReg) -> WrOpcode {
        WrOpcode::RegMr {
            key: new_key,
            iova: reg.iova,
            length: reg.length,
            access: reg.access,
            page_list: reg.page_list,
            page_count: reg.page_count,
        }
    }
}

impl Drop for FastRegMr {
    fn drop(&mut self) {
        // The device never writes the page list, only reads it when a WQE runs: a
        // failure leaks only the MR.
        let _ = self
            .pd
            .ctx()
            .destroy(Opcode::DeregMr, self.key(), "fast-registration MR");
    }
}

impl Qp {
    /// Posts a REG_MR of `mr` with `reg` under the next key ([`inc_rkey`] of its key) and
    /// records that key in `mr`; returns it. It completes as any WR (`WcOpcode::RegMr`
    /// when `signaled`); a failed one (`LOC_QP_OP_ERR`, the QP in error) leaves the MR
    /// as it was, and the caller should then set its key back ([`FastRegMr::set_key`]).
    pub fn post_reg_mr(
        &self,
        wr_id: u64,
        mr: &FastRegMr,
        reg: &FastReg,
        signaled: bool,
    ) -> Result<u32> {
        let new_key = inc_rkey(mr.key());
        let wr = SendWr {
            wr_id,
            opcode: mr.reg_opcode(new_key, reg),
            signaled,
            ..SendWr::default()
        };
        self.post_send(&wr)?;
        mr.set_key(new_key);
        Ok(new_key)
    }

    /// [`Qp::ud_ready`] of the GSI QP: with [`GSI_QKEY`].
    pub fn gsi_ready(&self, sq_psn: u32) -> Result<()> {
        self.ud_ready(GSI_QKEY, sq_psn)
    }
}
