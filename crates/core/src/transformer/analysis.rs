//! A block's roofline analysis: each GEMM and element-wise op timed on a chip's roofs, the
//! totals and the notes on what the count leaves out. Left out: overlap between ops (times add).

use super::*;
use crate::analysis::{LIMITATIONS, SCHEMA_VERSION};
use crate::dtype::DType;
use crate::error::{checked_sum, Result};
use crate::gemm::NamedGemm;
use crate::hardware::HardwareSpec;
use crate::roofline::{roofline, Bound, Roofline};
use serde::{Deserialize, Serialize};

/// Time lower bound and bound of `flops` over `bytes` at `dtype`'s peak; an op without
/// FLOPs (a gather) is memory-bound at `max over levels of bytes / bandwidth`, and an op
/// without DRAM bytes (fused into a neighbour) compute-bound at `flops / peak`.
fn op_time(hw: &HardwareSpec, dtype: DType, flops: u64, bytes: u64) -> Result<(f64, Bound)> {
    if flops > 0 && bytes == 0 {
        return Ok((flops as f64 / hw.peak_for(dtype)?, Bound::Compute));
    }
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
    /// A + B + C each moved once (less operands a fused kernel keeps on chip), bytes.
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
        let bytes = g.dram_bytes()?;
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
    /// `flops / dram_bytes`, FLOP per byte (0 when the op moves no DRAM bytes).
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
            // 0 for an op fused into a neighbour (no DRAM bytes), so the JSON stays finite.
            arithmetic_intensity: if bytes > 0 {
                op.flops as f64 / bytes as f64
            } else {
                0.0
            },
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
    /// Positions attended, `min(L, W)` with a sliding window.
    pub attended_len: u64,
    /// Distinct routed experts the batch touches (0 without a mixture of experts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub experts_touched: u64,
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
    /// Parameters one token uses (only `top_k` routed experts).
    pub active_weight_params: u64,
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
    "attention_kernel = materialized (the default): scores are written, read, and probabilities written and read again; fused (flash attention) keeps them on chip and counts only Q, K, V and the output, without K/V re-reads per query tile",
    "causal attention GEMMs and softmax are counted dense (what an unskipped kernel runs); causal_useful_fraction gives the unmasked share",
    "element-wise FLOPs use fixed per-element conventions (exp, tanh, rsqrt each one op); see docs/model.md (Model workloads, element-wise FLOP conventions)",
    "rotary position embedding is assumed on q and k; learned/absolute position embeddings and ALiBi are not modelled",
    "biases (qkv_bias, o_bias) are counted as parameters; their additions are not counted (under 1/(2·D) of the projection FLOPs); no dropout, KV-cache paging or layout; the KV-cache append is the k_proj/v_proj (kv_a) output write",
    "mixture of experts: routing is assumed uniform and independent (experts touched E·(1 − (1 − k/E)^T), rounded up); load imbalance, capacity limits and dropped tokens are not modelled; the routed experts run as one batched GEMM per projection with ⌈T·k / experts touched⌉ rows each",
    "sliding window: the attention GEMMs compute min(L, W) keys per query (a banded kernel) and the cache holds min(L, W) positions",
    "time_lower_bound_s sums per-op bounds (ops run back to back); the roofline field treats the whole as one perfectly fused kernel",
    "single device: no tensor, pipeline or expert parallelism and no communication",
];

fn is_zero(v: &u64) -> bool {
    *v == 0
}

pub(super) fn strings(a: &[&str], b: &[&str]) -> Vec<String> {
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

pub(super) fn decode_note(b: &TransformerBlock, l: u64) -> Option<String> {
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
        attended_len: dec.attended_len,
        experts_touched: dec.experts_touched,
        kv_heads: dec.kv_heads,
        head_dim: dec.head_dim,
        kv_group_size: dec.kv_group_size,
        causal_useful_fraction: dec.causal_useful_fraction,
        weight_params: dec.weight_params,
        active_weight_params: dec.active_weight_params,
        gemms,
        non_gemm,
        totals,
        roofline: rl,
        limitations,
    })
}
