#!/usr/bin/env python3
"""Per-kernel times of one model under two builds, alternated (issue 27: which kernels a
change moved, on a machine whose whole-run times move by ±8 % between runs of the same
binary).

Each round runs `BIN run MODEL --profile --json --reps 30 --threads THREADS` with build A
and build B, in turn first; each kernel keeps its best time over all rounds per build (the
least disturbed run). Prints the sums and one line per kernel, largest gain of B first (or, with
--top N, the N largest gains and the N largest losses). Kernels are matched by their id
(k0, k1, ...): both builds must fuse the model into the same kernels, which the script
checks by their op lists.

Usage (repository root):
    python tools/kernel_ab.py MODEL_DIR THREADS ROUNDS BIN_A BIN_B [--top N]
MODEL_DIR holds model.onnx and inputs/*.npy (tools/export_bench_models.py writes such
folders).
"""
import json
import subprocess
import sys


def profile(binary, model_dir, threads):
    out = subprocess.run(
        [binary, "run", f"{model_dir}/model.onnx", "--inputs", f"{model_dir}/inputs",
         "--profile", "--json", "--reps", "30", "--threads", str(threads)],
        capture_output=True, text=True, check=True).stdout
    return {k["kernel"]: (k["ops"], k["best_ns"]) for k in json.loads(out)["profile"]}


def main():
    args = sys.argv[1:]
    top = None
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 5:
        sys.exit(__doc__)
    model_dir, threads, rounds, a, b = args[0], int(args[1]), int(args[2]), args[3], args[4]
    best = {a: {}, b: {}}
    ops = {}
    for r in range(rounds):
        # A then B, then B then A: neither build always runs second.
        for binary in ((a, b) if r % 2 == 0 else (b, a)):
            for kernel, (kops, ns) in profile(binary, model_dir, threads).items():
                if ops.setdefault(kernel, kops) != kops:
                    sys.exit(f"{kernel}: {kops} under {binary}, {ops[kernel]} before: "
                             "the builds fuse the model differently")
                best[binary][kernel] = min(best[binary].get(kernel, float("inf")), ns)
    if best[a].keys() != best[b].keys():
        sys.exit("the builds make different kernels")
    ta, tb = sum(best[a].values()), sum(best[b].values())
    print(f"{model_dir}: {threads} thread(s), best of {rounds} alternated rounds per kernel")
    print(f"sum A {ta / 1e3:.0f} µs  B {tb / 1e3:.0f} µs  B/A {tb / ta:.3f}")
    rows = sorted(best[a], key=lambda k: best[b][k] - best[a][k])
    if top is not None and len(rows) > 2 * top:
        rows = rows[:top] + rows[-top:]
    for k in rows:
        print(f"{k:6} {ops[k][:30]:30} A {best[a][k] / 1e3:8.1f} B {best[b][k] / 1e3:8.1f}")


if __name__ == "__main__":
    main()
