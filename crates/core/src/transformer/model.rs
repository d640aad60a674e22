//! A whole decoder model: embedding, `layers` identical blocks, final norm and LM head, its
//! parameters and weight bytes, and its roofline analysis. Left out: what the module comment of
//! `transformer` lists.

use super::*;
use crate::analysis::{LIMITATIONS, SCHEMA_VERSION};
use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::gemm::{GemmRole, NamedGemm};
use crate::hardware::HardwareSpec;
use crate::roofline::{roofline, Roofline};
use serde::{Deserialize, Serialize};

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
    /// With a mixture of experts: the first layers keep a dense MLP of `block.d_ff`
    /// (DeepSeek's `first_k_dense_replace`; default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub first_dense_layers: u64,
    /// How the model was derived (config mapping decisions, ignored features).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl DecoderModel {
    /// Rows of the LM-head GEMM: `batch · S_q` for `all`, `batch` for `last`.
    pub fn lm_head_token_count(&self) -> Result<u64> {
        match self.lm_head_tokens {
            LmHeadTokens::All => self.block.tokens(),
            LmHeadTokens::Last => Ok(self.block.batch),
        }
    }

    /// The block of the first `first_dense_layers` layers: the block with a dense MLP.
    pub fn dense_block(&self) -> TransformerBlock {
        TransformerBlock {
            moe: None,
            ..self.block.clone()
        }
    }

    /// Layers with the repeated block: `layers − first_dense_layers`.
    pub fn block_layers(&self) -> u64 {
        self.layers.saturating_sub(self.first_dense_layers)
    }

    /// Weight parameters: `V·D` embedding + `V·D` LM head unless tied + `norm_params·D` final
    /// norm + `(layers − first_dense_layers) · block weight_params` + `first_dense_layers ·
    /// dense block weight_params`.
    pub fn weight_params(&self) -> Result<u64> {
        self.params(false)
    }

    /// Parameters one token uses: [`DecoderModel::weight_params`] with each mixture-of-experts
    /// layer counting only `top_k` routed experts (equal to it for a dense model).
    pub fn active_weight_params(&self) -> Result<u64> {
        self.params(true)
    }

    fn params(&self, active: bool) -> Result<u64> {
        let per_block = |b: &TransformerBlock| {
            if active {
                b.active_weight_params()
            } else {
                b.weight_params()
            }
        };
        let dense = if self.first_dense_layers > 0 {
            checked_product(
                &[self.first_dense_layers, per_block(&self.dense_block())?],
                "first_dense_layers · dense block weights",
            )?
        } else {
            0
        };
        let d = self.block.d_model;
        let emb = checked_product(&[self.vocab_size, d], "V·D (embedding parameters)")?;
        let head = if self.tie_word_embeddings { 0 } else { emb };
        let final_norm = checked_product(
            &[self.block.norm.params_per_channel(), d],
            "final norm parameters",
        )?;
        let blocks = checked_product(
            &[self.block_layers(), per_block(&self.block)?],
            "layers · block weights",
        )?;
        checked_sum(
            &[emb, head, final_norm, blocks, dense],
            "model weight parameters",
        )
    }

    /// Layers and vocabulary are ≥ 1, the block is valid, and every total fits in 64 bits.
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [("layers", self.layers), ("vocab_size", self.vocab_size)] {
            if v == 0 {
                return Err(CoreError::invalid(f, v, "must be at least 1"));
            }
        }
        self.block.validate()?;
        if self.first_dense_layers > 0 {
            if self.block.moe.is_none() {
                return Err(CoreError::invalid(
                    "first_dense_layers",
                    self.first_dense_layers,
                    "needs a mixture of experts (block.moe) to replace",
                ));
            }
            if self.first_dense_layers > self.layers {
                return Err(CoreError::invalid(
                    "first_dense_layers",
                    self.first_dense_layers,
                    format!("must be at most layers = {}", self.layers),
                ));
            }
            self.dense_block().validate()?;
        }
        self.block.weight_storage_bytes(self.weight_params()?)?;
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
        let mut lm_head = named(
            GemmRole::LmHead,
            lm_tokens,
            self.vocab_size,
            b.d_model,
            1,
            b.dtype,
        )?;
        let wdt = b.weight_dtype();
        lm_head.b_dtype = (wdt != b.dtype).then_some(wdt);
        lm_head.b_groups = b.weight_groups;
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
    /// One block's analysis (its totals are per block; multiply by `layers −
    /// dense_layers`).
    pub block: TransformerAnalysis,
    /// Layers with a dense MLP before the mixture-of-experts layers (0 for most models).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dense_layers: u64,
    /// The dense layers' block analysis, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_block: Option<TransformerAnalysis>,
    /// Embedding gather: reads `T·D` table elements, writes `T·D`, no FLOPs.
    pub embedding: NonGemmRow,
    /// Final norm over `T·D`.
    pub final_norm: NonGemmRow,
    /// LM head GEMM `(lm_head_tokens, V, D)`.
    pub lm_head: GemmRow,
    /// Weight parameters of the whole model.
    pub weight_params: u64,
    /// Parameters one token uses (only `top_k` routed experts per MoE layer).
    #[serde(default)]
    pub active_weight_params: u64,
    /// `layers × block` + embedding + final norm + LM head; weights and KV cache whole-model.
    pub totals: TransformerTotals,
    /// Roofline of the totals as one kernel (`≤ totals.time_lower_bound_s`).
    pub roofline: Roofline,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// Whole-model omissions, appended to the block's.
