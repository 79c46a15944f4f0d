//! The logic of `rnic-features`: self-checking scenarios of the advanced transport and
//! memory-key features between two functions of one guest (docs/hardware-interface.md
//! §14; README, "Advanced verbs"), for a VM (two
//! PCI functions) and for the host (two vfio-user functions sharing one memory, as two VFs
//! of one VM do). The host tests (tests/tests/dc.rs, memory_keys.rs, features.rs) drive the
//! same code.
//!
//! * [`Scenario::Dc`]: one DC initiator on function A, three DC targets on function B with
//!   distinct keys; SENDs and RDMA WRITEs interleaved across the targets, then READs back
//!   ([`dc_exercise`]); then a WR with a wrong DC key ([`dc_wrong_key`]).
//! * [`Scenario::IndirectKeys`]: an indirect key over three regions of B as the rkey of a WRITE
//!   (scatter) and a READ (gather), a pattern key gathering strided data, and a WRITE past
//!   the indirect key's end that must fail and leave every guard byte as it was.
//! * [`dma_isolation_exercise`]: what an IOMMU keeps from the device (a guest with one,
//!   the functions driven through VFIO): registering a page at an IOVA this process never
//!   mapped fails with DMA_ERROR, in the writable and the read-only view; the
//!   application's own heap buffer, registered in place (`map_user_memory`), receives an
//!   RDMA WRITE byte for byte with its neighbours untouched, and once given back its IOVA
//!   is refused again; registering another process's page by its guest-physical address
//!   (a child process, [`hold_secret`], keeps secret bytes there) fails with DMA_ERROR.
//!   Where the device accepts that page (no IOMMU: the page map), the scenario READs it
//!   and fails, saying whether the secret came back.
//!
//! Each check reports one line (`ok: ...`) through a callback; the first failed check ends
//! the scenario with a [`FeatureError`] naming it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rnic_driver::transport::sysfs::SysfsTransport;
use rnic_driver::transport::Transport;
use rnic_driver::verbs::{
    self, Context, Cq, DcAddress, KeyRange, Mr, Pd, Qp, QpCaps, RecvWr, SendWr, Sge, Wc, WcOpcode,
    WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rnic_driver::Device;

use crate::error::{drv, ToolError};
pub use crate::error::{Result, ToolError as FeatureError};
use crate::open;

/// Counts checks and reports each passed one through `say`.
pub struct Checks<'s> {
    say: &'s mut dyn FnMut(&str),
    passed: usize,
}

impl<'s> Checks<'s> {
    /// Checks reported through `say`.
    pub fn new(say: &'s mut dyn FnMut(&str)) -> Self {
        Self { say, passed: 0 }
    }

    /// Records check `what`: passed if `ok`, else an error naming it and `detail`.
    pub fn check(&mut self, what: &str, ok: bool, detail: impl FnOnce() -> String) -> Result<()> {
        if !ok {
            return Err(ToolError(format!("check failed: {what}: {}", detail())));
        }
        self.passed += 1;
        (self.say)(&format!("ok: {what}"));
        Ok(())
    }

    /// Checks passed so far.
    pub fn passed(&self) -> usize {
        self.passed
    }
}

/// What a scenario needs of one function: its context, a PD, a CQ, a registered buffer
/// and the function's GID.
#[derive(Clone, Copy)]
pub struct Endpoint<'a> {
    /// The device context.
    pub ctx: &'a Context,
    /// The protection domain every object is made in.
    pub pd: &'a Pd,
    /// Where completions go.
    pub cq: &'a Cq,
    /// A registered buffer (local and remote write, remote read).
    pub mr: &'a Mr,
    /// The function's GID.
    pub gid: [u8; 16],
}

/// Polls `cq` until `n` completions arrived or `timeout` passed; returns what came (a
/// lost function ends it early: see [`poll_wcs`]).
pub fn poll_n(cq: &Cq, n: usize, timeout: Duration) -> Vec<Wc> {
    let mut got = Vec::new();
    if let Err(e) = poll_into(cq, n, timeout, &mut got) {
        log::warn!("polling a CQ: {e}");
    }
    got
}

/// [`poll_n`] that fails, within a poll round, when the CQ's function is lost (rnicd
/// gone, or the function reset under the driver) instead of waiting out `timeout`.
pub fn poll_wcs(cq: &Cq, n: usize, timeout: Duration) -> Result<Vec<Wc>> {
    let mut got = Vec::new();
    poll_into(cq, n, timeout, &mut got).map_err(drv("wait for completions"))?;
    Ok(got)
}

/// Polls `cq` into `got` until it holds `n` completions or `timeout` passed.
fn poll_into(cq: &Cq, n: usize, timeout: Duration, got: &mut Vec<Wc>) -> rnic_driver::Result<()> {
    let start = Instant::now();
    while got.len() < n && start.elapsed() < timeout {
        let batch = cq.poll(n - got.len());
        if batch.is_empty() {
            cq.check_alive()?;
            std::thread::sleep(Duration::from_micros(50));
        }
        got.extend(batch);
    }
    Ok(())
}

/// A signaled send work request.
pub fn signaled(wr_id: u64, opcode: WrOpcode, sges: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id,
        opcode,
        sges,
        signaled: true,
        ..SendWr::default()
    }
}

/// `len` bytes of `mr` from `offset`.
pub fn read_mr(mr: &Mr, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    mr.read(offset, &mut out);
    out
}

