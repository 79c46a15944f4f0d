//! `tools/install-docs.sh`, the documented install step of the man pages and shell
//! completions: into a fresh prefix, from the binaries the tests run; then `man rnicd`
//! (with that prefix's man directory) shows rnicd's page with its options, and each
//! program has its completions.

use std::process::Command;

use rnic_tests::vm::repo;

const PROGRAMS: [&str; 7] = [
    "rnicd",
    "rnic-admin",
    "rnic-info",
    "rnic-perf",
    "rnic-pingpong",
    "rnic-features",
    "rnic-eth",
];

#[test]
fn man_rnicd_works_after_install_docs() {
    let prefix = tempfile::tempdir().expect("a prefix");
    let bin_dir = rnic_tests::bin("rnicd")
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let out = Command::new("bash")
        .arg(repo().join("tools/install-docs.sh"))
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg(prefix.path())
        .output()
        .expect("run install-docs.sh");
    assert!(
        out.status.success(),
        "install-docs.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let share = prefix.path().join("share");
    for p in PROGRAMS {
        for file in [
            format!("man/man1/{p}.1"),
            format!("bash-completion/completions/{p}"),
            format!("zsh/site-functions/_{p}"),
            format!("fish/vendor_completions.d/{p}.fish"),
        ] {
            let text = std::fs::read_to_string(share.join(&file)).unwrap_or_default();
            assert!(text.contains(p), "{file} does not name {p}");
        }
    }
    // man finds the page through MANPATH, as it finds /usr/local/share/man by default.
    let page = Command::new("man")
        .env("MANPATH", share.join("man"))
        .env("MANWIDTH", "100")
        .args(["-P", "cat", "rnicd"])
        .output()
        .expect("man (qemu-scripts/setup.sh installs man-db)");
    let text = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.status.success(),
        "man rnicd: {}",
        String::from_utf8_lossy(&page.stderr)
    );
    for word in [
        "rnicd",
        "--socket-dir",
        "--net-faults",
        "--ready-fd",
        "emulated RDMA NIC",
    ] {
        assert!(text.contains(word), "man rnicd shows no {word}:\n{text}");
    }
    let bash =
        std::fs::read_to_string(share.join("bash-completion/completions/rnic-admin")).unwrap();
    assert!(
        bash.contains("--control"),
        "rnic-admin's completion knows --control"
    );
}
