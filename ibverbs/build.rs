//! Links the cdylib as rdma-core's library: SONAME `libibverbs.so.1` and the version
//! nodes of Debian's libibverbs.so.1 (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34),
//! which applications linked against Debian's libibverbs import their symbols from. The
//! version script is made from symbols.txt (see src/symbols.rs), the list of Debian's
//! public symbols that gen-symbols.sh makes: every symbol there gets its node, and the
//! linker (`--no-undefined-version`, lld's default) refuses a symbol that src/exports.rs
//! does not define.

#[path = "src/symbols.rs"]
#[allow(dead_code)] // build.rs uses the nodes and names only.
mod symbols;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=symbols.txt");
    println!("cargo:rerun-if-changed=src/symbols.rs");
    let text = std::fs::read_to_string(format!("{dir}/symbols.txt")).expect("read symbols.txt");
    let abi = symbols::parse(&text).expect("parse symbols.txt");
    let map = format!("{out}/libibverbs.map");
    std::fs::write(&map, symbols::version_script(&abi)).expect("write the version script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // rustc hands the linker a version script of its own that makes every symbol it
    // knows local or unversioned; the C entry points are not among those it knows (they
    // are assembler aliases, see src/exports.rs), so this script alone gives them their
    // versions. That takes lld (rustc's default linker on x86_64 Linux since 1.90): GNU
    // ld refuses to combine rustc's anonymous version node with named ones.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map}");
}
