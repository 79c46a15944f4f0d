# shellcheck shell=bash
# Sourced by the qemu-scripts: where the VM kit lives and how to call QEMU.
# RNIC_CACHE survives across clones on one machine so set-up runs once per machine.
RNIC_CACHE=${RNIC_CACHE:-/var/cache/rnic}
TRIXIE_ROOT=$RNIC_CACHE/trixie-root
# shellcheck disable=SC2034 # used by the scripts that source this file
GUEST_KIT=$RNIC_CACHE/guest-kit
# The Debian guests (build-debian-guest.sh): their debootstrapped root (named after the
# first of them), the Soft-RoCE (rdma_rxe) guest's packed image, and the verbs guest's
# (rnic's libibverbs in place of Debian's).
# shellcheck disable=SC2034
RXE_ROOT=$RNIC_CACHE/rxe-root
# shellcheck disable=SC2034
RXE_KIT=$RNIC_CACHE/rxe-guest
# shellcheck disable=SC2034
VERBS_KIT=$RNIC_CACHE/verbs-guest
# The kernel-driver guest's image (build-debian-guest.sh kernel; boot.sh --kernel) and the
# rnic.ko it carries (kernel-module.sh).
# shellcheck disable=SC2034
KERNEL_KIT=$RNIC_CACHE/kernel-guest
# Python, pyverbs and rdma-core's tests for either Debian guest (pyverbs-layer.sh;
# boot.sh --pyverbs).
# shellcheck disable=SC2034
PYVERBS_KIT=$RNIC_CACHE/pyverbs-layer
# fio and the NVMe/TCP modules for the kernel guest (fio-layer.sh; boot.sh --layer), what
# bench/kernel-nvme.sh runs.
# shellcheck disable=SC2034
FIO_KIT=$RNIC_CACHE/fio-layer
# Debian trixie's rdma-core and perftest packages unpacked, the reference of rnic's
# libibverbs (ibverbs-ref.sh; ibverbs/ reads it).
# shellcheck disable=SC2034
IBVERBS_REF=$RNIC_CACHE/ibverbs-ref

# The Debian mirror the host's own apt already uses, so no host name lives in the repo
# (empty when none is found: debootstrap then picks Debian's default).
host_mirror() {
    local uri=""
    if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
            /etc/apt/sources.list.d/*.sources)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
            /etc/apt/sources.list)
    fi
    echo "$uri"
}

# Installs the host packages among "$@" that are missing (the caller defines log()).
apt_install_host() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing host packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Installs PKG... into the chroot ROOT with apt (from RELEASE with --release RELEASE), then
# checks that each is installed; says which is not and returns 1 otherwise.
chroot_install() { # ROOT [--release RELEASE] PKG...
    local root=$1 release=() p
    shift
    if [ "${1:-}" = --release ]; then
        release=(-t "$2")
        shift 2
    fi
    # apt in a chroot without /dev/pts warns that it cannot log; that is harmless.
    chroot "$root" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${release[@]}" "$@" 2>&1 >/dev/null |
        { grep -v posix_openpt >&2 || true; }
    for p in "$@"; do
        chroot "$root" dpkg -s "$p" >/dev/null 2>&1 || {
            echo "installing $p into $root failed (see above)" >&2
            return 1
        }
    done
}

# Runs the QEMU that has vfio-user-pci: the system one if it has it, else the one inside the
# trixie root (paths given to it must then live inside $TRIXIE_ROOT, see qemu_path).
qemu_in_root() {
    ! { command -v qemu-system-x86_64 >/dev/null 2>&1 &&
        qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"'; }
}

# Prints the argv prefix that runs QEMU, one word a line (read it with mapfile). Inside the
# trixie root, QEMU runs in a private mount namespace where /dev and /proc are bind-mounted
# into the root: the mounts vanish with QEMU, so nothing is left mounted on the host (an
# `rm -rf` of the cache can never reach the host's /dev) and concurrent runs do not interfere.
# The pid of the process started from this prefix is QEMU's own pid (every step execs).
qemu_argv() {
    if qemu_in_root; then
        # shellcheck disable=SC2016 # expanded by the inner sh
        printf '%s\n' unshare --mount --propagation private -- sh -c \
            'mount --rbind /dev "$0/dev" && mount --bind /proc "$0/proc" && exec chroot "$0" qemu-system-x86_64 "$@"' \
            "$TRIXIE_ROOT"
    else
        printf '%s\n' qemu-system-x86_64
    fi
}
qemu_cmd() {
    local argv
    mapfile -t argv < <(qemu_argv)
    "${argv[@]}" "$@"
}

# Prints PATH (absolute, on the host) as QEMU sees it: inside the trixie root that strips the
# $TRIXIE_ROOT prefix, and fails for a path outside the root.
qemu_path() {
    local p
    p=$(realpath -m -- "$1")
    if qemu_in_root; then
        local root
        root=$(realpath -m -- "$TRIXIE_ROOT")
        case $p in
        "$root"/*) p=${p#"$root"} ;;
        *)
            echo "qemu_path: $p is outside $TRIXIE_ROOT, where QEMU runs; put it under $TRIXIE_ROOT" >&2
            return 1
            ;;
        esac
    fi
    echo "$p"
}
