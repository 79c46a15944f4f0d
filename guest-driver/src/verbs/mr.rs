//! Protection domains and memory regions.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rnic_abi::cmd::Opcode;
use rnic_abi::verbs::{ObjectReq, ObjectResp, PageList, RegMrReq, RegMrResp, Sge};
use zerocopy::IntoBytes;

use super::ring::{covered_pages, PageListBuf};
use super::{Binding, ContextInner};
use crate::error::Result;
use crate::transport::DmaBuffer;

/// A protection domain: the MRs and QPs created from it may be used together.
///
/// Deallocated on drop, once the last MR and QP created from it is gone.
#[derive(Debug)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

/// What MRs and QPs keep alive of their PD.
pub(crate) struct PdInner {
    /// Context and PD number (they change if the PD follows a migrated QP).
    pub(crate) bind: Binding,
}

impl PdInner {
    pub(crate) fn ctx(&self) -> Arc<ContextInner> {
        self.bind.ctx()
    }

    pub(crate) fn pdn(&self) -> u32 {
        self.bind.num()
    }
}

impl std::fmt::Debug for PdInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("pdn", &self.pdn()).finish()
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // A failure only leaks a number on the device; there is no memory to protect.
        let _ = self
            .ctx()
            .destroy(Opcode::DeallocPd, self.pdn(), "protection domain");
    }
}

impl Pd {
    pub(crate) fn alloc(ctx: &Arc<ContextInner>) -> Result<Pd> {
        let resp: ObjectResp = ctx.command(Opcode::AllocPd, &[])?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                bind: Binding::new(ctx.clone(), resp.handle, Default::default()),
            }),
        })
    }

    /// The PD's number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn()
    }

    /// Registers `len` bytes of `buf` starting at `offset` for `access` (`ACCESS_*`).
    ///
    /// The region's iova, the address work requests and remote peers use for its first
    /// byte, is the device address of that byte (`buf.device_addr(offset)`): like the
    /// virtual address ibverbs uses, it is unique to the memory and has the byte's offset
    /// within its page, which the device requires. The MR holds `buf`, so the memory cannot
    /// be freed while the device may reach it.
    pub fn reg_mr(
        &self,
        buf: Arc<DmaBuffer>,
        offset: usize,
        len: usize,
        access: u32,
    ) -> Result<Mr> {
        let iova = if offset <= buf.len() {
            buf.device_addr(offset)
        } else {
            0
        };
        self.reg_mr_iova(buf, offset, len, iova, access)
    }

    /// Registers `len` bytes of `buf` starting at `offset` for `access` (`ACCESS_*`), as
    /// [`Pd::reg_mr`] does, with the region's first byte at address `iova` in work
    /// requests and at remote peers: what ibverbs does, where the iova of a region is the
    /// application's virtual address ([`Transport::map_user_memory`] gives the
    /// buffer) or one it chose (`ibv_reg_mr_iova2`). The device requires `iova` to have
    /// the same offset within its 4 KiB page as the region's first byte.
    ///
    /// [`Transport::map_user_memory`]: crate::transport::Transport::map_user_memory
    pub fn reg_mr_iova(
        &self,
        buf: Arc<DmaBuffer>,
        offset: usize,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<Mr> {
        let end = offset.checked_add(len);
        if len == 0 || end.is_none_or(|end| end > buf.len()) {
            return Err(super::invalid(format!(
                "reg_mr: {len} bytes at offset {offset} of a {}-byte buffer",
                buf.len()
            )));
        }
        let page = rnic_abi::PAGE_SIZE;
        if iova % page != buf.device_addr(offset) % page {
            return Err(super::invalid(format!(
                "reg_mr: iova {iova:#x} is at another offset within its page than the region's first byte ({:#x})",
                buf.device_addr(offset) % page
            )));
        }
        if iova.checked_add(len as u64).is_none() {
            return Err(super::invalid(format!(
                "reg_mr: {len} bytes at iova {iova:#x} wrap around"
            )));
        }
        let ctx = &self.inner.ctx();
        let pages = PageListBuf::new(
            ctx.transport(),
            &buf.pages()[covered_pages(offset, len)],
            ctx.list_kinds(),
        )?;
        let req = RegMrReq {
            pdn: self.inner.pdn(),
            access,
            iova,
            length: len as u64,
            pages: pages.list(),
        };
        let resp: RegMrResp = ctx.command(Opcode::RegMr, req.as_bytes())?;
        let mut mr = Mr::from_parts(
            self.inner.clone(),
            buf,
            offset,
            len,
            iova,
            access,
            resp.lkey,
            pages,
        );
        mr.rkey = resp.rkey;
        Ok(mr)
    }
}

