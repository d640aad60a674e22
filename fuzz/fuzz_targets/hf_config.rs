#![no_main]
//! Fuzz target: Hugging Face config.json to a decoder model, prefill and decode.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            use tensorforge_core::transformer::{decoder_from_hf_config, Phase};
            let _ = decoder_from_hf_config(
                text,
                "config.json",
                1,
                128,
                Phase::Prefill,
                0,
                tensorforge_core::DType::Fp16,
            );
            let _ = decoder_from_hf_config(
                text,
                "config.json",
                4,
                1,
                Phase::Decode,
                512,
                tensorforge_core::DType::Bf16,
            );
        }
    });
});
