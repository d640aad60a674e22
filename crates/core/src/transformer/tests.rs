//! Tests of the transformer model: decompositions against hand-checked counts, presets, bad
//! blocks, Hugging Face configs with published parameter counts, and a closed-form property.

use super::*;
use crate::dtype::DType;
use crate::error::CoreError;
use crate::gemm::{Gemm, GemmRole, NamedGemm, QuantGroups};
use crate::hardware::HardwareSpec;
use crate::presets;
use crate::roofline::Bound;
use proptest::prelude::*;

const LLAMA2: &str = include_str!("../../data/models/llama2_7b_config.json");
const LLAMA3: &str = include_str!("../../data/models/llama3_8b_config.json");

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
        let e = decoder_from_hf_config(bad, src, 1, 8, Phase::Prefill, 0, DType::Fp16).unwrap_err();
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
    let m =
        decoder_from_hf_config(LLAMA3, "l3.json", 1, 16, Phase::Prefill, 0, DType::Bf16).unwrap();
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

const MIXTRAL: &str = include_str!("../../data/models/mixtral_8x7b_config.json");
const MISTRAL: &str = include_str!("../../data/models/mistral_7b_config.json");
const QWEN25: &str = include_str!("../../data/models/qwen2.5_7b_config.json");
const DEEPSEEK_V3: &str = include_str!("../../data/models/deepseek_v3_config.json");

fn hf(text: &str, phase: Phase, seq: u64, cache: u64, batch: u64) -> DecoderModel {
    decoder_from_hf_config(text, "config.json", batch, seq, phase, cache, DType::Bf16).unwrap()
}

#[test]
fn published_parameter_counts() {
    // Mixtral-8x7B (published 46.7 B total, 12.9 B active). Per layer: attention
    // 2·4096·4096 + 2·4096·1024 = 41 943 040; one expert 3·4096·14336 = 176 160 768; router
    // 4096·8 = 32 768; norms 2·4096 = 8 192. Total layer 41 943 040 + 8·176 160 768 + 32 768
    // + 8 192 = 1 451 270 144, ×32 = 46 440 644 608; + embedding and head 2·32000·4096 =
    // 262 144 000 + final norm 4 096 = 46 702 792 704. Active: 2 experts, layer 394 305 536,
    // ×32 = 12 617 777 152 + 262 148 096 = 12 879 925 248.
    let m = hf(MIXTRAL, Phase::Prefill, 16, 0, 1);
    assert_eq!(m.weight_params().unwrap(), 46_702_792_704);
    assert_eq!(m.active_weight_params().unwrap(), 12_879_925_248);
    // Mistral-7B-v0.1 (published 7.24 B): layer 41 943 040 + 176 160 768 + 8 192 =
    // 218 112 000, ×32 = 6 979 584 000 + 262 144 000 + 4 096 = 7 241 732 096.
    let m = hf(MISTRAL, Phase::Prefill, 16, 0, 1);
    assert_eq!(m.weight_params().unwrap(), 7_241_732_096);
    assert_eq!(m.block.sliding_window, Some(4096));
    // Qwen2.5-7B (published 7.61 B): hd = 3584/28 = 128, kv width 4·128 = 512. Layer: q and o
    // 2·3584² = 25 690 112, k and v 2·3584·512 = 3 670 016, q/k/v biases 3584 + 2·512 = 4 608,
    // MLP 3·3584·18944 = 203 685 888, norms 7 168: 233 057 792, ×28 = 6 525 618 176;
    // + 2·152064·3584 = 1 089 994 752 + 3 584 = 7 615 616 512.
    let m = hf(QWEN25, Phase::Prefill, 16, 0, 1);
    assert!(m.block.qkv_bias && m.block.sliding_window.is_none());
    assert_eq!(m.weight_params().unwrap(), 7_615_616_512);
    // DeepSeek-V3 (published 671 B total, 37 B active, without the multi-token-prediction
    // module). Latent attention per layer: q 7168·1536 + 1536 + 1536·128·192 = 48 760 320;
    // kv 7168·576 + 512 + 512·128·256 = 20 906 496; o 128·128·7168 = 117 440 512; sum
    // 187 107 328. MoE layer: router 7168·256 + 256 = 1 835 264, experts 256·3·7168·2048 =
    // 11 274 289 152, shared 3·7168·2048 = 44 040 192, norms 14 336: 11 507 286 272, ×58 =
    // 667 422 603 776. Dense layer: 187 107 328 + 3·7168·18432 + 14 336 = 583 483 392, ×3 =
    // 1 750 450 176. Embedding and head 2·129280·7168 = 1 853 358 080, final norm 7 168.
    // Total 671 026 419 200. Active MoE layer: 187 107 328 + 1 835 264 + 8·44 040 192 +
    // 44 040 192 + 14 336 = 585 318 656, ×58 = 33 948 482 048; + 1 750 450 176 +
    // 1 853 365 248 = 37 552 297 472 (DeepSeek rounds to 37 B; 0.93 B of ours is the input
    // embedding table, of which a token reads one row).
    let m = hf(DEEPSEEK_V3, Phase::Prefill, 16, 0, 1);
    assert_eq!(m.first_dense_layers, 3);
    assert_eq!(m.weight_params().unwrap(), 671_026_419_200);
    assert_eq!(m.active_weight_params().unwrap(), 37_552_297_472);
    // Published figures, rounded as published.
    for (text, total_b, active_b) in [
        (MIXTRAL, 46.7, 12.9),
        (MISTRAL, 7.24, 7.24),
        (QWEN25, 7.61, 7.61),
        (DEEPSEEK_V3, 671.0, 37.0),
    ] {
        let m = hf(text, Phase::Prefill, 16, 0, 1);
        let t = m.weight_params().unwrap() as f64 / 1e9;
        let a = m.active_weight_params().unwrap() as f64 / 1e9;
        assert!((t - total_b).abs() / total_b < 0.005, "{t} vs {total_b}");
        assert!((a - active_b).abs() / active_b < 0.02, "{a} vs {active_b}");
    }
}

