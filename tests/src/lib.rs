//! Helpers shared by the integration tests: a real `rnicd` process on real sockets, and
//! a vfio-user client that sends what a well-behaved one would not ([`hostile`]).

pub mod debian;
pub mod feature_checks;
pub mod hostile;
pub mod ibv_runs;
pub mod ibv_tools;
pub mod net;
pub mod ops;
pub mod rdma_core;
pub mod tshark;
pub mod verbs_checks;
pub mod verbs_pair;
pub mod vm;
pub mod wire;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The workspace's target directory holding the binaries under test.
pub fn bin_dir() -> PathBuf {
    // Test executables live in target/<profile>/deps; the binaries one level up.
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// Path of a workspace binary, with a clear message when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// Whether a unix socket bound at `path` listens (accepts connections), as the kernel's
/// table of unix sockets says: the flags of a listening socket are `__SO_ACCEPTCON`.
pub fn listening(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let path = path.to_string_lossy();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(3) == Some(&"00010000") && fields.get(7) == Some(&&*path)
    })
}

/// The descriptor number a child gets the write end of a [`ReadyPipe`] as.
pub const READY_FD: i32 = 3;

/// A pipe whose write end a child process gets as descriptor [`READY_FD`] (with
/// `--ready-fd 3` added to its arguments), and whose read end waits for its line.
pub struct ReadyPipe {
    read: std::fs::File,
    /// This process's copy of the write end, closed once the child is spawned.
    write: std::os::fd::OwnedFd,
}

impl ReadyPipe {
    /// Adds `--ready-fd 3` to `command` and hands it the write end of a new pipe as
    /// descriptor 3. Both ends are close-on-exec here, so that no other child started
    /// meanwhile (tests run in parallel) holds the write end: end of file then means
    /// that this child is gone.
    pub fn give(command: &mut Command) -> Self {
        use std::os::fd::{FromRawFd, OwnedFd};
        use std::os::unix::process::CommandExt;
        let mut fds = [0; 2];
        // SAFETY: pipe2 into an array of two descriptors, owned from here on.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just made and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let write_fd = {
            use std::os::fd::AsRawFd;
            write.as_raw_fd()
        };
        command.arg("--ready-fd").arg(READY_FD.to_string());
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (dup2, fcntl) on descriptors that exist in the child.
        unsafe {
            command.pre_exec(move || {
                if write_fd == READY_FD {
                    // dup2 onto itself keeps close-on-exec: clear it.
                    if libc::fcntl(READY_FD, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(write_fd, READY_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        // The closure holds the write end's number only: it stays open until the spawn.
        Self {
            read: std::fs::File::from(read),
            write,
        }
    }

    /// Waits up to `timeout` for the child's line (call it after the spawn); an error
    /// says what came instead.
    pub fn wait(self, timeout: Duration) -> Result<String, String> {
        drop(self.write);
        read_line_within(self.read, timeout)
    }
}

/// Reads from `file` until a newline, end of file or `timeout`.
fn read_line_within(mut file: std::fs::File, timeout: Duration) -> Result<String, String> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one pollfd we own.
        let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(60_000) as i32) };
        if r == 0 {
            return Err(format!("no line within {timeout:?} (got {got:?})"));
        }
        let mut buf = [0u8; 64];
        let n = file.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "end of file: the process exited (got {:?})",
                String::from_utf8_lossy(&got)
            ));
        }
        got.extend_from_slice(&buf[..n]);
        if got.contains(&b'\n') {
            return Ok(String::from_utf8_lossy(&got).into_owned());
        }
    }
}

/// A running rnicd with its own socket directory; stopped (SIGTERM) on drop.
pub struct Rnicd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl Rnicd {
    /// Starts rnicd with `vfs` VFs and extra arguments, and waits for its sockets.
    ///
    /// `RNICD_ARGS` in the environment adds arguments to every rnicd the tests start
    /// (split at spaces), unless the test gives the same options itself: tests/run-all.sh
    /// runs the suites again with `--threads 2 --placement spread` that way.
    pub fn start(vfs: u16, extra: &[&str]) -> Self {
        Self::start_in(&std::env::temp_dir(), vfs, extra)
    }

    /// [`Rnicd::start`] with its directory (sockets, log) made in `parent`: a chroot
    /// whose programs must reach the sockets wants them inside the root.
    ///
    /// `RNICD_BIN` in the environment names another rnicd binary to start (an older
    /// build, to show what a test catches there); as an older build may not know
    /// `--ready-fd`, the tests then wait for its sockets in the kernel's table instead.
    pub fn start_in(parent: &Path, vfs: u16, extra: &[&str]) -> Self {
        match std::env::var_os("RNICD_BIN") {
            Some(binary) => Self::start_with(Path::new(&binary), parent, vfs, extra, false),
            None => Self::start_binary_in(&bin("rnicd"), parent, vfs, extra),
        }
    }

    /// [`Rnicd::start_in`] with the rnicd binary `binary` (a release build, say).
    pub fn start_binary_in(binary: &Path, parent: &Path, vfs: u16, extra: &[&str]) -> Self {
        Self::start_with(binary, parent, vfs, extra, true)
    }

