#!/usr/bin/env bash
# JIT benchmarks for docs/performance.md: for each graph and thread count, one
# `tensorforge run --bench` (unfused interpreter, fused interpreter and fused JIT timed in
# the same process, best of REPS each; copy bandwidth at the same thread count in the same
# process), repeated ROUNDS times; prints the per-round ratios for min / median / max.
# Usage: tools/jit_bench.sh [BIN] [ROUNDS] [REPS]
set -euo pipefail
BIN=${1:-target/release/tensorforge}
ROUNDS=${2:-5}
REPS=${3:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
N=16777216
cat > "$T/logaddexp_16Mi.json" <<J
{"schema_version":1,"name":"logaddexp_16Mi","nodes":[
 {"name":"a","op":"Input","attrs":{"shape":[$N],"dtype":"fp32"}},
 {"name":"b","op":"Input","attrs":{"shape":[$N],"dtype":"fp32"}},
 {"name":"y","op":"LogAddExp","inputs":["a","b"]}]}
J
cat > "$T/softmax_16Mi.json" <<J
{"schema_version":1,"name":"softmax_16Mi","nodes":[
 {"name":"x","op":"Input","attrs":{"shape":[16384,1024],"dtype":"fp32"}},
 {"name":"y","op":"Softmax","inputs":["x"],"attrs":{"axis":-1}}]}
J
cat > "$T/rmsnorm_16Mi.json" <<J
{"schema_version":1,"name":"rmsnorm_16Mi","nodes":[
 {"name":"x","op":"Input","attrs":{"shape":[16384,1024],"dtype":"fp32"}},
 {"name":"g","op":"Weight","attrs":{"shape":[1024],"dtype":"fp32"}},
 {"name":"y","op":"RMSNorm","inputs":["x","g"],"attrs":{"eps":1e-6}}]}
J
GRAPHS="$ROOT/examples/graphs/elementwise_chain.json $T/logaddexp_16Mi.json $T/softmax_16Mi.json $T/rmsnorm_16Mi.json $ROOT/examples/graphs/logaddexp_chain.json $ROOT/examples/graphs/residual_layernorm.json $ROOT/examples/graphs/attention_softmax.json $ROOT/examples/graphs/rmsnorm_swiglu_mlp.json"
echo "graph threads round unfused_ns fused_interp_ns fused_jit_ns jit_vs_interp copy_fraction kernels_ns kernels_copy_fraction"
for g in $GRAPHS; do
  for th in 1 2; do
    for r in $(seq "$ROUNDS"); do
      RAYON_NUM_THREADS=$th "$BIN" run "$g" --bench --reps "$REPS" --json 2>/dev/null | python3 -c "
import json,sys
d=json.load(sys.stdin); b=d['bench']
print(d['graph'], $th, $r, b['unfused_ns'], b['fused_interpreter_ns'], b['fused_ns'],
      '%.2f' % (b['fused_interpreter_ns']/b['fused_ns']), '%.2f' % b['fused_bandwidth_fraction'], b['fused_kernels_ns'], '%.2f' % b['kernels_bandwidth_fraction'])"
    done
  done
done
# NumPy's logaddexp on the same 16 Mi f32 pairs (single-threaded, as NumPy is), alternated
# with the JIT's run of logaddexp_16Mi in each round. NumPy writes into a preallocated
# `out=` array: jit_kernels_ns (the kernel writing into the run's pooled buffer) is the
# like-for-like figure; jit_ns is the whole call, which also hands back a fresh 64 MiB copy
# of the output.
echo "numpy_vs_jit round numpy_ns jit_ns jit_speedup jit_kernels_ns kernels_speedup"
for r in $(seq "$ROUNDS"); do
  read -r j jk < <(RAYON_NUM_THREADS=1 "$BIN" run "$T/logaddexp_16Mi.json" --bench --reps "$REPS" --json 2>/dev/null | python3 -c "import json,sys; b=json.load(sys.stdin)['bench']; print(b['fused_ns'], b['fused_kernels_ns'])")
  n=$(python3 -c "
import numpy as np, time
rng=np.random.default_rng($r); a=rng.uniform(-1,1,$N).astype(np.float32); b=rng.uniform(-1,1,$N).astype(np.float32); o=np.empty_like(a)
best=1e99
for _ in range($REPS):
    t=time.perf_counter(); np.logaddexp(a,b,out=o); best=min(best,time.perf_counter()-t)
print(int(best*1e9))")
  echo "logaddexp_16Mi $r $n $j $(python3 -c "print('%.2f' % ($n/$j))") $jk $(python3 -c "print('%.2f' % ($n/$jk))")"
done
