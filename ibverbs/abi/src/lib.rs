//! The binary interface of rdma-core's `<infiniband/verbs.h>`, mirrored as `#[repr(C)]`
//! types: what applications read and write, and what the header's inline functions call
//! through (the ops of [`ibv_context`], the [`verbs_context`] placed in memory before
//! it, [`ibv_qp_ex`]'s work-request builders, [`ibv_cq_ex`]'s poll functions).
//!
//! Names are the header's, so a reader can hold both side by side; a field the header
//! names with a Rust keyword gets a trailing underscore (`type_`, `priv_`). An anonymous
//! C union of two `u32`s is a single `u32` here (its members share one offset and size);
//! the one anonymous union of structs, in [`ibv_send_wr`], is the field
//! `anon_bind_mw_tso`. Enums are integer type aliases with their values as constants,
//! because a C caller may pass any value and a Rust enum must not hold an unknown one.
//!
//! The layout test (ibverbs/tests/layout.rs) compiles a C program against Debian's headers that
//! prints the size, alignment and every field's offset and size of each type below and
//! the value of each constant in [`CONSTANTS`], and compares them with [`layouts`].
//!
//! The crate is shared by rnic's own libibverbs (`rnic-ibverbs`, which re-exports it as
//! `ibverbs::abi`) and by rnic's rdma-core provider plug-in (`rnic-provider`), which must
//! not link the former: it exports the `ibv_*` symbols of libibverbs itself. It also
//! holds the few rules both follow to turn a device completion into an `ibv_wc`
//! ([`wc_flags_of`], [`wc_sl_of`]).

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::offset_of;

use libc::{pthread_cond_t, pthread_mutex_t, timespec};

/// The recorded layout of one mirrored type, for the layout test.
#[derive(Debug, Clone)]
pub struct TypeLayout {
    /// The Rust type's name.
    pub name: &'static str,
    /// The C type: `struct ibv_pd`, `union ibv_gid`, or for a type C leaves anonymous
    /// an expression naming it (see [`ANONYMOUS_C_TYPES`]); empty for one C cannot
    /// name.
    pub c_type: &'static str,
    /// `size_of` of the Rust type.
    pub size: usize,
    /// `align_of` of the Rust type.
    pub align: usize,
    /// Every field, in declaration order.
    pub fields: Vec<FieldLayout>,
}

/// One field of a [`TypeLayout`].
#[derive(Debug, Clone)]
pub struct FieldLayout {
    /// The field's name in C (the Rust name without a keyword's trailing underscore);
    /// for the one field C leaves anonymous, `anon_bind_mw_tso` of [`ibv_send_wr`], the
    /// Rust name.
    pub c_name: &'static str,
    /// Its offset.
    pub offset: usize,
    /// Its size.
    pub size: usize,
}

