//! Lab 8: migrating a live QP between VFs (docs/labs/lab8.md). The driver holds VF 0 and
//! VF 1 of one guest (one memory for both); an RC QP of VF 0 talks to a peer on VF 2
//! while the PF's administrator, through the student's code, moves it to VF 1 with
//! `MIGRATE_QP` (§12.8). The driver then takes `QP_DEPARTED` on VF 0, `QP_ARRIVED` on
//! VF 1, adopts the QP there and goes on posting on its new doorbells; the peer must see
//! nothing, and every work request must complete exactly once.
//!
//! The checker holds the PF (its admin queue runs the student's command: the admin queue
//! itself is lab 2's command queue at other offsets, §12.2) and the peer (the guest
//! driver's verbs on VF 2). Posting and polling are given ([`post_send`],
//! [`post_recv`], [`poll`]: lab 4's work); they follow the [`Mover`]'s record of where the
//! QP is and which slots it has, which is what the student keeps right.

use std::sync::Arc;

use rnic_abi::cmd::Opcode;
use rnic_abi::migration::{AdoptQpResp, MigrateQpReq, MigrateQpResp};
use rnic_abi::verbs::{self as v, event, DoorbellSlot, PageList, QpState};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use rnic_driver::transport::DmaBuffer;
use rnic_driver::verbs::{self as dv, Context, Cq, Mr, Pd, Qp, QpCaps, RecvWr, SendWr};
use rnic_harness::bench::Bench;
use zerocopy::{FromBytes, IntoBytes};

use crate::lab2::{call, Queue};
use crate::lab3::{DB_PAGE, ENTRIES};
use crate::nic::{wait_for, Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};
use crate::solutions::lab2 as cmdq;
use crate::solutions::lab3 as objects;

/// Bytes of each message, either way.
pub const MSG: usize = 64;
/// Offset in the mover's MR of the messages it sends; the receive buffers come first.
const SEND_AREA: usize = 2048;

/// The PF's admin queue (§12.2), as the checker runs it for the student's code.
pub trait Admin {
    /// Sends admin command `opcode` with request `body` and waits for its answer: the
    /// `resp_len` bytes after the `RespHeader`, or an error naming the status (§6.7).
    fn command(&mut self, opcode: Opcode, body: &[u8], resp_len: usize) -> Result<Vec<u8>>;
}

/// One function's event queue, as the driver keeps it (§7.6 "EQE", §7.7).
pub struct EventQueue {
    /// The ring of [`ENTRIES`] EQEs.
    pub ring: DmaBuffer,
    /// CREATE_EQ's answer: the consumer-index slot.
    pub eq: v::CreateEqResp,
    /// EQEs consumed so far (free-running).
    pub consumed: u32,
}

/// The driver's record of the QP that moves, and of the guest's two functions.
pub struct Mover {
    /// The VF numbers of the guest's two functions: the QP starts on `vfs[0]`.
    pub vfs: [u32; 2],
    /// The doorbell page the guest's driver puts its queues in, on either function.
    pub page: u32,
    /// The QP's number (it keeps it, §12.8).
    pub qpn: u32,
    /// Its PD's number on the function it is on.
    pub pdn: u32,
    /// Its CQ (send and receive) on the function it is on.
    pub cqn: u32,
    /// Which of the two functions the driver rings the QP's doorbells on: `Some(0)` VF 0,
    /// `Some(1)` VF 1, `None` while it is on neither for the driver (between
    /// `QP_DEPARTED` and the adoption): work posted then waits in the rings.
    pub at: Option<usize>,
    /// The send queue's doorbell slot on that function.
    pub sq_doorbell: DoorbellSlot,
    /// The receive queue's.
    pub rq_doorbell: DoorbellSlot,
    /// The CQ's.
    pub cq_doorbell: DoorbellSlot,
    /// Send WQEs posted so far (free-running, §7.5).
    pub sq_posted: u32,
    /// Receive WQEs posted so far.
    pub rq_posted: u32,
    /// CQEs consumed so far.
    pub cq_consumed: u32,
    /// The event queues of VF 0 and VF 1.
    pub eqs: [EventQueue; 2],
    /// The rings and the MR's page (in the guest's memory: they do not move).
    pub sq: DmaBuffer,
    /// The receive ring.
    pub rq: DmaBuffer,
    /// The CQ's ring.
    pub cq_ring: DmaBuffer,
    /// The MR's page: receive buffers at `i * MSG`, messages to send from 2048.
    pub mr_buf: DmaBuffer,
    /// The MR's lkey (unchanged by the move).
    pub lkey: u32,
}

/// The student's code.
#[derive(Clone, Copy)]
pub struct Code {
    /// Moves the QP from VF 0 to VF 1 through the PF's admin queue: MIGRATE_QP and its
    /// answer.
    pub migrate: fn(&mut dyn Admin, &Mover) -> Result<MigrateQpResp>,
    /// On VF 0 (the `Nic`): takes the `QP_DEPARTED` event and stops ringing there.
    pub depart: fn(&dyn Nic, &mut Mover) -> Result<()>,
    /// On VF 1 (the `Nic`, with its command queue): takes `QP_ARRIVED`, adopts the QP
    /// and announces the driver's counts on its new doorbells.
    pub adopt: fn(&dyn Nic, &mut dyn Queue, &mut Mover) -> Result<()>,
}

