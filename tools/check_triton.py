#!/usr/bin/env python3
"""Run the Triton kernels `tensorforge codegen --target triton` writes under Triton's
interpreter (TRITON_INTERPRET=1, on the CPU, no GPU) and compare every output with
`tensorforge run --executor interpreter` on the same inputs.

Graphs: the example graphs whose fused program is entirely generated, plus small graphs
written here that cover each op family the Triton backend renders (row ops, broadcasts,
casts, quantization, logaddexp). A program with kernels left to the interpreter (matmul,
opaque) cannot be launched on its own and is listed as not checked.

Tolerance: max |triton - interpreter| <= 1e-5 * max(1, max |interpreter|), and the same
non-finite values. Not part of CI (the interpreter is slow, and Triton is a 100 MB wheel);
pinned versions in tools/triton_requirements.txt. Usage:

    /tmp/tritonvenv/bin/python tools/check_triton.py [path/to/tensorforge]

With `--gpu` (a machine with an NVIDIA GPU, PyTorch and Triton; tools/gpu_check.sh runs it)
the same kernels are compiled by Triton for the GPU and run on torch CUDA tensors instead
of the interpreter; the comparison is the same.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types

GPU = "--gpu" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--gpu"]
if not GPU:
    os.environ["TRITON_INTERPRET"] = "1"
import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = ARGS[0] if ARGS else os.path.join(ROOT, "target", "release", "tensorforge")


def to_tensor(a):
    """A flat float32 tensor for the launcher: NumPy-backed under the interpreter, a CUDA
    tensor with --gpu."""
    if not GPU:
        return NpTensor(a)
    import torch

    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32).ravel()).cuda()


def to_numpy(t):
    return t.arr if not GPU else t.detach().cpu().numpy()


class _Storage:
    def __init__(self, arr):
        self.arr = arr

    def data_ptr(self):
        return self.arr.ctypes.data

    def cpu(self):
        return self

    def copy_(self, other):
        pass


class NpTensor:
    """The part of torch.Tensor that Triton's interpreter touches, over a NumPy array (the
    interpreter then reads and writes the array's memory directly)."""

    dtype = "torch.float32"

    def __init__(self, arr):
        self.arr = np.ascontiguousarray(arr, dtype=np.float32).ravel()

    def data_ptr(self):
        return self.arr.ctypes.data

    def untyped_storage(self):
        return _Storage(self.arr)

    def new_empty(self, *a, **k):
        return self

    def set_(self, *a):
        return self

    def storage_offset(self):
        return 0

    def size(self):
        return self.arr.shape

    def stride(self):
        return (1,)

    def copy_(self, other):
        pass


def _fake_torch():
    t = types.ModuleType("torch")
    t.float32 = "float32"
    t.Tensor = NpTensor
    t.empty = lambda n, dtype=None: NpTensor(np.empty(n, np.float32))
    return t


def node(name, op, inputs=(), **attrs):
    n = {"name": name, "op": op, "inputs": list(inputs)}
    if attrs:
        n["attrs"] = attrs
    return n


def inp(name, shape, op="Input"):
    return node(name, op, shape=shape, dtype="fp32")


