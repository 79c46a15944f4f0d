//! Lab 4: the first RDMA WRITE (docs/labs/lab4.md). With the objects of lab 3 made and
//! both QPs in RTS, the driver writes a send WQE into QP 0's ring, rings its doorbell,
//! and polls the CQ for the completion, by hand.

use rnic_abi::verbs::{self as v};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use zerocopy::FromBytes;

use crate::lab3::{self, Memory, Objects, ENTRIES};
use crate::nic::{Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};
use crate::solutions::lab3 as objects;

/// What lab 3 made, and the counts the driver keeps.
pub struct Setup {
    /// The objects: QP 0 writes through QP 1 into the MR.
    pub objects: Objects,
    /// Their memory; `memory.mr_buf` is the MR's page.
    pub memory: Memory,
    /// Send WQEs posted on QP 0 so far (free-running, §7.5).
    pub sq_posted: u32,
    /// CQEs consumed so far (free-running, §7.5).
    pub cq_consumed: u32,
}

/// One RDMA WRITE to post: `len` bytes from offset `src` of the MR to offset `dst` of
/// the same MR, through QP 1, signaled, with `wr_id`.
#[derive(Clone, Copy, Debug)]
pub struct Write {
    /// Offset of the source in the MR.
    pub src: u64,
    /// Offset of the destination in the MR.
    pub dst: u64,
    /// Bytes to write.
    pub len: u32,
    /// The work request's ID, which its CQE gives back.
    pub wr_id: u64,
}

/// The student's code.
#[derive(Clone, Copy)]
pub struct Code {
    /// Posts `write` on QP 0: the WQE, the posted count, the rung bit, a kick if asked.
    pub post: fn(&dyn Nic, &mut Setup, &Write) -> Result<()>,
    /// Waits for the next CQE, reads it, and hands the entry back.
    pub poll: fn(&dyn Nic, &mut Setup) -> Result<v::Cqe>,
}

/// The steps, as docs/labs/lab4.md numbers them.
pub const STEPS: [&str; 7] = [
    "the WQE in the send ring before its doorbell",
    "the posted count, then the rung bit",
    "a kick when NOTIFY_REQUEST asks for one",
    "the bytes arrived",
    "the CQE: wr_id, status, opcode, QP",
    "the consumer index handed back",
    "a second WRITE: the counts run on",
];

/// Title of the report.
pub const TITLE: &str = "lab 4: the first RDMA WRITE";

/// The lab 3 reference set-up on `nic`: both QPs in RTS, the EQ polled.
pub fn set_up(nic: &dyn Nic) -> Result<Setup> {
    set_up_with_eq_vector(nic, regs::NO_VECTOR)
}

/// [`set_up`], with the EQ's events on MSI-X `vector` (lab 5).
pub fn set_up_with_eq_vector(nic: &dyn Nic, vector: u32) -> Result<Setup> {
    let (mut q, memory, info) = lab3::set_up(nic)?;
    let objects = objects::create_with_eq_vector(nic, &mut q, &memory, vector)?;
    let [a, b] = objects.qps;
    objects::connect(nic, &mut q, a.qpn, b.qpn, info.gid)?;
    objects::connect(nic, &mut q, b.qpn, a.qpn, info.gid)?;
    // The queue is dropped, not stopped: the device keeps it and nobody sends more.
    Ok(Setup {
        objects,
        memory,
        sq_posted: 0,
        cq_consumed: 0,
    })
}

