//! Verification sweeps behind `tensorforge verify-overflow` and `verify-quant`: fixed case
//! lists at the edges of the number line (arguments past the exp overflow of f32/f64,
//! underflow, subnormals, ±inf, NaN, masked rows, cancellation; quantization ties, type limits
//! ±1, negative inputs for u8, ±inf, NaN) run through either the stable or the naive kernels
//! and judged against the double-double / exact-integer references of [`crate::reference`].
//! A case passes when the kernel under test is within [`MAX_ULP`] ulp of the reference (special
//! values must match exactly) or, for quantization, equals the reference code. The sweeps are
//! not random; the randomized million-input sweeps live in the unit tests.

use crate::dd::Dd;
use crate::elementary::{self, Shape2};
use crate::naive::{self, NativeFloat};
use crate::quant::{self, QuantInt};
use crate::reference::{self as r, ulps32, ulps64};
use serde::{Deserialize, Serialize};

/// Largest error, in ulp of the result type, that a kernel may show.
pub const MAX_ULP: f64 = 4.0;

/// Which implementation a sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelSet {
    /// The overflow-safe / saturating kernels of this crate.
    Stable,
    /// The textbook kernels of [`crate::naive`] (expected to fail).
    Naive,
}

/// One overflow case: both implementations' results, the reference, and the verdict on the
/// kernel under test. Values are printed with Rust's shortest round-trip formatting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverflowRow {
    /// What is computed, e.g. `logaddexp(89, 89)`.
    pub case: String,
    /// Element type (`float32`, `float64`).
    pub dtype: String,
    /// Result of the naive kernel.
    pub naive_result: String,
    /// Result of the stable kernel.
    pub stable_result: String,
    /// The double-double reference rounded to f64.
    pub reference: String,
    /// Error of the kernel under test in ulp of `dtype`; None when a special value mismatches.
    pub ulp_error: Option<f64>,
    /// ulp_error ≤ MAX_ULP (special values equal).
    pub pass: bool,
}

/// Result of [`verify_overflow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverflowReport {
    /// The kernels under test.
    pub kernels: KernelSet,
    /// The ulp bound applied.
    pub max_ulp_allowed: f64,
    /// One row per case.
    pub rows: Vec<OverflowRow>,
    /// Number of failing rows.
    pub failures: usize,
    /// failures == 0.
    pub passed: bool,
}

/// One quantization case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantRow {
    /// Real input (shortest round-trip formatting; `NaN`, `inf`).
    pub input: String,
    /// Target type (`u8`, `i8`).
    pub dtype: String,
    /// Scale used.
    pub scale: f32,
    /// Zero point used.
    pub zero_point: i32,
    /// What a naive wrapping cast gives (`as u8` through i32, ties away from zero).
    pub wrapping_result: i64,
    /// What the saturating kernel gives.
    pub saturating_result: i64,
    /// The exact ONNX QuantizeLinear code.
    pub reference: i64,
    /// The kernel under test equals the reference.
    pub pass: bool,
}

/// Result of [`verify_quant`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantReport {
    /// The kernels under test.
    pub kernels: KernelSet,
    /// One row per case.
    pub rows: Vec<QuantRow>,
    /// Number of failing rows.
    pub failures: usize,
    /// failures == 0.
    pub passed: bool,
}

