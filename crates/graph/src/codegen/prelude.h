/* TensorForge generated-code prelude: branch-free float helpers that GCC and Clang
 * vectorize at -O3 without -ffast-math (IEEE semantics kept: NaN propagates, ±inf and
 * signed zeros as below). exp and log are Cephes-style: Cody–Waite range reduction and a
 * minimax polynomial; log1p uses Goldberg's correction log(u)·x/(u−1). Their measured
 * error bounds are in docs/graph.md (crates/graph/src/jit.rs measures them).
 * logaddexp evaluates in double with the same reductions, so its float result keeps a few
 * ulp even where m + log1p(e^d) cancels. tanh, erf and the sigmoid family are built on
 * the same exponential. Every function here must vectorize at 256 bits (AVX2) as well as at
 * 512: no double → int64 conversion, no 64-byte vector types (tools/jit_parts.sh times each
 * one at both widths). */
#if defined(__CUDACC_RTC__)
/* NVRTC compiles without any system header: CUDA's math functions are built in, the
 * integer types and the two float constants are spelled here. */
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#endif

/* C: TF_INLINE functions, always inlined where the compiler takes the attribute: a helper
 * called from a loop must be inlined for the loop to vectorize, and GCC's -O2 inlining
 * limits (the JIT's flags with GCC, jit::GCC_OPT) left tf_log, called from three helpers, a
 * call. CUDA (codegen --target cuda) defines these as device functions and `restrict` as
 * `__restrict__` before including this text. */
#ifndef TF_INLINE
#if defined(__GNUC__)
#define TF_INLINE static inline __attribute__((always_inline))
#else
#define TF_INLINE static inline
#endif
#endif
#ifndef TF_FN
#define TF_FN
#endif

/* Vectorize the next loop although the compiler could not prove its pointers apart: a
 * kernel's inputs and outputs never overlap except as the same element (an output written
 * in place of an input that dies there), which carries no dependence from one iteration to
 * the next. Without it GCC 12 left loops with seven or more pointers scalar (more run-time
 * alias checks than its vect-max-version-for-alias-checks allows): an LSTM cell's gates, 5
 * inputs and 2 outputs, at about 14 ns per element. */
#ifndef TF_IVDEP
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TF_IVDEP
#elif defined(__clang__)
#define TF_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TF_IVDEP _Pragma("GCC ivdep")
#else
#define TF_IVDEP
#endif
#endif

#if defined(__CUDACC__)
TF_INLINE float tf_bits_f(int32_t i) { return __int_as_float(i); }
TF_INLINE int32_t tf_f_bits(float f) { return __float_as_int(f); }
TF_INLINE double tf_bits_d(int64_t i) { return __longlong_as_double(i); }
TF_INLINE int64_t tf_d_bits(double f) { return __double_as_longlong(f); }
#else
TF_INLINE float tf_bits_f(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
TF_INLINE int32_t tf_f_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }
TF_INLINE double tf_bits_d(int64_t i) { double f; memcpy(&f, &i, 8); return f; }
TF_INLINE int64_t tf_d_bits(double f) { int64_t i; memcpy(&i, &f, 8); return i; }
#endif

/* e^r on |r| <= ln2/2 (Cephes' minimax polynomial), and the Cody–Waite reduction
 * x = n·ln2 + r of a finite x: returns e^r, sets *n. */
TF_INLINE float tf_exp_reduced(float x, float *n_out) {
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    *n_out = n;
    return fmaf(p, r * r, r) + 1.0f;
}

/* e^x, float. */
TF_INLINE float tf_exp(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = xc == xc ? xc : 0.0f;
    float n;
    float p = tf_exp_reduced(xc, &n);
    int32_t ni = (int32_t)n;
    int32_t n1 = ni / 2;
    int32_t n2 = ni - n1;
    float y = p * tf_bits_f((n1 + 127) << 23) * tf_bits_f((n2 + 127) << 23);
    y = x > 88.72283935546875f ? INFINITY : y;
    y = x < -103.97208404541015625f ? 0.0f : y;
    return x == x ? y : x;
}

/* e^x for x in [ln(FLT_MIN), 0] (a softmax's shifted values, tanh's e^(-2|x|), erf's tail;
 * no clamp, no NaN check: tf_exp_nonpos below adds them).
 * n = round(x·log2 e) comes from the bits of t = x·log2 e + (1.5·2^23 + 127): the sum's
 * low mantissa bits hold n + 127 (rounded to nearest even, as rintf), so t − (1.5·2^23 +
 * 127) is n and t's bits shifted left by 23 are 2^n (n >= −126 here: a normal). Then the
 * same two-step Cody–Waite reduction as tf_exp and e^r = 1 + r·Q(r), Q a degree-5 weighted
 * least-squares fit of (e^r − 1)/r on |r| <= ln2/2 (tools/exp_fit.py: relative error 2e-9,
 * 0.87 ulp in float Horner; 0.95 ulp for the whole function, jit::tests). About two thirds
 * of the operations of the rintf / int conversion / Cephes form it replaced: 0.139 → 0.110
 * ns per element at 512 bits, 0.279 → 0.225 under the AVX2 cap (tools/jit_parts.sh). */
