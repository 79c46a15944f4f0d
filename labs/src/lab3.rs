//! Lab 3: the objects and the QP state machine (docs/labs/lab3.md). Through a working
//! command queue (lab 2's reference solution), the driver creates an EQ, a PD, an MR, a
//! CQ and two RC QPs, and moves both QPs RESET -> INIT -> RTR -> RTS, each aimed at the
//! other.

use rnic_abi::cmd::{Opcode, QueryDeviceResp};
use rnic_abi::verbs::{self as v, attr, QpState};
use rnic_abi::PAGE_SIZE;
use rnic_driver::transport::DmaBuffer;
use zerocopy::{FromBytes, IntoBytes};

use crate::lab2::{call, Queue};
use crate::nic::{LabDevice, Nic, Result};
use crate::report::{run_student, Report};
use crate::solutions::lab2 as cmdq;

/// Entries of the EQ, the CQ and each send queue.
pub const ENTRIES: u32 = 16;
/// The doorbell page every object gets its slots in (§7.5).
pub const DB_PAGE: u32 = 1;

/// The memory a lab hands out: one zeroed page per ring or buffer, so that every page
/// list names one page (§7.3).
pub struct Memory {
    /// Room for the page lists: 8 bytes per list of one page.
    pub lists: DmaBuffer,
    /// The EQ's ring.
    pub eq_ring: DmaBuffer,
    /// The CQ's ring.
    pub cq_ring: DmaBuffer,
    /// The page the MR registers.
    pub mr_buf: DmaBuffer,
    /// Send rings of QP 0 and QP 1.
    pub sq: [DmaBuffer; 2],
    /// Receive rings of QP 0 and QP 1.
    pub rq: [DmaBuffer; 2],
}

impl Memory {
    /// Fresh pages from `nic`.
    pub fn new(nic: &dyn Nic) -> Result<Self> {
        let page = || nic.alloc_dma(PAGE_SIZE as usize);
        Ok(Self {
            lists: page()?,
            eq_ring: page()?,
            cq_ring: page()?,
            mr_buf: page()?,
            sq: [page()?, page()?],
            rq: [page()?, page()?],
        })
    }
}

/// What [`Code::create`] made, as the device answered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Objects {
    /// CREATE_EQ's answer.
    pub eq: v::CreateEqResp,
    /// The PD's number.
    pub pdn: u32,
    /// The MR's keys.
    pub mr: v::RegMrResp,
    /// The MR's iova: the device address of its first byte.
    pub iova: u64,
    /// CREATE_CQ's answer.
    pub cq: v::CreateCqResp,
    /// CREATE_QP's answers, QP 0 and QP 1.
    pub qps: [v::CreateQpResp; 2],
}

/// Creates the EQ, PD, MR (over `mr_buf`, open to local and remote writes), CQ and the
/// two RC QPs (both on the CQ).
pub type Create = fn(&dyn Nic, &mut dyn Queue, &Memory) -> Result<Objects>;

/// Moves QP `qpn` (the third argument) from RESET to RTS, aimed at QP `peer` (the
/// fourth) at `gid` (the function's own GID: both QPs are on this function).
pub type Connect = fn(&dyn Nic, &mut dyn Queue, u32, u32, [u8; 16]) -> Result<()>;

/// The student's code.
#[derive(Clone, Copy)]
pub struct Code {
    /// See [`Create`].
    pub create: Create,
    /// See [`Connect`].
    pub connect: Connect,
}

/// The steps, as docs/labs/lab3.md numbers them.
pub const STEPS: [&str; 8] = [
    "CREATE_EQ and ALLOC_PD",
    "REG_MR: one page, local and remote write",
    "CREATE_CQ",
    "two RC QPs on the CQ",
    "RESET -> INIT",
    "INIT -> RTR, aimed at the peer",
    "RTR -> RTS",
    "QUERY_QP: both in RTS, each aimed at the other",
];

/// Title of the report.
pub const TITLE: &str = "lab 3: the objects and the QP state machine";

/// One command the student's code sent.
struct Sent {
    opcode: Opcode,
    body: Vec<u8>,
    outcome: Result<Vec<u8>>,
}

/// The reference queue, keeping what went through it.
struct Logged<'q> {
    inner: &'q mut dyn Queue,
    log: Vec<Sent>,
}

