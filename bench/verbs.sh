#!/usr/bin/env bash
# What rnic's libibverbs costs on top of the driver: Debian's unmodified perftest
# (ib_write_bw 64 KiB and ib_write_lat 8 B with the drivers spinning, ib_send_bw and
# ib_send_lat with -e, sleeping on the completion interrupt, as perftest's WRITE tests
# cannot; run on rnic's libibverbs.so.1 in the trixie root) beside rnic-perf's same tests
# on the same two VFs of one release rnicd, in the same run. Not a test: it asserts
# nothing.
#
#   bash bench/verbs.sh [--bw-iters N] [--iters N] [--baseline LIBRARY] [--out FILE]
#
# --baseline LIBRARY: also runs each perftest on LIBRARY (another build's
# libibverbs.so.1, e.g. one built from an earlier commit), right after the same test on
# this tree's, and adds a table of this build's figures against it.
#
# perftest runs as two processes (server on rnic_0, client on rnic_1, TCP on loopback),
# rnic-perf as one that drives both ends: perftest has one more busy thread, which on a
# 2-core machine shares a core with rnicd's engine when the drivers spin. Needs the trixie
# root with ibverbs-utils and perftest (qemu-scripts/setup.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bw_iters=5000
iters=5000
out="$repo/target/bench/verbs.md"
baseline=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bw-iters) bw_iters="$2"; shift ;;
        --iters) iters="$2"; shift ;;
        --baseline) baseline="$(realpath "$2")"; shift ;;
        --out) out="$2"; shift ;;
        *) echo "usage: bash bench/verbs.sh [--bw-iters N] [--iters N] [--baseline LIBRARY] [--out FILE]" >&2; exit 2 ;;
    esac
    shift
done
root=/var/cache/rnic/trixie-root
[ -x "$root/usr/bin/ib_write_bw" ] || {
    echo "bench/verbs.sh: no perftest in $root: run qemu-scripts/setup.sh first" >&2
    exit 1
}
mkdir -p "$(dirname "$out")"

source bench/lib.sh
echo "=== [verbs] building release binaries and the library" >&2
bin="$(release_bin)"
cargo build --release -p rnic-ibverbs >&2
# The sockets and the library inside the root, where its programs reach them.
work="$(mktemp -d "$root/tmp/rnic-bench-verbs.XXXXXX")"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
inner="${work#"$root"}"
cp "$bin/libibverbs.so" "$work/libibverbs.so.1"
if [ -n "$baseline" ]; then
    mkdir "$work/baseline"
    cp "$baseline" "$work/baseline/libibverbs.so.1"
fi
libdir="$inner"
start_rnicd "$bin" rnic --vfs 2
sockets="$inner/rnic/vf0.sock:$inner/rnic/vf1.sock"

# inroot PROGRAM ARGS...: a program of the root on rnic's library (with /proc, which
# memory registration reads, mounted in a mount namespace of its own).
inroot() {
    unshare --mount -- sh -c 'mount -t proc proc "$0/proc" && exec chroot "$@"' "$root" "$root" \
        env LD_LIBRARY_PATH="$libdir" RNIC_VFIO_USER="$sockets" "$@"
}

# perftest TEST ARGS...: server on rnic_0, client on rnic_1; prints the client's result
# line (the first line of figures after the header).
perftest() {
    local test="$1"; shift
    inroot "$test" -d rnic_0 -x 1 "$@" >"$work/server.txt" 2>&1 &
    local server=$!
    local client
    for _ in $(seq 50); do
        if client="$(inroot "$test" -d rnic_1 -x 1 "$@" 127.0.0.1 2>&1)"; then break; fi
        echo "$client" | grep -q "Couldn't connect" || { echo "$client" >&2; return 1; }
        sleep 0.2
    done
    wait "$server" || true
    echo "$client" | awk '/#bytes/ {getline; print; exit}'
}

rnic_perf() {
    "$bin/rnic-perf" "$@" --no-baseline --vfio-user "$work/rnic/vf0.sock" \
        --remote-vfio-user "$work/rnic/vf1.sock" 2>/dev/null | awk '/#bytes/ {getline; print; exit}'
}

{
    echo "# rnic's libibverbs against the driver"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "Two VFs of one release rnicd. perftest (Debian trixie's, unmodified) on rnic's"
    echo "libibverbs.so.1; rnic-perf on the driver's own verbs."
    echo
    echo "| measurement | perftest on libibverbs | rnic-perf | perftest / rnic-perf |"
    echo "|---|---|---|---|"
} >"$out"

row() { ratio_row "$@" >>"$out"; }
baseline_rows=()

# on_baseline TEST ARGS...: perftest on the baseline library (nothing without one).
on_baseline() {
    [ -n "$baseline" ] || return 0
    libdir="$inner/baseline"
    perftest "$@"
    libdir="$inner"
}

# measure LABEL BW_TEST LAT_TEST MODE: one bandwidth and one latency row.
measure() {
    local label="$1" bw="$2" lat="$3" mode="$4"
    echo "=== [verbs] ${bw#ib_} 64 KiB$label" >&2
    p="$(perftest "$bw" -s 65536 -n "$bw_iters" $mode)"
    r="$(rnic_perf "${bw#ib_}" -s 65536 -n "$bw_iters" $mode)"
    # perftest: #bytes #iterations BW peak BW average MsgRate (MiB/s);
    # rnic-perf: #bytes #iterations peak average MsgRate (MiB/s too).
    b="$(on_baseline "$bw" -s 65536 -n "$bw_iters" $mode)"
    row "$bw / ${bw#ib_} 64 KiB$label, average" \
        "$(echo "$p" | awk '{printf "%.0f", $4}')" "$(echo "$r" | awk '{printf "%.0f", $4}')" MiB/s
    [ -z "$b" ] || baseline_rows+=("$(ratio_row "$bw 64 KiB$label, average" \
        "$(echo "$p" | awk '{printf "%.0f", $4}')" "$(echo "$b" | awk '{printf "%.0f", $4}')" MiB/s)")
    echo "=== [verbs] ${lat#ib_} 8 B$label" >&2
    p="$(perftest "$lat" -s 8 -n "$iters" $mode)"
    r="$(rnic_perf "${lat#ib_}" -s 8 -n "$iters" $mode)"
    # perftest: #bytes #iterations t_min t_max t_typical ...; rnic-perf: ... t_min t_median.
    b="$(on_baseline "$lat" -s 8 -n "$iters" $mode)"
    row "$lat / ${lat#ib_} 8 B$label, typical / median" \
        "$(echo "$p" | awk '{print $5}')" "$(echo "$r" | awk '{print $4}')" µs
    [ -z "$b" ] || baseline_rows+=("$(ratio_row "$lat 8 B$label, typical" \
        "$(echo "$p" | awk '{print $5}')" "$(echo "$b" | awk '{print $5}')" µs)")
}

# perftest's WRITE tests cannot sleep on events: its SEND tests do.
measure "" ib_write_bw ib_write_lat ""
measure ", events" ib_send_bw ib_send_lat -e
echo >>"$out"
if [ ${#baseline_rows[@]} -gt 0 ]; then
    {
        echo "This tree's library against the baseline, $baseline (each test run on one right after the other):"
        echo
        echo "| measurement | this tree | baseline | this / baseline |"
        echo "|---|---|---|---|"
        printf '%s\n' "${baseline_rows[@]}"
        echo
    } >>"$out"
fi
echo "=== [verbs] report: $out" >&2
cat "$out"
