//! Runs of Debian's verbs programs between two ends, shared by the VM tests of the verbs
//! guest (tests/tests/vm_verbs.rs: rnic's libibverbs.so.1) and of the kernel guest
//! (tests/tests/vm_kernel.rs: Debian's libibverbs on rnic.ko and rnic's provider): what
//! to run ([`Run`], [`PINGPONGS`], [`PERFTEST`]), how ([`Setting`], [`Dev`]), the guest
//! script lines that run them ([`Phase::serve`], [`Phase::connect`], [`Phase::both`],
//! [`script`]) and the checks of what both ends printed ([`Phase::check`]).

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use rnic_abi::cmd::QueryDeviceResp;
use rnic_driver::device::PciIdentity;
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::Device;

use crate::ibv_tools::{
    check_perftest, check_perftest_addresses, check_pingpong, Perftest, Pingpong, ToolOutput,
};
use crate::vm::{ToolRun, GUEST_SH_TOOLS};
use crate::Rnicd;

/// What a run's result must show.
#[derive(Clone, Copy)]
pub enum Check {
    /// A pingpong: message size, iterations, QPs per end.
    Pingpong { size: u64, iters: u64, qps: usize },
    /// perftest: the result row's message size and iterations (of all QPs), QPs per end,
    /// and the column of the figure that must be positive (4: MsgRate, which perftest
    /// prints with more digits than the bandwidth, 0.00 MiB/s for 200 atomics on rxe;
    /// 5: t_avg).
    Perftest {
        bytes: f64,
        iters: f64,
        qps: usize,
        figure: usize,
    },
    /// perftest with `-a`: a row for every message size from 2 bytes up to `largest` (a
    /// power of two), each of `iters` iterations; the figure as for `Perftest`.
    EverySize {
        largest: f64,
        iters: f64,
        figure: usize,
    },
}

/// One run of a Debian program: both ends take `args` (after the device and GID
/// options), the client also the server's address.
#[derive(Clone, Copy)]
pub struct Run {
    /// What the run is called in its guests' `run_tool` labels (see [`Run::label`]).
    pub label: &'static str,
    /// The Debian program both ends run (`ibv_*_pingpong`, `ib_*`).
    pub program: &'static str,
    /// Its options on both ends, after the device and GID options.
    pub args: &'static str,
    /// What its result must show.
    pub check: Check,
}

/// How a pairing runs the programs: `iters` iterations (per QP) instead of each
/// program's default, and `extra` options on both ends.
#[derive(Clone, Copy)]
pub struct Setting {
    /// Iterations (per QP), `-n`; None: the program's default.
    pub iters: Option<u64>,
    /// More options on both ends.
    pub extra: &'static str,
}

/// The programs' defaults.
pub const DEFAULTS: Setting = Setting {
    iters: None,
    extra: "",
};

/// A pingpong: message size, iterations, QPs per end.
pub const fn pingpong(
    label: &'static str,
    program: &'static str,
    args: &'static str,
    (size, iters, qps): (u64, u64, usize),
) -> Run {
    Run {
        label,
        program,
        args,
        check: Check::Pingpong { size, iters, qps },
    }
}

/// The pingpongs, with their defaults (1000 iterations; 4096 bytes, UD 1024, the SRQ
/// test on 16 QPs) unless said.
pub const PINGPONGS: [Run; 7] = [
    pingpong("rc", "ibv_rc_pingpong", "", (4096, 1000, 1)),
    pingpong("rc-events", "ibv_rc_pingpong", "-e", (4096, 1000, 1)),
    pingpong("rc-1-byte", "ibv_rc_pingpong", "-s 1", (1, 1000, 1)),
    pingpong("rc-64k", "ibv_rc_pingpong", "-s 65536 -c", (65536, 1000, 1)),
    pingpong("uc", "ibv_uc_pingpong", "", (4096, 1000, 1)),
    pingpong("ud", "ibv_ud_pingpong", "", (1024, 1000, 1)),
    pingpong("srq", "ibv_srq_pingpong", "", (4096, 1000, 16)),
];

