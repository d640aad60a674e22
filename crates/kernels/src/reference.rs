//! High-precision references for the tests and the verification sweeps: every result in
//! double-double arithmetic ([`crate::dd`], ~100 bits) straight from the definition after an
//! exact max shift, plus ulp distances and an exact-integer quantization reference. They are
//! slow (hundreds of flops per exp) and exist to judge the kernels, not to replace them.
//! Limits: accuracy ~1e-30 relative to the larger term, so results that cancel to below
//! ~1e-14 of the log term are judged only to that absolute accuracy.

use crate::dd::{self, Dd};

const INF: f64 = f64::INFINITY;
const NINF: f64 = f64::NEG_INFINITY;

fn special(a: f64, b: f64, same: f64) -> Option<f64> {
    if a.is_nan() || b.is_nan() {
        return Some(f64::NAN);
    }
    if a == INF || b == INF {
        return Some(INF);
    }
    if a == NINF && b == NINF {
        return Some(NINF);
    }
    if a == NINF {
        return Some(b);
    }
    if b == NINF {
        return Some(a);
    }
    if a == b {
        return Some(same);
    }
    None
}

/// ln(e^a + e^b) = m + ln(e^(a−m) + e^(b−m)), all in double-double.
pub fn ref_logaddexp(a: f64, b: f64) -> Dd {
    if let Some(v) = special(a, b, f64::NAN) {
        if !v.is_nan() || a.is_nan() || b.is_nan() {
            return Dd::from_f64(v);
        }
    }
    let m = a.max(b);
    let s = dd::exp(Dd::sum(a, -m)).add(dd::exp(Dd::sum(b, -m)));
    Dd::from_f64(m).add(dd::ln(s))
}

/// log2(2^a + 2^b) = m + ln(e^((a−m)ln2) + e^((b−m)ln2)) / ln2 in double-double.
pub fn ref_logaddexp2(a: f64, b: f64) -> Dd {
    if let Some(v) = special(a, b, f64::NAN) {
        if !v.is_nan() || a.is_nan() || b.is_nan() {
            return Dd::from_f64(v);
        }
    }
    let m = a.max(b);
    let s = dd::exp(dd::LN2.mul(Dd::sum(a, -m))).add(dd::exp(dd::LN2.mul(Dd::sum(b, -m))));
    Dd::from_f64(m).add(dd::ln(s).div(dd::LN2))
}

/// (m, Σ e^(x−m)) in double-double; None for rows that are special.
fn ref_row_sum(row: &[f64]) -> Option<(f64, Dd)> {
    let m = row.iter().cloned().fold(NINF, f64::max);
    if row.iter().any(|x| x.is_nan()) || m == INF || m == NINF {
        return None;
    }
    let mut s = Dd::from_f64(0.0);
    for &x in row {
        s = s.add(dd::exp(Dd::sum(x, -m)));
    }
    Some((m, s))
}

/// ln Σ e^x = m + ln Σ e^(x−m) in double-double (−inf for all −inf, +inf with +inf, NaN with NaN).
pub fn ref_logsumexp(row: &[f64]) -> Dd {
    if row.iter().any(|x| x.is_nan()) {
        return Dd::from_f64(f64::NAN);
    }
    match ref_row_sum(row) {
        Some((m, s)) => Dd::from_f64(m).add(dd::ln(s)),
        None => Dd::from_f64(row.iter().cloned().fold(NINF, f64::max)),
    }
}

/// e^(x−m) / Σ e^(x−m) per element in double-double; all-−inf row → zeros, +inf/NaN → NaN.
pub fn ref_softmax(row: &[f64]) -> Vec<Dd> {
    match ref_row_sum(row) {
        Some((m, s)) => row
            .iter()
            .map(|&x| {
                let e = dd::exp(Dd::sum(x, -m));
                e.div(s)
            })
            .collect(),
        None => {
            let masked = row.iter().all(|&x| x == NINF);
            let v = if masked { 0.0 } else { f64::NAN };
            vec![Dd::from_f64(v); row.len()]
        }
    }
}

/// (x − m) − ln Σ e^(x−m) per element in double-double; all-−inf row → −inf, +inf/NaN → NaN.
pub fn ref_log_softmax(row: &[f64]) -> Vec<Dd> {
    match ref_row_sum(row) {
        Some((m, s)) => {
            let l = dd::ln(s);
            row.iter()
                .map(|&x| {
                    if x == NINF {
                        Dd::from_f64(NINF)
                    } else {
                        Dd::sum(x, -m).sub(l)
                    }
                })
                .collect()
        }
        None => {
            let masked = row.iter().all(|&x| x == NINF);
            let v = if masked { NINF } else { f64::NAN };
            vec![Dd::from_f64(v); row.len()]
        }
    }
}

fn binade_exp(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// Spacing of f32 values at |r| (2^-149 in the subnormal range).
pub fn ulp_f32(r: f64) -> f64 {
    let a = r.abs();
    if a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    2f64.powi(binade_exp(a) - 23)
}

/// Spacing of f64 values at |r| (2^-1074 in the subnormal range).
pub fn ulp_f64(r: f64) -> f64 {
    let a = r.abs();
    if a < f64::MIN_POSITIVE {
        return dd::ldexp(1.0, -1074);
    }
    dd::ldexp(1.0, binade_exp(a) - 52)
}

fn special_match(y: f64, r: f64) -> Option<f64> {
    if y.is_nan() || r.is_nan() || y.is_infinite() || r.is_infinite() {
        let same = (y.is_nan() && r.is_nan()) || y == r;
        return Some(if same { 0.0 } else { f64::INFINITY });
    }
    None
}

/// |y − r| in units of the f32 spacing at r.
pub fn ulps32(y: f32, r: Dd) -> f64 {
    let y = y as f64;
    if r.hi.is_finite() && (r.hi as f32).is_infinite() {
        // The exact result lies beyond f32::MAX + ulp/2: the correctly rounded f32 is ±inf.
        return if y == (r.hi as f32) as f64 {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if let Some(e) = special_match(y, r.hi) {
        return e;
    }
    ((y - r.hi) - r.lo).abs() / ulp_f32(r.hi)
}

/// |y − r| in units of the f64 spacing at r.
pub fn ulps64(y: f64, r: Dd) -> f64 {
    if let Some(e) = special_match(y, r.hi) {
        return e;
    }
    ((y - r.hi) - r.lo).abs() / ulp_f64(r.hi)
}

/// Exact quantization reference: the f32 quotient x / scale taken from the f64 quotient
/// (double rounding is innocuous for division since 53 ≥ 2·24 + 2), round half to even by
/// floor/fraction inspection, + zero_point, clamped to [min, max]; NaN → zero_point.
pub fn ref_quantize(x: f32, scale: f32, zero_point: i32, min: i64, max: i64) -> i64 {
    if x.is_nan() {
        return zero_point as i64;
    }
    let q = (x as f64 / scale as f64) as f32 as f64;
    if q.is_infinite() {
        return if q > 0.0 { max } else { min };
    }
    let fl = q.floor();
    let frac = q - fl;
    let r = if frac < 0.5 {
        fl
    } else if frac > 0.5 {
        fl + 1.0
    } else if fl % 2.0 == 0.0 {
        fl
    } else {
        fl + 1.0
    };
    let r = r.clamp(-1e12, 1e12) as i64 + zero_point as i64;
    r.clamp(min, max)
}
