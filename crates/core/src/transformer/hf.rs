//! Reading a Hugging Face `config.json` into a decoder model, offline: every field read is
//! noted, and a field that changes the math but is not modelled is an error. Left out:
//! tokenizer files, weights, and configs of families other than dense decoders.

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