/// The C name of a Rust field: a field named after a Rust keyword carries a trailing
/// underscore (`type_`, `priv_`) that C does not have.
fn c_field_name(rust: &'static str) -> &'static str {
    rust.strip_suffix('_').unwrap_or(rust)
}

/// The mirrors of types C declares inside another without a name, with a GCC type
/// expression for each; an empty one for the union C does not even give a member name
/// (its place is checked through `ibv_send_wr`'s offsets and size).
pub const ANONYMOUS_C_TYPES: &[(&str, &str)] = &[
    ("ibv_gid_global", "__typeof__(((union ibv_gid *)0)->global)"),
    (
        "ibv_odp_caps_per_transport",
        "__typeof__(((struct ibv_odp_caps *)0)->per_transport_caps)",
    ),
    (
        "ibv_async_event_element",
        "__typeof__(((struct ibv_async_event *)0)->element)",
    ),
    (
        "ibv_send_wr_wr",
        "__typeof__(((struct ibv_send_wr *)0)->wr)",
    ),
    (
        "ibv_send_wr_rdma",
        "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)",
    ),
    (
        "ibv_send_wr_atomic",
        "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)",
    ),
    (
        "ibv_send_wr_ud",
        "__typeof__(((struct ibv_send_wr *)0)->wr.ud)",
    ),
    (
        "ibv_send_wr_qp_type",
        "__typeof__(((struct ibv_send_wr *)0)->qp_type)",
    ),
    (
        "ibv_send_wr_xrc",
        "__typeof__(((struct ibv_send_wr *)0)->qp_type.xrc)",
    ),
    ("ibv_send_wr_bind_mw_tso", ""),
    (
        "ibv_send_wr_bind_mw",
        "__typeof__(((struct ibv_send_wr *)0)->bind_mw)",
    ),
    (
        "ibv_send_wr_tso",
        "__typeof__(((struct ibv_send_wr *)0)->tso)",
    ),
    ("ibv_ops_wr_tm", "__typeof__(((struct ibv_ops_wr *)0)->tm)"),
    (
        "ibv_ops_wr_tm_add",
        "__typeof__(((struct ibv_ops_wr *)0)->tm.add)",
    ),
];

/// The C type of mirror `name`, whose own declaration is `declared`.
fn c_type_of(name: &str, declared: &'static str) -> &'static str {
    ANONYMOUS_C_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(declared, |(_, c)| c)
}

/// Defines `#[repr(C)]` mirrors, a `zeroed()` for each (all-zero bytes are a valid value
/// of every field type this macro is used with: integers, arrays of them, raw pointers,
/// `Option` of function pointers, pthread objects, `timespec` and other mirrors), and
/// [`layouts`] listing them all.
macro_rules! mirror {
    ($(
        $(#[$attr:meta])*
        pub $kind:ident $name:ident {
            $( $(#[$fattr:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {
        $(
            $(#[$attr])*
            #[repr(C)]
            #[derive(Clone, Copy)]
            pub $kind $name {
                $( $(#[$fattr])* pub $field: $ty ),*
            }

            impl $name {
                /// The value whose bytes are all zero.
                pub fn zeroed() -> Self {
                    // SAFETY: every field type of a mirrored type accepts all-zero bytes
                    // (see the macro's documentation).
                    unsafe { std::mem::zeroed() }
                }
            }
        )*

        /// The layout of every mirrored type, for the layout test.
        pub fn layouts() -> Vec<TypeLayout> {
            vec![$(
                TypeLayout {
                    name: stringify!($name),
                    c_type: c_type_of(
                        stringify!($name),
                        concat!(stringify!($kind), " ", stringify!($name)),
                    ),
                    size: size_of::<$name>(),
                    align: align_of::<$name>(),
                    fields: vec![$(
                        FieldLayout {
                            c_name: c_field_name(stringify!($field)),
                            offset: offset_of!($name, $field),
                            size: size_of::<$ty>(),
                        }
                    ),*],
                }
            ),*]
        }
    };
}

/// Defines the header's enum values and `#define`s as constants, and [`CONSTANTS`]
/// listing them for the layout test.
macro_rules! constants {
    ($( $(#[$attr:meta])* $name:ident : $ty:ty = $value:expr; )*) => {
        $( $(#[$attr])* pub const $name: $ty = $value; )*

        /// Every constant above by its C name, as `i64`, for the layout test.
        pub const CONSTANTS: &[(&str, i64)] = &[$( (stringify!($name), $name as i64) ),*];
    };
}

/// `enum ibv_gid_type`.
pub type ibv_gid_type = u32;
/// `enum ibv_node_type` (it has a negative value).
pub type ibv_node_type = c_int;
/// `enum ibv_transport_type` (it has a negative value).
pub type ibv_transport_type = c_int;
/// `enum ibv_atomic_cap`.
pub type ibv_atomic_cap = u32;
/// `enum ibv_mtu`.
pub type ibv_mtu = u32;
/// `enum ibv_port_state`.
pub type ibv_port_state = u32;
/// `enum ibv_event_type`.
pub type ibv_event_type = u32;
/// `enum ibv_wc_status`.
pub type ibv_wc_status = u32;
/// `enum ibv_wc_opcode`.
pub type ibv_wc_opcode = u32;
/// `enum ibv_mw_type`.
pub type ibv_mw_type = u32;
/// `enum ibv_srq_type`.
pub type ibv_srq_type = u32;
/// `enum ibv_wq_type`.
pub type ibv_wq_type = u32;
/// `enum ibv_wq_state`.
pub type ibv_wq_state = u32;
/// `enum ibv_qp_type`.
pub type ibv_qp_type = u32;
/// `enum ibv_qp_state`.
pub type ibv_qp_state = u32;
/// `enum ibv_mig_state`.
pub type ibv_mig_state = u32;
/// `enum ibv_wr_opcode`.
pub type ibv_wr_opcode = u32;
/// `enum ibv_ops_wr_opcode`.
pub type ibv_ops_wr_opcode = u32;
/// `enum ibv_advise_mr_advice` (`ib_uverbs_advise_mr_advice`).
pub type ibv_advise_mr_advice = u32;
/// `enum ibv_counter_description`.
pub type ibv_counter_description = u32;
/// `enum ibv_rate`.
pub type ibv_rate = u32;
/// libibverbs' private `enum ibv_gid_type_sysfs` (infiniband/driver.h, not installed by
/// libibverbs-dev), the answer of `ibv_query_gid_type`.
pub type ibv_gid_type_sysfs = u32;
/// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1`: an InfiniBand or RoCE v1 GID.
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: ibv_gid_type_sysfs = 0;
/// `IBV_GID_TYPE_SYSFS_ROCE_V2`: a RoCE v2 GID.
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: ibv_gid_type_sysfs = 1;

/// The value `ibv_context::abi_compat` holds when a [`verbs_context`] precedes the
/// context (`__VERBS_ABI_IS_EXTENDED`).
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// An `int (*)(...)` slot of an ops table, nullable as in C.
type Op<F> = Option<F>;

/// `struct _compat_ibv_port_attr`, what the exported `ibv_query_port` fills: the
/// [`ibv_port_attr`] of older headers, every field before `port_cap_flags2`.
pub const COMPAT_PORT_ATTR_LEN: usize = offset_of!(ibv_port_attr, port_cap_flags2);

mirror! {
    /// `union ibv_gid`: a 128-bit GID.
    pub union ibv_gid {
        pub raw: [u8; 16],
        pub global: ibv_gid_global,
    }

    /// The `global` view of [`ibv_gid`] (both fields big-endian).
    pub struct ibv_gid_global {
        pub subnet_prefix: u64,
        pub interface_id: u64,
    }

    /// `struct ibv_gid_entry`: one GID table entry, as `ibv_query_gid_ex` returns it.
    pub struct ibv_gid_entry {
        pub gid: ibv_gid,
        pub gid_index: u32,
        pub port_num: u32,
        /// An [`ibv_gid_type`].
        pub gid_type: u32,
        pub ndev_ifindex: u32,
    }

    /// `struct ibv_alloc_dm_attr`.
    pub struct ibv_alloc_dm_attr {
        pub length: usize,
        pub log_align_req: u32,
        pub comp_mask: u32,
    }

    /// `struct ibv_dm`: device memory.
    pub struct ibv_dm {
        pub context: *mut ibv_context,
        pub memcpy_to_dm: Op<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int>,
        pub memcpy_from_dm: Op<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int>,
        pub comp_mask: u32,
        pub handle: u32,
    }

    /// `struct ibv_device_attr`: what `ibv_query_device` reports.
    pub struct ibv_device_attr {
        /// NUL-terminated firmware version.
        pub fw_ver: [c_char; 64],
        /// Big-endian.
        pub node_guid: u64,
        /// Big-endian.
        pub sys_image_guid: u64,
        pub max_mr_size: u64,
        pub page_size_cap: u64,
        pub vendor_id: u32,
        pub vendor_part_id: u32,
        pub hw_ver: u32,
        pub max_qp: c_int,
        pub max_qp_wr: c_int,
        pub device_cap_flags: c_uint,
        pub max_sge: c_int,
        pub max_sge_rd: c_int,
        pub max_cq: c_int,
        pub max_cqe: c_int,
        pub max_mr: c_int,
        pub max_pd: c_int,
        pub max_qp_rd_atom: c_int,
        pub max_ee_rd_atom: c_int,
        pub max_res_rd_atom: c_int,
        pub max_qp_init_rd_atom: c_int,
        pub max_ee_init_rd_atom: c_int,
        pub atomic_cap: ibv_atomic_cap,
        pub max_ee: c_int,
        pub max_rdd: c_int,
        pub max_mw: c_int,
        pub max_raw_ipv6_qp: c_int,
        pub max_raw_ethy_qp: c_int,
        pub max_mcast_grp: c_int,
        pub max_mcast_qp_attach: c_int,
        pub max_total_mcast_qp_attach: c_int,
        pub max_ah: c_int,
        pub max_fmr: c_int,
        pub max_map_per_fmr: c_int,
        pub max_srq: c_int,
        pub max_srq_wr: c_int,
        pub max_srq_sge: c_int,
        pub max_pkeys: u16,
        pub local_ca_ack_delay: u8,
        pub phys_port_cnt: u8,
    }

    /// `struct ibv_query_device_ex_input`.
    pub struct ibv_query_device_ex_input {
        pub comp_mask: u32,
    }

    /// `struct ibv_odp_caps`.
    pub struct ibv_odp_caps {
        pub general_caps: u64,
        pub per_transport_caps: ibv_odp_caps_per_transport,
    }

    /// The anonymous `per_transport_caps` of [`ibv_odp_caps`].
    pub struct ibv_odp_caps_per_transport {
        pub rc_odp_caps: u32,
        pub uc_odp_caps: u32,
        pub ud_odp_caps: u32,
    }

    /// `struct ibv_tso_caps`.
    pub struct ibv_tso_caps {
        pub max_tso: u32,
        pub supported_qpts: u32,
    }

    /// `struct ibv_rss_caps`.
    pub struct ibv_rss_caps {
        pub supported_qpts: u32,
        pub max_rwq_indirection_tables: u32,
        pub max_rwq_indirection_table_size: u32,
        pub rx_hash_fields_mask: u64,
        pub rx_hash_function: u8,
    }

    /// `struct ibv_packet_pacing_caps`.
    pub struct ibv_packet_pacing_caps {
        pub qp_rate_limit_min: u32,
        pub qp_rate_limit_max: u32,
        pub supported_qpts: u32,
    }

    /// `struct ibv_tm_caps`: tag matching.
    pub struct ibv_tm_caps {
        pub max_rndv_hdr_size: u32,
        pub max_num_tags: u32,
        pub flags: u32,
        pub max_ops: u32,
        pub max_sge: u32,
    }

    /// `struct ibv_cq_moderation_caps`.
    pub struct ibv_cq_moderation_caps {
        pub max_cq_count: u16,
        pub max_cq_period: u16,
    }

    /// `struct ibv_pci_atomic_caps`.
    pub struct ibv_pci_atomic_caps {
        pub fetch_add: u16,
        pub swap: u16,
        pub compare_swap: u16,
    }

    /// `struct ibv_device_attr_ex`: what `ibv_query_device_ex` reports.
    pub struct ibv_device_attr_ex {
        pub orig_attr: ibv_device_attr,
        pub comp_mask: u32,
        pub odp_caps: ibv_odp_caps,
        pub completion_timestamp_mask: u64,
        pub hca_core_clock: u64,
        pub device_cap_flags_ex: u64,
        pub tso_caps: ibv_tso_caps,
        pub rss_caps: ibv_rss_caps,
        pub max_wq_type_rq: u32,
        pub packet_pacing_caps: ibv_packet_pacing_caps,
        pub raw_packet_caps: u32,
        pub tm_caps: ibv_tm_caps,
        pub cq_mod_caps: ibv_cq_moderation_caps,
        pub max_dm_size: u64,
        pub pci_atomic_caps: ibv_pci_atomic_caps,
        pub xrc_odp_caps: u32,
        pub phys_port_cnt_ex: u32,
    }

    /// `struct ibv_port_attr`: what `ibv_query_port` reports (the exported function fills
    /// only its first [`COMPAT_PORT_ATTR_LEN`] bytes).
    pub struct ibv_port_attr {
        pub state: ibv_port_state,
        pub max_mtu: ibv_mtu,
        pub active_mtu: ibv_mtu,
        pub gid_tbl_len: c_int,
        pub port_cap_flags: u32,
        pub max_msg_sz: u32,
        pub bad_pkey_cntr: u32,
        pub qkey_viol_cntr: u32,
        pub pkey_tbl_len: u16,
        pub lid: u16,
        pub sm_lid: u16,
        pub lmc: u8,
        pub max_vl_num: u8,
        pub sm_sl: u8,
        pub subnet_timeout: u8,
        pub init_type_reply: u8,
        pub active_width: u8,
        pub active_speed: u8,
        pub phys_state: u8,
        pub link_layer: u8,
        pub flags: u8,
        pub port_cap_flags2: u16,
        pub active_speed_ex: u32,
    }

    /// `struct ibv_async_event`.
    pub struct ibv_async_event {
        pub element: ibv_async_event_element,
        pub event_type: ibv_event_type,
    }

    /// The anonymous `element` union of [`ibv_async_event`].
    pub union ibv_async_event_element {
        pub cq: *mut ibv_cq,
        pub qp: *mut ibv_qp,
        pub srq: *mut ibv_srq,
        pub wq: *mut ibv_wq,
        pub port_num: c_int,
    }

    /// `struct ibv_wc`: a work completion.
    pub struct ibv_wc {
        pub wr_id: u64,
        pub status: ibv_wc_status,
        pub opcode: ibv_wc_opcode,
        pub vendor_err: u32,
        pub byte_len: u32,
        /// C's anonymous union of `imm_data` (big-endian, with `IBV_WC_WITH_IMM`) and
        /// `invalidated_rkey` (with `IBV_WC_WITH_INV`).
        pub imm_data: u32,
        pub qp_num: u32,
        pub src_qp: u32,
        pub wc_flags: c_uint,
        pub pkey_index: u16,
        pub slid: u16,
        pub sl: u8,
        pub dlid_path_bits: u8,
    }

    /// `struct ibv_mw_bind_info`.
    pub struct ibv_mw_bind_info {
        pub mr: *mut ibv_mr,
        pub addr: u64,
        pub length: u64,
        pub mw_access_flags: c_uint,
    }

    /// `struct ibv_pd`: a protection domain.
    pub struct ibv_pd {
        pub context: *mut ibv_context,
        pub handle: u32,
    }

    /// `struct ibv_td_init_attr`.
    pub struct ibv_td_init_attr {
        pub comp_mask: u32,
    }

    /// `struct ibv_td`: a thread domain.
    pub struct ibv_td {
        pub context: *mut ibv_context,
    }

    /// `struct ibv_xrcd_init_attr`.
    pub struct ibv_xrcd_init_attr {
        pub comp_mask: u32,
        pub fd: c_int,
        pub oflags: c_int,
    }

    /// `struct ibv_xrcd`: an XRC domain.
    pub struct ibv_xrcd {
        pub context: *mut ibv_context,
    }

    /// `struct ibv_mr`: a memory region.
    pub struct ibv_mr {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub addr: *mut c_void,
        pub length: usize,
        pub handle: u32,
        pub lkey: u32,
        pub rkey: u32,
    }

    /// `struct ibv_mw`: a memory window.
    pub struct ibv_mw {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub rkey: u32,
        pub handle: u32,
        pub type_: ibv_mw_type,
    }

    /// `struct ibv_global_route`: the GRH part of an address.
    pub struct ibv_global_route {
        pub dgid: ibv_gid,
        pub flow_label: u32,
        pub sgid_index: u8,
        pub hop_limit: u8,
        pub traffic_class: u8,
    }

    /// `struct ibv_grh`: a global route header as it arrives in a UD receive buffer.
    pub struct ibv_grh {
        pub version_tclass_flow: u32,
        pub paylen: u16,
        pub next_hdr: u8,
        pub hop_limit: u8,
        pub sgid: ibv_gid,
        pub dgid: ibv_gid,
    }

    /// `struct ibv_ah_attr`: an address vector.
    pub struct ibv_ah_attr {
        pub grh: ibv_global_route,
        pub dlid: u16,
        pub sl: u8,
        pub src_path_bits: u8,
        pub static_rate: u8,
        pub is_global: u8,
        pub port_num: u8,
    }

    /// `struct ibv_srq_attr`.
    pub struct ibv_srq_attr {
        pub max_wr: u32,
        pub max_sge: u32,
        pub srq_limit: u32,
    }

    /// `struct ibv_srq_init_attr`.
    pub struct ibv_srq_init_attr {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
    }

    /// `struct ibv_tm_cap`.
    pub struct ibv_tm_cap {
        pub max_num_tags: u32,
        pub max_ops: u32,
    }

    /// `struct ibv_srq_init_attr_ex`.
    pub struct ibv_srq_init_attr_ex {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
        pub comp_mask: u32,
        pub srq_type: ibv_srq_type,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        pub cq: *mut ibv_cq,
        pub tm_cap: ibv_tm_cap,
    }

    /// `struct ibv_wq_init_attr`.
    pub struct ibv_wq_init_attr {
        pub wq_context: *mut c_void,
        pub wq_type: ibv_wq_type,
        pub max_wr: u32,
        pub max_sge: u32,
        pub pd: *mut ibv_pd,
        pub cq: *mut ibv_cq,
        pub comp_mask: u32,
        pub create_flags: u32,
    }

    /// `struct ibv_wq_attr`.
    pub struct ibv_wq_attr {
        pub attr_mask: u32,
        pub wq_state: ibv_wq_state,
        pub curr_wq_state: ibv_wq_state,
        pub flags: u32,
        pub flags_mask: u32,
    }

    /// `struct ibv_rwq_ind_table`.
    pub struct ibv_rwq_ind_table {
        pub context: *mut ibv_context,
        pub ind_tbl_handle: c_int,
        pub ind_tbl_num: c_int,
        pub comp_mask: u32,
    }

    /// `struct ibv_rwq_ind_table_init_attr`.
    pub struct ibv_rwq_ind_table_init_attr {
        pub log_ind_tbl_size: u32,
        pub ind_tbl: *mut *mut ibv_wq,
        pub comp_mask: u32,
    }

    /// `struct ibv_qp_cap`.
    pub struct ibv_qp_cap {
        pub max_send_wr: u32,
        pub max_recv_wr: u32,
        pub max_send_sge: u32,
        pub max_recv_sge: u32,
        pub max_inline_data: u32,
    }

    /// `struct ibv_qp_init_attr`.
    pub struct ibv_qp_init_attr {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub cap: ibv_qp_cap,
        pub qp_type: ibv_qp_type,
        pub sq_sig_all: c_int,
    }

    /// `struct ibv_rx_hash_conf`.
    pub struct ibv_rx_hash_conf {
        pub rx_hash_function: u8,
        pub rx_hash_key_len: u8,
        pub rx_hash_key: *mut u8,
        pub rx_hash_fields_mask: u64,
    }

    /// `struct ibv_qp_init_attr_ex`: [`ibv_qp_init_attr`] and the extended fields.
    pub struct ibv_qp_init_attr_ex {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub cap: ibv_qp_cap,
        pub qp_type: ibv_qp_type,
        pub sq_sig_all: c_int,
        pub comp_mask: u32,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        pub create_flags: u32,
        pub max_tso_header: u16,
        pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
        pub rx_hash_conf: ibv_rx_hash_conf,
        pub source_qpn: u32,
        pub send_ops_flags: u64,
    }

    /// `struct ibv_qp_open_attr`.
    pub struct ibv_qp_open_attr {
        pub comp_mask: u32,
        pub qp_num: u32,
        pub xrcd: *mut ibv_xrcd,
        pub qp_context: *mut c_void,
        pub qp_type: ibv_qp_type,
    }

    /// `struct ibv_qp_attr`.
    pub struct ibv_qp_attr {
        pub qp_state: ibv_qp_state,
        pub cur_qp_state: ibv_qp_state,
        pub path_mtu: ibv_mtu,
        pub path_mig_state: ibv_mig_state,
        pub qkey: u32,
        pub rq_psn: u32,
        pub sq_psn: u32,
        pub dest_qp_num: u32,
        pub qp_access_flags: c_uint,
        pub cap: ibv_qp_cap,
        pub ah_attr: ibv_ah_attr,
        pub alt_ah_attr: ibv_ah_attr,
        pub pkey_index: u16,
        pub alt_pkey_index: u16,
        pub en_sqd_async_notify: u8,
        pub sq_draining: u8,
        pub max_rd_atomic: u8,
        pub max_dest_rd_atomic: u8,
        pub min_rnr_timer: u8,
        pub port_num: u8,
        pub timeout: u8,
        pub retry_cnt: u8,
        pub rnr_retry: u8,
        pub alt_port_num: u8,
        pub alt_timeout: u8,
        pub rate_limit: u32,
    }

    /// `struct ibv_qp_rate_limit_attr`.
    pub struct ibv_qp_rate_limit_attr {
        pub rate_limit: u32,
        pub max_burst_sz: u32,
        pub typical_pkt_sz: u16,
        pub comp_mask: u32,
    }

    /// `struct ibv_data_buf`.
    pub struct ibv_data_buf {
        pub addr: *mut c_void,
        pub length: usize,
    }

    /// `struct ibv_sge`: a scatter/gather entry.
    pub struct ibv_sge {
        pub addr: u64,
        pub length: u32,
        pub lkey: u32,
    }

    /// `struct ibv_send_wr`: a send work request.
    pub struct ibv_send_wr {
        pub wr_id: u64,
        pub next: *mut ibv_send_wr,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
        pub opcode: ibv_wr_opcode,
        pub send_flags: c_uint,
        /// C's anonymous union of `imm_data` (big-endian, for `*_WITH_IMM`) and
        /// `invalidate_rkey` (for `*_INV`).
        pub imm_data: u32,
        pub wr: ibv_send_wr_wr,
        pub qp_type: ibv_send_wr_qp_type,
        /// C's anonymous union of `bind_mw` and `tso`.
        pub anon_bind_mw_tso: ibv_send_wr_bind_mw_tso,
    }

    /// The `wr` union of [`ibv_send_wr`]: what each opcode family needs.
    pub union ibv_send_wr_wr {
        pub rdma: ibv_send_wr_rdma,
        pub atomic: ibv_send_wr_atomic,
        pub ud: ibv_send_wr_ud,
    }

    /// `wr.rdma` of [`ibv_send_wr`].
    pub struct ibv_send_wr_rdma {
        pub remote_addr: u64,
        pub rkey: u32,
    }

    /// `wr.atomic` of [`ibv_send_wr`].
    pub struct ibv_send_wr_atomic {
        pub remote_addr: u64,
        pub compare_add: u64,
        pub swap: u64,
        pub rkey: u32,
    }

    /// `wr.ud` of [`ibv_send_wr`].
    pub struct ibv_send_wr_ud {
        pub ah: *mut ibv_ah,
        pub remote_qpn: u32,
        pub remote_qkey: u32,
    }

    /// The `qp_type` union of [`ibv_send_wr`].
    pub union ibv_send_wr_qp_type {
        pub xrc: ibv_send_wr_xrc,
    }

    /// `qp_type.xrc` of [`ibv_send_wr`].
    pub struct ibv_send_wr_xrc {
        pub remote_srqn: u32,
    }

    /// The anonymous union of `bind_mw` and `tso` in [`ibv_send_wr`].
    pub union ibv_send_wr_bind_mw_tso {
        pub bind_mw: ibv_send_wr_bind_mw,
        pub tso: ibv_send_wr_tso,
    }

    /// `bind_mw` of [`ibv_send_wr`].
    pub struct ibv_send_wr_bind_mw {
        pub mw: *mut ibv_mw,
        pub rkey: u32,
        pub bind_info: ibv_mw_bind_info,
    }

    /// `tso` of [`ibv_send_wr`].
    pub struct ibv_send_wr_tso {
        pub hdr: *mut c_void,
        pub hdr_sz: u16,
        pub mss: u16,
    }

    /// `struct ibv_recv_wr`: a receive work request.
    pub struct ibv_recv_wr {
        pub wr_id: u64,
        pub next: *mut ibv_recv_wr,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
    }

    /// `struct ibv_ops_wr`: a tag-matching list operation.
    pub struct ibv_ops_wr {
        pub wr_id: u64,
        pub next: *mut ibv_ops_wr,
        pub opcode: ibv_ops_wr_opcode,
        pub flags: c_int,
        pub tm: ibv_ops_wr_tm,
    }

    /// `tm` of [`ibv_ops_wr`].
    pub struct ibv_ops_wr_tm {
        pub unexpected_cnt: u32,
        pub handle: u32,
        pub add: ibv_ops_wr_tm_add,
    }

    /// `tm.add` of [`ibv_ops_wr`].
    pub struct ibv_ops_wr_tm_add {
        pub recv_wr_id: u64,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
        pub tag: u64,
        pub mask: u64,
    }

    /// `struct ibv_mw_bind`.
    pub struct ibv_mw_bind {
        pub wr_id: u64,
        pub send_flags: c_uint,
        pub bind_info: ibv_mw_bind_info,
    }

    /// `struct ibv_srq`: a shared receive queue.
    pub struct ibv_srq {
        pub context: *mut ibv_context,
        pub srq_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub handle: u32,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
    }

    /// `struct ibv_wq`: a work queue.
    pub struct ibv_wq {
        pub context: *mut ibv_context,
        pub wq_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub cq: *mut ibv_cq,
        pub wq_num: u32,
        pub handle: u32,
        pub state: ibv_wq_state,
        pub wq_type: ibv_wq_type,
        pub post_recv: Op<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
        pub comp_mask: u32,
    }

    /// `struct ibv_qp`: a queue pair.
    pub struct ibv_qp {
        pub context: *mut ibv_context,
        pub qp_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub handle: u32,
        pub qp_num: u32,
        pub state: ibv_qp_state,
        pub qp_type: ibv_qp_type,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
    }

    /// `struct ibv_qp_ex`: a QP with the work-request builders of the new post-send API
    /// (`ibv_wr_start`, `ibv_wr_rdma_write`, ..., `ibv_wr_complete` call through these).
    pub struct ibv_qp_ex {
        pub qp_base: ibv_qp,
        pub comp_mask: u64,
        pub wr_id: u64,
        pub wr_flags: c_uint,
        pub wr_atomic_cmp_swp: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
        pub wr_atomic_fetch_add: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
        pub wr_bind_mw: Op<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
        pub wr_local_inv: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_rdma_read: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
        pub wr_rdma_write: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
        pub wr_rdma_write_imm: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
        pub wr_send: Op<unsafe extern "C" fn(*mut ibv_qp_ex)>,
        pub wr_send_imm: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_send_inv: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_send_tso: Op<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
        pub wr_set_ud_addr: Op<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
        pub wr_set_xrc_srqn: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_set_inline_data: Op<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
        pub wr_set_inline_data_list: Op<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
        pub wr_set_sge: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
        pub wr_set_sge_list: Op<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
        pub wr_start: Op<unsafe extern "C" fn(*mut ibv_qp_ex)>,
        pub wr_complete: Op<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
        pub wr_abort: Op<unsafe extern "C" fn(*mut ibv_qp_ex)>,
        pub wr_atomic_write: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
        pub wr_flush: Op<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, usize, u8, u8)>,
    }

    /// `struct ibv_ece`: enhanced connection establishment options.
    pub struct ibv_ece {
        pub vendor_id: u32,
        pub options: u32,
        pub comp_mask: u32,
    }

    /// `struct ibv_comp_channel`: where completion events are read.
    pub struct ibv_comp_channel {
        pub context: *mut ibv_context,
        pub fd: c_int,
        pub refcnt: c_int,
    }

    /// `struct ibv_cq`: a completion queue.
    pub struct ibv_cq {
        pub context: *mut ibv_context,
        pub channel: *mut ibv_comp_channel,
        pub cq_context: *mut c_void,
        pub handle: u32,
        pub cqe: c_int,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub comp_events_completed: u32,
        pub async_events_completed: u32,
    }

    /// `struct ibv_poll_cq_attr`.
    pub struct ibv_poll_cq_attr {
        pub comp_mask: u32,
    }

    /// `struct ibv_wc_tm_info`.
    pub struct ibv_wc_tm_info {
        pub tag: u64,
        pub priv_: u32,
    }

    /// `struct ibv_cq_ex`: [`ibv_cq`] and the extended poll API (`ibv_start_poll`,
    /// `ibv_next_poll`, `ibv_wc_read_*` call through these).
    pub struct ibv_cq_ex {
        pub context: *mut ibv_context,
        pub channel: *mut ibv_comp_channel,
        pub cq_context: *mut c_void,
        pub handle: u32,
        pub cqe: c_int,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub comp_events_completed: u32,
        pub async_events_completed: u32,
        pub comp_mask: u32,
        pub status: ibv_wc_status,
        pub wr_id: u64,
        pub start_poll: Op<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
        pub next_poll: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
        pub end_poll: Op<unsafe extern "C" fn(*mut ibv_cq_ex)>,
        pub read_opcode: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> ibv_wc_opcode>,
        pub read_vendor_err: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_byte_len: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_imm_data: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_qp_num: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_src_qp: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_wc_flags: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
        pub read_slid: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_sl: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
        pub read_dlid_path_bits: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
        pub read_completion_ts: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
        pub read_cvlan: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u16>,
        pub read_flow_tag: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
        pub read_tm_info: Op<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
        pub read_completion_wallclock_ns: Op<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    }

    /// `struct ibv_moderate_cq`.
    pub struct ibv_moderate_cq {
        pub cq_count: u16,
        pub cq_period: u16,
    }

    /// `struct ibv_modify_cq_attr`.
    pub struct ibv_modify_cq_attr {
        pub attr_mask: u32,
        pub moderate: ibv_moderate_cq,
    }

    /// `struct ibv_ah`: an address handle.
    pub struct ibv_ah {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub handle: u32,
    }

    /// `struct ibv_flow`: a steering rule.
    pub struct ibv_flow {
        pub comp_mask: u32,
        pub context: *mut ibv_context,
        pub handle: u32,
    }

    /// `struct ibv_flow_action`.
    pub struct ibv_flow_action {
        pub context: *mut ibv_context,
    }

    /// `struct _ibv_device_ops`: two slots no libibverbs has used for years, kept for
    /// the layout of [`ibv_device`].
    pub struct _ibv_device_ops {
        pub _dummy1: Op<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut ibv_context>,
        pub _dummy2: Op<unsafe extern "C" fn(*mut ibv_context)>,
    }

    /// `struct ibv_device`: one entry of `ibv_get_device_list`.
    pub struct ibv_device {
        pub _ops: _ibv_device_ops,
        pub node_type: ibv_node_type,
        pub transport_type: ibv_transport_type,
        /// NUL-terminated name (`rnic_0`).
        pub name: [c_char; 64],
        /// NUL-terminated name of the uverbs device.
        pub dev_name: [c_char; 64],
        /// NUL-terminated path of the uverbs device.
        pub dev_path: [c_char; 256],
        /// NUL-terminated sysfs directory of the device (`ibv_read_sysfs_file` reads
        /// below it).
        pub ibdev_path: [c_char; 256],
    }

    /// `struct ibv_context_ops`: the ops inline functions of verbs.h call (`poll_cq`,
    /// `req_notify_cq`, `post_send`, `post_recv`, `post_srq_recv`, the memory-window
    /// ops); the `_compat_*` slots are the entry points of headers from before
    /// [`verbs_context`].
    pub struct ibv_context_ops {
        pub _compat_query_device: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int>,
        /// Takes a `struct _compat_ibv_port_attr` ([`COMPAT_PORT_ATTR_LEN`] bytes).
        pub _compat_query_port: Op<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int>,
        pub _compat_alloc_pd: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_dealloc_pd: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_reg_mr: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_rereg_mr: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_dereg_mr: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub alloc_mw: Op<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
        pub bind_mw: Op<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
        pub dealloc_mw: Op<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
        pub _compat_create_cq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub poll_cq: Op<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
        pub req_notify_cq: Op<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
        pub _compat_cq_event: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_resize_cq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_cq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_create_srq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_modify_srq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_query_srq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_srq: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub post_srq_recv: Op<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
        pub _compat_create_qp: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_query_qp: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_modify_qp: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_qp: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub post_send: Op<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
        pub post_recv: Op<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
        pub _compat_create_ah: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_ah: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_attach_mcast: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_detach_mcast: Op<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_async_event: Op<unsafe extern "C" fn() -> *mut c_void>,
    }

    /// `struct ibv_context`: an opened device, as applications see it.
    pub struct ibv_context {
        pub device: *mut ibv_device,
        pub ops: ibv_context_ops,
        pub cmd_fd: c_int,
        pub async_fd: c_int,
        pub num_comp_vectors: c_int,
        pub mutex: pthread_mutex_t,
        /// [`VERBS_ABI_IS_EXTENDED`] when a [`verbs_context`] precedes the context.
        pub abi_compat: *mut c_void,
    }

    /// `struct ibv_cq_init_attr_ex`.
    pub struct ibv_cq_init_attr_ex {
        pub cqe: u32,
        pub cq_context: *mut c_void,
        pub channel: *mut ibv_comp_channel,
        pub comp_vector: u32,
        pub wc_flags: u64,
        pub comp_mask: u32,
        pub flags: u32,
        pub parent_domain: *mut ibv_pd,
    }

    /// `struct ibv_parent_domain_init_attr`.
    pub struct ibv_parent_domain_init_attr {
        pub pd: *mut ibv_pd,
        pub td: *mut ibv_td,
        pub comp_mask: u32,
        pub alloc: Op<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void>,
        pub free: Op<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
        pub pd_context: *mut c_void,
    }

    /// `struct ibv_counters_init_attr`.
    pub struct ibv_counters_init_attr {
        pub comp_mask: u32,
    }

    /// `struct ibv_counters`.
    pub struct ibv_counters {
        pub context: *mut ibv_context,
    }

    /// `struct ibv_counter_attach_attr`.
    pub struct ibv_counter_attach_attr {
        pub counter_desc: ibv_counter_description,
        pub index: u32,
        pub comp_mask: u32,
    }

    /// `struct ibv_values_ex`.
    pub struct ibv_values_ex {
        pub comp_mask: u32,
        pub raw_clock: timespec,
    }

    /// `struct verbs_context`: the extension a provider places in memory right before
    /// its [`ibv_context`]. verbs.h's inline functions find it by subtracting the offset
    /// of `context` from an `ibv_context *` (after checking `abi_compat`), and use an
    /// op only if it is non-null and `sz` says the provider's structure reaches it: new
    /// ops are added at the front, so an op is present when
    /// `sz >= size_of::<verbs_context>() - offset_of!(op)`.
    pub struct verbs_context {
        pub query_port: Op<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int>,
        pub advise_mr: Op<unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int>,
        pub alloc_null_mr: Op<unsafe extern "C" fn(*mut ibv_pd) -> *mut ibv_mr>,
        pub read_counters: Op<unsafe extern "C" fn(*mut ibv_counters, *mut u64, u32, u32) -> c_int>,
        pub attach_counters_point_flow: Op<unsafe extern "C" fn(*mut ibv_counters, *mut ibv_counter_attach_attr, *mut ibv_flow) -> c_int>,
        pub create_counters: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_counters_init_attr) -> *mut ibv_counters>,
        pub destroy_counters: Op<unsafe extern "C" fn(*mut ibv_counters) -> c_int>,
        pub reg_dm_mr: Op<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr>,
        pub alloc_dm: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
        pub free_dm: Op<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
        /// Takes a `struct ibv_flow_action_esp_attr` (not mirrored).
        pub modify_flow_action_esp: Op<unsafe extern "C" fn(*mut ibv_flow_action, *mut c_void) -> c_int>,
        pub destroy_flow_action: Op<unsafe extern "C" fn(*mut ibv_flow_action) -> c_int>,
        /// Takes a `struct ibv_flow_action_esp_attr` (not mirrored).
        pub create_flow_action_esp: Op<unsafe extern "C" fn(*mut ibv_context, *mut c_void) -> *mut ibv_flow_action>,
        pub modify_qp_rate_limit: Op<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int>,
        pub alloc_parent_domain: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd>,
        pub dealloc_td: Op<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
        pub alloc_td: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
        pub modify_cq: Op<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int>,
        pub post_srq_ops: Op<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int>,
        pub destroy_rwq_ind_table: Op<unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int>,
        pub create_rwq_ind_table: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_rwq_ind_table_init_attr) -> *mut ibv_rwq_ind_table>,
        pub destroy_wq: Op<unsafe extern "C" fn(*mut ibv_wq) -> c_int>,
        pub modify_wq: Op<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int>,
        pub create_wq: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq>,
        pub query_rt_values: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
        pub create_cq_ex: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
        /// libibverbs' private data (`struct verbs_ex_private`); unused here.
        pub priv_: *mut c_void,
        pub query_device_ex: Op<unsafe extern "C" fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex, usize) -> c_int>,
        pub ibv_destroy_flow: Op<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
        pub ABI_placeholder2: Op<unsafe extern "C" fn()>,
        /// Takes a `struct ibv_flow_attr` (not mirrored).
        pub ibv_create_flow: Op<unsafe extern "C" fn(*mut ibv_qp, *mut c_void) -> *mut ibv_flow>,
        pub ABI_placeholder1: Op<unsafe extern "C" fn()>,
        pub open_qp: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
        pub create_qp_ex: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
        pub get_srq_num: Op<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
        pub create_srq_ex: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
        pub open_xrcd: Op<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
        pub close_xrcd: Op<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
        pub _ABI_placeholder3: u64,
        /// The size of the provider's `verbs_context`: which ops it has (see above).
        pub sz: usize,
        /// Must be the last field: applications hold a pointer to it.
        pub context: ibv_context,
    }
}

constants! {
    /// `IBV_GID_TYPE_IB`.
    IBV_GID_TYPE_IB: ibv_gid_type = 0;
    /// `IBV_GID_TYPE_ROCE_V1`.
    IBV_GID_TYPE_ROCE_V1: ibv_gid_type = 1;
    /// `IBV_GID_TYPE_ROCE_V2`.
    IBV_GID_TYPE_ROCE_V2: ibv_gid_type = 2;

    /// `IBV_NODE_UNKNOWN`.
    IBV_NODE_UNKNOWN: ibv_node_type = -1;
    /// `IBV_NODE_CA`: a channel adapter, what an RDMA NIC is.
    IBV_NODE_CA: ibv_node_type = 1;
    /// `IBV_NODE_SWITCH`.
    IBV_NODE_SWITCH: ibv_node_type = 2;
    /// `IBV_NODE_ROUTER`.
    IBV_NODE_ROUTER: ibv_node_type = 3;
    /// `IBV_NODE_RNIC`: an iWARP NIC.
    IBV_NODE_RNIC: ibv_node_type = 4;
    /// `IBV_NODE_USNIC`.
    IBV_NODE_USNIC: ibv_node_type = 5;
    /// `IBV_NODE_USNIC_UDP`.
    IBV_NODE_USNIC_UDP: ibv_node_type = 6;
    /// `IBV_NODE_UNSPECIFIED`.
    IBV_NODE_UNSPECIFIED: ibv_node_type = 7;

    /// `IBV_TRANSPORT_UNKNOWN`.
    IBV_TRANSPORT_UNKNOWN: ibv_transport_type = -1;
    /// `IBV_TRANSPORT_IB`: InfiniBand transport, which RoCE is.
    IBV_TRANSPORT_IB: ibv_transport_type = 0;
    /// `IBV_TRANSPORT_IWARP`.
    IBV_TRANSPORT_IWARP: ibv_transport_type = 1;

    /// `IBV_DEVICE_RESIZE_MAX_WR`.
    IBV_DEVICE_RESIZE_MAX_WR: c_uint = 1;
    /// `IBV_DEVICE_CURR_QP_STATE_MOD`.
    IBV_DEVICE_CURR_QP_STATE_MOD: c_uint = 1 << 7;
    /// `IBV_DEVICE_SYS_IMAGE_GUID`: `sys_image_guid` is meaningful.
    IBV_DEVICE_SYS_IMAGE_GUID: c_uint = 1 << 11;
    /// `IBV_DEVICE_RC_RNR_NAK_GEN`: an RC responder answers a SEND without a receive
    /// with an RNR NAK.
    IBV_DEVICE_RC_RNR_NAK_GEN: c_uint = 1 << 12;
    /// `IBV_DEVICE_SRQ_RESIZE`.
    IBV_DEVICE_SRQ_RESIZE: c_uint = 1 << 13;
    /// `IBV_DEVICE_N_NOTIFY_CQ`.
    IBV_DEVICE_N_NOTIFY_CQ: c_uint = 1 << 14;
    /// `IBV_DEVICE_MEM_WINDOW`.
    IBV_DEVICE_MEM_WINDOW: c_uint = 1 << 17;
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2A`.
    IBV_DEVICE_MEM_WINDOW_TYPE_2A: c_uint = 1 << 23;
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
    IBV_DEVICE_MEM_WINDOW_TYPE_2B: c_uint = 1 << 24;
    /// `IBV_DEVICE_XRC`.
    IBV_DEVICE_XRC: c_uint = 1 << 20;
    /// `IBV_DEVICE_MEM_MGT_EXTENSIONS`.
    IBV_DEVICE_MEM_MGT_EXTENSIONS: c_uint = 1 << 21;
    /// `IBV_DEVICE_MANAGED_FLOW_STEERING`.
    IBV_DEVICE_MANAGED_FLOW_STEERING: c_uint = 1 << 29;

    /// `IBV_ATOMIC_NONE`.
    IBV_ATOMIC_NONE: ibv_atomic_cap = 0;
    /// `IBV_ATOMIC_HCA`: atomics are atomic against other atomics of the device.
    IBV_ATOMIC_HCA: ibv_atomic_cap = 1;
    /// `IBV_ATOMIC_GLOB`.
    IBV_ATOMIC_GLOB: ibv_atomic_cap = 2;

    /// `IBV_MTU_256`.
    IBV_MTU_256: ibv_mtu = 1;
    /// `IBV_MTU_512`.
    IBV_MTU_512: ibv_mtu = 2;
    /// `IBV_MTU_1024`.
    IBV_MTU_1024: ibv_mtu = 3;
    /// `IBV_MTU_2048`.
    IBV_MTU_2048: ibv_mtu = 4;
    /// `IBV_MTU_4096`.
    IBV_MTU_4096: ibv_mtu = 5;

    /// `IBV_PORT_NOP`.
    IBV_PORT_NOP: ibv_port_state = 0;
    /// `IBV_PORT_DOWN`.
    IBV_PORT_DOWN: ibv_port_state = 1;
    /// `IBV_PORT_INIT`.
    IBV_PORT_INIT: ibv_port_state = 2;
    /// `IBV_PORT_ARMED`.
    IBV_PORT_ARMED: ibv_port_state = 3;
    /// `IBV_PORT_ACTIVE`.
    IBV_PORT_ACTIVE: ibv_port_state = 4;
    /// `IBV_PORT_ACTIVE_DEFER`.
    IBV_PORT_ACTIVE_DEFER: ibv_port_state = 5;

    /// `IBV_LINK_LAYER_UNSPECIFIED`.
    IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
    /// `IBV_LINK_LAYER_INFINIBAND`.
    IBV_LINK_LAYER_INFINIBAND: u8 = 1;
    /// `IBV_LINK_LAYER_ETHERNET`: RoCE.
    IBV_LINK_LAYER_ETHERNET: u8 = 2;

    /// `IBV_PORT_CM_SUP`: the port takes connection-manager traffic.
    IBV_PORT_CM_SUP: u32 = 1 << 16;
    /// `IBV_PORT_IP_BASED_GIDS`: GIDs derive from IP addresses (RoCE).
    IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;
    /// `IBV_QPF_GRH_REQUIRED` (a bit of `ibv_port_attr::flags`): every address on the
    /// port needs a GRH, as on RoCE.
    IBV_QPF_GRH_REQUIRED: u8 = 1;

    /// `IBV_EVENT_CQ_ERR`.
    IBV_EVENT_CQ_ERR: ibv_event_type = 0;
    /// `IBV_EVENT_QP_FATAL`.
    IBV_EVENT_QP_FATAL: ibv_event_type = 1;
    /// `IBV_EVENT_QP_REQ_ERR`.
    IBV_EVENT_QP_REQ_ERR: ibv_event_type = 2;
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    IBV_EVENT_QP_ACCESS_ERR: ibv_event_type = 3;
    /// `IBV_EVENT_COMM_EST`.
    IBV_EVENT_COMM_EST: ibv_event_type = 4;
    /// `IBV_EVENT_SQ_DRAINED`.
    IBV_EVENT_SQ_DRAINED: ibv_event_type = 5;
    /// `IBV_EVENT_PATH_MIG`.
    IBV_EVENT_PATH_MIG: ibv_event_type = 6;
    /// `IBV_EVENT_PATH_MIG_ERR`.
    IBV_EVENT_PATH_MIG_ERR: ibv_event_type = 7;
    /// `IBV_EVENT_DEVICE_FATAL`.
    IBV_EVENT_DEVICE_FATAL: ibv_event_type = 8;
    /// `IBV_EVENT_PORT_ACTIVE`.
    IBV_EVENT_PORT_ACTIVE: ibv_event_type = 9;
    /// `IBV_EVENT_PORT_ERR`.
    IBV_EVENT_PORT_ERR: ibv_event_type = 10;
    /// `IBV_EVENT_LID_CHANGE`.
    IBV_EVENT_LID_CHANGE: ibv_event_type = 11;
    /// `IBV_EVENT_PKEY_CHANGE`.
    IBV_EVENT_PKEY_CHANGE: ibv_event_type = 12;
    /// `IBV_EVENT_SM_CHANGE`.
    IBV_EVENT_SM_CHANGE: ibv_event_type = 13;
    /// `IBV_EVENT_SRQ_ERR`.
    IBV_EVENT_SRQ_ERR: ibv_event_type = 14;
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    IBV_EVENT_SRQ_LIMIT_REACHED: ibv_event_type = 15;
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    IBV_EVENT_QP_LAST_WQE_REACHED: ibv_event_type = 16;
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    IBV_EVENT_CLIENT_REREGISTER: ibv_event_type = 17;
    /// `IBV_EVENT_GID_CHANGE`.
    IBV_EVENT_GID_CHANGE: ibv_event_type = 18;
    /// `IBV_EVENT_WQ_FATAL`.
    IBV_EVENT_WQ_FATAL: ibv_event_type = 19;

    /// `IBV_WC_SUCCESS`.
    IBV_WC_SUCCESS: ibv_wc_status = 0;
    /// `IBV_WC_LOC_LEN_ERR`.
    IBV_WC_LOC_LEN_ERR: ibv_wc_status = 1;
    /// `IBV_WC_LOC_QP_OP_ERR`.
    IBV_WC_LOC_QP_OP_ERR: ibv_wc_status = 2;
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    IBV_WC_LOC_EEC_OP_ERR: ibv_wc_status = 3;
    /// `IBV_WC_LOC_PROT_ERR`.
    IBV_WC_LOC_PROT_ERR: ibv_wc_status = 4;
    /// `IBV_WC_WR_FLUSH_ERR`.
    IBV_WC_WR_FLUSH_ERR: ibv_wc_status = 5;
    /// `IBV_WC_MW_BIND_ERR`.
    IBV_WC_MW_BIND_ERR: ibv_wc_status = 6;
    /// `IBV_WC_BAD_RESP_ERR`.
    IBV_WC_BAD_RESP_ERR: ibv_wc_status = 7;
    /// `IBV_WC_LOC_ACCESS_ERR`.
    IBV_WC_LOC_ACCESS_ERR: ibv_wc_status = 8;
    /// `IBV_WC_REM_INV_REQ_ERR`.
    IBV_WC_REM_INV_REQ_ERR: ibv_wc_status = 9;
    /// `IBV_WC_REM_ACCESS_ERR`.
    IBV_WC_REM_ACCESS_ERR: ibv_wc_status = 10;
    /// `IBV_WC_REM_OP_ERR`.
    IBV_WC_REM_OP_ERR: ibv_wc_status = 11;
    /// `IBV_WC_RETRY_EXC_ERR`.
    IBV_WC_RETRY_EXC_ERR: ibv_wc_status = 12;
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    IBV_WC_RNR_RETRY_EXC_ERR: ibv_wc_status = 13;
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    IBV_WC_LOC_RDD_VIOL_ERR: ibv_wc_status = 14;
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    IBV_WC_REM_INV_RD_REQ_ERR: ibv_wc_status = 15;
    /// `IBV_WC_REM_ABORT_ERR`.
    IBV_WC_REM_ABORT_ERR: ibv_wc_status = 16;
    /// `IBV_WC_INV_EECN_ERR`.
    IBV_WC_INV_EECN_ERR: ibv_wc_status = 17;
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    IBV_WC_INV_EEC_STATE_ERR: ibv_wc_status = 18;
    /// `IBV_WC_FATAL_ERR`.
    IBV_WC_FATAL_ERR: ibv_wc_status = 19;
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    IBV_WC_RESP_TIMEOUT_ERR: ibv_wc_status = 20;
    /// `IBV_WC_GENERAL_ERR`.
    IBV_WC_GENERAL_ERR: ibv_wc_status = 21;
    /// `IBV_WC_TM_ERR`.
    IBV_WC_TM_ERR: ibv_wc_status = 22;
    /// `IBV_WC_TM_RNDV_INCOMPLETE`.
    IBV_WC_TM_RNDV_INCOMPLETE: ibv_wc_status = 23;

    /// `IBV_WC_SEND`.
    IBV_WC_SEND: ibv_wc_opcode = 0;
    /// `IBV_WC_RDMA_WRITE`.
    IBV_WC_RDMA_WRITE: ibv_wc_opcode = 1;
    /// `IBV_WC_RDMA_READ`.
    IBV_WC_RDMA_READ: ibv_wc_opcode = 2;
    /// `IBV_WC_COMP_SWAP`.
    IBV_WC_COMP_SWAP: ibv_wc_opcode = 3;
    /// `IBV_WC_FETCH_ADD`.
    IBV_WC_FETCH_ADD: ibv_wc_opcode = 4;
    /// `IBV_WC_BIND_MW`.
    IBV_WC_BIND_MW: ibv_wc_opcode = 5;
    /// `IBV_WC_LOCAL_INV`.
    IBV_WC_LOCAL_INV: ibv_wc_opcode = 6;
    /// `IBV_WC_TSO`.
    IBV_WC_TSO: ibv_wc_opcode = 7;
    /// `IBV_WC_FLUSH`.
    IBV_WC_FLUSH: ibv_wc_opcode = 8;
    /// `IBV_WC_ATOMIC_WRITE`.
    IBV_WC_ATOMIC_WRITE: ibv_wc_opcode = 9;
    /// `IBV_WC_RECV`: receive completions have this bit.
    IBV_WC_RECV: ibv_wc_opcode = 1 << 7;
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    IBV_WC_RECV_RDMA_WITH_IMM: ibv_wc_opcode = (1 << 7) + 1;

    /// `IBV_WC_GRH`.
    IBV_WC_GRH: c_uint = 1;
    /// `IBV_WC_WITH_IMM`.
    IBV_WC_WITH_IMM: c_uint = 1 << 1;
    /// `IBV_WC_WITH_INV`.
    IBV_WC_WITH_INV: c_uint = 1 << 3;

    /// `IBV_ACCESS_LOCAL_WRITE`.
    IBV_ACCESS_LOCAL_WRITE: c_uint = 1;
    /// `IBV_ACCESS_REMOTE_WRITE`.
    IBV_ACCESS_REMOTE_WRITE: c_uint = 1 << 1;
    /// `IBV_ACCESS_REMOTE_READ`.
    IBV_ACCESS_REMOTE_READ: c_uint = 1 << 2;
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    IBV_ACCESS_REMOTE_ATOMIC: c_uint = 1 << 3;
    /// `IBV_ACCESS_MW_BIND`.
    IBV_ACCESS_MW_BIND: c_uint = 1 << 4;
    /// `IBV_ACCESS_ZERO_BASED`.
    IBV_ACCESS_ZERO_BASED: c_uint = 1 << 5;
    /// `IBV_ACCESS_ON_DEMAND`.
    IBV_ACCESS_ON_DEMAND: c_uint = 1 << 6;
    /// `IBV_ACCESS_HUGETLB`: a hint that the memory is hugetlb pages.
    IBV_ACCESS_HUGETLB: c_uint = 1 << 7;
    /// `IBV_ACCESS_FLUSH_GLOBAL`.
    IBV_ACCESS_FLUSH_GLOBAL: c_uint = 1 << 8;
    /// `IBV_ACCESS_FLUSH_PERSISTENT`.
    IBV_ACCESS_FLUSH_PERSISTENT: c_uint = 1 << 9;
    /// `IBV_ACCESS_RELAXED_ORDERING`: the first of the optional access bits, which a
    /// device may ignore.
    IBV_ACCESS_RELAXED_ORDERING: c_uint = 1 << 20;
    /// `IBV_ACCESS_OPTIONAL_RANGE`: the access bits a device may ignore.
    IBV_ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

    /// `IBV_QPT_RC`.
    IBV_QPT_RC: ibv_qp_type = 2;
    /// `IBV_QPT_UC`.
    IBV_QPT_UC: ibv_qp_type = 3;
    /// `IBV_QPT_UD`.
    IBV_QPT_UD: ibv_qp_type = 4;
    /// `IBV_QPT_RAW_PACKET`.
    IBV_QPT_RAW_PACKET: ibv_qp_type = 8;
    /// `IBV_QPT_XRC_SEND`.
    IBV_QPT_XRC_SEND: ibv_qp_type = 9;
    /// `IBV_QPT_XRC_RECV`.
    IBV_QPT_XRC_RECV: ibv_qp_type = 10;
    /// `IBV_QPT_DRIVER`.
    IBV_QPT_DRIVER: ibv_qp_type = 0xff;

    /// `IBV_QP_INIT_ATTR_PD`.
    IBV_QP_INIT_ATTR_PD: u32 = 1;
    /// `IBV_QP_INIT_ATTR_XRCD`.
    IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
    /// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
    IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
    /// `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`.
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER: u32 = 1 << 3;
    /// `IBV_QP_INIT_ATTR_IND_TABLE`.
    IBV_QP_INIT_ATTR_IND_TABLE: u32 = 1 << 4;
    /// `IBV_QP_INIT_ATTR_RX_HASH`.
    IBV_QP_INIT_ATTR_RX_HASH: u32 = 1 << 5;
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

    /// `IBV_QP_EX_WITH_RDMA_WRITE`.
    IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1;
    /// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `IBV_QP_EX_WITH_SEND`.
    IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
    /// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
    IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
    /// `IBV_QP_EX_WITH_RDMA_READ`.
    IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
    /// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// `IBV_QP_EX_WITH_LOCAL_INV`.
    IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
    /// `IBV_QP_EX_WITH_BIND_MW`.
    IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
    /// `IBV_QP_EX_WITH_SEND_WITH_INV`.
    IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
    /// `IBV_QP_EX_WITH_TSO`.
    IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
    /// `IBV_QP_EX_WITH_FLUSH`.
    IBV_QP_EX_WITH_FLUSH: u64 = 1 << 11;
    /// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
    IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

    /// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
    IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
    /// `IBV_CQ_INIT_ATTR_MASK_PD`: the CQ belongs to a parent domain.
    IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
    /// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`.
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;
    /// `IBV_WC_EX_WITH_BYTE_LEN`.
    IBV_WC_EX_WITH_BYTE_LEN: u64 = 1;
    /// `IBV_WC_EX_WITH_IMM`.
    IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
    /// `IBV_WC_EX_WITH_QP_NUM`.
    IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
    /// `IBV_WC_EX_WITH_SRC_QP`.
    IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
    /// `IBV_WC_EX_WITH_SLID`.
    IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
    /// `IBV_WC_EX_WITH_SL`.
    IBV_WC_EX_WITH_SL: u64 = 1 << 5;
    /// `IBV_WC_EX_WITH_DLID_PATH_BITS`.
    IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
    /// `IBV_WC_STANDARD_FLAGS`: the fields of a plain `ibv_wc`.
    IBV_WC_STANDARD_FLAGS: u64 = 0x7f;

    /// `IBV_SRQ_MAX_WR`.
    IBV_SRQ_MAX_WR: c_int = 1;
    /// `IBV_SRQ_LIMIT`.
    IBV_SRQ_LIMIT: c_int = 1 << 1;
    /// `IBV_SRQT_BASIC`.
    IBV_SRQT_BASIC: ibv_srq_type = 0;
    /// `IBV_SRQ_INIT_ATTR_TYPE`.
    IBV_SRQ_INIT_ATTR_TYPE: u32 = 1;
    /// `IBV_SRQ_INIT_ATTR_PD`.
    IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;

    /// `IBV_REREG_MR_CHANGE_TRANSLATION`.
    IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
    /// `IBV_REREG_MR_CHANGE_PD`.
    IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
    /// `IBV_REREG_MR_CHANGE_ACCESS`.
    IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
    /// `IBV_REREG_MR_FLAGS_SUPPORTED`.
    IBV_REREG_MR_FLAGS_SUPPORTED: c_int = (1 << 3) - 1;
    /// `IBV_REREG_MR_ERR_INPUT`.
    IBV_REREG_MR_ERR_INPUT: c_int = -1;
    /// `IBV_REREG_MR_ERR_DONT_FORK_NEW`.
    IBV_REREG_MR_ERR_DONT_FORK_NEW: c_int = -2;
    /// `IBV_REREG_MR_ERR_DO_FORK_OLD`.
    IBV_REREG_MR_ERR_DO_FORK_OLD: c_int = -3;
    /// `IBV_REREG_MR_ERR_CMD`.
    IBV_REREG_MR_ERR_CMD: c_int = -4;
    /// `IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW`.
    IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: c_int = -5;

    /// `IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS`.
    IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS: u32 = 1;
    /// `IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG`.
    IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG: c_int = 1;
    /// `IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES`.
    IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES: c_int = 1 << 1;

    /// `IBV_RATE_MAX`.
    IBV_RATE_MAX: ibv_rate = 0;
    /// `IBV_RATE_2_5_GBPS`.
    IBV_RATE_2_5_GBPS: ibv_rate = 2;
    /// `IBV_RATE_5_GBPS`.
    IBV_RATE_5_GBPS: ibv_rate = 5;
    /// `IBV_RATE_10_GBPS`.
    IBV_RATE_10_GBPS: ibv_rate = 3;
    /// `IBV_RATE_20_GBPS`.
    IBV_RATE_20_GBPS: ibv_rate = 6;
    /// `IBV_RATE_30_GBPS`.
    IBV_RATE_30_GBPS: ibv_rate = 4;
    /// `IBV_RATE_40_GBPS`.
    IBV_RATE_40_GBPS: ibv_rate = 7;
    /// `IBV_RATE_60_GBPS`.
    IBV_RATE_60_GBPS: ibv_rate = 8;
    /// `IBV_RATE_80_GBPS`.
    IBV_RATE_80_GBPS: ibv_rate = 9;
    /// `IBV_RATE_120_GBPS`.
    IBV_RATE_120_GBPS: ibv_rate = 10;
    /// `IBV_RATE_14_GBPS`.
    IBV_RATE_14_GBPS: ibv_rate = 11;
    /// `IBV_RATE_56_GBPS`.
    IBV_RATE_56_GBPS: ibv_rate = 12;
    /// `IBV_RATE_112_GBPS`.
    IBV_RATE_112_GBPS: ibv_rate = 13;
    /// `IBV_RATE_168_GBPS`.
    IBV_RATE_168_GBPS: ibv_rate = 14;
    /// `IBV_RATE_25_GBPS`.
    IBV_RATE_25_GBPS: ibv_rate = 15;
    /// `IBV_RATE_100_GBPS`.
    IBV_RATE_100_GBPS: ibv_rate = 16;
    /// `IBV_RATE_200_GBPS`.
    IBV_RATE_200_GBPS: ibv_rate = 17;
    /// `IBV_RATE_300_GBPS`.
    IBV_RATE_300_GBPS: ibv_rate = 18;
    /// `IBV_RATE_28_GBPS`.
    IBV_RATE_28_GBPS: ibv_rate = 19;
    /// `IBV_RATE_50_GBPS`.
    IBV_RATE_50_GBPS: ibv_rate = 20;
    /// `IBV_RATE_400_GBPS`.
    IBV_RATE_400_GBPS: ibv_rate = 21;
    /// `IBV_RATE_600_GBPS`.
    IBV_RATE_600_GBPS: ibv_rate = 22;
    /// `IBV_RATE_800_GBPS`.
    IBV_RATE_800_GBPS: ibv_rate = 23;
    /// `IBV_RATE_1200_GBPS`.
    IBV_RATE_1200_GBPS: ibv_rate = 24;

    /// `IBV_FORK_DISABLED`.
    IBV_FORK_DISABLED: u32 = 0;
    /// `IBV_FORK_ENABLED`.
    IBV_FORK_ENABLED: u32 = 1;
    /// `IBV_FORK_UNNEEDED`.
    IBV_FORK_UNNEEDED: u32 = 2;

    /// `IBV_QP_STATE`.
    IBV_QP_STATE: c_int = 1;
    /// `IBV_QP_CUR_STATE`.
    IBV_QP_CUR_STATE: c_int = 1 << 1;
    /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
    IBV_QP_EN_SQD_ASYNC_NOTIFY: c_int = 1 << 2;
    /// `IBV_QP_ACCESS_FLAGS`.
    IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`.
    IBV_QP_PKEY_INDEX: c_int = 1 << 4;
    /// `IBV_QP_PORT`.
    IBV_QP_PORT: c_int = 1 << 5;
    /// `IBV_QP_QKEY`.
    IBV_QP_QKEY: c_int = 1 << 6;
    /// `IBV_QP_AV`.
    IBV_QP_AV: c_int = 1 << 7;
    /// `IBV_QP_PATH_MTU`.
    IBV_QP_PATH_MTU: c_int = 1 << 8;
    /// `IBV_QP_TIMEOUT`.
    IBV_QP_TIMEOUT: c_int = 1 << 9;
    /// `IBV_QP_RETRY_CNT`.
    IBV_QP_RETRY_CNT: c_int = 1 << 10;
    /// `IBV_QP_RNR_RETRY`.
    IBV_QP_RNR_RETRY: c_int = 1 << 11;
    /// `IBV_QP_RQ_PSN`.
    IBV_QP_RQ_PSN: c_int = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
    /// `IBV_QP_ALT_PATH`.
    IBV_QP_ALT_PATH: c_int = 1 << 14;
    /// `IBV_QP_MIN_RNR_TIMER`.
    IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
    /// `IBV_QP_SQ_PSN`.
    IBV_QP_SQ_PSN: c_int = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
    /// `IBV_QP_PATH_MIG_STATE`.
    IBV_QP_PATH_MIG_STATE: c_int = 1 << 18;
    /// `IBV_QP_CAP`.
    IBV_QP_CAP: c_int = 1 << 19;
    /// `IBV_QP_DEST_QPN`.
    IBV_QP_DEST_QPN: c_int = 1 << 20;
    /// `IBV_QP_RATE_LIMIT`.
    IBV_QP_RATE_LIMIT: c_int = 1 << 25;

    /// `IBV_QPS_RESET`.
    IBV_QPS_RESET: ibv_qp_state = 0;
    /// `IBV_QPS_INIT`.
    IBV_QPS_INIT: ibv_qp_state = 1;
    /// `IBV_QPS_RTR`.
    IBV_QPS_RTR: ibv_qp_state = 2;
    /// `IBV_QPS_RTS`.
    IBV_QPS_RTS: ibv_qp_state = 3;
    /// `IBV_QPS_SQD`.
    IBV_QPS_SQD: ibv_qp_state = 4;
    /// `IBV_QPS_SQE`.
    IBV_QPS_SQE: ibv_qp_state = 5;
    /// `IBV_QPS_ERR`.
    IBV_QPS_ERR: ibv_qp_state = 6;
    /// `IBV_QPS_UNKNOWN`.
    IBV_QPS_UNKNOWN: ibv_qp_state = 7;

    /// `IBV_WR_RDMA_WRITE`.
    IBV_WR_RDMA_WRITE: ibv_wr_opcode = 0;
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    IBV_WR_RDMA_WRITE_WITH_IMM: ibv_wr_opcode = 1;
    /// `IBV_WR_SEND`.
    IBV_WR_SEND: ibv_wr_opcode = 2;
    /// `IBV_WR_SEND_WITH_IMM`.
    IBV_WR_SEND_WITH_IMM: ibv_wr_opcode = 3;
    /// `IBV_WR_RDMA_READ`.
    IBV_WR_RDMA_READ: ibv_wr_opcode = 4;
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    IBV_WR_ATOMIC_CMP_AND_SWP: ibv_wr_opcode = 5;
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    IBV_WR_ATOMIC_FETCH_AND_ADD: ibv_wr_opcode = 6;
    /// `IBV_WR_LOCAL_INV`.
    IBV_WR_LOCAL_INV: ibv_wr_opcode = 7;
    /// `IBV_WR_BIND_MW`.
    IBV_WR_BIND_MW: ibv_wr_opcode = 8;
    /// `IBV_MW_TYPE_1`.
    IBV_MW_TYPE_1: ibv_mw_type = 1;
    /// `IBV_MW_TYPE_2`.
    IBV_MW_TYPE_2: ibv_mw_type = 2;
    /// `IBV_WR_SEND_WITH_INV`.
    IBV_WR_SEND_WITH_INV: ibv_wr_opcode = 9;
    /// `IBV_WR_TSO`.
    IBV_WR_TSO: ibv_wr_opcode = 10;
    /// `IBV_WR_DRIVER1`.
    IBV_WR_DRIVER1: ibv_wr_opcode = 11;
    /// `IBV_WR_FLUSH`.
    IBV_WR_FLUSH: ibv_wr_opcode = 14;
    /// `IBV_WR_ATOMIC_WRITE`.
    IBV_WR_ATOMIC_WRITE: ibv_wr_opcode = 15;

    /// `IBV_SEND_FENCE`.
    IBV_SEND_FENCE: c_uint = 1;
    /// `IBV_SEND_SIGNALED`.
    IBV_SEND_SIGNALED: c_uint = 1 << 1;
    /// `IBV_SEND_SOLICITED`.
    IBV_SEND_SOLICITED: c_uint = 1 << 2;
    /// `IBV_SEND_INLINE`.
    IBV_SEND_INLINE: c_uint = 1 << 3;

    /// `IBV_SYSFS_NAME_MAX`: the size of [`ibv_device`]'s names.
    IBV_SYSFS_NAME_MAX: usize = 64;
    /// `IBV_SYSFS_PATH_MAX`: the size of [`ibv_device`]'s paths.
    IBV_SYSFS_PATH_MAX: usize = 256;
}

/// What a receive that carried a GRH reports as its service level: the packet type of
/// RoCE v2 over IPv4 (bit 3, UDP-encapsulated; bits 2:0, `2`, IPv4), which is all rnic
/// carries.
///
/// RoCE has no service levels, and Ethernet RDMA devices put the received packet's type
/// in `sl` instead, as mlx5's CQEs do; UCX 1.18's UD transport reads it (`sl & 7 == 2`)
/// to find the destination IPv4 address at the end of the receive buffer's 40-byte GRH
/// space, and drops the packet as addressed to someone else when it reads anything
/// else. Receives without a GRH (RC) report 0, as rxe does.
pub const ROCE_V2_IPV4_PACKET_TYPE: u8 = 0x8 | 0x2;

/// The `ibv_wc::wc_flags` of a device completion's flags byte: the bits ibverbs defines
/// (GRH, immediate, invalidate), which the device sets with ibverbs' values; rnic's own
/// bits (solicited) are dropped.
pub fn wc_flags_of(device_flags: u8) -> c_uint {
    c_uint::from(device_flags) & (IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV)
}

/// The `ibv_wc::sl` of a device completion with flags `device_flags`: see
/// [`ROCE_V2_IPV4_PACKET_TYPE`].
pub fn wc_sl_of(device_flags: u8) -> u8 {
    if c_uint::from(device_flags) & IBV_WC_GRH != 0 {
        ROCE_V2_IPV4_PACKET_TYPE
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_fields_lose_their_underscore_in_c() {
        assert_eq!(c_field_name("type_"), "type");
        assert_eq!(c_field_name("priv_"), "priv");
        assert_eq!(c_field_name("_ops"), "_ops");
        assert_eq!(c_field_name("sz"), "sz");
    }

    #[test]
    fn the_context_is_the_last_field_of_verbs_context() {
        // verbs.h finds the verbs_context by subtracting this offset from the
        // ibv_context pointer; nothing may follow the context.
        assert_eq!(
            offset_of!(verbs_context, context) + size_of::<ibv_context>(),
            size_of::<verbs_context>()
        );
        assert_eq!(
            offset_of!(verbs_context, sz) + size_of::<usize>(),
            offset_of!(verbs_context, context)
        );
    }

    #[test]
    fn the_compat_port_attr_ends_before_port_cap_flags2() {
        // 8 four-byte fields, 3 two-byte ones, 10 bytes: 48.
        assert_eq!(COMPAT_PORT_ATTR_LEN, 48);
    }

    #[test]
    fn every_type_and_constant_is_listed_once() {
        let layouts = layouts();
        let mut names: Vec<_> = layouts.iter().map(|l| l.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), layouts.len());
        for (name, _) in ANONYMOUS_C_TYPES {
            assert!(names.contains(name), "{name} is not a mirror");
        }
        let mut consts: Vec<_> = CONSTANTS.iter().map(|c| c.0).collect();
        consts.sort_unstable();
        consts.dedup();
        assert_eq!(consts.len(), CONSTANTS.len());
    }

    #[test]
    fn zeroed_gives_null_ops() {
        let ops = ibv_context_ops::zeroed();
        assert!(ops.poll_cq.is_none() && ops.post_send.is_none());
        let ctx = verbs_context::zeroed();
        assert!(ctx.query_device_ex.is_none());
        assert!(ctx.context.device.is_null());
    }
}
