#!/usr/bin/env bash
# Boots a guest (KVM where it works, else TCG) with rnic functions attached over vfio-user and runs a command in it.
# See usage() below and qemu-scripts/README.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[boot] $*" >&2; }
# Failures of the VM machinery (not of the guest command) exit with 125; a timeout with 124.
die() {
    log "error: $*"
    exit 125
}

usage() {
    cat <<'EOF'
Usage: boot.sh [--rxe | --verbs | --kernel] [--pyverbs] [--layer FILE]... [--socket-dir DIR] [--pf] [--vf N]... [--iommu]
               [--rnicd-args 'ARGS']... [--nic SPEC [--ip A/P] [--mtu N]]... [--nic-dump FILE]
               [--file HOST[:GUEST]]... [--mem MB] [--smp N] [--tcg] [--timeout S] [--] CMD...

Boots a Linux guest under QEMU (KVM when /dev/kvm works here, else TCG) with the busybox initramfs from build-initramfs.sh,
attaches each requested rnic function as a vfio-user-pci device, runs CMD... in the guest
(its words joined by spaces, run by the guest's sh, like ssh), and exits with its status.
With no CMD and a terminal on stdin, gives an interactive guest shell (Ctrl-A x quits QEMU).

  --rxe             boot the Soft-RoCE guest instead (build-debian-guest.sh: Debian trixie
                    with rdma-core, perftest and rdma_rxe; rxe0 is added on eth0, so give it
                    a --nic); no rnic functions; default --mem 1024
  --verbs           boot the verbs guest instead: Debian trixie with ibverbs-utils and
                    perftest on rnic's libibverbs.so.1 (installed as the system libibverbs,
                    built from ibverbs/ by build-debian-guest.sh), so Debian's unmodified
                    ibv_devinfo, ibv_rc_pingpong, ib_write_bw ... drive the attached
                    functions (rnic_0, rnic_1, ... in PCI order; GID index 1); default
                    --mem 1024
  --kernel          boot the kernel-driver guest instead: Debian trixie with rnic.ko (kernel/,
                    built by kernel-module.sh) loaded at boot, so every attached function is a
                    network interface (eth0, eth1, ... in PCI order, when no --nic comes
                    first), up with its function's IPv4 address (the last 4 bytes of its GID:
                    VF0 is 10.82.0.2) and prefix /16; iproute2, ping, ethtool and iperf3;
                    default --mem 1024. --ip then addresses the functions instead (below)
  --pyverbs         with --rxe, --verbs or --kernel: add Python 3, Debian's python3-pyverbs and
                    rdma-core's own test suite (/opt/rdma-core/tests, the tests/ of the
                    release Debian ships) to the guest, one more archive built by
                    pyverbs-layer.sh (some seconds more boot time under TCG)
  --layer FILE      append FILE, an initramfs archive (a cpio, compressed or not), to the
                    guest's image as it is: a package layer of layer.sh's (fio, or NFS, for
                    the kernel guest); repeatable

  --socket-dir DIR  where rnicd's sockets are (DIR/pf.sock, DIR/vf<i>.sock); if no rnicd
                    serves DIR yet, one is started for this run and stopped at its end.
                    Default: a fresh directory inside this run's directory. When QEMU runs
                    inside the trixie root, DIR must be under $RNIC_VM_RUNS
                    (/var/tmp/rnic/rnic-vm).
  --rnicd-args 'ARGS'
                    more options for the rnicd this run starts (split on whitespace, after
                    --socket-dir and --vfs), e.g. --rnicd-args '--pcap /tmp/a.pcap
                    --net-faults loss=0.01,seed=1'; repeatable. Not with an rnicd that
                    already serves --socket-dir
  --pf              attach the physical function (DIR/pf.sock)
  --vf N            attach virtual function N (DIR/vfN.sock); repeatable
  --iommu           give the guest a virtual IOMMU (QEMU's intel-iommu, kernel intel_iommu=on):
                    each function gets an IOMMU group, /init loads the vfio modules
                    (vfio, vfio_iommu_type1, vfio-pci, ...) and the driver reaches the
                    functions through VFIO, with interrupts, instead of sysfs
  --nic dgram:LPORT:RPORT[:MAC]
                    a virtio-net NIC whose frames go, one per UDP datagram, from
                    127.0.0.1:LPORT to 127.0.0.1:RPORT (a QEMU dgram netdev; the peer uses
                    the ports swapped: another guest's --nic, or rnicd's --net eth:dgram).
                    Repeatable: the first is the guest's eth0, the second eth1. MAC default:
                    52:54:00:<NIC index>:<LPORT as two bytes>
  --ip ADDR/PREFIX  the address of the NIC given by the same-numbered --nic (first --ip for
                    eth0, ...): the guest's /init brings it up (kernel word rnic_ethN_ip).
                    With --kernel: the address of the Nth rnic function's interface in PCI
                    order (the order of --pf and --vf; kernel word rnic_fnN_ip), `none` for
                    none; functions without an --ip get their own address
  --mtu N           the MTU of the NIC given by the same-numbered --nic (first --mtu for
                    eth0, ...), set before CMD runs (default 1500). rxe's active MTU
                    follows it: 4200 gives 4096, 2200 gives 2048, 1500 gives 1024
  --nic-dump FILE   write a pcap of everything eth0 sends and receives to FILE (QEMU's
                    filter-dump), moved there when the guest is done
  --file HOST[:GUEST]
                    copy the host file HOST into the guest as GUEST (an absolute path;
                    default /root/<its name>, the command's working directory), e.g. a
                    verbs program of your own for --verbs; repeatable
  --mem MB          guest memory in MiB (default 512; 1024 with --rxe, --verbs or --kernel)
  --smp N           virtual CPUs (default 1; under TCG each is a host thread, so more than
                    the host's cores minus rnicd's only slows everything)
  --tcg             run the guest under TCG even where KVM works. Without it boot.sh uses
                    KVM when /dev/kvm opens read-write and a guest kernel really runs under
                    it (checked once per host boot), and says which: "[boot] accelerator:
                    kvm" or "tcg (why)"
  --timeout S       kill QEMU after S seconds (default 300; 0 = never)

Environment:
  RNIC_BOOT_EXTRA_QEMU_ARGS  extra QEMU arguments, split on whitespace
  RNIC_BOOT_APPEND           extra kernel command-line words (key=value reach /init's env)
  RNIC_RNICD                 the rnicd binary to start (default: the newer of
                             target/debug/rnicd and target/release/rnicd, in
                             $CARGO_TARGET_DIR if set; built if neither)
  RUST_LOG                   passed to a started rnicd (default: info)
  RNIC_KVM                   0: TCG always; 1: KVM without checking; auto (default)

Exit status: the guest command's; 124 if the timeout killed QEMU; 125 if QEMU or rnicd failed
or the guest never reported a status. The console log and rnicd's log are kept in the run
directory, printed at the end (newest run: <run base>/latest).
EOF
}

socket_dir=""
want_pf=0
vfs=()
rxe=0
verbs=0
kernel=0
pyverbs=0
layers=()
files=()
iommu=0
nics=()
ips=()
mtus=()
nic_dump=""
mem=""
smp=1
timeout_s=300
force_tcg=0
rnicd_args=()
cmd=()
while [ $# -gt 0 ]; do
    case $1 in
    --socket-dir) [ $# -ge 2 ] || die "--socket-dir needs a directory"; socket_dir=$2; shift 2 ;;
    --socket-dir=*) socket_dir=${1#*=}; shift ;;
    --pf) want_pf=1; shift ;;
    --tcg) force_tcg=1; shift ;;
    --rnicd-args) [ $# -ge 2 ] || die "--rnicd-args needs rnicd's options in one word"; read -ra more <<<"$2"; rnicd_args+=(${more[@]+"${more[@]}"}); shift 2 ;;
    --rnicd-args=*) read -ra more <<<"${1#*=}"; rnicd_args+=(${more[@]+"${more[@]}"}); shift ;;
    --vf) [ $# -ge 2 ] || die "--vf needs a VF index"; vfs+=("$2"); shift 2 ;;
    --vf=*) vfs+=("${1#*=}"); shift ;;
    --verbs) verbs=1; shift ;;
    --kernel) kernel=1; shift ;;
    --pyverbs) pyverbs=1; shift ;;
    --layer) [ $# -ge 2 ] || die "--layer needs an archive"; layers+=("$2"); shift 2 ;;
    --layer=*) layers+=("${1#*=}"); shift ;;
    --file) [ $# -ge 2 ] || die "--file needs HOST[:GUEST]"; files+=("$2"); shift 2 ;;
    --file=*) files+=("${1#*=}"); shift ;;
    --rxe) rxe=1; shift ;;
    --iommu) iommu=1; shift ;;
    --nic) [ $# -ge 2 ] || die "--nic needs dgram:LPORT:RPORT[:MAC]"; nics+=("$2"); shift 2 ;;
    --nic=*) nics+=("${1#*=}"); shift ;;
    --ip) [ $# -ge 2 ] || die "--ip needs ADDR/PREFIX"; ips+=("$2"); shift 2 ;;
    --ip=*) ips+=("${1#*=}"); shift ;;
    --mtu) [ $# -ge 2 ] || die "--mtu needs a size in bytes"; mtus+=("$2"); shift 2 ;;
    --mtu=*) mtus+=("${1#*=}"); shift ;;
    --nic-dump) [ $# -ge 2 ] || die "--nic-dump needs a file"; nic_dump=$2; shift 2 ;;
    --nic-dump=*) nic_dump=${1#*=}; shift ;;
    --mem) [ $# -ge 2 ] || die "--mem needs a size in MiB"; mem=$2; shift 2 ;;
    --smp) [ $# -ge 2 ] || die "--smp needs a number of CPUs"; smp=$2; shift 2 ;;
    --mem=*) mem=${1#*=}; shift ;;
    --smp=*) smp=${1#*=}; shift ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs seconds"; timeout_s=$2; shift 2 ;;
    --timeout=*) timeout_s=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; cmd=("$@"); break ;;
    -*) usage >&2; die "unknown option $1 (put guest commands after --)" ;;
    *) cmd=("$@"); break ;;
    esac
