#!/usr/bin/env python3
"""TensorForge's generated GPU kernels against PyTorch eager on the same shapes and dtype
(f32; softmax also with bf16 tensors, f32 arithmetic on both sides), on an NVIDIA GPU:
softmax over rows, and RMSNorm + SwiGLU (RMSNorm, the gate and up projections, SiLU(g)·u;
TF32 off on both sides). Both sides are timed the same way: CUDA
events around one call, L2 overwritten before each sample, 5 warm-up calls, median of 30.
TensorForge's figures come from `tensorforge bench --device cuda --json` (its own events,
same protocol); PyTorch's from this process. speedup = PyTorch median / TensorForge median
(> 1: TensorForge is faster). Prints a Markdown table and writes JSON with --out.

Usage (tools/gpu_check.sh runs it): python3 tools/gpu_torch_compare.py BIN [--out FILE]
"""
import json
import subprocess
import sys

import torch

CASES = [
    ("softmax", {"rows": 16384, "cols": 4096}),
    ("softmax", {"rows": 65536, "cols": 1024}),
    ("softmax", {"rows": 4096, "cols": 32768}),
    ("softmax", {"rows": 32768, "cols": 4096, "dtype": "bf16"}),
    ("softmax", {"rows": 131072, "cols": 1024, "dtype": "bf16"}),
    ("rmsnorm_swiglu", {"tokens": 4096, "d": 4096, "f": 11008}),
    ("rmsnorm_swiglu", {"tokens": 512, "d": 4096, "f": 11008}),
]
WARMUP, SAMPLES = 5, 30


def spec(kind, p):
    if kind == "softmax":
        dt = f":dtype={p['dtype']}" if "dtype" in p else ""
        return f"kernel:softmax:rows={p['rows']}:cols={p['cols']}{dt}"
    return f"rmsnorm_swiglu:tokens={p['tokens']}:d={p['d']}:f={p['f']}"


def torch_case(kind, p):
    g = torch.Generator(device="cuda").manual_seed(0)
    if kind == "softmax":
        x = torch.randn(p["rows"], p["cols"], device="cuda", generator=g) * 4
        if p.get("dtype") == "bf16":
            x = x.to(torch.bfloat16)
        return lambda: torch.softmax(x, dim=-1)
    t, d, f = p["tokens"], p["d"], p["f"]
    x = torch.randn(t, d, device="cuda", generator=g)
    gam = torch.rand(d, device="cuda", generator=g)
    wg = torch.randn(d, f, device="cuda", generator=g) / d**0.5
    wu = torch.randn(d, f, device="cuda", generator=g) / d**0.5

    def run():
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gam
        return torch.nn.functional.silu(h @ wg) * (h @ wu)

    return run


def time_torch(fn):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device="cuda")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for i in range(WARMUP + SAMPLES):
        flush.zero_()
        s.record()
        fn()
        e.record()
        e.synchronize()
        if i >= WARMUP:
            out.append(s.elapsed_time(e) * 1e6)
    out.sort()
    return out[len(out) // 2]


def main():
    args = [a for a in sys.argv[1:]]
    out_file = None
    if "--out" in args:
        i = args.index("--out")
        out_file = args[i + 1]
        del args[i : i + 2]
    bin_ = args[0] if args else "target/release/tensorforge"
    torch.backends.cuda.matmul.allow_tf32 = False
    specs = [spec(k, p) for k, p in CASES]
    r = subprocess.run(
        [bin_, "bench", "--device", "cuda", *specs, "--json", "--iterations", str(SAMPLES),
         "--warmup", str(WARMUP), "--time-budget-ms", "1"],
        capture_output=True, text=True, check=True)
    ours = {rec["workload"]["name"]: rec["stats"]["p50_ns"] for rec in json.loads(r.stdout)["records"]}
    rows = []
    for (kind, p), sp in zip(CASES, specs):
        t = time_torch(torch_case(kind, p))
        rows.append({"workload": sp, "torch_eager_p50_ns": t, "tensorforge_p50_ns": ours[sp],
                     "speedup": t / ours[sp]})
    rep = {"schema_version": 1, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "cuda": torch.version.cuda, "rows": rows}
    print("| workload | PyTorch eager p50 | TensorForge p50 | speedup |")
    print("|---|---|---|---|")
    for x in rows:
        print(f"| {x['workload']} | {x['torch_eager_p50_ns'] / 1e3:.1f} µs | "
              f"{x['tensorforge_p50_ns'] / 1e3:.1f} µs | {x['speedup']:.2f} |")
    if out_file:
        json.dump(rep, open(out_file, "w"), indent=1)


if __name__ == "__main__":
    main()
