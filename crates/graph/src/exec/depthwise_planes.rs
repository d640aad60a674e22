//! Depthwise convolutions computed plane by plane in the input's own layout (NCHW), with no
//! transposes, at AVX-512. Each plane's output columns are taken in chunks of up to four
//! strips of 16, and each chunk's rows as a pipeline down the plane: one step reads the
//! next input row (two at stride 2) and multiplies it into every output row in flight
//! that it reaches (`⌈S / stride⌉` of them, the sums in registers), then stores the oldest,
//! now complete. For each input row and filter column `s`, a strip's 16 inputs are one
//! masked load (the mask zeroes the columns outside the plane: the padding, with no padded
//! copy), or at stride 2 the even or odd lanes of two masked loads picked by one permute
//! (`vpermt2ps`; taps `s` and `s + 1` share the loads). Input rows outside the plane are a
//! row of zeros. Each output value gets its bias, then its taps in the filter's order (row
//! by row, column by column: the blocked kernel's order, so both give the same bits), then
//! the clamp (ReLU, ReLU6) before one masked store. The input rows a few steps ahead are
//! prefetched (a plane's end runs into the next plane's rows).
//!
//! Module `depthwise` (the blocked kernel) transposes a block of 16 channels into
//! pixel-major lanes and back; on MobileNetV2's wide maps those transposes were most of its
//! time (`perf`: 48 % of the 96-channel 112 × 112 stride-2 layer in the input's transposes,
//! 10 % in the output's, AMD EPYC Zen 5), and it reads 16 planes at once. Here each plane is
//! read once, in order, and written once, in order.
//!
//! Left out: strides other than 1 and 2, unequal strides or filter sides, dilation,
//! filters other than 3 × 3 and 5 × 5, output rows narrower than [`MIN_Q`] columns (most
//! lanes of a vector would be wasted: those keep the blocked kernel), channels-last inputs
//! (the blocked kernel reads them in place), and CPUs without AVX-512F (AVX2 and aarch64
//! keep the blocked kernel).

// Only x86-64 has the kernel; elsewhere `applies` is false and the rest goes unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv::ConvShape;
use rayon::prelude::*;
use tensorforge_kernels::clamp::Clamp;

/// Output columns below which the blocked kernel is kept: at 14 a 16-lane vector is 14/16
/// used; at 7 (MobileNetV2's last stage) under half.
const MIN_Q: usize = 14;

/// Lanes of a vector (AVX-512, f32).
const V: usize = 16;

/// Elements of output above which the planes go to the pool's workers.
const PAR_MIN_OUT: usize = 1 << 14;

/// Steps ahead whose input rows are prefetched (`SW` rows a step): 2, 4 and 8 measured
/// alike, 12 slower; without it the 96-channel 112 × 112 stride-2 layer took 141 µs
/// against 93 (AMD EPYC Zen 5, one thread, one-convolution graphs).
const PREFETCH_STEPS: usize = 4;

/// Whether this kernel runs depthwise convolution `g`: one input and one output channel
/// per group, stride 1 or 2 both ways, no dilation, a 3 × 3 or 5 × 5 filter, at least [`MIN_Q`] output columns, on a CPU with AVX-512F (as
/// `vmath::level` reports it: `TENSORFORGE_SIMD=avx2` caps it).
pub(crate) fn applies(g: &ConvShape) -> bool {
    g.c == g.k
        && g.group == g.c
        && matches!(g.stride[1], 1 | 2)
        && g.stride[0] == g.stride[1]
        && g.dil == [1, 1]
        && matches!(g.s, 3 | 5)
        && g.r == g.s
        && g.q >= MIN_Q
        && tensorforge_kernels::vmath::level() == tensorforge_kernels::vmath::Level::Avx512
}

