//! A real rnicd, driven through the host transport: vfio-user over a real socket, guest
//! memory in a real memfd that the device maps, doorbells in the mmapped BAR.

use std::time::{Duration, Instant};

use rnic_abi::cmd::{Opcode, Status, FUNCTION_KIND_PF, FUNCTION_KIND_VF};
use rnic_abi::pci::{self, cfg};
use rnic_abi::vfio_user::{CMD_DEVICE_GET_INFO, CMD_VERSION};
use rnic_abi::{doorbell, regs};
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::transport::Transport;
use rnic_driver::Device;
use rnic_tests::hostile::Client;
use rnic_tests::{wait_for, Rnicd};

fn open(rnicd: &Rnicd, name: &str) -> Device {
    let t = VfioUserTransport::connect(&rnicd.socket(name)).expect("connect");
    Device::open(Box::new(t)).expect("open")
}

fn cfg_u16(t: &dyn Transport, at: usize) -> u16 {
    let mut b = [0u8; 2];
    t.config_read(at as u16, &mut b).expect("config read");
    u16::from_le_bytes(b)
}

fn cfg_u32(t: &dyn Transport, at: usize) -> u32 {
    let mut b = [0u8; 4];
    t.config_read(at as u16, &mut b).expect("config read");
    u32::from_le_bytes(b)
}

#[test]
fn config_space_reads_back_as_hardware_has_it() {
    let rnicd = Rnicd::start(3, &[]);
    let pf = VfioUserTransport::connect(&rnicd.socket("pf")).expect("connect pf");
    let vf = VfioUserTransport::connect(&rnicd.socket("vf2")).expect("connect vf2");
    assert_eq!(cfg_u16(&pf, cfg::VENDOR_ID), pci::VENDOR_ID);
    assert_eq!(cfg_u16(&pf, cfg::DEVICE_ID), pci::PF_DEVICE_ID);
    assert_eq!(cfg_u16(&vf, cfg::DEVICE_ID), pci::VF_DEVICE_ID);
    assert_eq!(cfg_u32(&pf, 0x08) >> 8, pci::CLASS_CODE);

    // Walk the capability list: PM, MSI-X, PCIe.
    let mut ids = Vec::new();
    let mut at = usize::from(cfg_u16(&vf, cfg::CAP_PTR) as u8);
    while at != 0 && ids.len() < 16 {
        let h = cfg_u16(&vf, at);
        ids.push((h & 0xff) as u8);
        at = usize::from(h >> 8);
    }
    assert_eq!(ids, [cfg::CAP_ID_PM, cfg::CAP_ID_MSIX, cfg::CAP_ID_PCIE]);
    let msix_ctrl = cfg_u16(&vf, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL);
    assert_eq!(msix_ctrl & 0x7ff, pci::MSIX_VECTORS - 1);
    assert_eq!(
        cfg_u32(&vf, cfg::MSIX_CAP + cfg::MSIX_TABLE),
        pci::MSIX_TABLE_OFFSET as u32 | u32::from(pci::REG_BAR)
    );

    // The PF carries SR-IOV; a VF has no extended capabilities.
    assert_eq!(
        cfg_u32(&pf, cfg::SRIOV_CAP) & 0xffff,
        u32::from(cfg::EXT_CAP_ID_SRIOV)
    );
    assert_eq!(cfg_u16(&pf, cfg::SRIOV_CAP + cfg::SRIOV_TOTAL_VFS), 3);
    assert_eq!(cfg_u16(&pf, cfg::SRIOV_CAP + cfg::SRIOV_VF_OFFSET), 1);
    assert_eq!(cfg_u16(&pf, cfg::SRIOV_CAP + cfg::SRIOV_VF_STRIDE), 1);
    assert_eq!(
        cfg_u16(&pf, cfg::SRIOV_CAP + cfg::SRIOV_VF_DEVICE_ID),
        pci::VF_DEVICE_ID
    );
    assert_eq!(cfg_u32(&vf, cfg::SRIOV_CAP), 0);

    // Read-only fields ignore writes; BAR sizing works through the socket.
    pf.config_write(cfg::VENDOR_ID as u16, &0x1234u16.to_le_bytes())
        .expect("write");
    assert_eq!(cfg_u16(&pf, cfg::VENDOR_ID), pci::VENDOR_ID);
    pf.config_write(cfg::BAR0 as u16, &u32::MAX.to_le_bytes())
        .expect("write");
    assert_eq!(
        cfg_u32(&pf, cfg::BAR0) & !0xf,
        !(pci::REG_BAR_SIZE as u32 - 1)
    );
    let bar2 = cfg::BAR0 + 4 * usize::from(pci::DOORBELL_BAR);
    pf.config_write(bar2 as u16, &u32::MAX.to_le_bytes())
        .expect("write");
    let doorbell_bar = cfg_u32(&pf, bar2);
    assert_eq!(
        doorbell_bar & !0xf,
        !(rnic_abi::doorbell::BAR_SIZE as u32 - 1)
    );
    assert_eq!(doorbell_bar & 0xf, 0b1100, "64-bit prefetchable memory BAR");

    // Status bits are write-1-to-clear: writing ones to a clear register leaves it clear,
    // and the read-only capabilities-list bit stays set.
    pf.config_write(cfg::STATUS as u16, &0xffffu16.to_le_bytes())
        .expect("write");
    assert_eq!(cfg_u16(&pf, cfg::STATUS), cfg::STATUS_CAP_LIST);
}

