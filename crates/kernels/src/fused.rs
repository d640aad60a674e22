//! RMSNorm followed by a SwiGLU feed-forward input projection, in f32:
//! out = SiLU(h · W_gate) ⊙ (h · W_up), h = RMSNorm(x) ⊙ γ = x / sqrt(mean(x²) + eps) ⊙ γ,
//! for x \[T, D\], γ \[D\], W_gate and W_up \[D, F\] (row-major), SiLU(g) = g / (1 + e^−g).
//!
//! Two paths compute it. The **unfused** reference materializes every intermediate as a full
//! tensor, one operation at a time: 1/rms \[T\], x/rms \[T, D\], h \[T, D\], h·W_gate
//! \[T, F\], h·W_up \[T, F\], SiLU(h·W_gate) \[T, F\]. The **fused** path ([`rmsnorm_swiglu_fused`]) picks
//! one of two kernels by T:
//! * T ≤ [`FUSED_SMALL_T`] (decode): the products are matrix-vector-like and bound by reading
//!   the weights, so [`rmsnorm_swiglu_fused_stream`] computes h for the (≤ 16-row) block,
//!   splits F into a few wide column tiles (one or more per worker, [`default_tile_f`]) and
//!   walks each tile's weight rows once, contiguously, accumulating both products with 8-lane
//!   FMAs into a pair of T × tile buffers per worker, then applies the epilogue.
//! * larger T: [`rmsnorm_swiglu_fused_tiled`] walks the tokens in blocks of
//!   [`FUSED_ROW_BLOCK`] rows (h block of at most 256 × D), and for each tile of
//!   [`FUSED_TILE_F`] columns of F runs the two products h_block · W[:, tile] back to back with
//!   faer (sequential inside a tile) into two 256 × 512 buffers (one pair per worker thread;
//!   tiles run in parallel on rayon above a size threshold).
//!
//! Both apply the SwiGLU epilogue (the 8-lane SiLU of [`crate::simd::silu_mul`]) while the tile
//! buffers are in cache, writing only `out`. So h, h·W_gate and h·W_up never exist as full
//! tensors (for T ≤ 16 the h block is all T rows, as a row block is for any T ≤ 256). Both
//! report the bytes of intermediates they materialized. Sums of squares are accumulated in
//! f64. Not covered: bias terms, the down projection, other dtypes.

use crate::{check_len, KernelError};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Tokens per row block in the faer-tiled fused path.
pub const FUSED_ROW_BLOCK: usize = 256;
/// Columns of F per tile in the faer-tiled fused path.
pub const FUSED_TILE_F: usize = 512;
/// Up to this many tokens [`rmsnorm_swiglu_fused`] runs the weight-streaming kernel
/// ([`rmsnorm_swiglu_fused_stream`], which also uses it as its row block).
pub const FUSED_SMALL_T: usize = 16;
/// Bytes of the two accumulator blocks of one streaming tile (sets [`default_tile_f`]).
pub const STREAM_ACC_BYTES: usize = 1 << 20;
/// Work (T·D·F multiply-adds) above which the products run on all rayon threads.
pub const PAR_MIN_MACS: usize = 1 << 22;

/// Problem size: x is [tokens, d_model], the weights are [d_model, d_ff].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwigluShape {
    /// T, number of tokens (rows of x).
    pub tokens: usize,
    /// D, model width (columns of x, rows of the weights).
    pub d_model: usize,
    /// F, hidden width (columns of the weights and of the output).
    pub d_ff: usize,
}

/// Which path produced a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwigluPath {
    /// Every intermediate materialized.
    Unfused,
    /// Row blocks × F tiles, epilogue in cache.
    Fused,
}

/// Memory accounting of one run: intermediates only (x, γ, weights and out excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwigluReport {
    /// The path that ran.
    pub path: SwigluPath,
    /// Bytes of intermediate buffers allocated (their total size).
    pub intermediate_bytes: u64,
    /// Bytes written into intermediate buffers over the run (buffers reused by the fused
    /// path count every time they are filled; accumulation passes inside one product, faer's
    /// or the streaming kernel's, are not counted again).
    pub intermediate_bytes_written: u64,
}

