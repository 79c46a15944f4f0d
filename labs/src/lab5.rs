//! Lab 5: interrupts (docs/labs/lab5.md). The driver stops polling: it enables MSI-X,
//! arms the CQ, posts an RDMA WRITE, sleeps until the EQ's vector fires, reads the
//! completion event from the EQ, hands the EQ entry back, and only then polls the CQ.

use rnic_abi::doorbell;
use rnic_abi::pci::{self, cfg};
use rnic_abi::verbs::{self as v, event};

use crate::lab4::{self, Setup, Write};
use crate::nic::{Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};

/// The MSI-X vector the lab's EQ signals.
pub const VECTOR: u16 = 0;

/// What lab 4 set up (the EQ on [`VECTOR`]), and the counts this lab keeps.
pub struct State {
    /// Lab 4's objects, memory and counts; `lab4.memory.eq_ring` is the EQ's ring.
    pub lab4: Setup,
    /// EQEs consumed so far (free-running, §7.5).
    pub eq_consumed: u32,
    /// The CQ's arm sequence number last written (0: never armed, §7.5 "Arming").
    pub arm_seq: u32,
}

/// The student's code.
#[derive(Clone, Copy)]
pub struct Code {
    /// Turns interrupts on for the function: MSI-X in config space and the vector's
    /// entry in the MSI-X table (§3.5). The VMM's part, [`Nic::enable_msix`], is done.
    pub enable: fn(&dyn Nic) -> Result<()>,
    /// See [`WriteAndWait`].
    pub write_and_wait: WriteAndWait,
}

/// Arms the CQ, posts the write (lab 4's `post` may be used), waits for the interrupt,
/// reads the completion event and hands its EQ entry back, then polls the CQE (lab 4's
/// `poll` may be used). Returns both.
pub type WriteAndWait = fn(&dyn Nic, &mut State, &Write) -> Result<(v::Eqe, v::Cqe)>;

/// The steps, as docs/labs/lab5.md numbers them.
pub const STEPS: [&str; 7] = [
    "MSI-X Enable set, Function Mask clear",
    "the vector unmasked in the MSI-X table",
    "the CQ armed before the WQE was posted",
    "slept until the interrupt came",
    "the EQE: a completion event of the CQ",
    "the EQ's consumer index handed back",
    "a second WRITE: armed again, a second event",
];

/// Title of the report.
pub const TITLE: &str = "lab 5: interrupts";

