//! Lab 2: the command queue (docs/labs/lab2.md). The driver resets the function, starts
//! its command queue (a virtio split ring in driver memory) and sends commands through
//! it, one at a time.

use rnic_abi::cmd::{Opcode, QueryDeviceResp};
use rnic_abi::pci::cfg;
use rnic_abi::{doorbell, regs};
use zerocopy::{FromBytes, Immutable};

use crate::nic::{Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};

/// A running command queue.
pub trait Queue {
    /// Sends command `opcode` with request `body` (the structure after the `CmdHeader`)
    /// and waits for the answer: the `resp_len` bytes after the `RespHeader`, or an error
    /// that names the status when it is not `OK` (§6.7).
    fn execute(
        &mut self,
        nic: &dyn Nic,
        opcode: Opcode,
        body: &[u8],
        resp_len: usize,
    ) -> Result<Vec<u8>>;
}

/// Sends one command and reads its response as an `R` (`()` for none).
pub fn call<R: FromBytes + Immutable>(
    q: &mut dyn Queue,
    nic: &dyn Nic,
    opcode: Opcode,
    body: &[u8],
) -> Result<R> {
    let bytes = q.execute(nic, opcode, body, size_of::<R>())?;
    R::read_from_bytes(&bytes[..size_of::<R>().min(bytes.len())])
        .map_err(|_| format!("{opcode:?}: {} bytes of response", bytes.len()))
}

/// The student's code: bring the function up and start its command queue.
pub type Start<Q> = fn(&dyn Nic) -> Result<Q>;

/// The steps, as docs/labs/lab2.md numbers them.
pub const STEPS: [&str; 7] = [
    "reset, READY, then Bus Master Enable",
    "ring registers, then CMDQ_CONTROL.ENABLE",
    "QUERY_DEVICE answered",
    "CMDQ_DOORBELL after the entry and avail->idx",
    "a kick when the device asked for one",
    "around the ring: more commands than entries",
    "a failed command reports its status",
];

/// Title of the report.
pub const TITLE: &str = "lab 2: the command queue";

/// Runs `start` on a fresh lab device's VF 0, sends commands through the queue it
/// returns, and judges it.
pub fn check<Q: Queue>(start: Start<Q>) -> Report {
    let dev = LabDevice::new();
    let mut r = Report::new(TITLE, &STEPS);
    let mut q = match run_student(|| start(&dev)) {
        Ok(q) => q,
        Err(e) if e.contains("still to write") => {
            r.stopped(e);
            return r;
        }
        Err(e) => {
            // Say why it did not start when the trace shows it.
            let trace = dev.trace();
            if r.judge(0, judge_reset(&trace)) && r.judge(1, judge_start(&trace)) {
                r.stopped(e);
            }
            return r;
        }
    };
    let trace = dev.trace();
    if !r.judge(0, judge_reset(&trace)) {
        return r;
    }
    if !r.judge(1, judge_start(&trace)) {
        return r;
    }

    // 3: the first command.
    let (avail, size) = ring_of(&trace);
    dev.watch("avail", avail, 4 + 2 * usize::from(size));
    dev.idle();
    dev.clear_trace();
    let step = match run_student(|| call::<QueryDeviceResp>(&mut q, &dev, Opcode::QueryDevice, &[]))
    {
        Err(e) => Err(format!("QUERY_DEVICE failed: {e}")),
        Ok(resp)
            if resp.abi_major != rnic_abi::ABI_MAJOR || resp.abi_minor != rnic_abi::ABI_MINOR =>
        {
            Err(format!(
                "QUERY_DEVICE's response says ABI {}.{}: the response was not read from after \
                 the RespHeader (§6.6)",
                resp.abi_major, resp.abi_minor
            ))
        }
        Ok(resp) => Ok(format!(
            "ABI {}.{}, caps {:#x}",
            resp.abi_major, resp.abi_minor, resp.caps
        )),
    };
    let first = dev.trace();
    if !r.judge(2, step) {
        return r;
    }

    // 4, 5: how the doorbell was rung.
    if !r.judge(3, judge_doorbells(&first, size)) || !r.judge(4, judge_kicks(&first)) {
        return r;
    }

    // 6: around the ring.
    let count = 2 * u32::from(size) + 3;
    let step = (0..count)
        .try_for_each(|i| {
            if i % 2 == 0 {
                dev.idle();
            }
            run_student(|| call::<QueryDeviceResp>(&mut q, &dev, Opcode::QueryDevice, &[]))
                .map(|_| ())
                .map_err(|e| format!("command {} of {count}: {e}", i + 2))
        })
        .and_then(|()| judge_doorbells(&dev.trace(), size))
        .map(|s| format!("{count} more commands on a ring of {size}; {s}"));
    if !r.judge(5, step) {
        return r;
    }

    // 7: a command the device refuses (DESTROY_CQ of a CQ that does not exist).
    let body = rnic_abi::verbs::ObjectReq {
        handle: 0xDEAD,
        reserved: 0,
    };
    dev.idle();
    let step = match run_student(|| {
        call::<()>(
            &mut q,
            &dev,
            Opcode::DestroyCq,
            zerocopy::IntoBytes::as_bytes(&body),
        )
    }) {
        Ok(()) => Err(
            "DESTROY_CQ of a CQ that does not exist succeeded: read the status in \
                       the RespHeader (§6.7)"
                .into(),
        ),
        Err(e)
            if ["NotFound", "NOT_FOUND", "status 9"]
                .iter()
                .any(|s| e.contains(s)) =>
        {
            Ok(format!("refused: {e}"))
        }
        Err(e) => Err(format!(
            "the error does not name the status NOT_FOUND (9): {e}"
        )),
    };
    r.judge(6, step);
    r
}

