//! The Linux kernel driver (kernel/, rnic.ko) in two kernel-driver guests (`boot.sh
//! --kernel`), one VF each of one rnicd: their rnic interfaces come up with their
//! functions' addresses (VF0 10.82.0.2, VF1 10.82.0.3, from the GIDs), ping each other
//! (IPv4, and IPv6 through the multicast filter), carry a 10 s iperf3 TCP run, then MTU 9000 on both ends (`ping -s 8000 -M do`); guest
//! A then unloads and reloads rnic.ko while an iperf3 run goes on, and resets its function
//! (FLR, through sysfs), and sets interrupt moderation (`ethtool -C`); TCP works again
//! after each. The PF then takes B's link down and
//! up (`rnic-admin link`): B's carrier follows through the event vector, and B reaches
//! nobody while it is down; and gives B a new MAC (`rnic-admin mac`), which B's interface
//! takes. `ethtool -i` and `ethtool -S` show the driver and the device's counters, and
//! neither kernel logs an oops or a warning. One boot per guest for all of it.
//!
//! They boot VMs, so they are ignored by default: `cargo build --workspace --bins &&
//! cargo build --release -p rnic-device --bin rnicd && cargo test -p rnic-tests --test
//! vm_kernel -- --ignored` (as root, after qemu-scripts/setup.sh, which builds rnic.ko;
//! the guests' boots rebuild it when kernel/ changed). About 2 minutes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rnic_tests::vm::{release_rnicd, vm_run_base, Boot};
use rnic_tests::Rnicd;

const A_IP: &str = "10.82.0.2";
const B_IP: &str = "10.82.0.3";
/// The MAC the PF gives VF1 at the end.
const NEW_MAC: &str = "02:52:4e:49:43:99";

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
# wait_carrier 0|1: up to 60 s for eth0's carrier to read that.
wait_carrier() {
    i=0
    while [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" != "$1" ]; do
        i=$((i + 1))
        [ $i -lt 600 ] || return 1
        sleep 0.1
    done
}
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
step multicast
# IPv6 reaches B only through B's multicast list (SET_ETH): the all-nodes group answers
# the first ping, neighbour discovery to B's solicited-node group the second.
own=$(ip -6 -o addr show dev eth0 scope link | awk '{{ sub(/\/.*/, "", $4); print $4 }}')
peer=$(ping -6 -c 3 -I eth0 ff02::1 | awk '/bytes from fe80/ {{ sub(/%.*/, "", $4); sub(/:$/, "", $4); print $4 }}' | grep -vx "$own" | head -n 1)
[ -n "$peer" ] || die "no answer from ff02::1 but our own ($own)"
ping -6 -c 3 "$peer%eth0" || die "IPv6 ping to $peer"
echo "=== ipv6 ok $peer"
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
step coalesce
ethtool -C eth0 rx-usecs 50 tx-usecs 50 || die "ethtool -C"
ethtool -c eth0
[ "$(ethtool -c eth0 | awk '$1 == "rx-usecs:" {{ print $2 }}')" = 50 ] || die "rx-usecs not 50"
echo "=== coalesce ok"
step last-iperf3
i=0
until iperf3 -c {B_IP} -t 3 > /tmp/iperf3.txt 2>&1; do
    i=$((i + 1)); [ $i -lt 60 ] || {{ cat /tmp/iperf3.txt; die "iperf3 after reload and FLR"; }}
    sleep 1
done
grep receiver /tmp/iperf3.txt | sed 's/^/=== iperf-after /'
counters
ip -s link show eth0
step wait-for-b
# B's link goes down and up again; then B connects once more, and A is done.
timeout 400 iperf3 -s -1 || die "B's last connection"
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
step link
echo "=== waiting for link down"
wait_carrier 0 || die "the carrier stayed up"
echo "=== carrier down"
# With the carrier off, the stack itself holds B's frames back (no qdisc runs).
ping -c 2 -W 1 {A_IP} && die "B reached A with its link down"
echo "=== waiting for link up"
wait_carrier 1 || die "the carrier stayed down"
echo "=== carrier up"
wait_ping {A_IP} || die "no answer after the link came back"
i=0
until iperf3 -c {A_IP} -t 2 > /tmp/iperf.txt 2>&1; do
    i=$((i + 1)); [ $i -lt 60 ] || {{ cat /tmp/iperf.txt; die "iperf3 to A after the link came back"; }}
    sleep 1
done
echo "=== link ok"
step mac
old=$(cat /sys/class/net/eth0/address)
echo "=== waiting for a new MAC"
i=0
while [ "$(cat /sys/class/net/eth0/address)" = "$old" ]; do
    i=$((i + 1)); [ $i -lt 600 ] || die "the MAC stayed $old"
    sleep 0.1
done
echo "=== mac now $(cat /sys/class/net/eth0/address)"
check_dmesg
"#
    )
}

