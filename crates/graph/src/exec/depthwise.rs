//! Depthwise convolutions (one input and one output channel per group) computed across
//! channels: a block of `V` channels (the vector width: 16 at AVX-512, 8 at AVX2 and on
//! other CPUs, where the compiler vectorizes the lanes as it can) is transposed into a
//! zero-padded tile of pixels, each pixel `V` channel values, so that every tap of every
//! output pixel is one vector multiply-add with the tap's `V` filter values, whatever the
//! stride, dilation and map size; the output tile is transposed back into the channels'
//! planes. That is onnxruntime's blocked NCHWc layout for one layer, paid for with a
//! transpose on each side (8 × 8 blocks in registers at AVX2 and AVX-512): it wins where the
//! planes are small or strided, where the row kernels of module `conv` waste lanes, test
//! short rows or shuffle (MobileNetV2's 7 × 7 and 14 × 14 layers, its stride-2 layers).
//! The tile covers a band of output rows at a time, so that it stays in the L1 and L2
//! caches whatever the map's size; consecutive bands share input rows (two of a 3 × 3
//! filter's three at unit stride), and the band's window slides down a buffer of several
//! bands' rows so that each input row is transposed once. An optional clamp (ReLU, ReLU6)
//! is applied to the sums before they are stored. An input the graph reads through a
//! transposed view of a channels-last tensor (ConvNeXt's `NHWC → NCHW` Transpose before each
//! 7 × 7 layer, [`nhwc_source`]) is read in place: a pixel's block of channels is one run,
//! copied into the tile, where the view would have been made and then transposed again.
//!
//! Where the input is planar and module `depthwise_planes` takes the geometry (maps of 14
//! columns or more at AVX-512, of 16 or more with 3 × 3 filters at AVX2), [`depthwise_from`]
//! hands the convolution to it instead: reading the planes in order without transposing
//! them measured 1.2–2.5× faster there (docs/performance.md, twenty-first session). Small
//! planar maps (at most 64 output pixels in rows of at most 8: the 7 × 7 layers) go to
//! module `depthwise_small`, the same sums without this kernel's bands (1.3–2× faster
//! there). This kernel keeps the maps between (14 × 14, 28 × 28 with 5 × 5 filters), 7 × 7
//! filters on wider maps and channels-last inputs.
//!
//! Left out: channel multipliers above one (those run as grouped GEMMs in module `conv`),
//! keeping the blocked layout between layers (onnxruntime's NCHWc: no transposes), and a
//! NEON transpose (aarch64 transposes element by element).

use super::conv::ConvShape;
use rayon::prelude::*;
use tensorforge_kernels::clamp::Clamp;

/// Bytes of one band's padded input tile: rows of it are added to a band until the next
/// would pass this (at least one output row per band). A third of a 48 KiB L1 data cache,
/// so that the tile, the filter and the output rows stay there.
const TILE_BYTES: usize = 16 << 10;

/// Channels in one block on this CPU: 16 with AVX-512F, else 8.
fn lanes() -> usize {
    match tensorforge_kernels::vmath::level() {
        tensorforge_kernels::vmath::Level::Avx512 => 16,
        _ => 8,
    }
}

/// Whether [`depthwise_from`] (this module's blocked kernel, or module `depthwise_planes`
/// where it takes the geometry) runs depthwise convolution `g` rather than the row kernel of
/// module `conv`: wherever the CPU has AVX2 and FMA (the blocked kernel's explicit vector
/// paths). With each filter row's inputs loaded once for all its taps it was the faster
/// on every layer shape measured, wide unit-stride maps included: 144 channels of 56 × 56
/// 137 against 186 µs at 16 lanes and 141 against 198 at 8, 32 channels of 112 × 112 145
/// against 156 and 140 against 155 (AMD EPYC Zen 5, AVX-512 and capped to AVX2,
/// one-convolution graphs; docs/performance.md). Elsewhere (aarch64, x86-64 without FMA)
/// the row kernel, which the compiler vectorizes at the machine's width, stays: nothing was
/// measured on such a CPU, so the blocked kernel's portable path (lane by lane) runs there
/// only in this module's tests.
pub(crate) fn applies(g: &ConvShape) -> bool {
    g.c == g.k && g.group == g.c && tensorforge_kernels::simd::avx2_fma()
}

