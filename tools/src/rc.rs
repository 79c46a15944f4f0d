//! What rnic-pingpong, its `--ibv-compat` mode and `rnic-perf --perftest` share around
//! their one RC QP: the checks of `--size`, `--iters` and `--mtu`, the QP, the random
//! first PSN, the wait for completions and the words for a failed one
//! (docs/hardware-interface.md §7.10 for the statuses).

use std::sync::Arc;
use std::time::Duration;

use rnic_abi::rng::Rng;
use rnic_abi::verbs::{mtu, mtu_code};
use rnic_driver::transport::DmaBuffer;
use rnic_driver::verbs::{self, Context, Cq, Mr, Pd, Qp, QpCaps, Wc, WcStatus};

use crate::error::{drv, fail, Result, ToolError};

/// Checks `--size`, `--iters` and `--mtu`.
pub fn check_sizes(size: usize, iters: u64, mtu: u32) -> Result<()> {
    if size == 0 || size > u32::MAX as usize {
        return fail(format!("--size {size}: must be 1 to {} bytes", u32::MAX));
    }
    if iters == 0 {
        return fail("--iters must be at least 1");
    }
    if mtu_code(mtu).is_none() {
        return fail(format!("--mtu {mtu}: {}", mtu_choices()));
    }
    Ok(())
}

/// What `--mtu` takes: `use 256, 512, 1024, 2048 or 4096`.
pub fn mtu_choices() -> String {
    let all: Vec<String> = mtu::BYTES.iter().map(u32::to_string).collect();
    let (last, rest) = all.split_last().expect("five sizes");
    format!("use {} or {last}", rest.join(", "))
}

/// An RC QP on `cq` with `tx` send and `rx` receive WQEs of one SGE each, no inline data.
pub fn rc_qp(pd: &Pd, cq: &Cq, tx: u32, rx: u32) -> Result<Qp> {
    let caps = QpCaps {
        max_send_wr: tx,
        max_recv_wr: rx,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    pd.create_qp(cq, cq, caps, false)
        .map_err(drv("create the queue pair"))
}

/// One side's verbs objects: a function, one RC QP on one CQ, and one registered
/// buffer. Fields drop in order: the QP before what it uses.
pub struct RcSide {
    /// The queue pair.
    pub qp: Qp,
    /// The buffer, registered whole.
    pub mr: Mr,
    /// The QP's send and receive completions.
    pub cq: Cq,
    /// The protection domain of the QP and the buffer.
    pub pd: Pd,
    /// The function.
    pub ctx: Context,
}

impl RcSide {
    /// On the function `ctx`: a PD, a CQ of `cqe` entries, `buf` (`len` bytes)
    /// registered with `access`, and an RC QP with `tx` send and `rx` receive WQEs.
    pub fn new(
        ctx: Context,
        buf: Arc<DmaBuffer>,
        len: usize,
        access: u32,
        cqe: u32,
        (tx, rx): (u32, u32),
    ) -> Result<RcSide> {
        let pd = ctx
            .alloc_pd()
            .map_err(drv("allocate a protection domain"))?;
        let cq = ctx
            .create_cq(cqe)
            .map_err(drv("create a completion queue"))?;
        let mr = pd
            .reg_mr(buf, 0, len, access)
            .map_err(drv("register the buffer"))?;
        let qp = rc_qp(&pd, &cq, tx, rx)?;
        Ok(RcSide {
            qp,
            mr,
            cq,
            pd,
            ctx,
        })
    }

    /// Moves the QP to INIT, allowing the peer `access` (remote write or read).
    pub fn to_init(&self, access: u32) -> Result<()> {
        let (a, m) = verbs::init_attr(access);
        self.qp.modify(&a, m).map_err(drv("move the QP to INIT"))
    }
}

/// `n` rounded up to whole 4 KiB pages.
pub fn page_round(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

/// A 24-bit PSN from the time and the process ID, as `ibv_rc_pingpong`'s `lrand48()`
/// seeded with both.
pub fn random_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let seed = nanos ^ (u64::from(std::process::id()) << 32);
    (Rng::new(seed).next_u64() & 0xFF_FFFF) as u32
}

/// Waits a moment, at most `slice`, after a poll of `cq` found nothing; returns what a
/// last poll found (possibly nothing). With `events` it arms the CQ, polls once more (a
/// completion written before the arm raises no event) and sleeps on the event; otherwise
/// it spins first for latency, then gives the CPU away (the device, rnicd, may need it to
/// make progress): `idle` counts the empty polls so far.
pub fn idle_wait(
    ctx: &Context,
    cq: &Cq,
    events: bool,
    idle: &mut u32,
    slice: Duration,
) -> Result<Vec<Wc>> {
    // A lost function (rnicd gone, or reset under this driver) sends no completion: end
    // the wait with that instead of waiting for the time limit.
    ctx.check_alive().map_err(drv("wait for a completion"))?;
    if events {
        cq.req_notify(false);
        let got = cq.poll(16);
        if got.is_empty() {
            ctx.wait_cq_event(cq, slice)
                .map_err(drv("wait for a completion event"))?;
        }
        return Ok(got);
    }
    *idle += 1;
    if *idle < 200 {
        std::hint::spin_loop();
    } else if *idle < 20_000 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50).min(slice));
    }
    Ok(Vec::new())
}

/// The error of a failed completion of the work request called `name`, with its status
/// string and a hint.
pub fn completion_error(wc: &Wc, name: &str) -> ToolError {
    let hint = match wc.status {
        Ok(WcStatus::RetryExcErr) => {
            " (the peer's QP did not answer: is the other side running, connected to this side's QPN, GID and PSN, and reachable? Raise --timeout or --retry for a slow peer)"
        }
        Ok(WcStatus::RnrRetryExcErr) => {
            " (the peer had no receive posted: does it run the same --op, with receives for this side's SENDs?)"
        }
        Ok(WcStatus::RemAccessErr) => {
            " (the peer refused the rkey or address: give the peer's current rkey and addr, from its `local:` line)"
        }
        Ok(WcStatus::RemInvReqErr) => {
            " (the peer refused the request: do both sides run the same --op and --size?)"
        }
        Ok(WcStatus::LocLenErr) => {
            " (a message larger than the posted receive: do both sides use the same --size?)"
        }
        Ok(WcStatus::WrFlushErr) => {
            " (flushed: this QP went to the error state, after an earlier failure here or a request from the peer it refused; see the other side's error)"
        }
        _ => "",
    };
    let status = match wc.status {
        Ok(s) => s as u8,
        Err(n) => n,
    };
    ToolError(format!(
        "{name} (wr_id {:#x}) completed with error: {} (status {status}, vendor error {:#x}){hint}",
        wc.wr_id,
        wc.status_str(),
        wc.vendor_err
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_mtus_are_checked() {
        assert!(check_sizes(4096, 1, 1024).is_ok());
        assert!(check_sizes(0, 1, 1024).is_err());
        assert!(check_sizes(1, 0, 1024).is_err());
        let e = check_sizes(1, 1, 1500).unwrap_err();
        assert_eq!(e.0, "--mtu 1500: use 256, 512, 1024, 2048 or 4096");
        assert!(random_psn() <= 0xFF_FFFF);
        assert_eq!(page_round(1), 4096);
        assert_eq!(page_round(8192), 8192);
    }
}
