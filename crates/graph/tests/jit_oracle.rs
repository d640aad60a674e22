//! The JIT against its oracle, the interpreter: every example graph, every ONNX fixture and
//! property-generated graphs run through the fused program twice (interpreted, and with the
//! kernels the JIT compiled) on the same seeded inputs. Outputs must agree to 2e-6 of the
//! output's largest magnitude (the JIT's exp/log polynomials are a few ulp from libm's) and
//! have the same non-finite values. CI has a C compiler (`cc` links every Rust binary), so
//! the test requires one rather than skipping.

mod common;

use std::collections::HashMap;
use std::path::Path;
use tensorforge_graph::exec::{execute_with, fill_inputs, ExecResult, Pool};
use tensorforge_graph::fusion::compile;
use tensorforge_graph::synth::synthetic_graph;
use tensorforge_graph::{jit, Graph};

fn agree(label: &str, a: &ExecResult, b: &ExecResult) {
    for ((na, sa, va), (nb, sb, vb)) in a.outputs.iter().zip(&b.outputs) {
        assert_eq!((na, sa), (nb, sb), "{label}");
        let scale = vb
            .iter()
            .filter(|v| v.is_finite())
            .fold(1e-30f32, |m, v| m.max(v.abs()));
        for (i, (x, y)) in va.iter().zip(vb).enumerate() {
            if x.is_finite() || y.is_finite() {
                let err = (x - y).abs();
                assert!(
                    err <= 2e-6 * scale,
                    "{label} `{na}`[{i}]: jit {x} vs interpreter {y} (scale {scale})"
                );
            } else {
                assert!(
                    (x.is_nan() && y.is_nan()) || x == y,
                    "{label} `{na}`[{i}]: jit {x} vs interpreter {y}"
                );
            }
        }
    }
}

/// Runs both paths; returns how many kernels ran compiled.
fn check(label: &str, g: &Graph, weights: HashMap<String, Vec<f32>>) -> usize {
    let c = compile(g).unwrap();
    let j = jit::compile(&c.fused).unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut ins = weights;
    fill_inputs(&c.fused.graph, &mut ins, 7).unwrap();
    let interp = execute_with(&c.fused, &ins, &mut Pool::default(), None).unwrap();
    let native = execute_with(&c.fused, &ins, &mut Pool::default(), Some(&j)).unwrap();
    agree(label, &native, &interp);
    j.compiled_count()
}

#[test]
fn a_compiler_is_present() {
    assert!(
        jit::compiler_available(),
        "no C compiler (set CC or install cc)"
    );
}

#[test]
fn example_graphs_agree_with_the_interpreter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/graphs");
    let mut compiled = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let g = Graph::from_json_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            compiled += check(&p.display().to_string(), &g, HashMap::new());
        }
    }
    // elementwise_chain, logaddexp_chain, residual_layernorm and attention_softmax each have
    // at least one elementwise or row kernel.
    assert!(compiled >= 4, "{compiled}");
}

#[test]
fn onnx_fixtures_agree_with_the_interpreter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/onnx");
    for e in std::fs::read_dir(&dir).unwrap() {
        let d = e.unwrap().path();
        if d.join("model.onnx").exists() {
            // The fixture's own inputs (valid ids and masks), which also bind the symbolic
            // dims of the TorchScript exports.
            let inputs = common::npy_dir(&d.join("inputs"));
            let options = tensorforge_graph::onnx::ImportOptions {
                input_shapes: inputs
                    .iter()
                    .map(|(k, (s, _))| (k.clone(), s.clone()))
                    .collect(),
                ..Default::default()
            };
            let imp =
                tensorforge_graph::onnx::import_onnx_file_with(d.join("model.onnx"), &options)
                    .unwrap_or_else(|e| panic!("{e}"));
            let mut ins = imp.weights;
            ins.extend(inputs.into_iter().map(|(k, (_, v))| (k, v)));
            check(&d.display().to_string(), &imp.graph, ins);
        }
    }
}

#[test]
fn synthetic_graphs_agree_with_the_interpreter() {
    for seed in 0..12u64 {
        let g = synthetic_graph(24, 8 + seed as usize % 5, 32 + 3 * seed as usize, seed);
        check(&format!("synthetic seed {seed}"), &g, HashMap::new());
    }
}