/// Every byte of `mr`'s whole buffer (region and guards).
pub fn buffer_bytes(mr: &Mr) -> Vec<u8> {
    let mut out = vec![0u8; mr.buffer().len()];
    mr.buffer().read(0, &mut out);
    out
}

/// Registers `len` bytes in the middle of a fresh buffer of (at least)
/// `guard + len + guard` bytes, in `pd`, with `access`. Every byte of the buffer is first
/// set to `fill`, so the guard bytes around the region show whether anything reached
/// outside it.
pub fn guarded_mr(
    ctx: &Context,
    pd: &Pd,
    guard: usize,
    len: usize,
    access: u32,
    fill: u8,
) -> rnic_driver::Result<Mr> {
    let buf = ctx.device().transport().alloc_dma(guard * 2 + len)?;
    buf.write(0, &vec![fill; buf.len()]);
    pd.reg_mr(Arc::new(buf), guard, len, access)
}

// ---------------------------------------------------------------------------------------
// Dynamically Connected transport.

/// How long a scenario waits for completions.
const T: Duration = Duration::from_secs(20);
/// Bytes of each DC SEND, WRITE and READ: two packets at the DC path MTU (4096).
pub const DC_LEN: usize = 5000;
/// Rounds of SENDs and WRITEs to every target.
pub const DC_ROUNDS: usize = 3;
/// Where in each target's buffer the WRITEs land, and in the DCI's the READs.
pub const DC_WRITE_AREA: usize = 256 * 1024;
const DC_READ_AREA: usize = 512 * 1024;
/// The smallest buffer an [`Endpoint`] of the DC scenario needs.
pub const DC_BUF_LEN: usize = 1 << 20;

fn dc_data(target: usize, round: usize, what: u8) -> Vec<u8> {
    (0..DC_LEN)
        .map(|i| (i as u8) ^ (target as u8 * 31) ^ (round as u8 * 7) ^ what)
        .collect()
}

/// The DC access key of target `i`.
pub fn dc_key(i: usize) -> u64 {
    0xDC00_0000_0000_0000 | ((i as u64 + 1) * 0x1111)
}

/// Queue sizes of the scenarios' QPs.
pub const CAPS: QpCaps = QpCaps {
    max_send_wr: 128,
    max_recv_wr: 128,
    max_send_sge: 16,
    max_recv_sge: 16,
    max_inline_data: 128,
};

/// A DCT on `t` with key [`dc_key`]`(i)`, in RTR, with [`DC_ROUNDS`] receives posted.
pub fn dct_on(t: &Endpoint, i: usize) -> Result<Qp> {
    let dct =
        t.pd.create_dct(t.cq, CAPS, None, dc_key(i))
            .map_err(drv("create a DCT"))?;
    dct.dct_ready(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ)
        .map_err(drv("bring the DCT to RTR"))?;
    for r in 0..DC_ROUNDS {
        dct.post_recv(&RecvWr {
            wr_id: (i * 100 + r) as u64,
            sges: vec![t.mr.sge(r * DC_LEN, DC_LEN)],
        })
        .map_err(drv("post a receive on the DCT"))?;
    }
    Ok(dct)
}

/// A DCI on `a`, in RTS.
pub fn dci_on(a: &Endpoint) -> Result<Qp> {
    let dci =
        a.pd.create_dci(a.cq, CAPS, false)
            .map_err(drv("create a DCI"))?;
    dci.dci_ready(14, 7, 16)
        .map_err(drv("bring the DCI to RTS"))?;
    Ok(dci)
}

/// The address of `dct` on `t` with `key`.
pub fn dc_addr(t: &Endpoint, dct: &Qp, key: u64) -> DcAddress {
    DcAddress {
        dctn: dct.qp_num(),
        dgid: t.gid,
        dc_key: key,
    }
}

