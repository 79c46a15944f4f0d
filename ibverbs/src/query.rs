//! The queries of an open context: device, port, GID and P_Key tables, each as its
//! exported function and, where verbs.h routes it there, as an op of the
//! `verbs_context` (`query_device_ex`, `query_port`) or of the legacy `ibv_context_ops`.
//!
//! Device attributes come from a fresh QUERY_DEVICE each time and the port state from
//! the function's `DEVICE_STATUS`, so a change made by the PF (`rnic-admin`: MAC, GID,
//! link) shows at once, as it does under rdma-core.

use std::ffi::{c_int, c_uint};

use crate::abi::*;
use crate::attr::{self, GID_TABLE_LEN, PORT_NUM};
use crate::context::RnicContext;
use crate::ffi::{errno_result, invalid, minus_one, unsupported, write_out, write_prefix, Errno};

/// Checks a port number: rnic functions have port 1 only.
fn check_port(port: u32) -> Result<(), Errno> {
    if port == u32::from(PORT_NUM) {
        Ok(())
    } else {
        Err(invalid(format_args!(
            "port {port} (rnic functions have port {PORT_NUM})"
        )))
    }
}

/// The device attributes of the context.
fn device_attr(ctx: *mut ibv_context) -> Result<ibv_device_attr_ex, Errno> {
    let rctx = RnicContext::lookup(ctx)?;
    let q = rctx.query_device()?;
    Ok(attr::device_attr(&q, &rctx.pci()))
}

/// The port's attributes.
fn port_attr(ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr, Errno> {
    let rctx = RnicContext::lookup(ctx)?;
    check_port(port.into())?;
    let q = rctx.query_device()?;
    Ok(attr::port_attr(&q, rctx.link_up()?))
}

/// GID table entry `index` of `port`.
fn gid_entry(ctx: *mut ibv_context, port: u32, index: u64) -> Result<ibv_gid_entry, Errno> {
    let rctx = RnicContext::lookup(ctx)?;
    check_port(port)?;
    let q = rctx.query_device()?;
    usize::try_from(index)
        .ok()
        .and_then(|i| attr::gid_entry(&q, PORT_NUM, i))
        .ok_or_else(|| {
            invalid(format_args!(
                "GID index {index} (the table has {GID_TABLE_LEN})"
            ))
        })
}

/// `ibv_query_device`: 0 or an errno.
///
/// # Safety
///
/// `attr` is NULL or points to a writable `struct ibv_device_attr`.
pub(crate) unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    errno_result("ibv_query_device", || {
        let a = device_attr(ctx)?;
        // SAFETY: the caller's promise.
        unsafe { write_out(attr, a.orig_attr, "device_attr") }
    })
}

/// The same, as `ibv_context_ops::_compat_query_device`.
pub(crate) unsafe extern "C" fn compat_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { ibv_query_device(ctx, attr) }
}

/// `verbs_context::query_device_ex`, behind verbs.h's `ibv_query_device_ex`: fills
/// `attr_size` bytes (at least a `struct ibv_device_attr`), 0 or an errno.
pub(crate) unsafe extern "C" fn query_device_ex_op(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    errno_result("ibv_query_device_ex", || {
        // SAFETY: `input` is NULL or points to the caller's input structure.
        if !input.is_null() && unsafe { input.read_unaligned() }.comp_mask != 0 {
            return Err(invalid(format_args!("ibv_query_device_ex input comp_mask")));
        }
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return Err(invalid(format_args!(
                "ibv_query_device_ex of {attr_size} bytes at {attr:p}"
            )));
        }
        let a = device_attr(ctx)?;
        // SAFETY: `attr` is writable for `attr_size` bytes (the op's contract).
        unsafe { write_prefix(attr.cast(), attr_size, &a) };
        Ok(())
    })
}

/// `ibv_query_port` (the exported function, which verbs.h's inline `ibv_query_port`
/// only calls for a context without `verbs_context::query_port`): fills a
/// `struct _compat_ibv_port_attr`, 0 or an errno.
///
/// # Safety
///
/// `attr` is NULL or points to [`COMPAT_PORT_ATTR_LEN`] writable bytes.
pub(crate) unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { query_port_op(ctx, port, attr, COMPAT_PORT_ATTR_LEN) }
}

