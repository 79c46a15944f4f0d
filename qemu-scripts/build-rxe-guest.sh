#!/usr/bin/env bash
# Builds the Soft-RoCE guest: a Debian trixie userland with rdma-core (ibverbs-utils,
# ibverbs-providers, perftest, iproute2's `rdma`) and the guest kernel's rdma_rxe, packed as
# one zstd cpio initramfs: $RXE_KIT/initramfs.zst (default /var/cache/rnic/rxe-guest). No
# disk image: the whole root lives in the initramfs (about 30 MB).
#
# Its /init mounts the usual filesystems, loads virtio_net, rdma_rxe, ib_uverbs and their
# dependencies, brings up each ethN named by a kernel command-line word rnic_ethN_ip=A/P
# (see guest-lib.sh), adds `rdma link add rxe0 type rxe netdev eth0` (rnic_rxe_netdev=IF
# picks another interface, =none adds none), sets `ulimit -l unlimited`, runs /rnic-run.sh
# (boot.sh --rxe appends it as a second cpio) under sh with stdin from /dev/null, prints
# `RNIC-GUEST-EXIT=<status>` and powers off. Helper in the guest: `rxe-gid-index [DEV]`
# prints the GID index of DEV's (default rxe0) RoCEv2 GID carrying ::ffff:<IPv4>.
#
# It also leaves the virtio_net modules (decompressed, with their load order) in
# $GUEST_KIT/net-modules for build-initramfs.sh, so the busybox rnic guest gets a NIC too.
#
# Cached: the root is debootstrapped once; the image is rebuilt only when missing or when
# its inputs changed (this script, guest-lib.sh, the kernel version). Needs root and the
# guest kit from setup.sh (which calls this script). Prints the image path on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[build-rxe-guest] $*" >&2; }
die() { log "error: $*"; exit 1; }

# What the guest runs: rdma-core's verbs tools and provider (librxe), perftest, iproute2
# (ip, rdma), kmod (modprobe), busybox (poweroff and small tools).
packages=(ibverbs-utils ibverbs-providers perftest iproute2 kmod busybox)
# Modules loaded at boot, dependencies resolved by modprobe. crc32_pclmul needs a CPU with
# PCLMULQDQ, so failing to load it is fine: crc32_generic then serves rxe's ICRC.
modules=(virtio_net crc32_generic crc32_pclmul rdma_rxe ib_uverbs)
optional_modules=" crc32_pclmul "
# The busybox rnic guest's NIC: virtio_net and what it depends on.
net_modules=(virtio_net)

out=$RXE_KIT/initramfs.zst
kernel_pkg=$GUEST_KIT/kernel-pkg
busybox=$GUEST_KIT/busybox

if [ ! -d "$kernel_pkg/usr/lib/modules" ] || [ ! -x "$busybox" ] || [ ! -f "$GUEST_KIT/kernel-version" ]; then
    die "the guest kit ($GUEST_KIT: kernel package, busybox) is missing; run qemu-scripts/setup.sh first"
fi
kver=$(cat "$GUEST_KIT/kernel-version")

# Everything that goes into the image: rebuild when any of it changed.
stamp=$(cat "${BASH_SOURCE[0]}" "$here/guest-lib.sh" "$GUEST_KIT/kernel-version" | sha256sum | cut -d' ' -f1)
fresh() {
    [ -f "$out" ] && [ "$(cat "$RXE_KIT/stamp" 2>/dev/null)" = "$stamp" ] &&
        [ -f "$GUEST_KIT/net-modules/load-order" ]
}
if fresh; then
    echo "$out"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it); re-run with sudo"
# Two boots starting at once (a VM test's two guests) may both get here: one builds, the
# other waits for it and then finds the image fresh.
mkdir -p "$RXE_KIT"
exec 9>"$RXE_KIT/.lock"
flock 9
if fresh; then
    echo "$out"
    exit 0
fi
started=$SECONDS
# debootstrap makes the root; zstd packs the image; xz unpacks the busybox guest's modules.
apt_install_host debootstrap zstd xz-utils

# --- the root ------------------------------------------------------------------------------
root_marker=$RXE_ROOT/.rnic-rxe-root
if [ "$(cat "$root_marker" 2>/dev/null)" != "${packages[*]}" ]; then
    if [ ! -f "$RXE_ROOT/.rnic-debootstrap-done" ]; then
        mirror=$(host_mirror)
        log "debootstrapping a trixie root into $RXE_ROOT (mirror: ${mirror:-debootstrap default})"
        rm -rf --one-file-system "$RXE_ROOT"
        mkdir -p "$RXE_ROOT"
        debootstrap --variant=minbase trixie "$RXE_ROOT" ${mirror:+"$mirror"} \
            >"$RXE_KIT/debootstrap.log" 2>&1 || die "debootstrap failed; see $RXE_KIT/debootstrap.log"
        touch "$RXE_ROOT/.rnic-debootstrap-done"
    fi
    log "installing ${packages[*]} into $RXE_ROOT"
    chroot "$RXE_ROOT" apt-get update -qq
    chroot_install "$RXE_ROOT" "${packages[@]}" || die "could not install ${packages[*]}"
    chroot "$RXE_ROOT" apt-get clean
    echo "${packages[*]}" >"$root_marker"