/// How a depthwise convolution's input lies in memory.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Input<'a> {
    /// `N × C × H × W` (the graph's layout): a block's `V` channels are `V` planes, turned
    /// into the tile's pixels by transposes.
    Planes(&'a [f32]),
    /// `N × H × W × C`, channels last (a tensor the graph reads through a transposed view):
    /// a block's `V` channels of a pixel are one run, copied into the tile.
    Pixels(&'a [f32]),
}

/// One block's input: its `nc` planes, or its image's pixels and its first channel.
#[derive(Clone, Copy)]
enum BlockIn<'a> {
    Planes(&'a [f32]),
    Pixels { image: &'a [f32], c0: usize },
}

/// The input node `n` (a depthwise `Conv2d` that [`applies`]) reads in place, channels last:
/// the stored tensor whose buffer, read as `N × H × W × C`, is the convolution's `N × C × H
/// × W` input (a `Transpose` with perm `[0, 3, 1, 2]` of it, as ConvNeXt's LayerNorm
/// permutes write before each depthwise layer). `None` for any other input.
pub(crate) fn nhwc_source(tg: &crate::ir::TypedGraph, n: usize) -> Option<usize> {
    let g = ConvShape::of_node(tg, n)?;
    if !applies(&g) {
        return None;
    }
    let (src, axes) = crate::gemm::strided_view(tg, *tg.node_inputs[n].first()?)?;
    let (hw, c) = (g.h * g.w, g.c);
    let want = [(g.n, hw * c), (c, 1), (g.h, g.w * c), (g.w, c)];
    // Axes of size 1 may carry any stride.
    let fits = axes.len() == 4
        && axes
            .iter()
            .zip(want)
            .all(|(&(n, st), (wn, ws))| n == wn && (n == 1 || st == ws));
    let source = &tg.tensors[src];
    (fits && source.numel == (g.n * hw * c) as u64 && source.dtype == crate::ir::DType::Fp32)
        .then_some(src)
}

/// `out` (`N × K × P × Q`) = the depthwise convolution of `x` (`N × C × H × W`, `C = K`,
/// given in either layout, [`Input`]) with filters `w` (`K × R × S`) and `bias`, clamped
/// by `clamp`; channel blocks of [`lanes`] over the pool's workers.
///
/// The filters laid out lane-major ([`lane_major`]) are kept in `cache` under the node id
/// when there is one (a program's filter cache: once per weight buffer), else made for
/// this call.
pub(crate) fn depthwise_from(
    g: &ConvShape,
    x: Input,
    w: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
    cache: Option<(&super::winograd::FilterCache, usize)>,
) -> Result<(), String> {
    if let Input::Planes(x) = x {
        if super::depthwise_planes::applies(g) {
            super::depthwise_planes::depthwise_planes(g, x, w, bias, clamp, out);
            return Ok(());
        }
    }
    blocked(g, x, w, bias, clamp, out, cache)
}

/// [`depthwise_from`] by the blocked kernel, or on small planar maps by modules
/// `depthwise_tiny` and `depthwise_small` (the same lane-major filters, the same sums in the
/// same order).
pub(super) fn blocked(
    g: &ConvShape,
    x: Input,
    w: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
    cache: Option<(&super::winograd::FilterCache, usize)>,
) -> Result<(), String> {
    blocked_with(g, x, w, bias, clamp, out, cache, true)
}

/// [`blocked`], with modules `depthwise_tiny` and `depthwise_small` taking the maps they
/// apply to only where `small` (tests compare the two).
#[allow(clippy::too_many_arguments)]
pub(super) fn blocked_with(
    g: &ConvShape,
    x: Input,
    w: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
    cache: Option<(&super::winograd::FilterCache, usize)>,
    small: bool,
) -> Result<(), String> {
    let simd = tensorforge_kernels::simd::avx2_fma();
    let v = if simd { lanes() } else { 8 };
    let (held, own);
    let wt: &[f32] = match (cache, tensorforge_kernels::sgemm::Kernel::detect()) {
        (Some((c, node)), Some(kern)) => {
            held = c.depthwise(kern, node, w, || lane_major(g, w, v))?;
            &held.packed
        }
        _ => {
            own = lane_major(g, w, v);
            &own
        }
    };
    if small && super::depthwise_tiny::applies(g, v) {
        super::depthwise_tiny::depthwise_tiny(g, v, x, wt, bias, clamp, out);
        return Ok(());
    }
    if let Input::Planes(xp) = x {
        if small && super::depthwise_small::applies(g, v) {
            super::depthwise_small::depthwise_small(g, v, xp, wt, bias, clamp, out);
            return Ok(());
        }
    }
    #[cfg(target_arch = "x86_64")]
    if simd {
        if v == 16 {
            run::<16>(g, x, wt, bias, clamp, out, block_avx512);
        } else {
            run::<8>(g, x, wt, bias, clamp, out, block_avx2);
        }
        return Ok(());
    }
    run::<8>(g, x, wt, bias, clamp, out, block::<8, false>);
    Ok(())
}

/// The filters `w` (`K × R·S`) lane-major in blocks of `v` channels: block b's
/// `[t·v + l]` = filter value t of channel `b·v + l` (0 past the last channel).
pub(super) fn lane_major(g: &ConvShape, w: &[f32], v: usize) -> Vec<f32> {
    let taps = g.r * g.s;
    let mut wt = vec![0f32; g.k.div_ceil(v) * taps * v];
    for (ch, wk) in w.chunks_exact(taps).enumerate().take(g.k) {
        let wb = &mut wt[(ch / v) * taps * v..][..taps * v];
        for (t, &x) in wk.iter().enumerate() {
            wb[t * v + ch % v] = x;
        }
    }
    wt
}

/// The signature of [`block`] at one width and instruction set.
type BlockFn<const V: usize> =
    fn(&ConvShape, &[usize], BlockIn, &[f32], Option<&[f32]>, Clamp, &mut Scratch, &mut [f32]);

/// [`block`] with 16 lanes and fused multiply-adds, compiled for AVX-512F (the closures of
/// [`run`] do not inherit a caller's target features, so the dispatch is per block).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn block_avx512(
    g: &ConvShape,
    offs: &[usize],
    xin: BlockIn,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    sc: &mut Scratch,
    o: &mut [f32],
) {
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn inner(
        g: &ConvShape,
        offs: &[usize],
        xin: BlockIn,
        wt: &[f32],
        bias: Option<&[f32]>,
        clamp: Clamp,
        sc: &mut Scratch,
        o: &mut [f32],
    ) {
        block::<16, true>(g, offs, xin, wt, bias, clamp, sc, o)
    }
    // SAFETY: chosen by `depthwise_from` only where `vmath::level` reports AVX-512F
    // (detected on this CPU) and the CPU has AVX2 and FMA.
    unsafe { inner(g, offs, xin, wt, bias, clamp, sc, o) }
}

/// [`block`] with 8 lanes and fused multiply-adds, compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn block_avx2(
    g: &ConvShape,
    offs: &[usize],
    xin: BlockIn,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    sc: &mut Scratch,
    o: &mut [f32],
) {
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn inner(
        g: &ConvShape,
        offs: &[usize],
        xin: BlockIn,
        wt: &[f32],
        bias: Option<&[f32]>,
        clamp: Clamp,
        sc: &mut Scratch,
        o: &mut [f32],
    ) {
        block::<8, true>(g, offs, xin, wt, bias, clamp, sc, o)
    }
    // SAFETY: chosen by `depthwise_from` only where the CPU has AVX2 and FMA.
    unsafe { inner(g, offs, xin, wt, bias, clamp, sc, o) }
}

/// Elements of output above which the channel blocks go to the pool's workers.
const PAR_MIN_OUT: usize = 1 << 14;

/// Per-worker buffers: the band's padded input tile and its output tile.
#[derive(Default)]
struct Scratch {
    tile: Vec<f32>,
    otile: Vec<f32>,
}

