//! What other rdma-core libraries import from libibverbs, so that programs linked with
//! them load: the provider interface (`IBVERBS_PRIVATE_34`: `verbs_register_driver_34`,
//! `ibv_cmd_*`, ...), which Debian's libmlx5, libefa and libhns import and perftest
//! links, and the rest of it that Debian's libibverbs exports; librdmacm's
//! kernel-structure helpers; and verbs rnic lacks (multicast, ECE, L2 address resolution,
//! resizing CQs).
//!
//! This library is libibverbs and rnic's provider in one, with no kernel and no provider
//! plug-ins, so none of the provider interface can do anything. The functions exist
//! because a program starts only when every symbol it (or a library it loads) imports
//! does (Debian links with `BIND_NOW`); called, they fail with `EOPNOTSUPP` and one line
//! on stderr. They are reached only through another provider's own objects, which never
//! exist here: mlx5dv_*, efadv_* and hnsdv_* calls on an rnic device fail in those
//! libraries before they get here.
//!
//! Exceptions: `verbs_register_driver_34`, which each provider library calls from its
//! constructor when it is loaded, is accepted and ignored (a line on stderr at every
//! perftest start would say nothing a user can act on; `RNIC_LOG=debug` shows it); and
//! `verbs_allow_disassociate_destroy`, a `bool` data object (see exports.rs).

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::ffi::{guard, set_errno, unsupported};

/// Fails a provider-interface call: `EOPNOTSUPP`, with the line on stderr.
fn provider_only(name: &str) -> c_int {
    unsupported(&format!(
        "{name} (the provider interface: rnic's libibverbs has no provider plug-ins)"
    ))
}

/// Defines provider-interface functions that return an errno: `EOPNOTSUPP`. Their
/// arguments are ignored, so none are declared (the C calling convention lets a callee
/// ignore what it was passed).
macro_rules! failing {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: `EOPNOTSUPP` (see the module's documentation).")]
        pub(crate) unsafe extern "C" fn $name() -> c_int {
            guard(stringify!($name), libc::EOPNOTSUPP, || provider_only(stringify!($name)))
        }
    )*};
}

failing! {
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_cq_ex2,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
}

/// Defines provider-interface functions that return a pointer: NULL, `errno`
/// `EOPNOTSUPP`.
macro_rules! failing_null {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: NULL, `EOPNOTSUPP` (see the module's documentation).")]
        pub(crate) unsafe extern "C" fn $name() -> *mut c_void {
            guard(stringify!($name), std::ptr::null_mut(), || {
                set_errno(provider_only(stringify!($name)));
                std::ptr::null_mut()
            })
        }
    )*};
}

failing_null! {
    _verbs_init_and_alloc_context,
    verbs_open_device,
}

/// Defines provider-interface functions that return nothing: they say so and do nothing.
macro_rules! failing_void {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: does nothing (see the module's documentation).")]
        pub(crate) unsafe extern "C" fn $name() {
            guard(stringify!($name), (), || {
                provider_only(stringify!($name));
            })
        }
    )*};
}

failing_void! {
    verbs_init_cq,
    verbs_set_ops,
    verbs_uninit_context,
}

/// `verbs_register_driver_34`: a provider library registering itself when it is loaded.
/// Ignored: this library drives rnic functions itself and loads no providers.
///
/// # Safety
///
/// Any pointer; it is not read.
pub(crate) unsafe extern "C" fn verbs_register_driver_34(ops: *const c_void) {
    guard("verbs_register_driver_34", (), || {
        crate::ffi::init_logging();
        log::debug!("a provider library registered its driver ops {ops:p}; ignored");
    })
}

/// `__ioctl_final_num_attrs`: how many attributes an ioctl command a provider builds
/// holds, its own and those of the buffers linked to it. Only the provider interface
/// builds such commands (for `execute_ioctl`, which fails): the line on stderr, and the
/// command's own count (`link` is not read).
///
/// # Safety
///
/// Any pointer; it is not read.
pub(crate) unsafe extern "C" fn __ioctl_final_num_attrs(
    num_attrs: u32,
    _link: *const c_void,
) -> u32 {
    guard("__ioctl_final_num_attrs", num_attrs, || {
        provider_only("__ioctl_final_num_attrs");
        num_attrs
    })
}

/// `ibv_read_ibdev_sysfs_file`: a file of a provider's device below
/// /sys/class/infiniband (printf-style name; the variable arguments are not read). rnic
/// has no provider devices there: -1, `errno` `EOPNOTSUPP`.
///
/// # Safety
///
/// Any pointers; they are not used.
pub(crate) unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
    _buf: *mut std::ffi::c_char,
    _size: usize,
    _sysfs_dev: *mut c_void,
    _fnfmt: *const std::ffi::c_char,
) -> c_int {
    guard("ibv_read_ibdev_sysfs_file", -1, || {
        set_errno(provider_only("ibv_read_ibdev_sysfs_file"));
        -1
    })
}

