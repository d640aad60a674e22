#!/usr/bin/env bash
# Everything issue 28 asks of a GPU, in one script that fits the device machine's 10 minutes:
# the GPU's identity, calibration, holdout validation, every generated kernel of every example
# graph and ONNX fixture on the GPU against the CPU executor, kernel bandwidth against the
# calibrated copy bandwidth, a large bf16 GEMM against the tensor-core figures, TensorForge
# against PyTorch eager, and the Triton kernels compiled for the GPU. Each step writes
# OUT/<step>.{out,err} and a line to OUT/steps.log; a failing step does not stop the others.
#
# The machine has no Rust toolchain: build the release binary here and carry it, e.g.
#   cargo build --release && run(command="OUT=$OUT bash tools/gpu_check.sh", carry=["target/release/tensorforge"])
# Commit what comes back under docs/gpu/<date>-<device>/ and summarize it in docs/gpu.md.
# Usage: OUT=DIR tools/gpu_check.sh [BIN]
set -uo pipefail
BIN=${1:-target/release/tensorforge}
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
T0=$(date +%s)

# CUDA libraries: the toolkit's, then the ones PyTorch's wheels bring (NVRTC, cuBLAS).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import glob, site; print(" ".join(glob.glob(site.getsitepackages()[0] + "/nvidia/*/lib")))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH

step() {
  local name=$1
  shift
  local s=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  timeout "$STEP_TIMEOUT" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  local rc=$?
  echo "   $name rc=$rc $(($(date +%s) - s)) s (total $(($(date +%s) - T0)) s)" | tee -a "$OUT/steps.log"
  return 0
}

step context bash -c 'date -u; uname -a; nvidia-smi; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu --format=csv; nvcc --version; python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"; echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH'

# Calibration (JSON profile) and holdout validation against it.
step calibrate "$BIN" calibrate --device cuda --out "$OUT/profile.json" --json
step validate "$BIN" validate --device cuda --profile "$OUT/profile.json" --json

# Bandwidth-bound kernels at >= 64 MiB against a copy of the same bytes in the same run (f32
# storage, and 16-bit storage at 256 MiB per tensor), large bf16 and fp8 GEMMs, and RMSNorm +
# SwiGLU.
step bench_kernels "$BIN" bench --device cuda --json --iterations 20 --time-budget-ms 100 \
  kernel:softmax:rows=16384:cols=4096 kernel:rmsnorm:rows=16384:cols=4096 \
  kernel:logaddexp:rows=16384:cols=4096 kernel:swiglu:rows=16384:cols=4096 \
  kernel:quantize:rows=16384:cols=4096 kernel:softmax:rows=65536:cols=1024 \
  kernel:softmax:rows=32768:cols=4096:dtype=bf16 kernel:rmsnorm:rows=32768:cols=4096:dtype=bf16 \
  kernel:logaddexp:rows=32768:cols=4096:dtype=bf16 kernel:swiglu:rows=32768:cols=4096:dtype=bf16 \
  kernel:softmax:rows=32768:cols=4096:dtype=fp16 \
  gemm:m=8192:n=8192:k=8192:dtype=bf16 gemm:m=16384:n=16384:k=16384:dtype=bf16 \
  gemm:m=8192:n=8192:k=8192:dtype=fp8 gemm:m=16384:n=16384:k=16384:dtype=fp8 \
  rmsnorm_swiglu:tokens=4096:d=4096:f=11008 graph:rmsnorm_swiglu_mlp graph:attention_softmax \
  graph:residual_layernorm

# Every generated kernel of every example graph and ONNX fixture, alone on the GPU, against
# the CPU executor, with f32, f16 and bf16 storage (exit 2 on disagreement).
for g in examples/graphs/*.json; do
  step "run_$(basename "$g" .json)" "$BIN" run "$g" --device cuda --json
done
for d in examples/onnx/*/; do
  n=$(basename "$d")
  [ -f "$d/model.onnx" ] || continue
  if [ -d "$d/inputs" ]; then
    step "run_onnx_$n" "$BIN" run "$d/model.onnx" --inputs "$d/inputs" --device cuda --json
  else
    step "run_onnx_$n" "$BIN" run "$d/model.onnx" --dim batch=1 --dim sequence=16 --device cuda --json
  fi
done

# The main job on the GPU, twice: the first run starts the history, the second is gated
# against it (too little history to FAIL; the report shows the comparison).
step quickstart_1 "$BIN" quickstart --device cuda --out-dir "$OUT/quickstart" --store "$OUT/store.sqlite" --time-budget-ms 100 --json
step quickstart_2 "$BIN" quickstart --device cuda --out-dir "$OUT/quickstart" --store "$OUT/store.sqlite" --time-budget-ms 100 --json

# Against PyTorch eager, and Triton on the GPU.
step torch_compare python3 tools/gpu_torch_compare.py "$BIN" --out "$OUT/torch_compare.json"
step triton_gpu python3 tools/check_triton.py "$BIN" --gpu

# One line per step for the summary.
grep -E "rc=" "$OUT/steps.log" >"$OUT/summary.txt"
echo "done in $(($(date +%s) - T0)) s"