/// `out` (`N × K × P × Q`) = the depthwise convolution of `x` (`N × C × H × W`, `C = K`)
/// with filters `w` (`K × R × S`) and `bias`, clamped by `clamp`: planes over the pool's
/// workers. `g` must be one that [`applies`].
pub(crate) fn depthwise_planes(
    g: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    let (hw, pq, taps) = (g.h * g.w, g.p * g.q, g.r * g.s);
    assert!(
        applies(g)
            && x.len() == g.n * g.c * hw
            && out.len() == g.n * g.k * pq
            && w.len() == g.k * taps
            && bias.is_none_or(|b| b.len() >= g.k),
        "depthwise_planes: buffers do not match {g:?}"
    );
    let zeros = vec![0f32; g.w];
    let plane = |(nk, o): (usize, &mut [f32])| {
        let k = nk % g.k;
        let xp = &x[nk * hw..][..hw];
        let wk = &w[k * taps..][..taps];
        let b = bias.map_or(0.0, |b| b[k]);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `applies` checked that the CPU has AVX-512F; the plane, filter and output
        // slices have the sizes the kernel reads and writes (asserted above), and `zeros`
        // is a row.
        unsafe {
            plane_avx512(g, xp, wk, b, clamp, &zeros, o)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (xp, wk, b, o, &zeros);
    };
    if out.len() >= PAR_MIN_OUT && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(pq).enumerate().for_each(plane);
    } else {
        out.chunks_mut(pq).enumerate().for_each(plane);
    }
}

/// One plane, its output columns in chunks of up to four strips of [`V`] ([`rows`] for
/// each chunk), the chunk's size a constant so that its sums stay in registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn plane_avx512(
    g: &ConvShape,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    clamp: Clamp,
    zeros: &[f32],
    o: &mut [f32],
) {
    macro_rules! go {
        ($s:literal, $sw:literal, $a:literal) => {{
            let strips = g.q.div_ceil(V);
            let mut b = 0;
            while b < strips {
                let q0 = b * V;
                match strips - b {
                    1 => rows::<$s, $sw, $a, 1>(g, q0, x, wk, bias, clamp, zeros, o),
                    2 => rows::<$s, $sw, $a, 2>(g, q0, x, wk, bias, clamp, zeros, o),
                    3 => rows::<$s, $sw, $a, 3>(g, q0, x, wk, bias, clamp, zeros, o),
                    _ => rows::<$s, $sw, $a, 4>(g, q0, x, wk, bias, clamp, zeros, o),
                }
                b += 4;
            }
        }};
    }
    // A = ⌈S / SW⌉ output rows in flight.
    match (g.s, g.stride[1]) {
        (3, 1) => go!(3, 1, 3),
        (3, 2) => go!(3, 2, 2),
        (5, 1) => go!(5, 1, 5),
        (5, 2) => go!(5, 2, 3),
        _ => unreachable!("depthwise_planes::applies admits filters 3 or 5 wide, stride 1 or 2"),
    }
}

