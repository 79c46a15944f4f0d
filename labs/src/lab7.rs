//! Lab 7: reliability under `--net-faults` (docs/labs/lab7.md). With lab 3's objects and
//! lab 4's post and poll, the driver connects the two QPs with retransmission attributes
//! fit for a lossy link, streams WRITEs through a link that loses, duplicates and
//! reorders frames (§7.14), sees what a dead link does to its work requests, and brings
//! the connection back.

use std::time::Instant;

use rnic_abi::cmd::Opcode;
use rnic_abi::doorbell;
use rnic_abi::verbs::{self as v, QpState, WcStatus};
use rnic_device::fabric::faults::FaultSpec;
use zerocopy::{FromBytes, IntoBytes};

use crate::lab2::{call, Queue};
use crate::lab3::{self, Connect, ENTRIES};
use crate::nic::{Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};
use crate::solutions::lab3 as objects;

pub use crate::lab4::{Setup, Write};

/// Posts `writes` on QP 0 with lab 4's post and poll, never more than [`ENTRIES`]
/// outstanding, and returns the completion of every WR it posted, in order. After a
/// completion that is not SUCCESS it posts no more, but still collects the completions
/// of those already posted.
pub type Run = fn(&dyn Nic, &mut Setup, &[Write]) -> Result<Vec<v::Cqe>>;

/// Brings the connection back after QP 0 failed: both QPs through RESET, their doorbell
/// slots and the driver's counts back to 0, then `connect` for each again (aimed at the
/// other, at the GID given).
pub type Recover = fn(&dyn Nic, &mut Setup, &mut dyn Queue, Connect, [u8; 16]) -> Result<()>;

/// The student's code.
#[derive(Clone, Copy)]
pub struct Code {
    /// Lab 3's RESET -> RTS, with `timeout` and `retry_cnt` for this lab's link.
    pub connect: Connect,
    /// See [`Run`].
    pub run: Run,
    /// See [`Recover`].
    pub recover: Recover,
}

/// The steps, as docs/labs/lab7.md numbers them.
pub const STEPS: [&str; 6] = [
    "timeout and retry_cnt for a lossy link",
    "64 WRITEs, never more than 16 outstanding",
    "every WR completes once, in order, SUCCESS",
    "a dead link: RETRY_EXC_ERR, then WR_FLUSH_ERR",
    "recovery: both QPs through RESET, slots to 0",
    "a WRITE after recovery",
];

/// Title of the report.
pub const TITLE: &str = "lab 7: reliability under --net-faults";

/// The lossy link of steps 2 and 3 (`--net-faults loss=0.2,dup=0.05,reorder=0.05,seed=7`).
pub const LOSSY: FaultSpec = FaultSpec {
    loss: 0.2,
    dup: 0.05,
    reorder: 0.05,
    corrupt: 0.0,
    delay: std::time::Duration::ZERO,
    seed: 7,
};

/// The dead link of step 4 (`--net-faults loss=1`).
pub const DEAD: FaultSpec = FaultSpec {
    loss: 1.0,
    dup: 0.0,
    reorder: 0.0,
    corrupt: 0.0,
    delay: std::time::Duration::ZERO,
    seed: 7,
};

/// WRITEs of step 2: 32 bytes each.
const LOSSY_WRITES: u32 = 64;
/// WRITEs of step 4: more than the ring holds.
const DEAD_WRITES: u32 = 24;
/// Bytes per WRITE.
const LEN: u32 = 32;

/// How the retransmission timer may be set here (§7.9 "Retransmission"): at least about
/// 1 ms (code 8), at most about 4 ms (code 10).
const TIMEOUTS: std::ops::RangeInclusive<u8> = 8..=10;
/// Retries: at least 3.
const RETRIES: std::ops::RangeInclusive<u8> = 3..=7;

/// A queue that keeps every command sent through it, for the checker to read.
struct Recorded<'q> {
    q: &'q mut dyn Queue,
    log: Vec<(Opcode, Vec<u8>)>,
}

impl Queue for Recorded<'_> {
    fn execute(
        &mut self,
        nic: &dyn Nic,
        opcode: Opcode,
        body: &[u8],
        resp_len: usize,
    ) -> Result<Vec<u8>> {
        self.log.push((opcode, body.to_vec()));
        self.q.execute(nic, opcode, body, resp_len)
    }
}