/// The convolution in blocks of `V` channels (`blk`: [`block`] at that width; `wt` the
/// filters from [`lane_major`] at `V`), over the pool's workers when the output is large
/// enough.
fn run<const V: usize>(
    g: &ConvShape,
    x: Input,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
    blk: BlockFn<V>,
) {
    let (hw, pq) = (g.h * g.w, g.p * g.q);
    let (_, cols) = super::conv::padded_dims(g);
    // Tap (r, s) as an offset in the tile, in values, from its output pixel's first tap:
    // once per convolution, not per block or band.
    let offs: Vec<usize> = (0..g.r)
        .flat_map(|r| (0..g.s).map(move |s| (r * g.dil[0] * cols + s * g.dil[1]) * V))
        .collect();
    let blocks = g.k.div_ceil(V);
    let taps = g.r * g.s;
    assert!(
        wt.len() == blocks * taps * V,
        "lane-major filters of another width"
    );
    // Each (image, block) writes channels [b·V, b·V + V) of its image: contiguous.
    let task = |sc: &mut Scratch, (idx, o): (usize, &mut [f32])| {
        let (img, b) = (idx / blocks, idx % blocks);
        let c0 = b * V;
        let nc = V.min(g.k - c0);
        let xin = match x {
            Input::Planes(x) => BlockIn::Planes(&x[(img * g.c + c0) * hw..][..nc * hw]),
            Input::Pixels(x) => BlockIn::Pixels {
                image: &x[img * hw * g.c..][..hw * g.c],
                c0,
            },
        };
        blk(
            g,
            &offs,
            xin,
            &wt[b * taps * V..][..taps * V],
            bias.map(|b| &b[c0..]),
            clamp,
            sc,
            o,
        );
    };
    // Chunks of one (image, block) each: an image's last block may be short, so chunk by
    // image first.
    let per_image = |img: usize, o: &mut [f32], sc: &mut Scratch| {
        for (b, ob) in o.chunks_mut(V * pq).enumerate() {
            task(sc, (img * blocks + b, ob));
        }
    };
    if out.len() >= PAR_MIN_OUT && rayon::current_num_threads() > 1 {
        if g.k.is_multiple_of(V) {
            out.par_chunks_mut(V * pq)
                .enumerate()
                .for_each_init(Scratch::default, task);
        } else {
            out.par_chunks_mut(g.k * pq)
                .enumerate()
                .for_each_init(Scratch::default, |sc, (img, o)| per_image(img, o, sc));
        }
    } else {
        let mut sc = Scratch::default();
        for (img, o) in out.chunks_mut(g.k * pq).enumerate() {
            per_image(img, o, &mut sc);
        }
    }
}

/// One block of `nc ≤ V` channels of one image: `xin` their `nc` input planes, `wt` their
/// filters lane-major (`R·S × V`, zero past `nc`), `o` their `nc` output planes; band by band of output
/// rows, the band's padded input rows transposed into `sc.tile` (pixel-major, `V` lanes,
/// zero outside the plane and in lanes `≥ nc`), summed into `sc.otile`, transposed out.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn block<const V: usize, const FMA: bool>(
    g: &ConvShape,
    offs: &[usize],
    xin: BlockIn,
    wt: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    sc: &mut Scratch,
    o: &mut [f32],
) {
    let nc = o.len() / (g.p * g.q);
    let mut bv = [0f32; V];
    if let Some(b) = bias {
        bv[..nc].copy_from_slice(&b[..nc]);
    }
    let (_, cols) = super::conv::padded_dims(g);
    let row_bytes = cols * V * 4;
    // Output rows per band: its padded rows (band − 1)·sh + (R − 1)·dh + 1 fit TILE_BYTES.
    let span = (g.r - 1) * g.dil[0] + 1;
    let band = (TILE_BYTES / row_bytes.max(1))
        .saturating_sub(span)
        .checked_div(g.stride[0])
        .map_or(1, |b| b + 1)
        .clamp(1, g.p);
    let band_rows = (band - 1) * g.stride[0] + span;
    // Consecutive bands share `span − stride` padded rows (2 of a 3 × 3 filter's 3 at unit
    // stride). The tile holds [`WINDOW_BANDS`] bands' rows and each band's window slides
    // down it, so that a shared row is transposed once, not once per band that reads it;
    // the shared rows are copied back to the top only when the window reaches the end.
    let keep = span.saturating_sub(g.stride[0]);
    // At most the map's padded rows (a small map is one band: no room for more).
    let cap =
        (band_rows + (WINDOW_BANDS - 1) * band * g.stride[0]).min((g.p - 1) * g.stride[0] + span);
    let row_len = cols * V;
    // Every value of a window is written before it is read (padding included), so the
    // buffers are only sized here, not cleared.
    sc.tile.resize(cap * row_len, 0.0);
    sc.otile.resize(band * g.q * V, 0.0);
    // The window's first tile row, and how many of its rows (from the top) hold the band's
    // first padded rows already.
    let (mut w0, mut have) = (0, 0);
    let mut p0 = 0;
    while p0 < g.p {
        let rows_out = band.min(g.p - p0);
        let rows_in = (rows_out - 1) * g.stride[0] + span;
        if w0 + rows_in > cap {
            sc.tile.copy_within(w0 * row_len..(w0 + have) * row_len, 0);
            w0 = 0;
        }
        let r0 = p0 * g.stride[0];
        let tile = &mut sc.tile[w0 * row_len..(w0 + rows_in) * row_len];
        let rest = &mut tile[have * row_len..];
        fill_tile::<V>(g, xin, nc, r0 + have, rows_in - have, cols, rest);
        let otile = &mut sc.otile[..rows_out * g.q * V];
        sums::<V, FMA>(g, offs, tile, cols, wt, &bv, clamp, rows_out, otile);
        store_planes::<V>(otile, nc, p0 * g.q, g.p * g.q, o);
        // The next band starts rows_out·stride padded rows down; its first `keep` rows are
        // this window's last ones.
        let step = rows_out * g.stride[0];
        (w0, have) = if keep > 0 && step + keep == rows_in {
            (w0 + step, keep)
        } else {
            (0, 0)
        };
        p0 += rows_out;
    }
}

/// Bands whose rows the tile holds ([`block`]): the shared rows are copied back to the
/// top once every this many bands.
const WINDOW_BANDS: usize = 8;

