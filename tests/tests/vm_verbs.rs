//! VM tests of the verbs guest (`boot.sh --verbs`): Debian trixie's unmodified
//! ibverbs-utils and perftest, with rnic's libibverbs.so.1 installed as the system
//! libibverbs, drive rnic functions attached to TCG guests (through PCI sysfs and
//! /proc/self/pagemap, as root). They show:
//!
//! - `ibv_devices` and `ibv_devinfo -v` list the guest's functions with the attributes the
//!   functions themselves report (QUERY_DEVICE and config space, asked on the host);
//! - `ibv_rc_pingpong` (plain, `-e`, `-s 1`, `-s 65536 -c`), `ibv_uc_pingpong`,
//!   `ibv_ud_pingpong` and `ibv_srq_pingpong` run between two VFs of one guest (through
//!   sysfs, and through VFIO), between two guests (a VF each, the TCP rendezvous on a
//!   second Ethernet segment), and against a Soft-RoCE guest in both roles (rnicd's
//!   Ethernet port and the rxe guest's eth0 on one QEMU segment);
//! - perftest over UC QPs (`-c UC`: `ib_send_bw`, `ib_write_bw`, `ib_send_lat`,
//!   `ib_write_lat`, 200 iterations) between two VFs of one guest, through sysfs and
//!   through VFIO;
//! - between two VFs of one guest, `ib_write_bw -s 8388608` and `ibv_rc_pingpong -s
//!   16777216` register 16 MiB regions, and `ibv_rc_pingpong -s 1073741824` regions of
//!   1 GiB, which the library describes with page tables (the page map's pages are not
//!   contiguous; docs/hardware-interface.md §7.3);
//! - perftest's programs with `-a` (every size from 2 bytes to 8 MiB; the atomic ones,
//!   which perftest runs at 8 bytes only, with their defaults) between two VFs, through
//!   sysfs and through VFIO;
//! - in a guest with a virtual IOMMU (`boot.sh --verbs --iommu`) the library binds the
//!   functions to vfio-pci and runs the same verbs through VFIO, and a blocked
//!   `ibv_get_cq_event` uses no CPU (MSI-X eventfds);
//! - a C program copied into the guest (ibverbs/tests/c/data_path.c) drives every verb,
//!   and the memory the device must not reach (unmapped, read-only for writes) is refused;
//! - perftest's `ib_{write,read,send,atomic}_{bw,lat}`, with their defaults and with
//!   `-q 4` for the bandwidth tests, run between two guests; against Soft-RoCE, in both
//!   roles, with fewer iterations (see [`RXE_PERFTEST`]);
//! - rdma-core's own test suite (the tests/ of the rdma-core Debian ships, with Debian's
//!   python3-pyverbs: `boot.sh --pyverbs`) runs module by module in the verbs guest on
//!   rnic_0 and in the Soft-RoCE guest on rxe0, after the pingpongs between them: every
//!   test that passes on Soft-RoCE passes on rnic, but those tests/rdma-core/expected.txt
//!   lists with the reason (see [`rnic_tests::rdma_core`]);
//! - UCX's `ucx_perftest` (tag-matching latency, and bandwidth with 1 MiB messages) runs
//!   over `rc_verbs` and over `ud_verbs` between the verbs guest and a Soft-RoCE guest.
//!
//! Every run must exit 0 with nothing on stderr (perftest: nothing but its own notice),
//! each end must name the other's QPs and both functions' GIDs, and report the run's bytes
//! and iterations (the pingpongs) or its result row (perftest).
//!
//! They boot VMs, so they are ignored by default: `cargo build --workspace --bins && cargo
//! test -p rnic-tests --test vm_verbs -- --ignored --test-threads=1` (as root, after
//! qemu-scripts/setup.sh; tests/run-all.sh runs them).

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::time::Instant;

use rnic_tests::ibv_runs::{
    bw, lat, pingpong, script, truth, Check, Dev, Phase, Run, Setting, DEFAULTS, PERFTEST,
    PINGPONGS,
};
use rnic_tests::ibv_tools::{check_devinfo, ToolOutput};
use rnic_tests::rdma_core::{self, SuiteRun};
use rnic_tests::vm::{release_rnicd, tool_runs, vm_run_base, Boot, DgramLink, ToolRun};
use rnic_tests::Rnicd;

