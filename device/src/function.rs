//! One PCI function of the device (the PF or a VF): its config space, registers, MSI-X,
//! doorbells, DMA space and command queue, and what accesses to them do.
//!
//! This is the device logic behind the vfio-user glue of [`crate::vfio`], as igb_core is
//! behind igb: every access arrives here as a region read or write, whoever sent it.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rnic_abi::admin::MemberStats;
use rnic_abi::cmd::{CmdHeader, Limits};
use rnic_abi::doorbell;
use rnic_abi::pci::{self, DOORBELL_BAR, REG_BAR};
use rnic_abi::regs::*;
use rnic_abi::vfio_user::{IRQ_MSIX, REGION_CONFIG};
use vmm_sys_util::eventfd::EventFd;

use std::time::Instant;

use crate::cmdq::{QueueBlock, StartContext};
use crate::commands::Response;
use crate::dma::DmaSpace;
use crate::doorbell::DoorbellBar;
use crate::eth::{EthState, Policy, Station};
use crate::fabric::frame::{AddressTable, Endpoint, Frame, MAX_SPARE};
use crate::fabric::route::is_roce;
use crate::fabric::switch::Switch;
use crate::identity::{FunctionId, Identity};
use crate::msix::{InterruptLine, Msix};
use crate::pci::config::{BarSpec, ConfigParams, ConfigSpace, FunctionKind};
use crate::rdma::env::Env;
use crate::rdma::wire::Wire;
use crate::rdma::RdmaState;
use crate::resources::{PoolQuota, ResourcePool};

/// The config space of the function `identity` describes.
fn config_params(identity: &Identity) -> ConfigParams {
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
    match identity.id {
        FunctionId::Pf => ConfigParams {
            kind: FunctionKind::Pf {
                total_vfs: identity.device_vfs,
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

/// Traffic of the function on the switch, counted where frames cross its port.
#[derive(Debug, Default, Clone, Copy)]
struct Traffic {
    tx_bytes: u64,
    rx_bytes: u64,
    /// Packets that arrived while the link was down, or DMA was off: lost.
    rx_lost: u64,
    /// Packets the function produced while its link was down: discarded.
    tx_link_down: u64,
}

/// The counters of GET_STATS from the function's state.
fn member_stats(st: &State) -> MemberStats {
    let c = st.rdma.counters;
    let t = st.traffic;
    MemberStats {
        tx_packets: c.tx_packets.saturating_sub(t.tx_link_down),
        tx_bytes: t.tx_bytes,
        rx_packets: c.rx_packets,
        rx_bytes: t.rx_bytes,
        rx_errors: c.rx_dropped + t.rx_lost,
        retransmits: c.retransmits,
        rnr_naks_sent: c.rnr_naks_sent,
        tx_link_down: t.tx_link_down,
    }
}

/// `a` + `b`, counter by counter.
fn add_stats(a: &MemberStats, b: &MemberStats) -> MemberStats {
    MemberStats {
        tx_packets: a.tx_packets + b.tx_packets,
        tx_bytes: a.tx_bytes + b.tx_bytes,
        rx_packets: a.rx_packets + b.rx_packets,
        rx_bytes: a.rx_bytes + b.rx_bytes,
        rx_errors: a.rx_errors + b.rx_errors,
        retransmits: a.retransmits + b.retransmits,
        rnr_naks_sent: a.rnr_naks_sent + b.rnr_naks_sent,
        tx_link_down: a.tx_link_down + b.tx_link_down,
    }
}

/// State behind the function's lock.
#[derive(Debug)]
struct State {
    config: ConfigSpace,
    msix: Msix,
    cmdq: QueueBlock,
    rdma: RdmaState,
    eth: EthState,
    traffic: Traffic,
    /// What the function's counters held at each of its resets, summed: with the
    /// counters since the last one, what it carried since rnicd started. A guest's driver
    /// resets the function when it opens it and its VMM when it goes away, so the
    /// counters GET_STATS reads (since the last reset) are 0 by the time rnicd exits.
    before_resets: MemberStats,
    /// The same for the transport's drops by reason.
    drops_before_resets: crate::rdma::drops::DropCounters,
}

/// A function's counters at one instant ([`Function::counter_snapshot`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct CounterSnapshot {
    /// GET_MEMBER_STATS's counters since the function's last reset.
    pub since_reset: MemberStats,
    /// The same since rnicd started.
    pub since_start: MemberStats,
    /// The transport's receive drops by reason since the last reset.
    pub drops: crate::rdma::drops::DropCounters,
    /// The same since rnicd started.
    pub drops_since_start: crate::rdma::drops::DropCounters,
    /// The Ethernet queues' counters since the last reset.
    pub ethernet: rnic_abi::eth::EthCounters,
}

/// The function's addresses: set at creation, changed by the PF (`SET_ADDRESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// Ethernet MAC.
    pub mac: [u8; 6],
    /// GID (IPv4-mapped).
    pub gid: [u8; 16],
}

/// What one look at a function found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollOutcome {
    /// It did some work.
    pub progress: bool,
    /// When a transport timer of the function is due next.
    pub deadline: Option<Instant>,
}

/// A function's turn on its port of the device's internal switch: what arrived for it,
/// and what it sends. The engine fills it from the switch before the turn and forwards
/// `out` after, so that no function's lock is ever held while the switch's is taken.
pub struct Port<'a> {
    /// The frames that arrived for the function, in order.
    pub frames: VecDeque<Frame>,
    /// The frames the function sent in its turn, for the switch.
    pub out: Vec<Frame>,
    /// Frame buffers to build with, and where received frames' buffers go back.
    pub spare: Vec<Vec<u8>>,
    /// Whether the switch takes trains ([`crate::fabric::switch::Switch::takes_trains`]).
    pub trains: bool,
    /// Whether the function can have no address but its own (see
    /// [`crate::commands::Target::own_address_only`]).
    pub own_address_only: bool,
    /// IPv4 to MAC for the switch's endpoints.
    pub neighbors: &'a AddressTable,
}

impl<'a> Port<'a> {
    /// A turn with `frames` to receive, addressing frames with `neighbors`.
    pub fn new(frames: VecDeque<Frame>, neighbors: &'a AddressTable) -> Self {
        Self {
            frames,
            out: Vec::new(),
            spare: Vec::new(),
            trains: false,
            own_address_only: false,
            neighbors,
        }
    }
}

/// A function's RDMA objects under the function's lock ([`Function::lock_rdma`]).
pub struct RdmaLock<'a>(MutexGuard<'a, State>);

impl std::ops::Deref for RdmaLock<'_> {
    type Target = RdmaState;
    fn deref(&self) -> &RdmaState {
        &self.0.rdma
    }
}

impl std::ops::DerefMut for RdmaLock<'_> {
    fn deref_mut(&mut self) -> &mut RdmaState {
        &mut self.0.rdma
    }
}

/// One PCI function.
///
/// Lock order: `admin` before `state`, and the PF's `admin` before any other function's
/// locks. Admin commands run with the PF's `admin` held and lock the functions they act
/// on; everything else that needs both locks of a function takes `admin` first.
#[derive(Debug)]
pub struct Function {
    identity: Identity,
    /// Member id (0 = PF, n = VF n-1): index in the device's functions and in `pool`.
    member: usize,
    pool: Arc<ResourcePool>,
    state: Mutex<State>,
    /// The admin queue, outside `state` so that admin commands run with no function's
    /// state lock held.
    admin: Mutex<QueueBlock>,
    /// MAC and GID, read on every pass (a leaf lock: nothing is locked while it is held).
    address: RwLock<Address>,
    /// A VF its PF disabled is off: it reports STATUS_DISABLED and does nothing else.
    enabled: AtomicBool,
    /// Link state the PF set: a function whose link is down sends and receives nothing.
    link_up: AtomicBool,
    /// What the PF decided about the function's Ethernet traffic (`SET_VF_ETH`); a leaf
    /// lock, kept across resets.
    eth_policy: RwLock<Policy>,
    /// The link or the MAC changed since the driver's event vector was last signalled.
    eth_event: AtomicBool,
    /// Whether the function's operating system receives its frames (§15.5), as of its
    /// last turn, and as last reported to the switch.
    os_receives: AtomicBool,
    os_receives_reported: AtomicBool,
    /// The GID table's addresses, when they changed since the engine last took them.
    gid_addresses: Mutex<Option<Vec<[u8; 4]>>>,
    dma: DmaSpace,
    doorbells: DoorbellBar,
    /// The MSI-X messages on their way to the VMM (the same line as `state.msix`'s,
    /// reachable without the function's lock).
    interrupts: Arc<InterruptLine>,
    /// Set by a kick, cleared by the engine when it has looked.
    kicked: AtomicBool,
    /// The eventfd that wakes the engine thread running the function (its own until the
    /// engine sets one, [`Function::set_waker`]); a leaf lock.
    waker: RwLock<Arc<EventFd>>,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Checks that an access of `len` bytes at `offset` lies inside BAR0. The vfio-user layer
/// passes the client's offsets through unchecked.
fn bar0_range(offset: u64, len: usize) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= pci::REG_BAR_SIZE => Ok(()),
        _ => Err(invalid(format!(
            "BAR0 access of {len} bytes at {offset:#x} is outside it"
        ))),
    }
}

impl Function {
    /// A function in its power-on state, alone with a resource pool of its own (the
    /// default share, and the machine's whole DMA budget).
    pub fn new(identity: Identity) -> io::Result<Self> {
        Self::with_pool(identity, Arc::new(ResourcePool::with_defaults(1)), 0)
    }

