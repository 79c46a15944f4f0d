# shellcheck shell=sh
# Copied into both guest images (the busybox rnic kit and the rdma_rxe guest) as
# /etc/rnic/guest-lib.sh and sourced by their /init: POSIX sh, for busybox sh and dash.

# Mounts what tools expect (proc, sysfs, devtmpfs, devpts, tmpfs on /dev/shm, /tmp, /run)
# and makes sure the console is the shell's standard I/O.
rnic_mount_fs() {
    mount -t proc proc /proc
    mount -t sysfs sysfs /sys
    mount -t devtmpfs devtmpfs /dev
    mkdir -p /dev/pts /dev/shm
    mount -t devpts devpts /dev/pts
    mount -t tmpfs tmpfs /dev/shm
    mount -t tmpfs tmpfs /tmp
    mount -t tmpfs tmpfs /run
    [ -e /proc/self/fd/0 ] || exec </dev/console >/dev/console 2>&1
}

# Reports the guest command's exit status as boot.sh reads it, then powers off.
rnic_finish() {
    echo "RNIC-GUEST-EXIT=$1"
    sync
    poweroff -f || echo o >/proc/sysrq-trigger
}

# Kernel command-line words `rnic_eth<N>_ip=ADDR/PREFIX` (N = 0..3; boot.sh's --ip writes
# them) reach /init as environment variables. rnic_net_up brings each such ethN up with
# that address; interfaces without a word are left down. Returns non-zero, naming the
# interface, when one is missing or refuses its address.

rnic_net_up() {
    for n in 0 1 2 3; do
        eval "addr=\${rnic_eth${n}_ip:-}"
        [ -n "$addr" ] || continue
        # virtio-net probes asynchronously after its module loads: give it up to 5 s.
        tries=0
        while [ ! -e "/sys/class/net/eth$n" ] && [ $tries -lt 50 ]; do
            sleep 0.1
            tries=$((tries + 1))
        done
        if [ ! -e "/sys/class/net/eth$n" ]; then
            echo "guest-lib: rnic_eth${n}_ip=$addr given but the guest has no eth$n (one boot.sh --nic per interface)" >&2
            return 1
        fi
        if ! ip link set "eth$n" up || ! ip addr add "$addr" dev "eth$n"; then
            echo "guest-lib: cannot give eth$n the address $addr" >&2
            return 1
        fi
        echo "guest-lib: eth$n $addr mac $(cat "/sys/class/net/eth$n/address")"
    done
    return 0
}
