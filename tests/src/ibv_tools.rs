//! What Debian's verbs programs print, read back and checked: `ibv_devinfo -v` against a
//! function's QUERY_DEVICE answer, the pingpongs' and perftest's address lines and result
//! lines. Shared by ibverbs/tests (the programs under chroot on the host) and the VM tests
//! (the same programs in the verbs guest and the Soft-RoCE guest).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::process::Output;

use rnic_abi::cmd::QueryDeviceResp;
use rnic_driver::device::PciIdentity;

/// One finished run of a program: exit status (None: killed by a signal) and output.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<&Output> for ToolOutput {
    fn from(out: &Output) -> Self {
        Self {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl ToolOutput {
    /// Panics, showing everything, unless the program exited 0.
    pub fn assert_success(&self, name: &str) {
        assert_eq!(
            self.status,
            Some(0),
            "the {name} failed:\n{}\n{}",
            self.stdout,
            self.stderr
        );
    }
}

/// A QP's address as the programs print it: QP number and GID.
pub type Address = (u32, Ipv6Addr);

/// What one end of `ibv_rc_pingpong`, `ibv_ud_pingpong` or `ibv_srq_pingpong` printed:
/// its `local address:` and `remote address:` lines.
pub struct Pingpong {
    pub name: String,
    pub stdout: String,
    pub stderr: String,
    pub local: BTreeSet<Address>,
    pub remote: BTreeSet<Address>,
}

impl Pingpong {
    /// Reads one end's output; it must have exited 0.
    pub fn new(name: &str, out: &ToolOutput) -> Self {
        out.assert_success(name);
        let addresses = |which: &str| -> BTreeSet<Address> {
            out.stdout
                .lines()
                .filter_map(|l| l.trim().strip_prefix(which))
                .map(|l| {
                    let qpn = l
                        .split("QPN 0x")
                        .nth(1)
                        .and_then(|r| u32::from_str_radix(&r[..6], 16).ok())
                        .unwrap_or_else(|| panic!("no QPN in {l:?}"));
                    let gid = l
                        .split("GID ")
                        .nth(1)
                        .and_then(|g| g.trim().parse().ok())
                        .unwrap_or_else(|| panic!("no GID in {l:?}"));
                    (qpn, gid)
                })
                .collect()
        };
        Self {
            name: name.to_string(),
            stdout: out.stdout.clone(),
            stderr: out.stderr.clone(),
            local: addresses("local address:"),
            remote: addresses("remote address:"),
        }
    }

    /// Checks this end: nothing on stderr, `qps` QPs of its own on GID `me` talking to
    /// GID `peer`, the whole run's bytes (both directions) and iterations reported, and
    /// no data check failure (`-c`).
    pub fn check(&self, me: Ipv6Addr, peer: Ipv6Addr, qps: usize, size: u64, iters: u64) {
        let name = &self.name;
        assert!(
            self.stderr.trim().is_empty(),
            "the {name} wrote to stderr:\n{}",
            self.stderr
        );
        assert_eq!(self.local.len(), qps, "{name}'s QPs:\n{}", self.stdout);
        assert!(
            self.local.iter().all(|a| a.1 == me),
            "{name}: local GID {me} expected:\n{}",
            self.stdout
        );
        assert!(
            self.remote.iter().all(|a| a.1 == peer),
            "{name}: remote GID {peer} expected:\n{}",
            self.stdout
        );
        let bytes = format!("{} bytes in ", size * iters * 2);
        let iterations = format!("{iters} iters in ");
        assert!(
            self.stdout.lines().any(|l| l.starts_with(&bytes))
                && self.stdout.lines().any(|l| l.starts_with(&iterations)),
            "the {name} did not report {bytes:?} and {iterations:?}:\n{}",
            self.stdout
        );
        assert!(!self.stdout.contains("invalid data"), "{}", self.stdout);
    }
}

/// Checks both ends of one pingpong run (see [`Pingpong::check`]), server on GID
/// `gids[0]`, client on `gids[1]`, and that each talked to the QPs the other created.
pub fn check_pingpong(
    server: &Pingpong,
    client: &Pingpong,
    gids: [Ipv6Addr; 2],
    qps: usize,
    size: u64,
    iters: u64,
) {
    server.check(gids[0], gids[1], qps, size, iters);
    client.check(gids[1], gids[0], qps, size, iters);
    assert_eq!(
        server.local, client.remote,
        "the client's peers are the server's QPs"
    );
    assert_eq!(
        client.local, server.remote,
        "the server's peers are the client's QPs"
    );
}

/// What perftest says on stderr about a device it does not know (it turns inline data off
/// for READ and atomic tests on any vendor's device but its own list): the only lines
/// its stderr may have, but for [`PERFTEST_UNTIMED`].
pub const PERFTEST_NOTICES: &[&str] =
    &["Device not recognized to implement inline feature. Disabling it"];

/// How perftest's stderr line starts when it could not measure the CPU's clock (its
/// samples of the TSC against the time of day disagreed, as they may in a TCG guest on a
/// busy host): with `-F` it goes on, and prints 0 (or inf) where its figures would be.
pub const PERFTEST_UNTIMED: &str = "Correlation coefficient r^2:";

/// What one end of a perftest program printed: its QPs and GIDs, the peer's, and the
/// result row.
#[derive(Clone, Debug)]
pub struct Perftest {
    pub name: String,
    pub stdout: String,
    pub local: BTreeSet<Address>,
    pub remote: BTreeSet<Address>,
    /// The fields of the row after the `#bytes` header, if there is one.
    pub row: Option<Vec<f64>>,
    /// The fields of every row under the `#bytes` header: one per message size with `-a`.
    pub rows: Vec<Vec<f64>>,
    /// perftest said it could not time the run ([`PERFTEST_UNTIMED`]).
    pub untimed: bool,
}

/// A GID as perftest prints it: 16 decimal bytes, colon-separated.
pub fn perftest_gid(s: &str) -> Ipv6Addr {
    let bytes: Vec<u8> = s
        .trim()
        .split(':')
        .map(|b| {
            b.parse()
                .unwrap_or_else(|_| panic!("GID byte {b:?} in {s:?}"))
        })
        .collect();
    let raw: [u8; 16] = bytes
        .try_into()
        .unwrap_or_else(|_| panic!("a GID of 16 bytes: {s:?}"));
    Ipv6Addr::from(raw)
}

impl Perftest {
    /// Reads one end's output; it must have exited 0 with nothing on stderr but
    /// [`PERFTEST_NOTICES`] and [`PERFTEST_UNTIMED`].
    pub fn new(name: &str, out: &ToolOutput) -> Self {
        out.assert_success(name);
        let untimed = out
            .stderr
            .lines()
            .any(|l| l.trim().starts_with(PERFTEST_UNTIMED));
        let unexpected: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| {
                let l = l.trim();
                !l.is_empty() && !PERFTEST_NOTICES.contains(&l) && !l.starts_with(PERFTEST_UNTIMED)
            })
            .collect();
        assert!(
            unexpected.is_empty(),
            "the {name} wrote to stderr:\n{}",
            out.stderr
        );
        let stdout = &out.stdout;
        let lines: Vec<&str> = stdout.lines().collect();
        let mut local = BTreeSet::new();
        let mut remote = BTreeSet::new();
        for (i, l) in lines.iter().enumerate() {
            let l = l.trim();
            let set = if l.starts_with("local address:") {
                &mut local
            } else if l.starts_with("remote address:") {
                &mut remote
            } else {
                continue;
            };
            let qpn = l
                .split("QPN 0x")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| panic!("no QPN in {l:?}"));
            let gid = lines
                .get(i + 1)
                .and_then(|g| g.trim().strip_prefix("GID:"))
                .unwrap_or_else(|| panic!("no GID line after {l:?}"));
            set.insert((qpn, perftest_gid(gid)));
        }
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with("#bytes"));
        let row = header.map(|i| {
            lines
                .get(i + 1)
                .unwrap_or_else(|| panic!("no row after the header:\n{stdout}"))
                .split_whitespace()
                .map(|f| f.parse().unwrap_or_else(|_| panic!("{f:?} in the row")))
                .collect()
        });
        // The rows go on up to the closing line of dashes.
        let rows = header.map_or_else(Vec::new, |i| {
            lines[i + 1..]
                .iter()
                .map_while(|l| {
                    let fields: Option<Vec<f64>> =
                        l.split_whitespace().map(|f| f.parse().ok()).collect();
                    fields.filter(|f| f.len() > 2)
                })
                .collect()
        });
        Self {
            name: name.to_string(),
            stdout: stdout.clone(),
            local,
            remote,
            row,
            rows,
            untimed,
        }
    }

    /// Checks the rows of a run with `-a`: one for each message size in `sizes`, in
    /// order, each with `iterations` and a positive figure in column `figure` (as
    /// [`Perftest::check_row`]).
    pub fn check_rows(&self, sizes: &[f64], iterations: f64, figure: usize) {
        let name = &self.name;
        let got: Vec<f64> = self.rows.iter().map(|r| r[0]).collect();
        assert_eq!(got, sizes, "the {name}'s message sizes:\n{}", self.stdout);
        for row in &self.rows {
            assert_eq!(row[1], iterations, "the {name}'s result:\n{}", self.stdout);
            assert!(
                row[figure] > 0.0 || (self.untimed && row[figure] == 0.0),
                "the {name}'s result:\n{}",
                self.stdout
            );
        }
    }

    /// Checks the result row: `bytes`, `iterations`, and a positive figure in column
    /// `figure` (the average bandwidth or latency) unless perftest could not time the run.
    pub fn check_row(&self, bytes: f64, iterations: f64, figure: usize) {
        let name = &self.name;
        let row = self
            .row
            .as_ref()
            .unwrap_or_else(|| panic!("the {name} printed no result:\n{}", self.stdout));
        assert_eq!(
            (row[0], row[1]),
            (bytes, iterations),
            "the {name}'s result:\n{}",
            self.stdout
        );
        assert!(
            row[figure] > 0.0 || (self.untimed && row[figure] == 0.0),
            "the {name}'s result:\n{}",
            self.stdout
        );
    }
}

