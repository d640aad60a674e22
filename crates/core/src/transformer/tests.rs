//! Tests of the transformer model: decompositions against hand-checked counts, presets, bad
//! blocks, Hugging Face configs with published parameter counts, and a closed-form property.

use super::*;
use crate::dtype::DType;
use crate::error::CoreError;
use crate::gemm::{Gemm, GemmRole, NamedGemm};
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