impl Mr {
    /// An MR registered (or, through a control queue, being registered) under `key`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        pd: Arc<PdInner>,
        buf: Arc<DmaBuffer>,
        offset: usize,
        len: usize,
        iova: u64,
        access: u32,
        key: u32,
        pages: PageListBuf,
    ) -> Mr {
        Mr {
            pd,
            buf,
            offset,
            len,
            iova,
            access,
            lkey: key,
            rkey: key,
            pages: ManuallyDrop::new(pages),
            deregistered: AtomicBool::new(false),
        }
    }
}

/// A registered memory region. Deregistered on drop.
pub struct Mr {
    pd: Arc<PdInner>,
    buf: Arc<DmaBuffer>,
    offset: usize,
    len: usize,
    iova: u64,
    access: u32,
    lkey: u32,
    rkey: u32,
    /// Freed only after DEREG_MR succeeded.
    pages: ManuallyDrop<PageListBuf>,
    /// Set once [`Mr::dereg`] succeeded: dropping the MR then only frees its memory.
    deregistered: AtomicBool,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("pdn", &self.pd.pdn())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("access", &format_args!("{:#x}", self.access))
            .finish()
    }
}

impl Mr {
    /// The local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key, for peers' RDMA and atomics.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The address of the region's first byte in work requests and at remote peers.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The address of byte `offset` of the region.
    pub fn addr(&self, offset: usize) -> u64 {
        self.iova + offset as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration needs at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `ACCESS_*` flags it was registered with.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// The page list the region was registered with: a flat array, or a page table where
    /// a flat array would not have been contiguous for the device (§7.3).
    pub fn page_list(&self) -> PageList {
        self.pages.list()
    }

    /// The PD's number.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn()
    }

    /// The registered buffer (the region starts at [`Mr::offset`] of it).
    pub fn buffer(&self) -> &Arc<DmaBuffer> {
        &self.buf
    }

    /// Where the region starts in [`Mr::buffer`].
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// An SGE for `len` bytes at `offset` of the region.
    ///
    /// # Panics
    /// If the range is not inside the region, or `len` does not fit an SGE's u32.
    pub fn sge(&self, offset: usize, len: usize) -> Sge {
        self.check(offset, len);
        Sge {
            addr: self.addr(offset),
            length: u32::try_from(len).expect("an SGE holds at most 4 GiB - 1"),
            lkey: self.lkey,
        }
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Panics
    /// If the range is not inside the region.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        self.buf.write(self.offset + offset, data);
    }

    /// Copies bytes at `offset` of the region into `out`.
    ///
    /// # Panics
    /// If the range is not inside the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        self.buf.read(self.offset + offset, out);
    }

    /// Deregisters the region now, and says why the device refused if it did: `BUSY`
    /// while an indirect or pattern key names the region or a memory window is bound to
    /// it (ibverbs' `EBUSY` from `ibv_dereg_mr`). The region then stays registered and
    /// usable. On success its keys are gone at once, and dropping the `Mr` only frees
    /// its memory; dropping an `Mr` that was not deregistered so deregisters it then,
    /// logging a failure.
    pub fn dereg(&self) -> Result<()> {
        if self.deregistered.load(Ordering::Acquire) {
            return Ok(());
        }
        let req = ObjectReq {
            handle: self.lkey,
            reserved: 0,
        };
        match self
            .pd
            .ctx()
            .command_no_body(Opcode::DeregMr, req.as_bytes())
        {
            Ok(()) => {}
            // A lost function took its regions with it.
            Err(e) if e.function_lost() => {}
            Err(e) => return Err(e),
        }
        self.deregistered.store(true, Ordering::Release);
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "{len} bytes at offset {offset} are outside a {}-byte memory region",
            self.len
        );
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: `pages` is not used again: this is the last use of `self`.
        let pages = unsafe { ManuallyDrop::take(&mut self.pages) };
        if !self.deregistered.load(Ordering::Acquire)
            && self
                .pd
                .ctx()
                .destroy(Opcode::DeregMr, self.lkey, "memory region")
                .is_err()
        {
            // The device may still reach the region: never free its memory.
            std::mem::forget(pages);
            std::mem::forget(self.buf.clone());
        }
    }
}
