#!/usr/bin/env bash
# Measures issue 10's targets on a real machine (this one: 2 shared cores). Not part of CI:
# it takes about 30-45 minutes in all. Each part prints one summary line per target; record
# them, with this command, in docs/policy.md ("Measured on a shared machine").
#
#   (the main job's trials per metric, with real slowdowns: tools/quickstart_trials.py)
#   tools/gate_trials.sh quickstart [RUNS]      # back-to-back quickstart runs in one store,
#                                              # the second half with one core kept busy
#   tools/gate_trials.sh compare [SLOW] [AA]    # tensorforge compare: 10 % slowdown trials
#                                              # and A/A trials (wall mode, shell loops)
#   tools/gate_trials.sh compare-records [AA] [SLOW] [WORKLOAD]
#                                              # compare --mode records on `bench WORKLOAD`
#                                              # (default gemm_tiny): A/A trials and 10 %
#                                              # injected-slowdown trials, the second half
#                                              # of each with one core kept busy (issue 24)
#   tools/gate_trials.sh history [TRIALS]       # history gate: 10 runs of history, then
#                                              # trials with a 10 % injected slowdown and A/A
#   tools/gate_trials.sh instructions           # callgrind counts: idle vs one core busy
#   tools/gate_trials.sh all
#
# TF (default target/release/tensorforge) is the binary under test; build it first with
# `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
TF=${TF:-target/release/tensorforge}
[ -x "$TF" ] || { echo "no $TF: run cargo build --release first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/tf-trials.XXXXXX)
LOAD_PID=""
cleanup() { [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start_load() { sh -c 'while :; do :; done' & LOAD_PID=$!; }
stop_load() { [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true; LOAD_PID=""; }

quickstart_trials() {
  local runs=${1:-50} half store code n_fail=0 n_pass=0 n_inc=0 n_err=0 n_viol=0
  half=$((runs / 2)); store="$WORK/qs.sqlite"
  for i in $(seq 1 "$runs"); do
    [ "$i" -eq $((half + 1)) ] && start_load
    set +e
    "$TF" quickstart --store "$store" --out-dir "$WORK/qs" >"$WORK/qs.out" 2>"$WORK/qs.err"
    code=$?
    set -e
    case $code in 0) n_pass=$((n_pass+1));; 1) n_fail=$((n_fail+1));; 3) n_inc=$((n_inc+1));; *) n_err=$((n_err+1));; esac
    v=$(grep -c '^ceiling violated' "$WORK/qs.out" || true); n_viol=$((n_viol + v))
    echo "quickstart run $i ($([ "$i" -gt "$half" ] && echo loaded || echo idle)): exit $code, $(head -1 "$WORK/qs.out"), ceiling violations $v"
    [ "$code" -eq 1 ] && sed 's/^/    /' "$WORK/qs.out"
  done
  stop_load
  echo "SUMMARY quickstart: $runs runs (second half with one core busy): PASS/baseline $n_pass, FAIL $n_fail, INCONCLUSIVE $n_inc, ERROR $n_err; ceiling-violation lines $n_viol"
}

loop_cmd() { echo "sh -c 'i=0; while [ \$i -lt $1 ]; do i=\$((i+1)); done'"; }

compare_trials() {
  local slow=${1:-20} aa=${2:-100} n code f=0 p=0 base cand
  base=$(loop_cmd 100000); cand=$(loop_cmd 110000)
  for n in $(seq 1 "$slow"); do
    set +e; "$TF" compare --baseline "$base" --candidate "$cand" --name loop >"$WORK/c.out" 2>/dev/null; code=$?; set -e
    [ "$code" -eq 1 ] && f=$((f+1))
    echo "compare 10 % slowdown trial $n: exit $code: $(sed -n 2p "$WORK/c.out" | cut -c1-160)"
  done
  echo "SUMMARY compare 10 % more work: FAIL in $f of $slow trials"
  for n in $(seq 1 "$aa"); do
    set +e; "$TF" compare --baseline "$base" --candidate "$base" --name loop >"$WORK/c.out" 2>/dev/null; code=$?; set -e
    [ "$code" -eq 0 ] && p=$((p+1))
    echo "compare A/A trial $n: exit $code: $(sed -n 2p "$WORK/c.out" | cut -c1-160)"
  done
  echo "SUMMARY compare A/A: PASS in $p of $aa trials"
}

# One `compare --mode records` trial: baseline command, candidate command, label. Prints one
# line and sets CR_CODE (the exit status).
compare_records_one() {
  local t0 t1
  t0=$(date +%s)
  set +e; "$TF" compare --baseline "$1" --candidate "$2" --mode records --json >"$WORK/cr.json" 2>/dev/null; CR_CODE=$?; set -e
  t1=$(date +%s)
  echo "$3: exit $CR_CODE, $((t1 - t0)) s: $(python3 - "$WORK/cr.json" <<'PY' 2>/dev/null || echo "(no JSON)"
import json, sys
d = json.load(open(sys.argv[1]))
pct = lambda x: "n/a" if x is None else f"{x * 100:+.1f} %"
for r in d["result"]["rows"]:
    iv = r["interval"]
    print(f'{r["workload"]} {r["verdict"]} after {r["rounds"]} rounds: change {pct(r["change_relative"])}'
          f' [{pct(iv[0]) if iv else "n/a"}, {pct(iv[1]) if iv else "n/a"}],'
          f' lower bound {pct(r["lower_bound_relative"])}, {r["rounds_beyond"]}/{r["rounds"]} beyond'
          f' {r["allowed_relative"] * 100:.0f} %, p = {r["p_adjusted"] if r["p_adjusted"] is not None else r["p_value"]:.2e}'
          f' (level {r["alpha_look"]:.2e}), same-side pair spread {pct(r["pair_spread_relative"])}', end="; ")
PY
)"
}

