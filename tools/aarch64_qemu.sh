#!/usr/bin/env bash
# Build the compute crates for aarch64 (64-bit Arm, NEON) and run their tests under qemu-user
# on an x86-64 machine: the NEON paths of the kernels' vector math (`vmath`), the executor
# and the JIT (which compiles its C with the aarch64 cross compiler, the `CC` of the test
# process) run as they would on an Arm CPU, only slower. Emulation checks correctness, not
# speed: no figure from here is a speed figure.
#
# Usage: tools/aarch64_qemu.sh [extra cargo test args, e.g. `vmath`]
# Installs (once): the Rust target, and Debian's qemu-user, gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross. Crates: core, kernels, graph (the store and measurement crates
# need C libraries for the target, which this script does not cross-build).
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross) >/dev/null
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# The JIT's compiler at run time: aarch64 code for the emulated process to load.
export CC=aarch64-linux-gnu-gcc
# A cross compiler has no native CPU to ask for `-march=native`: name the baseline (NEON is
# part of armv8-a).
export TENSORFORGE_JIT_MARCH=armv8-a
# A cache of its own: the x86-64 JIT cache must not serve this process.
export TENSORFORGE_CACHE_DIR="${TMPDIR:-/tmp}/tensorforge-jit-aarch64"
echo "== $(qemu-aarch64 --version | head -1); $(aarch64-linux-gnu-gcc --version | head -1)"
cargo test --release --target "$target" -p tensorforge-core -p tensorforge-kernels -p tensorforge-graph "$@"
