//! Transformer workloads: one decoder block (MHA, GQA or MQA attention with rotary
//! embeddings, a GELU or SwiGLU MLP, LayerNorm or RMSNorm, prefill or decode against a KV
//! cache) decomposed into named GEMMs and element-wise operations, and a whole decoder
//! model (embedding, `layers` identical blocks, final norm, LM head), optionally read from
//! a Hugging Face `config.json` text. Every op reads its inputs from and writes its outputs
//! to DRAM (no fusion, softmax materialized); causal GEMMs are counted dense. Left out:
//! biases, dropout, MoE routing, sliding-window attention, tensor/pipeline parallelism and
//! anything not in the op list below (see docs/model.md, "Model workloads").

use crate::analysis::{LIMITATIONS, SCHEMA_VERSION};
use crate::dtype::DType;
use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::gemm::{Gemm, GemmRole, NamedGemm};
use crate::hardware::HardwareSpec;
use crate::roofline::{roofline, Bound, Roofline};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// `weight_params` in the block dtype, bytes.
    pub weight_bytes: u64,
    /// K and V attended over: `2 · B · Hkv · hd · L` elements, bytes.
    pub kv_cache_bytes: u64,
}

struct Dims {
    b: u64,
    sq: u64,
    l: u64,
    t: u64,
    h: u64,
    hkv: u64,
    hd: u64,
    g: u64,
    d: u64,
    f: u64,
}

fn named(role: GemmRole, m: u64, n: u64, k: u64, batch: u64, dtype: DType) -> Result<NamedGemm> {
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
    })
}

fn elementwise(
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

    /// Share of (query, key) pairs the causal mask keeps: query `i` of `S_q` at position
    /// `P + i` sees `P + i + 1` keys, so `(S_q·P + S_q(S_q+1)/2) / (S_q·L)`; 1 when not causal.
    pub fn causal_useful_fraction(&self) -> Result<f64> {
        if !self.causal {
            return Ok(1.0);
        }
        let sq = self.query_len() as u128;
        let p = self.kv_cache_len as u128;
        let l = self.attention_len()? as u128;
        if sq == 0 {
            return Err(CoreError::invalid("seq_len", 0, "must be at least 1"));
        }
        let useful = sq * p + sq * (sq + 1) / 2;
        Ok(useful as f64 / (sq * l) as f64)
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
        let hkv = self.effective_kv_heads();
        if hkv == 0 {
            return Err(CoreError::invalid("kv_heads", 0, "must be at least 1"));
        }
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
        let hd = self.effective_head_dim()?;
        Ok(Dims {
            b: self.batch,
            sq: self.query_len(),
            l: self.attention_len()?,
            t: self.tokens()?,
            h: self.heads,
            hkv,
            hd,
            g: self.heads / hkv,
            d: self.d_model,
            f: self.d_ff,
        })
    }

    /// Dimensions are ≥ 1, heads is a multiple of kv_heads, head_dim resolves, and every
    /// GEMM, element count and byte count fits in 64 bits.
    pub fn validate(&self) -> Result<()> {
        self.decompose().map(|_| ())
    }

    /// Weight parameters of the block: `2·D·H·hd + 2·D·Hkv·hd + mlp_matrices·D·F + 2·norm_params·D`.
    pub fn weight_params(&self) -> Result<u64> {
        let x = self.dims()?;
        let q = checked_product(&[x.d, x.h, x.hd], "D·H·hd (q/o weights)")?;
        let kv = checked_product(&[x.d, x.hkv, x.hd], "D·Hkv·hd (k/v weights)")?;
        let mlp = checked_product(
            &[self.mlp.matrices(), x.d, x.f],
            "mlp_matrices·D·F (MLP weights)",
        )?;
        let norms = checked_product(&[2, self.norm.params_per_channel(), x.d], "norm parameters")?;
        checked_sum(&[q, q, kv, kv, mlp, norms], "block weight parameters")
    }

    /// Named GEMMs (M, N, K, batch) and element-wise ops of the block, with weight and
    /// KV-cache bytes; attention GEMMs group the `g = H/Hkv` query heads sharing one K/V head.
    pub fn decompose(&self) -> Result<BlockDecomposition> {
        let x = self.dims()?;
        let dt = self.dtype;
        let qw = checked_product(&[x.h, x.hd], "H·hd (query width)")?;
        let kvw = checked_product(&[x.hkv, x.hd], "Hkv·hd (key/value width)")?;
        let gsq = checked_product(&[x.g, x.sq], "g·S_q (grouped query rows)")?;
        let bkv = checked_product(&[x.b, x.hkv], "batch·Hkv (attention GEMM batch)")?;
        let mut gemms = vec![
            named(GemmRole::QProj, x.t, qw, x.d, 1, dt)?,
            named(GemmRole::KProj, x.t, kvw, x.d, 1, dt)?,
            named(GemmRole::VProj, x.t, kvw, x.d, 1, dt)?,
            named(GemmRole::AttnScores, gsq, x.l, x.hd, bkv, dt)?,
            named(GemmRole::AttnValues, gsq, x.hd, x.l, bkv, dt)?,
            named(GemmRole::OProj, x.t, x.d, qw, 1, dt)?,
        ];
        if self.mlp == MlpKind::Swiglu {
            gemms.push(named(GemmRole::MlpGate, x.t, x.f, x.d, 1, dt)?);
        }
        gemms.push(named(GemmRole::MlpUp, x.t, x.f, x.d, 1, dt)?);
        gemms.push(named(GemmRole::MlpDown, x.t, x.d, x.f, 1, dt)?);

        let td = checked_product(&[x.t, x.d], "T·D (hidden elements)")?;
        let tf = checked_product(&[x.t, x.f], "T·F (MLP hidden elements)")?;
        let norm_params =
            checked_product(&[self.norm.params_per_channel(), x.d], "norm parameters")?;
        let norm_read = checked_sum(&[td, norm_params], "norm elements read")?;
        let heads_qk = checked_sum(&[x.h, x.hkv], "H+Hkv (rotary heads)")?;
        let rot = checked_product(&[x.t, heads_qk, x.hd], "T·(H+Hkv)·hd (rotary elements)")?;
        let rot_tables = checked_product(&[2, x.sq, x.hd], "2·S_q·hd (cos/sin tables)")?;
        let rot_read = checked_sum(&[rot, rot_tables], "rotary elements read")?;
        let scores = checked_product(&[x.b, x.h, x.sq, x.l], "batch·H·S_q·L (softmax elements)")?;
        let td2 = checked_product(&[2, td], "2·T·D (residual reads)")?;
        let (act_fpe, act_read) = match self.mlp {
            MlpKind::Gelu => (GELU_FLOPS_PER_ELEMENT, tf),
            MlpKind::Swiglu => (
                SWIGLU_FLOPS_PER_ELEMENT,
                checked_product(&[2, tf], "2·T·F (SwiGLU reads)")?,
            ),
        };
        let norm = ElementwiseKind::from(self.norm);
        let nfpe = self.norm.flops_per_element();
        let non_gemm = vec![
            elementwise("norm_attn", norm, td, nfpe, norm_read, td, dt)?,
            elementwise(
                "rotary",
                ElementwiseKind::Rotary,
                rot,
                ROTARY_FLOPS_PER_ELEMENT,
                rot_read,
                rot,
                dt,
            )?,
            elementwise(
                "softmax",
                ElementwiseKind::Softmax,
                scores,
                SOFTMAX_FLOPS_PER_ELEMENT,
                scores,
                scores,
                dt,
            )?,
            elementwise(
                "residual_attn",
                ElementwiseKind::ResidualAdd,
                td,
                RESIDUAL_FLOPS_PER_ELEMENT,
                td2,
                td,
                dt,
            )?,
            elementwise("norm_mlp", norm, td, nfpe, norm_read, td, dt)?,
            elementwise("activation", self.mlp.into(), tf, act_fpe, act_read, tf, dt)?,
            elementwise(
                "residual_mlp",
                ElementwiseKind::ResidualAdd,
                td,
                RESIDUAL_FLOPS_PER_ELEMENT,
                td2,
                td,
                dt,
            )?,
        ];
        let weight_params = self.weight_params()?;
        let kv_elems = checked_product(
            &[2, x.b, x.hkv, x.hd, x.l],
            "2·B·Hkv·hd·L (KV cache elements)",
        )?;
        Ok(BlockDecomposition {
            tokens: x.t,
            query_len: x.sq,
            attention_len: x.l,
            kv_heads: x.hkv,
            head_dim: x.hd,
            kv_group_size: x.g,
            gemms,
            non_gemm,
            causal_useful_fraction: self.causal_useful_fraction()?,
            weight_params,
            weight_bytes: dt.bytes_for(weight_params)?,
            kv_cache_bytes: dt.bytes_for(kv_elems)?,
        })
    }
}

