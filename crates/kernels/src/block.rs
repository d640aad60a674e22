//! The element-wise operations of a transformer block in f32, as the harness runs a block
//! between its GEMMs: LayerNorm and RMSNorm over rows, rotary position embedding, residual
//! addition, the SwiGLU gate and tanh-approximated GELU. Each runs on rayon when `threads > 1`
//! and the tensor has at least [`PAR_MIN_ELEMS`] elements (callers run inside the rayon pool
//! they sized), else in one loop.
//!
//! These are the measured stand-ins for the Core's element-wise ops, not reference numerics:
//! the norms divide by `sqrt(var + 1e-5)` in f32 without compensated sums, rotary pairs
//! adjacent elements against an interleaved cos/sin table, GELU uses the tanh form. Left out:
//! fusion with neighbouring GEMMs, half precision, head-layout transposes.

use crate::KernelError;

type Result<T> = std::result::Result<T, KernelError>;
use rayon::prelude::*;

/// Element-wise loops run on rayon above this many elements (when `threads > 1`).
pub const PAR_MIN_ELEMS: usize = 1 << 15;

fn check(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::LengthMismatch {
            what: what.into(),
            expected,
            got,
        })
    }
}

fn map2(out: &mut [f32], a: &[f32], b: &[f32], threads: usize, f: impl Fn(f32, f32) -> f32 + Sync) {
    if threads > 1 && out.len() >= PAR_MIN_ELEMS {
        out.par_iter_mut()
            .zip(a.par_iter().zip(b.par_iter()))
            .for_each(|(o, (x, y))| *o = f(*x, *y));
    } else {
        for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
            *o = f(*x, *y);
        }
    }
}

fn norm_row(x: &[f32], gamma: &[f32], out: &mut [f32], rms: bool) {
    let n = x.len() as f32;
    let mean = if rms { 0.0 } else { x.iter().sum::<f32>() / n };
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + 1e-5).sqrt();
    for ((o, v), g) in out.iter_mut().zip(x).zip(gamma) {
        *o = (v - mean) * inv * g;
    }
}

/// Row normalization of a `rows × cols` matrix: RMSNorm `x / sqrt(mean(x²) + 1e-5) · γ` when
/// `rms`, else LayerNorm without β `(x − mean) / sqrt(var + 1e-5) · γ`.
///
/// ```
/// // One row [3, 4]: mean(x²) = 12.5, so out = x / sqrt(12.5 + 1e-5) ≈ [0.8485, 1.1314].
/// let mut out = [0.0f32; 2];
/// tensorforge_kernels::block::norm_rows(&[3.0, 4.0], &[1.0, 1.0], &mut out, 1, 2, true, 1).unwrap();
/// assert!((out[0] - 0.848_528).abs() < 1e-5 && (out[1] - 1.131_371).abs() < 1e-5);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn norm_rows(
    x: &[f32],
    gamma: &[f32],
    out: &mut [f32],
    rows: usize,
    cols: usize,
    rms: bool,
    threads: usize,
) -> Result<()> {
    let n = crate::checked_numel(&[rows, cols])?;
    check("x", n, x.len())?;
    check("out", n, out.len())?;
    check("gamma", cols, gamma.len())?;
    if cols == 0 {
        return Ok(());
    }
    if threads > 1 && n >= PAR_MIN_ELEMS {
        out.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .for_each(|(o, r)| norm_row(r, gamma, o, rms));
    } else {
        for (o, r) in out.chunks_mut(cols).zip(x.chunks(cols)) {
            norm_row(r, gamma, o, rms);
        }
    }
    Ok(())
}

/// Rotary embedding over heads of `head_dim`: `out[i] = x[i]·cos_j + x[i ^ 1]·sin_j` with
/// `j = i mod head_dim` and `table = [cos_0, sin_0, cos_1, sin_1, ...]` (`2·head_dim` values).
pub fn rotary(
    x: &[f32],
    table: &[f32],
    out: &mut [f32],
    head_dim: usize,
    threads: usize,
) -> Result<()> {
    check("out", x.len(), out.len())?;
    check("table", head_dim.saturating_mul(2), table.len())?;
    if x.is_empty() || head_dim == 0 {
        return Ok(());
    }
    let last = x.len() - 1;
    let f = |(i, o): (usize, &mut f32)| {
        let j = i % head_dim;
        let (c, s) = (table[2 * j], table[2 * j + 1]);
        *o = x[i] * c + x[(i ^ 1).min(last)] * s;
    };
    if threads > 1 && out.len() >= PAR_MIN_ELEMS {
        out.par_iter_mut().enumerate().for_each(f);
    } else {
        out.iter_mut().enumerate().for_each(f);
    }
    Ok(())
}

