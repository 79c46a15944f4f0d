//! Libraries Debian builds on libibverbs, unmodified, on rnic's, in the trixie root
//! against a real rnicd with two VFs:
//!
//! - rdma-core's Python bindings (python3-pyverbs, which qemu-scripts/ibverbs-ref.sh
//!   installs): tests/python/pyverbs_rnic.py loads every module of the package (each
//!   binds every libibverbs symbol it imports at once, `ibv_query_qp_data_in_order`,
//!   `ibv_rereg_mr` and `ibv_import_*` among them) and drives the devices through it;
//! - UCX (ucx-utils and libucx0, 260 MB with their dependencies, which set-up does not
//!   install: the test is skipped, saying so, where the root lacks them): `ucx_info -d`
//!   lists both functions as IB memory domains with the rc_verbs and ud_verbs transports.
//!   UCX lists only devices whose `/dev/infiniband/<name>` is a character device it may
//!   read and write (it never opens it; rnic has no kernel device there), so the test
//!   gives the command a /dev of its own with stand-ins for them.

mod common;

use common::Root;
use rnic_tests::debian::trixie_root;

/// Whether the root has `path` (of Debian package `package`); says why the test is
/// skipped where not.
fn installed(path: &str, package: &str, how: &str) -> bool {
    let root = trixie_root();
    if root.join(path).exists() {
        return true;
    }
    eprintln!(
        "skipped: the trixie root {} lacks {package} (/{path}); {how}",
        root.display()
    );
    false
}

/// The library's lines on stderr are only those saying what rnic does not support.
fn only_unsupported_lines(stderr: &str) {
    for line in stderr.lines().filter(|l| l.contains("libibverbs (rnic)")) {
        assert!(line.contains("is not supported by rnic"), "{stderr}");
    }
}

#[test]
fn pyverbs_loads_every_module_and_drives_the_devices() {
    if !installed(
        "usr/lib/python3/dist-packages/pyverbs",
        "python3-pyverbs",
        "run `bash qemu-scripts/setup.sh` (qemu-scripts/ibverbs-ref.sh installs it)",
    ) {
        return;
    }
    let root = Root::new(2, "python3");
    let script = tempfile::Builder::new()
        .prefix("rnic-pyverbs-")
        .suffix(".py")
        .tempfile_in(root.root.join("tmp"))
        .expect("a script file in the root");
    let source = rnic_tests::vm::repo().join("ibverbs/tests/python/pyverbs_rnic.py");
    std::fs::copy(&source, script.path()).expect("copy the script");
    let inside = root.inside(script.path());
    let (out, _) = root.run(&["vf0", "vf1"], "python3", &[&inside]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let steps = common::steps(&stdout);
    let step = |name: &str| {
        steps
            .iter()
            .find_map(|s| s.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no step {name}:\n{stdout}\n{stderr}"))
    };
    let modules: usize = step("import").parse().expect("a module count");
    assert!(modules >= 20, "{stdout}");
    assert_eq!(step("devices"), "rnic_0 rnic_1");
    // PORT_ACTIVE, MTU 4096.
    assert!(step("query").ends_with(" 4 5"), "{stdout}");
    step("rereg");
    // rnic guarantees no order of placement (see ibv_query_qp_data_in_order).
    assert_eq!(step("data_in_order"), "0 0");
    step("import_refused");
    step("done");
    only_unsupported_lines(&stderr);
    for what in ["ibv_import_pd", "ibv_import_device"] {
        assert!(stderr.contains(what), "{stderr}");
    }
}

/// What makes `/dev/infiniband/rnic_0` and `rnic_1` (the null device's numbers) in a
/// /dev of the command's own, with the nodes UCX and its libraries use.
const DEVICE_STAND_INS: &str = r#"mount -t tmpfs -o mode=755 tmpfs "$0/dev" &&
    mknod -m 666 "$0/dev/null" c 1 3 && mknod -m 666 "$0/dev/zero" c 1 5 &&
    mknod -m 666 "$0/dev/urandom" c 1 9 && mkdir "$0/dev/shm" "$0/dev/infiniband" &&
    mount -t tmpfs tmpfs "$0/dev/shm" &&
    mknod -m 666 "$0/dev/infiniband/rnic_0" c 1 3 &&
    mknod -m 666 "$0/dev/infiniband/rnic_1" c 1 3"#;

#[test]
fn ucx_lists_both_functions_with_its_verbs_transports() {
    if !installed(
        "usr/bin/ucx_info",
        "ucx-utils",
        "install it with `chroot ROOT apt-get install -y --no-install-recommends ucx-utils` \
         (260 MB with its dependencies; set-up leaves it out)",
    ) {
        return;
    }
    let root = Root::new(2, "ucx_info");
    // LD_BIND_NOW: UCX loads its modules lazily; this binds every symbol they import
    // from libibverbs when they load, so a missing one drops the module.
    let out = root
        .command_after(
            DEVICE_STAND_INS,
            &["vf0", "vf1"],
            "env",
            &["LD_BIND_NOW=1", "ucx_info", "-d"],
        )
        .output()
        .expect("run ucx_info");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for dev in ["rnic_0", "rnic_1"] {
        // The memory domain's section, up to the next one.
        let section = stdout
            .split("# Memory domain: ")
            .find(|s| s.starts_with(&format!("{dev}\n")))
            .unwrap_or_else(|| panic!("no memory domain {dev}:\n{stdout}\n{stderr}"));
        assert!(section.contains("#     Component: ib\n"), "{section}");
        for transport in ["rc_verbs", "ud_verbs"] {
            assert!(
                section.contains(&format!(
                    "#      Transport: {transport}\n#         Device: {dev}:1\n"
                )),
                "no {transport} on {dev}:\n{section}"
            );
        }
    }
    only_unsupported_lines(&stderr);
    // Without the stand-ins UCX lists neither (its check, not the library's).
    let (bare, _) = root.run(&["vf0", "vf1"], "ucx_info", &["-d"]);
    let bare = String::from_utf8_lossy(&bare.stdout);
    assert!(!bare.contains("# Memory domain: rnic_0"), "{bare}");
}
