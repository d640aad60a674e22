//! Runtime-dispatched vector paths for the hot f32 loops (x86-64 with AVX2 + FMA, detected
//! once with `is_x86_feature_detected!`; everything else uses the portable scalar code).
//! The loops are written branch-free over slices and compiled inside
//! `#[target_feature(enable = "avx2,fma")]` functions, where LLVM vectorizes them.
//!
//! The f32 row kernels (softmax, log_softmax, logsumexp) use an 8-lane f32 exponential
//! written with explicit AVX2 intrinsics, `avx::exp_fast` (~20 instructions per 8 lanes:
//! clamp, x − m with its rounding error by Fast2Sum or two-sum chosen per row, Cody–Waite
//! reduction, degree-6 minimax polynomial; ≤ 0.88 ulp measured), for rows with |max| < 2^19,
//! and prefetch the next row meanwhile; other rows, the tiny-sum recount and the SiLU of the
//! fused RMSNorm+SwiGLU use `avx::exp_shifted` (degree-7 Taylor with an exact 1 + r,
//! ≤ 0.75 ulp, exact 0 below −104). Row sums are in f64.
//!
//! The f32 logaddexp slices evaluate in f64 lanes with our own polynomial `exp` and `log1p`
//! (also the f64-lane fallback of logsumexp):
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

// The polynomial and row helpers below serve the x86-64 vector paths; elsewhere the scalar
// kernels run and they are unused by design.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

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

/// 8×8 transpose of eight AVX vectors: on return `r[j]` holds column j of the rows given
/// (`r[i][j]` in, lane i of `r[j]` out): pairs interleaved, then quads, then the 128-bit
/// halves exchanged (24 shuffles). Used by the GEMM's packing and the graph executor's
/// depthwise convolutions.
///
/// # Safety
/// The CPU must have AVX2 ([`avx2_fma`]).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn transpose8x8(r: &mut [std::arch::x86_64::__m256; 8]) {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    r[0] = _mm256_permute2f128_ps::<0x20>(u0, u4);
    r[1] = _mm256_permute2f128_ps::<0x20>(u1, u5);
    r[2] = _mm256_permute2f128_ps::<0x20>(u2, u6);
    r[3] = _mm256_permute2f128_ps::<0x20>(u3, u7);
    r[4] = _mm256_permute2f128_ps::<0x31>(u0, u4);
    r[5] = _mm256_permute2f128_ps::<0x31>(u1, u5);
    r[6] = _mm256_permute2f128_ps::<0x31>(u2, u6);
    r[7] = _mm256_permute2f128_ps::<0x31>(u3, u7);
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

/// Row maximum of an all-finite f32 row; None for NaN/±inf/empty (used by the f64-lane
/// fallback of logsumexp).
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

/// ln(c + s) = ln c + log1p(s / c), accurate for tiny s.
#[inline(always)]
fn ln_count_plus(c: f64, s: f64) -> f64 {
    let lc = if c == 1.0 { 0.0 } else { c.ln() };
    lc + (s / c).ln_1p()
}

/// (max, count of maxima, Σ e^(x−m) over the rest) in f64 lanes for an all-finite f32 row,
/// using `scratch` (≥ row length) for the exponentials; None for NaN/±inf/empty rows. This is
/// the slow, 1e-14-accurate path logsumexp falls back to when its result cancels.
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lse_row_f64_avx2(row: &[f32], scratch: &mut [f64]) -> Option<(f64, f64, f64)> {
    row_parts_f64(row, scratch)
}