/// One DCI on `a` reaches a DCT on each of `targets` (each with its own buffer and CQ):
/// SENDs and WRITEs to every target, interleaved, then READs back; checks every
/// completion (once, in order, success) and every byte.
pub fn dc_exercise(a: &Endpoint, targets: &[Endpoint], checks: &mut Checks) -> Result<()> {
    let dcts = targets
        .iter()
        .enumerate()
        .map(|(i, t)| dct_on(t, i))
        .collect::<Result<Vec<Qp>>>()?;
    let dci = dci_on(a)?;
    let to = |i: usize| dc_addr(&targets[i], &dcts[i], dc_key(i));
    let mut wrs: Vec<(SendWr, usize)> = Vec::new();
    let mut at = 0;
    for r in 0..DC_ROUNDS {
        for (i, t) in targets.iter().enumerate() {
            a.mr.write(at, &dc_data(i, r, 0));
            let send = signaled(0, WrOpcode::Send, vec![a.mr.sge(at, DC_LEN)]);
            at += DC_LEN;
            a.mr.write(at, &dc_data(i, r, 0x80));
            let write = signaled(
                0,
                WrOpcode::RdmaWrite {
                    remote_addr: t.mr.addr(DC_WRITE_AREA + r * DC_LEN),
                    rkey: t.mr.rkey(),
                },
                vec![a.mr.sge(at, DC_LEN)],
            );
            at += DC_LEN;
            wrs.push((send, i));
            wrs.push((write, i));
        }
    }
    let read_at = |r: usize, i: usize| DC_READ_AREA + (r * targets.len() + i) * DC_LEN;
    for r in 0..DC_ROUNDS {
        for (i, t) in targets.iter().enumerate() {
            let read = signaled(
                0,
                WrOpcode::RdmaRead {
                    remote_addr: t.mr.addr(DC_WRITE_AREA + r * DC_LEN),
                    rkey: t.mr.rkey(),
                },
                vec![a.mr.sge(read_at(r, i), DC_LEN)],
            );
            wrs.push((read, i));
        }
    }
    for (n, (wr, i)) in wrs.iter_mut().enumerate() {
        wr.wr_id = n as u64;
        dci.post_dc_send(wr, &to(*i))
            .map_err(drv("post a DC send WR"))?;
    }
    let got = poll_wcs(a.cq, wrs.len(), T)?;
    let ids: Vec<(u64, std::result::Result<WcStatus, u8>)> =
        got.iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<(u64, std::result::Result<WcStatus, u8>)> = (0..wrs.len() as u64)
        .map(|n| (n, Ok(WcStatus::Success)))
        .collect();
    let extra = poll_wcs(a.cq, 1, Duration::from_millis(50))?;
    checks.check(
        &format!(
            "dc: {} WRs (SEND, WRITE, READ) to {} DCTs complete once, in order, with success",
            wrs.len(),
            targets.len()
        ),
        ids == want && extra.is_empty(),
        || format!("got {ids:?} then {} more", extra.len()),
    )?;
    for (i, t) in targets.iter().enumerate() {
        let recvs = poll_wcs(t.cq, DC_ROUNDS, T)?;
        let got: Vec<_> = recvs
            .iter()
            .map(|wc| (wc.wr_id, wc.status, wc.opcode, wc.byte_len as usize))
            .collect();
        let want: Vec<_> = (0..DC_ROUNDS)
            .map(|r| {
                (
                    (i * 100 + r) as u64,
                    Ok(WcStatus::Success),
                    WcOpcode::Recv,
                    DC_LEN,
                )
            })
            .collect();
        checks.check(
            &format!("dc: DCT {i} received its {DC_ROUNDS} SENDs in order"),
            got == want,
            || format!("got {got:?}"),
        )?;
        let bad = (0..DC_ROUNDS).find(|&r| {
            read_mr(t.mr, r * DC_LEN, DC_LEN) != dc_data(i, r, 0)
                || read_mr(t.mr, DC_WRITE_AREA + r * DC_LEN, DC_LEN) != dc_data(i, r, 0x80)
                || read_mr(a.mr, read_at(r, i), DC_LEN) != dc_data(i, r, 0x80)
        });
        checks.check(
            &format!("dc: DCT {i}: every byte SENT, WRITTEN and READ back is right"),
            bad.is_none(),
            || format!("round {bad:?} differs"),
        )?;
    }
    Ok(())
}

/// A WR to the DCT on `t` with a wrong key fails with REM_ACCESS_ERR, the next WR on that
/// DCI is flushed, nothing is written; a new DCI with the right key then writes.
pub fn dc_wrong_key(a: &Endpoint, t: &Endpoint, checks: &mut Checks) -> Result<()> {
    let dct = dct_on(t, 0)?;
    let dci = dci_on(a)?;
    t.mr.write(DC_WRITE_AREA, &[0x77; 64]);
    a.mr.write(0, &[0x11; 64]);
    let write = |wr_id| {
        signaled(
            wr_id,
            WrOpcode::RdmaWrite {
                remote_addr: t.mr.addr(DC_WRITE_AREA),
                rkey: t.mr.rkey(),
            },
            vec![a.mr.sge(0, 64)],
        )
    };
    let post = |dci: &Qp, wr_id, key| {
        dci.post_dc_send(&write(wr_id), &dc_addr(t, &dct, key))
            .map_err(drv("post a DC WRITE"))
    };
    post(&dci, 1, dc_key(0) ^ 1)?;
    post(&dci, 2, dc_key(0))?;
    let st: Vec<_> = poll_wcs(a.cq, 2, T)?
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    checks.check(
        "dc: a WR with a wrong DC key completes REM_ACCESS_ERR, the next is flushed",
        st == [
            (1, Ok(WcStatus::RemAccessErr)),
            (2, Ok(WcStatus::WrFlushErr)),
        ],
        || format!("got {st:?}"),
    )?;
    let untouched = read_mr(t.mr, DC_WRITE_AREA, 64) == [0x77; 64];
    let no_recv = poll_wcs(t.cq, 1, Duration::from_millis(50))?.is_empty();
    checks.check(
        "dc: the wrong key wrote nothing and consumed no receive",
        untouched && no_recv,
        || format!("target bytes untouched: {untouched}, no receive: {no_recv}"),
    )?;
    let dci2 = dci_on(a)?;
    a.mr.write(0, &[0x42; 64]);
    post(&dci2, 3, dc_key(0))?;
    let got: Vec<_> = poll_wcs(a.cq, 1, T)?
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    checks.check(
        "dc: the DCT still serves a new DCI with the right key",
        got == [(3, Ok(WcStatus::Success))] && read_mr(t.mr, DC_WRITE_AREA, 64) == [0x42; 64],
        || format!("got {got:?}"),
    )
}

// ---------------------------------------------------------------------------------------
// Indirect and pattern memory keys.

