#!/usr/bin/env bash
# Builds a package layer of the kernel-driver guest: one more initramfs archive, appended
# to its image with `boot.sh --layer "$(bash qemu-scripts/layer.sh NAME)"`. Two layers:
#
#   fio   Debian trixie's fio and its libraries (libaio, librbd, librados, libgfapi,
#         libnbd, ...: what the binary links), and nvme-tcp.ko, nvmet-tcp.ko (what they
#         depend on, nvme-fabrics and nvmet, is in the image for nvme-rdma already): what
#         bench/kernel-nvme.sh runs
#   nfs   Debian trixie's NFS server and client (nfs-kernel-server, nfs-common: rpc.nfsd,
#         rpc.mountd, exportfs, mount.nfs) and the nfsd and nfsv4 modules with every module
#         they need (rpcrdma, NFS over RDMA, is in the image already): NFS over rnic, as
#         tests/tests/vm_kernel.rs mounts it
#
# The modules go into the guest's module tree (/init runs depmod -a, so modprobe finds
# them). The packages are those apt would install with the layer's own, but python3*
# (only helper scripts use it), downloaded with apt in the guests' root ($RXE_ROOT) and
# unpacked, not installed; before packing, one of the layer's programs runs there with
# every symbol bound at once, which proves it finds its libraries. Kept apart from the
# base image, whose every megabyte costs each boot under TCG.
#
# Cached in $RNIC_CACHE/NAME-layer/layer.zst, rebuilt when this script or the kernel
# changes (setup.sh builds the nfs layer, which a VM test boots; the fio layer comes with
# its bench). Needs root and the rxe guest's root (setup.sh builds it). Prints the
# layer's path on stdout.
# Usage: layer.sh fio|nfs
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[layer] $*" >&2; }
die() { log "error: $*"; exit 1; }

name=${1:-}
case $name in
fio)
    package=fio
    # Only the modules themselves: their dependencies are in the base image.
    modules=(nvme_tcp nvmet_tcp)
    with_dependencies=0
    # (librados finds libceph-common through its RUNPATH, the guest's path: named here too.)
    check=(usr/bin/fio --version)
    extra_libs=ceph
    ;;
nfs)
    package=nfs-kernel-server
    modules=(nfsd nfsv4)
    with_dependencies=1
    check=(usr/sbin/exportfs -h)
    extra_libs=""
    ;;
*) die "usage: layer.sh fio|nfs" ;;
esac

kit=$RNIC_CACHE/$name-layer
out=$kit/layer.zst
[ -x "$RXE_ROOT/usr/bin/apt-get" ] && [ -f "$RXE_ROOT/.rnic-rxe-root" ] ||
    die "no guest root at $RXE_ROOT; run qemu-scripts/setup.sh (it builds the rxe guest)"
kver=$(cat "$GUEST_KIT/kernel-version") || die "no guest kit (run qemu-scripts/setup.sh)"
stamp="$(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1) $kver"
is_fresh() { [ -f "$out" ] && [ "$(cat "$kit/stamp" 2>/dev/null)" = "$stamp" ]; }
is_fresh && { echo "$out"; exit 0; }
[ "$(id -u)" = 0 ] || die "must run as root (chroot and apt-get need it); re-run with sudo"
mkdir -p "$kit"
# Two boots at once: one builds, the other waits, then finds the layer fresh.
exec 9>"$kit/.lock"
flock 9
is_fresh && { echo "$out"; exit 0; }
t0=$SECONDS
apt_install_host zstd

# The package and what apt would install with it, but Python.
packages() {
    chroot "$RXE_ROOT" apt-get install -s -qq --no-install-recommends "$package" 2>/dev/null |
        awk '$1 == "Inst" && $2 !~ /^(lib)?python3/ { print $2 }'
}
list=$(packages) || true
if ! grep -qx "$package" <<<"$list"; then
    chroot "$RXE_ROOT" apt-get update -qq
    list=$(packages) || true
fi
grep -qx "$package" <<<"$list" || die "apt in $RXE_ROOT cannot install $package"

tmp=$(mktemp -d "$RXE_ROOT/var/tmp/rnic-$name.XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
log "$name: downloading $(tr '\n' ' ' <<<"$list")"
# shellcheck disable=SC2086 # one word per package
download_unpack "$tmp" "$tmp/root" $list || die "apt-get download of $package in $RXE_ROOT failed"
rm -rf "$tmp/root/usr/share"

# The modules, where the guest's depmod looks.
for m in "${modules[@]}"; do
    files=$(chroot "$RXE_ROOT" modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }')
    [ $with_dependencies = 1 ] || files=$(tail -n1 <<<"$files")
    [ -n "$files" ] || die "kernel $kver has no $m module"
    for f in $files; do
        [ -f "$RXE_ROOT$f" ] || die "kernel $kver's $m needs $f, which is missing"
        rel=${f#/usr}
        mkdir -p "$tmp/root/usr$(dirname "$rel")"
        cp "$RXE_ROOT$f" "$tmp/root/usr$rel"
    done
done

lib=${tmp#"$RXE_ROOT"}/root/usr/lib/x86_64-linux-gnu
chroot "$RXE_ROOT" env LD_BIND_NOW=1 LD_LIBRARY_PATH="$lib${extra_libs:+:$lib/$extra_libs}" \
    "${tmp#"$RXE_ROOT"}/root/${check[0]}" "${check[@]:1}" >&2 ||
    die "the layer's ${check[0]} does not run in $RXE_ROOT"

log "packing $out"
pack_layer "$tmp/root" "$out" || die "packing $out failed"
echo "$stamp" >"$kit/stamp"
log "wrote $out ($(du -h "$out" | cut -f1)) in $((SECONDS - t0)) s"
echo "$out"