    /// A function in its power-on state that is member `member` of a device whose
    /// resources are `pool`.
    pub fn with_pool(
        identity: Identity,
        pool: Arc<ResourcePool>,
        member: usize,
    ) -> io::Result<Self> {
        let dma = DmaSpace::with_quota(Box::new(PoolQuota::new(pool.clone(), member)));
        let msix = Msix::new(pci::MSIX_VECTORS)?;
        let interrupts = msix.line().clone();
        let id = identity.id;
        let state = State {
            config: ConfigSpace::new(config_params(&identity)),
            msix,
            cmdq: QueueBlock::new(CMDQ_REGS),
            rdma: RdmaState::with_pool(identity.id, identity.limits, pool.clone(), member),
            eth: EthState::default(),
            traffic: Traffic::default(),
            before_resets: MemberStats::default(),
            drops_before_resets: Default::default(),
        };
        Ok(Self {
            address: RwLock::new(Address {
                mac: identity.mac,
                gid: identity.gid,
            }),
            identity,
            member,
            pool,
            state: Mutex::new(state),
            admin: Mutex::new(QueueBlock::new(ADMINQ_REGS)),
            enabled: AtomicBool::new(true),
            link_up: AtomicBool::new(true),
            eth_policy: RwLock::new(match id {
                FunctionId::Pf => Policy::PF,
                FunctionId::Vf(_) => Policy::VF,
            }),
            eth_event: AtomicBool::new(false),
            os_receives: AtomicBool::new(false),
            os_receives_reported: AtomicBool::new(false),
            gid_addresses: Mutex::new(None),
            dma,
            doorbells: DoorbellBar::new(doorbell::PAGES)?,
            interrupts,
            kicked: AtomicBool::new(false),
            waker: RwLock::new(Arc::new(EventFd::new(libc::EFD_NONBLOCK)?)),
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

    /// The function's MSI-X messages on their way to the VMM: whoever serves the VMM
    /// (the vfio-user connection, or a harness that plays it) delivers them.
    pub fn interrupts(&self) -> &Arc<InterruptLine> {
        &self.interrupts
    }

    /// Makes kicks of the function write `waker`: the eventfd of the engine thread that
    /// runs it from now on.
    pub fn set_waker(&self, waker: Arc<EventFd>) {
        *self.waker.write().unwrap_or_else(|e| e.into_inner()) = waker;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not take the device down: the state stays consistent
        // because every mutation below completes before it can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The admin queue's lock; take it before [`Function::lock`] when both are needed.
    fn lock_admin(&self) -> MutexGuard<'_, QueueBlock> {
        self.admin.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Both locks, in order.
    fn lock_both(&self) -> (MutexGuard<'_, QueueBlock>, MutexGuard<'_, State>) {
        let admin = self.lock_admin();
        (admin, self.lock())
    }

    fn kick(&self) {
        self.kicked.store(true, Ordering::Release);
        let waker = self.waker.read().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = waker.write(1) {
            log::warn!("{}: cannot wake the engine: {e}", self.identity.id);
        }
    }

    /// A vfio-user REGION_READ.
    pub fn region_read(&self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        match region {
            REGION_CONFIG => self.lock().config.read(offset, data),
            r if r == u32::from(REG_BAR) => {
                bar0_range(offset, data.len())?;
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
            REGION_CONFIG => self.config_write(offset, data),
            r if r == u32::from(REG_BAR) => {
                bar0_range(offset, data.len())?;
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
        // An FLR resets the admin queue too; its lock comes first.
        let (mut admin, mut st) = self.lock_both();
        let effects = st.config.write(offset, data)?;
        if effects.flr {
            log::info!(
                "{}: function-level reset through PCIe FLR",
                self.identity.id
            );
            self.reset_locked(&mut st, &mut admin);
            return Ok(());
        }
        drop(admin);
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
        let (admin, st) = self.lock_both();
        if let Some(area) = st.msix.area(offset, data.len()) {
            st.msix.read(area, data);
            return;
        }
        // Registers read the same at any width: assemble bytes from their 32-bit words.
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset.wrapping_add(i as u64);
            *byte = (self.reg_value(&st, &admin, at & !3) >> (8 * (at & 3))) as u8;
        }
    }

    fn reg_value(&self, st: &State, admin: &QueueBlock, offset: u64) -> u32 {
        let caps = self.identity.caps;
        if let Some(v) = st.cmdq.read(offset).or_else(|| admin.read(offset)) {
            return v;
        }
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
                if !self.is_enabled() {
                    // Not even READY: the function takes no set-up.
                    return STATUS_DISABLED;
                }
                let mut s = STATUS_READY | st.cmdq.status_bits() | admin.status_bits();
                if !self.link_up() {
                    s |= STATUS_LINK_DOWN;
                }
                s
            }
            DEVICE_CONTROL => 0,
            rnic_abi::regs::CMDQ_MAX_SIZE => u32::from(rnic_abi::cmd::CMDQ_MAX_SIZE),
            DOORBELL_PAGES => doorbell::PAGES,
            MSIX_VECTORS => u32::from(pci::MSIX_VECTORS),
            _ => 0,
        }
    }

    fn bar0_write(&self, offset: u64, data: &[u8]) {
        let (mut admin, mut st) = self.lock_both();
        if let Some(area) = st.msix.area(offset, data.len()) {
            // The MSI-X table is the VMM's and OS's, as config space is: it works even on
            // a disabled function.
            st.msix.write(area, data);
            return;
        }
        if !self.is_enabled() {
            log::debug!(
                "{}: register write at {offset:#x} ignored: the function is disabled",
                self.identity.id
            );
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
            let kick = self.reg_write(&mut st, &mut admin, offset + 4 * i as u64, value);
            if kick {
                self.kick();
            }
        }
    }

    /// Applies one register write; returns whether the engine must look at the function.
    fn reg_write(&self, st: &mut State, admin: &mut QueueBlock, offset: u64, value: u32) -> bool {
        let writable = self.dma.writable();
        let ctx = StartContext {
            bus_master: st.config.bus_master(),
            msix_vectors: st.msix.vectors(),
            writable: &writable,
            doorbells: &self.doorbells,
        };
        if let Some(kick) = st.cmdq.write(offset, value, &ctx) {
            return kick;
        }
        if let Some(kick) = admin.write(offset, value, &ctx) {
            return kick;
        }
        match offset {
            DEVICE_CONTROL if value & CONTROL_RESET != 0 => {
                log::info!("{}: device reset through DEVICE_CONTROL", self.identity.id);
                self.reset_device_state(st, admin);
            }
            // Any process of the guest may write USER_KICK: what it writes is not worth a
            // warning in the host's log.
            USER_KICK => {
                if value >= doorbell::PAGES {
                    log::debug!(
                        "{}: user kick names doorbell page {value}",
                        self.identity.id
                    );
                }
                return true;
            }
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

    /// A vfio-user SET_IRQS.
    pub fn set_irqs(
        &self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> io::Result<()> {
        if index == IRQ_MSIX {
            return self.interrupts.set_irqs(flags, start, count, fds);
        }
        if count == 0 {
            // Tearing down an index that has nothing set is always fine.
            return Ok(());
        }
        Err(invalid(format!(
            "IRQ index {index} has no interrupts; rnic uses MSI-X (index {IRQ_MSIX})"
        )))
    }

    /// Function-level reset: everything the function holds goes back to power-on, except
    /// what belongs to the VMM (its DMA mappings and interrupt eventfds).
    pub fn reset(&self) {
        let (mut admin, mut st) = self.lock_both();
        self.reset_locked(&mut st, &mut admin);
    }

    fn reset_locked(&self, st: &mut State, admin: &mut QueueBlock) {
        st.config.reset();
        st.msix.reset();
        self.reset_device_state(st, admin);
    }

    /// Resets what the device behind the PCI function holds (registers, queues, doorbells)
    /// and keeps the PCI state that belongs to the OS and VMM: config space (bus
    /// mastering, MSI-X enable) and the MSI-X table. This is DEVICE_CONTROL.RESET, the
    /// driver's own reset; FLR and vfio-user DEVICE_RESET reset both.
    fn reset_device_state(&self, st: &mut State, admin: &mut QueueBlock) {
        // Every object goes with the old state, and so do its charges. The numbers of QPs
        // that migrated away stay reserved: the switch still steers their frames.
        let departed = st.rdma.departed_qpns();
        // The sessions are the PF's to give, not the function's: they survive its reset.
        let sessions = st.rdma.sessions.ports().to_vec();
        let id = self.identity.id;
        st.before_resets = add_stats(&st.before_resets, &member_stats(st));
        let drops = st.rdma.counters.drops;
        st.drops_before_resets.add(&drops);
        if !st.rdma.gids.addresses().is_empty() {
            self.report_gid_addresses(Vec::new());
        }
        st.rdma = RdmaState::with_pool(id, self.identity.limits, self.pool.clone(), self.member);
        st.rdma.reserve_departed(departed);
        st.rdma.sessions.set(&sessions);
        st.eth = EthState::default();
        self.os_receives.store(false, Ordering::Release);
        self.pool.release_all(self.member);
        st.cmdq.reset();
        admin.reset();
        st.traffic = Traffic::default();
        self.doorbells.reset();
    }

    /// The client went away: reset, and drop its memory and eventfds.
    pub fn disconnect(&self) {
        let (mut admin, mut st) = self.lock_both();
        self.reset_locked(&mut st, &mut admin);
        self.interrupts.clear_triggers();
        self.dma.unmap_all();
    }

    /// Sets or clears the request for a kick in every doorbell page.
    pub fn request_notify(&self, on: bool) {
        for page in 0..doorbell::PAGES {
            self.doorbells.request_notify(page, on);
        }
    }

    /// The function's address on the switch.
    pub fn endpoint(&self) -> Endpoint {
        let a = self.address();
        Endpoint {
            mac: a.mac,
            ip: [a.gid[12], a.gid[13], a.gid[14], a.gid[15]],
        }
    }

    /// Does whatever work the function has, alone on a switch of its own; returns whether
    /// there was any.
    pub fn poll(&self) -> bool {
        let neighbors = Switch::new(vec![self.endpoint()], None).neighbors();
        // What it sends has no port to go to, as on a switch of its own.
        self.run(&mut Port::new(VecDeque::new(), &neighbors), Instant::now())
            .progress
    }

    /// Does whatever work the function has: commands, packets that arrived on `port`,
    /// rung send queues, due timers; what it sends is left in `port.out`.
    pub fn run(&self, port: &mut Port, now: Instant) -> PollOutcome {
        let kicked = self.kicked.swap(false, Ordering::AcqRel);
        let frames = std::mem::take(&mut port.frames);
        let mut guard = self.lock();
        let st = &mut *guard;
        if !self.is_enabled() {
            // A disabled function processes nothing: what arrived is lost, uncounted (its
            // counters start again when it is enabled).
            return PollOutcome {
                progress: !frames.is_empty(),
                deadline: None,
            };
        }
        let cmdq_due = st.cmdq.due(&self.doorbells, kicked);
        let link_up = self.link_up();
        // RoCEv2 for the RDMA engine, the rest for the Ethernet queues (§15.1).
        let (frames, ethernet): (VecDeque<Frame>, VecDeque<Frame>) = frames
            .into_iter()
            .partition(|f| f.train.is_some() || is_roce(&f.bytes));
        if !st.config.bus_master() || !link_up {
            // No DMA without bus mastering, and nothing at all through a pulled cable:
            // whatever arrived is lost, as on a wire.
            st.traffic.rx_lost += frames.iter().map(Frame::packets).sum::<u64>();
            st.eth.counters.rx_link_down += ethernet.len() as u64;
            if !st.config.bus_master() {
                return PollOutcome {
                    progress: !frames.is_empty() || !ethernet.is_empty(),
                    deadline: None,
                };
            }
        }
        let (frames, ethernet) = if link_up {
            (frames, ethernet)
        } else {
            Default::default()
        };
        st.traffic.rx_bytes += frames.iter().map(|f| f.wire_len() as u64).sum::<u64>();
        let writable = self.dma.writable();
        let readable = self.dma.readable();
        let env = Env {
            r: &readable,
            w: &writable,
            doorbells: &self.doorbells,
        };
        let endpoint = self.endpoint();
        let mut station = Station {
            mac: endpoint.mac,
            ip: endpoint.ip,
            link_up,
            policy: self.eth_policy(),
            msix_vectors: st.msix.vectors(),
            gids: st.rdma.gids,
        };
        let mut progress = false;
        if cmdq_due && st.cmdq.is_running() {
            let identity = self.current_identity();
            let mut target = crate::commands::Target {
                rdma: &mut st.rdma,
                eth: &mut st.eth,
                station: &station,
                neighbors: port.neighbors,
                own_address_only: port.own_address_only,
            };
            let (done, vector) = st.cmdq.process(&writable, &readable, |h, body, room| {
                crate::commands::execute(&identity, target.reborrow(), &env, h, body, room)
            });
            if let Some(vector) = vector {
                st.msix.signal(
                    vector,
                    st.config.msix_enabled(),
                    st.config.msix_function_masked(),
                );
            }
            progress |= done;
            if st.rdma.gids != station.gids {
                // The switch learns the addresses the driver set (§6.13).
                station.gids = st.rdma.gids;
                self.report_gid_addresses(st.rdma.gids.addresses());
            }
        }
        let mut wire = Wire {
            local: endpoint,
            gids: st.rdma.gids,
            neighbors: port.neighbors,
            out: Vec::new(),
            spare: std::mem::take(&mut port.spare),
            src_port: None,
            trains: port.trains,
        };
        progress |= st.rdma.poll(&env, frames, &mut wire, now);
        port.spare = std::mem::take(&mut wire.spare);
        if link_up {
            st.traffic.tx_bytes += wire.out.iter().map(|f| f.wire_len() as u64).sum::<u64>();
            port.out = wire.out;
        } else {
            // The QPs sent into a pulled cable: they will time out and retry.
            st.traffic.tx_link_down += wire.packets_since(0);
        }
        let mut deadline = st.rdma.next_deadline();
        if st.eth.is_active() || !ethernet.is_empty() {
            progress |= !ethernet.is_empty();
            for frame in &ethernet {
                st.eth.receive(&env, &station, &frame.bytes);
            }
            let room = MAX_SPARE.saturating_sub(port.spare.len());
            port.spare
                .extend(ethernet.into_iter().map(|f| f.bytes).take(room));
            progress |= st
                .eth
                .transmit(&env, &station, &mut port.out, &mut port.spare);
            for vector in st.eth.interrupts(&env, now, &mut deadline) {
                st.msix.signal(
                    vector,
                    st.config.msix_enabled(),
                    st.config.msix_function_masked(),
                );
            }
        }
        if self.eth_event.swap(false, Ordering::AcqRel) {
            if let Some(vector) = st.eth.event_vector() {
                st.msix.signal(
                    vector,
                    st.config.msix_enabled(),
                    st.config.msix_function_masked(),
                );
            }
        }
        if std::mem::take(&mut st.rdma.eq_signal) {
            if let Some(vector) = st.rdma.eq_vector() {
                st.msix.signal(
                    vector,
                    st.config.msix_enabled(),
                    st.config.msix_function_masked(),
                );
            }
        }
        self.os_receives.store(st.eth.receives(), Ordering::Release);
        PollOutcome { progress, deadline }
    }

    /// Keeps the addresses of the function's GID table for the switch
    /// ([`Function::take_gid_addresses`]).
    fn report_gid_addresses(&self, addresses: Vec<[u8; 4]>) {
        *self.gid_addresses.lock().unwrap_or_else(|e| e.into_inner()) = Some(addresses);
    }

    /// The addresses of the function's GID table beyond its own, once per change: the
    /// switch forwards frames for them to the function (§6.13).
    pub fn take_gid_addresses(&self) -> Option<Vec<[u8; 4]>> {
        self.gid_addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Whether the function's OS started or stopped receiving its frames since this was
    /// last asked: `Some(now)` once per change, for the switch, whose port answers ARP
    /// for the function only while its OS does not (§15.5).
    pub fn take_os_receives_change(&self) -> Option<bool> {
        let now = self.os_receives.load(Ordering::Acquire);
        (self.os_receives_reported.swap(now, Ordering::AcqRel) != now).then_some(now)
    }

    /// What the PF decided about the function's Ethernet traffic.
    pub fn eth_policy(&self) -> Policy {
        *self.eth_policy.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets what the PF decided about the function's Ethernet traffic (`SET_VF_ETH`).
    pub fn set_eth_policy(&self, policy: Policy) {
        *self.eth_policy.write().unwrap_or_else(|e| e.into_inner()) = policy;
        log::info!(
            "{}: spoof check {}, trust {}",
            self.identity.id,
            if policy.spoof_check { "on" } else { "off" },
            if policy.trusted { "on" } else { "off" }
        );
    }

    /// The function's Ethernet counters since its last reset.
    pub fn eth_counters(&self) -> rnic_abi::eth::EthCounters {
        self.lock().eth.counters
    }

    /// Counters of the RDMA engine.
    pub fn rdma_counters(&self) -> crate::rdma::Counters {
        self.lock().rdma.counters
    }

    /// The function's RDMA objects, locked, for a command that spans functions
    /// (`MIGRATE_QP` locks the two functions it touches, in index order, so two such
    /// commands can never deadlock).
    pub fn lock_rdma(&self) -> RdmaLock<'_> {
        RdmaLock(self.lock())
    }

    /// Makes the engine look at the function soon (after another function's command
    /// changed what it holds, e.g. posted an event to its EQ).
    pub fn wake(&self) {
        self.kick();
    }

    /// Member id: 0 for the PF, n for VF n-1 (the index in the device's functions).
    pub fn member(&self) -> usize {
        self.member
    }

    /// The device's resource pool.
    pub fn pool(&self) -> &Arc<ResourcePool> {
        &self.pool
    }

    /// Whether the function is enabled (a VF its PF has not disabled).
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Enables or disables the function (`SET_NUM_VFS`). Either way it starts from its
    /// power-on device state: disabling destroys everything it held, so a disabled VF
    /// holds nothing, and an enabled one starts clean. PCI state (config space, MSI-X
    /// table), which belongs to the VMM, is kept.
    pub fn set_enabled(&self, on: bool) {
        let (mut admin, mut st) = self.lock_both();
        if self.is_enabled() == on {
            return;
        }
        self.reset_device_state(&mut st, &mut admin);
        self.enabled.store(on, Ordering::Release);
        log::info!(
            "{}: {}",
            self.identity.id,
            if on { "enabled" } else { "disabled" }
        );
    }

    /// Whether the link is up.
    pub fn link_up(&self) -> bool {
        self.link_up.load(Ordering::Acquire)
    }

    /// Sets the link state. While it is down the function sends and receives nothing;
    /// its QPs time out and retry, as after a cable pull.
    pub fn set_link(&self, up: bool) {
        self.link_up.store(up, Ordering::Release);
        self.eth_event.store(true, Ordering::Release);
        log::info!(
            "{}: link {}",
            self.identity.id,
            if up { "up" } else { "down" }
        );
        self.kick();
    }

    /// The function's MAC and GID now.
    pub fn address(&self) -> Address {
        *self.address.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the function's MAC and GID. The caller updates the switch.
    pub fn set_address(&self, address: Address) {
        *self.address.write().unwrap_or_else(|e| e.into_inner()) = address;
        self.eth_event.store(true, Ordering::Release);
        self.kick();
    }

    /// The function's limits now: the fixed per-object limits, and the counts of its
    /// quota.
    pub fn limits(&self) -> Limits {
        let q = self.pool.quota(self.member);
        let l = self.identity.limits;
        Limits {
            max_qp: q.qps,
            max_cq: q.cqs,
            max_mr: q.mrs,
            max_pd: q.pds,
            max_mr_pages: l.max_mr_pages.min(q.mr_pages),
            doorbell_pages: q.doorbell_pages,
            ..l
        }
    }

    /// The identity as QUERY_DEVICE reports it now: current addresses and limits.
    pub fn current_identity(&self) -> Identity {
        let a = self.address();
        Identity {
            mac: a.mac,
            gid: a.gid,
            limits: self.limits(),
            ..self.identity.clone()
        }
    }

    /// The function's counters since its last reset.
    pub fn stats(&self) -> MemberStats {
        member_stats(&self.lock())
    }

    /// The function's counters since rnicd started, across its resets.
    pub fn stats_since_start(&self) -> MemberStats {
        let st = self.lock();
        add_stats(&st.before_resets, &member_stats(&st))
    }

    /// Every counter of the function at one instant, since its last reset and since
    /// rnicd started: what the control socket's `stats` reports (§12.9).
    pub fn counter_snapshot(&self) -> CounterSnapshot {
        let st = self.lock();
        let since_reset = member_stats(&st);
        let drops = st.rdma.counters.drops;
        let mut drops_since_start = st.drops_before_resets;
        drops_since_start.add(&drops);
        CounterSnapshot {
            since_reset,
            since_start: add_stats(&st.before_resets, &since_reset),
            drops,
            drops_since_start,
            ethernet: st.eth.counters,
        }
    }

    /// Function-level reset ordered by the PF (`RESET_VF`): as a PCIe FLR.
    pub fn function_reset(&self) {
        log::info!("{}: function-level reset by the PF", self.identity.id);
        self.reset();
    }

    /// Runs the commands waiting on the function's admin queue through `handler`, with
    /// only the admin queue's lock held (the handler may lock any function, this one
    /// included). Returns whether any command completed. The engine calls it on every
    /// pass, before [`Function::run`] (which consumes the kick).
    pub fn run_admin(&self, handler: impl FnMut(&CmdHeader, &[u8], usize) -> Response) -> bool {
        let mut admin = self.lock_admin();
        let kicked = self.kicked.load(Ordering::Acquire);
        if !admin.due(&self.doorbells, kicked) || !admin.is_running() || !self.is_enabled() {
            return false;
        }
        if !self.lock().config.bus_master() {
            return false;
        }
        let writable = self.dma.writable();
        let readable = self.dma.readable();
        let (done, vector) = admin.process(&writable, &readable, handler);
        if let Some(vector) = vector {
            let mut st = self.lock();
            let (enabled, masked) = (st.config.msix_enabled(), st.config.msix_function_masked());
            st.msix.signal(vector, enabled, masked);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    //! The function driven exactly as the vfio-user layer drives it: region reads and
    //! writes, DMA_MAP of a memfd, SET_IRQS with eventfds, and the engine's `poll()`.

    use super::*;
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileExt;

    use proptest::prelude::*;
    use rnic_abi::cmd::{CmdHeader, Opcode, QueryDeviceResp, RespHeader, Status};
    use rnic_abi::doorbell::CMDQ_DOORBELL;
    use rnic_abi::pci::cfg;
    use rnic_abi::vfio_user::{IRQ_SET_ACTION_TRIGGER, IRQ_SET_DATA_EVENTFD};
    use zerocopy::{FromBytes, IntoBytes};

    const BAR0: u32 = REG_BAR as u32;
    const DB: u32 = DOORBELL_BAR as u32;
    const CONFIG: u32 = REGION_CONFIG;

    /// Where the guest's RAM sits in the function's DMA space, and its layout.
    const IOVA: u64 = 0x4_0000;
    const MEM_SIZE: u64 = 0x1_0000;
    const DESC: u64 = IOVA;
    const AVAIL: u64 = IOVA + 0x1000;
    const USED: u64 = IOVA + 0x2000;
    const REQ: u64 = IOVA + 0x3000;
    const RESP: u64 = IOVA + 0x8000;
    const QSIZE: u16 = 16;
    const RESP_LEN: usize = std::mem::size_of::<RespHeader>();
    const QUERY_LEN: usize = RESP_LEN + std::mem::size_of::<QueryDeviceResp>();
    const PBA: u64 = pci::MSIX_PBA_OFFSET;

    fn vf() -> Function {
        Function::new(Identity::new(FunctionId::Vf(1), 4, None)).unwrap()
    }

    fn pf() -> Function {
        Function::new(Identity::new(FunctionId::Pf, 4, None)).unwrap()
    }

    #[test]
    fn counters_restart_at_a_reset_and_add_up_since_start() {
        let f = vf();
        let count = |tx, bytes| {
            let mut st = f.lock();
            st.rdma.counters.tx_packets += tx;
            st.rdma.counters.rx_packets += tx;
            st.traffic.tx_bytes += bytes;
        };
        count(5, 300);
        f.disconnect();
        assert_eq!(f.stats(), MemberStats::default(), "since the reset");
        count(2, 100);
        f.reset();
        count(1, 60);
        let s = f.stats_since_start();
        assert_eq!((s.tx_packets, s.rx_packets, s.tx_bytes), (8, 8, 460));
        assert_eq!((f.stats().tx_packets, f.stats().tx_bytes), (1, 60));
    }

    fn eventfd() -> File {
        // SAFETY: plain eventfd creation; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor that we own.
        unsafe { File::from_raw_fd(fd) }
    }

    /// Delivers what `f` raised, as its vfio-user connection does, then reads (and so
    /// resets) the eventfd's counter; 0 if it was never written.
    fn take(f: &Function, efd: &mut File) -> u64 {
        assert!(f.interrupts().deliver().is_empty());
        let mut b = [0u8; 8];
        match efd.read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    fn rd(f: &Function, region: u32, offset: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        f.region_read(region, offset, &mut v)
            .unwrap_or_else(|e| panic!("read of region {region} at {offset:#x}: {e}"));
        v
    }

    fn rd32(f: &Function, offset: u64) -> u32 {
        u32::from_le_bytes(rd(f, BAR0, offset, 4).try_into().unwrap())
    }

    fn rd64(f: &Function, offset: u64) -> u64 {
        u64::from_le_bytes(rd(f, BAR0, offset, 8).try_into().unwrap())
    }

    fn wr(f: &Function, offset: u64, bytes: &[u8]) {
        f.region_write(BAR0, offset, bytes).unwrap();
    }

    fn wr32(f: &Function, offset: u64, value: u32) {
        wr(f, offset, &value.to_le_bytes());
    }

    fn wr64(f: &Function, offset: u64, value: u64) {
        wr(f, offset, &value.to_le_bytes());
    }

    fn cfg16(f: &Function, offset: usize) -> u16 {
        u16::from_le_bytes(rd(f, CONFIG, offset as u64, 2).try_into().unwrap())
    }

    fn set_cfg16(f: &Function, offset: usize, value: u16) {
        f.region_write(CONFIG, offset as u64, &value.to_le_bytes())
            .unwrap();
    }

    fn set_bus_master(f: &Function, on: bool) {
        let cmd = if on {
            cfg::COMMAND_MEMORY | cfg::COMMAND_BUS_MASTER
        } else {
            cfg::COMMAND_MEMORY
        };
        set_cfg16(f, cfg::COMMAND, cmd);
    }

    fn set_msix(f: &Function, ctrl: u16) {
        set_cfg16(f, cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL, ctrl);
    }

    fn status(f: &Function) -> u32 {
        rd32(f, DEVICE_STATUS)
    }

    /// Programs the ring registers the way a driver does: one 64-bit register as an
    /// 8-byte write, the others as two halves, high half first for one of them.
    fn program_rings(f: &Function, vector: u32) {
        wr64(f, CMDQ_DESC_LO, DESC);
        wr32(f, CMDQ_AVAIL_HI, (AVAIL >> 32) as u32);
        wr32(f, CMDQ_AVAIL_LO, AVAIL as u32);
        wr32(f, CMDQ_USED_LO, USED as u32);
        wr32(f, CMDQ_USED_HI, (USED >> 32) as u32);
        wr32(f, CMDQ_SIZE, u32::from(QSIZE));
        wr32(f, CMDQ_MSIX_VECTOR, vector);
    }

    /// Enables the command queue and returns ERROR_CODE.
    fn enable(f: &Function) -> u32 {
        wr32(f, CMDQ_CONTROL, CMDQ_ENABLE);
        rd32(f, ERROR_CODE)
    }

    /// The guest's RAM, DMA-mapped into a function as QEMU maps it, and a driver's view of
    /// the command queue in it.
    struct Guest {
        ram: File,
        avail_idx: u16,
    }

    impl Guest {
        fn map(f: &Function) -> Self {
            let ram = crate::dma::tests::memfd(MEM_SIZE);
            f.dma()
                .map(IOVA, MEM_SIZE, 0, Some(ram.try_clone().unwrap()), true)
                .unwrap();
            Self { ram, avail_idx: 0 }
        }

        fn write(&self, addr: u64, bytes: &[u8]) {
            self.ram.write_all_at(bytes, addr - IOVA).unwrap();
        }

        fn read(&self, addr: u64, len: usize) -> Vec<u8> {
            let mut v = vec![0; len];
            self.ram.read_exact_at(&mut v, addr - IOVA).unwrap();
            v
        }

        fn u16_at(&self, addr: u64) -> u16 {
            u16::from_le_bytes(self.read(addr, 2).try_into().unwrap())
        }

        fn u32_at(&self, addr: u64) -> u32 {
            u32::from_le_bytes(self.read(addr, 4).try_into().unwrap())
        }

        /// What a driver does before it (re-)enables the queue: clear the rings.
        fn reset_rings(&mut self) {
            self.write(DESC, &[0; 0x3000]);
            self.avail_idx = 0;
        }

        /// Writes a chain (request, then `room` bytes for the response) and publishes it
        /// in the available ring, without ringing the doorbell. Returns where the response
        /// goes.
        fn submit(&mut self, request: &[u8], room: u32) -> u64 {
            let slot = self.avail_idx % (QSIZE / 2);
            let (d0, d1) = (2 * slot, 2 * slot + 1);
            let req = REQ + 0x400 * u64::from(slot);
            let resp = RESP + 0x400 * u64::from(slot);
            self.write(req, request);
            self.write(resp, &vec![0xEE; room as usize]);
            self.desc(d0, req, request.len() as u32, 1, d1);
            self.desc(d1, resp, room, 2, 0);
            let entry = AVAIL + 4 + 2 * u64::from(self.avail_idx % QSIZE);
            self.write(entry, &d0.to_le_bytes());
            self.avail_idx = self.avail_idx.wrapping_add(1);
            self.write(AVAIL + 2, &self.avail_idx.to_le_bytes());
            resp
        }

        fn desc(&self, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
            let mut raw = [0u8; 16];
            raw[0..8].copy_from_slice(&addr.to_le_bytes());
            raw[8..12].copy_from_slice(&len.to_le_bytes());
            raw[12..14].copy_from_slice(&flags.to_le_bytes());
            raw[14..16].copy_from_slice(&next.to_le_bytes());
            self.write(DESC + 16 * u64::from(index), &raw);
        }

        /// Rings the command queue doorbell through the shared BAR, as the guest's store to
        /// its mmapped BAR does.
        fn ring(&self, f: &Function) {
            assert!(f
                .doorbells()
                .write32(CMDQ_DOORBELL, u32::from(self.avail_idx)));
        }

        fn set_avail_flags(&self, flags: u16) {
            self.write(AVAIL, &flags.to_le_bytes());
        }

        fn used_idx(&self) -> u16 {
            self.u16_at(USED + 2)
        }

        /// Bytes written for the command in used element `i`.
        fn used_len(&self, i: u16) -> u32 {
            self.u32_at(USED + 4 + 8 * u64::from(i % QSIZE) + 4)
        }

        fn resp(&self, addr: u64) -> RespHeader {
            RespHeader::read_from_bytes(&self.read(addr, RESP_LEN)).unwrap()
        }
    }

    fn command(opcode: Opcode, token: u32) -> Vec<u8> {
        CmdHeader {
            opcode: opcode as u16,
            reserved: 0,
            token,
        }
        .as_bytes()
        .to_vec()
    }

    /// A VF with guest RAM mapped and its command queue running on `vector`.
    fn running(vector: u32) -> (Function, Guest) {
        let f = vf();
        let mut guest = Guest::map(&f);
        guest.reset_rings();
        program_rings(&f, vector);
        set_bus_master(&f, true);
        assert_eq!(enable(&f), ERR_NONE);
        assert_eq!(status(&f), STATUS_READY | STATUS_CMDQ_RUNNING);
        // Consume the wake-up that enabling the queue asks for.
        assert!(!f.poll());
        (f, guest)
    }

    /// Submits a NOP, rings the doorbell and polls; returns where the response went.
    fn nop_round_trip(f: &Function, guest: &mut Guest, token: u32) -> u64 {
        let resp = guest.submit(&command(Opcode::Nop, token), 32);
        guest.ring(f);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), guest.avail_idx);
        assert_eq!(guest.resp(resp).status, Status::Ok as u16);
        assert_eq!(guest.resp(resp).token, token);
        resp
    }

    /// An MSI-X eventfd for vector 0, as QEMU installs it with SET_IRQS; returns our end.
    fn install_vector0(f: &Function) -> File {
        let efd = eventfd();
        f.set_irqs(
            IRQ_MSIX,
            IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER,
            0,
            1,
            vec![efd.try_clone().unwrap()],
        )
        .unwrap();
        efd
    }

    #[test]
    fn identity_registers() {
        let f = vf();
        assert_eq!(rd32(&f, MAGIC_REG), MAGIC);
        assert_eq!(rd(&f, BAR0, MAGIC_REG, 4), b"RNIC");
        assert_eq!(rd32(&f, ABI_VERSION), rnic_abi::abi_version());
        assert_eq!(rd32(&f, ABI_VERSION) >> 16, u32::from(rnic_abi::ABI_MAJOR));
        assert_eq!(
            rd32(&f, FUNCTION_INFO),
            FUNCTION_IS_VF | 1 << FUNCTION_VF_INDEX_SHIFT
        );
        let caps = CAP_CMDQ
            | CAP_DOORBELL_NOTIFY
            | CAP_MSIX
            | CAP_FUNCTION_RESET
            | CAP_RDMA_RC
            | CAP_INDIRECT_MKEY
            | CAP_PATTERN_MKEY
            | CAP_SEND_VARIANTS
            | CAP_SRQ
            | CAP_UD
            | CAP_DC
            | CAP_ONE_SHOT_READ
            | CAP_WQE_MMIO
            | CAP_PIPELINED_REG
            | CAP_SHARED_SQ
            | CAP_SESSIONS
            | CAP_PAGE_TABLES
            | CAP_UC
            | CAP_MW
            | CAP_ETH
            | CAP_FAST_REG
            | CAP_GSI
            | CAP_USER_KICK
            | CAP_GID_TABLE
            | CAP_RESIZE_CQ
            | CAP_RESIZE_SRQ
            | CAP_ATOMIC_WRITE
            | CAP_FLUSH
            | CAP_MULTICAST;
        assert_eq!(rd32(&f, CAPS_LO), caps as u32);
        assert_eq!(rd32(&f, CAPS_HI), (caps >> 32) as u32);
        assert_eq!(rd64(&f, CAPS_LO), caps);
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(rd32(&f, DEVICE_CONTROL), 0);
        assert_eq!(
            rd32(&f, rnic_abi::regs::CMDQ_MAX_SIZE),
            u32::from(rnic_abi::cmd::CMDQ_MAX_SIZE)
        );
        assert_eq!(rd32(&f, DOORBELL_PAGES), doorbell::PAGES);
        assert_eq!(rd32(&f, MSIX_VECTORS), u32::from(pci::MSIX_VECTORS));
        assert_eq!(rd32(&f, CMDQ_MSIX_VECTOR), NO_VECTOR);
        assert_eq!(rd32(&f, ERROR_CODE), ERR_NONE);
        for reg in [
            CMDQ_DESC_LO,
            CMDQ_DESC_HI,
            CMDQ_AVAIL_LO,
            CMDQ_AVAIL_HI,
            CMDQ_USED_LO,
            CMDQ_USED_HI,
            CMDQ_SIZE,
            CMDQ_CONTROL,
            DOORBELL_KICK,
        ] {
            assert_eq!(rd32(&f, reg), 0, "register {reg:#x}");
        }
        // Past the registers, up to the MSI-X table, everything reads 0.
        for offset in (REGS_END..pci::MSIX_TABLE_OFFSET).step_by(4) {
            assert_eq!(rd32(&f, offset), 0, "offset {offset:#x}");
        }

        assert_eq!(rd32(&pf(), FUNCTION_INFO), 0);
        assert_eq!(rd32(&pf(), MAGIC_REG), MAGIC);
        let vf7 = Function::new(Identity::new(FunctionId::Vf(7), 8, None)).unwrap();
        assert_eq!(rd32(&vf7, FUNCTION_INFO), FUNCTION_IS_VF | 7 << 8);
    }

    #[test]
    fn reads_of_any_width_and_alignment_assemble_from_registers() {
        let f = vf();
        wr64(&f, CMDQ_DESC_LO, 0x0123_4567_89ab_cdf0);
        wr64(&f, CMDQ_AVAIL_LO, 0xfedc_ba98_7654_3210);
        wr32(&f, CMDQ_SIZE, 0x80);
        let words: Vec<u8> = (0..REGS_END + 16)
            .step_by(4)
            .flat_map(|off| rd32(&f, off).to_le_bytes())
            .collect();
        for offset in 0..REGS_END + 8 {
            for len in 1..=8 {
                let got = rd(&f, BAR0, offset, len);
                let at = offset as usize;
                assert_eq!(got, words[at..at + len], "{len} bytes at {offset:#x}");
            }
        }
        assert_eq!(rd(&f, BAR0, 1, 3), b"NIC");
        assert_eq!(rd64(&f, CMDQ_DESC_LO), 0x0123_4567_89ab_cdf0);
        assert_eq!(
            u16::from_le_bytes(rd(&f, BAR0, CMDQ_DESC_LO + 3, 2).try_into().unwrap()),
            0x6789,
            "the top byte of DESC_LO and the bottom byte of DESC_HI"
        );
        // An empty read is fine too.
        assert!(rd(&f, BAR0, 0, 0).is_empty());
    }

    #[test]
    fn sixty_four_bit_registers_take_halves_or_one_write() {
        let f = vf();
        // Low half, then high half.
        wr32(&f, CMDQ_DESC_LO, 0x89ab_cdf0);
        wr32(&f, CMDQ_DESC_HI, 0x0123_4567);
        assert_eq!(rd64(&f, CMDQ_DESC_LO), 0x0123_4567_89ab_cdf0);
        // High half, then low half.
        wr32(&f, CMDQ_USED_HI, 0x0000_0001);
        wr32(&f, CMDQ_USED_LO, 0x2000_0004);
        assert_eq!(rd64(&f, CMDQ_USED_LO), 0x1_2000_0004);
        // One 8-byte write.
        wr64(&f, CMDQ_AVAIL_LO, 0xdead_beef_cafe_f00e);
        assert_eq!(rd32(&f, CMDQ_AVAIL_LO), 0xcafe_f00e);
        assert_eq!(rd32(&f, CMDQ_AVAIL_HI), 0xdead_beef);
        // Rewriting one half keeps the other.
        wr32(&f, CMDQ_AVAIL_LO, 0x10);
        assert_eq!(rd64(&f, CMDQ_AVAIL_LO), 0xdead_beef_0000_0010);
        wr32(&f, CMDQ_AVAIL_HI, 0);
        assert_eq!(rd64(&f, CMDQ_AVAIL_LO), 0x10);
        // An 8-byte write at a 4-byte boundary covers two registers, whatever they are.
        wr64(&f, CMDQ_SIZE, u64::from(NO_VECTOR) << 32 | 64);
        assert_eq!(rd32(&f, CMDQ_SIZE), 64);
        assert_eq!(rd32(&f, CMDQ_MSIX_VECTOR), NO_VECTOR);
    }

    #[test]
    fn sub_word_and_misaligned_register_writes_are_ignored() {
        let f = vf();
        wr32(&f, CMDQ_SIZE, 16);
        wr(&f, CMDQ_SIZE, &[0xff]);
        wr(&f, CMDQ_SIZE, &[0xff, 0xff]);
        wr(&f, CMDQ_SIZE, &[0xff, 0xff, 0xff]);
        wr(&f, CMDQ_SIZE + 1, &[0xff; 4]);
        wr(&f, CMDQ_SIZE + 2, &[0xff; 8]);
        wr(&f, CMDQ_SIZE, &[0xff; 16]);
        wr(&f, CMDQ_SIZE, &[]);
        assert_eq!(rd32(&f, CMDQ_SIZE), 16);
        assert_eq!(rd32(&f, CMDQ_MSIX_VECTOR), NO_VECTOR);

        // Read-only registers ignore writes of any kind.
        for reg in [
            MAGIC_REG,
            ABI_VERSION,
            FUNCTION_INFO,
            CAPS_LO,
            DEVICE_STATUS,
            rnic_abi::regs::CMDQ_MAX_SIZE,
            DOORBELL_PAGES,
            MSIX_VECTORS,
            ERROR_CODE,
        ] {
            let before = rd32(&f, reg);
            wr32(&f, reg, !before);
            assert_eq!(rd32(&f, reg), before, "register {reg:#x}");
        }

        // A narrow write of CMDQ_ENABLE or CONTROL_RESET does nothing either.
        let _guest = Guest::map(&f);
        program_rings(&f, NO_VECTOR);
        set_bus_master(&f, true);
        wr(&f, CMDQ_CONTROL, &[CMDQ_ENABLE as u8]);
        wr(&f, CMDQ_CONTROL, &(CMDQ_ENABLE as u16).to_le_bytes());
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(enable(&f), ERR_NONE);
        wr(&f, DEVICE_CONTROL, &[CONTROL_RESET as u8]);
        assert_eq!(status(&f), STATUS_READY | STATUS_CMDQ_RUNNING);
    }

    #[test]
    fn cmdq_enable_needs_bus_master() {
        let f = vf();
        let _guest = Guest::map(&f);
        program_rings(&f, NO_VECTOR);
        assert_eq!(enable(&f), ERR_BUS_MASTER);
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(rd32(&f, CMDQ_CONTROL), 0);
        // Memory space alone is not enough.
        set_bus_master(&f, false);
        assert_eq!(enable(&f), ERR_BUS_MASTER);
        set_bus_master(&f, true);
        assert_eq!(enable(&f), ERR_NONE);
        assert_eq!(status(&f), STATUS_READY | STATUS_CMDQ_RUNNING);
        assert_eq!(rd32(&f, CMDQ_CONTROL), CMDQ_ENABLE);
    }

    #[test]
    fn cmdq_enable_checks_the_vector() {
        let f = vf();
        let _guest = Guest::map(&f);
        program_rings(&f, NO_VECTOR);
        set_bus_master(&f, true);
        for vector in [
            u32::from(pci::MSIX_VECTORS),
            u32::from(pci::MSIX_VECTORS) + 1,
            NO_VECTOR - 1,
            NO_VECTOR + 1,
            u32::MAX,
        ] {
            wr32(&f, CMDQ_MSIX_VECTOR, vector);
            assert_eq!(enable(&f), ERR_CMDQ_VECTOR, "vector {vector:#x}");
            assert_eq!(status(&f), STATUS_READY);
        }
        for vector in [0, u32::from(pci::MSIX_VECTORS) - 1, NO_VECTOR] {
            wr32(&f, CMDQ_MSIX_VECTOR, vector);
            assert_eq!(enable(&f), ERR_NONE, "vector {vector:#x}");
            assert_eq!(status(&f), STATUS_READY | STATUS_CMDQ_RUNNING);
        }
    }

    #[test]
    fn cmdq_enable_needs_mapped_writable_rings_and_a_good_size() {
        let f = vf();
        program_rings(&f, NO_VECTOR);
        set_bus_master(&f, true);
        // Nothing mapped at all.
        assert_eq!(enable(&f), ERR_CMDQ_ADDRESS);
        assert_eq!(status(&f), STATUS_READY);
        // Mapped, but only for the device to read.
        f.dma()
            .map(
                IOVA,
                MEM_SIZE,
                0,
                Some(crate::dma::tests::memfd(MEM_SIZE)),
                false,
            )
            .unwrap();
        assert_eq!(enable(&f), ERR_CMDQ_ADDRESS);
        f.dma().unmap(IOVA, MEM_SIZE).unwrap();
        let _guest = Guest::map(&f);
        // Rings beyond the mapping, and misaligned.
        wr64(&f, CMDQ_USED_LO, IOVA + MEM_SIZE - 8);
        assert_eq!(enable(&f), ERR_CMDQ_ADDRESS);
        wr64(&f, CMDQ_USED_LO, USED + 2);
        assert_eq!(enable(&f), ERR_CMDQ_ADDRESS);
        wr64(&f, CMDQ_USED_LO, USED);
        for size in [0, 3, 512] {
            wr32(&f, CMDQ_SIZE, size);
            assert_eq!(enable(&f), ERR_CMDQ_SIZE, "size {size}");
        }
        assert_eq!(status(&f), STATUS_READY);
        wr32(&f, CMDQ_SIZE, u32::from(QSIZE));
        // Success clears the error code.
        assert_eq!(enable(&f), ERR_NONE);
        assert_eq!(status(&f), STATUS_READY | STATUS_CMDQ_RUNNING);
        // Writing 0 stops the queue.
        wr32(&f, CMDQ_CONTROL, 0);
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(rd32(&f, CMDQ_CONTROL), 0);
    }

    #[test]
    fn query_device_through_the_function() {
        let (f, mut guest) = running(NO_VECTOR);
        let resp = guest.submit(&command(Opcode::QueryDevice, 0x5151), QUERY_LEN as u32);
        guest.ring(&f);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 1);
        assert_eq!(guest.used_len(0), QUERY_LEN as u32);
        assert_eq!(
            guest.resp(resp),
            RespHeader {
                status: Status::Ok as u16,
                opcode: Opcode::QueryDevice as u16,
                token: 0x5151,
                syndrome: 0,
                reserved: 0,
            }
        );
        let q = QueryDeviceResp::read_from_bytes(
            &guest.read(resp + RESP_LEN as u64, QUERY_LEN - RESP_LEN),
        )
        .unwrap();
        let id = f.identity();
        assert_eq!(q.vendor_id, pci::VENDOR_ID);
        assert_eq!(q.device_id, pci::VF_DEVICE_ID);
        assert_eq!(
            (q.abi_major, q.abi_minor),
            (rnic_abi::ABI_MAJOR, rnic_abi::ABI_MINOR)
        );
        assert_eq!(q.fw_version, crate::commands::fw_version());
        assert_eq!(q.function_kind, rnic_abi::cmd::FUNCTION_KIND_VF);
        assert_eq!(q.vf_index, 1);
        assert_eq!(q.total_vfs, 0);
        assert_eq!(q.caps, id.caps);
        assert_eq!(q.mac, [0x02, 0x52, 0x4e, 0x49, 0x43, 2]);
        assert_eq!(q.gid, id.gid);
        assert_eq!(q.limits, id.limits);
        assert_eq!(q.limits.doorbell_pages, doorbell::PAGES);
        // Nothing more to do.
        assert!(!f.poll());
        assert_eq!(guest.used_idx(), 1);
    }

    #[test]
    fn the_admin_queue_runs_through_its_own_registers_and_doorbell() {
        let f = vf();
        let mut guest = Guest::map(&f);
        guest.reset_rings();
        set_bus_master(&f, true);
        wr64(&f, ADMINQ_DESC_LO, DESC);
        wr64(&f, ADMINQ_AVAIL_LO, AVAIL);
        wr64(&f, ADMINQ_USED_LO, USED);
        wr32(&f, ADMINQ_SIZE, u32::from(QSIZE));
        assert_eq!(rd64(&f, ADMINQ_AVAIL_LO), AVAIL);
        assert_eq!(rd32(&f, ADMINQ_MSIX_VECTOR), NO_VECTOR);
        // The command queue's registers are untouched.
        assert_eq!(rd64(&f, CMDQ_DESC_LO), 0);
        wr32(&f, ADMINQ_CONTROL, CMDQ_ENABLE);
        assert_eq!(rd32(&f, ADMINQ_ERROR_CODE), ERR_NONE);
        assert_eq!(status(&f), STATUS_READY | STATUS_ADMINQ_RUNNING);
        // Consume the wake-up that enabling the queue asks for.
        assert!(!f.poll());
        let resp = guest.submit(&command(Opcode::AdminQuery, 9), 32);
        // The command queue's doorbell does not concern the admin queue.
        guest.ring(&f);
        assert!(!f.run_admin(|_, _, _| panic!("no admin command was announced")));
        f.doorbells()
            .write32(doorbell::ADMINQ_DOORBELL, u32::from(guest.avail_idx));
        assert!(f.run_admin(|h, _, _| crate::commands::not_permitted(h)));
        assert_eq!(guest.used_idx(), 1);
        assert_eq!(guest.resp(resp).status, Status::NotPermitted as u16);
        assert_eq!(guest.resp(resp).syndrome, Opcode::AdminQuery as u32);
        // A reset stops it and clears its registers.
        wr32(&f, DEVICE_CONTROL, CONTROL_RESET);
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(rd64(&f, ADMINQ_DESC_LO), 0);
    }

    #[test]
    fn a_disabled_function_reports_disabled_and_takes_no_set_up() {
        let (f, mut guest) = running(NO_VECTOR);
        f.set_enabled(false);
        assert_eq!(status(&f), STATUS_DISABLED);
        assert_eq!(rd32(&f, CMDQ_CONTROL), 0);
        wr32(&f, CMDQ_CONTROL, CMDQ_ENABLE);
        assert_eq!(status(&f), STATUS_DISABLED);
        guest.submit(&command(Opcode::Nop, 1), 32);
        guest.ring(&f);
        assert!(!f.poll());
        assert_eq!(guest.used_idx(), 0);
        // Enabled again: from power-on, and usable.
        f.set_enabled(true);
        assert_eq!(status(&f), STATUS_READY);
        guest.reset_rings();
        program_rings(&f, NO_VECTOR);
        assert_eq!(enable(&f), ERR_NONE);
        f.poll();
        nop_round_trip(&f, &mut guest, 2);
    }

    #[test]
    fn link_state_shows_in_the_status() {
        let f = pf();
        assert_ne!(f.identity().caps & CAP_ADMIN, 0);
        assert_eq!(vf().identity().caps & CAP_ADMIN, 0);
        f.set_link(false);
        assert_eq!(status(&f), STATUS_READY | STATUS_LINK_DOWN);
        f.set_link(true);
        assert_eq!(status(&f), STATUS_READY);
    }

    #[test]
    fn addresses_are_the_base_plus_the_function_number() {
        let gid = |id, base| Identity::new(id, 4, base).gid;
        let mapped = |ip: [u8; 4]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&ip);
            g
        };
        assert_eq!(gid(FunctionId::Pf, None), mapped([10, 82, 0, 1]));
        assert_eq!(gid(FunctionId::Vf(3), None), mapped([10, 82, 0, 5]));
        let base = Some(std::net::Ipv4Addr::new(127, 0, 1, 255));
        assert_eq!(gid(FunctionId::Pf, base), mapped([127, 0, 1, 255]));
        assert_eq!(gid(FunctionId::Vf(0), base), mapped([127, 0, 2, 0]));
        // The MAC does not depend on the address.
        assert_eq!(
            Identity::new(FunctionId::Vf(0), 4, base).mac,
            Identity::new(FunctionId::Vf(0), 4, None).mac
        );
    }

    #[test]
    fn poll_without_a_doorbell_change_does_nothing() {
        assert!(!vf().poll(), "a fresh function has nothing to do");
        let (f, mut guest) = running(NO_VECTOR);
        assert!(!f.poll());
        // Published in memory, but the doorbell was not rung.
        let resp = guest.submit(&command(Opcode::Nop, 1), 32);
        assert!(!f.poll());
        assert!(!f.poll());
        assert_eq!(guest.used_idx(), 0);
        assert_eq!(guest.read(resp, 4), [0xEE; 4]);
        guest.ring(&f);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 1);
        assert_eq!(guest.resp(resp).status, Status::Ok as u16);
        // Ringing again with the same value is no news.
        guest.ring(&f);
        assert!(!f.poll());
        // Two commands, one doorbell.
        guest.submit(&command(Opcode::Nop, 2), 32);
        guest.submit(&command(Opcode::Nop, 3), 32);
        guest.ring(&f);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 3);
        assert!(!f.poll());
    }

    #[test]
    fn trapped_doorbell_writes_and_kicks_wake_the_device() {
        let (f, mut guest) = running(NO_VECTOR);
        // A client that did not mmap the doorbell BAR writes it through messages.
        guest.submit(&command(Opcode::Nop, 1), 32);
        f.region_write(DB, CMDQ_DOORBELL, &u32::from(guest.avail_idx).to_le_bytes())
            .unwrap();
        assert_eq!(
            f.doorbells().read32(CMDQ_DOORBELL),
            Some(u32::from(guest.avail_idx))
        );
        assert_eq!(rd(&f, DB, CMDQ_DOORBELL, 4), 1u32.to_le_bytes());
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 1);
        // A kick makes the device look even when the doorbell did not change.
        guest.submit(&command(Opcode::Nop, 2), 32);
        assert!(!f.poll());
        wr32(&f, DOORBELL_KICK, 0);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 2);
        // Even a kick naming a page the BAR does not have.
        guest.submit(&command(Opcode::Nop, 3), 32);
        wr32(&f, DOORBELL_KICK, 1000);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 3);
        // The user kick page's register kicks as DOORBELL_KICK does, and reads 0.
        guest.submit(&command(Opcode::Nop, 4), 32);
        assert!(!f.poll());
        wr32(&f, USER_KICK, 0);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 4);
        assert_eq!(rd32(&f, USER_KICK), 0);
    }

    #[test]
    fn no_dma_while_bus_master_is_off() {
        let (f, mut guest) = running(NO_VECTOR);
        set_bus_master(&f, false);
        guest.submit(&command(Opcode::Nop, 1), 32);
        guest.ring(&f);
        assert!(!f.poll());
        assert_eq!(guest.used_idx(), 0);
        assert_eq!(status(&f), STATUS_READY | STATUS_CMDQ_RUNNING);
        // Turning bus mastering back on wakes the device for the work that waited.
        set_bus_master(&f, true);
        assert!(f.poll());
        assert_eq!(guest.used_idx(), 1);
    }

    #[test]
    fn losing_the_rings_is_fatal_until_reset() {
        let (f, mut guest) = running(NO_VECTOR);
        nop_round_trip(&f, &mut guest, 1);
        f.dma().unmap(IOVA, MEM_SIZE).unwrap();
        guest.submit(&command(Opcode::Nop, 2), 32);
        guest.ring(&f);
        assert!(f.poll());
        assert_eq!(rd32(&f, ERROR_CODE), ERR_CMDQ_DMA);
        assert_eq!(status(&f), STATUS_READY | STATUS_FATAL);
        f.reset();
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(rd32(&f, ERROR_CODE), ERR_NONE);
    }

    /// Puts `f` in a state far from power-on: queue running, MSI-X on, doorbells rung,
    /// config registers written, an MSI-X table entry programmed.
    fn dirty(f: &Function, guest: &mut Guest) {
        nop_round_trip(f, guest, 7);
        set_msix(f, cfg::MSIX_ENABLE);
        set_cfg16(f, cfg::PCIE_CAP + cfg::PCIE_DEVCTL, 0x0010);
        f.region_write(CONFIG, cfg::INTERRUPT_LINE as u64, &[0x0b])
            .unwrap();
        wr32(f, pci::MSIX_TABLE_OFFSET, 0xfee0_0000);
        wr32(f, pci::MSIX_TABLE_OFFSET + 12, 0);
        for page in 0..u64::from(doorbell::PAGES) {
            f.doorbells().write32(page * 4096 + 0x80, 0xabcd);
        }
        f.request_notify(true);
        assert_eq!(status(f), STATUS_READY | STATUS_CMDQ_RUNNING);
        assert_ne!(rd(f, CONFIG, 0, 4096), rd(&vf(), CONFIG, 0, 4096));
    }

    /// Checks that `f` is back at power-on in everything a reset restores.
    /// The doorbell BAR after a reset: zeroed but for the reset count, which counts it.
    fn assert_doorbells_reset(f: &Function) {
        let bar = rd(f, DB, 0, doorbell::BAR_SIZE as usize);
        let at = doorbell::RESET_COUNT as usize;
        let count = u32::from_le_bytes(bar[at..at + 4].try_into().unwrap());
        assert!(count > 0, "RESET_COUNT counts the reset");
        assert!(
            bar.iter()
                .enumerate()
                .all(|(i, &b)| b == 0 || (at..at + 4).contains(&i)),
            "doorbell BAR zeroed"
        );
    }

    fn assert_power_on(f: &Function) {
        let fresh = vf();
        assert_eq!(status(f), STATUS_READY);
        assert_eq!(rd32(f, CMDQ_CONTROL), 0);
        assert_eq!(rd32(f, ERROR_CODE), ERR_NONE);
        assert_eq!(rd32(f, DEVICE_CONTROL), 0);
        // Every register and the whole MSI-X table and PBA as on a fresh function.
        assert_eq!(
            rd(f, BAR0, 0, pci::REG_BAR_SIZE as usize),
            rd(&fresh, BAR0, 0, pci::REG_BAR_SIZE as usize)
        );
        assert_eq!(rd32(f, CMDQ_MSIX_VECTOR), NO_VECTOR);
        assert_eq!(rd(f, CONFIG, 0, 4096), rd(&fresh, CONFIG, 0, 4096));
        assert_doorbells_reset(f);
        assert!(!f.poll());
    }

    /// After a reset that keeps DMA mappings, a driver restarts the queue on the same RAM
    /// without mapping anything again.
    fn assert_restarts(f: &Function, guest: &mut Guest) {
        assert_eq!(f.dma().region_count(), 1);
        guest.reset_rings();
        program_rings(f, NO_VECTOR);
        set_bus_master(f, true);
        assert_eq!(enable(f), ERR_NONE);
        nop_round_trip(f, guest, 99);
    }

    #[test]
    fn device_control_reset_keeps_the_pci_state() {
        let (f, mut guest) = running(NO_VECTOR);
        dirty(&f, &mut guest);
        let config = rd(&f, CONFIG, 0, 4096);
        let msix_table = rd(&f, BAR0, pci::MSIX_TABLE_OFFSET, 16 * 16);
        wr32(&f, DEVICE_CONTROL, CONTROL_RESET);
        let fresh = vf();
        assert_eq!(status(&f), STATUS_READY);
        assert_eq!(
            rd(&f, BAR0, 0, 0x1000),
            rd(&fresh, BAR0, 0, 0x1000),
            "registers at power-on"
        );
        assert_eq!(
            rd(&f, CONFIG, 0, 4096),
            config,
            "config space is the OS's, not reset"
        );
        assert_eq!(rd(&f, BAR0, pci::MSIX_TABLE_OFFSET, 16 * 16), msix_table);
        assert_doorbells_reset(&f);
        assert!(!f.poll());
        assert_restarts(&f, &mut guest);
    }

    #[test]
    fn re_enabling_the_queue_clears_a_stale_doorbell() {
        let (f, mut guest) = running(NO_VECTOR);
        nop_round_trip(&f, &mut guest, 1);
        wr32(&f, CMDQ_CONTROL, 0);
        guest.reset_rings();
        program_rings(&f, NO_VECTOR);
        assert_eq!(enable(&f), ERR_NONE);
        assert_eq!(f.doorbells().read32(CMDQ_DOORBELL), Some(0));
        // The first command after the restart rings the same doorbell value as before.
        nop_round_trip(&f, &mut guest, 2);
    }

    #[test]
    fn pcie_function_level_reset() {
        let (f, mut guest) = running(NO_VECTOR);
        dirty(&f, &mut guest);
        let devctl = cfg::PCIE_CAP + cfg::PCIE_DEVCTL;
        set_cfg16(&f, devctl, cfg16(&f, devctl) | cfg::PCIE_DEVCTL_FLR);
        assert_power_on(&f);
        assert_restarts(&f, &mut guest);
    }

    #[test]
    fn reset_through_vfio_user() {
        let (f, mut guest) = running(NO_VECTOR);
        dirty(&f, &mut guest);
        f.reset();
        assert_power_on(&f);
        assert_restarts(&f, &mut guest);
    }

    #[test]
    fn disconnect_also_drops_dma_mappings_and_eventfds() {
        let (f, mut guest) = running(0);
        let mut efd = install_vector0(&f);
        dirty(&f, &mut guest);
        f.disconnect();
        assert_power_on(&f);
        assert_eq!(f.dma().region_count(), 0);
        program_rings(&f, 0);
        set_bus_master(&f, true);
        assert_eq!(enable(&f), ERR_CMDQ_ADDRESS);

        // The next client maps its memory again but installs no eventfd yet.
        let mut guest = Guest::map(&f);
        guest.reset_rings();
        assert_eq!(enable(&f), ERR_NONE);
        set_msix(&f, cfg::MSIX_ENABLE);
        take(&f, &mut efd);
        nop_round_trip(&f, &mut guest, 1);
        assert_eq!(
            take(&f, &mut efd),
            0,
            "the old client's eventfd was dropped"
        );
    }

    #[test]
    fn completion_writes_the_msix_eventfd() {
        let (f, mut guest) = running(0);
        let mut efd = install_vector0(&f);
        set_msix(&f, cfg::MSIX_ENABLE);
        nop_round_trip(&f, &mut guest, 1);
        assert_eq!(take(&f, &mut efd), 1);
        assert_eq!(rd32(&f, PBA), 0);

        // The driver can ask for no interrupt.
        guest.set_avail_flags(1);
        nop_round_trip(&f, &mut guest, 2);
        assert_eq!(take(&f, &mut efd), 0);
        guest.set_avail_flags(0);

        // Nor is there one without a vector.
        wr32(&f, CMDQ_MSIX_VECTOR, NO_VECTOR);
        nop_round_trip(&f, &mut guest, 3);
        assert_eq!(take(&f, &mut efd), 0);
        assert_eq!(rd32(&f, PBA), 0);
    }

    #[test]
    fn with_msix_disabled_the_vector_becomes_pending() {
        let (f, mut guest) = running(0);
        let mut efd = install_vector0(&f);
        nop_round_trip(&f, &mut guest, 1);
        assert_eq!(take(&f, &mut efd), 0);
        assert_eq!(rd32(&f, PBA) & 1, 1);
        assert_eq!(rd(&f, BAR0, PBA, 1), [1]);
        // Enabling MSI-X delivers it and clears the bit.
        set_msix(&f, cfg::MSIX_ENABLE);
        assert_eq!(take(&f, &mut efd), 1);
        assert_eq!(rd32(&f, PBA), 0);

        // The function mask holds messages back the same way.
        set_msix(&f, cfg::MSIX_ENABLE | cfg::MSIX_FUNCTION_MASK);
        nop_round_trip(&f, &mut guest, 2);
        assert_eq!(take(&f, &mut efd), 0);
        assert_eq!(rd32(&f, PBA), 1);
        set_msix(&f, cfg::MSIX_ENABLE);
        assert_eq!(take(&f, &mut efd), 1);
        assert_eq!(rd32(&f, PBA), 0);

        // The PBA is read-only.
        set_msix(&f, 0);
        nop_round_trip(&f, &mut guest, 3);
        wr32(&f, PBA, 0);
        assert_eq!(rd32(&f, PBA), 1);
    }

    #[test]
    fn a_vector_register_beyond_16_bits_is_not_truncated() {
        let (f, mut guest) = running(0);
        let mut efd = install_vector0(&f);
        set_msix(&f, cfg::MSIX_ENABLE);
        // Changed after the queue started: 0x1_0000 must not act as vector 0.
        wr32(&f, CMDQ_MSIX_VECTOR, 0x1_0000);
        nop_round_trip(&f, &mut guest, 1);
        assert_eq!(take(&f, &mut efd), 0);
        assert_eq!(rd32(&f, PBA), 0);
        wr32(&f, CMDQ_MSIX_VECTOR, 0);
        nop_round_trip(&f, &mut guest, 2);
        assert_eq!(take(&f, &mut efd), 1);
    }

    #[test]
    fn set_irqs_on_other_indexes() {
        let f = vf();
        // Tearing down INTx, MSI, ERR or REQ is fine; setting them up is not.
        for index in [0, 1, 3, 4] {
            f.set_irqs(
                index,
                IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER,
                0,
                0,
                vec![],
            )
            .unwrap();
            assert!(f
                .set_irqs(
                    index,
                    IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER,
                    0,
                    1,
                    vec![eventfd()]
                )
                .is_err());
        }
        assert!(f
            .set_irqs(
                IRQ_MSIX,
                IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER,
                16,
                1,
                vec![eventfd()]
            )
            .is_err());
    }

    /// Whether a region access of `len` bytes at `offset` lies inside `region`.
    fn in_range(region: u32, offset: u64, len: usize) -> bool {
        let size = match region {
            BAR0 => pci::REG_BAR_SIZE,
            DB => doorbell::BAR_SIZE,
            CONFIG => pci::CONFIG_SPACE_SIZE as u64,
            _ => return false,
        };
        offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= size)
    }