/// Padded rows `[r0, r0 + rows)` of the block's `nc` planes into `tile` (`cols` pixels of
/// `V` lanes per row): padded row `r` is input row `r − pad_top`, padded column `c` input
/// column `c − pad_left`; everything outside the plane, and lanes `≥ nc`, zero.
fn fill_tile<const V: usize>(
    g: &ConvShape,
    xin: BlockIn,
    nc: usize,
    r0: usize,
    rows: usize,
    cols: usize,
    tile: &mut [f32],
) {
    let left = g.pad[1].min(cols);
    let n = g.w.min(cols - left);
    // Padded rows of the band inside the plane: [lo, hi).
    let lo = r0.max(g.pad[0]).min(r0 + rows);
    let hi = (r0 + rows).min(g.pad[0] + g.h).max(lo);
    for rr in 0..rows {
        let dst = &mut tile[rr * cols * V..][..cols * V];
        if r0 + rr < lo || r0 + rr >= hi {
            dst.fill(0.0);
        } else {
            dst[..left * V].fill(0.0);
            dst[(left + n) * V..].fill(0.0);
        }
    }
    if hi == lo || n == 0 {
        return;
    }
    // Input rows [lo − pad_top, hi − pad_top), columns [0, n): input pixel (ih, iw) goes to
    // tile pixel (r0 + rr = ih + pad_top) · cols + left + iw.
    let (ih0, ih1) = (lo - g.pad[0], hi - g.pad[0]);
    let row0 = lo - r0;
    let dst_px = |ih: usize, iw: usize| (ih - ih0 + row0) * cols + left + iw;
    match xin {
        BlockIn::Planes(xin) => transpose_in::<V>(g, xin, nc, (ih0, ih1), n, &dst_px, tile),
        BlockIn::Pixels { image, c0 } => {
            pixels_in::<V>(g, image, (c0, nc), (ih0, ih1), n, &dst_px, tile)
        }
    }
}

/// As [`transpose_in`], from one image's pixels channels last (`image`: pixel `(ih, iw)`'s
/// `C` values at `(ih·W + iw)·C`): each tile pixel's lanes are the run of channels `c0 ..
/// c0 + nc`, lanes `nc ≤ l < V` zero.
#[inline(always)]
fn pixels_in<const V: usize>(
    g: &ConvShape,
    image: &[f32],
    (c0, nc): (usize, usize),
    (ih0, ih1): (usize, usize),
    n: usize,
    dst_px: &impl Fn(usize, usize) -> usize,
    tile: &mut [f32],
) {
    for ih in ih0..ih1 {
        let row = &image[(ih * g.w) * g.c..][..n * g.c];
        let d0 = dst_px(ih, 0) * V;
        let dst = &mut tile[d0..][..n * V];
        for (d, px) in dst.chunks_exact_mut(V).zip(row.chunks_exact(g.c)) {
            let src = &px[c0..c0 + nc];
            // A whole block is one fixed-size copy (a run of `nc` known only at run time
            // would be a `memmove` call per pixel).
            match (
                <&mut [f32; V]>::try_from(&mut *d),
                <&[f32; V]>::try_from(src),
            ) {
                (Ok(d), Ok(s)) => *d = *s,
                _ => {
                    d[..nc].copy_from_slice(src);
                    d[nc..].fill(0.0);
                }
            }
        }
    }
}

/// The pixels `(ih, iw)`, `ih0 ≤ ih < ih1`, `iw < n`, of the `nc` planes of `xin`
/// (`H × W` each) into `tile[dst_px(ih, iw)·V + l]`, lanes `nc ≤ l < V` zero. Where the
/// rows are whole (`n = W`) the pixels are taken 8 at a time across row ends, so a 7 × 7
/// map is transposed in 8 × 8 blocks too.
#[inline(always)]
fn transpose_in<const V: usize>(
    g: &ConvShape,
    xin: &[f32],
    nc: usize,
    (ih0, ih1): (usize, usize),
    n: usize,
    dst_px: &impl Fn(usize, usize) -> usize,
    tile: &mut [f32],
) {
    let (hw, w) = (g.h * g.w, g.w);
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut l0 = 0;
    #[cfg(target_arch = "x86_64")]
    if tensorforge_kernels::simd::avx2_fma() && n >= 8 {
        // Rows of at least 8 pixels: 8 at a time, the last 8 overlapping the ones before
        // (they store the same values).
        while l0 + 8 <= nc {
            let planes = &xin[l0 * hw..(l0 + 8) * hw];
            for ih in ih0..ih1 {
                let d = dst_px(ih, 0) * V + l0;
                assert!(d + (n - 1) * V + 8 <= tile.len());
                let mut iw = 0;
                while iw < n {
                    iw = iw.min(n - 8);
                    // SAFETY: the CPU has AVX2 (checked); ih·W + iw + 8 ≤ hw, and the 8
                    // pixels' values end at d + (n − 1)·V + 8 ≤ tile.len() (asserted).
                    unsafe { transpose_avx2(planes, hw, ih * w + iw, d + iw * V, V, tile) };
                    iw += 8;
                }
            }
            l0 += 8;
        }
    } else if tensorforge_kernels::simd::avx2_fma() && n == w {
        // Flat pixel index i = ih·W + iw over the band's rows.
        let (s0, s1) = (ih0 * w, ih1 * w);
        let mut px = [0usize; 8];
        while l0 + 8 <= nc {
            let planes = &xin[l0 * hw..(l0 + 8) * hw];
            let mut i = s0;
            // Pixel i is (ih, iw), kept by counters (a division per pixel cost more than
            // the transpose).
            let (mut ih, mut iw) = (ih0, 0);
            while i + 8 <= s1 {
                for d in px.iter_mut() {
                    *d = dst_px(ih, iw) * V + l0;
                    iw += 1;
                    if iw == w {
                        (ih, iw) = (ih + 1, 0);
                    }
                }
                assert!(px.iter().all(|&d| d + 8 <= tile.len()));
                // SAFETY: the CPU has AVX2 (checked); planes holds 8 planes of hw ≥ i + 8
                // values, and every px + 8 ≤ tile.len() (asserted).
                unsafe { transpose_scatter_avx2(planes, hw, i, &px, tile) };
                i += 8;
            }
            for i in i..s1 {
                let d = dst_px(i / w, i % w) * V + l0;
                for j in 0..8 {
                    tile[d + j] = planes[j * hw + i];
                }
            }
            l0 += 8;
        }
    }
    for l in l0..nc {
        let plane = &xin[l * hw..][..hw];
        for ih in ih0..ih1 {
            for iw in 0..n {
                tile[dst_px(ih, iw) * V + l] = plane[ih * w + iw];
            }
        }
    }
    if nc < V {
        for ih in ih0..ih1 {
            for iw in 0..n {
                let d = dst_px(ih, iw) * V;
                tile[d + nc..d + V].fill(0.0);
            }
        }
    }
}

