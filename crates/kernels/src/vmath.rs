//! Elementwise f32 math over slices with explicit SIMD: [`exp`], [`log`], [`tanh`], [`erf`],
//! [`sigmoid`], [`silu`], [`gelu_tanh`] and [`gelu_erf`]. Each function's math is written once,
//! branch-free, over a small private vector trait and instantiated for AVX-512F (16 lanes),
//! AVX2 + FMA (8 lanes), NEON (4 lanes, aarch64 only) and plain `f32` (1 lane); the level is
//! chosen once at run time ([`level`], capped by the `TENSORFORGE_SIMD` environment variable).
//! A slice is processed in whole vectors, and the last partial vector is padded through a
//! stack buffer, so an element's result never depends on its position.
//!
//! How each function is computed (coefficients: minimax fits made with Remez' algorithm in
//! 40-digit arithmetic, rounded to f32; "ulp" = spacing of f32 at the exact result):
//! * **exp**: x = n·ln2 + r, n = round(x·log2 e) by the 1.5·2^23 trick, ln2 in two parts
//!   (Cody–Waite; x − n·ln2_hi is exact), |r| ≤ ln2/2 + 0.002, e^r = 1 + r + r²·q(r) with q of
//!   degree 4 (relative error 5e-9), times 2^n built in the exponent bits as two factors
//!   2^⌊n/2⌋·2^(n−⌊n/2⌋), so subnormal results are rounded once (not flushed) and x > ln(MAX)
//!   overflows to +inf. The same core takes an argument in two parts (double-f32) where the
//!   callers need it.
//! * **log**: x = 2^k·m with m ∈ [√½, √2) by integer arithmetic on the bits (subnormals scaled
//!   by 2^23 first), f = m − 1 (exact), ln(1 + f) = f − f²/2 + f³·P(f) with P of degree 8, plus
//!   k·ln2 with ln2 in two parts.
//! * **tanh**: |x| < 0.625: x + x³·P(x²), P of degree 5 (so tanh x = x for tiny x);
//!   otherwise (1 − e)/(1 + e) with e = e^(−2|x|); the sign of x is copied onto the result.
//! * **erf**: |x| < 0.46875: x·P(x²), P of degree 4 with its leading coefficient 2/√π in two
//!   parts; otherwise 1 − erfc(|x|) with erfc(t) = exp(−t² + R(t√2)) (t² exact in two parts),
//!   R(s) = ln erfc(s/√2) + s²/2 a degree-9 polynomial in s − c on two intervals (c = 1.25 on
//!   [0.65, 2), c = 4 on [2, 5.66]; s − c is exact there), its two leading coefficients in two
//!   parts and its sum with −t² kept in double-f32; |x| ≥ 4 gives ±1.
//! * **sigmoid, silu, gelu_tanh**: y·σ(z) = y/(1 + e^−z) evaluated with w = e^(−|z|) ∈ (0, 1]
//!   as y/(1 + w) for z ≥ 0 and y·w/(1 + w) for z < 0 (no overflow, no cancellation), w taken
//!   as 2^32·w from the exp core so that y·w keeps full precision where w is subnormal.
//!   sigmoid: y = 1, z = x; silu: y = z = x; gelu_tanh uses 1 + tanh u = 2σ(2u):
//!   gelu_tanh(x) = x·σ(2u), u = √(2/π)·(x + 0.044715x³), with 2u formed in double-f32 (for
//!   x < 0 an absolute error δ in 2u is a relative error δ in the result, and 2u ≈ −17 at
//!   x = −4.8, so rounding 2u to f32 alone would cost up to ~16 ulp there).
//! * **gelu_erf**: |x| < 0.65625: 0.5x·(1 + x·P(x²)) (erf(x/√2) by its own degree-4 fit);
//!   otherwise 0.5x·erfc(|x|/√2) for x < 0 and 0.5x·(2 − erfc(x/√2)) for x > 0 with the erfc
//!   above, whose exponent −x²/2 + R(|x|) is formed from the exact x (no rounding of x/√2);
//!   beyond |x| = 5.66 R is held at its end point (there |result| < 5e-8).
//!
//! Every level runs the same sequence of IEEE-754 operations (fused multiply-add everywhere,
//! min/max as `a < b ? a : b`), so all levels give **bit-identical** results, NaN payloads
//! aside (tested). Special values: NaN in gives NaN out; ±inf, ±0 and overflow/underflow as
//! documented on each function. The error maxima quoted on the functions were measured against
//! f64 references (`f64::exp`, `ln`, `tanh`, `libm::erf`, `libm::erfc`) once over all 2^32
//! inputs (an exhaustive run, not part of the tests) and by the tests over every 1021st f32 bit
//! pattern of both signs plus special values.
//!
//! Left out: f64 and f16 inputs, in-place variants, other rounding modes, flush-to-zero
//! (the default MXCSR/FPCR is assumed: with FTZ/DAZ on, subnormal results become 0),
//! multithreading (call per chunk from rayon), and gelu_tanh with the f32-rounded constants
//! (the constants are √(2/π) and 0.044715 as real numbers, each kept in two f32 parts).

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// An instruction set the functions of this module can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Level {
    /// Portable `f32` code, one element per step (every CPU). On x86-64 CPUs with FMA it is
    /// compiled with the FMA instruction, and the compiler may then vectorize the loop.
    Scalar,
    /// AVX2 + FMA, 8 lanes (x86-64).
    Avx2,
    /// AVX-512F, 16 lanes (x86-64).
    Avx512,
    /// NEON, 4 lanes (aarch64).
    Neon,
}

impl Level {
    /// All levels, from the narrowest.
    pub const ALL: [Level; 4] = [Level::Scalar, Level::Avx2, Level::Avx512, Level::Neon];

    /// The lowercase name that `TENSORFORGE_SIMD` accepts: `scalar`, `avx2`, `avx512`, `neon`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Neon => "neon",
        }
    }

    /// The level named `s` (ASCII case and surrounding whitespace ignored), if any.
    pub fn parse(s: &str) -> Option<Level> {
        let s = s.trim();
        Level::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
    }

    /// True when this CPU can run the level (detected once per feature by the standard
    /// library). Scalar always can.
    pub fn is_supported(self) -> bool {
        match self {
            Level::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            Level::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            _ => false,
        }
    }
}

/// The widest level this CPU supports.
fn best() -> Level {
    [Level::Avx512, Level::Avx2, Level::Neon]
        .into_iter()
        .find(|l| l.is_supported())
        .unwrap_or(Level::Scalar)
}

/// `req` when this CPU supports it, else the best level it has.
fn cap(req: Level) -> Level {
    if req.is_supported() {
        req
    } else {
        best()
    }
}

/// The level for a `TENSORFORGE_SIMD` value: a known name is capped to what the CPU has,
/// anything else (or no value) gives the best level.
fn level_from_env(v: Option<&str>) -> Level {
    v.and_then(Level::parse).map_or_else(best, cap)
}

/// The instruction set the functions of this module use on this CPU: Scalar, Avx2, Avx512,
/// Neon.
///
/// Decided once per process: x86-64 takes AVX-512F if detected, else AVX2 + FMA, else scalar;
/// aarch64 takes NEON; other targets scalar. The environment variable `TENSORFORGE_SIMD`
/// (`scalar`, `avx2`, `avx512`, `neon`) caps the choice; a level the CPU lacks falls back to
/// the best it has, and an unknown value is ignored. As every level gives the same bits, the
/// choice only changes speed.
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| level_from_env(std::env::var("TENSORFORGE_SIMD").ok().as_deref()))
}