/// Guard bytes on each side of the regions the memory-key checks aim at.
pub const GUARD: usize = 4096;
/// What guarded buffers are filled with.
pub const FILL: u8 = 0x5A;
/// Bytes an indirect key over [`three_regions`] with [`ranges`] spans.
pub const INDIRECT_LEN: usize = 4400;
/// Rows of the strided matrix the pattern-key checks read a column of.
pub const ROWS: usize = 16;
/// Bytes of each row.
pub const ROW: usize = 256;

/// Three regions of `b` with `access`, of 1000, 3000 and 700 bytes, guarded and filled.
pub fn three_regions(b: &Endpoint, access: [u32; 3]) -> rnic_driver::Result<[Mr; 3]> {
    let m = [1000, 3000, 700]
        .iter()
        .zip(access)
        .map(|(&len, acc)| guarded_mr(b.ctx, b.pd, GUARD, len, acc, FILL))
        .collect::<rnic_driver::Result<Vec<_>>>()?;
    Ok(m.try_into().expect("three"))
}

/// The ranges of the indirect key over [`three_regions`]: 900 + 3000 + 500 bytes.
pub fn ranges(m: &[Mr; 3]) -> [KeyRange<'_>; 3] {
    [(0, 100, 900), (1, 0, 3000), (2, 200, 500)].map(|(i, offset, len)| KeyRange {
        mr: &m[i],
        offset,
        len,
    })
}

/// `mr`'s whole buffer as it must be: [`FILL`] everywhere except `data` at `offset` of
/// the region.
pub fn expected_buffer(mr: &Mr, offset: usize, data: &[u8]) -> Vec<u8> {
    let mut want = vec![FILL; mr.buffer().len()];
    let at = mr.offset() + offset;
    want[at..at + data.len()].copy_from_slice(data);
    want
}

/// The first of the three regions that does not hold `data` (4400 bytes) scattered as
/// [`ranges`] says, with [`FILL`] everywhere else; `None` if all do.
pub fn misscattered(m: &[Mr; 3], data: &[u8]) -> Option<usize> {
    let parts = [(0, 100, 0..900), (1, 0, 900..3900), (2, 200, 3900..4400)];
    parts
        .into_iter()
        .find(|(i, offset, range)| {
            buffer_bytes(&m[*i]) != expected_buffer(&m[*i], *offset, &data[range.clone()])
        })
        .map(|(i, _, _)| i)
}

/// Bytes `from..to` of every row of a [`ROWS`] x [`ROW`] matrix, one row after another.
pub fn column(data: &[u8], from: usize, to: usize) -> Vec<u8> {
    (0..ROWS)
        .flat_map(|r| data[r * ROW + from..r * ROW + to].to_vec())
        .collect()
}

/// Deterministic test bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    crate::perf::pattern(len, seed)
}

/// Two connected RC QPs, `a`'s and `b`'s, in RTS.
fn rc_pair(a: &Endpoint, b: &Endpoint) -> Result<(Qp, Qp)> {
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let qp = |e: &Endpoint| -> Result<Qp> {
        let qp =
            e.pd.create_qp(e.cq, e.cq, CAPS, false)
                .map_err(drv("create an RC QP"))?;
        let (at, m) = verbs::init_attr(access);
        qp.modify(&at, m).map_err(drv("move the QP to INIT"))?;
        Ok(qp)
    };
    let (qa, qb) = (qp(a)?, qp(b)?);
    for (me, peer, gid) in [(&qa, &qb, b.gid), (&qb, &qa, a.gid)] {
        let (at, m) = verbs::rtr_attr(peer.qp_num(), gid, 0, verbs::mtu::MTU_1024, 16, 1);
        me.modify(&at, m).map_err(drv("move the QP to RTR"))?;
        let (at, m) = verbs::rts_attr(0, 14, 7, 7, 16);
        me.modify(&at, m).map_err(drv("move the QP to RTS"))?;
    }
    Ok((qa, qb))
}

/// Posts `wr` on `qp` and waits for its completion on `cq`.
fn complete(qp: &Qp, cq: &Cq, wr: &SendWr) -> Result<Wc> {
    qp.post_send(wr).map_err(drv("post a send WR"))?;
    poll_wcs(cq, 1, T)?
        .pop()
        .ok_or_else(|| ToolError(format!("WR {} did not complete within {T:?}", wr.wr_id)))
}

fn rdma(wr_id: u64, write: bool, rkey: u32, remote_addr: u64, sge: Sge) -> SendWr {
    let opcode = if write {
        WrOpcode::RdmaWrite { remote_addr, rkey }
    } else {
        WrOpcode::RdmaRead { remote_addr, rkey }
    };
    signaled(wr_id, opcode, vec![sge])
}

/// Checks that `wc` is `wr_id`'s, with `status`.
fn check_wc(checks: &mut Checks, what: &str, wc: &Wc, wr_id: u64, status: WcStatus) -> Result<()> {
    checks.check(what, (wc.wr_id, wc.status) == (wr_id, Ok(status)), || {
        format!("WR {} completed {}", wc.wr_id, wc.status_str())
    })
}

