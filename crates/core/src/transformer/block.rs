//! One decoder block: its shape (attention form, MLP, norm, phase, KV cache), its decomposition
//! into named GEMMs and element-wise operations with their FLOPs and bytes, and the built-in
//! block presets. Left out: what the module comment of `transformer` lists.

use super::*;
use crate::dtype::DType;
use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::gemm::{Gemm, GemmRole, NamedGemm, OnChip, QuantGroups};
use serde::{Deserialize, Serialize};

/// The MLP form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MlpKind {
    /// `down(gelu(up(x)))`: 2 weight matrices (D×F and F×D).
    #[default]
    Gelu,
    /// `down(silu(gate(x)) · up(x))`: 3 weight matrices (two D×F, one F×D).
    Swiglu,
}

impl MlpKind {
    /// Parse `gelu` or `swiglu` (also `silu`, `gated`), any case; an error names `mlp`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gelu" => Ok(MlpKind::Gelu),
            "swiglu" | "silu" | "gated" => Ok(MlpKind::Swiglu),
            _ => Err(CoreError::invalid("mlp", s, "valid: gelu, swiglu")),
        }
    }

    /// Weight matrices in the MLP: 2 for GELU, 3 for SwiGLU.
    pub fn matrices(self) -> u64 {
        match self {
            MlpKind::Gelu => 2,
            MlpKind::Swiglu => 3,
        }
    }

    /// Lower-case name (`gelu`, `swiglu`).
    pub fn name(self) -> &'static str {
        match self {
            MlpKind::Gelu => "gelu",
            MlpKind::Swiglu => "swiglu",
        }
    }
}

/// The normalization form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormKind {
    /// LayerNorm with γ and β: 7 FLOPs per element, 2·D parameters.
    #[default]
    LayerNorm,
    /// RMSNorm with γ only: 4 FLOPs per element, D parameters.
    RmsNorm,
}

impl NormKind {
    /// Parse `layernorm` (`layer_norm`, `ln`) or `rmsnorm` (`rms_norm`, `rms`); an error
    /// names `norm`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "layernorm" | "layer_norm" | "ln" => Ok(NormKind::LayerNorm),
            "rmsnorm" | "rms_norm" | "rms" => Ok(NormKind::RmsNorm),
            _ => Err(CoreError::invalid("norm", s, "valid: layernorm, rmsnorm")),
        }
    }

    /// FLOPs per normalized element: 7 (LayerNorm) or 4 (RMSNorm).
    pub fn flops_per_element(self) -> u64 {
        match self {
            NormKind::LayerNorm => LAYERNORM_FLOPS_PER_ELEMENT,
            NormKind::RmsNorm => RMSNORM_FLOPS_PER_ELEMENT,
        }
    }

    /// Parameters per channel: 2 (γ, β) or 1 (γ).
    pub fn params_per_channel(self) -> u64 {
        match self {
            NormKind::LayerNorm => 2,
            NormKind::RmsNorm => 1,
        }
    }

    /// Lower-case name (`layernorm`, `rmsnorm`).
    pub fn name(self) -> &'static str {
        match self {
            NormKind::LayerNorm => "layernorm",
            NormKind::RmsNorm => "rmsnorm",
        }
    }
}

/// Inference phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Process `seq_len` new tokens per sequence at once.
    #[default]
    Prefill,
    /// Process one new token per sequence against the KV cache.
    Decode,
}

impl Phase {
    /// Parse `prefill` or `decode`, any case; an error names `phase`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "prefill" => Ok(Phase::Prefill),
            "decode" => Ok(Phase::Decode),
            _ => Err(CoreError::invalid("phase", s, "valid: prefill, decode")),
        }
    }
}

fn one() -> u64 {
    1
}
fn yes() -> bool {
    true
}
fn fp16() -> DType {
    DType::Fp16
}