/// Runs `code` on a fresh lab device's VF 0 and judges it.
pub fn check(code: Code) -> Report {
    let dev = LabDevice::new();
    let mut r = Report::new(TITLE, &STEPS);
    let mut setup = match set_up(&dev) {
        Ok(s) => s,
        Err(e) => {
            r.judge(0, Err(format!("the lab's own set-up failed: {e}")));
            return r;
        }
    };
    let o = setup.objects;
    let stride = v::sq_stride(1, 0) as usize;
    dev.watch("sq", setup.memory.sq[0].device_addr(0), PAGE_SIZE as usize);
    let message = b"Hello from lab 4: one WQE, one doorbell, one CQE.";
    setup.memory.mr_buf.write(0, message);
    let first = Write {
        src: 0,
        dst: 2048,
        len: message.len() as u32,
        wr_id: 0x1AB4,
    };

    dev.idle();
    dev.clear_trace();
    let posted = run_student(|| (code.post)(&dev, &mut setup, &first));
    let trace = dev.trace();
    let (page, slot) = (o.qps[0].sq_doorbell.page, o.qps[0].sq_doorbell.slot);
    let sq_slot = doorbell::slot_offset(page, slot);
    if let Err(e) = posted
        .clone()
        .and_then(|()| judge_wqe(&trace, sq_slot, stride, &o, &first, 1))
    {
        if !trace
            .iter()
            .any(|a| matches!(a, Access::DbWrite { offset, .. } if *offset == sq_slot))
            && posted.is_err()
        {
            r.stopped(e);
        } else {
            r.judge(0, Err(e));
        }
        return r;
    }
    r.judge(
        0,
        Ok(format!(
            "entry 0 complete when slot {slot} of page {page} was written"
        )),
    );
    if !r.judge(1, judge_count_and_bit(&trace, sq_slot, page, slot, 1)) {
        return r;
    }
    if !r.judge(2, judge_kick(&trace, page)) {
        return r;
    }

    // 4: the device did it.
    let polled = run_student(|| (code.poll)(&dev, &mut setup));
    let mut arrived = vec![0u8; message.len()];
    setup.memory.mr_buf.read(first.dst as usize, &mut arrived);
    let step = if arrived == message {
        Ok(format!("{} bytes at offset {}", message.len(), first.dst))
    } else {
        Err(match &polled {
            Err(e) => format!("the WRITE did not happen, and polling failed: {e}"),
            Ok(cqe) => format!(
                "the destination does not hold the message, and the CQE's status is {} (§7.10)",
                v::WcStatus::from_u8(cqe.status).map_or("unknown", |s| s.name())
            ),
        })
    };
    if !r.judge(3, step) {
        return r;
    }
    if !r.judge(
        4,
        polled.and_then(|cqe| judge_cqe(&cqe, &first, o.qps[0].qpn)),
    ) {
        return r;
    }
    let cq_slot = doorbell::slot_offset(o.cq.doorbell.page, o.cq.doorbell.slot);
    if !r.judge(5, judge_consumer(&dev.trace(), cq_slot, 1)) {
        return r;
    }

    // 7: again, at entry 1, with counts 2.
    let second = Write {
        src: 0,
        dst: 3072,
        len: message.len() as u32,
        wr_id: 0x2AB4,
    };
    dev.idle();
    dev.clear_trace();
    let step = run_student(|| (code.post)(&dev, &mut setup, &second))
        .and_then(|()| {
            let trace = dev.trace();
            judge_wqe(&trace, sq_slot, stride, &o, &second, 2)?;
            judge_count_and_bit(&trace, sq_slot, page, slot, 2)?;
            judge_kick(&trace, page)
        })
        .and_then(|_| run_student(|| (code.poll)(&dev, &mut setup)))
        .and_then(|cqe| judge_cqe(&cqe, &second, o.qps[0].qpn))
        .and_then(|_| judge_consumer(&dev.trace(), cq_slot, 2))
        .and_then(|_| {
            let mut arrived = vec![0u8; message.len()];
            setup.memory.mr_buf.read(second.dst as usize, &mut arrived);
            if arrived == message {
                Ok("entry 1, posted count 2, consumer index 2".into())
            } else {
                Err("the second WRITE's bytes did not arrive".into())
            }
        });
    r.judge(6, step);
    r
}

