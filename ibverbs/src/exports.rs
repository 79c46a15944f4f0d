//! The C entry points of libibverbs.so.1 and the version each is exported with.
//!
//! rustc gives a cdylib a version script of its own in which every Rust symbol it
//! exports is unversioned, and the linker cannot merge that with named version nodes.
//! So the entry points are not Rust exports: each is an ordinary (mangled) Rust
//! function, and a two-instruction assembler stub with the C name jumps to it. rustc
//! does not know the stubs, and libibverbs.map gives each its version node. (An alias,
//! `.set name, target`, would save the jump but only works when the Rust function lands
//! in the same object file as the alias, which codegen units do not promise.) The list
//! below makes the stubs and records the versions; a unit test holds it and
//! libibverbs.map to each other, and the linker (`--no-undefined-version`) refuses a
//! map that names a symbol no stub defines.

/// The instruction of a stub that jumps to its Rust function.
#[cfg(target_arch = "x86_64")]
macro_rules! jump {
    () => {
        "jmp {}"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! jump {
    () => {
        "b {}"
    };
}

/// Makes the stub `name` of each `module::name` and [`EXPORTS`].
macro_rules! exports {
    ($( $version:literal { $( $module:ident :: $name:ident ),* $(,)? } )*) => {
        $($(
            std::arch::global_asm!(
                ".pushsection .text",
                concat!(".globl ", stringify!($name)),
                concat!(".type ", stringify!($name), ", @function"),
                ".p2align 4",
                concat!(stringify!($name), ":"),
                jump!(),
                concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
                ".popsection",
                sym crate::$module::$name,
            );
        )*)*

        /// Every exported symbol with its version node, as libibverbs.map has them.
        pub const EXPORTS: &[(&str, &str)] = &[$($( (stringify!($name), $version) ),*),*];
    };
}

exports! {
    "IBVERBS_1.0" {
        events::ibv_create_comp_channel,
        events::ibv_destroy_comp_channel,
        provider::ibv_copy_path_rec_from_kern,
        provider::ibv_copy_qp_attr_from_kern,
        sysfs::ibv_get_sysfs_path,
        sysfs::ibv_read_sysfs_file,
    }
    "IBVERBS_1.1" {
        ah::ibv_create_ah,
        ah::ibv_create_ah_from_wc,
        ah::ibv_destroy_ah,
        ah::ibv_init_ah_from_wc,
        context::ibv_close_device,
        context::ibv_open_device,
        cq::ibv_create_cq,
        cq::ibv_destroy_cq,
        device::ibv_free_device_list,
        device::ibv_get_device_guid,
        device::ibv_get_device_list,
        device::ibv_get_device_name,
        events::ibv_ack_async_event,
        events::ibv_ack_cq_events,
        events::ibv_get_async_event,
        events::ibv_get_cq_event,
        pd::ibv_alloc_pd,
        pd::ibv_dealloc_pd,
        pd::ibv_dereg_mr,
        pd::ibv_dofork_range,
        pd::ibv_dontfork_range,
        pd::ibv_fork_init,
        pd::ibv_reg_mr,
        provider::ibv_attach_mcast,
        provider::ibv_copy_ah_attr_from_kern,
        provider::ibv_detach_mcast,
        provider::ibv_resize_cq,
        provider::ibv_resolve_eth_l2_from_gid,
        qp::ibv_create_qp,
        qp::ibv_destroy_qp,
        qp::ibv_modify_qp,
        qp::ibv_query_qp,
        query::ibv_query_device,
        query::ibv_query_gid,
        query::ibv_query_pkey,
        query::ibv_query_port,
        srq::ibv_create_srq,
        srq::ibv_destroy_srq,
        srq::ibv_modify_srq,
        srq::ibv_query_srq,
        strings::ibv_event_type_str,
        strings::ibv_node_type_str,
        strings::ibv_port_state_str,
        strings::ibv_wc_status_str,
    }
    "IBVERBS_1.5" {
        query::ibv_get_pkey_index,
    }
    "IBVERBS_1.6" {
        qp::ibv_qp_to_qp_ex,
    }
    "IBVERBS_1.7" {
        pd::ibv_reg_mr_iova,
    }
    "IBVERBS_1.8" {
        pd::ibv_reg_mr_iova2,
    }
    "IBVERBS_1.9" {
        device::ibv_get_device_index,
    }
    "IBVERBS_1.10" {
        provider::ibv_query_ece,
        provider::ibv_set_ece,
    }
    "IBVERBS_1.11" {
        query::_ibv_query_gid_ex,
        query::_ibv_query_gid_table,
    }
    "IBVERBS_1.12" {
        pd::ibv_reg_dmabuf_mr,
    }
    "IBVERBS_1.13" {
        pd::ibv_is_fork_initialized,
    }
    "IBVERBS_PRIVATE_34" {
        provider::__verbs_log,
        provider::_verbs_init_and_alloc_context,
        provider::execute_ioctl,
        provider::ibv_cmd_advise_mr,
        provider::ibv_cmd_alloc_dm,
        provider::ibv_cmd_alloc_mw,
        provider::ibv_cmd_alloc_pd,
        provider::ibv_cmd_attach_mcast,
        provider::ibv_cmd_close_xrcd,
        provider::ibv_cmd_create_ah,
        provider::ibv_cmd_create_counters,
        provider::ibv_cmd_create_cq_ex,
        provider::ibv_cmd_create_cq_ex2,
        provider::ibv_cmd_create_flow,
        provider::ibv_cmd_create_flow_action_esp,
        provider::ibv_cmd_create_qp_ex,
        provider::ibv_cmd_create_qp_ex2,
        provider::ibv_cmd_create_rwq_ind_table,
        provider::ibv_cmd_create_srq,
        provider::ibv_cmd_create_srq_ex,
        provider::ibv_cmd_create_wq,
        provider::ibv_cmd_dealloc_mw,
        provider::ibv_cmd_dealloc_pd,
        provider::ibv_cmd_dereg_mr,
        provider::ibv_cmd_destroy_ah,
        provider::ibv_cmd_destroy_counters,
        provider::ibv_cmd_destroy_cq,
        provider::ibv_cmd_destroy_flow,
        provider::ibv_cmd_destroy_flow_action,
        provider::ibv_cmd_destroy_qp,
        provider::ibv_cmd_destroy_rwq_ind_table,
        provider::ibv_cmd_destroy_srq,
        provider::ibv_cmd_destroy_wq,
        provider::ibv_cmd_detach_mcast,
        provider::ibv_cmd_free_dm,
        provider::ibv_cmd_get_context,
        provider::ibv_cmd_modify_cq,
        provider::ibv_cmd_modify_flow_action_esp,
        provider::ibv_cmd_modify_qp,
        provider::ibv_cmd_modify_qp_ex,
        provider::ibv_cmd_modify_srq,
        provider::ibv_cmd_modify_wq,
        provider::ibv_cmd_open_qp,
        provider::ibv_cmd_open_xrcd,
        provider::ibv_cmd_query_context,
        provider::ibv_cmd_query_device_any,
        provider::ibv_cmd_query_mr,
        provider::ibv_cmd_query_port,
        provider::ibv_cmd_query_qp,
        provider::ibv_cmd_query_srq,
        provider::ibv_cmd_read_counters,
        provider::ibv_cmd_reg_dm_mr,
        provider::ibv_cmd_reg_dmabuf_mr,
        provider::ibv_cmd_reg_mr,
        provider::ibv_cmd_rereg_mr,
        provider::ibv_cmd_resize_cq,
        provider::verbs_init_cq,
        provider::verbs_open_device,
        provider::verbs_register_driver_34,
        provider::verbs_set_ops,
        provider::verbs_uninit_context,
        query::ibv_query_gid_type,
        strings::ibv_wr_opcode_str,
    }
}

// `verbs_allow_disassociate_destroy`: a `bool` of libibverbs' provider interface that
// libmlx5 reads (whether a destroy may succeed after the device went away). A data
// object, so no stub: one byte, false, as rdma-core leaves it until a provider sets it.
std::arch::global_asm!(
    ".pushsection .data",
    ".globl verbs_allow_disassociate_destroy",
    ".type verbs_allow_disassociate_destroy, @object",
    ".size verbs_allow_disassociate_destroy, 1",
    "verbs_allow_disassociate_destroy:",
    ".byte 0",
    ".popsection",
);

/// The exported data objects with their version nodes, as libibverbs.map has them.
pub const DATA_EXPORTS: &[(&str, &str)] =
    &[("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34")];

/// The version nodes of a version script and the symbols of each, in file order:
/// `NODE { global: a; b; local: *; } PARENT;` (comments, `local` patterns and parents
/// are skipped).
pub fn parse_version_script(text: &str) -> Vec<(String, Vec<String>)> {
    let mut without_comments = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        without_comments.push_str(&rest[..start]);
        rest = rest[start..]
            .find("*/")
            .map_or("", |end| &rest[start + end + 2..]);
    }
    without_comments.push_str(rest);

    let mut nodes = Vec::new();
    let mut rest = without_comments.as_str();
    while let Some(open) = rest.find('{') {
        let name = rest[..open]
            .split([';', '}'])
            .next_back()
            .unwrap_or("")
            .trim()
            .to_string();
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
        let body = &rest[open + 1..close];
        let mut symbols = Vec::new();
        let mut local = false;
        for item in body.split(';') {
            let mut item = item.trim();
            if let Some(after) = item.strip_prefix("global:") {
                local = false;
                item = after.trim();
            } else if let Some(after) = item.strip_prefix("local:") {
                local = true;
                item = after.trim();
            }
            if !local && !item.is_empty() {
                symbols.push(item.to_string());
            }
        }
        nodes.push((name, symbols));
        rest = rest.get(close + 1..).unwrap_or("");
        // Skip the parent name and the `;` that end the node.
        rest = rest.find(';').map_or("", |semi| &rest[semi + 1..]);
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = include_str!("../libibverbs.map");

    #[test]
    fn the_map_parser_reads_nodes_symbols_and_parents() {
        let nodes = parse_version_script(
            "/* c */ A_1 { global: x; y; local: *; };\nA_2 { global: z; } A_1;\nA_3 { } A_2;",
        );
        assert_eq!(
            nodes,
            [
                ("A_1".to_string(), vec!["x".to_string(), "y".to_string()]),
                ("A_2".to_string(), vec!["z".to_string()]),
                ("A_3".to_string(), vec![]),
            ]
        );
    }

    #[test]
    fn libibverbs_map_and_the_exports_agree() {
        let mut from_map: Vec<(String, String)> = parse_version_script(MAP)
            .into_iter()
            .flat_map(|(node, syms)| syms.into_iter().map(move |s| (s, node.clone())))
            .collect();
        let mut from_code: Vec<(String, String)> = EXPORTS
            .iter()
            .chain(DATA_EXPORTS)
            .map(|&(s, v)| (s.to_string(), v.to_string()))
            .collect();
        from_map.sort();
        from_code.sort();
        assert_eq!(from_map, from_code);
    }

    #[test]
    fn the_map_defines_every_node_rdma_core_has() {
        let nodes: Vec<String> = parse_version_script(MAP).into_iter().map(|n| n.0).collect();
        let mut want: Vec<String> = ["1.0", "1.1", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10"]
            .iter()
            .chain(&["1.11", "1.12", "1.13", "1.14"])
            .map(|v| format!("IBVERBS_{v}"))
            .collect();
        want.push("IBVERBS_PRIVATE_34".into());
        assert_eq!(nodes, want);
    }
}