TF_INLINE float tf_exp_nonpos_core(float x) {
    float t = fmaf(x, 1.44269504088896341f, 12583039.0f);
    float n = t - 12583039.0f;
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float q = 0.0013843545457348228f;
    q = fmaf(q, r, 0.008374129422008991f);
    q = fmaf(q, r, 0.04166800156235695f);
    q = fmaf(q, r, 0.16666431725025177f);
    q = fmaf(q, r, 0.4999999403953552f);
    q = fmaf(q, r, 1.0f);
    float p = fmaf(q, r, 1.0f);
    return p * tf_bits_f(tf_f_bits(t) << 23);
}

/* e^x for every x ≤ 0 (NaN stays NaN): below ln(FLT_MIN) the result is 0, where the true
 * value is a subnormal under 1.2e-38. */
TF_INLINE float tf_exp_nonpos(float x) {
    float y = tf_exp_nonpos_core(x < -87.33654475f ? -87.33654475f : x);
    return x < -87.33654475f ? 0.0f : y;
}

/* ln x, float. */
TF_INLINE float tf_log(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    int32_t ix = tf_f_bits(xs);
    int32_t e = ((ix >> 23) & 0xff) - 127 - (sub ? 23 : 0);
    float m = tf_bits_f((ix & 0x007fffff) | 0x3f800000);
    int big = m > 1.41421356237f;
    m = big ? m * 0.5f : m;
    e += big;
    float f = m - 1.0f;
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = fmaf(y, f, -1.1514610310e-1f);
    y = fmaf(y, f, 1.1676998740e-1f);
    y = fmaf(y, f, -1.2420140846e-1f);
    y = fmaf(y, f, 1.4249322787e-1f);
    y = fmaf(y, f, -1.6668057665e-1f);
    y = fmaf(y, f, 2.0000714765e-1f);
    y = fmaf(y, f, -2.4999993993e-1f);
    y = fmaf(y, f, 3.3333331174e-1f);
    y = y * f * z;
    float fe = (float)e;
    y = fmaf(fe, -2.12194440e-4f, y);
    y = fmaf(-0.5f, z, y);
    float r = f + y;
    r = fmaf(fe, 0.693359375f, r);
    r = x == 0.0f ? -INFINITY : r;
    r = x < 0.0f ? NAN : r;
    r = x == INFINITY ? INFINITY : r;
    return x == x ? r : x;
}

/* ln(1 + x), float: Goldberg's log(u)·x/(u − 1), u = 1 + x rounded. */
TF_INLINE float tf_log1p(float x) {
    float u = 1.0f + x;
    float d = u - 1.0f;
    float l = tf_log(u);
    float r = d == 0.0f ? x : l * (x / (d == 0.0f ? 1.0f : d));
    r = x == INFINITY ? INFINITY : r;
    r = x == -1.0f ? -INFINITY : r;
    return x == x ? r : x;
}

/* e^x, double, for x <= 0 (logaddexp's e^(min − max)); 2^-1022 underflows to 0. */
TF_INLINE double tf_exp_neg_d(double x) {
    double xc = x < -708.0 ? -708.0 : x;
    double n = rint(xc * 1.4426950408889634);
    double r = fma(n, -6.93147180369123816490e-01, xc);
    r = fma(n, -1.90821492927058770002e-10, r);
    /* e^r on |r| <= ln2/2: degree-11 Chebyshev interpolant (relative error 1.7e-17 with
     * these double coefficients, measured in 40-digit arithmetic; tools/logaddexp_fit.py). */
    double p = 2.5110037605963777e-08;
    p = fma(p, r, 2.763263963904103e-07);
    p = fma(p, r, 2.755724091857897e-06);
    p = fma(p, r, 2.4801485482328494e-05);
    p = fma(p, r, 0.00019841269890047113);
    p = fma(p, r, 0.0013888888952314775);
    p = fma(p, r, 0.008333333333319601);
    p = fma(p, r, 0.0416666666664881);
    p = fma(p, r, 0.1666666666666668);
    p = fma(p, r, 0.5000000000000019);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    /* 2^n from n's bits: n + 1.5·2^52 holds n in its low mantissa bits, so no double →
     * int64 conversion is needed (AVX2 has none as a vector instruction; with one, this
     * loop stayed scalar there: 9.3 ns per logaddexp against 3.0). */
    uint64_t nb = (uint64_t)tf_d_bits(n + 6755399441055744.0);
    double y = p * tf_bits_d((int64_t)((nb << 52) + ((uint64_t)1023 << 52)));
    return x < -708.0 ? 0.0 : y;
}

