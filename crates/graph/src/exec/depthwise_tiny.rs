//! Depthwise convolutions on tiny maps: at most [`MAX_PIXELS`] input and output pixels a
//! plane (the 2 × 2 and 1 × 1 maps at the end of MobileNetV2 at 32 × 32), a block of `V`
//! channels at a time (16 lanes with AVX-512F, 8 with AVX2 and FMA). A block's few pixels
//! are copied channel by channel into pixel vectors of `V` channels, each output pixel's
//! sum is taken over every tap in the filter's order (a tap over the padding multiplies a
//! zero, as the tile of the other kernels holds zeros there), started from the bias and
//! clamped, and the output pixels are copied back into the planes: the same sums in the same
//! order as module `depthwise_small` and the blocked kernel, so the same bits.
//!
//! Module `depthwise_small` turns a block's planes `V × V` at a time in registers, which on
//! a 1 × 1 or 2 × 2 map moves 16 × 16 values for 16 or 64 that are there, and builds a
//! padded tile around them (`perf`: a 336-channel 3 × 3 layer on 1 × 1 maps, batch 2, took
//! 4 µs, about 100 ns a block, AMD EPYC Zen 5).
//!
//! The input may also be channels last (a tensor the graph reads through a transposed view,
//! SegFormer's token maps): each pixel's block of channels is then one load.
//!
//! Left out: dilation (the other kernels take it), and CPUs without AVX2 and FMA.

// Only x86-64 has the kernel; elsewhere `applies` is false and the rest goes unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::conv::ConvShape;
use super::depthwise::Input;
#[cfg(target_arch = "x86_64")]
use super::lanes::{Avx2, Avx512, Isa};
use tensorforge_kernels::clamp::Clamp;

/// The values of `x`, planes or pixels.
fn x_of(x: Input<'_>) -> &[f32] {
    let (Input::Planes(v) | Input::Pixels(v)) = x;
    v
}

/// Input pixels, and output pixels, of a plane at most.
pub(crate) const MAX_PIXELS: usize = 4;

/// Whether this kernel runs depthwise convolution `g` at `v` lanes (16 or 8, the blocked
/// kernel's width on this CPU): one input and one output channel per group, no dilation,
/// and at most [`MAX_PIXELS`] pixels in each input and output plane.
pub(crate) fn applies(g: &ConvShape, v: usize) -> bool {
    super::depthwise_small::runs_at(v)
        && g.c == g.k
        && g.group == g.c
        && g.dil == [1, 1]
        && g.h * g.w <= MAX_PIXELS
        && g.p * g.q <= MAX_PIXELS
        && g.p * g.q > 0
}

