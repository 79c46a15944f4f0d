//! The C entry points of libibverbs.so.1 and the version each is exported with.
//!
//! The library exports exactly the public ABI of Debian's libibverbs.so.1: every symbol
//! it exports at its default version, listed with its version node in symbols.txt
//! (gen-symbols.sh makes that from Debian's library; build.rs makes the version script
//! from it). A unit test below holds [`EXPORTS`] and [`DATA_EXPORTS`] to symbols.txt,
//! the linker (`--no-undefined-version`) refuses a version script that names a symbol no
//! stub defines, and tests/exports.rs compares the built library's dynamic symbols with
//! Debian's library itself.
//!
//! rustc gives a cdylib a version script of its own in which every Rust symbol it
//! exports is unversioned, and the linker cannot merge that with named version nodes.
//! So the entry points are not Rust exports: each is an ordinary (mangled) Rust
//! function, and a two-instruction assembler stub with the C name jumps to it. rustc
//! does not know the stubs, and the version script gives each its version node. (An
//! alias, `.set name, target`, would save the jump but only works when the Rust function
//! lands in the same object file as the alias, which codegen units do not promise.)

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

        /// Every exported function with its version node, as symbols.txt has them.
        pub const EXPORTS: &[(&str, &str)] = &[$($( (stringify!($name), $version) ),*),*];
    };
}

exports! {
    "IBVERBS_1.0" {
        events::ibv_create_comp_channel,
        events::ibv_destroy_comp_channel,
        provider::ibv_copy_path_rec_from_kern,
        provider::ibv_copy_path_rec_to_kern,
        provider::ibv_copy_qp_attr_from_kern,
        rate::ibv_rate_to_mult,
        rate::mult_to_ibv_rate,
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
        pd::ibv_rereg_mr,
        provider::ibv_copy_ah_attr_from_kern,
        cq::ibv_resize_cq,
        provider::ibv_resolve_eth_l2_from_gid,
        qp::ibv_attach_mcast,
        qp::ibv_create_qp,
        qp::ibv_destroy_qp,
        qp::ibv_detach_mcast,
        qp::ibv_modify_qp,
        qp::ibv_query_qp,
        query::ibv_query_device,
        query::ibv_query_gid,
        query::ibv_query_pkey,
        query::ibv_query_port,
        rate::ibv_rate_to_mbps,
        rate::mbps_to_ibv_rate,
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
        import::ibv_import_device,
        import::ibv_import_mr,
        import::ibv_import_pd,
        import::ibv_unimport_mr,
        import::ibv_unimport_pd,
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
        import::ibv_import_dm,
        import::ibv_unimport_dm,
        pd::ibv_is_fork_initialized,
    }
    "IBVERBS_1.14" {
        qp::ibv_query_qp_data_in_order,
    }
    "IBVERBS_PRIVATE_34" {
        provider::__ioctl_final_num_attrs,
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
        provider::ibv_cmd_create_cq,
        provider::ibv_cmd_create_cq_ex,
        provider::ibv_cmd_create_cq_ex2,
        provider::ibv_cmd_create_flow,
        provider::ibv_cmd_create_flow_action_esp,
        provider::ibv_cmd_create_qp,
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
        provider::ibv_cmd_poll_cq,
        provider::ibv_cmd_post_recv,
        provider::ibv_cmd_post_send,
        provider::ibv_cmd_post_srq_recv,
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
        provider::ibv_cmd_req_notify_cq,
        provider::ibv_cmd_rereg_mr,
        provider::ibv_cmd_resize_cq,
        provider::ibv_read_ibdev_sysfs_file,
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

/// The exported data objects with their version nodes, as symbols.txt has them.
pub const DATA_EXPORTS: &[(&str, &str)] =
    &[("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34")];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols;

    const SYMBOLS: &str = include_str!("../symbols.txt");

    #[test]
    fn the_exports_are_debians_public_symbols() {
        let abi = symbols::parse(SYMBOLS).expect("symbols.txt");
        let mut theirs: Vec<(String, String, bool)> = abi
            .symbols
            .iter()
            .map(|s| (s.name.clone(), s.version.clone(), s.function))
            .collect();
        let functions = EXPORTS.iter().map(|&(s, v)| (s, v, true));
        let objects = DATA_EXPORTS.iter().map(|&(s, v)| (s, v, false));
        let mut ours: Vec<(String, String, bool)> = functions
            .chain(objects)
            .map(|(s, v, f)| (s.to_string(), v.to_string(), f))
            .collect();
        theirs.sort();
        ours.sort();
        let missing: Vec<_> = theirs.iter().filter(|s| !ours.contains(s)).collect();
        let extra: Vec<_> = ours.iter().filter(|s| !theirs.contains(s)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "symbols.txt has, src/exports.rs lacks: {missing:?}; the other way: {extra:?}"
        );
    }

    #[test]
    fn every_node_is_rdma_cores_and_every_export_has_one() {
        let abi = symbols::parse(SYMBOLS).expect("symbols.txt");
        let nodes: Vec<&str> = abi.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut want: Vec<String> = ["1.0", "1.1", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10"]
            .iter()
            .chain(&["1.11", "1.12", "1.13", "1.14"])
            .map(|v| format!("IBVERBS_{v}"))
            .collect();
        want.push("IBVERBS_PRIVATE_34".into());
        assert_eq!(nodes, want);
        // Each node but the first and the private one extends the one before it.
        assert_eq!(abi.nodes[0].parent, None);
        assert_eq!(abi.nodes[2].parent.as_deref(), Some("IBVERBS_1.1"));
        assert_eq!(abi.nodes[12].parent, None);
        for (s, v) in EXPORTS.iter().chain(DATA_EXPORTS) {
            assert!(nodes.contains(v), "{s}@{v}");
        }
    }

    #[test]
    fn symbols_txt_parses_and_makes_a_version_script() {
        let abi = symbols::parse(
            "# c\nversion A_1\nversion A_2 A_1\nversion A_3 A_2\n\
             x A_1 function p,q\nz A_2 object -\ny A_1 function -\n",
        )
        .expect("parse");
        assert_eq!(abi.nodes.len(), 3);
        assert_eq!(abi.symbols[0].importers, ["p", "q"]);
        assert!(abi.symbols[1].importers.is_empty() && !abi.symbols[1].function);
        let script = symbols::version_script(&abi);
        let body: Vec<&str> = script.lines().skip(2).filter(|l| !l.is_empty()).collect();
        assert_eq!(
            body,
            [
                "A_1 {",
                "\tglobal:",
                "\t\tx;",
                "\t\ty;",
                "\tlocal: *;",
                "};",
                "A_2 {",
                "\tglobal:",
                "\t\tz;",
                "} A_1;",
                "A_3 {",
                "} A_2;",
            ]
        );
        assert!(symbols::parse("x A_1 thing -").is_err());
    }
}
