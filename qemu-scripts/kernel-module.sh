#!/usr/bin/env bash
# Builds rnic.ko (kernel/) for the guest kernel, idempotently: installs Debian's
# linux-headers-<guest kernel version>, make and perl (kernel-doc, for W=1) into the trixie
# root ($TRIXIE_ROOT), so the module is built by the compiler Debian built that kernel with,
# and runs `make W=1` there. Rebuilds only when kernel/'s sources or the kernel version
# changed; a warning fails the build. Needs root, the trixie root and the guest kit
# (setup.sh makes both; setup.sh calls this script). Prints the module's path on stdout:
# $RNIC_RUN/kernel-module/rnic-<hash of its sources>.ko (outside the cache, which may be
# read-only once set up: the build runs in the root with its directory bind-mounted at
# the root's /mnt), so checkouts with different sources (worktrees) never boot each
# other's module.
# With --toolchain it only installs what the build needs into the root (set-up's part).
# Usage: kernel-module.sh [--toolchain]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[kernel-module] $*" >&2; }
die() { log "error: $*"; exit 1; }

out_dir=$MODULE_BUILDS
src=$repo/kernel
[ -f "$GUEST_KIT/kernel-version" ] || die "no guest kernel yet ($GUEST_KIT/kernel-version); run qemu-scripts/setup.sh"
[ -x "$TRIXIE_ROOT/usr/bin/apt-get" ] || die "no trixie root at $TRIXIE_ROOT; run qemu-scripts/setup.sh"
kver=$(cat "$GUEST_KIT/kernel-version")
sources=("$src"/Kbuild "$src"/Makefile "$src"/*.c "$src"/*.h)
stamp=$({ echo "$kver"; cat "${sources[@]}" "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
ko=$out_dir/rnic-$stamp.ko
headers=linux-headers-$kver
build=/usr/src/$headers

# Debian's headers for the guest kernel, make and perl (kernel-doc, for W=1) in the root.
install_toolchain() {
    if [ ! -f "$TRIXIE_ROOT$build/Makefile" ] || ! chroot "$TRIXIE_ROOT" sh -c 'command -v make && command -v perl' >/dev/null; then
        log "installing $headers, make and perl into $TRIXIE_ROOT"
        chroot "$TRIXIE_ROOT" apt-get update -qq
        # The root may hold trixie-backports' QEMU, whose libraries (libelf) are newer than
        # trixie's: then the headers' tools (pahole) must come from backports as well.
        chroot_install "$TRIXIE_ROOT" "$headers" make perl 2>/dev/null ||
            chroot_install "$TRIXIE_ROOT" --release trixie-backports "$headers" make perl ||
            die "could not install $headers into $TRIXIE_ROOT"
    fi
}
case ${1:-} in
--toolchain)
    [ "$(id -u)" = 0 ] || die "must run as root (chroot and apt-get need it); re-run with sudo"
    install_toolchain
    exit 0
    ;;
"") ;;
*) die "usage: kernel-module.sh [--toolchain]" ;;
esac

# A module in use stays: reusing one refreshes its time, and only modules nobody asked for
# in two hours go.
fresh() { [ -f "$ko" ] && touch "$ko"; }
if fresh; then
    echo "$ko"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "must run as root (chroot and apt-get need it); re-run with sudo"
mkdir -p "$out_dir"
# Two boots may get here at once: one builds, the other then finds the module fresh.
exec 9>"$out_dir/.lock"
flock 9
if fresh; then
    echo "$ko"
    exit 0
fi
find "$out_dir" -maxdepth 1 -name 'rnic*.ko' -mmin +120 -delete
# Where modules lived before, inside the cache (while it is writable).
[ ! -w "$RNIC_CACHE/kernel-module" ] || rm -rf --one-file-system "$RNIC_CACHE/kernel-module" "$RNIC_CACHE/.kernel-module.lock"

install_toolchain

work=$(mktemp -d "$out_dir/.build.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
cp "${sources[@]}" "$work/"
log "building rnic.ko for $kver (make W=1)"
# Temporary files too go to the build directory: the root may be read-only.
mkdir "$work/.tmp"
if ! output=$(chroot_with_mnt "$TRIXIE_ROOT" "$work" env TMPDIR=/mnt/.tmp make -C /mnt KDIR="$build" W=1 2>&1); then
    printf '%s\n' "$output" >&2
    die "the module did not build (see above)"
fi
if grep -Eiq 'warning:|error:' <<<"$output"; then
    printf '%s\n' "$output" >&2
    die "the module built with warnings (see above); kernel/ must build warning-free with W=1"
fi
cp "$work/rnic.ko" "$ko.tmp"
mv -f "$ko.tmp" "$ko"
rm -rf --one-file-system "$work"
log "built $ko"
echo "$ko"
