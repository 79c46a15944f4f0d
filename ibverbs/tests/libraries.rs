//! Libraries Debian builds on libibverbs, unmodified, on rnic's, in the trixie root
//! against a real rnicd with two VFs:
//!
//! - rdma-core's Python bindings (python3-pyverbs, which qemu-scripts/ibverbs-ref.sh
//!   installs): tests/python/pyverbs_rnic.py loads every module of the package (each
//!   binds every libibverbs symbol it imports at once, `ibv_query_qp_data_in_order`,
//!   `ibv_rereg_mr` and `ibv_import_*` among them) and drives the devices through it;
//! - UCX (ucx-utils and libucx0, 1.18, which qemu-scripts/ibverbs-ref.sh installs too):
//!   `ucx_info -d` lists both functions as IB memory domains with the rc_verbs and
//!   ud_verbs transports, and `ucx_perftest` runs its tag-matching latency and bandwidth
//!   tests over each between the two functions, one process on each, small messages and
//!   1 MiB ones (rendezvous: by RDMA READ and by RDMA WRITE over rc_verbs, as the
//!   capture shows; in datagrams over ud_verbs). UCX lists only devices whose
//!   `/dev/infiniband/<name>` is a character device it may read and write (it never
//!   opens it; rnic has no kernel device there), so each command gets a /dev of its own
//!   with stand-ins for them.
//!
//! Each test is skipped, saying so on stderr, where the root lacks its package.

mod common;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

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
        "run `bash qemu-scripts/setup.sh` (qemu-scripts/ibverbs-ref.sh installs it)",
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

/// The environment every ucx_perftest here runs with, besides `UCX_TLS`: one function
/// per process, so each process's function is its rnic_0.
const PERFTEST_ENV: [&str; 2] = ["UCX_NET_DEVICES=rnic_0:1", "UCX_PROTO_INFO=y"];

/// A terminal for ucx_perftest's stdin (the slave side of a new pseudo-terminal, and its
/// master, which must stay open while it runs). Debian's ucx_perftest links Open MPI and
/// calls `MPI_Init` whenever its stdin is not a terminal, which starts Open MPI's own UCX
/// components on the function as well and then fails in the client
/// ("mpi_init:startup:internal-failure"). With a terminal it leaves MPI alone.
fn terminal() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes the two descriptors it opens; the other arguments may be
    // NULL.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both are open descriptors of this process, owned by nothing else.
    unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    }
}

/// A TCP port nobody listens on now, for ucx_perftest's own connection (tests run at
/// once, each with its server).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a TCP port");
    listener.local_addr().expect("its address").port()
}

/// What one ucx_perftest run printed.
struct PerftestRun {
    /// The client's stdout: its protocol table (`UCX_PROTO_INFO`) and results.
    client: String,
}

