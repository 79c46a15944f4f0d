#!/usr/bin/env bash
# Profiles rnicd's engine while rnic-perf drives it: `perf record` (cpu-clock samples
# with call graphs) on a release rnicd for the length of one rnic-perf run, then the
# flat profile of the hottest functions. Installs perf with apt if it is missing.
#
#   bash bench/profile.sh [--udp] [--out DIR] [-- RNIC_PERF_ARGS...]
#
# Default: two functions of one rnicd, `write_bw -s 65536 -D 5`. --udp profiles two rnicd
# over loopback UDP (the sending one). perf.data and report.txt go to DIR (default
# target/bench/profile). PERF_CALLGRAPH overrides perf's call-graph option (default -g,
# frame pointers; `PERF_CALLGRAPH="--call-graph dwarf,16384"` also sees through libc,
# e.g. which copies are memmove's callers).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
udp=0
out="$repo/target/bench/profile"
perf_args=(write_bw -s 65536 -D 5)
while [ $# -gt 0 ]; do
    case "$1" in
        --udp) udp=1 ;;
        --out) out="$2"; shift ;;
        --) shift; perf_args=("$@"); break ;;
        *) echo "usage: bash bench/profile.sh [--udp] [--out DIR] [-- RNIC_PERF_ARGS...]" >&2; exit 2 ;;
    esac
    shift
done

source bench/lib.sh
need_perf profile
mkdir -p "$out"
echo "=== [profile] building release binaries" >&2
bin="$(release_bin)"
bench_workdir

if [ "$udp" = 1 ]; then
    start_rnicd "$bin" a --net udp:127.0.91.1
    start_rnicd "$bin" b --net udp:127.0.92.1
    local_sock="$work/a/pf.sock" remote_sock="$work/b/pf.sock"
else
    start_rnicd "$bin" one --vfs 1
    local_sock="$work/one/pf.sock" remote_sock="$work/one/vf0.sock"
fi
target="${pids[0]}"

echo "=== [profile] rnic-perf ${perf_args[*]}, perf on rnicd $target" >&2
perf record -e cpu-clock -F 2000 ${PERF_CALLGRAPH:--g} -p "$target" -o "$out/perf.data" 2>"$work/perf.log" &
recorder=$!
sleep 0.3
"$bin/rnic-perf" "${perf_args[@]}" --vfio-user "$local_sock" --remote-vfio-user "$remote_sock"
kill -INT "$recorder"
wait "$recorder" || true
perf report -i "$out/perf.data" --no-children --percent-limit 0.5 --stdio -g none \
    2>/dev/null | grep -v '^#' | grep -v '^$' >"$out/report.txt"
echo "=== [profile] hottest functions ($out/report.txt):" >&2
head -30 "$out/report.txt"
