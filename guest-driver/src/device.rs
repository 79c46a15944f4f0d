//! An opened rnic function: identity checks, reset, bus mastering, the command queue, and
//! the commands themselves. Transport-independent.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rnic_abi::cmd::{Opcode, QueryDeviceResp};
use rnic_abi::pci::cfg;
use rnic_abi::regs;
use zerocopy::FromBytes;

use crate::cmdq::{check, CommandQueue, Completion};
use crate::error::{Error, Result};
use crate::transport::{poll_until, ResetWatch, Transport};

/// How long a function reset may take.
const RESET_TIMEOUT: Duration = Duration::from_secs(5);

/// What config space says about the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PciIdentity {
    /// Vendor ID.
    pub vendor_id: u16,
    /// Device ID.
    pub device_id: u16,
    /// Revision ID.
    pub revision: u8,
    /// Class code (base, sub, programming interface).
    pub class_code: u32,
    /// Subsystem vendor ID.
    pub subsystem_vendor_id: u16,
    /// Subsystem ID.
    pub subsystem_id: u16,
}

/// An opened, reset and running rnic function.
pub struct Device {
    transport: Box<dyn Transport>,
    cmdq: Mutex<CommandQueue>,
    /// The admin queue, started by the first admin command (PF administration).
    admin: Mutex<Option<CommandQueue>>,
    pci: PciIdentity,
    interrupts: bool,
    /// The function's reset count after the reset of [`Device::open`]: a change means
    /// someone else reset it.
    resets: ResetWatch,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("at", &self.transport.describe())
            .field("pci", &self.pci)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Takes over the function behind `transport`: checks it is an rnic of a compatible
    /// ABI, resets it, enables bus mastering and interrupts (where the transport can), and
    /// starts the command queue.
    pub fn open(transport: Box<dyn Transport>) -> Result<Self> {
        let t = transport.as_ref();
        let pci = read_pci_identity(t)?;
        if pci.vendor_id != rnic_abi::pci::VENDOR_ID {
            return Err(Error::NotFound(format!(
                "{} has vendor ID {:#06x}, not rnic's {:#06x}",
                t.describe(),
                pci.vendor_id,
                rnic_abi::pci::VENDOR_ID
            )));
        }
        let magic = t.reg_read32(regs::MAGIC_REG)?;
        if magic != regs::MAGIC {
            return Err(Error::Device(format!(
                "BAR0 of {} reads magic {magic:#010x}, not {:#010x}: is memory decoding enabled?",
                t.describe(),
                regs::MAGIC
            )));
        }
        let version = t.reg_read32(regs::ABI_VERSION)?;
        let (major, minor) = ((version >> 16) as u16, version as u16);
        if major != rnic_abi::ABI_MAJOR {
            return Err(Error::AbiMismatch {
                device_major: major,
                device_minor: minor,
                driver_major: rnic_abi::ABI_MAJOR,
            });
        }
        reset(t)?;
        let resets = ResetWatch::new(t);
        let mut command = [0u8; 2];
        t.config_read(cfg::COMMAND as u16, &mut command)?;
        let command = u16::from_le_bytes(command) | cfg::COMMAND_MEMORY | cfg::COMMAND_BUS_MASTER;
        t.config_write(cfg::COMMAND as u16, &command.to_le_bytes())?;
        let interrupts = t.enable_interrupts(1)?;
        let cmdq = CommandQueue::start(t, interrupts)?;
        log::debug!("opened {} (interrupts: {interrupts})", t.describe());
        Ok(Self {
            transport,
            cmdq: Mutex::new(cmdq),
            admin: Mutex::new(None),
            pci,
            interrupts,
            resets,
        })
    }

    /// Fails at once if the function is lost to this driver: [`Error::DeviceGone`] when
    /// the transport lost it (rnicd closed the socket), [`Error::FunctionReset`] when
    /// someone else reset it since [`Device::open`] (its `RESET_COUNT` moved). An atomic
    /// load and a load from the doorbell BAR: cheap enough for every round of a wait.
    /// Every command checks it first, so teardown after such an error does not wait for
    /// a device that is gone.
    pub fn check_alive(&self) -> Result<()> {
        self.resets.check(self.transport())
    }

    /// The transport, for what the verbs layer builds on it.
    pub fn transport(&self) -> &dyn Transport {
        self.transport.as_ref()
    }