fn validate(
    x: &[f32],
    gamma: &[f32],
    w_gate: &[f32],
    w_up: &[f32],
    s: SwigluShape,
    eps: f32,
    out: &[f32],
) -> Result<(usize, usize, usize), KernelError> {
    let ovf = || KernelError::ShapeOverflow {
        shape: vec![s.tokens, s.d_model, s.d_ff],
    };
    if s.d_model == 0 {
        return Err(KernelError::InvalidArgument(
            "d_model must be > 0 (RMSNorm of an empty row is undefined)".into(),
        ));
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(KernelError::InvalidArgument(format!(
            "eps must be finite and >= 0, got {eps}"
        )));
    }
    let td = s.tokens.checked_mul(s.d_model).ok_or_else(ovf)?;
    let df = s.d_model.checked_mul(s.d_ff).ok_or_else(ovf)?;
    let tf = s.tokens.checked_mul(s.d_ff).ok_or_else(ovf)?;
    // byte counts must fit u64 as well
    tf.checked_mul(16).ok_or_else(ovf)?;
    td.checked_mul(16).ok_or_else(ovf)?;
    check_len("x", td, x.len())?;
    check_len("gamma", s.d_model, gamma.len())?;
    check_len("w_gate", df, w_gate.len())?;
    check_len("w_up", df, w_up.len())?;
    check_len("out", tf, out.len())?;
    Ok((td, df, tf))
}

fn par_for(s: SwigluShape) -> Par {
    let macs = s.tokens.saturating_mul(s.d_model).saturating_mul(s.d_ff);
    if macs >= PAR_MIN_MACS && rayon::current_num_threads() > 1 {
        Par::rayon(0)
    } else {
        Par::Seq
    }
}

/// 1 / sqrt(mean(row²) + eps), the square sum accumulated in f64.
#[inline]
fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ss: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
    (1.0 / (ss / row.len() as f64 + eps as f64).sqrt()) as f32
}

const F32B: u64 = 4;

/// Unfused reference: each intermediate is a full tensor, one operation at a time.
pub fn rmsnorm_swiglu_unfused(
    x: &[f32],
    gamma: &[f32],
    w_gate: &[f32],
    w_up: &[f32],
    shape: SwigluShape,
    eps: f32,
    out: &mut [f32],
) -> Result<SwigluReport, KernelError> {
    let (td, _, tf) = validate(x, gamma, w_gate, w_up, shape, eps, out)?;
    let (t, d, f) = (shape.tokens, shape.d_model, shape.d_ff);
    // 1. 1/rms per row
    let r: Vec<f32> = if t == 0 {
        vec![]
    } else {
        x.chunks(d).map(|row| inv_rms(row, eps)).collect()
    };
    // 2. x / rms
    let mut normed = vec![0.0f32; td];
    for (i, (n, &v)) in normed.iter_mut().zip(x).enumerate() {
        *n = v * r[i / d];
    }
    // 3. h = normed ⊙ γ
    let mut h = vec![0.0f32; td];
    for (i, (hv, &n)) in h.iter_mut().zip(&normed).enumerate() {
        *hv = n * gamma[i % d];
    }
    // 4, 5. the two products
    let mut g = vec![0.0f32; tf];
    let mut u = vec![0.0f32; tf];
    if t > 0 && f > 0 {
        let par = par_for(shape);
        let hm = MatRef::from_row_major_slice(&h, t, d);
        matmul(
            MatMut::from_row_major_slice_mut(&mut g, t, f),
            Accum::Replace,
            hm,
            MatRef::from_row_major_slice(w_gate, d, f),
            1.0f32,
            par,
        );
        matmul(
            MatMut::from_row_major_slice_mut(&mut u, t, f),
            Accum::Replace,
            hm,
            MatRef::from_row_major_slice(w_up, d, f),
            1.0f32,
            par,
        );
    }
    // 6. SiLU(g) (the same vector SiLU as the fused epilogue)
    let mut sg = vec![0.0f32; tf];
    crate::simd::silu_mul(&g, None, &mut sg);
    // 7. out = SiLU(g) ⊙ u
    for ((o, &s), &uv) in out.iter_mut().zip(&sg).zip(&u) {
        *o = s * uv;
    }
    let bytes = F32B * (t as u64 + 2 * td as u64 + 3 * tf as u64);
    Ok(SwigluReport {
        path: SwigluPath::Unfused,
        intermediate_bytes: bytes,
        intermediate_bytes_written: bytes,
    })
}

