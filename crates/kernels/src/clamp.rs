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
        }
    }
}
