#!/usr/bin/env bash
# Where the half round trip of an 8-byte RDMA WRITE between two rnicd goes: two release
# rnicd over loopback UDP, each pinned to a core of its own (taskset), rnic-perf driving
# both ends in event mode (-e: it sleeps on the completion interrupts, so the engines
# have the cores), with `perf sched record` and `perf trace` around the run. Not a test.
#
#   bash bench/latency.sh [--iters N] [--out DIR] [--cpus A,B] [-- RNICD_ARGS...]
#
# Writes to DIR (default target/bench/latency): rnic-perf's report with and without -e
# (and the UDP ping-pong baseline it measures in the same run), `perf sched timehist`
# of the event-mode run, and `perf trace -s` (system calls per thread, with times) of
# each engine. Installs perf with apt if it is missing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
iters=20000
out="$repo/target/bench/latency"
cpus="0,1"
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --iters) iters="$2"; shift ;;
        --out) out="$2"; shift ;;
        --cpus) cpus="$2"; shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "usage: bash bench/latency.sh [--iters N] [--out DIR] [--cpus A,B] [-- RNICD_ARGS...]" >&2; exit 2 ;;
    esac
    shift
done
cpu_a="${cpus%,*}"
cpu_b="${cpus#*,}"

source bench/lib.sh
need_perf latency
mkdir -p "$out"
echo "=== [latency] building release binaries" >&2
bin="$(release_bin)"
bench_workdir

start_rnicd "$bin" a --net udp:127.0.93.1 "${extra[@]}"
pid_a="$started"
start_rnicd "$bin" b --net udp:127.0.94.1 "${extra[@]}"
pid_b="$started"
# Every thread of each rnicd on its core: the engine, and the vfio-user thread that a
# kick (a trapped register write) wakes.
for t in /proc/"$pid_a"/task/*; do taskset -p -c "$cpu_a" "${t##*/}" >/dev/null; done
for t in /proc/"$pid_b"/task/*; do taskset -p -c "$cpu_b" "${t##*/}" >/dev/null; done

run() {
    "$bin/rnic-perf" write_lat -s 8 -n "$iters" --vfio-user "$work/a/pf.sock" \
        --remote-vfio-user "$work/b/pf.sock" "$@"
}

echo "=== [latency] write_lat, drivers spinning" >&2
run >"$out/spinning.txt"
echo "=== [latency] write_lat -e, drivers sleeping on interrupts" >&2
run -e >"$out/events.txt"

echo "=== [latency] write_lat -e under perf sched record" >&2
perf sched record -o "$out/sched.data" -- "$bin/rnic-perf" write_lat -e -s 8 -n "$((iters / 4))" \
    --no-baseline --vfio-user "$work/a/pf.sock" --remote-vfio-user "$work/b/pf.sock" \
    >"$out/events-sched.txt" 2>/dev/null
perf sched timehist -i "$out/sched.data" -w >"$out/timehist.txt" 2>/dev/null || true
perf sched timehist -i "$out/sched.data" -s >"$out/timehist-summary.txt" 2>/dev/null || true

echo "=== [latency] write_lat -e under perf trace (system calls of both rnicd)" >&2
perf trace -s -p "$pid_a,$pid_b" -o "$out/trace.txt" -- sleep 4 &
tracer=$!
sleep 0.5
"$bin/rnic-perf" write_lat -e -s 8 -n "$((iters / 4))" --no-baseline \
    --vfio-user "$work/a/pf.sock" --remote-vfio-user "$work/b/pf.sock" >"$out/events-trace.txt" 2>/dev/null
wait "$tracer" || true

echo "=== [latency] results in $out" >&2
for f in spinning events; do
    echo "--- $f"
    grep -A1 t_median "$out/$f.txt" | tail -1
done
