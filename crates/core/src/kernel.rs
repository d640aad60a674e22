//! The model of the kernels crate's standalone kernels (log-add-exp, logsumexp, softmax,
//! saturating quantization, RMSNorm + SwiGLU): their FLOPs and compulsory DRAM bytes per
//! call, in f32 as the kernels run (the quantizer writes int8). The Core owns these counts so
//! that measurement compares a run against the same arithmetic the model uses everywhere.
//!
//! Conventions: transcendental-dominated kernels (`logaddexp`, `logsumexp`) and the
//! quantizer carry no FLOP count (their cost is not multiply-adds, and a FLOP/s roof would
//! mislead); softmax counts [`SOFTMAX_FLOPS_PER_ELEMENT`] per element; RMSNorm + SwiGLU counts
//! its two GEMMs (`2·2·T·D·F`) plus [`RMSNORM_FLOPS_PER_ELEMENT`]·T·D and
//! [`SWIGLU_FLOPS_PER_ELEMENT`]·T·F. Bytes: every input read once, every output written once.
//! Left out: caches (a row that stays in cache is still charged once), the fused kernel's
//! saving (fused and unfused have the same *compulsory* bytes; the unfused form's extra
//! intermediate traffic is what the measurement shows).

use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::transformer::{
    RMSNORM_FLOPS_PER_ELEMENT, SOFTMAX_FLOPS_PER_ELEMENT, SWIGLU_FLOPS_PER_ELEMENT,
};
use serde::{Deserialize, Serialize};

/// Bytes of one f32 element.
const F32_BYTES: u64 = 4;

/// A kernel of the kernels crate with its problem size.
///
/// ```
/// use tensorforge_core::kernel::KernelWorkload;
/// let s = KernelWorkload::Softmax { rows: 4, cols: 1024 };
/// // Reads and writes 4·1024 f32: 2·4096·4 B = 32768 B; 5 FLOPs per element: 20480.
/// assert_eq!(s.compulsory_bytes().unwrap(), 32_768);
/// assert_eq!(s.flops().unwrap(), Some(20_480));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kernel", rename_all = "snake_case", deny_unknown_fields)]
pub enum KernelWorkload {
    /// `out[i] = logaddexp(a[i], b[i])` over `n` elements.
    Logaddexp {
        /// Elements.
        n: usize,
    },
    /// Row-wise logsumexp of a `rows × cols` matrix.
    Logsumexp {
        /// Rows.
        rows: usize,
        /// Row length.
        cols: usize,
    },
    /// Row-wise softmax of a `rows × cols` matrix.
    Softmax {
        /// Rows.
        rows: usize,
        /// Row length.
        cols: usize,
    },
    /// Per-tensor saturating quantization of `n` f32 values to int8.
    Quantize {
        /// Elements.
        n: usize,
    },
    /// Fused RMSNorm + SwiGLU input projection.
    RmsnormSwigluFused {
        /// Tokens T.
        tokens: usize,
        /// Model width D.
        d_model: usize,
        /// Hidden width F.
        d_ff: usize,
    },
    /// Unfused RMSNorm + SwiGLU (every intermediate materialized).
    RmsnormSwigluUnfused {
        /// Tokens T.
        tokens: usize,
        /// Model width D.
        d_model: usize,
        /// Hidden width F.
        d_ff: usize,
    },
}

fn u(x: usize) -> u64 {
    x as u64
}