/// Pixels per group of [`sums`]: eight independent sums per tap, enough to keep two fused
/// multiply-add pipes of four cycles' latency busy.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const GROUP: usize = 8;

/// Sums of one band: output pixel `i = op·Q + oq`, `op < rows_out`, lane `l`, is
/// `bias[l] + Σ_t wt[t·V + l] · tile[(op·sh·cols + oq·sw)·V + offs[t] + l]` (`offs` in
/// values), clamped, into
/// `otile[i·V + l]`; [`GROUP`] pixels at a time, in flat order across row ends (a 7 × 7
/// map is six groups and one pixel, not seven groups of four and three pixels). Written
/// with explicit vectors at 8 and 16 lanes (left to itself, the compiler vectorized across
/// the group's pixels with gathers); other CPUs sum lane by lane.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn sums<const V: usize, const FMA: bool>(
    g: &ConvShape,
    offs: &[usize],
    tile: &[f32],
    cols: usize,
    wt: &[f32],
    bv: &[f32; V],
    clamp: Clamp,
    rows_out: usize,
    otile: &mut [f32],
) {
    let (sh, sw, q) = (g.stride[0], g.stride[1], g.q);
    let top = offs.iter().copied().max().unwrap_or(0);
    let m = rows_out * q;
    // Every read below starts at value ≤ ((rows_out − 1)·sh·cols + (Q − 1)·sw)·V + top:
    // its V values are inside.
    assert!(((rows_out - 1) * sh * cols + (q - 1) * sw) * V + top + V <= tile.len());
    assert!(otile.len() == m * V && wt.len() == offs.len() * V);
    // Each output pixel's first tap, in values from the tile's start, in flat order.
    let bases = Bases {
        q,
        row: sh * cols * V,
        col: sw * V,
        at: (0, 0),
    };
    #[cfg(target_arch = "x86_64")]
    if FMA && sw == 1 && g.dil[1] == 1 && q >= GROUP && matches!(g.s, 3 | 5 | 7) {
        // Unit stride along rows: each tap row's inputs loaded once for all its taps.
        let geo = (q, sh * cols * V, rows_out);
        // SAFETY: as below; the reads are those of the general path (same bound).
        unsafe {
            match (V, g.s) {
                (16, 3) => return rows_avx512::<V, 3>(offs, tile, wt, bv, clamp, geo, otile),
                (16, 5) => return rows_avx512::<V, 5>(offs, tile, wt, bv, clamp, geo, otile),
                (16, 7) => return rows_avx512::<V, 7>(offs, tile, wt, bv, clamp, geo, otile),
                (8, 3) => return rows_avx2::<V, 3>(offs, tile, wt, bv, clamp, geo, otile),
                (8, 5) => return rows_avx2::<V, 5>(offs, tile, wt, bv, clamp, geo, otile),
                (8, 7) => return rows_avx2::<V, 7>(offs, tile, wt, bv, clamp, geo, otile),
                _ => {}
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if FMA {
        // SAFETY: the FMA builds run only where the CPU has AVX2 and FMA, the 16-lane one
        // only where it has AVX-512F (`depthwise_from`); the reads are bounded above.
        unsafe {
            match V {
                16 => return sums_avx512(offs, tile, wt, bv, clamp, m, bases, otile),
                8 => return sums_avx2(offs, tile, wt, bv, clamp, m, bases, otile),
                _ => {}
            }
        }
    }
    for (i, b) in bases.take(m).enumerate() {
        let mut a = *bv;
        for (ti, &off) in offs.iter().enumerate() {
            let x = &tile[b + off..][..V];
            for l in 0..V {
                a[l] += x[l] * wt[ti * V + l];
            }
        }
        let d = &mut otile[i * V..][..V];
        for l in 0..V {
            d[l] = clamp.apply(a[l]);
        }
    }
}

/// Output pixels' first taps in flat order, `op·row + oq·col` for `oq < q`, by counters.
struct Bases {
    q: usize,
    row: usize,
    col: usize,
    /// The next pixel's (op, oq).
    at: (usize, usize),
}

impl Bases {
    /// The next pixel's first tap.
    #[inline(always)]
    fn step(&mut self) -> usize {
        let (op, oq) = self.at;
        self.at = if oq + 1 == self.q {
            (op + 1, 0)
        } else {
            (op, oq + 1)
        };
        op * self.row + oq * self.col
    }
}

impl Iterator for Bases {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        Some(self.step())
    }
}

/// [`sums`] with explicit vectors of `$v` lanes (`$ty`), [`GROUP`] pixels at a time.
macro_rules! sums_simd {
    ($name:ident, $feat:literal, $v:literal, $ty:ty, $set1:ident, $load:ident, $store:ident,
     $fmadd:ident, $clamp:ident) => {
        /// [`sums`] at this width: `offs` the taps' offsets and `bases` the `m` output
        /// pixels' first taps, in values.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const V: usize>(
            offs: &[usize],
            tile: &[f32],
            wt: &[f32],
            bv: &[f32; V],
            clamp: Clamp,
            m: usize,
            mut bases: Bases,
            otile: &mut [f32],
        ) {
            use std::arch::x86_64::*;
            debug_assert_eq!(V, $v);
            let (t, wp, o) = (tile.as_ptr(), wt.as_ptr(), otile.as_mut_ptr());
            let bias: $ty = $load(bv.as_ptr());
            let out = |a: $ty| clamp.$clamp(a);
            let mut i = 0;
            while i + GROUP <= m {
                let p: [*const f32; GROUP] = std::array::from_fn(|_| t.add(bases.step()));
                let mut a: [$ty; GROUP] = [bias; GROUP];
                for (ti, &off) in offs.iter().enumerate() {
                    let w = $load(wp.add(ti * V));
                    for j in 0..GROUP {
                        a[j] = $fmadd($load(p[j].add(off)), w, a[j]);
                    }
                }
                for (j, aj) in a.iter().enumerate() {
                    $store(o.add((i + j) * V), out(*aj));
                }
                i += GROUP;
            }
            while i < m {
                let p = t.add(bases.step());
                let mut a = bias;
                for (ti, &off) in offs.iter().enumerate() {
                    a = $fmadd($load(p.add(off)), $load(wp.add(ti * V)), a);
                }
                $store(o.add(i * V), out(a));
                i += 1;
            }
        }
    };
}

/// [`sums`] for unit-stride rows and `S` taps per filter row, with explicit vectors of `$ty`:
/// [`GROUP`] consecutive output pixels of one row at a time (the last group of a row
/// overlapping the one before, which stores the same values), each filter row's `S` filter
/// vectors held in registers and its `GROUP + S − 1` input vectors loaded once each, every
/// one multiplied into the sums of the pixels it reaches (the general path loads `S` of
/// them per pixel). Each pixel's sum runs over the taps in the same order as the general
/// path's, so the two give the same bits.
macro_rules! rows_simd {
    ($name:ident, $feat:literal, $ty:ty, $set1:ident, $load:ident, $store:ident,
     $fmadd:ident, $clamp:ident) => {
        /// The rows path at this width: `offs` the taps' offsets in values (filter row r's
        /// first at `offs[r·S]`), `geo` the output width, one output row's step in the
        /// tile (values) and the rows.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const V: usize, const S: usize>(
            offs: &[usize],
            tile: &[f32],
            wt: &[f32],
            bv: &[f32; V],
            clamp: Clamp,
            (q, row, rows_out): (usize, usize, usize),
            otile: &mut [f32],
        ) {
            use std::arch::x86_64::*;
            let (t, wp, o) = (tile.as_ptr(), wt.as_ptr(), otile.as_mut_ptr());
            let bias: $ty = $load(bv.as_ptr());
            let out = |a: $ty| clamp.$clamp(a);
            for op in 0..rows_out {
                let mut oq = 0;
                while oq < q {
                    let oq0 = oq.min(q - GROUP);
                    let base = t.add(op * row + oq0 * V);
                    let mut a: [$ty; GROUP] = [bias; GROUP];
                    for (r, &rv) in offs.iter().step_by(S).enumerate() {
                        let w: [$ty; S] = std::array::from_fn(|s| $load(wp.add((r * S + s) * V)));
                        let x0 = base.add(rv);
                        for i in 0..GROUP + S - 1 {
                            let x = $load(x0.add(i * V));
                            for (s, ws) in w.iter().enumerate() {
                                if i >= s && i - s < GROUP {
                                    a[i - s] = $fmadd(x, *ws, a[i - s]);
                                }
                            }
                        }
                    }
                    for (j, aj) in a.iter().enumerate() {
                        $store(o.add((op * q + oq0 + j) * V), out(*aj));
                    }
                    oq = oq0 + GROUP;
                }
            }
        }
    };
}