fn query(q: &mut dyn Queue, nic: &dyn Nic, qpn: u32) -> Result<v::QueryQpResp> {
    let req = v::ObjectReq {
        handle: qpn,
        reserved: 0,
    };
    call(q, nic, Opcode::QueryQp, req.as_bytes())
}

fn state_name(state: u8) -> &'static str {
    match state {
        0 => "RESET",
        1 => "INIT",
        2 => "RTR",
        3 => "RTS",
        4 => "SQD",
        5 => "SQE",
        6 => "ERR",
        _ => "unknown",
    }
}

fn status_name(status: u8) -> String {
    WcStatus::from_u8(status).map_or_else(|| format!("status {status}"), |s| s.name().into())
}

/// Step 1: both QPs in RTS with a timeout and retry count fit for the lab's link.
fn judge_attrs(q: &mut dyn Queue, nic: &dyn Nic, qpns: [u32; 2]) -> Result<String> {
    let mut seen = String::new();
    for qpn in qpns {
        let a = query(q, nic, qpn)?.attr;
        if a.qp_state != QpState::Rts as u8 {
            return Err(format!(
                "QP {qpn:#x} is in {}, not RTS (§7.8)",
                state_name(a.qp_state)
            ));
        }
        if a.timeout == 0 {
            return Err(format!(
                "QP {qpn:#x} has timeout 0: no retransmission timer, so a lost request is \
                 never sent again and its WR never completes (§7.9 \"Retransmission\")"
            ));
        }
        if !TIMEOUTS.contains(&a.timeout) {
            return Err(format!(
                "QP {qpn:#x} has timeout {} ({:.3} ms): on this link a round trip takes \
                 microseconds, but the device may nap about 1 ms before it answers (§4.3); \
                 ask for 4.096 µs × 2^timeout between {:.1} and {:.1} ms (timeout {} to {}) \
                 so that a loss costs little and a live ACK is not taken for a lost one \
                 (§7.9 \"Retransmission\")",
                a.timeout,
                period_ms(a.timeout),
                period_ms(*TIMEOUTS.start()),
                period_ms(*TIMEOUTS.end()),
                TIMEOUTS.start(),
                TIMEOUTS.end()
            ));
        }
        if !RETRIES.contains(&a.retry_cnt) {
            return Err(format!(
                "QP {qpn:#x} has retry_cnt {}: with a fifth of the frames lost, a request or \
                 its ACK is lost about one time in three, and retry_cnt counts the timeouts in \
                 a row a WR survives: give it at least {} (7 at most, §7.9 \"Retransmission\")",
                a.retry_cnt,
                RETRIES.start()
            ));
        }
        seen = format!(
            "timeout {} ({:.1} ms), retry_cnt {}",
            a.timeout,
            period_ms(a.timeout),
            a.retry_cnt
        );
    }
    Ok(seen)
}

/// The ACK timeout of code `t`, in milliseconds (§7.9).
fn period_ms(t: u8) -> f64 {
    4.096e-3 * f64::from(1u32 << t.min(31))
}

/// Step 2: at no store of the send slot were more than ENTRIES WQEs outstanding.
fn judge_outstanding(trace: &[Access], sq_slot: u64, cq_slot: u64, from: u32) -> Result<String> {
    let (mut consumed, mut most, mut last) = (from, 0, from);
    for a in trace {
        match a {
            Access::DbWrite { offset, value, .. } if *offset == cq_slot => consumed = *value,
            Access::DbWrite { offset, value, .. } if *offset == sq_slot => {
                let outstanding = value.wrapping_sub(consumed);
                if outstanding > ENTRIES {
                    return Err(format!(
                        "the send slot was given posted count {value} when {consumed} CQEs had \
                         been consumed: {outstanding} WQEs outstanding in a ring of {ENTRIES} \
                         entries, so entry {} was overwritten before its WR completed; poll a \
                         completion before you post into a full ring (§7.5, §7.6)",
                        (value - 1) % ENTRIES
                    ));
                }
                most = most.max(outstanding);
                last = *value;
            }
            _ => {}
        }
    }
    if last == from {
        return Err(format!(
            "the send slot (BAR2 {sq_slot:#x}) was never written: nothing was posted (§7.5)"
        ));
    }
    Ok(format!(
        "{} WRs posted, at most {most} outstanding",
        last.wrapping_sub(from)
    ))
}