/// One transformer block. `S_q` = `seq_len` in prefill, 1 in decode; attention length
/// `L = kv_cache_len + S_q`; tokens `T = batch · S_q`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerBlock {
    /// Sequences per call, B (default 1).
    #[serde(default = "one")]
    pub batch: u64,
    /// New tokens per sequence in prefill; not used in decode (one new token per sequence).
    pub seq_len: u64,
    /// Model width, D.
    pub d_model: u64,
    /// Query heads, H.
    pub heads: u64,
    /// Key/value heads, Hkv (default H: MHA; 1: MQA; between: GQA); must divide H.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<u64>,
    /// Per-head width, hd (default D / H, which must then divide exactly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u64>,
    /// MLP hidden width, F.
    pub d_ff: u64,
    /// MLP form (default `gelu`).
    #[serde(default)]
    pub mlp: MlpKind,
    /// Normalization form (default `layernorm`).
    #[serde(default)]
    pub norm: NormKind,
    /// Causal mask (default true); GEMMs stay dense, see `causal_useful_fraction`.
    #[serde(default = "yes")]
    pub causal: bool,
    /// Prefill or decode (default `prefill`).
    #[serde(default)]
    pub phase: Phase,
    /// Tokens already in the KV cache per sequence, P (default 0).
    #[serde(default)]
    pub kv_cache_len: u64,
    /// Element type of activations, weights and KV cache (default fp16).
    #[serde(default = "fp16")]
    pub dtype: DType,
    /// Sliding attention window W: each query attends to at most the W latest positions and
    /// the KV cache keeps W per sequence (default none: full attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// The q, k and v projections add a bias (Qwen2): `H·hd + 2·Hkv·hd` parameters (default
    /// false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qkv_bias: bool,
    /// The output projection adds a bias: D parameters (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub o_bias: bool,
    /// Multi-head latent attention in place of the q/k/v projections (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    /// A mixture of experts in place of the dense MLP (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<Moe>,
    /// Channels of each query/key head that rotary embedding rotates, r (partial rotary;
    /// default: all `head_dim`). Latent attention uses its own `qk_rope_head_dim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_dims: Option<u64>,
    /// Storage dtype of the weights when narrower than `dtype` (weight-only int4/int8/fp8
    /// quantization; default: `dtype`). Arithmetic stays at `dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_dtype: Option<DType>,
    /// Groups of the weight-only quantization: an fp16 scale (and with `zero_points` a zero
    /// point) per `size` weights along each matrix's input dimension, counted in the weight
    /// bytes and in the GEMMs' weight traffic (GPTQ and AWQ use 128, llama.cpp's Q4_0 32).
    /// Needs a `weight_dtype` narrower than `dtype`. Default none: per-tensor or per-channel
    /// scales, whose bytes are not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_groups: Option<QuantGroups>,
    /// Storage dtype of the KV cache (default: `dtype`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_dtype: Option<DType>,
    /// How attention runs: `materialized` (scores and probabilities cross DRAM, the default)
    /// or `fused` (flash attention: they stay on chip).
    #[serde(default, skip_serializing_if = "AttentionKernel::is_materialized")]
    pub attention_kernel: AttentionKernel,
}

/// How the attention scores, softmax and values run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// Three kernels: scores written to DRAM, softmax reads them and writes probabilities,
    /// the values GEMM reads those.
    #[default]
    Materialized,
    /// One fused kernel (flash attention): Q, K and V read once, the output written once;
    /// scores and probabilities never reach DRAM. K/V re-reads per query tile are not
    /// counted (compulsory traffic).
    Fused,
}

impl AttentionKernel {
    fn is_materialized(&self) -> bool {
        *self == AttentionKernel::Materialized
    }
}

/// What an element-wise (non-GEMM) operation computes; serialized under the names in
/// parentheses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ElementwiseKind {
    /// LayerNorm (`layernorm`).
    #[serde(rename = "layernorm")]
    LayerNorm,
    /// RMSNorm (`rmsnorm`).
    #[serde(rename = "rmsnorm")]
    RmsNorm,
    /// Rotary position embedding (`rotary`).
    #[serde(rename = "rotary")]
    Rotary,
    /// Row softmax (`softmax`).
    #[serde(rename = "softmax")]
    Softmax,
    /// GELU activation (`gelu`).
    #[serde(rename = "gelu")]
    Gelu,
    /// SwiGLU gate (`swiglu`).
    #[serde(rename = "swiglu")]
    Swiglu,
    /// Residual addition (`residual_add`).
    #[serde(rename = "residual_add")]
    ResidualAdd,
    /// Embedding-table lookup (`embedding_gather`).
    #[serde(rename = "embedding_gather")]
    EmbeddingGather,
    /// Router softmax and top-k selection (`router_topk`).
    #[serde(rename = "router_topk")]
    RouterTopk,
    /// Weighted sum of the experts' outputs (`moe_combine`).
    #[serde(rename = "moe_combine")]
    MoeCombine,
}

impl ElementwiseKind {
    /// The serialized name (`rmsnorm`, `residual_add`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ElementwiseKind::LayerNorm => "layernorm",
            ElementwiseKind::RmsNorm => "rmsnorm",
            ElementwiseKind::Rotary => "rotary",
            ElementwiseKind::Softmax => "softmax",
            ElementwiseKind::Gelu => "gelu",
            ElementwiseKind::Swiglu => "swiglu",
            ElementwiseKind::ResidualAdd => "residual_add",
            ElementwiseKind::EmbeddingGather => "embedding_gather",
            ElementwiseKind::RouterTopk => "router_topk",
            ElementwiseKind::MoeCombine => "moe_combine",
        }
    }
}

impl From<NormKind> for ElementwiseKind {
    fn from(n: NormKind) -> ElementwiseKind {
        match n {
            NormKind::LayerNorm => ElementwiseKind::LayerNorm,
            NormKind::RmsNorm => ElementwiseKind::RmsNorm,
        }
    }
}

impl From<MlpKind> for ElementwiseKind {
    fn from(m: MlpKind) -> ElementwiseKind {
        match m {
            MlpKind::Gelu => ElementwiseKind::Gelu,
            MlpKind::Swiglu => ElementwiseKind::Swiglu,
        }
    }
}

/// An element-wise (non-GEMM) operation with its FLOP and byte counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonGemmOp {
    /// Name within the block, e.g. `norm_attn`, `softmax`.
    pub name: String,
    /// What it computes.
    pub op: ElementwiseKind,
    /// Elements produced.
    pub elements: u64,
    /// `elements · FLOPs per element` (see the `*_FLOPS_PER_ELEMENT` constants).
    pub flops: u64,
    /// Bytes read from DRAM (inputs, parameters, tables).
    pub bytes_read: u64,
    /// Bytes written to DRAM.
    pub bytes_written: u64,
}

