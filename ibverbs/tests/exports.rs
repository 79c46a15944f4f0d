//! The built libibverbs.so against what Debian's programs import (ibverbs/imports.txt,
//! made by ibverbs/gen-imports.sh from the reference packages): its SONAME, every
//! symbol Debian's ibverbs-utils and perftest programs (and the libraries they load)
//! import exported with the version they import it with, and each export matching
//! rdma-core's own libibverbs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use rnic_tests::debian::{ibverbs_ref, require};
use rnic_tests::vm::repo;

fn objdump(args: &[&str], file: &Path) -> String {
    let out = Command::new("objdump")
        .args(args)
        .arg(file)
        .output()
        .expect("run objdump (binutils)");
    assert!(out.status.success(), "objdump {args:?} {}", file.display());
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The symbols `file` defines in its dynamic symbol table, with their default version
/// (the one a program linked now binds to; objdump puts the others, kept for programs
/// linked against older versions, in parentheses, and they are left out).
fn defined(file: &Path) -> BTreeMap<String, String> {
    objdump(&["-T"], file)
        .lines()
        .filter(|l| !l.contains("*UND*") && (l.contains(" DF ") || l.contains(" DO ")))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let name = words.last()?;
            let version = words.get(words.len().checked_sub(2)?)?;
            (!version.starts_with('(')).then(|| (name.to_string(), version.to_string()))
        })
        .collect()
}

/// One line of imports.txt.
struct Import {
    symbol: String,
    version: String,
    importers: Vec<String>,
}

fn imports_txt() -> String {
    std::fs::read_to_string(repo().join("ibverbs/imports.txt")).expect("ibverbs/imports.txt")
}

fn imports() -> Vec<Import> {
    imports_txt()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut w = l.split_whitespace();
            let (symbol, version, importers) = (w.next(), w.next(), w.next());
            Import {
                symbol: symbol.expect("symbol").into(),
                version: version.expect("version").into(),
                importers: importers
                    .expect("importers")
                    .split(',')
                    .map(String::from)
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn the_soname_is_libibverbs_so_1() {
    let p = objdump(&["-p"], &common::library());
    assert!(
        p.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["SONAME", "libibverbs.so.1"]),
        "{p}"
    );
}

#[test]
fn everything_debians_programs_import_is_exported() {
    let ours = defined(&common::library());
    // Missing symbols, with the programs that import them: a program starts only when
    // every symbol it imports exists (Debian links with BIND_NOW).
    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for i in imports() {
        if ours.get(&i.symbol) != Some(&i.version) {
            let have = ours
                .get(&i.symbol)
                .map_or("missing".into(), |v| format!("exported as {v}"));
            missing
                .entry(format!("{}@{} ({have})", i.symbol, i.version))
                .or_default()
                .extend(i.importers);
        }
    }
    assert!(
        missing.is_empty(),
        "imports of Debian's programs that libibverbs.so lacks: {missing:#?}"
    );
}

#[test]
fn every_export_is_rdma_cores_symbol_at_rdma_cores_version() {
    let reference = ibverbs_ref().join("usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    require(
        &reference,
        "rdma-core's libibverbs.so.1 (package libibverbs1)",
    );
    let theirs = defined(&reference);
    let ours = defined(&common::library());
    assert!(!ours.is_empty());
    let mut wrong = Vec::new();
    for (symbol, version) in &ours {
        if theirs.get(symbol) != Some(version) {
            wrong.push(format!(
                "{symbol}@{version} (rdma-core: {:?})",
                theirs.get(symbol)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "exports rdma-core does not have so: {wrong:?}"
    );
    // Nothing else leaks out of the Rust code: every dynamic symbol has a version node.
    assert!(ours.values().all(|v| v.starts_with("IBVERBS_")), "{ours:?}");
}

#[test]
fn imports_txt_is_what_gen_imports_makes() {
    let reference = ibverbs_ref();
    require(
        &reference.join("usr/bin/ibv_devinfo"),
        "Debian's ibverbs-utils, unpacked",
    );
    let out = Command::new("bash")
        .arg(repo().join("ibverbs/gen-imports.sh"))
        .arg(&reference)
        .output()
        .expect("run gen-imports.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout) == imports_txt(),
        "ibverbs/imports.txt is stale: bash ibverbs/gen-imports.sh > ibverbs/imports.txt"
    );
}
