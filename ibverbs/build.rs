//! Links the cdylib as rdma-core's library: SONAME `libibverbs.so.1` and the version
//! nodes of libibverbs.map (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34), which
//! applications linked against Debian's libibverbs import their symbols from.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // rustc hands the linker a version script of its own that makes every symbol it
    // knows local or unversioned; the C entry points are not among those it knows (they
    // are assembler aliases, see src/exports.rs), so this script alone gives them their
    // versions. That takes lld (rustc's default linker on x86_64 Linux since 1.90): GNU
    // ld refuses to combine rustc's anonymous version node with named ones.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
}
