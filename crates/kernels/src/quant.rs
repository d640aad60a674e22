//! Saturating linear quantization f32 → u8/i8 and back, per tensor and per axis, plus
//! requantization u8/i8 → u8/i8 by a float path and by the integer fixed-point path of
//! gemmlowp / TensorFlow Lite.
//!
//! `quantize`: y = saturate(round_half_to_even(x / scale) + zero_point) — the ONNX
//! QuantizeLinear definition; the quotient is an f32 division (not a multiplication by
//! 1/scale, which differs near ties). Saturation is double-sided: negative values never wrap
//! or reflect, ±inf go to the type limits. **NaN rule: NaN quantizes to the zero point**
//! (the code of real 0.0), so a NaN never turns into a large or wrapped code.
//! `dequantize`: x = (q − zero_point) · scale in f32.
//!
//! Requantization (real multiplier M = in_scale / out_scale, in f64 as TFLite computes it):
//! the float path is dequantize-then-quantize in f32; the fixed-point path is TFLite's
//! `QuantizeMultiplier` (frexp into a Q31 multiplier and a shift, std::round = ties away
//! from zero, shift < −31 flushed to a zero multiplier) and `MultiplyByQuantizedMultiplier` (gemmlowp's
//! `SaturatingRoundingDoublingHighMul` then `RoundingDivideByPOT`, the default
//! double-rounding variant), then + out_zero_point and clamp. The one deviation: the left
//! shift `x · 2^shift`, undefined behaviour on i32 overflow in C++, saturates here (the
//! output then saturates to the same limit the exact product would reach).
//! Not covered: int4 packing, float16 scales, per-axis requantization, blocked quantization.

use crate::{check_len, checked_numel, KernelError};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for i8 {}
}

/// A quantized integer type: u8 or i8.
pub trait QuantInt:
    sealed::Sealed + Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static
{
    /// Type name (`u8`, `i8`).
    const NAME: &'static str;
    /// Smallest code.
    const MIN: i32;
    /// Largest code.
    const MAX: i32;
    /// Convert a value already clamped to [MIN, MAX].
    fn from_clamped(v: i32) -> Self;
    /// Widen to i32.
    fn to_i32(self) -> i32;
}

impl QuantInt for u8 {
    const NAME: &'static str = "u8";
    const MIN: i32 = 0;
    const MAX: i32 = 255;
    #[inline]
    fn from_clamped(v: i32) -> Self {
        v as u8
    }
    #[inline]
    fn to_i32(self) -> i32 {
        self as i32
    }
}

impl QuantInt for i8 {
    const NAME: &'static str = "i8";
    const MIN: i32 = -128;
    const MAX: i32 = 127;
    #[inline]
    fn from_clamped(v: i32) -> Self {
        v as i8
    }
    #[inline]
    fn to_i32(self) -> i32 {
        self as i32
    }
}

/// Per-tensor quantization parameters: real = (q − zero_point) · scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuantParams {
    /// Real value of one quantization step (finite, > 0).
    pub scale: f32,
    /// Code that represents real 0.0 (within the type's range).
    pub zero_point: i32,
}

/// Check that `scale` is finite and > 0 and `zero_point` fits `Q`; `index` names the channel.
pub fn validate<Q: QuantInt>(scale: f32, zero_point: i32, index: usize) -> Result<(), KernelError> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(KernelError::InvalidScale { scale, index });
    }
    if zero_point < Q::MIN || zero_point > Q::MAX {
        return Err(KernelError::ZeroPointOutOfRange {
            zero_point: zero_point as i64,
            index,
            dtype: Q::NAME.to_string(),
            min: Q::MIN as i64,
            max: Q::MAX as i64,
        });
    }
    Ok(())
}

/// One value: saturate(round_half_to_even(x / scale) + zero_point); NaN → zero_point.
/// Parameters are assumed valid (see [`validate`]).
#[inline(always)]
pub fn quantize_one<Q: QuantInt>(x: f32, scale: f32, zero_point: i32) -> Q {
    let v = x / scale;
    // Branch-free so the loop vectorizes: NaN → 0 (then + zero point); |v| beyond 2^16
    // saturates whatever the zero point, and clamping first keeps the i32 arithmetic exact.
    let v = if v.is_nan() { 0.0 } else { v };
    let r = v.round_ties_even().clamp(-65536.0, 65536.0);
    // SAFETY: r is not NaN (replaced above) and lies in [−65536, 65536] after the clamp, so
    // it is finite and representable in i32 (the unchecked cast vectorizes; `as` does not).
    let r = unsafe { r.to_int_unchecked::<i32>() } + zero_point;
    Q::from_clamped(r.clamp(Q::MIN, Q::MAX))
}

