//! One decoder block: its shape (attention form, MLP, norm, phase, KV cache), its decomposition
//! into named GEMMs and element-wise operations with their FLOPs and bytes, and the built-in
//! block presets. Left out: what the module comment of `transformer` lists.

use super::*;
use crate::dtype::DType;
use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::gemm::{Gemm, GemmRole, NamedGemm};
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
