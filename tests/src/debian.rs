//! Debian's rdma-core as qemu-scripts/setup.sh provides it on this machine: the trixie
//! root where its unmodified programs run under chroot, and the reference packages
//! unpacked by qemu-scripts/ibverbs-ref.sh (headers, programs, libraries).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::vm::repo;

/// A variable of qemu-scripts/env.sh (`TRIXIE_ROOT`, `IBVERBS_REF`), as the scripts
/// see it (`RNIC_CACHE` moves them all).
pub fn env_sh(var: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source qemu-scripts/env.sh; echo \"${var}\""))
        .current_dir(repo())
        .output()
        .expect("source qemu-scripts/env.sh");
    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!value.is_empty(), "qemu-scripts/env.sh does not set {var}");
    PathBuf::from(value)
}

/// The debootstrapped trixie root.
pub fn trixie_root() -> PathBuf {
    env_sh("TRIXIE_ROOT")
}

/// The unpacked reference packages (libibverbs-dev, ibverbs-utils, perftest, ...).
pub fn ibverbs_ref() -> PathBuf {
    env_sh("IBVERBS_REF")
}

/// Fails, naming the set-up step, unless `path` (`what`) exists.
pub fn require(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "{what} is missing ({}): run `bash qemu-scripts/setup.sh` as root first (its \
         qemu-scripts/ibverbs-ref.sh step installs Debian's rdma-core reference)",
        path.display()
    );
}

/// Compiles the C program `src` into `exe` with gcc against the reference headers
/// (trixie's kernel headers, unpacked beside libibverbs-dev, before the host's: verbs.h
/// is built against them), `extra` arguments last.
pub fn compile_c(src: &Path, exe: &Path, extra: &[&str]) {
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