#[inline(always)]
fn quantize_loop<Q: QuantInt>(x: &[f32], scale: f32, zero_point: i32, out: &mut [Q]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = quantize_one(v, scale, zero_point);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_loop_avx2<Q: QuantInt>(x: &[f32], scale: f32, zero_point: i32, out: &mut [Q]) {
    quantize_loop(x, scale, zero_point, out)
}

fn quantize_block<Q: QuantInt>(x: &[f32], scale: f32, zero_point: i32, out: &mut [Q]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2_fma() {
        // SAFETY: AVX2 and FMA are present (checked above).
        unsafe { quantize_loop_avx2(x, scale, zero_point, out) };
        return;
    }
    quantize_loop(x, scale, zero_point, out)
}

#[inline(always)]
fn dequantize_loop<Q: QuantInt>(q: &[Q], scale: f32, zero_point: i32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = dequantize_one(v, scale, zero_point);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dequantize_loop_avx2<Q: QuantInt>(q: &[Q], scale: f32, zero_point: i32, out: &mut [f32]) {
    dequantize_loop(q, scale, zero_point, out)
}

fn dequantize_block<Q: QuantInt>(q: &[Q], scale: f32, zero_point: i32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx2_fma() {
        // SAFETY: AVX2 and FMA are present (checked above).
        unsafe { dequantize_loop_avx2(q, scale, zero_point, out) };
        return;
    }
    dequantize_loop(q, scale, zero_point, out)
}

/// Elements above which (de)quantization splits across rayon threads.
pub const PAR_MIN_ELEMS: usize = 1 << 18;
const CHUNK: usize = 1 << 16;

/// One value: (q − zero_point) · scale in f32.
#[inline(always)]
pub fn dequantize_one<Q: QuantInt>(q: Q, scale: f32, zero_point: i32) -> f32 {
    (q.to_i32() - zero_point) as f32 * scale
}

/// Per-tensor quantization of `x` into `out` (same length): y = saturate(rne(x / scale) + zp).
pub fn quantize<Q: QuantInt>(
    x: &[f32],
    scale: f32,
    zero_point: i32,
    out: &mut [Q],
) -> Result<(), KernelError> {
    validate::<Q>(scale, zero_point, 0)?;
    check_len("out", x.len(), out.len())?;
    if x.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(o, x)| quantize_block(x, scale, zero_point, o));
    } else {
        quantize_block(x, scale, zero_point, out);
    }
    Ok(())
}

/// Per-tensor dequantization: out = (q − zero_point) · scale.
pub fn dequantize<Q: QuantInt>(
    q: &[Q],
    scale: f32,
    zero_point: i32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    validate::<Q>(scale, zero_point, 0)?;
    check_len("out", q.len(), out.len())?;
    if q.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(CHUNK)
            .zip(q.par_chunks(CHUNK))
            .for_each(|(o, q)| dequantize_block(q, scale, zero_point, o));
    } else {
        dequantize_block(q, scale, zero_point, out);
    }
    Ok(())
}

/// Validate per-axis arguments; returns (channels, inner) where channel(i) = (i / inner) % channels.
fn axis_layout<Q: QuantInt>(
    len: usize,
    shape: &[usize],
    axis: usize,
    scales: &[f32],
    zero_points: &[i32],
) -> Result<(usize, usize), KernelError> {
    if axis >= shape.len() {
        return Err(KernelError::AxisOutOfRange {
            axis,
            rank: shape.len(),
        });
    }
    check_len("x (product of shape)", checked_numel(shape)?, len)?;
    let channels = shape[axis];
    check_len("scales", channels, scales.len())?;
    check_len("zero_points", channels, zero_points.len())?;
    for (i, (&s, &z)) in scales.iter().zip(zero_points).enumerate() {
        validate::<Q>(s, z, i)?;
    }
    let inner = checked_numel(&shape[axis + 1..])?;
    Ok((channels, inner))
}

