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
//! Everything else, the command queue, the objects, the send ring and the completion
//! queue, is written out below in a few straight lines each. The real driver
//! (`guest-driver/src/cmdq.rs`, `guest-driver/src/verbs/`) does the same with more care
//! (many commands in flight, interrupts, resets under it, rings of many pages).
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

use rnic_abi::cmd::{CmdHeader, Opcode, QueryDeviceResp, RespHeader, Status};
use rnic_abi::pci::{self, cfg};
use rnic_abi::verbs::{self as v, attr, PageList, QpState};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use rnic_driver::transport::{self, sysfs::SysfsTransport, vfio_user::VfioUserTransport};
use rnic_driver::transport::{DmaBuffer, Transport};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Every failure is a sentence for the user; `main` prints it and exits with status 1.
type Result<T> = std::result::Result<T, String>;

/// Turns a transport error into that sentence: `.map_err(what("read MAGIC"))`.
fn what<E: std::fmt::Display>(doing: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{doing}: {e}")
}

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
/// Entries of the EQ and CQ rings, and of each QP's send queue (powers of two, §7.4).
const ENTRIES: u32 = 16;
/// What QP A writes into QP B's half of the buffer.
const MESSAGE: &[u8] = b"Hello, RDMA! Written by rnic's first driver, one WQE at a time.";
/// Where in the registered page the message comes from, and where it goes.
const SRC: usize = 0;
const DST: usize = 2048;
/// The send WR's `wr_id`, which the completion must give back.
const WR_ID: u64 = 0xF1257;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = open(&args).and_then(|t| {
        let outcome = run(t.as_ref());
        // §10 step 12, §6.10: stop the device using our memory before it is freed. The
        // buffers of `run` are gone by now, but nothing of ours runs on the device either
        // way: a reset stops the command queue and destroys every object (§8.2).
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
            let bdf = all
                .first()
                .ok_or(format!("no rnic function found; {usage}"))?;
            transport::open_pci(bdf).map_err(what("open"))?
        }
        _ => return Err(usage.into()),
    })
}