/// A perftest bandwidth test on `qps` QPs (1 or 4): message size, iterations per QP.
/// `-F`: go on when the CPU's clock cannot be measured (see
/// [`crate::ibv_tools::PERFTEST_UNTIMED`]).
pub const fn bw(
    label: &'static str,
    program: &'static str,
    qps: usize,
    bytes: f64,
    iters: f64,
) -> Run {
    Run {
        label,
        program,
        args: if qps == 1 { "-F" } else { "-F -q 4" },
        check: Check::Perftest {
            bytes,
            iters: iters * qps as f64,
            qps,
            figure: 4,
        },
    }
}

/// A perftest latency test: message size, iterations.
pub const fn lat(label: &'static str, program: &'static str, bytes: f64, iters: f64) -> Run {
    Run {
        label,
        program,
        args: "-F",
        check: Check::Perftest {
            bytes,
            iters,
            qps: 1,
            figure: 5,
        },
    }
}

/// perftest with its defaults (message size, iterations), and the bandwidth tests again
/// on four QPs.
pub const PERFTEST: [Run; 12] = [
    bw("write-bw", "ib_write_bw", 1, 65536.0, 5000.0),
    bw("read-bw", "ib_read_bw", 1, 65536.0, 1000.0),
    bw("send-bw", "ib_send_bw", 1, 65536.0, 1000.0),
    bw("atomic-bw", "ib_atomic_bw", 1, 8.0, 1000.0),
    lat("write-lat", "ib_write_lat", 2.0, 1000.0),
    lat("read-lat", "ib_read_lat", 2.0, 1000.0),
    lat("send-lat", "ib_send_lat", 2.0, 1000.0),
    lat("atomic-lat", "ib_atomic_lat", 8.0, 1000.0),
    bw("write-bw-4qps", "ib_write_bw", 4, 65536.0, 5000.0),
    bw("read-bw-4qps", "ib_read_bw", 4, 65536.0, 1000.0),
    bw("send-bw-4qps", "ib_send_bw", 4, 65536.0, 1000.0),
    bw("atomic-bw-4qps", "ib_atomic_bw", 4, 8.0, 1000.0),
];

/// The device one end uses and its GID index (a shell word: the rxe guest finds its own
/// with `rxe-gid-index`).
#[derive(Clone, Copy)]
pub struct Dev {
    /// The verbs device's name (`-d`).
    pub name: &'static str,
    /// Its GID index (`-g` for the pingpongs, `-x` for perftest): a number, or a shell
    /// word that prints one (`$(rxe-gid-index)`).
    pub gid_index: &'static str,
}

impl Run {
    /// The command line of one end under `setting`: `server` is the server's address for
    /// a client.
    pub fn command(&self, dev: Dev, setting: Setting, server: Option<&str>) -> String {
        let gid = if self.program.starts_with("ib_") {
            "-x"
        } else {
            "-g"
        };
        let iters = setting.iters.map(|n| format!("-n {n}")).unwrap_or_default();
        let words = [
            self.program,
            "-d",
            dev.name,
            gid,
            dev.gid_index,
            self.args,
            &iters,
            setting.extra,
            server.unwrap_or(""),
        ];
        words
            .iter()
            .filter(|w| !w.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The label of one end's run in phase `phase`.
    pub fn label(&self, phase: &str, end: &str) -> String {
        format!("{phase}-{}-{end}", self.label)
    }

    /// Checks both ends' outputs under `setting`; `gids`: the server's and the client's.
    pub fn check(
        &self,
        setting: Setting,
        server: &ToolOutput,
        client: &ToolOutput,
        gids: [Ipv6Addr; 2],
    ) {
        match self.check {
            Check::Pingpong { size, iters, qps } => {
                let iters = setting.iters.unwrap_or(iters);
                let s = Pingpong::new(&format!("{} server", self.label), server);
                let c = Pingpong::new(&format!("{} client", self.label), client);
                check_pingpong(&s, &c, gids, qps, size, iters);
            }
            Check::Perftest {
                bytes,
                iters,
                qps,
                figure,
            } => {
                let iters = setting.iters.map_or(iters, |n| (n * qps as u64) as f64);
                let s = Perftest::new(&format!("{} server", self.label), server);
                let c = Perftest::new(&format!("{} client", self.label), client);
                check_perftest(&s, &c, gids, qps, (bytes, iters, figure));
            }
            Check::EverySize {
                largest,
                iters,
                figure,
            } => {
                let sizes: Vec<f64> = std::iter::successors(Some(2.0), |b| Some(b * 2.0))
                    .take_while(|&b| b <= largest)
                    .collect();
                let s = Perftest::new(&format!("{} server", self.label), server);
                let c = Perftest::new(&format!("{} client", self.label), client);
                check_perftest_addresses(&s, &c, gids, 1);
                c.check_rows(&sizes, iters, figure);
                // A server prints every row, or the last one (ib_write_bw), or none.
                let from = sizes.len().saturating_sub(s.rows.len());
                s.check_rows(&sizes[from..], iters, figure);
            }
        }
    }
}

/// Runs under one setting, their labels prefixed with `name`.
#[derive(Clone, Copy)]
pub struct Phase<'a> {
    /// The prefix of its runs' labels.
    pub name: &'a str,
    /// The runs, one after the other.
    pub runs: &'a [Run],
    /// How they run.
    pub setting: Setting,
}

impl Phase<'_> {
    /// Guest script lines serving the runs one after the other on `dev`, each shown
    /// when done.
    pub fn serve(&self, dev: Dev) -> String {
        self.lines(dev, "server", None)
    }