# Issue 24: A/A and 10 % slowdown trials of `compare --mode records` on `bench WORKLOAD`, the
# second half of each kind with one core kept busy. The slowdown is real extra CPU work
# (TENSORFORGE_INJECT_EXTRA_WORK) on the candidate side only.
compare_records_trials() {
  local aa=${1:-20} slow=${2:-10} w=${3:-gemm_tiny} n half cond base cand
  base="$TF bench $w --json --threads 1"
  cand="env TENSORFORGE_INJECT_EXTRA_WORK=$w=0.10 $base"
  declare -A count=()
  half=$((aa / 2))
  for n in $(seq 1 "$aa"); do
    [ "$n" -eq $((half + 1)) ] && start_load
    cond=$([ "$n" -gt "$half" ] && echo loaded || echo idle)
    compare_records_one "$base" "$base" "compare-records A/A trial $n ($cond)"
    count[aa_${cond}_$CR_CODE]=$(( ${count[aa_${cond}_$CR_CODE]:-0} + 1 ))
  done
  stop_load
  half=$((slow / 2))
  for n in $(seq 1 "$slow"); do
    [ "$n" -eq $((half + 1)) ] && start_load
    cond=$([ "$n" -gt "$half" ] && echo loaded || echo idle)
    compare_records_one "$base" "$cand" "compare-records 10 % slowdown trial $n ($cond)"
    count[slow_${cond}_$CR_CODE]=$(( ${count[slow_${cond}_$CR_CODE]:-0} + 1 ))
  done
  stop_load
  for k in aa slow; do
    for cond in idle loaded; do
      echo "SUMMARY compare-records $k $w ($cond): PASS ${count[${k}_${cond}_0]:-0}, FAIL ${count[${k}_${cond}_1]:-0}, INCONCLUSIVE ${count[${k}_${cond}_3]:-0}, ERROR ${count[${k}_${cond}_2]:-0}"
    done
  done
}

history_trials() {
  local trials=${1:-20} store="$WORK/h.sqlite" w1="gemm:m=256:n=256:k=256" w2="kernel:softmax:rows=256:cols=1024"
  local bench=("$TF" bench "$w1" "$w2" --threads 1 --time-budget-ms 200 --iterations 20)
  for i in $(seq 1 10); do "${bench[@]}" --store "$store" --label trial=history >/dev/null; done
  local f=0 f1=0 aa_f=0 code
  for n in $(seq 1 "$trials"); do
    TENSORFORGE_INJECT_EXTRA_WORK="$w1=0.10" "${bench[@]}" --json | python3 -c 'import json,sys; [print(json.dumps(r)) for r in json.load(sys.stdin)["records"]]' >"$WORK/cand.jsonl"
    set +e; "$TF" gate --history 10 --store "$store" --candidate "$WORK/cand.jsonl" >"$WORK/g.out" 2>&1; code=$?; set -e
    local first=$code
    if [ "$code" -eq 3 ]; then
      # INCONCLUSIVE: measure the candidate once more; both runs are the candidate side.
      TENSORFORGE_INJECT_EXTRA_WORK="$w1=0.10" "${bench[@]}" --json | python3 -c 'import json,sys; [print(json.dumps(r)) for r in json.load(sys.stdin)["records"]]' >>"$WORK/cand.jsonl"
      set +e; "$TF" gate --history 10 --store "$store" --candidate "$WORK/cand.jsonl" >"$WORK/g.out" 2>&1; code=$?; set -e
    fi
    [ "$first" -eq 1 ] && f1=$((f1+1))
    [ "$code" -eq 1 ] && f=$((f+1))
    echo "history trial $n (10 % slowdown of $w1): first gate exit $first, final exit $code: $(grep "$w1 *latency_p50" "$WORK/g.out" | head -1 | tr -s ' ')"
    # A/A against the same history.
    "${bench[@]}" --json | python3 -c 'import json,sys; [print(json.dumps(r)) for r in json.load(sys.stdin)["records"]]' >"$WORK/aa.jsonl"
    set +e; "$TF" gate --history 10 --store "$store" --candidate "$WORK/aa.jsonl" >/dev/null 2>&1; code=$?; set -e
    [ "$code" -eq 1 ] && aa_f=$((aa_f+1))
  done
  echo "SUMMARY history gate (10 runs of history): 10 % slowdown FAIL at first gate in $f1 of $trials, after one confirmation in $f of $trials; A/A FAIL in $aa_f of $trials"
}

instruction_trials() {
  local w="gemm:m=256:n=256:k=256" a b
  a=$("$TF" bench "$w" --threads 1 --time-budget-ms 10 --instructions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["records"][0]["instructions"])')
  start_load
  b=$("$TF" bench "$w" --threads 1 --time-budget-ms 10 --instructions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["records"][0]["instructions"])')
  stop_load
  python3 -c "a,b=$a,$b; print(f'SUMMARY instructions {\"$w\"}: idle {a:.0f}, one core busy {b:.0f}, difference {abs(a-b)/a*100:.4f} %')"
}

case "${1:-all}" in
  quickstart) quickstart_trials "${2:-50}" ;;
  compare) compare_trials "${2:-20}" "${3:-100}" ;;
  compare-records) compare_records_trials "${2:-20}" "${3:-10}" "${4:-gemm_tiny}" ;;
  history) history_trials "${2:-20}" ;;
  instructions) instruction_trials ;;
  all) instruction_trials; history_trials 20; compare_trials 20 100; quickstart_trials 50 ;;
  *) echo "usage: $0 quickstart|compare|compare-records|history|instructions|all" >&2; exit 2 ;;
esac
