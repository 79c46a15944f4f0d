#!/usr/bin/env bash
# Builds the fio layer of the kernel-driver guest: one more initramfs archive, appended to
# its image with `boot.sh --layer "$(bash qemu-scripts/fio-layer.sh)"`, for
# bench/kernel-nvme.sh. It holds
#
#   /usr/bin/fio and its libraries      Debian trixie's fio (libaio, librbd, librados,
#                                       libgfapi, libnbd, ... : what the binary links)
#   nvme-tcp.ko.xz, nvmet-tcp.ko.xz     NVMe/TCP host and target of the guest kit's
#                                       kernel, in its module tree (/init runs depmod -a,
#                                       so `modprobe nvme-tcp` finds them; what they
#                                       depend on, nvme-fabrics and nvmet, is in the
#                                       image for nvme-rdma already)
#
# fio's package depends on python3 (for its helper scripts, which the bench does not
# run): Python stays out, so the layer holds fio and the packages apt would install with
# it but python3*. Kept apart from the base image (build-debian-guest.sh), whose cache
# other clones share and whose every megabyte costs each boot under TCG.
#
# The packages are downloaded with apt in the guests' root ($RXE_ROOT) and unpacked, not
# installed; before packing, the layer's fio runs there (`fio --version`, every symbol
# bound at once), which proves it finds its libraries. Cached in $FIO_KIT/layer.zst,
# rebuilt when this script or the kernel changes. Needs root and the rxe guest's root
# (setup.sh builds it). Prints the layer's path on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[fio-layer] $*" >&2; }
die() { log "error: $*"; exit 1; }

out=$FIO_KIT/layer.zst
[ -x "$RXE_ROOT/usr/bin/apt-get" ] && [ -f "$RXE_ROOT/.rnic-rxe-root" ] ||
    die "no guest root at $RXE_ROOT; run qemu-scripts/setup.sh (it builds the rxe guest)"
kver=$(cat "$GUEST_KIT/kernel-version") || die "no guest kit (run qemu-scripts/setup.sh)"
stamp="$(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1) $kver"
is_fresh() { [ -f "$out" ] && [ "$(cat "$FIO_KIT/stamp" 2>/dev/null)" = "$stamp" ]; }
is_fresh && { echo "$out"; exit 0; }
[ "$(id -u)" = 0 ] || die "must run as root (chroot and apt-get need it); re-run with sudo"
mkdir -p "$FIO_KIT"
# Two boots at once: one builds, the other waits, then finds the layer fresh.
exec 9>"$FIO_KIT/.lock"
flock 9
is_fresh && { echo "$out"; exit 0; }
t0=$SECONDS
apt_install_host zstd

# fio and what apt would install with it, but Python.
fio_packages() {
    chroot "$RXE_ROOT" apt-get install -s -qq --no-install-recommends fio 2>/dev/null |
        awk '$1 == "Inst" && $2 !~ /^(lib)?python3/ { print $2 }'
}
list=$(fio_packages) || true
if ! grep -qx fio <<<"$list"; then
    chroot "$RXE_ROOT" apt-get update -qq
    list=$(fio_packages) || true
fi
grep -qx fio <<<"$list" || die "apt in $RXE_ROOT cannot install fio"

tmp=$(mktemp -d "$RXE_ROOT/var/tmp/rnic-fio.XXXXXX")
packed=""
trap 'rm -rf --one-file-system "$tmp" ${packed:+"$packed"}' EXIT
mkdir "$tmp/debs" "$tmp/root"
log "downloading $(tr '\n' ' ' <<<"$list")"
# shellcheck disable=SC2086 # one word per package
chroot "$RXE_ROOT" sh -c 'cd "$0" && apt-get download -qq -o APT::Sandbox::User=root "$@"' \
    "${tmp#"$RXE_ROOT"}/debs" $list >/dev/null || die "apt-get download of fio in $RXE_ROOT failed"
for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
rm -rf "$tmp/root/usr/share"

# The two NVMe/TCP modules, where the guest's depmod looks.
for m in nvme_tcp nvmet_tcp; do
    f=$(chroot "$RXE_ROOT" modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { p = $2 } END { print p }')
    [ -n "$f" ] && [ -f "$RXE_ROOT$f" ] || die "kernel $kver has no $m module"
    rel=${f#/usr}
    mkdir -p "$tmp/root/usr$(dirname "$rel")"
    cp "$RXE_ROOT$f" "$tmp/root/usr$rel"
done

# (librados finds libceph-common through its RUNPATH, the guest's path: named here too.)
lib=${tmp#"$RXE_ROOT"}/root/usr/lib/x86_64-linux-gnu
chroot "$RXE_ROOT" env LD_BIND_NOW=1 LD_LIBRARY_PATH="$lib:$lib/ceph" "${tmp#"$RXE_ROOT"}/root/usr/bin/fio" --version >&2 || die "the layer's fio does not run in $RXE_ROOT"

log "packing $out"
packed=$(mktemp "$FIO_KIT/.layer.XXXXXX")
(cd "$tmp/root" && find . -mindepth 1 | LC_ALL=C sort | "$GUEST_KIT/busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
    zstd -q -T0 -12 >"$packed"
chmod 644 "$packed"
mv -f "$packed" "$out"
packed=""
echo "$stamp" >"$FIO_KIT/stamp"
log "wrote $out ($(du -h "$out" | cut -f1)) in $((SECONDS - t0)) s"
echo "$out"
