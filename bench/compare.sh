#!/usr/bin/env bash
# Compares two builds of rnicd and rnic-perf on the same machine, in the same minutes:
# every measurement runs once with each build in turn, N times (default 3), and the
# report gives the median of each build and their ratio (after / before). Besides the
# figures rnic-perf prints it reports rnicd's own CPU time per message and per KiB,
# read from /proc/PID/stat around each run, which a busy machine disturbs far less
# than wall-clock figures. Not a test: it asserts nothing.
#
#   bash bench/compare.sh BEFORE_DIR AFTER_DIR [--repeat N] [--out FILE]
#
# BEFORE_DIR and AFTER_DIR hold the binaries rnicd and rnic-perf (e.g. target/release
# of two checkouts). Needs jq.
set -euo pipefail

usage() { echo "usage: bash bench/compare.sh BEFORE_DIR AFTER_DIR [--repeat N] [--out FILE]" >&2; exit 2; }
[ $# -ge 2 ] || usage
before="$1" after="$2"; shift 2
repeat=3
out=/dev/stdout
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) repeat="$2"; shift ;;
        --out) out="$2"; shift ;;
        *) usage ;;
    esac
    shift
done
command -v jq >/dev/null || { echo "bench/compare.sh needs jq (apt-get install jq)" >&2; exit 1; }

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_workdir

# measure BIN KIND ARGS...: one rnic-perf run on fresh rnicd processes; prints
# "figure cpu_us_per_message" (figure: MiB/s for bandwidth, median µs for latency,
# Mpps for message rate; "fail" if the run failed).
measure() {
    local bin="$1" kind="$2"; shift 2
    local a b pa pb
    if [ "$kind" = udp ]; then
        start_rnicd "$bin" a --net udp:127.0.81.1; pa=$started
        start_rnicd "$bin" b --net udp:127.0.82.1; pb=$started
        a="$work/a/pf.sock"; b="$work/b/pf.sock"
    else
        start_rnicd "$bin" one --vfs 1; pa=$started; pb=$started
        a="$work/one/pf.sock"; b="$work/one/vf0.sock"
    fi
    local t0 t1 json
    t0=$(( $(cpu_ticks "$pa") + $( [ "$pa" = "$pb" ] && echo 0 || cpu_ticks "$pb") ))
    if json="$("$bin/rnic-perf" "$@" --json --baseline-time 0.05 --vfio-user "$a" \
        --remote-vfio-user "$b" 2>>"$work/perf.log")"; then
        t1=$(( $(cpu_ticks "$pa") + $( [ "$pa" = "$pb" ] && echo 0 || cpu_ticks "$pb") ))
        echo "$json" | jq -r --arg t "$((t1 - t0))" --arg hz "$(getconf CLK_TCK)" '
            .results[0] as $r
            | (if $r.bandwidth then ($r.bandwidth.avg_mib_s) else $r.latency.median_us end) as $fig
            | ($r.bandwidth.msg_rate_mpps // null) as $rate
            | (($t | tonumber) / ($hz | tonumber) * 1e6 / $r.iterations) as $cpu
            | "\($fig) \($rate // "-") \($cpu)"'
    else
        echo "fail - -"
    fi
    for p in $pa $pb; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'; }

# row TITLE UNIT KIND ARGS...: the measurement with both builds, $repeat times,
# interleaved; one table row of medians and ratios.
row() {
    local title="$1" unit="$2" kind="$3"; shift 3
    echo "=== [compare] $title" >&2
    : >"$work/before" ; : >"$work/after"
    for _ in $(seq "$repeat"); do
        measure "$before" "$kind" "$@" >>"$work/before"
        measure "$after" "$kind" "$@" >>"$work/after"
    done
    local fb fa cb ca
    fb=$({ grep -v '^fail' "$work/before" || true; } | awk '{print $1}' | median)
    fa=$({ grep -v '^fail' "$work/after" || true; } | awk '{print $1}' | median)
    cb=$({ grep -v '^fail' "$work/before" || true; } | awk '{print $3}' | median)
    ca=$({ grep -v '^fail' "$work/after" || true; } | awk '{print $3}' | median)
    local failed_b failed_a
    failed_b=$(grep -c '^fail' "$work/before" || true)
    failed_a=$(grep -c '^fail' "$work/after" || true)
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || a == 0) print "-"; else printf "%.2f", b / a }'; }
    fmt() { awk -v x="$1" 'BEGIN { if (x == "-") print "-"; else printf "%.3g", x }'; }
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$title" "$unit" \
        "$(fmt "$fb")$( [ "$failed_b" -gt 0 ] && echo " ($failed_b/$repeat failed)")" \
        "$(fmt "$fa")$( [ "$failed_a" -gt 0 ] && echo " ($failed_a/$repeat failed)")" \
        "$(ratio "$fb" "$fa")" "$(fmt "$cb")" "$(fmt "$ca")" "$(ratio "$cb" "$ca")" >>"$out"
}

{
    echo "| measurement | unit | before | after | after/before | rnicd CPU µs/msg before | after | after/before |"
    echo "|---|---|---|---|---|---|---|---|"
} >>"$out"
row "WRITE 64 KiB, one rnicd" "MiB/s" one write_bw -s 65536 -D 1
row "READ 64 KiB, one rnicd" "MiB/s" one read_bw -s 65536 -D 1
row "SEND 64 KiB, one rnicd" "MiB/s" one send_bw -s 65536 -D 1
row "WRITE 8 B latency, one rnicd" "µs" one write_lat -s 8 -n 5000
# With interrupts: each completion's MSI-X goes through the function's vfio-user thread.
row "SEND 8 B latency, interrupts (-e), one rnicd" "µs" one send_lat -e -s 8 -n 5000
row "SEND 64 KiB, interrupts (-e), one rnicd" "MiB/s" one send_bw -e -s 65536 -D 1
for q in 1 16 64 256; do
    row "WRITE 64 B, $q QPs, one rnicd" "MiB/s" one write_bw -s 64 -q "$q" -t 16 -D 1
done
row "WRITE 64 KiB, MTU 4096, two rnicd over UDP" "MiB/s" udp write_bw -s 65536 -m 4096 -D 1
row "WRITE 8 B latency, two rnicd over UDP" "µs" udp write_lat -s 8 -n 5000