/// AVX2 + FMA row kernels with an 8-lane f32 exponential (see [`avx::exp_shifted`]).
#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    /// ln 2 = LN2_HI + LN2_LO; LN2_HI (0x3f317200) has 9 trailing zero bits, so n·LN2_HI is
    /// exact for |n| ≤ 2^9 and d − n·LN2_HI is exact (see `exp_shifted`).
    #[allow(clippy::excessive_precision)]
    const LN2_HI: f32 = 0.693_145_751_953_125; // 0x3f317200, exact
    #[allow(clippy::excessive_precision)]
    const LN2_LO: f32 = 1.428_606_765_330_187e-6;
    /// 1.5·2^23 + 151: adding it rounds an f32 in (−2^21, 2^21) to an integer n, and the low
    /// 9 bits of the sum's bit pattern hold n + 151 (= the biased exponent of 2^(n+24)).
    const MAGIC: f32 = 12_583_063.0;
    /// Below this shifted argument e^d < 2^−150 rounds to 0 in f32.
    const UNDER: f32 = -104.0;
    /// The results of [`exp_shifted`] are e^(x − m) times this (exactly).
    pub(super) const SCALE: f32 = 16_777_216.0; // 2^24

    /// 2^24·e^(x − m) for 8 lanes, for x ≤ m with m finite and x finite or −inf: exactly
    /// 2^24 times an f32 value within 1 ulp of e^(x − m) (tested), subnormal range included,
    /// so that one later multiplication by 2^−24·c rounds once.
    ///
    /// d = x − m is split exactly into hi + lo (two-sum); n = round(hi·log2 e) by the
    /// 1.5·2^23 trick; r = (hi − n·ln2_hi) + (lo − n·ln2_lo) where the first difference is
    /// exact (hi and n·ln2_hi are multiples of min(ulp(hi), 2^−15) and |r| < 0.35); e^r by the
    /// degree-7 Taylor polynomial (truncation ≤ 0.347⁸/8! ≈ 5e-9, < 0.1 ulp), evaluated as
    /// s + (e1 + rl + r²·q(r)) with 1 + rh = s + e1 exact; then times 2^(n+24), a normal
    /// number for n ≥ −150, so the product is exact. d < −104 gives 0 (e^−104 < 2^−150).
    #[inline(always)]
    pub(super) unsafe fn exp_shifted(x: __m256, m: __m256) -> __m256 {
        let nm = _mm256_sub_ps(_mm256_setzero_ps(), m);
        let d = _mm256_add_ps(x, nm);
        let bb = _mm256_sub_ps(d, x);
        let lo = _mm256_add_ps(
            _mm256_sub_ps(x, _mm256_sub_ps(d, bb)),
            _mm256_sub_ps(nm, bb),
        );
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(d, _mm256_set1_ps(UNDER));
        let dc = _mm256_max_ps(d, _mm256_set1_ps(UNDER));
        let lo = _mm256_andnot_ps(under, lo); // NaN when x − m overflowed to −inf
        let t = _mm256_fmadd_ps(
            dc,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(MAGIC),
        );
        let n = _mm256_sub_ps(t, _mm256_set1_ps(MAGIC));
        let rh = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), dc);
        let rl = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), lo);
        let r = _mm256_add_ps(rh, rl);
        let mut q = _mm256_set1_ps(1.0 / 5040.0);
        q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0 / 720.0));
        q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0 / 120.0));
        q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0 / 24.0));
        q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0 / 6.0));
        q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.5));
        // 1 + rh exactly as s + e1 (fast two-sum, |rh| < 1), so that p = s + (e1 + rl + r²q)
        // carries one rounding of note.
        let one = _mm256_set1_ps(1.0);
        let s = _mm256_add_ps(one, rh);
        let e1 = _mm256_add_ps(_mm256_sub_ps(one, s), rh);
        let r2 = _mm256_mul_ps(r, r);
        let tail = _mm256_add_ps(_mm256_fmadd_ps(r2, q, rl), e1);
        let p = _mm256_add_ps(s, tail);
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(t)));
        _mm256_andnot_ps(under, _mm256_mul_ps(p, scale))
    }

    /// Rows whose maximum is below this in magnitude take the fast exponential
    /// ([`exp_fast`]); m − 104.2 is then within 2^−5 of its exact value.
    pub(super) const FAST_MAX_ABS: f32 = 524_288.0; // 2^19

    /// Degree-6 polynomial for e^r on [−ln2/2 − 0.002, ln2/2 + 0.002] in the form
    /// 1 + r·(1 + r·(C2 + r·(C3 + …))); relative approximation error ≤ 5.0e-9 (< 0.09 f32 ulp)
    /// with these f32 coefficients (near-minimax fit of the relative error, Lawson iteration).
    pub(super) const C2: f32 = 0.499_999_94; // 0x3eff_fffe
    pub(super) const C3: f32 = 0.166_665_17; // 0x3e2a_aa46
    pub(super) const C4: f32 = 0.041_668_426; // 0x3d2a_ac83
    pub(super) const C5: f32 = 0.008_369_118; // 0x3c09_1ea0
    pub(super) const C6: f32 = 0.001_381_376_8; // 0x3ab5_0f50

    /// Two-sum variants of [`exp_fast`].
    pub(super) const TWO_SUM: u8 = 0;
    pub(super) const FAST_X: u8 = 1;
    pub(super) const FAST_M: u8 = 2;

    /// Which exact split of x − m a row allows, from its maximum m (finite, |m| < 2^19) and
    /// minimum: Fast2Sum(a, b) is exact when exponent(a) ≥ exponent(b). With m ≤ 0 every
    /// x ≤ m has |x| ≥ |m| ([`FAST_X`]); with m normal and positive, rows whose clamped
    /// minimum max(min, m − 104.2) exceeds −2^(exponent(m)+1) have every |x| below that
    /// power of two ([`FAST_M`]); other rows need the full two-sum.
    #[inline(always)]
    pub(super) fn sum_kind(m: f32, min: f32) -> u8 {
        if m <= 0.0 {
            FAST_X
        } else if m >= f32::MIN_POSITIVE
            && min.max(m - 104.2) > -f32::from_bits((m.to_bits() & 0x7f80_0000) + 0x0080_0000)
        {
            FAST_M
        } else {
            TWO_SUM
        }
    }

    /// Per-row constants of [`exp_fast`]: −m and the clamp bound m − 104.2.
    #[derive(Clone, Copy)]
    pub(super) struct Shift {
        nm: __m256,
        lb: __m256,
    }

    impl Shift {
        /// For a finite row maximum with |m| < [`FAST_MAX_ABS`].
        #[inline(always)]
        pub(super) unsafe fn new(m: f32) -> Self {
            Shift {
                nm: _mm256_set1_ps(-m),
                lb: _mm256_set1_ps(m - 104.2),
            }
        }
    }

    /// 2^24·e^(x − m) for 8 lanes, x ≤ m (x finite or −inf), |m| < 2^19, within 1 ulp of
    /// 2^24 times the exact value (tested) for x − m ≥ −104; smaller arguments (−inf
    /// included) give 2^24·e^(−104.2 ± 0.04) ≈ 9e-39 instead of 0 — below half the smallest
    /// subnormal once normalized by a sum ≥ 1, so softmax still rounds them to exactly 0, and
    /// negligible (< 6e-46 relative each) in the sums of log_softmax and logsumexp, whose
    /// tiny-sum and cancellation fallbacks use the exact-zero [`exp_shifted`].
    ///
    /// About 20 instructions per 8 lanes: x is clamped to m − 104.2 (so that n ≥ −150 and no
    /// lane is infinite), d = x − m with its rounding error lo by two-sum, n = round(d·log2 e),
    /// r = (d − n·ln2_hi) + (lo − n·ln2_lo) (first difference exact), e^r by the degree-6
    /// polynomial in Horner form, times 2^(n+24) through the exponent bits (exact).
    ///
    /// `K` picks how lo is found: [`TWO_SUM`] always works; [`FAST_X`] (Fast2Sum with x
    /// first) needs every clamped x at least as large in magnitude as m, [`FAST_M`] needs
    /// every clamped x below 2^(exponent(m)+1) in magnitude (see [`sum_kind`]).
    #[inline(always)]
    pub(super) unsafe fn exp_fast<const K: u8>(x: __m256, s: Shift) -> __m256 {
        let xc = _mm256_max_ps(x, s.lb);
        let d = _mm256_add_ps(xc, s.nm);
        let lo = match K {
            FAST_X => _mm256_sub_ps(s.nm, _mm256_sub_ps(d, xc)),
            FAST_M => _mm256_sub_ps(xc, _mm256_sub_ps(d, s.nm)),
            _ => {
                let bb = _mm256_sub_ps(d, xc);
                _mm256_add_ps(
                    _mm256_sub_ps(xc, _mm256_sub_ps(d, bb)),
                    _mm256_sub_ps(s.nm, bb),
                )
            }
        };
        let t = _mm256_fmadd_ps(
            d,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(MAGIC),
        );
        let n = _mm256_sub_ps(t, _mm256_set1_ps(MAGIC));
        let rh = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), d);
        let rl = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), lo);
        let r = _mm256_add_ps(rh, rl);
        // Estrin-style: C2 + C3·r + r²·(C4 + C5·r + C6·r²), then 1 + r·(1 + r·that).
        let r2 = _mm256_mul_ps(r, r);
        let a = _mm256_fmadd_ps(_mm256_set1_ps(C3), r, _mm256_set1_ps(C2));
        let b = _mm256_fmadd_ps(_mm256_set1_ps(C5), r, _mm256_set1_ps(C4));
        let b = _mm256_fmadd_ps(_mm256_set1_ps(C6), r2, b);
        let q = _mm256_fmadd_ps(b, r2, a);
        let one = _mm256_set1_ps(1.0);
        let q = _mm256_fmadd_ps(q, r, one);
        let p = _mm256_fmadd_ps(q, r, one);
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(t)));
        _mm256_mul_ps(p, scale)
    }

    /// Hint the cache line at `p` (any address; prefetches never fault).
    #[inline(always)]
    unsafe fn prefetch(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }

    /// softmax of one row with the fast exponential (|m| < 2^19): e^(x − m) stored in `out`
    /// and summed in f64, then scaled by 1/Σ; `next` (the following row, possibly outside
    /// the slice) is prefetched meanwhile.
    #[inline(always)]
    pub(super) unsafe fn softmax_row_fast<const K: u8>(
        row: &[f32],
        m: f32,
        out: &mut [f32],
        next: *const f32,
    ) {
        let sh = Shift::new(m);
        let (mut a0, mut a1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let n8 = row.len() / 8 * 8;
        let (xp, op) = (row.as_ptr(), out.as_mut_ptr());
        let mut i = 0;
        while i < n8 {
            if i % 16 == 0 {
                prefetch(next.wrapping_add(i));
            }
            let e = exp_fast::<K>(_mm256_loadu_ps(xp.add(i)), sh);
            _mm256_storeu_ps(op.add(i), e);
            acc_pd(&mut a0, &mut a1, e);
            i += 8;
        }
        if n8 < row.len() {
            let e = exp_fast::<K>(load_tail(&row[n8..]), sh);
            let mut b = [0.0f32; 8];
            _mm256_storeu_ps(b.as_mut_ptr(), e);
            out[n8..].copy_from_slice(&b[..row.len() - n8]);
            acc_pd(&mut a0, &mut a1, e);
        }
        let inv = (1.0 / hsum_pd(_mm256_add_pd(a0, a1))) as f32;
        scale_in_place(out, inv);
    }

    /// Σ e^(x − m) over a row in f64 with the fast exponential (|m| < 2^19), prefetching
    /// `next` meanwhile.
    #[inline(always)]
    pub(super) unsafe fn sum_exp_fast<const K: u8>(row: &[f32], m: f32, next: *const f32) -> f64 {
        let sh = Shift::new(m);
        let (mut a0, mut a1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let n8 = row.len() / 8 * 8;
        let xp = row.as_ptr();
        let mut i = 0;
        while i < n8 {
            if i % 16 == 0 {
                prefetch(next.wrapping_add(i));
            }
            acc_pd(
                &mut a0,
                &mut a1,
                exp_fast::<K>(_mm256_loadu_ps(xp.add(i)), sh),
            );
            i += 8;
        }
        if n8 < row.len() {
            acc_pd(&mut a0, &mut a1, exp_fast::<K>(load_tail(&row[n8..]), sh));
        }
        hsum_pd(_mm256_add_pd(a0, a1)) / SCALE as f64
    }

    /// Loads up to 8 elements, padding with −inf (whose exponential is 0).
    #[inline(always)]
    unsafe fn load_tail(s: &[f32]) -> __m256 {
        let mut b = [f32::NEG_INFINITY; 8];
        b[..s.len()].copy_from_slice(s);
        _mm256_loadu_ps(b.as_ptr())
    }

    #[inline(always)]
    unsafe fn hsum_pd(v: __m256d) -> f64 {
        let mut b = [0.0f64; 4];
        _mm256_storeu_pd(b.as_mut_ptr(), v);
        (b[0] + b[1]) + (b[2] + b[3])
    }

    #[inline(always)]
    unsafe fn hsum_ps(v: __m256) -> f32 {
        let mut b = [0.0f32; 8];
        _mm256_storeu_ps(b.as_mut_ptr(), v);
        b.iter().sum()
    }

    /// `out[i] *= inv` for every element, 8 lanes at a time (the normalization pass of
    /// softmax, over a row that is still in cache).
    #[inline(always)]
    unsafe fn scale_in_place(out: &mut [f32], inv: f32) {
        let n8 = out.len() / 8 * 8;
        let op = out.as_mut_ptr();
        let iv = _mm256_set1_ps(inv);
        let mut i = 0;
        while i < n8 {
            _mm256_storeu_ps(op.add(i), _mm256_mul_ps(_mm256_loadu_ps(op.add(i)), iv));
            i += 8;
        }
        for o in &mut out[n8..] {
            *o *= inv;
        }
    }

    /// Adds the 8 f32 lanes of `e` to two f64 accumulators.
    #[inline(always)]
    unsafe fn acc_pd(a0: &mut __m256d, a1: &mut __m256d, e: __m256) {
        *a0 = _mm256_add_pd(*a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        *a1 = _mm256_add_pd(*a1, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
    }

    /// (maximum, minimum) of a row when it holds no NaN and no +inf and is not all −inf;
    /// else None.
    #[inline(always)]
    pub(super) unsafe fn row_max(row: &[f32]) -> Option<(f32, f32)> {
        let mut m0 = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut m1 = m0;
        let mut n0 = _mm256_set1_ps(f32::INFINITY);
        let mut n1 = n0;
        let mut bad = _mm256_setzero_ps();
        let mut it = row.chunks_exact(16);
        for c in &mut it {
            let a = _mm256_loadu_ps(c.as_ptr());
            let b = _mm256_loadu_ps(c.as_ptr().add(8));
            m0 = _mm256_max_ps(m0, a);
            m1 = _mm256_max_ps(m1, b);
            n0 = _mm256_min_ps(n0, a);
            n1 = _mm256_min_ps(n1, b);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b));
        }
        let (mut m, mut mn) = (f32::NEG_INFINITY, f32::INFINITY);
        let mut nan = _mm256_movemask_ps(bad) != 0;
        let mut b = [0.0f32; 8];
        let mut c = [0.0f32; 8];
        _mm256_storeu_ps(b.as_mut_ptr(), _mm256_max_ps(m0, m1));
        _mm256_storeu_ps(c.as_mut_ptr(), _mm256_min_ps(n0, n1));
        for &v in b.iter().chain(it.remainder()) {
            m = if v > m { v } else { m };
            nan |= v.is_nan();
        }
        for &v in c.iter().chain(it.remainder()) {
            mn = if v < mn { v } else { mn };
        }
        if nan || !m.is_finite() {
            None
        } else {
            Some((m, mn))
        }
    }

    /// softmax of one row (max from `row_max`): e^(x − m) stored in `out`, summed in f64,
    /// then scaled by 1/Σ rounded to f32.
    #[inline(always)]
    pub(super) unsafe fn softmax_row(row: &[f32], m: f32, out: &mut [f32]) {
        let mv = _mm256_set1_ps(m);
        let (mut a0, mut a1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let n8 = row.len() / 8 * 8;
        let (xp, op) = (row.as_ptr(), out.as_mut_ptr());
        let mut i = 0;
        while i < n8 {
            let e = exp_shifted(_mm256_loadu_ps(xp.add(i)), mv);
            _mm256_storeu_ps(op.add(i), e);
            acc_pd(&mut a0, &mut a1, e);
            i += 8;
        }
        if n8 < row.len() {
            let e = exp_shifted(load_tail(&row[n8..]), mv);
            let mut b = [0.0f32; 8];
            _mm256_storeu_ps(b.as_mut_ptr(), e);
            out[n8..].copy_from_slice(&b[..row.len() - n8]);
            acc_pd(&mut a0, &mut a1, e);
        }
        // The stored values are 2^24·e, so 1/Σ(2^24·e) (≥ 2^−24/cols, a normal f32) both
        // normalizes and undoes the scale; each output is rounded once, subnormals included.
        let inv = (1.0 / hsum_pd(_mm256_add_pd(a0, a1))) as f32;
        scale_in_place(out, inv);
    }

    /// (count of exponentials equal to 1, Σ of the others in f64) of e^(x − m) over a row.
    #[inline(always)]
    pub(super) unsafe fn count_sum(row: &[f32], m: f32) -> (f64, f64) {
        let mv = _mm256_set1_ps(m);
        let one = _mm256_set1_ps(SCALE);
        let unit = _mm256_set1_ps(1.0);
        let (mut a0, mut a1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut cnt = _mm256_setzero_ps();
        let mut step = |e: __m256| {
            let is1 = _mm256_cmp_ps::<_CMP_EQ_OQ>(e, one);
            cnt = _mm256_add_ps(cnt, _mm256_and_ps(is1, unit));
            acc_pd(&mut a0, &mut a1, _mm256_andnot_ps(is1, e));
        };
        let mut it = row.chunks_exact(8);
        for c in &mut it {
            step(exp_shifted(_mm256_loadu_ps(c.as_ptr()), mv));
        }
        if !it.remainder().is_empty() {
            step(exp_shifted(load_tail(it.remainder()), mv));
        }
        let s = hsum_pd(_mm256_add_pd(a0, a1)) / SCALE as f64;
        (hsum_ps(cnt) as f64, s)
    }

    /// Σ e^(x − m) over a row, in f64 (f32 exponentials).
    #[inline(always)]
    pub(super) unsafe fn sum_exp(row: &[f32], m: f32) -> f64 {
        let mv = _mm256_set1_ps(m);
        let (mut a0, mut a1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut it = row.chunks_exact(8);
        for c in &mut it {
            acc_pd(
                &mut a0,
                &mut a1,
                exp_shifted(_mm256_loadu_ps(c.as_ptr()), mv),
            );
        }
        if !it.remainder().is_empty() {
            acc_pd(&mut a0, &mut a1, exp_shifted(load_tail(it.remainder()), mv));
        }
        hsum_pd(_mm256_add_pd(a0, a1)) / SCALE as f64
    }

    /// SiLU(g) = g / (1 + e^−g) for 8 lanes, via z = e^−|g| ≤ 1 (no overflow):
    /// g / (1 + z) for g ≥ 0, g·z / (1 + z) for g < 0.
    #[inline(always)]
    pub(super) unsafe fn silu8(g: __m256) -> __m256 {
        let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), g);
        // z·2^24 stays normal where z is subnormal, so g·z keeps its precision.
        let z24 = exp_shifted(_mm256_sub_ps(_mm256_setzero_ps(), a), _mm256_setzero_ps());
        let inv = _mm256_set1_ps(1.0 / SCALE);
        let z = _mm256_mul_ps(z24, inv);
        let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(g, _mm256_setzero_ps());
        let num = _mm256_blendv_ps(g, _mm256_mul_ps(_mm256_mul_ps(g, z24), inv), neg);
        _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0), z))
    }

    /// out = (x − m) − l in f64 lanes, rounded once to f32.
    #[inline(always)]
    pub(super) unsafe fn log_softmax_out(row: &[f32], m: f64, l: f64, out: &mut [f32]) {
        let mv = _mm256_set1_pd(m);
        let lv = _mm256_set1_pd(l);
        let n4 = row.len() / 4 * 4;
        let (xp, op) = (row.as_ptr(), out.as_mut_ptr());
        let mut i = 0;
        while i < n4 {
            let x = _mm256_cvtps_pd(_mm_loadu_ps(xp.add(i)));
            let y = _mm256_sub_pd(_mm256_sub_pd(x, mv), lv);
            _mm_storeu_ps(op.add(i), _mm256_cvtpd_ps(y));
            i += 4;
        }
        for (o, &x) in out[n4..].iter_mut().zip(&row[n4..]) {
            *o = ((x as f64 - m) - l) as f32;
        }
    }
}