/// One of the functions of this module, for [`eval_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Func {
    /// [`exp`].
    Exp,
    /// [`log`].
    Log,
    /// [`tanh`].
    Tanh,
    /// [`erf`].
    Erf,
    /// [`sigmoid`].
    Sigmoid,
    /// [`silu`].
    Silu,
    /// [`gelu_tanh`].
    GeluTanh,
    /// [`gelu_erf`].
    GeluErf,
}

impl Func {
    /// All functions, in the order of the module's documentation.
    pub const ALL: [Func; 8] = [
        Func::Exp,
        Func::Log,
        Func::Tanh,
        Func::Erf,
        Func::Sigmoid,
        Func::Silu,
        Func::GeluTanh,
        Func::GeluErf,
    ];

    /// The function's name in this module (`exp`, …, `gelu_erf`).
    pub fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Log => "log",
            Func::Tanh => "tanh",
            Func::Erf => "erf",
            Func::Sigmoid => "sigmoid",
            Func::Silu => "silu",
            Func::GeluTanh => "gelu_tanh",
            Func::GeluErf => "gelu_erf",
        }
    }
}

/// `f` over `x` into `out` at `level` (capped to what this CPU supports, as for
/// `TENSORFORGE_SIMD`), for tests and benchmarks that compare levels in one process. The
/// results are those of the plain functions (all levels agree bit for bit).
pub fn eval_at(f: Func, level: Level, x: &[f32], out: &mut [f32]) {
    let l = cap(level);
    match f {
        Func::Exp => apply::<ExpK>(l, x, out),
        Func::Log => apply::<LogK>(l, x, out),
        Func::Tanh => apply::<TanhK>(l, x, out),
        Func::Erf => apply::<ErfK>(l, x, out),
        Func::Sigmoid => apply::<SigmoidK>(l, x, out),
        Func::Silu => apply::<SiluK>(l, x, out),
        Func::GeluTanh => apply::<GeluTanhK>(l, x, out),
        Func::GeluErf => apply::<GeluErfK>(l, x, out),
    }
}

/// e^x elementwise over the first `min(x.len(), out.len())` elements.
///
/// Error < 1 ulp: measured max 0.92 ulp over all 2^32 inputs (0.85 in the test sweep; the
/// test asserts ≤ 2 ulp at every level). Results in the subnormal range are rounded once from
/// the full-precision value (not flushed): e^x rounds to 0 below about −103.972 (e^x < 2^−150),
/// and x ≥ 88.72284 (above ln f32::MAX) gives +inf. exp(+inf) = +inf, exp(−inf) = 0,
/// exp(±0) = 1, NaN gives NaN.
///
/// ```
/// use tensorforge_kernels::vmath;
/// let x = [0.0f32, 1.0, -1.0, 100.0, -200.0];
/// let mut y = [0.0f32; 5];
/// vmath::exp(&x, &mut y);
/// assert_eq!(y[0], 1.0);
/// assert!((y[1] - std::f32::consts::E).abs() <= f32::EPSILON * 2.0);
/// assert!((y[2] - (-1.0f32).exp()).abs() <= f32::EPSILON);
/// assert_eq!((y[3], y[4]), (f32::INFINITY, 0.0));
/// ```
pub fn exp(x: &[f32], out: &mut [f32]) {
    apply::<ExpK>(level(), x, out)
}

/// ln x elementwise over the first `min(x.len(), out.len())` elements.
///
/// Error < 1 ulp: measured max 0.90 ulp over all 2^32 inputs, subnormal inputs included (0.85
/// in the test sweep; the test asserts ≤ 2 ulp at every level). log(±0) = −inf,
/// log(x < 0) = NaN (−inf included), log(+inf) = +inf, NaN gives NaN.
pub fn log(x: &[f32], out: &mut [f32]) {
    apply::<LogK>(level(), x, out)
}

/// tanh x elementwise over the first `min(x.len(), out.len())` elements.
///
/// Error ≤ 2 ulp: measured max 1.51 ulp over all 2^32 inputs (1.48 in the test sweep; the test
/// asserts ≤ 3 ulp at every level). Relative accuracy holds down to the subnormals (tanh x = x
/// for tiny x), tanh(±0) = ±0, tanh(±inf) = ±1, NaN gives NaN.
pub fn tanh(x: &[f32], out: &mut [f32]) {
    apply::<TanhK>(level(), x, out)
}

/// erf x = (2/√π)·∫₀ˣ e^(−t²) dt elementwise over the first `min(x.len(), out.len())`
/// elements.
///
/// Error ≤ 2 ulp: measured max 1.45 ulp over all 2^32 inputs, subnormal inputs included (1.38
/// in the test sweep; the test asserts ≤ 3 ulp at every level). erf(±0) = ±0, erf(x) = ±1
/// for |x| ≥ 3.92 (f32 rounding) and ±inf, NaN gives NaN.
pub fn erf(x: &[f32], out: &mut [f32]) {
    apply::<ErfK>(level(), x, out)
}

/// sigmoid(x) = 1/(1 + e^−x) elementwise over the first `min(x.len(), out.len())` elements.
///
/// Error ≤ 3 ulp: measured max 2.40 ulp over all 2^32 inputs (2.23 in the test sweep; the test
/// asserts ≤ 3 ulp at every level), including the subnormal results for x < −87.3 (0 below
/// −103.97). sigmoid(+inf) = 1, sigmoid(−inf) = 0, sigmoid(±0) = 0.5, NaN gives NaN.
pub fn sigmoid(x: &[f32], out: &mut [f32]) {
    apply::<SigmoidK>(level(), x, out)
}

/// silu(x) = x/(1 + e^−x) = x·sigmoid(x) elementwise over the first `min(x.len(),
/// out.len())` elements.
///
/// Error ≤ 4 ulp: measured max 3.34 ulp over all 2^32 inputs (2.73 in the test sweep; the test
/// asserts ≤ 4 ulp at every level), including subnormal results (x down to about −108.7,
/// below which the result is −0). silu(+inf) = +inf, silu(−inf) = −0, silu(±0) = ±0, NaN gives
/// NaN.
pub fn silu(x: &[f32], out: &mut [f32]) {
    apply::<SiluK>(level(), x, out)
}

/// gelu_tanh(x) = 0.5x·(1 + tanh(√(2/π)·(x + 0.044715x³))) elementwise over the first
/// `min(x.len(), out.len())` elements (the "tanh approximation" of GELU; √(2/π) =
/// 0.7978846 and 0.044715 are used as real numbers, not rounded to f32).
///
/// Computed as x·σ(2u) with 2u in double-f32. Error ≤ 4 ulp where |result| > 1e-6: measured
/// max 3.20 ulp over all 2^32 inputs (2.69 in the test sweep), and ≤ 2e-13 absolute where
/// |result| ≤ 1e-6; the test asserts ≤ 4 ulp and ≤ 1e-7 absolute at every level.
/// gelu_tanh(+inf) = +inf, gelu_tanh(−inf) = −0 (as for x below about −10.8), gelu_tanh(±0) =
/// ±0, NaN gives NaN.
pub fn gelu_tanh(x: &[f32], out: &mut [f32]) {
    apply::<GeluTanhK>(level(), x, out)
}

