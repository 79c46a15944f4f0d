#!/usr/bin/env bash
# The main job: boots a VM with two rnic VFs attached and, inside it, runs the guest
# driver's tools: rnic-info on both functions, then rnic-pingpong between them (SEND,
# RDMA WRITE and RDMA READ), the connection parameters exchanged over the guest's
# loopback. Every byte moves as RoCEv2 frames through rnicd's internal switch. Then it
# boots the verbs guest (boot.sh --verbs) with two VFs, where Debian's unmodified
# ibv_devices and ibv_rc_pingpong run on rnic's libibverbs. Set-up is done by boot.sh
# (idempotent). Extra arguments go to both boot.sh runs (e.g. --timeout 600).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

read -r -d '' guest <<'GUEST' || true
set -e
ip link set lo up
rnic-info
set -- $(for d in /sys/bus/pci/devices/*; do
    [ "$(cat $d/vendor)" = 0xf1c0 ] && basename $d
done)
[ $# -ge 2 ] || { echo "demo: expected two rnic functions, found $#" >&2; exit 1; }
for op in send write read; do
    echo "=== rnic-pingpong --op $op between $1 and $2"
    rnic-pingpong --pci $2 --listen 18515 --op $op --size 8192 --iters 200 > /tmp/server.log 2>&1 &
    server=$!
    sleep 1
    rnic-pingpong --pci $1 --connect 127.0.0.1:18515 --op $op --size 8192 --iters 200
    wait $server || { cat /tmp/server.log; exit 1; }
done
echo "demo: all done"
GUEST

read -r -d '' verbs <<'GUEST' || true
set -e
echo "=== ibv_devices"
ibv_devices
echo "=== ibv_rc_pingpong between rnic_0 and rnic_1"
ibv_rc_pingpong -d rnic_0 -g 1 -n 200 > /tmp/server.log 2>&1 &
server=$!
# The client connects once: give the server time to listen, under TCG.
tries=0
until ibv_rc_pingpong -d rnic_1 -g 1 -n 200 127.0.0.1; do
    tries=$((tries + 1))
    [ $tries -lt 20 ] || exit 1
    sleep 1
done
wait $server || { cat /tmp/server.log; exit 1; }
cat /tmp/server.log
echo "demo: verbs done"
GUEST

bash "$here/boot.sh" --vf 0 --vf 1 "$@" -- "$guest"
exec bash "$here/boot.sh" --verbs --vf 0 --vf 1 "$@" -- "$verbs"
