#!/usr/bin/env python3
"""Per-layer times of one model, TensorForge's kernels beside onnxruntime's nodes (issue 27:
which layer loses, by how much, and what its geometry is).

Runs `tensorforge run MODEL --profile --json` (best time of each kernel over --reps runs) and
`tensorforge fuse MODEL --json` (which ONNX nodes and tensors each kernel covers), and
onnxruntime with its profiler (best time of each node over 50 runs). A kernel is
matched with onnxruntime's nodes that write one of the tensors it writes, or that carry one
of its nodes' names (onnxruntime names its NCHWc nodes after their output tensor, with
`_nchwc`); onnxruntime's layout reorders (`ReorderInput`/`ReorderOutput`) have no kernel of
ours and are listed apart. Both sides are the best of 50 runs of the whole model at the
same thread count, each timed by its own profiler (onnxruntime's adds its profiling cost to
every node, so its node times sum to more than its unprofiled run); the sums say how much of
the run they cover. Prints one row per
kernel, slowest first: µs ours, µs onnxruntime, ratio (ours ÷ onnxruntime), the first op's
geometry (Conv: channels in → out, groups, kernel, stride, output map).

Usage (repository root, onnxruntime, onnx and numpy installed):
    python tools/layer_compare.py BIN DIR [THREADS] [TOP]
DIR holds model.onnx and inputs/*.npy (tools/export_bench_models.py writes such folders); a
symbolic input dim takes its value from the input's .npy.
"""
import collections
import json
import os
import subprocess
import sys

import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ort_profile  # noqa: E402  (tools/ort_profile.py, beside this file)


def ort_times(d, threads):
    """onnxruntime's best time per node (µs) and op types (`ort_profile.node_times`)."""
    t = ort_profile.node_times(d, threads)
    return {n: v[1] for n, v in t.items()}, {n: v[2] for n, v in t.items()}


def kind(ops, geo):
    """The row's layer kind: a convolution by kernel size (depthwise apart from grouped-by-one),
    anything else by its ops."""
    if not geo.startswith("Conv"):
        return ops
    words = geo.split(" out ")[0].split()
    k = next((w for w in words if w.startswith("k")), "")
    return f"Conv g1 {k}" if "g1" in words else f"Conv depthwise {k}"


def geometry(model):
    """ONNX node name -> a short description of its op and shapes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        shapes[vi.name] = [x.dim_value or "?" for x in vi.type.tensor_type.shape.dim]
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    out = {}
    for n in model.graph.node:
        desc = n.op_type
        if n.op_type == "Conv":
            a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            w = shapes.get(n.input[1], ["?"] * 4)
            o = shapes.get(n.output[0], ["?"] * 4)
            g = a.get("group", 1)
            cin = w[1] * g if isinstance(w[1], int) else "?"
            k = "x".join(str(x) for x in a.get("kernel_shape", w[2:]))
            s = "x".join(str(x) for x in a.get("strides", [1]))
            desc = f"Conv {cin}->{w[0]} g{g} k{k} s{s} out {'x'.join(str(x) for x in o[2:])}"
        elif n.output and n.output[0] in shapes:
            desc = f"{n.op_type} {'x'.join(str(x) for x in shapes[n.output[0]])}"
        out[n.name] = desc
    return out


def dim_args(model, inputs):
    """`--dim NAME=VALUE` for every symbolic dim of the graph inputs, read from the shape of
    the input's .npy in `inputs` (for `tensorforge fuse`, which takes no inputs)."""
    import numpy as np
    out = {}
    for i in model.graph.input:
        f = os.path.join(inputs, i.name + ".npy")
        if not os.path.exists(f):
            continue
        shape = np.load(f, mmap_mode="r").shape
        for d, n in zip(i.type.tensor_type.shape.dim, shape):
            if d.dim_param:
                out[d.dim_param] = n
    return [a for k, v in sorted(out.items()) for a in ("--dim", f"{k}={v}")]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, d = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    m = os.path.join(d, "model.onnx")
    prof = json.loads(subprocess.run(
        [binary, "run", m, "--inputs", os.path.join(d, "inputs"), "--profile", "--json",
         "--threads", str(threads), "--reps", "50"], check=True, capture_output=True, text=True).stdout)
    dims = dim_args(onnx.load(m), os.path.join(d, "inputs"))
    fused = json.loads(subprocess.run([binary, "fuse", m, "--json", *dims], check=True,
                                      capture_output=True, text=True).stdout)
    ort_us, ort_ops = ort_times(d, threads)
    geo = geometry(onnx.load(m))
    kernels = {k["name"]: k for k in fused["kernels"]}
    used = set()
    rows = []
    for p in prof["profile"]:
        k = kernels.get(p["kernel"], {"nodes": [], "writes": []})
        keys = set(k["writes"]) | set(k["nodes"])
        mine = [n for n in ort_us if n.removesuffix("_nchwc") in keys and n not in used]
        used.update(mine)
        o = sum(ort_us[n] for n in mine)
        first = k["nodes"][0] if k["nodes"] else ""
        rows.append((p["best_ns"] / 1000, o, p["ops"], geo.get(first, "")))
    rest = collections.defaultdict(float)
    for n, us in ort_us.items():
        if n not in used:
            rest[ort_ops[n]] += us
    print(f"{os.path.basename(d.rstrip('/'))}: {threads} thread(s); ours = best of 50 per kernel, "
          f"onnxruntime {ort.__version__} = best of 50 per node (profiled)")
    print(f"sum: ours {sum(r[0] for r in rows):.0f} µs, onnxruntime matched "
          f"{sum(r[1] for r in rows):.0f} µs + unmatched {sum(rest.values()):.0f} µs "
          + ", ".join(f"{op} {us:.0f}" for op, us in sorted(rest.items(), key=lambda x: -x[1])))
    by = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        key = kind(r[2], r[3])
        by[key][0] += r[0]
        by[key][1] += r[1]
        by[key][2] += 1
    print("per kind:")
    for key, (a, b, c) in sorted(by.items(), key=lambda x: -x[1][0]):
        print(f"  {key:40s} {c:3d}  ours {a:8.0f}  ort {b:8.0f}  {a / b if b else float('nan'):5.2f}x")
    print("per kernel, slowest first:")
    for a, b, ops, g in rows[:top]:
        print(f"  {a:8.1f} {b:8.1f} {a / b if b else float('nan'):5.2f}x  {ops[:34]:34s} {g}")


if __name__ == "__main__":
    main()
