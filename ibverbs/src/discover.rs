//! Where the rnic functions are, and taking one for this process.
//!
//! On the host, `RNIC_VFIO_USER=/path/a.sock:/path/b.sock` lists rnicd's vfio-user
//! sockets; inside a VM (the variable unset), every rnic PCI function is a device. They
//! are `rnic_0`, `rnic_1`, ... in that order.
//!
//! A function serves one driver at a time: rnicd accepts one client per socket, and in
//! a VM two processes driving one function would reset each other's command queue. So
//! taking a function ([`claim`]) is exclusive: in a VM an advisory lock on the
//! function's sysfs `config` file keeps a second libibverbs process off (it gets
//! `EBUSY` at once); on the host the driver finds a socket held when rnicd answers its
//! VERSION with `EBUSY` or (rnicd keeping a second client waiting) not within a second
//! (`Error::Held`), and the open fails with `EBUSY`; [`OPEN_TIMEOUT`] bounds the whole
//! open.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use rnic_driver::{Device, Location};

use crate::ffi::{errno_of, Errno};

/// The environment variable listing vfio-user sockets, colon-separated.
pub const VFIO_USER_ENV: &str = "RNIC_VFIO_USER";

/// Where the kernel lists PCI functions (a function's lock file and sysfs directory
/// live below it).
const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// How long opening a function may take before the function counts as busy: enough
/// for a reset and the command queue's start (milliseconds), short enough that
/// `ibv_devices` does not hang behind a function another process holds.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(3);

/// The functions of this machine, in device-number order: the sockets of
/// `RNIC_VFIO_USER` if it is set (even empty), else every rnic PCI function.
pub(crate) fn locations() -> Vec<Location> {
    match std::env::var_os(VFIO_USER_ENV) {
        Some(list) => parse_vfio_user(&list),
        None => Location::all_pci().unwrap_or_else(|e| {
            log::debug!("no PCI functions: {e}");
            Vec::new()
        }),
    }
}

/// The sockets of an `RNIC_VFIO_USER` value; empty entries (`a.sock::b.sock`, a
/// trailing colon) are skipped.
pub(crate) fn parse_vfio_user(list: &OsStr) -> Vec<Location> {
    list.as_bytes()
        .split(|&b| b == b':')
        .filter(|p| !p.is_empty())
        .map(|p| Location::VfioUser(PathBuf::from(OsStr::from_bytes(p))))
        .collect()
}

/// The sysfs directory of a function in a VM (what `ibv_device::ibdev_path` holds;
/// none on the host).
pub(crate) fn sysfs_dir(location: &Location) -> Option<PathBuf> {
    match location {
        Location::Pci(bdf) => Some(PathBuf::from(SYSFS_PCI_DEVICES).join(bdf)),
        Location::VfioUser(_) => None,
    }
}

/// A function this process has taken: the opened device, and the lock that keeps other
/// processes off it for as long as it lives.
pub(crate) struct Claim {
    /// The opened (reset, command queue running) function.
    pub device: Device,
    /// The function's lock in a VM (none on the host).
    pub lock: Option<File>,
}

/// Takes the function at `location` (device `name`, for messages): locks it (in a VM)
/// and opens it, within [`OPEN_TIMEOUT`].
pub(crate) fn claim(location: &Location, name: &str) -> Result<Claim, Errno> {
    let lock = match sysfs_dir(location) {
        Some(dir) => Some(lock(&dir.join("config"), location, name)?),
        None => None,
    };
    let device = open_within(location, name, OPEN_TIMEOUT)?;
    Ok(Claim { device, lock })
}

/// Takes the advisory lock on `path`, without waiting.
fn lock(path: &std::path::Path, location: &Location, name: &str) -> Result<File, Errno> {
    let file = File::open(path).map_err(|e| {
        log::warn!("{name} ({location}): cannot open {}: {e}", path.display());
        e.raw_os_error().unwrap_or(libc::EIO)
    })?;
    // SAFETY: flock on a file descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            log::warn!("{name} ({location}) is in use by another process");
            return Err(libc::EBUSY);
        }
        log::warn!("{name} ({location}): cannot lock {}: {e}", path.display());
        return Err(e.raw_os_error().unwrap_or(libc::EIO));
    }
    Ok(file)
}

