//! Helpers the ONNX fixture tests share: where the fixtures are, reading `.npy` folders, and
//! the comparison with onnxruntime's stored outputs (max |ours − expected| ≤ 1e-5 × max
//! |expected|, shapes equal).
#![allow(dead_code)] // each test file uses its own subset

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tensorforge_kernels::npy::{parse_npy, NpyData};

/// `examples/onnx`.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/onnx")
}

/// A `.npy` file as f32 (float32, float64, or int32 / int64 ids and masks: small whole
/// numbers, exact).
pub fn npy_f32(p: &Path) -> (Vec<usize>, Vec<f32>) {
    let a = parse_npy(&std::fs::read(p).unwrap()).unwrap();
    let v = match a.data {
        NpyData::F32(v) => v,
        NpyData::F64(v) => v.into_iter().map(|x| x as f32).collect(),
        NpyData::I64(v) => v.into_iter().map(|x| x as f32).collect(),
        NpyData::I32(v) => v.into_iter().map(|x| x as f32).collect(),
        _ => panic!("{}: not a float, int32 or int64 array", p.display()),
    };
    (a.shape, v)
}

/// Every `.npy` file of folder `d`, by file stem.
pub fn npy_dir(d: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "npy"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().to_string(),
                npy_f32(&p),
            )
        })
        .collect()
}

/// Every expected output is among `outputs` (name, shape, values) with its shape and within
/// 1e-5 of the largest expected magnitude.
pub fn assert_matches(
    what: &str,
    expected: &HashMap<String, (Vec<usize>, Vec<f32>)>,
    outputs: &[(String, Vec<usize>, Vec<f32>)],
) {
    for (out, (shape, want)) in expected {
        let (_, got_shape, got) = outputs
            .iter()
            .find(|(n, _, _)| n == out)
            .unwrap_or_else(|| panic!("{what}: no output `{out}`"));
        assert_eq!(got_shape, shape, "{what} {out}");
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err <= 1e-5 * scale,
            "{what} {out}: max error {err:e} vs 1e-5 × {scale}"
        );
    }
}
