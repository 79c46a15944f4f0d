#!/usr/bin/env bash
# Provides everything a VM run needs, idempotently:
#   - a QEMU with the vfio-user-pci client (the system one if it has it, else Debian
#     trixie-backports' QEMU inside a debootstrapped trixie root),
#   - a Debian guest kernel (vmlinuz) and busybox-static for the initramfs,
#   - tshark on the host, which the capture test decodes rnicd's pcap with, and man
#     (man-db), with which the test of tools/install-docs.sh reads `man rnicd`,
#   - the Soft-RoCE (rdma_rxe) guest image, the base images of the verbs and kernel
#     guests, and the virtio_net and vfio modules of the busybox guest
#     (build-debian-guest.sh; its first build takes about two minutes),
#   - Debian's libibverbs headers and rdma-core/perftest binaries, unpacked as the
#     reference of rnic's libibverbs, with ibverbs-utils, perftest, python3-pyverbs and
#     ucx-utils installed in the trixie root to run against it (ibverbs-ref.sh);
#   - Python, python3-pyverbs and rdma-core's own test suite for the Debian guests
#     (pyverbs-layer.sh, boot.sh --pyverbs; about 40 s the first time), and the NFS
#     server and client for the kernel guest (layer.sh nfs, boot.sh --layer);
#   - Debian's linux-headers for the guest kernel, make and perl in the trixie root, with
#     which boots build rnic.ko (kernel-module.sh --toolchain).
# Everything lands under $RNIC_CACHE (default /var/cache/rnic). Re-running skips what exists
# (and then says nothing). Once it has run, the cache may be read-only: boots build what
# comes from the checkout (the busybox guest's tools, rnic.ko, the provider, rnic's
# libibverbs) outside it, under $RNIC_RUN (env.sh). Before it installs anything it says what and about how much
# space and download it takes, and refuses hosts it does not support: Debian 12 or later,
# Ubuntu 22.04 or later (the Debian trixie roots come from Debian's mirror there, with
# Debian's archive keyring). Prints nothing on stdout; progress (downloads, debootstrap)
# goes to stderr. `source qemu-scripts/env.sh` afterwards to use it.
#
# setup.sh --plan: says what it would install and whether this host is supported, and
# installs nothing (exit status 1 on a host it refuses).
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

# Refuses, with the reason, a host setup.sh cannot provide for: it needs apt and dpkg on
# the host (tshark, debootstrap) and a debootstrap that knows Debian trixie.
check_host() {
    # RNIC_OS_RELEASE: another os-release file, for tests.
    local os_release=${RNIC_OS_RELEASE:-/etc/os-release}
    local id="" version="" pretty="unknown (no $os_release)" major
    if [ -r "$os_release" ]; then
        id=$(os_field ID "$os_release")
        version=$(os_field VERSION_ID "$os_release")
        pretty=$(os_field PRETTY_NAME "$os_release")
        [ -n "$pretty" ] || pretty=${id:-unknown}
    fi
    major=${version%%.*}
    [[ $major =~ ^[0-9]+$ ]] || major=0
    case $id in
    debian) [ "$major" -ge 12 ] || refuse_host "$pretty" ;;
    ubuntu) [ "$major" -ge 22 ] || refuse_host "$pretty" ;;
    *) refuse_host "$pretty" ;;
    esac
    [ "${1:-}" != --plan ] || { log "host: $pretty (supported)"; return 0; }
    if [ "$id" = ubuntu ]; then
        # debootstrap checks Debian's Release files with Debian's keys.
        apt_install_host debootstrap debian-archive-keyring
        [ -e /usr/share/debootstrap/scripts/trixie ] || {
            log "this host's debootstrap ($(dpkg-query -W -f '${Version}' debootstrap)) does not know Debian trixie;"
            log "install a newer one (Debian's debootstrap .deb works on Ubuntu) and re-run"
            exit 1
        }
    fi
}

# The value of FIELD in an os-release FILE, unquoted.
os_field() { # FIELD FILE
    sed -n "s/^$1=//p" "$2" | head -n1 | sed 's/^"\(.*\)"$/\1/; s/^'"'"'\(.*\)'"'"'$/\1/'
}

refuse_host() {
    log "this host is $1: setup.sh supports Debian 12 or later and Ubuntu 22.04 or later"
    log "(it installs host packages with apt and debootstraps Debian trixie roots)."
    log "Elsewhere, provide by hand what it would: see qemu-scripts/README.md, 'The scripts'."
    exit 1
}

