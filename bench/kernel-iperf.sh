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
# shellcheck source=bench/lib.sh
source bench/lib.sh
time=10
rounds=1
bench_args "bash bench/kernel-iperf.sh [--time SECONDS] [--rounds N]" time rounds -- "$@"
vm_bench_start 2

# In each guest: the rnic interface has its function's address (10.82.0.2 or .3, /16,
# from boot.sh --kernel); the virtio-net interface gets 10.83.0.N/24 ($guest_nics; boot.sh's
# --ip addresses the rnic functions in the kernel guest).
server="me=1
$guest_nics
for i in \$(seq $((2 * rounds))); do timeout 300 iperf3 -s -1 >/dev/null || exit 1; done"
client="me=2 peers='10.82.0.2 10.83.0.1'
$guest_nics
$guest_ping
for r in \$(seq $rounds); do
    for what in rnic:10.82.0.2 virtio:10.83.0.1; do
        i=0
        until iperf3 -f m -c \${what#*:} -t $time >/tmp/iperf.txt 2>&1; do
            i=\$((i + 1)); [ \$i -lt 30 ] || { cat /tmp/iperf.txt; exit 1; }
            sleep 1
        done
        awk -v w=\${what%%:*} '/receiver/ { for (i = 2; i <= NF; i++) if (\$i == \"Mbits/sec\") printf \"=== rate %s %.3f\\n\", w, \$(i - 1) / 1000 }' /tmp/iperf.txt
    done
done"

boot_pair $((300 + 4 * rounds * time)) a 0 "$server" b 1 "$client"

rates() { tr -d '\r' <"$work/b.out" | awk -v w="$1" '$1 == "===" && $2 == "rate" && $3 == w {print $4}'; }
echo "iperf3 TCP, $time s per run, $rounds round(s), guest B to guest A (TCG, 1 vCPU each):"
echo "rnic runs (Gbit/s):       $(rates rnic | tr '\n' ' ')"
echo "virtio-net runs (Gbit/s): $(rates virtio | tr '\n' ' ')"
rnic="$(rates rnic | median)"
virtio="$(rates virtio | median)"
echo "| path | Gbit/s |"
echo "|---|---|"
echo "| rnic (rnic.ko, VF to VF through rnicd's switch) | $rnic |"
echo "| virtio-net (QEMU dgram link) | $virtio |"
awk -v a="$rnic" -v b="$virtio" 'BEGIN { printf "rnic / virtio-net: %.2f\n", (b > 0 ? a / b : 0) }'