fn position(trace: &[Access], f: impl Fn(&Access) -> bool) -> Option<usize> {
    trace.iter().position(f)
}

fn reg_write_at(trace: &[Access], reg: u64) -> Option<usize> {
    position(
        trace,
        |a| matches!(a, Access::RegWrite { offset, .. } if *offset == reg),
    )
}

/// Step 1: CONTROL_RESET, then DEVICE_STATUS.READY seen, then Bus Master Enable.
fn judge_reset(trace: &[Access]) -> std::result::Result<String, String> {
    let reset = position(trace, |a| {
        matches!(a, Access::RegWrite { offset, value }
            if *offset == regs::DEVICE_CONTROL && value & regs::CONTROL_RESET != 0)
    })
    .ok_or(
        "the function was not reset: write CONTROL_RESET to DEVICE_CONTROL first (§8, §10 step 4)",
    )?;
    let ready = position(trace, |a| {
        matches!(a, Access::RegRead { offset, value }
            if *offset == regs::DEVICE_STATUS && value & regs::STATUS_READY != 0)
    })
    .filter(|&i| i > reset)
    .ok_or("DEVICE_STATUS.READY was never seen after the reset: wait for it (§10 step 5)")?;
    let master = position(trace, |a| {
        matches!(a, Access::ConfigWrite { offset, value, .. }
            if *offset == cfg::COMMAND as u16 && *value as u16 & cfg::COMMAND_BUS_MASTER != 0)
    })
    .ok_or(
        "Bus Master Enable (COMMAND bit 2) was never set: without it the device may not \
            read the rings (§5.5)",
    )?;
    if master < ready {
        return Err(
            "Bus Master Enable was set before the reset finished: the reset clears it \
                    (§5.5, §8)"
                .into(),
        );
    }
    if reg_write_at(trace, regs::CMDQ_CONTROL).is_some_and(|e| e < master) {
        return Err("the command queue was enabled before Bus Master Enable (§5.5)".into());
    }
    Ok("reset, READY, bus master".into())
}

/// Step 2: every ring register before ENABLE, and the queue running.
pub(crate) fn judge_start(trace: &[Access]) -> std::result::Result<String, String> {
    let enable = position(trace, |a| {
        matches!(a, Access::RegWrite { offset, value }
            if *offset == regs::CMDQ_CONTROL && value & regs::CMDQ_ENABLE != 0)
    })
    .ok_or("CMDQ_CONTROL.ENABLE was never written (§6.1)")?;
    let needed = [
        (regs::CMDQ_DESC_LO, "CMDQ_DESC_LO"),
        (regs::CMDQ_DESC_LO + 4, "CMDQ_DESC_HI"),
        (regs::CMDQ_AVAIL_LO, "CMDQ_AVAIL_LO"),
        (regs::CMDQ_AVAIL_LO + 4, "CMDQ_AVAIL_HI"),
        (regs::CMDQ_USED_LO, "CMDQ_USED_LO"),
        (regs::CMDQ_USED_LO + 4, "CMDQ_USED_HI"),
        (regs::CMDQ_SIZE, "CMDQ_SIZE"),
    ];
    let late: Vec<&str> = needed
        .iter()
        .filter(|(reg, _)| reg_write_at(trace, *reg).is_none_or(|i| i > enable))
        .map(|(_, name)| *name)
        .collect();
    if !late.is_empty() {
        return Err(format!(
            "the command queue never started: CMDQ_CONTROL.ENABLE was written before {} \
             (the device checks the ring at ENABLE, §6.1, §6.2)",
            late.join(", ")
        ));
    }
    let running = trace.iter().skip(enable).any(|a| {
        matches!(a, Access::RegRead { offset, value }
            if *offset == regs::DEVICE_STATUS && value & regs::STATUS_CMDQ_RUNNING != 0)
    });
    if !running {
        return Err(
            "DEVICE_STATUS.CMDQ_RUNNING was not seen after ENABLE: check it, and \
                    ERROR_CODE when it is clear (§6.2)"
                .into(),
        );
    }
    Ok("rings, size, ENABLE, running".into())
}

