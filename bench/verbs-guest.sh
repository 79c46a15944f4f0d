#!/usr/bin/env bash
# What rnic's libibverbs costs inside a guest: Debian's unmodified ib_write_bw (64 KiB)
# and ib_write_lat (8 B) between two VFs of one verbs guest (boot.sh --verbs), beside
# rnic-perf's write_bw and write_lat on the same two VFs of the same guest, in the same
# boot; and ib_send_bw / ib_send_lat with -e (sleeping on completion events) beside
# rnic-perf's send_bw / send_lat -e. Not a test: it asserts nothing.
#
#   bash bench/verbs-guest.sh [--iommu] [--smp N] [--bw-iters N] [--iters N] [--out FILE]
#
# The guest runs under TCG, so the figures are the emulated CPU's; their ratio is the
# library's overhead. --iommu: the guest has a virtual IOMMU, and both reach the
# functions through VFIO, with interrupts, instead of sysfs and the page map (where -e
# waits are the library's polling thread). perftest runs as two processes (server on
# rnic_0, client on rnic_1, TCP on the guest's loopback), rnic-perf as one that drives
# both ends: spinning, perftest has one more busy thread, and each vCPU is a host thread
# beside rnicd's engine (--smp N: the guest's vCPUs, default 1). Needs
# qemu-scripts/setup.sh (run by boot.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bw_iters=2000
iters=1000
iommu=()
smp=1
out="$repo/target/bench/verbs-guest.md"
while [ $# -gt 0 ]; do
    case "$1" in
        --iommu) iommu=(--iommu) ;;
        --smp) smp="$2"; shift ;;
        --bw-iters) bw_iters="$2"; shift ;;
        --iters) iters="$2"; shift ;;
        --out) out="$2"; shift ;;
        *) echo "usage: bash bench/verbs-guest.sh [--iommu] [--smp N] [--bw-iters N] [--iters N] [--out FILE]" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$(dirname "$out")"

source bench/lib.sh
echo "=== [verbs-guest] building release binaries" >&2
bin="$(release_bin)"
# QEMU may run inside the trixie root: rnicd's sockets go where it reaches them.
# shellcheck source=qemu-scripts/env.sh
source qemu-scripts/env.sh
base="$RNIC_VM_RUNS/rnic-bench"
mkdir -p "$base"
work="$(mktemp -d "$base/verbs-guest.XXXXXX")"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
start_rnicd "$bin" rnic --vfs 2

