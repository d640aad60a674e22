#!/usr/bin/env bash
# Check the CUDA source `tensorforge codegen --target cuda` writes, for every example graph:
# with nvcc (a GPU machine) it compiles each kernels.cu for sm_90; without it, it
# syntax-checks kernels.cu as host C++20 under the CPU emulator the tests use
# (crates/cuda/tests/support/cuda_emu.hpp). The tests themselves compile every kernel with
# NVRTC and run them under that emulator (crates/cuda/tests/generated_cuda.rs).
# Usage: tools/check_cuda.sh [BIN]
set -euo pipefail
BIN=${1:-target/release/tensorforge}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
status=0
for g in "$ROOT"/examples/graphs/*.json "$ROOT"/examples/onnx/*/model.onnx; do
  name=$(basename "$(dirname "$g")")_$(basename "$g")
  d="$OUT/$name"
  "$BIN" codegen "$g" --target cuda --dim batch=1 --dim sequence=16 --out "$d" >/dev/null
  if command -v nvcc >/dev/null; then
    if nvcc -arch=sm_90 -c "$d/kernels.cu" -o "$d/k.o" 2>"$d/err"; then echo "ok (nvcc)  $g"
    else echo "FAIL (nvcc) $g: $(head -3 "$d/err")"; status=1; fi
  else
    if g++ -std=c++20 -fsyntax-only -w -x c++ -include "$ROOT/crates/cuda/tests/support/cuda_emu.hpp" "$d/kernels.cu" 2>"$d/err"; then
      echo "ok (host C++20 under the emulator, no nvcc)  $g"
    else echo "FAIL (host C++) $g: $(head -3 "$d/err")"; status=1; fi
  fi
done
exit $status
