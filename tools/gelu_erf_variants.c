/* Exact GELU, 0.5·x·(1 + erf(x/√2)), three ways over 1576 × 768 floats (ViT h192's MLP
 * width), compiled with the JIT's flags against the JIT's own prelude:
 *   div   — the composite as exporters write it and the JIT runs it today: Div(x, √2),
 *           tf_erf, Add 1, Mul x, Mul 0.5;
 *   mul   — the same with x·(1/√2) in place of the division;
 *   fused — one function x·Φ(x): the erf polynomials signed (no copysign, no NaN select),
 *           1 + erf(z) for z < 0 in the tail taken as e^(−r) directly (no cancellation);
 *   tf_gelu_erf — the prelude's GeluErf since the thirteenth session: max(x, 0) − |x|·h,
 *           h = Φ(−|x|) from one polynomial and one exponential (no select between
 *           polynomial branches; tools/gelu_erf_fit.py).
 * Prints the best of 7 rounds (10 passes each) in ns per element, then each version's
 * worst error in ulp against 0.5·x·erfc(−x/√2) in double where |y| > 1e-6.
 * Usage (docs/performance.md):
 *   tensorforge codegen ANY_GRAPH.json --out /tmp/cg   # for prelude.h
 *   gcc -O3 -march=native -std=c11 -fno-math-errno -fno-trapping-math -ffp-contract=off \
 *       -mprefer-vector-width=512 -I /tmp/cg -o /tmp/gelu tools/gelu_erf_variants.c -lm
 *   /tmp/gelu
 * A measurement aid, not part of the build. */
#define _POSIX_C_SOURCE 199309L
#include "prelude.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((noinline)) void cur(const float *restrict x, float *restrict y, long n, const float *restrict c) {
  for (long i = 0; i < n; ++i) { float v0 = x[i] * c[0]; float v1 = tf_erf(v0); float v2 = v1 + c[1]; float v3 = x[i] * v2; y[i] = v3 * c[2]; }
}
__attribute__((noinline)) void curdiv(const float *restrict x, float *restrict y, long n, const float *restrict c) {
  for (long i = 0; i < n; ++i) { float v0 = x[i] / c[3]; float v1 = tf_erf(v0); float v2 = v1 + c[1]; float v3 = x[i] * v2; y[i] = v3 * c[2]; }
}
/* x·Φ(x): signed small branch, no copysign, no NaN select (NaN propagates through ·x). */
static inline float gelu_erf(float x) {
  float z = x * 0.70710677f;
  float a = fabsf(z);
  float zz = z * z;
  float p = -0.0005990893f;
  p = fmaf(p, zz, 0.0049931896f); p = fmaf(p, zz, -0.026766624f); p = fmaf(p, zz, 0.11281817f);
  p = fmaf(p, zz, -0.37612495f); p = fmaf(p, zz, 0.12837915f);
  float small = fmaf(z, p, z) + 1.0f;
  float ac = a < 3.925f ? a : 3.925f;
  float q = 1.1303632e-05f;
  q = fmaf(q, ac, -0.0003235275f); q = fmaf(q, ac, 0.0036454f); q = fmaf(q, ac, -0.02376828f);
  q = fmaf(q, ac, 0.106244095f); q = fmaf(q, ac, 0.635147f); q = fmaf(q, ac, 0.12864956f);
  float r = fmaf(ac, q, ac);
  float e = tf_exp_nonpos(-r);
  float big = z > 0.0f ? 2.0f - e : e;
  float t = a < 0.921875f ? small : big;
  return (0.5f * x) * t;
}
__attribute__((noinline)) void fused(const float *restrict x, float *restrict y, long n) {
  for (long i = 0; i < n; ++i) y[i] = gelu_erf(x[i]);
}
__attribute__((noinline)) void prelude(const float *restrict x, float *restrict y, long n) {
  for (long i = 0; i < n; ++i) y[i] = tf_gelu_erf(x[i]);
}
int main(void) {
  long n = 1576 * 768; float *x = aligned_alloc(64, n * 4), *y = aligned_alloc(64, n * 4), *y2 = aligned_alloc(64, n*4);
  float c[4] = {0.70710677f, 1.0f, 0.5f, 1.4142135f};
  for (long i = 0; i < n; ++i) x[i] = ((float)rand() / RAND_MAX - 0.5f) * 12.0f;
  double best[4] = {1e9, 1e9, 1e9, 1e9};
  for (int r = 0; r < 7; ++r) {
    for (int k = 0; k < 4; ++k) {
      double t0 = now();
      for (int p = 0; p < 10; ++p) { if (k == 0) curdiv(x, y, n, c); else if (k == 1) cur(x, y, n, c); else if (k == 2) fused(x, y2, n); else prelude(x, y2, n); }
      double t = (now() - t0) / 10 / n * 1e9; if (t < best[k]) best[k] = t;
    }
  }
  double md = 0; for (long i = 0; i < n; ++i) { double d = fabs(y[i] - y2[i]) / (fabs(y[i]) + 1e-30); if (d > md && fabs(y[i]) > 1e-6) md = d; }
  printf("div %.3f  mul %.3f  fused %.3f  tf_gelu_erf %.3f ns/elt; max rel diff tf_gelu_erf vs mul %.2e\n", best[0], best[1], best[2], best[3], md);
  /* Accuracy against x·Φ(x) = 0.5·x·erfc(−x/√2) in double, where |y| > 1e-6. */
  double worst[3] = {0, 0, 0}, at[3] = {0, 0, 0};
  for (float v = -8.0f; v <= 8.0f; v = nextafterf(v, 9.0f)) {
    if (fabsf(v) > 1e-3f && ((*(unsigned*)&v) & 0xff)) continue; /* sample */
    double ref = 0.5 * v * erfc(-(double)v / sqrt(2.0));
    if (fabs(ref) <= 1e-6) continue;
    float xv = v, yd, yf, yp; long one = 1;
    curdiv(&xv, &yd, one, c); fused(&xv, &yf, one); prelude(&xv, &yp, one);
    double ulp = nextafterf((float)fabs(ref), INFINITY) - (float)fabs(ref);
    double e0 = fabs(yd - ref) / ulp, e1 = fabs(yf - ref) / ulp, e2 = fabs(yp - ref) / ulp;
    if (e0 > worst[0]) { worst[0] = e0; at[0] = v; }
    if (e1 > worst[1]) { worst[1] = e1; at[1] = v; }
    if (e2 > worst[2]) { worst[2] = e2; at[2] = v; }
  }
  printf("max ulp where |y| > 1e-6: composite (Div) %.1f at %g; fused %.1f at %g; tf_gelu_erf %.1f at %g\n", worst[0], at[0], worst[1], at[1], worst[2], at[2]);
  return 0;
}
