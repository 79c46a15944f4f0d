#!/usr/bin/env bash
# Builds the pyverbs layer of the Debian guests (boot.sh --pyverbs): one more initramfs
# archive, appended to the rxe or the verbs guest's image, with Debian trixie's Python 3,
# python3-pyverbs (rdma-core's Python bindings) and rdma-core's own test suite, which
# Debian ships in python3-pyverbs (/usr/share/doc/rdma-core/tests, gzipped by dh_compress;
# the tests/ directory of the rdma-core release the package is built from). In the guest:
#
#   /usr/bin/python3 ...                       Python, the standard library, pyverbs
#   /opt/rdma-core/tests/run_tests.py ...      rdma-core's tests, unpacked
#   /opt/rdma-core/version                     the package's version (e.g. 56.1-1)
#   /opt/rdma-core/load-modules                loads the kernel modules the suite needs
#                                              of the OS (below), those not loaded yet
#
# The suite asks the kernel for two things the guests' own module lists leave out:
# RDMA netlink (`rdma link show -j`, which every traffic test runs to find the device's
# netdev: ib_core) and the RDMA connection manager (librdmacm opens
# /dev/infiniband/rdma_cm: rdma_ucm and what it needs). Their modules, of the guest
# kit's kernel, go in too; `load-modules` loads them (in the verbs guest they serve no
# device: `rdma link` lists none, and the RDMA CM tests find no netdev of rnic's and
# skip).
#
# The packages are downloaded (apt-get download, in the guests' root $RXE_ROOT, so that they
# match its libibverbs1 and librdmacm1t64) and unpacked, not installed: python3-pyverbs
# depends on rdma-core, and that on udev and systemd, none of which the tests run. So the
# layer holds python3-pyverbs at the version of the root's libibverbs1 and the packages apt
# would install with it, but rdma-core, udev, systemd and their libraries. The standard
# library and the tests are compiled to bytecode here (unchecked-hash .pyc files: a TCG
# guest would otherwise compile every module it imports, in every process).
#
# Kept apart from the base images (build-debian-guest.sh): Python costs every boot of a
# guest that carries it seconds under TCG, and only the rdma-core test phases need it.
# Cached in $PYVERBS_KIT/layer.zst, rebuilt when this script or the root's libibverbs1
# changes. Needs root and the rxe guest's root (setup.sh builds it). Prints the layer's
# path on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=qemu-scripts/env.sh
source "$here/env.sh"

log() { echo "[pyverbs-layer] $*" >&2; }
die() { log "error: $*"; exit 1; }

layer=$PYVERBS_KIT/layer.zst
[ -x "$RXE_ROOT/usr/bin/apt-get" ] && [ -f "$RXE_ROOT/.rnic-rxe-root" ] ||
    die "no guest root at $RXE_ROOT; run qemu-scripts/setup.sh (it builds the rxe guest)"
# python3-pyverbs at the version of the root's libibverbs1 (one source package).
version=$(chroot "$RXE_ROOT" dpkg-query -W -f '${Version}' libibverbs1) ||
    die "the guest root $RXE_ROOT has no libibverbs1"
kver=$(cat "$GUEST_KIT/kernel-version") || die "no guest kit (run qemu-scripts/setup.sh)"
stamp="$(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1) $version $kver"
fresh() { [ -f "$layer" ] && [ "$(cat "$PYVERBS_KIT/stamp" 2>/dev/null)" = "$stamp" ]; }
if fresh; then
    echo "$layer"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "must run as root (chroot and apt-get need it); re-run with sudo"
mkdir -p "$PYVERBS_KIT"
# Two guests booting at once: one builds, the other waits and finds the layer fresh.
exec 9>"$RNIC_CACHE/.pyverbs-layer.lock"
flock 9
if fresh; then
    echo "$layer"
    exit 0
fi
started=$SECONDS
apt_install_host zstd

# What apt would install with python3-pyverbs, but rdma-core's daemons (rdma-core, udev,
# systemd and the libraries only they use).
skip='^(rdma-core|udev|systemd|systemd-.*|libsystemd-shared|libapparmor1)$'
want() {
    chroot "$RXE_ROOT" apt-get install -s -qq --no-install-recommends "python3-pyverbs=$version" 2>/dev/null |
        awk '$1 == "Inst" { print $2 }' | grep -Ev "$skip"
}
packages=$(want) || true
if ! grep -qx python3-pyverbs <<<"$packages"; then
    # The root's package lists may be older than the mirror: refresh them once.
    chroot "$RXE_ROOT" apt-get update -qq
    packages=$(want) || true
