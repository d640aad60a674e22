//! Depthwise convolutions on small maps (at most [`MAX_OUT`] output pixels in rows of at most
//! [`MAX_Q`], from at most [`MAX_IN`] input pixels: the 7 × 7 layers at the end of
//! MobileNetV2 and EfficientNet, and EfficientNet's 5 × 5 stride-2 layer from 14 × 14), a
//! block of `V` channels at a time (16 lanes with AVX-512F, 8 with AVX2 and FMA): the block's
//! planes are transposed `V × V` at a time in registers (`lanes::Isa::transpose`) into pixel
//! vectors of `V` channels, which go into a zero-padded tile; each output row's pixels are
//! summed in registers, tap by tap, each tap one vector of the `V` channels' filter values
//! (the blocked kernel's lane-major filters); the output pixels are transposed back into
//! the planes. The bias starts each sum, the clamp (ReLU, ReLU6) ends it, and the taps come
//! in the filter's order, row by row: the blocked kernel's order, so both give the same
//! bits.
//!
//! Module `depthwise`'s blocked kernel computes the same across bands of any map; on a 7 × 7
//! map its per-band bookkeeping and 8 × 8 transposes with ragged edges cost more than the
//! sums (`perf`: a 1152-channel 7 × 7 layer took 46 µs with 3 × 3 and with 5 × 5 filters
//! alike, AMD EPYC Zen 5). Here a block is four or fewer transposes in, one copy of each
//! pixel into the tile, the sums, and four or fewer transposes out.
//!
//! Left out: dilation, strides above 2, filters wider than 7, channels-last inputs (the
//! blocked kernel reads them in place), and CPUs without AVX2 (the blocked kernel's portable
//! path).

// Only x86-64 has the kernel; elsewhere `applies` is false and the rest goes unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv::ConvShape;
#[cfg(target_arch = "x86_64")]
use super::lanes::{Avx2, Avx512, Isa};
use rayon::prelude::*;
use tensorforge_kernels::clamp::Clamp;

/// Output pixels of a plane at most.
pub(crate) const MAX_OUT: usize = 64;
/// Output columns at most: one sum per column of an output row in registers.
pub(crate) const MAX_Q: usize = 8;
/// Input pixels of a plane at most (the transposes' pixel buffer).
pub(crate) const MAX_IN: usize = 256;

/// Elements of output above which the blocks go to the pool's workers.
const PAR_MIN_OUT: usize = 1 << 14;

/// Whether this kernel runs depthwise convolution `g` at `v` lanes (16 or 8, the blocked
/// kernel's width on this CPU): one input and one output channel per group, no dilation,
/// strides of 1 or 2, filters of at most 7 × 7, and a map within [`MAX_IN`], [`MAX_OUT`]
/// and [`MAX_Q`].
pub(crate) fn applies(g: &ConvShape, v: usize) -> bool {
    runs_at(v)
        && g.c == g.k
        && g.group == g.c
        && g.dil == [1, 1]
        && matches!(g.stride[0], 1 | 2)
        && matches!(g.stride[1], 1 | 2)
        && (1..=7).contains(&g.r)
        && (1..=7).contains(&g.s)
        && g.h * g.w <= MAX_IN
        && g.p * g.q <= MAX_OUT
        && (1..=MAX_Q).contains(&g.q)
}

/// Whether the CPU runs this module's vectors (and `depthwise_tiny`'s) at `v` lanes: 16 with
/// AVX-512F (as `vmath::level` reports it: `TENSORFORGE_SIMD=avx2` caps it), 8 with AVX2 and
/// FMA, on x86-64.
pub(crate) fn runs_at(v: usize) -> bool {
    cfg!(target_arch = "x86_64")
        && matches!(v, 8 | 16)
        && tensorforge_kernels::simd::avx2_fma()
        && (v == 8
            || tensorforge_kernels::vmath::level() == tensorforge_kernels::vmath::Level::Avx512)
}

/// Rows and columns of the padded tile a block's sums read: `(P − 1)·sh + R` by
/// `(Q − 1)·sw + S`.
fn tile_dims(g: &ConvShape) -> (usize, usize) {
    (
        (g.p.max(1) - 1) * g.stride[0] + g.r,
        (g.q.max(1) - 1) * g.stride[1] + g.s,
    )
}

