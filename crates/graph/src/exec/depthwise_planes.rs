//! Depthwise convolutions computed plane by plane in the input's own layout (NCHW), with no
//! transposes, in vectors of 16 lanes (AVX-512F) or 8 (AVX2 and FMA; [`lanes`] says which
//! geometries each takes). Each plane's output columns are taken in chunks of up to four
//! strips of a vector (two at 8 lanes), and each chunk's rows as a pipeline down the
//! plane: one step reads the next input row (two at stride 2) and multiplies it into every
//! output row in flight that it reaches (`⌈S / stride⌉` of them, the sums in registers),
//! then stores the oldest, now complete. For each input row and filter column `s`, a
//! strip's inputs are one masked load (the mask zeroes the columns outside the plane: the
//! padding, with no padded copy), or at stride 2 the even or odd lanes of two masked loads
//! picked by one permute (`vpermt2ps`; at 8 lanes `vshufps` and `vpermpd`; taps `s` and
//! `s + 1` share the loads). Input rows outside the plane are a
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
//! filters other than 3 × 3 and 5 × 5 (and 5 × 5 at 8 lanes), output rows narrower than
//! [`MIN_Q_16`] or [`MIN_Q_8`] columns (lanes of a vector would be wasted: those keep the
//! blocked kernel), channels-last inputs (the blocked kernel reads them in place), and CPUs
//! without AVX2, where module `conv`'s row kernel runs).

// Only x86-64 has the kernel; elsewhere `applies` is false and the rest goes unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv::ConvShape;
#[cfg(target_arch = "x86_64")]
use super::lanes::{Avx2, Avx512, Isa};
use rayon::prelude::*;
use tensorforge_kernels::clamp::Clamp;

/// Output columns from which 16-lane vectors are used (AVX-512): at 14 a vector is 14/16
/// used. Narrower maps keep the blocked kernel (16 channels to a vector): 8-lane vectors
/// on them measured no faster (960 channels of 7 × 7: 29 µs against 27, AMD EPYC Zen 5).
const MIN_Q_16: usize = 14;

/// Output columns from which 8-lane vectors are used (CPUs with AVX2 and FMA but not
/// AVX-512F), with 3 × 3 filters only: against the blocked kernel at 8 lanes (AMD EPYC Zen
/// 5 capped to AVX2, one thread) the 96-channel 112 × 112 stride-2 layer took 181 µs
/// against 212, 192 channels of 56 × 56 160 against 175, but 14 × 14 maps (two strips, one
/// of 6 lanes) 28.5 against 25 and a 5 × 5 filter on 28 × 28 159 against 124 (its five
/// rows of sums and ten masks do not fit 16 registers).
const MIN_Q_8: usize = 16;

/// Elements of output above which the planes go to the pool's workers.
const PAR_MIN_OUT: usize = 1 << 14;

/// Steps ahead whose input rows are prefetched (`SW` rows a step): 2, 4 and 8 measured
/// alike, 12 slower; without it the 96-channel 112 × 112 stride-2 layer took 141 µs
/// against 93 (AMD EPYC Zen 5, one thread, one-convolution graphs).
const PREFETCH_STEPS: usize = 4;

/// The lanes this kernel runs depthwise convolution `g` with, or `None` where it does not
/// run it: one input and one output channel per group, stride 1 or 2 both ways, no
/// dilation, a 3 × 3 or 5 × 5 filter; 16 lanes where the CPU has AVX-512F (as
/// `vmath::level` reports it: `TENSORFORGE_SIMD=avx2` caps it) and the output rows have at
/// least [`MIN_Q_16`] columns (more than 16 with a 5 × 5 filter); 8 where it has AVX2 and FMA only, the filter is 3 × 3 and
/// the rows have at least [`MIN_Q_8`] columns.
pub(crate) fn lanes(g: &ConvShape) -> Option<usize> {
    use tensorforge_kernels::vmath::{level, Level};
    let fits = g.c == g.k
        && g.group == g.c
        && matches!(g.stride[1], 1 | 2)
        && g.stride[0] == g.stride[1]
        && g.dil == [1, 1]
        && matches!(g.s, 3 | 5)
        && g.r == g.s;
    match level() {
        _ if !fits || !cfg!(target_arch = "x86_64") => None,
        // A 5 × 5 filter on one strip: five sums in flight, each five dependent
        // multiply-adds a step, wait on each other (EfficientNet's 672 channels of 14 × 14:
        // 80 µs against the blocked kernel's 70); from two strips on, ten.
        Level::Avx512 if g.q >= MIN_Q_16 && (g.s == 3 || g.q > 16) => Some(16),
        Level::Avx2 if g.q >= MIN_Q_8 && g.s == 3 => Some(8),
        _ => None,
    }
}