/// Output columns `[q0, q0 + SB·V)` (clipped to `Q`) of every output row of one plane, the
/// filter square (`S × S`, stride `SW` both ways), as a pipeline down the plane: step `k`
/// reads input rows `k·SW − pad_top + u` (`u < SW`; rows outside the plane are `zeros`)
/// into the `A = ⌈S/SW⌉` output rows in flight, `acc[a]` being output row `k − A + 1 + a`,
/// for which the input row is filter row `r = (A − 1 − a)·SW + u` (when `r < S`: known at
/// compile time); then the oldest, complete, is stored (when it is a row of the output) and
/// the others move up. Every tap is a masked load at a fixed offset from the chunk's first
/// column (two and a permute at stride 2, shared by taps `s` and `s + 1`), the mask
/// zeroing columns outside the row (the padding: no padded copy, whose just-stored vectors
/// an unaligned load could not forward from); each input row is loaded once per strip and
/// tap column. No branch depends on the data or the position but the store's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn rows<const S: usize, const SW: usize, const A: usize, const SB: usize>(
    g: &ConvShape,
    q0: usize,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    clamp: Clamp,
    zeros: &[f32],
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    debug_assert!(wk.len() == S * S && (A - 1) * SW < S && A * SW >= S);
    debug_assert!(zeros.len() >= g.w);
    let (xp, wp, zp, op) = (x.as_ptr(), wk.as_ptr(), zeros.as_ptr(), o.as_mut_ptr());
    // Lane j of a stride-2 tap: column 2j (s even) or 2j + 1 (s odd) of the two loads.
    let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    // max(a, b) is `a > b ? a : b`: max(lo, x) keeps x when x is NaN or not below lo
    // (ClipLow), max(x, lo) gives lo then (Relu's fmax); min(hi, ·) likewise.
    let (lo, hi) = (_mm512_set1_ps(clamp.lo), _mm512_set1_ps(clamp.hi));
    let out = |a: __m512| {
        let m = if clamp.relu {
            _mm512_max_ps(a, lo)
        } else {
            _mm512_max_ps(lo, a)
        };
        _mm512_min_ps(hi, m)
    };
    // Tap s of strip b reads input columns c0 + i, c0 = q0·SW − pad_left + b·V·SW + s (at
    // stride 2: the pair at s rounded down to even, and the next V).
    let first = (q0 * SW) as isize - g.pad[1] as isize;
    let w = g.w as isize;
    // Lanes i of a load at column c0 with 0 ≤ c0 + i < W.
    let inside = |c0: isize| -> __mmask16 {
        let upto = (w - c0).clamp(0, V as isize) as u32;
        let from = (-c0).clamp(0, V as isize) as u32;
        (((1u32 << upto) - 1) & !((1u32 << from) - 1)) as u16
    };
    let col = |b: usize, s: usize| (b * V * SW + if SW == 1 { s } else { s / 2 * 2 }) as isize;
    let m_lo: [[__mmask16; S]; SB] =
        std::array::from_fn(|b| std::array::from_fn(|s| inside(first + col(b, s))));
    let m_hi: [[__mmask16; S]; SB] =
        std::array::from_fn(|b| std::array::from_fn(|s| inside(first + col(b, s) + V as isize)));
    let store: [__mmask16; SB] = std::array::from_fn(|b| {
        let n = g.q.saturating_sub(q0 + b * V).min(V);
        ((1u32 << n) - 1) as u16
    });
    let b0 = _mm512_set1_ps(bias);
    let mut acc = [[b0; SB]; A];
    let h = g.h as isize;
    for k in 0..g.p + A - 1 {
        for u in 0..SW {
            let ih = (k * SW + u) as isize - g.pad[0] as isize;
            // SAFETY: 0 ≤ ih < H: the row is inside the plane; else the row of zeros.
            let row = if (0..h).contains(&ih) {
                xp.add(ih as usize * g.w)
            } else {
                zp
            };
            if q0 == 0 {
                // The input row PREFETCH_STEPS steps down (past the plane's end: the next
                // plane's, which the worker reads next when it takes consecutive planes)
                // requested now, by the first chunk; the others find the plane in cache.
                // A prefetch never faults: the address is not checked.
                let ahead = ih + (PREFETCH_STEPS * SW) as isize;
                if ahead >= 0 {
                    let pr = xp.wrapping_add(ahead as usize * g.w) as *const i8;
                    let mut c = 0;
                    while c < g.w * 4 {
                        _mm_prefetch::<_MM_HINT_T0>(pr.wrapping_add(c));
                        c += 64;
                    }
                }
            }
            // Masked lanes are neither read nor faulted on: the addresses outside the row
            // are formed with wrapping arithmetic and never dereferenced.
            let base = row.wrapping_offset(first);
            for s in 0..S {
                let t: [__m512; SB] = std::array::from_fn(|b| {
                    let p = base.wrapping_offset(col(b, s));
                    if SW == 1 {
                        _mm512_maskz_loadu_ps(m_lo[b][s], p)
                    } else {
                        let idx = if s % 2 == 0 { even } else { odd };
                        let l = _mm512_maskz_loadu_ps(m_lo[b][s], p);
                        let r = _mm512_maskz_loadu_ps(m_hi[b][s], p.wrapping_add(V));
                        _mm512_permutex2var_ps(l, idx, r)
                    }
                });
                for (a, acc_a) in acc.iter_mut().enumerate() {
                    let r = (A - 1 - a) * SW + u;
                    if r < S {
                        let wv = _mm512_set1_ps(*wp.add(r * S + s));
                        for (ab, tb) in acc_a.iter_mut().zip(&t) {
                            *ab = _mm512_fmadd_ps(*tb, wv, *ab);
                        }
                    }
                }
            }
        }
        // Output row k − A + 1 is complete.
        if let Some(oh) = (k + 1).checked_sub(A).filter(|&oh| oh < g.p) {
            for (b, ab) in acc[0].iter().enumerate() {
                // SAFETY: row oh < P and the stored lanes are columns < Q.
                _mm512_mask_storeu_ps(op.add(oh * g.q + q0 + b * V), store[b], out(*ab));
            }
        }
        for a in 0..A - 1 {
            acc[a] = acc[a + 1];
        }
        acc[A - 1] = [b0; SB];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorforge_core::rng::SplitMix64;

    fn shape(c: usize, h: usize, w: usize, rs: usize, stride: usize, pad: usize) -> ConvShape {
        let p = (h + 2 * pad - rs) / stride + 1;
        let q = (w + 2 * pad - rs) / stride + 1;
        ConvShape {
            n: 2,
            c,
            h,
            w,
            k: c,
            r: rs,
            s: rs,
            p,
            q,
            stride: [stride, stride],
            pad: [pad, pad],
            dil: [1, 1],
            group: c,
        }
    }

    /// The definition in f64, then clamped.
    fn reference(g: &ConvShape, x: &[f32], w: &[f32], b: &[f32], cl: Clamp) -> Vec<f32> {
        let mut out = vec![0f32; g.n * g.k * g.p * g.q];
        for n in 0..g.n {
            for k in 0..g.k {
                for op in 0..g.p {
                    for oq in 0..g.q {
                        let mut a = b[k] as f64;
                        for r in 0..g.r {
                            for s in 0..g.s {
                                let ih = (op * g.stride[0] + r) as isize - g.pad[0] as isize;
                                let iw = (oq * g.stride[1] + s) as isize - g.pad[1] as isize;
                                if (0..g.h as isize).contains(&ih)
                                    && (0..g.w as isize).contains(&iw)
                                {
                                    let xv =
                                        x[((n * g.c + k) * g.h + ih as usize) * g.w + iw as usize];
                                    a += xv as f64 * w[(k * g.r + r) * g.s + s] as f64;
                                }
                            }
                        }
                        out[((n * g.k + k) * g.p + op) * g.q + oq] = cl.apply(a as f32);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_geometry_matches_the_definition_and_the_blocked_kernel() {
        if !applies(&shape(16, 16, 16, 3, 1, 1)) {
            return; // no AVX-512 on this CPU: the kernel never runs here.
        }
        let relu6 = Clamp {
            lo: 0.0,
            hi: 6.0,
            relu: false,
        };
        let mut seed = 7;
        let mut vals = |n: usize| {
            seed += 1;
            SplitMix64::f32_pm1_vec(seed, n)
        };
        // Widths around the strips' edges (14, 16, 17, 31, 33 columns), both strides, both
        // filter widths, pads 0 to 2, an odd channel count (a short last block for the
        // blocked kernel), unequal sides.
        for &(c, h, w, rs, stride, pad) in &[
            (5, 14, 14, 3, 1, 1),
            (3, 16, 16, 3, 1, 1),
            (3, 17, 17, 3, 1, 0),
            (2, 31, 33, 3, 2, 1),
            (2, 29, 40, 5, 2, 2),
            (3, 28, 112, 3, 2, 1),
            (2, 20, 70, 5, 1, 2),
            (1, 30, 31, 3, 2, 0),
            (17, 28, 28, 3, 1, 1),
            // Padding as wide as the filter and wider: whole output rows and columns of
            // bias alone.
            (2, 16, 16, 3, 1, 3),
            (2, 16, 24, 5, 2, 5),
        ] {
            let g = shape(c, h, w, rs, stride, pad);
            assert!(applies(&g), "{g:?}");
            let x = vals(g.n * c * h * w);
            let wt = vals(c * rs * rs);
            let b = vals(c);
            for cl in [Clamp::NONE, relu6] {
                let want = reference(&g, &x, &wt, &b, cl);
                let mut got = vec![f32::NAN; want.len()];
                depthwise_planes(&g, &x, &wt, Some(&b), cl, &mut got);
                for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                    // Nine to 25 products of values below 1: within a few f32 roundings.
                    assert!((a - e).abs() <= 1e-5, "{g:?} at {i}: {a} vs {e}");
                }
                // The blocked kernel sums in the same order: the same bits.
                let mut blocked = vec![0f32; want.len()];
                let input = super::super::depthwise::Input::Planes(&x);
                super::super::depthwise::blocked(&g, input, &wt, Some(&b), cl, &mut blocked, None)
                    .unwrap();
                assert_eq!(got, blocked, "{g:?}");
            }
        }
    }

    #[test]
    fn narrow_maps_and_other_filters_are_left_to_the_blocked_kernel() {
        // 7 output columns: under half of a vector.
        assert!(!applies(&shape(8, 14, 14, 3, 2, 1)));
        // A 7-wide filter, stride 3, a grouped (not depthwise) convolution.
        assert!(!applies(&shape(8, 56, 56, 7, 1, 3)));
        assert!(!applies(&shape(8, 56, 56, 3, 3, 1)));
        assert!(!applies(&ConvShape {
            k: 16,
            ..shape(8, 56, 56, 3, 1, 1)
        }));
    }
}