/* ln(1 + t) for t in [0, 1], double: 2·atanh(s) = 2s + s³·Q(s²) for s = t / (2 + t),
 * |s| <= 1/3, with Q a degree-9 Chebyshev interpolant of (2·atanh(√u)/√u − 2)/u on
 * [0, 1/9] (relative error 7e-18 in ln(1 + t); the 12-term atanh series it replaces was
 * 1.6e-14 at t = 1; tools/logaddexp_fit.py). */
TF_INLINE double tf_log1p_unit_d(double t) {
    double s = t / (2.0 + t);
    double s2 = s * s;
    double p = 0.1616404561194353;
    p = fma(p, s2, 0.08800738486144674);
    p = fma(p, s2, 0.12001072809590713);
    p = fma(p, s2, 0.13314144209654935);
    p = fma(p, s2, 0.15385570064958623);
    p = fma(p, s2, 0.18181789436132859);
    p = fma(p, s2, 0.22222222717427864);
    p = fma(p, s2, 0.2857142856710876);
    p = fma(p, s2, 0.40000000000014585);
    p = fma(p, s2, 0.6666666666666666);
    return fma(p * s2, s, 2.0 * s);
}

/* log(e^a + e^b) = max + log1p(e^(min − max)), evaluated in double. */
TF_INLINE float tf_logaddexp(float a, float b) {
    double da = a, db = b;
    double hi = da > db ? da : db;
    double lo = da > db ? db : da;
    double d = lo - hi;
    d = d == d ? d : 0.0;
    double r = hi + tf_log1p_unit_d(tf_exp_neg_d(d));
    float y = (float)r;
    y = a == b ? (float)(da + 0.69314718055994530942) : y;
    y = hi == INFINITY ? INFINITY : y;
    y = lo == -INFINITY ? (float)hi : y;
    return (a == a && b == b) ? y : a + b;
}

/* maxNum / minNum as the interpreter computes them: a NaN b yields a; ties yield b. */
TF_INLINE float tf_fmax(float a, float b) { return (b != b || a > b) ? a : b; }
TF_INLINE float tf_fmin(float a, float b) { return (b != b || a < b) ? a : b; }

/* 1 / (1 + e^(−x)), from e = e^(−|x|) ≤ 1 (tf_exp_nonpos, the cheaper exponential):
 * 1 / (1 + e) for x ≥ 0, e / (1 + e) below; one division either way. Below x = −87.34 it
 * is 0 where the true value is a subnormal (under 1.2e-38); ±inf give 1 and 0; NaN stays. */
TF_INLINE float tf_sigmoid(float x) {
    const float e = tf_exp_nonpos(-fabsf(x));
    const float r = (x >= 0.0f ? 1.0f : e) / (1.0f + e);
    return x == x ? r : x;
}

/* tanh x, float, branch-free: Cephes' odd polynomial on |x| < 0.625 (relative accuracy
 * down to the smallest x), else (1 − e)/(1 + e) with e = e^(−2|x|) ≤ e^(−1.25) (no
 * cancellation) and the sign restored; |x| is capped at 44 before the exponential (tanh is
 * 1.0f well before). */
TF_INLINE float tf_tanh(float x) {
    float a = fabsf(x);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = fmaf(p, z, 2.06390887954e-2f);
    p = fmaf(p, z, -5.37397155531e-2f);
    p = fmaf(p, z, 1.33314422036e-1f);
    p = fmaf(p, z, -3.33332819422e-1f);
    float small = fmaf(p * z, x, x);
    float e = tf_exp_nonpos(-2.0f * (a > 44.0f ? 44.0f : a));
    float big = copysignf((1.0f - e) / (1.0f + e), x);
    float r = a < 0.625f ? small : big;
    return x == x ? r : x;
}

/* erf x, float, branch-free: |x| < 0.921875: x + x·P(x²); otherwise 1 − e^(−r) with
 * r = a + a·Q(a) ≈ −ln erfc(a), a = |x| capped at 3.925 (where 1 − erfc rounds to 1.0f),
 * and the sign restored. P (degree 5 in x²) and Q (degree 6) are weighted minimax fits of
 * the error that reaches erf, by tools/erf_fit.py: about 1.03 ulp with a correctly rounded
 * exponential; tf_exp_nonpos adds at most about 0.2 ulp of erf (e^(−r) ≤ 0.19 here). The
 * same split as the Arm optimized-routines' erff; half the operations of the two-piece
 * erfc fit it replaced (2.4 ulp). Measured in jit::tests against a series. */