/// The indirect- and pattern-key scenario between `a` (requester) and `b` (whose
/// regions the keys name); see the module documentation.
pub fn indirect_keys_exercise(a: &Endpoint, b: &Endpoint, checks: &mut Checks) -> Result<()> {
    let (qa, _qb) = rc_pair(a, b)?;
    let all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let m = three_regions(b, [all; 3]).map_err(drv("register three regions"))?;
    let key =
        b.pd.create_indirect_key(all, &ranges(&m))
            .map_err(drv("create an indirect key"))?;
    let data = pattern(INDIRECT_LEN, 1);
    a.mr.write(0, &data);
    let wc = complete(
        &qa,
        a.cq,
        &rdma(1, true, key.rkey(), 0, a.mr.sge(0, INDIRECT_LEN)),
    )?;
    check_wc(
        checks,
        "indirect-keys: a WRITE through an indirect rkey completes",
        &wc,
        1,
        WcStatus::Success,
    )?;
    let wrong = misscattered(&m, &data);
    checks.check(
        "indirect-keys: the WRITE scattered into the three regions, guards intact",
        wrong.is_none(),
        || format!("region {wrong:?} holds the wrong bytes"),
    )?;
    a.mr.write(8192, &[0; 4000]);
    let wc = complete(
        &qa,
        a.cq,
        &rdma(2, false, key.rkey(), 50, a.mr.sge(8192, 4000)),
    )?;
    check_wc(
        checks,
        "indirect-keys: a READ through the indirect rkey completes",
        &wc,
        2,
        WcStatus::Success,
    )?;
    checks.check(
        "indirect-keys: the READ gathered the three regions' bytes in order",
        read_mr(a.mr, 8192, 4000) == data[50..4050],
        || "the bytes read differ".into(),
    )?;

    let matrix_mr = guarded_mr(b.ctx, b.pd, GUARD, ROWS * ROW, all, FILL)
        .map_err(drv("register the matrix"))?;
    let matrix = pattern(ROWS * ROW, 3);
    matrix_mr.write(0, &matrix);
    let strided =
        b.pd.create_pattern_key(
            ACCESS_REMOTE_READ,
            &matrix_mr,
            64,
            64,
            ROW as u64,
            ROWS as u32,
        )
        .map_err(drv("create a pattern key"))?;
    let wc = complete(
        &qa,
        a.cq,
        &rdma(3, false, strided.rkey(), 0, a.mr.sge(16384, ROWS * 64)),
    )?;
    check_wc(
        checks,
        "indirect-keys: a READ through a pattern rkey completes",
        &wc,
        3,
        WcStatus::Success,
    )?;
    checks.check(
        "indirect-keys: the pattern key gathered the strided column",
        read_mr(a.mr, 16384, ROWS * 64) == column(&matrix, 64, 128),
        || "the column read differs".into(),
    )?;

    // Past the key's end: the whole WRITE is refused, even its in-bounds bytes.
    let fresh = three_regions(b, [all; 3]).map_err(drv("register three regions"))?;
    let key2 =
        b.pd.create_indirect_key(all, &ranges(&fresh))
            .map_err(drv("create an indirect key"))?;
    let wc = complete(
        &qa,
        a.cq,
        &rdma(4, true, key2.rkey(), 100, a.mr.sge(0, INDIRECT_LEN)),
    )?;
    check_wc(
        checks,
        "indirect-keys: a WRITE past the indirect key's end completes REM_ACCESS_ERR",
        &wc,
        4,
        WcStatus::RemAccessErr,
    )?;
    let changed = fresh
        .iter()
        .position(|mr| buffer_bytes(mr).iter().any(|&x| x != FILL));
    checks.check(
        "indirect-keys: the refused WRITE touched no byte, guards intact",
        changed.is_none(),
        || format!("region {changed:?} changed"),
    )
}

// ---------------------------------------------------------------------------------------
// DMA isolation: what an IOMMU keeps out of the device's reach.

/// Seed of the bytes the secret holder ([`hold_secret`]) keeps in its page.
const SECRET_SEED: u64 = 0x5EC2_E7ED;
/// The hidden `rnic-features` scenario the isolation scenario runs in a child process.
pub const HOLD_SECRET: &str = "hold-secret";

/// The child process of the isolation scenario: allocates one page of DMA-able memory
/// the way the page-map transport does (pinned, its guest-physical address looked up),
/// fills it with secret bytes, prints `secret-page 0x<guest-physical address>` and keeps
/// the page until its standard input closes. Another process's memory, as a device
/// without an IOMMU reaches it.
pub fn hold_secret() -> rnic_driver::Result<()> {
    use std::io::{Read, Write};
    let page = rnic_driver::dma_pagemap::PagemapAllocator::new()?.alloc(4096)?;
    page.write(0, &pattern(4096, SECRET_SEED));
    let mut out = std::io::stdout().lock();
    writeln!(out, "secret-page {:#x}", page.pages()[0])
        .and_then(|()| out.flush())
        .map_err(|e| rnic_driver::Error::Io("print the secret page's address".into(), e))?;
    // Until the parent is done (it closes our stdin, or dies).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(page);
    Ok(())
}

/// A child process running [`hold_secret`], ended on drop.
struct SecretHolder {
    child: std::process::Child,
    /// The guest-physical address of its secret page.
    page: u64,
}

