#!/usr/bin/env bash
# Check the CUDA source `tensorforge codegen --target cuda` writes, for every example graph:
# with nvcc (a GPU machine) it compiles each kernels.cu for sm_80; without it, it compiles
# the file as host C++ with the CUDA keywords stubbed (a syntax and type check only).
# Not part of CI or the tests (nothing there needs a GPU). Usage: tools/check_cuda.sh [BIN]
set -euo pipefail
BIN=${1:-target/release/tensorforge}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
status=0
for g in "$ROOT"/examples/graphs/*.json "$ROOT"/examples/onnx/*/model.onnx; do
  name=$(basename "$(dirname "$g")")_$(basename "$g")
  d="$OUT/$name"
  "$BIN" codegen "$g" --target cuda --out "$d" >/dev/null
  if command -v nvcc >/dev/null; then
    if nvcc -arch=sm_80 -c "$d/kernels.cu" -o "$d/k.o" 2>"$d/err"; then echo "ok (nvcc)  $g"
    else echo "FAIL (nvcc) $g: $(head -3 "$d/err")"; status=1; fi
  else
    printf '#define __global__\n#define __device__\nstatic struct { unsigned x; } blockIdx, blockDim, threadIdx;\n#include "kernels.cu"\n' > "$d/host.cpp"
    if g++ -std=c++17 -fsyntax-only -w "$d/host.cpp" 2>"$d/err"; then echo "ok (host C++ syntax, no nvcc)  $g"
    else echo "FAIL (host C++) $g: $(head -3 "$d/err")"; status=1; fi
  fi
done
exit $status