/// The same, as `ibv_context_ops::_compat_query_port`.
pub(crate) unsafe extern "C" fn compat_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { ibv_query_port(ctx, port, attr) }
}

/// `verbs_context::query_port`, what verbs.h's `ibv_query_port` calls: fills `len`
/// bytes of `struct ibv_port_attr`, 0 or an errno.
pub(crate) unsafe extern "C" fn query_port_op(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    errno_result("ibv_query_port", || {
        if attr.is_null() {
            return Err(invalid(format_args!("port_attr is NULL")));
        }
        let a = port_attr(ctx, port)?;
        // SAFETY: `attr` is writable for `len` bytes (the op's contract).
        unsafe { write_prefix(attr.cast(), len, &a) };
        Ok(())
    })
}

/// `ibv_query_gid`: GID `index` of the port, 0 or -1 with `errno`.
///
/// # Safety
///
/// `gid` is NULL or points to a writable `union ibv_gid`.
pub(crate) unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    minus_one("ibv_query_gid", || {
        let index = u64::try_from(index).map_err(|_| invalid(format_args!("GID index {index}")))?;
        let e = gid_entry(ctx, port.into(), index)?;
        // SAFETY: the caller's promise.
        unsafe { write_out(gid, e.gid, "gid") }.map(|()| 0)
    })
}

/// `_ibv_query_gid_ex` (verbs.h's `ibv_query_gid_ex`): one `struct ibv_gid_entry` of
/// `entry_size` bytes, 0 or an errno. No flags are defined (`EOPNOTSUPP` for any).
///
/// # Safety
///
/// `entry` is NULL or writable for `entry_size` bytes.
pub(crate) unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    errno_result("ibv_query_gid_ex", || {
        if flags != 0 {
            return Err(unsupported("ibv_query_gid_ex flags"));
        }
        if entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return Err(invalid(format_args!(
                "gid entry of {entry_size} bytes at {entry:p}"
            )));
        }
        let e = gid_entry(ctx, port, index.into())?;
        // SAFETY: the caller's promise.
        unsafe { write_prefix(entry.cast(), entry_size, &e) };
        Ok(())
    })
}

/// `_ibv_query_gid_table` (verbs.h's `ibv_query_gid_table`): every GID of every port
/// into `entries` (`max_entries` of `entry_size` bytes); the count, or a negative
/// errno (`-EINVAL` when they do not fit).
///
/// # Safety
///
/// `entries` is NULL or writable for `max_entries * entry_size` bytes.
pub(crate) unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = errno_result("ibv_query_gid_table", || {
        if flags != 0 {
            return Err(unsupported("ibv_query_gid_table flags"));
        }
        if entry_size < size_of::<ibv_gid_entry>() {
            return Err(invalid(format_args!("gid entries of {entry_size} bytes")));
        }
        if max_entries < GID_TABLE_LEN || entries.is_null() {
            return Err(invalid(format_args!(
                "room for {max_entries} GID entries at {entries:p}, the table has {GID_TABLE_LEN}"
            )));
        }
        let rctx = RnicContext::lookup(ctx)?;
        let q = rctx.query_device()?;
        for i in 0..GID_TABLE_LEN {
            let e = attr::gid_entry(&q, PORT_NUM, i).expect("within the table");
            // SAFETY: entry i of `max_entries` >= GID_TABLE_LEN, each `entry_size` bytes
            // (the caller's promise).
            unsafe { write_prefix(entries.cast::<u8>().add(i * entry_size), entry_size, &e) };
        }
        Ok(())
    });
    if r == 0 {
        GID_TABLE_LEN as isize
    } else {
        -(r as isize)
    }
}

