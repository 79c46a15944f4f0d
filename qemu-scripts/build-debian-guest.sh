#!/usr/bin/env bash
# Builds the Debian trixie guests, each packed as an initramfs (no disk: the whole root lives
# in the initramfs). Both come from one trixie minbase root ($RXE_ROOT, default
# /var/cache/rnic/rxe-root) with rdma-core (ibverbs-utils, ibverbs-providers), perftest,
# UCX (ucx-utils: ucx_info, ucx_perftest; the ROCm, LLVM, Level Zero and OpenCL runtimes
# it drags in stay out of the images, 10 MB more per image instead of 80), iproute2, kmod,
# iputils-ping, ethtool, iperf3, nvme-cli and busybox:
#
#   rxe    the Soft-RoCE guest (boot.sh --rxe): Debian's own libibverbs and provider
#          (librxe) on the kernel's rdma_rxe, `rdma link add rxe0 type rxe netdev eth0` at
#          boot (kernel word rnic_rxe_netdev=IF for another interface, =none for none).
#          Helper: `rxe-gid-index [DEV]` prints the GID index of DEV's (default rxe0) RoCEv2
#          GID carrying ::ffff:<IPv4>. Image: $RXE_KIT/initramfs.zst.
#   verbs  the verbs guest (boot.sh --verbs): the same userland with rnic's libibverbs.so.1
#          (ibverbs/, built here: cargo build --release -p rnic-ibverbs) installed as the
#          system libibverbs in place of Debian's, so Debian's unmodified ibverbs-utils and
#          perftest drive the rnic functions attached to the guest (through PCI sysfs), and
#          UCX too (/init makes the /dev/infiniband/rnic_N stand-ins it looks for). No
#          rdma_rxe and no provider plug-ins. Image: $VERBS_IMAGES/initramfs-<hash>.img, a cached base
#          image ($VERBS_KIT/base.zst) followed by a small cpio holding the library (the
#          kernel unpacks concatenated archives), so a library change repacks only that.
#          Before packing, Debian's ibv_devices runs on the library in the root (chroot), which
#          proves that trixie's glibc satisfies its imports.
#   kernel the kernel-driver guest (boot.sh --kernel): the same userland with rnic.ko
#          (kernel/, built by kernel-module.sh with Debian's headers) loaded at boot, so
#          each attached function is a network interface; /init gives each one its
#          function's IPv4 address (the driver's `ipv4` attribute of the PCI device, the
#          last 4 bytes of the function's GID: VF0 is 10.82.0.2) with prefix /16, or what
#          the kernel word rnic_fnN_ip=A/P (boot.sh --ip) says for the Nth function in PCI
#          order (`none`: no address). ib_core, nvme_rdma, nvmet_rdma, rpcrdma (NFS over
#          RDMA) and null_blk are in the image, loaded when asked (the rxe image has all
#          but rpcrdma, and rdma_ucm); ib_uverbs and rdma_ucm are loaded at boot, and Debian's libibverbs finds rnic's provider
#          plug-in (provider/, librnic-rdmav34.so, /etc/libibverbs.d/rnic.driver), so
#          Debian's verbs and rdma_cm programs run on rnic0. `roce-gid-index rnic0` prints
#          the GID index of the IPv4 address. Image: $KERNEL_IMAGES/initramfs-<hash>.img, a cached
#          base image ($KERNEL_KIT/base.zst) followed by a small cpio with rnic.ko (depmod
#          runs at boot) and the provider, so a driver change repacks only that.
#
# Both /inits mount the usual filesystems, load virtio_net (and, for rxe, rdma_rxe, ib_uverbs
# and the CRC modules) with their dependencies, bring up each ethN named by a kernel word
# rnic_ethN_ip=A/P (see guest-lib.sh), set `ulimit -l unlimited`, run /rnic-run.sh (boot.sh
# appends it as a further cpio) under sh with stdin from /dev/null, print
# `RNIC-GUEST-EXIT=<status>` (125 when the set-up failed) and power off.
#
# It also leaves the virtio_net and vfio modules (decompressed, with their load order) in
# $GUEST_KIT/net-modules and vfio-modules for build-initramfs.sh, so the busybox rnic guest
# gets a NIC too, and VFIO behind a virtual IOMMU.
#
# Cached: the root is debootstrapped once; a base image is rebuilt only when missing or when
# its inputs changed (this script, guest-lib.sh, the kernel version); the verbs and kernel
# images are repacked only when what they append changed. Set-up (setup.sh) builds every
# base image; from then on the cache may be read-only: the appended parts are built and
# checked outside it (the root sees them at its /mnt). Needs root and the guest kit from
# setup.sh. Prints the image path on stdout.
# Usage: build-debian-guest.sh rxe|verbs|kernel [--base]   (--base: the base image only)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[build-debian-guest] $*" >&2; }
die() { log "error: $*"; exit 1; }

