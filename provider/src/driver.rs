//! rdma-core's provider interface, v56.1 (`IBVERBS_PRIVATE_34`): `#[repr(C)]` mirrors of
//! what `libibverbs/driver.h` and `libibverbs/kern-abi.h` declare for providers, and the
//! private libibverbs functions the plug-in calls.
//!
//! Layouts: the compile-time assertions below are derived from the v56.1 headers;
//! tests/layout.rs checks the `ib_uverbs_*` structures against `<rdma/ib_user_verbs.h>`
//! with gcc, and the order of [`verbs_context_ops`] against driver.h's text when the
//! rdma-core git mirror is present.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use rnic_verbs_abi::*;

/// `struct verbs_match_ent`: one entry of a provider's match table (`VERBS_PCI_MATCH`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_match_ent {
    /// Handed back to the provider (unused by rnic).
    pub driver_data: *const c_void,
    /// C's union of `modalias` and `driver_id` (unused for PCI matches).
    pub u: u64,
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// `VERBS_MATCH_*`.
    pub kind: u8,
}

/// `VERBS_MATCH_SENTINEL`: the end of a match table.
pub const VERBS_MATCH_SENTINEL: u8 = 0;
/// `VERBS_MATCH_PCI`.
pub const VERBS_MATCH_PCI: u8 = 1;

/// `struct verbs_sysfs_dev`: libibverbs' description of a uverbs device (opaque here).
#[repr(C)]
pub struct verbs_sysfs_dev {
    _opaque: [u8; 0],
}

/// `struct verbs_device_ops`: what a provider registers.
#[repr(C)]
pub struct verbs_device_ops {
    /// The provider's name.
    pub name: *const c_char,
    /// Lowest uverbs ABI version of the kernel driver it accepts.
    pub match_min_abi_version: u32,
    /// Highest.
    pub match_max_abi_version: u32,
    /// Its devices, ended by a sentinel.
    pub match_table: *const verbs_match_ent,
    /// For static builds only.
    pub static_providers: *const *const verbs_device_ops,
    /// An extra match test.
    pub match_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> bool>,
    /// `ibv_open_device`.
    pub alloc_context:
        Option<unsafe extern "C" fn(*mut ibv_device, c_int, *mut c_void) -> *mut verbs_context>,
    /// `ibv_import_device`.
    pub import_context: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut verbs_context>,
    /// Allocates the provider's device.
    pub alloc_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> *mut verbs_device>,
    /// Frees it.
    pub uninit_device: Option<unsafe extern "C" fn(*mut verbs_device)>,
}

// SAFETY: the table and the strings it points at are immutable statics.
unsafe impl Sync for verbs_device_ops {}
// SAFETY: as above.
unsafe impl Sync for verbs_match_ent {}

/// `struct list_node` of ccan.
#[repr(C)]
pub struct list_node {
    /// Next node.
    pub next: *mut list_node,
    /// Previous node.
    pub prev: *mut list_node,
}

/// `struct verbs_device`: a provider's device; the [`ibv_device`] must be first.
#[repr(C)]
pub struct verbs_device {
    /// What applications see.
    pub device: ibv_device,
    /// Set by libibverbs.
    pub ops: *const verbs_device_ops,
    /// `atomic_int`, libibverbs'.
    pub refcount: c_int,
    /// libibverbs' list.
    pub entry: list_node,
    /// libibverbs' sysfs description.
    pub sysfs: *mut verbs_sysfs_dev,
    /// libibverbs' record of what the kernel supports.
    pub core_support: u64,
}

/// `struct verbs_mr`: an MR as `ibv_cmd_reg_mr` fills it.
#[repr(C)]
pub struct verbs_mr {
    /// What applications see.
    pub ibv_mr: ibv_mr,
    /// `enum ibv_mr_type`.
    pub mr_type: u32,
    /// The access flags.
    pub access: c_int,
}

/// An op slot of [`verbs_context_ops`] the plug-in leaves empty (every slot is one code
/// pointer; the ones rnic fills have their C signature).
pub type Unused = Option<unsafe extern "C" fn()>;

