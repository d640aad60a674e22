#!/usr/bin/env bash
# Per-element cost of the JIT prelude's building blocks (docs/performance.md, "Component
# timings"): writes the prelude with `tensorforge codegen`, compiles a small driver with the
# JIT's flags, and prints the best of 50 passes over 256 rows of 1024 floats (L2-resident)
# for the row max, tf_exp, the double row sum and a scale loop.
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
volatile double sink;
int main(void) {
    int n = 1024, R = 256;
    float *x = malloc(sizeof(float) * n * R), *y = malloc(sizeof(float) * n);
    for (int i = 0; i < n * R; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
    const char *name[4] = {"row max", "tf_exp", "double row sum", "scale"};
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int k = 0; k < 50; k++)
        for (int part = 0; part < 4; part++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (int r = 0; r < R; r++) {
                const float *xr = x + r * n;
                int nan;
                if (part == 0) sink += tf_row_max(xr, n, &nan);
                if (part == 1) { for (int c = 0; c < n; c++) y[c] = tf_exp(xr[c] - 0.5f); sink += y[3]; }
                if (part == 2) sink += tf_row_sum(xr, n);
                if (part == 3) { for (int c = 0; c < n; c++) y[c] = xr[c] * 0.5f; sink += y[5]; }
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            double t = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (n * R);
            if (t < best[part]) best[part] = t;
        }
    for (int p = 0; p < 4; p++) printf("%-15s %.3f ns/element\n", name[p], best[p]);
    return 0;
}
C
FLAGS="-O3 -march=native -fno-math-errno -fno-trapping-math -ffp-contract=off -std=c11 -w"
if [ "$(uname -m)" = x86_64 ]; then FLAGS="$FLAGS -mprefer-vector-width=512"; fi
${CC:-cc} $FLAGS -I"$T/cg" "$T/parts.c" -lm -o "$T/parts"
"$T/parts"