#[test]
fn moe_decode_weight_traffic_grows_with_the_experts_a_batch_touches() {
    let hw = hw();
    let one = analyze_model(&hf(MIXTRAL, Phase::Decode, 1, 1024, 1), &hw).unwrap();
    let eight = analyze_model(&hf(MIXTRAL, Phase::Decode, 1, 1024, 8), &hw).unwrap();
    // One token: k = 2 experts, 1 row each. Eight tokens: 8·(1 − 0.75⁸) = 7.2 → 8 experts,
    // ⌈16/8⌉ = 2 rows each.
    assert_eq!(one.block.experts_touched, 2);
    assert_eq!(eight.block.experts_touched, 8);
    let up = |a: &ModelAnalysis| {
        a.block
            .gemms
            .iter()
            .find(|g| g.name == "expert_up")
            .unwrap()
            .clone()
    };
    assert_eq!((up(&one).batch, up(&one).m), (2, 1));
    assert_eq!((up(&eight).batch, up(&eight).m), (8, 2));
    // Expert weights read per layer: 2 vs 8 experts · 3·4096·14336 · 2 B.
    let expert_bytes = |a: &ModelAnalysis| -> u64 {
        a.block
            .gemms
            .iter()
            .filter(|g| g.name.starts_with("expert_"))
            .map(|g| g.batch * g.n * g.k * 2)
            .sum()
    };
    assert_eq!(expert_bytes(&one), 2 * 176_160_768 * 2);
    assert_eq!(expert_bytes(&eight), 8 * 176_160_768 * 2);
}

