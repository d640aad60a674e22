//! Every input the fuzzers found crashing (`fuzz/regressions/<target>/`, written by
//! `tools/fuzz_all.sh`) is replayed through the same calls as its fuzz target: each must
//! give a result or an error, never a panic. The first entry: an ONNX `Dropout` node
//! without inputs indexed `input[0]` (found 2026-12-03, onnx target).

use std::path::Path;

fn files(target: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn onnx_regressions_are_errors_not_panics() {
    let found = files("onnx");
    assert!(
        !found.is_empty(),
        "fuzz/regressions/onnx holds the Dropout case"
    );
    for f in found {
        let data = std::fs::read(&f).unwrap();
        if let Ok(imp) = tensorforge_graph::onnx::import_onnx_bytes(&data, "fuzz.onnx") {
            let _ = tensorforge_graph::fusion::compile(&imp.graph);
        }
    }
}

#[test]
fn graph_json_regressions_are_errors_not_panics() {
    for f in files("graph_json") {
        let data = std::fs::read(&f).unwrap();
        if let Ok(text) = std::str::from_utf8(&data) {
            if let Ok(g) = tensorforge_graph::Graph::from_json_str(text) {
                let _ = tensorforge_graph::fusion::compile(&g);
            }
        }
    }
}