impl SecretHolder {
    /// Starts `exe` (the `rnic-features` binary) as the holder and reads its page's address.
    fn start(exe: &std::path::Path) -> Result<Self> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new(exe)
            .arg(HOLD_SECRET)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| ToolError(format!("start {} {HOLD_SECRET}: {e}", exe.display())))?;
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|out| std::io::BufReader::new(out).read_line(&mut line));
        let page = line
            .trim()
            .strip_prefix("secret-page 0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        match page {
            Some(page) => Ok(Self { child, page }),
            None => {
                let _ = child.kill();
                let status = child.wait();
                Err(ToolError(format!(
                    "the secret holder printed {line:?} ({read:?}, {status:?}), not its page's address: run as root"
                )))
            }
        }
    }
}

impl Drop for SecretHolder {
    fn drop(&mut self) {
        // Closing its stdin ends it; it holds nothing else.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A [`DmaBuffer`](rnic_driver::transport::DmaBuffer) of one page that the device is told lives
/// at `device_page`, while the driver's side is `local`'s first page: what registering
/// memory the driver does not own looks like.
///
/// # Safety
/// The result must be dropped before `local`.
unsafe fn foreign_page(
    local: &rnic_driver::transport::DmaBuffer,
    device_page: u64,
) -> rnic_driver::transport::DmaBuffer {
    let ptr = local.as_ptr();
    // SAFETY: `local` outlives the result (the caller's promise) and holds a page; no
    // release: the memory is `local`'s to give back.
    unsafe { rnic_driver::transport::DmaBuffer::new(ptr, 4096, vec![device_page], None) }
}

/// A page of `b`'s DMA memory, the driver's side of a [`register_foreign`].
fn spare_page(b: &Endpoint) -> Result<rnic_driver::transport::DmaBuffer> {
    b.ctx
        .device()
        .transport()
        .alloc_dma(4096)
        .map_err(drv("allocate a page"))
}

/// Registers one page that the device is told is at `device_page` in `b`'s PD with
/// `access`, the driver's side being `local` ([`spare_page`]). `Ok(None)` if the device
/// refused it with DMA_ERROR; the MR (and `local`, which must outlive it) if it accepted.
fn register_foreign(
    b: &Endpoint,
    local: rnic_driver::transport::DmaBuffer,
    device_page: u64,
    access: u32,
) -> Result<Option<(Mr, rnic_driver::transport::DmaBuffer)>> {
    // SAFETY: `foreign` is dropped before `local`: both go together, the MR (holding
    // `foreign`) first, as the caller drops the tuple's fields in order.
    let foreign = Arc::new(unsafe { foreign_page(&local, device_page) });
    match b.pd.reg_mr(foreign, 0, 4096, access) {
        Ok(mr) => Ok(Some((mr, local))),
        Err(rnic_driver::Error::Command {
            name: "DMA_ERROR", ..
        }) => Ok(None),
        Err(e) => Err(ToolError(format!(
            "REG_MR of a page at {device_page:#x} failed otherwise than with DMA_ERROR: {e}"
        ))),
    }
}

/// Bytes of the application buffer the isolation scenario registers in place.
const APP_LEN: usize = 5000;
/// Where in its heap allocation the registered range starts: not page-aligned.
const APP_OFFSET: usize = 1001;

/// The isolation scenario between `a` and `b` (see the module documentation): memory the
/// driver never mapped for the device, memory it gave back, and another process's memory
/// cannot be registered, while the application's own memory registered in place can;
/// `exe` is the `rnic-features` binary, run as the secret holder.
pub fn dma_isolation_exercise(
    a: &Endpoint,
    b: &Endpoint,
    exe: &std::path::Path,
    checks: &mut Checks,
) -> Result<()> {
    let vfio = a
        .ctx
        .device()
        .transport()
        .as_any()
        .downcast_ref::<rnic_driver::transport::vfio::VfioTransport>();
    if let Some(vfio) = vfio {
        let iova = vfio
            .unmapped_iova()
            .ok_or_else(|| ToolError("the VFIO container has no free IOVA left".into()))?;
        for (what, access) in [
            ("writable", ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE),
            ("read-only", ACCESS_REMOTE_READ),
        ] {
            let got = register_foreign(b, spare_page(b)?, iova, access)?;
            checks.check(
                &format!("dma-isolation: REG_MR ({what}) of IOVA {iova:#x}, never mapped, fails with DMA_ERROR"),
                got.is_none(),
                || "the device accepted memory nobody mapped for it".into(),
            )?;
        }
    }
    let (qa, _qb) = rc_pair(a, b)?;

    // The application's own memory, registered where it is (what ibv_reg_mr does): an
    // RDMA WRITE lands in it, and in nothing around it.
    let mut heap = vec![FILL; 3 * 4096];
    let at = heap.as_mut_ptr() as usize + APP_OFFSET;
    let buf = b
        .ctx
        .device()
        .transport()
        .map_user_memory(at, APP_LEN, true)
        .map_err(drv("make application memory reachable"))?;
    let app_pages = buf.pages().to_vec();
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
    let mr =
        b.pd.reg_mr_iova(Arc::new(buf), at % 4096, APP_LEN, at as u64, access)
            .map_err(drv("register application memory"))?;
    let data = pattern(APP_LEN, 9);
    a.mr.write(0, &data);
    let wc = complete(
        &qa,
        a.cq,
        &rdma(1, true, mr.rkey(), at as u64, a.mr.sge(0, APP_LEN)),
    )?;
    check_wc(
        checks,
        "dma-isolation: an RDMA WRITE into application memory registered in place completes",
        &wc,
        1,
        WcStatus::Success,
    )?;
    let (before, rest) = heap.split_at(APP_OFFSET);
    let (landed, after) = rest.split_at(APP_LEN);
    checks.check(
        "dma-isolation: the WRITE's bytes are in the application's buffer, and only there",
        landed == data && before.iter().chain(after).all(|&x| x == FILL),
        || "the buffer or its neighbours hold other bytes".into(),
    )?;
    if vfio.is_some() {
        // Given back (deregistered, so unmapped from the IOMMU): out of reach again. The
        // VFIO transport hands out IOVAs next fit, so neither the probe's page (taken
        // first anyway) nor REG_MR's page list is mapped at the IOVAs just freed.
        let local = spare_page(b)?;
        drop(mr);
        let got = register_foreign(b, local, app_pages[0], ACCESS_REMOTE_READ)?;
        checks.check(
            &format!(
                "dma-isolation: REG_MR of IOVA {:#x}, application memory given back, fails with DMA_ERROR",
                app_pages[0]
            ),
            got.is_none(),
            || "the device still reaches memory the IOMMU unmapped".into(),
        )?;
    }
    drop(heap);

    let holder = SecretHolder::start(exe)?;
    if vfio.is_some_and(|v| v.is_mapped(holder.page)) {
        return Err(ToolError(format!(
            "the secret page's guest-physical address {:#x} is also an IOVA of this process: the check would prove nothing",
            holder.page
        )));
    }
    // Kept as one tuple: its MR (which holds the foreign buffer) drops before the page.
    let Some(registered) = register_foreign(b, spare_page(b)?, holder.page, ACCESS_REMOTE_READ)?
    else {
        return checks.check(
            &format!(
                "dma-isolation: REG_MR of another process's page (guest-physical {:#x}) fails with DMA_ERROR",
                holder.page
            ),
            true,
            String::new,
        );
    };
    // Accepted: see whether the device really hands out the other process's bytes.
    a.mr.write(0, &[0; 4096]);
    let mr = &registered.0;
    let wc = complete(
        &qa,
        a.cq,
        &rdma(2, false, mr.rkey(), mr.iova(), a.mr.sge(0, 4096)),
    )?;
    let leaked =
        wc.status == Ok(WcStatus::Success) && read_mr(a.mr, 0, 4096) == pattern(4096, SECRET_SEED);
    checks.check(
        "dma-isolation: another process's page is out of the device's reach",
        false,
        || {
            if leaked {
                format!(
                    "REG_MR accepted another process's page (guest-physical {:#x}) and an RDMA READ of it returned the process's secret bytes: the device reaches all guest memory (no IOMMU)",
                    holder.page
                )
            } else {
                format!(
                    "REG_MR accepted another process's page (guest-physical {:#x}); a READ of it completed {}",
                    holder.page,
                    wc.status_str()
                )
            }
        },
    )
}

// ---------------------------------------------------------------------------------------
// The tool.

/// Which two functions to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Functions {
    /// Two PCI functions of this VM, by address.
    Pci(String, String),
    /// The first two rnic functions on this VM's PCI bus.
    FirstTwoPci,
    /// Two vfio-user sockets of rnicd (host); the second shares the first's memory.
    VfioUser(std::path::PathBuf, std::path::PathBuf),
}

/// The Ethernet scenario: on each function, the Ethernet queues (datasheet §15) open
/// beside the RDMA objects of the same driver; frames from A to B and RDMA WRITEs from A
/// to B interleaved, each checked where it must arrive (a frame in B's receive ring, a
/// WRITE's bytes in B's region) and nowhere else (no frame in A's ring: the WRITEs'
/// acknowledgements stay with the RDMA engine).
pub fn ethernet_exercise(a: &Endpoint, b: &Endpoint, checks: &mut Checks) -> Result<()> {
    use rnic_abi::eth::RX_ENABLE;
    use rnic_driver::eth::EthPort;
    const ROUNDS: u32 = 20;
    let (da, db) = (a.ctx.device(), b.ctx.device());
    let mac = |d: &Device| d.query_device().map(|q| q.mac);
    let (ma, mb) = (
        mac(da).map_err(drv("query A"))?,
        mac(db).map_err(drv("query B"))?,
    );
    let mut ea = EthPort::open(da, 32, 1500, RX_ENABLE).map_err(drv("open A's Ethernet queues"))?;
    let mut eb = EthPort::open(db, 32, 1500, RX_ENABLE).map_err(drv("open B's Ethernet queues"))?;
    let (qa, _qb) = rc_pair(a, b)?;
    let (mut frames, mut writes) = (0, 0);
    for i in 0..ROUNDS {
        let mut frame = mb.to_vec();
        frame.extend_from_slice(&ma);
        frame.extend_from_slice(&[0x88, 0xb5]);
        frame.extend((0..200u32).map(|k| (k + i) as u8));
        ea.send(&[&frame]).map_err(drv("send a frame"))?;
        let data = pattern(4096, u64::from(i) + 7);
        a.mr.write(0, &data);
        let wc = complete(
            &qa,
            a.cq,
            &rdma(
                u64::from(i),
                true,
                b.mr.rkey(),
                b.mr.addr(0),
                a.mr.sge(0, 4096),
            ),
        )?;
        if wc.status == Ok(WcStatus::Success) && read_mr(b.mr, 0, 4096) == data {
            writes += 1;
        }
        if eb.recv(T).map_err(drv("receive a frame"))? == Some(frame) {
            frames += 1;
        }
    }
    checks.check(
        "ethernet: every frame reached B's receive ring whole, beside the RDMA traffic",
        frames == ROUNDS,
        || format!("{frames} of {ROUNDS} frames"),
    )?;
    checks.check(
        "ethernet: every RDMA WRITE completed and placed its bytes, beside the frames",
        writes == ROUNDS,
        || format!("{writes} of {ROUNDS} WRITEs"),
    )?;
    let stray = ea
        .recv(Duration::from_millis(200))
        .map_err(drv("look at A's ring"))?;
    checks.check(
        "ethernet: no RoCE packet (the WRITEs' ACKs) reached A's receive ring",
        stray.is_none(),
        || format!("A received a frame: {stray:02x?}"),
    )?;
    let counters = eb.query().map_err(drv("QUERY_ETH"))?.counters;
    checks.check(
        "ethernet: B's counters say the same (rx_frames, no drops)",
        counters.rx_frames == u64::from(ROUNDS) && counters.rx_no_buffer == 0,
        || format!("{counters:?}"),
    )?;
    Ok(())
}

/// Which scenario to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// [`ethernet_exercise`].
    Ethernet,
    /// [`dc_exercise`] and [`dc_wrong_key`].
    Dc,
    /// [`indirect_keys_exercise`].
    IndirectKeys,
    /// [`dma_isolation_exercise`], with this binary (`rnic-features`) as the secret holder.
    DmaIsolation(std::path::PathBuf),
}

