//! VM tests: a real QEMU guest with rnic functions attached over vfio-user, and the guest
//! driver's tools run inside it. They boot VMs (seconds each, under TCG), so they are
//! ignored by default; `tests/run-all.sh` runs them after `qemu-scripts/setup.sh`.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// Boots a guest with `args` (functions to attach) running `guest_cmd`; returns the
/// console output and the guest command's exit status.
fn boot(args: &[&str], guest_cmd: &str) -> (String, Option<i32>) {
    let out = Command::new("bash")
        .arg(repo().join("qemu-scripts/boot.sh"))
        .args(args)
        .args(["--timeout", "300", "--"])
        .arg(guest_cmd)
        .env("RNIC_RNICD", rnic_tests::bin("rnicd"))
        .output()
        .expect("run qemu-scripts/boot.sh");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{console}\n{}", String::from_utf8_lossy(&out.stderr));
    (console, out.status.code())
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn guest_with_two_vfs_runs_rnic_info_on_each() {
    // Each function by address, then all of them as JSON, from inside the guest.
    let script = r#"
set -e
for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat $dev/vendor)" = 0xf1c0 ]; then
        bdf=$(basename $dev)
        echo "FOUND $bdf $(cat $dev/device)"
        rnic-info --pci $bdf
    fi
done
echo JSON-BEGIN
rnic-info --json
echo JSON-END
"#;
    let (console, status) = boot(&["--vf", "0", "--vf", "1"], script);
    assert_eq!(status, Some(0), "guest commands failed");
    let found: Vec<&str> = console
        .lines()
        .filter(|l| l.starts_with("FOUND "))
        .collect();
    assert_eq!(found.len(), 2, "two VFs on the guest's PCI bus: {found:?}");
    assert!(
        found.iter().all(|l| l.ends_with("0x0002")),
        "both are VFs: {found:?}"
    );
    assert!(console.contains("function:     VF 0"));
    assert!(console.contains("function:     VF 1"));
    assert!(console.contains("vendor f1c0 device 0002"));
    assert!(
        console.contains("interrupts:   polled"),
        "in a VM the driver polls"
    );
    let json = console
        .split("JSON-BEGIN")
        .nth(1)
        .and_then(|rest| rest.split("JSON-END").next())
        .expect("JSON block on the console");
    // The serial console may carry carriage returns.
    let json: serde_json::Value =
        serde_json::from_str(&json.replace('\r', "")).expect("rnic-info --json output");
    let reports = json.as_array().expect("array");
    assert_eq!(reports.len(), 2);
    let mut indexes: Vec<u64> = reports
        .iter()
        .map(|r| r["vf_index"].as_u64().expect("vf_index"))
        .collect();
    indexes.sort();
    assert_eq!(indexes, [0, 1]);
    let macs: Vec<&str> = reports
        .iter()
        .map(|r| r["mac"].as_str().expect("mac"))
        .collect();
    assert_ne!(macs[0], macs[1]);
    assert!(reports.iter().all(|r| r["location"]
        .as_str()
        .is_some_and(|l| l.starts_with("pci:"))));
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn guest_sees_the_pf_with_its_sriov_capability() {
    let script = r#"
set -e
rnic-info
for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat $dev/vendor)" = 0xf1c0 ]; then echo "CLASS $(cat $dev/class)"; fi
done
"#;
    let (console, status) = boot(&["--pf"], script);
    assert_eq!(status, Some(0));
    assert!(console.contains("function:     PF with "), "{console}");
    assert!(console.contains("CLASS 0x020000"), "network/Ethernet class");
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn guest_command_failure_is_reported() {
    let (_, status) = boot(&[], "echo about to fail; exit 7");
    assert_eq!(
        status,
        Some(7),
        "boot.sh returns the guest command's exit status"
    );
}
