# Sourced by the qemu-scripts: where the VM kit lives and how to call QEMU.
# RNIC_CACHE survives across clones on one machine so set-up runs once per machine.
RNIC_CACHE=${RNIC_CACHE:-/var/cache/rnic}
TRIXIE_ROOT=$RNIC_CACHE/trixie-root
GUEST_KIT=$RNIC_CACHE/guest-kit

# Runs the QEMU that has vfio-user-pci: the system one if it has it, else the one inside the
# trixie root (paths given to it must then live inside $TRIXIE_ROOT, see qemu_path).
qemu_in_root() {
    ! { command -v qemu-system-x86_64 >/dev/null 2>&1 &&
        qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"'; }
}
qemu_cmd() {
    if qemu_in_root; then
        chroot "$TRIXIE_ROOT" qemu-system-x86_64 "$@"
    else
        qemu-system-x86_64 "$@"
    fi
}
