#![no_main]
//! Fuzz target: ONNX protobuf: the wire pre-pass, decoding and import.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(imp) = tensorforge_graph::onnx::import_onnx_bytes(data, "fuzz.onnx") {
        let _ = tensorforge_graph::fusion::compile(&imp.graph);
    }
});
