//! The first-driver example (`examples/first-driver`, `rnic-first-driver`) against a real
//! rnicd: on a VF and on the PF it identifies the function, starts the command queue by
//! hand, connects two RC QPs of the function and sees its one RDMA WRITE complete and
//! arrive; when the write cannot arrive it says so and exits 1.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rnic_tests::{bin, finish_within, Rnicd};

/// The line the example ends with when everything worked.
const SUCCESS: &str = "first-driver: success: RDMA WRITE of 63 bytes from QP 0x11 to QP 0x12 arrived: \"Hello, RDMA! Written by rnic's first driver, one WQE at a time.\"";

/// Runs the example on the vfio-user socket `socket`.
fn first_driver(socket: &Path) -> Output {
    let child = Command::new(bin("rnic-first-driver"))
        .arg("--vfio-user")
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rnic-first-driver");
    finish_within(child, Duration::from_secs(60))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_example_writes_by_hand_on_a_vf_and_on_the_pf() {
    let rnicd = Rnicd::start(1, &[]);
    for (function, info) in [("vf0", "0x00000001 (VF 0)"), ("pf", "0x00000000 (PF)")] {
        let out = first_driver(&rnicd.socket(function));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{function}: {}\n{stdout}{stderr}",
            out.status
        );
        // The identity registers, checked as §1.3 says, and printed.
        let version = format!("ABI_VERSION   {:#010x}", rnic_abi::abi_version());
        for line in [
            "MAGIC         0x43494e52",
            &version,
            &format!("FUNCTION_INFO {info}"),
            "command queue running: 64 entries",
            "QPs           both in RTS",
            "CQE           wr_id 0xf1257 status success opcode 1 byte_len 63 qp 0x11",
        ] {
            assert!(
                stdout.contains(line),
                "{function}: no {line:?} in\n{stdout}"
            );
        }
        assert_eq!(
            stdout.lines().last(),
            Some(SUCCESS),
            "{function}:\n{stdout}"
        );
        assert!(stderr.is_empty(), "{function}: {stderr}");
    }
}

#[test]
fn the_example_fails_clearly_when_its_write_cannot_arrive() {
    // With the VF's link down (PF administration, §12.3 SET_LINK) nothing leaves the
    // function, its own QPs included: the WRITE exhausts its retries, and the example
    // must say so from the CQE's status and exit 1, not claim success.
    let rnicd = Rnicd::start(1, &[]);
    rnicd.admin(&["link", "vf0", "down"]);
    let out = first_driver(&rnicd.socket("vf0"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("success"), "{stdout}");
    assert!(
        stderr.contains(
            "first-driver: FAILED: the RDMA WRITE completed with status transport retry counter exceeded (12)"
        ),
        "{stderr}"
    );

    // A socket nobody serves: one line that names it.
    let out = first_driver(&rnicd.socket_dir().join("vf7.sock"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("first-driver: FAILED: connect to rnicd:"),
        "{}",
        text(&out.stderr)
    );
}
