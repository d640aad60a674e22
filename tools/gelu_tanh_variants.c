/* GPT-2's GELU epilogue (the tanh form) two ways over 128 × 1024 floats (GPT-2 h256's MLP
 * width), compiled with the JIT's flags against the JIT's prelude:
 *   composite — what the JIT runs after the rewrites tanh_plus_one and power_of_two_scale:
 *               x·x·x, ·0.044715, +x, ·1.5957691, tf_sigmoid, ·x;
 *   fused     — one function x·σ(z), z = x·(1.5957691 + 0.0713548·x²): w = e^(−|z|),
 *               (z ≥ 0 ? x : x·w)/(1 + w) (one exponential, one division, no NaN select).
 * Prints the best of 15 rounds (10 passes each) in ns per element and the largest relative
 * difference between the two where |y| > 1e-6. A measurement aid for a possible fused op,
 * not part of the build. Usage:
 *   tensorforge codegen ANY_GRAPH.json --out /tmp/cg   # for prelude.h
 *   gcc -O3 -march=native -std=c11 -fno-math-errno -fno-trapping-math -ffp-contract=off \
 *       -I /tmp/cg -o /tmp/gelu_tanh tools/gelu_tanh_variants.c -lm
 *   /tmp/gelu_tanh */
#define _POSIX_C_SOURCE 199309L
#include "prelude.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
__attribute__((noinline)) void composite(const float *restrict x, float *restrict y, long n, const float *restrict c) {
  for (long i = 0; i < n; ++i) {
    float v0 = x[i] * x[i] * x[i]; float v1 = v0 * c[0]; float v2 = x[i] + v1;
    float v3 = v2 * c[1]; float v4 = tf_sigmoid(v3); y[i] = x[i] * v4;
  }
}
static inline float gelu_tanh(float x) {
  float z = x * fmaf(0.07135481627f, x * x, 1.5957691216f);
  float w = tf_exp_nonpos(-fabsf(z));
  return (z >= 0.0f ? x : x * w) / (1.0f + w);
}
__attribute__((noinline)) void fused(const float *restrict x, float *restrict y, long n) {
  for (long i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
}
int main(void) {
  long n = 128 * 1024;
  float *x = aligned_alloc(64, n * 4), *y = aligned_alloc(64, n * 4), *y2 = aligned_alloc(64, n * 4);
  float c[2] = {0.044715f, 1.5957691f};
  for (long i = 0; i < n; ++i) x[i] = ((float)rand() / RAND_MAX - 0.5f) * 12.0f;
  double best[2] = {1e9, 1e9};
  for (int r = 0; r < 15; ++r)
    for (int k = 0; k < 2; ++k) {
      double t0 = now();
      for (int p = 0; p < 10; ++p) { if (k == 0) composite(x, y, n, c); else fused(x, y2, n); }
      double t = (now() - t0) / 10 / n * 1e9;
      if (t < best[k]) best[k] = t;
    }
  double md = 0;
  for (long i = 0; i < n; ++i) {
    double d = fabs(y[i] - y2[i]) / (fabs(y[i]) + 1e-30);
    if (d > md && fabs(y[i]) > 1e-6) md = d;
  }
  printf("composite %.3f  fused %.3f ns/elt; max rel diff %.2e\n", best[0], best[1], md);
  return 0;
}