/// One worker's buffers, in vectors of `v` values, each starting on a 64-byte line (an
/// unaligned tile split every vector load across two lines: the sums ran at about one
/// multiply-add a cycle): the padded tile (zero where no pixel is copied: the padding;
/// with slack for the sums past the last row and column, which are not stored), the
/// block's input pixels and its output pixels.
struct Buffers {
    tile: Aligned,
    pixels: Aligned,
    sums: Aligned,
}

/// `len` zeros from a 64-byte boundary inside a slightly longer vector.
struct Aligned {
    buf: Vec<f32>,
    start: usize,
}

impl Aligned {
    fn zeros(len: usize) -> Aligned {
        let buf = vec![0f32; len + 16];
        let start = buf.as_ptr().align_offset(64).min(16);
        Aligned { buf, start }
    }

    fn as_mut_ptr(&mut self) -> *mut f32 {
        self.buf[self.start..].as_mut_ptr()
    }
}

/// A geometry's buffers are alike: its map, filter, strides and padding, and the lanes.
type Key = [usize; 11];

fn key(g: &ConvShape, v: usize) -> Key {
    let [sh, sw] = g.stride;
    let [ph, pw] = g.pad;
    [g.h, g.w, g.p, g.q, g.r, g.s, sh, sw, ph, pw, v]
}

std::thread_local! {
    /// Each thread's buffers from its last block, kept for the next call of the same
    /// geometry: a call allocated and zeroed its own (about 50 KB on a 16 × 16 map), which
    /// took 3–4 % of a 32 × 32 MobileNetV2's run (`perf`, AMD EPYC Zen 5).
    static KEPT: std::cell::RefCell<Option<(Key, Buffers)>> = const { std::cell::RefCell::new(None) };
}

/// Buffers for one geometry, taken from the thread's kept ones when they match (their tile
/// is zero wherever a block leaves it unwritten: the padding, the same cells for the same
/// geometry) or made zeroed, and kept again when dropped.
struct Lease {
    key: Key,
    bufs: Option<Buffers>,
}

impl Lease {
    fn take(g: &ConvShape, v: usize) -> Lease {
        let key = key(g, v);
        let kept = KEPT.try_with(|k| k.borrow_mut().take()).ok().flatten();
        let bufs = match kept {
            Some((k, b)) if k == key => b,
            _ => Buffers::new(g, v),
        };
        Lease {
            key,
            bufs: Some(bufs),
        }
    }

    fn get(&mut self) -> &mut Buffers {
        self.bufs
            .get_or_insert_with(|| unreachable!("a lease holds its buffers until dropped"))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(b) = self.bufs.take() {
            let _ = KEPT.try_with(|k| *k.borrow_mut() = Some((self.key, b)));
        }
    }
}

impl Buffers {
    fn new(g: &ConvShape, v: usize) -> Buffers {
        let (th, tw) = tile_dims(g);
        // Past the last row: the sums of a second output row past P (two rows a pass at
        // 16 lanes) and of the columns past Q read there.
        let slack = g.stride[0] * tw + MAX_Q * g.stride[1] + g.s;
        Buffers {
            tile: Aligned::zeros((th * tw + slack) * v),
            pixels: Aligned::zeros((g.h * g.w).next_multiple_of(v) * v),
            sums: Aligned::zeros((g.p * g.q).next_multiple_of(v) * v),
        }
    }
}

