#!/usr/bin/env bash
# One-convolution kernel times, builds alternated: for each folder (tools/make_conv_graphs.py
# writes them), ROUNDS rounds of `tensorforge run --profile --reps REPS` with each binary in
# turn, printing every round's best kernel time in µs per binary, summed over the graph's
# kernels (a chain of convolutions is one or two; compare within a line only).
# Usage: tools/conv_layer_times.sh THREADS ROUNDS BIN_A BIN_B DIR...
set -euo pipefail
threads=$1 rounds=$2 a=$3 b=$4
shift 4
t() { "$1" run "$2/model.onnx" --inputs "$2/inputs" --profile --reps 200 --threads "$threads" \
  | awk '/^  k[0-9]+ /{v=$5; if ($6=="ms") v*=1000; t+=v} END {printf "%.1f", t}'; }
for d in "$@"; do
  ra="" rb=""
  for _ in $(seq "$rounds"); do ra="$ra $(t "$a" "$d")"; rb="$rb $(t "$b" "$d")"; done
  echo "$(basename "$d"): A$ra | B$rb"
done