/// Everything after opening: identify, reset, start the command queue, create the
/// objects, post one RDMA WRITE and see it complete. Returns the success line.
fn run(t: &dyn Transport) -> Result<String> {
    println!("function: {}", t.describe());

    // §1.3 item 1, §2.1: vendor 0xF1C0; device 0x0001 is a PF, 0x0002 a VF.
    let vendor = config_read16(t, cfg::VENDOR_ID)?;
    let device = config_read16(t, cfg::DEVICE_ID)?;
    if vendor != pci::VENDOR_ID || !matches!(device, pci::PF_DEVICE_ID | pci::VF_DEVICE_ID) {
        return Err(format!("PCI ID {vendor:04x}:{device:04x} is not rnic's"));
    }
    // §10 step 2: Memory Space Enable, so that BAR0 decodes.
    let command = config_read16(t, cfg::COMMAND)?;
    config_write16(t, cfg::COMMAND, command | cfg::COMMAND_MEMORY)?;

    // §10 step 3, §1.3 items 2-4, §3.3: the identity registers.
    let reg = |offset| t.reg_read32(offset).map_err(what("read BAR0"));
    let magic = reg(regs::MAGIC_REG)?;
    let version = reg(regs::ABI_VERSION)?;
    let info = reg(regs::FUNCTION_INFO)?;
    let caps = u64::from(reg(regs::CAPS_LO)?) | u64::from(reg(regs::CAPS_HI)?) << 32;
    let is_vf = info & regs::FUNCTION_IS_VF != 0;
    let vf_index = (info >> regs::FUNCTION_VF_INDEX_SHIFT) & 0xFF;
    println!("MAGIC         {magic:#010x}");
    println!(
        "ABI_VERSION   {version:#010x} (ABI {}.{})",
        version >> 16,
        version & 0xFFFF
    );
    println!(
        "FUNCTION_INFO {info:#010x} ({})",
        match is_vf {
            true => format!("VF {vf_index}"),
            false => "PF".into(),
        }
    );
    println!("CAPS          {caps:#018x}");
    if magic != regs::MAGIC {
        return Err(format!(
            "MAGIC reads {magic:#010x}, not \"RNIC\": BAR0 is not decoding"
        ));
    }
    if version >> 16 != u32::from(rnic_abi::ABI_MAJOR) {
        return Err(format!(
            "ABI major {} is not {}",
            version >> 16,
            rnic_abi::ABI_MAJOR
        ));
    }
    if is_vf != (device == pci::VF_DEVICE_ID) {
        return Err("FUNCTION_INFO and the PCI device ID disagree on PF or VF".into());
    }
    // Require the bits we use, ignore the others (§1.3 item 4).
    let needed = regs::CAP_CMDQ | regs::CAP_DOORBELL_NOTIFY | regs::CAP_RDMA_RC;
    if caps & needed != needed {
        return Err(format!(
            "CAPS lacks {:#x} (command queue, doorbells, RC verbs)",
            needed & !caps
        ));
    }

    // §10 step 4, §8: reset the function's device state and wait until it is READY.
    t.reg_write32(regs::DEVICE_CONTROL, regs::CONTROL_RESET)
        .map_err(what("reset"))?;
    wait_for("DEVICE_STATUS.READY", || {
        Ok(reg(regs::DEVICE_STATUS)? & regs::STATUS_READY != 0)
    })?;
    // §10 step 5, §5.5: Bus Master Enable, or the device may not touch our memory.
    let command = config_read16(t, cfg::COMMAND)?;
    config_write16(
        t,
        cfg::COMMAND,
        command | cfg::COMMAND_MEMORY | cfg::COMMAND_BUS_MASTER,
    )?;

    // All the DMA memory we need, one zeroed 4 KiB page per ring or buffer, so that every
    // page list below is a single page address (§7.3).
    let page = || {
        t.alloc_dma(PAGE_SIZE as usize)
            .map_err(what("allocate DMA memory"))
    };
    let mut cmdq = CommandQueue {
        rings: page()?,
        req: page()?,
        resp: page()?,
        next: 0,
    };
    let (lists, eq_ring, cq_ring, mr_buf) = (page()?, page()?, page()?, page()?);
    let (sq_a, rq_a, sq_b, rq_b) = (page()?, page()?, page()?, page()?);

    // §10 step 7, §6.1: the command queue.
    cmdq.start(t)?;
    // §10 steps 8-10, §6.12: QUERY_DEVICE, our first command.
    let dev: QueryDeviceResp = cmdq.execute(t, Opcode::QueryDevice, &[])?;
    if dev.abi_major != rnic_abi::ABI_MAJOR || dev.caps & regs::CAP_RDMA_RC == 0 {
        return Err(format!(
            "QUERY_DEVICE: ABI {} caps {:#x}",
            dev.abi_major, dev.caps
        ));
    }
    let (mac, gid) = (dev.mac.map(|b| format!("{b:02x}")), Ipv6Addr::from(dev.gid));
    println!("QUERY_DEVICE  MAC {}, GID {gid}", mac.join(":"));

    // §7.15 step 2, §7.4 CREATE_EQ: the event queue, polled (NO_VECTOR). Nothing here waits
    // on events, but this is where completion and async events would go.
    let eq = v::CreateEqReq {
        ring: page_list(&lists, 0, &eq_ring),
        entries: ENTRIES,
        vector: regs::NO_VECTOR,
        doorbell_page: DB_PAGE,
        reserved: 0,
    };
    let eq: v::CreateEqResp = cmdq.execute(t, Opcode::CreateEq, eq.as_bytes())?;
    // §7.15 step 3: a protection domain (ALLOC_PD has no request body) ...
    let pd: v::ObjectResp = cmdq.execute(t, Opcode::AllocPd, &[])?;
    // ... a memory region over `mr_buf`, known by its device address (§7.3) and open to
    // remote writes (REMOTE_WRITE needs LOCAL_WRITE, §7.4 REG_MR) ...
    let iova = mr_buf.device_addr(0);
    let mr = v::RegMrReq {
        pdn: pd.handle,
        access: v::ACCESS_LOCAL_WRITE | v::ACCESS_REMOTE_WRITE,
        iova,
        length: PAGE_SIZE,
        pages: page_list(&lists, 1, &mr_buf),
    };
    let mr: v::RegMrResp = cmdq.execute(t, Opcode::RegMr, mr.as_bytes())?;
    // ... and one CQ for the send and receive completions of both QPs.
    let cq = v::CreateCqReq {
        ring: page_list(&lists, 2, &cq_ring),
        entries: ENTRIES,
        doorbell_page: DB_PAGE,
    };
    let cq: v::CreateCqResp = cmdq.execute(t, Opcode::CreateCq, cq.as_bytes())?;
    println!(
        "objects       EQ {} PD {} MR lkey/rkey {:#x}/{:#x} CQ {}",
        eq.eqn, pd.handle, mr.lkey, mr.rkey, cq.cqn
    );

    // §7.15 step 4, §7.4 CREATE_QP: two RC QPs. One SGE per send WQE, so the send ring's
    // stride is sq_stride(1, 0) = 128 bytes; the receive rings hold one 32-byte entry.
    let create_qp = |cmdq: &mut CommandQueue, index, sq: &DmaBuffer, rq: &DmaBuffer| {
        let req = v::CreateQpReq {
            pdn: pd.handle,
            send_cqn: cq.cqn,
            recv_cqn: cq.cqn,
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
        cmdq.execute::<v::CreateQpResp>(t, Opcode::CreateQp, req.as_bytes())
    };
    let qp_a = create_qp(&mut cmdq, 3, &sq_a, &rq_a)?;
    let qp_b = create_qp(&mut cmdq, 5, &sq_b, &rq_b)?;
    println!("QPs           A {:#x}, B {:#x}", qp_a.qpn, qp_b.qpn);

    // §7.8, §7.15 steps 5-7: RESET -> INIT -> RTR -> RTS, each QP aimed at the other. Both
    // live on this function, and a QP may reach a QP of its own function (§7.12): the
    // destination GID is our own.
    for (me, peer) in [(qp_a.qpn, qp_b.qpn), (qp_b.qpn, qp_a.qpn)] {
        let init = v::QpAttr {
            qp_state: QpState::Init as u8,
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: v::ACCESS_REMOTE_WRITE,
            ..Default::default()
        };
        let rtr = v::QpAttr {
            qp_state: QpState::Rtr as u8,
            dgid: dev.gid,
            sgid_index: 0,
            hop_limit: 64,
            path_mtu: v::mtu::MTU_1024,
            dest_qp_num: peer,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        let rts = v::QpAttr {
            qp_state: QpState::Rts as u8,
            sq_psn: 0,
            timeout: 14, // 4.096 us * 2^14, about 67 ms
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let steps = [
            (
                init,
                attr::STATE | attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS,
            ),
            (
                rtr,
                attr::STATE
                    | attr::AV
                    | attr::PATH_MTU
                    | attr::DEST_QPN
                    | attr::RQ_PSN
                    | attr::MAX_DEST_RD_ATOMIC
                    | attr::MIN_RNR_TIMER,
            ),
            (
                rts,
                attr::STATE
                    | attr::SQ_PSN
                    | attr::TIMEOUT
                    | attr::RETRY_CNT
                    | attr::RNR_RETRY
                    | attr::MAX_QP_RD_ATOMIC,
            ),
        ];
        for (attr, attr_mask) in steps {
            let req = v::ModifyQpReq {
                qpn: me,
                attr_mask,
                attr,
            };
            cmdq.execute::<()>(t, Opcode::ModifyQp, req.as_bytes())?;
        }
    }
    println!("QPs           both in RTS");

    // §7.6 "Send WQE": an RDMA WRITE of MESSAGE from the start of the region to DST, with
    // one SGE right after the 64-byte fixed part. SIGNALED asks for a completion.
    mr_buf.write(SRC, MESSAGE);
    let wqe = v::SendWqe {
        wr_id: WR_ID,
        opcode: v::wr::RDMA_WRITE,
        flags: v::send_flags::SIGNALED,
        num_sge: 1,
        remote_addr: iova + DST as u64,
        rkey: mr.rkey,
        ..Default::default()
    };
    let sge = v::Sge {
        addr: iova + SRC as u64,
        length: MESSAGE.len() as u32,
        lkey: mr.lkey,
    };
    sq_a.write(0, wqe.as_bytes()); // entry 0 of the ring: the first WQE ever posted
    sq_a.write(size_of::<v::SendWqe>(), sge.as_bytes());

    // §7.5 "Posting", then §4.4: the posted count into the send slot, the slot's bit in the
    // page's RUNG_BITMAP, and a kick only if the device asked for one.
    let db = t.doorbells();
    let page_base = u64::from(qp_a.sq_doorbell.page) * PAGE_SIZE;
    let slot = qp_a.sq_doorbell.slot;
    fence(Ordering::Release); // the WQE before the count
    db.write32(doorbell::slot_offset(qp_a.sq_doorbell.page, slot), 1);
    fence(Ordering::Release); // the count before the bit
    let word = page_base + doorbell::RUNG_BITMAP + 4 * u64::from(slot / 32);
    // A plain read-modify-write: safe, as we are this page's only writer (§7.5).
    db.write32(word, db.read32(word) | 1 << (slot % 32));
    fence(Ordering::SeqCst); // the doorbells before the NOTIFY_REQUEST load (§4.5)
    let kicked = db.read32(page_base + doorbell::NOTIFY_REQUEST) != 0;
    if kicked {
        t.reg_write32(regs::DOORBELL_KICK, qp_a.sq_doorbell.page)
            .map_err(what("kick"))?;
    }
    println!(
        "posted        RDMA WRITE of {} bytes (kicked: {kicked})",
        MESSAGE.len()
    );

    // §7.6 "CQE" and "Ownership phase", §7.7: wait for CQE 0 to show the first pass's owner
    // bit (1), then read it, then hand it back through the CQ's consumer index.
    let owner = || (cq_ring.load_u32(0x18) >> 24) as u8 & 1; // acquire load of bytes 0x18..0x1C
    wait_for("the RDMA WRITE's completion", || {
        Ok(owner() == v::owner_phase(0, ENTRIES))
    })?;
    let mut bytes = [0u8; size_of::<v::Cqe>()];
    cq_ring.read(0, &mut bytes);
    let cqe = v::Cqe::read_from_bytes(&bytes).map_err(|_| "CQE size")?;
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
    // The completion of a WRITE means the responder has the data: check the bytes (§7.9).
    let mut arrived = vec![0u8; MESSAGE.len()];
    mr_buf.read(DST, &mut arrived);
    if arrived != MESSAGE {
        return Err(format!(
            "the target holds {:?}",
            String::from_utf8_lossy(&arrived)
        ));
    }
    Ok(format!(
        "RDMA WRITE of {} bytes from QP {:#x} to QP {:#x} arrived: \"{}\"",
        MESSAGE.len(),
        qp_a.qpn,
        qp_b.qpn,
        String::from_utf8_lossy(MESSAGE)
    ))
}

/// The command queue of §6: a virtio split ring in one page, plus one page for the
/// request and one for the response, as we send one command at a time.
struct CommandQueue {
    rings: DmaBuffer,
    req: DmaBuffer,
    resp: DmaBuffer,
    /// Commands sent so far: the available ring's `idx`, and the token of the next one.
    next: u16,
}

impl CommandQueue {
    /// §6.1, §10 step 7: program the ring registers of §3.3 and enable the queue.
    fn start(&mut self, t: &dyn Transport) -> Result<()> {
        self.rings.store_u16(AVAIL, AVAIL_F_NO_INTERRUPT); // avail->flags: we poll
        let base = self.rings.device_addr(0);
        let write = |offset, value| t.reg_write32(offset, value).map_err(what("write BAR0"));
        for (lo, addr) in [
            (regs::CMDQ_DESC_LO, base),
            (regs::CMDQ_AVAIL_LO, base + AVAIL as u64),
            (regs::CMDQ_USED_LO, base + USED as u64),
        ] {
            write(lo, addr as u32)?; // the low half first (§6.1 step 4)
            write(lo + 4, (addr >> 32) as u32)?;
        }
        write(regs::CMDQ_SIZE, u32::from(CMDQ_SIZE))?;
        write(regs::CMDQ_MSIX_VECTOR, regs::NO_VECTOR)?;
        write(regs::CMDQ_CONTROL, regs::CMDQ_ENABLE)?;
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
        Ok(())
    }

    /// Sends one command and waits for its response (§6.4-§6.10): `body` is the request
    /// structure after the `CmdHeader`, `R` the response structure after the `RespHeader`
    /// (`()` for none).
    fn execute<R: FromBytes + Immutable>(
        &mut self,
        t: &dyn Transport,
        opcode: Opcode,
        body: &[u8],
    ) -> Result<R> {
        let token = u32::from(self.next) + 1;
        let header = CmdHeader {
            opcode: opcode as u16,
            reserved: 0,
            token,
        };
        self.req.write(0, header.as_bytes());
        self.req.write(size_of::<CmdHeader>(), body);
        let resp_len = size_of::<RespHeader>() + size_of::<R>();
        // §6.3, §6.4: descriptor 0, readable, the request; chained to descriptor 1,
        // writable, room for the response.
        let request = (
            self.req.device_addr(0),
            8 + body.len() as u32,
            DESC_F_NEXT,
            1,
        );
        let response = (self.resp.device_addr(0), resp_len as u32, DESC_F_WRITE, 0);
        for (i, (addr, len, flags, next)) in [request, response].into_iter().enumerate() {
            let mut desc = [0u8; 16];
            desc[0..8].copy_from_slice(&addr.to_le_bytes());
            desc[8..12].copy_from_slice(&len.to_le_bytes());
            desc[12..14].copy_from_slice(&flags.to_le_bytes());
            desc[14..16].copy_from_slice(&u16::to_le_bytes(next));
            self.rings.write(16 * i, &desc);
        }
        // §6.10, §4.4: the ring entry (head descriptor 0), then avail->idx (a release store),
        // then the doorbell: release fence, CMDQ_DOORBELL = idx, full fence, and a kick
        // only if NOTIFY_REQUEST says the device may be asleep.
        let slot = usize::from(self.next % CMDQ_SIZE);
        self.rings.store_u16(AVAIL + 4 + 2 * slot, 0);
        self.next = self.next.wrapping_add(1);
        self.rings.store_u16(AVAIL + 2, self.next);
        fence(Ordering::Release);
        t.doorbells()
            .write32(doorbell::CMDQ_DOORBELL, u32::from(self.next));
        fence(Ordering::SeqCst);
        if t.doorbells().read32(doorbell::NOTIFY_REQUEST) != 0 {
            t.reg_write32(regs::DOORBELL_KICK, 0)
                .map_err(what("kick"))?;
        }
        // §6.9, §10 step 9: wait for used->idx (an acquire load); on a timeout look at FATAL.
        let name = format!("{opcode:?}");
        let done = wait_for(&name, || Ok(self.rings.load_u16(USED + 2) == self.next));
        if let Err(e) = done {
            let status = t
                .reg_read32(regs::DEVICE_STATUS)
                .map_err(what("read BAR0"))?;
            let fatal = status & regs::STATUS_FATAL != 0;
            return Err(format!("{e} (DEVICE_STATUS {status:#x}, FATAL: {fatal})"));
        }
        // §6.8: the used element's len says how much the device wrote.
        let written = self.rings.load_u32(USED + 4 + 8 * slot + 4) as usize;
        let mut bytes = vec![0u8; resp_len];
        self.resp.read(0, &mut bytes);
        let (head, rest) = RespHeader::read_from_prefix(&bytes).map_err(|_| "short response")?;
        // §6.6, §6.7: the status, the token echoed back.
        if written < size_of::<RespHeader>() || head.token != token {
            return Err(format!(
                "{name}: used length {written}, token {}",
                head.token
            ));
        }
        if head.status != Status::Ok as u16 {
            return Err(format!(
                "{name} failed: status {:?} syndrome {:#x} (§6.7, §7.4)",
                Status::from_u16(head.status),
                head.syndrome
            ));
        }
        if written < resp_len {
            return Err(format!(
                "{name}: {written} bytes of response, {resp_len} expected"
            ));
        }
        R::read_from_bytes(rest).map_err(|_| format!("{name}: response size"))
    }
}

/// A one-page `PageList` (§7.3) for `buf`: its page address goes into entry `index` of the
/// `lists` page, a flat array of one address.
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
