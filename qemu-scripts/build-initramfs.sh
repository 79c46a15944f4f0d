#!/usr/bin/env bash
# Builds the guest initramfs: $RNIC_RUN/initramfs-<checkout>.gz (default /var/tmp/rnic,
# outside the cache, which may be read-only: see env.sh), one per checkout of the
# repository (named after its path), so worktrees never boot each other's tools.
#   - busybox (static, from setup.sh) with a /bin symlink for each applet,
#   - every bin of the rnic-tools package, the first-driver example
#     (examples/first-driver, rnic-first-driver) and the labs' rnic-lab (labs/), built
#     static, in /usr/bin,
#   - the virtio_net modules (from build-debian-guest.sh, in $GUEST_KIT/net-modules) and
#     guest-lib.sh, so a guest booted with boot.sh --nic has its eth0 (eth1, ...),
#   - an /init that mounts proc, sysfs and devtmpfs, loads the virtio_net modules when a
#     virtio-net device is present and brings up each ethN given an address by a kernel
#     word rnic_ethN_ip=ADDR/PREFIX (boot.sh --ip), runs /rnic-run.sh under sh if present
#     (stdin from /dev/null; else an interactive shell), prints `RNIC-GUEST-EXIT=<status>`
#     on the console, syncs and powers off.
# boot.sh appends a second cpio holding /rnic-run.sh, so this image is shared by all runs.
# Idempotent: it rebuilds the tools (a no-op for cargo when nothing changed) and the cpio
# every time (about a second), so the image always holds the current binaries.
# Usage: build-initramfs.sh        (prints the image path on stdout)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[build-initramfs] $*" >&2; }
die() { log "error: $*"; exit 1; }

target=x86_64-unknown-linux-gnu
busybox="$GUEST_KIT/busybox"
# Rebuilt at every boot: outside the cache, which may be read-only (see env.sh).
out="$RNIC_RUN/initramfs-$(echo "$repo" | sha256sum | cut -c1-12).gz"
mkdir -p "$RNIC_RUN"

[ -x "$busybox" ] || die "$busybox is missing; run qemu-scripts/setup.sh first"
command -v cargo >/dev/null || die "cargo is not on PATH; install Rust (rustup) first"

# Build the guest tools static. The JSON lines on stdout name each built executable
# (also when it was already fresh), which gives the bin list without hard-coding it.
log "building the rnic-tools bins, the first-driver example and rnic-lab (static, release, $target)"
artifacts=$(cd "$repo" && RUSTFLAGS="-C target-feature=+crt-static" cargo build --release \
    --target "$target" -p rnic-tools -p rnic-first-driver -p rnic-labs --bins \
    --message-format=json-render-diagnostics) ||
    die "cargo build of rnic-tools, rnic-first-driver and rnic-labs failed (see above); if the target is missing: rustup target add $target"
mapfile -t bins < <(printf '%s\n' "$artifacts" |
    grep '"reason":"compiler-artifact"' | grep '"kind":\["bin"\]' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | sort -u)
