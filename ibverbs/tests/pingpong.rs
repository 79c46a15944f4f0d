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
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::Root;
use rnic_tests::{finish_within, free_port};

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

/// The GID of `function` (index 1 of its table), as its QUERY_DEVICE says.
fn gid_of(root: &Root, function: &str) -> Ipv6Addr {
    use rnic_driver::transport::vfio_user::VfioUserTransport;
    let t = VfioUserTransport::connect(&root.rnicd.socket(function)).expect("connect");
    let device = rnic_driver::Device::open(Box::new(t)).expect("open");
    Ipv6Addr::from(device.query_device().expect("QUERY_DEVICE").gid)
    // Closed here: the program takes the function next.
}

/// Runs `program` with `args` as server on rnic_0 and client on rnic_1, checks what both
/// print. `size` and `iters` are the run's (the programs' defaults unless `args` change
/// them), `qps` how many QPs each end connects.
fn pingpong(program: &str, args: &[&str], size: u64, iters: u64, qps: usize) {
    let root = Root::new(2, program);
    let gids = [gid_of(&root, "vf0"), gid_of(&root, "vf1")];
    let port = free_port().to_string();
    let functions = ["vf0", "vf1"];
    let with = |dev: &'static str, server: Option<&str>| -> Vec<String> {
        let mut v: Vec<String> = ["-d", dev, "-g", "1", "-p", &port]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect();
        v.extend(server.map(str::to_string));
        v
    };
    let server_args = with("rnic_0", None);
    let server_args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    let server = root
        .command(&functions, program, &server_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    // The programs try to connect once: retry while the server is not listening yet.
    let client_args = with("rnic_1", Some("127.0.0.1"));
    let client_args: Vec<&str> = client_args.iter().map(String::as_str).collect();
    let start = Instant::now();
    let client = loop {
        let c = root
            .command(&functions, program, &client_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the client");
        let out = finish_within(c, LIMIT);
        let refused = String::from_utf8_lossy(&out.stderr).contains("Couldn't connect");
        if !refused || start.elapsed() > Duration::from_secs(20) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let client = End::new("client", &client);
    let server = End::new("server", &finish_within(server, LIMIT));

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
