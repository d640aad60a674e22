"""The Python package's costs, as one-run ratios and differences from interleaved rounds
(docs/python.md records its output). The figures:

1. Kernel call overhead: ``tf.logaddexp`` on two 16-element float32 arrays from Python, minus
   the same dispatch on the same borrowed arrays timed inside Rust (``_logaddexp_rust_ns``).
2. ``Session.run`` overhead on the tiny_mlp fixture: the Python call minus the library's own
   run (``Session._run_rust_ns``: inputs converted, executed, outputs handed over, no Python
   objects); beside it onnxruntime's Python overhead, its ``sess.run`` minus the ``model_run``
   duration its own profiler records for the same runs.
3. Import time: a fresh interpreter running ``import tensorforge`` minus one running ``pass``.
4. The ResNet fixture through ``Session`` with the global pool and with ``threads=1``.
5. A 64 MiB output: one Softmax over [16384, 1024] through ``Session.run`` and onnxruntime.

Each round alternates the two sides; every figure is the per-call median of its round, and
the report gives min / median / max over rounds. Usage:
``python python/bench/bench_python.py [--rounds 7]`` from the repository root.
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tensorforge as tf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def per_call_ns(f, n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
    return (time.perf_counter_ns() - t0) / n


def spread(xs):
    return f"min {min(xs):.2f} / median {statistics.median(xs):.2f} / max {max(xs):.2f}"


def cpu():
    m = json.loads(tf._native._machine())
    return f"{m['cpu_model']} ({m['simd']}, {m['logical_cores']} logical cores)"


def kernel_overhead(rounds):
    a = np.linspace(-5, 5, 16, dtype=np.float32)
    b = a[::-1].copy()
    n = 20000
    diffs, py_ns, rs_ns = [], [], []
    for _ in range(rounds):
        p = per_call_ns(lambda: tf.logaddexp(a, b), n)
        r = tf._native._logaddexp_rust_ns(a, b, n)
        py_ns.append(p / 1000)
        rs_ns.append(r / 1000)
        diffs.append((p - r) / 1000)
    return py_ns, rs_ns, diffs


def ort_model_run_us(sess_path, feed, n):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ortprof")
    s = ort.InferenceSession(sess_path, so, providers=["CPUExecutionProvider"])
    s.run(None, feed)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        s.run(None, feed)
    wall = (time.perf_counter_ns() - t0) / n / 1000
    prof = s.end_profiling()
    events = json.load(open(prof))
    runs = [e["dur"] for e in events if e.get("name") == "model_run"][1:]
    return wall, statistics.mean(runs[-n:])


def session_overhead(rounds):
    import onnxruntime as ort

    path = str(ROOT / "examples/onnx/tiny_mlp/model.onnx")
    s = tf.Session(path, threads=1)
    x = np.load(ROOT / "examples/onnx/tiny_mlp/inputs/x.npy")
    feed = {"x": x}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    n = 5000
    tf_total, tf_over, ort_total, ort_over = [], [], [], []
    for _ in range(rounds):
        t = per_call_ns(lambda: s.run(None, feed), n) / 1000
        r = s._run_rust_ns(feed, n) / 1000
        tf_total.append(t)
        tf_over.append(t - r)
        ot = per_call_ns(lambda: o.run(None, feed), n) / 1000
        ort_total.append(ot)
        wall, model_run = ort_model_run_us(path, feed, 2000)
        ort_over.append(wall - model_run)
    return tf_total, tf_over, ort_total, ort_over


def session_threads(rounds):
    """The ResNet fixture from Python with the global pool (`threads=None`) and with a pool of
    one thread: what handing each run to the session's own pool costs."""
    import glob

    d = ROOT / "examples/onnx/resnet_ts"
    feed = {pathlib.Path(p).stem: np.load(p) for p in glob.glob(str(d / "inputs/*.npy"))}
    sessions = {t: tf.Session(str(d / "model.onnx"), threads=t) for t in (None, 1)}
    out = {None: [], 1: []}
    for _ in range(rounds):
        for t, s in sessions.items():
            s.run(None, feed)
            out[t].append(per_call_ns(lambda: s.run(None, feed), 300) / 1000)
    return out[None], out[1]


def large_output(rounds):
    """One Softmax over [16384, 1024] float32 (a 64 MiB output) through `Session.run` and
    onnxruntime's `InferenceSession.run`, one intra-op thread each, the outputs dropped after
    each call (both reuse their outputs' memory once the array is gone): per-call ms, best of
    5 calls per round, the two alternated."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    shape = [16384, 1024]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(tempfile.mkdtemp(), "softmax.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    t = tf.Session(path, threads=1)
    for s in (o, t):
        s.run(None, feed)
        s.run(None, feed)

    def best(s):
        return min(per_call_ns(lambda: s.run(None, feed), 1) for _ in range(5)) / 1e6

    tfs, orts = [], []
    for _ in range(rounds):
        tfs.append(best(t))
        orts.append(best(o))
    return tfs, orts


def import_ms(rounds):
    def once(code):
        t0 = time.perf_counter_ns()
        subprocess.run([sys.executable, "-c", code], check=True)
        return (time.perf_counter_ns() - t0) / 1e6

    out = []
    for _ in range(rounds):
        base = once("pass")
        imp = once("import tensorforge")
        out.append(imp - base)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    print(f"CPU: {cpu()}; Python {platform.python_version()}; tensorforge {tf.__version__}")
    py, rs, d = kernel_overhead(a.rounds)
    print(f"logaddexp, 16 f32, from Python: {spread(py)} µs per call")
    print(f"  the same dispatch inside Rust:  {spread(rs)} µs per call")
    print(f"  Python call overhead:           {spread(d)} µs (target < 5)")
    tt, to, ot, oo = session_overhead(a.rounds)
    print(f"tiny_mlp Session.run, tensorforge: {spread(tt)} µs per call; overhead over the library's run {spread(to)} µs")
    print(f"tiny_mlp InferenceSession.run, onnxruntime: {spread(ot)} µs per call; overhead over its profiled model_run {spread(oo)} µs")
    ratio = [b / max(x, 1e-9) for x, b in zip(to, oo)]
    print(f"  onnxruntime overhead / tensorforge overhead: {spread(ratio)} (target > 1)")
    none, one = session_threads(a.rounds)
    print(f"resnet_ts Session.run, threads=None: {spread(none)} µs; threads=1: {spread(one)} µs")
    big_tf, big_ort = large_output(a.rounds)
    print(f"softmax [16384, 1024] Session.run, tensorforge: {spread(big_tf)} ms; onnxruntime: {spread(big_ort)} ms")
    ratio = [b / max(x, 1e-9) for x, b in zip(big_tf, big_ort)]
    print(f"  onnxruntime time / tensorforge time: {spread(ratio)} (> 1: tensorforge faster)")
    im = import_ms(a.rounds)
    print(f"import tensorforge (fresh interpreter, minus `pass`): {spread(im)} ms (target < 100)")


if __name__ == "__main__":
    main()