/// `__verbs_log`: a provider's log line (printf-style; the variable arguments are not
/// read). Only other providers call it, on their own objects, which never exist here.
///
/// # Safety
///
/// `fmt` is NULL or a NUL-terminated string.
pub(crate) unsafe extern "C" fn __verbs_log(
    _ctx: *mut c_void,
    _level: u32,
    fmt: *const std::ffi::c_char,
) {
    guard("__verbs_log", (), || {
        if !fmt.is_null() {
            // SAFETY: a NUL-terminated string by the caller's promise.
            let s = unsafe { std::ffi::CStr::from_ptr(fmt) };
            log::debug!("provider log: {}", s.to_string_lossy().trim_end());
        }
    })
}

/// `ibv_copy_qp_attr_from_kern`, `ibv_copy_ah_attr_from_kern`: librdmacm's conversions
/// of attributes the kernel's RDMA CM returns. rnic has no kernel RDMA CM device, so
/// librdmacm never has such attributes for it: the destination is zeroed and the call
/// reported.
///
/// # Safety
///
/// `dst` is NULL or writable for an `ibv_qp_attr`.
pub(crate) unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    _src: *const c_void,
) {
    guard("ibv_copy_qp_attr_from_kern", (), || {
        provider_only("ibv_copy_qp_attr_from_kern");
        if !dst.is_null() {
            // SAFETY: writable by the caller's promise.
            unsafe { dst.write_unaligned(ibv_qp_attr::zeroed()) };
        }
    })
}

/// See [`ibv_copy_qp_attr_from_kern`].
///
/// # Safety
///
/// `dst` is NULL or writable for an `ibv_ah_attr`.
pub(crate) unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    _src: *const c_void,
) {
    guard("ibv_copy_ah_attr_from_kern", (), || {
        provider_only("ibv_copy_ah_attr_from_kern");
        if !dst.is_null() {
            // SAFETY: writable by the caller's promise.
            unsafe { dst.write_unaligned(ibv_ah_attr::zeroed()) };
        }
    })
}

/// `ibv_copy_path_rec_from_kern`: as [`ibv_copy_qp_attr_from_kern`]; the destination
/// (`struct ibv_sa_path_rec`, not mirrored) is left alone.
///
/// # Safety
///
/// Any pointers; they are not used.
pub(crate) unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    _dst: *mut c_void,
    _src: *const c_void,
) {
    guard("ibv_copy_path_rec_from_kern", (), || {
        provider_only("ibv_copy_path_rec_from_kern");
    })
}

/// `ibv_copy_path_rec_to_kern`: the other way of [`ibv_copy_path_rec_from_kern`]; the
/// destination (the kernel's `struct ib_user_path_rec`) is left alone.
///
/// # Safety
///
/// Any pointers; they are not used.
pub(crate) unsafe extern "C" fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *const c_void) {
    guard("ibv_copy_path_rec_to_kern", (), || {
        provider_only("ibv_copy_path_rec_to_kern");
    })
}

/// `ibv_query_ece`: no enhanced connection establishment options; `EOPNOTSUPP`, as
/// rdma-core answers for a provider without them.
///
/// # Safety
///
/// Any pointers.
pub(crate) unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    guard("ibv_query_ece", libc::EOPNOTSUPP, || {
        unsupported("enhanced connection establishment (ibv_query_ece)")
    })
}

/// `ibv_set_ece`: as [`ibv_query_ece`].
///
/// # Safety
///
/// Any pointers.
pub(crate) unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    guard("ibv_set_ece", libc::EOPNOTSUPP, || {
        unsupported("enhanced connection establishment (ibv_set_ece)")
    })
}

/// `ibv_resolve_eth_l2_from_gid`: the Ethernet address behind a GID, which providers
/// of Ethernet devices ask the kernel's neighbour table for. rnic's functions address by
/// IP themselves (ARP on its Ethernet port); `EOPNOTSUPP`.
///
/// # Safety
///
/// Any pointers.
pub(crate) unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    guard("ibv_resolve_eth_l2_from_gid", libc::EOPNOTSUPP, || {
        unsupported("Ethernet address resolution (ibv_resolve_eth_l2_from_gid)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_functions_fail_with_eopnotsupp() {
        // SAFETY: the functions read no arguments.
        unsafe {
            assert_eq!(ibv_cmd_create_qp_ex(), libc::EOPNOTSUPP);
            assert_eq!(execute_ioctl(), libc::EOPNOTSUPP);
            assert_eq!(ibv_cmd_post_send(), libc::EOPNOTSUPP);
            assert_eq!(__ioctl_final_num_attrs(3, std::ptr::null()), 3);
            let mut buf = [0 as std::ffi::c_char; 8];
            let r =
                ibv_read_ibdev_sysfs_file(buf.as_mut_ptr(), 8, std::ptr::null_mut(), c"x".as_ptr());
            assert_eq!(r, -1);
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
            ibv_copy_path_rec_to_kern(std::ptr::null_mut(), std::ptr::null());
            assert!(verbs_open_device().is_null());
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
            verbs_set_ops();
            verbs_register_driver_34(std::ptr::null());
            __verbs_log(std::ptr::null_mut(), 0, c"x %d".as_ptr());
            let mut a = ibv_qp_attr::zeroed();
            a.qkey = 5;
            ibv_copy_qp_attr_from_kern(&mut a, std::ptr::null());
            assert_eq!(a.qkey, 0);
            assert_eq!(
                ibv_query_ece(std::ptr::null_mut(), std::ptr::null_mut()),
                libc::EOPNOTSUPP
            );
        }
    }
}
