#!/usr/bin/env python3
"""onnxruntime vs tensorforge on the ONNX fixtures, at 1 and 2 threads.

Usage (from the repository root, in an environment with onnxruntime and numpy):
python3 tools/matmul_ort.py. onnxruntime: best of 200 `sess.run` calls (intra-op threads
1 or 2, inter-op 1, sequential), after 3 warm-up runs per round, 5 rounds; tensorforge:
the median over the same 5 rounds of `run --bench --reps 10` fused best times
(RAYON_NUM_THREADS set to the same count), interleaved with the onnxruntime rounds.
"""
import glob, json, os, subprocess, sys, time, numpy as np, onnxruntime as ort
B = os.path.abspath("target/release/tensorforge")
ROOT = os.getcwd()
REPS = 200
print("ort", ort.__version__)
print("fixture | threads | ort best us | tf fused best us (median of 5 CLI runs) | tf/ort time ratio")
for f in sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(f"{ROOT}/examples/onnx/*/model.onnx")):
    d = f"{ROOT}/examples/onnx/{f}"
    for th in (1, 2):
        so = ort.SessionOptions(); so.intra_op_num_threads = th; so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        s = ort.InferenceSession(f"{d}/model.onnx", so, providers=["CPUExecutionProvider"])
        feeds = {i.name: np.load(f"{d}/inputs/{i.name}.npy") for i in s.get_inputs()}
        tf = []
        best = float("inf")
        for rnd in range(5):
            for _ in range(3): s.run(None, feeds)
            for _ in range(REPS // 5):
                t0 = time.perf_counter_ns(); s.run(None, feeds); best = min(best, time.perf_counter_ns() - t0)
            o = subprocess.run([B, "run", f"{d}/model.onnx", "--inputs", f"{d}/inputs", "--bench", "--reps", "10", "--json"],
                               env=dict(os.environ, RAYON_NUM_THREADS=str(th)), capture_output=True, text=True, check=True).stdout
            tf.append(json.loads(o)["bench"]["fused_ns"])
        tf.sort(); t = tf[len(tf) // 2]
        print(f"{f} | {th} | {best/1e3:.1f} | {t/1e3:.1f} | {t/best:.2f}", flush=True)
