#!/usr/bin/env python3
"""Time the JIT's generated C kernels outside the executor, against memcpy in the same
process (docs/performance.md, "Row kernels that stream the next row"): for each binary,
`tensorforge codegen GRAPH --target c` writes the program; this script compiles it with the
JIT's flags (crates/graph/src/jit.rs, CFLAGS) into a shared object with a small timing
driver, then, in alternated rounds, times each chosen kernel over all its rows (in the
executor's blocks of 16384 / cols rows per call, as exec/program.rs calls them) and a memcpy
of as many bytes as the kernel reads and writes (one input and one output of its size).
Prints ns per element and the kernel's time as a fraction of the copy's, min / median / max
over the rounds. Two binaries (`--bin A --bin B`) compare two builds' generated code on the
same inputs in the same process; a kernel of the first build is matched in the others by
the outputs it writes (kernel numbers move when a rewrite changes the graph).

What it leaves out: the executor's dispatch, threads (one thread only), and inputs other than
uniform values in [-1, 1) (a norm's gain included).

Usage (repository root, a C compiler on PATH):
    python tools/kernel_driver.py GRAPH --bin target/release/tensorforge [--bin OTHER]
        [--kernel k0] [--rounds 5] [--passes 5]
"""

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

# The JIT's compiler flags (crates/graph/src/jit.rs, CFLAGS), for a shared object; with
# GCC, `-O3` is replaced by jit.rs's GCC_OPT as the JIT replaces it.
GCC_OPT = ["-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-fpeel-loops",
           "-funswitch-loops", "-fsplit-loops"]
CFLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-std=c11", "-fno-math-errno",
          "-fno-trapping-math", "-ffp-contract=off"]
if platform.machine() in ("x86_64", "AMD64"):
    CFLAGS.append("-mprefer-vector-width=512")

DRIVER = r"""
#include <time.h>
#include <stdlib.h>
typedef void (*kfn)(const float *const *, float *const *, int64_t, int64_t, int64_t, float *);
static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
/* Best of `passes` calls of kernel f over rows [0, rows) in blocks of `per` rows. */
double tf_time_kernel(kfn f, const float *const *in, float *const *out, int64_t rows,
                      int64_t per, float *scratch, int passes) {
    double best = 1e300;
    for (int p = 0; p < passes; ++p) {
        double t = now_ns();
        for (int64_t r = 0; r < rows; r += per) f(in, out, r, r + per < rows ? r + per : rows, rows, scratch);
        t = now_ns() - t;
        if (t < best) best = t;
    }
    return best;
}
/* Values in [-1, 1) from a fixed LCG. */
void tf_fill(float *p, int64_t n, uint64_t s) {
    for (int64_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (float)((double)(s >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
    }
}
/* Best of `passes` memcpy of n bytes. */
double tf_time_copy(void *dst, const void *src, size_t n, int passes) {
    double best = 1e300;
    for (int p = 0; p < passes; ++p) {
        double t = now_ns();
        memcpy(dst, src, n);
        t = now_ns() - t;
        if (t < best) best = t;
    }
    return best;
}
"""


def build(binary, graph, tmp, tag):
    d = os.path.join(tmp, tag)
    subprocess.run([binary, "codegen", graph, "--target", "c", "--out", d], check=True,
                   stdout=subprocess.DEVNULL)
    src = os.path.join(d, "driver.c")
    with open(os.path.join(d, "program.c")) as f:
        prog = f.read()
    with open(src, "w") as f:
        f.write("#define _POSIX_C_SOURCE 199309L\n" + prog + DRIVER)
    so = os.path.join(d, "kernels.so")
    cc = os.environ.get("CC", "cc")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    flags = CFLAGS
    if "gcc" in version.lower() or "free software foundation" in version.lower():
        flags = [f for f in CFLAGS if f != "-O3"] + GCC_OPT
    subprocess.run([cc, *flags, "-o", so, src, "-lm"], check=True)
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    return ctypes.CDLL(so), manifest


