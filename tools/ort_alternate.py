#!/usr/bin/env python3
"""One model, onnxruntime and `tensorforge run` alternated call by call, for telling the VM's
states apart (docs/performance.md, fourteenth session): each of N lines gives onnxruntime's
best `sess.run` of 2000 calls at one and at two intra-op threads, then, 0.2 s later (so that
onnxruntime's spinning workers are idle), the best whole call of one `tensorforge run --bench
--reps 2400 --threads 2` process, in µs.

Usage (repository root, onnxruntime and numpy installed):
    python tools/ort_alternate.py DIR [N] [--bin target/release/tensorforge]
DIR holds model.onnx and inputs/*.npy.
"""
import json
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 12
    binary = sys.argv[sys.argv.index("--bin") + 1] if "--bin" in sys.argv else "target/release/tensorforge"
    sessions = {}
    for th in (1, 2):
        so = ort.SessionOptions()
        so.intra_op_num_threads = th
        so.inter_op_num_threads = 1
        sessions[th] = ort.InferenceSession(f"{d}/model.onnx", so, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.load(f"{d}/inputs/{i.name}.npy") for i in sessions[1].get_inputs()}

    def best(s):
        b = float("inf")
        for _ in range(2000):
            t = time.perf_counter_ns()
            s.run(None, feeds)
            b = min(b, time.perf_counter_ns() - t)
        return b / 1e3

    for _ in range(n):
        o2, o1 = best(sessions[2]), best(sessions[1])
        time.sleep(0.2)
        out = subprocess.run([binary, "run", f"{d}/model.onnx", "--inputs", f"{d}/inputs", "--bench",
                              "--reps", "2400", "--threads", "2", "--json"],
                             capture_output=True, text=True, check=True).stdout
        t2 = json.loads(out)["bench"]["fused_ns"] / 1e3
        print(f"onnxruntime 1 thread {o1:.0f} µs, 2 threads {o2:.0f} µs; tensorforge 2 threads {t2:.0f} µs", flush=True)


if __name__ == "__main__":
    main()
