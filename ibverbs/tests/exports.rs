//! The built libibverbs.so against Debian's libibverbs.so.1: its SONAME, and its public
//! symbols, which must be Debian's exactly (every symbol Debian's library exports at its
//! default version, with that version and of the same kind, function or data object, and
//! nothing else). Checked against ibverbs/symbols.txt (which ibverbs/gen-symbols.sh makes
//! from the reference packages, and which also says which of Debian's programs import
//! each symbol), against Debian's library itself, and symbols.txt against what
//! gen-symbols.sh makes of the reference now.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use ibverbs::symbols::{self, Abi};
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

/// A symbol's default version and kind ("function" or "object").
type Export = (String, &'static str);

/// The symbols `file` defines in its dynamic symbol table, with their default version
/// (the one a program linked now binds to; objdump puts the others, kept for programs
/// linked against older versions, in parentheses, and they are left out) and kind. The
/// version nodes' own absolute symbols are left out too.
fn defined(file: &Path) -> BTreeMap<String, Export> {
    objdump(&["-T"], file)
        .lines()
        .filter(|l| !l.contains("*UND*") && !l.contains("*ABS*"))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let kind = match words.get(2) {
                Some(&"DF") => "function",
                Some(&"DO") => "object",
                _ => return None,
            };
            let name = words.last()?;
            let version = words.get(words.len().checked_sub(2)?)?;
            (!version.starts_with('(')).then(|| (name.to_string(), (version.to_string(), kind)))
        })
        .collect()
}

fn symbols_txt() -> String {
    std::fs::read_to_string(repo().join("ibverbs/symbols.txt")).expect("ibverbs/symbols.txt")
}

fn abi() -> Abi {
    symbols::parse(&symbols_txt()).expect("parse ibverbs/symbols.txt")
}

/// What `want` has that `have` lacks or has otherwise, and what `have` has beyond it,
/// one line each.
fn differences(want: &BTreeMap<String, Export>, have: &BTreeMap<String, Export>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, (version, kind)) in want {
        match have.get(name) {
            None => out.push(format!("missing: {name}@{version} ({kind})")),
            Some(h) if h != &(version.clone(), *kind) => out.push(format!(
                "{name}: {}@{} ({}), want {version} ({kind})",
                name, h.0, h.1
            )),
            Some(_) => {}
        }
    }
    for (name, (version, kind)) in have {
        if !want.contains_key(name) {
            out.push(format!("extra: {name}@{version} ({kind})"));
        }
    }
    out
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
fn the_exports_are_the_symbols_of_symbols_txt() {
    let want: BTreeMap<String, Export> = abi()
        .symbols
        .into_iter()
        .map(|s| {
            let kind = if s.function { "function" } else { "object" };
            (s.name, (s.version, kind))
        })
        .collect();
    let ours = defined(&common::library());
    let diff = differences(&want, &ours);
    assert!(
        diff.is_empty(),
        "libibverbs.so against symbols.txt:\n{}",
        diff.join("\n")
    );
}

#[test]
fn everything_debians_programs_import_is_exported() {
    let ours = defined(&common::library());
    // Missing symbols, with the programs that import them: a program starts only when
    // every symbol it imports exists (Debian links with BIND_NOW).
    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in abi()
        .symbols
        .into_iter()
        .filter(|s| !s.importers.is_empty())
    {
        if ours.get(&s.name).map(|e| &e.0) != Some(&s.version) {
            let have = ours
                .get(&s.name)
                .map_or("missing".into(), |e| format!("exported as {}", e.0));
            missing
                .entry(format!("{}@{} ({have})", s.name, s.version))
                .or_default()
                .extend(s.importers);
        }
    }
    assert!(
        missing.is_empty(),
        "imports of Debian's programs that libibverbs.so lacks: {missing:#?}"
    );
}

#[test]
fn the_public_symbols_are_debians_libibverbs_ones() {
    let reference = ibverbs_ref().join("usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    require(
        &reference,
        "rdma-core's libibverbs.so.1 (package libibverbs1)",
    );
    let theirs = defined(&reference);
    let ours = defined(&common::library());
    assert!(theirs.len() > 100, "{theirs:?}");
    let diff = differences(&theirs, &ours);
    assert!(
        diff.is_empty(),
        "libibverbs.so against Debian's libibverbs.so.1:\n{}",
        diff.join("\n")
    );
    // Nothing else leaks out of the Rust code: every dynamic symbol has a version node.
    assert!(
        ours.values().all(|v| v.0.starts_with("IBVERBS_")),
        "{ours:?}"
    );
}

#[test]
fn the_version_nodes_are_debians() {
    let nodes = |file: &Path| -> Vec<String> {
        let p = objdump(&["-p"], file);
        let defs = p
            .split("Version definitions:")
            .nth(1)
            .unwrap_or_else(|| panic!("no version definitions in {}", file.display()));
        defs.lines()
            .map(str::split_whitespace)
            .filter_map(|mut w| w.nth(3).map(String::from))
            .take_while(|n| n.starts_with("IBVERBS_") || n.starts_with("libibverbs"))
            .filter(|n| n.starts_with("IBVERBS_"))
            .collect()
    };
    let want: Vec<String> = abi().nodes.into_iter().map(|n| n.name).collect();
    assert_eq!(nodes(&common::library()), want);
    let reference = ibverbs_ref().join("usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    if reference.exists() {
        assert_eq!(nodes(&reference), want);
    }
}

#[test]
fn symbols_txt_is_what_gen_symbols_makes() {
    let reference = ibverbs_ref();
    require(
        &reference.join("usr/bin/ibv_devinfo"),
        "Debian's ibverbs-utils, unpacked",
    );
    let out = Command::new("bash")
        .arg(repo().join("ibverbs/gen-symbols.sh"))
        .arg(&reference)
        .output()
        .expect("run gen-symbols.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout) == symbols_txt(),
        "ibverbs/symbols.txt is stale: bash ibverbs/gen-symbols.sh > ibverbs/symbols.txt"
    );
}
