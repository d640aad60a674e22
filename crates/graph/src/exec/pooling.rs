//! 2-D max and average pooling over NCHW planes, computed separably: for each output row, one
//! pass reduces the window's input rows into a row of column values (contiguous, so it
//! vectorizes), bordered by the reduction's identity where the window reaches into padding;
//! a second pass reduces each output column's window along that row (unit stride, or a
//! stride of 2 or more read as a fixed-stride access the compiler vectorizes as an
//! interleaved load). On AVX2 CPUs both passes are compiled for AVX2. Planes run in
//! parallel when there are enough of them and enough work.
//!
//! Max propagates NaN (a NaN anywhere in the window gives NaN, as onnxruntime's MaxPool);
//! padding never wins a max and is left out of an average's count unless
//! `count_include_pad`. A window wholly in padding gives −∞ (max) or 0 (average).
//! Left out: dilation, ceil-mode output sizes (the output shape is the caller's), NCHWc
//! layouts, and fusing the pooling into the convolution before it.

use rayon::prelude::*;

/// How a pooling window reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    /// Max, NaN propagating; padding never wins.
    Max,
    /// Mean over the window's cells inside the input.
    Avg,
    /// Sum over the cells inside the input divided by the whole window's size
    /// (`count_include_pad`).
    AvgWhole,
}

/// The geometry of one pooling: `planes` (batch × channels) planes of `h × w` in, `p × q`
/// out; window `kernel` = `[R, S]`, `strides`, and the top and left padding `pads`
/// (the bottom and right padding follow from the output size).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolShape {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub p: usize,
    pub q: usize,
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub pads: [usize; 2],
}

/// Window cells (output values × window size) at or above which the planes are pooled in
/// parallel: about 10 µs of vectorized compares, where handing planes to a worker pays.
const PAR_MIN_CELLS: usize = 1 << 17;

/// `[lo, hi)`: the input rows (or columns) of the window that starts at padded position
/// `start`, clamped to the input's `lim`.
fn span(start: usize, pad: usize, k: usize, lim: usize) -> (usize, usize) {
    let lo = start.saturating_sub(pad).min(lim);
    let hi = (start + k).saturating_sub(pad).min(lim);
    (lo, hi)
}