flavour=${1:-}
base_only=0
[ "${2:-}" != --base ] || base_only=1
[ $# = $((1 + base_only)) ] && { [ "$flavour" = rxe ] || [ "$flavour" = verbs ] || [ "$flavour" = kernel ]; } ||
    die "usage: build-debian-guest.sh rxe|verbs|kernel [--base] (the Soft-RoCE guest, the guest with rnic's libibverbs, or the guest with rnic.ko; --base: only its base image, which set-up builds)"

# What the guests run: rdma-core's verbs tools and providers (librxe; perftest also links
# libmlx5, libefa and libhns), perftest, UCX's tools, iproute2 (ip, rdma), kmod (modprobe),
# busybox (poweroff and small tools); ping, ethtool and iperf3 for the kernel-driver guest's
# network interfaces; nvme-cli for NVMe over Fabrics on RDMA; rdmacm-utils (rping,
# ucmatose) for rdma_cm.
packages=(ibverbs-utils ibverbs-providers perftest iproute2 kmod busybox ucx-utils iputils-ping ethtool iperf3 nvme-cli rdmacm-utils)
# The busybox rnic guest's NIC: virtio_net and what it depends on; and its vfio modules
# (boot.sh --iommu).
net_modules=(virtio_net)
vfio_modules=(vfio_pci vfio_iommu_type1)
libdir=usr/lib/x86_64-linux-gnu
if [ "$flavour" = rxe ]; then
    kit=$RXE_KIT
    base=$RXE_KIT/initramfs.zst
    # Modules loaded at boot, dependencies resolved by modprobe. crc32_pclmul needs a CPU
    # with PCLMULQDQ, so failing to load it is fine: crc32_generic then serves rxe's ICRC.
    modules=(virtio_net crc32_generic crc32_pclmul rdma_rxe ib_uverbs)
    optional_modules=" crc32_pclmul "
    shelf_modules=(rdma_ucm nvme_rdma nvmet_rdma null_blk)
    iommu_modules=()
    flavour_excludes=()
elif [ "$flavour" = kernel ]; then
    kit=$KERNEL_KIT
    base=$KERNEL_KIT/base.zst
    # virtio_net for a --nic beside the rnic functions; rnic.ko comes in its own cpio.
    modules=(virtio_net)
    optional_modules=" "
    # In the image for rnic.ko (ib_core) and its users, loaded by modprobe when asked.
    shelf_modules=(ib_core ib_uverbs rdma_ucm nvme_rdma nvmet_rdma rpcrdma null_blk)
    iommu_modules=()
    flavour_excludes=()
else
    kit=$VERBS_KIT
    base=$VERBS_KIT/base.zst
    modules=(virtio_net)
    optional_modules=" "
    shelf_modules=()
    # Loaded only with a virtual IOMMU (boot.sh --iommu, kernel word rnic_iommu=1): the
    # library then reaches the functions through VFIO, with interrupts.
    iommu_modules=(vfio_iommu_type1 vfio_pci)
    # Debian's libibverbs and its provider plug-ins stay out: rnic's library is provider
    # and libibverbs in one, added by the library cpio.
    flavour_excludes=(--exclude="./$libdir/libibverbs.so*" --exclude="./$libdir/libibverbs"
        --exclude=./etc/libibverbs.d)
fi
# UCX (ucx-utils) without the ROCm, LLVM, Level Zero and OpenCL runtimes libucx0 depends
# on: only UCX's rocm modules link them, and UCX skips a module that does not load.
ucx_excludes=()
for f in 'libLLVM*' 'libamd_comgr*' 'libz3.so*' 'libamdhip64*' 'libhsa-runtime64*' 'libhsakmt*' \
    'libze_loader*' 'libOpenCL*' 'ucx/libuct_rocm*' 'ucx/libucm_rocm*' 'ucx/libucx_perftest_rocm*'; do
    ucx_excludes+=(--exclude="./$libdir/$f")
done
kernel_pkg=$GUEST_KIT/kernel-pkg
busybox=$GUEST_KIT/busybox

if [ ! -d "$kernel_pkg/usr/lib/modules" ] || [ ! -x "$busybox" ] || [ ! -f "$GUEST_KIT/kernel-version" ]; then
    die "the guest kit ($GUEST_KIT: kernel package, busybox) is missing; run qemu-scripts/setup.sh first"
fi
kver=$(cat "$GUEST_KIT/kernel-version")
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it); re-run with sudo"; }
# Everything that goes into the base image: rebuild when any of it changed.
stamp=$(cat "${BASH_SOURCE[0]}" "$here/guest-lib.sh" "$GUEST_KIT/kernel-version" | sha256sum | cut -d' ' -f1)
stamp="$flavour-$stamp"
fresh() {
    [ -f "$base" ] && [ "$(cat "$kit/stamp" 2>/dev/null)" = "$stamp" ] &&
        [ "$(cat "$GUEST_KIT/net-modules/kernel-version" 2>/dev/null)" = "$kver" ] &&
        [ "$(cat "$GUEST_KIT/vfio-modules/kernel-version" 2>/dev/null)" = "$kver" ]
}