/// Time lower bound and bound of `flops` over `bytes` at `dtype`'s peak; an op without
/// FLOPs (a gather) is memory-bound at `max over levels of bytes / bandwidth`.
fn op_time(hw: &HardwareSpec, dtype: DType, flops: u64, bytes: u64) -> Result<(f64, Bound)> {
    if flops > 0 {
        let r = roofline(hw, dtype, flops as f64, bytes as f64, &[])?;
        return Ok((r.time_lower_bound_s, r.bound));
    }
    hw.peak_for(dtype)?;
    let t = hw
        .bandwidth_levels()
        .map(|(_, bw)| bytes as f64 / bw)
        .fold(0.0f64, f64::max);
    Ok((t, Bound::Memory))
}

/// One GEMM of a decomposed workload with its roofline time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmRow {
    /// GEMM name, e.g. `q_proj`.
    pub name: String,
    /// Rows of A and C.
    pub m: u64,
    /// Columns of B and C.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent GEMMs.
    pub batch: u64,
    /// `batch · M · N · K`.
    pub macs: u64,
    /// `2 · MACs`.
    pub flops: u64,
    /// A + B + C each moved once, bytes.
    pub compulsory_bytes: u64,
    /// `flops / compulsory_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// `max(flops / peak, bytes / bandwidth)` from the roofline, seconds.
    pub time_lower_bound_s: f64,
    /// Which roof binds.
    pub bound: Bound,
}

impl GemmRow {
    /// Counts and roofline time of one named GEMM on `hw` at its dtype.
    pub fn new(g: &NamedGemm, hw: &HardwareSpec) -> Result<GemmRow> {
        let flops = g.gemm.flops()?;
        let bytes = g.gemm.compulsory_bytes()?;
        let (t, bound) = op_time(hw, g.gemm.dtype, flops, bytes)?;
        Ok(GemmRow {
            name: g.name.clone(),
            m: g.gemm.m,
            n: g.gemm.n,
            k: g.gemm.k,
            batch: g.gemm.batch,
            macs: g.gemm.macs()?,
            flops,
            compulsory_bytes: bytes,
            arithmetic_intensity: flops as f64 / bytes as f64,
            time_lower_bound_s: t,
            bound,
        })
    }
}

/// One element-wise op of a decomposed workload with its roofline time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NonGemmRow {
    /// Op name, e.g. `softmax`.
    pub name: String,
    /// What it computes, e.g. `rmsnorm`.
    pub op: ElementwiseKind,
    /// Elements produced.
    pub elements: u64,
    /// FLOPs (per-element convention × elements).
    pub flops: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `bytes_read + bytes_written`.
    pub dram_bytes: u64,
    /// `flops / dram_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// `max(flops / peak, dram_bytes / bandwidth)` at the block dtype's peak, seconds.
    pub time_lower_bound_s: f64,
    /// Which roof binds (memory for an op without FLOPs).
    pub bound: Bound,
}

impl NonGemmRow {
    /// Byte total and roofline time of one element-wise op at `dtype`'s peak on `hw`.
    pub fn new(op: &NonGemmOp, dtype: DType, hw: &HardwareSpec) -> Result<NonGemmRow> {
        let bytes = checked_sum(&[op.bytes_read, op.bytes_written], "element-wise op bytes")?;
        let (t, bound) = op_time(hw, dtype, op.flops, bytes)?;
        Ok(NonGemmRow {
            name: op.name.clone(),
            op: op.op,
            elements: op.elements,
            flops: op.flops,
            bytes_read: op.bytes_read,
            bytes_written: op.bytes_written,
            dram_bytes: bytes,
            arithmetic_intensity: op.flops as f64 / bytes as f64,
            time_lower_bound_s: t,
            bound,
        })
    }
}

/// Totals over every op of a block or model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransformerTotals {
    /// GEMM MACs (element-wise ops have none).
    pub macs: u64,
    /// `gemm_flops + non_gemm_flops`.
    pub flops: u64,
    /// FLOPs of the GEMMs.
    pub gemm_flops: u64,
    /// FLOPs of the element-wise ops.
    pub non_gemm_flops: u64,
    /// Sum of every op's compulsory bytes (unfused: each op's inputs and outputs cross DRAM).
    pub dram_bytes: u64,
    /// `flops / dram_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// Weight bytes (projections, MLP, norms; for a model also embedding and LM head).
    pub weight_bytes: u64,
    /// KV cache attended over, bytes.
    pub kv_cache_bytes: u64,
    /// Sum of per-op lower bounds (ops run one after another), seconds.
    pub time_lower_bound_s: f64,
}

