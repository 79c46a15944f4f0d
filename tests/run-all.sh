#!/usr/bin/env bash
# Runs every test of the project on a fresh machine: installs what the VM tests need
# (idempotently), checks formatting and lints, runs the unit and integration tests, then
# the fuzz targets for a minute each, then the VM tests that boot QEMU guests with the NIC
# attached.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
step() { echo "=== [run-all] $*" >&2; }

step "set-up: QEMU with vfio-user-pci, guest kernel, busybox, the Soft-RoCE guest, Debian's rdma-core for ibverbs/ (skipped where present)"
bash qemu-scripts/setup.sh

step "formatting, lints and the API documentation"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# rustdoc warnings (broken links in the API documentation) fail the run.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "unused dependencies (cargo machete, over every Cargo.toml of the repository, fuzz/ included)"
# cargo-machete reads each crate's sources as text for what a dependency's use looks like
# (`use foo`, `foo::`, `extern crate foo`) and fails on a [dependencies] entry that none of
# them names: no build and no nightly (cargo-udeps needs both, and takes a dev-dependency
# that only doc tests use for unused). It judges only [dependencies]: [dev-dependencies]
# and [build-dependencies] it leaves alone. A dependency used in a way it cannot see (only
# by a macro's expansion, say) goes into its crate's Cargo.toml with the reason:
#   [package.metadata.cargo-machete]
#   ignored = ["name"]   # why
# Today no crate needs one.
cargo machete --version >/dev/null 2>&1 || cargo install --locked cargo-machete --version 0.9.2
cargo machete

step "module dependency cycles: the check's own tests (tests/check-module-cycles-tests.py)"
python3 tests/check-module-cycles-tests.py

step "module dependency cycles: none among device/src's top-level modules, nor in rdma/"
python3 tests/check-module-cycles.py device/src device/src/rdma

step "the datasheet's figures: drawn from the ABI crate by docs/figures/render.py, none stale"
python3 docs/figures/render.py --check

step "the benchmark figures: redrawn by bench/plot.py from the saved run, none stale"
python3 bench/plot.py --check bench/results/2026-11-28-quick docs/figures/perf

step "build the binaries the integration tests start"
cargo build --workspace --bins

step "unit and integration tests (a real rnicd over real vfio-user sockets)"
cargo test --workspace

step "the driver labs: every checker against its reference solution, through rnic-lab"
for lab in $(target/debug/rnic-lab list | cut -d' ' -f1); do
    target/debug/rnic-lab check "$lab" --solution
done

step "fuzz targets, a minute each (cargo fuzz; see fuzz/README.md)"
# The fuzz crate is a workspace of its own (nightly): its lints, as the main workspace's.
(cd fuzz && cargo +nightly clippy --all-targets -- -D warnings)
bash fuzz/run.sh --seconds 60

step "VM tests (QEMU guests with rnic functions attached, and Soft-RoCE guests)"
cargo test -p rnic-tests --test vm -- --ignored --test-threads=1

step "VM test: perftest on a Soft-RoCE guest against rnic-perf on the host (rnicd's Ethernet port)"
cargo test -p rnic-tests --test vm_rxe -- --ignored --test-threads=1

step "VM tests: Debian's verbs programs on rnic's libibverbs (the verbs guest), against each other and against Soft-RoCE"
# A release rnicd: a debug one falls behind a Soft-RoCE guest's bursts (see release_rnicd
# in tests/src/vm.rs). The guests' libibverbs is built by qemu-scripts/build-debian-guest.sh.
cargo build --release -p rnic-device --bin rnicd
cargo test -p rnic-tests --test vm_verbs -- --ignored --test-threads=1

step "VM test: the Linux driver (kernel/rnic.ko, built warning-free at the first boot) in two kernel-driver guests: ping, iperf3, MTU 9000, reload, FLR, link and MAC changes, NVMe and NFS over RDMA, a third guest on the PF"
cargo test -p rnic-tests --test vm_kernel -- --ignored --test-threads=1

step "all tests passed"