/// The steps, as docs/labs/lab8.md numbers them.
pub const STEPS: [&str; 8] = [
    "MIGRATE_QP: VF 0 to VF 1, the QP, its CQ, a page",
    "the answer: the QP's PD and CQ on VF 1",
    "QP_DEPARTED taken on VF 0, its doorbells left",
    "QP_ARRIVED taken on VF 1, then ADOPT_QP",
    "the counts announced on the new doorbells",
    "every WR completes exactly once",
    "the peer saw nothing: messages in order, RTS",
    "VF 0 has no QP; posting goes on at VF 1",
];

/// Title of the report.
pub const TITLE: &str = "lab 8: migrating a live QP between VFs";

/// Member ids of the functions (§12.1): 0 the PF, n VF n - 1.
const PF: usize = 0;
/// The peer's function in the bench: VF 2.
const PEER: usize = 3;

/// A ring's byte offset of entry `count % ENTRIES` with entries of `stride` bytes.
fn entry(count: u32, stride: u32) -> usize {
    (count % ENTRIES * stride) as usize
}

/// Rings a send or receive queue's slot with `count` on `nic` (§7.5 "Posting", §4.4).
pub fn ring(nic: &dyn Nic, slot: DoorbellSlot, count: u32) -> Result<()> {
    nic.db_write(doorbell::slot_offset(slot.page, slot.slot), count);
    let word =
        u64::from(slot.page) * PAGE_SIZE + doorbell::RUNG_BITMAP + 4 * u64::from(slot.slot / 32);
    nic.db_write(word, nic.db_read(word) | 1 << (slot.slot % 32));
    if nic.db_read(u64::from(slot.page) * PAGE_SIZE + doorbell::NOTIFY_REQUEST) != 0 {
        nic.reg_write(regs::DOORBELL_KICK, slot.page)?;
    }
    Ok(())
}

/// Posts a signaled SEND of message `i` (`MSG` bytes at `SEND_AREA + i * MSG` of the MR),
/// `wr_id` `0x800 + i`, and rings the send queue where the driver believes the QP is
/// (nowhere when [`Mover::at`] is `None`). The given part of the lab (lab 4's work).
pub fn post_send(nics: [&dyn Nic; 2], m: &mut Mover, i: u32) -> Result<()> {
    let wqe = v::SendWqe {
        wr_id: 0x800 + u64::from(i),
        opcode: v::wr::SEND,
        flags: v::send_flags::SIGNALED,
        num_sge: 1,
        ..Default::default()
    };
    let sge = v::Sge {
        addr: m.mr_buf.device_addr(SEND_AREA + i as usize * MSG),
        length: MSG as u32,
        lkey: m.lkey,
    };
    let at = entry(m.sq_posted, v::sq_stride(1, 0));
    m.sq.write(at, wqe.as_bytes());
    m.sq.write(at + size_of::<v::SendWqe>(), sge.as_bytes());
    m.sq_posted = m.sq_posted.wrapping_add(1);
    match m.at {
        Some(f) => ring(nics[f], m.sq_doorbell, m.sq_posted),
        None => Ok(()),
    }
}

/// Posts receive `i` (`MSG` bytes at `i * MSG` of the MR, `wr_id` `0x100 + i`), as
/// [`post_send`] does.
pub fn post_recv(nics: [&dyn Nic; 2], m: &mut Mover, i: u32) -> Result<()> {
    let wqe = v::RecvWqe {
        wr_id: 0x100 + u64::from(i),
        num_sge: 1,
        reserved: 0,
    };
    let sge = v::Sge {
        addr: m.mr_buf.device_addr(i as usize * MSG),
        length: MSG as u32,
        lkey: m.lkey,
    };
    let at = entry(m.rq_posted, v::rq_stride(1));
    m.rq.write(at, wqe.as_bytes());
    m.rq.write(at + size_of::<v::RecvWqe>(), sge.as_bytes());
    m.rq_posted = m.rq_posted.wrapping_add(1);
    match m.at {
        Some(f) => ring(nics[f], m.rq_doorbell, m.rq_posted),
        None => Ok(()),
    }
}

/// Waits for the next CQE, reads it and hands it back on the CQ's slot where the driver
/// believes the QP is (lab 4's poll).
pub fn poll(nics: [&dyn Nic; 2], m: &mut Mover) -> Result<v::Cqe> {
    let nic = nics[m.at.unwrap_or(0)];
    let at = entry(m.cq_consumed, size_of::<v::Cqe>() as u32);
    let phase = v::owner_phase(m.cq_consumed, ENTRIES);
    let ring = &m.cq_ring;
    wait_for(nic, "a completion", || {
        Ok((ring.load_u32(at + 0x18) >> 24) as u8 & 1 == phase)
    })?;
    let mut bytes = [0u8; size_of::<v::Cqe>()];
    m.cq_ring.read(at, &mut bytes);
    let cqe = v::Cqe::read_from_bytes(&bytes).map_err(|_| "CQE size")?;
    m.cq_consumed = m.cq_consumed.wrapping_add(1);
    if let Some(f) = m.at {
        let slot = m.cq_doorbell;
        nics[f].db_write(doorbell::slot_offset(slot.page, slot.slot), m.cq_consumed);
    }
    Ok(cqe)
}

