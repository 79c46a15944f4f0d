//! One PCI function of the device (the PF or a VF): its config space, registers, MSI-X,
//! doorbells, DMA space and command queue, and what accesses to them do.
//!
//! This is the device logic behind the vfio-user glue of [`crate::vfio`], as igb_core is
//! behind igb: every access arrives here as a region read or write, whoever sent it.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use rnic_abi::cmd::{Limits, FUNCTION_KIND_PF, FUNCTION_KIND_VF};
use rnic_abi::doorbell::{self, CMDQ_DOORBELL};
use rnic_abi::pci::{self, DOORBELL_BAR, REG_BAR};
use rnic_abi::regs::*;
use vfio_bindings::bindings::vfio::{VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX};
use vmm_sys_util::eventfd::EventFd;

use crate::cmdq::{CommandQueue, RingConfig};
use crate::dma::DmaSpace;
use crate::doorbell::DoorbellBar;
use crate::msix::Msix;
use crate::pci::config::{BarSpec, ConfigParams, ConfigSpace, FunctionKind};

/// Which function of the device this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FunctionId {
    /// The physical function.
    Pf,
    /// Virtual function number n (0-based).
    Vf(u16),
}

impl std::fmt::Display for FunctionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FunctionId::Pf => write!(f, "pf"),
            FunctionId::Vf(i) => write!(f, "vf{i}"),
        }
    }
}

/// What a function is and has: fixed for its life.
#[derive(Debug, Clone)]
pub struct Identity {
    /// PF or VF.
    pub id: FunctionId,
    /// VFs of the device (the PF's TotalVFs).
    pub device_vfs: u16,
    /// Ethernet MAC address.
    pub mac: [u8; 6],
    /// Default GID: the IPv4-mapped address of the function.
    pub gid: [u8; 16],
    /// Capability bits.
    pub caps: u64,
    /// Resource limits.
    pub limits: Limits,
}

impl Identity {
    /// The identity of function `id` of a device with `device_vfs` VFs: MAC
    /// 02:52:4e:49:43:NN and IPv4 10.82.0.(NN+1), where NN is 0 for the PF and n+1 for VF n.
    pub fn new(id: FunctionId, device_vfs: u16) -> Self {
        let n = match id {
            FunctionId::Pf => 0u8,
            FunctionId::Vf(i) => (i as u8).wrapping_add(1),
        };
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 82, 0, n.wrapping_add(1)]);
        Self {
            id,
            device_vfs,
            mac: [0x02, 0x52, 0x4e, 0x49, 0x43, n],
            gid,
            caps: CAP_CMDQ | CAP_DOORBELL_NOTIFY | CAP_MSIX | CAP_FUNCTION_RESET,
            limits: Limits {
                max_qp: 256,
                max_qp_wr: 4096,
                max_sge: 16,
                max_cq: 256,
                max_cqe: 65536,
                max_mr: 1024,
                max_pd: 256,
                max_qp_rd_atom: 16,
                max_qp_init_rd_atom: 16,
                max_inline_data: 256,
                max_mr_size: 1 << 32,
                max_mr_pages: 1 << 18,
                doorbell_pages: doorbell::PAGES,
                msix_vectors: u32::from(pci::MSIX_VECTORS),
                cmdq_max_size: u32::from(rnic_abi::cmd::CMDQ_MAX_SIZE),
            },
        }
    }

    /// The PCI device ID.
    pub fn device_id(&self) -> u16 {
        match self.id {
            FunctionId::Pf => pci::PF_DEVICE_ID,
            FunctionId::Vf(_) => pci::VF_DEVICE_ID,
        }
    }

    /// `FUNCTION_KIND_*` of the function.
    pub fn kind_code(&self) -> u8 {
        match self.id {
            FunctionId::Pf => FUNCTION_KIND_PF,
            FunctionId::Vf(_) => FUNCTION_KIND_VF,
        }
    }

    /// The VF index, 0 on the PF.
    pub fn vf_index(&self) -> u16 {
        match self.id {
            FunctionId::Pf => 0,
            FunctionId::Vf(i) => i,
        }
    }

    /// TotalVFs on the PF, 0 on a VF.
    pub fn total_vfs(&self) -> u16 {
        match self.id {
            FunctionId::Pf => self.device_vfs,
            FunctionId::Vf(_) => 0,
        }
    }

    fn config_params(&self) -> ConfigParams {
        let bars = vec![
            BarSpec {
                index: REG_BAR,
                size: pci::REG_BAR_SIZE,
                prefetchable: false,
            },
            BarSpec {
                index: DOORBELL_BAR,
                size: doorbell::BAR_SIZE,
                prefetchable: true,
            },
        ];
        match self.id {
            FunctionId::Pf => ConfigParams {
                kind: FunctionKind::Pf {
                    total_vfs: self.device_vfs,
                },
                vf_bars: bars.clone(),
                bars,
                msix_vectors: pci::MSIX_VECTORS,
            },
            FunctionId::Vf(index) => ConfigParams {
                kind: FunctionKind::Vf { index },
                bars,
                vf_bars: Vec::new(),
                msix_vectors: pci::MSIX_VECTORS,
            },
        }
    }
}