    /// Guest script lines running the clients on `dev` against `server`, each retried
    /// until its server listens.
    pub fn connect(&self, dev: Dev, server: &str) -> String {
        self.lines(dev, "client", Some(server))
    }

    /// Guest script lines running each run's server on `server` in the background and
    /// its client on `client` against it, over the guest's loopback: two functions of one
    /// guest.
    pub fn both(&self, server: Dev, client: Dev) -> String {
        self.runs
            .iter()
            .map(|r| {
                let (s, c) = (r.label(self.name, "server"), r.label(self.name, "client"));
                format!(
                    "run_tool {s} {} &\nrun_tool -r {c} {}\nwait\nshow_tool {s} {c}\n",
                    r.command(server, self.setting, None),
                    r.command(client, self.setting, Some("127.0.0.1"))
                )
            })
            .collect()
    }

    /// Guest script lines running one end (`end`: "server" or "client", the client
    /// against `server`) of each run on `dev`, each shown when done.
    fn lines(&self, dev: Dev, end: &str, server: Option<&str>) -> String {
        let retry = if server.is_some() { "-r " } else { "" };
        self.runs
            .iter()
            .map(|r| {
                let label = r.label(self.name, end);
                let command = r.command(dev, self.setting, server);
                format!("run_tool {retry}{label} {command}\nshow_tool {label}\n")
            })
            .collect()
    }

    /// Checks each run from the runs the server's and the client's consoles show
    /// (`gids`: the server's and the client's); prints how long each took.
    pub fn check(
        &self,
        server: &BTreeMap<String, ToolRun>,
        client: &BTreeMap<String, ToolRun>,
        gids: [Ipv6Addr; 2],
    ) {
        for r in self.runs {
            let get = |runs: &BTreeMap<String, ToolRun>, end: &str| -> ToolRun {
                let label = r.label(self.name, end);
                runs.get(&label)
                    .unwrap_or_else(|| panic!("no run {label} on the {end}'s console"))
                    .clone()
            };
            let (s, c) = (get(server, "server"), get(client, "client"));
            eprintln!(
                "{} {}: server {:.1} s, client {:.1} s",
                self.name, r.label, s.seconds, c.seconds
            );
            r.check(self.setting, &s.output, &c.output, gids);
        }
    }
}

/// A guest script: the tool functions, then `body`.
pub fn script(body: &str) -> String {
    format!("{GUEST_SH_TOOLS}\n{body}echo '=== script done'\n")
}

/// A function's QUERY_DEVICE answer and PCI identity, asked on the host (the function is
/// closed again before a guest attaches it: rnicd serves one client at a time).
pub fn truth(rnicd: &Rnicd, function: &str) -> (QueryDeviceResp, PciIdentity) {
    let t = VfioUserTransport::connect(&rnicd.socket(function)).expect("connect");
    let device = Device::open(Box::new(t)).expect("open");
    (device.query_device().expect("QUERY_DEVICE"), device.pci())
}