/// Runs `code` on a fresh lab device's VF 0 and judges it.
pub fn check(code: Code) -> Report {
    // The lossy link from the start: no frame goes before step 2.
    let dev = LabDevice::with_faults(LOSSY);
    let mut r = Report::new(TITLE, &STEPS);
    let set_up = lab3::set_up(&dev).and_then(|(q, memory, info)| {
        let mut q = q;
        let objects = objects::create(&dev, &mut q, &memory)?;
        Ok((q, memory, info.gid, objects))
    });
    let (mut q, memory, gid, o) = match set_up {
        Ok(s) => s,
        Err(e) => {
            r.judge(0, Err(format!("the lab's own set-up failed: {e}")));
            return r;
        }
    };
    let [a, b] = o.qps;

    // 1: the student's connect, judged by QUERY_QP.
    let connected = run_student(|| {
        (code.connect)(&dev, &mut q, a.qpn, b.qpn, gid)?;
        (code.connect)(&dev, &mut q, b.qpn, a.qpn, gid)
    });
    if let Err(e) = connected {
        if e.contains("still to write") {
            r.stopped(e);
        } else {
            r.judge(0, Err(e));
        }
        return r;
    }
    if !r.judge(0, judge_attrs(&mut q, &dev, [a.qpn, b.qpn])) {
        return r;
    }

    // 2, 3: a lossy link.
    let mut setup = Setup {
        objects: o,
        memory,
        sq_posted: 0,
        cq_consumed: 0,
    };
    let source: Vec<u8> = (0..2048u32).map(|i| (i * 13 + 5) as u8).collect();
    setup.memory.mr_buf.write(0, &source);
    let writes: Vec<Write> = (0..LOSSY_WRITES)
        .map(|k| Write {
            src: u64::from(k * LEN),
            dst: 2048 + u64::from(k * LEN),
            len: LEN,
            wr_id: 0x700 + u64::from(k),
        })
        .collect();
    let sq_slot = doorbell::slot_offset(a.sq_doorbell.page, a.sq_doorbell.slot);
    let cq_slot = doorbell::slot_offset(o.cq.doorbell.page, o.cq.doorbell.slot);
    dev.idle();
    dev.clear_trace();
    let before = dev.function().stats().retransmits;
    let ran = run_student(|| (code.run)(&dev, &mut setup, &writes));
    if let Err(e) = &ran {
        if e.contains("still to write") && !e.contains("step 3") && !e.contains("step 4") {
            r.stopped(e.clone());
            return r;
        }
    }
    if !r.judge(1, judge_outstanding(&dev.trace(), sq_slot, cq_slot, 0)) {
        return r;
    }
    let step = ran.and_then(|cqes| {
        judge_completions(&cqes, &writes, LOSSY_WRITES as usize, a.qpn)?;
        let mut arrived = vec![0u8; 2048];
        setup.memory.mr_buf.read(2048, &mut arrived);
        if let Some(k) = (0..LOSSY_WRITES as usize)
            .find(|&k| arrived[k * 32..k * 32 + 32] != source[k * 32..k * 32 + 32])
        {
            return Err(format!(
                "WR {:#x} completed with SUCCESS but its bytes are not at offset {}",
                writes[k].wr_id, writes[k].dst
            ));
        }
        let f = dev.fault_counters();
        let resent = dev.function().stats().retransmits - before;
        if resent == 0 {
            return Err(format!(
                "the link lost {} frames and the device resent none: is the retransmission \
                 timer on? (§7.9)",
                f.lost
            ));
        }
        Ok(format!(
            "{LOSSY_WRITES} CQEs in order; the link lost {} of {} frames, duplicated {}, \
             reordered {}; the device resent {resent} times",
            f.lost, f.sent, f.duplicated, f.reordered
        ))
    });
    if !r.judge(2, step) {
        return r;
    }

    // 4: a dead link.
    let dead: Vec<Write> = (0..DEAD_WRITES)
        .map(|k| Write {
            src: 0,
            dst: 2048,
            len: LEN,
            wr_id: 0xDEAD00 + u64::from(k),
        })
        .collect();
    dev.set_faults(DEAD);
    dev.idle();
    dev.clear_trace();
    let start = Instant::now();
    let posted_before = setup.sq_posted;
    let step = run_student(|| (code.run)(&dev, &mut setup, &dead)).and_then(|cqes| {
        let posted = setup.sq_posted.wrapping_sub(posted_before) as usize;
        judge_outstanding(&dev.trace(), sq_slot, cq_slot, posted_before)?;
        judge_dead(&cqes, &dead, posted)?;
        let st = query(&mut q, &dev, a.qpn)?.attr.qp_state;
        if st != QpState::Err as u8 {
            return Err(format!(
                "QP {:#x} is in {} after RETRY_EXC_ERR, not ERR (§7.10)",
                a.qpn,
                state_name(st)
            ));
        }
        Ok(format!(
            "{posted} WRs posted: RETRY_EXC_ERR then {} WR_FLUSH_ERR, after {:.0} ms; QP in ERR",
            posted - 1,
            start.elapsed().as_secs_f64() * 1000.0
        ))
    });
    if !r.judge(3, step) {
        return r;
    }

    // 5: recovery, on a healed link.
    dev.set_faults(FaultSpec::default());
    dev.idle();
    dev.clear_trace();
    let mut rec = Recorded {
        q: &mut q,
        log: Vec::new(),
    };
    let recovered = run_student(|| (code.recover)(&dev, &mut setup, &mut rec, code.connect, gid));
    let log = rec.log;
    let step = recovered.and_then(|()| judge_recovery(&dev, &mut q, &log, &setup));
    if let Err(e) = &step {
        if e.contains("still to write") {
            r.stopped(e.clone());
            return r;
        }
    }
    if !r.judge(4, step) {
        return r;
    }

    // 6: a WRITE with lab 4's reference post and poll.
    let last = Write {
        src: 0,
        dst: 3072,
        len: 64,
        wr_id: 0x1AB7,
    };
    setup.memory.mr_buf.write(3072, &[0u8; 64]);
    dev.idle();
    let step = crate::solutions::lab4::post(&dev, &mut setup, &last)
        .and_then(|()| run_student(|| crate::solutions::lab4::poll(&dev, &mut setup)))
        .and_then(|cqe| {
            if cqe.status != WcStatus::Success as u8 || cqe.wr_id != last.wr_id {
                return Err(format!(
                    "the WRITE completed as wr_id {:#x} with {}: the connection is not back \
                     (§7.8, §7.9)",
                    cqe.wr_id,
                    status_name(cqe.status)
                ));
            }
            let mut arrived = vec![0u8; 64];
            setup.memory.mr_buf.read(3072, &mut arrived);
            if arrived != source[..64] {
                return Err("the WRITE completed but its bytes did not arrive".into());
            }
            Ok("SUCCESS, and the bytes arrived".into())
        });
    r.judge(5, step);
    r
}

