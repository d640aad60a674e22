#!/usr/bin/env python3
"""Run `tensorforge run` on every exported model folder under ROOT (as written by
tools/export_real_onnx.py) and compare each output with onnxruntime's stored one: prints one
line per model with max |ours - onnxruntime| / max |onnxruntime| and OK (<= 1e-5) or
MISMATCH, or the one-line error. A folder without stored outputs (`expected/`, as
tools/export_bench_models.py writes them) is compared with onnxruntime run here on its
inputs; a model with no output to compare is NOT COMPARED, never OK. Usage:

    python tools/compare_onnx_runs.py ROOT [--bin target/release/tensorforge]
"""

import glob
import os
import subprocess
import sys
import tempfile

import numpy as np


def expected(d):
    """(output name, array) pairs: the stored `expected/*.npy`, or onnxruntime's outputs on
    the folder's inputs when none are stored."""
    stored = sorted(glob.glob(os.path.join(d, "expected", "*.npy")))
    if stored:
        return [(os.path.basename(e)[:-4], np.load(e)) for e in stored]
    import onnxruntime as ort

    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    feeds = {}
    for f in glob.glob(os.path.join(d, "inputs", "*.npy")):
        if os.path.basename(f)[:-4] in names:
            feeds[os.path.basename(f)[:-4]] = np.load(f)
    outs = sess.run(None, feeds)
    return [(o.name, v) for o, v in zip(sess.get_outputs(), outs)]


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
            compared = 0
            for name_e, want in expected(d):
                got = np.load(os.path.join(out, name_e + ".npy"))
                compared += 1
                scale = float(np.abs(want).max()) if want.size else 0.0
                # An all-zero expected output checks nothing (a relative error of 0/0).
                degenerate |= scale == 0.0
                worst = max(worst, float(np.abs(got - want).max() / max(scale, 1e-30)))
            verdict = ("NOT COMPARED" if compared == 0 else "ZERO EXPECTED OUTPUT" if degenerate
                       else "OK" if worst <= 1e-5 else "MISMATCH")
            ok += verdict == "OK"
            bad += verdict != "OK"
            print(f"{name}: max error / max |onnxruntime| {worst:.2e} {verdict}")
    print(f"{ok} agree, {bad} do not")


if __name__ == "__main__":
    main()
