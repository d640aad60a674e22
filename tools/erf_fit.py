#!/usr/bin/env python3
"""Coefficients of the JIT prelude's float erf (crates/graph/src/codegen/prelude.h: tf_erf),
and their error in ulps.

The form (two branches, both computed by the vector code, one kept per lane):
- |x| < 0.921875: erf(x) = x + x·P(x²), P of degree 5 in z = x²;
- 0.921875 <= |x| <= 3.925: erf(|x|) = 1 − e^(−r), r = a + a·Q(a), Q of degree 6 in
  a = |x|; above 3.925 erf is 1.0f (erfc(3.925) ≈ 1.4e-8 is below half an ulp of 1).
The same split as the Arm optimized-routines' erff and onnxruntime's MLAS Erf; these
coefficients are fitted here, not taken from them.

Each polynomial is a weighted minimax fit (Lawson's iteratively reweighted least squares
on 4000 Chebyshev points) of the error that reaches erf: for P, x·ΔP / erf(x); for Q,
e^(−r)·a·ΔQ / erf(a) (an error in r moves 1 − e^(−r) by e^(−r)·Δr, and e^(−r) ≤ 0.19
on this range). The coefficients are then rounded to float and the whole function is
evaluated in float with fused multiply-adds (emulated: a float product is exact in double)
over 1,000,001 floats spread evenly over [2^-20, 4.5], against Python's double erf. The
exponential is taken correctly rounded here; the prelude's tf_exp_nonpos adds its own
error (about one ulp of e^(−r), at most 0.19 of an ulp of erf). The prelude's test
(`jit::tests`) measures the compiled function itself.

Usage: python3 tools/erf_fit.py   (numpy only)
"""
import math

import numpy as np

SPLIT = 0.921875
TOP = 3.925


def lawson(phi, f, w, iters=200):
    """Coefficients c minimizing max |w·(phi·c − f)| (Lawson's algorithm)."""
    u = np.full(len(f), 1.0 / len(f))
    c = None
    for _ in range(iters):
        sw = np.sqrt(u) * w
        c, *_ = np.linalg.lstsq(phi * sw[:, None], f * sw, rcond=None)
        r = np.abs(w * (phi @ c - f))
        u = u * r
        u /= u.sum()
    return c


def cheb(lo, hi, n):
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


def fit_small():
    x = cheb(1e-6, SPLIT, 4000)
    z = x * x
    erf = np.array([math.erf(v) for v in x])
    f = erf / x - 1.0
    phi = np.stack([z**k for k in range(6)], axis=1)
    return lawson(phi, f, x / erf)


def fit_big():
    a = cheb(SPLIT, TOP, 4000)
    erfc = np.array([math.erfc(v) for v in a])
    erf = 1.0 - erfc
    r = -np.log(erfc)
    f = r / a - 1.0
    phi = np.stack([a**k for k in range(7)], axis=1)
    return lawson(phi, f, erfc * a / erf)


def f32(v):
    return np.asarray(v, dtype=np.float64).astype(np.float32)


def fma(a, b, c):
    return f32(a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64))


def erf_f32(x, p, q):
    """The prelude's tf_erf, in float with fused multiply-adds (x ≥ 0 here)."""
    a = np.abs(x)
    z = f32(a.astype(np.float64) * a)
    s = np.full_like(a, p[5])
    for c in p[4::-1]:
        s = fma(s, z, np.full_like(a, c))
    small = fma(a, s, a)
    ac = np.minimum(a, np.float32(TOP))
    t = np.full_like(a, q[6])
    for c in q[5::-1]:
        t = fma(t, ac, np.full_like(a, c))
    r = fma(ac, t, ac)
    e = f32(np.exp(-r.astype(np.float64)))
    big = f32(np.float64(1.0) - e)
    return np.where(a < np.float32(SPLIT), small, big)


def ulps(got, x):
    want = np.array([math.erf(float(v)) for v in x])
    w32 = f32(want)
    ulp = np.spacing(np.abs(w32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


def main():
    p = [float(np.float32(c)) for c in fit_small()]
    q = [float(np.float32(c)) for c in fit_big()]
    x = f32(np.linspace(2.0**-20, 4.5, 1_000_001))
    err = ulps(erf_f32(x, p, q), x)
    i = int(np.argmax(err))
    print("P (x + x·P(x²), z^0 .. z^5):")
    for c in p:
        print(f"    {np.float32(c)!r:>16}  {c.hex()}")
    print("Q (r = a + a·Q(a), a^0 .. a^6):")
    for c in q:
        print(f"    {np.float32(c)!r:>16}  {c.hex()}")
    small = x < SPLIT
    print(f"max error {err.max():.3f} ulp at x = {float(x[i])!r}")
    print(f"  |x| < {SPLIT}: {err[small].max():.3f} ulp; above: {err[~small].max():.3f} ulp")


if __name__ == "__main__":
    main()
