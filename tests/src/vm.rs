//! Helpers for the VM tests (tests/tests/vm.rs): guests booted by `qemu-scripts/boot.sh`
//! (the busybox guest with the rnic driver, or the Soft-RoCE `--rxe` guest), the QEMU
//! `dgram` links joining their NICs, and an rnicd whose sockets QEMU reaches.

use std::io::BufRead;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;
use std::time::Duration;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// Where VM runs keep their files, as the qemu-scripts see it (inside the trixie root when
/// QEMU runs there, so that QEMU reaches the sockets).
pub fn vm_run_base() -> PathBuf {
    let out = Command::new("bash")
        .arg("-c")
        .arg("source qemu-scripts/env.sh; if qemu_in_root; then echo $TRIXIE_ROOT/run/rnic-vm; else echo $RNIC_CACHE/run/rnic-vm; fi")
        .current_dir(repo())
        .output()
        .expect("source qemu-scripts/env.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The two ends of a QEMU `dgram` Ethernet link on 127.0.0.1: each end sends its frames,
/// one per UDP datagram, from its own port to the other's.
#[derive(Debug, Clone, Copy)]
pub struct DgramLink {
    /// End A's UDP port.
    pub a: u16,
    /// End B's UDP port.
    pub b: u16,
}

impl DgramLink {
    /// Two UDP ports that were free a moment ago (the OS picks them).
    pub fn new() -> Self {
        Self::distinct::<1>()[0]
    }

    /// `N` links on `2 * N` distinct ports: all are bound at once, so the OS cannot hand
    /// out one port twice.
    pub fn distinct<const N: usize>() -> [Self; N] {
        let sockets: Vec<UdpSocket> = (0..2 * N)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port on 127.0.0.1"))
            .collect();
        let port = |i: usize| sockets[i].local_addr().expect("local address").port();
        std::array::from_fn(|i| Self {
            a: port(2 * i),
            b: port(2 * i + 1),
        })
    }

    /// End A as boot.sh's `--nic` takes it.
    pub fn nic_a(&self) -> String {
        format!("dgram:{}:{}", self.a, self.b)
    }

    /// End B as boot.sh's `--nic` takes it.
    pub fn nic_b(&self) -> String {
        format!("dgram:{}:{}", self.b, self.a)
    }
}

impl Default for DgramLink {
    fn default() -> Self {
        Self::new()
    }
}

/// A `qemu-scripts/boot.sh` run being put together.
pub struct Boot {
    args: Vec<String>,
    timeout_s: u32,
}

impl Boot {
    /// The busybox guest with the rnic guest driver's tools.
    pub fn rnic() -> Self {
        Self {
            args: Vec::new(),
            timeout_s: 300,
        }
    }

    /// The Soft-RoCE guest (`--rxe`): Debian's rdma-core and perftest on rdma_rxe, rxe0 on
    /// its eth0.
    pub fn rxe() -> Self {
        Self::rnic().arg("--rxe")
    }

    /// Adds one boot.sh argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Attaches the functions of the rnicd serving `dir` (`--socket-dir`).
    pub fn socket_dir(self, dir: &Path) -> Self {
        self.arg("--socket-dir")
            .arg(dir.to_str().expect("UTF-8 path"))
    }

    /// Attaches VF `index` (`--vf`).
    pub fn vf(self, index: u32) -> Self {
        self.arg("--vf").arg(index.to_string())
    }

    /// Adds a NIC (`--nic SPEC`, from [`DgramLink::nic_a`] or `nic_b`) with the address
    /// `ip` (ADDR/PREFIX). NICs become eth0, eth1, ... in the order added.
    pub fn nic(self, spec: String, ip: &str) -> Self {
        self.arg("--nic").arg(spec).arg("--ip").arg(ip)
    }

    /// Writes a pcap of eth0's traffic to `file` when the guest is done (`--nic-dump`).
    pub fn nic_dump(self, file: &Path) -> Self {
        self.arg("--nic-dump")
            .arg(file.to_str().expect("UTF-8 path"))
    }

    /// Kills QEMU after `seconds` (boot.sh's `--timeout`).
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_s = seconds;
        self
    }

    /// The boot.sh command running `guest_cmd` in the guest.
    pub fn command(&self, guest_cmd: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("qemu-scripts/boot.sh"))
            .args(&self.args)
            .args(["--timeout", &self.timeout_s.to_string(), "--"])
            .arg(guest_cmd)
            .env("RNIC_RNICD", crate::bin("rnicd"));
        cmd
    }

    /// Boots, runs `guest_cmd` and waits: the console output and the guest command's exit
    /// status (boot.sh's: 124 timeout, 125 VM machinery failed).
    pub fn run(&self, guest_cmd: &str) -> (String, Option<i32>) {
        let out = self
            .command(guest_cmd)
            .output()
            .expect("run qemu-scripts/boot.sh");
        finished("guest", &out)
    }

    /// Boots in the background running `guest_cmd`, console and messages piped.
    pub fn spawn(&self, guest_cmd: &str) -> Child {
        self.command(guest_cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("boot a guest")
    }
}

/// Prints a finished boot.sh run's console and messages under `name`; returns the console
/// and the exit status.
pub fn finished(name: &str, out: &Output) -> (String, Option<i32>) {
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "--- {name} ---\n{console}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (console, out.status.code())
}

/// Starts an rnicd with `vfs` VFs and `extra` arguments, its sockets (and its log,
/// `rnicd.log`) in a fresh folder named after `name` where QEMU reaches them; returns the
/// folder and the process.
pub fn start_rnicd(name: &str, vfs: u32, extra: &[&str]) -> (PathBuf, Child) {
    let dir = vm_run_base().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket dir");
    let log = std::fs::File::create(dir.join("rnicd.log")).expect("log");
    let mut rnicd = Command::new(crate::bin("rnicd"))
        .args(["--socket-dir"])
        .arg(&dir)
        .args(["--vfs", &vfs.to_string()])
        .args(extra)
        .env("RUST_LOG", "info")
        .stderr(log)
        .spawn()
        .expect("start rnicd");
    crate::wait_for(Duration::from_secs(10), "rnicd to serve", || {
        let log = std::fs::read_to_string(dir.join("rnicd.log")).unwrap_or_default();
        if let Ok(Some(status)) = rnicd.try_wait() {
            panic!("rnicd {extra:?} exited ({status}) before serving:\n{log}");
        }
        log.contains("serving the PF")
    });
    (dir, rnicd)
}

/// A guest's console lines as they come, from a child's standard output; the thread
/// returns them all once the guest is done.
pub fn console_lines(child: &mut Child) -> (Receiver<String>, JoinHandle<String>) {
    let out = child.stdout.take().expect("guest stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let all = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(out).lines().map_while(|l| l.ok()) {
            all += &line;
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, all)
}

/// Shell functions for guest scripts. `retry_connect CMD...` runs a verbs tool's client
/// until its server accepts the TCP connection (the guests boot at their own speed):
/// it retries, for up to 120 s, only while the tool says "Couldn't connect" (rdma-core's
/// and perftest's words) or "Connection refused".
pub const GUEST_SH_RETRY_CONNECT: &str = r#"
retry_connect() {
    tries=0
    while :; do
        out=$("$@" 2>&1) && { echo "$out"; return 0; }
        if ! echo "$out" | grep -qE "Couldn't connect|Connection refused" || [ $tries -ge 240 ]; then
            echo "$out"
            echo "retry_connect: $* failed" >&2
            return 1
        fi
        tries=$((tries + 1))
        sleep 0.5
    done
}
"#;
