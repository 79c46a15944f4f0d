#!/usr/bin/env bash
# Runs every fuzz target of rnicd for a bounded time and reports each one's coverage.
#
#   bash fuzz/run.sh [--seconds N] [TARGET...]
#
# Installs cargo-fuzz if it is missing, builds the targets (nightly, libFuzzer, ASan),
# then runs each for N seconds (default 60) from its seeds in fuzz/corpus/TARGET, one
# after the other, on a fresh working corpus (the seeds in the repository are only
# read). Fails if any target crashes or breaks an invariant; the input that did is in
# fuzz/artifacts/TARGET/ (see fuzz/README.md for what to do with it).
set -euo pipefail

seconds=60
targets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --seconds=*) seconds="${1#*=}"; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "run.sh: --seconds takes a whole number, not '$seconds'" >&2; exit 2; }

cd "$(dirname "$0")/.."
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "run.sh: cargo fuzz needs nightly Rust: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
echo "== building ${targets[*]}"
for t in "${targets[@]}"; do
    nice -n 10 cargo +nightly fuzz build "$t"
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
rows=()
for t in "${targets[@]}"; do
    echo "== $t: ${seconds} s"
    mkdir -p "$work/$t"
    log="$work/$t.log"
    status=ok
    leaks=1
    # ops, vfio and vfio_socket tear down worlds whose queues they broke without waiting for answers,
    # and the driver then keeps (leaks) the rings of the objects it could not destroy.
    [[ "$t" == ops || "$t" == vfio || "$t" == vfio_socket ]] && leaks=0
    # One process, niced: the machine is shared. Inputs that hang count as crashes.
    if ! ASAN_OPTIONS="detect_leaks=$leaks" nice -n 10 cargo +nightly fuzz run "$t" "$work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -detect_leaks="$leaks" >"$log" 2>&1; then
        status=FAILED
        failed+=("$t")
        grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -20 >&2 || true
    fi
    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)"
    [[ -n "$done_line" ]] || done_line="$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -1 || true)"
    cov="$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$done_line")"
    ft="$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$done_line")"
    runs="$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)"
    rows+=("$(printf '%-8s %8s %10s %8s %8s  %s' "$t" "$seconds" "${runs:--}" "${cov:--}" "${ft:--}" "$status")")
done

echo
printf '%-8s %8s %10s %8s %8s  %s\n' target seconds execs cov ft result
printf '%s\n' "${rows[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run.sh: ${failed[*]} failed; the inputs are in fuzz/artifacts/ (fuzz/README.md: reproduce and keep as a regression test)" >&2
    exit 1
fi