/// Step 1: when the send queue's slot was written with `count`, entry `count - 1` held
/// the WQE of `w`.
fn judge_wqe(
    trace: &[Access],
    sq_slot: u64,
    stride: usize,
    o: &Objects,
    w: &Write,
    count: u32,
) -> Result<String> {
    let Some(ring) = trace.iter().find_map(|a| match a {
        Access::DbWrite {
            offset,
            value,
            watched,
        } if *offset == sq_slot && *value == count => Some(&watched[0].1),
        _ => None,
    }) else {
        let others: Vec<u32> = trace
            .iter()
            .filter_map(|a| match a {
                Access::DbWrite { offset, value, .. } if *offset == sq_slot => Some(*value),
                _ => None,
            })
            .collect();
        return Err(if others.is_empty() {
            format!(
                "the send queue's doorbell slot (BAR2 {sq_slot:#x}, from CREATE_QP's sq_doorbell) \
                 was never written (§7.5)"
            )
        } else {
            format!(
                "the send queue's slot was written with {others:?}, not {count}: it holds the \
                 count of WQEs posted in all, free-running (§7.5)"
            )
        });
    };
    let index = (count - 1) % ENTRIES;
    let at = index as usize * stride;
    let entry = &ring[at..at + stride];
    if entry.iter().all(|&b| b == 0) {
        return Err(format!(
            "the doorbell was rung (posted count {count}) while send ring entry {index} was still \
             empty: write the WQE first, then the count (§7.5 \"Posting\")"
        ));
    }
    let (wqe, rest) = v::SendWqe::read_from_prefix(entry).map_err(|_| "WQE size")?;
    let (sge, _) = v::Sge::read_from_prefix(rest).map_err(|_| "SGE size")?;
    let want_sge = v::Sge {
        addr: o.iova + w.src,
        length: w.len,
        lkey: o.mr.lkey,
    };
    let wrong = if wqe.opcode != v::wr::RDMA_WRITE {
        format!(
            "opcode {} is not RDMA_WRITE ({})",
            wqe.opcode,
            v::wr::RDMA_WRITE
        )
    } else if wqe.wr_id != w.wr_id {
        format!("wr_id {:#x}, not {:#x}", wqe.wr_id, w.wr_id)
    } else if wqe.flags & v::send_flags::SIGNALED == 0 {
        "SIGNALED is not set: the WR would complete without a CQE".into()
    } else if wqe.num_sge != 1 {
        format!("num_sge {}, not 1", wqe.num_sge)
    } else if wqe.remote_addr != o.iova + w.dst || wqe.rkey != o.mr.rkey {
        format!(
            "remote_addr {:#x} rkey {:#x}; the destination is iova {:#x} with the MR's rkey {:#x}",
            wqe.remote_addr,
            wqe.rkey,
            o.iova + w.dst,
            o.mr.rkey
        )
    } else if sge != want_sge {
        format!("the SGE is {sge:?}, not {want_sge:?} (right after the 64-byte fixed part)")
    } else {
        return Ok(String::new());
    };
    Err(format!(
        "send ring entry {index}, when its doorbell was rung: {wrong} (§7.6 \"Send WQE\")"
    ))
}

/// Step 2: the count, then the slot's bit in RUNG_BITMAP.
fn judge_count_and_bit(
    trace: &[Access],
    sq_slot: u64,
    page: u32,
    slot: u32,
    count: u32,
) -> Result<String> {
    let counted = trace
        .iter()
        .position(|a| matches!(a, Access::DbWrite { offset, value, .. } if *offset == sq_slot && *value == count))
        .ok_or("the count was not written")?;
    let word = u64::from(page) * PAGE_SIZE + doorbell::RUNG_BITMAP + 4 * u64::from(slot / 32);
    let bit = 1u32 << (slot % 32);
    match trace
        .iter()
        .position(|a| matches!(a, Access::DbWrite { offset, value, .. } if *offset == word && value & bit != 0))
    {
        None => Err(format!(
            "the slot's bit (bit {} of RUNG_BITMAP word BAR2 {word:#x}) was never set: without it \
             the device does not look at the send queue (§7.5 \"The rung bitmap\")",
            slot % 32
        )),
        Some(b) if b < counted => Err("the rung bit was set before the posted count was stored: the device may \
                                       take its turn and read the old count (§7.5)"
            .into()),
        Some(_) => Ok(format!("count {count}, then bit {} of {word:#x}", slot % 32)),
    }
}