/// Opens the function in a thread of its own and waits up to `timeout` for it. A
/// thread left behind by a timeout finishes on its own: when it gets the function at
/// last, it finds nobody waiting and closes it again.
fn open_within(location: &Location, name: &str, timeout: Duration) -> Result<Device, Errno> {
    let (tx, rx) = mpsc::channel();
    let loc = location.clone();
    let thread = std::thread::Builder::new()
        .name(format!("{name}-open"))
        .spawn(move || {
            let _ = tx.send(loc.open());
        })
        .map_err(|e| {
            log::warn!("{name}: cannot start a thread to open {location}: {e}");
            libc::EAGAIN
        })?;
    let answer = rx.recv_timeout(timeout);
    if answer.is_ok() {
        // The thread has answered: wait for its end too, so that what it frees on its
        // way out (its clones, its thread cache) is freed before this returns and the
        // application registers memory (see heap_quiet).
        let _ = thread.join();
    }
    match answer {
        Ok(Ok(device)) => Ok(device),
        Ok(Err(rnic_driver::Error::Held { .. })) => {
            log::warn!(
                "{name}: {location} is held by another client (rnicd serves one client per function): is another process using it?"
            );
            Err(libc::EBUSY)
        }
        Ok(Err(e)) => {
            log::warn!("{name}: cannot open {location}: {e}");
            Err(errno_of(&e))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            log::warn!(
                "{name}: {location} did not answer within {timeout:?}; rnicd serves one client per function: is another process using it?"
            );
            Err(libc::EBUSY)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            log::error!("{name}: the thread opening {location} died");
            Err(libc::EIO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &str) -> Vec<String> {
        parse_vfio_user(OsStr::new(list))
            .into_iter()
            .map(|l| l.to_string())
            .collect()
    }

    #[test]
    fn the_socket_list_keeps_its_order_and_skips_empty_entries() {
        assert_eq!(
            paths("/a/vf1.sock:/b/vf0.sock"),
            ["vfio-user:/a/vf1.sock", "vfio-user:/b/vf0.sock"]
        );
        assert_eq!(paths(":/a.sock::"), ["vfio-user:/a.sock"]);
        assert!(paths("").is_empty());
    }

    #[test]
    fn only_pci_functions_have_a_sysfs_directory() {
        let pci = Location::Pci("0000:00:03.0".into());
        assert_eq!(
            sysfs_dir(&pci),
            Some(PathBuf::from("/sys/bus/pci/devices/0000:00:03.0"))
        );
        assert_eq!(sysfs_dir(&Location::VfioUser("/a.sock".into())), None);
    }

    #[test]
    fn a_missing_socket_fails_fast_with_enodev() {
        let loc = Location::VfioUser("/nonexistent/rnic.sock".into());
        assert_eq!(claim(&loc, "rnic_0").err(), Some(libc::ENODEV));
    }

    #[test]
    fn a_second_lock_of_one_file_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, b"").unwrap();
        let loc = Location::Pci("test".into());
        let first = lock(&path, &loc, "rnic_0").unwrap();
        assert_eq!(lock(&path, &loc, "rnic_0").err(), Some(libc::EBUSY));
        drop(first);
        assert!(lock(&path, &loc, "rnic_0").is_ok());
    }

    #[test]
    fn a_function_that_never_answers_is_busy() {
        // A socket that listens but never accepts, as rnicd's does while it serves
        // another client.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let loc = Location::VfioUser(path);
        let r = open_within(&loc, "rnic_0", Duration::from_millis(200));
        assert_eq!(r.err(), Some(libc::EBUSY));
    }
}