/// Checks both ends of one perftest run: `qps` QPs each, server on GID `gids[0]`, client
/// on `gids[1]`, each talking to the other's QPs; the client's result row (and the
/// server's, when it prints one) shows `bytes`, `iterations` and a positive figure in
/// column `figure` (3: BW average, 5: t_avg).
pub fn check_perftest(
    server: &Perftest,
    client: &Perftest,
    gids: [Ipv6Addr; 2],
    qps: usize,
    (bytes, iterations, figure): (f64, f64, usize),
) {
    client.check_row(bytes, iterations, figure);
    if server.row.is_some() {
        // A server that prints a row prints the client's figures (the WRITE and READ
        // bandwidth tests): zeros when the client could not time its run.
        let server = Perftest {
            untimed: server.untimed || client.untimed,
            ..server.clone()
        };
        server.check_row(bytes, iterations, figure);
    }
    check_perftest_addresses(server, client, gids, qps);
}

/// Checks that both ends of one perftest run (server on GID `gids[0]`, client on
/// `gids[1]`) have `qps` QPs each, each end talking to the other's.
pub fn check_perftest_addresses(
    server: &Perftest,
    client: &Perftest,
    gids: [Ipv6Addr; 2],
    qps: usize,
) {
    for (end, me, peer) in [(server, gids[0], gids[1]), (client, gids[1], gids[0])] {
        assert_eq!(end.local.len(), qps, "{}:\n{}", end.name, end.stdout);
        assert!(end.local.iter().all(|a| a.1 == me), "{}", end.stdout);
        assert!(end.remote.iter().all(|a| a.1 == peer), "{}", end.stdout);
    }
    assert_eq!(server.local, client.remote);
    assert_eq!(client.local, server.remote);
}