# What is missing, as words for the plan; empty when everything is there.
missing_parts() {
    command -v tshark >/dev/null 2>&1 || echo "tshark (host package, about 60 MB)"
    command -v man >/dev/null 2>&1 || echo "man-db (host package, about 5 MB)"
    if ! system_qemu_has_vfio_user && [ ! -x "$TRIXIE_ROOT/usr/bin/qemu-system-x86_64" ]; then
        echo "a Debian trixie root with trixie-backports' QEMU in $TRIXIE_ROOT (debootstrap)"
    fi
    [ -f "$GUEST_KIT/vmlinuz" ] && [ -x "$GUEST_KIT/busybox" ] ||
        echo "the Debian guest kernel and busybox-static in $GUEST_KIT"
    [ -f "$RXE_ROOT/.rnic-rxe-root" ] || echo "the Debian guests' root in $RXE_ROOT (debootstrap, rdma-core, perftest)"
    [ -f "$PYVERBS_KIT/stamp" ] || echo "Python and pyverbs for the Debian guests ($PYVERBS_KIT)"
    [ -f "$RNIC_CACHE/nfs-layer/stamp" ] || echo "the NFS server and client for the kernel guest ($RNIC_CACHE/nfs-layer)"
    [ -f "$IBVERBS_REF/.stamp" ] || echo "Debian's rdma-core and perftest in the trixie root and $IBVERBS_REF"
    [ -f "$VERBS_KIT/base.zst" ] && [ -f "$KERNEL_KIT/base.zst" ] ||
        echo "the verbs and kernel guests' base images in $VERBS_KIT and $KERNEL_KIT"
    compgen -G "$TRIXIE_ROOT/usr/src/linux-headers-*/Makefile" >/dev/null ||
        echo "linux-headers and a compiler in the trixie root, for rnic.ko"
}

# Says what set-up will do, before it does it (with --plan: also when nothing is missing,
# and checks the host without installing anything).
announce() {
    local parts
    mapfile -t parts < <(missing_parts)
    if [ ${#parts[@]} -eq 0 ]; then
        [ "${1:-}" != --plan ] || log "nothing to install: everything is under $RNIC_CACHE"
        return 0
    fi
    check_host "$@"
    log "setting up the VM kit under $RNIC_CACHE; missing:"
    local p
    for p in "${parts[@]}"; do log "  - $p"; done
    log "from scratch this downloads about 700 MB (Debian packages) and leaves about 2.5 GB"
    log "under $RNIC_CACHE (the trixie root with QEMU, headers and compilers ~1.3 GB, the"
    log "guests' root ~0.7 GB, kernel, images and layers ~0.4 GB; estimates from this project's"
    log "Debian 12 machines), in a few minutes."
    log "free there now: $(df -h --output=avail "$(existing_parent "$RNIC_CACHE")" | tail -n1 | tr -d ' ')"
}

existing_parent() {
    local d=$1
    while [ ! -d "$d" ]; do d=$(dirname "$d"); done
    echo "$d"
}

# Packages apt fetched into the trixie root are installed: their .debs go.
clean_apt_cache() {
    compgen -G "$TRIXIE_ROOT/var/cache/apt/archives/*.deb" >/dev/null || return 0
    [ -w "$TRIXIE_ROOT/var/cache/apt/archives" ] || return 0
    log "cleaning the trixie root's apt cache ($(du -sh "$TRIXIE_ROOT/var/cache/apt/archives" | cut -f1))"
    chroot "$TRIXIE_ROOT" apt-get clean
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
    log "fetching trixie's package lists"
    chroot "$TRIXIE_ROOT" apt-get update -qq -o APT::Status-Fd=3 3> >(apt_progress >&2)
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
    # 3>: apt's status lines, shown as progress (env.sh's apt_progress).
    chroot "$TRIXIE_ROOT" sh -c "cd /var/tmp/rnic-debs && apt-get download -qq -o APT::Sandbox::User=root -o APT::Status-Fd=3 $pkg" \
        3> >(apt_progress >&2) >/dev/null
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

ensure_man() {
    # tests/tests/install_docs.rs reads the installed man page with man.
    command -v man >/dev/null 2>&1 && return 0
    need_root
    apt_install_host man-db
}

main() {
    case ${1:-} in
    --plan) announce --plan; return 0 ;;
    "") ;;
    *) log "usage: setup.sh [--plan]"; exit 2 ;;
    esac
    announce
    # Progress of long steps (debootstrap) reaches this stderr even where their output
    # goes to a log (env.sh's debootstrap).
    exec {RNIC_PROGRESS_FD}>&2
    export RNIC_PROGRESS_FD
    [ -d "$RNIC_CACHE" ] || mkdir -p "$RNIC_CACHE"
    ensure_tshark
    ensure_man
    ensure_qemu
    ensure_guest_kit
    bash "$here/build-debian-guest.sh" rxe >/dev/null
    # The other guests' base images: a boot then only appends what it builds from the
    # checkout (outside the cache), so the cache may be read-only from here on.
    bash "$here/build-debian-guest.sh" verbs --base >/dev/null
    bash "$here/build-debian-guest.sh" kernel --base >/dev/null
    bash "$here/pyverbs-layer.sh" >/dev/null
    bash "$here/layer.sh" nfs >/dev/null
    ensure_trixie_root
    bash "$here/ibverbs-ref.sh" >/dev/null
    bash "$here/kernel-module.sh" --toolchain
    clean_apt_cache
    log "ready: qemu $(qemu_cmd -version | head -n1), kernel $(cat "$GUEST_KIT/kernel-version")"
}

main "$@"
