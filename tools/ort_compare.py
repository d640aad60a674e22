#!/usr/bin/env python3
"""TensorForge's executor against onnxruntime, what a user pays per call, on the same files
and inputs, in interleaved rounds (issue 27's benchmark).

Per model and thread count, each round measures onnxruntime's best `sess.run` over enough
calls to fill about 0.2 s (after warm-up), then TensorForge's best whole `execute` call
(`tensorforge run --bench --reps N --json`, `fused_ns`: binding inputs, every kernel and
handing the outputs over, each run's handed back before the next, as onnxruntime reuses its
outputs' memory, the JIT where it compiles; N calls fill about 0.2 s too, so both
minimums come from as many calls), and records
    ratio = onnxruntime time / TensorForge time   (> 1: TensorForge is faster).
Rounds alternate the two, so drift on a shared machine hits both; the table gives the
ratio's min / median / max over the rounds, and each side's median time. Between
onnxruntime's measurement and TensorForge's process the script waits 0.2 s, so that
onnxruntime's spinning workers (its thread pool spins after each run) have gone idle and do
not share the cores with TensorForge's run.

With `--bin` given more than once, every binary runs in each round, right after
onnxruntime's measurement and in turn (the order rotating from round to round), and the
table has one row per binary: two builds compared against the same onnxruntime figures.

Usage (repository root, with onnxruntime and numpy installed):
    python tools/ort_compare.py [--threads 1,2] [--rounds 5] [--bin target/release/tensorforge ...] [DIR ...]
DIR: folders holding model.onnx and inputs/*.npy (default: every examples/onnx/* fixture;
tools/export_bench_models.py writes larger ones). The first lines name the CPU, its vector
ISA and the SIMD level TensorForge picks (TENSORFORGE_SIMD caps it).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import time

import numpy as np
import onnxruntime as ort


def cpu():
    model, flags = "?", ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    isa = "avx512f" if " avx512f" in flags else "avx2" if " avx2" in flags else "neon/other"
    return model, isa


def ort_best(sess, feeds, budget_s=0.2):
    for _ in range(3):
        sess.run(None, feeds)
    best, t_end = float("inf"), time.perf_counter() + budget_s
    n = 0
    while time.perf_counter() < t_end or n < 5:
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        best = min(best, time.perf_counter_ns() - t0)
        n += 1
    return best


def tf_best(binary, d, threads, reps):
    out = subprocess.run(
        [binary, "run", f"{d}/model.onnx", "--inputs", f"{d}/inputs", "--bench", "--reps", str(reps), "--json"],
        env=dict(os.environ, RAYON_NUM_THREADS=str(threads)), capture_output=True, text=True, check=True).stdout
    b = json.loads(out)["bench"]
    return b["fused_ns"], b["agree"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", action="append")
    a = ap.parse_args()
    bins = a.bin or [os.path.abspath("target/release/tensorforge")]
    dirs = a.dirs or sorted(os.path.dirname(p) for p in glob.glob("examples/onnx/*/model.onnx"))
    model, isa = cpu()
    print(f"cpu: {model}; vector ISA: {isa}; TENSORFORGE_SIMD={os.environ.get('TENSORFORGE_SIMD', '(unset)')}")
    print(f"onnxruntime {ort.__version__}; {a.rounds} interleaved rounds; ratio = ort time / tf time (> 1: tf faster)")
    many = len(bins) > 1
    print(f"| model | threads |{' binary |' if many else ''} ort median µs | tf median µs | ratio min | ratio median | ratio max |")
    print(f"|---|---|{'---|' if many else ''}---|---|---|---|---|")
    for d in dirs:
        name = os.path.basename(os.path.normpath(d))
        for th in [int(t) for t in a.threads.split(",")]:
            so = ort.SessionOptions()
            so.intra_op_num_threads = th
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            sess = ort.InferenceSession(f"{d}/model.onnx", so, providers=["CPUExecutionProvider"])
            feeds = {i.name: np.load(f"{d}/inputs/{i.name}.npy") for i in sess.get_inputs()}
            o = ort_best(sess, feeds, 0.05)
            # Both sides' best over about 0.2 s of calls: a best of fewer calls is a
            # higher minimum on a shared machine (it was capped at 50 calls against
            # onnxruntime's ~2000 for a 100 µs model).
            reps = max(3, min(5000, int(0.2e9 / max(o, 1))))
            os_ = []
            ts = {b: [] for b in bins}
            ratios = {b: [] for b in bins}
            agree = {b: True for b in bins}
            for rnd in range(a.rounds):
                o = ort_best(sess, feeds)
                os_.append(o)
                for i in range(len(bins)):
                    b = bins[(rnd + i) % len(bins)]
                    # onnxruntime's workers spin for a while after a run; TensorForge's
                    # process would share the cores with them. Let them go idle first.
                    time.sleep(0.2)
                    t, ok = tf_best(b, d, th, reps)
                    agree[b] &= ok
                    ts[b].append(t)
                    ratios[b].append(o / t)
            for b in bins:
                r = sorted(ratios[b])
                note = "" if agree[b] else " (fused/unfused DISAGREE)"
                col = f" {b} |" if many else ""
                print(f"| {name} | {th} |{col} {statistics.median(os_)/1e3:.1f} | {statistics.median(ts[b])/1e3:.1f} | "
                      f"{r[0]:.2f} | {statistics.median(r):.2f} | {r[-1]:.2f} |{note}", flush=True)

if __name__ == "__main__":
    main()