macro_rules! context_ops {
    ($($(#[$attr:meta])* $name:ident : $ty:ty,)*) => {
        /// `struct verbs_context_ops` of v56.1: every op in driver.h's order (the
        /// alphabetical one). `verbs_set_ops` copies the non-null ones.
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct verbs_context_ops {
            $($(#[$attr])* #[doc = concat!("`", stringify!($name), "`.")] pub $name: $ty,)*
        }

        /// The names of [`verbs_context_ops`]' fields, in order (for the layout test).
        pub const CONTEXT_OPS_NAMES: &[&str] = &[$(stringify!($name)),*];

        impl verbs_context_ops {
            /// Every op empty.
            pub const EMPTY: Self = Self { $($name: None,)* };
        }
    };
}

context_ops! {
    advise_mr: Unused,
    alloc_dm: Unused,
    alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
    alloc_null_mr: Unused,
    alloc_parent_domain: Unused,
    alloc_pd: Option<unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd>,
    alloc_td: Unused,
    async_event: Unused,
    attach_counters_point_flow: Unused,
    attach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    close_xrcd: Unused,
    cq_event: Unused,
    create_ah: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah>,
    create_counters: Unused,
    create_cq: Option<
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    >,
    create_cq_ex: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex,
    >,
    create_flow: Unused,
    create_flow_action_esp: Unused,
    create_qp: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp>,
    create_qp_ex: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp,
    >,
    create_rwq_ind_table: Unused,
    create_srq: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq>,
    create_srq_ex: Unused,
    create_wq: Unused,
    dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    dealloc_pd: Option<unsafe extern "C" fn(*mut ibv_pd) -> c_int>,
    dealloc_td: Unused,
    dereg_mr: Option<unsafe extern "C" fn(*mut verbs_mr) -> c_int>,
    destroy_ah: Option<unsafe extern "C" fn(*mut ibv_ah) -> c_int>,
    destroy_counters: Unused,
    destroy_cq: Option<unsafe extern "C" fn(*mut ibv_cq) -> c_int>,
    destroy_flow: Unused,
    destroy_flow_action: Unused,
    destroy_qp: Option<unsafe extern "C" fn(*mut ibv_qp) -> c_int>,
    destroy_rwq_ind_table: Unused,
    destroy_srq: Option<unsafe extern "C" fn(*mut ibv_srq) -> c_int>,
    destroy_wq: Unused,
    detach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    free_context: Option<unsafe extern "C" fn(*mut ibv_context)>,
    free_dm: Unused,
    get_srq_num: Unused,
    import_dm: Unused,
    import_mr: Unused,
    import_pd: Unused,
    modify_cq: Unused,
    modify_flow_action_esp: Unused,
    modify_qp: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int>,
    modify_qp_rate_limit: Unused,
    modify_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int>,
    modify_wq: Unused,
    open_qp: Unused,
    open_xrcd: Unused,
    poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    post_recv: Option<
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    post_send: Option<
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int,
    >,
    post_srq_ops: Unused,
    post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    query_ece: Unused,
    query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int>,
    query_qp: Option<
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    >,
    query_qp_data_in_order: Unused,
    query_rt_values: Unused,
    query_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int>,
    read_counters: Unused,
    reg_dm_mr: Unused,
    reg_dmabuf_mr: Unused,
    reg_mr: Option<
        unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, c_int) -> *mut ibv_mr,
    >,
    req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    rereg_mr: Unused,
    resize_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    set_ece: Unused,
    unimport_dm: Unused,
    unimport_mr: Unused,
    unimport_pd: Unused,
}

/// `struct ib_uverbs_cmd_hdr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_cmd_hdr {
    /// Command number.
    pub command: u32,
    /// Request size in words.
    pub in_words: u16,
    /// Response size in words.
    pub out_words: u16,
}

/// Declares kern-abi.h's command structures (`DECLARE_CMD`: the header, then the kernel's
/// request) over `#[repr(C)]` mirrors of the kernel's request structures.
macro_rules! kabi {
    ($($(#[$attr:meta])* $name:ident { $($field:ident : $ty:ty,)* })*) => {
        $(
            $(#[$attr])*
            #[repr(C, align(8))]
            #[derive(Clone, Copy, Default)]
            pub struct $name {
                $(#[doc = concat!("`", stringify!($field), "`.")] pub $field: $ty,)*
            }
        )*

        /// Every mirrored `ib_uverbs_*` structure: (name, size, [(field, offset, size)]).
        pub fn kabi_layouts() -> Vec<(&'static str, usize, Vec<(&'static str, usize, usize)>)> {
            vec![$((
                stringify!($name),
                size_of::<$name>(),
                vec![$((stringify!($field), offset_of!($name, $field), size_of::<$ty>()),)*],
            ),)*]
        }
    };
}

kabi! {
    /// `struct ib_uverbs_get_context`.
    ib_uverbs_get_context { response: u64, }
    /// `struct ib_uverbs_get_context_resp`.
    ib_uverbs_get_context_resp { async_fd: u32, num_comp_vectors: u32, }
    /// `struct ib_uverbs_query_port`.
    ib_uverbs_query_port { response: u64, port_num: u8, reserved: [u8; 7], }
    /// `struct ib_uverbs_alloc_pd`.
    ib_uverbs_alloc_pd { response: u64, }
    /// `struct ib_uverbs_alloc_mw`.
    ib_uverbs_alloc_mw { response: u64, pd_handle: u32, mw_type: u8, reserved: [u8; 3], }
    /// `struct ib_uverbs_reg_mr`.
    ib_uverbs_reg_mr {
        response: u64, start: u64, length: u64, hca_va: u64, pd_handle: u32,
        access_flags: u32,
    }
    /// `struct ib_uverbs_create_cq`.
    ib_uverbs_create_cq {
        response: u64, user_handle: u64, cqe: u32, comp_vector: u32, comp_channel: i32,
        reserved: u32,
    }
    /// `struct ib_uverbs_create_cq_resp`.
    ib_uverbs_create_cq_resp { cq_handle: u32, cqe: u32, }
    /// `struct ib_uverbs_resize_cq`.
    ib_uverbs_resize_cq { response: u64, cq_handle: u32, cqe: u32, }
    /// `struct ib_uverbs_resize_cq_resp`.
    ib_uverbs_resize_cq_resp { cqe: u32, reserved: u32, }
    /// `struct ib_uverbs_create_qp`.
    ib_uverbs_create_qp {
        response: u64, user_handle: u64, pd_handle: u32, send_cq_handle: u32,
        recv_cq_handle: u32, srq_handle: u32, max_send_wr: u32, max_recv_wr: u32,
        max_send_sge: u32, max_recv_sge: u32, max_inline_data: u32, sq_sig_all: u8,
        qp_type: u8, is_srq: u8, reserved: u8,
    }
    /// `struct ib_uverbs_query_qp`.
    ib_uverbs_query_qp { response: u64, qp_handle: u32, attr_mask: u32, }
    /// `struct ib_uverbs_modify_qp` (the two `ib_uverbs_qp_dest`s as bytes).
    ib_uverbs_modify_qp {
        dest: [u8; 32], alt_dest: [u8; 32], qp_handle: u32, attr_mask: u32, qkey: u32,
        rq_psn: u32, sq_psn: u32, dest_qp_num: u32, qp_access_flags: u32, pkey_index: u16,
        alt_pkey_index: u16, qp_state: u8, cur_qp_state: u8, path_mtu: u8,
        path_mig_state: u8, en_sqd_async_notify: u8, max_rd_atomic: u8,
        max_dest_rd_atomic: u8, min_rnr_timer: u8, port_num: u8, timeout: u8,
        retry_cnt: u8, rnr_retry: u8, alt_port_num: u8, alt_timeout: u8, reserved: [u8; 2],
    }
    /// `struct ib_uverbs_create_srq`.
    ib_uverbs_create_srq {
        response: u64, user_handle: u64, pd_handle: u32, max_wr: u32, max_sge: u32,
        srq_limit: u32,
    }
    /// `struct ib_uverbs_create_srq_resp`.
    ib_uverbs_create_srq_resp { srq_handle: u32, max_wr: u32, max_sge: u32, srqn: u32, }
    /// `struct ib_uverbs_modify_srq`.
    ib_uverbs_modify_srq { srq_handle: u32, attr_mask: u32, max_wr: u32, srq_limit: u32, }
    /// `struct ib_uverbs_query_srq`.
    ib_uverbs_query_srq { response: u64, srq_handle: u32, reserved: u32, }
}

/// `struct ib_uverbs_alloc_pd_resp` (4 bytes, 4-aligned: driver data follows at 4).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_alloc_pd_resp {
    /// The PD's handle.
    pub pd_handle: u32,
}

/// `struct ib_uverbs_reg_mr_resp` (12 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_reg_mr_resp {
    /// The MR's handle.
    pub mr_handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ib_uverbs_alloc_mw_resp` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_alloc_mw_resp {
    /// The window's handle.
    pub mw_handle: u32,
    /// Its key.
    pub rkey: u32,
}

/// `struct ib_uverbs_create_qp_resp` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_create_qp_resp {
    /// The QP's handle.
    pub qp_handle: u32,
    /// Its number.
    pub qpn: u32,
    /// Capabilities granted.
    pub max_send_wr: u32,
    /// Capabilities granted.
    pub max_recv_wr: u32,
    /// Capabilities granted.
    pub max_send_sge: u32,
    /// Capabilities granted.
    pub max_recv_sge: u32,
    /// Capabilities granted.
    pub max_inline_data: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_query_device_resp` (304 bytes in v56.1's kernel headers), which
/// `ibv_cmd_query_device_any` fills and decodes itself: opaque here.
#[repr(C, align(8))]
pub struct ib_uverbs_ex_query_device_resp {
    /// The bytes.
    pub bytes: [u8; 304],
}

/// Declares a command buffer of kern-abi.h (`struct ibv_<verb>`: the command header and
/// the kernel's request), optionally followed by the provider's driver data
/// (`DECLARE_DRV_CMD`).
macro_rules! command {
    ($(#[$attr:meta])* $name:ident = $kabi:ty $(, $drv:ty)?) => {
        $(#[$attr])*
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        pub struct $name {
            /// The command header (filled by libibverbs).
            pub hdr: ib_uverbs_cmd_hdr,
            /// The kernel's request (filled by libibverbs).
            pub core: $kabi,
            $(
            /// The provider's request data.
            pub drv: $drv,
            )?
        }
    };
}

command!(
    /// `struct ibv_get_context`.
    ibv_get_context = ib_uverbs_get_context
);
command!(
    /// `struct ibv_query_port`.
    ibv_query_port = ib_uverbs_query_port
);
command!(
    /// `struct ibv_alloc_pd`.
    ibv_alloc_pd = ib_uverbs_alloc_pd
);
command!(
    /// `struct ibv_alloc_mw`.
    ibv_alloc_mw = ib_uverbs_alloc_mw
);
command!(
    /// `struct ibv_reg_mr`.
    ibv_reg_mr = ib_uverbs_reg_mr
);
command!(
    /// `struct ibv_query_qp`.
    ibv_query_qp = ib_uverbs_query_qp
);
command!(
    /// `struct ibv_modify_qp`.
    ibv_modify_qp = ib_uverbs_modify_qp
);
command!(
    /// `struct ibv_modify_srq`.
    ibv_modify_srq = ib_uverbs_modify_srq
);
command!(
    /// `struct ibv_modify_srq` with rnic's request data (a resize, `IBV_SRQ_MAX_WR`).
    rnic_modify_srq = ib_uverbs_modify_srq, rnic_abi::uverbs::ResizeSrqReq
);
command!(
    /// `struct ibv_query_srq`.
    ibv_query_srq = ib_uverbs_query_srq
);
command!(
    /// `struct ibv_create_srq` with rnic's request data.
    rnic_create_srq = ib_uverbs_create_srq, rnic_abi::uverbs::CreateSrqReq
);
command!(
    /// `struct ibv_create_cq` with rnic's request data.
    rnic_create_cq = ib_uverbs_create_cq, rnic_abi::uverbs::CreateCqReq
);
command!(
    /// `struct ibv_resize_cq` with rnic's request data.
    rnic_resize_cq = ib_uverbs_resize_cq, rnic_abi::uverbs::ResizeCqReq
);
command!(
    /// `struct ibv_create_qp` with rnic's request data.
    rnic_create_qp = ib_uverbs_create_qp, rnic_abi::uverbs::CreateQpReq
);

// Sizes and offsets read from v56.1's kern-abi.h and kernel-headers/rdma/ib_user_verbs.h
// (DECLARE_CMD asserts sizeof(struct ibv_x) == 8 + sizeof(struct ib_uverbs_x)).
const _: () = {
    assert!(size_of::<ib_uverbs_cmd_hdr>() == 8);
    assert!(size_of::<ibv_get_context>() == 16);
    assert!(size_of::<ibv_query_port>() == 24);
    assert!(size_of::<ibv_alloc_pd>() == 16);
    assert!(size_of::<ibv_reg_mr>() == 48);
    assert!(size_of::<ibv_alloc_mw>() == 24);
    assert!(size_of::<ib_uverbs_alloc_mw_resp>() == 8);
    assert!(size_of::<ibv_query_qp>() == 24);
    assert!(size_of::<ibv_modify_qp>() == 120);
    assert!(size_of::<ib_uverbs_create_cq>() == 32);
    assert!(offset_of!(rnic_create_cq, drv) == 40);
    assert!(size_of::<ib_uverbs_resize_cq>() == 16);
    assert!(offset_of!(rnic_resize_cq, drv) == 24);
    assert!(size_of::<ib_uverbs_resize_cq_resp>() == 8);
    assert!(size_of::<ib_uverbs_create_qp>() == 56);
    assert!(offset_of!(rnic_create_qp, drv) == 64);
    assert!(size_of::<ib_uverbs_get_context_resp>() == 8);
    assert!(size_of::<ib_uverbs_alloc_pd_resp>() == 4);
    assert!(size_of::<ib_uverbs_reg_mr_resp>() == 12);
    assert!(size_of::<ib_uverbs_create_cq_resp>() == 8);
    assert!(size_of::<ib_uverbs_create_qp_resp>() == 32);
    assert!(size_of::<ib_uverbs_create_srq>() == 32);
    assert!(offset_of!(rnic_create_srq, drv) == 40);
    assert!(size_of::<ib_uverbs_create_srq_resp>() == 16);
    assert!(size_of::<ibv_modify_srq>() == 24);
    assert!(offset_of!(rnic_modify_srq, drv) == 24);
    assert!(size_of::<rnic_modify_srq>() == 40);
    assert!(size_of::<ibv_query_srq>() == 24);
    // driver.h.
    assert!(size_of::<verbs_match_ent>() == 24);
    assert!(offset_of!(verbs_match_ent, vendor) == 16);
    assert!(offset_of!(verbs_match_ent, kind) == 20);
    assert!(offset_of!(verbs_device_ops, match_table) == 16);
    assert!(offset_of!(verbs_device_ops, alloc_context) == 40);
    assert!(size_of::<verbs_device_ops>() == 72);
    assert!(offset_of!(verbs_device, ops) == size_of::<ibv_device>());
    assert!(size_of::<verbs_device>() == size_of::<ibv_device>() + 48);
    assert!(size_of::<verbs_mr>() == size_of::<ibv_mr>() + 8);
    assert!(size_of::<verbs_context_ops>() == 76 * size_of::<usize>());
};

/// Responses with rnic's driver data after the kernel's (`DECLARE_DRV_CMD`'s `_resp`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct GetContextResp {
    /// The kernel's.
    pub core: ib_uverbs_get_context_resp,
    /// rnic's.
    pub drv: rnic_abi::uverbs::AllocUcontextResp,
}

/// `ALLOC_PD`'s response with rnic's data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct AllocPdResp {
    /// The kernel's.
    pub core: ib_uverbs_alloc_pd_resp,
    /// rnic's.
    pub drv: rnic_abi::uverbs::AllocPdResp,
}

/// `CREATE_CQ`'s response with rnic's data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CreateCqResp {
    /// The kernel's.
    pub core: ib_uverbs_create_cq_resp,
    /// rnic's.
    pub drv: rnic_abi::uverbs::CreateCqResp,
}

/// `CREATE_QP`'s response with rnic's data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CreateQpResp {
    /// The kernel's.
    pub core: ib_uverbs_create_qp_resp,
    /// rnic's.
    pub drv: rnic_abi::uverbs::CreateQpResp,
}

/// `CREATE_SRQ`'s response with rnic's data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CreateSrqResp {
    /// The kernel's.
    pub core: ib_uverbs_create_srq_resp,
    /// rnic's.
    pub drv: rnic_abi::uverbs::CreateSrqResp,
}

const _: () = {
    assert!(offset_of!(CreateSrqResp, drv) == 16);
    assert!(offset_of!(GetContextResp, drv) == 8);
    assert!(offset_of!(AllocPdResp, drv) == 4);
    assert!(offset_of!(CreateCqResp, drv) == 8);
    assert!(offset_of!(CreateQpResp, drv) == 32);
};

extern "C" {
    /// Registers a provider (called from the plug-in's constructor).
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);
    /// Allocates `alloc_size` zeroed bytes and initialises the `verbs_context` at
    /// `context_offset` (an offset disguised as a pointer) in them.
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;
    /// Undoes `_verbs_init_and_alloc_context` but for the free.
    pub fn verbs_uninit_context(context: *mut verbs_context);
    /// Installs the non-null ops.
    pub fn verbs_set_ops(vctx: *mut verbs_context, ops: *const verbs_context_ops);
    /// `ALLOC_UCONTEXT`.
    pub fn ibv_cmd_get_context(
        context: *mut verbs_context,
        cmd: *mut ibv_get_context,
        cmd_size: usize,
        resp: *mut ib_uverbs_get_context_resp,
        resp_size: usize,
    ) -> c_int;
    /// `QUERY_DEVICE` (extended or not, as the kernel supports).
    pub fn ibv_cmd_query_device_any(
        context: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        attr_size: usize,
        resp: *mut ib_uverbs_ex_query_device_resp,
        resp_size: *mut usize,
    ) -> c_int;
    /// `QUERY_PORT`.
    pub fn ibv_cmd_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
        cmd: *mut ibv_query_port,
        cmd_size: usize,
    ) -> c_int;
    /// `ALLOC_PD`.
    pub fn ibv_cmd_alloc_pd(
        context: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut ibv_alloc_pd,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_pd_resp,
        resp_size: usize,
    ) -> c_int;
    /// `DEALLOC_PD`.
    pub fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    /// `REG_MR`.
    pub fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut verbs_mr,
        cmd: *mut ibv_reg_mr,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    /// `DEREG_MR`.
    pub fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int;
    /// `ALLOC_MW`: fills the window's context, PD, key, handle and type.
    pub fn ibv_cmd_alloc_mw(
        pd: *mut ibv_pd,
        mw_type: ibv_mw_type,
        mw: *mut ibv_mw,
        cmd: *mut ibv_alloc_mw,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_mw_resp,
        resp_size: usize,
    ) -> c_int;
    /// `DEALLOC_MW`.
    pub fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int;
    /// `CREATE_CQ`.
    pub fn ibv_cmd_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut ib_uverbs_cmd_hdr,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_cq_resp,
        resp_size: usize,
    ) -> c_int;
    /// `DESTROY_CQ`.
    pub fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// `RESIZE_CQ`: sets the CQ's `cqe` from the kernel's answer.
    pub fn ibv_cmd_resize_cq(
        cq: *mut ibv_cq,
        cqe: c_int,
        cmd: *mut ib_uverbs_cmd_hdr,
        cmd_size: usize,
        resp: *mut ib_uverbs_resize_cq_resp,
        resp_size: usize,
    ) -> c_int;
    /// `CREATE_QP`.
    pub fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut ib_uverbs_cmd_hdr,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    /// `QUERY_QP`.
    pub fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
        cmd: *mut ibv_query_qp,
        cmd_size: usize,
    ) -> c_int;
    /// `MODIFY_QP`.
    pub fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut ibv_modify_qp,
        cmd_size: usize,
    ) -> c_int;
    /// `DESTROY_QP`.
    pub fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;
    /// `CREATE_SRQ`.
    pub fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut ib_uverbs_cmd_hdr,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    /// `MODIFY_SRQ`.
    pub fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        attr_mask: c_int,
        cmd: *mut ibv_modify_srq,
        cmd_size: usize,
    ) -> c_int;
    /// `QUERY_SRQ`.
    pub fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        cmd: *mut ibv_query_srq,
        cmd_size: usize,
    ) -> c_int;
    /// `DESTROY_SRQ`.
    pub fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;
    /// `ATTACH_MCAST`.
    pub fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    /// `DETACH_MCAST`.
    pub fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
}

