//! What the crate's integration tests share: the built library, and gcc against
//! Debian's libibverbs headers.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use rnic_tests::debian::{ibverbs_ref, require};

/// The libibverbs.so the tests were built with (cargo builds the cdylib with the rlib
/// the tests link).
pub fn library() -> PathBuf {
    let dir = rnic_tests::bin_dir();
    [dir.join("deps/libibverbs.so"), dir.join("libibverbs.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libibverbs.so is built with the crate's tests (crate-type cdylib)")
}

/// Compiles the C program `src` into `exe` with gcc against the reference headers
/// (trixie's kernel headers, unpacked beside libibverbs-dev, before the host's: verbs.h
/// is built against them), `extra` arguments last.
pub fn compile(src: &Path, exe: &Path, extra: &[&str]) {
    let include = ibverbs_ref().join("usr/include");
    require(
        &include.join("infiniband/verbs.h"),
        "Debian's libibverbs-dev headers",
    );
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg("-I")
        .arg(include.join("x86_64-linux-gnu"))
        .arg(src)
        .arg("-o")
        .arg(exe)
        .args(extra)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "{} does not compile against {}:\n{}",
        src.display(),
        include.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