/// BAR0 registers that hold driver-written values.
#[derive(Debug, Default)]
struct Registers {
    rings: RingConfig,
    cmdq_vector: u32,
    error_code: u32,
    fatal: bool,
}

impl Registers {
    fn power_on() -> Self {
        Self {
            cmdq_vector: NO_VECTOR,
            ..Self::default()
        }
    }
}

/// State behind the function's lock.
#[derive(Debug)]
struct State {
    config: ConfigSpace,
    regs: Registers,
    msix: Msix,
    cmdq: CommandQueue,
}

/// One PCI function.
#[derive(Debug)]
pub struct Function {
    identity: Identity,
    state: Mutex<State>,
    dma: DmaSpace,
    doorbells: DoorbellBar,
    /// Last command queue doorbell value the device acted on.
    cmdq_doorbell_seen: AtomicU32,
    /// Set by a kick, cleared by the engine when it has looked.
    kicked: AtomicBool,
    wake: EventFd,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl Function {
    /// A function in its power-on state.
    pub fn new(identity: Identity) -> io::Result<Self> {
        let state = State {
            config: ConfigSpace::new(identity.config_params()),
            regs: Registers::power_on(),
            msix: Msix::new(pci::MSIX_VECTORS),
            cmdq: CommandQueue::new(),
        };
        Ok(Self {
            identity,
            state: Mutex::new(state),
            dma: DmaSpace::new(),
            doorbells: DoorbellBar::new(doorbell::PAGES)?,
            cmdq_doorbell_seen: AtomicU32::new(0),
            kicked: AtomicBool::new(false),
            wake: EventFd::new(libc::EFD_NONBLOCK)?,
        })
    }

    /// Who the function is.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The function's DMA space.
    pub fn dma(&self) -> &DmaSpace {
        &self.dma
    }

    /// The doorbell BAR.
    pub fn doorbells(&self) -> &DoorbellBar {
        &self.doorbells
    }

    /// The eventfd the engine sleeps on for this function.
    pub fn wake_fd(&self) -> &EventFd {
        &self.wake
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not take the device down: the state stays consistent
        // because every mutation below completes before it can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kick(&self) {
        self.kicked.store(true, Ordering::Release);
        if let Err(e) = self.wake.write(1) {
            log::warn!("{}: cannot wake the engine: {e}", self.identity.id);
        }
    }

    /// A vfio-user REGION_READ.
    pub fn region_read(&self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self.lock().config.read(offset, data),
            r if r == u32::from(REG_BAR) => {
                self.bar0_read(offset, data);
                Ok(())
            }
            r if r == u32::from(DOORBELL_BAR) => {
                if self.doorbells.read_bytes(offset, data) {
                    Ok(())
                } else {
                    Err(invalid(format!(
                        "doorbell BAR read of {} bytes at {offset:#x} is outside it",
                        data.len()
                    )))
                }
            }
            _ => Err(invalid(format!("region {region} has no readable contents"))),
        }
    }

