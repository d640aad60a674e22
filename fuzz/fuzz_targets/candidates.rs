#![no_main]
//! Fuzz target: design-space (explore candidates) TOML.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = tensorforge_core::dse::DesignSpace::from_toml_str(text, "candidates.toml");
        }
    });
});
