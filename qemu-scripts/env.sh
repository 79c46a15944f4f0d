# shellcheck shell=bash
# Sourced by the qemu-scripts: where the VM kit lives and how to call QEMU.
# RNIC_CACHE survives across clones on one machine so set-up runs once per machine.
RNIC_CACHE=${RNIC_CACHE:-/var/cache/rnic}
TRIXIE_ROOT=$RNIC_CACHE/trixie-root
# shellcheck disable=SC2034 # used by the scripts that source this file
GUEST_KIT=$RNIC_CACHE/guest-kit
# What each boot writes lives outside the cache, so that the cache may be read-only (or
# shared) once set up: the run directories (logs, sockets, the run's guest image) under
# RNIC_VM_RUNS, and the busybox guest's image, rebuilt at every boot from the checkout.
RNIC_RUN=${RNIC_RUN:-/var/tmp/rnic}
# shellcheck disable=SC2034
RNIC_VM_RUNS=$RNIC_RUN/rnic-vm
# What is built from the checkout at boot time, outside the cache as well (under
# RNIC_BUILDS, by default RNIC_RUN): rnic.ko (kernel-module.sh) and the kernel and verbs
# guests' images, a cached base image with rnic.ko and the provider, or rnic's libibverbs,
# appended (build-debian-guest.sh).
RNIC_BUILDS=${RNIC_BUILDS:-$RNIC_RUN}
# shellcheck disable=SC2034
MODULE_BUILDS=$RNIC_BUILDS/kernel-module
# shellcheck disable=SC2034
KERNEL_IMAGES=$RNIC_BUILDS/kernel-guest
# shellcheck disable=SC2034
VERBS_IMAGES=$RNIC_BUILDS/verbs-guest
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
# The kernel guest's package layers (layer.sh fio|nfs; boot.sh --layer) are in
# $RNIC_CACHE/fio-layer and $RNIC_CACHE/nfs-layer.
# Debian trixie's rdma-core and perftest packages unpacked, the reference of rnic's
# libibverbs (ibverbs-ref.sh; ibverbs/ reads it).
# shellcheck disable=SC2034
IBVERBS_REF=$RNIC_CACHE/ibverbs-ref

# The Debian mirror the host's own apt already uses, so no host name lives in the repo
# (empty when none is found: debootstrap then picks Debian's default). Only a Debian host's
# mirror carries Debian: on any other host (Ubuntu) it is Debian's own,
# http://deb.debian.org/debian.
host_mirror() {
    local uri="" id
    # RNIC_OS_RELEASE: another os-release file, for tests.
    id=$(sed -n 's/^ID=//p' "${RNIC_OS_RELEASE:-/etc/os-release}" 2>/dev/null | tr -d "\"'")
    if [ "$id" != debian ]; then
        echo http://deb.debian.org/debian
        return
    fi
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
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o APT::Status-Fd=3 "${missing[@]}" 3> >(apt_progress >&2) >/dev/null
}

# Turns apt's status lines (APT::Status-Fd) into a line at every 10% of the download and
# of the installation: "[apt] downloading 40%", "[apt] installing 70%".
apt_progress() {
    awk -F: '
        $1 == "dlstatus" && int($3 / 10) > dl { dl = int($3 / 10); printf "[apt] downloading %d%%\n", dl * 10; fflush() }
        $1 == "pmstatus" && int($3 / 10) > pm { pm = int($3 / 10); printf "[apt] installing %d%%\n", pm * 10; fflush() }
    ' dl=-1 pm=-1
}