    #[test]
    fn bad_region_accesses_fail_cleanly() {
        let f = vf();
        let mut buf = [0u8; 8];
        for region in [1, 3, 4, 5, 6, 8, 9, 10, 1000, u32::MAX] {
            for len in [0, 1, 4] {
                let err = f.region_read(region, 0, &mut buf[..len]).unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
                let err = f.region_write(region, 0, &buf[..len]).unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            }
        }
        for (region, size) in [
            (BAR0, pci::REG_BAR_SIZE),
            (DB, doorbell::BAR_SIZE),
            (CONFIG, pci::CONFIG_SPACE_SIZE as u64),
        ] {
            for (offset, len) in [
                (size, 1),
                (size - 1, 2),
                (size - 4, 8),
                (size + 0x1000, 4),
                (1 << 32, 4),
                (u64::MAX, 1),
                (u64::MAX - 3, 8),
                (u64::MAX, 0),
            ] {
                assert!(!in_range(region, offset, len));
                let err = f
                    .region_read(region, offset, &mut buf[..len])
                    .expect_err("read out of range");
                assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
                let err = f
                    .region_write(region, offset, &buf[..len])
                    .expect_err("write out of range");
                assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            }
            // The last bytes, and an empty access at the very end, are fine.
            f.region_read(region, size - 4, &mut buf[..4]).unwrap();
            f.region_read(region, size, &mut []).unwrap();
        }
        assert_eq!(status(&f), STATUS_READY);
    }