rows_simd!(
    rows_avx512,
    "avx512f,avx2,fma",
    __m512,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps,
    apply_m512
);
rows_simd!(
    rows_avx2,
    "avx2,fma",
    __m256,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps,
    apply_m256
);

sums_simd!(
    sums_avx512,
    "avx512f,avx2,fma",
    16,
    __m512,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps,
    apply_m512
);
sums_simd!(
    sums_avx2,
    "avx2,fma",
    8,
    __m256,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps,
    apply_m256
);

/// The band's output tile (`m` pixels of `V` lanes) into the block's planes: lane `l` of
/// pixel `i` to `o[l·pq + at + i]`, for `l < nc`.
#[inline(always)]
fn store_planes<const V: usize>(otile: &[f32], nc: usize, at: usize, pq: usize, o: &mut [f32]) {
    let m = otile.len() / V;
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut l0 = 0;
    #[cfg(target_arch = "x86_64")]
    if tensorforge_kernels::simd::avx2_fma() {
        while l0 + 8 <= nc {
            let mut planes = o[l0 * pq..(l0 + 8) * pq].chunks_mut(pq);
            let mut rows: [&mut [f32]; 8] =
                std::array::from_fn(|_| &mut planes.next().unwrap_or_default()[at..at + m]);
            // SAFETY: the CPU has AVX2 (checked); `otile` holds m·V ≥ (m − 1)·V + l0 + 8
            // values and every row m.
            let done = unsafe { transpose_cols_avx2(&otile[l0..], V, m, &mut rows) };
            for i in done..m {
                for (j, r) in rows.iter_mut().enumerate() {
                    r[i] = otile[i * V + l0 + j];
                }
            }
            l0 += 8;
        }
    }
    for l in l0..nc {
        let d = &mut o[l * pq + at..][..m];
        for (i, v) in d.iter_mut().enumerate() {
            *v = otile[i * V + l];
        }
    }
}

/// One 8 × 8 transpose: values `[i, i + 8)` of the 8 planes (`hw` apart) in `planes`, value
/// `i + k` of plane `j` to `tile[d + k·stride + j]`. The caller bounds `i + 8 ≤ hw`,
/// `planes.len() ≥ 8·hw` and `d + 7·stride + 8 ≤ tile.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn transpose_avx2(
    planes: &[f32],
    hw: usize,
    i: usize,
    d: usize,
    stride: usize,
    tile: &mut [f32],
) {
    use std::arch::x86_64::*;
    debug_assert!(i + 8 <= hw && planes.len() >= 8 * hw && d + 7 * stride + 8 <= tile.len());
    let s = planes.as_ptr().add(i);
    let mut t: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(s.add(j * hw)));
    tensorforge_kernels::simd::transpose8x8(&mut t);
    let o = tile.as_mut_ptr().add(d);
    for (k, tk) in t.iter().enumerate() {
        _mm256_storeu_ps(o.add(k * stride), *tk);
    }
}