/// The pingpongs against Soft-RoCE: 200 iterations instead of 1000, since rxe runs in
/// the TCG guest's kernel (a round trip takes 15 to 70 ms there; 1000 would take five
/// minutes for both roles).
const RXE_PINGPONG: Setting = Setting {
    iters: Some(200),
    extra: "",
};

/// perftest over UC QPs (`-c UC`), on one QP with the default message sizes and 200
/// iterations: within the receive depth (512), so a `ib_send_bw` server has a receive
/// posted for every message before the first one comes (a UC message that finds none is
/// dropped, and the server would wait for it for ever).
const UC_PERFTEST: [Run; 4] = [
    uc_perftest("uc-send-bw", "ib_send_bw", 65536.0, 4),
    uc_perftest("uc-write-bw", "ib_write_bw", 65536.0, 4),
    uc_perftest("uc-send-lat", "ib_send_lat", 2.0, 5),
    uc_perftest("uc-write-lat", "ib_write_lat", 2.0, 5),
];

/// A perftest run of `program` over a UC QP (see [`UC_PERFTEST`]): message size, and the
/// figure that must be positive (4: a bandwidth test's MsgRate, 5: a latency test's
/// t_avg).
const fn uc_perftest(label: &'static str, program: &'static str, bytes: f64, figure: usize) -> Run {
    Run {
        label,
        program,
        args: "-F -c UC -n 200",
        check: Check::Perftest {
            bytes,
            iters: 200.0,
            qps: 1,
            figure,
        },
    }
}

/// Regions of 16 MiB, which without an IOMMU (the page map's guest-physical pages, not
/// contiguous) the library registers with page tables (docs/hardware-interface.md §7.3):
/// `ib_write_bw -s 8388608` registers twice its message size, as `-a` does for its
/// largest message (before page tables it failed at once: "a page list of 4096 pages
/// needs 32768 device-contiguous bytes"), and `ibv_rc_pingpong -s 16777216` one buffer
/// of that size at each end. Few iterations: a TCG guest touches every byte of them.
const LARGE_REGIONS: [Run; 3] = [
    Run {
        label: "write-bw-8m",
        program: "ib_write_bw",
        args: "-F -s 8388608 -n 20",
        check: Check::Perftest {
            bytes: 8388608.0,
            iters: 20.0,
            qps: 1,
            figure: 4,
        },
    },
    pingpong(
        "rc-16m",
        "ibv_rc_pingpong",
        "-s 16777216 -n 10",
        (16777216, 10, 1),
    ),
    // A region of 1 GiB at each end, in a guest given the memory for it. (Not perftest:
    // it fills its buffers with rand() a byte at a time, over four minutes a GiB in a
    // TCG guest; the pingpong's memset takes 2.5 s, the registration 0.55 s.)
    pingpong(
        "rc-1g",
        "ibv_rc_pingpong",
        "-s 1073741824 -n 2",
        (1073741824, 2, 1),
    ),
];

/// Guest memory (MiB) of the verbs guest that registers [`LARGE_REGIONS`]: two regions
/// of 1 GiB, the kernel and the rest.
const LARGE_REGIONS_GUEST_MIB: &str = "3584";

/// perftest's most common form, `-a`: every message size from 2 bytes to 8 MiB (perftest
/// registers twice the largest, 16 MiB, which without an IOMMU needs page tables), each
/// for 5 iterations, perftest's least (a TCG guest touches every byte of the buffers).
/// perftest itself refuses `-a` for its atomic programs ("Message size cannot be changed
/// for Atomic tests", on any device): they run at their only size, 8 bytes, with their
/// defaults.
const EVERY_SIZE: [Run; 8] = [
    every_size("write-bw-a", "ib_write_bw", 4),
    every_size("read-bw-a", "ib_read_bw", 4),
    every_size("send-bw-a", "ib_send_bw", 4),
    bw("atomic-bw", "ib_atomic_bw", 1, 8.0, 1000.0),
    every_size("write-lat-a", "ib_write_lat", 5),
    every_size("read-lat-a", "ib_read_lat", 5),
    every_size("send-lat-a", "ib_send_lat", 5),
    lat("atomic-lat", "ib_atomic_lat", 8.0, 1000.0),
];