/// Row ops that read their rows straight from an input stream the next row while they work
/// on this one (a norm takes the next row's statistic in its writing loop, the softmax
/// family prefetches inside its exponential's loop; `codegen::c`). Rows of 1000 come in
/// blocks of 16 per call (the first row of each block takes its statistic alone), rows of 7
/// take the helpers' short-row path, and a second graph feeds two inputs to one softmax.
#[test]
fn row_ops_reading_inputs_directly_agree_with_the_interpreter() {
    for (rows, cols) in [(40usize, 1000usize), (9, 7), (3, 16)] {
        let shape = format!("[{rows},{cols}]");
        let g = Graph::from_json_str(&format!(
            r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":{shape},"dtype":"fp32"}}}},
              {{"name":"g","op":"Weight","attrs":{{"shape":[{cols}],"dtype":"fp32"}}}},
              {{"name":"b","op":"Weight","attrs":{{"shape":[{cols}],"dtype":"fp32"}}}},
              {{"name":"rms","op":"RMSNorm","inputs":["x","g"],"attrs":{{"eps":1e-6}}}},
              {{"name":"ln","op":"LayerNorm","inputs":["x","g","b"],"attrs":{{"eps":1e-5}}}},
              {{"name":"sm","op":"Softmax","inputs":["x"],"attrs":{{"axis":-1}}}},
              {{"name":"lsm","op":"LogSoftmax","inputs":["x"],"attrs":{{"axis":-1}}}},
              {{"name":"lse","op":"LogSumExp","inputs":["x"],"attrs":{{"axis":-1}}}}]}}"#
        ))
        .unwrap();
        let n = check(&format!("row ops {rows}x{cols}"), &g, HashMap::new());
        assert!(n >= 1, "{rows}x{cols}: {n} compiled kernels");
        let g = Graph::from_json_str(&format!(
            r#"{{"nodes":[
              {{"name":"s","op":"Input","attrs":{{"shape":{shape},"dtype":"fp32"}}}},
              {{"name":"mask","op":"Input","attrs":{{"shape":{shape},"dtype":"fp32"}}}},
              {{"name":"h","op":"Add","inputs":["s","mask"]}},
              {{"name":"p","op":"Softmax","inputs":["h"],"attrs":{{"axis":-1}}}}]}}"#
        ))
        .unwrap();
        assert_eq!(
            check(&format!("masked softmax {rows}x{cols}"), &g, HashMap::new()),
            1
        );
    }
}

/// A reduction over rows of one column (EfficientNet's squeeze-excite takes the mean of a
/// 1 × 1 map) after an elementwise prologue, read again in the same kernel: the generated
/// C once left its value undeclared and unstored, the compiler refused the program and the
/// whole model ran interpreted.
#[test]
fn reductions_over_rows_of_one_column_compile() {
    for op in ["ReduceMean", "ReduceSum", "ReduceMax", "LogSumExp"] {
        let g = Graph::from_json_str(&format!(
            r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":[2,24,1],"dtype":"fp32"}}}},
              {{"name":"s","op":"Sigmoid","inputs":["x"]}},
              {{"name":"m","op":"Mul","inputs":["x","s"]}},
              {{"name":"r","op":"{op}","inputs":["m"],"attrs":{{"axis":-1,"keepdims":true}}}},
              {{"name":"y","op":"Add","inputs":["r","x"]}}]}}"#
        ))
        .unwrap();
        let n = check(&format!("{op} over rows of one column"), &g, HashMap::new());
        assert!(n >= 1, "{op}: {n} compiled kernels");
    }
}

/// Broadcast inputs whose rows span several trailing dims (`codegen::merge_trailing`): a
/// per-channel scale `[1, C, 1, 1]` over `[N, C, H, W]` (squeeze-and-excitation) is one
/// block of `H·W` values, so rows of `H·W`; beside a bias over the last dim (blocks of `W`)
/// and a per-row input `[1, 1, H, 1]`, rows of `W`; and over a 14 × 14 map, rows of 196.
#[test]
fn broadcasts_over_merged_trailing_dims_agree_with_the_interpreter() {
    let graph = |x: &str, s: &str, extra: &str| {
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":{x},"dtype":"fp32"}}}},
              {{"name":"s","op":"Input","attrs":{{"shape":{s},"dtype":"fp32"}}}},
              {{"name":"y","op":"Mul","inputs":["x","s"]}}{extra}]}}"#
        ))
        .unwrap()
    };
    let cases = [
        graph("[2,6,5,7]", "[1,6,1,1]", ""),
        graph("[1,96,14,14]", "[1,96,1,1]", ""),
        graph(
            "[2,6,5,7]",
            "[1,6,1,1]",
            r#",
              {"name":"b","op":"Input","attrs":{"shape":[7],"dtype":"fp32"}},
              {"name":"t","op":"Input","attrs":{"shape":[1,1,5,1],"dtype":"fp32"}},
              {"name":"u","op":"Add","inputs":["y","b"]},
              {"name":"v","op":"Add","inputs":["u","t"]}"#,
        ),
    ];
    for (i, g) in cases.iter().enumerate() {
        assert_eq!(check(&format!("broadcast {i}"), g, HashMap::new()), 1);
    }
}