/// The transformer-block analysis report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransformerAnalysis {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `transformer`.
    pub kind: String,
    /// The workload.
    pub workload: TransformerBlock,
    /// Hardware name.
    pub hardware: String,
    /// `T = batch · S_q`.
    pub tokens: u64,
    /// `S_q`.
    pub query_len: u64,
    /// `L = kv_cache_len + S_q`.
    pub attention_len: u64,
    /// Resolved Hkv.
    pub kv_heads: u64,
    /// Resolved hd.
    pub head_dim: u64,
    /// `g = H / Hkv`.
    pub kv_group_size: u64,
    /// Share of the dense attention GEMMs' (query, key) pairs the causal mask keeps.
    pub causal_useful_fraction: f64,
    /// Weight parameters of the block.
    pub weight_params: u64,
    /// Per-GEMM rows, execution order.
    pub gemms: Vec<GemmRow>,
    /// Per element-wise op rows, execution order.
    pub non_gemm: Vec<NonGemmRow>,
    /// Totals over all rows.
    pub totals: TransformerTotals,
    /// Roofline of the totals as if the block were one kernel (`≤ totals.time_lower_bound_s`).
    pub roofline: Roofline,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// Transformer-specific omissions, appended to [`LIMITATIONS`].
pub const TRANSFORMER_LIMITATIONS: &[&str] = &[
    "no fusion across ops: every GEMM and element-wise op reads its inputs from DRAM and writes its outputs to DRAM",
    "softmax is materialized: scores are written, read, and probabilities written and read again; flash-attention-style fusion would remove that traffic",
    "causal attention GEMMs and softmax are counted dense (what an unskipped kernel runs); causal_useful_fraction gives the unmasked share",
    "element-wise FLOPs use fixed per-element conventions (exp, tanh, rsqrt each one op); see docs/model.md (Model workloads, element-wise FLOP conventions)",
    "rotary position embedding is assumed on q and k; learned/absolute position embeddings and ALiBi are not modelled",
    "no biases, dropout, KV-cache paging or layout; the KV-cache append is the k_proj/v_proj output write",
    "time_lower_bound_s sums per-op bounds (ops run back to back); the roofline field treats the whole as one perfectly fused kernel",
    "single device: no tensor, pipeline or expert parallelism and no communication",
];

fn strings(a: &[&str], b: &[&str]) -> Vec<String> {
    a.iter().chain(b).map(|s| s.to_string()).collect()
}

fn totals(
    gemms: &[GemmRow],
    non_gemm: &[NonGemmRow],
    weight_bytes: u64,
    kv_cache_bytes: u64,
) -> Result<TransformerTotals> {
    let sum = |v: Vec<u64>, what: &str| checked_sum(&v, what);
    let macs = sum(gemms.iter().map(|r| r.macs).collect(), "total MACs")?;
    let gemm_flops = sum(gemms.iter().map(|r| r.flops).collect(), "GEMM FLOPs")?;
    let non_gemm_flops = sum(
        non_gemm.iter().map(|r| r.flops).collect(),
        "element-wise FLOPs",
    )?;
    let dram = sum(
        gemms
            .iter()
            .map(|r| r.compulsory_bytes)
            .chain(non_gemm.iter().map(|r| r.dram_bytes))
            .collect(),
        "total DRAM bytes",
    )?;
    let flops = checked_sum(&[gemm_flops, non_gemm_flops], "total FLOPs")?;
    Ok(TransformerTotals {
        macs,
        flops,
        gemm_flops,
        non_gemm_flops,
        dram_bytes: dram,
        arithmetic_intensity: flops as f64 / dram as f64,
        weight_bytes,
        kv_cache_bytes,
        time_lower_bound_s: gemms
            .iter()
            .map(|r| r.time_lower_bound_s)
            .chain(non_gemm.iter().map(|r| r.time_lower_bound_s))
            .sum(),
    })
}

fn decode_note(b: &TransformerBlock, l: u64) -> Option<String> {
    (b.phase == Phase::Decode).then(|| {
        format!(
            "decode: one new token per sequence attends over kv_cache_len + 1 = {l} positions; seq_len ({}) is not used",
            b.seq_len
        )
    })
}

/// Analyze one transformer block on one chip: per-op rows with roofline times, totals and
/// the roofline of the totals.
pub fn analyze_transformer(b: &TransformerBlock, hw: &HardwareSpec) -> Result<TransformerAnalysis> {
    let dec = b.decompose()?;
    let gemms = dec
        .gemms
        .iter()
        .map(|g| GemmRow::new(g, hw))
        .collect::<Result<Vec<_>>>()?;
    let non_gemm = dec
        .non_gemm
        .iter()
        .map(|o| NonGemmRow::new(o, b.dtype, hw))
        .collect::<Result<Vec<_>>>()?;
    let totals = totals(&gemms, &non_gemm, dec.weight_bytes, dec.kv_cache_bytes)?;
    let rl = roofline(
        hw,
        b.dtype,
        totals.flops as f64,
        totals.dram_bytes as f64,
        &[],
    )?;
    let mut limitations = strings(LIMITATIONS, TRANSFORMER_LIMITATIONS);
    limitations.extend(decode_note(b, dec.attention_len));
    Ok(TransformerAnalysis {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "transformer".into(),
        workload: b.clone(),
        hardware: hw.name.clone(),
        tokens: dec.tokens,
        query_len: dec.query_len,
        attention_len: dec.attention_len,
        kv_heads: dec.kv_heads,
        head_dim: dec.head_dim,
        kv_group_size: dec.kv_group_size,
        causal_useful_fraction: dec.causal_useful_fraction,
        weight_params: dec.weight_params,
        gemms,
        non_gemm,
        totals,
        roofline: rl,
        limitations,
    })
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
    Ok(TransformerBlock {
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
    })
}

/// Which tokens the LM head computes logits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LmHeadTokens {
    /// Every processed token, `T = batch · S_q` (training-style or scoring).
    All,
    /// The last token of each sequence, `batch` rows (serving); in decode this equals `All`.
    #[default]
    Last,
}