/// Whether the CQ holds a CQE the driver has not consumed.
fn cqe_waiting(m: &Mover) -> bool {
    let at = entry(m.cq_consumed, size_of::<v::Cqe>() as u32);
    (m.cq_ring.load_u32(at + 0x18) >> 24) as u8 & 1 == v::owner_phase(m.cq_consumed, ENTRIES)
}

/// The PF seen through lab 2's command queue code: the admin queue is the command queue
/// with its ring registers [`regs::ADMINQ_OFFSET`] higher, its own status bit and its own
/// doorbell (§12.2), so this view moves those accesses there.
struct AdminView<'a>(&'a dyn Nic);

impl AdminView<'_> {
    fn map(offset: u64) -> u64 {
        match offset {
            regs::CMDQ_DESC_LO..=regs::CMDQ_CONTROL if offset != regs::CMDQ_MAX_SIZE => {
                offset + regs::ADMINQ_OFFSET
            }
            regs::ERROR_CODE => regs::ADMINQ_ERROR_CODE,
            _ => offset,
        }
    }
}

impl Nic for AdminView<'_> {
    fn describe(&self) -> String {
        format!("the admin queue of {}", self.0.describe())
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        self.0.config_read(offset, buf)
    }
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        self.0.config_write(offset, data)
    }
    fn reg_read(&self, offset: u64) -> Result<u32> {
        let value = self.0.reg_read(Self::map(offset))?;
        Ok(if offset == regs::DEVICE_STATUS {
            let value = value & !regs::STATUS_CMDQ_RUNNING;
            if value & regs::STATUS_ADMINQ_RUNNING != 0 {
                value | regs::STATUS_CMDQ_RUNNING
            } else {
                value
            }
        } else {
            value
        })
    }
    fn reg_write(&self, offset: u64, value: u32) -> Result<()> {
        self.0.reg_write(Self::map(offset), value)
    }
    fn db_read(&self, offset: u64) -> u32 {
        self.0.db_read(offset)
    }
    fn db_write(&self, offset: u64, value: u32) {
        let offset = if offset == doorbell::CMDQ_DOORBELL {
            doorbell::ADMINQ_DOORBELL
        } else {
            offset
        };
        self.0.db_write(offset, value)
    }
    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.0.alloc_dma(size)
    }
    fn enable_msix(&self, vectors: u16) -> Result<()> {
        self.0.enable_msix(vectors)
    }
    fn wait_interrupt(&self, vector: u16) -> Result<bool> {
        self.0.wait_interrupt(vector)
    }
    fn pause(&self) {
        self.0.pause()
    }
}

/// The PF's admin queue, run by the checker, keeping every command and its outcome.
struct PfAdmin<'a> {
    pf: &'a dyn Nic,
    q: cmdq::CommandQueue,
    log: Vec<(Opcode, Vec<u8>, Result<Vec<u8>>)>,
}

impl Admin for PfAdmin<'_> {
    fn command(&mut self, opcode: Opcode, body: &[u8], resp_len: usize) -> Result<Vec<u8>> {
        let outcome = self.q.execute(&AdminView(self.pf), opcode, body, resp_len);
        self.log.push((opcode, body.to_vec(), outcome.clone()));
        outcome
    }
}

/// A command queue keeping what went through it.
struct Logged<'q> {
    inner: &'q mut dyn Queue,
    log: Vec<(Opcode, Vec<u8>, Result<Vec<u8>>)>,
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
        self.log.push((opcode, body.to_vec(), outcome.clone()));
        outcome
    }
}

/// The peer on VF 2, through the guest driver's verbs.
struct Peer {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
    ctx: Context,
}

/// Everything the checker set up.
struct World<'a> {
    admin: PfAdmin<'a>,
    q: [cmdq::CommandQueue; 2],
    m: Mover,
    peer: Peer,
}

fn failed<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |err| format!("{what}: {err}")
}

/// A one-page page list for `buf`, kept in entry `index` of `lists`.
fn page_list(lists: &DmaBuffer, index: usize, buf: &DmaBuffer) -> PageList {
    lists.write(8 * index, &buf.device_addr(0).to_le_bytes());
    PageList::flat(lists.device_addr(8 * index), 1)
}

/// An EQ on `nic`, polled, in the lab's doorbell page.
fn event_queue(
    nic: &dyn Nic,
    q: &mut dyn Queue,
    lists: &DmaBuffer,
    index: usize,
) -> Result<EventQueue> {
    let ring = nic.alloc_dma(PAGE_SIZE as usize)?;
    let req = v::CreateEqReq {
        ring: page_list(lists, index, &ring),
        entries: ENTRIES,
        vector: regs::NO_VECTOR,
        doorbell_page: DB_PAGE,
        reserved: 0,
    };
    let eq = call(q, nic, Opcode::CreateEq, req.as_bytes())?;
    Ok(EventQueue {
        ring,
        eq,
        consumed: 0,
    })
}

/// The peer's function, opened by the guest driver, with a QP in INIT.
fn peer(bench: &Bench) -> Result<Peer> {
    let ctx = bench.open(PEER);
    let buf = Arc::new(
        ctx.device()
            .transport()
            .alloc_dma(PAGE_SIZE as usize)
            .map_err(failed("the peer's memory"))?,
    );
    let pd = ctx.alloc_pd().map_err(failed("the peer's PD"))?;
    let cq = ctx.create_cq(32).map_err(failed("the peer's CQ"))?;
    let mr = pd
        .reg_mr(buf, 0, PAGE_SIZE as usize, v::ACCESS_LOCAL_WRITE)
        .map_err(failed("the peer's MR"))?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&cq, &cq, caps, false)
        .map_err(failed("the peer's QP"))?;
    let (a, mask) = dv::init_attr(0);
    qp.modify(&a, mask)
        .map_err(failed("the peer's QP to INIT"))?;
    Ok(Peer {
        qp,
        cq,
        mr,
        _pd: pd,
        ctx,
    })
}