TF_INLINE float tf_erf(float x) {
    float a = fabsf(x);
    float z = a * a;
    float p = -0.0005990893f;
    p = fmaf(p, z, 0.0049931896f);
    p = fmaf(p, z, -0.026766624f);
    p = fmaf(p, z, 0.11281817f);
    p = fmaf(p, z, -0.37612495f);
    p = fmaf(p, z, 0.12837915f);
    float small = fmaf(a, p, a);
    float ac = a < 3.925f ? a : 3.925f;
    float q = 1.1303632e-05f;
    q = fmaf(q, ac, -0.0003235275f);
    q = fmaf(q, ac, 0.0036454f);
    q = fmaf(q, ac, -0.02376828f);
    q = fmaf(q, ac, 0.106244095f);
    q = fmaf(q, ac, 0.635147f);
    q = fmaf(q, ac, 0.12864956f);
    float r = fmaf(ac, q, ac);
    float big = 1.0f - tf_exp_nonpos(-r);
    float y = a < 0.921875f ? small : big;
    y = copysignf(y, x);
    return x == x ? y : x;
}

/* Exact GELU, 0.5·x·(1 + erf(x/√2)) = x·Φ(x), branch-free and with one exponential:
 * max(x, 0) − a·h with a = |x| (held at 5.55) and h = Φ(−a) = e^(−r), r = ln 2 + a·G(d),
 * G a degree-10 polynomial in d = a/2.775 − 1 (tools/gelu_erf_fit.py: a minimax fit of r's
 * absolute error, i.e. h's relative error). That is x·(1 − h) for x > 0 and x·h for x < 0,
 * each one fused multiply-add: no cancellation where the composite's 1 + erf(x/√2) loses
 * every digit (x below about −4). No select between polynomial branches, no division, no
 * clamp inside the exponential (r ∈ [ln 2, 19]). Error (jit::tests measures it): at most
 * 2.5 ulp for x > −1, 7 ulp on (−3, −1], 24 ulp below −3 where |y| > 1e-6 (f32 cannot hold r
 * more closely), 8e-8 absolute elsewhere; gelu(−inf) = −7.9e-8 (the true value is −0).
 * ±0 stay ±0, +inf stays, NaN propagates (a > 5.55 is false for NaN). */
TF_INLINE float tf_gelu_erf(float x) {
    float a = fabsf(x);
    a = a > 5.55f ? 5.55f : a;
    float d = fmaf(a, 0.36036035f, -1.0f);
    float g = -5.0922994e-05f;
    g = fmaf(g, d, 0.00016349475f);
    g = fmaf(g, d, -0.00019407997f);
    g = fmaf(g, d, -1.0418786e-05f);
    g = fmaf(g, d, 0.00086323335f);
    g = fmaf(g, d, -0.00373237f);
    g = fmaf(g, d, 0.011739796f);
    g = fmaf(g, d, -0.031577136f);
    g = fmaf(g, d, 0.077902496f);
    g = fmaf(g, d, 1.2011702f);
    g = fmaf(g, d, 1.8736384f);
    /* e^(−r), −r ∈ [−19, −ln 2]: no clamp needed. */
    float h = tf_exp_nonpos_core(-fmaf(a, g, 0.6931472f));
    float xp = x > 0.0f ? x : copysignf(0.0f, x);
    return fmaf(-a, h, xp);
}

/* Round to bfloat16 (nearest even; NaN kept) and back. */
TF_INLINE float tf_bf16(float x) {
    int32_t i = tf_f_bits(x);
    int32_t r = (i + 0x7fff + ((i >> 16) & 1)) & (int32_t)0xffff0000;
    return x == x ? tf_bits_f(r) : x;
}

/* Round to IEEE binary16 (nearest even, overflow to inf, subnormals) and back. */
TF_INLINE float tf_f16(float x) {
    float a = fabsf(x);
    /* Scale so that the binary16 ulp at a's binade is 1, round, scale back. */
    int32_t e = (tf_f_bits(a) >> 23) - 127;
    e = e < -14 ? -14 : e;
    float ulp = tf_bits_f((e - 10 + 127) << 23);
    float q = rintf(a / ulp) * ulp;
    q = a >= 65520.0f ? INFINITY : q;
    q = copysignf(q, x);
    return x == x ? q : x;
}

