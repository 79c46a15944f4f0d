//! Debian's unmodified `ibv_devices` and `ibv_devinfo`, run in the trixie root (chroot)
//! against this library (LD_LIBRARY_PATH) and a real rnicd's two VFs
//! (RNIC_VFIO_USER): they must list `rnic_0` and `rnic_1` with the GUIDs, limits, port
//! and GIDs that rnic_driver's QUERY_DEVICE gets from the same functions.
//!
//! Needs root (chroot) and `qemu-scripts/setup.sh` (ibverbs-utils in the root), and
//! the workspace's binaries (rnicd, rnic-admin), as every integration test does.

mod common;

use std::time::Duration;

use ibverbs::attr::node_guid;
use rnic_abi::cmd::QueryDeviceResp;
use rnic_driver::device::PciIdentity;
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::Device;
use rnic_tests::ibv_tools::check_devinfo;

/// The trixie root with an rnicd, and the truth about its functions.
struct Setup(common::Root);

impl std::ops::Deref for Setup {
    type Target = common::Root;

    fn deref(&self) -> &common::Root {
        &self.0
    }
}

impl Setup {
    fn new(vfs: u16) -> Self {
        Self(common::Root::new(vfs, "ibv_devinfo"))
    }

    /// Runs a program that must succeed and returns its standard output.
    fn stdout(&self, functions: &[&str], program: &str, args: &[&str]) -> String {
        let (out, took) = self.run(functions, program, args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{program} {args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(took < Duration::from_secs(5), "{program} took {took:?}");
        stdout
    }

    /// What rnic_driver's QUERY_DEVICE and config space say about `function`.
    fn truth(&self, function: &str) -> (QueryDeviceResp, PciIdentity) {
        let t = VfioUserTransport::connect(&self.rnicd.socket(function)).expect("connect");
        let device = Device::open(Box::new(t)).expect("open");
        (device.query_device().expect("QUERY_DEVICE"), device.pci())
        // The function is closed here: rnicd serves one client at a time.
    }
}

/// Checks one device's `ibv_devinfo -v` block against the function's truth.
fn check_device(devinfo: &str, name: &str, q: &QueryDeviceResp, pci: &PciIdentity, up: bool) {
    check_devinfo(devinfo, name, q, pci, node_guid(q.mac), up);
}

#[test]
fn ibv_devices_and_ibv_devinfo_show_both_functions() {
    let s = Setup::new(2);
    let truth = [s.truth("vf0"), s.truth("vf1")];
    let both = ["vf0", "vf1"];

    let devices = s.stdout(&both, "ibv_devices", &[]);
    for (i, (q, _)) in truth.iter().enumerate() {
        let guid: String = node_guid(q.mac)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let line = format!("rnic_{i}\t{guid}");
        assert!(
            devices
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().join("\t") == line),
            "no {line:?} in ibv_devices' output:\n{devices}"
        );
    }

    let list = s.stdout(&both, "ibv_devinfo", &["-l"]);
    assert!(
        list.contains("2 HCAs found:")
            && list.contains("\trnic_0\n")
            && list.contains("\trnic_1\n"),
        "{list}"
    );

    let devinfo = s.stdout(&both, "ibv_devinfo", &["-v"]);
    check_device(&devinfo, "rnic_0", &truth[0].0, &truth[0].1, true);
    check_device(&devinfo, "rnic_1", &truth[1].0, &truth[1].1, true);
    // Distinct functions, distinct identities.
    assert_ne!(truth[0].0.mac, truth[1].0.mac);
}

#[test]
fn what_the_pf_changes_shows_at_once() {
    let s = Setup::new(2);
    // VF1's MAC, GID and link, as its PF sets them.
    s.rnicd
        .admin(&["mac", "vf1", "02:00:00:aa:bb:cc", "--gid", "10.99.0.7"]);
    s.rnicd.admin(&["link", "vf1", "down"]);
    let (q, pci) = s.truth("vf1");
    assert_eq!(q.mac, [0x02, 0, 0, 0xaa, 0xbb, 0xcc]);
    let devinfo = s.stdout(&["vf0", "vf1"], "ibv_devinfo", &["-v", "-d", "rnic_1"]);
    check_device(&devinfo, "rnic_1", &q, &pci, false);
    assert!(
        !devinfo.contains("rnic_0"),
        "-d rnic_1 shows rnic_1 only:\n{devinfo}"
    );
}

#[test]
fn a_function_in_use_elsewhere_is_reported_not_waited_for() {
    let s = Setup::new(2);
    // This process holds VF0, as another program would.
    let t = VfioUserTransport::connect(&s.rnicd.socket("vf0")).expect("connect");
    let held = Device::open(Box::new(t)).expect("open");
    let (out, took) = s.run(&["vf0", "vf1"], "ibv_devinfo", &["-d", "rnic_0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rnic_0 cannot be opened while held");
    assert!(stderr.contains("Failed to open device"), "{stderr}");
    assert!(
        stderr.contains("libibverbs (rnic): rnic_0:") && stderr.contains("another process"),
        "{stderr}"
    );
    assert!(
        took < ibverbs::OPEN_TIMEOUT + Duration::from_secs(2),
        "gave up after {took:?}"
    );
    // The other function is not affected.
    let devinfo = s.stdout(&["vf0", "vf1"], "ibv_devinfo", &["-d", "rnic_1"]);
    assert!(devinfo.contains("PORT_ACTIVE"), "{devinfo}");
    drop(held);
}