/// gelu_erf(x) = 0.5x·(1 + erf(x/√2)) elementwise over the first `min(x.len(), out.len())`
/// elements (exact GELU; x/√2 is not rounded).
///
/// Error ≤ 4 ulp where |result| > 1e-6: measured max 3.32 ulp over all 2^32 inputs (2.78 in the
/// test sweep), and ≤ 5e-10 absolute where |result| ≤ 1e-6 (for x < −5.66, |result| < 5e-8,
/// the erfc polynomial is held at its end point and only this absolute bound holds); the test
/// asserts ≤ 4 ulp and ≤ 1e-7 absolute at every level. gelu_erf(+inf) = +inf,
/// gelu_erf(−inf) = −0 (as for x below about −14.4), gelu_erf(±0) = ±0, NaN gives NaN.
pub fn gelu_erf(x: &[f32], out: &mut [f32]) {
    apply::<GeluErfK>(level(), x, out)
}

// ---------------------------------------------------------------------------------------
// The vector abstraction.

/// A vector of f32 lanes. Integer operations act on the lanes' bit patterns as i32.
///
/// # Safety
///
/// The methods use the instruction set of the implementing type: call them only where the CPU
/// supports it (inside the matching `#[target_feature]` entry, see `apply`). `load` and
/// `store` access `LANES` floats at the pointer.
trait V: Copy {
    /// Lane mask from comparisons.
    type M: Copy;
    /// Lanes per vector (≤ 16).
    const LANES: usize;
    unsafe fn splat(v: f32) -> Self;
    /// Every lane's bits set to `b`.
    unsafe fn bits(b: u32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    unsafe fn div(self, b: Self) -> Self;
    /// self·b + c with one rounding.
    unsafe fn fma(self, b: Self, c: Self) -> Self;
    /// c − self·b with one rounding.
    unsafe fn fnma(self, b: Self, c: Self) -> Self;
    /// `self < b ? self : b` (b when either is NaN).
    unsafe fn min(self, b: Self) -> Self;
    /// `self > b ? self : b` (b when either is NaN).
    unsafe fn max(self, b: Self) -> Self;
    unsafe fn and(self, b: Self) -> Self;
    unsafe fn or(self, b: Self) -> Self;
    unsafe fn xor(self, b: Self) -> Self;
    /// !self & b.
    unsafe fn andnot(self, b: Self) -> Self;
    unsafe fn lt(self, b: Self) -> Self::M;
    unsafe fn ge(self, b: Self) -> Self::M;
    unsafe fn eq(self, b: Self) -> Self::M;
    /// `m ? a : b` per lane.
    unsafe fn select(m: Self::M, a: Self, b: Self) -> Self;
    unsafe fn iadd(self, b: Self) -> Self;
    unsafe fn isub(self, b: Self) -> Self;
    /// Bits shifted left by 23.
    unsafe fn shl23(self) -> Self;
    /// Arithmetic shift right by 1.
    unsafe fn sra1(self) -> Self;
    /// Arithmetic shift right by 23.
    unsafe fn sra23(self) -> Self;

    #[inline(always)]
    unsafe fn abs(self) -> Self {
        Self::splat(-0.0).andnot(self)
    }
    #[inline(always)]
    unsafe fn neg(self) -> Self {
        self.xor(Self::splat(-0.0))
    }
}

impl V for f32 {
    type M = bool;
    const LANES: usize = 1;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        v
    }
    #[inline(always)]
    unsafe fn bits(b: u32) -> Self {
        f32::from_bits(b)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        *p
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        *p = self
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        self + b
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        self - b
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        self * b
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        self / b
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        self.mul_add(b, c)
    }
    #[inline(always)]
    unsafe fn fnma(self, b: Self, c: Self) -> Self {
        (-self).mul_add(b, c)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        if self < b {
            self
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        if self > b {
            self
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn and(self, b: Self) -> Self {
        f32::from_bits(self.to_bits() & b.to_bits())
    }
    #[inline(always)]
    unsafe fn or(self, b: Self) -> Self {
        f32::from_bits(self.to_bits() | b.to_bits())
    }
    #[inline(always)]
    unsafe fn xor(self, b: Self) -> Self {
        f32::from_bits(self.to_bits() ^ b.to_bits())
    }
    #[inline(always)]
    unsafe fn andnot(self, b: Self) -> Self {
        f32::from_bits(!self.to_bits() & b.to_bits())
    }
    #[inline(always)]
    unsafe fn lt(self, b: Self) -> bool {
        self < b
    }
    #[inline(always)]
    unsafe fn ge(self, b: Self) -> bool {
        self >= b
    }
    #[inline(always)]
    unsafe fn eq(self, b: Self) -> bool {
        self == b
    }
    #[inline(always)]
    unsafe fn select(m: bool, a: Self, b: Self) -> Self {
        if m {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn iadd(self, b: Self) -> Self {
        f32::from_bits(self.to_bits().wrapping_add(b.to_bits()))
    }
    #[inline(always)]
    unsafe fn isub(self, b: Self) -> Self {
        f32::from_bits(self.to_bits().wrapping_sub(b.to_bits()))
    }
    #[inline(always)]
    unsafe fn shl23(self) -> Self {
        f32::from_bits(self.to_bits() << 23)
    }
    #[inline(always)]
    unsafe fn sra1(self) -> Self {
        f32::from_bits(((self.to_bits() as i32) >> 1) as u32)
    }
    #[inline(always)]
    unsafe fn sra23(self) -> Self {
        f32::from_bits(((self.to_bits() as i32) >> 23) as u32)
    }
}

#[cfg(target_arch = "x86_64")]
impl V for __m256 {
    type M = __m256;
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        _mm256_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn bits(b: u32) -> Self {
        _mm256_castsi256_ps(_mm256_set1_epi32(b as i32))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        _mm256_add_ps(self, b)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        _mm256_sub_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        _mm256_mul_ps(self, b)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        _mm256_div_ps(self, b)
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        _mm256_fmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn fnma(self, b: Self, c: Self) -> Self {
        _mm256_fnmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        _mm256_min_ps(self, b)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        _mm256_max_ps(self, b)
    }
    #[inline(always)]
    unsafe fn and(self, b: Self) -> Self {
        _mm256_and_ps(self, b)
    }
    #[inline(always)]
    unsafe fn or(self, b: Self) -> Self {
        _mm256_or_ps(self, b)
    }
    #[inline(always)]
    unsafe fn xor(self, b: Self) -> Self {
        _mm256_xor_ps(self, b)
    }
    #[inline(always)]
    unsafe fn andnot(self, b: Self) -> Self {
        _mm256_andnot_ps(self, b)
    }
    #[inline(always)]
    unsafe fn lt(self, b: Self) -> Self {
        _mm256_cmp_ps::<_CMP_LT_OQ>(self, b)
    }
    #[inline(always)]
    unsafe fn ge(self, b: Self) -> Self {
        _mm256_cmp_ps::<_CMP_GE_OQ>(self, b)
    }
    #[inline(always)]
    unsafe fn eq(self, b: Self) -> Self {
        _mm256_cmp_ps::<_CMP_EQ_OQ>(self, b)
    }
    #[inline(always)]
    unsafe fn select(m: Self, a: Self, b: Self) -> Self {
        _mm256_blendv_ps(b, a, m)
    }
    #[inline(always)]
    unsafe fn iadd(self, b: Self) -> Self {
        _mm256_castsi256_ps(_mm256_add_epi32(
            _mm256_castps_si256(self),
            _mm256_castps_si256(b),
        ))
    }
    #[inline(always)]
    unsafe fn isub(self, b: Self) -> Self {
        _mm256_castsi256_ps(_mm256_sub_epi32(
            _mm256_castps_si256(self),
            _mm256_castps_si256(b),
        ))
    }
    #[inline(always)]
    unsafe fn shl23(self) -> Self {
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(self)))
    }
    #[inline(always)]
    unsafe fn sra1(self) -> Self {
        _mm256_castsi256_ps(_mm256_srai_epi32::<1>(_mm256_castps_si256(self)))
    }
    #[inline(always)]
    unsafe fn sra23(self) -> Self {
        _mm256_castsi256_ps(_mm256_srai_epi32::<23>(_mm256_castps_si256(self)))
    }
}

#[cfg(target_arch = "x86_64")]
impl V for __m512 {
    type M = __mmask16;
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        _mm512_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn bits(b: u32) -> Self {
        _mm512_castsi512_ps(_mm512_set1_epi32(b as i32))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        _mm512_add_ps(self, b)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        _mm512_sub_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        _mm512_mul_ps(self, b)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        _mm512_div_ps(self, b)
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        _mm512_fmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn fnma(self, b: Self, c: Self) -> Self {
        _mm512_fnmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        _mm512_min_ps(self, b)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        _mm512_max_ps(self, b)
    }
    #[inline(always)]
    unsafe fn and(self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_and_si512(
            _mm512_castps_si512(self),
            _mm512_castps_si512(b),
        ))
    }
    #[inline(always)]
    unsafe fn or(self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(self),
            _mm512_castps_si512(b),
        ))
    }
    #[inline(always)]
    unsafe fn xor(self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(self),
            _mm512_castps_si512(b),
        ))
    }
    #[inline(always)]
    unsafe fn andnot(self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_andnot_si512(
            _mm512_castps_si512(self),
            _mm512_castps_si512(b),
        ))
    }
    #[inline(always)]
    unsafe fn lt(self, b: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self, b)
    }
    #[inline(always)]
    unsafe fn ge(self, b: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self, b)
    }
    #[inline(always)]
    unsafe fn eq(self, b: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self, b)
    }
    #[inline(always)]
    unsafe fn select(m: __mmask16, a: Self, b: Self) -> Self {
        _mm512_mask_blend_ps(m, b, a)
    }
    #[inline(always)]
    unsafe fn iadd(self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_add_epi32(
            _mm512_castps_si512(self),
            _mm512_castps_si512(b),
        ))
    }
    #[inline(always)]
    unsafe fn isub(self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_sub_epi32(
            _mm512_castps_si512(self),
            _mm512_castps_si512(b),
        ))
    }
    #[inline(always)]
    unsafe fn shl23(self) -> Self {
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_castps_si512(self)))
    }
    #[inline(always)]
    unsafe fn sra1(self) -> Self {
        _mm512_castsi512_ps(_mm512_srai_epi32::<1>(_mm512_castps_si512(self)))
    }
    #[inline(always)]
    unsafe fn sra23(self) -> Self {
        _mm512_castsi512_ps(_mm512_srai_epi32::<23>(_mm512_castps_si512(self)))
    }
}