/* Saturating int8 quantization: clamp(round_half_even(x / s) + z, −128, 127). */
TF_INLINE float tf_quant(float x, float s, float z) {
    float q = rintf(x / s) + z;
    q = q < -128.0f ? -128.0f : q;
    return q > 127.0f ? 127.0f : q;
}

/* Row reductions, written as independent lanes (arrays the compiler maps onto the
 * machine's own vector registers), so that they vectorize without reassociation flags at
 * every vector width and their chains overlap (one 4-lane double chain was latency-bound:
 * 0.14 ns per element). TF_MAX_LANES floats for the max, TF_SUM_LANES doubles for sums;
 * lanes are combined pairwise at the end. The counts are what measured fastest at 256 and
 * 512 bits (tools/jit_parts.sh): 16 max lanes stayed scalar with GCC 12, 32 sum lanes
 * slowed a row kernel reading from memory by a quarter. The CUDA target, one thread per
 * row, sets 1. */
#ifndef TF_MAX_LANES
#define TF_MAX_LANES 32
#endif
#ifndef TF_SUM_LANES
#define TF_SUM_LANES 16
#endif

/* Ask for the first min(n, 4096) floats at p (a row kernel's next row) to be brought into
 * the caches, one request per 64-byte line; no-op where the compiler has no prefetch. */
TF_INLINE void tf_prefetch_row(const float *p, int64_t n) {
#if defined(__GNUC__) && !defined(__CUDACC__)
    int64_t m = n < 4096 ? n : 4096;
    for (int64_t c = 0; c < m; c += 16) __builtin_prefetch(p + c, 0, 3);
#else
    (void)p;
    (void)n;
#endif
}

/* The largest of TF_MAX_LANES NaN-free lanes (a power of two), pairwise in halves: each
 * step is one vector operation, where a running maximum over the lanes was a chain of
 * TF_MAX_LANES dependent scalar steps (without reassociation flags the compiler keeps the
 * order), a quarter of a 128-column softmax row's time. */
TF_INLINE float tf_lanes_max(float *m) {
#if TF_MAX_LANES >= 64
#error "tf_lanes_max halves at most 32 lanes"
#endif
#if TF_MAX_LANES >= 32
    for (int k = 0; k < 16; ++k) m[k] = m[k + 16] > m[k] ? m[k + 16] : m[k];
#endif
#if TF_MAX_LANES >= 16
    for (int k = 0; k < 8; ++k) m[k] = m[k + 8] > m[k] ? m[k + 8] : m[k];
#endif
#if TF_MAX_LANES >= 8
    for (int k = 0; k < 4; ++k) m[k] = m[k + 4] > m[k] ? m[k + 4] : m[k];
#endif
#if TF_MAX_LANES >= 4
    for (int k = 0; k < 2; ++k) m[k] = m[k + 2] > m[k] ? m[k + 2] : m[k];
#endif
#if TF_MAX_LANES >= 2
    return m[1] > m[0] ? m[1] : m[0];
#else
    return m[0];
#endif
}

/* Row max ignoring NaN (the interpreter's f32::max), and whether a NaN was seen. */
TF_INLINE float tf_row_max_t(const float *restrict x, int64_t n, int *nan_out, int vtail) {
    if (n < TF_MAX_LANES) {
        /* A short row (a pooling window, a small spatial axis): the lanes would only add
         * their setup and combination to a handful of elements. Same result. */
        float r = -INFINITY;
        int nan = 0;
        for (int64_t c = 0; c < n; ++c) {
            float v = x[c];
            nan |= v != v;
            r = v > r ? v : r;
        }
        *nan_out = nan;
        return r;
    }
    float m[TF_MAX_LANES];
    int32_t bad[TF_MAX_LANES];
    for (int k = 0; k < TF_MAX_LANES; ++k) {
        m[k] = -INFINITY;
        bad[k] = 0;
    }
    int64_t c = 0;
    for (; c + TF_MAX_LANES <= n; c += TF_MAX_LANES)
        for (int k = 0; k < TF_MAX_LANES; ++k) {
            float v = x[c + k];
            m[k] = v > m[k] ? v : m[k];
            bad[k] |= v != v;
        }
    /* With vtail, the tail as one more pass of the lanes over the row's last TF_MAX_LANES
     * values (n >= TF_MAX_LANES here): the values seen twice change neither the max nor the
     * NaN flag, and the pass runs in vector registers where a scalar loop took up to
     * TF_MAX_LANES - 1 dependent steps. Only for a row in memory (tf_row_max_in): on a row
     * the kernel has just written (a prologue's scratch row), the window's loads span two
     * of the row's pending stores and wait for them (store forwarding fails). */
    if (vtail && c < n) {
        const int64_t b = n - TF_MAX_LANES;
        for (int k = 0; k < TF_MAX_LANES; ++k) {
            float v = x[b + k];
            m[k] = v > m[k] ? v : m[k];
            bad[k] |= v != v;
        }
        c = n;
    }
    float r = tf_lanes_max(m);
    int32_t bad_any = 0;
    for (int k = 0; k < TF_MAX_LANES; ++k) bad_any |= bad[k];
    int nan = bad_any != 0;
    for (; c < n; ++c) {
        float v = x[c];
        nan |= v != v;
        r = v > r ? v : r;
    }
    *nan_out = nan;
    return r;
}