/// [`transpose_avx2`] with each pixel's place given: value `i + k` of plane `j` to
/// `tile[px[k] + j]` (the caller bounds every `px[k] + 8 ≤ tile.len()`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn transpose_scatter_avx2(
    planes: &[f32],
    hw: usize,
    i: usize,
    px: &[usize; 8],
    tile: &mut [f32],
) {
    use std::arch::x86_64::*;
    debug_assert!(i + 8 <= hw && planes.len() >= 8 * hw);
    let s = planes.as_ptr().add(i);
    let mut t: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(s.add(j * hw)));
    tensorforge_kernels::simd::transpose8x8(&mut t);
    let d = tile.as_mut_ptr();
    for (k, tk) in t.iter().enumerate() {
        _mm256_storeu_ps(d.add(px[k]), *tk);
    }
}

/// 8 × 8 transposes of `m` vectors of 8 (`src[i·stride ..][..8]`) into 8 rows:
/// `rows[j][i] = src[i·stride + j]`, 8 vectors at a time; returns the vectors done.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_cols_avx2(
    src: &[f32],
    stride: usize,
    m: usize,
    rows: &mut [&mut [f32]],
) -> usize {
    use std::arch::x86_64::*;
    let done = m - m % 8;
    assert!(rows.len() == 8 && rows.iter().all(|r| r.len() >= m));
    assert!(done == 0 || (done - 1) * stride + 8 <= src.len());
    let s = src.as_ptr();
    let mut i = 0;
    while i < done {
        let mut t: [__m256; 8] = std::array::from_fn(|k| _mm256_loadu_ps(s.add((i + k) * stride)));
        tensorforge_kernels::simd::transpose8x8(&mut t);
        for (j, tj) in t.iter().enumerate() {
            _mm256_storeu_ps(rows[j].as_mut_ptr().add(i), *tj);
        }
        i += 8;
    }
    done
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::HashMap;
    use tensorforge_core::rng::SplitMix64;

    /// A depthwise convolution of `n` images of `c` channels of `h × w`, a square `rs × rs`
    /// filter, the same stride and padding both ways.
    pub(in crate::exec) fn square(
        n: usize,
        c: usize,
        (h, w): (usize, usize),
        rs: usize,
        stride: usize,
        pad: usize,
    ) -> ConvShape {
        ConvShape {
            n,
            c,
            h,
            w,
            k: c,
            r: rs,
            s: rs,
            p: (h + 2 * pad - rs) / stride + 1,
            q: (w + 2 * pad - rs) / stride + 1,
            stride: [stride, stride],
            pad: [pad, pad],
            dil: [1, 1],
            group: c,
        }
    }

    /// The definition in f64 (out[n,k,p,q] = b[k] + Σ_{r,s} x[n,k,p·sh + r·dh − ph,
    /// q·sw + s·dw − pw]·w[k,r,s] over in-range taps), then the clamp.
    pub(in crate::exec) fn reference(
        g: &ConvShape,
        x: &[f32],
        w: &[f32],
        b: &[f32],
        c: Clamp,
    ) -> Vec<f32> {
        let mut out = vec![0f32; g.n * g.k * g.p * g.q];
        for n in 0..g.n {
            for k in 0..g.k {
                for p in 0..g.p {
                    for q in 0..g.q {
                        let mut acc = b[k] as f64;
                        for r in 0..g.r {
                            for s in 0..g.s {
                                let ih =
                                    (p * g.stride[0] + r * g.dil[0]) as isize - g.pad[0] as isize;
                                let iw =
                                    (q * g.stride[1] + s * g.dil[1]) as isize - g.pad[1] as isize;
                                if ih >= 0 && iw >= 0 && (ih as usize) < g.h && (iw as usize) < g.w
                                {
                                    acc += x
                                        [((n * g.c + k) * g.h + ih as usize) * g.w + iw as usize]
                                        as f64
                                        * w[(k * g.r + r) * g.s + s] as f64;
                                }
                            }
                        }
                        out[((n * g.k + k) * g.p + p) * g.q + q] = c.apply(acc as f32);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn blocked_depthwise_matches_the_definition() {
        let mut rng = SplitMix64::new(7);
        // (n, c, h, w, r, s, stride, pad, dil): MobileNetV2's 7 × 7 and stride-2 layers,
        // channels that leave a partial block (3, 13, 20), a map wider than one band's tile,
        // ConvNeXt's 7 × 7 filter, dilation, asymmetric strides and pads of 0.
        let cases = [
            (1, 32, 7, 7, 3, 3, [1, 1], [1, 1], [1, 1]),
            (2, 13, 9, 11, 3, 3, [2, 2], [1, 1], [1, 1]),
            (1, 20, 56, 56, 3, 3, [2, 2], [0, 1], [1, 1]),
            (1, 3, 130, 200, 3, 3, [1, 1], [1, 1], [1, 1]),
            (1, 24, 14, 14, 7, 7, [1, 1], [3, 3], [1, 1]),
            (1, 16, 12, 12, 3, 3, [1, 2], [2, 2], [2, 2]),
            (3, 8, 5, 4, 5, 5, [1, 1], [2, 2], [1, 1]),
            (1, 40, 2, 2, 3, 3, [1, 1], [1, 1], [1, 1]),
            // The rows path (unit stride, 3, 5 or 7 taps per row, 8 or more columns): a
            // 5 × 5 filter on 9 columns (a last group overlapping the one before), 3 × 3 on
            // 8 columns with a stride-2 height.
            (2, 16, 10, 9, 5, 5, [1, 1], [2, 2], [1, 1]),
            (1, 17, 9, 8, 3, 3, [2, 1], [1, 1], [1, 1]),
        ];
        for &(n, c, h, w, r, s, stride, pad, dil) in &cases {
            let p = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) / stride[0] + 1;
            let q = (w + 2 * pad[1] - dil[1] * (s - 1) - 1) / stride[1] + 1;
            let g = ConvShape {
                n,
                c,
                h,
                w,
                k: c,
                r,
                s,
                p,
                q,
                stride,
                pad,
                dil,
                group: c,
            };
            let x: Vec<f32> = (0..n * c * h * w).map(|_| rng.next_f32_pm1()).collect();
            let wk: Vec<f32> = (0..c * r * s).map(|_| rng.next_f32_pm1()).collect();
            let b: Vec<f32> = (0..c).map(|_| rng.next_f32_pm1() / 2.0).collect();
            let relu = Clamp {
                lo: 0.0,
                hi: f32::INFINITY,
                relu: true,
            };
            for clamp in [
                Clamp::NONE,
                Clamp {
                    lo: 0.0,
                    hi: 0.5,
                    relu: false,
                },
                relu,
            ] {
                let want = reference(&g, &x, &wk, &b, clamp);
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    let cache = crate::exec::winograd::FilterCache::default();
                    // Twice through the cache: the second call takes the kept layout.
                    for _ in 0..2 {
                        got.fill(f32::NAN);
                        pool.install(|| {
                            depthwise_from(
                                &g,
                                Input::Planes(&x),
                                &wk,
                                Some(&b),
                                clamp,
                                &mut got,
                                Some((&cache, 3)),
                            )
                        })
                        .unwrap();
                    }
                    for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                        // f32 sums of at most 49 products of |x|, |w| ≤ 1 against f64.
                        assert!(
                            (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{g:?} {clamp:?} at {i}: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }

    /// The channels-last input (`Input::Pixels`) gives the planar input's output bit for
    /// bit: the tile holds the same values either way, and the sums run in the same order.
    /// Whole and partial channel blocks (48 = three of 16; 20: a block of 4), stride 2, a
    /// 7 × 7 filter, two images, one and two workers.
    #[test]
    fn channels_last_input_equals_the_planar_one() {
        let mut rng = SplitMix64::new(31);
        // (n, c, h, w, r, stride, pad)
        for &(n, c, h, w, r, st, pad) in &[
            (1, 48, 14, 14, 7, 1, 3),
            (2, 20, 9, 11, 3, 2, 1),
            (1, 32, 8, 8, 5, 1, 2),
            (1, 16, 7, 7, 3, 1, 1),
        ] {
            let g = square(n, c, (h, w), r, st, pad);
            let x: Vec<f32> = (0..n * c * h * w).map(|_| rng.next_f32_pm1()).collect();
            // The same values channels last: nhwc[((img·H + ih)·W + iw)·C + ch].
            let mut nhwc = vec![0f32; x.len()];
            for img in 0..n {
                for ch in 0..c {
                    for i in 0..h * w {
                        nhwc[(img * h * w + i) * c + ch] = x[(img * c + ch) * h * w + i];
                    }
                }
            }
            let wk: Vec<f32> = (0..c * r * r).map(|_| rng.next_f32_pm1()).collect();
            let b: Vec<f32> = (0..c).map(|_| rng.next_f32_pm1()).collect();
            for threads in [1, 2] {
                let run = |input: Input| {
                    let mut out = vec![f32::NAN; n * c * g.p * g.q];
                    crate::exec::with_threads(threads, || {
                        depthwise_from(&g, input, &wk, Some(&b), Clamp::NONE, &mut out, None)
                    })
                    .unwrap()
                    .unwrap();
                    out
                };
                let (planar, pixels) = (run(Input::Planes(&x)), run(Input::Pixels(&nhwc)));
                assert!(
                    planar
                        .iter()
                        .zip(&pixels)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{g:?} at {threads} threads"
                );
                let want = reference(&g, &x, &wk, &b, Clamp::NONE);
                assert!(pixels
                    .iter()
                    .zip(&want)
                    .all(|(a, e)| (a - e).abs() <= 1e-5 * (1.0 + e.abs())));
            }
        }
    }

    /// A depthwise convolution of a channels-last tensor's transposed view (ConvNeXt's
    /// `Transpose(NHWC → NCHW)` before each 7 × 7 layer) reads the tensor in place: neither
    /// the fused nor the unfused program makes the transpose, and both give the planar
    /// path's values bit for bit.
    #[test]
    fn a_transposed_view_is_read_in_place() {
        use crate::exec::tests::TRANSPOSE_COPIES;
        let j = r#"{"schema_version":1,"name":"dw","nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[1,10,12,48],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[48,1,7,7],"dtype":"fp32"}},
          {"name":"xt","op":"Transpose","attrs":{"perm":[0,3,1,2]},"inputs":["x"]},
          {"name":"c","op":"Conv2d","inputs":["xt","w"],"attrs":{"strides":[1,1],"pads":[3,3,3,3],"dilations":[1,1],"group":48}}],
          "outputs":["c"]}"#;
        let graph = crate::ir::Graph::from_json_str(j).unwrap();
        let c = crate::fusion::compile(&graph).unwrap();
        let conv = c
            .fused
            .graph
            .nodes
            .iter()
            .position(|n| n.name == "c")
            .unwrap();
        let expect_in_place = applies(&ConvShape::of_node(&c.fused.graph, conv).unwrap());
        assert_eq!(nhwc_source(&c.fused.graph, conv).is_some(), expect_in_place);
        let mut ins = HashMap::new();
        crate::exec::fill_inputs(&c.unfused.graph, &mut ins, 5).unwrap();
        let copies = |p| {
            let before = TRANSPOSE_COPIES.with(|c| c.get());
            let r = crate::exec::execute(p, &ins).unwrap();
            (
                TRANSPOSE_COPIES.with(|c| c.get()) - before,
                r.outputs[0].2.clone(),
            )
        };
        let made = usize::from(!expect_in_place);
        let (fused_copies, fused) = copies(&c.fused);
        let (unfused_copies, unfused) = copies(&c.unfused);
        assert_eq!((fused_copies, unfused_copies), (made, made));
        // The planar path on the transposed input: the same tile values, the same sums.
        let (h, w, ch) = (10, 12, 48);
        let x = &ins["x"];
        let mut planes = vec![0f32; x.len()];
        for i in 0..h * w {
            for k in 0..ch {
                planes[k * h * w + i] = x[i * ch + k];
            }
        }
        let g = ConvShape::of_node(&c.fused.graph, conv).unwrap();
        let mut want = vec![0f32; fused.len()];
        let planes = Input::Planes(&planes);
        depthwise_from(&g, planes, &ins["w"], None, Clamp::NONE, &mut want, None).unwrap();
        for got in [&fused, &unfused] {
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
