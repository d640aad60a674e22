/* How fast one thread reads a tensor a previous kernel just wrote (docs/performance.md,
 * "Depthwise convolutions on planes"): per repetition, a 64 MiB sweep evicts the caches, the
 * buffer of BYTES is written in order (as a producing kernel would), then read back with
 * 512-bit loads interleaved over STREAMS equal parts (the planes a kernel reads at once),
 * and separately copied into a second buffer after the same sweep and write. Prints the
 * best of 15 repetitions. Needs AVX-512F. Left out: threads, NUMA, non-temporal stores.
 *
 *   cc -O3 -march=native tools/read_bw.c -o /tmp/read_bw
 *   /tmp/read_bw 4816896 1; /tmp/read_bw 4816896 16   # MobileNetV2's 96 x 112 x 112 tensor
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: read_bw BYTES STREAMS\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) / 4 / 256 * 256, junk_n = (64u << 20) / 4;
    int streams = atoi(argv[2]);
    if (n == 0 || streams < 1 || n % ((size_t)streams * 16) != 0) {
        fprintf(stderr, "read_bw: BYTES must hold a multiple of 16 x STREAMS floats\n");
        return 2;
    }
    float *a = aligned_alloc(64, n * 4), *b = aligned_alloc(64, n * 4),
          *junk = aligned_alloc(64, junk_n * 4);
    for (size_t i = 0; i < n; i++) a[i] = b[i] = 0;
    for (size_t i = 0; i < junk_n; i++) junk[i] = 1;
    double best_read = 1e30, best_copy = 1e30;
    volatile float sink = 0;
    for (int rep = 0; rep < 15; rep++) {
        for (size_t i = 0; i < junk_n; i += 16) junk[i] += 1;
        for (size_t i = 0; i < n; i++) a[i] = (float)(i + rep);
        double t = now_us();
        __m512 s = _mm512_setzero_ps();
        size_t per = n / streams;
        for (size_t j = 0; j < per; j += 16)
            for (int k = 0; k < streams; k++) s = _mm512_add_ps(s, _mm512_load_ps(a + k * per + j));
        double dt = now_us() - t;
        if (dt < best_read) best_read = dt;
        sink += _mm512_reduce_add_ps(s);
        for (size_t i = 0; i < junk_n; i += 16) junk[i] += 1;
        for (size_t i = 0; i < n; i++) a[i] = (float)(i + rep);
        t = now_us();
        for (size_t i = 0; i < n; i += 16) _mm512_store_ps(b + i, _mm512_load_ps(a + i));
        dt = now_us() - t;
        if (dt < best_copy) best_copy = dt;
    }
    printf("%zu bytes, %d streams: read %.1f us (%.1f GB/s), copy %.1f us\n", n * 4, streams,
           best_read, n * 4 / best_read / 1e3, best_copy);
    return sink == 12345.0f;
}