/// A block broken into GEMMs and element-wise operations, with its derived sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockDecomposition {
    /// `T = batch · S_q`.
    pub tokens: u64,
    /// `S_q`: `seq_len` in prefill, 1 in decode.
    pub query_len: u64,
    /// `L = kv_cache_len + S_q`.
    pub attention_len: u64,
    /// Positions each query attends to, `L_a = min(L, W)` (L without a sliding window).
    #[serde(default)]
    pub attended_len: u64,
    /// Distinct routed experts the batch touches (0 without a mixture of experts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub experts_touched: u64,
    /// Resolved Hkv.
    pub kv_heads: u64,
    /// Resolved hd.
    pub head_dim: u64,
    /// `g = H / Hkv`: query heads sharing one K/V head.
    pub kv_group_size: u64,
    /// GEMMs in execution order: q/k/v_proj, attn_scores, attn_values, o_proj, MLP.
    pub gemms: Vec<NamedGemm>,
    /// Element-wise ops in execution order: norm_attn, rotary, softmax, residual_attn,
    /// norm_mlp, activation, residual_mlp.
    pub non_gemm: Vec<NonGemmOp>,
    /// Share of the dense attention GEMMs' (query, key) pairs that the causal mask keeps,
    /// `(P + (S_q+1)/2) / (P + S_q)`; 1 when not causal.
    pub causal_useful_fraction: f64,
    /// Weight parameters: `D·H·hd·2 + D·Hkv·hd·2 + mlp_matrices·D·F + 2·norm_params·D`.
    pub weight_params: u64,
    /// `weight_params` at the weights' storage dtype, bytes.
    pub weight_bytes: u64,
    /// K and V attended over: `2 · B · Hkv · hd · L_a` elements (latent attention:
    /// `B · (kv_lora_rank + qk_rope_head_dim) · L_a`), bytes.
    pub kv_cache_bytes: u64,
    /// Weight parameters one token uses: all but the routed experts it is not sent to
    /// (equal to `weight_params` without a mixture of experts).
    #[serde(default)]
    pub active_weight_params: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

struct Dims {
    b: u64,
    sq: u64,
    l: u64,
    /// Attended positions, `min(L, W)`.
    la: u64,
    t: u64,
    h: u64,
    hkv: u64,
    hd: u64,
    g: u64,
    d: u64,
    f: u64,
}

pub(super) fn named(
    role: GemmRole,
    m: u64,
    n: u64,
    k: u64,
    batch: u64,
    dtype: DType,
) -> Result<NamedGemm> {
    let name = role.name();
    let gemm = Gemm {
        m,
        n,
        k,
        batch,
        dtype,
        accumulate: false,
    };
    gemm.validate().map_err(|e| match e {
        CoreError::Overflow { what } => CoreError::overflow(format!("{name}: {what}")),
        other => other,
    })?;
    Ok(NamedGemm {
        name: name.into(),
        gemm,
        role,
        on_chip: OnChip::default(),
        b_dtype: None,
        b_groups: None,
    })
}

pub(super) fn elementwise(
    name: &str,
    op: ElementwiseKind,
    elements: u64,
    flops_per_element: u64,
    read_elements: u64,
    written_elements: u64,
    dtype: DType,
) -> Result<NonGemmOp> {
    let flops = elements
        .checked_mul(flops_per_element)
        .ok_or_else(|| CoreError::overflow(format!("{name}: FLOPs")))?;
    Ok(NonGemmOp {
        name: name.into(),
        op,
        elements,
        flops,
        bytes_read: dtype.bytes_for(read_elements)?,
        bytes_written: dtype.bytes_for(written_elements)?,
    })
}

impl TransformerBlock {
    /// A plain block: batch 1, MHA (`head_dim = D / H`), GELU MLP, LayerNorm, causal,
    /// prefill, no cache, fp16, no window, biases, latent attention or experts, materialized
    /// attention.
    pub fn new(seq_len: u64, d_model: u64, heads: u64, d_ff: u64) -> TransformerBlock {
        TransformerBlock {
            batch: 1,
            seq_len,
            d_model,
            heads,
            kv_heads: None,
            head_dim: None,
            d_ff,
            mlp: MlpKind::Gelu,
            norm: NormKind::LayerNorm,
            causal: true,
            phase: Phase::Prefill,
            kv_cache_len: 0,
            dtype: DType::Fp16,
            sliding_window: None,
            qkv_bias: false,
            o_bias: false,
            mla: None,
            moe: None,
            rotary_dims: None,
            weight_dtype: None,
            weight_groups: None,
            kv_dtype: None,
            attention_kernel: AttentionKernel::Materialized,
        }
    }

    /// New query tokens per sequence, `S_q`: `seq_len` in prefill, 1 in decode.
    pub fn query_len(&self) -> u64 {
        match self.phase {
            Phase::Prefill => self.seq_len,
            Phase::Decode => 1,
        }
    }

