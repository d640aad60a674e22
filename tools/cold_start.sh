#!/usr/bin/env bash
# Cold and warm whole-process cost of one `tensorforge run` against a one-shot onnxruntime
# process on the same model and inputs (issue 27): what a user pays to get one answer.
#
#   tools/cold_start.sh [BIN] [MODEL_DIR] [ROUNDS] [PYTHON]
#
# Per round, alternating: tensorforge with an empty JIT cache (cold: parse, import, fuse,
# run interpreted while the generated C compiles in a background build; the time until that
# build ends is reported too, from the cold run's start), tensorforge again with that cache
# (warm: the compiled kernels), and a Python
# process that imports onnxruntime, builds the session and runs once. Wall time of each
# process from the shell, in ms; min / median / max over the rounds.
set -euo pipefail
BIN=${1:-target/release/tensorforge}
DIR=${2:-examples/onnx/bert_sdpa_ts}
ROUNDS=${3:-5}
PY=${4:-python3}
ms() { echo $(( ($2 - $1) / 1000000 )); }
stats() { sort -n | awk '{a[NR]=$1} END {printf "%s / %s / %s ms\n", a[1], a[int((NR+1)/2)], a[NR]}'; }
cold=(); warm=(); ort=(); bg=()
for _ in $(seq "$ROUNDS"); do
  cache=$(mktemp -d)
  t0=$(date +%s%N); TENSORFORGE_CACHE_DIR=$cache "$BIN" run "$DIR/model.onnx" --inputs "$DIR/inputs" >/dev/null 2>&1; t1a=$(date +%s%N)
  # The cold run interprets and leaves the compile to a background build (a `*.bg.sh`
  # script in the cache, removed when it ends): wait for it, so that the runs below neither
  # race it for the cores nor find the cache still empty.
  for _ in $(seq 600); do compgen -G "$cache/*.bg.sh" >/dev/null || break; sleep 0.05; done
  tb=$(date +%s%N); bg+=("$(ms "$t0" "$tb")")
  t1=$(date +%s%N)
  TENSORFORGE_CACHE_DIR=$cache "$BIN" run "$DIR/model.onnx" --inputs "$DIR/inputs" >/dev/null 2>&1; t2=$(date +%s%N)
  "$PY" - "$DIR" <<'EOF'
import glob, os, sys
import numpy as np, onnxruntime as ort
d = sys.argv[1]
s = ort.InferenceSession(f"{d}/model.onnx", providers=["CPUExecutionProvider"])
s.run(None, {i.name: np.load(f"{d}/inputs/{i.name}.npy") for i in s.get_inputs()})
EOF
  t3=$(date +%s%N)
  rm -rf "$cache"
  cold+=("$(ms "$t0" "$t1a")"); warm+=("$(ms "$t1" "$t2")"); ort+=("$(ms "$t2" "$t3")")
done
echo "model: $DIR; $ROUNDS rounds; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo -n "tensorforge run, empty JIT cache: "; printf '%s\n' "${cold[@]}" | stats
echo -n "  its background compile, done by:  "; printf '%s\n' "${bg[@]}" | stats
echo -n "tensorforge run, JIT cache warm:  "; printf '%s\n' "${warm[@]}" | stats
echo -n "onnxruntime one-shot process:     "; printf '%s\n' "${ort[@]}" | stats
