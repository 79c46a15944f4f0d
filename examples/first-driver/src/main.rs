//! rnic's first driver: from an unopened PCI function to one RDMA WRITE, by hand.
//!
//! Read this file top to bottom next to the datasheet, `docs/hardware-interface.md`; every
//! step names the section it follows. It uses only two things:
//!
//! - the ABI crate `rnic_abi`: every register offset, bit, opcode and structure layout;
//! - the guest driver's *transport* (`rnic_driver::transport::Transport`): config space,
//!   32-bit BAR0 registers, the mapped doorbell BAR (BAR2) and DMA memory. That is the one
//!   part that differs between the host (a vfio-user socket of rnicd, where this program
//!   plays the VMM) and a VM (a PCI function through sysfs or VFIO).
//!
//! Everything else (the command queue, the objects, the send ring, the completion queue)
//! is written out below, a few straight lines each. The real driver
//! (`guest-driver/src/cmdq.rs`, `guest-driver/src/verbs/`) does the same with more care:
//! many commands and WRs in flight, interrupts, resets under it, rings of many pages.
//!
//! Run it on the host (README.md, "Your first driver"):
//!
//! ```text
//! cargo build -p rnic-device --bin rnicd -p rnic-first-driver
//! target/debug/rnicd --socket-dir /tmp/r --vfs 1 &
//! target/debug/rnic-first-driver --vfio-user /tmp/r/vf0.sock
//! ```
//!
//! In a VM: `rnic-first-driver --pci 0000:00:04.0`, or no argument for the first rnic
//! function on the PCI bus. It prints what it finds and does, ends with a line that starts
//! with `first-driver: success:`, and exits with status 1 and a message on any failure.

use std::net::Ipv6Addr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use rnic_abi::cmd::{CmdHeader, Opcode, RespHeader, Status};
use rnic_abi::pci::{self, cfg};
use rnic_abi::verbs::{self as v, attr, PageList, QpState};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use rnic_driver::transport::{self, sysfs::SysfsTransport, vfio_user::VfioUserTransport};
use rnic_driver::transport::{DmaBuffer, Transport};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Every failure is a sentence for the user; `main` prints it and exits with status 1.
type Result<T> = std::result::Result<T, String>;

/// How long the device may take to answer a command or complete a work request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The command queue: 64 entries in one page, laid out as §10 step 7 says.
const CMDQ_SIZE: u16 = 64;
const AVAIL: usize = 0x400; // available ring: flags u16, idx u16, ring[64] u16 (§6.3)
const USED: usize = 0x488; //  used ring: flags u16, idx u16, ring[64] {id u32, len u32}
const DESC_F_NEXT: u16 = 1; // §6.3: the chain continues at `next`
const DESC_F_WRITE: u16 = 2; // §6.3: the device writes this buffer
const AVAIL_F_NO_INTERRUPT: u16 = 1; // §6.1 step 2: we poll
/// The doorbell page every object of ours gets its slots in (§7.5, §7.15 step 2).
const DB_PAGE: u32 = 1;
/// Entries of the EQ and CQ rings, and of each send queue (powers of two, §7.4).
const ENTRIES: u32 = 16;
/// What QP A writes, from offset SRC of the registered page to offset DST, through QP B.
const MESSAGE: &[u8] = b"Hello, RDMA! Written by rnic's first driver, one WQE at a time.";
const SRC: u64 = 0;
const DST: u64 = 2048;
/// The send WR's `wr_id`, which its completion must give back.
const WR_ID: u64 = 0xF1257;
/// MODIFY_QP masks, §7.8's "Required" column (§7.15 steps 5-7).
const INIT_MASK: u32 = attr::STATE | attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS;
const RTR_MASK: u32 = attr::STATE
    | attr::AV
    | attr::PATH_MTU
    | attr::DEST_QPN
    | attr::RQ_PSN
    | attr::MAX_DEST_RD_ATOMIC
    | attr::MIN_RNR_TIMER;