impl KernelWorkload {
    /// The operation's name in model output (`logaddexp`, `softmax`, `rmsnorm_swiglu`, ...;
    /// the fused and unfused RMSNorm + SwiGLU are one operation).
    pub fn op_name(&self) -> &'static str {
        match self {
            KernelWorkload::Logaddexp { .. } => "logaddexp",
            KernelWorkload::Logsumexp { .. } => "logsumexp",
            KernelWorkload::Softmax { .. } => "softmax",
            KernelWorkload::Quantize { .. } => "quantize",
            KernelWorkload::RmsnormSwigluFused { .. }
            | KernelWorkload::RmsnormSwigluUnfused { .. } => "rmsnorm_swiglu",
        }
    }

    /// Every size is at least 1.
    pub fn validate(&self) -> Result<()> {
        let sizes: Vec<(&str, usize)> = match *self {
            KernelWorkload::Logaddexp { n } | KernelWorkload::Quantize { n } => vec![("n", n)],
            KernelWorkload::Logsumexp { rows, cols } | KernelWorkload::Softmax { rows, cols } => {
                vec![("rows", rows), ("cols", cols)]
            }
            KernelWorkload::RmsnormSwigluFused {
                tokens,
                d_model,
                d_ff,
            }
            | KernelWorkload::RmsnormSwigluUnfused {
                tokens,
                d_model,
                d_ff,
            } => vec![("tokens", tokens), ("d_model", d_model), ("d_ff", d_ff)],
        };
        for (field, v) in sizes {
            if v == 0 {
                return Err(CoreError::invalid(field, 0, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// FLOPs per call (None for the kernels without a FLOP count, see the module comment):
    /// softmax `5·rows·cols`; RMSNorm + SwiGLU `4·T·D·F + 4·T·D + 5·T·F`.
    pub fn flops(&self) -> Result<Option<u64>> {
        Ok(match *self {
            KernelWorkload::Logaddexp { .. }
            | KernelWorkload::Logsumexp { .. }
            | KernelWorkload::Quantize { .. } => None,
            KernelWorkload::Softmax { rows, cols } => Some(checked_product(
                &[SOFTMAX_FLOPS_PER_ELEMENT, u(rows), u(cols)],
                "softmax FLOPs",
            )?),
            KernelWorkload::RmsnormSwigluFused {
                tokens,
                d_model,
                d_ff,
            }
            | KernelWorkload::RmsnormSwigluUnfused {
                tokens,
                d_model,
                d_ff,
            } => {
                let (t, d, f) = (u(tokens), u(d_model), u(d_ff));
                Some(checked_sum(
                    &[
                        checked_product(&[4, t, d, f], "4·T·D·F (SwiGLU GEMMs)")?,
                        checked_product(&[RMSNORM_FLOPS_PER_ELEMENT, t, d], "RMSNorm FLOPs")?,
                        checked_product(&[SWIGLU_FLOPS_PER_ELEMENT, t, f], "SwiGLU FLOPs")?,
                    ],
                    "RMSNorm + SwiGLU FLOPs",
                )?)
            }
        })
    }

    /// Compulsory DRAM bytes per call: logaddexp `3·4·n` (two inputs, one output);
    /// logsumexp `4·(rows·cols + rows)`; softmax `2·4·rows·cols`; quantize `4·n + n` (f32 in,
    /// int8 out); RMSNorm + SwiGLU `4·(T·D + D + 2·D·F + T·F)` (x, γ, the two weight matrices,
    /// the output).
    pub fn compulsory_bytes(&self) -> Result<u64> {
        let elems = match *self {
            KernelWorkload::Logaddexp { n } => checked_product(&[3, u(n)], "logaddexp elements")?,
            KernelWorkload::Logsumexp { rows, cols } => checked_sum(
                &[
                    checked_product(&[u(rows), u(cols)], "logsumexp elements")?,
                    u(rows),
                ],
                "logsumexp elements",
            )?,
            KernelWorkload::Softmax { rows, cols } => {
                checked_product(&[2, u(rows), u(cols)], "softmax elements")?
            }
            KernelWorkload::Quantize { n } => {
                // f32 in (4 B) and int8 out (1 B): 5 B per element.
                return checked_product(&[5, u(n)], "quantize bytes");
            }
            KernelWorkload::RmsnormSwigluFused {
                tokens,
                d_model,
                d_ff,
            }
            | KernelWorkload::RmsnormSwigluUnfused {
                tokens,
                d_model,
                d_ff,
            } => {
                let (t, d, f) = (u(tokens), u(d_model), u(d_ff));
                checked_sum(
                    &[
                        checked_product(&[t, d], "T·D")?,
                        d,
                        checked_product(&[2, d, f], "2·D·F")?,
                        checked_product(&[t, f], "T·F")?,
                    ],
                    "RMSNorm + SwiGLU elements",
                )?
            }
        };
        checked_product(&[F32_BYTES, elems], "kernel bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_hand_checked() {
        // logaddexp n = 1000: a, b read and out written, 3·1000·4 B = 12000 B.
        let l = KernelWorkload::Logaddexp { n: 1000 };
        assert_eq!(l.compulsory_bytes().unwrap(), 12_000);
        assert_eq!(l.flops().unwrap(), None);
        // logsumexp 8 × 100: the matrix read (800 f32) and 8 results: 808·4 = 3232 B.
        let s = KernelWorkload::Logsumexp { rows: 8, cols: 100 };
        assert_eq!(s.compulsory_bytes().unwrap(), 3232);
        // quantize n = 10: 40 B in, 10 B out.
        let q = KernelWorkload::Quantize { n: 10 };
        assert_eq!(q.compulsory_bytes().unwrap(), 50);
        // RMSNorm+SwiGLU T=2, D=3, F=5: FLOPs 4·2·3·5 + 4·2·3 + 5·2·5 = 120 + 24 + 50 = 194;
        // elements 2·3 + 3 + 2·3·5 + 2·5 = 6 + 3 + 30 + 10 = 49 → 196 B.
        for k in [
            KernelWorkload::RmsnormSwigluFused {
                tokens: 2,
                d_model: 3,
                d_ff: 5,
            },
            KernelWorkload::RmsnormSwigluUnfused {
                tokens: 2,
                d_model: 3,
                d_ff: 5,
            },
        ] {
            assert_eq!(k.flops().unwrap(), Some(194));
            assert_eq!(k.compulsory_bytes().unwrap(), 196);
            assert_eq!(k.op_name(), "rmsnorm_swiglu");
        }
    }

    #[test]
    fn zero_sizes_and_overflow_are_errors() {
        let e = KernelWorkload::Softmax { rows: 0, cols: 3 }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("rows"), "{e}");
        let big = KernelWorkload::Softmax {
            rows: usize::MAX,
            cols: usize::MAX,
        };
        assert!(big.compulsory_bytes().is_err());
        assert!(big.flops().is_err());
    }

    #[test]
    fn serde_names_are_the_workload_file_names() {
        let k: KernelWorkload = serde_json::from_str(
            r#"{"kernel":"rmsnorm_swiglu_fused","tokens":1,"d_model":2,"d_ff":3}"#,
        )
        .unwrap();
        assert_eq!(
            k,
            KernelWorkload::RmsnormSwigluFused {
                tokens: 1,
                d_model: 2,
                d_ff: 3
            }
        );
    }
}
