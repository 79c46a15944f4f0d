//! The Linux kernel driver (kernel/, rnic.ko) in two kernel-driver guests (`boot.sh
//! --kernel`), one VF each of one rnicd: their rnic interfaces come up with their
//! functions' addresses (VF0 10.82.0.2, VF1 10.82.0.3, from the GIDs), ping each other,
//! carry a 10 s iperf3 TCP run, then MTU 9000 on both ends (`ping -s 8000 -M do`); guest
//! A then unloads and reloads rnic.ko while an iperf3 run goes on, and resets its function
//! (FLR, through sysfs) while pinging; TCP works again after each. `ethtool -i` and
//! `ethtool -S` show the driver and the device's counters, and neither kernel logs an oops
//! or a warning. One boot per guest for all of it.
//!
//! They boot VMs, so they are ignored by default: `cargo build --release -p rnic-device
//! --bin rnicd && cargo test -p rnic-tests --test vm_kernel -- --ignored` (as root, after
//! qemu-scripts/setup.sh, which builds rnic.ko).

use std::collections::BTreeMap;
use std::time::Instant;

use rnic_tests::vm::{release_rnicd, vm_run_base, Boot};
use rnic_tests::Rnicd;

const A_IP: &str = "10.82.0.2";
const B_IP: &str = "10.82.0.3";

/// Shell helpers both guests' scripts start with.
const HELPERS: &str = r#"
step() { echo "=== step $*"; }
die() { echo "=== FAILED: $*"; dmesg | tail -n 40; exit 1; }
# wait_ping IP [ping options]: up to 120 s for one answer.
wait_ping() {
    ip=$1; shift
    i=0
    while ! ping -c 1 -W 1 "$@" "$ip" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 120 ] || return 1
    done
}
# The device's and the driver's counters, one `name value` a line.
counters() { ethtool -S eth0 | awk -F': *' 'NR > 1 { gsub(/ /, "", $1); print "=== counter " $1 " " $2 }'; }
check_dmesg() {
    # Device messages read `rnic 0000:00:01.0: ...` (not the module loader's `rnic: ...`).
    if dmesg | grep -E 'Oops|BUG:|WARNING:|Call Trace|rnic [0-9a-f]{4}:.*(timed out|failed)'; then
        die "the kernel log shows a problem"
    fi
}
"#;

/// Guest A (VF0): the iperf3 client, the one that reloads its driver and resets its function.
fn script_a() -> String {
    format!(
        r#"{HELPERS}
step addresses
ip -br addr
ip -br addr show eth0 | grep -q "{A_IP}/16" || die "eth0 lacks {A_IP}/16"
step ethtool-i
ethtool -i eth0 | sed 's/^/=== drvinfo /'
wait_ping {B_IP} || die "B never answered"
step ping
ping -c 5 -i 0.2 {B_IP} || die "ping"
step iperf3
i=0
until iperf3 -c {B_IP} -t 10 > /tmp/iperf.txt 2>&1; do
    i=$((i + 1)); [ $i -lt 30 ] || {{ cat /tmp/iperf.txt; die "iperf3 run"; }}
    sleep 1
done
cat /tmp/iperf.txt
grep receiver /tmp/iperf.txt | sed 's/^/=== iperf /'
step mtu
ip link set eth0 mtu 9000 || die "MTU 9000"
ip -d link show eth0 | grep -q "mtu 9000" || die "MTU not 9000"
wait_ping {B_IP} -s 8000 -M do || die "no jumbo answer"
ping -c 3 -s 8000 -M do {B_IP} || die "jumbo ping"
echo "=== jumbo ok"
step reload
i=0
until timeout 150 iperf3 -c {B_IP} -t 40 > /tmp/iperf2.txt 2>&1 & sleep 4; kill -0 $! 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 30 ] || die "iperf3 before the reload"
done
iperf_pid=$!
rmmod rnic || die "rmmod rnic with traffic"
[ ! -e /sys/class/net/eth0 ] || die "eth0 outlived rmmod"
modprobe rnic || die "modprobe rnic"
ip link set eth0 up && ip addr add {A_IP}/16 dev eth0 || die "eth0 after the reload"
wait $iperf_pid
echo "=== iperf during reload: status $?"
cat /tmp/iperf2.txt | tail -n 5
wait_ping {B_IP} || die "no answer after the reload"
ping -c 3 {B_IP} || die "ping after the reload"
echo "=== reload ok"
step flr
pci=$(basename "$(readlink /sys/class/net/eth0/device)")
echo 1 > /sys/bus/pci/devices/$pci/reset || die "FLR of $pci"
wait_ping {B_IP} || die "no answer after FLR"
ping -c 3 {B_IP} || die "ping after FLR"
echo "=== flr ok"
step last-iperf3
i=0
until iperf3 -c {B_IP} -t 3 > /tmp/iperf3.txt 2>&1; do
    i=$((i + 1)); [ $i -lt 60 ] || {{ cat /tmp/iperf3.txt; die "iperf3 after reload and FLR"; }}
    sleep 1
done
grep receiver /tmp/iperf3.txt | sed 's/^/=== iperf-after /'
counters
ip -s link show eth0
check_dmesg
dmesg | grep rnic
"#
    )
}