[ ${#bins[@]} -gt 0 ] || die "cargo built no executable for rnic-tools (does it declare any [[bin]]?)"

# Other checkouts' images nobody booted for a day go, and the old shared one.
find "$RNIC_RUN" -maxdepth 1 -name 'initramfs-*.gz' -mtime +0 ! -path "$out" -delete

stage=$(mktemp -d "$RNIC_RUN/.initramfs-stage.XXXXXX")
tmp_out=$(mktemp "$RNIC_RUN/.initramfs.gz.XXXXXX")
trap 'rm -rf "$stage" "$tmp_out"' EXIT

mkdir -p "$stage"/{bin,usr/bin,dev,proc,sys,tmp,run,root,etc,var}
ln -s bin "$stage/sbin"
ln -s ../bin "$stage/usr/sbin"
cp "$busybox" "$stage/bin/busybox"
for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$stage/bin/$applet"
done
for b in "${bins[@]}"; do
    [ -x "$b" ] || die "cargo reported $b but it is not an executable file"
    cp "$b" "$stage/usr/bin/"
done
# The release profile keeps line tables for the host's profiles; the guest's copies need
# none (an image a quarter the size, so a faster boot under TCG).
if command -v strip >/dev/null; then
    strip --strip-debug "$stage"/usr/bin/*
else
    log "strip is missing (binutils): the guest tools keep their debug information"
fi
# The kernel opens /dev/console for init before /init runs; the kernel's built-in initramfs
# normally provides it, this is a fallback (creating it needs root; /init copes without it).
if [ "$(id -u)" = 0 ]; then
    mknod -m 600 "$stage/dev/console" c 5 1
fi
mkdir -p "$stage/etc/rnic" "$stage/lib/modules/rnic-net"
cp "$here/guest-lib.sh" "$stage/etc/rnic/guest-lib.sh"
if [ -f "$GUEST_KIT/net-modules/load-order" ]; then
    cp "$GUEST_KIT"/net-modules/* "$stage/lib/modules/rnic-net/"
else
    log "warning: no virtio_net modules in $GUEST_KIT/net-modules (run qemu-scripts/setup.sh): guests get no NIC"
fi
# The vfio modules (boot.sh --iommu: the driver then reaches the functions through VFIO),
# decompressed with their load order by set-up (build-debian-guest.sh), so busybox insmod
# needs no xz.
vfio_dir=$GUEST_KIT/vfio-modules
[ "$(cat "$vfio_dir/kernel-version" 2>/dev/null)" = "$(cat "$GUEST_KIT/kernel-version")" ] ||
    die "no vfio modules for the guest kernel in $vfio_dir: run qemu-scripts/setup.sh"
mkdir -p "$stage/lib/modules/rnic-vfio"
cp "$vfio_dir"/*.ko "$vfio_dir/load-order" "$stage/lib/modules/rnic-vfio/"
echo 'root:x:0:0:root:/root:/bin/sh' >"$stage/etc/passwd"
echo 'root:x:0:' >"$stage/etc/group"

cat >"$stage/init" <<'INIT'
#!/bin/sh
# rnic guest init: see qemu-scripts/build-initramfs.sh.
export PATH=/usr/bin:/bin HOME=/root TERM=${TERM:-linux}
. /etc/rnic/guest-lib.sh
rnic_mount_fs
hostname rnic-guest
ip link set lo up 2>/dev/null
# A NIC (boot.sh --nic) is a virtio-net device: 1af4:1000 (transitional) or 1af4:1041.
net_ok=1
for dev in /sys/bus/pci/devices/*; do
    case "$(cat $dev/vendor 2>/dev/null):$(cat $dev/device 2>/dev/null)" in
    0x1af4:0x1000 | 0x1af4:0x1041) has_nic=1 ;;
    esac
done
if [ -n "${has_nic:-}" ]; then
    for m in $(cat /lib/modules/rnic-net/load-order 2>/dev/null); do
        insmod /lib/modules/rnic-net/$m || { echo "rnic guest: insmod $m failed"; net_ok=0; }
    done
fi
[ $net_ok = 1 ] && rnic_net_up || net_ok=0
# boot.sh --iommu (kernel word rnic_iommu=1): the guest has a virtual IOMMU, and the driver
# binds the functions to vfio-pci. The IOMMU has no interrupt remapping (intremap=off), so
# vfio_iommu_type1 must be told to accept MSI-X without it.
vfio_ok=1
if [ "${rnic_iommu:-}" = 1 ]; then
    for m in $(cat /lib/modules/rnic-vfio/load-order); do
        args=""
        [ "$m" = vfio_iommu_type1.ko ] && args=allow_unsafe_interrupts=1
        insmod /lib/modules/rnic-vfio/$m $args || { echo "rnic guest: insmod $m failed"; vfio_ok=0; }
    done
    [ -e /dev/vfio/vfio ] || { echo "rnic guest: no /dev/vfio/vfio after loading the vfio modules"; vfio_ok=0; }
fi
cd /root
if [ $net_ok = 0 ]; then
    echo "rnic guest: network set-up failed, not running the command"
    status=125
elif [ $vfio_ok = 0 ]; then
    echo "rnic guest: vfio set-up failed, not running the command"
    status=125
elif [ -f /rnic-run.sh ]; then
    sh /rnic-run.sh </dev/null
    status=$?
else
    echo "rnic guest: no /rnic-run.sh, starting a shell; exit it to power off"
    setsid cttyhack sh -l
    status=$?
fi
rnic_finish "$status"
INIT
chmod 755 "$stage/init"

(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
    gzip -n -6 >"$tmp_out"
# Replaced atomically: a VM booting the previous image keeps its own copy (boot.sh links it).
chmod 644 "$tmp_out"
mv -f "$tmp_out" "$out"
log "wrote $out ($(du -h "$out" | cut -f1); tools in /usr/bin: $(basename -a "${bins[@]}" | xargs))"
echo "$out"
