#!/usr/bin/env python3
"""Run `tensorforge run` on every exported model folder under ROOT (as written by
tools/export_real_onnx.py) and compare each output with onnxruntime's stored one: prints one
line per model with max |ours - onnxruntime| / max |onnxruntime| and OK (<= 1e-5) or
MISMATCH, or the one-line error. Usage:

    python tools/compare_onnx_runs.py ROOT [--bin target/release/tensorforge]
"""

import glob
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    root = sys.argv[1]
    binary = sys.argv[sys.argv.index("--bin") + 1] if "--bin" in sys.argv else "target/release/tensorforge"
    ok = bad = 0
    for d in sorted(glob.glob(os.path.join(root, "*", "model.onnx"))):
        d = os.path.dirname(d)
        name = os.path.basename(d)
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([binary, "run", os.path.join(d, "model.onnx"), "--inputs",
                                os.path.join(d, "inputs"), "--out", out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: {r.stderr.strip().splitlines()[-1][:300]}")
                bad += 1
                continue
            worst = 0.0
            degenerate = False
            for e in glob.glob(os.path.join(d, "expected", "*.npy")):
                want = np.load(e)
                got = np.load(os.path.join(out, os.path.basename(e)))
                scale = float(np.abs(want).max()) if want.size else 0.0
                # An all-zero expected output checks nothing (a relative error of 0/0).
                degenerate |= scale == 0.0
                worst = max(worst, float(np.abs(got - want).max() / max(scale, 1e-30)))
            verdict = "ZERO EXPECTED OUTPUT" if degenerate else "OK" if worst <= 1e-5 else "MISMATCH"
            ok += verdict == "OK"
            bad += verdict != "OK"
            print(f"{name}: max error / max |onnxruntime| {worst:.2e} {verdict}")
    print(f"{ok} agree, {bad} do not")


if __name__ == "__main__":
    main()
