#!/usr/bin/env python3
"""onnxruntime's cost per element of one exact-GELU node, alone, at one thread: a model of
a single Gelu (opset 20, approximate="none"), com.microsoft Gelu, Erf and Tanh over
[1576, 768] f32 (the size tools/gelu_erf_variants.c times) in [-6, 6], output bound to a preallocated array
(no allocation in the timing); best of 200 runs. What the JIT's tf_gelu_erf is compared
with in docs/performance.md ("Exact GELU as one op").

Usage: python3 tools/ort_gelu_node.py   (onnx, onnxruntime, numpy)
"""
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

SHAPE = [1576, 768]


def model(op, opset, domain=""):
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in "xy"]
    g = helper.make_graph([node], "g", [io[0]], [io[1]])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, opset_imports=ops).SerializeToString()


def main():
    x = ((np.random.default_rng(0).random(SHAPE) - 0.5) * 12).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    print(f"onnxruntime {ort.__version__}, one thread, {x.size} elements")
    for name, m in [
        ("Gelu (opset 20)", model("Gelu", 20)),
        ("Gelu (com.microsoft)", model("Gelu", 17, "com.microsoft")),
        ("Erf", model("Erf", 17)),
        ("Tanh", model("Tanh", 17)),
    ]:
        s = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
        out = np.empty_like(x)
        io = s.io_binding()
        io.bind_cpu_input("x", x)
        io.bind_output("y", "cpu", 0, np.float32, out.shape, out.ctypes.data)
        best = float("inf")
        for _ in range(200):
            t = time.perf_counter()
            s.run_with_iobinding(io)
            best = min(best, time.perf_counter() - t)
        print(f"{name:>22}: {best / x.size * 1e9:.3f} ns per element")


if __name__ == "__main__":
    main()
