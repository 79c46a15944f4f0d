//! Debian's unmodified `ibv_rc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`, run in
//! the trixie root against this library, server on VF0 (`rnic_0`) and client on VF1
//! (`rnic_1`) of one real rnicd, over its RoCE v2 GIDs (`-g 1`). Both ends must exit 0
//! with nothing on stderr, print each other's QP numbers and the functions' own GIDs,
//! and report the byte and iteration counts of the whole run; with `-c` the server finds
//! every page it received as the client wrote it.
//!
//! Needs root (chroot, mount namespaces) and `qemu-scripts/setup.sh` (ibverbs-utils in
//! the root), and the workspace's rnicd, as every integration test does.

mod common;

use std::collections::BTreeSet;
use std::net::Ipv6Addr;
use std::process::Output;
use std::time::Duration;

use common::Root;
use rnic_tests::free_port;

/// How long one program may run.
const LIMIT: Duration = Duration::from_secs(120);

/// One end's `local address:` or `remote address:` line: QP number and GID.
type Address = (u32, Ipv6Addr);

/// What one end printed.
struct End {
    name: &'static str,
    stdout: String,
    stderr: String,
    local: BTreeSet<Address>,
    remote: BTreeSet<Address>,
}

impl End {
    fn new(name: &'static str, out: &Output) -> End {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "the {name} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        let addresses = |which: &str| -> BTreeSet<Address> {
            stdout
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
        let (local, remote) = (addresses("local address:"), addresses("remote address:"));
        End {
            name,
            stdout,
            stderr,
            local,
            remote,
        }
    }
}

/// Runs `program` with `args` as server on rnic_0 and client on rnic_1, checks what both
/// print. `size` and `iters` are the run's (the programs' defaults unless `args` change
/// them), `qps` how many QPs each end connects.
fn pingpong(program: &str, args: &[&str], size: u64, iters: u64, qps: usize) {
    let root = Root::new(2, program);
    let gids = [root.gid("vf0"), root.gid("vf1")];
    let port = free_port().to_string();
    let with = |dev: &'static str, server: Option<&'static str>| -> Vec<&str> {
        let mut v: Vec<&str> = ["-d", dev, "-g", "1", "-p", &port]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        v.extend(server);
        v
    };
    let (server, client) = root.server_and_client(
        &["vf0", "vf1"],
        program,
        &with("rnic_0", None),
        &with("rnic_1", Some("127.0.0.1")),
        LIMIT,
    );
    let client = End::new("client", &client);
    let server = End::new("server", &server);

    for (end, me, peer) in [(&server, gids[0], gids[1]), (&client, gids[1], gids[0])] {
        let name = end.name;
        assert!(
            end.stderr.trim().is_empty(),
            "the {name} wrote to stderr:\n{}",
            end.stderr
        );
        assert_eq!(end.local.len(), qps, "{name}'s QPs:\n{}", end.stdout);
        assert!(
            end.local.iter().all(|a| a.1 == me),
            "{name}:\n{}",
            end.stdout
        );
        assert!(
            end.remote.iter().all(|a| a.1 == peer),
            "{name}:\n{}",
            end.stdout
        );
        let bytes = format!("{} bytes in ", size * iters * 2);
        let iterations = format!("{iters} iters in ");
        assert!(
            end.stdout.lines().any(|l| l.starts_with(&bytes))
                && end.stdout.lines().any(|l| l.starts_with(&iterations)),
            "the {name} did not report {bytes:?} and {iterations:?}:\n{}",
            end.stdout
        );
        assert!(!end.stdout.contains("invalid data"), "{}", end.stdout);
    }
    // Each end talked to the QPs the other created.
    assert_eq!(server.local, client.remote);
    assert_eq!(client.local, server.remote);
}

#[test]
fn rc_pingpong() {
    pingpong("ibv_rc_pingpong", &[], 4096, 1000, 1);
}

#[test]
fn rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", &["-e"], 4096, 1000, 1);
}

#[test]
fn rc_pingpong_of_one_byte() {
    pingpong("ibv_rc_pingpong", &["-s", "1"], 1, 1000, 1);
}

#[test]
fn rc_pingpong_of_64_kib_checked() {
    pingpong("ibv_rc_pingpong", &["-s", "65536", "-c"], 65536, 1000, 1);
}

#[test]
fn ud_pingpong() {
    pingpong("ibv_ud_pingpong", &[], 1024, 1000, 1);
}

#[test]
fn ud_pingpong_with_completion_events_checked() {
    pingpong("ibv_ud_pingpong", &["-e", "-c"], 1024, 1000, 1);
}

#[test]
fn srq_pingpong() {
    pingpong("ibv_srq_pingpong", &[], 4096, 1000, 16);
}

#[test]
fn srq_pingpong_with_completion_events_checked() {
    pingpong("ibv_srq_pingpong", &["-e", "-c"], 4096, 1000, 16);
}
