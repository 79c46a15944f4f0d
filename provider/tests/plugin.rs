//! The built plug-in as libibverbs sees it: what it imports (libibverbs' private
//! functions, bound to `IBVERBS_PRIVATE_34`), that it exports nothing libibverbs exports,
//! that it has a constructor, and, where Debian's trixie root is (qemu-scripts/setup.sh
//! makes it) and the tests run as root, that Debian's libibverbs 56.1 loads it and that
//! its constructor registers what driver.h's structures say it should.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rnic_tests::debian::trixie_root;

/// The plug-in the tests were built with (cargo builds the cdylib with the crate).
fn plugin() -> PathBuf {
    let dir = rnic_tests::bin_dir();
    [
        dir.join("deps/librnic_provider.so"),
        dir.join("librnic_provider.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("librnic_provider.so is built with the crate's tests (crate-type cdylib)")
}

/// `nm -D` of `lib`: (defined, undefined) symbol names with their versions.
fn dynamic_symbols(lib: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let out = Command::new("nm")
        .args(["-D", "--with-symbol-versions"])
        .arg(lib)
        .output()
        .expect("run nm");
    assert!(out.status.success(), "nm -D {}", lib.display());
    let mut defined = BTreeSet::new();
    let mut undefined = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            [kind, name] if *kind == "U" || *kind == "w" => {
                undefined.insert(name.to_string());
            }
            [_, kind, name] if *kind != "A" => {
                defined.insert(name.to_string());
            }
            _ => {}
        }
    }
    (defined, undefined)
}

/// A symbol's name without its version.
fn bare(symbol: &str) -> &str {
    symbol.split('@').next().unwrap_or(symbol)
}

#[test]
fn the_plug_in_imports_libibverbs_private_abi_and_exports_nothing() {
    let lib = plugin();
    let (defined, undefined) = dynamic_symbols(&lib);
    let exported: Vec<_> = defined.iter().filter(|s| !s.starts_with('_')).collect();
    assert!(exported.is_empty(), "the plug-in exports {exported:?}");
    for needed in [
        "verbs_register_driver_34@IBVERBS_PRIVATE_34",
        "_verbs_init_and_alloc_context@IBVERBS_PRIVATE_34",
        "verbs_set_ops@IBVERBS_PRIVATE_34",
        "ibv_cmd_get_context@IBVERBS_PRIVATE_34",
        "ibv_cmd_create_qp@IBVERBS_PRIVATE_34",
        "ibv_cmd_reg_mr@IBVERBS_PRIVATE_34",
    ] {
        assert!(undefined.contains(needed), "{needed} is not imported");
    }
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("run readelf");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic.contains("[libibverbs.so.1]"),
        "no NEEDED libibverbs.so.1:\n{dynamic}"
    );
    assert!(dynamic.contains("(INIT_ARRAY)"), "no constructors");
    // Against Debian's library, where it is: every import exists there with its version,
    // and nothing the plug-in defines clashes with it.
    let debian = trixie_root().join("usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    if !debian.exists() {
        eprintln!(
            "skipping the comparison with Debian's libibverbs: {} is missing (run qemu-scripts/setup.sh)",
            debian.display()
        );
        return;
    }
    let (theirs, _) = dynamic_symbols(&debian);
    for u in undefined.iter().filter(|u| u.contains("@IBVERBS")) {
        assert!(
            theirs.contains(&u.replace('@', "@@")) || theirs.contains(u),
            "{u} is not in Debian's libibverbs"
        );
    }
    let theirs: BTreeSet<&str> = theirs.iter().map(|s| bare(s)).collect();
    let clashes: Vec<_> = defined
        .iter()
        .filter(|s| theirs.contains(bare(s)))
        .collect();
    assert!(clashes.is_empty(), "defined by both: {clashes:?}");
}

#[test]
fn debian_libibverbs_loads_the_plug_in() {
    let root = trixie_root();
    if !root
        .join("usr/lib/x86_64-linux-gnu/libibverbs.so.1")
        .exists()
    {
        eprintln!(
            "skipping: Debian's trixie root {} is missing (run qemu-scripts/setup.sh)",
            root.display()
        );
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: running programs in the trixie root needs root (chroot)");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("rnic-provider-")
        .tempdir_in(root.join("tmp"))
        .expect("tempdir in the root");
    let so = dir.path().join("librnic-rdmav34.so");
    std::fs::copy(plugin(), &so).expect("copy the plug-in");
    let exe = dir.path().join("load");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/load.c");
    let out = Command::new("gcc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(["-rdynamic", "-ldl"])
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inside = |p: &Path| format!("/{}", p.strip_prefix(&root).unwrap().display());
    let out = Command::new("chroot")
        .arg(&root)
        .arg("env")
        .arg("VERBS_LOG_LEVEL=4")
        .arg(inside(&exe))
        .arg(inside(&so))
        .output()
        .expect("run chroot");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for step in [
        "ok register rnic abi 1-1 alloc_context 1 import_context 0 alloc_device 1 uninit_device 1",
        "ok match kind 1 f1c0:0001",
        "ok match kind 1 f1c0:0002",
        "ok registered",
        "ok plugin",
        "ok devices",
    ] {
        assert!(stdout.contains(step), "no {step:?}:\n{stdout}\n{stderr}");
    }
    println!("{stdout}{stderr}");
}