# The guest's side: each measurement as a line `NAME FIGURES...` (perftest's and
# rnic-perf's first result row).
cat >"$work/bench.sh" <<EOF
bw_iters=$bw_iters
iters=$iters
EOF
cat >>"$work/bench.sh" <<'EOF'
first_row() { awk '/#bytes/ {getline; print; exit}'; }
# perftest TEST ARGS...: server on rnic_0, client on rnic_1 (retried until it listens).
perftest() {
    t=$1; shift
    $t -d rnic_0 -x 1 -F "$@" >/tmp/server.txt 2>&1 &
    s=$!
    for _ in $(seq 200); do
        $t -d rnic_1 -x 1 -F "$@" 127.0.0.1 >/tmp/client.txt 2>&1 && break
        grep -q "Couldn't connect" /tmp/client.txt || { cat /tmp/client.txt; break; }
        sleep 0.3
    done
    wait $s
    first_row </tmp/client.txt
}
# rnic-perf TEST ARGS... on the guest's two functions (by PCI address).
set -- $(for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0xf1c0 ] && echo ${d##*/}; done)
pci0=$1 pci1=$2
rnic_perf() { rnic-perf "$@" --pci $pci0 --remote-pci $pci1 --no-baseline 2>&1 | first_row; }
echo "PT_BW $(perftest ib_write_bw -s 65536 -n $bw_iters)"
echo "RP_BW $(rnic_perf write_bw -s 65536 -n $bw_iters)"
echo "PT_LAT $(perftest ib_write_lat -s 8 -n $iters)"
echo "RP_LAT $(rnic_perf write_lat -s 8 -n $iters)"
# Sleeping on completion events (-e), as perftest's WRITE tests cannot: with interrupts
# only (VFIO; without, rnic-perf -e refuses and the library polls).
[ -e /dev/vfio/vfio ] || exit 0
echo "PT_SBW $(perftest ib_send_bw -e -s 65536 -n $bw_iters)"
echo "RP_SBW $(rnic_perf send_bw -e -s 65536 -n $bw_iters)"
echo "PT_SLAT $(perftest ib_send_lat -e -s 8 -n $iters)"
echo "RP_SLAT $(rnic_perf send_lat -e -s 8 -n $iters)"
EOF

echo "=== [verbs-guest] booting the verbs guest${iommu:+ with an IOMMU}" >&2
console="$(RNIC_RNICD="$bin/rnicd" bash qemu-scripts/boot.sh --verbs ${iommu[@]+"${iommu[@]}"} \
    --socket-dir "$work/rnic" --vf 0 --vf 1 --smp "$smp" --timeout 1200 \
    --file "$bin/rnic-perf:/usr/local/bin/rnic-perf" --file "$work/bench.sh:/root/bench.sh" \
    -- sh /root/bench.sh)"
line() { echo "$console" | tr -d '\r' | sed -n "s/^$1 //p" | head -n1; }
pt_bw=$(line PT_BW); rp_bw=$(line RP_BW); pt_lat=$(line PT_LAT); rp_lat=$(line RP_LAT)
pt_sbw=$(line PT_SBW); rp_sbw=$(line RP_SBW); pt_slat=$(line PT_SLAT); rp_slat=$(line RP_SLAT)
events=("$pt_sbw" "$rp_sbw" "$pt_slat" "$rp_slat")
[ ${#iommu[@]} = 1 ] || events=()
for v in "$pt_bw" "$rp_bw" "$pt_lat" "$rp_lat" ${events[@]+"${events[@]}"}; do
    [ -n "$v" ] || { echo "bench/verbs-guest.sh: a measurement is missing; the guest said:" >&2; echo "$console" >&2; exit 1; }
done

{
    echo "# rnic's libibverbs against the driver, in a verbs guest"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "Two VFs of one release rnicd attached to one TCG guest (boot.sh --verbs${iommu:+ --iommu} --smp $smp)."
    echo "perftest (Debian trixie's, unmodified) on rnic's libibverbs.so.1; rnic-perf on the"
    echo "driver's own verbs, in the same guest."
    echo
    echo "| measurement | perftest on libibverbs | rnic-perf | perftest / rnic-perf |"
    echo "|---|---|---|---|"
    # perftest: #bytes #iterations BW peak BW average MsgRate (MiB/s);
    # rnic-perf: #bytes #iterations peak average MsgRate (MiB/s too).
    ratio_row "ib_write_bw / write_bw 64 KiB, average" \
        "$(echo "$pt_bw" | awk '{printf "%.0f", $4}')" "$(echo "$rp_bw" | awk '{printf "%.0f", $4}')" MiB/s
    # perftest: #bytes #iterations t_min t_max t_typical ...; rnic-perf: ... t_min t_median.
    ratio_row "ib_write_lat / write_lat 8 B, typical / median" \
        "$(echo "$pt_lat" | awk '{print $5}')" "$(echo "$rp_lat" | awk '{print $4}')" µs
    if [ ${#iommu[@]} = 1 ]; then
        ratio_row "ib_send_bw / send_bw 64 KiB, events, average" \
            "$(echo "$pt_sbw" | awk '{printf "%.0f", $4}')" "$(echo "$rp_sbw" | awk '{printf "%.0f", $4}')" MiB/s
        ratio_row "ib_send_lat / send_lat 8 B, events, typical / median" \
            "$(echo "$pt_slat" | awk '{print $5}')" "$(echo "$rp_slat" | awk '{print $4}')" µs
    fi
} >"$out"
echo "=== [verbs-guest] report: $out" >&2
cat "$out"
