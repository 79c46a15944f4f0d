//! Indirect and pattern memory keys ([`rnic_abi::mkey`]): one key over ranges of several
//! MRs, or over a strided pattern in one MR.

use std::marker::PhantomData;
use std::sync::Arc;

use rnic_abi::cmd::Opcode;
use rnic_abi::mkey::{
    CreateIndirectKeyReq, CreatePatternKeyReq, KEY_ONE_SHOT_READ, MAX_INDIRECT_ENTRIES,
};
use rnic_abi::regs;
use rnic_abi::verbs::{RegMrResp, Sge, ACCESS_REMOTE_READ};
use zerocopy::IntoBytes;

use super::mr::PdInner;
use super::{invalid, Mr, Pd};
use crate::error::{Error, Result};

/// One range of an indirect key: `len` bytes at `offset` of `mr`.
#[derive(Debug, Clone, Copy)]
pub struct KeyRange<'m> {
    /// The region.
    pub mr: &'m Mr,
    /// Where the range starts in the region.
    pub offset: usize,
    /// Its length (at least 1 byte).
    pub len: usize,
}

/// An indirect or pattern key. Zero-based: byte `o` of the key is at address `o` in work
/// requests and at remote peers. It borrows the MRs it maps onto, because the device
/// refuses to deregister them while the key exists. Destroyed on drop.
pub struct MemoryKey<'m> {
    pd: Arc<PdInner>,
    key: u32,
    len: u64,
    access: u32,
    _regions: PhantomData<&'m Mr>,
}

impl std::fmt::Debug for MemoryKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryKey")
            .field("pdn", &self.pd.pdn())
            .field("key", &format_args!("{:#x}", self.key))
            .field("len", &self.len)
            .field("access", &format_args!("{:#x}", self.access))
            .finish()
    }
}