# debootstrap, with progress: its whole output goes where the caller sends it (a log, as a
# rule), and a line per phase and per 25 packages fetched to the stderr that setup.sh
# started with (RNIC_PROGRESS_FD, which it opens; without it, no progress).
debootstrap() {
    if [ -z "${RNIC_PROGRESS_FD:-}" ] || [ ! -e "/proc/self/fd/$RNIC_PROGRESS_FD" ]; then
        command debootstrap "$@"
        return
    fi
    command debootstrap "$@" 2>&1 | tee >(awk '
        /^I: Retrieving / && $3 != "InRelease" && $3 != "Packages" { n++; if (n % 25 == 0) { printf "[debootstrap] %d packages fetched\n", n; fflush() } }
        /^I: Extracting / && !x { x = 1; printf "[debootstrap] %d packages fetched; extracting\n", n; fflush() }
        /^I: Installing core packages/ { print "[debootstrap] installing the core packages"; fflush() }
        /^I: Unpacking required packages/ { print "[debootstrap] unpacking"; fflush() }
        /^I: Configuring required packages/ { print "[debootstrap] configuring"; fflush() }
        /^I: Base system installed successfully/ { print "[debootstrap] done"; fflush() }
        /^E: / { print "[debootstrap] " $0; fflush() }
    ' >&"$RNIC_PROGRESS_FD")
    return "${PIPESTATUS[0]}"
}

# Runs CMD... chrooted into ROOT with DIR (a writable directory outside the root) at the
# root's /mnt, in a mount namespace of its own: the root itself may be read-only, and
# nothing stays mounted.
chroot_with_mnt() { # ROOT DIR CMD...
    local root=$1 dir=$2
    shift 2
    unshare --mount --propagation private -- \
        sh -c 'mount --bind "$2" "$1/mnt" && shift 2 && exec chroot "$@"' sh "$root" "$dir" "$root" "$@"
}

# Downloads PKG... with apt in the guests' root ($RXE_ROOT) into DIR/debs (DIR inside the
# root) and unpacks each into DEST: not installed, no maintainer script runs.
download_unpack() { # DIR DEST PKG...
    local dir=$1 dest=$2 deb
    shift 2
    mkdir -p "$dir/debs" "$dest"
    chroot "$RXE_ROOT" sh -c 'cd "$0" && apt-get download -qq -o APT::Sandbox::User=root "$@"' \
        "${dir#"$RXE_ROOT"}/debs" "$@" >/dev/null || return 1
    for deb in "$dir"/debs/*.deb; do
        dpkg-deb -x "$deb" "$dest"
    done
}

# Packs the directory STAGE as a zstd-compressed newc cpio (everything owned by root, in
# name order: the same bytes for the same files) into FILE, which it replaces at once.
pack_layer() { # STAGE FILE
    local tmp
    tmp=$(mktemp "$(dirname "$2")/.layer.XXXXXX") || return 1
    if (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | "$GUEST_KIT/busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
        zstd -q -T0 -12 >"$tmp"; then
        chmod 644 "$tmp" && mv -f "$tmp" "$2"
    else
        rm -f "$tmp"
        return 1
    fi
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
    # 3>: apt's status lines, shown as progress (apt_progress).
    chroot "$root" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends -o APT::Status-Fd=3 "${release[@]}" "$@" \
        3> >(apt_progress >&2) 2>&1 >/dev/null |
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
# into the root, and $RNIC_VM_RUNS onto the root's /run (so QEMU reaches the run
# directories, which live outside the cache): the mounts vanish with QEMU, so nothing is
# left mounted on the host (an `rm -rf` of the cache can never reach the host's /dev),
# concurrent runs do not interfere, and the root itself may be read-only.
# The pid of the process started from this prefix is QEMU's own pid (every step execs).
qemu_argv() {
    if qemu_in_root; then
        # shellcheck disable=SC2016 # expanded by the inner sh
        printf '%s\n' unshare --mount --propagation private -- sh -c \
            'mkdir -p "$1" && mount --rbind /dev "$0/dev" && mount --bind /proc "$0/proc" && mount --bind "$1" "$0/run" && shift && exec chroot "$0" qemu-system-x86_64 "$@"' \
            "$TRIXIE_ROOT" "$RNIC_VM_RUNS"
    else
        printf '%s\n' qemu-system-x86_64
    fi
}
qemu_cmd() {
    local argv
    mapfile -t argv < <(qemu_argv)
    "${argv[@]}" "$@"
}

# Prints PATH (absolute, on the host) as QEMU sees it: inside the trixie root a path under
# $RNIC_VM_RUNS is under /run there, one elsewhere in the root loses the $TRIXIE_ROOT
# prefix, and any other path fails.
qemu_path() {
    local p
    p=$(realpath -m -- "$1")
    if qemu_in_root; then
        local root runs
        root=$(realpath -m -- "$TRIXIE_ROOT")
        runs=$(realpath -m -- "$RNIC_VM_RUNS")
        case $p in
        "$runs"/*) p=/run/${p#"$runs"/} ;;
        "$root"/run/*)
            echo "qemu_path: $p is hidden from QEMU, which sees $RNIC_VM_RUNS at the root's /run; put it under $RNIC_VM_RUNS" >&2
            return 1
            ;;
        "$root"/*) p=${p#"$root"} ;;
        *)
            echo "qemu_path: $p is out of reach of QEMU, which runs inside $TRIXIE_ROOT; put it under $RNIC_VM_RUNS" >&2
            return 1
            ;;
        esac
    fi
    echo "$p"
}

# Whether a guest kernel runs under KVM here: boots KERNEL (a path as QEMU sees it) with
# -accel kvm and no root file system, and succeeds once the kernel gets as far as looking
# for its root (it then panics), fails as soon as QEMU reports a KVM error. A real run,
# not a look at /dev/kvm: nested KVM may open and create VMs fine, yet fail on the first
# instructions the kernel's decompressor runs ("KVM internal error ... emulation
# failure", QEMU then hangs). The answer is kept in /run (until the host reboots).
kvm_probe() { # KERNEL
    local kernel=$1 key cache=/run/rnic-kvm-probe out pid i verdict=""
    key="$(uname -r) $(cat "$GUEST_KIT/kernel-version" 2>/dev/null) $(qemu_cmd -version 2>/dev/null | head -n1)"
    if [ -f "$cache" ] && [ "$(head -n1 "$cache")" = "$key" ]; then
        verdict=$(sed -n 2p "$cache")
    else
        out=$(mktemp)
        local argv
        mapfile -t argv < <(qemu_argv)
        "${argv[@]}" -accel kvm -machine q35 -m 256 -display none -nodefaults -no-reboot \
            -serial stdio -kernel "$kernel" -append "console=ttyS0 panic=-1" \
            </dev/null >"$out" 2>&1 &
        pid=$!
        for i in $(seq 150); do
            if grep -qE 'Kernel panic|VFS: Unable to mount root|Run /init' "$out"; then
                verdict=ok
            elif grep -qE 'KVM internal error|emulation failure|failed to initialize kvm|Could not access KVM' "$out"; then
                verdict="a guest kernel fails under KVM here: $(grep -m1 -oE 'KVM internal error[^.]*|emulation failure|failed to initialize kvm[^.]*|Could not access KVM[^.]*' "$out")"
            elif ! kill -0 "$pid" 2>/dev/null; then
                verdict="QEMU with -accel kvm exited: $(grep -v '^$' "$out" | tail -n1)"
            fi
            [ -z "$verdict" ] || break
            [ "$i" -lt 150 ] || verdict="a guest kernel did not start under KVM within 30 s"
            sleep 0.2
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        rm -f "$out"
        printf '%s\n%s\n' "$key" "$verdict" >"$cache" 2>/dev/null || true
    fi
    [ "$verdict" = ok ] || { echo "$verdict"; return 1; }
}

# Prints the accelerator for a guest: "kvm", or "tcg (REASON)". KVM when the device
# (RNIC_KVM_DEV, default /dev/kvm) is a character device this process can open read-write
# and a guest kernel really runs under it (kvm_probe KERNEL, or the command in
# RNIC_KVM_PROBE when set: tests give true or false). RNIC_KVM=0 forces TCG, RNIC_KVM=1
# KVM without any check; a first argument --tcg forces TCG.
choose_accel() { # [--tcg] KERNEL
    local dev=${RNIC_KVM_DEV:-/dev/kvm} why
    if [ "${1:-}" = --tcg ]; then
        echo "tcg (--tcg)"
        return
    fi
    case ${RNIC_KVM:-auto} in
    0) echo "tcg (RNIC_KVM=0)"; return ;;
    1) echo kvm; return ;;
    auto) ;;
    *) echo "tcg (RNIC_KVM=$RNIC_KVM is none of 0, 1, auto)"; return ;;
    esac
    [ -e "$dev" ] || { echo "tcg ($dev does not exist)"; return; }
    [ -c "$dev" ] || { echo "tcg ($dev is not a character device)"; return; }
    # shellcheck disable=SC2188 # opening is the test
    if ! { <>"$dev"; } 2>/dev/null; then
        echo "tcg (cannot open $dev read-write)"
        return
    fi
    if [ -n "${RNIC_KVM_PROBE:-}" ]; then
        $RNIC_KVM_PROBE || { echo "tcg (the probe $RNIC_KVM_PROBE failed)"; return; }
    elif ! why=$(kvm_probe "$1"); then
        echo "tcg ($why)"
        return
    fi
    echo kvm
}