/// Runs ucx_perftest between two functions of `root`'s rnicd, each process on its own:
/// the server on VF0, the client (`args`: the test, its sizes and iterations) on VF1,
/// with `UCX_TLS=tls` and `env` on both, stdin a terminal. Both must exit 0 within a
/// minute, with no line of the library on stderr but those saying what rnic does not
/// support.
fn ucx_perftest(root: &Root, tls: &str, env: &[&str], args: &[&str]) -> PerftestRun {
    let port = free_port().to_string();
    let tls = format!("UCX_TLS={tls}");
    let (_master, slave) = terminal();
    let spawn = |function: &str, perftest_args: &[&str]| {
        let mut all: Vec<&str> = PERFTEST_ENV.to_vec();
        all.push(&tls);
        all.extend(env);
        all.extend(["ucx_perftest", "-p", &port]);
        all.extend(perftest_args);
        let stdin = slave.try_clone().expect("dup the terminal");
        root.command_after(DEVICE_STAND_INS, &[function], "env", &all)
            .stdin(Stdio::from(stdin))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ucx_perftest")
    };
    let limit = Duration::from_secs(60);
    let server = spawn("vf0", &[]);
    let mut client_args = vec!["127.0.0.1"];
    client_args.extend(args);
    let start = Instant::now();
    // The client connects once; until the server listens, again.
    let client = loop {
        let out = rnic_tests::finish_within(spawn("vf1", &client_args), limit);
        // UCX logs on stdout.
        let refused = String::from_utf8_lossy(&out.stdout).contains("connect() failed");
        if !refused || start.elapsed() > Duration::from_secs(20) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let server = rnic_tests::finish_within(server, limit);
    let text = |o: &Output| {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let both = format!(
        "client {args:?}:\n{}\nserver:\n{}",
        text(&client),
        text(&server)
    );
    assert!(client.status.success() && server.status.success(), "{both}");
    only_unsupported_lines(&String::from_utf8_lossy(&client.stderr));
    only_unsupported_lines(&String::from_utf8_lossy(&server.stderr));
    PerftestRun {
        client: String::from_utf8_lossy(&client.stdout).into_owned(),
    }
}

impl PerftestRun {
    /// Checks the result row: `iterations` done, a positive average time per message and
    /// message rate; and that the protocols ran over `transport` on the function.
    #[track_caller]
    fn finished(&self, iterations: u64, transport: &str) {
        let row = self
            .client
            .lines()
            .find_map(|l| l.strip_prefix("Final:"))
            .unwrap_or_else(|| panic!("no result row:\n{}", self.client));
        let v: Vec<f64> = row
            .split_whitespace()
            .map(|f| f.parse().expect("a number"))
            .collect();
        // Iterations; time per message (50th percentile, average, overall); bandwidth
        // (average, overall); message rate (average, overall).
        eprintln!("over {transport}: Final:{row}");
        assert_eq!(v.len(), 8, "{row}");
        assert_eq!(v[0], iterations as f64, "{row}");
        assert!(v[2] > 0.0 && v[6] > 0.0, "{row}");
        assert!(
            self.client.contains(&format!("| {transport}/rnic_0:1 |")),
            "no protocol over {transport}/rnic_0:1:\n{}",
            self.client
        );
    }
}

/// The BTH opcodes of the frames rnicd captured in `pcap`, counted.
fn opcodes(pcap: &std::path::Path) -> std::collections::BTreeMap<u64, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for (_, [opcode, ..]) in rnic_tests::tshark::tshark_fields(pcap) {
        *counts.entry(opcode).or_default() += 1;
    }
    counts
}

/// Whether the root has ucx_perftest; says why the test is skipped where not.
fn have_ucx_perftest() -> bool {
    installed(
        "usr/bin/ucx_perftest",
        "ucx-utils",
        "run `bash qemu-scripts/setup.sh` (qemu-scripts/ibverbs-ref.sh installs it)",
    )
}

#[test]
fn ucx_perftest_tag_bandwidth_and_latency_run_over_rc_verbs_between_two_functions() {
    if !have_ucx_perftest() {
        return;
    }
    // rc_v: rc_verbs, with ud_verbs as the auxiliary transport UCX wires RC up with.
    let root = Root::new(2, "ucx_perftest");
    ucx_perftest(&root, "rc_v", &[], &["-t", "tag_lat", "-n", "1000"]).finished(1000, "rc_verbs");
    ucx_perftest(&root, "rc_v", &[], &["-t", "tag_bw", "-n", "1000"]).finished(1000, "rc_verbs");
    drop(root);
    // 1 MiB messages go by rendezvous: the receiver READs them from the sender's memory
    // (get_zcopy), or the sender WRITEs them into the receiver's (put_zcopy). rnic's
    // port reads as 2.5 Gb/s, at which UCX's own choice is to copy them through SENDs,
    // so each scheme is asked for; the capture shows its RDMA operations.
    let frames = tempfile::tempdir().expect("tempdir");
    for (scheme, rdma) in [("get_zcopy", 12..=16), ("put_zcopy", 6..=11)] {
        let pcap = frames.path().join(format!("{scheme}.pcap"));
        let pcap_arg = pcap.display().to_string();
        let root = Root::with_rnicd_args(2, "ucx_perftest", &["--pcap", &pcap_arg]);
        let env = format!("UCX_RNDV_SCHEME={scheme}");
        let args = ["-t", "tag_bw", "-s", "1048576", "-n", "4"];
        ucx_perftest(&root, "rc_v", &[&env], &args).finished(4, "rc_verbs");
        drop(root);
        let counts = opcodes(&pcap);
        eprintln!("{scheme}: frames by BTH opcode: {counts:?}");
        let rdma_frames: usize = rdma.clone().filter_map(|op| counts.get(&op)).sum();
        // At least the four messages' worth of payload, at 4096 bytes a frame.
        assert!(
            rdma_frames >= 4 * 256,
            "{scheme}: {rdma_frames} frames of opcodes {rdma:?}; opcodes seen: {counts:?}"
        );
    }
}

#[test]
fn ucx_perftest_tag_bandwidth_and_latency_run_over_ud_verbs_between_two_functions() {
    if !have_ucx_perftest() {
        return;
    }
    let root = Root::new(2, "ucx_perftest");
    ucx_perftest(&root, "ud_verbs", &[], &["-t", "tag_lat", "-n", "1000"])
        .finished(1000, "ud_verbs");
    ucx_perftest(&root, "ud_verbs", &[], &["-t", "tag_bw", "-n", "1000"])
        .finished(1000, "ud_verbs");
    // UD has no RDMA: a 1 MiB message's rendezvous moves it in datagrams.
    let args = ["-t", "tag_bw", "-s", "1048576", "-n", "4"];
    ucx_perftest(&root, "ud_verbs", &[], &args).finished(4, "ud_verbs");
}