    /// Hkv: `kv_heads`, or `heads` when not given (MHA).
    pub fn effective_kv_heads(&self) -> u64 {
        self.kv_heads.unwrap_or(self.heads)
    }

    /// hd: `head_dim`, or `d_model / heads` when not given (which must divide exactly).
    pub fn effective_head_dim(&self) -> Result<u64> {
        match self.head_dim {
            Some(0) => Err(CoreError::invalid("head_dim", 0, "must be at least 1")),
            Some(hd) => Ok(hd),
            None => {
                if self.heads == 0 {
                    return Err(CoreError::invalid("heads", 0, "must be at least 1"));
                }
                if !self.d_model.is_multiple_of(self.heads) {
                    return Err(CoreError::invalid(
                        "d_model",
                        self.d_model,
                        format!(
                            "must be divisible by heads = {} when head_dim is not given",
                            self.heads
                        ),
                    ));
                }
                Ok(self.d_model / self.heads)
            }
        }
    }

    /// Attention length `L = kv_cache_len + S_q`, checked.
    pub fn attention_len(&self) -> Result<u64> {
        checked_sum(
            &[self.kv_cache_len, self.query_len()],
            "kv_cache_len + S_q (attention length)",
        )
    }

    /// Tokens processed, `T = batch · S_q`, checked.
    pub fn tokens(&self) -> Result<u64> {
        checked_product(&[self.batch, self.query_len()], "batch·S_q (tokens)")
    }

    /// Storage dtype of the weights: `weight_dtype`, else `dtype`.
    pub fn weight_dtype(&self) -> DType {
        self.weight_dtype.unwrap_or(self.dtype)
    }

    /// Bytes of `params` weights as stored: `bytes(weight_dtype)`, plus the scales and zero
    /// points of `weight_groups` ([`QuantGroups::total_bytes`]).
    pub fn weight_storage_bytes(&self, params: u64) -> Result<u64> {
        match self.weight_groups {
            Some(g) => g.total_bytes(params, self.weight_dtype()),
            None => self.weight_dtype().bytes_for(params),
        }
    }