impl Pd {
    /// Creates an indirect key with `access` (`ACCESS_*`) over `ranges`, laid back to
    /// back: the key's first byte is the first range's first byte. The regions must be
    /// of this PD; what a remote peer may do through the key is what both the key's and
    /// each region's flags allow.
    pub fn create_indirect_key<'m>(
        &self,
        access: u32,
        ranges: &[KeyRange<'m>],
    ) -> Result<MemoryKey<'m>> {
        self.create_list_key(access, ranges, 0)
    }

    /// Creates a one-shot READ grant over `ranges` (laid out as
    /// [`Pd::create_indirect_key`] does): its rkey lets a remote peer do exactly one RDMA
    /// READ; the next READ through it fails with `REM_ACCESS_ERR`, and nothing else was
    /// ever allowed.
    pub fn create_one_shot_read_key<'m>(&self, ranges: &[KeyRange<'m>]) -> Result<MemoryKey<'m>> {
        if self.inner.ctx().attr.caps & regs::CAP_ONE_SHOT_READ == 0 {
            return Err(Error::Unsupported(
                "one-shot READ grants: the device does not report CAP_ONE_SHOT_READ (an rnicd older than ABI 1.3?)",
            ));
        }
        self.create_list_key(ACCESS_REMOTE_READ, ranges, KEY_ONE_SHOT_READ)
    }

    fn create_list_key<'m>(
        &self,
        access: u32,
        ranges: &[KeyRange<'m>],
        flags: u32,
    ) -> Result<MemoryKey<'m>> {
        if ranges.is_empty() || ranges.len() > MAX_INDIRECT_ENTRIES as usize {
            return Err(invalid(format!(
                "create_indirect_key: {} ranges (1 to {MAX_INDIRECT_ENTRIES} allowed)",
                ranges.len()
            )));
        }
        let entries = ranges
            .iter()
            .map(|r| range_sge(r.mr, r.offset, r.len))
            .collect::<Result<Vec<Sge>>>()?;
        let req = CreateIndirectKeyReq {
            pdn: self.pdn(),
            access,
            num_entries: entries.len() as u32,
            flags,
        };
        let mut body = req.as_bytes().to_vec();
        body.extend_from_slice(entries.as_bytes());
        let len = ranges.iter().map(|r| r.len as u64).sum();
        self.create_key(
            regs::CAP_INDIRECT_MKEY,
            Opcode::CreateIndirectKey,
            &body,
            len,
            access,
        )
    }

    /// Creates a pattern key with `access`: `repeat` blocks of `byte_count` bytes, the
    /// first at `offset` of `base` and each next one `stride` bytes further. Byte `o` of
    /// the key is byte `offset + (o / byte_count) * stride + o % byte_count` of `base`.
    pub fn create_pattern_key<'m>(
        &self,
        access: u32,
        base: &'m Mr,
        offset: usize,
        byte_count: u32,
        stride: u64,
        repeat: u32,
    ) -> Result<MemoryKey<'m>> {
        let span = stride
            .checked_mul(u64::from(repeat).saturating_sub(1))
            .and_then(|s| s.checked_add(u64::from(byte_count)))
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| invalid("create_pattern_key: the pattern spans too far".into()))?;
        let first = range_sge(base, offset, span)?;
        let req = CreatePatternKeyReq {
            pdn: self.pdn(),
            access,
            base_addr: first.addr,
            base_key: first.lkey,
            byte_count,
            stride,
            repeat,
            reserved: 0,
        };
        let len = u64::from(byte_count) * u64::from(repeat);
        self.create_key(
            regs::CAP_PATTERN_MKEY,
            Opcode::CreatePatternKey,
            req.as_bytes(),
            len,
            access,
        )
    }

    fn create_key<'m>(
        &self,
        cap: u64,
        op: Opcode,
        body: &[u8],
        len: u64,
        access: u32,
    ) -> Result<MemoryKey<'m>> {
        let ctx = self.inner.ctx();
        if ctx.attr.caps & cap == 0 {
            return Err(Error::Unsupported(
                "memory keys: the device does not report CAP_INDIRECT_MKEY/CAP_PATTERN_MKEY (an rnicd older than ABI 1.3?)",
            ));
        }
        let resp: RegMrResp = ctx.command(op, body)?;
        Ok(MemoryKey {
            pd: self.inner.clone(),
            key: resp.lkey,
            len,
            access,
            _regions: PhantomData,
        })
    }
}

/// The SGE of `len` bytes at `offset` of `mr`, or an error if they are not all in it.
fn range_sge(mr: &Mr, offset: usize, len: usize) -> Result<Sge> {
    if len == 0 || offset.checked_add(len).is_none_or(|end| end > mr.len()) {
        return Err(invalid(format!(
            "memory key: {len} bytes at offset {offset} of a {}-byte memory region",
            mr.len()
        )));
    }
    Ok(Sge {
        addr: mr.addr(offset),
        length: u32::try_from(len)
            .map_err(|_| invalid("memory key: a range holds at most 4 GiB - 1".into()))?,
        lkey: mr.lkey(),
    })
}

impl MemoryKey<'_> {
    /// The key, for local SGEs.
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The key, for remote peers (the same number).
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// Bytes the key covers (its addresses are `0..len`).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it covers nothing (never: creation needs a byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key's `ACCESS_*` flags.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// An SGE for `len` bytes at `offset` of the key.
    ///
    /// # Panics
    /// If the range is not inside the key, or `len` does not fit an SGE's u32.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        assert!(
            offset
                .checked_add(u64::from(len))
                .is_some_and(|end| end <= self.len),
            "{len} bytes at offset {offset} are outside a {}-byte memory key",
            self.len
        );
        Sge {
            addr: offset,
            length: len,
            lkey: self.key,
        }
    }
}

impl Drop for MemoryKey<'_> {
    fn drop(&mut self) {
        // Nothing of the driver's to protect if this fails: the key owns no memory.
        let _ = self
            .pd
            .ctx()
            .destroy(Opcode::DeregMr, self.key, "memory key");
    }
}