/// Whether this kernel runs depthwise convolution `g` ([`lanes`]).
pub(crate) fn applies(g: &ConvShape) -> bool {
    lanes(g).is_some()
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
    planes_at(g, lanes(g), x, w, bias, clamp, out)
}

/// [`depthwise_planes`] at `v` lanes (16 or 8: one the CPU has).
fn planes_at(
    g: &ConvShape,
    v: Option<usize>,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    let (hw, pq, taps) = (g.h * g.w, g.p * g.q, g.r * g.s);
    assert!(
        v.is_some()
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
        // SAFETY: `lanes` checked that the CPU has AVX-512F (16 lanes) or AVX2 and FMA (8);
        // the plane, filter and output slices have the sizes the kernel reads and writes
        // (asserted above), and `zeros` is a row.
        unsafe {
            if v == Some(16) {
                plane_avx512(g, xp, wk, b, clamp, &zeros, o)
            } else {
                plane_avx2(g, xp, wk, b, clamp, &zeros, o)
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (xp, wk, b, clamp, o, &zeros);
    };
    if out.len() >= PAR_MIN_OUT && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(pq).enumerate().for_each(plane);
    } else {
        out.chunks_mut(pq).enumerate().for_each(plane);
    }
}

/// Strips of a chunk at most per vector width: what leaves the sums, the taps and the
/// weight in registers.
#[cfg(target_arch = "x86_64")]
trait Strips: Isa {
    const MAX_STRIPS: usize;
}

#[cfg(target_arch = "x86_64")]
impl Strips for Avx512 {
    const MAX_STRIPS: usize = 4;
}

#[cfg(target_arch = "x86_64")]
impl Strips for Avx2 {
    // Two: with three, 3 × 3 filters' nine sums, three taps and their masks spilled from
    // the 16 registers (`perf annotate`: sums reloaded from the stack).
    const MAX_STRIPS: usize = 2;
}

/// One plane at 16 lanes ([`plane`]).
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
    plane::<Avx512>(g, x, wk, bias, clamp, zeros, o, chunk_avx512)
}

/// One plane at 8 lanes ([`plane`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn plane_avx2(
    g: &ConvShape,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    clamp: Clamp,
    zeros: &[f32],
    o: &mut [f32],
) {
    plane::<Avx2>(g, x, wk, bias, clamp, zeros, o, chunk_avx2)
}

/// [`rows`] at one width, compiled for its instruction set as a function of its own per
/// geometry (inlined into one function with every other geometry's, its sums and masks
/// were spilled more: 10 % slower).
#[cfg(target_arch = "x86_64")]
type ChunkFn = unsafe fn(&ConvShape, Chunk, usize, &[f32], &[f32], f32, Clamp, &[f32], &mut [f32]);

/// A chunk's geometry: filter width, stride, strips.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Chunk {
    s: usize,
    sw: usize,
    strips: usize,
    /// Whether the strips between the chunk's first and last read inside the row only
    /// (then they load without masks: fewer mask registers to reload).
    inner_plain: bool,
}

macro_rules! chunk_fn {
    ($name:ident, $isa:ty, $feat:literal) => {
        /// [`rows`] for `c`'s geometry at this width.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        #[inline(never)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            g: &ConvShape,
            c: Chunk,
            q0: usize,
            x: &[f32],
            wk: &[f32],
            bias: f32,
            clamp: Clamp,
            zeros: &[f32],
            o: &mut [f32],
        ) {
            macro_rules! sb {
                ($s:literal, $sw:literal, $a:literal) => {
                    match (c.strips, c.inner_plain) {
                        (1, _) => {
                            rows::<$isa, $s, $sw, $a, 1, false>(g, q0, x, wk, bias, clamp, zeros, o)
                        }
                        (2, _) => {
                            rows::<$isa, $s, $sw, $a, 2, false>(g, q0, x, wk, bias, clamp, zeros, o)
                        }
                        (3, false) => {
                            rows::<$isa, $s, $sw, $a, 3, false>(g, q0, x, wk, bias, clamp, zeros, o)
                        }
                        (3, true) => {
                            rows::<$isa, $s, $sw, $a, 3, true>(g, q0, x, wk, bias, clamp, zeros, o)
                        }
                        (_, false) => {
                            rows::<$isa, $s, $sw, $a, 4, false>(g, q0, x, wk, bias, clamp, zeros, o)
                        }
                        (_, true) => {
                            rows::<$isa, $s, $sw, $a, 4, true>(g, q0, x, wk, bias, clamp, zeros, o)
                        }
                    }
                };
            }
            // A = ⌈S / SW⌉ output rows in flight.
            match (c.s, c.sw) {
                (3, 1) => sb!(3, 1, 3),
                (3, 2) => sb!(3, 2, 2),
                (5, 1) => sb!(5, 1, 5),
                (5, 2) => sb!(5, 2, 3),
                _ => unreachable!(
                    "depthwise_planes::lanes admits filters 3 or 5 wide, stride 1 or 2"
                ),
            }
        }
    };
}
chunk_fn!(chunk_avx512, Avx512, "avx512f,avx2,fma");
chunk_fn!(chunk_avx2, Avx2, "avx2,fma");