/// The lab's set-up: the PF's admin queue, the peer, VF 0's and VF 1's command queues and
/// EQs, and on VF 0 a PD, an MR, a CQ and an RC QP connected to the peer, with receives
/// posted on both sides.
fn set_up<'a>(bench: &Bench, pf: &'a dyn Nic, nics: [&dyn Nic; 2]) -> Result<World<'a>> {
    let admin = cmdq::start(&AdminView(pf))?;
    let peer = peer(bench)?;
    let mut q0 = cmdq::start(nics[0])?;
    let mut q1 = cmdq::start(nics[1])?;
    let info: rnic_abi::cmd::QueryDeviceResp = call(&mut q0, nics[0], Opcode::QueryDevice, &[])?;
    let nic = nics[0];
    let page = || nic.alloc_dma(PAGE_SIZE as usize);
    let lists = page()?;
    let eq0 = event_queue(nic, &mut q0, &lists, 0)?;
    let eq1 = event_queue(nics[1], &mut q1, &lists, 1)?;
    let (sq, rq, cq_ring, mr_buf) = (page()?, page()?, page()?, page()?);
    let pd: v::ObjectResp = call(&mut q0, nic, Opcode::AllocPd, &[])?;
    let mr = v::RegMrReq {
        pdn: pd.handle,
        access: v::ACCESS_LOCAL_WRITE,
        iova: mr_buf.device_addr(0),
        length: PAGE_SIZE,
        pages: page_list(&lists, 2, &mr_buf),
    };
    let mr: v::RegMrResp = call(&mut q0, nic, Opcode::RegMr, mr.as_bytes())?;
    let cq = v::CreateCqReq {
        ring: page_list(&lists, 3, &cq_ring),
        entries: ENTRIES,
        doorbell_page: DB_PAGE,
    };
    let cq: v::CreateCqResp = call(&mut q0, nic, Opcode::CreateCq, cq.as_bytes())?;
    let req = v::CreateQpReq {
        pdn: pd.handle,
        send_cqn: cq.cqn,
        recv_cqn: cq.cqn,
        sq_entries: ENTRIES,
        rq_entries: ENTRIES,
        max_send_sge: 1,
        max_recv_sge: 1,
        doorbell_page: DB_PAGE,
        qp_type: v::QPT_RC,
        sq: page_list(&lists, 4, &sq),
        rq: page_list(&lists, 5, &rq),
        ..Default::default()
    };
    let qp: v::CreateQpResp = call(&mut q0, nic, Opcode::CreateQp, req.as_bytes())?;
    let peer_gid = peer.ctx.attr().gid;
    objects::connect(nic, &mut q0, qp.qpn, peer.qp.qp_num(), peer_gid)?;
    let (a, mask) = dv::rtr_attr(qp.qpn, info.gid, 0, v::mtu::MTU_1024, 1, 12);
    peer.qp
        .modify(&a, mask)
        .map_err(failed("the peer's QP to RTR"))?;
    let (a, mask) = dv::rts_attr(0, 14, 7, 7, 1);
    peer.qp
        .modify(&a, mask)
        .map_err(failed("the peer's QP to RTS"))?;
    let mut m = Mover {
        vfs: [0, 1],
        page: DB_PAGE,
        qpn: qp.qpn,
        pdn: pd.handle,
        cqn: cq.cqn,
        at: Some(0),
        sq_doorbell: qp.sq_doorbell,
        rq_doorbell: qp.rq_doorbell,
        cq_doorbell: cq.doorbell,
        sq_posted: 0,
        rq_posted: 0,
        cq_consumed: 0,
        eqs: [eq0, eq1],
        sq,
        rq,
        cq_ring,
        mr_buf,
        lkey: mr.lkey,
    };
    for i in 0..8 {
        post_recv(nics, &mut m, i)?;
        let sge = peer.mr.sge(i as usize * MSG, MSG);
        peer.qp
            .post_recv(&RecvWr {
                wr_id: 0x100 + u64::from(i),
                sges: vec![sge],
            })
            .map_err(failed("the peer's receive"))?;
    }
    for i in 0..8 {
        m.mr_buf.write(SEND_AREA + i * MSG, &message(b'M', i));
        peer.mr.write(SEND_AREA + i * MSG, &message(b'P', i));
    }
    Ok(World {
        admin: PfAdmin {
            pf,
            q: admin,
            log: Vec::new(),
        },
        q: [q0, q1],
        m,
        peer,
    })
}

/// Message `i` of the side marked `side`.
fn message(side: u8, i: usize) -> Vec<u8> {
    let mut b = format!("lab 8: message {i} from {} ", side as char).into_bytes();
    b.resize(MSG, b'.' + i as u8);
    b
}

