//! Real ONNX models run with their own weights and agree with onnxruntime: each fixture in
//! `examples/onnx/<name>/` (made by `tools/make_onnx_fixtures.py`, weights random but fixed)
//! is imported, its inputs read from `inputs/*.npy`, run through both the unfused and the
//! fused program, and every output compared with `expected/*.npy`, which onnxruntime's CPU
//! provider computed. Bound (issue 11): max |ours − onnxruntime| ≤ 1e-5 × max |onnxruntime|.
//! No Python is needed to run this test.

mod common;

use common::{assert_matches, npy_dir, root};
use std::collections::HashMap;
use tensorforge_graph::exec::execute;
use tensorforge_graph::fusion::compile;
use tensorforge_graph::onnx::import_onnx_file;

fn check(name: &str) {
    let dir = root().join(name);
    let imp = import_onnx_file(dir.join("model.onnx")).unwrap();
    assert!(
        imp.opaque.is_empty(),
        "{name}: opaque nodes {:?}",
        imp.opaque
    );
    let c = compile(&imp.graph).unwrap();
    let mut ins: HashMap<String, Vec<f32>> = imp.weights.clone();
    for (k, (_, v)) in npy_dir(&dir.join("inputs")) {
        ins.insert(k, v);
    }
    let expected = npy_dir(&dir.join("expected"));
    for (label, prog) in [("unfused", &c.unfused), ("fused", &c.fused)] {
        let r = execute(prog, &ins).unwrap();
        assert_matches(&format!("{name} {label}"), &expected, &r.outputs);
    }
}

#[test]
fn tiny_mlp_matches_onnxruntime() {
    check("tiny_mlp");
}

#[test]
fn mlp_gelu_erf_matches_onnxruntime() {
    check("mlp_gelu_erf");
}

#[test]
fn bert_block_matches_onnxruntime() {
    check("bert_block");
}

#[test]
fn llama_block_matches_onnxruntime() {
    // RMSNorm as Pow/ReduceMean/Sqrt/Div, rotary with Slice (one end = INT64_MAX) / Neg /
    // Concat, a BOOL causal mask through Where with −inf, SwiGLU.
    check("llama_block");
}

#[test]
fn convnet_matches_onnxruntime() {
    // Conv (pads 1) → BatchNormalization (folded) → Relu → MaxPool 2×2 → Conv → Relu →
    // GlobalAveragePool → Flatten → Gemm (transB = 1, bias).
    check("convnet");
}

#[test]
fn gpt_embed_matches_onnxruntime() {
    // int64 token ids → Gather; Shape → Gather → Range → Unsqueeze position ids (folded at
    // import); Split; Shape/Concat head shapes; ConstantOfShape −inf fill; Expand; fp16 table
    // Cast to fp32; MatMul with a [1,64,64] weight, a 1-D weight and a [2,64,16] weight.
    check("gpt_embed");
}

#[test]
fn qdq_mlp_matches_onnxruntime() {
    // QuantizeLinear / DequantizeLinear with int8 zero points (one non-zero), an int8 weight.
    check("qdq_mlp");
}

#[test]
fn shape_arithmetic_is_folded_not_run() {
    // In gpt_embed every Shape, Range, Concat, Unsqueeze, Sqrt and Cast of a shape and the
    // causal mask (LessOrEqual of two Ranges) is folded at import: none is an IR node.
    let imp = import_onnx_file(root().join("gpt_embed/model.onnx")).unwrap();
    let names: Vec<&str> = imp.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    for folded in [
        "ids_shape",
        "seq_len",
        "positions",
        "heads_shape",
        "attn_scale",
        "causal_mask",
    ] {
        assert!(!names.contains(&folded), "{folded} is an IR node");
    }
    // The token lookup stays a runtime Gather (the ids are an input); the position lookup
    // reads a constant table (fp16 Cast to fp32) at constant positions, so it is folded
    // into a constant [1, 8, 64], as onnxruntime's constant folding does.
    let gathers = imp
        .graph
        .nodes
        .iter()
        .filter(|n| n.op.name() == "Gather")
        .count();
    assert_eq!(gathers, 1);
    assert!(!names.contains(&"pos_emb"));
}

/// The weights are the model's: a model whose initializer is changed gives other outputs,
/// and the weight bytes are the initializers' (fp32: 4 bytes each).
#[test]
fn weights_are_the_models_own() {
    let imp = import_onnx_file(root().join("mlp_gelu_erf/model.onnx")).unwrap();
    // x[4,64] @ W1[64,128] + b1[128], @ W2[128,32] + b2[32]: 64·128 + 128 + 128·32 + 32
    // = 12 448 weight values (scalars such as 0.5 and √2 are Constant nodes, not weights).
    let n: usize = imp.weights.values().map(Vec::len).sum();
    assert_eq!(n, 64 * 128 + 128 + 128 * 32 + 32);
    assert!(imp.weights.values().flatten().all(|v| v.is_finite()));
}
