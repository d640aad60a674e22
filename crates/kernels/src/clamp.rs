//! A clamp of a kernel's results before they are stored (a convolution's or GEMM's ReLU or
//! ReLU6 epilogue), with the exact semantics of the graph ops it replaces: ONNX `Clip`'s
//! lower then upper bound (`x < lo → lo`, `x > hi → hi`; a NaN or −0 kept), or with `relu`
//! the lower bound as ONNX `Relu`'s `fmax(x, lo)` (`x > lo ? x : lo`: a NaN and −0 become
//! `lo`). Vector forms use `max`/`min` with the operand order that gives the same results
//! (x86's `max(a, b)` is `a > b ? a : b`).
//!
//! Left out: other activations (GELU, SiLU: module `vmath`), NaN bounds (a caller folds only
//! non-NaN scalar bounds into a clamp).
//!
//! ```
//! use tensorforge_kernels::clamp::Clamp;
//! let relu6 = Clamp { lo: 0.0, hi: 6.0, relu: false };
//! let mut xs = [-1.0f32, 3.0, 7.0, -0.0];
//! relu6.apply_slice(&mut xs);
//! assert_eq!(xs, [0.0, 3.0, 6.0, -0.0]); // Clip keeps −0
//! assert_eq!(Clamp { relu: true, ..relu6 }.apply(f32::NAN), 0.0); // fmax(NaN, 0) = 0
//! ```

use serde::{Deserialize, Serialize};

/// Bounds applied to each value: see the module documentation for the exact semantics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Clamp {
    /// Values below are raised to it.
    pub lo: f32,
    /// Values above are lowered to it.
    pub hi: f32,
    /// The lower bound as `fmax` (ReLU) rather than `Clip`'s compare.
    pub relu: bool,
}

impl Clamp {
    /// No clamp: every value passes unchanged.
    pub const NONE: Clamp = Clamp {
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
        relu: false,
    };

    /// Whether this is [`Clamp::NONE`].
    pub fn is_none(&self) -> bool {
        *self == Clamp::NONE
    }

    /// `x` clamped: `min(max(x, lo), hi)` with the semantics above.
    #[inline(always)]
    pub fn apply(&self, x: f32) -> f32 {
        let y = if self.relu {
            if x > self.lo {
                x
            } else {
                self.lo
            }
        } else if x < self.lo {
            self.lo
        } else {
            x
        };
        if y > self.hi {
            self.hi
        } else {
            y
        }
    }

    /// Every value of `xs` clamped in place.
    pub fn apply_slice(&self, xs: &mut [f32]) {
        if self.is_none() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if crate::simd::avx2_fma() {
            // SAFETY: the CPU has AVX2 (checked).
            unsafe { self.apply_slice_avx2(xs) };
            return;
        }
        xs.iter_mut().for_each(|x| *x = self.apply(*x));
    }

    /// [`Clamp::apply`] on the 16 lanes of `x`: `min(hi, max(lo, x))` for `Clip`,
    /// `min(hi, max(x, lo))` for `relu`. x86's `max(a, b)` is `a > b ? a : b`, so the
    /// operand order gives the scalar form's bits (a NaN or −0 kept by `Clip`, turned to `lo`
    /// by `Relu`). Inline, for a caller compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn apply_m512(&self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        let lo = _mm512_set1_ps(self.lo);
        let y = if self.relu {
            _mm512_max_ps(x, lo)
        } else {
            _mm512_max_ps(lo, x)
        };
        _mm512_min_ps(_mm512_set1_ps(self.hi), y)
    }

    /// [`Clamp::apply_m512`] on the 8 lanes of `x`, for a caller compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn apply_m256(&self, x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        let lo = _mm256_set1_ps(self.lo);
        let y = if self.relu {
            _mm256_max_ps(x, lo)
        } else {
            _mm256_max_ps(lo, x)
        };
        _mm256_min_ps(_mm256_set1_ps(self.hi), y)
    }

    /// [`Clamp::apply_slice`] compiled for AVX2, where the compiler vectorizes the selects.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_slice_avx2(&self, xs: &mut [f32]) {
        xs.iter_mut().for_each(|x| *x = self.apply(*x));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_and_relu_keep_their_ops_semantics() {
        let clip = Clamp {
            lo: 0.0,
            hi: 6.0,
            relu: false,
        };
        let relu = Clamp {
            hi: f32::INFINITY,
            relu: true,
            ..clip
        };
        // Clip: NaN stays NaN, −0 stays −0 (−0 < 0 is false); Relu: fmax gives 0 for both.
        assert!(clip.apply(f32::NAN).is_nan());
        assert_eq!(clip.apply(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(relu.apply(f32::NAN), 0.0);
        assert_eq!(relu.apply(-0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(relu.apply(1e30), 1e30);
        // The slice form (vectorized on AVX2) gives the scalar form's bits for all of them.
        let xs = [
            f32::NAN,
            -0.0,
            0.0,
            -3.5,
            2.0,
            6.0,
            6.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for c in [clip, relu, Clamp::NONE] {
            let mut v: Vec<f32> = xs.iter().cycle().take(100).copied().collect();
            let want: Vec<u32> = v.iter().map(|&x| c.apply(x).to_bits()).collect();
            c.apply_slice(&mut v);
            assert_eq!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
            // And the vector forms, on every width this CPU has.
            #[cfg(target_arch = "x86_64")]
            {
                let mut v: Vec<f32> = xs.iter().cycle().take(16).copied().collect();
                let want: Vec<u32> = v.iter().map(|&x| c.apply(x).to_bits()).collect();
                if crate::simd::avx2_fma() {
                    // SAFETY: the CPU has AVX2 (checked); v holds 16 values.
                    let got = unsafe {
                        use std::arch::x86_64::*;
                        let mut out = [0f32; 16];
                        for h in 0..2 {
                            let y = c.apply_m256(_mm256_loadu_ps(v.as_ptr().add(8 * h)));
                            _mm256_storeu_ps(out.as_mut_ptr().add(8 * h), y);
                        }
                        out
                    };
                    assert_eq!(got.map(f32::to_bits).to_vec(), want);
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked); v holds 16 values.
                    unsafe {
                        use std::arch::x86_64::*;
                        let y = c.apply_m512(_mm512_loadu_ps(v.as_ptr()));
                        _mm512_storeu_ps(v.as_mut_ptr(), y);
                    }
                    assert_eq!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
                }
            }
        }
    }
}
