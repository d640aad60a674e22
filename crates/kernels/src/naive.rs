//! Naive textbook kernels, kept on purpose so that the verification sweeps
//! ([`crate::verify`]) can be pointed at them and shown to fail. They evaluate the formulas
//! literally in the input's own precision — `log(exp(a) + exp(b))`, `exp(x) / Σ exp(x)` —
//! so they overflow once an argument passes ≈ 88.7 (f32) or ≈ 709.8 (f64); the quantizer casts
//! through i32 and then `as u8`/`as i8`, which wraps instead of saturating, and rounds ties
//! away from zero. Do not use them for real work.

use crate::elementary::Shape2;
use crate::{check_len, KernelError};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A native float type whose own `exp`/`ln` the naive kernels use (f32, f64).
pub trait NativeFloat:
    sealed::Sealed
    + crate::Float
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Div<Output = Self>
{
    /// e^x in this precision.
    fn exp_(self) -> Self;
    /// ln x in this precision.
    fn ln_(self) -> Self;
    /// 2^x in this precision.
    fn exp2_(self) -> Self;
    /// log2 x in this precision.
    fn log2_(self) -> Self;
    /// 0.
    fn zero() -> Self;
}

macro_rules! native {
    ($t:ty) => {
        impl NativeFloat for $t {
            fn exp_(self) -> Self {
                self.exp()
            }
            fn ln_(self) -> Self {
                self.ln()
            }
            fn exp2_(self) -> Self {
                self.exp2()
            }
            fn log2_(self) -> Self {
                self.log2()
            }
            fn zero() -> Self {
                0.0
            }
        }
    };
}
native!(f32);
native!(f64);

/// Naive `ln(e^a + e^b)` in the input precision (overflows for large arguments).
pub fn logaddexp<T: NativeFloat>(a: T, b: T) -> T {
    (a.exp_() + b.exp_()).ln_()
}

/// Naive `log2(2^a + 2^b)` in the input precision.
pub fn logaddexp2<T: NativeFloat>(a: T, b: T) -> T {
    (a.exp2_() + b.exp2_()).log2_()
}

/// Naive elementwise logaddexp over slices of one length.
pub fn logaddexp_slice<T: NativeFloat>(a: &[T], b: &[T], out: &mut [T]) -> Result<(), KernelError> {
    check_len("b", a.len(), b.len())?;
    check_len("out", a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = logaddexp(x, y);
    }
    Ok(())
}

/// Naive elementwise logaddexp2 over slices of one length.
pub fn logaddexp2_slice<T: NativeFloat>(
    a: &[T],
    b: &[T],
    out: &mut [T],
) -> Result<(), KernelError> {
    check_len("b", a.len(), b.len())?;
    check_len("out", a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = logaddexp2(x, y);
    }
    Ok(())
}

fn sum_exp<T: NativeFloat>(row: &[T]) -> T {
    row.iter().fold(T::zero(), |acc, &x| acc + x.exp_())
}

/// Naive per-row `ln Σ e^x` (unshifted).
pub fn logsumexp<T: NativeFloat>(x: &[T], shape: Shape2, out: &mut [T]) -> Result<(), KernelError> {
    check_len("x", shape.numel()?, x.len())?;
    check_len("out", shape.rows, out.len())?;
    if shape.cols == 0 {
        out.fill(T::zero().ln_());
        return Ok(());
    }
    for (o, row) in out.iter_mut().zip(x.chunks(shape.cols)) {
        *o = sum_exp(row).ln_();
    }
    Ok(())
}

/// Naive per-row `e^x / Σ e^x` (unshifted).
pub fn softmax<T: NativeFloat>(x: &[T], shape: Shape2, out: &mut [T]) -> Result<(), KernelError> {
    let n = shape.numel()?;
    check_len("x", n, x.len())?;
    check_len("out", n, out.len())?;
    if shape.cols == 0 {
        return Ok(());
    }
    for (o, row) in out.chunks_mut(shape.cols).zip(x.chunks(shape.cols)) {
        let s = sum_exp(row);
        for (o, &v) in o.iter_mut().zip(row) {
            *o = v.exp_() / s;
        }
    }
    Ok(())
}

/// Naive per-row `x − ln Σ e^x` (unshifted).
pub fn log_softmax<T: NativeFloat>(
    x: &[T],
    shape: Shape2,
    out: &mut [T],
) -> Result<(), KernelError> {
    let n = shape.numel()?;
    check_len("x", n, x.len())?;
    check_len("out", n, out.len())?;
    if shape.cols == 0 {
        return Ok(());
    }
    for (o, row) in out.chunks_mut(shape.cols).zip(x.chunks(shape.cols)) {
        let l = sum_exp(row).ln_();
        for (o, &v) in o.iter_mut().zip(row) {
            *o = v - l;
        }
    }
    Ok(())
}

/// Naive u8 quantizer: `((x / scale).round() as i32 + zero_point) as u8` — rounds ties away
/// from zero and wraps out-of-range values (−1 → 255, 256 → 0).
pub fn quantize_u8_wrapping(x: f32, scale: f32, zero_point: i32) -> u8 {
    ((x / scale).round() as i32).wrapping_add(zero_point) as u8
}

/// Naive i8 quantizer: `((x / scale).round() as i32 + zero_point) as i8` (wraps, ties away).
pub fn quantize_i8_wrapping(x: f32, scale: f32, zero_point: i32) -> i8 {
    ((x / scale).round() as i32).wrapping_add(zero_point) as i8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naive_overflows_where_documented() {
        // e^89 > f32::MAX (3.4e38 = e^88.72), so the naive f32 form gives +inf.
        assert_eq!(logaddexp(89.0f32, 89.0), f32::INFINITY);
        // Small arguments are fine: ln(e^0 + e^0) = ln 2.
        assert!((logaddexp(0.0f32, 0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        // -1/1 = -1 → as u8 wraps to 255; 2.5 rounds away to 3.
        assert_eq!(quantize_u8_wrapping(-1.0, 1.0, 0), 255);
        assert_eq!(quantize_u8_wrapping(2.5, 1.0, 0), 3);
        assert_eq!(quantize_i8_wrapping(128.0, 1.0, 0), -128);
    }
}
