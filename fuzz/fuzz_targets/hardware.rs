#![no_main]
//! Fuzz target: hardware specs, TOML and JSON.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = tensorforge_core::HardwareSpec::from_toml_str(text, "fuzz.toml");
            let _ = tensorforge_core::HardwareSpec::from_json_str(text, "fuzz.json");
        }
    });
});