    /// Storage dtype of the KV cache: `kv_dtype`, else `dtype`.
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype.unwrap_or(self.dtype)
    }

    /// Positions each query attends to, `L_a = min(L, W)`: the attention GEMMs' key length and
    /// the positions the KV cache holds per sequence (`L` without a sliding window).
    pub fn attended_len(&self) -> Result<u64> {
        let l = self.attention_len()?;
        Ok(self.sliding_window.map_or(l, |w| l.min(w)))
    }

    /// Share of the dense attention GEMMs' (query, key) pairs that the mask keeps. Query `i` of
    /// `S_q` at position `P + i` sees `min(P + i + 1, W)` keys of the `L_a` computed, so the
    /// share is `Σ_i min(P + i + 1, W) / (S_q · L_a)`; without a window that is
    /// `(S_q·P + S_q(S_q+1)/2) / (S_q·L)`. 1 when not causal.
    pub fn causal_useful_fraction(&self) -> Result<f64> {
        if !self.causal {
            return Ok(1.0);
        }
        let sq = self.query_len() as u128;
        let p = self.kv_cache_len as u128;
        let la = self.attended_len()? as u128;
        if sq == 0 {
            return Err(CoreError::invalid("seq_len", 0, "must be at least 1"));
        }
        // Σ min(j, W) for j = a..=b, the keys seen by each query (j = P + i + 1).
        let (a, b) = (p + 1, p + sq);
        let w = self.sliding_window.map_or(u128::MAX, u128::from);
        let useful = if w >= b {
            (a + b) * (b - a + 1) / 2
        } else if w < a {
            sq * w
        } else {
            (a + w) * (w - a + 1) / 2 + (b - w) * w
        };
        Ok(useful as f64 / (sq * la) as f64)
    }

    fn dims(&self) -> Result<Dims> {
        for (f, v) in [
            ("batch", self.batch),
            ("seq_len", self.seq_len),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("d_ff", self.d_ff),
        ] {
            if v == 0 {
                return Err(CoreError::invalid(f, v, "must be at least 1"));
            }
        }
        if self.sliding_window == Some(0) {
            return Err(CoreError::invalid(
                "sliding_window",
                0,
                "must be at least 1",
            ));
        }
        if let Some(m) = &self.moe {
            m.validate()?;
        }
        let hkv = self.effective_kv_heads();
        if hkv == 0 {
            return Err(CoreError::invalid("kv_heads", 0, "must be at least 1"));
        }
        let hd = if let Some(m) = &self.mla {
            m.validate()?;
            if hkv != self.heads {
                return Err(CoreError::invalid(
                    "kv_heads",
                    hkv,
                    format!(
                        "must equal heads = {} with latent attention (every head reads the shared latent)",
                        self.heads
                    ),
                ));
            }
            if self.qkv_bias {
                return Err(CoreError::invalid(
                    "qkv_bias",
                    true,
                    "latent attention has no q/k/v projections to bias",
                ));
            }
            m.qk_head_dim()?
        } else {
            if hkv > self.heads || !self.heads.is_multiple_of(hkv) {
                return Err(CoreError::invalid(
                    "kv_heads",
                    hkv,
                    format!(
                        "heads = {} must be a multiple of kv_heads (1 = MQA, heads = MHA)",
                        self.heads
                    ),
                ));
            }
            self.effective_head_dim()?
        };
        if let Some(r) = self.rotary_dims {
            if self.mla.is_some() || r > hd {
                return Err(CoreError::invalid(
                    "rotary_dims",
                    r,
                    format!(
                        "must be at most head_dim = {hd}, and unset with latent attention (qk_rope_head_dim)"
                    ),
                ));
            }
        }
        Ok(Dims {
            b: self.batch,
            sq: self.query_len(),
            l: self.attention_len()?,
            la: self.attended_len()?,
            t: self.tokens()?,
            h: self.heads,
            hkv,
            hd,
            g: self.heads / hkv,
            d: self.d_model,
            f: self.d_ff,
        })
    }

    /// Dimensions are ≥ 1, heads is a multiple of kv_heads, head_dim resolves, the mixture of
    /// experts and latent attention are consistent, and every GEMM, element count and byte
    /// count fits in 64 bits.
    pub fn validate(&self) -> Result<()> {
        self.decompose().map(|_| ())
    }

    /// Attention parameters. Standard: `2·D·H·hd + 2·D·Hkv·hd`, plus `H·hd + 2·Hkv·hd` with
    /// q/k/v biases and D with an output bias. Latent (q_r the query latent, c the KV latent,
    /// n + r the per-head query/key width, v the value width): queries `D·q_r + q_r + q_r·H·(n+r)`
    /// (or `D·H·(n+r)` without a query latent), keys and values `D·(c+r) + c + c·H·(n+v)`,
    /// output `H·v·D` (the `+ q_r` and `+ c` are the latents' RMSNorm weights).
    fn attention_params(&self, x: &Dims) -> Result<u64> {
        let o_bias = if self.o_bias { x.d } else { 0 };
        if let Some(m) = &self.mla {
            let (c, v) = (m.kv_lora_rank, m.v_head_dim);
            let qk = m.qk_head_dim()?;
            let q = match m.q_lora_rank {
                Some(qr) => checked_sum(
                    &[
                        checked_product(&[x.d, qr], "D·q_lora_rank")?,
                        qr,
                        checked_product(&[qr, x.h, qk], "q_lora_rank·H·(n+r)")?,
                    ],
                    "query parameters",
                )?,
                None => checked_product(&[x.d, x.h, qk], "D·H·(n+r)")?,
            };
            let kv = checked_sum(
                &[
                    checked_product(&[x.d, m.cache_elements_per_token()?], "D·(c+r)")?,
                    c,
                    checked_product(
                        &[c, x.h, checked_sum(&[m.qk_nope_head_dim, v], "n+v")?],
                        "c·H·(n+v)",
                    )?,
                ],
                "key/value parameters",
            )?;
            let o = checked_product(&[x.h, v, x.d], "H·v·D (output weights)")?;
            return checked_sum(&[q, kv, o, o_bias], "attention parameters");
        }
        let q = checked_product(&[x.d, x.h, x.hd], "D·H·hd (q/o weights)")?;
        let kv = checked_product(&[x.d, x.hkv, x.hd], "D·Hkv·hd (k/v weights)")?;
        let qkv_bias = if self.qkv_bias {
            checked_sum(
                &[
                    checked_product(&[x.h, x.hd], "H·hd")?,
                    checked_product(&[2, x.hkv, x.hd], "2·Hkv·hd")?,
                ],
                "q/k/v bias parameters",
            )?
        } else {
            0
        };
        checked_sum(&[q, q, kv, kv, qkv_bias, o_bias], "attention parameters")
    }

    /// MLP parameters. Dense: `mlp_matrices·D·F`. Mixture of experts: router `D·E` (+ E with a
    /// router bias), routed experts `E·mlp_matrices·D·F_e` (one token uses `k` of them:
    /// `active`), shared experts `mlp_matrices·D·F_s` (+ D with a shared-expert gate).
    fn mlp_params(&self, x: &Dims, active: bool) -> Result<u64> {
        let mm = self.mlp.matrices();
        let Some(m) = &self.moe else {
            return checked_product(&[mm, x.d, x.f], "mlp_matrices·D·F (MLP weights)");
        };
        let used = if active { m.top_k } else { m.experts };
        checked_sum(
            &[
                checked_product(&[x.d, m.experts], "D·E (router weights)")?,
                if m.router_bias { m.experts } else { 0 },
                checked_product(
                    &[used, mm, x.d, m.expert_d_ff],
                    "experts·mlp_matrices·D·F_e (expert weights)",
                )?,
                checked_product(
                    &[mm, x.d, m.effective_shared_d_ff()?],
                    "mlp_matrices·D·F_s (shared expert weights)",
                )?,
                if m.shared_expert_gate { x.d } else { 0 },
            ],
            "MLP parameters",
        )
    }

    /// Weight parameters of the block: attention + MLP (every expert) + `2·norm_params·D`.
    pub fn weight_params(&self) -> Result<u64> {
        self.params(false)
    }

    /// Parameters one token uses: attention + MLP with only `k` routed experts + norms (equal
    /// to [`TransformerBlock::weight_params`] without a mixture of experts).
    pub fn active_weight_params(&self) -> Result<u64> {
        self.params(true)
    }

    fn params(&self, active: bool) -> Result<u64> {
        let x = self.dims()?;
        let norms = checked_product(&[2, self.norm.params_per_channel(), x.d], "norm parameters")?;
        checked_sum(
            &[
                self.attention_params(&x)?,
                self.mlp_params(&x, active)?,
                norms,
            ],
            "block weight parameters",
        )
    }

    /// Named GEMMs (M, N, K, batch) and element-wise ops of the block, with weight and
    /// KV-cache bytes. Standard attention groups the `g = H/Hkv` query heads sharing one K/V
    /// head; latent attention follows [`Mla::form`]; a mixture of experts runs the routed
    /// experts as one batched GEMM per projection over the experts touched (batch
    /// [`Moe::experts_touched`], `⌈T·k / batch⌉` rows each, so FLOPs round up by under one
    /// row per expert).
    pub fn decompose(&self) -> Result<BlockDecomposition> {
        if let Some(g) = self.weight_groups {
            g.validate("weight_groups.size")?;
            if self.weight_dtype() == self.dtype {
                return Err(CoreError::invalid(
                    "weight_groups",
                    format!("{{ size = {}, zero_points = {} }}", g.size, g.zero_points),
                    format!(
                        "quantization groups need a weight_dtype narrower than dtype = {} (weight-only quantization)",
                        self.dtype
                    ),
                ));
            }
        }
        let x = self.dims()?;
        let dt = self.dtype;
        let td = checked_product(&[x.t, x.d], "T·D (hidden elements)")?;
        let norm_params =
            checked_product(&[self.norm.params_per_channel(), x.d], "norm parameters")?;
        let norm_read = checked_sum(&[td, norm_params], "norm elements read")?;
        let td2 = checked_product(&[2, td], "2·T·D (residual reads)")?;
        let norm = ElementwiseKind::from(self.norm);
        let nfpe = self.norm.flops_per_element();
        let mut gemms = Vec::new();
        let mut non_gemm = vec![elementwise("norm_attn", norm, td, nfpe, norm_read, td, dt)?];
        let bh = checked_product(&[x.b, x.h], "batch·H (attention GEMM batch)")?;

        // Attention: projections, rotary, scores, softmax, values, output projection.
        let (rot, rot_tables, kv_elems) = if let Some(m) = &self.mla {
            let (c, r, v) = (m.kv_lora_rank, m.qk_rope_head_dim, m.v_head_dim);
            let qk = x.hd;
            let hqk = checked_product(&[x.h, qk], "H·(n+r) (query width)")?;
            let rms = ElementwiseKind::RmsNorm;
            match m.q_lora_rank {
                Some(qr) => {
                    gemms.push(named(GemmRole::QDown, x.t, qr, x.d, 1, dt)?);
                    let tq = checked_product(&[x.t, qr], "T·q_lora_rank")?;
                    non_gemm.push(elementwise(
                        "norm_q_latent",
                        rms,
                        tq,
                        RMSNORM_FLOPS_PER_ELEMENT,
                        checked_sum(&[tq, qr], "query latent norm reads")?,
                        tq,
                        dt,
                    )?);
                    gemms.push(named(GemmRole::QUp, x.t, hqk, qr, 1, dt)?);
                }
                None => gemms.push(named(GemmRole::QProj, x.t, hqk, x.d, 1, dt)?),
            }
            let cr = m.cache_elements_per_token()?;
            gemms.push(named(GemmRole::KvDown, x.t, cr, x.d, 1, dt)?);
            let tc = checked_product(&[x.t, c], "T·kv_lora_rank")?;
            non_gemm.push(elementwise(
                "norm_kv_latent",
                rms,
                tc,
                RMSNORM_FLOPS_PER_ELEMENT,
                checked_sum(&[tc, c], "KV latent norm reads")?,
                tc,
                dt,
            )?);
            match m.form {
                MlaForm::Naive => {
                    let rows = checked_product(&[x.b, x.la], "batch·L_a (latents up-projected)")?;
                    let nv = checked_product(
                        &[x.h, checked_sum(&[m.qk_nope_head_dim, v], "n+v")?],
                        "H·(n+v)",
                    )?;
                    gemms.push(named(GemmRole::KvUp, rows, nv, c, 1, dt)?);
                    gemms.push(named(GemmRole::AttnScores, x.sq, x.la, qk, bh, dt)?);
                    gemms.push(named(GemmRole::AttnValues, x.sq, v, x.la, bh, dt)?);
                }
                MlaForm::Absorbed => {
                    gemms.push(named(
                        GemmRole::QAbsorb,
                        x.t,
                        c,
                        m.qk_nope_head_dim,
                        x.h,
                        dt,
                    )?);
                    // Every head reads the same latents: the H heads' query rows stack over
                    // one latent operand per sequence, as grouped-query attention stacks a
                    // group.
                    let hsq = checked_product(&[x.h, x.sq], "H·S_q (stacked query rows)")?;
                    gemms.push(named(GemmRole::AttnScores, hsq, x.la, cr, x.b, dt)?);
                    gemms.push(named(GemmRole::AttnValues, hsq, c, x.la, x.b, dt)?);
                    gemms.push(named(GemmRole::VAbsorb, x.t, v, c, x.h, dt)?);
                }
            }
            let hv = checked_product(&[x.h, v], "H·v (output width)")?;
            gemms.push(named(GemmRole::OProj, x.t, x.d, hv, 1, dt)?);
            let rot_heads = checked_sum(&[x.h, 1], "H+1 (rotary heads)")?;
            (
                checked_product(&[x.t, rot_heads, r], "T·(H+1)·r (rotary elements)")?,
                checked_product(&[2, x.sq, r], "2·S_q·r (cos/sin tables)")?,
                checked_product(&[x.b, x.la, cr], "B·L_a·(c+r) (latent cache elements)")?,
            )
        } else {
            let qw = checked_product(&[x.h, x.hd], "H·hd (query width)")?;
            let kvw = checked_product(&[x.hkv, x.hd], "Hkv·hd (key/value width)")?;
            let gsq = checked_product(&[x.g, x.sq], "g·S_q (grouped query rows)")?;
            let bkv = checked_product(&[x.b, x.hkv], "batch·Hkv (attention GEMM batch)")?;
            gemms.push(named(GemmRole::QProj, x.t, qw, x.d, 1, dt)?);
            gemms.push(named(GemmRole::KProj, x.t, kvw, x.d, 1, dt)?);
            gemms.push(named(GemmRole::VProj, x.t, kvw, x.d, 1, dt)?);
            gemms.push(named(GemmRole::AttnScores, gsq, x.la, x.hd, bkv, dt)?);
            gemms.push(named(GemmRole::AttnValues, gsq, x.hd, x.la, bkv, dt)?);
            gemms.push(named(GemmRole::OProj, x.t, x.d, qw, 1, dt)?);
            let heads_qk = checked_sum(&[x.h, x.hkv], "H+Hkv (rotary heads)")?;
            let rd = self.rotary_dims.unwrap_or(x.hd);
            (
                checked_product(&[x.t, heads_qk, rd], "T·(H+Hkv)·r (rotary elements)")?,
                checked_product(&[2, x.sq, rd], "2·S_q·r (cos/sin tables)")?,
                checked_product(
                    &[2, x.b, x.hkv, x.hd, x.la],
                    "2·B·Hkv·hd·L_a (KV cache elements)",
                )?,
            )
        };
        let fused = self.attention_kernel == AttentionKernel::Fused;
        if fused {
            for g in gemms.iter_mut() {
                match g.role {
                    GemmRole::AttnScores => g.on_chip.c = true,
                    GemmRole::AttnValues => g.on_chip.a = true,
                    _ => {}
                }
            }
        }
        let rot_read = checked_sum(&[rot, rot_tables], "rotary elements read")?;
        let scores = checked_product(&[bh, x.sq, x.la], "batch·H·S_q·L_a (softmax elements)")?;
        // Fused attention: the softmax's FLOPs stay, its DRAM traffic goes.
        let softmax_io = if fused { 0 } else { scores };
        non_gemm.push(elementwise(
            "rotary",
            ElementwiseKind::Rotary,
            rot,
            ROTARY_FLOPS_PER_ELEMENT,
            rot_read,
            rot,
            dt,
        )?);
        non_gemm.push(elementwise(
            "softmax",
            ElementwiseKind::Softmax,
            scores,
            SOFTMAX_FLOPS_PER_ELEMENT,
            softmax_io,
            softmax_io,
            dt,
        )?);
        non_gemm.push(elementwise(
            "residual_attn",
            ElementwiseKind::ResidualAdd,
            td,
            RESIDUAL_FLOPS_PER_ELEMENT,
            td2,
            td,
            dt,
        )?);
        non_gemm.push(elementwise("norm_mlp", norm, td, nfpe, norm_read, td, dt)?);

        // MLP: dense, or router + shared experts + routed experts + combine.
        let swiglu = self.mlp == MlpKind::Swiglu;
        let activation = |name: &str, elems: u64| -> Result<NonGemmOp> {
            let (fpe, read) = match self.mlp {
                MlpKind::Gelu => (GELU_FLOPS_PER_ELEMENT, elems),
                MlpKind::Swiglu => (
                    SWIGLU_FLOPS_PER_ELEMENT,
                    checked_product(&[2, elems], "SwiGLU reads")?,
                ),
            };
            elementwise(name, self.mlp.into(), elems, fpe, read, elems, dt)
        };
        let mut experts_touched = 0;
        match &self.moe {
            None => {
                if swiglu {
                    gemms.push(named(GemmRole::MlpGate, x.t, x.f, x.d, 1, dt)?);
                }
                gemms.push(named(GemmRole::MlpUp, x.t, x.f, x.d, 1, dt)?);
                gemms.push(named(GemmRole::MlpDown, x.t, x.d, x.f, 1, dt)?);
                let tf = checked_product(&[x.t, x.f], "T·F (MLP hidden elements)")?;
                non_gemm.push(activation("activation", tf)?);
            }
            Some(m) => {
                let (e, k, fe) = (m.experts, m.top_k, m.expert_d_ff);
                gemms.push(named(GemmRole::Router, x.t, e, x.d, 1, dt)?);
                let te = checked_product(&[x.t, e], "T·E (router scores)")?;
                let tk = checked_product(&[x.t, k], "T·k (token-expert pairs)")?;
                non_gemm.push(elementwise(
                    "router_topk",
                    ElementwiseKind::RouterTopk,
                    te,
                    SOFTMAX_FLOPS_PER_ELEMENT,
                    te,
                    tk,
                    dt,
                )?);
                let fs = m.effective_shared_d_ff()?;
                if fs > 0 {
                    if swiglu {
                        gemms.push(named(GemmRole::SharedGate, x.t, fs, x.d, 1, dt)?);
                    }
                    gemms.push(named(GemmRole::SharedUp, x.t, fs, x.d, 1, dt)?);
                    gemms.push(named(GemmRole::SharedDown, x.t, x.d, fs, 1, dt)?);
                    let tfs = checked_product(&[x.t, fs], "T·F_s (shared hidden elements)")?;
                    non_gemm.push(activation("shared_activation", tfs)?);
                }
                experts_touched = m.experts_touched(x.t);
                let rows = tk.div_ceil(experts_touched.max(1));
                if swiglu {
                    gemms.push(named(
                        GemmRole::ExpertGate,
                        rows,
                        fe,
                        x.d,
                        experts_touched,
                        dt,
                    )?);
                }
                gemms.push(named(
                    GemmRole::ExpertUp,
                    rows,
                    fe,
                    x.d,
                    experts_touched,
                    dt,
                )?);
                gemms.push(named(
                    GemmRole::ExpertDown,
                    rows,
                    x.d,
                    fe,
                    experts_touched,
                    dt,
                )?);
                let tkf = checked_product(&[tk, fe], "T·k·F_e (expert hidden elements)")?;
                non_gemm.push(activation("expert_activation", tkf)?);
                let tkd = checked_product(&[tk, x.d], "T·k·D (expert outputs)")?;
                let shared_out = if fs > 0 { td } else { 0 };
                non_gemm.push(elementwise(
                    "moe_combine",
                    ElementwiseKind::MoeCombine,
                    tkd,
                    MOE_COMBINE_FLOPS_PER_ELEMENT,
                    checked_sum(&[tkd, tk, shared_out], "combine reads")?,
                    td,
                    dt,
                )?);
            }
        }
        non_gemm.push(elementwise(
            "residual_mlp",
            ElementwiseKind::ResidualAdd,
            td,
            RESIDUAL_FLOPS_PER_ELEMENT,
            td2,
            td,
            dt,
        )?);
        // Storage dtypes of the B operands: weights, or the KV cache that the attention GEMMs
        // read (the naive latent form reads up-projected keys and values, intermediates).
        let (wdt, kvdt) = (self.weight_dtype(), self.kv_dtype());
        let naive_mla = self.mla.as_ref().is_some_and(|m| m.form == MlaForm::Naive);
        for g in gemms.iter_mut() {
            let b = match g.role {
                GemmRole::AttnScores | GemmRole::AttnValues if naive_mla => dt,
                GemmRole::AttnScores | GemmRole::AttnValues => kvdt,
                _ => wdt,
            };
            g.b_dtype = (b != dt).then_some(b);
            if !matches!(g.role, GemmRole::AttnScores | GemmRole::AttnValues) {
                g.b_groups = self.weight_groups;
            }
        }
        let weight_params = self.weight_params()?;
        let (kv_heads, head_dim, group) = if self.mla.is_some() {
            (x.h, x.hd, 1)
        } else {
            (x.hkv, x.hd, x.g)
        };
        Ok(BlockDecomposition {
            tokens: x.t,
            query_len: x.sq,
            attention_len: x.l,
            attended_len: x.la,
            experts_touched,
            kv_heads,
            head_dim,
            kv_group_size: group,
            gemms,
            non_gemm,
            causal_useful_fraction: self.causal_useful_fraction()?,
            weight_params,
            weight_bytes: self.weight_storage_bytes(weight_params)?,
            kv_cache_bytes: kvdt.bytes_for(kv_elems)?,
            active_weight_params: self.active_weight_params()?,
        })
    }
}

/// Names of the built-in transformer-block presets.
pub const TRANSFORMER_PRESET_NAMES: &[&str] = &[
    "transformer_small",
    "transformer_medium",
    "transformer_long_sequence",
];

/// A transformer-block preset (fp16, MHA, GELU, LayerNorm, causal, prefill, batch 1):
/// `transformer_small` S128 D512 H8 F2048, `transformer_medium` S256 D768 H12 F3072,
/// `transformer_long_sequence` S1024 D512 H8 F2048.
pub fn transformer_preset(name: &str) -> Result<TransformerBlock> {
    let (seq_len, d_model, heads, d_ff) = match name {
        "transformer_small" => (128, 512, 8, 2048),
        "transformer_medium" => (256, 768, 12, 3072),
        "transformer_long_sequence" => (1024, 512, 8, 2048),
        _ => {
            return Err(CoreError::Unknown {
                kind: "transformer preset".into(),
                name: name.into(),
                valid: TRANSFORMER_PRESET_NAMES.join(", "),
            })
        }
    };
    Ok(TransformerBlock::new(seq_len, d_model, heads, d_ff))
}
