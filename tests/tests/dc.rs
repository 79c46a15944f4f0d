//! The Dynamically Connected transport (datasheet §14.8): one DCI reaches three DCTs,
//! connecting to each in turn, over one rnicd (four VFs), over two rnicd on UDP, and over
//! a lossy switch. Every WR completes once, in order; every byte is checked.

use rnic_tests::tshark;
use rnic_tests::verbs_pair::{side, PairOptions, Side};
use rnic_tests::wire::{carried_icrc, expected_icrc, pcap_frames};
use rnic_tests::Rnicd;
use rnic_tools::features::{self, dc_key, Checks, Endpoint};

/// Runs `scenario` with a's and the targets' endpoints; panics naming a failed check.
fn checked(scenario: impl FnOnce(&mut Checks) -> features::Result<()>) {
    let mut say = |line: &str| eprintln!("{line}");
    let mut checks = Checks::new(&mut say);
    if let Err(e) = scenario(&mut checks) {
        panic!("{e}");
    }
}

/// SENDs and WRITEs to every target, interleaved, then READs back; checks everything
/// ([`features::dc_exercise`]).
fn exercise(a: &Side, targets: &[&Side]) {
    let targets: Vec<Endpoint> = targets.iter().map(|t| t.endpoint()).collect();
    checked(|c| features::dc_exercise(&a.endpoint(), &targets, c));
}

fn sides(rnicd: &Rnicd, names: &[&str]) -> Vec<Side> {
    names
        .iter()
        .map(|n| side(&rnicd.socket(n), &PairOptions::default()))
        .collect()
}

/// Vendor BTH opcodes of the DC handshake (datasheet §14.8).
const DC_CONNECT: u8 = 0xC0;
const DC_DISCONNECT: u8 = 0xC1;
/// Where the BTH starts in a captured RoCEv2 frame (Ethernet, IPv4, UDP).
const BTH: usize = 42;

fn bth_psn(frame: &[u8]) -> u32 {
    u32::from_be_bytes([0, frame[BTH + 9], frame[BTH + 10], frame[BTH + 11]])
}

fn bth_dest_qp(frame: &[u8]) -> u32 {
    u32::from_be_bytes([0, frame[BTH + 5], frame[BTH + 6], frame[BTH + 7]])
}

/// Checks a lossless DC capture: Wireshark flags nothing (it shows the handshake
/// opcodes as unknown, their DCETH as vendor data); one connect per run of WRs for one
/// target and one disconnect between runs, each with a valid ICRC, the DCETH (key, DCI
/// QPN, reserved) and an ACK request; the first request after a connect takes the next
/// PSN.
fn check_dc_capture(pcap: &std::path::Path, runs: &[usize]) {
    tshark::assert_nothing_flagged(pcap);
    let frames = pcap_frames(&std::fs::read(pcap).unwrap());
    let control = |opcode: u8| -> Vec<&Vec<u8>> {
        frames
            .iter()
            .filter(|f| f.get(BTH) == Some(&opcode))
            .collect()
    };
    let (connects, disconnects) = (control(DC_CONNECT), control(DC_DISCONNECT));
    assert_eq!(connects.len(), runs.len(), "one DC_CONNECT per run");
    assert_eq!(
        disconnects.len(),
        runs.len() - 1,
        "a DC_DISCONNECT between runs"
    );
    for (f, target) in connects.iter().zip(runs) {
        assert_eq!(f.len(), BTH + 12 + 16 + 4, "BTH, DCETH, ICRC");
        assert_eq!(carried_icrc(f), expected_icrc(f));
        assert!(f[BTH + 8] & 0x80 != 0, "a handshake asks for an ACK");
        assert_eq!(
            f[BTH + 12..BTH + 20],
            dc_key(*target).to_be_bytes(),
            "DC key"
        );
        assert_eq!(f[BTH + 24..BTH + 28], [0; 4], "DCETH reserved");
        let next = psn_after(bth_psn(f));
        assert!(
            frames.iter().any(|d| d[BTH] < DC_CONNECT
                && bth_dest_qp(d) == bth_dest_qp(f)
                && bth_psn(d) == next),
            "data after a connect continues its PSN"
        );
    }
    for f in &disconnects {
        assert_eq!(carried_icrc(f), expected_icrc(f));
        assert_eq!(
            f[BTH + 20..BTH + 24],
            connects[0][BTH + 20..BTH + 24],
            "DCI QPN"
        );
    }
}

fn psn_after(p: u32) -> u32 {
    (p + 1) & 0xFF_FFFF
}

#[test]
fn one_dci_reaches_three_dcts_of_one_rnicd() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("dc.pcap");
    let mut rnicd = Rnicd::start(4, &["--pcap", pcap.to_str().unwrap()]);
    let s = sides(&rnicd, &["vf0", "vf1", "vf2", "vf3"]);
    exercise(&s[0], &[&s[1], &s[2], &s[3]]);
    rnicd.stop_with(libc::SIGTERM);
    std::mem::forget(s);
    // SENDs and WRITEs visit the targets 0, 1, 2 three times; the READs do it again.
    let runs: Vec<usize> = (0..2 * features::DC_ROUNDS).flat_map(|_| 0..3).collect();
    check_dc_capture(&pcap, &runs);
}

#[test]
fn one_dci_reaches_three_dcts_of_another_rnicd_over_udp() {
    let ra = Rnicd::start(1, &["--net", "udp:127.0.80.1"]);
    let rb = Rnicd::start(3, &["--net", "udp:127.0.81.1"]);
    let a = sides(&ra, &["vf0"]);
    let b = sides(&rb, &["vf0", "vf1", "vf2"]);
    exercise(&a[0], &[&b[0], &b[1], &b[2]]);
}

#[test]
fn dc_data_arrives_over_a_lossy_network() {
    let rnicd = Rnicd::start(4, &["--net-faults", "loss=0.05,seed=7"]);
    let s = sides(&rnicd, &["vf0", "vf1", "vf2", "vf3"]);
    exercise(&s[0], &[&s[1], &s[2], &s[3]]);
}

#[test]
fn a_wrong_dc_key_fails_the_wr_with_remote_access_error_and_the_dci_goes_to_error() {
    let rnicd = Rnicd::start(2, &[]);
    let s = sides(&rnicd, &["vf0", "vf1"]);
    checked(|c| features::dc_wrong_key(&s[0].endpoint(), &s[1].endpoint(), c));
}
