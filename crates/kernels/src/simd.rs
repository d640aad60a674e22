//! Runtime-dispatched vector paths for the hot f32 loops (x86-64 with AVX2 + FMA, detected
//! once with `is_x86_feature_detected!`; everything else uses the portable scalar code).
//! The loops are written branch-free over slices and compiled inside
//! `#[target_feature(enable = "avx2,fma")]` functions, where LLVM vectorizes them.
//!
//! f32 elementary kernels evaluate in f64 lanes with our own polynomial `exp` and `log1p`:
//! * `exp_poly`: x = k·ln2 + r (ln2 split in two parts, |r| ≤ ln2/2), Taylor polynomial of
//!   degree 11 for e^r (truncation ≤ 0.347¹²/12! ≈ 6.3e-15 relative) scaled by 2^k through the
//!   exponent bits; arguments below −708 return 0 (such terms are below f32 resolution
//!   relative to the row maximum). Domain [−708, 0]; bound: ≤ 1e-14 relative.
//! * `log1p_poly`: log1p(t) = 2·atanh(s), s = t/(2+t) ∈ [0, 1/3] for t ∈ [0, 1], series to
//!   s²¹ (truncation ≤ (1/3)²²/23 ≈ 1.4e-12 relative), no cancellation for tiny t.
//!
//! These errors are > 10⁴ times below an f32 ulp (6e-8), so the f32 results stay within
//! 1 ulp; special values, equal arguments and the cancellation band (result ≪ log term) are
//! recomputed by the scalar kernels. f64 inputs always use the scalar (libm) kernels.

#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

/// True when the AVX2 + FMA paths can run on this CPU (checked once).
pub fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// ln 2 split as in fdlibm: the high part has 32 trailing zero bits, so k·LN2_HI is exact.
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// e^x for x in [−708, 0] (the kernels only exponentiate shifted, non-positive arguments);
/// 0 below −708, 1 above 0 (see module doc for the error bound).
#[inline(always)]
pub(crate) fn exp_poly(x: f64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5·2^52: adding it rounds to an integer
    let xc = x.clamp(-708.0, 0.0);
    let kd = xc.mul_add(std::f64::consts::LOG2_E, MAGIC);
    let k = kd - MAGIC;
    let ki = (kd.to_bits() as i64).wrapping_sub(MAGIC.to_bits() as i64);
    let r = k.mul_add(-LN2_LO, k.mul_add(-LN2_HI, xc));
    // Horner for Σ r^n / n!, n = 0..11
    let mut p: f64 = 1.0 / 39_916_800.0;
    p = p.mul_add(r, 1.0 / 3_628_800.0);
    p = p.mul_add(r, 1.0 / 362_880.0);
    p = p.mul_add(r, 1.0 / 40_320.0);
    p = p.mul_add(r, 1.0 / 5_040.0);
    p = p.mul_add(r, 1.0 / 720.0);
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    let scale = f64::from_bits(((ki + 1023) as u64) << 52);
    if x < -708.0 {
        0.0
    } else {
        p * scale
    }
}

/// log1p(t) for t in [0, 1] as 2·atanh(t / (2 + t)).
#[inline(always)]
pub(crate) fn log1p_poly(t: f64) -> f64 {
    let s = t / (2.0 + t);
    let z = s * s;
    // Σ z^n / (2n+1), n = 0..10
    let mut p: f64 = 1.0 / 21.0;
    p = p.mul_add(z, 1.0 / 19.0);
    p = p.mul_add(z, 1.0 / 17.0);
    p = p.mul_add(z, 1.0 / 15.0);
    p = p.mul_add(z, 1.0 / 13.0);
    p = p.mul_add(z, 1.0 / 11.0);
    p = p.mul_add(z, 1.0 / 9.0);
    p = p.mul_add(z, 1.0 / 7.0);
    p = p.mul_add(z, 1.0 / 5.0);
    p = p.mul_add(z, 1.0 / 3.0);
    p = p.mul_add(z, 1.0);
    2.0 * s * p
}

#[inline(always)]
fn lae_lane(a: f32, b: f32, base2: bool) -> f32 {
    let (a, b) = (a as f64, b as f64);
    let hi = if a > b { a } else { b };
    let lo = if a > b { b } else { a };
    let d = lo - hi; // exact for f32 inputs unless exponents are > 29 apart
    let e = if base2 {
        exp_poly(d * std::f64::consts::LN_2)
    } else {
        exp_poly(d)
    };
    let t = log1p_poly(e);
    let t = if base2 {
        t * std::f64::consts::LOG2_E
    } else {
        t
    };
    (hi + t) as f32
}

