#!/usr/bin/env bash
# TCP throughput between two kernel-driver guests (boot.sh --kernel, rnic.ko) over rnic and
# over virtio-net, in the same run: each guest has one VF of one rnicd (the internal
# switch joins them) and a virtio-net NIC (boot.sh --nic, a QEMU dgram link between the
# two guests). Guest B runs iperf3 clients against guest A, alternating rnic and
# virtio-net, ROUNDS times each; prints each run's Gbit/s, the medians and their ratio.
# Not a test: it asserts nothing. As root, after qemu-scripts/setup.sh.
#
#   bash bench/kernel-iperf.sh [--time SECONDS] [--rounds N]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
time_s=10
rounds=1
while [ $# -gt 0 ]; do
    case "$1" in
        --time) time_s="$2"; shift ;;
        --rounds) rounds="$2"; shift ;;
        *) echo "usage: bash bench/kernel-iperf.sh [--time SECONDS] [--rounds N]" >&2; exit 2 ;;
    esac
    shift
done
# shellcheck source=qemu-scripts/env.sh
source qemu-scripts/env.sh

cargo build --release -p rnic-device --bin rnicd >&2
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
# QEMU may run inside the trixie root: the sockets must be where it reaches them.
if qemu_in_root; then base=$TRIXIE_ROOT/run/rnic-vm; else base=$RNIC_CACHE/run/rnic-vm; fi
mkdir -p "$base"
work="$(mktemp -d "$base/bench-kernel-iperf.XXXXXX")"
pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop_all EXIT

RUST_LOG=warn "$target/release/rnicd" --socket-dir "$work/sock" --vfs 2 2>"$work/rnicd.log" &
pids+=("$!")
for _ in $(seq 100); do
    [ -S "$work/sock/vf1.sock" ] && break
    sleep 0.1
done
[ -S "$work/sock/vf1.sock" ] || { cat "$work/rnicd.log" >&2; exit 1; }

# The virtio-net link: two UDP ports on 127.0.0.1.
port=$((40000 + RANDOM % 20000))

# In each guest: the rnic interface has its function's address (10.82.0.2 or .3, /16,
# from boot.sh --kernel); the virtio-net interface gets 10.83.0.N/24 here (boot.sh's --ip
# addresses the rnic functions in the kernel guest). Expanded in the guest, not here:
# shellcheck disable=SC2016
setup='
rn=""; vn=""
for n in /sys/class/net/eth*; do
    case $(basename "$(readlink "$n/device/driver")") in
    rnic) rn=${n##*/} ;;
    virtio_net) vn=${n##*/} ;;
    esac
done
[ -n "$rn" ] && [ -n "$vn" ] || { echo "=== missing an interface: rnic [$rn] virtio [$vn]"; exit 1; }
ip link set "$vn" up && ip addr add "10.83.0.$me/24" dev "$vn" || exit 1
ip -br addr
'
server="me=1
$setup
for i in \$(seq $((2 * rounds))); do timeout 300 iperf3 -s -1 >/dev/null || exit 1; done"
client="me=2
$setup
for ip in 10.82.0.2 10.83.0.1; do
    i=0
    while ! ping -c 1 -W 1 \$ip >/dev/null 2>&1; do
        i=\$((i + 1)); [ \$i -lt 120 ] || { echo \"=== \$ip never answered\"; exit 1; }
    done
done
for r in \$(seq $rounds); do
    for what in rnic:10.82.0.2 virtio:10.83.0.1; do
        i=0
        until iperf3 -f m -c \${what#*:} -t $time_s >/tmp/iperf.txt 2>&1; do
            i=\$((i + 1)); [ \$i -lt 30 ] || { cat /tmp/iperf.txt; exit 1; }
            sleep 1
        done
        awk -v w=\${what%%:*} '/receiver/ { for (i = 2; i <= NF; i++) if (\$i == \"Mbits/sec\") printf \"=== rate %s %.3f\\n\", w, \$(i - 1) / 1000 }' /tmp/iperf.txt
    done
done"

boot() { # NAME VF NIC CMD
    RNIC_RNICD="$target/release/rnicd" bash qemu-scripts/boot.sh --kernel --socket-dir "$work/sock" \
        --vf "$2" --nic "$3" --timeout $((300 + 4 * rounds * time_s)) -- "$4" >"$work/$1.out" 2>"$work/$1.err"
}
boot a 0 "dgram:$port:$((port + 1))" "$server" &
a=$!
pids+=("$a")
status=0
boot b 1 "dgram:$((port + 1)):$port" "$client" || status=$?
wait "$a" || status=$?
if [ $status != 0 ]; then
    echo "a guest failed (status $status); consoles:" >&2
    cat "$work/a.out" "$work/b.out" >&2
    exit 1
fi

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
rates() { tr -d '\r' <"$work/b.out" | awk -v w="$1" '$1 == "===" && $2 == "rate" && $3 == w {print $4}'; }
echo "iperf3 TCP, $time_s s per run, $rounds round(s), guest B to guest A (TCG, 1 vCPU each):"
echo "rnic runs (Gbit/s):       $(rates rnic | tr '\n' ' ')"
echo "virtio-net runs (Gbit/s): $(rates virtio | tr '\n' ' ')"
rnic="$(rates rnic | median)"
virtio="$(rates virtio | median)"
echo "| path | Gbit/s |"
echo "|---|---|"
echo "| rnic (rnic.ko, VF to VF through rnicd's switch) | $rnic |"
echo "| virtio-net (QEMU dgram link) | $virtio |"
awk -v a="$rnic" -v b="$virtio" 'BEGIN { printf "rnic / virtio-net: %.2f\n", (b > 0 ? a / b : 0) }'