# Small graphs covering what the backend renders.
EXTRA = {
    "rows_softmax_logsoftmax_lse": [
        inp("x", [33, 70]), node("s", "Softmax", ["x"], axis=-1),
        node("l", "LogSoftmax", ["x"], axis=-1), node("e", "LogSumExp", ["x"], axis=-1),
    ],
    "rmsnorm_reductions": [
        inp("x", [17, 100]), inp("g", [100], "Weight"), node("n", "RMSNorm", ["x", "g"], eps=1e-6),
        node("m", "ReduceMean", ["n"], axis=-1, keepdims=True), node("d", "Sub", ["n", "m"]),
        node("mx", "ReduceMax", ["d"], axis=-1, keepdims=True),
    ],
    "broadcast_casts_quant": [
        inp("x", [4, 6, 50]), inp("b", [6, 1]), inp("c", [50]),
        node("y", "Add", ["x", "b"]), node("z", "Mul", ["y", "c"]),
        node("h", "Cast", ["z"], to="fp16"), node("bf", "Cast", ["h"], to="bf16"),
        node("q", "Quantize", ["bf"], scale=0.01, zero_point=3),
        node("dq", "Dequantize", ["q"], scale=0.01, zero_point=3),
        node("t", "Tanh", ["dq"]), node("sg", "Sigmoid", ["t"]), node("ge", "GELU", ["sg"]),
    ],
    # Exact GELU as torch writes it: the rewrite makes it one GeluErf op.
    "exact_gelu": [
        inp("x", [3000]),
        node("c", "Constant", shape=[], dtype="fp32", value=1.4142135381698608),
        node("one", "Constant", shape=[], dtype="fp32", value=1.0),
        node("half", "Constant", shape=[], dtype="fp32", value=0.5),
        node("s", "Div", ["x", "c"]), node("e", "Erf", ["s"]), node("a", "Add", ["e", "one"]),
        node("m", "Mul", ["x", "a"]), node("y", "Mul", ["m", "half"]),
    ],
    "logaddexp_exp_log": [
        inp("a", [5000]), inp("b", [5000]), node("l", "LogAddExp", ["a", "b"]),
        node("e", "Exp", ["l"]), node("g", "Log", ["e"]), node("p", "Log1p", ["e"]),
        node("s", "Sqrt", ["e"]), node("r", "ReLU", ["g"]),
    ],
}


def graph_inputs(g):
    return {n["name"]: n["attrs"]["shape"] for n in g["nodes"] if n["op"] in ("Input", "Weight")}


def graph_constants(g):
    return {n["name"]: np.full(n["attrs"].get("shape", []), n["attrs"]["value"], np.float32)
            for n in g["nodes"] if n["op"] == "Constant"}


def check(name, path, g, work):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "in"))
    subprocess.run([BIN, "codegen", path, "--target", "triton", "--out", d], check=True,
                   capture_output=True)
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    if manifest["interpreted"]:
        left = ", ".join(f"{k['kernel']} ({k['reason']})" for k in manifest["interpreted"])
        print(f"not checked  {name}: kernels left to the interpreter: {left}")
        return True
    rng = np.random.default_rng(0)
    tensors = {}
    for n, shape in graph_inputs(g).items():
        a = rng.standard_normal(shape).astype(np.float32)
        np.save(os.path.join(d, "in", f"{n}.npy"), a)
        tensors[n] = to_tensor(a)
    for n, a in graph_constants(g).items():
        tensors[n] = to_tensor(a)
    subprocess.run([BIN, "run", path, "--executor", "interpreter", "--inputs",
                    os.path.join(d, "in"), "--out", os.path.join(d, "ref")], check=True,
                   capture_output=True)
    if GPU:
        import torch

        torch.set_default_device("cuda")
    else:
        sys.modules["torch"] = _fake_torch()
    spec = importlib.util.spec_from_file_location(f"k_{name}", os.path.join(d, "launcher.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.run(tensors)
    ok = True
    for f in sorted(os.listdir(os.path.join(d, "ref"))):
        out = f[:-4]
        want = np.load(os.path.join(d, "ref", f)).ravel().astype(np.float64)
        got = to_numpy(tensors[out]).astype(np.float64)
        fin = np.isfinite(want)
        same_nonfinite = np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(
            got[np.isinf(want)], want[np.isinf(want)])
        scale = max(1.0, float(np.max(np.abs(want[fin]))) if fin.any() else 1.0)
        err = float(np.max(np.abs(got[fin] - want[fin]))) / scale if fin.any() else 0.0
        good = err <= 1e-5 and same_nonfinite
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'}         {name}/{out}: max error {err:.1e} of "
              f"max |ref| {scale:.3g}{'' if same_nonfinite else ', non-finite values differ'}")
    return ok


def main():
    ok = True
    with tempfile.TemporaryDirectory() as work:
        gdir = os.path.join(ROOT, "examples", "graphs")
        for f in sorted(os.listdir(gdir)):
            if f.endswith(".json"):
                p = os.path.join(gdir, f)
                ok &= check(f[:-5], p, json.load(open(p)), work)
        for name, nodes in EXTRA.items():
            p = os.path.join(work, f"{name}.json")
            g = {"schema_version": 1, "name": name, "nodes": nodes}
            json.dump(g, open(p, "w"))
            ok &= check(name, p, g, work)
    print("all checked outputs agree" if ok else "DISAGREEMENT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
