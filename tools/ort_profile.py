#!/usr/bin/env python3
"""onnxruntime's own per-node times for one model, to set beside `tensorforge run --profile`
(issue 27: which of our kernels is slower than onnxruntime's node for the same work).

Runs the model 50 times after a warm-up with onnxruntime's profiler on, and prints for each
node its 25th-percentile kernel time (µs), op type and output shape, slowest first, after
the sum per op type. onnxruntime fuses nodes of its own (FastGelu, SkipLayerNormalization,
NCHWc convolutions with their activation), so its nodes do not map one to one onto our
kernels: compare per op family, or per layer.

Usage (repository root, onnxruntime and numpy installed):
    python tools/ort_profile.py DIR [THREADS] [TOP]
DIR holds model.onnx and inputs/*.npy (tools/export_bench_models.py writes such folders);
THREADS sets intra-op threads (default 1); TOP how many nodes to list (default 15).
"""
import collections
import glob
import json
import os
import sys

import numpy as np
import onnxruntime as ort


def node_times(d, threads, runs=50):
    """onnxruntime's per-node kernel times for the model in folder `d`, all `runs` runs
    profiled (the first, cold one included): a dict from node name to (25th-percentile µs,
    minimum µs, op type, output shape)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    feeds = {}
    for f in glob.glob(os.path.join(d, "inputs", "*.npy")):
        name = os.path.basename(f)[:-4]
        if name in names:
            feeds[name] = np.load(f)
    for _ in range(runs):
        sess.run(None, feeds)
    path = sess.end_profiling()
    with open(path) as fh:
        events = json.load(fh)
    os.remove(path)
    per_node = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            args = e.get("args", {})
            per_node[e["name"][: -len("_kernel_time")]].append(
                (e["dur"], args.get("op_name"), args.get("output_type_shape"))
            )
    out = {}
    for node, v in per_node.items():
        durs = sorted(x[0] for x in v)
        out[node] = (durs[len(durs) // 4], durs[0], v[0][1], v[0][2])
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    rows = [(us, node, op, shape) for node, (us, _, op, shape) in node_times(d, threads).items()]
    rows.sort(reverse=True)
    by_op = collections.defaultdict(float)
    for r in rows:
        by_op[r[2]] += r[0]
    print(f"onnxruntime {ort.__version__}, {threads} intra-op thread(s), 50 runs, p25 per node")
    print(f"sum of node times: {sum(r[0] for r in rows)} µs")
    for op, us in sorted(by_op.items(), key=lambda x: -x[1]):
        print(f"  {op:28s} {us:9.0f} µs")
    print("slowest nodes:")
    for us, node, op, shape in rows[:top]:
        print(f"  {us:7d} µs  {op:24s} {node[:60]:60s} {shape}")


if __name__ == "__main__":
    main()