/// Fused path. Up to [`FUSED_SMALL_T`] tokens it runs the weight-streaming kernel
/// ([`rmsnorm_swiglu_fused_stream`], F tile [`default_tile_f`]); above, row blocks of
/// [`FUSED_ROW_BLOCK`] × F tiles of [`FUSED_TILE_F`] with faer products
/// ([`rmsnorm_swiglu_fused_tiled`]). Either way the SwiGLU epilogue writes straight into `out`.
pub fn rmsnorm_swiglu_fused(
    x: &[f32],
    gamma: &[f32],
    w_gate: &[f32],
    w_up: &[f32],
    shape: SwigluShape,
    eps: f32,
    out: &mut [f32],
) -> Result<SwigluReport, KernelError> {
    if shape.tokens <= FUSED_SMALL_T {
        rmsnorm_swiglu_fused_stream(
            x,
            gamma,
            w_gate,
            w_up,
            shape,
            eps,
            out,
            default_tile_f(shape),
        )
    } else {
        rmsnorm_swiglu_fused_tiled(
            x,
            gamma,
            w_gate,
            w_up,
            shape,
            eps,
            out,
            FUSED_ROW_BLOCK,
            FUSED_TILE_F,
        )
    }
}

/// Number of workers the tiles of `n_tiles` are spread over.
fn workers_for(shape: SwigluShape, n_tiles: usize) -> usize {
    if par_for(shape) == Par::Seq {
        1
    } else {
        rayon::current_num_threads().min(n_tiles).max(1)
    }
}

/// The F tile [`rmsnorm_swiglu_fused`] uses: [`FUSED_TILE_F`] above [`FUSED_SMALL_T`] tokens.
/// Up to that, for the streaming kernel: F split evenly over the workers, each worker's share
/// cut into as few tiles as keep the two accumulator blocks (2 · T · tile f32) within
/// [`STREAM_ACC_BYTES`], rounded up to a multiple of 8 columns.
pub fn default_tile_f(shape: SwigluShape) -> usize {
    if shape.tokens > FUSED_SMALL_T {
        return FUSED_TILE_F;
    }
    let f = shape.d_ff.max(1);
    let w = workers_for(shape, usize::MAX);
    let cap = (STREAM_ACC_BYTES / (8 * shape.tokens.max(1))).max(64);
    let per_worker = f.div_ceil(w);
    let per_tile = per_worker.div_ceil(per_worker.div_ceil(cap));
    per_tile.div_ceil(8) * 8
}

/// Weight-streaming fused path for decode-sized T (the products are matrix-vector-like and
/// bound by reading the weights): rows in blocks of at most [`FUSED_SMALL_T`], the norm once
/// per row into an h block, then for each tile of `tile_f` columns of F (tiles in parallel on
/// rayon above [`PAR_MIN_MACS`]) the kernel walks d over D eight weight rows at a time and
/// accumulates acc_g[t, tile] += Σ h[t, d] · W_gate[d, tile] (acc_u likewise) with 8-lane
/// FMAs (AVX2; portable loop otherwise), reading each row segment of the row-major weights
/// once per row block, contiguously; then the SwiGLU epilogue from the two accumulator blocks
/// into `out`. Intermediates: the h block and one pair of T × tile accumulators per worker.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_swiglu_fused_stream(
    x: &[f32],
    gamma: &[f32],
    w_gate: &[f32],
    w_up: &[f32],
    shape: SwigluShape,
    eps: f32,
    out: &mut [f32],
    tile_f: usize,
) -> Result<SwigluReport, KernelError> {
    validate(x, gamma, w_gate, w_up, shape, eps, out)?;
    if tile_f == 0 {
        return Err(KernelError::InvalidArgument("tile_f must be >= 1".into()));
    }
    let (t, d, f) = (shape.tokens, shape.d_model, shape.d_ff);
    let tb_max = FUSED_SMALL_T.min(t);
    let tf_max = tile_f.min(f);
    let n_tiles = f.div_ceil(tile_f);
    let workers = workers_for(shape, n_tiles);
    let mut h = vec![0.0f32; tb_max * d];
    let mut written = 0u64;
    let out_ptr = OutPtr::new(out);
    let mut r0 = 0;
    while r0 < t {
        let tb = FUSED_SMALL_T.min(t - r0);
        norm_rows(&x[r0 * d..(r0 + tb) * d], gamma, eps, &mut h[..tb * d]);
        written += F32B * (tb * d) as u64;
        let hb = &h[..tb * d];
        let tile = |c0: usize, g: &mut [f32], u: &mut [f32]| {
            let tw = tile_f.min(f - c0);
            let (g, u) = (&mut g[..tb * tw], &mut u[..tb * tw]);
            g.fill(0.0);
            u.fill(0.0);
            stream_acc(hb, tb, d, w_gate, f, c0, tw, g);
            stream_acc(hb, tb, d, w_up, f, c0, tw, u);
            for i in 0..tb {
                // SAFETY: as in `rmsnorm_swiglu_fused_tiled`: rows r0..r0+tb × columns
                // c0..c0+tw of `out` (length t·f, checked by `validate`) belong to this tile
                // alone; row blocks run one after another.
                let orow = unsafe {
                    std::slice::from_raw_parts_mut(out_ptr.get().add((r0 + i) * f + c0), tw)
                };
                crate::simd::silu_mul(
                    &g[i * tw..(i + 1) * tw],
                    Some(&u[i * tw..(i + 1) * tw]),
                    orow,
                );
            }
        };
        run_tiles(workers, n_tiles, tile_f, tb * tf_max, &tile);
        written += 2 * F32B * (tb * f) as u64;
        r0 += tb;
    }
    Ok(SwigluReport {
        path: SwigluPath::Fused,
        intermediate_bytes: F32B * (tb_max * d + 2 * workers * tb_max * tf_max) as u64,
        intermediate_bytes_written: written,
    })
}

