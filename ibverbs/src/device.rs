//! The devices: `ibv_get_device_list` and what an `ibv_device *` leads to.
//!
//! Each function found ([`crate::discover`]) is an [`RnicDevice`], made once per process
//! and never freed, so a device pointer stays valid even after its list is freed (rdma-
//! core only promises that for opened devices; being kinder costs a few hundred bytes
//! per function). Listing touches no function. The first question only the function can
//! answer (`ibv_get_device_guid`) opens it, and the opened function waits, idle, for an
//! `ibv_open_device` until the last list that holds the device is freed. So
//! `ibv_devices` opens each function once, and `ibv_devinfo` opens each once too.
//!
//! C hands back pointers it got from here; they are recognised by address among the
//! devices made ([`RnicDevice::from_ibv`]), never dereferenced, so a stale or garbage
//! pointer is `EINVAL`, not a crash.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int};
use std::sync::{Mutex, MutexGuard};

use rnic_abi::cmd::QueryDeviceResp;
use rnic_driver::Location;

use crate::abi::*;
use crate::attr;
use crate::discover::{self, Claim};
use crate::ffi::{errno_of, guard, invalid, minus_one, null_on_err, set_errno, Errno};

/// Devices are named this and their number: `rnic_0`, `rnic_1`, ...
pub const NAME_PREFIX: &str = "rnic_";

/// One rnic function as libibverbs shows it. `repr(C)` with the `ibv_device` first: C
/// holds a pointer to that field.
#[repr(C)]
pub(crate) struct RnicDevice {
    ibv: UnsafeCell<ibv_device>,
    index: u32,
    name: String,
    location: Location,
    state: Mutex<DeviceState>,
}

// SAFETY: `ibv` is written only before the device is shared; afterwards C reads it (a
// C program that writes it gets what it asked for; the cell makes that sound for Rust,
// which never reads it again). Everything else is immutable or behind the mutex.
unsafe impl Sync for RnicDevice {}

/// What a device knows of its function, and who holds it.
#[derive(Default)]
struct DeviceState {
    /// The function's QUERY_DEVICE answer, from the last time it was opened or queried;
    /// forgotten when a new list is made, unless the function is held.
    identity: Option<QueryDeviceResp>,
    /// The function, opened to answer a question and kept for `ibv_open_device`.
    idle: Option<Claim>,
    /// Whether a context of this process has the function.
    open: bool,
    /// How many unfreed device lists hold this device.
    lists: usize,
}

/// Every device made, in order of making.
static DEVICES: Mutex<Vec<&'static RnicDevice>> = Mutex::new(Vec::new());

/// The unfreed lists.
static LISTS: Mutex<Vec<DeviceList>> = Mutex::new(Vec::new());

/// A list `ibv_get_device_list` returned: the NULL-terminated array C holds, and the
/// devices in it.
struct DeviceList {
    array: Box<[*mut ibv_device]>,
    devices: Vec<&'static RnicDevice>,
}

// SAFETY: the array holds pointers to `RnicDevice`s, which are Sync and live forever;
// Rust only compares and frees the array, under the LISTS mutex.
unsafe impl Send for DeviceList {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RnicDevice {
    fn new(index: u32, location: Location) -> Self {
        let name = format!("{NAME_PREFIX}{index}");
        let mut ibv = ibv_device::zeroed();
        ibv.node_type = IBV_NODE_CA;
        ibv.transport_type = IBV_TRANSPORT_IB;
        attr::copy_c_string(&mut ibv.name, name.as_bytes());
        attr::copy_c_string(&mut ibv.dev_name, name.as_bytes());
        match discover::sysfs_dir(&location) {
            Some(dir) => {
                let dir = dir.as_os_str().as_encoded_bytes();
                attr::copy_c_string(&mut ibv.dev_path, dir);
                attr::copy_c_string(&mut ibv.ibdev_path, dir);
            }
            // No sysfs directory on the host: dev_path names the socket for whoever
            // looks, ibdev_path stays empty so no sysfs file is found below it.
            None => {
                if let Location::VfioUser(path) = &location {
                    attr::copy_c_string(&mut ibv.dev_path, path.as_os_str().as_encoded_bytes());
                }
            }
        }
        Self {
            ibv: UnsafeCell::new(ibv),
            index,
            name,
            location,
            state: Mutex::new(DeviceState::default()),
        }
    }

    /// The device `ptr` points to, if it is one of ours.
    pub(crate) fn from_ibv(ptr: *const ibv_device) -> Result<&'static RnicDevice, Errno> {
        if ptr.is_null() {
            return Err(invalid(format_args!("device is NULL")));
        }
        lock(&DEVICES)
            .iter()
            .copied()
            .find(|d| std::ptr::eq(d.as_ibv(), ptr))
            .ok_or_else(|| invalid(format_args!("{ptr:p} is not a device of this library")))
    }

