#!/usr/bin/env python3
"""Coefficients of the JIT prelude's double-precision logaddexp (crates/graph/src/codegen/
prelude.h: tf_exp_neg_d, tf_log1p_unit_d), and their error.

Chebyshev interpolants computed in 50-digit arithmetic with mpmath (pip install mpmath),
rounded to double, then checked against mpmath's exp and atanh on a dense grid with the
double coefficients evaluated exactly (so the figure is the approximation's error, not the
rounding of one evaluation).

- e^r on |r| <= ln2/2, degree 11.
- ln(1 + t) = 2·atanh(s) = 2s + s³·Q(s²), s = t / (2 + t) in [0, 1/3]; Q of degree 9 in
  u = s² on [0, 1/9], Q(u) = (2·atanh(√u)/√u − 2)/u.
It also prints the error of the forms they replaced (Taylor to r^13; the 12-term atanh
series). Usage: python3 tools/logaddexp_fit.py
"""
import math

import mpmath as mp

mp.mp.dps = 50
LN2H = mp.log(2) / 2


def horner(cs, x):
    p = mp.mpf(0)
    for c in cs:
        p = p * x + mp.mpf(c)
    return p


def exp_error(cs):
    worst = 0
    for i in range(2001):
        r = mp.mpf(float(-LN2H + 2 * LN2H * i / 2000))
        worst = max(worst, abs(horner(cs, r) / mp.exp(r) - 1))
    return worst


def log1p_error(cs):
    worst = 0
    for i in range(1, 3001):
        t = mp.mpf(i) / 3000
        s = mp.mpf(float(t / (2 + t)))
        u = s * s
        approx = 2 * s + horner(cs, u) * u * s
        worst = max(worst, abs(approx / (2 * mp.atanh(s)) - 1))
    return worst


def q2(u):
    if u == 0:
        return mp.mpf(2) / 3
    s = mp.sqrt(u)
    return 2 * (mp.atanh(s) / s - 1) / u


def main():
    exp_cs = [float(c) for c in mp.chebyfit(mp.exp, [-LN2H, LN2H], 12)]
    log_cs = [float(c) for c in mp.chebyfit(q2, [0, mp.mpf(1) / 9], 10)]
    print("e^r, degree 11, highest power first:")
    for c in exp_cs:
        print(f"    {c!r}")
    print(f"  relative error {float(exp_error(exp_cs)):.3g}")
    taylor = [1 / math.factorial(k) for k in range(13, -1, -1)]
    print(f"  (Taylor to r^13: {float(exp_error(taylor)):.3g})")
    print("Q(s^2) of ln(1 + t), degree 9, highest power first:")
    for c in log_cs:
        print(f"    {c!r}")
    print(f"  relative error of ln(1 + t) {float(log1p_error(log_cs)):.3g}")
    series = [2.0 / (2 * k + 1) for k in range(12, 0, -1)]
    print(f"  (12-term atanh series: {float(log1p_error(series)):.3g})")


if __name__ == "__main__":
    main()