/// Where the available ring is and how many entries the queue has, from the register
/// writes.
fn ring_of(trace: &[Access]) -> (u64, u16) {
    let last = |reg| {
        trace
            .iter()
            .rev()
            .find_map(|a| match a {
                Access::RegWrite { offset, value } if *offset == reg => Some(*value),
                _ => None,
            })
            .unwrap_or(0)
    };
    let avail =
        u64::from(last(regs::CMDQ_AVAIL_LO)) | u64::from(last(regs::CMDQ_AVAIL_LO + 4)) << 32;
    (avail, last(regs::CMDQ_SIZE) as u16)
}

/// Step 4: at every CMDQ_DOORBELL store, avail->idx already holds the value stored.
fn judge_doorbells(trace: &[Access], size: u16) -> std::result::Result<String, String> {
    let mut rung = 0;
    for a in trace {
        let Access::DbWrite {
            offset,
            value,
            watched,
        } = a
        else {
            continue;
        };
        if *offset != doorbell::CMDQ_DOORBELL {
            continue;
        }
        rung += 1;
        let avail = &watched[0].1;
        let idx = u16::from_le_bytes([avail[2], avail[3]]);
        if u32::from(idx) != *value & 0xFFFF {
            return Err(format!(
                "CMDQ_DOORBELL was rung with {value} while avail->idx was {idx}: store the ring \
                 entry and avail->idx before the doorbell (§6.10)"
            ));
        }
        let slot = usize::from(idx.wrapping_sub(1) % size.max(1));
        let head = u16::from_le_bytes([avail[4 + 2 * slot], avail[5 + 2 * slot]]);
        if head >= size {
            return Err(format!(
                "avail->ring[{slot}] holds {head}, not a descriptor of the {size}-entry table \
                 (§6.3)"
            ));
        }
    }
    if rung == 0 {
        return Err("CMDQ_DOORBELL (doorbell BAR 0x040) was never written (§6.10)".into());
    }
    Ok(format!("{rung} doorbells, each after its avail->idx"))
}

/// Step 5: NOTIFY_REQUEST read after each doorbell, and a kick when it was set.
fn judge_kicks(trace: &[Access]) -> std::result::Result<String, String> {
    let mut kicks = 0;
    for (i, a) in trace.iter().enumerate() {
        let Access::DbWrite { offset, .. } = a else {
            continue;
        };
        if *offset != doorbell::CMDQ_DOORBELL {
            continue;
        }
        let rest = &trace[i + 1..];
        let end = rest
            .iter()
            .position(|a| matches!(a, Access::Pause { .. } | Access::DbWrite { .. }))
            .unwrap_or(rest.len());
        let after = &rest[..end];
        let asked = after.iter().find_map(|a| match a {
            Access::DbRead { offset, value } if *offset == doorbell::NOTIFY_REQUEST => Some(*value),
            _ => None,
        });
        let kicked = after.iter().any(|a| {
            matches!(a, Access::RegWrite { offset, value } if *offset == regs::DOORBELL_KICK && *value == 0)
        });
        match asked {
            None => {
                return Err("NOTIFY_REQUEST (doorbell BAR 0x000) was not read after \
                            CMDQ_DOORBELL: the device may be asleep (§4.4)"
                    .into())
            }
            Some(v) if v != 0 && !kicked => {
                return Err(
                    "NOTIFY_REQUEST was set after CMDQ_DOORBELL and no kick followed \
                            (DOORBELL_KICK = 0): a sleeping device never sees the command \
                            (§4.4, §4.5)"
                        .into(),
                )
            }
            Some(v) if v != 0 => kicks += 1,
            _ => {}
        }
    }
    Ok(format!(
        "NOTIFY_REQUEST checked after each doorbell, {kicks} kicks"
    ))
}

/// Runs `start` on a real function (`rnic-lab run 2`) and sends QUERY_DEVICE through the
/// queue it returns.
pub fn run<Q: Queue>(nic: &dyn Nic, start: Start<Q>) -> Result<String> {
    let mut q = run_student(|| start(nic))?;
    let info = run_student(|| call::<QueryDeviceResp>(&mut q, nic, Opcode::QueryDevice, &[]))?;
    Ok(format!(
        "the command queue runs; QUERY_DEVICE: ABI {}.{}, caps {:#x}",
        info.abi_major, info.abi_minor, info.caps
    ))
}