/// A run of [`EVERY_SIZE`]; `figure` as for [`Check::Perftest`].
const fn every_size(label: &'static str, program: &'static str, figure: usize) -> Run {
    Run {
        label,
        program,
        args: "-F -a -n 5",
        check: Check::EverySize {
            largest: 8388608.0,
            iters: 5.0,
            figure,
        },
    }
}

/// perftest against Soft-RoCE: the default message sizes, but 200 iterations (per QP)
/// instead of 1000 or 5000, since rxe runs in the TCG guest's kernel (a latency test's
/// round trip takes about 10 ms there), and a QP timeout of about 1 s (`-u 18`,
/// 4.096 us * 2^18) instead of 67 ms (14): four QPs' 64 KiB READs keep rxe busy for more
/// than half a second (measured: the third QP's first answer came 650 ms after its
/// requests), and with 67 ms rnic's requester gives up (`RETRY_EXC_ERR`) after 7 retries
/// while rxe is still answering the other QPs.
const RXE_PERFTEST: Setting = Setting {
    iters: Some(200),
    extra: "-u 18",
};

/// rnic's first (in the two-guest tests: only) function in a verbs guest.
const RNIC_0: Dev = Dev {
    name: "rnic_0",
    gid_index: "1",
};
/// The rxe guest's Soft-RoCE device.
const RXE_0: Dev = Dev {
    name: "rxe0",
    gid_index: "$(rxe-gid-index)",
};

/// An rnicd (the release build, see [`release_rnicd`]) whose sockets QEMU reaches, with
/// `vfs` VFs and `extra` arguments.
fn rnicd(vfs: u16, extra: &[&str]) -> Rnicd {
    let base = vm_run_base();
    std::fs::create_dir_all(&base).expect("the VM run directory");
    Rnicd::start_binary_in(&release_rnicd(), &base, vfs, extra)
}

/// The console of a finished guest, which must have exited 0 after its whole script.
fn console_of(name: &str, child: std::process::Child) -> String {
    console_of_output(name, &child.wait_with_output().expect("wait for the guest"))
}

