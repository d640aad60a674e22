#![no_main]
//! Fuzz target: graph JSON: parse, validate, fuse (the whole front end a graph file reaches).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            if let Ok(g) = tensorforge_graph::Graph::from_json_str(text) {
                let _ = tensorforge_graph::fusion::compile(&g);
            }
        }
    });
});
