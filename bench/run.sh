#!/usr/bin/env bash
# Runs the benchmark matrix of rnic-perf against release builds of rnicd and writes a
# report with every figure beside its baseline (memcpy, loopback UDP) measured in the same
# run. Not a test: it asserts nothing and takes a few minutes.
#
#   bash bench/run.sh [--quick] [--repeat N] [--out FILE] [--only SECTIONS]
#
# --quick runs fewer iterations (a smoke run); --repeat N (default 3) runs every
# measurement N times and reports the median run; the report goes to FILE (default
# target/bench/report.md), the raw JSON beside it, and its figures (bench/plot.py: SVG
# charts of bandwidth and message rate by size, rate by QPs, scaling by pairs) beside
# that. --only runs some of the sections, a
# comma-separated list of: one (two functions of one rnicd), udp (two rnicd over UDP),
# scaling (N pairs at once), idle.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
repeat=3
quick=0
out="$repo/target/bench/report.md"
only="one,udp,scaling,idle"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --repeat) repeat="$2"; shift ;;
        --out) out="$2"; shift ;;
        --only) only="$2"; shift ;;
        *) echo "usage: bash bench/run.sh [--quick] [--repeat N] [--out FILE] [--only SECTIONS]" >&2; exit 2 ;;
    esac
    shift
done
# want SECTION: whether --only names it.
want() { [[ ",$only," == *",$1,"* ]]; }
mkdir -p "$(dirname "$out")"
raw="$(dirname "$out")/raw"
rm -rf "$raw"
mkdir -p "$raw"

source bench/lib.sh
echo "=== [bench] building release binaries" >&2
bin="$(release_bin)"
bench_workdir

# The message-rate runs share a total of messages among their QPs: enough that 256 QPs
# still run long past their start-up (a few messages per QP measure the ramp, not the rate).
if [ "$quick" = 1 ]; then bw_iters=500; lat_iters=500; rate_total=40000; else bw_iters=5000; lat_iters=5000; rate_total=160000; fi

# perf TITLE LOCAL REMOTE ARGS...: one rnic-perf run, its table into the report.
perf() {
    local title="$1" local_sock="$2" remote_sock="$3"; shift 3
    local tag
    tag="$(printf %s "$title" | tr -c 'A-Za-z0-9' '_')"
    echo "=== [bench] $title" >&2
    {
        echo "### $title"
        echo
        echo '```'
        "$bin/rnic-perf" "$@" --repeat "$repeat" --vfio-user "$local_sock" \
            --remote-vfio-user "$remote_sock" --save "$raw/$tag.json"
        echo '```'
        echo
    } >>"$out"
}

if want one; then start_rnicd "$bin" one --vfs 8; fi
if want udp; then
    start_rnicd "$bin" udp-a --net udp:127.0.71.1
    start_rnicd "$bin" udp-b --net udp:127.0.72.1
fi
one_a="$work/one/pf.sock"
one_b="$work/one/vf0.sock"
udp_a="$work/udp-a/pf.sock"
udp_b="$work/udp-b/pf.sock"

{
    echo "# rnic benchmark report"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "Every figure is the median of $repeat runs; baselines are measured in the same"
    echo "process run: single-thread memcpy (the limit for two functions of one rnicd) and"
    echo "a loopback UDP socket pair with datagrams of min(message, MTU) bytes (the limit for"
    echo "two rnicd). Ratios are figure / baseline."
    echo
} >"$out"