/// [`console_of`] of a boot that has ended.
fn console_of_output(name: &str, out: &std::process::Output) -> String {
    let (console, status) = rnic_tests::vm::finished(name, out);
    assert_eq!(status, Some(0), "{name} failed");
    assert!(
        console.contains("=== script done"),
        "{name} did not finish its script"
    );
    console
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn ibv_devices_and_ibv_devinfo_in_the_verbs_guest_show_its_functions() {
    let started = Instant::now();
    let rnicd = rnicd(2, &[]);
    let truth = [truth(&rnicd, "vf0"), truth(&rnicd, "vf1")];
    let body = "run_tool devices ibv_devices\nrun_tool list ibv_devinfo -l\n\
                run_tool devinfo ibv_devinfo -v\nrun_tool devinfo-1 ibv_devinfo -d rnic_1\n\
                show_tool devices list devinfo devinfo-1\n";
    // This boot also shows that the verbs guest boots right after set-up with the cache
    // read-only: rnic's libibverbs is checked in Debian's root and packed outside it.
    let builds = tempfile::tempdir().expect("a directory for the boot's builds");
    let guest = Boot::verbs()
        .socket_dir(&rnicd.socket_dir())
        .vf(0)
        .vf(1)
        .read_only_cache()
        .builds_in(builds.path())
        .command(&script(body))
        .output()
        .expect("run qemu-scripts/boot.sh");
    rnic_tests::vm::assert_built_read_only(&guest, &["[build-debian-guest] wrote "]);
    let runs = tool_runs(&console_of_output("verbs guest", &guest));
    let out = |label: &str| -> String {
        let run = &runs[label];
        run.output.assert_success(label);
        assert!(
            run.output.stderr.is_empty(),
            "{label} wrote to stderr:\n{}",
            run.output.stderr
        );
        run.output.stdout.clone()
    };

    // Which device is which VF: by node GUID (the guest orders them by PCI address).
    let devices = out("devices");
    let mut names = Vec::new();
    for (q, _) in &truth {
        let guid: String = ibverbs::attr::node_guid(q.mac)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name = devices
            .lines()
            .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [name, g] if g == guid => Some(name.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| {
                panic!("no device with GUID {guid} in ibv_devices' output:\n{devices}")
            });
        names.push(name);
    }
    names.sort();
    assert_eq!(names, ["rnic_0", "rnic_1"], "{devices}");

    let list = out("list");
    assert!(
        list.contains("2 HCAs found:")
            && list.contains("\trnic_0\n")
            && list.contains("\trnic_1\n"),
        "{list}"
    );
    let devinfo = out("devinfo");
    let devinfo_1 = out("devinfo-1");
    for (q, pci) in &truth {
        let guid = ibverbs::attr::node_guid(q.mac);
        let name = if devinfo_1.contains(&rnic_tests::ibv_tools::devinfo_guid(guid)) {
            "rnic_1"
        } else {
            "rnic_0"
        };
        check_devinfo(&devinfo, name, q, pci, guid, true);
    }
    assert!(
        !devinfo_1.contains("rnic_0"),
        "-d rnic_1 shows rnic_1 only:\n{devinfo_1}"
    );
    eprintln!("done after {:?}", started.elapsed());
}

/// ibverbs/tests/c/data_path.c built in `dir` as the README says to build one's own
/// program: on the host against Debian's <infiniband/verbs.h>, linked against a
/// libibverbs.so.1 (this one rnic's; the guest's is rnic's whichever it was), to be
/// copied in with boot.sh --file.
fn data_path_program(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::copy(
        rnic_tests::bin_dir().join("deps/libibverbs.so"),
        dir.join("libibverbs.so"),
    )
    .expect("copy the library the tests were built with");
    let exe = dir.join("data_path");
    rnic_tests::debian::compile_c(
        &rnic_tests::vm::repo().join("ibverbs/tests/c/data_path.c"),
        &exe,
        &[&format!("-L{}", dir.display()), "-libverbs"],
    );
    exe
}

/// Guest script lines running data_path (copied in by [`data_path_program`]) as run
/// `data-path`.
const RUN_DATA_PATH: &str = "run_tool data-path ./data_path\nshow_tool data-path\n";

/// Checks data_path's run: it checks every byte, completion, errno and event itself and
/// stops at the first wrong one; `ok done` is its last line, and what rnic lacks was said
/// on stderr, one line each. Returns its idle wait's wall and CPU seconds.
fn check_data_path(runs: &BTreeMap<String, ToolRun>) -> (f64, f64) {
    let run = &runs["data-path"].output;
    run.assert_success("data_path");
    let steps: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    assert_eq!(steps.last(), Some(&"done"), "{}", run.stdout);
    assert!(steps.len() > 10, "{}", run.stdout);
    // What rnic lacks said so, one line each, and nothing else complained.
    assert!(
        run.stderr
            .lines()
            .all(|l| l.starts_with("libibverbs (rnic): ")),
        "{}",
        run.stderr
    );
    rnic_tests::ibv_tools::idle_wait(&run.stdout)
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn a_c_program_copied_into_the_verbs_guest_drives_every_verb() {
    let started = Instant::now();
    let rnicd = rnicd(2, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = data_path_program(dir.path());
    let guest = Boot::verbs()
        .socket_dir(&rnicd.socket_dir())
        .vf(0)
        .vf(1)
        .arg("--file")
        .arg(exe.to_str().expect("UTF-8 path"))
        .spawn(&script(RUN_DATA_PATH));
    let (wall, cpu) = check_data_path(&tool_runs(&console_of("verbs guest", guest)));
    // Without an IOMMU the library has no interrupts and polls: only reported.
    eprintln!("idle wait without interrupts: {cpu:.3} s CPU in {wall:.3} s");
    eprintln!("done after {:?}", started.elapsed());
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn in_an_iommu_guest_the_verbs_library_drives_the_vfs_through_vfio_and_sleeps_while_idle() {
    // boot.sh --verbs --iommu: the functions have IOMMU groups, so the library binds them
    // to vfio-pci, maps the application's memory at IOVAs of its own and waits on MSI-X
    // eventfds. data_path (every verb, the refusals, and a blocking wait through two idle
    // seconds), then the pingpongs and perftest's eight programs (and the bandwidth ones
    // on four QPs, four over UC QPs, and all but the atomics with -a) between the two VFs.
    let started = Instant::now();
    let rnicd = rnicd(2, &[]);
    let (q0, q1) = (truth(&rnicd, "vf0").0, truth(&rnicd, "vf1").0);
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = data_path_program(dir.path());
    let runs: Vec<Run> = PINGPONGS
        .iter()
        .chain(&PERFTEST)
        .chain(&UC_PERFTEST)
        // (The atomics of EVERY_SIZE are PERFTEST's.)
        .chain(
            EVERY_SIZE
                .iter()
                .filter(|r| matches!(r.check, Check::EverySize { .. })),
        )
        .copied()
        .collect();
    let phase = Phase {
        name: "iommu",
        runs: &runs,
        setting: DEFAULTS,
    };
    let rnic_1 = Dev {
        name: "rnic_1",
        ..RNIC_0
    };
    let drivers = "run_tool drivers sh -c 'for d in /sys/bus/pci/devices/*; do \
                   if [ \"$(cat $d/vendor)\" = 0xf1c0 ]; then echo \"${d##*/} \
                   $(basename $(readlink $d/driver)) group $(basename $(readlink $d/iommu_group))\"; \
                   fi; done'\nshow_tool drivers\n";
    let body = format!("{RUN_DATA_PATH}{}{drivers}", phase.both(RNIC_0, rnic_1));
    let guest = Boot::verbs()
        .arg("--iommu")
        .socket_dir(&rnicd.socket_dir())
        .vf(0)
        .vf(1)
        .arg("--file")
        .arg(exe.to_str().expect("UTF-8 path"))
        .timeout(900)
        .spawn(&script(&body));
    let runs = tool_runs(&console_of("verbs guest with an IOMMU", guest));
    let (wall, cpu) = check_data_path(&runs);
    eprintln!("idle wait through VFIO: {cpu:.3} s CPU in {wall:.3} s");
    assert!(
        cpu < 0.1 * wall,
        "waiting {wall:.3} s for a completion event took {cpu:.3} s of CPU: the wait did not sleep on the interrupt"
    );
    phase.check(&runs, &runs, [q0.gid.into(), q1.gid.into()]);
    // The library took both functions through VFIO: bound to vfio-pci, each in a group.
    let drivers = &runs["drivers"].output;
    drivers.assert_success("driver listing");
    let bound: Vec<&str> = drivers.stdout.lines().collect();
    assert_eq!(bound.len(), 2, "{}", drivers.stdout);
    assert!(
        bound
            .iter()
            .all(|l| l.split_whitespace().nth(1) == Some("vfio-pci")),
        "{}",
        drivers.stdout
    );
    eprintln!("done after {:?}", started.elapsed());
}

#[test]
#[ignore = "boots a QEMU guest; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn debian_pingpongs_run_between_two_vfs_of_the_verbs_guest() {
    let started = Instant::now();
    let rnicd = rnicd(2, &[]);
    let (q0, q1) = (truth(&rnicd, "vf0").0, truth(&rnicd, "vf1").0);
    // Server on rnic_0, client on rnic_1 (QEMU gives VF0 the lower PCI address), over
    // the guest's loopback.
    let rnic_1 = Dev {
        name: "rnic_1",
        ..RNIC_0
    };
    let phase = Phase {
        name: "vfs",
        runs: &PINGPONGS,
        setting: DEFAULTS,
    };
    // Then perftest over UC QPs, regions of 16 MiB and 1 GiB, which need page tables on
    // this transport, and perftest's eight programs with -a.
    let uc = Phase {
        name: "uc",
        runs: &UC_PERFTEST,
        setting: DEFAULTS,
    };
    let large = Phase {
        name: "large",
        runs: &LARGE_REGIONS,
        setting: DEFAULTS,
    };
    let every_size = Phase {
        name: "sysfs",
        runs: &EVERY_SIZE,
        setting: DEFAULTS,
    };
    let body = format!(
        "{}{}{}{}",
        phase.both(RNIC_0, rnic_1),
        uc.both(RNIC_0, rnic_1),
        large.both(RNIC_0, rnic_1),
        every_size.both(RNIC_0, rnic_1)
    );
    let guest = Boot::verbs()
        .socket_dir(&rnicd.socket_dir())
        .vf(0)
        .vf(1)
        .arg("--mem")
        .arg(LARGE_REGIONS_GUEST_MIB)
        .timeout(900)
        .spawn(&script(&body));
    let runs = tool_runs(&console_of("verbs guest", guest));
    let gids = [q0.gid.into(), q1.gid.into()];
    phase.check(&runs, &runs, gids);
    uc.check(&runs, &runs, gids);
    large.check(&runs, &runs, gids);
    every_size.check(&runs, &runs, gids);
    eprintln!("done after {:?}", started.elapsed());
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn debian_pingpongs_and_perftest_run_between_two_verbs_guests() {
    let started = Instant::now();
    let rnicd = rnicd(2, &[]);
    let gids: [Ipv6Addr; 2] = [
        truth(&rnicd, "vf0").0.gid.into(),
        truth(&rnicd, "vf1").0.gid.into(),
    ];
    // Guest A (VF0) serves, guest B (VF1) connects; TCP between their eth0s.
    let tcp = DgramLink::new();
    let (a_ip, b_ip) = ("10.84.0.1", "10.84.0.2");
    let all: Vec<Run> = PINGPONGS.iter().chain(&PERFTEST).copied().collect();
    let phase = Phase {
        name: "guests",
        runs: &all,
        setting: DEFAULTS,
    };
    let guest = |vf: u32, nic: String, ip: &str, body: String| {
        Boot::verbs()
            .socket_dir(&rnicd.socket_dir())
            .vf(vf)
            .nic(nic, &format!("{ip}/24"))
            .timeout(900)
            .spawn(&script(&body))
    };
    let a = guest(0, tcp.nic_a(), a_ip, phase.serve(RNIC_0));
    let b = guest(1, tcp.nic_b(), b_ip, phase.connect(RNIC_0, a_ip));
    let a = tool_runs(&console_of("guest A (VF0)", a));
    let b = tool_runs(&console_of("guest B (VF1)", b));
    phase.check(&a, &b, gids);
    eprintln!("done after {:?}", started.elapsed());
}

/// rnicd's Ethernet port and a Soft-RoCE guest's eth0 share a QEMU segment; the verbs
/// guest (VF0, 10.82.0.2 on it) and the rxe guest (10.82.0.100) talk TCP over a second
/// segment (10.83.0.1 and .2). The rxe guest's RoCE NIC has a jumbo MTU (4200 bytes:
/// rxe's active MTU 4096, as rnic's), so perftest's defaults agree on the path MTU; the
/// pingpongs ask for 1024 themselves. In phase `rnic-serves` the verbs guest serves
/// `runs` (under `setting`) and the rxe guest connects; in `rxe-serves` the other way
/// round. With `suite`, both guests then run rdma-core's own test suite on their own
/// device, and the runs are compared ([`rdma_core::check_suite`]).
fn against_rxe(runs: &[Run], setting: Setting, suite: bool) {
    let rnic_serves = Phase {
        name: "rnic-serves",
        runs,
        setting,
    };
    let rxe_serves = Phase {
        name: "rxe-serves",
        ..rnic_serves
    };
    let started = Instant::now();
    let [roce, tcp] = DgramLink::distinct::<2>();
    let net = format!("eth:dgram:127.0.0.1:{}:127.0.0.1:{}", roce.a, roce.b);
    let rnicd = rnicd(1, &["--net", &net]);
    let rnic_gid: Ipv6Addr = truth(&rnicd, "vf0").0.gid.into();
    let rxe_gid: Ipv6Addr = "::ffff:10.82.0.100".parse().expect("GID");
    let (rnic_ip, rxe_ip) = ("10.83.0.1", "10.83.0.2");
    let mut rnic_body = rnic_serves.serve(RNIC_0) + &rxe_serves.connect(RNIC_0, rxe_ip);
    let mut rxe_body = rnic_serves.connect(RXE_0, rnic_ip) + &rxe_serves.serve(RXE_0);
    // The suite: Python, pyverbs and the tests in both guests, and the runner.
    let with_suite = |boot: Boot| {
        if suite {
            boot.arg("--pyverbs")
                .arg("--file")
                .arg(rdma_core::runner_file())
        } else {
            boot
        }
    };
    if suite {
        rnic_body += &rdma_core::guest_lines(RNIC_0.name, RNIC_0.gid_index);
        rxe_body += &rdma_core::guest_lines(RXE_0.name, RXE_0.gid_index);
    }
    let rnic = with_suite(
        Boot::verbs()
            .socket_dir(&rnicd.socket_dir())
            .vf(0)
            .nic(tcp.nic_a(), &format!("{rnic_ip}/24")),
    )
    .timeout(1200)
    .spawn(&script(&rnic_body));
    let rxe = with_suite(
        Boot::rxe()
            .nic(roce.nic_b(), "10.82.0.100/24")
            .arg("--mtu")
            .arg("4200")
            .nic(tcp.nic_b(), &format!("{rxe_ip}/24")),
    )
    .timeout(1200)
    .spawn(&script(&rxe_body));
    let rnic_console = console_of("verbs guest (rnic VF0)", rnic);
    let rxe_console = console_of("rxe guest", rxe);
    let rnic = tool_runs(&rnic_console);
    let rxe = tool_runs(&rxe_console);
    // What crossed rnicd's Ethernet port, shown before the checks.
    let stats: serde_json::Value =
        serde_json::from_str(&rnicd.admin(&["--json", "stats", "port"])).expect("JSON");
    let port = stats.get("port").unwrap_or(&stats);
    eprintln!("rnicd's port: {port}");
    rnic_serves.check(&rnic, &rxe, [rnic_gid, rxe_gid]);
    rxe_serves.check(&rxe, &rnic, [rxe_gid, rnic_gid]);
    // The RoCE traffic crossed rnicd's Ethernet port.
    for counter in ["tx_frames", "rx_frames"] {
        assert!(
            port[counter].as_u64().unwrap_or(0) > 1000,
            "rnicd's port {counter}: {port}"
        );
    }
    if suite {
        rdma_core::check_suite(
            &SuiteRun::parse(&rxe_console),
            &SuiteRun::parse(&rnic_console),
            "rnic",
            rdma_core::EXPECTED_VERBS,
        );
    }
    eprintln!("done after {:?}", started.elapsed());
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn debian_pingpongs_run_against_soft_roce_and_rdma_cores_tests_that_pass_there_pass_on_rnic() {
    against_rxe(&PINGPONGS, RXE_PINGPONG, true);
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn perftest_runs_between_the_verbs_guest_and_soft_roce_both_ways() {
    against_rxe(&PERFTEST, RXE_PERFTEST, false);
}

/// UCX (Debian's ucx-utils, 1.18, in both guests) between the verbs guest (rnic VF0) and
/// the rxe guest, which serves: `ucx_perftest`'s `tag_lat` (100 iterations) and `tag_bw`
/// of 1 MiB messages (4, by rendezvous) over `rc_v` (rc_verbs, wired up over ud_verbs)
/// and over `ud_verbs`, on the segments of [`against_rxe`]. Each end must exit 0, the
/// client with its result row, and the library must say nothing but what rnic does not
/// support. What the ends need (ibverbs/README.md, *Libraries on top*):
///
/// - `ucx_perftest` calls `MPI_Init` (stdin is not a terminal): `-P 0` and Open MPI
///   without its UCX components, whose use of the function makes `MPI_Init` fail;
/// - on the rxe side `UCX_UD_VERBS_ETH_DGID_CHECK=n`: rxe leaves `wc.sl` 0, from which
///   UCX 1.18 concludes IPv6 and then drops every IPv4 datagram as misaddressed (rnic
///   reports the packet type there);
/// - the rxe guest's RoCE NIC at 4200 bytes: UCX's UD sends datagrams of its own port's
///   MTU, 4096 on rnic.
#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn ucx_perftest_runs_between_the_verbs_guest_and_soft_roce() {
    let started = Instant::now();
    let [roce, tcp] = DgramLink::distinct::<2>();
    let net = format!("eth:dgram:127.0.0.1:{}:127.0.0.1:{}", roce.a, roce.b);
    let rnicd = rnicd(1, &["--net", &net]);
    let (rnic_ip, rxe_ip) = ("10.83.0.1", "10.83.0.2");
    let runs = [
        ("rc_v", "tag_lat", "-n 100", 100),
        ("rc_v", "tag_bw", "-s 1048576 -n 4", 4),
        ("ud_verbs", "tag_lat", "-n 100", 100),
        ("ud_verbs", "tag_bw", "-s 1048576 -n 4", 4),
    ];
    let common = "export OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx OMPI_MCA_btl=self\n";
    let mut rxe_body =
        format!("{common}export UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n\n");
    let mut rnic_body = format!("{common}export UCX_NET_DEVICES=rnic_0:1\n");
    let label = |tls: &str, test: &str, end: &str| format!("ucx-{tls}-{test}-{end}");
    for (tls, test, args, _) in runs {
        let (server, client) = (label(tls, test, "server"), label(tls, test, "client"));
        rxe_body += &format!(
            "export UCX_TLS={tls}\nrun_tool {server} ucx_perftest -P 0\nshow_tool {server}\n"
        );
        rnic_body += &format!(
            "export UCX_TLS={tls}\n\
             run_tool -r {client} ucx_perftest -P 0 {rxe_ip} -t {test} {args}\n\
             show_tool {client}\n"
        );
    }
    let rnic = Boot::verbs()
        .socket_dir(&rnicd.socket_dir())
        .vf(0)
        .nic(tcp.nic_a(), &format!("{rnic_ip}/24"))
        .timeout(900)
        .spawn(&script(&rnic_body));
    let rxe = Boot::rxe()
        .nic(roce.nic_b(), "10.82.0.100/24")
        .arg("--mtu")
        .arg("4200")
        .nic(tcp.nic_b(), &format!("{rxe_ip}/24"))
        .timeout(900)
        .spawn(&script(&rxe_body));
    let rnic = tool_runs(&console_of("verbs guest (rnic VF0)", rnic));
    let rxe = tool_runs(&console_of("rxe guest", rxe));
    for (tls, test, _, iterations) in runs {
        let (server, client) = (label(tls, test, "server"), label(tls, test, "client"));
        let get = |runs: &BTreeMap<String, ToolRun>, label: &str| -> ToolOutput {
            runs.get(label)
                .unwrap_or_else(|| panic!("no run {label}"))
                .output
                .clone()
        };
        let (s, c) = (get(&rxe, &server), get(&rnic, &client));
        s.assert_success(&server);
        c.assert_success(&client);
        let row = c
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("Final:"))
            .unwrap_or_else(|| panic!("{client}: no result row:\n{}", c.stdout));
        eprintln!("{client}: Final:{row}");
        let first: Option<f64> = row.split_whitespace().next().and_then(|f| f.parse().ok());
        assert_eq!(first, Some(f64::from(iterations)), "{client}: {row}");
        for line in c.stderr.lines().filter(|l| l.contains("libibverbs (rnic)")) {
            assert!(
                line.contains("is not supported by rnic"),
                "{client}:\n{}",
                c.stderr
            );
        }
    }
    eprintln!("done after {:?}", started.elapsed());
}
