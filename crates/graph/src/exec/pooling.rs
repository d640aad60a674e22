//! 2-D max and average pooling over NCHW planes, computed separably: for each output row, one
//! pass reduces the window's input rows into a row of column values (contiguous, so it
//! vectorizes), bordered by the reduction's identity where the window reaches into padding;
//! a second pass reduces each output column's window along that row (unit stride, or a
//! stride of 2 or more read as a fixed-stride access the compiler vectorizes as an
//! interleaved load). On AVX2 CPUs both passes are compiled for AVX2. Max pooling with a
//! horizontal stride of 1 or 2 and at most 8 window columns instead runs in vectors of the
//! CPU's width (module `lanes`, [`max_plane`]): masked loads that give −∞ outside the
//! plane, the even and odd lanes picked at stride 2. Planes run in parallel when there
//! are enough of them and enough work.
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
    pool2d_at(g, kind, tensorforge_kernels::vmath::level(), x, out)
}

/// Window columns at most of [`max_lanes`]' kernel: its loads' masks are kept in registers.
const MAX_VEC_KW: usize = 8;

/// The vector width [`max_plane`] pools `g` with at `level`: max pooling with a horizontal
/// stride of 1 or 2 and at most [`MAX_VEC_KW`] window columns, 16 lanes with AVX-512F or 8
/// with AVX2 (x86-64 only); `None` where the separable scalar passes run.
fn max_lanes(
    g: &PoolShape,
    kind: PoolKind,
    level: tensorforge_kernels::vmath::Level,
) -> Option<usize> {
    use tensorforge_kernels::vmath::Level;
    let fits = kind == PoolKind::Max && matches!(g.strides[1], 1 | 2) && g.kernel[1] <= MAX_VEC_KW;
    match level {
        _ if !fits || !cfg!(target_arch = "x86_64") => None,
        Level::Avx512 => Some(16),
        Level::Avx2 => Some(8),
        _ => None,
    }
}

/// [`pool2d`] with the vector kernel of `level` (one the CPU has).
fn pool2d_at(
    g: &PoolShape,
    kind: PoolKind,
    level: tensorforge_kernels::vmath::Level,
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
    let lanes = max_lanes(g, kind, level);
    let run = |(i, o): (usize, &mut [f32])| {
        let mut row = if lanes.is_some() {
            vec![]
        } else {
            vec![0.0f32; len]
        };
        for (j, op) in o.chunks_mut(pq).enumerate() {
            let pl = i * per + j;
            let xp = &x[pl * hw..][..hw];
            match lanes {
                Some(v) => max_plane(g, v, xp, op),
                None => plane(g, kind, xp, op, &mut row, &cols),
            }
        }
    };
    if workers > 1 {
        out.par_chunks_mut(per * pq).enumerate().for_each(run);
    } else {
        run((0, out));
    }
    Ok(())
}

