/* 12 independent chains of 8-lane fused multiply-adds (16 flops each) for about 2 s, the
 * best of 5 passes printed in GFLOP/s: what one core's FMA pipes give at AVX2, whatever the
 * memory does (the Kernels crate's `sgemm_rows` example times the same loop in Rust beside
 * the GEMM). Two copies at once tell whether the VM's two vCPUs share FMA pipes (SMT
 * siblings would give about half each); docs/performance.md, fourteenth session.
 *   cc -O2 -mavx2 -mfma tools/fma_chains.c -o /tmp/fma_chains
 *   /tmp/fma_chains & /tmp/fma_chains; wait
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    __m256 a[12];
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    const long steps = 200000000 / 12;
    double best = 0.0;
    for (int pass = 0; pass < 5; pass++) {
        const double t = now();
        for (long n = 0; n < steps; n++) {
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
        }
        const double g = steps * 12.0 * 16.0 / (now() - t) / 1e9;
        if (g > best) best = g;
    }
    float s = 0.0f, v[8];
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(v, a[i]);
        s += v[0];
    }
    printf("%.1f GFLOP/s (checksum %g)\n", best, s);
    return 0;
}