#[test]
fn latent_attention_caches_the_latent_and_both_forms_count() {
    // DeepSeek-V3 decode, batch 1, 4095 cached + 1 new = L 4096. Cache per layer:
    // 4096·(512 + 64) = 2 359 296 elements = 4 718 592 B in bf16; ×61 layers.
    let m = hf(DEEPSEEK_V3, Phase::Decode, 1, 4095, 1);
    let d = m.block.decompose().unwrap();
    assert_eq!(d.kv_cache_bytes, 4_718_592);
    let a = analyze_model(&m, &hw()).unwrap();
    assert_eq!(a.totals.kv_cache_bytes, 61 * 4_718_592);
    // Naive: kv_b up-projects all 4096 latents, 4096 × 128·(128+128) × 512; scores per head
    // 1 × 4096 × 192.
    let g = |d: &BlockDecomposition, n: &str| d.gemms.iter().find(|g| g.name == n).cloned();
    let kv_b = g(&d, "kv_b").unwrap().gemm;
    assert_eq!((kv_b.m, kv_b.n, kv_b.k), (4096, 32_768, 512));
    let s = g(&d, "attn_scores").unwrap().gemm;
    assert_eq!((s.batch, s.m, s.n, s.k), (128, 1, 4096, 192));
    // Absorbed: no kv_b; the 128 heads' query rows stack over the shared latents, scores
    // 128 × 4096 × (512 + 64 = 576) per sequence; per-head absorption GEMMs 1 × 512 × 128 and
    // 1 × 128 × 512.
    let mut ab = m.block.clone();
    ab.mla.as_mut().unwrap().form = MlaForm::Absorbed;
    let da = ab.decompose().unwrap();
    assert!(g(&da, "kv_b").is_none());
    let s = g(&da, "attn_scores").unwrap().gemm;
    assert_eq!((s.batch, s.m, s.n, s.k), (1, 128, 4096, 576));
    let qa = g(&da, "q_absorb").unwrap().gemm;
    assert_eq!((qa.batch, qa.m, qa.n, qa.k), (128, 1, 512, 128));
    // Same parameters and cache in both forms. At L = 4096 the naive form writes the
    // up-projected keys and values of every position, 4096·32768 elements (kv_b's C), which
    // the absorbed form never materializes, so it moves fewer bytes.
    assert_eq!(da.weight_params, d.weight_params);
    assert_eq!(da.kv_cache_bytes, d.kv_cache_bytes);
    let bytes = |d: &BlockDecomposition| -> u64 {
        d.gemms
            .iter()
            .map(|g| g.gemm.compulsory_bytes().unwrap())
            .sum()
    };
    assert!(bytes(&da) < bytes(&d));
}

#[test]
fn sliding_window_caps_attention_and_cache() {
    // Mistral decode at 8191 cached + 1: L = 8192 but W = 4096. KV cache per layer
    // 2·1·8·128·4096 = 8 388 608 elements = 16 777 216 B; scores n = 4096.
    let m = hf(MISTRAL, Phase::Decode, 1, 8191, 1);
    let d = m.block.decompose().unwrap();
    assert_eq!((d.attention_len, d.attended_len), (8192, 4096));
    assert_eq!(d.kv_cache_bytes, 16_777_216);
    let s = d.gemms.iter().find(|g| g.name == "attn_scores").unwrap();
    assert_eq!(s.gemm.n, 4096);
    // Prefill of 8 tokens with W = 4: keys seen 1, 2, 3, 4, 4, 4, 4, 4 = 26 of 8·4 = 32.
    let b = TransformerBlock {
        seq_len: 8,
        sliding_window: Some(4),
        ..transformer_preset("transformer_small").unwrap()
    };
    let d = b.decompose().unwrap();
    assert_eq!(d.attended_len, 4);
    assert!((d.causal_useful_fraction - 26.0 / 32.0).abs() < 1e-12);
}