const RTS_MASK: u32 = attr::STATE
    | attr::SQ_PSN
    | attr::TIMEOUT
    | attr::RETRY_CNT
    | attr::RNR_RETRY
    | attr::MAX_QP_RD_ATOMIC;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = open(&args).and_then(|t| {
        let outcome = run(t.as_ref());
        // §10 step 12: a reset stops the command queue and destroys every object (§8.2),
        // so the device no longer uses any of our memory.
        let _ = t.reg_write32(regs::DEVICE_CONTROL, regs::CONTROL_RESET);
        outcome
    });
    match result {
        Ok(line) => {
            println!("first-driver: success: {line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("first-driver: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// §10 step 1, "Find the function", as the tools do (`tools/src/open.rs`): a vfio-user
/// socket of rnicd on the host, a PCI address in a VM, or the first rnic function there.
fn open(args: &[String]) -> Result<Box<dyn Transport>> {
    let usage = "usage: rnic-first-driver [--vfio-user SOCKET | --pci BDF]";
    Ok(match args {
        [flag, socket] if flag == "--vfio-user" => Box::new(
            VfioUserTransport::connect(Path::new(socket)).map_err(what("connect to rnicd"))?,
        ),
        [flag, bdf] if flag == "--pci" => transport::open_pci(bdf).map_err(what("open"))?,
        [] => {
            let all = SysfsTransport::find_all().map_err(what("look for rnic on PCI"))?;
            let bdf = all.first().ok_or(format!("no rnic function; {usage}"))?;
            transport::open_pci(bdf).map_err(what("open"))?
        }
        _ => return Err(usage.into()),
    })
}

/// Everything after opening, in the order of §10 and §7.15. Returns the success line.
fn run(t: &dyn Transport) -> Result<String> {
    println!("function: {}", t.describe());
    let reg = |offset| t.reg_read32(offset).map_err(what("read BAR0"));

    // ---- §10 steps 1-2, §1.3 item 1, §2: the PCI identity; Memory Space Enable --------
    let vendor = config_read16(t, cfg::VENDOR_ID)?;
    let device = config_read16(t, cfg::DEVICE_ID)?;
    if vendor != pci::VENDOR_ID || !matches!(device, pci::PF_DEVICE_ID | pci::VF_DEVICE_ID) {
        return Err(format!("PCI ID {vendor:04x}:{device:04x} is not rnic's"));
    }
    let command = config_read16(t, cfg::COMMAND)?;
    config_write16(t, cfg::COMMAND, command | cfg::COMMAND_MEMORY)?;

    // ---- §10 step 3, §1.3 items 2-4, §3.3: the identity registers ---------------------
    let magic = reg(regs::MAGIC_REG)?;
    let version = reg(regs::ABI_VERSION)?;
    let info = reg(regs::FUNCTION_INFO)?;
    let caps = u64::from(reg(regs::CAPS_LO)?) | u64::from(reg(regs::CAPS_HI)?) << 32;
    let (major, minor) = (version >> 16, version & 0xFFFF);
    let is_vf = info & regs::FUNCTION_IS_VF != 0;
    let vf = (info >> regs::FUNCTION_VF_INDEX_SHIFT) & 0xFF;
    let kind = if is_vf {
        format!("VF {vf}")
    } else {
        "PF".into()
    };
    println!("MAGIC         {magic:#010x}");
    println!("ABI_VERSION   {version:#010x} (ABI {major}.{minor})");
    println!("FUNCTION_INFO {info:#010x} ({kind})");
    println!("CAPS          {caps:#018x}");
    if magic != regs::MAGIC {
        return Err(format!(
            "MAGIC is {magic:#x}, not \"RNIC\": BAR0 does not decode"
        ));
    }
    if major != u32::from(rnic_abi::ABI_MAJOR) {
        return Err(format!("ABI {major}.{minor}: this driver speaks ABI 1"));
    }
    if is_vf != (device == pci::VF_DEVICE_ID) {
        return Err("FUNCTION_INFO and the PCI device ID disagree".into());
    }
    // Require the bits we use and ignore the others.
    let needed = regs::CAP_CMDQ | regs::CAP_DOORBELL_NOTIFY | regs::CAP_RDMA_RC;
    if caps & needed != needed {
        return Err(format!("CAPS lacks {:#x}", needed & !caps));
    }

    // ---- §10 steps 4-5, §8, §5.5: reset, wait for READY, then Bus Master Enable -------
    t.reg_write32(regs::DEVICE_CONTROL, regs::CONTROL_RESET)
        .map_err(what("reset"))?;
    wait_for("READY", || {
        Ok(reg(regs::DEVICE_STATUS)? & regs::STATUS_READY != 0)
    })?;
    let command = config_read16(t, cfg::COMMAND)?;
    config_write16(t, cfg::COMMAND, command | cfg::COMMAND_BUS_MASTER)?;
    // (§10 step 6, MSI-X interrupts, is optional: this driver polls every ring.)

    // All the DMA memory we use: one zeroed 4 KiB page per ring or buffer, so that each
    // page list below names a single page (§7.3).
    let page = || {
        t.alloc_dma(PAGE_SIZE as usize)
            .map_err(what("get DMA memory"))
    };
    let (rings, req, resp) = (page()?, page()?, page()?);
    let (lists, eq_ring, cq_ring, mr_buf) = (page()?, page()?, page()?, page()?);
    let (sq_a, rq_a, sq_b, rq_b) = (page()?, page()?, page()?, page()?);

    // ---- §10 steps 7-10, §6: the command queue, and QUERY_DEVICE as its first command --
    let mut cmdq = CommandQueue::start(t, rings, req, resp)?;
    let dev: rnic_abi::cmd::QueryDeviceResp = cmdq.execute(Opcode::QueryDevice, &[])?;
    if u32::from(dev.abi_major) != major || dev.caps & regs::CAP_RDMA_RC == 0 {
        return Err(format!(
            "QUERY_DEVICE: ABI {} caps {:#x}",
            dev.abi_major, dev.caps
        ));
    }
    let mac = dev.mac.map(|b| format!("{b:02x}")).join(":");
    println!("QUERY_DEVICE  MAC {mac}, GID {}", Ipv6Addr::from(dev.gid));

    // ---- §7.15 steps 2-3, §7.4: EQ, PD, MR and CQ ---------------------------------------
    // The EQ is polled (NO_VECTOR); nothing here waits for events, but they would go there.
    let eq = v::CreateEqReq {
        ring: page_list(&lists, 0, &eq_ring),
        entries: ENTRIES,
        vector: regs::NO_VECTOR,
        doorbell_page: DB_PAGE,
        reserved: 0,
    };
    let eq: v::CreateEqResp = cmdq.execute(Opcode::CreateEq, eq.as_bytes())?;
    // ALLOC_PD has no request body.
    let pd: v::ObjectResp = cmdq.execute(Opcode::AllocPd, &[])?;
    // The MR is known by the device address of its first byte (its `iova`, §7.3), and open
    // to remote writes, which need local write too.
    let iova = mr_buf.device_addr(0);
    let mr = v::RegMrReq {
        pdn: pd.handle,
        access: v::ACCESS_LOCAL_WRITE | v::ACCESS_REMOTE_WRITE,
        iova,
        length: PAGE_SIZE,
        pages: page_list(&lists, 1, &mr_buf),
    };
    let mr: v::RegMrResp = cmdq.execute(Opcode::RegMr, mr.as_bytes())?;
    // One CQ takes the completions of both QPs, send and receive.
    let cq = v::CreateCqReq {
        ring: page_list(&lists, 2, &cq_ring),
        entries: ENTRIES,
        doorbell_page: DB_PAGE,
    };
    let cq: v::CreateCqResp = cmdq.execute(Opcode::CreateCq, cq.as_bytes())?;
    let (pdn, cqn, key) = (pd.handle, cq.cqn, mr.lkey);
    println!(
        "objects       EQ {} PD {pdn} MR key {key:#x} CQ {cqn}",
        eq.eqn
    );

    // ---- §7.15 step 4, §7.4 CREATE_QP: two RC QPs --------------------------------------
    // One SGE per send WQE: the send ring's stride is sq_stride(1, 0) = 128 bytes (§7.6).
    // The receive queue (one 32-byte entry) stays empty: an RDMA WRITE consumes no receive.
    let mut create_qp = |index, sq: &DmaBuffer, rq: &DmaBuffer| {
        let req = v::CreateQpReq {
            pdn,
            send_cqn: cqn,
            recv_cqn: cqn,
            sq_entries: ENTRIES,
            rq_entries: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            doorbell_page: DB_PAGE,
            qp_type: v::QPT_RC,
            sq: page_list(&lists, index, sq),
            rq: page_list(&lists, index + 1, rq),
            ..Default::default()
        };
        cmdq.execute::<v::CreateQpResp>(Opcode::CreateQp, req.as_bytes())
    };
    let qp_a = create_qp(3, &sq_a, &rq_a)?;
    let qp_b = create_qp(5, &sq_b, &rq_b)?;
    println!("QPs           A {:#x}, B {:#x}", qp_a.qpn, qp_b.qpn);

    // ---- §7.8, §7.15 steps 5-7: RESET -> INIT -> RTR -> RTS, each QP aimed at the other --
    // A QP may reach a QP of its own function (§7.12): the peer's GID is our own. MODIFY_QP
    // reads only the fields its mask names (§7.4), so one QpAttr serves all three steps.
    for (me, peer) in [(qp_a.qpn, qp_b.qpn), (qp_b.qpn, qp_a.qpn)] {
        let mut attr = v::QpAttr {
            port_num: 1, // INIT: port 1, P_Key index 0, what the peer may do to us
            qp_access_flags: v::ACCESS_REMOTE_WRITE,
            dgid: dev.gid, // RTR: the address vector (sgid_index 0: our own GID) ...
            hop_limit: 64,
            path_mtu: v::mtu::MTU_1024,
            dest_qp_num: peer, // ... the peer QP, and the responder's limits
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14, // RTS: 4.096 us * 2^14 = 67 ms before a retransmission
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default() // both PSNs (rq_psn, sq_psn) start at 0
        };
        for (state, attr_mask) in [
            (QpState::Init, INIT_MASK),
            (QpState::Rtr, RTR_MASK),
            (QpState::Rts, RTS_MASK),
        ] {
            attr.qp_state = state as u8;
            let req = v::ModifyQpReq {
                qpn: me,
                attr_mask,
                attr,
            };
            cmdq.execute::<()>(Opcode::ModifyQp, req.as_bytes())?;
        }
    }
    println!("QPs           both in RTS");

    // ---- §7.6 "Send WQE": an RDMA WRITE, its one SGE right after the 64-byte fixed part --
    mr_buf.write(SRC as usize, MESSAGE);
    let wqe = v::SendWqe {
        wr_id: WR_ID,
        opcode: v::wr::RDMA_WRITE,
        flags: v::send_flags::SIGNALED, // a completion, please
        num_sge: 1,
        remote_addr: iova + DST, // where in the peer's MR (its iova space) ...
        rkey: mr.rkey,           // ... and with which key
        ..Default::default()
    };
    let len = MESSAGE.len() as u32;
    let sge = v::Sge {
        addr: iova + SRC,
        length: len,
        lkey: mr.lkey,
    };
    sq_a.write(0, wqe.as_bytes()); // entry 0: the first WQE this QP ever posts
    sq_a.write(size_of::<v::SendWqe>(), sge.as_bytes());

    // ---- §7.5 "Posting", §4.4: count, rung bit, and a kick only if the device asked ----
    let db = t.doorbells();
    let (page, slot) = (qp_a.sq_doorbell.page, qp_a.sq_doorbell.slot);
    let page_base = u64::from(page) * PAGE_SIZE;
    fence(Ordering::Release); // the WQE before the count
    db.write32(doorbell::slot_offset(page, slot), 1); // 1 send WQE posted in all
    fence(Ordering::Release); // the count before the bit
    let word = page_base + doorbell::RUNG_BITMAP + 4 * u64::from(slot / 32);
    // A plain read-modify-write is safe: we are the only writer of this page (§7.5).
    db.write32(word, db.read32(word) | 1 << (slot % 32));
    fence(Ordering::SeqCst); // the doorbells before the NOTIFY_REQUEST load (§4.5)
    let kick = db.read32(page_base + doorbell::NOTIFY_REQUEST) != 0;
    if kick {
        t.reg_write32(regs::DOORBELL_KICK, page)
            .map_err(what("kick"))?;
    }
    println!("posted        RDMA WRITE of {len} bytes (kicked: {kick})");

    // ---- §7.6 "CQE", "Ownership phase", §7.7: poll the CQ ring ---------------------------
    // CQE 0 is new once its owner bit (byte 0x1B, bit 0) shows the first pass's phase, 1.
    // Load it with acquire (the u32 at 0x18 holds it in bits 31:24), then read the rest.
    let owner = || (cq_ring.load_u32(0x18) >> 24) as u8 & 1;
    wait_for("the completion", || {
        Ok(owner() == v::owner_phase(0, ENTRIES))
    })?;
    let mut bytes = [0u8; size_of::<v::Cqe>()];
    cq_ring.read(0, &mut bytes);
    let cqe = v::Cqe::read_from_bytes(&bytes).map_err(|_| "CQE size")?;
    // Hand the entry back: the consumer index in the CQ's slot, after a release fence.
    fence(Ordering::Release);
    db.write32(doorbell::slot_offset(cq.doorbell.page, cq.doorbell.slot), 1);
    let status = v::WcStatus::from_u8(cqe.status).map_or("unknown", |s| s.name());
    println!(
        "CQE           wr_id {:#x} status {status} opcode {} byte_len {} qp {:#x}",
        cqe.wr_id, cqe.opcode, cqe.byte_len, cqe.qp_num
    );
    if cqe.status != v::WcStatus::Success as u8 {
        return Err(format!(
            "the RDMA WRITE completed with status {status} ({})",
            cqe.status
        ));
    }
    if cqe.opcode != v::wc::RDMA_WRITE || cqe.wr_id != WR_ID || cqe.qp_num != qp_a.qpn {
        return Err(format!("unexpected CQE {cqe:?}"));
    }
    // A WRITE completes once the responder acknowledged it: the bytes are there (§7.9).
    let mut arrived = vec![0u8; MESSAGE.len()];
    mr_buf.read(DST as usize, &mut arrived);
    if arrived != MESSAGE {
        return Err(format!("DST holds {:?}", String::from_utf8_lossy(&arrived)));
    }
    let (a, b, text) = (qp_a.qpn, qp_b.qpn, String::from_utf8_lossy(MESSAGE));
    Ok(format!(
        "RDMA WRITE of {len} bytes from QP {a:#x} to QP {b:#x} arrived: \"{text}\""
    ))
}

/// The command queue of §6: a virtio split ring in one page (`rings`), and one page each
/// for the request and the response, as we send one command at a time.
struct CommandQueue<'t> {
    t: &'t dyn Transport,
    rings: DmaBuffer,
    req: DmaBuffer,
    resp: DmaBuffer,
    /// Commands sent so far: the available ring's `idx`.
    sent: u16,
}

impl<'t> CommandQueue<'t> {
    /// §6.1, §10 step 7: program the ring registers of §3.3 and enable the queue.
    fn start(
        t: &'t dyn Transport,
        rings: DmaBuffer,
        req: DmaBuffer,
        resp: DmaBuffer,
    ) -> Result<Self> {
        rings.store_u16(AVAIL, AVAIL_F_NO_INTERRUPT); // avail->flags: we poll
        let set = |offset, value| t.reg_write32(offset, value).map_err(what("write BAR0"));
        let base = rings.device_addr(0);
        for (lo, addr) in [
            (regs::CMDQ_DESC_LO, base),
            (regs::CMDQ_AVAIL_LO, base + AVAIL as u64),
            (regs::CMDQ_USED_LO, base + USED as u64),
        ] {
            set(lo, addr as u32)?; // the low half first
            set(lo + 4, (addr >> 32) as u32)?;
        }
        set(regs::CMDQ_SIZE, u32::from(CMDQ_SIZE))?;
        set(regs::CMDQ_MSIX_VECTOR, regs::NO_VECTOR)?;
        set(regs::CMDQ_CONTROL, regs::CMDQ_ENABLE)?;
        let status = t
            .reg_read32(regs::DEVICE_STATUS)
            .map_err(what("read BAR0"))?;
        if status & regs::STATUS_CMDQ_RUNNING == 0 {
            let code = t.reg_read32(regs::ERROR_CODE).map_err(what("read BAR0"))?;
            return Err(format!(
                "the command queue did not start: ERROR_CODE {code} (§6.2)"
            ));
        }
        println!("command queue running: {CMDQ_SIZE} entries at {base:#x}");
        Ok(Self {
            t,
            rings,
            req,
            resp,
            sent: 0,
        })
    }

    /// Sends one command and waits for its response (§6.4-§6.10). `body` is the request
    /// structure after the `CmdHeader`; `R` is the response structure after the
    /// `RespHeader`, `()` for none.
    fn execute<R: FromBytes + Immutable>(&mut self, opcode: Opcode, body: &[u8]) -> Result<R> {
        let token = u32::from(self.sent) + 1; // any value: the response echoes it
        let header = CmdHeader {
            opcode: opcode as u16,
            reserved: 0,
            token,
        };
        self.req.write(0, header.as_bytes());
        self.req.write(size_of::<CmdHeader>(), body);
        let resp_len = size_of::<RespHeader>() + size_of::<R>();
        // §6.3-§6.4: descriptor 0 (readable) holds the request and chains to descriptor 1
        // (writable), the room for the response.
        let request_len = (size_of::<CmdHeader>() + body.len()) as u32;
        let chain = [
            (self.req.device_addr(0), request_len, DESC_F_NEXT, 1u16),
            (self.resp.device_addr(0), resp_len as u32, DESC_F_WRITE, 0),
        ];
        for (i, (addr, len, flags, next)) in chain.into_iter().enumerate() {
            let mut desc = [0u8; 16];
            desc[0..8].copy_from_slice(&addr.to_le_bytes());
            desc[8..12].copy_from_slice(&len.to_le_bytes());
            desc[12..14].copy_from_slice(&flags.to_le_bytes());
            desc[14..16].copy_from_slice(&next.to_le_bytes());
            self.rings.write(16 * i, &desc);
        }
        // §6.10: the ring entry (head descriptor 0), then avail->idx with a release store;
        // then §4.4: release fence, CMDQ_DOORBELL = idx, full fence, and a kick only if the
        // device set NOTIFY_REQUEST (it may be asleep).
        let slot = usize::from(self.sent % CMDQ_SIZE);
        self.rings.store_u16(AVAIL + 4 + 2 * slot, 0);
        self.sent = self.sent.wrapping_add(1);
        self.rings.store_u16(AVAIL + 2, self.sent);
        let db = self.t.doorbells();
        fence(Ordering::Release);
        db.write32(doorbell::CMDQ_DOORBELL, u32::from(self.sent));
        fence(Ordering::SeqCst);
        if db.read32(doorbell::NOTIFY_REQUEST) != 0 {
            self.t
                .reg_write32(regs::DOORBELL_KICK, 0)
                .map_err(what("kick"))?;
        }
        // §6.9, §10 step 9: wait until used->idx (an acquire load) catches up; if it does
        // not, DEVICE_STATUS.FATAL tells whether the queue broke.
        let name = format!("{opcode:?}");
        if let Err(e) = wait_for(&name, || Ok(self.rings.load_u16(USED + 2) == self.sent)) {
            let status = self
                .t
                .reg_read32(regs::DEVICE_STATUS)
                .map_err(what("read"))?;
            return Err(format!("{e} (DEVICE_STATUS {status:#x})"));
        }
        // §6.6-§6.8: the used element's `len` is what the device wrote; the header's
        // status, syndrome and echoed token say how it went.
        let written = self.rings.load_u32(USED + 4 + 8 * slot + 4) as usize;
        let mut bytes = vec![0u8; resp_len];
        self.resp.read(0, &mut bytes);
        let (head, rest) = RespHeader::read_from_prefix(&bytes).map_err(|_| "response")?;
        if written < size_of::<RespHeader>() || head.token != token {
            return Err(format!(
                "{name}: used length {written}, token {}",
                head.token
            ));
        }
        if head.status != Status::Ok as u16 {
            let status = Status::from_u16(head.status);
            let syndrome = head.syndrome;
            return Err(format!(
                "{name}: status {status:?}, syndrome {syndrome:#x} (§6.7)"
            ));
        }
        if written < resp_len {
            return Err(format!(
                "{name}: {written} bytes of response, not {resp_len}"
            ));
        }
        R::read_from_bytes(rest).map_err(|_| format!("{name}: response size"))
    }
}

/// A one-page `PageList` (§7.3) for `buf`: a flat array of one page address, which goes
/// into entry `index` of the `lists` page.
fn page_list(lists: &DmaBuffer, index: usize, buf: &DmaBuffer) -> PageList {
    lists.write(8 * index, &buf.device_addr(0).to_le_bytes());
    PageList::flat(lists.device_addr(8 * index), 1)
}

/// Polls `done` until it says yes, for at most [`TIMEOUT`].
fn wait_for(what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let start = Instant::now();
    while !done()? {
        if start.elapsed() > TIMEOUT {
            return Err(format!("timed out after {TIMEOUT:?} waiting for {what}"));
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// Turns a transport error into a sentence: `.map_err(what("read BAR0"))`.
fn what<E: std::fmt::Display>(doing: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{doing}: {e}")
}

/// Reads a 16-bit config-space register (§2.1).
fn config_read16(t: &dyn Transport, offset: usize) -> Result<u16> {
    let mut b = [0u8; 2];
    t.config_read(offset as u16, &mut b)
        .map_err(what("read config space"))?;
    Ok(u16::from_le_bytes(b))
}

/// Writes a 16-bit config-space register (§2.1, §2.2).
fn config_write16(t: &dyn Transport, offset: usize, value: u16) -> Result<()> {
    t.config_write(offset as u16, &value.to_le_bytes())
        .map_err(what("write config space"))
}
