#!/usr/bin/env bash
# Installs the man pages and shell completions of rnicd and the tools, generated from
# their command lines (clap: `RNIC_GENERATE=man|bash|zsh|fish PROGRAM` prints them).
#
#   bash tools/install-docs.sh [--bin-dir DIR] [PREFIX]
#
# PREFIX defaults to /usr/local: man pages go to PREFIX/share/man/man1 (where `man` looks
# by default), completions to PREFIX/share/bash-completion/completions,
# PREFIX/share/zsh/site-functions and PREFIX/share/fish/vendor_completions.d. Without
# --bin-dir the programs are built first (release); with it, DIR's are used as they are.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
programs=(rnicd rnic-admin rnic-info rnic-perf rnic-pingpong rnic-features rnic-eth)
bin_dir=""
prefix=/usr/local
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin_dir="$2"; shift ;;
        -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "usage: bash tools/install-docs.sh [--bin-dir DIR] [PREFIX]" >&2; exit 2 ;;
        *) prefix="$1" ;;
    esac
    shift
done

if [ -z "$bin_dir" ]; then
    echo "[install-docs] building rnicd and the tools (release)" >&2
    (cd "$repo" && cargo build --release --quiet -p rnic-device --bin rnicd -p rnic-tools --bins)
    bin_dir="$repo/target/release"
fi

man1="$prefix/share/man/man1"
bash_dir="$prefix/share/bash-completion/completions"
zsh_dir="$prefix/share/zsh/site-functions"
fish_dir="$prefix/share/fish/vendor_completions.d"
mkdir -p "$man1" "$bash_dir" "$zsh_dir" "$fish_dir"
for p in "${programs[@]}"; do
    exe="$bin_dir/$p"
    [ -x "$exe" ] || { echo "[install-docs] $exe is missing (build it, or drop --bin-dir)" >&2; exit 1; }
    RNIC_GENERATE=man "$exe" >"$man1/$p.1"
    RNIC_GENERATE=bash "$exe" >"$bash_dir/$p"
    RNIC_GENERATE=zsh "$exe" >"$zsh_dir/_$p"
    RNIC_GENERATE=fish "$exe" >"$fish_dir/$p.fish"
done
if command -v mandb >/dev/null && [ -w "$prefix/share/man" ]; then
    mandb -q "$prefix/share/man" 2>/dev/null || true
fi
echo "[install-docs] ${#programs[@]} man pages in $man1 (man rnicd), completions for bash, zsh and fish under $prefix/share" >&2