/// Runs `code` on a fresh lab device's VF 0 and judges it.
pub fn check(code: Code) -> Report {
    let dev = LabDevice::new();
    let mut r = Report::new(TITLE, &STEPS);
    let setup = dev
        .enable_msix(1)
        .and_then(|()| lab4::set_up_with_eq_vector(&dev, u32::from(VECTOR)));
    let mut state = match setup {
        Ok(lab4) => State {
            lab4,
            eq_consumed: 0,
            arm_seq: 0,
        },
        Err(e) => {
            r.judge(0, Err(format!("the lab's own set-up failed: {e}")));
            return r;
        }
    };
    let o = state.lab4.objects;
    let message = b"Lab 5: the device says when it is done.";
    state.lab4.memory.mr_buf.write(0, message);

    // 1-2: interrupts on.
    dev.clear_trace();
    if let Err(e) = run_student(|| (code.enable)(&dev)) {
        r.stopped(e);
        return r;
    }
    let trace = dev.trace();
    let control_at = (cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL) as u16;
    let control = dev.config_read16(usize::from(control_at)).unwrap_or(0);
    let step = if control & cfg::MSIX_ENABLE == 0 {
        Err(format!(
            "MSI-X Message Control (config {control_at:#x}) is {control:#06x}: MSI-X Enable (bit \
             15) is clear, so the vector stays pending in the PBA (§3.5)"
        ))
    } else if control & cfg::MSIX_FUNCTION_MASK != 0 {
        Err(format!(
            "MSI-X Message Control is {control:#06x}: Function Mask (bit 14) is set, so every \
             vector stays pending (§3.5)"
        ))
    } else {
        Ok(format!("Message Control {control:#06x}"))
    };
    if !r.judge(0, step) {
        return r;
    }
    let entry = pci::MSIX_TABLE_OFFSET + pci::MSIX_ENTRY_SIZE * u64::from(VECTOR) + 0xC;
    let unmasked = trace.iter().any(
        |a| matches!(a, Access::RegWrite { offset, value } if *offset == entry && value & 1 == 0),
    );
    let step = if unmasked {
        Ok(format!("Vector Control (BAR0 {entry:#x}) bit 0 cleared"))
    } else {
        Err(format!(
            "vector {VECTOR}'s Vector Control (BAR0 {entry:#x}) was not written with Mask clear: \
             entries start masked, and a VMM that honours the bit never delivers (§3.5)"
        ))
    };
    if !r.judge(1, step) {
        return r;
    }

    // 3-6: one WRITE by interrupt.
    let first = Write {
        src: 0,
        dst: 1024,
        len: message.len() as u32,
        wr_id: 0x1AB5,
    };
    dev.idle();
    dev.clear_trace();
    let outcome = run_student(|| (code.write_and_wait)(&dev, &mut state, &first));
    let trace = dev.trace();
    if let Err(e) = judge_round(&mut r, &trace, &o, outcome, &first, 1) {
        if e.contains("still to write") {
            r.stopped(e);
        }
        return r;
    }

    // 7: again.
    let second = Write {
        src: 0,
        dst: 2048,
        len: message.len() as u32,
        wr_id: 0x2AB5,
    };
    dev.idle();
    dev.clear_trace();
    let outcome = run_student(|| (code.write_and_wait)(&dev, &mut state, &second));
    let trace = dev.trace();
    let mut again = Report::new(TITLE, &STEPS);
    let step = match judge_round(&mut again, &trace, &o, outcome, &second, 2) {
        Ok(()) => Ok("arm sequence 2, EQE at entry 1, EQ consumer index 2".into()),
        Err(e) => {
            let (n, cause) = again
                .failure()
                .map_or((0, e.clone()), |(n, c)| (n, c.to_string()));
            Err(format!("the second time, step {n}: {cause}"))
        }
    };
    r.judge(6, step);
    r
}

