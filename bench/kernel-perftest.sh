#!/usr/bin/env bash
# perftest's ib_write_bw and ib_write_lat in one kernel-driver guest (boot.sh --kernel),
# through Debian's libibverbs and rnic's provider plug-in (rnic.ko's rnic0 and rnic1)
# against the same Debian programs on rnic's own libibverbs.so.1 (ibverbs/, which drives
# a function itself through PCI sysfs, no kernel driver), in the same run and the same
# guest. The guest has four VFs of one rnicd: rnic.ko binds all four at boot; the script
# unbinds the last two from it, and the own library (LD_LIBRARY_PATH=/opt/rnic-ibverbs,
# stripped into the guest with boot.sh --file) drives those. Each run is a loopback
# inside the guest: server on one function, client on another, the programs' TCP
# rendezvous over 127.0.0.1, the RDMA traffic through rnicd's switch. Alternates provider
# and own library ROUNDS times; prints each run, the medians and the ratios provider /
# own. Not a test: it asserts nothing. As root, after qemu-scripts/setup.sh.
#
#   bash bench/kernel-perftest.sh [--rounds N] [--smp N]
#
# --smp (default 2): the guest's virtual CPUs; server and client poll their completion
# queues at once, so with one vCPU every latency would be the scheduler's time slice.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=bench/lib.sh
source bench/lib.sh
rounds=1
smp=2
bench_args "bash bench/kernel-perftest.sh [--rounds N] [--smp N]" rounds smp -- "$@"
vm_bench_start 4
cargo build --release -p rnic-ibverbs --lib >&2
strip --strip-debug -o "$work/libibverbs.so.1" "$(target_dir)/release/libibverbs.so"

bw_args="-F -s 65536 -n 2000"
lat_args="-F -s 8 -n 1000"
# The guest: VF0 and VF1 stay on rnic.ko (rnic0, rnic1); VF2 and VF3 (the last two rnic
# functions in PCI order) leave it for the own library, which names every rnic function
# rnic_0, rnic_1, ... in PCI order.
guest="
fns=\$(for d in /sys/bus/pci/devices/*; do [ \"\$(cat \$d/vendor)\" = 0xf1c0 ] && echo \${d##*/}; done | sort)
set -- \$fns
[ \$# = 4 ] || { echo \"=== expected 4 rnic functions, found: \$fns\"; exit 1; }
echo \$3 > /sys/bus/pci/drivers/rnic/unbind && echo \$4 > /sys/bus/pci/drivers/rnic/unbind || exit 1
rdma link show
LD_LIBRARY_PATH=/opt/rnic-ibverbs ibv_devices
port=18515
# perf WHAT LIB SDEV SGID CDEV CGID PROGRAM ARGS...: one run, server on SDEV, client on CDEV;
# prints the client's result row as '=== perf WHAT PROGRAM <row>'.
perf() {
    what=\$1 lib=\$2 sdev=\$3 sgid=\$4 cdev=\$5 cgid=\$6 prog=\$7
    shift 7
    port=\$((port + 1))
    LD_LIBRARY_PATH=\$lib \$prog -d \$sdev -x \$sgid -p \$port \"\$@\" >/tmp/server.txt 2>&1 &
    server=\$!
    i=0
    until ss -ltn | grep -q \":\$port \"; do
        i=\$((i + 1)); [ \$i -lt 300 ] || { cat /tmp/server.txt; echo \"=== \$what \$prog: no server\"; exit 1; }
        sleep 0.1
    done
    LD_LIBRARY_PATH=\$lib timeout 300 \$prog -d \$cdev -x \$cgid -p \$port \"\$@\" 127.0.0.1 >/tmp/client.txt 2>&1 ||
        { cat /tmp/server.txt /tmp/client.txt; echo \"=== \$what \$prog failed\"; exit 1; }
    wait \$server
    echo \"=== perf \$what \$prog \$(awk '\$1 ~ /^[0-9]+\$/ && \$2 ~ /^[0-9]+\$/ && NF >= 5' /tmp/client.txt | tail -n 1)\"
}
g0=\$(roce-gid-index rnic0) && g1=\$(roce-gid-index rnic1) || exit 1
for r in \$(seq $rounds); do
    perf provider '' rnic0 \$g0 rnic1 \$g1 ib_write_bw $bw_args
    perf own /opt/rnic-ibverbs rnic_2 1 rnic_3 1 ib_write_bw $bw_args
    perf provider '' rnic0 \$g0 rnic1 \$g1 ib_write_lat $lat_args
    perf own /opt/rnic-ibverbs rnic_2 1 rnic_3 1 ib_write_lat $lat_args
done"

status=0
boot_kernel guest $((400 + 120 * rounds)) --smp "$smp" --vf 0 --vf 1 --vf 2 --vf 3 \
    --file "$work/libibverbs.so.1:/opt/rnic-ibverbs/libibverbs.so.1" -- "$guest"
wait "$booted" || status=$?
if [ $status != 0 ]; then
    echo "the guest failed (status $status); console:" >&2
    cat "$work/guest.out" >&2
    exit 1
fi

tr -d '\r' <"$work/guest.out" | awk '$1 == "===" && $2 == "perf"' >"$work/runs.txt"
# figure WHAT PROGRAM COLUMN: the median of that column of the result rows (counted in
# the row, after '=== perf WHAT PROGRAM').
figure() { awk -v w="$1" -v p="$2" -v c="$3" '$3 == w && $4 == p { print $(c + 4) }' "$work/runs.txt" | median; }
echo "perftest in one kernel guest (TCG, $smp vCPUs), $rounds round(s); ib_write_bw $bw_args, ib_write_lat $lat_args:"
echo "runs (the client's result row):"
sed 's/^=== perf /  /' "$work/runs.txt"
echo
echo "| figure | provider (rnic.ko) | own libibverbs.so.1 | provider / own |"
echo "|---|---|---|---|"
ratio_row "ib_write_bw 64 KiB, BW average" "$(figure provider ib_write_bw 4)" "$(figure own ib_write_bw 4)" MB/s
ratio_row "ib_write_bw 64 KiB, message rate" "$(figure provider ib_write_bw 5)" "$(figure own ib_write_bw 5)" Mpps
ratio_row "ib_write_lat 8 B, t_typical" "$(figure provider ib_write_lat 5)" "$(figure own ib_write_lat 5)" us
ratio_row "ib_write_lat 8 B, t_avg" "$(figure provider ib_write_lat 6)" "$(figure own ib_write_lat 6)" us
ratio_row "ib_write_lat 8 B, 99th percentile" "$(figure provider ib_write_lat 8)" "$(figure own ib_write_lat 8)" us