/// The larger of `a` and `b`, NaN if either is NaN.
#[inline(always)]
fn max_nan(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

/// Values of the padded row a plane's output row is reduced from: `(Q − 1)·stride + S`,
/// plus one stride of slack so that every window start is the head of a whole stride.
fn row_len(g: &PoolShape) -> usize {
    (g.q.max(1) - 1) * g.strides[1] + g.kernel[1] + g.strides[1]
}

/// Pools `x` (`planes × h × w`) into `out` (`planes × p × q`).
pub(crate) fn pool2d(
    g: &PoolShape,
    kind: PoolKind,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), String> {
    let (pq, hw) = (g.p * g.q, g.h * g.w);
    if x.len() != g.planes * hw || out.len() != g.planes * pq {
        return Err(format!("pooling buffers do not match the shapes {g:?}"));
    }
    if g.kernel.contains(&0) || g.strides.contains(&0) {
        return Err(format!("pooling window or stride of 0: {g:?}"));
    }
    if out.is_empty() {
        return Ok(());
    }
    // Per output column, the input columns its window covers (an average's count).
    let cols: Vec<usize> = (0..g.q)
        .map(|q| {
            let (c0, c1) = span(q * g.strides[1], g.pads[1], g.kernel[1], g.w);
            c1 - c0
        })
        .collect();
    let len = row_len(g);
    let threads = rayon::current_num_threads();
    let cells = out.len().saturating_mul(g.kernel[0] * g.kernel[1]);
    let workers = if threads > 1 && g.planes > 1 && cells >= PAR_MIN_CELLS {
        threads.min(g.planes)
    } else {
        1
    };
    let per = g.planes.div_ceil(workers);
    let run = |(i, o): (usize, &mut [f32])| {
        let mut row = vec![0.0f32; len];
        for (j, op) in o.chunks_mut(pq).enumerate() {
            let pl = i * per + j;
            plane(g, kind, &x[pl * hw..][..hw], op, &mut row, &cols);
        }
    };
    if workers > 1 {
        out.par_chunks_mut(per * pq).enumerate().for_each(run);
    } else {
        run((0, out));
    }
    Ok(())
}

/// One plane, through the AVX2 build of [`plane_body`] where the CPU has it.
fn plane(g: &PoolShape, kind: PoolKind, x: &[f32], o: &mut [f32], row: &mut [f32], cols: &[usize]) {
    #[cfg(target_arch = "x86_64")]
    if tensorforge_kernels::simd::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { plane_avx2(g, kind, x, o, row, cols) };
        return;
    }
    plane_body(g, kind, x, o, row, cols);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn plane_avx2(
    g: &PoolShape,
    kind: PoolKind,
    x: &[f32],
    o: &mut [f32],
    row: &mut [f32],
    cols: &[usize],
) {
    plane_body(g, kind, x, o, row, cols);
}

/// Pools one `h × w` plane into `o` (`p × q`); `row` holds [`row_len`] values.
#[inline(always)]
fn plane_body(
    g: &PoolShape,
    kind: PoolKind,
    x: &[f32],
    o: &mut [f32],
    row: &mut [f32],
    cols: &[usize],
) {
    let [kh, kw] = g.kernel;
    let sw = g.strides[1];
    let ident = if kind == PoolKind::Max {
        f32::NEG_INFINITY
    } else {
        0.0
    };
    // Padded column u of `row` is input column u − left pad: input columns [0, inner) sit
    // at row positions [u_lo, u_lo + inner), the rest of the row is the identity.
    let u_lo = g.pads[1].min(row.len());
    let inner = g.w.min(row.len() - u_lo);
    row[..u_lo].fill(ident);
    row[u_lo + inner..].fill(ident);
    let whole = (kh * kw) as f32;
    for (p, orow) in o.chunks_mut(g.q).enumerate() {
        let (r0, r1) = span(p * g.strides[0], g.pads[0], kh, g.h);
        let mid = &mut row[u_lo..u_lo + inner];
        if r0 == r1 {
            mid.fill(ident);
        } else {
            mid.copy_from_slice(&x[r0 * g.w..][..inner]);
            for r in r0 + 1..r1 {
                let src = &x[r * g.w..][..inner];
                match kind {
                    PoolKind::Max => {
                        for (d, &s) in mid.iter_mut().zip(src) {
                            *d = max_nan(*d, s);
                        }
                    }
                    _ => {
                        for (d, &s) in mid.iter_mut().zip(src) {
                            *d += s;
                        }
                    }
                }
            }
        }
        match sw {
            1 => horizontal::<1>(row, orow, kw, kind),
            2 => horizontal::<2>(row, orow, kw, kind),
            _ => horizontal_any(row, orow, kw, sw, kind),
        }
        match kind {
            PoolKind::Max => {}
            PoolKind::AvgWhole => orow.iter_mut().for_each(|v| *v /= whole),
            PoolKind::Avg => {
                let rows = (r1 - r0) as f32;
                for (v, &c) in orow.iter_mut().zip(cols) {
                    *v /= (rows * c as f32).max(1.0);
                }
            }
        }
    }
}

/// `out[q] = reduce(row[q·S .. q·S + kw])` for a stride `S` known when compiled: one pass
/// per window column `j`, reading the head of each `S`-value chunk from `j` (`row` has
/// [`row_len`] values, so every chunk is whole).
#[inline(always)]
fn horizontal<const S: usize>(row: &[f32], out: &mut [f32], kw: usize, kind: PoolKind) {
    let q = out.len();
    for (v, c) in out.iter_mut().zip(row[..q * S].chunks_exact(S)) {
        *v = c[0];
    }
    for j in 1..kw {
        let src = row[j..j + q * S].chunks_exact(S);
        match kind {
            PoolKind::Max => {
                for (v, c) in out.iter_mut().zip(src) {
                    *v = max_nan(*v, c[0]);
                }
            }
            _ => {
                for (v, c) in out.iter_mut().zip(src) {
                    *v += c[0];
                }
            }
        }
    }
}

/// [`horizontal`] for any other stride.
fn horizontal_any(row: &[f32], out: &mut [f32], kw: usize, sw: usize, kind: PoolKind) {
    for (i, v) in out.iter_mut().enumerate() {
        let win = &row[i * sw..i * sw + kw];
        *v = match kind {
            PoolKind::Max => win.iter().fold(f32::NEG_INFINITY, |m, &x| max_nan(m, x)),
            _ => win.iter().sum(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, window by window, in f64: max over the window's input cells (NaN if
    /// any is NaN, −∞ if none), or their sum over the count of input cells (at least 1), or
    /// over R·S with `count_include_pad`.
    fn reference(g: &PoolShape, kind: PoolKind, x: &[f32]) -> Vec<f32> {
        let mut out = vec![];
        for pl in 0..g.planes {
            for p in 0..g.p {
                for q in 0..g.q {
                    let mut m = f64::NEG_INFINITY;
                    let (mut sum, mut count, mut nan) = (0.0f64, 0usize, false);
                    for r in 0..g.kernel[0] {
                        for s in 0..g.kernel[1] {
                            let hi = (p * g.strides[0] + r) as isize - g.pads[0] as isize;
                            let wi = (q * g.strides[1] + s) as isize - g.pads[1] as isize;
                            if hi < 0 || wi < 0 || hi >= g.h as isize || wi >= g.w as isize {
                                continue;
                            }
                            let v = x[pl * g.h * g.w + hi as usize * g.w + wi as usize] as f64;
                            nan |= v.is_nan();
                            m = m.max(v);
                            sum += v;
                            count += 1;
                        }
                    }
                    out.push(match kind {
                        PoolKind::Max if nan => f32::NAN,
                        PoolKind::Max => m as f32,
                        PoolKind::Avg => (sum / count.max(1) as f64) as f32,
                        PoolKind::AvgWhole => (sum / (g.kernel[0] * g.kernel[1]) as f64) as f32,
                    });
                }
            }
        }
        out
    }

    /// Output size with bottom/right padding `end`: ⌊(h + top + end − R) / stride⌋ + 1.
    fn shape(
        planes: usize,
        hw: [usize; 2],
        k: [usize; 2],
        s: [usize; 2],
        pads: [usize; 4],
    ) -> PoolShape {
        let p = (hw[0] + pads[0] + pads[2] - k[0]) / s[0] + 1;
        let q = (hw[1] + pads[1] + pads[3] - k[1]) / s[1] + 1;
        PoolShape {
            planes,
            h: hw[0],
            w: hw[1],
            p,
            q,
            kernel: k,
            strides: s,
            pads: [pads[0], pads[1]],
        }
    }

    #[test]
    fn every_geometry_matches_the_definition() {
        let cases = [
            // ResNet's stem pooling, 3×3 stride 2 pad 1 (56 → 28).
            shape(3, [56, 56], [3, 3], [2, 2], [1, 1, 1, 1]),
            shape(2, [7, 9], [2, 2], [2, 2], [0, 0, 0, 0]),
            shape(2, [7, 9], [3, 2], [1, 1], [1, 0, 1, 1]),
            shape(1, [10, 11], [3, 3], [3, 3], [2, 2, 2, 2]),
            shape(2, [5, 5], [5, 5], [1, 1], [0, 0, 0, 0]),
            shape(1, [4, 6], [1, 1], [2, 3], [0, 0, 0, 0]),
            // Left and top padding only; bottom and right windows end inside the input.
            shape(2, [9, 13], [3, 4], [2, 2], [2, 3, 0, 0]),
            // Padding as wide as the window: the first window has no input cell.
            shape(1, [6, 6], [2, 2], [1, 1], [2, 2, 0, 0]),
            shape(40, [12, 40], [2, 2], [2, 2], [0, 0, 0, 0]),
        ];
        for (i, g) in cases.iter().enumerate() {
            let n = g.planes * g.h * g.w;
            let mut x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(i as u64, n);
            if i == 2 {
                x[5] = f32::NAN; // one NaN in plane 0
            }
            for kind in [PoolKind::Max, PoolKind::Avg, PoolKind::AvgWhole] {
                let want = reference(g, kind, &x);
                for threads in [1, 2] {
                    let mut out = vec![f32::NAN; g.planes * g.p * g.q];
                    crate::exec::with_threads(threads, || pool2d(g, kind, &x, &mut out))
                        .unwrap()
                        .unwrap();
                    for (j, (a, e)) in out.iter().zip(&want).enumerate() {
                        let same = (a.is_nan() && e.is_nan())
                            || a == e
                            || (a - e).abs() <= 1e-6 * e.abs().max(1.0);
                        assert!(same, "case {i} {kind:?} {threads}T [{j}]: {a} vs {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_nan_wins_a_max_and_padding_never_does() {
        // 1 plane 2×2 of negatives, 2×2 window, stride 1, pad 1 all round: 3×3 outputs, each
        // the max of the input cells it covers; padding (which would be 0 if counted) never
        // wins, so every output is negative.
        let g = shape(1, [2, 2], [2, 2], [1, 1], [1, 1, 1, 1]);
        let x = [-1.0f32, -2.0, -3.0, -4.0];
        let mut out = vec![0.0; 9];
        pool2d(&g, PoolKind::Max, &x, &mut out).unwrap();
        // Corner windows see one cell; edges two; the centre all four.
        assert_eq!(out, [-1.0, -1.0, -2.0, -1.0, -1.0, -2.0, -3.0, -3.0, -4.0]);
        let x = [-1.0f32, f32::NAN, -3.0, -4.0];
        pool2d(&g, PoolKind::Max, &x, &mut out).unwrap();
        // Windows covering cell (0, 1): outputs (0,1), (0,2), (1,1), (1,2).
        let nan: Vec<bool> = out.iter().map(|v| v.is_nan()).collect();
        assert_eq!(
            nan,
            [false, true, true, false, true, true, false, false, false]
        );
    }

    #[test]
    fn wrong_lengths_are_errors() {
        let g = shape(1, [4, 4], [2, 2], [2, 2], [0, 0, 0, 0]);
        let mut out = vec![0.0; 3];
        assert!(pool2d(&g, PoolKind::Max, &[0.0; 16], &mut out).is_err());
    }
}
