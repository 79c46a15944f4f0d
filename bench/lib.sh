# Shared by the bench scripts (sourced, not run). Defines:
#   release_bin                  builds the release binaries; prints their directory
#   bench_workdir                makes $work, and a trap that stops every rnicd started
#                                and removes $work on exit
#   start_rnicd BIN NAME ARGS... starts BIN/rnicd with its sockets in $work/NAME, waits
#                                for its PF socket; its pid in $started (and in pids)
#   cpu_ticks PID                utime + stime of a process, in clock ticks
#   need_perf TAG                installs perf (linux-perf) with apt if it is missing
#   ratio_row NAME A B UNIT      a markdown row: NAME, A and B with UNIT, and A / B

release_bin() {
    cargo build --release -p rnic-device -p rnic-tools --bins >&2
    echo "$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release"
}

bench_workdir() {
    work="$(mktemp -d /tmp/rnic-bench.XXXXXX)"
    pids=()
    trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}

start_rnicd() {
    local bin="$1" name="$2"; shift 2
    rm -rf "${work:?}/$name"
    RUST_LOG=warn "$bin/rnicd" --socket-dir "$work/$name" "$@" 2>"$work/$name.log" &
    started=$!
    pids+=("$started")
    for _ in $(seq 100); do
        [ -S "$work/$name/pf.sock" ] && return 0
        sleep 0.1
    done
    echo "rnicd $name did not start; its log:" >&2
    cat "$work/$name.log" >&2
    exit 1
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

need_perf() {
    command -v perf >/dev/null && return 0
    echo "=== [$1] installing perf (linux-perf)" >&2
    apt-get install -y --no-install-recommends linux-perf >&2
}

ratio_row() {
    awk -v name="$1" -v a="$2" -v b="$3" -v unit="$4" \
        'BEGIN { printf "| %s | %s %s | %s %s | %.2f |\n", name, a, unit, b, unit, (b > 0 ? a / b : 0) }'
}