/// Max-pools one plane `x` (`h × w`) into `o` (`p × q`) at `v` lanes ([`max_lanes`]):
/// each output row in chunks of `v` columns, the max of the window's cells taken in
/// registers, row by row and column by column. A window column `s` is one masked load at
/// stride 1, or at stride 2 the even or odd lanes of two (columns `s` and `s + 1` share
/// them); the masks give −∞ outside the plane, so padding never wins, and a window with no
/// row inside the plane gives −∞.
fn max_plane(g: &PoolShape, v: usize, x: &[f32], o: &mut [f32]) {
    assert!(
        x.len() == g.h * g.w && o.len() == g.p * g.q && g.kernel[1] <= MAX_VEC_KW,
        "max pooling: buffers do not match {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `max_lanes` chose `v` from the CPU's level (AVX-512F: 16; AVX2: 8); loads are
    // masked to the plane's columns of rows inside it, stores to the output row's columns.
    unsafe {
        if v == 16 {
            max_avx512(g, x, o)
        } else {
            max_avx2(g, x, o)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, x, o);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn max_avx512(g: &PoolShape, x: &[f32], o: &mut [f32]) {
    max_loads::<super::lanes::Avx512>(g, x, o)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_avx2(g: &PoolShape, x: &[f32], o: &mut [f32]) {
    max_loads::<super::lanes::Avx2>(g, x, o)
}

/// [`max_body`] with its number of loads per window row known when compiled (one per
/// window column at stride 1, a pair per two at stride 2), so that their running maxima
/// stay in registers; a plane holding a NaN takes the body that propagates it, with the
/// most loads (its extra loads are left out of the maximum).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn max_loads<I: super::lanes::Isa>(g: &PoolShape, x: &[f32], o: &mut [f32]) {
    let kw = g.kernel[1];
    if has_nan(x) {
        return max_body::<I, MAX_VEC_KW, true>(g, x, o);
    }
    match if g.strides[1] == 1 {
        kw
    } else {
        2 * kw.div_ceil(2)
    } {
        1 => max_body::<I, 1, false>(g, x, o),
        2 => max_body::<I, 2, false>(g, x, o),
        3 => max_body::<I, 3, false>(g, x, o),
        4 => max_body::<I, 4, false>(g, x, o),
        5 => max_body::<I, 5, false>(g, x, o),
        6 => max_body::<I, 6, false>(g, x, o),
        7 => max_body::<I, 7, false>(g, x, o),
        _ => max_body::<I, MAX_VEC_KW, false>(g, x, o),
    }
}

/// Whether `x` holds a NaN (a compare and an or per value, vectorized by the compiler).
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn has_nan(x: &[f32]) -> bool {
    x.chunks(256)
        .any(|c| c.iter().fold(false, |a, v| a | v.is_nan()))
}

/// The larger of `a` and `b`, a NaN in either propagated where `NAN`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn vmax<I: super::lanes::Isa, const NAN: bool>(a: I::F, b: I::F) -> I::F {
    if NAN {
        I::max_nan(a, b)
    } else {
        I::max(a, b)
    }
}

/// Per output row and chunk of `V` columns: first, for each of the `L` loads of a window
/// row, its maximum down the window's rows (`L` independent chains), then across them, the
/// even and odd lanes picked at stride 2. Without a NaN in the plane (`NAN` false) each
/// cell is one `vmaxps`; with one, also a compare and a blend (`Isa::max_nan`). ResNet's
/// 64 × 56 × 56 pooling (3 × 3, stride 2), one thread, AMD EPYC Zen 5, AVX-512: 74 µs for
/// the scalar passes; 45 with one chain through all nine cells (each compare waited on the
/// one before); 38 with a chain per load; 22 without the NaN blends and with the loops over
/// the loads unrolled (docs/performance.md).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn max_body<I: super::lanes::Isa, const L: usize, const NAN: bool>(
    g: &PoolShape,
    x: &[f32],
    o: &mut [f32],
) {
    let [kh, kw] = g.kernel;
    let [sh, sw] = g.strides;
    let (w, v) = (g.w as isize, I::V as isize);
    let ninf = I::splat(f32::NEG_INFINITY);
    for q0 in (0..g.q).step_by(I::V) {
        let n = (g.q - q0).min(I::V);
        let c0 = (q0 * sw) as isize - g.pads[1] as isize;
        // Load l reads from column c0 + l (stride 1), or c0 + 2⌊l/2⌋ + (l mod 2)·V.
        let mut at = [0isize; L];
        let mut masks = [I::inside(0, 0); L];
        for l in 0..L {
            at[l] = if sw == 1 {
                c0 + l as isize
            } else {
                c0 + (l & !1) as isize + (l & 1) as isize * v
            };
            masks[l] = I::inside(at[l], w);
        }
        let keep = I::keep(n);
        for p in 0..g.p {
            let (r0, r1) = span(p * sh, g.pads[0], kh, g.h);
            let mut col = [ninf; L];
            for r in r0..r1 {
                let row = x.as_ptr().add(r * g.w);
                for l in 0..L {
                    let t = I::load_or(masks[l], row.wrapping_offset(at[l]), ninf);
                    col[l] = vmax::<I, NAN>(col[l], t);
                }
            }
            // Loops to the constant `L` (unrolled), the window's `kw` columns tested inside.
            let mut acc = ninf;
            if sw == 1 {
                for (l, &c) in col.iter().enumerate() {
                    if l < kw {
                        acc = vmax::<I, NAN>(acc, c);
                    }
                }
            } else {
                for s in (0..L - 1).step_by(2) {
                    if s < kw {
                        acc = vmax::<I, NAN>(acc, I::pick(col[s], col[s + 1], false));
                    }
                    if s + 1 < kw {
                        acc = vmax::<I, NAN>(acc, I::pick(col[s], col[s + 1], true));
                    }
                }
            }
            I::store(o.as_mut_ptr().add(p * g.q + q0), acc, keep);
        }
    }
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
    use tensorforge_kernels::vmath::Level;

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
            // The vector kernel's widest window (8 columns, stride 2: four pairs of loads),
            // and one wider (9 columns: the scalar passes at every level).
            shape(2, [11, 45], [2, 8], [1, 2], [1, 3, 0, 4]),
            shape(1, [12, 12], [3, 9], [1, 1], [0, 4, 0, 4]),
        ];
        for (i, g) in cases.iter().enumerate() {
            let n = g.planes * g.h * g.w;
            let mut x = tensorforge_core::rng::SplitMix64::f32_pm1_vec(i as u64, n);
            if i == 2 || i == 0 {
                x[5] = f32::NAN; // one NaN in plane 0 (at stride 1, and at stride 2)
            }
            for kind in [PoolKind::Max, PoolKind::Avg, PoolKind::AvgWhole] {
                let want = reference(g, kind, &x);
                // Each vector width the CPU has (max pooling's kernel), and the scalar passes.
                let levels = [Level::Avx512, Level::Avx2, Level::Scalar]
                    .into_iter()
                    .filter(|l| l.is_supported());
                for (level, threads) in levels.flat_map(|l| [(l, 1), (l, 2)]) {
                    let mut out = vec![f32::NAN; g.planes * g.p * g.q];
                    crate::exec::with_threads(threads, || pool2d_at(g, kind, level, &x, &mut out))
                        .unwrap()
                        .unwrap();
                    for (j, (a, e)) in out.iter().zip(&want).enumerate() {
                        let same = (a.is_nan() && e.is_nan())
                            || a == e
                            || (a - e).abs() <= 1e-6 * e.abs().max(1.0);
                        assert!(
                            same,
                            "case {i} {kind:?} {level:?} {threads}T [{j}]: {a} vs {e}"
                        );
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
