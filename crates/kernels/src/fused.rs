//! RMSNorm followed by a SwiGLU feed-forward input projection, in f32:
//! out = SiLU(h · W_gate) ⊙ (h · W_up), h = RMSNorm(x) ⊙ γ = x / sqrt(mean(x²) + eps) ⊙ γ,
//! for x [T, D], γ [D], W_gate and W_up [D, F] (row-major), SiLU(g) = g / (1 + e^−g).
//!
//! Two paths compute it. The **unfused** reference materializes every intermediate as a full
//! tensor, one operation at a time: 1/rms [T], x/rms [T, D], h [T, D], h·W_gate [T, F],
//! h·W_up [T, F], SiLU(h·W_gate) [T, F]. The **fused** path walks the tokens in blocks of
//! [`FUSED_ROW_BLOCK`] rows: it computes the norm once per row into an h block of at most
//! 256 × D, then for each tile of [`FUSED_TILE_F`] columns of F runs the two products
//! h_block · W[:, tile] back to back with faer (sequential inside a tile) into two 256 × 512
//! buffers (one pair per worker thread; tiles run in parallel on rayon above a size
//! threshold) and applies the SwiGLU epilogue (the 8-lane SiLU of [`crate::simd::silu_mul`])
//! while those are in cache, writing only `out`. So h, h·W_gate and h·W_up never exist as
//! full tensors. Both report the bytes of intermediates they materialized. Sums of squares
//! are accumulated in f64. Not covered: bias terms, the down projection, other dtypes.

use crate::{check_len, KernelError};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Tokens per block in the fused path (decode shapes fit one block).
pub const FUSED_ROW_BLOCK: usize = 256;
/// Columns of F per tile in the fused path.
pub const FUSED_TILE_F: usize = 512;
/// Up to this many tokens the fused path uses one wide F tile per worker
/// ([`default_tile_f`]).
pub const FUSED_SMALL_T: usize = 16;
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
    /// path count every time they are filled).
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

/// Fused path: per block of ≤ 256 rows, h once; per F tile ([`default_tile_f`]: 512 columns,
/// or ⌈F / workers⌉ for ≤ 16 tokens), both products into small buffers and the SwiGLU
/// epilogue straight into `out`.
pub fn rmsnorm_swiglu_fused(
    x: &[f32],
    gamma: &[f32],
    w_gate: &[f32],
    w_up: &[f32],
    shape: SwigluShape,
    eps: f32,
    out: &mut [f32],
) -> Result<SwigluReport, KernelError> {
    rmsnorm_swiglu_fused_tiled(
        x,
        gamma,
        w_gate,
        w_up,
        shape,
        eps,
        out,
        FUSED_ROW_BLOCK,
        default_tile_f(shape),
    )
}

/// Default F tile: [`FUSED_TILE_F`] columns, except for decode-sized blocks (≤
/// [`FUSED_SMALL_T`] tokens), where the products are matrix-vector-like and bound by streaming
/// the weights: there each worker takes one contiguous tile of ⌈F / workers⌉ columns (at least
/// [`FUSED_TILE_F`]), so that every weight row is read in long runs.
pub fn default_tile_f(shape: SwigluShape) -> usize {
    if shape.tokens <= FUSED_SMALL_T {
        let w = if par_for(shape) == Par::Seq {
            1
        } else {
            rayon::current_num_threads().max(1)
        };
        shape.d_ff.div_ceil(w).max(FUSED_TILE_F)
    } else {
        FUSED_TILE_F
    }
}

/// [`rmsnorm_swiglu_fused`] with explicit block sizes (rows per block, columns per F tile;
/// both ≥ 1).
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
    let workers = if par_for(shape) == Par::Seq {
        1
    } else {
        rayon::current_num_threads().min(n_tiles).max(1)
    };
    let mut h = vec![0.0f32; tb_max * d];
    let mut written = 0u64;
    let out_ptr = OutPtr(out.as_mut_ptr());
    let mut r0 = 0;
    while r0 < t {
        let tb = row_block.min(t - r0);
        // the norm, once per row
        for (i, row) in x[r0 * d..(r0 + tb) * d].chunks(d).enumerate() {
            let s = inv_rms(row, eps);
            for ((hv, &v), &gm) in h[i * d..(i + 1) * d].iter_mut().zip(row).zip(gamma) {
                *hv = v * s * gm;
            }
        }
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
        if workers == 1 {
            let mut g = vec![0.0f32; tb * tf_max];
            let mut u = vec![0.0f32; tb * tf_max];
            for k in 0..n_tiles {
                tile(k * tile_f, &mut g, &mut u);
            }
        } else {
            (0..n_tiles).into_par_iter().for_each_init(
                || (vec![0.0f32; tb * tf_max], vec![0.0f32; tb * tf_max]),
                |(g, u), k| tile(k * tile_f, g, u),
            );
        }
        written += 2 * F32B * (tb * f) as u64;
        r0 += tb;
    }
    Ok(SwigluReport {
        path: SwigluPath::Fused,
        intermediate_bytes: F32B * (tb_max * d + 2 * workers * tb_max * tf_max) as u64,
        intermediate_bytes_written: written,
    })
}

/// Raw output pointer shared by the tile tasks (each writes a disjoint sub-block).
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: used only to write disjoint regions of one `&mut [f32]` that outlives the tasks.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}
impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [−1, 1) (splitmix64).
    fn fill(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
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
