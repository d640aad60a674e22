//! Vectors of f32 at the CPU's width for the kernels that work on NCHW planes in registers
//! (`depthwise_planes`, `depthwise_small`, `winograd`, `pooling`): 16 lanes with AVX-512F,
//! 8 with AVX2 and FMA. One trait, [`Isa`], names the few operations they need (masked
//! loads that read nothing outside a plane, the even or odd lanes of two vectors,
//! interleaving, `V × V` transposes, NaN-propagating maxima, masked stores), so that each
//! kernel is written once and compiled once per width inside a `#[target_feature]`
//! function.
//!
//! Left out: other widths (SSE, NEON) and every operation those kernels do not use. x86-64
//! only: elsewhere the kernels that use it do not run.
#![cfg(target_arch = "x86_64")]

use tensorforge_kernels::clamp::Clamp;

/// The vector operations of the plane kernels at one width. Every method is
/// `#[inline(always)]` and runs inside a function compiled for its instruction set.
pub(crate) trait Isa {
    /// A vector of `V` f32.
    type F: Copy;
    /// Which lanes a load reads.
    type M: Copy;
    /// Lanes.
    const V: usize;
    unsafe fn splat(x: f32) -> Self::F;
    /// Lanes `i` of a load at column `c0` with `0 ≤ c0 + i < w`.
    unsafe fn inside(c0: isize, w: isize) -> Self::M;
    /// `V` values at `p`, lanes outside `m` zero (and not read).
    unsafe fn load(m: Self::M, p: *const f32) -> Self::F;
    /// `V` values at `p`.
    unsafe fn load_all(p: *const f32) -> Self::F;
    /// `V` values at `p`, lanes outside `m` `fill` (and not read).
    unsafe fn load_or(m: Self::M, p: *const f32, fill: Self::F) -> Self::F;
    /// `b` where `b > a`, else `a` (`a` where either is NaN).
    unsafe fn max(a: Self::F, b: Self::F) -> Self::F;
    /// `b` where `b > a` or `b` is NaN, else `a`: the larger, NaN from either side.
    unsafe fn max_nan(a: Self::F, b: Self::F) -> Self::F;
    /// Lanes `2j` (`odd`: `2j + 1`) of the `2V` values `lo` then `hi`.
    unsafe fn pick(lo: Self::F, hi: Self::F, odd: bool) -> Self::F;
    /// `a·b + c`, one rounding.
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `a + b`.
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    /// `a − b`.
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F;
    /// `a` and `b` interleaved, `a₀ b₀ a₁ b₁ …`: the first `V` values, then the next `V`.
    unsafe fn zip(a: Self::F, b: Self::F) -> (Self::F, Self::F);
    /// `a` clamped, with the semantics of [`Clamp`].
    unsafe fn clamp(a: Self::F, c: Clamp) -> Self::F;
    /// Which lanes [`Isa::store`] writes.
    type K: Copy;
    /// The first `n ≤ V` lanes.
    fn keep(n: usize) -> Self::K;
    /// The lanes `k` of `v` to `p`.
    unsafe fn store(p: *mut f32, v: Self::F, k: Self::K);
    /// The `V × V` block at `src` (rows `ld_s` apart) transposed into `dst` (rows `ld_d`
    /// apart): row `j` of `dst` is column `j` of the block. Rows of the block past `rows`
    /// and lanes past `cols` are read as 0 (and not read); only `dst` rows below `out_rows`
    /// and their lanes below `out_cols` are written.
    #[allow(clippy::too_many_arguments)]
    unsafe fn transpose(
        src: *const f32,
        ld_s: usize,
        rows: usize,
        cols: usize,
        dst: *mut f32,
        ld_d: usize,
        out_rows: usize,
        out_cols: usize,
    );
}

/// 16 lanes, AVX-512F: masked loads and stores, `vpermt2ps`.
pub(crate) struct Avx512;