/// Below this ln Σ e^(x−m) (Σ < 1 + 2^−20) the f32 row kernels recompute the sum with the
/// elements whose exponential is exactly 1 counted apart, so that a tiny remainder keeps its
/// relative accuracy.
const TINY_L: f64 = 1.0 / 1_048_576.0;

/// [`avx::sum_exp_fast`] with the two-sum variant `kind` (see [`avx::sum_kind`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sum_exp_fast(row: &[f32], m: f32, kind: u8, next: *const f32) -> f64 {
    match kind {
        avx::FAST_X => avx::sum_exp_fast::<{ avx::FAST_X }>(row, m, next),
        avx::FAST_M => avx::sum_exp_fast::<{ avx::FAST_M }>(row, m, next),
        _ => avx::sum_exp_fast::<{ avx::TWO_SUM }>(row, m, next),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_rows_avx2(x: &[f32], cols: usize, out: &mut [f32], log: bool) -> bool {
    for (row, o) in x.chunks(cols).zip(out.chunks_mut(cols)) {
        let Some((m, mn)) = avx::row_max(row) else {
            return false;
        };
        let fast = m.abs() < avx::FAST_MAX_ABS;
        let kind = avx::sum_kind(m, mn);
        let next = row.as_ptr().wrapping_add(cols);
        if log {
            // ln Σ from the plain f64 sum is accurate to ~2^−53 absolute, which is enough
            // unless l itself is tiny (one dominant element): then count the ones apart.
            let mut l = if fast {
                sum_exp_fast(row, m, kind, next)
            } else {
                avx::sum_exp(row, m)
            }
            .ln();
            if l < TINY_L {
                let (c, s) = avx::count_sum(row, m);
                l = ln_count_plus(c, s);
            }
            avx::log_softmax_out(row, m as f64, l, o);
        } else if fast {
            match kind {
                avx::FAST_X => avx::softmax_row_fast::<{ avx::FAST_X }>(row, m, o, next),
                avx::FAST_M => avx::softmax_row_fast::<{ avx::FAST_M }>(row, m, o, next),
                _ => avx::softmax_row_fast::<{ avx::TWO_SUM }>(row, m, o, next),
            }
        } else {
            avx::softmax_row(row, m, o);
        }
    }
    true
}

/// Vector softmax / log_softmax of f32 rows (8-lane f32 exponentials). Returns false
/// (possibly after writing some rows) when unavailable or when a row holds NaN or +inf or is
/// all −inf; the caller then runs the scalar kernel over the whole block.
pub(crate) fn softmax_f32(x: &[f32], cols: usize, out: &mut [f32], log: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() && cols > 0 {
        // SAFETY: AVX2 and FMA are present (checked above).
        return unsafe { softmax_rows_avx2(x, cols, out, log) };
    }
    let _ = (x, cols, out, log);
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lse_rows_avx2(x: &[f32], cols: usize, out: &mut [f32]) -> bool {
    let mut scratch: Vec<f64> = Vec::new();
    for (row, o) in x.chunks(cols).zip(out.iter_mut()) {
        let Some((m, mn)) = avx::row_max(row) else {
            return false;
        };
        let md = m as f64;
        let mut l = if m.abs() < avx::FAST_MAX_ABS {
            let next = row.as_ptr().wrapping_add(cols);
            sum_exp_fast(row, m, avx::sum_kind(m, mn), next)
        } else {
            avx::sum_exp(row, m)
        }
        .ln();
        if l < TINY_L {
            let (c, s) = avx::count_sum(row, m);
            l = ln_count_plus(c, s);
        }
        let mut y = md + l;
        // The f32 exponentials give l to ~1e-7 relative; when m < 0 cancels more than half of
        // l, redo the row with the 1e-14-accurate f64 lanes (and the band test below).
        if (md < 0.0 && y.abs() < l) || y.abs() < TINY_L {
            scratch.resize(cols, 0.0);
            let Some((md, c, s)) = lse_row_f64_avx2(row, &mut scratch) else {
                return false;
            };
            let l = ln_count_plus(c, s);
            y = md + l;
            if y.abs() < 1e-3 * l {
                return false; // cancellation band: the scalar path takes the block
            }
        }
        *o = y as f32;
    }
    true
}

/// Vector logsumexp of f32 rows (false → caller falls back to scalar for the block).
pub(crate) fn logsumexp_f32(x: &[f32], cols: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() && cols > 0 {
        // SAFETY: AVX2 and FMA are present (checked above).
        return unsafe { lse_rows_avx2(x, cols, out) };
    }
    let _ = (x, cols, out);
    false
}

/// SiLU in f64: in f32, e^−g overflows below g ≈ −88.7 and the result flushed to −0 where
/// the exact value g·e^g is still a normal f32 (down to g ≈ −91.8, where g + ln|g| = −87.3);
/// f64's exponential holds it (the aarch64 run under qemu, tools/aarch64_qemu.sh, found it).
#[inline(always)]
fn silu_scalar(g: f32) -> f32 {
    let x = g as f64;
    (x / (1.0 + (-x).exp())) as f32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(g: &[f32], u: Option<&[f32]>, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n8 = g.len() / 8 * 8;
    let mut i = 0;
    while i < n8 {
        let mut y = avx::silu8(_mm256_loadu_ps(g.as_ptr().add(i)));
        if let Some(u) = u {
            y = _mm256_mul_ps(y, _mm256_loadu_ps(u.as_ptr().add(i)));
        }
        _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
        i += 8;
    }
    for j in n8..g.len() {
        out[j] = silu_scalar(g[j]) * u.map_or(1.0, |u| u[j]);
    }
}

/// `out[i] = SiLU(g[i]) · u[i]` (or `SiLU(g[i])` when `u` is None) over equal-length slices,
/// SiLU(g) = g / (1 + e^−g); 8 f32 lanes with the AVX2 exponential where available (within
/// 4 ulp of the exact value, tested; results below 1e-37 in magnitude may flush to ±0), scalar
/// `f32::exp` otherwise.
pub fn silu_mul(g: &[f32], u: Option<&[f32]>, out: &mut [f32]) {
    let n = g
        .len()
        .min(out.len())
        .min(u.map_or(usize::MAX, |u| u.len()));
    let (g, out, u) = (&g[..n], &mut out[..n], u.map(|u| &u[..n]));
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: AVX2 and FMA are present (checked above); all slices hold n elements.
        unsafe { silu_mul_avx2(g, u, out) };
        return;
    }
    for j in 0..n {
        out[j] = silu_scalar(g[j]) * u.map_or(1.0, |u| u[j]);
    }
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

    /// ulp distance of an f32 result from an f64 value, in units of the f32 spacing at the
    /// reference (subnormal spacing 2^−149 below 2^−126).
    fn ulp_err(y: f32, r: f64) -> f64 {
        crate::reference::ulps32(y, Dd::from_f64(r))
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_shifted_within_one_ulp() {
        use std::arch::x86_64::*;
        if !avx2_fma() {
            return;
        }
        // Shifted arguments x − m over [−110, 0] (subnormal and zero results included), with
        // maxima of several magnitudes so that x − m is inexact in f32; reference: the f64
        // exp of the exact f64 difference (error ≤ 2^−53·|d| relative, far below f32 ulps).
        let mut worst = 0.0f64;
        let mut rng = tensorforge_core::rng::SplitMix64::new(0x1234_5678);
        let ms = [0.0f32, 1.0, -1.0, 37.5, -88.0, 1e4, -3e4, 1e-30];
        for k in 0..400_000 {
            let m = ms[k % ms.len()];
            let d = -(rng.next_f64() as f32) * 110.0;
            let x = [
                m + d,
                m + d * 0.5,
                m + d * 1e-3,
                m - 1e-7,
                m,
                m + d * 0.01,
                m - 103.9,
                m - 87.5,
            ];
            let mut y = [0.0f32; 8];
            // SAFETY: AVX2 + FMA checked above.
            unsafe {
                let e = avx::exp_shifted(_mm256_loadu_ps(x.as_ptr()), _mm256_set1_ps(m));
                let e = _mm256_mul_ps(e, _mm256_set1_ps(1.0 / avx::SCALE));
                _mm256_storeu_ps(y.as_mut_ptr(), e);
            }
            for j in 0..8 {
                let r = (x[j] as f64 - m as f64).exp();
                let e = ulp_err(y[j], r);
                assert!(e <= 1.0, "e^({} − {m}) = {} vs {r:e}: {e} ulp", x[j], y[j]);
                worst = worst.max(e);
            }
        }
        // Special shifts: −inf, overflowing differences, exact zero.
        let x = [
            f32::NEG_INFINITY,
            -f32::MAX,
            0.0,
            -1e-45,
            5.0,
            -200.0,
            f32::MIN_POSITIVE,
            0.0,
        ];
        let m = [0.0f32, f32::MAX, 0.0, 0.0, 5.0, 0.0, 0.0, 1e-45];
        let mut y = [0.0f32; 8];
        // SAFETY: AVX2 + FMA checked above.
        unsafe {
            for j in 0..8 {
                let e = avx::exp_shifted(_mm256_set1_ps(x[j]), _mm256_set1_ps(m[j]));
                let e = _mm256_mul_ps(e, _mm256_set1_ps(1.0 / avx::SCALE));
                _mm256_storeu_ps(y.as_mut_ptr(), e);
                let r = (x[j] as f64 - m[j] as f64).exp();
                assert!(
                    ulp_err(y[0], r) <= 1.0,
                    "{} − {}: {} vs {r:e}",
                    x[j],
                    m[j],
                    y[0]
                );
            }
        }
        println!("exp_shifted: max {worst:.3} ulp");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_fast_within_one_ulp() {
        use std::arch::x86_64::*;
        if !avx2_fma() {
            return;
        }
        // Shifted arguments over [−110, 0] for maxima of several magnitudes below 2^19, each
        // through every two-sum variant whose precondition (`avx::sum_kind`) the lane meets;
        // reference: f64 exp of the exact difference. Below −104 the result must be at most
        // 2^24·e^−104 (normalized to 0 by softmax).
        let mut worst = 0.0f64;
        let mut checked = 0usize;
        let mut rng = tensorforge_core::rng::SplitMix64::new(0x9e37_79b9);
        let ms = [
            0.0f32, 1.0, -1.0, 37.5, -88.0, 1e4, -3e4, 1e-30, 9.99, 8.0, 5e5, -5e5, 0.3,
        ];
        let under = (-104.0f64).exp() * avx::SCALE as f64;
        for k in 0..200_000 {
            let m = ms[k % ms.len()];
            let u = rng.next_f64() as f32;
            let d = -u * 110.0;
            let x = [
                m + d,
                m + d * 0.5,
                m + d * 1e-3,
                m - 1e-7,
                m,
                m + d * 0.01,
                -m * u, // |x| ≤ |m|: Fast2Sum with m first
                if k % 7 == 0 {
                    f32::NEG_INFINITY
                } else {
                    m - 103.9 * u
                },
            ];
            let x = x.map(|v| if v > m { m } else { v });
            // SAFETY: AVX2 + FMA checked above.
            let sh = unsafe { avx::Shift::new(m) };
            let kinds = [avx::TWO_SUM, avx::FAST_X, avx::FAST_M];
            for kind in kinds {
                let mn = x.iter().copied().fold(f32::INFINITY, f32::min);
                if kind != avx::TWO_SUM && avx::sum_kind(m, mn) != kind {
                    continue;
                }
                let mut y = [0.0f32; 8];
                // SAFETY: AVX2 + FMA checked above.
                unsafe {
                    let v = _mm256_loadu_ps(x.as_ptr());
                    let e = match kind {
                        avx::FAST_X => avx::exp_fast::<{ avx::FAST_X }>(v, sh),
                        avx::FAST_M => avx::exp_fast::<{ avx::FAST_M }>(v, sh),
                        _ => avx::exp_fast::<{ avx::TWO_SUM }>(v, sh),
                    };
                    _mm256_storeu_ps(y.as_mut_ptr(), e);
                }
                for j in 0..8 {
                    let dd = x[j] as f64 - m as f64;
                    if dd < -104.0 {
                        assert!((y[j] as f64) <= under, "e^({} − {m}) = {}", x[j], y[j]);
                        continue;
                    }
                    let r = dd.exp() * avx::SCALE as f64;
                    let e = ulp_err(y[j], r);
                    assert!(
                        e <= 1.0,
                        "e^({} − {m}) [{kind}] = {} vs {r:e}: {e} ulp",
                        x[j],
                        y[j]
                    );
                    worst = worst.max(e);
                    checked += 1;
                }
            }
        }
        assert!(checked >= 1_000_000, "{checked}");
        let bits = [avx::C2, avx::C3, avx::C4, avx::C5, avx::C6].map(f32::to_bits);
        assert_eq!(
            bits,
            [
                0x3eff_fffe,
                0x3e2a_aa46,
                0x3d2a_ac83,
                0x3c09_1ea0,
                0x3ab5_0f50
            ]
        );
        println!("exp_fast: max {worst:.3} ulp over {checked} arguments");
    }

    #[test]
    fn silu_mul_matches_scalar() {
        let g: Vec<f32> = (0..1003)
            .map(|i| (i as f32 - 501.0) * 0.37)
            .chain([
                f32::INFINITY,
                -0.0,
                1e-40,
                -1e-40,
                200.0,
                -200.0,
                88.0,
                -88.0,
            ])
            .collect();
        let u: Vec<f32> = (0..g.len()).map(|i| 1.0 + i as f32 * 1e-3).collect();
        let mut y = vec![0.0f32; g.len()];
        silu_mul(&g, Some(&u), &mut y);
        for i in 0..g.len() {
            let r = g[i] as f64 / (1.0 + (-(g[i] as f64)).exp()) * u[i] as f64;
            let e = ulp_err(y[i], r);
            let tiny = r.abs() < 1e-37 && (y[i] as f64 - r).abs() < 1e-37;
            assert!(
                e <= 4.0 || tiny,
                "silu({}) * {} = {} vs {r:e}: {e} ulp",
                g[i],
                u[i],
                y[i]
            );
        }
        silu_mul(&[f32::NAN], None, &mut y[..1]);
        assert!(y[0].is_nan());
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