fi

# --- modules -------------------------------------------------------------------------------
# The kernel's whole module tree goes into the root (not into the image) so that the
# root's own depmod and modprobe resolve dependencies exactly as the guest would.
if [ ! -f "$RXE_ROOT/usr/lib/modules/$kver/modules.dep" ]; then
    log "resolving module dependencies for kernel $kver"
    rm -rf "$RXE_ROOT/usr/lib/modules/$kver"
    mkdir -p "$RXE_ROOT/usr/lib/modules"
    cp -a "$kernel_pkg/usr/lib/modules/$kver" "$RXE_ROOT/usr/lib/modules/"
    chroot "$RXE_ROOT" depmod "$kver"
fi
# Prints the module files (paths inside the root) MODULE... need, dependencies first.
module_files() {
    chroot "$RXE_ROOT" modprobe -S "$kver" --show-depends -a "$@" | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++'
}
mapfile -t rxe_files < <(module_files "${modules[@]}")
[ ${#rxe_files[@]} -gt 0 ] || die "modprobe found none of ${modules[*]} for kernel $kver"
for m in "${modules[@]}"; do
    printf '%s\n' "${rxe_files[@]}" | grep -q "/${m}\.ko" || [[ $optional_modules == *" $m "* ]] ||
        die "module $m is not in kernel $kver's tree"
done

# The busybox guest's NIC modules, decompressed (busybox insmod then needs no xz).
mapfile -t net_files < <(module_files "${net_modules[@]}")
rm -rf "$GUEST_KIT/net-modules.tmp"
mkdir -p "$GUEST_KIT/net-modules.tmp"
for f in "${net_files[@]}"; do
    name=$(basename "$f" .xz)
    xz -dc "$RXE_ROOT$f" >"$GUEST_KIT/net-modules.tmp/$name"
    echo "$name" >>"$GUEST_KIT/net-modules.tmp/load-order"
done
rm -rf "$GUEST_KIT/net-modules"
mv "$GUEST_KIT/net-modules.tmp" "$GUEST_KIT/net-modules"

# --- the image -----------------------------------------------------------------------------
stage=$(mktemp -d "$RXE_KIT/.stage.XXXXXX")
tmp_out=$(mktemp "$RXE_KIT/.initramfs.XXXXXX")
depmod_base=""
trap 'rm -rf --one-file-system "$stage" "$tmp_out" ${depmod_base:+"$depmod_base"}' EXIT
log "staging the image"
# What a verbs guest never reads: docs, manuals, locales, iconv modules, perl, the package
# managers and their data, and the full module tree (only the modules above go in). Every
# megabyte here costs boot time under TCG, where the kernel unpacks the image.
tar -C "$RXE_ROOT" --one-file-system -cf - \
    --exclude=./usr/lib/modules --exclude=./usr/share/doc --exclude=./usr/share/man \
    --exclude=./usr/share/info --exclude=./usr/share/locale --exclude=./usr/share/i18n \
    --exclude=./usr/share/common-licenses --exclude=./usr/share/zoneinfo \
    --exclude=./usr/lib/x86_64-linux-gnu/gconv --exclude=./usr/lib/x86_64-linux-gnu/perl-base \
    --exclude=./usr/share/perl5 --exclude='./usr/bin/perl*' \
    --exclude=./usr/lib/apt --exclude='./usr/bin/apt*' --exclude='./usr/lib/x86_64-linux-gnu/libapt-*' \
    --exclude=./var/lib/apt --exclude=./var/cache --exclude=./var/lib/dpkg --exclude=./var/log \
    --exclude='./.rnic-*' --exclude='./var/tmp/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' . |
    tar -C "$stage" -xf -
moddir=$stage/usr/lib/modules/$kver
mkdir -p "$moddir"
for f in "${rxe_files[@]}"; do
    # modprobe names them under /lib/modules (a link to /usr/lib/modules in trixie).
    rel=${f#/usr}
    rel=${rel#/lib/modules/"$kver"/}
    mkdir -p "$moddir/$(dirname "$rel")"
    cp "$RXE_ROOT$f" "$moddir/$rel"
done
cp "$RXE_ROOT/usr/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$moddir/"
# The stage's own modules.dep (modprobe in the guest needs it): depmod with -b in the root.
depmod_base=$(mktemp -d "$RXE_ROOT/var/tmp/rnic-depmod.XXXXXX")
mkdir -p "$depmod_base/usr/lib/modules"
cp -a "$moddir" "$depmod_base/usr/lib/modules/"
ln -s usr/lib "$depmod_base/lib"
chroot "$RXE_ROOT" depmod -b "${depmod_base#"$RXE_ROOT"}" "$kver"
cp "$depmod_base/usr/lib/modules/$kver"/modules.* "$moddir/"
rm -rf "$depmod_base"
[ -s "$moddir/modules.dep" ] || die "depmod wrote no modules.dep for the image"

mkdir -p "$stage/etc/rnic" "$stage/usr/local/bin" "$stage/usr/local/sbin"
# No init system in a minbase root: busybox powers the guest off.
ln -s /usr/bin/busybox "$stage/usr/local/sbin/poweroff"
cp "$here/guest-lib.sh" "$stage/etc/rnic/guest-lib.sh"
printf '%s\n' "${modules[@]}" >"$stage/etc/rnic/modules"
echo "$optional_modules" >"$stage/etc/rnic/optional-modules"
echo rxe-guest >"$stage/etc/hostname"
mknod -m 600 "$stage/dev/console" c 5 1
mknod -m 666 "$stage/dev/null" c 1 3
mkdir -p "$stage/var/log" "$stage/var/cache" "$stage/var/tmp"

cat >"$stage/usr/local/bin/rxe-gid-index" <<'GID'
#!/bin/sh
# rxe-gid-index [DEV]: prints the index of DEV's (default rxe0) RoCEv2 GID that carries
# its netdev's IPv4 address as ::ffff:a.b.c.d (what ibv_rc_pingpong -g and perftest -x
# take). Waits up to 5 s for the GID to appear; fails naming what is missing.
dev=${1:-rxe0}
port=/sys/class/infiniband/$dev/ports/1
[ -d "$port" ] || { echo "rxe-gid-index: no RDMA device $dev (rdma link show)" >&2; exit 1; }
netdev=$(cat "$port/gid_attrs/ndevs/0" 2>/dev/null)
ipv4=$(ip -4 -o addr show dev "$netdev" 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
[ -n "$ipv4" ] || { echo "rxe-gid-index: $dev's netdev ${netdev:-?} has no IPv4 address" >&2; exit 1; }
want=$(echo "$ipv4" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
tries=0
while [ $tries -lt 50 ]; do
    for g in "$port"/gids/*; do
        n=${g##*/}
        if [ "$(cat "$g" 2>/dev/null)" = "$want" ] &&
            [ "$(cat "$port/gid_attrs/types/$n" 2>/dev/null)" = "RoCE v2" ]; then
            echo "$n"
            exit 0
        fi
    done
    sleep 0.1
    tries=$((tries + 1))
done
echo "rxe-gid-index: $dev has no RoCE v2 GID $want for $netdev's $ipv4" >&2
exit 1
GID
chmod 755 "$stage/usr/local/bin/rxe-gid-index"

cat >"$stage/init" <<'INIT'
#!/bin/sh
# rdma_rxe guest init: see qemu-scripts/build-rxe-guest.sh.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=${TERM:-linux}
. /etc/rnic/guest-lib.sh
rnic_mount_fs
hostname rxe-guest
ip link set lo up

setup() {
    for m in $(cat /etc/rnic/modules); do
        case " $(cat /etc/rnic/optional-modules) " in
        *" $m "*) modprobe -q "$m" 2>/dev/null || true ;;
        *) modprobe "$m" || { echo "rxe guest: modprobe $m failed"; return 1; } ;;
        esac
    done
    rnic_net_up || return 1
    netdev=${rnic_rxe_netdev:-eth0}
    if [ "$netdev" != none ]; then
        if [ ! -e "/sys/class/net/$netdev" ]; then
            echo "rxe guest: no $netdev for rxe0 (give the guest a NIC: boot.sh --nic; or rnic_rxe_netdev=none)"
            return 1
        fi
        ip link set "$netdev" up
        rdma link add rxe0 type rxe netdev "$netdev" || { echo "rxe guest: rdma link add rxe0 failed"; return 1; }
        echo "rxe guest: rxe0 on $netdev, RoCEv2 IPv4 GID index $(rxe-gid-index rxe0 2>&1)"
    fi
}

cd /root
if setup; then
    ulimit -l unlimited
    if [ -f /rnic-run.sh ]; then
        sh /rnic-run.sh </dev/null
        status=$?
    else
        echo "rxe guest: no /rnic-run.sh, starting a shell; exit it to power off"
        setsid busybox cttyhack sh -l
        status=$?
    fi
else
    echo "rxe guest: set-up failed, not running the command"
    status=125
fi
rnic_finish "$status"
INIT
chmod 755 "$stage/init"

log "packing $out"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
    zstd -q -T0 -12 >"$tmp_out"
chmod 644 "$tmp_out"
# Replaced atomically: a VM booting the previous image keeps its own copy (boot.sh links it).
mv -f "$tmp_out" "$out"
echo "$stamp" >"$RXE_KIT/stamp"
log "wrote $out ($(du -h "$out" | cut -f1), ${#rxe_files[@]} modules) in $((SECONDS - started)) s"
echo "$out"
