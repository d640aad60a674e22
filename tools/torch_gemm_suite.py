#!/usr/bin/env python3
"""Measure a GEMM suite on a CUDA device with CUDA events and write TensorForge records.

Each GEMM (C = A @ B, A: m x k, B: k x n, row-major, dense) is warmed up, then timed
iteration by iteration with a pair of CUDA events around each `torch.matmul(..., out=C)`;
every elapsed time is one latency sample (ns). The output is JSON lines in the record
format of docs/records.md (schema_version 1), ready for

    tensorforge records import gemm_gpu.jsonl

What it leaves out: clock locking, L2 flushing between iterations (B and A stay L2-resident
for small sizes; the note says so), multi-GPU runs, and anything but dense GEMM.

The fingerprint is sha256 of the canonical identity JSON
json.dumps({"dtype":..,"kind":..,"params":{...}}, sort_keys=True, separators=(",",":"),
ensure_ascii=False), exactly what Rust's WorkloadIdentity::fingerprint hashes (identity
parameters are integers or strings: Python and Rust print large/small floats differently).
`machine_id` uses the same formula as the Rust harness, so GPU runs from one host gate
against each other. Only the standard library is needed to build records; torch is imported
only to measure.

Usage:
    python3 tools/torch_gemm_suite.py --out gemm_gpu.jsonl [--device cuda:0]
        [--dtype bf16] [--sizes 1024x1024x1024,4096x4096x4096] [--warmup 25]
        [--iters 200] [--label label=nightly]
"""

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time