#[test]
fn unmodelled_config_fields_are_errors() {
    let with = |text: &str, key: &str, value: &str| {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut o = v.as_object().unwrap().clone();
        o.insert(key.into(), serde_json::from_str(value).unwrap());
        serde_json::to_string(&o).unwrap()
    };
    for (text, key, value) in [
        (DEEPSEEK_V3, "moe_layer_freq", "2"),
        (MIXTRAL, "mlp_only_layers", "[0, 1]"),
        (
            DEEPSEEK_V3,
            "quantization_config",
            r#"{"quant_method": "fp8"}"#,
        ),
        (LLAMA3, "partial_rotary_factor", "1.5"),
        (LLAMA3, "mlp_bias", "true"),
        (MIXTRAL, "num_experts_per_tok", "9"),
    ] {
        let t = with(text, key, value);
        let e = decoder_from_hf_config(&t, "c.json", 1, 8, Phase::Prefill, 0, DType::Bf16)
            .unwrap_err()
            .to_string();
        let field = if key == "num_experts_per_tok" {
            "moe.top_k"
        } else {
            key
        };
        assert!(e.contains("c.json") && e.contains(field), "{key}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Qwen2 with a window on only some layers.
    let t = with(
        &with(QWEN25, "use_sliding_window", "true"),
        "max_window_layers",
        "4",
    );
    let e = decoder_from_hf_config(&t, "c.json", 1, 8, Phase::Prefill, 0, DType::Bf16)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_window_layers"), "{e}");
}

#[test]
fn fused_attention_keeps_scores_and_probabilities_on_chip() {
    // transformer_small prefill, fp16: B 1, H 8, S 128, hd 64. Scores C and probabilities A
    // are each 8·128·128 = 131 072 elements = 262 144 B. Materialized: scores GEMM writes C,
    // softmax reads and writes 2·262 144, values GEMM reads A. Fused removes exactly
    // 262 144 (C) + 524 288 (softmax) + 262 144 (A) = 1 048 576 B; FLOPs are unchanged.
    let b = transformer_preset("transformer_small").unwrap();
    let fused = TransformerBlock {
        attention_kernel: AttentionKernel::Fused,
        ..b.clone()
    };
    let (m, f) = (
        analyze_transformer(&b, &hw()).unwrap(),
        analyze_transformer(&fused, &hw()).unwrap(),
    );
    assert_eq!(m.totals.dram_bytes - f.totals.dram_bytes, 1_048_576);
    assert_eq!(m.totals.flops, f.totals.flops);
    let scores = f.gemms.iter().find(|g| g.name == "attn_scores").unwrap();
    // Q 8·128·64 + K 8·128·64 elements, 2 B each = 262 144 B; C not written.
    assert_eq!(scores.compulsory_bytes, 262_144);
    let sm = f.non_gemm.iter().find(|o| o.name == "softmax").unwrap();
    assert_eq!((sm.dram_bytes, sm.flops), (0, 5 * 131_072));
}

#[test]
fn quantization_groups_count_scales_and_zero_points() {
    // Llama-3-8B decode, batch 1, int4 weights in groups of 128 along K.
    let mut m = hf(LLAMA3, Phase::Decode, 1, 1023, 1);
    m.block.weight_dtype = Some(DType::Int4);
    let plain = analyze_model(&m, &hw()).unwrap();
    m.block.weight_groups = Some(QuantGroups {
        size: 128,
        zero_points: false,
    });
    let scaled = analyze_model(&m, &hw()).unwrap();
    m.block.weight_groups = Some(QuantGroups {
        size: 128,
        zero_points: true,
    });
    let zeroed = analyze_model(&m, &hw()).unwrap();
    // The whole model, 8 030 261 248 params: ⌈P/128⌉ = 62 736 416 groups (P = 128 ·
    // 62 736 416 exactly); fp16 scales add 62 736 416 · 2 B = 125 472 832 B to the
    // 4 015 130 624 B of int4 values (4.25 bits per weight); int4 zero points add 0.5 B
    // more per group, 31 368 208 B (4.5 bits per weight).
    assert_eq!(plain.totals.weight_bytes, 4_015_130_624);
    assert_eq!(scaled.totals.weight_bytes, 4_015_130_624 + 125_472_832);
    assert_eq!(
        zeroed.totals.weight_bytes,
        4_015_130_624 + 125_472_832 + 31_368_208
    );
    // q_proj reads its 4096 × 4096 weight: 8 388 608 B of values, 32 · 4096 = 131 072
    // groups · (2 + 0.5) B = 327 680 B; A and C (bf16, 4096 each) 16 384 B.
    let qp = |a: &ModelAnalysis| {
        a.block
            .gemms
            .iter()
            .find(|g| g.name == "q_proj")
            .unwrap()
            .compulsory_bytes
    };
    assert_eq!(qp(&plain), 8_388_608 + 16_384);
    assert_eq!(qp(&zeroed), 8_388_608 + 327_680 + 16_384);
    // Groups without a narrower weight dtype, or of size 0, are errors naming the field.
    m.block.weight_dtype = None;
    let e = analyze_model(&m, &hw()).unwrap_err().to_string();
    assert!(e.contains("weight_groups") && e.contains("narrower"), "{e}");
    m.block.weight_dtype = Some(DType::Int4);
    m.block.weight_groups = Some(QuantGroups {
        size: 0,
        zero_points: false,
    });
    let e = analyze_model(&m, &hw()).unwrap_err().to_string();
    assert!(e.contains("weight_groups.size"), "{e}");
}

#[test]
fn weight_only_and_kv_dtypes_count_bytes_at_their_own_width() {
    // Llama-3-8B decode, batch 1, bf16 activations, int4 weights, fp8 KV cache, L = 1024.
    let mut m = hf(LLAMA3, Phase::Decode, 1, 1023, 1);
    let bf16 = analyze_model(&m, &hw()).unwrap();
    m.block.weight_dtype = Some(DType::Int4);
    m.block.kv_dtype = Some(DType::Fp8);
    let q = analyze_model(&m, &hw()).unwrap();
    // Weights: 8 030 261 248 params at 4 bits = 4 015 130 624 B (bf16: 16 060 522 496 B).
    assert_eq!(bf16.totals.weight_bytes, 16_060_522_496);
    assert_eq!(q.totals.weight_bytes, 4_015_130_624);
    // KV cache per layer: 2·8·128·1024 = 2 097 152 elements, 1 B each in fp8, ×32 layers.
    assert_eq!(q.totals.kv_cache_bytes, 32 * 2_097_152);
    assert_eq!(bf16.totals.kv_cache_bytes, 2 * 32 * 2_097_152);
    // The q projection reads its 4096·4096 weight at 4 bits: 8 388 608 B instead of
    // 33 554 432; A (1·4096) and C (1·4096) stay bf16: 8 192 + 8 192.
    let qp = |a: &ModelAnalysis| {
        a.block
            .gemms
            .iter()
            .find(|g| g.name == "q_proj")
            .unwrap()
            .clone()
    };
    assert_eq!(qp(&bf16).compulsory_bytes, 33_554_432 + 16_384);
    assert_eq!(qp(&q).compulsory_bytes, 8_388_608 + 16_384);
    // Scores read K from the fp8 cache: per KV head 1024·128 elements, 8 heads = 1 048 576 B.
    let s = q
        .block
        .gemms
        .iter()
        .find(|g| g.name == "attn_scores")
        .unwrap();
    let sb = bf16
        .block
        .gemms
        .iter()
        .find(|g| g.name == "attn_scores")
        .unwrap();
    assert_eq!(sb.compulsory_bytes - s.compulsory_bytes, 1_048_576);
    // The arithmetic is unchanged.
    assert_eq!(q.totals.flops, bf16.totals.flops);
}

#[test]
fn partial_rotary_rotates_a_share_of_each_head() {
    // Llama-3-8B with partial_rotary_factor 0.25: r = ⌊128·0.25⌋ = 32 channels. Prefill of
    // 16 tokens: rotary elements T·(H+Hkv)·r = 16·(32+8)·32 = 20 480 (full: 81 920), tables
    // 2·16·32 = 1 024; 3 FLOPs per element.
    let v: serde_json::Value = serde_json::from_str(LLAMA3).unwrap();
    let mut o = v.as_object().unwrap().clone();
    o.insert("partial_rotary_factor".into(), serde_json::json!(0.25));
    let t = serde_json::to_string(&o).unwrap();
    let m = decoder_from_hf_config(&t, "c.json", 1, 16, Phase::Prefill, 0, DType::Bf16).unwrap();
    assert_eq!(m.block.rotary_dims, Some(32));
    let d = m.block.decompose().unwrap();
    let r = d.non_gemm.iter().find(|o| o.name == "rotary").unwrap();
    assert_eq!((r.elements, r.flops), (20_480, 61_440));
    assert_eq!(r.bytes_read, 2 * (20_480 + 1_024));
    // Parameters do not change.
    assert_eq!(m.weight_params().unwrap(), 8_030_261_248);
    let bad = TransformerBlock {
        rotary_dims: Some(129),
        ..m.block.clone()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("rotary_dims"));
}