/* The largest of a row and whether it holds a NaN: tf_row_max for a row the kernel has
 * just written (scalar tail), tf_row_max_in for a row of an input (vector tail). */
TF_INLINE float tf_row_max(const float *restrict x, int64_t n, int *nan_out) {
    return tf_row_max_t(x, n, nan_out, 0);
}
TF_INLINE float tf_row_max_in(const float *restrict x, int64_t n, int *nan_out) {
    return tf_row_max_t(x, n, nan_out, 1);
}

/* Σ s[k] over n lanes (a power of two), pairwise. */
TF_INLINE double tf_lanes_sum_n(double *s, int n) {
    for (int w = n / 2; w > 0; w /= 2)
        for (int k = 0; k < w; ++k) s[k] += s[k + w];
    return s[0];
}

/* Σ s[k] over TF_SUM_LANES lanes, pairwise. */
TF_INLINE double tf_lanes_sum(double *s) { return tf_lanes_sum_n(s, TF_SUM_LANES); }

/* Σ x[c], in double. */
TF_INLINE double tf_row_sum(const float *restrict x, int64_t n) {
    if (n < TF_SUM_LANES) {
        /* A short row: the lanes' loop would not run and every element would go to lane 0
         * in order, so this sequential sum is the same value without the lanes' setup. */
        double s = 0.0;
        for (int64_t c = 0; c < n; ++c) s += (double)x[c];
        return s;
    }
    double s[TF_SUM_LANES];
    for (int k = 0; k < TF_SUM_LANES; ++k) s[k] = 0.0;
    int64_t c = 0;
    for (; c + TF_SUM_LANES <= n; c += TF_SUM_LANES)
        for (int k = 0; k < TF_SUM_LANES; ++k) s[k] += (double)x[c + k];
    for (; c < n; ++c) s[0] += (double)x[c];
    return tf_lanes_sum(s);
}

/* Σ x[c]², in double. */
TF_INLINE double tf_row_sumsq(const float *restrict x, int64_t n) {
    if (n < TF_SUM_LANES) {
        double s = 0.0;
        for (int64_t c = 0; c < n; ++c) s += (double)x[c] * (double)x[c];
        return s;
    }
    double s[TF_SUM_LANES];
    for (int k = 0; k < TF_SUM_LANES; ++k) s[k] = 0.0;
    int64_t c = 0;
    for (; c + TF_SUM_LANES <= n; c += TF_SUM_LANES)
        for (int k = 0; k < TF_SUM_LANES; ++k) s[k] += (double)x[c + k] * (double)x[c + k];
    for (; c < n; ++c) s[0] += (double)x[c] * (double)x[c];
    return tf_lanes_sum(s);
}

/* Σ (x[c] − mean)², in double. */
TF_INLINE double tf_row_sumsq_dev(const float *restrict x, int64_t n, double mean) {
    if (n < TF_SUM_LANES) {
        double s = 0.0;
        for (int64_t c = 0; c < n; ++c) {
            double d = (double)x[c] - mean;
            s += d * d;
        }
        return s;
    }
    double s[TF_SUM_LANES];
    for (int k = 0; k < TF_SUM_LANES; ++k) s[k] = 0.0;
    int64_t c = 0;
    for (; c + TF_SUM_LANES <= n; c += TF_SUM_LANES)
        for (int k = 0; k < TF_SUM_LANES; ++k) {
            double d = (double)x[c + k] - mean;
            s[k] += d * d;
        }
    for (; c < n; ++c) {
        double d = (double)x[c] - mean;
        s[0] += d * d;
    }
    return tf_lanes_sum(s);
}

/* Ask for the 64-byte line at p to be read (tf_prefetch_line) or written
 * (tf_prefetch_line_w: fetched for ownership, so that the store that follows does not wait
 * for it); no-op for NULL and where the compiler has no prefetch. */
