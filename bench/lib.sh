# shellcheck shell=bash
# Shared by the bench scripts (sourced, not run). Defines:
#   release_bin                  builds the release binaries; prints their directory
#   bench_workdir [PARENT]       makes $work (in PARENT, default /tmp), and a trap that
#                                stops every rnicd started and removes $work on exit
#   bench_args USAGE NAME... -- ARGS...
#                                each `--NAME VALUE` of ARGS sets the variable NAME (a
#                                dash in NAME an underscore); anything else prints USAGE
#                                and exits 2
#   start_rnicd BIN NAME ARGS... starts BIN/rnicd with its sockets in $work/NAME, waits
#                                for its PF socket; its pid in $started (and in pids)
#   cpu_ticks PID                utime + stime of a process, in clock ticks
#   need_perf TAG                installs perf (linux-perf) with apt if it is missing
#   ratio_row NAME A B UNIT      a markdown row: NAME, A and B with UNIT, and A / B
#   median                       the median of the numbers on stdin, one a line
# and, for the benches that boot kernel-driver guests (as root, after qemu-scripts/setup.sh):
#   vm_bench_start VFS           builds the release rnicd ($rnicd), makes $work where QEMU
#                                reaches it (bench_workdir) and starts rnicd with VFS VFs,
#                                its sockets in $work/sock
#   boot_kernel NAME TIMEOUT ARGS... -- CMD
#                                starts a kernel guest on that rnicd (boot.sh --kernel
#                                --socket-dir $work/sock ARGS...) in the background, its
#                                boot.sh's pid in $booted (and in pids): console in
#                                $work/NAME.out
#   boot_pair TIMEOUT NAME VF CMD NAME VF CMD [ARGS...]
#                                two kernel guests, each with its VF and a virtio-net NIC,
#                                the two NICs joined by a QEMU dgram link, and ARGS; the
#                                second stops the first if it fails; exits showing both
#                                consoles if either failed
#   guest_ping                   guest shell text: waits for each of $peers to answer ping
#   guest_nics                   guest shell text (a variable): finds the guest's rnic and
#                                virtio-net interfaces ($rn, $vn) and gives $vn 10.83.0.$me/24

target_dir() { cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'; }

release_bin() {
    cargo build --release -p rnic-device -p rnic-tools --bins >&2
    echo "$(target_dir)/release"
}

bench_workdir() {
    work="$(mktemp -d "${1:-/tmp}/rnic-bench.XXXXXX")"
    pids=()
    trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}

start_rnicd() {
    local bin="$1" name="$2"; shift 2
    rm -rf "${work:?}/$name" "$work/$name.ready"
    # rnicd writes a line on --ready-fd once every socket listens; end of file first means
    # that it failed.
    mkfifo "$work/$name.ready"
    RUST_LOG=warn "$bin/rnicd" --socket-dir "$work/$name" --ready-fd 3 "$@" \
        2>"$work/$name.log" 3>"$work/$name.ready" &
    started=$!
    pids+=("$started")
    local ready="" fd
    exec {fd}<"$work/$name.ready"
    read -r -t 10 -u "$fd" ready || true
    exec {fd}<&-
    rm -f "$work/$name.ready"
    [ "$ready" = ready ] && return 0
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

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

bench_args() {
    local usage="$1" names=() opt
    shift
    while [ "$1" != -- ]; do names+=("$1"); shift; done
    shift
    while [ $# -gt 0 ]; do
        opt="${1#--}"
        if [ "$opt" = "$1" ] || [ $# -lt 2 ] || [[ " ${names[*]} " != *" $opt "* ]]; then
            echo "usage: $usage" >&2
            exit 2
        fi
        printf -v "${opt//-/_}" '%s' "$2"
        shift 2
    done
}

vm_bench_start() {
    local base
    # shellcheck source=qemu-scripts/env.sh
    source qemu-scripts/env.sh
    cargo build --release -p rnic-device --bin rnicd >&2
    rnicd="$(target_dir)/release/rnicd"
    # QEMU may run inside the trixie root: the sockets must be where it reaches them.
    base=$RNIC_VM_RUNS
    mkdir -p "$base"
    bench_workdir "$base"
    start_rnicd "$(dirname "$rnicd")" sock --vfs "$1"
}

boot_kernel() {
    local name="$1" timeout="$2"; shift 2
    RNIC_RNICD="$rnicd" bash qemu-scripts/boot.sh --kernel --socket-dir "$work/sock" \
        --timeout "$timeout" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    booted=$!
    pids+=("$booted")
}

boot_pair() {
    local timeout="$1" n1="$2" vf1="$3" cmd1="$4" n2="$5" vf2="$6" cmd2="$7" port first status=0
    shift 7
    # The virtio-net link: two UDP ports on 127.0.0.1.
    port=$((40000 + RANDOM % 20000))
    boot_kernel "$n1" "$timeout" "$@" --vf "$vf1" --nic "dgram:$port:$((port + 1))" -- "$cmd1"
    first=$booted
    boot_kernel "$n2" "$timeout" "$@" --vf "$vf2" --nic "dgram:$((port + 1)):$port" -- "$cmd2"
    wait "$booted" || { status=$?; kill "$first" 2>/dev/null || true; }
    wait "$first" || status=$?
    if [ $status != 0 ]; then
        echo "a guest failed (status $status); consoles:" >&2
        cat "$work/$n1.out" "$work/$n2.out" >&2
        exit 1
    fi
}

# Expanded in the guest, not here:
# shellcheck disable=SC2016,SC2034
guest_nics='
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

# shellcheck disable=SC2016,SC2034
guest_ping='
for ip in $peers; do
    i=0
    while ! ping -c 1 -W 1 $ip >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 120 ] || { echo "=== $ip never answered"; exit 1; }
    done
done
'
