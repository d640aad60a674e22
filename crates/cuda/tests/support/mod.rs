//! What the CUDA crate's tests share: the example graphs and ONNX fixtures, fused, with the
//! inputs they run on (seeded values for the graphs; each fixture's own inputs, which also
//! bind the TorchScript exports' symbolic dims, and its weights).
#![allow(dead_code)] // each test file uses its own subset

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tensorforge_graph::exec::fill_inputs;
use tensorforge_graph::fusion::{compile, Program};
use tensorforge_graph::onnx::{import_onnx_file_with, ImportOptions};
use tensorforge_graph::Graph;
use tensorforge_measure::graph_run::{npy_shapes, read_inputs};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Inputs of a program: `given`, then seeded values for the rest.
pub type Inputs = HashMap<String, Vec<f32>>;

/// The fused program of fixture folder `d` (holding model.onnx and inputs/) and its inputs.
pub fn fixture(d: &Path) -> (Program, Inputs) {
    let dir = d.join("inputs");
    let dir = dir.to_str().unwrap();
    let options = ImportOptions {
        input_shapes: npy_shapes(dir).unwrap(),
        ..Default::default()
    };
    let imp = import_onnx_file_with(d.join("model.onnx"), &options)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    let p = compile(&imp.graph).unwrap().fused;
    let mut ins = imp.weights;
    ins.extend(read_inputs(dir, &p.graph).unwrap());
    fill_inputs(&p.graph, &mut ins, 5).unwrap();
    (p, ins)
}

/// Every example graph and every ONNX fixture with inputs, fused, by path, sorted.
pub fn example_programs() -> Vec<(String, Program, Inputs)> {
    let mut out = vec![];
    for e in std::fs::read_dir(root().join("examples/graphs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let g = Graph::from_json_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let prog = compile(&g).unwrap().fused;
            let mut ins = HashMap::new();
            fill_inputs(&prog.graph, &mut ins, 5).unwrap();
            out.push((p.display().to_string(), prog, ins));
        }
    }
    for e in std::fs::read_dir(root().join("examples/onnx")).unwrap() {
        let d = e.unwrap().path();
        if d.join("model.onnx").exists() && d.join("inputs").exists() {
            let (p, ins) = fixture(&d);
            out.push((d.display().to_string(), p, ins));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
