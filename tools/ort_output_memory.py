#!/usr/bin/env python3
"""Whether onnxruntime's `sess.run` pays for fresh output memory (docs/performance.md,
"Outputs handed over"): one Softmax over [16384, 1024] float32 (a 64 MiB output), timed
per call as `sess.run` (onnxruntime allocates the output) and as `run_with_iobinding` with the
output bound to one preallocated NumPy array, 10 calls each after two warm-up calls, at the
intra-op thread count given. If `sess.run` faulted in fresh pages for its output on every
call, it would cost tens of ms more than the bound call (copying 64 MiB into fresh 4 KiB
pages took 57-72 ms on the machine of that section, tools/fresh_pages.c).

Usage: python tools/ort_output_memory.py [THREADS] [--write DIR]
With --write, also saves the model as DIR/model.onnx and its input as DIR/inputs/x.npy (a
folder `tools/ort_compare.py` and `tensorforge run --inputs` take).
"""
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def main():
    args = sys.argv[1:]
    write = None
    if "--write" in args:
        i = args.index("--write")
        write = args[i + 1]
        del args[i : i + 2]
    threads = int(args[0]) if args else 1
    shape = [16384, 1024]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if write:
        os.makedirs(os.path.join(write, "inputs"), exist_ok=True)
        with open(os.path.join(write, "model.onnx"), "wb") as f:
            f.write(m.SerializeToString())
        np.save(os.path.join(write, "inputs", "x.npy"), a)

    def timed(f):
        for _ in range(2):
            f()
        ts = []
        for _ in range(10):
            t = time.perf_counter()
            f()
            ts.append((time.perf_counter() - t) * 1e3)
        ts.sort()
        return ts[0], ts[len(ts) // 2], ts[-1]

    run = timed(lambda: s.run(None, {"x": a}))
    out = np.empty(shape, np.float32)
    io = s.io_binding()
    io.bind_cpu_input("x", a)
    io.bind_output("y", "cpu", 0, np.float32, out.shape, out.ctypes.data)
    bound = timed(lambda: s.run_with_iobinding(io))
    print(f"onnxruntime {ort.__version__}, {threads} thread(s), softmax [16384, 1024], ms min / median / max")
    print("sess.run (output allocated by onnxruntime): %.2f / %.2f / %.2f" % run)
    print("run_with_iobinding (output preallocated):   %.2f / %.2f / %.2f" % bound)


if __name__ == "__main__":
    main()