/// One plane, its output columns in chunks of up to `I::MAX_STRIPS` strips of `I::V`
/// (`chunk`, [`rows`], for each), the chunk's size a constant so that its sums stay in
/// registers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn plane<I: Strips>(
    g: &ConvShape,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    clamp: Clamp,
    zeros: &[f32],
    o: &mut [f32],
    chunk: ChunkFn,
) {
    let (s, sw) = (g.s, g.stride[1]);
    let strips = g.q.div_ceil(I::V);
    let most = I::MAX_STRIPS;
    let mut b = 0;
    while b < strips {
        let n = (strips - b).min(most);
        // Strip j of the chunk reads columns [c0, c0 + (V + 1)·SW + S) at most (a stride-2
        // tap's two loads from its even column), c0 = (b + j)·V·SW − pad_left.
        let reads = |j: usize| {
            let c0 = ((b + j) * I::V * sw) as isize - g.pad[1] as isize;
            c0 >= 0 && c0 as usize + (I::V + 1) * sw + s <= g.w
        };
        let c = Chunk {
            s,
            sw,
            strips: n,
            inner_plain: (1..n.saturating_sub(1)).all(reads),
        };
        chunk(g, c, b * I::V, x, wk, bias, clamp, zeros, o);
        b += most;
    }
}

/// Output columns `[q0, q0 + SB·V)` (clipped to `Q`) of every output row of one plane, the
/// filter square (`S × S`, stride `SW` both ways), as a pipeline down the plane: step `k`
/// reads input rows `k·SW − pad_top + u` (`u < SW`; rows outside the plane are `zeros`)
/// into the `A = ⌈S/SW⌉` output rows in flight, `acc[a]` being output row `k − A + 1 + a`,
/// for which the input row is filter row `r = (A − 1 − a)·SW + u` (when `r < S`: known at
/// compile time); then the oldest, complete, is stored (when it is a row of the output) and
/// the others move up. Every tap is a masked load at a fixed offset from the chunk's first
/// column (two and a pick at stride 2, shared by taps `s` and `s + 1`), the mask zeroing
/// columns outside the row (the padding: no padded copy, whose just-stored vectors an
/// unaligned load could not forward from); each input row is loaded once per strip and tap
/// column. No branch depends on the data or the position but the store's.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<
    I: Isa,
    const S: usize,
    const SW: usize,
    const A: usize,
    const SB: usize,
    const INNER_PLAIN: bool,
