//! TensorForge kernels: overflow-safe elementwise and row reductions (`logaddexp`,
//! `logaddexp2`, `logsumexp`, `softmax`, `log_softmax`), saturating quantization with
//! gemmlowp-exact integer requantization, verification sweeps that compare the stable kernels
//! with naive ones, `.npy` encoding on byte buffers, a fused RMSNorm+SwiGLU, and explicit-width
//! SIMD elementwise math over f32 slices ([`vmath`]: exp, log, tanh, erf, sigmoid, SiLU, GELU),
//! a packed f32 GEMM with AVX2 and AVX-512 microkernels and a bias and clamp epilogue ([`sgemm`],
//! [`clamp`]), and out-of-place f32 matrix transposes in 8 × 8 register blocks ([`transpose`]).
//! The crate performs no file I/O and never panics on user input; errors are [`KernelError`].
//!
//! ```
//! // log(e^1000 + e^1000) = 1000 + ln 2: the naive form overflows f32 (e^1000 = inf).
//! let (a, b) = ([1000.0f32, -5.0], [1000.0f32, -5.0]);
//! let mut out = [0.0f32; 2];
//! tensorforge_kernels::logaddexp_slice(&a, &b, &mut out).unwrap();
//! assert!((out[0] - (1000.0 + std::f32::consts::LN_2)).abs() < 1e-3);
//! assert!((out[1] - (-5.0 + std::f32::consts::LN_2)).abs() < 1e-6);
//! ```
#![warn(missing_docs)]

pub mod block;
pub mod call;
pub mod clamp;
pub mod dd;
pub mod elementary;
pub mod fused;
pub mod naive;
pub mod npy;
pub mod quant;
pub mod reference;
pub mod sgemm;
pub mod simd;
pub mod transpose;
pub mod verify;
pub mod vmath;

pub use elementary::{
    log_softmax, logaddexp, logaddexp2, logaddexp2_slice, logaddexp_slice, logsumexp, softmax,
    Float, Shape2,
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The one error type of this crate.
#[derive(Debug, Clone, PartialEq, Error, Serialize, Deserialize)]
pub enum KernelError {
    /// Two buffers that must agree in length do not.
    #[error("length mismatch for `{what}`: expected {expected} elements, got {got}")]
    LengthMismatch {
        /// Which buffer.
        what: String,
        /// Required length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// A shape whose element count or byte size overflows `usize`.
    #[error("shape {shape:?} overflows the addressable size")]
    ShapeOverflow {
        /// The offending shape.
        shape: Vec<usize>,
    },
    /// A quantization scale that is zero, negative, NaN or infinite.
    #[error("invalid scale {scale:?} at index {index}: a scale must be finite and > 0")]
    InvalidScale {
        /// The offending scale (the f32 the kernel received, printed as its shortest form).
        scale: f32,
        /// Its position (0 for per-tensor).
        index: usize,
    },
    /// A zero point outside the range of the quantized type.
    #[error("zero point {zero_point} at index {index} is outside [{min}, {max}] of {dtype}")]
    ZeroPointOutOfRange {
        /// The offending zero point.
        zero_point: i64,
        /// Its position (0 for per-tensor).
        index: usize,
        /// Type name (`u8`, `i8`).
        dtype: String,
        /// Smallest code.
        min: i64,
        /// Largest code.
        max: i64,
    },
    /// An axis not below the rank of the tensor.
    #[error("axis {axis} is out of range for a tensor of rank {rank}")]
    AxisOutOfRange {
        /// Requested axis.
        axis: usize,
        /// Tensor rank.
        rank: usize,
    },
    /// A requantization multiplier that is not finite and positive.
    #[error("invalid requantization multiplier {multiplier}: must be finite and > 0")]
    InvalidMultiplier {
        /// input_scale / output_scale.
        multiplier: f64,
    },
    /// A malformed or unsupported `.npy` buffer.
    #[error("npy: {0}")]
    Npy(String),
    /// Any other invalid argument, described.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Element count of a shape with overflow checking.
pub fn checked_numel(shape: &[usize]) -> Result<usize, KernelError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| KernelError::ShapeOverflow {
            shape: shape.to_vec(),
        })
}

pub(crate) fn check_len(what: &str, expected: usize, got: usize) -> Result<(), KernelError> {
    if expected != got {
        return Err(KernelError::LengthMismatch {
            what: what.to_string(),
            expected,
            got,
        });
    }
    Ok(())
}
