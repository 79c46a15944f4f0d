//! The verbs of libibverbs' ABI beyond the data path, as C programs use them:
//!
//! - tests/c/more_verbs.c, compiled with gcc against Debian's `<infiniband/verbs.h>` and
//!   linked against the built libibverbs.so, drives both VFs of a real rnicd in one
//!   process: `ibv_query_qp_data_in_order`, `ibv_rereg_mr` (other memory, other access,
//!   another PD, with the data going where the new keys say, rdma-core's argument checks,
//!   failures that leave the region as it was, and the old keys refused) and the imports
//!   (refused with rdma-core's errnos). The program checks every answer itself.
//! - tests/c/rates.c asks the rate conversions of the built library and of Debian's
//!   libibverbs.so.1 (in the trixie root) every question and the answers must agree.

mod common;

use rnic_tests::debian::{ibverbs_ref, require};

#[test]
fn rereg_data_in_order_and_imports_as_a_c_program_uses_them() {
    let run = common::run_c_program("more_verbs", 2);
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let steps = run.steps();
    assert_eq!(
        steps,
        ["data_in_order", "rereg", "imports", "old_keys", "done"],
        "{stdout}\n{stderr}"
    );
    // What rnic lacks said so on stderr, one line each, and nothing else complained.
    for line in [
        "on-demand paging (IBV_ACCESS_ON_DEMAND) memory regions is not supported",
        "is not mapped in this process",
        "(ibv_import_device: rnic contexts have no kernel command file) is not supported",
        "(ibv_import_pd: rnic contexts have no kernel command file) is not supported",
        "(ibv_import_mr: rnic contexts have no kernel command file) is not supported",
        "(ibv_import_dm: rnic contexts have no kernel command file) is not supported",
        "(ibv_unimport_pd: rnic contexts have no kernel command file) is not supported",
    ] {
        assert!(stderr.contains(line), "no {line:?} in:\n{stderr}");
    }
    assert!(
        stderr.lines().all(|l| l.starts_with("libibverbs (rnic): ")),
        "{stderr}"
    );
}

#[test]
fn the_rate_conversions_answer_as_debians() {
    let debian = ibverbs_ref().join("usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    require(&debian, "rdma-core's libibverbs.so.1 (package libibverbs1)");
    // Both libraries load in the trixie root, where Debian's finds its libnl.
    let root = common::Root::new(1, "ibv_devinfo");
    let dir = tempfile::Builder::new()
        .prefix("rnic-rates-")
        .tempdir_in(root.root.join("tmp"))
        .expect("tempdir in the root");
    let exe = dir.path().join("rates");
    common::compile(
        &rnic_tests::vm::repo().join("ibverbs/tests/c/rates.c"),
        &exe,
        &[],
    );
    let ours = dir.path().join("libibverbs.so.1");
    std::fs::copy(common::library(), &ours).expect("copy the library");
    let answers = |lib: &str| {
        let (out, _) = root.run(&[], &root.inside(&exe), &[lib]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "rates {lib}: {stderr}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let theirs = answers("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    let mine = answers(&root.inside(&ours));
    assert!(theirs.lines().count() > 1000, "{theirs}");
    let differ: Vec<(&str, &str)> = theirs
        .lines()
        .zip(mine.lines())
        .filter(|(t, m)| t != m)
        .take(10)
        .collect();
    assert!(
        differ.is_empty() && theirs.lines().count() == mine.lines().count(),
        "Debian's answers against ours: {differ:?}"
    );
}