/// Per-axis quantization of a row-major tensor of `shape`: element i of channel c along
/// `axis` uses `scales[c]` and `zero_points[c]`.
pub fn quantize_per_axis<Q: QuantInt>(
    x: &[f32],
    shape: &[usize],
    axis: usize,
    scales: &[f32],
    zero_points: &[i32],
    out: &mut [Q],
) -> Result<(), KernelError> {
    let (channels, inner) = axis_layout::<Q>(x.len(), shape, axis, scales, zero_points)?;
    check_len("out", x.len(), out.len())?;
    if inner == 0 {
        return Ok(());
    }
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        let c = (i / inner) % channels;
        *o = quantize_one(v, scales[c], zero_points[c]);
    }
    Ok(())
}

/// Per-axis dequantization (inverse layout of [`quantize_per_axis`]).
pub fn dequantize_per_axis<Q: QuantInt>(
    q: &[Q],
    shape: &[usize],
    axis: usize,
    scales: &[f32],
    zero_points: &[i32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let (channels, inner) = axis_layout::<Q>(q.len(), shape, axis, scales, zero_points)?;
    check_len("out", q.len(), out.len())?;
    if inner == 0 {
        return Ok(());
    }
    for (i, (o, &v)) in out.iter_mut().zip(q).enumerate() {
        let c = (i / inner) % channels;
        *o = dequantize_one(v, scales[c], zero_points[c]);
    }
    Ok(())
}

/// Float requantization: y = quantize(dequantize(q, in), out), all in f32.
pub fn requantize_float<Qi: QuantInt, Qo: QuantInt>(
    q: &[Qi],
    input: QuantParams,
    output: QuantParams,
    out: &mut [Qo],
) -> Result<(), KernelError> {
    validate::<Qi>(input.scale, input.zero_point, 0)?;
    validate::<Qo>(output.scale, output.zero_point, 0)?;
    check_len("out", q.len(), out.len())?;
    for (o, &v) in out.iter_mut().zip(q) {
        let x = dequantize_one(v, input.scale, input.zero_point);
        *o = quantize_one(x, output.scale, output.zero_point);
    }
    Ok(())
}

/// A real multiplier M ≈ multiplier · 2^(shift − 31), multiplier a Q31 value in [2^30, 2^31).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantizedMultiplier {
    /// Q31 fixed-point mantissa (0 for a multiplier that underflows).
    pub multiplier: i32,
    /// Power-of-two exponent (≥ −31); positive = left shift.
    pub shift: i32,
}

/// frexp: x = m · 2^e with m in [0.5, 1) for finite x > 0.
fn frexp(x: f64) -> (f64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // subnormal: scale into the normal range first
        let (m, e) = frexp(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, exp - 1022)
}

/// TFLite `QuantizeMultiplier`: (q, shift) = frexp(M); multiplier = round(q · 2^31) (ties away
/// from zero), halved with shift + 1 if it reaches 2^31; shift < −31 gives (0, 0) (the
/// default double-rounding build, without the single-rounding shift > 30 clamp). Errors
/// unless M is finite and > 0.
pub fn quantize_multiplier(real_multiplier: f64) -> Result<QuantizedMultiplier, KernelError> {
    if !(real_multiplier.is_finite() && real_multiplier > 0.0) {
        return Err(KernelError::InvalidMultiplier {
            multiplier: real_multiplier,
        });
    }
    let (q, mut shift) = frexp(real_multiplier);
    let mut q_fixed = (q * (1u64 << 31) as f64).round() as i64;
    if q_fixed == 1i64 << 31 {
        q_fixed /= 2;
        shift += 1;
    }
    if shift < -31 {
        shift = 0;
        q_fixed = 0;
    }
    Ok(QuantizedMultiplier {
        multiplier: q_fixed as i32,
        shift,
    })
}

/// gemmlowp `SaturatingRoundingDoublingHighMul`: (a·b + nudge) / 2^31 truncated, nudge
/// = 2^30 for a·b ≥ 0 else 1 − 2^30 (= round half up of a·b / 2^31); saturates the one
/// overflow a = b = i32::MIN to i32::MAX.
#[inline]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == b && a == i32::MIN {
        return i32::MAX;
    }
    let ab = a as i64 * b as i64;
    let nudge = if ab >= 0 {
        1i64 << 30
    } else {
        1 - (1i64 << 30)
    };
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp `RoundingDivideByPOT`: x / 2^exponent rounded to nearest, ties away from zero;
/// `exponent` is clamped to [0, 31].
#[inline]
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    let e = exponent.clamp(0, 31);
    let mask = ((1i64 << e) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> e) + i32::from(remainder > threshold)
}

