#!/usr/bin/env python3
"""The coefficients of tf_exp_nonpos's polynomial (crates/graph/src/codegen/prelude.h):
e^r = 1 + r·Q(r) on |r| <= ln2/2, Q of degree 5, fitted by iteratively reweighted least
squares on the relative error of e^r (a near-minimax fit), then rounded to float32 and
evaluated as the prelude does (Horner with fused multiply-adds in float32) to report the
worst error in ulps on the reduced range. numpy only.

Usage: python tools/exp_fit.py
"""
import numpy as np

LN2_HALF = 0.34657359027997264
DEG = 5


def fit():
    r = np.linspace(-LN2_HALF, LN2_HALF, 200001)
    v = np.vander(r, DEG + 1, increasing=True) * r[:, None]
    w = np.ones_like(r)
    for _ in range(60):
        wt = w / np.exp(r)
        c, *_ = np.linalg.lstsq(v * wt[:, None], np.expm1(r) * wt, rcond=None)
        err = (1 + v @ c - np.exp(r)) / np.exp(r)
        w = w * (1 + 0.5 * np.abs(err) / np.abs(err).max())
    return c, np.abs(err).max()


def horner_f32(c32, r32):
    """1 + r·Q(r) in float32, each step a fused multiply-add (exact product, one rounding)."""
    q = np.full_like(r32, c32[DEG])
    for k in range(DEG - 1, -1, -1):
        q = (q.astype(np.float64) * r32.astype(np.float64) + np.float64(c32[k])).astype(np.float32)
    return (q.astype(np.float64) * r32.astype(np.float64) + 1.0).astype(np.float32)


def main():
    c, rel = fit()
    c32 = c.astype(np.float32)
    r32 = np.linspace(-LN2_HALF, LN2_HALF, 400001).astype(np.float32)
    y = horner_f32(c32, r32).astype(np.float64)
    exact = np.exp(r32.astype(np.float64))
    ulp = np.abs(y - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    print(f"relative error of the float64 fit: {rel:.2e}")
    print(f"worst error in float32 Horner on the reduced range: {ulp.max():.2f} ulp")
    print("Q coefficients, constant first:", ", ".join(repr(float(x)) for x in c32))


if __name__ == "__main__":
    main()