if want one; then
echo "## Two functions of one rnicd (PF and VF0)" >>"$out"
echo >>"$out"
perf "RDMA WRITE bandwidth, all sizes" "$one_a" "$one_b" write_bw --all -n "$((bw_iters / 5))"
perf "RDMA WRITE bandwidth, 64 KiB" "$one_a" "$one_b" write_bw -s 65536 -n "$bw_iters"
perf "RDMA READ bandwidth, 64 KiB" "$one_a" "$one_b" read_bw -s 65536 -n "$bw_iters"
perf "SEND bandwidth, 64 KiB" "$one_a" "$one_b" send_bw -s 65536 -n "$bw_iters"
perf "RDMA WRITE latency, 8 bytes" "$one_a" "$one_b" write_lat -s 8 -n "$lat_iters"
perf "SEND latency, 8 bytes" "$one_a" "$one_b" send_lat -s 8 -n "$lat_iters"
perf "FETCH_AND_ADD latency" "$one_a" "$one_b" atomic_lat -n "$lat_iters"
for q in 1 16 64 256; do
    perf "64-byte RDMA WRITE message rate, $q QPs" "$one_a" "$one_b" \
        write_bw -s 64 -q "$q" -t 16 -n "$((rate_total / q + 16))"
done

fi

if want udp; then
echo "## Two rnicd over loopback UDP" >>"$out"
echo >>"$out"
perf "RDMA WRITE bandwidth, 64 KiB, 4096-byte MTU" "$udp_a" "$udp_b" write_bw -s 65536 -m 4096 -n "$bw_iters"
perf "RDMA WRITE latency, 8 bytes" "$udp_a" "$udp_b" write_lat -s 8 -n "$lat_iters"
fi

# Scaling: N pairs of functions driven at once (rnic-perf --pairs, each pair its own
# thread sleeping on completion interrupts, -e), one rnicd with 2N VFs against N rnicd
# with one pair each; 64 KiB WRITE bandwidth and 64-byte WRITE message rate. N stops at
# 8 (16 VFs); pairs beyond the machine's cores share them, which the table shows.
if want scaling; then
if [ "$quick" = 1 ]; then scale_secs=1; else scale_secs=2; fi
echo "=== [bench] scaling: 1, 2, 4, 8 pairs, one rnicd against N rnicd" >&2
start_rnicd "$bin" scale --vfs 16
for k in $(seq 0 7); do start_rnicd "$bin" "sep$k" --vfs 2; done
scaling_json="$raw/scaling.jsonl"
: >"$scaling_json"
for n in 1 2 4 8; do
    for size in 65536 64; do
        seps=()
        for k in $(seq 0 $((n - 1))); do
            seps+=(--vfio-user "$work/sep$k/vf0.sock" --remote-vfio-user "$work/sep$k/vf1.sock")
        done
        for setup in one sep; do
            echo "=== [bench] scaling: $n pair(s), $size bytes, $setup" >&2
            if [ "$setup" = one ]; then
                where=(--pairs "$n" --socket-dir "$work/scale")
            else
                where=("${seps[@]}")
            fi
            "$bin/rnic-perf" write_bw -e -s "$size" -D "$scale_secs" --json \
                --baseline-time 0.3 "${where[@]}" >"$raw/scale-$n-$size-$setup.json"
            python3 - "$raw/scale-$n-$size-$setup.json" "$n" "$size" "$setup" >>"$scaling_json" <<'PY'
import json, sys
path, n, size, setup = sys.argv[1:]
r = json.load(open(path))
# One pair prints a plain report, several their sum.
agg = r["aggregate"][0] if "aggregate" in r else dict(r["results"][0]["bandwidth"], **r["results"][0])
base = agg.get("baseline") or {}
print(json.dumps({"pairs": int(n), "size": int(size), "setup": setup,
                  "mib_s": agg["avg_mib_s"], "mpps": agg["msg_rate_mpps"],
                  "memcpy_mib_s": base.get("memcpy_mib_s")}))
PY
        done
    done