/// A guest's boot.sh run. It is stopped (SIGTERM: boot.sh then stops its QEMU) only
/// while it has not been reaped, under the lock that reaping takes, so its pid names it.
struct Guest(Mutex<Child>);

impl Guest {
    fn new(child: Child) -> Arc<Self> {
        Arc::new(Self(Mutex::new(child)))
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the run if it still goes on.
    fn stop(&self) {
        let mut child = self.child();
        if let Ok(None) = child.try_wait() {
            // SAFETY: kill(2) of a child of this test that has not been reaped (its
            // lock is held); no memory is involved.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }

    /// Reads the console to its end, calling `on_line` for each line as it comes, and the
    /// messages beside it; waits; prints both under `name`: the console and the status.
    fn finish(&self, name: &str, mut on_line: impl FnMut(&str)) -> (String, Option<i32>) {
        let (stdout, mut stderr) = {
            let mut child = self.child();
            (
                child.stdout.take().expect("guest stdout"),
                child.stderr.take().expect("guest stderr"),
            )
        };
        let messages = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut console = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            on_line(line.trim_end());
            console += &line;
            console.push('\n');
        }
        let messages = messages.join().unwrap_or_default();
        let status = self.child().wait().expect("wait for the guest").code();
        eprintln!("--- {name} ---\n{console}\n{messages}");
        (console, status)
    }
}

/// On a failed check, stops the guests that still run, so none is left waiting for its
/// peer.
struct StopOnPanic(Vec<Arc<Guest>>);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for guest in &self.0 {
                guest.stop();
            }
        }
    }
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

/// Whether a guest ran its whole script and exited 0.
fn succeeded(console: &str, status: Option<i32>) -> bool {
    status == Some(0) && console.contains("=== script done")
}

#[test]
#[ignore = "boots two QEMU guests; run by tests/run-all.sh after qemu-scripts/setup.sh"]
fn two_kernel_guests_ping_iperf_jumbo_reload_reset_link_and_mac_over_their_vfs() {
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
    let a = Guest::new(guest(0, script_a()));
    let b = Guest::new(guest(1, script_b()));
    let _stop = StopOnPanic(vec![a.clone(), b.clone()]);
    // A's console is read beside B's, so neither guest waits on a full pipe; a failed
    // guest stops the other, which would otherwise wait for it.
    let reader = {
        let (a, b) = (a.clone(), b.clone());
        std::thread::spawn(move || {
            let (console, status) = a.finish("guest A (VF0)", |_| {});
            if !succeeded(&console, status) {
                b.stop();
            }
            (console, status)
        })
    };
    // B's console drives the PF: B's link goes down when B waits for that, up again a
    // few seconds after B saw it go, and B gets a new MAC when it waits for one.
    let (b, b_status) = b.finish("guest B (VF1)", |line| {
        if line.ends_with("=== waiting for link down") {
            rnicd.admin(&["link", "vf1", "down"]);
        } else if line.ends_with("=== waiting for link up") {
            std::thread::sleep(Duration::from_secs(3));
            rnicd.admin(&["link", "vf1", "up"]);
        } else if line.ends_with("=== waiting for a new MAC") {
            rnicd.admin(&["mac", "vf1", NEW_MAC]);
        }
    });
    if !succeeded(&b, b_status) {
        a.stop();
    }
    let (a, a_status) = reader.join().expect("guest A's reader");
    assert!(
        succeeded(&a, a_status),
        "guest A failed (status {a_status:?})"
    );
    assert!(
        succeeded(&b, b_status),
        "guest B failed (status {b_status:?})"
    );

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
    assert!(a.contains("=== coalesce ok"), "ethtool -C");
    assert!(
        a.contains("=== ipv6 ok fe80:"),
        "IPv6 through B's multicast list"
    );
    assert!(
        a.contains("=== iperf-after "),
        "iperf3 after reload and FLR"
    );
    assert!(b.contains("=== carrier down") && b.contains("=== link ok"));
    assert!(b.contains(&format!("=== mac now {NEW_MAC}")), "B's new MAC");
    // B received A's 10 s run: hundreds of thousands of frames under TCG.
    let b_rx = counters(&b)["rx_frames"];
    assert!(b_rx > 10_000, "B received only {b_rx} frames");
    eprintln!("done after {:?}", started.elapsed());
}
