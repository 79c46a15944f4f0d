//! What the crate's integration tests share: the built library, and gcc against
//! Debian's libibverbs headers.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rnic_tests::debian::{require, trixie_root};
use rnic_tests::{finish_within, Rnicd};

/// The libibverbs.so the tests were built with (cargo builds the cdylib with the rlib
/// the tests link).
pub fn library() -> PathBuf {
    let dir = rnic_tests::bin_dir();
    [dir.join("deps/libibverbs.so"), dir.join("libibverbs.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libibverbs.so is built with the crate's tests (crate-type cdylib)")
}

pub use rnic_tests::debian::compile_c as compile;

/// Compiles tests/c/`name`.c against Debian's headers and links it against the built
/// library (as `-libverbs`, through a copy named as rdma-core's): returns the directory
/// holding the copy and the program, which runs with `LD_LIBRARY_PATH` set to it.
pub fn c_program(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(library(), dir.path().join("libibverbs.so")).expect("copy the library");
    std::os::unix::fs::symlink("libibverbs.so", dir.path().join("libibverbs.so.1")).expect("link");
    let exe = dir.path().join(name);
    let lib_dir = format!("-L{}", dir.path().display());
    compile(
        &rnic_tests::vm::repo().join(format!("ibverbs/tests/c/{name}.c")),
        &exe,
        &[&lib_dir, "-libverbs"],
    );
    (dir, exe)
}

/// What a C program of tests/c printed, having exited 0.
pub struct CRun {
    pub stdout: String,
    pub stderr: String,
}

impl CRun {
    /// The steps it passed: its `ok STEP` lines, in order.
    pub fn steps(&self) -> Vec<&str> {
        steps(&self.stdout)
    }
}

/// The `ok STEP` lines of a test program's output, without the `ok `.
pub fn steps(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect()
}

/// Runs tests/c/`name`.c (built by [`c_program`]) against a fresh rnicd with `vfs` VFs,
/// every one of them in `RNIC_VFIO_USER`; it must exit 0.
pub fn run_c_program(name: &str, vfs: u16) -> CRun {
    let rnicd = Rnicd::start(vfs, &[]);
    let (dir, exe) = c_program(name);
    let sockets: Vec<String> = (0..vfs)
        .map(|i| rnicd.socket(&format!("vf{i}")).display().to_string())
        .collect();
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", dir.path())
        .env("RNIC_VFIO_USER", sockets.join(":"))
        .output()
        .expect("run the program");
    let run = CRun {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(out.status.success(), "{}\n{}", run.stdout, run.stderr);
    run
}

/// Debian's trixie root (qemu-scripts/setup.sh makes it) with an rnicd whose sockets,
/// and a copy of the library, it reaches: where Debian's unmodified programs run against
/// rnic.
pub struct Root {
    pub root: PathBuf,
    pub rnicd: Rnicd,
    /// Holds the library as libibverbs.so.1, inside the root.
    lib: tempfile::TempDir,
}

impl Root {
    /// Starts an rnicd with `vfs` VFs whose sockets are inside the root; `program` (in
    /// /usr/bin of the root) must be there.
    pub fn new(vfs: u16, program: &str) -> Self {
        Self::with_rnicd_args(vfs, program, &[])
    }

    /// As [`Root::new`], with further arguments for rnicd (`--pcap FILE`, say).
    pub fn with_rnicd_args(vfs: u16, program: &str, rnicd_args: &[&str]) -> Self {
        let root = trixie_root();
        require(
            &root.join("usr/bin").join(program),
            &format!("{program} in the trixie root (ibverbs-utils, perftest)"),
        );
        assert_eq!(
            // SAFETY: geteuid cannot fail.
            unsafe { libc::geteuid() },
            0,
            "running programs in the trixie root needs root (chroot)"
        );
        let tmp = root.join("tmp");
        let rnicd = Rnicd::start_in(&tmp, vfs, rnicd_args);
        let lib = tempfile::Builder::new()
            .prefix("rnic-ibverbs-")
            .tempdir_in(&tmp)
            .expect("tempdir in the root");
        std::fs::copy(library(), lib.path().join("libibverbs.so.1")).expect("copy the library");
        Self { root, rnicd, lib }
    }

    /// `path` (under the root) as the chroot sees it.
    pub fn inside(&self, path: &Path) -> String {
        let rel = path
            .strip_prefix(&self.root)
            .expect("a path inside the root");
        format!("/{}", rel.display())
    }

    /// The value of RNIC_VFIO_USER for `functions` ("vf0", ...).
    pub fn sockets(&self, functions: &[&str]) -> String {
        functions
            .iter()
            .map(|f| self.inside(&self.rnicd.socket(f)))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The command that runs `program args` in the root with the library and
    /// `functions`. It gets its own mount namespace with /proc mounted in the root
    /// (registering memory reads /proc/self/maps), which goes away with it.
    pub fn command(&self, functions: &[&str], program: &str, args: &[&str]) -> Command {
        self.command_after("true", functions, program, args)
    }

    /// As [`Root::command`], with the shell commands `setup` run first in the command's
    /// mount namespace (`$0` is the root's path; mounts made there go away with it).
    pub fn command_after(
        &self,
        setup: &str,
        functions: &[&str],
        program: &str,
        args: &[&str],
    ) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--", "sh", "-c"])
            .arg(format!(
                r#"mount -t proc proc "$0/proc" && {{ {setup}; }} && exec chroot "$@""#
            ))
            .arg(&self.root)
            .arg(&self.root)
            .arg("env")
            .arg(format!("LD_LIBRARY_PATH={}", self.inside(self.lib.path())))
            .arg(format!("RNIC_VFIO_USER={}", self.sockets(functions)))
            .arg(program)
            .args(args);
        c
    }

    /// Runs `program args` in the root with the library and `functions`; returns its
    /// output and how long it took.
    pub fn run(&self, functions: &[&str], program: &str, args: &[&str]) -> (Output, Duration) {
        let start = Instant::now();
        let out = self
            .command(functions, program, args)
            .output()
            .expect("run unshare and chroot");
        (out, start.elapsed())
    }
}

impl Root {
    /// Runs a client-server program of the root (the pingpongs, perftest): `server_args`
    /// with functions `functions`, then `client_args`, retried while the server does not
    /// listen yet (these programs try to connect once: "Couldn't connect"). Each may run
    /// `limit`. Returns (server, client).
    pub fn server_and_client(
        &self,
        functions: &[&str],
        program: &str,
        server_args: &[&str],
        client_args: &[&str],
        limit: Duration,
    ) -> (Output, Output) {
        let spawn = |args: &[&str]| {
            self.command(functions, program, args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("start {program}: {e}"))
        };
        let server = spawn(server_args);
        let start = Instant::now();
        let client = loop {
            let out = finish_within(spawn(client_args), limit);
            let refused = String::from_utf8_lossy(&out.stderr).contains("Couldn't connect");
            if !refused || start.elapsed() > Duration::from_secs(20) {
                break out;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        (finish_within(server, limit), client)
    }

    /// The GID of `function` (index 1 of its table), as its QUERY_DEVICE says. The
    /// function is closed again before this returns.
    pub fn gid(&self, function: &str) -> std::net::Ipv6Addr {
        use rnic_driver::transport::vfio_user::VfioUserTransport;
        let t = VfioUserTransport::connect(&self.rnicd.socket(function)).expect("connect");
        let device = rnic_driver::Device::open(Box::new(t)).expect("open");
        std::net::Ipv6Addr::from(device.query_device().expect("QUERY_DEVICE").gid)
    }
}
