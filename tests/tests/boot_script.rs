//! qemu-scripts/boot.sh's decisions that need no VM: which accelerator a guest gets
//! (`choose_accel` in qemu-scripts/env.sh, both paths through a fake device node and a
//! fake probe), and the options it refuses before it sets anything up.

use std::process::Command;

use rnic_tests::vm::repo;

/// What `choose_accel ARGS` prints with `env` set.
fn choose(env: &[(&str, &str)], args: &str) -> String {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(format!(
            "set -euo pipefail; source qemu-scripts/env.sh; choose_accel {args}"
        ))
        .current_dir(repo())
        .env_remove("RNIC_KVM")
        .env_remove("RNIC_KVM_DEV")
        .env_remove("RNIC_KVM_PROBE");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn kvm_when_the_device_opens_and_a_guest_runs() {
    // /dev/null: a character device anyone opens read-write, standing for a usable
    // /dev/kvm; the probe (a guest kernel under KVM) stands in as `true`.
    let env = [("RNIC_KVM_DEV", "/dev/null"), ("RNIC_KVM_PROBE", "true")];
    assert_eq!(choose(&env, "/vmlinuz"), "kvm");
}

#[test]
fn tcg_with_the_reason_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kvm");
    std::fs::write(&file, b"").unwrap();
    let file = file.to_str().unwrap();
    for (env, want) in [
        (
            vec![("RNIC_KVM_DEV", "/nonexistent/kvm")],
            "tcg (/nonexistent/kvm does not exist)".to_string(),
        ),
        (
            vec![("RNIC_KVM_DEV", file)],
            format!("tcg ({file} is not a character device)"),
        ),
        (
            // The device opens, but a guest fails under it (nested KVM here).
            vec![("RNIC_KVM_DEV", "/dev/null"), ("RNIC_KVM_PROBE", "false")],
            "tcg (the probe false failed)".to_string(),
        ),
        (
            vec![
                ("RNIC_KVM", "0"),
                ("RNIC_KVM_DEV", "/dev/null"),
                ("RNIC_KVM_PROBE", "true"),
            ],
            "tcg (RNIC_KVM=0)".to_string(),
        ),
    ] {
        assert_eq!(choose(&env, "/vmlinuz"), want, "{env:?}");
    }
    // --tcg wins over a working KVM; RNIC_KVM=1 skips every check.
    let ok = [("RNIC_KVM_DEV", "/dev/null"), ("RNIC_KVM_PROBE", "true")];
    assert_eq!(choose(&ok, "--tcg /vmlinuz"), "tcg (--tcg)");
    assert_eq!(
        choose(
            &[("RNIC_KVM", "1"), ("RNIC_KVM_DEV", "/nonexistent")],
            "/vmlinuz"
        ),
        "kvm"
    );
}

/// boot.sh ARGS: its exit status and messages (it fails before any set-up).
fn boot_refuses(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join("qemu-scripts/boot.sh"))
        .args(args)
        .output()
        .expect("run boot.sh");
    assert_eq!(out.status.code(), Some(125), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn rnicd_args_that_boot_sh_sets_itself_are_refused() {
    let err = boot_refuses(&[
        "--vf",
        "0",
        "--rnicd-args",
        "--pcap /tmp/x --vfs 3",
        "--",
        "true",
    ]);
    assert!(err.contains("boot.sh sets --vfs itself"), "{err}");
    let err = boot_refuses(&["--rnicd-args", "--pcap /tmp/x", "--", "true"]);
    assert!(err.contains("attach a function"), "{err}");
    let usage = Command::new("bash")
        .arg(repo().join("qemu-scripts/boot.sh"))
        .arg("--help")
        .output()
        .unwrap();
    let usage = String::from_utf8_lossy(&usage.stdout);
    for word in ["--rnicd-args", "--tcg", "RNIC_KVM"] {
        assert!(usage.contains(word), "usage lacks {word}");
    }
}

/// `setup.sh --plan` with the host described by `os_release` and an empty cache: its
/// exit status and messages. Nothing is installed.
fn setup_plan(os_release: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("os-release");
    std::fs::write(&file, os_release).unwrap();
    let cache = dir.path().join("cache");
    let out = Command::new("bash")
        .arg(repo().join("qemu-scripts/setup.sh"))
        .arg("--plan")
        .env("RNIC_OS_RELEASE", &file)
        .env("RNIC_CACHE", &cache)
        .output()
        .expect("run setup.sh");
    assert!(!cache.exists(), "--plan made the cache");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn setup_says_what_it_installs_and_refuses_hosts_it_does_not_support() {
    let (status, said) = setup_plan("ID=debian\nVERSION_ID=\"12\"\nPRETTY_NAME=\"Debian 12\"\n");
    assert_eq!(status, Some(0), "{said}");
    assert!(said.contains("host: Debian 12 (supported)"), "{said}");
    for part in [
        "trixie-backports' QEMU",
        "guest kernel",
        "rdma-core",
        "GB",
        "free there now",
    ] {
        assert!(said.contains(part), "the plan lacks {part}: {said}");
    }
    let (status, said) = setup_plan("ID=ubuntu\nVERSION_ID=\"24.04\"\n");
    assert_eq!(status, Some(0), "{said}");
    assert!(said.contains("(supported)"), "{said}");
    for (os, name) in [
        (
            "ID=fedora\nVERSION_ID=40\nPRETTY_NAME=\"Fedora Linux 40\"\n",
            "Fedora Linux 40",
        ),
        (
            "ID=debian\nVERSION_ID=\"11\"\nPRETTY_NAME=\"Debian 11\"\n",
            "Debian 11",
        ),
        ("ID=ubuntu\nVERSION_ID=\"20.04\"\n", "ubuntu"),
    ] {
        let (status, said) = setup_plan(os);
        assert_eq!(status, Some(1), "{said}");
        assert!(
            said.contains(&format!("this host is {name}: setup.sh supports Debian 12")),
            "{said}"
        );
    }
}

#[test]
fn the_trixie_roots_come_from_debians_mirror_on_other_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("os-release");
    std::fs::write(&file, "ID=ubuntu\nVERSION_ID=\"24.04\"\n").unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg("source qemu-scripts/env.sh; host_mirror")
        .current_dir(repo())
        .env("RNIC_OS_RELEASE", &file)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "http://deb.debian.org/debian"
    );
}
