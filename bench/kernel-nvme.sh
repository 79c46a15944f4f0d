#!/usr/bin/env bash
# 4 KiB random reads over NVMe over Fabrics between two kernel-driver guests (boot.sh
# --kernel, rnic.ko), over nvme-rdma on rnic against nvme-tcp on virtio-net, in the same
# run: each guest has one VF of one rnicd (the internal switch joins them) and a
# virtio-net NIC (boot.sh --nic, a QEMU dgram link between the two). Guest B, the target,
# serves two null_blk namespaces through nvmet, one subsystem on an rdma port at its rnic
# address and one on a tcp port at its virtio-net address; guest A, the host, connects
# both (nvme connect -t rdma, -t tcp) and runs fio against each, alternating rnic and
# virtio-net, ROUNDS times: 4 KiB randread, libaio, direct, time-based, at iodepth 16
# (IOPS) and at iodepth 1 (latency). Prints each run's IOPS, mean and p99 latency, the
# medians and the ratios rnic / virtio-net. fio comes from qemu-scripts/layer.sh fio (with
# the NVMe/TCP modules). Not a test: it asserts nothing. As root, after
# qemu-scripts/setup.sh.
#
#   bash bench/kernel-nvme.sh [--time SECONDS] [--rounds N] [--iodepth N]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=bench/lib.sh
source bench/lib.sh
time=10
rounds=1
iodepth=16
bench_args "bash bench/kernel-nvme.sh [--time SECONDS] [--rounds N] [--iodepth N]" time rounds iodepth -- "$@"
vm_bench_start 2
layer="$(bash qemu-scripts/layer.sh fio)"

nqn=nqn.2024-01.io.rnic:bench
# B (VF1, rnic 10.82.0.3; virtio-net 10.83.0.1) serves; A (VF0; 10.83.0.2) runs fio and,
# when done, tells B so (a TCP connection to port 5999 over virtio-net).
target="me=1
$guest_nics
modprobe null_blk nr_devices=2 gb=1 || exit 1
modprobe nvmet-rdma && modprobe nvmet-tcp || exit 1
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config || exit 1
t=/sys/kernel/config/nvmet
# serve N TRTYPE IP: subsystem $nqn-TRTYPE, namespace /dev/nullbN-1, on port N at IP:4420.
serve() {
    s=\$t/subsystems/$nqn-\$2
    mkdir \$s \$s/namespaces/1 \$t/ports/\$1 || exit 1
    echo 1 > \$s/attr_allow_any_host
    echo -n /dev/nullb\$((\$1 - 1)) > \$s/namespaces/1/device_path
    echo 1 > \$s/namespaces/1/enable || exit 1
    echo \$2 > \$t/ports/\$1/addr_trtype
    echo ipv4 > \$t/ports/\$1/addr_adrfam
    echo \$3 > \$t/ports/\$1/addr_traddr
    echo 4420 > \$t/ports/\$1/addr_trsvcid
    i=0
    until ln -s \$s \$t/ports/\$1/subsystems/ 2>/dev/null; do
        i=\$((i + 1)); [ \$i -lt 60 ] || { echo \"=== nvmet \$2 port on \$3\"; exit 1; }
        sleep 1
    done
}
serve 1 rdma 10.82.0.3
serve 2 tcp 10.83.0.1
echo '=== nvmet listening'
busybox nc -l -p 5999 </dev/null >/dev/null"
host="me=2 peers='10.82.0.3 10.83.0.1'
$guest_nics
modprobe nvme-rdma && modprobe nvme-tcp || exit 1
$guest_ping
# connect TRTYPE IP: connects subsystem $nqn-TRTYPE; \$dev is then its namespace.
connect() {
    i=0
    until nvme connect -t \$1 -a \$2 -s 4420 -n $nqn-\$1 >/tmp/connect.txt 2>&1; do
        i=\$((i + 1)); [ \$i -lt 120 ] || { cat /tmp/connect.txt; echo \"=== nvme connect \$1\"; exit 1; }
        sleep 1
    done
    i=0
    dev=''
    while [ -z \"\$dev\" ]; do
        for s in /sys/class/nvme-subsystem/*; do
            [ \"\$(cat \$s/subsysnqn 2>/dev/null)\" = $nqn-\$1 ] || continue
            for b in \$s/nvme*n1; do [ -e \"\$b\" ] && dev=/dev/\${b##*/}; done
        done
        i=\$((i + 1)); [ \$i -lt 300 ] || { echo \"=== no namespace for \$1\"; exit 1; }
        sleep 0.1
    done
    echo \"=== \$1 namespace \$dev\"
}
connect rdma 10.82.0.3
rnic_dev=\$dev
connect tcp 10.83.0.1
virtio_dev=\$dev
for r in \$(seq $rounds); do
    for depth in $iodepth 1; do
        for what in rnic:\$rnic_dev virtio:\$virtio_dev; do
            fio --name=randread --filename=\${what#*:} --rw=randread --bs=4k --direct=1 \
                --ioengine=libaio --iodepth=\$depth --time_based --runtime=$time \
                --norandommap --randrepeat=0 --lat_percentiles=1 --output-format=json \
                --output=/tmp/fio.json >/tmp/fio.txt 2>&1 || { cat /tmp/fio.txt; exit 1; }
            printf '=== fio %s %s %s\\n' \${what%%:*} \$depth \"\$(tr -d '\n' </tmp/fio.json)\"
        done
    done
done
nvme disconnect-all >/dev/null
busybox nc 10.83.0.1 5999 </dev/null"

# B first (in the background); an A that fails, leaving B waiting for its word, stops it.
boot_pair $((400 + 6 * rounds * time)) b 1 "$target" a 0 "$host" --layer "$layer"

# The runs as lines: path iodepth IOPS mean-latency-us p99-latency-us.
tr -d '\r' <"$work/a.out" | python3 -c '
import json, sys
for line in sys.stdin:
    w = line.split(" ", 4)
    if len(w) < 5 or w[:2] != ["===", "fio"]:
        continue
    r = json.loads(w[4])["jobs"][0]["read"]
    lat = r["lat_ns"]
    print(w[2], w[3], "%.0f" % r["iops"], "%.1f" % (lat["mean"] / 1000),
          "%.1f" % (lat["percentile"]["99.000000"] / 1000))
' >"$work/runs.txt"
# figure PATH IODEPTH COLUMN: the median of that column over the runs.
figure() { awk -v p="$1" -v d="$2" -v c="$3" '$1 == p && $2 == d { print $c }' "$work/runs.txt" | median; }
echo "fio 4 KiB randread, libaio, direct, $time s per run, $rounds round(s), guest A (host) from guest B (target; TCG, 1 vCPU each):"
echo "runs (path iodepth IOPS mean-us p99-us):"
sed 's/^/  /' "$work/runs.txt"
echo
echo "| figure | nvme-rdma on rnic | nvme-tcp on virtio-net | rnic / virtio-net |"
echo "|---|---|---|---|"
for depth in "$iodepth" 1; do
    ratio_row "IOPS, iodepth $depth" "$(figure rnic "$depth" 3)" "$(figure virtio "$depth" 3)" IOPS
    ratio_row "mean latency, iodepth $depth" "$(figure rnic "$depth" 4)" "$(figure virtio "$depth" 4)" us
    ratio_row "p99 latency, iodepth $depth" "$(figure rnic "$depth" 5)" "$(figure virtio "$depth" 5)" us
done
