//! Transformer workloads: one decoder block (MHA, GQA or MQA attention with rotary
//! embeddings, a GELU or SwiGLU MLP, LayerNorm or RMSNorm, prefill or decode against a KV
//! cache) decomposed into named GEMMs and element-wise operations, and a whole decoder
//! model (embedding, `layers` identical blocks, final norm, LM head), optionally read from
//! a Hugging Face `config.json` text. Every op reads its inputs from and writes its outputs
//! to DRAM (no fusion, softmax materialized); causal GEMMs are counted dense. Left out:
//! biases, dropout, MoE routing, sliding-window attention, tensor/pipeline parallelism and
//! anything not in the op list below (see docs/model.md, "Model workloads").
//!
//! Files: `block` (one block: its shape, decomposition into GEMMs and element-wise ops, the
//! presets), `analysis` (a block's roofline per op and totals), `model` (a whole decoder
//! model), `hf` (reading a Hugging Face `config.json`).

mod analysis;
mod block;
mod hf;
mod model;
#[cfg(test)]
mod tests;
mod variants;

pub use analysis::*;
pub use block::*;
pub use hf::*;
pub use model::*;
pub use variants::*;

/// FLOPs per element of LayerNorm: mean-add, subtract, square, variance-add, scale by
/// rstd, ×γ, +β = 7 (the per-row division and rsqrt are not counted).
pub const LAYERNORM_FLOPS_PER_ELEMENT: u64 = 7;
/// FLOPs per element of RMSNorm: square, sum-add, scale by rstd, ×γ = 4.
pub const RMSNORM_FLOPS_PER_ELEMENT: u64 = 4;
/// FLOPs per element of rotary embedding: `x·cos + rotate(x)·sin` = 2 multiplies + 1 add = 3.
pub const ROTARY_FLOPS_PER_ELEMENT: u64 = 3;
/// FLOPs per score element of softmax: scale, max-compare, subtract-and-exp (exp counted as
/// one op), sum-add, divide = 5.
pub const SOFTMAX_FLOPS_PER_ELEMENT: u64 = 5;
/// FLOPs per element of tanh-approximated GELU `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`:
/// cube 2, scale-and-add 2, scale 1, tanh 1 (one op), add 1, final multiply 1 (½ folded) = 8.
pub const GELU_FLOPS_PER_ELEMENT: u64 = 8;
/// FLOPs per element of SwiGLU `silu(gate)·up`: negate, exp (one op), add 1, divide, × up = 5.
pub const SWIGLU_FLOPS_PER_ELEMENT: u64 = 5;
/// FLOPs per element of a residual add: 1.
pub const RESIDUAL_FLOPS_PER_ELEMENT: u64 = 1;

/// FLOPs per element of the mixture-of-experts combine: one multiply by the routing weight
/// and one add per expert output element = 2.
pub const MOE_COMBINE_FLOPS_PER_ELEMENT: u64 = 2;
