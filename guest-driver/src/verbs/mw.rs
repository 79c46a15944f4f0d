//! Memory windows ([`rnic_abi::mw`]): rkeys of a PD that grant remote access to a range of
//! one of its regions, bound and unbound by work requests on a QP.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rnic_abi::cmd::Opcode;
use rnic_abi::mw::{AllocMwReq, AllocMwResp, MW_ACCESS_ALL, MW_TYPE_1, MW_TYPE_2};
use rnic_abi::regs;
use zerocopy::IntoBytes;

use super::mr::PdInner;
use super::{invalid, Mr, Pd, Qp, SendWr, WrOpcode};
use crate::error::{Error, Result};

pub use rnic_abi::mw::MW_KEY_BIT;

/// The key after `key` for the next bind of its window: the same window (index), the
/// next tag (the low byte), as ibverbs' `ibv_inc_rkey`.
pub fn inc_rkey(key: u32) -> u32 {
    (key & !0xff) | (key.wrapping_add(1) & 0xff)
}

/// What a bind gives a window: `length` bytes of `mr` from its address `addr` (in the
/// region's iova space, as [`Mr::addr`] gives it) with `access` ([`MW_ACCESS_ALL`] bits:
/// remote write, read, atomics, and zero-based for type 2), as `ibv_mw_bind_info`.
#[derive(Clone, Copy, Debug)]
pub struct BindInfo<'m> {
    /// The region (of the window's PD, registered with `ACCESS_MW_BIND`); `None` with
    /// `length` 0 unbinds a type 1 window.
    pub mr: Option<&'m Mr>,
    /// Where the window starts.
    pub addr: u64,
    /// Bytes of the window.
    pub length: u64,
    /// Its rights.
    pub access: u32,
}

/// A memory window of type 1 or 2. It grants nothing until a bind
/// ([`Qp::post_bind_mw`]). Deallocated on drop (bound or not).
pub struct MemoryWindow {
    pd: Arc<PdInner>,
    mw_type: u8,
    /// The key of the last bind posted (the allocation's until then).
    rkey: AtomicU32,
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("pdn", &self.pd.pdn())
            .field("type", &self.mw_type)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

impl Pd {
    /// Allocates a memory window of `mw_type` ([`MW_TYPE_1`] or [`MW_TYPE_2`]).
    pub fn alloc_mw(&self, mw_type: u8) -> Result<MemoryWindow> {
        let ctx = self.inner.ctx();
        if ctx.attr.caps & regs::CAP_MW == 0 {
            return Err(Error::Unsupported(
                "memory windows: the device does not report CAP_MW (an rnicd older than ABI 1.6?)",
            ));
        }
        if mw_type != MW_TYPE_1 && mw_type != MW_TYPE_2 {
            return Err(invalid(format!(
                "alloc_mw: type {mw_type} (1 or 2 allowed)"
            )));
        }
        let req = AllocMwReq {
            pdn: self.pdn(),
            mw_type,
            reserved: [0; 3],
        };
        let resp: AllocMwResp = ctx.command(Opcode::AllocMw, req.as_bytes())?;
        Ok(MemoryWindow {
            pd: self.inner.clone(),
            mw_type,
            rkey: AtomicU32::new(resp.rkey),
        })
    }
}

impl MemoryWindow {
    /// The window's key as the last bind posted set it (before any bind, the key
    /// `ALLOC_MW` gave, with tag 0).
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    /// Records `key` as the window's key: what a bind posted without
    /// [`Qp::post_bind_mw`] (a chain of [`WrOpcode::BindMw`]) set.
    pub fn set_rkey(&self, key: u32) {
        self.rkey.store(key, Ordering::Release);
    }

    /// [`MW_TYPE_1`] or [`MW_TYPE_2`].
    pub fn mw_type(&self) -> u8 {
        self.mw_type
    }

    /// The PD's number.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn()
    }

    /// The bind operation that gives the window `info` under key `new_key` (same window,
    /// any tag; [`inc_rkey`] of [`MemoryWindow::rkey`] is what ibverbs uses).
    pub fn bind_opcode(&self, new_key: u32, info: &BindInfo<'_>) -> WrOpcode {
        WrOpcode::BindMw {
            mw_key: self.rkey(),
            new_key,
            mr_lkey: info.mr.map_or(0, Mr::lkey),
            addr: info.addr,
            length: info.length,
            access: info.access,
        }
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // Nothing of the driver's to protect if this fails: a window owns no memory.
        let _ = self
            .pd
            .ctx()
            .destroy(Opcode::DeallocMw, self.rkey(), "memory window");
    }
}

impl Qp {
    /// Posts a bind of `mw` to `info` under the next key ([`inc_rkey`] of its key), as
    /// ibverbs' `ibv_bind_mw` does, and records that key in `mw` once posted; returns
    /// it. The bind completes as any WR (`WcOpcode::BindMw` when `signaled`); a failed
    /// bind (`MW_BIND_ERR`) leaves the window as it was, and the caller should then set
    /// its key back ([`MemoryWindow::set_rkey`]).
    pub fn post_bind_mw(
        &self,
        wr_id: u64,
        mw: &MemoryWindow,
        info: &BindInfo<'_>,
        signaled: bool,
    ) -> Result<u32> {
        if info.access & !MW_ACCESS_ALL != 0 {
            return Err(invalid(format!(
                "bind_mw: access {:#x} (remote write, read, atomic and zero-based only)",
                info.access
            )));
        }
        let new_key = inc_rkey(mw.rkey());
        let wr = SendWr {
            wr_id,
            opcode: mw.bind_opcode(new_key, info),
            signaled,
            ..SendWr::default()
        };
        self.post_send(&wr)?;
        mw.set_rkey(new_key);
        Ok(new_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_key_changes_the_tag_only() {
        assert_eq!(inc_rkey(0x4000_0100), 0x4000_0101);
        assert_eq!(inc_rkey(0x4000_01ff), 0x4000_0100);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }
}