/// The peer sends its message `i`.
fn peer_send(p: &Peer, i: usize) -> Result<()> {
    p.qp.post_send(&SendWr {
        wr_id: 0x900 + i as u64,
        sges: vec![p.mr.sge(SEND_AREA + i * MSG, MSG)],
        signaled: true,
        ..Default::default()
    })
    .map_err(failed("the peer's SEND"))
}

/// Runs `code` against a fresh device and judges it.
pub fn check(code: Code) -> Report {
    let (bench, all) = LabDevice::group(4, &[PF, 1, 2], &[1, 2]);
    let devs = &all[1..];
    let nics: [&dyn Nic; 2] = [&devs[0], &devs[1]];
    let mut r = Report::new(TITLE, &STEPS);
    let mut w = match run_student(|| set_up(&bench, &all[PF], nics)) {
        Ok(w) => w,
        Err(e) => {
            r.judge(0, Err(format!("the lab's own set-up failed: {e}")));
            return r;
        }
    };
    if let Err(e) = run_student(|| traffic_before(&bench, nics, &mut w)) {
        r.judge(
            0,
            Err(format!("the lab's traffic before the move failed: {e}")),
        );
        return r;
    }

    // 1-2: the command and its answer.
    let answer = run_student(|| (code.migrate)(&mut w.admin, &w.m));
    let sent = w
        .admin
        .log
        .iter()
        .find(|(op, _, _)| *op == Opcode::MigrateQp);
    let step = match (&answer, sent) {
        (Err(e), None) if e.contains("still to write") => {
            r.stopped(e.clone());
            return r;
        }
        (Err(e), None) => Err(format!("no MIGRATE_QP was sent: {e}")),
        (Ok(_), None) => {
            Err("no MIGRATE_QP was sent on the PF's admin queue (§12.3, §12.8)".into())
        }
        (_, Some((_, body, outcome))) => judge_command(body, outcome, &w.m),
    };
    if !r.judge(0, step) {
        return r;
    }
    let device_said = sent
        .and_then(|(_, _, o)| o.as_ref().ok())
        .and_then(|b| MigrateQpResp::read_from_bytes(b).ok())
        .unwrap_or_default();
    let step = match answer {
        Err(e) => Err(e),
        Ok(a) if a != device_said => Err(format!(
            "the code returned {a:?}, but the device answered {device_said:?}: read the \
             MigrateQpResp after the RespHeader (§12.8 \"The command\")"
        )),
        Ok(a) => Ok(format!(
            "PD {} and CQ {} on VF 1; {} MR and {} CQ moved",
            a.pdn, a.send_cq, a.mrs_moved, a.cqs_moved
        )),
    };
    if !r.judge(1, step) {
        return r;
    }

    // A send posted by a driver that has not yet seen QP_DEPARTED: it rings the old
    // doorbell, which nobody watches any more.
    if let Err(e) = run_student(|| post_send(nics, &mut w.m, 2)) {
        r.judge(2, Err(format!("the lab's post after the move failed: {e}")));
        return r;
    }

    // 3: QP_DEPARTED on VF 0.
    devs[0].clear_trace();
    let departed = run_student(|| (code.depart)(nics[0], &mut w.m));
    let step = departed.and_then(|()| judge_event(&devs[0].trace(), &w.m, 0, event::QP_DEPARTED));
    let step = step.and_then(|seen| match w.m.at {
        None => Ok(seen),
        Some(f) => Err(format!(
            "after QP_DEPARTED the driver still rings the QP's doorbells on VF {f} (Mover::at): \
             they are not watched any more; set it to None until the QP is adopted (§12.8 \
             \"Events and the drivers\")"
        )),
    });
    if !r.judge(2, step) {
        return r;
    }
    // Posted while the QP is on neither function for the driver: it waits in the ring.
    if let Err(e) = run_student(|| post_send(nics, &mut w.m, 3)) {
        r.judge(
            3,
            Err(format!("the lab's post before the adoption failed: {e}")),
        );
        return r;
    }

    // 4-5: QP_ARRIVED on VF 1, ADOPT_QP, the counts on the new doorbells.
    devs[1].clear_trace();
    let mut logged = Logged {
        inner: &mut w.q[1],
        log: Vec::new(),
    };
    let adopted = run_student(|| (code.adopt)(nics[1], &mut logged, &mut w.m));
    let log = logged.log;
    let trace1 = devs[1].trace();
    let adopt = log.iter().find(|(op, _, _)| *op == Opcode::AdoptQp);
    // Code stopped at step 5's todo!() is judged on step 4 first.
    let (adopted, later) = match adopted {
        Err(e) if still_to_write(&e, 5) => (Ok(()), Some(e)),
        other => (other, None),
    };
    let step = adopted
        .and_then(|()| judge_event(&trace1, &w.m, 1, event::QP_ARRIVED))
        .and_then(|seen| match adopt {
            None => Err(
                "no ADOPT_QP was sent on VF 1's command queue: it is how the driver \
                         learns the QP's new doorbells (§12.8 \"Events and the drivers\")"
                    .into(),
            ),
            Some((_, _, Err(e))) => Err(format!("ADOPT_QP failed: {e} (§12.8)")),
            Some(_) if w.m.at != Some(1) => Err(format!(
                "after the adoption the driver rings the QP on {:?}, not on VF 1 (Mover::at = \
                 Some(1))",
                w.m.at
            )),
            Some(_) => Ok(format!("{seen}, ADOPT_QP answered")),
        });
    if !r.judge(3, step) {
        return r;
    }
    let adopted: AdoptQpResp = adopt
        .and_then(|(_, _, o)| o.as_ref().ok())
        .and_then(|b| AdoptQpResp::read_from_bytes(b).ok())
        .unwrap_or_default();
    if let Some(e) = later {
        r.judge(4, Err(e));
        return r;
    }
    if !r.judge(4, judge_announced(&trace1, &w.m, &adopted)) {
        return r;
    }

    // 6: more traffic both ways on VF 1, then every completion.
    devs[0].clear_trace();
    devs[1].clear_trace();
    let completed = run_student(|| traffic_after(nics, &devs[1], &mut w));
    let step = completed.and_then(|cqes| judge_completions(&cqes, &w.m));
    if !r.judge(5, step) {
        return r;
    }
    if !r.judge(6, run_student(|| judge_peer(nics, &w))) {
        return r;
    }
    let step = judge_vf0(&devs[0].trace(), &devs[1].trace(), &adopted, nics, &mut w);
    r.judge(7, step);
    r
}