done
[ -n "$mem" ] || { if [ $rxe = 1 ] || [ $verbs = 1 ] || [ $kernel = 1 ]; then mem=1024; else mem=512; fi; }
[[ $smp =~ ^[1-9][0-9]?$ ]] || die "--smp $smp: give a number of virtual CPUs from 1 to 99, e.g. --smp 2"
[[ $mem =~ ^[1-9][0-9]*$ ]] || die "--mem $mem: give a whole number of MiB, e.g. --mem 1024"
[[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout $timeout_s: give whole seconds (0 for none)"
for v in ${vfs[@]+"${vfs[@]}"}; do
    [[ $v =~ ^(0|[1-9][0-9]*)$ ]] || die "--vf $v: give a VF index, e.g. --vf 0"
done
if [ ${#vfs[@]} -gt 0 ] && [ "$(printf '%s\n' "${vfs[@]}" | sort | uniq -d)" ]; then
    die "a VF is listed twice: --vf ${vfs[*]}"
fi
if [ $rxe = 1 ] && { [ $want_pf = 1 ] || [ ${#vfs[@]} -gt 0 ]; }; then
    die "--rxe guests run rdma_rxe, not the rnic driver: drop --pf/--vf (boot another guest for them)"
fi
[ $((rxe + verbs + kernel)) -le 1 ] || die "--rxe, --verbs and --kernel are different guests: give one (boot another guest for the other)"
[ $pyverbs = 0 ] || [ $rxe = 1 ] || [ $verbs = 1 ] || [ $kernel = 1 ] ||
    die "--pyverbs is for the Debian guests: add --rxe, --verbs or --kernel"
[ $rxe = 0 ] || [ $iommu = 0 ] || die "--iommu is for the rnic and verbs guests (their vfio modules); the --rxe guest has none"
# Each NIC as: local port, remote port, MAC.
nic_lports=()
nic_rports=()
nic_macs=()
for i in "${!nics[@]}"; do
    [[ ${nics[$i]} =~ ^dgram:([0-9]+):([0-9]+)(:([0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}))?$ ]] ||
        die "--nic ${nics[$i]}: give dgram:LPORT:RPORT[:MAC], e.g. --nic dgram:47001:47002"
    lport=${BASH_REMATCH[1]}
    rport=${BASH_REMATCH[2]}
    for p in "$lport" "$rport"; do
        if [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then die "--nic ${nics[$i]}: port $p is not in 1..65535"; fi
    done
    nic_lports+=("$lport")
    nic_rports+=("$rport")
    nic_macs+=("${BASH_REMATCH[4]:-$(printf '52:54:00:%02x:%02x:%02x' "$i" $((lport >> 8)) $((lport & 255)))}")
done
if [ $kernel = 1 ]; then
    nfuncs=$((want_pf + ${#vfs[@]}))
    [ ${#ips[@]} -le $nfuncs ] || die "${#ips[@]} --ip for $nfuncs rnic functions: with --kernel each --ip addresses the same-numbered --pf/--vf"
else
    [ ${#ips[@]} -le ${#nics[@]} ] || die "${#ips[@]} --ip for ${#nics[@]} --nic: each --ip addresses the same-numbered --nic"
fi
for a in ${ips[@]+"${ips[@]}"}; do
    [ $kernel = 1 ] && [ "$a" = none ] && continue
    [[ $a =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] || die "--ip $a: give ADDR/PREFIX, e.g. --ip 10.82.0.100/24"
done
[ ${#mtus[@]} -le ${#nics[@]} ] || die "${#mtus[@]} --mtu for ${#nics[@]} --nic: each --mtu sets the same-numbered --nic's"
for m in ${mtus[@]+"${mtus[@]}"}; do
    # 65000: a frame must fit one UDP datagram of the dgram netdev.
    [[ $m =~ ^[0-9]{2,5}$ ]] && [ "$m" -ge 68 ] && [ "$m" -le 65000 ] \
        || die "--mtu $m: give bytes from 68 to 65000, e.g. --mtu 4200 (rxe then runs a 4096-byte path MTU)"
done
[ -z "$nic_dump" ] || [ ${#nics[@]} -gt 0 ] || die "--nic-dump needs a --nic to dump"
for l in ${layers[@]+"${layers[@]}"}; do
    [ -f "$l" ] || die "--layer $l: not a file (an initramfs archive, e.g. the path qemu-scripts/layer.sh fio prints)"
done
file_srcs=()
file_dests=()
for f in ${files[@]+"${files[@]}"}; do
    src=${f%%:*}
    dest=/root/$(basename -- "$src")
    [[ $f != *:* ]] || dest=${f#*:}
    [ -f "$src" ] || die "--file $f: $src is not a file"
    [[ $dest == /* && $dest != */ && /$dest/ != */../* && $dest != *$'\n'* ]] ||
        die "--file $f: give the guest path as an absolute file path, e.g. --file $src:/usr/local/bin/$(basename -- "$src")"
    file_srcs+=("$src")
    file_dests+=("$dest")
done
interactive=0
if [ ${#cmd[@]} -eq 0 ]; then
    [ -t 0 ] || die "no guest command given: boot.sh [options] -- CMD... (or run it from a terminal for a shell)"
    [ ${#mtus[@]} -eq 0 ] || die "--mtu is set before a guest command; in a shell run: ip link set eth0 mtu N"
    interactive=1
fi
for a in ${rnicd_args[@]+"${rnicd_args[@]}"}; do
    case $a in
    --socket-dir | --socket-dir=* | --vfs | --vfs=* | --ready-fd | --ready-fd=*)
        die "--rnicd-args $a: boot.sh sets ${a%%=*} itself (use boot.sh's --socket-dir and --vf)" ;;
    esac
done
if [ ${#rnicd_args[@]} -gt 0 ] && [ $want_pf = 0 ] && [ ${#vfs[@]} -eq 0 ]; then
    die "--rnicd-args is for the rnicd boot.sh starts: attach a function (--pf or --vf N)"
fi
[ "$(id -u)" = 0 ] || die "must run as root (chroot and mounts); re-run with sudo"

# --- set-up (both idempotent) --------------------------------------------------------------
bash "$here/setup.sh"
if [ $rxe = 1 ]; then
    base_initrd=$(bash "$here/build-debian-guest.sh" rxe)
elif [ $verbs = 1 ]; then
    base_initrd=$(bash "$here/build-debian-guest.sh" verbs)
elif [ $kernel = 1 ]; then
    base_initrd=$(bash "$here/build-debian-guest.sh" kernel)
else
    base_initrd=$(bash "$here/build-initramfs.sh")
fi
pyverbs_layer=""
[ $pyverbs = 0 ] || pyverbs_layer=$(bash "$here/pyverbs-layer.sh") || die "building the pyverbs layer failed (see above)"
busybox=$GUEST_KIT/busybox

# Outside the cache, which may be read-only (see env.sh).
run_base=$RNIC_VM_RUNS
mkdir -p "$run_base"
run_dir=$run_base/$(date +%Y%m%d-%H%M%S)-$$
mkdir "$run_dir"
ln -sfn "$(basename "$run_dir")" "$run_base/latest"
log "run dir $run_dir"
# Keep the newest 50 run directories (they hold only logs once a run is over). Boots that
# start together prune together: a directory another one removed under find's feet is no
# error (under pipefail it would end this boot before QEMU starts).
find "$run_base" -mindepth 1 -maxdepth 1 -type d -name '2*' 2>/dev/null | LC_ALL=C sort |
    head -n -50 | xargs -r rm -rf --one-file-system -- || true
console_log=$run_dir/console.log

# --- clean-up --------------------------------------------------------------------------------
qemu_pid=""
rnicd_pid=""
# shellcheck disable=SC2317 # called from the trap
stop_pid() { # pid what: TERM, up to 5 s, then KILL
    local pid=$1 what=$2 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "$what (pid $pid) ignored SIGTERM for 5 s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
}
# shellcheck disable=SC2317 # called from the trap
cleanup() {
    set +e
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        # qemu_pid is `timeout`, which passes SIGTERM on to QEMU; find QEMU itself in case
        # it has to be killed.
        local child
        child=$(pgrep -P "$qemu_pid" | head -n1)
        log "stopping QEMU"
        stop_pid "$qemu_pid" QEMU
        [ -n "$child" ] && stop_pid "$child" QEMU
    fi
    if [ -n "$rnicd_pid" ]; then
        stop_pid "$rnicd_pid" rnicd
        wait "$rnicd_pid" 2>/dev/null
    fi
    if [ -n "$nic_dump" ] && [ -f "$run_dir/eth0.pcap" ]; then
        mv "$run_dir/eth0.pcap" "$nic_dump" || log "cannot move eth0's pcap to $nic_dump (it stays in $run_dir)"
    fi
    rm -f "$run_dir/vmlinuz" "$run_dir/initrd.gz"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- rnicd ---------------------------------------------------------------------------------
listening() { # Is a unix socket bound at this path accepting connections? (no helper tools)
    awk -v p="$1" '$4 == "00010000" && $8 == p { found = 1 } END { exit !found }' /proc/net/unix
}
socks=()
names=()
if [ ${#vfs[@]} -gt 0 ] || [ $want_pf = 1 ]; then
    if [ -z "$socket_dir" ]; then
        socket_dir=$run_dir
    fi
    socket_dir=$(realpath -m -- "$socket_dir")
    qemu_path "$socket_dir" >/dev/null || die "--socket-dir $socket_dir is not reachable by QEMU, which runs inside $TRIXIE_ROOT: use a directory under $RNIC_VM_RUNS, or omit --socket-dir"
    [[ $socket_dir != *[\"\\]* ]] || die "--socket-dir must not contain quotes or backslashes"
    mkdir -p "$socket_dir"
    if [ $want_pf = 1 ]; then
        socks+=("$socket_dir/pf.sock")
        names+=(pf)
    fi
    for v in ${vfs[@]+"${vfs[@]}"}; do
        socks+=("$socket_dir/vf$v.sock")
        names+=("vf$v")
    done
    for s in "${socks[@]}"; do
        [ ${#s} -lt 108 ] || die "socket path $s is longer than a unix socket allows (107 bytes); use a shorter --socket-dir"
    done

    if listening "$socket_dir/pf.sock"; then
        [ ${#rnicd_args[@]} -eq 0 ] ||
            die "--rnicd-args ${rnicd_args[*]}: an rnicd already serves $socket_dir and keeps its options; stop it, or use another --socket-dir"
        log "using the rnicd already serving $socket_dir"
        for s in "${socks[@]}"; do
            listening "$s" || die "the rnicd serving $socket_dir has no $(basename "$s") (started with too few --vfs?); stop it, or use another --socket-dir"
        done
    else
        rnicd=${RNIC_RNICD:-}
        target_dir=${CARGO_TARGET_DIR:-$repo/target}
        if [ -z "$rnicd" ]; then
            for c in "$target_dir/debug/rnicd" "$target_dir/release/rnicd"; do
                if [ -x "$c" ] && { [ -z "$rnicd" ] || [ "$c" -nt "$rnicd" ]; }; then
                    rnicd=$c
                fi
            done
        fi
        if [ -z "$rnicd" ]; then
            log "no rnicd binary yet: cargo build -p rnic-device --bin rnicd"
            (cd "$repo" && cargo build -p rnic-device --bin rnicd) ||
                die "building rnicd failed (see above); fix the build or point RNIC_RNICD at a binary"
            rnicd=$target_dir/debug/rnicd
        fi
        [ -x "$rnicd" ] || die "rnicd binary $rnicd is not executable; build it: cargo build -p rnic-device --bin rnicd"
        nvfs=0
        for v in ${vfs[@]+"${vfs[@]}"}; do
            [ "$v" -lt "$nvfs" ] || nvfs=$((v + 1))
        done
        # Sockets left behind by an rnicd that died would make its bind fail.
        for s in "$socket_dir"/pf.sock "$socket_dir"/vf*.sock; do
            if [ -S "$s" ] && ! listening "$s"; then rm -f "$s"; fi
        done
        log "starting $rnicd --socket-dir $socket_dir --vfs $nvfs${rnicd_args[*]:+ ${rnicd_args[*]}} (log: $run_dir/rnicd.log)"
        # rnicd writes a line on --ready-fd once every socket listens. A FIFO carries it:
        # opening its read end waits for rnicd's shell to open the write end, and end of
        # file without a line means that rnicd exited first.
        ready_fifo=$run_dir/rnicd.ready
        rm -f "$ready_fifo"
        mkfifo "$ready_fifo"
        RUST_LOG=${RUST_LOG:-info} "$rnicd" --socket-dir "$socket_dir" --vfs "$nvfs" --ready-fd 3 \
            ${rnicd_args[@]+"${rnicd_args[@]}"} </dev/null >"$run_dir/rnicd.log" 2>&1 3>"$ready_fifo" &
        rnicd_pid=$!
        exec {ready_fd}<"$ready_fifo"
        ready_line=""
        read -r -t 20 -u "$ready_fd" ready_line || true
        exec {ready_fd}<&-
        rm -f "$ready_fifo"
        if [ "$ready_line" != ready ]; then
            if kill -0 "$rnicd_pid" 2>/dev/null; then
                die "rnicd did not report ready within 20 s (log: $run_dir/rnicd.log)"
            fi
            rc=0
            wait "$rnicd_pid" || rc=$?
            rnicd_pid=""
            tail -n 20 "$run_dir/rnicd.log" | sed 's/^/[boot] rnicd: /' >&2
            die "rnicd exited with status $rc before serving ${socks[*]} (log: $run_dir/rnicd.log)"
        fi
    fi
fi

# --- guest images --------------------------------------------------------------------------
# QEMU may run inside the trixie root: everything it opens lives in the run directory.
ln -f "$GUEST_KIT/vmlinuz" "$run_dir/vmlinuz" 2>/dev/null || cp "$GUEST_KIT/vmlinuz" "$run_dir/vmlinuz"
if [ $interactive = 1 ]; then
    cp "$base_initrd" "$run_dir/initrd.gz"
else
    # A second cpio with /rnic-run.sh, appended: the kernel unpacks concatenated archives.
    mkdir "$run_dir/guest-files"
    # --mtu goes first, after /init has added rxe0 (rxe follows its netdev's MTU changes).
    for i in "${!mtus[@]}"; do
        printf 'ip link set eth%d mtu %d || { echo "boot: cannot set the MTU of eth%d to %d" >&2; exit 125; }\n' \
            "$i" "${mtus[$i]}" "$i" "${mtus[$i]}"
    done >"$run_dir/guest-files/rnic-run.sh"
    printf '%s\n' "${cmd[*]}" >>"$run_dir/guest-files/rnic-run.sh"
    cp "$run_dir/guest-files/rnic-run.sh" "$run_dir/rnic-run.sh"
    { cat "$base_initrd"
      (cd "$run_dir/guest-files" && echo rnic-run.sh | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -n
    } >"$run_dir/initrd.gz"
    rm -rf "$run_dir/guest-files"
fi

# --pyverbs: its archive as it is (the kernel unpacks concatenated archives, each
# compressed its own way).
[ -z "$pyverbs_layer" ] || cat "$pyverbs_layer" >>"$run_dir/initrd.gz"
# --layer: likewise.
for l in ${layers[@]+"${layers[@]}"}; do cat "$l" >>"$run_dir/initrd.gz"; done

# --file: one more cpio with the files at their guest paths (and their parent directories).
if [ ${#files[@]} -gt 0 ]; then
    mkdir "$run_dir/guest-add"
    for i in "${!files[@]}"; do
        mkdir -p "$run_dir/guest-add$(dirname -- "${file_dests[$i]}")"
        cp -- "${file_srcs[$i]}" "$run_dir/guest-add${file_dests[$i]}"
    done
    (cd "$run_dir/guest-add" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
        gzip -n >>"$run_dir/initrd.gz"
    rm -rf "$run_dir/guest-add"
fi

# --- QEMU ----------------------------------------------------------------------------------
tcg_flag=()
[ $force_tcg = 0 ] || tcg_flag=(--tcg)
accel_choice=$(choose_accel ${tcg_flag[@]+"${tcg_flag[@]}"} "$(qemu_path "$run_dir/vmlinuz")")
log "accelerator: $accel_choice"
accel=${accel_choice%% *}
# shellcheck disable=SC2054 # the commas are QEMU's
qemu_args=(
    -machine "q35,accel=$accel" -m "$mem" -smp "$smp"
    -object "memory-backend-memfd,id=mem,size=${mem}M,share=on" -numa node,memdev=mem
    -display none -vga none -no-reboot -nic none
    -chardev "stdio,id=con,mux=on,logfile=$(qemu_path "$console_log")"
    -serial chardev:con -monitor chardev:con
    -kernel "$(qemu_path "$run_dir/vmlinuz")" -initrd "$(qemu_path "$run_dir/initrd.gz")"
)
[ "$accel" = tcg ] || qemu_args+=(-cpu host)
append="console=ttyS0 quiet panic=-1"
for i in "${!nics[@]}"; do
    # shellcheck disable=SC2054 # the commas are QEMU's
    qemu_args+=(
        -netdev "dgram,id=nic$i,local.type=inet,local.host=127.0.0.1,local.port=${nic_lports[$i]},remote.type=inet,remote.host=127.0.0.1,remote.port=${nic_rports[$i]}"
        -device "virtio-net-pci,netdev=nic$i,mac=${nic_macs[$i]},romfile="
    )
    [ $kernel = 1 ] || [ -z "${ips[$i]:-}" ] || append+=" rnic_eth${i}_ip=${ips[$i]}"
done
if [ $kernel = 1 ]; then
    for i in "${!ips[@]}"; do
        append+=" rnic_fn${i}_ip=${ips[$i]}"
    done
fi
if [ -n "$nic_dump" ]; then
    qemu_args+=(-object "filter-dump,id=dump0,netdev=nic0,file=$(qemu_path "$run_dir/eth0.pcap")")
fi
if [ $iommu = 1 ]; then
    # The IOMMU must exist before the devices behind it: QEMU's vfio devices look up
    # their DMA address space when they are realized, so it comes first. caching-mode=on
    # makes the guest report every mapping it creates (not only removals), which is what
    # lets QEMU forward each one to the device as a DMA_MAP. intremap=off: no interrupt
    # remapping (MSI-X still works; vfio_iommu_type1 is loaded with allow_unsafe_interrupts).
    qemu_args+=(-device intel-iommu,caching-mode=on,intremap=off)
    # rnic_iommu=1 reaches /init, which then loads the vfio modules.
    append+=" intel_iommu=on iommu=pt rnic_iommu=1"
fi
qemu_args+=(-append "$append${RNIC_BOOT_APPEND:+ $RNIC_BOOT_APPEND}")
for i in "${!socks[@]}"; do
    qemu_args+=(-device "{\"driver\":\"vfio-user-pci\",\"id\":\"${names[$i]}\",\"socket\":{\"path\":\"$(qemu_path "${socks[$i]}")\",\"type\":\"unix\"}}")
done
read -ra extra <<<"${RNIC_BOOT_EXTRA_QEMU_ARGS:-}"
qemu_args+=(${extra[@]+"${extra[@]}"})
mapfile -t qemu_prefix < <(qemu_argv)

log "booting (${accel^^}; $([ $rxe = 1 ] && echo "rxe guest" || echo "functions: ${names[*]:-none}")$([ $iommu = 1 ] && echo "; virtual IOMMU"); NICs: ${nics[*]:-none}; ${mem} MiB; timeout ${timeout_s} s)"
start=$SECONDS
if [ $interactive = 1 ]; then
    # --foreground keeps QEMU in our process group so it may use the terminal; <&0 keeps
    # the terminal as its stdin (a background job would get /dev/null).
    timeout --foreground -k 10 "$timeout_s" "${qemu_prefix[@]}" "${qemu_args[@]}" \
        <&0 2> >(tee "$run_dir/qemu.stderr" >&2) &
else
    timeout -k 10 "$timeout_s" "${qemu_prefix[@]}" "${qemu_args[@]}" \
        </dev/null 2> >(tee "$run_dir/qemu.stderr" >&2) &
fi
qemu_pid=$!
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
elapsed=$((SECONDS - start))

status=$(tr -d '\r' <"$console_log" 2>/dev/null | sed -n 's/^RNIC-GUEST-EXIT=\([0-9][0-9]*\)$/\1/p' | tail -n1)
if [ -n "$status" ]; then
    if [ $qemu_rc != 0 ]; then
        log "warning: QEMU exited with status $qemu_rc after the guest finished"
    fi
    log "guest exited with status $status after ${elapsed} s (console log: $console_log)"
    exit "$status"
fi
if [ $qemu_rc = 124 ] || [ $qemu_rc = 137 ]; then
    log "error: timed out: the guest did not finish within ${timeout_s} s, QEMU was killed (--timeout S to wait longer; console log: $console_log)"
    exit 124
fi
if [ $qemu_rc != 0 ]; then
    die "QEMU exited with status $qemu_rc after ${elapsed} s before the guest reported a status (QEMU's messages: $run_dir/qemu.stderr; console log: $console_log)"
fi
die "QEMU exited after ${elapsed} s but the guest never printed RNIC-GUEST-EXIT= (kernel panic or broken /init? console log: $console_log)"