#[test]
fn command_queue_round_trip() {
    let rnicd = Rnicd::start(2, &[]);
    let vf = open(&rnicd, "vf1");
    vf.nop().expect("nop");
    let q = vf.query_device().expect("query");
    assert_eq!(q.vendor_id, pci::VENDOR_ID);
    assert_eq!(q.device_id, pci::VF_DEVICE_ID);
    assert_eq!(q.function_kind, FUNCTION_KIND_VF);
    assert_eq!(q.vf_index, 1);
    assert_eq!(
        (q.abi_major, q.abi_minor),
        (rnic_abi::ABI_MAJOR, rnic_abi::ABI_MINOR)
    );
    assert_ne!(q.caps & regs::CAP_CMDQ, 0);
    assert_eq!(q.limits.msix_vectors, u32::from(pci::MSIX_VECTORS));

    let pf = open(&rnicd, "pf");
    let q = pf.query_device().expect("query pf");
    assert_eq!((q.function_kind, q.total_vfs), (FUNCTION_KIND_PF, 2));
    assert_ne!(
        pf.query_device().expect("pf").mac,
        vf.query_device().expect("vf").mac
    );
}

#[test]
fn unknown_opcodes_and_bad_requests_get_an_error_status() {
    let rnicd = Rnicd::start(0, &[]);
    let pf = open(&rnicd, "pf");
    let c = pf.raw_command(0x7abc, &[], 0).expect("answered");
    assert_eq!(c.header.status, Status::BadOpcode as u16);
    assert_eq!(c.header.opcode, 0x7abc);
    let c = pf
        .raw_command(Opcode::QueryDevice as u16, &[1, 2, 3], 256)
        .expect("answered");
    assert_eq!(c.header.status, Status::BadParam as u16);
    // A response buffer too small for QUERY_DEVICE: the device says how much it needs.
    let c = pf
        .raw_command(Opcode::QueryDevice as u16, &[], 4)
        .expect("answered");
    assert_eq!(c.header.status, Status::Malformed as u16);
    assert!(c.header.syndrome > 4 + 16);
    // And the queue goes on working.
    pf.nop().expect("nop after errors");
}

#[test]
fn msix_interrupt_arrives_on_its_eventfd() {
    let rnicd = Rnicd::start(1, &[]);
    let vf = open(&rnicd, "vf0");
    assert!(vf.interrupts(), "the host transport delivers MSI-X");
    for _ in 0..5 {
        vf.nop().expect("nop");
    }
    let stats = vf.cmdq_stats();
    assert_eq!(stats.commands, 5);
    assert_eq!(stats.interrupts, 5, "one completion interrupt per command");

    // With MSI-X disabled in config space the message waits in the PBA instead.
    let t = vf.transport();
    let ctrl_at = (cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL) as u16;
    let ctrl = cfg_u16(t, ctrl_at.into());
    t.config_write(ctrl_at, &(ctrl & !cfg::MSIX_ENABLE).to_le_bytes())
        .expect("disable msi-x");
    let _ = vf.nop();
    assert_eq!(
        t.reg_read32(pci::MSIX_PBA_OFFSET).expect("pba") & 1,
        1,
        "vector 0 pending"
    );
    // Enabling MSI-X delivers it.
    t.config_write(ctrl_at, &(ctrl | cfg::MSIX_ENABLE).to_le_bytes())
        .expect("enable msi-x");
    assert!(t.wait_interrupt(0, Duration::from_secs(5)).expect("wait"));
    assert_eq!(t.reg_read32(pci::MSIX_PBA_OFFSET).expect("pba") & 1, 0);
}