/// A decoder-only model: embedding, `layers` identical blocks, final norm, LM head.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecoderModel {
    /// Label, e.g. the config file it came from (may be empty).
    #[serde(default)]
    pub name: String,
    /// The repeated block (its phase, batch, cache length and dtype apply to the whole model).
    pub block: TransformerBlock,
    /// Number of blocks.
    pub layers: u64,
    /// Vocabulary size, V.
    pub vocab_size: u64,
    /// The LM head reuses the embedding matrix (its weights are counted once).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Tokens the LM head runs on (default `last`).
    #[serde(default)]
    pub lm_head_tokens: LmHeadTokens,
    /// How the model was derived (config mapping decisions, ignored features).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl DecoderModel {
    /// Rows of the LM-head GEMM: `batch · S_q` for `all`, `batch` for `last`.
    pub fn lm_head_token_count(&self) -> Result<u64> {
        match self.lm_head_tokens {
            LmHeadTokens::All => self.block.tokens(),
            LmHeadTokens::Last => Ok(self.block.batch),
        }
    }

    /// Weight parameters: `V·D` embedding + `V·D` LM head unless tied + `norm_params·D` final
    /// norm + `layers · block weight_params`.
    pub fn weight_params(&self) -> Result<u64> {
        let d = self.block.d_model;
        let emb = checked_product(&[self.vocab_size, d], "V·D (embedding parameters)")?;
        let head = if self.tie_word_embeddings { 0 } else { emb };
        let final_norm = checked_product(
            &[self.block.norm.params_per_channel(), d],
            "final norm parameters",
        )?;
        let blocks = checked_product(
            &[self.layers, self.block.weight_params()?],
            "layers · block weights",
        )?;
        checked_sum(&[emb, head, final_norm, blocks], "model weight parameters")
    }

    /// Layers and vocabulary are ≥ 1, the block is valid, and every total fits in 64 bits.
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [("layers", self.layers), ("vocab_size", self.vocab_size)] {
            if v == 0 {
                return Err(CoreError::invalid(f, v, "must be at least 1"));
            }
        }
        self.block.validate()?;
        self.block.dtype.bytes_for(self.weight_params()?)?;
        let parts = self.parts()?;
        parts.lm_head.gemm.validate()?;
        Ok(())
    }

    fn parts(&self) -> Result<ModelParts> {
        let b = &self.block;
        let t = b.tokens()?;
        let td = checked_product(&[t, b.d_model], "T·D (hidden elements)")?;
        let norm_params = checked_product(
            &[b.norm.params_per_channel(), b.d_model],
            "final norm parameters",
        )?;
        let embedding = elementwise(
            "embedding",
            ElementwiseKind::EmbeddingGather,
            td,
            0,
            td,
            td,
            b.dtype,
        )?;
        let final_norm = elementwise(
            "final_norm",
            b.norm.into(),
            td,
            b.norm.flops_per_element(),
            checked_sum(&[td, norm_params], "final norm elements read")?,
            td,
            b.dtype,
        )?;
        let lm_tokens = self.lm_head_token_count()?;
        let lm_head = named(
            GemmRole::LmHead,
            lm_tokens,
            self.vocab_size,
            b.d_model,
            1,
            b.dtype,
        )?;
        Ok(ModelParts {
            embedding,
            final_norm,
            lm_head,
            lm_tokens,
        })
    }
}

struct ModelParts {
    embedding: NonGemmOp,
    final_norm: NonGemmOp,
    lm_head: NamedGemm,
    lm_tokens: u64,
}

/// The whole-model analysis report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelAnalysis {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `model`.
    pub kind: String,
    /// The workload.
    pub workload: DecoderModel,
    /// Hardware name.
    pub hardware: String,
    /// Number of blocks.
    pub layers: u64,
    /// Rows of the LM-head GEMM.
    pub lm_head_tokens: u64,
    /// One block's analysis (its totals are per block; multiply by `layers`).
    pub block: TransformerAnalysis,
    /// Embedding gather: reads `T·D` table elements, writes `T·D`, no FLOPs.
    pub embedding: NonGemmRow,
    /// Final norm over `T·D`.
    pub final_norm: NonGemmRow,
    /// LM head GEMM `(lm_head_tokens, V, D)`.
    pub lm_head: GemmRow,
    /// Weight parameters of the whole model.
    pub weight_params: u64,
    /// `layers × block` + embedding + final norm + LM head; weights and KV cache whole-model.
    pub totals: TransformerTotals,
    /// Roofline of the totals as one kernel (`≤ totals.time_lower_bound_s`).
    pub roofline: Roofline,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// Whole-model omissions, appended to the block's.
pub const MODEL_LIMITATIONS: &[&str] = &[
    "all layers are identical: no MoE routing, sliding-window or per-layer variation",
    "embedding gather reads only the T·D table rows used (token ids not counted); the LM head reads the full V·D matrix",
    "logit post-processing (softmax over the vocabulary, sampling) is not modelled",
];

/// Analyze a decoder model: one block's table, totals multiplied by `layers`, plus
/// embedding gather, final norm and LM head.
pub fn analyze_model(m: &DecoderModel, hw: &HardwareSpec) -> Result<ModelAnalysis> {
    m.validate()?;
    let block = analyze_transformer(&m.block, hw)?;
    let parts = m.parts()?;
    let dt = m.block.dtype;
    let embedding = NonGemmRow::new(&parts.embedding, dt, hw)?;
    let final_norm = NonGemmRow::new(&parts.final_norm, dt, hw)?;
    let lm_head = GemmRow::new(&parts.lm_head, hw)?;
    let bt = &block.totals;
    let l = m.layers;
    let mul = |v: u64, what: &str| checked_product(&[l, v], what);
    let weight_params = m.weight_params()?;
    let gemm_flops = checked_sum(
        &[mul(bt.gemm_flops, "layers · GEMM FLOPs")?, lm_head.flops],
        "model GEMM FLOPs",
    )?;
    let non_gemm_flops = checked_sum(
        &[
            mul(bt.non_gemm_flops, "layers · element-wise FLOPs")?,
            final_norm.flops,
        ],
        "model element-wise FLOPs",
    )?;
    let flops = checked_sum(&[gemm_flops, non_gemm_flops], "model FLOPs")?;
    let dram = checked_sum(
        &[
            mul(bt.dram_bytes, "layers · DRAM bytes")?,
            embedding.dram_bytes,
            final_norm.dram_bytes,
            lm_head.compulsory_bytes,
        ],
        "model DRAM bytes",
    )?;
    let totals = TransformerTotals {
        macs: checked_sum(
            &[mul(bt.macs, "layers · MACs")?, lm_head.macs],
            "model MACs",
        )?,
        flops,
        gemm_flops,
        non_gemm_flops,
        dram_bytes: dram,
        arithmetic_intensity: flops as f64 / dram as f64,
        weight_bytes: dt.bytes_for(weight_params)?,
        kv_cache_bytes: mul(bt.kv_cache_bytes, "layers · KV cache bytes")?,
        time_lower_bound_s: l as f64 * bt.time_lower_bound_s
            + embedding.time_lower_bound_s
            + final_norm.time_lower_bound_s
            + lm_head.time_lower_bound_s,
    };
    let rl = roofline(hw, dt, flops as f64, dram as f64, &[])?;
    let mut limitations = strings(LIMITATIONS, TRANSFORMER_LIMITATIONS);
    limitations.extend(MODEL_LIMITATIONS.iter().map(|s| s.to_string()));
    limitations.extend(decode_note(&m.block, block.attention_len));
    limitations.extend(m.notes.iter().cloned());
    Ok(ModelAnalysis {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "model".into(),
        workload: m.clone(),
        hardware: hw.name.clone(),
        layers: l,
        lm_head_tokens: parts.lm_tokens,
        block,
        embedding,
        final_norm,
        lm_head,
        weight_params,
        totals,
        roofline: rl,
        limitations,
    })
}

/// `model_type` values whose MLP is gated (three matrices) whatever `hidden_act` says.
pub const GATED_MODEL_TYPES: &[&str] = &[
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3",
];

