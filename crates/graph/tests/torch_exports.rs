//! What torch.onnx writes runs and agrees with onnxruntime: every fixture in
//! `examples/onnx/<model>_<attention>_<exporter>/` (made by `tools/export_real_onnx.py`:
//! BERT, GPT-2, Llama (rotary, RMSNorm, SwiGLU, grouped-query attention), ViT and a
//! ResNet-style CNN, hidden <= 128, 2 layers, random but fixed weights; exported by the
//! TorchScript exporter with dynamic batch and sequence dims and by the dynamo exporter; with
//! an attention mask that pads the second sequence, SDPA and eager attention) is imported
//! with its symbolic dims bound from its input files, run unfused, fused, and fused through
//! the JIT when a C compiler is present, and compared with onnxruntime's stored outputs:
//! max |ours − onnxruntime| ≤ 1e-5 × max |onnxruntime| (the issue asks 1e-4). No Python.

mod common;

use common::{assert_matches, npy_dir, root};
use std::collections::HashMap;
use std::path::PathBuf;
use tensorforge_graph::exec::{execute, execute_with, Pool};
use tensorforge_graph::fusion::compile;
use tensorforge_graph::onnx::{import_onnx_file_with, ImportOptions};

/// The exported fixtures: folders holding a `meta.json`.
fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("meta.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

/// A fixture's input files by name: shape and values.
type Npys = HashMap<String, (Vec<usize>, Vec<f32>)>;

/// Fixture `name` imported with its symbolic dims bound from its input files, and those
/// inputs by name.
fn import(name: &str) -> (tensorforge_graph::onnx::OnnxImport, Npys) {
    let dir = root().join(name);
    let inputs = npy_dir(&dir.join("inputs"));
    let options = ImportOptions {
        input_shapes: inputs
            .iter()
            .map(|(k, (s, _))| (k.clone(), s.clone()))
            .collect(),
        ..ImportOptions::default()
    };
    let imp = import_onnx_file_with(dir.join("model.onnx"), &options)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (imp, inputs)
}

fn check(name: &str) -> Vec<String> {
    let dir = root().join(name);
    let (imp, inputs) = import(name);
    imp.require_runnable(name).unwrap_or_else(|e| panic!("{e}"));
    let c = compile(&imp.graph).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut ins: HashMap<String, Vec<f32>> = imp.weights.clone();
    for (k, (_, v)) in inputs {
        ins.insert(k, v);
    }
    let expected = npy_dir(&dir.join("expected"));
    let jit = tensorforge_graph::jit::compile(&c.fused).ok();
    let mut runs = vec![
        ("unfused", execute(&c.unfused, &ins)),
        ("fused", execute(&c.fused, &ins)),
    ];
    if let Some(j) = &jit {
        runs.push((
            "fused+jit",
            execute_with(&c.fused, &ins, &mut Pool::default(), Some(j)),
        ));
    }
    let mut done = vec![];
    for (label, r) in runs {
        let r = r.unwrap_or_else(|e| panic!("{name} {label}: {e}"));
        assert_matches(&format!("{name} {label}"), &expected, &r.outputs);
        done.push(label.to_string());
    }
    done
}

#[test]
fn every_torch_export_runs_and_matches_onnxruntime() {
    let names = fixtures();
    // 4 transformer families × 2 attentions × 2 exporters + the CNN × 2 exporters, and
    // BERT and GPT-2 through onnxruntime's transformer optimizer (the attention family).
    assert_eq!(names.len(), 20, "{names:?}");
    assert!(names.contains(&"bert_ort_optimized".to_string()));
    for family in ["bert", "gpt2", "llama", "vit"] {
        for attn in ["sdpa", "eager"] {
            for exporter in ["ts", "dynamo"] {
                let n = format!("{family}_{attn}_{exporter}");
                assert!(names.contains(&n), "missing fixture {n}");
            }
        }
    }
    for n in &names {
        let legs = check(n);
        eprintln!("{n}: {}", legs.join(", "));
        assert!(legs.len() >= 2, "{n}: {legs:?}");
    }
}

#[test]
fn symbolic_dims_need_a_binding_and_say_which() {
    // The TorchScript exports declare `batch` and `sequence` dims.
    let e = tensorforge_graph::onnx::import_onnx_file(root().join("bert_sdpa_ts/model.onnx"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`input_ids` dim 0 is symbolic (`batch`)") && e.contains("--dim batch=N"),
        "{e}"
    );
    // Bound by name instead of by input file: the same graph.
    let mut o = ImportOptions::default();
    o.dims.insert("batch".into(), 2);
    o.dims.insert("sequence".into(), 8);
    let imp = import_onnx_file_with(root().join("bert_sdpa_ts/model.onnx"), &o).unwrap();
    let input = imp
        .graph
        .nodes
        .iter()
        .find(|n| n.name == "input_ids")
        .unwrap();
    assert_eq!(
        serde_json::to_value(&input.op).unwrap()["attrs"]["shape"],
        serde_json::json!([2, 8])
    );
    // A given input that contradicts a fixed dim is refused, naming both.
    o.input_shapes.insert("input_ids".into(), vec![2, 8, 1]);
    let e = import_onnx_file_with(root().join("bert_sdpa_ts/model.onnx"), &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 2") && e.contains("[2, 8, 1]"), "{e}");
}

/// The TorchScript exports declare `input_ids` as [batch, sequence]; each model's output is
/// [batch, sequence, hidden or vocabulary] (the models' definitions: BERT's last hidden state
/// of width 64, GPT-2's and Llama's logits over 512 tokens). The names must come through the
/// embedding Gather, the attention's Reshapes and Transposes, every MatMul and norm, and
/// onnxruntime's fused ops, to the output. Bound to 3 and 5 so no two sizes coincide.
#[test]
fn symbolic_dims_are_carried_to_the_outputs() {
    let mut o = ImportOptions::default();
    o.dims.insert("batch".into(), 3);
    o.dims.insert("sequence".into(), 5);
    let cases = [
        ("bert_sdpa_ts", "64"),
        ("bert_eager_ts", "64"),
        ("bert_ort_optimized", "64"),
        ("gpt2_sdpa_ts", "512"),
        ("gpt2_eager_ts", "512"),
        ("gpt2_ort_optimized", "512"),
        ("llama_sdpa_ts", "512"),
        ("llama_eager_ts", "512"),
    ];
    for (name, width) in cases {
        let imp = import_onnx_file_with(root().join(name).join("model.onnx"), &o).unwrap();
        assert_eq!(
            imp.dim_params["input_ids"],
            [Some("batch".to_string()), Some("sequence".to_string())]
        );
        let outs = imp.output_dims().unwrap();
        assert_eq!(outs[0].1, ["batch", "sequence", width], "{name}");
    }
    // The dynamo exports fix every dim: nothing to carry.
    let imp = import_onnx_file_with(root().join("bert_sdpa_dynamo/model.onnx"), &o).unwrap();
    assert_eq!(imp.output_dims().unwrap()[0].1, ["2", "8", "64"]);
}

/// Every single-op fixture of `examples/onnx/ops/` (`tools/make_op_fixtures.py`: the op
/// table's functions on NaN, ±inf, ±0 and halves, comparisons and logic with broadcasting,
/// GatherND with constant and run-time indices, CumSum, Pad in every mode, LSTM and GRU
/// unrolled, with every output; 1-D convolutions, `auto_pad`, InstanceNormalization,
/// GatherElements, ReduceL2 and its kin) against onnxruntime (two batch-major recurrent cases, which
/// onnxruntime refuses, against the ONNX reference evaluator, and two InstanceNormalization
/// cases against float64 NumPy: see their REFERENCE file), through the
/// interpreter and the JIT: NaN where onnxruntime has NaN, the same infinities, and
/// otherwise within 1e-6 relative (sin and cos may differ in the last bit).
#[test]
fn single_ops_match_onnxruntime() {
    let ops = root().join("ops");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&ops)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    // 21 op-table and GatherND cases, 4 CumSum, 5 Pad, 5 Trilu / folding, 3 If, 3 Clip,
    // 2 Mod, 1 Tile, 7 Einsum, 1 ScatterND, 2 com.microsoft Attention, 3 LSTM, 2 GRU;
    // then 2 Conv1d, 4 auto_pad, 2 InstanceNormalization, 2 GatherElements, 5 ReduceL2 and
    // kin (`exporter_ops`).
    assert!(cases.len() >= 74, "{cases:?}");
    for dir in cases {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let inputs = npy_dir(&dir.join("inputs"));
        let imp = tensorforge_graph::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        imp.require_runnable(&name)
            .unwrap_or_else(|e| panic!("{e}"));
        let c = compile(&imp.graph).unwrap();
        let mut ins: HashMap<String, Vec<f32>> = imp.weights.clone();
        for (k, (_, v)) in inputs {
            ins.insert(k, v);
        }
        let (shape, want) = &npy_dir(&dir.join("expected"))["y"];
        let jit = tensorforge_graph::jit::compile(&c.fused).ok();
        let mut runs = vec![("interpreter", execute(&c.fused, &ins).unwrap())];
        if let Some(j) = &jit {
            runs.push((
                "jit",
                execute_with(&c.fused, &ins, &mut Pool::default(), Some(j)).unwrap(),
            ));
        }
        for (label, r) in runs {
            let (_, got_shape, got) = r.outputs.iter().find(|(n, _, _)| n == "y").unwrap();
            assert_eq!(got_shape, shape, "{name} {label}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let ok = (g.is_nan() && w.is_nan())
                    || g == w
                    || (g - w).abs() <= 1e-6 * w.abs().max(1.0);
                assert!(ok, "{name} {label} [{i}]: {g} vs onnxruntime {w}");
            }
        }
    }
}

#[test]
fn constants_fold_through_trilu_matmul_and_trigonometry() {
    // The constant Trilu mask and the rotary table (MatMul of inv_freq and positions, its
    // Transpose, Sin, Cos and Concat) are computed at import: none is an IR node, and the
    // graph is just the input, the folded constant and the Mul.
    for case in ["trilu_const_folded", "rotary_sin_cos_folded"] {
        let imp = tensorforge_graph::onnx::import_onnx_file(
            root().join("ops").join(case).join("model.onnx"),
        )
        .unwrap();
        let ops: Vec<&str> = imp.graph.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(ops, ["Input", "Weight", "Mul"], "{case}: {ops:?}");
    }
}

/// A long sequence: the TorchScript Llama export builds its causal mask with `LessOrEqual`
/// over the positions, [1, 1, S, S]. At S = 2048 that is 4 Mi elements, beyond what the
/// importer folds into a constant (1 Mi), so the comparison must run at run time (before,
/// the model did not load). The fused program (the attention streamed, the mask read per
/// block) agrees with the unfused one (every score materialized) on ids and a padded mask.
#[test]
fn llama_at_2048_positions_compares_its_causal_mask_at_run_time() {
    let s = 2048usize;
    let mut o = ImportOptions::default();
    o.dims.insert("batch".into(), 1);
    o.dims.insert("sequence".into(), s);
    let imp = import_onnx_file_with(root().join("llama_sdpa_ts/model.onnx"), &o)
        .unwrap_or_else(|e| panic!("{e}"));
    imp.require_runnable("llama_sdpa_ts").unwrap();
    let cmp = imp
        .graph
        .nodes
        .iter()
        .filter(|n| n.op.name() == "LessOrEqual")
        .count();
    assert_eq!(cmp, 1, "the mask's comparison is one run-time node");
    let c = compile(&imp.graph).unwrap();
    let mut ins: HashMap<String, Vec<f32>> = imp.weights.clone();
    // Token ids below the vocabulary of 512; the last 100 positions padded out.
    ins.insert(
        "input_ids".into(),
        (0..s).map(|i| ((i * 37 + 11) % 512) as f32).collect(),
    );
    ins.insert(
        "attention_mask".into(),
        (0..s)
            .map(|i| if i < s - 100 { 1.0 } else { 0.0 })
            .collect(),
    );
    let fused = execute(&c.fused, &ins).unwrap();
    let unfused = execute(&c.unfused, &ins).unwrap();
    let (ok, err, why) = tensorforge_graph::exec::compare(&fused, &unfused);
    assert!(ok, "fused vs unfused: {err} {why}");
    assert!(fused.outputs[0].2.iter().all(|v| v.is_finite()));
}

/// The ResNet's global average pooling (`mean` over H and W, ONNX ReduceMean with axes
/// [2, 3]) is one reduction over the 8 × 8 = 64 values of each map, between two views, not
/// one reduction per axis (the first over rows of only 8); the fixtures' agreement with
/// onnxruntime is checked above.
#[test]
fn a_mean_over_trailing_axes_is_one_reduction() {
    for name in ["resnet_dynamo", "resnet_ts"] {
        let (imp, _) = import(name);
        let means: Vec<&tensorforge_graph::ir::Node> = imp
            .graph
            .nodes
            .iter()
            .filter(|n| n.op.name() == "ReduceMean")
            .collect();
        assert_eq!(means.len(), 1, "{name}");
        let c = compile(&imp.graph).unwrap();
        let tg = &c.fused.graph;
        let m = tg
            .nodes
            .iter()
            .position(|n| n.op.name() == "ReduceMean")
            .unwrap();
        // [2, 32, 8, 8] flattened to [2, 32, 64], reduced over 64.
        assert_eq!(
            tg.tensors[tg.node_inputs[m][0]].shape,
            [2, 32, 64],
            "{name}"
        );
    }
}
