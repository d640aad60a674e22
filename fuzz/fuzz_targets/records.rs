#![no_main]
//! Fuzz target: record JSON lines and arrays.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = tensorforge_store::parse_records_text(text, "records.jsonl");
        }
    });
});