/// Stand-ins for libibverbs' functions in the crate's unit tests, which run without
/// libibverbs (the plug-in itself takes them from libibverbs.so.1 when it is loaded). The
/// tests call only `ibv_cmd_modify_qp`, which succeeds without doing anything.
#[cfg(test)]
mod test_stubs {
    use super::{ibv_modify_qp, ibv_qp, ibv_qp_attr};
    use std::ffi::c_int;

    #[no_mangle]
    extern "C" fn ibv_cmd_modify_qp(
        _qp: *mut ibv_qp,
        _attr: *mut ibv_qp_attr,
        _attr_mask: c_int,
        _cmd: *mut ibv_modify_qp,
        _cmd_size: usize,
    ) -> c_int {
        0
    }

    macro_rules! stubs {
        ($($name:ident),*) => {$(
            #[no_mangle]
            extern "C" fn $name() -> i32 {
                libc::EOPNOTSUPP
            }
        )*};
    }

    stubs!(
        verbs_register_driver_34,
        _verbs_init_and_alloc_context,
        verbs_uninit_context,
        verbs_set_ops,
        ibv_cmd_get_context,
        ibv_cmd_query_device_any,
        ibv_cmd_query_port,
        ibv_cmd_alloc_pd,
        ibv_cmd_dealloc_pd,
        ibv_cmd_reg_mr,
        ibv_cmd_dereg_mr,
        ibv_cmd_alloc_mw,
        ibv_cmd_dealloc_mw,
        ibv_cmd_create_cq,
        ibv_cmd_destroy_cq,
        ibv_cmd_resize_cq,
        ibv_cmd_create_qp,
        ibv_cmd_query_qp,
        ibv_cmd_destroy_qp,
        ibv_cmd_create_srq,
        ibv_cmd_modify_srq,
        ibv_cmd_query_srq,
        ibv_cmd_destroy_srq,
        ibv_cmd_attach_mcast,
        ibv_cmd_detach_mcast
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;
    use std::process::Command;

    /// The kernel's structures without driver data of their own mirrored above as plain
    /// `#[repr(C)]` structures: (name, size).
    fn plain_kabi() -> Vec<(&'static str, usize)> {
        vec![
            ("ib_uverbs_cmd_hdr", size_of::<ib_uverbs_cmd_hdr>()),
            (
                "ib_uverbs_alloc_pd_resp",
                size_of::<ib_uverbs_alloc_pd_resp>(),
            ),
            ("ib_uverbs_reg_mr_resp", size_of::<ib_uverbs_reg_mr_resp>()),
            (
                "ib_uverbs_alloc_mw_resp",
                size_of::<ib_uverbs_alloc_mw_resp>(),
            ),
            (
                "ib_uverbs_create_qp_resp",
                size_of::<ib_uverbs_create_qp_resp>(),
            ),
            (
                "ib_uverbs_ex_query_device_resp",
                size_of::<ib_uverbs_ex_query_device_resp>(),
            ),
        ]
    }

    /// Compiles and runs a C program that prints, from `<rdma/ib_user_verbs.h>` (Debian's
    /// kernel headers of the reference root, which rdma-core 56.1 also carries), the size
    /// of every mirrored structure and the offset and size of each field.
    #[test]
    fn kernel_abi_structures_have_the_c_layout() {
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/ib_user_verbs.h>\nint main(void)\n{\n",
        );
        let kabi = kabi_layouts();
        for (name, _, fields) in &kabi {
            let _ = writeln!(c, "\tprintf(\"T {name} %zu\\n\", sizeof(struct {name}));");
            for (f, _, _) in fields {
                let _ = writeln!(
                    c,
                    "\tprintf(\"F {name}.{f} %zu %zu\\n\", offsetof(struct {name}, {f}), sizeof(((struct {name} *)0)->{f}));"
                );
            }
        }
        for (name, _) in plain_kabi() {
            let _ = writeln!(c, "\tprintf(\"T {name} %zu\\n\", sizeof(struct {name}));");
        }
        c.push_str("\treturn 0;\n}\n");
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("probe.c");
        let exe = dir.path().join("probe");
        std::fs::write(&src, c).expect("write probe.c");
        rnic_tests::debian::compile_c(&src, &exe, &[]);
        let out = Command::new(&exe).output().expect("run the probe");
        assert!(out.status.success());
        let c_says = String::from_utf8(out.stdout).expect("utf-8");
        let mut rust = String::new();
        for (name, size, fields) in &kabi {
            let _ = writeln!(rust, "T {name} {size}");
            for (f, offset, size) in fields {
                let _ = writeln!(rust, "F {name}.{f} {offset} {size}");
            }
        }
        for (name, size) in plain_kabi() {
            let _ = writeln!(rust, "T {name} {size}");
        }
        assert_eq!(c_says, rust);
    }

    /// The rdma-core git mirror whose v56.1 driver.h the op order is checked against.
    const RDMA_CORE_GIT: &str = "/work/.mirror/linux-rdma+rdma-core/repo";

    /// driver.h of rdma-core v56.1, from `RDMA_CORE_GIT` (or the directory in the
    /// environment variable of that name), if there is one.
    fn driver_h() -> Option<String> {
        let git = std::env::var("RDMA_CORE_GIT").unwrap_or_else(|_| RDMA_CORE_GIT.to_string());
        let out = Command::new("git")
            .args(["-C", &git, "show", "v56.1:libibverbs/driver.h"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The names of the function pointers of `struct NAME { ... };` in `header`, in order.
    fn pointer_members(header: &str, name: &str) -> Vec<String> {
        let start = header
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("struct {name} is not in driver.h"));
        let body = &header[start..];
        let body = &body[..body.find("\n};").expect("the end of the struct")];
        body.split("(*")
            .skip(1)
            .map(|s| s[..s.find(')').expect("a member name")].to_string())
            .collect()
    }

    #[test]
    fn the_context_ops_are_driver_h_s_in_its_order() {
        let Some(h) = driver_h() else {
            eprintln!(
                "skipping: no rdma-core git mirror with tag v56.1 at {RDMA_CORE_GIT} (set RDMA_CORE_GIT); \
                 the sizes are still checked by the assertions in driver.rs"
            );
            return;
        };
        assert_eq!(pointer_members(&h, "verbs_context_ops"), CONTEXT_OPS_NAMES);
        assert_eq!(
            pointer_members(&h, "verbs_device_ops"),
            [
                "match_device",
                "alloc_context",
                "import_context",
                "alloc_device",
                "uninit_device"
            ]
        );
        assert!(h.contains(
            "struct verbs_device {\n\tstruct ibv_device device; /* Must be first */\n\tconst struct verbs_device_ops *ops;\n\tatomic_int refcount;\n\tstruct list_node entry;\n\tstruct verbs_sysfs_dev *sysfs;\n\tuint64_t core_support;\n};"
        ));
    }
}
