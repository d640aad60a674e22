#!/usr/bin/env python3
"""Coefficients of the JIT prelude's exact GELU (crates/graph/src/codegen/prelude.h:
tf_gelu_erf), and their error in ulps.

The form (one branch, no select between polynomials):
    gelu(x) = x·Φ(x) = max(x, 0) − |x|·h(|x|),   h(a) = Φ(−a) = erfc(a/√2)/2,
which is x·(1 − h) for x > 0 and x·h for x < 0 (Φ(x) = 1 − Φ(−x)), each side one fused
multiply-add with no cancellation. h(a) = e^(−r(a)) with
    r(a) = −ln(erfc(a/√2)/2) = ln 2 + a·G(a),
G smooth (√(2/π) at 0, about a/2 for large a), a polynomial of degree 10 in
d = a/2.775 − 1 ∈ [−1, 1] on [0, 5.55] (|d| ≤ 1: Horner's rounding errors are not
amplified). ln 2 is added by the last fused multiply-add, so near 0, where most
activations are, r keeps its relative accuracy (a form a²/2 + g(a) cancelled there and
cost 6 ulp). Above |x| = 5.55, a is held there: for x > 0, 1 − h(5.55) rounds to 1
(h(5.55) ≈ 1.4e-8 is under half an ulp of 1); for x < 0 the result is −5.55·h(5.55) ≈
−7.9e-8 where the true value is smaller (its absolute error bound).

G is a weighted minimax fit (Lawson's iteratively reweighted least squares on 4000
Chebyshev points) of the absolute error in r (a·ΔG), which is the relative error of h.
The coefficients are rounded to float and the whole function evaluated in float with
fused multiply-adds (emulated: a float product is exact in double) against
0.5·x·erfc(−x/√2) in double; the exponential is taken correctly rounded here (the
prelude's own adds about one ulp of h). f32 cannot hold r (up to 19) to better than
2^-24 relative, so h's relative error, hence the result's for x < 0, grows in the tail
(x < −3, |y| < 4e-3) whatever the fit; the script prints the maximum per range.
The prelude's test (`jit::tests`) measures the compiled function itself.

Usage: python3 tools/gelu_erf_fit.py   (numpy only)
"""
import math

import numpy as np

from erf_fit import cheb, f32, fma, lawson  # the same fitting and float emulation

TOP = 5.55
MID = 2.775
DEGREE = 10


LN2 = float(np.float32(math.log(2.0)))


def fit_g():
    a = cheb(1e-6, TOP, 4000)
    r = np.array([-math.log(0.5 * math.erfc(v / math.sqrt(2))) for v in a])
    phi = np.stack([(a / MID - 1.0) ** k for k in range(DEGREE + 1)], axis=1)
    return lawson(phi, (r - LN2) / a, a, iters=300)


def gelu_f32(x, q):
    """The prelude's tf_gelu_erf, in float with fused multiply-adds."""
    x = f32(x)
    ac = np.minimum(np.abs(x), np.float32(TOP))
    d = fma(ac, np.float32(1.0 / MID), np.float32(-1.0))
    t = np.full_like(x, q[-1])
    for c in q[-2::-1]:
        t = fma(t, d, np.float32(c))
    r = fma(ac, t, np.float32(LN2))
    h = f32(np.exp(-np.float64(r)))
    return fma(-ac, h, np.maximum(x, np.float32(0.0)))


def main():
    q = [float(np.float32(c)) for c in fit_g()]
    x = f32(
        np.concatenate(
            [
                np.linspace(-8, 8, 1_000_001),
                np.linspace(-6, -3, 200_001),
                np.linspace(-1e-3, 1e-3, 100_001),
            ]
        )
    )
    y = gelu_f32(x, q).astype(np.float64)
    ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in np.float64(x)])
    ulp = np.spacing(np.abs(f32(ref))).astype(np.float64)
    err = np.abs(y - ref) / ulp
    big = np.abs(ref) > 1e-6
    print(f"G (r = ln 2 + a·G(a/{MID} − 1), powers 0 .. {DEGREE}):")
    for c in q:
        print(f"    {np.float32(c)!r:>18}  {c.hex()}")
    print("error where |y| > 1e-6, max / mean ulp:")
    for lo, hi in [(-8, -3), (-3, -1), (-1, 0), (0, 1), (1, 8)]:
        m = big & (x > lo) & (x < hi)
        print(f"  {lo:>3} < x < {hi}: {err[m].max():6.2f} / {np.mean(err[m]):.2f}")
    print(f"where |y| <= 1e-6: {np.abs(y - ref)[~big].max():.2e} absolute")


if __name__ == "__main__":
    main()
