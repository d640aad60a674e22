//! Double-double ("dd") arithmetic: an unevaluated sum `hi + lo` of two f64 values carrying
//! about 106 significant bits. It serves the rare ill-conditioned branch of the f64 kernels
//! (results near zero from cancellation) and the high-precision references of the
//! verification sweep. Only what those need is here: add, multiply, divide by an f64,
//! `exp` and `ln`; no trigonometry, no correct rounding guarantee beyond ~100 bits.

/// A double-double value `hi + lo` with `|lo| <= ulp(hi) / 2`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dd {
    /// Leading part (the value rounded to f64).
    pub hi: f64,
    /// Trailing correction.
    pub lo: f64,
}

/// ln 2 as a double-double (QD library constant).
pub const LN2: Dd = Dd {
    hi: std::f64::consts::LN_2,
    lo: 2.319_046_813_846_299_6e-17,
};

/// `s + e == a + b` exactly (Knuth's TwoSum).
#[inline]
pub fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

#[inline]
fn quick_two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let e = b - (s - a);
    (s, e)
}

/// `p + e == a * b` exactly (via fused multiply-add).
#[inline]
pub fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let e = a.mul_add(b, -p);
    (p, e)
}

/// Multiply by 2^k exactly (unless the result leaves the normal range).
pub fn ldexp(x: f64, k: i32) -> f64 {
    let k1 = k / 2;
    let k2 = k - k1;
    x * 2f64.powi(k1) * 2f64.powi(k2)
}

#[allow(clippy::should_implement_trait)] // explicit names keep the dd cost visible
impl Dd {
    /// The exact value of one f64.
    pub const fn from_f64(x: f64) -> Dd {
        Dd { hi: x, lo: 0.0 }
    }

    /// The exact sum of two f64 values.
    pub fn sum(a: f64, b: f64) -> Dd {
        let (hi, lo) = two_sum(a, b);
        Dd { hi, lo }
    }

    /// `self + o` with ~106-bit accuracy.
    pub fn add(self, o: Dd) -> Dd {
        let (s, e) = two_sum(self.hi, o.hi);
        let (t, f) = two_sum(self.lo, o.lo);
        let (s, e) = quick_two_sum(s, e + t);
        let (hi, lo) = quick_two_sum(s, e + f);
        if !hi.is_finite() {
            return Dd { hi, lo: 0.0 };
        }
        Dd { hi, lo }
    }

    /// `-self`.
    pub fn neg(self) -> Dd {
        Dd {
            hi: -self.hi,
            lo: -self.lo,
        }
    }

    /// `self - o`.
    pub fn sub(self, o: Dd) -> Dd {
        self.add(o.neg())
    }

    /// `self * o` with ~106-bit accuracy.
    pub fn mul(self, o: Dd) -> Dd {
        let (p, e) = two_prod(self.hi, o.hi);
        let e = e + (self.hi * o.lo + self.lo * o.hi);
        let (hi, lo) = quick_two_sum(p, e);
        if !hi.is_finite() {
            return Dd { hi, lo: 0.0 };
        }
        Dd { hi, lo }
    }

    /// `self * b` for an f64 `b`.
    pub fn mul_f64(self, b: f64) -> Dd {
        self.mul(Dd::from_f64(b))
    }

    /// `self / b` for an f64 `b`.
    pub fn div_f64(self, b: f64) -> Dd {
        let q1 = self.hi / b;
        let (p, e) = two_prod(q1, b);
        let r = ((self.hi - p) - e + self.lo) / b;
        let (hi, lo) = quick_two_sum(q1, r);
        Dd { hi, lo }
    }

    /// `self / o` with ~106-bit accuracy (three quotient digits).
    pub fn div(self, o: Dd) -> Dd {
        let q1 = self.hi / o.hi;
        let r = self.sub(o.mul_f64(q1));
        let q2 = r.hi / o.hi;
        let r = r.sub(o.mul_f64(q2));
        let q3 = r.hi / o.hi;
        Dd::sum(q1, q2).add(Dd::from_f64(q3))
    }

    /// `self * 2^k`.
    pub fn ldexp(self, k: i32) -> Dd {
        Dd {
            hi: ldexp(self.hi, k),
            lo: ldexp(self.lo, k),
        }
    }

    /// The value as an f64 sum (rounds once).
    pub fn to_f64(self) -> f64 {
        self.hi + self.lo
    }
}

/// e^x to about 100 bits: x = k·ln2 + r, r scaled by 2^-3, Taylor series to degree 16,
/// squared three times, times 2^k. Overflows to +inf above 709.79, flushes to 0 below -745.2.
pub fn exp(x: Dd) -> Dd {
    if x.hi.is_nan() {
        return Dd::from_f64(f64::NAN);
    }
    if x.hi > 709.79 {
        return Dd::from_f64(f64::INFINITY);
    }
    if x.hi < -745.2 {
        return Dd::from_f64(0.0);
    }
    let k = (x.hi / LN2.hi).round();
    let r = x.sub(LN2.mul_f64(k)).ldexp(-3);
    // Horner: p = 1 + r(1 + r/2(1 + r/3(...)))
    let mut p = Dd::from_f64(1.0);
    for i in (1..=16).rev() {
        p = Dd::from_f64(1.0).add(r.mul(p).div_f64(i as f64));
    }
    for _ in 0..3 {
        p = p.mul(p);
    }
    // k is an integer in [-1076, 1024].
    p.ldexp(k as i32)
}

