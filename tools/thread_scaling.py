#!/usr/bin/env python3
"""Per kernel, one thread against two: how far each kernel's two-thread time is from half
its one-thread time, largest excess first, with the convolution's geometry where there is
one (tools/layer_compare.py's). Shows where a model's second thread is lost (fork and join,
imbalance, single-threaded kernels) rather than guessing from whole runs on a noisy VM.

Each round runs `BIN run MODEL --profile --json --reps 30 --threads T` for T = 1 and 2
alternately; each kernel keeps its best time over the rounds at each thread count.

Usage:
    python tools/thread_scaling.py BIN MODEL_DIR ROUNDS [TOP]

Prints the sums at one and two threads, the ideal (half the one-thread sum), the excess,
then one line per kernel: excess µs, kernel, ops, one- and two-thread µs, speed-up.
Needs the onnx package (for the geometry).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx  # noqa: E402
from layer_compare import geometry  # noqa: E402


def profile(binary, d, threads):
    out = subprocess.run(
        [binary, "run", f"{d}/model.onnx", "--inputs", f"{d}/inputs", "--profile", "--json",
         "--reps", "30", "--threads", str(threads)],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["profile"]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    binary, d, rounds = sys.argv[1], sys.argv[2].rstrip("/"), int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    best = {1: {}, 2: {}}
    ops = {}
    for _ in range(rounds):
        for t in (1, 2):
            for p in profile(binary, d, t):
                k = p["kernel"]
                ops[k] = p["ops"]
                best[t][k] = min(best[t].get(k, float("inf")), p["best_ns"] / 1000)
    fused = json.loads(subprocess.run([binary, "fuse", f"{d}/model.onnx", "--json"], check=True,
                                      capture_output=True, text=True).stdout)
    nodes = {k["name"]: k["nodes"] for k in fused["kernels"]}
    geo = geometry(onnx.load(f"{d}/model.onnx"))
    rows = []
    for k, one in best[1].items():
        two = best[2].get(k, float("nan"))
        first = nodes.get(k, [""])[0] if nodes.get(k) else ""
        rows.append((two - one / 2, k, ops[k], one, two, geo.get(first, "")))
    rows.sort(reverse=True)
    s1, s2 = sum(r[3] for r in rows), sum(r[4] for r in rows)
    print(f"{os.path.basename(d)}: {rounds} alternated rounds, best per kernel")
    print(f"sum 1T {s1:.0f} µs  2T {s2:.0f} µs  ideal {s1 / 2:.0f} µs  excess {s2 - s1 / 2:.0f} µs")
    for ex, k, o, one, two, g in rows[:top]:
        print(f"{ex:7.1f}  {k:5s} {o[:26]:26s} 1T {one:7.1f} 2T {two:7.1f} x{one / two:.2f}  {g}")


if __name__ == "__main__":
    main()