# Builds the base image of $flavour (the caller holds the lock).
build_base() {
    local started=$SECONDS
    # debootstrap makes the root; zstd packs the image; xz unpacks the busybox guest's modules.
    apt_install_host debootstrap zstd xz-utils

    # --- the root --------------------------------------------------------------------------
    local root_marker=$RXE_ROOT/.rnic-rxe-root
    if [ "$(cat "$root_marker" 2>/dev/null)" != "${packages[*]}" ]; then
        if [ ! -f "$RXE_ROOT/.rnic-debootstrap-done" ]; then
            local mirror
            mirror=$(host_mirror)
            log "debootstrapping a trixie root into $RXE_ROOT (mirror: ${mirror:-debootstrap default})"
            rm -rf --one-file-system "$RXE_ROOT"
            mkdir -p "$RXE_ROOT"
            debootstrap --variant=minbase trixie "$RXE_ROOT" ${mirror:+"$mirror"} \
                >"$kit/debootstrap.log" 2>&1 || die "debootstrap failed; see $kit/debootstrap.log"
            touch "$RXE_ROOT/.rnic-debootstrap-done"
        fi
        log "installing ${packages[*]} into $RXE_ROOT"
        chroot "$RXE_ROOT" apt-get update -qq
        chroot_install "$RXE_ROOT" "${packages[@]}" || die "could not install ${packages[*]}"
        chroot "$RXE_ROOT" apt-get clean
        echo "${packages[*]}" >"$root_marker"
    fi

    # --- modules ---------------------------------------------------------------------------
    # The kernel's whole module tree goes into the root (not into the image) so that the
    # root's own depmod and modprobe resolve dependencies exactly as the guest would.
    if [ ! -f "$RXE_ROOT/usr/lib/modules/$kver/modules.dep" ]; then
        log "resolving module dependencies for kernel $kver"
        rm -rf "$RXE_ROOT/usr/lib/modules/$kver"
        mkdir -p "$RXE_ROOT/usr/lib/modules"
        cp -a "$kernel_pkg/usr/lib/modules/$kver" "$RXE_ROOT/usr/lib/modules/"
        chroot "$RXE_ROOT" depmod "$kver"
    fi
    local guest_files f m rel
    mapfile -t guest_files < <(module_files "${modules[@]}" ${iommu_modules[@]+"${iommu_modules[@]}"} \
        ${shelf_modules[@]+"${shelf_modules[@]}"})
    [ ${#guest_files[@]} -gt 0 ] || die "modprobe found none of ${modules[*]} for kernel $kver"
    for m in "${modules[@]}" ${iommu_modules[@]+"${iommu_modules[@]}"} ${shelf_modules[@]+"${shelf_modules[@]}"}; do
        printf '%s\n' "${guest_files[@]}" | grep -q "/${m//_/[_-]}\.ko" || [[ $optional_modules == *" $m "* ]] ||
            die "module $m is not in kernel $kver's tree"
    done

    # The busybox guest's NIC and vfio modules.
    guest_kit_modules net-modules "${net_modules[@]}"
    guest_kit_modules vfio-modules "${vfio_modules[@]}"

    # --- the image -------------------------------------------------------------------------
    stage=$(mktemp -d "$kit/.stage.XXXXXX")
    tmp_out=$(mktemp "$kit/.initramfs.XXXXXX")
    log "staging the $flavour guest's image"
    # What a verbs guest never reads: docs, manuals, locales, iconv modules, perl, the
    # package managers and their data, and the full module tree (only the modules above go
    # in). Every megabyte here costs boot time under TCG, where the kernel unpacks the image.
    tar -C "$RXE_ROOT" --one-file-system -cf - \
        --exclude=./usr/lib/modules --exclude=./usr/share/doc --exclude=./usr/share/man \
        --exclude=./usr/share/info --exclude=./usr/share/locale --exclude=./usr/share/i18n \
        --exclude=./usr/share/common-licenses --exclude=./usr/share/zoneinfo \
        --exclude=./usr/lib/x86_64-linux-gnu/gconv --exclude=./usr/lib/x86_64-linux-gnu/perl-base \
        --exclude=./usr/share/perl5 --exclude='./usr/bin/perl*' \
        --exclude=./usr/lib/apt --exclude='./usr/bin/apt*' --exclude='./usr/lib/x86_64-linux-gnu/libapt-*' \
        --exclude=./var/lib/apt --exclude=./var/cache --exclude=./var/lib/dpkg --exclude=./var/log \
        ${flavour_excludes[@]+"${flavour_excludes[@]}"} \
        "${ucx_excludes[@]}" \
        --exclude='./.rnic-*' --exclude='./var/tmp/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' . |
        tar -C "$stage" -xf -
    local moddir=$stage/usr/lib/modules/$kver
    mkdir -p "$moddir"
    for f in "${guest_files[@]}"; do
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
    echo ${iommu_modules[@]+"${iommu_modules[@]}"} >"$stage/etc/rnic/iommu-modules"
    echo "$optional_modules" >"$stage/etc/rnic/optional-modules"
    echo "$flavour" >"$stage/etc/rnic/flavour"
    echo "$flavour-guest" >"$stage/etc/hostname"
    mknod -m 600 "$stage/dev/console" c 5 1
    mknod -m 666 "$stage/dev/null" c 1 3
    mkdir -p "$stage/var/log" "$stage/var/cache" "$stage/var/tmp"
    if [ "$flavour" != verbs ]; then
        write_rxe_gid_index "$stage/usr/local/bin/rxe-gid-index"
        ln -s rxe-gid-index "$stage/usr/local/bin/roce-gid-index"
    fi
    write_init "$stage/init"

    log "packing $base"
    (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
        zstd -q -T0 -12 >"$tmp_out"
    chmod 644 "$tmp_out"
    # Replaced atomically: a VM booting the previous image keeps its own copy (boot.sh
    # copies it into its run directory).
    mv -f "$tmp_out" "$base"
    echo "$stamp" >"$kit/stamp"
    log "wrote $base ($(du -h "$base" | cut -f1), ${#guest_files[@]} modules) in $((SECONDS - started)) s"
}

# Writes $GUEST_KIT/DIR for the busybox guest (build-initramfs.sh): the files MODULE...
# need, dependencies first, decompressed (busybox insmod then needs no xz), their
# load-order and the kernel-version they are for.
guest_kit_modules() { # DIR MODULE...
    local dir=$GUEST_KIT/$1 f name
    shift
    rm -rf "$dir.tmp"
    mkdir -p "$dir.tmp"
    for f in $(module_files "$@"); do
        name=$(basename "$f" .xz)
        xz -dc "$RXE_ROOT$f" >"$dir.tmp/$name"
        echo "$name" >>"$dir.tmp/load-order"
    done
    for f in "$@"; do
        grep -qx "${f//_/[_-]}\.ko" "$dir.tmp/load-order" || die "module $f is not in kernel $kver's tree"
    done
    echo "$kver" >"$dir.tmp/kernel-version"
    rm -rf "$dir"
    mv -T "$dir.tmp" "$dir"
}

# Prints the module files (paths inside the root) MODULE... need, dependencies first.
module_files() {
    chroot "$RXE_ROOT" modprobe -S "$kver" --show-depends -a "$@" | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++'
}

write_rxe_gid_index() { # FILE
    cat >"$1" <<'GID'
#!/bin/sh
# rxe-gid-index [DEV] (also roce-gid-index): prints the index of DEV's (default rxe0) RoCEv2 GID that carries
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
    chmod 755 "$1"
}

write_init() { # FILE
    cat >"$1" <<'INIT'
#!/bin/sh
# Debian guest init (rxe or verbs, /etc/rnic/flavour): see qemu-scripts/build-debian-guest.sh.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=${TERM:-linux}
. /etc/rnic/guest-lib.sh
rnic_mount_fs
flavour=$(cat /etc/rnic/flavour)
hostname "$flavour-guest"
ip link set lo up

# The kernel-driver guest: rnic.ko, then an address on each of its interfaces.
kernel_setup() {
    depmod -a || { echo "kernel guest: depmod failed"; return 1; }
    modprobe rnic || { echo "kernel guest: modprobe rnic failed"; return 1; }
    # User verbs (Debian's libibverbs on rnic's provider) and rdma_cm for user programs.
    modprobe ib_uverbs || { echo "kernel guest: modprobe ib_uverbs failed"; return 1; }
    modprobe rdma_ucm || { echo "kernel guest: modprobe rdma_ucm failed"; return 1; }
    i=0
    for dev in /sys/bus/pci/drivers/rnic/0000:*; do
        [ -e "$dev" ] || continue
        eval "addr=\${rnic_fn${i}_ip:-}"
        i=$((i + 1))
        found=0
        for n in "$dev"/net/*; do
            [ -e "$n" ] || continue
            found=1
            name=${n##*/}
            if [ -z "$addr" ]; then
                ip4=$(cat "$dev/ipv4" 2>/dev/null)
                addr=${ip4:+$ip4/16}
            fi
            ip link set "$name" up || { echo "kernel guest: cannot bring $name up"; return 1; }
            if [ -n "$addr" ] && [ "$addr" != none ]; then
                ip addr add "$addr" dev "$name" ||
                    { echo "kernel guest: cannot give $name the address $addr"; return 1; }
            fi
            echo "kernel guest: $name (rnic ${dev##*/}) ${addr:-no address} mac $(cat "$n/address")"
        done
        [ $found = 1 ] || echo "kernel guest: rnic ${dev##*/} has no network interface (see dmesg)"
    done
    [ $i -gt 0 ] || echo "kernel guest: no rnic function is bound to rnic.ko"
    return 0
}

setup() {
    for m in $(cat /etc/rnic/modules); do
        case " $(cat /etc/rnic/optional-modules) " in
        *" $m "*) modprobe -q "$m" 2>/dev/null || true ;;
        *) modprobe "$m" || { echo "$flavour guest: modprobe $m failed"; return 1; } ;;
        esac
    done
    rnic_net_up || return 1
    # boot.sh --iommu (kernel word rnic_iommu=1): a virtual IOMMU without interrupt
    # remapping (intremap=off), so vfio_iommu_type1 must be told to accept MSI-X without it.
    if [ "${rnic_iommu:-}" = 1 ]; then
        for m in $(cat /etc/rnic/iommu-modules); do
            args=""
            [ "$m" = vfio_iommu_type1 ] && args=allow_unsafe_interrupts=1
            modprobe "$m" $args || { echo "$flavour guest: modprobe $m failed"; return 1; }
        done
        [ -e /dev/vfio/vfio ] || { echo "$flavour guest: no /dev/vfio/vfio after loading the vfio modules"; return 1; }
    fi
    if [ "$flavour" = kernel ]; then
        kernel_setup
        return
    fi
    if [ "$flavour" = verbs ]; then
        functions=""
        for dev in /sys/bus/pci/devices/*; do
            [ "$(cat "$dev/vendor" 2>/dev/null)" = 0xf1c0 ] && functions="$functions ${dev##*/}"
        done
        echo "verbs guest: rnic's libibverbs; rnic functions:${functions:- none}"
        # UCX lists an IB device only where /dev/infiniband/<name> is a character device
        # it may read and write (it stats it, never opens it): a stand-in (the null
        # device) for each function, named as the library names them, in PCI order.
        mkdir -p /dev/infiniband
        i=0
        for f in $functions; do
            mknod -m 666 "/dev/infiniband/rnic_$i" c 1 3
            i=$((i + 1))
        done
        return 0
    fi
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
    # Verbs programs register (lock) their buffers.
    ulimit -l unlimited
    if [ -f /rnic-run.sh ]; then
        sh /rnic-run.sh </dev/null
        status=$?
    else
        echo "$flavour guest: no /rnic-run.sh, starting a shell; exit it to power off"
        setsid busybox cttyhack sh -l
        status=$?
    fi
else
    echo "$flavour guest: set-up failed, not running the command"
    status=125
fi
rnic_finish "$status"
INIT
    chmod 755 "$1"
}