#[test]
fn doorbells_cost_no_message_while_the_device_polls() {
    // A long poll window: after the first command the device keeps polling, so no
    // doorbell needs a kick (a trapped register write).
    let rnicd = Rnicd::start(0, &["--poll-us", "5000000"]);
    let pf = open(&rnicd, "pf");
    for _ in 0..50 {
        pf.nop().expect("nop");
    }
    let busy = pf.cmdq_stats();
    assert_eq!(busy.commands, 50);
    assert!(
        busy.kicks <= 1,
        "{} kicks while the device polled",
        busy.kicks
    );
    drop(pf);

    // No poll window: the device sleeps after each command, asking for a kick first, and
    // every doorbell rung while it sleeps kicks. (Each round waits for the request rather
    // than for a time, so a slow machine cannot ring before the device went to sleep.)
    let rnicd = Rnicd::start(0, &["--poll-us", "0"]);
    let pf = open(&rnicd, "pf");
    for _ in 0..20 {
        let asleep = Instant::now() + Duration::from_secs(5);
        while pf.transport().doorbells().read32(doorbell::NOTIFY_REQUEST) == 0 {
            assert!(Instant::now() < asleep, "the device never asked for a kick");
            std::thread::sleep(Duration::from_millis(1));
        }
        pf.nop().expect("nop");
    }
    assert_eq!(
        pf.cmdq_stats().kicks,
        20,
        "a sleeping device needs a kick per doorbell"
    );
}

#[test]
fn an_idle_device_uses_no_cpu() {
    let rnicd = Rnicd::start(4, &[]);
    let pf = open(&rnicd, "pf");
    pf.nop().expect("nop");
    std::thread::sleep(Duration::from_millis(100));
    let before = rnicd.cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let used = rnicd.cpu_ticks() - before;
    // Clock ticks are 10 ms: a busy-polling device would use ~100.
    assert!(used <= 2, "idle rnicd used {used} ticks in a second");
}

#[test]
fn function_reset_by_register_and_by_vfio_user_touches_only_that_function() {
    let rnicd = Rnicd::start(2, &[]);
    let vf0 = open(&rnicd, "vf0");
    let vf1 = open(&rnicd, "vf1");
    let t = vf0.transport();
    t.config_write(cfg::INTERRUPT_LINE as u16, &[0x5a])
        .expect("write");
    assert_ne!(
        t.reg_read32(regs::DEVICE_STATUS).expect("status") & regs::STATUS_CMDQ_RUNNING,
        0
    );

    t.reg_write32(regs::DEVICE_CONTROL, regs::CONTROL_RESET)
        .expect("reset");
    let status = t.reg_read32(regs::DEVICE_STATUS).expect("status");
    assert_eq!(status & regs::STATUS_CMDQ_RUNNING, 0, "the queue stopped");
    assert_ne!(status & regs::STATUS_READY, 0);
    assert_eq!(t.reg_read32(regs::CMDQ_SIZE).expect("size"), 0);
    let mut line = [0u8];
    t.config_read(cfg::INTERRUPT_LINE as u16, &mut line)
        .expect("read");
    assert_eq!(
        line[0], 0x5a,
        "the driver's own reset leaves config space alone"
    );
    vf1.nop().expect("the other VF is untouched");

    // vfio-user DEVICE_RESET resets the whole function, config space included.
    let vf1_t = vf1.transport();
    vf1_t
        .config_write(cfg::INTERRUPT_LINE as u16, &[0x5a])
        .expect("write");
    vf1_t.function_reset().expect("DEVICE_RESET");
    assert_eq!(
        vf1_t.reg_read32(regs::DEVICE_STATUS).expect("status") & regs::STATUS_CMDQ_RUNNING,
        0
    );
    vf1_t
        .config_read(cfg::INTERRUPT_LINE as u16, &mut line)
        .expect("read");
    assert_eq!(line[0], 0, "config space back to power-on");

    // PCIe FLR too.
    let pf = open(&rnicd, "pf");
    let devctl = (cfg::PCIE_CAP + cfg::PCIE_DEVCTL) as u16;
    let v = cfg_u16(pf.transport(), devctl.into());
    pf.transport()
        .config_write(devctl, &(v | cfg::PCIE_DEVCTL_FLR).to_le_bytes())
        .expect("flr");
    assert_eq!(
        pf.transport()
            .reg_read32(regs::DEVICE_STATUS)
            .expect("status")
            & regs::STATUS_CMDQ_RUNNING,
        0
    );

    // Reopening (which resets and sets up again) works on every reset function.
    drop((vf0, vf1, pf));
    for name in ["vf0", "vf1", "pf"] {
        open(&rnicd, name).nop().expect("nop after reset");
    }
}