TF_INLINE void tf_prefetch_line(const float *p) {
#if defined(__GNUC__) && !defined(__CUDACC__)
    if (p) __builtin_prefetch(p, 0, 3);
#else
    (void)p;
#endif
}
TF_INLINE void tf_prefetch_line_w(float *p) {
#if defined(__GNUC__) && !defined(__CUDACC__)
    if (p) __builtin_prefetch(p, 1, 3);
#else
    (void)p;
#endif
}

/* Float lanes of tf_row_exp_shift's sum: one vector register at the machine's width, 16 at
 * 512 bits and 8 otherwise (the CUDA target, one thread per row, sets 1). Fewer lanes than
 * the sums' TF_SUM_LANES cost nothing on long rows, where the exponentials bound the loop,
 * and they cut what every row pays to set up and combine its lanes, and the scalar tail:
 * with 8 lanes instead of 16 under AVX2, a softmax over rows of 128 and 197 columns (the
 * attention rows of the Llama / GPT-2 and ViT benchmark models) went 0.70 → 0.61 and 0.80 →
 * 0.66 ns per element in a C driver on AMD EPYC Zen 3, and rows of 1024 stayed at 0.49. */
#ifndef TF_EXP_LANES
#if defined(__AVX512F__)
#define TF_EXP_LANES 16
#else
#define TF_EXP_LANES 8
#endif
#endif

/* Elements per block of tf_row_exp_shift's float lanes (each lane sums at most 256 /
 * TF_EXP_LANES values in float before the block goes into the double lanes). */
#define TF_EXP_BLOCK 256

/* y[c] = e^(x[c] − m) for m the row's finite maximum (so every x[c] − m <= 0, NaN-free);
 * returns Σ y. The sum is taken as the values are stored, in TF_EXP_LANES float lanes over
 * blocks of TF_EXP_BLOCK elements whose lanes are then added into double lanes: every float
 * lane adds at most 32 values in (0, 1] (16 at 16 lanes), so a block's sum is within
 * 31·2^-24 ≈ 1.9e-6 of exact relative to itself, and the rows' length only grows the double
 * part. (Summing in double lanes as the values are stored kept the loop from vectorizing
 * well: a separate double pass was faster than that, and this is faster than both.) While
 * it works it asks for one line of p0 and of p1 per TF_EXP_LANES elements (a row ahead of
 * this one of the kernel's row-strided inputs, the generated kernels pass the row after
 * next, or NULL; at 8 lanes each line is asked for twice, which
 * costs less than a test), and for one line of pw to write (the next row of the output, or
 * NULL): spread over the exponentials, those transfers overlap the arithmetic, where one
 * burst of requests at the row's start did not, and the stores into y no longer wait for
 * their lines one by one. */
TF_INLINE double tf_row_exp_shift_t(const float *restrict x, float m, float *restrict y,
                                    int64_t n, const float *p0, const float *p1, float *pw,
                                    int vtail) {
    double d[TF_EXP_LANES];
    for (int k = 0; k < TF_EXP_LANES; ++k) d[k] = 0.0;
    /* A row of n >= TF_EXP_LANES values that is not a whole number of lane vectors ends
     * in one vector over its last TF_EXP_LANES values, read before y is written (so a call
     * with y = x, which `restrict` does not promise, still reads the inputs; the unit test
     * checks that case as compiled): the values it shares with the last whole vector are
     * stored again, equal, and summed once. A scalar tail took up to TF_EXP_LANES - 1 scalar exponentials and
     * their double sum through memory a row: 7 of 199 on wav2vec2's attention rows, 5 of 197
     * on ViT's. A tail of one value stays scalar: with the length a constant, GCC 12 split
     * the vector's one summed lane off into scalar code whose stores the sum then read as a
     * vector (rows of 17, 33 and 65: 1.7–2.6 times slower; tails of 2 to 15 all faster;
     * tools/kernel_driver.py on AMD EPYC Zen 5 at AVX-512 and at 8 lanes, docs/performance.md).
     * Only with vtail (a row in memory, tf_row_exp_shift_in): as tf_row_max_t says, on a row
     * just written the overlapping window waits on its stores. */
    const int64_t tail = n % TF_EXP_LANES;
    const int vec_tail = vtail && tail > 1 && n >= TF_EXP_LANES;
    float last[TF_EXP_LANES];
    if (vec_tail)
        for (int k = 0; k < TF_EXP_LANES; ++k) last[k] = x[n - TF_EXP_LANES + k];
    int64_t c = 0;
    while (c + TF_EXP_LANES <= n) {
        const int64_t e = c + TF_EXP_BLOCK < n ? c + TF_EXP_BLOCK : n;
        float s[TF_EXP_LANES];
        for (int k = 0; k < TF_EXP_LANES; ++k) s[k] = 0.0f;
        for (; c + TF_EXP_LANES <= e; c += TF_EXP_LANES) {
            tf_prefetch_line(p0 ? p0 + c : p0);
            tf_prefetch_line(p1 ? p1 + c : p1);
            tf_prefetch_line_w(pw ? pw + c : pw);
            for (int k = 0; k < TF_EXP_LANES; ++k) {
                const float v = tf_exp_nonpos(x[c + k] - m);
                y[c + k] = v;
                s[k] += v;
            }
        }
        for (int k = 0; k < TF_EXP_LANES; ++k) d[k] += (double)s[k];
    }
    if (vec_tail) {
        const int64_t b = n - TF_EXP_LANES;
        float s[TF_EXP_LANES];
        for (int k = 0; k < TF_EXP_LANES; ++k) {
            const float v = tf_exp_nonpos(last[k] - m);
            y[b + k] = v;
            s[k] = k >= TF_EXP_LANES - tail ? v : 0.0f;
        }
        for (int k = 0; k < TF_EXP_LANES; ++k) d[k] += (double)s[k];
        c = n;
    }
    for (; c < n; ++c) {
        const float v = tf_exp_nonpos(x[c] - m);
        y[c] = v;
        d[0] += (double)v;
    }
    return tf_lanes_sum_n(d, TF_EXP_LANES);
}

