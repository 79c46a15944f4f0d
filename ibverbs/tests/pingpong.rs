//! Debian's unmodified `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and
//! `ibv_srq_pingpong`, run in
//! the trixie root against this library, server on VF0 (`rnic_0`) and client on VF1
//! (`rnic_1`) of one real rnicd, over its RoCE v2 GIDs (`-g 1`). Both ends must exit 0
//! with nothing on stderr, print each other's QP numbers and the functions' own GIDs,
//! and report the byte and iteration counts of the whole run; with `-c` the server finds
//! every page it received as the client wrote it.
//!
//! Needs root (chroot, mount namespaces) and `qemu-scripts/setup.sh` (ibverbs-utils in
//! the root), and the workspace's rnicd, as every integration test does.

mod common;

use std::time::Duration;

use common::Root;
use rnic_tests::free_port;
use rnic_tests::ibv_tools::{check_pingpong, Pingpong, ToolOutput};

/// How long one program may run.
const LIMIT: Duration = Duration::from_secs(120);

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
    let server = Pingpong::new("server", &ToolOutput::from(&server));
    let client = Pingpong::new("client", &ToolOutput::from(&client));
    check_pingpong(&server, &client, gids, qps, size, iters);
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
fn uc_pingpong() {
    pingpong("ibv_uc_pingpong", &[], 4096, 1000, 1);
}

#[test]
fn uc_pingpong_of_64_kib_with_completion_events_checked() {
    pingpong(
        "ibv_uc_pingpong",
        &["-e", "-c", "-s", "65536"],
        65536,
        1000,
        1,
    );
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