/// ln(s) for s > 0 to about 100 bits: y0 = ln(s.hi) then one Newton step y0 + s·e^-y0 − 1
/// (the step roughly squares the relative error of y0). ln(0) = −inf, negative/NaN → NaN.
pub fn ln(s: Dd) -> Dd {
    if s.hi.is_nan() || s.hi < 0.0 {
        return Dd::from_f64(f64::NAN);
    }
    if s.hi == 0.0 {
        return Dd::from_f64(f64::NEG_INFINITY);
    }
    if s.hi.is_infinite() {
        return Dd::from_f64(f64::INFINITY);
    }
    // Keep e^-y0 inside the normal range.
    if s.hi < 1e-250 {
        return ln(s.ldexp(900)).sub(LN2.mul_f64(900.0));
    }
    if s.hi > 1e250 {
        return ln(s.ldexp(-900)).add(LN2.mul_f64(900.0));
    }
    let y0 = s.hi.ln();
    let corr = s.mul(exp(Dd::from_f64(-y0))).sub(Dd::from_f64(1.0));
    Dd::from_f64(y0).add(corr)
}

#[cfg(test)]
mod tests {
    use super::*;

    // e = 2.718281828459045235360287471352662497757, as a dd from the QD library.
    const E: Dd = Dd {
        hi: std::f64::consts::E,
        lo: 1.445_646_891_729_250_2e-16,
    };

    fn rel(a: Dd, b: Dd) -> f64 {
        (a.sub(b).to_f64() / b.hi).abs()
    }

    #[test]
    fn exp_matches_published_e() {
        assert!(rel(exp(Dd::from_f64(1.0)), E) < 1e-30);
        // e^-1 · e = 1
        let inv = exp(Dd::from_f64(-1.0));
        assert!(rel(inv.mul(E), Dd::from_f64(1.0)) < 1e-30);
        // e^(ln 2) = 2 exactly in the math.
        assert!(rel(exp(LN2), Dd::from_f64(2.0)) < 1e-30);
        // e^10 = 22026.465794806716516957900645284244366 (published)
        let e10 = Dd::sum(22_026.465_794_806_718, 0.0);
        assert!(rel(exp(Dd::from_f64(10.0)), e10) < 1e-16);
        // e^10 = (e^1)^10 in dd arithmetic
        let mut p = Dd::from_f64(1.0);
        for _ in 0..10 {
            p = p.mul(E);
        }
        assert!(rel(exp(Dd::from_f64(10.0)), p) < 1e-29);
    }

    #[test]
    fn ln_inverts_exp_and_matches_ln2() {
        assert!(rel(ln(Dd::from_f64(2.0)), LN2) < 1e-30);
        assert!(rel(ln(E), Dd::from_f64(1.0)) < 1e-30);
        for &x in &[1e-300, 0.3, 1.0 + 1e-12, 7.5, 1e300, f64::MAX] {
            let y = ln(Dd::from_f64(x));
            assert!(rel(exp(y), Dd::from_f64(x)) < 1e-29, "x={x}");
        }
        // ln(2^-1074) = -1074 ln 2 (smallest subnormal)
        assert!(rel(ln(Dd::from_f64(4.9e-324)), LN2.mul_f64(-1074.0)) < 1e-30);
        assert_eq!(ln(Dd::from_f64(0.0)).hi, f64::NEG_INFINITY);
        assert!(ln(Dd::from_f64(-1.0)).hi.is_nan());
    }

    #[test]
    fn division_recovers_factors() {
        // (e · ln2) / ln2 = e and 1/3 · 3 = 1 to dd precision.
        assert!(rel(E.mul(LN2).div(LN2), E) < 1e-31);
        let third = Dd::from_f64(1.0).div(Dd::from_f64(3.0));
        assert!(rel(third.mul_f64(3.0), Dd::from_f64(1.0)) < 1e-31);
    }

    #[test]
    fn exp_extremes() {
        assert_eq!(exp(Dd::from_f64(710.0)).hi, f64::INFINITY);
        assert_eq!(exp(Dd::from_f64(-746.0)).hi, 0.0);
        // e^-744 is subnormal: 2^-1073.4 ≈ 1.0e-323 (nonzero)
        let s = exp(Dd::from_f64(-744.0)).hi;
        assert!(s > 0.0 && s < f64::MIN_POSITIVE);
        // e^709 = 8.218407461554972e307 (libm agrees to < 1 ulp)
        assert!((exp(Dd::from_f64(709.0)).hi / 709f64.exp() - 1.0).abs() < 3e-16);
    }
}