/// Whether `e` is a skeleton's `todo!("step {step}: ...")`.
pub(crate) fn still_to_write(e: &str, step: usize) -> bool {
    e.contains("still to write") && e.contains(&format!("step {step}:"))
}

/// Before the move: one message each way completes; then one more each way is posted and
/// the device makes a single pass, so that the move finds them in flight.
fn traffic_before(bench: &Bench, nics: [&dyn Nic; 2], w: &mut World) -> Result<()> {
    post_send(nics, &mut w.m, 0)?;
    peer_send(&w.peer, 0)?;
    for _ in 0..2 {
        poll(nics, &mut w.m)?;
    }
    post_send(nics, &mut w.m, 1)?;
    peer_send(&w.peer, 1)?;
    bench.step();
    Ok(())
}

/// After the adoption: two more messages each way, then every outstanding completion of
/// the mover (sends 1-5, receives 1-3), and a last look, once the device has nothing
/// left to do (`idle`), that no CQE follows.
fn traffic_after(nics: [&dyn Nic; 2], idle: &LabDevice, w: &mut World) -> Result<Vec<v::Cqe>> {
    for i in 4..6 {
        post_send(nics, &mut w.m, i)?;
    }
    for i in 2..4 {
        peer_send(&w.peer, i)?;
    }
    let mut cqes = Vec::new();
    while cqes.len() < 8 {
        cqes.push(poll(nics, &mut w.m)?);
    }
    idle.idle();
    if cqe_waiting(&w.m) {
        cqes.push(poll(nics, &mut w.m)?);
    }
    Ok(cqes)
}

/// Step 1: the request's fields, then the device's answer.
fn judge_command(body: &[u8], outcome: &Result<Vec<u8>>, m: &Mover) -> Result<String> {
    let Ok(req) = MigrateQpReq::read_from_bytes(body) else {
        return Err(format!(
            "the request is {} bytes, not a MigrateQpReq of {} (§12.8 \"The command\")",
            body.len(),
            size_of::<MigrateQpReq>()
        ));
    };
    let (from, to) = (m.vfs[0] + 1, m.vfs[1] + 1);
    if req.from != from || req.to != to {
        return Err(format!(
            "from {} to {}: members are numbered 0 for the PF and n for VF n - 1, so VF {} to \
             VF {} is from {from} to {to} (§12.1)",
            req.from, req.to, m.vfs[0], m.vfs[1]
        ));
    }
    if req.qpn != m.qpn {
        return Err(format!("qpn {:#x}, not the QP {:#x}", req.qpn, m.qpn));
    }
    if req.flags != 0 || req.reserved != 0 {
        return Err("flags and reserved must be 0 (§12.8 \"Checks\")".into());
    }
    if req.send_cq != 0 || req.recv_cq != 0 {
        return Err(format!(
            "send_cq {} and recv_cq {}: VF 1 has no CQ of its own for the QP; 0 moves the QP's \
             own CQ with it, ring, counts and all (§12.8 \"What moves\")",
            req.send_cq, req.recv_cq
        ));
    }
    if req.doorbell_page != m.page {
        return Err(format!(
            "doorbell_page {}: the guest's driver keeps its queues in page {} (Mover::page) on \
             both functions",
            req.doorbell_page, m.page
        ));
    }
    match outcome {
        Err(e) => Err(format!("MIGRATE_QP was refused: {e} (§12.8 \"Checks\")")),
        Ok(_) => Ok(format!(
            "from member {from} to member {to}, QP {:#x}, its CQ moving, page {}",
            req.qpn, req.doorbell_page
        )),
    }
}

