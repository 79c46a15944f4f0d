//! Errors of the driver.

use std::io;

/// Everything that can go wrong between the driver and the device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed; the first field says what was being done.
    #[error("{0}: {1}")]
    Io(String, #[source] io::Error),
    /// The vfio-user conversation with the device failed.
    #[error("vfio-user: {0}: {1}")]
    VfioUser(String, #[source] vfio_user::Error),
    /// No rnic device was found where the driver looked.
    #[error("no rnic device found: {0}")]
    NotFound(String),
    /// The device speaks an interface version this driver does not.
    #[error("device ABI version {device_major}.{device_minor} is not supported by this driver (ABI {driver_major}.x); use a matching rnicd and driver")]
    AbiMismatch {
        /// Major version the device reports.
        device_major: u16,
        /// Minor version the device reports.
        device_minor: u16,
        /// Major version the driver speaks.
        driver_major: u16,
    },
    /// The device reported a state or value the driver cannot work with.
    #[error("device error: {0}")]
    Device(String),
    /// A command completed with a status other than OK.
    #[error("command {opcode:#06x} failed with status {status} ({name})")]
    Command {
        /// The command's opcode.
        opcode: u16,
        /// The raw status.
        status: u16,
        /// The status's name, or "unknown".
        name: &'static str,
    },
    /// The device did not answer in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, &'static str),
    /// The transport cannot do this (for example interrupts in a VM without a kernel driver).
    #[error("not supported by this transport: {0}")]
    Unsupported(&'static str),
    /// Driver memory for DMA is exhausted.
    #[error("out of DMA memory: {0}")]
    NoDmaMemory(String),
}

/// Result of driver operations.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] from the last OS error, with what was being done.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        Error::Io(what.into(), io::Error::last_os_error())
    }
}
