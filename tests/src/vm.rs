//! Helpers for the VM tests (tests/tests/vm*.rs): guests booted by `qemu-scripts/boot.sh`
//! (the busybox guest with the rnic driver, the Soft-RoCE `--rxe` guest, or the `--verbs`
//! guest with rnic's libibverbs), the QEMU `dgram` links joining their NICs, an rnicd whose
//! sockets QEMU reaches, and the runs of verbs programs read back from a guest's console.

use std::collections::BTreeMap;
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

/// Where VM runs keep their files, as the qemu-scripts see it (`$RNIC_VM_RUNS`, which QEMU
/// reaches also when it runs inside the trixie root, so that it reaches the sockets).
pub fn vm_run_base() -> PathBuf {
    let out = Command::new("bash")
        .arg("-c")
        .arg("source qemu-scripts/env.sh; echo $RNIC_VM_RUNS")
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
    read_only_cache: bool,
    builds: Option<PathBuf>,
}

impl Boot {
    /// The busybox guest with the rnic guest driver's tools.
    pub fn rnic() -> Self {
        Self {
            args: Vec::new(),
            timeout_s: 300,
            read_only_cache: false,
            builds: None,
        }
    }

    /// The Soft-RoCE guest (`--rxe`): Debian's rdma-core and perftest on rdma_rxe, rxe0 on
    /// its eth0.
    pub fn rxe() -> Self {
        Self::rnic().arg("--rxe")
    }