/// Residual addition `out = a + b`.
pub fn residual_add(a: &[f32], b: &[f32], out: &mut [f32], threads: usize) -> Result<()> {
    check("b", a.len(), b.len())?;
    check("out", a.len(), out.len())?;
    map2(out, a, b, threads, |x, y| x + y);
    Ok(())
}

/// SwiGLU gate `out = SiLU(g) · u = g / (1 + e^−g) · u`.
pub fn swiglu(g: &[f32], u: &[f32], out: &mut [f32], threads: usize) -> Result<()> {
    check("u", g.len(), u.len())?;
    check("out", g.len(), out.len())?;
    map2(out, g, u, threads, |g, u| g / (1.0 + (-g).exp()) * u);
    Ok(())
}

/// GELU, tanh form: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu(x: &[f32], out: &mut [f32], threads: usize) -> Result<()> {
    check("out", x.len(), out.len())?;
    let f = |(o, v): (&mut f32, &f32)| {
        let v = *v;
        *o = 0.5 * v * (1.0 + (0.797_884_6 * (v + 0.044715 * v * v * v)).tanh());
    };
    if threads > 1 && out.len() >= PAR_MIN_ELEMS {
        out.par_iter_mut().zip(x.par_iter()).for_each(f);
    } else {
        out.iter_mut().zip(x.iter()).for_each(f);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_values() {
        // LayerNorm of [1, 3]: mean 2, var 1, out = (x − 2)/sqrt(1 + 1e-5)·γ ≈ [−1, 1]·[2, 1].
        let mut out = [0.0f32; 2];
        norm_rows(&[1.0, 3.0], &[2.0, 1.0], &mut out, 1, 2, false, 1).unwrap();
        assert!(
            (out[0] + 2.0).abs() < 1e-4 && (out[1] - 1.0).abs() < 1e-4,
            "{out:?}"
        );
        // SiLU(0)·5 = 0; SiLU(large)·2 ≈ 2·large.
        let mut o = [0.0f32; 2];
        swiglu(&[0.0, 20.0], &[5.0, 2.0], &mut o, 1).unwrap();
        assert_eq!(o[0], 0.0);
        assert!((o[1] - 40.0).abs() < 1e-3);
        // GELU(0) = 0, GELU(3) ≈ 2.9964 (tanh form).
        gelu(&[0.0, 3.0], &mut o, 1).unwrap();
        assert_eq!(o[0], 0.0);
        assert!((o[1] - 2.996_36).abs() < 1e-4, "{o:?}");
        // Rotary with cos = 1, sin = 0 is the identity; with cos = 0, sin = 1 it swaps pairs.
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut r = [0.0f32; 4];
        rotary(&x, &[1.0, 0.0, 1.0, 0.0], &mut r, 2, 1).unwrap();
        assert_eq!(r, x);
        rotary(&x, &[0.0, 1.0, 0.0, 1.0], &mut r, 2, 1).unwrap();
        assert_eq!(r, [2.0, 1.0, 4.0, 3.0]);
        residual_add(&[1.0, 2.0], &[3.0, 4.0], &mut o, 1).unwrap();
        assert_eq!(o, [4.0, 6.0]);
    }

    #[test]
    fn parallel_equals_serial_and_lengths_are_checked() {
        let n = PAR_MIN_ELEMS * 2;
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 / 50.0 - 1.0).collect();
        let gamma: Vec<f32> = (0..256).map(|i| 1.0 + i as f32 / 256.0).collect();
        let (mut a, mut b) = (vec![0.0f32; n], vec![0.0f32; n]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| norm_rows(&x, &gamma, &mut a, n / 256, 256, true, 2))
            .unwrap();
        norm_rows(&x, &gamma, &mut b, n / 256, 256, true, 1).unwrap();
        assert_eq!(a, b);
        pool.install(|| gelu(&x, &mut a, 2)).unwrap();
        gelu(&x, &mut b, 1).unwrap();
        assert_eq!(a, b);
        let e = residual_add(&x, &x[1..], &mut a, 1).unwrap_err();
        assert!(matches!(e, KernelError::LengthMismatch { .. }), "{e}");
        let e = norm_rows(&x, &gamma[1..], &mut a, n / 256, 256, true, 1).unwrap_err();
        assert!(e.to_string().contains("gamma"), "{e}");
    }
}