pub const MODEL_LIMITATIONS: &[&str] = &[
    "all layers are identical except DeepSeek-style dense first layers (first_dense_layers)",
    "embedding gather reads only the T·D table rows used (token ids not counted); the LM head reads the full V·D matrix",
    "logit post-processing (softmax over the vocabulary, sampling) is not modelled",
];

/// Analyze a decoder model: one block's table, totals multiplied by `layers`, plus
/// embedding gather, final norm and LM head.
pub fn analyze_model(m: &DecoderModel, hw: &HardwareSpec) -> Result<ModelAnalysis> {
    m.validate()?;
    let block = analyze_transformer(&m.block, hw)?;
    let dense_block = if m.first_dense_layers > 0 {
        Some(analyze_transformer(&m.dense_block(), hw)?)
    } else {
        None
    };
    let parts = m.parts()?;
    let dt = m.block.dtype;
    let embedding = NonGemmRow::new(&parts.embedding, dt, hw)?;
    let final_norm = NonGemmRow::new(&parts.final_norm, dt, hw)?;
    let lm_head = GemmRow::new(&parts.lm_head, hw)?;
    let (l, ld) = (m.block_layers(), m.first_dense_layers);
    // Per-layer totals summed over both kinds of layer: `l·block + ld·dense`.
    let zero = TransformerTotals {
        macs: 0,
        flops: 0,
        gemm_flops: 0,
        non_gemm_flops: 0,
        dram_bytes: 0,
        arithmetic_intensity: 0.0,
        weight_bytes: 0,
        kv_cache_bytes: 0,
        time_lower_bound_s: 0.0,
    };
    let dt_tot = dense_block.as_ref().map_or(&zero, |d| &d.totals);
    let bt = &block.totals;
    let mul = |f: fn(&TransformerTotals) -> u64, what: &str| {
        checked_sum(
            &[
                checked_product(&[l, f(bt)], what)?,
                checked_product(&[ld, f(dt_tot)], what)?,
            ],
            what,
        )
    };
    let weight_params = m.weight_params()?;
    let gemm_flops = checked_sum(
        &[mul(|t| t.gemm_flops, "layers · GEMM FLOPs")?, lm_head.flops],
        "model GEMM FLOPs",
    )?;
    let non_gemm_flops = checked_sum(
        &[
            mul(|t| t.non_gemm_flops, "layers · element-wise FLOPs")?,
            final_norm.flops,
        ],
        "model element-wise FLOPs",
    )?;
    let flops = checked_sum(&[gemm_flops, non_gemm_flops], "model FLOPs")?;
    let dram = checked_sum(
        &[
            mul(|t| t.dram_bytes, "layers · DRAM bytes")?,
            embedding.dram_bytes,
            final_norm.dram_bytes,
            lm_head.compulsory_bytes,
        ],
        "model DRAM bytes",
    )?;
    let totals = TransformerTotals {
        macs: checked_sum(
            &[mul(|t| t.macs, "layers · MACs")?, lm_head.macs],
            "model MACs",
        )?,
        flops,
        gemm_flops,
        non_gemm_flops,
        dram_bytes: dram,
        arithmetic_intensity: flops as f64 / dram as f64,
        weight_bytes: m.block.weight_storage_bytes(weight_params)?,
        kv_cache_bytes: mul(|t| t.kv_cache_bytes, "layers · KV cache bytes")?,
        time_lower_bound_s: l as f64 * bt.time_lower_bound_s
            + ld as f64 * dt_tot.time_lower_bound_s
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
        layers: m.layers,
        lm_head_tokens: parts.lm_tokens,
        block,
        dense_layers: ld,
        dense_block,
        embedding,
        final_norm,
        lm_head,
        weight_params,
        active_weight_params: m.active_weight_params()?,
        totals,
        roofline: rl,
        limitations,
    })
}