/// Step 3: one CQE per WR, in order, SUCCESS, RDMA_WRITE, QP 0.
fn judge_completions(cqes: &[v::Cqe], writes: &[Write], n: usize, qpn: u32) -> Result<()> {
    for (k, (cqe, w)) in cqes.iter().zip(writes).enumerate() {
        if cqe.wr_id != w.wr_id {
            let again = cqes[..k].iter().any(|c| c.wr_id == cqe.wr_id);
            return Err(format!(
                "completion {k} is wr_id {:#x}, not {:#x}{}: the device completes send WRs \
                 once each, in send-queue order (§7.9); read each CQE once, when its owner \
                 bit is new (§7.6)",
                cqe.wr_id,
                w.wr_id,
                if again {
                    ", a WR already completed"
                } else {
                    ""
                }
            ));
        }
        if cqe.status != WcStatus::Success as u8 {
            return Err(format!(
                "WR {:#x} completed with {}: the link only loses, duplicates and reorders \
                 frames, which the transport repairs (§7.9); was the timer or retry count \
                 changed? (§7.10)",
                w.wr_id,
                status_name(cqe.status)
            ));
        }
        if cqe.opcode != v::wc::RDMA_WRITE || cqe.qp_num != qpn {
            return Err(format!(
                "completion {k} has opcode {} and QP {:#x}, not RDMA_WRITE on {qpn:#x} (§7.6)",
                cqe.opcode, cqe.qp_num
            ));
        }
    }
    if cqes.len() != n {
        return Err(format!(
            "{} completions returned for {n} WRs: every WR completes exactly once (§7.9)",
            cqes.len()
        ));
    }
    Ok(())
}