# rnic's libibverbs.so.1, built (release: the guests run under TCG) and stripped into FILE.
# Prints nothing; dies naming the fix.
build_library() { # FILE
    command -v cargo >/dev/null || die "cargo is not on PATH; install Rust (rustup) first"
    local artifacts so
    artifacts=$(cd "$repo" && cargo build --quiet --release -p rnic-ibverbs --lib --message-format=json-render-diagnostics) ||
        die "cargo build of rnic-ibverbs failed (see above)"
    so=$(printf '%s\n' "$artifacts" | grep '"reason":"compiler-artifact"' | grep -o '"[^"]*/libibverbs\.so"' | tr -d '"' | tail -n1)
    [ -n "$so" ] && [ -f "$so" ] || die "cargo built no libibverbs.so for rnic-ibverbs (is its crate-type still cdylib?)"
    strip --strip-debug -o "$1" "$so" || die "strip $so failed (binutils: qemu-scripts/setup.sh installs it)"
}

# rnic's rdma-core provider plug-in (provider/), built and stripped into FILE.
build_provider() { # FILE
    command -v cargo >/dev/null || die "cargo is not on PATH; install Rust (rustup) first"
    local artifacts so
    artifacts=$(cd "$repo" && cargo build --quiet --release -p rnic-provider --lib --message-format=json-render-diagnostics) ||
        die "cargo build of rnic-provider failed (see above)"
    so=$(printf '%s\n' "$artifacts" | grep '"reason":"compiler-artifact"' | grep -o '"[^"]*/librnic_provider\.so"' | tr -d '"' | tail -n1)
    [ -n "$so" ] && [ -f "$so" ] || die "cargo built no librnic_provider.so for rnic-provider (is its crate-type still cdylib?)"
    strip --strip-debug -o "$1" "$so" || die "strip $so failed (binutils: qemu-scripts/setup.sh installs it)"
}

