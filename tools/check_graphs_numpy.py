#!/usr/bin/env python3
"""Check the graph executor against NumPy on the example graphs.

For each example graph this script draws seeded inputs with NumPy, runs
`tensorforge run GRAPH --inputs DIR --out DIR` (fused, then --unfused), and compares every
output with a float64 NumPy implementation of the same graph written here independently.
Prints the worst relative error per graph and path; exits 1 if any exceeds 1e-4 (relative to
max|reference|). Needs numpy and a built binary:

    cargo build --release && python3 tools/check_graphs_numpy.py [path/to/tensorforge]
"""
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXE = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/tensorforge")
rng = np.random.default_rng(2026)


def f32(shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def silu(v):
    return v / (1.0 + np.exp(-v))


def attention_softmax(i):
    s = np.matmul(i["q"].astype(np.float64), np.transpose(i["k"], (0, 2, 1)).astype(np.float64))
    s = s * 0.17677669529663687
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return {"probs": e / e.sum(axis=-1, keepdims=True)}


def logaddexp_chain(i):
    a, b, c = (i[k].astype(np.float64) for k in "abc")
    return {"y": np.logaddexp(np.logaddexp(a, b), c)}


def residual_layernorm(i):
    resid = i["x"].astype(np.float64) + i["r"]
    mu = resid.mean(axis=-1, keepdims=True)
    var = ((resid - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (resid - mu) / np.sqrt(var + 1e-5) * i["gamma"] + i["beta"]
    return {"resid": resid, "y": y}


def rmsnorm_swiglu_mlp(i):
    x = i["x"].astype(np.float64)
    h = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * i["gamma"]
    hidden = silu(h @ i["w_gate"]) * (h @ i["w_up"])
    return {"y": hidden @ i["w_down"] + x}


CASES = {
    "attention_softmax": ({"q": f32((4, 64, 32)), "k": f32((4, 64, 32))}, attention_softmax),
    # logaddexp_chain: arguments far beyond exp's f32 range, where the naive chain overflows
    # and the graph compiler's rewrite to LogAddExp must not.
    "logaddexp_chain": ({k: f32((4096,), 60.0) + 40.0 for k in "abc"}, logaddexp_chain),
    "residual_layernorm": (
        {"x": f32((128, 512)), "r": f32((128, 512)), "gamma": f32((512,)), "beta": f32((512,))},
        residual_layernorm,
    ),
    "rmsnorm_swiglu_mlp": (
        {
            "x": f32((64, 256)),
            "gamma": f32((256,)),
            "w_gate": f32((256, 512), 0.06),
            "w_up": f32((256, 512), 0.06),
            "w_down": f32((512, 256), 0.04),
        },
        rmsnorm_swiglu_mlp,
    ),
}

# The unfused program runs the graph as written (no numerics rewrites), so the naive
# log(exp(a) + exp(b)) chain must overflow on these inputs; the fused program, rewritten to
# LogAddExp, must not. Both facts are checked.
EXPECT_OVERFLOW = {("logaddexp_chain", "unfused")}

worst_all = 0.0
for name, (inputs, ref_fn) in CASES.items():
    ref = ref_fn(inputs)
    with tempfile.TemporaryDirectory() as d:
        ind, outd = pathlib.Path(d, "in"), pathlib.Path(d, "out")
        ind.mkdir()
        for k, v in inputs.items():
            np.save(ind / f"{k}.npy", v)
        for path in ("fused", "unfused"):
            args = [EXE, "run", str(ROOT / f"examples/graphs/{name}.json"),
                    "--inputs", str(ind), "--out", str(outd)]
            if path == "unfused":
                args.append("--unfused")
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
            for out, want in ref.items():
                got = np.load(outd / f"{out}.npy").astype(np.float64)
                if (name, path) in EXPECT_OVERFLOW:
                    ok = not np.all(np.isfinite(got))
                    print(f"{name:20s} {path:8s} {out:6s} overflows as written: {ok} (expected True)")
                    worst_all = worst_all if ok else float("inf")
                    continue
                if not np.all(np.isfinite(got)):
                    rel = float("inf")
                else:
                    rel = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
                worst_all = max(worst_all, rel)
                print(f"{name:20s} {path:8s} {out:6s} max|err|/max|ref| = {rel:.3e}")
print(f"worst {worst_all:.3e}")
sys.exit(0 if worst_all <= 1e-4 else 1)