/// Steps 3 and 4: the event taken from function `f`'s EQ and its consumer index handed
/// back.
fn judge_event(trace: &[Access], m: &Mover, f: usize, kind: u8) -> Result<String> {
    let name = if kind == event::QP_DEPARTED {
        "QP_DEPARTED"
    } else {
        "QP_ARRIVED"
    };
    let eq = &m.eqs[f];
    let mut bytes = [0u8; size_of::<v::Eqe>()];
    eq.ring.read(0, &mut bytes);
    let eqe = v::Eqe::read_from_bytes(&bytes).map_err(|_| "EQE size")?;
    if eqe.event_type != kind || eqe.object != m.qpn {
        return Err(format!(
            "VF {f}'s EQ holds event {:#x} for object {:#x}, not {name} for the QP",
            eqe.event_type, eqe.object
        ));
    }
    let slot = doorbell::slot_offset(eq.eq.doorbell.page, eq.eq.doorbell.slot);
    let handed = trace.iter().any(
        |a| matches!(a, Access::DbWrite { offset, value, .. } if *offset == slot && *value == 1),
    );
    if eq.consumed != 1 || !handed {
        return Err(format!(
            "{name} ({:#x}) is entry 0 of VF {f}'s EQ; after reading it the driver counts it \
             (EventQueue::consumed 1) and writes the consumer index to the EQ's slot (BAR2 \
             {slot:#x}) (§7.5 \"Consuming\", §7.6 \"EQE\", §12.8 \"Events and the drivers\")",
            kind
        ));
    }
    Ok(format!("{name} for QP {:#x}, consumer index 1", m.qpn))
}

/// Step 5: after ADOPT_QP, the driver's counts on the new slots it gave, the rung bits,
/// the kick; and the driver's record holds the new slots and numbers.
fn judge_announced(trace: &[Access], m: &Mover, a: &AdoptQpResp) -> Result<String> {
    if (m.sq_doorbell, m.rq_doorbell, m.cq_doorbell)
        != (a.sq_doorbell, a.rq_doorbell, a.send_cq_doorbell)
    {
        return Err(format!(
            "the driver's record keeps slots {:?}/{:?}/{:?} (SQ, RQ, CQ), but ADOPT_QP gave \
             {:?}/{:?}/{:?}: the old ones were VF 0's (§12.8 \"What moves\")",
            m.sq_doorbell,
            m.rq_doorbell,
            m.cq_doorbell,
            a.sq_doorbell,
            a.rq_doorbell,
            a.send_cq_doorbell
        ));
    }
    if (m.pdn, m.cqn) != (a.pdn, a.send_cq) {
        return Err(format!(
            "the driver's record keeps PD {} and CQ {}; on VF 1 they are PD {} and CQ {}",
            m.pdn, m.cqn, a.pdn, a.send_cq
        ));
    }
    let stored = |slot: DoorbellSlot| {
        let at = doorbell::slot_offset(slot.page, slot.slot);
        trace
            .iter()
            .rposition(|x| matches!(x, Access::DbWrite { offset, .. } if *offset == at))
            .and_then(|i| match &trace[i] {
                Access::DbWrite { value, .. } => Some((i, *value)),
                _ => None,
            })
    };
    for (name, slot, count) in [
        ("send", a.sq_doorbell, m.sq_posted),
        ("receive", a.rq_doorbell, m.rq_posted),
    ] {
        let at = doorbell::slot_offset(slot.page, slot.slot);
        let Some((i, value)) = stored(slot) else {
            return Err(format!(
                "the {name} queue's new slot (BAR2 {at:#x}) was not written: the driver \
                 writes its own producer index there ({count}), which announces the work \
                 posted after the move on doorbells nobody watched (§12.8 \"Events and the \
                 drivers\")"
            ));
        };
        if value != count {
            return Err(format!(
                "the {name} queue's new slot was given {value}, not the driver's count {count}: \
                 the counts carry over, free-running (§12.8, §7.5)"
            ));
        }
        let word = u64::from(slot.page) * PAGE_SIZE
            + doorbell::RUNG_BITMAP
            + 4 * u64::from(slot.slot / 32);
        let bit = 1u32 << (slot.slot % 32);
        if !trace[i..].iter().any(
            |x| matches!(x, Access::DbWrite { offset, value, .. } if *offset == word && value & bit != 0),
        ) {
            return Err(format!(
                "the {name} queue's new slot was written and its rung bit (bit {} of BAR2 \
                 {word:#x}) not set after it: the device looks only at queues whose bits are set \
                 (§7.5 \"The rung bitmap\")",
                slot.slot % 32
            ));
        }
    }
    let cq_at = doorbell::slot_offset(a.send_cq_doorbell.page, a.send_cq_doorbell.slot);
    match stored(a.send_cq_doorbell) {
        Some((_, v)) if v == m.cq_consumed => {}
        other => {
            return Err(format!(
                "the CQ's new slot (BAR2 {cq_at:#x}) holds {:?}, not the driver's consumer index \
                 {}: write it there too (§12.8 \"Events and the drivers\", §7.5 \"Consuming\")",
                other.map(|(_, v)| v),
                m.cq_consumed
            ))
        }
    }
    let last = trace
        .iter()
        .rposition(|x| matches!(x, Access::DbWrite { .. }))
        .unwrap_or(0);
    let notify = u64::from(a.sq_doorbell.page) * PAGE_SIZE + doorbell::NOTIFY_REQUEST;
    let asked = trace[last..].iter().find_map(|x| match x {
        Access::DbRead { offset, value } if *offset == notify => Some(*value),
        _ => None,
    });
    let kicked = trace[last..].iter().any(|x| {
        matches!(x, Access::RegWrite { offset, value } if *offset == regs::DOORBELL_KICK && *value == a.sq_doorbell.page)
    });
    match asked {
        None => Err(format!(
            "NOTIFY_REQUEST of page {} was not read after the doorbells: the device may be \
             asleep (§4.4)",
            a.sq_doorbell.page
        )),
        Some(n) if n != 0 && !kicked => Err(format!(
            "NOTIFY_REQUEST was set and no kick followed: write {} to DOORBELL_KICK (§4.4)",
            a.sq_doorbell.page
        )),
        Some(_) => Ok(format!(
            "SQ {} and RQ {} on slots {} and {} of page {}, CQ {} on slot {}",
            m.sq_posted,
            m.rq_posted,
            a.sq_doorbell.slot,
            a.rq_doorbell.slot,
            a.sq_doorbell.page,
            m.cq_consumed,
            a.send_cq_doorbell.slot
        )),
    }
}