/// Run `tile(c0, g, u)` for the F tiles starting at `c0 = k · tile_f`, `k < n_tiles`: in
/// order on this thread when `workers == 1`, else on the rayon pool. Each worker owns one
/// gate/up scratch pair of `scratch` floats, reused across its tiles.
fn run_tiles<T>(workers: usize, n_tiles: usize, tile_f: usize, scratch: usize, tile: &T)
where
    T: Fn(usize, &mut [f32], &mut [f32]) + Sync,
{
    if workers == 1 {
        let mut g = vec![0.0f32; scratch];
        let mut u = vec![0.0f32; scratch];
        for k in 0..n_tiles {
            tile(k * tile_f, &mut g, &mut u);
        }
    } else {
        (0..n_tiles).into_par_iter().for_each_init(
            || (vec![0.0f32; scratch], vec![0.0f32; scratch]),
            |(g, u), k| tile(k * tile_f, g, u),
        );
    }
}

/// h = x / rms ⊙ γ for consecutive rows of `x` into `h` (same length).
fn norm_rows(x: &[f32], gamma: &[f32], eps: f32, h: &mut [f32]) {
    let d = gamma.len();
    for (hrow, row) in h.chunks_mut(d).zip(x.chunks(d)) {
        let s = inv_rms(row, eps);
        for ((hv, &v), &gm) in hrow.iter_mut().zip(row).zip(gamma) {
            *hv = v * s * gm;
        }
    }
}

/// acc[i, j] += Σ_k h[i, k] · w[k, c0 + j] for i < t, j < tw, k < d; h is [t, d], w is
/// [d, f] row-major, acc is [t, tw].
#[allow(clippy::too_many_arguments)]
fn stream_acc(
    h: &[f32],
    t: usize,
    d: usize,
    w: &[f32],
    f: usize,
    c0: usize,
    tw: usize,
    acc: &mut [f32],
) {
    assert!(h.len() >= t * d && acc.len() >= t * tw && c0 + tw <= f && w.len() >= d * f);
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2_fma() {
        // SAFETY: AVX2 and FMA are present; the lengths were checked above.
        unsafe { stream_acc_avx2(h, t, d, w, f, c0, tw, acc) };
        return;
    }
    stream_acc_portable(h, t, d, w, f, c0, tw, acc);
}

/// [`stream_acc`] without explicit vectors (one weight row at a time).
#[allow(clippy::too_many_arguments)]
fn stream_acc_portable(
    h: &[f32],
    t: usize,
    d: usize,
    w: &[f32],
    f: usize,
    c0: usize,
    tw: usize,
    acc: &mut [f32],
) {
    for d0 in 0..d {
        let wr = &w[d0 * f + c0..d0 * f + c0 + tw];
        for i in 0..t {
            let hv = h[i * d + d0];
            for (a, &wv) in acc[i * tw..(i + 1) * tw].iter_mut().zip(wr) {
                *a += hv * wv;
            }
        }
    }
}

