//! Decoding captures with tshark (Wireshark), an implementation independent of rnicd's.

use std::path::Path;
use std::process::Command;

/// Protocols Wireshark tries on InfiniBand payloads by heuristics. The payloads here are
/// test patterns, which some of them misread (and then call the frame malformed).
pub const PAYLOAD_HEURISTICS: [&str; 8] = [
    "rpcordma",
    "smb_direct",
    "smc",
    "nvme-rdma",
    "lnet",
    "iser",
    "infiniband_sdp",
    "fcoib",
];

/// Runs tshark with `args`, payload heuristics off; fails naming the fix when tshark is
/// not installed.
pub fn tshark(args: &[&str]) -> String {
    let mut command = Command::new("tshark");
    for p in PAYLOAD_HEURISTICS {
        command.args(["--disable-protocol", p]);
    }
    let out = match command.args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "tshark is not installed: run `bash qemu-scripts/setup.sh` as root (it installs \
             Debian's tshark), then run this test again"
        ),
        Err(e) => panic!("cannot run tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

/// A number as tshark prints a field: decimal, or hexadecimal with 0x.
pub fn number(field: &str) -> u64 {
    match field.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => field.parse(),
    }
    .unwrap_or_else(|_| panic!("'{field}' is not a number"))
}

/// What tshark decoded of each frame of `pcap`, in order: its protocol stack, BTH opcode,
/// destination QP, PSN and ICRC.
pub fn tshark_fields(pcap: &Path) -> Vec<(String, [u64; 4])> {
    let path = pcap.to_str().expect("utf-8 path");
    let fields = [
        "frame.protocols",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.invariant.crc",
    ];
    let mut args = vec!["-r", path, "-T", "fields", "-E", "separator=/t"];
    for f in &fields {
        args.extend(["-e", f]);
    }
    tshark(&args)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), fields.len(), "tshark line: {line}");
            let n = |i: usize| number(f[i]);
            (f[0].to_string(), [n(1), n(2), n(3), n(4)])
        })
        .collect()
}

/// Fails unless tshark's full decode of `pcap` has no malformed frame and no expert
/// warning or error.
#[track_caller]
pub fn assert_nothing_flagged(pcap: &Path) {
    let path = pcap.to_str().expect("utf-8 path");
    let flagged = tshark(&[
        "-r",
        path,
        "-Y",
        "_ws.malformed || _ws.expert.severity >= \"Warning\"",
    ]);
    assert!(flagged.trim().is_empty(), "tshark flags frames:\n{flagged}");
}

/// Asserts, by tshark, that the capture `pcap` holds more than `min_roce` RoCEv2 frames
/// (Ethernet, IPv4, UDP 4791, InfiniBand transport) and no frame Wireshark calls malformed.
pub fn assert_clean_roce_capture(pcap: &Path, min_roce: usize) {
    let path = pcap.to_str().expect("UTF-8 path");
    let roce = tshark(&["-r", path, "-Y", "infiniband"]).lines().count();
    assert!(
        roce > min_roce,
        "{path}: {roce} RoCEv2 frames, expected more than {min_roce}"
    );
    let malformed = tshark(&["-r", path, "-Y", "_ws.malformed"]);
    assert!(
        malformed.is_empty(),
        "{path}: malformed frames:\n{malformed}"
    );
}