    /// A vfio-user REGION_WRITE.
    pub fn region_write(&self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self.config_write(offset, data),
            r if r == u32::from(REG_BAR) => {
                self.bar0_write(offset, data);
                Ok(())
            }
            r if r == u32::from(DOORBELL_BAR) => {
                // A client that does not map the BAR rings doorbells through messages; each
                // such write is its own notification.
                if self.doorbells.write_bytes(offset, data) {
                    self.kick();
                    Ok(())
                } else {
                    Err(invalid(format!(
                        "doorbell BAR write of {} bytes at {offset:#x} is outside it",
                        data.len()
                    )))
                }
            }
            _ => Err(invalid(format!("region {region} is not writable"))),
        }
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut st = self.lock();
        let effects = st.config.write(offset, data)?;
        if effects.flr {
            log::info!(
                "{}: function-level reset through PCIe FLR",
                self.identity.id
            );
            self.reset_locked(&mut st);
            return Ok(());
        }
        if effects.msix_changed {
            let (enabled, masked) = (st.config.msix_enabled(), st.config.msix_function_masked());
            st.msix.deliver_pending(enabled, masked);
        }
        if effects.command_changed && st.config.bus_master() {
            // Work may have queued up while DMA was off.
            drop(st);
            self.kick();
        }
        Ok(())
    }

    fn bar0_read(&self, offset: u64, data: &mut [u8]) {
        let st = self.lock();
        if let Some(area) = st.msix.area(offset, data.len()) {
            st.msix.read(area, data);
            return;
        }
        // Registers read the same at any width: assemble bytes from their 32-bit words.
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset.wrapping_add(i as u64);
            *byte = (self.reg_value(&st, at & !3) >> (8 * (at & 3))) as u8;
        }
    }

    fn reg_value(&self, st: &State, offset: u64) -> u32 {
        let caps = self.identity.caps;
        let r = &st.regs;
        match offset {
            MAGIC_REG => MAGIC,
            ABI_VERSION => rnic_abi::abi_version(),
            FUNCTION_INFO => match self.identity.id {
                FunctionId::Pf => 0,
                FunctionId::Vf(i) => FUNCTION_IS_VF | u32::from(i) << FUNCTION_VF_INDEX_SHIFT,
            },
            CAPS_LO => caps as u32,
            CAPS_HI => (caps >> 32) as u32,
            DEVICE_STATUS => {
                let mut s = STATUS_READY;
                if st.cmdq.is_running() {
                    s |= STATUS_CMDQ_RUNNING;
                }
                if r.fatal {
                    s |= STATUS_FATAL;
                }
                s
            }
            DEVICE_CONTROL => 0,
            CMDQ_DESC_LO => r.rings.desc as u32,
            CMDQ_DESC_HI => (r.rings.desc >> 32) as u32,
            CMDQ_AVAIL_LO => r.rings.avail as u32,
            CMDQ_AVAIL_HI => (r.rings.avail >> 32) as u32,
            CMDQ_USED_LO => r.rings.used as u32,
            CMDQ_USED_HI => (r.rings.used >> 32) as u32,
            CMDQ_SIZE => r.rings.size,
            CMDQ_MSIX_VECTOR => r.cmdq_vector,
            CMDQ_CONTROL => u32::from(st.cmdq.is_running()) * CMDQ_ENABLE,
            rnic_abi::regs::CMDQ_MAX_SIZE => u32::from(rnic_abi::cmd::CMDQ_MAX_SIZE),
            DOORBELL_PAGES => doorbell::PAGES,
            MSIX_VECTORS => u32::from(pci::MSIX_VECTORS),
            ERROR_CODE => r.error_code,
            _ => 0,
        }
    }

    fn bar0_write(&self, offset: u64, data: &[u8]) {
        let mut st = self.lock();
        if let Some(area) = st.msix.area(offset, data.len()) {
            st.msix.write(area, data);
            return;
        }
        // Registers take aligned 32-bit writes; a 64-bit write is two of them.
        if !offset.is_multiple_of(4) || !(data.len() == 4 || data.len() == 8) {
            log::warn!(
                "{}: ignored a {}-byte register write at {offset:#x}: registers take aligned 32-bit writes",
                self.identity.id,
                data.len()
            );
            return;
        }
        for (i, word) in data.chunks_exact(4).enumerate() {
            let value = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            let kick = self.reg_write(&mut st, offset + 4 * i as u64, value);
            if kick {
                self.kick();
            }
        }
    }

    /// Applies one register write; returns whether the engine must look at the function.
    fn reg_write(&self, st: &mut State, offset: u64, value: u32) -> bool {
        let r = &mut st.regs;
        let set_lo = |v: &mut u64| *v = (*v & !0xffff_ffff) | u64::from(value);
        let set_hi = |v: &mut u64| *v = (*v & 0xffff_ffff) | u64::from(value) << 32;
        match offset {
            DEVICE_CONTROL if value & CONTROL_RESET != 0 => {
                log::info!(
                    "{}: function reset through DEVICE_CONTROL",
                    self.identity.id
                );
                self.reset_locked(st);
            }
            CMDQ_DESC_LO => set_lo(&mut r.rings.desc),
            CMDQ_DESC_HI => set_hi(&mut r.rings.desc),
            CMDQ_AVAIL_LO => set_lo(&mut r.rings.avail),
            CMDQ_AVAIL_HI => set_hi(&mut r.rings.avail),
            CMDQ_USED_LO => set_lo(&mut r.rings.used),
            CMDQ_USED_HI => set_hi(&mut r.rings.used),
            CMDQ_SIZE => r.rings.size = value,
            CMDQ_MSIX_VECTOR => r.cmdq_vector = value,
            CMDQ_CONTROL => return self.cmdq_control(st, value),
            DOORBELL_KICK => {
                if value >= doorbell::PAGES {
                    log::warn!(
                        "{}: kick names doorbell page {value}, the BAR has {}",
                        self.identity.id,
                        doorbell::PAGES
                    );
                }
                return true;
            }
            _ => log::debug!(
                "{}: write {value:#x} to read-only or unknown register {offset:#x} ignored",
                self.identity.id
            ),
        }
        false
    }

    fn cmdq_control(&self, st: &mut State, value: u32) -> bool {
        if value & CMDQ_ENABLE == 0 {
            st.cmdq.stop();
            return false;
        }
        let result = if !st.config.bus_master() {
            Err(ERR_BUS_MASTER)
        } else if st.regs.cmdq_vector != NO_VECTOR
            && st.regs.cmdq_vector >= u32::from(st.msix.vectors())
        {
            Err(ERR_CMDQ_VECTOR)
        } else {
            st.cmdq.start(st.regs.rings, &self.dma.writable())
        };
        match result {
            Ok(()) => {
                st.regs.error_code = ERR_NONE;
                self.cmdq_doorbell_seen.store(0, Ordering::Release);
                log::info!(
                    "{}: command queue of {} entries running",
                    self.identity.id,
                    st.regs.rings.size
                );
                true
            }
            Err(code) => {
                st.regs.error_code = code;
                log::warn!(
                    "{}: command queue refused to start: error code {code}",
                    self.identity.id
                );
                false
            }
        }
    }

    /// A vfio-user SET_IRQS.
    pub fn set_irqs(
        &self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> io::Result<()> {
        if index == VFIO_PCI_MSIX_IRQ_INDEX {
            return self.lock().msix.set_irqs(flags, start, count, fds);
        }
        if count == 0 {
            // Tearing down an index that has nothing set is always fine.
            return Ok(());
        }
        Err(invalid(format!("IRQ index {index} has no interrupts; rnic uses MSI-X (index {VFIO_PCI_MSIX_IRQ_INDEX})")))
    }

    /// Function-level reset: everything the function holds goes back to power-on, except
    /// what belongs to the VMM (its DMA mappings and interrupt eventfds).
    pub fn reset(&self) {
        let mut st = self.lock();
        self.reset_locked(&mut st);
    }

    fn reset_locked(&self, st: &mut State) {
        st.config.reset();
        st.regs = Registers::power_on();
        st.msix.reset();
        st.cmdq.stop();
        self.doorbells.clear();
        self.cmdq_doorbell_seen.store(0, Ordering::Release);
    }

    /// The client went away: reset, and drop its memory and eventfds.
    pub fn disconnect(&self) {
        let mut st = self.lock();
        self.reset_locked(&mut st);
        st.msix.clear_triggers();
        self.dma.unmap_all();
    }

    /// Sets or clears the request for a kick in every doorbell page.
    pub fn request_notify(&self, on: bool) {
        for page in 0..doorbell::PAGES {
            self.doorbells.request_notify(page, on);
        }
    }

    /// Does whatever work the function has; returns whether there was any.
    pub fn poll(&self) -> bool {
        let kicked = self.kicked.swap(false, Ordering::AcqRel);
        let doorbell = self.doorbells.read32(CMDQ_DOORBELL).unwrap_or(0);
        if !kicked && doorbell == self.cmdq_doorbell_seen.load(Ordering::Acquire) {
            return false;
        }
        self.cmdq_doorbell_seen.store(doorbell, Ordering::Release);
        let mut st = self.lock();
        if !st.cmdq.is_running() || !st.config.bus_master() {
            return false;
        }
        let rings = self.dma.writable();
        let readable = self.dma.readable();
        let identity = &self.identity;
        match st.cmdq.process(&rings, &readable, |h, body| {
            crate::commands::execute(identity, h, body)
        }) {
            Ok(done) => {
                let vector = st.regs.cmdq_vector;
                if done.interrupt && vector != NO_VECTOR {
                    let (enabled, masked) =
                        (st.config.msix_enabled(), st.config.msix_function_masked());
                    st.msix.signal(vector as u16, enabled, masked);
                }
                done.completed > 0
            }
            Err(code) => {
                st.regs.error_code = code;
                st.regs.fatal = true;
                log::error!(
                    "{}: command queue failed with error code {code}; reset the function",
                    identity.id
                );
                true
            }
        }
    }
}