    /// The function's PCI identity.
    pub fn pci(&self) -> PciIdentity {
        self.pci
    }

    /// Whether command completions arrive as interrupts (else the driver polls).
    pub fn interrupts(&self) -> bool {
        self.interrupts
    }

    fn cmdq(&self) -> MutexGuard<'_, CommandQueue> {
        self.cmdq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How the command queue has talked to the device so far.
    pub fn cmdq_stats(&self) -> crate::cmdq::QueueStats {
        self.cmdq().stats()
    }

    /// Sends a raw command and returns whatever the device answered, status included.
    pub fn raw_command(
        &self,
        opcode: u16,
        request: &[u8],
        response_len: usize,
    ) -> Result<Completion> {
        self.check_alive()?;
        self.cmdq()
            .execute(self.transport(), opcode, request, response_len)
    }

    /// Sends a raw command on the admin queue (starting the queue, polled, the first time)
    /// and returns whatever the device answered, status included.
    pub fn raw_admin_command(
        &self,
        opcode: u16,
        request: &[u8],
        response_len: usize,
    ) -> Result<Completion> {
        self.check_alive()?;
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let queue = match &mut *admin {
            Some(q) => q,
            none => none.insert(CommandQueue::start_on(
                self.transport(),
                regs::ADMINQ_REGS,
                None,
            )?),
        };
        queue.execute(self.transport(), opcode, request, response_len)
    }

    /// Sends an admin command and fails unless it succeeded.
    pub fn admin_command(
        &self,
        opcode: Opcode,
        request: &[u8],
        response_len: usize,
    ) -> Result<Vec<u8>> {
        let c = self.raw_admin_command(opcode as u16, request, response_len)?;
        Ok(check(opcode as u16, c)?.body)
    }

    /// Sends a command and fails unless it succeeded.
    pub fn command(&self, opcode: Opcode, request: &[u8], response_len: usize) -> Result<Vec<u8>> {
        let c = self.raw_command(opcode as u16, request, response_len)?;
        Ok(check(opcode as u16, c)?.body)
    }

    /// NOP: a round trip through the command queue.
    pub fn nop(&self) -> Result<()> {
        self.command(Opcode::Nop, &[], 0).map(drop)
    }

    /// QUERY_DEVICE: identity, capabilities and limits.
    pub fn query_device(&self) -> Result<QueryDeviceResp> {
        let body = self.command(Opcode::QueryDevice, &[], size_of::<QueryDeviceResp>())?;
        QueryDeviceResp::read_from_bytes(&body).map_err(|_| {
            Error::Device(format!(
                "QUERY_DEVICE answered {} bytes, expected {}",
                body.len(),
                size_of::<QueryDeviceResp>()
            ))
        })
    }
}

/// Resets the function through DEVICE_CONTROL and waits until it reports ready.
pub fn reset(t: &dyn Transport) -> Result<()> {
    t.reg_write32(regs::DEVICE_CONTROL, regs::CONTROL_RESET)?;
    poll_until(RESET_TIMEOUT, "the function to come out of reset", || {
        let status = t.reg_read32(regs::DEVICE_STATUS)?;
        if status & regs::STATUS_DISABLED != 0 {
            // It will not become ready until its PF enables it: say so now.
            return Err(Error::Device(format!(
                "{} is disabled by its PF (SET_NUM_VFS); enable it with `rnic-admin vfs enable N`",
                t.describe()
            )));
        }
        Ok((status & regs::STATUS_READY != 0).then_some(()))
    })
}

/// Reads the identity fields of config space.
pub fn read_pci_identity(t: &dyn Transport) -> Result<PciIdentity> {
    let mut h = [0u8; 0x30];
    t.config_read(0, &mut h)?;
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
    Ok(PciIdentity {
        vendor_id: u16_at(cfg::VENDOR_ID),
        device_id: u16_at(cfg::DEVICE_ID),
        revision: h[cfg::REVISION_ID],
        class_code: u32::from_le_bytes([
            h[cfg::CLASS_CODE],
            h[cfg::CLASS_CODE + 1],
            h[cfg::CLASS_CODE + 2],
            0,
        ]),
        subsystem_vendor_id: u16_at(cfg::SUBSYSTEM_VENDOR_ID),
        subsystem_id: u16_at(cfg::SUBSYSTEM_ID),
    })
}
