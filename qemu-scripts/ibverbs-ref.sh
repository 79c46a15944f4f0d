#!/usr/bin/env bash
# Provides the reference material of rnic's libibverbs (ibverbs/), idempotently:
#   - Debian trixie's ibverbs-utils, perftest, python3-pyverbs (rdma-core's Python
#     bindings) and ucx-utils (UCX's ucx_info and ucx_perftest, with libucx0) installed
#     into the trixie root, so their unmodified binaries run there under chroot
#     (ibverbs/tests/devinfo.rs, libraries.rs, ... run them against rnic's libibverbs.so.1
#     through LD_LIBRARY_PATH). ucx-utils is the big one: 34 packages, 64 MB to download
#     and 278 MB installed (Open MPI, ROCm and Level Zero runtimes come with it; measured
#     on a trixie root that had the rest), about 6 s on a fast mirror;
#   - the packages libibverbs-dev, libibverbs1, ibverbs-utils, perftest, ibverbs-providers,
#     librdmacm1t64 and linux-libc-dev unpacked side by side into $IBVERBS_REF (default
#     /var/cache/rnic/ibverbs-ref): the headers the layout test compiles its C probe
#     against (usr/include/infiniband/verbs.h and the kernel uapi headers it includes,
#     trixie's, not the host's) and the library and binaries whose symbols
#     ibverbs/gen-symbols.sh lists;
#   - gcc and binutils on the host, which those tests use.
# Nothing from these packages enters the repository. Needs the trixie root (setup.sh
# makes it first and calls this script) and root. Re-running skips what exists; the
# reference is rebuilt when this script changes. Prints the reference directory on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[ibverbs-ref] $*" >&2; }
die() { log "error: $*"; exit 1; }

# What runs in the trixie root, and what is unpacked for reading.
run_packages=(ibverbs-utils perftest python3-pyverbs ucx-utils)
ref_packages=(libibverbs-dev libibverbs1 ibverbs-utils perftest ibverbs-providers librdmacm1t64 linux-libc-dev)

# The host tools the tests read the reference with: gcc compiles the layout probe,
# objdump (binutils) lists symbols.
apt_install_host gcc binutils

stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
fresh() {
    [ "$(cat "$IBVERBS_REF/.stamp" 2>/dev/null)" = "$stamp" ] &&
        [ -f "$IBVERBS_REF/usr/include/infiniband/verbs.h" ] &&
        [ -x "$TRIXIE_ROOT/usr/bin/ibv_devinfo" ] && [ -x "$TRIXIE_ROOT/usr/bin/ib_write_bw" ] &&
        [ -d "$TRIXIE_ROOT/usr/lib/python3/dist-packages/pyverbs" ] &&
        [ -x "$TRIXIE_ROOT/usr/bin/ucx_perftest" ]
}
if fresh; then
    echo "$IBVERBS_REF"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "must run as root (chroot and apt-get need it); re-run with sudo"
[ -x "$TRIXIE_ROOT/usr/bin/apt-get" ] || die "no trixie root at $TRIXIE_ROOT; run qemu-scripts/setup.sh"
# Two runs at once (two test processes calling setup): one works, the other waits.
mkdir -p "$RNIC_CACHE"
exec 9>"$RNIC_CACHE/.ibverbs-ref.lock"
flock 9
if fresh; then
    echo "$IBVERBS_REF"
    exit 0
fi

log "installing ${run_packages[*]} into $TRIXIE_ROOT"
chroot "$TRIXIE_ROOT" apt-get update -qq
chroot_install "$TRIXIE_ROOT" "${run_packages[@]}" || die "could not install ${run_packages[*]}"

log "unpacking ${ref_packages[*]} into $IBVERBS_REF"
debs=$TRIXIE_ROOT/var/tmp/rnic-ibverbs-debs
rm -rf "$debs"
mkdir -p "$debs"
# -qq keeps apt quiet; its errors still reach stderr.
chroot "$TRIXIE_ROOT" sh -c 'cd /var/tmp/rnic-ibverbs-debs && apt-get download -qq -o APT::Sandbox::User=root "$@"' \
    sh "${ref_packages[@]}" >/dev/null || die "apt-get download ${ref_packages[*]} in $TRIXIE_ROOT failed"
tmp=$(mktemp -d "$RNIC_CACHE/.ibverbs-ref.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for deb in "$debs"/*.deb; do
    dpkg-deb -x "$deb" "$tmp"
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >>"$tmp/.versions"
done
rm -rf "$debs"
[ -f "$tmp/usr/include/infiniband/verbs.h" ] || die "libibverbs-dev brought no usr/include/infiniband/verbs.h"
echo "$stamp" >"$tmp/.stamp"
rm -rf "$IBVERBS_REF"
mv "$tmp" "$IBVERBS_REF"
trap - EXIT
log "reference: $(paste -sd, "$IBVERBS_REF/.versions")"
echo "$IBVERBS_REF"
