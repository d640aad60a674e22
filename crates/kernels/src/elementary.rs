//! Overflow-safe elementary kernels: `logaddexp`, `logaddexp2` (elementwise), and
//! `logsumexp`, `softmax`, `log_softmax` over the last axis of a 2-D row-major view.
//!
//! Every kernel uses the max-shift / `log1p` form and never exponentiates an unshifted
//! argument. All element types are evaluated in f64: f32, bf16 and f16 inputs are widened
//! exactly, computed in f64 and rounded once (plus a final rounding to the narrow type), so
//! their results are within 1 ulp of the exact value. The f64 kernels compute the shifted
//! difference `x − m` exactly as a two-term sum, sum with Neumaier compensation, and switch
//! to double-double arithmetic ([`crate::dd`]) in the one ill-conditioned case (a result near
//! zero that cancels `m < 0` against the log term). Not covered: other axes than the last
//! (transpose first), complex inputs, gradients.
//!
//! Special values (agreed by PyTorch, NumPy and JAX): `logaddexp(+inf, +inf) = +inf`,
//! `(−inf, −inf) = −inf`, `(+inf, −inf) = +inf`, `(−inf, x) = x`, NaN in → NaN out,
//! `(x, x) = x + ln 2` (`logaddexp2`: `x + 1`). `logsumexp` of an all-−inf (or empty) row is
//! −inf; a row holding +inf gives +inf; a NaN anywhere gives NaN.
//!
//! Fully masked rows: **softmax of an all-−inf row is all zeros** (PyTorch's masked "safe
//! softmax" policy; a row of probabilities that sums to 0 says "nothing attended") and
//! `log_softmax` of it is all −inf (the log of those zeros). A row holding +inf or NaN gives
//! an all-NaN softmax / log_softmax row, as NumPy and PyTorch do (inf − inf is undefined).

use crate::dd::{self, two_sum, Dd};
use crate::{check_len, KernelError};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::f64::consts::{LN_2, LOG2_E};

/// Work (elements) above which the slice and row kernels split across rayon threads.
pub const PAR_MIN_ELEMS: usize = 1 << 16;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// An element type the kernels accept: f32, f64, bf16, f16 (all evaluated in f64).
pub trait Float:
    sealed::Sealed + Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static
{
    /// Type name as NumPy spells it (`float32`, …).
    const NAME: &'static str;
    /// Relative size |result| / |log term| below which a cancelling result is recomputed in
    /// double-double: 0.75 for f64 (the f64 fast path would lose ulps), 1e-6 for the narrow
    /// types, whose f64 evaluation keeps ≥ 2^29·1e-6 ≫ 1 spare bits there.
    const CANCEL_BAND: f64;
    /// Exact widening to f64.
    fn to_f64(self) -> f64;
    /// Round an f64 to this type (to nearest, ties to even).
    fn from_f64(v: f64) -> Self;
    /// Vector elementwise logaddexp(2) when this type has one; false = not done.
    #[doc(hidden)]
    fn simd_binary(_a: &[Self], _b: &[Self], _out: &mut [Self], _base2: bool) -> bool {
        false
    }
    /// Vector row kernel when this type has one; false = not done (scalar must run).
    #[doc(hidden)]
    fn simd_rows(_x: &[Self], _cols: usize, _out: &mut [Self], _op: RowOp) -> bool {
        false
    }
}

/// Which row kernel (internal dispatch tag).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    /// softmax
    Softmax,
    /// log_softmax
    LogSoftmax,
    /// logsumexp (one output per row)
    LogSumExp,
}

impl Float for f32 {
    const CANCEL_BAND: f64 = 1e-6;
    const NAME: &'static str = "float32";
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn simd_binary(a: &[f32], b: &[f32], out: &mut [f32], base2: bool) -> bool {
        crate::simd::logaddexp_f32(a, b, out, base2)
    }
    fn simd_rows(x: &[f32], cols: usize, out: &mut [f32], op: RowOp) -> bool {
        match op {
            RowOp::Softmax => crate::simd::softmax_f32(x, cols, out, false),
            RowOp::LogSoftmax => crate::simd::softmax_f32(x, cols, out, true),
            RowOp::LogSumExp => crate::simd::logsumexp_f32(x, cols, out),
        }
    }
}

impl Float for f64 {
    const CANCEL_BAND: f64 = 0.75;
    const NAME: &'static str = "float64";
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl Float for half::bf16 {
    const CANCEL_BAND: f64 = 1e-6;
    const NAME: &'static str = "bfloat16";
    #[inline]
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
}

impl Float for half::f16 {
    const CANCEL_BAND: f64 = 1e-6;
    const NAME: &'static str = "float16";
    #[inline]
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}

/// A 2-D row-major view: `rows × cols` elements, reductions run over `cols` (the last axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape2 {
    /// Number of rows (independent reductions).
    pub rows: usize,
    /// Row length (the reduced axis).
    pub cols: usize,
}