impl Isa for Avx512 {
    type F = std::arch::x86_64::__m512;
    type M = u16;
    const V: usize = 16;
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::F {
        std::arch::x86_64::_mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn inside(c0: isize, w: isize) -> u16 {
        let upto = (w - c0).clamp(0, 16) as u32;
        let from = (-c0).clamp(0, 16) as u32;
        (((1u32 << upto) - 1) & !((1u32 << from) - 1)) as u16
    }
    #[inline(always)]
    unsafe fn load(m: u16, p: *const f32) -> Self::F {
        std::arch::x86_64::_mm512_maskz_loadu_ps(m, p)
    }
    #[inline(always)]
    unsafe fn load_all(p: *const f32) -> Self::F {
        std::arch::x86_64::_mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_or(m: u16, p: *const f32, fill: Self::F) -> Self::F {
        std::arch::x86_64::_mm512_mask_loadu_ps(fill, m, p)
    }
    #[inline(always)]
    unsafe fn max(a: Self::F, b: Self::F) -> Self::F {
        std::arch::x86_64::_mm512_max_ps(b, a)
    }
    #[inline(always)]
    unsafe fn max_nan(a: Self::F, b: Self::F) -> Self::F {
        use std::arch::x86_64::*;
        // `vmaxps b, a` gives b where b > a, else a (a NaN a included); then a NaN b.
        let m = _mm512_max_ps(b, a);
        _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(b, b), b)
    }
    #[inline(always)]
    unsafe fn pick(lo: Self::F, hi: Self::F, odd: bool) -> Self::F {
        use std::arch::x86_64::*;
        let idx = if odd {
            _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1)
        } else {
            _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0)
        };
        _mm512_permutex2var_ps(lo, idx, hi)
    }
    #[inline(always)]
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F {
        std::arch::x86_64::_mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F {
        std::arch::x86_64::_mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F {
        std::arch::x86_64::_mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn zip(a: Self::F, b: Self::F) -> (Self::F, Self::F) {
        use std::arch::x86_64::*;
        let lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        let hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        (
            _mm512_permutex2var_ps(a, lo, b),
            _mm512_permutex2var_ps(a, hi, b),
        )
    }
    #[inline(always)]
    unsafe fn clamp(a: Self::F, c: Clamp) -> Self::F {
        c.apply_m512(a)
    }
    type K = u16;
    fn keep(n: usize) -> u16 {
        ((1u32 << n) - 1) as u16
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::F, k: u16) {
        std::arch::x86_64::_mm512_mask_storeu_ps(p, k, v)
    }
    #[inline(always)]
    unsafe fn transpose(
        src: *const f32,
        ld_s: usize,
        rows: usize,
        cols: usize,
        dst: *mut f32,
        ld_d: usize,
        out_rows: usize,
        out_cols: usize,
    ) {
        use std::arch::x86_64::*;
        let m = Self::keep(cols.min(16));
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, ri) in r.iter_mut().enumerate().take(rows.min(16)) {
            *ri = _mm512_maskz_loadu_ps(m, src.add(i * ld_s));
        }
        // Pairs of rows interleaved, then pairs of pairs: 128-bit lane L of b[4k + m]
        // holds column 4L + m of rows 4k .. 4k + 4.
        let mut a = [_mm512_setzero_ps(); 16];
        for k in 0..8 {
            a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        let mut b = [_mm512_setzero_ps(); 16];
        for k in 0..4 {
            let (lo, hi) = (_mm512_castps_pd(a[4 * k]), _mm512_castps_pd(a[4 * k + 2]));
            b[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            b[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
            let (lo, hi) = (
                _mm512_castps_pd(a[4 * k + 1]),
                _mm512_castps_pd(a[4 * k + 3]),
            );
            b[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            b[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
        }
        // Row 4L + m of the result: lane L of b[m], b[4 + m], b[8 + m], b[12 + m].
        let k = Self::keep(out_cols.min(16));
        for m in 0..4 {
            let d0 = _mm512_shuffle_f32x4::<0x44>(b[m], b[4 + m]);
            let d1 = _mm512_shuffle_f32x4::<0xEE>(b[m], b[4 + m]);
            let d2 = _mm512_shuffle_f32x4::<0x44>(b[8 + m], b[12 + m]);
            let d3 = _mm512_shuffle_f32x4::<0xEE>(b[8 + m], b[12 + m]);
            let rows4 = [
                _mm512_shuffle_f32x4::<0x88>(d0, d2),
                _mm512_shuffle_f32x4::<0xDD>(d0, d2),
                _mm512_shuffle_f32x4::<0x88>(d1, d3),
                _mm512_shuffle_f32x4::<0xDD>(d1, d3),
            ];
            for (l, v) in rows4.into_iter().enumerate() {
                let j = 4 * l + m;
                if j < out_rows {
                    _mm512_mask_storeu_ps(dst.add(j * ld_d), k, v);
                }
            }
        }
    }
}

/// 8 lanes, AVX2 and FMA: `vmaskmovps` loads, a shuffle and a permute for a stride-2 tap,
/// short stores in pieces of 4, 2 and 1 lanes (a masked store is slow on AMD's cores).
pub(crate) struct Avx2;

impl Isa for Avx2 {
    type F = std::arch::x86_64::__m256;
    type M = std::arch::x86_64::__m256i;
    const V: usize = 8;
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::F {
        std::arch::x86_64::_mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn inside(c0: isize, w: isize) -> Self::M {
        use std::arch::x86_64::*;
        let i = _mm256_add_epi32(
            _mm256_set1_epi32(c0.clamp(-64, w.max(0)) as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        let ge0 = _mm256_cmpgt_epi32(i, _mm256_set1_epi32(-1));
        let ltw = _mm256_cmpgt_epi32(_mm256_set1_epi32(w as i32), i);
        _mm256_and_si256(ge0, ltw)
    }
    #[inline(always)]
    unsafe fn load(m: Self::M, p: *const f32) -> Self::F {
        std::arch::x86_64::_mm256_maskload_ps(p, m)
    }
    #[inline(always)]
    unsafe fn load_all(p: *const f32) -> Self::F {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_or(m: Self::M, p: *const f32, fill: Self::F) -> Self::F {
        use std::arch::x86_64::*;
        _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m))
    }
    #[inline(always)]
    unsafe fn max(a: Self::F, b: Self::F) -> Self::F {
        std::arch::x86_64::_mm256_max_ps(b, a)
    }
    #[inline(always)]
    unsafe fn max_nan(a: Self::F, b: Self::F) -> Self::F {
        use std::arch::x86_64::*;
        let m = _mm256_max_ps(b, a);
        _mm256_blendv_ps(m, b, _mm256_cmp_ps::<_CMP_UNORD_Q>(b, b))
    }
    #[inline(always)]
    unsafe fn pick(lo: Self::F, hi: Self::F, odd: bool) -> Self::F {
        use std::arch::x86_64::*;
        // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then its 64-bit pairs in the order 0, 2, 1, 3.
        let t = if odd {
            _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)
        } else {
            _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi)
        };
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(t)))
    }
    #[inline(always)]
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F {
        std::arch::x86_64::_mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F {
        std::arch::x86_64::_mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F {
        std::arch::x86_64::_mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn zip(a: Self::F, b: Self::F) -> (Self::F, Self::F) {
        use std::arch::x86_64::*;
        // [a0 b0 a1 b1 | a4 b4 a5 b5] and [a2 b2 a3 b3 | a6 b6 a7 b7], then their halves.
        let (l, h) = (_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
        (
            _mm256_permute2f128_ps::<0x20>(l, h),
            _mm256_permute2f128_ps::<0x31>(l, h),
        )
    }
    #[inline(always)]
    unsafe fn clamp(a: Self::F, c: Clamp) -> Self::F {
        c.apply_m256(a)
    }
    type K = usize;
    fn keep(n: usize) -> usize {
        n
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::F, n: usize) {
        use std::arch::x86_64::*;
        if n == 8 {
            _mm256_storeu_ps(p, v);
            return;
        }
        // 4, 2 and 1 lanes as n's bits say (a copy of n values would be a `memcpy` call).
        let (mut p, mut q) = (p, _mm256_castps256_ps128(v));
        if n & 4 != 0 {
            _mm_storeu_ps(p, q);
            (p, q) = (p.add(4), _mm256_extractf128_ps::<1>(v));
        }
        if n & 2 != 0 {
            _mm_storel_epi64(p.cast(), _mm_castps_si128(q));
            (p, q) = (p.add(2), _mm_movehl_ps(q, q));
        }
        if n & 1 != 0 {
            _mm_store_ss(p, q);
        }
    }
    #[inline(always)]
    unsafe fn transpose(
        src: *const f32,
        ld_s: usize,
        rows: usize,
        cols: usize,
        dst: *mut f32,
        ld_d: usize,
        out_rows: usize,
        out_cols: usize,
    ) {
        use std::arch::x86_64::*;
        let m = Self::inside(0, cols.min(8) as isize);
        let mut r = [_mm256_setzero_ps(); 8];
        for (i, ri) in r.iter_mut().enumerate().take(rows.min(8)) {
            *ri = _mm256_maskload_ps(src.add(i * ld_s), m);
        }
        let mut t = [_mm256_setzero_ps(); 8];
        for k in 0..4 {
            t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        // Within each 128-bit half: u[4h + m] holds column m (of the half) of rows 4h..4h+4.
        let mut u = [_mm256_setzero_ps(); 8];
        for h in 0..2 {
            let (a, b, c, d) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
            u[4 * h] = _mm256_shuffle_ps::<0x44>(a, c);
            u[4 * h + 1] = _mm256_shuffle_ps::<0xEE>(a, c);
            u[4 * h + 2] = _mm256_shuffle_ps::<0x44>(b, d);
            u[4 * h + 3] = _mm256_shuffle_ps::<0xEE>(b, d);
        }
        let n = out_cols.min(8);
        for j in 0..out_rows.min(8) {
            let (m, hi) = (j % 4, j >= 4);
            let v = if hi {
                _mm256_permute2f128_ps::<0x31>(u[m], u[4 + m])
            } else {
                _mm256_permute2f128_ps::<0x20>(u[m], u[4 + m])
            };
            Self::store(dst.add(j * ld_d), v, n);
        }
    }
}