/* tf_row_exp_shift_t for a row the kernel has just written (scalar tail) and for a row of an
 * input (tf_row_exp_shift_in: vector tail). */
TF_INLINE double tf_row_exp_shift(const float *restrict x, float m, float *restrict y,
                                  int64_t n, const float *p0, const float *p1, float *pw) {
    return tf_row_exp_shift_t(x, m, y, n, p0, p1, pw, 0);
}
TF_INLINE double tf_row_exp_shift_in(const float *restrict x, float m, float *restrict y,
                                     int64_t n, const float *p0, const float *p1, float *pw) {
    return tf_row_exp_shift_t(x, m, y, n, p0, p1, pw, 1);
}

/* One RMSNorm row, y[c] = x[c]·inv·g[c], and Σ xn[c]² of the next row xn, computed in the
 * same loop: the next row streams in from memory while this one is written, as in a copy
 * (the statistic's pass alone, then the writing pass alone, left each half of the
 * memory traffic idle in turn). The sum has tf_row_sumsq's lanes, order and tail, so it is
 * the same value. */
TF_INLINE double tf_rmsnorm_row_next(const float *restrict x, float inv,
                                     const float *restrict g, float *restrict y,
                                     const float *restrict xn, int64_t n) {
    if (n < TF_SUM_LANES) {
        for (int64_t c = 0; c < n; ++c) y[c] = x[c] * inv * g[c];
        return tf_row_sumsq(xn, n);
    }
    double s[TF_SUM_LANES];
    for (int k = 0; k < TF_SUM_LANES; ++k) s[k] = 0.0;
    int64_t c = 0;
    for (; c + TF_SUM_LANES <= n; c += TF_SUM_LANES)
        for (int k = 0; k < TF_SUM_LANES; ++k) {
            y[c + k] = x[c + k] * inv * g[c + k];
            s[k] += (double)xn[c + k] * (double)xn[c + k];
        }
    for (; c < n; ++c) {
        y[c] = x[c] * inv * g[c];
        s[0] += (double)xn[c] * (double)xn[c];
    }
    return tf_lanes_sum(s);
}

/* One LayerNorm row, y[c] = (x[c] − mean)·inv·g[c] + b[c], and Σ xn[c] of the next row in
 * the same loop (as tf_rmsnorm_row_next; tf_row_sum's lanes, so the same value). */
TF_INLINE double tf_layernorm_row_next(const float *restrict x, float mean, float inv,
                                       const float *restrict g, const float *restrict b,
                                       float *restrict y, const float *restrict xn,
                                       int64_t n) {
    if (n < TF_SUM_LANES) {
        for (int64_t c = 0; c < n; ++c) y[c] = (x[c] - mean) * inv * g[c] + b[c];
        return tf_row_sum(xn, n);
    }
    double s[TF_SUM_LANES];
    for (int k = 0; k < TF_SUM_LANES; ++k) s[k] = 0.0;
    int64_t c = 0;
    for (; c + TF_SUM_LANES <= n; c += TF_SUM_LANES)
        for (int k = 0; k < TF_SUM_LANES; ++k) {
            y[c + k] = (x[c + k] - mean) * inv * g[c + k] + b[c + k];
            s[k] += (double)xn[c + k];
        }
    for (; c < n; ++c) {
        y[c] = (x[c] - mean) * inv * g[c] + b[c];
        s[0] += (double)xn[c];
    }
    return tf_lanes_sum(s);
}