/// Step 3: NOTIFY_REQUEST of the page read after the bit, and the page kicked when set.
fn judge_kick(trace: &[Access], page: u32) -> Result<String> {
    let notify = u64::from(page) * PAGE_SIZE + doorbell::NOTIFY_REQUEST;
    let last_db = trace
        .iter()
        .rposition(|a| matches!(a, Access::DbWrite { .. }))
        .unwrap_or(0);
    let asked = trace[last_db..].iter().find_map(|a| match a {
        Access::DbRead { offset, value } if *offset == notify => Some(*value),
        _ => None,
    });
    let kicked = trace[last_db..].iter().any(|a| matches!(a, Access::RegWrite { offset, value } if *offset == regs::DOORBELL_KICK && *value == page));
    match asked {
        None => Err(format!(
            "NOTIFY_REQUEST of page {page} (BAR2 {notify:#x}) was not read after the doorbells: the \
             device may be asleep (§4.4, §7.5)"
        )),
        Some(0) => Ok("the device was awake: no kick".into()),
        Some(_) if kicked => Ok(format!("NOTIFY_REQUEST was set: DOORBELL_KICK = {page}")),
        Some(_) => Err(format!(
            "NOTIFY_REQUEST was set and no kick followed: write the page number ({page}) to \
             DOORBELL_KICK, or a sleeping device never sees the WQE (§4.4, §4.5)"
        )),
    }
}

/// Step 5: the CQE says what happened to `w`.
fn judge_cqe(cqe: &v::Cqe, w: &Write, qpn: u32) -> Result<String> {
    let status = v::WcStatus::from_u8(cqe.status).map_or("unknown", |s| s.name());
    if cqe.status != v::WcStatus::Success as u8 {
        Err(format!(
            "the CQE's status is {status} ({}) (§7.10)",
            cqe.status
        ))
    } else if cqe.wr_id != w.wr_id || cqe.opcode != v::wc::RDMA_WRITE || cqe.qp_num != qpn {
        Err(format!(
            "the CQE returned is wr_id {:#x}, opcode {}, QP {:#x}; the WRITE's is {:#x}, {}, \
             {qpn:#x}: read the whole entry once its owner bit shows it is new (§7.6 \"CQE\")",
            cqe.wr_id,
            cqe.opcode,
            cqe.qp_num,
            w.wr_id,
            v::wc::RDMA_WRITE
        ))
    } else {
        Ok(format!("wr_id {:#x}, SUCCESS, RDMA_WRITE", cqe.wr_id))
    }
}

/// Step 6: the CQ's slot holds the consumer index.
fn judge_consumer(trace: &[Access], cq_slot: u64, consumed: u32) -> Result<String> {
    let stored: Vec<u32> = trace
        .iter()
        .filter_map(|a| match a {
            Access::DbWrite { offset, value, .. } if *offset == cq_slot => Some(*value),
            _ => None,
        })
        .collect();
    match stored.last() {
        Some(&v) if v == consumed => Ok(format!("consumer index {consumed}")),
        Some(&v) => Err(format!(
            "the CQ's slot was given {v}, not {consumed}: the consumer index counts CQEs consumed \
             in all (§7.5 \"Consuming\")"
        )),
        None => Err(format!(
            "the CQ's doorbell slot (BAR2 {cq_slot:#x}) was not written: hand the entry back, \
             or the CQ overruns after {ENTRIES} completions (§7.5, §7.7)"
        )),
    }
}

/// Runs `code` on a real function (`rnic-lab run 4`): one WRITE, its bytes and its CQE.
pub fn run(nic: &dyn Nic, code: Code) -> Result<String> {
    let mut setup = set_up(nic)?;
    let message = b"Hello from lab 4, on a real function.";
    setup.memory.mr_buf.write(0, message);
    let w = Write {
        src: 0,
        dst: 2048,
        len: message.len() as u32,
        wr_id: 0x1AB4,
    };
    run_student(|| (code.post)(nic, &mut setup, &w))?;
    let cqe = run_student(|| (code.poll)(nic, &mut setup))?;
    let seen = judge_cqe(&cqe, &w, setup.objects.qps[0].qpn)?;
    let mut arrived = vec![0u8; message.len()];
    setup.memory.mr_buf.read(w.dst as usize, &mut arrived);
    if arrived != message {
        return Err("the CQE came, but the bytes did not arrive".into());
    }
    Ok(format!("{} bytes written; CQE {seen}", message.len()))
}