/// Shortest round-trip text; scientific notation outside [1e-4, 1e16).
fn show<T: std::fmt::Display + std::fmt::LowerExp + Copy>(v: T, magnitude: f64) -> String {
    let a = magnitude.abs();
    if a == 0.0 || !a.is_finite() || (1e-4..1e16).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

fn fmt_f64(v: f64) -> String {
    show(v, v)
}

/// Native float plus its ulp judge against a dd reference.
trait Judge: NativeFloat + std::fmt::Display + std::fmt::LowerExp {
    fn ulps(y: Self, r: Dd) -> f64;
    fn lit(v: f64) -> Self;
}

impl Judge for f32 {
    fn ulps(y: f32, r: Dd) -> f64 {
        ulps32(y, r)
    }
    fn lit(v: f64) -> f32 {
        v as f32
    }
}

impl Judge for f64 {
    fn ulps(y: f64, r: Dd) -> f64 {
        ulps64(y, r)
    }
    fn lit(v: f64) -> f64 {
        v
    }
}

enum Op {
    Lae(f64, f64),
    Lae2(f64, f64),
    Lse(Vec<f64>),
    Softmax(Vec<f64>, usize),
    LogSoftmax(Vec<f64>, usize),
}

fn show_row(v: &[f64]) -> String {
    let s: Vec<String> = v.iter().map(|x| fmt_f64(*x)).collect();
    format!("[{}]", s.join(", "))
}

impl Op {
    fn name(&self) -> String {
        match self {
            Op::Lae(a, b) => format!("logaddexp({}, {})", fmt_f64(*a), fmt_f64(*b)),
            Op::Lae2(a, b) => format!("logaddexp2({}, {})", fmt_f64(*a), fmt_f64(*b)),
            Op::Lse(v) => format!("logsumexp({})", show_row(v)),
            Op::Softmax(v, j) => format!("softmax({})[{j}]", show_row(v)),
            Op::LogSoftmax(v, j) => format!("log_softmax({})[{j}]", show_row(v)),
        }
    }

    /// (naive, stable) results in T.
    fn run<T: Judge>(&self) -> (T, T) {
        let row = |v: &[f64]| v.iter().map(|&x| T::lit(x)).collect::<Vec<T>>();
        let nan = T::lit(f64::NAN);
        match self {
            Op::Lae(a, b) => (
                naive::logaddexp(T::lit(*a), T::lit(*b)),
                elementary::logaddexp(T::lit(*a), T::lit(*b)),
            ),
            Op::Lae2(a, b) => (
                naive::logaddexp2(T::lit(*a), T::lit(*b)),
                elementary::logaddexp2(T::lit(*a), T::lit(*b)),
            ),
            Op::Lse(v) => {
                let x = row(v);
                let s = Shape2::new(1, x.len());
                let (mut n, mut st) = ([nan], [nan]);
                let ok = naive::logsumexp(&x, s, &mut n).is_ok()
                    && elementary::logsumexp(&x, s, &mut st).is_ok();
                if ok {
                    (n[0], st[0])
                } else {
                    (nan, nan)
                }
            }
            Op::Softmax(v, j) | Op::LogSoftmax(v, j) => {
                let x = row(v);
                let s = Shape2::new(1, x.len());
                let (mut n, mut st) = (vec![nan; x.len()], vec![nan; x.len()]);
                let ok = if matches!(self, Op::Softmax(..)) {
                    naive::softmax(&x, s, &mut n).is_ok()
                        && elementary::softmax(&x, s, &mut st).is_ok()
                } else {
                    naive::log_softmax(&x, s, &mut n).is_ok()
                        && elementary::log_softmax(&x, s, &mut st).is_ok()
                };
                match (ok, n.get(*j), st.get(*j)) {
                    (true, Some(&a), Some(&b)) => (a, b),
                    _ => (nan, nan),
                }
            }
        }
    }

    /// The reference on the inputs as rounded to T.
    fn reference<T: Judge>(&self) -> Dd {
        let w = |x: f64| T::lit(x).to_f64();
        let wv = |v: &[f64]| v.iter().map(|&x| w(x)).collect::<Vec<f64>>();
        match self {
            Op::Lae(a, b) => r::ref_logaddexp(w(*a), w(*b)),
            Op::Lae2(a, b) => r::ref_logaddexp2(w(*a), w(*b)),
            Op::Lse(v) => r::ref_logsumexp(&wv(v)),
            Op::Softmax(v, j) => r::ref_softmax(&wv(v))
                .get(*j)
                .copied()
                .unwrap_or(Dd::from_f64(f64::NAN)),
            Op::LogSoftmax(v, j) => r::ref_log_softmax(&wv(v))
                .get(*j)
                .copied()
                .unwrap_or(Dd::from_f64(f64::NAN)),
        }
    }

    fn row<T: Judge>(&self, kernels: KernelSet) -> OverflowRow {
        let (n, s) = self.run::<T>();
        let refv = self.reference::<T>();
        let tested = match kernels {
            KernelSet::Stable => s,
            KernelSet::Naive => n,
        };
        let e = T::ulps(tested, refv);
        let ulp_error = if e.is_finite() { Some(e) } else { None };
        OverflowRow {
            case: self.name(),
            dtype: T::NAME.to_string(),
            naive_result: show(n, n.to_f64()),
            stable_result: show(s, s.to_f64()),
            reference: fmt_f64(refv.to_f64()),
            pass: e <= MAX_ULP,
            ulp_error,
        }
    }
}

const INF: f64 = f64::INFINITY;
const NINF: f64 = f64::NEG_INFINITY;
const NAN: f64 = f64::NAN;

fn f32_cases() -> Vec<Op> {
    vec![
        Op::Lae(0.0, 0.0),
        Op::Lae(88.0, 88.0),
        Op::Lae(89.0, 89.0),
        Op::Lae(100.0, 99.0),
        Op::Lae(1000.0, -1000.0),
        Op::Lae(-100.0, -100.0),
        Op::Lae(-104.0, -105.0),
        Op::Lae(1e-40, -1e-40),
        Op::Lae(-std::f64::consts::LN_2, -std::f64::consts::LN_2),
        Op::Lae(INF, INF),
        Op::Lae(NINF, NINF),
        Op::Lae(INF, NINF),
        Op::Lae(NINF, 3.0),
        Op::Lae(NAN, 1.0),
        Op::Lae2(128.0, 128.0),
        Op::Lae2(-150.0, -151.0),
        Op::Lae2(1000.0, 999.0),
        Op::Lse(vec![1000.0, 1000.0, 1000.0]),
        Op::Lse(vec![-1000.0, -1000.0, -1000.0]),
        Op::Lse(vec![100.0, 0.0, -100.0]),
        Op::Lse(vec![NINF, NINF, NINF]),
        Op::Lse(vec![INF, 1.0]),
        Op::Softmax(vec![1000.0, 999.0], 0),
        Op::Softmax(vec![-1000.0, -1001.0], 1),
        Op::Softmax(vec![NINF, NINF], 0),
        Op::Softmax(vec![90.0, 0.0], 1),
        Op::LogSoftmax(vec![1000.0, 0.0], 1),
        Op::LogSoftmax(vec![-200.0, -200.0], 0),
    ]
}

fn f64_cases() -> Vec<Op> {
    vec![
        Op::Lae(709.0, 709.0),
        Op::Lae(710.0, 710.0),
        Op::Lae(1000.0, 999.0),
        Op::Lae(-745.0, -746.0),
        Op::Lae(-1000.0, -1000.0),
        Op::Lae(-1.0, -0.458_675),
        Op::Lae(INF, NINF),
        Op::Lae(NAN, INF),
        Op::Lae2(1024.0, 1024.0),
        Op::Lae2(-1100.0, -1100.0),
        Op::Lse(vec![800.0, 800.0]),
        Op::Lse(vec![-800.0, -801.0, -802.0]),
        Op::Lse(vec![NINF, NINF]),
        Op::Softmax(vec![800.0, 0.0], 1),
        Op::Softmax(vec![NINF, NINF, NINF], 2),
        Op::LogSoftmax(vec![800.0, 799.0], 0),
    ]
}

/// Run the overflow sweep (f32 and f64 cases) on `kernels`.
pub fn verify_overflow(kernels: KernelSet) -> OverflowReport {
    let mut rows: Vec<OverflowRow> = f32_cases().iter().map(|c| c.row::<f32>(kernels)).collect();
    rows.extend(f64_cases().iter().map(|c| c.row::<f64>(kernels)));
    let failures = rows.iter().filter(|r| !r.pass).count();
    OverflowReport {
        kernels,
        max_ulp_allowed: MAX_ULP,
        rows,
        failures,
        passed: failures == 0,
    }
}

fn quant_row<Q: QuantInt>(kernels: KernelSet, x: f32, scale: f32, zp: i32) -> QuantRow {
    let wrapping = if Q::MIN == 0 {
        naive::quantize_u8_wrapping(x, scale, zp) as i64
    } else {
        naive::quantize_i8_wrapping(x, scale, zp) as i64
    };
    let mut o = [Q::from_clamped(Q::MIN)];
    let saturating = match quant::quantize(&[x], scale, zp, &mut o) {
        Ok(()) => o[0].to_i32() as i64,
        Err(_) => i64::MIN,
    };
    let reference = r::ref_quantize(x, scale, zp, Q::MIN as i64, Q::MAX as i64);
    let tested = match kernels {
        KernelSet::Stable => saturating,
        KernelSet::Naive => wrapping,
    };
    QuantRow {
        input: format!("{x}"),
        dtype: Q::NAME.to_string(),
        scale,
        zero_point: zp,
        wrapping_result: wrapping,
        saturating_result: saturating,
        reference,
        pass: tested == reference,
    }
}

/// Run the quantization sweep (u8 and i8, ties, limits ±1, negatives, ±inf, NaN) on `kernels`.
pub fn verify_quant(kernels: KernelSet) -> QuantReport {
    let inf = f32::INFINITY;
    let mut rows = Vec::new();
    for &x in &[
        0.0f32,
        0.5,
        1.5,
        2.5,
        -0.5,
        -1.0,
        -1.5,
        -300.0,
        254.0,
        255.0,
        256.0,
        1e10,
        inf,
        -inf,
        f32::NAN,
    ] {
        rows.push(quant_row::<u8>(kernels, x, 1.0, 0));
    }
    for &x in &[-128.0f32, -129.0, 127.0, 128.0, -0.25, 0.125] {
        rows.push(quant_row::<u8>(kernels, x, 1.0, 128));
    }
    // scale 0.1: 0.25 / 0.1 = 2.5 → 2 (tie to even after the f32 division)
    for &x in &[0.25f32, 0.35, -0.05, 25.5, 25.6] {
        rows.push(quant_row::<u8>(kernels, x, 0.1, 0));
    }
    for &x in &[
        126.0f32,
        127.0,
        128.0,
        -127.0,
        -128.0,
        -129.0,
        200.0,
        -200.0,
        0.5,
        -2.5,
        inf,
        -inf,
        f32::NAN,
    ] {
        rows.push(quant_row::<i8>(kernels, x, 1.0, 0));
    }
    for &x in &[-29.0f32, -28.0, 227.0, 228.0] {
        rows.push(quant_row::<i8>(kernels, x, 1.0, -100));
    }
    let failures = rows.iter().filter(|r| !r.pass).count();
    QuantReport {
        kernels,
        rows,
        failures,
        passed: failures == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_sweep_passes_on_stable_and_fails_on_naive() {
        let s = verify_overflow(KernelSet::Stable);
        for r in &s.rows {
            assert!(r.pass, "{r:?}");
        }
        assert!(s.passed && s.failures == 0);
        let n = verify_overflow(KernelSet::Naive);
        assert!(!n.passed);
        // naive logaddexp(89, 89) in f32 is +inf (e^89 > f32::MAX); the reference is 89.693…
        let row = n
            .rows
            .iter()
            .find(|r| r.case == "logaddexp(89, 89)")
            .unwrap();
        assert_eq!(row.naive_result, "inf");
        assert!(!row.pass && row.ulp_error.is_none());
        assert!(row.reference.starts_with("89.693147"));
        // The masked softmax row: naive gives 0/0 = NaN, the policy says 0.
        let row = n
            .rows
            .iter()
            .find(|r| r.case.starts_with("softmax([-inf, -inf])"))
            .unwrap();
        assert_eq!(
            (row.naive_result.as_str(), row.stable_result.as_str()),
            ("NaN", "0")
        );
        assert!(n.failures >= 10, "{}", n.failures);
    }

    #[test]
    fn quant_sweep_passes_on_stable_and_fails_on_naive() {
        let s = verify_quant(KernelSet::Stable);
        for r in &s.rows {
            assert!(r.pass, "{r:?}");
        }
        let n = verify_quant(KernelSet::Naive);
        assert!(!n.passed);
        // −1 into u8: wrapping gives 255, the reference 0.
        let row = n
            .rows
            .iter()
            .find(|r| r.input == "-1" && r.dtype == "u8" && r.zero_point == 0)
            .unwrap();
        assert_eq!(
            (row.wrapping_result, row.saturating_result, row.reference),
            (255, 0, 0)
        );
        // 2.5 → 2 (ties to even); the naive quantizer rounds away to 3.
        let row = n
            .rows
            .iter()
            .find(|r| r.input == "2.5" && r.dtype == "u8")
            .unwrap();
        assert_eq!((row.wrapping_result, row.reference), (3, 2));
    }
}