#[cfg(target_arch = "aarch64")]
impl V for float32x4_t {
    type M = uint32x4_t;
    const LANES: usize = 4;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        vdupq_n_f32(v)
    }
    #[inline(always)]
    unsafe fn bits(b: u32) -> Self {
        vreinterpretq_f32_u32(vdupq_n_u32(b))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        vld1q_f32(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        vst1q_f32(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        vaddq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        vsubq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        vmulq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        vdivq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        vfmaq_f32(c, self, b)
    }
    #[inline(always)]
    unsafe fn fnma(self, b: Self, c: Self) -> Self {
        vfmsq_f32(c, self, b)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        vbslq_f32(vcltq_f32(self, b), self, b)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        vbslq_f32(vcgtq_f32(self, b), self, b)
    }
    #[inline(always)]
    unsafe fn and(self, b: Self) -> Self {
        vreinterpretq_f32_u32(vandq_u32(
            vreinterpretq_u32_f32(self),
            vreinterpretq_u32_f32(b),
        ))
    }
    #[inline(always)]
    unsafe fn or(self, b: Self) -> Self {
        vreinterpretq_f32_u32(vorrq_u32(
            vreinterpretq_u32_f32(self),
            vreinterpretq_u32_f32(b),
        ))
    }
    #[inline(always)]
    unsafe fn xor(self, b: Self) -> Self {
        vreinterpretq_f32_u32(veorq_u32(
            vreinterpretq_u32_f32(self),
            vreinterpretq_u32_f32(b),
        ))
    }
    #[inline(always)]
    unsafe fn andnot(self, b: Self) -> Self {
        // vbic(a, b) = a & !b
        vreinterpretq_f32_u32(vbicq_u32(
            vreinterpretq_u32_f32(b),
            vreinterpretq_u32_f32(self),
        ))
    }
    #[inline(always)]
    unsafe fn lt(self, b: Self) -> uint32x4_t {
        vcltq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn ge(self, b: Self) -> uint32x4_t {
        vcgeq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn eq(self, b: Self) -> uint32x4_t {
        vceqq_f32(self, b)
    }
    #[inline(always)]
    unsafe fn select(m: uint32x4_t, a: Self, b: Self) -> Self {
        vbslq_f32(m, a, b)
    }
    #[inline(always)]
    unsafe fn iadd(self, b: Self) -> Self {
        vreinterpretq_f32_s32(vaddq_s32(
            vreinterpretq_s32_f32(self),
            vreinterpretq_s32_f32(b),
        ))
    }
    #[inline(always)]
    unsafe fn isub(self, b: Self) -> Self {
        vreinterpretq_f32_s32(vsubq_s32(
            vreinterpretq_s32_f32(self),
            vreinterpretq_s32_f32(b),
        ))
    }
    #[inline(always)]
    unsafe fn shl23(self) -> Self {
        vreinterpretq_f32_s32(vshlq_n_s32::<23>(vreinterpretq_s32_f32(self)))
    }
    #[inline(always)]
    unsafe fn sra1(self) -> Self {
        vreinterpretq_f32_s32(vshrq_n_s32::<1>(vreinterpretq_s32_f32(self)))
    }
    #[inline(always)]
    unsafe fn sra23(self) -> Self {
        vreinterpretq_f32_s32(vshrq_n_s32::<23>(vreinterpretq_s32_f32(self)))
    }
}

// ---------------------------------------------------------------------------------------
// Driving loops and dispatch.

/// One elementwise function, generic over the vector type.
trait Kernel {
    /// # Safety
    ///
    /// As for the methods of [`V`]: only where the CPU supports `T`'s instruction set.
    unsafe fn eval<T: V>(x: T) -> T;
}

macro_rules! kernels {
    ($($k:ident => $f:ident),* $(,)?) => {
        $(
            struct $k;
            impl Kernel for $k {
                #[inline(always)]
                unsafe fn eval<T: V>(x: T) -> T {
                    $f(x)
                }
            }
        )*
    };
}

kernels!(
    ExpK => exp_v,
    LogK => log_v,
    TanhK => tanh_v,
    ErfK => erf_v,
    SigmoidK => sigmoid_v,
    SiluK => silu_v,
    GeluTanhK => gelu_tanh_v,
    GeluErfK => gelu_erf_v,
);

/// `out[i] = K(x[i])` for i < min(x.len(), out.len()): whole vectors, then the rest through
/// a zero-padded stack buffer (same lanes, same operations, so the same bits).
///
/// # Safety
///
/// The CPU must support `T`'s instruction set.
#[inline(always)]
unsafe fn run<T: V, K: Kernel>(x: &[f32], out: &mut [f32]) {
    const { assert!(T::LANES <= 16) }; // the tail buffer
    let n = x.len().min(out.len());
    let (xp, op) = (x.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    while i + T::LANES <= n {
        K::eval(T::load(xp.add(i))).store(op.add(i));
        i += T::LANES;
    }
    if i < n {
        let mut buf = [0.0f32; 16];
        let m = n - i;
        buf[..m].copy_from_slice(&x[i..n]);
        K::eval(T::load(buf.as_ptr())).store(buf.as_mut_ptr());
        out[i..n].copy_from_slice(&buf[..m]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512<K: Kernel>(x: &[f32], out: &mut [f32]) {
    run::<__m512, K>(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2<K: Kernel>(x: &[f32], out: &mut [f32]) {
    run::<__m256, K>(x, out)
}

/// The scalar level compiled with the FMA instruction (otherwise `f32::mul_add` is a call to
/// the C library's `fmaf`, about 15 times slower); same operations, same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn run_scalar_fma<K: Kernel>(x: &[f32], out: &mut [f32]) {
    run::<f32, K>(x, out)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn run_neon<K: Kernel>(x: &[f32], out: &mut [f32]) {
    run::<float32x4_t, K>(x, out)
}

/// Runs `K` at level `l`, which must be supported (callers pass [`level`] or [`cap`]'s result).
#[inline]
fn apply<K: Kernel>(l: Level, x: &[f32], out: &mut [f32]) {
    match l {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `l` comes from `level()` or `cap()`, which only return supported levels, so
        // the CPU has AVX-512F.
        Level::Avx512 => unsafe { run_avx512::<K>(x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, the CPU has AVX2 and FMA.
        Level::Avx2 => unsafe { run_avx2::<K>(x, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as above, the CPU has NEON.
        Level::Neon => unsafe { run_neon::<K>(x, out) },
        _ => {
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("fma") {
                // SAFETY: the CPU has FMA (checked just above).
                return unsafe { run_scalar_fma::<K>(x, out) };
            }
            // SAFETY: the f32 implementation of `V` needs no CPU feature.
            unsafe { run::<f32, K>(x, out) }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The math, once for every vector type.

/// 1.5·2^23: x + MAGIC rounds x (|x| < 2^22) to an integer n, and the bits of the sum are
/// MAGIC_BITS + n.
const MAGIC: f32 = 12_582_912.0;
const MAGIC_BITS: u32 = 0x4b40_0000;
/// ln 2 = LN2_HI + LN2_LO; LN2_HI = 22713·2^−15, so n·LN2_HI is exact for |n| < 700.
#[allow(clippy::excessive_precision)]
const LN2_HI: f32 = 0.693_145_751_953_125;
const LN2_LO: f32 = 1.428_606_8e-6;
/// e^r = 1 + r + r²·(E2 + E3·r + … + E6·r⁴) on |r| ≤ ln2/2 + 0.002, relative error 5.0e-9.
const E2: f32 = 0.499_999_94;
const E3: f32 = 0.166_665_17;
const E4: f32 = 0.041_668_426;
const E5: f32 = 0.008_369_118;
const E6: f32 = 0.001_381_376_8;
/// 2^−32.
const TWO_M32: f32 = 2.328_306_4e-10;

/// c[0] + x·(c[1] + x·(… + x·c[last])).
#[inline(always)]
unsafe fn horner<T: V>(x: T, c: &[f32]) -> T {
    let (last, rest) = c.split_last().unwrap_or((&0.0, &[]));
    let mut p = T::splat(*last);
    for &k in rest.iter().rev() {
        p = p.fma(x, T::splat(k));
    }
    p
}

/// e^(h + l)·2^BIAS for h ∈ [−120, 89] (or NaN) and |l| ≤ 2^−20·max(|h|, 1) (absent: 0).
/// n + BIAS must lie in [−152, 254] (n = round(h·log2 e)); 2^(n+BIAS) is applied as two
/// normal factors, so the result is rounded once, subnormal or infinite included.
#[inline(always)]
unsafe fn exp_core<T: V, const BIAS: i32>(h: T, l: Option<T>) -> T {
    let t = h.fma(T::splat(std::f32::consts::LOG2_E), T::splat(MAGIC));
    let n = t.sub(T::splat(MAGIC));
    let rh = n.fnma(T::splat(LN2_HI), h); // exact
    let r = match l {
        None => n.fnma(T::splat(LN2_LO), rh),
        Some(l) => rh.add(n.fnma(T::splat(LN2_LO), l)),
    };
    let r2 = r.mul(r);
    let a = T::splat(E3).fma(r, T::splat(E2));
    let b = T::splat(E5).fma(r, T::splat(E4));
    let b = T::splat(E6).fma(r2, b);
    let q = b.fma(r2, a);
    let one = T::splat(1.0);
    let p = q.fma(r, one).fma(r, one);
    // k = n + BIAS as integer bits, split k = k1 + k2 with both in the normal exponent range.
    let k = t.isub(T::bits(MAGIC_BITS.wrapping_sub(BIAS as u32)));
    let k1 = k.sra1();
    let k2 = k.isub(k1);
    let s1 = k1.iadd(T::bits(127)).shl23();
    let s2 = k2.iadd(T::bits(127)).shl23();
    p.mul(s1).mul(s2)
}

#[inline(always)]
unsafe fn exp_v<T: V>(x: T) -> T {
    // Clamps keep NaN (min/max return their second operand for NaN).
    let xc = T::splat(-104.0).max(T::splat(89.0).min(x));
    exp_core::<T, 0>(xc, None)
}

/// ln(1 + f) = f − f²/2 + f³·P(f) on f ∈ [√½ − 1, √2 − 1], relative error 7.5e-10.
const LOG_P: [f32; 9] = [
    0.333_333_13,
    -0.250_000_1,
    0.200_021_19,
    -0.166_679_96,
    0.142_195_52,
    -0.124_055_885,
    0.118_881_61,
    -0.116_756_53,
    0.067_466_43,
];
/// ln 2 in two parts for log: LOG_LN2_HI = 355/512, so k·LOG_LN2_HI is exact.
#[allow(clippy::excessive_precision)]
const LOG_LN2_HI: f32 = 0.693_359_375;
const LOG_LN2_LO: f32 = -2.121_944_4e-4;

#[inline(always)]
unsafe fn log_v<T: V>(x: T) -> T {
    let tiny = x.lt(T::splat(f32::MIN_POSITIVE));
    let xs = T::select(tiny, x.mul(T::splat(8_388_608.0)), x); // 2^23
    let ix = xs.isub(T::bits(0x3f35_04f3)); // bits of √½
    let k = ix.sra23();
    let m = ix.and(T::bits(0x007f_ffff)).iadd(T::bits(0x3f35_04f3));
    let f = m.sub(T::splat(1.0)); // exact
    let kf = k.iadd(T::bits(MAGIC_BITS)).sub(T::splat(MAGIC));
    let kf = kf.sub(T::select(tiny, T::splat(23.0), T::splat(0.0)));
    let p = horner(f, &LOG_P);
    let y = f.mul(f).fma(f.fma(p, T::splat(-0.5)), f);
    let r = kf.fma(T::splat(LOG_LN2_HI), kf.fma(T::splat(LOG_LN2_LO), y));
    let r = T::select(x.eq(T::splat(f32::INFINITY)), x, r);
    let r = T::select(x.eq(T::splat(0.0)), T::splat(f32::NEG_INFINITY), r);
    // x < 0 and NaN fail x ≥ 0.
    T::select(x.ge(T::splat(0.0)), r, T::splat(f32::NAN))
}

/// tanh a = a + a³·P(a²) on [0, 0.625], relative error 1.6e-10.
const TANH_P: [f32; 6] = [
    -0.333_333_3,
    0.133_332_06,
    -0.053_946_763,
    0.021_700_703,
    -0.008_177_399,
    0.002_142_961_8,
];
const TANH_T: f32 = 0.625;

#[inline(always)]
unsafe fn tanh_v<T: V>(x: T) -> T {
    let sign = x.and(T::splat(-0.0));
    let a = x.abs();
    let z = a.mul(a);
    let small = a.mul(z).fma(horner(z, &TANH_P), a);
    let e = exp_core::<T, 0>(T::splat(-104.0).max(a.mul(T::splat(-2.0))), None);
    let one = T::splat(1.0);
    let big = one.sub(e).div(one.add(e));
    T::select(a.lt(T::splat(TANH_T)), small, big).or(sign)
}

/// erf a = a·(P0 + P0L + z·(P[2] + z·(…))), z = a², on [0, 0.46875] (relative error 7.2e-10);
/// P0 + P0L ≈ 2/√π.
const ERF_P: [f32; 6] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -5.944_321_7e-8,
    -0.376_126_2,
    0.112_831_28,
    -0.026_781_268,
    0.004_776_347_4,
];
const ERF_T: f32 = 0.468_75;
/// erf(x/√2) = x·(P0 + P0L + z·(…)), z = x², on [0, 0.65625], for gelu_erf.
const GELU_P: [f32; 6] = [
    0.797_884_6,
    -2.540_282_5e-8,
    -0.132_980_63,
    0.019_945_443,
    -0.002_365_697_9,
    0.000_209_671_15,
];
const GELU_T: f32 = 0.656_25;
/// R(s) = ln erfc(s/√2) + s²/2 on [0.65, 2) and [2, 5.66] (two fits): [c, c0, c0 low part,
/// c1, c1 low part, c2, …, c9] for R(s) = Σ ck·(s − c)^k; absolute error ≤ 2.4e-10.
const ERFC_R1: [f32; 13] = [
    1.25,
    -0.773_228_5,
    2.946_007e-8,
    -0.478_816_63,
    1.093_931_1e-9,
    0.086_106_926,
    -0.016_438_598,
    0.002_807_084_7,
    -0.000_377_110_82,
    2.556_510_3e-5,
    5.034_876e-6,
    -2.452_518_4e-6,
    4.786_934_4e-7,
];
const ERFC_R2: [f32; 13] = [
    4.0,
    -1.666_954_3,
    -2.690_590_2e-8,
    -0.225_607_14,
    -1.488_315_6e-9,
    0.023_336_418,
    -0.002_976_062_2,
    0.000_396_111_72,
    -5.209_832_3e-5,
    6.567_220_7e-6,
    -7.764_912e-7,
    8.239_669_6e-8,
    -5.814_934_8e-9,
];
/// Upper end of the fits of R.
const ERFC_S_MAX: f32 = 5.656_25;

/// erfc(s/√2) for s ≥ 0.65 (or NaN), given s²/2 exactly as `hh + hl`: exp(−s²/2 + R(s)), the
/// exponent summed in double-f32. s is clamped to 5.65625 inside R only.
#[inline(always)]
unsafe fn erfc_exp<T: V>(s: T, hh: T, hl: T) -> T {
    let sc = T::splat(ERFC_S_MAX).min(s);
    let lo = sc.lt(T::splat(2.0));
    let c = |i: usize| T::select(lo, T::splat(ERFC_R1[i]), T::splat(ERFC_R2[i]));
    let d = sc.sub(c(0)); // exact: sc and c are within a factor 2
    let mut q = c(12);
    for i in (5..12).rev() {
        q = q.fma(d, c(i));
    }
    // R = c0 + c1·d + (c0l + c1l·d + d²·q), with c0 + c1·d as h + hlo exactly
    let (c0, c1) = (c(1), c(3));
    let mh = c1.mul(d);
    let ml = c1.fma(d, mh.neg());
    let h = c0.add(mh);
    let hlo = mh.sub(h.sub(c0)); // |c0| ≥ |c1·d|
    let l = d.mul(d).fma(q, c(4).fma(d, c(2))).add(ml).add(hlo);
    // E = −(hh + hl) + h + l
    let nh = hh.neg();
    let eh = nh.add(h);
    let bb = eh.sub(nh);
    let err = nh.sub(eh.sub(bb)).add(h.sub(bb));
    let el = err.add(l.sub(hl));
    exp_core::<T, 0>(T::splat(-104.0).max(eh), Some(el))
}

#[inline(always)]
unsafe fn erf_v<T: V>(x: T) -> T {
    let sign = x.and(T::splat(-0.0));
    let a = x.abs();
    let z = a.mul(a);
    let p = z.fma(horner(z, &ERF_P[2..]), T::splat(ERF_P[1]));
    let small = a.fma(T::splat(ERF_P[0]), a.mul(p));
    let ac = T::splat(4.0).min(a);
    let hh = ac.mul(ac);
    let hl = ac.fma(ac, hh.neg());
    let e = erfc_exp(ac.mul(T::splat(std::f32::consts::SQRT_2)), hh, hl);
    let big = T::splat(1.0).sub(e);
    T::select(a.lt(T::splat(ERF_T)), small, big).or(sign)
}

#[inline(always)]
unsafe fn gelu_erf_v<T: V>(x: T) -> T {
    let a = x.abs();
    let z = x.mul(x);
    let p = z.fma(horner(z, &GELU_P[2..]), T::splat(GELU_P[1]));
    let one = T::splat(1.0);
    let small = x.fma(T::splat(GELU_P[0]), x.mul(p)).add(one); // 1 + erf(x/√2)
    let ac = T::splat(16.0).min(a);
    let sh = ac.mul(ac);
    let sl = ac.fma(ac, sh.neg());
    let half = T::splat(0.5);
    let e = erfc_exp(ac, sh.mul(half), sl.mul(half)); // erfc(|x|/√2)
    let big = T::select(x.lt(T::splat(0.0)), e, T::splat(2.0).sub(e));
    let s = T::select(a.lt(T::splat(GELU_T)), small, big);
    T::splat(-16.0).max(x).mul(s.mul(half))
}

/// num·σ(y) for y = yh + yl (yl absent: 0), `neg` = lanes with y < 0:
/// num/(1 + w) for y ≥ 0 and num·w/(1 + w) for y < 0, w = e^(−|y|) ∈ (0, 1] computed as
/// 2^32·w (normal down to |y| = 120, the clamp).
#[inline(always)]
unsafe fn xsig<T: V>(num: T, yh: T, yl: Option<T>, neg: T::M) -> T {
    let ah = T::splat(-120.0).max(T::select(neg, yh, yh.neg()));
    let al = yl.map(|l| T::select(neg, l, l.neg()));
    let wb = exp_core::<T, 32>(ah, al);
    let w = wb.mul(T::splat(TWO_M32));
    let numer = T::select(neg, num.mul(wb).mul(T::splat(TWO_M32)), num);
    numer.div(T::splat(1.0).add(w))
}

#[inline(always)]
unsafe fn sigmoid_v<T: V>(x: T) -> T {
    xsig(T::splat(1.0), x, None, x.lt(T::splat(0.0)))
}

#[inline(always)]
unsafe fn silu_v<T: V>(x: T) -> T {
    // x < −120 gives −120·(≈0) = −0; −inf must not reach the product.
    xsig(T::splat(-120.0).max(x), x, None, x.lt(T::splat(0.0)))
}

/// 2·√(2/π) and 0.044715, each as an f32 pair.
const GT_CH: f32 = 1.595_769_2;
const GT_CL: f32 = -4.534_068e-8;
const GT_KH: f32 = 0.044_715;
const GT_KL: f32 = 1.546_144_4e-9;

#[inline(always)]
unsafe fn gelu_tanh_v<T: V>(x: T) -> T {
    // σ(2u) is 1 beyond |x| = 12 (2u > 142) and the product 0 below −12.
    let xc = T::splat(-12.0).max(T::splat(12.0).min(x));
    let x2h = xc.mul(xc);
    let x2l = xc.fma(xc, x2h.neg());
    let x3h = x2h.mul(xc);
    let x3l = x2l.fma(xc, x2h.fma(xc, x3h.neg()));
    let (kh, kl) = (T::splat(GT_KH), T::splat(GT_KL));
    let th = kh.mul(x3h);
    let tl = kh.fma(x3h, th.neg()).add(kh.fma(x3l, kl.mul(x3h)));
    // w = xc + K·x³ (two-sum)
    let wh = xc.add(th);
    let bb = wh.sub(xc);
    let wl = xc.sub(wh.sub(bb)).add(th.sub(bb)).add(tl);
    let (ch, cl) = (T::splat(GT_CH), T::splat(GT_CL));
    let yh = ch.mul(wh);
    let yl = ch.fma(wh, yh.neg()).add(ch.fma(wl, cl.mul(wh)));
    let neg = x.lt(T::splat(0.0));
    xsig(T::select(neg, xc, x), yh, Some(yl), neg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels() -> Vec<Level> {
        Level::ALL
            .into_iter()
            .filter(|l| l.is_supported())
            .collect()
    }

    /// f64 reference of each function.
    fn reference(f: Func, x: f32) -> f64 {
        let x = x as f64;
        let sig = |y: f64| 1.0 / (1.0 + (-y).exp());
        match f {
            Func::Exp => x.exp(),
            Func::Log => x.ln(),
            Func::Tanh => x.tanh(),
            Func::Erf => libm::erf(x),
            Func::Sigmoid => sig(x),
            Func::Silu => {
                if x == f64::NEG_INFINITY {
                    -0.0
                } else {
                    x * sig(x)
                }
            }
            Func::GeluTanh => {
                // 0.5x(1 + tanh u) = x·σ(2u), free of cancellation for x < 0.
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                if x == f64::NEG_INFINITY {
                    -0.0
                } else {
                    x * sig(2.0 * u)
                }
            }
            Func::GeluErf => {
                if x == f64::NEG_INFINITY {
                    -0.0
                } else {
                    0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
                }
            }
        }
    }

    /// |got − want| in units of the f32 spacing at `want` (2^−149 below f32::MIN_POSITIVE);
    /// 0 when both are NaN or the same infinity, +inf for a NaN or infinity mismatch.
    fn ulp_err(got: f32, want: f64) -> f64 {
        if want.is_nan() || got.is_nan() {
            return if want.is_nan() && got.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        let w32 = want as f32;
        if got.is_infinite() || w32.is_infinite() {
            return if got == w32 { 0.0 } else { f64::INFINITY };
        }
        let aw = want.abs();
        let e = if aw < f32::MIN_POSITIVE as f64 {
            -126
        } else {
            ((aw.to_bits() >> 52) as i32 - 1023).min(127)
        };
        (got as f64 - want).abs() / 2f64.powi(e - 23)
    }

    fn bound(f: Func) -> f64 {
        match f {
            Func::Exp | Func::Log => 2.0,
            Func::Tanh | Func::Erf | Func::Sigmoid => 3.0,
            Func::Silu | Func::GeluTanh | Func::GeluErf => 4.0,
        }
    }

    fn specials() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::from_bits(0x007f_ffff),
            1e-40,
            f32::MAX,
            f32::MIN,
            f32::EPSILON,
            88.722_83,
            88.722_84,
            -87.336_55,
            -103.972_07,
            -103.972_09,
            -104.0,
            89.0,
            -120.0,
            120.0,
            12.0,
            -12.0,
            16.0,
            -16.0,
            4.0,
            -4.0,
            3.92,
            2.0,
            -2.0,
            std::f32::consts::SQRT_2,
            TANH_T,
            ERF_T,
            GELU_T,
            ERFC_S_MAX,
            0.65,
            -10.7,
            -4.8,
            -108.7,
        ];
        let base = v.clone();
        for x in base {
            if x.is_finite() && x != 0.0 {
                v.push(f32::from_bits(x.to_bits() + 1));
                v.push(f32::from_bits(x.to_bits() - 1));
            }
        }
        v
    }

    /// Every 1021st bit pattern of both signs (NaNs excluded) plus the special values.
    fn sweep_inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=0x7f80_0000u32)
            .step_by(1021)
            .flat_map(|b| [f32::from_bits(b), f32::from_bits(b | 0x8000_0000)])
            .collect();
        v.extend(specials());
        v
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn accuracy_and_levels_agree() {
        let x = sweep_inputs();
        let mut out = vec![0.0f32; x.len()];
        let mut scalar = vec![0.0f32; x.len()];
        for f in Func::ALL {
            let want: Vec<f64> = x.iter().map(|&v| reference(f, v)).collect();
            eval_at(f, Level::Scalar, &x, &mut scalar);
            for l in levels() {
                eval_at(f, l, &x, &mut out);
                let (mut max_ulp, mut at, mut max_abs) = (0.0f64, 0.0f32, 0.0f64);
                let gelu = matches!(f, Func::GeluTanh | Func::GeluErf);
                for ((&xi, &g), &w) in x.iter().zip(&out).zip(&want) {
                    if gelu && w.abs() <= 1e-6 {
                        max_abs = max_abs.max((g as f64 - w).abs());
                        continue;
                    }
                    let e = ulp_err(g, w);
                    if e > max_ulp {
                        (max_ulp, at) = (e, xi);
                    }
                }
                eprintln!(
                    "vmath {:>9} {:>6}: max {max_ulp:.3} ulp (at x = {at:e}){}",
                    f.name(),
                    l.name(),
                    if gelu {
                        format!(", max abs err {max_abs:.2e} where |f| <= 1e-6")
                    } else {
                        String::new()
                    }
                );
                assert!(
                    max_ulp <= bound(f),
                    "{} at {}: {max_ulp} ulp at x = {at:e}",
                    f.name(),
                    l.name()
                );
                assert!(
                    max_abs <= 1e-7,
                    "{} at {}: abs {max_abs}",
                    f.name(),
                    l.name()
                );
                for (i, (&a, &b)) in out.iter().zip(&scalar).enumerate() {
                    assert!(
                        same(a, b),
                        "{} at {} differs from scalar at x = {:e}: {a:e} vs {b:e}",
                        f.name(),
                        l.name(),
                        x[i]
                    );
                }
            }
        }
    }

    fn eval1(f: Func, l: Level, x: f32) -> f32 {
        let mut o = [0.0f32];
        eval_at(f, l, &[x], &mut o);
        o[0]
    }

    #[test]
    fn special_values() {
        let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
        let bits = |v: f32| v.to_bits();
        for l in levels() {
            let e = |f: Func, x: f32| eval1(f, l, x);
            for f in Func::ALL {
                assert!(e(f, f32::NAN).is_nan(), "{} NaN", f.name());
                assert!(e(f, -f32::NAN).is_nan(), "{} -NaN", f.name());
            }
            assert_eq!(e(Func::Exp, inf), inf);
            assert_eq!(bits(e(Func::Exp, ninf)), 0);
            assert_eq!(e(Func::Exp, 0.0), 1.0);
            assert_eq!(e(Func::Exp, -0.0), 1.0);
            assert_eq!(e(Func::Exp, 88.722_84), inf);
            assert!(e(Func::Exp, 88.722_83).is_finite());
            assert_eq!(e(Func::Exp, -103.972_09), 0.0);
            assert_eq!(e(Func::Exp, -103.972_07), f32::from_bits(1));
            // subnormal results are rounded, not flushed
            assert_eq!(e(Func::Exp, -100.0), (-100.0f64).exp() as f32);
            assert_eq!(e(Func::Log, inf), inf);
            assert_eq!(e(Func::Log, 0.0), ninf);
            assert_eq!(e(Func::Log, -0.0), ninf);
            assert!(e(Func::Log, -1.0).is_nan());
            assert!(e(Func::Log, ninf).is_nan());
            assert_eq!(e(Func::Log, 1.0), 0.0);
            assert_eq!(e(Func::Tanh, inf), 1.0);
            assert_eq!(e(Func::Tanh, ninf), -1.0);
            assert_eq!(bits(e(Func::Tanh, -0.0)), bits(-0.0));
            assert_eq!(bits(e(Func::Tanh, 0.0)), 0);
            assert_eq!(e(Func::Tanh, 1e-20), 1e-20);
            let t = e(Func::Tanh, -3e-4);
            assert!((t as f64 - (-3e-4f64).tanh()).abs() <= 3e-4 * f64::from(f32::EPSILON));
            assert_eq!(e(Func::Erf, inf), 1.0);
            assert_eq!(e(Func::Erf, ninf), -1.0);
            assert_eq!(bits(e(Func::Erf, -0.0)), bits(-0.0));
            assert_eq!(bits(e(Func::Erf, 0.0)), 0);
            assert_eq!(e(Func::Sigmoid, inf), 1.0);
            assert_eq!(bits(e(Func::Sigmoid, ninf)), 0);
            assert_eq!(e(Func::Sigmoid, 0.0), 0.5);
            assert_eq!(e(Func::Sigmoid, -0.0), 0.5);
            assert_eq!(e(Func::Silu, inf), inf);
            assert_eq!(bits(e(Func::Silu, ninf)), bits(-0.0));
            assert_eq!(bits(e(Func::Silu, -0.0)), bits(-0.0));
            assert_eq!(bits(e(Func::Silu, 0.0)), 0);
            for g in [Func::GeluTanh, Func::GeluErf] {
                assert_eq!(e(g, inf), inf, "{}", g.name());
                assert_eq!(bits(e(g, ninf)), bits(-0.0), "{}", g.name());
                assert_eq!(bits(e(g, -0.0)), bits(-0.0), "{}", g.name());
                assert_eq!(bits(e(g, 0.0)), 0, "{}", g.name());
                assert_eq!(e(g, 1e30), 1e30, "{}", g.name());
                assert_eq!(bits(e(g, -1e30)), bits(-0.0), "{}", g.name());
            }
        }
    }

    #[test]
    fn tails_and_positions() {
        let mut r = tensorforge_core::rng::SplitMix64::new(7);
        let mut pool: Vec<f32> = (0..1000).map(|_| r.next_f32_pm1() * 12.0).collect();
        for (i, s) in specials().into_iter().enumerate() {
            pool[i * 7 % 1000] = s;
        }
        for l in levels() {
            for f in Func::ALL {
                // each element alone (the tail path) gives the bits of the full-slice run
                let mut full = vec![0.0f32; pool.len()];
                eval_at(f, l, &pool, &mut full);
                for (&x, &y) in pool.iter().zip(&full) {
                    assert!(
                        same(eval1(f, l, x), y),
                        "{} {} x = {x:e}",
                        f.name(),
                        l.name()
                    );
                }
                for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 33, 1000] {
                    for off in [0usize, 3] {
                        let x = &pool[off..off + n.min(pool.len() - off)];
                        let mut out = vec![f32::from_bits(0x7fc0_1234); x.len() + 5];
                        eval_at(f, l, x, &mut out);
                        for (i, (&o, &w)) in out.iter().zip(&full[off..]).enumerate() {
                            if i < x.len() {
                                assert!(same(o, w), "{} {} n={n} i={i}", f.name(), l.name());
                            } else {
                                assert_eq!(o.to_bits(), 0x7fc0_1234, "wrote past n");
                            }
                        }
                        // a shorter `out` bounds n
                        let mut short = vec![0.0f32; x.len() / 2];
                        eval_at(f, l, x, &mut short);
                        for (&o, &w) in short.iter().zip(&full[off..]) {
                            assert!(same(o, w));
                        }
                    }
                }
                // one value everywhere: same output bits at every index
                for &v in &[0.3f32, -5.5, 40.0, -95.0, 1e-39] {
                    let x = vec![v; 37];
                    let mut out = vec![0.0f32; 37];
                    eval_at(f, l, &x, &mut out);
                    assert!(out.iter().all(|&o| same(o, out[0])), "{} {v}", f.name());
                }
            }
        }
    }

    #[test]
    fn level_selection() {
        assert!(level().is_supported());
        assert!(Level::Scalar.is_supported());
        assert_eq!(level_from_env(Some("scalar")), Level::Scalar);
        assert_eq!(level_from_env(Some(" Scalar\n")), Level::Scalar);
        assert_eq!(level_from_env(None), best());
        assert_eq!(level_from_env(Some("sse9")), best());
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()), Some(l));
            let got = level_from_env(Some(l.name()));
            assert_eq!(got, if l.is_supported() { l } else { best() });
        }
        #[cfg(target_arch = "x86_64")]
        if Level::Avx512.is_supported() {
            assert_eq!(best(), Level::Avx512);
            assert_eq!(level_from_env(Some("avx2")), Level::Avx2);
        }
        // an unsupported request must not run (eval_at caps it)
        let mut o = [0.0f32; 3];
        eval_at(Func::Exp, Level::Neon, &[0.0, 1.0, 2.0], &mut o);
        assert_eq!(o[0], 1.0);
    }
}