    /// The verbs guest (`--verbs`): Debian's ibverbs-utils and perftest on rnic's
    /// libibverbs.so.1, which drives the attached functions (`rnic_0`, ... in PCI order).
    pub fn verbs() -> Self {
        Self::rnic().arg("--verbs")
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

    /// Boots with the VM cache (`$RNIC_CACHE`, set up) read-only: boot.sh runs in a mount
    /// namespace of its own where the cache is a read-only bind mount of itself, so the
    /// run fails if boot.sh or anything it calls writes into the cache (other processes
    /// still see it writable).
    pub fn read_only_cache(mut self) -> Self {
        self.read_only_cache = true;
        self
    }

    /// Builds what the boot builds from the checkout (rnic.ko and the kernel guest's
    /// image, or the verbs guest's image with rnic's libibverbs) in `dir`, boot.sh's
    /// `$RNIC_BUILDS`, instead of beside the runs: with an empty directory, nothing built
    /// before is reused. With [`Self::read_only_cache`], a boot right after set-up.
    pub fn builds_in(mut self, dir: &Path) -> Self {
        self.builds = Some(dir.to_path_buf());
        self
    }

    /// The boot.sh command running `guest_cmd` in the guest.
    pub fn command(&self, guest_cmd: &str) -> Command {
        let mut cmd = if self.read_only_cache {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--", "bash", "-c"])
                .arg(
                    "set -e; c=$1; shift; mount --bind \"$c\" \"$c\"; \
                     mount -o remount,bind,ro \"$c\"; \
                     if touch \"$c/.rnic-rw-check\" 2>/dev/null; then \
                     echo \"$c is still writable\" >&2; exit 125; fi; \
                     echo \"[test] $c is read-only for this boot\" >&2; exec bash \"$@\"",
                )
                .arg("read-only-cache")
                .arg(crate::debian::env_sh("RNIC_CACHE"));
            c
        } else {
            Command::new("bash")
        };
        cmd.arg(repo().join("qemu-scripts/boot.sh"))
            .args(&self.args)
            .args(["--timeout", &self.timeout_s.to_string(), "--"])
            .arg(guest_cmd)
            .env("RNIC_RNICD", crate::bin("rnicd"));
        if let Some(dir) = &self.builds {
            cmd.env("RNIC_BUILDS", dir);
        }
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

/// The kernel guest's package layer `name` (`fio` or `nfs`): its archive, built by
/// qemu-scripts/layer.sh when missing, for [`Boot::arg`]`("--layer")`.
pub fn layer(name: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("qemu-scripts/layer.sh"))
        .arg(name)
        .output()
        .expect("run qemu-scripts/layer.sh");
    assert!(
        out.status.success(),
        "qemu-scripts/layer.sh {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Asserts that a boot.sh run (of [`Boot::read_only_cache`]) had the cache read-only and
/// that its messages name each of `built`, what the boot built outside the cache.
pub fn assert_built_read_only(out: &Output, built: &[&str]) {
    let messages = String::from_utf8_lossy(&out.stderr);
    assert!(
        messages.contains("is read-only for this boot"),
        "the cache was not made read-only:\n{messages}"
    );
    for what in built {
        assert!(messages.contains(what), "no {what:?} in:\n{messages}");
    }
}

/// rnicd's release build (target/release/rnicd, or under `$CARGO_TARGET_DIR`), with a
/// message naming the build command when it is missing. For VM runs where a debug rnicd
/// cannot keep up with a guest: a Soft-RoCE guest's perftest on four QPs sends up to 512
/// 64 KiB messages at once, a debug rnicd's port then overflows its 8192-frame inbox
/// (measured: 62% of the frames dropped) and the go-back-N retransmissions that follow
/// stall the run for minutes.
pub fn release_rnicd() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    let path = target.join("release/rnicd");
    assert!(
        path.exists(),
        "{} is missing: build it first (cargo build --release -p rnic-device --bin rnicd; \
         tests/run-all.sh does)",
        path.display()
    );
    path
}

/// Starts an rnicd with `vfs` VFs and `extra` arguments, its sockets (and its log,
/// `rnicd.log`) in a fresh folder named after `name` where QEMU reaches them; returns the
/// folder and the process.
pub fn start_rnicd(name: &str, vfs: u32, extra: &[&str]) -> (PathBuf, Child) {
    let dir = vm_run_base().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket dir");
    let log = std::fs::File::create(dir.join("rnicd.log")).expect("log");
    let mut command = Command::new(crate::bin("rnicd"));
    command
        .args(["--socket-dir"])
        .arg(&dir)
        .args(["--vfs", &vfs.to_string()])
        .args(extra)
        .env("RUST_LOG", "info")
        .stderr(log);
    let ready = crate::ReadyPipe::give(&mut command);
    let rnicd = command.spawn().expect("start rnicd");
    if let Err(e) = ready.wait(Duration::from_secs(10)) {
        let log = std::fs::read_to_string(dir.join("rnicd.log")).unwrap_or_default();
        panic!("rnicd {extra:?} did not report ready ({e}):\n{log}");
    }
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

/// Shell functions for guest scripts that run verbs programs (Debian's pingpongs and
/// perftest), for [`tool_runs`] to read back:
///
/// - `run_tool [-r] LABEL CMD...` runs CMD (killed after `$TOOL_TIMEOUT` seconds, 180 by
///   default) with its standard output, standard error and exit status kept under
///   /tmp/tool-LABEL.*; returns its status. `-r`: a client, run again every 0.5 s (up to
///   120 s) while it says "Couldn't connect" (rdma-core's and perftest's words when the
///   server does not listen yet; the guests boot at their own speed), "connect()
///   failed" (ucx_perftest's) or "Unexpected CM event bl blka 8" (perftest's with `-R`
///   when its rdma_cm connect is rejected: event 8, RDMA_CM_EVENT_REJECTED, the answer
///   while nobody listens on the port), or "RDMA_CM_EVENT_REJECTED; error: 8" (what
///   perftest 25.01 prints when that happens in its own retry of the connect, which may
///   then crash: the server still listens, so the next run connects).
/// - `show_tool LABEL...` prints each run as a block: `@@@ TOOL LABEL status N seconds S`,
///   its standard output, `@@@ TOOL LABEL stderr`, its standard error, `@@@ TOOL LABEL end`.
///   A server run in the background (`run_tool ... &`) is shown after `wait`, so blocks never
///   interleave.
pub const GUEST_SH_TOOLS: &str = r#"
run_tool() {
    rt_retry=0
    if [ "$1" = -r ]; then rt_retry=1; shift; fi
    rt_label=$1
    shift
    rt_tries=0
    rt_start=$(date +%s.%N)
    while :; do
        timeout -k 5 "${TOOL_TIMEOUT:-180}" "$@" >"/tmp/tool-$rt_label.out" 2>"/tmp/tool-$rt_label.err"
        rt_status=$?
        [ $rt_retry = 1 ] && [ $rt_status != 0 ] && [ $rt_tries -lt 240 ] &&
            cat "/tmp/tool-$rt_label.out" "/tmp/tool-$rt_label.err" |
            grep -q -e "Couldn't connect" -e "connect() failed" -e "Unexpected CM event bl blka 8" \
                -e "RDMA_CM_EVENT_REJECTED; error: 8" || break
        rt_tries=$((rt_tries + 1))
        sleep 0.5
    done
    echo "$rt_status $rt_start $(date +%s.%N)" >"/tmp/tool-$rt_label.status"
    return $rt_status
}
show_tool() {
    for st_label in "$@"; do
        set -- $(cat "/tmp/tool-$st_label.status" 2>/dev/null || echo none 0 0)
        echo "@@@ TOOL $st_label status $1 seconds $(echo "$2 $3" | awk '{ printf "%.1f", $2 - $1 }')"
        cat "/tmp/tool-$st_label.out" 2>/dev/null
        echo "@@@ TOOL $st_label stderr"
        cat "/tmp/tool-$st_label.err" 2>/dev/null
        echo "@@@ TOOL $st_label end"
    done
}
"#;

/// One program's run in a guest, as [`GUEST_SH_TOOLS`]' `show_tool` printed it.
#[derive(Debug, Clone)]
pub struct ToolRun {
    /// Exit status and output.
    pub output: crate::ibv_tools::ToolOutput,
    /// How long it ran (with its retries), in seconds.
    pub seconds: f64,
}

/// The runs a guest's console shows, by label (carriage returns of the serial console
/// removed). Panics on a block that does not end.
pub fn tool_runs(console: &str) -> BTreeMap<String, ToolRun> {
    let console = console.replace('\r', "");
    let mut runs = BTreeMap::new();
    let mut lines = console.lines();
    while let Some(line) = lines.next() {
        let Some(head) = line.strip_prefix("@@@ TOOL ") else {
            continue;
        };
        let words: Vec<&str> = head.split_whitespace().collect();
        let [label, "status", status, "seconds", seconds] = words[..] else {
            continue;
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        let mut into = &mut stdout;
        let (stderr_mark, end_mark) = (
            format!("@@@ TOOL {label} stderr"),
            format!("@@@ TOOL {label} end"),
        );
        loop {
            let l = lines
                .next()
                .unwrap_or_else(|| panic!("the console's block of {label} does not end"));
            if l == stderr_mark {
                into = &mut stderr;
            } else if l == end_mark {
                break;
            } else {
                into.push_str(l);
                into.push('\n');
            }
        }
        let output = crate::ibv_tools::ToolOutput {
            status: status.parse().ok(),
            stdout,
            stderr,
        };
        let seconds = seconds.parse().unwrap_or(f64::NAN);
        runs.insert(label.to_string(), ToolRun { output, seconds });
    }
    runs
}