    /// Starts `binary`; waits until it says it is ready on `--ready-fd` if `ready_fd`,
    /// else until its sockets listen.
    fn start_with(binary: &Path, parent: &Path, vfs: u16, extra: &[&str], ready_fd: bool) -> Self {
        let from_env = std::env::var("RNICD_ARGS").unwrap_or_default();
        let mut args: Vec<&str> = extra.to_vec();
        let given = |opt: &str| extra.iter().any(|a| a.split('=').next() == Some(opt));
        let mut env_args = from_env.split_whitespace().peekable();
        while let Some(arg) = env_args.next() {
            // An option and, unless it is a flag, its value.
            let value = env_args.next_if(|v| !v.starts_with("--"));
            if !given(arg.split('=').next().unwrap_or(arg)) {
                args.push(arg);
                args.extend(value);
            }
        }
        let extra = &args[..];
        let dir = tempfile::Builder::new()
            .prefix("rnicd-test-")
            .tempdir_in(parent)
            .expect("tempdir");
        let log = dir.path().join("rnicd.log");
        let sockets = dir.path().join("sock");
        let mut command = Command::new(binary);
        command
            .arg("--socket-dir")
            .arg(&sockets)
            .arg("--vfs")
            .arg(vfs.to_string())
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RNICD_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        let ready = ready_fd.then(|| ReadyPipe::give(&mut command));
        let child = command.spawn().expect("spawn rnicd");
        let me = Self {
            child: Some(child),
            dir,
            log,
        };
        if let Some(ready) = ready {
            // rnicd writes its line once every socket listens.
            if let Err(e) = ready.wait(Duration::from_secs(10)) {
                panic!("rnicd did not report ready: {e}\n{}", me.log());
            }
            return me;
        }
        // A socket file exists from `bind`, a moment before `listen`: a client that
        // connected as soon as the file appeared could be refused. So wait until every
        // socket listens.
        let sockets: Vec<PathBuf> = std::iter::once("pf".to_string())
            .chain((0..vfs).map(|v| format!("vf{v}")))
            .map(|name| me.socket(&name))
            .collect();
        wait_for(Duration::from_secs(10), "rnicd's sockets", || {
            sockets.iter().all(|s| listening(s))
        });
        me
    }

    /// The socket of function `name` ("pf", "vf0", ...).
    pub fn socket(&self, name: &str) -> PathBuf {
        self.dir.path().join("sock").join(format!("{name}.sock"))
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// Runs `rnic-admin ARGS` on the PF's socket and returns what it printed; it must
    /// succeed.
    pub fn admin(&self, args: &[&str]) -> String {
        let out = Command::new(bin("rnic-admin"))
            .arg("--vfio-user")
            .arg(self.socket("pf"))
            .args(args)
            .output()
            .expect("run rnic-admin");
        assert!(
            out.status.success(),
            "rnic-admin {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// What rnicd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The first line of rnicd's log that holds `needle`, once it does: panics, showing
    /// the log, if none does within `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if let Some(line) = log.lines().find(|l| l.contains(needle)) {
                return line.to_string();
            }
            assert!(
                start.elapsed() < timeout,
                "rnicd logged no line with {needle:?} within {timeout:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// rnicd's process ID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Sends `signal` and waits for the exit status.
    pub fn stop_with(&mut self, signal: i32) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("rnicd did not exit within 10 s of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// CPU time (user + system) rnicd has used, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')').expect("comm") + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
    }
}

impl Drop for Rnicd {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop_with(libc::SIGTERM);
        }
        if std::thread::panicking() {
            eprintln!("--- rnicd log ---\n{}", self.log());
        }
    }
}

/// The counter `name` (`tx`, `rx`, `dropped`, `retransmits`, `rnr_naks`) that rnicd
/// logged for `function` (`pf`, `vf0`, ...) when it stopped: its last
/// `FUNCTION: tx N rx N ...` line.
pub fn exit_counter(log: &str, function: &str, name: &str) -> u64 {
    logged_count(log, &format!("{function}: tx "), name)
}

/// The number after the word `name` in the last line of `log` that holds `prefix`, read
/// from `prefix` on (`name` may be a word of the prefix itself).
pub fn logged_count(log: &str, prefix: &str, name: &str) -> u64 {
    let line = log
        .lines()
        .rev()
        .find_map(|l| l.find(prefix).map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no '{prefix}' in the log:\n{log}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words
        .iter()
        .position(|w| *w == name)
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    words[i + 1].parse().expect("a count")
}

/// rnic's seeded generator, for the tests' random choices (repeatable by seed): the one
/// rnicd's fault injection and the tools draw from.
pub use rnic_abi::rng::Rng;

/// Waits until `cond` holds, or panics naming `what`.
pub fn wait_for(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A TCP port that is free right now, for a server a test starts next.
///
/// The port comes from below the kernel's ephemeral range (32768 and up by default), and
/// each call of a test process gets another one: a port the kernel picked for a
/// `bind(0)` could be picked again for another test's listener or outgoing connection
/// between this check and the server's own bind (seen once: a test connected to a
/// server that never got its port).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Test processes that run at once (nextest) start at different places.
    let base = std::process::id().wrapping_mul(7919);
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + base.wrapping_add(n) % SPAN) as u16;
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port in {FIRST}..{}", FIRST + SPAN);
}

/// Waits for `child` and collects its output; kills it first if it runs longer than
/// `limit` (so a hung peer fails the test instead of hanging it).
pub fn finish_within(child: Child, limit: Duration) -> std::process::Output {
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(limit);
        // SAFETY: kill(2) on a PID; harmless if the process is gone.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().expect("wait");
    drop(killer);
    out
}