/// Guest B (VF1): serves three iperf3 runs and answers.
fn script_b() -> String {
    format!(
        r#"{HELPERS}
step addresses
ip -br addr
ip -br addr show eth0 | grep -q "{B_IP}/16" || die "eth0 lacks {B_IP}/16"
wait_ping {A_IP} || die "A never answered"
step serve
timeout 300 iperf3 -s -1 || die "iperf3 server 1"
step mtu
ip link set eth0 mtu 9000 || die "MTU 9000"
wait_ping {A_IP} -s 8000 -M do || die "no jumbo answer"
ping -c 3 -s 8000 -M do {A_IP} || die "jumbo ping"
echo "=== jumbo ok"
step serve-reload
timeout 200 iperf3 -s -1
step serve-last
timeout 300 iperf3 -s -1 || die "iperf3 server 3"
counters
check_dmesg
"#
    )
}

/// `=== counter NAME VALUE` lines of a console.
fn counters(console: &str) -> BTreeMap<String, u64> {
    console
        .lines()
        .filter_map(|l| l.trim_end().strip_prefix("=== counter "))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

fn console_of(name: &str, child: std::process::Child) -> String {
    let out = child.wait_with_output().expect("wait for the guest");
    let (console, status) = rnic_tests::vm::finished(name, &out);
    assert_eq!(status, Some(0), "{name} failed");
    assert!(
        console.contains("=== script done"),
        "{name} did not finish its script"
    );
    console
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn two_kernel_guests_ping_iperf_jumbo_reload_and_reset_over_their_vfs() {
    let started = Instant::now();
    let base = vm_run_base();
    std::fs::create_dir_all(&base).expect("the VM run directory");
    let rnicd = Rnicd::start_binary_in(&release_rnicd(), &base, 2, &[]);
    let guest = |vf: u32, script: String| {
        Boot::rnic()
            .arg("--kernel")
            .socket_dir(&rnicd.socket_dir())
            .vf(vf)
            .timeout(900)
            .spawn(&format!("{script}\necho '=== script done'\n"))
    };
    let a = guest(0, script_a());
    let b = guest(1, script_b());
    let a = console_of("guest A (VF0)", a);
    let b = console_of("guest B (VF1)", b);

    for (name, console) in [("A", &a), ("B", &b)] {
        assert!(console.contains("=== jumbo ok"), "{name}: jumbo pings");
        let c = counters(console);
        for counter in [
            "tx_frames",
            "rx_frames",
            "txq0_frames",
            "rxq0_frames",
            "interrupts",
        ] {
            assert!(
                c.get(counter).copied().unwrap_or(0) > 0,
                "{name}: ethtool -S shows no {counter}: {c:?}"
            );
        }
        for counter in [
            "tx_malformed",
            "tx_dma_errors",
            "rx_dma_errors",
            "ring_errors",
        ] {
            assert_eq!(c.get(counter), Some(&0), "{name}: {counter} in {c:?}");
        }
    }
    assert!(a.contains("=== drvinfo driver: rnic"), "ethtool -i: driver");
    assert!(
        a.contains("=== drvinfo bus-info: 0000:"),
        "ethtool -i: bus-info"
    );
    assert!(a.contains("=== iperf "), "the 10 s iperf3 run");
    assert!(a.contains("=== reload ok") && a.contains("=== flr ok"));
    assert!(
        a.contains("=== iperf-after "),
        "iperf3 after reload and FLR"
    );
    // B received A's 10 s run: hundreds of thousands of frames under TCG.
    let b_rx = counters(&b)["rx_frames"];
    assert!(b_rx > 10_000, "B received only {b_rx} frames");
    eprintln!("done after {:?}", started.elapsed());
}