/// Elements the vector pass cannot be trusted with: non-finite inputs, equal arguments, and
/// results below 1e-3 of the log term (there the 1.4e-12 polynomial error could reach
/// 0.02 f32 ulp and more).
#[inline(always)]
fn lae_needs_scalar(a: f32, b: f32, y: f32) -> bool {
    let hi = a.max(b);
    !(a.is_finite() && b.is_finite()) || a == b || (hi < 0.0 && y.abs() < 1e-3 * (y - hi))
}

#[inline(always)]
fn lae_generic(a: &[f32], b: &[f32], out: &mut [f32], base2: bool) {
    const CH: usize = 512;
    for ((o, a), b) in out.chunks_mut(CH).zip(a.chunks(CH)).zip(b.chunks(CH)) {
        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
            *o = lae_lane(x, y, base2);
        }
        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
            if lae_needs_scalar(x, y, *o) {
                *o = if base2 {
                    crate::elementary::logaddexp2(x, y)
                } else {
                    crate::elementary::logaddexp(x, y)
                };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lae_avx2(a: &[f32], b: &[f32], out: &mut [f32], base2: bool) {
    lae_generic(a, b, out, base2)
}

/// Vector logaddexp / logaddexp2 over equal-length f32 slices; false when unavailable.
pub(crate) fn logaddexp_f32(a: &[f32], b: &[f32], out: &mut [f32], base2: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        unsafe { lae_avx2(a, b, out, base2) };
        return true;
    }
    let _ = (a, b, out, base2);
    false
}

/// Row statistics for an all-finite f32 row: (max, count of elements whose f32 exponential
/// rounds to 1, Σ of the others), writing e^(x−m) rounded to f32 into `out`; None when the
/// row holds NaN or ±inf (the scalar path handles those policies).
#[inline(always)]
fn row_sum_f32(row: &[f32], out: &mut [f32]) -> Option<(f32, f64, f64)> {
    const L: usize = 8;
    let m = row_max_f32(row)?;
    let md = m as f64;
    for (o, &x) in out.iter_mut().zip(row) {
        *o = exp_poly(x as f64 - md) as f32;
    }
    // Elements whose exponential rounds to exactly 1 (the maxima, and values within ~6e-8 of
    // them) are counted, the rest summed, so that ln(c + s) keeps tiny s.
    let mut s = [0.0f64; L];
    let mut c = [0.0f64; L];
    let mut oc = out.chunks_exact(L);
    for o in &mut oc {
        for j in 0..L {
            let one = o[j] == 1.0;
            s[j] += if one { 0.0 } else { o[j] as f64 };
            c[j] += if one { 1.0 } else { 0.0 };
        }
    }
    let (mut ss, mut cc) = (0.0, 0.0);
    for j in 0..L {
        ss += s[j];
        cc += c[j];
    }
    for &o in oc.remainder() {
        if o == 1.0 {
            cc += 1.0;
        } else {
            ss += o as f64;
        }
    }
    Some((m, cc, ss))
}

/// ln(c + s) = ln c + log1p(s / c), accurate for tiny s.
#[inline(always)]
fn ln_count_plus(c: f64, s: f64) -> f64 {
    let lc = if c == 1.0 { 0.0 } else { c.ln() };
    lc + (s / c).ln_1p()
}

#[inline(always)]
fn softmax_rows_generic(x: &[f32], cols: usize, out: &mut [f32], log: bool) -> bool {
    let mut scratch = if log { vec![0.0f64; cols] } else { Vec::new() };
    for (row, o) in x.chunks(cols).zip(out.chunks_mut(cols)) {
        if log {
            let Some((md, c, s)) = row_parts_f64(row, &mut scratch) else {
                return false;
            };
            let l = ln_count_plus(c, s);
            for (o, &v) in o.iter_mut().zip(row) {
                *o = ((v as f64 - md) - l) as f32;
            }
        } else {
            let Some((_, c, s)) = row_sum_f32(row, o) else {
                return false;
            };
            let inv = 1.0 / (c + s);
            for o in o.iter_mut() {
                *o = (*o as f64 * inv) as f32;
            }
        }
    }
    true
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_rows_avx2(x: &[f32], cols: usize, out: &mut [f32], log: bool) -> bool {
    softmax_rows_generic(x, cols, out, log)
}

/// Vector softmax / log_softmax of finite f32 rows. Returns false (possibly after writing
/// some rows) when unavailable or when a row holds NaN/±inf; the caller then runs the scalar
/// kernel over the whole block.
pub(crate) fn softmax_f32(x: &[f32], cols: usize, out: &mut [f32], log: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() && cols > 0 {
        // SAFETY: AVX2 and FMA are present (checked above).
        return unsafe { softmax_rows_avx2(x, cols, out, log) };
    }
    let _ = (x, cols, out, log);
    false
}

/// Row maximum of an all-finite f32 row; None for NaN/±inf/empty.
#[inline(always)]
fn row_max_f32(row: &[f32]) -> Option<f32> {
    const L: usize = 8;
    let mut mx = [f32::NEG_INFINITY; L];
    let mut bad = [0u32; L];
    let mut it = row.chunks_exact(L);
    for c in &mut it {
        for j in 0..L {
            mx[j] = if c[j] > mx[j] { c[j] } else { mx[j] };
            bad[j] |= u32::from(!c[j].is_finite());
        }
    }
    let mut m = f32::NEG_INFINITY;
    let mut any_bad = false;
    for j in 0..L {
        m = if mx[j] > m { mx[j] } else { m };
        any_bad |= bad[j] != 0;
    }
    for &v in it.remainder() {
        m = if v > m { v } else { m };
        any_bad |= !v.is_finite();
    }
    if any_bad || row.is_empty() {
        None
    } else {
        Some(m)
    }
}

/// (max, count of maxima, Σ e^(x−m) over the rest) in f64 for an all-finite f32 row, using
/// `scratch` (≥ row length) for the exponentials; None for NaN/±inf/empty rows.
#[inline(always)]
fn row_parts_f64(row: &[f32], scratch: &mut [f64]) -> Option<(f64, f64, f64)> {
    const L: usize = 8;
    let md = row_max_f32(row)? as f64;
    let sc = &mut scratch[..row.len()];
    for (e, &v) in sc.iter_mut().zip(row) {
        *e = exp_poly(v as f64 - md);
    }
    // maxima (e = 1 exactly) counted, the rest summed in f64
    let mut s = [0.0f64; L];
    let mut c = [0.0f64; L];
    let mut it = sc.chunks_exact(L);
    for e in &mut it {
        for j in 0..L {
            let one = e[j] == 1.0;
            s[j] += if one { 0.0 } else { e[j] };
            c[j] += if one { 1.0 } else { 0.0 };
        }
    }
    let (mut ss, mut cc) = (0.0, 0.0);
    for j in 0..L {
        ss += s[j];
        cc += c[j];
    }
    for &e in it.remainder() {
        if e == 1.0 {
            cc += 1.0;
        } else {
            ss += e;
        }
    }
    Some((md, cc, ss))
}

#[inline(always)]
fn lse_rows_generic(x: &[f32], cols: usize, out: &mut [f32], scratch: &mut [f64]) -> bool {
    for (row, o) in x.chunks(cols).zip(out.iter_mut()) {
        let Some((md, cc, ss)) = row_parts_f64(row, scratch) else {
            return false;
        };
        let l = ln_count_plus(cc, ss);
        let y = md + l;
        if md < 0.0 && y.abs() < 1e-3 * l {
            return false; // cancellation band: the scalar path takes the block
        }
        *o = y as f32;
    }
    true
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lse_rows_avx2(x: &[f32], cols: usize, out: &mut [f32], scratch: &mut [f64]) -> bool {
    lse_rows_generic(x, cols, out, scratch)
}

/// Vector logsumexp of finite f32 rows (false → caller falls back to scalar for the block).
pub(crate) fn logsumexp_f32(x: &[f32], cols: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() && cols > 0 {
        let mut scratch = vec![0.0f64; cols];
        // SAFETY: AVX2 and FMA are present (checked above).
        return unsafe { lse_rows_avx2(x, cols, out, &mut scratch) };
    }
    let _ = (x, cols, out);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dd::{self, Dd};

    #[test]
    fn exp_poly_error_bound() {
        // Against the double-double exp over [−708, 0]: ≤ 1e-14 relative (module doc).
        let mut worst = 0.0f64;
        let mut x = -708.0;
        while x <= 0.0 {
            let r = dd::exp(Dd::from_f64(x));
            let rel = ((exp_poly(x) - r.hi) - r.lo).abs() / r.hi;
            worst = worst.max(rel);
            x += 0.00137;
        }
        assert!(worst < 1e-14, "worst {worst:e}");
        assert_eq!(exp_poly(-800.0), 0.0);
        assert_eq!(exp_poly(0.0), 1.0);
    }

    #[test]
    fn log1p_poly_error_bound() {
        // Against dd ln(1 + t) on [0, 1], including tiny t: ≤ 2e-12 relative.
        let mut worst = 0.0f64;
        for i in 0..=20000 {
            let t = if i < 1000 {
                1e-300 * 10f64.powi(i % 300)
            } else {
                (i - 1000) as f64 / 19000.0
            };
            if t == 0.0 {
                continue;
            }
            let r = dd::ln(Dd::sum(1.0, t));
            let rel = ((log1p_poly(t) - r.hi) - r.lo).abs() / r.hi;
            worst = worst.max(rel);
        }
        assert!(worst < 2e-12, "worst {worst:e}");
    }
}