# Runs Debian's ibv_devices in the root on the library NAME in DIR (outside the root; it
# is seen at the root's /mnt) with every symbol bound at once: proves that trixie's glibc
# (and whatever else the library needs) satisfies its imports, and that the program finds
# rnic's library. A socket that does not exist is a device to list (listing opens nothing).
check_library() { # DIR NAME
    local out
    if ! out=$(chroot_with_mnt "$RXE_ROOT" "$1" env LD_BIND_NOW=1 LD_LIBRARY_PATH=/mnt \
        RNIC_VFIO_USER=/nonexistent/rnic-check.sock RNIC_LOG=off ibv_devices 2>&1) ||
        ! grep -q '^ *rnic_0 ' <<<"$out"; then
        die "rnic's libibverbs.so.1 does not work in Debian trixie's userspace: Debian's ibv_devices on it said:
$out
Its needs: $(objdump -p "$1/$2" | awk '$1 == "NEEDED" { printf "%s ", $2 }')$(objdump -T "$1/$2" |
            grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -n1) (trixie has glibc $(chroot "$RXE_ROOT" dpkg-query -W -f '${Version}' libc6))"
    fi
}

stage=""
tmp_out=""
depmod_base=""
check_dir=""
trap 'rm -rf --one-file-system ${stage:+"$stage"} ${tmp_out:+"$tmp_out"} ${depmod_base:+"$depmod_base"} ${check_dir:+"$check_dir"}' EXIT