/// `out` (`N × K × P × Q`) = the depthwise convolution of `x` (`N × C × H × W`) with the
/// lane-major filters `wt` (module `depthwise`: block b's `[t·v + l]` = tap t of channel
/// `b·v + l`) and `bias`, clamped by `clamp`, at `v` lanes; `g` must be one that
/// [`applies`] at `v`. One thread: a whole layer is a few thousand multiply-adds.
pub(crate) fn depthwise_tiny(
    g: &ConvShape,
    v: usize,
    x: Input,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    let (hw, pq, taps) = (g.h * g.w, g.p * g.q, g.r * g.s);
    assert!(
        applies(g, v)
            && x_of(x).len() == g.n * g.c * hw
            && out.len() == g.n * g.k * pq
            && wt.len() == g.k.div_ceil(v) * taps * v
            && bias.is_none_or(|b| b.len() >= g.k),
        "depthwise_tiny: buffers do not match {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `applies` checked the CPU (AVX-512F for 16 lanes, AVX2 and FMA for 8).
    unsafe {
        if v == 16 {
            run_avx512(g, x, wt, bias, clamp, out)
        } else {
            run_avx2(g, x, wt, bias, clamp, out)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bias, clamp, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn run_avx512(
    g: &ConvShape,
    x: Input,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    run::<Avx512>(g, x, wt, bias, clamp, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(
    g: &ConvShape,
    x: Input,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    run::<Avx2>(g, x, wt, bias, clamp, out)
}

/// The layer at `I::V` lanes, inlined into its caller's target features.
///
/// # Safety
/// The CPU has `I`'s instruction set; the slices are as [`depthwise_tiny`] asserts.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run<I: Isa>(
    g: &ConvShape,
    x: Input,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) {
    let v = I::V;
    let (hw, pq, taps) = (g.h * g.w, g.p * g.q, g.r * g.s);
    // Each tap of each output pixel (`o·taps + t`): the input pixel it reads, or none (the
    // padding).
    let at = |o: usize, t: usize| -> Option<usize> {
        let (p, q, rr, ss) = (o / g.q, o % g.q, t / g.s, t % g.s);
        let ih = (p * g.stride[0] + rr).checked_sub(g.pad[0])?;
        let iw = (q * g.stride[1] + ss).checked_sub(g.pad[1])?;
        (ih < g.h && iw < g.w).then_some(ih * g.w + iw)
    };
    let reads: Vec<Option<usize>> = (0..pq * taps).map(|i| at(i / taps, i % taps)).collect();
    // A block's pixels, and its output pixels, as vectors of its channels: pixel i at
    // `[i·v ..]` (lanes past the block's channels are never stored).
    let mut pixels = [0f32; MAX_PIXELS * 16];
    let mut sums = [0f32; MAX_PIXELS * 16];
    let zero = I::splat(0.0);
    for (b, wb) in wt.chunks_exact(taps * v).enumerate() {
        let c0 = b * v;
        let nc = v.min(g.k - c0);
        let lanes = I::inside(0, nc as isize);
        let keep = I::keep(nc);
        let start = I::splat(0.0);
        let start = bias.map_or(start, |bs| I::load(lanes, bs[c0..].as_ptr()));
        for img in 0..g.n {
            let outs = &mut out[(img * g.k + c0) * pq..][..nc * pq];
            let mut xs = [zero; MAX_PIXELS];
            if let Input::Pixels(x) = x {
                // Channels last: each pixel's channels are consecutive values.
                for (i, xv) in xs.iter_mut().enumerate().take(hw) {
                    *xv = I::load(lanes, x[(img * hw + i) * g.c + c0..].as_ptr());
                }
            } else if hw == 1 {
                // One pixel a plane: the block's channels are consecutive values.
                xs[0] = I::load(lanes, x_of(x)[img * g.c + c0..].as_ptr());
            } else {
                let planes = &x_of(x)[(img * g.c + c0) * hw..][..nc * hw];
                for (l, plane) in planes.chunks_exact(hw).enumerate() {
                    for (i, &val) in plane.iter().enumerate() {
                        pixels[i * v + l] = val;
                    }
                }
                for (i, xv) in xs.iter_mut().enumerate().take(hw) {
                    *xv = I::load_all(pixels[i * v..].as_ptr());
                }
            }
            for o in 0..pq {
                let mut acc = start;
                for (t, &read) in reads[o * taps..][..taps].iter().enumerate() {
                    let w = I::load_all(wb[t * v..].as_ptr());
                    acc = I::fma(w, read.map_or(zero, |i| xs[i]), acc);
                }
                acc = I::clamp(acc, clamp);
                if pq == 1 {
                    I::store(outs.as_mut_ptr(), acc, keep);
                } else {
                    I::store(sums[o * v..].as_mut_ptr(), acc, I::keep(v));
                }
            }
            if pq > 1 {
                for (l, plane) in outs.chunks_exact_mut(pq).enumerate() {
                    for (o, dst) in plane.iter_mut().enumerate() {
                        *dst = sums[o * v + l];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::depthwise::tests::{reference, square};
    use super::super::depthwise::{blocked_with, lane_major, Input};
    use super::*;
    use tensorforge_core::rng::SplitMix64;

    fn widths() -> Vec<usize> {
        [16, 8]
            .into_iter()
            .filter(|&v| applies(&square(1, 16, (2, 2), 3, 1, 1), v))
            .collect()
    }

    #[test]
    fn tiny_maps_match_the_definition_and_the_blocked_kernel() {
        // 1 × 1 and 2 × 2 maps with a 3 × 3 filter padded by 1 (MobileNetV2's last stages),
        // stride 2 from 2 × 2 to 1 × 1, a 5 × 5 filter on 2 × 2 (padded by 2), a 1 × 2 map,
        // channels not a multiple of the lanes, two images.
        let mut cases = vec![
            square(2, 40, (1, 1), 3, 1, 1),
            square(2, 37, (2, 2), 3, 1, 1),
            square(1, 24, (2, 2), 3, 2, 1),
            square(1, 16, (2, 2), 5, 1, 2),
            square(3, 5, (1, 1), 1, 1, 0),
        ];
        let mut wide = square(1, 20, (1, 2), 3, 1, 1);
        wide.w = 2;
        wide.q = 2;
        cases.push(wide);
        let clamp = Clamp {
            lo: 0.0,
            hi: 0.5,
            relu: false,
        };
        let ws = widths();
        if ws.is_empty() {
            eprintln!("no AVX2 and FMA on this CPU: the kernel does not run here");
        }
        for (i, g) in cases.iter().enumerate() {
            let x = SplitMix64::f32_pm1_vec(70 + i as u64, g.n * g.c * g.h * g.w);
            let w = SplitMix64::f32_pm1_vec(80 + i as u64, g.k * g.r * g.s);
            let b = SplitMix64::f32_pm1_vec(90 + i as u64, g.k);
            for cl in [Clamp::NONE, clamp] {
                let want = reference(g, &x, &w, &b, cl);
                for &v in &ws {
                    let wt = lane_major(g, &w, v);
                    let mut got = vec![f32::NAN; want.len()];
                    depthwise_tiny(g, v, Input::Planes(&x), &wt, Some(&b), cl, &mut got);
                    for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                        // At most 25 products of |x|, |w| ≤ 1: a few f32 roundings.
                        assert!((a - e).abs() <= 1e-5, "{v} lanes {g:?} at {j}: {a} vs {e}");
                    }
                    // The same input channels last (`N × H × W × C`): the same bits.
                    let hw = g.h * g.w;
                    let mut nhwc = vec![0f32; x.len()];
                    for (at, &val) in x.iter().enumerate() {
                        let (img, c, i) = (at / (g.c * hw), (at / hw) % g.c, at % hw);
                        nhwc[(img * hw + i) * g.c + c] = val;
                    }
                    let mut pixels = vec![f32::NAN; want.len()];
                    depthwise_tiny(g, v, Input::Pixels(&nhwc), &wt, Some(&b), cl, &mut pixels);
                    assert_eq!(pixels, got, "{v} lanes {g:?}: channels last");
                    // The blocked kernel with the small paths off: the same bits.
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
                    if v == ws[0] {
                        assert_eq!(got, blocked, "{g:?}: the blocked kernel's bits");
                    }
                }
            }
        }
    }

    #[test]
    fn larger_maps_and_dilation_are_left_to_the_other_kernels() {
        assert!(!applies(&square(1, 16, (4, 4), 3, 1, 1), 16));
        assert!(!applies(&square(1, 16, (3, 3), 3, 2, 1), 16));
        let mut g = square(1, 16, (2, 2), 3, 1, 2);
        g.dil = [2, 2];
        assert!(!applies(&g, 16));
        assert!(!applies(&square(1, 16, (2, 2), 3, 1, 1), 4));
    }
}