    /// The `ibv_device` C sees.
    pub(crate) fn as_ibv(&self) -> *mut ibv_device {
        self.ibv.get()
    }

    /// `rnic_<n>`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The device number (`n` of `rnic_<n>`).
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Where the function is.
    pub(crate) fn location(&self) -> &Location {
        &self.location
    }

    fn state(&self) -> MutexGuard<'_, DeviceState> {
        lock(&self.state)
    }

    /// The function's QUERY_DEVICE answer: the one remembered, or the function's own
    /// (opening it, and keeping it open for `ibv_open_device` while a list holds the
    /// device).
    pub(crate) fn identity(&self) -> Result<QueryDeviceResp, Errno> {
        let mut st = self.state();
        if let Some(identity) = st.identity {
            return Ok(identity);
        }
        if st.open {
            // A context of ours holds the function and told us its identity when it
            // opened; only a racing forget gets here.
            return Err(libc::EBUSY);
        }
        let claim = match st.idle.take() {
            Some(claim) => claim,
            None => discover::claim(&self.location, &self.name)?,
        };
        let identity = claim.device.query_device().map_err(|e| {
            log::warn!(
                "{}: QUERY_DEVICE on {} failed: {e}",
                self.name,
                self.location
            );
            errno_of(&e)
        })?;
        st.identity = Some(identity);
        if st.lists > 0 {
            st.idle = Some(claim);
        }
        Ok(identity)
    }

    /// Remembers the function's latest QUERY_DEVICE answer.
    pub(crate) fn remember(&self, identity: QueryDeviceResp) {
        self.state().identity = Some(identity);
    }

    /// Takes the function for the first context on it (the others share it, see
    /// `context.rs`): the idle one, or freshly opened. `EBUSY` while the last context
    /// that had it is still being closed.
    pub(crate) fn take(&self) -> Result<Claim, Errno> {
        let mut st = self.state();
        if st.open {
            log::warn!(
                "{} is still held by a context being closed in this process",
                self.name
            );
            return Err(libc::EBUSY);
        }
        let claim = match st.idle.take() {
            Some(claim) => claim,
            None => discover::claim(&self.location, &self.name)?,
        };
        st.open = true;
        Ok(claim)
    }

    /// The context that took the function is gone (and closed it).
    pub(crate) fn give_back(&self) {
        self.state().open = false;
    }
}

/// The devices of `locations`, made where new: device `n` is `locations[n]`.
fn devices_at(locations: Vec<Location>) -> Vec<&'static RnicDevice> {
    let mut all = lock(&DEVICES);
    locations
        .into_iter()
        .enumerate()
        .map(|(i, location)| {
            let index = i as u32;
            let key = location.to_string();
            if let Some(d) = all
                .iter()
                .find(|d| d.index == index && d.location.to_string() == key)
            {
                return *d;
            }
            let d: &'static RnicDevice = Box::leak(Box::new(RnicDevice::new(index, location)));
            all.push(d);
            d
        })
        .collect()
}

/// Makes a device list of `locations`: the array C gets, registered until it is freed.
fn make_list(locations: Vec<Location>) -> (*mut *mut ibv_device, usize) {
    let devices = devices_at(locations);
    for d in &devices {
        let mut st = d.state();
        st.lists += 1;
        // A new list asks afresh (the PF may have changed the MAC), unless the function
        // is held and its identity is current.
        if !st.open && st.idle.is_none() {
            st.identity = None;
        }
    }
    let mut array: Box<[*mut ibv_device]> = devices
        .iter()
        .map(|d| d.as_ibv())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect();
    let ptr = array.as_mut_ptr();
    let n = devices.len();
    lock(&LISTS).push(DeviceList { array, devices });
    (ptr, n)
}

/// Frees a list from [`make_list`]: the devices in no other list close an idle function.
fn free_list(ptr: *mut *mut ibv_device) -> Result<(), Errno> {
    let list = {
        let mut lists = lock(&LISTS);
        let i = lists
            .iter()
            .position(|l| std::ptr::eq(l.array.as_ptr(), ptr))
            .ok_or_else(|| invalid(format_args!("{ptr:p} is not a device list of this library")))?;
        lists.swap_remove(i)
    };
    for d in list.devices {
        let mut st = d.state();
        st.lists -= 1;
        if st.lists == 0 {
            // Closing the function lets other processes have it.
            st.idle = None;
        }
    }
    Ok(())
}

/// `ibv_get_device_list`: every rnic function, as a NULL-terminated array (`*num`, if
/// `num` is not NULL, gets the count).
///
/// # Safety
///
/// `num` is NULL or points to a writable `int`.
pub(crate) unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    null_on_err("ibv_get_device_list", || {
        let (list, n) = make_list(discover::locations());
        if !num.is_null() {
            // SAFETY: non-null, and writable by the caller's promise.
            unsafe { num.write_unaligned(n as c_int) };
        }
        Ok(list)
    })
}