# Two boots starting at once (a VM test's two guests) may both get here: one builds, the
# others wait for it and then find the image fresh. One lock for both flavours: they share
# the root.
if ! fresh; then
    need_root
    mkdir -p "$kit"
    exec 9>"$RNIC_CACHE/.debian-guest.lock"
    flock 9
    fresh || build_base
    exec 9>&-
fi
if [ "$flavour" = rxe ] || [ $base_only = 1 ]; then
    echo "$base"
    exit 0
fi

# The kernel and verbs guests' images are built from the checkout, outside the cache
# ($KERNEL_IMAGES, $VERBS_IMAGES under $RNIC_RUN), which may be read-only once set up.
# They are named after what they carry (rnic.ko and the provider, or rnic's libibverbs), so
# checkouts with different sources (worktrees) never boot each other's drivers. Reusing an
# image refreshes its time; images nobody asked for in two hours go.
image_path() { # DIR STAMP
    echo "$1/initramfs-$(echo "$2" | sha256sum | cut -c1-16).img"
}
image_fresh() { [ -f "$1" ] && touch "$1"; }
prune_images() { # DIR KIT
    find "$1" -maxdepth 1 -name 'initramfs-*.img' -mmin +120 -delete
    # Where images lived before, inside the cache (while it is writable).
    [ ! -w "$2" ] || rm -f "$2"/initramfs-*.img "$2/initramfs.img" "$2/image-stamp"
}