>(
    g: &ConvShape,
    q0: usize,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    clamp: Clamp,
    zeros: &[f32],
    o: &mut [f32],
) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    debug_assert!(wk.len() == S * S && (A - 1) * SW < S && A * SW >= S);
    debug_assert!(zeros.len() >= g.w);
    let v = I::V;
    let (xp, wp, zp, op) = (x.as_ptr(), wk.as_ptr(), zeros.as_ptr(), o.as_mut_ptr());
    // Tap s of strip b reads input columns c0 + i, c0 = q0·SW − pad_left + b·V·SW + s (at
    // stride 2: the pair at s rounded down to even, and the next V).
    let first = (q0 * SW) as isize - g.pad[1] as isize;
    let w = g.w as isize;
    let col = |b: usize, s: usize| (b * v * SW + if SW == 1 { s } else { s / 2 * 2 }) as isize;
    // (Loops, not `array::from_fn`: a closure is compiled without the caller's target
    // features, and the intrinsics in it would not be inlined.)
    let mut m_lo = [[I::inside(0, 0); S]; SB];
    let mut m_hi = m_lo;
    for b in 0..SB {
        for s in 0..S {
            m_lo[b][s] = I::inside(first + col(b, s), w);
            m_hi[b][s] = I::inside(first + col(b, s) + v as isize, w);
        }
    }
    // Each strip's stored lanes: its columns below Q.
    let store: [I::K; SB] = std::array::from_fn(|b| I::keep(g.q.saturating_sub(q0 + b * v).min(v)));
    // Strip b loads without masks (known at compile time once the loops are unrolled).
    let plain = |b: usize| INNER_PLAIN && b > 0 && b + 1 < SB;
    let b0 = I::splat(bias);
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
                let mut t = [b0; SB];
                for (b, tb) in t.iter_mut().enumerate() {
                    let p = base.wrapping_offset(col(b, s));
                    *tb = if SW == 1 {
                        if plain(b) {
                            I::load_all(p)
                        } else {
                            I::load(m_lo[b][s], p)
                        }
                    } else if plain(b) {
                        I::pick(I::load_all(p), I::load_all(p.wrapping_add(v)), s % 2 == 1)
                    } else {
                        let lo = I::load(m_lo[b][s], p);
                        let hi = I::load(m_hi[b][s], p.wrapping_add(v));
                        I::pick(lo, hi, s % 2 == 1)
                    };
                }
                for (a, acc_a) in acc.iter_mut().enumerate() {
                    let r = (A - 1 - a) * SW + u;
                    if r < S {
                        let wv = I::splat(*wp.add(r * S + s));
                        for (ab, tb) in acc_a.iter_mut().zip(&t) {
                            *ab = I::fma(*tb, wv, *ab);
                        }
                    }
                }
            }
        }
        // Output row k − A + 1 is complete.
        if let Some(oh) = (k + 1).checked_sub(A).filter(|&oh| oh < g.p) {
            for (b, ab) in acc[0].iter().enumerate() {
                // SAFETY: row oh < P and the stored lanes are columns < Q.
                I::store(
                    op.add(oh * g.q + q0 + b * v),
                    I::clamp(*ab, clamp),
                    store[b],
                );
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
    use super::super::depthwise::tests::reference;
    use super::*;
    use tensorforge_core::rng::SplitMix64;

    fn shape(c: usize, h: usize, w: usize, rs: usize, stride: usize, pad: usize) -> ConvShape {
        super::super::depthwise::tests::square(2, c, (h, w), rs, stride, pad)
    }

    #[test]
    fn every_geometry_matches_the_definition_and_the_blocked_kernel() {
        use tensorforge_kernels::vmath::{level, Level};
        // Each width this CPU has (the kernel never runs on one without AVX2 and FMA).
        let widths: &[usize] = match level() {
            Level::Avx512 => &[16, 8],
            Level::Avx2 => &[8],
            _ => return,
        };
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
            // 7 and 9 columns.
            (3, 7, 7, 5, 1, 2),
            (3, 14, 18, 3, 2, 1),
        ] {
            let g = shape(c, h, w, rs, stride, pad);
            for &v in widths {
                let x = vals(g.n * c * h * w);
                let wt = vals(c * rs * rs);
                let b = vals(c);
                for cl in [Clamp::NONE, relu6] {
                    let want = reference(&g, &x, &wt, &b, cl);
                    let mut got = vec![f32::NAN; want.len()];
                    planes_at(&g, Some(v), &x, &wt, Some(&b), cl, &mut got);
                    for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                        // Nine to 25 products of values below 1: within a few f32 roundings.
                        assert!((a - e).abs() <= 1e-5, "{v} lanes, {g:?} at {i}: {a} vs {e}");
                    }
                    // The blocked kernel sums in the same order: the same bits.
                    let mut blocked = vec![0f32; want.len()];
                    let input = super::super::depthwise::Input::Planes(&x);
                    super::super::depthwise::blocked(
                        &g,
                        input,
                        &wt,
                        Some(&b),
                        cl,
                        &mut blocked,
                        None,
                    )
                    .unwrap();
                    assert_eq!(got, blocked, "{v} lanes, {g:?}");
                }
            }
        }
    }

    #[test]
    fn narrow_maps_and_other_filters_are_left_to_the_blocked_kernel() {
        // 7 output columns: under half of a 16-lane vector, and not faster at 8.
        assert!(!applies(&shape(8, 14, 14, 3, 2, 1)));
        // A 5 × 5 filter on 14 columns (one strip).
        assert!(!applies(&shape(8, 14, 14, 5, 1, 2)));
        // A 7-wide filter, stride 3, a grouped (not depthwise) convolution.
        assert!(!applies(&shape(8, 56, 56, 7, 1, 3)));
        assert!(!applies(&shape(8, 56, 56, 3, 3, 1)));
        assert!(!applies(&ConvShape {
            k: 16,
            ..shape(8, 56, 56, 3, 1, 1)
        }));
    }
}
