#!/usr/bin/env bash
# Run every cargo-fuzz target in fuzz/ for SECS seconds (default 60) with libFuzzer's
# memory limits, seeded from the repository's example files. A crash, leak, timeout or
# out-of-memory input is minimized (cargo fuzz tmin) into fuzz/regressions/<target>/ and the
# script exits 1; otherwise it prints each target's execution count.
#
# Needs a nightly toolchain and cargo-fuzz:  rustup toolchain install nightly
#                                            cargo install cargo-fuzz --locked
# Usage: tools/fuzz_all.sh [SECS] [TARGET...]
#        FUZZ_RUNS=1000000 tools/fuzz_all.sh 900   # stop each target after 1 M executions
#                                                  # (or SECS, whichever comes first)
# Memory: -max_len=65536 and -malloc_limit_mb=64 — one allocation over 64 MiB from an input of
# at most 64 KiB (over 1000x its size) is reported as a failure; -rss_limit_mb=2048 bounds the
# whole process. Every target also runs under tensorforge_fuzz::within_budget (fuzz/src/lib.rs):
# an input whose parse holds more than 100x its size + 1 MiB of heap at its peak (+ 64 MiB for
# ONNX, the documented floor for folded constants) fails as a crash.
set -euo pipefail
# -O: optimized build without debug assertions (FUZZ_FLAGS= for cargo-fuzz's default build
# with overflow checks, slower).
FUZZ_FLAGS=${FUZZ_FLAGS--O}
SECS=${1:-60}
RUNS_FLAG=${FUZZ_RUNS:+-runs=$FUZZ_RUNS}
shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/fuzz"
TARGETS=${*:-$(cargo +nightly fuzz list)}
seed() { # target, files...
  local t=$1; shift
  mkdir -p "corpus/$t"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "corpus/$t/" || true; done
}
seed graph_json "$ROOT"/examples/graphs/*.json
seed onnx "$ROOT"/examples/graphs/tiny_mlp.onnx
for d in "$ROOT"/examples/onnx/*/; do [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "corpus/onnx/$(basename "$d").onnx" 2>/dev/null || true; done
seed npy "$ROOT"/examples/onnx/*/inputs/*.npy
seed policy "$ROOT"/examples/policy.toml
seed candidates "$ROOT"/examples/holdout.toml
seed hf_config "$ROOT"/examples/models/*.json
seed hardware "$ROOT"/examples/policy.toml
seed records
seed ingest
status=0
printf '%-12s %12s %8s %8s  %s\n' target executions seconds peak_MiB result
for t in $TARGETS; do
  log="$ROOT/fuzz/$t.log"
  if cargo +nightly fuzz run $FUZZ_FLAGS "$t" "corpus/$t" -- -max_total_time="$SECS" $RUNS_FLAG -max_len=65536 \
       -malloc_limit_mb=64 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result=FAIL
    status=1
    mkdir -p "regressions/$t"
    for a in artifacts/"$t"/*; do
      [ -f "$a" ] || continue
      cargo +nightly fuzz tmin $FUZZ_FLAGS "$t" "$a" >/dev/null 2>&1 || true
      cp "$a" "regressions/$t/" || true
    done
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1)
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  printf '%-12s %12s %8s %8s  %s\n' "$t" "${execs:-?}" "${secs:-$SECS}" "${rss:-?}" "$result"
done
exit $status