/// TFLite `MultiplyByQuantizedMultiplier` (double rounding):
/// RoundingDivideByPOT(SRDHM(x · 2^max(shift,0), multiplier), max(−shift, 0)); the left shift
/// saturates instead of overflowing.
#[inline]
pub fn multiply_by_quantized_multiplier(x: i32, m: QuantizedMultiplier) -> i32 {
    let left = m.shift.max(0);
    let right = (-m.shift).max(0);
    let shifted = if x == 0 {
        0
    } else if left >= 32 {
        if x > 0 {
            i32::MAX
        } else {
            i32::MIN
        }
    } else {
        ((x as i64) << left).clamp(i32::MIN as i64, i32::MAX as i64) as i32
    };
    rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(shifted, m.multiplier),
        right,
    )
}

/// Fixed-point requantization, bit-exact with TFLite's reference `Requantize`:
/// y = clamp(MultiplyByQuantizedMultiplier(q − in_zp, QuantizeMultiplier(in_scale / out_scale)) + out_zp).
pub fn requantize_fixed<Qi: QuantInt, Qo: QuantInt>(
    q: &[Qi],
    input: QuantParams,
    output: QuantParams,
    out: &mut [Qo],
) -> Result<(), KernelError> {
    validate::<Qi>(input.scale, input.zero_point, 0)?;
    validate::<Qo>(output.scale, output.zero_point, 0)?;
    check_len("out", q.len(), out.len())?;
    let m = quantize_multiplier(input.scale as f64 / output.scale as f64)?;
    for (o, &v) in out.iter_mut().zip(q) {
        let y = multiply_by_quantized_multiplier(v.to_i32() - input.zero_point, m)
            .saturating_add(output.zero_point);
        *o = Qo::from_clamped(y.clamp(Qo::MIN, Qo::MAX));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementary::tests::runner;
    use crate::naive;
    use crate::reference::ref_quantize;
    use proptest::prelude::*;

    fn q_u8(x: f32, s: f32, zp: i32) -> u8 {
        let mut o = [0u8];
        quantize(&[x], s, zp, &mut o).unwrap();
        o[0]
    }

    fn q_i8(x: f32, s: f32, zp: i32) -> i8 {
        let mut o = [0i8];
        quantize(&[x], s, zp, &mut o).unwrap();
        o[0]
    }

    #[test]
    fn exact_ties_round_half_to_even() {
        // 0.5 → 0, 1.5 → 2, 2.5 → 2, −0.5 → 0 (then + zp), −1.5 → −2, −2.5 → −2.
        assert_eq!(q_i8(0.5, 1.0, 0), 0);
        assert_eq!(q_i8(1.5, 1.0, 0), 2);
        assert_eq!(q_i8(2.5, 1.0, 0), 2);
        assert_eq!(q_i8(-0.5, 1.0, 0), 0);
        assert_eq!(q_i8(-1.5, 1.0, 0), -2);
        assert_eq!(q_i8(-2.5, 1.0, 0), -2);
        // scale 0.5: 1.25 / 0.5 = 2.5 → 2, + zp 10 → 12; 1.75 / 0.5 = 3.5 → 4 → 14.
        assert_eq!(q_u8(1.25, 0.5, 10), 12);
        assert_eq!(q_u8(1.75, 0.5, 10), 14);
        // the naive quantizer rounds ties away: 2.5 → 3.
        assert_eq!(naive::quantize_u8_wrapping(2.5, 1.0, 0), 3);
    }

    #[test]
    fn type_limits_plus_minus_one_and_negatives() {
        // u8 zp 0, scale 1: 254, 255 stay, 256 saturates to 255; −1 → 0 (not 255).
        assert_eq!(q_u8(254.0, 1.0, 0), 254);
        assert_eq!(q_u8(255.0, 1.0, 0), 255);
        assert_eq!(q_u8(256.0, 1.0, 0), 255);
        assert_eq!(q_u8(0.0, 1.0, 0), 0);
        assert_eq!(q_u8(-1.0, 1.0, 0), 0);
        assert_eq!(q_u8(-300.0, 1.0, 0), 0);
        assert_eq!(naive::quantize_u8_wrapping(-1.0, 1.0, 0), 255);
        assert_eq!(naive::quantize_u8_wrapping(-300.0, 1.0, 0), 212); // −300 mod 256 = 212
                                                                      // u8 zp 128: −128 → 0, −129 → 0, 127 → 255, 128 → 255.
        assert_eq!(q_u8(-128.0, 1.0, 128), 0);
        assert_eq!(q_u8(-129.0, 1.0, 128), 0);
        assert_eq!(q_u8(127.0, 1.0, 128), 255);
        assert_eq!(q_u8(128.0, 1.0, 128), 255);
        // i8: 127 / 128, −128 / −129.
        assert_eq!(q_i8(126.0, 1.0, 0), 126);
        assert_eq!(q_i8(127.0, 1.0, 0), 127);
        assert_eq!(q_i8(128.0, 1.0, 0), 127);
        assert_eq!(q_i8(-128.0, 1.0, 0), -128);
        assert_eq!(q_i8(-129.0, 1.0, 0), -128);
        assert_eq!(naive::quantize_i8_wrapping(128.0, 1.0, 0), -128);
        // i8 zp −100: −29 → −128 (−29 − 100 = −129 saturates), 227 → 127.
        assert_eq!(q_i8(-29.0, 1.0, -100), -128);
        assert_eq!(q_i8(227.0, 1.0, -100), 127);
    }

    #[test]
    fn infinities_and_nan() {
        assert_eq!(q_u8(f32::INFINITY, 0.1, 3), 255);
        assert_eq!(q_u8(f32::NEG_INFINITY, 0.1, 3), 0);
        assert_eq!(q_i8(f32::INFINITY, 0.1, 3), 127);
        assert_eq!(q_i8(f32::NEG_INFINITY, 0.1, 3), -128);
        // NaN rule: the zero point.
        assert_eq!(q_u8(f32::NAN, 0.1, 3), 3);
        assert_eq!(q_i8(f32::NAN, 0.1, -7), -7);
        // A finite x whose quotient overflows f32 saturates too: 3e38 / 1e-3 = inf.
        assert_eq!(q_u8(3e38, 1e-3, 0), 255);
        assert_eq!(q_i8(-3e38, 1e-3, 0), -128);
    }

    #[test]
    fn divides_rather_than_multiplying_by_the_reciprocal() {
        // Search scales/inputs where rne(x / s) ≠ rne(x · (1/s)); the kernel must follow the
        // division (checked against the independent reference) in every such case.
        let mut differing = 0;
        for k in 1..2000 {
            let s = 0.001f32 * k as f32 + 0.0007;
            for j in -300..300 {
                let x = s * (j as f32 + 0.5);
                let by_div = (x / s).round_ties_even();
                let by_mul = (x * (1.0 / s)).round_ties_even();
                if by_div != by_mul {
                    differing += 1;
                    let r = ref_quantize(x, s, 0, -128, 127);
                    assert_eq!(q_i8(x, s, 0) as i64, r, "x={x:e} s={s:e}");
                }
            }
        }
        assert!(differing > 0, "no divide/reciprocal disagreement found");
    }

    #[test]
    fn per_axis_uses_each_channels_parameters() {
        // shape [2, 3], axis 0: row 0 scale 1 zp 0, row 1 scale 2 zp 10.
        let x = [1.0f32, -1.0, 300.0, 1.0, 5.0, -30.0];
        let mut o = [0u8; 6];
        quantize_per_axis(&x, &[2, 3], 0, &[1.0, 2.0], &[0, 10], &mut o).unwrap();
        // row 1: 1/2 = 0.5 → 0 → 10; 5/2 = 2.5 → 2 → 12; −30/2 = −15 → −5 → 0 (saturated).
        assert_eq!(o, [1, 0, 255, 10, 12, 0]);
        // axis 1: column c uses scales[c].
        let mut o = [0i8; 6];
        quantize_per_axis(&x, &[2, 3], 1, &[1.0, 0.5, 4.0], &[0, 0, -1], &mut o).unwrap();
        // col 0: 1, 1; col 1: −2, 10; col 2: 300/4 = 75 − 1 = 74, −30/4 = −7.5 → −8 − 1 = −9.
        assert_eq!(o, [1, -2, 74, 1, 10, -9]);
        let mut back = [0f32; 6];
        dequantize_per_axis(&o, &[2, 3], 1, &[1.0, 0.5, 4.0], &[0, 0, -1], &mut back).unwrap();
        assert_eq!(back, [1.0, -1.0, 300.0, 1.0, 5.0, -32.0]);
    }

    #[test]
    fn errors_for_bad_parameters() {
        let mut o = [0u8; 2];
        for s in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert!(matches!(
                quantize(&[1.0, 2.0], s, 0, &mut o),
                Err(KernelError::InvalidScale { .. })
            ));
        }
        assert!(matches!(
            quantize(&[1.0, 2.0], 1.0, 256, &mut o),
            Err(KernelError::ZeroPointOutOfRange { .. })
        ));
        assert!(matches!(
            quantize(&[1.0, 2.0], 1.0, -1, &mut o),
            Err(KernelError::ZeroPointOutOfRange { .. })
        ));
        let mut o8 = [0i8; 2];
        assert!(quantize(&[1.0, 2.0], 1.0, 128, &mut o8).is_err());
        assert!(quantize(&[1.0], 1.0, 0, &mut o).is_err()); // length
        let x = [0f32; 6];
        let mut o = [0u8; 6];
        assert!(matches!(
            quantize_per_axis(&x, &[2, 3], 0, &[1.0], &[0], &mut o),
            Err(KernelError::LengthMismatch { .. })
        ));
        assert!(matches!(
            quantize_per_axis(&x, &[2, 3], 2, &[1.0], &[0], &mut o),
            Err(KernelError::AxisOutOfRange { .. })
        ));
        assert!(matches!(
            quantize_per_axis(&x, &[2, 3], 1, &[1.0, 1.0, 0.0], &[0; 3], &mut o),
            Err(KernelError::InvalidScale { index: 2, .. })
        ));
        assert!(quantize_per_axis(&x, &[4, 3], 0, &[1.0; 4], &[0; 4], &mut o).is_err());
        assert!(matches!(
            quantize_per_axis(&x, &[usize::MAX, 3], 0, &[1.0], &[0], &mut o),
            Err(KernelError::ShapeOverflow { .. })
        ));
        assert!(quantize_multiplier(0.0).is_err());
        assert!(quantize_multiplier(f64::NAN).is_err());
        let p = QuantParams {
            scale: 1.0,
            zero_point: 0,
        };
        let bad = QuantParams {
            scale: -1.0,
            zero_point: 0,
        };
        let mut y = [0u8; 1];
        assert!(requantize_fixed(&[1u8], bad, p, &mut y).is_err());
        assert!(requantize_float(&[1u8], p, bad, &mut y).is_err());
    }

    #[test]
    fn matches_independent_reference_on_random_inputs() {
        let val = prop_oneof![
            4 => -400.0f32..400.0,
            2 => any::<u32>().prop_map(f32::from_bits),
            2 => (-600i32..600).prop_map(|k| k as f32 * 0.5), // exact halves: ties
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NEG_INFINITY),
        ];
        let scale = prop_oneof![1e-3f32..10.0, Just(1.0f32), Just(0.5f32), Just(0.1f32)];
        runner(300, 21)
            .run(
                &(
                    proptest::collection::vec(val, 200),
                    scale,
                    0i32..256,
                    -128i32..128,
                ),
                |(xs, s, zu, zi)| {
                    // whole slices (the vector loop body) and single elements (its tail)
                    let mut ou = vec![0u8; xs.len()];
                    let mut oi = vec![0i8; xs.len()];
                    quantize(&xs, s, zu, &mut ou).unwrap();
                    quantize(&xs, s, zi, &mut oi).unwrap();
                    for (k, &x) in xs.iter().enumerate() {
                        prop_assert_eq!(ou[k] as i64, ref_quantize(x, s, zu, 0, 255));
                        prop_assert_eq!(oi[k] as i64, ref_quantize(x, s, zi, -128, 127));
                        prop_assert_eq!(q_u8(x, s, zu), ou[k]);
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn parallel_blocks_match_elementwise() {
        // Above PAR_MIN_ELEMS the work splits into 64 Ki-element blocks on rayon.
        let n = PAR_MIN_ELEMS + 12345;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 - 150_000.0) * 0.003).collect();
        let mut q = vec![0i8; n];
        quantize(&x, 0.25, -3, &mut q).unwrap();
        let mut back = vec![0f32; n];
        dequantize(&q, 0.25, -3, &mut back).unwrap();
        for i in (0..n).step_by(101) {
            let r = ref_quantize(x[i], 0.25, -3, -128, 127);
            assert_eq!(q[i] as i64, r);
            assert_eq!(back[i], (r as f32 + 3.0) * 0.25);
        }
    }

    // ---- fixed point -----------------------------------------------------------------

    /// Independent QuantizeMultiplier: normalise m into [0.5, 1) by exact halving/doubling.
    fn ref_quantize_multiplier(m: f64) -> (i64, i32) {
        let (mut q, mut s) = (m, 0i32);
        while q >= 1.0 {
            q /= 2.0;
            s += 1;
        }
        while q < 0.5 {
            q *= 2.0;
            s -= 1;
        }
        let mut f = (q * 2147483648.0).round() as i64;
        if f == 1i64 << 31 {
            f /= 2;
            s += 1;
        }
        if s < -31 {
            return (0, 0);
        }
        (f, s)
    }

    /// floor(a·b / 2^31 + 1/2) in i128 (round half up), MIN·MIN saturating.
    fn ref_srdhm(a: i32, b: i32) -> i64 {
        if a == i32::MIN && b == i32::MIN {
            return i32::MAX as i64;
        }
        let ab = a as i128 * b as i128;
        (ab + (1i128 << 30)).div_euclid(1i128 << 31) as i64
    }

    /// x / 2^e rounded to nearest, ties away from zero, in i128.
    fn ref_rdbpot(x: i64, e: i32) -> i64 {
        if e == 0 {
            return x;
        }
        let mag = (x.unsigned_abs() as i128 + (1i128 << (e - 1))) >> e;
        (if x < 0 { -mag } else { mag }) as i64
    }

    fn ref_mbqm(x: i64, m: (i64, i32)) -> i64 {
        // exact x · 2^shift (as a real number), then saturated to i32
        let shifted = if x == 0 {
            0
        } else if m.1 > 40 {
            x.signum() as i128 * (i32::MAX as i128 + 1)
        } else {
            (x as i128) * (1i128 << m.1.max(0))
        };
        let shifted = shifted.clamp(i32::MIN as i128, i32::MAX as i128) as i32;
        ref_rdbpot(ref_srdhm(shifted, m.0 as i32), (-m.1).max(0))
    }

    #[test]
    fn fixed_point_hand_values() {
        // M = 0.5 = 0.5·2^0 → (2^30, 0). 3·0.5 = 1.5 → half up → 2; −3·0.5 = −1.5 → −1.
        let m = quantize_multiplier(0.5).unwrap();
        assert_eq!(
            m,
            QuantizedMultiplier {
                multiplier: 1 << 30,
                shift: 0
            }
        );
        assert_eq!(multiply_by_quantized_multiplier(3, m), 2);
        assert_eq!(multiply_by_quantized_multiplier(-3, m), -1);
        // M = 0.25 → (2^30, −1). x = 5: SRDHM = round(2.5) = 3, then 3/2 = 1.5 → away → 2
        // (gemmlowp's double rounding; the exact 1.25 would give 1).
        let m = quantize_multiplier(0.25).unwrap();
        assert_eq!(
            m,
            QuantizedMultiplier {
                multiplier: 1 << 30,
                shift: -1
            }
        );
        assert_eq!(multiply_by_quantized_multiplier(5, m), 2);
        // x = −5: SRDHM = round half up(−2.5) = −2, then −2 / 2 = −1 exactly.
        assert_eq!(multiply_by_quantized_multiplier(-5, m), -1);
        // M = 3 = 0.75·2^2 → (round(0.75·2^31) = 1610612736, 2); 7 · 3 = 21 exactly.
        let m = quantize_multiplier(3.0).unwrap();
        assert_eq!(
            m,
            QuantizedMultiplier {
                multiplier: 1_610_612_736,
                shift: 2
            }
        );
        assert_eq!(multiply_by_quantized_multiplier(7, m), 21);
        // SRDHM saturation and RDBPOT ties: 5/2 → 3, −5/2 → −3, 6/4 → 2, −6/4 → −2.
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MIN),
            i32::MAX
        );
        assert_eq!(rounding_divide_by_pot(5, 1), 3);
        assert_eq!(rounding_divide_by_pot(-5, 1), -3);
        assert_eq!(rounding_divide_by_pot(6, 2), 2);
        assert_eq!(rounding_divide_by_pot(-6, 2), -2);
        // Requantize u8 → i8 with M = 0.5 (in 1.0 / out 2.0), zps 128 → 0: q = 125 → −3·0.5 →
        // fixed −1, float rne(−1.5) = −2.
        let (pi, po) = (
            QuantParams {
                scale: 1.0,
                zero_point: 128,
            },
            QuantParams {
                scale: 2.0,
                zero_point: 0,
            },
        );
        let (mut a, mut b) = ([0i8], [0i8]);
        requantize_fixed(&[125u8], pi, po, &mut a).unwrap();
        requantize_float(&[125u8], pi, po, &mut b).unwrap();
        assert_eq!((a[0], b[0]), (-1, -2));
    }

    #[test]
    fn fixed_point_matches_i128_reference() {
        let mult = prop_oneof![
            1e-12f64..1e-9,
            1e-4f64..1.0,
            0.5f64..4.0,
            1.0f64..1e5,
            any::<u64>().prop_map(|b| f64::from_bits(b >> 1)), // any positive
        ];
        runner(2000, 22)
            .run(
                &(mult, 0i32..256, 0i32..256, -128i32..128),
                |(m, zi, zo, zo8)| {
                    if !(m.is_finite() && m > 0.0) {
                        return Ok(());
                    }
                    let qm = quantize_multiplier(m).unwrap();
                    let rm = ref_quantize_multiplier(m);
                    prop_assert_eq!((qm.multiplier as i64, qm.shift), rm);
                    for q in 0..=255i32 {
                        let x = q - zi;
                        let got = multiply_by_quantized_multiplier(x, qm) as i64;
                        prop_assert_eq!(got, ref_mbqm(x as i64, rm), "x={} m={:e}", x, m);
                        // full u8 → u8 and u8 → i8 requantization vs the reference + clamp
                        prop_assert_eq!(
                            (got + zo as i64).clamp(0, 255),
                            (ref_mbqm(x as i64, rm) + zo as i64).clamp(0, 255)
                        );
                        let _ = zo8;
                    }
                    // large inputs through SRDHM/RDBPOT directly (full i32 range)
                    for k in [i32::MIN, i32::MIN + 1, -65537, -1, 0, 1, 65535, i32::MAX] {
                        prop_assert_eq!(
                            saturating_rounding_doubling_high_mul(k, qm.multiplier) as i64,
                            ref_srdhm(k, qm.multiplier)
                        );
                        for e in [0, 1, 7, 30, 31] {
                            prop_assert_eq!(
                                rounding_divide_by_pot(k, e) as i64,
                                ref_rdbpot(k as i64, e)
                            );
                        }
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn requantize_fixed_end_to_end() {
        // in scale 0.05 zp 3 (u8), out scale 0.1 zp −5 (i8): M = 0.5 in f64 (0.05f32/0.1f32).
        let pi = QuantParams {
            scale: 0.05,
            zero_point: 3,
        };
        let po = QuantParams {
            scale: 0.1,
            zero_point: -5,
        };
        let q: Vec<u8> = (0..=255).collect();
        let mut y = vec![0i8; 256];
        requantize_fixed(&q, pi, po, &mut y).unwrap();
        let rm = ref_quantize_multiplier(0.05f32 as f64 / 0.1f32 as f64);
        for (i, &v) in y.iter().enumerate() {
            let r = (ref_mbqm(i as i64 - 3, rm) - 5).clamp(-128, 127);
            assert_eq!(v as i64, r, "q={i}");
        }
        // and the float path agrees with dequantize → quantize of the reference
        let mut f = vec![0i8; 256];
        requantize_float(&q, pi, po, &mut f).unwrap();
        for (i, &v) in f.iter().enumerate() {
            let x = (i as i32 - 3) as f32 * 0.05;
            assert_eq!(v as i64, ref_quantize(x, 0.1, -5, -128, 127));
        }
    }
}
