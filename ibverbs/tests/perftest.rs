//! Debian's unmodified perftest (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`,
//! `ib_atomic_bw`, `ib_write_lat`, `ib_read_lat`, `ib_send_lat`, `ib_atomic_lat`), run in the
//! trixie root against this library, server on VF0 (`rnic_0`) and client on VF1
//! (`rnic_1`) of one real rnicd, over their RoCE v2 GIDs (`-x 1`), with perftest's
//! defaults and with four QPs (`-q 4`); and `ib_send_bw`, `ib_write_bw`, `ib_send_lat`
//! and `ib_write_lat` over UC QPs (`-c UC`).
//!
//! Every run must exit 0 with nothing on stderr but perftest's own notices; each end must name the other's QPs and
//! the functions' GIDs; the client must report its result row (and the server, when it
//! prints one) with the default message size, the iterations of all QPs, and a positive
//! bandwidth or latency. perftest runs its latency tests with one QP only: with `-q 4`
//! they must stop with perftest's own message, as on any device.
//!
//! perftest links Debian's libmlx5, libefa and libhns, so these runs also prove that
//! the provider interface those libraries import exists. It uses `ibv_post_send` (not the
//! `ibv_wr_*` API, which it keeps for mlx5, EFA and HNS devices) and no inline data on
//! devices it does not know.

mod common;

use std::time::Duration;

use common::Root;
use rnic_tests::free_port;
use rnic_tests::ibv_tools::{check_perftest, Perftest, ToolOutput};

/// How long one program may run (a debug rnicd on a loaded two-core machine).
const LIMIT: Duration = Duration::from_secs(300);

/// What a test measures: bandwidth or latency.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bw,
    Lat,
}

/// Runs perftest's `program` between VF0 and VF1 with `extra` arguments and `qps` QPs;
/// `bytes` and `iterations` are the defaults the result row must show (iterations per
/// QP).
fn perftest(program: &str, extra: &[&str], qps: u32, bytes: f64, iterations: f64) {
    let kind = if program.ends_with("_bw") {
        Kind::Bw
    } else {
        Kind::Lat
    };
    let root = Root::new(2, program);
    let gids = [root.gid("vf0"), root.gid("vf1")];
    let port = free_port().to_string();
    let q = qps.to_string();
    let args = |dev: &'static str, server: Option<&'static str>| -> Vec<&str> {
        let mut v = vec!["-d", dev, "-x", "1", "-p", &port];
        if qps > 1 {
            v.extend(["-q", q.as_str()]);
        }
        v.extend(extra.iter().copied());
        v.extend(server);
        v
    };
    let (server, client) = root.server_and_client(
        &["vf0", "vf1"],
        program,
        &args("rnic_0", None),
        &args("rnic_1", Some("127.0.0.1")),
        LIMIT,
    );
    if kind == Kind::Lat && qps > 1 {
        // perftest's own rule, before it touches a device.
        for (name, out) in [("server", &server), ("client", &client)] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "the {name} ran with {qps} QPs");
            assert!(
                stderr.contains("Multiple QPs only available on bw tests"),
                "the {name}: {stderr}"
            );
            assert!(!stderr.contains("libibverbs (rnic)"), "{stderr}");
        }
        return;
    }
    let server = Perftest::new("server", &ToolOutput::from(&server));
    let client = Perftest::new("client", &ToolOutput::from(&client));
    let total = match kind {
        Kind::Bw => iterations * f64::from(qps),
        Kind::Lat => iterations,
    };
    // The average: BW average (column 3) or t_avg (column 5).
    let figure = if kind == Kind::Bw { 3 } else { 5 };
    check_perftest(&server, &client, gids, qps as usize, (bytes, total, figure));
}

/// A test of `program` with its defaults and one with `-q 4`.
macro_rules! perftests {
    ($($name:ident, $q4:ident: $program:literal, $bytes:expr, $iters:expr;)*) => {$(
        #[test]
        fn $name() {
            perftest($program, &[], 1, $bytes, $iters);
        }

        #[test]
        fn $q4() {
            perftest($program, &[], 4, $bytes, $iters);
        }
    )*};
}

perftests! {
    write_bw, write_bw_4_qps: "ib_write_bw", 65536.0, 5000.0;
    read_bw, read_bw_4_qps: "ib_read_bw", 65536.0, 1000.0;
    send_bw, send_bw_4_qps: "ib_send_bw", 65536.0, 1000.0;
    atomic_bw, atomic_bw_4_qps: "ib_atomic_bw", 8.0, 1000.0;
    write_lat, write_lat_4_qps: "ib_write_lat", 2.0, 1000.0;
    read_lat, read_lat_4_qps: "ib_read_lat", 2.0, 1000.0;
    send_lat, send_lat_4_qps: "ib_send_lat", 2.0, 1000.0;
    atomic_lat, atomic_lat_4_qps: "ib_atomic_lat", 8.0, 1000.0;
}

/// perftest over a UC QP (`-c UC`), 200 iterations: within the receive depth, so an
/// `ib_send_bw` server has a receive posted for every message before the first one comes
/// (a UC message that finds none is dropped, and the server would wait for it for ever).
macro_rules! uc_perftests {
    ($($name:ident: $program:literal, $bytes:expr;)*) => {$(
        #[test]
        fn $name() {
            perftest($program, &["-c", "UC", "-n", "200"], 1, $bytes, 200.0);
        }
    )*};
}

uc_perftests! {
    uc_send_bw: "ib_send_bw", 65536.0;
    uc_write_bw: "ib_write_bw", 65536.0;
    uc_send_lat: "ib_send_lat", 2.0;
    uc_write_lat: "ib_write_lat", 2.0;
}