    #[test]
    fn request_notify_reaches_every_doorbell_page() {
        let f = vf();
        f.doorbells().write32(CMDQ_DOORBELL, 5);
        f.request_notify(true);
        for page in 0..u64::from(doorbell::PAGES) {
            let at = page * rnic_abi::PAGE_SIZE + doorbell::NOTIFY_REQUEST;
            assert_eq!(rd(&f, DB, at, 4), 1u32.to_le_bytes(), "page {page}");
            assert_eq!(f.doorbells().read32(at), Some(1));
        }
        assert_eq!(
            f.doorbells().read32(CMDQ_DOORBELL),
            Some(5),
            "doorbells untouched"
        );
        f.request_notify(false);
        for page in 0..u64::from(doorbell::PAGES) {
            let at = page * rnic_abi::PAGE_SIZE + doorbell::NOTIFY_REQUEST;
            assert_eq!(rd(&f, DB, at, 4), [0; 4], "page {page}");
        }
    }

    #[derive(Debug, Clone)]
    struct Access {
        region: u32,
        offset: u64,
        data: Vec<u8>,
        write: bool,
    }

    fn any_access() -> impl Strategy<Value = Access> {
        let offset = prop_oneof![
            4 => 0..0x100u64,
            2 => 0..pci::REG_BAR_SIZE + 0x100,
            2 => pci::MSIX_TABLE_OFFSET - 8..pci::MSIX_PBA_OFFSET + 0x20,
            2 => 0..doorbell::BAR_SIZE + 0x100,
            1 => any::<u64>(),
            1 => u64::MAX - 0x80..=u64::MAX,
        ];
        (
            0..10u32,
            offset,
            proptest::collection::vec(any::<u8>(), 0..64),
            any::<bool>(),
        )
            .prop_map(|(region, offset, data, write)| Access {
                region,
                offset,
                data,
                write,
            })
    }

    proptest! {
        #[test]
        fn random_region_accesses_never_panic(
            accesses in proptest::collection::vec(any_access(), 1..48),
        ) {
            // Start from a function with a running queue, so that random writes can stop,
            // reset or break it as well as reach idle registers.
            let (f, _guest) = running(0);
            for a in accesses {
                let fits = in_range(a.region, a.offset, a.data.len());
                if a.write {
                    prop_assert_eq!(f.region_write(a.region, a.offset, &a.data).is_ok(), fits);
                } else {
                    let mut buf = a.data.clone();
                    prop_assert_eq!(f.region_read(a.region, a.offset, &mut buf).is_ok(), fits);
                }
                f.poll();
                prop_assert_eq!(rd32(&f, MAGIC_REG), MAGIC);
                prop_assert!(status(&f) & STATUS_READY != 0);
            }
        }
    }
}