/// One opened function with the objects of an [`Endpoint`] (for the DC targets, one
/// buffer and CQ per target).
struct Opened {
    mrs: Vec<Mr>,
    cqs: Vec<Cq>,
    pd: Pd,
    ctx: Context,
}

impl Opened {
    fn new(transport: Box<dyn Transport>, endpoints: usize) -> Result<Self> {
        let device = Device::open(transport).map_err(drv("open the function"))?;
        let ctx = Context::new(device).map_err(drv("open the function for RDMA verbs"))?;
        let pd = ctx.alloc_pd().map_err(drv("allocate a PD"))?;
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        let mut mrs = Vec::new();
        let mut cqs = Vec::new();
        for _ in 0..endpoints {
            cqs.push(ctx.create_cq(1024).map_err(drv("create a CQ"))?);
            let buf = ctx
                .device()
                .transport()
                .alloc_dma(DC_BUF_LEN)
                .map_err(drv("allocate a DMA buffer"))?;
            mrs.push(
                pd.reg_mr(Arc::new(buf), 0, DC_BUF_LEN, access)
                    .map_err(drv("register a buffer"))?,
            );
        }
        Ok(Self { mrs, cqs, pd, ctx })
    }

    fn endpoint(&self, i: usize) -> Endpoint<'_> {
        Endpoint {
            ctx: &self.ctx,
            pd: &self.pd,
            cq: &self.cqs[i],
            mr: &self.mrs[i],
            gid: self.ctx.attr().gid,
        }
    }
}