/// Step 6: sends 1-5 and receives 1-3 completed once each, successfully.
fn judge_completions(cqes: &[v::Cqe], m: &Mover) -> Result<String> {
    let mut want: Vec<u64> = (1..6)
        .map(|i| 0x800 + i)
        .chain((1..4).map(|i| 0x100 + i))
        .collect();
    for c in cqes {
        if c.status != v::WcStatus::Success as u8 {
            return Err(format!(
                "WR {:#x} completed with status {} (§7.10)",
                c.wr_id,
                v::WcStatus::from_u8(c.status).map_or("unknown", |s| s.name())
            ));
        }
        if c.qp_num != m.qpn {
            return Err(format!("a CQE names QP {:#x}", c.qp_num));
        }
        match want.iter().position(|&w| w == c.wr_id) {
            Some(i) => {
                want.remove(i);
            }
            None => {
                return Err(format!(
                    "WR {:#x} completed twice, or was never posted: every frame is processed \
                     by one function only (§12.8 \"Quiescing\")",
                    c.wr_id
                ))
            }
        }
    }
    for i in 1..4 {
        let mut got = vec![0u8; MSG];
        m.mr_buf.read(i * MSG, &mut got);
        if got != message(b'P', i) {
            return Err(format!(
                "receive buffer {i} does not hold the peer's message {i}"
            ));
        }
    }
    Ok("sends 1-5 and receives 1-3, once each, on the CQ that moved".into())
}

/// Step 7: the peer received messages 0-5 in order, its sends completed, it is in RTS.
fn judge_peer(nics: [&dyn Nic; 2], w: &World) -> Result<String> {
    let p = &w.peer;
    let mut wcs = Vec::new();
    wait_for(nics[1], "the peer's completions", || {
        wcs.extend(p.cq.poll(16));
        Ok(wcs.len() >= 10)
    })?;
    let mut recvs = Vec::new();
    for wc in &wcs {
        if !wc.is_success() {
            return Err(format!(
                "the peer's WR {:#x} completed with {}: the peer saw the move (§12.8)",
                wc.wr_id,
                wc.status_str()
            ));
        }
        if wc.is_recv() {
            recvs.push(wc.wr_id - 0x100);
        }
    }
    let sends = wcs.iter().filter(|wc| !wc.is_recv()).count();
    if sends != 4 {
        return Err(format!(
            "{sends} of the peer's 4 SENDs completed: the QP on the move lost some (§12.8)"
        ));
    }
    if recvs != (0..6).collect::<Vec<u64>>() {
        return Err(format!(
            "the peer received messages {recvs:?}, not 0 to 5 in order"
        ));
    }
    for i in 0..6 {
        let mut got = vec![0u8; MSG];
        p.mr.read(i * MSG, &mut got);
        if got != message(b'M', i) {
            return Err(format!("the peer's buffer {i} does not hold message {i}"));
        }
    }
    let state =
        p.qp.query()
            .map_err(failed("QUERY_QP of the peer"))?
            .attr
            .qp_state;
    if state != QpState::Rts as u8 {
        return Err(format!("the peer's QP is in state {state}, not RTS"));
    }
    Ok("messages 0-5 in order, intact; its 4 sends completed; RTS".into())
}

/// Step 8: nothing rung on VF 0 since the adoption, the new sends on VF 1's new slot, and
/// the QP gone from VF 0 (QUERY_QP there: NOT_FOUND).
fn judge_vf0(
    trace0: &[Access],
    trace1: &[Access],
    a: &AdoptQpResp,
    nics: [&dyn Nic; 2],
    w: &mut World,
) -> Result<String> {
    if let Some(Access::DbWrite { offset, .. }) =
        trace0.iter().find(|x| matches!(x, Access::DbWrite { .. }))
    {
        return Err(format!(
            "VF 0's doorbell BAR was written at {offset:#x} after the QP left it (§12.8)"
        ));
    }
    let sq = doorbell::slot_offset(a.sq_doorbell.page, a.sq_doorbell.slot);
    if !trace1
        .iter()
        .any(|x| matches!(x, Access::DbWrite { offset, value, .. } if *offset == sq && *value == 6))
    {
        return Err("the sends after the adoption were not rung on VF 1's new send slot".into());
    }
    let req = v::ObjectReq {
        handle: w.m.qpn,
        reserved: 0,
    };
    match call::<v::QueryQpResp>(&mut w.q[0], nics[0], Opcode::QueryQp, req.as_bytes()) {
        Ok(_) => Err(format!("VF 0 still answers QUERY_QP for QP {:#x}", w.m.qpn)),
        Err(e) if e.contains("NotFound") || e.contains("NOT_FOUND") => Ok(format!(
            "QUERY_QP {:#x} on VF 0: NOT_FOUND; sends 4-5 rung on VF 1",
            w.m.qpn
        )),
        Err(e) => Err(format!("QUERY_QP on VF 0: {e}")),
    }
}
