//! Reading a graph file: the one place that decides how a path is read. A path ending in
//! `.onnx` is imported (its symbolic dims bound by the options, its initializers and
//! `Constant` tensors returned as weights, each output's dims labelled with the model's
//! symbolic names); any other path is the JSON graph format, which carries no weights.
//! Left out: graph formats other than these two.

use crate::error::{GraphError, Result};
use crate::onnx::{import_onnx_file_with, ImportOptions};
use crate::Graph;
use std::collections::HashMap;

/// A loaded graph, its weights by tensor name, and its outputs' dims by output name.
pub type Loaded = (
    Graph,
    HashMap<String, Vec<f32>>,
    HashMap<String, Vec<String>>,
);

/// Load `path` (JSON or ONNX). With `runnable`, an ONNX model holding any op that cannot
/// execute is an error listing them all.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("tf-load-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let p = dir.join("g.json");
/// std::fs::write(&p, r#"{"nodes":[{"name":"x","op":"Input","attrs":{"shape":[2],"dtype":"fp32"}},
///   {"name":"y","op":"Exp","inputs":["x"]}]}"#).unwrap();
/// let (g, weights, _) = tensorforge_graph::load::load_graph(p.to_str().unwrap(),
///     &Default::default(), false).unwrap();
/// assert_eq!(g.nodes.len(), 2);
/// assert!(weights.is_empty());
/// ```
pub fn load_graph(path: &str, options: &ImportOptions, runnable: bool) -> Result<Loaded> {
    if path.to_ascii_lowercase().ends_with(".onnx") {
        let imp = import_onnx_file_with(path, options)?;
        if runnable {
            imp.require_runnable(path)?;
        }
        let dims = if imp.dim_params.values().flatten().any(|d| d.is_some()) {
            imp.output_dims()
                .map_err(|e| GraphError::File {
                    file: path.to_string(),
                    detail: e.to_string(),
                })?
                .into_iter()
                .collect()
        } else {
            HashMap::new()
        };
        return Ok((imp.graph, imp.weights, dims));
    }
    let file = |detail: String| GraphError::File {
        file: path.to_string(),
        detail,
    };
    let bytes = std::fs::read(path).map_err(|e| file(format!("cannot read file: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| file("file is not valid UTF-8".into()))?;
    let g = Graph::from_json_str(&text).map_err(|e| file(e.to_string()))?;
    Ok((g, HashMap::new(), HashMap::new()))
}