fn open_pair(functions: &Functions) -> Result<(Box<dyn Transport>, Box<dyn Transport>)> {
    Ok(match functions {
        Functions::Pci(a, b) => (open::pci(a)?, open::pci(b)?),
        Functions::FirstTwoPci => {
            let all = SysfsTransport::find_all().map_err(drv(
                "look for rnic functions on the PCI bus (on the host use --vfio-user PATH twice)",
            ))?;
            if all.len() < 2 {
                return Err(ToolError(format!(
                    "found {} rnic function(s) on the PCI bus, need two: attach two (e.g. VF0 and VF1) or name them with --pci BDF --pci BDF",
                    all.len()
                )));
            }
            (open::pci(&all[0])?, open::pci(&all[1])?)
        }
        Functions::VfioUser(a, b) => {
            let first = open::vfio_user(a, 64 << 20)?;
            // Two functions of one "guest": the second maps the first's memory.
            let second = open::vfio_user_sharing(b, &first)?;
            (Box::new(first), Box::new(second))
        }
    })
}

/// Opens the two functions and runs `scenario` between them (A = the first, B = the
/// second), reporting each passed check through `say`; returns how many passed.
pub fn run(functions: &Functions, scenario: Scenario, say: &mut dyn FnMut(&str)) -> Result<usize> {
    let (ta, tb) = open_pair(functions)?;
    let a = Opened::new(ta, 1)?;
    let b = Opened::new(tb, 3)?;
    let mut checks = Checks::new(say);
    match scenario {
        Scenario::Dc => {
            let targets = [b.endpoint(0), b.endpoint(1), b.endpoint(2)];
            dc_exercise(&a.endpoint(0), &targets, &mut checks)?;
            dc_wrong_key(&a.endpoint(0), &b.endpoint(0), &mut checks)?;
        }
        Scenario::IndirectKeys => {
            indirect_keys_exercise(&a.endpoint(0), &b.endpoint(0), &mut checks)?
        }
        Scenario::Ethernet => ethernet_exercise(&a.endpoint(0), &b.endpoint(0), &mut checks)?,
        Scenario::DmaIsolation(exe) => {
            dma_isolation_exercise(&a.endpoint(0), &b.endpoint(0), &exe, &mut checks)?
        }
    }
    Ok(checks.passed())
}
