//! Links the plug-in against libibverbs.so.1 as rdma-core's providers are: `NEEDED
//! libibverbs.so.1`, and every libibverbs function it calls bound to the version node
//! `IBVERBS_PRIVATE_34` (Debian trixie's rdma-core 56.1). The build machine need not have
//! libibverbs: the plug-in links against a stub of the same SONAME that defines just
//! those functions under that version, compiled here with the C compiler; the real
//! library provides them when libibverbs loads the plug-in.

use std::path::PathBuf;
use std::process::Command;

/// The private ABI the plug-in is built for (`IBVERBS_PABI_VERSION` of rdma-core 56.1).
const PRIVATE_VERSION: &str = "IBVERBS_PRIVATE_34";

/// The libibverbs functions the plug-in calls (src/driver.rs declares them).
const FUNCTIONS: &[&str] = &[
    "verbs_register_driver_34",
    "_verbs_init_and_alloc_context",
    "verbs_uninit_context",
    "verbs_set_ops",
    "ibv_cmd_get_context",
    "ibv_cmd_query_device_any",
    "ibv_cmd_query_port",
    "ibv_cmd_alloc_pd",
    "ibv_cmd_dealloc_pd",
    "ibv_cmd_reg_mr",
    "ibv_cmd_dereg_mr",
    "ibv_cmd_alloc_mw",
    "ibv_cmd_dealloc_mw",
    "ibv_cmd_create_cq",
    "ibv_cmd_destroy_cq",
    "ibv_cmd_resize_cq",
    "ibv_cmd_create_qp",
    "ibv_cmd_query_qp",
    "ibv_cmd_modify_qp",
    "ibv_cmd_destroy_qp",
    "ibv_cmd_create_srq",
    "ibv_cmd_modify_srq",
    "ibv_cmd_query_srq",
    "ibv_cmd_destroy_srq",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let src = out.join("libibverbs-stub.c");
    let map = out.join("libibverbs-stub.map");
    let lib = out.join("libibverbs.so.1");
    let c: String = FUNCTIONS
        .iter()
        .map(|f| format!("void {f}(void) {{}}\n"))
        .collect();
    std::fs::write(&src, c).expect("write the stub's source");
    std::fs::write(
        &map,
        format!(
            "{PRIVATE_VERSION} {{\n\tglobal:\n{}\tlocal: *;\n}};\n",
            FUNCTIONS
                .iter()
                .map(|f| format!("\t\t{f};\n"))
                .collect::<String>()
        ),
    )
    .expect("write the stub's version script");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-Wl,-soname,libibverbs.so.1",
        ])
        .arg(format!("-Wl,--version-script={}", map.display()))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("run {cc} to build the libibverbs stub: {e}"));
    assert!(status.success(), "{cc} failed to build the libibverbs stub");
    // The cdylib only: the crate's tests define the functions themselves.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg={}", lib.display());
}
