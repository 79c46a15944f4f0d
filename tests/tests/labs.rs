//! The driver labs' reference solutions on a real rnicd (`rnic-lab run N --solution
//! --vfio-user SOCKET`): the code the checkers judge against the deterministic device
//! also drives rnicd's functions through a vfio-user socket, on a VF and on the PF. A
//! skeleton as shipped fails with the step still to write.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rnic_tests::{bin, finish_within, Rnicd};

/// Runs `rnic-lab run` with `args` on the socket `socket`.
fn run(args: &[&str], socket: &Path) -> Output {
    let child = Command::new(bin("rnic-lab"))
        .arg("run")
        .args(args)
        .arg("--vfio-user")
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rnic-lab");
    finish_within(child, Duration::from_secs(60))
}

/// What each lab's line says when it worked.
const SEEN: [(&str, &str); 5] = [
    ("1", "f1c0:000"),
    ("2", "the command queue runs; QUERY_DEVICE: ABI 1."),
    (
        "3",
        "QP 0x11 in Rts aimed at 0x12, QP 0x12 in Rts aimed at 0x11",
    ),
    ("4", "bytes written; CQE wr_id 0x1ab4, SUCCESS, RDMA_WRITE"),
    (
        "5",
        "completion event of CQ 1 by interrupt; CQE wr_id 0x1ab5 status 0",
    ),
];

#[test]
fn every_reference_solution_runs_on_a_vf_and_on_the_pf() {
    let rnicd = Rnicd::start(1, &[]);
    for function in ["vf0", "pf"] {
        for (lab, seen) in SEEN {
            let out = run(&[lab, "--solution"], &rnicd.socket(function));
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "lab {lab} on {function}: {stdout}{stderr}"
            );
            assert!(stdout.contains(seen), "lab {lab} on {function}: {stdout}");
        }
    }
    let identity = run(&["1", "--solution"], &rnicd.socket("pf"));
    assert!(String::from_utf8_lossy(&identity.stdout).contains("0001, the PF"));
}

#[test]
fn a_skeleton_fails_with_the_step_still_to_write() {
    let rnicd = Rnicd::start(1, &[]);
    let out = run(&["4"], &rnicd.socket("vf0"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("FAILED: not yet implemented: step 1: the WQE")
            && stderr.contains("still to write"),
        "{stderr}"
    );
}