/// `out` (`N × K × P × Q`) = the depthwise convolution of `x` (`N × C × H × W`) with the
/// lane-major filters `wt` (module `depthwise`: block b's `[t·v + l]` = tap t of channel
/// `b·v + l`) and `bias`, clamped by `clamp`, at `v` lanes; `g` must be one that
/// [`applies`] at `v`.
pub(crate) fn depthwise_small(
    g: &ConvShape,
    v: usize,
    x: &[f32],
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    let (hw, pq, taps) = (g.h * g.w, g.p * g.q, g.r * g.s);
    let blocks = g.k.div_ceil(v);
    assert!(
        applies(g, v)
            && x.len() == g.n * g.c * hw
            && out.len() == g.n * g.k * pq
            && wt.len() == blocks * taps * v
            && bias.is_none_or(|b| b.len() >= g.k),
        "depthwise_small: buffers do not match {g:?}"
    );
    // One (image, block): channels [b·v, b·v + nc) of image img.
    let task = |bufs: &mut Buffers, img: usize, b: usize, o: &mut [f32]| {
        let c0 = b * v;
        let nc = v.min(g.k - c0);
        let xb = &x[(img * g.c + c0) * hw..][..nc * hw];
        let wb = &wt[b * taps * v..][..taps * v];
        let bb = bias.map(|bs| &bs[c0..c0 + nc]);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `applies` checked the CPU (AVX-512F for 16 lanes, AVX2 and FMA for 8) and
        // the geometry the buffers were sized for; the block's slices are asserted above.
        unsafe {
            if v == 16 {
                block_avx512(g, nc, xb, wb, bb, clamp, bufs, o)
            } else {
                block_avx2(g, nc, xb, wb, bb, clamp, bufs, o)
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (nc, xb, wb, bb, clamp, bufs, o);
    };
    let per_image = |bufs: &mut Buffers, img: usize, o: &mut [f32]| {
        for (b, ob) in o.chunks_mut(v * pq).enumerate() {
            task(bufs, img, b, ob);
        }
    };
    let init = || Lease::take(g, v);
    if out.len() >= PAR_MIN_OUT && rayon::current_num_threads() > 1 {
        if g.k.is_multiple_of(v) {
            out.par_chunks_mut(v * pq)
                .enumerate()
                .for_each_init(init, |l, (i, o)| task(l.get(), i / blocks, i % blocks, o));
        } else {
            out.par_chunks_mut(g.k * pq)
                .enumerate()
                .for_each_init(init, |l, (img, o)| per_image(l.get(), img, o));
        }
    } else {
        let mut lease = init();
        for (img, o) in out.chunks_mut(g.k * pq).enumerate() {
            per_image(lease.get(), img, o);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_avx512(
    g: &ConvShape,
    nc: usize,
    x: &[f32],
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    bufs: &mut Buffers,
    o: &mut [f32],
) {
    if g.stride[1] == 1 {
        block::<Avx512, 1, 2>(g, nc, x, wt, bias, clamp, bufs, o)
    } else {
        block::<Avx512, 2, 2>(g, nc, x, wt, bias, clamp, bufs, o)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_avx2(
    g: &ConvShape,
    nc: usize,
    x: &[f32],
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    bufs: &mut Buffers,
    o: &mut [f32],
) {
    if g.stride[1] == 1 {
        block::<Avx2, 1, 1>(g, nc, x, wt, bias, clamp, bufs, o)
    } else {
        block::<Avx2, 2, 1>(g, nc, x, wt, bias, clamp, bufs, o)
    }
}

/// One block of `nc ≤ V` channels: `x` their `nc` input planes, `o` their output planes;
/// `SW` the horizontal stride, a constant so that each sum's tile vector is one
/// displacement from the row's (with a stride known only at run time every load took an
/// address add: 5 × 5 filters on 1152 channels of 7 × 7 46 µs, AMD EPYC Zen 5); `ROWS`
/// output rows summed at once (2 at 16 lanes: 16 sums in flight, where 8 left the
/// multiply-adds waiting on each other; 1 at 8 lanes, whose 16 registers hold no more).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block<I: Isa, const SW: usize, const ROWS: usize>(
    g: &ConvShape,
    nc: usize,
    x: &[f32],
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    bufs: &mut Buffers,
    o: &mut [f32],
) {
    let v = I::V;
    let (hw, pq) = (g.h * g.w, g.p * g.q);
    let (th, tw) = tile_dims(g);
    let sh = g.stride[0];
    let [pt, pl] = g.pad;
    // 1. The planes into pixel vectors (lanes past nc zero), then each pixel to its place
    // in the tile (pixels past the tile's extent are read by no output).
    let px = bufs.pixels.as_mut_ptr();
    for j0 in (0..hw).step_by(v) {
        let n = v.min(hw - j0);
        I::transpose(x.as_ptr().add(j0), hw, nc, n, px.add(j0 * v), v, n, v);
    }
    let tile = bufs.tile.as_mut_ptr();
    for h in 0..g.h {
        let r = h + pt;
        if r >= th {
            break;
        }
        for w in 0..g.w.min(tw.saturating_sub(pl)) {
            let from = px.add((h * g.w + w) * v);
            I::store(
                tile.add((r * tw + w + pl) * v),
                I::load_all(from),
                I::keep(v),
            );
        }
    }
    // 2. Each output row: MAX_Q sums in registers (those past Q read the tile's slack and
    // are not kept), each tap one filter vector times one tile vector per column.
    let b = match bias {
        Some(bs) => I::load(I::inside(0, nc as isize), bs.as_ptr()),
        None => I::splat(0.0),
    };
    let sums = bufs.sums.as_mut_ptr();
    for p0 in (0..g.p).step_by(ROWS) {
        let mut acc = [[b; MAX_Q]; ROWS];
        for r in 0..g.r {
            let row = tile.add((p0 * sh + r) * tw * v);
            for s in 0..g.s {
                let f = I::load_all(wt.as_ptr().add((r * g.s + s) * v));
                for (i, ai) in acc.iter_mut().enumerate() {
                    let at = row.add((i * sh * tw + s) * v);
                    for (q, a) in ai.iter_mut().enumerate() {
                        *a = I::fma(f, I::load_all(at.add(q * SW * v)), *a);
                    }
                }
            }
        }
        for (i, ai) in acc.iter().enumerate().take(g.p - p0) {
            for (q, &a) in ai.iter().enumerate().take(g.q) {
                I::store(
                    sums.add(((p0 + i) * g.q + q) * v),
                    I::clamp(a, clamp),
                    I::keep(v),
                );
            }
        }
    }
    // 3. The output pixels back into the nc planes.
    for j0 in (0..pq).step_by(v) {
        let n = v.min(pq - j0);
        I::transpose(sums.add(j0 * v), v, n, v, o.as_mut_ptr().add(j0), pq, nc, n);
    }
}

#[cfg(test)]
mod tests {
    use super::super::depthwise::tests::{reference, square};
    use super::super::depthwise::{blocked_with, lane_major, Input};
    use super::*;
    use tensorforge_core::rng::SplitMix64;

    #[cfg(target_arch = "x86_64")]
    type Transpose = unsafe fn(*const f32, usize, usize, usize, *mut f32, usize, usize, usize);

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn transpose_512(
        s: *const f32,
        ls: usize,
        r: usize,
        c: usize,
        d: *mut f32,
        ld: usize,
        ro: usize,
        co: usize,
    ) {
        Avx512::transpose(s, ls, r, c, d, ld, ro, co)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn transpose_256(
        s: *const f32,
        ls: usize,
        r: usize,
        c: usize,
        d: *mut f32,
        ld: usize,
        ro: usize,
        co: usize,
    ) {
        Avx2::transpose(s, ls, r, c, d, ld, ro, co)
    }

    /// The widths this CPU has: (lanes, transpose).
    #[cfg(target_arch = "x86_64")]
    fn widths() -> Vec<(usize, Transpose)> {
        use tensorforge_kernels::vmath::{level, Level};
        let mut w: Vec<(usize, Transpose)> = vec![];
        if level() == Level::Avx512 {
            w.push((16, transpose_512));
        }
        if tensorforge_kernels::simd::avx2_fma() {
            w.push((8, transpose_256));
        }
        w
    }

    /// `V × V` transposes at both widths against the definition, with ragged rows and
    /// columns in and out: lanes read past `cols` or rows past `rows` are 0, nothing is
    /// written past `out_rows` × `out_cols`.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn transposes_match_the_definition() {
        for (v, t) in widths() {
            let src = SplitMix64::f32_pm1_vec(3, v * 20);
            for (rows, cols, out_rows, out_cols) in
                [(v, v, v, v), (v - 3, 5, 5, v - 3), (2, v, v, 2)]
            {
                let mut dst = vec![f32::NAN; v * 20];
                // SAFETY: `widths` lists the instruction sets the CPU has; src rows 20
                // apart hold 20·V values, dst rows 20 apart as many.
                unsafe {
                    t(
                        src.as_ptr(),
                        20,
                        rows,
                        cols,
                        dst.as_mut_ptr(),
                        20,
                        out_rows,
                        out_cols,
                    )
                };
                for j in 0..v {
                    for i in 0..v {
                        let got = dst[j * 20 + i];
                        if j < out_rows && i < out_cols {
                            let want = if i < rows && j < cols {
                                src[i * 20 + j]
                            } else {
                                0.0
                            };
                            assert_eq!(got, want, "V={v} {rows}x{cols} [{j}][{i}]");
                        } else {
                            assert!(got.is_nan(), "V={v}: [{j}][{i}] written");
                        }
                    }
                }
            }
        }
    }

    /// Small maps at both widths against the definition (f64), and at the CPU's width bit
    /// for bit against the blocked kernel (the same sums in the same order): MobileNetV2's
    /// and EfficientNet's 7 × 7 layers (3 × 3, 5 × 5), EfficientNet's 5 × 5 stride 2 from
    /// 14 × 14, a 7 × 7 filter on 8 × 8, odd sides at stride 2 over two images, channels
    /// that leave a partial block (20, 13), and 64 output pixels in rows of 8.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn small_maps_match_the_definition_and_the_blocked_kernel() {
        let cases = [
            square(1, 48, (7, 7), 3, 1, 1),
            square(1, 32, (7, 7), 5, 1, 2),
            square(1, 20, (14, 14), 5, 2, 2),
            square(1, 16, (8, 8), 7, 1, 3),
            square(2, 13, (9, 11), 3, 2, 1),
            square(1, 24, (8, 8), 3, 1, 1),
        ];
        let clamp = Clamp {
            lo: 0.0,
            hi: 0.5,
            relu: false,
        };
        for (i, g) in cases.iter().enumerate() {
            let x = SplitMix64::f32_pm1_vec(10 + i as u64, g.n * g.c * g.h * g.w);
            let w = SplitMix64::f32_pm1_vec(20 + i as u64, g.k * g.r * g.s);
            let b = SplitMix64::f32_pm1_vec(30 + i as u64, g.k);
            for cl in [Clamp::NONE, clamp] {
                let want = reference(g, &x, &w, &b, cl);
                let mut first = None;
                for (v, _) in widths() {
                    assert!(applies(g, v), "{g:?} at {v} lanes");
                    let wt = lane_major(g, &w, v);
                    for threads in [1, 2] {
                        let mut got = vec![f32::NAN; want.len()];
                        crate::exec::with_threads(threads, || {
                            depthwise_small(g, v, &x, &wt, Some(&b), cl, &mut got)
                        })
                        .unwrap();
                        for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                            // At most 49 products of |x|, |w| ≤ 1: a few f32 roundings.
                            assert!((a - e).abs() <= 1e-5, "{v} lanes {g:?} at {j}: {a} vs {e}");
                        }
                        first.get_or_insert(got);
                    }
                }
                // The blocked kernel at the CPU's width (the first listed) with the small
                // path turned off: the same bits.
                let mut blocked = vec![f32::NAN; want.len()];
                blocked_with(
                    g,
                    Input::Planes(&x),
                    &w,
                    Some(&b),
                    cl,
                    &mut blocked,
                    None,
                    false,
                )
                .unwrap();
                assert_eq!(first, Some(blocked), "{g:?}");
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn kept_buffers_serve_the_next_call_of_the_same_geometry_only() {
        // On this thread, one after another: A, then B (the same map and filter, no
        // padding: its tile has no zero border, every cell an input pixel), then A again
        // with other values. The second A reuses no cell of B's tile as padding: a border
        // left holding B's pixels would add them to A's edge sums.
        let a = square(1, 16, (8, 8), 3, 1, 1);
        let b = square(1, 16, (8, 8), 3, 1, 0);
        for (v, _) in widths() {
            for (i, g) in [a, b, a].iter().enumerate() {
                let x = SplitMix64::f32_pm1_vec(40 + i as u64, g.n * g.c * g.h * g.w);
                let w = SplitMix64::f32_pm1_vec(50 + i as u64, g.k * g.r * g.s);
                let bias = SplitMix64::f32_pm1_vec(60 + i as u64, g.k);
                let want = reference(g, &x, &w, &bias, Clamp::NONE);
                let wt = lane_major(g, &w, v);
                let mut got = vec![f32::NAN; want.len()];
                depthwise_small(g, v, &x, &wt, Some(&bias), Clamp::NONE, &mut got);
                for (j, (o, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (o - e).abs() <= 1e-5,
                        "call {i}, {v} lanes, at {j}: {o} vs {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn larger_maps_wider_rows_and_dilation_are_left_to_the_other_kernels() {
        // 14 × 14 outputs (196 pixels, rows of 14), 32 × 32 inputs, a dilated filter,
        // stride 3, a 9-wide filter.
        assert!(!applies(&square(1, 16, (14, 14), 3, 1, 1), 16));
        assert!(!applies(&square(1, 16, (32, 32), 3, 4, 1), 16));
        let mut g = square(1, 16, (7, 7), 3, 1, 2);
        g.dil = [2, 2];
        assert!(!applies(&g, 16));
        assert!(!applies(&square(1, 16, (12, 12), 3, 3, 1), 16));
        assert!(!applies(&square(1, 16, (9, 9), 9, 1, 4), 16));
    }
}