impl Queue for Logged<'_> {
    fn execute(
        &mut self,
        nic: &dyn Nic,
        opcode: Opcode,
        body: &[u8],
        resp_len: usize,
    ) -> Result<Vec<u8>> {
        let outcome = self.inner.execute(nic, opcode, body, resp_len);
        self.log.push(Sent {
            opcode,
            body: body.to_vec(),
            outcome: outcome.clone(),
        });
        outcome
    }
}

/// The names of the mask bits in `mask`.
fn mask_names(mask: u32) -> String {
    let names = [
        (attr::STATE, "STATE"),
        (attr::CUR_STATE, "CUR_STATE"),
        (attr::ACCESS_FLAGS, "ACCESS_FLAGS"),
        (attr::PKEY_INDEX, "PKEY_INDEX"),
        (attr::PORT, "PORT"),
        (attr::AV, "AV"),
        (attr::PATH_MTU, "PATH_MTU"),
        (attr::TIMEOUT, "TIMEOUT"),
        (attr::RETRY_CNT, "RETRY_CNT"),
        (attr::RNR_RETRY, "RNR_RETRY"),
        (attr::RQ_PSN, "RQ_PSN"),
        (attr::MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
        (attr::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
        (attr::SQ_PSN, "SQ_PSN"),
        (attr::MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
        (attr::DEST_QPN, "DEST_QPN"),
    ];
    let list: Vec<&str> = names
        .iter()
        .filter(|(b, _)| mask & b != 0)
        .map(|(_, n)| *n)
        .collect();
    list.join(", ")
}

/// Required attributes of the transitions into INIT, RTR and RTS (§7.8).
const REQUIRED: [(QpState, u32); 3] = [
    (
        QpState::Init,
        attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS,
    ),
    (
        QpState::Rtr,
        attr::AV
            | attr::PATH_MTU
            | attr::DEST_QPN
            | attr::RQ_PSN
            | attr::MAX_DEST_RD_ATOMIC
            | attr::MIN_RNR_TIMER,
    ),
    (
        QpState::Rts,
        attr::SQ_PSN | attr::TIMEOUT | attr::RETRY_CNT | attr::RNR_RETRY | attr::MAX_QP_RD_ATOMIC,
    ),
];

/// Brings the function up with lab 2's reference queue: the queue, the lab's memory,
/// and QUERY_DEVICE's answer.
pub fn set_up(dev: &dyn Nic) -> Result<(cmdq::CommandQueue, Memory, QueryDeviceResp)> {
    let mut q = cmdq::start(dev)?;
    let info: QueryDeviceResp = call(&mut q, dev, Opcode::QueryDevice, &[])?;
    let memory = Memory::new(dev)?;
    Ok((q, memory, info))
}

/// Runs `code` on a fresh lab device's VF 0 and judges it.
pub fn check(code: Code) -> Report {
    let dev = LabDevice::new();
    let mut r = Report::new(TITLE, &STEPS);
    let (mut q, memory, info) = match set_up(&dev) {
        Ok(s) => s,
        Err(e) => {
            r.judge(0, Err(format!("the lab's own set-up failed: {e}")));
            return r;
        }
    };
    let mut logged = Logged {
        inner: &mut q,
        log: Vec::new(),
    };
    let created = run_student(|| (code.create)(&dev, &mut logged, &memory));
    let connected = created.as_ref().map_err(Clone::clone).and_then(|o| {
        let [a, b] = o.qps;
        run_student(|| (code.connect)(&dev, &mut logged, a.qpn, b.qpn, info.gid))?;
        run_student(|| (code.connect)(&dev, &mut logged, b.qpn, a.qpn, info.gid))
    });
    let log = logged.log;
    let sent = |op: Opcode| log.iter().filter(move |s| s.opcode == op);
    let ok = |op: Opcode| sent(op).filter(|s| s.outcome.is_ok()).count();
    let first_error = |op: Opcode| sent(op).find_map(|s| s.outcome.clone().err());

    // 1-4: the objects, judged from the commands and their answers.
    let step = if ok(Opcode::CreateEq) == 0 {
        Err(first_error(Opcode::CreateEq)
            .map_or("no CREATE_EQ was sent (§7.4, §7.15 step 2)".into(), |e| {
                format!("CREATE_EQ failed: {e} (§7.4)")
            }))
    } else if ok(Opcode::AllocPd) == 0 {
        Err("no PD was allocated (ALLOC_PD, §7.4)".into())
    } else {
        Ok("EQ and PD".into())
    };
    if !r.judge(0, step) {
        return stopped(r, created.err());
    }
    let mr = sent(Opcode::RegMr).find_map(|s| {
        v::RegMrReq::read_from_prefix(&s.body)
            .ok()
            .map(|(m, _)| (m, s.outcome.clone()))
    });
    let step =
        match mr {
            None => Err("no REG_MR was sent (§7.4)".into()),
            Some((_, Err(e))) => Err(format!("REG_MR failed: {e} (§7.3, §7.4)")),
            Some((m, Ok(_)))
                if m.access & v::ACCESS_REMOTE_WRITE == 0
                    || m.access & v::ACCESS_LOCAL_WRITE == 0 =>
            {
                Err(format!(
            "the MR's access {:#x} lacks {}: the peer writes into it, and remote write needs \
             local write (§7.4)",
            m.access,
            if m.access & v::ACCESS_REMOTE_WRITE == 0 { "REMOTE_WRITE" } else { "LOCAL_WRITE" }
        ))
            }
            Some((m, Ok(_))) if m.length != PAGE_SIZE || m.iova != memory.mr_buf.device_addr(0) => {
                Err(format!(
                    "the MR covers {:#x} bytes at iova {:#x}, not mr_buf's page at {:#x}",
                    m.length,
                    m.iova,
                    memory.mr_buf.device_addr(0)
                ))
            }
            Some(_) => Ok("one page, LOCAL_WRITE | REMOTE_WRITE".into()),
        };
    if !r.judge(1, step) {
        return stopped(r, created.err());
    }
    let step = if ok(Opcode::CreateCq) == 0 {
        Err(
            first_error(Opcode::CreateCq).map_or("no CREATE_CQ was sent (§7.4)".into(), |e| {
                format!("CREATE_CQ failed: {e} (§7.3, §7.4)")
            }),
        )
    } else {
        Ok("CQ".into())
    };
    if !r.judge(2, step) {
        return stopped(r, created.err());
    }
    let objects = match created {
        Ok(o) => o,
        Err(e) => {
            r.judge(3, Err(e));
            return r;
        }
    };
    let qps: Vec<v::CreateQpReq> = sent(Opcode::CreateQp)
        .filter(|s| s.outcome.is_ok())
        .filter_map(|s| {
            v::CreateQpReq::read_from_prefix(&s.body)
                .ok()
                .map(|(q, _)| q)
        })
        .collect();
    let step = if qps.len() != 2 {
        Err(first_error(Opcode::CreateQp).map_or(
            format!("{} QPs were created, not 2 (§7.4)", qps.len()),
            |e| format!("CREATE_QP failed: {e} (§7.4, §7.6)"),
        ))
    } else if let Some(q) = qps.iter().find(|q| q.qp_type != v::QPT_RC) {
        Err(format!(
            "a QP of type {}, not RC ({}) (§7.4)",
            q.qp_type,
            v::QPT_RC
        ))
    } else if let Some(q) = qps
        .iter()
        .find(|q| q.send_cqn != objects.cq.cqn || q.recv_cqn != objects.cq.cqn)
    {
        Err(format!(
            "a QP completes on CQs {} and {}, not on the CQ {} (§7.4)",
            q.send_cqn, q.recv_cqn, objects.cq.cqn
        ))
    } else {
        Ok(format!(
            "QPs {:#x} and {:#x}",
            objects.qps[0].qpn, objects.qps[1].qpn
        ))
    };
    if !r.judge(3, step) {
        return r;
    }

    // 5-7: each transition, from the MODIFY_QP commands. A QP refused on its way stops
    // the other's: the earlier transitions are judged on the commands that were sent.
    let refused: Vec<u8> = sent(Opcode::ModifyQp)
        .filter(|s| s.outcome.is_err())
        .filter_map(|s| {
            v::ModifyQpReq::read_from_prefix(&s.body)
                .ok()
                .map(|(m, _)| m.attr.qp_state)
        })
        .collect();
    let refused_later = |state: QpState| refused.iter().any(|&to| to > state as u8);
    for (i, (state, required)) in REQUIRED.into_iter().enumerate() {
        let tries: Vec<(v::ModifyQpReq, &Result<Vec<u8>>)> = sent(Opcode::ModifyQp)
            .filter_map(|s| {
                v::ModifyQpReq::read_from_prefix(&s.body)
                    .ok()
                    .map(|(m, _)| (m, &s.outcome))
            })
            .filter(|(m, _)| m.attr.qp_state == state as u8 && m.attr_mask & attr::STATE != 0)
            .collect();
        let step = if tries.is_empty() {
            Err(match &connected {
                Err(e) => e.clone(),
                Ok(()) => format!("no MODIFY_QP to {state:?} (mask with STATE, §7.8)"),
            })
        } else if let Some((m, Err(e))) = tries.iter().find(|(_, o)| o.is_err()) {
            let missing = required & !m.attr_mask;
            Err(if missing != 0 {
                format!("QP {:#x} to {state:?} was refused ({e}): attr_mask lacks {} (required for this transition, §7.8)", m.qpn, mask_names(missing))
            } else {
                format!("QP {:#x} to {state:?} was refused: {e} (§7.4, §7.8)", m.qpn)
            })
        } else if tries.len() < 2 && !refused_later(state) {
            Err(format!("only one QP was moved to {state:?}"))
        } else {
            Ok(format!(
                "both QPs, mask {}",
                mask_names(tries[0].0.attr_mask)
            ))
        };
        if !r.judge(4 + i, step) {
            return r;
        }
    }
    let step = (|| {
        for (me, peer) in [
            (objects.qps[0].qpn, objects.qps[1].qpn),
            (objects.qps[1].qpn, objects.qps[0].qpn),
        ] {
            let req = v::ObjectReq {
                handle: me,
                reserved: 0,
            };
            let got: v::QueryQpResp = call(&mut q, &dev, Opcode::QueryQp, req.as_bytes())?;
            if got.attr.qp_state != QpState::Rts as u8 {
                return Err(format!(
                    "QP {me:#x} is in state {}, not RTS",
                    got.attr.qp_state
                ));
            }
            if got.attr.dest_qp_num != peer {
                return Err(format!(
                    "QP {me:#x} is aimed at QP {:#x}, not {peer:#x}",
                    got.attr.dest_qp_num
                ));
            }
            if got.attr.dgid != info.gid {
                return Err(format!(
                    "QP {me:#x}'s destination GID is not the function's own (QUERY_DEVICE's gid)"
                ));
            }
        }
        Ok("RTS, each aimed at the other".to_string())
    })();
    r.judge(7, step);
    r
}

/// The report, with the student's error on the step after the last judged one when the
/// code stopped early.
fn stopped(mut r: Report, error: Option<String>) -> Report {
    if let Some(e) = error.filter(|e| e.contains("still to write")) {
        r.stopped(e);
    }
    r
}

/// Runs `code` on a real function (`rnic-lab run 3`): the QPs' states as QUERY_QP reports
/// them.
pub fn run(nic: &dyn Nic, code: Code) -> Result<String> {
    let (mut q, memory, info) = set_up(nic)?;
    let o = run_student(|| (code.create)(nic, &mut q, &memory))?;
    let [a, b] = o.qps;
    run_student(|| (code.connect)(nic, &mut q, a.qpn, b.qpn, info.gid))?;
    run_student(|| (code.connect)(nic, &mut q, b.qpn, a.qpn, info.gid))?;
    let mut states = Vec::new();
    for qpn in [a.qpn, b.qpn] {
        let req = v::ObjectReq {
            handle: qpn,
            reserved: 0,
        };
        let got: v::QueryQpResp = call(&mut q, nic, Opcode::QueryQp, req.as_bytes())?;
        let state = QpState::from_u8(got.attr.qp_state);
        states.push(format!(
            "QP {qpn:#x} in {} aimed at {:#x}",
            state.map_or("an unknown state".into(), |s| format!("{s:?}")),
            got.attr.dest_qp_num
        ));
    }
    Ok(states.join(", "))
}