# --- the kernel-driver guest's module ---------------------------------------------------------
if [ "$flavour" = kernel ]; then
    need_root
    ko=$(bash "$here/kernel-module.sh") || die "building rnic.ko failed (see above)"
    mkdir -p "$KERNEL_IMAGES"
    check_dir=$(mktemp -d "$KERNEL_IMAGES/.module.XXXXXX")
    provider=$check_dir/$libdir/libibverbs/librnic-rdmav34.so
    mkdir -p "$(dirname "$provider")" "$check_dir/etc/libibverbs.d"
    build_provider "$provider"
    ko_stamp="$stamp $(sha256sum <"$ko" | cut -d' ' -f1) $(sha256sum <"$provider" | cut -d' ' -f1)"
    out=$(image_path "$KERNEL_IMAGES" "$ko_stamp")
    if image_fresh "$out"; then
        echo "$out"
        exit 0
    fi
    exec 9>"$KERNEL_IMAGES/.lock"
    flock 9
    prune_images "$KERNEL_IMAGES" "$KERNEL_KIT"
    moddir=usr/lib/modules/$kver/extra
    mkdir -p "$check_dir/$moddir"
    strip --strip-debug -o "$check_dir/$moddir/rnic.ko" "$ko" || die "strip $ko failed"
    # The provider plug-in beside Debian's (its directory and /etc/libibverbs.d are in the
    # base image), found by Debian's libibverbs through the driver file.
    echo "driver rnic" >"$check_dir/etc/libibverbs.d/rnic.driver"
    tmp_out=$(mktemp "$KERNEL_IMAGES/.initramfs.XXXXXX")
    {
        cat "$base"
        (cd "$check_dir" && printf '%s\n' "$moddir" "$moddir/rnic.ko" "etc/libibverbs.d/rnic.driver" \
            "$libdir/libibverbs/librnic-rdmav34.so" | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -n -1
    } >"$tmp_out"
    chmod 644 "$tmp_out"
    mv -f "$tmp_out" "$out"
    log "wrote $out (rnic.ko, $(du -h "$ko" | cut -f1); librnic-rdmav34.so, $(du -h "$provider" | cut -f1))"
    echo "$out"
    exit 0
fi

# --- the verbs guest's library --------------------------------------------------------------
need_root
mkdir -p "$VERBS_IMAGES"
check_dir=$(mktemp -d "$VERBS_IMAGES/.library.XXXXXX")
lib=$check_dir/libibverbs.so.1
build_library "$lib"
lib_stamp="$stamp $(sha256sum <"$lib" | cut -d' ' -f1)"
out=$(image_path "$VERBS_IMAGES" "$lib_stamp")
if image_fresh "$out"; then
    echo "$out"
    exit 0
fi
check_library "$check_dir" libibverbs.so.1
exec 9>"$VERBS_IMAGES/.lock"
flock 9
prune_images "$VERBS_IMAGES" "$VERBS_KIT"
# The library replaces Debian's under its own name (Debian's is not in the base image).
mkdir -p "$check_dir/cpio/$libdir"
cp "$lib" "$check_dir/cpio/$libdir/libibverbs.so.1"
tmp_out=$(mktemp "$VERBS_IMAGES/.initramfs.XXXXXX")
{
    cat "$base"
    # The file alone: its directories are in the base image.
    (cd "$check_dir/cpio" && echo "$libdir/libibverbs.so.1" | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -n -1
} >"$tmp_out"
chmod 644 "$tmp_out"
mv -f "$tmp_out" "$out"
log "wrote $out (rnic's libibverbs.so.1, $(du -h "$lib" | cut -f1))"
echo "$out"