impl Shape2 {
    /// A `rows × cols` view.
    pub fn new(rows: usize, cols: usize) -> Self {
        Shape2 { rows, cols }
    }

    /// rows · cols, or an error when it overflows.
    pub fn numel(&self) -> Result<usize, KernelError> {
        self.rows
            .checked_mul(self.cols)
            .ok_or(KernelError::ShapeOverflow {
                shape: vec![self.rows, self.cols],
            })
    }
}

// ---------------------------------------------------------------------------------------
// Scalar f64 cores.

/// e^(x − m) for x ≤ m, with x − m carried exactly as hi + lo: e^hi · (1 + lo).
#[inline]
fn exp_diff(x: f64, m: f64) -> f64 {
    let (d, dl) = two_sum(x, -m);
    if !d.is_finite() {
        return 0.0; // x = −inf or x − m < −f64::MAX: underflows to 0
    }
    let e = d.exp();
    e + e * dl
}

#[inline]
fn order(a: f64, b: f64) -> (f64, f64) {
    if a >= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// ln(e^m + Σ e^x) for the maximum m < 0 when the result is near 0 (the sum cancels against
/// m): double-double throughout; for |m| < 1e-11 via e^m − 1 = m + m²/2 + m³/6 and
/// ln(1 + u) = u − u²/2 + u³/3, so that tiny results keep their relative accuracy.
fn ln_near_one(m: Dd, rest: impl Iterator<Item = Dd>) -> Dd {
    let mut tail = Dd::from_f64(0.0);
    for x in rest {
        tail = tail.add(dd::exp(x));
    }
    if m.hi < -1e-11 {
        dd::ln(dd::exp(m).add(tail))
    } else {
        let m2 = m.mul(m);
        let em1 = m.add(m2.mul_f64(0.5)).add(m2.mul(m).div_f64(6.0));
        let u = em1.add(tail);
        let u2 = u.mul(u);
        u.sub(u2.mul_f64(0.5)).add(u2.mul(u).div_f64(3.0))
    }
}

/// f64 logaddexp: hi + log1p(e^(lo − hi)), double-double when the sum cancels near zero.
#[inline]
pub(crate) fn logaddexp_f64(a: f64, b: f64, band: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let (hi, lo) = order(a, b);
    if hi == lo {
        if hi.is_infinite() {
            return hi; // (+inf, +inf) = +inf, (−inf, −inf) = −inf
        }
        // x + ln 2 with ln 2 in double-double: x ≈ −ln 2 cancels.
        return Dd::from_f64(hi).add(dd::LN2).to_f64();
    }
    if hi == f64::INFINITY {
        return f64::INFINITY;
    }
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    let t = exp_diff(lo, hi).ln_1p();
    let y = hi + t;
    if hi < 0.0 && y.abs() < band * t {
        // e^hi + e^lo ≈ 1: evaluate ln(e^hi + e^lo) in double-double.
        return ln_near_one(Dd::from_f64(hi), std::iter::once(Dd::from_f64(lo))).to_f64();
    }
    y
}

/// f64 logaddexp2: hi + log2(1 + 2^(lo − hi)), double-double when the sum cancels near zero.
#[inline]
pub(crate) fn logaddexp2_f64(a: f64, b: f64, band: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let (hi, lo) = order(a, b);
    if hi == lo {
        return hi + 1.0;
    }
    if hi == f64::INFINITY {
        return f64::INFINITY;
    }
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    let (d, dl) = two_sum(lo, -hi);
    if !d.is_finite() {
        return hi;
    }
    let e = d.exp2();
    let e = e + e * (dl * LN_2);
    let t = e.ln_1p() * LOG2_E;
    let y = hi + t;
    if hi < 0.0 && y.abs() < band * t {
        let l = ln_near_one(dd::LN2.mul_f64(hi), std::iter::once(dd::LN2.mul_f64(lo)));
        return l.div(dd::LN2).to_f64();
    }
    y
}

/// Summary of one row before the log / normalisation.
enum RowStat {
    Nan,
    PosInf,
    /// Every element −inf, or the row is empty.
    AllNegInf,
    /// m = max, s = Σ over all but the first maximum of e^(x_i − m) (compensated).
    Finite {
        m: f64,
        s: f64,
    },
}

#[inline]
fn row_stat<T: Float>(row: &[T]) -> RowStat {
    let mut m = f64::NEG_INFINITY;
    let mut arg = 0usize;
    let mut nan = false;
    for (i, &x) in row.iter().enumerate() {
        let x = x.to_f64();
        nan |= x.is_nan();
        if x > m {
            m = x;
            arg = i;
        }
    }
    if nan {
        return RowStat::Nan;
    }
    if m == f64::INFINITY {
        return RowStat::PosInf;
    }
    if m == f64::NEG_INFINITY {
        return RowStat::AllNegInf;
    }
    // Neumaier summation.
    let (mut sum, mut comp) = (0.0f64, 0.0f64);
    for (i, &x) in row.iter().enumerate() {
        if i == arg {
            continue;
        }
        let e = exp_diff(x.to_f64(), m);
        let t = sum + e;
        if sum.abs() >= e.abs() {
            comp += (sum - t) + e;
        } else {
            comp += (e - t) + sum;
        }
        sum = t;
    }
    RowStat::Finite { m, s: sum + comp }
}

#[inline]
fn logsumexp_row<T: Float>(row: &[T]) -> f64 {
    let band = T::CANCEL_BAND;
    match row_stat(row) {
        RowStat::Nan => f64::NAN,
        RowStat::PosInf => f64::INFINITY,
        RowStat::AllNegInf => f64::NEG_INFINITY,
        RowStat::Finite { m, s, .. } => {
            let l = s.ln_1p();
            let y = m + l;
            if m < 0.0 && y.abs() < band * l {
                // Σ e^x ≈ 1 with m < 0: sum and log in double-double (m ≥ −ln n here).
                let first = row.iter().position(|x| x.to_f64() == m).unwrap_or(0);
                let rest = row
                    .iter()
                    .enumerate()
                    .filter(move |&(i, _)| i != first)
                    .map(|(_, x)| Dd::from_f64(x.to_f64()));
                return ln_near_one(Dd::from_f64(m), rest).to_f64();
            }
            y
        }
    }
}

#[inline]
fn softmax_row<T: Float>(row: &[T], out: &mut [T]) {
    match row_stat(row) {
        RowStat::Nan | RowStat::PosInf => out.fill(T::from_f64(f64::NAN)),
        RowStat::AllNegInf => out.fill(T::from_f64(0.0)),
        RowStat::Finite { m, s, .. } => {
            let z = 1.0 + s;
            for (o, &x) in out.iter_mut().zip(row) {
                *o = T::from_f64(exp_diff(x.to_f64(), m) / z);
            }
        }
    }
}

#[inline]
fn log_softmax_row<T: Float>(row: &[T], out: &mut [T]) {
    match row_stat(row) {
        RowStat::Nan | RowStat::PosInf => out.fill(T::from_f64(f64::NAN)),
        RowStat::AllNegInf => out.fill(T::from_f64(f64::NEG_INFINITY)),
        RowStat::Finite { m, s, .. } => {
            let l = s.ln_1p();
            for (o, &x) in out.iter_mut().zip(row) {
                let (d, dl) = two_sum(x.to_f64(), -m);
                let v = if d.is_finite() {
                    (d - l) + dl
                } else {
                    f64::NEG_INFINITY
                };
                *o = T::from_f64(v);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Public API.

/// log(e^a + e^b), computed as max + log1p(e^(min − max)).
#[inline]
pub fn logaddexp<T: Float>(a: T, b: T) -> T {
    T::from_f64(logaddexp_f64(a.to_f64(), b.to_f64(), T::CANCEL_BAND))
}

/// log2(2^a + 2^b), computed as max + log2(1 + 2^(min − max)).
#[inline]
pub fn logaddexp2<T: Float>(a: T, b: T) -> T {
    T::from_f64(logaddexp2_f64(a.to_f64(), b.to_f64(), T::CANCEL_BAND))
}

fn binary_slice<T: Float>(
    a: &[T],
    b: &[T],
    out: &mut [T],
    f: fn(T, T) -> T,
    base2: bool,
) -> Result<(), KernelError> {
    check_len("b", a.len(), b.len())?;
    check_len("out", a.len(), out.len())?;
    const CHUNK: usize = 8192;
    let run = |o: &mut [T], a: &[T], b: &[T]| {
        if !T::simd_binary(a, b, o, base2) {
            for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
    };
    if a.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(o, (a, b))| run(o, a, b));
    } else {
        run(out, a, b);
    }
    Ok(())
}

/// Elementwise `out[i] = logaddexp(a[i], b[i])`; all three slices must have one length.
pub fn logaddexp_slice<T: Float>(a: &[T], b: &[T], out: &mut [T]) -> Result<(), KernelError> {
    binary_slice(a, b, out, logaddexp::<T>, false)
}

/// Elementwise `out[i] = logaddexp2(a[i], b[i])`; all three slices must have one length.
pub fn logaddexp2_slice<T: Float>(a: &[T], b: &[T], out: &mut [T]) -> Result<(), KernelError> {
    binary_slice(a, b, out, logaddexp2::<T>, true)
}

/// Per row r: `out[r] = log Σ_j e^x[r,j] = m + log1p(Σ_{j≠argmax} e^(x[r,j] − m))`, m the row max.
/// `x` holds `shape.rows × shape.cols` elements, `out` holds `shape.rows`.
pub fn logsumexp<T: Float>(x: &[T], shape: Shape2, out: &mut [T]) -> Result<(), KernelError> {
    check_len("x", shape.numel()?, x.len())?;
    check_len("out", shape.rows, out.len())?;
    if shape.cols == 0 {
        out.fill(T::from_f64(f64::NEG_INFINITY));
        return Ok(());
    }
    let rows_per_block = (ROW_BLOCK_ELEMS / shape.cols).max(1);
    let run = |(o, x): (&mut [T], &[T])| {
        if !T::simd_rows(x, shape.cols, o, RowOp::LogSumExp) {
            for (o, row) in o.iter_mut().zip(x.chunks(shape.cols)) {
                *o = T::from_f64(logsumexp_row(row));
            }
        }
    };
    let blk = rows_per_block * shape.cols;
    if x.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(rows_per_block)
            .zip(x.par_chunks(blk))
            .for_each(run);
    } else {
        out.chunks_mut(rows_per_block)
            .zip(x.chunks(blk))
            .for_each(run);
    }
    Ok(())
}

/// Rows are processed in blocks of about this many elements (one rayon task each).
const ROW_BLOCK_ELEMS: usize = 16384;

fn row_map<T: Float>(
    x: &[T],
    shape: Shape2,
    out: &mut [T],
    f: fn(&[T], &mut [T]),
    op: RowOp,
) -> Result<(), KernelError> {
    let n = shape.numel()?;
    check_len("x", n, x.len())?;
    check_len("out", n, out.len())?;
    if shape.cols == 0 {
        return Ok(());
    }
    let cols = shape.cols;
    let blk = (ROW_BLOCK_ELEMS / cols).max(1) * cols;
    let run = |(o, x): (&mut [T], &[T])| {
        if !T::simd_rows(x, cols, o, op) {
            o.chunks_mut(cols)
                .zip(x.chunks(cols))
                .for_each(|(o, r)| f(r, o));
        }
    };
    if n >= PAR_MIN_ELEMS {
        out.par_chunks_mut(blk).zip(x.par_chunks(blk)).for_each(run);
    } else {
        out.chunks_mut(blk).zip(x.chunks(blk)).for_each(run);
    }
    Ok(())
}

/// Per row: `out[r,j] = e^(x[r,j] − m) / Σ_k e^(x[r,k] − m)`, m the row max. An all-−inf row
/// gives all zeros (masked-row policy); a row with +inf or NaN gives all NaN.
pub fn softmax<T: Float>(x: &[T], shape: Shape2, out: &mut [T]) -> Result<(), KernelError> {
    row_map(x, shape, out, softmax_row::<T>, RowOp::Softmax)
}

/// Per row: `out[r,j] = (x[r,j] − m) − log1p(Σ_{k≠argmax} e^(x[r,k] − m))`. An all-−inf row
/// gives all −inf; a row with +inf or NaN gives all NaN.
pub fn log_softmax<T: Float>(x: &[T], shape: Shape2, out: &mut [T]) -> Result<(), KernelError> {
    row_map(x, shape, out, log_softmax_row::<T>, RowOp::LogSoftmax)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::reference::*;
    use half::{bf16, f16};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use std::cell::Cell;

    const INF: f64 = f64::INFINITY;
    const NINF: f64 = f64::NEG_INFINITY;

    #[test]
    fn ulp_helpers_hand_values() {
        // f32 spacing at 1.0 is 2^-23; at 3.0 it is 2^-22; subnormal spacing 2^-149.
        assert_eq!(ulp_f32(1.0), 2f64.powi(-23));
        assert_eq!(ulp_f32(3.0), 2f64.powi(-22));
        assert_eq!(ulp_f32(1e-40), 2f64.powi(-149));
        assert_eq!(ulp_f64(1.0), f64::EPSILON);
        // 1 + 2^-23 is exactly one f32 ulp above 1.
        assert_eq!(ulps32(1.0 + f32::EPSILON, Dd::from_f64(1.0)), 1.0);
    }

    // ---- pinned special values and hand-checked results ---------------------------

    fn check_specials<T: Float>() {
        let f = |v: f64| T::from_f64(v);
        let g = |a: f64, b: f64| logaddexp(f(a), f(b)).to_f64();
        let g2 = |a: f64, b: f64| logaddexp2(f(a), f(b)).to_f64();
        let hs: [&dyn Fn(f64, f64) -> f64; 2] = [&g, &g2];
        for h in hs {
            assert_eq!(h(INF, INF), INF, "{}", T::NAME);
            assert_eq!(h(NINF, NINF), NINF);
            assert_eq!(h(INF, NINF), INF);
            assert_eq!(h(NINF, INF), INF);
            assert_eq!(h(NINF, 1.5), 1.5);
            assert_eq!(h(-2.25, NINF), -2.25);
            assert!(h(f64::NAN, 1.0).is_nan());
            assert!(h(1.0, f64::NAN).is_nan());
            assert!(h(f64::NAN, INF).is_nan());
            assert!(h(NINF, f64::NAN).is_nan());
        }
        // (x, x) = x + ln 2 and, for base 2, x + 1 (rounded to T).
        for x in [-3.0, 0.0, 0.5, 40.0] {
            let r = Dd::from_f64(x).add(dd::LN2).to_f64();
            assert_eq!(g(x, x), f(r).to_f64());
            assert_eq!(g2(x, x), f(x + 1.0).to_f64());
        }
        // Row specials.
        let row = [f(NINF), f(NINF), f(NINF)];
        let mut one = [f(0.0)];
        let mut three = [f(7.0); 3];
        logsumexp(&row, Shape2::new(1, 3), &mut one).unwrap();
        assert_eq!(one[0].to_f64(), NINF);
        softmax(&row, Shape2::new(1, 3), &mut three).unwrap();
        assert!(
            three.iter().all(|v| v.to_f64() == 0.0),
            "masked policy: zeros"
        );
        log_softmax(&row, Shape2::new(1, 3), &mut three).unwrap();
        assert!(three.iter().all(|v| v.to_f64() == NINF));
        let row = [f(1.0), f(INF), f(NINF)];
        logsumexp(&row, Shape2::new(1, 3), &mut one).unwrap();
        assert_eq!(one[0].to_f64(), INF);
        softmax(&row, Shape2::new(1, 3), &mut three).unwrap();
        assert!(three.iter().all(|v| v.to_f64().is_nan()));
        let row = [f(1.0), f(f64::NAN), f(INF)];
        logsumexp(&row, Shape2::new(1, 3), &mut one).unwrap();
        assert!(one[0].to_f64().is_nan());
        log_softmax(&row, Shape2::new(1, 3), &mut three).unwrap();
        assert!(three.iter().all(|v| v.to_f64().is_nan()));
        // Partly masked row: masked entries get exactly 0 / −inf, the rest renormalise:
        // softmax([0, −inf, 0]) = [0.5, 0, 0.5].
        let row = [f(0.0), f(NINF), f(0.0)];
        softmax(&row, Shape2::new(1, 3), &mut three).unwrap();
        assert_eq!(three.map(|v| v.to_f64()), [0.5, 0.0, 0.5]);
        log_softmax(&row, Shape2::new(1, 3), &mut three).unwrap();
        assert_eq!(three[1].to_f64(), NINF);
    }

    #[test]
    fn special_values_all_types() {
        check_specials::<f32>();
        check_specials::<f64>();
        check_specials::<bf16>();
        check_specials::<f16>();
    }

    #[test]
    fn hand_checked_values() {
        // ln(1 + e^-1) = 0.31326168751822286, so logaddexp(100, 99) = 100.31326168751822.
        assert_eq!(logaddexp(100.0f32, 99.0), 100.313_261_687_518_22_f64 as f32);
        // No overflow past 88.7 / 709.8: logaddexp(-1000, -1001) = -999.6867383124818.
        assert!((logaddexp(-1000.0f64, -1001.0) - -999.686_738_312_481_8).abs() < 2e-13);
        assert_eq!(
            logaddexp(1000.0f64, 1000.0),
            1000.0 + std::f64::consts::LN_2
        );
        assert_eq!(logaddexp(f32::MAX, f32::MAX), f32::MAX); // + ln 2 ≪ ulp
                                                             // log2(1 + 2^-10) = 0.001408194392809..., so logaddexp2(10, 0) = 10.001408194392809.
        assert!((logaddexp2(10.0f64, 0.0) - 10.001_408_194_392_809).abs() < 4e-15);
        // logsumexp([1000]*3) = 1000 + ln 3 = 1001.0986122886682.
        let mut o = [0.0f32];
        logsumexp(&[1000.0f32; 3], Shape2::new(1, 3), &mut o).unwrap();
        assert_eq!(o[0], 1_001.098_612_288_668_2_f64 as f32);
        // softmax([1000, 999]) = [1/(1+e^-1), e^-1/(1+e^-1)] = [0.7310585786300049, 0.2689414213699951].
        let mut p = [0.0f32; 2];
        softmax(&[1000.0f32, 999.0], Shape2::new(1, 2), &mut p).unwrap();
        assert_eq!(
            p,
            [
                0.731_058_578_630_004_9_f64 as f32,
                0.268_941_421_369_995_1_f64 as f32
            ]
        );
        // log_softmax([0, -1000]) = [−ln(1+e^-1000), −1000 − ...] = [0, −1000] in f64.
        let mut q = [1.0f64; 2];
        log_softmax(&[0.0f64, -1000.0], Shape2::new(1, 2), &mut q).unwrap();
        assert_eq!(q, [0.0, -1000.0]);
        // Cancellation region: e^-1 + e^b = 1 for b = ln(1 − e^-1) = −0.45867514538708193, so
        // with b = −0.458675 the exact result is ≈ e^b·1.4539e-7 ≈ 9.19e-8: f64 must stay
        // within 4 ulp of the double-double reference although the log term is ≈ 0.46.
        let (a, b) = (-1.0f64, -0.458675);
        let r = ref_logaddexp(a, b);
        assert!((r.to_f64() - 9.19e-8).abs() < 1e-10, "{r:?}");
        assert!(
            ulps64(logaddexp(a, b), r) <= 4.0,
            "{} vs {:?}",
            logaddexp(a, b),
            r
        );
        // Base 2: 2^-1 + 2^b = 1 at b = −1, so (−1, −1.000001) gives ≈ −7.2e-7 (hand:
        // log2(0.5 + 0.5·2^-1e-6) ≈ −0.5e-6).
        let r2 = ref_logaddexp2(-1.0, -1.000_001);
        assert!((r2.to_f64() + 0.5e-6).abs() < 1e-12, "{r2:?}");
        assert!(ulps64(logaddexp2(-1.0, -1.000_001), r2) <= 4.0);
    }

    #[test]
    fn errors_not_panics() {
        let mut o = [0.0f32; 2];
        assert!(matches!(
            logaddexp_slice(&[1.0f32; 2], &[1.0f32; 3], &mut o),
            Err(KernelError::LengthMismatch { .. })
        ));
        assert!(logsumexp(&[1.0f32; 4], Shape2::new(2, 3), &mut o).is_err());
        assert!(matches!(
            softmax(&[1.0f32; 4], Shape2::new(usize::MAX, 3), &mut o),
            Err(KernelError::ShapeOverflow { .. })
        ));
        // Empty rows: logsumexp over zero columns is −inf (log of an empty sum).
        logsumexp::<f32>(&[], Shape2::new(2, 0), &mut o).unwrap();
        assert_eq!(o, [f32::NEG_INFINITY; 2]);
    }

    #[test]
    fn parallel_path_matches_serial() {
        // Above PAR_MIN_ELEMS rows run on rayon; each row's result must not depend on that.
        let n = PAR_MIN_ELEMS * 2;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.37 - 150.0)
            .collect();
        let y: Vec<f32> = x.iter().rev().cloned().collect();
        let mut out = vec![0.0f32; n];
        logaddexp_slice(&x, &y, &mut out).unwrap();
        for i in (0..n).step_by(997) {
            assert_eq!(out[i], logaddexp(x[i], y[i]));
        }
        let s = Shape2::new(n / 64, 64);
        let mut sm = vec![0.0f32; n];
        softmax(&x, s, &mut sm).unwrap();
        let mut one = vec![0.0f32; 64];
        softmax(&x[64 * 5..64 * 6], Shape2::new(1, 64), &mut one).unwrap();
        assert_eq!(&sm[64 * 5..64 * 6], &one[..]);
    }

    // ---- seeded random ulp sweeps ---------------------------------------------------

    pub(crate) fn runner(cases: u32, seed: u8) -> TestRunner {
        let cfg = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        TestRunner::new_with_rng(cfg, TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]))
    }

    /// f32 values across magnitudes: any bit pattern (log-uniform magnitudes, ±inf, NaN),
    /// moderate values, values past the f32 exp overflow (|x| > 88.7), subnormals, the
    /// cancellation band [−3, 1], and −inf.
    fn f32_val() -> impl Strategy<Value = f32> {
        prop_oneof![
            3 => any::<u32>().prop_map(f32::from_bits),
            4 => -120.0f32..120.0,
            2 => (88.7f32..3000.0, any::<bool>()).prop_map(|(x, s)| if s { -x } else { x }),
            1 => (1u32..0x0080_0000, any::<bool>())
                .prop_map(|(b, s)| f32::from_bits(b | if s { 0x8000_0000 } else { 0 })),
            3 => -3.0f32..1.0,
            1 => Just(f32::NEG_INFINITY),
        ]
    }

    fn f32_pair() -> impl Strategy<Value = (f32, f32)> {
        prop_oneof![
            6 => (f32_val(), f32_val()),
            1 => f32_val().prop_map(|x| (x, x)),
            2 => (f32_val(), -0.01f32..0.01).prop_map(|(x, d)| (x, x + d)),
        ]
    }

    fn f64_val() -> impl Strategy<Value = f64> {
        prop_oneof![
            3 => any::<u64>().prop_map(f64::from_bits),
            4 => -800.0f64..800.0,
            2 => (709.8f64..5000.0, any::<bool>()).prop_map(|(x, s)| if s { -x } else { x }),
            1 => (1u64..(1u64 << 52), any::<bool>())
                .prop_map(|(b, s)| f64::from_bits(b | if s { 1u64 << 63 } else { 0 })),
            3 => -3.0f64..1.0,
            1 => Just(f64::NEG_INFINITY),
        ]
    }

    fn f64_pair() -> impl Strategy<Value = (f64, f64)> {
        prop_oneof![
            6 => (f64_val(), f64_val()),
            1 => f64_val().prop_map(|x| (x, x)),
            2 => (f64_val(), -0.01f64..0.01).prop_map(|(x, d)| (x, x + d)),
        ]
    }

    const MAX_ULP: f64 = 4.0;

    #[test]
    fn f32_binary_within_4_ulp_over_a_million_inputs() {
        let max1 = Cell::new(0.0f64);
        let max2 = Cell::new(0.0f64);
        let count = Cell::new(0usize);
        runner(1000, 11)
            .run(&proptest::collection::vec(f32_pair(), 1000), |v| {
                // Through the slice kernels (the vector path where the CPU has one) and the
                // scalar entry points.
                let xa: Vec<f32> = v.iter().map(|p| p.0).collect();
                let xb: Vec<f32> = v.iter().map(|p| p.1).collect();
                let mut y1 = vec![0.0f32; v.len()];
                let mut y2 = vec![0.0f32; v.len()];
                logaddexp_slice(&xa, &xb, &mut y1).unwrap();
                logaddexp2_slice(&xa, &xb, &mut y2).unwrap();
                for (i, (a, b)) in v.into_iter().enumerate() {
                    let e1 = ulps32(y1[i], ref_logaddexp(a as f64, b as f64));
                    let e2 = ulps32(y2[i], ref_logaddexp2(a as f64, b as f64));
                    let e1 = e1.max(ulps32(logaddexp(a, b), ref_logaddexp(a as f64, b as f64)));
                    let e2 = e2.max(ulps32(logaddexp2(a, b), ref_logaddexp2(a as f64, b as f64)));
                    prop_assert!(e1 <= MAX_ULP, "logaddexp({a:e}, {b:e}) off by {e1} ulp");
                    prop_assert!(e2 <= MAX_ULP, "logaddexp2({a:e}, {b:e}) off by {e2} ulp");
                    max1.set(max1.get().max(e1));
                    max2.set(max2.get().max(e2));
                    count.set(count.get() + 1);
                }
                Ok(())
            })
            .unwrap();
        assert!(count.get() >= 1_000_000);
        println!(
            "f32 over {} pairs: logaddexp max {:.3} ulp, logaddexp2 max {:.3} ulp",
            count.get(),
            max1.get(),
            max2.get()
        );
    }

    fn rows_strategy<S: Strategy>(val: S, rows: usize) -> impl Strategy<Value = Vec<Vec<S::Value>>>
    where
        S::Value: std::fmt::Debug,
    {
        proptest::collection::vec(proptest::collection::vec(val, 1..64), rows)
    }

    #[test]
    fn f32_rows_within_4_ulp_over_a_million_elements() {
        let maxes = [Cell::new(0.0f64), Cell::new(0.0f64), Cell::new(0.0f64)];
        let count = Cell::new(0usize);
        runner(1000, 12)
            .run(&rows_strategy(f32_val(), 32), |rows| {
                for row in rows {
                    let n = row.len();
                    let s = Shape2::new(1, n);
                    let r64: Vec<f64> = row.iter().map(|&x| x as f64).collect();
                    let mut l = [0.0f32];
                    let mut p = vec![0.0f32; n];
                    let mut q = vec![0.0f32; n];
                    logsumexp(&row, s, &mut l).unwrap();
                    softmax(&row, s, &mut p).unwrap();
                    log_softmax(&row, s, &mut q).unwrap();
                    let e0 = ulps32(l[0], ref_logsumexp(&r64));
                    prop_assert!(e0 <= MAX_ULP, "logsumexp {row:?}: {e0} ulp");
                    maxes[0].set(maxes[0].get().max(e0));
                    for (j, (rp, rq)) in ref_softmax(&r64)
                        .into_iter()
                        .zip(ref_log_softmax(&r64))
                        .enumerate()
                    {
                        let e1 = ulps32(p[j], rp);
                        let e2 = ulps32(q[j], rq);
                        prop_assert!(e1 <= MAX_ULP, "softmax {row:?}[{j}]: {e1} ulp");
                        prop_assert!(e2 <= MAX_ULP, "log_softmax {row:?}[{j}]: {e2} ulp");
                        maxes[1].set(maxes[1].get().max(e1));
                        maxes[2].set(maxes[2].get().max(e2));
                    }
                    count.set(count.get() + n);
                }
                Ok(())
            })
            .unwrap();
        assert!(count.get() >= 900_000, "{}", count.get());
        println!(
            "f32 rows over {} elements: logsumexp {:.3}, softmax {:.3}, log_softmax {:.3} ulp",
            count.get(),
            maxes[0].get(),
            maxes[1].get(),
            maxes[2].get()
        );
    }

    #[test]
    fn f64_within_4_ulp_of_double_double() {
        let maxes = [
            Cell::new(0.0f64),
            Cell::new(0.0f64),
            Cell::new(0.0f64),
            Cell::new(0.0f64),
            Cell::new(0.0f64),
        ];
        runner(200, 13)
            .run(&proptest::collection::vec(f64_pair(), 500), |v| {
                for (a, b) in v {
                    let e1 = ulps64(logaddexp(a, b), ref_logaddexp(a, b));
                    let e2 = ulps64(logaddexp2(a, b), ref_logaddexp2(a, b));
                    prop_assert!(e1 <= MAX_ULP, "logaddexp({a:e}, {b:e}) off by {e1} ulp");
                    prop_assert!(e2 <= MAX_ULP, "logaddexp2({a:e}, {b:e}) off by {e2} ulp");
                    maxes[0].set(maxes[0].get().max(e1));
                    maxes[1].set(maxes[1].get().max(e2));
                }
                Ok(())
            })
            .unwrap();
        runner(200, 14)
            .run(&rows_strategy(f64_val(), 8), |rows| {
                for row in rows {
                    let n = row.len();
                    let s = Shape2::new(1, n);
                    let mut l = [0.0f64];
                    let mut p = vec![0.0f64; n];
                    let mut q = vec![0.0f64; n];
                    logsumexp(&row, s, &mut l).unwrap();
                    softmax(&row, s, &mut p).unwrap();
                    log_softmax(&row, s, &mut q).unwrap();
                    let e0 = ulps64(l[0], ref_logsumexp(&row));
                    prop_assert!(e0 <= MAX_ULP, "logsumexp {row:?}: {e0} ulp");
                    maxes[2].set(maxes[2].get().max(e0));
                    for (j, (rp, rq)) in ref_softmax(&row)
                        .into_iter()
                        .zip(ref_log_softmax(&row))
                        .enumerate()
                    {
                        let e1 = ulps64(p[j], rp);
                        let e2 = ulps64(q[j], rq);
                        prop_assert!(e1 <= MAX_ULP, "softmax {row:?}[{j}]: {e1} ulp");
                        prop_assert!(e2 <= MAX_ULP, "log_softmax {row:?}[{j}]: {e2} ulp");
                        maxes[3].set(maxes[3].get().max(e1));
                        maxes[4].set(maxes[4].get().max(e2));
                    }
                }
                Ok(())
            })
            .unwrap();
        println!(
            "f64: logaddexp {:.3}, logaddexp2 {:.3}, logsumexp {:.3}, softmax {:.3}, log_softmax {:.3} ulp",
            maxes[0].get(),
            maxes[1].get(),
            maxes[2].get(),
            maxes[3].get(),
            maxes[4].get()
        );
    }

    #[test]
    fn half_types_round_the_f32_result() {
        // bf16/f16 results are the exact result rounded once to the narrow type.
        for (a, b) in [(1.0f32, 2.0f32), (-3.5, 0.25), (60.0, 59.5)] {
            let r = ref_logaddexp(a as f64, b as f64).to_f64();
            let y = logaddexp(bf16::from_f32(a), bf16::from_f32(b));
            assert_eq!(y, bf16::from_f64(r));
            let y = logaddexp(f16::from_f32(a), f16::from_f32(b));
            assert_eq!(y, f16::from_f64(r));
        }
    }
}
