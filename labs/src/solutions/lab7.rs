//! Lab 7, the reference solution: a connection that survives a lossy link, sees a dead
//! one, and comes back.

use rnic_abi::cmd::Opcode;
use rnic_abi::doorbell;
use rnic_abi::verbs::{self as v, attr, QpState, WcStatus};
use zerocopy::IntoBytes;

use crate::lab2::{call, Queue};
use crate::lab3::{Connect, ENTRIES};
use crate::lab4::{Setup, Write};
use crate::nic::{Nic, Result};
use crate::solutions::lab4::{poll, post};

/// Step 1 (§7.8, §7.9 "Retransmission"): lab 3's RESET -> INIT -> RTR -> RTS, with an ACK
/// timeout of 4.096 µs × 2^10 ≈ 4.2 ms and 7 retries.
pub fn connect(nic: &dyn Nic, q: &mut dyn Queue, qpn: u32, peer: u32, gid: [u8; 16]) -> Result<()> {
    crate::solutions::lab3::connect_with_timeout(nic, q, qpn, peer, gid, 10)
}

/// Steps 2-4 (§7.5, §7.9, §7.10).
pub fn run(nic: &dyn Nic, s: &mut Setup, writes: &[Write]) -> Result<Vec<v::Cqe>> {
    let mut done = Vec::new();
    let mut posted = 0;
    let mut failed = false;
    for w in writes {
        // Step 2: a full ring (QP 0 is the only one completing on the CQ, so what is
        // outstanding is what was posted and not yet consumed) waits for a completion.
        while !failed && s.sq_posted.wrapping_sub(s.cq_consumed) >= ENTRIES {
            let cqe = poll(nic, s)?;
            failed = cqe.status != WcStatus::Success as u8;
            done.push(cqe);
        }
        // Step 4: after a failure the QP is in ERR: anything posted would only be flushed.
        if failed {
            break;
        }
        post(nic, s, w)?;
        posted += 1;
    }
    // Steps 3-4: one completion per WR posted, whatever its status.
    while done.len() < posted {
        done.push(poll(nic, s)?);
    }
    Ok(done)
}

/// Step 5 (§7.8 "Entering RESET").
pub fn recover(
    nic: &dyn Nic,
    s: &mut Setup,
    q: &mut dyn Queue,
    connect: Connect,
    gid: [u8; 16],
) -> Result<()> {
    let [a, b] = s.objects.qps;
    for qp in [a, b] {
        let req = v::ModifyQpReq {
            qpn: qp.qpn,
            attr_mask: attr::STATE,
            attr: v::QpAttr {
                qp_state: QpState::Reset as u8,
                ..Default::default()
            },
        };
        call::<()>(q, nic, Opcode::ModifyQp, req.as_bytes())?;
        // The device forgot what it took; the slots are the driver's to clear.
        for slot in [qp.sq_doorbell, qp.rq_doorbell] {
            nic.db_write(doorbell::slot_offset(slot.page, slot.slot), 0);
        }
    }
    s.sq_posted = 0;
    connect(nic, q, a.qpn, b.qpn, gid)?;
    connect(nic, q, b.qpn, a.qpn, gid)
}
