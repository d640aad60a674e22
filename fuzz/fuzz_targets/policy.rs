#![no_main]
//! Fuzz target: gate policy TOML.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = tensorforge_ops::policy::Policy::from_toml_str(text, "policy.toml");
        }
    });
});