/// `ibv_free_device_list`.
///
/// # Safety
///
/// Any pointer; one that is not an unfreed list of this library is ignored.
pub(crate) unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard("ibv_free_device_list", (), || {
        if !list.is_null() {
            let _ = free_list(list);
        }
    })
}

/// `ibv_get_device_name`: `rnic_<n>`, or NULL (`EINVAL`) for a pointer that is not a
/// device.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    null_on_err("ibv_get_device_name", || {
        let d = RnicDevice::from_ibv(device)?;
        Ok(d.as_ibv()
            .wrapping_byte_add(std::mem::offset_of!(ibv_device, name)) as *mut c_char)
    })
}

/// `ibv_get_device_guid`: the node GUID (big-endian), or 0 with `errno` set when the
/// function cannot be asked.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard("ibv_get_device_guid", 0, || {
        match RnicDevice::from_ibv(device).and_then(RnicDevice::identity) {
            Ok(identity) => attr::guid_be64(attr::node_guid(identity.mac)),
            Err(e) => {
                set_errno(e);
                0
            }
        }
    })
}

/// `ibv_get_device_index`: `n` of `rnic_<n>`, or -1.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    minus_one("ibv_get_device_index", || {
        RnicDevice::from_ibv(device).map(|d| d.index() as c_int)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn sockets(names: &[&str]) -> Vec<Location> {
        names
            .iter()
            .map(|n| Location::VfioUser(format!("/nonexistent/{n}").into()))
            .collect()
    }

    #[test]
    fn lists_name_devices_in_order_and_keep_them_across_lists() {
        let (a, n) = make_list(sockets(&["list-a.sock", "list-b.sock"]));
        assert_eq!(n, 2);
        // SAFETY: the list has n + 1 entries, the last NULL.
        let entries = unsafe { std::slice::from_raw_parts(a, n + 1) }.to_vec();
        assert!(entries[2].is_null());
        let names: Vec<String> = entries[..2]
            .iter()
            .map(|&d| {
                // SAFETY: ibv_get_device_name of our own devices is a NUL-terminated name.
                unsafe { CStr::from_ptr(ibv_get_device_name(d)) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["rnic_0", "rnic_1"]);
        // SAFETY: a device of ours.
        assert_eq!(unsafe { ibv_get_device_index(entries[1]) }, 1);

        let (b, _) = make_list(sockets(&["list-a.sock", "list-b.sock"]));
        // SAFETY: as above.
        let again = unsafe { std::slice::from_raw_parts(b, 3) }.to_vec();
        assert_eq!(
            entries[..2],
            again[..2],
            "the same functions are the same devices"
        );
        free_list(a).unwrap();
        free_list(b).unwrap();
        assert_eq!(free_list(a), Err(libc::EINVAL), "a list is freed once");
        // The devices outlive their lists.
        assert!(RnicDevice::from_ibv(entries[0]).is_ok());
    }

    #[test]
    fn garbage_and_null_are_einval() {
        let garbage = 0x1234 as *mut ibv_device;
        // SAFETY: the functions accept any pointer.
        unsafe {
            assert!(ibv_get_device_name(std::ptr::null_mut()).is_null());
            assert!(ibv_get_device_name(garbage).is_null());
            assert_eq!(ibv_get_device_guid(garbage), 0);
            assert_eq!(*libc::__errno_location(), libc::EINVAL);
            assert_eq!(ibv_get_device_index(garbage), -1);
            ibv_free_device_list(garbage as *mut *mut ibv_device);
            ibv_free_device_list(std::ptr::null_mut());
        }
    }

    #[test]
    fn a_function_that_cannot_be_reached_has_guid_zero() {
        let (list, _) = make_list(sockets(&["guid-gone.sock"]));
        // SAFETY: the list has one device.
        let dev = unsafe { *list };
        // SAFETY: a device of ours.
        assert_eq!(unsafe { ibv_get_device_guid(dev) }, 0);
        // SAFETY: see set_errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::ENODEV);
        free_list(list).unwrap();
    }

    #[test]
    fn host_devices_name_their_socket_and_have_no_sysfs_directory() {
        let d = RnicDevice::new(3, Location::VfioUser("/run/rnic/vf2.sock".into()));
        // SAFETY: fresh, unshared.
        let ibv = unsafe { &*d.as_ibv() };
        let s = |f: &[c_char]| {
            // SAFETY: copy_c_string terminates every field.
            unsafe { CStr::from_ptr(f.as_ptr()) }
                .to_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(s(&ibv.name), "rnic_3");
        assert_eq!(s(&ibv.dev_path), "/run/rnic/vf2.sock");
        assert_eq!(s(&ibv.ibdev_path), "");
        assert_eq!(
            (ibv.node_type, ibv.transport_type),
            (IBV_NODE_CA, IBV_TRANSPORT_IB)
        );
    }
}
