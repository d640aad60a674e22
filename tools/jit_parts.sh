#!/usr/bin/env bash
# Per-element cost of the JIT prelude's building blocks (docs/performance.md, "Component
# timings"): writes the prelude with `tensorforge codegen`, compiles a small driver with the
# JIT's flags, and prints the best of 200 passes over 4096 floats (L1-resident) for each
# elementwise function, and of 50 passes over 256 rows of 1024 floats (L2-resident) for the
# row helpers. On an AVX-512 CPU it runs twice: at 512 bits and capped at AVX2
# (`-mno-avx512f`, what the JIT builds under TENSORFORGE_SIMD=avx2), since every helper
# must vectorize at both widths; a column far slower than its neighbour is a helper that
# stayed scalar there.
# Usage: tools/jit_parts.sh [BIN]
set -euo pipefail
BIN=${1:-target/release/tensorforge}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$BIN" codegen "$ROOT/examples/graphs/residual_layernorm.json" --target c --out "$T/cg" >/dev/null
cat > "$T/parts.c" <<'C'
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "prelude.h"
#define N 4096
static float x[N], x2[N], y[N];
static volatile double sink;
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
/* Best of 200 passes of y[c] = EXPR over N elements (v = x[c], w = x2[c]). */
#define ELEM(name, expr)                                                                  \
    {                                                                                     \
        double best = 1e30;                                                               \
        for (int k = 0; k < 200; k++) {                                                   \
            double t = now();                                                             \
            for (int c = 0; c < N; c++) {                                                 \
                float v = x[c], w = x2[c];                                                \
                y[c] = (expr);                                                            \
            }                                                                             \
            t = now() - t;                                                                \
            best = t < best ? t : best;                                                   \
            sink += y[k % N];                                                             \
        }                                                                                 \
        printf("%-16s %.3f\n", name, best / N);                                           \
    }
/* Best of 50 passes of STMT over 256 rows of 1024 (xr: the row). */
#define ROWS(name, stmt)                                                                  \
    {                                                                                     \
        double best = 1e30;                                                               \
        for (int k = 0; k < 50; k++) {                                                    \
            double t = now();                                                             \
            for (int r = 0; r < 256; r++) {                                               \
                const float *xr = big + r * 1024;                                         \
                int nan;                                                                  \
                (void)nan;                                                                \
                stmt;                                                                     \
            }                                                                             \
            t = now() - t;                                                                \
            best = t < best ? t : best;                                                   \
        }                                                                                 \
        printf("%-16s %.3f\n", name, best / (256.0 * 1024));                              \
    }
int main(void) {
    float *big = malloc(sizeof(float) * 256 * 1024);
    for (int i = 0; i < N; i++) {
        x[i] = (float)rand() / RAND_MAX * 8 - 4;
        x2[i] = (float)rand() / RAND_MAX * 8 - 4;
    }
    for (int i = 0; i < 256 * 1024; i++) big[i] = (float)rand() / RAND_MAX * 2 - 1;
    ELEM("copy", v)
    ELEM("tf_exp", tf_exp(v))
    ELEM("tf_exp_nonpos", tf_exp_nonpos(-v * v))
    ELEM("tf_log", tf_log(v * v))
    ELEM("tf_log1p", tf_log1p(v * v))
    ELEM("tf_logaddexp", tf_logaddexp(v, w))
    ELEM("tf_sigmoid", tf_sigmoid(v))
    ELEM("tf_tanh", tf_tanh(v))
    ELEM("tf_erf", tf_erf(v))
    ELEM("tf_fmax", tf_fmax(v, w))
    ELEM("tf_bf16", tf_bf16(v))
    ELEM("tf_f16", tf_f16(v))
    ELEM("tf_quant", tf_quant(v, 0.1f, 3.0f))
    ROWS("tf_row_max", sink += tf_row_max(xr, 1024, &nan))
    ROWS("tf_row_sum", sink += tf_row_sum(xr, 1024))
    ROWS("tf_row_sumsq", sink += tf_row_sumsq(xr, 1024))
    ROWS("tf_row_exp_shift", sink += tf_row_exp_shift(xr, 1.0f, y, 1024))
    return 0;
}
C
FLAGS="-O3 -march=native -fno-math-errno -fno-trapping-math -ffp-contract=off -std=c11 -w"
WIDTHS="native"
if [ "$(uname -m)" = x86_64 ] && grep -qw avx512f /proc/cpuinfo; then
  WIDTHS="512 avx2"
fi
COLS=()
for w in $WIDTHS; do
  case $w in
    512) F="$FLAGS -mprefer-vector-width=512" ;;
    avx2) F="$FLAGS -mno-avx512f" ;;
    *) F="$FLAGS" ;;
  esac
  ${CC:-cc} $F -I"$T/cg" "$T/parts.c" -lm -o "$T/parts_$w"
  "$T/parts_$w" > "$T/out_$w"
  COLS+=("$T/out_$w")
done
echo "ns per element ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); columns: $WIDTHS"
if [ ${#COLS[@]} = 2 ]; then
  join <(sort "${COLS[0]}") <(sort "${COLS[1]}") | column -t
else
  cat "${COLS[0]}"
fi