/// Build a [`DecoderModel`] from the text of a Hugging Face `config.json` (`source` labels
/// errors). Gated MLP (SwiGLU, 3 matrices) when `hidden_act` is silu/swish or `model_type`
/// is in [`GATED_MODEL_TYPES`], else GELU (2); RMSNorm when `rms_norm_eps` is present.
pub fn decoder_from_hf_config(
    json_text: &str,
    source: &str,
    batch: u64,
    seq_len: u64,
    phase: Phase,
    kv_cache_len: u64,
    dtype: DType,
) -> Result<DecoderModel> {
    let parse_err = |message: String| CoreError::Parse {
        source_name: source.to_string(),
        message,
    };
    let v: Value = serde_json::from_str(json_text).map_err(|e| parse_err(e.to_string()))?;
    crate::json::reject_duplicate_keys(json_text).map_err(parse_err)?;
    let obj = v
        .as_object()
        .ok_or_else(|| parse_err("expected a JSON object (a Hugging Face config.json)".into()))?;
    let field_err =
        |f: &str, val: &Value, reason: &str| CoreError::invalid(f, val, reason).with_source(source);
    let uint = |f: &str| -> Result<Option<u64>> {
        match obj.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_u64()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| field_err(f, x, "must be a positive integer")),
        }
    };
    let req = |f: &str| -> Result<u64> {
        uint(f)?.ok_or_else(|| {
            CoreError::invalid(
                f,
                "(missing)",
                "required in a Hugging Face decoder config.json",
            )
            .with_source(source)
        })
    };
    let text = |f: &str| -> Result<Option<String>> {
        match obj.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_ascii_lowercase())),
            Some(x) => Err(field_err(f, x, "must be a string")),
        }
    };
    let d_model = req("hidden_size")?;
    let heads = req("num_attention_heads")?;
    let kv_heads = uint("num_key_value_heads")?;
    let head_dim = uint("head_dim")?;
    let d_ff = req("intermediate_size")?;
    let layers = req("num_hidden_layers")?;
    let vocab_size = req("vocab_size")?;
    let act = text("hidden_act")?;
    let model_type = text("model_type")?;
    let tie = match obj.get("tie_word_embeddings") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(x) => return Err(field_err("tie_word_embeddings", x, "must be true or false")),
    };
    let mut notes = Vec::new();
    let act_gated = matches!(act.as_deref(), Some("silu") | Some("swish"));
    let type_gated = model_type
        .as_deref()
        .is_some_and(|t| GATED_MODEL_TYPES.contains(&t));
    let mlp = if act_gated || type_gated {
        MlpKind::Swiglu
    } else {
        MlpKind::Gelu
    };
    let why = if act_gated {
        format!("hidden_act = {}", act.as_deref().unwrap_or(""))
    } else if type_gated {
        format!(
            "model_type = {} is a gated family",
            model_type.as_deref().unwrap_or("")
        )
    } else {
        format!(
            "hidden_act = {} and model_type = {} are not gated",
            act.as_deref().unwrap_or("(absent)"),
            model_type.as_deref().unwrap_or("(absent)")
        )
    };
    notes.push(format!("{source}: mlp = {} ({why})", mlp.name()));
    let norm = if obj.contains_key("rms_norm_eps") {
        NormKind::RmsNorm
    } else {
        NormKind::LayerNorm
    };
    notes.push(format!(
        "{source}: norm = {} ({})",
        norm.name(),
        if norm == NormKind::RmsNorm {
            "rms_norm_eps present"
        } else {
            "no rms_norm_eps"
        }
    ));
    for key in ["num_local_experts", "num_experts", "n_routed_experts"] {
        if obj.get(key).and_then(Value::as_u64).is_some_and(|n| n > 1) {
            notes.push(format!(
                "{source}: {key} present: mixture-of-experts is modelled as one dense MLP of intermediate_size per token"
            ));
        }
    }
    if obj.get("sliding_window").is_some_and(|x| !x.is_null()) {
        notes.push(format!(
            "{source}: sliding_window ignored: attention spans the full L positions"
        ));
    }
    let block = TransformerBlock {
        batch,
        seq_len,
        d_model,
        heads,
        kv_heads,
        head_dim,
        d_ff,
        mlp,
        norm,
        causal: true,
        phase,
        kv_cache_len,
        dtype,
    };
    let m = DecoderModel {
        name: source.to_string(),
        block,
        layers,
        vocab_size,
        tie_word_embeddings: tie,
        lm_head_tokens: LmHeadTokens::default(),
        notes,
    };
    m.validate().map_err(|e| e.with_source(source))?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;
    use proptest::prelude::*;

    const LLAMA2: &str = include_str!("../data/models/llama2_7b_config.json");
    const LLAMA3: &str = include_str!("../data/models/llama3_8b_config.json");

    fn hw() -> HardwareSpec {
        presets::hardware("balanced").unwrap()
    }

    fn gemm_flops(d: &BlockDecomposition) -> u64 {
        d.gemms.iter().map(|g| g.gemm.flops().unwrap()).sum()
    }

    fn find<'a>(d: &'a BlockDecomposition, name: &str) -> &'a Gemm {
        &d.gemms.iter().find(|g| g.name == name).unwrap().gemm
    }

    #[test]
    fn small_prefill_gemm_flops_match_reference() {
        // 8·B·S·D² + 4·B·S·D·F + 4·B·S²·D with B1 S128 D512 F2048:
        // 8·128·262 144 = 268 435 456; 4·128·512·2048 = 536 870 912; 4·16 384·512 = 33 554 432.
        let b = transformer_preset("transformer_small").unwrap();
        let d = b.decompose().unwrap();
        assert_eq!(gemm_flops(&d), 268_435_456 + 536_870_912 + 33_554_432);
        assert_eq!(gemm_flops(&d), 838_860_800);
        let names: Vec<_> = d.gemms.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "q_proj",
                "k_proj",
                "v_proj",
                "attn_scores",
                "attn_values",
                "o_proj",
                "mlp_up",
                "mlp_down"
            ]
        );
        // attn_scores per head: (S, L, hd) = (128, 128, 64), batch B·H = 8.
        let s = find(&d, "attn_scores");
        assert_eq!((s.m, s.n, s.k, s.batch), (128, 128, 64, 8));
        let a = analyze_transformer(&b, &hw()).unwrap();
        assert_eq!(a.totals.gemm_flops, 838_860_800);
        assert_eq!(
            a.totals.flops,
            a.totals.gemm_flops + a.totals.non_gemm_flops
        );
        assert_eq!(a.kind, "transformer");
        assert_eq!(a.evidence, "model");
        // Causal prefill without cache: (S+1)/(2S) = 129/256.
        assert_eq!(a.causal_useful_fraction, 129.0 / 256.0);
        let per_op: f64 = a.gemms.iter().map(|r| r.time_lower_bound_s).sum::<f64>()
            + a.non_gemm.iter().map(|r| r.time_lower_bound_s).sum::<f64>();
        assert!((a.totals.time_lower_bound_s - per_op).abs() <= 1e-15 * per_op);
        assert!(a.roofline.time_lower_bound_s <= a.totals.time_lower_bound_s);
    }

    #[test]
    fn gemm_roles_tag_the_attention_part() {
        let b = TransformerBlock {
            mlp: MlpKind::Swiglu,
            ..transformer_preset("transformer_small").unwrap()
        };
        let d = b.decompose().unwrap();
        let attention: Vec<&str> = d
            .gemms
            .iter()
            .filter(|g| g.role.is_attention())
            .map(|g| g.name.as_str())
            .collect();
        // Six attention GEMMs; the three SwiGLU MLP GEMMs are not attention.
        assert_eq!(
            attention,
            [
                "q_proj",
                "k_proj",
                "v_proj",
                "attn_scores",
                "attn_values",
                "o_proj"
            ]
        );
        assert_eq!(d.gemms.len(), 9);
        assert!(d.gemms.iter().all(|g| g.role.name() == g.name));
        // The role is in the JSON, and a GEMM without one reads back as `other`.
        let v = serde_json::to_value(&d.gemms[0]).unwrap();
        assert_eq!(v["role"], "q_proj");
        let g: NamedGemm = serde_json::from_value(serde_json::json!({
            "name": "x",
            "gemm": v["gemm"].clone()
        }))
        .unwrap();
        assert_eq!(g.role, GemmRole::Other);
    }

    #[test]
    fn small_prefill_non_gemm_and_bytes() {
        // T = 128, D = 512, F = 2048, H = Hkv = 8, hd = 64, fp16.
        let d = transformer_preset("transformer_small")
            .unwrap()
            .decompose()
            .unwrap();
        let op = |n: &str| d.non_gemm.iter().find(|o| o.name == n).unwrap().clone();
        // LayerNorm: 65 536 elements · 7 = 458 752 FLOPs; reads (65 536 + 1024)·2 B, writes 131 072 B.
        let n = op("norm_attn");
        assert_eq!(
            (n.elements, n.flops, n.bytes_read, n.bytes_written),
            (65_536, 458_752, 133_120, 131_072)
        );
        // Rotary: 128·16·64 = 131 072 elements · 3; tables 2·128·64 = 16 384 elements.
        let r = op("rotary");
        assert_eq!(
            (r.elements, r.flops, r.bytes_read),
            (131_072, 393_216, (131_072 + 16_384) * 2)
        );
        // Softmax: B·H·S·L = 8·128·128 = 131 072 elements · 5.
        let s = op("softmax");
        assert_eq!(
            (s.elements, s.flops, s.bytes_read, s.bytes_written),
            (131_072, 655_360, 262_144, 262_144)
        );
        // GELU: T·F = 262 144 elements · 8.
        let g = op("activation");
        assert_eq!(
            (g.op.name(), g.flops, g.bytes_read),
            ("gelu", 2_097_152, 524_288)
        );
        // Residual: read 2·T·D, write T·D.
        let res = op("residual_mlp");
        assert_eq!(
            (res.flops, res.bytes_read, res.bytes_written),
            (65_536, 262_144, 131_072)
        );
        // Weights: 4·512² + 2·512·2048 + 2·2·512 = 1 048 576 + 2 097 152 + 2048 = 3 147 776 params.
        assert_eq!(d.weight_params, 3_147_776);
        assert_eq!(d.weight_bytes, 6_295_552);
        // KV: 2·1·8·64·128·2 B = 262 144.
        assert_eq!(d.kv_cache_bytes, 262_144);
    }

    #[test]
    fn gqa_cuts_kv_projection_and_cache_by_group_size() {
        // H = 8, Hkv = 2: g = 4; k/v proj FLOPs and KV cache shrink 4×, attention FLOPs do not.
        let mha = transformer_preset("transformer_small").unwrap();
        let gqa = TransformerBlock {
            kv_heads: Some(2),
            ..mha.clone()
        };
        let (a, b) = (mha.decompose().unwrap(), gqa.decompose().unwrap());
        for name in ["k_proj", "v_proj"] {
            assert_eq!(
                find(&a, name).flops().unwrap(),
                4 * find(&b, name).flops().unwrap()
            );
        }
        assert_eq!(a.kv_cache_bytes, 4 * b.kv_cache_bytes);
        assert_eq!(b.kv_group_size, 4);
        // Grouped scores: M = g·S = 512, N = L = 128, K = 64, batch B·Hkv = 2.
        let s = find(&b, "attn_scores");
        assert_eq!((s.m, s.n, s.k, s.batch), (512, 128, 64, 2));
        assert_eq!(s.flops().unwrap(), find(&a, "attn_scores").flops().unwrap());
        // Each K head is read once per group: scores' B operand shrinks 4×.
        assert_eq!(
            find(&a, "attn_scores").operand_bytes().unwrap().b,
            4 * s.operand_bytes().unwrap().b
        );
        // q_proj unchanged; MQA (Hkv = 1) also valid.
        assert_eq!(find(&a, "q_proj"), find(&b, "q_proj"));
        assert!(TransformerBlock {
            kv_heads: Some(1),
            ..mha
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn decode_attends_over_cache() {
        // Decode, P = 127: S_q = 1, L = 128, T = B = 2.
        let b = TransformerBlock {
            batch: 2,
            phase: Phase::Decode,
            kv_cache_len: 127,
            ..transformer_preset("transformer_small").unwrap()
        };
        let d = b.decompose().unwrap();
        assert_eq!((d.tokens, d.query_len, d.attention_len), (2, 1, 128));
        // q_proj: 2·T·D·D = 2·2·512·512 = 1 048 576 FLOPs.
        assert_eq!(find(&d, "q_proj").flops().unwrap(), 1_048_576);
        // Scores: M = 1, N = 128, K = 64, batch 2·8 = 16 -> 2·16·128·64 = 262 144 FLOPs.
        let s = find(&d, "attn_scores");
        assert_eq!((s.m, s.n, s.k, s.batch), (1, 128, 64, 16));
        assert_eq!(s.flops().unwrap(), 262_144);
        // A single query sees every cached key: nothing masked.
        assert_eq!(d.causal_useful_fraction, 1.0);
        // KV: 2·2·8·64·128·2 B = 524 288.
        assert_eq!(d.kv_cache_bytes, 524_288);
        let a = analyze_transformer(&b, &hw()).unwrap();
        assert!(a.limitations.iter().any(|l| l.starts_with("decode:")));
        // Decode GEMMs against weights are memory-bound on a 2 TFLOP/s, 100 GB/s chip.
        assert_eq!(a.gemms[0].bound, Bound::Memory);
    }

    #[test]
    fn causal_fraction_with_cache() {
        // S_q = 4 new tokens after P = 6 cached: useful 4·6 + 4·5/2 = 34 of 4·10 = 40 pairs.
        let b = TransformerBlock {
            seq_len: 4,
            kv_cache_len: 6,
            ..transformer_preset("transformer_small").unwrap()
        };
        assert_eq!(b.causal_useful_fraction().unwrap(), 0.85);
        assert_eq!(
            TransformerBlock { causal: false, ..b }
                .causal_useful_fraction()
                .unwrap(),
            1.0
        );
    }

    #[test]
    fn swiglu_rmsnorm_block() {
        // SwiGLU adds mlp_gate; activation reads 2·T·F; RMSNorm 4 FLOPs/element, D params.
        let b = TransformerBlock {
            mlp: MlpKind::Swiglu,
            norm: NormKind::RmsNorm,
            ..transformer_preset("transformer_small").unwrap()
        };
        let d = b.decompose().unwrap();
        assert!(d.gemms.iter().any(|g| g.name == "mlp_gate"));
        let act = d.non_gemm.iter().find(|o| o.name == "activation").unwrap();
        // T·F = 262 144; reads 2·262 144·2 B, 5 FLOPs each.
        assert_eq!(
            (act.op.name(), act.flops, act.bytes_read),
            ("swiglu", 1_310_720, 1_048_576)
        );
        let n = d.non_gemm.iter().find(|o| o.name == "norm_mlp").unwrap();
        assert_eq!(
            (n.op.name(), n.flops, n.bytes_read),
            ("rmsnorm", 262_144, (65_536 + 512) * 2)
        );
        // 4·512² + 3·512·2048 + 2·512 = 1 048 576 + 3 145 728 + 1024.
        assert_eq!(d.weight_params, 4_195_328);
    }

    #[test]
    fn presets_and_unknown() {
        for n in TRANSFORMER_PRESET_NAMES {
            let b = transformer_preset(n).unwrap();
            analyze_transformer(&b, &hw()).unwrap();
        }
        let m = transformer_preset("transformer_medium").unwrap();
        assert_eq!(m.effective_head_dim().unwrap(), 64);
        let e = transformer_preset("transformer_xl")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("transformer_xl") && e.contains("transformer_small"),
            "{e}"
        );
    }

    #[test]
    fn bad_blocks_rejected() {
        let ok = transformer_preset("transformer_small").unwrap();
        let e = TransformerBlock {
            d_model: 0,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("d_model") && e.contains("= 0"), "{e}");
        let e = TransformerBlock {
            seq_len: 0,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("seq_len"), "{e}");
        let e = TransformerBlock {
            kv_heads: Some(3),
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("kv_heads") && e.contains("multiple"), "{e}");
        let e = TransformerBlock {
            kv_heads: Some(16),
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("kv_heads"), "{e}");
        let e = TransformerBlock {
            kv_heads: Some(0),
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("kv_heads"), "{e}");
        let e = TransformerBlock {
            heads: 7,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("d_model") && e.contains("heads = 7"), "{e}");
        // An explicit head_dim need not divide d_model.
        assert!(TransformerBlock {
            heads: 7,
            head_dim: Some(64),
            ..ok.clone()
        }
        .validate()
        .is_ok());
        let e = TransformerBlock {
            head_dim: Some(0),
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("head_dim"), "{e}");
        // d_model = 2^40: D·H·hd = 2^40·2^40 overflows; an error, not a panic.
        let e = TransformerBlock {
            d_model: 1 << 40,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflow"), "{e}");
        assert!(analyze_transformer(
            &TransformerBlock {
                d_model: 1 << 40,
                ..ok.clone()
            },
            &hw()
        )
        .is_err());
        let e = TransformerBlock {
            kv_cache_len: u64::MAX,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflow"), "{e}");
        let e = TransformerBlock {
            batch: u64::MAX,
            ..ok
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflow"), "{e}");
    }

    #[test]
    fn serde_defaults_round_trip_and_unknown_fields() {
        let b: TransformerBlock =
            serde_json::from_str(r#"{"seq_len": 128, "d_model": 512, "heads": 8, "d_ff": 2048}"#)
                .unwrap();
        assert_eq!(b, transformer_preset("transformer_small").unwrap());
        let b2: TransformerBlock = serde_json::from_str(
            r#"{"seq_len": 1, "d_model": 512, "heads": 8, "kv_heads": 2, "d_ff": 2048, "mlp": "swiglu",
                "norm": "rmsnorm", "phase": "decode", "kv_cache_len": 99, "dtype": "bf16"}"#,
        )
        .unwrap();
        assert_eq!(
            (b2.mlp, b2.norm, b2.phase, b2.kv_heads),
            (MlpKind::Swiglu, NormKind::RmsNorm, Phase::Decode, Some(2))
        );
        let back: TransformerBlock =
            serde_json::from_str(&serde_json::to_string(&b2).unwrap()).unwrap();
        assert_eq!(back, b2);
        let e = serde_json::from_str::<TransformerBlock>(
            r#"{"seq_len": 1, "d_model": 8, "heads": 1, "d_ff": 8, "ffn": 3}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ffn"), "{e}");
    }

    #[test]
    fn llama2_weights_and_parse() {
        let m = decoder_from_hf_config(
            LLAMA2,
            "llama2_7b_config.json",
            1,
            512,
            Phase::Prefill,
            0,
            DType::Bf16,
        )
        .unwrap();
        assert_eq!(m.block.mlp, MlpKind::Swiglu);
        assert_eq!(m.block.norm, NormKind::RmsNorm);
        assert_eq!(m.block.effective_kv_heads(), 32);
        assert_eq!(m.block.effective_head_dim().unwrap(), 128);
        assert_eq!(
            (m.layers, m.vocab_size, m.tie_word_embeddings),
            (32, 32_000, false)
        );
        // embedding 32000·4096 = 131 072 000
        // + 32·(4·4096² + 3·4096·11008 + 2·4096) = 32·(67 108 864 + 135 266 304 + 8192) = 6 476 267 520
        // + final norm 4096 + LM head 32000·4096 = 131 072 000
        // = 6 738 415 616 parameters ≈ 6.74e9; × 2 B (bf16) = 13 476 831 232 B.
        assert_eq!(m.weight_params().unwrap(), 6_738_415_616);
        let a = analyze_model(&m, &hw()).unwrap();
        assert_eq!(a.weight_params, 6_738_415_616);
        assert_eq!(a.totals.weight_bytes, 13_476_831_232);
        // KV: 32 layers · 2·1·32·128·512·2 B = 32 · 8 388 608 = 268 435 456.
        assert_eq!(a.totals.kv_cache_bytes, 268_435_456);
        // LM head on the last token only: (1, 32000, 4096).
        assert_eq!((a.lm_head.m, a.lm_head.n, a.lm_head.k), (1, 32_000, 4096));
        assert_eq!(a.lm_head_tokens, 1);
        // Totals: layers × block + LM head (+ final norm for FLOPs).
        assert_eq!(
            a.totals.gemm_flops,
            32 * a.block.totals.gemm_flops + a.lm_head.flops
        );
        assert_eq!(
            a.totals.dram_bytes,
            32 * a.block.totals.dram_bytes
                + a.embedding.dram_bytes
                + a.final_norm.dram_bytes
                + a.lm_head.compulsory_bytes
        );
        assert_eq!(a.embedding.flops, 0);
        assert_eq!(a.embedding.bound, Bound::Memory);
        assert!(a.limitations.iter().any(|l| l.contains("mlp = swiglu")));
        assert_eq!(a.kind, "model");
    }

    #[test]
    fn llama3_gqa_parse() {
        let m = decoder_from_hf_config(
            LLAMA3,
            "llama3_8b_config.json",
            4,
            1,
            Phase::Decode,
            2047,
            DType::Bf16,
        )
        .unwrap();
        assert_eq!(m.block.effective_kv_heads(), 8);
        assert_eq!(m.block.d_ff, 14_336);
        // 2·128256·4096 + 32·(2·4096² + 2·4096·1024 + 3·4096·14336 + 2·4096) + 4096
        // = 1 050 673 152 + 32·218 112 000 + 4096 = 8 030 261 248.
        assert_eq!(m.weight_params().unwrap(), 8_030_261_248);
        let a = analyze_model(&m, &hw()).unwrap();
        // Decode: every new token gets logits; 4 sequences -> LM head M = 4.
        assert_eq!(a.lm_head_tokens, 4);
        // KV: 32 · 2·4·8·128·2048·2 B = 32 · 33 554 432 = 1 073 741 824.
        assert_eq!(a.totals.kv_cache_bytes, 1_073_741_824);
        let s = a
            .block
            .gemms
            .iter()
            .find(|g| g.name == "attn_scores")
            .unwrap();
        assert_eq!((s.m, s.n, s.k, s.batch), (4, 2048, 128, 32));
    }

    #[test]
    fn hf_config_rules_and_errors() {
        let src = "cfg.json";
        let base = r#"{"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256,
                       "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "gelu_new",
                       "model_type": "gpt_neox", "layer_norm_eps": 1e-5, "extra": {"x": [1]}}"#;
        let m = decoder_from_hf_config(base, src, 1, 8, Phase::Prefill, 0, DType::Fp16).unwrap();
        assert_eq!(
            (m.block.mlp, m.block.norm),
            (MlpKind::Gelu, NormKind::LayerNorm)
        );
        // Gated by model_type even with a GELU activation (Gemma-style).
        let gemma = base.replace("gpt_neox", "gemma");
        let m = decoder_from_hf_config(&gemma, src, 1, 8, Phase::Prefill, 0, DType::Fp16).unwrap();
        assert_eq!(m.block.mlp, MlpKind::Swiglu);
        // Missing required field names the file and the field.
        let missing = base.replace(r#""vocab_size": 100,"#, "");
        let e = decoder_from_hf_config(&missing, src, 1, 8, Phase::Prefill, 0, DType::Fp16)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cfg.json") && e.contains("vocab_size") && e.contains("missing"),
            "{e}"
        );
        // Wrong type.
        let wrong = base.replace(r#""hidden_size": 64"#, r#""hidden_size": "64""#);
        let e = decoder_from_hf_config(&wrong, src, 1, 8, Phase::Prefill, 0, DType::Fp16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cfg.json") && e.contains("hidden_size"), "{e}");
        let wrong = base.replace(r#""num_hidden_layers": 2"#, r#""num_hidden_layers": 2.5"#);
        let e = decoder_from_hf_config(&wrong, src, 1, 8, Phase::Prefill, 0, DType::Fp16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_hidden_layers"), "{e}");
        let wrong = base.replace("\"extra\"", "\"tie_word_embeddings\": \"yes\", \"extra\"");
        let e = decoder_from_hf_config(&wrong, src, 1, 8, Phase::Prefill, 0, DType::Fp16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tie_word_embeddings"), "{e}");
        // Heads not a multiple of kv_heads, reported against the file.
        let gqa = base.replace("\"extra\"", "\"num_key_value_heads\": 3, \"extra\"");
        let e = decoder_from_hf_config(&gqa, src, 1, 8, Phase::Prefill, 0, DType::Fp16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cfg.json") && e.contains("kv_heads"), "{e}");
        // Malformed and truncated JSON, and a non-object.
        for bad in ["{not json", &LLAMA2[..LLAMA2.len() / 2], "[1, 2]", ""] {
            let e =
                decoder_from_hf_config(bad, src, 1, 8, Phase::Prefill, 0, DType::Fp16).unwrap_err();
            assert!(matches!(e, CoreError::Parse { .. }), "{e}");
            assert!(e.to_string().contains("cfg.json"), "{e}");
        }
        // Overflow through the config: hidden_size 2^40.
        let huge = base.replace(r#""hidden_size": 64"#, r#""hidden_size": 1099511627776"#);
        let e = decoder_from_hf_config(&huge, src, 1, 8, Phase::Prefill, 0, DType::Fp16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflow"), "{e}");
        // Tied embeddings count the matrix once.
        let tied = base.replace("\"extra\"", "\"tie_word_embeddings\": true, \"extra\"");
        let t = decoder_from_hf_config(&tied, src, 1, 8, Phase::Prefill, 0, DType::Fp16).unwrap();
        let u = decoder_from_hf_config(base, src, 1, 8, Phase::Prefill, 0, DType::Fp16).unwrap();
        assert_eq!(
            u.weight_params().unwrap() - t.weight_params().unwrap(),
            100 * 64
        );
    }

    #[test]
    fn model_serde_round_trip() {
        let m = decoder_from_hf_config(LLAMA3, "l3.json", 1, 16, Phase::Prefill, 0, DType::Bf16)
            .unwrap();
        let back: DecoderModel = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        let all = DecoderModel {
            lm_head_tokens: LmHeadTokens::All,
            ..m
        };
        assert_eq!(all.lm_head_token_count().unwrap(), 16);
        let bad = DecoderModel { layers: 0, ..all };
        assert!(bad.validate().unwrap_err().to_string().contains("layers"));
    }

    proptest! {
        #[test]
        fn mha_gelu_prefill_matches_closed_form(
            b in 1u64..4, s in 1u64..300, h in 1u64..9, hd in 1u64..65, f in 1u64..2000,
        ) {
            let d = h * hd;
            let blk = TransformerBlock { batch: b, seq_len: s, d_model: d, heads: h, d_ff: f,
                ..transformer_preset("transformer_small").unwrap() };
            let dec = blk.decompose().unwrap();
            let expect = 8 * b * s * d * d + 4 * b * s * d * f + 4 * b * s * s * d;
            prop_assert_eq!(gemm_flops(&dec), expect);
            let frac = dec.causal_useful_fraction;
            prop_assert!((frac - (s + 1) as f64 / (2 * s) as f64).abs() < 1e-12);
        }
    }
}