/// `ibv_query_gid_type` (libibverbs-private, used by `ibv_devinfo`): whether GID `index`
/// is RoCE v2, 0 or -1 with `errno`.
///
/// # Safety
///
/// `gid_type` is NULL or points to a writable `enum ibv_gid_type_sysfs`.
pub(crate) unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: c_uint,
    gid_type: *mut ibv_gid_type_sysfs,
) -> c_int {
    minus_one("ibv_query_gid_type", || {
        let e = gid_entry(ctx, port.into(), index.into())?;
        let t = match e.gid_type {
            IBV_GID_TYPE_ROCE_V2 => IBV_GID_TYPE_SYSFS_ROCE_V2,
            _ => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
        };
        // SAFETY: the caller's promise.
        unsafe { write_out(gid_type, t, "gid_type") }.map(|()| 0)
    })
}

/// `ibv_query_pkey`: P_Key `index` (big-endian), 0 or -1 with `errno`. The table has
/// the default P_Key only.
///
/// # Safety
///
/// `pkey` is NULL or points to a writable `__be16`.
pub(crate) unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    minus_one("ibv_query_pkey", || {
        RnicContext::lookup(ctx)?;
        check_port(port.into())?;
        if index != 0 {
            return Err(invalid(format_args!(
                "P_Key index {index} (the table has 1)"
            )));
        }
        // SAFETY: the caller's promise.
        unsafe { write_out(pkey, attr::DEFAULT_PKEY.to_be(), "pkey") }.map(|()| 0)
    })
}

/// `ibv_get_pkey_index`: the index of P_Key `pkey` (big-endian), or -1 with `errno`.
///
/// # Safety
///
/// Any arguments.
pub(crate) unsafe extern "C" fn ibv_get_pkey_index(
    ctx: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    minus_one("ibv_get_pkey_index", || {
        RnicContext::lookup(ctx)?;
        check_port(port.into())?;
        if u16::from_be(pkey) == attr::DEFAULT_PKEY {
            Ok(0)
        } else {
            Err(invalid(format_args!(
                "P_Key {:#06x} is not in the table",
                u16::from_be(pkey)
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_port_1_exists() {
        assert!(check_port(1).is_ok());
        assert_eq!(check_port(0), Err(libc::EINVAL));
        assert_eq!(check_port(2), Err(libc::EINVAL));
    }

    #[test]
    fn queries_of_what_is_not_a_context_fail_their_way() {
        let bad = 0x7000 as *mut ibv_context;
        let mut dattr = ibv_device_attr::zeroed();
        let mut pattr = ibv_port_attr::zeroed();
        let mut gid = ibv_gid { raw: [0; 16] };
        let mut entry = ibv_gid_entry::zeroed();
        let mut pkey = 0u16;
        let mut t = 0;
        // SAFETY: every output pointer is valid; the context is never dereferenced.
        unsafe {
            assert_eq!(ibv_query_device(bad, &mut dattr), libc::EINVAL);
            assert_eq!(ibv_query_port(bad, 1, &mut pattr), libc::EINVAL);
            assert_eq!(
                query_port_op(bad, 1, std::ptr::null_mut(), 56),
                libc::EINVAL
            );
            assert_eq!(ibv_query_gid(bad, 1, 0, &mut gid), -1);
            assert_eq!(ibv_query_gid(bad, 1, -1, &mut gid), -1);
            assert_eq!(
                _ibv_query_gid_ex(bad, 1, 0, &mut entry, 0, 32),
                libc::EINVAL
            );
            assert_eq!(
                _ibv_query_gid_ex(bad, 1, 0, &mut entry, 1, 32),
                libc::EOPNOTSUPP
            );
            assert_eq!(
                _ibv_query_gid_table(bad, &mut entry, 1, 0, 32),
                -(libc::EINVAL as isize)
            );
            assert_eq!(ibv_query_gid_type(bad, 1, 0, &mut t), -1);
            assert_eq!(ibv_query_pkey(bad, 1, 0, &mut pkey), -1);
            assert_eq!(ibv_get_pkey_index(bad, 1, 0xffff), -1);
            let input = ibv_query_device_ex_input { comp_mask: 1 };
            let mut ex = ibv_device_attr_ex::zeroed();
            assert_eq!(
                query_device_ex_op(bad, &input, &mut ex, size_of::<ibv_device_attr_ex>()),
                libc::EINVAL
            );
        }
    }
}