/// [`stream_acc`] with 8-lane FMAs, eight weight rows per pass over the accumulators.
/// Safety: AVX2 + FMA present; h.len() ≥ t·d, acc.len() ≥ t·tw, c0 + tw ≤ f,
/// w.len() ≥ d·f.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn stream_acc_avx2(
    h: &[f32],
    t: usize,
    d: usize,
    w: &[f32],
    f: usize,
    c0: usize,
    tw: usize,
    acc: &mut [f32],
) {
    use std::arch::x86_64::*;
    let n8 = tw / 8 * 8;
    let wp = w.as_ptr().add(c0);
    const STREAM_STRIP: usize = 128;
    let ap = acc.as_mut_ptr();
    let mut d0 = 0;
    while d0 + 8 <= d {
        let r: [*const f32; 8] = std::array::from_fn(|k| wp.add((d0 + k) * f));
        // Column strips of STREAM_STRIP: the strip of the eight weight rows stays in L1
        // while every token's accumulators pass over it.
        let mut s0 = 0;
        while s0 < tw {
            let s1 = (s0 + STREAM_STRIP).min(tw);
            let e8 = s0 + (s1 - s0) / 8 * 8;
            for i in 0..t {
                let hr = h.as_ptr().add(i * d + d0);
                let b: [__m256; 8] = std::array::from_fn(|k| _mm256_set1_ps(*hr.add(k)));
                let a = ap.add(i * tw);
                let mut j = s0;
                while j < e8 {
                    let mut p0 = _mm256_loadu_ps(a.add(j));
                    let mut p1 = _mm256_mul_ps(b[1], _mm256_loadu_ps(r[1].add(j)));
                    p0 = _mm256_fmadd_ps(b[0], _mm256_loadu_ps(r[0].add(j)), p0);
                    p1 = _mm256_fmadd_ps(b[3], _mm256_loadu_ps(r[3].add(j)), p1);
                    p0 = _mm256_fmadd_ps(b[2], _mm256_loadu_ps(r[2].add(j)), p0);
                    p1 = _mm256_fmadd_ps(b[5], _mm256_loadu_ps(r[5].add(j)), p1);
                    p0 = _mm256_fmadd_ps(b[4], _mm256_loadu_ps(r[4].add(j)), p0);
                    p1 = _mm256_fmadd_ps(b[7], _mm256_loadu_ps(r[7].add(j)), p1);
                    p0 = _mm256_fmadd_ps(b[6], _mm256_loadu_ps(r[6].add(j)), p0);
                    _mm256_storeu_ps(a.add(j), _mm256_add_ps(p0, p1));
                    j += 8;
                }
                while j < s1 {
                    let mut v = *a.add(j);
                    for (k, rk) in r.iter().enumerate() {
                        v += *hr.add(k) * *rk.add(j);
                    }
                    *a.add(j) = v;
                    j += 1;
                }
            }
            s0 = s1;
        }
        d0 += 8;
    }
    while d0 < d {
        let r = wp.add(d0 * f);
        for i in 0..t {
            let hv = *h.as_ptr().add(i * d + d0);
            let b = _mm256_set1_ps(hv);
            let a = ap.add(i * tw);
            let mut j = 0;
            while j < n8 {
                let s = _mm256_fmadd_ps(b, _mm256_loadu_ps(r.add(j)), _mm256_loadu_ps(a.add(j)));
                _mm256_storeu_ps(a.add(j), s);
                j += 8;
            }
            while j < tw {
                *a.add(j) += hv * *r.add(j);
                j += 1;
            }
        }
        d0 += 1;
    }
}

