#!/usr/bin/env bash
# Provides everything a VM run needs, idempotently:
#   - a QEMU with the vfio-user-pci client (the system one if it has it, else Debian
#     trixie-backports' QEMU inside a debootstrapped trixie root),
#   - a Debian guest kernel (vmlinuz) and busybox-static for the initramfs,
#   - tshark on the host, which the capture test decodes rnicd's pcap with,
#   - the Soft-RoCE (rdma_rxe) guest image and the virtio_net modules of the busybox guest
#     (build-debian-guest.sh rxe; its first build takes about two minutes),
#   - Debian's libibverbs headers and rdma-core/perftest binaries, unpacked as the
#     reference of rnic's libibverbs, with ibverbs-utils, perftest, python3-pyverbs and
#     ucx-utils installed in the trixie root to run against it (ibverbs-ref.sh);
#   - Python, python3-pyverbs and rdma-core's own test suite for the Debian guests
#     (pyverbs-layer.sh, boot.sh --pyverbs; about 40 s the first time);
#   - Debian's linux-headers for the guest kernel in the trixie root, and rnic.ko built
#     there from kernel/ (kernel-module.sh; rebuilt when kernel/ changes).
# Everything lands under $RNIC_CACHE (default /var/cache/rnic). Re-running skips what exists.
# Prints nothing on stdout but progress; `source qemu-scripts/env.sh` afterwards to use it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[setup] $*" >&2; }

need_root() {
    if [ "$(id -u)" != 0 ]; then
        log "must run as root (debootstrap, chroot and apt-get need it); re-run with sudo"
        exit 1
    fi
}

system_qemu_has_vfio_user() {
    command -v qemu-system-x86_64 >/dev/null 2>&1 &&
        qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"'
}

ensure_trixie_root() {
    if [ -x "$TRIXIE_ROOT/usr/bin/apt-get" ] && [ -f "$TRIXIE_ROOT/.rnic-debootstrap-done" ]; then
        return 0
    fi
    need_root
    apt_install_host debootstrap
    local mirror
    mirror=$(host_mirror)
    log "debootstrapping a trixie root into $TRIXIE_ROOT (mirror: ${mirror:-debootstrap default}); about a minute"
    # --one-file-system: never descend into a /dev or /proc someone bind-mounted into it.
    rm -rf --one-file-system "$TRIXIE_ROOT"
    mkdir -p "$TRIXIE_ROOT"
    debootstrap --variant=minbase trixie "$TRIXIE_ROOT" ${mirror:+"$mirror"} >"$RNIC_CACHE/debootstrap.log" 2>&1 || {
        log "debootstrap failed; see $RNIC_CACHE/debootstrap.log"
        exit 1
    }
    local m=${mirror:-http://deb.debian.org/debian}
    echo "deb $m trixie-backports main" >"$TRIXIE_ROOT/etc/apt/sources.list.d/bpo.list"
    chroot "$TRIXIE_ROOT" apt-get update -qq
    touch "$TRIXIE_ROOT/.rnic-debootstrap-done"
}

ensure_qemu() {
    if system_qemu_has_vfio_user; then
        log "system QEMU has vfio-user-pci: using it"
        return 0
    fi
    if [ -x "$TRIXIE_ROOT/usr/bin/qemu-system-x86_64" ]; then
        return 0
    fi
    ensure_trixie_root
    log "installing trixie-backports qemu-system-x86 into the trixie root"
    chroot_install "$TRIXIE_ROOT" --release trixie-backports qemu-system-x86 || exit 1
    chroot "$TRIXIE_ROOT" qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"' || {
        log "the installed QEMU has no vfio-user-pci device; QEMU 10.1 or later is needed"
        exit 1
    }
}

# Downloads a package (resolving a metapackage to the package it depends on) and unpacks it.
fetch_deb() {
    local pkg=$1 dest=$2
    local dir="$TRIXIE_ROOT/var/tmp/rnic-debs"
    mkdir -p "$dir" "$dest"
    rm -f "$dir"/*.deb
    chroot "$TRIXIE_ROOT" sh -c "cd /var/tmp/rnic-debs && apt-get download -qq -o APT::Sandbox::User=root $pkg" >/dev/null
    dpkg-deb -x "$dir"/*.deb "$dest"
}

ensure_guest_kit() {
    if [ -f "$GUEST_KIT/vmlinuz" ] && [ -x "$GUEST_KIT/busybox" ]; then
        return 0
    fi
    ensure_trixie_root
    mkdir -p "$GUEST_KIT"
    # linux-image-amd64 is a metapackage: take the versioned image it depends on.
    local image
    image=$(chroot "$TRIXIE_ROOT" apt-cache depends linux-image-amd64 |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    [ -n "$image" ] || { log "cannot resolve linux-image-amd64 in the trixie root"; exit 1; }
    log "fetching guest kernel $image and busybox-static"
    rm -rf "$GUEST_KIT/kernel-pkg" "$GUEST_KIT/busybox-pkg"
    fetch_deb "$image" "$GUEST_KIT/kernel-pkg"
    fetch_deb busybox-static "$GUEST_KIT/busybox-pkg"
    cp "$GUEST_KIT"/kernel-pkg/boot/vmlinuz-* "$GUEST_KIT/vmlinuz.tmp"
    basename "$GUEST_KIT"/kernel-pkg/usr/lib/modules/* >"$GUEST_KIT/kernel-version"
    cp "$GUEST_KIT/busybox-pkg/usr/bin/busybox" "$GUEST_KIT/busybox"
    mv "$GUEST_KIT/vmlinuz.tmp" "$GUEST_KIT/vmlinuz"
}

ensure_tshark() {
    # The capture test decodes rnicd's pcap with tshark. Its package asks whether
    # non-root users may capture; answer no beforehand so the install never prompts.
    command -v tshark >/dev/null 2>&1 && return 0
    need_root
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt_install_host tshark
}

main() {
    mkdir -p "$RNIC_CACHE"
    ensure_tshark
    ensure_qemu
    ensure_guest_kit
    bash "$here/build-debian-guest.sh" rxe >/dev/null
    bash "$here/pyverbs-layer.sh" >/dev/null
    ensure_trixie_root
    bash "$here/ibverbs-ref.sh" >/dev/null
    bash "$here/kernel-module.sh" >/dev/null
    log "ready: qemu $(qemu_cmd -version | head -n1), kernel $(cat "$GUEST_KIT/kernel-version")"
}

main "$@"
