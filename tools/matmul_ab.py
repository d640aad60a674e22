#!/usr/bin/env python3
"""Paired A/B timing of two tensorforge binaries on the example graphs and ONNX fixtures.

Usage (from the repository root): python3 tools/matmul_ab.py ROUNDS THREADS, with the old
binary in $TF_BEFORE (default /tmp/tf_before) and the new one at
./target/release/tensorforge. Each round runs `tensorforge run ... --bench --reps 10 --json`
once per binary, alternating which goes first, with RAYON_NUM_THREADS=THREADS; prints the
medians and min/median/max of the per-round old/new ratios (fused and unfused best times).
"""
import json, os, subprocess, statistics as st, sys
A = os.environ.get("TF_BEFORE", "/tmp/tf_before")
B = os.path.abspath("target/release/tensorforge")
ROOT = os.getcwd()
G = [("rmsnorm_swiglu_mlp", ["examples/graphs/rmsnorm_swiglu_mlp.json"]),
     ("attention_softmax", ["examples/graphs/attention_softmax.json"])]
for f in ["bert_block", "llama_block", "mlp_gelu_erf", "tiny_mlp"]:
    G.append((f, [f"examples/onnx/{f}/model.onnx", "--inputs", f"examples/onnx/{f}/inputs"]))
ROUNDS = int(sys.argv[1]); THREADS = sys.argv[2]
env = dict(os.environ, RAYON_NUM_THREADS=THREADS)
def run(b, args):
    o = subprocess.run([b, "run", *args, "--bench", "--reps", "10", "--json"], cwd=ROOT,
                       env=env, capture_output=True, text=True, check=True).stdout
    d = json.loads(o)["bench"]; assert d["agree"]
    return d["fused_ns"], d["unfused_ns"]
def mmm(xs): return f"{min(xs):.2f}/{st.median(xs):.2f}/{max(xs):.2f}"
print(f"threads={THREADS} rounds={ROUNDS}")
print("graph | old fused us (med) | new fused us (med) | fused old/new min/med/max | unfused old/new min/med/max")
for name, args in G:
    fa, fb, ua, ub = [], [], [], []
    for r in range(ROUNDS):
        for who in ((A, B) if r % 2 == 0 else (B, A)):
            f, u = run(who, args)
            (fa if who == A else fb).append(f); (ua if who == A else ub).append(u)
    rf = [a / b for a, b in zip(fa, fb)]; ru = [a / b for a, b in zip(ua, ub)]
    print(f"{name} | {st.median(fa)/1e3:.1f} | {st.median(fb)/1e3:.1f} | {mmm(rf)} | {mmm(ru)}", flush=True)