#[test]
fn a_second_client_follows_the_first() {
    let rnicd = Rnicd::start(1, &[]);
    for round in 0..3 {
        let vf = open(&rnicd, "vf0");
        vf.nop().unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(vf.query_device().expect("query").vf_index, 0);
    }
    // A client that leaves without a word: the device drops its memory and serves on.
    let t = VfioUserTransport::connect(&rnicd.socket("vf0")).expect("connect");
    t.disconnect().expect("shutdown");
    drop(t);
    open(&rnicd, "vf0")
        .nop()
        .expect("after an abrupt disconnect");
    assert!(rnicd.log().contains("client disconnected"));
}

#[test]
fn fdless_dma_map_is_refused_with_an_error_naming_memfd() {
    let rnicd = Rnicd::start(0, &[]);
    let mut raw = Client::attach(&rnicd.socket("pf"));
    assert_eq!(
        raw.dma_map(None, 0x1000_0000, 0x10_0000, 0),
        Err(libc::EBADF)
    );
    wait_for(Duration::from_secs(5), "the refusal in the log", || {
        rnicd.log().contains("memory-backend-memfd")
    });
    // The connection and the device go on.
    let info = [16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(raw.call(CMD_DEVICE_GET_INFO, &info, &[]).errno(), None);
}

#[test]
fn dma_outside_mapped_memory_fails_the_queue_not_the_device() {
    let rnicd = Rnicd::start(1, &[]);
    let t = VfioUserTransport::connect(&rnicd.socket("vf0")).expect("connect");
    let vf = Device::open(Box::new(t)).expect("open");
    vf.nop().expect("nop");
    // Take the memory away under the running queue, then ring its doorbell.
    let t = vf.transport();
    let vfio = t
        .as_any()
        .downcast_ref::<VfioUserTransport>()
        .expect("host transport");
    vfio.unmap_guest_memory().expect("unmap");
    t.doorbells()
        .write32(rnic_abi::doorbell::CMDQ_DOORBELL, 0xffff);
    t.reg_write32(regs::DOORBELL_KICK, 0).expect("kick");
    wait_for(Duration::from_secs(5), "the queue to fail", || {
        t.reg_read32(regs::DEVICE_STATUS).expect("status") & regs::STATUS_FATAL != 0
    });
    assert_eq!(
        t.reg_read32(regs::ERROR_CODE).expect("code"),
        regs::ERR_CMDQ_DMA
    );
    drop(vf);
    open(&rnicd, "vf0").nop().expect("a new client works");
}

/// Asks the function to start a queue of `size` entries; returns its ERROR_CODE.
fn try_enable_cmdq(t: &dyn Transport, size: u32) -> u32 {
    t.reg_write32(regs::CMDQ_SIZE, size).expect("size");
    t.reg_write32(regs::CMDQ_CONTROL, regs::CMDQ_ENABLE)
        .expect("enable");
    t.reg_read32(regs::ERROR_CODE).expect("code")
}

#[test]
fn command_queue_setup_errors_name_the_problem() {
    let rnicd = Rnicd::start(0, &[]);
    let t = VfioUserTransport::connect(&rnicd.socket("pf")).expect("connect");
    // Bus mastering is off after reset.
    t.reg_write32(regs::DEVICE_CONTROL, regs::CONTROL_RESET)
        .expect("reset");
    assert_eq!(try_enable_cmdq(&t, 64), regs::ERR_BUS_MASTER);
    let cmd = cfg_u16(&t, cfg::COMMAND) | cfg::COMMAND_BUS_MASTER | cfg::COMMAND_MEMORY;
    t.config_write(cfg::COMMAND as u16, &cmd.to_le_bytes())
        .expect("bme");
    assert_eq!(try_enable_cmdq(&t, 3), regs::ERR_CMDQ_SIZE);
    // Rings at addresses nobody mapped.
    t.reg_write32(regs::CMDQ_DESC_LO, 0x1000).expect("desc");
    assert_eq!(try_enable_cmdq(&t, 64), regs::ERR_CMDQ_ADDRESS);
    let status = t.reg_read32(regs::DEVICE_STATUS).expect("status");
    assert_eq!(status & regs::STATUS_CMDQ_RUNNING, 0);
    assert!(
        Device::open(Box::new(t)).is_ok(),
        "a proper bring-up still works"
    );
}

#[test]
fn functions_work_concurrently() {
    let rnicd = Rnicd::start(3, &[]);
    let threads: Vec<_> = ["pf", "vf0", "vf1", "vf2"]
        .into_iter()
        .map(|name| {
            let path = rnicd.socket(name);
            std::thread::spawn(move || {
                let d = Device::open(Box::new(
                    VfioUserTransport::connect(&path).expect("connect"),
                ))
                .expect("open");
                for _ in 0..100 {
                    d.nop().expect("nop");
                }
                d.query_device().expect("query").mac
            })
        })
        .collect();
    let mut macs: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    macs.sort();
    macs.dedup();
    assert_eq!(macs.len(), 4, "each function has its own MAC");
}

#[test]
fn a_broken_client_costs_only_its_connection() {
    let rnicd = Rnicd::start(0, &[]);
    // A VERSION whose size is shorter than its own header, then garbage.
    {
        let mut raw = Client::connect(&rnicd.socket("pf"));
        let mut m = raw.message(CMD_VERSION, &[], 0);
        m[4..8].copy_from_slice(&4u32.to_le_bytes());
        m.extend_from_slice(&[0xff; 64]);
        let _ = raw.send_raw(&m, &[]);
    }
    // A command number nobody knows, on a negotiated connection.
    {
        let mut raw = Client::attach(&rnicd.socket("pf"));
        assert!(raw.call(0x7777, &[], &[]).errno().is_some());
    }
    let mut rnicd = rnicd;
    assert!(rnicd.alive());
    open(&rnicd, "pf")
        .nop()
        .expect("the device serves the next client");
}

fn sockets_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sock"))
        })
        .count()
}