/// Fused path with faer products: per block of `row_block` rows, h once; per tile of `tile_f`
/// columns of F, both products into two tile buffers and the SwiGLU epilogue straight into
/// `out` ([`rmsnorm_swiglu_fused`] uses it above [`FUSED_SMALL_T`] tokens with
/// [`FUSED_ROW_BLOCK`] × [`FUSED_TILE_F`]; both sizes ≥ 1).
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_swiglu_fused_tiled(
    x: &[f32],
    gamma: &[f32],
    w_gate: &[f32],
    w_up: &[f32],
    shape: SwigluShape,
    eps: f32,
    out: &mut [f32],
    row_block: usize,
    tile_f: usize,
) -> Result<SwigluReport, KernelError> {
    validate(x, gamma, w_gate, w_up, shape, eps, out)?;
    if row_block == 0 || tile_f == 0 {
        return Err(KernelError::InvalidArgument(
            "row_block and tile_f must be >= 1".into(),
        ));
    }
    let (t, d, f) = (shape.tokens, shape.d_model, shape.d_ff);
    let tb_max = row_block.min(t);
    let tf_max = tile_f.min(f);
    let n_tiles = f.div_ceil(tile_f.max(1));
    // Tiles of F run in parallel above the threshold, each with its own g/u buffers and
    // sequential products; otherwise one pair of buffers is reused.
    let workers = workers_for(shape, n_tiles);
    let mut h = vec![0.0f32; tb_max * d];
    let mut written = 0u64;
    let out_ptr = OutPtr::new(out);
    let mut r0 = 0;
    while r0 < t {
        let tb = row_block.min(t - r0);
        // the norm, once per row
        norm_rows(&x[r0 * d..(r0 + tb) * d], gamma, eps, &mut h[..tb * d]);
        written += F32B * (tb * d) as u64;
        let hb = &h[..tb * d];
        let tile = |c0: usize, g: &mut [f32], u: &mut [f32]| {
            let tw = tile_f.min(f - c0);
            let hm = MatRef::from_row_major_slice(hb, tb, d);
            let wg = MatRef::from_row_major_slice_with_stride(&w_gate[c0..], d, tw, f);
            let wu = MatRef::from_row_major_slice_with_stride(&w_up[c0..], d, tw, f);
            let gm = MatMut::from_row_major_slice_mut(&mut g[..tb * tw], tb, tw);
            matmul(gm, Accum::Replace, hm, wg, 1.0f32, Par::Seq);
            let um = MatMut::from_row_major_slice_mut(&mut u[..tb * tw], tb, tw);
            matmul(um, Accum::Replace, hm, wu, 1.0f32, Par::Seq);
            for i in 0..tb {
                let grow = &g[i * tw..(i + 1) * tw];
                let urow = &u[i * tw..(i + 1) * tw];
                // SAFETY: rows r0..r0+tb × columns c0..c0+tw of `out` (length t·f, checked by
                // `validate`) belong to this tile alone; tiles of one row block are disjoint
                // and row blocks run one after another.
                let orow = unsafe {
                    std::slice::from_raw_parts_mut(out_ptr.get().add((r0 + i) * f + c0), tw)
                };
                crate::simd::silu_mul(grow, Some(urow), orow);
            }
        };
        run_tiles(workers, n_tiles, tile_f, tb * tf_max, &tile);
        written += 2 * F32B * (tb * f) as u64;
        r0 += tb;
    }
    Ok(SwigluReport {
        path: SwigluPath::Fused,
        intermediate_bytes: F32B * (tb_max * d + 2 * workers * tb_max * tf_max) as u64,
        intermediate_bytes_written: written,
    })
}

/// Raw output pointer shared by parallel tasks that each write a disjoint part of one
/// `&mut [f32]` (the tile tasks here, the column blocks of the graph crate's linear layers),
/// which outlives them. Building one is safe; every write through [`OutPtr::get`] is the
/// caller's `unsafe` block, which must keep the tasks' regions disjoint and in bounds.
#[derive(Clone, Copy, Debug)]
pub struct OutPtr(*mut f32);
// SAFETY: the pointer is only dereferenced in callers' unsafe blocks that write disjoint
// regions of a buffer outliving the tasks (see the type's documentation).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}
impl OutPtr {
    /// The start of `out`.
    pub fn new(out: &mut [f32]) -> Self {
        OutPtr(out.as_mut_ptr())
    }