fi
grep -qx python3-pyverbs <<<"$packages" ||
    die "apt in $RXE_ROOT cannot install python3-pyverbs=$version (the version of its libibverbs1)"
grep -q '^python3\.[0-9]*-minimal$' <<<"$packages" ||
    die "python3-pyverbs=$version brings no python3.X-minimal: $(tr '\n' ' ' <<<"$packages")"

work=$(mktemp -d "$RXE_ROOT/var/tmp/rnic-pyverbs.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
log "downloading $(tr '\n' ' ' <<<"$packages")"
stage=$work/stage
# shellcheck disable=SC2086 # one word per package
download_unpack "$work" "$stage" $packages || die "apt-get download in $RXE_ROOT failed"

# rdma-core's tests, out of the package's documentation.
tests=$stage/opt/rdma-core/tests
mkdir -p "$tests"
cp -a "$stage/usr/share/doc/rdma-core/tests/." "$tests/"
gunzip -f "$tests"/*.gz
[ -f "$tests/run_tests.py" ] && [ -f "$tests/test_qp.py" ] ||
    die "python3-pyverbs=$version has no rdma-core tests under /usr/share/doc/rdma-core/tests"
echo "$version" >"$stage/opt/rdma-core/version"
# What no test reads.
rm -rf "$stage/usr/share/doc" "$stage/usr/share/man" "$stage/usr/share/lintian" \
    "$stage/usr/share/locale" "$stage/usr/share/bug" "$stage/usr/share/applications" \
    "$stage/usr/share/pixmaps" "$stage/usr/share/binfmts"

# The kernel modules, in load order, and what loads them.
[ -f "$RXE_ROOT/usr/lib/modules/$kver/modules.dep" ] ||
    die "the guest root $RXE_ROOT has no module tree of kernel $kver (run qemu-scripts/setup.sh)"
mods=$stage/opt/rdma-core/modules
mkdir -p "$mods"
n=0
while read -r f; do
    n=$((n + 1))
    cp "$RXE_ROOT$f" "$mods/$(printf %02d $n)-$(basename "$f")"
done < <(chroot "$RXE_ROOT" modprobe -S "$kver" --show-depends -a ib_core rdma_ucm |
    awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++')
compgen -G "$mods/*-rdma_ucm.ko*" >/dev/null || die "kernel $kver has no rdma_ucm module"
cat >"$stage/opt/rdma-core/load-modules" <<'LOAD'
#!/bin/sh
# Loads the modules of /opt/rdma-core/modules that are not loaded yet, in order
# (qemu-scripts/pyverbs-layer.sh). Fails naming the one that does not load.
for f in /opt/rdma-core/modules/*.ko*; do
    name=$(basename "$f"); name=${name#*-}; name=${name%%.ko*}
    [ -d "/sys/module/$name" ] && continue
    insmod "$f" || { echo "load-modules: insmod $f failed" >&2; exit 1; }
done
[ -e /dev/infiniband/rdma_cm ] || { echo "load-modules: no /dev/infiniband/rdma_cm" >&2; exit 1; }
LOAD
chmod 755 "$stage/opt/rdma-core/load-modules"

# Bytecode, made by the layer's own Python inside the root (whose libc it runs on), with
# the paths as the guest sees them; then the check that pyverbs and the tests import.
inside=${stage#"$RXE_ROOT"}
py=$(cd "$stage/usr/bin" && ls python3.[0-9]* | grep -E '^python3\.[0-9]+$' | head -n1)
run_py() {
    chroot "$RXE_ROOT" env LD_LIBRARY_PATH="$inside/usr/lib/x86_64-linux-gnu" \
        PYTHONDONTWRITEBYTECODE=1 "$inside/usr/bin/$py" "$@"
}
run_py -m compileall -q -j 0 --invalidation-mode unchecked-hash -s "$inside" -p / \
    "$inside/usr/lib/$py" "$inside/usr/lib/python3/dist-packages" "$inside/opt/rdma-core/tests" \
    >/dev/null || die "compiling the layer's Python to bytecode failed"
run_py -c "import sys; sys.path[:0] = ['$inside/opt/rdma-core/tests', '$inside/opt/rdma-core']
import pyverbs.device, pyverbs.qp, pyverbs.cmid
import tests" ||
    die "pyverbs or rdma-core's tests do not import in the layer"

log "packing $layer"
pack_layer "$stage" "$layer" || die "packing $layer failed"
echo "$stamp" >"$PYVERBS_KIT/stamp"
log "wrote $layer ($(du -h "$layer" | cut -f1), python3-pyverbs $version) in $((SECONDS - started)) s"
echo "$layer"