done
python3 - "$scaling_json" "$scale_secs" >>"$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
get = lambda n, size, setup: next(r for r in rows if (r["pairs"], r["size"], r["setup"]) == (n, size, setup))
print("## Scaling: N pairs at once, one rnicd against N rnicd\n")
print(f"rnic-perf write_bw -e -D {sys.argv[2]} per pair, all pairs at once; one rnicd has 2N VFs (its")
print("default threads), each of the N rnicd one pair. `x 1 pair` is the one-rnicd sum over one")
print("pair in one rnicd; `vs N rnicd` the one-rnicd sum over the N rnicd's; memcpy is N threads")
print("copying at once, measured in the one-rnicd run.\n")
print("| pairs | 64 KiB, one rnicd | N rnicd | vs N rnicd | x 1 pair | vs N memcpy | 64 B, one rnicd | N rnicd | vs N rnicd | x 1 pair |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in (1, 2, 4, 8):
    big, bigs, small, smalls = (get(n, 65536, "one"), get(n, 65536, "sep"), get(n, 64, "one"), get(n, 64, "sep"))
    one_big, one_small = get(1, 65536, "one"), get(1, 64, "one")
    memcpy = big["memcpy_mib_s"]
    print(f"| {n} | {big['mib_s'] / 1024:.2f} GiB/s | {bigs['mib_s'] / 1024:.2f} GiB/s | {big['mib_s'] / bigs['mib_s']:.2f} "
          f"| {big['mib_s'] / one_big['mib_s']:.2f} | {big['mib_s'] / memcpy:.2f} "
          f"| {small['mpps']:.3f} Mpps | {smalls['mpps']:.3f} Mpps | {small['mpps'] / smalls['mpps']:.2f} "
          f"| {small['mpps'] / one_small['mpps']:.2f} |" if memcpy else "")
print()
PY
fi

# idle_figures PID SECONDS: one line of CPU share over SECONDS and resident memory.
idle_figures() {
    local pid="$1" secs="$2" t0 t1 hz
    hz="$(getconf CLK_TCK)"
    t0="$(cpu_ticks "$pid")"
    sleep "$secs"
    t1="$(cpu_ticks "$pid")"
    echo "- CPU over $secs s: $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$secs" \
        'BEGIN { printf "%.2f%% of a core (target: under 1%%)", (b - a) / hz / s * 100 }')"
    echo "- resident memory: $(awk '/VmRSS/ {printf "%.1f MiB (target: under 64 MiB)", $2 / 1024}' "/proc/$pid/status")"
}

if want idle; then
echo "=== [bench] idle rnicd with 8 VFs" >&2
start_rnicd "$bin" idle --vfs 8
idle_pid="$started"
sleep 1
{
    echo "## Idle rnicd with 8 VFs"
    echo
    echo "No clients attached:"
    echo
    idle_figures "$idle_pid" 10
    echo
} >>"$out"
# Eight host vfio-user clients that opened a VF each, set up verbs (event queue with its
# interrupt, CQ, QP with receives posted) and wait: rnic-pingpong listening for a peer
# that never comes.
for i in $(seq 0 7); do
    "$bin/rnic-pingpong" --listen 0 --vfio-user "$work/idle/vf$i.sock" \
        >"$work/idle-client$i.log" 2>&1 &
    pids+=($!)
done
for i in $(seq 0 7); do
    for _ in $(seq 100); do
        grep -q "listening on port" "$work/idle-client$i.log" && break
        sleep 0.1
    done
    grep -q "listening on port" "$work/idle-client$i.log" || {
        echo "idle client $i did not come up; its log:" >&2
        cat "$work/idle-client$i.log" >&2
        exit 1
    }
done
sleep 1
{
    echo "8 vfio-user clients attached (one per VF), verbs set up, idle:"
    echo
    idle_figures "$idle_pid" 10
    echo
} >>"$out"

fi

# The figures, beside the report, from the raw results.
figures="$(dirname "$out")"
if python3 bench/plot.py "$raw" "$figures" >&2; then
    {
        echo "## Figures"
        echo
        for svg in bandwidth-by-size message-rate-by-size rate-by-qps scaling-by-pairs; do
            [ -f "$figures/$svg.svg" ] && echo "![$svg]($svg.svg)" && echo
        done
    } >>"$out"
fi

echo "=== [bench] report: $out" >&2
cat "$out"