/// Step 4: the first WR RETRY_EXC_ERR, every other posted one WR_FLUSH_ERR, once each.
fn judge_dead(cqes: &[v::Cqe], writes: &[Write], posted: usize) -> Result<()> {
    if posted == 0 {
        return Err("nothing was posted".into());
    }
    for (k, (cqe, w)) in cqes.iter().zip(writes).enumerate() {
        let want = if k == 0 {
            WcStatus::RetryExcErr
        } else {
            WcStatus::WrFlushErr
        };
        if cqe.wr_id != w.wr_id || cqe.status != want as u8 {
            return Err(format!(
                "completion {k} is wr_id {:#x} with {}; it should be wr_id {:#x} with {}: on a \
                 dead link the oldest WR fails after retry_cnt + 1 timeouts and every WR \
                 behind it is flushed, in order (§7.9 \"Retransmission\", §7.8 \"ERR\")",
                cqe.wr_id,
                status_name(cqe.status),
                w.wr_id,
                want.name()
            ));
        }
    }
    if cqes.len() != posted {
        return Err(format!(
            "{} completions returned for the {posted} WRs posted: after RETRY_EXC_ERR every \
             WR still in the queue completes with WR_FLUSH_ERR, once (§7.8 \"ERR\", §7.10); \
             collect them all, or they wait in the CQ for the next user",
            cqes.len()
        ));
    }
    Ok(())
}

/// Step 5: both QPs went through RESET and are in RTS again; their slots and the
/// driver's count are 0.
fn judge_recovery(
    dev: &LabDevice,
    q: &mut dyn Queue,
    log: &[(Opcode, Vec<u8>)],
    s: &Setup,
) -> Result<String> {
    let reset = |qpn: u32| {
        log.iter().any(|(op, body)| {
            *op == Opcode::ModifyQp
                && v::ModifyQpReq::read_from_prefix(body).is_ok_and(|(m, _)| {
                    m.qpn == qpn
                        && m.attr_mask & v::attr::STATE != 0
                        && m.attr.qp_state == QpState::Reset as u8
                })
        })
    };
    let [a, b] = s.objects.qps;
    if !reset(a.qpn) {
        return Err(format!(
            "QP {:#x} (in ERR) was not moved to RESET: from ERR the only way back is RESET, \
             then INIT, RTR, RTS (§7.8)",
            a.qpn
        ));
    }
    if !reset(b.qpn) {
        return Err(format!(
            "QP {:#x}, the peer, was not moved to RESET: its responder still expects the PSN \
             after the last request it executed, while QP {:#x} starts over at its sq_psn, so \
             its requests would be taken for duplicates, acknowledged and never executed \
             (§7.9 \"Duplicates\"): bring both ends of the connection through RESET",
            b.qpn, a.qpn
        ));
    }
    for qp in [a, b] {
        let st = query(q, dev, qp.qpn)?.attr.qp_state;
        if st != QpState::Rts as u8 {
            return Err(format!(
                "QP {:#x} is in {} after the recovery, not RTS (§7.8)",
                qp.qpn,
                state_name(st)
            ));
        }
        for (queue, slot) in [("send", qp.sq_doorbell), ("receive", qp.rq_doorbell)] {
            let value = dev.db_read(doorbell::slot_offset(slot.page, slot.slot));
            if value != 0 {
                return Err(format!(
                    "QP {:#x}'s {queue} slot still holds {value}: RESET sets the device's \
                     taken counts to 0 but does not touch the slots; store 0 in both queue \
                     slots and start your counts over (§7.8 \"Entering RESET\")",
                    qp.qpn
                ));
            }
        }
    }
    if s.sq_posted != 0 {
        return Err(format!(
            "the driver's posted count (Setup::sq_posted) is {} after the recovery: the ring \
             starts over at entry 0, count 0 (§7.8 \"Entering RESET\")",
            s.sq_posted
        ));
    }
    Ok("RESET, slots 0, INIT, RTR, RTS for both QPs".into())
}