    /// The pointer.
    pub fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [−1, 1) (the workspace's one generator).
    fn fill(n: usize, seed: u64) -> Vec<f32> {
        tensorforge_core::rng::SplitMix64::f32_pm1_vec(seed, n)
    }

    /// The definition in f64, straight from the formula.
    fn reference(
        x: &[f32],
        gamma: &[f32],
        wg: &[f32],
        wu: &[f32],
        s: SwigluShape,
        eps: f64,
    ) -> Vec<f64> {
        let (t, d, f) = (s.tokens, s.d_model, s.d_ff);
        let mut out = vec![0.0; t * f];
        for i in 0..t {
            let row = &x[i * d..(i + 1) * d];
            let ms: f64 = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / d as f64;
            let r = 1.0 / (ms + eps).sqrt();
            let h: Vec<f64> = row
                .iter()
                .zip(gamma)
                .map(|(&v, &g)| v as f64 * r * g as f64)
                .collect();
            for j in 0..f {
                let (mut a, mut b) = (0.0, 0.0);
                for k in 0..d {
                    a += h[k] * wg[k * f + j] as f64;
                    b += h[k] * wu[k * f + j] as f64;
                }
                out[i * f + j] = a / (1.0 + (-a).exp()) * b;
            }
        }
        out
    }

    #[test]
    fn fused_and_unfused_match_the_f64_definition() {
        // Shapes straddling the block sizes: 258 rows = 256 + 2, 530 columns = 512 + 18.
        for &(t, d, f) in &[
            (1, 48, 2100),
            (8, 64, 512),
            (258, 8, 530),
            (3, 1, 5),
            (2, 256, 8292),
        ] {
            let s = SwigluShape {
                tokens: t,
                d_model: d,
                d_ff: f,
            };
            let x = fill(t * d, 1);
            let gamma = fill(d, 2);
            let wg = fill(d * f, 3);
            let wu = fill(d * f, 4);
            let r = reference(&x, &gamma, &wg, &wu, s, 1e-6);
            let mut a = vec![0.0f32; t * f];
            let mut b = vec![0.0f32; t * f];
            let ra = rmsnorm_swiglu_unfused(&x, &gamma, &wg, &wu, s, 1e-6, &mut a).unwrap();
            let rb = rmsnorm_swiglu_fused(&x, &gamma, &wg, &wu, s, 1e-6, &mut b).unwrap();
            // Tolerance: each product sums D terms of size ≤ |h|·1 with f32 rounding; with
            // |h| ≤ ~sqrt(D)·... we allow 1e-5·D relative to max(1, |ref|).
            let tol = 1e-5 * d as f64;
            for i in 0..t * f {
                let scale = r[i].abs().max(1.0);
                assert!(
                    (a[i] as f64 - r[i]).abs() <= tol * scale,
                    "unfused {i}: {} vs {}",
                    a[i],
                    r[i]
                );
                assert!(
                    (b[i] as f64 - r[i]).abs() <= tol * scale,
                    "fused {i}: {} vs {}",
                    b[i],
                    r[i]
                );
                assert!(((a[i] - b[i]) as f64).abs() <= tol * scale);
            }
            // Bytes: unfused = 4·(T + 2TD + 3TF); fused (small shapes run on one worker)
            // = 4·(min(T,256)·D + 2·min(T,256)·min(F, tile)).
            assert_eq!(
                ra.intermediate_bytes,
                4 * (t + 2 * t * d + 3 * t * f) as u64
            );
            let (tb, tw) = (t.min(FUSED_ROW_BLOCK), f.min(default_tile_f(s)));
            if t * d * f < PAR_MIN_MACS {
                assert_eq!(rb.intermediate_bytes, 4 * (tb * d + 2 * tb * tw) as u64);
            } else {
                // (2, 256, 8292) runs its tiles on the rayon workers, one g/u pair each.
                let w = rayon::current_num_threads().min(f.div_ceil(default_tile_f(s))) as u64;
                assert_eq!(
                    rb.intermediate_bytes,
                    4 * (tb * d) as u64 + w * 8 * (tb * tw) as u64
                );
            }
            assert!(rb.intermediate_bytes < ra.intermediate_bytes || t * f <= 2);
        }
    }

    #[test]
    fn streaming_path_matches_unfused() {
        // Small T (the default dispatch's streaming kernel) at T = 1, 3, 16, F not a multiple
        // of the tile and D not a multiple of 8 (remainder weight rows, scalar column tails);
        // T = 40 through the streaming function exercises its row blocks (16 + 16 + 8);
        // (16, 300, 1000) is above PAR_MIN_MACS, so its tiles run on the rayon workers.
        for &(t, d, f, tile) in &[
            (1, 48, 2100, 512),
            (3, 61, 530, 100),
            (16, 257, 1003, 256),
            (16, 300, 1000, 0),
            (40, 19, 77, 24),
            (1, 5, 3, 0),
        ] {
            let s = SwigluShape {
                tokens: t,
                d_model: d,
                d_ff: f,
            };
            let tile = if tile == 0 { default_tile_f(s) } else { tile };
            let x = fill(t * d, 11);
            let gamma = fill(d, 12);
            let wg = fill(d * f, 13);
            let wu = fill(d * f, 14);
            let r = reference(&x, &gamma, &wg, &wu, s, 1e-6);
            let mut a = vec![0.0f32; t * f];
            let mut b = vec![0.0f32; t * f];
            let mut c = vec![0.0f32; t * f];
            rmsnorm_swiglu_unfused(&x, &gamma, &wg, &wu, s, 1e-6, &mut a).unwrap();
            let rb =
                rmsnorm_swiglu_fused_stream(&x, &gamma, &wg, &wu, s, 1e-6, &mut b, tile).unwrap();
            let rc = rmsnorm_swiglu_fused(&x, &gamma, &wg, &wu, s, 1e-6, &mut c).unwrap();
            let tol = 1e-5 * d as f64;
            for i in 0..t * f {
                let scale = r[i].abs().max(1.0);
                assert!(
                    (b[i] as f64 - r[i]).abs() <= tol * scale,
                    "stream {t}x{d}x{f} {i}: {} vs {}",
                    b[i],
                    r[i]
                );
                assert!(
                    ((a[i] - b[i]) as f64).abs() <= tol * scale,
                    "stream vs unfused {t}x{d}x{f} {i}: {} vs {}",
                    b[i],
                    a[i]
                );
                assert!((c[i] as f64 - r[i]).abs() <= tol * scale);
            }
            // Bytes: an h block of min(T, 16) rows and one accumulator pair per worker.
            let tb = t.min(FUSED_SMALL_T);
            let w = if t * d * f < PAR_MIN_MACS {
                1
            } else {
                rayon::current_num_threads().min(f.div_ceil(tile))
            };
            assert_eq!(
                rb.intermediate_bytes,
                4 * (tb * d + 2 * w * tb * tile.min(f)) as u64
            );
            assert_eq!(
                rb.intermediate_bytes_written,
                4 * (t * d + 2 * t * f) as u64
            );
            assert_eq!((rb.path, rc.path), (SwigluPath::Fused, SwigluPath::Fused));
        }
        assert!(rmsnorm_swiglu_fused_stream(
            &[0.0],
            &[1.0],
            &[1.0],
            &[1.0],
            single(),
            1e-6,
            &mut [0.0],
            0
        )
        .is_err());
    }

    fn single() -> SwigluShape {
        SwigluShape {
            tokens: 1,
            d_model: 1,
            d_ff: 1,
        }
    }

    #[test]
    fn streaming_kernels_agree() {
        // The AVX2 accumulation (where available) against the portable loop, on a tile in the
        // middle of F with ragged D and tile widths.
        let (t, d, f, c0, tw) = (5, 37, 301, 13, 203);
        let h = fill(t * d, 21);
        let w = fill(d * f, 22);
        let mut a = fill(t * tw, 23);
        let mut b = a.clone();
        stream_acc(&h, t, d, &w, f, c0, tw, &mut a);
        stream_acc_portable(&h, t, d, &w, f, c0, tw, &mut b);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "{x} vs {y}");
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let s = SwigluShape {
            tokens: 2,
            d_model: 3,
            d_ff: 4,
        };
        let (x, g, w) = (vec![0.0; 6], vec![1.0; 3], vec![0.0; 12]);
        let mut o = vec![0.0; 8];
        assert!(rmsnorm_swiglu_fused(&x, &g, &w, &w, s, 1e-6, &mut o).is_ok());
        assert!(rmsnorm_swiglu_fused(&x[..5], &g, &w, &w, s, 1e-6, &mut o).is_err());
        assert!(rmsnorm_swiglu_unfused(&x, &g, &w[..11], &w, s, 1e-6, &mut o).is_err());
        assert!(rmsnorm_swiglu_fused(&x, &g, &w, &w, s, f32::NAN, &mut o).is_err());
        let z = SwigluShape {
            tokens: 2,
            d_model: 0,
            d_ff: 4,
        };
        assert!(rmsnorm_swiglu_fused(&[], &[], &[], &[], z, 1e-6, &mut o).is_err());
        let big = SwigluShape {
            tokens: usize::MAX,
            d_model: 2,
            d_ff: 2,
        };
        assert!(matches!(
            rmsnorm_swiglu_unfused(&x, &g, &w, &w, big, 1e-6, &mut o),
            Err(KernelError::ShapeOverflow { .. })
        ));
        // Zero-row input: nothing to do, no panic.
        let e = SwigluShape {
            tokens: 0,
            d_model: 3,
            d_ff: 4,
        };
        assert!(rmsnorm_swiglu_fused(&[], &g, &w, &w, e, 1e-6, &mut []).is_ok());
        assert!(rmsnorm_swiglu_unfused(&[], &g, &w, &w, e, 1e-6, &mut []).is_ok());
    }
}