/// Steps 3-6 for the `round`-th WRITE (the arm sequence and counts it must show).
fn judge_round(
    r: &mut Report,
    trace: &[Access],
    o: &crate::lab3::Objects,
    outcome: Result<(v::Eqe, v::Cqe)>,
    w: &Write,
    round: u32,
) -> std::result::Result<(), String> {
    let (sq_page, sq_slot) = (o.qps[0].sq_doorbell.page, o.qps[0].sq_doorbell.slot);
    let posted_at = trace.iter().position(|a| {
        matches!(a, Access::DbWrite { offset, .. } if *offset == doorbell::slot_offset(sq_page, sq_slot))
    });
    let arm_word = doorbell::slot_offset(o.cq.doorbell.page, o.cq.doorbell.slot) + 4;
    let armed_at = trace.iter().position(|a| {
        matches!(a, Access::DbWrite { offset, value, .. } if *offset == arm_word && value >> 1 == round)
    });
    let step = match (armed_at, posted_at) {
        (_, None) => match &outcome {
            Err(e) => Err(e.clone()),
            Ok(_) => Err("no WQE was posted (the send queue's slot was not written)".into()),
        },
        (None, _) => {
            let written: Vec<u32> = trace
                .iter()
                .filter_map(|a| match a {
                    Access::DbWrite { offset, value, .. } if *offset == arm_word => Some(*value),
                    _ => None,
                })
                .collect();
            Err(if written.is_empty() {
                format!(
                    "the CQ was not armed: write sequence << 1 to its arm word, BAR2 \
                     {arm_word:#x} (the CQ slot + 4, §7.5 \"Arming\")"
                )
            } else {
                format!(
                    "the arm word was written {written:?}; arm number {round} is {:#x} (the \
                     sequence in bits 31:1, one more each time, §7.5 \"Arming\")",
                    round << 1
                )
            })
        }
        (Some(a), Some(p)) if a > p => Err("the CQ was armed after the WQE was posted: a CQE \
                                             written before the arm raises no event, and the \
                                             driver sleeps forever (§7.7)"
            .into()),
        _ => Ok(format!("arm word {:#x} before the doorbell", round << 1)),
    };
    if !r.judge(2, step) {
        return Err(String::new());
    }
    let waited = trace
        .iter()
        .skip(posted_at.unwrap_or(0))
        .find_map(|a| match a {
            Access::WaitInterrupt { vector, fired } if *vector == VECTOR => Some(*fired),
            _ => None,
        });
    let step = match waited {
        Some(true) => Ok(format!("vector {VECTOR} fired")),
        Some(false) => Err(format!(
            "vector {VECTOR} did not fire within a second (§7.7)"
        )),
        None => Err(format!(
            "the driver never waited for vector {VECTOR} after posting: it polled instead \
             (nic.wait_interrupt)"
        )),
    };
    if !r.judge(3, step) {
        return Err(String::new());
    }
    let (eqe, cqe) = match outcome {
        Ok(both) => both,
        Err(e) => {
            r.judge(4, Err(e.clone()));
            return Err(e);
        }
    };
    let step = if eqe.event_type != event::EVENT_COMPLETION || eqe.object != o.cq.cqn {
        Err(format!(
            "the EQE returned has type {:#x} and object {}; a completion event of the CQ is type \
             {:#x}, object {} (read entry {} once its owner bit shows it is new, §7.6, §7.7)",
            eqe.event_type,
            eqe.object,
            event::EVENT_COMPLETION,
            o.cq.cqn,
            round - 1
        ))
    } else if cqe.wr_id != w.wr_id || cqe.status != v::WcStatus::Success as u8 {
        Err(format!(
            "after the event, the CQE returned is wr_id {:#x} status {}, not the WRITE's {:#x} \
             SUCCESS",
            cqe.wr_id, cqe.status, w.wr_id
        ))
    } else {
        Ok(format!("type {:#x}, CQ {}", eqe.event_type, eqe.object))
    };
    if !r.judge(4, step) {
        return Err(String::new());
    }
    let eq_slot = doorbell::slot_offset(o.eq.doorbell.page, o.eq.doorbell.slot);
    let stored = trace.iter().rev().find_map(|a| match a {
        Access::DbWrite { offset, value, .. } if *offset == eq_slot => Some(*value),
        _ => None,
    });
    let step = match stored {
        Some(n) if n == round => Ok(format!("EQ consumer index {n}")),
        Some(n) => Err(format!(
            "the EQ's slot was given {n}, not {round}: the consumer index counts EQEs consumed in \
             all (§7.5 \"Consuming\")"
        )),
        None => Err(format!(
            "the EQ's slot (BAR2 {eq_slot:#x}, from CREATE_EQ) was not written: without it the EQ \
             overruns and drops events (§7.5, §7.7)"
        )),
    };
    if r.judge(5, step) {
        Ok(())
    } else {
        Err(String::new())
    }
}

/// Runs `code` on a real function (`rnic-lab run 5`): one WRITE completed by interrupt.
pub fn run(nic: &dyn Nic, code: Code) -> Result<String> {
    nic.enable_msix(1)?;
    let lab4 = lab4::set_up_with_eq_vector(nic, u32::from(VECTOR))?;
    let mut state = State {
        lab4,
        eq_consumed: 0,
        arm_seq: 0,
    };
    let message = b"Lab 5, on a real function.";
    state.lab4.memory.mr_buf.write(0, message);
    run_student(|| (code.enable)(nic))?;
    let w = Write {
        src: 0,
        dst: 1024,
        len: message.len() as u32,
        wr_id: 0x1AB5,
    };
    let (eqe, cqe) = run_student(|| (code.write_and_wait)(nic, &mut state, &w))?;
    if eqe.event_type != event::EVENT_COMPLETION || cqe.wr_id != w.wr_id {
        return Err(format!("unexpected EQE {eqe:?} or CQE {cqe:?}"));
    }
    Ok(format!(
        "completion event of CQ {} by interrupt; CQE wr_id {:#x} status {}",
        eqe.object, cqe.wr_id, cqe.status
    ))
}
