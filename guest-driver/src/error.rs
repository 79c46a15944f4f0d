//! Errors of the driver.

use std::io;

use crate::transport::vfio_user::client::ClientError;

/// Everything that can go wrong between the driver and the device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed; the first field says what was being done.
    #[error("{0}: {1}")]
    Io(String, #[source] io::Error),
    /// The vfio-user conversation with the device failed; the second field says how (an
    /// error reply carries the server's errno, [`ClientError::errno`]).
    #[error("vfio-user: {0}: {1}")]
    VfioUser(String, #[source] ClientError),
    /// rnicd closed the vfio-user socket (the field: `vfio-user:PATH`): the function and
    /// everything this driver made on it are gone, and every request fails at once.
    #[error("{0}: rnicd closed the socket (rnicd exited or was stopped); the function and every object of this driver on it are gone: start rnicd again, then open the function again")]
    DeviceGone(String),
    /// The function (the field names it) was reset by someone other than this driver:
    /// its `RESET_COUNT` changed ([`crate::transport::ResetWatch`]).
    #[error("{0} was reset by someone else (the PF's RESET_VF or VF disable, or its VMM): every object of this driver on it is gone; open the function again")]
    FunctionReset(String),
    /// Another client holds the vfio-user socket (rnicd serves one at a time), and it
    /// stayed held for as long as the connection was to wait.
    #[error("{path} is held by another client (a VMM or another tool; rnicd serves one at a time){}; pass --wait SECS to wait for it", waited_for(*waited))]
    Held {
        /// The socket.
        path: String,
        /// How long the driver waited for it.
        waited: std::time::Duration,
    },
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

/// ", waited N s" for a wait worth naming.
fn waited_for(waited: std::time::Duration) -> String {
    if waited >= std::time::Duration::from_millis(1500) {
        format!(" (waited {:.0} s)", waited.as_secs_f64())
    } else {
        String::new()
    }
}

/// Result of driver operations.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] from the last OS error, with what was being done.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        Error::Io(what.into(), io::Error::last_os_error())
    }

    /// Whether the function is gone under the driver ([`Error::DeviceGone`],
    /// [`Error::FunctionReset`]): nothing of it is left to tear down, and the device no
    /// longer touches the driver's memory, so teardown may skip it quietly.
    pub fn function_lost(&self) -> bool {
        matches!(self, Error::DeviceGone(_) | Error::FunctionReset(_))
    }
}