#[test]
fn sigterm_removes_the_sockets() {
    let mut rnicd = Rnicd::start(2, &[]);
    let dir = rnicd.socket_dir();
    // Three functions and the control socket (§12.9).
    assert_eq!(sockets_in(&dir), 4);
    let status = rnicd.stop_with(libc::SIGTERM);
    assert!(status.success(), "{status:?}");
    assert_eq!(sockets_in(&dir), 0, "sockets removed");
    // And a new rnicd serves the same directory.
    let mut again = std::process::Command::new(rnic_tests::bin("rnicd"))
        .arg("--socket-dir")
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run");
    wait_for(Duration::from_secs(10), "the new rnicd's socket", || {
        sockets_in(&dir) == 2
    });
    assert!(
        again.try_wait().expect("wait").is_none(),
        "the new rnicd runs"
    );
    let _ = again.kill();
    let _ = again.wait();
}

#[test]
fn a_second_rnicd_on_the_same_directory_is_refused() {
    let rnicd = Rnicd::start(0, &[]);
    let out = std::process::Command::new(rnic_tests::bin("rnicd"))
        .arg("--socket-dir")
        .arg(rnicd.socket_dir())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("served by another process"), "{err}");
    open(&rnicd, "pf").nop().expect("the first one is unharmed");
}

#[test]
fn rnic_info_prints_identity_and_json() {
    let rnicd = Rnicd::start(2, &[]);
    let out = std::process::Command::new(rnic_tests::bin("rnic-info"))
        .arg("--vfio-user")
        .arg(rnicd.socket("vf1"))
        .output()
        .expect("run rnic-info");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("vendor f1c0 device 0002"), "{text}");
    assert!(text.contains("function:     VF 1"), "{text}");
    assert!(
        text.contains("capabilities: cmdq doorbell-notify msix function-reset rdma-rc"),
        "{text}"
    );
    let out = std::process::Command::new(rnic_tests::bin("rnic-info"))
        .args(["--json", "--vfio-user"])
        .arg(rnicd.socket("pf"))
        .output()
        .expect("run rnic-info");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["function"], "PF");
    assert_eq!(v[0]["total_vfs"], 2);
    assert_eq!(v[0]["pci"]["vendor_id"], u64::from(pci::VENDOR_ID));
    // A missing socket is a clear error.
    let out = std::process::Command::new(rnic_tests::bin("rnic-info"))
        .args(["--vfio-user", "/nonexistent/pf.sock"])
        .output()
        .expect("run rnic-info");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is rnicd running"));
}