def same_kernel(manifest, k):
    """`k`'s kernel in another build's manifest: the one that writes the same outputs (kernel
    numbers move when a rewrite changes the graph), else the one of the same name."""
    for x in manifest["kernels"]:
        if x["outputs"] == k["outputs"]:
            return x
    return next(x for x in manifest["kernels"] if x["kernel"] == k["kernel"])


def floats(lib, n, seed):
    """n floats in [-1, 1) (the driver's LCG)."""
    a = (ctypes.c_float * max(n, 1))()
    lib.tf_fill(a, ctypes.c_int64(n), ctypes.c_uint64(seed))
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--bin", action="append", required=True)
    ap.add_argument("--kernel", action="append", help="kernel names (default: every one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tf_kdrv_")
    builds = [build(b, a.graph, tmp, f"b{i}") for i, b in enumerate(a.bin)]
    kernels = [k for k in builds[0][1]["kernels"] if not a.kernel or k["kernel"] in a.kernel]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor()) \
        if os.path.exists("/proc/cpuinfo") else platform.processor()
    print(f"cpu: {cpu}; {a.rounds} rounds, best of {a.passes} passes each; one thread")
    print("| kernel | rows x cols | binary | ns per element (min / median / max) | of memcpy time |")
    print("|---|---|---|---|---|")
    for k in kernels:
        elems, cols, rows = k["elements"], max(k["cols"], 1), k["rows"]
        per = max(16384 // cols, 1)
        # Buffers by tensor name, shared by every build (same inputs). Tensor sizes are not in
        # the manifest: `elements` values for each covers a whole-domain tensor and a
        # broadcast one (smaller) alike.
        names = []
        for b in builds:
            mk = same_kernel(b[1], k)
            names += [n for n in mk["inputs"] + mk["outputs"] if n not in names]
        lib0 = builds[0][0]
        bufs = {name: floats(lib0, elems, 1 + i) for i, name in enumerate(names)}
        src, dst = floats(lib0, elems, 99), (ctypes.c_float * max(elems, 1))()
        results = {i: [] for i in range(len(builds))}
        copies = []
        for _ in range(a.rounds):
            for i, (lib, man) in enumerate(builds):
                mk = same_kernel(man, k)
                ins = (ctypes.c_void_p * max(len(mk["inputs"]), 1))(
                    *[ctypes.cast(bufs[n], ctypes.c_void_p) for n in mk["inputs"]])
                outs = (ctypes.c_void_p * max(len(mk["outputs"]), 1))(
                    *[ctypes.cast(bufs[n], ctypes.c_void_p) for n in mk["outputs"]])
                scratch = (ctypes.c_float * max(mk["scratch_floats"], 1))()
                f = ctypes.cast(getattr(lib, mk["symbol"]), ctypes.c_void_p)
                lib.tf_time_kernel.restype = ctypes.c_double
                t = lib.tf_time_kernel(f, ins, outs, ctypes.c_int64(rows), ctypes.c_int64(per),
                                       scratch, a.passes)
                results[i].append(t)
            lib0.tf_time_copy.restype = ctypes.c_double
            copies.append(lib0.tf_time_copy(dst, src, ctypes.c_size_t(4 * elems), a.passes))
        cmed = statistics.median(copies)
        for i, b in enumerate(a.bin):
            v = sorted(x / elems for x in results[i])
            name = same_kernel(builds[i][1], k)["kernel"]
            print(f"| {name} | {rows} x {cols} | {b} | {v[0]:.3f} / "
                  f"{statistics.median(v):.3f} / {v[-1]:.3f} | "
                  f"{statistics.median(results[i]) / cmed:.2f} |")
        c = sorted(x / elems for x in copies)
        print(f"| memcpy | {elems} floats | | {c[0]:.3f} / {statistics.median(c):.3f} / "
              f"{c[-1]:.3f} | 1.00 |")


if __name__ == "__main__":
    sys.exit(main())