/// `0052:4eff:fe49:4301`, as ibv_devinfo prints a GUID.
pub fn devinfo_guid(guid: [u8; 8]) -> String {
    guid.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The block of `ibv_devinfo` output about device `name`.
pub fn devinfo_block<'a>(devinfo: &'a str, name: &str) -> &'a str {
    let start = devinfo
        .find(&format!("hca_id:\t{name}\n"))
        .unwrap_or_else(|| panic!("no hca_id {name} in:\n{devinfo}"));
    let rest = &devinfo[start + 1..];
    &devinfo[start..start + 1 + rest.find("hca_id:").unwrap_or(rest.len())]
}

/// The value of `key:` in a devinfo block (tabs collapsed).
pub fn devinfo_field<'a>(block: &'a str, key: &str) -> &'a str {
    block
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{key}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key} in:\n{block}"))
}

/// Checks device `name`'s `ibv_devinfo -v` block against the function's QUERY_DEVICE
/// answer `q`, its PCI identity and its node GUID (`guid`, what the library makes of
/// the MAC); `up`: the link state the port must show.
pub fn check_devinfo(
    devinfo: &str,
    name: &str,
    q: &QueryDeviceResp,
    pci: &PciIdentity,
    guid: [u8; 8],
    up: bool,
) {
    let b = devinfo_block(devinfo, name);
    let l = &q.limits;
    let fw = format!(
        "{}.{}.{}",
        q.fw_version >> 16 & 0xff,
        q.fw_version >> 8 & 0xff,
        q.fw_version & 0xff
    );
    let expect: Vec<(&str, String)> = vec![
        ("transport", "InfiniBand (0)".into()),
        ("fw_ver", fw),
        ("node_guid", devinfo_guid(guid)),
        ("sys_image_guid", devinfo_guid(guid)),
        ("vendor_id", format!("{:#06x}", pci.vendor_id)),
        ("vendor_part_id", pci.device_id.to_string()),
        ("hw_ver", format!("0x{:X}", pci.revision)),
        ("phys_port_cnt", "1".into()),
        ("max_mr_size", format!("{:#x}", l.max_mr_size)),
        ("page_size_cap", "0x1000".into()),
        ("max_qp", l.max_qp.to_string()),
        ("max_qp_wr", l.max_qp_wr.to_string()),
        ("max_sge", l.max_sge.to_string()),
        ("max_cq", l.max_cq.to_string()),
        ("max_cqe", l.max_cqe.to_string()),
        ("max_mr", l.max_mr.to_string()),
        ("max_pd", l.max_pd.to_string()),
        ("max_qp_rd_atom", l.max_qp_rd_atom.to_string()),
        ("max_qp_init_rd_atom", l.max_qp_init_rd_atom.to_string()),
        ("num_comp_vectors", "1".into()),
        (
            "state",
            if up {
                "PORT_ACTIVE (4)"
            } else {
                "PORT_DOWN (1)"
            }
            .into(),
        ),
        ("max_mtu", "4096 (5)".into()),
        ("active_mtu", "4096 (5)".into()),
        ("link_layer", "Ethernet".into()),
        ("gid_tbl_len", "2".into()),
        ("pkey_tbl_len", "1".into()),
    ];
    let mut wrong = String::new();
    for (key, want) in expect {
        let got = devinfo_field(b, key);
        if got != want {
            let _ = writeln!(wrong, "  {key}: {got:?}, want {want:?}");
        }
    }
    let mut link_local = [0u8; 16];
    link_local[..2].copy_from_slice(&[0xfe, 0x80]);
    link_local[8..].copy_from_slice(&guid);
    for (i, gid) in [link_local, q.gid].into_iter().enumerate() {
        let line = format!("GID[{i:>3}]:\t\t{}, RoCE v2", Ipv6Addr::from(gid));
        if !b.contains(&line) {
            let _ = writeln!(wrong, "  no line {line:?}");
        }
    }
    assert!(wrong.is_empty(), "{name}:\n{wrong}in:\n{b}");
}

/// The `idle_wait: wall W cpu C` line of ibverbs/tests/c/data_path.c: how long its
/// blocking completion wait took, and the CPU time the process used meanwhile (seconds).
pub fn idle_wait(stdout: &str) -> (f64, f64) {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("idle_wait: "))
        .unwrap_or_else(|| panic!("no idle_wait line in:\n{stdout}"));
    match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["wall", w, "cpu", c] => match (w.parse(), c.parse()) {
            (Ok(w), Ok(c)) => (w, c),
            _ => panic!("idle_wait figures that are not numbers: {line}"),
        },
        _ => panic!("an idle_wait line of another form: {line}"),
    }
}
