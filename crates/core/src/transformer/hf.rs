//! Reading a Hugging Face `config.json` into a decoder model, offline: every field read is
//! noted, and a field that changes the math but is not modelled is an error. Families: dense
//! decoders (Llama, Mistral with its sliding window, Qwen2 with q/k/v biases), mixtures of
//! experts (Mixtral, Qwen-MoE, DeepSeek with shared experts and dense first layers) and
//! multi-head latent attention (DeepSeek-V2/V3). Left out: tokenizer files, weights,
//! per-layer variation other than DeepSeek's dense first layers, multi-token prediction.

use super::*;
use crate::dtype::DType;
use crate::error::{CoreError, Result};
use serde_json::Value;

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
    let flag = |f: &str| -> Result<Option<bool>> {
        match obj.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(x) => Err(field_err(f, x, "must be true or false")),
        }
    };
    let is_type = |t: &str| model_type.as_deref() == Some(t);
    // Fields that change the math but are not modelled: refuse rather than fall back.
    for (f, ok) in [("moe_layer_freq", 1u64), ("decoder_sparse_step", 1)] {
        if let Some(v) = uint(f)? {
            if v != ok {
                return Err(field_err(
                    f,
                    &obj[f],
                    "MoE layers interleaved with dense ones are not modelled (only 1, or first_k_dense_replace)",
                ));
            }
        }
    }
    if let Some(x) = obj.get("mlp_only_layers") {
        if x.as_array().is_some_and(|a| !a.is_empty()) {
            return Err(field_err(
                "mlp_only_layers",
                x,
                "per-layer dense/MoE choice is not modelled",
            ));
        }
    }
    if let Some(x) = obj.get("quantization_config") {
        return Err(field_err(
            "quantization_config",
            x,
            "quantized weights are not modelled yet: counts use one dtype (--dtype) for weights and activations",
        ));
    }
    if flag("mlp_bias")? == Some(true) {
        return Err(field_err(
            "mlp_bias",
            &obj["mlp_bias"],
            "MLP biases are not modelled",
        ));
    }
    // Attention biases: Qwen2 families bias q, k and v by construction; `attention_bias`
    // (Llama style) biases q, k, v and o.
    let attention_bias = flag("attention_bias")?.unwrap_or(false);
    let qwen = is_type("qwen2") || is_type("qwen2_moe");
    let qkv_bias = attention_bias || qwen;
    let o_bias = attention_bias;
    if qwen {
        notes.push(format!(
            "{source}: qkv_bias = true (model_type = {} projects q, k and v with biases)",
            model_type.as_deref().unwrap_or("")
        ));
    } else if attention_bias {
        notes.push(format!(
            "{source}: attention_bias = true: q, k, v and o projections carry biases"
        ));
    }
    // Sliding window: applied when the config turns it on for every layer.
    let sliding_window = match (uint("sliding_window")?, flag("use_sliding_window")?) {
        (None, _) => None,
        (Some(w), Some(false)) => {
            notes.push(format!(
                "{source}: sliding_window = {w} ignored (use_sliding_window = false)"
            ));
            None
        }
        (Some(w), use_sw) => {
            if use_sw == Some(true) {
                if let Some(mwl) = uint("max_window_layers")? {
                    if mwl < layers {
                        return Err(field_err(
                            "max_window_layers",
                            &obj["max_window_layers"],
                            "a window on only some layers is not modelled",
                        ));
                    }
                }
            }
            notes.push(format!(
                "{source}: sliding_window = {w}: attention and KV cache span min(L, {w}) positions"
            ));
            Some(w)
        }
    };
    // Multi-head latent attention (DeepSeek-V2/V3).
    let mla = match uint("kv_lora_rank")? {
        None => None,
        Some(kv_lora_rank) => {
            let m = Mla {
                q_lora_rank: uint("q_lora_rank")?,
                kv_lora_rank,
                qk_nope_head_dim: req("qk_nope_head_dim")?,
                qk_rope_head_dim: uint("qk_rope_head_dim")?.unwrap_or(0),
                v_head_dim: req("v_head_dim")?,
                form: MlaForm::Naive,
            };
            notes.push(format!(
                "{source}: multi-head latent attention: kv_lora_rank = {}, q_lora_rank = {}, qk_nope/rope/v head dims = {}/{}/{}; KV cache holds {} elements per token per layer",
                m.kv_lora_rank,
                m.q_lora_rank.map_or("none".into(), |q| q.to_string()),
                m.qk_nope_head_dim,
                m.qk_rope_head_dim,
                m.v_head_dim,
                m.cache_elements_per_token()?
            ));
            Some(m)
        }
    };
    // Mixture of experts (Mixtral, Qwen-MoE, DeepSeek).
    let mut experts_key = None;
    for key in ["num_local_experts", "num_experts", "n_routed_experts"] {
        if let Some(e) = uint(key)? {
            experts_key = Some((key, e));
            break;
        }
    }
    let mut first_dense_layers = 0;
    let moe = match experts_key {
        Some((key, experts)) if experts > 1 => {
            let top_k = req("num_experts_per_tok")?;
            let expert_d_ff = uint("moe_intermediate_size")?.unwrap_or(d_ff);
            let (shared_experts, shared_d_ff, shared_expert_gate) = match (
                uint("n_shared_experts")?,
                uint("shared_expert_intermediate_size")?,
            ) {
                (Some(n), _) => (n, None, false),
                (None, Some(f)) => (1, Some(f), true),
                (None, None) => (0, None, false),
            };
            let router_bias = text("topk_method")?.as_deref() == Some("noaux_tc");
            first_dense_layers = uint("first_k_dense_replace")?.unwrap_or(0);
            let m = Moe {
                experts,
                top_k,
                expert_d_ff,
                shared_experts,
                shared_d_ff,
                router_bias,
                shared_expert_gate,
                routing: Routing::Expected,
            };
            notes.push(format!(
                "{source}: mixture of experts: {key} = {experts}, num_experts_per_tok = {top_k}, expert width {expert_d_ff}, {shared_experts} shared expert(s) of total width {}{}{}; routing assumed uniform",
                m.effective_shared_d_ff()?,
                if first_dense_layers > 0 {
                    format!(", the first {first_dense_layers} layers dense (intermediate_size = {d_ff})")
                } else {
                    String::new()
                },
                if router_bias { ", router bias (noaux_tc)" } else { "" }
            ));
            for f in ["n_group", "topk_group"] {
                if obj.get(f).is_some_and(|x| !x.is_null()) {
                    notes.push(format!(
                        "{source}: {f} read: group-limited routing does not change the counts under the uniform-routing assumption"
                    ));
                }
            }
            Some(m)
        }
        _ => None,
    };
    if let Some(n) = uint("num_nextn_predict_layers")? {
        notes.push(format!(
            "{source}: num_nextn_predict_layers = {n}: the multi-token-prediction module is not modelled (nor counted in the parameters)"
        ));
    }
    // Partial rotary (Phi, StableLM, GPT-NeoX): r = ⌊head_dim · factor⌋ channels rotate,
    // as Hugging Face computes `rotary_ndims`.
    let rotary_dims = match obj.get("partial_rotary_factor") {
        None | Some(Value::Null) => None,
        Some(x) => {
            let f = x
                .as_f64()
                .filter(|f| *f > 0.0 && *f <= 1.0)
                .ok_or_else(|| {
                    field_err("partial_rotary_factor", x, "must be a number in (0, 1]")
                })?;
            if mla.is_some() {
                None
            } else {
                let hd = head_dim.unwrap_or(d_model / heads.max(1));
                let r = (hd as f64 * f).floor() as u64;
                notes.push(format!(
                    "{source}: partial_rotary_factor = {f}: rotary covers {r} of {hd} channels per head"
                ));
                (r < hd).then_some(r)
            }
        }
    };
    let block = TransformerBlock {
        batch,
        seq_len,
        d_model,
        heads,
        kv_heads: if mla.is_some() { None } else { kv_heads },
        head_dim: if mla.is_some() { None } else { head_dim },
        d_ff,
        mlp,
        norm,
        causal: true,
        phase,
        kv_cache_len,
        dtype,
        sliding_window,
        qkv_bias,
        o_bias,
        mla,
        moe,
        rotary_dims,
        weight_dtype: None,
        weight_groups: None,
        kv_dtype: None,
        attention_kernel: AttentionKernel::Materialized,
    };
    let m = DecoderModel {
        name: source.to_string(),
        block,
        layers,
        vocab_size,
        tie_word_embeddings: tie,
        lm_head_tokens: LmHeadTokens::default(),
        first_dense_layers,
        notes,
    };
    m.validate().map_err(|e| e.with_source(source))?;
    Ok(m)
}
