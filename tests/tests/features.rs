//! rnic-features on the host: the PF and VF0 of one rnicd over vfio-user, sharing one
//! memory as two functions of one VM do; each scenario prints its checks and passes.

use std::process::Command;

use rnic_tests::{bin, Rnicd};

/// Runs `rnic-features SCENARIO` on rnicd's PF and VF0; returns its standard output.
fn run(scenario: &str) -> String {
    let rnicd = Rnicd::start(1, &[]);
    let out = Command::new(bin("rnic-features"))
        .arg(scenario)
        .arg("--vfio-user")
        .arg(rnicd.socket("pf"))
        .arg("--vfio-user")
        .arg(rnicd.socket("vf0"))
        .output()
        .expect("run rnic-features");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "rnic-features {scenario} failed"
    );
    stdout
}

/// The number of checks the final line reports, after checking it matches the `ok:` lines.
fn passed(stdout: &str) -> usize {
    let oks = stdout.lines().filter(|l| l.starts_with("ok: ")).count();
    assert!(stdout.contains(&format!("rnic-features: all {oks} checks passed")));
    oks
}

#[test]
fn rnic_features_dc_passes_on_pf_and_vf0() {
    let out = run("dc");
    assert_eq!(
        passed(&out),
        10,
        "one completion check, two per DCT, three for the wrong key"
    );
    assert!(out.contains("ok: dc: a WR with a wrong DC key completes REM_ACCESS_ERR"));
}

#[test]
fn rnic_features_indirect_keys_passes_on_pf_and_vf0() {
    let out = run("indirect-keys");
    assert_eq!(passed(&out), 8);
    assert!(out.contains("ok: indirect-keys: the refused WRITE touched no byte, guards intact"));
}

#[test]
fn rnic_features_ethernet_passes_on_pf_and_vf0() {
    let out = run("ethernet");
    assert_eq!(passed(&out), 4);
    assert!(
        out.contains("ok: ethernet: no RoCE packet (the WRITEs' ACKs) reached A's receive ring")
    );
}

#[test]
fn rnic_features_refuses_one_function_and_reports_a_missing_one() {
    let rnicd = Rnicd::start(1, &[]);
    let out = Command::new(bin("rnic-features"))
        .args(["dc", "--vfio-user"])
        .arg(rnicd.socket("pf"))
        .output()
        .expect("run rnic-features");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exactly twice"));
}