RECORD_SCHEMA_VERSION = 1
DEFAULT_SIZES = "256x256x256,1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192"
DTYPE_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def fingerprint(kind, params, dtype):
    """sha256 hex of the canonical identity JSON (matches Rust's WorkloadIdentity)."""
    canonical = json.dumps(
        {"dtype": dtype, "kind": kind, "params": params},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def percentile_sorted(s, q):
    """Type-7 (NumPy default) percentile of an ascending list."""
    n = len(s)
    if n == 1:
        return s[0]
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def latency_stats(samples):
    """The LatencyStats block of a record (p95 with >= 20 samples, p99 with >= 100)."""
    s = sorted(samples)
    n = len(s)
    mean = sum(s) / n
    var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
    return {
        "count": n,
        "mean_ns": mean,
        "stddev_ns": math.sqrt(var),
        "min_ns": s[0],
        "p50_ns": percentile_sorted(s, 0.5),
        "p90_ns": percentile_sorted(s, 0.9),
        "p95_ns": percentile_sorted(s, 0.95) if n >= 20 else None,
        "p99_ns": percentile_sorted(s, 0.99) if n >= 100 else None,
        "max_ns": s[-1],
        "interpolation": "linear between closest ranks (type 7, NumPy default)",
    }


def host_context():
    """(cpu_model, logical_cores, memory_bytes, os, kernel, machine_id) of this host."""
    cpuinfo = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpuinfo = f.read()
    except OSError:
        pass
    cpu_model = "unknown"
    found = False
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        for line in cpuinfo.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                if k.strip() == key and v.strip():
                    cpu_model = v.strip()
                    found = True
                    break
        if found:
            break
    cores = sum(1 for l in cpuinfo.splitlines() if l.split(":")[0].strip() == "processor")
    if cores == 0:
        cores = os.cpu_count() or 1
    mem = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    os_name = platform.system().lower() or "unknown"
    kernel = platform.release() or None
    mem_text = "" if mem is None else str(mem)
    machine_id = hashlib.sha256(
        f"{cpu_model}|{cores}|{mem_text}|{os_name}".encode("utf-8")
    ).hexdigest()[:16]
    return cpu_model, cores, mem, os_name, kernel, machine_id


def new_run_id():
    """A run id in the Rust format: YYYYMMDDTHHMMSSZ-<pid hex>-<counter>-<8 random hex>."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{stamp}-{os.getpid():x}-0-{os.urandom(4).hex()}"


def build_record(run_id, m, n, k, dtype, samples_ns, gpu, frameworks, labels,
                 warmup, note, timestamp_unix_s=None, host=None):
    """One GEMM record (a dict in the JSON layout of Rust's Record)."""
    if not samples_ns or any((not math.isfinite(x)) or x < 0 for x in samples_ns):
        raise ValueError("samples must be non-empty, finite and non-negative")
    params = {"batch": 1, "k": k, "m": m, "n": n}
    cpu_model, cores, mem, os_name, kernel, machine_id = host or host_context()
    stats = latency_stats(samples_ns)
    flops = 2.0 * m * n * k
    elem = {"f32": 4, "bf16": 2, "f16": 2}[dtype]
    bytes_moved = float(elem * (m * k + k * n + m * n))
    p50_s = stats["p50_ns"] * 1e-9
    per_s = (lambda x: x / p50_s) if p50_s > 0 else (lambda x: float("inf"))
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "run_id": run_id,
        "workload": {"kind": "gemm", "name": f"gemm_{m}x{n}x{k}", "params": params, "dtype": dtype},
        "fingerprint": fingerprint("gemm", params, dtype),
        "device": {
            "kind": "gpu",
            "cpu_model": cpu_model,
            "logical_cores": cores,
            "threads_used": 1,
            "memory_bytes": mem,
            "os": os_name,
            "kernel": kernel,
            "machine_id": machine_id,
            "gpu": gpu,
        },
        "software": {
            "tensorforge_version": "tools/torch_gemm_suite.py",
            "git_commit": None,
            "rustc_version": None,
            "crates": {},
            "frameworks": frameworks,
        },
        "harness": {
            "warmup_iterations": warmup,
            "min_iterations": len(samples_ns),
            "time_budget_ns": 0,
            "threads": 1,
            "rotating_buffers": False,
            "note": note,
        },
        "samples_ns": list(samples_ns),
        "stats": stats,
        "throughput": {
            "iterations_per_s": per_s(1.0),
            "flops_per_s": per_s(flops),
            "bytes_per_s": per_s(bytes_moved),
        },
        "flops": flops,
        "bytes": bytes_moved,
        "peak_alloc_bytes": None,
        "timestamp_unix_s": int(time.time()) if timestamp_unix_s is None else timestamp_unix_s,
        "labels": dict(labels),
        "source": "harness:torch_gemm_suite",
    }


def measure(args):
    import torch  # only needed to measure

    if not torch.cuda.is_available():
        sys.exit("error: torch.cuda.is_available() is False; this script measures a CUDA device")
    dev = torch.device(args.device)
    props = torch.cuda.get_device_properties(dev)
    gpu = {
        "name": props.name,
        "index": dev.index or 0,
        "driver": None,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_bytes": int(props.total_memory),
    }
    frameworks = {"torch": torch.__version__, "cuda": str(torch.version.cuda)}
    tdtype = getattr(torch, DTYPE_NAMES[args.dtype])
    labels = {}
    for l in args.label:
        if "=" not in l or not l.split("=", 1)[0]:
            sys.exit(f"error: invalid value for `--label`: `{l}` (expected NAME=VALUE)")
        key, value = l.split("=", 1)
        labels[key] = value
    run_id = new_run_id()
    host = host_context()
    records = []
    for size in args.sizes.split(","):
        try:
            m, n, k = (int(x) for x in size.lower().split("x"))
            assert m > 0 and n > 0 and k > 0
        except (ValueError, AssertionError):
            sys.exit(f"error: invalid value for `--sizes`: `{size}` (expected MxNxK, positive)")
        a = torch.randn(m, k, device=dev, dtype=tdtype)
        b = torch.randn(k, n, device=dev, dtype=tdtype)
        c = torch.empty(m, n, device=dev, dtype=tdtype)
        for _ in range(args.warmup):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize(dev)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(args.iters)
        ]
        for start, end in events:
            start.record()
            torch.matmul(a, b, out=c)
            end.record()
        torch.cuda.synchronize(dev)
        samples = [s.elapsed_time(e) * 1e6 for s, e in events]  # ms -> ns
        ws = (m * k + k * n + m * n) * a.element_size()
        note = (
            f"CUDA events around each torch.matmul(out=C) on {props.name}; "
            f"tf32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}; "
            f"working set {ws} bytes, not flushed between iterations (L2 {'may hold it' if ws < 64 << 20 else 'cannot hold it'}); "
            "clocks not locked"
        )
        rec = build_record(run_id, m, n, k, args.dtype, samples, gpu, frameworks, labels,
                           args.warmup, note, host=host)
        records.append(rec)
        p50 = rec["stats"]["p50_ns"]
        print(f"gemm {m}x{n}x{k} {args.dtype}: p50 {p50 / 1e3:.1f} us, "
              f"{rec['throughput']['flops_per_s'] / 1e12:.1f} TFLOP/s", file=sys.stderr)
        del a, b, c
    return records


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output JSON-lines file")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_NAMES))
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated MxNxK")
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--label", action="append", default=[], help="NAME=VALUE (repeatable)")
    args = p.parse_args()
    if args.iters < 1 or args.warmup < 0:
        sys.exit("error: --iters must be >= 1 and --warmup >= 0")
    records = measure(args)
    tmp = f"{args.out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(tmp, args.out)  # nothing half-written
    print(f"wrote {len(records)} record(s) of run {records[0]['run_id']} to {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
