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
        sysfs::ibv_get_sysfs_path,
        sysfs::ibv_read_sysfs_file,
    }
    "IBVERBS_1.1" {
        context::ibv_close_device,
        context::ibv_open_device,
        device::ibv_free_device_list,
        device::ibv_get_device_guid,
        device::ibv_get_device_list,
        device::ibv_get_device_name,
        query::ibv_query_device,
        query::ibv_query_gid,
        query::ibv_query_pkey,
        query::ibv_query_port,
        strings::ibv_event_type_str,
        strings::ibv_node_type_str,
        strings::ibv_port_state_str,
        strings::ibv_wc_status_str,
    }
    "IBVERBS_1.5" {
        query::ibv_get_pkey_index,
    }
    "IBVERBS_1.9" {
        device::ibv_get_device_index,
    }
    "IBVERBS_1.11" {
        query::_ibv_query_gid_ex,
        query::_ibv_query_gid_table,
    }
    "IBVERBS_PRIVATE_34" {
        query::ibv_query_gid_type,
        strings::ibv_wr_opcode_str,
    }
}

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
