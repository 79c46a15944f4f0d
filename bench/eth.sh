#!/usr/bin/env bash
# The Ethernet queues' frame rate between two functions of one rnicd (rnic-eth rate,
# datasheet §15) beside the RoCE path's message rate for the same sizes (rnic-perf
# send_bw), measured in the same run, alternating, REPEAT times each; prints the medians
# and their ratio. Not a test: it asserts nothing.
#
#   bash bench/eth.sh [--repeat N] [--frames N]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
repeat=5
frames=200000
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) repeat="$2"; shift ;;
        --frames) frames="$2"; shift ;;
        *) echo "usage: bash bench/eth.sh [--repeat N] [--frames N]" >&2; exit 2 ;;
    esac
    shift
done
source bench/lib.sh
bin="$(release_bin)"
bench_workdir
start_rnicd "$bin" one --vfs 2
sock="$work/one"

# median: the middle of the numbers on stdin.
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "| size | Ethernet frames/s | RoCE SEND messages/s | Ethernet / RoCE |"
echo "|---|---|---|---|"
for size in 64 1500; do
    eth=() roce=()
    for _ in $(seq "$repeat"); do
        eth+=("$("$bin/rnic-eth" --vfio-user "$sock/vf0.sock" rate "$sock/vf1.sock" \
            --size "$size" --frames "$frames" | sed -n 's/.*: \([0-9.]*\) frames\/s.*/\1/p')")
        # MsgRate[Mpps] is the fifth column of the row of the size.
        roce+=("$("$bin/rnic-perf" send_bw -s "$size" -n "$frames" --vfio-user "$sock/vf0.sock" \
            --remote-vfio-user "$sock/vf1.sock" 2>/dev/null |
            awk -v s="$size" '$1 == s && NF >= 5 {printf "%.0f", $5 * 1e6; exit}')")
    done
    e="$(printf '%s\n' "${eth[@]}" | median)"
    r="$(printf '%s\n' "${roce[@]}" | median)"
    echo "| $size | $e | $r | $(awk -v a="$e" -v b="$r" 'BEGIN {printf "%.2f", a / b}') |"
done
